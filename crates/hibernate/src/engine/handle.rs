//! The control thread's side: requests to hibernate, checkpoint, pause, resume, wake and
//! stop a sandbox, answered by the task's side ([`super::Hibernator`]) at its park point.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::state::State;

use super::{checkpoint, Command, DeflateReport, HibernateError, HibernateHandle, Shared};
use crate::background::Priority;

impl HibernateHandle {
    /// The shared state (state machine, metrics).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Deflates the sandbox: parks its task, writes its memory out, and leaves it waiting for a
    /// wake. Returns once it is hibernated.
    ///
    /// # Errors
    /// [`HibernateError::State`] unless hot, running or woken; [`HibernateError::ParkTimeout`];
    /// [`HibernateError::Deflate`] (the sandbox stays as it was).
    pub fn hibernate(&self, timeout: Duration) -> Result<DeflateReport, HibernateError> {
        self.hibernate_with(Priority::Asked, timeout)
    }

    /// [`Self::hibernate`], the deflate run at `priority` (the keep-alive deflate of a
    /// sandbox that goes dormant next, at background priority: `crate::background`).
    ///
    /// # Errors
    /// As [`Self::hibernate`].
    pub fn hibernate_with(
        &self,
        priority: Priority,
        timeout: Duration,
    ) -> Result<DeflateReport, HibernateError> {
        self.park_for(Command::Deflate(priority), timeout)
    }

    /// Pauses the sandbox (as [`Self::pause`]: requests do not wake it) and writes a
    /// checkpoint of it into `dir` (a new directory: see [`crate::snapshot`]), with `holder`
    /// (the holder's own record of how the sandbox was started) beside the kernel's state.
    /// The sandbox stays paused, also when the checkpoint fails (`dir` is then removed),
    /// until [`Self::resume`]: its files can be copied meanwhile.
    ///
    /// # Errors
    /// As [`Self::hibernate`]; [`HibernateError::Deflate`] naming what could not be saved.
    pub fn checkpoint(
        &self,
        dir: PathBuf,
        holder: serde_json::Value,
        timeout: Duration,
    ) -> Result<DeflateReport, HibernateError> {
        self.shared.paused.store(true, Ordering::SeqCst);
        let r = self.checkpoint_job(
            checkpoint::Job {
                dir,
                holder,
                keep: None,
            },
            timeout,
        );
        if matches!(
            r,
            Err(HibernateError::State(_) | HibernateError::ParkTimeout(_))
        ) {
            self.shared.paused.store(false, Ordering::SeqCst);
        }
        r
    }

    /// [`Self::checkpoint`] for a holder about to go dormant: also returns copies
    /// (close-on-exec) of the sandbox's listening and connected Internet sockets, which the
    /// holder keeps while dormant and hands to the woken sandbox (the checkpoint saves the
    /// connections as kept). The sandbox stays paused: connections and bytes wait in those
    /// sockets' queues.
    ///
    /// # Errors
    /// As [`Self::checkpoint`].
    pub fn checkpoint_for_dormancy(
        &self,
        dir: PathBuf,
        holder: serde_json::Value,
        timeout: Duration,
    ) -> Result<(DeflateReport, checkpoint::KeptSockets), HibernateError> {
        let keep = Arc::new(std::sync::Mutex::new(checkpoint::KeptSockets::default()));
        self.shared.paused.store(true, Ordering::SeqCst);
        let r = self.checkpoint_job(
            checkpoint::Job {
                dir,
                holder,
                keep: Some(keep.clone()),
            },
            timeout,
        );
        if matches!(
            r,
            Err(HibernateError::State(_) | HibernateError::ParkTimeout(_))
        ) {
            self.shared.paused.store(false, Ordering::SeqCst);
        }
        let report = r?;
        let fds = std::mem::take(&mut *keep.lock().unwrap_or_else(|e| e.into_inner()));
        Ok((report, fds))
    }

    /// Writes the checkpoint `job`: a hibernated sandbox's from its deflated state, where it
    /// waits for a wake (it is not woken); a running one's after a park and a deflate.
    fn checkpoint_job(
        &self,
        job: checkpoint::Job,
        timeout: Duration,
    ) -> Result<DeflateReport, HibernateError> {
        let deadline = Instant::now() + timeout;
        self.shared.paused_asleep.store(false, Ordering::SeqCst);
        let mut attempts = 0;
        loop {
            if let Some(r) = self.checkpoint_while_hibernated(job.clone(), deadline, timeout) {
                return r;
            }
            match self.park_for(Command::Checkpoint(job.clone()), timeout) {
                // Hibernated (its keep-alive) between the two: ask the wait.
                Err(HibernateError::State(_))
                    if attempts < 3 && self.state() == State::Hibernated =>
                {
                    attempts += 1;
                }
                r => return r,
            }
        }
    }

