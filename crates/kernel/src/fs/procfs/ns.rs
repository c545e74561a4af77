//! The namespace files of /proc: `/proc/PID/ns/` (also `/proc/PID/task/TID/ns/` and
//! `/proc/thread-self/ns/`) lists `cgroup`, `ipc`, `mnt`, `net`, `pid`, `pid_for_children`,
//! `time`, `time_for_children`, `user` and `uts`, links whose targets are Linux's
//! `uts:[4026531838]`.
//!
//! A sandbox is, to its processes, the initial set of namespaces (as a container is): one
//! namespace of each type, numbered as Linux numbers its initial ones, shared by every
//! process, and none can be made or entered (clone, unshare and setns with `CLONE_NEW*`
//! answer EPERM, as for a container's root without CAP_SYS_ADMIN: `syscalls::sys_ns`).
//!
//! Opening a link gives a namespace descriptor: a [`crate::fd::FileKind::ProcFile`] (an empty
//! memory file, mode 0444) whose guest path names the link, which is how it is told from the
//! other files of /proc ([`of_file`]) and why a checkpoint keeps it as any other file of
//! /proc. Its stat is Linux's nsfs inode (a regular file whose `st_ino` is the namespace's
//! number, so that two processes' compare equal); its ioctls answer as nsfs's ([`ioctl`]).
//! Unlike nsfs, read(2) gives end of file rather than EINVAL.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use abi::Errno;
use platform::Gva;

use crate::task::Task;

/// A namespace type, of which the sandbox has one namespace each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Namespace {
    /// Control groups.
    Cgroup,
    /// System V IPC and POSIX message queues.
    Ipc,
    /// Mounts.
    Mnt,
    /// Network.
    Net,
    /// Process ids.
    Pid,
    /// Boot-time and monotonic clock offsets.
    Time,
    /// User and group ids, capabilities.
    User,
    /// Host and domain names.
    Uts,
}

/// The links of a namespace directory, in order, and the namespace each names.
const LINKS: [(&str, Namespace); 10] = [
    ("cgroup", Namespace::Cgroup),
    ("ipc", Namespace::Ipc),
    ("mnt", Namespace::Mnt),
    ("net", Namespace::Net),
    ("pid", Namespace::Pid),
    ("pid_for_children", Namespace::Pid),
    ("time", Namespace::Time),
    ("time_for_children", Namespace::Time),
    ("user", Namespace::User),
    ("uts", Namespace::Uts),
];

impl Namespace {
    /// Its name, as a link's target shows it.
    pub fn name(self) -> &'static str {
        match self {
            Namespace::Cgroup => "cgroup",
            Namespace::Ipc => "ipc",
            Namespace::Mnt => "mnt",
            Namespace::Net => "net",
            Namespace::Pid => "pid",
            Namespace::Time => "time",
            Namespace::User => "user",
            Namespace::Uts => "uts",
        }
    }

    /// Its `CLONE_NEW*` flag (what NS_GET_NSTYPE answers and setns(2) takes).
    pub fn clone_flag(self) -> u64 {
        (match self {
            Namespace::Cgroup => libc::CLONE_NEWCGROUP,
            Namespace::Ipc => libc::CLONE_NEWIPC,
            Namespace::Mnt => libc::CLONE_NEWNS,
            Namespace::Net => libc::CLONE_NEWNET,
            Namespace::Pid => libc::CLONE_NEWPID,
            Namespace::Time => 0x80, // CLONE_NEWTIME
            Namespace::User => libc::CLONE_NEWUSER,
            Namespace::Uts => libc::CLONE_NEWUTS,
        }) as u64
    }

    /// Its inode number: Linux's for its initial namespaces (fixed since Linux 6.x for the
    /// network and mount ones too).
    pub fn inode(self) -> u64 {
        match self {
            Namespace::Ipc => 0xEFFF_FFFF,
            Namespace::Uts => 0xEFFF_FFFE,
            Namespace::User => 0xEFFF_FFFD,
            Namespace::Pid => 0xEFFF_FFFC,
            Namespace::Cgroup => 0xEFFF_FFFB,
            Namespace::Time => 0xEFFF_FFFA,
            Namespace::Net => 0xEFFF_FFF9,
            Namespace::Mnt => 0xEFFF_FFF8,
        }
    }

    /// A link's target: `uts:[4026531838]`.
    pub fn target(self) -> String {
        format!("{}:[{}]", self.name(), self.inode())
    }

    /// Whether namespaces of its type have parents (NS_GET_PARENT).
    fn hierarchical(self) -> bool {
        matches!(self, Namespace::Pid | Namespace::User)
    }
}

