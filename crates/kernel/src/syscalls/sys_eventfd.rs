//! eventfd, eventfd2, timerfd_create, timerfd_settime, timerfd_gettime: host objects.
//!
//! Reads and writes of these fds go through read(2)/write(2) unchanged: the host enforces
//! their 8-byte semantics.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::fd::{host, FileKind, OpenFile};
use crate::task::Task;

fn install(t: &mut Task, fd: Result<OwnedFd, Errno>, kind: FileKind, cloexec: bool) -> SysResult {
    Ok(t.fds
        .insert(Arc::new(OpenFile::new(fd?, kind, None)), cloexec)? as u64)
}

/// Implements eventfd2(2).
pub fn sys_eventfd2(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (initval, flags) = (a.u(0) as u32, a.int(1));
    if flags & !(libc::EFD_CLOEXEC | libc::EFD_NONBLOCK | libc::EFD_SEMAPHORE) != 0 {
        return Err(Errno::EINVAL);
    }
    // The host fd is always close-on-exec.
    let fd = host::eventfd(initval, flags & !libc::EFD_CLOEXEC);
    let kind = FileKind::EventFd {
        semaphore: flags & libc::EFD_SEMAPHORE != 0,
    };
    install(t, fd, kind, flags & libc::EFD_CLOEXEC != 0)
}

/// Implements eventfd(2).
pub fn sys_eventfd(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let fd = host::eventfd(a.u(0) as u32, 0);
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
    let fd = host::timerfd_create(clock, flags & !libc::TFD_CLOEXEC);
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
    // The host validates the values (and rejects a non-timerfd with EINVAL).
    let old = host::timerfd_settime(f.host(), flags, &new)?;
    if a.u(3) != 0 {
        t.copy_out(a.gva(3), &old)?;
    }
    Ok(0)
}

/// Implements timerfd_gettime(2).
pub fn sys_timerfd_gettime(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    t.copy_out(a.gva(1), &host::timerfd_gettime(f.host())?)?;
    Ok(0)
}
