//! One application thread on a vCPU, behind the platform's [`Context`].

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use platform::{
    layout, Commit, Context, Exit, FpuState, Gpa, Gva, Kicker, PlatformError, PtChanges,
    UserContext,
};

use crate::ptelog::SpaceShared;
use crate::stubs;
use crate::vcpu::{RawExit, Vcpu, VcpuError};

/// A thread's vCPU, registered with its space's page-table log. Dropped, its vCPU goes back
/// to the space for the next thread (KVM cannot destroy a vCPU).
pub struct KvmContext {
    vcpu: Option<Vcpu>,
    space: Arc<SpaceShared>,
    id: u64,
    /// Generation of the space's page-table log this context has applied.
    gen: Arc<AtomicU64>,
}

impl KvmContext {
    pub(crate) fn new(
        vcpu: Vcpu,
        space: Arc<SpaceShared>,
        id: u64,
        gen: Arc<AtomicU64>,
    ) -> KvmContext {
        KvmContext {
            vcpu: Some(vcpu),
            space,
            id,
            gen,
        }
    }

    /// The vCPU.
    pub fn vcpu(&self) -> &Vcpu {
        // Only `drop` takes the vCPU out.
        self.vcpu
            .as_ref()
            .unwrap_or_else(|| unreachable!("vCPU taken before drop"))
    }

    fn vcpu_mut(&mut self) -> &mut Vcpu {
        self.vcpu
            .as_mut()
            .unwrap_or_else(|| unreachable!("vCPU taken before drop"))
    }

    /// Checks the #UD frame a ring-0 syscall entry pushed on the user stack (see
    /// [`RawExit::SyscallOnUserStack`]) and restores the user stack pointer above it.
    fn complete_ring0_syscall(&mut self, frame: Gva) -> Result<Exit, PlatformError> {
        let stub = layout::direct_map(stubs::syscall_entry()).raw();
        let vcpu = self.vcpu();
        let word = |i: u64| read_user_u64(vcpu, Gva(frame.raw() + 8 * i));
        let ok = matches!((word(0), word(1)), (Some(rip), Some(cs)) if rip == stub && cs & 3 == 0);
        if !ok {
            return Err(PlatformError::new(VcpuError::Unexpected(format!(
                "exit from the #UD stub with a non-kernel stack at {frame}"
            ))));
        }
        self.vcpu_mut().user.regs.rsp = frame.raw() + 40;
        Ok(Exit::Syscall)
    }
}

/// Reads a user word through the vCPU's page tables (present entries only).
fn read_user_u64(vcpu: &Vcpu, va: Gva) -> Option<u64> {
    if !va.raw().is_multiple_of(8) {
        return None;
    }
    let gpa = translate(vcpu, va)?;
    vcpu.memory().read_u64(gpa).ok()
}

/// Translates `va` through the vCPU's page tables (large pages included).
fn translate(vcpu: &Vcpu, va: Gva) -> Option<Gpa> {
    let entry = platform::pagewalk::walk(vcpu.memory(), vcpu.cr3(), va.raw()).ok()??;
    Some(entry.translate(va.raw()))
}

impl Context for KvmContext {
    fn user(&self) -> &UserContext {
        &self.vcpu().user
    }

    fn user_mut(&mut self) -> &mut UserContext {
        &mut self.vcpu_mut().user
    }

    fn fpu(&self) -> Result<FpuState, PlatformError> {
        self.vcpu().get_xsave().map_err(PlatformError::new)
    }

    fn set_fpu(&mut self, state: &FpuState) -> Result<(), PlatformError> {
        self.vcpu_mut().set_xsave(state).map_err(PlatformError::new)
    }

    fn switch(&mut self) -> Result<Exit, PlatformError> {
        self.space.mark_entered();
        match self.vcpu_mut().run(&[]).map_err(PlatformError::new)? {
            RawExit::Exit(e) => Ok(e),
            RawExit::SyscallOnUserStack { frame } => self.complete_ring0_syscall(frame),
        }
    }

    fn commit(&mut self, changes: PtChanges, how: Commit) -> Result<(), PlatformError> {
        if !self.space.entered() {
            // Nothing of the guest has run: its first walks read these entries as written.
            return Ok(());
        }
        let sync = self
            .space
            .pte_sync(self.id, &self.gen, changes.runs, how == Commit::Restrict);
        if sync.is_empty() {
            return Ok(());
        }
        self.vcpu_mut().sync_ptes(&sync).map_err(PlatformError::new)
    }

    fn kicker(&self) -> Kicker {
        Arc::new(self.vcpu().kicker())
    }

    fn bind_to_current_thread(&self) {
        self.vcpu().bind_to_current_thread();
    }

    fn unbind_thread(&self) {
        self.vcpu().unbind_thread();
    }

    fn cpu_index(&self) -> usize {
        self.vcpu().index()
    }

    fn exits(&self) -> u64 {
        self.vcpu().exits()
    }
}

impl Drop for KvmContext {
    fn drop(&mut self) {
        if let Some(v) = self.vcpu.take() {
            self.space.retire(self.id, v);
        }
    }
}
