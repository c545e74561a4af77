//! Thread groups: what the threads of one process share beyond the address space: the
//! platform's address space (to make contexts for new threads), thread ids, the exit status,
//! futex wait queues (Linux's `struct signal_struct`, in part).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use platform::{AddressSpace, Platform};

use super::{ExitStatus, ProcessTable, TaskControl};

/// One thread as its group sees it.
struct Member {
    tid: i32,
    control: Arc<TaskControl>,
}

/// Shared by the threads of a process.
pub struct ThreadGroup {
    /// Process id (the leader's tid).
    pub pid: i32,
    /// The sandbox's processes (ids come from there).
    pub procs: Arc<ProcessTable>,
    /// The platform the process runs on.
    pub platform: Arc<dyn Platform>,
    space: Mutex<Arc<dyn AddressSpace>>,
    members: Mutex<Vec<Member>>,
    exit: Mutex<Option<ExitStatus>>,
    all_gone: Condvar,
    /// Futex wait queues, by user address.
    pub futexes: FutexTable,
    /// Resource limits (inherited by fork).
    pub rlimits: Mutex<super::rlimit::Rlimits>,
    stop: Mutex<StopState>,
    stop_cv: Condvar,
    /// The process's address space, memory and descriptors, for the hibernator (which
    /// deflates every process of a sandbox from one thread); `None` once the last thread left.
    resources: Mutex<Option<ProcessResources>>,
    /// The process's signalfds, told of every signal queued to it.
    signalfds: Mutex<Vec<std::sync::Weak<super::signalfd::SignalFd>>>,
    /// ITIMER_REAL (setitimer, alarm).
    pub real_timer: Arc<super::itimer::RealTimer>,
    /// The process's CPU time (its threads' host clocks).
    pub cpu: super::cputime::ProcessCpu,
    /// ITIMER_VIRTUAL (SIGVTALRM) and ITIMER_PROF (SIGPROF).
    pub cpu_timers: [Arc<super::itimer::CpuTimer>; 2],
    /// The POSIX timers (timer_create).
    pub posix_timers: Arc<super::posix_timer::PosixTimers>,
    /// The Linux AIO contexts (io_setup).
    pub aio: crate::aio::AioContexts,
    /// When the process started, on the host's boot-time clock (`/proc/PID/stat`'s
    /// `starttime`; a restored process's is its restore).
    pub started: std::time::Duration,
    /// What other processes see of this one in /proc.
    identity: Mutex<ProcIdentity>,
    /// The (device, inode) of the program it runs: writing to that file is ETXTBSY, as on
    /// Linux, while the process lives ([`ProcessTable::is_running_program`]).
    exe_key: Mutex<Option<(u64, u64)>>,
    /// The thread running an execve that ends every other thread (Linux's `de_thread`).
    execing: Mutex<Option<i32>>,
    /// The execution domain and flags of personality(2), inherited by fork and kept by exec.
    pub personality: std::sync::atomic::AtomicU32,
    /// User and system time of its reaped children and their descendants (`times`'
    /// `tms_cutime`, `getrusage(RUSAGE_CHILDREN)`).
    pub children_cpu: Mutex<super::cputime::UserSys>,
    /// Its own user and system time, fixed when its last thread left.
    final_cpu: Mutex<Option<super::cputime::UserSys>>,
    /// Whether the process ended with a core dump (its parent's `WCOREDUMP`, `CLD_DUMPED`).
    pub core_dumped: std::sync::atomic::AtomicBool,
    /// Job control: stopped by a stop signal, or running.
    pub job: super::job_control::JobControl,
    /// Whether SIGCHLD's action has SA_NOCLDSTOP: the process is not told of its children's
    /// stops and continues.
    pub no_child_stop: std::sync::atomic::AtomicBool,
    /// The I/O priority of ioprio_set(2) (Linux's `io_context->ioprio`, per thread there; kept
    /// per process here), 0 (class NONE) until set; inherited by fork.
    pub ioprio: AtomicU32,
    /// membarrier(2)'s registrations (Linux's `mm->membarrier_state`): the
    /// `MEMBARRIER_CMD_REGISTER_*` bits taken; copied by fork, cleared by execve.
    pub membarrier: AtomicU32,
    /// The watcher of RLIMIT_CPU (SIGXCPU, then SIGKILL).
    pub cpu_limit: super::cpu_limit::CpuLimit,
    /// `/proc/PID/coredump_filter` (Linux's `MMF_DUMP_FILTER` bits of `mm->flags`): which
    /// kinds of mapping a core dump writes ([`super::coredump::DEFAULT_FILTER`] until
    /// changed); inherited by fork, kept by execve.
    pub coredump_filter: AtomicU32,
}

