//! Checkpoints, on the hibernator's side: written by the park hook right after a deflate
//! (every page is then in a swap layer, the REAP file, a mapped file, or known zero, so the
//! memory image is copied from those files and guest memory is never faulted back), and a
//! hibernator for a sandbox restored from one, whose pages come back lazily from the image.
//!
//! ```text
//! torpor checkpoint:   park ─▶ deflate ─▶ kernel::checkpoint::export ─▶ DIR/state.json, blobs.bin
//!                                      ─▶ page states ─▶ DIR/mem-PID.img ─▶ DIR/MANIFEST (last)
//! torpor restore:      Checkpoint::open (every check) ─▶ kernel::checkpoint::restore
//!                      ─▶ restored(): mem-PID.img as a borrowed swap layer, every saved page
//!                         Swapped, uffd registered ─▶ hibernated ─▶ wake (faults, then REAP)
//! ```

use std::path::{Path, PathBuf};

use kernel::checkpoint::state::SandboxState;
use kernel::task::ParkedSandbox;
use platform::{Gpa, PAGE_SIZE};
use serde::{Deserialize, Serialize};

use super::{EngineError, Hibernator, ProcessMemory, BATCH_PAGES};
use crate::pagestate::{PageIdx, PageState};
use crate::snapshot::{self, BlobWriter, Checkpoint, CheckpointWriter, Kind, BLOBS, STATE};
use crate::swapfile::{SwapReader, SwapWriter};

/// A checkpoint the control thread asked for.
#[derive(Clone)]
pub(super) struct Job {
    /// The new directory to write it into.
    pub(super) dir: PathBuf,
    /// The holder's record of how the sandbox was started.
    pub(super) holder: serde_json::Value,
    /// For a checkpoint the holder goes dormant with: where copies of the sandbox's host
    /// sockets it keeps go once it is written.
    pub(super) keep: Option<std::sync::Arc<std::sync::Mutex<KeptSockets>>>,
}

impl Job {
    /// Whether the holder goes dormant with it (and execs next, which gives back all of
    /// the process's memory).
    pub(super) fn goes_dormant(&self) -> bool {
        self.keep.is_some()
    }

    /// Who waits for it: nobody for a dormancy's, which runs at background priority.
    pub(super) fn priority(&self) -> crate::background::Priority {
        if self.goes_dormant() {
            crate::background::Priority::Background
        } else {
            crate::background::Priority::Asked
        }
    }
}

/// The host sockets a holder going dormant keeps open (copies, close-on-exec), which its wake
/// adopts: the listeners with their waiting connections, and the connections the checkpoint
/// saved as kept (by these descriptors' numbers).
#[derive(Debug, Default)]
pub struct KeptSockets {
    /// The sandbox's listening Internet sockets ([`listening_sockets`]).
    pub listeners: Vec<std::os::fd::OwnedFd>,
    /// Its connected Internet sockets.
    pub connections: Vec<std::os::fd::OwnedFd>,
}

/// Copies (close-on-exec) of the host sockets of `sb` that listen for Internet connections:
/// what a holder going dormant keeps, their waiting connections with them.
fn listening_sockets(sb: &ParkedSandbox<'_>) -> Vec<std::os::fd::OwnedFd> {
    use kernel::net::host;
    sb.sockets()
        .iter()
        .filter(|f| {
            let opt = |name| host::int_opt(f.host(), libc::SOL_SOCKET, name).ok();
            matches!(opt(libc::SO_DOMAIN), Some(libc::AF_INET | libc::AF_INET6))
                && opt(libc::SO_ACCEPTCONN) == Some(1)
        })
        .filter_map(|f| f.host().try_clone_to_owned().ok())
        .collect()
}

/// What a checkpoint's `state.json` holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointState {
    /// The holder's record of how the sandbox was started (its root, memory, policies).
    pub holder: serde_json::Value,
    /// The kernel's state.
    pub kernel: SandboxState,
    /// The host's clocks when the sandbox stopped (format 1.1), from which a restore's time
    /// namespace continues its monotonic time.
    #[serde(default)]
    pub clocks: Option<Clocks>,
}

