//! The on-disk format of a checkpoint (issue 14; plan in `docs/design/snapshots.md`): a
//! directory of files, each checked before anything is restored from it.
//!
//! ```text
//! DIR/            0700, files 0600 written O_EXCL | O_NOFOLLOW, each fdatasynced (but in a
//!                 volatile checkpoint, CheckpointWriter::volatile)
//!   MANIFEST      envelope "manifest": JSON Manifest, written last (MANIFEST.tmp, renamed)
//!   state.json    envelope "state": the sandbox's kernel state, JSON
//!   blobs.bin     envelope "blobs": bulk bytes the state names by BlobRef
//!   mem-PID.img   page file "TORPSWP\0" (crate::pagefile): a process's guest memory
//!   reap-PID.img  page file "TORPREAP": its recorded working set, in order (optional)
//! ```
//!
//! [`envelope`] describes the 64-byte header around every non-page file. [`Checkpoint::open`]
//! checks, before anything starts: a MANIFEST is there (else the checkpoint is incomplete),
//! its envelope and JSON (unknown fields refused), the format version (same major, minor not
//! newer than this build's), the memory layout it was made for ([`layout_id`]), and every
//! file the manifest lists: a plain name, a regular file (no symlink followed), its exact
//! length, the checksum of an enveloped file's whole bytes, a page file's header, index and
//! trailer (`PageFileReader::open`: no page data is read; each page is checked when read).
//!
//! **Compatibility.** A checkpoint is read by a build with the same major and a minor at
//! least its own. A minor bump may only add fields with defaults whose absence means the old
//! behaviour; anything else bumps the major. Nothing is forward-compatible.

pub mod envelope;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use envelope::Kind;
pub use kernel::checkpoint::blobs::{BlobError, BlobRef, BlobWriter, Blobs};

use crate::pagefile::{PageFileError, PageFileReader};
use crate::reap::REAP_MAGIC;
use crate::swapfile::SWAP_MAGIC;

/// Major version of the checkpoint format this build writes and reads.
pub const FORMAT_MAJOR: u16 = 1;
/// Minor version this build writes (and the newest it reads). 1: the state's `clocks`;
/// 2: a kept connection's descriptor (`kept`, dormant holders only); 3: each process's
/// file-window pages mapped at the checkpoint (`file_pages`, mapped again ahead by a restore);
/// 4: open files of the generated /proc (`ProcFile`, with the bytes they were made with);
/// 5: the sandbox's boot id (`boot_id`, kept by a restore, new for a clone or a fork);
/// 6: anonymous shared memory (`anon_shared`, VMAs `SharedAnon`); 7: locked mappings (VMAs'
/// `lock`, the address space's `def_lock`; left out when unlocked) and VMAs sealed by mseal
/// (`sealed`, written only when true); 8: VMAs' madvise marks (`advice`: wipe on fork, not
/// copied by fork, not dumped; left out when none); 9: layered memory (a dormant sandbox's
/// in-place checkpoint: `mem-PID.base-K.img`, links to the images it was restored from, under
/// `mem-PID.img`, which holds only the pages they do not; its working set as a page list,
/// `workset-PID`, read from those images); 10: processes that share frames copy-on-write
/// (`memory_of`, written only for them: one memory image, `mem-PID.img` of the family's
/// lowest pid, and one allocator for the family).
pub const FORMAT_MINOR: u16 = 10;

/// The manifest's file name.
pub const MANIFEST: &str = "MANIFEST";
/// The state's file name.
pub const STATE: &str = "state.json";
/// The blob file's name.
pub const BLOBS: &str = "blobs.bin";

