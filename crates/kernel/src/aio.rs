//! Linux native AIO contexts (io_setup(2)): each process's table of contexts and their
//! completion rings, and the sandbox's count of requested events (`/proc/sys/fs/aio-nr`,
//! bounded by `aio-max-nr`).
//!
//! As on Linux (`fs/aio.c`), a context is a ring mapped into the process, and the ring's
//! address is the context's id. libaio's `io_getevents` reads completions from the ring
//! itself when the header's magic is right, so the ring is real and kept as Linux keeps it:
//!
//! ```text
//!   ctx id ─► +0   id  nr  head  tail  magic  compat_features  incompat_features  hdr_len
//!             +32  struct io_event [nr]      (slot i at 32 + 32·i)
//! ```
//!
//! `tail` is where the kernel puts the next completion (its trusted copy is here, the
//! header's is written after each completion); `head` is the next one to consume, advanced
//! by io_getevents(2) or by the application itself, and read back from the ring. One slot
//! stays empty, so `nr - 1` events (completed and not yet consumed, or being submitted)
//! fit: io_submit(2) is EAGAIN past that.
//!
//! Requests complete while io_submit runs (Linux does the same for buffered files: only
//! `O_DIRECT` I/O on block-backed files goes on after the call), so nothing is ever in
//! flight once the call returns and io_cancel(2) finds nothing to cancel.
//!
//! The ring is ordinary private anonymous memory of the process (named `/[aio] (deleted)`,
//! as Linux's shows in `/proc/PID/maps`), written and read through the usual user copies:
//! an application that unmaps, moves or write-protects its ring (Linux would go on using
//! the pages it pinned) gets EFAULT from the calls that need the ring. A fork's child has no
//! context, as on Linux, and keeps a copy of the parent's rings (Linux's child shares their
//! pages, the ring being a `MAP_SHARED` mapping there); the contexts end with the process
//! and at execve. A checkpoint refuses a process that has contexts (`checkpoint::export`);
//! hibernation keeps them, the ring being the process's memory.
//!
//! Locks: a process's table ([`AioContexts`]) is taken before its `MemoryManager` (the ring
//! is read and written with the table held); no lock is held across a request's I/O.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use abi::aio::{
    AioRingHeader, IoEvent, AIO_RING_COMPAT_FEATURES, AIO_RING_INCOMPAT_FEATURES, AIO_RING_MAGIC,
};
use platform::{Gva, PAGE_SIZE};

/// The default and only value of `/proc/sys/fs/aio-max-nr` (Linux's default; a container's
/// `/proc/sys` is read-only).
pub const AIO_MAX_NR: u64 = 65536;

/// Bytes of the ring header (`struct aio_ring`).
const HEADER_LEN: u64 = 32;
/// Bytes of one `struct io_event`.
const EVENT_LEN: u64 = 32;
/// Linux's cap on the doubled event count (`0x10000000 / sizeof(struct io_event)`).
const MAX_DOUBLED_EVENTS: u64 = 0x1000_0000 / EVENT_LEN;
/// Offset of `head` in the header.
const HEAD_AT: u64 = 8;
/// Offset of `tail` in the header.
const TAIL_AT: u64 = 12;

/// Why an AIO operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AioError {
    /// More events than a ring may hold (EINVAL).
    #[error("too many events for a ring")]
    TooLarge,
    /// The sandbox's `aio-max-nr` would be exceeded, or no events were asked (EAGAIN).
    #[error("aio-max-nr reached")]
    NoRoom,
    /// The ring has no free slot for one more request (EAGAIN).
    #[error("the completion ring is full")]
    RingFull,
    /// The ring's memory cannot be read or written (EFAULT).
    #[error("the ring is not accessible")]
    Fault,
}

