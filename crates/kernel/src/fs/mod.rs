//! Paths confined to the sandbox's root directory.
//!
//! Every path the application names is resolved by the host kernel with `openat2(2)` and
//! `RESOLVE_IN_ROOT` against a directory fd of the root: `..` stops at the root and symlinks,
//! absolute ones included, resolve inside it, so nothing outside the root can be reached.
//! Relative paths are joined to the task's working directory (a guest path) without lexical
//! clean-up, leaving every `..` and symlink to the host kernel's resolver.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use abi::Errno;

pub mod procfs;

/// `struct open_how` for openat2(2).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_IN_ROOT: u64 = 0x10;

/// The sandbox's root directory.
#[derive(Debug)]
pub struct Root {
    dir: OwnedFd,
    host_path: PathBuf,
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
        Ok(Root { dir, host_path })
    }

    /// The root's host path.
    pub fn host_path(&self) -> &Path {
        &self.host_path
    }

    /// Opens guest path `path` (absolute, or relative to the root) with `flags` and `mode`,
    /// confined to the root.
    ///
    /// # Errors
    /// The errno the host kernel gives (ENOENT, EACCES, ELOOP…); EINVAL for a NUL in the path.
    pub fn open_at(&self, path: &[u8], flags: i32, mode: u32) -> Result<OwnedFd, Errno> {
        let rel: &[u8] = if path.is_empty() { b"." } else { path };
        let c = CString::new(rel).map_err(|_| Errno::EINVAL)?;
        let how = OpenHow {
            flags: (flags | libc::O_CLOEXEC) as u32 as u64,
            mode: u64::from(mode & 0o7777),
            resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
        };
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
        if fd < 0 {
            return Err(Errno::last());
        }
        // SAFETY: a fresh fd owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    /// The guest path of an open host fd inside the root (from `/proc/self/fd`), `/` for the
    /// root itself.
    ///
    /// # Errors
    /// EBADF if the fd's host path cannot be read; ENOENT if it is not under the root.
    pub fn guest_path_of(&self, fd: &OwnedFd) -> Result<Vec<u8>, Errno> {
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
