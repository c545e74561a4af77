//! A guest process on the trap platform: one stub process mapping pages of the guest memfd.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use platform::layout::USER_END;
use platform::{AddressSpace, Context, Gpa, GuestMemory, PlatformError};

use crate::context::TrapContext;
use crate::StubProcess;

/// One guest process: its stub and its memory.
pub struct TrapSpace {
    stub: Arc<StubProcess>,
    mem: Arc<GuestMemory>,
    next_index: AtomicUsize,
}

impl TrapSpace {
    /// The space of `stub`, which maps pages of `mem`.
    pub fn new(stub: StubProcess, mem: Arc<GuestMemory>) -> TrapSpace {
        TrapSpace {
            stub: Arc::new(stub),
            mem,
            next_index: AtomicUsize::new(0),
        }
    }

    /// The stub process.
    pub fn stub(&self) -> &Arc<StubProcess> {
        &self.stub
    }
}

impl AddressSpace for TrapSpace {
    fn memory(&self) -> &Arc<GuestMemory> {
        &self.mem
    }

    fn new_context(&self, root: Gpa) -> Result<Box<dyn Context>, PlatformError> {
        let thread = self.stub.new_thread().map_err(PlatformError::new)?;
        let index = self.next_index.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(TrapContext::new(
            thread,
            self.stub.clone(),
            self.mem.clone(),
            root,
            index,
        )))
    }

    /// Unmaps every page of the application in the stub: afterwards only the holder's
    /// mapping of the memory (which the userfaultfd serves) reaches a page, and each first
    /// touch faults and is mapped again by a commit.
    fn evict_all(&self) -> Result<(), PlatformError> {
        self.stub
            .unmap(0, USER_END.raw())
            .map_err(PlatformError::new)
    }
}
