//! New processes and their end: fork(2), vfork(2), clone(2) without CLONE_THREAD, wait4(2),
//! waitid(2), pidfd_open(2).
//!
//! A forked process gets its own VM: fresh guest memory holding an eager copy of every page
//! the parent has (no copy-on-write across VMs), its own page tables, a vCPU with the
//! parent's registers and FPU state, a copy of the descriptor table (sharing the open files,
//! and so their offsets, as on Linux), and its own host thread. The sandbox's
//! [`ProcessTable`](crate::task::ProcessTable) records parents and exit statuses for wait4.

use std::sync::{Arc, Mutex};

use abi::Errno;
use platform::{AddressSpace, GuestMemory, Platform};

use super::{SysResult, SyscallArgs};
use crate::task::job_control::JobEvent;
use crate::task::{ChildEvent, ChildParts, ExitStatus, Task, ThreadGroup, WaitFor, WaitWant};

use abi::clone::{
    CLONE_CHILD_CLEARTID, CLONE_CHILD_SETTID, CLONE_DETACHED, CLONE_FILES, CLONE_FS, CLONE_IO,
    CLONE_PARENT, CLONE_PARENT_SETTID, CLONE_SETTLS, CLONE_SYSVSEM, CLONE_VFORK, CLONE_VM, CSIGNAL,
};

/// Implements fork(2).
pub fn sys_fork(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    fork(
        t,
        libc::SIGCHLD as u64,
        0,
        platform::Gva(0),
        platform::Gva(0),
        0,
    )
}

/// Implements vfork(2): a fork whose parent waits until the child execs or exits. (The child
/// runs on a copy of the parent's memory, so its writes stay its own.)
pub fn sys_vfork(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    fork(
        t,
        CLONE_VM | CLONE_VFORK | libc::SIGCHLD as u64,
        0,
        platform::Gva(0),
        platform::Gva(0),
        0,
    )
}