/// The user memory a ring lives in (the process's address space; a buffer in tests).
pub trait RingMemory {
    /// Reads `buf.len()` bytes at `at`.
    ///
    /// # Errors
    /// [`AioError::Fault`] for memory that cannot be read.
    fn read(&self, at: Gva, buf: &mut [u8]) -> Result<(), AioError>;
    /// Writes `buf` at `at`.
    ///
    /// # Errors
    /// [`AioError::Fault`] for memory that cannot be written.
    fn write(&self, at: Gva, buf: &[u8]) -> Result<(), AioError>;
}

/// The size of a context's ring for io_setup(`nr_events`), computed as Linux's
/// `ioctx_alloc` and `aio_setup_ring` do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingGeometry {
    /// What the caller asked for: counted against `aio-max-nr`.
    pub max_reqs: u32,
    /// Slots in the ring (the header's `nr`): the request doubled, at least 4 per CPU,
    /// plus 2, rounded up to whole pages.
    pub nr: u32,
    /// Bytes mapped (whole pages).
    pub len: u64,
}

impl RingGeometry {
    /// The ring for `nr_events` (not zero) on a machine of `cpus` CPUs, under `max_nr`.
    ///
    /// # Errors
    /// [`AioError::TooLarge`] past Linux's cap; [`AioError::NoRoom`] when the request alone
    /// is over `max_nr` (or doubles to nothing, as Linux's unsigned arithmetic does).
    pub fn for_request(nr_events: u32, cpus: u32, max_nr: u64) -> Result<RingGeometry, AioError> {
        // Linux's own unsigned arithmetic, wrap included.
        let doubled = nr_events.max(cpus.saturating_mul(4)).wrapping_mul(2);
        if u64::from(doubled) > MAX_DOUBLED_EVENTS {
            return Err(AioError::TooLarge);
        }
        if doubled == 0 || u64::from(nr_events) > max_nr {
            return Err(AioError::NoRoom);
        }
        let slots = u64::from(doubled) + 2;
        let len = (HEADER_LEN + EVENT_LEN * slots).next_multiple_of(PAGE_SIZE);
        let nr = (len - HEADER_LEN) / EVENT_LEN;
        Ok(RingGeometry {
            max_reqs: nr_events,
            nr: u32::try_from(nr).map_err(|_| AioError::TooLarge)?,
            len,
        })
    }
}

/// One context (Linux's `struct kioctx`).
#[derive(Debug)]
pub struct Context {
    /// Its index in the process's table (the header's `id`).
    pub index: u32,
    /// The ring's address: the context's id.
    pub ring: Gva,
    /// The ring's size.
    pub geometry: RingGeometry,
    /// Where the next completion goes (the trusted copy of the header's `tail`).
    tail: u32,
    /// Slots taken by requests being submitted, not yet completed.
    reserved: u32,
}

impl Context {
    /// A context whose ring is mapped at `ring`.
    pub fn new(index: u32, ring: Gva, geometry: RingGeometry) -> Context {
        Context {
            index,
            ring,
            geometry,
            tail: 0,
            reserved: 0,
        }
    }

    /// The ring's header as io_setup leaves it.
    pub fn initial_header(&self) -> AioRingHeader {
        AioRingHeader {
            id: self.index,
            nr: self.geometry.nr,
            head: 0,
            tail: 0,
            magic: AIO_RING_MAGIC,
            compat_features: AIO_RING_COMPAT_FEATURES,
            incompat_features: AIO_RING_INCOMPAT_FEATURES,
            header_length: HEADER_LEN as u32,
        }
    }

    fn nr(&self) -> u32 {
        self.geometry.nr
    }

