//! The bundle's mounts that torpor's kernel does not provide itself: bind mounts of host paths
//! (an engine's /etc/hosts, /etc/resolv.conf, volumes) and tmpfs mounts, made in the holder's
//! private mount namespace on top of the container's root, where the sandbox's confined path
//! resolution (`openat2` with `RESOLVE_IN_ROOT`, which crosses mount points) sees them.
//!
//! Each destination is resolved inside the root exactly as the sandbox resolves paths (`..`
//! and symbolic links, absolute ones included, stay inside), missing directories and the
//! mount point itself are created there, and the mount is made on the resolved object
//! through its `/proc/self/fd` path, so no destination can point a mount outside the root.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kernel::fs::Root;

/// One mount to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MountSpec {
    /// `mount --bind SOURCE DEST` (recursive with `rbind`), read-only with `ro`.
    Bind {
        /// Host path.
        source: PathBuf,
        /// Guest path.
        destination: String,
        /// `ro`.
        readonly: bool,
        /// `rbind`.
        recursive: bool,
    },
    /// A new tmpfs.
    Tmpfs {
        /// Guest path.
        destination: String,
        /// `size=`, `mode=` options passed on.
        data: String,
        /// `ro`.
        readonly: bool,
    },
}

impl MountSpec {
    /// Guest path of the mount.
    pub fn destination(&self) -> &str {
        match self {
            MountSpec::Bind { destination, .. } | MountSpec::Tmpfs { destination, .. } => {
                destination
            }
        }
    }

    /// The mount an OCI `mounts` entry asks for, or `None` for one torpor does not make
    /// (with the reason).
    pub fn from_oci(
        typ: Option<&str>,
        source: Option<&Path>,
        destination: &str,
        options: &[String],
    ) -> std::result::Result<MountSpec, String> {
        let has = |o: &str| options.iter().any(|x| x == o);
        let readonly = has("ro");
        if !destination.starts_with('/') {
            return Err(format!("destination {destination:?} is not absolute"));
        }
        let is_bind = typ == Some("bind") || has("bind") || has("rbind");
        if is_bind {
            let Some(source) = source else {
                return Err("bind mount without a source".into());
            };
            return Ok(MountSpec::Bind {
                source: source.to_path_buf(),
                destination: destination.to_string(),
                readonly,
                recursive: has("rbind"),
            });
        }
        if typ == Some("tmpfs") {
            let data: Vec<&str> = options
                .iter()
                .map(String::as_str)
                .filter(|o| o.starts_with("size=") || o.starts_with("mode="))
                .collect();
            return Ok(MountSpec::Tmpfs {
                destination: destination.to_string(),
                data: data.join(","),
                readonly,
            });
        }
        Err(format!("type {:?} is not mounted", typ.unwrap_or("")))
    }
}

/// Makes `mounts` on the root at `rootfs`, in a private mount namespace this (single-threaded)
/// process enters first. A root holder enters one even without mounts: its confinement
/// mounts a `/dev` of its own there (`crate::confine::devices`).
pub fn apply(rootfs: &Path, mounts: &[MountSpec]) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if mounts.is_empty() && !root {
        return Ok(());
    }
    crate::cowroot::enter_private_namespace()?;
    for m in mounts {
        apply_one(rootfs, m).with_context(|| format!("mount on {}", m.destination()))?;
    }
    Ok(())
}

