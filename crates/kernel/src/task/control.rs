//! Control of a running task from other threads: park requests (for hibernation) and the
//! idle flag (the task is blocked waiting for input).
//!
//! A controller calls [`TaskControl::request_park`]; the task's thread notices at its next exit
//! (the request kicks the vCPU out of `KVM_RUN`, and out of a blocking host call, which is then
//! restarted) and runs its [`ParkHook`] before going on. While the hook runs, the task's memory
//! is quiescent: no guest code runs and no syscall is in progress.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use platform::Kicker;

/// What a parked task runs: the hibernate layer deflates, waits for a wake and inflates here.
pub trait ParkHook: Send {
    /// Called on the task's thread with the task parked: the hook sees the sandbox through
    /// [`ParkedSandbox`](super::ParkedSandbox) only.
    fn on_park(&mut self, sandbox: &super::ParkedSandbox<'_>);
}

/// Cross-thread control of one task.
pub struct TaskControl {
    park: AtomicBool,
    idle: AtomicBool,
    /// Number of times the task went from idle to busy (requests served, roughly).
    busy_periods: AtomicU64,
    /// Number of times a call that waits for input returned some (a connection, bytes, ready
    /// descriptors): requests, not the timeouts of a server's periodic wake-ups.
    inputs: AtomicU64,
    /// External signals not yet taken, one bit per signal (like Linux's standard signals,
    /// a second one of a kind before the first is taken merges with it).
    pending_signals: AtomicU64,
    /// The siginfo of external signals that carry one (tgkill from another thread: SI_TKILL
    /// and the sender's pid, which glibc's SIGSETXID and SIGCANCEL handlers check).
    infos: Mutex<Vec<super::SigInfo>>,
    kicker: Mutex<Kicker>,
    idle_hook: Mutex<Option<IdleHook>>,
    /// The head of the task's robust futex list (set_robust_list), 0 for none: read at its
    /// exit, and by get_robust_list of another thread.
    robust_list: AtomicU64,
    /// The task is inside a syscall (what /proc/PID/stat shows as sleeping, not running).
    in_syscall: AtomicBool,
    /// Thread name (prctl PR_SET_NAME, `/proc/PID/task/TID/comm`), NUL-padded: here, where
    /// the thread's other threads may read and write it (Linux's `task_struct::comm`).
    comm: Mutex<[u8; 16]>,
    /// Timer slack in nanoseconds (PR_SET_TIMERSLACK, `/proc/PID/timerslack_ns`), and the
    /// value `PR_SET_TIMERSLACK 0` returns to: the creating thread's slack when this one was
    /// made (Linux's `timer_slack_ns` and `default_timer_slack_ns`). torpor's timers fire as
    /// the host's do; the value is kept and reported for the programs that tune it.
    timer_slack: AtomicU64,
    default_slack: AtomicU64,
}

/// Linux's initial timer slack: 50 microseconds.
pub const DEFAULT_TIMER_SLACK_NS: u64 = 50_000;

/// Called on the task's thread when it goes idle (`true`) or busy (`false`).
pub type IdleHook = Box<dyn Fn(bool) + Send + Sync>;

impl TaskControl {
    /// Control for the task whose vCPU `kicker` interrupts.
    pub fn new(kicker: Kicker) -> TaskControl {
        TaskControl {
            park: AtomicBool::new(false),
            idle: AtomicBool::new(false),
            busy_periods: AtomicU64::new(0),
            inputs: AtomicU64::new(0),
            pending_signals: AtomicU64::new(0),
            infos: Mutex::new(Vec::new()),
            kicker: Mutex::new(kicker),
            idle_hook: Mutex::new(None),
            robust_list: AtomicU64::new(0),
            in_syscall: AtomicBool::new(false),
            comm: Mutex::new([0; 16]),
            timer_slack: AtomicU64::new(DEFAULT_TIMER_SLACK_NS),
            default_slack: AtomicU64::new(DEFAULT_TIMER_SLACK_NS),
        }
    }

    /// The thread's timer slack in nanoseconds.
    pub fn timer_slack(&self) -> u64 {
        self.timer_slack.load(Ordering::Relaxed)
    }

    /// Sets the thread's timer slack; 0 restores its default.
    pub fn set_timer_slack(&self, ns: u64) {
        let v = if ns == 0 {
            self.default_slack.load(Ordering::Relaxed)
        } else {
            ns
        };
        self.timer_slack.store(v, Ordering::Relaxed);
    }

    /// A new thread's slack and default: the creating thread's current slack.
    pub fn inherit_timer_slack(&self, from: &TaskControl) {
        let v = from.timer_slack();
        self.timer_slack.store(v, Ordering::Relaxed);
        self.default_slack.store(v, Ordering::Relaxed);
    }

    /// Records that the task entered (`true`) or left a syscall.
    pub fn set_in_syscall(&self, inside: bool) {
        self.in_syscall.store(inside, Ordering::Relaxed);
    }

