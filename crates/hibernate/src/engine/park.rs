//! The task's side at its park point: every thread of the sandbox stopped, the deflate (and
//! the checkpoint a job asks for), the wait for a wake, the inflate; then the threads resume.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kernel::task::{ParkHook, ParkedSandbox, StoppedProcesses};
use platform::PAGE_SIZE;

use crate::background;
use crate::state::State;
use crate::trigger;

use super::{
    checkpoint, Command, EngineError, HibernateError, Hibernator, ProcessMemory, WakeReason,
};

/// How long the other threads of a process have to park before a deflate.
const THREAD_STOP_TIMEOUT: Duration = Duration::from_secs(5);

impl ParkHook for Hibernator {
    fn on_park(&mut self, sb: &ParkedSandbox<'_>) {
        let cmd = {
            let mut mb = self.shared.lock_mailbox();
            mb.parked = true;
            mb.command.take()
        };
        self.shared.cv.notify_all();
        // A signal sent to a restored sandbox before its first park made it hibernated found
        // no hibernated sandbox to wake: it wakes for it at once.
        let mut wake_now = false;
        let (hibernated, stopped) = match cmd {
            Some(Command::Deflate(priority)) => {
                self.at_priority(sb, priority, |h, sb| h.deflate_all(sb, None))
            }
            Some(Command::Checkpoint(job)) => {
                self.at_priority(sb, job.priority(), |h, sb| h.deflate_all(sb, Some(&job)))
            }
            Some(Command::Restored) => {
                self.shared.transition(State::Hibernated);
                wake_now = sb.control().signal_pending();
                self.drop_code_when_idle = !wake_now;
                // Every process's threads wait until the wake, as after a deflate.
                (true, sb.others_as_stopped())
            }
            None => (false, StoppedProcesses::default()),
        };
        if hibernated {
            let reason = if wake_now {
                WakeReason::Explicit
            } else {
                self.wait_for_wake(sb)
            };
            let woke = Instant::now();
            self.shared.metrics.begin_wake();
            let to = match reason {
                WakeReason::Request => State::HibernateRunning,
                WakeReason::Explicit => State::Woken,
                WakeReason::Stop => State::Stopped,
            };
            self.shared.transition(to);
            if !matches!(reason, WakeReason::Stop) {
                self.inflate(woke);
                self.prefault(sb);
                self.map_file_pages_ahead(sb);
            }
            self.shared.metrics.record_wake(woke.elapsed());
        }
        stopped.resume();
        sb.resume_own();
        self.shared.lock_mailbox().parked = false;
        // A request that waits for this park's end (`HibernateHandle::park_for`).
        self.shared.cv.notify_all();
    }
}

