//! The page-state map: where each 4 KiB page of guest-physical memory lives right now
//! (resident in host memory, returned to the host, known zero, in the swap file, or in the
//! REAP file).
//!
//! One `u32` per page (0.1 % of guest memory), tagged: the top three bits give the kind, the
//! low 29 bits the slot in the swap or REAP file. Slots therefore stop at [`MAX_SLOT`]
//! (2^29 - 1 pages, 2 TiB), far above any sandbox's memory limit. Counts per kind are kept up
//! to date on every change, so [`PageStateMap::counts`] costs nothing.
//!
//! The map is plain data with no lock of its own: deflate fills it while every vCPU is parked,
//! and the userfaultfd handler owns it (or takes the caller's lock) while the sandbox is woken.

use std::fmt;

use platform::{Gpa, PAGE_SHIFT, PAGE_SIZE};
use serde::Serialize;

/// Errors of the page-state map.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PageStateError {
    /// The page lies outside the guest memory the map covers.
    #[error("page {page} is outside guest memory ({pages} pages)")]
    OutOfRange {
        /// The page asked for.
        page: PageIdx,
        /// Pages the map covers.
        pages: u64,
    },
    /// A swap or REAP slot does not fit the map's encoding.
    #[error("slot {0} exceeds the page-state map's limit of {MAX_SLOT}")]
    SlotTooLarge(u64),
}

/// Index of a guest-physical page: its guest-physical address divided by [`PAGE_SIZE`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct PageIdx(pub u64);

impl PageIdx {
    /// The page containing `gpa` (an unaligned address names the page it falls in).
    pub const fn containing(gpa: Gpa) -> Self {
        PageIdx(gpa.raw() >> PAGE_SHIFT)
    }
    /// The raw index.
    pub const fn raw(self) -> u64 {
        self.0
    }
    /// Guest-physical address of the page's first byte, or `None` on overflow.
    pub const fn gpa(self) -> Option<Gpa> {
        match self.0.checked_mul(PAGE_SIZE) {
            Some(a) => Some(Gpa(a)),
            None => None,
        }
    }
}

impl fmt::Debug for PageIdx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PageIdx({:#x})", self.0)
    }
}

impl fmt::Display for PageIdx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Largest slot the map can record.
pub const MAX_SLOT: u32 = (1 << 29) - 1;

const TAG_SHIFT: u32 = 29;
const SLOT_MASK: u32 = MAX_SLOT;

/// Where one guest page lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageState {
    /// In host memory (also the state of a never-touched page before the first deflate).
    Resident,
    /// Returned to the host (MADV_DONTNEED) because the guest's allocator holds it free; its
    /// contents do not matter.
    Free,
    /// Known to be all zero: not written to any file; served with UFFDIO_ZEROPAGE.
    Zero,
    /// In the swap file at this slot.
    Swapped {
        /// Slot in the swap file.
        slot: u32,
    },
    /// In the REAP file at this slot.
    Reap {
        /// Slot in the REAP file.
        slot: u32,
    },
    /// A clean page of a read-only file mapping, dropped: its bytes are in the mapped file, at
    /// the location entry `slot` of the sandbox's file-page table records.
    File {
        /// Entry in the file-page table.
        slot: u32,
    },
    /// In host memory, brought back from the swap at this slot and installed write-protected:
    /// while the host's write-protect bit on it is still set, the slot holds its bytes and the
    /// next deflate need not write it again.
    Cached {
        /// Slot in the swap.
        slot: u32,
    },
}

/// The kind of a [`PageState`], without its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageKind {
    /// [`PageState::Resident`].
    Resident,
    /// [`PageState::Free`].
    Free,
    /// [`PageState::Zero`].
    Zero,
    /// [`PageState::Swapped`].
    Swapped,
    /// [`PageState::Reap`].
    Reap,
    /// [`PageState::File`].
    File,
    /// [`PageState::Cached`].
    Cached,
}

