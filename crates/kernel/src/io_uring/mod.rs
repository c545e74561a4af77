//! io_uring instances (io_uring_setup(2)): the submission and completion rings the
//! application shares with the kernel, the kernel's trusted side of them, what is registered
//! (buffers, files, an eventfd), and the requests waiting for a file, a time or their turn.
//!
//! The rings are host memory of the sandbox ([`mm::SharedObject`]s, anonymous, `memfd`s):
//! the application maps them from the descriptor (`syscalls::sys_io_uring`'s mmap), so its
//! stores and the kernel's loads are the same bytes, whichever process of the sandbox (a
//! fork's child shares the descriptor) maps them. The kernel reaches them through the
//! objects' windows, never through a process's page tables: an application that unmaps or
//! write-protects its rings changes nothing for the kernel. Two objects, as Linux's two
//! regions: the rings (`IORING_OFF_SQ_RING` and `IORING_OFF_CQ_RING` map the same one) and the
//! submission entries (`IORING_OFF_SQES`); a mapping longer than its region faults past the
//! end, as on Linux. [`layout`] draws them.
//!
//! Every word the application writes is untrusted: the kernel keeps its own submission head
//! and completion tail, reads the application's submission tail and completion head only to
//! count (a count is capped at the queue's size), masks every index, and copies each
//! submission entry once before looking at it (`IORING_FEAT_SUBMIT_STABLE`).
//!
//! A completion that finds the completion queue full waits in an overflow list (flushed as
//! the application consumes; `IORING_SQ_CQ_OVERFLOW` meanwhile: `IORING_FEAT_NODROP`), up to
//! [`MAX_OVERFLOW`] entries; past that it is dropped and counted in `cq_overflow`, and the
//! next io_uring_enter(2) that waits is EBADR, as Linux answers when its overflow allocation
//! fails.
//!
//! The descriptor's host file is an epoll instance holding one eventfd, raised when a
//! completion is posted and lowered when an io_uring_enter(2) finds the completion queue
//! empty: poll(2) and epoll(7) on the descriptor see it readable when completions wait, and a
//! read(2) or write(2) of it is EINVAL, as Linux's (which has neither).
//!
//! Requests run in io_uring_enter(2), in the caller's context (`syscalls::sys_io_uring`);
//! one that must wait (a read of an empty pipe, a poll, a timeout, its turn after a drain)
//! stays [`Pending`] and runs in a later io_uring_enter(2) of the same process, the wait for
//! completions included.
//!
//! Locks: [`IoUring::sq`] (one submitter at a time) is taken before the `MemoryManager` (an
//! entry's checks read the application's memory); [`IoUring::pending`] before the completion
//! queue's lock (a counting timeout reads the count); that one and [`IoUring::registered`]
//! are taken alone. No lock is held while a request runs.

pub mod layout;

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use abi::io_uring::{Cqe, Sqe, IORING_CQ_EVENTFD_DISABLED, IORING_SQ_CQ_OVERFLOW};
use mm::SharedObject;

use crate::fd::host;
use layout::{Geometry, CQ_FLAGS, CQ_HEAD, CQ_OVERFLOW, CQ_TAIL, SQ_DROPPED, SQ_FLAGS, SQ_HEAD};

/// Most completions kept in the overflow list before they are dropped.
pub const MAX_OVERFLOW: usize = 65536;

/// Why an instance could not be made, or its rings read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// The host memory behind the rings failed (EFAULT).
    #[error("the rings are not accessible")]
    Fault,
    /// A host call making the instance failed (memfd, eventfd, epoll: the host's errno).
    #[error("making the instance: {0}")]
    Host(abi::Errno),
}

/// The memory of an instance's two regions (the sandbox's shared objects; a buffer in tests).
pub trait RingMemory: Send + Sync {
    /// The `u32` at `at` in the rings (acquire).
    ///
    /// # Errors
    /// [`RingError::Fault`].
    fn load(&self, at: u64) -> Result<u32, RingError>;
    /// Stores `v` at `at` in the rings (release).
    ///
    /// # Errors
    /// [`RingError::Fault`].
    fn store(&self, at: u64, v: u32) -> Result<(), RingError>;
    /// Writes `bytes` at `at` in the rings.
    ///
    /// # Errors
    /// [`RingError::Fault`].
    fn write(&self, at: u64, bytes: &[u8]) -> Result<(), RingError>;
    /// Reads the submission entries region at `at` into `buf`.
    ///
    /// # Errors
    /// [`RingError::Fault`].
    fn read_sqes(&self, at: u64, buf: &mut [u8]) -> Result<(), RingError>;
}

