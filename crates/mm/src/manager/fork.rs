//! fork(2) of an address space: a copy in another memory ([`MemoryManager::fork_into`]), or
//! a new member of this one's family sharing its frames copy-on-write
//! ([`MemoryManager::fork_sharing`], `docs/design/cow-fork.md`), and what a member gives back
//! when it goes while its family lives on.
//!
//! Sharing: every private frame of the parent is mapped read-only by both sides with one
//! more reference; the first write of either side copies the page
//! ([`MemoryManager::copy_shared`], from the write fault, the kernel's own writes included),
//! and a write to a frame whose count is back to 1 makes the entry writable again. A frame a
//! member releases while others share the memory is freed only after the member's next
//! commit of its page-table changes ([`MemoryManager::take_changes`]): until then its stub
//! may still map it, and another member could be handed it.

use std::sync::Arc;

use platform::layout;
use platform::{Gpa, GuestMemory, Gva, PAGE_SIZE};

use super::{pte_flags, MemoryManager, MmError};
use crate::fault::FaultError;
use crate::pagetable::{PageTables, PteFlags};
use crate::vma::{VmAdvice, VmLock, Vma};

impl MemoryManager {
    /// A copy of this address space in `mem` (another VM's guest memory), for fork(2): the
    /// same VMAs (but those marked `MADV_DONTFORK`), break and mmap base, and a private copy
    /// of every page that has a frame (copied eagerly, with its entry's rights and
    /// accessed/dirty bits) but in `MADV_WIPEONFORK` ranges, which start zero-filled.
    ///
    /// # Errors
    /// [`MmError::NoMemory`] if `mem` cannot hold the copy; [`MmError::Internal`] on a
    /// page-table failure.
    pub fn fork_into(&self, mem: Arc<GuestMemory>) -> Result<MemoryManager, MmError> {
        let mut child = MemoryManager::new(mem)?;
        if let Some(b) = self.alloc.lock().budget() {
            // The child's pages count against the same sandbox budget.
            child.alloc.lock().set_budget(b.clone());
        }
        for v in self.inherit_vmas(&mut child)? {
            if v.kind.is_shared() {
                // The same pages: the child's VM attaches the windows at the same addresses.
                for (va, frame, flags) in self.pt.frames_in(v.start, v.end) {
                    child.attach_window_of(&self.mem, frame, 0)?;
                    child.pt.map(&mut child.alloc.lock(), va, frame, flags)?;
                }
                continue;
            }
            for (va, frame, flags) in self.pt.frames_in(v.start, v.end) {
                if self.mem.is_read_only(frame) {
                    // A page-cache page of a private file mapping: the child maps the same
                    // page (copy-on-write stays per process), or copies it without a slot.
                    if child
                        .attach_window_of(&self.mem, frame, crate::pagecache::RESERVED_SLOTS)
                        .is_ok()
                    {
                        child.pt.map(&mut child.alloc.lock(), va, frame, flags)?;
                    } else {
                        let mut page = vec![0u8; PAGE_SIZE as usize];
                        self.mem
                            .read(frame, &mut page)
                            .map_err(|e| MmError::Internal(format!("fork: {e}")))?;
                        let (copy, _) = child
                            .alloc
                            .lock()
                            .alloc()
                            .ok_or(MmError::NoMemory("fork: child memory exhausted"))?;
                        child
                            .mem
                            .write(copy, &page)
                            .map_err(|e| MmError::Internal(format!("fork: {e}")))?;
                        let writable = pte_flags(v.prot);
                        child.pt.map(&mut child.alloc.lock(), va, copy, writable)?;
                    }
                    continue;
                }
                let (copy, _) = child
                    .alloc
                    .lock()
                    .alloc()
                    .ok_or(MmError::NoMemory("fork: child memory exhausted"))?;
                copy_page((&self.mem, frame), (&child.mem, copy))?;
                child.pt.map(&mut child.alloc.lock(), va, copy, flags)?;
            }
        }
        // The child's vCPU starts on these tables: nothing to push through the PTE-sync stub.
        let _ = child.pt.take_dirty_runs();
        Ok(child)
    }

