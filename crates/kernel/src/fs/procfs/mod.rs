//! A small /proc and /sys: the files language runtimes read about themselves and the machine,
//! generated at open time into an anonymous memory file (`memfd`), so that read, lseek, fstat
//! and mmap work on them as on any file.
//!
//! | path | content |
//! |---|---|
//! | `/proc/self/maps`, `/proc/1/maps` | the address space's VMAs, Linux's format |
//! | `/proc/self/status`, `/proc/self/stat` | identity, state, memory of the process |
//! | `/proc/self/cmdline` | the arguments the program was started with (NUL-separated) |
//! | `/proc/self/environ` | the environment it was started with (another user's: EACCES) |
//! | `/proc/meminfo` | the sandbox's memory limit and free memory |
//! | `/proc/cpuinfo`, `/sys/devices/system/cpu/online` | the host's (what the vCPUs run on) |
//! | `/proc/net/dev`, `/proc/net/if_inet6` | the sandbox's own network namespace's interfaces |
//! | `/proc/stat`, `/proc/uptime`, `/proc/loadavg` | the sandbox's CPU time and processes ([`machine`]) |
//! | `/proc/mounts`, `/proc/self/mounts`, `/proc/self/mountinfo` | the sandbox's mounts ([`mounts`]) |
//! | `/proc/self/statm` | the process's memory in pages |
//! | `/proc/self/smaps` | each VMA's maps line and memory, locked memory included ([`smaps`]) |
//! | `/proc/self/pagemap` | 8 bytes per page, bit 63 for a present page ([`pagemap`]) |
//! | `/proc/self/task/TID/…` | a thread's own stat, status, comm (writable by its process) ([`task_dir`]) |
//! | `/proc/self/ns/…` | links to the sandbox's namespaces, opened as namespace descriptors ([`ns`]) |
//! | `/proc/sys/…` | the tunables programs size themselves by ([`sysctl`]); the IPC ones writable by root |
//! | `/proc/sysvipc/msg`, `shm`, `sem` | the sandbox's System V message queues, segments and semaphore sets ([`crate::ipc`]) |
//!
//! `/proc/self/…` and `/proc/PID/…` with the caller's own pid name the caller's process,
//! `/proc/thread-self/…` the caller's thread (`/proc/PID/task/TID/…`); `readlink` of `/proc/self/fd/N` and `/proc/self/exe` is answered by the
//! syscall layer ([`self_relative`] splits such paths).
//!
//! `/proc`, `/proc/PID`, `/proc/PID/fd`, `/proc/PID/task`, `/proc/PID/task/TID` and `…/ns` are
//! directories ([`GeneratedDir`]): `/proc` lists the sandbox's processes and the machine's
//! files (so `ps`, `top` and `pgrep` find them), `/proc/PID` the files above,
//! `/proc/PID/fd` the process's descriptors, `/proc/PID/task` its threads, `/proc/PID/ns`
//! the namespaces' links.

use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};

use abi::Errno;
use mm::{Prot, VmaKind};

use std::sync::{Arc, Mutex};

use crate::task::{ProcIdentity, Task, ThreadGroup};

mod coredump_filter;
mod fdinfo;
pub mod machine;
pub mod mounts;
pub mod ns;
pub mod pagemap;
pub mod smaps;
pub mod sysctl;
pub mod task_dir;

/// The part after `/proc/self/`, `/proc/thread-self/` or `/proc/PID/` when PID is `pid` (the
/// caller's process), e.g. `maps` or `fd/3`.
pub fn self_relative(path: &[u8], pid: i32) -> Option<&str> {
    let p = std::str::from_utf8(path).ok()?.trim_end_matches('/');
    let rest = p.strip_prefix("/proc/")?;
    let (who, what) = rest.split_once('/')?;
    let me = who == "self" || who == "thread-self" || who.parse::<i32>().ok() == Some(pid);
    me.then_some(what)
}

/// What /proc shows of one process: the caller's own (from its task) or another of the
/// sandbox's (from what its first thread published, and its address space).
struct View {
    pid: i32,
    tid: i32,
    /// A thread's view (`/proc/PID/task/TID/…`): `stat` and `status` show its id.
    thread: bool,
    identity: ProcIdentity,
    umask: u32,
    sigblk: u64,
    /// Pending, ignored and caught signals (known for the caller's own process only).
    sigpnd: u64,
    sigign: u64,
    sigcgt: u64,
    threads: usize,
    /// Its leader thread runs its own code (`R`) or waits in a syscall (`S`), as Linux shows
    /// a process's state; with its leader gone, whether any thread runs; the caller runs.
    running: bool,
    /// Stopped by a stop signal (job control).
    stopped: bool,
    mm: Option<Arc<Mutex<mm::MemoryManager>>>,
    /// CPU time used.
    cpu: std::time::Duration,
    /// Start, on the boot-time clock.
    started: std::time::Duration,
    /// `coredump_filter`'s content.
    coredump_filter: Vec<u8>,
}

