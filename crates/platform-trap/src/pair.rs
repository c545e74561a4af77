//! CPU pairing: a stub thread runs on the CPU of the holder thread that serves it.
//!
//! A system call on this platform is two hand-offs: the stub thread wakes the holder thread
//! and sleeps, the holder answers, wakes the stub thread and sleeps. When the two sleep on
//! different CPUs each wake is an inter-processor interrupt to a CPU that is often halted, and
//! in a virtual machine (which these hosts are) waking a halted vCPU costs tens of
//! microseconds; spinning instead burns the CPU a client or another sandbox needs. On the
//! same CPU a wake is a plain context switch. Measured here (Python `http.server`, requests
//! from a client on the host, 2 vCPUs, medians of alternating rounds): 0.35-0.45 ms a
//! request unpaired, 0.30 ms paired, as with both threads pinned by hand (native: 0.19 ms).
//!
//! So before each run of application code the holder pins the stub thread and itself to
//! the CPU it runs on ([`Pairing::before_run`]). Pinning only the stub thread is not enough:
//! woken by the stub thread, the holder thread would be placed on the idle CPU, and the stub
//! thread would follow it there at the next run, and so on. Two releases keep the scheduler's
//! balancing: a thread that computes rather than calls (a run of [`LONG_RUN`] or more; at the
//! latest, no event within [`RELEASE_AFTER`]) is let go to every CPU and stays unpaired until
//! it makes a short run again, so that compute-bound application threads (a JIT compiler's, a
//! garbage collector's) spread as they would natively; and a pair is released for one run every [`REBALANCE_AFTER`], so that the
//! scheduler may move a busy pair (two syscall-heavy threads pinned to one CPU) apart.
//!
//! `TORPOR_TRAP_PAIR=off` turns pairing off (hosts with one usable CPU never pair).

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a stub thread may run without an event before the pair is released: the
/// holder's liveness poll of its wait (a shorter timeout would arm a timer at every wait,
/// which costs a VM exit here and 15 % of a Python request's latency).
pub const RELEASE_AFTER: Duration = Duration::from_millis(50);
/// A run of application code at least this long (compute rather than calls) leaves the
/// thread unpaired until it makes a short run again.
pub const LONG_RUN: Duration = Duration::from_millis(1);
/// How long a pair stays on one CPU before it is released for one run, so that the scheduler
/// may move the holder thread (and the stub thread with it) to a less busy CPU.
pub const REBALANCE_AFTER: Duration = Duration::from_millis(50);

/// The CPUs pairs may use (the process's when pairing first ran), if pairing is on: off with
/// `TORPOR_TRAP_PAIR=off` or a single usable CPU.
fn free_cpus() -> Option<&'static libc::cpu_set_t> {
    static FREE: OnceLock<Option<libc::cpu_set_t>> = OnceLock::new();
    FREE.get_or_init(|| {
        let off = std::env::var_os("TORPOR_TRAP_PAIR").is_some_and(|v| v == "off");
        allowed_cpus().filter(|set| !off && cpu_count(set) > 1)
    })
    .as_ref()
}

/// The calling thread's allowed CPUs.
fn allowed_cpus() -> Option<libc::cpu_set_t> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid set of the size given.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    (r == 0).then_some(set)
}

fn cpu_count(set: &libc::cpu_set_t) -> u32 {
    // SAFETY: CPU_COUNT reads the set.
    unsafe { libc::CPU_COUNT(set) as u32 }
}

/// One stub thread's pairing state, kept by its [`crate::StubThread`].
#[derive(Default)]
pub(crate) struct Pairing {
    /// While paired: the CPU, the holder thread pinned there, and since when.
    pinned: Option<Pinned>,
    /// Skip pairing for the next run (after a rebalancing release).
    skip_next: bool,
    /// The last run was long ([`LONG_RUN`]): the thread computes; leave it unpaired.
    computing: bool,
}

#[derive(Clone, Copy)]
struct Pinned {
    cpu: u32,
    holder_tid: i32,
    since: Instant,
}

