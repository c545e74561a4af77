//! A file's attributes: chmod, fchmod, fchmodat, fchmodat2, chown, fchown, lchown, fchownat,
//! utime, utimes, futimesat, utimensat, truncate.
//!
//! Path forms find the file inside the root as an `O_PATH` descriptor (following the last
//! symlink unless told not to), then act on that descriptor: with AT_EMPTY_PATH where the host
//! call takes it, else through the descriptor's `/proc/self/fd/N` link, which the host kernel
//! follows to the very inode found, never through a path outside the root.

use std::os::fd::{AsFd, BorrowedFd};

use abi::structs::{Timespec, Timeval};
use abi::Errno;
use platform::Gva;

use super::sys_file::AT_FDCWD;
use super::sys_stat::open_path;
use super::{SysResult, SyscallArgs};
use crate::broker::{self, Op};
use crate::fs;
use crate::task::Task;

const AT_SYMLINK_NOFOLLOW: i32 = 0x100;
const AT_EMPTY_PATH: i32 = 0x1000;

/// Whether the application may change the metadata (mode, owner, times, extended attributes)
/// of the host object behind `fd`: regular files, directories, symlinks, FIFOs and sockets
/// only. Device nodes (the host's `/dev/null` handed to a root without `/dev`, a terminal
/// passed as stdio) and anonymous inodes (eventfds, epoll, memfd-less `anon_inode`s, one
/// inode shared by the whole host) are EPERM: changing them would change the host's.
pub(super) fn may_change_metadata(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    let st = fs::host::stat(fd)?;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG | libc::S_IFDIR | libc::S_IFLNK | libc::S_IFIFO | libc::S_IFSOCK => Ok(()),
        _ => Err(Errno::EPERM),
    }
}

/// [`may_change_metadata`] for a descriptor of the table: also EPERM for the runtime's own
/// stdio streams passed through (a host file, pipe or terminal the sandbox was given to
/// write, not to own).
pub(super) fn may_change_file(f: &crate::fd::OpenFile) -> Result<(), Errno> {
    if matches!(f.kind, crate::fd::FileKind::Stdio) {
        return Err(Errno::EPERM);
    }
    may_change_metadata(f.host())
}

fn chmod_at(t: &mut Task, dirfd: i32, path: Gva, mode: u32, flags: i32) -> SysResult {
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return Err(Errno::EINVAL);
    }
    let p = if flags & AT_EMPTY_PATH != 0 {
        t.copy_in_str(path, libc::PATH_MAX as usize)?
    } else {
        t.copy_in_path(path)?
    };
    let fd = open_path(t, dirfd, &p, flags)?;
    may_change_metadata(fd.as_fd())?;
    if flags & AT_SYMLINK_NOFOLLOW != 0 {
        // fchmodat2(2): a symlink's mode cannot be changed.
        let st = fs::host::stat(fd.as_fd())?;
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            return Err(Errno::EOPNOTSUPP);
        }
    }
    let proc = fs::host_fd_path(&fd);
    let mode = mode & 0o7777;
    let own = fs::host::chmod_path(&proc, mode);
    broker::retry_with(own, || Op::Chmod {
        file: fd.as_fd(),
        mode,
    })?;
    Ok(0)
}

/// Implements chmod(2).
pub fn sys_chmod(t: &mut Task, a: &SyscallArgs) -> SysResult {
    chmod_at(t, AT_FDCWD, a.gva(0), a.u(1) as u32, 0)
}

/// Implements fchmodat(2) (the system call has no flags argument).
pub fn sys_fchmodat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    chmod_at(t, a.int(0), a.gva(1), a.u(2) as u32, 0)
}

/// Implements fchmodat2(2): AT_SYMLINK_NOFOLLOW (EOPNOTSUPP on a symlink) and AT_EMPTY_PATH.
pub fn sys_fchmodat2(t: &mut Task, a: &SyscallArgs) -> SysResult {
    chmod_at(t, a.int(0), a.gva(1), a.u(2) as u32, a.int(3))
}

