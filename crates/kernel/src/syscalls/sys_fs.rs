//! getcwd, chdir, fchdir, mkdir, mkdirat, rmdir, unlink, unlinkat, umask, getdents64.

use std::os::fd::AsRawFd;

use abi::Errno;

use super::sys_file::{resolve, AT_FDCWD};
use super::{SysResult, SyscallArgs};
use crate::fd::FileKind;
use crate::task::Task;

/// Implements getcwd(2).
pub fn sys_getcwd(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let mut cwd = t.cwd.clone();
    cwd.push(0);
    if (a.u(1)) < cwd.len() as u64 {
        return Err(Errno::ERANGE);
    }
    t.copy_out(a.gva(0), &cwd)?;
    Ok(cwd.len() as u64)
}

fn change_dir(t: &mut Task, guest: &[u8]) -> SysResult {
    let fd = t.root.open_at(guest, libc::O_PATH | libc::O_DIRECTORY, 0)?;
    t.cwd = t.root.guest_path_of(&fd)?;
    Ok(0)
}

/// Implements chdir(2).
pub fn sys_chdir(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_path(a.gva(0))?;
    let guest = resolve(t, AT_FDCWD, &p)?;
    change_dir(t, &guest)
}

/// Implements fchdir(2).
pub fn sys_fchdir(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    match (&f.kind, &f.path) {
        (FileKind::Directory, Some(p)) => {
            let p = p.clone();
            change_dir(t, &p)
        }
        _ => Err(Errno::ENOTDIR),
    }
}

/// Splits a guest path into its parent (opened as a directory fd) and last component.
fn parent_and_name(
    t: &Task,
    dirfd: i32,
    path: &[u8],
) -> Result<(std::os::fd::OwnedFd, std::ffi::CString), Errno> {
    let guest = resolve(t, dirfd, path)?;
    let trimmed: &[u8] = {
        let mut g: &[u8] = &guest;
        while g.len() > 1 && g.last() == Some(&b'/') {
            g = &g[..g.len() - 1];
        }
        g
    };
    let (parent, name) = match trimmed.iter().rposition(|&c| c == b'/') {
        Some(i) => (&trimmed[..i.max(1)], &trimmed[i + 1..]),
        None => (&b"/"[..], trimmed),
    };
    if name.is_empty() || name == b"." || name == b".." {
        return Err(if name == b".." {
            Errno::ENOTEMPTY
        } else {
            Errno::EINVAL
        });
    }
    let dir = t
        .root
        .open_at(parent, libc::O_PATH | libc::O_DIRECTORY, 0)?;
    let name = std::ffi::CString::new(name).map_err(|_| Errno::EINVAL)?;
    Ok((dir, name))
}

fn mkdir_at(t: &mut Task, dirfd: i32, path: &[u8], mode: u32) -> SysResult {
    let (dir, name) = parent_and_name(t, dirfd, path)?;
    // SAFETY: valid dirfd and NUL-terminated single component (no '/').
    let r = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode & 0o7777 & !t.umask) };
    if r != 0 {
        return Err(Errno::last());
    }
    Ok(0)
}

/// Implements mkdir(2).
pub fn sys_mkdir(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_path(a.gva(0))?;
    mkdir_at(t, AT_FDCWD, &p, a.u(1) as u32)
}

/// Implements mkdirat(2).
pub fn sys_mkdirat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_path(a.gva(1))?;
    mkdir_at(t, a.int(0), &p, a.u(2) as u32)
}

fn unlink_at(t: &mut Task, dirfd: i32, path: &[u8], flags: i32) -> SysResult {
    if flags & !libc::AT_REMOVEDIR != 0 {
        return Err(Errno::EINVAL);
    }
    let (dir, name) = parent_and_name(t, dirfd, path)?;
    // SAFETY: valid dirfd and a single NUL-terminated component.
    let r = unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) };
    if r != 0 {
        return Err(Errno::last());
    }
    Ok(0)
}

/// Implements rmdir(2).
pub fn sys_rmdir(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_path(a.gva(0))?;
    unlink_at(t, AT_FDCWD, &p, libc::AT_REMOVEDIR)
}

/// Implements unlink(2).
pub fn sys_unlink(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_path(a.gva(0))?;
    unlink_at(t, AT_FDCWD, &p, 0)
}

/// Implements unlinkat(2).
pub fn sys_unlinkat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_path(a.gva(1))?;
    unlink_at(t, a.int(0), &p, a.int(2))
}

/// Implements umask(2).
pub fn sys_umask(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let old = t.umask;
    t.umask = a.u(0) as u32 & 0o777;
    Ok(u64::from(old))
}

/// Implements getdents64(2): the host's records, copied out unchanged (same ABI).
pub fn sys_getdents64(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    if !matches!(f.kind, FileKind::Directory) {
        return Err(Errno::ENOTDIR);
    }
    let len = (a.u(2) as usize).min(1 << 20);
    let mut buf = vec![0u8; len];
    // SAFETY: getdents64 writes at most `len` bytes into `buf`.
    let n = unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            f.host().as_raw_fd(),
            buf.as_mut_ptr(),
            len,
        )
    };
    if n < 0 {
        return Err(Errno::last());
    }
    t.copy_out(a.gva(1), &buf[..n as usize])?;
    Ok(n as u64)
}
