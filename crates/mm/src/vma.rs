//! Virtual memory areas: the application's mappings as ranges with protection and backing,
//! kept sorted, split and merged as Linux does (`struct vm_area_struct`).

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::ops::BitOr;
use std::sync::Arc;

use platform::{Gva, PAGE_SIZE};

/// Lowest address a mapping may start at (Linux's default `vm.mmap_min_addr`).
pub const MMAP_MIN_ADDR: Gva = Gva(0x1_0000);

/// Most VMAs an address space may have (Linux's default `vm.max_map_count`): an mmap with
/// more is `ENOMEM`, as is a munmap that would split one VMA in two at the limit.
pub const MAX_MAP_COUNT: usize = 65530;

/// Access rights of a mapping (`PROT_*`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Prot(u8);

impl Prot {
    /// No access.
    pub const NONE: Prot = Prot(0);
    /// PROT_READ.
    pub const READ: Prot = Prot(libc::PROT_READ as u8);
    /// PROT_WRITE.
    pub const WRITE: Prot = Prot(libc::PROT_WRITE as u8);
    /// PROT_EXEC.
    pub const EXEC: Prot = Prot(libc::PROT_EXEC as u8);
    /// Read and write.
    pub const RW: Prot = Prot(Self::READ.0 | Self::WRITE.0);

    /// From `PROT_*` bits; `None` if any other bit is set.
    pub const fn from_bits(bits: u64) -> Option<Prot> {
        if bits & !7 != 0 {
            None
        } else {
            Some(Prot(bits as u8))
        }
    }
    /// The `PROT_*` bits.
    pub const fn bits(self) -> u64 {
        self.0 as u64
    }
    /// Whether every right of `other` is granted.
    pub const fn contains(self, other: Prot) -> bool {
        self.0 & other.0 == other.0
    }
    /// Whether any access is possible (on x86 write and exec imply read).
    pub const fn is_accessible(self) -> bool {
        self.0 != 0
    }
}

impl BitOr for Prot {
    type Output = Prot;
    fn bitor(self, rhs: Prot) -> Prot {
        Prot(self.0 | rhs.0)
    }
}

impl fmt::Debug for Prot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = |p: Prot, ch: char| if self.contains(p) { ch } else { '-' };
        write!(
            f,
            "{}{}{}",
            c(Prot::READ, 'r'),
            c(Prot::WRITE, 'w'),
            c(Prot::EXEC, 'x')
        )
    }
}

/// Whether a mapping's pages are locked in memory: Linux's `VM_LOCKED` and `VM_LOCKONFAULT`
/// (mlock(2), mlock2(2), mlockall(2), `MAP_LOCKED`). A locked mapping is faulted in whole
/// when it is locked ([`VmLock::Locked`]) or page by page as it is touched
/// ([`VmLock::OnFault`]); the sandbox has no swap while it runs, so its pages stay resident
/// either way. Hibernation does not honour it: it writes every page of the sandbox, locked or
/// not, to the sandbox's swap file (a documented gap; Linux never swaps a locked page).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum VmLock {
    /// Not locked.
    #[default]
    None,
    /// `VM_LOCKED`: every page faulted in when locked.
    Locked,
    /// `VM_LOCKED | VM_LOCKONFAULT`: pages locked as they fault in.
    OnFault,
}

impl VmLock {
    /// Whether the mapping is locked (either way): it counts in `VmLck`.
    pub const fn is_locked(self) -> bool {
        !matches!(self, VmLock::None)
    }

    /// Its number in a checkpoint image: 0, 1, 2 for none, locked, on fault.
    pub const fn code(self) -> u8 {
        match self {
            VmLock::None => 0,
            VmLock::Locked => 1,
            VmLock::OnFault => 2,
        }
    }

    /// The lock a checkpoint image's number names, if any.
    pub const fn from_code(code: u8) -> Option<VmLock> {
        match code {
            0 => Some(VmLock::None),
            1 => Some(VmLock::Locked),
            2 => Some(VmLock::OnFault),
            _ => None,
        }
    }
}

/// What madvise(2) has marked a mapping with, kept with it through splits and merges (two
/// VMAs merge only with the same marks): Linux's `VM_WIPEONFORK`, `VM_DONTCOPY` and
/// `VM_DONTDUMP`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct VmAdvice(u8);

