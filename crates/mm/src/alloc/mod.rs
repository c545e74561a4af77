//! The reclaim-oriented page allocator: hands out and takes back the 4 KiB guest-physical
//! pages above [`layout::RESERVED_END`], keeping memory compact so that whole chunks can go back
//! to the host.
//!
//! ```text
//! guest-physical   RESERVED_END                                           mem.size()
//!                  ├── chunk 0 (4 MiB) ──┼── chunk 1 ──┼── ... ──┼── chunk n-1 ──┤
//! level 1          partial: bit per chunk with both free and used pages
//!                  has_free: bit per chunk with any free page; free count per chunk
//! level 2          free: bit per page             zero: bit per page known to read as zero
//! refcount         u16 per page (0 = free)
//! ```
//!
//! Allocation takes the lowest partially-used chunk (or, when every chunk is full or empty,
//! the lowest empty one), and inside it prefers a free page that is already resident (not known
//! zero) over a never-touched one: memory stays packed low, and the host pays for as few pages
//! as possible. This is the paper's allocator (Quark's bitmap allocator) over one compact
//! guest-physical region.
//!
//! All metadata lives in host memory (plain `Vec`s), never in guest memory: the guest cannot
//! corrupt it (not even through a stray ring-0 write into the direct map), and deflating guest
//! memory at hibernation (MADV_DONTNEED of free pages, swap-out of the rest) never touches it,
//! so the allocator keeps working while the guest's memory is out.
//!
//! "Known zero" pages: every page starts known zero (fresh host memory reads as zero). A page
//! loses the mark when allocated and gets it back through [`PageAllocator::mark_zero`] after
//! its owner returned it to the host (MADV_DONTNEED). [`PageAllocator::alloc`] reports the mark,
//! so callers skip zeroing such pages and the host never materialises them until the guest
//! touches them.
//!
//! For checkpoints, the state is saved and restored as bytes (`image.rs`:
//! [`PageAllocator::export_bytes`], [`PageAllocator::import_bytes`]).

mod bitmap;
mod budget;
mod image;

pub use budget::MemoryBudget;
pub use image::AllocImageError;

use platform::layout;
use platform::{Gpa, PAGE_SHIFT, PAGE_SIZE};

use bitmap::{Bitmap, Runs};

/// Pages per chunk (4 MiB).
pub const CHUNK_PAGES: usize = 1024;
/// Bytes per chunk.
pub const CHUNK_SIZE: u64 = CHUNK_PAGES as u64 * PAGE_SIZE;

/// Errors of reference counting and run marking.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// The address is not a page-aligned allocator page.
    #[error("{0} is not a page managed by the allocator")]
    NotManaged(Gpa),
    /// The page is free: it has no reference to take or drop.
    #[error("page {0} is not allocated")]
    NotAllocated(Gpa),
    /// The page already has 65535 references.
    #[error("reference count of page {0} would overflow")]
    RefcountOverflow(Gpa),
}

/// The page allocator over `[RESERVED_END, mem.size())`.
#[derive(Debug)]
pub struct PageAllocator {
    base: Gpa,
    npages: usize,
    nchunks: usize,
    /// Level 1: chunks with at least one free and one used page.
    partial: Bitmap,
    /// Level 1: chunks with at least one free page.
    has_free: Bitmap,
    /// Free pages per chunk.
    chunk_free: Vec<u16>,
    /// Level 2: free pages.
    free: Bitmap,
    /// Pages known to read as zero (only meaningful for free pages).
    zero: Bitmap,
    /// References per page; 0 for free pages.
    refcount: Vec<u16>,
    free_count: usize,
    /// The sandbox's budget this allocator's pages count against, if any.
    budget: Option<std::sync::Arc<MemoryBudget>>,
    /// Pages below this index may be handed out without asking [`Self::set_grow`]'s hook.
    high_water: usize,
    /// Makes the memory up to a byte offset usable before a page there is handed out.
    grow: Option<GrowHook>,
}

/// The hook of [`PageAllocator::set_grow`]: makes guest-physical `[0, end)` usable (the VM's
/// memslots, `platform::visible`); false if it cannot.
#[derive(Clone)]
pub struct GrowHook(pub std::sync::Arc<dyn Fn(u64) -> bool + Send + Sync>);

impl std::fmt::Debug for GrowHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GrowHook")
    }
}

impl Drop for PageAllocator {
    fn drop(&mut self) {
        // The process is gone: its pages go back to the sandbox's budget.
        if let Some(b) = &self.budget {
            b.give((self.npages - self.free_count) as u64);
        }
    }
}

