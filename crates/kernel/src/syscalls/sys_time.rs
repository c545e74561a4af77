//! clock_gettime, clock_getres, gettimeofday, time, nanosleep, clock_nanosleep.

use std::time::{Duration, Instant};

use abi::structs::Timespec;
use abi::Errno;
use platform::Gva;

use super::{SysResult, SyscallArgs};
use crate::task::Task;

fn valid_clock(id: i32) -> bool {
    matches!(
        id,
        libc::CLOCK_REALTIME
            | libc::CLOCK_MONOTONIC
            | libc::CLOCK_PROCESS_CPUTIME_ID
            | libc::CLOCK_THREAD_CPUTIME_ID
            | libc::CLOCK_MONOTONIC_RAW
            | libc::CLOCK_REALTIME_COARSE
            | libc::CLOCK_MONOTONIC_COARSE
            | libc::CLOCK_BOOTTIME
            | libc::CLOCK_TAI
    )
}

fn now(id: i32) -> Result<libc::timespec, Errno> {
    if !valid_clock(id) {
        return Err(Errno::EINVAL);
    }
    crate::task::host::clock_now(id)
}

fn put_timespec(t: &Task, at: Gva, sec: i64, nsec: i64) -> Result<(), Errno> {
    t.write_val(at, &Timespec { sec, nsec })
}

fn get_timespec(t: &Task, at: Gva) -> Result<Duration, Errno> {
    t.read_val::<Timespec>(at)?.to_duration()
}

/// The host clock for guest clock `id`: the static clocks as they are, and the dynamic CPU
/// clocks of the caller's own thread or process (clock_getcpuclockid, pthread_getcpuclockid:
/// `~pid << 3 | per-thread 4 | which`) as the host's clocks of the thread that runs it and of
/// the runtime's process. Other tasks' CPU clocks are EINVAL.
fn guest_clock(t: &Task, id: i32) -> Result<i32, Errno> {
    if id >= 0 {
        return if valid_clock(id) {
            Ok(id)
        } else {
            Err(Errno::EINVAL)
        };
    }
    let pid = !(id >> 3);
    let per_thread = id & 4 != 0;
    if id & 3 == 3 {
        return Err(Errno::EINVAL);
    }
    match (per_thread, pid) {
        (true, p) if p == 0 || p == t.tid => Ok(libc::CLOCK_THREAD_CPUTIME_ID),
        (false, p) if p == 0 || p == t.pid => Ok(libc::CLOCK_PROCESS_CPUTIME_ID),
        _ => Err(Errno::EINVAL),
    }
}

/// Implements clock_gettime(2).
/// The process's CPU clock is [`crate::task::ThreadGroup::cpu_time`] (its own threads',
/// wherever the platform runs them), the other clocks the host's.
pub fn sys_clock_gettime(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let clock = guest_clock(t, a.int(0))?;
    let (sec, nsec) = if clock == libc::CLOCK_PROCESS_CPUTIME_ID {
        let d = t.group.cpu_time();
        (d.as_secs() as i64, i64::from(d.subsec_nanos()))
    } else {
        let ts = now(clock)?;
        (ts.tv_sec, ts.tv_nsec)
    };
    put_timespec(t, a.gva(1), sec, nsec)?;
    Ok(0)
}

/// Implements clock_getres(2).
pub fn sys_clock_getres(t: &mut Task, a: &SyscallArgs) -> SysResult {
    guest_clock(t, a.int(0))?;
    if a.u(1) != 0 {
        put_timespec(t, a.gva(1), 0, 1)?;
    }
    Ok(0)
}

/// Implements gettimeofday(2).
pub fn sys_gettimeofday(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let ts = now(libc::CLOCK_REALTIME)?;
    if a.u(0) != 0 {
        put_timespec(t, a.gva(0), ts.tv_sec, ts.tv_nsec / 1000)?;
    }
    if a.u(1) != 0 {
        t.copy_out(a.gva(1), &[0u8; 8])?;
    }
    Ok(0)
}

/// Implements time(2).
pub fn sys_time(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let ts = now(libc::CLOCK_REALTIME)?;
    if a.u(0) != 0 {
        t.write_u64(a.gva(0), ts.tv_sec as u64)?;
    }
    Ok(ts.tv_sec as u64)
}

/// Implements nanosleep(2). The sleep ends early, with EINTR and the time left in `rem`, when
/// a signal is to be handled, the process exits, or the task must park (then the call is
/// restarted from the start once the task is unparked).
pub fn sys_nanosleep(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let d = get_timespec(t, a.gva(0))?;
    sleep_for(t, d, a.gva(1))
}

