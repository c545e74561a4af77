//! POSIX per-process timers (timer_create(2), timer_settime(2), timer_gettime(2),
//! timer_getoverrun(2), timer_delete(2)): the `struct k_itimer`s of one process, kept in its
//! thread group's [`PosixTimers`] and deleted when it execs or ends. A fork starts with none.
//!
//! A timer measures one clock ([`TimerClock`]): a host clock (`CLOCK_REALTIME`,
//! `CLOCK_MONOTONIC`, `CLOCK_BOOTTIME`, `CLOCK_TAI`; the `_ALARM` clocks as their base clock,
//! on a host with a real-time clock (else EOPNOTSUPP, as Linux) for a caller with
//! `CAP_WAKE_ALARM`: nothing in a sandbox suspends the machine), the
//! process's CPU time ([`ThreadGroup::cpu_time`]) or one of its threads'
//! ([`super::cputime::ProcessCpu::thread_time`]). At expiry it queues its signal for the
//! process (`SIGEV_SIGNAL`) or one of its threads (`SIGEV_THREAD_ID`) with `si_code`
//! `SI_TIMER`, `si_timerid`, `si_overrun` and `si_value`; a `SIGEV_NONE` timer is only read.
//!
//! Expiry and overruns follow Linux (`kernel/time/posix-timers.c`, 6.13 and later):
//! - A periodic timer whose signal is queued is not re-armed until a thread takes the signal
//!   ([`PosixTimers::deliver`], where signals are dequeued): then it moves past now by whole
//!   periods, and the periods it skipped are the signal's `si_overrun`, which
//!   timer_getoverrun reports until the next delivery (capped at `DELAYTIMER_MAX`).
//! - timer_settime gives the timer a new sequence number and timer_delete removes it: a
//!   signal that an earlier arming, or a deleted timer, queued is dropped when taken. The
//!   number travels in the siginfo's private word, cleared before the application sees it.
//! - Each timer's signal is queued apart, even a standard signal already pending.
//! - A signal the thread discards (its disposition ignores it, or the queue is full)
//!   re-arms the timer at once ([`PosixTimers::dropped`]); that expiry and the periods
//!   skipped count as overruns of the next delivered signal, as on Linux (which since 6.13
//!   holds the timer while its signal is ignored and queues the signal as soon as it no
//!   longer is, where torpor waits for the next expiry).
//!
//! One host thread per process, started by the first arming and ended when no timer waits
//! for its clock, sleeps until the earliest deadline on a condition variable (an arming or a
//! delivery wakes it) and reads each clock again when it wakes. The wall clocks other than
//! `CLOCK_MONOTONIC` are looked at least every second (the host may step them); a CPU-time
//! clock as [`super::itimer`]'s CPU timers are: the time left divided by the running
//! threads, between 1 ms and 1 s.
//!
//! Differences from Linux: a signal for the process goes to its first thread (as every
//! signal torpor posts to a process); a CPU-time timer fires up to about a millisecond late,
//! and `CLOCK_THREAD_CPUTIME_ID` is the host thread's clock (as clock_gettime reads it); the
//! CPU clocks of other processes are EINVAL (Linux allows them); a signal still pending for
//! a thread when it ends is lost (Linux hands the process's to another thread), and with it
//! its periodic timer's re-arm. A checkpoint saves the process's disarmed timers
//! ([`SavedTimer`]); an armed one makes it fail, as an armed setitimer timer does.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use abi::structs::Timespec;
use abi::timer::{
    Sigevent, DELAYTIMER_MAX, SIGEV_NONE, SIGEV_SIGNAL, SIGEV_THREAD, SIGEV_THREAD_ID, SI_OVERRUN,
    SI_SYS_PRIVATE, SI_TIMER, SI_TIMERID, SI_VALUE,
};
use serde::{Deserialize, Serialize};

use super::{SigInfo, ThreadGroup};

/// Most timers a process holds at once (Linux bounds them by `RLIMIT_SIGPENDING`).
pub const MAX_TIMERS: usize = 4096;

/// The shortest and longest sleeps of the timer thread before it reads a CPU clock again.
const CPU_POLL: (Duration, Duration) = (Duration::from_millis(1), Duration::from_secs(1));
/// The longest sleep before it reads a wall clock the host may step.
const WALL_POLL: Duration = Duration::from_secs(1);

