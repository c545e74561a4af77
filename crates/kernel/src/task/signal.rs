//! Signals of a single-threaded process: dispositions, the blocked mask, pending signals, the
//! alternate stack, and delivery on the guest stack as Linux x86-64 lays it out
//! (`arch/x86/kernel/signal.c`), undone by rt_sigreturn.
//!
//! Signals are queued ([`Task::queue_signal`], [`Task::force_signal_info`]) by syscalls
//! (kill, tgkill…), by faults (the run loop's exception handling) and from outside
//! (`torpor kill`), and delivered by [`Task::deliver_signals`] each time the task is about to
//! return to user mode, respecting the mask.
//!
//! The frame, from high to low addresses (`sp` = the interrupted `rsp`):
//!
//! ```text
//! sp - 128                       red zone skipped (or the top of the alternate stack)
//! fpstate (64-byte aligned)      XSAVE area, 832 bytes (x87|SSE|AVX, standard layout) with
//!                                fpx_sw_bytes (FP_XSTATE_MAGIC1) in the FXSAVE area's
//!                                software bytes, then FP_XSTATE_MAGIC2 (4 bytes)
//! frame + 8 + 304                siginfo (128 bytes)
//! frame + 8                      struct ucontext: flags, link, uc_stack, uc_mcontext
//!                                (struct sigcontext, 256 bytes), uc_sigmask (8 bytes)
//! frame = handler's rsp          pretcode = sa_restorer; rsp + 8 is 16-byte aligned
//! ```

use std::sync::{Arc, Mutex};

use abi::structs::{KernelSigaction, StackT};
use abi::Errno;
use platform::Gva;
use platform::{FpuState, FPU_STATE_SIZE as XSAVE_AREA_SIZE};

use super::{ExitStatus, Task, TaskError};

/// Number of signals (1..=64).
pub const NSIG: usize = 64;

/// SIG_DFL.
pub const SIG_DFL: u64 = 0;
/// SIG_IGN.
pub const SIG_IGN: u64 = 1;

pub use abi::signal::{
    MINSIGSTKSZ, SA_NODEFER, SA_ONSTACK, SA_RESETHAND, SA_RESTART, SA_RESTORER, SA_SIGINFO,
    SS_AUTODISARM, SS_DISABLE, SS_ONSTACK,
};

/// si_code values.
pub const SI_USER: i32 = 0;
/// Sent by the kernel.
pub const SI_KERNEL: i32 = 0x80;
/// Sent by tkill or tgkill.
pub const SI_TKILL: i32 = -6;
/// Address not mapped.
pub const SEGV_MAPERR: i32 = 1;
/// Invalid permissions for a mapped address.
pub const SEGV_ACCERR: i32 = 2;
/// Invalid address alignment.
pub const BUS_ADRALN: i32 = 1;
/// Nonexistent physical address (an I/O error behind a file mapping).
pub const BUS_ADRERR: i32 = 2;
/// Illegal opcode.
pub const ILL_ILLOPN: i32 = 2;
/// Integer divide by zero.
pub const FPE_INTDIV: i32 = 1;
/// Trace trap.
pub const TRAP_TRACE: i32 = 2;

/// The first real-time signal (the kernel's; the C libraries reserve 32-34).
pub const SIGRTMIN: i32 = 32;

const UNBLOCKABLE: u64 = (1 << (libc::SIGKILL - 1)) | (1 << (libc::SIGSTOP - 1));
/// Signals that faults raise: dequeued before the others, as Linux does.
const SYNCHRONOUS: u64 = (1 << (libc::SIGSEGV - 1))
    | (1 << (libc::SIGBUS - 1))
    | (1 << (libc::SIGILL - 1))
    | (1 << (libc::SIGTRAP - 1))
    | (1 << (libc::SIGFPE - 1))
    | (1 << (libc::SIGSYS - 1));
/// Most queued real-time signals (RLIMIT_SIGPENDING is far larger on Linux; a bound is all
/// that matters here).
const MAX_QUEUED: usize = 1024;

/// Whether `sig`'s default action is to ignore it. (The stop signals' default, stopping the
/// process, is [`super::job_control`]'s.)
pub fn ignored_by_default(sig: i32) -> bool {
    matches!(
        sig,
        libc::SIGCHLD | libc::SIGURG | libc::SIGWINCH | libc::SIGCONT
    )
}

fn bit(sig: i32) -> u64 {
    1u64 << (sig - 1)
}

/// A `siginfo_t` (128 bytes, as Linux x86-64 lays it out).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SigInfo(pub [u8; 128]);

impl std::fmt::Debug for SigInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigInfo")
            .field("signo", &self.signo())
            .field("code", &self.code())
            .finish()
    }
}

impl SigInfo {
    fn new(sig: i32, code: i32) -> SigInfo {
        let mut b = [0u8; 128];
        b[0..4].copy_from_slice(&sig.to_le_bytes());
        b[8..12].copy_from_slice(&code.to_le_bytes());
        SigInfo(b)
    }

    /// A signal the kernel sends (SI_KERNEL).
    pub fn kernel(sig: i32) -> SigInfo {
        SigInfo::new(sig, SI_KERNEL)
    }

    /// A signal a process sends (kill: SI_USER, tkill/tgkill: SI_TKILL) with the sender's
    /// pid and uid.
    pub fn user(sig: i32, code: i32, pid: i32, uid: u32) -> SigInfo {
        let mut s = SigInfo::new(sig, code);
        s.0[16..20].copy_from_slice(&pid.to_le_bytes());
        s.0[20..24].copy_from_slice(&uid.to_le_bytes());
        s
    }

