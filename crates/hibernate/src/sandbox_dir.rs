//! Per-sandbox state directories: `BASE/ID`, mode 0700, holding the swap and REAP files and
//! a `pid` file naming the host process that owns the sandbox; created atomically, removed
//! with the sandbox, and swept when their owner is gone.
//!
//! ```text
//! BASE/                 created 0700 if missing
//!   ID/                 0700, published complete by rename(2)
//!     pid               0600, decimal pid of the owning process, newline
//!     swap, reap, ...   0600, created by their writers (O_EXCL, O_NOFOLLOW)
//!   .new-ID.PID/        a directory being built by process PID (swept like ID/)
//! ```
//!
//! The ID is checked before it touches a path ([`validate_id`]): 1 to 64 characters from
//! `A-Za-z0-9-_.`, not starting with `.`, so it can never be `..`, contain `/`, or collide
//! with the hidden `.new-*` build directories. A directory is built under `.new-ID.PID`, its
//! `pid` file written, and then renamed to `ID`: a published directory always has its `pid`
//! file, so [`cleanup_orphans`] never mistakes one being created for an orphan. The rename
//! fails if `ID` exists and is not empty, which makes IDs unique.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Name of the file holding the owner's pid.
pub const PID_FILE: &str = "pid";
/// Name of the swap file.
pub const SWAP_FILE: &str = "swap";
/// Name of the REAP file.
pub const REAP_FILE: &str = "reap";
/// Longest ID.
pub const MAX_ID_LEN: usize = 64;

const BUILD_PREFIX: &str = ".new-";

/// Errors of sandbox-directory management.
#[derive(Debug, thiserror::Error)]
pub enum SandboxDirError {
    /// The ID (or file name) is not allowed.
    #[error("invalid sandbox id {0:?}: use 1-64 of A-Z a-z 0-9 - _ . not starting with '.'")]
    InvalidId(String),
    /// A sandbox with this ID already has a directory.
    #[error("sandbox {0:?} already exists")]
    AlreadyExists(String),
    /// No directory for this ID.
    #[error("sandbox {0:?} not found")]
    NotFound(String),
    /// The `pid` file is missing or does not hold a pid.
    #[error("bad pid file in {0}")]
    BadPidFile(PathBuf),
    /// A host error.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// On what.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SandboxDirError + 'a {
    move |source| SandboxDirError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// Checks a sandbox ID (also used for file names inside the directory).
///
/// # Errors
/// [`SandboxDirError::InvalidId`] unless it has 1 to 64 characters from `A-Za-z0-9-_.` and
/// does not start with `.`.
pub fn validate_id(id: &str) -> Result<(), SandboxDirError> {
    let ok = (1..=MAX_ID_LEN).contains(&id.len())
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(SandboxDirError::InvalidId(id.to_owned()))
    }
}

/// One sandbox's state directory.
#[derive(Debug)]
pub struct SandboxDir {
    id: String,
    path: PathBuf,
}

fn mkdir_0700(path: &Path) -> io::Result<()> {
    DirBuilder::new().mode(0o700).create(path)?;
    // The umask may have removed bits, never added any; make it exact.
    fs::set_permissions(path, fs::Permissions::from_mode(0o700))
}

fn read_pid(dir: &Path) -> Result<u32, SandboxDirError> {
    let path = dir.join(PID_FILE);
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|_| SandboxDirError::BadPidFile(dir.to_owned()))?;
    let mut buf = [0u8; 16];
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(SandboxDirError::BadPidFile(dir.to_owned())),
        }
    }
    std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(|s| s.trim_end_matches('\n').parse::<u32>().ok())
        .filter(|&p| p > 0)
        .ok_or_else(|| SandboxDirError::BadPidFile(dir.to_owned()))
}

impl SandboxDir {
    /// Creates `base/id` (mode 0700, `base` too if missing) owned by this process, with its
    /// `pid` file.
    ///
    /// # Errors
    /// [`SandboxDirError::InvalidId`]; [`SandboxDirError::AlreadyExists`] if a non-empty
    /// directory (or any file) is already there; [`SandboxDirError::Io`] otherwise.
    pub fn create(base: &Path, id: &str) -> Result<Self, SandboxDirError> {
        Self::create_for(base, id, std::process::id())
    }

