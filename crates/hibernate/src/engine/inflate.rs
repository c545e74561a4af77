//! The inflate after a wake: a REAP prefetch of the recorded working set (or nothing: pages
//! fault back through the pager), the shared memory put back, the page tables prefaulted.

use std::time::Instant;

use kernel::task::ParkedSandbox;
use platform::{Gpa, PAGE_SIZE};

use crate::pager::{self};
use crate::pagestate::{PageIdx, PageState};

use super::{EngineError, Hibernator, ProcessMemory, SharedSwap};

impl Hibernator {
    /// After the wake trigger, before the task resumes: prefetch each process's REAP file
    /// (if this wake uses it), and start recording (if this wake records).
    pub(super) fn inflate(&mut self, woke: Instant) {
        let error_file = self.dir.join("error");
        if let Some(sw) = self.shared_swap.take() {
            if let Err(e) = restore_shared(&sw) {
                pager::fatal(&error_file, &format!("shared memory swap unreadable: {e}"));
            }
            let _ = sw.reader.remove();
        }
        if self.take_early_prefetch() {
            return;
        }
        if let Some((bytes, file_bytes)) =
            inflate_processes(self.processes.values_mut(), &error_file)
        {
            self.shared
                .metrics
                .record_prefetch(bytes, file_bytes, woke.elapsed());
        }
    }

    /// At the first wake of a restored sandbox: maps again, in each process, the file-window
    /// pages its checkpoint had mapped (program text, libraries: `mm`'s
    /// `prefault_file_pages`), so that it takes no fault per page of them when it runs again;
    /// where the application's process maps pages itself (trap), it is told too. After the
    /// inflate: the page tables live in guest memory, which a restore brings back lazily.
    pub(super) fn map_file_pages_ahead(&self, sb: &ParkedSandbox<'_>) {
        for (pid, res) in sb.processes() {
            let mut mm = res.mm.lock().unwrap_or_else(|e| e.into_inner());
            if mm.prefault_file_pages() == 0 || res.space.holder_sees_writes() {
                continue;
            }
            let own = |pfn: u64| sb_mem_is_own(&mm, pfn);
            let pages = mm.present_pages_of(|pfn| !own(pfn));
            if let Err(e) = res.space.prefault(mm.cr3(), &pages) {
                tracing::warn!(pid, "mapping the program's file pages ahead: {e}");
            }
        }
    }

    /// After a REAP prefetch: has each process's platform map the pages of the prefetched set
    /// (its family's) ahead (on the trap platform the application's process maps guest pages itself, and
    /// would otherwise take a fault for every run of them it touches).
    pub(super) fn prefault(&self, sb: &ParkedSandbox<'_>) {
        for (pid, res) in sb.processes() {
            let Some(pm) = self.memory_of(&res.mem) else {
                continue;
            };
            if !pm.reap_wake || res.space.holder_sees_writes() {
                // Nothing to map ahead where the application reaches guest memory through the
                // runtime's own mapping (KVM: the prefetch installed the pages there).
                continue;
            }
            let set: std::collections::HashSet<u64> = pm
                .reap_set
                .iter()
                .map(|p| p.0)
                .chain(pm.reap_files.iter().map(|g| g.raw() / PAGE_SIZE))
                .collect();
            let mm = res.mm.lock().unwrap_or_else(|e| e.into_inner());
            let pages = mm.present_pages_of(|frame| set.contains(&frame));
            if let Err(e) = res.space.prefault(mm.cr3(), &pages) {
                tracing::warn!(pid, "mapping the prefetched pages ahead: {e}");
            }
        }
    }
}

/// Whether guest-physical page `pfn` is the VM's own memory (not a file window).
fn sb_mem_is_own(mm: &mm::MemoryManager, pfn: u64) -> bool {
    mm.memory().is_own(platform::Gpa(pfn * PAGE_SIZE))
}

/// Puts the deflated shared memory back (every page read and verified) before anything runs.
pub(super) fn restore_shared(sw: &SharedSwap) -> Result<(), EngineError> {
    let base = platform::SHARED_GPA_BASE.raw();
    let mut buf = [0u8; PAGE_SIZE as usize];
    for e in sw.reader.index().entries() {
        let gpa = Gpa(base + e.page().0 * PAGE_SIZE);
        let dst = sw
            .windows
            .iter()
            .find_map(|w| w.ptr(gpa, PAGE_SIZE))
            .ok_or_else(|| EngineError::Inconsistent(format!("no window holds {gpa}")))?;
        sw.reader
            .read_page(e.page(), &mut buf)
            .map_err(EngineError::ReadBack)?;
        // SAFETY: `dst` covers one page of a window's writable mapping; no vCPU runs yet.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), dst, PAGE_SIZE as usize) };
    }
    Ok(())
}

/// Each process's part of a wake ([`inflate_process`]): the bytes prefetched of memory and
/// of files in all, or `None` when no process prefetched (each records its working set).
pub(super) fn inflate_processes<'a>(
    processes: impl Iterator<Item = &'a mut ProcessMemory>,
    error_file: &std::path::Path,
) -> Option<(u64, u64)> {
    let mut total = None;
    for pm in processes {
        if let Some((b, f)) = inflate_process(pm, error_file) {
            let (bytes, file_bytes) = total.get_or_insert((0, 0));
            *bytes += b;
            *file_bytes += f;
        }
    }
    total
}

