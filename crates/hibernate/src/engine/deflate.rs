//! The deflate: every family's memory (`families.rs`) written to its swap layer (resident,
//! non-zero pages; clean file pages dropped, not written) and the REAP working set, shared
//! memory likewise, then the pages given back to the host. A failed deflate removes what it
//! wrote and drops nothing.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use kernel::task::ParkedSandbox;
use platform::{Gpa, GuestMemory, PAGE_SIZE};

use crate::pagestate::{PageIdx, PageState};
use crate::state::State;
use crate::swapfile::{SwapReader, SwapWriter};

use super::EngineError;
use super::{DeflateReport, Hibernator, ProcessDeflate, ProcessMemory, SharedSwap, BATCH_PAGES};

impl Hibernator {
    /// Writes the sandbox's memory out and drops it (see the module doc): every family's
    /// (the processes that share one memory: `families.rs`), one after the other. A failure
    /// stops there: the families already deflated stay so (their pages come back on demand,
    /// nothing is lost), the failing one stays as it was.
    pub(super) fn deflate(&mut self, sb: &ParkedSandbox<'_>) -> Result<DeflateReport, EngineError> {
        let start = Instant::now();
        let first = *self.first_pid.get_or_insert(sb.pid());
        let live = sb.processes();
        let families = super::families::of(&live);
        // With the quota in sight, every process compacts its swap: the files then hold no
        // more than the live pages.
        let mut compact = self.shared.compact_next.swap(false, Ordering::SeqCst);
        if let Some(quota) = self.swap_quota {
            let bound = Self::deflate_bound(&families, sb.shared_memory());
            if bound > quota {
                return Err(EngineError::QuotaExceeded { quota, bound });
            }
            let held: u64 = self
                .processes
                .values()
                .map(|pm| {
                    pm.pager
                        .read()
                        .unwrap_or_else(|e| e.into_inner())
                        .swap
                        .bytes()
                })
                .sum();
            compact |= bound.saturating_add(held) > quota;
        }
        // Each family's kept memory under its pid now; the memories of processes gone since
        // the last deflate (or replaced by execve) lose their files.
        self.processes = super::families::rekey(std::mem::take(&mut self.processes), &families);
        let mut total = DeflateReport::default();
        let mut figures = Vec::new();
        for family in &families {
            let pid = family.pid();
            let mut pm = match self.processes.remove(&pid) {
                Some(pm) => pm,
                None => {
                    let mem = match self.first_mem.take() {
                        Some(m) if family.contains(first) && Arc::ptr_eq(&m, family.mem()) => m,
                        _ => family.mem().clone(),
                    };
                    let prefix =
                        super::families::fresh_prefix(family, first, self.processes.values())
                            .ok_or_else(|| {
                                EngineError::Inconsistent(
                                    "every file name of the family is taken".into(),
                                )
                                .in_process(pid)
                            })?;
                    ProcessMemory::new(mem, prefix, self.mode)?
                }
            };
            let r = self.deflate_process(&mut pm, family, compact);
            self.processes.insert(pid, pm);
            let r = r.map_err(|e| e.in_process(pid))?;
            total.free_pages += r.free_pages;
            total.file_pages += r.file_pages;
            total.zero_pages += r.zero_pages;
            total.written_pages += r.written_pages;
            total.clean_pages += r.clean_pages;
            total.carried_pages += r.carried_pages;
            total.swap_bytes += r.swap_bytes;
            total.swap_written_bytes += r.swap_written_bytes;
            total.swap_layers += r.swap_layers;
            total.compacted |= r.compacted;
            total.reap_bytes += r.reap_bytes;
            figures.push(ProcessDeflate {
                pid,
                sharing: family.others(),
                report: r,
            });
        }
        let shared_bytes = self
            .deflate_shared(sb.shared_memory())
            .map_err(|e| EngineError::Shared(Box::new(e)))?;
        total.swap_bytes += shared_bytes;
        total.swap_written_bytes += shared_bytes;
        total.took_us = start.elapsed().as_micros() as u64;
        self.shared
            .metrics
            .record_deflate(start.elapsed(), total.swap_bytes, total.reap_bytes);
        *self
            .shared
            .processes
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = figures;
        self.shared.transition(State::Hibernated);
        tracing::info!(?total, "deflated");
        Ok(total)
    }

