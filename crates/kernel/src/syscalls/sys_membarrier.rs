//! membarrier(2): memory barriers on every thread of the process, or of the sandbox.
//!
//! What makes the barrier real: each guest thread runs on a host thread. On the KVM platform
//! every guest thread is a vCPU thread of the runtime's own host process, so the host's
//! `MEMBARRIER_CMD_PRIVATE_EXPEDITED` issued by the runtime interrupts each CPU that runs one
//! of them; a vCPU in guest mode takes the interrupt as a VM exit (a full barrier on that
//! CPU) before it runs guest code again, which is what Linux's IPI does for a thread in user
//! mode. On the trap platform the guest threads run in stub processes of their own, which
//! the runtime's private barrier does not reach: there the host's `MEMBARRIER_CMD_GLOBAL`
//! (a grace period: every host CPU passes through a barrier) serves, slower but as strong.
//! The calling thread itself is stopped in the runtime during the call, and the fences
//! around the host call order its own accesses. As on Linux, a process with a single thread
//! needs no interrupt at all for its private barriers.

use std::sync::atomic::{fence, Ordering};
use std::sync::OnceLock;

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::task::Task;

const CMD_QUERY: i32 = 0;
const CMD_GLOBAL: i32 = 1 << 0;
const CMD_GLOBAL_EXPEDITED: i32 = 1 << 1;
const CMD_REGISTER_GLOBAL_EXPEDITED: i32 = 1 << 2;
const CMD_PRIVATE_EXPEDITED: i32 = 1 << 3;
const CMD_REGISTER_PRIVATE_EXPEDITED: i32 = 1 << 4;
const CMD_PRIVATE_EXPEDITED_SYNC_CORE: i32 = 1 << 5;
const CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE: i32 = 1 << 6;
const CMD_PRIVATE_EXPEDITED_RSEQ: i32 = 1 << 7;
const CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ: i32 = 1 << 8;
const CMD_GET_REGISTRATIONS: i32 = 1 << 9;
/// `MEMBARRIER_CMD_FLAG_CPU`: the RSEQ barrier on one CPU only.
const CMD_FLAG_CPU: u32 = 1;

/// Every command torpor implements (Linux's `MEMBARRIER_CMD_BITMASK`).
const IMPLEMENTED: i32 = CMD_GLOBAL
    | CMD_GLOBAL_EXPEDITED
    | CMD_REGISTER_GLOBAL_EXPEDITED
    | CMD_PRIVATE_EXPEDITED
    | CMD_REGISTER_PRIVATE_EXPEDITED
    | CMD_PRIVATE_EXPEDITED_SYNC_CORE
    | CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE
    | CMD_PRIVATE_EXPEDITED_RSEQ
    | CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ
    | CMD_GET_REGISTRATIONS;

/// The commands the guest is offered: those the host has (its barriers are what make
/// torpor's real) among those torpor implements. The host's nohz_full drops
/// `MEMBARRIER_CMD_GLOBAL` there, and so here.
fn supported() -> i32 {
    static MASK: OnceLock<i32> = OnceLock::new();
    *MASK.get_or_init(|| crate::task::host::membarrier(CMD_QUERY).unwrap_or(0) & IMPLEMENTED)
}

/// Whether the runtime registered for the host's private expedited barrier (once, at the
/// first one asked).
fn host_private_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| crate::task::host::membarrier(CMD_REGISTER_PRIVATE_EXPEDITED).is_ok())
}

/// A barrier on every CPU that runs a thread of the sandbox (see the module's doc).
fn barrier_everywhere(t: &Task) -> Result<(), Errno> {
    fence(Ordering::SeqCst);
    let in_stubs = !t.group.platform.processes().is_empty();
    let r = if !in_stubs && host_private_ready() {
        crate::task::host::membarrier(CMD_PRIVATE_EXPEDITED)
    } else {
        crate::task::host::membarrier(CMD_GLOBAL)
    };
    fence(Ordering::SeqCst);
    r.map(|_| ())
}

/// Implements membarrier(2). Registrations are the process's (an execve clears them, fork
/// keeps them, as Linux's `mm->membarrier_state`); the private barriers of a process that
/// did not register for them are EPERM. `MEMBARRIER_CMD_FLAG_CPU` limits nothing: the RSEQ
/// barrier covers every thread (torpor has no restartable sequences to restart: rseq(2) is
/// ENOSYS).
pub fn sys_membarrier(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (cmd, flags) = (a.int(0), a.u(1) as u32);
    match cmd {
        CMD_PRIVATE_EXPEDITED_RSEQ if flags != 0 && flags != CMD_FLAG_CPU => {
            return Err(Errno::EINVAL)
        }
        CMD_PRIVATE_EXPEDITED_RSEQ => {}
        _ if flags != 0 => return Err(Errno::EINVAL),
        _ => {}
    }
    if cmd == CMD_QUERY {
        return Ok(supported() as u64);
    }
    if cmd <= 0 || cmd.count_ones() != 1 || supported() & cmd == 0 {
        return Err(Errno::EINVAL);
    }
    let state = &t.group.membarrier;
    let registered = state.load(Ordering::SeqCst);
    match cmd {
        CMD_GLOBAL | CMD_GLOBAL_EXPEDITED => barrier_everywhere(t)?,
        CMD_REGISTER_GLOBAL_EXPEDITED
        | CMD_REGISTER_PRIVATE_EXPEDITED
        | CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE
        | CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ => {
            state.fetch_or(cmd as u32, Ordering::SeqCst);
        }
        CMD_PRIVATE_EXPEDITED | CMD_PRIVATE_EXPEDITED_SYNC_CORE | CMD_PRIVATE_EXPEDITED_RSEQ => {
            // Each barrier needs its own registration (the REGISTER command is the next bit).
            if registered & ((cmd as u32) << 1) == 0 {
                return Err(Errno::EPERM);
            }
            if t.group.live() > 1 {
                barrier_everywhere(t)?;
            } else {
                fence(Ordering::SeqCst);
            }
        }
        CMD_GET_REGISTRATIONS => {
            // A private registration of any kind counts as the plain one too, as on Linux
            // (its state bit MEMBARRIER_STATE_PRIVATE_EXPEDITED is set by each).
            let mut mask = registered;
            if registered
                & (CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE | CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ)
                    as u32
                != 0
            {
                mask |= CMD_REGISTER_PRIVATE_EXPEDITED as u32;
            }
            return Ok(u64::from(mask));
        }
        _ => return Err(Errno::EINVAL),
    }
    Ok(0)
}
