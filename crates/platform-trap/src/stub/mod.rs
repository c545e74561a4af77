//! The holder's side of a stub: spawning the stub process, mapper commands, application
//! threads and one `switch`.
//!
//! # Spawning
//! In two halves, so that the stub factory ([`crate::factory`]) can run the first and the
//! holder the second: [`StubTemplate::new`] checks the host and prepares everything that does
//! not depend on the guest memory (both seccomp programs' page images, signal actions and
//! masks, glibc's rseq registration of the calling thread); `spawn_parts` then, allocation-free
//! (it may run in a process forked from a multi-threaded one), creates the control memfd (command
//! page, filters) and the reply socketpair and forks the stub with `clone3` (`CLONE_PIDFD`, exit
//! signal 0; with `CLONE_PARENT` from the factory, so that the holder is the stub's parent);
//! [`StubProcess::from_parts`] maps the control memfd in the holder and waits for the stub's
//! ready report. [`StubProcess::spawn`] runs all three in the calling thread.
//!
//! The child, with raw system calls only (no allocation, no libc state, no locks):
//! `PR_SET_PDEATHSIG(SIGKILL)` (then checks its parent is still the holder),
//! `PR_SET_NO_NEW_PRIVS`, `RLIMIT_CORE = 0`, `RLIMIT_NOFILE` = [`STUB_NOFILE`] (or its hard
//! limit, if lower: it reports the limit it got), unregisters glibc's rseq area and robust list
//! (both in memory about to vanish), disables the inherited alternate stack, resets every
//! signal action to the default and points SIGSYS, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP and
//! the kick signal at the stub's handler (`SA_SIGINFO|SA_ONSTACK|SA_RESTORER`, every signal
//! blocked while it runs), blocks every asynchronous signal, moves the control memfd to fd 3,
//! the guest memfd to fd 4 and its end of the reply socketpair to fd 5 and closes every other
//! descriptor, moves the host's vDSO to [`VDSO_ADDR`] ([`crate::vdso`]), copies the stub code
//! into a temporary anonymous mapping below the region and jumps there. The stub code
//! ([`asm`]) then unmaps everything else, rebuilds its region at [`STUB_BASE`], installs
//! the base filter and reports ready. A set-up failure kills the child; [`StubProcess::from_parts`] reports it.
//!
//! `PR_SET_PDEATHSIG` fires when the parent *thread* exits: a stub from
//! [`StubProcess::spawn`] dies with the thread that spawned it, and inherits that thread's
//! seccomp filters. The runtime uses [`crate::factory::StubFactory`] instead (design §3.1).
//!
//! # Waiting
//! Every wait of the holder on a sysmsg state word is a `FUTEX_WAIT` with a 50 ms timeout in
//! a loop that polls the stub's pidfd after each timeout; mapper commands wait in `poll` on
//! the reply socket and the pidfd together. A dead stub turns into [`TrapError::StubDied`]
//! (within 50 ms), never a hang. Mapper commands and thread starts also have a 10 s deadline
//! ([`TrapError::Timeout`]).
//!
//! # Memory shared with the stub
//! The holder maps the whole control memfd. Everything in it that the stub can write (reply
//! page, every sysmsg area) is also writable by application code, so the holder accesses it
//! only through volatile reads and writes and atomics, copies a report out once and
//! validates it; outcomes that matter for isolation (mapper success) come from the reply
//! socket instead.
//!
//! # Shared windows
//! Guest pages that live outside the guest memfd (a file the application mapped shared, the
//! memfd of a shared anonymous or SysV object, page-cache pages of a library) are mapped from
//! *windows*: host descriptors the stub holds in per-stub slots ([`WindowSlot`]), read-only
//! slots at descriptors `WINDOW_FD_BASE..WINDOW_RW_BASE` (64..544) and writable ones at
//! `WINDOW_RW_BASE..WINDOW_FD_END` (544..1024). [`StubProcess::attach_window`] picks a free slot,
//! sends the descriptor over the reply socketpair (`SCM_RIGHTS`; the stub holds its end at
//! [`REPLY_FD`] in both spawn paths) and has the mapper `recvmsg` it (it lands at [`RECV_FD`],
//! the lowest free descriptor), `dup3` it to the slot and close the received copy;
//! [`StubProcess::map_window`] has the mapper `mmap` a range of it (`MAP_SHARED|MAP_FIXED`);
//! [`StubProcess::detach_window`] has it `close` the slot, which is then free again (mappings
//! made from it stay). A read-only slot is never mapped with `PROT_WRITE`: the holder refuses it,
//! and so does the base filter ([`crate::filter`]); where it can, the holder also attaches a
//! read-only window through a read-only open file, so that the kernel itself refuses write
//! access, also through a later `mprotect`.

pub(crate) mod asm;
#[cfg(test)]
mod tests;

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use platform::{Regs, UserContext};

use crate::filter::{self, SockFilter};
use crate::sys::{self, raw, Mapping};
use crate::sysmsg::*;
use crate::{host, TrapError, TrapExit};

/// The holder's default spin before it sleeps in [`StubThread::switch`], used only when the
/// stub thread runs on another CPU. Measured here (2 vCPUs, no guest halt polling): a
/// cross-CPU round trip drops from 30-45 µs to 2.5-3 µs; on one CPU nothing changes.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(10);
/// The stub handler's default spin (`pause` iterations, ~26 ns each here: ~13 µs) before it
/// sleeps, used only when the holder runs on another CPU.
pub const DEFAULT_STUB_SPIN: u64 = 500;

/// How long a holder-side futex wait sleeps before it checks that the stub still lives.
const LIVENESS_POLL: Duration = Duration::from_millis(50);
/// Deadline of a mapper command and of a thread start.
const COMMAND_DEADLINE: Duration = Duration::from_secs(10);

/// `FP_XSTATE_MAGIC1`, in the software-reserved bytes of a signal frame's XSAVE image.
const FP_XSTATE_MAGIC1: u32 = 0x4650_5853;

/// What the stub process and all its threads share on the holder side.
struct Shared {
    pid: i32,
    pidfd: OwnedFd,
    /// The holder's mapping of the control memfd.
    ctrl: Mapping,
    /// The holder's end of the reply socketpair: the mapper sends one 8-byte message (1 or 2)
    /// per command; the holder sends window descriptors the other way.
    reply_sock: OwnedFd,
    /// The last mapper command's sequence number (the lock serialises commands, and a window
    /// descriptor's send with the command that receives it).
    mapper: Mutex<u32>,
    /// The mapper thread's CPU pin ([`crate::pair::MapperPin`]).
    mapper_pin: Mutex<crate::pair::MapperPin>,
    /// Which window slots are attached.
    windows: Mutex<Windows>,
    /// The stub's `RLIMIT_NOFILE`, as it reported before it ran anything of the application's
    /// (set once the stub is ready): slots at or above it cannot be used.
    nofile: AtomicU64,
    /// Which sysmsg slots hold a thread.
    slots: Mutex<Vec<bool>>,
    /// The host's XSAVE image size (what signal frames carry).
    xsave_size: usize,
    /// XCR0: the features an XSAVE image may hold.
    xcr0: u64,
    /// The MXCSR bits the CPU supports.
    mxcsr_mask: u32,
    /// Offsets of the stub code's labels.
    meta: asm::Meta,
    /// Set once the stub is known dead.
    dead: AtomicBool,
}

impl Shared {
    fn alive(&self) -> Result<(), TrapError> {
        if self.dead.load(Ordering::Relaxed) {
            return Err(TrapError::StubDied);
        }
        if sys::pidfd_exited(self.pidfd.as_fd()) {
            self.dead.store(true, Ordering::Relaxed);
            return Err(TrapError::StubDied);
        }
        Ok(())
    }

    /// Waits until `done(*word)`, sleeping on the word; spins first for `spin`. With
    /// `waiting`, sets that flag before sleeping (the other side wakes the holder only when it
    /// is set) and clears it after. With `long_wait`, calls it once if the wait lasts longer
    /// than its duration. Fails if the stub dies or the deadline passes.
    fn wait_until(
        &self,
        word: &AtomicU32,
        done: impl Fn(u32) -> bool,
        spin: Duration,
        deadline: Option<Instant>,
        waiting: Option<&AtomicU32>,
        mut long_wait: Option<(Duration, &mut dyn FnMut())>,
    ) -> Result<u32, TrapError> {
        let v = word.load(Ordering::Acquire);
        if done(v) {
            return Ok(v);
        }
        let start = Instant::now();
        if !spin.is_zero() {
            loop {
                for _ in 0..64 {
                    std::hint::spin_loop();
                    let v = word.load(Ordering::Acquire);
                    if done(v) {
                        return Ok(v);
                    }
                }
                if start.elapsed() >= spin {
                    break;
                }
            }
        }
        if let Some(w) = waiting {
            // A full barrier between this store and the load below (the stub does the same
            // with its state store and its load of this flag): one side sees the other.
            w.swap(1, Ordering::SeqCst);
        }
        let r = loop {
            let v = word.load(Ordering::SeqCst);
            if done(v) {
                break Ok(v);
            }
            let mut timeout = LIVENESS_POLL;
            if let Some((after, _)) = &long_wait {
                timeout = timeout.min(after.saturating_sub(start.elapsed()));
            }
            let r = sys::futex_wait(word, v, Some(timeout));
            if r == -i64::from(libc::ETIMEDOUT) {
                if long_wait
                    .as_ref()
                    .is_some_and(|(after, _)| start.elapsed() >= *after)
                {
                    if let Some((_, f)) = long_wait.take() {
                        f();
                    }
                    continue;
                }
                if let Err(e) = self.alive() {
                    break Err(e);
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break Err(TrapError::Timeout);
                }
            }
        };
        if let Some(w) = waiting {
            w.store(0, Ordering::Relaxed);
        }
        r
    }

