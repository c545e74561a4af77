//! The checksummed page-file format shared by the swap file and the REAP file: a header,
//! 4 KiB page slots written sequentially in large batches, and an index plus trailer written
//! at the end. [`crate::swapfile`] and [`crate::reap`] wrap it with their own magic and API.
//!
//! ```text
//!  offset 0        +------------------------------------------------------------+
//!                  | header (64 bytes used, padded with zeros to 4096)          |
//!                  |   magic       [u8; 8]  "TORPSWP\0" (swap) / "TORPREAP"     |
//!                  |   version     u32      1                                   |
//!                  |   page_size   u32      4096                                |
//!                  |   page_count  u64      guest pages covered: every index    |
//!                  |                        entry's page is below it            |
//!                  |   created_us  u64      creation time, µs since the epoch   |
//!                  |   reserved    [u8; 28] zero                                |
//!                  |   header_crc  u32      crc32c of bytes 0..60               |
//!  offset 4096     +------------------------------------------------------------+
//!                  | slot 0: one guest page, 4096 bytes                         |
//!                  | slot 1                                                     |
//!                  | ...          (slot s at 4096 + s * 4096)                   |
//!  index_offset    +------------------------------------------------------------+
//!   = 4096 +       | index: entry_count entries of 16 bytes, entry s for slot s |
//!     4096 * count |   page        u64      guest page index                    |
//!                  |   slot        u32      = s                                 |
//!                  |   crc         u32      crc32c of the slot's 4096 bytes     |
//!  file_len - 32   +------------------------------------------------------------+
//!                  | trailer                                                    |
//!                  |   magic       [u8; 8]  "TORPIDX\0"                         |
//!                  |   index_off   u64      = 4096 + 4096 * entry_count         |
//!                  |   entry_count u64                                          |
//!                  |   index_crc   u32      crc32c of the whole index           |
//!                  |   trailer_crc u32      crc32c of trailer bytes 0..28       |
//!  file_len        +------------------------------------------------------------+
//! ```
//!
//! All integers are little-endian. The file is written front to back: header, then data in
//! batches, then index and trailer by [`PageFileWriter::finish`]; a file whose writer did not
//! finish has no valid trailer and is rejected. [`PageFileReader::open`] checks magic,
//! version, page size, both header and trailer checksums, that the file length is exactly
//! what the trailer implies (so a truncated or extended file is an error, and nothing is
//! allocated from an unchecked count), the index checksum, that entry `s` names slot `s`, and
//! that every page is below `page_count` and appears once. Every page read is checked
//! against its crc32c; on any failure the caller's buffer is zeroed, so wrong bytes never
//! reach the guest.
//!
//! Creation uses `O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC` with mode 0600: an existing file
//! or a symlink at the path is refused (the caller removes stale files; they live in the
//! sandbox's own 0700 directory). Durability: the file only has to outlive its own sandbox
//! process, which a host crash ends anyway, so by default nothing is fsynced;
//! [`WriteOptions::sync`] adds one `fdatasync` in `finish`.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::pagestate::PageIdx;

/// Size of one page slot.
pub const PAGE_BYTES: usize = 4096;
/// Format version written and accepted.
pub const VERSION: u32 = 1;
/// Size of the header block (data starts here).
pub const HEADER_BYTES: u64 = 4096;
/// Size of one index entry.
pub const ENTRY_BYTES: u64 = 16;
/// Size of the trailer.
pub const TRAILER_BYTES: u64 = 32;
/// Trailer magic.
pub const TRAILER_MAGIC: [u8; 8] = *b"TORPIDX\0";
/// Largest `page_count` a file may cover (so every slot and the slot count fit a `u32`).
pub const MAX_PAGES: u64 = u32::MAX as u64;

const HEADER_USED: usize = 64;

