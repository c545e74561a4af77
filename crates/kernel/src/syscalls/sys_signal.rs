//! rt_sigaction, rt_sigprocmask, tgkill. Dispositions are recorded; delivery on the guest
//! stack comes with the compatibility work.

use abi::structs::KernelSigaction;
use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::task::{Task, NSIG};

fn check_sig(sig: i32) -> Result<usize, Errno> {
    if (1..=NSIG as i32).contains(&sig) {
        Ok(sig as usize - 1)
    } else {
        Err(Errno::EINVAL)
    }
}

/// Implements rt_sigaction(2).
pub fn sys_rt_sigaction(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let sig = a.int(0);
    let idx = check_sig(sig)?;
    if a.u(3) != 8 {
        return Err(Errno::EINVAL);
    }
    if a.u(2) != 0 {
        let old = t.signals.actions[idx];
        let mut b = [0u8; 32];
        for (i, v) in [old.handler, old.flags, old.restorer, old.mask].iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        t.copy_out(a.gva(2), &b)?;
    }
    if a.u(1) != 0 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            return Err(Errno::EINVAL);
        }
        let mut b = [0u8; 32];
        t.copy_in(a.gva(1), &mut b)?;
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        t.signals.actions[idx] = KernelSigaction { handler: w(0), flags: w(1), restorer: w(2), mask: w(3) };
    }
    Ok(0)
}

/// Implements rt_sigprocmask(2).
pub fn sys_rt_sigprocmask(t: &mut Task, a: &SyscallArgs) -> SysResult {
    if a.u(3) != 8 {
        return Err(Errno::EINVAL);
    }
    let old = t.signals.mask;
    if a.u(1) != 0 {
        let set = t.read_u64(a.gva(1))?;
        let unblockable = (1u64 << (libc::SIGKILL - 1)) | (1u64 << (libc::SIGSTOP - 1));
        t.signals.mask = match a.int(0) {
            libc::SIG_BLOCK => old | set,
            libc::SIG_UNBLOCK => old & !set,
            libc::SIG_SETMASK => set,
            _ => return Err(Errno::EINVAL),
        } & !unblockable;
    }
    if a.u(2) != 0 {
        t.write_u64(a.gva(2), old)?;
    }
    Ok(0)
}

/// Implements tgkill(2) for signals a single-threaded process sends itself: a signal whose
/// disposition is the default and whose default action terminates ends the process (abort()
/// reaches here with SIGABRT).
pub fn sys_tgkill(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (tgid, tid, sig) = (a.int(0), a.int(1), a.int(2));
    if tgid != t.pid || tid != t.tid {
        return Err(Errno::ESRCH);
    }
    if sig == 0 {
        return Ok(0);
    }
    let idx = check_sig(sig)?;
    let ignored_by_default = matches!(sig, libc::SIGCHLD | libc::SIGURG | libc::SIGWINCH | libc::SIGCONT);
    let handler = t.signals.actions[idx].handler;
    if handler == 1 || (handler == 0 && ignored_by_default) {
        return Ok(0);
    }
    if t.signals.mask & (1 << idx) != 0 && sig != libc::SIGKILL {
        return Ok(0);
    }
    t.force_signal(sig);
    Ok(0)
}