/// One process's part of a wake: prefetches its REAP file and its set's file pages and
/// returns the bytes of each, or starts recording its working set (None).
fn inflate_process(pm: &mut ProcessMemory, error_file: &std::path::Path) -> Option<(u64, u64)> {
    let mut pager = pm.pager.write().unwrap_or_else(|e| e.into_inner());
    pager.recorder.clear();
    pm.reap_wake = false;
    if pm.record_next {
        pager.recorder.start();
        pager.reap_wake = false;
        return None;
    }
    let uffd = pm.uffd.clone()?;
    let base = pm.mem.host_base() as u64;
    let state = &mut *pager;
    let Some(reader) = state.reap.as_ref() else {
        // A working set without a REAP file (a layered checkpoint's list): its pages come
        // from the swap layers.
        if pm.reap_set.is_empty() {
            return None;
        }
        let bytes = prefetch_from_layers(state, &pm.reap_set, &uffd, base, error_file);
        state.reap_wake = true;
        pm.reap_wake = true;
        return Some((bytes, 0));
    };
    reader.advise_sequential();
    // The file pages of the set go to the disk first, together; waited for after the
    // memory's.
    let file_runs = crate::filereap::runs(&pm.mem, &pm.reap_files);
    crate::filereap::advise(&file_runs);
    let pages = &mut state.pages;
    let mut bytes = 0u64;
    let r = reader.read_batches(8 << 20, |batch: crate::pagefile::PageBatch<'_>| {
        for (first, data) in batch.runs() {
            let host = base + first.0 * PAGE_SIZE;
            // SAFETY: `data` holds verified page bytes; the destination run lies in guest
            // memory above the reserved chunk (REAP pages are guest pages of the map).
            let r = unsafe { uffd.copy(data.as_ptr().cast(), host as *mut _, data.len()) };
            if r.is_err() {
                // Some page of the run is present already: install page by page.
                for (k, page) in data.chunks(PAGE_SIZE as usize).enumerate() {
                    let h = host + k as u64 * PAGE_SIZE;
                    // SAFETY: as above, one page.
                    let _ =
                        unsafe { uffd.copy(page.as_ptr().cast(), h as *mut _, PAGE_SIZE as usize) };
                }
            }
            let n = data.len() as u64 / PAGE_SIZE;
            for p in first.0..first.0 + n {
                let _ = pages.set(PageIdx(p), PageState::Resident);
            }
            bytes += data.len() as u64;
        }
        Ok::<(), crate::reap::ReapError>(())
    });
    if let Err(e) = r {
        pager::fatal(error_file, &format!("REAP file unreadable or corrupt: {e}"));
    }
    let file_bytes = crate::filereap::populate(&file_runs);
    tracing::debug!(
        memory = bytes,
        files = file_bytes,
        runs = file_runs.len(),
        "REAP prefetch"
    );
    state.reap_wake = true;
    pm.reap_wake = true;
    Some((bytes, file_bytes))
}

/// Installs the pages of `set` (sorted) that are swapped out, read from their swap layers in
/// runs of consecutive pages in consecutive slots, write-protected as the pager installs
/// them (so that the next deflate keeps their slots while they stay unwritten). Returns the
/// bytes installed; a corrupt or unreadable layer stops the sandbox, as in the pager.
fn prefetch_from_layers(
    state: &mut crate::pager::PagerState,
    set: &[PageIdx],
    uffd: &crate::uffd::Uffd,
    base: u64,
    error_file: &std::path::Path,
) -> u64 {
    const RUN: u64 = 256;
    let mut buf = vec![0u8; (RUN * PAGE_SIZE) as usize];
    let mut bytes = 0u64;
    let mut i = 0;
    while i < set.len() {
        let first = set[i];
        let Ok(PageState::Swapped { slot }) = state.pages.get(first) else {
            i += 1;
            continue;
        };
        let mut n = 1u64;
        while n < RUN
            && set.get(i + n as usize).map(|p| p.0) == Some(first.0 + n)
            && state.pages.get(PageIdx(first.0 + n)).ok()
                == Some(PageState::Swapped {
                    slot: slot + n as u32,
                })
        {
            n += 1;
        }
        let len = (n * PAGE_SIZE) as usize;
        if let Err(e) = state
            .swap
            .read_pages_into(first, slot, n as u32, &mut buf[..len])
        {
            pager::fatal(
                error_file,
                &format!("swapped data unreadable or corrupt: {e}"),
            );
        }
        let host = base + first.0 * PAGE_SIZE;
        // SAFETY: `buf` holds `len` verified bytes; the destination run lies in guest memory
        // above the reserved chunk (pages of the map, which covers guest memory).
        let r = unsafe { uffd.copy_write_protected(buf.as_ptr().cast(), host as *mut _, len) };
        if let Ok((_, protected)) = r {
            for k in 0..n {
                let now = if protected {
                    PageState::Cached {
                        slot: slot + k as u32,
                    }
                } else {
                    PageState::Resident
                };
                let _ = state.pages.set(PageIdx(first.0 + k), now);
            }
            bytes += len as u64;
        }
        // A run with a page present already is left to the pager's faults.
        i += n as usize;
    }
    bytes
}
