//! Deflate and inflate of a running sandbox, driven from its control thread and carried out
//! on the task's own thread while it is parked.
//!
//! ```text
//! control thread                         task thread (vCPU)
//! ──────────────                         ──────────────────
//! Handle::hibernate ── park request ──▶  exits KVM_RUN / EINTR from a blocking call
//!                                        Hibernator::on_park:
//!                                          deflate: free pages → MADV_DONTNEED,
//!                                          resident pages → swap file (batched),
//!                                          then MADV_DONTNEED; uffd registered
//!          ◀── report ─────────────────    state = hibernated
//!                                          epoll_wait(app sockets + wake eventfd)
//! Handle::wake ─── eventfd ────────────▶   (or a connection / bytes arrive)
//!                                          state = woken | hibernate-running
//!                                        resumes; pages return through the uffd thread
//! ```
//!
//! A failed deflate (disk full, I/O error) leaves every page in place: the new swap file is
//! removed, nothing was dropped, and the sandbox stays hot.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use kernel::fd::FileKind;
use kernel::task::{ParkHook, Task, TaskControl};
use platform::{layout, Gpa, GuestMemory, PAGE_SIZE};

use crate::metrics::HibernateMetrics as Metrics;
use crate::pager::{self, PagerState};
use crate::pagestate::{PageIdx, PageKind, PageState, PageStateMap};
use crate::reap::{ReapReader, ReapWriter, WorkingSetRecorder, DEFAULT_RECORD_LIMIT};
use crate::state::{State, StateMachine};
use crate::swapfile::{SwapReader, SwapWriter};
use crate::swapstore::SwapStore;
use crate::trigger;
use crate::uffd::Uffd;

mod checkpoint;

pub use checkpoint::{memory_image_name, restored, CheckpointState, Clocks};

/// Pages per swap-file write (2 MiB).
const BATCH_PAGES: usize = 512;

/// Errors of hibernate and wake requests.
#[derive(Debug, thiserror::Error)]
pub enum HibernateError {
    /// The sandbox is not in a state that allows this.
    #[error("{0}")]
    State(String),
    /// The task did not park in time (it may be stuck in a host call that ignores signals).
    #[error("the sandbox did not pause within {0:?}")]
    ParkTimeout(Duration),
    /// Deflate failed; the sandbox stays hot.
    #[error("deflate failed, the sandbox stays hot: {0}")]
    Deflate(String),
    /// The sandbox was deflated but its checkpoint could not be written (nothing is left of
    /// it); the sandbox stays hibernated.
    #[error("{0}")]
    Checkpoint(String),
}

/// What a deflate did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct DeflateReport {
    /// Pages returned to the host because the guest's allocator held them free.
    pub free_pages: u64,
    /// Clean pages of read-only file mappings dropped (they come back from the file).
    pub file_pages: u64,
    /// Resident zero pages dropped without writing.
    pub zero_pages: u64,
    /// Pages written to the swap file this time.
    pub written_pages: u64,
    /// Resident pages brought back from the swap and not written since: they keep their
    /// slot, nothing is written.
    pub clean_pages: u64,
    /// Pages kept in the swap from an earlier deflate (swapped, never touched since): they
    /// keep their slot, or are copied into the fresh layer of a compaction.
    pub carried_pages: u64,
    /// Bytes of page data the swap files hold after this deflate (all layers).
    pub swap_bytes: u64,
    /// Bytes of page data this deflate wrote to the swap (its new layer).
    pub swap_written_bytes: u64,
    /// Swap files (layers) after this deflate.
    pub swap_layers: u64,
    /// Whether this deflate compacted the swap into one fresh layer.
    pub compacted: bool,
    /// Bytes of the new REAP file's data (the recorded working set).
    pub reap_bytes: u64,
    /// Duration.
    pub took_us: u64,
}

enum Command {
    Deflate,
    /// Deflate, then write a checkpoint of the sandbox.
    Checkpoint(checkpoint::Job),
    /// The sandbox was just restored from a checkpoint: it is hibernated already.
    Restored,
}

enum WakeReason {
    Request,
    Explicit,
    Stop,
}

struct Mailbox {
    parked: bool,
    command: Option<Command>,
    reply: Option<Result<DeflateReport, HibernateError>>,
}

/// State shared by the control thread's [`HibernateHandle`] and the task's [`Hibernator`].
pub struct Shared {
    /// The sandbox state machine.
    pub state: Mutex<StateMachine>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    mailbox: Mutex<Mailbox>,
    cv: Condvar,
    wake_efd: OwnedFd,
    stop: std::sync::atomic::AtomicBool,
    /// Hibernated by a pause (OCI `pause`): only an explicit wake ends it, requests wait.
    paused: std::sync::atomic::AtomicBool,
    /// The next deflate compacts every process's swap (`torpor hibernate --compact`).
    compact_next: std::sync::atomic::AtomicBool,
    /// The last deflate's figures, per process.
    pub processes: Mutex<Vec<ProcessDeflate>>,
}

