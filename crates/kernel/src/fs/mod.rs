//! Paths confined to the sandbox's root directory.
//!
//! Every path the application names is resolved by the host kernel with `openat2(2)` and
//! `RESOLVE_IN_ROOT` against a directory fd of the root: `..` stops at the root and symlinks,
//! absolute ones included, resolve inside it, so nothing outside the root can be reached.
//! Relative paths are joined to the task's working directory (a guest path) without lexical
//! clean-up, leaving every `..` and symlink to the host kernel's resolver.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use abi::Errno;

use crate::broker;

pub mod host;
pub mod identity;
pub mod procfs;

/// `struct open_how` for openat2(2).
#[repr(C)]
pub struct OpenHow {
    /// Open flags.
    pub flags: u64,
    /// Mode of a created file.
    pub mode: u64,
    /// `RESOLVE_*` flags.
    pub resolve: u64,
}

/// `RESOLVE_NO_MAGICLINKS`.
pub const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
/// `RESOLVE_IN_ROOT`.
pub const RESOLVE_IN_ROOT: u64 = 0x10;

/// The sandbox's root directory.
#[derive(Debug)]
pub struct Root {
    dir: OwnedFd,
    host_path: PathBuf,
    /// The sandbox's own root's host path (this one's, unless it is a chroot(2) inside it):
    /// where the sandbox's mounts are.
    sandbox_path: PathBuf,
}

impl Root {
    /// Opens `path` as the root.
    ///
    /// # Errors
    /// The host's error if `path` is missing or not a directory.
    pub fn open(path: &Path) -> std::io::Result<Root> {
        let host_path = std::fs::canonicalize(path)?;
        if !host_path.is_dir() {
            return Err(std::io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        let c = CString::new(host_path.as_os_str().as_encoded_bytes())
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: `c` is a valid NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        let dir = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Root {
            dir,
            sandbox_path: host_path.clone(),
            host_path,
        })
    }

    /// A root at directory `dir`, opened inside root `within` (as chroot(2) does).
    ///
    /// # Errors
    /// EBADF if the directory's host path cannot be read.
    pub fn of_dir(dir: OwnedFd, within: &Root) -> Result<Root, Errno> {
        let host_path = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd()))
            .map_err(|_| Errno::EBADF)?;
        Ok(Root {
            dir,
            host_path,
            sandbox_path: within.sandbox_path.clone(),
        })
    }

    /// The root's host path.
    pub fn host_path(&self) -> &Path {
        &self.host_path
    }

    /// The host path of the sandbox's own root, which holds this one (the same unless a
    /// chroot(2) made this one).
    pub fn sandbox_path(&self) -> &Path {
        &self.sandbox_path
    }

    /// Opens guest path `path` (absolute, or relative to the root) with `flags` and `mode`,
    /// confined to the root.
    ///
    /// # Errors
    /// The errno the host kernel gives (ENOENT, EACCES, ELOOP…); EINVAL for a NUL in the path.
    pub fn open_at(&self, path: &[u8], flags: i32, mode: u32) -> Result<OwnedFd, Errno> {
        guest_umask();
        let rel: &[u8] = if path.is_empty() { b"." } else { path };
        let c = CString::new(rel).map_err(|_| Errno::EINVAL)?;
        broker::retry_open(self.open_own(&c, flags, mode), || broker::Op::OpenAt2 {
            dir: self.dir.as_fd(),
            path: rel,
            flags,
            mode,
        })
    }

    /// `openat2` in the root, by the holder itself.
    fn open_own(&self, c: &CString, flags: i32, mode: u32) -> Result<OwnedFd, Errno> {
        let how = OpenHow {
            flags: (flags | libc::O_CLOEXEC) as u32 as u64,
            mode: u64::from(mode & 0o7777),
            resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
        };
        // RESOLVE_IN_ROOT answers EAGAIN when a rename raced with a `..` step: retry then.
        for _ in 0..16 {
            // SAFETY: valid dirfd, NUL-terminated path and a correctly sized open_how.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_openat2,
                    self.dir.as_raw_fd(),
                    c.as_ptr(),
                    &how as *const OpenHow,
                    std::mem::size_of::<OpenHow>(),
                )
            };
            if fd >= 0 {
                // SAFETY: a fresh fd owned by nobody else.
                return Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) });
            }
            let e = Errno::last();
            if e != Errno::EAGAIN {
                return Err(e);
            }
        }
        Err(Errno::EAGAIN)
    }

    /// Opens the directory that holds the last component of guest path `path` (absolute),
    /// confined to the root, for a call that creates, removes or renames that component.
    ///
    /// The name keeps its trailing slashes and may be `.` or `..`: the host's `*at` call then
    /// gives Linux's answer (a trailing slash on a non-directory is ENOTDIR, `mkdir("x/..")` is
    /// EEXIST, `rename(".", …)` EBUSY) without looking the name up outside the root, as these
    /// calls never follow their last component. The root itself is `.` of the root, with
    /// [`Parent::is_root`] set (rmdir("/") is EBUSY).
    ///
    /// # Errors
    /// What resolving the parent gives (ENOENT, ENOTDIR, ELOOP, ENAMETOOLONG…); EINVAL for a
    /// NUL in the path.
    pub fn parent_of(&self, path: &[u8]) -> Result<Parent, Errno> {
        let (dir, name, is_root) = split_last(path);
        let dir = self.open_at(dir, libc::O_PATH | libc::O_DIRECTORY, 0)?;
        let name = CString::new(name).map_err(|_| Errno::EINVAL)?;
        Ok(Parent { dir, name, is_root })
    }

    /// The guest path of an open host fd inside the root (from `/proc/self/fd`), `/` for the
    /// root itself.
    ///
    /// # Errors
    /// EBADF if the fd's host path cannot be read; ENOENT if it is not under the root.
    pub fn guest_path_of(&self, fd: &impl AsRawFd) -> Result<Vec<u8>, Errno> {
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map_err(|_| Errno::EBADF)?;
        let rel = link
            .strip_prefix(&self.host_path)
            .map_err(|_| Errno::ENOENT)?;
        let mut out = b"/".to_vec();
        out.extend_from_slice(rel.as_os_str().as_encoded_bytes());
        Ok(out)
    }
}

