//! How much of a VM's own guest memory its hypervisor is told about: the memslots of the
//! own memory grow with the pages in use instead of covering the memory limit from the start.
//!
//! KVM keeps, for every page of a memslot, a reverse map for its shadow MMU and a
//! write-tracking count (about 10 bytes per 4 KiB page, vmalloc'd when the slot is made): a
//! 512 MiB sandbox paid 1.3 MiB of host kernel memory for that from its start, hot or
//! hibernated, whatever it used; a 2 GiB one 5 MiB. The page allocator hands out the lowest
//! free pages first, so what a sandbox touches is a prefix of its memory: the VM registers a
//! first slot over [`INITIAL_VISIBLE`] bytes, and the allocator asks for more
//! ([`VisibleRange::expose`]) before it hands out a page past the end, which registers one more
//! slot, at least doubling the range (a 1 GiB sandbox that fills its memory ends with 6 own
//! slots). A page is exposed before any page table can point at it, so the guest never meets a
//! guest-physical page outside every memslot.
//!
//! Own slots take their numbers from the top of the VM's memslot numbers down
//! ([`VisibleRange::slot_for`]), the shared windows from 1 up; at most [`MAX_OWN_SLOTS`] are
//! kept for them.
//!
//! Without a VM (the trap platform, whose stubs map the memfd themselves) nothing registers:
//! every page is usable, and [`VisibleRange::expose`] only records the request.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// What the first own memslot covers (or the whole memory, if smaller): the platform's
/// reserved region and the first pages of a small program.
pub const INITIAL_VISIBLE: u64 = 16 << 20;

/// Own memslots kept free of windows: 16 MiB doubled 32 times is far past any memory size.
pub const MAX_OWN_SLOTS: usize = 32;

/// Granule of a slot's end (the page allocator's chunk, and a whole 2 MiB page for the
/// shadow MMU).
const GRANULE: u64 = 4 << 20;

/// Registers the own-memory range `[start, start + len)` as memslot `slot` of the VM.
pub type Grower = dyn Fn(u32, u64, u64) -> io::Result<()> + Send + Sync;

/// The exposed prefix of one guest memory.
pub struct VisibleRange {
    size: u64,
    /// Bytes registered with the VM (0 before a VM took the memory).
    visible: AtomicU64,
    /// The highest end asked for so far.
    wanted: AtomicU64,
    /// The VM's registration, and the memslot numbers it may use.
    vm: OnceLock<(Box<Grower>, u32)>,
    /// Own slots registered after the first; serialises growth.
    grown: Mutex<u32>,
}

impl std::fmt::Debug for VisibleRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VisibleRange")
            .field("size", &self.size)
            .field("visible", &self.visible.load(Ordering::Relaxed))
            .field("wanted", &self.wanted.load(Ordering::Relaxed))
            .finish()
    }
}

impl VisibleRange {
    /// The range of a memory of `size` bytes, none of it registered yet.
    pub fn new(size: u64) -> Self {
        VisibleRange {
            size,
            visible: AtomicU64::new(0),
            wanted: AtomicU64::new(0),
            vm: OnceLock::new(),
            grown: Mutex::new(0),
        }
    }

    /// The first slot's length: [`INITIAL_VISIBLE`], or the whole memory if smaller.
    pub fn initial(&self) -> u64 {
        self.size.min(INITIAL_VISIBLE)
    }

    /// Bytes of the memory the VM knows about (0 without a VM).
    pub fn visible(&self) -> u64 {
        self.visible.load(Ordering::Acquire)
    }

    /// Own slots registered so far, the first one included (0 without a VM).
    pub fn own_slots(&self) -> usize {
        if self.vm.get().is_none() {
            return 0;
        }
        1 + *self.grown.lock().unwrap_or_else(|e| e.into_inner()) as usize
    }

