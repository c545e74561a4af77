//! open, openat, creat, close, close_range, dup, dup2, dup3, fcntl (record locks included),
//! ioctl, flock, fallocate, sync, syncfs.

use std::os::fd::AsFd;
use std::sync::Arc;

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::fd::{dnotify, host, lease, owner, FileKind, OpenFile};
use crate::fs;
use crate::fs::procfs::GeneratedDir;
use crate::task::Task;

/// `AT_FDCWD`.
pub const AT_FDCWD: i32 = -100;

/// Flags open(2) accepts (Linux's VALID_OPEN_FLAGS: others are EINVAL in openat2, ignored
/// in open).
pub(super) const OPEN_FLAGS: i32 = libc::O_ACCMODE
    | libc::O_CREAT
    | libc::O_EXCL
    | libc::O_NOCTTY
    | libc::O_TRUNC
    | libc::O_APPEND
    | libc::O_NONBLOCK
    | libc::O_DSYNC
    | libc::O_SYNC
    | libc::O_DIRECTORY
    | libc::O_NOFOLLOW
    | libc::O_CLOEXEC
    | libc::O_NOATIME
    | libc::O_PATH
    | libc::O_TMPFILE
    | libc::O_LARGEFILE
    | libc::O_DIRECT
    | 0o20000; // FASYNC

/// The guest path `path` names relative to `dirfd` (AT_FDCWD or a directory fd).
///
/// # Errors
/// EBADF, ENOTDIR.
pub fn resolve(t: &Task, dirfd: i32, path: &[u8]) -> Result<Vec<u8>, Errno> {
    if path.first() == Some(&b'/') {
        return Ok(path.to_vec());
    }
    if dirfd == AT_FDCWD {
        return Ok(fs::join(&t.cwd(), path));
    }
    let f = t.fds.get(dirfd)?;
    match (&f.kind, &f.path) {
        (FileKind::Directory, Some(base)) => Ok(fs::join(base, path)),
        _ => Err(Errno::ENOTDIR),
    }
}

/// Whether the caller may open for writing a file of `/proc/PID` owned by process `pid`'s
/// owner (mode 0644): it is the owner, or has CAP_DAC_OVERRIDE.
fn may_write_owned_by(t: &Task, pid: i32) -> bool {
    let owner = t
        .group
        .procs
        .group_of(pid)
        .map_or((0, 0), |g| g.identity().creds.proc_owner());
    t.creds.fsuid == owner.0 || t.creds.capable(crate::creds::cap::DAC_OVERRIDE)
}

