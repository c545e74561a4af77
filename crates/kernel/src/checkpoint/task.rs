//! A thread in a checkpoint: registers, FPU state, signal state and what the task owns.
//! Saved on the task's own host thread (only it may touch its vCPU), at its park point.

use std::sync::Arc;

use super::blobs::{BlobWriter, Blobs};
use super::state::{RegsState, TaskState};
use super::CheckpointError;
use crate::task::{AltStack, Credentials, SigInfo, SignalState, Task};

/// Size of a `siginfo_t`.
const SIGINFO: usize = 128;

/// A parked thread's state, taken on its own host thread, before its bulk bytes go to the
/// checkpoint's blobs ([`Captured::into_state`]).
#[derive(Debug)]
pub struct Captured {
    state: TaskState,
    xsave: Vec<u8>,
    pending: Vec<u8>,
    /// The process's signal dispositions as this thread sees them (shared by its threads).
    actions: Vec<[u64; 4]>,
}

impl Captured {
    /// The thread's id.
    pub fn tid(&self) -> i32 {
        self.state.tid
    }

    /// Its process's signal dispositions, `[handler, flags, restorer, mask]` by signal - 1.
    pub fn actions(&self) -> &[[u64; 4]] {
        &self.actions
    }

    /// The thread's state, its XSAVE area and pending signals put into `blobs`.
    pub fn into_state(self, blobs: &mut BlobWriter) -> TaskState {
        let mut state = self.state;
        state.xsave = blobs.add(&self.xsave);
        state.pending = blobs.add(&self.pending);
        state
    }
}

/// Takes `task`'s state (parked; on its own host thread, the only one that may read its
/// vCPU).
///
/// # Errors
/// [`CheckpointError::Host`] if KVM does not give the FPU state.
pub fn capture(task: &Task) -> Result<Captured, CheckpointError> {
    let r = &task.ctx.user().regs;
    let regs = RegsState {
        rax: r.rax,
        rbx: r.rbx,
        rcx: r.rcx,
        rdx: r.rdx,
        rsi: r.rsi,
        rdi: r.rdi,
        rsp: r.rsp,
        rbp: r.rbp,
        r8: r.r8,
        r9: r.r9,
        r10: r.r10,
        r11: r.r11,
        r12: r.r12,
        r13: r.r13,
        r14: r.r14,
        r15: r.r15,
        rip: r.rip,
        rflags: r.rflags,
        fs_base: task.ctx.user().fs_base,
        gs_base: task.ctx.user().gs_base,
    };
    let xsave = task
        .ctx
        .fpu()
        .map_err(|e| CheckpointError::Host(format!("thread {}: XSAVE: {e}", task.tid)))?;
    let mut pending = Vec::with_capacity(task.signals.pending().len() * SIGINFO);
    for p in task.signals.pending() {
        pending.extend_from_slice(&p.0);
    }
    let alt = task.signals.altstack;
    let none = super::blobs::BlobRef {
        off: 0,
        len: 0,
        crc: 0,
    };
    let state = TaskState {
        tid: task.tid,
        regs,
        xsave: none,
        sigmask: task.signals.mask,
        pending: none,
        altstack: (alt.sp, alt.size, alt.flags),
        saved_mask: task.signals.saved_mask,
        interrupted_syscall: task.signals.interrupted_syscall,
        in_syscall: task.in_syscall,
        cwd: task.cwd(),
        umask: task.umask(),
        uid: task.creds.uid,
        gid: task.creds.gid,
        groups: task.creds.groups.clone(),
        creds: Some((*task.creds).clone()),
        comm: task.comm.to_vec(),
        clear_child_tid: task.clear_child_tid,
    };
    let actions = (1..=crate::task::NSIG as i32)
        .map(|s| {
            let a = task.signals.action(s);
            [a.handler, a.flags, a.restorer, a.mask]
        })
        .collect();
    Ok(Captured {
        state,
        xsave: xsave.to_vec(),
        pending,
        actions,
    })
}

/// Sets a restored task's registers, FPU and signal state from `state` (its vCPU, signal
/// dispositions and the rest of the task are built by the caller).
///
/// # Errors
/// [`CheckpointError::Restore`] for a malformed state or an FPU state KVM refuses.
pub fn import(task: &mut Task, state: &TaskState, blobs: &Blobs) -> Result<(), CheckpointError> {
    let bad = |what: String| CheckpointError::Restore(format!("thread {}: {what}", state.tid));
    let s = &state.regs;
    let r = &mut task.ctx.user_mut().regs;
    r.rax = s.rax;
    r.rbx = s.rbx;
    r.rcx = s.rcx;
    r.rdx = s.rdx;
    r.rsi = s.rsi;
    r.rdi = s.rdi;
    r.rsp = s.rsp;
    r.rbp = s.rbp;
    r.r8 = s.r8;
    r.r9 = s.r9;
    r.r10 = s.r10;
    r.r11 = s.r11;
    r.r12 = s.r12;
    r.r13 = s.r13;
    r.r14 = s.r14;
    r.r15 = s.r15;
    r.rip = s.rip;
    r.rflags = s.rflags;
    task.ctx.user_mut().fs_base = s.fs_base;
    task.ctx.user_mut().gs_base = s.gs_base;
    let xsave = blobs
        .get(state.xsave)
        .map_err(|e| bad(format!("XSAVE area: {e}")))?;
    let area: &[u8; platform::FPU_STATE_SIZE] = xsave
        .try_into()
        .map_err(|_| bad(format!("an XSAVE area of {} bytes", xsave.len())))?;
    task.ctx
        .set_fpu(&Box::new(*area))
        .map_err(|e| bad(format!("XSAVE area refused: {e}")))?;
    let pending = blobs
        .get(state.pending)
        .map_err(|e| bad(format!("pending signals: {e}")))?;
    if pending.len() % SIGINFO != 0 {
        return Err(bad("pending signals of a partial siginfo".into()));
    }
    let infos = pending
        .chunks_exact(SIGINFO)
        .map(|c| {
            let mut b = [0u8; SIGINFO];
            b.copy_from_slice(c);
            SigInfo(b)
        })
        .filter(|i| (1..=crate::task::NSIG as i32).contains(&i.signo()))
        .collect();
    let sig: &mut SignalState = &mut task.signals;
    sig.set_pending(infos);
    sig.mask = state.sigmask;
    sig.altstack = AltStack {
        sp: state.altstack.0,
        size: state.altstack.1,
        flags: state.altstack.2,
    };
    sig.saved_mask = state.saved_mask;
    sig.interrupted_syscall = state.interrupted_syscall;
    task.in_syscall = state.in_syscall;
    task.fs.set_cwd(state.cwd.clone());
    task.fs.set_umask(state.umask);
    task.creds = Arc::new(match &state.creds {
        Some(c) => {
            let mut c = c.clone();
            let all = crate::creds::ALL_CAPS;
            for set in [
                &mut c.caps.effective,
                &mut c.caps.permitted,
                &mut c.caps.inheritable,
                &mut c.caps.bounding,
                &mut c.caps.ambient,
            ] {
                *set &= all;
            }
            c
        }
        None => Credentials::new(state.uid, state.gid, state.groups.clone()),
    });
    let mut comm = [0u8; 16];
    let n = state.comm.len().min(15);
    comm[..n].copy_from_slice(&state.comm[..n]);
    task.comm = comm;
    task.clear_child_tid = state.clear_child_tid;
    Ok(())
}
