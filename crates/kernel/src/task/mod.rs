//! Tasks: a guest thread, owned by the host thread that drives its vCPU (Linux's
//! `struct task_struct`).

pub mod affinity;
pub mod captured;
mod control;
pub mod coredump;
pub mod cpu_limit;
pub mod cputime;
mod fs_context;

mod group;
pub mod host;
pub mod itimer;
pub mod job_control;
pub(crate) mod kick_wait;
mod parked;
pub mod posix_timer;
mod process;
pub mod rlimit;
pub mod signal;
pub mod signalfd;

pub use crate::creds::{CapSets, Credentials};
pub use control::{IdleHook, ParkHook, TaskControl, DEFAULT_TIMER_SLACK_NS};
pub use fs_context::FsContext;
pub use group::{by_memory, FutexTable, ProcIdentity, ProcessResources, ThreadGroup, WaitResult};
pub use parked::{ParkedSandbox, StoppedProcesses};
pub use process::{new_boot_id, ChildEvent, Membership, ProcessTable, TaskSlot, WaitFor, WaitWant};
pub use signal::{AltStack, SigInfo, SignalState, NSIG};

use std::sync::{Arc, Mutex, MutexGuard};

use abi::Errno;
use mm::{Access, FaultError, MemoryManager};
use platform::{Commit, Context, ExceptionInfo, Exit, GuestMemory, Gva, PlatformError};

use crate::fd::FdTable;
use crate::fs::Root;
use crate::net::NetPolicy;
use crate::syscalls::{self, SyscallArgs};

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// exit(2) or exit_group(2) with this code (low 8 bits kept).
    Exited(i32),
    /// Killed by this signal.
    Signaled(i32),
}

impl ExitStatus {
    /// The status a shell would report: the code, or 128 + the signal.
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Exited(c) => c & 0xff,
            ExitStatus::Signaled(s) => 128 + s,
        }
    }
}

/// A guest thread and what it owns.
///
/// Field owners: everything here is exclusive to the task's host thread, except `mm` (shared
/// by the thread group, behind its mutex) and `root`/`net` (immutable, shared).
pub struct Task {
    /// Thread id (and, for the leader, process id).
    pub tid: i32,
    /// Process id.
    pub pid: i32,
    /// The platform's context running this thread, with its user register state.
    pub ctx: Box<dyn Context>,
    /// The address space.
    pub mm: Arc<Mutex<MemoryManager>>,
    /// Guest memory (for zero-copy I/O).
    pub mem: Arc<GuestMemory>,
    /// Descriptor table (shared by the thread group).
    pub fds: Arc<FdTable>,
    /// The sandbox's root.
    pub root: Arc<Root>,
    /// Working directory and umask (shared with the tasks cloned with `CLONE_FS`).
    pub fs: Arc<FsContext>,
    /// Network policy.
    pub net: Arc<NetPolicy>,
    /// Signal dispositions and mask.
    pub signals: SignalState,
    /// set_tid_address(2) pointer.
    pub clear_child_tid: u64,
    /// Set when the thread group exits.
    pub exit: Option<ExitStatus>,
    /// Guest path of the running executable (/proc/self/exe).
    pub exe: Vec<u8>,
    /// The program's arguments, each NUL-terminated (/proc/self/cmdline).
    pub cmdline: Arc<[u8]>,
    /// The environment it was started with, each `K=V` NUL-terminated (/proc/self/environ).
    pub environ: Arc<[u8]>,
    /// User and group ids the application sees (inherited by children).
    pub creds: Arc<Credentials>,
    /// This task's place in the sandbox's task count (`--pids-limit`), given back with it.
    pub slot: process::TaskSlot,
    /// Cross-thread control (park requests, idle flag).
    pub control: Arc<TaskControl>,
    /// Run when the task parks.
    pub park_hook: Option<Box<dyn ParkHook>>,
    /// The thread group.
    pub group: Arc<ThreadGroup>,
    /// Set by exit(2) while other threads live: only this thread ends.
    pub thread_exit_only: bool,
    /// The task is inside a syscall whose blocking host call a park interrupted: the call
    /// (its number and arguments still in the registers) runs again once the task is
    /// unparked. A checkpoint saves it; a restored task starts by running the call again.
    pub in_syscall: bool,
    /// Frames the syscall in progress lets a host call write after the address space's lock
    /// is dropped ([`Task::user_ranges`]), pinned until the syscall ends: a fork by another
    /// thread meanwhile copies them for its child rather than share them.
    pub pins: std::cell::RefCell<Vec<mm::Pins>>,
}

