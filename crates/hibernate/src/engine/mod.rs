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
//! removed, nothing was dropped, and the sandbox stays hot. Errors are typed
//! ([`EngineError`], inside [`HibernateError`]).
//!
//! The engine sees the kernel only through `kernel::task::ParkedSandbox` (what the park hook
//! gets: the processes' memories and address spaces, the shared memory, stopping and resuming
//! threads, the sockets that wake it, the checkpoint export) and `TaskControl`; never a
//! `Task`.
//!
//! | File | Job |
//! |---|---|
//! | `mod.rs` | the two sides' types ([`Hibernator`], [`HibernateHandle`]), [`new`] |
//! | `handle.rs` | the control thread's requests: hibernate, checkpoint, pause, wake, stop |
//! | `park.rs` | the task's side at its park point: stop every thread, deflate, wait, inflate |
//! | `deflate.rs` | every process's memory and the shared memory written out and dropped |
//! | `process_deflate.rs` | one process's deflate: plan, write, commit |
//! | `inflate.rs` | REAP prefetch, shared memory put back, page tables prefaulted |
//! | `memory.rs` | one process's page-state map, files and userfaultfd pager |
//! | `checkpoint.rs` | a checkpoint written after a deflate; a restored sandbox's pager |
//! | `error.rs` | [`EngineError`]: what a deflate, a checkpoint or a restore's set-up met |

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

use kernel::task::TaskControl;
use platform::{Gpa, GuestMemory, PAGE_SIZE};

use crate::metrics::HibernateMetrics as Metrics;
use crate::pager::PagerState;
use crate::pagestate::{PageIdx, PageStateMap};
use crate::state::{State, StateMachine};
use crate::swapfile::SwapReader;
use crate::uffd::Uffd;

mod checkpoint;
mod deflate;
mod error;
mod families;
mod handle;
mod inflate;
mod memory;
mod park;
mod process_deflate;
mod restored;

pub use checkpoint::{
    memory_image_layers, memory_image_name, CheckpointState, Clocks, KeptSockets,
};
pub use error::EngineError;
pub use restored::{page_in, restored, restored_paged, PagedIn};

