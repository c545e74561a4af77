//! getcwd, chdir, fchdir, mkdir, mkdirat, rmdir, unlink, unlinkat, rename, renameat,
//! renameat2, link, linkat, symlink, symlinkat, mknod, mknodat, umask, getdents64.
//!
//! The calls that create, remove or rename a name resolve its parent directory inside the
//! root ([`fs::Root::parent_of`]) and hand the host's `*at` call that directory and the last
//! component, so the host kernel gives Linux's errnos and never looks outside the root.

use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};

use abi::Errno;
use platform::Gva;

use super::sys_file::{resolve, AT_FDCWD};
use super::{SysResult, SyscallArgs};
use crate::broker::{self, Op};
use crate::fd::FileKind;
use crate::fs;
use crate::task::Task;

/// Implements getcwd(2).
pub fn sys_getcwd(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let mut cwd = t.cwd();
    // A working directory that was removed has no path any more (Linux: ENOENT).
    if crate::fs::procfs::GeneratedDir::of(&cwd, t).is_none()
        && t.root
            .open_at(&cwd, libc::O_PATH | libc::O_DIRECTORY, 0)
            .err()
            == Some(Errno::ENOENT)
    {
        return Err(Errno::ENOENT);
    }
    cwd.push(0);
    if (a.u(1)) < cwd.len() as u64 {
        return Err(Errno::ERANGE);
    }
    t.copy_out(a.gva(0), &cwd)?;
    Ok(cwd.len() as u64)
}

fn change_dir(t: &mut Task, guest: &[u8]) -> SysResult {
    // A generated directory (`/proc`, `/proc/PID`): the path is the directory, whether or not
    // the root has a `/proc` (`top` works from there).
    if let Some(dir) = crate::fs::procfs::GeneratedDir::of(guest, t) {
        t.fs.set_cwd(dir.path());
        return Ok(0);
    }
    let fd = t.root.open_at(guest, libc::O_PATH | libc::O_DIRECTORY, 0)?;
    // The new working directory must be searchable (the dispatcher acts as the task).
    fs::identity::permits(fd.as_fd(), &t.creds, libc::X_OK)?;
    t.fs.set_cwd(t.root.guest_path_of(&fd)?);
    Ok(0)
}

/// Implements chdir(2).
pub fn sys_chdir(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_path(a.gva(0))?;
    let guest = resolve(t, AT_FDCWD, &p)?;
    change_dir(t, &guest)
}

