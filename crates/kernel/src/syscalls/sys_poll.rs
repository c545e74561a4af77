//! poll, ppoll, pselect6 and epoll over host fds.

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::task::Task;

/// Implements poll(2). (placeholder)
pub fn sys_poll(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements ppoll(2). (placeholder)
pub fn sys_ppoll(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements pselect6(2). (placeholder)
pub fn sys_pselect6(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements epoll_wait(2). (placeholder)
pub fn sys_epoll_wait(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements epoll_pwait(2). (placeholder)
pub fn sys_epoll_pwait(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements epoll_ctl(2). (placeholder)
pub fn sys_epoll_ctl(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements epoll_create(2). (placeholder)
pub fn sys_epoll_create(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements epoll_create1(2). (placeholder)
pub fn sys_epoll_create1(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}
