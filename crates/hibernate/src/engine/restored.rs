//! The hibernation side of a restore: a sandbox built from a checkpoint starts hibernated,
//! each process's memory paged in from the checkpoint's images through a userfaultfd.
//!
//! ```text
//! page_in ──▶ per process: a pager over its (empty) guest memory, every page Swapped in a
//!             layer of the image; with `prefetch`, the recorded working set read in at once
//!             on a thread of its own, while the caller builds the sandbox
//!         ──▶ restored_paged: the park hook and handle over the built sandbox (the thread
//!             joined first); the first wake finds the working set in already
//! ```
//!
//! A dormant sandbox's wake prefetches early: its request is waiting, and the restore's own
//! work (a new VM, vCPUs, files) leaves a CPU idle meanwhile. `torpor restore` does not: its
//! sandbox may sleep a long time before its first wake.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kernel::task::TaskControl;
use platform::{GuestMemory, PAGE_SIZE};

use super::checkpoint::{memory_image_layers, working_set_list_name, working_set_name};
use super::{Command, EngineError, Hibernator, Metrics, ProcessMemory, WakeMode};
use crate::pagestate::{PageIdx, PageState};
use crate::reap::ReapReader;
use crate::snapshot::{Checkpoint, Kind};
use crate::swapfile::SwapReader;

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
    restored_paged(page_in(checkpoint, processes, dir, mode, false)?, control)
}

/// The memories of a sandbox being restored, paged in from its checkpoint ([`page_in`]),
/// before the sandbox over them is built.
pub struct PagedIn {
    dir: PathBuf,
    mode: WakeMode,
    first: (i32, Arc<GuestMemory>),
    metrics: Arc<Metrics>,
    /// The processes' memories, here or on the thread that prefetches their working sets.
    processes: Paging,
}

enum Paging {
    Ready(BTreeMap<i32, ProcessMemory>),
    Prefetching(std::thread::JoinHandle<(BTreeMap<i32, ProcessMemory>, Early)>),
}

/// What a prefetch made before the wake did, for the wake's figures.
#[derive(Clone, Copy, Debug)]
pub(super) struct Early {
    /// The bytes prefetched of memory and of files; `None` if no process had a working set.
    prefetched: Option<(u64, u64)>,
    took: Duration,
}

impl Hibernator {
    /// A wake whose working set came in before it (`page_in` with `prefetch`): records the
    /// prefetch's figures. False when there was none.
    pub(super) fn take_early_prefetch(&mut self) -> bool {
        let Some(e) = self.early.take() else {
            return false;
        };
        if let Some((bytes, file_bytes)) = e.prefetched {
            self.shared
                .metrics
                .record_prefetch(bytes, file_bytes, e.took);
        }
        true
    }
}

/// Sets up a pager for each of `processes` (pid and empty guest memory, the first process's
/// first) over the checkpoint's memory images, registered with a userfaultfd. With
/// `prefetch`, each process's recorded working set is read in at once on a thread of its
/// own, as the first wake would (a memory with no working set starts recording one, as
/// then): the caller builds the sandbox meanwhile, which must not touch those memories
/// until [`restored_paged`] (a touch would wait for the prefetch).
///
/// # Errors
/// As [`restored`].
pub fn page_in(
    checkpoint: &Checkpoint,
    processes: &[(i32, Arc<GuestMemory>)],
    dir: PathBuf,
    mode: WakeMode,
    prefetch: bool,
) -> Result<PagedIn, EngineError> {
    let (first, first_mem) = processes
        .first()
        .ok_or_else(|| EngineError::BadImage("a sandbox without processes".into()))?;
    let metrics = Arc::new(Metrics::default());
    let mut pms = BTreeMap::new();
    for (pid, mem) in processes {
        let total = mem.size() / PAGE_SIZE;
        let names = memory_image_layers(checkpoint, *pid);
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
            for layer in &names {
                let path = checkpoint.path(layer).ok_or_else(|| {
                    EngineError::BadImage(format!("the checkpoint has no {layer}"))
                })?;
                let image = SwapReader::open(&path).map_err(EngineError::page_file(&path))?;
                if image.page_count() != total {
                    return Err(EngineError::BadImage(format!(
                        "{layer} holds a memory of {} pages, the sandbox has {total}",
                        image.page_count()
                    )));
                }
                let base = u32::try_from(pager.swap.next_base())
                    .map_err(|_| EngineError::BadImage(format!("{layer}: too many pages")))?;
                for (slot, e) in (0u32..).zip(image.index().entries()) {
                    if e.page().0 < reserved {
                        return Err(EngineError::BadImage(format!(
                            "{layer} holds page {} of the reserved region",
                            e.page().0
                        )));
                    }
                    pager
                        .pages
                        .set(e.page(), PageState::Swapped { slot: base + slot })?;
                }
                pager
                    .swap
                    .push_borrowed(image)
                    .map_err(EngineError::page_file(&path))?;
            }
            // A recorded working set: the first wake prefetches it instead of recording.
            let reap = checkpoint.path(&working_set_name(*pid));
            let list = checkpoint.path(&working_set_list_name(*pid));
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
            } else if let (Some(_), true) = (list, mode != WakeMode::Fault) {
                let bytes = checkpoint
                    .envelope(&working_set_list_name(*pid), Kind::WorkingSet)
                    .map_err(|e| EngineError::BadImage(e.to_string()))?;
                pm.reap_set = working_set_of(&bytes, reserved, total).ok_or_else(|| {
                    EngineError::BadImage(format!(
                        "{} is not a list of pages of the memory",
                        working_set_list_name(*pid)
                    ))
                })?;
                pm.record_next = pm.reap_set.is_empty();
            }
        }
        pm.uffd = Some(ProcessMemory::start_pager(
            mem,
            &pm.pager,
            &metrics,
            dir.join("error"),
        )?);
        pms.insert(*pid, pm);
    }
    let processes = if prefetch {
        let error_file = dir.join("error");
        let spawned = std::thread::Builder::new()
            .name("torpor-prefetch".into())
            .spawn(move || {
                let started = Instant::now();
                let prefetched = super::inflate::inflate_processes(pms.values_mut(), &error_file);
                let took = started.elapsed();
                (pms, Early { prefetched, took })
            })
            .map_err(EngineError::host("starting the prefetch"))?;
        Paging::Prefetching(spawned)
    } else {
        Paging::Ready(pms)
    };
    Ok(PagedIn {
        dir,
        mode,
        first: (*first, first_mem.clone()),
        metrics,
        processes,
    })
}

