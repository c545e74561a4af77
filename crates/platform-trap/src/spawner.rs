//! Where a space's stub process comes from: in a holder, the stub factory
//! ([`start_factory`], started once the holder is inside its Landlock domain and before its
//! own seccomp filter); elsewhere (tests, an unconfined process), one long-lived thread of the
//! process (the spawner thread), since a stub dies with the thread that spawned it
//! (`PR_SET_PDEATHSIG`).

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};

use platform::GuestMemory;

use crate::{StubFactory, StubProcess, TrapError};

/// Whether this process opened the trap platform.
static OPENED: AtomicBool = AtomicBool::new(false);
/// The stub factory, once started.
static FACTORY: OnceLock<StubFactory> = OnceLock::new();

/// Starts the stub factory if this process opened the trap platform (else does nothing):
/// call it from the holder's main thread once the holder is inside its Landlock domain and
/// has dropped its capabilities, before it installs its seccomp filter. Stubs spawned later
/// come from it.
///
/// # Errors
/// [`TrapError`] if the factory cannot start.
pub fn start_factory() -> Result<(), TrapError> {
    if !OPENED.load(Ordering::SeqCst) || FACTORY.get().is_some() {
        return Ok(());
    }
    // No namespaces of its own: a holder inside its Landlock domain may not write the
    // factory's uid_map, and without capabilities it may not make the other namespaces.
    let f = StubFactory::start_with(crate::FactoryOptions {
        namespaces: false,
        ..crate::FactoryOptions::default()
    })?;
    let _ = FACTORY.set(f);
    Ok(())
}

/// Records that this process opened the trap platform ([`start_factory`] starts the factory
/// only then).
pub(crate) fn opened() {
    OPENED.store(true, Ordering::SeqCst);
}

/// The stub factory's process id, once it runs.
pub(crate) fn factory_pid() -> Option<u32> {
    FACTORY.get().map(|f| f.pid() as u32)
}

/// One request to the spawner thread: the guest memfd, and where to send the stub.
type SpawnRequest = (OwnedFd, mpsc::Sender<Result<StubProcess, TrapError>>);

/// Spawns stubs: through the factory if it runs, else from the spawner thread.
#[derive(Default)]
pub(crate) struct Spawner {
    /// The spawner thread's queue, once started (started at its first use: a holder must
    /// still be single-threaded after the platform is opened, to enter a mount namespace).
    thread: Mutex<Option<mpsc::Sender<SpawnRequest>>>,
    /// The stubs spawned, while they live.
    stubs: Mutex<Vec<std::sync::Weak<StubProcess>>>,
}

impl Spawner {
    /// A stub over `memory`, remembered while it lives.
    pub(crate) fn spawn(&self, memory: &GuestMemory) -> Result<Arc<StubProcess>, TrapError> {
        let stub = Arc::new(self.spawn_unlisted(memory)?);
        let mut stubs = self.stubs.lock().unwrap_or_else(|e| e.into_inner());
        stubs.retain(|w| w.strong_count() > 0);
        stubs.push(Arc::downgrade(&stub));
        Ok(stub)
    }

    /// The live stubs' process ids.
    pub(crate) fn pids(&self) -> Vec<u32> {
        let stubs = self.stubs.lock().unwrap_or_else(|e| e.into_inner());
        stubs
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .map(|s| s.pid() as u32)
            .collect()
    }

    fn spawn_unlisted(&self, memory: &GuestMemory) -> Result<StubProcess, TrapError> {
        let fd = memory
            .backing_fd()
            .ok_or(TrapError::Invalid("guest memory is not a memfd"))?;
        if let Some(f) = FACTORY.get() {
            return f.spawn(fd);
        }
        let fd = fd.try_clone_to_owned().map_err(|source| TrapError::Host {
            call: "dup of the guest memfd",
            source,
        })?;
        let (tx, rx) = mpsc::channel();
        self.queue()?
            .send((fd, tx))
            .map_err(|_| TrapError::Protocol("the stub spawner thread is gone"))?;
        rx.recv()
            .map_err(|_| TrapError::Protocol("the stub spawner thread is gone"))?
    }

    /// The spawner thread's queue, starting the thread the first time.
    fn queue(&self) -> Result<mpsc::Sender<SpawnRequest>, TrapError> {
        let mut g = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = &*g {
            return Ok(tx.clone());
        }
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("trap-spawner".into())
            .spawn(move || {
                for (memfd, reply) in rx {
                    let _ = reply.send(StubProcess::spawn(memfd.as_fd()));
                }
            })
            .map_err(|source| TrapError::Host {
                call: "starting the stub spawner thread",
                source,
            })?;
        *g = Some(tx.clone());
        Ok(tx)
    }
}
