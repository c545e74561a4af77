//! The per-sandbox swap file: every resident, non-zero, non-REAP guest page goes here at
//! deflate, and comes back by page fault (or batched reads) on wake.
//!
//! The format is the shared page file of [`crate::pagefile`] with magic `"TORPSWP\0"`:
//!
//! ```text
//! +--------------------+----------------------------------+-----------------+---------+
//! | header (4 KiB)     | slot 0 | slot 1 | ... | slot n-1  | index (16 B × n)| trailer |
//! | "TORPSWP\0", v1,   | 4 KiB guest pages, written in    | page, slot,     | (32 B)  |
//! | page size, page    | large sequential batches         | crc32c per page | "TORPIDX\0",
//! | count, created,crc |                                  |                 | index off, n,
//! +--------------------+----------------------------------+-----------------+ index crc, crc
//! ```
//!
//! Zero pages are never written: the caller records them as [`crate::PageState::Zero`] in the
//! page-state map and serves them with UFFDIO_ZEROPAGE. A file is written once, by one
//! deflate, and read until the next deflate replaces it; a disk-full error while writing is
//! [`SwapError::DiskFull`] (check with [`SwapError::is_disk_full`]) so the caller can keep the
//! sandbox hot, and the unfinished file is removed when the writer is dropped.

use std::ops::Range;
use std::path::Path;

pub use crate::pagefile::{IndexEntry, PageFileError as SwapError, PageIndex as SwapIndex};
use crate::pagefile::{PageFileReader, PageFileWriter, WriteOptions, PAGE_BYTES};
use crate::pagestate::PageIdx;

/// Magic of a swap file.
pub const SWAP_MAGIC: [u8; 8] = *b"TORPSWP\0";

/// Writes a swap file (see the module doc). Dropping it before [`SwapWriter::finish`]
/// removes the file.
#[derive(Debug)]
pub struct SwapWriter(PageFileWriter);

impl SwapWriter {
    /// Creates a swap file at `path` for a guest of `page_count` pages, mode 0600, with
    /// `O_EXCL | O_NOFOLLOW | O_CLOEXEC`: an existing file or symlink at `path` is refused.
    /// No fsync (see [`SwapWriter::create_with`]).
    ///
    /// # Errors
    /// [`SwapError::Create`] if the file cannot be created; [`SwapError::TooManyPages`];
    /// [`SwapError::DiskFull`] or [`SwapError::Io`] if the header cannot be written.
    pub fn create(path: &Path, page_count: u64) -> Result<Self, SwapError> {
        Self::create_with(path, page_count, WriteOptions::default())
    }

    /// As [`SwapWriter::create`], with options (`sync: true` adds an `fdatasync` in
    /// [`SwapWriter::finish`]).
    ///
    /// # Errors
    /// As [`SwapWriter::create`].
    pub fn create_with(
        path: &Path,
        page_count: u64,
        opts: WriteOptions,
    ) -> Result<Self, SwapError> {
        PageFileWriter::create(path, SWAP_MAGIC, page_count, opts).map(SwapWriter)
    }

    /// Appends a batch of `(guest page, 4096 bytes)` with one vectored write (callers pass up
    /// to a few MiB at a time). Returns the slots: `pages[i]` went to `range.start + i`.
    ///
    /// # Errors
    /// [`SwapError::DiskFull`] when the disk is full; see
    /// [`PageFileWriter::write_batch`] for the rest.
    pub fn write_batch(&mut self, pages: &[(PageIdx, &[u8])]) -> Result<Range<u32>, SwapError> {
        self.0.write_batch(pages)
    }

    /// Pages written so far.
    pub fn pages_written(&self) -> u32 {
        self.0.pages_written()
    }

    /// Writes the index and trailer and returns the index.
    ///
    /// # Errors
    /// [`SwapError::DiskFull`] or [`SwapError::Io`]; the file is removed.
    pub fn finish(self) -> Result<SwapIndex, SwapError> {
        self.0.finish()
    }
}

/// Reads a validated swap file.
#[derive(Debug)]
pub struct SwapReader(PageFileReader);