/// What /proc shows of a process to the sandbox's other processes (its own threads read their
/// task): program, arguments, name and ids, published by the process's first thread.
#[derive(Clone, Default)]
pub struct ProcIdentity {
    /// Guest path of the executable.
    pub exe: Vec<u8>,
    /// Arguments, each NUL-terminated.
    pub cmdline: Arc<[u8]>,
    /// The environment it was started with, each entry NUL-terminated.
    pub environ: Arc<[u8]>,
    /// Name (PR_SET_NAME), NUL-padded.
    pub comm: [u8; 16],
    /// Its credentials (ids for /proc, signal and `/proc/PID` permission checks).
    pub creds: Arc<super::Credentials>,
}

impl ProcIdentity {
    /// Its name (`comm` up to its first NUL).
    pub fn name(&self) -> String {
        let c = self.comm.split(|&b| b == 0).next().unwrap_or(b"");
        String::from_utf8_lossy(c).into_owned()
    }

    /// Its arguments (`cmdline` split at its NULs).
    pub fn args(&self) -> Vec<String> {
        self.cmdline
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    }
}

/// What of a process is reached from outside its own threads: its address space, guest
/// memory and descriptor table.
#[derive(Clone)]
pub struct ProcessResources {
    /// The address space.
    pub mm: Arc<Mutex<mm::MemoryManager>>,
    /// Its guest memory.
    pub mem: Arc<platform::GuestMemory>,
    /// The descriptor table.
    pub fds: Arc<crate::fd::FdTable>,
    /// The platform's address space over the memory.
    pub space: Arc<dyn AddressSpace>,
}

/// `processes` grouped by the guest memory they map (a process alone, or a family: one that
/// forked copy-on-write and its children), each group by pid and the groups by their lowest
/// pid, which names a family's memory (its checkpoint image, its swap files).
pub fn by_memory(processes: &[(i32, ProcessResources)]) -> Vec<Vec<&(i32, ProcessResources)>> {
    let mut groups: Vec<Vec<&(i32, ProcessResources)>> = Vec::new();
    for p in processes {
        match groups
            .iter_mut()
            .find(|g| Arc::ptr_eq(&g[0].1.mem, &p.1.mem))
        {
            Some(g) => g.push(p),
            None => groups.push(vec![p]),
        }
    }
    for g in &mut groups {
        g.sort_by_key(|(pid, _)| *pid);
    }
    groups.sort_by_key(|g| g[0].0);
    groups
}

/// Whether the group's threads are being held (hibernation), and how many are.
#[derive(Default)]
struct StopState {
    stopped: bool,
    parked: usize,
    /// Raised to ask every parked thread for its state (a checkpoint).
    capture_gen: u64,
    /// The states the parked threads gave since the last request.
    captured: Vec<Result<super::captured::Captured, String>>,
}

impl ThreadGroup {
    /// The process's CPU time: its threads' host threads' and, where the platform runs the
    /// application's code in a host process of its own, that process's.
    pub fn cpu_time(&self) -> std::time::Duration {
        let clock = self
            .space
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cpu_clock();
        self.cpu.total(clock)
    }

