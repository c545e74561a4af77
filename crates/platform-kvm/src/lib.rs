//! The KVM platform: the VM, the descriptor tables, the ring-0 stubs, and vCPUs whose exits
//! are decoded into the kernel's neutral [`platform::Exit`]s.
//!
//! Guest ring 0 holds only stubs that exit to the host at once (on the machines torpor is
//! built on, ring-0 code is emulated and costs about 1 µs an instruction). The application runs
//! in ring 3; a `syscall` or an exception enters a stub, which executes one `out` whose port
//! names the event; the host handles it and resumes ring 3 by setting registers and segments.
//! Page-table updates are written by the PTE-sync stub (host writes to present entries are not
//! seen by a shadow MMU).
//!
//! What is specific to the PVM hypervisor of these machines stays here: the PTE-sync stub and
//! its per-address-space log ([`space`]), the `ud2` syscall frame pushed on the user stack
//! ([`context`]), the lost-event recovery in [`vcpu`]. On hardware VT-x/AMD-V the same code is
//! correct; there a PTE-sync stub run costs one exit of a microsecond or two.

pub mod bench;
pub mod context;
pub mod gdt;
pub mod kicker;
mod ptelog;
pub mod space;
pub mod stubs;
pub mod vcpu;
pub mod vm;

use std::sync::Arc;

use platform::{AddressSpace, CpuModel, GuestMemory, Platform, PlatformError};

pub use context::KvmContext;
pub use kicker::VcpuKicker;
pub use space::KvmSpace;
pub use vcpu::{RawExit, Vcpu, VcpuError, XSAVE_AREA_SIZE};
pub use vm::{Vm, VmError};

/// The KVM platform.
#[derive(Debug)]
pub struct KvmPlatform {
    cpu: CpuModel,
}

impl KvmPlatform {
    /// The platform; fails if `/dev/kvm` cannot be opened or is no KVM torpor can use.
    ///
    /// # Errors
    /// [`VmError::NoKvm`] without `/dev/kvm`; [`VmError::MissingCap`] for a KVM without the
    /// API version or capabilities torpor needs.
    pub fn new() -> Result<KvmPlatform, VmError> {
        let kvm = kvm_ioctls::Kvm::new().map_err(VmError::NoKvm)?;
        vm::check_caps(&kvm)?;
        Ok(KvmPlatform {
            cpu: CpuModel {
                // x87, SSE and AVX (set by every vCPU, see `Vcpu::new`).
                xcr0: 7,
                // Up to the end of the AVX upper halves.
                xsave_size: 832,
                user_cs: platform::layout::USER_CS,
                user_ss: platform::layout::USER_SS,
            },
        })
    }
}

impl Platform for KvmPlatform {
    fn name(&self) -> &'static str {
        "kvm"
    }

    fn cpu(&self) -> &CpuModel {
        &self.cpu
    }

    /// Private anonymous memory; a memfd mapped shared with `TORPOR_GUEST_MEMORY=memfd` (the
    /// trap platform's memory, tried under KVM: hibernation then punches holes in the memfd
    /// and serves faults through a userfaultfd on shared memory).
    fn new_memory(&self, size: u64) -> Result<Arc<GuestMemory>, PlatformError> {
        let memfd = std::env::var_os("TORPOR_GUEST_MEMORY").is_some_and(|v| v == "memfd");
        let mem = if memfd {
            GuestMemory::new_shared(size)
        } else {
            GuestMemory::new(size)
        };
        Ok(Arc::new(mem.map_err(PlatformError::new)?))
    }

    fn new_address_space(
        &self,
        mem: Arc<GuestMemory>,
    ) -> Result<Arc<dyn AddressSpace>, PlatformError> {
        Ok(Arc::new(KvmSpace::new(mem).map_err(PlatformError::new)?))
    }
}