    /// Hands `job` to the park's wait for a wake, if the sandbox is hibernated there, and
    /// waits for its answer; `None` if it is not.
    fn checkpoint_while_hibernated(
        &self,
        job: checkpoint::Job,
        deadline: Instant,
        timeout: Duration,
    ) -> Option<Result<DeflateReport, HibernateError>> {
        if self.state() != State::Hibernated {
            return None;
        }
        let _one = match self.one_request(deadline, timeout) {
            Ok(g) => g,
            Err(e) => return Some(Err(e)),
        };
        {
            let mut mb = self.shared.lock_mailbox();
            if !mb.waiting || mb.command.is_some() {
                return None;
            }
            mb.command = Some(Command::Checkpoint(job));
            mb.reply = None;
        }
        self.shared.paused_asleep.store(true, Ordering::SeqCst);
        self.shared.signal_wake();
        // The wait takes the command in every case: it answers it, or says it is stopping.
        let mut mb = self.shared.lock_mailbox();
        loop {
            if let Some(r) = mb.reply.take() {
                return Some(r);
            }
            mb = self.shared.cv.wait(mb).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Holds the right to send the task a command until the guard goes: one request at a
    /// time, for another's command would replace this one's in the mailbox, and its reply be
    /// taken for this one's.
    fn one_request(
        &self,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<std::sync::MutexGuard<'_, ()>, HibernateError> {
        loop {
            match self.shared.park_requests.try_lock() {
                Ok(g) => return Ok(g),
                Err(std::sync::TryLockError::Poisoned(e)) => return Ok(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() >= deadline => {
                    return Err(HibernateError::ParkTimeout(timeout))
                }
                Err(std::sync::TryLockError::WouldBlock) => {
                    std::thread::sleep(Duration::from_millis(1))
                }
            }
        }
    }

    pub(super) fn park_for(
        &self,
        cmd: Command,
        timeout: Duration,
    ) -> Result<DeflateReport, HibernateError> {
        let deadline = Instant::now() + timeout;
        let _one = self.one_request(deadline, timeout)?;
        {
            let st = self.shared.lock_state();
            match st.state() {
                State::Hot | State::Running | State::Woken | State::HibernateRunning => {}
                s => {
                    return Err(HibernateError::State(format!(
                        "cannot hibernate a sandbox that is {}",
                        s.as_str()
                    )))
                }
            }
        }
        {
            let mut mb = self.shared.lock_mailbox();
            // A park still finishing (the inflate of a wake that has just begun: the state
            // says woken already) takes no new command and would be mistaken for this one's:
            // its end comes first.
            while mb.parked {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(HibernateError::ParkTimeout(timeout));
                }
                mb = self
                    .shared
                    .cv
                    .wait_timeout(mb, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            mb.command = Some(cmd);
            mb.reply = None;
        }
        let shared = self.shared.clone();
        // Parked, or already answered (a deflate refused at once may unpark before a poll
        // sees it parked).
        let taken = move || {
            let mb = shared.lock_mailbox();
            mb.parked || mb.reply.is_some()
        };
        if !self.control.request_park(taken, timeout) {
            self.control.clear_park();
            let mut mb = self.shared.lock_mailbox();
            mb.command = None;
            return Err(HibernateError::ParkTimeout(timeout));
        }
        let mut mb = self.shared.lock_mailbox();
        loop {
            if let Some(r) = mb.reply.take() {
                return r;
            }
            mb = self.shared.cv.wait(mb).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// [`hibernate`](Self::hibernate) once the sandbox is idle: while it is serving a request
    /// (running, its first task out of the call that waits for input), waits up to
    /// `idle_timeout` for it to finish, so that an answer in flight is not frozen with no
    /// request left to wake it; then refuses with a clear error. Only the first task is
    /// watched: the caller uses this for a sandbox of one task (a server with threads serves
    /// on others, and its first thread may never wait for input: the JVM's joins).
    ///
    /// # Errors
    /// [`HibernateError::State`] if it stays busy; as [`Self::hibernate`].
    pub fn hibernate_when_idle(
        &self,
        priority: Priority,
        idle_timeout: Duration,
        park_timeout: Duration,
    ) -> Result<DeflateReport, HibernateError> {
        let deadline = Instant::now() + idle_timeout;
        while matches!(self.state(), State::Running | State::HibernateRunning) {
            if Instant::now() >= deadline {
                return Err(HibernateError::State(format!(
                    "the sandbox has been serving a request for {:?}: not hibernated (ask \
                     again when it is idle)",
                    idle_timeout
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.hibernate_with(priority, park_timeout)
    }

    /// Pauses the sandbox (OCI `pause`): a hibernate that requests do not end. Connections
    /// that arrive meanwhile wait in the host's queues and are served after [`Self::resume`].
    ///
    /// # Errors
    /// As [`Self::hibernate`].
    pub fn pause(&self, timeout: Duration) -> Result<DeflateReport, HibernateError> {
        self.shared.paused.store(true, Ordering::SeqCst);
        let r = self.hibernate(timeout);
        if r.is_err() {
            self.shared.paused.store(false, Ordering::SeqCst);
        }
        r
    }

    /// Makes the next deflate write every live page of each process into one fresh swap file
    /// (a compaction) instead of a new layer of what changed.
    pub fn compact_next_deflate(&self) {
        self.shared.compact_next.store(true, Ordering::SeqCst);
    }

    /// Ends a pause (OCI `resume`), or wakes a hibernated sandbox. A pause that began with the
    /// sandbox hibernated (a checkpoint written where it slept) ends as [`Self::unpause`]:
    /// the sandbox stays hibernated, as it was.
    ///
    /// # Errors
    /// [`HibernateError::State`] unless hibernated.
    pub fn resume(&self) -> Result<(), HibernateError> {
        if self.shared.paused_asleep.swap(false, Ordering::SeqCst) && self.is_paused() {
            return self.unpause();
        }
        let r = self.wake();
        if r.is_ok() {
            self.shared.paused.store(false, Ordering::SeqCst);
        }
        r
    }

    /// Ends a pause without waking the sandbox: it stays hibernated, and the next request
    /// wakes it as it wakes any hibernated sandbox (`torpor fork` leaves its template so once
    /// the image is written: nothing of it has run since, while it stays hibernated).
    ///
    /// # Errors
    /// [`HibernateError::State`] unless paused.
    pub fn unpause(&self) -> Result<(), HibernateError> {
        if !self.is_paused() {
            return Err(HibernateError::State("the sandbox is not paused".into()));
        }
        self.shared.paused.store(false, Ordering::SeqCst);
        self.shared.paused_asleep.store(false, Ordering::SeqCst);
        self.shared.rewatch.store(true, Ordering::SeqCst);
        self.shared.signal_wake();
        Ok(())
    }

    /// Whether the sandbox is hibernated by a pause.
    pub fn is_paused(&self) -> bool {
        self.shared.paused.load(Ordering::SeqCst) && self.state() == State::Hibernated
    }

    /// Wakes a hibernated sandbox without a request (SIGCONT); pages still return on demand.
    ///
    /// # Errors
    /// [`HibernateError::State`] unless hibernated.
    pub fn wake(&self) -> Result<(), HibernateError> {
        let s = self.shared.lock_state().state();
        if s != State::Hibernated {
            return Err(HibernateError::State(format!(
                "cannot wake a sandbox that is {}",
                s.as_str()
            )));
        }
        // An unpause not yet seen by the wait is overtaken: this is a wake.
        self.shared.rewatch.store(false, Ordering::SeqCst);
        self.shared.signal_wake();
        Ok(())
    }

    /// Wakes the task if it is hibernated, so that it notices a pending signal.
    pub fn stop_if_hibernated(&self) {
        if self.shared.lock_state().state() == State::Hibernated {
            self.shared.signal_wake();
        }
    }

    /// Makes a hibernated task leave its wait so that it can be stopped.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.signal_wake();
        let _st = self.shared.lock_state();
        self.shared.state_changed.notify_all();
    }

    /// Blocks while the sandbox is in state `s`, at most `timeout`, without polling (a
    /// hibernated sandbox's watchers cost the host nothing); returns early when asked to
    /// stop. Returns the state then.
    pub fn wait_while(&self, s: State, timeout: Duration) -> State {
        let st = self.shared.lock_state();
        let (st, _) = self
            .shared
            .state_changed
            .wait_timeout_while(st, timeout, |m| {
                m.state() == s && !self.shared.stop.load(Ordering::SeqCst)
            })
            .unwrap_or_else(|e| e.into_inner());
        st.state()
    }

    /// Moves the sandbox to `to` from outside the engine (the holder's start and end), telling
    /// those waiting for a change ([`Self::wait_while`]).
    ///
    /// # Errors
    /// The move is not allowed from the current state; nothing changes.
    pub fn enter(&self, to: State) -> Result<(), crate::state::IllegalTransition> {
        self.shared.try_transition(to)
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.shared.lock_state().state()
    }
}