/// The namespace a link's name (`uts`, `pid_for_children`...) names.
fn by_name(name: &str) -> Option<Namespace> {
    LINKS.iter().find(|(n, _)| *n == name).map(|&(_, ns)| ns)
}

/// One link of a live process's namespace directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// The namespace it names.
    pub ns: Namespace,
    /// The process whose directory holds it.
    pub pid: i32,
}

/// The namespace link `path` (a guest path) names: `/proc/PID/ns/NAME`,
/// `/proc/PID/task/TID/ns/NAME` or `/proc/thread-self/ns/NAME` of a live process and thread.
pub fn link_at(path: &[u8], t: &Task) -> Option<Link> {
    let clean = super::lexical(path)?;
    let (pid, _, what) = super::task_dir::thread_relative(&clean, t)?;
    let ns = by_name(what.strip_prefix("ns/")?)?;
    Some(Link { ns, pid })
}

/// The namespace an open file of this /proc is a descriptor of: one whose guest path names a
/// namespace link (the process may have exited since).
pub fn of_file(f: &crate::fd::OpenFile) -> Option<Namespace> {
    if !matches!(f.kind, crate::fd::FileKind::ProcFile) {
        return None;
    }
    let clean = super::lexical(f.path.as_deref()?)?;
    let (dir, name) = clean.rsplit_once('/')?;
    (clean.starts_with("/proc/") && dir.ends_with("/ns"))
        .then(|| by_name(name))
        .flatten()
}

/// The entries of a namespace directory, `.` and `..` first, then its links.
pub(super) fn entries() -> Vec<super::DirEntry> {
    let mut out = vec![
        (0, b".".to_vec(), libc::DT_DIR),
        (1, b"..".to_vec(), libc::DT_DIR),
    ];
    for (i, (name, _)) in LINKS.iter().enumerate() {
        out.push((i as u64 + 2, name.as_bytes().to_vec(), libc::DT_LNK));
    }
    out
}

/// Refuses the caller a look at another process's namespaces without Linux's ptrace read
/// access (its ids throughout, or CAP_SYS_PTRACE): EACCES.
///
/// # Errors
/// EACCES; ENOENT for a process that exited meanwhile.
pub fn check_access(t: &Task, link: Link) -> Result<(), Errno> {
    if link.pid == t.pid {
        return Ok(());
    }
    let g = t.group.procs.group_of(link.pid).ok_or(Errno::ENOENT)?;
    if !t.creds.may_inspect(&g.identity().creds) {
        return Err(Errno::EACCES);
    }
    Ok(())
}

/// The host file behind a namespace descriptor: an empty memory file, mode 0444.
///
/// # Errors
/// The host's error.
pub(super) fn backing() -> Result<OwnedFd, Errno> {
    super::memfd_with(b"", 0o444)
}

/// Now, as `stat` shows times.
fn now() -> (i64, i64) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs() as i64, i64::from(d.subsec_nanos()))
}

/// Linux's nsfs device (`0:4`), which holds every namespace's inode.
const NSFS_DEV: u64 = 4;

/// The stat of a namespace (what a link leads to, and a descriptor's fstat): a regular file
/// of nsfs, mode 0444, owned by root, whose inode number is the namespace's.
pub fn ns_stat(ns: Namespace) -> libc::stat {
    let mut st = crate::fd::host::empty_stat();
    st.st_dev = NSFS_DEV;
    st.st_ino = ns.inode();
    st.st_mode = libc::S_IFREG | 0o444;
    st.st_nlink = 1;
    st.st_blksize = 4096;
    let (s, ns_) = now();
    (st.st_atime, st.st_atime_nsec) = (s, ns_);
    (st.st_mtime, st.st_mtime_nsec) = (s, ns_);
    (st.st_ctime, st.st_ctime_nsec) = (s, ns_);
    st
}

