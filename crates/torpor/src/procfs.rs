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

/// CPU time (µs) of this process less that of its live threads named in `except` and less
/// `ended_ns` (the time of such threads that already ended, which the caller counted with
/// [`thread_cpu_ns`]): what the sandbox itself used (its threads that ended included), without
/// the holder's own housekeeping (its control threads answering `torpor stats`, say). Every
/// figure is the scheduler's own count in nanoseconds (the process's CPU clock, each thread's
/// `schedstat`), so that they subtract exactly.
pub fn own_cpu_time_us_except(except: &[&str], ended_ns: u64) -> Option<u64> {
    let total = clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)?;
    let mut excluded_ns = ended_ns;
    for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let dir = entry.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !except.contains(&comm.trim_end()) {
            continue;
        }
        excluded_ns += std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Some(total.saturating_sub(excluded_ns) / 1000)
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
    fn cpu_time_leaves_out_the_named_threads_live_or_ended() {
        const SPIN_NS: u64 = 100_000_000;
        // A thread that uses 100 ms of CPU, says so, and stays until told.
        let spin = |name: &str| {
            let (spun_tx, spun) = std::sync::mpsc::channel::<()>();
            let (end, end_rx) = std::sync::mpsc::channel::<()>();
            let h = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    let mut x = 0u64;
                    while thread_cpu_ns() < SPIN_NS {
                        x = std::hint::black_box(x.wrapping_add(1));
                    }
                    let _ = spun_tx.send(());
                    let _ = end_rx.recv();
                    thread_cpu_ns()
                })
                .expect("thread");
            spun.recv().expect("spun");
            (h, end)
        };
        // One housekeeper ends before the measure (its time is passed as ended), one lives.
        let (h, end) = spin("housekeeper");
        drop(end);
        let ended = h.join().expect("join");
        assert!(ended >= SPIN_NS, "the thread's own clock: {ended} ns");
        let (live, end) = spin("housekeeper");
        let except = own_cpu_time_us_except(&["housekeeper"], ended).expect("readable");
        let all = own_cpu_time_us_except(&[], 0).expect("readable");
        drop(end);
        live.join().expect("join");
        // Both spinners' time is left out (`all` is read after: it can only be larger).
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
