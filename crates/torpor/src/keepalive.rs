//! The keep-alive policy (`--hibernate-after D`, annotation `dev.torpor.hibernate-after`): a
//! sandbox idle for `D` hibernates by itself, and the next connection wakes it as usual.
//!
//! *Idle* means: not hibernated, not serving a request (the state is `hot` or `woken`, not
//! `running` or `hibernate-running`), no request begun (the task control's count of inputs
//! its waiting calls returned did not move: a server's periodic timeouts, such as Python's
//! `serve_forever` waking every half second, do not count) and almost no CPU used by the holder (below [`IDLE_CPU_SHARE`] of the
//! time: a runtime's housekeeping threads, a Go scheduler's ticks), over the whole period. The
//! CPU test covers what the state alone misses: a server whose requests run on other threads
//! than the one the state follows; only the sandbox's threads count, not the holder's control
//! threads, live or ended (a platform polling `torpor stats` does not keep it awake: each
//! request's thread adds its own CPU time to what is left out as it ends). The watcher samples
//! these every [`tick`]; a hibernate that
//! fails (a request came in meanwhile, a thread did not park) only starts a new idle period.
//!
//! **Memory pressure** (`--memory-floor SIZE`, annotation `dev.torpor.memory-floor`): while
//! the host's `MemAvailable` is below the floor, idle sandboxes hibernate early, longest idle
//! first, until it is not. There is no agent: each sandbox's watcher publishes the start of
//! its idle period in a registry shared by the sandboxes of a state root ([`Registry`]: a
//! directory with one small file per idle sandbox, written by rename, read by everyone), and
//! under pressure the watchers whose sandboxes have been idle longest (among those still
//! alive; one, or more the deeper the pressure: [`pressure_batch`]) hibernate them; the next
//! ones go a tick later if the pressure stays. A sandbox that dies
//! leaves a file whose holder is gone, which the others skip, so no process's death stops
//! the policy.

use std::time::{Duration, Instant};

use hibernate::state::State;

/// The share of one CPU an idle sandbox may use (its runtime's housekeeping).
pub const IDLE_CPU_SHARE: f64 = 0.02;

/// The longest a watcher blocks on a hibernated sandbox before it looks again (the wake, or
/// the sandbox's end, ends the wait before: this only bounds a missed notification).
const HIBERNATED_WAIT: Duration = Duration::from_secs(300);

/// The shortest `--hibernate-after`.
pub const MIN_AFTER: Duration = Duration::from_millis(100);

/// What the watcher reads from the sandbox at each tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// The sandbox's state.
    pub state: State,
    /// Something outside holds the sandbox hot (an attached `exec -t` session): not idle.
    pub held: bool,
    /// Inputs the sandbox's waiting calls returned so far (connections, bytes, ready
    /// descriptors; not the timeouts of a periodic wake-up).
    pub inputs: u64,
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
        let idle_state = !s.held && matches!(s.state, State::Hot | State::Woken);
        let (since, first) = match self.idle {
            Some((since, first))
                if idle_state && first.state == s.state && first.inputs == s.inputs =>
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

    /// How long the sandbox has been idle at `now` with at most [`IDLE_CPU_SHARE`] of a CPU,
    /// given the sample `s` taken then (after [`Self::tick`]); `None` when it is not idle.
    pub fn idle_for(&self, now: Instant, s: Sample) -> Option<Duration> {
        let (since, first) = self.idle?;
        let elapsed = now.saturating_duration_since(since);
        let cpu_us = s.cpu_us.saturating_sub(first.cpu_us) as f64;
        (cpu_us <= IDLE_CPU_SHARE * elapsed.as_micros().max(1) as f64 + PRESSURE_CPU_SLACK_US)
            .then_some(elapsed)
    }
}

/// CPU time an idle period may hold whatever its length: one clock tick of the process's
/// accounting, so that a short period is not judged on a single tick.
const PRESSURE_CPU_SLACK_US: f64 = 10_000.0;

/// How long a sandbox must have been idle before memory pressure hibernates it (a sandbox
/// between two requests is not idle).
pub const PRESSURE_MIN_IDLE: Duration = Duration::from_secs(1);

