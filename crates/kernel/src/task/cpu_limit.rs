//! RLIMIT_CPU: a process whose CPU time reaches its soft limit gets SIGXCPU, then again each
//! further second of CPU time (Linux raises the soft limit by one second each time), and
//! SIGKILL at the hard limit (Linux's `check_process_timers`).
//!
//! A finite limit starts a host thread that watches the process's CPU time the way the CPU
//! interval timers do (`itimer.rs`): it sleeps for the CPU time left divided by the process's
//! running threads, between 1 ms and 1 s, and looks again. Setting the limit again starts a
//! new watcher; the older one ends at its next look. The signals may come up to about a
//! millisecond late.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::rlimit::INFINITY;
use super::ThreadGroup;

/// The watcher of one process's RLIMIT_CPU.
#[derive(Default)]
pub struct CpuLimit {
    /// Bumped at every (re)start: a watcher of an older one ends.
    generation: AtomicU64,
}

/// The shortest and longest sleeps between two looks at the clock.
const POLL: (Duration, Duration) = (Duration::from_millis(1), Duration::from_secs(1));

impl CpuLimit {
    /// Starts watching `group`'s RLIMIT_CPU as it is now (after a setrlimit, a fork or the
    /// sandbox's start); nothing to watch for an unlimited one.
    pub fn restart(group: &Arc<ThreadGroup>) {
        let generation = group.cpu_limit.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let (soft, hard) = limits(group);
        if soft == INFINITY && hard == INFINITY {
            return;
        }
        let group = Arc::downgrade(group);
        let run = move || watch(group, generation);
        if let Err(e) = std::thread::Builder::new()
            .name("rlimit-cpu".into())
            .spawn(run)
        {
            tracing::warn!("setrlimit: cannot start the RLIMIT_CPU watcher: {e}");
        }
    }
}

/// The soft and hard RLIMIT_CPU of `group`, in seconds.
fn limits(group: &ThreadGroup) -> (u64, u64) {
    group
        .rlimits
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(libc::RLIMIT_CPU)
        .map_or((INFINITY, INFINITY), |l| (l.cur, l.max))
}

fn seconds(s: u64) -> Duration {
    if s == INFINITY {
        Duration::MAX
    } else {
        Duration::from_secs(s)
    }
}

fn watch(group: Weak<ThreadGroup>, generation: u64) {
    super::affinity::free_current_thread();
    let mut next_xcpu = None;
    loop {
        let Some(g) = group.upgrade() else { return };
        if g.cpu_limit.generation.load(Ordering::SeqCst) != generation || g.exit_status().is_some()
        {
            return;
        }
        let (soft, hard) = limits(&g);
        let hard = seconds(hard);
        let xcpu = *next_xcpu.get_or_insert(seconds(soft));
        let now = g.cpu_time();
        if now >= hard {
            g.post_signal(libc::SIGKILL);
            return;
        }
        if now >= xcpu {
            g.post_signal(libc::SIGXCPU);
            next_xcpu = Some(xcpu.saturating_add(Duration::from_secs(1)));
            continue;
        }
        let threads = g.cpu.threads().max(1) as u32;
        drop(g);
        let left = xcpu.min(hard).saturating_sub(now) / threads;
        std::thread::sleep(left.clamp(POLL.0, POLL.1));
    }
}