/// The host's clocks at a moment, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clocks {
    /// CLOCK_MONOTONIC.
    pub monotonic_ns: i64,
    /// CLOCK_BOOTTIME.
    pub boottime_ns: i64,
    /// CLOCK_REALTIME.
    pub realtime_ns: i64,
}

impl Clocks {
    /// The clocks now.
    pub fn now() -> Clocks {
        let read = |id| {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime into a local timespec.
            unsafe { libc::clock_gettime(id, &mut ts) };
            ts.tv_sec * 1_000_000_000 + ts.tv_nsec
        };
        Clocks {
            monotonic_ns: read(libc::CLOCK_MONOTONIC),
            boottime_ns: read(libc::CLOCK_BOOTTIME),
            realtime_ns: read(libc::CLOCK_REALTIME),
        }
    }
}

/// The name of process `pid`'s memory image in a checkpoint.
pub fn memory_image_name(pid: i32) -> String {
    format!("mem-{pid}.img")
}

/// The name of process `pid`'s recorded working set (its REAP file) in a checkpoint.
pub fn working_set_name(pid: i32) -> String {
    format!("reap-{pid}.img")
}

impl Hibernator {
    /// Writes the checkpoint `job` asks for of a sandbox that is hibernated (every thread
    /// parked in its wait for a wake): no wake and no second deflate. Its last deflate may
    /// have kept page-table entries into file windows, which a checkpoint must not save: they
    /// are dropped now, and the page-table pages that walk brought back from the swap and
    /// wrote are read from guest memory, not from their swap slots. The sandbox stays
    /// hibernated, also when this fails (nothing of its swap changes).
    pub(super) fn checkpoint_hibernated(
        &mut self,
        sb: &ParkedSandbox<'_>,
        job: &Job,
    ) -> Result<super::DeflateReport, super::HibernateError> {
        let start = std::time::Instant::now();
        sb.drop_file_window_pages();
        for pm in self.processes.values() {
            let mut pager = pm.pager.write().unwrap_or_else(|e| e.into_inner());
            let back: Vec<PageIdx> = pager
                .pages
                .iter()
                .filter(|(_, st)| matches!(st, PageState::Cached { .. }))
                .map(|(page, _)| page)
                .collect();
            for page in back {
                // In host memory (brought back write-protected since the deflate): the bytes
                // there are the page's, written or not.
                let _ = pager.pages.set(page, PageState::Resident);
            }
        }
        self.write_checkpoint(sb, job, WorkingSet::List)
            .map_err(super::HibernateError::Checkpoint)?;
        tracing::info!(
            took_us = start.elapsed().as_micros() as u64,
            "checkpointed while hibernated"
        );
        Ok(super::DeflateReport {
            took_us: start.elapsed().as_micros() as u64,
            ..Default::default()
        })
    }

    /// Writes the checkpoint `job` asks for of the sandbox just deflated (its first task
    /// `task`, every thread parked). A failure removes what was written.
    pub(super) fn write_checkpoint(
        &self,
        sb: &ParkedSandbox<'_>,
        job: &Job,
        working_set: WorkingSet,
    ) -> Result<(), EngineError> {
        let r = self.try_write_checkpoint(sb, job, working_set);
        if r.is_err() && job.dir.exists() {
            let _ = std::fs::remove_dir_all(&job.dir);
        }
        r
    }