    /// Which window slots are attached (the lock held).
    fn windows(&self) -> std::sync::MutexGuard<'_, Windows> {
        self.windows.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`TrapError::Invalid`] unless `slot` is attached.
    fn check_attached(&self, slot: WindowSlot) -> Result<(), TrapError> {
        if self.windows().is_attached(slot) {
            Ok(())
        } else {
            Err(TrapError::Invalid("window slot not attached"))
        }
    }

    /// Runs one mapper command; returns its result on success (a detail the application
    /// could forge: only a new thread's tid is used, and validated).
    fn command(&self, op: u64, args: [u64; 5]) -> Result<i64, TrapError> {
        self.alive()?;
        let mut seq = self.mapper.lock().unwrap_or_else(|e| e.into_inner());
        self.command_locked(&mut seq, op, args)
    }

    /// Sends `fd` to the stub over the reply socket, then runs [`OP_RECV_WINDOW`] for the
    /// slot descriptor `slot_fd`, under one hold of the mapper lock (so that the mapper's
    /// `recvmsg` takes exactly this message).
    fn send_window(&self, fd: BorrowedFd<'_>, slot_fd: u64) -> Result<i64, TrapError> {
        self.alive()?;
        let mut seq = self.mapper.lock().unwrap_or_else(|e| e.into_inner());
        sys::send_with_fds(self.reply_sock.as_fd(), b"torpor-w", &[fd.as_raw_fd()]).map_err(
            |e| match e.raw_os_error() {
                Some(libc::EPIPE | libc::ECONNRESET) => TrapError::StubDied,
                _ => host("sendmsg of a window descriptor")(e),
            },
        )?;
        self.command_locked(&mut seq, OP_RECV_WINDOW, [slot_fd, 0, 0, 0, 0])
    }

    /// [`Shared::command`] with the mapper lock held (`seq` its guarded value).
    fn command_locked(&self, seq: &mut u32, op: u64, args: [u64; 5]) -> Result<i64, TrapError> {
        // SAFETY: sched_getcpu has no preconditions (vDSO getcpu).
        if let Ok(cpu) = u32::try_from(unsafe { libc::sched_getcpu() }) {
            self.mapper_pin
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .follow(self.pid, self.pidfd.as_fd(), cpu);
        }
        let next = seq.wrapping_add(1);
        let c = &self.ctrl;
        c.write_u64(CTRL_FD_CMD + CMD_OP, op);
        for (i, a) in args.iter().enumerate() {
            c.write_u64(CTRL_FD_CMD + CMD_ARGS + 8 * i as u64, *a);
        }
        let seq_word = c.atomic_u32(CTRL_FD_CMD + CMD_SEQ);
        seq_word.store(next, Ordering::Release);
        *seq = next;
        sys::futex_wake(seq_word, 1);
        self.wait_reply(Instant::now() + COMMAND_DEADLINE)
    }

    /// Waits for the mapper's completion on the reply socket (or the stub's death). Success
    /// and failure come from the socket, which only the mapper can write; the value (a new
    /// thread's tid, an errno) from the reply page, which the application could forge: on
    /// success the value, on failure [`TrapError::Mapper`] with the errno (clamped to 1..4095).
    fn wait_reply(&self, deadline: Instant) -> Result<i64, TrapError> {
        loop {
            let revents =
                sys::poll_with_pidfd(self.reply_sock.as_fd(), self.pidfd.as_fd(), deadline)
                    .map_err(host("poll"))?;
            if revents[0] & (libc::POLLIN | libc::POLLHUP) != 0 {
                let mut v = 0u64;
                // SAFETY: an 8-byte receive into a local from our socket.
                let n = unsafe {
                    libc::recv(
                        self.reply_sock.as_raw_fd(),
                        (&mut v as *mut u64).cast(),
                        8,
                        libc::MSG_DONTWAIT,
                    )
                };
                if n == 0 {
                    // The stub's end is closed: it is exiting.
                    self.dead.store(true, Ordering::Relaxed);
                    return Err(TrapError::StubDied);
                }
                if n == 8 {
                    let detail = self.ctrl.read_u64(CTRL_FD_REPLY + REPLY_RESULT) as i64;
                    return match v {
                        1 => Ok(detail),
                        2 => Err(TrapError::Mapper(
                            detail.wrapping_neg().clamp(1, 4095) as i32
                        )),
                        _ => Err(TrapError::Protocol("mapper completions")),
                    };
                }
            }
            if revents[1] != 0 {
                self.dead.store(true, Ordering::Relaxed);
                return Err(TrapError::StubDied);
            }
            if revents == [0, 0] {
                // The deadline passed. A late completion would be counted with the next command's: this stub
                // can no longer be trusted to map anything.
                let _ = sys::pidfd_send_signal(self.pidfd.as_fd(), libc::SIGKILL, 0);
                self.dead.store(true, Ordering::Relaxed);
                return Err(TrapError::Timeout);
            }
        }
    }

    fn sysmsg_off(slot: usize) -> u64 {
        CTRL_FD_SYSMSG + slot as u64 * SYSMSG_SIZE
    }
}

/// The holder's record of a stub's window slots: `true` for an attached one.
struct Windows {
    read_only: Vec<bool>,
    writable: Vec<bool>,
}

impl Windows {
    fn new() -> Windows {
        Windows {
            read_only: vec![false; MAX_RO_WINDOWS as usize],
            writable: vec![false; MAX_RW_WINDOWS as usize],
        }
    }

    /// Takes the first free slot of the kind whose descriptor is below `nofile`.
    fn take(&mut self, writable: bool, nofile: u64) -> Option<WindowSlot> {
        let (table, base) = if writable {
            (&mut self.writable, WINDOW_RW_BASE)
        } else {
            (&mut self.read_only, WINDOW_FD_BASE)
        };
        let i = table.iter().position(|&used| !used)?;
        let fd = base + i as u64;
        if fd >= nofile {
            return None;
        }
        table[i] = true;
        Some(WindowSlot(fd as u32))
    }

    /// The entry of `slot`, if it is a slot at all.
    fn entry(&mut self, slot: WindowSlot) -> Option<&mut bool> {
        let fd = u64::from(slot.0);
        if (WINDOW_FD_BASE..WINDOW_RW_BASE).contains(&fd) {
            self.read_only.get_mut((fd - WINDOW_FD_BASE) as usize)
        } else if (WINDOW_RW_BASE..WINDOW_FD_END).contains(&fd) {
            self.writable.get_mut((fd - WINDOW_RW_BASE) as usize)
        } else {
            None
        }
    }

    fn is_attached(&mut self, slot: WindowSlot) -> bool {
        self.entry(slot).is_some_and(|used| *used)
    }

    fn release(&mut self, slot: WindowSlot) {
        if let Some(used) = self.entry(slot) {
            *used = false;
        }
    }
}

/// A shared-window slot of one stub ([`StubProcess::attach_window`]): a descriptor number in
/// that stub, read-only (`64..544`) or writable (`544..1024`). Valid for the stub that gave it
/// until [`StubProcess::detach_window`]; after that, the same value may name another window
/// attached later (like a descriptor number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WindowSlot(u32);

impl WindowSlot {
    /// The slot's descriptor number in the stub.
    pub fn fd(self) -> u32 {
        self.0
    }

    /// Whether the slot is a writable one (mappable with `PROT_WRITE`).
    pub fn is_writable(self) -> bool {
        u64::from(self.0) >= WINDOW_RW_BASE
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SIGKILL, wait for the exit through the pidfd, then reap if this process is the
        // parent and reaps its children itself (the stub's exit signal is 0: only this waitid
        // sees it). A blocking waitid would never return where SIGCHLD is ignored (children
        // are reaped by the kernel) and other children live on.
        let _ = sys::pidfd_send_signal(self.pidfd.as_fd(), libc::SIGKILL, 0);
        if !sys::pidfd_wait(self.pidfd.as_fd(), Duration::from_secs(5)) {
            tracing::warn!(
                pid = self.pid,
                "trap: a killed stub did not exit within 5 s"
            );
            return;
        }
        sys::pidfd_reap(self.pidfd.as_fd(), libc::WNOHANG);
    }
}

/// One guest address space: a stub process holding the guest's mappings and threads.
pub struct StubProcess {
    shared: Arc<Shared>,
}

/// Everything the child needs between `clone3` and the jump, prepared before the fork.
#[repr(C)]
struct ChildPlan {
    holder_pid: i64,
    ctrl_fd: i32,
    mem_fd: i32,
    reply_fd: i32,
    /// The holder's mapping of the reply page (the child reports set-up failures there).
    reply: *mut u8,
    blob: *const u8,
    blob_len: usize,
    temp_len: usize,
    init_off: usize,
    rseq_area: u64,
    /// Lengths glibc may have registered the area with (0: none registered).
    rseq_lens: [u64; 4],
    act: KSigaction,
    dfl: KSigaction,
    mask: u64,
    no_core: libc::rlimit,
    no_altstack: libc::stack_t,
    /// The host vDSO's mappings to move: `(from, length, to)`; `vdso_moves` of them.
    vdso: [(u64, u64, u64); crate::vdso::MAX_PIECES],
    vdso_moves: usize,
}

