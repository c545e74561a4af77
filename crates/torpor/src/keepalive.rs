//! The keep-alive policy (`--hibernate-after D`, annotation `dev.torpor.hibernate-after`): a
//! sandbox idle for `D` hibernates by itself, and the next connection wakes it as usual.
//!
//! *Idle* means: not hibernated, not serving a request (the state is `hot` or `woken`, not
//! `running` or `hibernate-running`), no request begun (the task control's count of busy
//! periods did not move) and almost no CPU used by the holder (below [`IDLE_CPU_SHARE`] of the
//! time: a runtime's housekeeping threads, a Go scheduler's ticks), over the whole period. The
//! CPU test covers what the state alone misses: a server whose requests run on other threads
//! than the one the state follows; only the sandbox's threads count, not the holder's control
//! thread (a platform polling `torpor stats` does not keep it awake). The watcher samples
//! these every [`tick`]; a hibernate that
//! fails (a request came in meanwhile, a thread did not park) only starts a new idle period.

use std::time::{Duration, Instant};

use hibernate::state::State;

/// The share of one CPU an idle sandbox may use (its runtime's housekeeping).
pub const IDLE_CPU_SHARE: f64 = 0.02;

/// The shortest `--hibernate-after`.
pub const MIN_AFTER: Duration = Duration::from_millis(100);

/// What the watcher reads from the sandbox at each tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// The sandbox's state.
    pub state: State,
    /// Requests begun so far (the task control's busy periods).
    pub busy_periods: u64,
    /// The holder's CPU time so far (µs).
    pub cpu_us: u64,
}

/// Decides, from samples, when a sandbox has been idle long enough.
#[derive(Debug)]
pub struct IdleClock {
    after: Duration,
    /// The start of the idle period and the sample then.
    idle: Option<(Instant, Sample)>,
}

impl IdleClock {
    /// A clock that asks for a hibernate after `after` of idleness.
    pub fn new(after: Duration) -> Self {
        IdleClock { after, idle: None }
    }

    /// Takes the sample `s` read at `now`; true when the sandbox should hibernate now: it has
    /// been in an idle state, with no request begun, for `after`, and used at most
    /// [`IDLE_CPU_SHARE`] of that time on the CPU (counted over the whole period, so that
    /// the clock's granularity does not matter).
    pub fn tick(&mut self, now: Instant, s: Sample) -> bool {
        let idle_state = matches!(s.state, State::Hot | State::Woken);
        let (since, first) = match self.idle {
            Some((since, first))
                if idle_state && first.state == s.state && first.busy_periods == s.busy_periods =>
            {
                (since, first)
            }
            _ => {
                self.idle = idle_state.then_some((now, s));
                return false;
            }
        };
        let elapsed = now.saturating_duration_since(since);
        if elapsed < self.after {
            return false;
        }
        let cpu_us = s.cpu_us.saturating_sub(first.cpu_us) as f64;
        if cpu_us <= IDLE_CPU_SHARE * elapsed.as_micros() as f64 {
            return true;
        }
        // Busy on other threads than the one the state follows: a new period.
        self.idle = Some((now, s));
        false
    }

    /// Starts a new idle period (after a hibernate was tried, whatever its outcome).
    pub fn restart(&mut self) {
        self.idle = None;
    }
}

/// How often the watcher samples for a policy of `after`: often enough to act within about a
/// tenth of it, at most once a second, at least every 20 ms.
pub fn tick(after: Duration) -> Duration {
    (after / 10).clamp(Duration::from_millis(20), Duration::from_secs(1))
}

/// Parses a `--hibernate-after` or annotation value (`30s`, `5m`, `500ms`).
///
/// # Errors
/// Not a duration, or shorter than [`MIN_AFTER`].
pub fn parse_after(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("bad duration {s:?} ({e}): expected e.g. 30s, 5m or 500ms"))?;
    if d < MIN_AFTER {
        return Err(format!(
            "{s:?} is too short to hibernate after: at least {}ms",
            MIN_AFTER.as_millis()
        ));
    }
    Ok(d)
}

/// Runs the policy until `stopped()`: samples with `sample`, and calls `hibernate` once the
/// sandbox has been idle for `after`.
pub fn watch(
    after: Duration,
    sample: impl Fn() -> Sample,
    hibernate: impl Fn() -> Result<(), String>,
    stopped: impl Fn() -> bool,
) {
    let mut clock = IdleClock::new(after);
    let every = tick(after);
    while !stopped() {
        std::thread::sleep(every);
        if clock.tick(Instant::now(), sample()) && !stopped() {
            match hibernate() {
                Ok(()) => tracing::info!("idle for {after:?}: hibernated"),
                Err(e) => tracing::info!("idle for {after:?}, but not hibernated: {e}"),
            }
            clock.restart();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(state: State, busy: u64, cpu_us: u64) -> Sample {
        Sample {
            state,
            busy_periods: busy,
            cpu_us,
        }
    }

    #[test]
    fn hibernates_after_a_quiet_period_only() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut c = IdleClock::new(Duration::from_millis(500));
        assert!(!c.tick(ms(0), s(State::Hot, 1, 1000)), "idle from here");
        assert!(!c.tick(ms(400), s(State::Hot, 1, 1000)));
        assert!(c.tick(ms(500), s(State::Hot, 1, 1000)), "500 ms idle");
        c.restart();
        // A request (busy periods move) starts the period again.
        assert!(!c.tick(ms(700), s(State::Woken, 1, 1000)));
        assert!(!c.tick(ms(1000), s(State::Woken, 2, 1000)));
        assert!(!c.tick(ms(1400), s(State::Woken, 2, 1000)));
        assert!(c.tick(ms(1500), s(State::Woken, 2, 1000)));
    }

    #[test]
    fn busy_states_and_cpu_keep_it_awake() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        // Serving all along.
        let mut c = IdleClock::new(Duration::from_millis(200));
        for i in 0..10 {
            assert!(!c.tick(ms(i * 100), s(State::Running, 1, 0)));
        }
        // Idle state, but 10 % of a CPU (threads serving the requests).
        let mut c = IdleClock::new(Duration::from_millis(200));
        for i in 0..10 {
            assert!(!c.tick(ms(i * 100), s(State::Hot, 1, i * 10_000)));
        }
        // 1 % of a CPU is housekeeping, even in one 10 ms lump: idle.
        let mut c = IdleClock::new(Duration::from_secs(1));
        assert!(!c.tick(ms(0), s(State::Hot, 1, 0)));
        assert!(!c.tick(ms(500), s(State::Hot, 1, 10_000)));
        assert!(c.tick(ms(1000), s(State::Hot, 1, 10_000)));
        // Hibernated sandboxes are not hibernated again.
        let mut c = IdleClock::new(Duration::from_millis(200));
        for i in 0..10 {
            assert!(!c.tick(ms(i * 100), s(State::Hibernated, 1, 0)));
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_after("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_after(" 500ms "), Ok(Duration::from_millis(500)));
        assert!(parse_after("10ms").unwrap_err().contains("too short"));
        assert!(parse_after("soon").unwrap_err().contains("bad duration"));
        assert_eq!(tick(Duration::from_secs(60)), Duration::from_secs(1));
        assert_eq!(tick(Duration::from_millis(100)), Duration::from_millis(20));
        assert_eq!(tick(Duration::from_secs(2)), Duration::from_millis(200));
    }
}