/// How many of the longest idle sandboxes hibernate at once when `MemAvailable` is `deficit`
/// bytes below the floor: one per [`PRESSURE_STEP`] missing, at least one, at most
/// [`PRESSURE_MAX_BATCH`] (a deep pressure is relieved in a few ticks, a slight one by the
/// single longest idle).
pub fn pressure_batch(deficit: u64) -> usize {
    (1 + deficit / PRESSURE_STEP).min(PRESSURE_MAX_BATCH as u64) as usize
}

/// Memory missing below the floor for each sandbox hibernated at once under pressure.
pub const PRESSURE_STEP: u64 = 64 << 20;

/// The most sandboxes hibernated at once under pressure.
pub const PRESSURE_MAX_BATCH: usize = 16;

/// The host's `MemAvailable` in bytes (`/proc/meminfo`).
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

fn parse_mem_available(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// The keep-alive registry of a state root: `DIR/ID` holds `IDLE_SINCE_US PID` while sandbox
/// `ID` is idle and not hibernated.
#[derive(Clone, Debug)]
pub struct Registry {
    dir: std::path::PathBuf,
    id: String,
}

/// An idle sandbox in the registry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    since_us: u64,
    id: String,
}

impl Registry {
    /// The registry in `dir` (created if needed), as sandbox `id` sees it.
    ///
    /// # Errors
    /// If the directory cannot be created.
    pub fn open(dir: std::path::PathBuf, id: &str) -> std::io::Result<Registry> {
        std::fs::create_dir_all(&dir)?;
        Ok(Registry {
            dir,
            id: id.to_string(),
        })
    }

