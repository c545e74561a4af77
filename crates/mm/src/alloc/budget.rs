//! The memory budget of a whole sandbox: every process is its own VM with its own allocator,
//! but the sandbox's memory limit (`--memory`, OCI `linux.resources.memory.limit`) bounds the
//! pages all of them hold together, as a memory cgroup bounds a container's processes. An
//! allocation past the budget fails like an exhausted allocator: the faulting process is
//! killed (SIGKILL, as Linux's OOM killer), the others run on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Pages held by a sandbox's allocators, and the most they may hold.
#[derive(Debug)]
pub struct MemoryBudget {
    used: AtomicU64,
    limit: AtomicU64,
}

impl MemoryBudget {
    /// A budget of `limit` pages.
    pub fn new(limit: u64) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            used: AtomicU64::new(0),
            limit: AtomicU64::new(limit),
        })
    }

    /// Takes one page; false (nothing taken) at the limit.
    pub fn take(&self) -> bool {
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
                (u < self.limit()).then_some(u + 1)
            })
            .is_ok()
    }

    /// Takes `n` pages whatever the limit (pages an allocator already held when it joined).
    pub fn force_take(&self, n: u64) {
        self.used.fetch_add(n, Ordering::SeqCst);
    }

    /// Gives `n` pages back.
    pub fn give(&self, n: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
                Some(u.saturating_sub(n))
            });
    }

    /// Pages held now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::SeqCst)
    }

    /// The most pages there may be.
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::SeqCst)
    }

    /// Sets the most pages there may be (pages already held stay).
    pub fn set_limit(&self, pages: u64) {
        self.limit.store(pages, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_up_to_the_limit() {
        let b = MemoryBudget::new(2);
        assert!(b.take() && b.take());
        assert!(!b.take());
        b.give(1);
        assert!(b.take());
        b.force_take(5);
        assert_eq!(b.used(), 7);
        b.give(100);
        assert_eq!(b.used(), 0);
    }
}