/// Errors of writing and reading checkpoints; each names the file and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// No MANIFEST: the checkpoint was never finished.
    #[error("{0} is an incomplete checkpoint (no MANIFEST: its writing never finished)")]
    Incomplete(PathBuf),
    /// A file without the checkpoint magic.
    #[error("{0} is not a torpor checkpoint file")]
    NotACheckpoint(PathBuf),
    /// A file is damaged, truncated or extended.
    #[error("corrupt checkpoint file {file}: {what}")]
    Corrupt {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// Made by a format this build does not read.
    #[error(
        "checkpoint format {major}.{minor}: this torpor reads {FORMAT_MAJOR}.0 to \
         {FORMAT_MAJOR}.{FORMAT_MINOR}"
    )]
    Version {
        /// Its major.
        major: u16,
        /// Its minor.
        minor: u16,
    },
    /// Made for another guest memory layout.
    #[error("checkpoint made for memory layout {found:#010x}, this torpor has {ours:#010x}")]
    Layout {
        /// The checkpoint's.
        found: u32,
        /// This build's.
        ours: u32,
    },
    /// A file the manifest lists is not there.
    #[error("checkpoint file {0} is missing")]
    Missing(PathBuf),
    /// The manifest names a file outside the directory or with an odd name.
    #[error("the manifest names a file {0:?}: not a plain file name")]
    BadName(String),
    /// The destination exists.
    #[error("{0} already exists: a checkpoint is written into a new directory")]
    Exists(PathBuf),
    /// A file could not be opened (a symlink is refused).
    #[error("cannot open {path}: {source}")]
    Open {
        /// The path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Any other I/O error.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A page file failed its checks.
    #[error("checkpoint page file {file}: {source}")]
    PageFile {
        /// The file.
        file: PathBuf,
        /// Cause.
        source: PageFileError,
    },
}

impl SnapshotError {
    fn io(op: &'static str, path: &Path, source: std::io::Error) -> Self {
        SnapshotError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Opens `path` for reading without following a symlink at its last component.
fn open_nofollow(path: &Path) -> Result<File, SnapshotError> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SnapshotError::Missing(path.to_path_buf()),
            _ => SnapshotError::Open {
                path: path.to_path_buf(),
                source: e,
            },
        })
}

/// A checksum of the guest memory layout a checkpoint's page tables and addresses assume:
/// a build with another layout cannot restore it.
pub fn layout_id() -> u32 {
    use platform::layout;
    let mut b = Vec::new();
    for v in [
        layout::DIRECT_MAP_BASE,
        layout::DIRECT_MAP_SIZE,
        layout::RESERVED_END.raw(),
        layout::USER_END.0,
        platform::SHARED_GPA_BASE.raw(),
        platform::SHARED_GPA_END.raw(),
        platform::PAGE_SIZE,
        platform::memory::MEMORY_GRANULE,
    ] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    crc32c::crc32c(&b)
}

/// The version pair written in a manifest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FormatVersion {
    /// Major.
    pub major: u16,
    /// Minor.
    pub minor: u16,
}

/// What a listed file is, and so how it is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// An envelope; its whole bytes' crc32c is listed.
    Envelope,
    /// A page file of swap format (a memory image).
    Memory,
    /// A page file of REAP format (a working set).
    Reap,
}

/// One file of the checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListedFile {
    /// Its name in the directory.
    pub name: String,
    /// What it is.
    pub kind: FileKind,
    /// Its exact length.
    pub len: u64,
    /// crc32c of its whole bytes (envelopes; page files check themselves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc: Option<u32>,
}

/// The checkpoint's table of contents, written last.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The format it is written in.
    pub format: FormatVersion,
    /// The torpor that wrote it.
    pub torpor_version: String,
    /// When, in µs since the epoch.
    pub created_us: u64,
    /// [`layout_id`] of the writer.
    pub layout_id: u32,
    /// Every file of the checkpoint.
    pub files: Vec<ListedFile>,
}

/// Whether `name` is a plain file name a manifest may list.
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// Writes a checkpoint directory: files one by one, then [`CheckpointWriter::finish`] lists
/// them in the MANIFEST. Dropped unfinished, it leaves no MANIFEST behind (an incomplete
/// checkpoint, which [`Checkpoint::open`] refuses).
#[derive(Debug)]
pub struct CheckpointWriter {
    dir: PathBuf,
    files: Vec<ListedFile>,
    /// Whether each file and the directory are synced to disk ([`CheckpointWriter::volatile`]).
    durable: bool,
}