impl Hibernator {
    /// Runs `work` at `priority` ([`background::run`]): nobody waits for a dormancy or the
    /// deflate before it, which run on a thread of their own at background priority while
    /// this one, the parked task's, waits for them.
    fn at_priority<R: Send>(
        &mut self,
        sb: &ParkedSandbox<'_>,
        priority: background::Priority,
        work: impl FnOnce(&mut Self, &ParkedSandbox<'_>) -> R + Send,
    ) -> R {
        /// The parked sandbox, lent to the thread that works on it.
        struct Lent<'s, 'a>(&'s ParkedSandbox<'a>);
        // SAFETY: a parked sandbox is its parked task, which is not `Sync` because its
        // platform context (a vCPU, a trap thread) and park hook belong to the thread that
        // runs the task. That thread waits in `background::run` until the work is done and
        // touches nothing meanwhile, so one thread at a time uses the task. The context
        // calls the work makes do not depend on the calling thread: the registers are in
        // memory, and the FPU state is KVM_GET_XSAVE (which KVM serves from any thread of
        // the VM's process) or the trap thread's saved image.
        unsafe impl Send for Lent<'_, '_> {}
        let lent = Lent(sb);
        background::run(priority, move || {
            let lent = lent;
            work(self, lent.0)
        })
    }

    /// Parks every other thread of the sandbox and deflates it, then writes the checkpoint
    /// `job` asks for; answers the control thread. Returns whether the sandbox is hibernated
    /// (the deflate succeeded: a failed checkpoint leaves it hibernated, nothing lost) and
    /// the groups to resume.
    pub(super) fn deflate_all(
        &mut self,
        sb: &ParkedSandbox<'_>,
        job: Option<&checkpoint::Job>,
    ) -> (bool, StoppedProcesses) {
        // Every other thread of the sandbox parks first, in every process (they wait in the
        // kernel until the wake is done); a thread that does not within the timeout fails
        // the deflate.
        let mut stopped = StoppedProcesses::default();
        let result = if sb.stop_all(THREAD_STOP_TIMEOUT, &mut stopped) {
            if job.is_some() {
                // No saved page-table entry may point into a file's window (page-cache pages
                // of private and shared file mappings): a restored process has none where
                // they were. Those pages fault back from the file. (Before the deflate,
                // which saves the page tables.)
                sb.drop_file_window_pages();
            }
            self.deflate(sb)
        } else {
            Err(EngineError::ThreadsDidNotStop(
                THREAD_STOP_TIMEOUT.as_secs(),
            ))
        };
        let hibernated = result.is_ok();
        let result = match (result, job) {
            (Ok(report), Some(job)) => self
                .write_checkpoint(sb, job, checkpoint::WorkingSet::File)
                .map(|()| report)
                .map_err(HibernateError::Checkpoint),
            (r, _) => r.map_err(HibernateError::Deflate),
        };
        // What running the sandbox and the deflate touched of the runtime's own memory goes
        // back to the host before the answer (a `stats` right after it sees the sandbox as it
        // sleeps). A holder going dormant execs next, which gives all of it back.
        if hibernated && !job.is_some_and(checkpoint::Job::goes_dormant) {
            crate::own_memory::drop_code_pages();
        }
        crate::own_memory::trim_heap();
        self.shared.lock_mailbox().reply = Some(result);
        self.shared.cv.notify_all();
        (hibernated, stopped)
    }
}

impl Hibernator {
    /// Bounds the bytes the sandbox's swap and REAP files may hold.
    pub fn set_swap_quota(&mut self, quota: Option<u64>) {
        self.swap_quota = quota;
    }