    /// The thread's name, NUL-padded.
    pub fn comm(&self) -> [u8; 16] {
        *self.comm.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Names the thread (`name` NUL-padded, at most 15 bytes before the NUL).
    pub fn set_comm(&self, name: [u8; 16]) {
        *self.comm.lock().unwrap_or_else(|e| e.into_inner()) = name;
    }

    /// Whether the task is inside a syscall now.
    pub fn in_syscall(&self) -> bool {
        self.in_syscall.load(Ordering::Relaxed)
    }

    /// Records the head of the task's robust futex list (set_robust_list).
    pub fn set_robust_list(&self, head: u64) {
        self.robust_list.store(head, Ordering::Relaxed);
    }

    /// The head of the task's robust futex list, 0 for none.
    pub fn robust_list(&self) -> u64 {
        self.robust_list.load(Ordering::Relaxed)
    }

    /// Asks the task to park; kicks it until it does or `timeout` passes. Returns whether the
    /// request was taken (the hook runs, or ran, on the task's thread).
    pub fn request_park(&self, taken: impl Fn() -> bool, timeout: Duration) -> bool {
        self.park.store(true, Ordering::SeqCst);
        let start = std::time::Instant::now();
        loop {
            self.kick();
            if taken() {
                return true;
            }
            if start.elapsed() >= timeout {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Asks the task to park without waiting (its thread group is being stopped).
    pub fn set_park(&self) {
        self.park.store(true, Ordering::SeqCst);
        self.kick();
    }

    /// Whether a park is requested.
    pub fn park_requested(&self) -> bool {
        self.park.load(Ordering::SeqCst)
    }

    /// Withdraws a park request (the task took it, or the controller gave up).
    pub fn clear_park(&self) {
        self.park.store(false, Ordering::SeqCst);
    }

    /// Marks the task as blocked waiting for input (`true`) or running (`false`).
    pub fn set_idle(&self, idle: bool) {
        let was = self.idle.swap(idle, Ordering::SeqCst);
        if was == idle {
            return;
        }
        if !idle {
            self.busy_periods.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(hook) = self
            .idle_hook
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            hook(idle);
        }
    }

    /// Sets what runs when the task goes idle or busy (the hibernate layer's state machine).
    pub fn set_idle_hook(&self, hook: IdleHook) {
        *self.idle_hook.lock().unwrap_or_else(|e| e.into_inner()) = Some(hook);
    }

    /// Whether the task is blocked waiting for input.
    pub fn is_idle(&self) -> bool {
        self.idle.load(Ordering::SeqCst)
    }

    /// Number of idle-to-busy transitions so far.
    pub fn busy_periods(&self) -> u64 {
        self.busy_periods.load(Ordering::Relaxed)
    }

    /// Records that a call waiting for input returned some.
    pub fn note_input(&self) {
        self.inputs.fetch_add(1, Ordering::Relaxed);
    }

    /// Number of inputs the task's waiting calls returned so far (see [`Self::note_input`]).
    pub fn inputs(&self) -> u64 {
        self.inputs.load(Ordering::Relaxed)
    }

    /// Sends the task a signal from outside its process (`torpor kill`, another process's
    /// kill(2), a child's SIGCHLD): it is queued at the task's next exit (the vCPU is kicked)
    /// and delivered like any other (handler, or default action). Signals out of 1..=64 are
    /// ignored.
    pub fn send_signal(&self, sig: i32) {
        if !(1..=64).contains(&sig) {
            return;
        }
        self.pending_signals
            .fetch_or(1u64 << (sig - 1), Ordering::SeqCst);
        self.kick();
    }

    /// [`send_signal`](Self::send_signal) with the siginfo the task must see.
    pub fn send_siginfo(&self, info: super::SigInfo) {
        let sig = info.signo();
        if !(1..=64).contains(&sig) {
            return;
        }
        self.infos
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(info);
        self.send_signal(sig);
    }

    /// How many external signals wait with a siginfo of their own (queued, in Linux's terms).
    pub fn queued_infos(&self) -> usize {
        self.infos.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The siginfo sent with external signal `sig`, if one was (the first). The others of a
    /// standard signal are dropped, as a standard signal is pending once; those of a
    /// real-time signal, and POSIX timers' signals, which Linux queues each, stay for the
    /// next [`take_signal`](Self::take_signal).
    pub fn take_info(&self, sig: i32) -> Option<super::SigInfo> {
        let mut infos = self.infos.lock().unwrap_or_else(|e| e.into_inner());
        let first = infos.iter().position(|i| i.signo() == sig)?;
        let info = infos.remove(first);
        let apart = |i: &super::SigInfo| {
            i.signo() >= super::signal::SIGRTMIN || i.code() == abi::timer::SI_TIMER
        };
        infos.retain(|i| i.signo() != sig || apart(i));
        if infos.iter().any(|i| i.signo() == sig) {
            self.pending_signals
                .fetch_or(1u64 << (sig - 1), Ordering::SeqCst);
        }
        Some(info)
    }

    /// Takes one pending external signal (the lowest-numbered), if any.
    pub fn take_signal(&self) -> Option<i32> {
        let mut cur = self.pending_signals.load(Ordering::SeqCst);
        while cur != 0 {
            let bit = cur.trailing_zeros();
            match self.pending_signals.compare_exchange(
                cur,
                cur & !(1u64 << bit),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Some(bit as i32 + 1),
                Err(now) => cur = now,
            }
        }
        None
    }

    /// Drops the external signals of `set` not taken yet (SIGCONT discards pending stop
    /// signals, a stop signal a pending SIGCONT).
    pub fn discard(&self, set: u64) {
        let mut infos = self.infos.lock().unwrap_or_else(|e| e.into_inner());
        infos.retain(|i| !(1..=64).contains(&i.signo()) || set & (1u64 << (i.signo() - 1)) == 0);
        self.pending_signals.fetch_and(!set, Ordering::SeqCst);
    }

    /// Whether an external signal is pending.
    pub fn signal_pending(&self) -> bool {
        self.pending_signals.load(Ordering::SeqCst) != 0
    }

    /// Points kicks at a new vCPU (execve replaced the task's VM).
    pub fn set_kicker(&self, kicker: Kicker) {
        *self.kicker.lock().unwrap_or_else(|e| e.into_inner()) = kicker;
    }

    /// Kicks the task's vCPU.
    pub fn kick(&self) {
        self.kicker.lock().unwrap_or_else(|e| e.into_inner()).kick();
    }
}
