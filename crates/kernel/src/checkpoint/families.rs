//! Processes that share one guest memory's frames copy-on-write (a process and the children
//! it forked: `mm`'s family) in a checkpoint. Their address spaces are saved together
//! ([`mm::MemoryManager::export_family`]): one allocator, one memory image (the hibernate
//! crate writes it under the family's lowest pid), each member's page tables in it. The
//! other members' states name that process in [`ProcessState::memory_of`]; a restore builds
//! the family's memory once and its members over it ([`mm::MemoryManager::import_family`]),
//! so what they shared is shared again.

use std::collections::HashMap;

use super::blobs::{BlobRef, BlobWriter};
use super::state::ProcessState;
use super::CheckpointError;
use crate::task::ProcessResources;

/// A saved address space: its image, its allocator's blob, and the process whose memory it
/// is (`None`: its own).
pub(super) type SavedSpace = (mm::MmImage, BlobRef, Option<i32>);

/// Exports the address spaces of the processes of `resources` that share their memory with
/// others, a family at a time (members locked in pid order: every thread is parked), by
/// pid; the allocator's bytes go into `blobs` once per family. Processes with a memory of
/// their own are left to the caller.
///
/// # Errors
/// [`CheckpointError::Unsupported`] with the reason [`mm::MemoryManager::export_family`]
/// gives.
pub(super) fn export(
    resources: &[(i32, ProcessResources)],
    anon: &mut mm::AnonObjects,
    blobs: &mut BlobWriter,
) -> Result<HashMap<i32, SavedSpace>, CheckpointError> {
    let mut saved = HashMap::new();
    for family in crate::task::by_memory(resources)
        .into_iter()
        .filter(|f| f.len() > 1)
    {
        let first = family[0].0;
        let guards: Vec<_> = family
            .iter()
            .map(|(_, r)| r.mm.lock().unwrap_or_else(|e| e.into_inner()))
            .collect();
        let members: Vec<&mm::MemoryManager> = guards.iter().map(|g| &**g).collect();
        let (images, allocator) = mm::MemoryManager::export_family(&members, anon)
            .map_err(|e| CheckpointError::Unsupported(format!("process {first}: {e}")))?;
        let blob = blobs.add(&allocator);
        for ((pid, _), image) in family.iter().zip(images) {
            let of = (*pid != first).then_some(first);
            saved.insert(*pid, (image, blob, of));
        }
    }
    Ok(saved)
}

/// The processes of a saved sandbox by memory: each group the process with a memory of its
/// own first, then those whose [`ProcessState::memory_of`] names it, by pid; groups in the
/// order of their first process.
///
/// # Errors
/// [`CheckpointError::Restore`] when a process names itself, a process the state does not
/// have, or one whose memory is another's.
pub(super) fn of(processes: &[ProcessState]) -> Result<Vec<Vec<&ProcessState>>, CheckpointError> {
    let ids: Vec<(i32, Option<i32>)> = processes.iter().map(|p| (p.pid, p.memory_of)).collect();
    Ok(groups(&ids)?
        .into_iter()
        .map(|g| g.into_iter().map(|i| &processes[i]).collect())
        .collect())
}

/// [`of`] over `(pid, memory_of)` pairs: the groups as indices into `ids`.
fn groups(ids: &[(i32, Option<i32>)]) -> Result<Vec<Vec<usize>>, CheckpointError> {
    let mut families: Vec<Vec<usize>> = (0..ids.len())
        .filter(|&i| ids[i].1.is_none())
        .map(|i| vec![i])
        .collect();
    let mut members: Vec<usize> = (0..ids.len()).filter(|&i| ids[i].1.is_some()).collect();
    members.sort_by_key(|&i| ids[i].0);
    for i in members {
        let (pid, of) = ids[i];
        let of = of.unwrap_or(pid);
        let family = families
            .iter_mut()
            .find(|f| ids[f[0]].0 == of)
            .ok_or_else(|| {
                CheckpointError::Restore(format!(
                    "process {pid} shares the memory of {of}, which is not a process with a \
                     memory of its own"
                ))
            })?;
        family.push(i);
    }
    Ok(families)
}

#[cfg(test)]
mod tests {
    use super::groups;

    #[test]
    fn members_follow_the_process_whose_memory_they_share() {
        // 1 alone; 3 shares 2's, and 5 too, listed before 2.
        let ids = [(5, Some(2)), (1, None), (2, None), (3, Some(2))];
        assert_eq!(groups(&ids).unwrap(), vec![vec![1], vec![2, 3, 0]]);
    }

    #[test]
    fn a_memory_of_nobody_is_refused() {
        for ids in [
            // Itself.
            vec![(1, None), (2, Some(2))],
            // A process the state does not have.
            vec![(1, None), (2, Some(9))],
            // One whose memory is another's.
            vec![(1, None), (2, Some(1)), (3, Some(2))],
        ] {
            assert!(groups(&ids).is_err(), "{ids:?}");
        }
    }
}