impl SwapReader {
    /// Opens and validates the swap file at `path` (header, trailer, index checksum, every
    /// index entry inside the file and below the page count; a truncated file is an error).
    ///
    /// # Errors
    /// See [`PageFileReader::open`].
    pub fn open(path: &Path) -> Result<Self, SwapError> {
        PageFileReader::open(path, SWAP_MAGIC).map(SwapReader)
    }

    /// Guest pages covered (from the header); compare with the guest's memory size.
    pub fn page_count(&self) -> u64 {
        self.0.page_count()
    }

    /// The index.
    pub fn index(&self) -> &SwapIndex {
        self.0.index()
    }

    /// Pages (slots) in the file.
    pub fn slots(&self) -> u32 {
        self.0.slots()
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Reads `page` with one `pread` and verifies its crc32c.
    ///
    /// # Errors
    /// [`SwapError::ChecksumMismatch`] if damaged, [`SwapError::UnknownPage`],
    /// [`SwapError::Truncated`], [`SwapError::Io`]; `buf` is zeroed on error.
    pub fn read_page(&self, page: PageIdx, buf: &mut [u8; PAGE_BYTES]) -> Result<(), SwapError> {
        self.0.read_page(page, buf)
    }

    /// Reads `count` consecutive slots from `first` with one `pread` into `buf`
    /// (`count * 4096` bytes) and verifies each page.
    ///
    /// # Errors
    /// As [`PageFileReader::read_slots_into`]; `buf` is zeroed on error.
    pub fn read_slots_into(&self, first: u32, count: u32, buf: &mut [u8]) -> Result<(), SwapError> {
        self.0.read_slots_into(first, count, buf)
    }

    /// Removes the file (this reader keeps working until dropped).
    ///
    /// # Errors
    /// [`SwapError::Io`].
    pub fn remove(&self) -> Result<(), SwapError> {
        self.0.remove()
    }
}

/// Removes the swap file at `path`; a missing file is not an error.
///
/// # Errors
/// [`SwapError::Io`].
pub fn remove(path: &Path) -> Result<(), SwapError> {
    crate::pagefile::remove(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{random_page, TempDir};
    use std::io::Write;
    use std::os::unix::fs::{FileExt, PermissionsExt};

    fn write_file(dir: &TempDir, pages: &[(u64, Vec<u8>)], page_count: u64) -> std::path::PathBuf {
        let path = dir.path().join("swap");
        let mut w = SwapWriter::create(&path, page_count).unwrap();
        let batch: Vec<(PageIdx, &[u8])> = pages
            .iter()
            .map(|(p, d)| (PageIdx(*p), d.as_slice()))
            .collect();
        for chunk in batch.chunks(3) {
            w.write_batch(chunk).unwrap();
        }
        w.finish().unwrap();
        path
    }

    fn sample(n: u64) -> Vec<(u64, Vec<u8>)> {
        (0..n)
            .map(|k| ((k * 7 + 3) % 100, random_page(k + 1)))
            .collect()
    }

    #[test]
    fn round_trip_random_pages() {
        let dir = TempDir::new();
        let pages = sample(10);
        let path = dir.path().join("swap");
        let mut w = SwapWriter::create(&path, 100).unwrap();
        let b: Vec<(PageIdx, &[u8])> = pages
            .iter()
            .map(|(p, d)| (PageIdx(*p), d.as_slice()))
            .collect();
        assert_eq!(w.write_batch(&b[..4]).unwrap(), 0..4);
        assert_eq!(w.write_batch(&[]).unwrap(), 4..4);
        assert_eq!(w.write_batch(&b[4..]).unwrap(), 4..10);
        let idx = w.finish().unwrap();
        assert_eq!(idx.len(), 10);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(len, 4096 + 10 * 4096 + 10 * 16 + 32);

        let r = SwapReader::open(&path).unwrap();
        assert_eq!(r.page_count(), 100);
        assert_eq!(r.slots(), 10);
        let mut buf = [0u8; 4096];
        for (k, (p, d)) in pages.iter().enumerate() {
            r.read_page(PageIdx(*p), &mut buf).unwrap();
            assert_eq!(&buf[..], &d[..]);
            assert_eq!(r.index().lookup(PageIdx(*p)).unwrap().0, k as u32);
            assert_eq!(idx.lookup(PageIdx(*p)), r.index().lookup(PageIdx(*p)));
        }
        // A zero page was never written: the file does not hold it.
        assert!(matches!(
            r.read_page(PageIdx(99), &mut buf),
            Err(SwapError::UnknownPage(_))
        ));
        let mut big = vec![0u8; 4 * 4096];
        r.read_slots_into(3, 4, &mut big).unwrap();
        for k in 0..4 {
            assert_eq!(&big[k * 4096..(k + 1) * 4096], &pages[3 + k].1[..]);
        }
        assert!(matches!(
            r.read_slots_into(8, 4, &mut big),
            Err(SwapError::SlotOutOfRange { .. })
        ));
        assert!(matches!(
            r.read_slots_into(0, 3, &mut big),
            Err(SwapError::BufferSize { .. })
        ));
        r.remove().unwrap();
        assert!(!path.exists());
        remove(&path).unwrap();
    }

    #[test]
    fn empty_file_round_trips() {
        let dir = TempDir::new();
        let path = write_file(&dir, &[], 16);
        let r = SwapReader::open(&path).unwrap();
        assert_eq!(r.slots(), 0);
    }

    #[test]
    fn writer_rejects_bad_input_without_poisoning() {
        let dir = TempDir::new();
        let path = dir.path().join("swap");
        let mut w = SwapWriter::create(&path, 10).unwrap();
        let p = random_page(1);
        assert!(matches!(
            w.write_batch(&[(PageIdx(0), &p[..100])]),
            Err(SwapError::BadPageLen { .. })
        ));
        assert!(matches!(
            w.write_batch(&[(PageIdx(10), &p)]),
            Err(SwapError::PageOutOfRange { .. })
        ));
        assert!(matches!(
            w.write_batch(&[(PageIdx(1), &p), (PageIdx(1), &p)]),
            Err(SwapError::DuplicatePage(PageIdx(1)))
        ));
        // The failed batch left no trace: page 1 can still be written, once.
        assert_eq!(w.write_batch(&[(PageIdx(1), &p)]).unwrap(), 0..1);
        assert!(matches!(
            w.write_batch(&[(PageIdx(1), &p)]),
            Err(SwapError::DuplicatePage(_))
        ));
        w.finish().unwrap();
        assert_eq!(SwapReader::open(&path).unwrap().slots(), 1);
    }

    #[test]
    fn create_refuses_existing_file_and_symlink() {
        let dir = TempDir::new();
        let path = write_file(&dir, &sample(2), 100);
        assert!(matches!(
            SwapWriter::create(&path, 100),
            Err(SwapError::Create { .. })
        ));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("target"), &link).unwrap();
        assert!(matches!(
            SwapWriter::create(&link, 100),
            Err(SwapError::Create { .. })
        ));
        assert!(!dir.path().join("target").exists());
        std::os::unix::fs::symlink(&path, dir.path().join("link2")).unwrap();
        assert!(matches!(
            SwapReader::open(&dir.path().join("link2")),
            Err(SwapError::Open { .. })
        ));
    }

    #[test]
    fn dropped_writer_removes_file() {
        let dir = TempDir::new();
        let path = dir.path().join("swap");
        let mut w = SwapWriter::create(&path, 4).unwrap();
        w.write_batch(&[(PageIdx(0), &random_page(3))]).unwrap();
        assert!(path.exists());
        drop(w);
        assert!(!path.exists());
    }

    /// An index that names a page twice (its checksums rewritten to match) is refused at
    /// open, and every page of a sound file is found by its page.
    #[test]
    fn an_index_naming_a_page_twice_is_refused() {
        let dir = TempDir::new();
        let pages = sample(9);
        let path = write_file(&dir, &pages, 100);
        let r = SwapReader::open(&path).unwrap();
        for (slot, (page, _)) in pages.iter().enumerate() {
            assert_eq!(r.index().lookup(PageIdx(*page)).unwrap().0, slot as u32);
        }
        assert_eq!(r.index().lookup(PageIdx(99)), None);
        drop(r);
        let mut b = std::fs::read(&path).unwrap();
        let len = b.len();
        let t = len - 32;
        let index_off = u64::from_le_bytes(b[t + 8..t + 16].try_into().unwrap()) as usize;
        let count = u64::from_le_bytes(b[t + 16..t + 24].try_into().unwrap()) as usize;
        // Entry 5 names entry 2's page.
        let page2: [u8; 8] = b[index_off + 2 * 16..index_off + 2 * 16 + 8]
            .try_into()
            .unwrap();
        b[index_off + 5 * 16..index_off + 5 * 16 + 8].copy_from_slice(&page2);
        let c = crc32c::crc32c(&b[index_off..index_off + count * 16]);
        b[t + 24..t + 28].copy_from_slice(&c.to_le_bytes());
        let c = crc32c::crc32c(&b[t..t + 28]);
        b[t + 28..t + 32].copy_from_slice(&c.to_le_bytes());
        std::fs::write(&path, &b).unwrap();
        assert!(matches!(
            SwapReader::open(&path),
            Err(SwapError::DuplicatePage(p)) if p == PageIdx(pages[2].0)
        ));
    }

    #[test]
    fn corrupted_data_byte_is_checksum_mismatch() {
        let dir = TempDir::new();
        let pages = sample(5);
        let path = write_file(&dir, &pages, 100);
        // Flip one byte in slot 2.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .read(true)
            .open(&path)
            .unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, 4096 + 2 * 4096 + 1234).unwrap();
        f.write_all_at(&[b[0] ^ 0x40], 4096 + 2 * 4096 + 1234)
            .unwrap();
        let r = SwapReader::open(&path).unwrap();
        let mut buf = [0xffu8; 4096];
        let err = r.read_page(PageIdx(pages[2].0), &mut buf).unwrap_err();
        assert!(matches!(err, SwapError::ChecksumMismatch { page } if page == PageIdx(pages[2].0)));
        assert!(
            buf.iter().all(|&x| x == 0),
            "buffer must not keep wrong bytes"
        );
        r.read_page(PageIdx(pages[1].0), &mut buf).unwrap();
        let mut big = vec![0xffu8; 5 * 4096];
        assert!(matches!(
            r.read_slots_into(0, 5, &mut big),
            Err(SwapError::ChecksumMismatch { .. })
        ));
        assert!(big.iter().all(|&x| x == 0));
    }

