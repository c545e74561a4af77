//! The sandbox's processes: ids, parents, exit statuses awaiting wait4(2), and the vfork
//! hand-off (Linux's pid namespace and `release_task`, in part).
//!
//! Every process of a sandbox (the first one, and those fork(2) made) has an entry here from
//! its creation until its parent reaps it. Thread and process ids come from one counter, so a
//! tid never collides with another process's pid.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use abi::Errno;

use super::job_control::JobEvent;
use super::{ExitStatus, ProcessResources, ThreadGroup};

/// Which children wait4(2) waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitFor {
    /// Any child (pid -1).
    Any,
    /// This child.
    Pid(i32),
    /// Any child in this process group (pid 0: the caller's group; pid < -1: group -pid).
    Group(i32),
}

/// How a process may change its process group (setpgid(2)'s checks, in the table's terms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Membership {
    /// Process group id.
    pub pgid: i32,
    /// Session id.
    pub sid: i32,
}

struct Entry {
    ppid: i32,
    /// Process group and session.
    member: Membership,
    /// Whether the process has called execve (setpgid by its parent is then EACCES).
    execed: bool,
    /// Signal sent to this process when its parent exits (PR_SET_PDEATHSIG), or 0.
    pdeathsig: i32,
    /// Event fds of pidfds on this process, written once when it exits.
    exit_watchers: Vec<std::sync::Arc<std::os::fd::OwnedFd>>,
    group: Arc<ThreadGroup>,
    status: Option<ExitStatus>,
    /// Signal sent to the parent on exit (SIGCHLD, or 0).
    exit_signal: i32,
    /// A vfork parent waits until this is set (the child exec'd or exited).
    vfork_released: bool,
    /// A stop or continue its parent's wait has not reported yet.
    job: Option<JobEvent>,
    /// PR_SET_CHILD_SUBREAPER: orphaned descendants are reparented to it, not to the first
    /// process.
    subreaper: bool,
}

/// Which changes of a child's state a wait reports (wait4's and waitid's options).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitWant {
    /// An exit (waitid's `WEXITED`; always for wait4).
    pub exited: bool,
    /// A stop (`WUNTRACED`, `WSTOPPED`).
    pub stopped: bool,
    /// A continue (`WCONTINUED`).
    pub continued: bool,
}

impl WaitWant {
    /// Exits only (wait4 without options).
    pub const EXITED: WaitWant = WaitWant {
        exited: true,
        stopped: false,
        continued: false,
    };
}

/// What a wait found of a child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildEvent {
    /// It exited (reaped unless the wait asked to leave it).
    Exited {
        /// How it ended.
        status: ExitStatus,
        /// With a core dump.
        core: bool,
        /// Its CPU time and its reaped descendants' (wait4's rusage).
        cpu: super::cputime::UserSys,
    },
    /// It stopped or continued.
    Job(JobEvent),
}

/// A `SIGEV_THREAD` notification's netlink socket (held weakly: it goes with its last
/// descriptor) and the sending end of the channel now behind it.
pub type MqChannel = (
    std::sync::Weak<crate::fd::OpenFile>,
    Arc<std::os::fd::OwnedFd>,
);

