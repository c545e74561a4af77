//! A process's page tables (the memory manager's x86 tables in guest memory) turned into the
//! stub's own mappings: the commit of page-table changes on the trap platform.
//!
//! A commit reads the leaf entry of every changed page and turns runs of pages with
//! consecutive frames and equal rights into one `mmap` of the guest memfd, or of a shared
//! window's file (or an `munmap` for pages no longer present). Acting as the hardware walker
//! would, it sets the accessed bit of every page it maps, and the dirty bit of every page it
//! maps writable (the application may write it from then on without any further exit), so
//! that "clean" in the memory manager keeps meaning "never written".
//!
//! Once the space has been evicted (a hibernation dropped its pages), a page of guest memory
//! whose data is not in host memory is left out (neither mapped nor marked accessed) unless
//! it is the page the application faulted on: mapping it would read it back from the swap
//! file, and the neighbours a fault-around maps are often never touched. One the application
//! touches later faults, and the commit of that fault maps it. Woken sandboxes then hold what
//! their requests touched, as on KVM, not whole fault-around windows.

use platform::pagewalk::{self, ACCESSED, ADDR, DIRTY, NO_EXEC, USER, WRITABLE};
use platform::{Gpa, Gva, PlatformError, PAGE_SIZE};

use crate::process_stub::ProcessStub;
use crate::StubProcess;

/// A page as the stub must map it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Leaf {
    /// Not mapped (absent, or PROT_NONE).
    Absent,
    /// Frame `gpa` with `prot`.
    Mapped { gpa: u64, prot: i32 },
}

impl Leaf {
    /// The leaf if it maps a frame `keep` accepts, else `Absent`.
    fn filter(self, keep: impl Fn(u64) -> bool) -> Leaf {
        match self {
            Leaf::Mapped { gpa, .. } if keep(gpa) => self,
            _ => Leaf::Absent,
        }
    }
}

/// Residency of guest frames, read with one `mincore` for [`SPAN`] frames at a time (the
/// frames of a fault-around window are mostly near each other).
struct Residency<'a> {
    mem: &'a platform::GuestMemory,
    /// First frame of the span read, and its bytes.
    span: Option<(u64, [u8; SPAN])>,
}

/// Frames a [`Residency`] reads at once.
const SPAN: usize = 64;

impl Residency<'_> {
    fn is_resident(&mut self, gpa: u64) -> bool {
        let page = gpa / PAGE_SIZE;
        match self.span {
            Some((start, bits)) if (start..start + SPAN as u64).contains(&page) => {
                bits[(page - start) as usize] & 1 != 0
            }
            _ => {
                let mut bits = [0u8; SPAN];
                // A host error leaves every page reported resident: mapped as before.
                let _ = self.mem.residency(Gpa(page * PAGE_SIZE), &mut bits);
                self.span = Some((page, bits));
                bits[0] & 1 != 0
            }
        }
    }
}

/// Whether a run of `n` pages starting like `first` goes on with `next`.
fn continues(first: Leaf, next: Leaf, n: u64) -> bool {
    match (first, next) {
        (Leaf::Absent, Leaf::Absent) => true,
        (Leaf::Mapped { gpa: a, prot: p }, Leaf::Mapped { gpa: b, prot: q }) => {
            p == q && b == a + n * PAGE_SIZE
        }
        _ => false,
    }
}

impl ProcessStub {
    /// Reads the leaf entry for `va` from the memory manager's tables, and sets its accessed
    /// and (writable) dirty bits as the hardware would on the accesses the mapping allows;
    /// `None` (nothing set) for a page of guest memory left out because `skip(gpa)`.
    fn leaf(
        &self,
        root: Gpa,
        va: u64,
        skip: impl Fn(u64) -> bool,
    ) -> Result<Option<Leaf>, PlatformError> {
        let Some(entry) = pagewalk::walk(&self.mem, root, va).map_err(PlatformError::new)? else {
            return Ok(Some(Leaf::Absent));
        };
        if entry.page_size != PAGE_SIZE {
            return Err(PlatformError::msg(format!(
                "a large page in the user half at {va:#x}"
            )));
        }
        let e = entry.value;
        if e & USER == 0 {
            return Ok(Some(Leaf::Absent));
        }
        if skip(e & ADDR) {
            return Ok(None);
        }
        let want = ACCESSED | if e & WRITABLE != 0 { DIRTY } else { 0 };
        if e & want != want {
            self.mem
                .write_u64(entry.slot, e | want)
                .map_err(PlatformError::new)?;
        }
        let mut prot = libc::PROT_READ;
        if e & WRITABLE != 0 {
            prot |= libc::PROT_WRITE;
        }
        if e & NO_EXEC == 0 {
            prot |= libc::PROT_EXEC;
        }
        Ok(Some(Leaf::Mapped {
            gpa: e & ADDR,
            prot,
        }))
    }