/// The kernel's `struct sigaction` (x86-64).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct KSigaction {
    pub(crate) handler: u64,
    pub(crate) flags: u64,
    pub(crate) restorer: u64,
    pub(crate) mask: u64,
}

/// The kernel's `struct clone_args` (version 0).
#[repr(C)]
pub(crate) struct CloneArgs {
    pub(crate) flags: u64,
    pub(crate) pidfd: u64,
    pub(crate) child_tid: u64,
    pub(crate) parent_tid: u64,
    pub(crate) exit_signal: u64,
    pub(crate) stack: u64,
    pub(crate) stack_size: u64,
    pub(crate) tls: u64,
}

/// Which side of [`fork_with_pidfd`] returned.
pub(crate) enum Forked {
    /// The new process.
    Child,
    /// The caller, with the new process's pid and pidfd.
    Parent { pid: i32, pidfd: sys::Fd },
}

/// A fork-like `clone3` (no `CLONE_VM`, no new stack, exit signal 0) with `CLONE_PIDFD` and
/// `flags`; `Err(errno)` if it fails. Allocation-free.
///
/// # Safety
/// The child is a copy of this process with only the calling thread in it: on
/// [`Forked::Child`] the caller must run only code that neither allocates nor takes a lock
/// another thread of this process might have held at the fork, and end the process itself.
pub(crate) unsafe fn fork_with_pidfd(flags: u64) -> Result<Forked, i32> {
    let mut pidfd: i32 = -1;
    let args = CloneArgs {
        flags: libc::CLONE_PIDFD as u64 | flags,
        pidfd: &mut pidfd as *mut i32 as u64,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: 0,
        stack: 0,
        stack_size: 0,
        tls: 0,
    };
    // SAFETY: a fork-like clone3 (no CLONE_VM, no stack): the child gets a copy of this
    // process and, by this function's contract, runs only what its caller may run there.
    let pid = unsafe {
        raw(
            libc::SYS_clone3,
            [
                &args as *const CloneArgs as u64,
                size_of::<CloneArgs>() as u64,
                0,
                0,
                0,
                0,
            ],
        )
    };
    match pid {
        0 => Ok(Forked::Child),
        p if p < 0 => Err(-p as i32),
        p => {
            // SAFETY: clone3 stored a new pidfd we own.
            let pidfd = unsafe { sys::Fd::from_raw(pidfd) };
            Ok(Forked::Parent {
                pid: p as i32,
                pidfd,
            })
        }
    }
}

const SA_RESTORER: u64 = 0x0400_0000;
const RSEQ_SIG: u64 = 0x5305_3053;

/// glibc's rseq registration of the calling thread: (area address, `__rseq_size`), or size 0
/// if this libc registers none or does not say (looked up at run time: glibc ≥ 2.35 exports
/// `__rseq_offset`/`__rseq_size`; other libcs do not).
fn rseq_registration() -> (u64, u32) {
    // SAFETY: dlsym with RTLD_DEFAULT and valid C strings; the symbols, when present, are
    // glibc's read-only `ptrdiff_t __rseq_offset` and `unsigned int __rseq_size`.
    unsafe {
        let off = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr());
        let size = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr());
        if off.is_null() || size.is_null() {
            return (0, 0);
        }
        let (off, size) = (*off.cast::<isize>(), *size.cast::<u32>());
        let tp: u64;
        // The thread pointer: glibc's TCB starts with a pointer to itself.
        core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly));
        (tp.wrapping_add_signed(off as i64), size)
    }
}

fn sigbit(sig: i32) -> u64 {
    1u64 << (sig - 1)
}

/// Set-up steps of the child, reported in [`REPLY_STAGE`].
const STAGE_NAMES: [&str; 13] = [
    "none",
    "PR_SET_PDEATHSIG / parent check",
    "PR_SET_NO_NEW_PRIVS",
    "RLIMIT_CORE / RLIMIT_NOFILE",
    "rseq unregistration",
    "sigaltstack",
    "rt_sigaction",
    "rt_sigprocmask",
    "descriptors",
    "temporary code mapping",
    "mprotect of the temporary code",
    "robust list",
    "vDSO move",
];

/// The child between `clone3` and the jump into the stub code.
///
/// # Safety
/// Only in the child of `clone3`, with `p` prepared by the holder.
unsafe fn child_main(p: &ChildPlan) -> ! {
    let fail = |stage: u32, ret: i64| -> ! {
        // SAFETY: the reply page of the inherited shared mapping; then exit.
        unsafe {
            p.reply
                .add(REPLY_ERRNO as usize)
                .cast::<i64>()
                .write_volatile(ret);
            p.reply
                .add(REPLY_STAGE as usize)
                .cast::<u32>()
                .write_volatile(stage);
            raw(
                libc::SYS_exit_group,
                [100 + u64::from(stage), 0, 0, 0, 0, 0],
            );
        }
        #[allow(clippy::empty_loop)]
        loop {}
    };
    // SAFETY: raw system calls on this process only, with pointers into `p`
    // and this stack; the memory they affect (signal state, descriptors, new mappings) is
    // this child's.
    unsafe {
        let r = raw(
            libc::SYS_prctl,
            [
                libc::PR_SET_PDEATHSIG as u64,
                libc::SIGKILL as u64,
                0,
                0,
                0,
                0,
            ],
        );
        if r < 0 {
            fail(1, r);
        }
        let ppid = raw(libc::SYS_getppid, [0; 6]);
        if ppid != p.holder_pid {
            fail(1, ppid);
        }
        let r = raw(
            libc::SYS_prctl,
            [libc::PR_SET_NO_NEW_PRIVS as u64, 1, 0, 0, 0, 0],
        );
        if r < 0 {
            fail(2, r);
        }
        let r = raw(
            libc::SYS_setrlimit,
            [
                libc::RLIMIT_CORE as u64,
                &p.no_core as *const libc::rlimit as u64,
                0,
                0,
                0,
                0,
            ],
        );
        if r < 0 {
            fail(3, r);
        }
        // RLIMIT_NOFILE: room for every window slot and no more (a lower hard limit stays);
        // reported to the holder, which reads it before any application code runs.
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let r = raw(
            libc::SYS_prlimit64,
            [
                0,
                libc::RLIMIT_NOFILE as u64,
                0,
                &mut lim as *mut libc::rlimit as u64,
                0,
                0,
            ],
        );
        if r < 0 {
            fail(3, r);
        }
        let nofile = lim.rlim_max.min(STUB_NOFILE);
        lim = libc::rlimit {
            rlim_cur: nofile,
            rlim_max: nofile,
        };
        let r = raw(
            libc::SYS_prlimit64,
            [
                0,
                libc::RLIMIT_NOFILE as u64,
                &lim as *const libc::rlimit as u64,
                0,
                0,
                0,
            ],
        );
        if r < 0 {
            fail(3, r);
        }
        p.reply
            .add(REPLY_NOFILE as usize)
            .cast::<u64>()
            .write_volatile(nofile);
        if p.rseq_lens[0] != 0 {
            // glibc registered `rseq_area` with a length this code cannot read back: try the
            // lengths glibc versions use. The kernel would write to it after it is unmapped.
            let mut r = -1;
            for len in p.rseq_lens {
                r = raw(libc::SYS_rseq, [p.rseq_area, len, 1, RSEQ_SIG, 0, 0]);
                if r == 0 {
                    break;
                }
            }
            if r != 0 {
                fail(4, r);
            }
        }
        let r = raw(libc::SYS_set_robust_list, [0, 24, 0, 0, 0, 0]);
        if r < 0 {
            fail(11, r);
        }
        let r = raw(
            libc::SYS_sigaltstack,
            [&p.no_altstack as *const libc::stack_t as u64, 0, 0, 0, 0, 0],
        );
        if r < 0 {
            fail(5, r);
        }
        for sig in 1..=64i32 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let act = if HANDLED_SIGNALS.contains(&sig) {
                &p.act
            } else {
                &p.dfl
            };
            let r = raw(
                libc::SYS_rt_sigaction,
                [sig as u64, act as *const KSigaction as u64, 0, 8, 0, 0],
            );
            if r < 0 && HANDLED_SIGNALS.contains(&sig) {
                fail(6, r);
            }
        }
        let r = raw(
            libc::SYS_rt_sigprocmask,
            [
                libc::SIG_SETMASK as u64,
                &p.mask as *const u64 as u64,
                0,
                8,
                0,
                0,
            ],
        );
        if r < 0 {
            fail(7, r);
        }
        // Descriptors: control memfd → 3, guest memfd → 4, reply socket → 5, nothing else.
        // (First above 10, so that moving one does not close another.)
        let mut high = [0i64; 3];
        for (h, fd) in high.iter_mut().zip([p.ctrl_fd, p.mem_fd, p.reply_fd]) {
            *h = raw(
                libc::SYS_fcntl,
                [fd as u64, libc::F_DUPFD as u64, 10, 0, 0, 0],
            );
            if *h < 0 {
                fail(8, *h);
            }
        }
        for (h, fd) in high.iter().zip([CTRL_FD, MEM_FD, REPLY_FD]) {
            let r = raw(libc::SYS_dup2, [*h as u64, fd, 0, 0, 0, 0]);
            if r < 0 {
                fail(8, r);
            }
        }
        let r1 = raw(libc::SYS_close_range, [0, CTRL_FD - 1, 0, 0, 0, 0]);
        let r2 = raw(
            libc::SYS_close_range,
            [REPLY_FD + 1, u64::from(u32::MAX), 0, 0, 0, 0],
        );
        if r1 < 0 || r2 < 0 {
            fail(8, r1.min(r2));
        }
        // The host's vDSO into the stub's region (see `crate::vdso`).
        for &(from, len, to) in &p.vdso[..p.vdso_moves] {
            let r = raw(
                libc::SYS_mremap,
                [
                    from,
                    len,
                    len,
                    (libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED) as u64,
                    to,
                    0,
                ],
            );
            if r != to as i64 {
                fail(12, r);
            }
        }
        // A temporary copy of the stub code, below the final region (the init code unmaps
        // everything else but the region's vDSO part): at TEMP_CODE_ADDR or lower, in 16 MiB
        // steps, if that is taken (a large mapping of the holder's may cover it), else at
        // one of a few places far below, where a process maps nothing of its own.
        const FAR: [u64; 3] = [0x4000_0000_0000, 0x1000_0000_0000, 0x10_0000_0000];
        let mut temp = 0u64;
        for i in 0..64u64 {
            let base = match i / 16 {
                0 => TEMP_CODE_ADDR,
                k => FAR[(k - 1) as usize],
            };
            let want = base - (i % 16) * 0x100_0000;
            let t = raw(
                libc::SYS_mmap,
                [
                    want,
                    p.temp_len as u64,
                    (libc::PROT_READ | libc::PROT_WRITE) as u64,
                    (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE) as u64,
                    u64::MAX,
                    0,
                ],
            );
            if t == want as i64 {
                temp = want;
                break;
            }
            if t != -i64::from(libc::EEXIST) {
                fail(9, t);
            }
        }
        if temp == 0 {
            fail(9, 0);
        }
        let dst = temp as *mut u8;
        for i in 0..p.blob_len {
            dst.add(i).write_volatile(p.blob.add(i).read());
        }
        let r = raw(
            libc::SYS_mprotect,
            [
                temp,
                p.temp_len as u64,
                (libc::PROT_READ | libc::PROT_EXEC) as u64,
                0,
                0,
                0,
            ],
        );
        if r < 0 {
            fail(10, r);
        }
        core::arch::asm!(
            "jmp {entry}",
            entry = in(reg) temp + p.init_off as u64,
            in("rdi") temp,
            in("rsi") p.temp_len as u64,
            in("rdx") p.blob_len as u64,
            options(noreturn),
        );
    }
}