    /// Gives `child` this address space's break, mmap base and VMAs, as fork does: none
    /// marked `MADV_DONTFORK`, and no lock (Linux's `dup_mmap` clears `VM_LOCKED`, and
    /// MCL_FUTURE is not inherited). Returns the VMAs whose pages the child inherits: not
    /// those marked `MADV_WIPEONFORK`, which start zero-filled in the child (the mark kept
    /// for its own children).
    fn inherit_vmas(&self, child: &mut MemoryManager) -> Result<Vec<Vma>, MmError> {
        child.mmap_base = self.mmap_base;
        child.brk_base = self.brk_base;
        child.brk = self.brk;
        let mut inherited = Vec::new();
        for v in self.vmas.iter() {
            if v.advice.contains(VmAdvice::DONT_FORK) {
                continue;
            }
            let mut copy = v.clone();
            copy.lock = VmLock::None;
            child
                .vmas
                .insert(copy)
                .map_err(|e| MmError::Internal(e.to_string()))?;
            if !v.advice.contains(VmAdvice::WIPE_ON_FORK) {
                inherited.push(v.clone());
            }
        }
        Ok(inherited)
    }

    /// Attaches to this address space's VM the window of `from` (another VM's memory) that
    /// holds `frame`, keeping `reserve` memslots free.
    fn attach_window_of(
        &self,
        from: &GuestMemory,
        frame: Gpa,
        reserve: usize,
    ) -> Result<(), MmError> {
        let w = from
            .windows()
            .into_iter()
            .find(|w| w.gpa() <= frame && frame.0 < w.gpa().0 + w.size())
            .ok_or_else(|| {
                MmError::Internal(format!("fork: shared frame {frame} has no window"))
            })?;
        self.mem
            .attach_keeping(&w, reserve)
            .map_err(|e| MmError::Internal(format!("fork: attaching {w:?}: {e}")))
    }

    /// A new address space of this one's family, for fork(2) on a platform whose address
    /// spaces can share one memory (trap): the same VMAs (but those marked `MADV_DONTFORK`),
    /// break and mmap base; every private frame shared copy-on-write (this side's writable
    /// entries become read-only, both sides count one more reference; `MADV_WIPEONFORK`
    /// ranges start zero-filled); shared and page-cache pages mapped as they are. The child's
    /// pages are left for its first touches to map (nothing is marked changed).
    ///
    /// The caller must commit this side's changes before it lets the lock go and before the
    /// child runs: another thread of this process may still write through its old writable
    /// translations until then (those writes are the child's too, as writes made before the
    /// fork). A frame pinned ([`pin`](Self::pin): a host call of another thread writes into
    /// it after the lock is dropped) is copied for the child, not shared.
    ///
    /// # Errors
    /// [`MmError::NoMemory`] without pages for the child's tables; [`MmError::Internal`] on a
    /// page-table failure. Either way the child's part is given back.
    pub fn fork_sharing(&mut self) -> Result<MemoryManager, MmError> {
        let family = self.alloc.join();
        // Frames a host call of another thread writes meanwhile: the child gets copies.
        let pinned = family.pinned();
        let pt = PageTables::new(self.mem.clone(), &mut family.lock())?;
        let mut child = MemoryManager::from_parts(self.mem.clone(), family, pt);
        for v in self.inherit_vmas(&mut child)? {
            let private = !v.kind.is_shared();
            // The child's leaf table of the last page mapped (its tables are built in
            // address order, and used by nothing yet).
            let mut leaf = None;
            for (va, slot, entry) in self.pt.leaves_in(v.start, v.end) {
                let flags = PteFlags::from_bits_truncate(entry);
                let frame = crate::pagetable::entry_frame(entry);
                if !private || !self.mem.is_own(frame) {
                    // A shared object's page or a page-cache page: the same page, in a
                    // window of the same memory.
                    child
                        .pt
                        .map_fresh(&mut child.alloc.lock(), va, frame, flags, &mut leaf)?;
                    continue;
                }
                let read_only = flags.without(PteFlags::WRITABLE);
                let mut alloc = child.alloc.lock();
                // A reference or a copy the child does not map in the end goes back at once
                // (its `Drop` gives back only what it maps).
                let shared = if pinned.contains(&frame.raw()) {
                    Err(())
                } else {
                    alloc.incref(frame).map_err(|_| ())
                };
                match shared {
                    Ok(_) => {
                        let mapped = child
                            .pt
                            .map_fresh(&mut alloc, va, frame, read_only, &mut leaf);
                        if let Err(e) = mapped {
                            let _ = alloc.decref(frame);
                            return Err(e.into());
                        }
                        drop(alloc);
                        if read_only != flags {
                            self.pt
                                .rewrite_leaf(va, slot, entry & !PteFlags::WRITABLE.bits())?;
                        }
                    }
                    Err(()) => {
                        // Pinned, or 65,535 references: the child gets a copy of its own.
                        let (copy, _) = alloc
                            .alloc()
                            .ok_or(MmError::NoMemory("fork: memory exhausted"))?;
                        let mapped =
                            copy_page((&self.mem, frame), (&self.mem, copy)).and_then(|()| {
                                child
                                    .pt
                                    .map_fresh(&mut alloc, va, copy, flags, &mut leaf)
                                    .map_err(MmError::from)
                            });
                        if let Err(e) = mapped {
                            let _ = alloc.decref(copy);
                            return Err(e);
                        }
                    }
                }
            }
        }
        self.read_only_after_fork = true;
        child.read_only_after_fork = true;
        // The child's vCPU or stub starts on these tables, and maps its pages as it touches
        // them.
        let _ = child.pt.take_dirty_runs();
        let _ = child.pt.take_changed_pages();
        Ok(child)
    }