impl CheckpointWriter {
    /// Creates `dir` (mode 0700); it must not exist.
    ///
    /// # Errors
    /// [`SnapshotError::Exists`]; [`SnapshotError::Io`].
    pub fn create(dir: &Path) -> Result<Self, SnapshotError> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => SnapshotError::Exists(dir.to_path_buf()),
                _ => SnapshotError::io("creating", dir, e),
            })?;
        Ok(CheckpointWriter {
            dir: dir.to_path_buf(),
            files: Vec::new(),
            durable: true,
        })
    }

    /// A checkpoint that need not outlive the host's uptime: nothing is synced to disk (the
    /// host writes it back in its own time). A dormant sandbox's: its dormant process ends
    /// with the host, and the sandbox with it, so a crash loses nothing a sync would have
    /// kept; each sync was a journal commit and a disk flush on the way back to sleep of
    /// every woken instance. Its files are complete before any reader opens them all the
    /// same (the MANIFEST is still written last and renamed).
    #[must_use]
    pub fn volatile(mut self) -> Self {
        self.durable = false;
        self
    }

    /// Where a file of the checkpoint named `name` goes (for page files written by their own
    /// writers; list them with [`CheckpointWriter::add_page_file`]).
    ///
    /// # Errors
    /// [`SnapshotError::BadName`].
    pub fn path(&self, name: &str) -> Result<PathBuf, SnapshotError> {
        if !plain_name(name) || name == MANIFEST {
            return Err(SnapshotError::BadName(name.to_string()));
        }
        Ok(self.dir.join(name))
    }

    /// Writes `payload` in an envelope of `kind` as `name`, synced to disk.
    ///
    /// # Errors
    /// [`SnapshotError::BadName`]; [`SnapshotError::Io`] (an existing file is refused).
    pub fn write_envelope(
        &mut self,
        name: &str,
        kind: Kind,
        payload: &[u8],
    ) -> Result<(), SnapshotError> {
        let path = self.path(name)?;
        let bytes = envelope::encode(kind, payload);
        write_new(&path, &bytes, self.durable)?;
        self.files.push(ListedFile {
            name: name.to_string(),
            kind: FileKind::Envelope,
            len: bytes.len() as u64,
            crc: Some(crc32c::crc32c(&bytes)),
        });
        Ok(())
    }

    /// Lists the finished page file `name` (written at [`CheckpointWriter::path`]), after
    /// syncing it to disk (unless [`CheckpointWriter::volatile`]).
    ///
    /// # Errors
    /// [`SnapshotError::BadName`], [`SnapshotError::Missing`], [`SnapshotError::Io`].
    pub fn add_page_file(&mut self, name: &str, kind: FileKind) -> Result<(), SnapshotError> {
        let path = self.path(name)?;
        let f = open_nofollow(&path)?;
        if self.durable {
            f.sync_data()
                .map_err(|e| SnapshotError::io("syncing", &path, e))?;
        }
        let len = f
            .metadata()
            .map_err(|e| SnapshotError::io("reading the length of", &path, e))?
            .len();
        self.files.push(ListedFile {
            name: name.to_string(),
            kind,
            len,
            crc: None,
        });
        Ok(())
    }

    /// Writes the MANIFEST (through `MANIFEST.tmp`, renamed, the directory synced unless
    /// [`CheckpointWriter::volatile`]): from now on the checkpoint is complete.
    ///
    /// # Errors
    /// [`SnapshotError::Io`].
    pub fn finish(self) -> Result<Manifest, SnapshotError> {
        let manifest = Manifest {
            format: FormatVersion {
                major: FORMAT_MAJOR,
                minor: FORMAT_MINOR,
            },
            torpor_version: env!("CARGO_PKG_VERSION").to_string(),
            created_us: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64),
            layout_id: layout_id(),
            files: self.files,
        };
        let json = serde_json::to_vec_pretty(&manifest).map_err(|e| {
            SnapshotError::io(
                "encoding the manifest of",
                &self.dir,
                std::io::Error::other(e),
            )
        })?;
        let tmp = self.dir.join("MANIFEST.tmp");
        write_new(&tmp, &envelope::encode(Kind::Manifest, &json), self.durable)?;
        let done = self.dir.join(MANIFEST);
        std::fs::rename(&tmp, &done).map_err(|e| SnapshotError::io("renaming", &tmp, e))?;
        if self.durable {
            File::open(&self.dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| SnapshotError::io("syncing", &self.dir, e))?;
        }
        Ok(manifest)
    }
}

/// Creates `path` (0600, `O_EXCL | O_NOFOLLOW`), writes `bytes`, syncs if `durable`.
fn write_new(path: &Path, bytes: &[u8], durable: bool) -> Result<(), SnapshotError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| SnapshotError::io("creating", path, e))?;
    f.write_all(bytes)
        .and_then(|()| if durable { f.sync_data() } else { Ok(()) })
        .map_err(|e| SnapshotError::io("writing", path, e))
}