/// Opens `path` (relative to `dirfd`) and installs it.
pub fn open_file(t: &mut Task, dirfd: i32, path: &[u8], flags: i32, mode: u32) -> SysResult {
    // open(2) and openat(2) ignore bits they do not know (only openat2 refuses them).
    let flags = flags & OPEN_FLAGS;
    let guest = resolve(t, dirfd, path)?;
    if guest == b"/dev/ptmx" || guest == b"/dev/pts/ptmx" {
        return open_ptmx(t, flags);
    }
    // `/proc`, `/proc/PID` and `/proc/PID/fd`: listed by `sys_getdents64`, whether or not
    // the root has a `/proc` directory.
    if let Some(dir) = GeneratedDir::of(&guest, t) {
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            return Err(Errno::EISDIR);
        }
        // Another process's descriptors: its owner's (mode 0500), or CAP_DAC_OVERRIDE's.
        if let GeneratedDir::Fds(pid) | GeneratedDir::FdInfo(pid) = dir {
            if pid != t.pid {
                let owner = t
                    .group
                    .procs
                    .group_of(pid)
                    .map_or((0, 0), |g| g.identity().creds.proc_owner());
                let dac = crate::creds::cap::DAC_OVERRIDE;
                if t.creds.fsuid != owner.0 && !t.creds.capable(dac) {
                    return Err(Errno::EACCES);
                }
            }
        }
        let fd = process_dir_backing(t)?;
        let file = Arc::new(OpenFile::new(fd, FileKind::Directory, Some(dir.path())));
        return Ok(t.fds.insert(file, flags & libc::O_CLOEXEC != 0)? as u64);
    }
    if let Some(r) = crate::fs::procfs::open(t, &guest) {
        let access = flags & libc::O_ACCMODE;
        let mut fd = r?;
        if crate::fs::procfs::writable_tunable(&guest).is_some() {
            // The IPC namespace's tunables (mode 0644, its root's): the host descriptor gets
            // the access asked for, which a write checks (`procfs::write`).
            if access != libc::O_RDONLY && !may_write_tunables(t) {
                return Err(Errno::EACCES);
            }
            fd = crate::fs::reopen(&fd, access)?;
        } else if let (Some(pid), true) = (
            crate::fs::procfs::process_writable(&guest, t),
            access != libc::O_RDONLY,
        ) {
            // A thread's name or the process's coredump_filter (mode 0644, its process
            // owner's): a write of another process's name is EINVAL (`procfs::task_dir`).
            if pid != t.pid && !may_write_owned_by(t, pid) {
                return Err(Errno::EACCES);
            }
            fd = crate::fs::reopen(&fd, access)?;
        } else if access != libc::O_RDONLY {
            // A namespace (mode 0444) refuses a writer past the mode check EPERM, as nsfs.
            let dac = crate::creds::cap::DAC_OVERRIDE;
            if crate::fs::procfs::ns::link_at(&guest, t).is_some() && t.creds.capable(dac) {
                return Err(Errno::EPERM);
            }
            return Err(Errno::EACCES);
        }
        let file = Arc::new(OpenFile::new(fd, FileKind::ProcFile, Some(guest)));
        return Ok(t.fds.insert(file, flags & libc::O_CLOEXEC != 0)? as u64);
    }
    if let Some(fd) = fd_named_by(&guest, t.pid) {
        return reopen_fd(t, fd, flags);
    }
    if crate::fs::procfs::self_relative(&guest, t.pid) == Some("exe") {
        let exe = t.exe.clone();
        let fd = t.root.open_at(&exe, libc::O_RDONLY, 0)?;
        if writes(flags) {
            // The caller's own program: ETXTBSY.
            refuse_running_program(t, fd.as_fd())?;
        }
        let file = Arc::new(OpenFile::new(fd, FileKind::Regular, Some(exe)));
        return Ok(t.fds.insert(file, flags & libc::O_CLOEXEC != 0)? as u64);
    }
    if flags & libc::O_TRUNC != 0 {
        // The program a process of the sandbox runs cannot be opened for writing (Linux's
        // deny_write_access): ETXTBSY, before O_TRUNC empties it. Any other write open is
        // refused below, from the file's stat.
        if let Ok(existing) = t.root.open_at(&guest, libc::O_PATH, 0) {
            refuse_running_program(t, existing.as_fd())?;
        }
    }
    // A conflicting open breaks the file's leases first (before O_TRUNC empties it).
    if lease::any() {
        if let Ok(existing) = t.root.open_at(&guest, libc::O_PATH, 0) {
            lease::break_on_open(t, existing.as_fd(), flags)?;
        }
    }
    let mode = mode & !t.umask();
    // openat2 wants no mode unless the call may create.
    let mode_for = |flags: i32| {
        if flags & (libc::O_CREAT | libc::O_TMPFILE) != 0 {
            mode
        } else {
            0
        }
    };
    let from_host = std::cell::Cell::new(false);
    let open = |flags: i32| match t
        .root
        .open_at(&guest, flags & !libc::O_CLOEXEC, mode_for(flags))
    {
        Ok(fd) => Ok(fd),
        Err(e) if e == Errno::ENOENT => {
            let fd = host_device(&guest, flags).ok_or(e)?;
            from_host.set(true);
            Ok(fd)
        }
        Err(e) => Err(e),
    };
    // F_CREATED_QUERY: whether this open made the file. Without O_EXCL, an exclusive
    // creation is tried first; any failure of it (the file exists, or another error) leaves
    // the open to be made as asked, so the guest sees the same results.
    let creates = flags & libc::O_CREAT != 0 && flags & libc::O_DIRECTORY == 0;
    let (fd, created) = if creates && flags & libc::O_EXCL == 0 {
        match open(flags | libc::O_EXCL) {
            Ok(fd) => (fd, true),
            Err(_) => (open(flags)?, false),
        }
    } else {
        (open(flags)?, creates)
    };
    let created = created && !from_host.get();
    let st = host::fstat(fd.as_fd())?;
    if writes(flags) && st.st_mode & libc::S_IFMT == libc::S_IFREG {
        refuse_running(t, (st.st_dev, st.st_ino))?;
    }
    let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
    let (kind, path) = if is_dir {
        (
            FileKind::Directory,
            Some(t.root.guest_path_of(&fd).unwrap_or(guest)),
        )
    } else if from_host.get() {
        (FileKind::HostDevice, Some(guest))
    } else {
        (FileKind::Regular, Some(guest))
    };
    let mut file = OpenFile::new(fd, kind, path);
    if created {
        file = file.created_by_open();
    }
    Ok(t.fds.insert(Arc::new(file), flags & libc::O_CLOEXEC != 0)? as u64)
}

/// Whether open flags may change the file: write access or truncation.
fn writes(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

/// ETXTBSY when `fd` is the program a live process of the sandbox runs.
pub(super) fn refuse_running_program(
    t: &Task,
    fd: std::os::fd::BorrowedFd<'_>,
) -> Result<(), Errno> {
    match crate::fd::locks::regular_file_key(fd) {
        Some(key) => refuse_running(t, key),
        None => Ok(()),
    }
}

/// ETXTBSY when the regular file `key` (device, inode) is the program a live process runs.
fn refuse_running(t: &Task, key: crate::fd::locks::FileKey) -> Result<(), Errno> {
    if t.group.procs.is_running_program(key) {
        return Err(Errno(libc::ETXTBSY));
    }
    Ok(())
}

/// The host directory behind a generated directory (`/proc`, `/proc/PID`, `/proc/PID/fd`):
/// the root's own `/proc` (an empty mount point in an image), else the root. Its entries are
/// never read (`sys_getdents64` lists the generated ones, its file position counting them);
/// `*at` calls on it resolve through the guest path.
pub(super) fn process_dir_backing(t: &Task) -> Result<std::os::fd::OwnedFd, Errno> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY;
    t.root
        .open_at(b"/proc", flags, 0)
        .or_else(|_| t.root.open_at(b"/", flags, 0))
}

/// The descriptor a path names in the caller's own table: `/proc/self/fd/N` (and the
/// caller's `/proc/PID/fd/N`), `/dev/fd/N`, `/dev/stdin`, `/dev/stdout` and `/dev/stderr`
/// (the names runc and Docker give every container, links to `/proc/self/fd/N`, whether or
/// not the root has them).
pub(super) fn fd_named_by(guest: &[u8], pid: i32) -> Option<i32> {
    let n = match guest {
        b"/dev/stdin" => return Some(0),
        b"/dev/stdout" => return Some(1),
        b"/dev/stderr" => return Some(2),
        _ => match guest.strip_prefix(b"/dev/fd/") {
            Some(n) => std::str::from_utf8(n).ok()?,
            None => crate::fs::procfs::self_relative(guest, pid)?.strip_prefix("fd/")?,
        },
    };
    n.trim_end_matches('/')
        .parse()
        .ok()
        .filter(|&n: &i32| n >= 0)
}