    #[test]
    fn every_truncation_is_an_error() {
        let dir = TempDir::new();
        let pages = sample(3);
        let path = write_file(&dir, &pages, 100);
        let full = std::fs::read(&path).unwrap();
        let cut = dir.path().join("cut");
        // Every length short of the full file, at a stride that hits each region.
        let mut lens: Vec<usize> = (0..full.len()).step_by(509).collect();
        lens.extend([
            full.len() - 1,
            full.len() - 16,
            full.len() - 32,
            full.len() - 33,
            4096,
            4095,
        ]);
        for len in lens {
            std::fs::write(&cut, &full[..len]).unwrap();
            assert!(SwapReader::open(&cut).is_err(), "length {len} was accepted");
        }
        // Extended by garbage: also an error.
        let mut longer = full.clone();
        longer.extend_from_slice(&[0u8; 4096]);
        std::fs::write(&cut, &longer).unwrap();
        assert!(matches!(
            SwapReader::open(&cut),
            Err(SwapError::BadTrailer(_))
        ));
    }

    #[test]
    fn truncated_after_open_is_an_error() {
        let dir = TempDir::new();
        let pages = sample(4);
        let path = write_file(&dir, &pages, 100);
        let r = SwapReader::open(&path).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(4096 + 4096)
            .unwrap();
        let mut buf = [0u8; 4096];
        r.read_page(PageIdx(pages[0].0), &mut buf).unwrap();
        assert!(matches!(
            r.read_page(PageIdx(pages[3].0), &mut buf),
            Err(SwapError::Truncated { .. })
        ));
    }

