//! A process's CPU time: the sum of the host CPU clocks of the host threads that run its
//! threads, plus what its ended threads used. It drives `ITIMER_VIRTUAL` and `ITIMER_PROF`
//! (see [`super::itimer`]).
//!
//! A guest thread runs on one host thread from its first instruction to its exit, and the
//! handlers of its system calls run on that same thread, so the host clock counts both the
//! guest's user time and the kernel work done for it, as Linux's process clocks do.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// One process's CPU clock.
#[derive(Debug, Default)]
pub struct ProcessCpu {
    /// The CPU clock of each live thread's host thread, by tid.
    live: Mutex<HashMap<i32, libc::clockid_t>>,
    /// CPU time of the threads that ended.
    ended: Mutex<Duration>,
    /// The same, split into user and system time (their host threads' `RUSAGE_THREAD`).
    ended_split: Mutex<UserSys>,
}

/// User and system CPU time (what `times`, `getrusage` and `wait4` report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserSys {
    /// User time.
    pub user: Duration,
    /// System time.
    pub sys: Duration,
}

impl std::ops::AddAssign for UserSys {
    fn add_assign(&mut self, o: UserSys) {
        self.user += o.user;
        self.sys += o.sys;
    }
}

/// The calling host thread's user and system time.
pub fn thread_user_sys() -> UserSys {
    let tv =
        |t: libc::timeval| Duration::new(t.tv_sec.max(0) as u64, (t.tv_usec.max(0) as u32) * 1000);
    super::host::thread_usage()
        .map(|ru| UserSys {
            user: tv(ru.ru_utime),
            sys: tv(ru.ru_stime),
        })
        .unwrap_or_default()
}

/// Reads the host clock `clock` (a CPU clock among others); `None` if the host refuses.
pub fn read(clock: libc::clockid_t) -> Option<Duration> {
    let ts = super::host::clock_now(clock).ok()?;
    Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// The host's boot-time clock (`CLOCK_BOOTTIME`: the uptime `sysinfo` and `/proc/uptime`
/// give, and the origin of a process's start time in `/proc/PID/stat`).
pub fn boot_time() -> Duration {
    read(libc::CLOCK_BOOTTIME).unwrap_or_default()
}

impl ProcessCpu {
    /// Thread `tid` starts running on the calling host thread.
    pub fn enter(&self, tid: i32) {
        if let Some(clock) = super::host::thread_cpu_clock() {
            self.live
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(tid, clock);
        }
    }

    /// Thread `tid`, on the calling host thread, ends: its time joins the ended threads'.
    pub fn leave(&self, tid: i32) {
        let used = read(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or_default();
        let split = thread_user_sys();
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if live.remove(&tid).is_some() {
            *self.ended.lock().unwrap_or_else(|e| e.into_inner()) += used;
            *self.ended_split.lock().unwrap_or_else(|e| e.into_inner()) += split;
        }
    }

    /// User and system time of the threads that ended.
    pub fn ended_user_sys(&self) -> UserSys {
        *self.ended_split.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The process's CPU time so far on the runtime's threads, plus the host clock
    /// `platform` (where the platform runs the application's code elsewhere: the trap
    /// platform's stub process).
    pub fn total(&self, platform: Option<libc::clockid_t>) -> Duration {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let running: Duration = live.values().filter_map(|&c| read(c)).sum();
        let elsewhere = platform.and_then(read).unwrap_or_default();
        running + elsewhere + *self.ended.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The CPU time of live thread `tid` (its host thread's clock, as clock_gettime's
    /// `CLOCK_THREAD_CPUTIME_ID` reads it); `None` once it ended.
    pub fn thread_time(&self, tid: i32) -> Option<Duration> {
        let clock = *self
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&tid)?;
        read(clock)
    }

    /// How many threads are running (to pace a CPU timer: the clock advances at most that
    /// many times faster than wall time).
    pub fn threads(&self) -> usize {
        self.live.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Uses `d` of CPU time on the calling thread (not of wall time: under load a thread
    /// spinning for 30 ms may get far less of the CPU).
    fn spin(d: Duration) {
        let until = read(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or_default() + d;
        while read(libc::CLOCK_THREAD_CPUTIME_ID).is_some_and(|t| t < until) {
            std::hint::black_box(0u64);
        }
    }

    #[test]
    fn counts_live_and_ended_threads() {
        let cpu = Arc::new(ProcessCpu::default());
        let before = cpu.total(None);
        let c = cpu.clone();
        std::thread::spawn(move || {
            c.enter(2);
            spin(Duration::from_millis(30));
            c.leave(2);
        })
        .join()
        .unwrap();
        let after_ended = cpu.total(None);
        assert!(
            after_ended - before >= Duration::from_millis(20),
            "{after_ended:?}"
        );
        assert_eq!(cpu.threads(), 0);
        cpu.enter(1);
        spin(Duration::from_millis(30));
        assert!(cpu.total(None) - after_ended >= Duration::from_millis(20));
        assert_eq!(cpu.threads(), 1);
        cpu.leave(1);
    }
}