impl View {
    fn own(t: &Task) -> View {
        View {
            pid: t.pid,
            tid: t.pid,
            thread: false,
            identity: ProcIdentity {
                exe: t.exe.clone(),
                cmdline: t.cmdline.clone(),
                environ: t.environ.clone(),
                // The process's name is its first thread's.
                comm: t
                    .group
                    .member_control(t.pid)
                    .map_or_else(|| t.comm(), |c| c.comm()),
                creds: t.creds.clone(),
            },
            umask: t.umask(),
            sigblk: t.signals.mask,
            sigpnd: t.signals.pending_mask(),
            sigign: t.signals.disposition_masks().0,
            sigcgt: t.signals.disposition_masks().1,
            threads: t.group.live(),
            // The caller runs; another thread of its process reads its leader's state.
            running: t.tid == t.pid || t.group.leader_in_syscall() != Some(true),
            stopped: false,
            mm: Some(t.mm.clone()),
            cpu: t.group.cpu_time(),
            started: t.group.started,
            coredump_filter: coredump_filter::content(&t.group),
        }
    }

    fn other(pid: i32, g: &Arc<ThreadGroup>) -> View {
        View {
            pid,
            tid: pid,
            thread: false,
            identity: g.identity(),
            umask: 0o022,
            sigblk: 0,
            sigpnd: 0,
            sigign: 0,
            sigcgt: 0,
            threads: g.live(),
            running: g
                .leader_in_syscall()
                .map_or_else(|| !g.all_in_syscall(), |inside| !inside),
            stopped: g.job.is_stopped(),
            mm: g.resources().map(|r| r.mm),
            cpu: g.cpu_time(),
            started: g.started,
            coredump_filter: coredump_filter::content(g),
        }
    }

    /// The view of thread `tid` of the process (`None` if it is not a live thread of it):
    /// its id, name and state (the caller runs; another thread runs unless in a syscall).
    fn of_thread(mut self, t: &Task, tid: i32) -> Option<View> {
        let control = task_dir::control_of(t, self.pid, tid)?;
        self.tid = tid;
        self.thread = true;
        self.identity.comm = control.comm();
        self.running = tid == t.tid || !control.in_syscall();
        Some(self)
    }

    /// Bytes of address space locked (`VmLck`).
    fn locked(&self) -> u64 {
        self.mm.as_ref().map_or(0, |m| {
            m.lock().unwrap_or_else(|e| e.into_inner()).locked_bytes()
        })
    }

    fn stats(&self) -> mm::MmStats {
        self.mm
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()).stats())
            .unwrap_or_default()
    }

    /// Bytes of address space mapped (every VMA's length).
    fn vsize(&self) -> u64 {
        self.mm.as_ref().map_or(0, |m| {
            let m = m.lock().unwrap_or_else(|e| e.into_inner());
            m.vmas().map(|v| v.end.raw() - v.start.raw()).sum()
        })
    }

    fn comm(&self) -> String {
        self.identity.name()
    }
}

/// The process a `/proc/PID/…` path names (`self`, `thread-self`, or a live pid of the
/// sandbox) and the part after it.
pub fn process_relative<'a>(path: &'a [u8], t: &Task) -> Option<(i32, &'a str)> {
    let p = std::str::from_utf8(path).ok()?.trim_end_matches('/');
    let rest = p.strip_prefix("/proc/")?;
    let (who, what) = rest.split_once('/')?;
    if who == "self" || who == "thread-self" {
        return Some((t.pid, what));
    }
    let pid = who.parse::<i32>().ok().filter(|&p| p > 0)?;
    (pid == t.pid || t.group.procs.group_of(pid).is_some()).then_some((pid, what))
}

/// A directory of /proc the kernel generates: `/proc` itself, a process's `/proc/PID` (also
/// named `/proc/self` and `/proc/thread-self`) or its `/proc/PID/fd`. Backed on the host by an
/// empty directory whose entries are never read; [`GeneratedDir::entries`] lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GeneratedDir {
    /// `/proc`.
    Proc,
    /// `/proc/PID` of a live process of the sandbox.
    Process(i32),
    /// `/proc/PID/fd`.
    Fds(i32),
    /// `/proc/PID/fdinfo`.
    FdInfo(i32),
    /// `/proc/PID/task`: the process's threads.
    Tasks(i32),
    /// `/proc/PID/task/TID` of a live thread TID of process PID (also `/proc/thread-self`).
    Thread(i32, i32),
    /// `/proc/PID/ns` (with a thread, `/proc/PID/task/TID/ns`): the namespaces' links
    /// ([`ns`]).
    Namespaces(i32, Option<i32>),
}