/// The two regions of a real instance.
pub struct SharedRings {
    /// The rings region.
    pub rings: Arc<SharedObject>,
    /// The submission entries region.
    pub sqes: Arc<SharedObject>,
}

impl RingMemory for SharedRings {
    fn load(&self, at: u64) -> Result<u32, RingError> {
        self.rings.load_u32(at).map_err(|_| RingError::Fault)
    }
    fn store(&self, at: u64, v: u32) -> Result<(), RingError> {
        self.rings.store_u32(at, v).map_err(|_| RingError::Fault)
    }
    fn write(&self, at: u64, bytes: &[u8]) -> Result<(), RingError> {
        self.rings
            .write_bytes(at, bytes)
            .map_err(|_| RingError::Fault)
    }
    fn read_sqes(&self, at: u64, buf: &mut [u8]) -> Result<(), RingError> {
        self.sqes.read_bytes(at, buf).map_err(|_| RingError::Fault)
    }
}

/// One submission entry fetched from the queue.
#[derive(Debug, Clone, Copy)]
pub enum Fetched {
    /// The entry (its first 64 bytes: torpor runs no opcode that uses the rest of a 128-byte
    /// one).
    Entry(Sqe),
    /// The index array named no entry: dropped and counted in `sq_dropped`; submission
    /// stops there, as on Linux.
    Dropped,
}

/// The kernel's side of the submission queue.
#[derive(Debug, Default)]
pub struct SqState {
    /// The next entry to consume (Linux's `cached_sq_head`).
    head: u32,
    /// Entries dropped for a bad index.
    dropped: u32,
}

/// The kernel's side of the completion queue.
#[derive(Debug, Default)]
struct CqState {
    /// Where the next completion goes (trusted; the ring's `cq.tail` is written from it).
    tail: u32,
    /// Completions waiting for room.
    overflow: VecDeque<Cqe>,
    /// Completions dropped past [`MAX_OVERFLOW`] (the ring's `cq_overflow`).
    lost: u32,
    /// A completion was lost since an io_uring_enter(2) last said so (EBADR).
    lost_unreported: bool,
    /// Completions of requests other than timeouts posted so far (a counting timeout's
    /// clock).
    completions: u64,
    /// The flags word of the submission ring, as the kernel keeps it.
    sq_flags: u32,
}

/// What a pending request waits for (`F`: the kernel's open file, `crate::fd::OpenFile`).
#[derive(Debug)]
pub enum Wait<F> {
    /// Poll events on a file (a read of an empty pipe, POLL_ADD...).
    Ready {
        /// The file (kept open while the request waits, as Linux holds it).
        file: Arc<F>,
        /// `POLL*` events.
        events: i16,
    },
    /// Poll events on an io_uring descriptor (held weakly: two instances waiting on each
    /// other, or one on itself, must not keep each other alive; the request is cancelled
    /// once the descriptor is closed).
    ReadyWeak {
        /// The instance's open file.
        file: std::sync::Weak<F>,
        /// `POLL*` events.
        events: i16,
    },
    /// Its turn: no earlier pending request (an `IOSQE_IO_DRAIN` request, or one submitted
    /// after it).
    Order,
    /// A counting timeout: until this many completions were posted (`completions`).
    Count(u64),
    /// Only its deadline (a timeout).
    Never,
    /// Nothing: it runs at the next look (a request a park interrupted).
    Again,
}

/// A request that could not complete when it was submitted, and the rest of its link chain.
#[derive(Debug)]
pub struct Pending<F> {
    /// Its identity in the instance.
    pub id: u64,
    /// The process that submitted it: only that process's threads run it (its buffers are
    /// that process's memory).
    pub pid: i32,
    /// The waiting request first, then the requests linked after it.
    pub chain: VecDeque<Sqe>,
    /// Whether the chain failed already (its rest completes with ECANCELED).
    pub failed: bool,
    /// What the first request waits for.
    pub wait: Wait<F>,
    /// When it stops waiting: a timeout's expiry, or a linked timeout's.
    pub deadline: Option<Instant>,
    /// An `IOSQE_IO_DRAIN` request: every later one waits for it.
    pub blocks_later: bool,
    /// For a multishot poll: the io_uring_enter(2) call it last completed in.
    pub fired_in: u64,
}

