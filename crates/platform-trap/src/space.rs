//! A guest process on the trap platform: one stub process mapping pages of the guest memfd
//! (`process_stub.rs`), spawned when the process's first thread first runs.

use std::sync::Arc;

use platform::layout::USER_END;
use platform::{AddressSpace, Context, Gpa, GuestMemory, PageRun, PlatformError};

use crate::context::TrapContext;
use crate::process_stub::ProcessStub;
use crate::spawner::Spawner;

/// One guest process: its stub and its memory.
pub struct TrapSpace {
    inner: Arc<ProcessStub>,
}

impl TrapSpace {
    /// A space over `mem`, whose stub `spawner` makes.
    pub(crate) fn new(spawner: Arc<Spawner>, mem: Arc<GuestMemory>) -> TrapSpace {
        TrapSpace {
            inner: Arc::new(ProcessStub::new(spawner, mem)),
        }
    }
}

impl AddressSpace for TrapSpace {
    fn memory(&self) -> &Arc<GuestMemory> {
        &self.inner.mem
    }

    /// The stub process's CPU clock (`clock_getcpuclockid`'s encoding: any process may read
    /// another's), once the stub runs.
    fn cpu_clock(&self) -> Option<libc::clockid_t> {
        self.inner.spawned().map(|s| (!s.pid()) << 3 | 2)
    }

    fn new_context(&self, root: Gpa) -> Result<Box<dyn Context>, PlatformError> {
        let index = self.inner.next_index();
        Ok(Box::new(TrapContext::new(self.inner.clone(), root, index)))
    }

    /// The stub writes through its own mapping of the memfd.
    fn holder_sees_writes(&self) -> bool {
        false
    }

    /// Maps the pages ahead, as a commit would (one mapper command a run).
    fn prefault(&self, root: Gpa, pages: &[PageRun]) -> Result<(), PlatformError> {
        let Some(stub) = self.inner.spawned() else {
            // Before the first run: mapped as the stub starts.
            self.inner.map_at_spawn(root, pages);
            return Ok(());
        };
        // One mapper command a run: the mapper and this thread on one CPU for all of them.
        let _here = crate::pair::PinHere::new();
        self.inner.sync_pages(&stub, root, pages, None, true)
    }

    /// Unmaps every page of the application in the stub: afterwards only the holder's
    /// mapping of the memory (which the userfaultfd serves) reaches a page, and each first
    /// touch faults and is mapped again by a commit.
    fn evict_all(&self) -> Result<(), PlatformError> {
        self.inner.set_evicted();
        match self.inner.spawned() {
            Some(stub) => stub.unmap(0, USER_END.raw()).map_err(PlatformError::new),
            None => Ok(()),
        }
    }
}