impl GeneratedDir {
    /// The generated directory `path` names, if any (`.` and `..` taken lexically).
    pub fn of(path: &[u8], t: &Task) -> Option<GeneratedDir> {
        let p = lexical(path)?;
        if p == "/proc" {
            return Some(GeneratedDir::Proc);
        }
        let rest = p.strip_prefix("/proc/")?;
        if rest == "thread-self" {
            return Some(GeneratedDir::Thread(t.pid, t.tid));
        }
        let (who, sub) = match rest.split_once('/') {
            None => (rest, None),
            Some((who, sub)) => (who, Some(sub)),
        };
        let pid = match who {
            "self" | "thread-self" => t.pid,
            n => n.parse::<i32>().ok().filter(|&p| p > 0)?,
        };
        if pid != t.pid && t.group.procs.group_of(pid).is_none() {
            return None;
        }
        match sub {
            None => Some(GeneratedDir::Process(pid)),
            Some("fd") => Some(GeneratedDir::Fds(pid)),
            Some("fdinfo") => Some(GeneratedDir::FdInfo(pid)),
            Some("ns") if who == "thread-self" => Some(GeneratedDir::Namespaces(pid, Some(t.tid))),
            Some("ns") => Some(GeneratedDir::Namespaces(pid, None)),
            Some("task") if who != "thread-self" => Some(GeneratedDir::Tasks(pid)),
            Some(sub) if who != "thread-self" => {
                let tail = sub.strip_prefix("task/")?;
                let (tid, below) = match tail.split_once('/') {
                    None => (tail, None),
                    Some((tid, below)) => (tid, Some(below)),
                };
                let tid = tid.parse::<i32>().ok()?;
                task_dir::control_of(t, pid, tid)?;
                match below {
                    None => Some(GeneratedDir::Thread(pid, tid)),
                    Some("ns") => Some(GeneratedDir::Namespaces(pid, Some(tid))),
                    Some(_) => None,
                }
            }
            Some(_) => None,
        }
    }

    /// Its guest path, as Linux names it (`/proc/self` is `/proc/PID`).
    pub fn path(self) -> Vec<u8> {
        match self {
            GeneratedDir::Proc => b"/proc".to_vec(),
            GeneratedDir::Process(pid) => format!("/proc/{pid}").into_bytes(),
            GeneratedDir::Fds(pid) => format!("/proc/{pid}/fd").into_bytes(),
            GeneratedDir::FdInfo(pid) => format!("/proc/{pid}/fdinfo").into_bytes(),
            GeneratedDir::Tasks(pid) => format!("/proc/{pid}/task").into_bytes(),
            GeneratedDir::Thread(pid, tid) => format!("/proc/{pid}/task/{tid}").into_bytes(),
            GeneratedDir::Namespaces(pid, None) => format!("/proc/{pid}/ns").into_bytes(),
            GeneratedDir::Namespaces(pid, Some(tid)) => {
                format!("/proc/{pid}/task/{tid}/ns").into_bytes()
            }
        }
    }

    /// Its entries, `.` and `..` first ([`root_entries`], [`dir_entries`]); `None` for a
    /// process that exited meanwhile.
    pub fn entries(self, t: &Task) -> Option<Vec<DirEntry>> {
        match self {
            GeneratedDir::Proc => Some(root_entries(t)),
            GeneratedDir::Process(pid) => dir_entries(t, pid, Listing::Process),
            GeneratedDir::Fds(pid) => dir_entries(t, pid, Listing::Fds),
            GeneratedDir::FdInfo(pid) => dir_entries(t, pid, Listing::FdInfo),
            GeneratedDir::Tasks(pid) => task_dir::task_entries(t, pid),
            GeneratedDir::Thread(pid, tid) => {
                task_dir::control_of(t, pid, tid)?;
                dir_entries(t, pid, Listing::Thread)
            }
            GeneratedDir::Namespaces(pid, tid) => {
                match tid {
                    Some(tid) => task_dir::control_of(t, pid, tid).map(|_| ())?,
                    None if pid != t.pid => t.group.procs.group_of(pid).map(|_| ())?,
                    None => {}
                }
                Some(ns::entries())
            }
        }
    }
}

/// One entry of a generated directory: its position (increasing, and stable while the
/// directory changes: a descriptor's is its number plus 2, as Linux's), name and `d_type`.
pub type DirEntry = (u64, Vec<u8>, u8);

/// Which directory of a process [`dir_entries`] lists.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Listing {
    /// `/proc/PID`.
    Process,
    /// `/proc/PID/task/TID`: the same files but `task`.
    Thread,
    /// `/proc/PID/fd`.
    Fds,
    /// `/proc/PID/fdinfo`.
    FdInfo,
}