impl PageKind {
    /// Whether pages of this kind carry a slot.
    pub const fn has_slot(self) -> bool {
        matches!(
            self,
            PageKind::Swapped | PageKind::Reap | PageKind::File | PageKind::Cached
        )
    }
    const fn tag(self) -> u32 {
        match self {
            // Free is 0: a map of free pages is all zero, and the untouched parts of its
            // (calloc'd) array take no host memory.
            PageKind::Free => 0,
            PageKind::Resident => 1,
            PageKind::Zero => 2,
            PageKind::Swapped => 3,
            PageKind::Reap => 4,
            PageKind::File => 5,
            PageKind::Cached => 6,
        }
    }
}

impl PageState {
    /// Its kind.
    pub const fn kind(self) -> PageKind {
        match self {
            PageState::Resident => PageKind::Resident,
            PageState::Free => PageKind::Free,
            PageState::Zero => PageKind::Zero,
            PageState::Swapped { .. } => PageKind::Swapped,
            PageState::Reap { .. } => PageKind::Reap,
            PageState::File { .. } => PageKind::File,
            PageState::Cached { .. } => PageKind::Cached,
        }
    }

    /// Its slot, for swapped, REAP, file and cached pages.
    pub const fn slot(self) -> Option<u32> {
        match self {
            PageState::Swapped { slot }
            | PageState::Reap { slot }
            | PageState::File { slot }
            | PageState::Cached { slot } => Some(slot),
            _ => None,
        }
    }

    fn encode(self) -> Result<u32, PageStateError> {
        let slot = self.slot().unwrap_or(0);
        if slot > MAX_SLOT {
            return Err(PageStateError::SlotTooLarge(u64::from(slot)));
        }
        Ok((self.kind().tag() << TAG_SHIFT) | slot)
    }

    fn decode(v: u32) -> Self {
        let slot = v & SLOT_MASK;
        match v >> TAG_SHIFT {
            0 => PageState::Free,
            1 => PageState::Resident,
            2 => PageState::Zero,
            3 => PageState::Swapped { slot },
            4 => PageState::Reap { slot },
            5 => PageState::File { slot },
            // Only `encode` writes entries, and it writes tags 0..=6.
            _ => PageState::Cached { slot },
        }
    }
}

/// Pages in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PageCounts {
    /// Resident pages.
    pub resident: u64,
    /// Pages returned to the host.
    pub free: u64,
    /// Known-zero pages.
    pub zero: u64,
    /// Pages in the swap file.
    pub swapped: u64,
    /// Pages in the REAP file.
    pub reap: u64,
    /// Clean file pages dropped (read back from their files).
    pub file: u64,
    /// Resident pages with a clean copy in the swap.
    pub cached: u64,
}

impl PageCounts {
    fn slot_mut(&mut self, kind: PageKind) -> &mut u64 {
        match kind {
            PageKind::Resident => &mut self.resident,
            PageKind::Free => &mut self.free,
            PageKind::Zero => &mut self.zero,
            PageKind::Swapped => &mut self.swapped,
            PageKind::Reap => &mut self.reap,
            PageKind::File => &mut self.file,
            PageKind::Cached => &mut self.cached,
        }
    }
    /// Pages of `kind`.
    pub fn get(&self, kind: PageKind) -> u64 {
        match kind {
            PageKind::Resident => self.resident,
            PageKind::Free => self.free,
            PageKind::Zero => self.zero,
            PageKind::Swapped => self.swapped,
            PageKind::Reap => self.reap,
            PageKind::File => self.file,
            PageKind::Cached => self.cached,
        }
    }
}

/// A run of consecutive pages of one kind; for swapped and REAP pages their slots are
/// consecutive too, so the run is one sequential read of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageRun {
    /// First page.
    pub first: PageIdx,
    /// Number of pages (at least 1).
    pub count: u64,
    /// Slot of the first page, for swapped and REAP runs.
    pub first_slot: Option<u32>,
}

/// The state of every page of guest-physical memory.
#[derive(Clone)]
pub struct PageStateMap {
    entries: Entries,
    counts: PageCounts,
}

