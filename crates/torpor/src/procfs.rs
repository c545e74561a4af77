//! Reading the host's /proc about the process holding a sandbox.

/// PSS and RSS in bytes from `/proc/PID/smaps_rollup` (`None` if unreadable).
pub fn pss_rss(pid: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    parse_rollup(&text)
}

fn parse_rollup(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(':'))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    Some((field("Pss")?, field("Rss")?))
}

/// The sum of the PSS of `pid`'s child processes but `except` (a holder's janitor and file
/// broker), in bytes: 0 where none can be read (a non-dumpable broker's figures are readable
/// only to a caller with `CAP_SYS_PTRACE`, root's `torpor stats`).
pub fn children_pss(pid: u32, except: &[u32]) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .filter(|child| !except.contains(child))
        .filter_map(|child| pss_rss(child).map(|(pss, _)| pss))
        .sum()
}

/// User + system CPU time of a process, in microseconds (from /proc/PID/stat).
pub fn cpu_time_us(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are at indices 11 and 12 after the comm.
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(ticks * 1_000_000 / hz)
}

/// The holder's own housekeeping threads (its control threads), by host thread id: their
/// CPU time is left out of the sandbox's ([`own_cpu_time_us`]).
static HOUSEKEEPERS: std::sync::Mutex<Vec<libc::pid_t>> = std::sync::Mutex::new(Vec::new());

/// A thread counted as the holder's housekeeping until this is dropped ([`housekeeping`]).
pub struct Housekeeper(libc::pid_t);

/// Counts the calling thread as the holder's housekeeping (answering `torpor stats`, watching
/// the keep-alive policy) until the guard is dropped: its CPU time is not the sandbox's.
pub fn housekeeping() -> Housekeeper {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    HOUSEKEEPERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(tid);
    Housekeeper(tid)
}

impl Drop for Housekeeper {
    fn drop(&mut self) {
        HOUSEKEEPERS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|&t| t != self.0);
    }
}

/// CPU time (µs) of this process less that of its live housekeeping threads
/// ([`housekeeping`]) and less `ended_ns` (the time of such threads that already ended, which
/// the caller counted with [`thread_cpu_ns`]): what the sandbox itself used (its threads that
/// ended included), without the holder's own housekeeping. Every figure is the scheduler's
/// own count in nanoseconds (the process's and each thread's CPU clock), so that they
/// subtract exactly; no file is read (the keep-alive asks several times a second, in every
/// awake holder of the node).
pub fn own_cpu_time_us(ended_ns: u64) -> Option<u64> {
    let total = clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)?;
    let tids = HOUSEKEEPERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let live: u64 = tids.into_iter().filter_map(thread_cpu_ns_of).sum();
    Some(total.saturating_sub(ended_ns + live) / 1000)
}

/// The CPU time of thread `tid` of this process, in nanoseconds, from its CPU clock: the
/// clock id glibc's `pthread_getcpuclockid` makes of a thread id (`None` once it has ended).
fn thread_cpu_ns_of(tid: libc::pid_t) -> Option<u64> {
    // CPUCLOCK_SCHED (2) | CPUCLOCK_PERTHREAD_MASK (4), the thread id inverted above them.
    let clock: libc::clockid_t = ((!tid) << 3) | 6;
    clock_ns(clock)
}

/// The calling thread's CPU time so far, in nanoseconds (0 if the clock cannot be read).
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0)
}

fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    kernel::task::cputime::read(clock).map(|d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_leaves_out_the_housekeeping_threads_live_or_ended() {
        const SPIN_NS: u64 = 100_000_000;
        // A thread that uses 100 ms of CPU, says so, and stays until told.
        let spin = |housekeeper: bool| {
            let (spun_tx, spun) = std::sync::mpsc::channel::<()>();
            let (end, end_rx) = std::sync::mpsc::channel::<()>();
            let h = std::thread::Builder::new()
                .spawn(move || {
                    let hk = housekeeper.then(housekeeping);
                    let mut x = 0u64;
                    while thread_cpu_ns() < SPIN_NS {
                        x = std::hint::black_box(x.wrapping_add(1));
                    }
                    let _ = spun_tx.send(());
                    let _ = end_rx.recv();
                    drop(hk);
                    thread_cpu_ns()
                })
                .expect("thread");
            spun.recv().expect("spun");
            (h, end)
        };
        // One housekeeper ends before the measure (its time is passed as ended), one lives.
        let (h, end) = spin(true);
        drop(end);
        let ended = h.join().expect("join");
        assert!(ended >= SPIN_NS, "the thread's own clock: {ended} ns");
        let (live, end) = spin(true);
        // A thread of the sandbox's own spins too: its time stays in.
        let (other, end_other) = spin(false);
        let except = own_cpu_time_us(ended).expect("readable");
        drop(end);
        live.join().expect("join");
        let all = own_cpu_time_us(0).expect("readable");
        drop(end_other);
        other.join().expect("join");
        // The sandbox's thread counts; both housekeepers' time is left out (`all` is read
        // after: it can only be larger).
        assert!(
            except >= SPIN_NS / 1000,
            "the sandbox's own thread: {except}"
        );
        assert!(
            except + 2 * SPIN_NS / 1000 <= all,
            "left out: {except} of {all}"
        );
    }

    #[test]
    fn rollup() {
        let t = "00400000-7fff ---p 00000000 00:00 0 [rollup]\nRss:                1024 kB\nPss:                 512 kB\nPss_Anon:            100 kB\n";
        assert_eq!(parse_rollup(t), Some((512 * 1024, 1024 * 1024)));
        assert_eq!(parse_rollup("nothing"), None);
        assert!(pss_rss(std::process::id()).is_some());
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(children_pss(std::process::id(), &[]) > 0, "a child's PSS");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(cpu_time_us(std::process::id()).is_some());
    }
}
