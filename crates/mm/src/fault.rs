//! Demand paging: serving a page fault on a user address by allocating a frame, filling it
//! (zero for anonymous memory, file bytes for a file mapping) and mapping it, plus fault-around.
//!
//! Fault-around: after the faulting page, every other not-mapped page of the aligned
//! [`FAULT_AROUND`]-page window around it that lies in the same VMA is populated too (the
//! window is 64 KiB aligned, so it always lies in one page-table page). A demand fault costs
//! one guest exit (about 72 µs on the development machines); filling 15 more pages costs far
//! less. For anonymous memory the extra pages are normally known-zero frames, which the host
//! has not backed yet: mapping them costs a guest-physical page each from the allocator but no
//! host memory until the application touches them (a recycled, resident frame is zeroed
//! instead). The first error in the window (out of memory, I/O) just ends fault-around.
//!
//! A private file mapping whose pages the page cache backs (`pagecache.rs`) and that is not
//! writable maps them read-only from the file's window, neighbours included; a writable one
//! copies into frames of the VM's own at the first touch, as before (`cow.rs` says why).

use std::os::fd::AsFd;

use platform::layout;
use platform::{Gpa, Gva, PAGE_SIZE};

use crate::manager::{pte_flags, MemoryManager};
use crate::pagetable::{PageTableError, PteFlags};
use crate::vma::{Prot, VmaKind};

/// Pages in the fault-around window.
pub const FAULT_AROUND: u64 = 16;

/// The kind of access that faulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access {
    /// A write.
    pub write: bool,
    /// An instruction fetch.
    pub exec: bool,
}

impl Access {
    /// A data read.
    pub const READ: Access = Access {
        write: false,
        exec: false,
    };
    /// A data write.
    pub const WRITE: Access = Access {
        write: true,
        exec: false,
    };
    /// An instruction fetch.
    pub const EXEC: Access = Access {
        write: false,
        exec: true,
    };

    fn allowed_by(self, prot: Prot) -> bool {
        prot.is_accessible()
            && (!self.write || prot.contains(Prot::WRITE))
            && (!self.exec || prot.contains(Prot::EXEC))
    }

    fn satisfied_by(self, flags: PteFlags) -> bool {
        flags.contains(PteFlags::PRESENT | PteFlags::USER)
            && (!self.write || flags.contains(PteFlags::WRITABLE))
            && (!self.exec || !flags.contains(PteFlags::NO_EXEC))
    }
}

/// Why a fault could not be served; the kernel turns it into a signal.
#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    /// No mapping at the address (SIGSEGV, SEGV_MAPERR).
    #[error("no mapping")]
    Unmapped,
    /// The mapping forbids this access (SIGSEGV, SEGV_ACCERR).
    #[error("access denied by the mapping's protection")]
    AccessDenied,
    /// No frame (or page-table page) left (Linux would OOM-kill; the kernel decides).
    #[error("out of memory")]
    OutOfMemory,
    /// Reading the mapped file failed (SIGBUS, BUS_ADRERR).
    #[error("reading the mapped file: {0}")]
    Io(std::io::Error),
    /// An internal invariant broke (corrupt page table); the kernel should stop the sandbox.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Compares variants only (`io::Error` has no equality): enough to tell which signal to send.