/// Opens the file behind descriptor `fd` again, as Linux opens `/proc/self/fd/N`: a new open
/// file description of the same file (a pipe's other end may be asked for), with the new
/// access mode and flags, checked by the host against the file itself.
///
/// # Errors
/// ENOENT for a descriptor not open; ENXIO for sockets and the runtime's own objects
/// (eventfd, epoll, signalfd...), which have no file to open again.
fn reopen_fd(t: &mut Task, fd: i32, flags: i32) -> SysResult {
    let f = t.fds.get(fd).map_err(|_| Errno::ENOENT)?;
    let kind = match &f.kind {
        FileKind::Regular => FileKind::Regular,
        FileKind::Pipe => FileKind::Pipe,
        FileKind::Memfd => FileKind::Memfd,
        FileKind::HostDevice => FileKind::HostDevice,
        FileKind::Stdio => FileKind::Stdio,
        FileKind::Directory => FileKind::Directory,
        FileKind::ProcFile => FileKind::ProcFile,
        FileKind::Pty { master } => FileKind::Pty { master: *master },
        _ => return Err(Errno::ENXIO),
    };
    let keep = libc::O_ACCMODE
        | libc::O_NONBLOCK
        | libc::O_APPEND
        | libc::O_TRUNC
        | libc::O_DIRECTORY
        | libc::O_NOCTTY
        | libc::O_SYNC
        | libc::O_DSYNC;
    let mut flags_now = flags & keep;
    if matches!(kind, FileKind::Stdio) {
        // The runtime's own stdio may be a file of the host, outside the root: opened again
        // only with the access the sandbox was given, and never truncated.
        let had = host_access_mode(f.host())?;
        let want = flags & libc::O_ACCMODE;
        if had != libc::O_RDWR && want != had {
            return Err(Errno::EACCES);
        }
        flags_now &= !libc::O_TRUNC;
    }
    if writes(flags) {
        refuse_running_program(t, f.host())?;
    }
    lease::break_on_open(t, f.host(), flags)?;
    // The guest's close-on-exec lives in its table; the host fd is always close-on-exec.
    let host = crate::fs::reopen(f.owned(), flags_now)?;
    let file = Arc::new(OpenFile::new(host, kind, f.path.clone()));
    Ok(t.fds.insert(file, flags & libc::O_CLOEXEC != 0)? as u64)
}

/// The access mode (`O_RDONLY`, `O_WRONLY`, `O_RDWR`) host descriptor `fd` was opened with.
fn host_access_mode(fd: std::os::fd::BorrowedFd<'_>) -> Result<i32, Errno> {
    Ok(host::status_flags(fd)? & libc::O_ACCMODE)
}

/// The harmless character devices every program expects, taken from the host when the root
/// filesystem has no `/dev` of its own.
const HOST_DEVICES: [&str; 5] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

fn host_device(guest: &[u8], flags: i32) -> Option<std::os::fd::OwnedFd> {
    let name = std::str::from_utf8(guest).ok()?;
    let dev = HOST_DEVICES.iter().find(|d| **d == name)?;
    let access = flags & libc::O_ACCMODE;
    let c = std::ffi::CString::new(*dev).ok()?;
    // No creation flags pass (only the access mode and O_NONBLOCK).
    host::open(&c, access | (flags & libc::O_NONBLOCK)).ok()
}

/// Opens a new pseudo-terminal master: the host's `/dev/ptmx` (a pty of the host's devpts
/// whose only handles are the guest's descriptors: its slave is reached with TIOCGPTPEER, as
/// glibc's openpty does first; no `/dev/pts/N` name leads to it inside the root). Never the
/// runtime's controlling terminal (O_NOCTTY always).
fn open_ptmx(t: &mut Task, flags: i32) -> SysResult {
    let fd = open_host_pty(
        c"/dev/ptmx",
        (flags & (libc::O_ACCMODE | libc::O_NONBLOCK)) | libc::O_NOCTTY,
    )?;
    let file = Arc::new(OpenFile::new(
        fd,
        FileKind::Pty { master: true },
        Some(b"/dev/ptmx".to_vec()),
    ));
    Ok(t.fds.insert(file, flags & libc::O_CLOEXEC != 0)? as u64)
}

fn open_host_pty(path: &std::ffi::CStr, flags: i32) -> Result<std::os::fd::OwnedFd, Errno> {
    // The flags are an access mode, O_NONBLOCK and O_NOCTTY.
    host::open(path, flags)
}

/// Implements open(2).
pub fn sys_open(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let path = t.copy_in_path(a.gva(0))?;
    open_file(t, AT_FDCWD, &path, a.int(1), a.u(2) as u32)
}

/// Implements openat(2).
pub fn sys_openat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let path = t.copy_in_path(a.gva(1))?;
    open_file(t, a.int(0), &path, a.int(2), a.u(3) as u32)
}

/// Implements creat(2): open(2) with O_CREAT | O_WRONLY | O_TRUNC.
pub fn sys_creat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let path = t.copy_in_path(a.gva(0))?;
    let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
    open_file(t, AT_FDCWD, &path, flags, a.u(1) as u32)
}

const CLOSE_RANGE_UNSHARE: u32 = 2;
const CLOSE_RANGE_CLOEXEC: u32 = 4;

