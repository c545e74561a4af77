//! Four-level x86-64 guest page tables, living in guest memory: the kernel direct map (2 MiB
//! pages, supervisor only) and the application's 4 KiB mappings, plus the record of every entry
//! the host wrote, for the platform's PTE-sync stub.
//!
//! ```text
//! CR3 → PML4 ─┬─ [0..255)  user half: PDPT → PD → PT → 4 KiB frames   (P|RW|US above leaves)
//!             └─ [255]     DIRECT_MAP_BASE: PDPT → PDs ─┬─ PD[0] → PT: 4 KiB pages of the first
//!                                                     │   2 MiB, P|RW, but the stub page P|US
//!                                                     └─ PD[1..]: 2 MiB pages, P|RW|PS
//! ```
//!
//! Upper-level entries are P|RW|US everywhere, so leaves alone decide the rights. The direct
//! map is supervisor-only except the platform's stub page ([`layout::STUBS`]), which is
//! user-readable, read-only and executable: on the PVM hypervisor `syscall` reaches LSTAR still
//! under ring-3 page permissions (see `platform::stubs`).
//!
//! Why the dirty set: on the machines torpor is built on, KVM shadows the guest's page tables
//! and does not see host-side writes to entries that are already present. The host still
//! writes every entry straight into guest memory (so its own walks see the change at once), and
//! records the guest-physical address of each entry it wrote. Before the guest runs again the
//! platform hands [`PageTables::take_dirty_runs`] to a ring-0 stub that rewrites those entries
//! in place through the direct map (`rep movsq` with `rsi == rdi` over each run), which the
//! shadow MMU traps and applies, and then reloads CR3.
//!
//! Pages holding page tables come from the page allocator (reference count 1) and are not
//! freed while the address space lives: an emptied table stays allocated, linked and zero.
//! They go with the memory, or, for an address space whose family outlives it (a fork
//! sharing frames), back to the allocator when it goes (`PageTables::table_frames`). The
//! direct map is built before the guest first runs, so its entries are not recorded as dirty.
//!
//! A PROT_NONE page keeps its frame in a not-present entry marked with the software bit
//! [`PteFlags::PROT_NONE`] (bit 10, ignored by the CPU), as Linux does with `_PAGE_PROTNONE`:
//! the hardware faults on any access, and the host still knows which frame holds the data.

use std::fmt;
use std::ops::{BitOr, BitOrAssign};
use std::sync::Arc;

use platform::layout;
pub use platform::PteRun;
use platform::{Gpa, GuestMemory, Gva, MemoryError, PageRun, PAGE_SIZE};

use crate::alloc::PageAllocator;

/// Bits of a page-table entry that hold the frame address.
const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;
/// Entries per table page.
const ENTRIES: u64 = 512;
/// Bytes mapped by one 2 MiB page.
const HUGE_2M: u64 = 2 << 20;
/// Flags of upper-level entries: the leaves decide the rights.
const TABLE: PteFlags = PteFlags(PteFlags::PRESENT.0 | PteFlags::WRITABLE.0 | PteFlags::USER.0);
/// Flags of the direct map's leaves.
const KERNEL_PAGE: PteFlags = PteFlags(PteFlags::PRESENT.0 | PteFlags::WRITABLE.0);
/// Flags of the stub page in the direct map: user-readable, read-only, executable.
const STUB_PAGE: PteFlags = PteFlags(PteFlags::PRESENT.0 | PteFlags::USER.0);

/// The flag bits of a page-table entry.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PteFlags(u64);

impl PteFlags {
    /// P: the entry maps something.
    pub const PRESENT: PteFlags = PteFlags(1 << 0);
    /// R/W: writes allowed.
    pub const WRITABLE: PteFlags = PteFlags(1 << 1);
    /// U/S: ring 3 may access.
    pub const USER: PteFlags = PteFlags(1 << 2);
    /// A: set by the CPU on access.
    pub const ACCESSED: PteFlags = PteFlags(1 << 5);
    /// D: set by the CPU on write (leaves only).
    pub const DIRTY: PteFlags = PteFlags(1 << 6);
    /// PS: a large page (2 MiB in a PD, 1 GiB in a PDPT).
    pub const HUGE: PteFlags = PteFlags(1 << 7);
    /// Software bit (ignored by the CPU): a not-present leaf that still owns its frame
    /// because the page is PROT_NONE.
    pub const PROT_NONE: PteFlags = PteFlags(1 << 10);
    /// XD: instruction fetches fault. Needs EFER.NXE, or the bit is reserved.
    pub const NO_EXEC: PteFlags = PteFlags(1 << 63);

