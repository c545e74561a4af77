//! Terminal requests on a host descriptor, one function per request sized for the structure
//! it reads or writes: no ioctl of an arbitrary request passes through here.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use abi::Errno;

use super::{cvt, owned};

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

/// Whether a stream socket's read position is at its urgent mark (SIOCATMARK).
///
/// # Errors
/// The host's errno (EINVAL or ENOTTY for a socket without urgent data, such as UDP).
pub fn at_mark(fd: BorrowedFd<'_>) -> Result<i32, Errno> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCATMARK writes one int.
    cvt(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            abi::ioctl::SIOCATMARK as libc::c_ulong,
            &mut n,
        )
    })?;
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