impl Shared {
    fn signal_wake(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a local to our eventfd.
        unsafe { libc::write(self.wake_efd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, StateMachine> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_mailbox(&self) -> std::sync::MutexGuard<'_, Mailbox> {
        self.mailbox.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The control thread's side.
#[derive(Clone)]
pub struct HibernateHandle {
    shared: Arc<Shared>,
    control: Arc<TaskControl>,
}

/// The task's side: the park hook, run on the first process's task. It deflates and
/// inflates every process of the sandbox (each its own VM and guest memory).
pub struct Hibernator {
    shared: Arc<Shared>,
    dir: PathBuf,
    mode: WakeMode,
    /// The first process's memory, until its first deflate records its pid.
    first_mem: Option<Arc<GuestMemory>>,
    /// The first process's pid (its files keep the names `swap.N` and `reap.N`).
    first_pid: Option<i32>,
    /// Each process's memory as the hibernator keeps it between deflates, by pid.
    processes: std::collections::BTreeMap<i32, ProcessMemory>,
    /// The sandbox's anonymous shared memory written out by the last deflate, restored in
    /// full at the next wake.
    shared_swap: Option<SharedSwap>,
    /// The most bytes the swap and REAP files may hold (`--swap-quota`).
    swap_quota: Option<u64>,
}

/// Shared memory (MAP_SHARED anonymous, System V) deflated: its pages in a swap file
/// (`shm.N`, pages numbered by guest-physical address from the shared-window base), the
/// windows' memory punched out of their memfds.
struct SharedSwap {
    reader: SwapReader,
    windows: Vec<Arc<platform::SharedWindow>>,
}

/// One process's memory between deflates: its page-state map, swap and REAP files, uffd
/// registration, and REAP policy state.
struct ProcessMemory {
    mem: Arc<GuestMemory>,
    /// File name prefix in the state directory: `swap.N` for the first process,
    /// `swap-PID.N` for the others (and `reap…` alike).
    prefix: String,
    pager: Arc<RwLock<PagerState>>,
    uffd: Option<Arc<Uffd>>,
    generation: u64,
    /// The recorded working set REAP prefetches (empty until a wake has been recorded).
    reap_set: Vec<PageIdx>,
    /// The page-cache pages of the recorded working set (windows' guest-physical pages),
    /// read ahead with it: see [`crate::filereap`].
    reap_files: Vec<Gpa>,
    /// Whether the next wake records a fresh working set (instead of prefetching).
    record_next: bool,
    /// Whether the current wake was served by a REAP prefetch.
    reap_wake: bool,
}

impl ProcessMemory {
    fn new(mem: Arc<GuestMemory>, prefix: String, mode: WakeMode) -> Result<Self, String> {
        let pages = PageStateMap::new_all_free(mem.size().div_ceil(PAGE_SIZE))
            .map_err(|e| e.to_string())?;
        let page_count = pages.len();
        let pager = Arc::new(RwLock::new(PagerState {
            pages,
            swap: SwapStore::new(),
            reap: None,
            files: Vec::new(),
            recorder: WorkingSetRecorder::new(page_count, DEFAULT_RECORD_LIMIT),
            reap_wake: false,
        }));
        Ok(ProcessMemory {
            mem,
            prefix,
            pager,
            uffd: None,
            generation: 0,
            reap_set: Vec::new(),
            reap_files: Vec::new(),
            record_next: mode != WakeMode::Fault,
            reap_wake: false,
        })
    }

    /// Registers the process's guest memory (above the reserved chunk) with a userfaultfd
    /// and starts the thread that serves its faults from the page-state map. Before it, a
    /// dropped page would read as zero.
    fn start_pager(
        mem: &Arc<GuestMemory>,
        pager: &Arc<RwLock<PagerState>>,
        metrics: &Arc<Metrics>,
        error_file: PathBuf,
    ) -> Result<Arc<Uffd>, String> {
        // Blocking reads, close-on-exec, kernel-mode faults too (the runtime's own copies
        // into guest memory fault like the guest's touches).
        let mut uffd = Uffd::new().map_err(|e| format!("userfaultfd: {e}"))?;
        let start = layout::RESERVED_END.raw();
        // SAFETY: in bounds: guest memory is larger than the reserved chunk.
        let host = unsafe { mem.host_base().add(start as usize) };
        uffd.register(host.cast(), (mem.size() - start) as usize)
            .map_err(|e| format!("UFFDIO_REGISTER: {e}"))?;
        let uffd = Arc::new(uffd);
        pager::spawn(
            uffd.clone(),
            mem,
            pager.clone(),
            metrics.clone(),
            error_file,
        )
        .map_err(|e| format!("starting the uffd thread: {e}"))?;
        Ok(uffd)
    }

    /// Removes the process's files (it exited, or replaced its memory with execve).
    fn remove_files(&self) {
        let mut pager = self.pager.write().unwrap_or_else(|e| e.into_inner());
        pager.swap.remove_all();
        if let Some(old) = pager.reap.take() {
            let _ = old.remove();
        }
    }
}

/// What one process's deflate did, for `torpor stats`.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ProcessDeflate {
    /// The process.
    pub pid: i32,
    /// Its figures.
    #[serde(flatten)]
    pub report: DeflateReport,
}

/// How a hibernated sandbox comes back (`--wake-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WakeMode {
    /// Every page comes back by page fault.
    Fault,
    /// Record the working set on the first wake; afterwards prefetch it in one batch before
    /// resuming, and let the other pages fault.
    Reap,
    /// As `reap`, and re-record when a REAP wake takes many residual faults (more than a
    /// quarter of the set's pages, and at least 64).
    Auto,
}

impl std::str::FromStr for WakeMode {
    type Err = String;
    fn from_str(s: &str) -> Result<WakeMode, String> {
        match s {
            "fault" => Ok(WakeMode::Fault),
            "reap" => Ok(WakeMode::Reap),
            "auto" => Ok(WakeMode::Auto),
            _ => Err(format!(
                "unknown wake mode {s:?}: expected fault, reap or auto"
            )),
        }
    }
}

/// Builds the two sides for a sandbox whose state directory is `dir`.
///
/// # Errors
/// The host's error if the wake eventfd cannot be created.
pub fn new(
    mem: Arc<GuestMemory>,
    control: Arc<TaskControl>,
    dir: PathBuf,
    mode: WakeMode,
) -> std::io::Result<(Hibernator, HibernateHandle)> {
    // SAFETY: eventfd with valid flags; the fd is owned below.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if efd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd owned by nobody else.
    let wake_efd = unsafe { OwnedFd::from_raw_fd(efd) };
    crate::own_memory::keep_allocator_thresholds();
    // The page-state map is built at the first deflate; check now that it can be.
    PageStateMap::new_all_free(mem.size().div_ceil(PAGE_SIZE))
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    let shared = Arc::new(Shared {
        state: Mutex::new(StateMachine::new()),
        metrics: Arc::new(Metrics::default()),
        mailbox: Mutex::new(Mailbox {
            parked: false,
            command: None,
            reply: None,
        }),
        cv: Condvar::new(),
        wake_efd,
        stop: std::sync::atomic::AtomicBool::new(false),
        paused: std::sync::atomic::AtomicBool::new(false),
        compact_next: std::sync::atomic::AtomicBool::new(false),
        processes: Mutex::new(Vec::new()),
    });
    {
        // Requests move the state between hot and running, woken and hibernate-running.
        let shared = shared.clone();
        control.set_idle_hook(Box::new(move |idle| {
            let mut st = shared.lock_state();
            let to = match (st.state(), idle) {
                (State::Running, true) => State::Hot,
                (State::Hot, false) => State::Running,
                (State::HibernateRunning, true) => State::Woken,
                (State::Woken, false) => State::HibernateRunning,
                _ => return,
            };
            let _ = st.transition(to);
        }));
    }
    let hib = Hibernator {
        shared: shared.clone(),
        dir,
        mode,
        first_mem: Some(mem),
        first_pid: None,
        processes: std::collections::BTreeMap::new(),
        shared_swap: None,
        swap_quota: None,
    };
    Ok((hib, HibernateHandle { shared, control }))
}

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
        self.park_for(Command::Deflate, timeout)
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
        let r = self.park_for(
            Command::Checkpoint(checkpoint::Job { dir, holder }),
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

    fn park_for(&self, cmd: Command, timeout: Duration) -> Result<DeflateReport, HibernateError> {
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
        self.hibernate(park_timeout)
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

    /// Ends a pause (OCI `resume`), or wakes a hibernated sandbox.
    ///
    /// # Errors
    /// [`HibernateError::State`] unless hibernated.
    pub fn resume(&self) -> Result<(), HibernateError> {
        let r = self.wake();
        if r.is_ok() {
            self.shared.paused.store(false, Ordering::SeqCst);
        }
        r
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
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.shared.lock_state().state()
    }
}

/// How long the other threads of a process have to park before a deflate.
const THREAD_STOP_TIMEOUT: Duration = Duration::from_secs(5);

impl ParkHook for Hibernator {
    fn on_park(&mut self, task: &mut Task) {
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
            Some(Command::Deflate) => self.deflate_all(task, None),
            Some(Command::Checkpoint(job)) => self.deflate_all(task, Some(&job)),
            Some(Command::Restored) => {
                if let Err(e) = self.shared.lock_state().transition(State::Hibernated) {
                    tracing::warn!("{e}");
                }
                wake_now = task.control.signal_pending();
                if !wake_now {
                    crate::own_memory::drop_code_pages();
                }
                // Every process's threads wait until the wake, as after a deflate.
                let others = task
                    .group
                    .procs
                    .live_groups()
                    .into_iter()
                    .filter(|(pid, _)| *pid != task.pid)
                    .map(|(_, g)| g)
                    .collect();
                (true, others)
            }
            None => (false, Vec::new()),
        };
        if hibernated {
            let reason = if wake_now {
                WakeReason::Explicit
            } else {
                self.wait_for_wake(task)
            };
            let woke = Instant::now();
            self.shared.metrics.begin_wake();
            let to = match reason {
                WakeReason::Request => State::HibernateRunning,
                WakeReason::Explicit => State::Woken,
                WakeReason::Stop => State::Stopped,
            };
            if let Err(e) = self.shared.lock_state().transition(to) {
                tracing::warn!("{e}");
            }
            if !matches!(reason, WakeReason::Stop) {
                self.inflate(woke);
                self.prefault(task);
            }
            self.shared.metrics.record_wake(woke.elapsed());
        }
        for g in stopped {
            g.resume_others();
        }
        task.group.resume_others();
        self.shared.lock_mailbox().parked = false;
    }
}

impl Hibernator {
    /// Parks every other thread of the sandbox and deflates it, then writes the checkpoint
    /// `job` asks for; answers the control thread. Returns whether the sandbox is hibernated
    /// (the deflate succeeded: a failed checkpoint leaves it hibernated, nothing lost) and
    /// the groups to resume.
    fn deflate_all(
        &mut self,
        task: &mut Task,
        job: Option<&checkpoint::Job>,
    ) -> (bool, Vec<Arc<kernel::task::ThreadGroup>>) {
        // Every other thread of the sandbox parks first, in every process (they wait in the
        // kernel until the wake is done); a thread that does not within the timeout fails
        // the deflate.
        let mut stopped = Vec::new();
        let result = if self.stop_sandbox(task, &mut stopped) {
            if job.is_some() {
                // No saved page-table entry may point into a file's window (page-cache pages
                // of private and shared file mappings): a restored process has none where
                // they were. Those pages fault back from the file. (Before the deflate,
                // which saves the page tables.)
                task.mm().drop_file_window_pages();
                for (pid, g) in task.group.procs.live_groups() {
                    if pid != task.pid {
                        if let Some(r) = g.resources() {
                            r.mm.lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .drop_file_window_pages();
                        }
                    }
                }
            }
            self.deflate(task)
        } else {
            Err(format!(
                "the application's threads did not stop within {} s",
                THREAD_STOP_TIMEOUT.as_secs()
            ))
        };
        let hibernated = result.is_ok();
        let result = match (result, job) {
            (Ok(report), Some(job)) => self
                .write_checkpoint(task, job)
                .map(|()| report)
                .map_err(HibernateError::Checkpoint),
            (r, _) => r.map_err(HibernateError::Deflate),
        };
        // What running the sandbox and the deflate touched of the runtime's own memory goes
        // back to the host before the answer (a `stats` right after it sees the sandbox as it
        // sleeps).
        if hibernated {
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

    /// The most bytes a deflate of `live` could write: every page the processes' allocators
    /// hold (zero pages and clean file pages are not written, so this bounds from above) and
    /// every resident page of anonymous shared memory.
    fn deflate_bound(
        live: &[(i32, kernel::task::ProcessResources)],
        space: &mm::SharedSpace,
    ) -> u64 {
        let mut pages = 0u64;
        for (_, r) in live {
            let mm = r.mm.lock().unwrap_or_else(|e| e.into_inner());
            pages += (mm.allocator().total_pages() - mm.allocator().free_pages()) as u64;
        }
        for w in space.anonymous_windows() {
            pages += w.size() / PAGE_SIZE;
        }
        pages * PAGE_SIZE
    }

    /// Parks every thread of the sandbox but the caller's: the other threads of its process,
    /// then every other process, again until no new process appeared meanwhile (a fork in
    /// flight). The groups stopped are pushed on `stopped` for the caller to resume, also
    /// when this fails.
    fn stop_sandbox(&self, task: &Task, stopped: &mut Vec<Arc<kernel::task::ThreadGroup>>) -> bool {
        if task.group.live() > 1 && !task.group.stop_others(task.tid, THREAD_STOP_TIMEOUT) {
            return false;
        }
        loop {
            let new: Vec<_> = task
                .group
                .procs
                .live_groups()
                .into_iter()
                .filter(|(pid, g)| *pid != task.pid && !stopped.iter().any(|s| Arc::ptr_eq(s, g)))
                .map(|(_, g)| g)
                .collect();
            if new.is_empty() {
                return true;
            }
            for g in new {
                // No thread of that process is exempt (tid 0 is nobody's).
                let ok = g.stop_others(0, THREAD_STOP_TIMEOUT);
                if ok {
                    stopped.push(g);
                } else {
                    return false;
                }
            }
        }
    }

    fn file_path(&self, kind: &str, pm: &ProcessMemory, generation: u64) -> PathBuf {
        self.dir.join(format!("{kind}{}.{generation}", pm.prefix))
    }

    /// After the wake trigger, before the task resumes: prefetch each process's REAP file
    /// (if this wake uses it), and start recording (if this wake records).
    fn inflate(&mut self, woke: Instant) {
        let error_file = self.dir.join("error");
        if let Some(sw) = self.shared_swap.take() {
            if let Err(e) = restore_shared(&sw) {
                pager::fatal(&error_file, &format!("shared memory swap unreadable: {e}"));
            }
            let _ = sw.reader.remove();
        }
        let (mut bytes, mut file_bytes) = (0, 0);
        let mut prefetched = false;
        for pm in self.processes.values_mut() {
            if let Some((b, f)) = inflate_process(pm, &error_file) {
                bytes += b;
                file_bytes += f;
                prefetched = true;
            }
        }
        if prefetched {
            self.shared
                .metrics
                .record_prefetch(bytes, file_bytes, woke.elapsed());
        }
    }

    /// After a REAP prefetch: has each process's platform map the pages of the prefetched set
    /// ahead (on the trap platform the application's process maps guest pages itself, and
    /// would otherwise take a fault for every run of them it touches).
    fn prefault(&self, task: &Task) {
        for (pid, res) in live_processes(task) {
            let Some(pm) = self.processes.get(&pid) else {
                continue;
            };
            if !pm.reap_wake || res.space.holder_sees_writes() {
                // Nothing to map ahead where the application reaches guest memory through the
                // runtime's own mapping (KVM: the prefetch installed the pages there).
                continue;
            }
            let set: std::collections::HashSet<u64> = pm
                .reap_set
                .iter()
                .map(|p| p.0)
                .chain(pm.reap_files.iter().map(|g| g.raw() / PAGE_SIZE))
                .collect();
            let mm = res.mm.lock().unwrap_or_else(|e| e.into_inner());
            let pages = mm.present_pages_of(|frame| set.contains(&frame));
            if let Err(e) = res.space.prefault(mm.cr3(), &pages) {
                tracing::warn!(pid, "mapping the prefetched pages ahead: {e}");
            }
        }
    }

    /// Writes the sandbox's memory out and drops it (see the module doc): every process's,
    /// one after the other. A failure stops there: the processes already deflated stay so
    /// (their pages come back on demand, nothing is lost), the failing one stays as it was.
    fn deflate(&mut self, task: &mut Task) -> Result<DeflateReport, String> {
        let start = Instant::now();
        let first = *self.first_pid.get_or_insert(task.pid);
        let live = live_processes(task);
        // With the quota in sight, every process compacts its swap: the files then hold no
        // more than the live pages.
        let mut compact = self.shared.compact_next.swap(false, Ordering::SeqCst);
        if let Some(quota) = self.swap_quota {
            let bound = Self::deflate_bound(&live, &task.group.procs.shm);
            if bound > quota {
                return Err(format!(
                    "the swap quota ({quota} bytes) could be exceeded: the sandbox holds \
                     {bound} bytes of memory to write"
                ));
            }
            let held: u64 = self
                .processes
                .values()
                .map(|pm| {
                    pm.pager
                        .read()
                        .unwrap_or_else(|e| e.into_inner())
                        .swap
                        .bytes()
                })
                .sum();
            compact |= bound.saturating_add(held) > quota;
        }
        // Processes gone since the last deflate: their files go too.
        let gone: Vec<i32> = self
            .processes
            .keys()
            .copied()
            .filter(|pid| !live.iter().any(|(p, _)| p == pid))
            .collect();
        for pid in gone {
            if let Some(pm) = self.processes.remove(&pid) {
                pm.remove_files();
            }
        }
        let mut total = DeflateReport::default();
        let mut figures = Vec::new();
        for (pid, res) in live {
            let fresh = match self.processes.remove(&pid) {
                // execve replaced the memory: start afresh (the old files describe nothing).
                Some(pm) if !Arc::ptr_eq(&pm.mem, &res.mem) => {
                    pm.remove_files();
                    None
                }
                other => other,
            };
            let mut pm = match fresh {
                Some(pm) => pm,
                None => {
                    let mem = match self.first_mem.take() {
                        Some(m) if pid == first && Arc::ptr_eq(&m, &res.mem) => m,
                        _ => res.mem.clone(),
                    };
                    let prefix = if pid == first {
                        String::new()
                    } else {
                        format!("-{pid}")
                    };
                    ProcessMemory::new(mem, prefix, self.mode)?
                }
            };
            let r = self.deflate_process(&mut pm, &res.mm, &*res.space, compact);
            self.processes.insert(pid, pm);
            let r = r.map_err(|e| format!("process {pid}: {e}"))?;
            total.free_pages += r.free_pages;
            total.file_pages += r.file_pages;
            total.zero_pages += r.zero_pages;
            total.written_pages += r.written_pages;
            total.clean_pages += r.clean_pages;
            total.carried_pages += r.carried_pages;
            total.swap_bytes += r.swap_bytes;
            total.swap_written_bytes += r.swap_written_bytes;
            total.swap_layers += r.swap_layers;
            total.compacted |= r.compacted;
            total.reap_bytes += r.reap_bytes;
            figures.push(ProcessDeflate { pid, report: r });
        }
        let shared_bytes = self
            .deflate_shared(&task.group.procs.shm)
            .map_err(|e| format!("shared memory: {e}"))?;
        total.swap_bytes += shared_bytes;
        total.swap_written_bytes += shared_bytes;
        total.took_us = start.elapsed().as_micros() as u64;
        self.shared
            .metrics
            .record_deflate(start.elapsed(), total.swap_bytes, total.reap_bytes);
        *self
            .shared
            .processes
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = figures;
        if let Err(e) = self.shared.lock_state().transition(State::Hibernated) {
            tracing::warn!("{e}");
        }
        tracing::info!(?total, "deflated");
        Ok(total)
    }

    /// Drops the runtime's mappings of shared file pages; writes the resident non-zero pages
    /// of the sandbox's anonymous shared memory to `shm.N`, then punches them out of their
    /// memfds (every VM mapping them sees the hole
    /// until the wake restores it; no thread runs meanwhile). Returns the bytes written.
    fn deflate_shared(&mut self, space: &mm::SharedSpace) -> Result<u64, String> {
        // Shared file mappings: their pages are the file's (page cache), written back by the
        // host; the runtime's mapping of them is dropped, and a touch after the wake maps
        // them again from the page cache or the disk.
        for w in space.file_windows() {
            // SAFETY: the window's own mapping; dropping a shared file mapping's pages keeps
            // their data in the file (dirty ones are written back by the host). MADV_COLD
            // first moves its page-cache pages to the inactive list: they stay cached for the
            // other sandboxes of the image (which reactivate what they use) but no longer
            // count in this one's working set (a memory cgroup's `usage - inactive_file`).
            unsafe {
                libc::madvise(w.host_base().cast(), w.size() as usize, libc::MADV_COLD);
                libc::madvise(w.host_base().cast(), w.size() as usize, libc::MADV_DONTNEED);
            }
        }
        let windows = space.anonymous_windows();
        if windows.is_empty() {
            return Ok(0);
        }
        let generation = self
            .processes
            .values()
            .map(|p| p.generation)
            .max()
            .unwrap_or(0);
        let path = self.dir.join(format!("shm.{generation}"));
        let _ = crate::swapfile::remove(&path);
        let base = platform::SHARED_GPA_BASE.raw();
        let span = (platform::SHARED_GPA_END.raw() - base) / PAGE_SIZE;
        let mut writer = SwapWriter::create(&path, span).map_err(|e| e.to_string())?;
        let mut idx: Vec<u64> = Vec::with_capacity(BATCH_PAGES);
        let mut data = vec![0u8; BATCH_PAGES * PAGE_SIZE as usize];
        let mut sink = Vec::new();
        let written = (|| -> Result<(), String> {
            for w in &windows {
                let pages = (w.size() / PAGE_SIZE) as usize;
                let mut resident = vec![0u8; pages];
                // SAFETY: the range is exactly the window's host mapping; one byte a page.
                let r = unsafe {
                    libc::mincore(
                        w.host_base().cast(),
                        w.size() as usize,
                        resident.as_mut_ptr(),
                    )
                };
                if r != 0 {
                    return Err(format!("mincore: {}", std::io::Error::last_os_error()));
                }
                for (i, r) in resident.iter().enumerate() {
                    if r & 1 == 0 {
                        continue;
                    }
                    let gpa = w.gpa().raw() + i as u64 * PAGE_SIZE;
                    let src = w
                        .ptr(Gpa(gpa), PAGE_SIZE)
                        .ok_or("a window page out of range")?;
                    let at = idx.len() * PAGE_SIZE as usize;
                    // SAFETY: `src` covers one page of the window's mapping; no vCPU runs.
                    let page = unsafe { std::slice::from_raw_parts(src, PAGE_SIZE as usize) };
                    if page.iter().all(|&b| b == 0) {
                        continue;
                    }
                    data[at..at + PAGE_SIZE as usize].copy_from_slice(page);
                    idx.push((gpa - base) / PAGE_SIZE);
                    if idx.len() == BATCH_PAGES {
                        write_batch(
                            |p| writer.write_batch(p),
                            &mut idx,
                            &data,
                            |s| PageState::Swapped { slot: s },
                            &mut sink,
                        )?;
                    }
                }
            }
            write_batch(
                |p| writer.write_batch(p),
                &mut idx,
                &data,
                |s| PageState::Swapped { slot: s },
                &mut sink,
            )?;
            Ok(())
        })();
        let bytes = u64::from(writer.pages_written()) * PAGE_SIZE;
        let finished =
            written.and_then(|()| writer.finish().map(|_| ()).map_err(|e| e.to_string()));
        let reader = finished.and_then(|()| SwapReader::open(&path).map_err(|e| e.to_string()));
        let reader = match reader {
            Ok(r) => r,
            Err(e) => {
                let _ = crate::swapfile::remove(&path);
                return Err(e);
            }
        };
        // Nothing is lost past this point: drop the memory.
        for w in &windows {
            let (file, offset) = w.file();
            // SAFETY: fallocate on the memfd the window maps, over the window's own range.
            let r = unsafe {
                libc::fallocate(
                    std::os::fd::AsRawFd::as_raw_fd(&**file),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    offset as libc::off_t,
                    w.size() as libc::off_t,
                )
            };
            if r != 0 {
                tracing::warn!(
                    "punching shared memory: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
        self.shared_swap = Some(SharedSwap { reader, windows });
        Ok(bytes)
    }

    /// Writes one process's memory out and drops it.
    fn deflate_process(
        &self,
        pm: &mut ProcessMemory,
        mm: &Arc<Mutex<mm::MemoryManager>>,
        space: &dyn platform::AddressSpace,
        force_compact: bool,
    ) -> Result<DeflateReport, String> {
        let start = Instant::now();
        // Nothing may reach a page about to be dropped but the runtime's own mapping (which
        // the userfaultfd serves): on the trap platform the application's process maps pages
        // of guest memory itself.
        space
            .evict_all()
            .map_err(|e| format!("evicting the application's mappings: {e}"))?;
        let mut report = DeflateReport::default();
        let mem = pm.mem.clone();
        let first_page = layout::RESERVED_END.raw() / PAGE_SIZE;
        let total_pages = mem.size() / PAGE_SIZE;

        let mut mm = mm.lock().unwrap_or_else(|e| e.into_inner());
        // Clean pages of read-only file mappings (program text, read-only data) are not
        // written: they are dropped, and fault back in from their file.
        let mut clean: std::collections::HashMap<u64, (Arc<std::fs::File>, u64)> = mm
            .clean_file_pages()
            .into_iter()
            .map(|c| (c.frame.raw() / PAGE_SIZE, (c.file, c.offset)))
            .collect();
        // The page-cache pages touched since the last deflate (the file part of a recorded
        // working set; the accessed bits are cleared for the next wake). Not with page-fault
        // wakes, which have no use for it (clearing the bits writes the page tables).
        let touched_files = if self.mode == WakeMode::Fault {
            Vec::new()
        } else {
            mm.take_touched_window_pages()
        };
        let mut files: Vec<pager::FilePage> = crate::own_memory::vec_in_own_arena();
        let mut pager = pm.pager.write().unwrap_or_else(|e| e.into_inner());

        // Residency of every guest page (mincore on the host mapping), read only now: the walk
        // of the page tables above may have faulted swapped page-table pages back in, and
        // with the pager's lock held no page can come back until the states are written. (A
        // snapshot taken before that walk saw those pages absent: a page brought back
        // write-protected was then taken for one the guest had dropped, and its bytes lost.)
        let mut resident = vec![0u8; total_pages as usize];
        mem.residency(Gpa(0), &mut resident)
            .map_err(|e| format!("mincore: {e}"))?;
        // A clone's memory is a checkpoint's image mapped copy-on-write until this deflate:
        // every page it holds counts as resident (read through the mapping, the image's bytes
        // or the clone's own), all written out, then the memory becomes anonymous.
        let image = mem.is_image();
        if image {
            resident.fill(1);
        }

        // The REAP working set: a fresh recording replaces the old one.
        let recorded = pager.recorder.is_active();
        let fresh = pager.recorder.stop();
        let mut record_next = pm.record_next;
        let mut reap_set = pm.reap_set.clone();
        let mut reap_files = pm.reap_files.clone();
        if self.mode != WakeMode::Fault {
            if recorded && !fresh.is_empty() {
                reap_set = fresh;
                reap_files = touched_files;
                record_next = false;
            } else if self.mode == WakeMode::Auto && pm.reap_wake {
                let residual = self.shared.metrics.residual_faults.load(Ordering::Relaxed);
                if residual >= 64 && residual as usize * 4 > reap_set.len() {
                    tracing::info!(
                        residual,
                        set = reap_set.len(),
                        "many faults outside the REAP set: re-recording"
                    );
                    record_next = true;
                }
            }
        }
        let mut in_set = vec![false; total_pages as usize];
        for p in &reap_set {
            if let Some(b) = in_set.get_mut(p.0 as usize) {
                *b = true;
            }
        }
        // Old bytes of a page that is not resident: from the previous swap or REAP file.
        fn read_old(
            pager: &PagerState,
            page: u64,
            buf: &mut [u8; PAGE_SIZE as usize],
        ) -> Result<bool, String> {
            match pager.pages.get(PageIdx(page)) {
                Ok(PageState::Swapped { slot }) => {
                    pager
                        .swap
                        .read_pages_into(PageIdx(page), slot, 1, buf)
                        .map_err(|e| e.to_string())?;
                    Ok(true)
                }
                Ok(PageState::Reap { .. }) => {
                    let old = pager.reap.as_ref().ok_or("REAP page without a REAP file")?;
                    old.read_page(PageIdx(page), buf)
                        .map_err(|e| e.to_string())?;
                    Ok(true)
                }
                Ok(PageState::File { slot }) => {
                    let fp = pager
                        .files
                        .get(slot as usize)
                        .ok_or("file page without its file")?;
                    fp.read_into(buf)?;
                    Ok(true)
                }
                _ => Ok(false),
            }
        }

        // 1. Write a new swap layer: resident non-zero pages. Pages still swapped out keep
        // their slots in the older layers, unless these are mostly dead: then every live page
        // goes into one fresh layer (a compaction).
        let generation = pm.generation + 1;
        let counts = pager.pages.counts();
        let live = counts.get(PageKind::Swapped) + counts.get(PageKind::Cached);
        let compact = force_compact || pager.swap.needs_compaction(live, total_pages);
        let base = if compact {
            0
        } else {
            u32::try_from(pager.swap.next_base()).map_err(|_| "swap slots exhausted")?
        };
        // Which pages brought back from the swap were written since (the others still match
        // their slot: see `uffd`).
        let written = if counts.get(PageKind::Cached) > 0 && !compact && space.holder_sees_writes()
        {
            // SAFETY: in bounds: guest memory is larger than the reserved chunk.
            let from = unsafe { mem.host_base().add((first_page * PAGE_SIZE) as usize) };
            Some(
                crate::uffd::written_pages(from.cast(), (total_pages - first_page) as usize)
                    .map_err(|e| format!("reading /proc/self/pagemap: {e}"))?,
            )
        } else {
            None
        };
        let path = self.file_path("swap", pm, generation);
        let mut writer = SwapWriter::create(&path, total_pages).map_err(|e| e.to_string())?;
        let mut new_states: Vec<(u64, PageState)> = crate::own_memory::vec_in_own_arena();
        let mut batch_idx: Vec<u64> = Vec::with_capacity(BATCH_PAGES);
        let mut batch_data = vec![0u8; BATCH_PAGES * PAGE_SIZE as usize];
        let mut page_buf = [0u8; PAGE_SIZE as usize];
        let flush = |writer: &mut SwapWriter,
                     idx: &mut Vec<u64>,
                     data: &[u8],
                     out: &mut Vec<(u64, PageState)>| {
            write_batch(
                |p| writer.write_batch(p),
                idx,
                data,
                |slot| PageState::Swapped { slot: base + slot },
                out,
            )
        };
        for page in first_page..total_pages {
            let gpa = Gpa(page * PAGE_SIZE);
            if mm.allocator().is_free(gpa) || in_set[page as usize] {
                continue;
            }
            if let Some((file, offset)) = clean.remove(&page) {
                // The checksum of what the page holds: from memory if resident, else kept from
                // the deflate that dropped it.
                let crc = if resident[page as usize] & 1 != 0 {
                    mem.read(gpa, &mut page_buf).map_err(|e| e.to_string())?;
                    Some(crc32c::crc32c(&page_buf))
                } else {
                    match pager.pages.get(PageIdx(page)) {
                        Ok(PageState::File { slot }) => {
                            pager.files.get(slot as usize).map(|f| f.crc)
                        }
                        _ => None,
                    }
                };
                if let Some(crc) = crc {
                    new_states.push((
                        page,
                        PageState::File {
                            slot: files.len() as u32,
                        },
                    ));
                    files.push(pager::FilePage { file, offset, crc });
                    report.file_pages += 1;
                    continue;
                }
            }
            let is_resident = resident[page as usize] & 1 != 0;
            let slot_data = batch_idx.len() * PAGE_SIZE as usize;
            if let Ok(PageState::Cached { slot }) = pager.pages.get(PageIdx(page)) {
                let unwritten = written
                    .as_ref()
                    .and_then(|w| w.get((page - first_page) as usize))
                    .is_some_and(|w| !w);
                if is_resident && unwritten {
                    new_states.push((page, PageState::Swapped { slot }));
                    report.clean_pages += 1;
                    continue;
                }
                if !is_resident {
                    // Dropped since by the guest (MADV_DONTNEED): it reads as zero.
                    new_states.push((page, PageState::Zero));
                    continue;
                }
            }
            if is_resident {
                mem.read(gpa, &mut page_buf).map_err(|e| e.to_string())?;
                if page_buf.iter().all(|&b| b == 0) {
                    new_states.push((page, PageState::Zero));
                    report.zero_pages += 1;
                    continue;
                }
                batch_data[slot_data..slot_data + PAGE_SIZE as usize].copy_from_slice(&page_buf);
                report.written_pages += 1;
            } else {
                match pager.pages.get(PageIdx(page)) {
                    Ok(PageState::Swapped { slot }) => {
                        report.carried_pages += 1;
                        if !compact {
                            continue; // it keeps its slot
                        }
                        pager
                            .swap
                            .read_pages_into(PageIdx(page), slot, 1, &mut page_buf)
                            .map_err(|e| e.to_string())?;
                        batch_data[slot_data..slot_data + PAGE_SIZE as usize]
                            .copy_from_slice(&page_buf);
                    }
                    Ok(PageState::Reap { .. } | PageState::File { .. }) => {
                        // Still in the REAP file or its mapped file, neither of which this
                        // deflate keeps for it (the REAP file is rewritten with the new set;
                        // the file-page table with this deflate's clean pages): its bytes
                        // move to the swap. (A wake that records instead of prefetching
                        // leaves untouched REAP pages where they are.)
                        if !read_old(&pager, page, &mut page_buf)? {
                            continue;
                        }
                        batch_data[slot_data..slot_data + PAGE_SIZE as usize]
                            .copy_from_slice(&page_buf);
                        report.carried_pages += 1;
                    }
                    _ => continue, // never touched, or zero: reads as zero either way
                }
            }
            batch_idx.push(page);
            if batch_idx.len() == BATCH_PAGES {
                flush(&mut writer, &mut batch_idx, &batch_data, &mut new_states)?;
            }
        }
        flush(&mut writer, &mut batch_idx, &batch_data, &mut new_states)?;
        report.swap_written_bytes = u64::from(writer.pages_written()) * PAGE_SIZE;
        report.compacted = compact;
        writer.finish().map_err(|e| e.to_string())?;
        let reader = SwapReader::open(&path).map_err(|e| e.to_string())?;

        // The REAP file: the working set's pages, contiguous, in recorded order.
        let mut reap_states: Vec<(u64, PageState)> = crate::own_memory::vec_in_own_arena();
        let reap_reader = if reap_set.is_empty() {
            None
        } else {
            let rpath = self.file_path("reap", pm, generation);
            let mut w = ReapWriter::create(&rpath, total_pages).map_err(|e| {
                let _ = std::fs::remove_file(&path);
                e.to_string()
            })?;
            let mut idx: Vec<u64> = Vec::with_capacity(BATCH_PAGES);
            let write = |w: &mut ReapWriter,
                         idx: &mut Vec<u64>,
                         data: &[u8],
                         out: &mut Vec<(u64, PageState)>| {
                write_batch(
                    |p| w.write_batch(p),
                    idx,
                    data,
                    |slot| PageState::Reap { slot },
                    out,
                )
            };
            let result = (|| -> Result<(), String> {
                for p in &reap_set {
                    let page = p.0;
                    if page < first_page
                        || page >= total_pages
                        || mm.allocator().is_free(Gpa(page * PAGE_SIZE))
                    {
                        continue;
                    }
                    let at = idx.len() * PAGE_SIZE as usize;
                    if resident[page as usize] & 1 != 0 {
                        mem.read(Gpa(page * PAGE_SIZE), &mut page_buf)
                            .map_err(|e| e.to_string())?;
                        if page_buf.iter().all(|&b| b == 0) {
                            reap_states.push((page, PageState::Zero));
                            continue;
                        }
                    } else if !read_old(&pager, page, &mut page_buf)? {
                        continue;
                    }
                    batch_data[at..at + PAGE_SIZE as usize].copy_from_slice(&page_buf);
                    idx.push(page);
                    if idx.len() == BATCH_PAGES {
                        write(&mut w, &mut idx, &batch_data, &mut reap_states)?;
                    }
                }
                write(&mut w, &mut idx, &batch_data, &mut reap_states)?;
                report.reap_bytes = u64::from(w.pages_written()) * PAGE_SIZE;
                w.finish().map(|_| ()).map_err(|e| e.to_string())
            })();
            if let Err(e) = result {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
            Some(ReapReader::open(&rpath).map_err(|e| {
                let _ = std::fs::remove_file(&path);
                e.to_string()
            })?)
        };

        // A clone's memory becomes anonymous now that every page it holds is written out
        // (a userfaultfd cannot serve a file mapping); a failure leaves it as it was.
        if image {
            if let Err(e) = mem.make_anonymous(layout::RESERVED_END) {
                let _ = reader.remove();
                if let Some(r) = &reap_reader {
                    let _ = r.remove();
                }
                return Err(format!("making the clone's memory anonymous: {e}"));
            }
        }
        // The userfaultfd registration comes before anything is dropped (without it, a
        // dropped page would read as zero); a failure here leaves the process as it was (a
        // clone's memory, already anonymous, could not come back: the sandbox stops).
        if pm.uffd.is_none() {
            match ProcessMemory::start_pager(
                &mem,
                &pm.pager,
                &self.shared.metrics,
                self.dir.join("error"),
            ) {
                Ok(u) => pm.uffd = Some(u),
                Err(e) if image => {
                    pager::fatal(&self.dir.join("error"), &format!("clone memory: {e}"))
                }
                Err(e) => {
                    let _ = reader.remove();
                    if let Some(r) = &reap_reader {
                        let _ = r.remove();
                    }
                    return Err(e);
                }
            }
        }

        // 2. Nothing can fail past this point that would lose data: drop pages.
        let runs: Vec<(Gpa, u64)> = mm.allocator().free_page_runs().collect();
        for (gpa, n) in runs {
            let _ = mem.discard(gpa, n * PAGE_SIZE);
            let _ = mm.allocator_mut().mark_zero(gpa, n);
            for p in gpa.raw() / PAGE_SIZE..gpa.raw() / PAGE_SIZE + n {
                let _ = pager.pages.set(PageIdx(p), PageState::Free);
            }
            report.free_pages += n;
        }
        for (page, st) in new_states.iter().chain(&reap_states) {
            let _ = pager.pages.set(PageIdx(*page), *st);
        }
        let mut dropped: Vec<u64> = new_states
            .iter()
            .chain(&reap_states)
            .map(|(p, _)| *p)
            .collect();
        dropped.sort_unstable();
        discard_pages(&mem, dropped.into_iter());
        if compact {
            pager.swap.remove_all();
        }
        if reader.slots() == 0 {
            let _ = reader.remove();
        } else if let Err(e) = pager.swap.push(reader) {
            // Unreachable: `needs_compaction` checked the slot space before writing.
            pager::fatal(&self.dir.join("error"), &format!("swap layer: {e}"));
        }
        // Layers no page refers to any more (their pages were written again, freed, or
        // moved to the REAP file) are removed.
        let mut referenced = vec![false; pager.swap.next_base() as usize];
        for (_, st) in pager.pages.iter() {
            if let PageState::Swapped { slot } | PageState::Cached { slot } = st {
                if let Some(r) = referenced.get_mut(slot as usize) {
                    *r = true;
                }
            }
        }
        pager
            .swap
            .retain_referenced(|slot| referenced.get(slot as usize).copied().unwrap_or(false));
        report.swap_bytes = pager.swap.bytes();
        report.swap_layers = pager.swap.layers() as u64;
        pager.files = files;
        let old_reap = std::mem::replace(&mut pager.reap, reap_reader);
        if let Some(old) = old_reap {
            let _ = old.remove();
        }
        pm.generation = generation;
        pm.reap_set = reap_set;
        pm.reap_files = reap_files;
        pm.record_next = record_next;
        drop(pager);
        drop(mm);

        report.took_us = start.elapsed().as_micros() as u64;
        Ok(report)
    }

    /// Waits (no CPU) until a connection or bytes arrive on one of the application's sockets,
    /// or an explicit wake or stop.
    fn wait_for_wake(&mut self, task: &mut Task) -> WakeReason {
        // SAFETY: epoll_create1 with a valid flag.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            tracing::error!("epoll_create1: {}", std::io::Error::last_os_error());
            return WakeReason::Explicit;
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
        let mut tables = vec![task.fds.clone()];
        for (pid, g) in task.group.procs.live_groups() {
            if pid != task.pid {
                if let Some(r) = g.resources() {
                    tables.push(r.fds);
                }
            }
        }
        let mut sockets: Vec<Arc<kernel::fd::OpenFile>> = Vec::new();
        for table in &tables {
            for (_, f) in table.iter() {
                let shared_file = sockets.iter().any(|s| Arc::ptr_eq(s, &f));
                if !paused
                    && matches!(f.kind, FileKind::Socket(_))
                    && !shared_file
                    && !trigger::sandbox_internal(f.host())
                {
                    sockets.push(f);
                }
            }
        }
        for (i, f) in sockets.iter().enumerate() {
            add(f.host().as_raw_fd(), i as u64);
        }
        loop {
            let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
            // SAFETY: valid epoll fd and output buffer.
            let n =
                unsafe { libc::epoll_wait(ep.as_raw_fd(), evs.as_mut_ptr(), evs.len() as i32, -1) };
            if n < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    if task.control.signal_pending() {
                        return WakeReason::Stop;
                    }
                    continue;
                }
                tracing::error!("epoll_wait: {}", std::io::Error::last_os_error());
                return WakeReason::Explicit;
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
                    reason = Some(if self.shared.stop.load(Ordering::SeqCst) {
                        WakeReason::Stop
                    } else {
                        WakeReason::Explicit
                    });
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
            if let Some(r) = reason {
                return r;
            }
        }
    }
}

/// Puts the deflated shared memory back (every page read and verified) before anything runs.
fn restore_shared(sw: &SharedSwap) -> Result<(), String> {
    let base = platform::SHARED_GPA_BASE.raw();
    let mut buf = [0u8; PAGE_SIZE as usize];
    for e in sw.reader.index().entries() {
        let gpa = Gpa(base + e.page().0 * PAGE_SIZE);
        let dst = sw
            .windows
            .iter()
            .find_map(|w| w.ptr(gpa, PAGE_SIZE))
            .ok_or_else(|| format!("no window holds {gpa}"))?;
        sw.reader
            .read_page(e.page(), &mut buf)
            .map_err(|e| e.to_string())?;
        // SAFETY: `dst` covers one page of a window's writable mapping; no vCPU runs yet.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), dst, PAGE_SIZE as usize) };
    }
    Ok(())
}

/// One process's part of a wake: prefetches its REAP file and its set's file pages and
/// returns the bytes of each, or starts recording its working set (None).
fn inflate_process(pm: &mut ProcessMemory, error_file: &std::path::Path) -> Option<(u64, u64)> {
    let mut pager = pm.pager.write().unwrap_or_else(|e| e.into_inner());
    pager.recorder.clear();
    pm.reap_wake = false;
    if pm.record_next {
        pager.recorder.start();
        pager.reap_wake = false;
        return None;
    }
    let uffd = pm.uffd.clone()?;
    let base = pm.mem.host_base() as u64;
    let state = &mut *pager;
    let reader = state.reap.as_ref()?;
    reader.advise_sequential();
    // The file pages of the set go to the disk first, together; waited for after the
    // memory's.
    let file_runs = crate::filereap::runs(&pm.mem, &pm.reap_files);
    crate::filereap::advise(&file_runs);
    let pages = &mut state.pages;
    let mut bytes = 0u64;
    let r = reader.read_batches(8 << 20, |batch: crate::pagefile::PageBatch<'_>| {
        for (first, data) in batch.runs() {
            let host = base + first.0 * PAGE_SIZE;
            // SAFETY: `data` holds verified page bytes; the destination run lies in guest
            // memory above the reserved chunk (REAP pages are guest pages of the map).
            let r = unsafe { uffd.copy(data.as_ptr().cast(), host as *mut _, data.len()) };
            if r.is_err() {
                // Some page of the run is present already: install page by page.
                for (k, page) in data.chunks(PAGE_SIZE as usize).enumerate() {
                    let h = host + k as u64 * PAGE_SIZE;
                    // SAFETY: as above, one page.
                    let _ =
                        unsafe { uffd.copy(page.as_ptr().cast(), h as *mut _, PAGE_SIZE as usize) };
                }
            }
            let n = data.len() as u64 / PAGE_SIZE;
            for p in first.0..first.0 + n {
                let _ = pages.set(PageIdx(p), PageState::Resident);
            }
            bytes += data.len() as u64;
        }
        Ok::<(), crate::reap::ReapError>(())
    });
    if let Err(e) = r {
        pager::fatal(error_file, &format!("REAP file unreadable or corrupt: {e}"));
    }
    let file_bytes = crate::filereap::populate(&file_runs);
    tracing::debug!(
        memory = bytes,
        files = file_bytes,
        runs = file_runs.len(),
        "REAP prefetch"
    );
    state.reap_wake = true;
    pm.reap_wake = true;
    Some((bytes, file_bytes))
}

/// Writes the batch `idx` (guest pages; their bytes packed in `data`) with `write`, records
/// each page's new state (`state(slot)`) in `out`, and empties the batch.
fn write_batch<E: std::fmt::Display>(
    write: impl FnOnce(&[(PageIdx, &[u8])]) -> Result<std::ops::Range<u32>, E>,
    idx: &mut Vec<u64>,
    data: &[u8],
    state: impl Fn(u32) -> PageState,
    out: &mut Vec<(u64, PageState)>,
) -> Result<(), String> {
    if idx.is_empty() {
        return Ok(());
    }
    let page = PAGE_SIZE as usize;
    let pages: Vec<(PageIdx, &[u8])> = idx
        .iter()
        .enumerate()
        .map(|(i, &p)| (PageIdx(p), &data[i * page..(i + 1) * page]))
        .collect();
    let slots = write(&pages).map_err(|e| e.to_string())?;
    for (i, &p) in idx.iter().enumerate() {
        out.push((p, state(slots.start + i as u32)));
    }
    idx.clear();
    Ok(())
}

/// Every live process of `task`'s sandbox with its address space, memory, descriptors and
/// platform space, `task`'s own last.
fn live_processes(task: &Task) -> Vec<(i32, kernel::task::ProcessResources)> {
    let mut live: Vec<(i32, kernel::task::ProcessResources)> = task
        .group
        .procs
        .live_groups()
        .into_iter()
        .filter(|(pid, _)| *pid != task.pid)
        .filter_map(|(pid, g)| g.resources().map(|r| (pid, r)))
        .collect();
    live.push((
        task.pid,
        kernel::task::ProcessResources {
            mm: task.mm.clone(),
            mem: task.mem.clone(),
            fds: task.fds.clone(),
            space: task.group.space(),
        },
    ));
    live
}

/// MADV_DONTNEED over the given pages, coalesced into runs.
fn discard_pages(mem: &GuestMemory, pages: impl Iterator<Item = u64>) {
    let mut run: Option<(u64, u64)> = None;
    for p in pages {
        run = match run {
            Some((s, n)) if s + n == p => Some((s, n + 1)),
            Some((s, n)) => {
                let _ = mem.discard(Gpa(s * PAGE_SIZE), n * PAGE_SIZE);
                Some((p, 1))
            }
            None => Some((p, 1)),
        };
    }
    if let Some((s, n)) = run {
        let _ = mem.discard(Gpa(s * PAGE_SIZE), n * PAGE_SIZE);
    }
}