/// The entries of a process directory, `.` and `..` first: the generated files and links of
/// `/proc/PID` (or of `/proc/PID/task/TID`), or the open descriptors of the process in
/// `/proc/PID/fd`. `None` for a process that exited meanwhile.
fn dir_entries(t: &Task, pid: i32, listing: Listing) -> Option<Vec<DirEntry>> {
    let mut out = vec![
        (0, b".".to_vec(), libc::DT_DIR),
        (1, b"..".to_vec(), libc::DT_DIR),
    ];
    if listing != Listing::Fds && listing != Listing::FdInfo {
        let files = [
            ("cmdline", libc::DT_REG),
            ("comm", libc::DT_REG),
            ("coredump_filter", libc::DT_REG),
            ("environ", libc::DT_REG),
            ("exe", libc::DT_LNK),
            ("fd", libc::DT_DIR),
            ("fdinfo", libc::DT_DIR),
            ("maps", libc::DT_REG),
            ("mountinfo", libc::DT_REG),
            ("mounts", libc::DT_REG),
            ("ns", libc::DT_DIR),
            ("pagemap", libc::DT_REG),
            ("smaps", libc::DT_REG),
            ("stat", libc::DT_REG),
            ("statm", libc::DT_REG),
            ("status", libc::DT_REG),
            ("task", libc::DT_DIR),
            ("timerslack_ns", libc::DT_REG),
        ];
        for (i, (name, kind)) in files.into_iter().enumerate() {
            if listing == Listing::Thread && name == "task" {
                continue;
            }
            out.push((i as u64 + 2, name.as_bytes().to_vec(), kind));
        }
        return Some(out);
    }
    let fds = if pid == t.pid {
        t.fds.clone()
    } else {
        t.group.procs.group_of(pid)?.resources()?.fds
    };
    // A program that closes descriptors while it lists them (CPython's subprocess) must not
    // make the listing skip any: positions are descriptor numbers, not indexes.
    let kind = if listing == Listing::FdInfo {
        libc::DT_REG
    } else {
        libc::DT_LNK
    };
    for (fd, _) in fds.iter() {
        out.push((fd as u64 + 2, fd.to_string().into_bytes(), kind));
    }
    Some(out)
}