/// Errors that end the sandbox (host failures, never guest mistakes).
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The platform failed.
    #[error(transparent)]
    Platform(#[from] PlatformError),
    /// The memory manager hit an internal error.
    #[error("memory manager: {0}")]
    Mm(String),
}

/// Syscalls by which a server waits for its next request: the task is idle ("hot") while in
/// one of them. (poll, select, accept, recvfrom, recvmsg, epoll_wait, pselect6, ppoll,
/// epoll_pwait, accept4, io_uring_enter, epoll_pwait2.)
fn waits_for_input(nr: u64) -> bool {
    matches!(
        nr,
        7 | 23 | 43 | 45 | 47 | 232 | 270 | 271 | 281 | 288 | 426 | 441
    )
}

/// Whether a call of [`waits_for_input`] returned input: a connection (accept), bytes or an
/// end of stream (recvfrom, recvmsg), ready descriptors (poll, select, epoll), requests
/// submitted after a wait (io_uring_enter: a server submits again what it handled); not a
/// timeout (0 ready) nor an error.
fn brought_input(nr: u64, ret: &Result<u64, Errno>) -> bool {
    match ret {
        Ok(n) => *n > 0 || matches!(nr, 43 | 288 | 45 | 47),
        Err(_) => false,
    }
}

/// What a task made by clone or fork does not take from its creator.
pub struct ChildParts {
    /// Thread id.
    pub tid: i32,
    /// Process id (the creator's for a thread, `tid` for a new process).
    pub pid: i32,
    /// Its context, registers already set.
    pub ctx: Box<dyn Context>,
    /// Its address space.
    pub mm: Arc<Mutex<MemoryManager>>,
    /// Its guest memory.
    pub mem: Arc<GuestMemory>,
    /// Its descriptor table.
    pub fds: Arc<FdTable>,
    /// Its thread group (the task joins it).
    pub group: Arc<ThreadGroup>,
    /// Its signal state.
    pub signals: SignalState,
    /// CLONE_CHILD_CLEARTID's address, or 0.
    pub clear_child_tid: u64,
    /// Its place in the task count ([`ProcessTable::reserve_task`]).
    pub slot: process::TaskSlot,
    /// `CLONE_FS`: it shares its creator's working directory and umask (else a copy).
    pub share_fs: bool,
}

impl Task {
    /// Publishes the process's program, arguments, name and ids for /proc of the sandbox's
    /// other processes (the first thread speaks for the process).
    pub fn publish_identity(&self) {
        if self.tid != self.pid {
            return;
        }
        self.group.set_identity(ProcIdentity {
            exe: self.exe.clone(),
            cmdline: self.cmdline.clone(),
            environ: self.environ.clone(),
            comm: self.comm(),
            creds: self.creds.clone(),
        });
    }

    /// Every descriptor table of the sandbox, each once (processes made with CLONE_FILES
    /// share one), the caller's first: for the rules that look at all open files (a program
    /// open for writing cannot be executed, the inotify instance limit).
    pub fn sandbox_fd_tables(&self) -> Vec<Arc<crate::fd::FdTable>> {
        let mut tables = vec![self.fds.clone()];
        for (_, g) in self.group.procs.live_groups() {
            if let Some(r) = g.resources() {
                if !tables.iter().any(|x| Arc::ptr_eq(x, &r.fds)) {
                    tables.push(r.fds);
                }
            }
        }
        tables
    }

    /// The thread's name (PR_SET_NAME), NUL-padded; its process's other threads may change
    /// it (`/proc/PID/task/TID/comm`).
    pub fn comm(&self) -> [u8; 16] {
        self.control.comm()
    }

