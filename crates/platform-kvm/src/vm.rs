//! The VM: opens `/dev/kvm`, registers guest memory as its one memslot, writes the descriptor
//! tables and stubs, and builds vCPUs.

use std::sync::Arc;

use kvm_bindings::{kvm_userspace_memory_region, CpuId, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Cap, Kvm, VmFd};

use crate::vcpu::{Vcpu, VcpuError};
use crate::{gdt, stubs};
use platform::layout;
use platform::memory::{GuestMemory, MemoryError};
use platform::Gpa;

/// Errors creating a VM.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// `/dev/kvm` could not be opened.
    #[error("cannot open /dev/kvm ({0}): KVM is required")]
    NoKvm(#[source] kvm_ioctls::Error),
    /// A capability torpor needs is missing.
    #[error("KVM lacks a required capability: {0}")]
    MissingCap(&'static str),
    /// A KVM ioctl failed while building the VM.
    #[error("KVM {op} failed: {source}")]
    Kvm {
        /// The operation.
        op: &'static str,
        /// Cause.
        source: kvm_ioctls::Error,
    },
    /// Guest memory is too small for the platform's reserved region.
    #[error("writing the platform tables: {0}")]
    Tables(#[from] MemoryError),
    /// A vCPU could not be created.
    #[error(transparent)]
    Vcpu(#[from] VcpuError),
}

/// Checks that `kvm` is a KVM of the API version and capabilities torpor needs (a
/// `/dev/kvm` that is something else, such as `/dev/null` bound over it, fails here).
///
/// # Errors
/// [`VmError::MissingCap`].
pub fn check_caps(kvm: &Kvm) -> Result<(), VmError> {
    if kvm.get_api_version() != 12 {
        return Err(VmError::MissingCap("KVM API version 12"));
    }
    if !kvm.check_extension(Cap::SyncRegs) {
        return Err(VmError::MissingCap("KVM_CAP_SYNC_REGS"));
    }
    if !kvm.check_extension(Cap::ImmediateExit) {
        return Err(VmError::MissingCap("KVM_CAP_IMMEDIATE_EXIT"));
    }
    Ok(())
}

/// A KVM virtual machine with one memory region.
pub struct Vm {
    fd: Arc<VmFd>,
    mem: Arc<GuestMemory>,
    cpuid: CpuId,
}

impl Vm {
    /// Creates the VM over `mem` and writes its tables and stubs.
    ///
    /// # Errors
    /// [`VmError::NoKvm`] without `/dev/kvm`; [`VmError::Kvm`] if KVM refuses the VM or the
    /// memslot; [`VmError::Tables`] if `mem` is smaller than the reserved region.
    pub fn new(mem: Arc<GuestMemory>) -> Result<Self, VmError> {
        let kvm = Kvm::new().map_err(VmError::NoKvm)?;
        check_caps(&kvm)?;
        // A kick's signal (another thread of the sandbox asking this one to look at a
        // signal or a park request) can interrupt KVM_CREATE_VM, which then fails with EINTR
        // before creating anything. The kick stays recorded (immediate exit, pending external
        // signals) and is served at the next KVM_RUN: retry the creation.
        let fd = loop {
            match kvm.create_vm() {
                Err(e) if e.errno() == libc::EINTR => continue,
                r => {
                    break r.map_err(|source| VmError::Kvm {
                        op: "CREATE_VM",
                        source,
                    })?
                }
            }
        };
        if mem.size() <= layout::RESERVED_END.raw() {
            return Err(VmError::Tables(MemoryError::OutOfRange {
                gpa: Gpa(0),
                len: layout::RESERVED_END.raw(),
            }));
        }
        // The own memory is memslot 0 over its first part, and more slots as the page
        // allocator reaches further (`platform::visible`: KVM's per-page metadata grows with
        // the pages in use, not with the memory limit).
        let region = kvm_userspace_memory_region {
            slot: 0,
            flags: 0,
            guest_phys_addr: 0,
            memory_size: mem.visible_range().initial(),
            userspace_addr: mem.host_base() as u64,
        };
        // SAFETY: the region is `mem`'s mapping, which stays alive as long as this `Vm` holds
        // its `Arc` (the VM fd, and with it the memslot, is closed when `Vm` drops).
        unsafe { fd.set_user_memory_region(region) }.map_err(|source| VmError::Kvm {
            op: "SET_USER_MEMORY_REGION",
            source,
        })?;
        let fd = Arc::new(fd);
        let slots = kvm.get_nr_memslots();
        mem.set_slot_limit(slots);
        let weak = Arc::downgrade(&fd);
        let base = mem.host_base() as u64;
        mem.visible_range()
            .attach_vm(
                Box::new(move |slot, start, len| {
                    let fd = weak
                        .upgrade()
                        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENODEV))?;
                    let region = kvm_userspace_memory_region {
                        slot,
                        flags: 0,
                        guest_phys_addr: start,
                        memory_size: len,
                        userspace_addr: base + start,
                    };
                    // SAFETY: a range of `mem`'s own mapping (checked against its size by
                    // `VisibleRange::expose`), alive as long as the VM (which holds `mem`).
                    unsafe { fd.set_user_memory_region(region) }
                        .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))
                }),
                u32::try_from(slots).unwrap_or(u32::MAX),
            )
            .map_err(|e| VmError::Kvm {
                op: "SET_USER_MEMORY_REGION",
                source: kvm_ioctls::Error::new(e.raw_os_error().unwrap_or(libc::EIO)),
            })?;
        // Shared windows become memslots 1, 2, … of this VM when attached to its memory. The
        // registrar holds the VM fd only weakly: it never keeps a dropped VM alive.
        let weak = Arc::downgrade(&fd);
        // A read-only window is a read-only memslot where KVM offers them; elsewhere its
        // host mapping (PROT_READ) is what keeps the guest from writing it.
        let readonly_slots = kvm.check_extension(Cap::ReadonlyMem);
        mem.set_registrar(Box::new(move |slot, w| {
            let fd = weak
                .upgrade()
                .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENODEV))?;
            let region = kvm_userspace_memory_region {
                slot,
                flags: if w.is_writable() || !readonly_slots {
                    0
                } else {
                    kvm_bindings::KVM_MEM_READONLY
                },
                guest_phys_addr: w.gpa().raw(),
                memory_size: w.size(),
                userspace_addr: w.host_base() as u64,
            };
            // SAFETY: the region is the window's mapping, which the guest memory keeps alive
            // (it holds the window's `Arc`) for as long as the VM can run.
            unsafe { fd.set_user_memory_region(region) }
                .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))
        }));
        gdt::write_tables(&mem)?;
        stubs::write_stubs(&mem)?;
        let cpuid = supported_cpuid(&kvm)?;
        Ok(Vm { fd, mem, cpuid })
    }

    /// Guest memory.
    pub fn memory(&self) -> &Arc<GuestMemory> {
        &self.mem
    }

    /// Creates vCPU `index` (< [`layout::MAX_VCPUS`]) running on page tables rooted at `cr3`.
    ///
    /// # Errors
    /// [`VmError::Vcpu`] if KVM refuses the vCPU or its set-up.
    pub fn create_vcpu(&self, index: usize, cr3: Gpa) -> Result<Vcpu, VmError> {
        Ok(Vcpu::new(
            &self.fd,
            self.mem.clone(),
            &self.cpuid,
            index,
            cr3,
        )?)
    }
}

/// What KVM supports of CPUID on this host, asked once per process: it does not change while
/// the process lives, and each ask runs the host's CPUID instruction for every leaf (about
/// 0.35 ms on this nested host), which every new VM (each `fork` and `execve` in the
/// sandbox) used to pay.
fn supported_cpuid(kvm: &Kvm) -> Result<CpuId, VmError> {
    static SUPPORTED: std::sync::OnceLock<CpuId> = std::sync::OnceLock::new();
    if let Some(c) = SUPPORTED.get() {
        return Ok(c.clone());
    }
    let c = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(|source| VmError::Kvm {
            op: "GET_SUPPORTED_CPUID",
            source,
        })?;
    Ok(SUPPORTED.get_or_init(|| c).clone())
}