/// Why a timer call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimerError {
    /// An unknown clock id (EINVAL).
    #[error("unknown clock {0}")]
    UnknownClock(i32),
    /// A clock that has no timers: `CLOCK_MONOTONIC_RAW`, the coarse clocks (EOPNOTSUPP).
    #[error("clock {0} has no timers")]
    NoTimers(i32),
    /// An `_ALARM` clock without `CAP_WAKE_ALARM` (EPERM).
    #[error("an alarm clock needs CAP_WAKE_ALARM")]
    AlarmNotPermitted,
    /// A `struct sigevent` with an unknown notification, a bad signal or a thread outside
    /// the process (EINVAL).
    #[error("invalid sigevent")]
    BadEvent,
    /// No timer of this id (EINVAL).
    #[error("no timer {0}")]
    NoSuchTimer(i32),
    /// The process holds [`MAX_TIMERS`] timers, or no thread could be started to run them
    /// (EAGAIN).
    #[error("no room for another timer")]
    NoRoom,
    /// The thread whose CPU clock the timer measures has ended (ESRCH).
    #[error("the timer's thread has ended")]
    ClockGone,
    /// A checkpoint met an armed timer.
    #[error("timer {0} is armed")]
    Armed(i32),
    /// Saved timers that cannot be restored.
    #[error("saved timers: {0}")]
    BadSaved(&'static str),
}

/// The clock a timer measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimerClock {
    /// A host clock read as it is: `CLOCK_REALTIME`, `CLOCK_MONOTONIC`, `CLOCK_BOOTTIME` or
    /// `CLOCK_TAI`.
    Host(i32),
    /// The process's CPU time.
    ProcessCpu,
    /// The CPU time of the process's thread of this id.
    ThreadCpu(i32),
}

/// What a clock id means depends on who creates the timer.
#[derive(Clone, Copy, Debug)]
pub struct Creator {
    /// The caller's process id.
    pub pid: i32,
    /// The caller's thread id.
    pub tid: i32,
    /// Whether it has `CAP_WAKE_ALARM`.
    pub wake_alarm: bool,
}

/// Whether `c` is a host clock a timer may measure.
fn timer_host_clock(c: i32) -> bool {
    matches!(
        c,
        libc::CLOCK_REALTIME | libc::CLOCK_MONOTONIC | libc::CLOCK_BOOTTIME | libc::CLOCK_TAI
    )
}

impl TimerClock {
    /// Whether clock id `id` has timers at all (Linux's `clockid_to_kclock` and its
    /// `timer_create`), checked before the timer gets an id.
    ///
    /// # Errors
    /// [`TimerError::UnknownClock`] for an id Linux does not know, [`TimerError::NoTimers`]
    /// for a clock without timers (`CLOCK_MONOTONIC_RAW`, the coarse clocks, a descriptor's
    /// clock).
    pub fn check_id(id: i32) -> Result<(), TimerError> {
        if id < 0 {
            // `~pid << 3 | per-thread 4 | which`; per-thread with `which` 3 (CLOCKFD) names a
            // descriptor's clock.
            return if id & 7 == 3 {
                Err(TimerError::NoTimers(id))
            } else {
                Ok(())
            };
        }
        match id {
            c if timer_host_clock(c) => Ok(()),
            libc::CLOCK_PROCESS_CPUTIME_ID
            | libc::CLOCK_THREAD_CPUTIME_ID
            | libc::CLOCK_REALTIME_ALARM
            | libc::CLOCK_BOOTTIME_ALARM => Ok(()),
            libc::CLOCK_MONOTONIC_RAW
            | libc::CLOCK_REALTIME_COARSE
            | libc::CLOCK_MONOTONIC_COARSE => Err(TimerError::NoTimers(id)),
            _ => Err(TimerError::UnknownClock(id)),
        }
    }

