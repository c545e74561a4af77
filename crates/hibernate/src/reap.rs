//! REAP (record and prefetch): records the ordered set of guest pages faulted in after a
//! wake, writes that working set contiguously to the sandbox's REAP file at the next
//! hibernate, and streams it back in large sequential reads on the following wake.
//!
//! The REAP file is the shared page file of [`crate::pagefile`] with magic `"TORPREAP"`:
//!
//! ```text
//! +--------------------+-----------------------------------+-----------------+---------+
//! | header (4 KiB)     | recorded page 0 | page 1 | ...      | index (16 B × n)| trailer |
//! | "TORPREAP", v1,    | 4 KiB each, in the order they     | page, slot,     | (32 B)  |
//! | page size, page    | were first faulted (slot = rank)  | crc32c per page |         |
//! | count, created,crc |                                   |                 |         |
//! +--------------------+-----------------------------------+-----------------+---------+
//! ```
//!
//! The index is kept in the same file's tail, not in a separate `reap.idx`: one file is
//! created, validated and removed as a unit, and the trailer's checksummed pointer makes a
//! half-written file unreadable rather than silently short. The index also *is* the
//! persisted working-set record (pages in recorded order), so it survives the runtime
//! process, unlike Quark's in-memory record.
//!
//! [`ReapReader::read_batches`] reads `batch_bytes` at a time (2 MiB is a good size: the
//! measured prefetch optimum on the development machines) and verifies every page before the
//! caller sees it; [`PageBatch::runs`] groups each batch into runs of consecutive guest pages
//! for one UFFDIO_COPY each.

use std::ops::Range;
use std::path::Path;

pub use crate::pagefile::{PageBatch, PageFileError as ReapError, PageIndex as ReapIndex};
use crate::pagefile::{PageFileReader, PageFileWriter, WriteOptions};
use crate::pagestate::PageIdx;

/// Magic of a REAP file.
pub const REAP_MAGIC: [u8; 8] = *b"TORPREAP";

/// One page read back by [`ReapReader::read_all`]: the guest page and its 4096 bytes.
pub type ReapPage = (PageIdx, Box<[u8]>);

/// Default number of pages a recorder keeps (1 GiB of working set).
pub const DEFAULT_RECORD_LIMIT: usize = 1 << 18;

/// What [`WorkingSetRecorder::record`] did with a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordOutcome {
    /// Appended to the set.
    Added,
    /// Already in the set; the order keeps its first fault.
    AlreadyRecorded,
    /// Not recorded: the set has reached its limit (counted in
    /// [`WorkingSetRecorder::dropped`]).
    Full,
    /// Not recorded: outside guest memory.
    OutOfRange,
    /// Not recorded: the recorder is not recording.
    Inactive,
}

/// The ordered set of guest pages faulted in since recording started: no duplicates, at
/// most `limit` pages. Owned by the userfaultfd handler thread.
#[derive(Clone, Debug)]
pub struct WorkingSetRecorder {
    pages: Vec<PageIdx>,
    seen: Vec<u64>,
    page_count: u64,
    limit: usize,
    active: bool,
    dropped: u64,
}

impl WorkingSetRecorder {
    /// A stopped recorder for a guest of `page_count` pages, keeping at most `limit` pages.
    pub fn new(page_count: u64, limit: usize) -> Self {
        let words = usize::try_from(page_count.div_ceil(64)).unwrap_or(usize::MAX);
        WorkingSetRecorder {
            pages: Vec::new(),
            // A page count too large for this host's memory records nothing (every page is
            // then out of range) rather than aborting.
            seen: if words == usize::MAX {
                Vec::new()
            } else {
                vec![0; words]
            },
            page_count: if words == usize::MAX { 0 } else { page_count },
            limit,
            active: false,
            dropped: 0,
        }
    }

    /// Clears the set and starts recording.
    pub fn start(&mut self) {
        self.clear();
        self.active = true;
    }

    /// Stops recording and hands back the set, in fault order; the recorder is left empty.
    pub fn stop(&mut self) -> Vec<PageIdx> {
        self.active = false;
        let pages = std::mem::take(&mut self.pages);
        self.seen.fill(0);
        pages
    }

    /// Forgets every page and the drop count (keeps recording if it was).
    pub fn clear(&mut self) {
        self.pages.clear();
        self.seen.fill(0);
        self.dropped = 0;
    }

    /// Whether it is recording.
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// Records a fault on `page`.
    pub fn record(&mut self, page: PageIdx) -> RecordOutcome {
        if !self.active {
            return RecordOutcome::Inactive;
        }
        if page.0 >= self.page_count {
            return RecordOutcome::OutOfRange;
        }
        let (w, b) = ((page.0 / 64) as usize, 1u64 << (page.0 % 64));
        if self.seen[w] & b != 0 {
            return RecordOutcome::AlreadyRecorded;
        }
        if self.pages.len() >= self.limit {
            self.dropped += 1;
            return RecordOutcome::Full;
        }
        self.seen[w] |= b;
        self.pages.push(page);
        RecordOutcome::Added
    }

