//! Extended attributes: setxattr, lsetxattr, fsetxattr, getxattr, lgetxattr, fgetxattr,
//! listxattr, llistxattr, flistxattr, removexattr, lremovexattr, fremovexattr.
//!
//! The host filesystem stores them. Path forms find the file inside the root (`O_PATH`,
//! following the last symlink except for the `l` forms) and act on it through its
//! `/proc/self/fd/N` link, which the host follows to that very inode. Setting or removing a
//! `trusted.*` or `security.*` attribute is EPERM, as for a process without CAP_SYS_ADMIN:
//! the host would act with the runtime's privileges (overlayfs keeps its own state in
//! `trusted.overlay.*`, file capabilities live in `security.capability`).

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use abi::Errno;
use platform::Gva;

use super::sys_file::AT_FDCWD;
use super::sys_stat::open_path;
use super::{SysResult, SyscallArgs};
use crate::broker::{self, Op};
use crate::fs;
use crate::task::Task;

/// XATTR_NAME_MAX.
const NAME_MAX: usize = 255;
/// XATTR_SIZE_MAX: the largest value.
const SIZE_MAX: usize = 65536;
/// XATTR_LIST_MAX: the largest name list.
const LIST_MAX: usize = 65536;
const XATTR_CREATE: i32 = 1;
const XATTR_REPLACE: i32 = 2;
const AT_SYMLINK_NOFOLLOW: i32 = 0x100;

/// Which file a call names: a path (its last symlink followed or not) or a descriptor.
enum Target {
    Path { path: Gva, follow: bool },
    Fd(i32),
}

/// Where the host call acts: a `/proc/self/fd/N` path (kept open by `_fd`) or a host fd.
enum Host {
    Path { proc: CString, _fd: OwnedFd },
    Fd(std::sync::Arc<crate::fd::OpenFile>),
}

fn open_target(t: &Task, target: &Target) -> Result<Host, Errno> {
    match *target {
        Target::Path { path, follow } => {
            let p = t.copy_in_path(path)?;
            let flags = if follow { 0 } else { AT_SYMLINK_NOFOLLOW };
            let fd = open_path(t, AT_FDCWD, &p, flags)?;
            Ok(Host::Path {
                proc: fs::host_fd_path(&fd),
                _fd: fd,
            })
        }
        Target::Fd(fd) => Ok(Host::Fd(t.fds.get(fd)?)),
    }
}

/// Reads an attribute name: ERANGE if empty or longer than XATTR_NAME_MAX.
fn copy_in_name(t: &Task, addr: Gva) -> Result<CString, Errno> {
    let name = t.copy_in_str(addr, NAME_MAX + 1).map_err(|e| {
        if e == Errno::ENAMETOOLONG {
            Errno::ERANGE
        } else {
            e
        }
    })?;
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(Errno::ERANGE);
    }
    CString::new(name).map_err(|_| Errno::ERANGE)
}

fn privileged(name: &CString) -> bool {
    let b = name.as_bytes();
    b.starts_with(b"trusted.") || b.starts_with(b"security.")
}

impl Host {
    /// The descriptor the broker is handed (it reaches the file through its own `/proc`).
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Host::Path { _fd, .. } => _fd.as_fd(),
            Host::Fd(f) => f.host(),
        }
    }
}

/// EPERM unless the application may change the target's metadata (see
/// [`super::sys_attr::may_change_metadata`]).
fn may_change(host: &Host) -> Result<(), Errno> {
    match host {
        Host::Path { _fd, .. } => super::sys_attr::may_change_metadata(_fd.as_fd()),
        Host::Fd(f) => super::sys_attr::may_change_file(f),
    }
}