    /// The group of process `pid`, whose threads run in `space` on `platform`.
    pub fn new(
        platform: Arc<dyn Platform>,
        space: Arc<dyn AddressSpace>,
        pid: i32,
        procs: Arc<ProcessTable>,
    ) -> Arc<ThreadGroup> {
        Arc::new(ThreadGroup {
            pid,
            procs,
            platform,
            space: Mutex::new(space),
            members: Mutex::new(Vec::new()),
            exit: Mutex::new(None),
            all_gone: Condvar::new(),
            futexes: FutexTable::default(),
            rlimits: Mutex::new(super::rlimit::Rlimits::default()),
            stop: Mutex::new(StopState::default()),
            stop_cv: Condvar::new(),
            resources: Mutex::new(None),
            signalfds: Mutex::new(Vec::new()),
            real_timer: Arc::default(),
            cpu: super::cputime::ProcessCpu::default(),
            cpu_timers: [
                Arc::new(super::itimer::CpuTimer::new(libc::SIGVTALRM)),
                Arc::new(super::itimer::CpuTimer::new(libc::SIGPROF)),
            ],
            posix_timers: Arc::default(),
            aio: crate::aio::AioContexts::default(),
            started: super::cputime::boot_time(),
            identity: Mutex::new(ProcIdentity::default()),
            exe_key: Mutex::new(None),
            execing: Mutex::new(None),
            personality: std::sync::atomic::AtomicU32::new(0),
            core_dumped: std::sync::atomic::AtomicBool::new(false),
            children_cpu: Mutex::default(),
            final_cpu: Mutex::new(None),
            job: super::job_control::JobControl::default(),
            no_child_stop: std::sync::atomic::AtomicBool::new(false),
            ioprio: AtomicU32::new(0),
            membarrier: AtomicU32::new(0),
            cpu_limit: super::cpu_limit::CpuLimit::default(),
            coredump_filter: AtomicU32::new(super::coredump::DEFAULT_FILTER),
        })
    }

    /// Whether thread `tid` must leave: the process is exiting, or another thread's execve
    /// ends it.
    pub fn must_leave(&self, tid: i32) -> bool {
        self.exit_status().is_some() || self.execing_thread().is_some_and(|e| e != tid)
    }

