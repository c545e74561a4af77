//! Page-cache pages in private file mappings, and their copy-on-write.
//!
//! A private file mapping whose file has a read-only object (`pagecache.rs`) maps its clean
//! pages straight from the object's window while the mapping is not writable (program text,
//! read-only data): read-only entries, and a frame of a read-only window is never given a
//! writable one ([`MemoryManager::leaf_flags`]; fork maps the same pages in the child).
//!
//! A writable private file mapping (a library's data, RELRO before its `mprotect`) gets
//! copies in frames of the VM's own at the first touch, as without sharing, and
//! `mprotect` adding `PROT_WRITE` unmaps the page-cache pages of its range (a restriction,
//! synced with the other threads before the call returns), so that they come back as copies.
//! Linux instead keeps a writable mapping's pages shared until written and replaces the
//! entry on the write (`do_wp_page`), after a synchronous TLB shootdown. Here the other
//! vCPUs of the process drop an old translation only when they apply the page-table log
//! (after a kick): a thread could read the page-cache page for a while after another wrote
//! its copy. Redis (jemalloc) crashed that way in `servers.rs` until writable mappings were
//! excluded; a synchronous shootdown (kick, then wait until every thread in the guest has
//! applied the log) would allow it.
//!
//! The copy itself ([`MemoryManager::unshare`]) remains for what still meets a page-cache
//! page with a write: the ELF loader zeroing a `.bss` tail ([`MemoryManager::poke`], before
//! any thread runs) and, defensively, a write fault on such a page. The frame is filled from
//! the file with `pread` (the same page-cache bytes; a truncated file reads zero instead of
//! faulting the runtime), mapped writable and dirty, the runtime's mapping of the page-cache
//! page dropped (so the holder does not count both), and the replaced entry reported
//! ([`MemoryManager::take_replaced`]) so that the task kicks the other threads.
//!
//! When the window cannot be used (no memslot left below the reserve, no guest-physical
//! space, a page past the end of the file), the page is copied as it would be without
//! sharing.

use platform::{Gpa, Gva, PAGE_SIZE};

use crate::fault::FaultError;
use crate::manager::{MemoryManager, MmError};
use crate::pagecache::RESERVED_SLOTS;
use crate::pagetable::PteFlags;
use crate::shared::SharedObject;
use crate::vma::VmaKind;

impl MemoryManager {
    /// The entry flags for `frame` in a VMA whose pages get `flags`: never writable for a
    /// frame of a read-only window, nor for a frame shared with another address space of the
    /// family (`manager/fork.rs`).
    pub(crate) fn leaf_flags(&self, frame: Gpa, flags: PteFlags) -> PteFlags {
        if !flags.contains(PteFlags::WRITABLE) {
            flags
        } else if self.mem.is_read_only(frame) || self.is_shared_frame(frame) {
            flags.without(PteFlags::WRITABLE)
        } else {
            flags
        }
    }

    /// Maps `page` of a private file mapping read-only from its file's window, if the VMA
    /// has one and the window can be attached. Returns whether it did.
    pub(crate) fn map_cached(
        &mut self,
        page: Gva,
        vma_start: Gva,
        kind: &VmaKind,
        flags: PteFlags,
    ) -> Result<bool, FaultError> {
        let VmaKind::File {
            offset,
            cache: Some(object),
            ..
        } = kind
        else {
            return Ok(false);
        };
        let Some(off) = offset.checked_add(page.0 - vma_start.0) else {
            return Ok(false);
        };
        let Some(gpa) = self.cached_page(object, off) else {
            return Ok(false);
        };
        let flags = flags.without(PteFlags::WRITABLE);
        self.pt.map(&mut self.alloc.lock(), page, gpa, flags)?;
        self.cache_maps += 1;
        Ok(true)
    }