    fn word(&self, mem: &dyn RingMemory, at: u64) -> Result<u32, AioError> {
        let mut b = [0u8; 4];
        mem.read(self.ring.add(at), &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// The ring's `head` as the application left it, within the ring.
    fn head(&self, mem: &dyn RingMemory) -> Result<u32, AioError> {
        Ok(self.word(mem, HEAD_AT)? % self.nr())
    }

    /// Completions in the ring not yet consumed.
    fn unconsumed(&self, head: u32) -> u32 {
        (self.tail + self.nr() - head) % self.nr()
    }

    /// Takes a slot for a request about to be submitted.
    ///
    /// # Errors
    /// [`AioError::RingFull`] when the completed, unconsumed events and the requests being
    /// submitted fill every slot but one; [`AioError::Fault`] if the ring cannot be read.
    pub fn reserve(&mut self, mem: &dyn RingMemory) -> Result<(), AioError> {
        let used = self.unconsumed(self.head(mem)?) + self.reserved;
        if used + 1 >= self.nr() {
            return Err(AioError::RingFull);
        }
        self.reserved += 1;
        Ok(())
    }

    /// Gives back a slot [`reserve`](Self::reserve) took, for a request that failed.
    pub fn unreserve(&mut self) {
        self.reserved = self.reserved.saturating_sub(1);
    }

    /// Puts a reserved request's completion in the ring and advances `tail`.
    ///
    /// # Errors
    /// [`AioError::Fault`] if the ring cannot be written (the completion is lost).
    pub fn complete(&mut self, mem: &dyn RingMemory, ev: &IoEvent) -> Result<(), AioError> {
        self.unreserve();
        let at = HEADER_LEN + EVENT_LEN * u64::from(self.tail);
        mem.write(self.ring.add(at), abi::pod::as_bytes(ev))?;
        self.tail = (self.tail + 1) % self.nr();
        mem.write(self.ring.add(TAIL_AT), &self.tail.to_le_bytes())
    }

    /// Up to `max` completions from `head` on, without consuming them, and the `head` that
    /// consumes them ([`consume`](Self::consume)).
    ///
    /// # Errors
    /// [`AioError::Fault`] if the ring cannot be read.
    pub fn peek(&self, mem: &dyn RingMemory, max: u64) -> Result<(Vec<IoEvent>, u32), AioError> {
        let head = self.head(mem)?;
        let n = u64::from(self.unconsumed(head)).min(max) as u32;
        let mut out = Vec::with_capacity(n as usize);
        let mut at = head;
        // At most two runs: to the ring's end, then from its start.
        while (out.len() as u32) < n {
            let run = (n - out.len() as u32).min(self.nr() - at);
            let mut bytes = vec![0u8; (u64::from(run) * EVENT_LEN) as usize];
            mem.read(
                self.ring.add(HEADER_LEN + EVENT_LEN * u64::from(at)),
                &mut bytes,
            )?;
            out.extend(
                bytes
                    .chunks_exact(EVENT_LEN as usize)
                    .filter_map(abi::pod::from_bytes::<IoEvent>),
            );
            at = (at + run) % self.nr();
        }
        Ok((out, at))
    }

    /// Sets the ring's `head` (to what [`peek`](Self::peek) gave, once the events are the
    /// application's).
    ///
    /// # Errors
    /// [`AioError::Fault`] if the ring cannot be written.
    pub fn consume(&self, mem: &dyn RingMemory, head: u32) -> Result<(), AioError> {
        mem.write(self.ring.add(HEAD_AT), &head.to_le_bytes())
    }
}

/// A process's contexts (Linux's `mm->ioctx_table`), shared by its threads.
#[derive(Debug, Default)]
pub struct AioContexts {
    table: Mutex<BTreeMap<u64, Context>>,
    /// Signalled when a completion is posted or a context destroyed.
    changed: Condvar,
}

/// The locked table of a process's contexts, by id.
pub type ContextTable<'a> = MutexGuard<'a, BTreeMap<u64, Context>>;

impl AioContexts {
    /// Locks the table.
    pub fn lock(&self) -> ContextTable<'_> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The smallest index no context of `table` has.
    pub fn free_index(table: &ContextTable<'_>) -> u32 {
        let mut used: Vec<u32> = table.values().map(|c| c.index).collect();
        used.sort_unstable();
        let mut i = 0;
        for u in used {
            if u != i {
                break;
            }
            i += 1;
        }
        i
    }

    /// Waits for a completion or a destroyed context, at most `slice`.
    pub fn wait<'a>(&self, table: ContextTable<'a>, slice: Duration) -> ContextTable<'a> {
        self.changed
            .wait_timeout(table, slice)
            .unwrap_or_else(|e| e.into_inner())
            .0
    }

