//! A process's swap across deflates: the swap files of successive deflates, kept as layers.
//!
//! The first deflate writes every page it keeps into one swap file. A later deflate writes
//! only what changed since: pages dirtied or newly used since the wake go into a new file (a
//! new *layer*), and a page still swapped out, or brought in and never written since, keeps
//! the slot it already has in an older layer. So a second deflate after a request that
//! dirtied 1 % of the memory writes about 1 % of it.
//!
//! Slots are numbered across layers: layer `k` holds the global slots `base_k ..
//! base_k + slots_k`, and each new layer starts where the last one ends, so a page-state map
//! entry `Swapped { slot }` names one layer and one slot in it without saying which file. A
//! layer no page refers to any more is removed ([`SwapStore::retain_referenced`]); when the
//! layers hold mostly dead slots, or too many files, the deflate compacts: it writes every
//! live page into one fresh layer starting at slot 0 ([`SwapStore::needs_compaction`]).
//!
//! Every layer is a complete, checksummed swap file ([`crate::swapfile`]) written once: a
//! deflate that fails leaves the existing layers as they were.
//!
//! A restored sandbox's first layer is *borrowed*: the checkpoint's memory image
//! ([`SwapStore::push_borrowed`]). It is read like any layer but its file is never removed:
//! dropping it only closes it.

use crate::pagefile::PAGE_BYTES;
use crate::pagestate::{PageIdx, MAX_SLOT};
use crate::swapfile::{SwapError, SwapReader};

/// Most layers kept before a deflate compacts them into one.
pub const MAX_LAYERS: usize = 8;

/// One swap file and the first global slot it holds.
#[derive(Debug)]
struct Layer {
    base: u32,
    reader: SwapReader,
    /// Another's file (a checkpoint's memory image): never removed.
    borrowed: bool,
}

impl Layer {
    fn end(&self) -> u64 {
        u64::from(self.base) + u64::from(self.reader.slots())
    }

    /// Removes the layer's file, unless it is borrowed.
    fn remove(&self) -> Result<(), SwapError> {
        if self.borrowed {
            return Ok(());
        }
        self.reader.remove()
    }
}

/// The swap files of one process's memory, as layers over one global slot space (see the
/// module doc).
#[derive(Debug, Default)]
pub struct SwapStore {
    /// Sorted by base, non-overlapping.
    layers: Vec<Layer>,
}

impl SwapStore {
    /// No layers.
    pub fn new() -> Self {
        SwapStore::default()
    }

    /// Whether there is no layer.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Number of layers (swap files).
    pub fn layers(&self) -> usize {
        self.layers.len()
    }

    /// The global slot the next layer's slot 0 will be.
    pub fn next_base(&self) -> u64 {
        self.layers.last().map_or(0, Layer::end)
    }

    /// Slots held in all layers, live or dead.
    pub fn total_slots(&self) -> u64 {
        self.layers
            .iter()
            .map(|l| u64::from(l.reader.slots()))
            .sum()
    }

    /// Bytes of page data held in all layers.
    pub fn bytes(&self) -> u64 {
        self.total_slots() * PAGE_BYTES as u64
    }

    /// Adds `reader` as the newest layer, its slot 0 at [`SwapStore::next_base`]. A file with
    /// no slot is not kept (the caller removes it).
    ///
    /// # Errors
    /// [`SwapError::TooManyPages`] if its slots would pass the page-state map's slot limit
    /// (the caller compacts first: [`SwapStore::needs_compaction`]).
    pub fn push(&mut self, reader: SwapReader) -> Result<(), SwapError> {
        self.push_layer(reader, false)
    }

    /// As [`SwapStore::push`] for a file the store must never remove (a checkpoint's memory
    /// image, which other restores may read too).
    ///
    /// # Errors
    /// As [`SwapStore::push`].
    pub fn push_borrowed(&mut self, reader: SwapReader) -> Result<(), SwapError> {
        self.push_layer(reader, true)
    }

    fn push_layer(&mut self, reader: SwapReader, borrowed: bool) -> Result<(), SwapError> {
        let base = self.next_base();
        let end = base + u64::from(reader.slots());
        if end > u64::from(MAX_SLOT) + 1 {
            return Err(SwapError::TooManyPages(end));
        }
        if reader.slots() > 0 {
            self.layers.push(Layer {
                base: base as u32,
                reader,
                borrowed,
            });
        }
        Ok(())
    }