    fn try_write_checkpoint(
        &self,
        sb: &ParkedSandbox<'_>,
        job: &Job,
        working_set: WorkingSet,
    ) -> Result<(), EngineError> {
        // The deflate wrote the anonymous shared memory to its swap file and punched it out of
        // its objects: put it back (the wake does it again), for the export saves the objects'
        // bytes.
        if let Some(sw) = &self.shared_swap {
            super::inflate::restore_shared(sw)?;
        }
        let mut blobs = BlobWriter::new();
        let (kernel, connections) = if job.keep.is_some() {
            kernel::checkpoint::export_keeping_connections(sb, &mut blobs)?
        } else {
            (kernel::checkpoint::export(sb, &mut blobs)?, Vec::new())
        };
        let mut w = CheckpointWriter::create(&job.dir)?;
        if job.goes_dormant() {
            // It lasts as long as its dormant process, which ends with the host.
            w = w.volatile();
        }
        // A memory image per memory: processes that share their memory with another (forked
        // copy-on-write) have theirs under that process's pid, the family's lowest.
        for p in kernel.processes.iter().filter(|p| p.memory_of.is_none()) {
            let pm = self.processes.get(&p.pid).ok_or_else(|| {
                EngineError::Inconsistent("not deflated".into()).in_process(p.pid)
            })?;
            // A holder going dormant writes its checkpoint in place, where it stays: its
            // memory is layered over the images it was restored from (their pages are not
            // written again), and its working set is a page list read from them.
            if job.keep.is_some() && write_layered_image(pm, &mut w, p.pid)? {
                continue;
            }
            let name = memory_image_name(p.pid);
            let path = w.path(&name)?;
            write_memory_image(pm, &path).map_err(|e| e.in_process(p.pid))?;
            w.add_page_file(&name, snapshot::FileKind::Memory)?;
            if working_set == WorkingSet::List {
                write_working_set_list(pm, &mut w, p.pid)?;
                continue;
            }
            // The recorded working set, as the deflate just wrote it (its pages are the
            // image's): a restore prefetches it in one batch, as a REAP wake does. Linked,
            // not copied, where the checkpoint is on the state directory's file system.
            let reap = {
                let pager = pm.pager.read().unwrap_or_else(|e| e.into_inner());
                pager.reap.as_ref().map(|r| r.path().to_path_buf())
            };
            if let Some(reap) = reap {
                let name = working_set_name(p.pid);
                let dest = w.path(&name)?;
                std::fs::hard_link(&reap, &dest)
                    .or_else(|_| std::fs::copy(&reap, &dest).map(|_| ()))
                    .map_err(EngineError::host(
                        "linking the working set into the checkpoint",
                    ))?;
                w.add_page_file(&name, snapshot::FileKind::Reap)?;
            }
        }
        let state = CheckpointState {
            holder: job.holder.clone(),
            kernel,
            clocks: Some(Clocks::now()),
        };
        let json = serde_json::to_vec(&state)
            .map_err(|e| EngineError::Inconsistent(format!("encoding the state: {e}")))?;
        w.write_envelope(STATE, Kind::State, &json)?;
        w.write_envelope(BLOBS, Kind::Blobs, &blobs.into_payload())?;
        w.finish()?;
        if let Some(keep) = &job.keep {
            *keep.lock().unwrap_or_else(|e| e.into_inner()) = KeptSockets {
                listeners: listening_sockets(sb),
                connections,
            };
        }
        Ok(())
    }
}

/// The most images a layered checkpoint stacks under its own (each dormancy after a wake
/// adds one): past it, the whole image is written again, and the next ones stack on it.
const MAX_BASES: usize = 4;

/// The name of process `pid`'s `k`-th underlying memory image in a layered checkpoint.
fn base_image_name(pid: i32, k: usize) -> String {
    format!("mem-{pid}.base-{k}.img")
}

/// The names of process `pid`'s memory images in `checkpoint`, oldest first: a layered
/// checkpoint's underlying images (format 1.9), then `mem-PID.img`. A page is the newest
/// image's that holds it.
pub fn memory_image_layers(checkpoint: &Checkpoint, pid: i32) -> Vec<String> {
    let mut names: Vec<String> = (0..)
        .map(|k| base_image_name(pid, k))
        .take_while(|n| checkpoint.path(n).is_some())
        .collect();
    names.push(memory_image_name(pid));
    names
}

/// The name of process `pid`'s working set as a page list in a layered checkpoint.
pub fn working_set_list_name(pid: i32) -> String {
    format!("workset-{pid}")
}

