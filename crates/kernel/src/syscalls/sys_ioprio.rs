//! ioprio_get(2), ioprio_set(2): I/O scheduling classes and levels, kept and reported.
//!
//! The value never reaches the host's I/O scheduler (the sandbox's I/O is the runtime's):
//! it is what the guest set, per process ([`crate::task::ThreadGroup::ioprio`]; Linux keeps
//! it per thread), inherited by fork.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::creds::cap;
use crate::task::{Task, ThreadGroup};

const WHO_PROCESS: i32 = 1;
const WHO_PGRP: i32 = 2;
const WHO_USER: i32 = 3;

const CLASS_SHIFT: u32 = 13;
const CLASS_NONE: u32 = 0;
const CLASS_RT: u32 = 1;
const CLASS_BE: u32 = 2;
const CLASS_IDLE: u32 = 3;
/// Levels of the RT and BE classes (0 the highest).
const NR_LEVELS: u32 = 8;

/// The class of a priority value (`IOPRIO_PRIO_CLASS`).
fn class_of(prio: u32) -> u32 {
    (prio >> CLASS_SHIFT) & 7
}

/// Checks a priority as Linux's `ioprio_check_cap`: RT needs CAP_SYS_NICE or CAP_SYS_ADMIN
/// (EPERM); RT and BE take levels 0-7, NONE only 0, an unknown class nothing (EINVAL). The
/// bits between the level and the class are hints (`IOPRIO_HINT_*`), taken as they are.
fn check(t: &Task, prio: u32) -> Result<(), Errno> {
    let level = prio & 7;
    match class_of(prio) {
        CLASS_RT if !t.creds.capable(cap::SYS_NICE) && !t.creds.capable(cap::SYS_ADMIN) => {
            Err(Errno::EPERM)
        }
        CLASS_RT | CLASS_BE if level >= NR_LEVELS => Err(Errno::EINVAL),
        CLASS_RT | CLASS_BE | CLASS_IDLE => Ok(()),
        CLASS_NONE if level != 0 => Err(Errno::EINVAL),
        CLASS_NONE => Ok(()),
        _ => Err(Errno::EINVAL),
    }
}

/// The processes `which`/`who` names (0: the caller's own process, group or user); EINVAL
/// for an unknown `which`.
fn targets(t: &Task, which: i32, who: i32) -> Result<Vec<Arc<ThreadGroup>>, Errno> {
    let procs = &t.group.procs;
    Ok(match which {
        WHO_PROCESS if who == 0 => vec![t.group.clone()],
        WHO_PROCESS => procs
            .group_of_task(who)
            .map(|(_, g)| g)
            .into_iter()
            .collect(),
        WHO_PGRP => {
            let pgid = if who == 0 {
                procs.membership(t.pid).map_or(t.pid, |m| m.pgid)
            } else {
                who
            };
            procs
                .group_members(pgid)
                .into_iter()
                .map(|(_, g)| g)
                .collect()
        }
        WHO_USER => {
            let uid = if who == 0 { t.creds.uid } else { who as u32 };
            procs
                .live_groups()
                .into_iter()
                .filter(|(pid, g)| {
                    if *pid == t.pid {
                        t.creds.uid == uid
                    } else {
                        g.identity().creds.uid == uid
                    }
                })
                .map(|(_, g)| g)
                .collect()
        }
        _ => return Err(Errno::EINVAL),
    })
}

/// Implements ioprio_set(2). Another user's process needs CAP_SYS_NICE (EPERM), as Linux's
/// `set_task_ioprio`: the caller's real or effective uid must be the target's real one.
pub fn sys_ioprio_set(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (which, who, prio) = (a.int(0), a.int(1), a.u(2) as u32);
    check(t, prio)?;
    let groups = targets(t, which, who)?;
    if groups.is_empty() {
        return Err(Errno::ESRCH);
    }
    let mut result = Ok(0);
    for g in groups {
        let uid = if Arc::ptr_eq(&g, &t.group) {
            t.creds.uid
        } else {
            g.identity().creds.uid
        };
        if uid != t.creds.uid && uid != t.creds.euid && !t.creds.capable(cap::SYS_NICE) {
            result = Err(Errno::EPERM);
            continue;
        }
        g.ioprio.store(prio & 0xffff, Ordering::Relaxed);
    }
    result
}

/// `IOPRIO_DEFAULT`: best effort, level 4, what class NONE counts as between processes.
const DEFAULT: u32 = (CLASS_BE << CLASS_SHIFT) | 4;

/// Linux's `ioprio_best`: the numerically lower of two priorities, class NONE counting as
/// [`DEFAULT`].
fn best(a: u32, b: u32) -> u32 {
    let norm = |p: u32| {
        if class_of(p) == CLASS_NONE {
            DEFAULT
        } else {
            p
        }
    };
    norm(a).min(norm(b))
}

/// Implements ioprio_get(2): the process's priority (class NONE, level 0 until one is set,
/// as Linux reports a task that never set one); for a group or user of several processes,
/// the best of theirs ([`best`]).
pub fn sys_ioprio_get(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let groups = targets(t, a.int(0), a.int(1))?;
    groups
        .iter()
        .map(|g| g.ioprio.load(Ordering::Relaxed))
        .reduce(best)
        .map(u64::from)
        .ok_or(Errno::ESRCH)
}
