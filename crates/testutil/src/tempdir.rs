//! Temporary directories removed on drop (a small stand-in for the
//! `tempfile` crate, to keep the test harness free of dependencies).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// A fresh directory under the system temp directory, removed with all its
/// contents on drop (kept when `TORPOR_KEEP_TMP=1`, for debugging).
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `$TMPDIR/PREFIX-<random>`.
    ///
    /// # Panics
    ///
    /// When the directory cannot be created.
    pub fn new(prefix: &str) -> TempDir {
        let base = std::env::temp_dir();
        for _ in 0..100 {
            let path = base.join(format!("{prefix}-{}", unique_token()));
            match std::fs::create_dir(&path) {
                Ok(()) => return TempDir { path },
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("create temp dir {}: {e}", path.display()),
            }
        }
        panic!(
            "could not create a unique temp dir under {}",
            base.display()
        );
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var("TORPOR_KEEP_TMP").as_deref() == Ok("1") {
            eprintln!("keeping {}", self.path.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A random 16-hex-digit token, different on every call (for unique names
/// and secret markers).
pub fn unique_token() -> String {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}
