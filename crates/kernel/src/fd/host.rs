//! Host calls on the file descriptors the kernel holds (files, directories, devices,
//! terminals): each function wraps one libc call on a descriptor the caller owns and returns
//! the host's errno, so that the syscall handlers above stay free of `unsafe`, as sockets'
//! are with `net::host`. Terminal requests have one function each, sized for the structure
//! the request reads or writes: no ioctl of an arbitrary request passes through here.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use abi::Errno;

fn cvt(r: libc::c_int) -> Result<libc::c_int, Errno> {
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r)
    }
}

/// Takes ownership of a descriptor a host call just returned (`r`, or its errno).
fn owned(r: libc::c_int) -> Result<OwnedFd, Errno> {
    let fd = cvt(r)?;
    // SAFETY: a fresh descriptor the call returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// open(2) of a host path, always close-on-exec.
///
/// # Errors
/// The host's errno.
pub fn open(path: &CStr, flags: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: a NUL-terminated path; the flags are passed to the host, which checks them (no
    // mode: callers pass no creation flag).
    owned(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) })
}

/// fstat(2).
///
/// # Errors
/// The host's errno.
pub fn fstat(fd: BorrowedFd<'_>) -> Result<libc::stat, Errno> {
    crate::net::host::fstat(fd)
}

/// The status flags (F_GETFL).
///
/// # Errors
/// The host's errno.
pub fn status_flags(fd: BorrowedFd<'_>) -> Result<i32, Errno> {
    // SAFETY: F_GETFL takes no argument.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })
}

/// Sets the status flags (F_SETFL); the host ignores those it does not let change.
///
/// # Errors
/// The host's errno.
pub fn set_status_flags(fd: BorrowedFd<'_>, flags: i32) -> Result<(), Errno> {
    // SAFETY: F_SETFL takes an integer.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags) }).map(|_| ())
}

/// Turns `O_NONBLOCK` on or off, the other status flags as they are.
///
/// # Errors
/// The host's errno.
pub fn set_nonblocking(fd: BorrowedFd<'_>, on: bool) -> Result<(), Errno> {
    let cur = status_flags(fd)?;
    let new = if on {
        cur | libc::O_NONBLOCK
    } else {
        cur & !libc::O_NONBLOCK
    };
    set_status_flags(fd, new)
}

/// F_GETPIPE_SZ or F_SETPIPE_SZ (`cmd`) with `arg`; the pipe's size.
///
/// # Errors
/// EINVAL for another command; the host's errno.
pub fn pipe_size(fd: BorrowedFd<'_>, cmd: i32, arg: i32) -> Result<i32, Errno> {
    if cmd != libc::F_GETPIPE_SZ && cmd != libc::F_SETPIPE_SZ {
        return Err(Errno::EINVAL);
    }
    // SAFETY: both commands take an integer (F_GETPIPE_SZ ignores it).
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), cmd, arg) })
}

/// A record-lock command (`F_GETLK`, `F_SETLK`, `F_SETLKW` and their `F_OFD_` forms) with
/// `fl`, which the host may rewrite (the GETLK forms report the conflicting lock there).
/// A waiting form may block; a kick interrupts it with EINTR.
///
/// # Errors
/// EINVAL for another command; the host's errno.
pub fn record_lock(fd: BorrowedFd<'_>, cmd: i32, fl: &mut libc::flock) -> Result<i32, Errno> {
    const LOCK_COMMANDS: [i32; 6] = [
        libc::F_GETLK,
        libc::F_SETLK,
        libc::F_SETLKW,
        libc::F_OFD_GETLK,
        libc::F_OFD_SETLK,
        libc::F_OFD_SETLKW,
    ];
    if !LOCK_COMMANDS.contains(&cmd) {
        return Err(Errno::EINVAL);
    }
    // SAFETY: every lock command reads and may write one `struct flock`, which `fl` is.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), cmd, fl as *mut libc::flock) })
}

/// A zeroed `struct flock`, for [`record_lock`].
pub fn empty_flock() -> libc::flock {
    // SAFETY: `libc::flock` is plain integers; all zeroes is a valid value.
    unsafe { std::mem::zeroed() }
}