/// Implements close_range(2). CLOSE_RANGE_UNSHARE first gives the process a table of its own
/// if it shares one with another process (CLONE_FILES); the process's threads keep sharing
/// it.
pub fn sys_close_range(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (first, last, flags) = (a.u(0) as u32, a.u(1) as u32, a.u(2) as u32);
    if flags & !(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC) != 0 || first > last {
        return Err(Errno::EINVAL);
    }
    if flags & CLOSE_RANGE_UNSHARE != 0 {
        super::sys_ns::unshare_files(t);
    }
    let open: Vec<i32> = t
        .fds
        .iter()
        .map(|(fd, _)| fd)
        .filter(|&fd| (first..=last).contains(&(fd as u32)))
        .collect();
    for fd in open {
        // A descriptor another thread closed meanwhile is simply gone: nothing to report.
        if flags & CLOSE_RANGE_CLOEXEC != 0 {
            let _ = t.fds.set_cloexec(fd, true);
        } else if let Ok(f) = t.fds.remove(fd) {
            super::sys_mq::closed(t, &f);
        }
    }
    Ok(0)
}

/// Whether the caller may write the tunables of `/proc/sys` (mode 0644, root's: uid 0 or
/// CAP_DAC_OVERRIDE).
fn may_write_tunables(t: &Task) -> bool {
    t.creds.fsuid == 0 || t.creds.capable(crate::creds::cap::DAC_OVERRIDE)
}

/// Implements close(2).
pub fn sys_close(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.remove(a.int(0))?;
    super::sys_mq::closed(t, &f);
    Ok(0)
}

/// Implements dup(2).
pub fn sys_dup(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    Ok(t.fds.insert(f, false)? as u64)
}

/// Implements dup2(2).
pub fn sys_dup2(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (old, new) = (a.int(0), a.int(1));
    let f = t.fds.get(old)?;
    if old == new {
        return Ok(new as u64);
    }
    t.fds.insert_at(new, f, false)?;
    Ok(new as u64)
}

/// Implements dup3(2).
pub fn sys_dup3(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (old, new, flags) = (a.int(0), a.int(1), a.int(2));
    if flags & !libc::O_CLOEXEC != 0 || old == new {
        return Err(Errno::EINVAL);
    }
    let f = t.fds.get(old)?;
    t.fds.insert_at(new, f, flags & libc::O_CLOEXEC != 0)?;
    Ok(new as u64)
}

/// Implements fcntl(2).
pub fn sys_fcntl(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (fd, cmd, arg) = (a.int(0), a.int(1), a.u(2));
    let f = t.fds.get(fd)?;
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let min = i32::try_from(arg).map_err(|_| Errno::EINVAL)?;
            Ok(t.fds.insert_from(min, f, cmd == libc::F_DUPFD_CLOEXEC)? as u64)
        }
        libc::F_GETFD => Ok(u64::from(t.fds.cloexec(fd)?)),
        libc::F_SETFD => {
            t.fds.set_cloexec(fd, arg & libc::FD_CLOEXEC as u64 != 0)?;
            Ok(0)
        }
        libc::F_GETFL => Ok((host::status_flags(f.host())? & !libc::O_CLOEXEC) as u64),
        libc::F_SETFL => {
            let settable = libc::O_APPEND
                | libc::O_NONBLOCK
                | libc::O_NOATIME
                | libc::O_DIRECT
                | libc::O_ASYNC;
            let cur = host::status_flags(f.host())?;
            let new = (cur & !settable) | (arg as i32 & settable);
            host::set_status_flags(f.host(), new)?;
            if (cur ^ new) & libc::O_ASYNC != 0 {
                owner::set_async(&f, fd, new & libc::O_ASYNC != 0);
            }
            Ok(0)
        }
        libc::F_GETLK
        | libc::F_SETLK
        | libc::F_SETLKW
        | libc::F_OFD_GETLK
        | libc::F_OFD_SETLK
        | libc::F_OFD_SETLKW => record_lock(t, &f, cmd, a.gva(2)),
        libc::F_SETOWN => {
            owner::set_own(t, &f, a.int(2))?;
            Ok(0)
        }
        libc::F_GETOWN => Ok(owner::get_own(&f) as i64 as u64),
        F_SETOWN_EX => {
            let mut raw = [0u8; 8];
            t.copy_in(a.gva(2), &mut raw)?;
            owner::set_own_ex(t, &f, raw)?;
            Ok(0)
        }
        F_GETOWN_EX => {
            t.copy_out(a.gva(2), &owner::get_own_ex(&f))?;
            Ok(0)
        }
        F_SETSIG => {
            let sig = i32::try_from(arg).map_err(|_| Errno::EINVAL)?;
            if !(0..=crate::task::NSIG as i32).contains(&sig) {
                return Err(Errno::EINVAL);
            }
            f.sigio.set_sig(sig);
            Ok(0)
        }
        F_GETSIG => Ok(f.sigio.sig() as u64),
        F_NOTIFY => {
            dnotify::set(t, fd, &f, arg as u32)?;
            Ok(0)
        }
        F_SETLEASE => {
            lease::set(t, fd, &f, a.int(2))?;
            Ok(0)
        }
        F_GETLEASE => Ok(lease::get(&f) as u64),
        F_CREATED_QUERY => Ok(u64::from(f.created())),
        libc::F_GETPIPE_SZ | libc::F_SETPIPE_SZ => {
            // Beyond the sandbox's pipe-max-size only with CAP_SYS_RESOURCE (EPERM), once the
            // size is known valid (Linux's pipe_set_size: an unsigned int above 2^31 is
            // EINVAL first, the host's answer).
            let size = a.u(2) as u32;
            if cmd == libc::F_SETPIPE_SZ
                && size <= 1 << 31
                && u64::from(size.max(4096).next_power_of_two())
                    > crate::fs::procfs::sysctl::pipe_max_size_of(t)
                && !t.creds.capable(crate::creds::cap::SYS_RESOURCE)
            {
                return Err(Errno::EPERM);
            }
            Ok(host::pipe_size(f.host(), cmd, a.int(2))? as u64)
        }
        _ => Err(Errno::EINVAL),
    }
}

