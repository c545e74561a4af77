//! uname, sethostname, setdomainname, getrandom, getrlimit, prlimit64, nice values and scheduling (getpriority,
//! setpriority, sched_*).

use std::cell::{Cell, RefCell};

use abi::structs::UTS_FIELD;
use abi::Errno;
use platform::Gva;

use crate::task::rlimit::Limit;

use super::{SysResult, SyscallArgs};
use crate::task::Task;

/// personality(2)'s query value.
const PERSONALITY_QUERY: u32 = 0xffff_ffff;
/// The UNAME26 flag: uname reports a 2.6 release (for programs that parse only 2.6.x).
const UNAME26: u32 = 0x002_0000;

/// Implements personality(2): the process's persona is kept, inherited by fork and reported
/// (0xffffffff queries); as on Linux any value is taken. Programs run as Linux ones whatever
/// it says: but for UNAME26 (uname's release), the domain and flags change nothing.
pub fn sys_personality(t: &mut Task, a: &SyscallArgs) -> SysResult {
    use std::sync::atomic::Ordering;
    let want = a.u(0) as u32;
    let old = t.group.personality.load(Ordering::Relaxed);
    if want != PERSONALITY_QUERY {
        t.group.personality.store(want, Ordering::Relaxed);
    }
    Ok(u64::from(old))
}

/// Implements uname(2): Linux x86-64 with the host's release, the sandbox's own node name.
pub fn sys_uname(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let host = crate::task::host::uname();
    let field = crate::task::host::uts_field;
    let uname26 = t
        .group
        .personality
        .load(std::sync::atomic::Ordering::Relaxed)
        & UNAME26
        != 0;
    let fields: [Vec<u8>; 6] = [
        b"Linux".to_vec(),
        t.group.procs.nodename(),
        if uname26 {
            uname26_release(&field(&host.release))
        } else {
            field(&host.release)
        },
        field(&host.version),
        b"x86_64".to_vec(),
        t.group.procs.domainname(),
    ];
    let mut out = vec![0u8; UTS_FIELD * 6];
    for (i, f) in fields.iter().enumerate() {
        let n = f.len().min(UTS_FIELD - 1);
        out[i * UTS_FIELD..i * UTS_FIELD + n].copy_from_slice(&f[..n]);
    }
    t.copy_out(a.gva(0), &out)?;
    Ok(0)
}

/// The 2.6 release Linux's UNAME26 reports for `release` ("6.18.44-x" is "2.6.78-x": 2.6.60
/// plus the minor version).
fn uname26_release(release: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(release);
    let (nums, rest) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(text.len()),
    );
    let minor: u32 = nums
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    format!("2.6.{}{}", 60 + minor, rest).into_bytes()
}

/// Copies in a new node or domain name for sethostname(2)/setdomainname(2): root's only (the
/// sandbox is its own UTS namespace, its root holding CAP_SYS_ADMIN there), at most 64 bytes.
fn uts_name(t: &Task, a: &SyscallArgs) -> Result<Vec<u8>, Errno> {
    let len = a.u(1);
    if len > UTS_FIELD as u64 - 1 {
        return Err(Errno::EINVAL);
    }
    if t.creds.euid != 0 {
        return Err(Errno::EPERM);
    }
    let mut name = vec![0u8; len as usize];
    t.copy_in(a.gva(0), &mut name)?;
    Ok(name)
}

/// Implements sethostname(2): the node name of the whole sandbox (all its processes).
pub fn sys_sethostname(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let name = uts_name(t, a)?;
    t.group.procs.set_nodename(&name);
    Ok(0)
}

/// Implements setdomainname(2).
pub fn sys_setdomainname(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let name = uts_name(t, a)?;
    t.group.procs.set_domainname(&name);
    Ok(0)
}

/// Implements getrandom(2).
pub fn sys_getrandom(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let flags = a.u(2) as u32;
    if flags & !(libc::GRND_NONBLOCK | libc::GRND_RANDOM | 0x4) != 0 {
        return Err(Errno::EINVAL);
    }
    let len = (a.len(1)? as usize).min(1 << 25);
    let mut buf = vec![0u8; len];
    let n = crate::task::host::random(&mut buf, 0)?;
    t.copy_out(a.gva(0), &buf[..n])?;
    Ok(n as u64)
}