/// The park hook and handle of the sandbox built over `paged`'s memories (its task control
/// `control`): as [`restored`] returns them, the prefetch (if any) done.
///
/// # Errors
/// The hibernation's set-up; the prefetch's thread panicked.
pub fn restored_paged(
    paged: PagedIn,
    control: Arc<TaskControl>,
) -> Result<(Hibernator, super::HibernateHandle), EngineError> {
    let PagedIn {
        dir,
        mode,
        first: (first, first_mem),
        metrics,
        processes,
    } = paged;
    let (processes, early) = match processes {
        Paging::Ready(p) => (p, None),
        Paging::Prefetching(t) => {
            let (p, e) = t
                .join()
                .map_err(|_| EngineError::Inconsistent("the prefetch's thread panicked".into()))?;
            tracing::debug!(
                bytes = e.prefetched.map_or(0, |(b, _)| b),
                took_us = e.took.as_micros() as u64,
                "early prefetch joined"
            );
            (p, Some(e))
        }
    };
    let (mut hib, handle) = super::new_with_metrics(first_mem, control, dir, mode, metrics)
        .map_err(EngineError::host("setting up hibernation"))?;
    hib.processes = processes;
    hib.early = early;
    hib.first_mem = None;
    hib.first_pid = Some(first);
    hib.shared.lock_mailbox().command = Some(Command::Restored);
    Ok((hib, handle))
}

/// The pages of a working-set list (little-endian u64s, each a page of the memory above the
/// reserved region, in increasing order); None if it is not one.
fn working_set_of(bytes: &[u8], reserved: u64, total: u64) -> Option<Vec<PageIdx>> {
    if !bytes.len().is_multiple_of(8) {
        return None;
    }
    let pages: Vec<PageIdx> = bytes
        .chunks_exact(8)
        .map(|c| PageIdx(u64::from_le_bytes(c.try_into().unwrap_or_default())))
        .collect();
    let ordered = pages.windows(2).all(|w| w[0].0 < w[1].0);
    let inside = pages.iter().all(|p| (reserved..total).contains(&p.0));
    (ordered && inside).then_some(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(pages: &[u64]) -> Vec<u8> {
        pages.iter().flat_map(|p| p.to_le_bytes()).collect()
    }

    #[test]
    fn a_working_set_list_holds_increasing_pages_of_the_memory() {
        let ok = working_set_of(&list(&[1024, 1025, 2000]), 1024, 4096).unwrap();
        assert_eq!(ok, vec![PageIdx(1024), PageIdx(1025), PageIdx(2000)]);
        assert_eq!(working_set_of(&[], 1024, 4096), Some(Vec::new()));
        // Below the reserved region, past the end, out of order, twice, a torn entry.
        assert_eq!(working_set_of(&list(&[1023]), 1024, 4096), None);
        assert_eq!(working_set_of(&list(&[4096]), 1024, 4096), None);
        assert_eq!(working_set_of(&list(&[2000, 1500]), 1024, 4096), None);
        assert_eq!(working_set_of(&list(&[2000, 2000]), 1024, 4096), None);
        assert_eq!(working_set_of(&[0u8; 7], 1024, 4096), None);
    }
}
