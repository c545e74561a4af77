//! The application's address space: [`MemoryManager`] ties guest memory, the page allocator,
//! the page tables and the VMAs together and implements mmap, munmap, mprotect, brk, mremap
//! and madvise with Linux's semantics. Demand faults live in `fault.rs`, user copies in
//! `usercopy.rs`, memory locking (mlock, mlockall) in `mlock.rs`, the madvise marks (wipe or
//! skip on fork, leave out of core dumps) in `advice.rs`.

use std::sync::Arc;

use platform::layout;
use platform::{Gpa, GuestMemory, Gva, PAGE_SIZE};

use crate::alloc::PageAllocator;
use crate::family::Family;
use crate::pagetable::{PageTableError, PageTables, PteFlags, PteRun};
use crate::vma::{
    page_len, Prot, VmAdvice, VmLock, Vma, VmaKind, VmaSet, MAX_MAP_COUNT, MMAP_MIN_ADDR,
};
use platform::PtChanges;

/// Default ceiling of the top-down search for mmap without a usable hint.
pub const DEFAULT_MMAP_BASE: Gva = Gva(0x7f00_0000_0000);
/// Space kept free below [`layout::USER_END`] for the stack, which the loader maps there.
pub const STACK_RESERVE: u64 = 8 << 20;
/// `mremap` flag: the mapping may move.
pub const MREMAP_MAYMOVE: u32 = libc::MREMAP_MAYMOVE as u32;
/// `mremap` flag: move to exactly `new_addr` (requires [`MREMAP_MAYMOVE`]).
pub const MREMAP_FIXED: u32 = libc::MREMAP_FIXED as u32;

/// Errors of address-space operations; each maps to the errno Linux returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MmError {
    /// Bad alignment, length, flags or advice (`EINVAL`).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// No address space or memory, or a range with holes where Linux says so (`ENOMEM`).
    #[error("out of memory or address space: {0}")]
    NoMemory(&'static str),
    /// A user address that is not mapped, not accessible, or not in the user half (`EFAULT`).
    #[error("bad user address {0}")]
    Fault(Gva),
    /// MAP_FIXED_NOREPLACE over an existing mapping (`EEXIST`).
    #[error("a mapping already exists at {0}")]
    Exists(Gva),
    /// A fixed mapping below `mmap_min_addr` (`EPERM`).
    #[error("{0} is below mmap_min_addr")]
    BelowMinAddr(Gva),
    /// The file offset plus the length overflows (`EOVERFLOW`).
    #[error("file offset overflows")]
    OffsetOverflow,
    /// Write access asked of a shared mapping whose file was not opened for writing
    /// (`EACCES`).
    #[error("the mapping's file is not writable")]
    AccessDenied,
    /// No NUL within the allowed string length (`ENAMETOOLONG`).
    #[error("no NUL within {0} bytes")]
    StringTooLong(usize),
    /// An address space that cannot be checkpointed (shared memory, a file mapping without
    /// a path), or a checkpoint image that cannot be restored (inconsistent, corrupt, or a
    /// mapped file that changed since); the reason says which (`EINVAL`).
    #[error("address-space checkpoint: {0}")]
    Checkpoint(String),
    /// A change to a mapping sealed by mseal(2) (`EPERM`).
    #[error("the mapping at {0} is sealed")]
    Sealed(Gva),
    /// An internal invariant broke (corrupt page table, bookkeeping mismatch); the kernel
    /// should stop the sandbox. Reported to the guest as `EFAULT` if it must be.
    #[error("memory manager internal error: {0}")]
    Internal(String),
}

impl MmError {
    /// The Linux errno for this error.
    pub fn errno(&self) -> i32 {
        match self {
            MmError::InvalidArgument(_) => libc::EINVAL,
            MmError::NoMemory(_) => libc::ENOMEM,
            MmError::Fault(_) => libc::EFAULT,
            MmError::Exists(_) => libc::EEXIST,
            MmError::BelowMinAddr(_) => libc::EPERM,
            MmError::OffsetOverflow => libc::EOVERFLOW,
            MmError::StringTooLong(_) => libc::ENAMETOOLONG,
            MmError::AccessDenied => libc::EACCES,
            MmError::Checkpoint(_) => libc::EINVAL,
            MmError::Sealed(_) => libc::EPERM,
            MmError::Internal(_) => libc::EFAULT,
        }
    }

    /// Whether this is a host-side failure rather than a guest mistake.
    pub fn is_internal(&self) -> bool {
        matches!(self, MmError::Internal(_))
    }
}

impl From<PageTableError> for MmError {
    fn from(e: PageTableError) -> Self {
        match e {
            PageTableError::OutOfMemory => MmError::NoMemory("no memory for page tables"),
            e => MmError::Internal(e.to_string()),
        }
    }
}