    /// Whether `frame` is a private frame this address space shares with another member of
    /// its family (its reference count is above 1): never mapped writable, copied at a write.
    pub(crate) fn is_shared_frame(&self, frame: Gpa) -> bool {
        self.alloc.members() > 1
            && self.mem.is_own(frame)
            && self.alloc.lock().refcount(frame).is_ok_and(|c| c > 1)
    }

    /// Copy-on-write of a shared frame: maps at `page` (whose entry maps `old`, read-only) a
    /// copy of it with `flags`, and releases this side's reference to `old`.
    pub(crate) fn copy_shared(
        &mut self,
        page: Gva,
        old: Gpa,
        flags: PteFlags,
    ) -> Result<(), FaultError> {
        let (copy, _) = self.alloc.lock().alloc().ok_or(FaultError::OutOfMemory)?;
        if let Err(e) = copy_page((&self.mem, old), (&self.mem, copy)) {
            self.release_frame(copy);
            return Err(FaultError::Internal(e.to_string()));
        }
        self.pt.unmap(page);
        let mapped = self.pt.map(&mut self.alloc.lock(), page, copy, flags);
        if let Err(e) = mapped {
            self.release_frame(copy);
            return Err(e.into());
        }
        self.release_frame(old);
        self.shared_copies += 1;
        // Another thread of this process may still read `old` through its old translation.
        self.replaced = true;
        Ok(())
    }

    /// After a write fault found the frame at `page` (in a private VMA `[start, end)`) no
    /// longer shared: makes writable the other entries of its leaf table (the 2 MiB around
    /// it, within the VMA) that a fork left read-only and whose frames are this side's
    /// alone, so that each does not take a fault of its own (a trap round trip and a mapper
    /// command each: 2.3 s for a 200 MiB parent writing every page after its child exited).
    /// Not the whole address space: a process that forks again and again (a shell, a
    /// pre-fork server's master) would then write-protect anew, at each fork, all it made
    /// writable in between; this way, about what it wrote.
    pub(crate) fn reuse_after_fork(&mut self, page: Gva, start: Gva, end: Gva) {
        const SPAN: u64 = 512 * PAGE_SIZE;
        let Some(flags) = self.vmas.find(page).map(|v| pte_flags(v.prot)) else {
            return;
        };
        let window = page.0 & !(SPAN - 1);
        let lo = Gva(window.max(start.0));
        let hi = Gva((window + SPAN).min(end.0));
        let leaves = self.pt.leaves_in(lo, hi);
        let alloc = self.alloc.lock();
        let mut upgrades = Vec::new();
        for (va, slot, entry) in leaves {
            let current = PteFlags::from_bits_truncate(entry);
            let frame = crate::pagetable::entry_frame(entry);
            if current.contains(PteFlags::PRESENT)
                && !current.contains(PteFlags::WRITABLE)
                && self.mem.is_own(frame)
                && alloc.refcount(frame) == Ok(1)
            {
                upgrades.push((va, slot, entry | (flags.bits() & PteFlags::WRITABLE.bits())));
            }
        }
        drop(alloc);
        for (va, slot, value) in upgrades {
            if let Err(e) = self.pt.rewrite_leaf(va, slot, value) {
                tracing::error!("making {va} writable again: {e}");
            }
        }
    }

