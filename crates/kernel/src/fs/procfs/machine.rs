//! The sandbox-wide files of `/proc` that `top`, `uptime`, `free` and `vmstat` read: `stat`
//! (CPU time, boot time, process counts), `uptime` and `loadavg`. Their figures are the
//! sandbox's own: CPU time is its processes' (the rest of the machine's time is idle), the
//! process counts are its processes; the clocks are the host's, as `sysinfo` gives them.

use std::time::Duration;

use crate::task::Task;

/// Clock ticks a second (`sysconf(_SC_CLK_TCK)`, `USER_HZ`).
pub const TICKS: u64 = 100;

/// `d` in clock ticks.
pub fn ticks(d: Duration) -> u64 {
    d.as_millis() as u64 / (1000 / TICKS)
}

/// The sandbox's CPU time (every live process's) and its count of processes and threads.
fn usage(t: &Task) -> (Duration, usize, usize) {
    let groups = t.group.procs.live_groups();
    let mut cpu = Duration::ZERO;
    let mut threads = 0;
    for (_, g) in &groups {
        cpu += g.cpu_time();
        threads += g.live();
    }
    (cpu, groups.len(), threads)
}

/// The host CPUs the sandbox's threads may run on, at least one.
fn cpus() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
}

/// `/proc/stat`: a `cpu` line (user time: the sandbox's; idle: the rest of every CPU's time
/// since boot), one per CPU, and the counters procps reads.
pub fn stat(t: &Task) -> Vec<u8> {
    let (cpu, procs, _) = usage(t);
    let up = crate::task::cputime::boot_time();
    let n = cpus();
    let user = ticks(cpu);
    let idle = (ticks(up) * n).saturating_sub(user);
    let line =
        |name: String, user: u64, idle: u64| format!("{name} {user} 0 0 {idle} 0 0 0 0 0 0\n");
    let mut s = line("cpu ".to_string(), user, idle);
    for i in 0..n {
        s.push_str(&line(format!("cpu{i}"), user / n, idle / n));
    }
    let boot = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_sub(up);
    s.push_str(&format!(
        "intr 0\nctxt 0\nbtime {}\nprocesses {procs}\nprocs_running 1\nprocs_blocked 0\n\
         softirq 0 0 0 0 0 0 0 0 0 0 0\n",
        boot.as_secs(),
    ));
    s.into_bytes()
}

/// `/proc/uptime`: seconds since boot and idle seconds (every CPU's time not used by the
/// sandbox).
pub fn uptime(t: &Task) -> Vec<u8> {
    let (cpu, _, _) = usage(t);
    let up = crate::task::cputime::boot_time();
    let idle = (up.as_secs_f64() * cpus() as f64 - cpu.as_secs_f64()).max(0.0);
    format!("{:.2} {:.2}\n", up.as_secs_f64(), idle).into_bytes()
}

/// `/proc/loadavg`: no load averages are kept (zeros); running and total threads, and the
/// last pid given out.
pub fn loadavg(t: &Task) -> Vec<u8> {
    let (_, _, threads) = usage(t);
    let last = t
        .group
        .procs
        .live_groups()
        .iter()
        .map(|(p, _)| *p)
        .max()
        .unwrap_or(t.pid);
    format!("0.00 0.00 0.00 1/{threads} {last}\n").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_ticks() {
        assert_eq!(ticks(Duration::from_millis(1234)), 123);
        assert_eq!(ticks(Duration::from_secs(2)), 200);
        assert_eq!(ticks(Duration::ZERO), 0);
    }
}
