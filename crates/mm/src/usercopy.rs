//! Copies between the kernel and the application's memory, and translation of user buffers to
//! guest-physical runs: the syscall layer's only way into guest memory.
//!
//! Every function checks that the whole range lies in the user half (`EFAULT` otherwise,
//! including overflow), and touches each page as the guest would: a not-present page is
//! faulted in through [`MemoryManager::handle_fault`] with the same rights check (reads need a
//! readable VMA, writes a writable one), and a failed fault is `EFAULT`. Nothing here panics on
//! any input; callers cap lengths (a huge length costs time, not safety).

use platform::layout;
use platform::{Gpa, Gva, PAGE_SIZE};

use crate::fault::Access;
use crate::manager::{MemoryManager, MmError};
use crate::pagetable::PteFlags;
use abi::pod::{self, Pod};

impl MemoryManager {
    fn check_user(addr: Gva, len: u64) -> Result<(), MmError> {
        match addr.checked_add(len) {
            Some(end) if end <= layout::USER_END => Ok(()),
            _ => Err(MmError::Fault(addr)),
        }
    }

    /// The guest-physical address of user byte `va`, faulting its page in for `write` access.
    pub(crate) fn user_byte(&mut self, va: Gva, write: bool) -> Result<Gpa, MmError> {
        let need = |f: PteFlags| {
            f.contains(PteFlags::PRESENT | PteFlags::USER)
                && (!write || f.contains(PteFlags::WRITABLE))
        };
        if let Some((gpa, f)) = self.pt.translate(va) {
            if need(f) {
                if write && !f.contains(PteFlags::DIRTY) {
                    self.pt.mark_dirty(va);
                }
                return Ok(gpa);
            }
        }
        self.handle_fault(va, Access { write, exec: false })
            .map_err(|_| MmError::Fault(va))?;
        match self.pt.translate(va) {
            Some((gpa, f)) if need(f) => {
                if write && !f.contains(PteFlags::DIRTY) {
                    self.pt.mark_dirty(va);
                }
                Ok(gpa)
            }
            _ => Err(MmError::Fault(va)),
        }
    }

    /// Splits `[addr, addr + len)` at page boundaries and calls `f(gpa, offset, n)` for each
    /// piece, where `offset` is the piece's position in the range.
    fn for_each_piece(
        &mut self,
        addr: Gva,
        len: u64,
        write: bool,
        mut f: impl FnMut(&Self, Gpa, usize, usize) -> Result<(), MmError>,
    ) -> Result<(), MmError> {
        Self::check_user(addr, len)?;
        let mut done = 0u64;
        while done < len {
            let va = addr.add(done);
            let n = (PAGE_SIZE - va.page_offset()).min(len - done);
            let gpa = self.user_byte(va, write)?;
            f(self, gpa, done as usize, n as usize)?;
            done += n;
        }
        Ok(())
    }

    /// Copies `buf.len()` bytes from user memory at `addr` into `buf`.
    ///
    /// # Errors
    /// `EFAULT` if any byte is outside the user half, unmapped, or not readable. Bytes before
    /// the failing page may have been copied.
    pub fn copy_in(&mut self, addr: Gva, buf: &mut [u8]) -> Result<(), MmError> {
        let len = buf.len() as u64;
        self.for_each_piece(addr, len, false, |mm, gpa, off, n| {
            mm.mem
                .read(gpa, &mut buf[off..off + n])
                .map_err(|e| MmError::Internal(e.to_string()))
        })
    }

    /// Copies `buf` into user memory at `addr`.
    ///
    /// # Errors
    /// `EFAULT` if any byte is outside the user half, unmapped, or not writable. Bytes before
    /// the failing page may have been written.
    pub fn copy_out(&mut self, addr: Gva, buf: &[u8]) -> Result<(), MmError> {
        let len = buf.len() as u64;
        self.for_each_piece(addr, len, true, |mm, gpa, off, n| {
            mm.mem
                .write(gpa, &buf[off..off + n])
                .map_err(|e| MmError::Internal(e.to_string()))
        })
    }

