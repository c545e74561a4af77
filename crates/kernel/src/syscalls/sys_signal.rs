//! Signals: rt_sigaction, rt_sigprocmask, rt_sigreturn, sigaltstack, rt_sigpending,
//! rt_sigsuspend, pause, rt_sigtimedwait, kill, tkill, tgkill, rt_sigqueueinfo and
//! rt_tgsigqueueinfo, for a single-threaded process (a signal can only target the process
//! itself). Queueing and delivery are in `task::signal`.

use std::time::{Duration, Instant};

use abi::structs::KernelSigaction;
use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::task::kick_wait::wait_for_kick;
use crate::task::signal::{self, SigInfo};
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
    check_sig(sig)?;
    if a.u(3) != 8 {
        return Err(Errno::EINVAL);
    }
    let new = if a.u(1) != 0 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            return Err(Errno::EINVAL);
        }
        Some(t.read_val::<KernelSigaction>(a.gva(1))?)
    } else {
        None
    };
    if a.u(2) != 0 {
        t.write_val(a.gva(2), &t.signals.action(sig))?;
    }
    if let Some(act) = new {
        t.signals.set_action(sig, act);
        if sig == libc::SIGCHLD {
            const SA_NOCLDSTOP: u64 = 1;
            t.group.no_child_stop.store(
                act.flags & SA_NOCLDSTOP != 0,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        // A signal whose disposition becomes "ignore" is dropped even while pending.
        if t.signals.is_ignored(sig) {
            let timers: Vec<SigInfo> = t
                .signals
                .pending()
                .iter()
                .filter(|i| i.signo() == sig && i.code() == abi::timer::SI_TIMER)
                .copied()
                .collect();
            t.signals.discard(sig);
            for info in &timers {
                t.group.posix_timers.dropped(&t.group, info);
            }
        }
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
        let new = match a.int(0) {
            libc::SIG_BLOCK => old | set,
            libc::SIG_UNBLOCK => old & !set,
            libc::SIG_SETMASK => set,
            _ => return Err(Errno::EINVAL),
        };
        t.signals.set_mask(new);
    }
    if a.u(2) != 0 {
        t.write_u64(a.gva(2), old)?;
    }
    Ok(0)
}

/// Implements rt_sigreturn(2): the frame is at the stack pointer (the handler's `ret` popped
/// the restorer address). A bad frame raises SIGSEGV.
pub fn sys_rt_sigreturn(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Ok(t.sigreturn())
}

/// Implements sigaltstack(2).
pub fn sys_sigaltstack(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let sp = t.ctx.user().regs.rsp;
    let new = if a.u(0) != 0 {
        Some(t.read_val::<abi::structs::StackT>(a.gva(0))?)
    } else {
        None
    };
    let old = t.signals.altstack.to_user(sp);
    if let Some(s) = new {
        t.signals.altstack.set(sp, s.sp, s.flags, s.size)?;
    }
    if a.u(1) != 0 {
        t.write_val(a.gva(1), &old)?;
    }
    Ok(0)
}

/// Implements rt_sigpending(2): the pending signals that are blocked.
pub fn sys_rt_sigpending(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let size = a.u(1);
    if size > 8 {
        return Err(Errno::EINVAL);
    }
    let set = t.signals.pending_set() & t.signals.mask;
    t.copy_out(a.gva(0), &set.to_le_bytes()[..size as usize])?;
    Ok(0)
}

/// Waits until a signal can be delivered (EINTR), the task must park (EINTR: the run loop
/// parks and restarts the call), or `deadline` passes (Ok).
pub(super) fn wait_for_signal(
    t: &mut Task,
    deadline: Option<Instant>,
    waited: u64,
) -> Result<(), Errno> {
    let control = t.control.clone();
    let group = t.group.clone();
    let tid = t.tid;
    loop {
        t.absorb_external_signal();
        // The process is ending (exit_group from another thread, or the sandbox's init
        // ended), or another thread's execve ends this one: leave, so that the task loop
        // sees it.
        let exiting = t.exit.is_some() || group.must_leave(tid);
        if waited != 0 && t.signals.pending_set() & waited != 0 && !exiting {
            return Ok(());
        }
        if exiting || t.signals.has_deliverable() || control.park_requested() {
            return Err(Errno::EINTR);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(());
        }
        wait_for_kick(
            || control.signal_pending() || control.park_requested() || group.must_leave(tid),
            deadline,
        );
    }
}

/// Implements rt_sigsuspend(2): replaces the mask until a signal is delivered; the handler's
/// frame saves the caller's mask, which rt_sigreturn restores. Returns EINTR. (With no source
/// of signals but `torpor kill`, it may wait forever, as on Linux.)
pub fn sys_rt_sigsuspend(t: &mut Task, a: &SyscallArgs) -> SysResult {
    if a.u(1) != 8 {
        return Err(Errno::EINVAL);
    }
    let m = t.read_u64(a.gva(0))?;
    // Restarted after a park: the caller's mask is already saved.
    if t.signals.saved_mask.is_none() {
        t.signals.saved_mask = Some(t.signals.mask);
    }
    t.signals.set_mask(m);
    wait_for_signal(t, None, 0)?;
    Err(Errno::EINTR)
}

/// Implements pause(2).
pub fn sys_pause(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    wait_for_signal(t, None, 0)?;
    Err(Errno::EINTR)
}

/// Implements rt_sigtimedwait(2): takes a pending signal of the set (normally blocked), or
/// waits for one until the timeout (EAGAIN); EINTR if another signal is delivered first.
pub fn sys_rt_sigtimedwait(t: &mut Task, a: &SyscallArgs) -> SysResult {
    if a.u(3) != 8 {
        return Err(Errno::EINVAL);
    }
    let unblockable = (1u64 << (libc::SIGKILL - 1)) | (1u64 << (libc::SIGSTOP - 1));
    let set = t.read_u64(a.gva(0))? & !unblockable;
    let deadline = if a.u(2) != 0 {
        let mut ts = [0u8; 16];
        t.copy_in(a.gva(2), &mut ts)?;
        let sec = i64::from_le_bytes(ts[..8].try_into().unwrap_or([0; 8]));
        let nsec = i64::from_le_bytes(ts[8..].try_into().unwrap_or([0; 8]));
        if sec < 0 || !(0..1_000_000_000).contains(&nsec) {
            return Err(Errno::EINVAL);
        }
        let d = Duration::new(sec as u64, nsec as u32);
        Some(
            Instant::now()
                .checked_add(d)
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(1 << 40)),
        )
    } else {
        None
    };
    loop {
        t.absorb_external_signal();
        if let Some(info) = t.dequeue_signal(set) {
            if a.u(1) != 0 {
                t.copy_out(a.gva(1), &info.0)?;
            }
            return Ok(info.signo() as u64);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Errno::EAGAIN);
        }
        wait_for_signal(t, deadline, set)?;
    }
}