    /// As [`SandboxDir::create`], recording `pid` as the owner.
    ///
    /// # Errors
    /// As [`SandboxDir::create`].
    pub fn create_for(base: &Path, id: &str, pid: u32) -> Result<Self, SandboxDirError> {
        validate_id(id)?;
        if !base.is_dir() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(base)
                .map_err(io_err("creating", base))?;
        }
        let path = base.join(id);
        if fs::symlink_metadata(&path).is_ok() {
            return Err(SandboxDirError::AlreadyExists(id.to_owned()));
        }
        let tmp = base.join(format!("{BUILD_PREFIX}{id}.{pid}"));
        if fs::symlink_metadata(&tmp).is_ok() {
            fs::remove_dir_all(&tmp).map_err(io_err("removing", &tmp))?;
        }
        mkdir_0700(&tmp).map_err(io_err("creating", &tmp))?;
        let built = (|| {
            let pid_path = tmp.join(PID_FILE);
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&pid_path)
                .map_err(io_err("creating", &pid_path))?;
            f.write_all(format!("{pid}\n").as_bytes())
                .map_err(io_err("writing", &pid_path))?;
            fs::rename(&tmp, &path).map_err(|e| match e.raw_os_error() {
                Some(libc::ENOTEMPTY) | Some(libc::EEXIST) | Some(libc::ENOTDIR) => {
                    SandboxDirError::AlreadyExists(id.to_owned())
                }
                _ => SandboxDirError::Io {
                    op: "publishing",
                    path: path.clone(),
                    source: e,
                },
            })
        })();
        if let Err(e) = built {
            let _ = fs::remove_dir_all(&tmp);
            return Err(e);
        }
        Ok(SandboxDir {
            id: id.to_owned(),
            path,
        })
    }

    /// Opens the existing directory of sandbox `id` (for `torpor delete` from another
    /// process, say).
    ///
    /// # Errors
    /// [`SandboxDirError::InvalidId`]; [`SandboxDirError::NotFound`] if there is no such
    /// directory (a symlink does not count).
    pub fn open(base: &Path, id: &str) -> Result<Self, SandboxDirError> {
        validate_id(id)?;
        let path = base.join(id);
        match fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => Ok(SandboxDir {
                id: id.to_owned(),
                path,
            }),
            _ => Err(SandboxDirError::NotFound(id.to_owned())),
        }
    }

    /// The sandbox ID.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Path of the swap file.
    pub fn swap_path(&self) -> PathBuf {
        self.path.join(SWAP_FILE)
    }

    /// Path of the REAP file.
    pub fn reap_path(&self) -> PathBuf {
        self.path.join(REAP_FILE)
    }

    /// Path of another file in the directory (e.g. `swap.next` while a new swap file is
    /// written beside the old one).
    ///
    /// # Errors
    /// [`SandboxDirError::InvalidId`] unless `name` obeys the ID rules.
    pub fn file_path(&self, name: &str) -> Result<PathBuf, SandboxDirError> {
        validate_id(name)?;
        Ok(self.path.join(name))
    }

    /// The owner's pid, from the `pid` file.
    ///
    /// # Errors
    /// [`SandboxDirError::BadPidFile`].
    pub fn owner_pid(&self) -> Result<u32, SandboxDirError> {
        read_pid(&self.path)
    }

    /// Removes the directory and everything in it.
    ///
    /// # Errors
    /// [`SandboxDirError::Io`]; a directory already gone is not an error.
    pub fn remove(self) -> Result<(), SandboxDirError> {
        match fs::remove_dir_all(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(SandboxDirError::Io {
                op: "removing",
                path: self.path.clone(),
                source: e,
            }),
            _ => Ok(()),
        }
    }
}

/// Whether process `pid` exists (its `/proc` entry is there).
pub fn pid_alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// What [`cleanup_orphans`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanupReport {
    /// Entries removed (their owner is gone).
    pub removed: Vec<String>,
    /// Sandbox directories kept (owner alive).
    pub kept: Vec<String>,
    /// Entries left alone: not a directory, a name that is not an ID, or no readable pid
    /// file (never removed blindly).
    pub skipped: Vec<String>,
}