/// Gives the calling host thread a umask of its own, 0, once: files the host creates for the
/// application then get exactly the mode the application's own umask leaves (the kernel applies
/// that one), not the runtime's umask on top. `unshare(CLONE_FS)` separates this thread's umask
/// (and working directory, which the runtime never uses: every guest path goes through the
/// root's fd) from the runtime's other threads. Should the host refuse, the runtime's umask
/// stays in force.
fn guest_umask() {
    thread_local! {
        static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    DONE.with(|done| {
        if done.replace(true) {
            return;
        }
        // SAFETY: unshare(CLONE_FS) affects only the calling thread's fs attributes.
        if unsafe { libc::unshare(libc::CLONE_FS) } == 0 {
            // SAFETY: umask has no preconditions; after the unshare it is this thread's own.
            unsafe { libc::umask(0) };
        }
    });
}

/// The directory holding a path's last component, and that component (see
/// [`Root::parent_of`]).
#[derive(Debug)]
pub struct Parent {
    /// The directory, opened `O_PATH` inside the root.
    pub dir: OwnedFd,
    /// The last component with its trailing slashes; `.` for the root.
    pub name: CString,
    /// Whether the path named the root itself (`/`, `//`…).
    pub is_root: bool,
}

/// Splits guest path `path` (absolute) into its parent directory and last component (with
/// its trailing slashes), and says whether it names the root.
fn split_last(path: &[u8]) -> (&[u8], &[u8], bool) {
    let end = path.iter().rposition(|&c| c != b'/').map_or(0, |i| i + 1);
    if end == 0 {
        return (b"/", b".", true);
    }
    match path[..end].iter().rposition(|&c| c == b'/') {
        Some(0) => (b"/", &path[1..], false),
        Some(i) => (&path[..i], &path[i + 1..], false),
        None => (b".", path, false),
    }
}

/// The host path `/proc/self/fd/N` of one of the runtime's own descriptors: the host
/// kernel follows it to the very inode `fd` refers to (a symlink itself for an `O_PATH |
/// O_NOFOLLOW` fd), so calls that take only a path (chmod, the xattr calls, inotify) can act on
/// a file that was found inside the root.
pub fn host_fd_path(fd: &impl AsRawFd) -> CString {
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .expect("a formatted number holds no NUL")
}

/// Opens the file behind one of the runtime's own descriptors again, through its
/// [`host_fd_path`]: a new open file description of the same file, with `flags` (and
/// `O_CLOEXEC`), checked by the host against the file itself.
///
/// # Errors
/// The host's errno.
pub fn reopen(fd: &impl AsRawFd, flags: i32) -> Result<OwnedFd, Errno> {
    let path = host_fd_path(fd);
    // SAFETY: a NUL-terminated /proc path to one of our own descriptors; plain flags.
    let raw = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Joins a guest path to a base directory (a guest path) unless it is absolute.
pub fn join(base: &[u8], path: &[u8]) -> Vec<u8> {
    if path.first() == Some(&b'/') {
        return path.to_vec();
    }
    let mut out = base.to_vec();
    if out.last() != Some(&b'/') {
        out.push(b'/');
    }
    out.extend_from_slice(path);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_paths() {
        assert_eq!(join(b"/a", b"b"), b"/a/b");
        assert_eq!(join(b"/", b"b"), b"/b");
        assert_eq!(join(b"/a", b"/c"), b"/c");
        assert_eq!(join(b"/a", b"../.."), b"/a/../..");
    }

    #[test]
    fn split_last_component() {
        assert_eq!(split_last(b"/"), (&b"/"[..], &b"."[..], true));
        assert_eq!(split_last(b"///"), (&b"/"[..], &b"."[..], true));
        assert_eq!(split_last(b"/a"), (&b"/"[..], &b"a"[..], false));
        assert_eq!(split_last(b"/a/"), (&b"/"[..], &b"a/"[..], false));
        assert_eq!(split_last(b"/a/b//"), (&b"/a"[..], &b"b//"[..], false));
        assert_eq!(split_last(b"/a/.."), (&b"/a"[..], &b".."[..], false));
        assert_eq!(split_last(b"/a//b"), (&b"/a/"[..], &b"b"[..], false));
        assert_eq!(split_last(b"a"), (&b"."[..], &b"a"[..], false));
    }

    #[test]
    fn dotdot_and_symlinks_stay_inside() {
        let outside = std::env::temp_dir().join(format!("torpor-outside-{}", std::process::id()));
        std::fs::write(&outside, b"secret").unwrap();
        let root = std::env::temp_dir().join(format!("torpor-root-{}", std::process::id()));
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::fs::write(root.join("inside"), b"ok").unwrap();
        let _ = std::fs::remove_file(root.join("link"));
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let r = Root::open(&root).unwrap();
        assert!(r.open_at(b"/inside", libc::O_RDONLY, 0).is_ok());
        // `..` clamps at the root: /d/../../../inside is /inside.
        assert!(r.open_at(b"/d/../../../inside", libc::O_RDONLY, 0).is_ok());
        let name = outside.file_name().unwrap().as_encoded_bytes().to_vec();
        let mut up = b"../../../../../../tmp/".to_vec();
        up.extend_from_slice(&name);
        assert_eq!(r.open_at(&up, libc::O_RDONLY, 0).err(), Some(Errno::ENOENT));
        // The absolute symlink resolves inside the root, where its target does not exist.
        assert_eq!(
            r.open_at(b"/link", libc::O_RDONLY, 0).err(),
            Some(Errno::ENOENT)
        );
        let d = r.open_at(b"/d/..", libc::O_PATH, 0).unwrap();
        assert_eq!(r.guest_path_of(&d).unwrap(), b"/");
        std::fs::remove_dir_all(&root).unwrap();
        std::fs::remove_file(&outside).unwrap();
    }
}
