//! The interval timers of a process (setitimer(2), alarm(2)): `ITIMER_REAL` ([`RealTimer`]:
//! SIGALRM when wall time reaches the deadline) and the CPU-time ones, `ITIMER_VIRTUAL` and
//! `ITIMER_PROF` ([`CpuTimer`]: SIGVTALRM and SIGPROF when the process's CPU time does), each
//! then again every interval.
//!
//! Each arming starts a host thread that sleeps until the deadline (a condition variable, so
//! that re-arming or disarming wakes it at once) and posts the signal through the thread
//! group; a thread whose arming was replaced ends. A CPU timer's thread sleeps for the CPU
//! time left divided by the process's running threads (the fastest its clock can reach the
//! deadline), between 1 ms and 1 s, and looks again.
//!
//! Differences from Linux: `ITIMER_VIRTUAL` counts the process's whole CPU time, like
//! `ITIMER_PROF` (the host's thread clocks do not split the guest's user time from the time
//! spent handling its system calls), and a CPU timer fires up to about a millisecond late.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use super::ThreadGroup;

/// A timer's arming; `P` is a point of its clock (an instant, or an amount of CPU time).
struct State<P> {
    /// When it next expires (None: disarmed).
    deadline: Option<P>,
    /// Re-arming period (zero: one shot).
    interval: Duration,
    /// Bumped at every arming: a timer thread of an older arming ends.
    generation: u64,
}

impl<P> Default for State<P> {
    fn default() -> State<P> {
        State {
            deadline: None,
            interval: Duration::ZERO,
            generation: 0,
        }
    }
}

impl<P> State<P> {
    /// Arms (or disarms, with no deadline); the arming's generation when armed, for its
    /// thread.
    fn arm(&mut self, deadline: Option<P>, interval: Duration) -> Option<u64> {
        self.generation += 1;
        self.interval = interval;
        self.deadline = deadline;
        self.deadline.is_some().then_some(self.generation)
    }
}

/// Starts a timer's thread (`run` waits for the deadline and posts the signal).
fn start_thread(name: &str, run: impl FnOnce() + Send + 'static) {
    let run = move || {
        // Started from a task thread, which a platform may have pinned to one CPU.
        super::affinity::free_current_thread();
        run()
    };
    if let Err(e) = std::thread::Builder::new().name(name.into()).spawn(run) {
        tracing::warn!("setitimer: cannot start the timer thread: {e}");
    }
}

/// One process's ITIMER_REAL.
#[derive(Default)]
pub struct RealTimer {
    state: Mutex<State<Instant>>,
    cv: Condvar,
}

impl RealTimer {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<Instant>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Time left and interval (getitimer).
    pub fn get(&self) -> (Duration, Duration) {
        let s = self.lock();
        let left = s.deadline.map_or(Duration::ZERO, |d| {
            d.saturating_duration_since(Instant::now())
        });
        (left, s.interval)
    }

    /// Arms (a zero `value` disarms) and returns the previous (left, interval).
    pub fn set(
        self: &Arc<Self>,
        group: &Arc<ThreadGroup>,
        value: Duration,
        interval: Duration,
    ) -> (Duration, Duration) {
        let old = self.get();
        let deadline = (!value.is_zero()).then(|| Instant::now() + value);
        let armed = self.lock().arm(deadline, interval);
        self.cv.notify_all();
        if let Some(generation) = armed {
            let me = self.clone();
            let group = Arc::downgrade(group);
            start_thread("itimer", move || me.run(generation, group));
        }
        old
    }

    fn run(&self, generation: u64, group: Weak<ThreadGroup>) {
        let mut s = self.lock();
        loop {
            if s.generation != generation {
                return;
            }
            let Some(deadline) = s.deadline else { return };
            let now = Instant::now();
            if now < deadline {
                s = self
                    .cv
                    .wait_timeout(s, deadline - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                continue;
            }
            s.deadline = (!s.interval.is_zero()).then(|| deadline + s.interval);
            drop(s);
            match group.upgrade() {
                Some(g) if g.exit_status().is_none() => g.post_signal(libc::SIGALRM),
                _ => return,
            }
            s = self.lock();
        }
    }
}

/// One process's `ITIMER_VIRTUAL` or `ITIMER_PROF`: `sig` when the process's CPU time reaches
/// the deadline.
pub struct CpuTimer {
    sig: i32,
    /// The deadline is a point of the process's CPU time, not an instant.
    state: Mutex<State<Duration>>,
    cv: Condvar,
}

/// The shortest and longest sleeps of a CPU timer's thread between two looks at the clock.
const CPU_POLL: (Duration, Duration) = (Duration::from_millis(1), Duration::from_secs(1));

impl CpuTimer {
    /// A disarmed timer that sends `sig`.
    pub fn new(sig: i32) -> CpuTimer {
        CpuTimer {
            sig,
            state: Mutex::default(),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<Duration>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// CPU time left and interval (getitimer) of `group`'s timer.
    pub fn get(&self, group: &ThreadGroup) -> (Duration, Duration) {
        let s = self.lock();
        let left = s
            .deadline
            .map_or(Duration::ZERO, |d| d.saturating_sub(group.cpu_time()));
        (left, s.interval)
    }

    /// Arms (a zero `value` disarms) and returns the previous (left, interval).
    pub fn set(
        self: &Arc<Self>,
        group: &Arc<ThreadGroup>,
        value: Duration,
        interval: Duration,
    ) -> (Duration, Duration) {
        let old = self.get(group);
        let deadline = (!value.is_zero()).then(|| group.cpu_time() + value);
        let armed = self.lock().arm(deadline, interval);
        self.cv.notify_all();
        if let Some(generation) = armed {
            let me = self.clone();
            let group = Arc::downgrade(group);
            start_thread("itimer-cpu", move || me.run(generation, group));
        }
        old
    }

    fn run(&self, generation: u64, group: Weak<ThreadGroup>) {
        let mut s = self.lock();
        loop {
            if s.generation != generation {
                return;
            }
            let Some(deadline) = s.deadline else { return };
            let Some(g) = group.upgrade() else { return };
            if g.exit_status().is_some() {
                return;
            }
            let now = g.cpu_time();
            if now < deadline {
                let threads = g.cpu.threads().max(1) as u32;
                drop(g);
                let wait = ((deadline - now) / threads).clamp(CPU_POLL.0, CPU_POLL.1);
                s = self
                    .cv
                    .wait_timeout(s, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                continue;
            }
            s.deadline = (!s.interval.is_zero()).then(|| (deadline + s.interval).max(now));
            drop(s);
            g.post_signal(self.sig);
            drop(g);
            s = self.lock();
        }
    }
}