/// fcntl's F_SETSIG and F_GETSIG.
const F_SETSIG: i32 = 10;
const F_GETSIG: i32 = 11;
/// fcntl's F_SETOWN_EX and F_GETOWN_EX.
const F_SETOWN_EX: i32 = 15;
const F_GETOWN_EX: i32 = 16;
/// fcntl's F_SETLEASE and F_GETLEASE.
const F_SETLEASE: i32 = 1024;
const F_GETLEASE: i32 = 1025;
/// fcntl's F_NOTIFY (dnotify).
const F_NOTIFY: i32 = 1026;
/// fcntl's F_CREATED_QUERY.
const F_CREATED_QUERY: i32 = 1028;

/// Size of `struct flock` on x86-64: l_type (i16), l_whence (i16), 4 bytes of padding,
/// l_start (i64), l_len (i64), l_pid (i32), 4 bytes of padding.
const FLOCK_SIZE: usize = 32;

/// fcntl(2)'s record locks. Open file description locks (`F_OFD_*`) are the host's, on the
/// guest's own open file description. POSIX locks (`F_GETLK`, `F_SETLK`, `F_SETLKW`) on a
/// regular file belong to the caller's descriptor table ([`crate::fd::locks`]), so that the
/// sandbox's processes exclude each other as on Linux; on other files they are the host's. A
/// conflicting lock is reported with the sandbox pid of the process holding it, or 0 when it
/// is held outside the sandbox (a host pid means nothing inside), or -1 for an open file
/// description lock, as Linux.
fn record_lock(t: &Task, f: &OpenFile, cmd: i32, arg: platform::Gva) -> SysResult {
    let mut raw = [0u8; FLOCK_SIZE];
    t.copy_in(arg, &mut raw)?;
    let i16_at = |o: usize| i16::from_le_bytes([raw[o], raw[o + 1]]);
    let i64_at = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&raw[o..o + 8]);
        i64::from_le_bytes(b)
    };
    let mut fl = host::empty_flock();
    fl.l_type = i16_at(0);
    fl.l_whence = i16_at(2);
    fl.l_start = i64_at(8);
    fl.l_len = i64_at(16);
    fl.l_pid = i32::from_le_bytes([raw[24], raw[25], raw[26], raw[27]]);
    let posix = matches!(cmd, libc::F_GETLK | libc::F_SETLK | libc::F_SETLKW);
    let per_table = if posix {
        crate::fd::locks::regular_file_key(f.host())
    } else {
        None
    };
    let (r, owner) = match per_table {
        Some(key) => table_lock(t, f, key, cmd, &mut fl)?,
        // F_SETLKW may block (a kick interrupts it with EINTR).
        None => (host::record_lock(f.host(), cmd, &mut fl)?, None),
    };
    if cmd == libc::F_GETLK || cmd == libc::F_OFD_GETLK {
        let pid = match owner {
            Some(p) => p,
            None if fl.l_pid > 0 => 0,
            None => fl.l_pid,
        };
        let mut out = raw;
        out[0..2].copy_from_slice(&fl.l_type.to_le_bytes());
        // No conflict: only the type changes (F_UNLCK), the request's other fields stay as
        // the caller wrote them, as Linux's fcntl_getlk leaves them.
        if i32::from(fl.l_type) != libc::F_UNLCK {
            out[2..4].copy_from_slice(&fl.l_whence.to_le_bytes());
            out[8..16].copy_from_slice(&fl.l_start.to_le_bytes());
            out[16..24].copy_from_slice(&fl.l_len.to_le_bytes());
            out[24..28].copy_from_slice(&pid.to_le_bytes());
        }
        t.copy_out(arg, &out)?;
    }
    Ok(r as u64)
}