/// clone(2) without CLONE_THREAD: a new process (`flags`, new stack, parent/child tid
/// pointers, TLS as in clone's argument order).
pub(super) fn fork(
    t: &mut Task,
    flags: u64,
    newsp: u64,
    ptid: platform::Gva,
    ctid: platform::Gva,
    tls: u64,
) -> SysResult {
    let known = CLONE_VM
        | CLONE_VFORK
        | CLONE_FS
        | CLONE_FILES
        | CLONE_PARENT
        | CLONE_SYSVSEM
        | CLONE_IO
        | CLONE_SETTLS
        | CLONE_PARENT_SETTID
        | CLONE_CHILD_CLEARTID
        | CLONE_DETACHED
        | CLONE_CHILD_SETTID
        | CSIGNAL;
    // Sharing memory without sharing a thread group is only accepted with CLONE_VFORK (the
    // parent does not run while the child uses the memory): each process has its own address
    // space. Signal handlers go with memory (CLONE_SIGHAND needs CLONE_VM). The working
    // directory and umask (CLONE_FS) and the descriptor table (CLONE_FILES) may be shared;
    // CLONE_SYSVSEM and CLONE_IO are accepted (semaphore undo lists stay per process).
    if flags & super::sys_ns::CLONE_NAMESPACES != 0 {
        return Err(super::sys_ns::clone_refusal(flags));
    }
    if flags & !known != 0 || (flags & CLONE_VM != 0 && flags & CLONE_VFORK == 0) {
        tracing::warn!(
            flags = format_args!("{flags:#x}"),
            "clone: unsupported process flags"
        );
        return Err(Errno::EINVAL);
    }
    if flags & CLONE_SETTLS != 0 && tls >= platform::layout::USER_END.raw() {
        return Err(Errno::EPERM);
    }
    // CLONE_PARENT: the child is the caller's sibling and inherits the caller's exit signal;
    // the sandbox's init has no parent to give (EINVAL, as for a namespace's init).
    let (parent, exit_signal) = if flags & CLONE_PARENT != 0 {
        match t.group.procs.entry_of(t.pid) {
            Some((ppid, _, sig)) if t.pid != 1 && ppid > 0 => (ppid, sig),
            _ => return Err(Errno::EINVAL),
        }
    } else {
        (t.pid, (flags & CSIGNAL) as i32)
    };
    let slot = t.group.procs.reserve_task()?;
    let (mem, space, mut mm) = if shares_frames(t) {
        // Copy-on-write: the child is a new address space over the parent's memory. The
        // parent's entries made read-only are applied before the lock goes (another thread
        // may be running: it writes through its old translations until then) and before
        // the child runs.
        let mm = t.mm_restrict(|mm| mm.fork_sharing()).map_err(|e| {
            tracing::warn!("fork: {e}");
            Errno::ENOMEM
        })?;
        let space = t
            .group
            .platform
            .new_address_space(t.mem.clone())
            .map_err(|e| {
                tracing::warn!("fork: {e}");
                Errno::EAGAIN
            })?;
        (t.mem.clone(), space, mm)
    } else {
        let (mem, space) = new_space(&t.group.platform, t.mem.size(), "fork")?;
        let mm = t.mm().fork_into(mem.clone()).map_err(|e| {
            tracing::warn!("fork: {e}");
            Errno::ENOMEM
        })?;
        (mem, space, mm)
    };
    let mut ctx = space.new_context(mm.cr3()).map_err(|e| {
        tracing::warn!("fork: {e}");
        Errno::EAGAIN
    })?;
    start_like_parent(
        ctx.as_mut(),
        t,
        newsp,
        (flags & CLONE_SETTLS != 0).then_some(tls),
    );
    let fpu = t.ctx.fpu().map_err(|e| {
        tracing::warn!("fork: {e}");
        Errno::EAGAIN
    })?;
    ctx.set_fpu(&fpu).map_err(|e| {
        tracing::warn!("fork: {e}");
        Errno::EAGAIN
    })?;

    let procs = t.group.procs.clone();
    let pid = procs.alloc_id();
    if flags & CLONE_PARENT_SETTID != 0 {
        t.write_u32(ptid, pid as u32)?;
    }
    if flags & CLONE_CHILD_SETTID != 0 {
        mm.copy_out(ctid, &(pid as u32).to_le_bytes())
            .map_err(|e| Errno(e.errno()))?;
    }
    let group = ThreadGroup::new(t.group.platform.clone(), space.clone(), pid, procs.clone());
    group.set_exe_key(t.group.exe_key());
    group.personality.store(
        t.group
            .personality
            .load(std::sync::atomic::Ordering::Relaxed),
        std::sync::atomic::Ordering::Relaxed,
    );
    for (to, from) in [
        (&group.ioprio, &t.group.ioprio),
        (&group.membarrier, &t.group.membarrier),
        (&group.coredump_filter, &t.group.coredump_filter),
    ] {
        to.store(
            from.load(std::sync::atomic::Ordering::Relaxed),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    *group.rlimits.lock().unwrap_or_else(|e| e.into_inner()) = t
        .group
        .rlimits
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    crate::task::cpu_limit::CpuLimit::restart(&group);
    let mut signals = t.signals.clone();
    signals.reset_for_fork();
    let mm = Arc::new(Mutex::new(mm));
    let fds = if flags & CLONE_FILES != 0 {
        t.fds.clone()
    } else {
        Arc::new(t.fds.fork_copy())
    };
    group.set_resources(crate::task::ProcessResources {
        mm: mm.clone(),
        mem: mem.clone(),
        fds: fds.clone(),
        space: space.clone(),
    });
    let child = t.child(ChildParts {
        tid: pid,
        pid,
        ctx,
        mm,
        mem,
        fds,
        group: group.clone(),
        signals,
        slot,
        share_fs: flags & CLONE_FS != 0,
        clear_child_tid: if flags & CLONE_CHILD_CLEARTID != 0 {
            ctid.raw()
        } else {
            0
        },
    });
    child.publish_identity();
    procs.add(pid, parent, group.clone(), exit_signal);
    if let Err(e) = child.spawn(format!("proc-{pid}")) {
        tracing::warn!("fork: cannot start a host thread: {e}");
        group.exit_group(crate::task::ExitStatus::Signaled(libc::SIGKILL));
        group.leave(pid);
        let _ = procs.wait_child(parent, WaitFor::Pid(pid), true, || false);
        return Err(Errno::EAGAIN);
    }
    if flags & CLONE_VFORK != 0 {
        let control = t.control.clone();
        procs.wait_vfork(pid, || control.park_requested());
    }
    Ok(pid as u64)
}

/// Whether `t`'s fork shares its frames copy-on-write with the child (`mm`'s
/// `fork_sharing`) rather than copying them into a new memory: on a platform whose address
/// spaces can share a memory (trap, where the commit of the parent's read-only entries is a
/// host mapping change, which the host applies to every thread at once;
/// `docs/design/cow-fork.md`, S1, S2 and S4's trap part), unless `TORPOR_COW_FORK=0` asks
/// for copies. Buffers other threads' host calls are writing are pinned and copied
/// (`Task::user_ranges`).
fn shares_frames(t: &Task) -> bool {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| std::env::var_os("TORPOR_COW_FORK").is_none_or(|v| v != "0"))
        && t.group.platform.address_spaces_share_memory()
}

/// Fresh guest memory of `size` bytes and an address space over it, for a new process
/// (`what`: fork, execve, for the log).
///
/// # Errors
/// ENOMEM without memory; EAGAIN if the platform refuses the address space.
pub(super) fn new_space(
    platform: &Arc<dyn Platform>,
    size: u64,
    what: &str,
) -> Result<(Arc<GuestMemory>, Arc<dyn AddressSpace>), Errno> {
    let mem = platform.new_memory(size).map_err(|e| {
        tracing::warn!("{what}: guest memory: {e}");
        Errno::ENOMEM
    })?;
    let space = platform.new_address_space(mem.clone()).map_err(|e| {
        tracing::warn!("{what}: {e}");
        Errno::EAGAIN
    })?;
    Ok((mem, space))
}

const WNOHANG: i32 = 1;
const WUNTRACED: i32 = 2;
const WCONTINUED: i32 = 8;
const WNOTHREAD: i32 = 0x2000_0000;
const WALL: i32 = 0x4000_0000;
const WCLONE: i32 = 0x8000_0000_u32 as i32;

/// Implements wait4(2): reaps an exited child, or reports a stopped one (`WUNTRACED`) or a
/// continued one (`WCONTINUED`) once each; the resource usage written is zero.
pub fn sys_wait4(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (pid, status_at, options, rusage_at) = (a.int(0), a.gva(1), a.int(2), a.gva(3));
    if options & !(WNOHANG | WUNTRACED | WCONTINUED | WNOTHREAD | WALL | WCLONE) != 0 {
        return Err(Errno::EINVAL);
    }
    if pid == i32::MIN {
        return Err(Errno::ESRCH);
    }
    let which = match pid {
        p if p > 0 => WaitFor::Pid(p),
        -1 => WaitFor::Any,
        0 => WaitFor::Group(t.group.procs.membership(t.pid).map_or(t.pid, |m| m.pgid)),
        p => WaitFor::Group(-p),
    };
    let want = WaitWant {
        exited: true,
        stopped: options & WUNTRACED != 0,
        continued: options & WCONTINUED != 0,
    };
    let control = t.control.clone();
    let group = t.group.clone();
    let tid = t.tid;
    let interrupted =
        || control.park_requested() || control.signal_pending() || group.must_leave(tid);
    let found = t.group.procs.wait_child_as(
        t.pid,
        which,
        want,
        options & WNOHANG != 0,
        true,
        interrupted,
    )?;
    let Some((child, event)) = found else {
        return Ok(0);
    };
    if status_at.raw() != 0 {
        let word = match event {
            ChildEvent::Exited {
                status: ExitStatus::Exited(code),
                ..
            } => (code & 0xff) << 8,
            ChildEvent::Exited {
                status: ExitStatus::Signaled(sig),
                core,
                ..
            } => (sig & 0x7f) | if core { 0x80 } else { 0 },
            ChildEvent::Job(JobEvent::Stopped(sig)) => (sig << 8) | 0x7f,
            ChildEvent::Job(JobEvent::Continued) => 0xffff,
        };
        t.write_u32(status_at, word as u32)?;
    }
    if rusage_at.raw() != 0 {
        let cpu = match event {
            ChildEvent::Exited { cpu, .. } => cpu,
            ChildEvent::Job(_) => Default::default(),
        };
        t.copy_out(rusage_at, &rusage_bytes(cpu))?;
    }
    Ok(child as u64)
}

/// A `struct rusage` holding user and system time only (the other counters are zero).
pub(super) fn rusage_bytes(cpu: crate::task::cputime::UserSys) -> [u8; 144] {
    let mut out = [0u8; 144];
    for (i, d) in [cpu.user, cpu.sys].into_iter().enumerate() {
        out[i * 16..i * 16 + 8].copy_from_slice(&(d.as_secs() as i64).to_le_bytes());
        out[i * 16 + 8..i * 16 + 16].copy_from_slice(&i64::from(d.subsec_micros()).to_le_bytes());
    }
    out
}

const P_ALL: i32 = 0;
const P_PID: i32 = 1;
const P_PGID: i32 = 2;
const P_PIDFD: i32 = 3;
const WEXITED: i32 = 4;
const WSTOPPED: i32 = 2;
const WNOWAIT: i32 = 0x0100_0000;
const CLD_EXITED: i32 = 1;
const CLD_KILLED: i32 = 2;
const CLD_DUMPED: i32 = 3;
const CLD_STOPPED: i32 = 5;
const CLD_CONTINUED: i32 = 6;

/// Implements waitid(2): an exited child (`WEXITED`), a stopped one (`WSTOPPED`) or a
/// continued one (`WCONTINUED`), with `WNOHANG` and `WNOWAIT`. The siginfo written holds
/// SIGCHLD, CLD_EXITED, CLD_KILLED, CLD_STOPPED or CLD_CONTINUED, the child's pid and uid, and
/// its status (exit code or signal); with `WNOHANG` and no such child, a zeroed one.
pub fn sys_waitid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (idtype, id, info_at, options, rusage_at) =
        (a.int(0), a.int(1), a.gva(2), a.int(3), a.gva(4));
    let known = WNOHANG | WEXITED | WSTOPPED | WCONTINUED | WNOWAIT | WNOTHREAD | WALL | WCLONE;
    if options & !known != 0 || options & (WEXITED | WSTOPPED | WCONTINUED) == 0 {
        return Err(Errno::EINVAL);
    }
    let which = match idtype {
        P_ALL => WaitFor::Any,
        P_PID if id > 0 => WaitFor::Pid(id),
        P_PGID if id == 0 => {
            WaitFor::Group(t.group.procs.membership(t.pid).map_or(t.pid, |m| m.pgid))
        }
        P_PGID if id > 0 => WaitFor::Group(id),
        P_PIDFD => WaitFor::Pid(pidfd_target(t, id, false)?),
        _ => return Err(Errno::EINVAL),
    };
    // A non-blocking pidfd waits as WNOHANG, and finding nothing is EAGAIN (Linux 5.10).
    let nonblocking_pidfd = idtype == P_PIDFD
        && t.fds.get(id).is_ok_and(|f| {
            crate::fd::host::status_flags(f.host()).is_ok_and(|fl| fl & libc::O_NONBLOCK != 0)
        });
    let options = if nonblocking_pidfd {
        options | WNOHANG
    } else {
        options
    };
    let want = WaitWant {
        exited: options & WEXITED != 0,
        stopped: options & WSTOPPED != 0,
        continued: options & WCONTINUED != 0,
    };
    let control = t.control.clone();
    let group = t.group.clone();
    let tid = t.tid;
    let interrupted =
        || control.park_requested() || control.signal_pending() || group.must_leave(tid);
    let found = t.group.procs.wait_child_as(
        t.pid,
        which,
        want,
        options & WNOHANG != 0,
        options & WNOWAIT == 0,
        interrupted,
    )?;
    if found.is_none() && nonblocking_pidfd {
        return Err(Errno::EAGAIN);
    }
    let mut info = [0u8; 128];
    if let Some((child, event)) = found {
        let (code, value) = match event {
            ChildEvent::Exited {
                status: ExitStatus::Exited(c),
                ..
            } => (CLD_EXITED, c & 0xff),
            ChildEvent::Exited {
                status: ExitStatus::Signaled(s),
                core: false,
                ..
            } => (CLD_KILLED, s),
            ChildEvent::Exited {
                status: ExitStatus::Signaled(s),
                core: true,
                ..
            } => (CLD_DUMPED, s),
            ChildEvent::Job(JobEvent::Stopped(s)) => (CLD_STOPPED, s),
            ChildEvent::Job(JobEvent::Continued) => (CLD_CONTINUED, libc::SIGCONT),
        };
        // The child's uid, not the caller's.
        let uid = t
            .group
            .procs
            .group_of(child)
            .map_or(t.creds.uid, |g| g.identity().creds.uid);
        // struct siginfo: si_signo, si_errno, si_code, then (for SIGCHLD) si_pid, si_uid,
        // si_status at offsets 16, 20, 24.
        info[0..4].copy_from_slice(&libc::SIGCHLD.to_le_bytes());
        info[8..12].copy_from_slice(&code.to_le_bytes());
        info[16..20].copy_from_slice(&child.to_le_bytes());
        info[20..24].copy_from_slice(&uid.to_le_bytes());
        info[24..28].copy_from_slice(&value.to_le_bytes());
    }
    if info_at.raw() != 0 {
        t.copy_out(info_at, &info)?;
    }
    if rusage_at.raw() != 0 {
        let cpu = match found {
            Some((_, ChildEvent::Exited { cpu, .. })) => cpu,
            _ => Default::default(),
        };
        t.copy_out(rusage_at, &rusage_bytes(cpu))?;
    }
    Ok(0)
}

