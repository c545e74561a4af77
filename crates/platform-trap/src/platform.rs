//! The trap platform behind the kernel's [`platform::Platform`] interface: guest memory is a
//! memfd the holder maps shared ([`GuestMemory::new_shared`]), each guest process a stub
//! process ([`crate::space::TrapSpace`]), each thread a stub thread
//! ([`crate::context::TrapContext`]).
//!
//! Stubs are spawned from one long-lived thread of the holder (the spawner): a stub dies with
//! the thread that spawned it (`PR_SET_PDEATHSIG`), and the kernel asks for new address
//! spaces from task threads that end with their guest thread.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use platform::{AddressSpace, CpuModel, GuestMemory, Platform, PlatformError};

use crate::space::TrapSpace;
use crate::{StubProcess, TrapError};

/// One request to the spawner thread: the guest memfd, and where to send the stub.
type SpawnRequest = (OwnedFd, mpsc::Sender<Result<StubProcess, TrapError>>);

/// The trap platform.
pub struct TrapPlatform {
    cpu: CpuModel,
    spawner: Mutex<mpsc::Sender<SpawnRequest>>,
}

impl std::fmt::Debug for TrapPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrapPlatform")
            .field("cpu", &self.cpu)
            .finish()
    }
}

impl TrapPlatform {
    /// The platform: checks that this host can run it (FSGSBASE for user space, XSAVE) and
    /// starts the spawner thread.
    ///
    /// # Errors
    /// [`TrapError::Unsupported`] on a host without what the stubs need; [`TrapError::Host`]
    /// if the spawner thread cannot start.
    pub fn new() -> Result<TrapPlatform, TrapError> {
        if crate::sys::auxval(crate::sys::AT_HWCAP2) & crate::sys::HWCAP2_FSGSBASE == 0 {
            return Err(TrapError::Unsupported(
                "FSGSBASE is not enabled for user space",
            ));
        }
        crate::sys::xsave_size().ok_or(TrapError::Unsupported("no XSAVE"))?;
        platform::kick::install_kick_handler();
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
        Ok(TrapPlatform {
            cpu: CpuModel {
                xcr0: crate::sys::xcr0(),
                user_cs: 0x33,
                user_ss: 0x2b,
            },
            spawner: Mutex::new(tx),
        })
    }

    /// A stub over `memory`, spawned by the spawner thread.
    fn spawn(&self, memory: &GuestMemory) -> Result<StubProcess, TrapError> {
        let fd = memory
            .backing_fd()
            .ok_or(TrapError::Invalid("guest memory is not a memfd"))?
            .try_clone_to_owned()
            .map_err(|source| TrapError::Host {
                call: "dup of the guest memfd",
                source,
            })?;
        let (tx, rx) = mpsc::channel();
        self.spawner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send((fd, tx))
            .map_err(|_| TrapError::Protocol("the stub spawner thread is gone"))?;
        rx.recv()
            .map_err(|_| TrapError::Protocol("the stub spawner thread is gone"))?
    }
}

impl Platform for TrapPlatform {
    fn name(&self) -> &'static str {
        "trap"
    }

    fn cpu(&self) -> &CpuModel {
        &self.cpu
    }

    /// Not yet: a window is a file of its own, which the stub's mapper would have to receive
    /// (design §3.1).
    fn maps_windows(&self) -> bool {
        false
    }

    fn new_memory(&self, size: u64) -> Result<Arc<GuestMemory>, PlatformError> {
        Ok(Arc::new(
            GuestMemory::new_shared(size).map_err(PlatformError::new)?,
        ))
    }

    fn new_address_space(
        &self,
        mem: Arc<GuestMemory>,
    ) -> Result<Arc<dyn AddressSpace>, PlatformError> {
        let stub = self.spawn(&mem).map_err(PlatformError::new)?;
        Ok(Arc::new(TrapSpace::new(stub, mem)))
    }
}
