//! Process and thread identity, exit, arch_prctl, set_tid_address, futex, robust lists.

use std::sync::Arc;

use abi::Errno;
use platform::Gva;

use super::{SysResult, SyscallArgs};
use crate::task::{ChildParts, ExitStatus, Task, WaitResult};

/// Implements getpid(2).
pub fn sys_getpid(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Ok(t.pid as u64)
}

/// Implements gettid(2).
pub fn sys_gettid(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Ok(t.tid as u64)
}

/// Implements getppid(2): the sandbox's first process has no parent inside it (0).
pub fn sys_getppid(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Ok(t.group.procs.parent_of(t.pid) as u64)
}

/// Implements exit(2): ends the calling thread; the last thread's exit ends the process.
pub fn sys_exit(t: &mut Task, a: &SyscallArgs) -> SysResult {
    t.thread_exit_only = t.group.live() > 1;
    t.exit = Some(ExitStatus::Exited(a.int(0) & 0xff));
    Ok(0)
}

/// Implements exit_group(2).
pub fn sys_exit_group(t: &mut Task, a: &SyscallArgs) -> SysResult {
    t.exit = Some(ExitStatus::Exited(a.int(0) & 0xff));
    Ok(0)
}

/// Implements sched_yield(2).
pub fn sys_sched_yield(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    std::thread::yield_now();
    Ok(0)
}

const ARCH_SET_GS: i32 = 0x1001;
const ARCH_SET_FS: i32 = 0x1002;
const ARCH_GET_FS: i32 = 0x1003;
const ARCH_GET_GS: i32 = 0x1004;

/// Implements arch_prctl(2).
pub fn sys_arch_prctl(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (code, addr) = (a.int(0), a.u(1));
    match code {
        ARCH_SET_FS | ARCH_SET_GS => {
            if addr >= platform::layout::USER_END.raw() {
                return Err(Errno::EPERM);
            }
            if code == ARCH_SET_FS {
                t.ctx.user_mut().fs_base = addr;
            } else {
                t.ctx.user_mut().gs_base = addr;
            }
            Ok(0)
        }
        ARCH_GET_FS => {
            t.write_u64(a.gva(1), t.ctx.user().fs_base)?;
            Ok(0)
        }
        ARCH_GET_GS => {
            t.write_u64(a.gva(1), t.ctx.user().gs_base)?;
            Ok(0)
        }
        _ => Err(Errno::EINVAL),
    }
}

/// Implements set_tid_address(2).
pub fn sys_set_tid_address(t: &mut Task, a: &SyscallArgs) -> SysResult {
    t.clear_child_tid = a.u(0);
    Ok(t.tid as u64)
}

/// `sizeof(struct robust_list_head)`: the list, the futex word's offset, the pending entry.
const ROBUST_HEAD_SIZE: u64 = 24;

/// Implements set_robust_list(2): the head is recorded; at the thread's exit the robust
/// mutexes it still holds are marked and a waiter of each woken ([`exit_robust_list`]).
pub fn sys_set_robust_list(t: &mut Task, a: &SyscallArgs) -> SysResult {
    if a.u(1) != ROBUST_HEAD_SIZE {
        return Err(Errno::EINVAL);
    }
    t.control.set_robust_list(a.u(0));
    Ok(0)
}

/// Implements get_robust_list(2): the head and its size, of the caller (pid 0) or of thread
/// `pid` of the sandbox, whose process the caller must be allowed to inspect (EPERM).
pub fn sys_get_robust_list(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (tid, head_at, len_at) = (a.int(0), a.gva(1), a.gva(2));
    let head = if tid == 0 || tid == t.tid {
        t.control.robust_list()
    } else {
        let (group, control) = t
            .group
            .procs
            .live_groups()
            .into_iter()
            .find_map(|(_, g)| g.member_control(tid).map(|c| (g, c)))
            .ok_or(Errno::ESRCH)?;
        if !t.creds.may_inspect(&group.identity().creds) {
            return Err(Errno::EPERM);
        }
        control.robust_list()
    };
    t.write_val(head_at, &head)?;
    t.write_val(len_at, &ROBUST_HEAD_SIZE)?;
    Ok(0)
}

