//! The host priority of work nobody waits for: a dormancy's checkpoint, the keep-alive
//! deflate of a sandbox that goes dormant next.
//!
//! Thousands of idle sandboxes share a node's few CPUs, and a sandbox going back to sleep
//! competes with a sandbox waking for a request. The one a client waits for should win. A
//! thread can lower its own priority, but cannot raise it again without `CAP_SYS_NICE` or an
//! `RLIMIT_NICE` above 0 (which needs `CAP_SYS_RESOURCE`), and a holder keeps neither. So the
//! work runs on a short-lived thread of its own, which lowers its nice value to
//! [`BACKGROUND_NICE`] and ends with the work; the thread that asked, a vCPU's or a task's,
//! keeps its priority. A new thread costs tens of microseconds; a deflate, milliseconds.
//! Threads whose every step is of the way back to sleep (a holder's keep-alive watchers when
//! the sandbox goes dormant next) lower themselves for good ([`lower_calling_thread`]).
//!
//! The work's thread starts with its creator's credentials, filters and file-system context
//! (`clone` copies them; the thread shares the creator's `CLONE_FS` umask), so it makes the
//! same host calls the creator would. Its allocations come from a malloc arena of its own,
//! which stays with the process once the thread has ended (about 200 KiB resident in a
//! hibernated holder, measured): background work suits a holder that execs next (a
//! dormancy), not one that stays hibernated.
//!
//! Nice values order threads within one scheduling group only: holders of one node must
//! share a group (a detached holder keeps its caller's session, hence its autogroup; see
//! `torpor::run`), or each gets its fair share whatever the nice values inside.

/// Who waits for a piece of the hibernation's work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    /// A caller waits for it (`torpor hibernate`, `checkpoint`, OCI `pause`): it runs at
    /// the caller's priority, on the caller's thread.
    Asked,
    /// Nobody waits for it (a dormancy, and the deflate before it): it yields the CPU to
    /// threads at the normal priority.
    Background,
}

/// The nice value of background work: the lowest. Against one thread at nice 0 it gets
/// about 1.5 % of a CPU the two compete for, and all of a CPU nobody else wants.
pub const BACKGROUND_NICE: i32 = 19;

/// Runs `work` at `priority`: [`Priority::Asked`] on this thread; [`Priority::Background`]
/// on a new thread at [`BACKGROUND_NICE`], waited for. If the host refuses the thread, the
/// work runs here, at this thread's priority (a warning says so); if it refuses the nice
/// value, on the new thread at its creator's.
pub fn run<R: Send>(priority: Priority, work: impl FnOnce() -> R + Send) -> R {
    if priority == Priority::Asked {
        return work();
    }
    let mut work = Some(work);
    let done = std::thread::scope(|s| {
        let slot = &mut work;
        let spawned = std::thread::Builder::new()
            .name("torpor-background".into())
            .spawn_scoped(s, move || {
                lower_calling_thread();
                slot.take().map(|w| w())
            });
        match spawned {
            Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
            Err(e) => {
                tracing::warn!("no thread for background work ({e}): it runs in the foreground");
                None
            }
        }
    });
    match (done, work) {
        (Some(r), _) => r,
        (None, Some(w)) => w(),
        // The thread took the work and returned what it made: `done` is `Some`.
        (None, None) => unreachable!("background work ran without a result"),
    }
}

/// Sets the calling thread's nice value to [`BACKGROUND_NICE`], for good (see the module).
/// A refusal (a filter that does not allow it) is logged once; the thread keeps its
/// priority.
pub fn lower_calling_thread() {
    // SAFETY: setpriority on the calling thread (PRIO_PROCESS with who = 0 is the caller; on
    // Linux a thread's own nice value); no memory is passed.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, BACKGROUND_NICE) };
    if r != 0 {
        static WARNED: std::sync::Once = std::sync::Once::new();
        let e = std::io::Error::last_os_error();
        WARNED.call_once(|| {
            tracing::warn!("background work keeps its priority: setpriority: {e}");
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's nice value.
    ///
    /// # Errors
    /// The host's, from `getpriority`.
    fn current_nice() -> std::io::Result<i32> {
        // getpriority returns the nice value, which can be -1: errno tells an error apart.
        // SAFETY: __errno_location returns this thread's errno slot.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: getpriority on the calling thread; no memory is passed.
        let n = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        let e = std::io::Error::last_os_error();
        if n == -1 && e.raw_os_error().unwrap_or(0) != 0 {
            return Err(e);
        }
        Ok(n)
    }

    #[test]
    fn background_work_runs_lowered_and_the_caller_keeps_its_priority() {
        let before = current_nice().expect("getpriority");
        let (inside, tid) = run(Priority::Background, || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            (current_nice().expect("getpriority"), tid)
        });
        assert_eq!(inside, BACKGROUND_NICE);
        // SAFETY: gettid has no preconditions.
        assert_ne!(tid, unsafe { libc::gettid() }, "on a thread of its own");
        assert_eq!(current_nice().expect("getpriority"), before);
    }

    #[test]
    fn asked_work_runs_here_at_this_priority() {
        let before = current_nice().expect("getpriority");
        // SAFETY: gettid has no preconditions.
        let here = unsafe { libc::gettid() };
        let (inside, tid) = run(Priority::Asked, || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            (current_nice().expect("getpriority"), tid)
        });
        assert_eq!((inside, tid), (before, here));
    }

    #[test]
    fn background_work_borrows_and_returns() {
        let mut v = vec![1, 2, 3];
        let sum = run(Priority::Background, || {
            v.push(4);
            v.iter().sum::<i32>()
        });
        assert_eq!(sum, 10);
        assert_eq!(v.len(), 4);
    }
}