impl PartialEq for FaultError {
    fn eq(&self, other: &Self) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

impl From<PageTableError> for FaultError {
    fn from(e: PageTableError) -> Self {
        match e {
            PageTableError::OutOfMemory => FaultError::OutOfMemory,
            e => FaultError::Internal(e.to_string()),
        }
    }
}

impl MemoryManager {
    /// Serves a fault at `addr` for `access`: checks the VMA's rights, maps the page (and
    /// fault-around neighbours). A fault on a page that is already mapped with enough rights
    /// (another vCPU served it) succeeds without change. New entries must reach the guest
    /// through [`take_pte_sync`](Self::take_pte_sync) before it resumes.
    ///
    /// # Errors
    /// See [`FaultError`].
    pub fn handle_fault(&mut self, addr: Gva, access: Access) -> Result<(), FaultError> {
        self.faults += 1;
        if !layout::is_user(addr) {
            return Err(FaultError::Unmapped);
        }
        let vma = self.vmas.find(addr).ok_or(FaultError::Unmapped)?;
        if !access.allowed_by(vma.prot) {
            return Err(FaultError::AccessDenied);
        }
        let (start, end, kind) = (vma.start, vma.end, vma.kind.clone());
        let flags = pte_flags(vma.prot);
        let page = addr.page_down();
        if let Some((frame, cur)) = self.pt.entry(page) {
            if !access.satisfied_by(cur) {
                if access.write && self.mem.is_read_only(frame) {
                    // A page-cache page of a private file mapping: copy on write.
                    self.unshare(page, start, &kind, flags)?;
                } else if access.write && !kind.is_shared() && self.is_shared_frame(frame) {
                    // A frame shared with a forked address space: copy on write.
                    self.copy_shared(page, frame, flags)?;
                } else {
                    // The entry lags behind the VMA; bring it up to date.
                    self.pt.set_flags(page, self.leaf_flags(frame, flags))?;
                    if access.write && self.read_only_after_fork && !kind.is_shared() {
                        // A frame a fork had shared is this side's alone again.
                        self.reuse_after_fork(page, start, end);
                    }
                }
            }
            // A platform that maps pages itself may have dropped the mapping (hibernation)
            // or never had it (a new process's first touch): make the window visible again.
            let window = page.0 & !(FAULT_AROUND * PAGE_SIZE - 1);
            for i in 0..FAULT_AROUND {
                self.pt.touch(Gva(window + i * PAGE_SIZE));
            }
            return Ok(());
        }
        self.populate_page(page, start, &kind, flags, access.write)?;
        let window = page.0 & !(FAULT_AROUND * PAGE_SIZE - 1);
        for i in 0..FAULT_AROUND {
            let va = Gva(window + i * PAGE_SIZE);
            if va == page || va < start || va >= end || self.pt.entry(va).is_some() {
                continue;
            }
            if let Err(e) = self.populate_page(va, start, &kind, flags, access.write) {
                tracing::debug!("fault-around stopped at {va}: {e}");
                break;
            }
        }
        Ok(())
    }

    /// Maps `page` of a VMA starting at `vma_start`: a shared object's page, a page-cache
    /// page of a private file mapping that is not writable (read-only; not for a `write`
    /// fault), or a frame of the VM's own, allocated and filled.
    fn populate_page(
        &mut self,
        page: Gva,
        vma_start: Gva,
        kind: &VmaKind,
        flags: PteFlags,
        write: bool,
    ) -> Result<(), FaultError> {
        // Tables first: the data frames of neighbouring pages then come out contiguous.
        self.pt.prepare(&mut self.alloc.lock(), page)?;
        // Only into a mapping that is not writable (see `cow.rs`).
        if !write
            && !flags.contains(PteFlags::WRITABLE)
            && self.map_cached(page, vma_start, kind, flags)?
        {
            return Ok(());
        }
        if let VmaKind::Shared { object, offset, .. } = kind {
            // The object's own page, in a window this VM attaches on first use.
            let off = offset + (page.0 - vma_start.0);
            let (window, gpa) = object.page(off).map_err(FaultError::Io)?;
            self.mem
                .attach(&window)
                .map_err(|e| FaultError::Internal(format!("attaching {window:?}: {e}")))?;
            self.pt.map(&mut self.alloc.lock(), page, gpa, flags)?;
            return Ok(());
        }
        let (frame, zero) = self.alloc.lock().alloc().ok_or(FaultError::OutOfMemory)?;
        let filled = self.fill(frame, zero, page, vma_start, kind);
        let mapped =
            filled.and_then(|()| Ok(self.pt.map(&mut self.alloc.lock(), page, frame, flags)?));
        if mapped.is_err() {
            if let Err(e) = self.alloc.lock().decref(frame) {
                tracing::error!("releasing frame {frame}: {e}");
            }
        }
        mapped
    }