/// A POSIX lock request on a regular file, taken as an open file description lock on the
/// caller's table's private description of it. Returns fcntl's result and, for a conflict
/// `F_GETLK` reports, the sandbox process holding it.
fn table_lock(
    t: &Task,
    f: &OpenFile,
    key: crate::fd::locks::FileKey,
    cmd: i32,
    fl: &mut libc::flock,
) -> Result<(i32, Option<i32>), Errno> {
    use crate::fd::locks::absolute;
    // The descriptor's offset and the file's size only when the request counts from them.
    let cur = if i32::from(fl.l_whence) == libc::SEEK_CUR {
        host::offset(f.host())
    } else {
        0
    };
    let size = if i32::from(fl.l_whence) == libc::SEEK_END {
        crate::net::host::fstat(f.host()).map_or(0, |st| st.st_size)
    } else {
        0
    };
    let span = absolute(fl.l_whence, fl.l_start, fl.l_len, cur, size)?;
    let kind = fl.l_type;
    if ![libc::F_RDLCK, libc::F_WRLCK, libc::F_UNLCK].contains(&i32::from(kind)) {
        return Err(Errno::EINVAL);
    }
    let access = host_access_mode(f.host())?;
    if cmd != libc::F_GETLK {
        // As Linux: a read lock needs a descriptor open for reading, a write lock one open
        // for writing.
        let ok = match i32::from(kind) {
            libc::F_RDLCK => access != libc::O_WRONLY,
            libc::F_WRLCK => access != libc::O_RDONLY,
            _ => true,
        };
        if !ok {
            return Err(Errno::EBADF);
        }
    }
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = span.start;
    fl.l_len = span.len;
    fl.l_pid = 0;
    let ofd_cmd = match cmd {
        libc::F_GETLK => libc::F_OFD_GETLK,
        libc::F_SETLK => libc::F_OFD_SETLK,
        _ => libc::F_OFD_SETLKW,
    };
    let locks = &t.fds.locks;
    let mine = if cmd == libc::F_GETLK || i32::from(kind) == libc::F_UNLCK {
        // Asking, or unlocking, takes no description: without one, nothing of this table's
        // is held, and the guest's own description stands in for asking.
        locks.get(key)
    } else {
        Some(locks.get_or_open(key, f.host(), access, t.pid)?)
    };
    let Some(mine) = mine else {
        if cmd == libc::F_GETLK {
            let r = host::record_lock(f.host(), libc::F_OFD_GETLK, fl)?;
            return Ok((r, holder(t, key, fl)));
        }
        return Ok((0, None));
    };
    // A wait that would never end is EDEADLK; the wait is recorded for others' checks
    // until the host grants the lock (or a signal interrupts it).
    // (The other tables are let go before the wait: a table kept alive would keep its
    // locks.)
    let _waiting = if cmd == libc::F_SETLKW && i32::from(kind) != libc::F_UNLCK {
        let others = other_tables(t);
        let refs: Vec<&crate::fd::locks::PosixLocks> = others.iter().map(|x| &x.locks).collect();
        Some(locks.wait_for(&refs, key, span, kind)?)
    } else {
        None
    };
    // On the table's private description; F_OFD_SETLKW may block (a kick interrupts it
    // with EINTR).
    let r = host::record_lock(mine.ofd(), ofd_cmd, fl)?;
    if cmd == libc::F_GETLK {
        return Ok((r, holder(t, key, fl)));
    }
    mine.apply(span, kind);
    Ok((r, None))
}

/// The descriptor tables of the sandbox's other processes (threads share the caller's).
fn other_tables(t: &Task) -> Vec<Arc<crate::fd::FdTable>> {
    let mut out: Vec<Arc<crate::fd::FdTable>> = Vec::new();
    for (_, g) in t.group.procs.live_groups() {
        if let Some(r) = g.resources() {
            if !Arc::ptr_eq(&r.fds, &t.fds) && !out.iter().any(|x| Arc::ptr_eq(x, &r.fds)) {
                out.push(r.fds.clone());
            }
        }
    }
    out
}

/// The sandbox process whose table holds the conflicting lock `fl` (as F_OFD_GETLK reported
/// it) on file `key`, if one does.
fn holder(t: &Task, key: crate::fd::locks::FileKey, fl: &libc::flock) -> Option<i32> {
    if i32::from(fl.l_type) == libc::F_UNLCK {
        return None;
    }
    let span = crate::fd::locks::Span {
        start: fl.l_start,
        len: fl.l_len,
    };
    t.group
        .procs
        .live_groups()
        .into_iter()
        .filter_map(|(_, g)| g.resources())
        .filter(|r| !Arc::ptr_eq(&r.fds, &t.fds))
        .filter_map(|r| r.fds.locks.get(key))
        .find(|l| l.holds(span, fl.l_type))
        .map(|l| l.pid)
}

/// Implements fallocate(2) on the host file.
pub fn sys_fallocate(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    let (mode, off, len) = (a.int(1), a.u(2) as i64, a.u(3) as i64);
    if mode & libc::FALLOC_FL_KEEP_SIZE == 0 && off >= 0 && len > 0 {
        let st = host::fstat(f.host())?;
        if st.st_mode & libc::S_IFMT == libc::S_IFREG {
            let end = (off as u64).saturating_add(len as u64);
            super::sys_rw::new_size_allowed(t, st.st_size as u64, end)?;
        }
    }
    host::fallocate(f.host(), mode, off, len)?;
    Ok(0)
}

/// Implements sync(2): the filesystem holding the root is flushed.
pub fn sys_sync(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    if let Ok(root) = t.root.open_at(b"/", libc::O_RDONLY | libc::O_DIRECTORY, 0) {
        // sync(2) cannot fail, so neither can this.
        let _ = host::syncfs(root.as_fd());
    }
    Ok(0)
}

/// Implements syncfs(2).
pub fn sys_syncfs(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    host::syncfs(f.host())?;
    Ok(0)
}

const TCGETS: u64 = 0x5401;
const TCSETS: u64 = 0x5402;
const TCSETSW: u64 = 0x5403;
const TCSETSF: u64 = 0x5404;
const TIOCGWINSZ: u64 = 0x5413;
const TIOCSWINSZ: u64 = 0x5414;
const TIOCGPGRP: u64 = 0x540f;
const TIOCSPGRP: u64 = 0x5410;
const FIONREAD: u64 = 0x541b;
const FIONBIO: u64 = 0x5421;
const FIONCLEX: u64 = 0x5450;
const FIOCLEX: u64 = 0x5451;
const FIOASYNC: u64 = 0x5452;
const TIOCSCTTY: u64 = 0x540e;
const TIOCNOTTY: u64 = 0x5422;
const TIOCGPTN: u64 = 0x8004_5430;
const TIOCSPTLCK: u64 = 0x4004_5431;
const TIOCGPTPEER: u64 = 0x5441;