/// Errors of page-file writing and reading.
#[derive(Debug, thiserror::Error)]
pub enum PageFileError {
    /// The file could not be created (it may already exist, or be a symlink).
    #[error("cannot create {path}: {source}")]
    Create {
        /// The path.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
    /// The file could not be opened.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The path.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
    /// The disk (or quota) is full: nothing is lost, the caller keeps the pages resident.
    #[error("disk full while {op}: {source}")]
    DiskFull {
        /// What was being done.
        op: &'static str,
        /// Cause (ENOSPC or EDQUOT).
        source: io::Error,
    },
    /// Any other host I/O error.
    #[error("I/O error while {op}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// Cause.
        source: io::Error,
    },
    /// An earlier write failed; the writer accepts nothing more.
    #[error("an earlier write to this page file failed")]
    Poisoned,
    /// A page passed to a writer is not 4096 bytes.
    #[error("page {page} has {len} bytes, not 4096")]
    BadPageLen {
        /// The page.
        page: PageIdx,
        /// Its length.
        len: usize,
    },
    /// A page index is not below the file's page count.
    #[error("page {page} is outside the {pages} pages this file covers")]
    PageOutOfRange {
        /// The page.
        page: PageIdx,
        /// Pages covered.
        pages: u64,
    },
    /// A page was written twice, or the index names it twice.
    #[error("page {0} appears twice")]
    DuplicatePage(PageIdx),
    /// The page count given to a writer is too large.
    #[error("page count {0} exceeds the format's limit")]
    TooManyPages(u64),
    /// The file is not a page file of the expected kind.
    #[error("bad magic {found:?}, expected {expected:?}")]
    BadMagic {
        /// Bytes found.
        found: [u8; 8],
        /// Bytes expected.
        expected: [u8; 8],
    },
    /// The file has a version this build does not read.
    #[error("unsupported page-file version {0}")]
    UnsupportedVersion(u32),
    /// The file's page size is not 4096.
    #[error("unsupported page size {0}")]
    BadPageSize(u32),
    /// The header checksum does not match.
    #[error("header checksum mismatch")]
    HeaderChecksum,
    /// The trailer is missing or damaged (the writer never finished, or the file is damaged).
    #[error("bad trailer: {0}")]
    BadTrailer(&'static str),
    /// The file is shorter or longer than its trailer says, or ends before the header.
    #[error("file is {len} bytes, expected {expected}")]
    Truncated {
        /// Bytes expected (0 when the trailer itself is unreadable).
        expected: u64,
        /// Actual length.
        len: u64,
    },
    /// The index checksum does not match.
    #[error("index checksum mismatch")]
    IndexChecksum,
    /// An index entry is inconsistent.
    #[error("bad index entry {entry}: {reason}")]
    BadIndex {
        /// Entry number.
        entry: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// A page's contents do not match its checksum.
    #[error("checksum mismatch on page {page}")]
    ChecksumMismatch {
        /// The page.
        page: PageIdx,
    },
    /// The file holds no such page.
    #[error("page {0} is not in this file")]
    UnknownPage(PageIdx),
    /// A slot range is outside the file.
    #[error("slots {first}+{count} are outside the file's {slots} slots")]
    SlotOutOfRange {
        /// First slot asked for.
        first: u32,
        /// Count asked for.
        count: u32,
        /// Slots in the file.
        slots: u32,
    },
    /// A buffer has the wrong size.
    #[error("buffer of {len} bytes, expected {expected}")]
    BufferSize {
        /// Its length.
        len: usize,
        /// Length expected.
        expected: usize,
    },
}

impl PageFileError {
    /// Maps a host error during `op`: ENOSPC and EDQUOT become [`PageFileError::DiskFull`],
    /// anything else [`PageFileError::Io`].
    pub fn from_io(op: &'static str, source: io::Error) -> Self {
        match source.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => PageFileError::DiskFull { op, source },
            _ => PageFileError::Io { op, source },
        }
    }

    /// Whether this is a disk-full error (the caller keeps the sandbox hot and reports it).
    pub fn is_disk_full(&self) -> bool {
        matches!(self, PageFileError::DiskFull { .. })
    }
}

/// Options for creating a page file.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteOptions {
    /// `fdatasync` the file in `finish` (default off: the file need not survive a host crash).
    pub sync: bool,
}