/// Queues `info` for the calling process.
fn send_self(t: &mut Task, info: SigInfo) -> SysResult {
    if t.queue_signal(info) {
        Ok(0)
    } else {
        Err(Errno::EAGAIN)
    }
}

/// Whether the caller may send `sig` to process `pid` (Linux's `check_kill_permission`: its
/// real or effective uid is the target's real or saved one, or it has CAP_KILL; SIGCONT within
/// its session always).
fn may_signal(t: &Task, pid: i32, g: &crate::task::ThreadGroup, sig: i32) -> bool {
    if t.creds.may_signal(&g.identity().creds) {
        return true;
    }
    let procs = &t.group.procs;
    sig == libc::SIGCONT
        && matches!(
            (procs.membership(t.pid), procs.membership(pid)),
            (Some(a), Some(b)) if a.sid == b.sid
        )
}

/// Implements kill(2): a process of the sandbox (pid > 0), the caller's process group (0),
/// process group -pid (pid < -1), or every process the caller may signal but the first one
/// and itself (-1). Signal 0 checks that the target exists.
/// The siginfo of kill(2)'s `sig` from `t`: SI_USER, its pid and real uid.
pub(super) fn from_me(t: &Task, sig: i32) -> SigInfo {
    SigInfo::user(sig, signal::SI_USER, t.pid, t.creds.uid)
}

/// Whether a siginfo the application wrote may be queued to another process: it must claim to
/// come from user space (si_code negative, not SI_TKILL), as Linux's rt_sigqueueinfo and
/// pidfd_send_signal require (else EPERM); a process may send itself any.
pub(super) fn may_queue_to_others(info: &SigInfo) -> bool {
    info.code() < 0 && info.code() != signal::SI_TKILL
}

/// Sends `info` (signal `sig`; 0 only checks) to process `pid` of the sandbox, not the
/// caller's: ESRCH if there is none, EPERM if the caller may not signal it (kill(2)'s rules).
pub(super) fn signal_process(t: &Task, pid: i32, sig: i32, info: SigInfo) -> SysResult {
    let Some((pid, g)) = t.group.procs.group_of_task(pid) else {
        // A child that exited and was not reaped yet (a zombie) takes the signal without
        // effect, as on Linux.
        return if t.group.procs.is_zombie(pid) {
            Ok(0)
        } else {
            Err(Errno::ESRCH)
        };
    };
    if !may_signal(t, pid, &g, sig) {
        return Err(Errno::EPERM);
    }
    if sig != 0 {
        g.post_siginfo(info);
    }
    Ok(0)
}