/// Whether `f` is a terminal the guest may drive: one of the runtime's stdio streams that is a
/// tty, or a pseudo-terminal the guest opened (its `/dev/ptmx` master or that master's slave:
/// the only host ttys a guest descriptor can lead to).
fn is_guest_tty(f: &OpenFile) -> bool {
    matches!(
        f.kind,
        FileKind::Stdio | FileKind::Pty { .. } | FileKind::Regular
    ) && host::isatty(f.host())
}

/// Implements ioctl(2) for the requests the C libraries make on ordinary files, terminals
/// and sockets.
pub fn sys_ioctl(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (fd, req, arg) = (a.int(0), a.u(1), a.gva(2));
    let f = t.fds.get(fd)?;
    // An O_PATH descriptor takes no ioctl (Linux's lookup skips them: EBADF).
    if matches!(f.kind, FileKind::Regular | FileKind::Directory) && super::sys_mm::is_path_only(&f)
    {
        return Err(Errno::EBADF);
    }
    // A namespace descriptor answers nsfs's requests; the generic ones (close-on-exec,
    // non-blocking, async) are every file's.
    if let Some(ns) = crate::fs::procfs::ns::of_file(&f) {
        if !matches!(req, FIOCLEX | FIONCLEX | FIONBIO | FIOASYNC) {
            return crate::fs::procfs::ns::ioctl(t, ns, req, arg);
        }
    }
    match req {
        TIOCGPGRP | TIOCSPGRP => {
            // A session's terminal has a foreground group, kept by the process table (what
            // Ctrl-C through an attached `exec -t` signals); unset, it is the caller's own
            // group. (The host's foreground group means nothing inside; a shell that saw it
            // would stop itself with SIGTTIN.)
            if !is_guest_tty(&f) {
                return Err(Errno::ENOTTY);
            }
            let procs = t.group.procs.clone();
            if req == TIOCGPGRP {
                t.write_u32(arg, procs.foreground(t.pid)? as u32)?;
            } else {
                let mut b = [0u8; 4];
                t.copy_in(arg, &mut b)?;
                procs.set_foreground(t.pid, i32::from_le_bytes(b))?;
            }
            Ok(0)
        }
        TCGETS | TIOCGWINSZ => {
            // Only a real terminal (a stdio stream the runtime was given, a pty the guest
            // opened) answers; anything else is ENOTTY, as Linux says for a non-tty.
            if !is_guest_tty(&f) {
                return Err(Errno::ENOTTY);
            }
            if req == TCGETS {
                t.copy_out(arg, &host::terminal_settings(f.host())?)?;
            } else {
                t.copy_out(arg, &host::window_size(f.host())?)?;
            }
            Ok(0)
        }
        TCSETS | TCSETSW | TCSETSF | TIOCSWINSZ => {
            if !is_guest_tty(&f) {
                return Err(Errno::ENOTTY);
            }
            if req == TIOCSWINSZ {
                let mut size = [0u8; host::WINSIZE_SIZE];
                t.copy_in(arg, &mut size)?;
                host::set_window_size(f.host(), &size)?;
            } else {
                let mut termios = [0u8; host::KERNEL_TERMIOS_SIZE];
                t.copy_in(arg, &mut termios)?;
                host::set_terminal_settings(f.host(), req, &termios)?;
            }
            Ok(0)
        }
        FIONREAD => {
            t.write_u32(arg, host::bytes_readable(f.host())? as u32)?;
            Ok(0)
        }
        FIONBIO => {
            let mut b = [0u8; 4];
            t.copy_in(arg, &mut b)?;
            host::set_nonblocking(f.host(), i32::from_le_bytes(b) != 0)?;
            Ok(0)
        }
        FIOCLEX | FIONCLEX => {
            t.fds.set_cloexec(fd, req == FIOCLEX)?;
            Ok(0)
        }
        FIOASYNC => {
            // O_ASYNC, as F_SETFL sets it: signal-driven I/O (`fd::owner`).
            let mut b = [0u8; 4];
            t.copy_in(arg, &mut b)?;
            let on = i32::from_le_bytes(b) != 0;
            let cur = host::status_flags(f.host())?;
            let new = if on {
                cur | libc::O_ASYNC
            } else {
                cur & !libc::O_ASYNC
            };
            host::set_status_flags(f.host(), new)?;
            if cur != new {
                owner::set_async(&f, fd, on);
            }
            Ok(0)
        }
        TIOCSCTTY | TIOCNOTTY => {
            // The sandbox's processes share the runtime's host process, which must never
            // take a controlling terminal: a guest pty becomes the caller's controlling
            // terminal in name only (login_tty, forkpty), as sessions have no terminal here.
            if !is_guest_tty(&f) {
                return Err(Errno::ENOTTY);
            }
            Ok(0)
        }
        TIOCGPTN | TIOCSPTLCK | TIOCGPTPEER => {
            // Only a pty the guest opened, master or slave (the host answers a slave EIO); the
            // runtime's Stdio streams stay its own.
            if !matches!(f.kind, FileKind::Pty { .. }) || !is_guest_tty(&f) {
                return Err(Errno::ENOTTY);
            }
            pty_master_ioctl(t, &f, req, arg)
        }
        abi::ioctl::SIOCATMARK if f.is_socket() => {
            let at = host::at_mark(f.host())?;
            t.write_u32(arg, at as u32)?;
            Ok(0)
        }
        // Changing an interface needs CAP_NET_ADMIN, which no sandbox has; Linux reads the
        // request first (EFAULT for a bad one).
        req if f.is_socket() && is_interface_change(req) => {
            let mut ifr = [0u8; abi::ioctl::IFREQ_LEN];
            t.copy_in(arg, &mut ifr)?;
            Err(Errno::EPERM)
        }
        crate::net::netlink::SIOCGIFCONF => super::sys_socket::interface_list_ioctl(t, &f, arg),
        req if crate::net::netlink::is_interface_query(req) => {
            super::sys_socket::interface_ioctl(t, &f, req, arg)
        }
        _ => Err(Errno::ENOTTY),
    }
}