/// An mmap(2) request, decoded and validated by the syscall layer (flags other than
/// MAP_FIXED / MAP_FIXED_NOREPLACE are its business).
#[derive(Debug, Clone)]
pub struct MmapRequest {
    /// Hint, or the exact address with `fixed` / `fixed_noreplace`.
    pub addr: Gva,
    /// Length in bytes (rounded up to pages).
    pub len: u64,
    /// Rights.
    pub prot: Prot,
    /// MAP_FIXED: replace whatever is mapped at `addr`.
    pub fixed: bool,
    /// MAP_FIXED_NOREPLACE: map exactly at `addr`, or fail with `EEXIST`.
    pub fixed_noreplace: bool,
    /// Backing (the file offset must be page-aligned).
    pub kind: VmaKind,
    /// Name for /proc/self/maps.
    pub name: Option<String>,
}

/// Counters of one address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MmStats {
    /// VMAs.
    pub vma_count: usize,
    /// User pages with a frame (present, or PROT_NONE keeping its data).
    pub mapped_pages: usize,
    /// Pages holding page tables (direct map included).
    pub page_table_pages: usize,
    /// Free pages in the allocator.
    pub free_pages: usize,
    /// Pages the allocator manages.
    pub total_pages: usize,
    /// Calls to `handle_fault` (guest faults and faults taken by user copies).
    pub faults: u64,
    /// Pages of private file mappings mapped from the page cache (read-only windows).
    pub cache_maps: u64,
    /// Copies-on-write of such pages into frames of the VM's own.
    pub cow_copies: u64,
    /// Copies-on-write of frames shared with a forked address space.
    pub shared_copies: u64,
}

/// A frame holding an unmodified page of a file (see [`MemoryManager::clean_file_pages`]).
#[derive(Debug, Clone)]
pub struct CleanFilePage {
    /// The frame.
    pub frame: Gpa,
    /// The file.
    pub file: Arc<std::fs::File>,
    /// Offset of the page's bytes in the file.
    pub offset: u64,
}

/// An address space: analogous to Linux's `struct mm_struct`. The kernel shares it between a
/// thread group's tasks behind one `Mutex`.
pub struct MemoryManager {
    pub(crate) mem: Arc<GuestMemory>,
    /// The frames: the family's allocator (this address space's own unless it forked with
    /// sharing, or was forked so).
    pub(crate) alloc: Family,
    pub(crate) pt: PageTables,
    pub(crate) vmas: VmaSet,
    pub(crate) mmap_base: Gva,
    /// Start of the heap (as set by the loader: the end of the data segment).
    pub(crate) brk_base: Option<Gva>,
    /// The current program break (unaligned, as the application asked).
    pub(crate) brk: Gva,
    pub(crate) faults: u64,
    /// Pages mapped from the page cache (see `cow.rs`).
    pub(crate) cache_maps: u64,
    /// Copies-on-write of page-cache pages.
    pub(crate) cow_copies: u64,
    /// A present entry was replaced since the last [`take_replaced`](Self::take_replaced).
    pub(crate) replaced: bool,
    /// The pages of file windows that were mapped when a checkpoint last dropped them
    /// ([`drop_file_window_pages`](Self::drop_file_window_pages)), or that a restored
    /// process's checkpoint had mapped: saved with the image, mapped again ahead by
    /// [`prefault_file_pages`](Self::prefault_file_pages).
    pub(crate) file_pages: Vec<Gva>,
    /// The lock every new mapping gets (mlockall's MCL_FUTURE; Linux's `mm->def_flags`).
    pub(crate) def_lock: VmLock,
    /// While [`prefault_file_pages`](Self::prefault_file_pages) maps pages ahead: each
    /// file object's size, read once for the whole batch (a fault reads it each time, as a
    /// page past a truncated file's end must fault), keyed by the object's address.
    pub(crate) sizes_ahead: Option<std::collections::HashMap<usize, u64>>,
    /// Frames released since the last commit while the family has other members: freed
    /// after the next one (`fork.rs`).
    pub(crate) released: Vec<Gpa>,
    /// Frames released before the last commit: freed at the next [`take_changes`](Self::take_changes).
    pub(crate) committing: Vec<Gpa>,
    /// Copies of frames shared with another member of the family, at a write.
    pub(crate) shared_copies: u64,
    /// Entries made read-only by a sharing fork may remain: the next write fault that finds
    /// its frame no longer shared makes them writable again (`fork.rs`).
    pub(crate) read_only_after_fork: bool,
}

/// The PTE flags for a page of a VMA with rights `prot`.
pub(crate) fn pte_flags(prot: Prot) -> PteFlags {
    if !prot.is_accessible() {
        return PteFlags::PROT_NONE;
    }
    let mut f = PteFlags::PRESENT | PteFlags::USER | PteFlags::ACCESSED;
    if prot.contains(Prot::WRITE) {
        f |= PteFlags::WRITABLE;
    }
    if !prot.contains(Prot::EXEC) {
        f |= PteFlags::NO_EXEC;
    }
    f
}

fn overlaps(a: Gva, a_len: u64, b: Gva, b_len: u64) -> bool {
    a.0 < b.0.saturating_add(b_len) && b.0 < a.0.saturating_add(a_len)
}

/// The allocator's hook that makes its pages usable by the VM as it reaches them
/// (`platform::visible`).
pub(crate) fn exposing(mem: &Arc<GuestMemory>) -> crate::alloc::GrowHook {
    let mem = mem.clone();
    crate::alloc::GrowHook(Arc::new(move |end| mem.expose(end).is_ok()))
}