/// Sleeps `d` (interruptibly); on EINTR writes what is left to `rem` unless it is NULL.
fn sleep_for(t: &mut Task, d: Duration, rem: Gva) -> SysResult {
    let start = Instant::now();
    // A duration past what `Instant` can hold (up to 2^63 s) sleeps until a signal.
    let deadline = start.checked_add(d);
    if let Err(e) = super::sys_signal::wait_for_signal(t, deadline, 0) {
        if rem.raw() != 0 {
            let left = d.saturating_sub(start.elapsed());
            put_timespec(
                t,
                rem,
                left.as_secs() as i64,
                i64::from(left.subsec_nanos()),
            )?;
        }
        return Err(e);
    }
    Ok(0)
}

/// Implements clock_nanosleep(2), interruptible as [`sys_nanosleep`].
pub fn sys_clock_nanosleep(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (id, flags) = (a.int(0), a.int(1));
    if !valid_clock(id) {
        return Err(Errno::EINVAL);
    }
    if id == libc::CLOCK_THREAD_CPUTIME_ID {
        // Linux's thread CPU clock has no sleep: the clock is valid, the call is not.
        return Err(Errno::EOPNOTSUPP);
    }
    let d = get_timespec(t, a.gva(2))?;
    if flags & libc::TIMER_ABSTIME != 0 {
        let n = now(id)?;
        let cur = Duration::new(n.tv_sec.max(0) as u64, n.tv_nsec as u32);
        match d.checked_sub(cur) {
            // No `rem` for an absolute sleep: a restart sleeps to the same time.
            Some(left) => sleep_for(t, left, Gva(0)),
            None => Ok(0),
        }
    } else {
        sleep_for(t, d, a.gva(3))
    }
}

const ITIMER_REAL: i32 = 0;
const ITIMER_VIRTUAL: i32 = 1;
const ITIMER_PROF: i32 = 2;

/// A `struct timeval` (16 bytes) as a duration; EINVAL for a negative or out-of-range field.
fn get_timeval(t: &Task, at: Gva) -> Result<Duration, Errno> {
    let mut b = [0u8; 16];
    t.copy_in(at, &mut b)?;
    let sec = i64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
    let usec = i64::from_le_bytes(b[8..].try_into().unwrap_or([0; 8]));
    if sec < 0 || !(0..1_000_000).contains(&usec) {
        return Err(Errno::EINVAL);
    }
    Ok(Duration::new(sec as u64, usec as u32 * 1000))
}

/// `struct itimerval` {interval, value} from two durations.
fn itimerval(interval: Duration, value: Duration) -> [u8; 32] {
    let mut o = [0u8; 32];
    // A running timer never reads as zero (that would mean disarmed): round up to 1 µs.
    let us = |d: Duration| (d.as_secs() as i64, i64::from(d.subsec_micros()));
    let (vs, mut vu) = us(value);
    if vs == 0 && vu == 0 && !value.is_zero() {
        vu = 1;
    }
    let (is, iu) = us(interval);
    o[0..8].copy_from_slice(&is.to_le_bytes());
    o[8..16].copy_from_slice(&iu.to_le_bytes());
    o[16..24].copy_from_slice(&vs.to_le_bytes());
    o[24..32].copy_from_slice(&vu.to_le_bytes());
    o
}

/// Implements getitimer(2).
pub fn sys_getitimer(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (left, interval) = match a.int(0) {
        ITIMER_REAL => t.group.real_timer.get(),
        which => cpu_timer(t, which)?.get(&t.group),
    };
    t.copy_out(a.gva(1), &itimerval(interval, left))?;
    Ok(0)
}

/// The process's `ITIMER_VIRTUAL` or `ITIMER_PROF`; EINVAL for another `which`.
fn cpu_timer(t: &Task, which: i32) -> Result<std::sync::Arc<crate::task::itimer::CpuTimer>, Errno> {
    match which {
        ITIMER_VIRTUAL => Ok(t.group.cpu_timers[0].clone()),
        ITIMER_PROF => Ok(t.group.cpu_timers[1].clone()),
        _ => Err(Errno::EINVAL),
    }
}

/// Implements setitimer(2): ITIMER_REAL (SIGALRM at expiry, then every interval), and the
/// CPU-time timers ITIMER_VIRTUAL (SIGVTALRM) and ITIMER_PROF (SIGPROF), which count the
/// process's CPU time (see `task::itimer`).
pub fn sys_setitimer(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let which = a.int(0);
    let cpu = if which == ITIMER_REAL {
        None
    } else {
        Some(cpu_timer(t, which)?)
    };
    let (interval, value) = if a.u(1) == 0 {
        (Duration::ZERO, Duration::ZERO)
    } else {
        (get_timeval(t, a.gva(1))?, get_timeval(t, Gva(a.u(1) + 16))?)
    };
    let group = t.group.clone();
    let (old_left, old_interval) = match cpu {
        None => group.real_timer.set(&group, value, interval),
        Some(timer) => timer.set(&group, value, interval),
    };
    if a.u(2) != 0 {
        t.copy_out(a.gva(2), &itimerval(old_interval, old_left))?;
    }
    Ok(0)
}