    /// The borrowed layers (the memory images of the checkpoint the process was restored
    /// from), oldest first, each with its first global slot.
    pub fn borrowed(&self) -> impl Iterator<Item = (u32, &SwapReader)> + '_ {
        self.layers
            .iter()
            .filter(|l| l.borrowed)
            .map(|l| (l.base, &l.reader))
    }

    /// The layer holding global slot `slot`, and the slot within it.
    fn locate(&self, slot: u32) -> Option<(&Layer, u32)> {
        let i = self.layers.partition_point(|l| l.base <= slot);
        let layer = self.layers.get(i.checked_sub(1)?)?;
        (u64::from(slot) < layer.end()).then(|| (layer, slot - layer.base))
    }

    /// Reads `count` consecutive global slots from `first` into `buf` (`count * 4096`
    /// bytes), verifying every page; a run that spans layers is read from each in turn.
    ///
    /// # Errors
    /// [`SwapError::SlotOutOfRange`] for slots no layer holds, [`SwapError::BufferSize`];
    /// otherwise as [`SwapReader::read_slots_into`]. `buf` is zeroed on every error.
    pub fn read_slots_into(&self, first: u32, count: u32, buf: &mut [u8]) -> Result<(), SwapError> {
        self.read(None, first, count, buf)
    }

    /// As [`SwapStore::read_slots_into`] for guest pages `first_page..first_page + count`,
    /// and each slot's index entry must name its page: a page-state map pointing at another
    /// page's slot is an error, never that page's bytes.
    ///
    /// # Errors
    /// [`SwapError::BadIndex`] for a slot holding another page; as
    /// [`SwapStore::read_slots_into`]. `buf` is zeroed on every error.
    pub fn read_pages_into(
        &self,
        first_page: PageIdx,
        first: u32,
        count: u32,
        buf: &mut [u8],
    ) -> Result<(), SwapError> {
        self.read(Some(first_page), first, count, buf)
    }

    /// Reads, checking each slot's page against `first_page` onwards when given; zeroes
    /// `buf` on any error.
    fn read(
        &self,
        first_page: Option<PageIdx>,
        first: u32,
        count: u32,
        buf: &mut [u8],
    ) -> Result<(), SwapError> {
        let r = self.read_unzeroed(first_page, first, count, buf);
        if r.is_err() {
            buf.fill(0);
        }
        r
    }

    fn read_unzeroed(
        &self,
        first_page: Option<PageIdx>,
        first: u32,
        count: u32,
        buf: &mut [u8],
    ) -> Result<(), SwapError> {
        let expected = count as usize * PAGE_BYTES;
        if buf.len() != expected {
            return Err(SwapError::BufferSize {
                len: buf.len(),
                expected,
            });
        }
        let out_of_range = || SwapError::SlotOutOfRange {
            first,
            count,
            slots: self.next_base().min(u64::from(u32::MAX)) as u32,
        };
        let mut done = 0u32;
        while done < count {
            let slot = first.checked_add(done).ok_or_else(out_of_range)?;
            let (layer, local) = self.locate(slot).ok_or_else(out_of_range)?;
            let n = (count - done).min(layer.reader.slots() - local);
            if let Some(p) = first_page {
                for k in 0..n {
                    let want = PageIdx(p.0 + u64::from(done + k));
                    if layer.reader.index().entry(local + k).map(|e| e.page()) != Some(want) {
                        return Err(SwapError::BadIndex {
                            entry: u64::from(slot) + u64::from(k),
                            reason: "the slot holds another guest page",
                        });
                    }
                }
            }
            let at = done as usize * PAGE_BYTES;
            layer
                .reader
                .read_slots_into(local, n, &mut buf[at..at + n as usize * PAGE_BYTES])?;
            done += n;
        }
        Ok(())
    }

    /// Whether the next deflate should write every live page into one fresh layer instead
    /// of adding one: when `live` (the slots pages still refer to) is less than half of what
    /// the process's own layers hold, when there are [`MAX_LAYERS`] own layers already, or when
    /// a new layer of up to `new_pages` slots would pass the slot limit. Borrowed layers'
    /// dead slots cost this process nothing (a checkpoint's images, shared with the others
    /// restored from it, which a dormant sandbox's next checkpoint links again): they do not
    /// count.
    pub fn needs_compaction(&self, live: u64, new_pages: u64) -> bool {
        let total: u64 = self
            .layers
            .iter()
            .filter(|l| !l.borrowed)
            .map(|l| u64::from(l.reader.slots()))
            .sum();
        self.layers.iter().filter(|l| !l.borrowed).count() >= MAX_LAYERS
            || (total > 0 && live * 2 < total)
            || self.next_base() + new_pages > u64::from(MAX_SLOT) + 1
    }

    /// Keeps the layers holding at least one global slot for which `referenced` is true, and
    /// the borrowed ones (a dormant sandbox's next checkpoint is layered over them, even when
    /// every page came back: see `engine::checkpoint`), and removes the others' files.
    /// Returns the number of layers dropped.
    pub fn retain_referenced(&mut self, referenced: impl Fn(u32) -> bool) -> usize {
        let before = self.layers.len();
        self.layers.retain(|l| {
            let keep = l.borrowed || (0..l.reader.slots()).any(|s| referenced(l.base + s));
            if !keep {
                if let Err(e) = l.remove() {
                    tracing::warn!("removing an unused swap layer: {e}");
                }
            }
            keep
        });
        before - self.layers.len()
    }

    /// Removes every layer's file and empties the store (the readers of the old layers are
    /// dropped; nothing refers to their slots any more).
    pub fn remove_all(&mut self) {
        for l in self.layers.drain(..) {
            if let Err(e) = l.remove() {
                tracing::warn!("removing a swap layer: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::swapfile::SwapWriter;

    fn page(b: u8) -> Vec<u8> {
        vec![b; PAGE_BYTES]
    }

    /// Writes a swap file holding `pages` (guest page, fill byte) and opens it.
    fn layer(dir: &std::path::Path, name: &str, pages: &[(u64, u8)]) -> SwapReader {
        let path = dir.join(name);
        let mut w = SwapWriter::create(&path, 1024).unwrap();
        let data: Vec<Vec<u8>> = pages.iter().map(|&(_, b)| page(b)).collect();
        let batch: Vec<(PageIdx, &[u8])> = pages
            .iter()
            .zip(&data)
            .map(|(&(p, _), d)| (PageIdx(p), d.as_slice()))
            .collect();
        if !batch.is_empty() {
            w.write_batch(&batch).unwrap();
        }
        w.finish().unwrap();
        SwapReader::open(&path).unwrap()
    }

    #[test]
    fn global_slots_span_layers() {
        let dir = crate::testutil::TempDir::new();
        let mut s = SwapStore::new();
        s.push(layer(dir.path(), "a", &[(1, 1), (2, 2), (3, 3)]))
            .unwrap();
        assert_eq!(s.next_base(), 3);
        s.push(layer(dir.path(), "b", &[(7, 7), (8, 8)])).unwrap();
        assert_eq!((s.layers(), s.next_base(), s.total_slots()), (2, 5, 5));

        let mut one = [0u8; PAGE_BYTES];
        s.read_slots_into(3, 1, &mut one).unwrap();
        assert!(one.iter().all(|&b| b == 7));
        // A run across the boundary comes from both files.
        let mut run = vec![0u8; 3 * PAGE_BYTES];
        s.read_slots_into(1, 3, &mut run).unwrap();
        let fills: Vec<u8> = run.chunks(PAGE_BYTES).map(|c| c[0]).collect();
        assert_eq!(fills, [2, 3, 7]);
        // Past the end: an error, and the buffer zeroed.
        let mut bad = vec![0xaau8; 2 * PAGE_BYTES];
        assert!(matches!(
            s.read_slots_into(4, 2, &mut bad),
            Err(SwapError::SlotOutOfRange { .. })
        ));
        assert!(bad.iter().all(|&b| b == 0));
    }

    #[test]
    fn a_slot_of_another_page_is_an_error() {
        let dir = crate::testutil::TempDir::new();
        let mut s = SwapStore::new();
        s.push(layer(dir.path(), "a", &[(1, 1), (2, 2), (3, 3)]))
            .unwrap();
        s.push(layer(dir.path(), "b", &[(7, 7), (8, 8)])).unwrap();
        let mut two = vec![0u8; 2 * PAGE_BYTES];
        s.read_pages_into(PageIdx(2), 1, 2, &mut two).unwrap();
        s.read_pages_into(PageIdx(7), 3, 2, &mut two).unwrap();
        assert_eq!((two[0], two[PAGE_BYTES]), (7, 8));
        // Slot 3 holds page 7, not page 4: nothing of it is handed out.
        let mut bad = vec![0xaau8; 2 * PAGE_BYTES];
        assert!(matches!(
            s.read_pages_into(PageIdx(3), 2, 2, &mut bad),
            Err(SwapError::BadIndex { entry: 3, .. })
        ));
        assert!(bad.iter().all(|&b| b == 0));
    }

    #[test]
    fn an_empty_file_is_not_a_layer() {
        let dir = crate::testutil::TempDir::new();
        let mut s = SwapStore::new();
        s.push(layer(dir.path(), "a", &[(1, 1)])).unwrap();
        s.push(layer(dir.path(), "b", &[])).unwrap();
        assert_eq!((s.layers(), s.next_base()), (1, 1));
    }

    #[test]
    fn unreferenced_layers_are_removed_with_their_files() {
        let dir = crate::testutil::TempDir::new();
        let mut s = SwapStore::new();
        s.push(layer(dir.path(), "a", &[(1, 1), (2, 2)])).unwrap();
        s.push(layer(dir.path(), "b", &[(3, 3)])).unwrap();
        s.push(layer(dir.path(), "c", &[(4, 4)])).unwrap();
        // Only slot 3 (layer c) and slot 1 (layer a) are still referred to.
        assert_eq!(s.retain_referenced(|slot| slot == 1 || slot == 3), 1);
        assert!(dir.path().join("a").exists());
        assert!(!dir.path().join("b").exists());
        assert!(dir.path().join("c").exists());
        // The numbering does not move: slot 3 is still layer c's page.
        let mut one = [0u8; PAGE_BYTES];
        s.read_slots_into(3, 1, &mut one).unwrap();
        assert_eq!(one[0], 4);
        // Slot 2 (the removed layer) is gone.
        assert!(s.read_slots_into(2, 1, &mut one).is_err());
        // The next layer still starts after the last one.
        assert_eq!(s.next_base(), 4);
        s.remove_all();
        assert!(s.is_empty());
        assert!(!dir.path().join("a").exists() && !dir.path().join("c").exists());
    }

    #[test]
    fn compaction_when_mostly_dead_or_too_many_layers() {
        let dir = crate::testutil::TempDir::new();
        let mut s = SwapStore::new();
        assert!(!s.needs_compaction(0, 10));
        s.push(layer(dir.path(), "a", &[(1, 1), (2, 2), (3, 3), (4, 4)]))
            .unwrap();
        assert!(!s.needs_compaction(2, 10));
        assert!(s.needs_compaction(1, 10));
        for k in 1..MAX_LAYERS {
            s.push(layer(dir.path(), &format!("l{k}"), &[(k as u64 + 10, 1)]))
                .unwrap();
        }
        assert!(s.needs_compaction(s.total_slots(), 1));
        // A borrowed layer's slots are not dead weight: four borrowed, one own slot live.
        let mut b = SwapStore::new();
        b.push_borrowed(layer(dir.path(), "img", &[(1, 1), (2, 2), (3, 3), (4, 4)]))
            .unwrap();
        b.push(layer(dir.path(), "own", &[(5, 5)])).unwrap();
        assert!(!b.needs_compaction(1, 10));
        assert_eq!(b.borrowed().count(), 1);
        assert_eq!(
            b.borrowed().next().map(|(base, r)| (base, r.slots())),
            Some((0, 4))
        );
        // A new layer that would pass the slot limit.
        let mut t = SwapStore::new();
        t.push(layer(dir.path(), "z", &[(1, 1)])).unwrap();
        assert!(t.needs_compaction(1, u64::from(MAX_SLOT) + 1));
    }

    #[test]
    fn a_borrowed_layer_is_read_but_never_removed() {
        let t = crate::testutil::TempDir::new();
        let image = t.path().join("mem-1.img");
        let mut w = SwapWriter::create(&image, 16).unwrap();
        let p = page(7);
        w.write_batch(&[(PageIdx(3), p.as_slice())]).unwrap();
        w.finish().unwrap();
        let own = t.path().join("swap.1");
        let mut w = SwapWriter::create(&own, 16).unwrap();
        let q = page(9);
        w.write_batch(&[(PageIdx(4), q.as_slice())]).unwrap();
        w.finish().unwrap();
        let mut store = SwapStore::new();
        store
            .push_borrowed(SwapReader::open(&image).unwrap())
            .unwrap();
        store.push(SwapReader::open(&own).unwrap()).unwrap();
        let mut buf = vec![0u8; PAGE_BYTES];
        store.read_pages_into(PageIdx(3), 0, 1, &mut buf).unwrap();
        assert_eq!(buf, p);
        store.read_pages_into(PageIdx(4), 1, 1, &mut buf).unwrap();
        assert_eq!(buf, q);
        // Nothing refers to either any more: the own file goes, the image stays, still read.
        assert_eq!(store.retain_referenced(|_| false), 1);
        assert!(image.exists());
        assert!(!own.exists());
        assert_eq!(store.borrowed().count(), 1);
        store.read_pages_into(PageIdx(3), 0, 1, &mut buf).unwrap();
        assert_eq!(buf, p);
        store.remove_all();
        assert!(image.exists());
    }
}