    #[test]
    fn every_single_bit_flip_in_metadata_is_caught() {
        let dir = TempDir::new();
        let pages = sample(3);
        let path = write_file(&dir, &pages, 100);
        let full = std::fs::read(&path).unwrap();
        let bad = dir.path().join("bad");
        let index_start = 4096 + 3 * 4096;
        let positions: Vec<usize> = (0..64).chain(index_start..full.len()).collect();
        for pos in positions {
            for bit in [0u8, 3, 7] {
                let mut b = full.clone();
                b[pos] ^= 1 << bit;
                std::fs::write(&bad, &b).unwrap();
                assert!(
                    SwapReader::open(&bad).is_err(),
                    "flip at {pos} bit {bit} accepted"
                );
            }
        }
    }

    #[test]
    fn bad_magic_version_page_size() {
        let dir = TempDir::new();
        let path = write_file(&dir, &sample(1), 100);
        let full = std::fs::read(&path).unwrap();
        let bad = dir.path().join("bad");
        let with_header = |f: &dyn Fn(&mut [u8])| {
            let mut b = full.clone();
            f(&mut b[..64]);
            let c = crc32c::crc32c(&b[0..60]);
            b[60..64].copy_from_slice(&c.to_le_bytes());
            std::fs::write(&bad, &b).unwrap();
            SwapReader::open(&bad)
        };
        assert!(matches!(
            with_header(&|h| h[0] = b'X'),
            Err(SwapError::BadMagic { .. })
        ));
        assert!(matches!(
            with_header(&|h| h[0..8].copy_from_slice(b"TORPREAP")),
            Err(SwapError::BadMagic { .. })
        ));
        assert!(matches!(
            with_header(&|h| h[8] = 2),
            Err(SwapError::UnsupportedVersion(2))
        ));
        assert!(matches!(
            with_header(&|h| h[13] = 0x20),
            Err(SwapError::BadPageSize(0x2000))
        ));
        // page_count lowered below a stored page index.
        assert!(matches!(
            with_header(&|h| h[16..24].copy_from_slice(&2u64.to_le_bytes())),
            Err(SwapError::PageOutOfRange {
                page: PageIdx(3),
                pages: 2
            })
        ));
        assert!(with_header(&|_| {}).is_ok());
        // Not a swap file at all, and an empty file.
        std::fs::write(&bad, b"hello").unwrap();
        assert!(matches!(
            SwapReader::open(&bad),
            Err(SwapError::Truncated { .. })
        ));
        std::fs::File::create(&bad).unwrap().write_all(&[]).unwrap();
        assert!(SwapReader::open(&bad).is_err());
        assert!(matches!(
            SwapReader::open(&dir.path().join("none")),
            Err(SwapError::Open { .. })
        ));
    }

