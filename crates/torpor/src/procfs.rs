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

/// CPU time (µs) of the process `pid` less that of its threads named in `except`: what the
/// sandbox itself used (threads that ended included), without the holder's own housekeeping
/// (its control thread answering `torpor stats`, say). The process's time comes from
/// `/proc/PID/stat` (clock ticks), each excluded thread's from its `schedstat` (ns).
pub fn cpu_time_us_except(pid: u32, except: &[&str]) -> Option<u64> {
    let total = cpu_time_us(pid)?;
    let mut excluded_ns = 0u64;
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
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
    Some(total.saturating_sub(excluded_ns / 1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_leaves_out_the_named_threads() {
        let pid = std::process::id();
        let spin = |name: &str| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(|| {
                    let t = std::time::Instant::now();
                    let mut x = 0u64;
                    while t.elapsed() < std::time::Duration::from_millis(100) {
                        x = std::hint::black_box(x.wrapping_add(1));
                    }
                    // Stay alive while measured.
                    std::thread::sleep(std::time::Duration::from_millis(300));
                })
                .expect("thread")
        };
        let all0 = cpu_time_us(pid).expect("readable");
        let h = spin("housekeeper");
        std::thread::sleep(std::time::Duration::from_millis(150));
        let all = cpu_time_us(pid).expect("readable");
        let except = cpu_time_us_except(pid, &["housekeeper"]).expect("readable");
        h.join().expect("join");
        assert!(
            all >= all0 + 50_000,
            "the spinner used CPU: {all0} -> {all}"
        );
        assert!(except + 50_000 <= all, "left out: {except} of {all}");
        assert_eq!(cpu_time_us_except(u32::MAX, &[]), None);
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