/// The map's array: a private anonymous mapping of its own, zero-filled by the host as its
/// pages are first written (reads of a page never written cost no memory either), so that a
/// map of a large sandbox's memory costs only the pages that describe pages it used.
///
/// Not a `Vec`: the allocator may serve one from memory it had freed, which it clears
/// whole, and then a 2 GiB sandbox's map costs 2 MiB for as long as it lives, hibernated
/// included (as it did once the application had made the allocator raise its mmap
/// threshold).
struct Entries {
    ptr: std::ptr::NonNull<u32>,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone and accessed only through `&self` /
// `&mut self`, as a `Vec<u32>`'s buffer would be.
unsafe impl Send for Entries {}
// SAFETY: as above.
unsafe impl Sync for Entries {}

impl Entries {
    /// `len` zero entries.
    fn zeroed(len: usize) -> Result<Entries, PageStateError> {
        let too_big = || PageStateError::OutOfRange {
            page: PageIdx(len as u64),
            pages: len as u64,
        };
        if len == 0 {
            return Ok(Entries {
                ptr: std::ptr::NonNull::dangling(),
                len,
            });
        }
        let bytes = len.checked_mul(4).ok_or_else(too_big)?;
        // SAFETY: a fresh private anonymous mapping chosen by the kernel.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(too_big());
        }
        Ok(Entries {
            ptr: std::ptr::NonNull::new(p.cast()).ok_or_else(too_big)?,
            len,
        })
    }
}

impl std::ops::Deref for Entries {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        // SAFETY: `len` initialised (zero-filled) entries in our mapping, or dangling and 0.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for Entries {
    fn deref_mut(&mut self) -> &mut [u32] {
        // SAFETY: as `deref`, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for Entries {
    /// A copy that writes only the source's non-zero pages (the others stay unbacked).
    ///
    /// # Panics
    /// If the host refuses the copy's mapping (as a `Vec`'s clone aborts without memory).
    fn clone(&self) -> Entries {
        let mut copy = match Entries::zeroed(self.len) {
            Ok(c) => c,
            Err(e) => panic!("page-state map copy: {e}"),
        };
        const PER_PAGE: usize = PAGE_SIZE as usize / 4;
        for (dst, src) in copy.chunks_mut(PER_PAGE).zip(self.chunks(PER_PAGE)) {
            if src.iter().any(|&e| e != 0) {
                dst.copy_from_slice(src);
            }
        }
        copy
    }
}

impl Drop for Entries {
    fn drop(&mut self) {
        if self.len != 0 {
            // SAFETY: our own mapping of `len * 4` bytes; nothing borrows it any more.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len * 4) };
        }
    }
}

impl fmt::Debug for PageStateMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageStateMap")
            .field("pages", &self.entries.len())
            .field("counts", &self.counts)
            .finish()
    }
}

impl PageStateMap {
    /// A map of `pages` pages, all [`PageState::Resident`].
    ///
    /// # Errors
    /// None in practice; [`PageStateError::OutOfRange`] if `pages` does not fit this host's
    /// address space.
    pub fn new(pages: u64) -> Result<Self, PageStateError> {
        let n = usize::try_from(pages).map_err(|_| PageStateError::OutOfRange {
            page: PageIdx(pages),
            pages,
        })?;
        let resident = PageState::Resident.encode()?;
        let mut entries = Entries::zeroed(n)?;
        entries.fill(resident);
        Ok(PageStateMap {
            entries,
            counts: PageCounts {
                resident: pages,
                ..PageCounts::default()
            },
        })
    }

    /// A map of `pages` pages, all [`PageState::Free`]: what the hibernate engine starts from
    /// (before the first deflate nothing reads it, and the deflate sets every page the
    /// application holds). Its array is zero-filled lazily by the host: pages of the map that
    /// only ever describe free guest pages cost no memory ([`Entries`]).
    ///
    /// # Errors
    /// As [`PageStateMap::new`].
    pub fn new_all_free(pages: u64) -> Result<Self, PageStateError> {
        let n = usize::try_from(pages).map_err(|_| PageStateError::OutOfRange {
            page: PageIdx(pages),
            pages,
        })?;
        Ok(PageStateMap {
            entries: Entries::zeroed(n)?,
            counts: PageCounts {
                free: pages,
                ..PageCounts::default()
            },
        })
    }