/// The descriptor's file offset (0 if it has none, as a pipe).
pub fn offset(fd: BorrowedFd<'_>) -> i64 {
    // SAFETY: lseek by 0 from the current position moves nothing.
    unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_CUR) }.max(0)
}

/// fallocate(2); the host checks the mode, offset and length.
///
/// # Errors
/// The host's errno.
pub fn fallocate(fd: BorrowedFd<'_>, mode: i32, offset: i64, len: i64) -> Result<(), Errno> {
    // SAFETY: integers only.
    cvt(unsafe { libc::fallocate(fd.as_raw_fd(), mode, offset, len) }).map(|_| ())
}

/// syncfs(2).
///
/// # Errors
/// The host's errno.
pub fn syncfs(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    // SAFETY: no memory is passed.
    cvt(unsafe { libc::syncfs(fd.as_raw_fd()) }).map(|_| ())
}

/// flock(2) with `op` (the caller checks the flags).
///
/// # Errors
/// The host's errno.
pub fn flock(fd: BorrowedFd<'_>, op: i32) -> Result<(), Errno> {
    // SAFETY: no memory is passed.
    cvt(unsafe { libc::flock(fd.as_raw_fd(), op) }).map(|_| ())
}

/// Whether the descriptor is a terminal.
pub fn isatty(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: no memory is passed.
    unsafe { libc::isatty(fd.as_raw_fd()) == 1 }
}

/// Size of the kernel's `struct termios` (what TCGETS/TCSETS* exchange): four flag words,
/// `c_line` and 19 control characters. glibc's `struct termios` (`libc::termios`, 60 bytes)
/// adds speed fields the kernel never reads or writes: copying that many bytes out overran the
/// application's buffer.
pub const KERNEL_TERMIOS_SIZE: usize = 36;
/// Size of `struct winsize`.
pub const WINSIZE_SIZE: usize = 8;

/// A terminal's settings as the kernel's `struct termios` (TCGETS).
///
/// # Errors
/// The host's errno (ENOTTY for a non-terminal).
pub fn terminal_settings(fd: BorrowedFd<'_>) -> Result<[u8; KERNEL_TERMIOS_SIZE], Errno> {
    // Larger than the structure, so the host never writes past it.
    let mut buf = [0u8; 64];
    // SAFETY: TCGETS writes one kernel termios (36 bytes) into the 64-byte buffer.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TCGETS, buf.as_mut_ptr()) })?;
    let mut out = [0u8; KERNEL_TERMIOS_SIZE];
    out.copy_from_slice(&buf[..KERNEL_TERMIOS_SIZE]);
    Ok(out)
}

/// Sets a terminal's settings: `req` is TCSETS, TCSETSW or TCSETSF.
///
/// # Errors
/// EINVAL for another request; the host's errno.
pub fn set_terminal_settings(
    fd: BorrowedFd<'_>,
    req: u64,
    termios: &[u8; KERNEL_TERMIOS_SIZE],
) -> Result<(), Errno> {
    if ![libc::TCSETS, libc::TCSETSW, libc::TCSETSF].contains(&req) {
        return Err(Errno::EINVAL);
    }
    // SAFETY: the TCSETS requests read one kernel termios, which `termios` is.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), req as _, termios.as_ptr()) }).map(|_| ())
}

/// A terminal's window size as `struct winsize` (TIOCGWINSZ).
///
/// # Errors
/// The host's errno.
pub fn window_size(fd: BorrowedFd<'_>) -> Result<[u8; WINSIZE_SIZE], Errno> {
    let mut buf = [0u8; WINSIZE_SIZE];
    // SAFETY: TIOCGWINSZ writes one winsize (8 bytes).
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, buf.as_mut_ptr()) })?;
    Ok(buf)
}