/// `path` (absolute) with its `.` and `..` components and repeated or trailing slashes taken
/// out, as text; `None` if it is not UTF-8. (`/proc/1/.` is `/proc/1`.)
fn lexical(path: &[u8]) -> Option<String> {
    let p = std::str::from_utf8(path).ok()?;
    let mut parts: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// Position of the first process in a listing of `/proc` (a process's is this plus its pid;
/// the machine's files come before, at fixed positions).
const FIRST_PROCESS: u64 = 100;

/// The entries of `/proc`, `.` and `..` first: the machine's generated files, `self` and
/// `thread-self`, then a directory per live process of the sandbox, by pid.
fn root_entries(t: &Task) -> Vec<DirEntry> {
    let mut out = vec![
        (0, b".".to_vec(), libc::DT_DIR),
        (1, b"..".to_vec(), libc::DT_DIR),
    ];
    let files = [
        ("cpuinfo", libc::DT_REG),
        ("loadavg", libc::DT_REG),
        ("meminfo", libc::DT_REG),
        ("mounts", libc::DT_REG),
        ("self", libc::DT_LNK),
        ("stat", libc::DT_REG),
        ("thread-self", libc::DT_LNK),
        ("uptime", libc::DT_REG),
    ];
    for (i, (name, kind)) in files.into_iter().enumerate() {
        out.push((i as u64 + 2, name.as_bytes().to_vec(), kind));
    }
    let mut pids: Vec<i32> = t
        .group
        .procs
        .live_groups()
        .into_iter()
        .map(|(p, _)| p)
        .chain(std::iter::once(t.pid))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    for p in pids {
        out.push((
            FIRST_PROCESS + p as u64,
            p.to_string().into_bytes(),
            libc::DT_DIR,
        ));
    }
    out
}

/// A process, and one of its threads for a file of `/proc/PID/task/TID/`.
type Whose = (i32, Option<i32>);

/// Which generated file `path` is, and of which process and thread (`None` for the machine's
/// files).
fn normalise(path: &[u8], t: &Task) -> Option<(Option<Whose>, &'static str)> {
    let clean = lexical(path)?;
    if let Some((pid, tid, what)) = task_dir::thread_relative(&clean, t) {
        let which = match what.as_str() {
            "maps" => "maps",
            "smaps" => "smaps",
            "pagemap" => "pagemap",
            "status" => "status",
            "stat" => "stat",
            "cmdline" => "cmdline",
            "environ" => "environ",
            "comm" => "comm",
            "coredump_filter" => "coredump_filter",
            "statm" => "statm",
            "timerslack_ns" => "timerslack_ns",
            // The same for every process of the sandbox.
            "mounts" => return Some((None, "mounts")),
            "mountinfo" => return Some((None, "mountinfo")),
            // The network namespace's, the same for every process of the sandbox.
            "net/dev" => return Some((None, "net/dev")),
            "net/if_inet6" => return Some((None, "net/if_inet6")),
            _ => return None,
        };
        return Some((Some((pid, tid)), which));
    }
    let p = clean.as_str();
    if let Some(name) = sysctl::name_of(p) {
        return Some((None, name));
    }
    Some((
        None,
        match p {
            "/proc/meminfo" => "meminfo",
            "/proc/cpuinfo" => "cpuinfo",
            "/proc/net/dev" => "net/dev",
            "/proc/net/if_inet6" => "net/if_inet6",
            "/proc/stat" => "machine/stat",
            "/proc/uptime" => "uptime",
            "/proc/loadavg" => "loadavg",
            "/proc/mounts" => "mounts",
            "/proc/sysvipc/msg" => "sysvipc/msg",
            "/proc/sysvipc/shm" => "sysvipc/shm",
            "/proc/sysvipc/sem" => "sysvipc/sem",
            "/sys/devices/system/cpu/online" | "/sys/devices/system/cpu/possible" => "online",
            _ => return None,
        },
    ))
}

/// Opens a generated file, if `path` names one.
///
/// # Errors
/// The host's errno if the memory file cannot be made; ESRCH-like ENOENT for a process that
/// exited meanwhile.
pub fn open(t: &Task, path: &[u8]) -> Option<Result<OwnedFd, Errno>> {
    if let Some(link) = ns::link_at(path, t) {
        return Some(ns::check_access(t, link).and_then(|()| ns::backing()));
    }
    if let Some((pid, fd)) = lexical(path).and_then(|p| fdinfo::named(&p, t)) {
        return Some(fdinfo::content(t, pid, fd).and_then(|c| memfd_with(&c, 0o444)));
    }
    let (whose, which) = normalise(path, t)?;
    let view = match whose {
        Some((p, tid)) => {
            let process = if p == t.pid {
                View::own(t)
            } else {
                match t.group.procs.group_of(p) {
                    Some(g) => View::other(p, &g),
                    None => return Some(Err(Errno::ENOENT)),
                }
            };
            match tid {
                None => Some(process),
                Some(tid) => match process.of_thread(t, tid) {
                    Some(v) => Some(v),
                    None => return Some(Err(Errno::ENOENT)),
                },
            }
        }
        None => None,
    };
    // Another process's private files (environ, maps, smaps, pagemap) need Linux's ptrace
    // read access: the same ids throughout, or CAP_SYS_PTRACE.
    if let (Some(v), "environ" | "maps" | "smaps" | "pagemap") = (&view, which) {
        if v.pid != t.pid && !t.creds.may_inspect(&v.identity.creds) {
            return Some(Err(Errno::EACCES));
        }
        // environ is mode 0400 and owned by root once its process is not dumpable.
        let owner = v.identity.creds.proc_owner().0;
        let dac = crate::creds::cap::DAC_OVERRIDE;
        if which == "environ" && t.creds.fsuid != owner && !t.creds.capable(dac) {
            return Some(Err(Errno::EACCES));
        }
    }
    if let ("pagemap", Some(v)) = (which, &view) {
        let Some(mm) = &v.mm else {
            return Some(Err(Errno::ENOENT));
        };
        return Some(pagemap::file(&mm.lock().unwrap_or_else(|e| e.into_inner())));
    }
    let content = match (which, &view) {
        ("maps", Some(v)) => maps(v),
        ("smaps", Some(v)) => v.mm.as_ref().map_or_else(Vec::new, |m| {
            smaps::smaps(&m.lock().unwrap_or_else(|e| e.into_inner()))
        }),
        ("environ", Some(v)) => v.identity.environ.to_vec(),
        ("cmdline", Some(v)) => v.identity.cmdline.to_vec(),
        ("comm", Some(v)) => format!("{}\n", v.comm()).into_bytes(),
        ("coredump_filter", Some(v)) => v.coredump_filter.clone(),
        ("status", Some(v)) => status(v, t),
        ("stat", Some(v)) => stat(v, t),
        ("statm", Some(v)) => statm(v),
        ("timerslack_ns", Some(v)) => format!("{}\n", timer_slack(t, v)).into_bytes(),
        ("meminfo", _) => meminfo(t),
        ("machine/stat", _) => machine::stat(t),
        ("uptime", _) => machine::uptime(t),
        ("loadavg", _) => machine::loadavg(t),
        ("mounts", _) => mounts::mounts_file(&mounts::of_root(t.root.host_path())),
        ("mountinfo", _) => mounts::mountinfo_file(&mounts::of_root(t.root.host_path())),
        ("cpuinfo", _) => std::fs::read("/proc/cpuinfo").unwrap_or_default(),
        ("online", _) => online_cpus().to_vec(),
        ("sysvipc/msg", _) => t.group.procs.sysv_msg.proc_file(),
        ("sysvipc/shm", _) => t.group.procs.sysv_shm.proc_file(),
        ("sysvipc/sem", _) => t.group.procs.sysv_sem.proc_file(),
        (name, None) if sysctl::name_of(&format!("/proc/sys/{name}")).is_some() => {
            sysctl::value(t, name)
        }
        // The interfaces of the holder's network namespace, where it is the sandbox's own
        // (see `net::netlink`); none of the host's.
        ("net/dev" | "net/if_inet6", _) => {
            if !crate::net::netlink::allowed(&t.net) {
                return Some(Err(Errno::ENOENT));
            }
            match std::fs::read(format!("/proc/self/{which}")) {
                Ok(c) => c,
                Err(e) => return Some(Err(Errno::from(e))),
            }
        }
        _ => return None,
    };
    // Read-only for everyone, as /proc's files are (stat shows it), but for the tunables
    // root may write and `comm`.
    let mode = if sysctl::writable(which) || which == "comm" || which == "coredump_filter" {
        0o644
    } else {
        0o444
    };
    Some(memfd_with(&content, mode))
}

/// The timer slack of the thread `v` shows (PR_SET_TIMERSLACK), in nanoseconds. Read-only
/// here: Linux also lets a process with CAP_SYS_NICE set another's by writing the file.
fn timer_slack(t: &Task, v: &View) -> u64 {
    let control = if v.pid == t.pid {
        t.group.member_control(v.tid)
    } else {
        t.group
            .procs
            .group_of(v.pid)
            .and_then(|g| g.member_control(v.tid))
    };
    control.map_or(crate::task::DEFAULT_TIMER_SLACK_NS, |c| c.timer_slack())
}

/// The tunable under `/proc/sys/` that `path` (a guest path) names, if root may write it.
pub fn writable_tunable(path: &[u8]) -> Option<&'static str> {
    sysctl::name_of(&lexical(path)?).filter(|n| sysctl::writable(n))
}

