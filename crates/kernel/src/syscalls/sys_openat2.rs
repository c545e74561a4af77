//! openat2(2): openat with a `struct open_how` checked as Linux checks it, and the
//! `RESOLVE_*` flags applied by torpor's own walk of the path.
//!
//! The root's host `openat2` resolves every guest path with `RESOLVE_IN_ROOT` (the
//! sandbox's confinement), so the guest's flags cannot be passed on: the walk here follows
//! the path one component at a time in guest terms (symlinks read and spliced, `/proc`'s
//! links recognised), refuses what the flags forbid, and hands the path it reached, free of
//! symlinks, to the same open as openat(2).

use std::collections::VecDeque;
use std::os::fd::AsFd;

use abi::Errno;

use super::sys_file::{open_file, AT_FDCWD};
use super::{SysResult, SyscallArgs};
use crate::fd::FileKind;
use crate::fs::host;
use crate::task::Task;

/// `struct open_how`'s first published size (flags, mode, resolve).
const OPEN_HOW_SIZE_VER0: usize = 24;
const PAGE_SIZE: usize = 4096;

const RESOLVE_NO_XDEV: u64 = 0x01;
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;
const RESOLVE_IN_ROOT: u64 = 0x10;
const RESOLVE_CACHED: u64 = 0x20;
const VALID_RESOLVE: u64 = 0x3f;

/// Linux's VALID_OPEN_FLAGS: the flags open(2) knows.
const VALID_OPEN_FLAGS: u64 = super::sys_file::OPEN_FLAGS as u32 as u64;

/// The flags O_PATH may come with.
const O_PATH_FLAGS: u64 =
    (libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_PATH | libc::O_CLOEXEC) as u64;

/// How many symlinks one lookup may follow (Linux's MAXSYMLINKS).
const MAX_LINKS: u32 = 40;

/// Implements openat2(2). Errors in Linux's order: the size (EINVAL, E2BIG), the structure's
/// copy (EFAULT) and its non-zero tail (E2BIG), the flags, mode and resolve flags (EINVAL,
/// EAGAIN for RESOLVE_CACHED with a creating open), then the path (EFAULT) and the lookup.
pub fn sys_openat2(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (dirfd, size) = (a.int(0), a.u(3) as usize);
    if size < OPEN_HOW_SIZE_VER0 {
        return Err(Errno::EINVAL);
    }
    if size > PAGE_SIZE {
        return Err(Errno::E2BIG);
    }
    let mut raw = vec![0u8; size];
    t.copy_in(a.gva(2), &mut raw)?;
    if raw[OPEN_HOW_SIZE_VER0..].iter().any(|&b| b != 0) {
        return Err(Errno::E2BIG);
    }
    let field = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&raw[i * 8..i * 8 + 8]);
        u64::from_le_bytes(b)
    };
    let (flags, mode, resolve) = (field(0), field(1), field(2));
    check_how(flags, mode, resolve)?;
    let path = t.copy_in_path(a.gva(1))?;
    let (flags, mode) = (flags as i32, mode as u32);
    if resolve & !RESOLVE_CACHED == 0 {
        return open_file(t, dirfd, &path, flags, mode);
    }
    if path.is_empty() {
        return Err(Errno::ENOENT);
    }
    // The last component is not followed by O_NOFOLLOW, nor by an exclusive creation.
    let follow_last = flags & libc::O_NOFOLLOW == 0
        && flags & (libc::O_CREAT | libc::O_EXCL) != (libc::O_CREAT | libc::O_EXCL);
    let resolved = Walk::new(t, dirfd, resolve)?.run(&path, follow_last)?;
    open_file(t, AT_FDCWD, &resolved, flags, mode)
}