    /// No flags.
    pub const fn empty() -> Self {
        PteFlags(0)
    }
    /// The raw bits.
    pub const fn bits(self) -> u64 {
        self.0
    }
    /// Flags from raw entry bits (the address bits are dropped).
    pub const fn from_bits_truncate(bits: u64) -> Self {
        PteFlags(bits & !ADDR_MASK)
    }
    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: PteFlags) -> bool {
        self.0 & other.0 == other.0
    }
    /// `self` without the flags of `other`.
    pub const fn without(self, other: PteFlags) -> Self {
        PteFlags(self.0 & !other.0)
    }
    /// Whether an entry with these flags owns a frame (present, or PROT_NONE).
    pub const fn holds_frame(self) -> bool {
        self.0 & (Self::PRESENT.0 | Self::PROT_NONE.0) != 0
    }
}

impl BitOr for PteFlags {
    type Output = PteFlags;
    fn bitor(self, rhs: PteFlags) -> PteFlags {
        PteFlags(self.0 | rhs.0)
    }
}

impl BitOrAssign for PteFlags {
    fn bitor_assign(&mut self, rhs: PteFlags) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for PteFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(PteFlags, &str); 8] = [
            (PteFlags::PRESENT, "P"),
            (PteFlags::WRITABLE, "RW"),
            (PteFlags::USER, "US"),
            (PteFlags::ACCESSED, "A"),
            (PteFlags::DIRTY, "D"),
            (PteFlags::HUGE, "PS"),
            (PteFlags::PROT_NONE, "PROTNONE"),
            (PteFlags::NO_EXEC, "NX"),
        ];
        let names: Vec<_> = NAMES
            .iter()
            .filter(|(b, _)| self.contains(*b))
            .map(|(_, n)| *n)
            .collect();
        write!(f, "PteFlags({})", names.join("|"))
    }
}

/// Errors of page-table operations.
#[derive(Debug, thiserror::Error)]
pub enum PageTableError {
    /// No page left for a new table.
    #[error("out of guest memory for page tables")]
    OutOfMemory,
    /// The address is not in the user half, or not page-aligned.
    #[error("{0} is not a page-aligned user address")]
    BadAddress(Gva),
    /// The frame is not page-aligned or lies outside guest memory.
    #[error("{0} is not a page frame of guest memory")]
    BadFrame(Gpa),
    /// The flags give the entry no frame (neither PRESENT nor PROT_NONE).
    #[error("flags {0:?} map nothing")]
    BadFlags(PteFlags),
    /// A frame is already mapped at the address.
    #[error("{0} is already mapped")]
    AlreadyMapped(Gva),
    /// Nothing is mapped at the address.
    #[error("{0} is not mapped")]
    NotMapped(Gva),
    /// A table entry is inconsistent (a large page in the user half).
    #[error("corrupt page-table entry at {0}")]
    Corrupt(Gpa),
    /// Guest memory is larger than the direct map (512 GiB) or smaller than its first 2 MiB.
    #[error("guest memory of {0} bytes is too large for the direct map")]
    TooLarge(u64),
    /// A table access left guest memory.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

/// What a walk found for one address.
enum Probe {
    /// An upper-level entry is absent; it would have covered `span` bytes.
    Missing { span: u64 },
    /// The leaf (PT) entry at `slot`, with its raw value.
    Leaf { slot: Gpa, entry: u64 },
}

/// The guest's page tables.
pub struct PageTables {
    mem: Arc<GuestMemory>,
    root: Gpa,
    /// Guest-physical addresses of entries written since the last `take_dirty_runs`, in
    /// the order written, repeats included (sorted and deduplicated when taken: a push per
    /// entry, where an ordered set's insert was a fork's largest cost per page).
    dirty: Vec<u64>,
    /// User pages whose leaf entry changed (or that must be made visible again) since the
    /// last `take_changed_pages`: what a platform that maps pages itself (trap) commits. As
    /// `dirty`, sorted when taken.
    changed: Vec<u64>,
    table_pages: usize,
    mapped: usize,
}

fn index(va: u64, level: u32) -> u64 {
    (va >> (12 + 9 * level)) & (ENTRIES - 1)
}

fn slot(table: Gpa, idx: u64) -> Gpa {
    Gpa(table.0 + idx * 8)
}

/// The frame an entry maps.
pub(crate) fn entry_frame(entry: u64) -> Gpa {
    Gpa(entry & ADDR_MASK)
}

/// The entries in `bytes` read from a table (little-endian `u64`s).
fn entries(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes.chunks_exact(8).map(|raw| {
        let mut word = [0u8; 8];
        word.copy_from_slice(raw);
        u64::from_le_bytes(word)
    })
}

impl PageTables {
    /// Allocates the PML4 and builds the kernel direct map of all of `mem`.
    ///
    /// # Errors
    /// [`PageTableError::OutOfMemory`] if the allocator runs out,
    /// [`PageTableError::TooLarge`] above 512 GiB of guest memory.
    pub fn new(mem: Arc<GuestMemory>, alloc: &mut PageAllocator) -> Result<Self, PageTableError> {
        let size = mem.size();
        let huge_pages = size.div_ceil(HUGE_2M);
        let pds = huge_pages.div_ceil(ENTRIES);
        if !(HUGE_2M..=layout::DIRECT_MAP_SIZE).contains(&size) {
            return Err(PageTableError::TooLarge(size));
        }
        let mut pt = PageTables {
            mem,
            root: Gpa(0),
            dirty: Vec::new(),
            changed: Vec::new(),
            table_pages: 0,
            mapped: 0,
        };
        pt.root = pt.new_table(alloc)?;
        let pdpt = pt.new_table(alloc)?;
        pt.write_entry(
            slot(pt.root, index(layout::DIRECT_MAP_BASE, 3)),
            pdpt.0 | TABLE.0,
        )?;
        for d in 0..pds {
            let pd = pt.new_table(alloc)?;
            pt.write_entry(slot(pdpt, d), pd.0 | TABLE.0)?;
            for e in 0..ENTRIES.min(huge_pages - d * ENTRIES) {
                let frame = (d * ENTRIES + e) * HUGE_2M;
                pt.write_entry(slot(pd, e), frame | KERNEL_PAGE.0 | PteFlags::HUGE.0)?;
            }
            if d == 0 {
                // The first 2 MiB in 4 KiB pages, for the stub page's own rights.
                let low = pt.new_table(alloc)?;
                for e in 0..ENTRIES {
                    let frame = e * PAGE_SIZE;
                    let flags = if frame == layout::STUBS.0 {
                        STUB_PAGE
                    } else {
                        KERNEL_PAGE
                    };
                    pt.write_entry(slot(low, e), frame | flags.0)?;
                }
                pt.write_entry(slot(pd, 0), low.0 | TABLE.0)?;
            }
        }
        // The guest has never run with these tables: nothing to sync.
        pt.dirty.clear();
        Ok(pt)
    }