    /// The thread whose execve is ending the others, if any: every other thread leaves at its
    /// next exit from the guest.
    pub fn execing_thread(&self) -> Option<i32> {
        *self.execing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// execve from a thread of a multi-threaded process: every other thread is asked to leave
    /// (kicked out of the guest and of blocking calls), and this returns once `me` is the
    /// only one, which then takes the process id as its thread id. False (and nothing
    /// changed for `me`) if the others did not leave within `timeout` or the group is exiting.
    pub fn end_other_threads(&self, me: i32, pid: i32, timeout: Duration) -> bool {
        *self.execing.lock().unwrap_or_else(|e| e.into_inner()) = Some(me);
        let start = std::time::Instant::now();
        let done = loop {
            let others: Vec<Arc<TaskControl>> = self
                .lock_members()
                .iter()
                .filter(|m| m.tid != me)
                .map(|m| m.control.clone())
                .collect();
            if others.is_empty() {
                break true;
            }
            if start.elapsed() >= timeout || self.exit_status().is_some() {
                break false;
            }
            for c in &others {
                c.kick();
            }
            self.futexes.wake_all();
            std::thread::sleep(Duration::from_millis(1));
        };
        *self.execing.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if done {
            if let Some(m) = self.lock_members().iter_mut().find(|m| m.tid == me) {
                m.tid = pid;
            }
        }
        done
    }

    /// Publishes what /proc shows of the process.
    pub fn set_identity(&self, id: ProcIdentity) {
        *self.identity.lock().unwrap_or_else(|e| e.into_inner()) = id;
    }

    /// What /proc shows of the process.
    pub fn identity(&self) -> ProcIdentity {
        self.identity
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Registers a signalfd of the process.
    pub fn add_signalfd(&self, s: &Arc<super::signalfd::SignalFd>) {
        let mut v = self.signalfds.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(s));
    }

    /// Tells the process's signalfds that `sig` was queued.
    pub fn notify_signalfds(&self, sig: i32) {
        let v = self.signalfds.lock().unwrap_or_else(|e| e.into_inner());
        for s in v.iter().filter_map(std::sync::Weak::upgrade) {
            s.notify(sig);
        }
    }

    /// Records the process's address space, memory and descriptors (at its start, and again
    /// when execve replaces the first two).
    pub fn set_resources(&self, r: ProcessResources) {
        *self.resources.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
    }

    /// The process's address space, memory and descriptors, while it has a thread.
    pub fn resources(&self) -> Option<ProcessResources> {
        self.resources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The address space (new threads get contexts from it).
    pub fn space(&self) -> Arc<dyn AddressSpace> {
        self.space.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the address space (execve built a new one).
    pub fn set_space(&self, space: Arc<dyn AddressSpace>) {
        *self.space.lock().unwrap_or_else(|e| e.into_inner()) = space;
    }

    /// A fresh thread id (unique in the sandbox).
    pub fn alloc_tid(&self) -> i32 {
        self.procs.alloc_id()
    }

    /// Whether thread `tid` lives in the group.
    pub fn has_thread(&self, tid: i32) -> bool {
        self.lock_members().iter().any(|m| m.tid == tid)
    }

    /// Sends thread `tid` of the group a signal (tgkill from another thread); false if no
    /// such thread lives.
    pub fn signal_thread(&self, tid: i32, sig: i32) -> bool {
        self.signal_thread_info(tid, sig, None)
    }

    /// [`signal_thread`](Self::signal_thread) with the siginfo the thread must see (tgkill:
    /// SI_TKILL and the sender's pid and uid).
    pub fn signal_thread_info(&self, tid: i32, sig: i32, info: Option<super::SigInfo>) -> bool {
        self.job_signal_sent(sig);
        match self.lock_members().iter().find(|m| m.tid == tid) {
            Some(m) => {
                if sig != 0 {
                    match info {
                        Some(i) => m.control.send_siginfo(i),
                        None => m.control.send_signal(sig),
                    }
                    self.notify_signalfds(sig);
                }
                true
            }
            None => false,
        }
    }

    /// Whether a real-time signal sent to thread `tid` with a user siginfo would exceed the
    /// process's RLIMIT_SIGPENDING (Linux: EAGAIN, "queue overflow"). Linux counts the queued
    /// signals of the receiving user across processes; here those of the receiving thread,
    /// which is what a limit lowered to stop a flood bounds.
    pub fn queue_full(&self, tid: i32) -> bool {
        let limit = self
            .rlimits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(libc::RLIMIT_SIGPENDING)
            .map_or(u64::MAX, |l| l.cur);
        let queued = self
            .lock_members()
            .iter()
            .find(|m| m.tid == tid)
            .map_or(0, |m| m.control.queued_infos());
        queued as u64 + 1 > limit
    }

    /// Records the program the process runs now (its file's device and inode).
    pub fn set_exe_key(&self, key: Option<(u64, u64)>) {
        *self.exe_key.lock().unwrap_or_else(|e| e.into_inner()) = key;
    }

    /// The program the process runs (its file's device and inode).
    pub fn exe_key(&self) -> Option<(u64, u64)> {
        *self.exe_key.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether every thread of the process is inside a syscall (waiting, as far as another
    /// process can tell: /proc/PID/stat's `S`), not running its own code (`R`).
    pub fn all_in_syscall(&self) -> bool {
        self.lock_members().iter().all(|m| m.control.in_syscall())
    }

    /// Whether the process's first thread (its leader, whose state /proc/PID/stat shows, as
    /// Linux does) is inside a syscall; `None` once it has left (the others may live on).
    pub fn leader_in_syscall(&self) -> Option<bool> {
        self.lock_members()
            .iter()
            .find(|m| m.tid == self.pid)
            .map(|m| m.control.in_syscall())
    }

    /// The control of live thread `tid` of the process, if it is one.
    pub fn member_control(&self, tid: i32) -> Option<Arc<TaskControl>> {
        self.lock_members()
            .iter()
            .find(|m| m.tid == tid)
            .map(|m| m.control.clone())
    }

    /// Sends the process a signal from another process (the first thread takes it).
    pub fn post_signal(&self, sig: i32) {
        self.job_signal_sent(sig);
        if let Some(m) = self.lock_members().first() {
            m.control.send_signal(sig);
        }
        self.notify_signalfds(sig);
    }

    /// [`post_signal`](Self::post_signal) with the siginfo the process must see (the sender's
    /// pid and uid, a child's exit status).
    pub fn post_siginfo(&self, info: super::SigInfo) {
        self.job_signal_sent(info.signo());
        if let Some(m) = self.lock_members().first() {
            m.control.send_siginfo(info);
        }
        self.notify_signalfds(info.signo());
    }

    /// Kicks every thread of the process (a stop or continue for them to notice).
    pub fn kick_all(&self) {
        for m in self.lock_members().iter() {
            m.control.kick();
        }
    }

    /// Takes out of every thread's queue of signals sent from outside those `set` names.
    pub fn discard_sent(&self, set: u64) {
        for m in self.lock_members().iter() {
            m.control.discard(set);
        }
    }

    /// Registers a thread. A thread created while the group is stopped parks before it
    /// first runs.
    pub fn join(&self, tid: i32, control: Arc<TaskControl>) {
        if self.lock_stop().stopped {
            control.set_park();
        }
        self.lock_members().push(Member { tid, control });
    }

    /// Unregisters a thread; when it was the last, the process has exited: its parent is
    /// told (SIGCHLD, wait4) and waiters are woken.
    pub fn leave(&self, tid: i32) {
        let mut m = self.lock_members();
        m.retain(|x| x.tid != tid);
        if !m.is_empty() {
            drop(m);
            // A thread leaving may be the last one a stop waits for.
            self.stop_cv.notify_all();
            return;
        }
        drop(m);
        // Its CPU time is final: its threads' (each added as it ended) and, where the platform
        // runs its code in a host process of its own, that process's, counted as user time.
        let mut own = self.cpu.ended_user_sys();
        let clock = self
            .space
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cpu_clock();
        own.user += clock.and_then(super::cputime::read).unwrap_or_default();
        *self.final_cpu.lock().unwrap_or_else(|e| e.into_inner()) = Some(own);
        // Its timers end with it (Linux's `exit_itimers`), its AIO contexts too (`exit_aio`).
        self.posix_timers.clear();
        self.aio.clear(&self.procs.aio_nr);
        // The memory of an exited process goes now, not when its parent reaps it; its shared
        // mappings too, before the parent may ask a segment's attach count (its threads' tasks
        // may hold the address space a while longer), unless another process shares it
        // (CLONE_VM).
        let resources = self
            .resources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(r) = resources {
            let shared_with_another = self.procs.live_groups().iter().any(|(pid, g)| {
                *pid != self.pid && g.resources().is_some_and(|o| Arc::ptr_eq(&o.mm, &r.mm))
            });
            if !shared_with_another {
                r.mm.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .unmap_shared();
            }
        }
        let status = self
            .exit_status()
            .unwrap_or(ExitStatus::Signaled(libc::SIGKILL));
        if let Some((parent, sig)) = self.procs.exited(self.pid, status) {
            if sig != 0 {
                let uid = self.identity().creds.uid;
                let mut info = super::SigInfo::child(sig, self.pid, uid, status);
                if self.core_dumped.load(std::sync::atomic::Ordering::Relaxed) {
                    const CLD_DUMPED: i32 = 3;
                    info = info.with_code(CLD_DUMPED);
                }
                parent.post_siginfo(info);
            }
        }
        self.procs.notify_waiters();
        let _m = self.lock_members();
        self.all_gone.notify_all();
    }

    /// The ids of the live threads, in increasing order (`/proc/PID/task`).
    pub fn thread_ids(&self) -> Vec<i32> {
        let mut ids: Vec<i32> = self.lock_members().iter().map(|m| m.tid).collect();
        ids.sort_unstable();
        ids
    }

    /// The CPU time its parent gains when it reaps this process: its own and its reaped
    /// descendants'.
    pub fn cpu_for_parent(&self) -> super::cputime::UserSys {
        let mut t = self
            .final_cpu
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unwrap_or_else(|| self.cpu.ended_user_sys());
        t += *self.children_cpu.lock().unwrap_or_else(|e| e.into_inner());
        t
    }

    /// Number of live threads.
    pub fn live(&self) -> usize {
        self.lock_members().len()
    }

    /// Ends the whole group with `status` (exit_group, a fatal signal): every thread is kicked
    /// and leaves at its next exit.
    pub fn exit_group(&self, status: ExitStatus) {
        let mut e = self.exit.lock().unwrap_or_else(|e| e.into_inner());
        if e.is_none() {
            *e = Some(status);
        }
        drop(e);
        for m in self.lock_members().iter() {
            m.control.kick();
        }
        self.futexes.wake_all();
    }

    /// The group's exit status, once it is exiting.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        *self.exit.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until every thread has left. Once the group is exiting, the threads still there
    /// are kicked again every few milliseconds: a kick interrupts a blocking host call under
    /// way, not one a thread was about to make when the kick came (it would wait there).
    pub fn wait_all_gone(&self) {
        let mut m = self.lock_members();
        while !m.is_empty() {
            let (g, timeout) = self
                .all_gone
                .wait_timeout(m, Duration::from_millis(20))
                .unwrap_or_else(|e| e.into_inner());
            m = g;
            if timeout.timed_out() && self.exit_status().is_some() {
                for member in m.iter() {
                    member.control.kick();
                }
                self.futexes.wake_all();
            }
        }
    }

    /// Stops every thread of the group but `me` (the one that will hibernate the process):
    /// each is asked to park, and parks at its next exit or interrupted host call, where it
    /// waits for [`ThreadGroup::resume_others`]. Returns false (and resumes those that
    /// parked) if some thread did not park within `timeout`.
    pub fn stop_others(&self, me: i32, timeout: Duration) -> bool {
        self.lock_stop().stopped = true;
        let start = std::time::Instant::now();
        loop {
            let others: Vec<Arc<TaskControl>> = self
                .lock_members()
                .iter()
                .filter(|m| m.tid != me)
                .map(|m| m.control.clone())
                .collect();
            let st = self.lock_stop();
            if st.parked >= others.len() {
                return true;
            }
            if start.elapsed() >= timeout {
                drop(st);
                self.resume_others();
                return false;
            }
            drop(st);
            for c in &others {
                c.set_park();
            }
            let st = self.lock_stop();
            let _ = self
                .stop_cv
                .wait_timeout(st, Duration::from_millis(2))
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Lets the threads [`ThreadGroup::stop_others`] held go on.
    pub fn resume_others(&self) {
        self.lock_stop().stopped = false;
        self.stop_cv.notify_all();
    }

    /// Called by a thread asked to park without a park hook of its own: waits while the
    /// group is stopped. While it waits, a checkpoint may ask for its state
    /// ([`ThreadGroup::capture_others`]): it gives `capture()` (only its own host thread may
    /// read its vCPU).
    pub fn park_here(&self, capture: impl Fn() -> Result<super::captured::Captured, String>) {
        let mut st = self.lock_stop();
        if !st.stopped {
            return;
        }
        st.parked += 1;
        self.stop_cv.notify_all();
        let mut seen = st.capture_gen;
        while st.stopped {
            if st.capture_gen != seen {
                seen = st.capture_gen;
                drop(st);
                let c = capture();
                st = self.lock_stop();
                st.captured.push(c);
                self.stop_cv.notify_all();
                continue;
            }
            st = self.stop_cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.parked -= 1;
    }

    /// The states of the `count` threads [`ThreadGroup::stop_others`] holds, each captured on
    /// its own host thread; `None` if they do not all answer within `timeout`.
    pub fn capture_others(
        &self,
        count: usize,
        timeout: Duration,
    ) -> Option<Vec<Result<super::captured::Captured, String>>> {
        let start = std::time::Instant::now();
        let mut st = self.lock_stop();
        if !st.stopped {
            return (count == 0).then(Vec::new);
        }
        st.captured.clear();
        st.capture_gen += 1;
        self.stop_cv.notify_all();
        while st.captured.len() < count {
            let left = timeout.checked_sub(start.elapsed())?;
            st = self
                .stop_cv
                .wait_timeout(st, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Some(std::mem::take(&mut st.captured))
    }

    /// Holds the group's threads from their first park until [`ThreadGroup::resume_others`]
    /// (a restored process: its threads wait until the wake).
    pub fn hold_others(&self) {
        self.lock_stop().stopped = true;
    }

    fn lock_stop(&self) -> std::sync::MutexGuard<'_, StopState> {
        self.stop.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_members(&self) -> std::sync::MutexGuard<'_, Vec<Member>> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One waiter: a word the host futex sleeps on (0 = waiting, its tag once woken), its
/// bitset, and the tag a wake writes (1, or for futex_waitv which of its words woke it).
struct Waiter {
    word: Arc<AtomicU32>,
    bitset: u32,
    tag: u32,
}

/// Futex wait queues keyed by user address (the threads share one address space).
#[derive(Default)]
pub struct FutexTable {
    queues: Mutex<HashMap<u64, Vec<Waiter>>>,
}

/// Why a futex wait ended.
#[derive(Debug, PartialEq, Eq)]
pub enum WaitResult {
    /// Woken by FUTEX_WAKE.
    Woken,
    /// The timeout passed.
    TimedOut,
    /// Interrupted (a kick: signal, park request, group exit).
    Interrupted,
}

impl FutexTable {
    /// Queues a waiter on `addr` if `check` (run under the table lock, so no wake is missed
    /// between the value check and the wait) returns true; returns its word, or `None`.
    pub fn enqueue(
        &self,
        addr: u64,
        bitset: u32,
        check: impl FnOnce() -> bool,
    ) -> Option<Arc<AtomicU32>> {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if !check() {
            return None;
        }
        let word = Arc::new(AtomicU32::new(0));
        q.entry(addr).or_default().push(Waiter {
            word: word.clone(),
            bitset,
            tag: 1,
        });
        Some(word)
    }

    /// Queues `word` (shared by several queues: futex_waitv) on `addr` with wake tag `tag`
    /// (non-zero) if `check` (run under the table lock) returns true; whether it did.
    pub fn enqueue_tagged(
        &self,
        addr: u64,
        word: &Arc<AtomicU32>,
        tag: u32,
        check: impl FnOnce() -> bool,
    ) -> bool {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if !check() {
            return false;
        }
        q.entry(addr).or_default().push(Waiter {
            word: word.clone(),
            bitset: u32::MAX,
            tag,
        });
        true
    }

    /// Takes `word`'s waiter off `addr`'s queue, if it is still there.
    pub fn dequeue(&self, addr: u64, word: &Arc<AtomicU32>) {
        self.remove(addr, word);
    }

    /// Sleeps on `word` (host futex: a kick's signal interrupts it) until woken or `timeout`.
    pub fn wait(&self, addr: u64, word: &Arc<AtomicU32>, timeout: Option<Duration>) -> WaitResult {
        let ts = timeout.map(|d| libc::timespec {
            tv_sec: d.as_secs() as i64,
            tv_nsec: i64::from(d.subsec_nanos()),
        });
        let deadline = timeout.map(|d| std::time::Instant::now() + d);
        loop {
            if word.load(Ordering::SeqCst) != 0 {
                return WaitResult::Woken;
            }
            let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            if left == Some(Duration::ZERO) {
                self.remove(addr, word);
                return if word.load(Ordering::SeqCst) != 0 {
                    WaitResult::Woken
                } else {
                    WaitResult::TimedOut
                };
            }
            let ts_left = left.map(|d| libc::timespec {
                tv_sec: d.as_secs() as i64,
                tv_nsec: i64::from(d.subsec_nanos()),
            });
            let _ = ts;
            let tsp = ts_left
                .as_ref()
                .map_or(std::ptr::null(), |t| t as *const libc::timespec);
            // SAFETY: `word` is a live AtomicU32 (u32-sized, aligned); `tsp` is null or points
            // at a local timespec.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    word.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    0u32,
                    tsp,
                )
            };
            if r != 0 {
                match std::io::Error::last_os_error().raw_os_error() {
                    Some(libc::EINTR) => {
                        self.remove(addr, word);
                        return if word.load(Ordering::SeqCst) != 0 {
                            WaitResult::Woken
                        } else {
                            WaitResult::Interrupted
                        };
                    }
                    Some(libc::ETIMEDOUT) => {
                        self.remove(addr, word);
                        return if word.load(Ordering::SeqCst) != 0 {
                            WaitResult::Woken
                        } else {
                            WaitResult::TimedOut
                        };
                    }
                    _ => {} // EAGAIN: already woken; loop checks.
                }
            }
        }
    }

    fn remove(&self, addr: u64, word: &Arc<AtomicU32>) {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = q.get_mut(&addr) {
            v.retain(|w| !Arc::ptr_eq(&w.word, word));
            if v.is_empty() {
                q.remove(&addr);
            }
        }
    }

    fn wake_word(word: &AtomicU32, tag: u32) {
        // The first wake's tag stays (a futex_waitv waiter woken on two of its words).
        let _ = word.compare_exchange(0, tag, Ordering::SeqCst, Ordering::SeqCst);
        // SAFETY: waking waiters on a live AtomicU32.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                1,
            )
        };
    }

    /// Wakes up to `n` waiters on `addr` whose bitset intersects `bitset`; returns how many.
    pub fn wake(&self, addr: u64, n: u32, bitset: u32) -> u32 {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        let Some(v) = q.get_mut(&addr) else { return 0 };
        let mut woken = 0;
        v.retain(|w| {
            if woken < n && w.bitset & bitset != 0 {
                Self::wake_word(&w.word, w.tag);
                woken += 1;
                false
            } else {
                true
            }
        });
        if v.is_empty() {
            q.remove(&addr);
        }
        woken
    }

    /// Wakes up to `n` waiters on `from` and moves up to `m` others to `to`; returns the woken
    /// plus moved count (FUTEX_CMP_REQUEUE's return value).
    pub fn requeue(&self, from: u64, to: u64, n: u32, m: u32) -> u32 {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        let Some(mut v) = q.remove(&from) else {
            return 0;
        };
        let mut count = 0;
        let mut moved = Vec::new();
        for w in v.drain(..) {
            if count < n {
                Self::wake_word(&w.word, w.tag);
                count += 1;
            } else if (moved.len() as u32) < m {
                moved.push(w);
            } else {
                q.entry(from).or_default().push(w);
            }
        }
        count += moved.len() as u32;
        if !moved.is_empty() {
            q.entry(to).or_default().extend(moved);
        }
        count
    }

    /// Wakes every waiter (the group is exiting).
    pub fn wake_all(&self) {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        for (_, v) in q.drain() {
            for w in v {
                Self::wake_word(&w.word, w.tag);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_and_requeue() {
        let t = FutexTable::default();
        let w1 = t.enqueue(0x1000, u32::MAX, || true).unwrap();
        let w2 = t.enqueue(0x1000, 0b10, || true).unwrap();
        assert!(
            t.enqueue(0x1000, u32::MAX, || false).is_none(),
            "value changed: not queued"
        );
        assert_eq!(
            t.wake(0x1000, 5, 0b01),
            1,
            "bitset selects the first waiter only"
        );
        assert_eq!(
            t.wait(0x1000, &w1, Some(Duration::from_millis(1))),
            WaitResult::Woken
        );
        assert_eq!(t.requeue(0x1000, 0x2000, 0, 1), 1);
        assert_eq!(t.wake(0x2000, 1, u32::MAX), 1);
        assert_eq!(t.wait(0x2000, &w2, None), WaitResult::Woken);
        let w3 = t.enqueue(0x3000, u32::MAX, || true).unwrap();
        assert_eq!(
            t.wait(0x3000, &w3, Some(Duration::from_millis(5))),
            WaitResult::TimedOut
        );
        assert_eq!(
            t.wake(0x3000, 1, u32::MAX),
            0,
            "a timed-out waiter left the queue"
        );
    }

    #[test]
    fn a_waiter_is_woken_from_another_thread() {
        let t = Arc::new(FutexTable::default());
        let w = t.enqueue(0x10, u32::MAX, || true).unwrap();
        let t2 = t.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            t2.wake(0x10, 1, u32::MAX)
        });
        assert_eq!(
            t.wait(0x10, &w, Some(Duration::from_secs(5))),
            WaitResult::Woken
        );
        assert_eq!(h.join().unwrap(), 1);
    }
}