/// Everything about spawning a stub that does not depend on the guest memory, checked and
/// computed once: building it allocates (and looks glibc's rseq symbols up with `dlsym`),
/// using it in [`spawn_parts`] does not. It is plain data, owning nothing on the heap.
///
/// The rseq registration it records is the *calling thread's*: [`spawn_parts`] must run on
/// that thread or on a `fork` copy of it, or on a template [`StubTemplate::without_rseq`]
/// (the stub factory's: it shares the holder's memory, and the kernel gives such a process no
/// rseq registration).
#[derive(Clone, Copy)]
pub(crate) struct StubTemplate {
    pub(crate) xsave_size: usize,
    blob: &'static [u8],
    meta: asm::Meta,
    /// The base filter's page image (`struct sock_fprog` then the instructions).
    base_filter: FilterImage,
    /// The application threads' filter, likewise.
    app_filter: FilterImage,
    rseq_area: u64,
    rseq_lens: [u64; 4],
    act: KSigaction,
    mask: u64,
    /// The host's vDSO, which every stub gets at [`VDSO_ADDR`].
    vdso: Option<crate::vdso::HostVdso>,
}

impl StubTemplate {
    /// This template for a process that has no rseq registration to undo: one that shares
    /// its parent's memory (`CLONE_VM`), which the kernel registers none for.
    pub(crate) fn without_rseq(self) -> StubTemplate {
        StubTemplate {
            rseq_area: 0,
            rseq_lens: [0; 4],
            ..self
        }
    }

    /// Checks the host and prepares the pieces of every stub spawn.
    ///
    /// # Errors
    /// [`TrapError::Unsupported`] without FSGSBASE for user space, with an XSAVE image too
    /// large for a sysmsg area, signal frames too large for the alternate stack, or stub code
    /// larger than its region.
    pub(crate) fn new() -> Result<StubTemplate, TrapError> {
        if sys::auxval(sys::AT_HWCAP2) & sys::HWCAP2_FSGSBASE == 0 {
            return Err(TrapError::Unsupported(
                "FSGSBASE is not enabled for user space",
            ));
        }
        let xsave_size = sys::xsave_size().ok_or(TrapError::Unsupported("no XSAVE"))?;
        if xsave_size as u64 > XSAVE_MAX || xsave_size < 576 {
            return Err(TrapError::Unsupported(
                "XSAVE image larger than a sysmsg area holds",
            ));
        }
        let minsig = sys::auxval(sys::AT_MINSIGSTKSZ);
        if minsig + 4096 > ALTSTACK_SIZE {
            return Err(TrapError::Unsupported(
                "signal frames larger than the alternate stack",
            ));
        }
        let blob = asm::blob();
        if blob.len() as u64 > CODE_SIZE {
            return Err(TrapError::Unsupported("stub code larger than its region"));
        }
        let meta = asm::meta();
        let handler_mask = HANDLED_SIGNALS
            .iter()
            .filter(|&&s| s != KICK_SIGNAL)
            .fold(0, |m, &s| m | sigbit(s));
        let (rseq_area, rseq_size) = rseq_registration();
        // glibc 2.35-2.39 register 32 bytes with `__rseq_size` 20; later ones the kernel's
        // feature size (AT_RSEQ_FEATURE_SIZE) rounded up to its alignment (AT_RSEQ_ALIGN).
        let feature = sys::auxval(27).next_multiple_of(sys::auxval(28).max(32));
        let rseq_lens = match rseq_size {
            0 => [0; 4],
            n => [u64::from(n), 32, 20, feature.max(32)],
        };
        Ok(StubTemplate {
            xsave_size,
            blob,
            meta,
            base_filter: filter_image(CTRL_FD_BASE_FILTER, &filter::base_filter(&meta)),
            app_filter: filter_image(CTRL_FD_APP_FILTER, &filter::app_filter(&meta)),
            rseq_area,
            rseq_lens,
            act: KSigaction {
                handler: CODE_ADDR + meta.handler,
                flags: (libc::SA_SIGINFO | libc::SA_ONSTACK) as u64 | SA_RESTORER,
                restorer: CODE_ADDR + meta.restorer,
                mask: u64::MAX,
            },
            mask: !handler_mask,
            vdso: crate::vdso::HostVdso::find(),
        })
    }
}

/// What a holder needs to drive a freshly spawned stub (which may still be setting itself
/// up: [`StubProcess::from_parts`] waits for it).
pub(crate) struct StubParts {
    /// The stub's pid, as the holder's PID namespace sees it.
    pub(crate) pid: i32,
    /// A pidfd of the stub.
    pub(crate) pidfd: sys::Fd,
    /// The control memfd (command page, filters, reply page, sysmsg areas).
    pub(crate) ctrl_fd: sys::Fd,
    /// The holder's end of the reply socketpair.
    pub(crate) reply_sock: sys::Fd,
}

/// The host calls of [`spawn_parts`], by [`SpawnError::call`].
pub(crate) const SPAWN_CALLS: [&str; 6] = [
    "memfd_create",
    "ftruncate",
    "mmap",
    "socketpair",
    "clone3",
    "fcntl(F_ADD_SEALS)",
];

/// A failed host call of [`spawn_parts`] (plain data: it crosses the factory's socket).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpawnError {
    /// Index in [`SPAWN_CALLS`].
    pub(crate) call: u8,
    /// The errno.
    pub(crate) errno: i32,
}