    /// The guest-physical address of byte `off` of `object` in a window attached to this VM,
    /// or `None` (past the end of the file, no space or memslot left: the caller copies).
    fn cached_page(&mut self, object: &SharedObject, off: u64) -> Option<Gpa> {
        let page = match self.sizes_ahead.as_mut() {
            Some(sizes) => {
                let key = std::ptr::from_ref(object) as usize;
                let size = match sizes.get(&key) {
                    Some(&s) => Ok(s),
                    None => object.size().inspect(|&s| {
                        sizes.insert(key, s);
                    }),
                };
                size.and_then(|s| object.page_within(off, s))
            }
            None => object.page(off),
        };
        let (window, gpa) = match page {
            Ok(p) => p,
            Err(e) => {
                if e.raw_os_error() != Some(libc::EFAULT) {
                    tracing::debug!("page-cache window at {off:#x}: {e}");
                }
                return None;
            }
        };
        match self.mem.attach_keeping(&window, RESERVED_SLOTS) {
            Ok(()) => Some(gpa),
            Err(e) => {
                tracing::debug!("not attaching {window:?}: {e}; copying the page");
                None
            }
        }
    }

    /// Copy-on-write: replaces the read-only page-cache page mapped at `page` (of a VMA
    /// starting at `vma_start`) by a copy in a frame of the VM's own, mapped with `flags`.
    pub(crate) fn unshare(
        &mut self,
        page: Gva,
        vma_start: Gva,
        kind: &VmaKind,
        flags: PteFlags,
    ) -> Result<(), FaultError> {
        if !matches!(kind, VmaKind::File { .. }) {
            // Only a private file mapping's pages are copied; a read-only shared object's
            // page is never written (its VMA cannot be made writable).
            return Err(FaultError::AccessDenied);
        }
        let (frame, zero) = self.alloc.lock().alloc().ok_or(FaultError::OutOfMemory)?;
        if let Err(e) = self.fill(frame, zero, page, vma_start, kind) {
            if let Err(d) = self.alloc.lock().decref(frame) {
                tracing::error!("releasing frame {frame}: {d}");
            }
            return Err(e);
        }
        // The old frame is the window's, not the allocator's: nothing to release. The
        // runtime's mapping of it is dropped, so that the holder does not count the page
        // cache's page beside the copy (any VM still using it faults it back from the
        // page cache).
        let old = self.pt.unmap(page);
        // Dirty from the start, as Linux's `do_wp_page` makes it: the copy exists because
        // the page is being written, and a clean page of a read-only file mapping is one the
        // deflate drops and reads back from the file.
        let flags = flags | PteFlags::ACCESSED | PteFlags::DIRTY;
        let mapped = self.pt.map(&mut self.alloc.lock(), page, frame, flags);
        if let Err(e) = mapped {
            if let Err(d) = self.alloc.lock().decref(frame) {
                tracing::error!("releasing frame {frame}: {d}");
            }
            return Err(e.into());
        }
        if let Some(old) = old {
            if let Err(e) = self.mem.discard(old, PAGE_SIZE) {
                tracing::debug!("dropping the window page {old}: {e}");
            }
        }
        self.replaced = true;
        self.cow_copies += 1;
        Ok(())
    }

    /// Whether a present entry was replaced (a copy-on-write) since the last call: the other
    /// threads of the process must then be made to apply the page-table log before they run
    /// on (the kernel kicks them), as after a call that restricts mappings.
    pub fn take_replaced(&mut self) -> bool {
        std::mem::take(&mut self.replaced)
    }