/// One index entry: which guest page a slot holds and its checksum; the slot is the entry's
/// place in the index.
///
/// 8 bytes in memory (the file spells the slot out and the page in 64 bits: 16): a hibernated
/// sandbox keeps the index of every page file it has, an entry for every page swapped out. A
/// page fits in 32 bits, being below the file's page count, at most [`MAX_PAGES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    page: u32,
    crc: u32,
}

const _: () = assert!(std::mem::size_of::<IndexEntry>() == 8);

impl IndexEntry {
    /// The entry of `page` (below [`MAX_PAGES`]: checked by the writer and the reader) with
    /// checksum `crc`.
    fn new(page: PageIdx, crc: u32) -> IndexEntry {
        debug_assert!(page.0 < MAX_PAGES);
        IndexEntry {
            page: page.0 as u32,
            crc,
        }
    }
    /// Guest page.
    pub fn page(&self) -> PageIdx {
        PageIdx(u64::from(self.page))
    }
    /// crc32c of the page's 4096 bytes.
    pub fn crc(&self) -> u32 {
        self.crc
    }
}

/// The index of a finished page file: slot → (page, crc) and page → slot.
///
/// Page → slot is a binary search over the slots sorted by page (4 bytes a page, where a hash
/// map took about 30): a hibernated sandbox keeps the index of every swap file it has, 12
/// bytes a page with the entries'.
#[derive(Clone, Debug, Default)]
pub struct PageIndex {
    entries: Vec<IndexEntry>,
    /// Every slot, in the order of its page.
    by_page: Vec<u32>,
}

impl PageIndex {
    /// The index of `entries` (in slot order; each page once, else see `repeated_page`).
    fn from_entries(entries: Vec<IndexEntry>) -> Self {
        let by_page = slots_by_page(&entries);
        PageIndex { entries, by_page }
    }
    /// Number of pages held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// Whether it holds no page.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// A page that two entries name, if any (a damaged index).
    fn repeated_page(&self) -> Option<PageIdx> {
        let page = |s: u32| self.entries[s as usize].page();
        self.by_page
            .windows(2)
            .find(|w| page(w[0]) == page(w[1]))
            .map(|w| page(w[0]))
    }

    /// Slot and crc of `page`, if the file holds it.
    pub fn lookup(&self, page: PageIdx) -> Option<(u32, u32)> {
        let at = self
            .by_page
            .binary_search_by_key(&page, |&s| self.entries[s as usize].page())
            .ok()?;
        let slot = self.by_page[at];
        Some((slot, self.entries[slot as usize].crc))
    }
    /// The entry for `slot`.
    pub fn entry(&self, slot: u32) -> Option<&IndexEntry> {
        self.entries.get(slot as usize)
    }
    /// All entries, in slot order.
    pub fn entries(&self) -> &[IndexEntry] {
        &self.entries
    }
}

/// The slots of `entries` (in slot order) sorted by their page.
fn slots_by_page(entries: &[IndexEntry]) -> Vec<u32> {
    let mut by_page: Vec<u32> = (0..entries.len() as u32).collect();
    by_page.sort_unstable_by_key(|&s| entries[s as usize].page);
    by_page
}

