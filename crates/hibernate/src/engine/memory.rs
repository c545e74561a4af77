//! One process's memory between deflates: its page-state map, swap and REAP files, and the
//! userfaultfd pager that serves its faults.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use platform::{layout, GuestMemory, PAGE_SIZE};

use crate::metrics::HibernateMetrics as Metrics;
use crate::pager::{self, PagerState};
use crate::pagestate::PageStateMap;
use crate::reap::{WorkingSetRecorder, DEFAULT_RECORD_LIMIT};
use crate::swapstore::SwapStore;
use crate::uffd::Uffd;

use super::{EngineError, ProcessMemory, WakeMode};

impl ProcessMemory {
    pub(super) fn new(
        mem: Arc<GuestMemory>,
        prefix: String,
        mode: WakeMode,
    ) -> Result<Self, EngineError> {
        let pages = PageStateMap::new_all_free(mem.size().div_ceil(PAGE_SIZE))?;
        let page_count = pages.len();
        let pager = Arc::new(RwLock::new(PagerState {
            pages,
            swap: SwapStore::new(),
            reap: None,
            files: Vec::new(),
            recorder: WorkingSetRecorder::new(page_count, DEFAULT_RECORD_LIMIT),
            reap_wake: false,
        }));
        Ok(ProcessMemory {
            mem,
            prefix,
            pager,
            uffd: None,
            generation: 0,
            reap_set: Vec::new(),
            reap_files: Vec::new(),
            record_next: mode != WakeMode::Fault,
            reap_wake: false,
        })
    }

    /// Registers the process's guest memory (above the reserved chunk) with a userfaultfd
    /// and starts the thread that serves its faults from the page-state map. Before it, a
    /// dropped page would read as zero.
    pub(super) fn start_pager(
        mem: &Arc<GuestMemory>,
        pager: &Arc<RwLock<PagerState>>,
        metrics: &Arc<Metrics>,
        error_file: PathBuf,
    ) -> Result<Arc<Uffd>, EngineError> {
        // Blocking reads, close-on-exec, kernel-mode faults too (the runtime's own copies
        // into guest memory fault like the guest's touches).
        let mut uffd = Uffd::new().map_err(EngineError::host("userfaultfd"))?;
        let start = layout::RESERVED_END.raw();
        // SAFETY: in bounds: guest memory is larger than the reserved chunk.
        let host = unsafe { mem.host_base().add(start as usize) };
        uffd.register(host.cast(), (mem.size() - start) as usize)
            .map_err(EngineError::host("UFFDIO_REGISTER"))?;
        let uffd = Arc::new(uffd);
        pager::spawn(
            uffd.clone(),
            mem,
            pager.clone(),
            metrics.clone(),
            error_file,
        )
        .map_err(EngineError::host("starting the uffd thread"))?;
        Ok(uffd)
    }

    /// Removes the process's files (it exited, or replaced its memory with execve).
    pub(super) fn remove_files(&self) {
        let mut pager = self.pager.write().unwrap_or_else(|e| e.into_inner());
        pager.swap.remove_all();
        if let Some(old) = pager.reap.take() {
            let _ = old.remove();
        }
    }
}

/// Whether `name` is one of the page files the engine writes in a sandbox's state directory:
/// `swap.N`, `swap-PID.N`, `reap.N`, `reap-PID.N` (a process's layers and working set) and
/// `shm.N` (the shared memory's).
pub fn is_page_file(name: &str) -> bool {
    let Some((stem, generation)) = name.rsplit_once('.') else {
        return false;
    };
    if generation.is_empty() || !generation.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let kind = match stem.split_once('-') {
        Some((kind, pid)) if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) => kind,
        Some(_) => return false,
        None => stem,
    };
    matches!(kind, "swap" | "reap" | "shm")
}

/// The page files of the state directory `dir` ([`is_page_file`]: regular files only), sorted.
pub fn page_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<std::path::PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| e.file_name().to_str().is_some_and(is_page_file))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// Removes the page files of the state directory `dir` ([`page_files`]): what a dead
/// holder's sandbox no longer needs. Returns how many bytes they held.
pub fn remove_page_files(dir: &std::path::Path) -> u64 {
    let mut freed = 0;
    for path in page_files(dir) {
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if std::fs::remove_file(&path).is_ok() {
            freed += len;
        }
    }
    freed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_file_names() {
        for ok in ["swap.1", "swap-42.3", "reap.7", "reap-9.12", "shm.2"] {
            assert!(is_page_file(ok), "{ok}");
        }
        for no in [
            "swap",
            "swap.",
            "swap.x",
            "swap-.1",
            "swap-a.1",
            "output.log",
            "pid",
            "error",
            "reap-1",
        ] {
            assert!(!is_page_file(no), "{no}");
        }
    }

    #[test]
    fn only_page_files_are_removed() {
        let dir = std::env::temp_dir().join(format!("torpor-pagefiles-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["swap.1", "reap-5.2", "output.log", "error"] {
            std::fs::write(dir.join(f), b"12345").unwrap();
        }
        assert_eq!(remove_page_files(&dir), 10);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["error", "output.log"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