impl SpawnError {
    /// `SpawnError` of `call` with the errno of `e` (`EIO` if it has none).
    fn io(call: u8, e: std::io::Error) -> SpawnError {
        SpawnError {
            call,
            errno: e.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    /// The call's name.
    pub(crate) fn call_name(self) -> &'static str {
        SPAWN_CALLS.get(self.call as usize).copied().unwrap_or("?")
    }
}

impl From<SpawnError> for TrapError {
    fn from(e: SpawnError) -> TrapError {
        TrapError::Host {
            call: e.call_name(),
            source: std::io::Error::from_raw_os_error(e.errno),
        }
    }
}

/// Forks a stub for the guest memory `memory` and returns its parts at once, without waiting
/// for its set-up. The child's parent is the caller's process, or with `clone_parent` the
/// caller's own parent (`CLONE_PARENT`: the stub factory hands its stubs to the holder); its
/// `PR_SET_PDEATHSIG` then checks that its parent is `parent_pid`.
///
/// Allocation-free, lock-free and free of libc's thread state (raw system calls only, the
/// template's prepared data), so that a process forked from a multi-threaded one may call it,
/// and the stub factory, which shares the holder's memory but not its threads.
pub(crate) fn spawn_parts(
    t: &StubTemplate,
    memory: BorrowedFd<'_>,
    parent_pid: i32,
    clone_parent: bool,
) -> Result<StubParts, SpawnError> {
    // The control memfd: command page, filters, reply page, sysmsg areas.
    // SAFETY: a valid C string; the flags are known.
    let fd = sys::check(unsafe {
        raw(
            libc::SYS_memfd_create,
            [
                c"torpor-stub-ctrl".as_ptr() as u64,
                u64::from(libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING),
                0,
                0,
                0,
                0,
            ],
        )
    })
    .map_err(|e| SpawnError::io(0, e))?;
    // SAFETY: a new descriptor we own.
    let ctrl_fd = unsafe { sys::Fd::from_raw(fd as RawFd) };
    // SAFETY: valid descriptor.
    sys::check(unsafe {
        raw(
            libc::SYS_ftruncate,
            [ctrl_fd.as_raw_fd() as u64, CTRL_FD_SIZE, 0, 0, 0, 0],
        )
    })
    .map_err(|e| SpawnError::io(1, e))?;
    // SAFETY: valid descriptor; sealing only restricts later size changes.
    sys::check(unsafe {
        raw(
            libc::SYS_fcntl,
            [
                ctrl_fd.as_raw_fd() as u64,
                libc::F_ADD_SEALS as u64,
                (libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL) as u64,
                0,
                0,
                0,
            ],
        )
    })
    .map_err(|e| SpawnError::io(5, e))?;
    let ctrl = Mapping::shared(ctrl_fd.as_fd(), CTRL_FD_SIZE as usize)
        .map_err(|e| SpawnError::io(2, e))?;
    ctrl.write_u64(CTRL_FD_CMD + CMD_XSAVE_SIZE, t.xsave_size as u64);
    ctrl.write_u64(CTRL_FD_CMD + CMD_STUB_SPIN, DEFAULT_STUB_SPIN);
    ctrl.write_u64(CTRL_FD_CMD + CMD_DONE_OK, 1);
    ctrl.write_u64(CTRL_FD_CMD + CMD_DONE_ERR, 2);
    for (off, image) in [
        (CTRL_FD_BASE_FILTER, &t.base_filter),
        (CTRL_FD_APP_FILTER, &t.app_filter),
    ] {
        for (i, w) in image.words().iter().enumerate() {
            ctrl.write_u64(off + 8 * i as u64, *w);
        }
    }
    // The reply socketpair: [holder's end, stub's end]. SEQPACKET: one completion, one window
    // descriptor per message. The stub's end is closed here once the child has its copy.
    let (reply_sock, stub_sock) = sys::seqpacket_pair().map_err(|e| SpawnError::io(3, e))?;

    let mut plan = ChildPlan {
        holder_pid: i64::from(parent_pid),
        ctrl_fd: ctrl_fd.as_raw_fd(),
        mem_fd: memory.as_raw_fd(),
        reply_fd: stub_sock.as_raw_fd(),
        reply: ctrl.at(CTRL_FD_REPLY),
        blob: t.blob.as_ptr(),
        blob_len: t.blob.len(),
        temp_len: t.blob.len().next_multiple_of(4096),
        init_off: t.meta.init as usize,
        rseq_area: t.rseq_area,
        rseq_lens: t.rseq_lens,
        act: t.act,
        dfl: KSigaction {
            handler: 0,
            flags: 0,
            restorer: 0,
            mask: 0,
        },
        mask: t.mask,
        no_core: libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        },
        no_altstack: libc::stack_t {
            ss_sp: std::ptr::null_mut(),
            ss_flags: libc::SS_DISABLE,
            ss_size: 0,
        },
        vdso: [(0, 0, 0); crate::vdso::MAX_PIECES],
        vdso_moves: 0,
    };
    if let Some(v) = &t.vdso {
        for (slot, m) in plan.vdso.iter_mut().zip(v.moves()) {
            *slot = m;
            plan.vdso_moves += 1;
        }
    }

    let parent_flag = if clone_parent {
        libc::CLONE_PARENT as u64
    } else {
        0
    };
    // Exit signal 0: only a `waitid(__WALL)` (the holder's, in `Shared::drop`) sees the
    // stub's end. With CLONE_PARENT the kernel takes the caller's own exit signal instead
    // (the factory's, 0 too) and refuses any other value.
    // SAFETY: the child runs only `child_main`, which never returns.
    let (pid, pidfd) = match unsafe { fork_with_pidfd(parent_flag) } {
        // SAFETY: in the child, with the plan prepared above.
        Ok(Forked::Child) => unsafe { child_main(&plan) },
        Ok(Forked::Parent { pid, pidfd }) => (pid, pidfd),
        Err(errno) => return Err(SpawnError { call: 4, errno }),
    };
    drop(stub_sock);
    Ok(StubParts {
        pid,
        pidfd,
        ctrl_fd,
        reply_sock,
    })
}

impl StubProcess {
    /// Spawns a stub process for the guest memory `memory` (a memfd the holder created and
    /// sized; guest-physical address = offset in it), forked from the calling thread (see
    /// [`crate::factory::StubFactory`] for stubs that must not inherit the caller's seccomp
    /// filters or die with the calling thread). Returns once the stub is ready for
    /// mapper commands, with nothing mapped below [`USER_END`].
    ///
    /// # Errors
    /// [`TrapError::Unsupported`] without FSGSBASE for user space or with an XSAVE image too
    /// large for a sysmsg area; [`TrapError::Host`] if a host call fails;
    /// [`TrapError::Setup`] if the child failed a set-up step; [`TrapError::StubDied`] if it died.
    pub fn spawn(memory: BorrowedFd<'_>) -> Result<StubProcess, TrapError> {
        let t = StubTemplate::new()?;
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let parts = spawn_parts(&t, memory, pid, false)?;
        StubProcess::from_parts(parts, &t)
    }

    /// Builds the holder's side of a stub from its parts (spawned by this process or by the
    /// stub factory) and waits until the stub is ready: maps the control memfd, checks it is
    /// one `spawn_parts` prepared for this host, waits for the stub's ready report.
    ///
    /// # Errors
    /// [`TrapError::Setup`] if the stub failed a set-up step, [`TrapError::StubDied`] if it
    /// died, [`TrapError::Protocol`] for a control memfd of the wrong size or layout,
    /// [`TrapError::Host`] if mapping it fails.
    pub(crate) fn from_parts(parts: StubParts, t: &StubTemplate) -> Result<StubProcess, TrapError> {
        let StubParts {
            pid,
            pidfd,
            ctrl_fd,
            reply_sock,
        } = parts;
        let (pidfd, ctrl_fd, reply_sock) = (
            OwnedFd::from(pidfd),
            OwnedFd::from(ctrl_fd),
            OwnedFd::from(reply_sock),
        );
        // SAFETY: a zeroed stat for fstat to fill.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor and stat buffer.
        if unsafe { libc::fstat(ctrl_fd.as_raw_fd(), &mut st) } < 0 {
            return Err(host("fstat")(std::io::Error::last_os_error()));
        }
        if st.st_size as u64 != CTRL_FD_SIZE {
            return Err(TrapError::Protocol("control memfd size"));
        }
        let ctrl = Mapping::shared(ctrl_fd.as_fd(), CTRL_FD_SIZE as usize).map_err(host("mmap"))?;
        drop(ctrl_fd);
        let xsave_size = t.xsave_size;
        let shared = Arc::new(Shared {
            pid,
            pidfd,
            ctrl,
            reply_sock,
            mapper: Mutex::new(0),
            mapper_pin: Mutex::default(),
            windows: Mutex::new(Windows::new()),
            nofile: AtomicU64::new(0),
            slots: Mutex::new(vec![false; MAX_THREADS as usize]),
            xsave_size,
            xcr0: sys::user_xfeatures(),
            mxcsr_mask: sys::mxcsr_mask(),
            meta: t.meta,
            dead: AtomicBool::new(false),
        });
        if shared.ctrl.read_u64(CTRL_FD_CMD + CMD_XSAVE_SIZE) != xsave_size as u64 {
            return Err(TrapError::Protocol("control memfd layout"));
        }
        let ready = shared.wait_reply(Instant::now() + COMMAND_DEADLINE);
        let stage = shared.ctrl.read_u32(CTRL_FD_REPLY + REPLY_STAGE);
        if stage != 0 {
            let ret = shared.ctrl.read_u64(CTRL_FD_REPLY + REPLY_ERRNO) as i64;
            let step = STAGE_NAMES.get(stage as usize).copied().unwrap_or("?");
            return Err(TrapError::Setup { step, ret });
        }
        match ready {
            Ok(0) => {}
            Ok(_) => return Err(TrapError::Protocol("stub set-up failed")),
            Err(e) => return Err(e),
        }
        // Written by the child before the stub code ran, so before any application code.
        let nofile = shared
            .ctrl
            .read_u64(CTRL_FD_REPLY + REPLY_NOFILE)
            .min(STUB_NOFILE);
        shared.nofile.store(nofile, Ordering::Relaxed);
        tracing::debug!(
            pid,
            xsave_size,
            nofile,
            blob = t.blob.len(),
            "trap: stub ready"
        );
        Ok(StubProcess { shared })
    }

    /// The stub's process id (for `/proc` and tests).
    pub fn pid(&self) -> i32 {
        self.shared.pid
    }

    /// The host's XSAVE image size: the length of [`StubThread::fpu`].
    pub fn xsave_size(&self) -> usize {
        self.shared.xsave_size
    }

    /// Sets how many `pause` iterations a stub thread spins on its state word before it
    /// sleeps in `FUTEX_WAIT`, when the holder thread ran on another CPU (0: never spin;
    /// default [`DEFAULT_STUB_SPIN`]).
    pub fn set_stub_spin(&self, iterations: u64) {
        self.shared
            .ctrl
            .write_u64(CTRL_FD_CMD + CMD_STUB_SPIN, iterations);
    }

    /// Kills the stub process (SIGKILL): every wait on it, a running
    /// [`StubThread::switch`] included, ends in [`TrapError::StubDied`] within 50 ms. The way
    /// out of a switch that a hostile application keeps from returning (it can write its
    /// threads' state words, or block the kick signal through a forged `rt_sigreturn`).
    pub fn kill(&self) {
        let _ = sys::pidfd_send_signal(self.shared.pidfd.as_fd(), libc::SIGKILL, 0);
    }

