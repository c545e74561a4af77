//! The sandbox's processes: ids, parents, exit statuses awaiting wait4(2), and the vfork
//! hand-off (Linux's pid namespace and `release_task`, in part).
//!
//! Every process of a sandbox (the first one, and those fork(2) made) has an entry here from
//! its creation until its parent reaps it. Thread and process ids come from one counter, so a
//! tid never collides with another process's pid.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use abi::Errno;

use super::{ExitStatus, ThreadGroup};

/// Which children wait4(2) waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitFor {
    /// Any child (pid -1, or a process group: the sandbox has one).
    Any,
    /// This child.
    Pid(i32),
}

struct Entry {
    ppid: i32,
    group: Arc<ThreadGroup>,
    status: Option<ExitStatus>,
    /// Signal sent to the parent on exit (SIGCHLD, or 0).
    exit_signal: i32,
    /// A vfork parent waits until this is set (the child exec'd or exited).
    vfork_released: bool,
}

/// The process table of one sandbox.
pub struct ProcessTable {
    next_id: AtomicI32,
    /// Live tasks (threads of every process) and the most there may be (`--pids-limit`).
    tasks: Arc<TaskCount>,
    procs: Mutex<HashMap<i32, Entry>>,
    changed: Condvar,
}

/// How often a blocked wait4 or vfork checks whether it was interrupted.
const POLL: Duration = Duration::from_millis(10);

/// Tasks a sandbox may hold when nothing else is said (the pids limit podman gives a
/// container).
pub const DEFAULT_TASK_LIMIT: usize = 2048;

/// How many tasks (threads, of every process) a sandbox has and may have.
#[derive(Debug)]
pub struct TaskCount {
    live: std::sync::atomic::AtomicUsize,
    limit: std::sync::atomic::AtomicUsize,
}

/// One task's place in the count, given back when the task ends (dropped with it).
#[derive(Debug)]
pub struct TaskSlot(Arc<TaskCount>);

impl Drop for TaskSlot {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Default for ProcessTable {
    fn default() -> Self {
        ProcessTable {
            next_id: AtomicI32::new(2),
            tasks: Arc::new(TaskCount {
                live: std::sync::atomic::AtomicUsize::new(0),
                limit: std::sync::atomic::AtomicUsize::new(DEFAULT_TASK_LIMIT),
            }),
            procs: Mutex::new(HashMap::new()),
            changed: Condvar::new(),
        }
    }
}

impl ProcessTable {
    /// An empty table; the first process is pid 1.
    pub fn new() -> Arc<ProcessTable> {
        Arc::new(ProcessTable::default())
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<i32, Entry>> {
        self.procs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the most tasks the sandbox may hold (`--pids-limit`, `linux.resources.pids`).
    pub fn set_task_limit(&self, n: usize) {
        self.tasks.limit.store(n.max(1), Ordering::SeqCst);
    }

    /// Live tasks.
    pub fn live_tasks(&self) -> usize {
        self.tasks.live.load(Ordering::SeqCst)
    }

    /// A place for one more task, or `EAGAIN` at the limit (as fork and clone fail on Linux
    /// beyond the pids limit).
    pub fn reserve_task(&self) -> Result<TaskSlot, Errno> {
        let c = &self.tasks;
        let limit = c.limit.load(Ordering::SeqCst);
        c.live
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < limit).then_some(n + 1)
            })
            .map_err(|_| Errno::EAGAIN)?;
        Ok(TaskSlot(c.clone()))
    }

    /// A fresh process or thread id.
    pub fn alloc_id(&self) -> i32 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers process `pid` (the leader of `group`), child of `ppid` (0 for the first).
    pub fn add(&self, pid: i32, ppid: i32, group: Arc<ThreadGroup>, exit_signal: i32) {
        self.lock().insert(
            pid,
            Entry {
                ppid,
                group,
                status: None,
                exit_signal,
                vfork_released: false,
            },
        );
    }

    /// Records that `pid` has exited (its last thread left). Its children go to the first
    /// process. Returns the parent's thread group and the signal to send it, if any.
    pub fn exited(&self, pid: i32, status: ExitStatus) -> Option<(Arc<ThreadGroup>, i32)> {
        let mut p = self.lock();
        for e in p.values_mut() {
            if e.ppid == pid {
                e.ppid = 1;
            }
        }
        let (ppid, sig) = match p.get_mut(&pid) {
            Some(e) => {
                e.status = Some(status);
                e.vfork_released = true;
                (e.ppid, e.exit_signal)
            }
            None => return None,
        };
        // Nobody waits for the first process, nor for orphans of an exited parent.
        if ppid == 0 {
            p.remove(&pid);
        }
        let parent = p
            .get(&ppid)
            .filter(|e| e.status.is_none())
            .map(|e| e.group.clone());
        drop(p);
        self.changed.notify_all();
        parent.map(|g| (g, sig))
    }

