//! A guest process on KVM: its VM, the vCPUs of its threads, and the log that carries
//! page-table changes to every vCPU.
//!
//! On a shadow-paging hypervisor a host write to a present entry is unseen until a PTE-sync
//! stub rewrites it on a vCPU, and until then every vCPU of the VM may still use the old
//! translation. So each committed run is logged with a generation; a vCPU applies the runs it
//! has not seen before it next enters the guest, and a restricting commit kicks the others so
//! they do so at once. With one vCPU the log is bypassed.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use platform::{AddressSpace, Context, Gpa, GuestMemory, PlatformError, PteRun};

use crate::context::KvmContext;
use crate::kicker::VcpuKicker;
use crate::vcpu::Vcpu;
use crate::vm::{Vm, VmError};

/// One guest process's VM.
pub struct KvmSpace {
    vm: Vm,
    next_index: AtomicUsize,
    shared: Arc<SpaceShared>,
}

/// What the space's contexts share with it.
pub(crate) struct SpaceShared {
    log: Mutex<PteLog>,
    contexts: Mutex<Vec<Registered>>,
    /// vCPUs whose threads ended, kept for the next threads (KVM cannot destroy a vCPU: a
    /// process creating threads all its life would run out of indexes).
    spare: Mutex<Vec<Vcpu>>,
    next_id: AtomicU64,
}

/// A live context as the log sees it.
struct Registered {
    id: u64,
    /// Generation of the log this context has applied.
    gen: Arc<AtomicU64>,
    kicker: VcpuKicker,
}

#[derive(Default)]
struct PteLog {
    gen: u64,
    entries: Vec<(u64, PteRun)>,
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
            shared: Arc::new(SpaceShared {
                log: Mutex::new(PteLog::default()),
                contexts: Mutex::new(Vec::new()),
                spare: Mutex::new(Vec::new()),
                next_id: AtomicU64::new(0),
            }),
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
        let spare = lock(&self.shared.spare).pop();
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
        Ok(self.shared.clone().register(vcpu))
    }
}

impl SpaceShared {
    /// Registers `vcpu` as a live context, caught up with the log.
    fn register(self: Arc<Self>, vcpu: Vcpu) -> KvmContext {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let gen = Arc::new(AtomicU64::new(lock(&self.log).gen));
        lock(&self.contexts).push(Registered {
            id,
            gen: gen.clone(),
            kicker: vcpu.kicker(),
        });
        KvmContext::new(vcpu, self, id, gen)
    }

    /// A context ended: its vCPU waits for the next thread.
    pub(crate) fn retire(&self, id: u64, vcpu: Vcpu) {
        lock(&self.contexts).retain(|c| c.id != id);
        lock(&self.spare).push(vcpu);
    }

    /// Publishes `runs` (entries the context `me` changed) and returns every run `me` must
    /// apply before entering the guest (its own included). With one context, the log is
    /// bypassed. `kick_others`: the others are kicked to apply them at once.
    pub(crate) fn pte_sync(
        &self,
        me: u64,
        my_gen: &AtomicU64,
        runs: Vec<PteRun>,
        kick_others: bool,
    ) -> Vec<PteRun> {
        let contexts = lock(&self.contexts);
        if contexts.len() <= 1 {
            return runs;
        }
        let mut log = lock(&self.log);
        let published = !runs.is_empty();
        for r in runs {
            log.gen += 1;
            let g = log.gen;
            log.entries.push((g, r));
        }
        let from = my_gen.load(Ordering::Relaxed);
        let out: Vec<PteRun> = log
            .entries
            .iter()
            .filter(|(g, _)| *g > from)
            .map(|(_, r)| *r)
            .collect();
        my_gen.store(log.gen, Ordering::Relaxed);
        // Entries every context has applied are dropped.
        let oldest = contexts
            .iter()
            .map(|c| c.gen.load(Ordering::Relaxed))
            .min()
            .unwrap_or(log.gen);
        log.entries.retain(|(g, _)| *g > oldest);
        drop(log);
        if published && kick_others {
            for c in contexts.iter().filter(|c| c.id != me) {
                c.kicker.kick();
            }
        }
        out
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock means a thread panicked mid-update: with panic = "abort" this cannot
    // happen; recover the guard rather than panic again.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
