//! The log that carries page-table changes to every vCPU of a space, and the registry of its
//! live and spare vCPUs, shared by the space and its contexts.
//!
//! On a shadow-paging hypervisor a host write to a present entry is unseen until a PTE-sync
//! stub rewrites it on a vCPU, and until then every vCPU of the VM may still use the old
//! translation. So each committed run is logged with a generation; a vCPU applies the runs it
//! has not seen before it next enters the guest, and a restricting commit kicks the others so
//! they do so at once. With one vCPU the log is bypassed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use platform::PteRun;

use crate::kicker::VcpuKicker;
use crate::vcpu::Vcpu;

/// What the space's contexts share with it.
#[derive(Default)]
pub(crate) struct SpaceShared {
    log: Mutex<PteLog>,
    contexts: Mutex<Vec<Registered>>,
    /// vCPUs whose threads ended, kept for the next threads (KVM cannot destroy a vCPU: a
    /// process creating threads all its life would run out of indexes).
    spare: Mutex<Vec<Vcpu>>,
    next_id: AtomicU64,
    /// Whether a vCPU of this VM has entered the guest. Until one has, the hypervisor's
    /// shadow MMU holds no translation of it, so the entries the host writes (a new process's
    /// image, a restore's pages mapped ahead) need no sync: the guest's first walks read them.
    entered: AtomicBool,
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

impl SpaceShared {
    /// Records that a vCPU of the VM is about to enter the guest.
    pub(crate) fn mark_entered(&self) {
        if !self.entered.load(Ordering::Relaxed) {
            self.entered.store(true, Ordering::SeqCst);
        }
    }

    /// Whether a vCPU of the VM has entered the guest ([`Self::mark_entered`]).
    pub(crate) fn entered(&self) -> bool {
        self.entered.load(Ordering::SeqCst)
    }

    /// Registers `vcpu` as a live context, caught up with the log: its id and the log's
    /// generation it has applied.
    pub(crate) fn register(&self, vcpu: &Vcpu) -> (u64, Arc<AtomicU64>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let gen = Arc::new(AtomicU64::new(lock(&self.log).gen));
        lock(&self.contexts).push(Registered {
            id,
            gen: gen.clone(),
            kicker: vcpu.kicker(),
        });
        (id, gen)
    }

    /// A vCPU whose thread ended, for a new thread.
    pub(crate) fn take_spare(&self) -> Option<Vcpu> {
        lock(&self.spare).pop()
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock means a thread panicked mid-update: with panic = "abort" this cannot
    // happen; recover the guard rather than panic again.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