    /// The clock that clock id `id` names for `who` (the clock's `timer_create`, after
    /// [`check_id`](Self::check_id)): the static clocks, and the dynamic CPU clocks
    /// (clock_getcpuclockid, pthread_getcpuclockid) of the caller's process or of a thread of
    /// it for which `is_thread` holds.
    ///
    /// # Errors
    /// Those of [`check_id`](Self::check_id); [`TimerError::AlarmNotPermitted`];
    /// [`TimerError::UnknownClock`] for a CPU clock of `which` 3, of a thread outside the
    /// process, or of another process (which Linux allows).
    pub fn from_id(
        id: i32,
        who: &Creator,
        is_thread: impl Fn(i32) -> bool,
    ) -> Result<TimerClock, TimerError> {
        Self::check_id(id)?;
        if id < 0 {
            let pid = !(id >> 3);
            if id & 3 == 3 {
                return Err(TimerError::UnknownClock(id));
            }
            return match (id & 4 != 0, pid) {
                (true, 0) => Ok(TimerClock::ThreadCpu(who.tid)),
                (true, tid) if is_thread(tid) => Ok(TimerClock::ThreadCpu(tid)),
                (false, p) if p == 0 || p == who.pid => Ok(TimerClock::ProcessCpu),
                _ => Err(TimerError::UnknownClock(id)),
            };
        }
        match id {
            libc::CLOCK_PROCESS_CPUTIME_ID => Ok(TimerClock::ProcessCpu),
            libc::CLOCK_THREAD_CPUTIME_ID => Ok(TimerClock::ThreadCpu(who.tid)),
            // As Linux: no real-time clock device to wake the machine, no alarm timers
            // (EOPNOTSUPP), before the capability is asked for.
            libc::CLOCK_REALTIME_ALARM | libc::CLOCK_BOOTTIME_ALARM if !host_has_rtc() => {
                Err(TimerError::NoTimers(id))
            }
            libc::CLOCK_REALTIME_ALARM | libc::CLOCK_BOOTTIME_ALARM if !who.wake_alarm => {
                Err(TimerError::AlarmNotPermitted)
            }
            libc::CLOCK_REALTIME_ALARM => Ok(TimerClock::Host(libc::CLOCK_REALTIME)),
            libc::CLOCK_BOOTTIME_ALARM => Ok(TimerClock::Host(libc::CLOCK_BOOTTIME)),
            c => Ok(TimerClock::Host(c)),
        }
    }

    /// The clock now, for the process `g`; `None` once the thread it measures has ended.
    fn now(self, g: &ThreadGroup) -> Option<Duration> {
        match self {
            TimerClock::Host(c) => super::cputime::read(c),
            TimerClock::ProcessCpu => Some(g.cpu_time()),
            TimerClock::ThreadCpu(tid) => g.cpu.thread_time(tid),
        }
    }

    /// How long the timer thread may sleep, `left` before a deadline of this clock, before it
    /// reads the clock again.
    fn nap(self, left: Duration, g: &ThreadGroup) -> Duration {
        match self {
            TimerClock::Host(libc::CLOCK_MONOTONIC) => left,
            TimerClock::Host(_) => left.min(WALL_POLL),
            TimerClock::ProcessCpu => {
                let threads = u32::try_from(g.cpu.threads().max(1)).unwrap_or(u32::MAX);
                (left / threads).clamp(CPU_POLL.0, CPU_POLL.1)
            }
            TimerClock::ThreadCpu(_) => left.clamp(CPU_POLL.0, CPU_POLL.1),
        }
    }
}

/// Whom a timer notifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Notify {
    /// Nobody (`SIGEV_NONE`).
    None,
    /// The process (`SIGEV_SIGNAL`).
    Process,
    /// The process's thread of this id (`SIGEV_THREAD_ID`).
    Thread(i32),
}

/// What a timer does at expiry (the kernel's reading of a `struct sigevent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimerEvent {
    /// Whom it signals.
    pub notify: Notify,
    /// The signal.
    pub signo: i32,
    /// The signal's `si_value`.
    pub value: u64,
}

impl TimerEvent {
    /// The event `ev` asks for, as Linux's `good_sigevent` checks it: `SIGEV_NONE`;
    /// `SIGEV_SIGNAL` (and `SIGEV_THREAD`, which only the C library acts on); `SIGEV_THREAD_ID`
    /// naming a thread for which `is_thread` holds; a signal in 1..=64 unless `SIGEV_NONE`.
    ///
    /// # Errors
    /// [`TimerError::BadEvent`].
    pub fn from_sigevent(
        ev: &Sigevent,
        is_thread: impl Fn(i32) -> bool,
    ) -> Result<TimerEvent, TimerError> {
        let notify = match ev.notify {
            SIGEV_NONE => Notify::None,
            SIGEV_SIGNAL | SIGEV_THREAD => Notify::Process,
            SIGEV_THREAD_ID if is_thread(ev.thread_id) => Notify::Thread(ev.thread_id),
            _ => return Err(TimerError::BadEvent),
        };
        if notify != Notify::None && !(1..=super::NSIG as i32).contains(&ev.signo) {
            return Err(TimerError::BadEvent);
        }
        Ok(TimerEvent {
            notify,
            signo: ev.signo,
            value: ev.value,
        })
    }

    /// The event of a timer created without one: SIGALRM to the process, the timer's id as
    /// `sival_int`.
    fn alarm(id: i32) -> TimerEvent {
        TimerEvent {
            notify: Notify::Process,
            signo: libc::SIGALRM,
            value: u64::from(id.unsigned_abs()),
        }
    }
}