/// The tunable a write(2) to `f`, a file of this /proc, changes ([`sysctl::write`]): one
/// opened for writing (its host descriptor's access mode says so). Every other file of /proc
/// was opened read-only.
///
/// # Errors
/// EBADF.
pub fn written_tunable(f: &crate::fd::OpenFile) -> Result<&'static str, Errno> {
    let access = crate::fd::host::status_flags(f.host())? & libc::O_ACCMODE;
    match f.path.as_deref().and_then(writable_tunable) {
        Some(name) if access != libc::O_RDONLY => Ok(name),
        _ => Err(Errno::EBADF),
    }
}

/// The thread whose `comm` file `path` names, as `(pid, tid)`: `/proc/PID/task/TID/comm`,
/// `/proc/thread-self/comm`, or `/proc/PID/comm` (the process's first thread).
pub fn comm_file(path: &[u8], t: &Task) -> Option<(i32, i32)> {
    let clean = lexical(path)?;
    let (pid, tid, what) = task_dir::thread_relative(&clean, t)?;
    (what == "comm").then_some((pid, tid.unwrap_or(pid)))
}

/// The process owning the file `path` names if it is one of its files its owner may write
/// (mode 0644 on Linux): a thread's `comm`, the process's `coredump_filter`.
pub fn process_writable(path: &[u8], t: &Task) -> Option<i32> {
    if let Some((pid, _)) = comm_file(path, t) {
        return Some(pid);
    }
    coredump_filter::pid_of(&lexical(path)?, t)
}

/// Whether `path` names a file of this /proc that may be opened for writing: a tunable, a
/// thread's `comm` or a process's `coredump_filter` (mode 0644 on Linux).
fn writable_path(path: &[u8]) -> bool {
    writable_tunable(path).is_some()
        || lexical(path).is_some_and(|p| {
            p.starts_with("/proc/") && (p.ends_with("/comm") || p.ends_with("/coredump_filter"))
        })
}

/// A write(2) of `data` to `f`, a file of this /proc: a tunable's new value
/// ([`sysctl::write`]) or a thread's new name ([`task_dir::write_comm`]), for a file opened
/// for writing (its host descriptor's access mode says so).
///
/// # Errors
/// EBADF for a file not opened for writing or not writable; the tunable's or name's errors.
pub fn write(t: &Task, f: &crate::fd::OpenFile, data: &[u8]) -> Result<(), Errno> {
    if !opened_for_writing(f) {
        return Err(Errno::EBADF);
    }
    let path = f.path.as_deref().ok_or(Errno::EBADF)?;
    if let Some(name) = writable_tunable(path) {
        return sysctl::write(t, name, data);
    }
    if let Some(pid) = lexical(path).and_then(|p| coredump_filter::pid_of(&p, t)) {
        return coredump_filter::write(t, pid, data);
    }
    match comm_file(path, t) {
        Some((pid, tid)) => task_dir::write_comm(t, pid, tid, data),
        // A thread that exited since the file was opened.
        None if writable_path(path) => Err(Errno::ESRCH),
        None => Err(Errno::EBADF),
    }
}

/// Whether `f`, a file of this /proc, was opened for writing: a tunable or a thread's name
/// opened so (every other file's host descriptor is its memfd's own, which no write reaches).
pub fn opened_for_writing(f: &crate::fd::OpenFile) -> bool {
    let writes = crate::fd::host::status_flags(f.host())
        .is_ok_and(|fl| fl & libc::O_ACCMODE != libc::O_RDONLY);
    writes && f.path.as_deref().is_some_and(writable_path)
}

/// The host's `/sys/devices/system/cpu/online`, read once.
static ONLINE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

fn online_cpus() -> &'static [u8] {
    ONLINE.get_or_init(|| {
        std::fs::read("/sys/devices/system/cpu/online").unwrap_or_else(|_| b"0\n".to_vec())
    })
}

/// Reads now the host files the generated ones are made from and that a confined holder may
/// no longer open (`/sys`, `/proc/sys`).
pub fn prime_host_files() {
    online_cpus();
    sysctl::prime_host_values();
    crate::task::posix_timer::prime_host_rtc();
}