fn set(t: &mut Task, target: Target, a: &SyscallArgs) -> SysResult {
    let (size, flags) = (a.u(3) as usize, a.int(4));
    if flags & !(XATTR_CREATE | XATTR_REPLACE) != 0 {
        return Err(Errno::EINVAL);
    }
    let name = copy_in_name(t, a.gva(1))?;
    if size > SIZE_MAX {
        return Err(Errno::E2BIG);
    }
    let mut value = vec![0u8; size];
    t.copy_in(a.gva(2), &mut value)?;
    let host = open_target(t, &target)?;
    if privileged(&name) {
        return Err(Errno::EPERM);
    }
    may_change(&host)?;
    let own = match &host {
        Host::Path { proc, .. } => fs::host::setxattr(proc, &name, &value, flags),
        Host::Fd(f) => fs::host::fsetxattr(f.host(), &name, &value, flags),
    };
    broker::retry_with(own, || Op::SetXattr {
        file: host.fd(),
        name: name.to_bytes(),
        value: &value,
        flags,
    })?;
    Ok(0)
}

fn get(t: &mut Task, target: Target, a: &SyscallArgs) -> SysResult {
    let name = copy_in_name(t, a.gva(1))?;
    let size = (a.u(3) as usize).min(SIZE_MAX);
    let host = open_target(t, &target)?;
    let mut value = vec![0u8; size];
    // An empty buffer asks for the size.
    let len = match &host {
        Host::Path { proc, .. } => fs::host::getxattr(proc, &name, &mut value),
        Host::Fd(f) => fs::host::fgetxattr(f.host(), &name, &mut value),
    }?;
    if size > 0 {
        t.copy_out(a.gva(2), &value[..len])?;
    }
    Ok(len as u64)
}

fn list(t: &mut Task, target: Target, a: &SyscallArgs) -> SysResult {
    let size = (a.u(2) as usize).min(LIST_MAX);
    let host = open_target(t, &target)?;
    let mut names = vec![0u8; size];
    // An empty buffer asks for the size.
    let len = match &host {
        Host::Path { proc, .. } => fs::host::listxattr(proc, &mut names),
        Host::Fd(f) => fs::host::flistxattr(f.host(), &mut names),
    }?;
    if size > 0 {
        t.copy_out(a.gva(1), &names[..len])?;
    }
    Ok(len as u64)
}

fn remove(t: &mut Task, target: Target, a: &SyscallArgs) -> SysResult {
    let name = copy_in_name(t, a.gva(1))?;
    let host = open_target(t, &target)?;
    if privileged(&name) {
        return Err(Errno::EPERM);
    }
    may_change(&host)?;
    let own = match &host {
        Host::Path { proc, .. } => fs::host::removexattr(proc, &name),
        Host::Fd(f) => fs::host::fremovexattr(f.host(), &name),
    };
    broker::retry_with(own, || Op::RemoveXattr {
        file: host.fd(),
        name: name.to_bytes(),
    })?;
    Ok(0)
}

fn path(a: &SyscallArgs, follow: bool) -> Target {
    Target::Path {
        path: a.gva(0),
        follow,
    }
}

/// Implements setxattr(2).
pub fn sys_setxattr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    set(t, path(a, true), a)
}

/// Implements lsetxattr(2).
pub fn sys_lsetxattr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    set(t, path(a, false), a)
}

/// Implements fsetxattr(2).
pub fn sys_fsetxattr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    set(t, Target::Fd(a.int(0)), a)
}

/// Implements getxattr(2).
pub fn sys_getxattr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    get(t, path(a, true), a)
}

/// Implements lgetxattr(2).
pub fn sys_lgetxattr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    get(t, path(a, false), a)
}

/// Implements fgetxattr(2).
pub fn sys_fgetxattr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    get(t, Target::Fd(a.int(0)), a)
}

/// Implements listxattr(2).
pub fn sys_listxattr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    list(t, path(a, true), a)
}

/// Implements llistxattr(2).
pub fn sys_llistxattr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    list(t, path(a, false), a)
}

/// Implements flistxattr(2).
pub fn sys_flistxattr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    list(t, Target::Fd(a.int(0)), a)
}

/// Implements removexattr(2).
pub fn sys_removexattr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    remove(t, path(a, true), a)
}

/// Implements lremovexattr(2).
pub fn sys_lremovexattr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    remove(t, path(a, false), a)
}

/// Implements fremovexattr(2).
pub fn sys_fremovexattr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    remove(t, Target::Fd(a.int(0)), a)
}