/// A new setting (timer_settime's `struct itimerspec` and flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arming {
    /// The first expiry: an interval from now, or with `absolute` a time of the clock; zero
    /// disarms.
    pub value: Duration,
    /// The period (zero: one shot).
    pub interval: Duration,
    /// `TIMER_ABSTIME`.
    pub absolute: bool,
}

/// A timer's setting as timer_gettime reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Setting {
    /// Time to the next expiry (zero: disarmed).
    pub value: Duration,
    /// The period.
    pub interval: Duration,
}

impl Setting {
    /// As a `struct itimerspec`.
    pub fn to_itimerspec(self) -> abi::timer::Itimerspec {
        abi::timer::Itimerspec {
            interval: Timespec::from_duration(self.interval),
            value: Timespec::from_duration(self.value),
        }
    }
}

/// Moves `deadline` forward by whole periods of `interval` until it is past `now` (Linux's
/// `hrtimer_forward`): the number of periods added and the new deadline. Nothing moves when
/// `now` is before `deadline` or the timer is a one shot.
pub fn forward(deadline: Duration, interval: Duration, now: Duration) -> (u64, Duration) {
    if interval.is_zero() || now < deadline {
        return (0, deadline);
    }
    let periods = (now - deadline).as_nanos() / interval.as_nanos() + 1;
    let added = interval.as_nanos().saturating_mul(periods);
    let next = deadline.as_nanos().saturating_add(added);
    let next = u64::try_from(next).map_or(Duration::MAX, Duration::from_nanos);
    (u64::try_from(periods).unwrap_or(u64::MAX), next)
}

/// One timer (Linux's `struct k_itimer`).
#[derive(Clone, Debug)]
struct PosixTimer {
    clock: TimerClock,
    event: TimerEvent,
    /// The next expiry on its clock (None: disarmed). While `requeue_pending`, the expiry
    /// whose signal is queued.
    deadline: Option<Duration>,
    /// The period (zero: one shot).
    interval: Duration,
    /// A periodic timer expired and its signal is queued: it re-arms when the signal is
    /// taken (`POSIX_TIMER_REQUEUE_PENDING`).
    requeue_pending: bool,
    /// Periods skipped since the last delivery, minus one (Linux's `it_overrun`: -1 after a
    /// delivery or an arming).
    overrun: i64,
    /// The overrun count of the last delivered signal (`it_overrun_last`).
    overrun_last: i64,
    /// The arming's sequence number (`it_signal_seq`), carried by the signals it queues.
    seq: u64,
}

impl PosixTimer {
    fn new(clock: TimerClock, event: TimerEvent, seq: u64) -> PosixTimer {
        PosixTimer {
            clock,
            event,
            deadline: None,
            interval: Duration::ZERO,
            requeue_pending: false,
            overrun: -1,
            overrun_last: 0,
            seq,
        }
    }

    /// Moves a periodic timer past `now`, counting the skipped periods as overruns.
    fn forward_to(&mut self, now: Duration) {
        if let Some(d) = self.deadline {
            let (periods, next) = forward(d, self.interval, now);
            self.deadline = Some(next);
            self.overrun = self
                .overrun
                .saturating_add(i64::try_from(periods).unwrap_or(i64::MAX));
        }
    }

    /// The setting at `now` (Linux's `common_timer_get`): a periodic timer that waits for its
    /// signal's delivery, or notifies nobody, moves forward first; an armed timer whose
    /// deadline passed reads 1 ns until it fires, unless it notifies nobody.
    fn setting(&mut self, now: Option<Duration>) -> Setting {
        let interval = self.interval;
        let (Some(deadline), Some(now)) = (self.deadline, now) else {
            return Setting {
                value: Duration::ZERO,
                interval,
            };
        };
        let silent = self.event.notify == Notify::None;
        if !interval.is_zero() && (self.requeue_pending || silent) {
            self.forward_to(now);
        }
        let deadline = self.deadline.unwrap_or(deadline);
        let value = match deadline.checked_sub(now) {
            Some(left) if !left.is_zero() => left,
            _ if silent => Duration::ZERO,
            _ => Duration::from_nanos(1),
        };
        Setting { value, interval }
    }

    /// The signal of its expiry: `SI_TIMER`, the id, `si_value`, the arming's sequence
    /// number in the private word.
    fn siginfo(&self, id: i32) -> SigInfo {
        let mut b = [0u8; 128];
        b[0..4].copy_from_slice(&self.event.signo.to_le_bytes());
        b[8..12].copy_from_slice(&SI_TIMER.to_le_bytes());
        b[SI_TIMERID..SI_TIMERID + 4].copy_from_slice(&id.to_le_bytes());
        b[SI_VALUE..SI_VALUE + 8].copy_from_slice(&self.event.value.to_le_bytes());
        b[SI_SYS_PRIVATE..SI_SYS_PRIVATE + 8].copy_from_slice(&self.seq.to_le_bytes());
        SigInfo(b)
    }
}