impl VmAdvice {
    /// No mark.
    pub const NONE: VmAdvice = VmAdvice(0);
    /// `MADV_WIPEONFORK` (private anonymous mappings only): fork's child gets the range
    /// zero-filled (and keeps the mark).
    pub const WIPE_ON_FORK: VmAdvice = VmAdvice(1);
    /// `MADV_DONTFORK`: fork's child does not get the mapping at all.
    pub const DONT_FORK: VmAdvice = VmAdvice(2);
    /// `MADV_DONTDUMP`: a core dump leaves the mapping's bytes out.
    pub const DONT_DUMP: VmAdvice = VmAdvice(4);
    /// Every mark.
    const ALL: u8 = 7;

    /// Its bits in a checkpoint image.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// The marks a checkpoint image's bits name, if each is known.
    pub const fn from_bits(bits: u8) -> Option<VmAdvice> {
        if bits & !Self::ALL != 0 {
            None
        } else {
            Some(VmAdvice(bits))
        }
    }

    /// Whether every mark of `other` is set.
    pub const fn contains(self, other: VmAdvice) -> bool {
        self.0 & other.0 == other.0
    }

    /// These marks with `other`'s set (`on`) or cleared.
    pub const fn with(self, other: VmAdvice, on: bool) -> VmAdvice {
        if on {
            VmAdvice(self.0 | other.0)
        } else {
            VmAdvice(self.0 & !other.0)
        }
    }
}

impl BitOr for VmAdvice {
    type Output = VmAdvice;
    fn bitor(self, rhs: VmAdvice) -> VmAdvice {
        VmAdvice(self.0 | rhs.0)
    }
}

/// What backs a mapping: private memory (anonymous or a copy of a file's bytes; writes never
/// reach the file), or a shared object whose pages every process mapping it sees.
#[derive(Clone)]
pub enum VmaKind {
    /// Anonymous memory, zero-filled on first touch.
    Anon,
    /// A private mapping of a host file; the VMA's first page holds the file's bytes at
    /// `offset` (page-aligned).
    File {
        /// The file.
        file: Arc<File>,
        /// File offset of the VMA's start.
        offset: u64,
        /// The file's read-only object when its clean pages are the page cache's, mapped
        /// read-only and copied on the first write (`pagecache.rs`, `cow.rs`); `None`: every
        /// page is a copy in the VM's own memory.
        cache: Option<Arc<crate::shared::SharedObject>>,
    },
    /// A `MAP_SHARED` mapping (anonymous, a file, System V shared memory): the pages are
    /// the object's, shared with every other mapping of it in the sandbox.
    Shared {
        /// The object.
        object: Arc<crate::shared::SharedObject>,
        /// Offset in the object of the VMA's start.
        offset: u64,
        /// Whether the mapping may be made writable (the descriptor was opened for writing;
        /// Linux's `VM_MAYWRITE`).
        may_write: bool,
    },
}

impl VmaKind {
    /// The offset in the file or object of the VMA's start, for mappings that have one.
    pub fn offset_mut(&mut self) -> Option<&mut u64> {
        match self {
            VmaKind::Anon => None,
            VmaKind::File { offset, .. } | VmaKind::Shared { offset, .. } => Some(offset),
        }
    }

    /// Whether the pages are a shared object's (not the process's own).
    pub fn is_shared(&self) -> bool {
        matches!(self, VmaKind::Shared { .. })
    }
}

impl fmt::Debug for VmaKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VmaKind::Anon => write!(f, "Anon"),
            VmaKind::File {
                file,
                offset,
                cache,
            } => {
                let shared = if cache.is_some() { ", page cache" } else { "" };
                write!(f, "File({:p}, {offset:#x}{shared})", Arc::as_ptr(file))
            }
            VmaKind::Shared { object, offset, .. } => {
                write!(f, "Shared({:p}, {offset:#x})", Arc::as_ptr(object))
            }
        }
    }
}

/// One mapping: `[start, end)` with the same rights and backing, like Linux's
/// `struct vm_area_struct`.
#[derive(Debug, Clone)]
pub struct Vma {
    /// First address (page-aligned).
    pub start: Gva,
    /// End address, exclusive (page-aligned, above `start`).
    pub end: Gva,
    /// Access rights.
    pub prot: Prot,
    /// Backing.
    pub kind: VmaKind,
    /// Name shown in /proc/self/maps (`[heap]`, `[stack]`), if any.
    pub name: Option<String>,
    /// Whether its pages are locked in memory (mlock).
    pub lock: VmLock,
    /// Sealed by mseal(2) (Linux's `VM_SEALED`): munmap, mremap, mprotect, mmap over it and
    /// destructive madvise on it are EPERM for the rest of the address space's life.
    pub sealed: bool,
    /// What madvise(2) marked it with (wipe or skip on fork, leave out of core dumps).
    pub advice: VmAdvice,
}

