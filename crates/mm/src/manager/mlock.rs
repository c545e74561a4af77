//! Memory locking: which mappings are locked (mlock(2), mlock2(2), munlock(2), mlockall(2),
//! munlockall(2), `MAP_LOCKED`), as Linux's `mm/mlock.c` records it in `VM_LOCKED` and
//! `VM_LOCKONFAULT` and in `mm->def_flags` for MCL_FUTURE. `/proc/PID/status`' `VmLck` and
//! `/proc/PID/smaps`' `Locked` are read from here.
//!
//! While the sandbox runs nothing is ever paged out, so a lock changes only what is faulted in
//! and what /proc reports. Hibernation writes every page to the sandbox's swap file, locked or
//! not (a documented gap: Linux never swaps a locked page out).

use platform::{layout, Gva};

use super::{MemoryManager, MmError};
use crate::vma::{Prot, VmLock};

impl MemoryManager {
    /// Sets the lock of `[start, end)` (page-aligned): [`VmLock::Locked`] or
    /// [`VmLock::OnFault`] for mlock(2) and mlock2(2), [`VmLock::None`] for munlock(2).
    /// Nothing is faulted in here ([`populate_locked`](Self::populate_locked) does it).
    ///
    /// # Errors
    /// [`MmError::InvalidArgument`] for an unaligned or empty range; [`MmError::NoMemory`]
    /// when part of the range is not mapped or it leaves the user half ("Some of the
    /// specified address range does not correspond to mapped pages"); then nothing changes.
    pub fn set_lock(&mut self, start: Gva, end: Gva, lock: VmLock) -> Result<(), MmError> {
        if !start.is_page_aligned() || !end.is_page_aligned() || start >= end {
            return Err(MmError::InvalidArgument("bad lock range"));
        }
        if end > layout::USER_END || !self.vmas.covers(start, end) {
            return Err(MmError::NoMemory("range not fully mapped"));
        }
        self.vmas
            .set_lock(start, end, lock)
            .map_err(|e| MmError::Internal(e.to_string()))
    }

    /// mlockall(2) and munlockall(2), as Linux's `apply_mlockall_flags`: every mapping gets
    /// the lock `current` (`None`: mappings keep theirs, MCL_FUTURE alone), and mappings made
    /// from now on get `future` (MCL_FUTURE; [`VmLock::None`] without it).
    pub fn lock_all(&mut self, current: Option<VmLock>, future: VmLock) {
        self.def_lock = future;
        let Some(lock) = current else {
            return;
        };
        let ranges: Vec<(Gva, Gva)> = self
            .vmas
            .iter()
            .filter(|v| v.lock != lock)
            .map(|v| (v.start, v.end))
            .collect();
        for (start, end) in ranges {
            // A VMA's own range, found just above: page-aligned and mapped.
            let _ = self.vmas.set_lock(start, end, lock);
        }
    }

    /// The lock new mappings get (MCL_FUTURE).
    pub fn default_lock(&self) -> VmLock {
        self.def_lock
    }

    /// Bytes of address space locked (Linux's `mm->locked_vm`, `VmLck`): the length of every
    /// locked mapping, faulted in or not.
    pub fn locked_bytes(&self) -> u64 {
        self.vmas
            .iter()
            .filter(|v| v.lock.is_locked())
            .map(|v| v.len())
            .sum()
    }

    /// Faults in the pages of `[start, end)` that lie in mappings locked with
    /// [`VmLock::Locked`] and accessible (Linux's `__mm_populate` after mlock): a private
    /// writable mapping for writing (its copy-on-write broken now), any other for reading.
    ///
    /// # Errors
    /// What faulting a page in returns: [`MmError::Fault`] for a page that cannot be
    /// (beyond the end of its file), [`MmError::NoMemory`] when memory runs out.
    pub fn populate_locked(&mut self, start: Gva, end: Gva) -> Result<(), MmError> {
        let parts: Vec<(Gva, u64, bool)> = self
            .vmas
            .overlapping(start, end)
            .filter(|v| v.lock == VmLock::Locked && v.prot.is_accessible())
            .map(|v| {
                let from = v.start.max(start);
                let to = v.end.min(end);
                let write = v.prot.contains(Prot::WRITE) && !v.kind.is_shared();
                (from, to.raw() - from.raw(), write)
            })
            .collect();
        for (at, len, write) in parts {
            self.populate(at, len, write)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::manager::tests::{anon, mm, MIB};
    use crate::vma::{Prot, VmLock};
    use platform::{Gva, PAGE_SIZE};

    #[test]
    fn locks_count_populate_and_follow_mlockall() {
        let mut m = mm(16 * MIB);
        let a = m.mmap(anon(0, 8 * PAGE_SIZE, Prot::RW, false)).unwrap();
        let end = a.add(8 * PAGE_SIZE);
        assert_eq!(m.locked_bytes(), 0);
        // Locking a range twice counts it once.
        m.set_lock(a, a.add(2 * PAGE_SIZE), VmLock::Locked).unwrap();
        m.set_lock(a, a.add(2 * PAGE_SIZE), VmLock::Locked).unwrap();
        assert_eq!(m.locked_bytes(), 2 * PAGE_SIZE);
        m.populate_locked(a, end).unwrap();
        assert_eq!(m.resident_pages(a, end).len(), 2);
        // On fault: counted, not faulted in.
        m.set_lock(a.add(4 * PAGE_SIZE), end, VmLock::OnFault)
            .unwrap();
        m.populate_locked(a, end).unwrap();
        assert_eq!(m.locked_bytes(), 6 * PAGE_SIZE);
        assert_eq!(m.resident_pages(a, end).len(), 2);
        // A hole is ENOMEM and changes nothing.
        assert_eq!(
            m.set_lock(a, end.add(PAGE_SIZE), VmLock::None)
                .map_err(|e| e.errno()),
            Err(libc::ENOMEM)
        );
        assert_eq!(m.locked_bytes(), 6 * PAGE_SIZE);
        m.set_lock(a, end, VmLock::None).unwrap();
        assert_eq!(m.locked_bytes(), 0);
        // MCL_FUTURE alone: later mappings locked, current ones not.
        m.lock_all(None, VmLock::Locked);
        assert_eq!(m.locked_bytes(), 0);
        let b = m.mmap(anon(0, 2 * PAGE_SIZE, Prot::RW, false)).unwrap();
        assert_eq!(m.find_vma(b).unwrap().lock, VmLock::Locked);
        assert_eq!(m.locked_bytes(), 2 * PAGE_SIZE);
        // A fork inherits neither.
        let child = m.fork_into(mm(16 * MIB).memory().clone()).unwrap();
        assert_eq!(child.locked_bytes(), 0);
        assert_eq!(child.default_lock(), VmLock::None);
        // MCL_CURRENT: every mapping; munlockall: none, and no more for later ones.
        m.lock_all(Some(VmLock::Locked), VmLock::None);
        assert_eq!(m.locked_bytes(), 10 * PAGE_SIZE);
        m.lock_all(Some(VmLock::None), VmLock::None);
        assert_eq!(m.locked_bytes(), 0);
        let c = m.mmap(anon(0, PAGE_SIZE, Prot::RW, false)).unwrap();
        assert_eq!(m.find_vma(c).unwrap().lock, VmLock::None);
        assert_eq!(
            m.set_lock(Gva(0x1001), Gva(0x3000), VmLock::Locked)
                .map_err(|e| e.errno()),
            Err(libc::EINVAL)
        );
    }
}
