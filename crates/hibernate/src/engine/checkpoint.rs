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
use std::sync::Arc;

use kernel::checkpoint::state::SandboxState;
use kernel::task::{ParkedSandbox, TaskControl};
use platform::{Gpa, GuestMemory, PAGE_SIZE};
use serde::{Deserialize, Serialize};

use super::{Command, EngineError, Hibernator, ProcessMemory, WakeMode, BATCH_PAGES};
use crate::pagestate::{PageIdx, PageState};
use crate::reap::ReapReader;
use crate::snapshot::{self, BlobWriter, Checkpoint, CheckpointWriter, Kind, BLOBS, STATE};
use crate::swapfile::{SwapReader, SwapWriter};

/// A checkpoint the control thread asked for.
pub(super) struct Job {
    /// The new directory to write it into.
    pub(super) dir: PathBuf,
    /// The holder's record of how the sandbox was started.
    pub(super) holder: serde_json::Value,
    /// For a checkpoint the holder goes dormant with: where copies of the sandbox's host
    /// sockets it keeps go once it is written.
    pub(super) keep: Option<std::sync::Arc<std::sync::Mutex<KeptSockets>>>,
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
    /// Writes the checkpoint `job` asks for of the sandbox just deflated (its first task
    /// `task`, every thread parked). A failure removes what was written.
    pub(super) fn write_checkpoint(
        &self,
        sb: &ParkedSandbox<'_>,
        job: &Job,
    ) -> Result<(), EngineError> {
        let r = self.try_write_checkpoint(sb, job);
        if r.is_err() && job.dir.exists() {
            let _ = std::fs::remove_dir_all(&job.dir);
        }
        r
    }

    fn try_write_checkpoint(&self, sb: &ParkedSandbox<'_>, job: &Job) -> Result<(), EngineError> {
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
        for p in &kernel.processes {
            let pm = self.processes.get(&p.pid).ok_or_else(|| {
                EngineError::Inconsistent("not deflated".into()).in_process(p.pid)
            })?;
            let name = memory_image_name(p.pid);
            let path = w.path(&name)?;
            write_memory_image(pm, &path).map_err(|e| e.in_process(p.pid))?;
            w.add_page_file(&name, snapshot::FileKind::Memory)?;
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
    let flush = |w: &mut SwapWriter, idx: &mut Vec<PageIdx>, data: &[u8]| {
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
    };
    for (page, st) in pager.pages.iter() {
        let at = idx.len() * PAGE_SIZE as usize;
        let buf: &mut [u8; PAGE_SIZE as usize] = (&mut data[at..at + PAGE_SIZE as usize])
            .try_into()
            .map_err(|_| EngineError::Inconsistent("page buffer".into()))?;
        match st {
            PageState::Free | PageState::Zero => continue,
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
                    continue; // rebuilt by the new VM
                }
                pm.mem
                    .read(Gpa(page.0 * PAGE_SIZE), buf)
                    .map_err(EngineError::memory("reading guest memory"))?;
                if buf.iter().all(|&b| b == 0) {
                    continue;
                }
            }
        }
        idx.push(page);
        if idx.len() == BATCH_PAGES {
            flush(&mut w, &mut idx, &data)?;
        }
    }
    flush(&mut w, &mut idx, &data)?;
    w.finish().map(|_| ()).map_err(EngineError::page_file(path))
}

/// The park hook of a sandbox just restored from `checkpoint`: each of its processes
/// (`processes`: pid and guest memory, the first process's first) hibernated, every page of
/// its memory image `Swapped` in a borrowed layer (the image file, never removed), its memory
/// registered with a userfaultfd. The first task's first park (the restore asks for it)
/// finds it hibernated: the next request or an explicit wake resumes every thread, and pages
/// come back as touched, checked against the image's checksums. The first wake records a
/// working set for REAP (unless `mode` is `fault`).
///
/// # Errors
/// The image's own checks ([`SwapReader::open`]), or the host's refusal of userfaultfd.
pub fn restored(
    checkpoint: &Checkpoint,
    processes: &[(i32, Arc<GuestMemory>)],
    control: Arc<TaskControl>,
    dir: PathBuf,
    mode: WakeMode,
) -> Result<(Hibernator, super::HibernateHandle), EngineError> {
    let (first, first_mem) = processes
        .first()
        .ok_or_else(|| EngineError::BadImage("a sandbox without processes".into()))?;
    let (mut hib, handle) = super::new(first_mem.clone(), control, dir, mode)
        .map_err(EngineError::host("setting up hibernation"))?;
    for (pid, mem) in processes {
        let name = memory_image_name(*pid);
        let path = checkpoint
            .path(&name)
            .ok_or_else(|| EngineError::BadImage(format!("the checkpoint has no {name}")))?;
        let image = SwapReader::open(&path).map_err(EngineError::page_file(&path))?;
        let total = mem.size() / PAGE_SIZE;
        if image.page_count() != total {
            return Err(EngineError::BadImage(format!(
                "{name} holds a memory of {} pages, the sandbox has {total}",
                image.page_count()
            )));
        }
        // File names as a deflate gives them: `swap.N` for the first process, `swap-PID.N`.
        let prefix = if pid == first {
            String::new()
        } else {
            format!("-{pid}")
        };
        let mut pm = ProcessMemory::new(mem.clone(), prefix, mode)?;
        {
            let mut pager = pm.pager.write().unwrap_or_else(|e| e.into_inner());
            let reserved = platform::layout::RESERVED_END.raw() / PAGE_SIZE;
            for (slot, e) in (0u32..).zip(image.index().entries()) {
                if e.page().0 < reserved {
                    return Err(EngineError::BadImage(format!(
                        "{name} holds page {} of the reserved region",
                        e.page().0
                    )));
                }
                pager.pages.set(e.page(), PageState::Swapped { slot })?;
            }
            pager
                .swap
                .push_borrowed(image)
                .map_err(EngineError::page_file(&path))?;
            // A recorded working set: the first wake prefetches it instead of recording.
            let reap = checkpoint.path(&working_set_name(*pid));
            if let (Some(reap), true) = (reap, mode != WakeMode::Fault) {
                let reader = ReapReader::open(&reap).map_err(EngineError::page_file(&reap))?;
                if reader.page_count() != total {
                    return Err(EngineError::BadImage(format!(
                        "{} holds a working set of a memory of {} pages, the sandbox has {total}",
                        working_set_name(*pid),
                        reader.page_count()
                    )));
                }
                pm.reap_set = reader.working_set();
                pager.reap = Some(reader);
                pm.record_next = false;
            }
        }
        pm.uffd = Some(ProcessMemory::start_pager(
            mem,
            &pm.pager,
            &hib.shared.metrics,
            hib.dir.join("error"),
        )?);
        hib.processes.insert(*pid, pm);
    }
    hib.first_mem = None;
    hib.first_pid = Some(*first);
    hib.shared.lock_mailbox().command = Some(Command::Restored);
    Ok((hib, handle))
}