/// Linux's futex word bits: a waiter sleeps on it; its owner died; the owner's tid.
const FUTEX_WAITERS: u32 = 0x8000_0000;
const FUTEX_OWNER_DIED: u32 = 0x4000_0000;
const FUTEX_TID_MASK: u32 = 0x3fff_ffff;
/// Most entries walked (Linux's ROBUST_LIST_LIMIT): a corrupted or circular list ends.
const ROBUST_LIST_LIMIT: usize = 2048;

/// At a thread's exit: each robust mutex still held by it (its futex word's owner is the
/// thread) gets FUTEX_OWNER_DIED and a waiter is woken, who takes the mutex with EOWNERDEAD
/// (Linux's exit_robust_list). The list is the application's memory, read with every check:
/// a bad pointer ends the walk. The word is read and written, not exchanged atomically: a
/// waiter that queues in between is still woken, as one waiter always is.
pub fn exit_robust_list(t: &mut Task) {
    let head = t.control.robust_list();
    if head == 0 {
        return;
    }
    let word = |t: &Task, at: u64| t.read_u64(Gva(at)).ok();
    let (Some(mut entry), Some(offset), Some(pending)) =
        (word(t, head), word(t, head + 8), word(t, head + 16))
    else {
        return;
    };
    for _ in 0..ROBUST_LIST_LIMIT {
        if entry == head || entry == 0 {
            break;
        }
        // The next entry is read before the word is released, as Linux does.
        let Some(next) = word(t, entry) else {
            return;
        };
        if entry != pending {
            futex_owner_died(t, entry.wrapping_add(offset));
        }
        entry = next;
    }
    if pending != 0 {
        futex_owner_died(t, pending.wrapping_add(offset));
    }
}

/// Linux's handle_futex_death for the word at `addr`.
fn futex_owner_died(t: &mut Task, addr: u64) {
    let at = Gva(addr);
    if !addr.is_multiple_of(4) {
        return;
    }
    let mut b = [0u8; 4];
    if t.copy_in(at, &mut b).is_err() {
        return;
    }
    let val = u32::from_le_bytes(b);
    if val & FUTEX_TID_MASK != t.tid as u32 {
        return;
    }
    if t.write_u32(at, (val & FUTEX_WAITERS) | FUTEX_OWNER_DIED)
        .is_err()
    {
        return;
    }
    if let Ok((queues, key)) = futex_queues(t, at, 0) {
        queues.table().wake(key, 1, u32::MAX);
    }
}

const FUTEX_WAIT: i32 = 0;
const FUTEX_WAKE: i32 = 1;
const FUTEX_WAIT_BITSET: i32 = 9;
const FUTEX_WAKE_BITSET: i32 = 10;
const FUTEX_REQUEUE: i32 = 3;
const FUTEX_CMP_REQUEUE: i32 = 4;
const FUTEX_CMD_MASK: i32 = !(128 | 256);

const FUTEX_PRIVATE_FLAG: i32 = 128;

/// Where a futex word's waiters queue.
pub(super) enum FutexQueues {
    /// The process's own table, keyed by user address.
    Process(Arc<crate::task::ThreadGroup>),
    /// The sandbox's table of words in shared memory, keyed by guest-physical address.
    Sandbox(Arc<crate::task::ProcessTable>),
}

impl FutexQueues {
    pub(super) fn table(&self) -> &crate::task::FutexTable {
        match self {
            FutexQueues::Process(g) => &g.futexes,
            FutexQueues::Sandbox(p) => &p.shared_futexes,
        }
    }
}

/// The queues and key of the futex word at `addr`: a shared futex (no FUTEX_PRIVATE_FLAG)
/// on a page of shared memory is keyed by the page's guest-physical address, the same in
/// every process mapping it, so that waiters and wakers of different processes (each its
/// own VM) meet; every other futex is the process's own, keyed by address.
pub(super) fn futex_queues(t: &mut Task, addr: Gva, op: i32) -> Result<(FutexQueues, u64), Errno> {
    if op & FUTEX_PRIVATE_FLAG == 0 {
        // A shared futex's key is the page it lies in, so the word must be readable (Linux's
        // get_futex_key pins the page: EFAULT for an unmapped or PROT_NONE address, or a
        // page past the end of its file). Faulting it in also tells where it is.
        let mut b = [0u8; 4];
        t.copy_in(addr, &mut b)?;
        let shared_vma = t.mm().find_vma(addr).is_some_and(|v| v.kind.is_shared());
        if shared_vma {
            let gpa = t.mm().page_tables().translate(addr).map(|(g, _)| g);
            if let Some(gpa) = gpa.filter(|g| t.mem.is_shared(*g)) {
                return Ok((FutexQueues::Sandbox(t.group.procs.clone()), gpa.raw()));
            }
        }
    }
    Ok((FutexQueues::Process(t.group.clone()), addr.raw()))
}

