//! System V semaphores: semget(2), semop(2), semtimedop(2), semctl(2), over the sandbox's
//! semaphore table ([`crate::ipc::SemTable`]). GETNCNT and GETZCNT report 0 (waiters are not
//! counted).

use abi::Errno;

use super::sys_msg::caller;
use super::{SysResult, SyscallArgs};
use crate::ipc::ids::StatBy;
use crate::ipc::sem::{ALTER, READ};
use crate::ipc::{self, SemOp, SemSet};
use crate::task::Task;

const IPC_RMID: i32 = 0;
const IPC_SET: i32 = 1;
const IPC_STAT: i32 = 2;
const IPC_INFO: i32 = 3;
/// Set by C libraries that ask for the 64-bit structures (the only ones on x86-64).
const IPC_64: i32 = 0x100;
const GETPID: i32 = 11;
const GETVAL: i32 = 12;
const GETALL: i32 = 13;
const GETNCNT: i32 = 14;
const GETZCNT: i32 = 15;
const SETVAL: i32 = 16;
const SETALL: i32 = 17;
const SEM_STAT: i32 = 18;
const SEM_INFO: i32 = 19;
const SEM_STAT_ANY: i32 = 20;

/// Implements semget(2).
pub fn sys_semget(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let who = caller(t);
    let id = t
        .group
        .procs
        .sysv_sem
        .get(a.int(0), a.int(1), a.int(2), &who)?;
    Ok(id as u64)
}

/// Whether the caller may read (and, if `write`, alter) the set (Linux's `ipcperms`).
fn permitted(t: &Task, s: &SemSet, write: bool) -> bool {
    caller(t).may(&s.perm, if write { ALTER } else { READ })
}

/// Implements semop(2).
pub fn sys_semop(t: &mut Task, a: &SyscallArgs) -> SysResult {
    semop(t, a.int(0), a.gva(1), a.u(2), None)
}

/// Implements semtimedop(2).
pub fn sys_semtimedop(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let deadline = if a.u(3) == 0 {
        None
    } else {
        let mut ts = [0u8; 16];
        t.copy_in(a.gva(3), &mut ts)?;
        let sec = i64::from_le_bytes(ts[..8].try_into().unwrap_or([0; 8]));
        let nsec = i64::from_le_bytes(ts[8..].try_into().unwrap_or([0; 8]));
        if sec < 0 || !(0..1_000_000_000).contains(&nsec) {
            return Err(Errno::EINVAL);
        }
        let d = std::time::Duration::new(sec as u64, nsec as u32);
        Some(std::time::Instant::now() + d.min(std::time::Duration::from_secs(1 << 32)))
    };
    semop(t, a.int(0), a.gva(1), a.u(2), deadline)
}

fn semop(
    t: &mut Task,
    id: i32,
    sops: platform::Gva,
    nsops: u64,
    deadline: Option<std::time::Instant>,
) -> SysResult {
    if nsops == 0 {
        return Err(Errno::EINVAL);
    }
    let opm = t.group.procs.sysv_sem.limits().opm;
    if nsops > u64::try_from(opm).unwrap_or(0) {
        return Err(Errno::E2BIG);
    }
    // torpor's ceiling on what it allocates, whatever `kernel/sem` a privileged guest set.
    if nsops > ipc::limits::SEM_CEILING as u64 {
        return Err(Errno::ENOMEM);
    }
    let mut raw = vec![0u8; nsops as usize * 6];
    t.copy_in(sops, &mut raw)?;
    let ops: Vec<SemOp> = raw
        .chunks_exact(6)
        .map(|c| SemOp {
            num: u16::from_le_bytes([c[0], c[1]]),
            op: i16::from_le_bytes([c[2], c[3]]),
            flags: i16::from_le_bytes([c[4], c[5]]),
        })
        .collect();
    let table = t.group.procs.sysv_sem.clone();
    let alters = ops.iter().any(|o| o.op != 0);
    let allowed = table.with(id, |s| permitted(t, s, alters))?;
    if !allowed {
        return Err(Errno::EACCES);
    }
    let control = t.control.clone();
    let group = t.group.clone();
    let tid = t.tid;
    let interrupted =
        || control.park_requested() || control.signal_pending() || group.must_leave(tid);
    table.semop(id, &ops, t.pid, deadline, interrupted)?;
    Ok(0)
}