/// A timer's signal: the timer's id and the arming's sequence number; `None` for another
/// signal.
fn timer_of(info: &SigInfo) -> Option<(i32, u64)> {
    if info.code() != SI_TIMER {
        return None;
    }
    let b = &info.0;
    let id = i32::from_le_bytes([
        b[SI_TIMERID],
        b[SI_TIMERID + 1],
        b[SI_TIMERID + 2],
        b[SI_TIMERID + 3],
    ]);
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&b[SI_SYS_PRIVATE..SI_SYS_PRIVATE + 8]);
    Some((id, u64::from_le_bytes(seq)))
}

/// A clock reader: a clock's time now (`None`: the thread it measures has ended).
type Now<'a> = &'a dyn Fn(TimerClock) -> Option<Duration>;

/// A disarmed timer as a checkpoint saves it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedTimer {
    /// Its id.
    pub id: i32,
    /// Its clock.
    pub clock: TimerClock,
    /// What it does at expiry.
    pub event: TimerEvent,
    /// The sequence number of its arming (a queued signal of it carries the number).
    pub seq: u64,
    /// The overrun count timer_getoverrun reports.
    pub overrun_last: i64,
}

/// The timers of a process and what its timer thread needs.
#[derive(Debug, Default)]
struct Table {
    timers: BTreeMap<i32, PosixTimer>,
    /// The id the next timer tries first (Linux's `next_posix_timer_id`).
    next_id: i32,
    /// The last sequence number given.
    last_seq: u64,
    /// A timer thread runs.
    worker: bool,
}

impl Table {
    /// A free id: the first unused from `next_id` on, wrapping to 0 after `i32::MAX`, as
    /// Linux's `posix_timer_add` (ids are not reused until the counter wraps).
    fn alloc_id(&mut self) -> i32 {
        loop {
            let id = self.next_id;
            self.next_id = id.checked_add(1).unwrap_or(0);
            if !self.timers.contains_key(&id) {
                return id;
            }
        }
    }

    fn new_seq(&mut self) -> u64 {
        self.last_seq += 1;
        self.last_seq
    }

    fn timer(&mut self, id: i32) -> Result<&mut PosixTimer, TimerError> {
        self.timers.get_mut(&id).ok_or(TimerError::NoSuchTimer(id))
    }

    /// A free id for a new timer, taken whether or not the timer is made (as Linux gives
    /// the id before it checks the `struct sigevent`).
    fn reserve(&mut self) -> Result<i32, TimerError> {
        if self.timers.len() >= MAX_TIMERS {
            return Err(TimerError::NoRoom);
        }
        Ok(self.alloc_id())
    }

    /// A new disarmed timer of `clock` under the reserved `id`; without `event`, SIGALRM to
    /// the process with the id as its value.
    fn insert(&mut self, id: i32, clock: TimerClock, event: Option<TimerEvent>) {
        let seq = self.new_seq();
        let event = event.unwrap_or_else(|| TimerEvent::alarm(id));
        self.timers.insert(id, PosixTimer::new(clock, event, seq));
    }

    /// Arms or disarms timer `id` (Linux's `common_timer_set`): a new sequence number, the
    /// overrun counts reset. Returns the previous setting and whether the timer thread must
    /// watch it.
    fn arm(&mut self, id: i32, new: Arming, now: Now<'_>) -> Result<(Setting, bool), TimerError> {
        let seq = self.new_seq();
        let t = self.timer(id)?;
        let clock_now = now(t.clock);
        let old = t.setting(clock_now);
        t.seq = seq;
        t.requeue_pending = false;
        t.overrun = -1;
        t.overrun_last = 0;
        if new.value.is_zero() {
            t.deadline = None;
            t.interval = Duration::ZERO;
            return Ok((old, false));
        }
        let start = if new.absolute {
            Duration::ZERO
        } else {
            clock_now.ok_or(TimerError::ClockGone)?
        };
        t.deadline = Some(start.saturating_add(new.value));
        t.interval = new.interval;
        Ok((old, t.event.notify != Notify::None))
    }

