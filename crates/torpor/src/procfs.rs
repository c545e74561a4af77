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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollup() {
        let t = "00400000-7fff ---p 00000000 00:00 0 [rollup]\nRss:                1024 kB\nPss:                 512 kB\nPss_Anon:            100 kB\n";
        assert_eq!(parse_rollup(t), Some((512 * 1024, 1024 * 1024)));
        assert_eq!(parse_rollup("nothing"), None);
        assert!(pss_rss(std::process::id()).is_some());
        assert!(cpu_time_us(std::process::id()).is_some());
    }
}
