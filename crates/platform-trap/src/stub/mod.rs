//! The holder's side of a stub: spawning the stub process, mapper commands, application
//! threads and one `switch`.
//!
//! | File | Job |
//! |---|---|
//! | `mod.rs` | what the holder shares with a stub (control memory, waits, commands, window slots) |
//! | `spawn.rs` | the template, the allocation-free fork, the holder's side once the stub is ready |
//! | `child.rs` | the child between `clone3` and the jump into the stub code |
//! | `mapper.rs` | mapper commands: map, unmap, protect, shared windows |
//! | `thread.rs` | application threads: start, registers, FPU state, `switch` |
//! | `asm.rs` | the stub code itself |
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
mod child;
mod mapper;
mod spawn;
#[cfg(test)]
mod tests;
mod thread;

use child::*;
pub(crate) use child::{CloneArgs, KSigaction};
pub(crate) use spawn::{spawn_parts, StubParts, StubTemplate, SPAWN_CALLS};
pub use thread::StubThread;

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

impl StubProcess {
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