    /// The signal a parent gets when its child `pid` (owned by `uid`) ends with `status`
    /// (SIGCHLD, or the child's exit signal): si_code CLD_EXITED with the exit code, or
    /// CLD_KILLED with the signal.
    pub fn child(sig: i32, pid: i32, uid: u32, status: super::ExitStatus) -> SigInfo {
        const CLD_EXITED: i32 = 1;
        const CLD_KILLED: i32 = 2;
        let (code, value) = match status {
            super::ExitStatus::Exited(c) => (CLD_EXITED, c & 0xff),
            super::ExitStatus::Signaled(s) => (CLD_KILLED, s),
        };
        let mut s = SigInfo::user(sig, code, pid, uid);
        s.0[24..28].copy_from_slice(&value.to_le_bytes());
        s
    }

    /// The signal a parent gets when its child `pid` stops or continues: si_code
    /// `CLD_STOPPED` or `CLD_CONTINUED`, si_status the signal that did it.
    pub fn child_state(sig: i32, code: i32, pid: i32, uid: u32, status: i32) -> SigInfo {
        let mut s = SigInfo::user(sig, code, pid, uid);
        s.0[24..28].copy_from_slice(&status.to_le_bytes());
        s
    }

    /// The same siginfo with si_code `code` (a child's `CLD_DUMPED`).
    pub fn with_code(mut self, code: i32) -> SigInfo {
        self.0[8..12].copy_from_slice(&code.to_le_bytes());
        self
    }

    /// A fault signal with its address (si_addr).
    pub fn fault(sig: i32, code: i32, addr: u64) -> SigInfo {
        let mut s = SigInfo::new(sig, code);
        s.0[16..24].copy_from_slice(&addr.to_le_bytes());
        s
    }

    /// si_signo.
    pub fn signo(&self) -> i32 {
        i32::from_le_bytes([self.0[0], self.0[1], self.0[2], self.0[3]])
    }

    /// si_code.
    pub fn code(&self) -> i32 {
        i32::from_le_bytes([self.0[8], self.0[9], self.0[10], self.0[11]])
    }
}

/// The alternate signal stack (sigaltstack(2)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AltStack {
    /// Lowest address.
    pub sp: u64,
    /// Size in bytes (0: none).
    pub size: u64,
    /// Flags as set (SS_DISABLE, or 0/SS_ONSTACK, possibly with SS_AUTODISARM).
    pub flags: i32,
}

impl Default for AltStack {
    fn default() -> Self {
        AltStack {
            sp: 0,
            size: 0,
            flags: SS_DISABLE,
        }
    }
}

impl AltStack {
    /// Whether `sp` is on the alternate stack (Linux's `on_sig_stack`).
    pub fn on_stack(&self, sp: u64) -> bool {
        if self.flags & SS_AUTODISARM != 0 {
            return false;
        }
        self.contains(sp)
    }

    fn contains(&self, sp: u64) -> bool {
        sp > self.sp && sp - self.sp <= self.size
    }

    /// Linux's `sas_ss_flags`: SS_DISABLE, SS_ONSTACK or 0.
    pub fn state(&self, sp: u64) -> i32 {
        if self.size == 0 {
            SS_DISABLE
        } else if self.on_stack(sp) {
            SS_ONSTACK
        } else {
            0
        }
    }

    /// Linux's `do_sigaltstack` for a new stack (`ss_sp`, `ss_flags`, `ss_size`) set while the
    /// thread's stack pointer is `cur_sp`.
    ///
    /// # Errors
    /// EPERM while running on the current alternate stack, EINVAL for bad flags, ENOMEM for a
    /// stack smaller than MINSIGSTKSZ.
    pub fn set(
        &mut self,
        cur_sp: u64,
        ss_sp: u64,
        ss_flags: i32,
        ss_size: u64,
    ) -> Result<(), Errno> {
        if self.on_stack(cur_sp) {
            return Err(Errno::EPERM);
        }
        let mode = ss_flags & !SS_AUTODISARM;
        if mode != SS_DISABLE && mode != SS_ONSTACK && mode != 0 {
            return Err(Errno::EINVAL);
        }
        if mode == SS_DISABLE {
            *self = AltStack {
                sp: 0,
                size: 0,
                flags: ss_flags,
            };
        } else {
            if ss_size < MINSIGSTKSZ {
                return Err(Errno::ENOMEM);
            }
            *self = AltStack {
                sp: ss_sp,
                size: ss_size,
                flags: ss_flags,
            };
        }
        Ok(())
    }

    /// The `stack_t` that sigaltstack(2) reports for stack pointer `sp`.
    pub fn to_user(&self, sp: u64) -> StackT {
        StackT {
            sp: self.sp,
            flags: self.state(sp) | (self.flags & SS_AUTODISARM),
            pad: 0,
            size: self.size,
        }
    }

    /// The `stack_t` saved in a signal frame's `uc_stack` (the flags as set, as Linux saves
    /// them).
    fn to_frame(self) -> StackT {
        StackT {
            sp: self.sp,
            flags: self.flags,
            pad: 0,
            size: self.size,
        }
    }
}