    /// Page tables that already live in `mem` (a restored checkpoint's pages): rooted at
    /// `root`, with `table_pages` table pages and `mapped` user leaves owning a frame, as
    /// [`table_pages`](Self::table_pages) and [`mapped_pages`](Self::mapped_pages) reported
    /// them. Guest memory is neither read nor written (its pages may not be restored yet);
    /// the caller has checked `root` against the allocator. Nothing awaits the PTE-sync stub:
    /// a new VM starts from these tables.
    pub(crate) fn from_parts(
        mem: Arc<GuestMemory>,
        root: Gpa,
        table_pages: usize,
        mapped: usize,
    ) -> Self {
        PageTables {
            mem,
            root,
            dirty: Vec::new(),
            changed: Vec::new(),
            table_pages,
            mapped,
        }
    }

    /// The PML4's guest-physical address, for CR3.
    pub fn root(&self) -> Gpa {
        self.root
    }

    /// Pages holding page tables.
    pub fn table_pages(&self) -> usize {
        self.table_pages
    }

    /// User leaf entries owning a frame (present or PROT_NONE).
    pub fn mapped_pages(&self) -> usize {
        self.mapped
    }

    fn new_table(&mut self, alloc: &mut PageAllocator) -> Result<Gpa, PageTableError> {
        let (page, zero) = alloc.alloc().ok_or(PageTableError::OutOfMemory)?;
        if !zero {
            self.mem.fill(page, 0, PAGE_SIZE)?;
        }
        self.table_pages += 1;
        Ok(page)
    }

    fn write_entry(&mut self, at: Gpa, value: u64) -> Result<(), PageTableError> {
        self.mem.write_u64(at, value)?;
        self.dirty.push(at.0);
        Ok(())
    }

    fn check_user(va: Gva) -> Result<(), PageTableError> {
        if layout::is_user(va) && va.is_page_aligned() {
            Ok(())
        } else {
            Err(PageTableError::BadAddress(va))
        }
    }

    /// Walks the user half down to the leaf entry for `va`.
    fn probe(&self, va: Gva) -> Result<Probe, PageTableError> {
        Self::check_user(va.page_down())?;
        let mut table = self.root;
        for level in (1..=3).rev() {
            let at = slot(table, index(va.0, level));
            let e = self.mem.read_u64(at)?;
            if e & PteFlags::PRESENT.0 == 0 {
                return Ok(Probe::Missing {
                    span: 1 << (12 + 9 * level),
                });
            }
            if e & PteFlags::HUGE.0 != 0 {
                return Err(PageTableError::Corrupt(at));
            }
            table = Gpa(e & ADDR_MASK);
        }
        let at = slot(table, index(va.0, 0));
        Ok(Probe::Leaf {
            slot: at,
            entry: self.mem.read_u64(at)?,
        })
    }

    /// The leaf slot for `va`, creating missing tables.
    fn leaf_slot(&mut self, alloc: &mut PageAllocator, va: Gva) -> Result<Gpa, PageTableError> {
        Self::check_user(va)?;
        let mut table = self.root;
        for level in (1..=3).rev() {
            let at = slot(table, index(va.0, level));
            let e = self.mem.read_u64(at)?;
            table = if e & PteFlags::PRESENT.0 == 0 {
                let t = self.new_table(alloc)?;
                self.write_entry(at, t.0 | TABLE.0)?;
                t
            } else if e & PteFlags::HUGE.0 != 0 {
                return Err(PageTableError::Corrupt(at));
            } else {
                Gpa(e & ADDR_MASK)
            };
        }
        Ok(slot(table, index(va.0, 0)))
    }