/// The process table of one sandbox.
pub struct ProcessTable {
    next_id: AtomicI32,
    /// Live tasks (threads of every process) and the most there may be (`--pids-limit`).
    tasks: Arc<TaskCount>,
    procs: Mutex<HashMap<i32, Entry>>,
    changed: Condvar,
    /// The sandbox's shared memory (MAP_SHARED objects, System V segments), which every
    /// process's VM may attach.
    pub shm: Arc<mm::SharedSpace>,
    /// Futex queues of words in shared memory, keyed by guest-physical address (the same in
    /// every VM), for the futex calls of different processes to meet.
    pub shared_futexes: super::FutexTable,
    /// The sandbox's System V shared memory segments.
    pub sysv_shm: Arc<crate::ipc::ShmTable>,
    /// The sandbox's System V semaphore sets.
    pub sysv_sem: Arc<crate::ipc::SemTable>,
    /// The sandbox's System V message queues.
    pub sysv_msg: Arc<crate::ipc::msg::MsgTable>,
    /// The sandbox's POSIX message queues.
    pub posix_mq: Arc<crate::ipc::mqueue::MqNamespace>,
    /// The events its processes' AIO contexts asked for (`/proc/sys/fs/aio-nr`).
    pub aio_nr: crate::aio::AioCount,
    /// The sandbox's own `/proc/sys/fs/pipe-max-size` once its root wrote it (0: the
    /// host's, which the host enforces anyway).
    pub pipe_max_size: AtomicU64,
    /// The sandbox's own `/proc/sys/fs/inotify/max_user_instances` once its root wrote it
    /// (0: the host's). The host's limit still applies above it, as a parent user
    /// namespace's does on Linux.
    pub inotify_max_instances: AtomicU64,
    /// The netlink sockets of `SIGEV_THREAD` message queue notifications, each with the end
    /// of its channel torpor sends cookies through (`syscalls::sys_mq`).
    pub mq_channels: Mutex<Vec<MqChannel>>,
    /// `/proc/sys/kernel/core_pattern`, the sandbox's own (its root may write it): the
    /// name core dumps get (`coredump.rs`).
    pub core_pattern: Mutex<Vec<u8>>,
    /// The pages every process's allocator holds together, bounded by the sandbox's memory
    /// limit; when a fault finds it exhausted, [`ProcessTable::out_of_memory`] picks a victim.
    pub memory: Arc<mm::MemoryBudget>,
    /// The process the OOM killer last chose, and when, while it dies.
    /// Its address space is held weakly: the victim is dying until its pages are given back
    /// (its last thread gone and its address space dropped), not merely until it leaves.
    oom_victim: Mutex<Option<OomVictim>>,
    /// The sandbox's node name (uname), shared by all its processes as one UTS namespace.
    nodename: Mutex<Vec<u8>>,
    /// The sandbox's boot id (`/proc/sys/kernel/random/boot_id`): drawn when the sandbox is
    /// made, kept by a checkpoint's restore, drawn anew for a clone or a fork.
    boot_id: Mutex<[u8; 16]>,
    /// The sandbox's NIS domain name (uname's `domainname`, `(none)` until set).
    domainname: Mutex<Vec<u8>>,
    /// The foreground process group of each session's terminal (TIOCSPGRP), by session id: a
    /// session without an entry has its leader's group in the foreground.
    foreground: Mutex<HashMap<i32, i32>>,
}

/// The process the OOM killer chose.
struct OomVictim {
    pid: i32,
    mm: std::sync::Weak<Mutex<mm::MemoryManager>>,
    when: std::time::Instant,
}

/// What a task whose fault found the sandbox's memory exhausted does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OomAction {
    /// It is the victim: it dies with SIGKILL.
    KillSelf,
    /// Another process is dying to free memory: retry the fault shortly.
    Retry,
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
            shm: mm::SharedSpace::new(),
            shared_futexes: super::FutexTable::default(),
            sysv_shm: Arc::default(),
            sysv_sem: Arc::default(),
            sysv_msg: Arc::default(),
            posix_mq: Arc::default(),
            aio_nr: crate::aio::AioCount::default(),
            pipe_max_size: AtomicU64::new(0),
            inotify_max_instances: AtomicU64::new(0),
            mq_channels: Mutex::new(Vec::new()),
            core_pattern: Mutex::new(super::coredump::CORE_PATTERN.as_bytes().to_vec()),
            memory: mm::MemoryBudget::new(u64::MAX),
            oom_victim: Mutex::new(None),
            nodename: Mutex::new(b"torpor".to_vec()),
            boot_id: Mutex::new(new_boot_id()),
            domainname: Mutex::new(b"(none)".to_vec()),
            foreground: Mutex::new(HashMap::new()),
        }
    }
}

/// A random (version 4) UUID's bytes.
pub fn new_boot_id() -> [u8; 16] {
    let mut b = [0u8; 16];
    let _ = crate::task::host::random(&mut b, 0);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    b
}