/// What the generated files take from the host ([`prime_host_files`]), as values: a holder
/// going dormant hands them to its woken self, which runs confined from its first
/// instruction and can no longer read them (it read every tunable as empty and one CPU
/// online).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostFiles {
    /// `/sys/devices/system/cpu/online`.
    pub online_cpus: String,
    /// The host's tunables passed on (`/proc/sys` names and values).
    pub tunables: Vec<(String, String)>,
    /// Whether the host has a real-time clock.
    pub rtc: bool,
}

/// The host files as this process read them (reading them now if it has not yet).
pub fn host_files() -> HostFiles {
    HostFiles {
        online_cpus: String::from_utf8_lossy(online_cpus()).into_owned(),
        tunables: sysctl::host_values_owned(),
        rtc: crate::task::posix_timer::host_has_rtc(),
    }
}

/// Takes `h` as the host files, before anything reads them (a holder woken from dormancy,
/// from its record); values already read stay.
pub fn adopt_host_files(h: &HostFiles) {
    let _ = ONLINE.set(h.online_cpus.clone().into_bytes());
    sysctl::adopt_host_values(&h.tunables);
    crate::task::posix_timer::adopt_host_rtc(h.rtc);
}

/// A file of this /proc made again from the bytes `content` it was made with, opened by
/// guest path `path` with access mode `access` (a checkpoint's restore). As [`open`] makes
/// them: a tunable's host descriptor has the access its opener asked for (a write checks
/// it, [`written_tunable`]); every other file's is its memfd's own, which no write reaches.
///
/// # Errors
/// The host's error.
pub fn remake(path: &[u8], content: &[u8], access: i32) -> Result<OwnedFd, Errno> {
    if !writable_path(path) {
        return memfd_with(content, 0o444);
    }
    crate::fs::reopen(&memfd_with(content, 0o644)?, access)
}

