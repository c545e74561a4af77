//! Host calls on the file descriptors the kernel holds (files, directories, devices,
//! terminals): each function wraps one libc call on a descriptor the caller owns and returns
//! the host's errno, so that the syscall handlers above stay free of `unsafe`, as sockets'
//! are with `net::host`. By kind: [`terminal`] (one function per terminal request, sized for
//! the structure it reads or writes: no ioctl of an arbitrary request passes here), [`events`]
//! (eventfd, timerfd, inotify, epoll, poll, pipes) and [`io`] (seek, truncate, sendfile,
//! splice, syncs); this file has the calls on any descriptor (status flags, locks, stat).

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use abi::Errno;

pub mod events;
pub mod io;
pub mod terminal;

pub use events::*;
pub use io::*;
pub use terminal::*;

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

/// A zeroed `struct stat`, for a file the kernel describes itself (a message queue).
pub fn empty_stat() -> libc::stat {
    // SAFETY: `struct stat` is plain integers; all zeroes is a valid value.
    unsafe { std::mem::zeroed() }
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

/// A pair of connected Unix datagram sockets (close-on-exec).
///
/// # Errors
/// The host's errno.
pub fn datagram_pair() -> Result<(OwnedFd, OwnedFd), Errno> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two descriptors into `fds`.
    cvt(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: two descriptors socketpair just made, owned by no one else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Makes descriptor `target` refer to `new`'s open file (dup3, close-on-exec): whoever
/// holds `target` sees the new file from its next call on.
///
/// # Errors
/// The host's errno.
pub fn replace_descriptor(new: &OwnedFd, target: BorrowedFd<'_>) -> Result<(), Errno> {
    // SAFETY: both are open descriptors; `target`'s number keeps its owner, now of `new`'s
    // file.
    cvt(unsafe { libc::dup3(new.as_raw_fd(), target.as_raw_fd(), libc::O_CLOEXEC) })?;
    Ok(())
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