    /// The parent of `pid` (0 for the first process or an unknown pid).
    pub fn parent_of(&self, pid: i32) -> i32 {
        self.lock().get(&pid).map_or(0, |e| e.ppid)
    }

    /// The thread group of a live process.
    pub fn group_of(&self, pid: i32) -> Option<Arc<ThreadGroup>> {
        self.lock()
            .get(&pid)
            .filter(|e| e.status.is_none())
            .map(|e| e.group.clone())
    }

    /// The thread groups of every live process.
    pub fn live_groups(&self) -> Vec<(i32, Arc<ThreadGroup>)> {
        self.lock()
            .iter()
            .filter(|(_, e)| e.status.is_none())
            .map(|(&pid, e)| (pid, e.group.clone()))
            .collect()
    }

    /// Number of live processes.
    pub fn live(&self) -> usize {
        self.lock().values().filter(|e| e.status.is_none()).count()
    }

    /// Reaps a child of `ppid` that has exited, as wait4(2): `Ok(Some((pid, status)))`, or
    /// `Ok(None)` with `nohang` when children exist but none has exited. Blocks otherwise
    /// until one exits or `interrupted` returns true (EINTR).
    ///
    /// # Errors
    /// ECHILD when `ppid` has no such child; EINTR.
    pub fn wait_child(
        &self,
        ppid: i32,
        which: WaitFor,
        nohang: bool,
        interrupted: impl Fn() -> bool,
    ) -> Result<Option<(i32, ExitStatus)>, Errno> {
        let mut p = self.lock();
        loop {
            let mine = |(&pid, e): (&i32, &Entry)| {
                e.ppid == ppid && (which == WaitFor::Any || which == WaitFor::Pid(pid))
            };
            if !p.iter().any(mine) {
                return Err(Errno::ECHILD);
            }
            let done = p
                .iter()
                .filter(|kv| mine(*kv))
                .find_map(|(&pid, e)| e.status.map(|s| (pid, s)));
            if let Some((pid, status)) = done {
                p.remove(&pid);
                return Ok(Some((pid, status)));
            }
            if nohang {
                return Ok(None);
            }
            if interrupted() {
                return Err(Errno::EINTR);
            }
            p = self
                .changed
                .wait_timeout(p, POLL)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Lets a vfork parent go on (the child exec'd).
    pub fn release_vfork(&self, pid: i32) {
        if let Some(e) = self.lock().get_mut(&pid) {
            e.vfork_released = true;
        }
        self.changed.notify_all();
    }

    /// Blocks a vfork parent until `child` execs or exits, or `interrupted` returns true.
    pub fn wait_vfork(&self, child: i32, interrupted: impl Fn() -> bool) {
        let mut p = self.lock();
        while p.get(&child).is_some_and(|e| !e.vfork_released) && !interrupted() {
            p = self
                .changed
                .wait_timeout(p, POLL)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Ends every live process but `keep` (the first process exited: like Linux's pid
    /// namespace, the sandbox goes with it) and waits until their threads are gone.
    pub fn kill_all_but(&self, keep: i32) {
        let others: Vec<Arc<ThreadGroup>> = self
            .live_groups()
            .into_iter()
            .filter(|(pid, _)| *pid != keep)
            .map(|(_, g)| g)
            .collect();
        for g in &others {
            g.exit_group(ExitStatus::Signaled(libc::SIGKILL));
        }
        for g in &others {
            g.wait_all_gone();
        }
    }
}

#[cfg(test)]
mod task_limit_tests {
    use super::*;

    #[test]
    fn slots_are_counted_and_given_back() {
        let p = ProcessTable::new();
        p.set_task_limit(2);
        let a = p.reserve_task().unwrap();
        let b = p.reserve_task().unwrap();
        assert_eq!(p.reserve_task().unwrap_err(), Errno::EAGAIN);
        assert_eq!(p.live_tasks(), 2);
        drop(a);
        let _c = p.reserve_task().unwrap();
        drop(b);
        assert_eq!(p.live_tasks(), 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_start_after_the_first_process() {
        let t = ProcessTable::new();
        assert_eq!(t.alloc_id(), 2);
        assert_eq!(t.alloc_id(), 3);
    }
}