    /// Whether `page` is in the set.
    pub fn contains(&self, page: PageIdx) -> bool {
        page.0 < self.page_count && self.seen[(page.0 / 64) as usize] & (1u64 << (page.0 % 64)) != 0
    }

    /// The set so far, in fault order.
    pub fn pages(&self) -> &[PageIdx] {
        &self.pages
    }

    /// Pages in the set.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Faults on new pages not recorded because the set was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// Writes a REAP file: the recorded pages that are resident at hibernate, in recorded order.
/// Dropping it before [`ReapWriter::finish`] removes the file.
#[derive(Debug)]
pub struct ReapWriter(PageFileWriter);

impl ReapWriter {
    /// Creates the REAP file at `path` (mode 0600, `O_EXCL | O_NOFOLLOW | O_CLOEXEC`, no
    /// fsync) for a guest of `page_count` pages.
    ///
    /// # Errors
    /// [`ReapError::Create`], [`ReapError::TooManyPages`], [`ReapError::DiskFull`],
    /// [`ReapError::Io`].
    pub fn create(path: &Path, page_count: u64) -> Result<Self, ReapError> {
        Self::create_with(path, page_count, WriteOptions::default())
    }

    /// As [`ReapWriter::create`], with options.
    ///
    /// # Errors
    /// As [`ReapWriter::create`].
    pub fn create_with(
        path: &Path,
        page_count: u64,
        opts: WriteOptions,
    ) -> Result<Self, ReapError> {
        PageFileWriter::create(path, REAP_MAGIC, page_count, opts).map(ReapWriter)
    }

    /// Appends the next pages of the working set with one vectored write; returns their slots.
    ///
    /// # Errors
    /// As [`PageFileWriter::write_batch`]; [`ReapError::DiskFull`] on a full disk.
    pub fn write_batch(&mut self, pages: &[(PageIdx, &[u8])]) -> Result<Range<u32>, ReapError> {
        self.0.write_batch(pages)
    }

    /// Pages written so far.
    pub fn pages_written(&self) -> u32 {
        self.0.pages_written()
    }

    /// Writes the index and trailer.
    ///
    /// # Errors
    /// [`ReapError::DiskFull`] or [`ReapError::Io`]; the file is removed.
    pub fn finish(self) -> Result<ReapIndex, ReapError> {
        self.0.finish()
    }
}

/// Reads a validated REAP file.
#[derive(Debug)]
pub struct ReapReader(PageFileReader);

impl ReapReader {
    /// Opens and validates the REAP file at `path`.
    ///
    /// # Errors
    /// See [`PageFileReader::open`].
    pub fn open(path: &Path) -> Result<Self, ReapError> {
        PageFileReader::open(path, REAP_MAGIC).map(ReapReader)
    }

    /// Guest pages covered (from the header).
    pub fn page_count(&self) -> u64 {
        self.0.page_count()
    }

    /// The index (slot order = recorded order).
    pub fn index(&self) -> &ReapIndex {
        self.0.index()
    }

    /// The persisted working set, in recorded order.
    pub fn working_set(&self) -> Vec<PageIdx> {
        self.0.index().entries().iter().map(|e| e.page()).collect()
    }

    /// Bytes of page data in the file.
    pub fn data_bytes(&self) -> u64 {
        u64::from(self.0.slots()) * 4096
    }