    /// Creates the tables down to the leaf for user page `va`, so that a later
    /// [`map`](Self::map) there cannot run out of memory.
    ///
    /// # Errors
    /// [`PageTableError::BadAddress`], [`PageTableError::OutOfMemory`].
    pub fn prepare(&mut self, alloc: &mut PageAllocator, va: Gva) -> Result<(), PageTableError> {
        self.leaf_slot(alloc, va).map(|_| ())
    }

    /// Translates any virtual address (user or direct map) to the guest-physical address of
    /// the same byte, with the flags of the leaf entry; `None` if not present.
    pub fn translate(&self, va: Gva) -> Option<(Gpa, PteFlags)> {
        // Canonical addresses only.
        let top = va.0 >> 47;
        if top != 0 && top != 0x1_ffff {
            return None;
        }
        let mut table = self.root;
        for level in (0..=3).rev() {
            let e = self.mem.read_u64(slot(table, index(va.0, level))).ok()?;
            if e & PteFlags::PRESENT.0 == 0 {
                return None;
            }
            let leaf = level == 0 || (level <= 2 && e & PteFlags::HUGE.0 != 0);
            if leaf {
                let size = 1u64 << (12 + 9 * level);
                let frame = e & ADDR_MASK & !(size - 1);
                return Some((
                    Gpa(frame | (va.0 & (size - 1))),
                    PteFlags::from_bits_truncate(e),
                ));
            }
            table = Gpa(e & ADDR_MASK);
        }
        None
    }

    /// The frame and flags of the user leaf entry at `va` if it owns a frame (present or
    /// PROT_NONE).
    pub fn entry(&self, va: Gva) -> Option<(Gpa, PteFlags)> {
        match self.probe(va) {
            Ok(Probe::Leaf { entry, .. }) if PteFlags::from_bits_truncate(entry).holds_frame() => {
                Some((Gpa(entry & ADDR_MASK), PteFlags::from_bits_truncate(entry)))
            }
            _ => None,
        }
    }

    /// Maps user page `va` to frame `frame` with `flags` (which must include PRESENT or
    /// PROT_NONE), creating tables as needed.
    ///
    /// # Errors
    /// [`PageTableError::BadAddress`], [`PageTableError::BadFrame`],
    /// [`PageTableError::BadFlags`], [`PageTableError::AlreadyMapped`] if a frame is mapped
    /// there already, [`PageTableError::OutOfMemory`] for a new table.
    pub fn map(
        &mut self,
        alloc: &mut PageAllocator,
        va: Gva,
        frame: Gpa,
        flags: PteFlags,
    ) -> Result<(), PageTableError> {
        Self::check_user(va)?;
        let flags = self.leaf_flags_for(frame, flags)?;
        let at = self.leaf_slot(alloc, va)?;
        if PteFlags::from_bits_truncate(self.mem.read_u64(at)?).holds_frame() {
            return Err(PageTableError::AlreadyMapped(va));
        }
        self.write_entry(at, frame.0 | flags.0)?;
        self.changed.push(va.0);
        self.mapped += 1;
        Ok(())
    }

    /// The flags of a leaf entry mapping `frame` with `flags`, checked: a page-aligned frame
    /// of this memory (its own or a window's), flags that hold a frame, never huge.
    fn leaf_flags_for(&self, frame: Gpa, flags: PteFlags) -> Result<PteFlags, PageTableError> {
        let known = self.mem.is_own(frame) || self.mem.is_shared(frame);
        if !frame.is_page_aligned() || !known {
            return Err(PageTableError::BadFrame(frame));
        }
        let flags = PteFlags::from_bits_truncate(flags.0).without(PteFlags::HUGE);
        if !flags.holds_frame() {
            return Err(PageTableError::BadFlags(flags));
        }
        Ok(flags)
    }

    /// [`map`](Self::map) for tables that no vCPU or stub uses yet (a fork's child, built
    /// in address order): nothing is recorded for a commit (the context starts on the
    /// tables), and the leaf table of the last call is reused while `va` stays in its
    /// 2 MiB (`leaf` keeps it between calls), so a run of pages costs one walk a table.
    ///
    /// # Errors
    /// As [`map`](Self::map).
    pub(crate) fn map_fresh(
        &mut self,
        alloc: &mut PageAllocator,
        va: Gva,
        frame: Gpa,
        flags: PteFlags,
        leaf: &mut Option<(u64, Gpa)>,
    ) -> Result<(), PageTableError> {
        Self::check_user(va)?;
        let flags = self.leaf_flags_for(frame, flags)?;
        let region = va.0 >> 21;
        let table = match *leaf {
            Some((r, table)) if r == region => table,
            _ => {
                let at = self.leaf_slot(alloc, va)?;
                let table = Gpa(at.0 & !(PAGE_SIZE - 1));
                *leaf = Some((region, table));
                table
            }
        };
        let at = slot(table, index(va.0, 0));
        if PteFlags::from_bits_truncate(self.mem.read_u64(at)?).holds_frame() {
            return Err(PageTableError::AlreadyMapped(va));
        }
        self.mem.write_u64(at, frame.0 | flags.0)?;
        self.mapped += 1;
        Ok(())
    }