/// The process a pidfd refers to (EBADF for a descriptor that is not one). With `proc_dir`,
/// a `/proc/PID` directory counts, as Linux's pidfd_send_signal takes it (ESRCH once the
/// process is gone).
pub(super) fn pidfd_target(t: &Task, fd: i32, proc_dir: bool) -> Result<i32, Errno> {
    let f = t.fds.get(fd)?;
    match (&f.kind, &f.path) {
        (crate::fd::FileKind::Pidfd(pid), _) => Ok(*pid),
        (crate::fd::FileKind::Directory, Some(p)) if proc_dir => {
            match crate::fs::procfs::GeneratedDir::of(p, t) {
                Some(crate::fs::procfs::GeneratedDir::Process(pid)) => Ok(pid),
                None if p.starts_with(b"/proc/") && p[6..].iter().all(u8::is_ascii_digit) => {
                    Err(Errno::ESRCH)
                }
                _ => Err(Errno::EBADF),
            }
        }
        _ => Err(Errno::EBADF),
    }
}

/// Implements pidfd_open(2): a descriptor that becomes readable when process `pid` of the
/// sandbox exits (a host eventfd written by the process table), usable with waitid's
/// `P_PIDFD` and pidfd_send_signal(2).
pub fn sys_pidfd_open(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (pid, flags) = (a.int(0), a.u(1));
    const PIDFD_NONBLOCK: u64 = libc::O_NONBLOCK as u64;
    if flags & !PIDFD_NONBLOCK != 0 || pid <= 0 {
        return Err(Errno::EINVAL);
    }
    if !t.group.procs.exists(pid) {
        return Err(Errno::ESRCH);
    }
    let mut efd_flags = libc::EFD_CLOEXEC;
    if flags & PIDFD_NONBLOCK != 0 {
        efd_flags |= libc::EFD_NONBLOCK;
    }
    let fd = crate::fd::host::eventfd(0, efd_flags)?;
    let watcher = Arc::new(fd.try_clone().map_err(Errno::from)?);
    t.group.procs.watch_exit(pid, watcher)?;
    let file = crate::fd::OpenFile::new(fd, crate::fd::FileKind::Pidfd(pid), None);
    let n = t.fds.insert(Arc::new(file), true)?;
    Ok(n as u64)
}