/// Implements futex(2): WAIT/WAKE (with bitsets), REQUEUE and CMP_REQUEUE, between the
/// threads of a process, and between processes on shared memory (see [`futex_queues`]). A
/// wait interrupted by a signal or a park request returns EINTR and is restarted as Linux
/// does.
pub fn sys_futex(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let op = a.int(1) & FUTEX_CMD_MASK;
    let addr = a.gva(0);
    if !addr.raw().is_multiple_of(4) {
        return Err(Errno::EINVAL);
    }
    let (queues, key) = futex_queues(t, addr, a.int(1))?;
    let futexes = queues.table();
    match op {
        FUTEX_WAKE => Ok(u64::from(futexes.wake(key, a.u(2) as u32, u32::MAX))),
        FUTEX_WAKE_BITSET => {
            let bitset = a.u(5) as u32;
            if bitset == 0 {
                return Err(Errno::EINVAL);
            }
            Ok(u64::from(futexes.wake(key, a.u(2) as u32, bitset)))
        }
        FUTEX_WAIT | FUTEX_WAIT_BITSET => {
            let bitset = if op == FUTEX_WAIT {
                u32::MAX
            } else {
                a.u(5) as u32
            };
            if bitset == 0 {
                return Err(Errno::EINVAL);
            }
            let timeout = if a.u(3) == 0 {
                None
            } else {
                let d = t
                    .read_val::<abi::structs::Timespec>(a.gva(3))?
                    .to_duration()?;
                if op == FUTEX_WAIT_BITSET {
                    // An absolute CLOCK_MONOTONIC (or REALTIME with FUTEX_CLOCK_REALTIME) time.
                    let clock = if a.int(1) & 256 != 0 {
                        libc::CLOCK_REALTIME
                    } else {
                        libc::CLOCK_MONOTONIC
                    };
                    let now = crate::task::host::clock_now(clock).unwrap_or(libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    });
                    let now =
                        std::time::Duration::new(now.tv_sec.max(0) as u64, now.tv_nsec as u32);
                    Some(d.saturating_sub(now))
                } else {
                    Some(d)
                }
            };
            let expected = a.u(2) as u32;
            // The value check happens under the queue lock: no wake between check and sleep is
            // lost.
            let mut fault = None;
            let word = futexes.enqueue(key, bitset, || {
                let mut b = [0u8; 4];
                match t.copy_in(addr, &mut b) {
                    Ok(()) => u32::from_le_bytes(b) == expected,
                    Err(e) => {
                        fault = Some(e);
                        false
                    }
                }
            });
            if let Some(e) = fault {
                return Err(e);
            }
            let Some(word) = word else {
                return Err(Errno::EAGAIN);
            };
            t.control.set_idle(true);
            let r = futexes.wait(key, &word, timeout);
            match r {
                WaitResult::Woken => Ok(0),
                WaitResult::TimedOut => Err(Errno::ETIMEDOUT),
                WaitResult::Interrupted => Err(Errno::EINTR),
            }
        }
        FUTEX_REQUEUE | FUTEX_CMP_REQUEUE => {
            let to = a.gva(4);
            if !to.raw().is_multiple_of(4) || a.int(2) < 0 || a.int(3) < 0 {
                return Err(Errno::EINVAL);
            }
            if op == FUTEX_CMP_REQUEUE {
                let mut b = [0u8; 4];
                t.copy_in(addr, &mut b)?;
                if u32::from_le_bytes(b) != a.u(5) as u32 {
                    return Err(Errno::EAGAIN);
                }
            }
            let (to_queues, to_key) = futex_queues(t, to, a.int(1))?;
            if std::mem::discriminant(&to_queues) != std::mem::discriminant(&queues) {
                // One word in shared memory, the other private: nothing to move between
                // tables; wake the waiters instead (they re-check their word).
                return Ok(u64::from(futexes.wake(key, u32::MAX, u32::MAX)));
            }
            Ok(u64::from(futexes.requeue(
                key,
                to_key,
                a.u(2) as u32,
                a.u(3) as u32,
            )))
        }
        _ => Err(Errno::ENOSYS),
    }
}