    /// Writes `buf` at user address `addr` whatever the mapping's rights, as the kernel does
    /// when it loads a program (Linux's `FOLL_FORCE`): a page-cache page is copied first, so
    /// the file is never written.
    ///
    /// # Errors
    /// `EFAULT` if a byte is not mapped; [`MmError::Internal`] on a host failure.
    pub fn poke(&mut self, addr: Gva, buf: &[u8]) -> Result<(), MmError> {
        let len = buf.len() as u64;
        let mut done = 0u64;
        while done < len {
            let va = addr.checked_add(done).ok_or(MmError::Fault(addr))?;
            let n = (PAGE_SIZE - va.page_offset()).min(len - done);
            // Fault the page in as a read would (rights are not asked for writing).
            let mut gpa = self.user_byte(va, false)?;
            if self.mem.is_read_only(gpa) {
                let page = va.page_down();
                let vma = self.vmas.find(page).cloned().ok_or(MmError::Fault(va))?;
                let flags = crate::manager::pte_flags(vma.prot);
                self.unshare(page, vma.start, &vma.kind, flags)
                    .map_err(|e| MmError::Internal(e.to_string()))?;
                gpa = self.pt.translate(va).ok_or(MmError::Fault(va))?.0;
            }
            self.mem
                .write(gpa, &buf[done as usize..(done + n) as usize])
                .map_err(|e| MmError::Internal(e.to_string()))?;
            done += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::fault::Access;
    use crate::manager::tests::{mm, MIB};
    use crate::manager::MmapRequest;
    use crate::shared::SharedSpace;
    use crate::vma::Prot;

    /// A memory manager whose guest memory accepts windows (no VM: a registrar that
    /// records nothing), with `slots` memslots in all.
    fn mm_with_windows(slots: usize) -> MemoryManager {
        let m = mm(16 * MIB);
        m.memory().set_registrar(Box::new(|_, _| Ok(())));
        m.memory().set_slot_limit(slots);
        m
    }

    struct Fixture {
        path: std::path::PathBuf,
        file: Arc<std::fs::File>,
        space: Arc<SharedSpace>,
    }

    impl Fixture {
        /// Four pages, page i filled with byte i + 1, beside the test binary (not a tmpfs).
        fn new(name: &str) -> Fixture {
            let exe = std::env::current_exe().unwrap();
            let path = exe
                .parent()
                .unwrap()
                .join(format!("mm-cow-{name}-{}", std::process::id()));
            let data: Vec<u8> = (0..0x4000u32).map(|i| (i / 0x1000) as u8 + 1).collect();
            std::fs::write(&path, data).unwrap();
            let file = Arc::new(std::fs::File::open(&path).unwrap());
            Fixture {
                path,
                file,
                space: SharedSpace::new(),
            }
        }

        fn map(&self, m: &mut MemoryManager, prot: Prot) -> Gva {
            m.mmap(MmapRequest {
                addr: Gva(0),
                len: 0x4000,
                prot,
                fixed: false,
                fixed_noreplace: false,
                kind: VmaKind::File {
                    file: self.file.clone(),
                    offset: 0,
                    cache: self.space.private_file(&self.file, true),
                },
                name: None,
            })
            .unwrap()
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    fn frame(m: &MemoryManager, va: Gva) -> (Gpa, PteFlags) {
        m.page_tables().translate(va).unwrap()
    }

    #[test]
    fn read_only_mappings_map_the_page_cache_and_writable_ones_copy() {
        let f = Fixture::new("ro");
        let mut m = mm_with_windows(1000);
        let free0 = m.stats().free_pages;
        let a = f.map(&mut m, Prot::READ);
        m.handle_fault(a, Access::READ).unwrap();
        // The four pages (fault-around) come from the window: no frame of the VM's own.
        for p in 0..4 {
            let (g, fl) = frame(&m, a.add(p * PAGE_SIZE));
            assert!(m.memory().is_read_only(g), "page {p} from the window");
            assert!(!fl.contains(PteFlags::WRITABLE), "read-only entry");
        }
        let tables = m.stats().page_table_pages;
        assert_eq!(m.stats().free_pages, free0 - (tables - 4));
        assert_eq!(m.stats().cache_maps, 4);
        assert_eq!(m.read_val::<u8>(a.add(0x1000)).unwrap(), 2);
        // Writes are refused by the mapping, not by the page: EFAULT for a user copy.
        assert!(m.copy_out(a, b"x").is_err());
        // A writable mapping of the same file copies at the first touch, as without sharing.
        let b = f.map(&mut m, Prot::RW);
        m.handle_fault(b, Access::READ).unwrap();
        let (g, fl) = frame(&m, b);
        assert!(m.memory().is_own(g) && fl.contains(PteFlags::WRITABLE));
        m.copy_out(b.add(0x1000), b"mine").unwrap();
        assert_eq!(std::fs::read(&f.path).unwrap()[0x1000], 2);
        assert_eq!(m.stats().cow_copies, 0);
        // munmap of the read-only mapping releases nothing of the allocator's.
        let before = m.stats().free_pages;
        m.munmap(a, 0x4000).unwrap();
        assert_eq!(m.stats().free_pages, before);
        assert!(!m.take_replaced());
    }

    #[test]
    fn mprotect_writable_drops_window_pages_and_they_come_back_as_copies() {
        let f = Fixture::new("mprotect");
        let mut m = mm_with_windows(1000);
        let a = f.map(&mut m, Prot::READ);
        m.handle_fault(a, Access::READ).unwrap();
        // Made writable (RELRO in reverse, TEXTREL): the page-cache pages are unmapped...
        m.mprotect(a, 0x2000, Prot::RW).unwrap();
        assert!(m.page_tables().translate(a).is_none());
        assert!(m.page_tables().translate(a.add(0x1000)).is_none());
        // ...the rest keeps them, read-only.
        let (g, fl) = frame(&m, a.add(0x2000));
        assert!(m.memory().is_read_only(g) && !fl.contains(PteFlags::WRITABLE));
        // The next touch copies; the writes stay in the copy; the file is unchanged.
        assert_eq!(m.read_val::<u8>(a.add(0x1000)).unwrap(), 2);
        assert!(m.memory().is_own(frame(&m, a.add(0x1000)).0));
        m.write_val(a.add(8), &7u64).unwrap();
        assert!(m.memory().is_own(frame(&m, a).0));
        m.mprotect(a, 0x4000, Prot::READ).unwrap();
        assert_eq!(m.read_val::<u64>(a.add(8)).unwrap(), 7);
        assert_eq!(std::fs::read(&f.path).unwrap()[8], 1);
        // DONTNEED: the copy goes back to the allocator, the page is the file's again.
        let free = m.stats().free_pages;
        m.madvise(a, 0x1000, libc::MADV_DONTNEED).unwrap();
        assert_eq!(m.stats().free_pages, free + 1);
        assert_eq!(m.read_val::<u64>(a.add(8)).unwrap(), 0x0101_0101_0101_0101);
        assert!(m.memory().is_read_only(frame(&m, a).0));
    }

    #[test]
    fn a_write_fault_on_a_window_page_copies_it() {
        // Not reached through mprotect (which unmaps such pages), but defended: the fault
        // copies and reports the replaced entry.
        let f = Fixture::new("wfault");
        let mut m = mm_with_windows(1000);
        let a = f.map(&mut m, Prot::READ);
        m.handle_fault(a, Access::READ).unwrap();
        m.vmas.protect(a, a.add(0x1000), Prot::RW).unwrap();
        m.handle_fault(a, Access::WRITE).unwrap();
        let (g, fl) = frame(&m, a);
        assert!(m.memory().is_own(g));
        assert!(fl.contains(PteFlags::WRITABLE | PteFlags::DIRTY));
        assert!(m.take_replaced() && !m.take_replaced());
        assert_eq!(m.stats().cow_copies, 1);
        assert_eq!(m.read_val::<u8>(a.add(0xfff)).unwrap(), 1);
    }

    #[test]
    fn fork_shares_window_pages_and_keeps_copies_private() {
        let f = Fixture::new("fork");
        let mut m = mm_with_windows(1000);
        let a = f.map(&mut m, Prot::READ);
        m.handle_fault(a, Access::READ).unwrap();
        m.mprotect(a.add(0x1000), 0x1000, Prot::RW).unwrap();
        m.copy_out(a.add(0x1000), b"parent").unwrap();
        let child_mem = Arc::new(platform::GuestMemory::new(16 * MIB).unwrap());
        child_mem.set_registrar(Box::new(|_, _| Ok(())));
        let mut c = m.fork_into(child_mem).unwrap();
        // Page 0: the same window page; page 1: a copy of the parent's copy.
        assert_eq!(frame(&c, a).0, frame(&m, a).0);
        assert!(c.memory().is_read_only(frame(&c, a).0));
        let mut b = [0u8; 6];
        c.copy_in(a.add(0x1000), &mut b).unwrap();
        assert_eq!(&b, b"parent");
        // Each side's writes stay its own.
        c.copy_out(a.add(0x1000), b"child!").unwrap();
        m.copy_in(a.add(0x1000), &mut b).unwrap();
        assert_eq!(&b, b"parent");
        c.mprotect(a, 0x1000, Prot::RW).unwrap();
        c.copy_out(a, b"c").unwrap();
        assert_eq!(m.read_val::<u8>(a).unwrap(), 1);
        assert!(m.memory().is_read_only(frame(&m, a).0));
    }

    #[test]
    fn without_memslots_or_sharing_pages_are_copied_and_without_a_vm_windows_attach() {
        let f = Fixture::new("slots");
        // Every slot but the VM's own is in the reserve: no window may be attached.
        let mut m = mm_with_windows(RESERVED_SLOTS + 1);
        let a = f.map(&mut m, Prot::READ);
        assert_eq!(m.read_val::<u8>(a.add(0x3000)).unwrap(), 4);
        assert!(m.memory().is_own(frame(&m, a.add(0x3000)).0));
        assert!(m.memory().windows().is_empty());
        // No registrar (the trap platform, whose stubs map windows themselves): the window
        // is attached all the same, with no memslot limit.
        let mut m = mm(16 * MIB);
        let a = f.map(&mut m, Prot::READ);
        assert_eq!(m.read_val::<u8>(a).unwrap(), 1);
        assert!(!m.memory().is_own(frame(&m, a).0));
        assert_eq!(m.memory().windows().len(), 1);
        // Sharing off: the VMA has no object.
        f.space.set_share_files(false);
        assert!(f.space.private_file(&f.file, true).is_none());
    }

    #[test]
    fn poke_copies_read_only_pages_and_never_writes_the_file() {
        let f = Fixture::new("poke");
        let mut m = mm_with_windows(1000);
        let a = f.map(&mut m, Prot::READ);
        m.poke(a.add(0xffe), &[0, 0, 0, 0]).unwrap();
        assert_eq!(m.read_val::<u32>(a.add(0xffe)).unwrap(), 0);
        assert!(m.memory().is_own(frame(&m, a).0));
        assert!(m.memory().is_own(frame(&m, a.add(0x1000)).0));
        assert_eq!(
            &std::fs::read(&f.path).unwrap()[0xffe..0x1002],
            &[1, 1, 2, 2]
        );
        // The runtime's own writes to a window page are refused, never a fault.
        let (g, _) = frame(&m, a.add(0x2000));
        assert!(m.memory().write(g, b"x").is_err());
        assert!(m.memory().fill(g, 0, 1).is_err());
    }

    #[test]
    fn truncated_file_never_faults_the_runtime() {
        let f = Fixture::new("trunc");
        let mut m = mm_with_windows(1000);
        let a = f.map(&mut m, Prot::READ);
        m.handle_fault(a, Access::READ).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&f.path)
            .unwrap()
            .set_len(0x1000)
            .unwrap();
        // Page 2 is past the new end: the runtime reads it as zeros (its window page is
        // gone: no SIGBUS in the runtime), and copying it fails as a fault past the end of
        // the file does (SIGBUS for the guest, EFAULT for a user copy).
        assert_eq!(m.read_val::<u8>(a.add(0x2000)).unwrap(), 0);
        assert!(m.poke(a.add(0x2000), b"z").is_err());
        assert_eq!(m.read_val::<u8>(a).unwrap(), 1);
        // A page never touched before the truncation is a SIGBUS.
        m.munmap(a.add(0x3000), 0x1000).unwrap();
        let b = f.map(&mut m, Prot::READ);
        assert!(matches!(
            m.handle_fault(b.add(0x3000), Access::READ),
            Err(FaultError::Io(_))
        ));
    }
}
