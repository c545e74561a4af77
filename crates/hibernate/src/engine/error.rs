//! What can go wrong inside the engine: a deflate, a checkpoint's writing, a restore's setting
//! up. Each error keeps its source, so that a caller can tell a full disk (the sandbox stays
//! hot, a later hibernate may succeed) from a damaged file or a host refusal.

use std::path::PathBuf;

use crate::pagefile::PageFileError;
use crate::pager::FilePageError;
use crate::pagestate::PageStateError;
use crate::snapshot::SnapshotError;

/// An error of the engine's own work (see the module doc).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A page file (swap, REAP, shared memory, a checkpoint's memory image) could not be
    /// created, written or read back.
    #[error("{}: {source}", path.display())]
    PageFile {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: PageFileError,
    },
    /// A page of an earlier swap or REAP file could not be read back (to be written again).
    #[error("reading a page back: {0}")]
    ReadBack(#[source] PageFileError),
    /// A clean page of a mapped file could not be read back, or the file changed.
    #[error(transparent)]
    FilePage(#[from] FilePageError),
    /// A host call failed.
    #[error("{op}: {source}")]
    Host {
        /// The call and what it was for.
        op: &'static str,
        /// The host's error.
        #[source]
        source: std::io::Error,
    },
    /// Guest memory could not be read or remapped.
    #[error("{op}: {source}")]
    Memory {
        /// What was done to it.
        op: &'static str,
        /// Why it failed.
        #[source]
        source: platform::MemoryError,
    },
    /// The platform could not take the application's mappings away.
    #[error("evicting the application's mappings: {0}")]
    Evict(#[source] platform::PlatformError),
    /// The page-state map refused a page.
    #[error(transparent)]
    PageState(#[from] PageStateError),
    /// The checkpoint's files could not be written or read.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// The kernel could not export or describe its state.
    #[error(transparent)]
    Kernel(#[from] kernel::checkpoint::CheckpointError),
    /// The swap quota would be exceeded.
    #[error(
        "the swap quota ({quota} bytes) could be exceeded: the sandbox holds {bound} bytes of \
         memory to write"
    )]
    QuotaExceeded {
        /// The quota (bytes).
        quota: u64,
        /// The most the deflate could write (bytes).
        bound: u64,
    },
    /// The application's threads did not stop in time.
    #[error("the application's threads did not stop within {0} s")]
    ThreadsDidNotStop(u64),
    /// A checkpoint's image does not fit the sandbox it is restored into.
    #[error("{0}")]
    BadImage(String),
    /// The engine's own records disagree with each other (a defect, reported, not hidden).
    #[error("{0}")]
    Inconsistent(String),
    /// The error happened while deflating (or imaging) process `pid`.
    #[error("process {pid}: {source}")]
    Process {
        /// The process.
        pid: i32,
        /// What failed.
        #[source]
        source: Box<EngineError>,
    },
    /// The error happened with the sandbox's shared memory.
    #[error("shared memory: {0}")]
    Shared(#[source] Box<EngineError>),
}

impl EngineError {
    /// A failure of the page file at `path`.
    pub fn page_file(path: impl Into<PathBuf>) -> impl FnOnce(PageFileError) -> EngineError {
        let path = path.into();
        move |source| EngineError::PageFile { path, source }
    }

    /// A failure of the host call `op`.
    pub fn host(op: &'static str) -> impl FnOnce(std::io::Error) -> EngineError {
        move |source| EngineError::Host { op, source }
    }

    /// A failure of guest memory in `op`.
    pub fn memory(op: &'static str) -> impl FnOnce(platform::MemoryError) -> EngineError {
        move |source| EngineError::Memory { op, source }
    }

    /// This error, as one of process `pid`'s.
    pub fn in_process(self, pid: i32) -> EngineError {
        EngineError::Process {
            pid,
            source: Box::new(self),
        }
    }

    /// Whether it comes down to a full disk (the sandbox stays hot; a later hibernate, once
    /// space is freed, may succeed).
    pub fn is_disk_full(&self) -> bool {
        match self {
            EngineError::PageFile { source, .. } | EngineError::ReadBack(source) => {
                source.is_disk_full()
            }
            EngineError::Process { source, .. } | EngineError::Shared(source) => {
                source.is_disk_full()
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_told_through_the_process_it_happened_in() {
        let full = EngineError::PageFile {
            path: PathBuf::from("/state/swap.2"),
            source: PageFileError::DiskFull {
                op: "writing a batch",
                source: std::io::Error::from_raw_os_error(libc::ENOSPC),
            },
        }
        .in_process(7);
        assert!(full.is_disk_full());
        assert!(full.to_string().starts_with("process 7: /state/swap.2: "));
        let other = EngineError::Inconsistent("REAP page without a REAP file".into());
        assert_eq!(
            other.to_string(),
            "REAP page without a REAP file",
            "no prefix of its own"
        );
        assert!(!other.in_process(7).is_disk_full());
        assert!(!EngineError::QuotaExceeded { quota: 1, bound: 2 }.is_disk_full());
    }
}