impl Vma {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.end.0 - self.start.0
    }

    /// Whether the VMA is empty (never true for a VMA in a set).
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    /// Whether `va` lies inside.
    pub fn contains(&self, va: Gva) -> bool {
        self.start <= va && va < self.end
    }

    /// For a file mapping, the file offset behind `va`.
    pub fn file_offset(&self, va: Gva) -> Option<u64> {
        match &self.kind {
            VmaKind::Anon => None,
            VmaKind::File { offset, .. } | VmaKind::Shared { offset, .. } => {
                offset.checked_add(va.0.wrapping_sub(self.start.0))
            }
        }
    }

    /// Splits at `at` (strictly inside): `self` keeps `[start, at)`, the result is `[at, end)`
    /// with its file offset advanced.
    fn split_off(&mut self, at: Gva) -> Vma {
        let mut right = self.clone();
        right.start = at;
        if let Some(offset) = right.kind.offset_mut() {
            *offset += at.0 - self.start.0;
        }
        self.end = at;
        right
    }

    /// Whether `next` can be merged onto the end of `self`.
    fn can_merge(&self, next: &Vma) -> bool {
        if self.end != next.start
            || self.prot != next.prot
            || self.name != next.name
            || self.lock != next.lock
            || self.sealed != next.sealed
            || self.advice != next.advice
        {
            return false;
        }
        match (&self.kind, &next.kind) {
            (VmaKind::Anon, VmaKind::Anon) => true,
            (
                VmaKind::File {
                    file: a,
                    offset: oa,
                    ..
                },
                VmaKind::File {
                    file: b,
                    offset: ob,
                    ..
                },
            ) => Arc::ptr_eq(a, b) && oa.checked_add(self.len()) == Some(*ob),
            (
                VmaKind::Shared {
                    object: a,
                    offset: oa,
                    may_write: wa,
                },
                VmaKind::Shared {
                    object: b,
                    offset: ob,
                    may_write: wb,
                },
            ) => Arc::ptr_eq(a, b) && wa == wb && oa.checked_add(self.len()) == Some(*ob),
            _ => false,
        }
    }
}

/// Errors of VMA-set operations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VmaError {
    /// The VMA is empty or not page-aligned.
    #[error("invalid range {start}..{end}")]
    BadRange {
        /// Start.
        start: Gva,
        /// End.
        end: Gva,
    },
    /// The new VMA overlaps an existing one.
    #[error("{start}..{end} overlaps an existing mapping")]
    Overlap {
        /// Start.
        start: Gva,
        /// End.
        end: Gva,
    },
    /// Part of the range is not mapped.
    #[error("{start}..{end} is not fully mapped")]
    Hole {
        /// Start.
        start: Gva,
        /// End.
        end: Gva,
    },
}

/// The set of VMAs of an address space, sorted and non-overlapping, keyed by start.
#[derive(Debug, Clone, Default)]
pub struct VmaSet {
    map: BTreeMap<Gva, Vma>,
}

fn check_range(start: Gva, end: Gva) -> Result<(), VmaError> {
    if start < end && start.is_page_aligned() && end.is_page_aligned() {
        Ok(())
    } else {
        Err(VmaError::BadRange { start, end })
    }
}