pub use memory::{is_page_file, page_files, remove_page_files};

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
    Deflate(#[source] EngineError),
    /// The sandbox was deflated but its checkpoint could not be written (nothing is left of
    /// it); the sandbox stays hibernated.
    #[error("{0}")]
    Checkpoint(#[source] EngineError),
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
    Deflate(crate::background::Priority),
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
    /// The park is in its wait for a wake (hibernated): a checkpoint sent now is written
    /// there, from the deflated state, without a wake ([`HibernateHandle::checkpoint`]).
    waiting: bool,
    command: Option<Command>,
    reply: Option<Result<DeflateReport, HibernateError>>,
}

/// State shared by the control thread's [`HibernateHandle`] and the task's [`Hibernator`].
pub struct Shared {
    /// The sandbox state machine (moved by [`Shared::transition`], which tells
    /// `state_changed`).
    pub state: Mutex<StateMachine>,
    /// Notified at every change of state, and when the sandbox is asked to stop: what
    /// [`HibernateHandle::wait_while`] waits on.
    state_changed: Condvar,
    /// Counters.
    pub metrics: Arc<Metrics>,
    mailbox: Mutex<Mailbox>,
    cv: Condvar,
    /// Held by a park request from its command to its reply: one at a time, so that each
    /// gets its own command run and its own reply (a hibernate of the keep-alive racing a
    /// checkpoint took the checkpoint's reply for its own, and the checkpoint was never written).
    park_requests: Mutex<()>,
    wake_efd: OwnedFd,
    stop: std::sync::atomic::AtomicBool,
    /// Hibernated by a pause (OCI `pause`): only an explicit wake ends it, requests wait.
    paused: std::sync::atomic::AtomicBool,
    /// A pause ended without a wake ([`HibernateHandle::unpause`]): the hibernated task's
    /// wait watches the application's sockets again instead of waking.
    rewatch: std::sync::atomic::AtomicBool,
    /// The next deflate compacts every process's swap (`torpor hibernate --compact`).
    compact_next: std::sync::atomic::AtomicBool,
    /// The pause in force began with the sandbox hibernated (a checkpoint written where it
    /// slept): [`HibernateHandle::resume`] leaves it so.
    paused_asleep: std::sync::atomic::AtomicBool,
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

    /// Moves the state machine to `to` and tells those waiting for a change; an illegal move
    /// is logged and changes nothing.
    fn transition(&self, to: State) {
        if let Err(e) = self.try_transition(to) {
            tracing::warn!("{e}");
        }
    }

    /// [`Shared::transition`], the illegal move returned instead of logged.
    fn try_transition(&self, to: State) -> Result<(), crate::state::IllegalTransition> {
        self.lock_state().transition(to)?;
        self.state_changed.notify_all();
        Ok(())
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
    /// Each family's memory as the hibernator keeps it between deflates, by the family's
    /// lowest pid at the last deflate (`families.rs`).
    processes: std::collections::BTreeMap<i32, ProcessMemory>,
    /// The sandbox's anonymous shared memory written out by the last deflate, restored in
    /// full at the next wake.
    shared_swap: Option<SharedSwap>,
    /// The most bytes the swap and REAP files may hold (`--swap-quota`).
    swap_quota: Option<u64>,
    /// The runtime's code pages go back to the host once the wait for a wake finds nothing
    /// to do (a restored sandbox: the request that woke a dormant one is often waiting).
    drop_code_when_idle: bool,
    /// The working sets a restore prefetched before its first wake ([`page_in`]): that
    /// wake has nothing left to read.
    early: Option<restored::Early>,
}

/// Shared memory (MAP_SHARED anonymous, System V) deflated: its pages in a swap file
/// (`shm.N`, pages numbered by guest-physical address from the shared-window base), the
/// windows' memory punched out of their memfds.
struct SharedSwap {
    reader: SwapReader,
    windows: Vec<Arc<platform::SharedWindow>>,
}

/// One process's memory between deflates (a family's: the processes that share it), its
/// page-state map, swap and REAP files, uffd registration, and REAP policy state.
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

/// What one process's deflate did, for `torpor stats`: a family's (the processes that share
/// frames copy-on-write deflate their one memory together), under its lowest pid.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ProcessDeflate {
    /// The process.
    pub pid: i32,
    /// The other processes whose memory this is (children forked copy-on-write), if any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sharing: Vec<i32>,
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
    type Err = UnknownWakeMode;
    fn from_str(s: &str) -> Result<WakeMode, UnknownWakeMode> {
        match s {
            "fault" => Ok(WakeMode::Fault),
            "reap" => Ok(WakeMode::Reap),
            "auto" => Ok(WakeMode::Auto),
            _ => Err(UnknownWakeMode(s.to_string())),
        }
    }
}

/// A wake mode that is none of `fault`, `reap`, `auto`.
#[derive(Debug, thiserror::Error)]
#[error("unknown wake mode {0:?}: expected fault, reap or auto")]
pub struct UnknownWakeMode(pub String);

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
    new_with_metrics(mem, control, dir, mode, Arc::new(Metrics::default()))
}

/// [`new`], its figures kept in `metrics` (where a restore's pagers count already).
fn new_with_metrics(
    mem: Arc<GuestMemory>,
    control: Arc<TaskControl>,
    dir: PathBuf,
    mode: WakeMode,
    metrics: Arc<Metrics>,
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
        state_changed: Condvar::new(),
        metrics,
        mailbox: Mutex::new(Mailbox {
            parked: false,
            waiting: false,
            command: None,
            reply: None,
        }),
        cv: Condvar::new(),
        park_requests: Mutex::new(()),
        wake_efd,
        stop: std::sync::atomic::AtomicBool::new(false),
        paused: std::sync::atomic::AtomicBool::new(false),
        rewatch: std::sync::atomic::AtomicBool::new(false),
        compact_next: std::sync::atomic::AtomicBool::new(false),
        paused_asleep: std::sync::atomic::AtomicBool::new(false),
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
            if st.transition(to).is_ok() {
                shared.state_changed.notify_all();
            }
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
        drop_code_when_idle: false,
        early: None,
    };
    Ok((hib, HibernateHandle { shared, control }))
}