    /// Whether the stub process is still alive.
    pub fn is_alive(&self) -> bool {
        self.shared.alive().is_ok()
    }

    fn check_range(gva: u64, len: u64) -> Result<(), TrapError> {
        if (gva | len) & 0xfff != 0 || len == 0 {
            return Err(TrapError::Invalid("unaligned or empty range"));
        }
        match gva.checked_add(len) {
            Some(end) if end <= USER_END => Ok(()),
            _ => Err(TrapError::Invalid("range beyond USER_END")),
        }
    }

    fn check_prot(prot: i32) -> Result<(), TrapError> {
        if prot & !(libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC) != 0 {
            return Err(TrapError::Invalid("protection bits"));
        }
        Ok(())
    }

    /// The checks of a map of the guest memfd: range, protection bits, aligned offset.
    fn check_map(gva: u64, len: u64, offset: u64, prot: i32) -> Result<(), TrapError> {
        Self::check_range(gva, len)?;
        Self::check_prot(prot)?;
        if offset & 0xfff != 0 {
            return Err(TrapError::Invalid("unaligned offset"));
        }
        Ok(())
    }

    /// Maps `len` bytes of the guest memfd from `offset` at `gva` in the stub
    /// (`mmap(MAP_SHARED|MAP_FIXED)`, replacing whatever was there) with `prot`
    /// (`PROT_READ|PROT_WRITE|PROT_EXEC` bits).
    ///
    /// # Errors
    /// [`TrapError::Invalid`] for an unaligned range or one reaching `USER_END`;
    /// [`TrapError::Mapper`] if the stub's `mmap` failed.
    pub fn map(&self, gva: u64, len: u64, offset: u64, prot: i32) -> Result<(), TrapError> {
        Self::check_map(gva, len, offset, prot)?;
        // Success of a MAP_FIXED mmap means mapped at `gva`.
        self.shared
            .command(OP_MAP, [gva, len, prot as u64, offset, 0])
            .map(drop)
    }

    /// [`StubProcess::map`] for each `(gva, len, offset, prot)` of `maps`, in order, with one
    /// mapper command per [`BATCH_MAX`] of them.
    ///
    /// # Errors
    /// As [`StubProcess::map`] (entries before a failed one are mapped).
    pub fn map_many(&self, maps: &[(u64, u64, u64, i32)]) -> Result<(), TrapError> {
        for &(gva, len, offset, prot) in maps {
            Self::check_map(gva, len, offset, prot)?;
        }
        for chunk in maps.chunks(BATCH_MAX as usize) {
            if let [(gva, len, offset, prot)] = *chunk {
                self.map(gva, len, offset, prot)?;
                continue;
            }
            let sh = &self.shared;
            sh.alive()?;
            let mut seq = sh.mapper.lock().unwrap_or_else(|e| e.into_inner());
            for (i, &(gva, len, offset, prot)) in chunk.iter().enumerate() {
                let at = CTRL_FD_CMD + CMD_BATCH + BATCH_ENTRY * i as u64;
                sh.ctrl.write_u64(at, gva);
                sh.ctrl.write_u64(at + 8, len);
                sh.ctrl.write_u64(at + 16, prot as u64);
                sh.ctrl.write_u64(at + 24, offset);
            }
            sh.command_locked(&mut seq, OP_MAP_BATCH, [chunk.len() as u64, 0, 0, 0, 0])?;
        }
        Ok(())
    }

    /// Unmaps `[gva, gva + len)` in the stub.
    ///
    /// # Errors
    /// As [`StubProcess::map`].
    pub fn unmap(&self, gva: u64, len: u64) -> Result<(), TrapError> {
        Self::check_range(gva, len)?;
        self.shared.command(OP_UNMAP, [gva, len, 0, 0, 0]).map(drop)
    }

    /// Changes the protection of `[gva, gva + len)` in the stub.
    ///
    /// # Errors
    /// As [`StubProcess::map`].
    pub fn protect(&self, gva: u64, len: u64, prot: i32) -> Result<(), TrapError> {
        Self::check_range(gva, len)?;
        Self::check_prot(prot)?;
        self.shared
            .command(OP_PROTECT, [gva, len, prot as u64, 0, 0])
            .map(drop)
    }

    /// Attaches a shared window to the stub: sends `fd` (a file the guest maps shared: a
    /// regular file, the memfd of a shared anonymous or SysV object, a library's file) to the
    /// stub, which keeps it in a free slot of the kind asked for until
    /// [`StubProcess::detach_window`]. Map ranges of it with [`StubProcess::map_window`].
    ///
    /// A read-only slot is never mapped with `PROT_WRITE` (the holder and the stub's filter
    /// both refuse it). If `fd` is open for writing, a read-only slot gets a read-only reopening
    /// of it (`/proc/self/fd`) when this process may open that, so that the kernel also refuses
    /// a later `mprotect(PROT_WRITE)` of its mappings; otherwise `fd` itself, and then only the
    /// caller keeps [`StubProcess::protect`] (which knows nothing of windows) from making such
    /// a mapping writable. Pass `O_RDONLY` descriptors for read-only windows where possible.
    ///
    /// # Errors
    /// [`TrapError::TooManyWindows`] if every slot of the kind is attached (480 of each, fewer
    /// if the stub's `RLIMIT_NOFILE` is below 1024); [`TrapError::Invalid`] for a writable
    /// slot of a descriptor not open for writing; [`TrapError::Mapper`] if the stub could not
    /// take it; [`TrapError::Host`] if sending it fails; [`TrapError::StubDied`].
    pub fn attach_window(
        &self,
        fd: BorrowedFd<'_>,
        writable: bool,
    ) -> Result<WindowSlot, TrapError> {
        let sh = &self.shared;
        sh.alive()?;
        // SAFETY: F_GETFL on a borrowed, open descriptor.
        let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
        if flags < 0 {
            return Err(host("fcntl(F_GETFL) of a window")(
                std::io::Error::last_os_error(),
            ));
        }
        let mode = flags & libc::O_ACCMODE;
        if writable && mode != libc::O_RDWR {
            return Err(TrapError::Invalid(
                "a writable window needs a descriptor open for reading and writing",
            ));
        }
        let reopened = if !writable && mode != libc::O_RDONLY {
            reopen_read_only(fd)
        } else {
            None
        };
        let send = reopened.as_ref().map_or(fd, |f| f.as_fd());
        let slot = sh
            .windows()
            .take(writable, sh.nofile.load(Ordering::Relaxed))
            .ok_or(TrapError::TooManyWindows)?;
        match sh.send_window(send, u64::from(slot.0)) {
            Ok(_) => Ok(slot),
            Err(e) => {
                // The dup3 failed (the slot's descriptor is unchanged, free), or the stub is
                // dead.
                sh.windows().release(slot);
                Err(e)
            }
        }
    }

    /// Detaches a window: the stub closes the slot's descriptor and the slot is free for the
    /// next [`StubProcess::attach_window`]. Mappings made from it stay (they hold the file);
    /// unmap or replace them as needed.
    ///
    /// # Errors
    /// [`TrapError::Invalid`] if `slot` is not attached; [`TrapError::Mapper`] if the stub's
    /// `close` failed (the slot is freed anyway: the next attach replaces its descriptor);
    /// [`TrapError::StubDied`].
    pub fn detach_window(&self, slot: WindowSlot) -> Result<(), TrapError> {
        let sh = &self.shared;
        sh.check_attached(slot)?;
        // Freed only once closed: an attach cannot take the slot before this close ran.
        let r = sh.command(OP_CLOSE_WINDOW, [u64::from(slot.0), 0, 0, 0, 0]);
        sh.windows().release(slot);
        r.map(drop)
    }

    /// Maps `len` bytes of the window in `slot` from `file_offset` at `gva` in the stub
    /// (`mmap(MAP_SHARED|MAP_FIXED)`, replacing whatever was there) with `prot`
    /// (`PROT_READ|PROT_WRITE|PROT_EXEC` bits; no `PROT_WRITE` for a read-only slot).
    ///
    /// # Errors
    /// [`TrapError::Invalid`] for an unaligned range or offset, one reaching `USER_END`, a slot
    /// that is not attached, or `PROT_WRITE` on a read-only slot; [`TrapError::Mapper`] if the
    /// stub's `mmap` failed (e.g. `EACCES`, `ENODEV`).
    pub fn map_window(
        &self,
        slot: WindowSlot,
        gva: u64,
        len: u64,
        file_offset: u64,
        prot: i32,
    ) -> Result<(), TrapError> {
        Self::check_range(gva, len)?;
        Self::check_prot(prot)?;
        if file_offset & 0xfff != 0 {
            return Err(TrapError::Invalid("unaligned offset"));
        }
        if prot & libc::PROT_WRITE != 0 && !slot.is_writable() {
            return Err(TrapError::Invalid("PROT_WRITE on a read-only window"));
        }
        self.shared.check_attached(slot)?;
        self.map_window_unchecked(slot, gva, len, file_offset, prot)
    }

    /// The mapper command of [`StubProcess::map_window`], without the holder's checks (tests
    /// use it to show that the stub's filter refuses what the holder would).
    fn map_window_unchecked(
        &self,
        slot: WindowSlot,
        gva: u64,
        len: u64,
        file_offset: u64,
        prot: i32,
    ) -> Result<(), TrapError> {
        self.shared
            .command(
                OP_MAP_WINDOW,
                [gva, len, prot as u64, file_offset, u64::from(slot.0)],
            )
            .map(drop)
    }