    /// The expired timers' signals, each with whom to send it to, and how long the timer
    /// thread may sleep (`nap` of each timer still waiting; `None`: no timer waits).
    fn expire(
        &mut self,
        now: Now<'_>,
        nap: &dyn Fn(TimerClock, Duration) -> Duration,
    ) -> (Vec<(Notify, SigInfo)>, Option<Duration>) {
        let mut due = Vec::new();
        let mut sleep: Option<Duration> = None;
        for (&id, t) in &mut self.timers {
            if t.event.notify == Notify::None || t.requeue_pending {
                continue;
            }
            let Some(deadline) = t.deadline else { continue };
            let Some(at) = now(t.clock) else {
                // The thread it measures has ended.
                t.deadline = None;
                continue;
            };
            if at >= deadline {
                due.push((t.event.notify, t.siginfo(id)));
                if t.interval.is_zero() {
                    t.deadline = None;
                } else {
                    t.requeue_pending = true;
                }
            } else {
                let n = nap(t.clock, deadline - at);
                sleep = Some(sleep.map_or(n, |s| s.min(n)));
            }
        }
        (due, sleep)
    }

    /// A thread takes `info` (Linux's `posixtimer_deliver_signal`): false to drop it (its
    /// timer was deleted or re-armed since); a periodic timer moves past now and its skipped
    /// periods become `si_overrun`. Returns also whether the timer waits again.
    fn deliver(&mut self, info: &mut SigInfo, now: Now<'_>) -> (bool, bool) {
        let Some((id, seq)) = timer_of(info) else {
            return (true, false);
        };
        info.0[SI_SYS_PRIVATE..SI_SYS_PRIVATE + 8].fill(0);
        let Some(t) = self.timers.get_mut(&id).filter(|t| t.seq == seq) else {
            return (false, false);
        };
        if t.interval.is_zero() || !t.requeue_pending {
            return (true, false);
        }
        if let Some(at) = now(t.clock) {
            t.forward_to(at);
        }
        t.requeue_pending = false;
        t.overrun_last = t.overrun.max(0);
        t.overrun = -1;
        let reported = t.overrun_last.min(i64::from(DELAYTIMER_MAX));
        let reported = i32::try_from(reported).unwrap_or(DELAYTIMER_MAX);
        info.0[SI_OVERRUN..SI_OVERRUN + 4].copy_from_slice(&reported.to_le_bytes());
        (true, true)
    }

    /// `info` was discarded before any thread took it: its periodic timer re-arms past now,
    /// the expiry and the periods skipped counted as overruns of the next delivered signal.
    /// Returns whether the timer waits again.
    fn dropped(&mut self, info: &SigInfo, now: Now<'_>) -> bool {
        let Some((id, seq)) = timer_of(info) else {
            return false;
        };
        let Some(t) = self.timers.get_mut(&id).filter(|t| t.seq == seq) else {
            return false;
        };
        if !t.requeue_pending {
            return false;
        }
        if let Some(at) = now(t.clock) {
            t.forward_to(at);
        }
        t.requeue_pending = false;
        true
    }

    /// The timers as a checkpoint saves them; all must be disarmed (a one-shot `SIGEV_NONE`
    /// timer whose time has passed is).
    fn export(&self, now: Now<'_>) -> Result<Vec<SavedTimer>, TimerError> {
        self.timers
            .iter()
            .map(|(&id, t)| {
                let expired_silent = t.event.notify == Notify::None
                    && t.interval.is_zero()
                    && t.deadline
                        .is_some_and(|d| now(t.clock).is_some_and(|n| n >= d));
                if (t.deadline.is_some() && !expired_silent) || t.requeue_pending {
                    return Err(TimerError::Armed(id));
                }
                Ok(SavedTimer {
                    id,
                    clock: t.clock,
                    event: t.event,
                    seq: t.seq,
                    overrun_last: t.overrun_last,
                })
            })
            .collect()
    }

    fn import(saved: &[SavedTimer]) -> Result<Table, TimerError> {
        if saved.len() > MAX_TIMERS {
            return Err(TimerError::BadSaved("too many timers"));
        }
        let mut tab = Table::default();
        for s in saved {
            let clock_ok = match s.clock {
                TimerClock::Host(c) => timer_host_clock(c),
                TimerClock::ProcessCpu => true,
                TimerClock::ThreadCpu(tid) => tid > 0,
            };
            let event_ok = match s.event.notify {
                Notify::None => true,
                Notify::Process => (1..=super::NSIG as i32).contains(&s.event.signo),
                Notify::Thread(tid) => tid > 0 && (1..=super::NSIG as i32).contains(&s.event.signo),
            };
            if s.id < 0 || !clock_ok || !event_ok || s.seq == 0 || s.overrun_last < 0 {
                return Err(TimerError::BadSaved("a timer out of range"));
            }
            let mut t = PosixTimer::new(s.clock, s.event, s.seq);
            t.overrun_last = s.overrun_last;
            if tab.timers.insert(s.id, t).is_some() {
                return Err(TimerError::BadSaved("two timers of one id"));
            }
            tab.next_id = tab.next_id.max(s.id.checked_add(1).unwrap_or(0));
            tab.last_seq = tab.last_seq.max(s.seq);
        }
        Ok(tab)
    }
}