fn crc(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn slot_offset(slot: u64) -> u64 {
    HEADER_BYTES + slot * PAGE_BYTES as u64
}

fn encode_header(magic: [u8; 8], page_count: u64, created_us: u64) -> [u8; HEADER_USED] {
    let mut h = [0u8; HEADER_USED];
    h[0..8].copy_from_slice(&magic);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(PAGE_BYTES as u32).to_le_bytes());
    h[16..24].copy_from_slice(&page_count.to_le_bytes());
    h[24..32].copy_from_slice(&created_us.to_le_bytes());
    let c = crc(&h[0..60]);
    h[60..64].copy_from_slice(&c.to_le_bytes());
    h
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Writes all of `bufs` at the file's current position, resuming after partial writes.
fn write_all_vectored(file: &mut File, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match file.write_vectored(bufs) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes a page file front to back. Dropping it before [`PageFileWriter::finish`] removes
/// the file.
#[derive(Debug)]
pub struct PageFileWriter {
    file: File,
    path: PathBuf,
    page_count: u64,
    entries: Vec<IndexEntry>,
    seen: Vec<u64>,
    poisoned: bool,
    done: bool,
    opts: WriteOptions,
}

impl PageFileWriter {
    /// Creates the file at `path` (mode 0600; an existing file or symlink is refused) for
    /// pages below `page_count`, and writes its header.
    ///
    /// # Errors
    /// [`PageFileError::TooManyPages`] if `page_count` exceeds [`MAX_PAGES`];
    /// [`PageFileError::Create`] if the file cannot be created; [`PageFileError::DiskFull`] or
    /// [`PageFileError::Io`] if the header cannot be written (the file is removed).
    pub fn create(
        path: &Path,
        magic: [u8; 8],
        page_count: u64,
        opts: WriteOptions,
    ) -> Result<Self, PageFileError> {
        if page_count > MAX_PAGES {
            return Err(PageFileError::TooManyPages(page_count));
        }
        let words = usize::try_from(page_count.div_ceil(64))
            .map_err(|_| PageFileError::TooManyPages(page_count))?;
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|source| PageFileError::Create {
                path: path.to_owned(),
                source,
            })?;
        let mut w = PageFileWriter {
            file,
            path: path.to_owned(),
            page_count,
            entries: crate::own_memory::vec_in_own_arena(),
            seen: vec![0; words],
            poisoned: false,
            done: false,
            opts,
        };
        let mut block = vec![0u8; HEADER_BYTES as usize];
        block[..HEADER_USED].copy_from_slice(&encode_header(magic, page_count, now_us()));
        w.file
            .write_all(&block)
            .map_err(|e| PageFileError::from_io("writing the header", e))?;
        Ok(w)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Pages written so far.
    pub fn pages_written(&self) -> u32 {
        self.entries.len() as u32
    }

    /// Appends `pages` (each `(guest page, its 4096 bytes)`) with one vectored write, in
    /// order, and returns the slots they got: `pages[i]` is in slot `range.start + i`.
    ///
    /// Every page is validated before anything is written; a validation error leaves the
    /// writer usable. An I/O error poisons it (drop it: the file is removed).
    ///
    /// # Errors
    /// [`PageFileError::BadPageLen`], [`PageFileError::PageOutOfRange`],
    /// [`PageFileError::DuplicatePage`] for bad input; [`PageFileError::DiskFull`] if the disk
    /// is full; [`PageFileError::Io`] for other host errors; [`PageFileError::Poisoned`] after
    /// an earlier I/O error.
    pub fn write_batch(
        &mut self,
        pages: &[(PageIdx, &[u8])],
    ) -> Result<std::ops::Range<u32>, PageFileError> {
        if self.poisoned || self.done {
            return Err(PageFileError::Poisoned);
        }
        let first = self.entries.len() as u64;
        // Slots cannot exceed u32: every page is distinct and below page_count <= MAX_PAGES = u32::MAX.
        let mut marked: Vec<u64> = Vec::with_capacity(pages.len());
        let mut bad = None;
        for &(page, data) in pages {
            if data.len() != PAGE_BYTES {
                bad = Some(PageFileError::BadPageLen {
                    page,
                    len: data.len(),
                });
                break;
            }
            if page.0 >= self.page_count {
                bad = Some(PageFileError::PageOutOfRange {
                    page,
                    pages: self.page_count,
                });
                break;
            }
            let (w, b) = ((page.0 / 64) as usize, 1u64 << (page.0 % 64));
            if self.seen[w] & b != 0 {
                bad = Some(PageFileError::DuplicatePage(page));
                break;
            }
            // Marked now to catch duplicates within the batch; unmarked below on error.
            self.seen[w] |= b;
            marked.push(page.0);
        }
        if let Some(e) = bad {
            for p in marked {
                self.seen[(p / 64) as usize] &= !(1u64 << (p % 64));
            }
            return Err(e);
        }
        let mut iov: Vec<IoSlice<'_>> = pages.iter().map(|&(_, d)| IoSlice::new(d)).collect();
        if let Err(e) = write_all_vectored(&mut self.file, &mut iov) {
            self.poisoned = true;
            return Err(PageFileError::from_io("writing pages", e));
        }
        for &(page, data) in pages {
            self.entries.push(IndexEntry::new(page, crc(data)));
        }
        let end = self.entries.len() as u64;
        Ok(first as u32..end as u32)
    }

    /// Writes the index and trailer (and `fdatasync`s if asked) and returns the index.
    ///
    /// # Errors
    /// [`PageFileError::DiskFull`] or [`PageFileError::Io`] if writing fails (the file is
    /// removed); [`PageFileError::Poisoned`] after an earlier I/O error.
    pub fn finish(mut self) -> Result<PageIndex, PageFileError> {
        if self.poisoned {
            return Err(PageFileError::Poisoned);
        }
        let mut index = Vec::with_capacity(self.entries.len() * ENTRY_BYTES as usize);
        for (slot, e) in self.entries.iter().enumerate() {
            index.extend_from_slice(&e.page().0.to_le_bytes());
            index.extend_from_slice(&(slot as u32).to_le_bytes());
            index.extend_from_slice(&e.crc.to_le_bytes());
        }
        let count = self.entries.len() as u64;
        let mut t = [0u8; TRAILER_BYTES as usize];
        t[0..8].copy_from_slice(&TRAILER_MAGIC);
        t[8..16].copy_from_slice(&slot_offset(count).to_le_bytes());
        t[16..24].copy_from_slice(&count.to_le_bytes());
        t[24..28].copy_from_slice(&crc(&index).to_le_bytes());
        let tc = crc(&t[0..28]);
        t[28..32].copy_from_slice(&tc.to_le_bytes());
        let mut iov = [IoSlice::new(&index), IoSlice::new(&t)];
        if let Err(e) = write_all_vectored(&mut self.file, &mut iov) {
            self.poisoned = true;
            return Err(PageFileError::from_io("writing the index", e));
        }
        if self.opts.sync {
            if let Err(e) = self.file.sync_data() {
                self.poisoned = true;
                return Err(PageFileError::from_io("syncing", e));
            }
        }
        self.done = true;
        Ok(PageIndex::from_entries(std::mem::take(&mut self.entries)))
    }
}

impl Drop for PageFileWriter {
    fn drop(&mut self) {
        if !self.done {
            if let Err(e) = std::fs::remove_file(&self.path) {
                tracing::warn!(
                    "cannot remove unfinished page file {}: {e}",
                    self.path.display()
                );
            }
        }
    }
}

/// Reads a validated page file.
#[derive(Debug)]
pub struct PageFileReader {
    file: File,
    path: PathBuf,
    page_count: u64,
    created_us: u64,
    index: PageIndex,
}

impl PageFileReader {
    /// Tells the host kernel the whole file will be read soon, sequentially, so that its
    /// readahead overlaps the reads with the caller's work (a REAP prefetch).
    pub fn advise_sequential(&self) {
        use std::os::fd::AsRawFd;
        // SAFETY: advisory calls on our own fd; failures only lose the hint.
        unsafe {
            libc::posix_fadvise(self.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL);
            libc::posix_fadvise(self.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_WILLNEED);
        }
    }

    /// Opens `path` (never following a symlink) and validates it completely (see the module
    /// doc) except for page contents, which are checked as they are read.
    ///
    /// # Errors
    /// [`PageFileError::Open`] if it cannot be opened; [`PageFileError::Truncated`],
    /// [`PageFileError::BadMagic`], [`PageFileError::UnsupportedVersion`],
    /// [`PageFileError::BadPageSize`], [`PageFileError::HeaderChecksum`],
    /// [`PageFileError::BadTrailer`], [`PageFileError::IndexChecksum`],
    /// [`PageFileError::BadIndex`], [`PageFileError::PageOutOfRange`] or
    /// [`PageFileError::DuplicatePage`] for a damaged file; [`PageFileError::Io`] on a read
    /// error.
    pub fn open(path: &Path, magic: [u8; 8]) -> Result<Self, PageFileError> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|source| PageFileError::Open {
                path: path.to_owned(),
                source,
            })?;
        let md = file
            .metadata()
            .map_err(|e| PageFileError::from_io("reading metadata", e))?;
        if !md.is_file() {
            return Err(PageFileError::Open {
                path: path.to_owned(),
                source: io::Error::from_raw_os_error(libc::EINVAL),
            });
        }
        let len = md.len();
        if len < HEADER_BYTES + TRAILER_BYTES {
            return Err(PageFileError::Truncated {
                expected: HEADER_BYTES + TRAILER_BYTES,
                len,
            });
        }
        let read_at = |buf: &mut [u8], off: u64, what: &'static str| {
            file.read_exact_at(buf, off).map_err(|e| match e.kind() {
                io::ErrorKind::UnexpectedEof => PageFileError::Truncated { expected: 0, len },
                _ => PageFileError::from_io(what, e),
            })
        };
        let mut h = [0u8; HEADER_USED];
        read_at(&mut h, 0, "reading the header")?;
        let mut found = [0u8; 8];
        found.copy_from_slice(&h[0..8]);
        if found != magic {
            return Err(PageFileError::BadMagic {
                found,
                expected: magic,
            });
        }
        if crc(&h[0..60]) != le_u32(&h, 60) {
            return Err(PageFileError::HeaderChecksum);
        }
        let version = le_u32(&h, 8);
        if version != VERSION {
            return Err(PageFileError::UnsupportedVersion(version));
        }
        let page_size = le_u32(&h, 12);
        if page_size as usize != PAGE_BYTES {
            return Err(PageFileError::BadPageSize(page_size));
        }
        let page_count = le_u64(&h, 16);
        let created_us = le_u64(&h, 24);
        if page_count > MAX_PAGES {
            return Err(PageFileError::TooManyPages(page_count));
        }

        let mut t = [0u8; TRAILER_BYTES as usize];
        read_at(&mut t, len - TRAILER_BYTES, "reading the trailer")?;
        if t[0..8] != TRAILER_MAGIC {
            return Err(PageFileError::BadTrailer(
                "no trailer magic (unfinished or truncated)",
            ));
        }
        if crc(&t[0..28]) != le_u32(&t, 28) {
            return Err(PageFileError::BadTrailer("trailer checksum mismatch"));
        }
        let index_off = le_u64(&t, 8);
        let count = le_u64(&t, 16);
        let index_crc = le_u32(&t, 24);
        if count > page_count {
            return Err(PageFileError::BadTrailer("more entries than pages"));
        }
        // count <= u32::MAX, so none of this overflows.
        if index_off != slot_offset(count) {
            return Err(PageFileError::BadTrailer(
                "index offset does not follow the data",
            ));
        }
        let expected = index_off + count * ENTRY_BYTES + TRAILER_BYTES;
        if len != expected {
            return Err(PageFileError::Truncated { expected, len });
        }
        // Bounded by the file's real length, checked just above.
        let mut raw = vec![0u8; (count * ENTRY_BYTES) as usize];
        read_at(&mut raw, index_off, "reading the index")?;
        if crc(&raw) != index_crc {
            return Err(PageFileError::IndexChecksum);
        }
        let mut entries = Vec::with_capacity(count as usize);
        for (s, e) in raw.chunks_exact(ENTRY_BYTES as usize).enumerate() {
            let page = PageIdx(le_u64(e, 0));
            let slot = le_u32(e, 8);
            if u64::from(slot) != s as u64 {
                return Err(PageFileError::BadIndex {
                    entry: s as u64,
                    reason: "slot out of order",
                });
            }
            if page.0 >= page_count {
                return Err(PageFileError::PageOutOfRange {
                    page,
                    pages: page_count,
                });
            }
            entries.push(IndexEntry::new(page, le_u32(e, 12)));
        }
        let index = PageIndex::from_entries(entries);
        if let Some(page) = index.repeated_page() {
            return Err(PageFileError::DuplicatePage(page));
        }
        Ok(PageFileReader {
            file,
            path: path.to_owned(),
            page_count,
            created_us,
            index,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Guest pages the file covers (from its header).
    pub fn page_count(&self) -> u64 {
        self.page_count
    }

    /// Creation time, µs since the epoch (from its header).
    pub fn created_us(&self) -> u64 {
        self.created_us
    }

    /// The file's index.
    pub fn index(&self) -> &PageIndex {
        &self.index
    }

    /// Number of slots (pages) in the file.
    pub fn slots(&self) -> u32 {
        self.index.len() as u32
    }

    /// Reads and verifies `page` into `buf`.
    ///
    /// # Errors
    /// [`PageFileError::UnknownPage`] if the file does not hold it;
    /// [`PageFileError::ChecksumMismatch`] if its bytes are damaged;
    /// [`PageFileError::Truncated`] if the file was cut short since it was opened;
    /// [`PageFileError::Io`] on a read error. `buf` is zeroed on every error.
    pub fn read_page(
        &self,
        page: PageIdx,
        buf: &mut [u8; PAGE_BYTES],
    ) -> Result<(), PageFileError> {
        let Some((slot, _)) = self.index.lookup(page) else {
            buf.fill(0);
            return Err(PageFileError::UnknownPage(page));
        };
        self.read_slots_into(slot, 1, buf)
    }

    /// Reads `count` consecutive slots from `first` with one read into `buf` (exactly
    /// `count * 4096` bytes) and verifies every page.
    ///
    /// # Errors
    /// [`PageFileError::BufferSize`], [`PageFileError::SlotOutOfRange`] for bad arguments;
    /// otherwise as [`PageFileReader::read_page`]. `buf` is zeroed on every error.
    pub fn read_slots_into(
        &self,
        first: u32,
        count: u32,
        buf: &mut [u8],
    ) -> Result<(), PageFileError> {
        let r = self.read_slots_unchecked_zeroing(first, count, buf);
        if r.is_err() {
            buf.fill(0);
        }
        r
    }

    fn read_slots_unchecked_zeroing(
        &self,
        first: u32,
        count: u32,
        buf: &mut [u8],
    ) -> Result<(), PageFileError> {
        let expected = count as usize * PAGE_BYTES;
        if buf.len() != expected {
            return Err(PageFileError::BufferSize {
                len: buf.len(),
                expected,
            });
        }
        let slots = self.slots();
        if u64::from(first) + u64::from(count) > u64::from(slots) {
            return Err(PageFileError::SlotOutOfRange {
                first,
                count,
                slots,
            });
        }
        self.file
            .read_exact_at(buf, slot_offset(u64::from(first)))
            .map_err(|e| match e.kind() {
                io::ErrorKind::UnexpectedEof => PageFileError::Truncated {
                    expected: slot_offset(u64::from(first) + u64::from(count)),
                    len: self.file.metadata().map_or(0, |m| m.len()),
                },
                _ => PageFileError::from_io("reading pages", e),
            })?;
        for (k, page) in buf.chunks_exact(PAGE_BYTES).enumerate() {
            let e = &self.index.entries[first as usize + k];
            if crc(page) != e.crc {
                return Err(PageFileError::ChecksumMismatch { page: e.page() });
            }
        }
        Ok(())
    }

    /// Streams the whole file in slot order: reads up to `batch_bytes` (rounded down to whole
    /// pages, at least one) with each read, verifies every page, and hands each batch to `f`.
    /// Stops at the first error, from the file or from `f`.
    ///
    /// # Errors
    /// As [`PageFileReader::read_slots_into`], converted into `E`; or whatever `f` returns.
    pub fn read_batches<E, F>(&self, batch_bytes: usize, mut f: F) -> Result<(), E>
    where
        E: From<PageFileError>,
        F: FnMut(PageBatch<'_>) -> Result<(), E>,
    {
        let per = (batch_bytes / PAGE_BYTES).clamp(1, u32::MAX as usize) as u32;
        let slots = self.slots();
        let mut buf = vec![0u8; per.min(slots) as usize * PAGE_BYTES];
        let mut first = 0u32;
        while first < slots {
            let n = per.min(slots - first);
            let data = &mut buf[..n as usize * PAGE_BYTES];
            self.read_slots_into(first, n, data)?;
            let entries = &self.index.entries[first as usize..(first + n) as usize];
            f(PageBatch { entries, data })?;
            first += n;
        }
        Ok(())
    }

    /// Removes the file (the open reader keeps working until dropped).
    ///
    /// # Errors
    /// [`PageFileError::Io`] if it cannot be removed.
    pub fn remove(&self) -> Result<(), PageFileError> {
        remove(&self.path)
    }
}

/// Removes a page file; a missing file is not an error.
///
/// # Errors
/// [`PageFileError::Io`] for any other failure.
pub fn remove(path: &Path) -> Result<(), PageFileError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(PageFileError::Io {
            op: "removing a page file",
            source: e,
        }),
    }
}

/// A batch of verified pages read by [`PageFileReader::read_batches`].
#[derive(Clone, Copy, Debug)]
pub struct PageBatch<'a> {
    /// Index entries of the pages, in slot order.
    pub entries: &'a [IndexEntry],
    /// Their bytes: page `k` of the batch at `k * 4096`.
    pub data: &'a [u8],
}