    /// Streams every page in recorded order, `batch_bytes` per sequential read, each page
    /// verified before `f` sees it. Stops at the first error.
    ///
    /// # Errors
    /// [`ReapError::ChecksumMismatch`], [`ReapError::Truncated`] or [`ReapError::Io`]
    /// (converted into `E`), or whatever `f` returns.
    pub fn read_batches<E, F>(&self, batch_bytes: usize, f: F) -> Result<(), E>
    where
        E: From<ReapError>,
        F: FnMut(PageBatch<'_>) -> Result<(), E>,
    {
        self.0.read_batches(batch_bytes, f)
    }

    /// Reads `count` consecutive slots from `first` into `buf` (`count` × 4096 bytes), each
    /// page verified (for a fault on a REAP page that the prefetch did not install).
    ///
    /// # Errors
    /// As [`PageFileReader::read_slots_into`].
    pub fn read_slots_into(&self, first: u32, count: u32, buf: &mut [u8]) -> Result<(), ReapError> {
        self.0.read_slots_into(first, count, buf)
    }

    /// Reads one page by guest page index.
    ///
    /// # Errors
    /// As [`PageFileReader::read_page`].
    pub fn read_page(
        &self,
        page: PageIdx,
        buf: &mut [u8; crate::pagefile::PAGE_BYTES],
    ) -> Result<(), ReapError> {
        self.0.read_page(page, buf)
    }

    /// Starts the host's readahead of the whole file (see [`PageFileReader::advise_sequential`]).
    pub fn advise_sequential(&self) {
        self.0.advise_sequential();
    }

    /// Reads the whole file into memory: `(page, its 4096 bytes)` in recorded order.
    ///
    /// # Errors
    /// As [`ReapReader::read_batches`].
    pub fn read_all(&self) -> Result<Vec<ReapPage>, ReapError> {
        let mut out = Vec::with_capacity(self.0.slots() as usize);
        self.read_batches(2 << 20, |b: PageBatch<'_>| {
            out.extend(b.pages().map(|(p, d)| (p, Box::<[u8]>::from(d))));
            Ok::<(), ReapError>(())
        })?;
        Ok(out)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Removes the file (this reader keeps working until dropped).
    ///
    /// # Errors
    /// [`ReapError::Io`].
    pub fn remove(&self) -> Result<(), ReapError> {
        self.0.remove()
    }
}

/// Removes the REAP file at `path`; a missing file is not an error.
///
/// # Errors
/// [`ReapError::Io`].
pub fn remove(path: &Path) -> Result<(), ReapError> {
    crate::pagefile::remove(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::swapfile::{SwapReader, SwapWriter};
    use crate::testutil::{random_page, TempDir};
    use std::os::unix::fs::FileExt;

    #[test]
    fn recorder_keeps_first_fault_order_without_duplicates() {
        let mut r = WorkingSetRecorder::new(100, 4);
        assert_eq!(r.record(PageIdx(5)), RecordOutcome::Inactive);
        r.start();
        assert!(r.is_active());
        assert_eq!(r.record(PageIdx(9)), RecordOutcome::Added);
        assert_eq!(r.record(PageIdx(2)), RecordOutcome::Added);
        assert_eq!(r.record(PageIdx(9)), RecordOutcome::AlreadyRecorded);
        assert_eq!(r.record(PageIdx(100)), RecordOutcome::OutOfRange);
        assert_eq!(r.record(PageIdx(u64::MAX)), RecordOutcome::OutOfRange);
        assert_eq!(r.record(PageIdx(63)), RecordOutcome::Added);
        assert_eq!(r.record(PageIdx(64)), RecordOutcome::Added);
        assert_eq!(r.record(PageIdx(1)), RecordOutcome::Full);
        assert_eq!(r.record(PageIdx(2)), RecordOutcome::AlreadyRecorded);
        assert_eq!(r.dropped(), 1);
        assert!(r.contains(PageIdx(63)) && !r.contains(PageIdx(1)) && !r.contains(PageIdx(1000)));
        assert_eq!(
            r.pages(),
            &[PageIdx(9), PageIdx(2), PageIdx(63), PageIdx(64)]
        );
        let set = r.stop();
        assert_eq!(set.len(), 4);
        assert!(!r.is_active() && r.is_empty() && !r.contains(PageIdx(9)));
        assert_eq!(r.record(PageIdx(9)), RecordOutcome::Inactive);
        r.start();
        assert_eq!(r.dropped(), 0);
        assert_eq!(r.record(PageIdx(9)), RecordOutcome::Added);
    }

    fn write_reap(dir: &TempDir, order: &[u64]) -> (std::path::PathBuf, Vec<Vec<u8>>) {
        let path = dir.path().join("reap");
        let data: Vec<Vec<u8>> = order.iter().map(|&p| random_page(p * 31 + 5)).collect();
        let mut w = ReapWriter::create(&path, 1024).unwrap();
        let all: Vec<(PageIdx, &[u8])> = order
            .iter()
            .zip(&data)
            .map(|(&p, d)| (PageIdx(p), d.as_slice()))
            .collect();
        for c in all.chunks(5) {
            w.write_batch(c).unwrap();
        }
        w.finish().unwrap();
        (path, data)
    }

    #[test]
    fn streams_back_in_recorded_order_in_batches() {
        let dir = TempDir::new();
        let order: Vec<u64> = vec![40, 41, 42, 7, 8, 500, 1, 2, 3, 4, 900, 43, 44];
        let (path, data) = write_reap(&dir, &order);
        let r = ReapReader::open(&path).unwrap();
        assert_eq!(
            r.working_set(),
            order.iter().map(|&p| PageIdx(p)).collect::<Vec<_>>()
        );
        assert_eq!(r.data_bytes(), 13 * 4096);
        let mut seen = Vec::new();
        let mut batches = 0;
        let mut runs = Vec::new();
        r.read_batches(4 * 4096 + 100, |b: PageBatch<'_>| {
            assert!(b.len() <= 4 && !b.is_empty());
            batches += 1;
            for (p, d) in b.pages() {
                seen.push((p, d.to_vec()));
            }
            for (p, d) in b.runs() {
                runs.push((p.0, d.len() / 4096));
            }
            Ok::<(), ReapError>(())
        })
        .unwrap();
        assert_eq!(batches, 4);
        for (k, (p, d)) in seen.iter().enumerate() {
            assert_eq!(p.0, order[k]);
            assert_eq!(d, &data[k]);
        }
        // Runs never cross a batch boundary (4 pages a batch).
        assert_eq!(
            runs,
            vec![
                (40, 3),
                (7, 1),
                (8, 1),
                (500, 1),
                (1, 2),
                (3, 2),
                (900, 1),
                (43, 1),
                (44, 1)
            ]
        );
        let all = r.read_all().unwrap();
        assert_eq!(all.len(), 13);
        assert_eq!(&all[5].1[..], &data[5][..]);
        // A tiny batch size still makes progress, one page at a time.
        let mut n = 0;
        r.read_batches(1, |b: PageBatch<'_>| {
            n += b.len();
            Ok::<(), ReapError>(())
        })
        .unwrap();
        assert_eq!(n, 13);
    }