    /// Clears the user leaf entry at `va`; returns the frame it owned, if any.
    pub fn unmap(&mut self, va: Gva) -> Option<Gpa> {
        let Ok(Probe::Leaf { slot, entry }) = self.probe(va) else {
            return None;
        };
        if !PteFlags::from_bits_truncate(entry).holds_frame() {
            return None;
        }
        if let Err(e) = self.write_entry(slot, 0) {
            tracing::error!("cannot clear entry for {va}: {e}");
            return None;
        }
        self.changed.push(va.0);
        self.mapped -= 1;
        Some(Gpa(entry & ADDR_MASK))
    }

    /// Replaces the flags of the user leaf entry at `va`, keeping its frame and the CPU's
    /// accessed/dirty bits. No write (and nothing to sync) if nothing changes.
    ///
    /// # Errors
    /// [`PageTableError::NotMapped`] if the entry owns no frame, [`PageTableError::BadFlags`].
    pub fn set_flags(&mut self, va: Gva, flags: PteFlags) -> Result<(), PageTableError> {
        let flags = PteFlags::from_bits_truncate(flags.0).without(PteFlags::HUGE);
        if !flags.holds_frame() {
            return Err(PageTableError::BadFlags(flags));
        }
        let (slot, old) = match self.probe(va.page_down())? {
            Probe::Leaf { slot, entry } if PteFlags::from_bits_truncate(entry).holds_frame() => {
                (slot, entry)
            }
            _ => return Err(PageTableError::NotMapped(va)),
        };
        let keep = old & (PteFlags::ACCESSED.0 | PteFlags::DIRTY.0);
        let new = (old & ADDR_MASK) | flags.0 | keep;
        if new != old {
            self.write_entry(slot, new)?;
            self.changed.push(va.page_down().0);
        }
        Ok(())
    }

    /// Sets the accessed and dirty bits of the present entry for `va`, as the CPU does on a
    /// write: the kernel calls it when it writes user memory on the application's behalf, so
    /// that "clean" keeps meaning "holds what was loaded".
    pub fn mark_dirty(&mut self, va: Gva) {
        if let Ok(Probe::Leaf { slot, entry }) = self.probe(va.page_down()) {
            let want = PteFlags::ACCESSED.0 | PteFlags::DIRTY.0;
            if entry & PteFlags::PRESENT.0 != 0 && entry & want != want {
                let _ = self.write_entry(slot, entry | want);
            }
        }
    }

    /// Clears the accessed bit of the present entry for `va` without queueing it for the
    /// shadow MMU: for a page whose host mapping is being dropped (the hypervisor forgets its
    /// translation then, and sets the bit again in the guest's entry at the next touch).
    pub fn clear_accessed(&mut self, va: Gva) {
        if let Ok(Probe::Leaf { slot, entry }) = self.probe(va.page_down()) {
            if entry & PteFlags::PRESENT.0 != 0 && entry & PteFlags::ACCESSED.0 != 0 {
                let _ = self.mem.write_u64(slot, entry & !PteFlags::ACCESSED.0);
            }
        }
    }

    /// Every user page in `[start, end)` whose entry owns a frame, in address order, skipping
    /// absent tables wholesale (cheap over huge sparse ranges).
    pub fn frames_in(&self, start: Gva, end: Gva) -> Vec<(Gva, Gpa, PteFlags)> {
        self.leaves_in(start, end)
            .into_iter()
            .map(|(va, _, entry)| (va, entry_frame(entry), PteFlags::from_bits_truncate(entry)))
            .collect()
    }

