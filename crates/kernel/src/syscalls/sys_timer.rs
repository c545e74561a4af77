//! timer_create, timer_settime, timer_gettime, timer_getoverrun, timer_delete: POSIX
//! per-process timers. The timers, their clocks and their signals are in
//! `task::posix_timer`.

use abi::timer::{Itimerspec, Sigevent, TIMER_ABSTIME};
use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::creds::cap;
use crate::task::posix_timer::{Arming, Creator, TimerClock, TimerError, TimerEvent};
use crate::task::Task;

impl From<TimerError> for Errno {
    fn from(e: TimerError) -> Errno {
        match e {
            TimerError::UnknownClock(_)
            | TimerError::BadEvent
            | TimerError::NoSuchTimer(_)
            | TimerError::Armed(_)
            | TimerError::BadSaved(_) => Errno::EINVAL,
            TimerError::NoTimers(_) => Errno::EOPNOTSUPP,
            TimerError::AlarmNotPermitted => Errno::EPERM,
            TimerError::NoRoom => Errno::EAGAIN,
            TimerError::ClockGone => Errno::ESRCH,
        }
    }
}

/// Implements timer_create(2). A NULL `sevp` is SIGEV_SIGNAL with SIGALRM and the timer's id
/// as `sival_int`; `SIGEV_THREAD_ID` must name a thread of the caller's process. "The
/// kernel does not know SIGEV_THREAD": the C library builds it on SIGEV_THREAD_ID, and a
/// SIGEV_THREAD reaching the kernel is taken as SIGEV_SIGNAL, as Linux does. The checks come
/// in Linux's order: the `sevp` copy and the clock's kind before the timer gets an id (ids
/// count up), then the sigevent, the copy-out of the id and the clock's own checks, whose
/// failures leave the id used.
pub fn sys_timer_create(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let sevp = if a.u(1) != 0 {
        Some(t.read_val::<Sigevent>(a.gva(1))?)
    } else {
        None
    };
    let clock_id = a.int(0);
    TimerClock::check_id(clock_id)?;
    let group = t.group.clone();
    let id = group.posix_timers.reserve()?;
    let is_thread = |tid: i32| group.has_thread(tid);
    let event = match sevp {
        Some(ev) => Some(TimerEvent::from_sigevent(&ev, is_thread)?),
        None => None,
    };
    t.write_val(a.gva(2), &id)?;
    let who = Creator {
        pid: t.pid,
        tid: t.tid,
        wake_alarm: t.creds.capable(cap::WAKE_ALARM),
    };
    let clock = TimerClock::from_id(clock_id, &who, is_thread)?;
    group.posix_timers.insert(id, clock, event);
    Ok(0)
}

/// Implements timer_settime(2): arms the timer (a zero `it_value` disarms it) for a first
/// expiry `it_value` from now, or at `it_value` on its clock with TIMER_ABSTIME (at once if
/// that has passed), then every `it_interval`; writes the previous setting to `old_value`
/// unless it is NULL. A signal the timer queued before is dropped when taken.
pub fn sys_timer_settime(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (id, flags) = (a.int(0), a.int(1));
    if a.u(2) == 0 {
        return Err(Errno::EINVAL);
    }
    let new = t.read_val::<Itimerspec>(a.gva(2))?;
    let arming = Arming {
        interval: new.interval.to_duration()?,
        value: new.value.to_duration()?,
        absolute: flags & TIMER_ABSTIME != 0,
    };
    let group = t.group.clone();
    let old = group.posix_timers.set(&group, id, arming)?;
    if a.u(3) != 0 {
        t.write_val(a.gva(3), &old.to_itimerspec())?;
    }
    Ok(0)
}

/// Implements timer_gettime(2): the time to the next expiry (zero if disarmed) and the
/// period.
pub fn sys_timer_gettime(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let setting = t.group.posix_timers.get(&t.group, a.int(0))?;
    t.write_val(a.gva(1), &setting.to_itimerspec())?;
    Ok(0)
}

/// Implements timer_getoverrun(2): the overrun count of the timer's last delivered signal
/// (the expiries that came while it was pending), at most DELAYTIMER_MAX.
pub fn sys_timer_getoverrun(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let n = t.group.posix_timers.overrun(a.int(0))?;
    Ok(u64::from(n.unsigned_abs()))
}

/// Implements timer_delete(2).
pub fn sys_timer_delete(t: &mut Task, a: &SyscallArgs) -> SysResult {
    t.group.posix_timers.delete(a.int(0))?;
    Ok(0)
}