/// The POSIX timers of one process (Linux's `signal_struct.posix_timers`), shared by its
/// threads and its timer thread.
#[derive(Debug, Default)]
pub struct PosixTimers {
    table: Mutex<Table>,
    /// Wakes the timer thread: a timer armed, deleted or re-armed after a delivery.
    cv: Condvar,
}

impl PosixTimers {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// timer_create, first step: the id of the timer to come (taken even if it never
    /// comes).
    ///
    /// # Errors
    /// [`TimerError::NoRoom`] when the process holds [`MAX_TIMERS`].
    pub fn reserve(&self) -> Result<i32, TimerError> {
        self.lock().reserve()
    }

    /// timer_create, last step: a new disarmed timer of `clock` under the reserved `id`;
    /// without `event`, it sends SIGALRM to the process with its id as the value.
    pub fn insert(&self, id: i32, clock: TimerClock, event: Option<TimerEvent>) {
        self.lock().insert(id, clock, event);
    }

    /// timer_settime: arms timer `id` of `group`'s process as `new` says (or disarms it);
    /// returns the previous setting.
    ///
    /// # Errors
    /// [`TimerError::NoSuchTimer`]; [`TimerError::ClockGone`] when the thread whose clock it
    /// measures has ended; [`TimerError::NoRoom`] when the timer thread cannot start (the
    /// timer is then disarmed).
    pub fn set(
        self: &Arc<Self>,
        group: &Arc<ThreadGroup>,
        id: i32,
        new: Arming,
    ) -> Result<Setting, TimerError> {
        let mut tab = self.lock();
        let (old, watch) = tab.arm(id, new, &|c| c.now(group))?;
        if watch {
            if let Err(e) = self.start_worker(&mut tab, group) {
                tab.arm(
                    id,
                    Arming {
                        value: Duration::ZERO,
                        ..new
                    },
                    &|_| None,
                )?;
                return Err(e);
            }
            self.cv.notify_all();
        }
        Ok(old)
    }

    /// timer_gettime: timer `id`'s time left and period.
    ///
    /// # Errors
    /// [`TimerError::NoSuchTimer`].
    pub fn get(&self, group: &ThreadGroup, id: i32) -> Result<Setting, TimerError> {
        let mut tab = self.lock();
        let t = tab.timer(id)?;
        let now = t.clock.now(group);
        Ok(t.setting(now))
    }

    /// timer_getoverrun: the overrun count of timer `id`'s last delivered signal, at most
    /// `DELAYTIMER_MAX`.
    ///
    /// # Errors
    /// [`TimerError::NoSuchTimer`].
    pub fn overrun(&self, id: i32) -> Result<i32, TimerError> {
        let mut tab = self.lock();
        let last = tab.timer(id)?.overrun_last;
        Ok(i32::try_from(last.clamp(0, i64::from(DELAYTIMER_MAX))).unwrap_or(DELAYTIMER_MAX))
    }

    /// timer_delete: timer `id` stops; a signal of it still queued is dropped when taken.
    ///
    /// # Errors
    /// [`TimerError::NoSuchTimer`].
    pub fn delete(&self, id: i32) -> Result<(), TimerError> {
        self.lock()
            .timers
            .remove(&id)
            .ok_or(TimerError::NoSuchTimer(id))?;
        self.cv.notify_all();
        Ok(())
    }

    /// Deletes every timer (execve, and the process's end).
    pub fn clear(&self) {
        self.lock().timers.clear();
        self.cv.notify_all();
    }

    /// A thread of `group`'s process takes `info` from its pending signals: a timer's signal
    /// gets its overrun count (and its periodic timer re-arms), or is dropped (false) when
    /// its timer was deleted or re-armed since it was queued. Other signals pass unchanged.
    pub fn deliver(self: &Arc<Self>, group: &Arc<ThreadGroup>, info: &mut SigInfo) -> bool {
        if info.code() != SI_TIMER {
            return true;
        }
        let mut tab = self.lock();
        let (keep, watch) = tab.deliver(info, &|c| c.now(group));
        if watch {
            self.rewatch(&mut tab, group);
        }
        keep
    }

