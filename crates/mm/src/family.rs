//! The frames of a fork family: one [`PageAllocator`] shared by the address spaces that map
//! one guest memory.
//!
//! A *family* is an address space that started a guest memory of its own (a sandbox's first
//! process, one after `execve`) with every address space forked from it while sharing that
//! memory ([`MemoryManager::fork_sharing`](crate::MemoryManager::fork_sharing)). Its members
//! map the same frames: a private frame mapped by several members has a reference count
//! above 1 and is mapped read-only by each, and the first write copies it
//! (`docs/design/cow-fork.md` §1 (a)). Each member keeps its own VMAs and page tables, in
//! frames of the family's memory.
//!
//! The allocator sits behind a mutex that is a leaf lock: it is taken under a member's
//! `MemoryManager` mutex, for one allocator operation at a time, and never while taking
//! anything else. So does the table of *pins* ([`Pins`]): frames a host call writes into
//! after the address space's lock is dropped (a `read` into a user buffer), which a fork
//! meanwhile must copy for the child rather than share (Linux copies pinned pages at fork
//! too, `page_needs_cow_for_dma`). A family of one member (every address space on KVM, and every one on trap
//! unless its process forked with sharing) behaves as an allocator owned by its address
//! space.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use platform::Gpa;

use crate::alloc::PageAllocator;

struct Shared {
    alloc: Mutex<PageAllocator>,
    /// Address spaces holding a [`Family`] handle.
    members: AtomicUsize,
    /// Pinned frames (guest-physical address) and how many pins each has.
    pins: Mutex<HashMap<u64, u32>>,
}

/// One member's handle on its family's frames. Dropping it leaves the family; the allocator
/// (and with it the pages it still counts against the sandbox's budget) goes with the last.
pub struct Family {
    shared: Arc<Shared>,
}

impl Family {
    /// A family of one member over `alloc`.
    pub fn new(alloc: PageAllocator) -> Family {
        Family {
            shared: Arc::new(Shared {
                alloc: Mutex::new(alloc),
                members: AtomicUsize::new(1),
                pins: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// A handle for a new member (a forked address space sharing the memory).
    pub fn join(&self) -> Family {
        self.shared.members.fetch_add(1, Ordering::SeqCst);
        Family {
            shared: self.shared.clone(),
        }
    }

    /// The allocator, locked (a leaf lock: hold it for one operation).
    pub fn lock(&self) -> MutexGuard<'_, PageAllocator> {
        self.shared.alloc.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Address spaces in the family now, this one included.
    pub fn members(&self) -> usize {
        self.shared.members.load(Ordering::SeqCst)
    }

    /// Pins `frames` until the returned guard drops (see the module's doc).
    pub fn pin(&self, frames: Vec<Gpa>) -> Pins {
        let mut pins = self.shared.pins.lock().unwrap_or_else(|e| e.into_inner());
        for f in &frames {
            *pins.entry(f.raw()).or_insert(0) += 1;
        }
        Pins {
            shared: self.shared.clone(),
            frames,
        }
    }

    /// The frames pinned now.
    pub fn pinned(&self) -> HashSet<u64> {
        let pins = self.shared.pins.lock().unwrap_or_else(|e| e.into_inner());
        pins.keys().copied().collect()
    }

    /// Whether `other` is a handle on the same family.
    pub fn same_as(&self, other: &Family) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl Drop for Family {
    fn drop(&mut self) {
        self.shared.members.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Frames pinned by a host call in flight ([`Family::pin`]); dropping it unpins them.
pub struct Pins {
    shared: Arc<Shared>,
    frames: Vec<Gpa>,
}

impl Drop for Pins {
    fn drop(&mut self) {
        let mut pins = self.shared.pins.lock().unwrap_or_else(|e| e.into_inner());
        for f in &self.frames {
            if let std::collections::hash_map::Entry::Occupied(mut e) = pins.entry(f.raw()) {
                *e.get_mut() -= 1;
                if *e.get() == 0 {
                    e.remove();
                }
            }
        }
    }
}

impl std::fmt::Debug for Pins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pins")
            .field("frames", &self.frames.len())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Family")
            .field("members", &self.members())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_come_and_go_and_share_one_allocator() {
        let a = Family::new(PageAllocator::new(64 << 20));
        assert_eq!(a.members(), 1);
        let b = a.join();
        assert_eq!(a.members(), 2);
        assert!(a.same_as(&b));
        let (page, _) = b.lock().alloc().expect("a page");
        assert_eq!(a.lock().refcount(page), Ok(1));
        drop(b);
        assert_eq!(a.members(), 1);
        assert!(!a.same_as(&Family::new(PageAllocator::new(64 << 20))));
    }
}