/// The state a fault leaves for the sigcontext of the next frame (Linux's
/// `thread.trap_nr`, `error_code`, `cr2`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultContext {
    /// Exception vector.
    pub trapno: u64,
    /// Error code.
    pub err: u64,
    /// Faulting address (page faults).
    pub cr2: u64,
}

/// A thread group's signal dispositions and a thread's mask, pending signals and alternate
/// stack.
#[derive(Clone, Debug)]
pub struct SignalState {
    /// Dispositions, index = signal - 1, shared by the threads of a process (CLONE_SIGHAND).
    actions: Arc<Mutex<[KernelSigaction; NSIG]>>,
    /// Blocked signals (bit = signal - 1).
    pub mask: u64,
    /// Pending signals in arrival order (one per standard signal, queued real-time signals).
    pending: Vec<SigInfo>,
    /// The alternate signal stack.
    pub altstack: AltStack,
    /// The mask to restore once a signal has been handled (rt_sigsuspend's caller's mask).
    pub saved_mask: Option<u64>,
    /// The syscall (number) that just returned EINTR: restarted or not at delivery.
    pub interrupted_syscall: Option<u64>,
    /// Trap state of the last fault, for the next frame's sigcontext.
    pub fault: FaultContext,
}

impl Default for SignalState {
    fn default() -> Self {
        SignalState {
            actions: Arc::new(Mutex::new([KernelSigaction::default(); NSIG])),
            mask: 0,
            pending: Vec::new(),
            altstack: AltStack::default(),
            saved_mask: None,
            interrupted_syscall: None,
            fault: FaultContext::default(),
        }
    }
}

impl SignalState {
    /// The pending signals, in arrival order (a checkpoint saves them).
    pub fn pending(&self) -> &[SigInfo] {
        &self.pending
    }

    /// Replaces the pending signals (a restore).
    pub fn set_pending(&mut self, pending: Vec<SigInfo>) {
        self.pending = pending;
    }

    /// The state a new thread starts with (clone with CLONE_THREAD): the mask of its creator,
    /// nothing pending, no alternate stack; the dispositions are the process's, shared.
    pub fn reset_for_new_thread(&mut self) {
        self.pending.clear();
        self.altstack = AltStack::default();
        self.saved_mask = None;
        self.interrupted_syscall = None;
        self.fault = FaultContext::default();
    }

    /// The state of a forked child: its parent's dispositions, mask and alternate stack,
    /// nothing pending.
    pub fn reset_for_fork(&mut self) {
        self.unshare_actions();
        self.pending.clear();
        self.saved_mask = None;
        self.interrupted_syscall = None;
        self.fault = FaultContext::default();
    }

    /// The state after execve: handled signals go back to their default action (ignored
    /// ones stay ignored), flags and the alternate stack are dropped; the mask and pending
    /// signals are kept.
    pub fn reset_for_exec(&mut self) {
        self.unshare_actions();
        for a in self.lock_actions().iter_mut() {
            if a.handler != SIG_IGN {
                *a = KernelSigaction::default();
            }
        }
        self.altstack = AltStack::default();
        self.saved_mask = None;
        self.interrupted_syscall = None;
    }

    /// Gives this process its own copy of the dispositions (a new process).
    fn unshare_actions(&mut self) {
        let copy = *self.lock_actions();
        self.actions = Arc::new(Mutex::new(copy));
    }

    fn lock_actions(&self) -> std::sync::MutexGuard<'_, [KernelSigaction; NSIG]> {
        self.actions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the disposition of `sig` (1..=64) for the whole process.
    pub fn set_action(&mut self, sig: i32, act: KernelSigaction) {
        if (1..=NSIG as i32).contains(&sig) {
            self.lock_actions()[sig as usize - 1] = act;
        }
    }

    /// Resets the handler of `sig` (1..=64) to SIG_DFL.
    pub fn reset_handler(&mut self, sig: i32) {
        if (1..=NSIG as i32).contains(&sig) {
            self.lock_actions()[sig as usize - 1].handler = SIG_DFL;
        }
    }

    /// The disposition of `sig` (1..=64).
    pub fn action(&self, sig: i32) -> KernelSigaction {
        self.lock_actions()[sig as usize - 1]
    }

    /// The signals ignored (`SIG_IGN`) and caught (a handler), as masks (bit = signal - 1),
    /// for `/proc/PID/status`'s `SigIgn` and `SigCgt`.
    pub fn disposition_masks(&self) -> (u64, u64) {
        let actions = self.lock_actions();
        let (mut ign, mut cgt) = (0u64, 0u64);
        for (i, a) in actions.iter().enumerate() {
            match a.handler {
                SIG_DFL => {}
                SIG_IGN => ign |= 1 << i,
                _ => cgt |= 1 << i,
            }
        }
        (ign, cgt)
    }

    /// The signals pending for this thread, as a mask (bit = signal - 1).
    pub fn pending_mask(&self) -> u64 {
        self.pending
            .iter()
            .map(|si| si.signo())
            .filter(|&s| (1..=64).contains(&s))
            .fold(0, |m, s| m | 1 << (s - 1))
    }

    /// Sets the blocked mask (SIGKILL and SIGSTOP cannot be blocked).
    pub fn set_mask(&mut self, mask: u64) {
        self.mask = mask & !UNBLOCKABLE;
    }