    /// A map covering `bytes` of guest memory (rounded up to whole pages).
    ///
    /// # Errors
    /// As [`PageStateMap::new`].
    pub fn for_memory_size(bytes: u64) -> Result<Self, PageStateError> {
        Self::new(bytes.div_ceil(PAGE_SIZE))
    }

    /// Pages covered.
    pub fn len(&self) -> u64 {
        self.entries.len() as u64
    }

    /// Whether the map covers no page.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn index(&self, page: PageIdx) -> Result<usize, PageStateError> {
        match usize::try_from(page.0) {
            Ok(i) if i < self.entries.len() => Ok(i),
            _ => Err(PageStateError::OutOfRange {
                page,
                pages: self.len(),
            }),
        }
    }

    /// State of `page`.
    ///
    /// # Errors
    /// [`PageStateError::OutOfRange`] if the page is outside the map.
    pub fn get(&self, page: PageIdx) -> Result<PageState, PageStateError> {
        let i = self.index(page)?;
        Ok(PageState::decode(self.entries[i]))
    }

    /// State of the page containing `gpa`.
    ///
    /// # Errors
    /// [`PageStateError::OutOfRange`] if it is outside the map.
    pub fn get_gpa(&self, gpa: Gpa) -> Result<PageState, PageStateError> {
        self.get(PageIdx::containing(gpa))
    }

    /// Sets the state of `page`, returning the previous one.
    ///
    /// # Errors
    /// [`PageStateError::OutOfRange`] if the page is outside the map;
    /// [`PageStateError::SlotTooLarge`] if the slot exceeds [`MAX_SLOT`]. The map is unchanged
    /// on error.
    pub fn set(&mut self, page: PageIdx, state: PageState) -> Result<PageState, PageStateError> {
        let i = self.index(page)?;
        let v = state.encode()?;
        let old = PageState::decode(self.entries[i]);
        if self.entries[i] != v {
            // Unchanged entries are not written: the map's untouched pages stay unbacked.
            self.entries[i] = v;
        }
        *self.counts.slot_mut(old.kind()) -= 1;
        *self.counts.slot_mut(state.kind()) += 1;
        Ok(old)
    }

    /// Sets the state of the page containing `gpa`, returning the previous one.
    ///
    /// # Errors
    /// As [`PageStateMap::set`].
    pub fn set_gpa(&mut self, gpa: Gpa, state: PageState) -> Result<PageState, PageStateError> {
        self.set(PageIdx::containing(gpa), state)
    }

    /// Sets `count` pages from `first` to `state`. For a slotted state the slot grows by one
    /// per page (`first` gets `state`'s slot, `first + 1` the next, …), matching a run written
    /// with one sequential write.
    ///
    /// # Errors
    /// [`PageStateError::OutOfRange`] if the range leaves the map;
    /// [`PageStateError::SlotTooLarge`] if the last slot exceeds [`MAX_SLOT`]. The map is
    /// unchanged on error.
    pub fn set_range(
        &mut self,
        first: PageIdx,
        count: u64,
        state: PageState,
    ) -> Result<(), PageStateError> {
        if count == 0 {
            return Ok(());
        }
        let start = self.index(first)?;
        let last = PageIdx(
            first
                .0
                .checked_add(count - 1)
                .ok_or(PageStateError::OutOfRange {
                    page: PageIdx(u64::MAX),
                    pages: self.len(),
                })?,
        );
        let end = self.index(last)? + 1;
        if let Some(slot) = state.slot() {
            let last_slot = u64::from(slot) + (count - 1);
            if last_slot > u64::from(MAX_SLOT) {
                return Err(PageStateError::SlotTooLarge(last_slot));
            }
        }
        let kind = state.kind();
        let base = state.encode()?;
        for (k, e) in self.entries[start..end].iter_mut().enumerate() {
            let old = PageState::decode(*e).kind();
            *self.counts.slot_mut(old) -= 1;
            // Cannot overflow the slot bits: the last slot was checked above.
            let v = if kind.has_slot() {
                base + k as u32
            } else {
                base
            };
            if *e != v {
                *e = v;
            }
        }
        *self.counts.slot_mut(kind) += count;
        Ok(())
    }

    /// Pages in each state.
    pub fn counts(&self) -> PageCounts {
        self.counts
    }

    /// Iterates over the page indices and states of all pages.
    pub fn iter(&self) -> impl Iterator<Item = (PageIdx, PageState)> + '_ {
        self.entries
            .iter()
            .enumerate()
            .map(|(i, &v)| (PageIdx(i as u64), PageState::decode(v)))
    }

    /// Iterates, in page order, over the maximal runs of pages of `kind` (with consecutive
    /// slots for slotted kinds), each cut to at most `max_pages` pages (0 means no limit).
    pub fn runs(&self, kind: PageKind, max_pages: u64) -> Runs<'_> {
        Runs {
            map: self,
            kind,
            next: 0,
            max: if max_pages == 0 { u64::MAX } else { max_pages },
        }
    }
}