fn limits(t: &Task) -> std::sync::MutexGuard<'_, crate::task::rlimit::Rlimits> {
    t.group.rlimits.lock().unwrap_or_else(|e| e.into_inner())
}

fn encode(l: Limit) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&l.cur.to_le_bytes());
    b[8..].copy_from_slice(&l.max.to_le_bytes());
    b
}

fn decode(b: &[u8; 16]) -> Limit {
    let mut cur = [0u8; 8];
    let mut max = [0u8; 8];
    cur.copy_from_slice(&b[..8]);
    max.copy_from_slice(&b[8..]);
    Limit {
        cur: u64::from_le_bytes(cur),
        max: u64::from_le_bytes(max),
    }
}

/// Sets a limit of the calling process; the descriptor table follows RLIMIT_NOFILE. Raising
/// a hard limit needs CAP_SYS_RESOURCE (EPERM), as on Linux.
fn set_limit(t: &Task, resource: u32, new: Limit) -> Result<(), Errno> {
    let mut l = limits(t);
    let old = l.get(resource)?;
    if new.cur <= new.max && new.max > old.max && !t.creds.capable(crate::creds::cap::SYS_RESOURCE)
    {
        return Err(Errno::EPERM);
    }
    l.set(resource, new)?;
    t.fds.set_limit(l.nofile());
    drop(l);
    if resource == libc::RLIMIT_CPU {
        crate::task::cpu_limit::CpuLimit::restart(&t.group);
    }
    Ok(())
}

/// Implements getrlimit(2).
pub fn sys_getrlimit(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let l = limits(t).get(a.u(0) as u32)?;
    t.copy_out(a.gva(1), &encode(l))?;
    Ok(0)
}

/// Implements setrlimit(2).
pub fn sys_setrlimit(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let mut b = [0u8; 16];
    t.copy_in(a.gva(1), &mut b)?;
    set_limit(t, a.u(0) as u32, decode(&b))?;
    Ok(0)
}

/// Implements prlimit64(2) for the calling process: the old limits out, then the new in.
pub fn sys_prlimit64(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let pid = a.int(0);
    if pid != 0 && pid != t.pid {
        return Err(Errno::ESRCH);
    }
    let resource = a.u(1) as u32;
    let old = limits(t).get(resource)?;
    let new = if a.u(2) != 0 {
        let mut b = [0u8; 16];
        t.copy_in(a.gva(2), &mut b)?;
        Some(decode(&b))
    } else {
        None
    };
    if let Some(n) = new {
        set_limit(t, resource, n)?;
    }
    if a.u(3) != 0 {
        t.copy_out(a.gva(3), &encode(old))?;
    }
    Ok(0)
}

/// Implements sysinfo(2): uptime from the host's monotonic clock, memory figures from the
/// sandbox's own memory (its limit and its page allocator), one process.
pub fn sys_sysinfo(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let stats = t.mm().stats();
    let page = platform::PAGE_SIZE;
    let total = stats.total_pages as u64 * page;
    let free = stats.free_pages as u64 * page;
    let uptime = crate::task::cputime::boot_time();
    // struct sysinfo: uptime, loads[3], totalram, freeram, sharedram, bufferram, totalswap,
    // freeswap (longs), procs (u16 + pad), totalhigh, freehigh (longs), mem_unit (u32), pad.
    let mut out = vec![0u8; 112];
    let put =
        |out: &mut Vec<u8>, at: usize, v: u64| out[at..at + 8].copy_from_slice(&v.to_le_bytes());
    put(&mut out, 0, uptime.as_secs());
    put(&mut out, 32, total);
    put(&mut out, 40, free);
    out[80..82].copy_from_slice(&1u16.to_le_bytes());
    out[104..108].copy_from_slice(&1u32.to_le_bytes());
    t.copy_out(a.gva(0), &out)?;
    Ok(0)
}

