//! A thread in a checkpoint: registers, FPU state, signal state and what the task owns.
//! Saved on the task's own host thread (only it may touch its vCPU), at its park point.

use std::sync::Arc;

use super::blobs::{BlobWriter, Blobs};
use super::state::{RegsState, TaskState};
use super::CheckpointError;
use crate::task::captured::{Captured, SIGINFO_SIZE};
use crate::task::{AltStack, Credentials, SigInfo, SignalState, Task};

/// A parked thread's state (taken by [`Task::capture`] on its own host thread) as the
/// checkpoint stores it: its bulk bytes (XSAVE area, pending signals) put into `blobs`.
pub fn into_state(c: Captured, blobs: &mut BlobWriter) -> TaskState {
    let r = &c.user.regs;
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
        fs_base: c.user.fs_base,
        gs_base: c.user.gs_base,
    };
    TaskState {
        tid: c.tid,
        regs,
        xsave: blobs.add(&c.xsave),
        sigmask: c.sigmask,
        pending: blobs.add(&c.pending),
        altstack: c.altstack,
        saved_mask: c.saved_mask,
        interrupted_syscall: c.interrupted_syscall,
        in_syscall: c.in_syscall,
        cwd: c.cwd,
        umask: c.umask,
        uid: c.creds.uid,
        gid: c.creds.gid,
        groups: c.creds.groups.clone(),
        creds: Some(c.creds),
        comm: c.comm,
        clear_child_tid: c.clear_child_tid,
    }
}

/// Takes `task`'s state (parked; on its own host thread, the only one that may read its
/// vCPU).
///
/// # Errors
/// [`CheckpointError::Host`] if the platform does not give the FPU state.
pub fn capture(task: &Task) -> Result<Captured, CheckpointError> {
    task.capture()
        .map_err(|e| CheckpointError::Host(format!("thread {}: XSAVE: {e}", task.tid)))
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
    if pending.len() % SIGINFO_SIZE != 0 {
        return Err(bad("pending signals of a partial siginfo".into()));
    }
    let infos = pending
        .chunks_exact(SIGINFO_SIZE)
        .map(|c| {
            let mut b = [0u8; SIGINFO_SIZE];
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
    task.control.set_comm(comm);
    task.clear_child_tid = state.clear_child_tid;
    Ok(())
}