/// Sets a terminal's window size (TIOCSWINSZ).
///
/// # Errors
/// The host's errno.
pub fn set_window_size(fd: BorrowedFd<'_>, size: &[u8; WINSIZE_SIZE]) -> Result<(), Errno> {
    // SAFETY: TIOCSWINSZ reads one winsize (8 bytes).
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, size.as_ptr()) }).map(|_| ())
}

/// The bytes waiting to be read (FIONREAD).
///
/// # Errors
/// The host's errno.
pub fn bytes_readable(fd: BorrowedFd<'_>) -> Result<i32, Errno> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) })?;
    Ok(n)
}

/// The number of a pseudo-terminal master's replica (TIOCGPTN).
///
/// # Errors
/// The host's errno (ENOTTY for anything but a master).
pub fn pty_number(fd: BorrowedFd<'_>) -> Result<u32, Errno> {
    let mut n: libc::c_uint = 0;
    // SAFETY: TIOCGPTN writes one unsigned int.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGPTN, &mut n) })?;
    Ok(n)
}

/// Locks or unlocks a pseudo-terminal master's replica (TIOCSPTLCK).
///
/// # Errors
/// The host's errno.
pub fn set_pty_lock(fd: BorrowedFd<'_>, locked: i32) -> Result<(), Errno> {
    // SAFETY: TIOCSPTLCK reads one int.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSPTLCK, &locked) }).map(|_| ())
}

/// Opens a pseudo-terminal master's replica (TIOCGPTPEER) with open flags `flags`.
///
/// # Errors
/// The host's errno.
pub fn open_pty_peer(fd: BorrowedFd<'_>, flags: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: TIOCGPTPEER takes its flags by value and returns a new descriptor.
    owned(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGPTPEER, flags as libc::c_ulong) })
}

/// A new eventfd (close-on-exec on the host, whatever `flags` say).
///
/// # Errors
/// The host's errno (EINVAL for bad flags).
pub fn eventfd(initval: u32, flags: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: integers only; the host checks the flags.
    owned(unsafe { libc::eventfd(initval, flags | libc::EFD_CLOEXEC) })
}

/// Size of `struct itimerspec` on x86-64 (two timespecs).
pub const ITIMERSPEC_SIZE: usize = 32;

/// A new timerfd on `clock` (close-on-exec on the host, whatever `flags` say).
///
/// # Errors
/// The host's errno.
pub fn timerfd_create(clock: i32, flags: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: integers only; the host checks the clock and flags.
    owned(unsafe { libc::timerfd_create(clock, flags | libc::TFD_CLOEXEC) })
}

fn itimerspec_from(bytes: &[u8; ITIMERSPEC_SIZE]) -> libc::itimerspec {
    let at = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[o..o + 8]);
        i64::from_le_bytes(b)
    };
    libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: at(0),
            tv_nsec: at(8),
        },
        it_value: libc::timespec {
            tv_sec: at(16),
            tv_nsec: at(24),
        },
    }
}