/// Writes process `pid`'s memory into `w` as layers (format 1.9), if it was restored from
/// images (its borrowed swap layers) that can be linked into the checkpoint: those images,
/// linked, oldest first (`mem-PID.base-K.img`), then `mem-PID.img` with every page whose
/// bytes they do not give (the page last held by the newest of them): pages written since,
/// and a zero page for each page they hold that is free or zero now. The working set goes
/// in as a page list. Returns false, having written nothing, when there is no such image or
/// one cannot be linked (the caller writes the whole image).
fn write_layered_image(
    pm: &ProcessMemory,
    w: &mut CheckpointWriter,
    pid: i32,
) -> Result<bool, EngineError> {
    let pager = pm.pager.read().unwrap_or_else(|e| e.into_inner());
    let bases: Vec<(u32, &SwapReader)> = pager.swap.borrowed().collect();
    tracing::debug!(
        pid,
        bases = bases.len(),
        layers = pager.swap.layers(),
        "checkpoint: layered memory"
    );
    if bases.is_empty() || bases.len() >= MAX_BASES {
        return Ok(false);
    }
    let mut linked = Vec::new();
    for (k, (_, r)) in bases.iter().enumerate() {
        let name = base_image_name(pid, k);
        let dest = w.path(&name)?;
        if std::fs::hard_link(r.path(), &dest).is_err() {
            for d in linked.iter().chain([&dest]) {
                let _ = std::fs::remove_file(d);
            }
            return Ok(false);
        }
        linked.push(dest);
    }
    for k in 0..bases.len() {
        w.add_page_file(&base_image_name(pid, k), snapshot::FileKind::Memory)?;
    }
    // The global slot that gives each page its bytes through the images (the newest holding it).
    let total = pm.mem.size() / PAGE_SIZE;
    let mut under: Vec<Option<u32>> = vec![None; total as usize];
    for (base, r) in &bases {
        for (slot, e) in (0u32..).zip(r.index().entries()) {
            if let Some(u) = under.get_mut(e.page().0 as usize) {
                *u = Some(base + slot);
            }
        }
    }
    let name = memory_image_name(pid);
    let path = w.path(&name)?;
    let mut out = SwapWriter::create(&path, total).map_err(EngineError::page_file(&path))?;
    let mut idx: Vec<PageIdx> = Vec::with_capacity(BATCH_PAGES);
    let mut data = vec![0u8; BATCH_PAGES * PAGE_SIZE as usize];
    let mut below = [0u8; PAGE_SIZE as usize];
    for (page, st) in pager.pages.iter() {
        let under_slot = under.get(page.0 as usize).copied().flatten();
        let at = idx.len() * PAGE_SIZE as usize;
        let buf: &mut [u8; PAGE_SIZE as usize] = (&mut data[at..at + PAGE_SIZE as usize])
            .try_into()
            .map_err(|_| EngineError::Inconsistent("page buffer".into()))?;
        let held = match st {
            PageState::Swapped { slot } | PageState::Cached { slot }
                if Some(slot) == under_slot =>
            {
                continue;
            }
            PageState::Free | PageState::Zero => false,
            _ => read_page_bytes(pm, &pager, page, st, buf)?,
        };
        match under_slot {
            // Nothing below: the page is written if it holds bytes.
            None if !held => continue,
            None => {}
            // Something below: written unless the same bytes (a zero page if none now).
            Some(slot) => {
                if !held {
                    buf.fill(0);
                } else {
                    pager
                        .swap
                        .read_pages_into(page, slot, 1, &mut below)
                        .map_err(EngineError::ReadBack)?;
                    if below == *buf {
                        continue;
                    }
                }
            }
        }
        idx.push(page);
        if idx.len() == BATCH_PAGES {
            flush_pages(&mut out, &mut idx, &data, &path)?;
        }
    }
    flush_pages(&mut out, &mut idx, &data, &path)?;
    out.finish().map_err(EngineError::page_file(&path))?;
    w.add_page_file(&name, snapshot::FileKind::Memory)?;
    write_working_set_list(pm, w, pid)?;
    Ok(true)
}

/// Writes process `pid`'s recorded working set into `w` as a page list (`workset-PID`), if
/// it has one: its wake prefetches those pages from the memory image.
fn write_working_set_list(
    pm: &ProcessMemory,
    w: &mut CheckpointWriter,
    pid: i32,
) -> Result<(), EngineError> {
    if !pm.reap_set.is_empty() {
        let mut set = pm.reap_set.clone();
        set.sort_unstable();
        set.dedup();
        let list: Vec<u8> = set.iter().flat_map(|p| p.0.to_le_bytes()).collect();
        w.write_envelope(&working_set_list_name(pid), Kind::WorkingSet, &list)?;
    }
    Ok(())
}