/// Implements semctl(2): IPC_STAT, SEM_STAT and SEM_STAT_ANY (by index; they return the
/// id), IPC_SET, IPC_RMID, IPC_INFO and SEM_INFO (they return the highest index in use),
/// GETVAL, SETVAL, GETALL, SETALL, GETPID, GETNCNT/GETZCNT (0).
pub fn sys_semctl(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (id, num, cmd, arg) = (a.int(0), a.int(1), a.int(2), a.u(3));
    if id < 0 || cmd < 0 {
        return Err(Errno::EINVAL);
    }
    let cmd = cmd & !IPC_64;
    let table = t.group.procs.sysv_sem.clone();
    let sem_index = |s: &SemSet| -> Result<usize, Errno> {
        usize::try_from(num)
            .ok()
            .filter(|&n| n < s.sems.len())
            .ok_or(Errno::EINVAL)
    };
    match cmd {
        c @ (IPC_INFO | SEM_INFO) => {
            let (info, max_idx) = table.info(c == SEM_INFO);
            t.copy_out(platform::Gva(arg), &info)?;
            Ok(max_idx as u64)
        }
        c @ (IPC_STAT | SEM_STAT | SEM_STAT_ANY) => {
            let by = match c {
                IPC_STAT => StatBy::Id,
                SEM_STAT => StatBy::Index,
                _ => StatBy::IndexAny,
            };
            let (ds, full_id) = table.stat(id, by, &caller(t))?;
            t.copy_out(platform::Gva(arg), &ds)?;
            Ok(if c == IPC_STAT { 0 } else { full_id as u64 })
        }
        IPC_SET => {
            let mut ds = [0u8; 104];
            t.copy_in(platform::Gva(arg), &mut ds)?;
            table.set(id, &ds, &caller(t))?;
            Ok(0)
        }
        IPC_RMID => {
            table.remove(id, &caller(t))?;
            Ok(0)
        }
        GETVAL | GETPID | GETNCNT | GETZCNT => {
            let v = table.with(id, |s| -> Result<i32, Errno> {
                if !permitted(t, s, false) {
                    return Err(Errno::EACCES);
                }
                let sem = s.sems[sem_index(s)?];
                Ok(match cmd {
                    GETVAL => sem.value,
                    GETPID => sem.pid,
                    _ => 0,
                })
            })??;
            Ok(v as u64)
        }
        SETVAL => {
            let value = arg as u32 as i32;
            if !(0..=ipc::SEMVMX).contains(&value) {
                return Err(Errno::ERANGE);
            }
            let pid = t.pid;
            let n = table.with(id, |s| -> Result<usize, Errno> {
                if !permitted(t, s, true) {
                    return Err(Errno::EACCES);
                }
                let n = sem_index(s)?;
                s.sems[n].value = value;
                s.sems[n].pid = pid;
                s.ctime = ipc::now();
                Ok(n)
            })??;
            table.clear_undo(id, Some(n as u16));
            Ok(0)
        }
        GETALL => {
            let values = table.with(id, |s| -> Result<Vec<u8>, Errno> {
                if !permitted(t, s, false) {
                    return Err(Errno::EACCES);
                }
                Ok(s.sems
                    .iter()
                    .flat_map(|x| (x.value as u16).to_le_bytes())
                    .collect())
            })??;
            t.copy_out(platform::Gva(arg), &values)?;
            Ok(0)
        }
        SETALL => {
            let n = table.with(id, |s| s.sems.len())?;
            let mut raw = vec![0u8; n * 2];
            t.copy_in(platform::Gva(arg), &mut raw)?;
            let values: Vec<i32> = raw
                .chunks_exact(2)
                .map(|c| i32::from(u16::from_le_bytes([c[0], c[1]])))
                .collect();
            if values.iter().any(|&v| v > ipc::SEMVMX) {
                return Err(Errno::ERANGE);
            }
            let pid = t.pid;
            table.with(id, |s| -> Result<(), Errno> {
                if !permitted(t, s, true) {
                    return Err(Errno::EACCES);
                }
                for (sem, v) in s.sems.iter_mut().zip(&values) {
                    sem.value = *v;
                    sem.pid = pid;
                }
                s.ctime = ipc::now();
                Ok(())
            })??;
            table.clear_undo(id, None);
            Ok(0)
        }
        _ => Err(Errno::EINVAL),
    }
}