impl MemoryManager {
    /// An empty address space over `mem`, with its page tables (and the kernel direct map)
    /// built.
    ///
    /// # Errors
    /// [`MmError::NoMemory`] if guest memory cannot hold the page tables;
    /// [`MmError::Internal`] if it is too large for the direct map.
    pub fn new(mem: Arc<GuestMemory>) -> Result<Self, MmError> {
        let mut alloc = PageAllocator::new(mem.size());
        alloc.set_grow(exposing(&mem));
        let pt = PageTables::new(mem.clone(), &mut alloc)?;
        Ok(Self::from_parts(mem, Family::new(alloc), pt))
    }

    /// An address space with no VMA over `mem`, its frames `alloc`'s, its tables `pt`.
    pub(crate) fn from_parts(mem: Arc<GuestMemory>, alloc: Family, pt: PageTables) -> Self {
        MemoryManager {
            mem,
            alloc,
            pt,
            vmas: VmaSet::new(),
            mmap_base: DEFAULT_MMAP_BASE,
            brk_base: None,
            brk: Gva(0),
            faults: 0,
            cache_maps: 0,
            cow_copies: 0,
            replaced: false,
            file_pages: Vec::new(),
            def_lock: VmLock::None,
            sizes_ahead: None,
            released: Vec::new(),
            committing: Vec::new(),
            shared_copies: 0,
            read_only_after_fork: false,
        }
    }

    /// Guest-physical address of the PML4, for CR3.
    pub fn cr3(&self) -> Gpa {
        self.pt.root()
    }

    /// Guest memory.
    pub fn memory(&self) -> &Arc<GuestMemory> {
        &self.mem
    }