impl Pairing {
    /// Whether the pair is pinned (so that neither side needs to spin).
    pub(crate) fn is_pinned(&self) -> bool {
        self.pinned.is_some()
    }

    /// Before a run of stub thread `tid` from the calling holder thread, on CPU `cpu`: pins
    /// both threads to `cpu`, unless they are there already (or releases them, every
    /// [`REBALANCE_AFTER`], for one run). `thread` is the stub thread's pidfd: a thread that
    /// has exited (its tid may be reused elsewhere) is left alone.
    pub(crate) fn before_run(&mut self, tid: i32, thread: Option<BorrowedFd<'_>>, cpu: u32) {
        if free_cpus().is_none() || std::mem::take(&mut self.skip_next) || self.computing {
            return;
        }
        if let Some(p) = self.pinned {
            if p.since.elapsed() >= REBALANCE_AFTER {
                self.release(tid, thread);
                self.skip_next = true;
                return;
            }
            if p.cpu == cpu {
                return;
            }
        }
        let Some(one) = only(cpu) else {
            return;
        };
        // SAFETY: gettid has no preconditions.
        let holder_tid = unsafe { libc::gettid() };
        if set_affinity(tid, thread, &one) {
            // SAFETY: a valid cpu_set_t of the size given; the calling thread.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&one), &one) };
            self.pinned = Some(Pinned {
                cpu,
                holder_tid,
                since: Instant::now(),
            });
        }
    }

    /// After a run of `ran`: a long one releases the pair and leaves the thread unpaired until
    /// a short one (threads that compute, a JIT compiler's or a garbage collector's, spread
    /// over the CPUs instead of sharing the one their holder thread happened to be on).
    pub(crate) fn after_run(&mut self, ran: Duration, tid: i32, thread: Option<BorrowedFd<'_>>) {
        self.computing = ran >= LONG_RUN;
        if self.computing {
            self.release(tid, thread);
        }
    }

    /// Lets both threads of the pair run on every CPU again.
    pub(crate) fn release(&mut self, tid: i32, thread: Option<BorrowedFd<'_>>) {
        let (Some(free), Some(p)) = (free_cpus(), self.pinned.take()) else {
            return;
        };
        // Failed or not, the next run pins them again where they are needed.
        set_affinity(tid, thread, free);
        // The holder thread, if it is still a thread of this process (a drop may run on
        // another thread after it ended).
        // SAFETY: getpid and gettid have no preconditions; tgkill with signal 0 only checks.
        let ours = unsafe {
            libc::gettid() == p.holder_tid
                || libc::syscall(libc::SYS_tgkill, libc::getpid(), p.holder_tid, 0) == 0
        };
        if ours {
            // SAFETY: a valid cpu_set_t of the size given.
            unsafe { libc::sched_setaffinity(p.holder_tid, std::mem::size_of_val(free), free) };
        }
    }
}

/// The set holding only `cpu`, if pairing is on and `cpu` is one of the free CPUs.
fn only(cpu: u32) -> Option<libc::cpu_set_t> {
    let free = free_cpus()?;
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu as usize >= 8 * std::mem::size_of_val(&one) {
        return None;
    }
    // SAFETY: CPU_ISSET reads within the set (the index is checked above).
    if !unsafe { libc::CPU_ISSET(cpu as usize, free) } {
        return None;
    }
    // SAFETY: `cpu` is within the set (checked above).
    unsafe { libc::CPU_SET(cpu as usize, &mut one) };
    Some(one)
}

/// The stub's mapper thread, kept on the CPU of the holder thread that last sent it a
/// command: a command is then two local context switches, not two wakes of another CPU
/// (a REAP wake's prefault sends a few hundred).
#[derive(Default)]
pub(crate) struct MapperPin {
    cpu: Option<u32>,
}

impl MapperPin {
    /// Before a command from the calling thread, on CPU `cpu`, to mapper thread `tid` of the
    /// stub whose pidfd is `stub` (its thread group leader: its tid is the stub's pid, not
    /// reused while the stub is unreaped).
    pub(crate) fn follow(&mut self, tid: i32, stub: BorrowedFd<'_>, cpu: u32) {
        if self.cpu == Some(cpu) {
            return;
        }
        if let Some(one) = only(cpu) {
            if set_affinity(tid, Some(stub), &one) {
                self.cpu = Some(cpu);
            }
        }
    }
}

