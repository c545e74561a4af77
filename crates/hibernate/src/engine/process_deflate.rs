//! One memory's deflate (a process's, or a family's: the processes that share it), in three
//! steps, every page of the memory going through them:
//!
//! 1. **Plan** ([`Hibernator::plan`]): with the address space and the pager locked, what each
//!    page is (resident, free, clean file page, in the recorded working set), the working set
//!    the next wake prefetches, and whether the swap compacts into one fresh layer. Nothing is
//!    written.
//! 2. **Write** ([`Hibernator::write`]): the new swap layer (resident non-zero pages, and
//!    the live pages of older layers in a compaction), the REAP file (the working set, in
//!    recorded order), then what must hold before a page is dropped (a clone's memory made
//!    anonymous, the userfaultfd registered). A failure removes the new files: nothing was
//!    dropped, the process stays as it was.
//! 3. **Commit** ([`Hibernator::commit`]): nothing can fail that would lose data; pages are
//!    dropped (`MADV_DONTNEED`), their states switched to their new homes, layers no page
//!    refers to removed.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use platform::{layout, Gpa, PAGE_SIZE};

use crate::pager::{self, PagerState};
use crate::pagestate::{PageIdx, PageKind, PageState};
use crate::reap::{ReapReader, ReapWriter};
use crate::swapfile::{SwapReader, SwapWriter};

use super::deflate::{discard_pages, write_batch};
use super::{DeflateReport, EngineError, Hibernator, ProcessMemory, WakeMode, BATCH_PAGES};

/// The clean pages of read-only file mappings: guest page -> (file, offset in it).
type CleanFilePages = HashMap<u64, (Arc<std::fs::File>, u64)>;

/// What a process's deflate decided before writing anything.
struct Plan {
    first_page: u64,
    total_pages: u64,
    /// Residency of every guest page (mincore), read with the pager locked.
    resident: Vec<u8>,
    /// Clean pages of read-only file mappings (guest page -> file, offset): dropped, not
    /// written; they fault back in from their file.
    clean: HashMap<u64, (Arc<std::fs::File>, u64)>,
    /// The memory is a checkpoint's image mapped copy-on-write (a clone's first deflate).
    image: bool,
    /// The working set the next wake prefetches, and its page-cache pages.
    reap_set: Vec<PageIdx>,
    reap_files: Vec<Gpa>,
    /// Whether the next wake records a fresh working set.
    record_next: bool,
    /// `reap_set` as one flag per guest page.
    in_set: Vec<bool>,
    /// The files' generation this deflate writes.
    generation: u64,
    /// Every live page goes into one fresh layer.
    compact: bool,
    /// The first slot of the new layer.
    base: u32,
    /// Which pages brought back from the swap were written since (`None`: not known, all
    /// count as written).
    written: Option<Vec<bool>>,
}

/// What the write step produced; nothing is dropped yet.
struct Written {
    /// The clean file pages, by slot.
    files: Vec<pager::FilePage>,
    /// The new state of every page the swap layer decided (written, zero, carried, file).
    new_states: Vec<(u64, PageState)>,
    /// The new swap layer.
    reader: SwapReader,
    /// The new state of every page of the working set.
    reap_states: Vec<(u64, PageState)>,
    /// The new REAP file, if there is a working set.
    reap_reader: Option<ReapReader>,
}

impl Hibernator {
    /// Writes one family's memory out and drops it: plan, write, commit (see the module
    /// doc). The family's members are locked in pid order (the lock rule for several
    /// address spaces, which only a parked sandbox takes).
    pub(super) fn deflate_process(
        &self,
        pm: &mut ProcessMemory,
        family: &super::families::Family<'_>,
        force_compact: bool,
    ) -> Result<DeflateReport, EngineError> {
        let start = Instant::now();
        // Nothing may reach a page about to be dropped but the runtime's own mapping (which
        // the userfaultfd serves): on the trap platform the application's processes map
        // pages of guest memory themselves, each member its own.
        for (_, res) in &family.members {
            res.space.evict_all().map_err(EngineError::Evict)?;
        }
        let mut report = DeflateReport::default();
        let mut mms: Vec<_> = family
            .members
            .iter()
            .map(|(_, res)| res.mm.lock().unwrap_or_else(|e| e.into_inner()))
            .collect();
        // The page tables are walked before the pager is locked: the walk may fault a swapped
        // page-table page back in, which the userfaultfd thread serves under the pager's lock.
        let mut file_pages = (CleanFilePages::new(), Vec::new());
        for mm in &mut mms {
            // Frames a member released and kept until its next commit: with every member's
            // platform mapping evicted above, nothing maps them any more.
            mm.settle_released();
            let (clean, touched) = self.file_pages(mm);
            file_pages.0.extend(clean);
            file_pages.1.extend(touched);
        }
        file_pages.1.sort_unstable();
        file_pages.1.dedup();
        let space = &*family.members[0].1.space;
        // The members share one allocator: any of them answers for the family's frames.
        let mm = &mut mms[0];
        let pager = pm.pager.clone();
        let mut pager = pager.write().unwrap_or_else(|e| e.into_inner());
        let mut plan = self.plan(pm, &mut pager, file_pages, space, force_compact)?;
        let written = self.write(pm, mm, &pager, &mut plan, &mut report)?;
        self.commit(pm, mm, &mut pager, plan, written, &mut report);
        drop(pager);
        drop(mms);
        report.took_us = start.elapsed().as_micros() as u64;
        Ok(report)
    }

