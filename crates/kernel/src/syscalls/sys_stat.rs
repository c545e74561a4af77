//! stat, fstat, lstat, newfstatat, statx, access, faccessat, faccessat2, readlink, readlinkat,
//! statfs, fstatfs.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use abi::Errno;
use platform::Gva;

use super::sys_file::{resolve, AT_FDCWD};
use super::{SysResult, SyscallArgs};
use crate::fs::host;
use crate::fs::procfs::ns;
use crate::task::Task;

const AT_SYMLINK_NOFOLLOW: i32 = 0x100;
const AT_EMPTY_PATH: i32 = 0x1000;
const AT_NO_AUTOMOUNT: i32 = 0x800;
const AT_STATX_SYNC_TYPE: i32 = 0x6000;

/// Opens `path` relative to `dirfd` as an O_PATH fd (following the last symlink unless
/// `nofollow`); an empty path with AT_EMPTY_PATH names `dirfd` itself.
pub(super) fn open_path(t: &Task, dirfd: i32, path: &[u8], flags: i32) -> Result<OwnedFd, Errno> {
    if path.is_empty() {
        if flags & AT_EMPTY_PATH == 0 {
            return Err(Errno::ENOENT);
        }
        if dirfd == AT_FDCWD {
            return t.root.open_at(&t.cwd(), libc::O_PATH, 0);
        }
        let f = t.fds.get(dirfd)?;
        return f.owned().try_clone().map_err(Errno::from);
    }
    let guest = resolve(t, dirfd, path)?;
    if crate::fs::procfs::GeneratedDir::of(&guest, t).is_some() {
        return super::sys_file::process_dir_backing(t);
    }
    // A generated file (`/proc/self/status`...): its contents now, in a memory file.
    if let Some(r) = crate::fs::procfs::open(t, &guest) {
        return r;
    }
    if flags & AT_SYMLINK_NOFOLLOW == 0 {
        // `/proc/self/fd/N`, `/dev/stdin`...: links to the descriptor's own file.
        if let Some(fd) = super::sys_file::fd_named_by(&guest, t.pid) {
            let f = t.fds.get(fd).map_err(|_| Errno::ENOENT)?;
            return f.owned().try_clone().map_err(Errno::from);
        }
    }
    let mut oflags = libc::O_PATH;
    if flags & AT_SYMLINK_NOFOLLOW != 0 {
        oflags |= libc::O_NOFOLLOW;
    }
    t.root.open_at(&guest, oflags, 0)
}

/// The stat of a namespace link of /proc that `path` (relative to `dirfd`) names, or of the
/// namespace descriptor `dirfd` with an empty path and AT_EMPTY_PATH: the link itself with
/// AT_SYMLINK_NOFOLLOW, else the namespace ([`ns`]). `None` for anything else.
fn namespace_stat(
    t: &Task,
    dirfd: i32,
    path: &[u8],
    flags: i32,
) -> Option<Result<libc::stat, Errno>> {
    if path.is_empty() {
        if flags & AT_EMPTY_PATH == 0 || dirfd == AT_FDCWD {
            return None;
        }
        return ns::of_file(&*t.fds.get(dirfd).ok()?).map(|n| Ok(ns::ns_stat(n)));
    }
    let guest = resolve(t, dirfd, path).ok()?;
    let link = ns::link_at(&guest, t)?;
    Some(if flags & AT_SYMLINK_NOFOLLOW != 0 {
        Ok(ns::link_stat(t, link))
    } else {
        ns::check_access(t, link).map(|()| ns::ns_stat(link.ns))
    })
}

fn copy_out_stat(t: &Task, addr: Gva, st: &libc::stat) -> Result<(), Errno> {
    t.copy_out(addr, host::stat_bytes(st))
}

fn stat_at(t: &mut Task, dirfd: i32, path: &[u8], flags: i32, out: Gva) -> SysResult {
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH | AT_NO_AUTOMOUNT) != 0 {
        return Err(Errno::EINVAL);
    }
    if path.is_empty() && flags & AT_EMPTY_PATH != 0 && dirfd != AT_FDCWD {
        if let Some(st) = mq_stat(t, dirfd) {
            copy_out_stat(t, out, &st)?;
            return Ok(0);
        }
    }
    if let Some(st) = namespace_stat(t, dirfd, path, flags) {
        copy_out_stat(t, out, &st?)?;
        return Ok(0);
    }
    let fd = open_path(t, dirfd, path, flags)?;
    let st = host::stat(fd.as_fd())?;
    copy_out_stat(t, out, &st)?;
    Ok(0)
}