/// build_open_flags' checks of `struct open_how`.
fn check_how(flags: u64, mode: u64, resolve: u64) -> Result<(), Errno> {
    if flags & !VALID_OPEN_FLAGS != 0 || resolve & !VALID_RESOLVE != 0 {
        return Err(Errno::EINVAL);
    }
    if resolve & RESOLVE_BENEATH != 0 && resolve & RESOLVE_IN_ROOT != 0 {
        return Err(Errno::EINVAL);
    }
    let tmpfile = libc::O_TMPFILE as u64;
    let creates = flags & libc::O_CREAT as u64 != 0 || flags & tmpfile == tmpfile;
    if creates {
        if mode & !0o7777 != 0 {
            return Err(Errno::EINVAL);
        }
    } else if mode != 0 {
        return Err(Errno::EINVAL);
    }
    let dir_creat = (libc::O_DIRECTORY | libc::O_CREAT) as u64;
    if flags & dir_creat == dir_creat {
        return Err(Errno::EINVAL);
    }
    // __O_TMPFILE without O_DIRECTORY, or a read-only O_TMPFILE.
    let o_tmp_bit = tmpfile & !(libc::O_DIRECTORY as u64);
    if flags & o_tmp_bit != 0 && (flags & tmpfile != tmpfile || flags & libc::O_ACCMODE as u64 == 0)
    {
        return Err(Errno::EINVAL);
    }
    if flags & libc::O_PATH as u64 != 0 && flags & !O_PATH_FLAGS != 0 {
        return Err(Errno::EINVAL);
    }
    let makes = (libc::O_TRUNC | libc::O_CREAT) as u64 | o_tmp_bit;
    if resolve & RESOLVE_CACHED != 0 && flags & makes != 0 {
        return Err(Errno::EAGAIN);
    }
    Ok(())
}

/// What one component of a walk is.
enum Node {
    /// Nothing by that name.
    Missing,
    /// A directory.
    Dir,
    /// Anything else that is no link.
    Other,
    /// A symlink and its target.
    Link(Vec<u8>),
    /// One of `/proc`'s links to a process's files (`exe`, `cwd`, `fd/N`...) and its target
    /// if it names a path.
    Magic(Option<Vec<u8>>),
}

/// One scoped lookup: where it started, its scope and what it has followed.
struct Walk<'a> {
    t: &'a Task,
    resolve: u64,
    /// The components of the directory reached so far.
    cur: Vec<Vec<u8>>,
    /// How many leading components of `cur` are the scope's root (BENEATH, IN_ROOT).
    root_depth: usize,
    /// The mount the walk started on and every mount point (RESOLVE_NO_XDEV).
    xdev: Option<(Vec<u8>, Vec<Vec<u8>>)>,
    links: u32,
}

