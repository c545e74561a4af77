//! The page allocator's state as bytes, for checkpoints: [`PageAllocator::export_bytes`] and
//! [`PageAllocator::import_bytes`].
//!
//! ```text
//! offset  size          field (all integers little-endian)
//! 0       8             magic "TORPALOC"
//! 8       4             format version (1)
//! 12      4             reserved, 0
//! 16      8             base: first managed guest-physical address
//! 24      8             npages: pages managed
//! 32      8             free_count
//! 40      8 × W         free bitmap, W = ceil(npages / 64) words, bit i of word w = page 64w + i
//!         2 × nchunks   free pages per chunk
//!         2 × npages    reference count per page (0 exactly for free pages)
//! ```
//!
//! Nothing else is saved: the per-chunk summaries follow from the free bitmap, the known-zero
//! bitmap is not kept (a checkpoint leaves free pages out of the memory image, so every free
//! page of a restored memory reads as zero and is imported as known zero), and the budget is
//! the restoring sandbox's (the caller sets it, as for a fresh allocator).
//!
//! The bytes come from a checkpoint, so they are untrusted: [`PageAllocator::import_bytes`]
//! checks the exact length, the geometry against the memory it is imported for, and every
//! invariant the allocator relies on, and refuses anything else with an error.

use platform::{Gpa, PAGE_SHIFT};

use super::bitmap::Bitmap;
use super::{PageAllocator, CHUNK_PAGES};

/// First bytes of an allocator image.
const MAGIC: [u8; 8] = *b"TORPALOC";
/// Version of the format written.
const VERSION: u32 = 1;
/// Bytes before the free bitmap.
const HEADER: usize = 40;

/// Why allocator bytes were refused by [`PageAllocator::import_bytes`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocImageError {
    /// Not an allocator image of this format (magic, version or reserved field).
    #[error("not a page-allocator image of format {VERSION}")]
    Format,
    /// The bytes are not exactly as long as the header says they must be (truncated or
    /// extended).
    #[error("page-allocator image is {have} bytes, expected {want}")]
    Length {
        /// Bytes given.
        have: usize,
        /// Bytes the header (or, when too short for one, the header itself) needs.
        want: usize,
    },
    /// The image manages other pages than the memory it is imported for.
    #[error("page-allocator image is for {image_pages} pages from {image_base}, the memory has {pages} pages from {base}")]
    Geometry {
        /// First page in the image.
        image_base: Gpa,
        /// Pages in the image.
        image_pages: u64,
        /// First page of the memory.
        base: Gpa,
        /// Pages of the memory.
        pages: u64,
    },
    /// The counts, bitmap and reference counts disagree.
    #[error("inconsistent page-allocator image: {0}")]
    Inconsistent(String),
}

/// Little-endian integers read from a slice of the right length.
fn le_u64(b: &[u8]) -> Result<u64, AllocImageError> {
    b.try_into()
        .map(u64::from_le_bytes)
        .map_err(|_| AllocImageError::Format)
}

fn le_u32(b: &[u8]) -> Result<u32, AllocImageError> {
    b.try_into()
        .map(u32::from_le_bytes)
        .map_err(|_| AllocImageError::Format)
}

fn le_u16(b: &[u8]) -> Result<u16, AllocImageError> {
    b.try_into()
        .map(u16::from_le_bytes)
        .map_err(|_| AllocImageError::Format)
}

/// The byte length of an image of `npages` pages, or `None` if it overflows.
fn image_len(npages: usize) -> Option<usize> {
    let words = npages.div_ceil(64).checked_mul(8)?;
    let chunks = npages.div_ceil(CHUNK_PAGES).checked_mul(2)?;
    let refs = npages.checked_mul(2)?;
    HEADER
        .checked_add(words)?
        .checked_add(chunks)?
        .checked_add(refs)
}