/// Implements alarm(2): the seconds left of the previous alarm (rounded, at least 1 if any).
pub fn sys_alarm(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let group = t.group.clone();
    let secs = a.u(0) as u32;
    let (left, _) =
        group
            .real_timer
            .set(&group, Duration::from_secs(u64::from(secs)), Duration::ZERO);
    let mut r = left.as_secs();
    if left.subsec_micros() >= 500_000 || (r == 0 && !left.is_zero()) {
        r += 1;
    }
    Ok(r)
}

/// Implements times(2): the calling thread's own user and system time (the host's figures for
/// the host thread that runs it; the process's other threads are not counted) and its reaped
/// children's, in clock ticks; returns the host's tick count.
pub fn sys_times(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let ru = crate::task::host::thread_usage()?;
    let hz = crate::task::host::ticks_per_second();
    let ticks = |tv: libc::timeval| tv.tv_sec * hz + tv.tv_usec * hz / 1_000_000;
    if a.u(0) != 0 {
        let mut b = [0u8; 32];
        b[..8].copy_from_slice(&ticks(ru.ru_utime).to_le_bytes());
        b[8..16].copy_from_slice(&ticks(ru.ru_stime).to_le_bytes());
        // tms_cutime, tms_cstime: the reaped children's.
        let cpu = *t
            .group
            .children_cpu
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let tk = |d: std::time::Duration| d.as_micros() as i64 * hz / 1_000_000;
        b[16..24].copy_from_slice(&tk(cpu.user).to_le_bytes());
        b[24..32].copy_from_slice(&tk(cpu.sys).to_le_bytes());
        t.copy_out(a.gva(0), &b)?;
    }
    Ok(crate::task::host::elapsed_ticks() as u64)
}

/// Implements clock_settime(2): the sandbox may not set the host's clock, so CLOCK_REALTIME
/// is EPERM (as for a process without CAP_SYS_TIME); the clocks that cannot be set are EINVAL.
pub fn sys_clock_settime(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let id = guest_clock(t, a.int(0))?;
    get_timespec(t, a.gva(1))?;
    if id == libc::CLOCK_REALTIME {
        return Err(Errno::EPERM);
    }
    Err(Errno::EINVAL)
}

/// Implements settimeofday(2): EPERM (see clock_settime); a bad time is EINVAL first.
pub fn sys_settimeofday(t: &mut Task, a: &SyscallArgs) -> SysResult {
    if a.u(0) != 0 {
        let mut b = [0u8; 16];
        t.copy_in(a.gva(0), &mut b)?;
        let usec = i64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]);
        if !(0..1_000_000).contains(&usec) {
            return Err(Errno::EINVAL);
        }
    }
    Err(Errno::EPERM)
}

/// Implements getrusage(2): RUSAGE_SELF and RUSAGE_THREAD are the host's figures for the host
/// thread that runs the caller (the process's other threads are not counted); RUSAGE_CHILDREN
/// is zero (torpor does not keep the resource usage of waited-for children, as wait4 reports).
pub fn sys_getrusage(t: &mut Task, a: &SyscallArgs) -> SysResult {
    const RUSAGE_CHILDREN: i32 = -1;
    let who = a.int(0);
    let mut out = [0u8; 144];
    match who {
        libc::RUSAGE_SELF | libc::RUSAGE_THREAD => {
            let ru = crate::task::host::thread_usage()?;
            let fields: [i64; 18] = [
                ru.ru_utime.tv_sec,
                ru.ru_utime.tv_usec,
                ru.ru_stime.tv_sec,
                ru.ru_stime.tv_usec,
                ru.ru_maxrss,
                ru.ru_ixrss,
                ru.ru_idrss,
                ru.ru_isrss,
                ru.ru_minflt,
                ru.ru_majflt,
                ru.ru_nswap,
                ru.ru_inblock,
                ru.ru_oublock,
                ru.ru_msgsnd,
                ru.ru_msgrcv,
                ru.ru_nsignals,
                ru.ru_nvcsw,
                ru.ru_nivcsw,
            ];
            for (i, v) in fields.iter().enumerate() {
                out[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
        RUSAGE_CHILDREN => {
            let cpu = *t
                .group
                .children_cpu
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            out = super::sys_fork::rusage_bytes(cpu);
        }
        _ => return Err(Errno::EINVAL),
    }
    t.copy_out(a.gva(1), &out)?;
    Ok(0)
}
