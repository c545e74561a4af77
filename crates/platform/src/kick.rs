//! The host signal that kicks a task's thread out of a blocking host call (and out of
//! `KVM_RUN` on the KVM platform): its handler does nothing and is installed without
//! `SA_RESTART`, so the call returns `EINTR` at once.

use std::sync::Once;

/// The signal used to kick task threads.
pub fn kick_signal() -> i32 {
    libc::SIGRTMIN() + 2
}

extern "C" fn on_kick(_: libc::c_int) {}

/// Installs the no-op handler for [`kick_signal`] (once per process).
pub fn install_kick_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction with a valid handler and an empty mask; no SA_RESTART so
        // blocking calls return EINTR.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_kick as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(kick_signal(), &sa, std::ptr::null_mut());
        }
    });
}