/// The `struct stat` of descriptor `fd` if it is a message queue's (which the kernel
/// describes itself).
fn mq_stat(t: &Task, fd: i32) -> Option<libc::stat> {
    let f = t.fds.get(fd).ok()?;
    match &f.kind {
        crate::fd::FileKind::Mqueue(m) => Some(super::sys_mq::stat(m)),
        _ => None,
    }
}

/// Implements stat(2).
pub fn sys_stat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_path(a.gva(0))?;
    stat_at(t, AT_FDCWD, &p, 0, a.gva(1))
}

/// Implements lstat(2).
pub fn sys_lstat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_path(a.gva(0))?;
    stat_at(t, AT_FDCWD, &p, AT_SYMLINK_NOFOLLOW, a.gva(1))
}

/// Implements fstat(2).
pub fn sys_fstat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    let st = match &f.kind {
        crate::fd::FileKind::Mqueue(m) => super::sys_mq::stat(m),
        _ => match ns::of_file(&f) {
            Some(n) => ns::ns_stat(n),
            None => host::stat(f.host())?,
        },
    };
    copy_out_stat(t, a.gva(1), &st)?;
    Ok(0)
}

/// Implements newfstatat(2).
pub fn sys_newfstatat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_str(a.gva(1), libc::PATH_MAX as usize)?;
    stat_at(t, a.int(0), &p, a.int(3), a.gva(2))
}

/// Implements statx(2).
pub fn sys_statx(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (dirfd, flags, mask, out) = (a.int(0), a.int(2), a.u(3) as u32, a.gva(4));
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH | AT_NO_AUTOMOUNT | AT_STATX_SYNC_TYPE) != 0
        || flags & AT_STATX_SYNC_TYPE == AT_STATX_SYNC_TYPE
    {
        return Err(Errno::EINVAL);
    }
    let p = t.copy_in_str(a.gva(1), libc::PATH_MAX as usize)?;
    if let Some(st) = namespace_stat(t, dirfd, &p, flags) {
        t.copy_out(out, &host::statx_of(&st?))?;
        return Ok(0);
    }
    let fd = open_path(t, dirfd, &p, flags)?;
    let bytes = host::statx(fd.as_fd(), mask)?;
    t.copy_out(out, &bytes)?;
    Ok(0)
}

fn access_at(t: &mut Task, dirfd: i32, path: &[u8], mode: i32, flags: i32) -> SysResult {
    if mode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
        return Err(Errno::EINVAL);
    }
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH | libc::AT_EACCESS) != 0 {
        return Err(Errno::EINVAL);
    }
    // access(2) checks with the real ids unless AT_EACCESS (Linux's access_override_creds:
    // a real uid 0 uses its permitted capabilities, anyone else none).
    let mut c = (*t.creds).clone();
    if flags & libc::AT_EACCESS == 0 {
        c.fsuid = c.uid;
        c.fsgid = c.gid;
        c.caps.effective = if c.uid == 0 { c.caps.permitted } else { 0 };
    }
    let _acting = crate::fs::identity::act_as(&c)?;
    let fd = open_path(t, dirfd, path, flags)?;
    crate::fs::identity::permits(fd.as_fd(), &c, mode).map(|()| 0)
}

/// Implements access(2).
pub fn sys_access(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_path(a.gva(0))?;
    access_at(t, AT_FDCWD, &p, a.int(1), 0)
}

/// Implements faccessat(2).
pub fn sys_faccessat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_path(a.gva(1))?;
    access_at(t, a.int(0), &p, a.int(2), 0)
}

/// Implements faccessat2(2).
pub fn sys_faccessat2(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_str(a.gva(1), libc::PATH_MAX as usize)?;
    access_at(t, a.int(0), &p, a.int(2), a.int(3))
}