/// The calling thread pinned to the CPU it runs on while this lives (for a batch of mapper
/// commands from a thread that is not paired, such as a REAP wake's prefault): the mapper
/// and it then stay on one CPU. Its previous CPUs come back on drop.
pub(crate) struct PinHere {
    before: Option<libc::cpu_set_t>,
}

impl PinHere {
    /// Pins the calling thread where it runs (nothing where pairing is off).
    pub(crate) fn new() -> PinHere {
        // SAFETY: sched_getcpu has no preconditions.
        let cpu = unsafe { libc::sched_getcpu() };
        // SAFETY: a valid cpu_set_t of the size given, for the calling thread.
        let pin = |one: &libc::cpu_set_t| unsafe {
            libc::sched_setaffinity(0, std::mem::size_of_val(one), one)
        };
        let before = match (u32::try_from(cpu).ok().and_then(only), allowed_cpus()) {
            (Some(one), Some(before)) if pin(&one) == 0 => Some(before),
            _ => None,
        };
        PinHere { before }
    }
}

impl Drop for PinHere {
    fn drop(&mut self) {
        if let Some(set) = &self.before {
            // SAFETY: a valid cpu_set_t of the size given, for the calling thread.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(set), set) };
        }
    }
}

/// `sched_setaffinity(tid, set)` if the thread behind the pidfd `thread` still runs.
fn set_affinity(tid: i32, thread: Option<BorrowedFd<'_>>, set: &libc::cpu_set_t) -> bool {
    let Some(fd) = thread else {
        return false;
    };
    if thread_exited(fd) {
        return false;
    }
    // SAFETY: a valid cpu_set_t of the size given.
    unsafe { libc::sched_setaffinity(tid, std::mem::size_of_val(set), set) == 0 }
}

/// Whether the thread behind pidfd `fd` has exited (the pidfd polls readable).
fn thread_exited(fd: BorrowedFd<'_>) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_to_the_cpu_asked_and_releases_to_the_holders_set() {
        if free_cpus().is_none() {
            return; // one CPU: nothing to pair
        }
        // A thread of this process stands in for a stub thread.
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() }).expect("send");
            let _ = stop_rx.recv();
        });
        let tid = rx.recv().expect("tid");
        let fd = crate::sys::pidfd_open(tid, crate::sys::PIDFD_THREAD).expect("pidfd");
        let affinity = |tid| {
            // SAFETY: as in `allowed_cpus`.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: a valid set of the size given.
            unsafe { libc::sched_getaffinity(tid, std::mem::size_of_val(&set), &mut set) };
            set
        };
        let mut p = Pairing::default();
        let free = *free_cpus().expect("pairing on");
        let cpu = (0..1024u32)
            // SAFETY: CPU_ISSET reads within the set.
            .find(|&c| unsafe { libc::CPU_ISSET(c as usize, &free) })
            .expect("a CPU");
        p.before_run(tid, Some(std::os::fd::AsFd::as_fd(&fd)), cpu);
        assert!(p.is_pinned());
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        for t in [tid, me] {
            assert_eq!(cpu_count(&affinity(t)), 1);
            // SAFETY: CPU_ISSET reads within the set.
            assert!(unsafe { libc::CPU_ISSET(cpu as usize, &affinity(t)) });
        }
        p.release(tid, Some(std::os::fd::AsFd::as_fd(&fd)));
        assert!(!p.is_pinned());
        for t in [tid, me] {
            assert_eq!(cpu_count(&affinity(t)), cpu_count(&free));
        }
        stop_tx.send(()).expect("stop");
        h.join().expect("join");
        // The pidfd reports the exit a little after the join returns.
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        while !thread_exited(std::os::fd::AsFd::as_fd(&fd)) && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        // An exited thread is left alone.
        p.before_run(tid, Some(std::os::fd::AsFd::as_fd(&fd)), cpu);
        assert!(!p.is_pinned());
    }
}