    /// Every user leaf in `[start, end)` that owns a frame, as (page, the entry's
    /// guest-physical slot, the raw entry), in address order. Each leaf table is read once
    /// (one copy of its entries, not a walk per page), and absent tables are skipped
    /// wholesale.
    pub(crate) fn leaves_in(&self, start: Gva, end: Gva) -> Vec<(Gva, Gpa, u64)> {
        let end = end.0.min(layout::USER_END.0);
        let mut va = start.page_down().0;
        let mut out = Vec::new();
        let mut table = [0u8; PAGE_SIZE as usize];
        while va < end {
            match self.probe(Gva(va)) {
                Ok(Probe::Missing { span }) => va = (va & !(span - 1)) + span,
                Ok(Probe::Leaf { slot: first, .. }) => {
                    // The rest of this leaf table, up to `end`, in one read.
                    let table_end = (va & !(HUGE_2M - 1)) + HUGE_2M;
                    let n = ((table_end.min(end) - va) / PAGE_SIZE) as usize;
                    let bytes = &mut table[..n * 8];
                    if let Err(e) = self.mem.read(first, bytes) {
                        tracing::error!("page-table read at {first}: {e}");
                        va = table_end;
                        continue;
                    }
                    for (i, entry) in (0u64..).zip(entries(bytes)) {
                        if PteFlags::from_bits_truncate(entry).holds_frame() {
                            out.push((Gva(va + i * PAGE_SIZE), slot(first, i), entry));
                        }
                    }
                    va += n as u64 * PAGE_SIZE;
                }
                Err(e) => {
                    tracing::error!("page-table walk at {:#x}: {e}", va);
                    va += PAGE_SIZE;
                }
            }
        }
        out
    }

    /// Rewrites the user leaf at `slot` (for page `va`, as [`leaves_in`](Self::leaves_in)
    /// found it) with `value`, which owns the same frame: recorded for the PTE-sync stub and
    /// as a changed page.
    pub(crate) fn rewrite_leaf(
        &mut self,
        va: Gva,
        slot: Gpa,
        value: u64,
    ) -> Result<(), PageTableError> {
        self.write_entry(slot, value)?;
        self.changed.push(va.0);
        Ok(())
    }

    /// Every page holding these tables: the root, the user half's tables and the direct
    /// map's, each once (for an address space whose memory outlives it, which must give them
    /// back: see `MemoryManager`'s `Drop`).
    pub(crate) fn table_frames(&self) -> Vec<Gpa> {
        let mut out = vec![self.root];
        let mut level_tables = vec![(self.root, 3u32)];
        let mut table_bytes = [0u8; PAGE_SIZE as usize];
        while let Some((table, level)) = level_tables.pop() {
            if level == 0 || self.mem.read(table, &mut table_bytes).is_err() {
                continue;
            }
            for e in entries(&table_bytes) {
                if e & PteFlags::PRESENT.0 == 0 || e & PteFlags::HUGE.0 != 0 {
                    continue;
                }
                let next = Gpa(e & ADDR_MASK);
                out.push(next);
                level_tables.push((next, level - 1));
            }
        }
        out
    }

    /// Records user page `va` as changed without writing its entry: its mapping must be made
    /// visible again (a platform that maps pages itself dropped it, or never had it).
    pub fn touch(&mut self, va: Gva) {
        if layout::is_user(va) {
            self.changed.push(va.page_down().0);
        }
    }

    /// The user pages changed since the last call, as sorted runs of consecutive pages;
    /// clears the record.
    pub fn take_changed_pages(&mut self) -> Vec<PageRun> {
        let mut runs: Vec<PageRun> = Vec::new();
        self.changed.sort_unstable();
        self.changed.dedup();
        for &va in &self.changed {
            match runs.last_mut() {
                Some(r) if r.first.0 + u64::from(r.count) * PAGE_SIZE == va => r.count += 1,
                _ => runs.push(PageRun {
                    first: Gva(va),
                    count: 1,
                }),
            }
        }
        self.changed.clear();
        runs
    }