    /// The clean pages of read-only file mappings (guest page -> file, offset) and the
    /// page-cache pages touched since the last deflate, from the page tables.
    fn file_pages(&self, mm: &mut mm::MemoryManager) -> (CleanFilePages, Vec<Gpa>) {
        // Clean pages of read-only file mappings (program text, read-only data) are not
        // written: they are dropped, and fault back in from their file.
        let clean: HashMap<u64, (Arc<std::fs::File>, u64)> = mm
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
        (clean, touched_files)
    }

    /// Step 1: what each page is and where it goes (see the module doc).
    /// `clean` and `touched_files` come from the page tables ([`Self::file_pages`]).
    fn plan(
        &self,
        pm: &ProcessMemory,
        pager: &mut PagerState,
        (clean, touched_files): (CleanFilePages, Vec<Gpa>),
        space: &dyn platform::AddressSpace,
        force_compact: bool,
    ) -> Result<Plan, EngineError> {
        let mem = pm.mem.clone();
        let first_page = layout::RESERVED_END.raw() / PAGE_SIZE;
        let total_pages = mem.size() / PAGE_SIZE;
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
        // The new swap layer will hold the resident non-zero pages. Pages still swapped out
        // keep their slots in the older layers, unless these are mostly dead: then every live
        // page goes into one fresh layer (a compaction).
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
        Ok(Plan {
            first_page,
            total_pages,
            resident,
            clean,
            image,
            reap_set,
            reap_files,
            record_next,
            in_set,
            generation,
            compact,
            base,
            written,
        })
    }

    /// Step 2: the new swap layer, the REAP file, and what must hold before a page is dropped
    /// (see the module doc). A failure removes what it wrote.
    fn write(
        &self,
        pm: &mut ProcessMemory,
        mm: &mm::MemoryManager,
        pager: &PagerState,
        plan: &mut Plan,
        report: &mut DeflateReport,
    ) -> Result<Written, EngineError> {
        let Plan {
            first_page,
            total_pages,
            ref resident,
            ref mut clean,
            image,
            ref reap_set,
            ref in_set,
            generation,
            compact,
            base,
            ref written,
            ..
        } = *plan;
        let mem = pm.mem.clone();
        let mut files: Vec<pager::FilePage> = crate::own_memory::vec_in_own_arena();
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
                        if !read_old(pager, page, &mut page_buf)? {
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
                for p in reap_set {
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
                    } else if !read_old(pager, page, &mut page_buf)? {
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
        Ok(Written {
            files,
            new_states,
            reader,
            reap_states,
            reap_reader,
        })
    }

    /// Step 3: drops the pages and switches their states, layers and files (see the module
    /// doc). Nothing here can fail that would lose data.
    fn commit(
        &self,
        pm: &mut ProcessMemory,
        mm: &mut mm::MemoryManager,
        pager: &mut PagerState,
        plan: Plan,
        written: Written,
        report: &mut DeflateReport,
    ) {
        let Plan {
            generation,
            compact,
            reap_set,
            reap_files,
            record_next,
            ..
        } = plan;
        let Written {
            files,
            new_states,
            reader,
            reap_states,
            reap_reader,
        } = written;
        let mem = pm.mem.clone();
        let runs: Vec<(Gpa, u64)> = mm.allocator().free_page_runs().collect();
        for (gpa, n) in runs {
            let _ = mem.discard(gpa, n * PAGE_SIZE);
            let _ = mm.allocator().mark_zero(gpa, n);
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
    }
}

/// Old bytes of a page that is not resident: from the previous swap or REAP file, or its
/// mapped file (false: it holds none, it reads as zero).
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
            let old = pager
                .reap
                .as_ref()
                .ok_or_else(|| EngineError::Inconsistent("REAP page without a REAP file".into()))?;
            old.read_page(PageIdx(page), buf)
                .map_err(EngineError::ReadBack)?;
            Ok(true)
        }
        Ok(PageState::File { slot }) => {
            let fp = pager
                .files
                .get(slot as usize)
                .ok_or_else(|| EngineError::Inconsistent("file page without its file".into()))?;
            fp.read_into(buf)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}