    /// The page allocator, locked (hibernate reads its free runs and marks discarded runs
    /// known-zero). It is the family's ([`Family`]): shared with the address spaces forked
    /// with [`fork_sharing`](Self::fork_sharing). A leaf lock: hold it for one operation.
    pub fn allocator(&self) -> std::sync::MutexGuard<'_, PageAllocator> {
        self.alloc.lock()
    }

    /// The frames this address space holds: every page its allocator hands out when it is
    /// its family's only member; else the frames it maps and its page tables (a frame shared
    /// copy-on-write counts for each member mapping it). What the OOM killer ranks by.
    pub fn held_pages(&self) -> usize {
        if self.alloc.members() > 1 {
            self.pt.mapped_pages() + self.pt.table_pages()
        } else {
            self.alloc.lock().used_pages()
        }
    }

    /// This address space's family: the address spaces sharing its memory and frames.
    pub fn family(&self) -> &Family {
        &self.alloc
    }

    /// The page tables.
    pub fn page_tables(&self) -> &PageTables {
        &self.pt
    }

    /// The VMAs in address order (for /proc/self/maps).
    pub fn vmas(&self) -> impl Iterator<Item = &Vma> + '_ {
        self.vmas.iter()
    }

    /// The VMA containing `va`.
    pub fn find_vma(&self, va: Gva) -> Option<&Vma> {
        self.vmas.find(va)
    }

    /// Ceiling of the top-down search for new mappings.
    pub fn mmap_base(&self) -> Gva {
        self.mmap_base
    }

    /// Sets the ceiling of the top-down search (clamped below the stack reserve).
    pub fn set_mmap_base(&mut self, base: Gva) {
        self.mmap_base = Gva(base.page_down().0.min(self.search_ceiling().0));
    }

    fn search_ceiling(&self) -> Gva {
        Gva(layout::USER_END.0 - STACK_RESERVE)
    }

    /// The page-table entries written since the last call, for the PTE-sync stub. The
    /// platform must run them before the guest runs again.
    pub fn take_pte_sync(&mut self) -> Vec<PteRun> {
        self.pt.take_dirty_runs()
    }

    /// The user pages mapped present to a frame `wanted` accepts (by guest-physical page
    /// number), as runs of consecutive pages: what a platform that maps pages itself can map
    /// ahead after a wake brought those frames back (a REAP prefetch).
    pub fn present_pages_of(&self, wanted: impl Fn(u64) -> bool) -> Vec<platform::PageRun> {
        let mut runs: Vec<platform::PageRun> = Vec::new();
        for (va, frame, flags) in self.pt.frames_in(Gva(0), layout::USER_END) {
            if !flags.contains(PteFlags::PRESENT) || !wanted(frame.raw() / PAGE_SIZE) {
                continue;
            }
            match runs.last_mut() {
                Some(r) if r.first.0 + u64::from(r.count) * PAGE_SIZE == va.0 => r.count += 1,
                _ => runs.push(platform::PageRun {
                    first: va,
                    count: 1,
                }),
            }
        }
        runs
    }

    /// The page-table changes since the last call, for the platform to commit: the entries
    /// written and the user pages whose mapping changed ([`PtChanges`]).
    pub fn take_changes(&mut self) -> PtChanges {
        // The previous changes have been committed: what they released can go.
        self.free_committed();
        PtChanges {
            runs: self.pt.take_dirty_runs(),
            pages: self.pt.take_changed_pages(),
        }
    }

    /// Whether page-table entries await the PTE-sync stub.
    pub fn has_pte_sync(&self) -> bool {
        self.pt.has_dirty()
    }

    /// Counters.
    pub fn stats(&self) -> MmStats {
        let (free_pages, total_pages) = {
            let alloc = self.alloc.lock();
            (alloc.free_pages(), alloc.total_pages())
        };
        MmStats {
            vma_count: self.vmas.len(),
            mapped_pages: self.pt.mapped_pages(),
            page_table_pages: self.pt.table_pages(),
            free_pages,
            total_pages,
            faults: self.faults,
            cache_maps: self.cache_maps,
            cow_copies: self.cow_copies,
            shared_copies: self.shared_copies,
        }
    }

    /// Unmaps every page of `[start, end)` and drops its frame's reference (a shared
    /// object's page is only unmapped: it is not the allocator's).
    pub(crate) fn drop_pages(&mut self, start: Gva, end: Gva) {
        for (va, _, _) in self.pt.frames_in(start, end) {
            if let Some(frame) = self.pt.unmap(va) {
                if self.mem.is_own(frame) {
                    self.release_frame(frame);
                }
            }
        }
    }

    /// The frames of read-only file mappings that still hold exactly the file's bytes (the
    /// guest never wrote them: no dirty bit, and the mapping is not writable; the kernel sets
    /// the dirty bit when it writes user memory), with where in the file those bytes are.
    /// The last page of each such mapping is left out, since a segment's `.bss` tail may
    /// have been zeroed there by the loader. Hibernation drops these frames' contents without
    /// writing them anywhere and reads them back from the file.
    pub fn clean_file_pages(&self) -> Vec<CleanFilePage> {
        let mut out = Vec::new();
        for v in self.vmas.iter() {
            let VmaKind::File { file, .. } = &v.kind else {
                continue;
            };
            if v.prot.contains(Prot::WRITE) {
                continue;
            }
            for (va, frame, flags) in self.pt.frames_in(v.start, Gva(v.end.0 - PAGE_SIZE)) {
                if !flags.contains(PteFlags::PRESENT) || flags.contains(PteFlags::DIRTY) {
                    continue;
                }
                if !self.mem.is_own(frame) {
                    // A page-cache page: the VM holds no copy to drop.
                    continue;
                }
                if self.alloc.lock().refcount(frame).unwrap_or(0) != 1 {
                    continue;
                }
                if let Some(offset) = v.file_offset(va) {
                    out.push(CleanFilePage {
                        frame,
                        file: file.clone(),
                        offset,
                    });
                }
            }
        }
        out
    }

    /// The page-cache pages (frames in shared windows) that private file mappings touched
    /// since the last call, by their entries' accessed bits, which this call clears: the file
    /// part of a working set, to read ahead at a wake (see `hibernate`'s REAP). The caller
    /// drops the host's mapping of those pages next, so that the hypervisor sets the bits
    /// again at the next touch.
    pub fn take_touched_window_pages(&mut self) -> Vec<Gpa> {
        let mut out = Vec::new();
        let mut touched = Vec::new();
        for v in self.vmas.iter() {
            if !matches!(v.kind, VmaKind::File { cache: Some(_), .. }) {
                continue;
            }
            for (va, frame, flags) in self.pt.frames_in(v.start, Gva(v.end.0 - PAGE_SIZE)) {
                if flags.contains(PteFlags::PRESENT)
                    && flags.contains(PteFlags::ACCESSED)
                    && !self.mem.is_own(frame)
                {
                    out.push(frame);
                    touched.push(va);
                }
            }
        }
        for va in touched {
            self.pt.clear_accessed(va);
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Removes VMAs and pages in `[start, end)` (page-aligned, non-empty).
    fn unmap_range(&mut self, start: Gva, end: Gva) -> Result<(), MmError> {
        self.vmas
            .remove(start, end)
            .map_err(|e| MmError::Internal(e.to_string()))?;
        self.drop_pages(start, end);
        Ok(())
    }

    /// Implements mmap(2) for an already decoded request: returns the mapping's address.
    /// Pages are populated lazily, on fault.
    ///
    /// # Errors
    /// `EINVAL`: zero length, unaligned fixed address or file offset; `ENOMEM`: the length
    /// overflows or no gap is large enough, or a fixed range leaves the user half; `EPERM`: a
    /// fixed address below `mmap_min_addr`; `EEXIST`: MAP_FIXED_NOREPLACE over a mapping;
    /// `EOVERFLOW`: file offset plus length overflows.
    pub fn mmap(&mut self, req: MmapRequest) -> Result<Gva, MmError> {
        if req.len == 0 {
            return Err(MmError::InvalidArgument("zero length"));
        }
        // Linux's do_mmap: "Too many mappings?" (checked before any merge could spare one).
        if self.vmas.len() > MAX_MAP_COUNT {
            return Err(MmError::NoMemory("too many mappings (vm.max_map_count)"));
        }
        let len = page_len(req.len)
            .filter(|&l| l <= layout::USER_END.0)
            .ok_or(MmError::NoMemory("length too large"))?;
        if let VmaKind::File { offset, .. } | VmaKind::Shared { offset, .. } = &req.kind {
            if offset % PAGE_SIZE != 0 {
                return Err(MmError::InvalidArgument("unaligned file offset"));
            }
            if offset.checked_add(len).is_none() {
                return Err(MmError::OffsetOverflow);
            }
        }
        let start = if req.fixed || req.fixed_noreplace {
            let addr = req.addr;
            if !addr.is_page_aligned() {
                return Err(MmError::InvalidArgument("unaligned fixed address"));
            }
            let end = addr
                .checked_add(len)
                .filter(|e| *e <= layout::USER_END)
                .ok_or(MmError::NoMemory("fixed range leaves the user half"))?;
            if addr < MMAP_MIN_ADDR {
                return Err(MmError::BelowMinAddr(addr));
            }
            if !self.vmas.is_free(addr, end) {
                if req.fixed_noreplace {
                    return Err(MmError::Exists(addr));
                }
                self.check_unsealed(addr, end)?;
                self.unmap_range(addr, end)?;
            }
            addr
        } else {
            self.pick_address(req.addr, len)?
        };
        let end = start.add(len);
        let vma = Vma {
            start,
            end,
            prot: req.prot,
            kind: req.kind,
            name: req.name,
            lock: self.def_lock,
            sealed: false,
            advice: VmAdvice::NONE,
        };
        self.vmas
            .insert(vma)
            .map_err(|e| MmError::Internal(e.to_string()))?;
        Ok(start)
    }

    /// The hint if `[hint, hint + len)` is free and allowed, else the highest gap below the
    /// mmap base (then anywhere below the stack reserve).
    fn pick_address(&self, hint: Gva, len: u64) -> Result<Gva, MmError> {
        if let Some(h) = hint.page_up().filter(|h| h.0 != 0 && *h >= MMAP_MIN_ADDR) {
            if let Some(end) = h.checked_add(len).filter(|e| *e <= layout::USER_END) {
                if self.vmas.is_free(h, end) {
                    return Ok(h);
                }
            }
        }
        self.vmas
            .find_gap(len, self.mmap_base)
            .or_else(|| self.vmas.find_gap(len, self.search_ceiling()))
            .ok_or(MmError::NoMemory("no gap large enough"))
    }

    /// Implements munmap(2): removes mappings and frees their pages. Unmapped parts of the
    /// range are fine.
    ///
    /// # Errors
    /// `EINVAL` for an unaligned address, a zero length, or a range leaving the user half;
    /// `ENOMEM` for a hole inside one VMA when the address space has [`MAX_MAP_COUNT`] VMAs.
    pub fn munmap(&mut self, addr: Gva, len: u64) -> Result<(), MmError> {
        if !addr.is_page_aligned() {
            return Err(MmError::InvalidArgument("unaligned address"));
        }
        if len == 0 {
            return Err(MmError::InvalidArgument("zero length"));
        }
        let end = page_len(len)
            .and_then(|l| addr.checked_add(l))
            .filter(|e| *e <= layout::USER_END)
            .ok_or(MmError::InvalidArgument("range leaves the user half"))?;
        self.check_unsealed(addr, end)?;
        // A hole punched inside one VMA makes two of it: refused at the limit, as Linux's
        // `vms_gather_munmap_vmas` does (the munmap must not leave more than the limit).
        if self.vmas.len() >= MAX_MAP_COUNT
            && self
                .vmas
                .find(addr)
                .is_some_and(|v| v.start < addr && end < v.end)
        {
            return Err(MmError::NoMemory("splitting would pass vm.max_map_count"));
        }
        self.unmap_range(addr, end)
    }

    /// EPERM if part of `[start, end)` is sealed (mseal).
    fn check_unsealed(&self, start: Gva, end: Gva) -> Result<(), MmError> {
        match self.vmas.overlapping(start, end).find(|v| v.sealed) {
            Some(v) => Err(MmError::Sealed(v.start.max(start))),
            None => Ok(()),
        }
    }

    /// Implements mseal(2): seals every VMA in the range (split at its ends) against change
    /// for the life of the address space; fork's copy keeps the seals, execve's new address
    /// space has none.
    ///
    /// # Errors
    /// `EINVAL` for an unaligned start or a length that overflows when rounded to pages;
    /// `ENOMEM` if part of the range is unmapped (then nothing is sealed).
    pub fn mseal(&mut self, addr: Gva, len: u64) -> Result<(), MmError> {
        if !addr.is_page_aligned() {
            return Err(MmError::InvalidArgument("unaligned address"));
        }
        let end = page_len(len)
            .and_then(|l| addr.checked_add(l))
            .ok_or(MmError::InvalidArgument("range overflows"))?;
        if end == addr {
            return Ok(());
        }
        if end > layout::USER_END || !self.vmas.covers(addr, end) {
            return Err(MmError::NoMemory("range not fully mapped"));
        }
        self.vmas
            .seal(addr, end)
            .map_err(|e| MmError::Internal(e.to_string()))
    }

    /// Unmaps every shared mapping (`MAP_SHARED`, System V segments): the process has
    /// exited, and the objects it held must go before its parent hears of it (a segment's
    /// attach count is its mappings). The page-table changes are left uncommitted: no thread
    /// runs in this address space any more.
    pub fn unmap_shared(&mut self) {
        let ranges: Vec<(Gva, Gva)> = self
            .vmas()
            .filter(|v| matches!(v.kind, VmaKind::Shared { .. }))
            .map(|v| (v.start, v.end))
            .collect();
        for (start, end) in ranges {
            // A range of a VMA found just above: in the user half, page-aligned.
            let _ = self.unmap_range(start, end);
        }
    }

    /// Implements mprotect(2): changes the rights of every VMA and present page in the range.
    ///
    /// # Errors
    /// `EINVAL` for an unaligned address; `ENOMEM` if the range overflows, leaves the user
    /// half or has unmapped holes (then nothing changes; Linux may have changed a prefix).
    pub fn mprotect(&mut self, addr: Gva, len: u64, prot: Prot) -> Result<(), MmError> {
        if !addr.is_page_aligned() {
            return Err(MmError::InvalidArgument("unaligned address"));
        }
        if len == 0 {
            return Ok(());
        }
        let end = page_len(len)
            .and_then(|l| addr.checked_add(l))
            .filter(|e| *e <= layout::USER_END)
            .ok_or(MmError::NoMemory("range leaves the user half"))?;
        if !self.vmas.covers(addr, end) {
            return Err(MmError::NoMemory("range not fully mapped"));
        }
        self.check_unsealed(addr, end)?;
        if prot.contains(Prot::WRITE)
            && self.vmas.iter().any(|v| {
                v.start < end
                    && addr < v.end
                    && matches!(
                        v.kind,
                        VmaKind::Shared {
                            may_write: false,
                            ..
                        }
                    )
            })
        {
            return Err(MmError::AccessDenied);
        }
        self.vmas
            .protect(addr, end, prot)
            .map_err(|e| MmError::Internal(e.to_string()))?;
        let flags = pte_flags(prot);
        for (va, frame, _) in self.pt.frames_in(addr, end) {
            if prot.contains(Prot::WRITE) && self.mem.is_read_only(frame) {
                // A page-cache page of a private file mapping made writable: unmapped here,
                // with the other threads synced as for any restriction, and copied at its
                // next touch (see `cow.rs` for why a present entry is not replaced later).
                self.pt.unmap(va);
                continue;
            }
            self.pt.set_flags(va, self.leaf_flags(frame, flags))?;
        }
        Ok(())
    }

    /// Sets the start of the heap (the loader calls this with the end of the data segment);
    /// the break starts there.
    pub fn set_brk_base(&mut self, base: Gva) {
        self.brk_base = Some(base);
        self.brk = base;
    }

    /// The current program break.
    pub fn current_brk(&self) -> Gva {
        self.brk
    }

    /// Implements brk(2) with Linux's semantics: moves the break to `new` and returns it, or
    /// returns the unchanged break when `new` is 0, below the heap start, would run into
    /// another mapping (one guard page kept), or memory runs out. Shrinking frees the pages.
    pub fn brk(&mut self, new: Gva) -> Gva {
        let Some(base) = self.brk_base else {
            return self.brk;
        };
        if new < base || new > layout::USER_END {
            return self.brk;
        }
        let (Some(old_end), Some(new_end)) = (self.brk.page_up(), new.page_up()) else {
            return self.brk;
        };
        if new_end < old_end {
            if self.check_unsealed(new_end, old_end).is_err()
                || self.unmap_range(new_end, old_end).is_err()
            {
                return self.brk;
            }
        } else if new_end > old_end {
            let guard = new_end.checked_add(PAGE_SIZE).unwrap_or(new_end);
            if guard > layout::USER_END || !self.vmas.is_free(old_end, guard) {
                return self.brk;
            }
            let heap = Vma {
                start: old_end,
                end: new_end,
                prot: Prot::RW,
                kind: VmaKind::Anon,
                name: Some("[heap]".to_owned()),
                lock: self.def_lock,
                sealed: false,
                advice: VmAdvice::NONE,
            };
            if self.vmas.insert(heap).is_err() {
                return self.brk;
            }
            if self.def_lock == VmLock::Locked {
                // mlockall(MCL_FUTURE): the heap's new pages are faulted in now, as Linux's
                // brk does; best effort (the break has moved either way).
                let _ = self.populate(old_end, new_end.raw() - old_end.raw(), true);
            }
        }
        self.brk = new;
        self.brk
    }

    /// Implements mremap(2) for private mappings: shrinks in place, grows in place when the
    /// following range is free, or (with [`MREMAP_MAYMOVE`]) moves the mapping by moving its
    /// page-table entries: the same frames, no copy. Returns the new address.
    ///
    /// # Errors
    /// `EINVAL`: unknown flags, FIXED without MAYMOVE, unaligned addresses, zero lengths
    /// (`old_len == 0` duplicates only shared mappings, which torpor lacks), overlapping old
    /// and new ranges; `EFAULT`: the old range is not inside one VMA; `ENOMEM`: cannot grow
    /// in place and may not move, or no room; `EPERM`: fixed target below mmap_min_addr.
    pub fn mremap(
        &mut self,
        old: Gva,
        old_len: u64,
        new_len: u64,
        flags: u32,
        new_addr: Gva,
    ) -> Result<Gva, MmError> {
        if flags & !(MREMAP_MAYMOVE | MREMAP_FIXED) != 0 {
            return Err(MmError::InvalidArgument("unknown mremap flags"));
        }
        let may_move = flags & MREMAP_MAYMOVE != 0;
        let fixed = flags & MREMAP_FIXED != 0;
        if fixed && !may_move {
            return Err(MmError::InvalidArgument(
                "MREMAP_FIXED without MREMAP_MAYMOVE",
            ));
        }
        if !old.is_page_aligned() {
            return Err(MmError::InvalidArgument("unaligned old address"));
        }
        let old_len = page_len(old_len).ok_or(MmError::InvalidArgument("old length"))?;
        let new_len = page_len(new_len)
            .filter(|&l| l != 0)
            .ok_or(MmError::InvalidArgument("new length"))?;
        if old_len == 0 {
            return Err(MmError::InvalidArgument("old_len 0 needs a shared mapping"));
        }
        let old_end = old.checked_add(old_len).ok_or(MmError::Fault(old))?;
        // Linux checks the seals of the whole old range first (`can_modify_mm`).
        self.check_unsealed(old, old_end)?;
        let vma = self
            .vmas
            .find(old)
            .filter(|v| old_end <= v.end)
            .ok_or(MmError::Fault(old))?;
        let vma_end = vma.end;

        if fixed {
            if !new_addr.is_page_aligned() {
                return Err(MmError::InvalidArgument("unaligned new address"));
            }
            let new_end = new_addr
                .checked_add(new_len)
                .filter(|e| *e <= layout::USER_END)
                .ok_or(MmError::InvalidArgument("new range leaves the user half"))?;
            if overlaps(old, old_len, new_addr, new_len) {
                return Err(MmError::InvalidArgument("old and new ranges overlap"));
            }
            if new_addr < MMAP_MIN_ADDR {
                return Err(MmError::BelowMinAddr(new_addr));
            }
            self.check_unsealed(new_addr, new_end)?;
            self.unmap_range(new_addr, new_end)?;
            let mut moved_len = old_len;
            if new_len < old_len {
                self.unmap_range(old.add(new_len), old_end)?;
                moved_len = new_len;
            }
            self.move_mapping(old, moved_len, new_addr, new_len)?;
            return Ok(new_addr);
        }

        if new_len <= old_len {
            if new_len < old_len {
                self.unmap_range(old.add(new_len), old_end)?;
            }
            return Ok(old);
        }
        // Grow in place?
        if old_end == vma_end {
            if let Some(grow_end) = old.checked_add(new_len).filter(|e| *e <= layout::USER_END) {
                if self.vmas.is_free(old_end, grow_end) {
                    let mut ext = vma.clone();
                    if let Some(offset) = ext.kind.offset_mut() {
                        *offset += old_end.0 - ext.start.0;
                    }
                    ext.start = old_end;
                    ext.end = grow_end;
                    self.vmas
                        .insert(ext)
                        .map_err(|e| MmError::Internal(e.to_string()))?;
                    return Ok(old);
                }
            }
        }
        if !may_move {
            return Err(MmError::NoMemory("cannot grow in place"));
        }
        let dest = self.pick_address(Gva(0), new_len)?;
        self.move_mapping(old, old_len, dest, new_len)?;
        Ok(dest)
    }

    /// Moves `[old, old + old_len)` (inside one VMA) to a free `[new, new + new_len)`,
    /// `new_len >= old_len`; the pages keep their frames.
    fn move_mapping(
        &mut self,
        old: Gva,
        old_len: u64,
        new: Gva,
        new_len: u64,
    ) -> Result<(), MmError> {
        let vma = self.vmas.find(old).cloned().ok_or(MmError::Fault(old))?;
        let frames = self.pt.frames_in(old, old.add(old_len));
        // Build the destination's tables first, so that the move below cannot fail halfway.
        for (va, _, _) in &frames {
            self.pt
                .prepare(&mut self.alloc.lock(), new.add(va.0 - old.0))?;
        }
        let mut moved = vma.clone();
        if let Some(offset) = moved.kind.offset_mut() {
            *offset += old.0 - vma.start.0;
        }
        moved.start = new;
        moved.end = new.add(new_len);
        self.vmas
            .insert(moved)
            .map_err(|e| MmError::Internal(e.to_string()))?;
        self.vmas
            .remove(old, old.add(old_len))
            .map_err(|e| MmError::Internal(e.to_string()))?;
        for (va, frame, flags) in frames {
            self.pt.unmap(va);
            self.pt
                .map(&mut self.alloc.lock(), new.add(va.0 - old.0), frame, flags)?;
        }
        Ok(())
    }

    /// Implements madvise(2). `MADV_DONTNEED` and `MADV_FREE` drop the pages (anonymous pages
    /// read as zero afterwards, private file pages are read from the file again); the fork
    /// and dump advice marks the VMAs (`advice.rs`); every other known advice is accepted and
    /// ignored.
    ///
    /// # Errors
    /// `EINVAL`: unknown advice, unaligned address, overflowing range, `MADV_WIPEONFORK` on
    /// a file or shared mapping; `ENOMEM`: part of the range is unmapped (the mapped parts
    /// are still advised, as on Linux).
    pub fn madvise(&mut self, addr: Gva, len: u64, advice: i32) -> Result<(), MmError> {
        const KNOWN: &[i32] = &[
            libc::MADV_NORMAL,
            libc::MADV_RANDOM,
            libc::MADV_SEQUENTIAL,
            libc::MADV_WILLNEED,
            libc::MADV_DONTNEED,
            libc::MADV_FREE,
            libc::MADV_REMOVE,
            libc::MADV_DONTFORK,
            libc::MADV_DOFORK,
            libc::MADV_MERGEABLE,
            libc::MADV_UNMERGEABLE,
            libc::MADV_HUGEPAGE,
            libc::MADV_NOHUGEPAGE,
            libc::MADV_DONTDUMP,
            libc::MADV_DODUMP,
            libc::MADV_WIPEONFORK,
            libc::MADV_KEEPONFORK,
            libc::MADV_COLD,
            libc::MADV_PAGEOUT,
            libc::MADV_POPULATE_READ,
            libc::MADV_POPULATE_WRITE,
            25, // MADV_COLLAPSE
        ];
        if !KNOWN.contains(&advice) {
            return Err(MmError::InvalidArgument("unknown advice"));
        }
        if !addr.is_page_aligned() {
            return Err(MmError::InvalidArgument("unaligned address"));
        }
        let end = page_len(len)
            .and_then(|l| addr.checked_add(l))
            .filter(|e| *e <= layout::USER_END)
            .ok_or(MmError::InvalidArgument("range overflows"))?;
        if end == addr {
            return Ok(());
        }
        // Linux's `can_madvise_modify`: the advice that discards data is refused on a sealed
        // private anonymous mapping the process may not write.
        const DISCARDING: &[i32] = &[
            libc::MADV_DONTNEED,
            libc::MADV_FREE,
            libc::MADV_REMOVE,
            libc::MADV_DONTFORK,
            libc::MADV_WIPEONFORK,
        ];
        if DISCARDING.contains(&advice)
            && self.vmas.overlapping(addr, end).any(|v| {
                v.sealed && matches!(v.kind, VmaKind::Anon) && !v.prot.contains(Prot::WRITE)
            })
        {
            return Err(MmError::Sealed(addr));
        }
        if advice == libc::MADV_DONTNEED || advice == libc::MADV_FREE {
            self.drop_pages(addr, end);
        }
        if let Some((mark, on)) = advice::mark_of(advice) {
            self.mark(addr, end, mark, on)?;
        }
        if self.vmas.covers(addr, end) {
            Ok(())
        } else {
            Err(MmError::NoMemory("range not fully mapped"))
        }
    }

    /// Implements remap_file_pages(2) as Linux emulates it since 4.0: `[start, start + size)`
    /// (rounded down to pages), inside shared mappings of one object with the same rights, is
    /// mapped again over itself at page `pgoff` of that object (a fixed shared mmap with the
    /// VMA's rights). The syscall layer checks `prot` (must be 0).
    ///
    /// # Errors
    /// `EINVAL`: an empty or wrapping range, a wrapping `pgoff`, a range not in contiguous
    /// shared mappings of one object; `EPERM`: a sealed range.
    pub fn remap_file_pages(&mut self, start: Gva, size: u64, pgoff: u64) -> Result<(), MmError> {
        let start = Gva(start.0 & !(PAGE_SIZE - 1));
        let size = size & !(PAGE_SIZE - 1);
        let end = start
            .checked_add(size)
            .filter(|e| *e > start)
            .ok_or(MmError::InvalidArgument("empty or wrapping range"))?;
        if pgoff.checked_add(size / PAGE_SIZE).is_none() {
            return Err(MmError::InvalidArgument("page offset wraps"));
        }
        let bad = MmError::InvalidArgument("not inside one shared mapping");
        let first = self.vmas.find(start).ok_or(bad.clone())?;
        let VmaKind::Shared {
            object, may_write, ..
        } = &first.kind
        else {
            return Err(bad);
        };
        let (object, may_write, prot, name) =
            (object.clone(), *may_write, first.prot, first.name.clone());
        let mut reached = first.end;
        while reached < end {
            match self.vmas.find(reached) {
                Some(v)
                    if v.prot == prot
                        && matches!(&v.kind, VmaKind::Shared { object: o, .. } if Arc::ptr_eq(o, &object)) =>
                {
                    reached = v.end;
                }
                _ => return Err(bad),
            }
        }
        let offset = pgoff
            .checked_mul(PAGE_SIZE)
            .ok_or(MmError::InvalidArgument("page offset wraps"))?;
        self.mmap(MmapRequest {
            addr: start,
            len: size,
            prot,
            fixed: true,
            fixed_noreplace: false,
            kind: VmaKind::Shared {
                object,
                offset,
                may_write,
            },
            name,
        })?;
        Ok(())
    }
}

mod advice;
mod fork;
mod mlock;

#[cfg(test)]
pub(crate) mod tests;