/// Removes every sandbox directory (and half-built `.new-*` directory) under `base` whose
/// owner process is gone according to `is_alive` (e.g. [`pid_alive`]). A missing `base` is
/// an empty report.
///
/// # Errors
/// [`SandboxDirError::Io`] if `base` cannot be listed or a directory cannot be removed.
pub fn cleanup_orphans(
    base: &Path,
    is_alive: impl Fn(u32) -> bool,
) -> Result<CleanupReport, SandboxDirError> {
    let mut report = CleanupReport::default();
    let entries = match fs::read_dir(base) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(report),
        Err(e) => {
            return Err(SandboxDirError::Io {
                op: "listing",
                path: base.to_owned(),
                source: e,
            })
        }
    };
    for entry in entries {
        let entry = entry.map_err(io_err("listing", base))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let is_dir = fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
        let pid = if !is_dir {
            None
        } else if let Some(rest) = name.strip_prefix(BUILD_PREFIX) {
            // `.new-ID.PID`: the builder's pid is in the name.
            rest.rsplit_once('.')
                .filter(|(id, _)| validate_id(id).is_ok())
                .and_then(|(_, p)| p.parse::<u32>().ok())
        } else if validate_id(&name).is_ok() {
            read_pid(&path).ok()
        } else {
            None
        };
        match pid {
            None => report.skipped.push(name),
            Some(p) if is_alive(p) => report.kept.push(name),
            Some(_) => {
                match fs::remove_dir_all(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(SandboxDirError::Io {
                            op: "removing",
                            path,
                            source: e,
                        })
                    }
                }
                tracing::info!(dir = %name, "removed orphaned sandbox directory");
                report.removed.push(name);
            }
        }
    }
    report.removed.sort();
    report.kept.sort();
    report.skipped.sort();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn ids() {
        for good in ["a", "web-1", "A_b.c", "x".repeat(64).as_str(), "0..1"] {
            assert!(validate_id(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "../x",
            "a b",
            "é",
            "x\0",
            "x".repeat(65).as_str(),
            "a\n",
        ] {
            assert!(
                matches!(validate_id(bad), Err(SandboxDirError::InvalidId(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn create_layout_modes_and_remove() {
        let t = TempDir::new();
        let base = t.path().join("run/torpor");
        let d = SandboxDir::create(&base, "sb1").unwrap();
        assert_eq!(d.path(), base.join("sb1"));
        assert_eq!(mode(&base), 0o700);
        assert_eq!(mode(d.path()), 0o700);
        assert_eq!(mode(&d.path().join(PID_FILE)), 0o600);
        assert_eq!(d.owner_pid().unwrap(), std::process::id());
        assert_eq!(d.swap_path(), base.join("sb1/swap"));
        assert_eq!(d.reap_path(), base.join("sb1/reap"));
        assert_eq!(
            d.file_path("swap.next").unwrap(),
            base.join("sb1/swap.next")
        );
        assert!(d.file_path("../x").is_err());
        // No leftover build directory.
        let names: Vec<_> = fs::read_dir(&base)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("sb1")]);
        assert!(matches!(
            SandboxDir::create(&base, "sb1"),
            Err(SandboxDirError::AlreadyExists(_))
        ));
        fs::write(d.swap_path(), b"x").unwrap();
        let again = SandboxDir::open(&base, "sb1").unwrap();
        assert_eq!(again.owner_pid().unwrap(), std::process::id());
        d.remove().unwrap();
        assert!(!base.join("sb1").exists());
        again.remove().unwrap();
        assert!(matches!(
            SandboxDir::open(&base, "sb1"),
            Err(SandboxDirError::NotFound(_))
        ));
        assert!(matches!(
            SandboxDir::create(&base, "../evil"),
            Err(SandboxDirError::InvalidId(_))
        ));
        assert!(!t.path().join("run/evil").exists());
    }

    #[test]
    fn refuses_existing_file_or_symlink_at_id() {
        let t = TempDir::new();
        let base = t.path();
        fs::write(base.join("f"), b"").unwrap();
        assert!(matches!(
            SandboxDir::create(base, "f"),
            Err(SandboxDirError::AlreadyExists(_))
        ));
        fs::create_dir(base.join("target")).unwrap();
        std::os::unix::fs::symlink(base.join("target"), base.join("l")).unwrap();
        assert!(matches!(
            SandboxDir::create(base, "l"),
            Err(SandboxDirError::AlreadyExists(_))
        ));
        assert!(matches!(
            SandboxDir::open(base, "l"),
            Err(SandboxDirError::NotFound(_))
        ));
        assert!(!base.join("target/pid").exists());
    }

    #[test]
    fn cleanup_removes_only_dead_owners() {
        let t = TempDir::new();
        let base = t.path();
        SandboxDir::create_for(base, "alive", 100).unwrap();
        let dead = SandboxDir::create_for(base, "dead", 200).unwrap();
        fs::write(dead.swap_path(), b"swapdata").unwrap();
        // Half-built directories of a dead and a live builder.
        fs::create_dir(base.join(".new-x.200")).unwrap();
        fs::create_dir(base.join(".new-y.100")).unwrap();
        // Things never removed: no pid file, garbage pid, a file, a symlink, a bad name.
        fs::create_dir(base.join("nopid")).unwrap();
        fs::create_dir(base.join("garbage")).unwrap();
        fs::write(base.join("garbage/pid"), b"12ab").unwrap();
        fs::write(base.join("plainfile"), b"").unwrap();
        fs::create_dir(base.join("elsewhere")).unwrap();
        fs::write(base.join("elsewhere/pid"), b"200\n").unwrap();
        std::os::unix::fs::symlink(base.join("elsewhere"), base.join("link")).unwrap();
        fs::create_dir(base.join(".other")).unwrap();

        let r = cleanup_orphans(base, |p| p == 100).unwrap();
        assert_eq!(r.removed, vec![".new-x.200", "dead", "elsewhere"]);
        assert_eq!(r.kept, vec![".new-y.100", "alive"]);
        assert_eq!(
            r.skipped,
            vec![".other", "garbage", "link", "nopid", "plainfile"]
        );
        assert!(!base.join("dead").exists());
        assert!(base.join("alive/pid").exists());
        assert!(base.join("link").symlink_metadata().is_ok());
        assert!(cleanup_orphans(&base.join("missing"), |_| false)
            .unwrap()
            .removed
            .is_empty());
    }

    #[test]
    fn own_pid_is_alive() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(u32::MAX));
    }
}