fn apply_one(rootfs: &Path, m: &MountSpec) -> Result<()> {
    // A fresh view of the root each time: an earlier mount may sit on a parent directory.
    let root = Root::open(rootfs).with_context(|| format!("root {}", rootfs.display()))?;
    let dir_target = match m {
        MountSpec::Bind { source, .. } => std::fs::metadata(source)
            .with_context(|| format!("source {}", source.display()))?
            .is_dir(),
        MountSpec::Tmpfs { .. } => true,
    };
    let target = make_target(&root, m.destination(), dir_target)?;
    let at = proc_fd_path(&target);
    let c =
        |p: &Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).context("NUL in path");
    let at_c = c(&at)?;
    let (source, fstype, flags, data) = match m {
        MountSpec::Bind {
            source, recursive, ..
        } => (
            c(source)?,
            None,
            libc::MS_BIND | if *recursive { libc::MS_REC } else { 0 },
            None,
        ),
        MountSpec::Tmpfs { data, .. } => (
            c(Path::new("tmpfs"))?,
            Some(c(Path::new("tmpfs"))?),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(c(Path::new(data))?),
        ),
    };
    // SAFETY: NUL-terminated strings that outlive the call.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            at_c.as_ptr(),
            fstype.as_ref().map_or(std::ptr::null(), |f| f.as_ptr()),
            flags,
            data.as_ref()
                .map_or(std::ptr::null(), |d| d.as_ptr().cast()),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error()).context("mount");
    }
    let readonly = match m {
        MountSpec::Bind { readonly, .. } | MountSpec::Tmpfs { readonly, .. } => *readonly,
    };
    if readonly {
        // The new mount is on top now: open it again to remount it read-only.
        let top = make_target(&root, m.destination(), dir_target)?;
        let top_c = c(&proc_fd_path(&top))?;
        let ro = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
        // SAFETY: as above.
        let r = unsafe {
            libc::mount(
                std::ptr::null(),
                top_c.as_ptr(),
                std::ptr::null(),
                ro,
                std::ptr::null(),
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error()).context("remounting read-only");
        }
    }
    Ok(())
}

fn proc_fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Opens (`O_PATH`) guest path `dest` in `root`, creating missing directories on the way and
/// the last component (a directory, or an empty file when `dir` is false) if absent.
fn make_target(root: &Root, dest: &str, dir: bool) -> Result<OwnedFd> {
    let comps: Vec<&str> = dest
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if comps.contains(&"..") {
        bail!("destination {dest:?} holds '..'");
    }
    let mut path = String::new();
    for (i, comp) in comps.iter().enumerate() {
        let parent = if path.is_empty() {
            "/".to_string()
        } else {
            path.clone()
        };
        path.push('/');
        path.push_str(comp);
        let last = i + 1 == comps.len();
        let want_dir = !last || dir;
        match root.open_at(path.as_bytes(), libc::O_PATH, 0) {
            Ok(_) => continue,
            Err(e) if e == abi::Errno::ENOENT => {}
            Err(e) => bail!("{path}: {e:?}"),
        }
        let pfd = root
            .open_at(parent.as_bytes(), libc::O_PATH | libc::O_DIRECTORY, 0)
            .map_err(|e| anyhow::anyhow!("{parent}: {e:?}"))?;
        let name = std::ffi::CString::new(*comp).context("NUL in destination")?;
        // SAFETY: a directory fd and a NUL-terminated name; the created object is confined to
        // that directory, which was resolved inside the root.
        let r = unsafe {
            if want_dir {
                libc::mkdirat(pfd.as_raw_fd(), name.as_ptr(), 0o755)
            } else {
                let fd = libc::openat(
                    pfd.as_raw_fd(),
                    name.as_ptr(),
                    libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_WRONLY
                        | libc::O_CLOEXEC
                        | libc::O_NOFOLLOW,
                    0o644,
                );
                if fd >= 0 {
                    libc::close(fd);
                }
                fd.min(0)
            }
        };
        if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("creating {path}"));
        }
    }
    let p = if path.is_empty() {
        "/".to_string()
    } else {
        path
    };
    root.open_at(p.as_bytes(), libc::O_PATH, 0)
        .map_err(|e| anyhow::anyhow!("{p}: {e:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oci_entries() {
        let o = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            MountSpec::from_oci(
                Some("bind"),
                Some(Path::new("/h")),
                "/d",
                &o(&["ro", "rbind"])
            ),
            Ok(MountSpec::Bind {
                source: "/h".into(),
                destination: "/d".into(),
                readonly: true,
                recursive: true
            })
        );
        assert!(matches!(
            MountSpec::from_oci(Some("tmpfs"), None, "/tmp", &o(&["size=64k", "nosuid"])),
            Ok(MountSpec::Tmpfs { ref data, .. }) if data == "size=64k"
        ));
        assert!(MountSpec::from_oci(Some("nfs"), None, "/n", &[]).is_err());
        assert!(MountSpec::from_oci(Some("bind"), None, "/n", &[]).is_err());
        assert!(MountSpec::from_oci(Some("bind"), Some(Path::new("/h")), "rel", &[]).is_err());
    }
}
