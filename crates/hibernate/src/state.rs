//! The sandbox state machine: one explicit [`State`], every transition checked against the
//! table below, timed, logged, and kept in a bounded history for `torpor stats`.
//!
//! States (names as in `torpor state` / `torpor stats`), after the paper's Figure 3:
//!
//! | state | meaning |
//! |---|---|
//! | `creating` | being built; the program has not started |
//! | `hot` | initialised and idle, all memory resident |
//! | `running` | serving a request, all memory resident |
//! | `hibernated` | deflated: memory in the swap/REAP files, no CPU used |
//! | `hibernate-running` | serving a request after a hibernate: pages come back as touched |
//! | `woken` | idle after a hibernate (or woken without a request): only touched pages resident |
//! | `stopped` | ended (terminal) |
//!
//! Legal transitions (the paper's numbers in brackets):
//!
//! ```text
//! creating          -> hot | running | hibernated (restored from a checkpoint) | stopped
//! hot               -> running (2) | hibernated (4, SIGSTOP: deflate) | stopped
//! running           -> hot (3) | hibernated (deflate while busy) | stopped
//! hibernated        -> hibernate-running (7, a request) | woken (5, SIGCONT) | stopped
//! hibernate-running -> woken (8, request done) | hibernated (deflate again) | stopped
//! woken             -> hibernate-running (6, next request) | hibernated (9) | stopped
//! stopped           -> (nothing)
//! ```
//!
//! A deflate in progress is not a state: it happens with the task parked, and a failed deflate
//! (disk full, I/O error) leaves the state where it was. `woken` never returns to `hot` or
//! `running`, which promise all memory resident. A transition to the current state is illegal.
//!
//! The machine is plain data: the sandbox holds it under its own lock.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Transitions kept in the history.
pub const HISTORY_LEN: usize = 64;

/// The sandbox's lifecycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Being built.
    Creating,
    /// Initialised and idle, all memory resident.
    Hot,
    /// Serving, all memory resident.
    Running,
    /// Deflated: no CPU, memory in files.
    Hibernated,
    /// Serving a request after a hibernate; pages return as touched.
    HibernateRunning,
    /// Idle after a hibernate; only touched pages resident.
    Woken,
    /// Ended.
    Stopped,
}

impl State {
    /// Every state, in declaration order.
    pub const ALL: [State; 7] = [
        State::Creating,
        State::Hot,
        State::Running,
        State::Hibernated,
        State::HibernateRunning,
        State::Woken,
        State::Stopped,
    ];