/// Stores one of the sandbox's UTS names, at most 64 bytes (Linux's `__NEW_UTS_LEN`).
fn set_uts_name(slot: &Mutex<Vec<u8>>, name: &[u8]) {
    let mut b = name.to_vec();
    b.truncate(64);
    *slot.lock().unwrap_or_else(|e| e.into_inner()) = b;
}

/// One of the sandbox's UTS names.
fn uts_name(slot: &Mutex<Vec<u8>>) -> Vec<u8> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).clone()
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

    /// Sets the node name uname reports (at most 64 bytes are kept, as Linux's
    /// `__NEW_UTS_LEN`).
    pub fn set_nodename(&self, name: &[u8]) {
        set_uts_name(&self.nodename, name);
    }

    /// The node name uname reports.
    pub fn nodename(&self) -> Vec<u8> {
        uts_name(&self.nodename)
    }

    /// The sandbox's boot id.
    pub fn boot_id(&self) -> [u8; 16] {
        *self.boot_id.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the sandbox's boot id (a restore's, or a new one for a clone).
    pub fn set_boot_id(&self, id: [u8; 16]) {
        *self.boot_id.lock().unwrap_or_else(|e| e.into_inner()) = id;
    }

    /// Sets the domain name uname reports (setdomainname; at most 64 bytes).
    pub fn set_domainname(&self, name: &[u8]) {
        set_uts_name(&self.domainname, name);
    }

    /// The domain name uname reports.
    pub fn domainname(&self) -> Vec<u8> {
        uts_name(&self.domainname)
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

    /// Registers process `pid` (the leader of `group`), child of `ppid` (0 for a process
    /// with no parent inside: the first one, an OCI exec'd one). A child joins its parent's
    /// process group and session; one without a parent leads a session of its own.
    pub fn add(&self, pid: i32, ppid: i32, group: Arc<ThreadGroup>, exit_signal: i32) {
        let mut p = self.lock();
        let member = p.get(&ppid).map_or(
            Membership {
                pgid: pid,
                sid: pid,
            },
            |e| e.member,
        );
        p.insert(
            pid,
            Entry {
                ppid,
                member,
                execed: false,
                pdeathsig: 0,
                exit_watchers: Vec::new(),
                group,
                status: None,
                exit_signal,
                vfork_released: false,
                job: None,
                subreaper: false,
            },
        );
    }

    /// Records that `pid` has exited (its last thread left). Its children go to the first
    /// process. Returns the parent's thread group and the signal to send it, if any; the
    /// caller sends it, then wakes the waiters ([`notify_waiters`](Self::notify_waiters)), so
    /// that the signal is pending when the parent's wait returns, as on Linux.
    pub fn exited(&self, pid: i32, status: ExitStatus) -> Option<(Arc<ThreadGroup>, i32)> {
        // Its SEM_UNDO adjustments are applied first (Linux's exit_sem).
        self.sysv_sem.process_exited(pid);
        let mut p = self.lock();
        // Its children go to the nearest living ancestor that is a subreaper, else to the
        // first process.
        let mut reaper = p.get(&pid).map_or(0, |e| e.ppid);
        while let Some(a) = p.get(&reaper).filter(|a| a.status.is_none()) {
            if a.subreaper {
                break;
            }
            reaper = a.ppid;
        }
        if p.get(&reaper).is_none_or(|a| a.status.is_some()) {
            reaper = 1;
        }
        for e in p.values_mut() {
            if e.ppid == pid {
                e.ppid = reaper;
                // PR_SET_PDEATHSIG: the orphan is told its parent is gone.
                if e.pdeathsig != 0 && e.status.is_none() {
                    e.group.post_signal(e.pdeathsig);
                }
            }
        }
        if let Some(e) = p.get_mut(&pid) {
            for w in e.exit_watchers.drain(..) {
                // SAFETY: writes 8 bytes from a valid buffer to an eventfd the entry owns.
                unsafe {
                    libc::write(
                        std::os::fd::AsRawFd::as_raw_fd(&*w),
                        (&1u64 as *const u64).cast(),
                        8,
                    )
                };
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
        parent.map(|g| (g, sig))
    }

    /// Sets or clears PR_SET_CHILD_SUBREAPER for `pid`.
    pub fn set_subreaper(&self, pid: i32, on: bool) {
        if let Some(e) = self.lock().get_mut(&pid) {
            e.subreaper = on;
        }
    }

    /// Whether `pid` is a child subreaper.
    pub fn is_subreaper(&self, pid: i32) -> bool {
        self.lock().get(&pid).is_some_and(|e| e.subreaper)
    }

    /// Wakes the waits for a child's change.
    pub fn notify_waiters(&self) {
        self.changed.notify_all();
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

    /// The live process that task `id` belongs to: the process `id`, or the one with a thread
    /// `id` (kill(2) and rt_sigqueueinfo(2) take any thread's id for its process).
    pub fn group_of_task(&self, id: i32) -> Option<(i32, Arc<ThreadGroup>)> {
        if let Some(g) = self.group_of(id) {
            return Some((id, g));
        }
        self.live_groups()
            .into_iter()
            .find(|(_, g)| g.has_thread(id))
    }

    /// The thread groups of every live process.
    pub fn live_groups(&self) -> Vec<(i32, Arc<ThreadGroup>)> {
        self.lock()
            .iter()
            .filter(|(_, e)| e.status.is_none())
            .map(|(&pid, e)| (pid, e.group.clone()))
            .collect()
    }

    /// Whether a live process of the sandbox runs the program in file `key` (device,
    /// inode): Linux refuses to open such a file for writing (ETXTBSY).
    pub fn is_running_program(&self, key: (u64, u64)) -> bool {
        self.lock()
            .values()
            .any(|e| e.status.is_none() && e.group.exe_key() == Some(key))
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
        let r = self.wait_child_as(ppid, which, WaitWant::EXITED, nohang, true, interrupted)?;
        Ok(r.and_then(|(pid, e)| match e {
            ChildEvent::Exited { status, .. } => Some((pid, status)),
            ChildEvent::Job(_) => None,
        }))
    }

    /// Waits for a change `want` asks for in a child of `ppid`: an exit (the child is reaped
    /// when `reap`; waitid's `WNOWAIT` leaves it), a stop or a continue (reported once, unless
    /// `reap` is false). `Ok(None)` with `nohang` when children exist but none changed.
    ///
    /// # Errors
    /// ECHILD when `ppid` has no such child; EINTR.
    pub fn wait_child_as(
        &self,
        ppid: i32,
        which: WaitFor,
        want: WaitWant,
        nohang: bool,
        reap: bool,
        interrupted: impl Fn() -> bool,
    ) -> Result<Option<(i32, ChildEvent)>, Errno> {
        let mut p = self.lock();
        loop {
            let mine = |(&pid, e): (&i32, &Entry)| {
                e.ppid == ppid
                    && match which {
                        WaitFor::Any => true,
                        WaitFor::Pid(want) => want == pid,
                        WaitFor::Group(pgid) => e.member.pgid == pgid,
                    }
            };
            if !p.iter().any(mine) {
                return Err(Errno::ECHILD);
            }
            let found =
                p.iter()
                    .filter(|kv| mine(*kv))
                    .find_map(|(&pid, e)| match (e.status, e.job) {
                        (Some(s), _) if want.exited => {
                            let core = e
                                .group
                                .core_dumped
                                .load(std::sync::atomic::Ordering::Relaxed);
                            let cpu = e.group.cpu_for_parent();
                            Some((
                                pid,
                                ChildEvent::Exited {
                                    status: s,
                                    core,
                                    cpu,
                                },
                            ))
                        }
                        (None, Some(j @ JobEvent::Stopped(_))) if want.stopped => {
                            Some((pid, ChildEvent::Job(j)))
                        }
                        (None, Some(j @ JobEvent::Continued)) if want.continued => {
                            Some((pid, ChildEvent::Job(j)))
                        }
                        _ => None,
                    });
            if let Some((pid, event)) = found {
                if reap {
                    match event {
                        ChildEvent::Exited { cpu, .. } => {
                            p.remove(&pid);
                            // The parent gains its CPU time (times' tms_cutime).
                            if let Some(parent) = p.get(&ppid) {
                                *parent
                                    .group
                                    .children_cpu
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner()) += cpu;
                            }
                        }
                        ChildEvent::Job(_) => {
                            if let Some(e) = p.get_mut(&pid) {
                                e.job = None;
                            }
                        }
                    }
                }
                return Ok(Some((pid, event)));
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

    /// Records that live process `pid` stopped or continued, for its parent's wait (a newer
    /// change replaces one not reported yet), and calls `tell` with the parent's thread group,
    /// if it lives, before any waiter wakes (so that its SIGCHLD is pending when the wait
    /// returns, as on Linux).
    pub fn report_job(&self, pid: i32, event: JobEvent, tell: impl FnOnce(&Arc<ThreadGroup>)) {
        let mut p = self.lock();
        let ppid = match p.get_mut(&pid) {
            Some(e) if e.status.is_none() => {
                e.job = Some(event);
                e.ppid
            }
            _ => return,
        };
        let parent = p
            .get(&ppid)
            .filter(|e| e.status.is_none())
            .map(|e| e.group.clone());
        drop(p);
        if let Some(parent) = parent {
            tell(&parent);
        }
        self.changed.notify_all();
    }

    /// Lets a vfork parent go on (the child exec'd), and records the exec (setpgid's
    /// EACCES).
    pub fn release_vfork(&self, pid: i32) {
        if let Some(e) = self.lock().get_mut(&pid) {
            e.vfork_released = true;
            e.execed = true;
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

    /// The sandbox's OOM killer, for process `me` whose fault found the memory budget
    /// exhausted: as Linux's, it kills the process holding the most pages (one at a time: while
    /// a victim is dying, other faults wait and retry), which may be `me`.
    pub fn out_of_memory(&self, me: i32) -> OomAction {
        {
            let mut v = self.oom_victim.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(victim) = v.as_ref() {
                let dying = victim.mm.strong_count() > 0;
                if dying && victim.when.elapsed() < Duration::from_secs(5) {
                    return if victim.pid == me {
                        OomAction::KillSelf
                    } else {
                        OomAction::Retry
                    };
                }
                if !dying && victim.pid != me {
                    // The victim has died since this fault found the budget exhausted: what
                    // it freed may be enough, so the fault runs again before anyone else is
                    // chosen (that fault, if it still fails, finds no victim recorded).
                    *v = None;
                    return OomAction::Retry;
                }
            }
        }
        // Measure without the table's lock (each address space has its own).
        let mut largest: Option<(usize, i32, Arc<ThreadGroup>, ProcessResources)> = None;
        for (pid, g) in self.live_groups() {
            let Some(r) = g.resources() else { continue };
            let pages = {
                let mm = r.mm.lock().unwrap_or_else(|e| e.into_inner());
                mm.held_pages()
            };
            // A tie goes to the younger process (the higher pid), as Linux's
            // `oom_evaluate_task` ends up choosing the last of equals: a child sharing its
            // parent's frames copy-on-write holds as much as the parent.
            if largest
                .as_ref()
                .is_none_or(|(p, chosen, ..)| pages > *p || (pages == *p && pid > *chosen))
            {
                largest = Some((pages, pid, g, r));
            }
        }
        let Some((pages, pid, g, r)) = largest else {
            return OomAction::KillSelf;
        };
        tracing::warn!(
            victim = pid,
            pages,
            "out of sandbox memory: killing the largest process"
        );
        *self.oom_victim.lock().unwrap_or_else(|e| e.into_inner()) = Some(OomVictim {
            pid,
            mm: Arc::downgrade(&r.mm),
            when: std::time::Instant::now(),
        });
        drop(r);
        if pid == me {
            return OomAction::KillSelf;
        }
        g.exit_group(ExitStatus::Signaled(libc::SIGKILL));
        OomAction::Retry
    }

    /// The process group and session of a live process.
    pub fn membership(&self, pid: i32) -> Option<Membership> {
        self.lock()
            .get(&pid)
            .filter(|e| e.status.is_none())
            .map(|e| e.member)
    }

    /// The parent, whether it has exec'd, and the exit signal of a live process (what a
    /// checkpoint saves of its entry beside [`Self::membership`]).
    pub fn entry_of(&self, pid: i32) -> Option<(i32, bool, i32)> {
        self.lock()
            .get(&pid)
            .filter(|e| e.status.is_none())
            .map(|e| (e.ppid, e.execed, e.exit_signal))
    }

    /// Puts back what a checkpoint saved of process `pid`'s entry (already added).
    pub fn restore_entry(&self, pid: i32, member: Membership, execed: bool) {
        if let Some(e) = self.lock().get_mut(&pid) {
            e.member = member;
            e.execed = execed;
        }
    }

    /// How many processes have exited and were not waited for (zombies).
    pub fn exited_count(&self) -> usize {
        self.lock().values().filter(|e| e.status.is_some()).count()
    }

    /// The id the next process or thread gets.
    pub fn next_id(&self) -> i32 {
        self.next_id.load(Ordering::Relaxed)
    }

    /// Sets the id the next process or thread gets (a restore continues the numbering).
    pub fn set_next_id(&self, id: i32) {
        self.next_id.store(id.max(2), Ordering::Relaxed);
    }

    /// The most tasks the sandbox may hold.
    pub fn task_limit(&self) -> usize {
        self.tasks.limit.load(Ordering::SeqCst)
    }

    /// setpgid(2) by `caller` on `pid` (the caller or one of its children) to `pgid` (0:
    /// `pid` itself), with Linux's checks: ESRCH for a process that is neither, EACCES for a
    /// child that has exec'd, EPERM for a session leader, a child in another session, or a
    /// group that does not exist in the caller's session.
    pub fn set_pgid(&self, caller: i32, pid: i32, pgid: i32) -> Result<(), Errno> {
        let pid = if pid == 0 { caller } else { pid };
        let pgid = if pgid == 0 { pid } else { pgid };
        if pgid < 0 {
            return Err(Errno::EINVAL);
        }
        let mut p = self.lock();
        let me = p.get(&caller).map(|e| e.member).ok_or(Errno::ESRCH)?;
        let target = p
            .get(&pid)
            .filter(|e| e.status.is_none() && (pid == caller || e.ppid == caller))
            .ok_or(Errno::ESRCH)?;
        if pid != caller {
            if target.member.sid != me.sid {
                return Err(Errno::EPERM);
            }
            if target.execed {
                return Err(Errno::EACCES);
            }
        }
        if target.member.sid == pid {
            return Err(Errno::EPERM);
        }
        if pgid != pid
            && !p
                .values()
                .any(|e| e.status.is_none() && e.member.pgid == pgid && e.member.sid == me.sid)
        {
            return Err(Errno::EPERM);
        }
        if let Some(e) = p.get_mut(&pid) {
            e.member.pgid = pgid;
        }
        Ok(())
    }

    /// setsid(2): `pid` leads a new session and process group; EPERM if it already leads a
    /// process group.
    pub fn set_sid(&self, pid: i32) -> Result<i32, Errno> {
        let mut p = self.lock();
        if p.iter()
            .any(|(&other, e)| e.status.is_none() && e.member.pgid == pid && other != pid)
            || p.get(&pid).is_some_and(|e| e.member.pgid == pid)
        {
            return Err(Errno::EPERM);
        }
        let e = p.get_mut(&pid).ok_or(Errno::ESRCH)?;
        e.member = Membership {
            pgid: pid,
            sid: pid,
        };
        Ok(pid)
    }

    /// The foreground process group of the terminal of `caller`'s session (TIOCGPGRP): the
    /// one TIOCSPGRP set last, or the caller's own group.
    pub fn foreground(&self, caller: i32) -> Result<i32, Errno> {
        let me = self.membership(caller).ok_or(Errno::ESRCH)?;
        let fg = self.foreground.lock().unwrap_or_else(|e| e.into_inner());
        Ok(fg.get(&me.sid).copied().unwrap_or(me.pgid))
    }

    /// TIOCSPGRP by `caller`: puts process group `pgid` of its own session in the foreground
    /// of the session's terminal. EINVAL for a negative id, EPERM for a group not in the
    /// caller's session (as Linux).
    pub fn set_foreground(&self, caller: i32, pgid: i32) -> Result<(), Errno> {
        if pgid < 0 {
            return Err(Errno::EINVAL);
        }
        let me = self.membership(caller).ok_or(Errno::ESRCH)?;
        let in_session = self
            .lock()
            .values()
            .any(|e| e.status.is_none() && e.member.pgid == pgid && e.member.sid == me.sid);
        if !in_session {
            return Err(Errno::EPERM);
        }
        self.foreground
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(me.sid, pgid);
        Ok(())
    }

    /// Sends `sig` to the foreground process group of the terminal of `pid`'s session, as a
    /// terminal's line discipline does for Ctrl-C (what an attached `exec -t` forwards).
    /// Returns how many processes it reached.
    pub fn signal_foreground(&self, pid: i32, sig: i32) -> usize {
        let Some(me) = self.membership(pid) else {
            return 0;
        };
        let recorded = self
            .foreground
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&me.sid)
            .copied();
        let mut members = recorded.map_or_else(Vec::new, |g| self.group_members(g));
        if members.is_empty() {
            // No group was put in the foreground, or it has gone: the session leader's.
            members = self.group_members(me.pgid);
        }
        for (_, g) in &members {
            g.post_signal(sig);
        }
        members.len()
    }

    /// The thread groups of the live processes of process group `pgid`.
    pub fn group_members(&self, pgid: i32) -> Vec<(i32, Arc<ThreadGroup>)> {
        self.lock()
            .iter()
            .filter(|(_, e)| e.status.is_none() && e.member.pgid == pgid)
            .map(|(&pid, e)| (pid, e.group.clone()))
            .collect()
    }

    /// Records PR_SET_PDEATHSIG (0 clears it).
    pub fn set_pdeathsig(&self, pid: i32, sig: i32) {
        if let Some(e) = self.lock().get_mut(&pid) {
            e.pdeathsig = sig;
        }
    }

    /// The signal PR_GET_PDEATHSIG reports.
    pub fn pdeathsig(&self, pid: i32) -> i32 {
        self.lock().get(&pid).map_or(0, |e| e.pdeathsig)
    }

    /// Whether `pid` has an entry (live, or exited and not yet reaped).
    pub fn exists(&self, pid: i32) -> bool {
        self.lock().contains_key(&pid)
    }

    /// Whether `pid` has exited (or is unknown: reaped).
    pub fn has_exited(&self, pid: i32) -> bool {
        self.lock().get(&pid).is_none_or(|e| e.status.is_some())
    }

    /// Whether `pid` exited and was not reaped yet (a zombie).
    pub fn is_zombie(&self, pid: i32) -> bool {
        self.lock().get(&pid).is_some_and(|e| e.status.is_some())
    }

    /// Asks for `event` (an eventfd) to be written when `pid` exits; written at once when it
    /// already has. ESRCH for an unknown pid.
    pub fn watch_exit(&self, pid: i32, event: Arc<std::os::fd::OwnedFd>) -> Result<(), Errno> {
        let mut p = self.lock();
        let e = p.get_mut(&pid).ok_or(Errno::ESRCH)?;
        if e.status.is_some() {
            // SAFETY: writes 8 bytes from a valid buffer to a valid eventfd.
            unsafe {
                libc::write(
                    std::os::fd::AsRawFd::as_raw_fd(&*event),
                    (&1u64 as *const u64).cast(),
                    8,
                )
            };
        } else {
            e.exit_watchers.push(event);
        }
        Ok(())
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