pub fn sys_kill(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (pid, sig) = (a.int(0), a.int(1));
    if !(0..=NSIG as i32).contains(&sig) {
        return Err(Errno::EINVAL);
    }
    if pid == i32::MIN {
        return Err(Errno::ESRCH);
    }
    let procs = t.group.procs.clone();
    let targets: Vec<(i32, std::sync::Arc<crate::task::ThreadGroup>)> = match pid {
        p if p > 0 => {
            // Any thread's id names its process.
            if p == t.pid || t.group.has_thread(p) {
                return self_signal(t, sig);
            }
            return signal_process(t, p, sig, from_me(t, sig));
        }
        -1 => {
            let all: Vec<_> = procs
                .live_groups()
                .into_iter()
                .filter(|(p, _)| *p != 1 && *p != t.pid)
                .collect();
            if all.is_empty() {
                // Linux: -1 with nobody else to signal succeeds only if the caller may
                // signal itself, and does not signal it.
                return Err(Errno::ESRCH);
            }
            // Those it may not signal are passed over; the call succeeds all the same.
            all.into_iter()
                .filter(|(p, g)| may_signal(t, *p, g, sig))
                .collect()
        }
        p => {
            let pgid = if p == 0 {
                procs.membership(t.pid).map_or(t.pid, |m| m.pgid)
            } else {
                -p
            };
            let members = procs.group_members(pgid);
            if members.is_empty() {
                return Err(Errno::ESRCH);
            }
            let mine = members.iter().any(|(p, _)| *p == t.pid);
            let others: Vec<_> = members
                .into_iter()
                .filter(|(p, g)| *p != t.pid && may_signal(t, *p, g, sig))
                .collect();
            if sig != 0 {
                for (_, g) in &others {
                    g.post_siginfo(from_me(t, sig));
                }
            }
            if mine {
                return self_signal(t, sig);
            }
            if others.is_empty() {
                // A group none of whose members the caller may signal.
                return Err(Errno::EPERM);
            }
            return Ok(0);
        }
    };
    if sig != 0 {
        for (_, g) in &targets {
            g.post_siginfo(from_me(t, sig));
        }
    }
    Ok(0)
}

/// The caller's own process receives `sig` from kill(2). The signal is the process's: a
/// thread that blocks it leaves it to the main thread when there are others (as Linux lets any
/// thread that does not block it, or waits for it in sigwait, take it), so that a thread's
/// `kill(getpid(), sig)` reaches a main thread waiting in sigwait.
fn self_signal(t: &mut Task, sig: i32) -> SysResult {
    if sig == 0 {
        return Ok(0);
    }
    let blocked =
        sig != libc::SIGKILL && sig != libc::SIGSTOP && t.signals.mask & (1u64 << (sig - 1)) != 0;
    let info = from_me(t, sig);
    if blocked
        && t.tid != t.pid
        && t.group.live() > 1
        && t.group.signal_thread_info(t.pid, sig, Some(info))
    {
        return Ok(0);
    }
    send_self(t, info)
}

/// Implements tkill(2).
pub fn sys_tkill(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (tid, sig) = (a.int(0), a.int(1));
    if tid <= 0 || !(0..=NSIG as i32).contains(&sig) {
        return Err(Errno::EINVAL);
    }
    if tid != t.tid {
        return signal_other_thread(t, None, tid, sig);
    }
    if sig == 0 {
        return Ok(0);
    }
    send_self(t, SigInfo::user(sig, signal::SI_TKILL, t.pid, t.creds.uid))
}

/// Sends `sig` to thread `tid` (of process `tgid`, if given) other than the caller: it is
/// queued on that thread at its next exit (Go's preemption signals its threads this way).
/// The kernel's first real-time signal (glibc keeps 32 and 33 for itself).
const SIGRTMIN_KERNEL: i32 = 32;

