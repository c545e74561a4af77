//! The file part of a REAP working set: the page-cache pages (program text, libraries'
//! read-only data: the shared windows of `platform::shared`) that a recorded wake touched,
//! read ahead at the next prefetching wake.
//!
//! Those pages are not guest memory: the guest maps them straight from the host's page cache,
//! so no userfaultfd event sees them and the REAP file does not hold them. When the page cache
//! has lost them (other sandboxes, memory pressure, a host that dropped its caches), each one
//! otherwise comes back from the disk on its own, 4 KiB at a time, at the guest's first touch
//! (about 80 µs each here at queue depth 1). Which ones a wake touched is read from the guest's
//! page tables (their accessed bits, cleared at every deflate: `mm`'s
//! `take_touched_window_pages`); at the next prefetching wake they are read ahead in runs:
//! `POSIX_FADV_WILLNEED` on every run first (the reads go to the disk together, at depth),
//! then `MADV_POPULATE_READ` on the runtime's mapping of them (waits for them, and maps them,
//! so that the hypervisor finds them at the guest's first touch).

use std::os::fd::AsRawFd;
use std::sync::Arc;

use platform::{Gpa, GuestMemory, SharedWindow, PAGE_SIZE};

/// Pages of gap merged into a run (reading them costs less than another request).
const MERGE_GAP_PAGES: u64 = 8;

/// A run of pages of one window.
pub struct FileRun {
    window: Arc<SharedWindow>,
    /// Offset of the run's first byte in the window.
    start: u64,
    len: u64,
}

impl FileRun {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the run is empty (never, as made by [`runs`]).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The runs of `pages` (guest-physical addresses of window pages, sorted), gaps of up to
/// [`MERGE_GAP_PAGES`] included; pages of no window attached to `mem` are left out.
pub fn runs(mem: &GuestMemory, pages: &[Gpa]) -> Vec<FileRun> {
    let windows = mem.windows();
    let located = pages.iter().filter_map(|&gpa| {
        windows
            .iter()
            .position(|w| gpa.raw() >= w.gpa().raw() && gpa.raw() - w.gpa().raw() < w.size())
            .map(|i| (i, gpa.raw() - windows[i].gpa().raw()))
    });
    merge(located)
        .into_iter()
        .map(|(i, start, len)| FileRun {
            window: windows[i].clone(),
            start,
            len,
        })
        .collect()
}

/// Runs `(window, start, len)` of pages given as `(window, offset)` in order: consecutive
/// pages of one window, and gaps of up to [`MERGE_GAP_PAGES`] between them, make one run.
fn merge(pages: impl Iterator<Item = (usize, u64)>) -> Vec<(usize, u64, u64)> {
    let mut out: Vec<(usize, u64, u64)> = Vec::new();
    for (w, off) in pages {
        if let Some((lw, start, len)) = out.last_mut() {
            let end = *start + *len;
            if *lw == w && off >= end && off - end <= MERGE_GAP_PAGES * PAGE_SIZE {
                *len = off + PAGE_SIZE - *start;
                continue;
            }
            if *lw == w && off + PAGE_SIZE <= end {
                continue; // a page already in the run
            }
        }
        out.push((w, off, PAGE_SIZE));
    }
    out
}

/// Starts reading every run from its file (`POSIX_FADV_WILLNEED`, which returns at once).
pub fn advise(runs: &[FileRun]) {
    for r in runs {
        let (fd, base) = r.window.file();
        // SAFETY: plain syscall on a descriptor the window owns.
        let e = unsafe {
            libc::posix_fadvise(
                fd.as_raw_fd(),
                (base + r.start) as libc::off_t,
                r.len as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            )
        };
        if e != 0 {
            tracing::debug!(
                "posix_fadvise(WILLNEED): {}",
                std::io::Error::from_raw_os_error(e)
            );
        }
    }
}

/// Waits for every run's pages and maps them in the runtime's mapping of the window
/// (`MADV_POPULATE_READ`). Returns the bytes populated.
pub fn populate(runs: &[FileRun]) -> u64 {
    let mut bytes = 0;
    for r in runs {
        // SAFETY: a range inside the window's own read-only mapping; populating it only reads
        // the file (a range past the end of a truncated file fails with EFAULT, ignored).
        let rc = unsafe {
            libc::madvise(
                r.window.host_base().add(r.start as usize).cast(),
                r.len as usize,
                libc::MADV_POPULATE_READ,
            )
        };
        if rc == 0 {
            bytes += r.len;
        } else {
            tracing::debug!(
                "madvise(MADV_POPULATE_READ): {}",
                std::io::Error::last_os_error()
            );
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = PAGE_SIZE;

    #[test]
    fn pages_merge_into_runs_across_small_gaps_only() {
        let pages = [
            (0, 0),
            (0, P),
            (0, 2 * P),
            // a gap of 8 pages: same run
            (0, 11 * P),
            // a gap of 9 pages: a new run
            (0, 21 * P),
            // another window at the same offset: a new run
            (1, 21 * P),
            (1, 22 * P),
            // a repeated page changes nothing
            (1, 22 * P),
        ];
        assert_eq!(
            merge(pages.into_iter()),
            vec![(0, 0, 12 * P), (0, 21 * P, P), (1, 21 * P, 2 * P)]
        );
        assert!(merge(std::iter::empty()).is_empty());
    }
}
