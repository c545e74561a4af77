//! Host descriptors that signal events: eventfd, timerfd, inotify, epoll, poll, pipes.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use abi::Errno;

use super::{cvt, owned};

/// A new eventfd (close-on-exec on the host, whatever `flags` say).
///
/// # Errors
/// The host's errno (EINVAL for bad flags).
pub fn eventfd(initval: u32, flags: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: integers only; the host checks the flags.
    owned(unsafe { libc::eventfd(initval, flags | libc::EFD_CLOEXEC) })
}

/// Adds 1 to the eventfd `fd`'s counter (Linux's `eventfd_signal`: an AIO completion with
/// IOCB_FLAG_RESFD). A counter already at its largest value is left as it is: the write
/// would block or fail with EAGAIN, and `eventfd_signal` does not wait either.
pub fn eventfd_signal(fd: BorrowedFd<'_>) {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    if unsafe { libc::poll(&mut p, 1, 0) } != 1 {
        return;
    }
    let one = 1u64;
    // SAFETY: writes 8 bytes from a local to the descriptor.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// Reads a non-blocking eventfd's counter down to zero (nothing when it is zero already).
pub fn eventfd_drain(fd: BorrowedFd<'_>) {
    let mut v = 0u64;
    // SAFETY: reads at most 8 bytes into a local; a non-blocking eventfd at zero is EAGAIN.
    unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
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

/// A new pipe, both ends close-on-exec on the host (the guest's flag lives in its fd table)
/// with the other `flags` (O_NONBLOCK, O_DIRECT) as given: (read end, write end).
///
/// # Errors
/// The host's errno (EINVAL for bad flags, EMFILE/ENFILE).
pub fn pipe(flags: i32) -> Result<(OwnedFd, OwnedFd), Errno> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for both ends.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), flags | libc::O_CLOEXEC) })?;
    // SAFETY: two fresh descriptors owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A new inotify instance (close-on-exec on the host, whatever `flags` say).
///
/// # Errors
/// The host's errno.
pub fn inotify_init(flags: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: integers only; the host checks the flags.
    owned(unsafe { libc::inotify_init1(flags | libc::IN_CLOEXEC) })
}

/// inotify_add_watch(2) of the host path `path`; the watch descriptor.
///
/// # Errors
/// The host's errno.
pub fn inotify_add_watch(fd: BorrowedFd<'_>, path: &CStr, mask: u32) -> Result<i32, Errno> {
    // SAFETY: a NUL-terminated path.
    cvt(unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), mask) })
}

/// inotify_rm_watch(2).
///
/// # Errors
/// The host's errno (EINVAL for an unknown watch or a descriptor that is no instance).
pub fn inotify_rm_watch(fd: BorrowedFd<'_>, wd: i32) -> Result<(), Errno> {
    // SAFETY: integers only.
    cvt(unsafe { libc::inotify_rm_watch(fd.as_raw_fd(), wd) }).map(|_| ())
}

/// A new epoll instance, close-on-exec on the host.
///
/// # Errors
/// The host's errno.
pub fn epoll_create() -> Result<OwnedFd, Errno> {
    // SAFETY: integers only.
    owned(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })
}

/// epoll_ctl(2): `op` on `target` in the instance `ep` with `event` (ignored by
/// EPOLL_CTL_DEL).
///
/// # Errors
/// The host's errno.
pub fn epoll_ctl(
    ep: BorrowedFd<'_>,
    op: i32,
    target: BorrowedFd<'_>,
    mut event: libc::epoll_event,
) -> Result<(), Errno> {
    // SAFETY: `event` is a live epoll_event the host only reads.
    cvt(unsafe { libc::epoll_ctl(ep.as_raw_fd(), op, target.as_raw_fd(), &mut event) }).map(|_| ())
}

/// epoll_wait(2) into `events` (at most its length, capped at `i32::MAX`) with `timeout_ms`
/// (-1: forever); the number of events written.
///
/// # Errors
/// The host's errno (EINTR when a kick interrupts the wait).
pub fn epoll_wait(
    ep: BorrowedFd<'_>,
    events: &mut [libc::epoll_event],
    timeout_ms: i32,
) -> Result<usize, Errno> {
    let max = i32::try_from(events.len()).unwrap_or(i32::MAX);
    // SAFETY: `events` has room for `max` events; the host writes at most that many.
    let n = cvt(unsafe { libc::epoll_wait(ep.as_raw_fd(), events.as_mut_ptr(), max, timeout_ms) })?;
    Ok((n as usize).min(events.len()))
}

/// ppoll(2) on `fds` (their `revents` updated) with `timeout` (None: forever), the thread's
/// signal mask left alone; the number of entries with events.
///
/// # Errors
/// The host's errno (EINTR when a kick interrupts the wait).
pub fn ppoll(fds: &mut [libc::pollfd], timeout: Option<&libc::timespec>) -> Result<usize, Errno> {
    let tp = timeout.map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `fds` is a valid array of `fds.len()` pollfds the host may update; `tp` is null
    // or points at a live timespec; the null sigmask leaves the thread's mask alone.
    let n = cvt(unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            tp,
            std::ptr::null(),
        )
    })?;
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_pipe_is_seen_ready_by_epoll_and_poll() {
        let (r, w) = pipe(libc::O_NONBLOCK).unwrap();
        let ep = epoll_create().unwrap();
        let ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 7,
        };
        epoll_ctl(ep.as_fd(), libc::EPOLL_CTL_ADD, r.as_fd(), ev).unwrap();
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
        assert_eq!(epoll_wait(ep.as_fd(), &mut out, 0).unwrap(), 0);
        assert_eq!(
            std::io::Write::write(&mut std::fs::File::from(w), b"x").unwrap(),
            1
        );
        assert_eq!(epoll_wait(ep.as_fd(), &mut out, 0).unwrap(), 1);
        assert_eq!({ out[0].u64 }, 7);
        let mut fds = [libc::pollfd {
            fd: r.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        assert_eq!(ppoll(&mut fds, Some(&zero)).unwrap(), 1);
        assert_ne!(fds[0].revents & libc::POLLIN, 0);
        assert_eq!(
            epoll_ctl(ep.as_fd(), libc::EPOLL_CTL_ADD, r.as_fd(), ev),
            Err(Errno::EEXIST)
        );
    }

    #[test]
    fn inotify_watches_come_and_go() {
        let n = inotify_init(libc::IN_NONBLOCK).unwrap();
        let wd = inotify_add_watch(n.as_fd(), c"/tmp", libc::IN_CREATE).unwrap();
        inotify_rm_watch(n.as_fd(), wd).unwrap();
        assert_eq!(inotify_rm_watch(n.as_fd(), wd), Err(Errno::EINVAL));
        assert_eq!(
            inotify_add_watch(n.as_fd(), c"/no/such/path", libc::IN_CREATE),
            Err(Errno::ENOENT)
        );
    }
}