/// Implements pidfd_send_signal(2): kill(2)'s signal, or one with the caller's siginfo, to
/// the process of a pidfd (or a `/proc/PID` directory); no flags.
pub fn sys_pidfd_send_signal(t: &mut Task, a: &SyscallArgs) -> SysResult {
    use super::sys_signal::{from_me, may_queue_to_others, signal_process};
    use crate::task::SigInfo;
    let (fd, sig, uinfo, flags) = (a.int(0), a.int(1), a.gva(2), a.u(3));
    // Linux's order: flags, the signal, the descriptor, the siginfo, then permission.
    if flags != 0 || !(0..=crate::task::NSIG as i32).contains(&sig) {
        return Err(Errno::EINVAL);
    }
    let pid = pidfd_target(t, fd, true)?;
    let info = if uinfo.raw() == 0 {
        from_me(t, sig)
    } else {
        let mut info = SigInfo([0; 128]);
        t.copy_in(uinfo, &mut info.0)?;
        if info.signo() != sig {
            return Err(Errno::EINVAL);
        }
        if pid != t.pid && !may_queue_to_others(&info) {
            return Err(Errno::EPERM);
        }
        info
    };
    if pid == t.pid {
        if sig != 0 {
            t.queue_signal(info);
        }
        return Ok(0);
    }
    signal_process(t, pid, sig, info)
}

/// Sets a new task's user registers to its creator's, returning 0 from the syscall, on
/// stack `newsp` (0: the creator's) and with TLS base `tls` if given.
pub(super) fn start_like_parent(
    ctx: &mut dyn platform::Context,
    t: &Task,
    newsp: u64,
    tls: Option<u64>,
) {
    *ctx.user_mut() = *t.ctx.user();
    ctx.user_mut().regs.rax = 0;
    if newsp != 0 {
        ctx.user_mut().regs.rsp = newsp;
    }
    if let Some(tls) = tls {
        ctx.user_mut().fs_base = tls;
    }
}
