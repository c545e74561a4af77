//! POSIX per-process timers (timer_create(2) and its family): `struct sigevent`,
//! `struct itimerspec`, the notification kinds, and the `siginfo_t` fields a timer's signal
//! carries (`_sifields._timer` of `include/uapi/asm-generic/siginfo.h`).

use crate::structs::Timespec;
use crate::Pod;

/// `sigev_notify`: a signal to the process.
pub const SIGEV_SIGNAL: i32 = 0;
/// `sigev_notify`: no notification (the timer is read with timer_gettime).
pub const SIGEV_NONE: i32 = 1;
/// `sigev_notify`: a new thread (the C library's; the kernel treats it as `SIGEV_SIGNAL`).
pub const SIGEV_THREAD: i32 = 2;
/// `sigev_notify`: a signal to the thread `sigev_notify_thread_id` (Linux's, with
/// `SIGEV_SIGNAL`).
pub const SIGEV_THREAD_ID: i32 = 4;

/// `si_code` of a timer's signal.
pub const SI_TIMER: i32 = -2;
/// Offset in `siginfo_t` of `si_timerid` (where other signals have `si_pid`; `si_tid` in the
/// kernel's headers).
pub const SI_TIMERID: usize = 16;
/// Offset of `si_overrun`.
pub const SI_OVERRUN: usize = 20;
/// Offset of `si_value` (`sival_int` / `sival_ptr`).
pub const SI_VALUE: usize = 24;
/// Offset of the kernel's private word after `si_value` (`_sys_private`), never shown to the
/// application.
pub const SI_SYS_PRIVATE: usize = 32;

/// The most overruns timer_getoverrun(2) and `si_overrun` report (`DELAYTIMER_MAX`).
pub const DELAYTIMER_MAX: i32 = i32::MAX;

/// `timer_settime` flag: `it_value` is a time of the clock, not an interval from now.
pub const TIMER_ABSTIME: i32 = 1;

/// `struct sigevent` (64 bytes on x86-64).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sigevent {
    /// `sigev_value`: the `si_value` the signal carries.
    pub value: u64,
    /// `sigev_signo`.
    pub signo: i32,
    /// `sigev_notify`: one of `SIGEV_*`.
    pub notify: i32,
    /// `sigev_notify_thread_id` (`SIGEV_THREAD_ID`).
    pub thread_id: i32,
    /// The rest of the union (`sigev_notify_function` and `_attributes`, padding).
    pub pad: [i32; 11],
}

/// `struct itimerspec`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Itimerspec {
    /// `it_interval`: the period (zero: one shot).
    pub interval: Timespec,
    /// `it_value`: the first expiry (zero: disarmed).
    pub value: Timespec,
}

// The kernel's private word (a timer's sequence number, 8 bytes) fits in a `siginfo_t`.
const _: () = assert!(SI_SYS_PRIVATE + 8 <= crate::signal::SIGINFO_SIZE);

// SAFETY: both are `#[repr(C)]` of integer fields (and `Timespec`, itself two `i64`s) laid
// out without gaps; every bit pattern is valid.
unsafe impl Pod for Sigevent {}
// SAFETY: as above.
unsafe impl Pod for Itimerspec {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::{as_bytes, from_bytes};
    use std::mem::{offset_of, size_of};

    #[test]
    fn sizes_and_offsets_are_linux_x86_64s() {
        assert_eq!(size_of::<Sigevent>(), 64);
        assert_eq!(offset_of!(Sigevent, signo), 8);
        assert_eq!(offset_of!(Sigevent, notify), 12);
        assert_eq!(offset_of!(Sigevent, thread_id), 16);
        assert_eq!(size_of::<Itimerspec>(), 32);
        assert_eq!(offset_of!(Itimerspec, value), 16);
    }

    #[test]
    fn a_sigevent_reads_from_bytes() {
        let mut b = [0u8; 64];
        b[..8].copy_from_slice(&0x1234u64.to_le_bytes());
        b[8..12].copy_from_slice(&10i32.to_le_bytes());
        b[12..16].copy_from_slice(&SIGEV_THREAD_ID.to_le_bytes());
        b[16..20].copy_from_slice(&77i32.to_le_bytes());
        let e = from_bytes::<Sigevent>(&b).unwrap();
        assert_eq!(
            (e.value, e.signo, e.notify, e.thread_id),
            (0x1234, 10, 4, 77)
        );
        assert_eq!(as_bytes(&e), &b[..]);
    }
}