    /// Whether `sig` would be discarded: its disposition ignores it (SIG_IGN, or SIG_DFL with
    /// an "ignore" default).
    pub fn is_ignored(&self, sig: i32) -> bool {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            return false;
        }
        match self.action(sig).handler {
            SIG_IGN => true,
            SIG_DFL => ignored_by_default(sig),
            _ => false,
        }
    }

    /// The set of pending signals.
    pub fn pending_set(&self) -> u64 {
        self.pending.iter().fold(0, |s, i| s | bit(i.signo()))
    }

    /// Adds a generated signal, as Linux's `__send_signal`: an ignored unblocked signal is
    /// discarded, a standard signal already pending is not queued twice. Returns false when
    /// the real-time queue is full (the caller answers EAGAIN).
    pub fn queue(&mut self, info: SigInfo) -> bool {
        let sig = info.signo();
        if !(1..=NSIG as i32).contains(&sig) {
            return true;
        }
        if self.is_ignored(sig) && self.mask & bit(sig) == 0 {
            return true;
        }
        // Each timer's signal is queued apart, as Linux's `posixtimer_send_sigqueue`.
        let timer = info.code() == abi::timer::SI_TIMER;
        if sig < SIGRTMIN && !timer && self.pending_set() & bit(sig) != 0 {
            return true;
        }
        if self.pending.len() >= MAX_QUEUED {
            return sig < SIGRTMIN;
        }
        self.pending.push(info);
        true
    }

    /// Adds a signal the thread cannot block or ignore (a fault): if it is blocked or
    /// ignored, its disposition goes back to SIG_DFL and it is unblocked (Linux's
    /// `force_sig_info`).
    pub fn force(&mut self, info: SigInfo) {
        let sig = info.signo();
        if !(1..=NSIG as i32).contains(&sig) {
            return;
        }
        let blocked = self.mask & bit(sig) != 0;
        if blocked || self.action(sig).handler == SIG_IGN {
            self.reset_handler(sig);
            self.mask &= !bit(sig);
        }
        if sig < SIGRTMIN && self.pending_set() & bit(sig) != 0 {
            // Replace a queued copy so the fault's own information is delivered.
            self.pending.retain(|i| i.signo() != sig);
        }
        self.pending.push(info);
    }

    /// Drops the pending instances of `sig` (its disposition became "ignore").
    pub fn discard(&mut self, sig: i32) {
        self.pending.retain(|i| i.signo() != sig);
    }

    /// Whether a pending signal is not blocked.
    pub fn has_deliverable(&self) -> bool {
        self.pending_set() & !self.mask != 0
    }

    /// Removes and returns the next pending signal among `allowed`: fault signals first, then
    /// the lowest number, the oldest of its queue.
    pub fn dequeue(&mut self, allowed: u64) -> Option<SigInfo> {
        let set = self.pending_set() & allowed;
        if set == 0 {
            return None;
        }
        let pick = if set & SYNCHRONOUS != 0 {
            set & SYNCHRONOUS
        } else {
            set
        };
        let sig = pick.trailing_zeros() as i32 + 1;
        let pos = self.pending.iter().position(|i| i.signo() == sig)?;
        Some(self.pending.remove(pos))
    }
}

// ---------------------------------------------------------------------------------------------
// Frame layout.

use abi::signal::{
    AVX_OFFSET, FCW_DEFAULT, FP_XSTATE_MAGIC1, FP_XSTATE_MAGIC2, FRAME_SIZE, FXSAVE_SIZE,
    MXCSR_DEFAULT, SIGCONTEXT_SIZE, STACK_T_SIZE, SW_BYTES, UC_FP_XSTATE, UC_MCONTEXT,
    UC_SIGCONTEXT_SS, UC_SIGMASK, UC_SIZE, UC_STACK, UC_STRICT_RESTORE_SS, XFEATURE_FPSSE,
    XSAVE_HEADER,
};

/// rflags bits rt_sigreturn takes from the frame (Linux's FIX_EFLAGS).
const FIX_EFLAGS: u64 =
    0x1 | 0x4 | 0x10 | 0x40 | 0x80 | 0x100 | 0x400 | 0x800 | 0x1_0000 | 0x4_0000;
const RFLAGS_TF: u64 = 0x100;
const RFLAGS_DF: u64 = 0x400;
const RFLAGS_RF: u64 = 0x1_0000;
/// First non-canonical address of the lower half: `iretq` there faults in ring 0.
const CANONICAL_END: u64 = 1 << 47;

fn le64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

fn le32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// The init FPU state (what a handler starts with, as after Linux's
/// `fpu__clear_user_states`), keeping the CPU's MXCSR mask.
fn init_fpu_area(mxcsr_mask: u32) -> FpuState {
    let mut a = Box::new([0u8; XSAVE_AREA_SIZE]);
    a[0..2].copy_from_slice(&FCW_DEFAULT.to_le_bytes());
    put32(&mut a[..], 24, MXCSR_DEFAULT);
    put32(&mut a[..], 28, mxcsr_mask);
    put64(&mut a[..], XSAVE_HEADER, XFEATURE_FPSSE);
    a
}

fn mxcsr_mask_of(area: &[u8; XSAVE_AREA_SIZE]) -> u32 {
    match le32(&area[..], 28) {
        0 => 0xffbf,
        m => m,
    }
}