impl PageAllocator {
    /// An allocator for the pages of a guest memory of `mem_size` bytes above
    /// [`layout::RESERVED_END`]; every page starts free and known zero.
    pub fn new(mem_size: u64) -> Self {
        Self::with_range(layout::RESERVED_END, mem_size)
    }

    /// An allocator for the pages of `[base, end)` (both rounded to pages).
    pub fn with_range(base: Gpa, end: u64) -> Self {
        let base = base.page_up().unwrap_or(Gpa(!(PAGE_SIZE - 1)));
        let npages = (end.saturating_sub(base.0) >> PAGE_SHIFT) as usize;
        let nchunks = npages.div_ceil(CHUNK_PAGES);
        let mut free = Bitmap::new(npages);
        free.set_range(0, npages);
        let mut zero = Bitmap::new(npages);
        zero.set_range(0, npages);
        let mut has_free = Bitmap::new(nchunks);
        has_free.set_range(0, nchunks);
        let chunk_free = (0..nchunks)
            .map(|c| (npages - c * CHUNK_PAGES).min(CHUNK_PAGES) as u16)
            .collect();
        PageAllocator {
            base,
            npages,
            nchunks,
            partial: Bitmap::new(nchunks),
            has_free,
            chunk_free,
            free,
            zero,
            refcount: vec![0; npages],
            free_count: npages,
            budget: None,
            high_water: 0,
            grow: None,
        }
    }

    /// Asks `hook` to make the memory usable up to the end of every page before it is first
    /// handed out (the allocator hands out the lowest pages first, so this grows in steps
    /// with the pages in use). Asks at once for the pages already allocated (a restored
    /// allocator's). Returns false if that first request failed.
    pub fn set_grow(&mut self, hook: GrowHook) -> bool {
        let top = (0..self.npages).rev().find(|&i| self.refcount[i] != 0);
        self.high_water = top.map_or(0, |i| i + 1);
        let ok = top.is_none_or(|i| (hook.0)(self.gpa(i).0 + PAGE_SIZE));
        self.grow = Some(hook);
        ok
    }

    /// The hook given to [`Self::set_grow`].
    pub fn grow_hook(&self) -> Option<&GrowHook> {
        self.grow.as_ref()
    }

    /// First managed guest-physical address.
    pub fn base(&self) -> Gpa {
        self.base
    }

    /// Pages managed.
    pub fn total_pages(&self) -> usize {
        self.npages
    }

    /// Pages free.
    pub fn free_pages(&self) -> usize {
        self.free_count
    }

    /// Pages allocated.
    pub fn used_pages(&self) -> usize {
        self.npages - self.free_count
    }

    /// The references held on allocated pages, all counted: the used pages when none is
    /// shared, more when address spaces of a family map the same frames.
    pub fn references(&self) -> usize {
        self.refcount.iter().map(|&c| usize::from(c)).sum()
    }

    fn chunk_len(&self, c: usize) -> usize {
        (self.npages - c * CHUNK_PAGES).min(CHUNK_PAGES)
    }

    fn gpa(&self, idx: usize) -> Gpa {
        Gpa(self.base.0 + ((idx as u64) << PAGE_SHIFT))
    }

    fn index(&self, gpa: Gpa) -> Result<usize, AllocError> {
        if !gpa.is_page_aligned() || gpa < self.base {
            return Err(AllocError::NotManaged(gpa));
        }
        let idx = ((gpa.0 - self.base.0) >> PAGE_SHIFT) as usize;
        if idx >= self.npages {
            return Err(AllocError::NotManaged(gpa));
        }
        Ok(idx)
    }

    fn update_chunk(&mut self, c: usize) {
        let free = usize::from(self.chunk_free[c]);
        self.has_free.set(c, free > 0);
        self.partial.set(c, free > 0 && free < self.chunk_len(c));
    }

    /// Counts this allocator's pages (those held now, and every later one) against `budget`.
    pub fn set_budget(&mut self, budget: std::sync::Arc<MemoryBudget>) {
        if let Some(old) = self.budget.take() {
            old.give((self.npages - self.free_count) as u64);
        }
        budget.force_take((self.npages - self.free_count) as u64);
        self.budget = Some(budget);
    }

    /// The budget it counts against.
    pub fn budget(&self) -> Option<&std::sync::Arc<MemoryBudget>> {
        self.budget.as_ref()
    }

