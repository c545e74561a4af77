//! Unit tests of the POSIX timers' logic over a fake clock: expiry, re-arming at delivery,
//! overrun counts, ids, clock and sigevent decoding, checkpoints.

use super::*;
use std::cell::Cell;

const MS: Duration = Duration::from_millis(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl Table {
    /// timer_create's two steps at once.
    fn create(&mut self, clock: TimerClock, event: Option<TimerEvent>) -> Result<i32, TimerError> {
        let id = self.reserve()?;
        self.insert(id, clock, event);
        Ok(id)
    }
}

fn event(notify: Notify) -> TimerEvent {
    TimerEvent {
        notify,
        signo: 40,
        value: 0xabcd,
    }
}

fn arming(value: Duration, interval: Duration) -> Arming {
    Arming {
        value,
        interval,
        absolute: false,
    }
}

fn overrun_of(info: &SigInfo) -> i32 {
    i32::from_le_bytes(info.0[SI_OVERRUN..SI_OVERRUN + 4].try_into().unwrap())
}

#[test]
fn forward_moves_past_now_by_whole_periods() {
    // Not due yet, or a one shot: nothing moves.
    assert_eq!(forward(ms(10), ms(3), ms(9)), (0, ms(10)));
    assert_eq!(forward(ms(10), Duration::ZERO, ms(50)), (0, ms(10)));
    // Due: at least one period, the next deadline strictly after now.
    assert_eq!(forward(ms(10), ms(3), ms(10)), (1, ms(13)));
    assert_eq!(forward(ms(10), ms(3), ms(12)), (1, ms(13)));
    assert_eq!(forward(ms(10), ms(3), ms(13)), (2, ms(16)));
    assert_eq!(forward(ms(10), ms(3), ms(41)), (11, ms(43)));
    // Far past the representable: saturates instead of wrapping.
    let (n, next) = forward(Duration::ZERO, Duration::from_nanos(1), Duration::MAX);
    assert!(n > 0);
    assert_eq!(next, Duration::MAX);
}

#[test]
fn ids_count_up_and_wrap_without_reuse_of_live_ones() {
    let mut tab = Table::default();
    let clock = TimerClock::Host(libc::CLOCK_MONOTONIC);
    assert_eq!(tab.create(clock, None), Ok(0));
    assert_eq!(tab.create(clock, None), Ok(1));
    assert_eq!(tab.create(clock, None), Ok(2));
    tab.timers.remove(&1);
    // A deleted id is not given again before the counter wraps.
    assert_eq!(tab.create(clock, None), Ok(3));
    tab.next_id = i32::MAX;
    assert_eq!(tab.create(clock, None), Ok(i32::MAX));
    // Wrapped: 0 is taken, 1 is free again.
    assert_eq!(tab.create(clock, None), Ok(1));
    // The default event: SIGALRM to the process, the id as its value.
    assert_eq!(tab.timers[&3].event, TimerEvent::alarm(3));
    assert_eq!(TimerEvent::alarm(3).value, 3);
    assert_eq!(TimerEvent::alarm(3).signo, libc::SIGALRM);
    while tab.timers.len() < MAX_TIMERS {
        tab.create(clock, None).unwrap();
    }
    assert_eq!(tab.create(clock, None), Err(TimerError::NoRoom));
}

#[test]
fn clock_ids_are_decoded_as_linux_does() {
    let who = Creator {
        pid: 10,
        tid: 12,
        wake_alarm: false,
    };
    let threads = |t: i32| t == 10 || t == 12 || t == 13;
    let clock = |id| TimerClock::from_id(id, &who, threads);
    assert_eq!(clock(0), Ok(TimerClock::Host(0)));
    assert_eq!(clock(1), Ok(TimerClock::Host(1)));
    assert_eq!(clock(7), Ok(TimerClock::Host(7)));
    assert_eq!(clock(11), Ok(TimerClock::Host(11)));
    assert_eq!(clock(2), Ok(TimerClock::ProcessCpu));
    assert_eq!(clock(3), Ok(TimerClock::ThreadCpu(12)));
    assert_eq!(clock(4), Err(TimerError::NoTimers(4)));
    assert_eq!(clock(6), Err(TimerError::NoTimers(6)));
    // The alarm clocks: none without a real-time clock on the host (EOPNOTSUPP, as Linux),
    // else only with CAP_WAKE_ALARM.
    let rtc = super::host_has_rtc();
    if rtc {
        assert_eq!(clock(8), Err(TimerError::AlarmNotPermitted));
    } else {
        assert_eq!(clock(8), Err(TimerError::NoTimers(8)));
    }
    assert_eq!(clock(10), Err(TimerError::UnknownClock(10)));
    assert_eq!(clock(12), Err(TimerError::UnknownClock(12)));
    let alarm = Creator {
        wake_alarm: true,
        ..who
    };
    assert_eq!(
        TimerClock::from_id(9, &alarm, threads),
        if rtc {
            Ok(TimerClock::Host(7))
        } else {
            Err(TimerError::NoTimers(9))
        }
    );
    // Dynamic CPU clocks: `~pid << 3 | per-thread 4 | which`.
    let cpu = |pid: i32, thread: bool| (!pid << 3) | if thread { 4 | 2 } else { 2 };
    assert_eq!(clock(cpu(10, false)), Ok(TimerClock::ProcessCpu));
    assert_eq!(clock(cpu(0, false)), Ok(TimerClock::ProcessCpu));
    assert_eq!(
        clock(cpu(99, false)),
        Err(TimerError::UnknownClock(cpu(99, false)))
    );
    assert_eq!(clock(cpu(13, true)), Ok(TimerClock::ThreadCpu(13)));
    assert_eq!(clock(cpu(0, true)), Ok(TimerClock::ThreadCpu(12)));
    assert!(clock(cpu(99, true)).is_err());
    // A descriptor's clock (CLOCKFD) has no timers; a CPU clock of `which` 3 is invalid.
    assert_eq!(
        clock((!10 << 3) | 3),
        Err(TimerError::NoTimers((!10 << 3) | 3))
    );
    assert_eq!(
        clock((!10 << 3) | 7),
        Err(TimerError::UnknownClock((!10 << 3) | 7))
    );
    // What is checked before the timer gets an id, and what after.
    assert_eq!(TimerClock::check_id(12), Err(TimerError::UnknownClock(12)));
    assert_eq!(TimerClock::check_id(5), Err(TimerError::NoTimers(5)));
    assert_eq!(TimerClock::check_id(8), Ok(()));
    assert_eq!(TimerClock::check_id(cpu(99, false)), Ok(()));
}

#[test]
fn sigevents_are_checked_as_linux_does() {
    let threads = |t: i32| t == 12;
    let ev = |notify, signo, thread_id| Sigevent {
        value: 7,
        signo,
        notify,
        thread_id,
        pad: [0; 11],
    };
    let check = |e: Sigevent| TimerEvent::from_sigevent(&e, threads);
    assert_eq!(
        check(ev(SIGEV_SIGNAL, 10, 0)).unwrap().notify,
        Notify::Process
    );
    assert_eq!(
        check(ev(SIGEV_THREAD, 10, 0)).unwrap().notify,
        Notify::Process
    );
    assert_eq!(check(ev(SIGEV_NONE, 0, 0)).unwrap().notify, Notify::None);
    assert_eq!(
        check(ev(SIGEV_THREAD_ID, 64, 12)).unwrap(),
        TimerEvent {
            notify: Notify::Thread(12),
            signo: 64,
            value: 7
        }
    );
    assert_eq!(check(ev(SIGEV_SIGNAL, 0, 0)), Err(TimerError::BadEvent));
    assert_eq!(check(ev(SIGEV_SIGNAL, 65, 0)), Err(TimerError::BadEvent));
    assert_eq!(
        check(ev(SIGEV_THREAD_ID, 10, 13)),
        Err(TimerError::BadEvent)
    );
    assert_eq!(check(ev(3, 10, 0)), Err(TimerError::BadEvent));
    assert_eq!(
        check(ev(SIGEV_THREAD_ID | 1, 10, 12)),
        Err(TimerError::BadEvent)
    );
}

/// A table with one timer of `notify`, over a fake monotonic clock.
fn one_timer(notify: Notify) -> (Table, i32, TimerClock) {
    let mut tab = Table::default();
    let clock = TimerClock::Host(libc::CLOCK_MONOTONIC);
    let id = tab.create(clock, Some(event(notify))).unwrap();
    (tab, id, clock)
}

#[test]
fn a_periodic_timer_rearms_at_delivery_and_counts_overruns() {
    let (mut tab, id, _) = one_timer(Notify::Process);
    let now = Cell::new(ms(100));
    let clock = |_| Some(now.get());
    let nap = |_, left| left;
    let (old, watch) = tab.arm(id, arming(ms(10), ms(4)), &clock).unwrap();
    assert_eq!(old, Setting::default());
    assert!(watch);
    // Before the deadline: nothing due, sleep until it.
    now.set(ms(103));
    let (due, sleep) = tab.expire(&clock, &nap);
    assert!(due.is_empty());
    assert_eq!(sleep, Some(ms(7)));
    assert_eq!(tab.timer(id).unwrap().setting(Some(now.get())).value, ms(7));
    // Due at 110: one signal, then nothing more until it is taken.
    now.set(ms(111));
    let (due, sleep) = tab.expire(&clock, &nap);
    assert_eq!(due.len(), 1);
    assert_eq!(sleep, None);
    let (to, mut info) = due[0];
    assert_eq!(to, Notify::Process);
    assert_eq!(info.code(), SI_TIMER);
    assert_eq!(timer_of(&info).map(|t| t.0), Some(id));
    now.set(ms(125));
    assert!(tab.expire(&clock, &nap).0.is_empty());
    // Taken at 125: expiries at 114, 118 and 122 were skipped; next at 126.
    let (keep, watch) = tab.deliver(&mut info, &clock);
    assert!(keep && watch);
    assert_eq!(overrun_of(&info), 3);
    assert_eq!(&info.0[SI_SYS_PRIVATE..SI_SYS_PRIVATE + 8], &[0; 8]);
    assert_eq!(
        i64::from_le_bytes(info.0[SI_VALUE..SI_VALUE + 8].try_into().unwrap()),
        0xabcd
    );
    assert_eq!(tab.timers[&id].overrun_last, 3);
    assert_eq!(tab.timers[&id].deadline, Some(ms(126)));
    let (due, sleep) = tab.expire(&clock, &nap);
    assert!(due.is_empty());
    assert_eq!(sleep, Some(MS));
    // Taken at once next time: no overrun.
    now.set(ms(126));
    let (mut due, _) = tab.expire(&clock, &nap);
    let (keep, _) = tab.deliver(&mut due[0].1, &clock);
    assert!(keep);
    assert_eq!(overrun_of(&due[0].1), 0);
    assert_eq!(tab.timers[&id].overrun_last, 0);
}

#[test]
fn gettime_while_the_signal_waits_moves_the_timer_and_keeps_the_overruns() {
    let (mut tab, id, _) = one_timer(Notify::Process);
    let now = Cell::new(Duration::ZERO);
    let clock = |_| Some(now.get());
    tab.arm(id, arming(ms(10), ms(10)), &clock).unwrap();
    now.set(ms(10));
    let (mut due, _) = tab.expire(&clock, &|_, l| l);
    // Read at 35: the timer moved to 40 (expiries at 20 and 30 skipped).
    now.set(ms(35));
    let s = tab.timers.get_mut(&id).unwrap().setting(Some(now.get()));
    assert_eq!(
        s,
        Setting {
            value: ms(5),
            interval: ms(10)
        }
    );
    // Taken at 52: also the expiries at 40 and 50.
    now.set(ms(52));
    tab.deliver(&mut due[0].1, &clock);
    assert_eq!(overrun_of(&due[0].1), 4);
    assert_eq!(tab.timers[&id].deadline, Some(ms(60)));
}

#[test]
fn a_one_shot_timer_disarms_at_expiry() {
    let (mut tab, id, _) = one_timer(Notify::Thread(5));
    let now = Cell::new(ms(1));
    let clock = |_| Some(now.get());
    tab.arm(id, arming(ms(2), Duration::ZERO), &clock).unwrap();
    // Past the deadline but not yet fired: 1 ns left, as Linux reports.
    now.set(ms(4));
    let s = tab.timers.get_mut(&id).unwrap().setting(Some(now.get()));
    assert_eq!(s.value, Duration::from_nanos(1));
    let (mut due, sleep) = tab.expire(&clock, &|_, l| l);
    assert_eq!(due[0].0, Notify::Thread(5));
    assert_eq!(sleep, None);
    assert_eq!(tab.timers[&id].deadline, None);
    assert_eq!(
        tab.timers.get_mut(&id).unwrap().setting(Some(now.get())),
        Setting::default()
    );
    assert_eq!(tab.deliver(&mut due[0].1, &clock), (true, false));
    assert_eq!(overrun_of(&due[0].1), 0);
}

#[test]
fn absolute_times_and_silent_timers() {
    let (mut tab, id, _) = one_timer(Notify::None);
    let now = Cell::new(ms(50));
    let clock = |_| Some(now.get());
    let abs = Arming {
        value: ms(80),
        interval: ms(20),
        absolute: true,
    };
    let (_, watch) = tab.arm(id, abs, &clock).unwrap();
    assert!(!watch, "a SIGEV_NONE timer needs no timer thread");
    assert_eq!(tab.expire(&clock, &|_, l| l), (Vec::new(), None));
    let mut get = |at| {
        now.set(at);
        tab.timers.get_mut(&id).unwrap().setting(Some(at))
    };
    assert_eq!(get(ms(60)).value, ms(20));
    // Read after three expiries: the time to the next.
    assert_eq!(get(ms(125)).value, ms(15));
    // A one-shot silent timer reads zero once expired.
    let (mut tab, id, _) = one_timer(Notify::None);
    tab.arm(id, arming(ms(5), Duration::ZERO), &|_| Some(ms(0)))
        .unwrap();
    let t = tab.timers.get_mut(&id).unwrap();
    assert_eq!(t.setting(Some(ms(2))).value, ms(3));
    assert_eq!(t.setting(Some(ms(9))).value, Duration::ZERO);
}

#[test]
fn rearming_or_deleting_drops_the_queued_signal() {
    let (mut tab, id, _) = one_timer(Notify::Process);
    let now = Cell::new(Duration::ZERO);
    let clock = |_| Some(now.get());
    tab.arm(id, arming(ms(1), ms(1)), &clock).unwrap();
    now.set(ms(1));
    let (mut first, _) = tab.expire(&clock, &|_, l| l);
    // Re-armed while its signal waits: the signal is stale.
    let (old, _) = tab.arm(id, arming(ms(5), Duration::ZERO), &clock).unwrap();
    assert_eq!(old.interval, ms(1));
    assert_eq!(tab.deliver(&mut first[0].1, &clock), (false, false));
    // Deleted: the same.
    now.set(ms(6));
    let (mut second, _) = tab.expire(&clock, &|_, l| l);
    tab.timers.remove(&id);
    assert_eq!(tab.deliver(&mut second[0].1, &clock), (false, false));
    // Another signal passes untouched.
    let mut other = SigInfo([0; 128]);
    other.0[0] = 10;
    assert_eq!(tab.deliver(&mut other, &clock), (true, false));
}

#[test]
fn a_discarded_signal_rearms_and_counts_as_overruns() {
    let (mut tab, id, _) = one_timer(Notify::Process);
    let now = Cell::new(Duration::ZERO);
    let clock = |_| Some(now.get());
    tab.arm(id, arming(ms(10), ms(10)), &clock).unwrap();
    now.set(ms(10));
    let (due, _) = tab.expire(&clock, &|_, l| l);
    now.set(ms(25));
    // Discarded at 25 (the expiry at 20 skipped): armed again for 30.
    assert!(tab.dropped(&due[0].1, &clock));
    assert_eq!(tab.timers[&id].deadline, Some(ms(30)));
    now.set(ms(30));
    let (mut due, _) = tab.expire(&clock, &|_, l| l);
    now.set(ms(31));
    // The signal of 30 counts the expiries of 10 (discarded) and 20 as overruns.
    tab.deliver(&mut due[0].1, &clock);
    assert_eq!(overrun_of(&due[0].1), 2);
}

#[test]
fn a_timer_on_an_ended_thread_stops() {
    let mut tab = Table::default();
    let id = tab
        .create(TimerClock::ThreadCpu(9), Some(event(Notify::Process)))
        .unwrap();
    let alive = Cell::new(true);
    let clock = |_| alive.get().then_some(ms(3));
    tab.arm(id, arming(ms(10), Duration::ZERO), &clock).unwrap();
    alive.set(false);
    assert_eq!(tab.expire(&clock, &|_, l| l), (Vec::new(), None));
    assert_eq!(tab.timers[&id].deadline, None);
    assert_eq!(
        tab.arm(id, arming(ms(10), Duration::ZERO), &clock),
        Err(TimerError::ClockGone)
    );
}

#[test]
fn disarmed_timers_go_through_a_checkpoint() {
    let (mut tab, id, clock) = one_timer(Notify::Thread(4));
    let other = tab.create(TimerClock::ProcessCpu, None).unwrap();
    tab.timers.get_mut(&id).unwrap().overrun_last = 6;
    let silent = tab.create(clock, Some(event(Notify::None))).unwrap();
    tab.arm(silent, arming(ms(5), Duration::ZERO), &|_| Some(ms(0)))
        .unwrap();
    // A silent one shot counts as armed until its time has passed.
    assert_eq!(tab.export(&|_| Some(ms(4))), Err(TimerError::Armed(silent)));
    let saved = tab.export(&|_| Some(ms(5))).unwrap();
    let json = serde_json::to_string(&saved).unwrap();
    let back: Vec<SavedTimer> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, saved);
    let mut new = Table::import(&back).unwrap();
    assert_eq!(new.timers[&id].clock, clock);
    assert_eq!(new.timers[&id].event, event(Notify::Thread(4)));
    assert_eq!(new.timers[&id].overrun_last, 6);
    assert_eq!(new.timers[&other].event, TimerEvent::alarm(other));
    // Ids and sequence numbers go on after the restored ones.
    assert_eq!(new.create(clock, None), Ok(3));
    assert!(new.last_seq > saved.iter().map(|s| s.seq).max().unwrap());
    // An armed timer is refused; so are saved timers out of range.
    tab.arm(id, arming(ms(1), Duration::ZERO), &|_| Some(ms(0)))
        .unwrap();
    assert_eq!(tab.export(&|_| Some(ms(0))), Err(TimerError::Armed(id)));
    let mut bad = back.clone();
    bad[0].event.signo = 65;
    assert!(Table::import(&bad).is_err());
    let mut twice = back.clone();
    twice[1].id = twice[0].id;
    assert!(Table::import(&twice).is_err());
    let mut clock = back;
    clock[0].clock = TimerClock::Host(libc::CLOCK_MONOTONIC_RAW);
    assert!(Table::import(&clock).is_err());
}