fn signal_other_thread(t: &Task, tgid: Option<i32>, tid: i32, sig: i32) -> SysResult {
    let procs = &t.group.procs;
    let groups = match tgid {
        Some(g) if g == t.pid => vec![(t.pid, t.group.clone())],
        Some(g) => vec![(g, procs.group_of(g).ok_or(Errno::ESRCH)?)],
        None => std::iter::once((t.pid, t.group.clone()))
            .chain(procs.live_groups())
            .collect(),
    };
    let info = SigInfo::user(sig, signal::SI_TKILL, t.pid, t.creds.uid);
    let Some((pid, g)) = groups.iter().find(|(_, g)| g.has_thread(tid)) else {
        return Err(Errno::ESRCH);
    };
    if *pid != t.pid && !may_signal(t, *pid, g, sig) {
        return Err(Errno::EPERM);
    }
    // A real-time signal is queued with its siginfo, within RLIMIT_SIGPENDING.
    if sig >= SIGRTMIN_KERNEL && g.queue_full(tid) {
        return Err(Errno::EAGAIN);
    }
    if g.signal_thread_info(tid, sig, Some(info)) {
        Ok(0)
    } else {
        Err(Errno::ESRCH)
    }
}

/// Implements tgkill(2) (raise() and abort() signal the caller; Go's preemption signals its
/// other threads with SIGURG).
pub fn sys_tgkill(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (tgid, tid, sig) = (a.int(0), a.int(1), a.int(2));
    if tgid <= 0 || tid <= 0 || !(0..=NSIG as i32).contains(&sig) {
        return Err(Errno::EINVAL);
    }
    if tgid != t.pid || tid != t.tid {
        return signal_other_thread(t, Some(tgid), tid, sig);
    }
    if sig == 0 {
        return Ok(0);
    }
    send_self(t, SigInfo::user(sig, signal::SI_TKILL, t.pid, t.creds.uid))
}

fn queue_user_info(t: &mut Task, sig: i32, uinfo: platform::Gva) -> SysResult {
    check_sig(sig)?;
    let mut info = SigInfo([0; 128]);
    t.copy_in(uinfo, &mut info.0)?;
    // The kernel sets si_signo; a process may send itself any si_code.
    info.0[0..4].copy_from_slice(&sig.to_le_bytes());
    send_self(t, info)
}

/// Implements rt_sigqueueinfo(2): a signal with the caller's siginfo, to itself or to
/// another process of the sandbox. To another process the siginfo must claim to come from
/// user space (si_code negative, not SI_TKILL), else EPERM, as Linux.
pub fn sys_rt_sigqueueinfo(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (pid, sig) = (a.int(0), a.int(1));
    if pid == t.tid {
        return queue_user_info(t, sig, a.gva(2));
    }
    if !(0..=NSIG as i32).contains(&sig) {
        return Err(Errno::EINVAL);
    }
    let mut info = SigInfo([0; 128]);
    t.copy_in(a.gva(2), &mut info.0)?;
    // Linux lets a siginfo claim to come from the kernel (or tgkill) only when a thread
    // sends it to itself (`pid` its own tid), even within its process.
    if !may_queue_to_others(&info) {
        return Err(Errno::EPERM);
    }
    info.0[0..4].copy_from_slice(&sig.to_le_bytes());
    if pid == t.pid || (pid > 0 && t.group.has_thread(pid)) {
        if sig != 0 {
            send_self(t, info)?;
        }
        return Ok(0);
    }
    signal_process(t, pid, sig, info)
}

/// Implements rt_tgsigqueueinfo(2): a signal with the caller's siginfo to thread `tid` of
/// process `tgid`; to another process the siginfo must claim to come from user space, as for
/// rt_sigqueueinfo.
pub fn sys_rt_tgsigqueueinfo(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (tgid, tid, sig) = (a.int(0), a.int(1), a.int(2));
    if tgid <= 0 || tid <= 0 {
        return Err(Errno::EINVAL);
    }
    if tgid == t.pid && tid == t.tid {
        return queue_user_info(t, sig, a.gva(3));
    }
    check_sig(sig)?;
    let mut info = SigInfo([0; 128]);
    t.copy_in(a.gva(3), &mut info.0)?;
    info.0[0..4].copy_from_slice(&sig.to_le_bytes());
    // Only to itself may a thread send a siginfo claiming to come from the kernel or tgkill
    // (Linux's do_rt_tgsigqueueinfo), even to another thread of its process.
    if !may_queue_to_others(&info) {
        return Err(Errno::EPERM);
    }
    let group = if tgid == t.pid {
        t.group.clone()
    } else {
        let g = t.group.procs.group_of(tgid).ok_or(Errno::ESRCH)?;
        if !may_signal(t, tgid, &g, sig) {
            return Err(Errno::EPERM);
        }
        g
    };
    if group.signal_thread_info(tid, sig, Some(info)) {
        Ok(0)
    } else {
        Err(Errno::ESRCH)
    }
}
