//! `#[repr(C)]` structures the syscall layer copies to and from the application, laid out as
//! on Linux x86-64. Each is [`Pod`]: the kernel reads and writes them whole.

use std::time::Duration;

use crate::{Errno, Pod};

/// Nanoseconds in a second.
const NSEC_PER_SEC: i64 = 1_000_000_000;

/// `struct iovec`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct IoVec {
    /// Base address.
    pub base: u64,
    /// Length.
    pub len: u64,
}

/// `struct timespec`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timespec {
    /// Seconds.
    pub sec: i64,
    /// Nanoseconds.
    pub nsec: i64,
}

impl Timespec {
    /// Zero.
    pub const ZERO: Timespec = Timespec { sec: 0, nsec: 0 };

    /// The time as a duration, checked as Linux's `timespec64_valid` (and not negative).
    ///
    /// # Errors
    /// EINVAL for a negative second count or nanoseconds outside `0..1_000_000_000`.
    pub fn to_duration(self) -> Result<Duration, Errno> {
        if self.sec < 0 || !(0..NSEC_PER_SEC).contains(&self.nsec) {
            return Err(Errno::EINVAL);
        }
        Ok(Duration::new(self.sec as u64, self.nsec as u32))
    }

    /// A duration as a timespec (seconds saturating at `i64::MAX`).
    pub fn from_duration(d: Duration) -> Timespec {
        Timespec {
            sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nsec: i64::from(d.subsec_nanos()),
        }
    }
}

/// `struct timeval`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timeval {
    /// Seconds.
    pub sec: i64,
    /// Microseconds.
    pub usec: i64,
}

impl Timeval {
    /// The time as a timespec, its microseconds checked.
    ///
    /// # Errors
    /// EINVAL for microseconds outside `0..1_000_000`.
    pub fn to_timespec(self) -> Result<Timespec, Errno> {
        if !(0..1_000_000).contains(&self.usec) {
            return Err(Errno::EINVAL);
        }
        Ok(Timespec {
            sec: self.sec,
            nsec: self.usec * 1000,
        })
    }
}

/// `stack_t` (sigaltstack(2), `uc_stack`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackT {
    /// Base address.
    pub sp: u64,
    /// `SS_*` flags.
    pub flags: i32,
    /// Padding (zero).
    pub pad: i32,
    /// Size in bytes.
    pub size: u64,
}

/// `struct pollfd`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PollFd {
    /// File descriptor.
    pub fd: i32,
    /// Requested events.
    pub events: i16,
    /// Returned events.
    pub revents: i16,
}

/// `struct epoll_event` (packed on x86-64: 12 bytes).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default)]
pub struct EpollEvent {
    /// Event mask.
    pub events: u32,
    /// User data.
    pub data: u64,
}

/// `struct winsize`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Winsize {
    /// Rows.
    pub row: u16,
    /// Columns.
    pub col: u16,
    /// Width in pixels.
    pub xpixel: u16,
    /// Height in pixels.
    pub ypixel: u16,
}

/// Kernel `struct sigaction` as rt_sigaction(2) passes it (not glibc's).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct KernelSigaction {
    /// Handler address, or SIG_DFL (0) / SIG_IGN (1).
    pub handler: u64,
    /// SA_* flags.
    pub flags: u64,
    /// Restorer (SA_RESTORER).
    pub restorer: u64,
    /// Blocked signals during the handler.
    pub mask: u64,
}

/// `struct utsname`: six 65-byte fields.
pub const UTS_FIELD: usize = 65;

// SAFETY: each is `#[repr(C)]` (or packed) of integer fields with no gaps between them (the
// explicit `pad` fields fill what would be padding) and every bit pattern valid.
unsafe impl Pod for IoVec {}
// SAFETY: as above.
unsafe impl Pod for Timespec {}
// SAFETY: as above.
unsafe impl Pod for Timeval {}
// SAFETY: as above.
unsafe impl Pod for StackT {}
// SAFETY: as above.
unsafe impl Pod for PollFd {}
// SAFETY: as above (packed: no padding at all).
unsafe impl Pod for EpollEvent {}
// SAFETY: as above.
unsafe impl Pod for Winsize {}
// SAFETY: as above.
unsafe impl Pod for KernelSigaction {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::{as_bytes, from_bytes};
    use std::mem::size_of;

    #[test]
    fn sizes_are_linux_x86_64s() {
        assert_eq!(size_of::<IoVec>(), 16);
        assert_eq!(size_of::<Timespec>(), 16);
        assert_eq!(size_of::<Timeval>(), 16);
        assert_eq!(size_of::<StackT>(), 24);
        assert_eq!(size_of::<PollFd>(), 8);
        assert_eq!(size_of::<EpollEvent>(), 12);
        assert_eq!(size_of::<Winsize>(), 8);
        assert_eq!(size_of::<KernelSigaction>(), 32);
    }

    #[test]
    fn a_timespec_is_checked_as_linux_does() {
        let ts = Timespec { sec: 3, nsec: 5 };
        assert_eq!(ts.to_duration(), Ok(Duration::new(3, 5)));
        assert_eq!(
            Timespec { sec: -1, nsec: 0 }.to_duration(),
            Err(Errno::EINVAL)
        );
        let big = Timespec {
            sec: 0,
            nsec: NSEC_PER_SEC,
        };
        assert_eq!(big.to_duration(), Err(Errno::EINVAL));
        assert_eq!(
            Timespec::from_duration(Duration::new(7, 9)),
            Timespec { sec: 7, nsec: 9 }
        );
        let b = as_bytes(&ts).to_vec();
        assert_eq!(&b[..8], &3i64.to_le_bytes());
        assert_eq!(from_bytes::<Timespec>(&b), Some(ts));
        let tv = Timeval {
            sec: 1,
            usec: 999_999,
        };
        assert_eq!(
            tv.to_timespec(),
            Ok(Timespec {
                sec: 1,
                nsec: 999_999_000
            })
        );
        assert_eq!(
            Timeval {
                sec: 1,
                usec: 1_000_000
            }
            .to_timespec(),
            Err(Errno::EINVAL)
        );
    }
}
