//! mincore(2)'s answer for the pages of a file or a shared object: whether the host's page
//! cache holds them, as Linux's `mincore_page` looks a page up in the file's cache. The pages
//! of a `MAP_SHARED` mapping are the object's, whoever touched them (another process of the
//! sandbox, read(2)); fault-around entries of this VM say nothing about them.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use platform::{Gva, PAGE_SIZE};

use crate::manager::MemoryManager;
use crate::vma::VmaKind;

/// Whether each of the `pages` pages of the file at `fd` from byte `offset` (page-aligned) is
/// in the host's page cache, by host mincore(2) on a fleeting `PROT_NONE` mapping of them
/// (pages past the end of the file are not).
///
/// # Errors
/// The host's errno (mmap, mincore).
fn cached(fd: BorrowedFd<'_>, offset: u64, pages: usize) -> io::Result<Vec<bool>> {
    let len = pages * PAGE_SIZE as usize;
    if len == 0 {
        return Ok(Vec::new());
    }
    let off =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    // SAFETY: a new mapping at an address the host picks, never touched (PROT_NONE): it
    // cannot alias anything of this process.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            off,
        )
    };
    if at == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let mut vec = vec![0u8; pages];
    // SAFETY: `at` is the mapping of `len` bytes made above; `vec` has one byte per page.
    let rc = unsafe { libc::mincore(at, len, vec.as_mut_ptr()) };
    let err = io::Error::last_os_error();
    // SAFETY: unmapping exactly the mapping made above, which nothing else refers to.
    unsafe { libc::munmap(at, len) };
    if rc != 0 {
        return Err(err);
    }
    Ok(vec.into_iter().map(|b| b & 1 != 0).collect())
}

impl MemoryManager {
    /// The pages of `[start, end)` (page-aligned) that are resident for mincore(2): for a
    /// shared mapping, the object's pages in the host's page cache; for a private file
    /// mapping, the pages mapped present (the VM's copies, page-cache pages) and those the
    /// file's cache holds; for anonymous memory, the pages mapped present now (a page not yet
    /// faulted in, or written to the swap file by a deflate, is not).
    pub fn resident_pages(&self, start: Gva, end: Gva) -> Vec<Gva> {
        let mut out: Vec<Gva> = Vec::new();
        for v in self.vmas.overlapping(start, end) {
            let (from, to) = (v.start.max(start), v.end.min(end));
            let pages = ((to.0 - from.0) / PAGE_SIZE) as usize;
            let in_cache = |fd: BorrowedFd<'_>| {
                let offset = v.file_offset(from).unwrap_or(0);
                cached(fd, offset, pages).unwrap_or_else(|e| {
                    tracing::debug!("mincore of a file's pages: {e}");
                    vec![false; pages]
                })
            };
            let cache = match &v.kind {
                VmaKind::Shared { object, .. } => {
                    let cache = in_cache(object.fd());
                    out.extend(
                        (0..pages)
                            .filter(|&i| cache[i])
                            .map(|i| Gva(from.0 + i as u64 * PAGE_SIZE)),
                    );
                    continue;
                }
                VmaKind::File { file, .. } => {
                    use std::os::fd::AsFd;
                    in_cache(file.as_fd())
                }
                VmaKind::Anon => vec![false; pages],
            };
            let mut resident = cache;
            for (va, _, flags) in self.pt.frames_in(from, to) {
                if flags.contains(crate::pagetable::PteFlags::PRESENT) {
                    resident[((va.0 - from.0) / PAGE_SIZE) as usize] = true;
                }
            }
            out.extend(
                (0..pages)
                    .filter(|&i| resident[i])
                    .map(|i| Gva(from.0 + i as u64 * PAGE_SIZE)),
            );
        }
        out
    }
}