/// Iterator returned by [`PageStateMap::runs`].
pub struct Runs<'a> {
    map: &'a PageStateMap,
    kind: PageKind,
    next: usize,
    max: u64,
}

impl Iterator for Runs<'_> {
    type Item = PageRun;

    fn next(&mut self) -> Option<PageRun> {
        let e = &self.map.entries;
        let tag = self.kind.tag();
        let mut i = self.next;
        while i < e.len() && e[i] >> TAG_SHIFT != tag {
            i += 1;
        }
        if i >= e.len() {
            self.next = i;
            return None;
        }
        let first = PageState::decode(e[i]);
        let mut count: u64 = 1;
        let mut j = i + 1;
        while j < e.len() && count < self.max {
            let s = PageState::decode(e[j]);
            let joins = match (first.slot(), s.slot()) {
                _ if s.kind() != self.kind => false,
                (Some(a), Some(b)) => u64::from(b) == u64::from(a) + count,
                _ => true,
            };
            if !joins {
                break;
            }
            count += 1;
            j += 1;
        }
        self.next = j;
        Some(PageRun {
            first: PageIdx(i as u64),
            count,
            first_slot: first.slot(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_every_kind() {
        for s in [
            PageState::Resident,
            PageState::Free,
            PageState::Zero,
            PageState::Swapped { slot: 0 },
            PageState::Swapped { slot: MAX_SLOT },
            PageState::Reap { slot: 7 },
            PageState::Reap { slot: MAX_SLOT },
            PageState::File { slot: 3 },
            PageState::Cached { slot: 0 },
            PageState::Cached { slot: MAX_SLOT },
        ] {
            assert_eq!(PageState::decode(s.encode().unwrap()), s);
        }
        assert_eq!(
            PageState::Swapped { slot: MAX_SLOT + 1 }.encode(),
            Err(PageStateError::SlotTooLarge(u64::from(MAX_SLOT) + 1))
        );
    }

    /// Pages of a map's array the host backs (mincore).
    fn backed_pages(m: &PageStateMap) -> usize {
        let bytes = m.entries.len() * 4;
        let mut vec = vec![0u8; bytes.div_ceil(PAGE_SIZE as usize)];
        // SAFETY: the map's own mapping and a vector of one byte per page of it.
        let r = unsafe {
            libc::mincore(
                m.entries.ptr.as_ptr().cast(),
                bytes,
                vec.as_mut_ptr().cast(),
            )
        };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 != 0).count()
    }

    /// A map of a 2 GiB sandbox's memory costs the host only the pages of it written, and its
    /// copy only those the original has.
    #[test]
    fn a_large_map_costs_only_what_it_describes() {
        let pages = (2u64 << 30) / PAGE_SIZE;
        let mut m = PageStateMap::new_all_free(pages).unwrap();
        for p in (0..pages).step_by(pages as usize / 8) {
            m.set(PageIdx(p), PageState::Resident).unwrap();
        }
        // 8 of the array's 512 pages written, in each. (Reading the rest maps the host's zero
        // page, which mincore would report too: the copy reads the original's only after.)
        assert_eq!(backed_pages(&m), 8);
        let copy = m.clone();
        assert_eq!(backed_pages(&copy), 8);
        assert_eq!(copy.get(PageIdx(pages / 8)).unwrap(), PageState::Resident);
        assert_eq!(copy.get(PageIdx(1)).unwrap(), PageState::Free);
        assert_eq!(copy.counts(), m.counts());
        let free = m.iter().filter(|(_, s)| *s == PageState::Free).count() as u64;
        assert_eq!(free, pages - 8);
    }

    #[test]
    fn a_map_of_free_pages_is_all_zero() {
        let mut m = PageStateMap::new_all_free(5).unwrap();
        assert_eq!(m.counts().free, 5);
        assert!(m.entries.iter().all(|&e| e == 0));
        assert_eq!(m.set(PageIdx(2), PageState::Free).unwrap(), PageState::Free);
        m.set(PageIdx(3), PageState::Resident).unwrap();
        assert_eq!(m.get(PageIdx(3)).unwrap(), PageState::Resident);
        assert_eq!(m.counts().free, 4);
        assert_eq!(m.counts().resident, 1);
    }

    #[test]
    fn get_set_and_counts() {
        let mut m = PageStateMap::for_memory_size(10 * PAGE_SIZE + 1).unwrap();
        assert_eq!(m.len(), 11);
        assert_eq!(m.counts().resident, 11);
        assert_eq!(
            m.set(PageIdx(3), PageState::Zero).unwrap(),
            PageState::Resident
        );
        assert_eq!(
            m.set_gpa(Gpa(4 * PAGE_SIZE + 17), PageState::Swapped { slot: 9 })
                .unwrap(),
            PageState::Resident
        );
        assert_eq!(m.get(PageIdx(4)).unwrap(), PageState::Swapped { slot: 9 });
        assert_eq!(
            m.get_gpa(Gpa(4 * PAGE_SIZE)).unwrap(),
            PageState::Swapped { slot: 9 }
        );
        assert_eq!(
            m.set(PageIdx(4), PageState::Reap { slot: 1 }).unwrap(),
            PageState::Swapped { slot: 9 }
        );
        m.set(PageIdx(10), PageState::Free).unwrap();
        let c = m.counts();
        assert_eq!(
            c,
            PageCounts {
                resident: 8,
                free: 1,
                zero: 1,
                swapped: 0,
                reap: 1,
                file: 0,
                cached: 0
            }
        );
        assert_eq!(c.get(PageKind::Reap), 1);
        let total: u64 = [c.resident, c.free, c.zero, c.swapped, c.reap, c.file]
            .iter()
            .sum();
        m.set(PageIdx(9), PageState::File { slot: 77 }).unwrap();
        assert_eq!(m.get(PageIdx(9)).unwrap(), PageState::File { slot: 77 });
        assert_eq!(m.counts().file, 1);
        m.set(PageIdx(9), PageState::Cached { slot: 5 }).unwrap();
        assert_eq!(m.get(PageIdx(9)).unwrap(), PageState::Cached { slot: 5 });
        assert_eq!((m.counts().file, m.counts().cached), (0, 1));
        assert_eq!(total, m.len());
    }

    #[test]
    fn out_of_range_and_bad_slot_leave_map_unchanged() {
        let mut m = PageStateMap::new(4).unwrap();
        assert!(matches!(
            m.get(PageIdx(4)),
            Err(PageStateError::OutOfRange { .. })
        ));
        assert!(m.set(PageIdx(u64::MAX), PageState::Zero).is_err());
        assert!(m.get_gpa(Gpa(4 * PAGE_SIZE)).is_err());
        assert!(m
            .set(PageIdx(1), PageState::Swapped { slot: u32::MAX })
            .is_err());
        assert!(m.set_range(PageIdx(2), 3, PageState::Zero).is_err());
        assert!(m
            .set_range(PageIdx(0), 2, PageState::Reap { slot: MAX_SLOT })
            .is_err());
        assert!(m.set_range(PageIdx(1), u64::MAX, PageState::Zero).is_err());
        assert_eq!(m.counts().resident, 4);
        assert!(m.iter().all(|(_, s)| s == PageState::Resident));
        assert_eq!(PageIdx(u64::MAX).gpa(), None);
        assert_eq!(PageIdx(3).gpa(), Some(Gpa(3 * PAGE_SIZE)));
    }

    #[test]
    fn set_range_assigns_consecutive_slots() {
        let mut m = PageStateMap::new(8).unwrap();
        m.set_range(PageIdx(2), 4, PageState::Swapped { slot: 100 })
            .unwrap();
        for k in 0..4 {
            assert_eq!(
                m.get(PageIdx(2 + k)).unwrap(),
                PageState::Swapped {
                    slot: 100 + k as u32
                }
            );
        }
        m.set_range(PageIdx(0), 8, PageState::Free).unwrap();
        assert_eq!(
            m.counts(),
            PageCounts {
                free: 8,
                ..PageCounts::default()
            }
        );
        m.set_range(PageIdx(0), 0, PageState::Zero).unwrap();
        assert_eq!(m.counts().free, 8);
    }

    #[test]
    fn runs_split_on_kind_slot_gap_and_limit() {
        let mut m = PageStateMap::new(12).unwrap();
        // 0..3 swapped slots 0,1,2; 3 swapped slot 9 (gap); 4 zero; 5..7 swapped 3,4.
        m.set_range(PageIdx(0), 3, PageState::Swapped { slot: 0 })
            .unwrap();
        m.set(PageIdx(3), PageState::Swapped { slot: 9 }).unwrap();
        m.set(PageIdx(4), PageState::Zero).unwrap();
        m.set_range(PageIdx(5), 2, PageState::Swapped { slot: 3 })
            .unwrap();
        m.set(PageIdx(11), PageState::Zero).unwrap();
        let runs: Vec<_> = m.runs(PageKind::Swapped, 0).collect();
        assert_eq!(
            runs,
            vec![
                PageRun {
                    first: PageIdx(0),
                    count: 3,
                    first_slot: Some(0)
                },
                PageRun {
                    first: PageIdx(3),
                    count: 1,
                    first_slot: Some(9)
                },
                PageRun {
                    first: PageIdx(5),
                    count: 2,
                    first_slot: Some(3)
                },
            ]
        );
        let runs: Vec<_> = m.runs(PageKind::Swapped, 2).collect();
        assert_eq!(
            runs[0],
            PageRun {
                first: PageIdx(0),
                count: 2,
                first_slot: Some(0)
            }
        );
        assert_eq!(
            runs[1],
            PageRun {
                first: PageIdx(2),
                count: 1,
                first_slot: Some(2)
            }
        );
        let zero: Vec<_> = m.runs(PageKind::Zero, 0).collect();
        assert_eq!(
            zero,
            vec![
                PageRun {
                    first: PageIdx(4),
                    count: 1,
                    first_slot: None
                },
                PageRun {
                    first: PageIdx(11),
                    count: 1,
                    first_slot: None
                },
            ]
        );
        let res: Vec<_> = m.runs(PageKind::Resident, 0).collect();
        assert_eq!(
            res,
            vec![PageRun {
                first: PageIdx(7),
                count: 4,
                first_slot: None
            }]
        );
        assert_eq!(m.runs(PageKind::Reap, 0).count(), 0);
        // A swapped page next to a REAP page with the "next" slot does not join.
        m.set(PageIdx(7), PageState::Reap { slot: 5 }).unwrap();
        assert_eq!(m.runs(PageKind::Swapped, 0).last().unwrap().count, 2);
    }
}