    /// Says that this sandbox has been idle since `since_us` (µs since the epoch).
    pub fn publish(&self, since_us: u64) {
        let tmp = self.dir.join(format!(".{}.tmp", self.id));
        let text = format!("{since_us} {}\n", std::process::id());
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, self.dir.join(&self.id));
        }
    }

    /// Says that this sandbox is no longer idle (busy, hibernated or gone).
    pub fn withdraw(&self) {
        let _ = std::fs::remove_file(self.dir.join(&self.id));
    }

    /// The idle sandboxes whose holders are alive, longest idle first.
    fn entries(&self) -> Vec<Entry> {
        let mut v: Vec<Entry> = std::fs::read_dir(&self.dir)
            .map(|r| {
                r.flatten()
                    .filter_map(|e| {
                        let id = e.file_name().into_string().ok()?;
                        if id.starts_with('.') {
                            return None;
                        }
                        let text = std::fs::read_to_string(e.path()).ok()?;
                        let mut f = text.split_whitespace();
                        let since_us = f.next()?.parse().ok()?;
                        let pid: u32 = f.next()?.parse().ok()?;
                        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
                        alive.then_some(Entry { since_us, id })
                    })
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Whether this sandbox is among the `k` longest idle of the registry (ties go to the
    /// smaller ID).
    pub fn among_longest_idle(&self, k: usize) -> bool {
        self.entries().iter().take(k).any(|e| e.id == self.id)
    }
}

/// What the watcher enforces.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// Hibernate after this long idle.
    pub after: Option<Duration>,
    /// Hibernate idle sandboxes early, longest idle first, while `MemAvailable` is below
    /// this (bytes).
    pub memory_floor: Option<u64>,
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
    let d = crate::units::parse_duration(s)?;
    if d < MIN_AFTER {
        return Err(format!(
            "{s:?} is too short to hibernate after: at least {}ms",
            MIN_AFTER.as_millis()
        ));
    }
    Ok(d)
}

/// Runs `policy` until `stopped()`: samples with `sample`, publishes idle periods in
/// `registry`, and calls `hibernate` once the sandbox has been idle for `policy.after`, or
/// under memory pressure when it is the longest idle.
pub fn watch(
    policy: &Policy,
    registry: Option<&Registry>,
    state: impl Fn() -> State,
    wait_while_hibernated: impl Fn(Duration),
    sample: impl Fn() -> Sample,
    hibernate: impl Fn() -> Result<(), String>,
    stopped: impl Fn() -> bool,
) {
    // Without a delay of its own, only pressure hibernates: a clock that never expires.
    let after = policy.after.unwrap_or(Duration::MAX);
    let mut clock = IdleClock::new(after);
    let every = policy.after.map_or(Duration::from_millis(250), tick);
    let wall_us = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    };
    let mut published: Option<Instant> = None;
    while !stopped() {
        std::thread::sleep(every);
        // A hibernated sandbox costs the host nothing to watch: no /proc reads, no timer,
        // the watcher blocks until it wakes (a thousand of them sampling five times a second
        // used half a CPU, and once a second 1,000 wake-ups a second).
        if state() == State::Hibernated {
            clock.restart();
            if published.take().is_some() {
                if let Some(reg) = registry {
                    reg.withdraw();
                }
            }
            wait_while_hibernated(HIBERNATED_WAIT);
            continue;
        }
        let now = Instant::now();
        let s = sample();
        let due = clock.tick(now, s);
        let idle = clock.idle_for(now, s);
        if let Some(reg) = registry {
            match (idle, clock.idle.map(|(since, _)| since)) {
                (Some(d), Some(since)) if published != Some(since) => {
                    reg.publish(wall_us().saturating_sub(d.as_micros() as u64));
                    published = Some(since);
                }
                (None, _) if published.is_some() => {
                    reg.withdraw();
                    published = None;
                }
                _ => {}
            }
        }
        let pressed = policy.memory_floor.is_some_and(|floor| {
            idle.is_some_and(|d| d >= PRESSURE_MIN_IDLE)
                && mem_available().is_some_and(|m| {
                    m < floor
                        && registry.is_none_or(|r| r.among_longest_idle(pressure_batch(floor - m)))
                })
        });
        if (due || pressed) && !stopped() {
            let why = if due {
                format!("idle for {after:?}")
            } else {
                "memory pressure (the longest idle)".to_string()
            };
            match hibernate() {
                Ok(()) => tracing::info!("{why}: hibernated"),
                Err(e) => tracing::info!("{why}, but not hibernated: {e}"),
            }
            if let Some(reg) = registry {
                reg.withdraw();
            }
            published = None;
            clock.restart();
        }
    }
    if let Some(reg) = registry {
        reg.withdraw();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(state: State, busy: u64, cpu_us: u64) -> Sample {
        Sample {
            state,
            held: false,
            inputs: busy,
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
    fn idle_time_for_pressure() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut c = IdleClock::new(Duration::MAX);
        let a = s(State::Hot, 1, 0);
        assert!(!c.tick(ms(0), a));
        assert_eq!(c.idle_for(ms(0), a), Some(Duration::ZERO));
        let b = s(State::Hot, 1, 5_000);
        assert!(!c.tick(ms(1500), b));
        assert_eq!(c.idle_for(ms(1500), b), Some(Duration::from_millis(1500)));
        // Half a CPU: not idle.
        let busy = s(State::Hot, 1, 1_000_000);
        assert!(!c.tick(ms(2000), busy));
        assert_eq!(c.idle_for(ms(2000), busy), None);
        let run = s(State::Running, 1, 1_000_000);
        c.tick(ms(2100), run);
        assert_eq!(c.idle_for(ms(2100), run), None);
    }

    #[test]
    fn deeper_pressure_hibernates_more_at_once() {
        assert_eq!(pressure_batch(0), 1);
        assert_eq!(pressure_batch(10 << 20), 1);
        assert_eq!(pressure_batch(64 << 20), 2);
        assert_eq!(pressure_batch(200 << 20), 4);
        assert_eq!(pressure_batch(u64::MAX), PRESSURE_MAX_BATCH);
    }

    #[test]
    fn meminfo() {
        let t = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_mem_available(t), Some(2048 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
        assert!(mem_available().is_some_and(|m| m > 0));
    }

    #[test]
    fn the_registry_names_the_longest_idle_living_sandbox() {
        let dir = std::env::temp_dir().join(format!("torpor-keepalive-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = Registry::open(dir.clone(), "a").expect("registry");
        let b = Registry::open(dir.clone(), "b").expect("registry");
        assert!(!a.among_longest_idle(1), "nobody idle");
        b.publish(100);
        a.publish(200);
        assert!(b.among_longest_idle(1) && !a.among_longest_idle(1));
        // A dead holder's entry is skipped.
        std::fs::write(dir.join("dead"), format!("1 {}\n", u32::MAX)).expect("write");
        std::fs::write(dir.join("junk"), "not numbers").expect("write");
        assert!(b.among_longest_idle(1));
        assert!(a.among_longest_idle(2) && !a.among_longest_idle(1));
        b.withdraw();
        assert!(a.among_longest_idle(1));
        a.withdraw();
        assert!(!a.among_longest_idle(1));
        let _ = std::fs::remove_dir_all(&dir);
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