impl<'a> PageBatch<'a> {
    /// Number of pages.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Iterates over `(page, its 4096 bytes)`.
    pub fn pages(&self) -> impl Iterator<Item = (PageIdx, &'a [u8])> + 'a {
        let data = self.data;
        self.entries
            .iter()
            .zip(data.chunks_exact(PAGE_BYTES))
            .map(|(e, d)| (e.page(), d))
    }
    /// Iterates over maximal runs of consecutive guest pages, as `(first page, bytes)`: each
    /// run can be installed with one copy into guest memory.
    pub fn runs(&self) -> impl Iterator<Item = (PageIdx, &'a [u8])> + 'a {
        let entries = self.entries;
        let data = self.data;
        let mut i = 0usize;
        std::iter::from_fn(move || {
            if i >= entries.len() {
                return None;
            }
            let start = i;
            i += 1;
            while i < entries.len() && entries[i].page == entries[i - 1].page.wrapping_add(1) {
                i += 1;
            }
            Some((
                entries[start].page(),
                &data[start * PAGE_BYTES..i * PAGE_BYTES],
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    #[test]
    fn page_count_limit() {
        let t = TempDir::new();
        let p = t.path().join("f");
        let e = PageFileWriter::create(&p, *b"TESTTEST", MAX_PAGES + 1, WriteOptions::default());
        assert!(matches!(e, Err(PageFileError::TooManyPages(_))));
        assert!(!p.exists());
        let w = PageFileWriter::create(&p, *b"TESTTEST", 8, WriteOptions { sync: true }).unwrap();
        assert_eq!(w.path(), p);
        w.finish().unwrap();
        let r = PageFileReader::open(&p, *b"TESTTEST").unwrap();
        assert_eq!(r.page_count(), 8);
        assert!(r.created_us() > 1_600_000_000_000_000);
    }
}