    /// Makes the pages of `runs` in the stub what the tables say. `faulted` is the page the
    /// application faulted on, if any (mapped even if its data must be read back); with
    /// `resident`, the caller knows every page's data is in host memory (a REAP prefetch's)
    /// and none is checked.
    pub(crate) fn sync_pages(
        &self,
        stub: &StubProcess,
        root: Gpa,
        runs: &[platform::PageRun],
        faulted: Option<u64>,
        resident: bool,
    ) -> Result<(), PlatformError> {
        let mut maps = Vec::new();
        for r in runs {
            self.sync_run(stub, root, (r.first, r.count), faulted, resident, &mut maps)?;
        }
        // The runs of guest memory in as few mapper commands as the batch table allows (the
        // runs are disjoint: their order with the others' does not matter).
        stub.map_many(&maps).map_err(PlatformError::new)
    }

    /// [`ProcessStub::sync_pages`] for `count` pages from `first`, the runs of guest memory
    /// added to `maps`.
    fn sync_run(
        &self,
        stub: &StubProcess,
        root: Gpa,
        (first, count): (Gva, u32),
        faulted: Option<u64>,
        resident: bool,
        maps: &mut Vec<(u64, u64, u64, i32)>,
    ) -> Result<(), PlatformError> {
        let evicted = self.evicted() && !resident;
        let residency = std::cell::RefCell::new(Residency {
            mem: &self.mem,
            span: None,
        });
        // A run being built: start address, pages, and what they map.
        let mut run: Option<(u64, u64, Leaf)> = None;
        for i in 0..u64::from(count) {
            let va = first.raw() + i * PAGE_SIZE;
            let skip = |gpa: u64| {
                evicted
                    && Some(va) != faulted
                    && self.mem.is_own(Gpa(gpa))
                    && !residency.borrow_mut().is_resident(gpa)
            };
            let Some(leaf) = self.leaf(root, va, skip)? else {
                if let Some(done) = run.take() {
                    self.apply(stub, done, maps)?;
                }
                continue;
            };
            if let Leaf::Mapped { gpa, .. } = leaf.filter(|g| self.mem.is_own(Gpa(g))) {
                // The page must be in the memfd before the stub maps it: a hole would read as
                // zero there (no userfaultfd in the stub), so read it once through the
                // holder's mapping, which the pager serves after a hibernation. (A window's
                // pages are its file's.)
                let mut b = [0u8; 1];
                self.mem
                    .read(Gpa(gpa), &mut b)
                    .map_err(PlatformError::new)?;
            }
            run = match run {
                Some((start, n, l)) if continues(l, leaf, n) => Some((start, n + 1, l)),
                Some(done) => {
                    self.apply(stub, done, maps)?;
                    Some((va, 1, leaf))
                }
                None => Some((va, 1, leaf)),
            };
        }
        if let Some(done) = run {
            self.apply(stub, done, maps)?;
        }
        Ok(())
    }

    /// Makes a run of pages in the stub what they map: the guest memfd's pages (added to
    /// `maps`, for one batch), or a shared window's file (attached to the stub the first
    /// time), or nothing.
    fn apply(
        &self,
        stub: &StubProcess,
        (start, n, leaf): (u64, u64, Leaf),
        maps: &mut Vec<(u64, u64, u64, i32)>,
    ) -> Result<(), PlatformError> {
        let len = n * PAGE_SIZE;
        match leaf {
            Leaf::Absent => stub.unmap(start, len),
            Leaf::Mapped { gpa, prot } if self.mem.is_own(Gpa(gpa)) => {
                maps.push((start, len, gpa, prot));
                Ok(())
            }
            Leaf::Mapped { gpa, prot } => {
                let (slot, file_offset) = self
                    .window_at(stub, Gpa(gpa), len)
                    .map_err(PlatformError::new)?;
                stub.map_window(slot, start, len, file_offset, prot)
            }
        }
        .map_err(PlatformError::new)
    }
}