impl<'a> Walk<'a> {
    /// A walk from `dirfd` (AT_FDCWD or a directory).
    fn new(t: &'a Task, dirfd: i32, resolve: u64) -> Result<Walk<'a>, Errno> {
        let start = if dirfd == AT_FDCWD {
            t.cwd()
        } else {
            let f = t.fds.get(dirfd)?;
            match (&f.kind, &f.path) {
                (FileKind::Directory, Some(p)) => {
                    t.root.guest_path_of(f.owned()).unwrap_or(p.clone())
                }
                _ => return Err(Errno::ENOTDIR),
            }
        };
        let cur = lexical(&start);
        let root_depth = if resolve & (RESOLVE_BENEATH | RESOLVE_IN_ROOT) != 0 {
            cur.len()
        } else {
            0
        };
        let mut w = Walk {
            t,
            resolve,
            cur,
            root_depth,
            xdev: None,
            links: 0,
        };
        if resolve & RESOLVE_NO_XDEV != 0 {
            let points: Vec<Vec<u8>> = crate::fs::procfs::mounts::of_root(t.root.host_path())
                .iter()
                .map(|m| crate::fs::procfs::mounts::unescape(&m.point).into_bytes())
                .collect();
            let start_mount = mount_of(&w.path(), &points);
            w.xdev = Some((start_mount, points));
        }
        Ok(w)
    }

    /// The guest path of the directory reached.
    fn path(&self) -> Vec<u8> {
        let mut p = Vec::new();
        for c in &self.cur {
            p.push(b'/');
            p.extend_from_slice(c);
        }
        if p.is_empty() {
            p.push(b'/');
        }
        p
    }

    /// EXDEV if RESOLVE_NO_XDEV is asked and the walk is now on another mount.
    fn check_mount(&self) -> Result<(), Errno> {
        match &self.xdev {
            Some((start, points)) if mount_of(&self.path(), points) != *start => Err(Errno::EXDEV),
            _ => Ok(()),
        }
    }

    /// Back to the scope's root (an absolute path or symlink): EXDEV under RESOLVE_BENEATH.
    fn jump_root(&mut self) -> Result<(), Errno> {
        if self.resolve & RESOLVE_BENEATH != 0 {
            return Err(Errno::EXDEV);
        }
        self.cur.truncate(self.root_depth);
        self.check_mount()
    }

    /// Walks `path`, returning the guest path it names.
    fn run(mut self, path: &[u8], follow_last: bool) -> Result<Vec<u8>, Errno> {
        let trailing_slash = path.last() == Some(&b'/');
        let mut todo: VecDeque<Vec<u8>> = lexical(path).into();
        if path.first() == Some(&b'/') {
            self.jump_root()?;
        }
        while let Some(c) = todo.pop_front() {
            if c == b"." {
                continue;
            }
            if c == b".." {
                if self.cur.len() <= self.root_depth {
                    if self.resolve & RESOLVE_BENEATH != 0 {
                        return Err(Errno::EXDEV);
                    }
                } else {
                    self.cur.pop();
                }
                self.check_mount()?;
                continue;
            }
            self.cur.push(c);
            let last = todo.is_empty();
            let follow = !last || follow_last || trailing_slash;
            match self.node()? {
                Node::Link(target) if follow => {
                    if self.resolve & RESOLVE_NO_SYMLINKS != 0 {
                        return Err(Errno::ELOOP);
                    }
                    self.links += 1;
                    if self.links > MAX_LINKS {
                        return Err(Errno::ELOOP);
                    }
                    self.cur.pop();
                    if target.first() == Some(&b'/') {
                        self.jump_root()?;
                    }
                    for c in lexical(&target).into_iter().rev() {
                        todo.push_front(c);
                    }
                }
                Node::Magic(target) if follow => {
                    if self.resolve & (RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) != 0 {
                        return Err(Errno::ELOOP);
                    }
                    if self.resolve & (RESOLVE_BENEATH | RESOLVE_IN_ROOT) != 0 {
                        return Err(Errno::EXDEV);
                    }
                    if last {
                        // The open itself knows `/proc`'s links.
                        break;
                    }
                    match target {
                        Some(p) if p.first() == Some(&b'/') => self.cur = lexical(&p),
                        _ => return Err(Errno::ENOTDIR),
                    }
                    self.check_mount()?;
                }
                Node::Missing if !last => return Err(Errno::ENOENT),
                Node::Other if !last => return Err(Errno::ENOTDIR),
                _ => self.check_mount()?,
            }
        }
        let mut out = self.path();
        if trailing_slash && out != b"/" {
            out.push(b'/');
        }
        Ok(out)
    }

    /// What the component just reached is.
    fn node(&self) -> Result<Node, Errno> {
        let path = self.path();
        if path == b"/proc" || path.starts_with(b"/proc/") {
            return Ok(self.proc_node(&path));
        }
        let fd = match self
            .t
            .root
            .open_at(&path, libc::O_PATH | libc::O_NOFOLLOW, 0)
        {
            Ok(fd) => fd,
            Err(e) if e == Errno::ENOENT => return Ok(Node::Missing),
            Err(e) => return Err(e),
        };
        let st = host::stat(fd.as_fd())?;
        Ok(match st.st_mode & libc::S_IFMT {
            libc::S_IFLNK => {
                let mut buf = vec![0u8; libc::PATH_MAX as usize];
                let n = host::readlink(fd.as_fd(), &mut buf)?;
                buf.truncate(n);
                Node::Link(buf)
            }
            libc::S_IFDIR => Node::Dir,
            _ => Node::Other,
        })
    }

    /// What a path of the generated `/proc` is: `self` and `thread-self` are ordinary
    /// symlinks, a process's `exe`, `cwd`, `root` and descriptors magic ones; anything else
    /// is left to the open (which knows what exists).
    fn proc_node(&self, path: &[u8]) -> Node {
        let t = self.t;
        match path {
            b"/proc/self" => return Node::Link(t.pid.to_string().into_bytes()),
            b"/proc/thread-self" => {
                return Node::Link(format!("{}/task/{}", t.pid, t.tid).into_bytes())
            }
            _ => {}
        }
        let Some((pid, what)) = crate::fs::procfs::process_relative(path, t) else {
            return Node::Dir;
        };
        // `task/TID/…` of a process has the same links as the process.
        let what = match what.strip_prefix("task/").and_then(|r| r.split_once('/')) {
            Some((_, rest)) => rest,
            None => what,
        };
        let own = pid == t.pid;
        match what {
            "exe" => Node::Magic(Some(if own {
                t.exe.clone()
            } else {
                t.group
                    .procs
                    .group_of(pid)
                    .map(|g| g.identity().exe)
                    .unwrap_or_default()
            })),
            "cwd" => Node::Magic(own.then(|| t.cwd())),
            "root" => Node::Magic(own.then(|| b"/".to_vec())),
            _ if what.starts_with("fd/") => {
                let target = what[3..]
                    .parse::<i32>()
                    .ok()
                    .filter(|_| own)
                    .and_then(|n| t.fds.get(n).ok())
                    .map(|f| super::sys_stat::fd_link(&f));
                Node::Magic(target)
            }
            _ if what.starts_with("ns/") || what.starts_with("map_files/") => Node::Magic(None),
            _ => Node::Dir,
        }
    }
}

/// The components of `path`, empty ones dropped (`.` and `..` kept).
fn lexical(path: &[u8]) -> Vec<Vec<u8>> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// The mount point holding guest path `path` (a path without `.`, `..` or symlinks): the
/// longest of `points` it is at or beneath; `/proc` is always a mount of its own.
fn mount_of(path: &[u8], points: &[Vec<u8>]) -> Vec<u8> {
    let beneath = |p: &[u8]| {
        p == b"/" || path == p || (path.starts_with(p) && path.get(p.len()) == Some(&b'/'))
    };
    if beneath(b"/proc") {
        return b"/proc".to_vec();
    }
    points
        .iter()
        .filter(|p| beneath(p))
        .max_by_key(|p| p.len())
        .cloned()
        .unwrap_or_else(|| b"/".to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn how_checks() {
        let creat = libc::O_CREAT as u64;
        assert_eq!(check_how(0, 0, 0), Ok(()));
        assert_eq!(check_how(0, 0o200, 0), Err(Errno::EINVAL));
        assert_eq!(check_how(creat, 0o7777, 0), Ok(()));
        assert_eq!(check_how(creat, u64::MAX, 0), Err(Errno::EINVAL));
        assert_eq!(check_how(creat, 0o600, u64::MAX), Err(Errno::EINVAL));
        assert_eq!(check_how(1 << 40, 0, 0), Err(Errno::EINVAL));
        assert_eq!(
            check_how(0, 0, RESOLVE_BENEATH | RESOLVE_IN_ROOT),
            Err(Errno::EINVAL)
        );
        assert_eq!(check_how(creat, 0o600, RESOLVE_CACHED), Err(Errno::EAGAIN));
        let path = (libc::O_PATH | libc::O_RDWR) as u64;
        assert_eq!(check_how(path, 0, 0), Err(Errno::EINVAL));
    }

    #[test]
    fn mounts_of_paths() {
        let points = vec![b"/".to_vec(), b"/tmp".to_vec(), b"/tmp/a".to_vec()];
        assert_eq!(mount_of(b"/", &points), b"/");
        assert_eq!(mount_of(b"/tmpx", &points), b"/");
        assert_eq!(mount_of(b"/tmp/x", &points), b"/tmp");
        assert_eq!(mount_of(b"/tmp/a/b", &points), b"/tmp/a");
        assert_eq!(mount_of(b"/proc/version", &points), b"/proc");
    }

    #[test]
    fn components() {
        assert_eq!(
            lexical(b"//a/./b/../"),
            vec![b"a".to_vec(), b".".to_vec(), b"b".to_vec(), b"..".to_vec()]
        );
        assert!(lexical(b"/").is_empty());
    }
}