    /// Copies a NUL-terminated string from user memory, without the NUL.
    ///
    /// # Errors
    /// `EFAULT` if a byte before the NUL is not readable user memory;
    /// [`MmError::StringTooLong`] (`ENAMETOOLONG`) if no NUL appears in the first `max_len`
    /// bytes.
    pub fn copy_in_str(&mut self, addr: Gva, max_len: usize) -> Result<Vec<u8>, MmError> {
        let mut out = Vec::new();
        let mut page = [0u8; PAGE_SIZE as usize];
        let mut va = addr;
        while out.len() < max_len {
            let n = ((PAGE_SIZE - va.page_offset()) as usize).min(max_len - out.len());
            Self::check_user(va, n as u64)?;
            let gpa = self.user_byte(va, false)?;
            self.mem
                .read(gpa, &mut page[..n])
                .map_err(|e| MmError::Internal(e.to_string()))?;
            if let Some(nul) = page[..n].iter().position(|&b| b == 0) {
                out.extend_from_slice(&page[..nul]);
                return Ok(out);
            }
            out.extend_from_slice(&page[..n]);
            va = va.add(n as u64);
        }
        Err(MmError::StringTooLong(max_len))
    }

    /// Reads a plain-old-data value from user memory.
    ///
    /// # Errors
    /// As [`copy_in`](Self::copy_in).
    pub fn read_val<T: Pod>(&mut self, addr: Gva) -> Result<T, MmError> {
        let mut buf = vec![0u8; std::mem::size_of::<T>()];
        self.copy_in(addr, &mut buf)?;
        pod::from_bytes(&buf).ok_or_else(|| MmError::Internal("size mismatch".into()))
    }

    /// Writes a plain-old-data value to user memory.
    ///
    /// # Errors
    /// As [`copy_out`](Self::copy_out).
    pub fn write_val<T: Pod>(&mut self, addr: Gva, val: &T) -> Result<(), MmError> {
        self.copy_out(addr, pod::as_bytes(val))
    }

    /// Translates the user buffer `[addr, addr + len)` into guest-physical runs (contiguous
    /// frames merged), faulting pages in for `write` (the host will write guest memory, as
    /// for read(2)) or for reading. The runs stay valid while the caller holds the
    /// `MemoryManager` lock.
    ///
    /// # Errors
    /// `EFAULT` as for [`copy_in`](Self::copy_in) / [`copy_out`](Self::copy_out).
    pub fn user_ranges(
        &mut self,
        addr: Gva,
        len: u64,
        write: bool,
    ) -> Result<Vec<(Gpa, u64)>, MmError> {
        let mut runs: Vec<(Gpa, u64)> = Vec::new();
        self.for_each_piece(addr, len, write, |_, gpa, _, n| {
            match runs.last_mut() {
                Some((start, l)) if start.0 + *l == gpa.0 => *l += n as u64,
                _ => runs.push((gpa, n as u64)),
            }
            Ok(())
        })?;
        Ok(runs)
    }

