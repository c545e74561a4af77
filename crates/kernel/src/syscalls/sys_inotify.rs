//! inotify_init, inotify_init1, inotify_add_watch, inotify_rm_watch: host inotify instances.
//!
//! An instance is a host inotify fd (a [`FileKind::Inotify`] file without a path: reads, poll
//! and epoll go to the host as for any file). A watch is placed on a file found inside the
//! root: it is opened `O_PATH` there (without following with IN_DONT_FOLLOW, as a directory
//! with IN_ONLYDIR) and the host watches it through its `/proc/self/fd/N` link, which the host
//! follows to that very inode. Events name entries relative to the watched directory, so they
//! need no translation; watch descriptors are the host's, numbered per instance as on Linux.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;

use abi::Errno;

use super::sys_file::AT_FDCWD;
use super::sys_stat::open_path;
use super::{SysResult, SyscallArgs};
use crate::fd::{host, FileKind, OpenFile};
use crate::fs;
use crate::task::Task;

/// Every event and option bit inotify_add_watch(2) knows (ALL_INOTIFY_BITS).
const IN_ALL_EVENTS: u32 = 0x0000_0fff;
const IN_ONLYDIR: u32 = 0x0100_0000;
const IN_DONT_FOLLOW: u32 = 0x0200_0000;
const IN_EXCL_UNLINK: u32 = 0x0400_0000;
const IN_MASK_CREATE: u32 = 0x1000_0000;
const IN_MASK_ADD: u32 = 0x2000_0000;
const IN_ONESHOT: u32 = 0x8000_0000;
const AT_SYMLINK_NOFOLLOW: i32 = 0x100;

fn init(t: &mut Task, flags: i32) -> SysResult {
    if flags & !(libc::IN_NONBLOCK | libc::IN_CLOEXEC) != 0 {
        return Err(Errno::EINVAL);
    }
    if instances(t) >= crate::fs::procfs::sysctl::inotify_max_instances_of(t) {
        return Err(Errno::EMFILE);
    }
    // The runtime's copy is always close-on-exec (the guest's flag lives in its fd table).
    let fd = host::inotify_init(flags & libc::IN_NONBLOCK)?;
    let file = Arc::new(OpenFile::new(fd, FileKind::Inotify, None));
    Ok(t.fds.insert(file, flags & libc::IN_CLOEXEC != 0)? as u64)
}

/// The inotify instances the sandbox's processes hold (each open instance once, however
/// many descriptors or tables share it): what `max_user_instances` bounds.
fn instances(t: &Task) -> u64 {
    let mut seen: Vec<Arc<OpenFile>> = Vec::new();
    for table in t.sandbox_fd_tables() {
        for (_, f) in table.iter() {
            if matches!(f.kind, FileKind::Inotify) && !seen.iter().any(|s| Arc::ptr_eq(s, &f)) {
                seen.push(f);
            }
        }
    }
    seen.len() as u64
}

/// Implements inotify_init(2).
pub fn sys_inotify_init(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    init(t, 0)
}

/// Implements inotify_init1(2).
pub fn sys_inotify_init1(t: &mut Task, a: &SyscallArgs) -> SysResult {
    init(t, a.int(0))
}

/// Whether host fd `fd` is an inotify instance.
fn is_inotify(fd: &impl AsRawFd) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .is_ok_and(|l| l.as_os_str() == "anon_inode:inotify")
}

/// Implements inotify_add_watch(2).
pub fn sys_inotify_add_watch(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let mask = a.u(2) as u32;
    let known = IN_ALL_EVENTS
        | IN_ONLYDIR
        | IN_DONT_FOLLOW
        | IN_EXCL_UNLINK
        | IN_MASK_CREATE
        | IN_MASK_ADD
        | IN_ONESHOT;
    // Linux's order: the mask, the descriptor, then the path.
    if mask & IN_ALL_EVENTS == 0
        || mask & (IN_MASK_ADD | IN_MASK_CREATE) == IN_MASK_ADD | IN_MASK_CREATE
    {
        return Err(Errno::EINVAL);
    }
    let f = t.fds.get(a.int(0))?;
    if !is_inotify(&f.host()) {
        return Err(Errno::EINVAL);
    }
    let p = t.copy_in_path(a.gva(1))?;
    let flags = if mask & IN_DONT_FOLLOW != 0 {
        AT_SYMLINK_NOFOLLOW
    } else {
        0
    };
    let target = open_path(t, AT_FDCWD, &p, flags)?;
    if mask & IN_ONLYDIR != 0 {
        let st = crate::fs::host::stat(target.as_fd())?;
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(Errno::ENOTDIR);
        }
    }
    let proc = fs::host_fd_path(&target);
    // The /proc link is followed (to the inode found above, a symlink itself with
    // IN_DONT_FOLLOW); the rest of the mask is the guest's.
    let host_mask = mask & known & !(IN_DONT_FOLLOW | IN_ONLYDIR);
    let wd = host::inotify_add_watch(f.host(), &proc, host_mask)?;
    Ok(wd as u64)
}

/// Implements inotify_rm_watch(2).
pub fn sys_inotify_rm_watch(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    // EINVAL from the host if the descriptor is no instance.
    host::inotify_rm_watch(f.host(), a.int(1))?;
    Ok(0)
}