/// Whether `req` is one of the `SIOCSIF*` requests that change a network interface.
fn is_interface_change(req: u64) -> bool {
    matches!(
        req,
        0x8911 // SIOCSIFLINK
            | 0x8914 // SIOCSIFFLAGS
            | 0x8916 // SIOCSIFADDR
            | 0x8918 // SIOCSIFDSTADDR
            | 0x891a // SIOCSIFBRDADDR
            | 0x891c // SIOCSIFNETMASK
            | 0x891e // SIOCSIFMETRIC
            | 0x8920 // SIOCSIFMEM
            | 0x8922 // SIOCSIFMTU
            | 0x8923 // SIOCSIFNAME
            | 0x8924 // SIOCSIFHWADDR
            | 0x8926 // SIOCSIFENCAP
            | 0x8930 // SIOCSIFSLAVE
            | 0x8934 // SIOCSIFPFLAGS
            | 0x8937 // SIOCSIFHWBROADCAST
            | 0x8943 // SIOCSIFTXQLEN
    )
}

/// TIOCGPTN, TIOCSPTLCK and TIOCGPTPEER on a pty master the guest opened (the host answers
/// ENOTTY for anything else, a slave included).
fn pty_master_ioctl(t: &mut Task, f: &OpenFile, req: u64, arg: platform::Gva) -> SysResult {
    match req {
        TIOCGPTN => {
            t.write_u32(arg, host::pty_number(f.host())?)?;
            Ok(0)
        }
        TIOCSPTLCK => {
            let mut b = [0u8; 4];
            t.copy_in(arg, &mut b)?;
            host::set_pty_lock(f.host(), i32::from_le_bytes(b))?;
            Ok(0)
        }
        _ => {
            // TIOCGPTPEER: the argument is open flags (by value), which Linux passes to the
            // open as they are: the access mode, O_NONBLOCK and O_CLOEXEC count here (the
            // host's open always has O_NOCTTY: the runtime never takes a terminal).
            let flags = arg.raw() as i32;
            let host_flags =
                (flags & (libc::O_ACCMODE | libc::O_NONBLOCK)) | libc::O_NOCTTY | libc::O_CLOEXEC;
            let owned = host::open_pty_peer(f.host(), host_flags)?;
            let name = match host::pty_number(f.host()) {
                Ok(n) => format!("/dev/pts/{n}").into_bytes(),
                Err(_) => b"/dev/pts/?".to_vec(),
            };
            let file = Arc::new(OpenFile::new(
                owned,
                FileKind::Pty { master: false },
                Some(name),
            ));
            Ok(t.fds.insert(file, flags & libc::O_CLOEXEC != 0)? as u64)
        }
    }
}

/// Implements flock(2) on the host file (locks are advisory and between this sandbox's own
/// processes and whatever else opens the same file in its root).
pub fn sys_flock(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    let op = a.int(1);
    if op & !(libc::LOCK_SH | libc::LOCK_EX | libc::LOCK_UN | libc::LOCK_NB) != 0 {
        return Err(Errno::EINVAL);
    }
    host::flock(f.host(), op)?;
    Ok(0)
}

/// Implements memfd_create(2): an anonymous file, unlinked from the start (`O_TMPFILE`) in the
/// root's `/dev/shm`, else its `/tmp`, so that its pages count where the sandbox's other files
/// do (a host memfd would be host memory outside the sandbox's limit). It reads, writes,
/// truncates and maps like Linux's; `/proc/self/fd` names it `/memfd:NAME (deleted)`. File
/// seals are not supported (F_ADD_SEALS is EINVAL), nor MFD_HUGETLB (EINVAL).
pub fn sys_memfd_create(t: &mut Task, a: &SyscallArgs) -> SysResult {
    const MFD_CLOEXEC: u32 = 1;
    const MFD_ALLOW_SEALING: u32 = 2;
    const MFD_NOEXEC_SEAL: u32 = 8;
    const MFD_EXEC: u32 = 0x10;
    /// Linux's MFD_NAME_MAX_LEN (NAME_MAX minus "memfd:").
    const NAME_MAX_LEN: usize = 249;
    let flags = a.u(1) as u32;
    if flags & !(MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL | MFD_EXEC) != 0
        || (flags & MFD_NOEXEC_SEAL != 0 && flags & MFD_EXEC != 0)
    {
        return Err(Errno::EINVAL);
    }
    let name = t.copy_in_str(a.gva(0), NAME_MAX_LEN + 1).map_err(|e| {
        if e == Errno::ENAMETOOLONG {
            Errno::EINVAL
        } else {
            e
        }
    })?;
    let mut fd = Err(Errno::ENOENT);
    for dir in [&b"/dev/shm"[..], b"/tmp"] {
        fd = t.root.open_at(dir, libc::O_TMPFILE | libc::O_RDWR, 0o600);
        if fd.is_ok() {
            break;
        }
    }
    let fd = fd.map_err(|e| {
        tracing::warn!("memfd_create: no O_TMPFILE in the root's /dev/shm or /tmp: {e}");
        Errno::ENOMEM
    })?;
    let mut path = b"/memfd:".to_vec();
    path.extend_from_slice(&name);
    path.extend_from_slice(b" (deleted)");
    let file = Arc::new(OpenFile::new(fd, FileKind::Memfd, Some(path)));
    Ok(t.fds.insert(file, flags & MFD_CLOEXEC != 0)? as u64)
}