    /// Whether entries were written since the last [`take_dirty_runs`](Self::take_dirty_runs).
    pub fn has_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// The entries written since the last call, as sorted runs of consecutive entries (never
    /// crossing a table page), for the PTE-sync stub; clears the record.
    pub fn take_dirty_runs(&mut self) -> Vec<PteRun> {
        let mut runs: Vec<PteRun> = Vec::new();
        let mut next = u64::MAX;
        self.dirty.sort_unstable();
        self.dirty.dedup();
        for &at in &self.dirty {
            match runs.last_mut() {
                Some(run) if at == next && at % PAGE_SIZE != 0 => run.count += 1,
                _ => runs.push(PteRun {
                    first: layout::direct_map(Gpa(at)),
                    count: 1,
                }),
            }
            next = at + 8;
        }
        self.dirty.clear();
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn setup(size: u64) -> (Arc<GuestMemory>, PageAllocator, PageTables) {
        let mem = Arc::new(GuestMemory::new(size).unwrap());
        let mut alloc = PageAllocator::new(size);
        let pt = PageTables::new(mem.clone(), &mut alloc).unwrap();
        (mem, alloc, pt)
    }

    fn rw_user() -> PteFlags {
        PteFlags::PRESENT | PteFlags::WRITABLE | PteFlags::USER
    }

    #[test]
    fn direct_map_covers_memory() {
        let (mem, alloc, pt) = setup(16 * MIB);
        assert_eq!(pt.table_pages(), 4);
        assert_eq!(alloc.used_pages(), 4);
        assert!(!pt.has_dirty());
        // PML4[255] → PDPT[0] → PD: a PT for the first 2 MiB, then 7 2 MiB entries.
        let pml4e = mem.read_u64(Gpa(pt.root().0 + 255 * 8)).unwrap();
        assert_eq!(pml4e & !ADDR_MASK, 0x7);
        assert_eq!(mem.read_u64(Gpa(pt.root().0 + 254 * 8)).unwrap(), 0);
        let pdpt = Gpa(pml4e & ADDR_MASK);
        let pd = Gpa(mem.read_u64(pdpt).unwrap() & ADDR_MASK);
        for i in 1..8 {
            assert_eq!(
                mem.read_u64(Gpa(pd.0 + i * 8)).unwrap(),
                (i * HUGE_2M) | 0x83
            );
        }
        assert_eq!(mem.read_u64(Gpa(pd.0 + 8 * 8)).unwrap(), 0);
        let low = Gpa(mem.read_u64(pd).unwrap() & ADDR_MASK);
        assert_eq!(mem.read_u64(Gpa(low.0 + 8 * 3)).unwrap(), 0x3003);
        assert_eq!(mem.read_u64(Gpa(low.0 + 8 * 4)).unwrap(), 0x4005);
        assert_eq!(mem.read_u64(Gpa(low.0 + 8 * 511)).unwrap(), 0x1f_f003);
        for g in [0u64, 0x1234, 0x20_1234, 16 * MIB - 1] {
            let (gpa, flags) = pt.translate(layout::direct_map(Gpa(g))).unwrap();
            assert_eq!(gpa, Gpa(g));
            assert!(flags.contains(PteFlags::PRESENT | PteFlags::WRITABLE));
            assert_eq!(flags.contains(PteFlags::HUGE), g >= HUGE_2M);
            assert!(!flags.contains(PteFlags::USER));
        }
        let (gpa, flags) = pt
            .translate(layout::direct_map(Gpa(layout::STUBS.0 + 0x20)))
            .unwrap();
        assert_eq!(gpa, Gpa(layout::STUBS.0 + 0x20));
        assert_eq!(flags, PteFlags::PRESENT | PteFlags::USER);
        assert!(pt.translate(layout::direct_map(Gpa(16 * MIB))).is_none());
        assert!(pt.translate(Gva(0x1000)).is_none());
        assert!(pt.translate(Gva(0x8000_0000_0000)).is_none()); // non-canonical
    }

    #[test]
    fn map_translate_unmap() {
        let (mem, mut alloc, mut pt) = setup(16 * MIB);
        let (frame, _) = alloc.alloc().unwrap();
        let va = Gva(0x40_0000);
        pt.map(&mut alloc, va, frame, rw_user() | PteFlags::NO_EXEC)
            .unwrap();
        assert_eq!(pt.table_pages(), 7);
        assert_eq!(pt.mapped_pages(), 1);
        let (gpa, flags) = pt.translate(Gva(va.0 + 0x123)).unwrap();
        assert_eq!(gpa, Gpa(frame.0 + 0x123));
        assert!(flags.contains(PteFlags::NO_EXEC | PteFlags::USER));
        assert!(matches!(
            pt.map(&mut alloc, va, frame, rw_user()),
            Err(PageTableError::AlreadyMapped(_))
        ));
        assert!(matches!(
            pt.map(&mut alloc, layout::USER_END, frame, rw_user()),
            Err(PageTableError::BadAddress(_))
        ));
        assert!(matches!(
            pt.map(&mut alloc, Gva(0x1000), Gpa(16 * MIB), rw_user()),
            Err(PageTableError::BadFrame(_))
        ));
        assert!(matches!(
            pt.map(&mut alloc, Gva(0x1000), frame, PteFlags::USER),
            Err(PageTableError::BadFlags(_))
        ));
        // The host sees its own write at once: the leaf holds the frame.
        pt.set_flags(va, PteFlags::PRESENT | PteFlags::USER)
            .unwrap();
        assert!(!pt.translate(va).unwrap().1.contains(PteFlags::WRITABLE));
        pt.set_flags(va, PteFlags::PROT_NONE).unwrap();
        assert!(pt.translate(va).is_none());
        assert_eq!(pt.entry(va).map(|e| e.0), Some(frame));
        assert_eq!(pt.frames_in(Gva(0), layout::USER_END).len(), 1);
        assert_eq!(pt.unmap(va), Some(frame));
        assert_eq!(pt.unmap(va), None);
        assert!(pt.entry(va).is_none());
        assert_eq!(pt.mapped_pages(), 0);
        let _ = mem;
    }

    #[test]
    fn changed_pages_are_user_pages_in_runs() {
        let (_mem, mut alloc, mut pt) = setup(16 * MIB);
        let va = Gva(0x7f00_0000_0000);
        for i in [0u64, 1, 2, 5] {
            let f = alloc.alloc().unwrap().0;
            pt.map(&mut alloc, Gva(va.0 + i * PAGE_SIZE), f, rw_user())
                .unwrap();
        }
        let first = |i: u64| Gva(va.0 + i * PAGE_SIZE);
        let run = |i, count| PageRun {
            first: first(i),
            count,
        };
        assert_eq!(pt.take_changed_pages(), vec![run(0, 3), run(5, 1)]);
        assert!(pt.take_changed_pages().is_empty());
        // Unmapping, new rights and a touch are changes; setting the same rights is not.
        pt.set_flags(first(1), rw_user()).unwrap();
        assert!(pt.take_changed_pages().is_empty());
        pt.set_flags(first(1), PteFlags::PRESENT | PteFlags::USER)
            .unwrap();
        pt.unmap(first(2));
        pt.touch(first(9));
        pt.touch(layout::USER_END);
        assert_eq!(pt.take_changed_pages(), vec![run(1, 2), run(9, 1)]);
    }

    #[test]
    fn dirty_runs_record_upper_levels_and_coalesce() {
        let (_mem, mut alloc, mut pt) = setup(16 * MIB);
        let va = Gva(0x7f00_0000_0000);
        let frames: Vec<_> = (0..4).map(|_| alloc.alloc().unwrap().0).collect();
        for (i, f) in frames.iter().enumerate() {
            pt.map(&mut alloc, Gva(va.0 + i as u64 * PAGE_SIZE), *f, rw_user())
                .unwrap();
        }
        assert!(pt.has_dirty());
        let runs = pt.take_dirty_runs();
        assert!(!pt.has_dirty());
        // PML4 entry, PDPT entry, PD entry (one each), then the 4 leaves as one run.
        assert_eq!(runs.len(), 4);
        assert!(runs
            .iter()
            .all(|r| layout::from_direct_map(r.first).is_some()));
        assert_eq!(runs.iter().map(|r| r.count).sum::<u32>(), 7);
        let pml4 = runs
            .iter()
            .find(|r| r.first == layout::direct_map(Gpa(pt.root().0 + index(va.0, 3) * 8)))
            .expect("PML4 entry recorded");
        assert_eq!(pml4.count, 1);
        let (leaf_gpa, _) = pt.translate(layout::direct_map(pt.root())).unwrap();
        assert_eq!(leaf_gpa, pt.root());
        let leaves = runs
            .iter()
            .find(|r| r.count == 4)
            .expect("leaves coalesced");
        let leaf0 = layout::from_direct_map(leaves.first).unwrap();
        assert_eq!(pt.mem.read_u64(leaf0).unwrap() & ADDR_MASK, frames[0].0);
        assert!(pt.take_dirty_runs().is_empty());
        // Unchanged flags write nothing.
        pt.set_flags(va, rw_user()).unwrap();
        assert!(!pt.has_dirty());
    }

    #[test]
    fn dirty_runs_never_cross_a_page() {
        let (_mem, mut alloc, mut pt) = setup(16 * MIB);
        // The last PTE of one table and the first of the next table page: with these VAs the
        // two PT pages are allocated consecutively, so the entries are 8 bytes apart in
        // guest-physical memory but on different pages.
        let a = Gva(0x1000_0000 - PAGE_SIZE);
        let b = Gva(0x1000_0000);
        let f = alloc.alloc().unwrap().0;
        let g = alloc.alloc().unwrap().0;
        pt.map(&mut alloc, a, f, rw_user()).unwrap();
        pt.take_dirty_runs();
        // Write entry 511 of the first PT and entry 0 of the second (new) PT.
        pt.set_flags(a, PteFlags::PRESENT | PteFlags::USER).unwrap();
        pt.map(&mut alloc, b, g, rw_user()).unwrap();
        let runs = pt.take_dirty_runs();
        for r in &runs {
            let start = layout::from_direct_map(r.first).unwrap().0;
            assert_eq!(
                start / PAGE_SIZE,
                (start + 8 * u64::from(r.count) - 1) / PAGE_SIZE
            );
        }
        let leaf_a = runs.iter().any(|r| {
            let s = layout::from_direct_map(r.first).unwrap().0;
            s % PAGE_SIZE == 511 * 8 && r.count == 1
        });
        assert!(leaf_a, "entry 511 is a run of its own: {runs:?}");
    }

    #[test]
    fn frames_in_skips_holes() {
        let (_mem, mut alloc, mut pt) = setup(16 * MIB);
        let f = alloc.alloc().unwrap().0;
        let g = alloc.alloc().unwrap().0;
        pt.map(&mut alloc, Gva(0x10000), f, rw_user()).unwrap();
        pt.map(&mut alloc, Gva(0x7f7f_ffff_f000), g, rw_user())
            .unwrap();
        let all = pt.frames_in(Gva(0), layout::USER_END);
        assert_eq!(
            all.iter().map(|x| (x.0, x.1)).collect::<Vec<_>>(),
            vec![(Gva(0x10000), f), (Gva(0x7f7f_ffff_f000), g)]
        );
        assert_eq!(pt.frames_in(Gva(0x11000), Gva(0x7f7f_ffff_f000)).len(), 0);
    }
}