/// Syscalls Linux never restarts after a handler ran, SA_RESTART or not (they return EINTR):
/// pause, rt_sigsuspend, rt_sigtimedwait, the sleeps, the waits for events (io_getevents,
/// io_pgetevents and io_uring_enter too), and System V IPC's msgsnd, msgrcv, semop and
/// semtimedop (signal(7)).
fn never_restarted_after_handler(nr: u64) -> bool {
    const NEVER: [u64; 19] = [
        7, 23, 34, 35, 65, 69, 70, 128, 130, 208, 220, 230, 232, 270, 271, 281, 333, 426, 441,
    ];
    NEVER.contains(&nr)
}

/// Why a frame could not be written or read.
struct BadFrame;

impl Task {
    /// Queues `info` for the task as a signal sent to it (kill, tgkill, `torpor kill`):
    /// discarded if ignored, held pending while blocked. SIGKILL ends the process at once.
    /// Returns false when the real-time queue is full.
    pub fn queue_signal(&mut self, info: SigInfo) -> bool {
        if info.signo() == libc::SIGKILL {
            self.exit = Some(ExitStatus::Signaled(libc::SIGKILL));
            return true;
        }
        let sig = info.signo();
        let before = self.signals.pending().len();
        let queued = self.signals.queue(info);
        if self.signals.pending().len() == before {
            // Discarded: a POSIX timer's re-arms without waiting for its delivery.
            self.group.posix_timers.dropped(&self.group, &info);
        }
        if queued {
            self.group.notify_signalfds(sig);
        }
        queued
    }

    /// Takes the next pending signal among `allowed` ([`SignalState::dequeue`]) as the
    /// application sees it: a POSIX timer's signal with its overrun count, none of a timer
    /// deleted or re-armed since ([`super::posix_timer::PosixTimers::deliver`]).
    pub fn dequeue_signal(&mut self, allowed: u64) -> Option<SigInfo> {
        loop {
            let mut info = self.signals.dequeue(allowed)?;
            if self.group.posix_timers.deliver(&self.group, &mut info) {
                return Some(info);
            }
        }
    }

    /// Queues a signal raised by the task itself that it cannot block or ignore (a fault):
    /// delivered to its handler if there is one, else the default action applies.
    pub fn force_signal_info(&mut self, info: SigInfo) {
        if info.signo() == libc::SIGKILL {
            self.exit = Some(ExitStatus::Signaled(libc::SIGKILL));
            return;
        }
        self.signals.force(info);
    }

    /// Takes a signal sent from outside (`torpor kill`) into the queue, if one is waiting.
    pub(crate) fn absorb_external_signal(&mut self) {
        while let Some(sig) = self.control.take_signal() {
            self.external_signal(sig);
        }
    }