/// Implements fchmod(2).
pub fn sys_fchmod(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    may_change_file(&f)?;
    let mode = a.u(1) as u32 & 0o7777;
    let own = fs::host::fchmod(f.host(), mode);
    broker::retry_with(own, || Op::Chmod {
        file: f.host(),
        mode,
    })?;
    Ok(0)
}

fn chown_at(t: &mut Task, dirfd: i32, path: Gva, uid: u32, gid: u32, flags: i32) -> SysResult {
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return Err(Errno::EINVAL);
    }
    let p = if flags & AT_EMPTY_PATH != 0 {
        t.copy_in_str(path, libc::PATH_MAX as usize)?
    } else {
        t.copy_in_path(path)?
    };
    let fd = open_path(t, dirfd, &p, flags)?;
    may_change_metadata(fd.as_fd())?;
    // The fd's inode, a symlink itself when it was opened without following.
    let own = fs::host::chown_fd(fd.as_fd(), uid, gid);
    broker::retry_with(own, || Op::FchownAt {
        dir: fd.as_fd(),
        name: b"",
        uid,
        gid,
        flags: AT_EMPTY_PATH,
    })?;
    Ok(0)
}

/// Implements chown(2).
pub fn sys_chown(t: &mut Task, a: &SyscallArgs) -> SysResult {
    chown_at(t, AT_FDCWD, a.gva(0), a.u(1) as u32, a.u(2) as u32, 0)
}

/// Implements lchown(2).
pub fn sys_lchown(t: &mut Task, a: &SyscallArgs) -> SysResult {
    chown_at(
        t,
        AT_FDCWD,
        a.gva(0),
        a.u(1) as u32,
        a.u(2) as u32,
        AT_SYMLINK_NOFOLLOW,
    )
}

/// Implements fchownat(2).
pub fn sys_fchownat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    chown_at(
        t,
        a.int(0),
        a.gva(1),
        a.u(2) as u32,
        a.u(3) as u32,
        a.int(4),
    )
}

/// Implements fchown(2).
pub fn sys_fchown(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    may_change_file(&f)?;
    let (uid, gid) = (a.u(1) as u32, a.u(2) as u32);
    let own = fs::host::fchown(f.host(), uid, gid);
    broker::retry_with(own, || Op::FchownAt {
        dir: f.host(),
        name: b"",
        uid,
        gid,
        flags: AT_EMPTY_PATH,
    })?;
    Ok(0)
}

/// Reads a guest `struct timespec[2]`, checking each `tv_nsec` (EINVAL unless in range or
/// UTIME_NOW/UTIME_OMIT).
fn copy_in_timespecs(t: &Task, addr: Gva) -> Result<[libc::timespec; 2], Errno> {
    let guest: [Timespec; 2] = t.read_val(addr)?;
    let mut out = [libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    }; 2];
    for (ts, g) in out.iter_mut().zip(guest) {
        if !(0..1_000_000_000).contains(&g.nsec)
            && g.nsec != libc::UTIME_NOW
            && g.nsec != libc::UTIME_OMIT
        {
            return Err(Errno::EINVAL);
        }
        ts.tv_sec = g.sec;
        ts.tv_nsec = g.nsec;
    }
    Ok(out)
}