    /// Fills `frame` with the bytes of `page` of a VMA starting at `vma_start`: the file's
    /// (zero past its end) or zero.
    pub(crate) fn fill(
        &self,
        frame: Gpa,
        zero: bool,
        page: Gva,
        vma_start: Gva,
        kind: &VmaKind,
    ) -> Result<(), FaultError> {
        let internal = |e: platform::MemoryError| FaultError::Internal(e.to_string());
        let mut done = 0;
        if let VmaKind::File { file, offset, .. } = kind {
            let off = offset + (page.0 - vma_start.0);
            while done < PAGE_SIZE {
                let at = Gpa(frame.0 + done);
                match self
                    .mem
                    .read_from_fd(file.as_fd(), at, PAGE_SIZE - done, Some(off + done))
                {
                    // A page wholly past the end of the file: SIGBUS, as on Linux.
                    Ok(0) if done == 0 => {
                        return Err(FaultError::Io(std::io::Error::from_raw_os_error(
                            libc::EFAULT,
                        )))
                    }
                    Ok(0) => break,
                    Ok(n) => done += n as u64,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(FaultError::Io(e)),
                }
            }
        }
        // Bytes past EOF in the file's last page (or the whole anonymous page) read as zero.
        if !zero && done < PAGE_SIZE {
            self.mem
                .fill(Gpa(frame.0 + done), 0, PAGE_SIZE - done)
                .map_err(internal)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::manager::tests::{anon, mm, MIB};
    use crate::manager::MmapRequest;

    #[test]
    fn unmapped_denied_ok() {
        let mut m = mm(16 * MIB);
        assert_eq!(
            m.handle_fault(Gva(0x50_0000), Access::READ),
            Err(FaultError::Unmapped)
        );
        assert_eq!(
            m.handle_fault(layout::direct_map(Gpa(0x1000)), Access::READ),
            Err(FaultError::Unmapped)
        );
        let ro = m.mmap(anon(0x50_0000, 0x1000, Prot::READ, true)).unwrap();
        assert_eq!(
            m.handle_fault(ro, Access::WRITE),
            Err(FaultError::AccessDenied)
        );
        assert_eq!(
            m.handle_fault(ro, Access::EXEC),
            Err(FaultError::AccessDenied)
        );
        assert_eq!(m.stats().mapped_pages, 0);
        m.handle_fault(ro.add(0x10), Access::READ).unwrap();
        let (_, f) = m.page_tables().translate(ro).unwrap();
        assert!(f.contains(PteFlags::PRESENT | PteFlags::USER | PteFlags::NO_EXEC));
        assert!(!f.contains(PteFlags::WRITABLE));
        // Spurious: already there.
        let before = m.stats().mapped_pages;
        m.handle_fault(ro, Access::READ).unwrap();
        assert_eq!(m.stats().mapped_pages, before);
        let x = m
            .mmap(anon(0x60_0000, 0x1000, Prot::READ | Prot::EXEC, true))
            .unwrap();
        m.handle_fault(x, Access::EXEC).unwrap();
        assert!(!m
            .page_tables()
            .translate(x)
            .unwrap()
            .1
            .contains(PteFlags::NO_EXEC));
        // Write-only mappings are readable on x86.
        let w = m.mmap(anon(0x70_0000, 0x1000, Prot::WRITE, true)).unwrap();
        m.handle_fault(w, Access::READ).unwrap();
        assert!(m.has_pte_sync());
        assert_eq!(m.stats().faults, 8);
    }

    #[test]
    fn fault_around_fills_the_window_within_the_vma() {
        let mut m = mm(16 * MIB);
        // VMA from page 3 to page 40 of a 64 KiB-aligned base.
        let base = Gva(0x100_0000);
        let a = m
            .mmap(anon(base.0 + 3 * PAGE_SIZE, 37 * PAGE_SIZE, Prot::RW, true))
            .unwrap();
        m.handle_fault(base.add(5 * PAGE_SIZE + 7), Access::WRITE)
            .unwrap();
        // Window = pages 0..16, VMA covers 3..16: 13 pages.
        assert_eq!(m.stats().mapped_pages, 13);
        assert!(m.page_tables().translate(a).is_some());
        assert!(m.page_tables().entry(base.add(16 * PAGE_SIZE)).is_none());
        // Next window: 16..32, all 16 in the VMA; an already-mapped page is left alone.
        m.handle_fault(base.add(20 * PAGE_SIZE), Access::READ)
            .unwrap();
        assert_eq!(m.stats().mapped_pages, 29);
        m.handle_fault(base.add(39 * PAGE_SIZE), Access::READ)
            .unwrap();
        // Window 32..48, VMA ends at 40: 8 more.
        assert_eq!(m.stats().mapped_pages, 37);
        // Every page reads zero.
        let mut buf = vec![1u8; 37 * PAGE_SIZE as usize];
        m.copy_in(a, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
    }

    #[test]
    fn recycled_frames_are_zeroed() {
        let mut m = mm(16 * MIB);
        let a = m.mmap(anon(0, 0x10000, Prot::RW, false)).unwrap();
        m.copy_out(a, &vec![0xeeu8; 0x10000]).unwrap();
        m.munmap(a, 0x10000).unwrap();
        let b = m.mmap(anon(0, 0x10000, Prot::RW, false)).unwrap();
        let mut buf = vec![1u8; 0x10000];
        m.copy_in(b, &mut buf).unwrap();
        assert!(buf.iter().all(|&x| x == 0));
    }

    #[test]
    fn file_backed_fault_reads_the_right_bytes() {
        let path = std::env::temp_dir().join(format!("mm-fault-{}", std::process::id()));
        // Three pages and a half: page i is filled with byte i + 1.
        let mut data: Vec<u8> = (0..0x3800u32).map(|i| (i / 0x1000) as u8 + 1).collect();
        data[0x2000..0x2004].copy_from_slice(b"ABCD");
        std::fs::write(&path, &data).unwrap();
        let file = Arc::new(std::fs::File::open(&path).unwrap());
        let mut m = mm(16 * MIB);
        // Dirty some frames first so known-zero does not hide missing zeroing.
        let junk = m.mmap(anon(0, 0x20000, Prot::RW, false)).unwrap();
        m.copy_out(junk, &vec![0xffu8; 0x20000]).unwrap();
        m.munmap(junk, 0x20000).unwrap();
        let a = m
            .mmap(MmapRequest {
                addr: Gva(0),
                len: 0x4000,
                prot: Prot::READ,
                fixed: false,
                fixed_noreplace: false,
                kind: crate::VmaKind::File {
                    file: file.clone(),
                    offset: 0x1000,
                    cache: None,
                },
                name: None,
            })
            .unwrap();
        m.handle_fault(a.add(0x1000), Access::READ).unwrap();
        let mut buf = [0u8; 4];
        m.copy_in(a.add(0x1000), &mut buf).unwrap();
        assert_eq!(&buf, b"ABCD");
        assert_eq!(m.read_val::<u8>(a).unwrap(), 2);
        // The page holding EOF: 0x800 file bytes, then zeros; the page past EOF is a SIGBUS
        // (EFAULT for a user copy), as on Linux.
        assert_eq!(m.read_val::<u8>(a.add(0x27ff)).unwrap(), 4);
        assert_eq!(m.read_val::<u8>(a.add(0x2800)).unwrap(), 0);
        assert!(m.read_val::<u64>(a.add(0x3ff8)).is_err());
        assert!(matches!(
            m.handle_fault(a.add(0x3000), Access::READ),
            Err(FaultError::Io(_))
        ));
        // Private: writes after mprotect stay in memory; DONTNEED re-reads the file.
        m.mprotect(a, 0x4000, Prot::RW).unwrap();
        m.copy_out(a, b"zz").unwrap();
        assert_eq!(m.read_val::<u8>(a).unwrap(), b'z');
        m.madvise(a, 0x1000, libc::MADV_DONTNEED).unwrap();
        assert_eq!(m.read_val::<u8>(a).unwrap(), 2);
        assert_eq!(std::fs::read(&path).unwrap(), data);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn clean_read_only_file_pages_are_listed() {
        let path = std::env::temp_dir().join(format!("mm-clean-{}", std::process::id()));
        let data: Vec<u8> = (0..0x4000u32).map(|i| (i / 0x1000) as u8 + 7).collect();
        std::fs::write(&path, &data).unwrap();
        let file = Arc::new(std::fs::File::open(&path).unwrap());
        let mut m = mm(16 * MIB);
        let map = |m: &mut MemoryManager, prot| {
            m.mmap(MmapRequest {
                addr: Gva(0),
                len: 0x4000,
                prot,
                fixed: false,
                fixed_noreplace: false,
                kind: crate::VmaKind::File {
                    file: file.clone(),
                    offset: 0,
                    cache: None,
                },
                name: None,
            })
            .unwrap()
        };
        let ro = map(&mut m, Prot::READ);
        let rw = map(&mut m, Prot::RW);
        for p in 0..4 {
            m.handle_fault(ro.add(p * 0x1000), Access::READ).unwrap();
            m.handle_fault(rw.add(p * 0x1000), Access::READ).unwrap();
        }
        // Read-only mapping: its 3 first pages (the last is left out); the writable one: none.
        let clean = m.clean_file_pages();
        assert_eq!(clean.len(), 3);
        for (i, c) in clean.iter().enumerate() {
            assert_eq!(c.offset, i as u64 * 0x1000);
            assert_eq!(
                Some(c.frame),
                m.page_tables()
                    .translate(ro.add(i as u64 * 0x1000))
                    .map(|t| t.0)
            );
        }
        // A page the kernel wrote for the application, then made read-only, is dirty.
        m.copy_out(rw, b"x").unwrap();
        m.mprotect(rw, 0x4000, Prot::READ).unwrap();
        let clean = m.clean_file_pages();
        assert_eq!(clean.len(), 5, "ro 0-2 and rw 1-2");
        assert!(clean
            .iter()
            .all(|c| Some(c.frame) != m.page_tables().translate(rw).map(|t| t.0)));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn out_of_memory_is_reported() {
        let mut m = mm(8 * MIB);
        let a = m.mmap(anon(0, 8 * MIB, Prot::RW, false)).unwrap();
        let mut result = Ok(());
        for i in 0..(8 * MIB / PAGE_SIZE) {
            result = m.handle_fault(a.add(i * PAGE_SIZE), Access::WRITE);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(FaultError::OutOfMemory));
        assert_eq!(m.stats().free_pages, 0);
        assert_eq!(
            m.copy_out(a.add(8 * MIB - 8), &[1]).unwrap_err().errno(),
            libc::EFAULT
        );
    }
}