/// Implements sched_getaffinity(2): the host CPUs this process may run on.
pub fn sys_sched_getaffinity(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let len = a.u(1) as usize;
    if len == 0 || !len.is_multiple_of(8) {
        return Err(Errno::EINVAL);
    }
    let own =
        sched_target(t, a.int(0)).map_err(|e| if e == Errno::EINVAL { Errno::ESRCH } else { e })?;
    let set = if own {
        AFFINITY.with(|m| m.borrow().clone())
    } else {
        None
    };
    let bytes = match set {
        Some(b) => b,
        None => host_affinity()?,
    };
    let n = len.min(bytes.len());
    t.copy_out(a.gva(2), &bytes[..n])?;
    Ok(n as u64)
}

/// Implements getcpu(2): the host CPU the calling thread runs on, NUMA node 0. (Some
/// runtimes, the JVM among them, fall back to the legacy vsyscall page, which torpor does not
/// map, when this fails.)
pub fn sys_getcpu(t: &mut Task, a: &SyscallArgs) -> SysResult {
    // The host CPU the thread runs on, within the affinity it set (which never reaches the
    // host scheduler: a CPU outside it reads as the first CPU inside).
    // SAFETY: sched_getcpu takes no arguments.
    let here = unsafe { libc::sched_getcpu() }.max(0) as usize;
    let mask = AFFINITY.with(|m| m.borrow().clone());
    let cpu = match mask {
        Some(m) if m.get(here / 8).is_none_or(|b| b & (1 << (here % 8)) == 0) => m
            .iter()
            .enumerate()
            .find(|(_, b)| **b != 0)
            .map_or(here, |(i, b)| i * 8 + b.trailing_zeros() as usize),
        _ => here,
    } as u32;
    if a.u(0) != 0 {
        t.write_u32(a.gva(0), cpu)?;
    }
    if a.u(1) != 0 {
        t.write_u32(a.gva(1), 0)?;
    }
    Ok(0)
}

// --- scheduling: nice values, policies, affinity ---------------------------------------------
//
// The guest's nice value and CPU affinity are the calling thread's own (as on Linux, where
// both are per thread), kept with the host thread that runs the task; they never reach the
// host scheduler (a guest cannot raise its host priority). Only SCHED_OTHER exists.