/// A checkpoint directory whose every file passed [`Checkpoint::open`]'s checks.
#[derive(Debug)]
pub struct Checkpoint {
    dir: PathBuf,
    manifest: Manifest,
}

impl Checkpoint {
    /// Opens and checks the checkpoint at `dir` (see the module doc); reads no page data.
    ///
    /// # Errors
    /// The first check that fails, as a [`SnapshotError`] naming the file.
    pub fn open(dir: &Path) -> Result<Self, SnapshotError> {
        let mpath = dir.join(MANIFEST);
        let payload = match envelope::read(&mpath, Kind::Manifest) {
            Err(SnapshotError::Missing(_)) => {
                return Err(SnapshotError::Incomplete(dir.to_path_buf()))
            }
            other => other?,
        };
        let manifest: Manifest =
            serde_json::from_slice(&payload).map_err(|e| SnapshotError::Corrupt {
                file: mpath.clone(),
                what: format!("unreadable manifest: {e}"),
            })?;
        let v = manifest.format;
        if v.major != FORMAT_MAJOR || v.minor > FORMAT_MINOR {
            return Err(SnapshotError::Version {
                major: v.major,
                minor: v.minor,
            });
        }
        if manifest.layout_id != layout_id() {
            return Err(SnapshotError::Layout {
                found: manifest.layout_id,
                ours: layout_id(),
            });
        }
        for f in &manifest.files {
            if !plain_name(&f.name) || f.name == MANIFEST {
                return Err(SnapshotError::BadName(f.name.clone()));
            }
            let path = dir.join(&f.name);
            let file = open_nofollow(&path)?;
            let meta = file
                .metadata()
                .map_err(|e| SnapshotError::io("reading the length of", &path, e))?;
            let corrupt = |what: String| SnapshotError::Corrupt {
                file: path.clone(),
                what,
            };
            if !meta.is_file() {
                return Err(corrupt("not a regular file".into()));
            }
            if meta.len() != f.len {
                return Err(corrupt(format!(
                    "{} bytes, the manifest says {} (truncated or extended)",
                    meta.len(),
                    f.len
                )));
            }
            match f.kind {
                FileKind::Envelope => {
                    if f.len > envelope::MAX_PAYLOAD + envelope::HEADER_BYTES as u64 {
                        return Err(corrupt("larger than this build reads".into()));
                    }
                    let bytes =
                        std::fs::read(&path).map_err(|e| SnapshotError::io("reading", &path, e))?;
                    if Some(crc32c::crc32c(&bytes)) != f.crc {
                        return Err(corrupt("checksum mismatch with the manifest".into()));
                    }
                }
                FileKind::Memory | FileKind::Reap => {
                    let magic = if f.kind == FileKind::Memory {
                        SWAP_MAGIC
                    } else {
                        REAP_MAGIC
                    };
                    PageFileReader::open(&path, magic).map_err(|source| {
                        SnapshotError::PageFile {
                            file: path.clone(),
                            source,
                        }
                    })?;
                }
            }
        }
        Ok(Checkpoint {
            dir: dir.to_path_buf(),
            manifest,
        })
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The path of listed file `name`, or `None` if the manifest does not list it.
    pub fn path(&self, name: &str) -> Option<PathBuf> {
        self.manifest
            .files
            .iter()
            .any(|f| f.name == name)
            .then(|| self.dir.join(name))
    }

    /// The payload of the listed envelope `name` of `kind`, checked again as it is read.
    ///
    /// # Errors
    /// [`SnapshotError::Missing`] if not listed; as [`envelope::read`].
    pub fn envelope(&self, name: &str, kind: Kind) -> Result<Vec<u8>, SnapshotError> {
        let path = self
            .path(name)
            .ok_or_else(|| SnapshotError::Missing(self.dir.join(name)))?;
        envelope::read(&path, kind)
    }

    /// The blobs (`blobs.bin`).
    ///
    /// # Errors
    /// As [`Checkpoint::envelope`].
    pub fn blobs(&self) -> Result<Blobs, SnapshotError> {
        self.envelope(BLOBS, Kind::Blobs).map(Blobs::new)
    }
}

#[cfg(test)]
mod tests;
