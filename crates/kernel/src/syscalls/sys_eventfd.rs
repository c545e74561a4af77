//! eventfd, eventfd2, timerfd_create, timerfd_settime, timerfd_gettime: host objects.
//!
//! Reads and writes of these fds go through read(2)/write(2) unchanged: the host enforces
//! their 8-byte semantics.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::fd::{FileKind, OpenFile};
use crate::task::Task;

fn install(t: &mut Task, fd: i32, kind: FileKind, cloexec: bool) -> SysResult {
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a fresh fd owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(t.fds
        .insert(Arc::new(OpenFile::new(owned, kind, None)), cloexec)? as u64)
}

/// Implements eventfd2(2).
pub fn sys_eventfd2(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (initval, flags) = (a.u(0) as u32, a.int(1));
    if flags & !(libc::EFD_CLOEXEC | libc::EFD_NONBLOCK | libc::EFD_SEMAPHORE) != 0 {
        return Err(Errno::EINVAL);
    }
    // SAFETY: eventfd with checked flags; the host fd is always close-on-exec.
    let fd = unsafe { libc::eventfd(initval, (flags & !libc::EFD_CLOEXEC) | libc::EFD_CLOEXEC) };
    let kind = FileKind::EventFd {
        semaphore: flags & libc::EFD_SEMAPHORE != 0,
    };
    install(t, fd, kind, flags & libc::EFD_CLOEXEC != 0)
}

/// Implements eventfd(2).
pub fn sys_eventfd(t: &mut Task, a: &SyscallArgs) -> SysResult {
    // SAFETY: plain eventfd, close-on-exec on the host.
    let fd = unsafe { libc::eventfd(a.u(0) as u32, libc::EFD_CLOEXEC) };
    install(t, fd, FileKind::EventFd { semaphore: false }, false)
}

/// Implements timerfd_create(2).
pub fn sys_timerfd_create(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (clock, flags) = (a.int(0), a.int(1));
    if !matches!(
        clock,
        libc::CLOCK_REALTIME | libc::CLOCK_MONOTONIC | libc::CLOCK_BOOTTIME
    ) {
        return Err(Errno::EINVAL);
    }
    if flags & !(libc::TFD_CLOEXEC | libc::TFD_NONBLOCK) != 0 {
        return Err(Errno::EINVAL);
    }
    // SAFETY: checked clock and flags.
    let fd =
        unsafe { libc::timerfd_create(clock, (flags & !libc::TFD_CLOEXEC) | libc::TFD_CLOEXEC) };
    install(t, fd, FileKind::TimerFd, flags & libc::TFD_CLOEXEC != 0)
}

/// Implements timerfd_settime(2).
pub fn sys_timerfd_settime(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    let flags = a.int(1);
    if flags & !(libc::TFD_TIMER_ABSTIME | libc::TFD_TIMER_CANCEL_ON_SET) != 0 {
        return Err(Errno::EINVAL);
    }
    let mut new = [0u8; 32];
    t.copy_in(a.gva(2), &mut new)?;
    // SAFETY: `itimerspec` is plain data, 32 bytes on x86-64; the host validates the values.
    let new: libc::itimerspec = unsafe { std::ptr::read_unaligned(new.as_ptr().cast()) };
    // SAFETY: a zeroed itimerspec is a valid output buffer.
    let mut old: libc::itimerspec = unsafe { std::mem::zeroed() };
    // SAFETY: our fd (the host rejects a non-timerfd with EINVAL), valid in and out buffers.
    if unsafe { libc::timerfd_settime(f.host().as_raw_fd(), flags, &new, &mut old) } != 0 {
        return Err(Errno::last());
    }
    if a.u(3) != 0 {
        // SAFETY: plain data.
        let bytes: [u8; 32] = unsafe { std::mem::transmute(old) };
        t.copy_out(a.gva(3), &bytes)?;
    }
    Ok(0)
}

/// Implements timerfd_gettime(2).
pub fn sys_timerfd_gettime(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    // SAFETY: a zeroed itimerspec is a valid output buffer.
    let mut cur: libc::itimerspec = unsafe { std::mem::zeroed() };
    // SAFETY: our fd, valid output buffer.
    if unsafe { libc::timerfd_gettime(f.host().as_raw_fd(), &mut cur) } != 0 {
        return Err(Errno::last());
    }
    // SAFETY: plain data.
    let bytes: [u8; 32] = unsafe { std::mem::transmute(cur) };
    t.copy_out(a.gva(1), &bytes)?;
    Ok(0)
}
