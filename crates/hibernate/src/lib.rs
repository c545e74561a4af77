//! Hibernate mode, the parts that need no KVM: the sandbox state machine, the page-state
//! map of guest-physical memory, the checksummed swap and REAP files, per-sandbox state
//! directories, and the counters `torpor stats` prints.
//!
//! Module map:
//!
//! | module | job |
//! |---|---|
//! | [`state`] | `State` and the checked, timed, logged `StateMachine` |
//! | [`pagestate`] | `PageIdx`; `PageStateMap`: where each guest page lives (resident, free, zero, swap slot, REAP slot) |
//! | [`pagefile`] | the on-disk format shared by swap and REAP files: header, 4 KiB slots, crc32c index, trailer |
//! | [`swapfile`] | `SwapWriter` / `SwapReader`: one swap file |
//! | [`swapstore`] | `SwapStore`: a process's swap files of successive deflates as layers over one slot space |
//! | [`reap`] | `WorkingSetRecorder`, `ReapWriter` / `ReapReader`: record and prefetch |
//! | [`snapshot`] | the checkpoint format: enveloped manifest, state and blobs, page files; every check before a restore |
//! | [`metrics`] | `HibernateMetrics` atomics and their JSON snapshot |
//! | [`background`] | the host priority of work nobody waits for (a dormancy's checkpoint, and the deflate before it) |
//! | [`engine`] | deflate and the wait for a wake, run by the parked task; the control side's handle |
//! | [`pager`] | the userfaultfd thread: page-fault swap-in |
//! | [`uffd`] | `Uffd`: the userfaultfd calls the pager makes (create, register, copy, zeropage, read an event) |
//!
//! Deflate and inflate ([`engine`], [`pager`]) are built on these pieces: deflate walks the page-state map,
//! writes runs with [`SwapWriter::write_batch`] / [`ReapWriter::write_batch`], and records
//! slots with [`PageStateMap::set_range`]; a fault looks the page up in the map and reads it
//! with [`SwapReader::read_page`] (every page is checksum-verified first; a damaged or
//! truncated file is an error, never wrong bytes); a REAP wake streams
//! [`ReapReader::read_batches`].
//!
//! Locks: the pieces (`StateMachine`, `PageStateMap`, `WorkingSetRecorder`) are plain data,
//! their readers `Sync` (positioned reads only), `HibernateMetrics` lock-free. The [`engine`]
//! owns the crate's locks: the state machine (`Mutex`, with a `Condvar` for waiters), the
//! mailbox between the control thread and the park point (`Mutex` + `Condvar`), the list of
//! deflated processes (`Mutex`) and the pager state (`RwLock`: page-state map, swap and REAP
//! readers, working-set recorder), which the `uffd` thread takes alone. Their order with the
//! kernel's locks is in `docs/ARCHITECTURE.md` ("Locks").

pub mod background;
pub mod engine;
pub mod filereap;
pub mod metrics;
pub mod pagefile;
pub mod pager;
pub mod pagestate;
pub mod reap;
pub mod snapshot;
pub mod state;
pub mod swapfile;
pub mod swapstore;
pub mod trigger;
pub mod uffd;

mod own_memory;

#[cfg(test)]
mod testutil;

pub use metrics::{HibernateMetrics, MetricsSnapshot};
pub use pagefile::{PageFileError, WriteOptions};
pub use pagestate::{
    PageCounts, PageIdx, PageKind, PageRun, PageState, PageStateError, PageStateMap,
};
pub use reap::{ReapError, ReapReader, ReapWriter, RecordOutcome, WorkingSetRecorder};
pub use state::{IllegalTransition, State, StateMachine, StateSnapshot, Transition};
pub use swapfile::{SwapError, SwapIndex, SwapReader, SwapWriter};
pub use swapstore::SwapStore;