fn readlink_at(t: &mut Task, dirfd: i32, path: &[u8], buf: Gva, len: u64) -> SysResult {
    if len == 0 || len > i32::MAX as u64 {
        return Err(Errno::EINVAL);
    }
    // `/proc/self` and `/proc/thread-self` are links to the caller's process directory.
    let trimmed = path.strip_suffix(b"/").unwrap_or(path);
    let own = match trimmed {
        b"/proc/self" => Some(t.pid.to_string()),
        b"/proc/thread-self" => Some(format!("{}/task/{}", t.pid, t.tid)),
        _ => None,
    };
    if let Some(target) = own {
        let n = target.len().min(len as usize);
        t.copy_out(buf, &target.as_bytes()[..n])?;
        return Ok(n as u64);
    }
    // A namespace's link: `uts:[4026531838]`.
    if let Some(link) = resolve(t, dirfd, path)
        .ok()
        .and_then(|g| ns::link_at(&g, t))
    {
        ns::check_access(t, link)?;
        let target = link.ns.target();
        let n = target.len().min(len as usize);
        t.copy_out(buf, &target.as_bytes()[..n])?;
        return Ok(n as u64);
    }
    if let Some(what) = crate::fs::procfs::self_relative(path, t.pid) {
        let target = if what == "exe" {
            Some(t.exe.clone())
        } else if let Some(n) = what.strip_prefix("fd/") {
            let fd: i32 = n.parse().map_err(|_| Errno::ENOENT)?;
            let file = t.fds.get(fd).map_err(|_| Errno::ENOENT)?;
            Some(fd_link(&file))
        } else {
            None
        };
        if let Some(target) = target {
            let n = target.len().min(len as usize);
            t.copy_out(buf, &target[..n])?;
            return Ok(n as u64);
        }
    }
    // Another process of the sandbox: its executable (its descriptors are its own).
    if let Some((pid, "exe")) = crate::fs::procfs::process_relative(path, t) {
        let g = t.group.procs.group_of(pid).ok_or(Errno::ENOENT)?;
        let target = g.identity().exe;
        let n = target.len().min(len as usize);
        t.copy_out(buf, &target[..n])?;
        return Ok(n as u64);
    }
    // readlinkat(2): "If pathname is an empty string, the call operates on the symbolic link
    // referred to by dirfd"; anything else there is ENOENT.
    let flags = if path.is_empty() {
        AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH
    } else {
        AT_SYMLINK_NOFOLLOW
    };
    let fd = open_path(t, dirfd, path, flags)?;
    let mut out = vec![0u8; (len as usize).min(libc::PATH_MAX as usize * 4)];
    let n = host::readlink(fd.as_fd(), &mut out).map_err(|e| {
        if e == Errno::ENOENT && !path.is_empty() {
            Errno::EINVAL
        } else {
            e
        }
    })?;
    t.copy_out(buf, &out[..n])?;
    Ok(n as u64)
}

/// Implements readlink(2).
pub fn sys_readlink(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_path(a.gva(0))?;
    readlink_at(t, AT_FDCWD, &p, a.gva(1), a.u(2))
}

/// Implements readlinkat(2).
pub fn sys_readlinkat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_str(a.gva(1), libc::PATH_MAX as usize)?;
    readlink_at(t, a.int(0), &p, a.gva(2), a.u(3))
}

fn statfs_fd(t: &Task, fd: BorrowedFd<'_>, out: Gva) -> SysResult {
    let bytes = host::statfs(fd)?;
    t.copy_out(out, &bytes)?;
    Ok(0)
}

/// Implements statfs(2): the host filesystem that holds the path inside the root.
pub fn sys_statfs(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_path(a.gva(0))?;
    let fd = open_path(t, AT_FDCWD, &p, 0)?;
    statfs_fd(t, fd.as_fd(), a.gva(1))
}

/// Implements fstatfs(2): the host filesystem of the file behind the descriptor.
pub fn sys_fstatfs(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    statfs_fd(t, f.host(), a.gva(1))
}

/// What `/proc/self/fd/N` points to: the guest path the file was opened by, or for a socket,
/// pipe or other object the host's `socket:[ino]`-style name (never a host path).
pub(super) fn fd_link(file: &crate::fd::OpenFile) -> Vec<u8> {
    if let Some(n) = ns::of_file(file) {
        return n.target().into_bytes();
    }
    if let Some(p) = &file.path {
        return p.clone();
    }
    let host = std::fs::read_link(format!("/proc/self/fd/{}", file.host().as_raw_fd()))
        .map(|l| l.as_os_str().as_encoded_bytes().to_vec())
        .unwrap_or_default();
    if host.starts_with(b"socket:")
        || host.starts_with(b"pipe:")
        || host.starts_with(b"anon_inode:")
    {
        host
    } else {
        b"anon_inode:[file]".to_vec()
    }
}