thread_local! {
    /// The task's nice value (-20..=19).
    static NICE: Cell<i32> = const { Cell::new(0) };
    /// The task's affinity mask as set by sched_setaffinity (None: every host CPU).
    static AFFINITY: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// The calling thread's nice value (sched_getattr's).
pub(super) fn own_nice() -> i32 {
    NICE.with(|n| n.get())
}

/// Sets the calling thread's nice value (sched_setattr's, already checked).
pub(super) fn set_own_nice(nice: i32) {
    NICE.with(|n| n.set(nice.clamp(-20, 19)));
}

const PRIO_PROCESS: i32 = 0;
const PRIO_PGRP: i32 = 1;
const PRIO_USER: i32 = 2;

/// Whether `pid` (a process or thread id of the sandbox, 0 for the caller) names the caller's
/// own thread; ESRCH when it names nothing.
pub(super) fn sched_target(t: &Task, pid: i32) -> Result<bool, Errno> {
    if pid < 0 {
        return Err(Errno::EINVAL);
    }
    if pid == 0 || pid == t.tid {
        return Ok(true);
    }
    if pid == t.pid || t.group.procs.group_of(pid).is_some() {
        return Ok(false);
    }
    Err(Errno::ESRCH)
}

/// Whether the caller may lower a nice value: with CAP_SYS_NICE, or as root (torpor's root
/// has a container's capabilities, without CAP_SYS_NICE, but a nice value never reaches the
/// host scheduler: root keeps the host root's freedom here).
fn may_lower_nice(t: &Task) -> bool {
    t.creds.capable(crate::creds::cap::SYS_NICE) || t.creds.euid == 0
}

/// Whether the caller may change process `pid`'s scheduling (nice value, policy): its own
/// process, one whose real or effective uid is the caller's effective uid, or with
/// CAP_SYS_NICE (Linux's `check_same_owner`); EPERM otherwise.
fn may_reschedule(t: &Task, pid: i32) -> Result<(), Errno> {
    if pid == 0 || pid == t.pid || t.group.has_thread(pid) {
        return Ok(());
    }
    let Some((_, g)) = t.group.procs.group_of_task(pid) else {
        return Ok(());
    };
    let other = g.identity().creds;
    if t.creds.euid == other.euid
        || t.creds.euid == other.uid
        || t.creds.capable(crate::creds::cap::SYS_NICE)
    {
        Ok(())
    } else {
        Err(Errno::EPERM)
    }
}

/// The target of getpriority/setpriority: Ok(true) for the caller itself.
fn prio_target(t: &Task, which: i32, who: i32) -> Result<bool, Errno> {
    match which {
        PRIO_PROCESS => {
            sched_target(t, who).map_err(|e| if e == Errno::EINVAL { Errno::ESRCH } else { e })
        }
        PRIO_PGRP | PRIO_USER => {
            if who < 0 {
                return Err(Errno::ESRCH);
            }
            // The caller's own group or user (0 names it): the caller is the one member
            // torpor tracks a nice value for.
            Ok(who == 0
                || (which == PRIO_USER && who as u32 == t.creds.uid)
                || (which == PRIO_PGRP && who == t.pid))
        }
        _ => Err(Errno::EINVAL),
    }
}

/// Implements getpriority(2): 20 - nice, as the raw syscall returns it.
pub fn sys_getpriority(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let own = prio_target(t, a.int(0), a.int(1))?;
    let nice = if own { NICE.with(|n| n.get()) } else { 0 };
    Ok((20 - nice) as u64)
}

/// Implements setpriority(2) for the calling thread (values clamped to -20..=19; lowering
/// it needs root, EACCES otherwise); for another task of the sandbox it is accepted and not
/// recorded.
pub fn sys_setpriority(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let own = prio_target(t, a.int(0), a.int(1))?;
    let nice = a.int(2).clamp(-20, 19);
    if !own {
        if a.int(0) == PRIO_PROCESS {
            may_reschedule(t, a.int(1))?;
        }
        if nice < 0 && !may_lower_nice(t) {
            return Err(Errno::EACCES);
        }
        return Ok(0);
    }
    if nice < NICE.with(|n| n.get()) && !may_lower_nice(t) {
        return Err(Errno::EACCES);
    }
    NICE.with(|n| n.set(nice));
    Ok(0)
}

const SCHED_OTHER: i32 = 0;
const SCHED_FIFO: i32 = 1;
const SCHED_RR: i32 = 2;
const SCHED_BATCH: i32 = 3;
const SCHED_IDLE: i32 = 5;
const SCHED_DEADLINE: i32 = 6;
const SCHED_RESET_ON_FORK: i32 = 0x4000_0000;

/// Implements sched_get_priority_max(2).
pub fn sys_sched_get_priority_max(_t: &mut Task, a: &SyscallArgs) -> SysResult {
    match a.int(0) {
        SCHED_FIFO | SCHED_RR => Ok(99),
        SCHED_OTHER | SCHED_BATCH | SCHED_IDLE | SCHED_DEADLINE => Ok(0),
        _ => Err(Errno::EINVAL),
    }
}

/// Implements sched_get_priority_min(2).
pub fn sys_sched_get_priority_min(_t: &mut Task, a: &SyscallArgs) -> SysResult {
    match a.int(0) {
        SCHED_FIFO | SCHED_RR => Ok(1),
        SCHED_OTHER | SCHED_BATCH | SCHED_IDLE | SCHED_DEADLINE => Ok(0),
        _ => Err(Errno::EINVAL),
    }
}

/// Implements sched_getscheduler(2): every task is SCHED_OTHER.
pub fn sys_sched_getscheduler(t: &mut Task, a: &SyscallArgs) -> SysResult {
    sched_target(t, a.int(0))?;
    Ok(SCHED_OTHER as u64)
}

/// Implements sched_getparam(2): priority 0 (SCHED_OTHER).
pub fn sys_sched_getparam(t: &mut Task, a: &SyscallArgs) -> SysResult {
    if a.u(1) == 0 {
        return Err(Errno::EINVAL);
    }
    sched_target(t, a.int(0))?;
    t.write_u32(a.gva(1), 0)?;
    Ok(0)
}

/// Checks a policy and its `struct sched_param` for SCHED_OTHER, the one policy torpor has:
/// the real-time ones are EPERM (as for a process without CAP_SYS_NICE), a wrong priority for
/// the policy EINVAL, as on Linux.
fn check_sched_param(t: &Task, policy: i32, param: Gva) -> Result<(), Errno> {
    if param.raw() == 0 {
        return Err(Errno::EINVAL);
    }
    let mut b = [0u8; 4];
    t.copy_in(param, &mut b)?;
    let prio = i32::from_le_bytes(b);
    match policy & !SCHED_RESET_ON_FORK {
        SCHED_OTHER | SCHED_BATCH | SCHED_IDLE if prio != 0 => Err(Errno::EINVAL),
        SCHED_OTHER => Ok(()),
        SCHED_BATCH | SCHED_IDLE => Err(Errno::EPERM),
        SCHED_FIFO | SCHED_RR if !(1..=99).contains(&prio) => Err(Errno::EINVAL),
        SCHED_FIFO | SCHED_RR => Err(Errno::EPERM),
        _ => Err(Errno::EINVAL),
    }
}

/// Implements sched_setscheduler(2): SCHED_OTHER only (see [`check_sched_param`]).
pub fn sys_sched_setscheduler(t: &mut Task, a: &SyscallArgs) -> SysResult {
    if a.int(0) < 0 || a.int(1) < 0 {
        return Err(Errno::EINVAL);
    }
    check_sched_param(t, a.int(1), a.gva(2))?;
    sched_target(t, a.int(0))?;
    may_reschedule(t, a.int(0))?;
    Ok(0)
}

/// Implements sched_setparam(2) (the policy stays SCHED_OTHER).
pub fn sys_sched_setparam(t: &mut Task, a: &SyscallArgs) -> SysResult {
    if a.int(0) < 0 {
        return Err(Errno::EINVAL);
    }
    check_sched_param(t, SCHED_OTHER, a.gva(1))?;
    sched_target(t, a.int(0))?;
    may_reschedule(t, a.int(0))?;
    Ok(0)
}

/// Implements sched_rr_get_interval(2): the host's answer for its own thread (SCHED_OTHER's
/// time slice).
pub fn sys_sched_rr_get_interval(t: &mut Task, a: &SyscallArgs) -> SysResult {
    sched_target(t, a.int(0))?;
    let ts = crate::task::host::rr_interval()?;
    let ts = abi::structs::Timespec {
        sec: ts.tv_sec,
        nsec: ts.tv_nsec,
    };
    t.write_val(a.gva(1), &ts)?;
    Ok(0)
}

/// The host CPUs the sandbox may use, as bytes of a cpu_set_t.
fn host_affinity() -> Result<Vec<u8>, Errno> {
    crate::task::affinity::host_cpus().map_err(|e| Errno::from_io(&e))
}

/// Implements sched_setaffinity(2) for the calling thread: the mask must name at least one
/// host CPU (EINVAL otherwise); it is what sched_getaffinity reports from then on. Another
/// task's mask is accepted and not recorded.
pub fn sys_sched_setaffinity(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let host = host_affinity()?;
    let len = (a.u(1) as usize).min(host.len());
    let mut mask = vec![0u8; len];
    // Linux reads the mask before it looks for the process.
    t.copy_in(a.gva(2), &mut mask)?;
    let own =
        sched_target(t, a.int(0)).map_err(|e| if e == Errno::EINVAL { Errno::ESRCH } else { e })?;
    // Another user's process needs CAP_SYS_NICE (Linux's check_same_owner).
    may_reschedule(t, a.int(0))?;
    let mut eff = vec![0u8; host.len()];
    for (i, b) in mask.iter().enumerate() {
        eff[i] = b & host[i];
    }
    if eff.iter().all(|&b| b == 0) {
        return Err(Errno::EINVAL);
    }
    if own {
        AFFINITY.with(|m| *m.borrow_mut() = Some(eff));
    }
    Ok(0)
}

#[cfg(test)]
mod personality_tests {
    use super::uname26_release;

    #[test]
    fn uname26_reports_a_2_6_release_as_linux_does() {
        assert_eq!(uname26_release(b"6.18.44-fc-v1272"), b"2.6.78-fc-v1272");
        assert_eq!(uname26_release(b"5.10.0"), b"2.6.70");
    }
}
