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

use super::{ProcessMemory, WakeMode};

impl ProcessMemory {
    pub(super) fn new(
        mem: Arc<GuestMemory>,
        prefix: String,
        mode: WakeMode,
    ) -> Result<Self, String> {
        let pages = PageStateMap::new_all_free(mem.size().div_ceil(PAGE_SIZE))
            .map_err(|e| e.to_string())?;
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
    ) -> Result<Arc<Uffd>, String> {
        // Blocking reads, close-on-exec, kernel-mode faults too (the runtime's own copies
        // into guest memory fault like the guest's touches).
        let mut uffd = Uffd::new().map_err(|e| format!("userfaultfd: {e}"))?;
        let start = layout::RESERVED_END.raw();
        // SAFETY: in bounds: guest memory is larger than the reserved chunk.
        let host = unsafe { mem.host_base().add(start as usize) };
        uffd.register(host.cast(), (mem.size() - start) as usize)
            .map_err(|e| format!("UFFDIO_REGISTER: {e}"))?;
        let uffd = Arc::new(uffd);
        pager::spawn(
            uffd.clone(),
            mem,
            pager.clone(),
            metrics.clone(),
            error_file,
        )
        .map_err(|e| format!("starting the uffd thread: {e}"))?;
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