    /// Delivers the pending unblocked signals before the task returns to user mode: runs
    /// default actions (ignore or terminate) and sets up a frame for each handler (nested, the
    /// last one runs first, as on Linux). Decides whether a syscall interrupted by a signal
    /// restarts.
    ///
    /// # Errors
    /// [`TaskError`] when the vCPU's FPU state cannot be read or written.
    pub(crate) fn deliver_signals(&mut self) -> Result<(), TaskError> {
        let mut interrupted = self.signals.interrupted_syscall.take();
        let mut handled = false;
        // Each round removes a signal; a failed frame adds at most one SIGSEGV, whose own
        // failure resets it to SIG_DFL: bounded.
        for _ in 0..4 * NSIG {
            if self.exit.is_some() {
                return Ok(());
            }
            // A stopped process takes nothing but SIGKILL until it is continued.
            let allowed = if self.group.job.is_stopped() {
                1 << (libc::SIGKILL - 1)
            } else {
                !self.signals.mask
            };
            let Some(info) = self.dequeue_signal(allowed) else {
                break;
            };
            let sig = info.signo();
            let act = self.signals.action(sig);
            match act.handler {
                SIG_IGN => continue,
                SIG_DFL => {
                    if ignored_by_default(sig) {
                        continue;
                    }
                    if super::job_control::is_stop_signal(sig) {
                        self.stop_process(sig);
                        continue;
                    }
                    tracing::debug!(
                        sig,
                        code = info.code(),
                        rip = self.ctx.user().regs.rip,
                        "terminated by a signal"
                    );
                    if super::coredump::dumps_core(sig) && self.dump_core(&info) {
                        self.group
                            .core_dumped
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    self.exit = Some(ExitStatus::Signaled(sig));
                    return Ok(());
                }
                _ => {}
            }
            if let Some(nr) = interrupted.take() {
                if act.flags & SA_RESTART != 0 && !never_restarted_after_handler(nr) {
                    self.restart_syscall(nr);
                }
            }
            if act.flags & SA_RESETHAND != 0 {
                self.signals.reset_handler(sig);
            }
            match self.setup_frame(sig, &info, &act)? {
                Ok(()) => handled = true,
                Err(BadFrame) => {
                    tracing::debug!(
                        sig,
                        rsp = self.ctx.user().regs.rsp,
                        "cannot write the signal frame: SIGSEGV"
                    );
                    // Linux's force_sigsegv: a SIGSEGV whose own frame fails is fatal.
                    if sig == libc::SIGSEGV {
                        self.signals.reset_handler(sig);
                    }
                    self.signals.force(SigInfo::kernel(libc::SIGSEGV));
                }
            }
        }
        if let Some(nr) = interrupted {
            // No handler ran: the interruption is invisible, as for an ignored signal on Linux.
            self.restart_syscall(nr);
        }
        if !handled {
            if let Some(m) = self.signals.saved_mask.take() {
                self.signals.set_mask(m);
            }
        }
        Ok(())
    }

    /// Re-executes the `syscall` instruction just returned from (2 bytes), with its number.
    fn restart_syscall(&mut self, nr: u64) {
        let r = &mut self.ctx.user_mut().regs;
        if r.rax == Errno::EINTR.as_return() {
            r.rax = nr;
            r.rip = r.rip.wrapping_sub(2);
        }
    }

    /// Writes the frame for `sig` on the guest stack and points the registers at the handler.
    /// The outer result is a host failure; the inner one a frame the application's memory
    /// cannot hold (no SA_RESTORER, a bad stack).
    fn setup_frame(
        &mut self,
        sig: i32,
        info: &SigInfo,
        act: &KernelSigaction,
    ) -> Result<Result<(), BadFrame>, TaskError> {
        if act.flags & SA_RESTORER == 0 || act.handler >= CANONICAL_END {
            return Ok(Err(BadFrame));
        }
        let regs = self.ctx.user().regs;
        let alt = self.signals.altstack;

        // Linux's get_sigframe.
        let on_alt = alt.on_stack(regs.rsp);
        let mut sp = regs.rsp.wrapping_sub(128);
        let mut entering = false;
        if act.flags & SA_ONSTACK != 0 && alt.state(sp) == 0 {
            sp = alt.sp.wrapping_add(alt.size);
            entering = true;
        }
        // The XSAVE area of the features the platform enables (x87|SSE|AVX on KVM; the
        // host's, AVX-512 included, on trap), in the standard layout.
        let cpu = *self.group.platform.cpu();
        let (xstate_size, xfeatures) = (cpu.xsave_size, cpu.xcr0);
        let fpstate = sp.wrapping_sub(xstate_size as u64 + 4) & !63;
        sp = (fpstate.wrapping_sub(FRAME_SIZE) & !15).wrapping_sub(8);
        if (on_alt || entering) && !alt.contains(sp) {
            return Ok(Err(BadFrame));
        }
        if !(4096..CANONICAL_END).contains(&sp) {
            return Ok(Err(BadFrame));
        }

        // FPU state: saved in the frame, then reset for the handler.
        let xsave = self.ctx.fpu()?;
        let mut fp = vec![0u8; xstate_size + 4];
        fp[..xstate_size].copy_from_slice(&xsave[..xstate_size]);
        put32(&mut fp, SW_BYTES, FP_XSTATE_MAGIC1);
        put32(&mut fp, SW_BYTES + 4, (xstate_size + 4) as u32);
        put64(&mut fp, SW_BYTES + 8, xfeatures);
        put32(&mut fp, SW_BYTES + 16, xstate_size as u32);
        for b in &mut fp[SW_BYTES + 20..FXSAVE_SIZE] {
            *b = 0;
        }
        let bv = le64(&fp, XSAVE_HEADER) | XFEATURE_FPSSE;
        put64(&mut fp, XSAVE_HEADER, bv & xfeatures);
        put32(&mut fp, xstate_size, FP_XSTATE_MAGIC2);

        let saved_mask = self.signals.saved_mask.unwrap_or(self.signals.mask);
        let f = self.signals.fault;
        let mut frame = vec![0u8; FRAME_SIZE as usize];
        put64(&mut frame, 0, act.restorer);
        let uc = 8;
        put64(
            &mut frame,
            uc,
            UC_FP_XSTATE | UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS,
        );
        frame[uc + UC_STACK..uc + UC_STACK + STACK_T_SIZE]
            .copy_from_slice(abi::pod::as_bytes(&alt.to_frame()));
        let sc = uc + UC_MCONTEXT;
        let gprs = [
            regs.r8,
            regs.r9,
            regs.r10,
            regs.r11,
            regs.r12,
            regs.r13,
            regs.r14,
            regs.r15,
            regs.rdi,
            regs.rsi,
            regs.rbp,
            regs.rbx,
            regs.rdx,
            regs.rax,
            regs.rcx,
            regs.rsp,
            regs.rip,
            regs.rflags,
        ];
        for (i, v) in gprs.iter().enumerate() {
            put64(&mut frame, sc + 8 * i, *v);
        }
        let cpu = self.group.platform.cpu();
        let segs = [cpu.user_cs, 0, 0, cpu.user_ss];
        for (i, s) in segs.iter().enumerate() {
            frame[sc + 144 + 2 * i..sc + 146 + 2 * i].copy_from_slice(&s.to_le_bytes());
        }
        put64(&mut frame, sc + 152, f.err);
        put64(&mut frame, sc + 160, f.trapno);
        put64(&mut frame, sc + 168, saved_mask);
        put64(&mut frame, sc + 176, f.cr2);
        put64(&mut frame, sc + 184, fpstate);
        put64(&mut frame, uc + UC_SIGMASK, saved_mask);
        frame[uc + UC_SIZE..].copy_from_slice(&info.0);

        if self.copy_out(Gva(fpstate), &fp).is_err() || self.copy_out(Gva(sp), &frame).is_err() {
            return Ok(Err(BadFrame));
        }
        self.ctx.set_fpu(&init_fpu_area(mxcsr_mask_of(&xsave)))?;

        if entering && alt.flags & SS_AUTODISARM != 0 {
            self.signals.altstack = AltStack::default();
        }
        let mut blocked = self.signals.mask | act.mask;
        if act.flags & SA_NODEFER == 0 {
            blocked |= bit(sig);
        }
        self.signals.set_mask(blocked);
        self.signals.saved_mask = None;

        let r = &mut self.ctx.user_mut().regs;
        r.rdi = sig as u64;
        r.rsi = sp + 8 + UC_SIZE as u64;
        r.rdx = sp + 8;
        r.rax = 0;
        r.rsp = sp;
        r.rip = act.handler;
        r.rflags &= !(RFLAGS_DF | RFLAGS_RF | RFLAGS_TF);
        Ok(Ok(()))
    }

    /// Implements rt_sigreturn: restores the registers, mask, alternate stack and FPU state
    /// saved by the frame whose ucontext is at the stack pointer. Returns the restored `rax`.
    /// A frame that cannot be read or is invalid raises SIGSEGV.
    pub(crate) fn sigreturn(&mut self) -> u64 {
        match self.restore_frame() {
            Ok(rax) => rax,
            Err(BadFrame) => {
                tracing::debug!(
                    rsp = self.ctx.user().regs.rsp,
                    "rt_sigreturn: bad frame: SIGSEGV"
                );
                self.force_signal_info(SigInfo::kernel(libc::SIGSEGV));
                0
            }
        }
    }

    fn restore_frame(&mut self) -> Result<u64, BadFrame> {
        let cur = self.ctx.user().regs;
        let mut uc = [0u8; UC_SIZE];
        self.copy_in(Gva(cur.rsp), &mut uc).map_err(|_| BadFrame)?;
        let sc = &uc[UC_MCONTEXT..UC_MCONTEXT + SIGCONTEXT_SIZE];
        let g = |i: usize| le64(sc, 8 * i);
        let mut r = cur;
        r.r8 = g(0);
        r.r9 = g(1);
        r.r10 = g(2);
        r.r11 = g(3);
        r.r12 = g(4);
        r.r13 = g(5);
        r.r14 = g(6);
        r.r15 = g(7);
        r.rdi = g(8);
        r.rsi = g(9);
        r.rbp = g(10);
        r.rbx = g(11);
        r.rdx = g(12);
        r.rax = g(13);
        r.rcx = g(14);
        r.rsp = g(15);
        r.rip = g(16);
        // Only the arithmetic, direction, trap, resume and alignment flags come from the
        // frame; the platform masks IOPL, IF and the rest again on entry.
        r.rflags = (cur.rflags & !FIX_EFLAGS) | (g(17) & FIX_EFLAGS);
        // cs and ss: always the user segments (the platform enters ring 3 with them).
        if r.rip >= CANONICAL_END || r.rsp >= CANONICAL_END {
            return Err(BadFrame);
        }
        let fpstate = le64(sc, 184);
        let fpu = self.read_fpstate(fpstate)?;
        let mask = le64(&uc, UC_SIGMASK);
        let stack: StackT =
            abi::pod::from_bytes(&uc[UC_STACK..UC_STACK + STACK_T_SIZE]).ok_or(BadFrame)?;

        if let Err(e) = self.ctx.set_fpu(&fpu) {
            tracing::warn!("rt_sigreturn: the platform refused the FPU state: {e}");
            return Err(BadFrame);
        }
        self.signals.set_mask(mask);
        // As Linux's restore_altstack: errors (EPERM while still on the stack) are ignored.
        let _ = self
            .signals
            .altstack
            .set(cur.rsp, stack.sp, stack.flags, stack.size);
        self.ctx.user_mut().regs = r;
        Ok(r.rax)
    }

    /// Reads and checks the FPU state a sigcontext points at (null: the init state), as
    /// Linux's `fpu__restore_sig`: an XSAVE area when its software bytes and MAGIC2 check out,
    /// else a legacy FXSAVE area. Anything XRSTOR would fault on is a bad frame.
    fn read_fpstate(&mut self, addr: u64) -> Result<FpuState, BadFrame> {
        let current = self.ctx.fpu().map_err(|e| {
            tracing::warn!("rt_sigreturn: reading the FPU state: {e}");
            BadFrame
        })?;
        let mxcsr_mask = mxcsr_mask_of(&current);
        if addr == 0 {
            return Ok(init_fpu_area(mxcsr_mask));
        }
        if addr & 15 != 0 {
            return Err(BadFrame);
        }
        let cpu = *self.group.platform.cpu();
        let (xstate_size, xfeatures) = (cpu.xsave_size, cpu.xcr0);
        let mut buf = vec![0u8; xstate_size];
        self.copy_in(Gva(addr), &mut buf[..FXSAVE_SIZE])
            .map_err(|_| BadFrame)?;
        let magic1 = le32(&buf, SW_BYTES);
        let ext_size = le32(&buf, SW_BYTES + 4) as usize;
        let sw_features = le64(&buf, SW_BYTES + 8);
        let size = le32(&buf, SW_BYTES + 16) as usize;
        let mut xsave = magic1 == FP_XSTATE_MAGIC1
            && (AVX_OFFSET..=xstate_size).contains(&size)
            && ext_size == size + 4;
        if xsave {
            let mut m2 = [0u8; 4];
            xsave = self.copy_in(Gva(addr + size as u64), &mut m2).is_ok()
                && u32::from_le_bytes(m2) == FP_XSTATE_MAGIC2;
        }
        let mut area = Box::new([0u8; XSAVE_AREA_SIZE]);
        area[..SW_BYTES].copy_from_slice(&buf[..SW_BYTES]);
        let bv = if xsave {
            if addr & 63 != 0 {
                return Err(BadFrame);
            }
            self.copy_in(Gva(addr + FXSAVE_SIZE as u64), &mut buf[FXSAVE_SIZE..size])
                .map_err(|_| BadFrame)?;
            let bv = le64(&buf, XSAVE_HEADER);
            let comp = le64(&buf, XSAVE_HEADER + 8);
            if bv & !xfeatures != 0
                || comp != 0
                || buf[XSAVE_HEADER + 16..AVX_OFFSET].iter().any(|&b| b != 0)
            {
                return Err(BadFrame);
            }
            let mut bv = bv & sw_features;
            if size < xstate_size {
                bv &= XFEATURE_FPSSE;
            }
            if bv & !XFEATURE_FPSSE != 0 {
                // AVX and beyond (AVX-512 on trap): the components past the header, whose
                // bits in `bv` say which XRSTOR loads (the others take their init state).
                area[AVX_OFFSET..xstate_size].copy_from_slice(&buf[AVX_OFFSET..xstate_size]);
            }
            bv
        } else {
            XFEATURE_FPSSE
        };
        if le32(&area[..], 24) & !mxcsr_mask != 0 {
            return Err(BadFrame);
        }
        put32(&mut area[..], 28, mxcsr_mask);
        put64(&mut area[..], XSAVE_HEADER, bv);
        Ok(area)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_handler(s: &mut SignalState, sig: i32) {
        let mut a = s.action(sig);
        a.handler = 0x1000;
        s.set_action(sig, a);
    }

    #[test]
    fn queue_respects_ignore_block_and_coalescing() {
        let mut s = SignalState::default();
        // Default-ignored and unblocked: discarded.
        assert!(s.queue(SigInfo::kernel(libc::SIGCHLD)));
        assert_eq!(s.pending_set(), 0);
        // Blocked: kept even though ignored (the disposition may change).
        s.set_mask(bit(libc::SIGCHLD));
        s.queue(SigInfo::kernel(libc::SIGCHLD));
        assert_eq!(s.pending_set(), bit(libc::SIGCHLD));
        assert!(!s.has_deliverable());
        assert_eq!(s.dequeue(!s.mask), None);
        // Standard signals coalesce, real-time ones queue.
        with_handler(&mut s, libc::SIGUSR1);
        s.queue(SigInfo::kernel(libc::SIGUSR1));
        s.queue(SigInfo::kernel(libc::SIGUSR1));
        let rt = SIGRTMIN + 1;
        with_handler(&mut s, rt);
        s.queue(SigInfo::kernel(rt));
        s.queue(SigInfo::kernel(rt));
        assert_eq!(s.pending.len(), 4);
        // Fault signals first, then the lowest number.
        s.force(SigInfo::fault(libc::SIGSEGV, SEGV_MAPERR, 0));
        let order: Vec<i32> = std::iter::from_fn(|| s.dequeue(!s.mask))
            .map(|i| i.signo())
            .collect();
        assert_eq!(order, vec![libc::SIGSEGV, libc::SIGUSR1, rt, rt]);
        // SIGKILL and SIGSTOP cannot be blocked.
        s.set_mask(u64::MAX);
        assert_eq!(s.mask & UNBLOCKABLE, 0);
    }

    #[test]
    fn force_unblocks_and_resets_ignored() {
        let mut s = SignalState::default();
        let mut a = s.action(libc::SIGSEGV);
        a.handler = SIG_IGN;
        s.set_action(libc::SIGSEGV, a);
        s.set_mask(bit(libc::SIGFPE));
        s.force(SigInfo::kernel(libc::SIGSEGV));
        s.force(SigInfo::kernel(libc::SIGFPE));
        assert_eq!(s.action(libc::SIGSEGV).handler, SIG_DFL);
        assert_eq!(s.mask, 0);
        assert_eq!(s.pending_set(), bit(libc::SIGSEGV) | bit(libc::SIGFPE));
    }

    #[test]
    fn altstack_rules() {
        let mut a = AltStack::default();
        assert_eq!(a.state(0x1000), SS_DISABLE);
        assert_eq!(a.set(0, 0x10000, 0, 100), Err(Errno::ENOMEM));
        assert_eq!(a.set(0, 0x10000, 7, 8192), Err(Errno::EINVAL));
        a.set(0, 0x10000, 0, 8192).unwrap();
        assert_eq!(a.state(0x12000), SS_ONSTACK);
        assert_eq!(a.state(0x10000), 0);
        assert_eq!(a.state(0x20000), 0);
        assert_eq!(a.set(0x11000, 0, SS_DISABLE, 0), Err(Errno::EPERM));
        a.set(0x30000, 0, SS_DISABLE, 0).unwrap();
        assert_eq!(a.state(0x12000), SS_DISABLE);
        let s = a.to_user(0);
        assert_eq!((s.sp, s.flags, s.size), (0, SS_DISABLE, 0));
    }

    #[test]
    fn frame_layout_matches_linux() {
        // sizeof(struct ucontext) = 304, sizeof(struct rt_sigframe) = 440 on x86-64.
        assert_eq!(UC_SIZE, 304);
        assert_eq!(FRAME_SIZE, 440);
        assert_eq!(UC_MCONTEXT + SIGCONTEXT_SIZE, UC_SIGMASK);
    }
}