    /// Wakes the waiters of [`wait`](Self::wait).
    pub fn notify(&self) {
        self.changed.notify_all();
    }

    /// Whether the process has contexts.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Drops every context (the process exits or execs; its memory, rings included, is
    /// going), giving their events back to the sandbox's `count`.
    pub fn clear(&self, count: &AioCount) {
        let gone = std::mem::take(&mut *self.lock());
        for c in gone.values() {
            count.release(c.geometry.max_reqs);
        }
        if !gone.is_empty() {
            self.notify();
        }
    }
}

/// The events the sandbox's contexts asked for (`/proc/sys/fs/aio-nr`), bounded by
/// [`AIO_MAX_NR`].
#[derive(Debug, Default)]
pub struct AioCount(AtomicU64);

impl AioCount {
    /// Counts `n` more events.
    ///
    /// # Errors
    /// [`AioError::NoRoom`] past `aio-max-nr`.
    pub fn reserve(&self, n: u32) -> Result<(), AioError> {
        self.0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |cur| {
                cur.checked_add(u64::from(n)).filter(|&v| v <= AIO_MAX_NR)
            })
            .map(|_| ())
            .map_err(|_| AioError::NoRoom)
    }

    /// Gives `n` events back.
    pub fn release(&self, n: u32) {
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |cur| {
                Some(cur.saturating_sub(u64::from(n)))
            });
    }

    /// The events counted now.
    pub fn current(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A ring's memory at address 0x1000, a bounds-checked buffer.
    struct Buffer(RefCell<Vec<u8>>);

    const BASE: u64 = 0x1000;

    impl RingMemory for Buffer {
        fn read(&self, at: Gva, buf: &mut [u8]) -> Result<(), AioError> {
            let m = self.0.borrow();
            let s = (at.raw() - BASE) as usize;
            buf.copy_from_slice(m.get(s..s + buf.len()).ok_or(AioError::Fault)?);
            Ok(())
        }
        fn write(&self, at: Gva, buf: &[u8]) -> Result<(), AioError> {
            let mut m = self.0.borrow_mut();
            let s = (at.raw() - BASE) as usize;
            m.get_mut(s..s + buf.len())
                .ok_or(AioError::Fault)?
                .copy_from_slice(buf);
            Ok(())
        }
    }

    fn ring(nr_events: u32) -> (Context, Buffer) {
        let g = RingGeometry::for_request(nr_events, 2, AIO_MAX_NR).unwrap();
        let c = Context::new(0, Gva(BASE), g);
        let mem = Buffer(RefCell::new(vec![0u8; g.len as usize]));
        mem.write(Gva(BASE), abi::pod::as_bytes(&c.initial_header()))
            .unwrap();
        (c, mem)
    }

    fn ev(data: u64) -> IoEvent {
        IoEvent {
            data,
            obj: 0x5000,
            res: data as i64,
            res2: 0,
        }
    }

    #[test]
    fn geometry_is_linux_s() {
        // 1 event on 2 CPUs: 8 doubled to 16, plus 2, is one page: 127 slots.
        let g = RingGeometry::for_request(1, 2, AIO_MAX_NR).unwrap();
        assert_eq!((g.max_reqs, g.nr, g.len), (1, 127, 4096));
        let g = RingGeometry::for_request(1000, 2, AIO_MAX_NR).unwrap();
        assert_eq!(g.len, (32 + 32 * 2002u64).next_multiple_of(4096));
        assert_eq!(u64::from(g.nr), (g.len - 32) / 32);
        // -1 doubles past the cap; 2^31 doubles to nothing; one over aio-max-nr.
        assert_eq!(
            RingGeometry::for_request(u32::MAX, 2, AIO_MAX_NR),
            Err(AioError::TooLarge)
        );
        assert_eq!(
            RingGeometry::for_request(1 << 31, 2, AIO_MAX_NR),
            Err(AioError::NoRoom)
        );
        assert_eq!(
            RingGeometry::for_request(65537, 2, AIO_MAX_NR),
            Err(AioError::NoRoom)
        );
    }

    #[test]
    fn completions_go_round_the_ring() {
        let (mut c, mem) = ring(1);
        let nr = c.geometry.nr;
        let mut next = 0u64;
        // Many times round: post three, consume two then one.
        for _ in 0..200 {
            for _ in 0..3 {
                c.reserve(&mem).unwrap();
                c.complete(&mem, &ev(next)).unwrap();
                next += 1;
            }
            let (got, head) = c.peek(&mem, 2).unwrap();
            assert_eq!(got.len(), 2);
            assert_eq!(got[1].data, got[0].data + 1);
            c.consume(&mem, head).unwrap();
            let (got, head) = c.peek(&mem, 10).unwrap();
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].data, next - 1);
            c.consume(&mem, head).unwrap();
        }
        let (got, _) = c.peek(&mem, 10).unwrap();
        assert!(got.is_empty());
        // The header's tail follows the trusted one.
        assert_eq!(c.word(&mem, TAIL_AT).unwrap(), c.tail);
        assert!(c.tail < nr);
    }

    #[test]
    fn a_full_ring_refuses_more() {
        let (mut c, mem) = ring(1);
        let nr = c.geometry.nr;
        for i in 0..nr - 1 {
            c.reserve(&mem).unwrap();
            if i % 2 == 0 {
                c.complete(&mem, &ev(u64::from(i))).unwrap();
            }
        }
        assert_eq!(c.reserve(&mem), Err(AioError::RingFull));
        c.unreserve();
        c.reserve(&mem).unwrap();
        assert_eq!(c.reserve(&mem), Err(AioError::RingFull));
        // The application consuming events by itself (libaio's fast path) frees slots.
        let (got, head) = c.peek(&mem, 5).unwrap();
        assert_eq!(got.len(), 5);
        mem.write(Gva(BASE + HEAD_AT), &head.to_le_bytes()).unwrap();
        c.reserve(&mem).unwrap();
    }

    #[test]
    fn a_wild_head_stays_in_the_ring() {
        let (mut c, mem) = ring(1);
        mem.write(Gva(BASE + HEAD_AT), &u32::MAX.to_le_bytes())
            .unwrap();
        c.reserve(&mem).unwrap();
        c.complete(&mem, &ev(7)).unwrap();
        let (got, head) = c.peek(&mem, 1000).unwrap();
        assert!(got.len() < c.geometry.nr as usize);
        assert!(head < c.geometry.nr);
    }

    #[test]
    fn the_sandbox_count_is_bounded() {
        let n = AioCount::default();
        n.reserve(65536).unwrap();
        assert_eq!(n.reserve(1), Err(AioError::NoRoom));
        n.release(16);
        n.reserve(16).unwrap();
        assert_eq!(n.current(), 65536);
        n.release(70000);
        assert_eq!(n.current(), 0);
    }

    #[test]
    fn indexes_are_reused_lowest_first() {
        let a = AioContexts::default();
        let g = RingGeometry::for_request(1, 2, AIO_MAX_NR).unwrap();
        let mut t = a.lock();
        for (i, at) in [0x1000u64, 0x3000, 0x5000].iter().enumerate() {
            let idx = AioContexts::free_index(&t);
            assert_eq!(idx, i as u32);
            t.insert(*at, Context::new(idx, Gva(*at), g));
        }
        t.remove(&0x3000);
        assert_eq!(AioContexts::free_index(&t), 1);
    }
}