    /// Names the thread, and publishes it for /proc if it is the process's first.
    pub fn set_comm(&self, name: [u8; 16]) {
        self.control.set_comm(name);
        self.publish_identity();
    }

    /// The working directory (a guest path).
    pub fn cwd(&self) -> Vec<u8> {
        self.fs.cwd()
    }

    /// The file mode creation mask.
    pub fn umask(&self) -> u32 {
        self.fs.umask()
    }

    /// A new task made by this one (clone, fork): `parts`, and the rest (root, working
    /// directory, umask, network policy, executable, name) from this task. It joins its group.
    pub fn child(&self, parts: ChildParts) -> Task {
        let control = Arc::new(TaskControl::new(parts.ctx.kicker()));
        control.set_comm(self.comm());
        control.inherit_timer_slack(&self.control);
        parts.group.join(parts.tid, control.clone());
        Task {
            tid: parts.tid,
            pid: parts.pid,
            ctx: parts.ctx,
            mm: parts.mm,
            mem: parts.mem,
            fds: parts.fds,
            root: self.root.clone(),
            fs: if parts.share_fs {
                self.fs.clone()
            } else {
                self.fs.copy()
            },
            net: self.net.clone(),
            signals: parts.signals,
            clear_child_tid: parts.clear_child_tid,
            exit: None,
            exe: self.exe.clone(),
            cmdline: self.cmdline.clone(),
            environ: self.environ.clone(),
            creds: self.creds.clone(),
            slot: parts.slot,
            control: control.clone(),
            park_hook: None,
            group: parts.group,
            thread_exit_only: false,
            in_syscall: false,
            pins: Default::default(),
        }
    }