/// What is registered with io_uring_register(2).
#[derive(Debug)]
pub struct Registered<F> {
    /// Fixed buffers (`IORING_REGISTER_BUFFERS`): address and length, in the registering
    /// process's memory (`None` for an empty slot).
    pub buffers: Vec<Option<(u64, u64)>>,
    /// Fixed files (`IORING_REGISTER_FILES`), `None` for an empty slot.
    pub files: Option<Vec<Option<Arc<F>>>>,
    /// The eventfd signalled on completions (a duplicate of its host descriptor: it stays
    /// registered when the application closes it, as on Linux), and whether only for those
    /// that did not complete inline (`IORING_REGISTER_EVENTFD_ASYNC`).
    pub eventfd: Option<(Arc<OwnedFd>, bool)>,
    /// The async workers' limits (`IORING_REGISTER_IOWQ_MAX_WORKERS`): bounded, unbounded.
    pub max_workers: [u32; 2],
}

impl<F> Default for Registered<F> {
    fn default() -> Self {
        Registered {
            buffers: Vec::new(),
            files: None,
            eventfd: None,
            max_workers: [0; 2],
        }
    }
}

/// One io_uring instance (Linux's `struct io_ring_ctx`), shared by the descriptors of its
/// open file; `F` is the kernel's open file (`crate::fd::OpenFile`), which requests wait on
/// and which can be registered.
pub struct IoUring<F> {
    /// `IORING_SETUP_*` flags it was created with.
    pub flags: u32,
    /// Its sizes.
    pub geometry: Geometry,
    /// The thread group of the task that created it (`IORING_SETUP_SINGLE_ISSUER`'s
    /// submitter).
    pub creator: i32,
    mem: Box<dyn RingMemory>,
    /// The regions, for mmap(2).
    pub rings: Arc<SharedObject>,
    /// The submission entries, for mmap(2).
    pub sqes: Arc<SharedObject>,
    /// The submission queue's kernel side; held while entries are fetched (one submitter at
    /// a time, Linux's `uring_lock`).
    pub sq: Mutex<SqState>,
    cq: Mutex<CqState>,
    /// Requests waiting, in submission order.
    pub pending: Mutex<Vec<Pending<F>>>,
    /// What is registered.
    pub registered: Mutex<Registered<F>>,
    /// An `IOSQE_CQE_SKIP_SUCCESS` was seen: `IOSQE_IO_DRAIN` is EOPNOTSUPP from then on.
    pub drain_disabled: std::sync::atomic::AtomicBool,
    /// The eventfd behind the descriptor's readiness (raised while completions wait).
    ready: OwnedFd,
    /// An eventfd raised at each completion or new pending request: waiters poll it.
    wake: OwnedFd,
    /// Bumped at each completion or new pending request.
    generation: AtomicU64,
    /// Counts io_uring_enter(2) calls (multishot polls complete once per call).
    enters: AtomicU64,
    next_id: AtomicU64,
}

impl<F> std::fmt::Debug for IoUring<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "IoUring(sq {} cq {})",
            self.geometry.sq_entries, self.geometry.cq_entries
        )
    }
}

/// A new instance's regions and host descriptors.
struct Parts {
    /// The rings region.
    pub rings: Arc<SharedObject>,
    /// The submission entries region.
    pub sqes: Arc<SharedObject>,
    /// The readiness eventfd (non-blocking), the epoll instance's member.
    pub ready: OwnedFd,
    /// The waiters' eventfd (non-blocking).
    pub wake: OwnedFd,
}