    /// Starts a new application thread in the stub; it waits in its handler for the first
    /// [`StubThread::switch`]. Its registers start zeroed (RFLAGS = 0x202, FS/GS base 0) and
    /// its FPU in the initial state (FCW 0x37f, MXCSR 0x1f80).
    ///
    /// # Errors
    /// [`TrapError::TooManyThreads`] with [`MAX_THREADS`] threads; [`TrapError::Protocol`]
    /// if the thread did not start as expected; [`TrapError::StubDied`].
    pub fn new_thread(&self) -> Result<StubThread, TrapError> {
        let sh = &self.shared;
        let slot = {
            let mut slots = sh.slots.lock().unwrap_or_else(|e| e.into_inner());
            let slot = slots
                .iter()
                .position(|&used| !used)
                .ok_or(TrapError::TooManyThreads)?;
            slots[slot] = true;
            slot
        };
        let mut t = StubThread {
            shared: Arc::clone(sh),
            slot,
            base: Shared::sysmsg_off(slot),
            tid: 0,
            pidfd: None,
            ctx: UserContext::default(),
            fpu: vec![0; sh.xsave_size],
            fpu_dirty: false,
            fpu_features: 0,
            mxcsr_mask: 0xffff,
            spin: DEFAULT_SPIN,
            started: false,
            pairing: crate::pair::Pairing::default(),
        };
        let c = &sh.ctrl;
        c.write_bytes(t.base, &[0u8; 0x100]);
        let tid = sh.command(OP_CLONE, [slot as u64, 0, 0, 0, 0])?;
        t.started = true;
        t.tid = i32::try_from(tid)
            .ok()
            .filter(|&t| t > 0)
            .ok_or(TrapError::Protocol("clone result"))?;
        let state = c.atomic_u32(t.base + S_STATE);
        let waiting = c.atomic_u32(t.base + S_HOLDER_WAITING);
        let v = sh.wait_until(
            state,
            |v| v != STATE_IDLE,
            Duration::ZERO,
            Some(Instant::now() + COMMAND_DEADLINE),
            Some(waiting),
            None,
        )?;
        if v != STATE_EVENT {
            return Err(TrapError::Protocol("thread start state"));
        }
        let exit = t.read_event()?;
        if exit != TrapExit::Syscall
            || t.ctx.regs.rax != libc::SYS_getpid as u64
            || t.ctx.regs.rip != CODE_ADDR + sh.meta.site_t_first
        {
            return Err(TrapError::Protocol("thread start event"));
        }
        // The frame's image tells the features the kernel saves; start from the init state.
        let magic = u32::from_le_bytes(t.fpu[464..468].try_into().expect("4 bytes"));
        let size = u32::from_le_bytes(t.fpu[480..484].try_into().expect("4 bytes"));
        let features = u64::from_le_bytes(t.fpu[472..480].try_into().expect("8 bytes"));
        if magic != FP_XSTATE_MAGIC1 || size as usize != sh.xsave_size || features & !sh.xcr0 != 0 {
            return Err(TrapError::Unsupported(
                "signal frame without the expected XSAVE image",
            ));
        }
        // What `set_fpu` accepts comes from the holder's own CPU view, not from the frame
        // (which other application threads could have written).
        t.fpu_features = sh.xcr0;
        t.mxcsr_mask = sh.mxcsr_mask;
        let mut init = vec![0u8; sh.xsave_size];
        init[0..2].copy_from_slice(&0x37fu16.to_le_bytes());
        init[24..28].copy_from_slice(&0x1f80u32.to_le_bytes());
        init[28..32].copy_from_slice(&t.mxcsr_mask.to_le_bytes());
        init[464..512].copy_from_slice(&t.fpu[464..512]);
        t.fpu = init;
        t.fpu_dirty = true;
        t.ctx = UserContext::default();
        t.ctx.regs.rflags = RFLAGS_FIXED;
        t.pidfd = thread_pidfd(sh.pid, t.tid);
        Ok(t)
    }
}

/// A read-only open file of the same file as `fd`, through `/proc/self/fd` (`None` if this
/// process cannot open it, or what it opened is not the same file).
fn reopen_read_only(fd: BorrowedFd<'_>) -> Option<OwnedFd> {
    let path = format!("/proc/self/fd/{}\0", fd.as_raw_fd());
    // SAFETY: a NUL-terminated path.
    let r = unsafe {
        libc::open(
            path.as_ptr().cast(),
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK,
        )
    };
    if r < 0 {
        tracing::debug!(
            err = %std::io::Error::last_os_error(),
            "trap: a read-only window keeps its writable descriptor"
        );
        return None;
    }
    // SAFETY: a new descriptor we own.
    let new = unsafe { OwnedFd::from_raw_fd(r) };
    let id = |f: BorrowedFd<'_>| {
        // SAFETY: a zeroed stat for fstat to fill.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor and stat buffer.
        (unsafe { libc::fstat(f.as_raw_fd(), &mut st) } == 0).then_some((st.st_dev, st.st_ino))
    };
    match (id(fd), id(new.as_fd())) {
        (Some(a), Some(b)) if a == b => Some(new),
        _ => None,
    }
}

/// A pidfd for thread `tid` of the stub `pid`, if it is one (the tid comes from the reply page,
/// which the application can forge: a tid outside the stub is refused).
fn thread_pidfd(pid: i32, tid: i32) -> Option<OwnedFd> {
    let task = format!("/proc/{pid}/task/{tid}");
    let ours = || std::path::Path::new(&task).exists();
    if !ours() {
        return None;
    }
    let fd = sys::pidfd_open(tid, sys::PIDFD_THREAD).ok()?;
    // Still ours after the open: the pidfd cannot refer to a reused tid elsewhere.
    ours().then_some(fd)
}

/// The page image of a seccomp program at control-memfd offset `off`, as words:
/// `struct sock_fprog { unsigned short len; struct sock_filter *filter; }` (the pointer as the
/// stub sees it), then the instructions at `off + 16`.
fn filter_image(off: u64, prog: &[SockFilter]) -> FilterImage {
    assert!(
        prog.len() * 8 + 16 <= 4096,
        "seccomp program larger than its page"
    );
    let mut image = FilterImage {
        words: [0; 512],
        len: 2 + prog.len(),
    };
    image.words[0] = prog.len() as u64;
    image.words[1] = CTRL_ADDR + off + 16;
    for (w, f) in image.words[2..].iter_mut().zip(prog) {
        *w = u64::from(f.code)
            | u64::from(f.jt) << 16
            | u64::from(f.jf) << 24
            | u64::from(f.k) << 32;
    }
    image
}

/// A seccomp program's page image in the control memfd, as words: `struct sock_fprog`
/// (length, then the address of the instructions) and the instructions, at most a page.
#[derive(Clone, Copy)]
struct FilterImage {
    words: [u64; 512],
    len: usize,
}

impl FilterImage {
    fn words(&self) -> &[u64] {
        &self.words[..self.len]
    }
}

/// One application thread in a stub: its registers and FPU as of the last event, and the
/// means to run it until the next.
pub struct StubThread {
    shared: Arc<Shared>,
    slot: usize,
    /// Offset of the sysmsg area in the control mapping.
    base: u64,
    tid: i32,
    /// A pidfd for this thread (`PIDFD_THREAD`), to wait for its exit.
    pidfd: Option<OwnedFd>,
    ctx: UserContext,
    fpu: Vec<u8>,
    fpu_dirty: bool,
    /// XSAVE features an image may hold (the host's XCR0).
    fpu_features: u64,
    mxcsr_mask: u32,
    spin: Duration,
    started: bool,
    /// Its CPU pairing with the holder thread ([`crate::pair`]).
    pairing: crate::pair::Pairing,
}

const REG_COUNT: usize = 18;

fn regs_to_array(r: &Regs) -> [u64; REG_COUNT] {
    [
        r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rsp, r.rbp, r.r8, r.r9, r.r10, r.r11, r.r12,
        r.r13, r.r14, r.r15, r.rip, r.rflags,
    ]
}

fn regs_from_array(a: [u64; REG_COUNT]) -> Regs {
    Regs {
        rax: a[0],
        rbx: a[1],
        rcx: a[2],
        rdx: a[3],
        rsi: a[4],
        rdi: a[5],
        rsp: a[6],
        rbp: a[7],
        r8: a[8],
        r9: a[9],
        r10: a[10],
        r11: a[11],
        r12: a[12],
        r13: a[13],
        r14: a[14],
        r15: a[15],
        rip: a[16],
        rflags: a[17],
    }
}

fn canonical(a: u64) -> bool {
    !(0x8000_0000_0000..0xffff_8000_0000_0000).contains(&a)
}

impl StubThread {
    /// The registers as of the last event (for a syscall: number in `rax`, `rip` after the
    /// `syscall` instruction).
    pub fn regs(&self) -> &UserContext {
        &self.ctx
    }

    /// The registers the next [`StubThread::switch`] resumes with.
    pub fn regs_mut(&mut self) -> &mut UserContext {
        &mut self.ctx
    }

    /// The FPU/SSE/AVX state as a standard (non-compacted) XSAVE image of the host's size,
    /// as of the last event.
    pub fn fpu(&self) -> &[u8] {
        &self.fpu
    }