    /// Allocates one page with a reference count of 1. Returns it and whether it is known to
    /// read as zero (then the caller need not clear it), or `None` when memory is exhausted.
    pub fn alloc(&mut self) -> Option<(Gpa, bool)> {
        if let Some(b) = &self.budget {
            if !b.take() {
                return None;
            }
        }
        let found = self
            .partial
            .first_set(0, self.nchunks)
            .or_else(|| self.has_free.first_set(0, self.nchunks));
        let Some(c) = found else {
            if let Some(b) = &self.budget {
                b.give(1);
            }
            return None;
        };
        let (lo, hi) = (c * CHUNK_PAGES, c * CHUNK_PAGES + self.chunk_len(c));
        // Prefer a free page the host already backs; then any free page.
        let idx = self
            .free
            .first_where(lo, hi, |w| self.free.word(w) & !self.zero.word(w))
            .or_else(|| self.free.first_set(lo, hi))
            .expect("level 1 says this chunk has a free page");
        if idx >= self.high_water {
            if let Some(g) = &self.grow {
                if !(g.0)(self.gpa(idx).0 + PAGE_SIZE) {
                    if let Some(b) = &self.budget {
                        b.give(1);
                    }
                    return None;
                }
            }
            self.high_water = idx + 1;
        }
        let known_zero = self.zero.get(idx);
        self.free.set(idx, false);
        self.zero.set(idx, false);
        self.refcount[idx] = 1;
        self.chunk_free[c] -= 1;
        self.free_count -= 1;
        self.update_chunk(c);
        Some((self.gpa(idx), known_zero))
    }

    /// The reference count of `gpa` (0 when free).
    ///
    /// # Errors
    /// [`AllocError::NotManaged`] if `gpa` is not an allocator page.
    pub fn refcount(&self, gpa: Gpa) -> Result<u16, AllocError> {
        Ok(self.refcount[self.index(gpa)?])
    }

    /// Takes one more reference to an allocated page.
    ///
    /// # Errors
    /// [`AllocError::NotManaged`], [`AllocError::NotAllocated`] for a free page,
    /// [`AllocError::RefcountOverflow`] at 65535 references (the count is left unchanged).
    pub fn incref(&mut self, gpa: Gpa) -> Result<u16, AllocError> {
        let idx = self.index(gpa)?;
        let rc = &mut self.refcount[idx];
        match *rc {
            0 => Err(AllocError::NotAllocated(gpa)),
            u16::MAX => Err(AllocError::RefcountOverflow(gpa)),
            n => {
                *rc = n + 1;
                Ok(n + 1)
            }
        }
    }

    /// Drops one reference; the page is freed when the count reaches zero. Returns whether it
    /// was freed.
    ///
    /// # Errors
    /// [`AllocError::NotManaged`], or [`AllocError::NotAllocated`] for a free page (a double
    /// free).
    pub fn decref(&mut self, gpa: Gpa) -> Result<bool, AllocError> {
        let idx = self.index(gpa)?;
        match self.refcount[idx] {
            0 => Err(AllocError::NotAllocated(gpa)),
            1 => {
                if let Some(b) = &self.budget {
                    b.give(1);
                }
                self.refcount[idx] = 0;
                self.free.set(idx, true);
                let c = idx / CHUNK_PAGES;
                self.chunk_free[c] += 1;
                self.free_count += 1;
                self.update_chunk(c);
                Ok(true)
            }
            n => {
                self.refcount[idx] = n - 1;
                Ok(false)
            }
        }
    }

    /// Whether `gpa` is a free page.
    pub fn is_free(&self, gpa: Gpa) -> bool {
        self.index(gpa).is_ok_and(|i| self.free.get(i))
    }