fn itimerspec_bytes(v: &libc::itimerspec) -> [u8; ITIMERSPEC_SIZE] {
    let mut out = [0u8; ITIMERSPEC_SIZE];
    for (i, x) in [
        v.it_interval.tv_sec,
        v.it_interval.tv_nsec,
        v.it_value.tv_sec,
        v.it_value.tv_nsec,
    ]
    .into_iter()
    .enumerate()
    {
        out[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
    }
    out
}

fn zero_itimerspec() -> libc::itimerspec {
    itimerspec_from(&[0; ITIMERSPEC_SIZE])
}

/// timerfd_settime(2) with `new` (a `struct itimerspec` as bytes); the old setting, as
/// bytes.
///
/// # Errors
/// The host's errno (EINVAL for bad values or a descriptor that is no timerfd).
pub fn timerfd_settime(
    fd: BorrowedFd<'_>,
    flags: i32,
    new: &[u8; ITIMERSPEC_SIZE],
) -> Result<[u8; ITIMERSPEC_SIZE], Errno> {
    let new = itimerspec_from(new);
    let mut old = zero_itimerspec();
    // SAFETY: valid input and output structures.
    cvt(unsafe { libc::timerfd_settime(fd.as_raw_fd(), flags, &new, &mut old) })?;
    Ok(itimerspec_bytes(&old))
}

/// timerfd_gettime(2): the setting, as `struct itimerspec` bytes.
///
/// # Errors
/// The host's errno.
pub fn timerfd_gettime(fd: BorrowedFd<'_>) -> Result<[u8; ITIMERSPEC_SIZE], Errno> {
    let mut cur = zero_itimerspec();
    // SAFETY: a valid output structure.
    cvt(unsafe { libc::timerfd_gettime(fd.as_raw_fd(), &mut cur) })?;
    Ok(itimerspec_bytes(&cur))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn status_flags_and_nonblocking_round_trip() {
        let f = std::fs::File::open("/dev/null").unwrap();
        set_nonblocking(f.as_fd(), true).unwrap();
        assert_ne!(status_flags(f.as_fd()).unwrap() & libc::O_NONBLOCK, 0);
        set_nonblocking(f.as_fd(), false).unwrap();
        assert_eq!(status_flags(f.as_fd()).unwrap() & libc::O_NONBLOCK, 0);
        assert!(!isatty(f.as_fd()));
        assert_eq!(terminal_settings(f.as_fd()), Err(Errno::ENOTTY));
    }

    #[test]
    fn only_lock_and_pipe_commands_pass() {
        let f = std::fs::File::open("/dev/null").unwrap();
        let mut fl = empty_flock();
        assert_eq!(
            record_lock(f.as_fd(), libc::F_SETFL, &mut fl),
            Err(Errno::EINVAL)
        );
        assert_eq!(pipe_size(f.as_fd(), libc::F_SETFL, 0), Err(Errno::EINVAL));
        let null = open(c"/dev/null", libc::O_RDONLY).unwrap();
        assert!(fstat(null.as_fd()).is_ok());
    }

    #[test]
    fn a_timerfd_setting_round_trips_as_bytes() {
        let t = timerfd_create(libc::CLOCK_MONOTONIC, 0).unwrap();
        let mut new = [0u8; ITIMERSPEC_SIZE];
        new[16..24].copy_from_slice(&100i64.to_le_bytes()); // it_value: 100 s
        new[0..8].copy_from_slice(&5i64.to_le_bytes()); // it_interval: 5 s
        assert_eq!(
            timerfd_settime(t.as_fd(), 0, &new).unwrap(),
            [0; ITIMERSPEC_SIZE]
        );
        let cur = timerfd_gettime(t.as_fd()).unwrap();
        assert_eq!(&cur[0..8], &5i64.to_le_bytes());
        let left = i64::from_le_bytes(cur[16..24].try_into().unwrap());
        assert!((98..=100).contains(&left), "{left}");
        let e = eventfd(3, 0).unwrap();
        assert_eq!(timerfd_gettime(e.as_fd()), Err(Errno::EINVAL));
    }

    #[test]
    fn a_pty_master_answers_its_requests() {
        let Ok(m) = open(c"/dev/ptmx", libc::O_RDWR | libc::O_NOCTTY) else {
            return; // no devpts here
        };
        set_pty_lock(m.as_fd(), 0).unwrap();
        let _n = pty_number(m.as_fd()).unwrap();
        let peer = open_pty_peer(m.as_fd(), libc::O_RDWR | libc::O_NOCTTY).unwrap();
        assert!(isatty(peer.as_fd()));
        let t = terminal_settings(peer.as_fd()).unwrap();
        set_terminal_settings(peer.as_fd(), libc::TCSETS, &t).unwrap();
        assert_eq!(
            set_terminal_settings(peer.as_fd(), libc::TIOCSWINSZ, &t),
            Err(Errno::EINVAL)
        );
        set_window_size(peer.as_fd(), &[24, 0, 80, 0, 0, 0, 0, 0]).unwrap();
        assert_eq!(
            window_size(peer.as_fd()).unwrap(),
            [24, 0, 80, 0, 0, 0, 0, 0]
        );
        assert_eq!(bytes_readable(peer.as_fd()).unwrap(), 0);
    }
}