impl PageAllocator {
    /// This allocator's state in the format of the module's doc: which pages are free, the
    /// free count per chunk and every page's reference count. About 0.05 % of the memory
    /// managed (2 bytes per 4 KiB page).
    pub fn export_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(image_len(self.npages).unwrap_or(HEADER));
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.base.0.to_le_bytes());
        out.extend_from_slice(&(self.npages as u64).to_le_bytes());
        out.extend_from_slice(&(self.free_count as u64).to_le_bytes());
        for w in 0..self.npages.div_ceil(64) {
            out.extend_from_slice(&self.free.word(w).to_le_bytes());
        }
        for n in &self.chunk_free {
            out.extend_from_slice(&n.to_le_bytes());
        }
        for r in &self.refcount {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out
    }

    /// The allocator that [`export_bytes`](Self::export_bytes) described, for a guest memory
    /// of `mem_size` bytes (the pages above [`platform::layout::RESERVED_END`], as
    /// [`PageAllocator::new`]). Every free page is marked known zero: the restored memory must
    /// read zero there (a checkpoint leaves free pages out of its memory image). The result
    /// counts against no budget; the caller sets the sandbox's with
    /// [`set_budget`](Self::set_budget), which charges the pages in use at once.
    ///
    /// # Errors
    /// [`AllocImageError`] if `bytes` is not exactly one image for this memory with its
    /// invariants: a free page has reference count 0 and a used one does not, the per-chunk
    /// free counts and the free count match the bitmap, no bit past the last page is set.
    pub fn import_bytes(mem_size: u64, bytes: &[u8]) -> Result<PageAllocator, AllocImageError> {
        Self::import_over(&PageAllocator::new(mem_size), bytes)
    }

    /// [`import_bytes`](Self::import_bytes) for the pages `fresh` (a new allocator) manages.
    fn import_over(fresh: &PageAllocator, bytes: &[u8]) -> Result<PageAllocator, AllocImageError> {
        let have = bytes.len();
        let header = bytes
            .get(..HEADER)
            .ok_or(AllocImageError::Length { have, want: HEADER })?;
        if header[..8] != MAGIC || le_u32(&header[8..12])? != VERSION || header[12..16] != [0; 4] {
            return Err(AllocImageError::Format);
        }
        let image_base = Gpa(le_u64(&header[16..24])?);
        let image_pages = le_u64(&header[24..32])?;
        let free_count = le_u64(&header[32..40])?;
        if image_base != fresh.base || image_pages != fresh.npages as u64 {
            return Err(AllocImageError::Geometry {
                image_base,
                image_pages,
                base: fresh.base,
                pages: fresh.npages as u64,
            });
        }
        let npages = fresh.npages;
        let nchunks = fresh.nchunks;
        let want = image_len(npages).ok_or(AllocImageError::Format)?;
        if have != want {
            return Err(AllocImageError::Length { have, want });
        }
        let nwords = npages.div_ceil(64);
        let (words, rest) = bytes[HEADER..].split_at(nwords * 8);
        let (chunks, refs) = rest.split_at(nchunks * 2);
        let words = words
            .chunks_exact(8)
            .map(le_u64)
            .collect::<Result<Vec<_>, _>>()?;
        let chunk_free = chunks
            .chunks_exact(2)
            .map(le_u16)
            .collect::<Result<Vec<_>, _>>()?;
        let refcount = refs
            .chunks_exact(2)
            .map(le_u16)
            .collect::<Result<Vec<_>, _>>()?;
        let free = Bitmap::from_words(words, npages).ok_or_else(|| {
            AllocImageError::Inconsistent("free bitmap has bits past the last page".into())
        })?;
        let mut counted = 0usize;
        for (c, &claimed) in chunk_free.iter().enumerate() {
            let lo = c * CHUNK_PAGES;
            let hi = (lo + CHUNK_PAGES).min(npages);
            let mut n = 0usize;
            for (i, &rc) in refcount.iter().enumerate().take(hi).skip(lo) {
                let is_free = free.get(i);
                if is_free != (rc == 0) {
                    let gpa = Gpa(fresh.base.0 + ((i as u64) << PAGE_SHIFT));
                    return Err(AllocImageError::Inconsistent(format!(
                        "page {gpa} is {} with reference count {rc}",
                        if is_free { "free" } else { "used" }
                    )));
                }
                n += usize::from(is_free);
            }
            if n != usize::from(claimed) {
                return Err(AllocImageError::Inconsistent(format!(
                    "chunk {c} has {n} free pages, the image says {claimed}"
                )));
            }
            counted += n;
        }
        if counted as u64 != free_count {
            return Err(AllocImageError::Inconsistent(format!(
                "{counted} free pages, the image says {free_count}"
            )));
        }
        // Free pages are holes in the restored memory: all known zero.
        let zero = free.clone();
        let mut a = PageAllocator {
            base: fresh.base,
            npages,
            nchunks,
            partial: Bitmap::new(nchunks),
            has_free: Bitmap::new(nchunks),
            chunk_free,
            free,
            zero,
            refcount,
            free_count: counted,
            budget: None,
            // Every page may be handed out until a hook is set (which looks at the pages
            // already allocated).
            high_water: 0,
            grow: None,
        };
        for c in 0..nchunks {
            a.update_chunk(c);
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::CHUNK_SIZE;
    use platform::{layout, PAGE_SIZE};

    const MIB: u64 = 1 << 20;

    /// An allocator over 16 MiB (three chunks, the last two partly used) with shared pages,
    /// freed pages and a fully used first chunk.
    fn busy() -> PageAllocator {
        let mut a = PageAllocator::new(16 * MIB);
        let pages: Vec<Gpa> = (0..CHUNK_PAGES + 40)
            .map(|_| a.alloc().unwrap().0)
            .collect();
        for p in pages.iter().skip(CHUNK_PAGES).step_by(3) {
            a.decref(*p).unwrap();
        }
        a.incref(pages[5]).unwrap();
        a.incref(pages[5]).unwrap();
        a
    }

    fn same_state(a: &PageAllocator, b: &PageAllocator) {
        assert_eq!(a.base(), b.base());
        assert_eq!(a.total_pages(), b.total_pages());
        assert_eq!(a.free_pages(), b.free_pages());
        assert_eq!(
            a.free_page_runs().collect::<Vec<_>>(),
            b.free_page_runs().collect::<Vec<_>>()
        );
        for i in 0..a.total_pages() as u64 {
            let g = Gpa(a.base().0 + i * PAGE_SIZE);
            assert_eq!(a.refcount(g), b.refcount(g), "page {g}");
        }
        for w in 0..a.nchunks.div_ceil(64) {
            assert_eq!(a.partial.word(w), b.partial.word(w));
            assert_eq!(a.has_free.word(w), b.has_free.word(w));
        }
    }

    #[test]
    fn round_trip_keeps_pages_and_marks_free_ones_zero() {
        let mut a = busy();
        let bytes = a.export_bytes();
        assert_eq!(bytes.len(), image_len(a.total_pages()).unwrap());
        let mut b = PageAllocator::import_bytes(16 * MIB, &bytes).unwrap();
        same_state(&a, &b);
        assert_eq!(b.export_bytes(), bytes);
        // Every free page is known zero after the import (some were not before).
        assert!(a.dirty_free_runs().count() > 0);
        assert_eq!(b.dirty_free_runs().count(), 0);
        // Both allocate the same pages from here on (the lowest partial chunk first).
        for _ in 0..20 {
            let (pa, _) = a.alloc().unwrap();
            let (pb, zero) = b.alloc().unwrap();
            assert_eq!(pa, pb);
            assert!(zero);
        }
        // No budget: the caller sets the sandbox's, which charges the pages in use.
        assert!(b.budget().is_none());
        let budget = crate::MemoryBudget::new(1 << 20);
        b.set_budget(budget.clone());
        assert_eq!(budget.used(), b.used_pages() as u64);
        drop(b);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn empty_and_fresh_allocators_round_trip() {
        let a = PageAllocator::new(8 * MIB);
        let b = PageAllocator::import_bytes(8 * MIB, &a.export_bytes()).unwrap();
        same_state(&a, &b);
        let a = PageAllocator::new(layout::RESERVED_END.0);
        let b = PageAllocator::import_bytes(layout::RESERVED_END.0, &a.export_bytes()).unwrap();
        assert_eq!(b.total_pages(), 0);
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        let bytes = busy().export_bytes();
        for n in 0..bytes.len() {
            let r = PageAllocator::import_bytes(16 * MIB, &bytes[..n]);
            assert!(
                matches!(r, Err(AllocImageError::Length { .. })),
                "{n} bytes: {r:?}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            PageAllocator::import_bytes(16 * MIB, &longer).unwrap_err(),
            AllocImageError::Length {
                have: bytes.len() + 1,
                want: bytes.len()
            }
        );
    }

    #[test]
    fn another_memory_size_is_refused() {
        let bytes = busy().export_bytes();
        assert!(matches!(
            PageAllocator::import_bytes(20 * MIB, &bytes),
            Err(AllocImageError::Geometry { .. })
        ));
        assert!(matches!(
            PageAllocator::import_bytes(12 * MIB, &bytes),
            Err(AllocImageError::Geometry { .. })
        ));
    }

    /// The offset of page `i`'s reference count, chunk `c`'s free count, bitmap word `w`.
    fn refcount_at(a: &PageAllocator, i: usize) -> usize {
        HEADER + a.npages.div_ceil(64) * 8 + a.nchunks * 2 + i * 2
    }
    fn chunk_at(a: &PageAllocator, c: usize) -> usize {
        HEADER + a.npages.div_ceil(64) * 8 + c * 2
    }
    fn word_at(w: usize) -> usize {
        HEADER + w * 8
    }

    #[test]
    fn inconsistent_images_are_refused() {
        let a = busy();
        let good = a.export_bytes();
        let refuse = |what: &str, edit: &dyn Fn(&mut Vec<u8>)| {
            let mut b = good.clone();
            edit(&mut b);
            let r = PageAllocator::import_bytes(16 * MIB, &b);
            assert!(r.is_err(), "{what} was accepted");
            r.unwrap_err()
        };
        assert_eq!(refuse("magic", &|b| b[0] ^= 1), AllocImageError::Format);
        assert_eq!(refuse("version", &|b| b[8] = 2), AllocImageError::Format);
        assert_eq!(refuse("reserved", &|b| b[13] = 1), AllocImageError::Format);
        assert!(matches!(
            refuse("base", &|b| b[17] ^= 0x10),
            AllocImageError::Geometry { .. }
        ));
        // The free count, one more than the bitmap says.
        refuse("free_count", &|b| b[32] = b[32].wrapping_add(1));
        // A used page (chunk 0 is full) marked free: its count is not 0.
        refuse("used page marked free", &|b| b[word_at(0)] |= 1);
        // A free page (chunk 2 is empty) marked used: its count is 0.
        refuse("free page marked used", &|b| {
            b[word_at(2 * CHUNK_PAGES / 64)] &= !1
        });
        // A free page with a reference, a used page without.
        let free_page = 2 * CHUNK_PAGES + 7;
        refuse("free page referenced", &|b| {
            b[refcount_at(&a, free_page)] = 1
        });
        refuse("used page unreferenced", &|b| {
            b[refcount_at(&a, 3)] = 0;
            b[refcount_at(&a, 3) + 1] = 0;
        });
        // A free page marked used with a reference, and the counts adjusted for the chunk
        // but not the total; then for both (consistent: accepted).
        refuse("chunk count", &|b| b[chunk_at(&a, 1)] ^= 1);
        let mut b = good.clone();
        b[word_at(2 * CHUNK_PAGES / 64)] &= !1;
        b[refcount_at(&a, 2 * CHUNK_PAGES)] = 1;
        let c2 = u16::from_le_bytes([b[chunk_at(&a, 2)], b[chunk_at(&a, 2) + 1]]) - 1;
        b[chunk_at(&a, 2)..chunk_at(&a, 2) + 2].copy_from_slice(&c2.to_le_bytes());
        assert!(PageAllocator::import_bytes(16 * MIB, &b).is_err());
        let fc = a.free_pages() as u64 - 1;
        b[32..40].copy_from_slice(&fc.to_le_bytes());
        let imported = PageAllocator::import_bytes(16 * MIB, &b).unwrap();
        assert_eq!(imported.free_pages(), a.free_pages() - 1);
        assert!(!imported.is_free(Gpa(a.base().0 + 2 * CHUNK_SIZE)));
        // A bit past the last page.
        let small = PageAllocator::with_range(Gpa(0x40_0000), 0x40_0000 + 3 * PAGE_SIZE);
        let mut s = small.export_bytes();
        s[word_at(0)] |= 1 << 3;
        assert!(PageAllocator::import_over(&small, &small.export_bytes()).is_ok());
        assert!(matches!(
            PageAllocator::import_over(&small, &s),
            Err(AllocImageError::Inconsistent(_))
        ));
    }

    /// Every single-byte corruption is either refused or yields a consistent allocator;
    /// nothing panics.
    #[test]
    fn byte_flips_never_panic() {
        let a = busy();
        let good = a.export_bytes();
        let mut refused = 0;
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0x5a;
            match PageAllocator::import_bytes(16 * MIB, &b) {
                Err(_) => refused += 1,
                Ok(x) => {
                    // Only a used page's reference count may change and stay consistent.
                    assert!(i >= refcount_at(&a, 0), "byte {i} accepted");
                    assert_eq!(x.free_pages(), a.free_pages());
                }
            }
        }
        assert!(
            refused > good.len() / 2,
            "{refused} of {} refused",
            good.len()
        );
    }
}
