//! Which processes of a parked sandbox deflate together: a *family* is the processes that map
//! one guest memory (a process and the children it forked copy-on-write, `mm`'s `Family`).
//! Their frames are one memory's, so the family has one [`ProcessMemory`] (one page-state map,
//! one swap store, one REAP file, one userfaultfd): a frame several of them map is written
//! once, dropped once and brought back once, and all of them see it again. A process that
//! forked nothing is a family of one, deflated as before.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use kernel::task::ProcessResources;

use super::{Hibernator, ProcessMemory};

impl Hibernator {
    /// The kept memory that describes `mem` (its family's), if it was deflated.
    pub(super) fn memory_of(&self, mem: &Arc<platform::GuestMemory>) -> Option<&ProcessMemory> {
        self.processes.values().find(|pm| Arc::ptr_eq(&pm.mem, mem))
    }
}

/// The processes of one family, by pid, the lowest first: its kept [`ProcessMemory`] goes by
/// that pid in [`super::Hibernator`]'s map.
pub(super) struct Family<'a> {
    pub members: Vec<(i32, &'a ProcessResources)>,
}

impl<'a> Family<'a> {
    /// The pid the family's memory is known by: its lowest.
    pub fn pid(&self) -> i32 {
        self.members[0].0
    }

    /// Its other members' pids.
    pub fn others(&self) -> Vec<i32> {
        self.members[1..].iter().map(|(p, _)| *p).collect()
    }

    /// The guest memory they all map.
    pub fn mem(&self) -> &Arc<platform::GuestMemory> {
        &self.members[0].1.mem
    }

    pub fn contains(&self, pid: i32) -> bool {
        self.members.iter().any(|(p, _)| *p == pid)
    }
}

/// The families of `live`, ordered by their lowest pid (`kernel::task::by_memory`, which a
/// checkpoint groups them by too: its memory image goes by the same pid).
pub(super) fn of(live: &[(i32, ProcessResources)]) -> Vec<Family<'_>> {
    kernel::task::by_memory(live)
        .into_iter()
        .map(|group| Family {
            members: group.into_iter().map(|(pid, res)| (*pid, res)).collect(),
        })
        .collect()
}

/// Matches the kept memories `kept` to `families` by the memory they describe, and returns
/// them keyed by their family's pid. Those of memories no live process maps any more (every
/// process of the family exited, or execve replaced the memory) lose their files.
pub(super) fn rekey(
    kept: BTreeMap<i32, ProcessMemory>,
    families: &[Family<'_>],
) -> BTreeMap<i32, ProcessMemory> {
    let mut out = BTreeMap::new();
    for (_, pm) in kept {
        match families.iter().find(|f| Arc::ptr_eq(f.mem(), &pm.mem)) {
            Some(f) if !out.contains_key(&f.pid()) => {
                out.insert(f.pid(), pm);
            }
            _ => pm.remove_files(),
        }
    }
    out
}

/// The file-name prefix of a new memory for `family`: none (`swap.N`) if it holds the
/// sandbox's first process `first`, else `-PID` for the first of its pids; the first of
/// these no kept memory's files are named by (a family keeps the names its memory was first
/// deflated under when the process that gave them exits or execs, and pids come back), or
/// `None` when every one is taken.
pub(super) fn fresh_prefix<'m>(
    family: &Family<'_>,
    first: i32,
    kept: impl Iterator<Item = &'m ProcessMemory>,
) -> Option<String> {
    let taken: HashSet<&str> = kept.map(|pm| pm.prefix.as_str()).collect();
    family
        .contains(first)
        .then(String::new)
        .into_iter()
        .chain(family.members.iter().map(|(p, _)| format!("-{p}")))
        .find(|p| !taken.contains(p.as_str()))
}