fn memfd_with(content: &[u8], mode: libc::mode_t) -> Result<OwnedFd, Errno> {
    // SAFETY: a valid NUL-terminated name and flags.
    let fd = unsafe { libc::memfd_create(c"torpor-proc".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a fresh fd owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fchmod on the descriptor just made.
    if unsafe { libc::fchmod(fd, mode) } != 0 {
        return Err(Errno::last());
    }
    let mut f = std::fs::File::from(owned);
    f.write_all(content).map_err(Errno::from)?;
    use std::io::Seek;
    f.seek(std::io::SeekFrom::Start(0)).map_err(Errno::from)?;
    Ok(OwnedFd::from(f))
}

fn maps(v: &View) -> Vec<u8> {
    let Some(mm) = &v.mm else {
        return Vec::new();
    };
    let mm = mm.lock().unwrap_or_else(|e| e.into_inner());
    mm.vmas().map(maps_line).collect::<String>().into_bytes()
}

/// The line of `/proc/PID/maps` (and the first of each VMA in `smaps`) for `v`, newline
/// included.
fn maps_line(v: &mm::Vma) -> String {
    // A file's device and inode, as stat(2) reports them to the application.
    let (offset, identity, share) = match &v.kind {
        VmaKind::File { offset, file, .. } => {
            use std::os::unix::fs::MetadataExt;
            let id = file.metadata().ok().map(|m| (m.dev(), m.ino()));
            (*offset, id, 'p')
        }
        VmaKind::Shared { offset, object, .. } => (*offset, object.file_identity(), 's'),
        VmaKind::Anon => (0, None, 'p'),
    };
    let (dev, ino) = identity.unwrap_or((0, 0));
    let perm = |p: Prot, c: char| if v.prot.contains(p) { c } else { '-' };
    let name = v.name.clone().unwrap_or_default();
    let mut line = format!(
        "{:08x}-{:08x} {}{}{}{} {:08x} {:02x}:{:02x} {} ",
        v.start.raw(),
        v.end.raw(),
        perm(Prot::READ, 'r'),
        perm(Prot::WRITE, 'w'),
        perm(Prot::EXEC, 'x'),
        share,
        offset,
        libc::major(dev),
        libc::minor(dev),
        ino,
    );
    if !name.is_empty() {
        line.push_str(&" ".repeat(73usize.saturating_sub(line.len())));
        line.push_str(&name);
    }
    line.push('\n');
    line
}

fn status(v: &View, t: &Task) -> Vec<u8> {
    let stats = v.stats();
    let rss_kb = stats.mapped_pages as u64 * 4;
    let c = &v.identity.creds;
    let member = t.group.procs.membership(v.pid);
    format!(
        "Name:\t{}\nUmask:\t{:04o}\nState:\t{state}\nTgid:\t{pid}\nNgid:\t0\nPid:\t{tid}\nPPid:\t{ppid}\n\
         TracerPid:\t0\nUid:\t{}\t{}\t{}\t{}\nGid:\t{}\t{}\t{}\t{}\nFDSize:\t64\nGroups:\t{groups}\n\
         NSpgid:\t{pgid}\nNSsid:\t{sid}\nVmSize:\t{vm_kb} kB\nVmLck:\t{lck_kb} kB\nVmPin:\t0 kB\n\
         VmRSS:\t{rss_kb} kB\nThreads:\t{threads}\n\
         SigPnd:\t{:016x}\nShdPnd:\t{:016x}\nSigBlk:\t{:016x}\nSigIgn:\t{:016x}\nSigCgt:\t{:016x}\n\
         CapInh:\t{:016x}\nCapPrm:\t{:016x}\nCapEff:\t{:016x}\nCapBnd:\t{:016x}\nCapAmb:\t{:016x}\n\
         NoNewPrivs:\t{}\nCpus_allowed_list:\t0\n",
        v.comm(),
        v.umask,
        c.uid,
        c.euid,
        c.suid,
        c.fsuid,
        c.gid,
        c.egid,
        c.sgid,
        c.fsgid,
        v.sigpnd,
        0,
        v.sigblk,
        v.sigign,
        v.sigcgt,
        c.caps.inheritable,
        c.caps.permitted,
        c.caps.effective,
        c.caps.bounding,
        c.caps.ambient,
        u8::from(c.no_new_privs),
        groups = c
            .groups
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(" "),
        pid = v.pid,
        tid = v.tid,
        ppid = t.group.procs.parent_of(v.pid),
        pgid = member.map_or(v.pid, |m| m.pgid),
        sid = member.map_or(v.pid, |m| m.sid),
        threads = v.threads,
        state = if v.stopped {
            "T (stopped)"
        } else if v.running {
            "R (running)"
        } else {
            "S (sleeping)"
        },
        vm_kb = v.vsize() / 1024,
        lck_kb = v.locked() / 1024,
    )
    .into_bytes()
}

fn stat(v: &View, t: &Task) -> Vec<u8> {
    let stats = v.stats();
    let mut fields = vec!["0".to_string(); 52];
    fields[0] = if v.thread { v.tid } else { v.pid }.to_string();
    fields[1] = format!("({})", v.comm());
    // The caller runs; another process runs unless all its threads are in syscalls.
    fields[2] = if v.stopped {
        "T"
    } else if v.running {
        "R"
    } else {
        "S"
    }
    .into();
    fields[3] = t.group.procs.parent_of(v.pid).to_string(); // ppid
    let member = t.group.procs.membership(v.pid);
    fields[4] = member.map_or(v.pid, |m| m.pgid).to_string(); // pgrp
    fields[5] = member.map_or(v.pid, |m| m.sid).to_string(); // session
    fields[7] = "-1".into(); // tpgid
    fields[13] = machine::ticks(v.cpu).to_string(); // utime
    fields[17] = "20".into(); // priority
    fields[19] = v.threads.to_string(); // num_threads
    fields[21] = machine::ticks(v.started).to_string(); // starttime
    fields[22] = v.vsize().to_string(); // vsize
    fields[23] = stats.mapped_pages.to_string(); // rss
    fields[24] = u64::MAX.to_string(); // rsslim
    let mut s = fields.join(" ");
    s.push('\n');
    s.into_bytes()
}

/// `/proc/PID/statm`: size, resident, shared, text, lib, data and dirty pages.
fn statm(v: &View) -> Vec<u8> {
    let size = v.vsize() / platform::PAGE_SIZE;
    let resident = v.stats().mapped_pages;
    format!("{size} {resident} 0 0 0 {resident} 0\n").into_bytes()
}

/// `/proc/meminfo`: the sandbox's memory, and no huge pages (as a host that reserved none:
/// SHM_HUGETLB fails, see [`crate::ipc::shm`]).
fn meminfo(t: &Task) -> Vec<u8> {
    let stats = t.mm().stats();
    let total = stats.total_pages as u64 * 4;
    let free = stats.free_pages as u64 * 4;
    format!(
        "MemTotal:       {total:>8} kB\nMemFree:        {free:>8} kB\nMemAvailable:   {free:>8} kB\n\
         Buffers:               0 kB\nCached:                0 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n\
         HugePages_Total:       0\nHugePages_Free:        0\nHugePages_Rsvd:        0\n\
         HugePages_Surp:        0\nHugepagesize:       2048 kB\nHugetlb:               0 kB\n"
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_paths() {
        assert_eq!(lexical(b"/proc/1/.").as_deref(), Some("/proc/1"));
        assert_eq!(lexical(b"/proc//self/../2/").as_deref(), Some("/proc/2"));
        assert_eq!(lexical(b"/").as_deref(), Some("/"));
        assert_eq!(lexical(b"/proc/.").as_deref(), Some("/proc"));
        assert_eq!(lexical(b"/procs/").as_deref(), Some("/procs"));
    }

    #[test]
    fn names() {
        assert_eq!(self_relative(b"/proc/self/fd/3", 1), Some("fd/3"));
        assert_eq!(self_relative(b"/proc/9/fd/3", 1), None);
        assert_eq!(self_relative(b"/proc/selfish/fd", 1), None);
    }

    #[test]
    fn memfd_round_trip() {
        use std::io::Read;
        let fd = memfd_with(b"hello", 0o444).unwrap();
        let mut s = String::new();
        std::fs::File::from(fd).read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello");
    }
}