    /// Drops this address space's reference to `frame`: at once when it is the family's only
    /// member, else after its next commit (see the module's doc).
    pub(crate) fn release_frame(&mut self, frame: Gpa) {
        if self.alloc.members() > 1 {
            self.released.push(frame);
        } else if let Err(e) = self.alloc.lock().decref(frame) {
            tracing::error!("freeing frame {frame}: {e}");
        }
    }

    /// Frees the frames released before the previous commit (which has been applied by
    /// now), and keeps those released since for the next one.
    pub(crate) fn free_committed(&mut self) {
        if self.committing.is_empty() && self.released.is_empty() {
            return;
        }
        let done = std::mem::replace(&mut self.committing, std::mem::take(&mut self.released));
        let mut alloc = self.alloc.lock();
        for frame in done {
            if let Err(e) = alloc.decref(frame) {
                tracing::error!("freeing frame {frame}: {e}");
            }
        }
    }

    /// For each page of `[start, end)` mapped present on a frame this address space shares
    /// with other members of its family (forked copy-on-write), how many map it (its
    /// reference count, above 1); frames of its own alone and window pages are left out.
    /// What `/proc/PID/smaps` divides a page's `Pss` by, as Linux by its mapcount.
    pub fn sharers_in(&self, start: Gva, end: Gva) -> Vec<u16> {
        if self.alloc.members() < 2 {
            return Vec::new();
        }
        let frames: Vec<Gpa> = self
            .pt
            .frames_in(start, end)
            .into_iter()
            .filter(|(_, frame, flags)| {
                flags.contains(PteFlags::PRESENT) && self.mem.is_own(*frame)
            })
            .map(|(_, frame, _)| frame)
            .collect();
        let alloc = self.alloc.lock();
        frames
            .into_iter()
            .filter_map(|f| alloc.refcount(f).ok().filter(|&c| c > 1))
            .collect()
    }

    /// Pins the frames of this address space's memory in `runs` (from
    /// [`user_ranges`](Self::user_ranges)) until the returned guard drops: a host call writes
    /// into them after the lock is dropped, so a fork meanwhile copies them for the child
    /// rather than share them (see `family.rs`).
    pub fn pin(&self, runs: &[(Gpa, u64)]) -> crate::family::Pins {
        let mut frames = Vec::new();
        for &(start, len) in runs {
            let first = start.raw() & !(PAGE_SIZE - 1);
            let mut at = first;
            while at < start.raw() + len {
                if self.mem.is_own(Gpa(at)) {
                    frames.push(Gpa(at));
                }
                at += PAGE_SIZE;
            }
        }
        self.alloc.pin(frames)
    }

    /// Frees at once every frame this address space released and keeps for a commit (see
    /// the module's doc): for a caller that knows nothing maps them any more, every
    /// platform mapping of the family's memory having been evicted (a deflate, before a
    /// checkpoint's books are counted).
    pub fn settle_released(&mut self) {
        // What was released before the last commit, then what was released since.
        self.free_committed();
        self.free_committed();
    }

    /// What a member leaving a family that lives on gives back: its references to the frames
    /// it maps, its page-table pages, and the frames it released.
    fn leave_family(&mut self) {
        let frames: Vec<Gpa> = self
            .pt
            .frames_in(Gva(0), layout::USER_END)
            .into_iter()
            .map(|(_, frame, _)| frame)
            .filter(|&f| self.mem.is_own(f))
            .chain(self.pt.table_frames())
            .chain(self.released.drain(..))
            .chain(self.committing.drain(..))
            .collect();
        let mut alloc = self.alloc.lock();
        for frame in frames {
            if let Err(e) = alloc.decref(frame) {
                tracing::error!("leaving the family: frame {frame}: {e}");
            }
        }
    }
}

impl Drop for MemoryManager {
    fn drop(&mut self) {
        // The last member's memory and allocator go with it: nothing to give back.
        if self.alloc.members() > 1 {
            self.leave_family();
        }
    }
}