    /// The lowercase name used in `torpor state` and `torpor stats`.
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Creating => "creating",
            State::Hot => "hot",
            State::Running => "running",
            State::Hibernated => "hibernated",
            State::HibernateRunning => "hibernate-running",
            State::Woken => "woken",
            State::Stopped => "stopped",
        }
    }

    /// Whether the table allows `self -> to`.
    pub const fn may_go_to(self, to: State) -> bool {
        use State::*;
        matches!(
            (self, to),
            (Creating, Hot | Running | Hibernated)
                | (Hot, Running | Hibernated)
                | (Running, Hot | Hibernated)
                | (Hibernated, HibernateRunning | Woken)
                | (HibernateRunning, Woken | Hibernated)
                | (Woken, HibernateRunning | Hibernated)
                | (
                    Creating | Hot | Running | Woken | Hibernated | HibernateRunning,
                    Stopped
                )
        )
    }

    /// Whether the sandbox is out of its hot states because of hibernation (its memory is, or
    /// is being, moved to files).
    pub const fn is_hibernate(self) -> bool {
        matches!(
            self,
            State::Hibernated | State::HibernateRunning | State::Woken
        )
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a state.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown sandbox state {0:?}")]
pub struct UnknownState(pub String);

impl FromStr for State {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, UnknownState> {
        State::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

/// An illegal transition request.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("illegal sandbox state transition {from} -> {to}")]
pub struct IllegalTransition {
    /// Current state.
    pub from: State,
    /// State asked for.
    pub to: State,
}

/// One recorded transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Transition {
    /// State left.
    pub from: State,
    /// State entered.
    pub to: State,
    /// When, in µs since the epoch.
    pub at_unix_us: u64,
    /// Time spent in `from`, in µs.
    pub took_us: u64,
}

/// What `torpor stats` prints about the state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StateSnapshot {
    /// Current state.
    pub state: State,
    /// When it was entered, µs since the epoch.
    pub since_unix_us: u64,
    /// Time in it so far, µs.
    pub in_state_us: u64,
    /// Recent transitions, oldest first (at most [`HISTORY_LEN`]).
    pub transitions: Vec<Transition>,
}

/// The current state, when it was entered, and the recent transitions.
#[derive(Clone, Debug)]
pub struct StateMachine {
    state: State,
    entered: Instant,
    entered_unix_us: u64,
    history: VecDeque<Transition>,
}

fn unix_us(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Default for StateMachine {
    fn default() -> Self {
        Self::new()
    }
}

impl StateMachine {
    /// A machine in `creating`.
    pub fn new() -> Self {
        StateMachine {
            state: State::Creating,
            entered: Instant::now(),
            entered_unix_us: unix_us(SystemTime::now()),
            history: VecDeque::with_capacity(HISTORY_LEN),
        }
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Time spent in the current state so far.
    pub fn in_state(&self) -> std::time::Duration {
        self.entered.elapsed()
    }

    /// Checks `self.state() -> to` against the table without changing anything.
    ///
    /// # Errors
    /// [`IllegalTransition`] if the transition is not allowed.
    pub fn check(&self, to: State) -> Result<(), IllegalTransition> {
        if self.state.may_go_to(to) {
            Ok(())
        } else {
            Err(IllegalTransition {
                from: self.state,
                to,
            })
        }
    }

    /// Moves to `to`: checks it, records it with its time, and logs it.
    ///
    /// # Errors
    /// [`IllegalTransition`] if the table forbids it; the state is unchanged.
    pub fn transition(&mut self, to: State) -> Result<Transition, IllegalTransition> {
        self.check(to)?;
        let now = Instant::now();
        let took_us = now.duration_since(self.entered).as_micros() as u64;
        let at_unix_us = unix_us(SystemTime::now());
        let t = Transition {
            from: self.state,
            to,
            at_unix_us,
            took_us,
        };
        // Serving flips (hot/running, woken/hibernate-running) happen on every request.
        let serving = |s: State| {
            matches!(
                s,
                State::Hot | State::Running | State::Woken | State::HibernateRunning
            )
        };
        if serving(t.from) && serving(t.to) {
            tracing::debug!(from = %t.from, to = %t.to, took_us, "sandbox state transition");
        } else {
            tracing::info!(from = %t.from, to = %t.to, took_us, "sandbox state transition");
        }
        self.state = to;
        self.entered = now;
        self.entered_unix_us = at_unix_us;
        if self.history.len() == HISTORY_LEN {
            self.history.pop_front();
        }
        self.history.push_back(t);
        Ok(t)
    }

    /// Recent transitions, oldest first.
    pub fn history(&self) -> impl Iterator<Item = &Transition> {
        self.history.iter()
    }

    /// The state, timing and history, ready to serialise.
    pub fn snapshot(&self) -> StateSnapshot {
        StateSnapshot {
            state: self.state,
            since_unix_us: self.entered_unix_us,
            in_state_us: self.entered.elapsed().as_micros() as u64,
            transitions: self.history.iter().copied().collect(),
        }
    }

    /// The snapshot as a JSON value (for `torpor stats`).
    pub fn to_json(&self) -> serde_json::Value {
        // Serialising plain enums, integers and vectors cannot fail.
        serde_json::to_value(self.snapshot()).unwrap_or(serde_json::Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use State::*;

    fn machine_at(path: &[State]) -> StateMachine {
        let mut m = StateMachine::new();
        for &s in path {
            m.transition(s).unwrap();
        }
        m
    }

    #[test]
    fn names_round_trip_and_match_serde() {
        for s in State::ALL {
            assert_eq!(s.as_str().parse::<State>().unwrap(), s);
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::Value::from(s.as_str())
            );
            assert_eq!(s.to_string(), s.as_str());
        }
        assert_eq!(HibernateRunning.as_str(), "hibernate-running");
        assert!("Hot".parse::<State>().is_err());
    }

    #[test]
    fn table_is_exactly_as_documented() {
        let legal: &[(State, State)] = &[
            (Creating, Hot),
            (Creating, Hibernated),
            (Creating, Running),
            (Creating, Stopped),
            (Hot, Running),
            (Hot, Hibernated),
            (Hot, Stopped),
            (Running, Hot),
            (Running, Hibernated),
            (Running, Stopped),
            (Hibernated, HibernateRunning),
            (Hibernated, Woken),
            (Hibernated, Stopped),
            (HibernateRunning, Woken),
            (HibernateRunning, Hibernated),
            (HibernateRunning, Stopped),
            (Woken, HibernateRunning),
            (Woken, Hibernated),
            (Woken, Stopped),
        ];
        for a in State::ALL {
            for b in State::ALL {
                assert_eq!(a.may_go_to(b), legal.contains(&(a, b)), "{a} -> {b}");
            }
        }
    }

    #[test]
    fn full_cycle_with_two_hibernates() {
        let m = machine_at(&[
            Hot,
            Running,
            Hot,
            Hibernated,
            HibernateRunning,
            Woken,
            Hibernated,
            Woken,
            HibernateRunning,
            Hibernated,
            Stopped,
        ]);
        assert_eq!(m.state(), Stopped);
        assert_eq!(m.history().count(), 11);
        for s in State::ALL {
            assert!(m.check(s).is_err(), "stopped -> {s}");
        }
    }

    #[test]
    fn illegal_transitions_change_nothing() {
        let mut m = machine_at(&[Hot]);
        for bad in [Creating, Hot, HibernateRunning, Woken] {
            assert!(m.transition(bad).is_err(), "hot -> {bad}");
        }
        assert_eq!(m.state(), Hot);
        assert_eq!(m.history().count(), 1);
        let mut m = machine_at(&[Hot, Hibernated, HibernateRunning, Woken]);
        assert!(m.transition(Running).is_err());
        assert!(m.transition(Hot).is_err());
        let err = m.transition(Creating).unwrap_err();
        assert!(err.to_string().contains("woken -> creating"), "{err}");
    }

    #[test]
    fn times_are_recorded() {
        let mut m = StateMachine::new();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let t = m.transition(Hot).unwrap();
        assert!(t.took_us >= 20_000, "{t:?}");
        assert!(t.at_unix_us > 1_600_000_000_000_000);
        assert_eq!(m.snapshot().since_unix_us, t.at_unix_us);
    }

    #[test]
    fn history_is_bounded_and_ordered() {
        let mut m = machine_at(&[Hot]);
        for _ in 0..100 {
            m.transition(Running).unwrap();
            m.transition(Hot).unwrap();
        }
        let h: Vec<_> = m.history().copied().collect();
        assert_eq!(h.len(), HISTORY_LEN);
        assert_eq!(h.last().unwrap().to, Hot);
        assert!(h
            .windows(2)
            .all(|w| w[0].to == w[1].from && w[0].at_unix_us <= w[1].at_unix_us));
    }

    #[test]
    fn snapshot_json() {
        let m = machine_at(&[Hot, Hibernated, HibernateRunning]);
        let j = m.to_json();
        assert_eq!(j["state"], "hibernate-running");
        assert_eq!(j["transitions"][0]["from"], "creating");
        assert_eq!(j["transitions"][2]["to"], "hibernate-running");
        assert!(j["transitions"][1]["took_us"].is_u64());
        assert!(j["in_state_us"].is_u64());
    }
}