/// Implements chroot(2): the task's root becomes a directory inside it (needs
/// CAP_SYS_CHROOT; the directory must be searchable). Children made after it inherit it.
///
/// The working directory is kept where the new root can see it (`/srv/x` after
/// `chroot("/srv")` is `/x`); one outside the new root becomes the new root, where Linux
/// leaves it outside and a chrooted program could walk out through it. Only the calling task
/// changes root, not the threads it shares its working directory with.
pub fn sys_chroot(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_path(a.gva(0))?;
    let guest = resolve(t, AT_FDCWD, &p)?;
    let fd = t
        .root
        .open_at(&guest, libc::O_PATH | libc::O_DIRECTORY, 0)?;
    fs::identity::permits(fd.as_fd(), &t.creds, libc::X_OK)?;
    if !t.creds.capable(crate::creds::cap::SYS_CHROOT) {
        return Err(Errno::EPERM);
    }
    let at = t.root.guest_path_of(&fd)?;
    let root = fs::Root::of_dir(fd, &t.root)?;
    let cwd = t.cwd();
    let inside = if at == b"/" {
        Some(cwd.as_slice())
    } else {
        cwd.strip_prefix(at.as_slice())
            .filter(|rest| rest.is_empty() || rest.starts_with(b"/"))
    };
    let new_cwd = match inside {
        Some(rest) if !rest.is_empty() => rest.to_vec(),
        _ => b"/".to_vec(),
    };
    t.root = std::sync::Arc::new(root);
    t.fs.set_cwd(new_cwd);
    Ok(0)
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

/// The directory holding the last component of `path` (relative to `dirfd`) and that
/// component, for the calls that create, remove or rename it.
fn parent_of(t: &Task, dirfd: i32, path: &[u8]) -> Result<fs::Parent, Errno> {
    let guest = resolve(t, dirfd, path)?;
    t.root.parent_of(&guest)
}

fn mkdir_at(t: &mut Task, dirfd: i32, path: &[u8], mode: u32) -> SysResult {
    let p = parent_of(t, dirfd, path)?;
    let mode = mode & 0o7777 & !t.umask();
    let own = fs::host::mkdirat(p.dir.as_fd(), &p.name, mode);
    broker::retry_with(own, || Op::MkdirAt {
        dir: p.dir.as_fd(),
        name: p.name.to_bytes(),
        mode,
    })?;
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
    let p = parent_of(t, dirfd, path)?;
    if p.is_root && flags & libc::AT_REMOVEDIR != 0 {
        // rmdir(2): "EBUSY pathname is currently in use by the system": the root is.
        return Err(Errno::EBUSY);
    }
    let own = fs::host::unlinkat(p.dir.as_fd(), &p.name, flags);
    broker::retry_with(own, || Op::UnlinkAt {
        dir: p.dir.as_fd(),
        name: p.name.to_bytes(),
        flags,
    })?;
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

const RENAME_NOREPLACE: u32 = 1;
const RENAME_EXCHANGE: u32 = 2;
const RENAME_WHITEOUT: u32 = 4;

fn rename_at(t: &mut Task, olddir: i32, old: Gva, newdir: i32, new: Gva, flags: u32) -> SysResult {
    if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT) != 0
        || (flags & RENAME_EXCHANGE != 0 && flags & (RENAME_NOREPLACE | RENAME_WHITEOUT) != 0)
    {
        return Err(Errno::EINVAL);
    }
    let (old, new) = (t.copy_in_path(old)?, t.copy_in_path(new)?);
    let from = parent_of(t, olddir, &old)?;
    let to = parent_of(t, newdir, &new)?;
    let own = fs::host::renameat2(
        from.dir.as_fd(),
        &from.name,
        to.dir.as_fd(),
        &to.name,
        flags,
    );
    broker::retry_with(own, || Op::RenameAt2 {
        old_dir: from.dir.as_fd(),
        old: from.name.to_bytes(),
        new_dir: to.dir.as_fd(),
        new: to.name.to_bytes(),
        flags,
    })?;
    Ok(0)
}

/// Implements rename(2).
pub fn sys_rename(t: &mut Task, a: &SyscallArgs) -> SysResult {
    rename_at(t, AT_FDCWD, a.gva(0), AT_FDCWD, a.gva(1), 0)
}

/// Implements renameat(2).
pub fn sys_renameat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    rename_at(t, a.int(0), a.gva(1), a.int(2), a.gva(3), 0)
}

/// Implements renameat2(2): RENAME_NOREPLACE, RENAME_EXCHANGE and RENAME_WHITEOUT, by the
/// host.
pub fn sys_renameat2(t: &mut Task, a: &SyscallArgs) -> SysResult {
    rename_at(t, a.int(0), a.gva(1), a.int(2), a.gva(3), a.u(4) as u32)
}

const AT_SYMLINK_FOLLOW: i32 = 0x400;
const AT_EMPTY_PATH: i32 = 0x1000;

/// The file a link(2)'s old path names, opened `O_PATH` inside the root: an open descriptor
/// for an empty path with AT_EMPTY_PATH (an `O_TMPFILE` file among them), a `/proc/self/fd/N`
/// link followed to the descriptor it names, else the path (its last symlink followed only
/// with AT_SYMLINK_FOLLOW).
fn link_source(t: &Task, dirfd: i32, path: &[u8], flags: i32) -> Result<OwnedFd, Errno> {
    if path.is_empty() {
        if flags & AT_EMPTY_PATH == 0 {
            return Err(Errno::ENOENT);
        }
        if dirfd == AT_FDCWD {
            return t.root.open_at(&t.cwd(), libc::O_PATH, 0);
        }
        return t.fds.get(dirfd)?.owned().try_clone().map_err(Errno::from);
    }
    let guest = resolve(t, dirfd, path)?;
    if flags & AT_SYMLINK_FOLLOW != 0 {
        if let Some(n) = crate::fs::procfs::self_relative(&guest, t.pid)
            .and_then(|w| w.strip_prefix("fd/"))
            .and_then(|n| n.parse::<i32>().ok())
        {
            let f = t.fds.get(n).map_err(|_| Errno::ENOENT)?;
            return f.owned().try_clone().map_err(Errno::from);
        }
    }
    // /proc is a file system of its own: a link from it to any other is EXDEV.
    if guest == b"/proc" || guest.starts_with(b"/proc/") {
        return Err(Errno::EXDEV);
    }
    let nofollow = if flags & AT_SYMLINK_FOLLOW == 0 {
        libc::O_NOFOLLOW
    } else {
        0
    };
    t.root.open_at(&guest, libc::O_PATH | nofollow, 0)
}