    /// Drops the runtime's mappings of shared file pages; writes the resident non-zero pages
    /// of the sandbox's anonymous shared memory to `shm.N`, then punches them out of their
    /// memfds (every VM mapping them sees the hole
    /// until the wake restores it; no thread runs meanwhile). Returns the bytes written.
    pub(super) fn deflate_shared(&mut self, space: &mm::SharedSpace) -> Result<u64, EngineError> {
        // Shared file mappings: their pages are the file's (page cache), written back by the
        // host; the runtime's mapping of them is dropped, and a touch after the wake maps
        // them again from the page cache or the disk.
        for w in space.file_windows() {
            // SAFETY: the window's own mapping; dropping a shared file mapping's pages keeps
            // their data in the file (dirty ones are written back by the host). MADV_COLD
            // first moves its page-cache pages to the inactive list: they stay cached for the
            // other sandboxes of the image (which reactivate what they use) but no longer
            // count in this one's working set (a memory cgroup's `usage - inactive_file`).
            unsafe {
                libc::madvise(w.host_base().cast(), w.size() as usize, libc::MADV_COLD);
                libc::madvise(w.host_base().cast(), w.size() as usize, libc::MADV_DONTNEED);
            }
        }
        let windows = space.anonymous_windows();
        if windows.is_empty() {
            return Ok(0);
        }
        let generation = self
            .processes
            .values()
            .map(|p| p.generation)
            .max()
            .unwrap_or(0);
        let path = self.dir.join(format!("shm.{generation}"));
        let _ = crate::swapfile::remove(&path);
        let base = platform::SHARED_GPA_BASE.raw();
        let span = (platform::SHARED_GPA_END.raw() - base) / PAGE_SIZE;
        let mut writer = SwapWriter::create(&path, span).map_err(EngineError::page_file(&path))?;
        let mut idx: Vec<u64> = Vec::with_capacity(BATCH_PAGES);
        let mut data = vec![0u8; BATCH_PAGES * PAGE_SIZE as usize];
        let mut sink = Vec::new();
        let written = (|| -> Result<(), EngineError> {
            for w in &windows {
                let pages = (w.size() / PAGE_SIZE) as usize;
                let mut resident = vec![0u8; pages];
                // SAFETY: the range is exactly the window's host mapping; one byte a page.
                let r = unsafe {
                    libc::mincore(
                        w.host_base().cast(),
                        w.size() as usize,
                        resident.as_mut_ptr(),
                    )
                };
                if r != 0 {
                    return Err(EngineError::Host {
                        op: "mincore",
                        source: std::io::Error::last_os_error(),
                    });
                }
                for (i, r) in resident.iter().enumerate() {
                    if r & 1 == 0 {
                        continue;
                    }
                    let gpa = w.gpa().raw() + i as u64 * PAGE_SIZE;
                    let src = w.ptr(Gpa(gpa), PAGE_SIZE).ok_or_else(|| {
                        EngineError::Inconsistent("a window page out of range".into())
                    })?;
                    let at = idx.len() * PAGE_SIZE as usize;
                    // SAFETY: `src` covers one page of the window's mapping; no vCPU runs.
                    let page = unsafe { std::slice::from_raw_parts(src, PAGE_SIZE as usize) };
                    if page.iter().all(|&b| b == 0) {
                        continue;
                    }
                    data[at..at + PAGE_SIZE as usize].copy_from_slice(page);
                    idx.push((gpa - base) / PAGE_SIZE);
                    if idx.len() == BATCH_PAGES {
                        write_batch(
                            |p| writer.write_batch(p),
                            &mut idx,
                            &data,
                            |s| PageState::Swapped { slot: s },
                            &mut sink,
                        )
                        .map_err(EngineError::page_file(&path))?;
                    }
                }
            }
            write_batch(
                |p| writer.write_batch(p),
                &mut idx,
                &data,
                |s| PageState::Swapped { slot: s },
                &mut sink,
            )
            .map_err(EngineError::page_file(&path))?;
            Ok(())
        })();
        let bytes = u64::from(writer.pages_written()) * PAGE_SIZE;
        let finished = written.and_then(|()| {
            writer
                .finish()
                .map(|_| ())
                .map_err(EngineError::page_file(&path))
        });
        let reader =
            finished.and_then(|()| SwapReader::open(&path).map_err(EngineError::page_file(&path)));
        let reader = match reader {
            Ok(r) => r,
            Err(e) => {
                let _ = crate::swapfile::remove(&path);
                return Err(e);
            }
        };
        // Nothing is lost past this point: drop the memory.
        for w in &windows {
            let (file, offset) = w.file();
            // SAFETY: fallocate on the memfd the window maps, over the window's own range.
            let r = unsafe {
                libc::fallocate(
                    std::os::fd::AsRawFd::as_raw_fd(&**file),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    offset as libc::off_t,
                    w.size() as libc::off_t,
                )
            };
            if r != 0 {
                tracing::warn!(
                    "punching shared memory: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
        self.shared_swap = Some(SharedSwap { reader, windows });
        Ok(bytes)
    }
}

/// Writes the batch `idx` (guest pages; their bytes packed in `data`) with `write`, records
/// each page's new state (`state(slot)`) in `out`, and empties the batch.
pub(super) fn write_batch<E>(
    write: impl FnOnce(&[(PageIdx, &[u8])]) -> Result<std::ops::Range<u32>, E>,
    idx: &mut Vec<u64>,
    data: &[u8],
    state: impl Fn(u32) -> PageState,
    out: &mut Vec<(u64, PageState)>,
) -> Result<(), E> {
    if idx.is_empty() {
        return Ok(());
    }
    let page = PAGE_SIZE as usize;
    let pages: Vec<(PageIdx, &[u8])> = idx
        .iter()
        .enumerate()
        .map(|(i, &p)| (PageIdx(p), &data[i * page..(i + 1) * page]))
        .collect();
    let slots = write(&pages)?;
    for (i, &p) in idx.iter().enumerate() {
        out.push((p, state(slots.start + i as u32)));
    }
    idx.clear();
    Ok(())
}

/// MADV_DONTNEED over the given pages, coalesced into runs.
pub(super) fn discard_pages(mem: &GuestMemory, pages: impl Iterator<Item = u64>) {
    let mut run: Option<(u64, u64)> = None;
    for p in pages {
        run = match run {
            Some((s, n)) if s + n == p => Some((s, n + 1)),
            Some((s, n)) => {
                let _ = mem.discard(Gpa(s * PAGE_SIZE), n * PAGE_SIZE);
                Some((p, 1))
            }
            None => Some((p, 1)),
        };
    }
    if let Some((s, n)) = run {
        let _ = mem.discard(Gpa(s * PAGE_SIZE), n * PAGE_SIZE);
    }
}
