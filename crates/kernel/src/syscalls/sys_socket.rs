//! Sockets: host TCP/UDP sockets behind the sandbox's network policy.

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::task::Task;

/// Implements socket(2). (placeholder)
pub fn sys_socket(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements connect(2). (placeholder)
pub fn sys_connect(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements accept(2). (placeholder)
pub fn sys_accept(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements accept4(2). (placeholder)
pub fn sys_accept4(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements sendto(2). (placeholder)
pub fn sys_sendto(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements recvfrom(2). (placeholder)
pub fn sys_recvfrom(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements shutdown(2). (placeholder)
pub fn sys_shutdown(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements bind(2). (placeholder)
pub fn sys_bind(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements listen(2). (placeholder)
pub fn sys_listen(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements getsockname(2). (placeholder)
pub fn sys_getsockname(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements getpeername(2). (placeholder)
pub fn sys_getpeername(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements setsockopt(2). (placeholder)
pub fn sys_setsockopt(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements getsockopt(2). (placeholder)
pub fn sys_getsockopt(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}