impl VmaSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of VMAs.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The VMAs in address order.
    pub fn iter(&self) -> impl Iterator<Item = &Vma> + '_ {
        self.map.values()
    }

    /// The VMA containing `va`.
    pub fn find(&self, va: Gva) -> Option<&Vma> {
        self.map
            .range(..=va)
            .next_back()
            .map(|(_, v)| v)
            .filter(|v| v.contains(va))
    }

    /// The VMAs overlapping `[start, end)`, in order.
    pub fn overlapping(&self, start: Gva, end: Gva) -> impl Iterator<Item = &Vma> + '_ {
        let first = self
            .map
            .range(..start)
            .next_back()
            .filter(|(_, v)| v.end > start)
            .map(|(k, _)| *k)
            .unwrap_or(start);
        self.map
            .range(first..)
            .map(|(_, v)| v)
            .take_while(move |v| v.start < end)
    }

    /// Whether no VMA overlaps `[start, end)`.
    pub fn is_free(&self, start: Gva, end: Gva) -> bool {
        self.overlapping(start, end).next().is_none()
    }

    /// Whether `[start, end)` is entirely covered by VMAs.
    pub fn covers(&self, start: Gva, end: Gva) -> bool {
        let mut at = start;
        for v in self.overlapping(start, end) {
            if v.start > at {
                return false;
            }
            at = v.end;
        }
        at >= end
    }

    /// Inserts a VMA that overlaps none (callers remove overlaps first), merging it with
    /// compatible neighbours.
    ///
    /// # Errors
    /// [`VmaError::BadRange`], [`VmaError::Overlap`]; the set is unchanged.
    pub fn insert(&mut self, vma: Vma) -> Result<(), VmaError> {
        check_range(vma.start, vma.end)?;
        if !self.is_free(vma.start, vma.end) {
            return Err(VmaError::Overlap {
                start: vma.start,
                end: vma.end,
            });
        }
        let (start, end) = (vma.start, vma.end);
        self.map.insert(start, vma);
        self.merge_at(end);
        self.merge_at(start);
        Ok(())
    }

    /// Inserts a VMA that overlaps none without merging it with its neighbours, so that a
    /// restored set has exactly the VMAs it was saved with (two adjacent VMAs of one file
    /// opened twice were apart, and one reopened file would let them merge).
    ///
    /// # Errors
    /// [`VmaError::BadRange`], [`VmaError::Overlap`]; the set is unchanged.
    pub(crate) fn insert_unmerged(&mut self, vma: Vma) -> Result<(), VmaError> {
        check_range(vma.start, vma.end)?;
        if !self.is_free(vma.start, vma.end) {
            return Err(VmaError::Overlap {
                start: vma.start,
                end: vma.end,
            });
        }
        self.map.insert(vma.start, vma);
        Ok(())
    }

    /// Splits the VMA containing `at` (if `at` is strictly inside one) into two.
    fn split_at(&mut self, at: Gva) {
        let Some((_, v)) = self.map.range_mut(..at).next_back() else {
            return;
        };
        if v.end > at {
            let right = v.split_off(at);
            self.map.insert(at, right);
        }
    }

    /// Merges the VMA ending at `at` with the one starting there, if compatible.
    fn merge_at(&mut self, at: Gva) {
        let Some(next) = self.map.get(&at) else {
            return;
        };
        let Some((_, prev)) = self.map.range(..at).next_back() else {
            return;
        };
        if !prev.can_merge(next) {
            return;
        }
        let prev_start = prev.start;
        if let Some(next) = self.map.remove(&at) {
            if let Some(prev) = self.map.get_mut(&prev_start) {
                prev.end = next.end;
            }
        }
    }

    /// Removes `[start, end)`, splitting VMAs that straddle either end; returns the removed
    /// pieces in order (empty if nothing was mapped there).
    ///
    /// # Errors
    /// [`VmaError::BadRange`].
    pub fn remove(&mut self, start: Gva, end: Gva) -> Result<Vec<Vma>, VmaError> {
        check_range(start, end)?;
        self.split_at(start);
        self.split_at(end);
        let keys: Vec<Gva> = self.map.range(start..end).map(|(k, _)| *k).collect();
        Ok(keys
            .into_iter()
            .filter_map(|k| self.map.remove(&k))
            .collect())
    }

    /// Sets the rights of `[start, end)`, splitting at both ends and merging neighbours that
    /// become compatible.
    ///
    /// # Errors
    /// [`VmaError::BadRange`], or [`VmaError::Hole`] if part of the range is unmapped (then
    /// nothing changes).
    pub fn protect(&mut self, start: Gva, end: Gva, prot: Prot) -> Result<(), VmaError> {
        self.update(start, end, |v| v.prot = prot)
    }

    /// Sets the lock of `[start, end)` (mlock, munlock), splitting and merging as
    /// [`protect`](Self::protect) does.
    ///
    /// # Errors
    /// As [`protect`](Self::protect).
    pub fn set_lock(&mut self, start: Gva, end: Gva, lock: VmLock) -> Result<(), VmaError> {
        self.update(start, end, |v| v.lock = lock)
    }

    /// Applies `change` to every VMA of `[start, end)` after splitting at both ends, then
    /// merges neighbours that became compatible.
    fn update(
        &mut self,
        start: Gva,
        end: Gva,
        mut change: impl FnMut(&mut Vma),
    ) -> Result<(), VmaError> {
        check_range(start, end)?;
        if !self.covers(start, end) {
            return Err(VmaError::Hole { start, end });
        }
        self.split_at(start);
        self.split_at(end);
        let keys: Vec<Gva> = self.map.range(start..end).map(|(k, _)| *k).collect();
        for k in &keys {
            if let Some(v) = self.map.get_mut(k) {
                change(v);
            }
        }
        // Merge from the right so keys stay valid: the end, each interior boundary, the start.
        self.merge_at(end);
        for k in keys.iter().rev() {
            self.merge_at(*k);
        }
        Ok(())
    }

    /// Seals `[start, end)` (mseal), splitting at both ends and merging neighbours that
    /// become compatible.
    ///
    /// # Errors
    /// [`VmaError::BadRange`], or [`VmaError::Hole`] if part of the range is unmapped (then
    /// nothing changes).
    pub fn seal(&mut self, start: Gva, end: Gva) -> Result<(), VmaError> {
        self.update(start, end, |v| v.sealed = true)
    }

    /// Sets (`on`) or clears the marks `advice` on every VMA of `[start, end)` (madvise),
    /// splitting and merging as [`protect`](Self::protect) does.
    ///
    /// # Errors
    /// As [`protect`](Self::protect).
    pub fn set_advice(
        &mut self,
        start: Gva,
        end: Gva,
        advice: VmAdvice,
        on: bool,
    ) -> Result<(), VmaError> {
        self.update(start, end, |v| v.advice = v.advice.with(advice, on))
    }

    /// Whether any VMA overlapping `[start, end)` is sealed.
    pub fn any_sealed(&self, start: Gva, end: Gva) -> bool {
        self.overlapping(start, end).any(|v| v.sealed)
    }

    /// The highest start address of a free range of `len` bytes (page-rounded) lying in
    /// `[MMAP_MIN_ADDR, below)`, searching top-down.
    pub fn find_gap(&self, len: u64, below: Gva) -> Option<Gva> {
        self.find_gap_above(len, MMAP_MIN_ADDR, below)
    }

    /// As [`find_gap`](Self::find_gap) with an explicit floor.
    pub fn find_gap_above(&self, len: u64, floor: Gva, below: Gva) -> Option<Gva> {
        let len = Gva(len).page_up()?.0;
        if len == 0 {
            return None;
        }
        let floor = floor.page_up()?.0;
        let mut hi = below.page_down().0;
        for v in self.map.range(..Gva(hi)).rev().map(|(_, v)| v) {
            if v.end.0 <= hi && hi - v.end.0 >= len && hi - len >= floor {
                return Some(Gva(hi - len));
            }
            hi = hi.min(v.start.0);
            if hi < floor.saturating_add(len) {
                return None;
            }
        }
        (hi >= floor && hi - floor >= len).then(|| Gva(hi - len))
    }
}

