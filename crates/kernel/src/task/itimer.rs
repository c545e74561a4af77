//! The real-time interval timer of a process (setitimer(2) `ITIMER_REAL`, alarm(2)): SIGALRM
//! to the process when it expires, then every interval.
//!
//! Each arming starts a host thread that sleeps until the deadline (a condition variable, so
//! that re-arming or disarming wakes it at once) and posts SIGALRM through the thread group;
//! a thread whose arming was replaced ends.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use super::ThreadGroup;

#[derive(Default)]
struct State {
    /// When it next expires (None: disarmed).
    deadline: Option<Instant>,
    /// Re-arming period (zero: one shot).
    interval: Duration,
    /// Bumped at every arming: a timer thread of an older arming ends.
    generation: u64,
}

/// One process's ITIMER_REAL.
#[derive(Default)]
pub struct RealTimer {
    state: Mutex<State>,
    cv: Condvar,
}

impl RealTimer {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
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
        let mut s = self.lock();
        s.generation += 1;
        s.interval = interval;
        s.deadline = (!value.is_zero()).then(|| Instant::now() + value);
        let generation = s.generation;
        let armed = s.deadline.is_some();
        drop(s);
        self.cv.notify_all();
        if armed {
            let me = self.clone();
            let group = Arc::downgrade(group);
            let spawned = std::thread::Builder::new()
                .name("itimer".into())
                .spawn(move || me.run(generation, group));
            if let Err(e) = spawned {
                tracing::warn!("setitimer: cannot start the timer thread: {e}");
            }
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