    /// Replaces the FPU state the next switch resumes with. `xsave` is a standard XSAVE image
    /// at least [`StubProcess::xsave_size`] long (the rest is ignored). Bytes 464..512 (the
    /// kernel's software-reserved area) are ignored.
    ///
    /// # Errors
    /// [`TrapError::Invalid`] if the image is too short, its XSAVE header is not a standard
    /// one with features the host saves, or MXCSR sets reserved bits.
    pub fn set_fpu(&mut self, xsave: &[u8]) -> Result<(), TrapError> {
        let n = self.fpu.len();
        let img = xsave
            .get(..n)
            .ok_or(TrapError::Invalid("XSAVE image too short"))?;
        let bv = u64::from_le_bytes(img[512..520].try_into().expect("8 bytes"));
        if bv & !self.fpu_features != 0 || img[520..576].iter().any(|&b| b != 0) {
            return Err(TrapError::Invalid("XSAVE header"));
        }
        let mxcsr = u32::from_le_bytes(img[24..28].try_into().expect("4 bytes"));
        if mxcsr & !self.mxcsr_mask != 0 {
            return Err(TrapError::Invalid("MXCSR reserved bits"));
        }
        let sw: [u8; 48] = self.fpu[464..512].try_into().expect("48 bytes");
        self.fpu.copy_from_slice(img);
        self.fpu[464..512].copy_from_slice(&sw);
        self.fpu_dirty = true;
        Ok(())
    }

    /// The stub thread's host tid (for affinity and tests).
    pub fn tid(&self) -> i32 {
        self.tid
    }

    /// How long [`StubThread::switch`] spins on the state word before it sleeps, when the
    /// stub thread last stopped on another CPU than the holder's current one (on one CPU,
    /// spinning only delays the stub thread). Default [`DEFAULT_SPIN`].
    pub fn set_spin(&mut self, spin: Duration) {
        self.spin = spin;
    }

    /// A handle that makes a running [`StubThread::switch`] of this thread return
    /// [`TrapExit::Interrupted`] soon: it sends the kick signal to the stub thread (`tgkill`;
    /// a no-op once the stub is gone). A kick sent while the thread is stopped stays pending and
    /// interrupts the next switch at once; several kicks merge into one.
    pub fn kicker(&self) -> impl Fn() + Send + Sync + 'static {
        let shared = Arc::downgrade(&self.shared);
        let tid = self.tid;
        move || {
            // tgkill: only a thread of the stub's thread group can be hit (the tid came from
            // the forgeable reply page), and while `Shared` lives the stub is not reaped, so
            // its pid cannot have been reused.
            if let Some(sh) = shared.upgrade() {
                // SAFETY: no memory arguments.
                unsafe { libc::syscall(libc::SYS_tgkill, sh.pid, tid, KICK_SIGNAL) };
            }
        }
    }

    /// Runs application code until the next event: writes the registers (and the FPU image if
    /// it changed) to sysmsg, sets RUN, wakes the stub thread and waits for EVENT; then copies
    /// the event out once.
    ///
    /// # Errors
    /// [`TrapError::StubDied`] if the stub process died (detected within 50 ms);
    /// [`TrapError::Invalid`] for a non-canonical FS/GS base; [`TrapError::Protocol`] if the
    /// stub thread's report is malformed (the application can scribble on sysmsg).
    pub fn switch(&mut self) -> Result<TrapExit, TrapError> {
        if self.shared.dead.load(Ordering::Relaxed) {
            return Err(TrapError::StubDied);
        }
        if !canonical(self.ctx.fs_base) || !canonical(self.ctx.gs_base) {
            return Err(TrapError::Invalid("non-canonical FS/GS base"));
        }
        let c = &self.shared.ctrl;
        let b = self.base;
        for (i, v) in regs_to_array(&self.ctx.regs).iter().enumerate() {
            c.write_u64(b + S_REGS + 8 * i as u64, *v);
        }
        c.write_u64(b + S_FS_BASE, self.ctx.fs_base);
        c.write_u64(b + S_GS_BASE, self.ctx.gs_base);
        if self.fpu_dirty {
            c.write_bytes(b + S_XSAVE, &self.fpu);
            c.write_u32(b + S_FPU_DIRTY, 1);
            self.fpu_dirty = false;
        }
        // SAFETY: sched_getcpu has no preconditions (vDSO getcpu).
        let cpu = unsafe { libc::sched_getcpu() } as u32;
        c.write_u32(b + S_HOLDER_CPU, cpu);
        let pidfd = self.pidfd.as_ref().map(AsFd::as_fd);
        self.pairing.before_run(self.tid, pidfd, cpu);
        let state = c.atomic_u32(b + S_STATE);
        // The register writes above are volatile, not atomic: keep them before RUN.
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        // xchg: a full barrier before the load of the stub's waiting flag (see `wait_until`).
        state.swap(STATE_RUN, Ordering::SeqCst);
        if c.atomic_u32(b + S_STUB_WAITING).load(Ordering::SeqCst) != 0 {
            sys::futex_wake(state, 1);
        }
        // Spinning pays only when the stub thread runs on another CPU.
        let spin = if !self.pairing.is_pinned() && c.read_u32(b + S_STUB_CPU) != cpu {
            self.spin
        } else {
            Duration::ZERO
        };
        let waiting = c.atomic_u32(b + S_HOLDER_WAITING);
        let pinned = self.pairing.is_pinned();
        let started = Instant::now();
        let (tid, pairing) = (self.tid, &mut self.pairing);
        let mut release = || pairing.release(tid, pidfd);
        let long_wait: Option<(Duration, &mut dyn FnMut())> = if pinned {
            Some((crate::pair::RELEASE_AFTER, &mut release))
        } else {
            None
        };
        let v = self.shared.wait_until(
            state,
            |v| v != STATE_RUN,
            spin,
            None,
            Some(waiting),
            long_wait,
        )?;
        self.pairing.after_run(started.elapsed(), self.tid, pidfd);
        if v != STATE_EVENT {
            return Err(TrapError::Protocol("thread state"));
        }
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        self.read_event()
    }

    /// Copies the event, registers and FPU image out of sysmsg (once) and decodes the event.
    fn read_event(&mut self) -> Result<TrapExit, TrapError> {
        let c = &self.shared.ctrl;
        let b = self.base;
        let mut a = [0u64; REG_COUNT];
        for (i, v) in a.iter_mut().enumerate() {
            *v = c.read_u64(b + S_REGS + 8 * i as u64);
        }
        self.ctx.regs = regs_from_array(a);
        self.ctx.fs_base = c.read_u64(b + S_FS_BASE);
        self.ctx.gs_base = c.read_u64(b + S_GS_BASE);
        c.read_bytes(b + S_XSAVE, &mut self.fpu);
        let event = c.read_u32(b + S_EVENT);
        match event {
            EV_SYSCALL => Ok(TrapExit::Syscall),
            EV_KICK => Ok(TrapExit::Interrupted),
            EV_FAULT => {
                let trapno = c.read_u64(b + S_TRAPNO);
                let vector = u8::try_from(trapno)
                    .ok()
                    .filter(|&v| v < 32)
                    .ok_or(TrapError::Protocol("trap number"))?;
                Ok(TrapExit::Fault {
                    vector,
                    error_code: c.read_u64(b + S_ERR),
                    addr: c.read_u64(b + S_ADDR),
                    signal: c.read_u32(b + S_SIGNO) as i32,
                })
            }
            _ => Err(TrapError::Protocol("event kind")),
        }
    }
}

impl Drop for StubThread {
    fn drop(&mut self) {
        let pidfd = self.pidfd.as_ref().map(AsFd::as_fd);
        self.pairing.release(self.tid, pidfd);
        let sh = &self.shared;
        let mut free = !self.started;
        if self.started && sh.alive().is_ok() {
            // Tell the thread to exit from its handler, then wait until it is gone so its
            // sysmsg area can be reused.
            let c = &sh.ctrl;
            let state = c.atomic_u32(self.base + S_STATE);
            if state.load(Ordering::Acquire) == STATE_EVENT {
                state.store(STATE_EXIT, Ordering::SeqCst);
                sys::futex_wake(state, 1);
                free = match &self.pidfd {
                    Some(fd) => sys::pidfd_wait(fd.as_fd(), Duration::from_secs(1)),
                    None => false,
                };
            }
        }
        if free {
            let mut slots = sh.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots[self.slot] = false;
        }
    }
}

/// The stub-side addresses of every `syscall` instruction the filters allow from somewhere,
/// by name (the mapper's, a new thread's, the handler's). Application code can read the stub
/// code and jump to any of them with its own registers; hostile tests do.
pub fn stub_syscall_instructions() -> Vec<(&'static str, u64)> {
    let m = asm::meta();
    let at = |site: u64| CODE_ADDR + site - 2;
    vec![
        ("mapper reply write", at(m.site_m_write)),
        ("mapper futex wait", at(m.site_m_wait)),
        ("mapper mmap", at(m.site_m_mmap)),
        ("mapper munmap", at(m.site_m_munmap)),
        ("mapper mprotect", at(m.site_m_mprotect)),
        ("mapper clone", at(m.site_m_clone)),
        ("mapper window recvmsg", at(m.site_m_recvmsg)),
        ("mapper window dup3", at(m.site_m_dup3)),
        ("mapper received close", at(m.site_m_close_recv)),
        ("mapper window close", at(m.site_m_close_window)),
        ("mapper window mmap", at(m.site_m_mmap_window)),
        ("thread sigaltstack", at(m.site_t_altstack)),
        ("thread seccomp", at(m.site_t_seccomp)),
        ("handler futex wake", at(m.site_h_wake)),
        ("handler futex wait", at(m.site_h_wait)),
        ("handler rt_sigreturn", at(m.site_h_sigreturn)),
        ("handler exit", at(m.site_h_exit)),
    ]
}