/// Copies the page at frame `from.1` of memory `from.0` to frame `to.1` of `to.0` (the same
/// memory or another VM's).
fn copy_page(from: (&GuestMemory, Gpa), to: (&GuestMemory, Gpa)) -> Result<(), MmError> {
    match (
        from.0.host_ptr(from.1, PAGE_SIZE),
        to.0.host_ptr(to.1, PAGE_SIZE),
    ) {
        // SAFETY: both pointers cover one whole page inside their guest memory's mapping, and
        // they do not overlap: distinct memories, or distinct allocator frames of one (`to`
        // was just allocated, `from` is still held). The caller holds the address space's
        // lock, and no stub or vCPU maps `to` yet, so nothing else writes it meanwhile.
        (Ok(s), Ok(d)) => unsafe {
            std::ptr::copy_nonoverlapping(s, d, PAGE_SIZE as usize);
            Ok(())
        },
        _ => Err(MmError::Internal(format!(
            "copy of frame {} to {}: out of range",
            from.1, to.1
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::MemoryBudget;
    use crate::manager::tests::{anon, mm, MIB};
    use crate::vma::Prot;

    fn read(m: &mut MemoryManager, at: Gva) -> [u8; 4] {
        let mut b = [0u8; 4];
        m.copy_in(at, &mut b).unwrap();
        b
    }

    /// A parent with `pages` pages written ("p" + page number), forked with sharing.
    fn family(pages: u64) -> (MemoryManager, MemoryManager, Gva) {
        let mut p = mm(32 * MIB);
        let a = p.mmap(anon(0, pages * PAGE_SIZE, Prot::RW, false)).unwrap();
        for i in 0..pages {
            p.copy_out(a.add(i * PAGE_SIZE), &[b'p', i as u8, 0, 0])
                .unwrap();
        }
        let c = p.fork_sharing().unwrap();
        (p, c, a)
    }

    #[test]
    fn a_fork_shares_every_private_frame_read_only() {
        let (p, mut c, a) = family(8);
        assert_eq!(p.family().members(), 2);
        assert!(p.family().same_as(c.family()));
        for i in 0..8 {
            let va = a.add(i * PAGE_SIZE);
            let (pf, pflags) = p.page_tables().entry(va).unwrap();
            let (cf, cflags) = c.page_tables().entry(va).unwrap();
            assert_eq!(pf, cf);
            assert!(!pflags.contains(PteFlags::WRITABLE));
            assert!(!cflags.contains(PteFlags::WRITABLE));
            assert_eq!(p.allocator().refcount(pf), Ok(2));
            assert_eq!(read(&mut c, va), [b'p', i as u8, 0, 0]);
        }
        // Only the child's tables are new.
        let used = p.allocator().used_pages();
        assert_eq!(
            used,
            8 + p.stats().page_table_pages + c.stats().page_table_pages
        );
    }

    #[test]
    fn writes_after_a_fork_stay_on_their_side() {
        let (mut p, mut c, a) = family(4);
        let mut g = c.fork_sharing().unwrap();
        assert_eq!(p.family().members(), 3);
        let page1 = a.add(PAGE_SIZE);
        p.copy_out(page1, b"PPPP").unwrap();
        c.copy_out(page1, b"CCCC").unwrap();
        assert_eq!(read(&mut g, page1), [b'p', 1, 0, 0]);
        // Parent and child commit their copies: their references to the original go.
        for m in [&mut p, &mut c] {
            let _ = m.take_changes();
            let _ = m.take_changes();
        }
        g.copy_out(page1, b"GGGG").unwrap();
        assert_eq!(read(&mut p, page1), *b"PPPP");
        assert_eq!(read(&mut c, page1), *b"CCCC");
        assert_eq!(read(&mut g, page1), *b"GGGG");
        // Three frames now, each mapped once; the last writer reused the original.
        let frames: Vec<Gpa> = [&p, &c, &g]
            .iter()
            .map(|m| m.page_tables().entry(page1).unwrap().0)
            .collect();
        assert_ne!(frames[0], frames[1]);
        assert_ne!(frames[1], frames[2]);
        assert_eq!(p.stats().shared_copies + c.stats().shared_copies, 2);
        assert_eq!(g.stats().shared_copies, 0);
        // Untouched pages are still one frame with three references.
        let (f0, _) = p.page_tables().entry(a).unwrap();
        assert_eq!(p.allocator().refcount(f0), Ok(3));
    }

    #[test]
    fn a_frame_back_to_one_reference_is_made_writable_again() {
        let (mut p, c, a) = family(2);
        drop(c);
        assert_eq!(p.family().members(), 1);
        let (frame, flags) = p.page_tables().entry(a).unwrap();
        assert!(!flags.contains(PteFlags::WRITABLE));
        p.copy_out(a, b"mine").unwrap();
        let (same, flags) = p.page_tables().entry(a).unwrap();
        assert_eq!(frame, same);
        assert!(flags.contains(PteFlags::WRITABLE));
        assert_eq!(p.stats().shared_copies, 0);
    }

    #[test]
    fn one_write_after_the_child_left_makes_its_leaf_table_writable() {
        let (mut p, c, a) = family(64);
        drop(c);
        p.copy_out(a.add(5 * PAGE_SIZE), b"once").unwrap();
        for i in 0..64 {
            let (_, flags) = p.page_tables().entry(a.add(i * PAGE_SIZE)).unwrap();
            assert!(flags.contains(PteFlags::WRITABLE), "page {i}");
        }
        assert_eq!(p.stats().shared_copies, 0);
    }

    #[test]
    fn with_a_member_left_only_frames_of_its_own_become_writable() {
        let (mut p, mut c, a) = family(64);
        let mut g = c.fork_sharing().unwrap();
        // The child copies pages 0-31, so the parent and grandchild share them no more
        // with it; the grandchild leaves: the parent's pages 0-31 are its own again.
        c.populate(a, 32 * PAGE_SIZE, true).unwrap();
        let _ = c.take_changes();
        let _ = c.take_changes();
        drop(g.take_changes());
        drop(g);
        p.copy_out(a.add(3 * PAGE_SIZE), b"mine").unwrap();
        for i in 0..64 {
            let (_, flags) = p.page_tables().entry(a.add(i * PAGE_SIZE)).unwrap();
            // Pages 0-31, its own again; not 32-63, still shared with the child.
            assert_eq!(flags.contains(PteFlags::WRITABLE), i < 32, "page {i}");
        }
        assert_eq!(p.stats().shared_copies, 0);
        // A page still shared with the child is copied at its write.
        p.copy_out(a.add(40 * PAGE_SIZE), b"copy").unwrap();
        assert_eq!(p.stats().shared_copies, 1);
        assert_eq!(read(&mut c, a.add(40 * PAGE_SIZE)), [b'p', 40, 0, 0]);
    }

    #[test]
    fn a_member_leaving_gives_back_its_tables_and_references() {
        let mut p = mm(32 * MIB);
        let budget = MemoryBudget::new(8192);
        p.allocator().set_budget(budget.clone());
        let a = p.mmap(anon(0, 64 * PAGE_SIZE, Prot::RW, false)).unwrap();
        p.populate(a, 64 * PAGE_SIZE, true).unwrap();
        let before = (p.allocator().used_pages(), budget.used());
        let mut c = p.fork_sharing().unwrap();
        // The child writes half of the pages (copies) and maps a region of its own.
        c.populate(a, 32 * PAGE_SIZE, true).unwrap();
        let b = c.mmap(anon(0, 16 * PAGE_SIZE, Prot::RW, false)).unwrap();
        c.populate(b, 16 * PAGE_SIZE, true).unwrap();
        c.munmap(a.add(40 * PAGE_SIZE), 8 * PAGE_SIZE).unwrap();
        let _ = c.take_changes();
        let _ = c.take_changes();
        assert!(p.allocator().used_pages() > before.0 + 48);
        drop(c);
        assert_eq!((p.allocator().used_pages(), budget.used()), before);
        // The parent's checkpoint books balance again.
        assert!(p.export(&mut crate::image::AnonObjects::default()).is_ok());
    }

    #[test]
    fn a_frame_released_while_shared_is_freed_after_the_next_commit() {
        let (p, mut c, a) = family(1);
        let b = c.mmap(anon(0, PAGE_SIZE, Prot::RW, false)).unwrap();
        c.populate(b, PAGE_SIZE, true).unwrap();
        let (own, _) = c.page_tables().entry(b).unwrap();
        c.munmap(b, PAGE_SIZE).unwrap();
        // Still held: the stub may map it until the unmap is committed.
        assert_eq!(p.allocator().refcount(own), Ok(1));
        let _ = c.take_changes(); // what the munmap's commit takes
        assert_eq!(p.allocator().refcount(own), Ok(1));
        let _ = c.take_changes(); // the next commit: the first is applied
        assert_eq!(p.allocator().refcount(own), Ok(0));
        let _ = a;
    }

    #[test]
    fn a_pinned_frame_is_copied_for_the_child_not_shared() {
        let mut p = mm(32 * MIB);
        let a = p.mmap(anon(0, 2 * PAGE_SIZE, Prot::RW, false)).unwrap();
        p.copy_out(a, b"p0").unwrap();
        p.copy_out(a.add(PAGE_SIZE), b"p1").unwrap();
        // A read into the first page is in flight on another thread.
        let runs = p.user_ranges(a, 16, true).unwrap();
        let pins = p.pin(&runs);
        let mut c = p.fork_sharing().unwrap();
        let (pf, pflags) = p.page_tables().entry(a).unwrap();
        let (cf, _) = c.page_tables().entry(a).unwrap();
        assert_ne!(pf, cf, "the pinned page is the parent's alone");
        assert!(pflags.contains(PteFlags::WRITABLE));
        assert_eq!(p.allocator().refcount(pf), Ok(1));
        assert_eq!(read(&mut c, a), *b"p0\0\0");
        // The other page is shared.
        let (pf1, _) = p.page_tables().entry(a.add(PAGE_SIZE)).unwrap();
        assert_eq!(c.page_tables().entry(a.add(PAGE_SIZE)).unwrap().0, pf1);
        assert_eq!(p.allocator().refcount(pf1), Ok(2));
        drop(pins);
        assert!(p.family().pinned().is_empty());
    }

    #[test]
    fn mprotect_keeps_a_shared_frame_read_only() {
        let (mut p, c, a) = family(2);
        p.mprotect(a, 2 * PAGE_SIZE, Prot::READ).unwrap();
        p.mprotect(a, 2 * PAGE_SIZE, Prot::RW).unwrap();
        let (_, flags) = p.page_tables().entry(a).unwrap();
        assert!(!flags.contains(PteFlags::WRITABLE));
        drop(c);
        p.mprotect(a, 2 * PAGE_SIZE, Prot::READ).unwrap();
        p.mprotect(a, 2 * PAGE_SIZE, Prot::RW).unwrap();
        let (_, flags) = p.page_tables().entry(a).unwrap();
        assert!(flags.contains(PteFlags::WRITABLE));
    }

    #[test]
    fn wipe_on_fork_and_dont_fork_ranges_are_not_shared() {
        let mut p = mm(32 * MIB);
        let a = p.mmap(anon(0, 2 * PAGE_SIZE, Prot::RW, false)).unwrap();
        let b = p.mmap(anon(0, PAGE_SIZE, Prot::RW, false)).unwrap();
        p.copy_out(a, b"wipe").unwrap();
        p.copy_out(b, b"gone").unwrap();
        p.madvise(a, 2 * PAGE_SIZE, libc::MADV_WIPEONFORK).unwrap();
        p.madvise(b, PAGE_SIZE, libc::MADV_DONTFORK).unwrap();
        let mut c = p.fork_sharing().unwrap();
        assert_eq!(read(&mut c, a), [0; 4]);
        assert!(c.find_vma(b).is_none());
        assert_eq!(read(&mut p, a), *b"wipe");
        // The parent's frames there were not shared: still writable.
        let (_, flags) = p.page_tables().entry(b).unwrap();
        assert!(flags.contains(PteFlags::WRITABLE));
    }

    #[test]
    fn leaves_in_matches_a_walk_per_page() {
        let (p, _c, a) = family(700);
        let leaves = p.pt.leaves_in(Gva(0), layout::USER_END);
        assert_eq!(leaves.len(), 700);
        for (va, _, entry) in leaves {
            let (frame, flags) = p.page_tables().entry(va).unwrap();
            assert_eq!(crate::pagetable::entry_frame(entry), frame);
            assert_eq!(PteFlags::from_bits_truncate(entry), flags);
            assert!(va >= a);
        }
    }
}
