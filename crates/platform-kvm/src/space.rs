//! A guest process on KVM: its VM and the vCPUs of its threads, which share the log that
//! carries page-table changes to every vCPU (`ptelog.rs`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use platform::{AddressSpace, Context, Gpa, GuestMemory, PlatformError};

use crate::context::KvmContext;
use crate::ptelog::SpaceShared;
use crate::vm::{Vm, VmError};

/// One guest process's VM.
pub struct KvmSpace {
    vm: Vm,
    next_index: AtomicUsize,
    shared: Arc<SpaceShared>,
}

impl KvmSpace {
    /// A VM over `mem`.
    ///
    /// # Errors
    /// [`VmError`] if KVM refuses the VM.
    pub fn new(mem: Arc<GuestMemory>) -> Result<KvmSpace, VmError> {
        Ok(KvmSpace {
            vm: Vm::new(mem)?,
            next_index: AtomicUsize::new(0),
            shared: Arc::new(SpaceShared::default()),
        })
    }

    /// The VM.
    pub fn vm(&self) -> &Vm {
        &self.vm
    }

    /// A context on a new or spare vCPU.
    ///
    /// # Errors
    /// [`VmError`] if KVM refuses a new vCPU or the reset of a spare one.
    pub fn new_kvm_context(&self, root: Gpa) -> Result<KvmContext, VmError> {
        let spare = self.shared.take_spare();
        let vcpu = match spare {
            Some(mut v) => {
                v.reset_for_new_thread(root)?;
                v
            }
            // Indexes are never reused: a spare vCPU keeps its own.
            None => self
                .vm
                .create_vcpu(self.next_index.fetch_add(1, Ordering::Relaxed), root)?,
        };
        let (id, gen) = self.shared.register(&vcpu);
        Ok(KvmContext::new(vcpu, self.shared.clone(), id, gen))
    }
}

impl AddressSpace for KvmSpace {
    fn memory(&self) -> &Arc<GuestMemory> {
        self.vm.memory()
    }

    fn new_context(&self, root: Gpa) -> Result<Box<dyn Context>, PlatformError> {
        Ok(Box::new(
            self.new_kvm_context(root).map_err(PlatformError::new)?,
        ))
    }
}
