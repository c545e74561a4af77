//! The sandbox as a park hook sees it: the hibernation engine's whole view of the kernel.
//!
//! When the sandbox's first task parks with a hook set ([`ParkHook`](super::ParkHook)), the
//! hook gets a [`ParkedSandbox`], not the task: its processes' address spaces, guest memories
//! and platform spaces, its shared memory, the stopping and resuming of its other threads, its
//! sockets (what wakes it), and its export for a checkpoint
//! (`crate::checkpoint::export`). What a deflate, a wait and an inflate need, and nothing a
//! syscall handler uses.

use std::sync::Arc;
use std::time::Duration;

use super::{ProcessResources, Task, TaskControl, ThreadGroup};
use crate::fd::{FileKind, OpenFile};

/// A sandbox whose first task is parked (see the module doc).
pub struct ParkedSandbox<'a> {
    task: &'a Task,
}

/// Processes whose threads a park stopped: they wait in the kernel until
/// [`StoppedProcesses::resume`].
#[derive(Default)]
pub struct StoppedProcesses {
    groups: Vec<Arc<ThreadGroup>>,
}

impl StoppedProcesses {
    /// Lets every process stopped here run again.
    pub fn resume(self) {
        for g in self.groups {
            g.resume_others();
        }
    }

    fn holds(&self, g: &Arc<ThreadGroup>) -> bool {
        self.groups.iter().any(|s| Arc::ptr_eq(s, g))
    }
}

impl<'a> ParkedSandbox<'a> {
    pub(crate) fn new(task: &'a Task) -> Self {
        ParkedSandbox { task }
    }

    /// The task itself, for the kernel's own use (its checkpoint export).
    pub(crate) fn task(&self) -> &Task {
        self.task
    }

    /// The parked task's process id (the sandbox's first process).
    pub fn pid(&self) -> i32 {
        self.task.pid
    }

    /// The parked task's control (a pending signal is a reason to wake).
    pub fn control(&self) -> &Arc<TaskControl> {
        &self.task.control
    }

    /// Every live process of the sandbox with its address space, guest memory, descriptors
    /// and platform space, the parked task's own last.
    pub fn processes(&self) -> Vec<(i32, ProcessResources)> {
        let t = self.task;
        let mut live: Vec<(i32, ProcessResources)> = t
            .group
            .procs
            .live_groups()
            .into_iter()
            .filter(|(pid, _)| *pid != t.pid)
            .filter_map(|(pid, g)| g.resources().map(|r| (pid, r)))
            .collect();
        live.push((
            t.pid,
            ProcessResources {
                mm: t.mm.clone(),
                mem: t.mem.clone(),
                fds: t.fds.clone(),
                space: t.group.space(),
            },
        ));
        live
    }

    /// The sandbox's shared memory (MAP_SHARED objects, System V segments).
    pub fn shared_memory(&self) -> &mm::SharedSpace {
        &self.task.group.procs.shm
    }

    /// Parks every thread of the sandbox but the caller's: the other threads of its process,
    /// then every other process, again until no new process appeared meanwhile (a fork in
    /// flight), each thread given `timeout`. The processes stopped go into `stopped` (the
    /// caller's own, whose other threads [`Self::resume_own`] lets go, is not among them),
    /// also when this fails. False when some thread did not park in time.
    pub fn stop_all(&self, timeout: Duration, stopped: &mut StoppedProcesses) -> bool {
        let t = self.task;
        if t.group.live() > 1 && !t.group.stop_others(t.tid, timeout) {
            return false;
        }
        loop {
            let new: Vec<_> = t
                .group
                .procs
                .live_groups()
                .into_iter()
                .filter(|(pid, g)| *pid != t.pid && !stopped.holds(g))
                .map(|(_, g)| g)
                .collect();
            if new.is_empty() {
                return true;
            }
            for g in new {
                // No thread of that process is exempt (tid 0 is nobody's).
                if g.stop_others(0, timeout) {
                    stopped.groups.push(g);
                } else {
                    return false;
                }
            }
        }
    }

    /// The sandbox's other processes, as stopped (a restored sandbox's: their threads wait
    /// in the kernel from the restore until the wake).
    pub fn others_as_stopped(&self) -> StoppedProcesses {
        let t = self.task;
        StoppedProcesses {
            groups: t
                .group
                .procs
                .live_groups()
                .into_iter()
                .filter(|(pid, _)| *pid != t.pid)
                .map(|(_, g)| g)
                .collect(),
        }
    }

    /// Lets the other threads of the parked task's process run again.
    pub fn resume_own(&self) {
        self.task.group.resume_others();
    }

    /// Drops, in every process, the page-table entries of file windows (a restored process
    /// has none where they were: their pages fault back from the file).
    pub fn drop_file_window_pages(&self) {
        let t = self.task;
        t.mm().drop_file_window_pages();
        for (pid, g) in t.group.procs.live_groups() {
            if pid != t.pid {
                if let Some(r) = g.resources() {
                    r.mm.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .drop_file_window_pages();
                }
            }
        }
    }

    /// The sockets of every process, each open file once: what may bring the sandbox a
    /// request while it is hibernated.
    pub fn sockets(&self) -> Vec<Arc<OpenFile>> {
        let mut out: Vec<Arc<OpenFile>> = Vec::new();
        for (_, r) in self.processes() {
            for (_, f) in r.fds.iter() {
                if matches!(f.kind, FileKind::Socket(_)) && !out.iter().any(|s| Arc::ptr_eq(s, &f))
                {
                    out.push(f);
                }
            }
        }
        out
    }
}
