//! A guest process's stub on the trap platform, shared by its space and its threads'
//! contexts: spawned when the first thread first runs (the first process's space is built
//! before the holder confines itself), with the shared windows attached to it; `walk.rs`
//! keeps its mappings in step with the page tables.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use platform::{Gpa, GuestMemory};

use crate::spawner::Spawner;
use crate::{StubProcess, TrapError, WindowSlot};

/// A guest process's stub, spawned at its first run, with the shared windows attached to it:
/// what the space's contexts share with it.
pub(crate) struct ProcessStub {
    spawner: Arc<Spawner>,
    pub(crate) mem: Arc<GuestMemory>,
    stub: Mutex<Option<Arc<StubProcess>>>,
    /// The shared windows attached to the stub, by guest-physical address.
    windows: Mutex<HashMap<u64, WindowSlot>>,
    next_index: AtomicUsize,
    /// Whether the stub's mappings were dropped for a hibernation (see `walk.rs`).
    evicted: AtomicBool,
    /// Pages to map as soon as the stub is spawned (a prefault asked before the first run:
    /// a clone's memory, all there already): the page-table root and the runs.
    ahead: Mutex<Option<(Gpa, Vec<platform::PageRun>)>>,
}

impl ProcessStub {
    /// A process whose stub `spawner` makes over `mem` when it first runs.
    pub(crate) fn new(spawner: Arc<Spawner>, mem: Arc<GuestMemory>) -> ProcessStub {
        ProcessStub {
            spawner,
            mem,
            stub: Mutex::new(None),
            windows: Mutex::new(HashMap::new()),
            next_index: AtomicUsize::new(0),
            evicted: AtomicBool::new(false),
            ahead: Mutex::new(None),
        }
    }

    /// The index of a new thread's context.
    pub(crate) fn next_index(&self) -> usize {
        self.next_index.fetch_add(1, Ordering::Relaxed)
    }

    /// Marks the process evicted (its stub's mappings dropped for a hibernation).
    pub(crate) fn set_evicted(&self) {
        self.evicted.store(true, Ordering::Relaxed);
    }

    /// The stub, spawned the first time.
    pub(crate) fn stub(&self) -> Result<Arc<StubProcess>, TrapError> {
        let mut g = self.stub.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = &*g {
            return Ok(s.clone());
        }
        let s = self.spawner.spawn(&self.mem)?;
        // Mapped before another thread of the process gets the stub (the lock is held).
        let ahead = self.ahead.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((root, runs)) = ahead {
            // What the tables say now (they may have changed since the request); a failure
            // only costs the faults the mapping would have saved.
            let _here = crate::pair::PinHere::new();
            let t = std::time::Instant::now();
            if let Err(e) = self.sync_pages(&s, root, &runs, None, true) {
                tracing::warn!("mapping pages ahead at the stub's start: {e}");
            }
            tracing::debug!(
                runs = runs.len(),
                took_us = t.elapsed().as_micros() as u64,
                "trap: pages mapped ahead"
            );
        }
        *g = Some(s.clone());
        Ok(s)
    }

    /// Keeps `runs` (of the tables rooted at `root`) to map when the stub is spawned.
    pub(crate) fn map_at_spawn(&self, root: Gpa, runs: &[platform::PageRun]) {
        *self.ahead.lock().unwrap_or_else(|e| e.into_inner()) = Some((root, runs.to_vec()));
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
    pub(crate) fn spawned(&self) -> Option<Arc<StubProcess>> {
        self.stub.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