impl<F> IoUring<F> {
    /// Makes an instance of `geometry` whose regions are anonymous memory of `space`, created
    /// with setup `flags` by thread `creator`, its submission ring's flags `sq_flags`; and the
    /// host epoll instance its descriptor is (see the module's doc).
    ///
    /// # Errors
    /// [`RingError::Host`] if a host object cannot be made; [`RingError::Fault`] if the
    /// rings cannot be written.
    pub fn create(
        space: &Arc<mm::SharedSpace>,
        flags: u32,
        geometry: Geometry,
        creator: i32,
        sq_flags: u32,
    ) -> Result<(IoUring<F>, OwnedFd), RingError> {
        let object = |len| {
            space
                .anonymous(len, "io_uring")
                .map_err(|e| RingError::Host(abi::Errno::from_io(&e)))
        };
        let parts = Parts {
            rings: object(geometry.rings_len)?,
            sqes: object(geometry.sqes_len)?,
            ready: host::eventfd(0, libc::EFD_NONBLOCK).map_err(RingError::Host)?,
            wake: host::eventfd(0, libc::EFD_NONBLOCK).map_err(RingError::Host)?,
        };
        let ep = host::epoll_create().map_err(RingError::Host)?;
        let ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 0,
        };
        host::epoll_ctl(ep.as_fd(), libc::EPOLL_CTL_ADD, parts.ready.as_fd(), ev)
            .map_err(RingError::Host)?;
        Ok((IoUring::new(flags, geometry, creator, parts, sq_flags)?, ep))
    }

    /// An instance of `geometry` over `parts`, its ring header written (masks, sizes, the
    /// submission ring's flags).
    fn new(
        flags: u32,
        geometry: Geometry,
        creator: i32,
        parts: Parts,
        sq_flags: u32,
    ) -> Result<IoUring<F>, RingError> {
        let mem: Box<dyn RingMemory> = Box::new(SharedRings {
            rings: parts.rings.clone(),
            sqes: parts.sqes.clone(),
        });
        use layout::{CQ_ENTRIES, CQ_MASK, SQ_ENTRIES, SQ_MASK};
        mem.store(SQ_MASK, geometry.sq_entries - 1)?;
        mem.store(CQ_MASK, geometry.cq_entries - 1)?;
        mem.store(SQ_ENTRIES, geometry.sq_entries)?;
        mem.store(CQ_ENTRIES, geometry.cq_entries)?;
        mem.store(SQ_FLAGS, sq_flags)?;
        Ok(IoUring {
            flags,
            geometry,
            creator,
            mem,
            rings: parts.rings,
            sqes: parts.sqes,
            sq: Mutex::new(SqState::default()),
            cq: Mutex::new(CqState {
                sq_flags,
                ..CqState::default()
            }),
            pending: Mutex::new(Vec::new()),
            registered: Mutex::new(Registered::default()),
            drain_disabled: std::sync::atomic::AtomicBool::new(false),
            ready: parts.ready,
            wake: parts.wake,
            generation: AtomicU64::new(0),
            enters: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
        })
    }

    /// Locks the submission queue (for [`fetch`](Self::fetch)).
    pub fn lock_sq(&self) -> MutexGuard<'_, SqState> {
        self.sq.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Locks the pending requests.
    pub fn lock_pending(&self) -> MutexGuard<'_, Vec<Pending<F>>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Locks what is registered.
    pub fn lock_registered(&self) -> MutexGuard<'_, Registered<F>> {
        self.registered.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_cq(&self) -> MutexGuard<'_, CqState> {
        self.cq.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Entries the application has queued and the kernel not consumed (at most the queue's
    /// size, whatever the application's tail says).
    ///
    /// # Errors
    /// [`RingError::Fault`].
    pub fn queued(&self, sq: &SqState) -> Result<u32, RingError> {
        let tail = self.mem.load(layout::SQ_TAIL)?;
        Ok(tail.wrapping_sub(sq.head).min(self.geometry.sq_entries))
    }

    /// Consumes the next queued entry (the caller checked [`queued`](Self::queued)); the
    /// ring's head moves at [`commit`](Self::commit).
    ///
    /// # Errors
    /// [`RingError::Fault`].
    pub fn fetch(&self, sq: &mut SqState) -> Result<Fetched, RingError> {
        let g = &self.geometry;
        let slot = sq.head & (g.sq_entries - 1);
        sq.head = sq.head.wrapping_add(1);
        let index = match g.sq_array {
            Some(array) => self.mem.load(array + 4 * u64::from(slot))?,
            None => slot,
        };
        if index >= g.sq_entries {
            sq.dropped = sq.dropped.wrapping_add(1);
            self.mem.store(SQ_DROPPED, sq.dropped)?;
            return Ok(Fetched::Dropped);
        }
        let mut raw = [0u8; std::mem::size_of::<Sqe>()];
        self.mem.read_sqes(g.sqe_at(index), &mut raw)?;
        Ok(Fetched::Entry(
            abi::pod::from_bytes(&raw).ok_or(RingError::Fault)?,
        ))
    }

    /// Publishes the submission head: the consumed entries are the application's again.
    ///
    /// # Errors
    /// [`RingError::Fault`].
    pub fn commit(&self, sq: &SqState) -> Result<(), RingError> {
        self.mem.store(SQ_HEAD, sq.head)
    }

    /// Posts a completion (to the overflow list if the queue is full); `inline` for a request
    /// that completed in the call that submitted it (an eventfd registered with
    /// `IORING_REGISTER_EVENTFD_ASYNC` is signalled only for the others). `counts` is false
    /// for a timeout's own completion.
    pub fn post(&self, cqe: Cqe, inline: bool, counts: bool) {
        {
            let mut cq = self.lock_cq();
            if counts {
                cq.completions += 1;
            }
            if let Err(e) = self.flush(&mut cq) {
                tracing::debug!("io_uring: flushing the overflow list: {e}");
            }
            let stored = cq.overflow.is_empty() && self.store_cqe(&mut cq, &cqe).unwrap_or(false);
            if !stored {
                if cq.overflow.len() < MAX_OVERFLOW {
                    cq.overflow.push_back(cqe);
                } else {
                    cq.lost = cq.lost.wrapping_add(1);
                    cq.lost_unreported = true;
                    let _ = self.mem.store(CQ_OVERFLOW, cq.lost);
                }
                self.set_sq_flag(&mut cq, IORING_SQ_CQ_OVERFLOW, true);
            }
        }
        host::eventfd_signal(self.ready.as_fd());
        self.notify();
        let eventfd = self.lock_registered().eventfd.clone();
        if let Some((efd, async_only)) = eventfd {
            let disabled = self.mem.load(CQ_FLAGS).unwrap_or(0) & IORING_CQ_EVENTFD_DISABLED != 0;
            if !(disabled || async_only && inline) {
                host::eventfd_signal(efd.as_fd());
            }
        }
    }

    /// Writes `cqe` in the next slot if there is room: whether it was.
    fn store_cqe(&self, cq: &mut CqState, cqe: &Cqe) -> Result<bool, RingError> {
        let head = self.mem.load(CQ_HEAD)?;
        if cq.tail.wrapping_sub(head) >= self.geometry.cq_entries {
            return Ok(false);
        }
        let at = self.geometry.cqe_at(cq.tail);
        self.mem.write(at, abi::pod::as_bytes(cqe))?;
        if self.geometry.cqe_size > 16 {
            self.mem.write(at + 16, &[0u8; 16])?;
        }
        cq.tail = cq.tail.wrapping_add(1);
        self.mem.store(CQ_TAIL, cq.tail)?;
        Ok(true)
    }

    /// Moves overflowed completions into the queue while there is room.
    fn flush(&self, cq: &mut CqState) -> Result<(), RingError> {
        while let Some(c) = cq.overflow.front().copied() {
            if !self.store_cqe(cq, &c)? {
                return Ok(());
            }
            cq.overflow.pop_front();
        }
        self.set_sq_flag(cq, IORING_SQ_CQ_OVERFLOW, false);
        Ok(())
    }

    fn set_sq_flag(&self, cq: &mut CqState, flag: u32, on: bool) {
        let new = if on {
            cq.sq_flags | flag
        } else {
            cq.sq_flags & !flag
        };
        if new != cq.sq_flags {
            cq.sq_flags = new;
            let _ = self.mem.store(SQ_FLAGS, new);
        }
    }

    /// Flushes the overflow list and returns the completions the application has not
    /// consumed (its head read back, the count capped at the queue's size plus the
    /// overflow); lowers the descriptor's readiness when there are none. Also whether a
    /// completion was lost since last asked (taken: io_uring_enter(2) reports it once).
    pub fn available(&self, take_lost: bool) -> (u32, bool) {
        let mut cq = self.lock_cq();
        let _ = self.flush(&mut cq);
        let head = self.mem.load(CQ_HEAD).unwrap_or(cq.tail);
        let in_ring = cq.tail.wrapping_sub(head).min(self.geometry.cq_entries);
        let n = in_ring.saturating_add(cq.overflow.len() as u32);
        let lost = cq.lost_unreported;
        if take_lost {
            cq.lost_unreported = false;
        }
        if n == 0 {
            drain(self.ready.as_fd());
        }
        (n, lost)
    }

    /// Completions of requests other than timeouts posted so far.
    pub fn completions(&self) -> u64 {
        self.lock_cq().completions
    }

    /// Wakes the waiters (a completion, a new pending request).
    pub fn notify(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        host::eventfd_signal(self.wake.as_fd());
    }

    /// The waiters' generation (changes at each [`notify`](Self::notify)).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The eventfd waiters poll, and lowers it (the caller then checks the generation).
    pub fn wake_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// Lowers the waiters' eventfd.
    pub fn clear_wake(&self) {
        drain(self.wake.as_fd());
    }

    /// Counts an io_uring_enter(2) call; its number.
    pub fn enter(&self) -> u64 {
        self.enters.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The number of the last io_uring_enter(2) call.
    pub fn enter_count(&self) -> u64 {
        self.enters.load(Ordering::SeqCst)
    }

    /// A new pending request's identity.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::SeqCst)
    }
}

/// Lowers a non-blocking eventfd.
fn drain(fd: std::os::fd::BorrowedFd<'_>) {
    host::eventfd_drain(fd);
}

#[cfg(test)]
mod tests;