/// The stat of the link itself (lstat): a symbolic link, mode 0777, owned by its process's
/// owner, on /proc's device.
pub fn link_stat(t: &Task, link: Link) -> libc::stat {
    let owner = if link.pid == t.pid {
        t.creds.proc_owner()
    } else {
        t.group
            .procs
            .group_of(link.pid)
            .map_or((0, 0), |g| g.identity().creds.proc_owner())
    };
    let mut st = crate::fd::host::empty_stat();
    st.st_dev = 0x16; // procfs's, 0:22
                      // An inode of /proc: distinct per process and link.
    let index = LINKS.iter().position(|&(_, ns)| ns == link.ns).unwrap_or(0);
    st.st_ino = 0x1_0000_0000 + (link.pid as u64) * 16 + index as u64;
    st.st_mode = libc::S_IFLNK | 0o777;
    st.st_nlink = 1;
    st.st_uid = owner.0;
    st.st_gid = owner.1;
    st.st_blksize = 1024;
    let (s, ns_) = now();
    (st.st_atime, st.st_atime_nsec) = (s, ns_);
    (st.st_mtime, st.st_mtime_nsec) = (s, ns_);
    (st.st_ctime, st.st_ctime_nsec) = (s, ns_);
    st
}

/// `ioctl(NS_GET_USERNS)`: a descriptor of the namespace's owning user namespace.
pub const NS_GET_USERNS: u64 = 0xb701;
/// `ioctl(NS_GET_PARENT)`: a descriptor of the namespace's parent.
pub const NS_GET_PARENT: u64 = 0xb702;
/// `ioctl(NS_GET_NSTYPE)`: the namespace's `CLONE_NEW*` type.
pub const NS_GET_NSTYPE: u64 = 0xb703;
/// `ioctl(NS_GET_OWNER_UID)`: a user namespace's owner's uid.
pub const NS_GET_OWNER_UID: u64 = 0xb704;

/// An ioctl on a descriptor of namespace `ns`, as Linux's nsfs answers it:
/// NS_GET_NSTYPE its type; NS_GET_USERNS a new descriptor (close-on-exec) of the sandbox's
/// user namespace, which owns every other one, and EPERM for the user namespace (its owner
/// is outside the sandbox); NS_GET_PARENT EINVAL for a type without parents, EPERM for the
/// pid and user namespaces (their parents are outside); NS_GET_OWNER_UID the owner uid 0 of
/// the user namespace, EINVAL for the others; any other request ENOTTY.
///
/// # Errors
/// As above; EFAULT for an unwritable owner uid; EMFILE.
pub fn ioctl(t: &mut Task, ns: Namespace, req: u64, arg: Gva) -> Result<u64, Errno> {
    match req {
        NS_GET_NSTYPE => Ok(ns.clone_flag()),
        NS_GET_USERNS if ns == Namespace::User => Err(Errno::EPERM),
        NS_GET_USERNS => {
            let file = crate::fd::OpenFile::new(
                backing()?,
                crate::fd::FileKind::ProcFile,
                Some(format!("/proc/{}/ns/user", t.pid).into_bytes()),
            );
            Ok(t.fds.insert(Arc::new(file), true)? as u64)
        }
        NS_GET_PARENT if ns.hierarchical() => Err(Errno::EPERM),
        NS_GET_PARENT => Err(Errno::EINVAL),
        NS_GET_OWNER_UID if ns == Namespace::User => {
            t.write_u32(arg, 0)?;
            Ok(0)
        }
        NS_GET_OWNER_UID => Err(Errno::EINVAL),
        _ => Err(Errno::ENOTTY),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_types() {
        assert_eq!(Namespace::Uts.target(), "uts:[4026531838]");
        assert_eq!(Namespace::Pid.target(), "pid:[4026531836]");
        assert_eq!(by_name("pid_for_children"), Some(Namespace::Pid));
        assert_eq!(by_name("time_for_children"), Some(Namespace::Time));
        assert_eq!(by_name("nope"), None);
        assert_eq!(Namespace::Mnt.clone_flag(), libc::CLONE_NEWNS as u64);
        let mut inodes: Vec<u64> = LINKS.iter().map(|(_, ns)| ns.inode()).collect();
        inodes.dedup();
        assert_eq!(inodes.len(), 8);
    }

    #[test]
    fn open_files_are_told_by_path() {
        let f = |p: &[u8]| {
            crate::fd::OpenFile::new(
                backing().unwrap(),
                crate::fd::FileKind::ProcFile,
                Some(p.to_vec()),
            )
        };
        assert_eq!(of_file(&f(b"/proc/7/ns/uts")), Some(Namespace::Uts));
        assert_eq!(
            of_file(&f(b"/proc/7/task/9/ns/pid_for_children")),
            Some(Namespace::Pid)
        );
        assert_eq!(of_file(&f(b"/proc/7/status")), None);
    }
}
