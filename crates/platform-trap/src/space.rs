//! A guest process on the trap platform: one stub process mapping pages of the guest memfd,
//! spawned when the process's first thread first runs.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use platform::layout::USER_END;
use platform::{AddressSpace, Context, Gpa, GuestMemory, PageRun, PlatformError};

use crate::context::TrapContext;
use crate::platform::Spawner;
use crate::{StubProcess, TrapError, WindowSlot};

/// One guest process: its stub and its memory.
pub struct TrapSpace {
    inner: Arc<SpaceInner>,
}

/// What the space's contexts share with it.
pub(crate) struct SpaceInner {
    spawner: Arc<Spawner>,
    pub(crate) mem: Arc<GuestMemory>,
    stub: Mutex<Option<Arc<StubProcess>>>,
    /// The shared windows attached to the stub, by guest-physical address.
    windows: Mutex<HashMap<u64, WindowSlot>>,
    next_index: AtomicUsize,
    /// Whether the stub's mappings were dropped for a hibernation (see `walk.rs`).
    evicted: AtomicBool,
}

impl SpaceInner {
    /// The stub, spawned the first time.
    pub(crate) fn stub(&self) -> Result<Arc<StubProcess>, TrapError> {
        let mut g = self.stub.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = &*g {
            return Ok(s.clone());
        }
        let s = self.spawner.spawn(&self.mem)?;
        *g = Some(s.clone());
        Ok(s)
    }

    /// The stub's slot for the shared window holding `gpa..gpa+len` (attached the first
    /// time), and the offset of `gpa` in the window's file.
    pub(crate) fn window_at(
        &self,
        stub: &StubProcess,
        gpa: Gpa,
        len: u64,
    ) -> Result<(WindowSlot, u64), TrapError> {
        let w = self
            .mem
            .windows()
            .into_iter()
            .find(|w| w.ptr(gpa, len).is_some())
            .ok_or(TrapError::Invalid(
                "a frame outside memory and every window",
            ))?;
        let (file, offset) = w.file();
        let in_window = gpa.raw() - w.gpa().raw();
        let mut slots = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let slot = match slots.get(&w.gpa().raw()) {
            Some(s) => *s,
            None => {
                let s = stub.attach_window(file.as_fd(), w.is_writable())?;
                slots.insert(w.gpa().raw(), s);
                s
            }
        };
        Ok((slot, offset + in_window))
    }

    /// Whether the space has been evicted: its memory may have pages whose data is in a
    /// swap file, not in host memory.
    pub(crate) fn evicted(&self) -> bool {
        self.evicted.load(Ordering::Relaxed)
    }

    /// The stub if it was spawned.
    fn spawned(&self) -> Option<Arc<StubProcess>> {
        self.stub.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl TrapSpace {
    /// A space over `mem`, whose stub `spawner` makes.
    pub(crate) fn new(spawner: Arc<Spawner>, mem: Arc<GuestMemory>) -> TrapSpace {
        TrapSpace {
            inner: Arc::new(SpaceInner {
                spawner,
                mem,
                stub: Mutex::new(None),
                windows: Mutex::new(HashMap::new()),
                next_index: AtomicUsize::new(0),
                evicted: AtomicBool::new(false),
            }),
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
        let stub = self.inner.stub.lock().unwrap_or_else(|e| e.into_inner());
        stub.as_ref().map(|s| (!s.pid()) << 3 | 2)
    }

    fn new_context(&self, root: Gpa) -> Result<Box<dyn Context>, PlatformError> {
        let index = self.inner.next_index.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(TrapContext::new(self.inner.clone(), root, index)))
    }

    /// The stub writes through its own mapping of the memfd.
    fn holder_sees_writes(&self) -> bool {
        false
    }

    /// Maps the pages ahead, as a commit would (one mapper command a run).
    fn prefault(&self, root: Gpa, pages: &[PageRun]) -> Result<(), PlatformError> {
        let Some(stub) = self.inner.spawned() else {
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
        self.inner.evicted.store(true, Ordering::Relaxed);
        match self.inner.spawned() {
            Some(stub) => stub.unmap(0, USER_END.raw()).map_err(PlatformError::new),
            None => Ok(()),
        }
    }
}
