//! The deflate: every process's memory written to its swap layer (resident, non-zero pages;
//! clean file pages dropped, not written) and the REAP working set, shared memory likewise,
//! then the pages given back to the host. A failed deflate removes what it wrote and drops
//! nothing.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kernel::task::ParkedSandbox;
use platform::{layout, Gpa, GuestMemory, PAGE_SIZE};

use crate::pager::{self, PagerState};
use crate::pagestate::{PageIdx, PageKind, PageState};
use crate::reap::{ReapReader, ReapWriter};
use crate::state::State;
use crate::swapfile::{SwapReader, SwapWriter};

use super::EngineError;
use super::{
    DeflateReport, Hibernator, ProcessDeflate, ProcessMemory, SharedSwap, WakeMode, BATCH_PAGES,
};

impl Hibernator {
    /// Writes the sandbox's memory out and drops it (see the module doc): every process's,
    /// one after the other. A failure stops there: the processes already deflated stay so
    /// (their pages come back on demand, nothing is lost), the failing one stays as it was.
    pub(super) fn deflate(&mut self, sb: &ParkedSandbox<'_>) -> Result<DeflateReport, EngineError> {
        let start = Instant::now();
        let first = *self.first_pid.get_or_insert(sb.pid());
        let live = sb.processes();
        // With the quota in sight, every process compacts its swap: the files then hold no
        // more than the live pages.
        let mut compact = self.shared.compact_next.swap(false, Ordering::SeqCst);
        if let Some(quota) = self.swap_quota {
            let bound = Self::deflate_bound(&live, sb.shared_memory());
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
        // Processes gone since the last deflate: their files go too.
        let gone: Vec<i32> = self
            .processes
            .keys()
            .copied()
            .filter(|pid| !live.iter().any(|(p, _)| p == pid))
            .collect();
        for pid in gone {
            if let Some(pm) = self.processes.remove(&pid) {
                pm.remove_files();
            }
        }
        let mut total = DeflateReport::default();
        let mut figures = Vec::new();
        for (pid, res) in live {
            let fresh = match self.processes.remove(&pid) {
                // execve replaced the memory: start afresh (the old files describe nothing).
                Some(pm) if !Arc::ptr_eq(&pm.mem, &res.mem) => {
                    pm.remove_files();
                    None
                }
                other => other,
            };
            let mut pm = match fresh {
                Some(pm) => pm,
                None => {
                    let mem = match self.first_mem.take() {
                        Some(m) if pid == first && Arc::ptr_eq(&m, &res.mem) => m,
                        _ => res.mem.clone(),
                    };
                    let prefix = if pid == first {
                        String::new()
                    } else {
                        format!("-{pid}")
                    };
                    ProcessMemory::new(mem, prefix, self.mode)?
                }
            };
            let r = self.deflate_process(&mut pm, &res.mm, &*res.space, compact);
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
            figures.push(ProcessDeflate { pid, report: r });
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

    /// Writes one process's memory out and drops it.
    pub(super) fn deflate_process(
        &self,
        pm: &mut ProcessMemory,
        mm: &Arc<Mutex<mm::MemoryManager>>,
        space: &dyn platform::AddressSpace,
        force_compact: bool,
    ) -> Result<DeflateReport, EngineError> {
        let start = Instant::now();
        // Nothing may reach a page about to be dropped but the runtime's own mapping (which
        // the userfaultfd serves): on the trap platform the application's process maps pages
        // of guest memory itself.
        space.evict_all().map_err(EngineError::Evict)?;
        let mut report = DeflateReport::default();
        let mem = pm.mem.clone();
        let first_page = layout::RESERVED_END.raw() / PAGE_SIZE;
        let total_pages = mem.size() / PAGE_SIZE;

        let mut mm = mm.lock().unwrap_or_else(|e| e.into_inner());
        // Clean pages of read-only file mappings (program text, read-only data) are not
        // written: they are dropped, and fault back in from their file.
        let mut clean: std::collections::HashMap<u64, (Arc<std::fs::File>, u64)> = mm
            .clean_file_pages()
            .into_iter()
            .map(|c| (c.frame.raw() / PAGE_SIZE, (c.file, c.offset)))
            .collect();
        // The page-cache pages touched since the last deflate (the file part of a recorded
        // working set; the accessed bits are cleared for the next wake). Not with page-fault
        // wakes, which have no use for it (clearing the bits writes the page tables).
        let touched_files = if self.mode == WakeMode::Fault {
            Vec::new()
        } else {
            mm.take_touched_window_pages()
        };
        let mut files: Vec<pager::FilePage> = crate::own_memory::vec_in_own_arena();
        let mut pager = pm.pager.write().unwrap_or_else(|e| e.into_inner());

        // Residency of every guest page (mincore on the host mapping), read only now: the walk
        // of the page tables above may have faulted swapped page-table pages back in, and
        // with the pager's lock held no page can come back until the states are written. (A
        // snapshot taken before that walk saw those pages absent: a page brought back
        // write-protected was then taken for one the guest had dropped, and its bytes lost.)
        let mut resident = vec![0u8; total_pages as usize];
        mem.residency(Gpa(0), &mut resident)
            .map_err(EngineError::host("mincore"))?;
        // A clone's memory is a checkpoint's image mapped copy-on-write until this deflate:
        // every page it holds counts as resident (read through the mapping, the image's bytes
        // or the clone's own), all written out, then the memory becomes anonymous.
        let image = mem.is_image();
        if image {
            resident.fill(1);
        }

        // The REAP working set: a fresh recording replaces the old one.
        let recorded = pager.recorder.is_active();
        let fresh = pager.recorder.stop();
        let mut record_next = pm.record_next;
        let mut reap_set = pm.reap_set.clone();
        let mut reap_files = pm.reap_files.clone();
        if self.mode != WakeMode::Fault {
            if recorded && !fresh.is_empty() {
                reap_set = fresh;
                reap_files = touched_files;
                record_next = false;
            } else if self.mode == WakeMode::Auto && pm.reap_wake {
                let residual = self.shared.metrics.residual_faults.load(Ordering::Relaxed);
                if residual >= 64 && residual as usize * 4 > reap_set.len() {
                    tracing::info!(
                        residual,
                        set = reap_set.len(),
                        "many faults outside the REAP set: re-recording"
                    );
                    record_next = true;
                }
            }
        }
        let mut in_set = vec![false; total_pages as usize];
        for p in &reap_set {
            if let Some(b) = in_set.get_mut(p.0 as usize) {
                *b = true;
            }
        }
        // Old bytes of a page that is not resident: from the previous swap or REAP file.
        fn read_old(
            pager: &PagerState,
            page: u64,
            buf: &mut [u8; PAGE_SIZE as usize],
        ) -> Result<bool, EngineError> {
            match pager.pages.get(PageIdx(page)) {
                Ok(PageState::Swapped { slot }) => {
                    pager
                        .swap
                        .read_pages_into(PageIdx(page), slot, 1, buf)
                        .map_err(EngineError::ReadBack)?;
                    Ok(true)
                }
                Ok(PageState::Reap { .. }) => {
                    let old = pager.reap.as_ref().ok_or_else(|| {
                        EngineError::Inconsistent("REAP page without a REAP file".into())
                    })?;
                    old.read_page(PageIdx(page), buf)
                        .map_err(EngineError::ReadBack)?;
                    Ok(true)
                }
                Ok(PageState::File { slot }) => {
                    let fp = pager.files.get(slot as usize).ok_or_else(|| {
                        EngineError::Inconsistent("file page without its file".into())
                    })?;
                    fp.read_into(buf)?;
                    Ok(true)
                }
                _ => Ok(false),
            }
        }

        // 1. Write a new swap layer: resident non-zero pages. Pages still swapped out keep
        // their slots in the older layers, unless these are mostly dead: then every live page
        // goes into one fresh layer (a compaction).
        let generation = pm.generation + 1;
        let counts = pager.pages.counts();
        let live = counts.get(PageKind::Swapped) + counts.get(PageKind::Cached);
        let compact = force_compact || pager.swap.needs_compaction(live, total_pages);
        let base = if compact {
            0
        } else {
            u32::try_from(pager.swap.next_base())
                .map_err(|_| EngineError::Inconsistent("swap slots exhausted".into()))?
        };
        // Which pages brought back from the swap were written since (the others still match
        // their slot: see `uffd`).
        let written = if counts.get(PageKind::Cached) > 0 && !compact && space.holder_sees_writes()
        {
            // SAFETY: in bounds: guest memory is larger than the reserved chunk.
            let from = unsafe { mem.host_base().add((first_page * PAGE_SIZE) as usize) };
            Some(
                crate::uffd::written_pages(from.cast(), (total_pages - first_page) as usize)
                    .map_err(EngineError::host("reading /proc/self/pagemap"))?,
            )
        } else {
            None
        };
        let path = self.file_path("swap", pm, generation);
        let mut writer =
            SwapWriter::create(&path, total_pages).map_err(EngineError::page_file(&path))?;
        let mut new_states: Vec<(u64, PageState)> = crate::own_memory::vec_in_own_arena();
        let mut batch_idx: Vec<u64> = Vec::with_capacity(BATCH_PAGES);
        let mut batch_data = vec![0u8; BATCH_PAGES * PAGE_SIZE as usize];
        let mut page_buf = [0u8; PAGE_SIZE as usize];
        let flush = |writer: &mut SwapWriter,
                     idx: &mut Vec<u64>,
                     data: &[u8],
                     out: &mut Vec<(u64, PageState)>| {
            write_batch(
                |p| writer.write_batch(p),
                idx,
                data,
                |slot| PageState::Swapped { slot: base + slot },
                out,
            )
            .map_err(EngineError::page_file(&path))
        };
        for page in first_page..total_pages {
            let gpa = Gpa(page * PAGE_SIZE);
            if mm.allocator().is_free(gpa) || in_set[page as usize] {
                continue;
            }
            if let Some((file, offset)) = clean.remove(&page) {
                // The checksum of what the page holds: from memory if resident, else kept from
                // the deflate that dropped it.
                let crc = if resident[page as usize] & 1 != 0 {
                    mem.read(gpa, &mut page_buf)
                        .map_err(EngineError::memory("reading guest memory"))?;
                    Some(crc32c::crc32c(&page_buf))
                } else {
                    match pager.pages.get(PageIdx(page)) {
                        Ok(PageState::File { slot }) => {
                            pager.files.get(slot as usize).map(|f| f.crc)
                        }
                        _ => None,
                    }
                };
                if let Some(crc) = crc {
                    new_states.push((
                        page,
                        PageState::File {
                            slot: files.len() as u32,
                        },
                    ));
                    files.push(pager::FilePage { file, offset, crc });
                    report.file_pages += 1;
                    continue;
                }
            }
            let is_resident = resident[page as usize] & 1 != 0;
            let slot_data = batch_idx.len() * PAGE_SIZE as usize;
            if let Ok(PageState::Cached { slot }) = pager.pages.get(PageIdx(page)) {
                let unwritten = written
                    .as_ref()
                    .and_then(|w| w.get((page - first_page) as usize))
                    .is_some_and(|w| !w);
                if is_resident && unwritten {
                    new_states.push((page, PageState::Swapped { slot }));
                    report.clean_pages += 1;
                    continue;
                }
                if !is_resident {
                    // Dropped since by the guest (MADV_DONTNEED): it reads as zero.
                    new_states.push((page, PageState::Zero));
                    continue;
                }
            }
            if is_resident {
                mem.read(gpa, &mut page_buf)
                    .map_err(EngineError::memory("reading guest memory"))?;
                if page_buf.iter().all(|&b| b == 0) {
                    new_states.push((page, PageState::Zero));
                    report.zero_pages += 1;
                    continue;
                }
                batch_data[slot_data..slot_data + PAGE_SIZE as usize].copy_from_slice(&page_buf);
                report.written_pages += 1;
            } else {
                match pager.pages.get(PageIdx(page)) {
                    Ok(PageState::Swapped { slot }) => {
                        report.carried_pages += 1;
                        if !compact {
                            continue; // it keeps its slot
                        }
                        pager
                            .swap
                            .read_pages_into(PageIdx(page), slot, 1, &mut page_buf)
                            .map_err(EngineError::ReadBack)?;
                        batch_data[slot_data..slot_data + PAGE_SIZE as usize]
                            .copy_from_slice(&page_buf);
                    }
                    Ok(PageState::Reap { .. } | PageState::File { .. }) => {
                        // Still in the REAP file or its mapped file, neither of which this
                        // deflate keeps for it (the REAP file is rewritten with the new set;
                        // the file-page table with this deflate's clean pages): its bytes
                        // move to the swap. (A wake that records instead of prefetching
                        // leaves untouched REAP pages where they are.)
                        if !read_old(&pager, page, &mut page_buf)? {
                            continue;
                        }
                        batch_data[slot_data..slot_data + PAGE_SIZE as usize]
                            .copy_from_slice(&page_buf);
                        report.carried_pages += 1;
                    }
                    _ => continue, // never touched, or zero: reads as zero either way
                }
            }
            batch_idx.push(page);
            if batch_idx.len() == BATCH_PAGES {
                flush(&mut writer, &mut batch_idx, &batch_data, &mut new_states)?;
            }
        }
        flush(&mut writer, &mut batch_idx, &batch_data, &mut new_states)?;
        report.swap_written_bytes = u64::from(writer.pages_written()) * PAGE_SIZE;
        report.compacted = compact;
        writer.finish().map_err(EngineError::page_file(&path))?;
        let reader = SwapReader::open(&path).map_err(EngineError::page_file(&path))?;

        // The REAP file: the working set's pages, contiguous, in recorded order.
        let mut reap_states: Vec<(u64, PageState)> = crate::own_memory::vec_in_own_arena();
        let reap_reader = if reap_set.is_empty() {
            None
        } else {
            let rpath = self.file_path("reap", pm, generation);
            let mut w = ReapWriter::create(&rpath, total_pages).map_err(|e| {
                let _ = std::fs::remove_file(&path);
                EngineError::page_file(&rpath)(e)
            })?;
            let mut idx: Vec<u64> = Vec::with_capacity(BATCH_PAGES);
            let write = |w: &mut ReapWriter,
                         idx: &mut Vec<u64>,
                         data: &[u8],
                         out: &mut Vec<(u64, PageState)>| {
                write_batch(
                    |p| w.write_batch(p),
                    idx,
                    data,
                    |slot| PageState::Reap { slot },
                    out,
                )
                .map_err(EngineError::page_file(&rpath))
            };
            let result = (|| -> Result<(), EngineError> {
                for p in &reap_set {
                    let page = p.0;
                    if page < first_page
                        || page >= total_pages
                        || mm.allocator().is_free(Gpa(page * PAGE_SIZE))
                    {
                        continue;
                    }
                    let at = idx.len() * PAGE_SIZE as usize;
                    if resident[page as usize] & 1 != 0 {
                        mem.read(Gpa(page * PAGE_SIZE), &mut page_buf)
                            .map_err(EngineError::memory("reading guest memory"))?;
                        if page_buf.iter().all(|&b| b == 0) {
                            reap_states.push((page, PageState::Zero));
                            continue;
                        }
                    } else if !read_old(&pager, page, &mut page_buf)? {
                        continue;
                    }
                    batch_data[at..at + PAGE_SIZE as usize].copy_from_slice(&page_buf);
                    idx.push(page);
                    if idx.len() == BATCH_PAGES {
                        write(&mut w, &mut idx, &batch_data, &mut reap_states)?;
                    }
                }
                write(&mut w, &mut idx, &batch_data, &mut reap_states)?;
                report.reap_bytes = u64::from(w.pages_written()) * PAGE_SIZE;
                w.finish()
                    .map(|_| ())
                    .map_err(EngineError::page_file(&rpath))
            })();
            if let Err(e) = result {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
            Some(ReapReader::open(&rpath).map_err(|e| {
                let _ = std::fs::remove_file(&path);
                EngineError::page_file(&rpath)(e)
            })?)
        };

        // A clone's memory becomes anonymous now that every page it holds is written out
        // (a userfaultfd cannot serve a file mapping); a failure leaves it as it was.
        if image {
            if let Err(e) = mem.make_anonymous(layout::RESERVED_END) {
                let _ = reader.remove();
                if let Some(r) = &reap_reader {
                    let _ = r.remove();
                }
                return Err(EngineError::Memory {
                    op: "making the clone's memory anonymous",
                    source: e,
                });
            }
        }
        // The userfaultfd registration comes before anything is dropped (without it, a
        // dropped page would read as zero); a failure here leaves the process as it was (a
        // clone's memory, already anonymous, could not come back: the sandbox stops).
        if pm.uffd.is_none() {
            match ProcessMemory::start_pager(
                &mem,
                &pm.pager,
                &self.shared.metrics,
                self.dir.join("error"),
            ) {
                Ok(u) => pm.uffd = Some(u),
                Err(e) if image => {
                    pager::fatal(&self.dir.join("error"), &format!("clone memory: {e}"))
                }
                Err(e) => {
                    let _ = reader.remove();
                    if let Some(r) = &reap_reader {
                        let _ = r.remove();
                    }
                    return Err(e);
                }
            }
        }

        // 2. Nothing can fail past this point that would lose data: drop pages.
        let runs: Vec<(Gpa, u64)> = mm.allocator().free_page_runs().collect();
        for (gpa, n) in runs {
            let _ = mem.discard(gpa, n * PAGE_SIZE);
            let _ = mm.allocator_mut().mark_zero(gpa, n);
            for p in gpa.raw() / PAGE_SIZE..gpa.raw() / PAGE_SIZE + n {
                let _ = pager.pages.set(PageIdx(p), PageState::Free);
            }
            report.free_pages += n;
        }
        for (page, st) in new_states.iter().chain(&reap_states) {
            let _ = pager.pages.set(PageIdx(*page), *st);
        }
        let mut dropped: Vec<u64> = new_states
            .iter()
            .chain(&reap_states)
            .map(|(p, _)| *p)
            .collect();
        dropped.sort_unstable();
        discard_pages(&mem, dropped.into_iter());
        if compact {
            pager.swap.remove_all();
        }
        if reader.slots() == 0 {
            let _ = reader.remove();
        } else if let Err(e) = pager.swap.push(reader) {
            // Unreachable: `needs_compaction` checked the slot space before writing.
            pager::fatal(&self.dir.join("error"), &format!("swap layer: {e}"));
        }
        // Layers no page refers to any more (their pages were written again, freed, or
        // moved to the REAP file) are removed.
        let mut referenced = vec![false; pager.swap.next_base() as usize];
        for (_, st) in pager.pages.iter() {
            if let PageState::Swapped { slot } | PageState::Cached { slot } = st {
                if let Some(r) = referenced.get_mut(slot as usize) {
                    *r = true;
                }
            }
        }
        pager
            .swap
            .retain_referenced(|slot| referenced.get(slot as usize).copied().unwrap_or(false));
        report.swap_bytes = pager.swap.bytes();
        report.swap_layers = pager.swap.layers() as u64;
        pager.files = files;
        let old_reap = std::mem::replace(&mut pager.reap, reap_reader);
        if let Some(old) = old_reap {
            let _ = old.remove();
        }
        pm.generation = generation;
        pm.reap_set = reap_set;
        pm.reap_files = reap_files;
        pm.record_next = record_next;
        drop(pager);
        drop(mm);

        report.took_us = start.elapsed().as_micros() as u64;
        Ok(report)
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
