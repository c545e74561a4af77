//! signalfd(2) objects: a descriptor that becomes readable when a signal of its mask is
//! pending for the process, and whose reads take such signals.
//!
//! Guest signals are not host signals, so the host's signalfd cannot serve: the descriptor is
//! a host eventfd that the thread group writes whenever it queues a signal of the mask (for
//! poll and epoll), and a read takes the signals from the reading task's own queue (as Linux
//! does: the thread's pending signals, then the process's).

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// One signalfd: its mask and the eventfd that carries its readiness.
#[derive(Debug)]
pub struct SignalFd {
    mask: AtomicU64,
    /// A duplicate of the descriptor's host eventfd.
    event: OwnedFd,
}

/// Bit of signal `sig` in a mask.
fn bit(sig: i32) -> u64 {
    if (1..=64).contains(&sig) {
        1u64 << (sig - 1)
    } else {
        0
    }
}

impl SignalFd {
    /// A signalfd for `mask` whose readiness is written to `event`.
    pub fn new(mask: u64, event: OwnedFd) -> SignalFd {
        SignalFd {
            mask: AtomicU64::new(mask),
            event,
        }
    }

    /// The signals it takes.
    pub fn mask(&self) -> u64 {
        self.mask.load(Ordering::SeqCst)
    }

    /// Replaces the mask (signalfd(2) on an existing descriptor).
    pub fn set_mask(&self, mask: u64) {
        self.mask.store(mask, Ordering::SeqCst);
    }

    /// A signal was queued: readable if it is one of the mask's.
    pub fn notify(&self, sig: i32) {
        if self.mask() & bit(sig) != 0 {
            self.raise();
        }
    }

    /// Marks the descriptor readable.
    pub fn raise(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a local to an eventfd we hold.
        unsafe { libc::write(self.event.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Marks the descriptor not readable (no signal of the mask is pending any more).
    pub fn clear(&self) {
        // The eventfd may be blocking (it shares the guest descriptor's flags): read it only
        // when it is readable.
        let mut p = libc::pollfd {
            fd: self.event.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        if unsafe { libc::poll(&mut p, 1, 0) } == 1 {
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into a local from a readable eventfd.
            unsafe { libc::read(self.event.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        }
    }
}
