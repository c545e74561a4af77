//! Kicking a vCPU out of `KVM_RUN` (or out of a blocking host call on its thread) from another
//! thread: set the vCPU's immediate-exit flag, then send its host thread
//! [`platform::kick::kick_signal`]. `KVM_RUN` then returns `EINTR` at once, and so does a
//! blocking host system call the thread is in.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use platform::kick::kick_signal;

/// A handle that kicks one vCPU thread. Cheap to clone; valid while the vCPU lives (the vCPU
/// detaches it on drop, after which kicks do nothing).
#[derive(Clone)]
pub struct VcpuKicker {
    inner: Arc<Mutex<KickTarget>>,
}

pub(crate) struct KickTarget {
    /// The vCPU thread, once it has started running.
    pub(crate) thread: Option<libc::pthread_t>,
    /// `kvm_run.immediate_exit` of the vCPU, null once the vCPU is gone.
    pub(crate) immediate_exit: *const AtomicU8,
}

// SAFETY: the raw pointer targets the vCPU's `kvm_run` mapping, accessed only atomically and
// only while the vCPU is alive (the vCPU nulls it under the same mutex before unmapping).
unsafe impl Send for KickTarget {}

impl VcpuKicker {
    pub(crate) fn new(immediate_exit: *const AtomicU8) -> VcpuKicker {
        VcpuKicker {
            inner: Arc::new(Mutex::new(KickTarget {
                thread: None,
                immediate_exit,
            })),
        }
    }

    pub(crate) fn set_thread(&self, t: Option<libc::pthread_t>) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.thread = t;
    }

    pub(crate) fn detach(&self) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.thread = None;
        g.immediate_exit = std::ptr::null();
    }

    /// Makes the vCPU's current or next `KVM_RUN` return [`platform::Exit::Interrupted`], and
    /// interrupts a blocking host call its thread is in.
    pub fn kick(&self) {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if !g.immediate_exit.is_null() {
            // SAFETY: non-null means the vCPU (and its kvm_run mapping) is alive; we hold the
            // mutex that `detach` takes before the mapping goes away.
            unsafe { (*g.immediate_exit).store(1, Ordering::SeqCst) };
        }
        if let Some(t) = g.thread {
            // SAFETY: `t` is a live thread: the vCPU clears it before its thread exits.
            unsafe { libc::pthread_kill(t, kick_signal()) };
        }
    }
}

impl platform::Kick for VcpuKicker {
    fn kick(&self) {
        VcpuKicker::kick(self);
    }
}