    #[test]
    fn callback_error_stops_the_stream() {
        let dir = TempDir::new();
        let (path, _) = write_reap(&dir, &[1, 2, 3, 4, 5, 6]);
        let r = ReapReader::open(&path).unwrap();
        #[derive(Debug)]
        enum E {
            Reap,
            Mine,
        }
        impl From<ReapError> for E {
            fn from(_: ReapError) -> Self {
                E::Reap
            }
        }
        let mut calls = 0;
        let res = r.read_batches(2 * 4096, |_| {
            calls += 1;
            if calls == 2 {
                Err(E::Mine)
            } else {
                Ok(())
            }
        });
        assert!(matches!(res, Err(E::Mine)));
        assert_eq!(calls, 2);
        let _ = E::Reap;
    }

    #[test]
    fn corrupted_page_stops_before_the_caller_sees_it() {
        let dir = TempDir::new();
        let (path, _) = write_reap(&dir, &[10, 11, 12, 13, 14, 15]);
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[0xAB, 0xCD], 4096 + 4 * 4096 + 4000)
            .unwrap();
        let r = ReapReader::open(&path).unwrap();
        let mut delivered = Vec::new();
        let res = r.read_batches(2 * 4096, |b: PageBatch<'_>| {
            delivered.extend(b.pages().map(|(p, _)| p.0));
            Ok::<(), ReapError>(())
        });
        assert!(matches!(
            res,
            Err(ReapError::ChecksumMismatch { page: PageIdx(14) })
        ));
        assert_eq!(delivered, vec![10, 11, 12, 13]);
        assert!(r.read_all().is_err());
    }

    #[test]
    fn truncated_and_foreign_files_are_rejected() {
        let dir = TempDir::new();
        let (path, _) = write_reap(&dir, &[3, 1, 2]);
        let full = std::fs::read(&path).unwrap();
        let cut = dir.path().join("cut");
        for len in [0, 100, 4096, 4096 + 4096, full.len() - 1] {
            std::fs::write(&cut, &full[..len]).unwrap();
            assert!(ReapReader::open(&cut).is_err(), "length {len}");
        }
        // A swap file is not a REAP file and vice versa.
        assert!(matches!(
            SwapReader::open(&path),
            Err(ReapError::BadMagic { .. })
        ));
        let sp = dir.path().join("swap");
        let mut w = SwapWriter::create(&sp, 8).unwrap();
        w.write_batch(&[(PageIdx(0), &random_page(1))]).unwrap();
        w.finish().unwrap();
        assert!(matches!(
            ReapReader::open(&sp),
            Err(ReapError::BadMagic { .. })
        ));
        // Removal.
        let r = ReapReader::open(&path).unwrap();
        r.remove().unwrap();
        assert!(!path.exists());
        remove(&path).unwrap();
    }

    #[test]
    fn unfinished_file_is_unreadable() {
        let dir = TempDir::new();
        let path = dir.path().join("reap");
        let mut w = ReapWriter::create(&path, 16).unwrap();
        w.write_batch(&[(PageIdx(3), &random_page(9))]).unwrap();
        // Copy the half-written file before the writer's drop removes it.
        let copy = dir.path().join("copy");
        std::fs::copy(&path, &copy).unwrap();
        drop(w);
        assert!(!path.exists());
        assert!(matches!(
            ReapReader::open(&copy),
            Err(ReapError::BadTrailer(_))
        ));
    }
}