fn link_at(t: &mut Task, olddir: i32, old: Gva, newdir: i32, new: Gva, flags: i32) -> SysResult {
    if flags & !(AT_SYMLINK_FOLLOW | AT_EMPTY_PATH) != 0 {
        return Err(Errno::EINVAL);
    }
    let old = if flags & AT_EMPTY_PATH != 0 {
        t.copy_in_str(old, libc::PATH_MAX as usize)?
    } else {
        t.copy_in_path(old)?
    };
    let new = t.copy_in_path(new)?;
    let src = link_source(t, olddir, &old, flags)?;
    let to = parent_of(t, newdir, &new)?;
    // The host links the very inode `src` refers to; AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH,
    // so a runtime without it goes through the descriptor's /proc link instead (as the task:
    // the host checks its right to link). A refusal is the broker's to answer for a task with
    // file capabilities; the broker links by the descriptor (AT_EMPTY_PATH), which takes
    // CAP_DAC_READ_SEARCH as a means, not as a right: the task already opened `src`.
    match fs::host::link_fd(src.as_fd(), to.dir.as_fd(), &to.name) {
        Ok(()) => return Ok(0),
        Err(e) if e != Errno::ENOENT && e != Errno::EPERM => return Err(e),
        Err(_) => {}
    }
    // The /proc path names one of the runtime's own descriptors.
    let proc = fs::host_fd_path(&src);
    let own = fs::host::link_path(&proc, to.dir.as_fd(), &to.name);
    let read_search = 1 << crate::creds::cap::DAC_READ_SEARCH;
    broker::retry_adding(own, read_search, || Op::LinkAt {
        old_dir: src.as_fd(),
        old: b"",
        new_dir: to.dir.as_fd(),
        new: to.name.to_bytes(),
        flags: AT_EMPTY_PATH,
    })
    .map(|()| 0)
}

/// Implements link(2).
pub fn sys_link(t: &mut Task, a: &SyscallArgs) -> SysResult {
    link_at(t, AT_FDCWD, a.gva(0), AT_FDCWD, a.gva(1), 0)
}

/// Implements linkat(2), AT_EMPTY_PATH and `/proc/self/fd/N` sources (`O_TMPFILE` files)
/// included.
pub fn sys_linkat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    link_at(t, a.int(0), a.gva(1), a.int(2), a.gva(3), a.int(4))
}

fn symlink_at(t: &mut Task, target: Gva, newdir: i32, new: Gva) -> SysResult {
    // The target is stored as given: it is only ever resolved inside the root (openat2 with
    // RESOLVE_IN_ROOT), however absolute or `..`-laden it is.
    let target = t.copy_in_path(target)?;
    let target = CString::new(target).map_err(|_| Errno::EINVAL)?;
    let new = t.copy_in_path(new)?;
    let to = parent_of(t, newdir, &new)?;
    let own = fs::host::symlinkat(&target, to.dir.as_fd(), &to.name);
    broker::retry_with(own, || Op::SymlinkAt {
        target: target.to_bytes(),
        dir: to.dir.as_fd(),
        name: to.name.to_bytes(),
    })?;
    Ok(0)
}

/// Implements symlink(2).
pub fn sys_symlink(t: &mut Task, a: &SyscallArgs) -> SysResult {
    symlink_at(t, a.gva(0), AT_FDCWD, a.gva(1))
}

/// Implements symlinkat(2).
pub fn sys_symlinkat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    symlink_at(t, a.gva(0), a.int(1), a.gva(2))
}