    /// Maximal runs `(first, npages)` of free pages, in address order.
    pub fn free_page_runs(&self) -> impl Iterator<Item = (Gpa, u64)> + '_ {
        Runs::new(self.npages, |w| self.free.word(w)).map(|(i, n)| (self.gpa(i), n as u64))
    }

    /// Maximal runs of free pages that are not known zero: the ones worth returning to the
    /// host (MADV_DONTNEED) at deflation.
    pub fn dirty_free_runs(&self) -> impl Iterator<Item = (Gpa, u64)> + '_ {
        Runs::new(self.npages, |w| self.free.word(w) & !self.zero.word(w))
            .map(|(i, n)| (self.gpa(i), n as u64))
    }

    /// Marks the free pages of `first..first + npages` as known zero (their host pages were
    /// just discarded). Allocated pages in the run are left alone.
    ///
    /// # Errors
    /// [`AllocError::NotManaged`] if the run is unaligned or leaves the allocator's range.
    pub fn mark_zero(&mut self, first: Gpa, npages: u64) -> Result<(), AllocError> {
        if npages == 0 {
            return Ok(());
        }
        let lo = self.index(first)?;
        let hi = usize::try_from(npages)
            .ok()
            .and_then(|n| lo.checked_add(n))
            .filter(|&hi| hi <= self.npages)
            .ok_or(AllocError::NotManaged(first))?;
        for i in lo..hi {
            if self.free.get(i) {
                self.zero.set(i, true);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn counts_and_first_page() {
        let mut a = PageAllocator::new(16 * MIB);
        assert_eq!(a.total_pages(), 3 * CHUNK_PAGES);
        assert_eq!(a.free_pages(), 3 * CHUNK_PAGES);
        let (p, zero) = a.alloc().unwrap();
        assert_eq!(p, layout::RESERVED_END);
        assert!(zero);
        assert_eq!(a.used_pages(), 1);
        assert_eq!(a.refcount(p), Ok(1));
        let (q, _) = a.alloc().unwrap();
        assert_eq!(q, Gpa(layout::RESERVED_END.0 + PAGE_SIZE));
    }

    #[test]
    fn the_grow_hook_is_asked_before_a_page_past_the_high_water_mark() {
        use std::sync::{Arc, Mutex};
        let asked = Arc::new(Mutex::new(Vec::new()));
        let limit = Arc::new(Mutex::new(u64::MAX));
        let hook = {
            let (asked, limit) = (asked.clone(), limit.clone());
            GrowHook(Arc::new(move |end| {
                asked.lock().unwrap().push(end);
                end <= *limit.lock().unwrap()
            }))
        };
        let mut a = PageAllocator::new(16 * MIB);
        a.set_budget(MemoryBudget::new(100));
        assert!(a.set_grow(hook.clone()));
        assert!(asked.lock().unwrap().is_empty(), "nothing allocated yet");
        let (p, _) = a.alloc().unwrap();
        let (q, _) = a.alloc().unwrap();
        a.decref(p).unwrap();
        // p is reused below the mark: not asked again.
        assert_eq!(a.alloc().unwrap().0, p);
        assert_eq!(
            *asked.lock().unwrap(),
            vec![p.0 + PAGE_SIZE, q.0 + PAGE_SIZE]
        );
        // A refusal hands out nothing and gives the budget back.
        *limit.lock().unwrap() = q.0 + PAGE_SIZE;
        let used = a.budget().unwrap().used();
        assert_eq!(a.alloc(), None);
        assert_eq!(a.budget().unwrap().used(), used);
        *limit.lock().unwrap() = u64::MAX;
        let (r, _) = a.alloc().unwrap();
        assert_eq!(r, Gpa(q.0 + PAGE_SIZE));
        // A restored allocator asks at once for its highest page.
        let mut b = PageAllocator::import_bytes(16 * MIB, &a.export_bytes()).unwrap();
        asked.lock().unwrap().clear();
        assert!(b.set_grow(hook));
        assert_eq!(*asked.lock().unwrap(), vec![r.0 + PAGE_SIZE]);
    }

    #[test]
    fn refcounts() {
        let mut a = PageAllocator::new(8 * MIB);
        let (p, _) = a.alloc().unwrap();
        assert_eq!(a.incref(p), Ok(2));
        assert_eq!(a.decref(p), Ok(false));
        assert!(!a.is_free(p));
        assert_eq!(a.decref(p), Ok(true));
        assert!(a.is_free(p));
        assert_eq!(a.decref(p), Err(AllocError::NotAllocated(p)));
        assert_eq!(a.incref(p), Err(AllocError::NotAllocated(p)));
        assert_eq!(a.free_pages(), CHUNK_PAGES);
        let (p, _) = a.alloc().unwrap();
        for _ in 1..u16::MAX {
            a.incref(p).unwrap();
        }
        assert_eq!(a.refcount(p), Ok(u16::MAX));
        assert_eq!(a.incref(p), Err(AllocError::RefcountOverflow(p)));
        assert_eq!(a.refcount(p), Ok(u16::MAX));
        assert_eq!(
            a.decref(Gpa(0x1000)),
            Err(AllocError::NotManaged(Gpa(0x1000)))
        );
        assert_eq!(
            a.decref(Gpa(p.0 + 8)),
            Err(AllocError::NotManaged(Gpa(p.0 + 8)))
        );
        assert_eq!(
            a.decref(Gpa(8 * MIB)),
            Err(AllocError::NotManaged(Gpa(8 * MIB)))
        );
    }

    #[test]
    fn known_zero_tracking() {
        let mut a = PageAllocator::new(8 * MIB);
        let (p, z) = a.alloc().unwrap();
        assert!(z);
        a.decref(p).unwrap();
        // The freed page is resident, so it is preferred and not known zero.
        let (q, z) = a.alloc().unwrap();
        assert_eq!(q, p);
        assert!(!z);
        a.decref(q).unwrap();
        assert_eq!(a.dirty_free_runs().collect::<Vec<_>>(), vec![(p, 1)]);
        a.mark_zero(p, 1).unwrap();
        assert_eq!(a.dirty_free_runs().count(), 0);
        let (r, z) = a.alloc().unwrap();
        assert_eq!(r, p);
        assert!(z);
        // mark_zero leaves allocated pages alone.
        a.mark_zero(r, 4).unwrap();
        a.decref(r).unwrap();
        assert_eq!(a.dirty_free_runs().collect::<Vec<_>>(), vec![(r, 1)]);
        assert!(a.mark_zero(r, CHUNK_PAGES as u64 + 1).is_err());
    }

    #[test]
    fn prefers_resident_page_over_fresh() {
        let mut a = PageAllocator::new(8 * MIB);
        let pages: Vec<_> = (0..10).map(|_| a.alloc().unwrap().0).collect();
        a.decref(pages[7]).unwrap();
        // Page 10 is fresh and lower chunks have none free but 7; page 7 wins.
        assert_eq!(a.alloc().unwrap(), (pages[7], false));
    }

    #[test]
    fn prefers_lowest_partial_chunk() {
        let mut a = PageAllocator::new(16 * MIB);
        let mut all = Vec::new();
        for _ in 0..(CHUNK_PAGES + 5) {
            all.push(a.alloc().unwrap().0);
        }
        // Chunk 0 full, chunk 1 partial. Free a page in chunk 0: chunk 0 becomes partial and,
        // being lowest, gets the next allocation.
        let victim = all[100];
        a.decref(victim).unwrap();
        assert_eq!(a.alloc().unwrap().0, victim);
        // Empty chunk 0 completely except one page; the next page still goes to chunk 0, not
        // to the fresh chunk 2 nor the partial chunk 1 above it.
        for p in &all[1..CHUNK_PAGES] {
            a.decref(*p).unwrap();
        }
        let (p, _) = a.alloc().unwrap();
        assert_eq!(p, Gpa(layout::RESERVED_END.0 + PAGE_SIZE));
        // Free chunk 1 entirely: its pages join the free part of chunk 0 in one run.
        for p in &all[CHUNK_PAGES..] {
            a.decref(*p).unwrap();
        }
        let runs: Vec<_> = a.free_page_runs().collect();
        assert_eq!(
            runs,
            vec![(Gpa(layout::RESERVED_END.0 + 2 * PAGE_SIZE), 3 * 1024 - 2)]
        );
        assert_eq!(a.free_pages(), 3 * CHUNK_PAGES - 2);
    }

    #[test]
    fn exhaustion() {
        let mut a = PageAllocator::new(8 * MIB);
        let mut got = std::collections::HashSet::new();
        while let Some((p, _)) = a.alloc() {
            assert!(got.insert(p), "page {p} handed out twice");
        }
        assert_eq!(got.len(), CHUNK_PAGES);
        assert_eq!(a.free_pages(), 0);
        assert_eq!(a.free_page_runs().count(), 0);
        let p = *got.iter().next().unwrap();
        a.decref(p).unwrap();
        assert_eq!(a.alloc().map(|x| x.0), Some(p));
        assert!(a.alloc().is_none());
    }

    #[test]
    fn empty_and_partial_chunk_ranges() {
        let mut a = PageAllocator::new(layout::RESERVED_END.0);
        assert_eq!(a.total_pages(), 0);
        assert!(a.alloc().is_none());
        let mut b = PageAllocator::with_range(Gpa(0x40_0000), 0x40_0000 + 3 * PAGE_SIZE);
        assert_eq!(b.total_pages(), 3);
        assert!(b.alloc().is_some() && b.alloc().is_some() && b.alloc().is_some());
        assert!(b.alloc().is_none());
    }
}