    #[test]
    fn enospc_and_edquot_map_to_disk_full() {
        let e = SwapError::from_io("x", std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(e.is_disk_full());
        let e = SwapError::from_io("x", std::io::Error::from_raw_os_error(libc::EDQUOT));
        assert!(e.is_disk_full());
        let e = SwapError::from_io("x", std::io::Error::from_raw_os_error(libc::EIO));
        assert!(!e.is_disk_full());
        assert!(matches!(e, SwapError::Io { .. }));
    }

    #[test]
    fn disk_full_on_small_tmpfs() {
        let Some(fs) = crate::testutil::SmallTmpfs::mount(64 * 1024) else {
            eprintln!("skipped: cannot mount a tmpfs here");
            return;
        };
        let path = fs.path().join("swap");
        let mut w = SwapWriter::create(&path, 1000).unwrap();
        let pages: Vec<Vec<u8>> = (0..32).map(random_page).collect();
        let batch: Vec<(PageIdx, &[u8])> = pages
            .iter()
            .enumerate()
            .map(|(i, d)| (PageIdx(i as u64), d.as_slice()))
            .collect();
        let err = w.write_batch(&batch).unwrap_err();
        assert!(err.is_disk_full(), "got {err:?}");
        assert!(matches!(
            w.write_batch(&batch[..1]),
            Err(SwapError::Poisoned)
        ));
        assert!(matches!(w.finish(), Err(SwapError::Poisoned)));
        // The unfinished file is gone, and the space is back.
        assert!(!path.exists());
        let mut w = SwapWriter::create(&path, 1000).unwrap();
        w.write_batch(&batch[..4]).unwrap();
        w.finish().unwrap();
        assert_eq!(SwapReader::open(&path).unwrap().slots(), 4);
    }
}