    /// Faults in every page of `[addr, addr + len)` for `write` (MAP_POPULATE,
    /// MADV_POPULATE_*).
    ///
    /// # Errors
    /// `EFAULT` at the first page that cannot be faulted in.
    pub fn populate(&mut self, addr: Gva, len: u64, write: bool) -> Result<(), MmError> {
        Self::check_user(addr, len)?;
        let mut va = addr.page_down();
        while va.0 < addr.0 + len {
            let gpa = self.user_byte(va, write)?;
            if !self.mem.is_own(gpa) {
                // A shared object's page (or a page-cache page): mapping it is not enough for
                // it to exist, as Linux's populate makes it (mincore, the object's other
                // users see it); a read makes the host's page cache hold it.
                let mut byte = [0u8; 1];
                if let Err(e) = self.mem.read(gpa, &mut byte) {
                    tracing::debug!("populating shared page {va}: {e}");
                }
            }
            va = va.add(PAGE_SIZE);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::tests::{anon, mm, MIB};
    use crate::vma::Prot;

    #[test]
    fn copies_across_page_boundaries() {
        let mut m = mm(16 * MIB);
        let a = m.mmap(anon(0, 0x3000, Prot::RW, false)).unwrap();
        let data: Vec<u8> = (0..0x1800u32).map(|i| (i % 251) as u8).collect();
        m.copy_out(a.add(0xc00), &data).unwrap();
        let mut back = vec![0u8; data.len()];
        m.copy_in(a.add(0xc00), &mut back).unwrap();
        assert_eq!(back, data);
        // The bytes really are in the frames the page tables name.
        let (gpa, _) = m.page_tables().translate(a.add(0x1000)).unwrap();
        let mut b = [0u8; 1];
        m.memory().read(gpa, &mut b).unwrap();
        assert_eq!(b[0], data[0x400]);
        m.write_val(a.add(0x1ffc), &0x1122_3344_5566_7788u64)
            .unwrap();
        assert_eq!(
            m.read_val::<u64>(a.add(0x1ffc)).unwrap(),
            0x1122_3344_5566_7788
        );
        assert_eq!(
            m.read_val::<[u16; 2]>(a.add(0x1ffc)).unwrap(),
            [0x7788, 0x5566]
        );
        m.copy_in(a, &mut []).unwrap();
    }

    #[test]
    fn efault_on_kernel_unmapped_and_readonly() {
        let mut m = mm(16 * MIB);
        let a = m.mmap(anon(0x40_0000, 0x1000, Prot::READ, true)).unwrap();
        let mut b = [0u8; 8];
        m.copy_in(a, &mut b).unwrap();
        assert_eq!(m.copy_out(a, &b), Err(MmError::Fault(a)));
        // Crossing into the unmapped next page fails there.
        assert_eq!(
            m.copy_in(a.add(0xffc), &mut b),
            Err(MmError::Fault(a.add(0x1000)))
        );
        let k = layout::direct_map(Gpa(0x40_0000));
        assert_eq!(m.copy_in(k, &mut b), Err(MmError::Fault(k)));
        assert_eq!(m.copy_out(k, &b).unwrap_err().errno(), libc::EFAULT);
        let top = Gva(layout::USER_END.0 - 4);
        assert_eq!(m.copy_in(top, &mut b), Err(MmError::Fault(top)));
        assert_eq!(
            m.copy_in(Gva(u64::MAX - 2), &mut b).unwrap_err().errno(),
            libc::EFAULT
        );
        assert_eq!(
            m.user_ranges(Gva(0), u64::MAX, false).unwrap_err().errno(),
            libc::EFAULT
        );
        assert_eq!(m.copy_in(Gva(0), &mut b).unwrap_err().errno(), libc::EFAULT);
        let none = m.mmap(anon(0x50_0000, 0x1000, Prot::NONE, true)).unwrap();
        assert_eq!(m.copy_in(none, &mut b).unwrap_err().errno(), libc::EFAULT);
    }

    #[test]
    fn strings() {
        let mut m = mm(16 * MIB);
        let a = m.mmap(anon(0x40_0000, 0x2000, Prot::RW, true)).unwrap();
        m.copy_out(a.add(0xffd), b"hello\0world").unwrap();
        assert_eq!(m.copy_in_str(a.add(0xffd), 100).unwrap(), b"hello");
        assert_eq!(m.copy_in_str(a.add(0xffd), 6).unwrap(), b"hello");
        assert_eq!(
            m.copy_in_str(a.add(0xffd), 5),
            Err(MmError::StringTooLong(5))
        );
        assert_eq!(
            m.copy_in_str(a.add(0x1003), 0),
            Err(MmError::StringTooLong(0))
        );
        // No NUL before the end of the mapping.
        m.copy_out(a.add(0x1ff0), &[b'x'; 16]).unwrap();
        assert_eq!(
            m.copy_in_str(a.add(0x1ff0), 4096),
            Err(MmError::Fault(a.add(0x2000)))
        );
        let k = layout::direct_map(Gpa(0));
        assert_eq!(m.copy_in_str(k, 10).unwrap_err().errno(), libc::EFAULT);
    }

    #[test]
    fn user_ranges_merge_contiguous_frames() {
        let mut m = mm(16 * MIB);
        let a = m.mmap(anon(0x40_0000, 0x4000, Prot::RW, true)).unwrap();
        // One fault maps all four pages from consecutive fresh frames.
        let runs = m.user_ranges(a.add(0x10), 0x3000, true).unwrap();
        assert_eq!(runs.len(), 1);
        let (gpa, len) = runs[0];
        assert_eq!(len, 0x3000);
        assert_eq!(
            Some(gpa),
            m.page_tables().translate(a.add(0x10)).map(|t| t.0)
        );
        // Break contiguity: remap page 1 to another frame.
        m.madvise(a.add(0x1000), 0x1000, libc::MADV_DONTNEED)
            .unwrap();
        let _hog = m.allocator().alloc();
        m.copy_out(a.add(0x1000), &[1]).unwrap();
        let runs = m.user_ranges(a, 0x3000, false).unwrap();
        assert_eq!(
            runs.iter().map(|r| r.1).collect::<Vec<_>>(),
            vec![0x1000, 0x1000, 0x1000]
        );
        assert!(m.user_ranges(a, 0, false).unwrap().is_empty());
    }

    #[test]
    fn populate_maps_pages() {
        let mut m = mm(16 * MIB);
        let a = m.mmap(anon(0x40_0000, 0x40000, Prot::RW, true)).unwrap();
        m.populate(a, 0x40000, true).unwrap();
        assert_eq!(m.stats().mapped_pages, 0x40);
        assert_eq!(
            m.populate(a, 0x41000, false).unwrap_err().errno(),
            libc::EFAULT
        );
    }
}
