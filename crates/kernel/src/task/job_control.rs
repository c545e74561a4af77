//! Job control: a process stopped by SIGSTOP, SIGTSTP, SIGTTIN or SIGTTOU and continued by
//! SIGCONT, as Linux's group stop (`kernel/signal.c`: `do_signal_stop`, `prepare_signal`).
//!
//! - **Stopping.** The thread that dequeues a stop signal whose action is the default one
//!   stops the whole process ([`JobControl::stop`]): every other thread is kicked and, at its
//!   next return towards user mode, waits in [`JobControl::wait_while_stopped`] instead of
//!   running (a thread inside a blocking call is interrupted and the call restarted after,
//!   as on Linux). The parent hears of it: SIGCHLD with `CLD_STOPPED` and a report for
//!   `wait4(WUNTRACED)` / `waitid(WSTOPPED)` ([`super::ProcessTable::report_job`]).
//! - **While stopped** the threads run nothing of the application: signals other than SIGKILL
//!   stay pending (their handlers run after SIGCONT); SIGKILL ends the process at once.
//! - **Continuing.** SIGCONT sent to the process ([`JobControl::cont`], at the sending, as
//!   Linux's `prepare_signal` does: even blocked or ignored) wakes the threads and tells the
//!   parent (`CLD_CONTINUED`, `waitpid(WCONTINUED)`); a stop signal still pending in the
//!   process's queue is discarded, and sending a stop signal discards a pending SIGCONT.
//!
//! A checkpoint or hibernation parks stopped threads like waiting ones; the stop itself is not
//! saved: a restored process runs.

use std::sync::atomic::Ordering;
use std::sync::Mutex;

use super::{SigInfo, Task, ThreadGroup};

/// si_code of SIGCHLD for a child that stopped.
const CLD_STOPPED: i32 = 5;
/// si_code of SIGCHLD for a child that continued.
const CLD_CONTINUED: i32 = 6;

/// Whether `sig` is one of the four stop signals.
pub fn is_stop_signal(sig: i32) -> bool {
    matches!(
        sig,
        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
    )
}

/// The bits of the stop signals in a signal set.
pub const STOP_SIGNALS: u64 = (1 << (libc::SIGSTOP - 1))
    | (1 << (libc::SIGTSTP - 1))
    | (1 << (libc::SIGTTIN - 1))
    | (1 << (libc::SIGTTOU - 1));

/// What a parent's wait may report of a child besides its exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobEvent {
    /// Stopped by this signal.
    Stopped(i32),
    /// Continued by SIGCONT.
    Continued,
}

/// A process's job-control state: stopped (by which signal) or running.
#[derive(Default)]
pub struct JobControl {
    stopped: Mutex<Option<i32>>,
}

impl JobControl {
    /// Stops the process with `sig`. Returns whether it was running (the caller tells the
    /// parent and kicks the other threads).
    pub fn stop(&self, sig: i32) -> bool {
        let mut s = self.lock();
        let was_running = s.is_none();
        *s = Some(sig);
        was_running
    }

    /// Continues the process. Returns whether it was stopped.
    pub fn cont(&self) -> bool {
        self.lock().take().is_some()
    }

    /// The signal the process is stopped by, if it is.
    pub fn stopped_by(&self) -> Option<i32> {
        *self.lock()
    }

    /// Whether the process is stopped.
    pub fn is_stopped(&self) -> bool {
        self.stopped_by().is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<i32>> {
        self.stopped.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ThreadGroup {
    /// What sending `sig` to the process does at once, before any thread takes it: SIGCONT
    /// continues a stopped process and discards pending stop signals; a stop signal discards
    /// a pending SIGCONT; SIGKILL wakes a stopped process so that it dies.
    pub(super) fn job_signal_sent(&self, sig: i32) {
        if sig == libc::SIGCONT {
            self.discard_sent(STOP_SIGNALS);
            if self.job.cont() {
                self.kick_all();
                self.tell_parent(JobEvent::Continued);
            }
        } else if is_stop_signal(sig) {
            self.discard_sent(1 << (libc::SIGCONT - 1));
        } else if sig == libc::SIGKILL && self.job.is_stopped() {
            self.kick_all();
        }
    }

    /// Records a stop or continue for the parent's wait and sends it SIGCHLD, unless its
    /// SIGCHLD action has SA_NOCLDSTOP.
    fn tell_parent(&self, event: JobEvent) {
        let (code, status) = match event {
            JobEvent::Stopped(sig) => (CLD_STOPPED, sig),
            JobEvent::Continued => (CLD_CONTINUED, libc::SIGCONT),
        };
        let uid = self.identity().creds.uid;
        self.procs.report_job(self.pid, event, |parent| {
            if !parent.no_child_stop.load(Ordering::Relaxed) {
                parent.post_siginfo(SigInfo::child_state(
                    libc::SIGCHLD,
                    code,
                    self.pid,
                    uid,
                    status,
                ));
            }
        });
    }
}

impl Task {
    /// Stops the process: the default action of stop signal `sig`, taken by this thread.
    pub(crate) fn stop_process(&mut self, sig: i32) {
        tracing::debug!(pid = self.pid, sig, "stopped by a signal");
        if self.group.job.stop(sig) {
            self.group.kick_all();
            self.group.tell_parent(JobEvent::Stopped(sig));
        }
    }

    /// Waits while the process is stopped, until it is continued, or something needs this
    /// thread: a signal sent to it (SIGKILL ends it; others stay pending), a park request
    /// (checkpoint, hibernation), the process's end.
    pub(crate) fn wait_while_stopped(&mut self) {
        let control = self.control.clone();
        let group = self.group.clone();
        let tid = self.tid;
        // As for a thread waiting in a call: idle, and `S`-like to /proc.
        control.set_in_syscall(true);
        control.set_idle(true);
        super::kick_wait::wait_for_kick(
            || {
                !group.job.is_stopped()
                    || control.signal_pending()
                    || control.park_requested()
                    || group.must_leave(tid)
            },
            None,
        );
        control.set_idle(false);
        control.set_in_syscall(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_and_continue_report_transitions_once() {
        let j = JobControl::default();
        assert!(!j.is_stopped());
        assert!(!j.cont(), "continuing a running process changes nothing");
        assert!(j.stop(libc::SIGTSTP));
        assert!(!j.stop(libc::SIGSTOP), "a second stop is no transition");
        assert_eq!(j.stopped_by(), Some(libc::SIGSTOP));
        assert!(j.cont());
        assert!(!j.is_stopped());
    }

    #[test]
    fn the_four_stop_signals() {
        for s in 1..=64 {
            assert_eq!(
                is_stop_signal(s),
                STOP_SIGNALS & (1 << (s - 1)) != 0,
                "signal {s}"
            );
        }
        assert!(is_stop_signal(libc::SIGTTOU));
        assert!(!is_stop_signal(libc::SIGCONT));
    }
}
