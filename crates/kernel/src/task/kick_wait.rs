//! Blocking a task's host thread until something needs it: the wait every interruptible
//! sleep of the kernel is built on (pause, sigsuspend, a stopped process).

use std::time::{Duration, Instant};

/// Blocks the calling host thread until `ready()` holds, a kick arrives (a signal from
/// outside, a park request) or `timeout` passes. The kick signal is blocked around the check,
/// so a kick between the check and the sleep is not lost. Returns false on timeout.
pub(crate) fn wait_for_kick(ready: impl Fn() -> bool, deadline: Option<Instant>) -> bool {
    let kick = platform::kick::kick_signal();
    // SAFETY: plain sigset manipulation on local values; ppoll with no fds and a valid
    // timeout and mask; the mask is restored before returning.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, kick);
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        let mut result = true;
        if !ready() {
            let mut wait_mask = old;
            libc::sigdelset(&mut wait_mask, kick);
            let ts = deadline.map(|d| {
                let left = d
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_nanos(1));
                libc::timespec {
                    tv_sec: left.as_secs() as libc::time_t,
                    tv_nsec: left.subsec_nanos() as libc::c_long,
                }
            });
            let tsp = ts
                .as_ref()
                .map_or(std::ptr::null(), |t| t as *const libc::timespec);
            let r = libc::ppoll(std::ptr::null_mut(), 0, tsp, &wait_mask);
            if r == 0 {
                result = false;
            }
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        result
    }
}