use abi::clone::{
    CLONE_CHILD_CLEARTID, CLONE_CHILD_SETTID, CLONE_DETACHED, CLONE_FILES, CLONE_FS,
    CLONE_PARENT_SETTID, CLONE_SETTLS, CLONE_SIGHAND, CLONE_SYSVSEM, CLONE_THREAD, CLONE_VM,
    CSIGNAL,
};

/// Implements clone(2). Threads (CLONE_VM | CLONE_THREAD | CLONE_SIGHAND, as pthread_create
/// and Go's runtime use it): a new task with its own vCPU on its own host thread, sharing the
/// address space, the descriptor table and the thread group. Without CLONE_THREAD: a new
/// process (see `sys_fork`).
pub fn sys_clone(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (flags, newsp, ptid, ctid, tls) = (a.u(0), a.u(1), a.gva(2), a.gva(3), a.u(4));
    if flags & CLONE_THREAD == 0 {
        return super::sys_fork::fork(t, flags, newsp, ptid, ctid, tls);
    }
    let thread = CLONE_VM | CLONE_THREAD | CLONE_SIGHAND;
    if flags & thread != thread {
        return Err(Errno::EINVAL);
    }
    if flags & super::sys_ns::CLONE_NAMESPACES != 0 {
        return Err(super::sys_ns::clone_refusal(flags));
    }
    let known = thread
        | CLONE_FS
        | CLONE_FILES
        | CLONE_SYSVSEM
        | CLONE_SETTLS
        | CLONE_PARENT_SETTID
        | CLONE_CHILD_CLEARTID
        | CLONE_DETACHED
        | CLONE_CHILD_SETTID
        | CSIGNAL; // exit signal (ignored for threads)
    if flags & !known != 0 {
        return Err(Errno::EINVAL);
    }
    if flags & CLONE_SETTLS != 0 && tls >= platform::layout::USER_END.raw() {
        return Err(Errno::EPERM);
    }
    let slot = t.group.procs.reserve_task()?;
    let tid = t.group.alloc_tid();
    let cr3 = t.mm().cr3();
    // On KVM: a vCPU whose thread ended, else a new one (at most MAX_VCPUS live threads).
    let mut ctx = t.group.space().new_context(cr3).map_err(|e| {
        tracing::warn!("clone: {e}");
        Errno::EAGAIN
    })?;
    // The new thread starts with its creator's FPU state, as on Linux.
    if let Ok(fpu) = t.ctx.fpu() {
        if let Err(e) = ctx.set_fpu(&fpu) {
            tracing::warn!("clone: {e}");
            return Err(Errno::EAGAIN);
        }
    }
    super::sys_fork::start_like_parent(
        ctx.as_mut(),
        t,
        newsp,
        (flags & CLONE_SETTLS != 0).then_some(tls),
    );
    if flags & CLONE_PARENT_SETTID != 0 {
        t.write_u32(ptid, tid as u32)?;
    }
    if flags & CLONE_CHILD_SETTID != 0 {
        t.write_u32(ctid, tid as u32)?;
    }
    let mut signals = t.signals.clone();
    signals.reset_for_new_thread();
    let child = t.child(ChildParts {
        tid,
        pid: t.pid,
        ctx,
        mm: t.mm.clone(),
        mem: t.mem.clone(),
        fds: t.fds.clone(),
        group: t.group.clone(),
        signals,
        slot,
        share_fs: flags & CLONE_FS != 0,
        clear_child_tid: if flags & CLONE_CHILD_CLEARTID != 0 {
            ctid.raw()
        } else {
            0
        },
    });
    if let Err(e) = child.spawn(format!("vcpu-{tid}")) {
        tracing::warn!("clone: cannot start a host thread: {e}");
        t.group.leave(tid);
        return Err(Errno::EAGAIN);
    }
    Ok(tid as u64)
}

/// Implements clone3(2) as ENOSYS: glibc and Go fall back to clone(2).
pub fn sys_clone3(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements rseq(2) as ENOSYS: glibc and others fall back to plain getcpu.
pub fn sys_rseq(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}