    /// A thread of `group`'s process discarded `info` without taking it (ignored, or its
    /// queue is full): a periodic timer it came from re-arms.
    pub fn dropped(self: &Arc<Self>, group: &Arc<ThreadGroup>, info: &SigInfo) {
        if info.code() != SI_TIMER {
            return;
        }
        let mut tab = self.lock();
        if tab.dropped(info, &|c| c.now(group)) {
            self.rewatch(&mut tab, group);
        }
    }

    /// The timers of `group`'s process for a checkpoint.
    ///
    /// # Errors
    /// [`TimerError::Armed`] for an armed timer (not supported yet).
    pub fn export(&self, group: &ThreadGroup) -> Result<Vec<SavedTimer>, TimerError> {
        self.lock().export(&|c| c.now(group))
    }

    /// Replaces the timers by the saved ones (a restore, before any thread runs).
    ///
    /// # Errors
    /// [`TimerError::BadSaved`] for ids, clocks or signals out of range, or an id twice.
    pub fn import(&self, saved: &[SavedTimer]) -> Result<(), TimerError> {
        let new = Table::import(saved)?;
        let mut tab = self.lock();
        let worker = tab.worker;
        *tab = Table { worker, ..new };
        Ok(())
    }

    /// A timer waits for its clock again: the timer thread (started if none runs) looks.
    fn rewatch(self: &Arc<Self>, tab: &mut Table, group: &Arc<ThreadGroup>) {
        match self.start_worker(tab, group) {
            Ok(()) => self.cv.notify_all(),
            Err(e) => tracing::warn!("POSIX timers: {e}"),
        }
    }

    /// Starts the process's timer thread unless it runs.
    fn start_worker(
        self: &Arc<Self>,
        tab: &mut Table,
        group: &Arc<ThreadGroup>,
    ) -> Result<(), TimerError> {
        if tab.worker {
            return Ok(());
        }
        let me = self.clone();
        let group = Arc::downgrade(group);
        let run = move || {
            // Started from a task thread, which a platform may have pinned to one CPU.
            super::affinity::free_current_thread();
            me.run(&group);
        };
        match std::thread::Builder::new()
            .name("posix-timer".into())
            .spawn(run)
        {
            Ok(_) => {
                tab.worker = true;
                Ok(())
            }
            Err(e) => {
                tracing::warn!("timer_settime: cannot start the timer thread: {e}");
                Err(TimerError::NoRoom)
            }
        }
    }

    /// The timer thread: sends the signals of the timers that expire, sleeping in between;
    /// ends when no timer waits for its clock or the process ends.
    fn run(&self, group: &Weak<ThreadGroup>) {
        let mut tab = self.lock();
        loop {
            let g = match group.upgrade() {
                Some(g) if g.exit_status().is_none() => g,
                _ => break,
            };
            let (due, sleep) = tab.expire(&|c| c.now(&g), &|c, left| c.nap(left, &g));
            if due.is_empty() {
                let Some(sleep) = sleep else { break };
                drop(g);
                tab = self
                    .cv
                    .wait_timeout(tab, sleep)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                continue;
            }
            // Sent without the table's lock: a thread taking a signal takes it. A signal for a
            // thread that has ended goes nowhere, and its periodic timer waits for a delivery
            // that never comes, as on Linux.
            drop(tab);
            for (to, info) in due {
                send(&g, to, info);
            }
            tab = self.lock();
        }
        tab.worker = false;
    }
}

/// Queues a timer's signal for the process or one of its threads, if it lives.
fn send(g: &ThreadGroup, to: Notify, info: SigInfo) {
    match to {
        Notify::None => {}
        Notify::Process => g.post_siginfo(info),
        Notify::Thread(tid) => {
            g.signal_thread_info(tid, info.signo(), Some(info));
        }
    }
}

/// Whether the host has a real-time clock device (`/sys/class/rtc/rtc0`), which Linux's alarm
/// timers need; read once ([`prime_host_rtc`] reads it before the holder is confined).
static RTC: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

pub(crate) fn host_has_rtc() -> bool {
    *RTC.get_or_init(|| std::path::Path::new("/sys/class/rtc/rtc0").exists())
}

/// Reads now whether the host has a real-time clock, while the holder may still look.
pub fn prime_host_rtc() {
    host_has_rtc();
}

/// Takes `rtc` as whether the host has a real-time clock, unless looked at already.
pub fn adopt_host_rtc(rtc: bool) {
    let _ = RTC.set(rtc);
}

#[cfg(test)]
mod tests;