    /// Called by the VM once it registered `[0, initial())` as its slot 0: from now on
    /// `grow` registers the rest as it is asked for, with slot numbers below `slot_limit`.
    /// Registers at once what was asked for before (pages a restore or a fork placed before
    /// the VM existed).
    ///
    /// # Errors
    /// The grower's, for that first growth.
    pub fn attach_vm(&self, grow: Box<Grower>, slot_limit: u32) -> io::Result<()> {
        if self.vm.set((grow, slot_limit)).is_err() {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        self.visible.store(self.initial(), Ordering::Release);
        self.expose(self.wanted.load(Ordering::Acquire))
    }

    /// The memslot number of the `k`-th own slot after the first (k from 1).
    fn slot_for(limit: u32, k: u32) -> Option<u32> {
        limit.checked_sub(k).filter(|&s| s > 0)
    }

    /// Makes `[0, end)` usable by the guest: nothing to do when it already is; else registers
    /// one more slot from the current end to at least `end` and at least twice the current
    /// range (in [`GRANULE`]s, within the memory).
    ///
    /// # Errors
    /// `EINVAL` past the memory's end; `ENOSPC` when no own slot number is left; the
    /// grower's error (the range is then unchanged, and a later call tries again).
    pub fn expose(&self, end: u64) -> io::Result<()> {
        if end > self.size {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        self.wanted.fetch_max(end, Ordering::AcqRel);
        if end <= self.visible.load(Ordering::Acquire) {
            return Ok(());
        }
        let Some((grow, limit)) = self.vm.get() else {
            return Ok(());
        };
        let mut grown = self.grown.lock().unwrap_or_else(|e| e.into_inner());
        let from = self.visible.load(Ordering::Acquire);
        if end <= from {
            return Ok(());
        }
        let to = end
            .max(from.saturating_mul(2))
            .div_ceil(GRANULE)
            .saturating_mul(GRANULE)
            .min(self.size);
        let k = *grown + 1;
        if k as usize >= MAX_OWN_SLOTS {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let slot =
            Self::slot_for(*limit, k).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOSPC))?;
        grow(slot, from, to - from)?;
        *grown = k;
        self.visible.store(to, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const MIB: u64 = 1 << 20;

    /// The registrations a grower was asked for: (slot, start, length).
    type Log = Arc<Mutex<Vec<(u32, u64, u64)>>>;

    /// Attaches to `r` a VM with `slots` memslots that records what it registers.
    fn attach_recording(r: &VisibleRange, slots: u32) -> Log {
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        r.attach_vm(
            Box::new(move |s, a, n| {
                l.lock().unwrap().push((s, a, n));
                Ok(())
            }),
            slots,
        )
        .unwrap();
        log
    }

    fn recording(size: u64) -> (VisibleRange, Log) {
        let r = VisibleRange::new(size);
        let log = attach_recording(&r, 509);
        (r, log)
    }

    #[test]
    fn the_range_doubles_in_slots_numbered_from_the_top() {
        let (r, log) = recording(512 * MIB);
        assert_eq!(r.visible(), 16 * MIB);
        r.expose(10 * MIB).unwrap();
        r.expose(16 * MIB).unwrap();
        assert!(log.lock().unwrap().is_empty(), "inside the first slot");
        r.expose(16 * MIB + 4096).unwrap();
        assert_eq!(r.visible(), 32 * MIB);
        r.expose(100 * MIB).unwrap();
        assert_eq!(r.visible(), 100 * MIB);
        r.expose(101 * MIB).unwrap();
        assert_eq!(r.visible(), 200 * MIB);
        r.expose(512 * MIB).unwrap();
        assert_eq!(
            *log.lock().unwrap(),
            vec![
                (508, 16 * MIB, 16 * MIB),
                (507, 32 * MIB, 68 * MIB),
                (506, 100 * MIB, 100 * MIB),
                (505, 200 * MIB, 312 * MIB),
            ]
        );
        assert_eq!(r.own_slots(), 5);
        assert!(r.expose(512 * MIB + 4096).is_err(), "past the end");
    }

    #[test]
    fn what_was_asked_before_the_vm_is_registered_when_it_attaches() {
        let r = VisibleRange::new(64 * MIB);
        r.expose(40 * MIB).unwrap();
        assert_eq!(r.visible(), 0);
        assert_eq!(r.own_slots(), 0);
        let log = attach_recording(&r, 32764);
        assert_eq!(*log.lock().unwrap(), vec![(32763, 16 * MIB, 24 * MIB)]);
        assert_eq!(r.visible(), 40 * MIB);
    }

    #[test]
    fn a_failed_registration_changes_nothing() {
        let r = VisibleRange::new(64 * MIB);
        let fail = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let f = fail.clone();
        r.attach_vm(
            Box::new(move |_, _, _| {
                if f.load(Ordering::SeqCst) {
                    Err(io::Error::from_raw_os_error(libc::ENOMEM))
                } else {
                    Ok(())
                }
            }),
            509,
        )
        .unwrap();
        assert!(r.expose(20 * MIB).is_err());
        assert_eq!(r.visible(), 16 * MIB);
        fail.store(false, Ordering::SeqCst);
        r.expose(20 * MIB).unwrap();
        assert_eq!(r.visible(), 32 * MIB);
        assert_eq!(r.own_slots(), 2);
    }

    #[test]
    fn a_small_memory_is_one_slot() {
        let (r, log) = recording(8 * MIB);
        assert_eq!(r.visible(), 8 * MIB);
        r.expose(8 * MIB).unwrap();
        assert!(log.lock().unwrap().is_empty());
    }
}