/// Rounds a byte length up to pages, or `None` on overflow.
pub(crate) fn page_len(len: u64) -> Option<u64> {
    len.checked_add(PAGE_SIZE - 1).map(|l| l & !(PAGE_SIZE - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anon(start: u64, end: u64, prot: Prot) -> Vma {
        Vma {
            start: Gva(start),
            end: Gva(end),
            prot,
            kind: VmaKind::Anon,
            name: None,
            lock: VmLock::None,
            sealed: false,
            advice: VmAdvice::NONE,
        }
    }

    fn spans(s: &VmaSet) -> Vec<(u64, u64)> {
        s.iter().map(|v| (v.start.0, v.end.0)).collect()
    }

    #[test]
    fn insert_merges_and_rejects_overlap() {
        let mut s = VmaSet::new();
        s.insert(anon(0x10000, 0x20000, Prot::RW)).unwrap();
        s.insert(anon(0x30000, 0x40000, Prot::RW)).unwrap();
        assert_eq!(s.len(), 2);
        s.insert(anon(0x20000, 0x30000, Prot::RW)).unwrap();
        assert_eq!(spans(&s), vec![(0x10000, 0x40000)]);
        assert_eq!(
            s.insert(anon(0x3f000, 0x41000, Prot::RW)),
            Err(VmaError::Overlap {
                start: Gva(0x3f000),
                end: Gva(0x41000)
            })
        );
        assert!(s.insert(anon(0x50000, 0x50000, Prot::RW)).is_err());
        assert!(s.insert(anon(0x50001, 0x51000, Prot::RW)).is_err());
        // Different prot or name: no merge.
        s.insert(anon(0x40000, 0x41000, Prot::READ)).unwrap();
        let mut named = anon(0x41000, 0x42000, Prot::READ);
        named.name = Some("[heap]".into());
        s.insert(named).unwrap();
        assert_eq!(s.len(), 3);
        assert!(s.find(Gva(0x41fff)).unwrap().name.is_some());
        assert!(s.find(Gva(0x42000)).is_none());
        assert!(s.find(Gva(0xffff)).is_none());
        assert_eq!(s.find(Gva(0x10000)).unwrap().start, Gva(0x10000));
    }

    #[test]
    fn remove_splits_both_ends() {
        let mut s = VmaSet::new();
        s.insert(anon(0x10000, 0x20000, Prot::RW)).unwrap();
        s.insert(anon(0x30000, 0x40000, Prot::READ)).unwrap();
        let removed = s.remove(Gva(0x18000), Gva(0x34000)).unwrap();
        assert_eq!(
            removed
                .iter()
                .map(|v| (v.start.0, v.end.0))
                .collect::<Vec<_>>(),
            vec![(0x18000, 0x20000), (0x30000, 0x34000)]
        );
        assert_eq!(spans(&s), vec![(0x10000, 0x18000), (0x34000, 0x40000)]);
        assert_eq!(s.find(Gva(0x34000)).unwrap().prot, Prot::READ);
        assert!(s.remove(Gva(0x50000), Gva(0x60000)).unwrap().is_empty());
        // A hole punched in the middle of one VMA.
        let removed = s.remove(Gva(0x12000), Gva(0x13000)).unwrap();
        assert_eq!(removed.len(), 1);
        assert_eq!(
            spans(&s),
            vec![(0x10000, 0x12000), (0x13000, 0x18000), (0x34000, 0x40000)]
        );
    }

    #[test]
    fn protect_middle_makes_three_then_merges_back() {
        let mut s = VmaSet::new();
        s.insert(anon(0x10000, 0x20000, Prot::RW)).unwrap();
        s.protect(Gva(0x14000), Gva(0x15000), Prot::READ).unwrap();
        assert_eq!(
            spans(&s),
            vec![(0x10000, 0x14000), (0x14000, 0x15000), (0x15000, 0x20000)]
        );
        assert_eq!(s.find(Gva(0x14000)).unwrap().prot, Prot::READ);
        assert_eq!(s.find(Gva(0x15000)).unwrap().prot, Prot::RW);
        s.protect(Gva(0x14000), Gva(0x15000), Prot::RW).unwrap();
        assert_eq!(spans(&s), vec![(0x10000, 0x20000)]);
        assert_eq!(
            s.protect(Gva(0x1f000), Gva(0x21000), Prot::READ),
            Err(VmaError::Hole {
                start: Gva(0x1f000),
                end: Gva(0x21000)
            })
        );
        assert_eq!(spans(&s), vec![(0x10000, 0x20000)]);
        assert!(s.covers(Gva(0x10000), Gva(0x20000)));
        assert!(!s.covers(Gva(0xf000), Gva(0x11000)));
    }

    #[test]
    fn file_offsets_follow_splits_and_gate_merges() {
        let path = std::env::temp_dir().join(format!("mm-vma-{}", std::process::id()));
        let f = Arc::new(File::create(&path).unwrap());
        let g = Arc::new(File::create(path.with_extension("b")).unwrap());
        let file = |start, end, offset, file: &Arc<File>| Vma {
            start: Gva(start),
            end: Gva(end),
            prot: Prot::READ,
            kind: VmaKind::File {
                file: file.clone(),
                offset,
                cache: None,
            },
            name: None,
            lock: VmLock::None,
            sealed: false,
            advice: VmAdvice::NONE,
        };
        let mut s = VmaSet::new();
        s.insert(file(0x10000, 0x20000, 0x3000, &f)).unwrap();
        s.protect(Gva(0x12000), Gva(0x13000), Prot::RW).unwrap();
        let offs: Vec<_> = s.iter().map(|v| v.file_offset(v.start).unwrap()).collect();
        assert_eq!(offs, vec![0x3000, 0x5000, 0x6000]);
        assert_eq!(
            s.find(Gva(0x1f000)).unwrap().file_offset(Gva(0x1f000)),
            Some(0x12000)
        );
        // Contiguous offsets of the same file merge; a gap in offsets or another file do not.
        s.insert(file(0x20000, 0x21000, 0x13000, &f)).unwrap();
        assert_eq!(s.find(Gva(0x20000)).unwrap().start, Gva(0x13000));
        s.insert(file(0x21000, 0x22000, 0x15000, &f)).unwrap();
        s.insert(file(0x22000, 0x23000, 0x16000, &g)).unwrap();
        s.insert(anon(0x23000, 0x24000, Prot::READ)).unwrap();
        assert_eq!(s.len(), 6);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(path.with_extension("b"));
    }

    #[test]
    fn lock_splits_merges_and_counts() {
        let mut s = VmaSet::new();
        s.insert(anon(0x10000, 0x20000, Prot::RW)).unwrap();
        s.set_lock(Gva(0x12000), Gva(0x14000), VmLock::Locked)
            .unwrap();
        assert_eq!(
            spans(&s),
            vec![(0x10000, 0x12000), (0x12000, 0x14000), (0x14000, 0x20000)]
        );
        assert_eq!(s.find(Gva(0x13000)).unwrap().lock, VmLock::Locked);
        // Locking again changes nothing; locking a neighbour the same way merges.
        s.set_lock(Gva(0x12000), Gva(0x14000), VmLock::Locked)
            .unwrap();
        s.set_lock(Gva(0x14000), Gva(0x15000), VmLock::Locked)
            .unwrap();
        assert_eq!(
            spans(&s),
            vec![(0x10000, 0x12000), (0x12000, 0x15000), (0x15000, 0x20000)]
        );
        // On-fault is another lock: no merge with a locked neighbour.
        s.set_lock(Gva(0x15000), Gva(0x16000), VmLock::OnFault)
            .unwrap();
        assert_eq!(s.len(), 4);
        assert_eq!(
            s.set_lock(Gva(0x1f000), Gva(0x21000), VmLock::None),
            Err(VmaError::Hole {
                start: Gva(0x1f000),
                end: Gva(0x21000)
            })
        );
        s.set_lock(Gva(0x10000), Gva(0x20000), VmLock::None)
            .unwrap();
        assert_eq!(spans(&s), vec![(0x10000, 0x20000)]);
        // A split of a locked VMA keeps the lock on both sides.
        s.set_lock(Gva(0x10000), Gva(0x20000), VmLock::Locked)
            .unwrap();
        s.remove(Gva(0x18000), Gva(0x19000)).unwrap();
        assert!(s.iter().all(|v| v.lock == VmLock::Locked));
        for (code, lock) in [(0, VmLock::None), (1, VmLock::Locked), (2, VmLock::OnFault)] {
            assert_eq!(lock.code(), code);
            assert_eq!(VmLock::from_code(code), Some(lock));
        }
        assert_eq!(VmLock::from_code(3), None);
    }

    #[test]
    fn gap_search_top_down() {
        let mut s = VmaSet::new();
        let top = Gva(0x100000);
        assert_eq!(s.find_gap(0x1000, top), Some(Gva(0xff000)));
        s.insert(anon(0xf0000, 0x100000, Prot::RW)).unwrap();
        s.insert(anon(0xd0000, 0xe0000, Prot::RW)).unwrap();
        // Fits in the 64 KiB hole between them.
        assert_eq!(s.find_gap(0x10000, top), Some(Gva(0xe0000)));
        assert_eq!(s.find_gap(0x8000, top), Some(Gva(0xe8000)));
        // Too big for the hole: goes below the lower VMA.
        assert_eq!(s.find_gap(0x11000, top), Some(Gva(0xd0000 - 0x11000)));
        // A VMA straddling the ceiling.
        assert_eq!(s.find_gap(0x1000, Gva(0xd8000)), Some(Gva(0xcf000)));
        // Floor respected.
        assert_eq!(s.find_gap(0xd0000 - 0x10000, top), Some(MMAP_MIN_ADDR));
        assert_eq!(s.find_gap(0xd0000 - 0x10000 + 0x1000, top), None);
        assert_eq!(s.find_gap(0, top), None);
        assert_eq!(s.find_gap(u64::MAX, top), None);
        assert_eq!(s.find_gap(0x1000, Gva(0x10000)), None);
    }
}