    /// Runs the task on a new host thread named `name`.
    ///
    /// # Errors
    /// The host's error if the thread cannot be started (the task is dropped).
    pub fn spawn(mut self, name: String) -> std::io::Result<()> {
        std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                if let Err(e) = self.run() {
                    tracing::error!("task {} of process {}: {e}", self.tid, self.pid);
                }
            })
            .map(|_| ())
    }

    /// Locks the address space.
    pub fn mm(&self) -> MutexGuard<'_, MemoryManager> {
        // A poisoned lock means another thread panicked mid-update: with panic = "abort" this
        // cannot happen; recover the guard rather than panic again.
        self.mm.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the address space for a call that removes or restricts mappings (munmap,
    /// mprotect, madvise, mremap, brk, a replacing mmap), and makes the entries it changed
    /// reach every thread's context before the address space is unlocked.
    ///
    /// Until the platform has committed them, other threads may still use the old
    /// translations (on KVM, a shadow MMU does not see host writes to present entries). Were
    /// the lock released first, another thread could map the freed range (or be handed its
    /// freed frames), touch it through the stale translation and lose its bytes when the stale
    /// entry is finally dropped (seen with tests/guest/stress.c). So the changes are committed
    /// with [`Commit::Restrict`] right here.
    pub fn mm_restrict<R>(&mut self, f: impl FnOnce(&mut MemoryManager) -> R) -> R {
        let mm = self.mm.clone();
        let mut guard = mm.lock().unwrap_or_else(|e| e.into_inner());
        let result = f(&mut guard);
        let changes = guard.take_changes();
        let failed = if changes.is_empty() {
            None
        } else {
            self.ctx.commit(changes, Commit::Restrict).err()
        };
        // The process ends with the guard dropped: exit_group takes the thread group's members
        // and futex queues, which a futex wait holds while it takes this mutex.
        drop(guard);
        if let Some(e) = failed {
            tracing::error!("applying page-table changes: {e}");
            self.group.exit_group(ExitStatus::Signaled(libc::SIGKILL));
        }
        result
    }

    /// Runs the thread until its thread group exits.
    ///
    /// # Errors
    /// [`TaskError`] on a host failure.
    pub fn run(&mut self) -> Result<ExitStatus, TaskError> {
        // A task thread started by another inherits its CPU pin, if the platform pinned it.
        affinity::free_current_thread();
        self.ctx.bind_to_current_thread();
        self.group.cpu.enter(self.tid);
        let r = self.run_loop();
        self.group.cpu.leave(self.tid);
        self.ctx.unbind_thread();
        match &r {
            Ok(status) if !self.thread_exit_only => self.group.exit_group(*status),
            Ok(_) => {}
            Err(_) => self.group.exit_group(ExitStatus::Signaled(libc::SIGKILL)),
        }
        // Robust mutexes it still holds are released to their waiters (EOWNERDEAD).
        syscalls::exit_robust_list(self);
        // CLONE_CHILD_CLEARTID: zero the tid word and wake a joiner.
        if self.clear_child_tid != 0 {
            let at = Gva(self.clear_child_tid);
            if self.write_u32(at, 0).is_ok() {
                self.group.futexes.wake(at.raw(), 1, u32::MAX);
            }
        }
        // This thread's hold on the descriptor table goes before the parent can hear of the
        // exit (`leave`): a process's record locks end with its table, and a parent may ask
        // for them as soon as wait4 returns (the rest of the task, its context included, is
        // dropped after, which takes a while on the trap platform).
        self.fds = Arc::new(FdTable::new());
        self.group.leave(self.tid);
        r
    }

    fn run_loop(&mut self) -> Result<ExitStatus, TaskError> {
        if self.in_syscall {
            // Restored inside a call interrupted by the checkpoint's park: once unparked, it
            // runs again, as it would have in the process that was checkpointed.
            if self.control.park_requested() {
                self.park();
            }
            self.in_syscall = false;
            if self.control.signal_pending() {
                self.complete_syscall(self.ctx.user().regs.rax, Err(Errno::EINTR));
            } else {
                self.handle_syscall();
            }
        }
        loop {
            if self.control.park_requested() {
                self.park();
            }
            self.absorb_external_signal();
            // Back to user mode: pending signals first (a handler's frame, or the default action).
            self.deliver_signals()?;
            if let Some(status) = self.exit {
                return Ok(status);
            }
            if let Some(status) = self.group.exit_status() {
                self.exit = Some(status);
                return Ok(status);
            }
            if self.group.execing_thread().is_some_and(|e| e != self.tid) {
                // Another thread's execve replaces the program: this thread ends quietly.
                self.thread_exit_only = true;
                let status = ExitStatus::Exited(0);
                self.exit = Some(status);
                return Ok(status);
            }
            if self.group.job.is_stopped() {
                // Stopped (job control): nothing of the application runs until SIGCONT.
                self.wait_while_stopped();
                continue;
            }
            // Entries this thread added (faults), and what other threads committed. Calls that
            // remove or restrict mappings have already committed theirs (`mm_restrict`); new
            // mappings reach the others lazily (a thread with a stale view faults and commits).
            // A copy-on-write replaced a present entry: like a restriction, the other threads
            // must drop the old (read-only, page-cache) translation. The address space stays
            // locked so that no other thread's page-table write lands in between.
            {
                let mm = self.mm.clone();
                let mut mm = mm.lock().unwrap_or_else(|e| e.into_inner());
                let changes = mm.take_changes();
                let how = if mm.take_replaced() {
                    Commit::Restrict
                } else {
                    Commit::Extend
                };
                self.ctx.commit(changes, how)?;
            }
            let exit = self.ctx.switch()?;
            match exit {
                Exit::Syscall => self.handle_syscall(),
                Exit::Exception(info) => self.handle_exception(info)?,
                Exit::MemoryFault => {
                    // A page of a file truncated below its mapping: SIGBUS, as on Linux
                    // (the faulting address is not known here).
                    tracing::debug!(rip = self.ctx.user().regs.rip, "memory fault: SIGBUS");
                    self.force_signal_info(SigInfo::fault(libc::SIGBUS, signal::BUS_ADRERR, 0));
                }
                Exit::Interrupted => {}
            }
            if let Some(status) = self.exit {
                return Ok(status);
            }
        }
    }

    /// Runs the syscall the vCPU exited for and puts its result in `rax`.
    fn handle_syscall(&mut self) {
        let args = SyscallArgs::from_regs(&self.ctx.user().regs);
        let waits = waits_for_input(args.nr);
        if waits {
            self.control.set_idle(true);
        }
        self.control.set_in_syscall(true);
        let ret = self.dispatch_restarting(&args);
        // Its host calls are done: nothing writes the frames it pinned any more.
        self.pins.get_mut().clear();
        self.control.set_in_syscall(false);
        self.control.set_idle(false);
        if waits && brought_input(args.nr, &ret) {
            self.control.note_input();
        }
        self.complete_syscall(args.nr, ret);
    }

    /// Dispatches a syscall; a blocking host call interrupted by a park request is restarted
    /// once the task is unparked: the application never sees the EINTR.
    fn dispatch_restarting(&mut self, args: &SyscallArgs) -> Result<u64, Errno> {
        loop {
            let r = syscalls::dispatch(self, args);
            if r == Err(Errno::EINTR) && self.control.park_requested() {
                self.in_syscall = true;
                self.park();
                self.in_syscall = false;
                // A process ended while parked (the sandbox deleted while hibernated) is not
                // waited for again: the run loop ends the thread.
                if !self.control.signal_pending() && !self.group.must_leave(self.tid) {
                    continue;
                }
            }
            return r;
        }
    }

    /// Parks the task inside a call that goes on afterwards instead of returning (a wait
    /// whose call already did what cannot be done twice: io_uring_enter after submitting),
    /// as [`dispatch_restarting`](Self::dispatch_restarting) parks a call it runs again.
    /// Returns whether the call may go on: false when a signal came or the process ends.
    pub fn park_in_call(&mut self) -> bool {
        self.in_syscall = true;
        self.park();
        self.in_syscall = false;
        !self.control.signal_pending() && !self.group.must_leave(self.tid)
    }

    /// Puts a syscall's result in `rax` (an EINTR is restarted or not when the signal is
    /// delivered).
    fn complete_syscall(&mut self, nr: u64, ret: Result<u64, Errno>) {
        if ret == Err(Errno::EINTR) {
            self.signals.interrupted_syscall = Some(nr);
        }
        self.ctx.user_mut().regs.rax = match ret {
            Ok(v) => v,
            Err(e) => e.as_return(),
        };
    }

    /// Takes the park request, then runs the park hook (if any) with the task parked, or
    /// waits while another thread of the group hibernates the process.
    fn park(&mut self) {
        // Taken before the hook runs, not withdrawn after it: a request made while the hook
        // ends (the hook tells its waiters the park is over before it returns) is the next
        // park's, not lost (it was, and its requester waited out its timeout while the task
        // blocked in a host call, its kicks finding no request).
        self.control.clear_park();
        // The deflate and the checkpoint write the runtime's files.
        crate::fs::identity::become_runtime();
        if let Some(mut hook) = self.park_hook.take() {
            hook.on_park(&ParkedSandbox::new(self));
            self.park_hook = Some(hook);
        } else {
            // Another thread is hibernating the process: wait until it is done.
            self.group.park_here(|| {
                self.capture()
                    .map_err(|e| format!("thread {}: XSAVE: {e}", self.tid))
            });
        }
    }

    fn handle_exception(&mut self, info: ExceptionInfo) -> Result<(), TaskError> {
        let rip = self.ctx.user().regs.rip;
        let err = info.error_code.unwrap_or(0);
        let fault = |sig, code, addr| SigInfo::fault(sig, code, addr);
        let kernel = SigInfo::kernel;
        let si = match info.vector {
            14 => {
                let access = Access {
                    write: err & 2 != 0,
                    exec: err & 16 != 0,
                };
                let r = self.mm().handle_fault(info.cr2, access);
                let addr = info.cr2.raw();
                match r {
                    Ok(()) => return Ok(()),
                    Err(FaultError::Unmapped) => fault(libc::SIGSEGV, signal::SEGV_MAPERR, addr),
                    Err(FaultError::AccessDenied) => {
                        fault(libc::SIGSEGV, signal::SEGV_ACCERR, addr)
                    }
                    Err(FaultError::Io(_)) => fault(libc::SIGBUS, signal::BUS_ADRERR, addr),
                    Err(FaultError::OutOfMemory) => {
                        match self.group.procs.out_of_memory(self.pid) {
                            process::OomAction::KillSelf => {
                                tracing::warn!(addr = %info.cr2, "out of guest memory: killing the process");
                                kernel(libc::SIGKILL)
                            }
                            process::OomAction::Retry => {
                                // Another process is dying to free memory: the faulting
                                // instruction runs again shortly.
                                std::thread::sleep(std::time::Duration::from_millis(2));
                                return Ok(());
                            }
                        }
                    }
                    Err(e) => return Err(TaskError::Mm(e.to_string())),
                }
            }
            0 => fault(libc::SIGFPE, signal::FPE_INTDIV, rip),
            16 | 19 => fault(libc::SIGFPE, self.fpu_exception_code(info.vector), rip),
            1 => fault(libc::SIGTRAP, signal::TRAP_TRACE, rip),
            3 => kernel(libc::SIGTRAP),
            6 => fault(libc::SIGILL, signal::ILL_ILLOPN, rip),
            11 | 12 => kernel(libc::SIGBUS),
            17 => fault(libc::SIGBUS, signal::BUS_ADRALN, 0),
            _ => kernel(libc::SIGSEGV),
        };
        self.signals.fault = signal::FaultContext {
            trapno: u64::from(info.vector),
            err,
            cr2: if info.vector == 14 {
                info.cr2.raw()
            } else {
                self.signals.fault.cr2
            },
        };
        tracing::debug!(vector = info.vector, addr = %info.cr2, rip, sig = si.signo(), "fault signal");
        self.force_signal_info(si);
        Ok(())
    }

    /// si_code of an x87 (#MF, 16) or SIMD (#XM, 19) floating-point exception, from the
    /// unmasked exception flags (Linux's `fpu__exception_code`).
    fn fpu_exception_code(&self, vector: u8) -> i32 {
        let Ok(x) = self.ctx.fpu() else {
            return 0;
        };
        let err = if vector == 19 {
            let mxcsr = u32::from_le_bytes([x[24], x[25], x[26], x[27]]);
            !(mxcsr >> 7) & mxcsr
        } else {
            let cwd = u32::from(u16::from_le_bytes([x[0], x[1]]));
            let swd = u32::from(u16::from_le_bytes([x[2], x[3]]));
            swd & !cwd
        };
        if err & 0x001 != 0 {
            7 // FPE_FLTINV
        } else if err & 0x004 != 0 {
            3 // FPE_FLTDIV
        } else if err & 0x008 != 0 {
            4 // FPE_FLTOVF
        } else if err & 0x012 != 0 {
            5 // FPE_FLTUND
        } else if err & 0x020 != 0 {
            6 // FPE_FLTRES
        } else {
            0
        }
    }

    /// Applies a signal sent from outside the sandbox (`torpor kill`): queued like any
    /// signal, so it runs the application's handler if there is one, else its default action.
    fn external_signal(&mut self, sig: i32) {
        if !(1..=NSIG as i32).contains(&sig) {
            return;
        }
        if sig == libc::SIGKILL
            || (self.signals.action(sig).handler == signal::SIG_DFL
                && !signal::ignored_by_default(sig))
        {
            tracing::info!(
                sig,
                "external signal with the default action (terminates unless blocked)"
            );
        }
        let info = self
            .control
            .take_info(sig)
            .unwrap_or_else(|| SigInfo::user(sig, signal::SI_USER, 0, 0));
        self.queue_signal(info);
    }

    /// Raises a signal the task cannot block or ignore (kernel-sent, si_code SI_KERNEL): its
    /// handler runs if there is one, else the default action applies.
    pub fn force_signal(&mut self, sig: i32) {
        self.force_signal_info(SigInfo::kernel(sig));
    }

    /// Copies bytes from the application.
    ///
    /// # Errors
    /// EFAULT for a bad address.
    pub fn copy_in(&self, addr: Gva, buf: &mut [u8]) -> Result<(), Errno> {
        self.mm().copy_in(addr, buf).map_err(|e| Errno(e.errno()))
    }

    /// Copies bytes to the application.
    ///
    /// # Errors
    /// EFAULT for a bad address.
    pub fn copy_out(&self, addr: Gva, buf: &[u8]) -> Result<(), Errno> {
        self.mm().copy_out(addr, buf).map_err(|e| Errno(e.errno()))
    }

    /// Reads a NUL-terminated string of at most `max` bytes.
    ///
    /// # Errors
    /// EFAULT for a bad address, ENAMETOOLONG if no NUL within `max`.
    pub fn copy_in_str(&self, addr: Gva, max: usize) -> Result<Vec<u8>, Errno> {
        self.mm()
            .copy_in_str(addr, max)
            .map_err(|e| Errno(e.errno()))
    }

    /// Reads a path argument (at most PATH_MAX).
    ///
    /// # Errors
    /// EFAULT, ENAMETOOLONG; ENOENT for an empty path.
    pub fn copy_in_path(&self, addr: Gva) -> Result<Vec<u8>, Errno> {
        let p = self.copy_in_str(addr, libc::PATH_MAX as usize)?;
        if p.is_empty() {
            return Err(Errno::ENOENT);
        }
        Ok(p)
    }

    /// Reads one ABI structure (any [`abi::Pod`] type) whole.
    ///
    /// # Errors
    /// EFAULT for a bad address.
    pub fn read_val<T: abi::Pod>(&self, addr: Gva) -> Result<T, Errno> {
        let mut b = vec![0u8; std::mem::size_of::<T>()];
        self.copy_in(addr, &mut b)?;
        abi::pod::from_bytes(&b).ok_or(Errno::EFAULT)
    }

    /// Writes one ABI structure whole.
    ///
    /// # Errors
    /// EFAULT for a bad address.
    pub fn write_val<T: abi::Pod>(&self, addr: Gva, v: &T) -> Result<(), Errno> {
        self.copy_out(addr, abi::pod::as_bytes(v))
    }

    /// Reads a little-endian u64.
    ///
    /// # Errors
    /// EFAULT.
    pub fn read_u64(&self, addr: Gva) -> Result<u64, Errno> {
        let mut b = [0u8; 8];
        self.copy_in(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Writes a little-endian u64.
    ///
    /// # Errors
    /// EFAULT.
    pub fn write_u64(&self, addr: Gva, v: u64) -> Result<(), Errno> {
        self.copy_out(addr, &v.to_le_bytes())
    }

    /// Writes a little-endian u32.
    ///
    /// # Errors
    /// EFAULT.
    pub fn write_u32(&self, addr: Gva, v: u32) -> Result<(), Errno> {
        self.copy_out(addr, &v.to_le_bytes())
    }

    /// The guest-physical runs behind a user buffer, faulted in for reading or writing. The
    /// runs of a buffer to write stay pinned until the syscall ends where a fork by another
    /// thread could share them meanwhile (a platform whose forks share memory, a process
    /// with other threads): the host call writes them after the lock is dropped.
    ///
    /// # Errors
    /// EFAULT.
    pub fn user_ranges(
        &self,
        addr: Gva,
        len: u64,
        write: bool,
    ) -> Result<Vec<(platform::Gpa, u64)>, Errno> {
        // Asked before the address space is locked: the thread group's members are above it
        // in the lock order. Only this thread could add one before its call is done.
        let pin =
            write && self.group.platform.address_spaces_share_memory() && self.group.live() > 1;
        let mut mm = self.mm();
        let runs = mm
            .user_ranges(addr, len, write)
            .map_err(|e| Errno(e.errno()))?;
        if pin {
            self.pins.borrow_mut().push(mm.pin(&runs));
        }
        Ok(runs)
    }
}

/// argv as /proc/PID/cmdline shows it: each argument followed by a NUL.
pub fn cmdline_of(argv: &[Vec<u8>]) -> Arc<[u8]> {
    let mut v = Vec::new();
    for a in argv {
        v.extend_from_slice(a);
        v.push(0);
    }
    v.into()
}