    /// The most bytes a deflate of `families` could write: every page their allocators hold
    /// (zero pages and clean file pages are not written, so this bounds from above), each
    /// family's once, and every resident page of anonymous shared memory.
    pub(super) fn deflate_bound(
        families: &[super::families::Family<'_>],
        space: &mm::SharedSpace,
    ) -> u64 {
        let mut pages = 0u64;
        for f in families {
            let mm = f.members[0].1.mm.lock().unwrap_or_else(|e| e.into_inner());
            pages += mm.allocator().used_pages() as u64;
        }
        for w in space.anonymous_windows() {
            pages += w.size() / PAGE_SIZE;
        }
        pages * PAGE_SIZE
    }

    pub(super) fn file_path(&self, kind: &str, pm: &ProcessMemory, generation: u64) -> PathBuf {
        self.dir.join(format!("{kind}{}.{generation}", pm.prefix))
    }

    /// Waits (no CPU) until a connection or bytes arrive on one of the application's sockets,
    /// or an explicit wake or stop. A checkpoint asked for meanwhile is written here, from
    /// the deflated state, and the wait goes on ([`Self::serve_while_hibernated`]).
    pub(super) fn wait_for_wake(&mut self, sb: &ParkedSandbox<'_>) -> WakeReason {
        loop {
            self.shared.lock_mailbox().waiting = true;
            let reason = self.watch(sb);
            let mut mb = self.shared.lock_mailbox();
            let cmd = mb.command.take();
            match (reason, cmd) {
                (Some(WakeReason::Stop), Some(_)) => {
                    mb.waiting = false;
                    mb.reply = Some(Err(HibernateError::State("the sandbox is stopping".into())));
                    drop(mb);
                    self.shared.cv.notify_all();
                    return WakeReason::Stop;
                }
                // A request that came with it waits: the checkpoint paused the sandbox (an
                // explicit wake read with it is one the checkpoint's answer overtakes).
                (_, Some(cmd)) => {
                    drop(mb);
                    self.serve_while_hibernated(sb, cmd);
                }
                (Some(r), None) => {
                    mb.waiting = false;
                    return r;
                }
                (None, None) => {}
            }
        }
    }

    /// Serves `cmd`, sent while the sandbox is hibernated (every thread parked, its memory
    /// deflated): a checkpoint is written from the deflated state, as after the deflate of a
    /// checkpoint, and the sandbox stays hibernated; answers the control thread.
    fn serve_while_hibernated(&mut self, sb: &ParkedSandbox<'_>, cmd: Command) {
        let result = match cmd {
            Command::Checkpoint(job) => {
                self.at_priority(sb, job.priority(), |h, sb| {
                    let r = h.checkpoint_hibernated(sb, &job);
                    // A holder going dormant execs next, which gives all of it back.
                    if !job.goes_dormant() {
                        crate::own_memory::drop_code_pages();
                    }
                    crate::own_memory::trim_heap();
                    r
                })
            }
            Command::Deflate(_) | Command::Restored => Err(HibernateError::State(
                "cannot hibernate a sandbox that is hibernated".into(),
            )),
        };
        self.shared.lock_mailbox().reply = Some(result);
        self.shared.cv.notify_all();
    }

    /// One watch of the wait for a wake: the reason to wake, or `None` to watch again (a
    /// pause ended without a wake, or a command came).
    fn watch(&mut self, sb: &ParkedSandbox<'_>) -> Option<WakeReason> {
        // SAFETY: epoll_create1 with a valid flag.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            tracing::error!("epoll_create1: {}", std::io::Error::last_os_error());
            return Some(WakeReason::Explicit);
        }
        // SAFETY: a fresh fd owned by nobody else.
        let ep = unsafe { OwnedFd::from_raw_fd(ep) };
        let add = |fd: i32, data: u64| {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: data,
            };
            // SAFETY: valid epoll fd, fd and event.
            unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        };
        add(self.shared.wake_efd.as_raw_fd(), u64::MAX);
        // Paused: requests wait for the resume.
        let paused = self.shared.paused.load(Ordering::SeqCst);
        // The sockets of every process: one wake trigger for the whole sandbox.
        let sockets: Vec<Arc<kernel::fd::OpenFile>> = if paused {
            Vec::new()
        } else {
            sb.sockets()
                .into_iter()
                .filter(|f| !trigger::sandbox_internal(f.host()))
                .collect()
        };
        for (i, f) in sockets.iter().enumerate() {
            add(f.host().as_raw_fd(), i as u64);
        }
        // A first look without waiting, when the code pages are to go once nothing is to do.
        let mut timeout = if self.drop_code_when_idle { 0 } else { -1 };
        loop {
            let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
            // SAFETY: valid epoll fd and output buffer.
            let n = unsafe {
                libc::epoll_wait(ep.as_raw_fd(), evs.as_mut_ptr(), evs.len() as i32, timeout)
            };
            if n == 0 && timeout == 0 {
                self.drop_code_when_idle = false;
                crate::own_memory::drop_code_pages();
                timeout = -1;
                continue;
            }
            if n < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    if sb.control().signal_pending() {
                        return Some(WakeReason::Stop);
                    }
                    continue;
                }
                tracing::error!("epoll_wait: {}", std::io::Error::last_os_error());
                return Some(WakeReason::Explicit);
            }
            let mut reason = None;
            for ev in &evs[..n as usize] {
                if ev.u64 == u64::MAX {
                    let mut v = 0u64;
                    // SAFETY: reading 8 bytes from our eventfd into a local.
                    unsafe {
                        libc::read(
                            self.shared.wake_efd.as_raw_fd(),
                            (&mut v as *mut u64).cast(),
                            8,
                        )
                    };
                    if self.shared.stop.load(Ordering::SeqCst) {
                        reason = Some(WakeReason::Stop);
                    } else if self.shared.rewatch.swap(false, Ordering::SeqCst) {
                        // A pause ended without a wake: wait again, for requests this time.
                        return None;
                    } else if self.shared.lock_mailbox().command.is_some() {
                        return None;
                    } else {
                        reason = Some(WakeReason::Explicit);
                    }
                } else if reason.is_none() {
                    let Some(f) = sockets.get(ev.u64 as usize) else {
                        continue;
                    };
                    let fd = f.host().as_raw_fd();
                    if trigger::brings_work(f.host()) {
                        tracing::debug!(fd, "woken by a request");
                        reason = Some(WakeReason::Request);
                    } else {
                        // A peer's close (or an error) the application has not seen yet:
                        // not a request. Stop watching that socket for this hibernation.
                        // SAFETY: valid epoll fd; removing an fd is harmless if absent.
                        unsafe {
                            libc::epoll_ctl(
                                ep.as_raw_fd(),
                                libc::EPOLL_CTL_DEL,
                                fd,
                                std::ptr::null_mut(),
                            )
                        };
                    }
                }
            }
            if reason.is_some() {
                return reason;
            }
        }
    }
}