/// Sets the times of `path` (relative to `dirfd`), or of `dirfd` itself when `path` is the
/// null pointer; `times` None means now.
fn utimens(
    t: &Task,
    dirfd: i32,
    path: Gva,
    times: Option<[libc::timespec; 2]>,
    flags: i32,
) -> SysResult {
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return Err(Errno::EINVAL);
    }
    // What the broker is given for a null `times`: both "now", which Linux treats alike.
    let now = libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::UTIME_NOW,
    };
    let broker_times = times.unwrap_or([now, now]);
    if path.0 == 0 && dirfd != AT_FDCWD {
        // utimensat(2): "If pathname is NULL, then the call modifies the timestamps of the
        // file referred to by the file descriptor dirfd" (and takes no flags).
        if flags != 0 {
            return Err(Errno::EINVAL);
        }
        let f = t.fds.get(dirfd)?;
        may_change_file(&f)?;
        // The raw call: the C library's wrapper refuses a null path.
        let own = fs::host::utimens_fd(f.host(), times.as_ref());
        broker::retry_with(own, || Op::UtimensAt {
            dir: f.host(),
            name: b"",
            times: broker_times,
            flags: AT_EMPTY_PATH,
        })?;
        return Ok(0);
    }
    let p = if flags & AT_EMPTY_PATH != 0 {
        t.copy_in_str(path, libc::PATH_MAX as usize)?
    } else {
        t.copy_in_path(path)?
    };
    let fd = open_path(t, dirfd, &p, flags)?;
    may_change_metadata(fd.as_fd())?;
    // AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, as the broker's call below.
    let own = fs::host::utimens_empty_path(fd.as_fd(), times.as_ref());
    broker::retry_with(own, || Op::UtimensAt {
        dir: fd.as_fd(),
        name: b"",
        times: broker_times,
        flags: AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW,
    })?;
    Ok(0)
}

/// Implements utimensat(2).
pub fn sys_utimensat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let times = if a.u(2) == 0 {
        None
    } else {
        Some(copy_in_timespecs(t, a.gva(2))?)
    };
    utimens(t, a.int(0), a.gva(1), times, a.int(3))
}

/// Reads a guest `struct timeval[2]` as timespecs (EINVAL for a `tv_usec` out of range).
fn copy_in_timevals(t: &Task, addr: Gva) -> Result<Option<[libc::timespec; 2]>, Errno> {
    if addr.0 == 0 {
        return Ok(None);
    }
    let guest: [Timeval; 2] = t.read_val(addr)?;
    let mut out = [libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    }; 2];
    for (ts, g) in out.iter_mut().zip(guest) {
        let g = g.to_timespec()?;
        ts.tv_sec = g.sec;
        ts.tv_nsec = g.nsec;
    }
    Ok(Some(out))
}

/// Implements utimes(2).
pub fn sys_utimes(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let times = copy_in_timevals(t, a.gva(1))?;
    utimens(t, AT_FDCWD, a.gva(0), times, 0)
}

/// Implements futimesat(2).
pub fn sys_futimesat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let times = copy_in_timevals(t, a.gva(2))?;
    utimens(t, a.int(0), a.gva(1), times, 0)
}

/// Implements utime(2).
pub fn sys_utime(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let times = if a.u(1) == 0 {
        None
    } else {
        let (atime, mtime) = (
            t.read_u64(a.gva(1))?,
            t.read_u64(Gva(a.u(1).wrapping_add(8)))?,
        );
        Some([
            libc::timespec {
                tv_sec: atime as i64,
                tv_nsec: 0,
            },
            libc::timespec {
                tv_sec: mtime as i64,
                tv_nsec: 0,
            },
        ])
    };
    utimens(t, AT_FDCWD, a.gva(0), times, 0)
}

/// Implements truncate(2).
pub fn sys_truncate(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let p = t.copy_in_path(a.gva(0))?;
    let len = a.u(1) as i64;
    if len < 0 {
        return Err(Errno::EINVAL);
    }
    let fd = open_path(t, AT_FDCWD, &p, 0)?;
    let st = fs::host::stat(fd.as_fd())?;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => {}
        libc::S_IFDIR => return Err(Errno::EISDIR),
        _ => return Err(Errno::EINVAL),
    }
    super::sys_file::refuse_running_program(t, fd.as_fd())?;
    // Reopen the very file for writing (never a FIFO or device: checked above): the caller
    // may write it (EACCES first), then may make it that long (EFBIG), as Linux checks.
    let proc = fs::host_fd_path(&fd);
    let w = crate::fd::host::open(&proc, libc::O_WRONLY)?;
    super::sys_rw::new_size_allowed(t, st.st_size as u64, len as u64)?;
    crate::fd::host::truncate(w.as_fd(), len)?;
    Ok(0)
}