fn mknod_at(t: &mut Task, dirfd: i32, path: Gva, mode: u32, dev: u64) -> SysResult {
    // Linux checks the type before it looks at the path (may_mknod).
    let kind = mode & libc::S_IFMT;
    match kind {
        0 | libc::S_IFREG | libc::S_IFIFO | libc::S_IFSOCK => {}
        // Device nodes would hand the application the host's devices: refused, as for a
        // process without CAP_MKNOD.
        libc::S_IFCHR | libc::S_IFBLK => return Err(Errno::EPERM),
        libc::S_IFDIR => return Err(Errno::EPERM),
        _ => return Err(Errno::EINVAL),
    }
    let path = t.copy_in_path(path)?;
    let p = parent_of(t, dirfd, &path)?;
    let mode = kind | (mode & 0o7777 & !t.umask());
    // Only regular files, FIFOs and sockets (checked above).
    let own = fs::host::mknodat(p.dir.as_fd(), &p.name, mode, dev);
    broker::retry_with(own, || Op::MknodAt {
        dir: p.dir.as_fd(),
        name: p.name.to_bytes(),
        mode,
        dev,
    })?;
    Ok(0)
}

/// Implements mknod(2): regular files, FIFOs and sockets; device nodes are EPERM.
pub fn sys_mknod(t: &mut Task, a: &SyscallArgs) -> SysResult {
    mknod_at(t, AT_FDCWD, a.gva(0), a.u(1) as u32, a.u(2))
}

/// Implements mknodat(2): regular files, FIFOs and sockets; device nodes are EPERM.
pub fn sys_mknodat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    mknod_at(t, a.int(0), a.gva(1), a.u(2) as u32, a.u(3))
}

/// Implements umask(2).
pub fn sys_umask(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let old = t.fs.set_umask(a.u(0) as u32);
    Ok(u64::from(old))
}

/// Implements getdents64(2): the host's records, copied out unchanged (same ABI).
pub fn sys_getdents64(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    if !matches!(f.kind, FileKind::Directory) {
        return Err(Errno::ENOTDIR);
    }
    let len = (a.u(2) as usize).min(1 << 20);
    if let Some(dir) = f
        .path
        .as_deref()
        .and_then(|p| crate::fs::procfs::GeneratedDir::of(p, t))
    {
        let entries = dir.entries(t).ok_or(Errno::ENOENT)?;
        return generated_dirents(t, &f, &entries, a.gva(1), len);
    }
    let mut buf = vec![0u8; len];
    let n = fs::host::getdents64(f.host(), &mut buf)?;
    t.copy_out(a.gva(1), &buf[..n])?;
    Ok(n as u64)
}

/// getdents64 of a generated directory: the `struct linux_dirent64` records of `entries` from
/// the descriptor's position (an entry's own position, see `procfs::DirEntry`), as many as
/// `len` bytes hold.
fn generated_dirents(
    t: &Task,
    f: &crate::fd::OpenFile,
    entries: &[crate::fs::procfs::DirEntry],
    out: Gva,
    len: usize,
) -> SysResult {
    let start = crate::fd::host::offset(f.host()) as u64;
    let mut buf = Vec::new();
    let mut next = start;
    let mut left = false;
    for (pos, name, kind) in entries.iter().filter(|e| e.0 >= start) {
        // d_ino (8), d_off (8), d_reclen (2), d_type (1), the name and its NUL, 8-aligned.
        let reclen = (19 + name.len() + 1).next_multiple_of(8);
        if buf.len() + reclen > len {
            left = true;
            break;
        }
        let rec_at = buf.len();
        buf.resize(rec_at + reclen, 0);
        let r = &mut buf[rec_at..];
        r[0..8].copy_from_slice(&(pos + 1).to_le_bytes());
        r[8..16].copy_from_slice(&(pos + 1).to_le_bytes());
        r[16..18].copy_from_slice(&(reclen as u16).to_le_bytes());
        r[18] = *kind;
        r[19..19 + name.len()].copy_from_slice(name);
        next = pos + 1;
    }
    if buf.is_empty() && left {
        return Err(Errno::EINVAL);
    }
    // A directory's position is where the next call starts (a failure changes nothing).
    let _ = crate::fd::host::seek(f.host(), next as i64, libc::SEEK_SET);
    t.copy_out(out, &buf)?;
    Ok(buf.len() as u64)
}