/// How a checkpoint carries each process's recorded working set.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum WorkingSet {
    /// The REAP file, linked: its bytes are the pages' (a checkpoint right after a deflate).
    File,
    /// A page list: the REAP file may hold older bytes of a page written since the deflate
    /// (the page-table pages a checkpoint of a hibernated sandbox rewrites), so the wake
    /// prefetches the list from the memory image instead.
    List,
}

/// Appends the pages `idx` (their bytes in `data`, in order) to `w` and empties `idx`.
fn flush_pages(
    w: &mut SwapWriter,
    idx: &mut Vec<PageIdx>,
    data: &[u8],
    path: &Path,
) -> Result<(), EngineError> {
    let pages: Vec<(PageIdx, &[u8])> = idx
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                *p,
                &data[i * PAGE_SIZE as usize..(i + 1) * PAGE_SIZE as usize],
            )
        })
        .collect();
    let r = w
        .write_batch(&pages)
        .map(|_| ())
        .map_err(EngineError::page_file(path));
    idx.clear();
    r
}

/// Reads the bytes of `page` (in state `st`, not free or zero) from where the deflate left
/// it into `buf`. Returns false for a page that holds nothing to save (of the reserved region,
/// rebuilt by the new VM, or resident and all zero).
fn read_page_bytes(
    pm: &ProcessMemory,
    pager: &crate::pager::PagerState,
    page: PageIdx,
    st: PageState,
    buf: &mut [u8; PAGE_SIZE as usize],
) -> Result<bool, EngineError> {
    match st {
        PageState::Free | PageState::Zero => return Ok(false),
        PageState::Swapped { slot } | PageState::Cached { slot } => pager
            .swap
            .read_pages_into(page, slot, 1, buf)
            .map_err(EngineError::ReadBack)?,
        PageState::Reap { .. } => pager
            .reap
            .as_ref()
            .ok_or_else(|| EngineError::Inconsistent("a REAP page without a REAP file".into()))?
            .read_page(page, buf)
            .map_err(EngineError::ReadBack)?,
        PageState::File { slot } => pager
            .files
            .get(slot as usize)
            .ok_or_else(|| EngineError::Inconsistent("a file page without its file".into()))?
            .read_into(buf)?,
        PageState::Resident => {
            if page.0 * PAGE_SIZE < platform::layout::RESERVED_END.raw() {
                return Ok(false); // rebuilt by the new VM
            }
            pm.mem
                .read(Gpa(page.0 * PAGE_SIZE), buf)
                .map_err(EngineError::memory("reading guest memory"))?;
            if buf.iter().all(|&b| b == 0) {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Writes every page of `pm` that holds bytes into a page file at `path`, from where the
/// deflate left it (no guest page is faulted back): swap and REAP slots are read and checked,
/// clean file pages read from their file and checked, resident pages (none after a deflate
/// but the ones it could not drop) read from guest memory. Free and zero pages are left out.
fn write_memory_image(pm: &ProcessMemory, path: &Path) -> Result<(), EngineError> {
    let pager = pm.pager.read().unwrap_or_else(|e| e.into_inner());
    let total = pm.mem.size() / PAGE_SIZE;
    let mut w = SwapWriter::create(path, total).map_err(EngineError::page_file(path))?;
    let mut idx: Vec<PageIdx> = Vec::with_capacity(BATCH_PAGES);
    let mut data = vec![0u8; BATCH_PAGES * PAGE_SIZE as usize];
    for (page, st) in pager.pages.iter() {
        let at = idx.len() * PAGE_SIZE as usize;
        let buf: &mut [u8; PAGE_SIZE as usize] = (&mut data[at..at + PAGE_SIZE as usize])
            .try_into()
            .map_err(|_| EngineError::Inconsistent("page buffer".into()))?;
        if !read_page_bytes(pm, &pager, page, st, buf)? {
            continue;
        }
        idx.push(page);
        if idx.len() == BATCH_PAGES {
            flush_pages(&mut w, &mut idx, &data, path)?;
        }
    }
    flush_pages(&mut w, &mut idx, &data, path)?;
    w.finish().map(|_| ()).map_err(EngineError::page_file(path))
}
