//! pidfd_getfd(2) and kcmp(2): reaching the descriptors and resources of another process of
//! the sandbox, under Linux's ptrace access rules.

use std::sync::Arc;

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::task::{ProcessResources, Task, ThreadGroup};

/// The resources of the process `pid` (a process or thread id) names, as the caller may
/// reach them: its own directly, another's through its thread group (ESRCH for no such
/// process; None once its last thread left).
fn resources_of(t: &Task, pid: i32) -> Result<(Arc<ThreadGroup>, Option<ProcessResources>), Errno> {
    if pid == t.tid || pid == t.pid || t.group.has_thread(pid) {
        let own = ProcessResources {
            mm: t.mm.clone(),
            mem: t.mem.clone(),
            fds: t.fds.clone(),
            space: t.group.space(),
        };
        return Ok((t.group.clone(), Some(own)));
    }
    let (_, g) = t.group.procs.group_of_task(pid).ok_or(Errno::ESRCH)?;
    let r = g.resources();
    Ok((g, r))
}

/// Whether the caller may reach process `g` (`ptrace_may_access`): its own always, another
/// by [`crate::creds::Credentials::may_attach`].
fn may_access(t: &Task, g: &Arc<ThreadGroup>) -> bool {
    Arc::ptr_eq(g, &t.group) || t.creds.may_attach(&g.identity().creds)
}

/// Implements pidfd_getfd(2): a new descriptor (close-on-exec, as Linux's) for the open file
/// description behind descriptor `fd` of the pidfd's process. Flags must be 0 (EINVAL);
/// EBADF for a descriptor that is not a pidfd or a target descriptor not open, ESRCH once
/// the process was reaped, EPERM without ptrace access.
pub fn sys_pidfd_getfd(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (pidfd, fd) = (a.int(0), a.int(1));
    if a.u(2) as u32 != 0 {
        return Err(Errno::EINVAL);
    }
    let pid = super::sys_fork::pidfd_target(t, pidfd, false)?;
    let (g, res) = resources_of(t, pid)?;
    if !may_access(t, &g) {
        return Err(Errno::EPERM);
    }
    let file = res.ok_or(Errno::EBADF)?.fds.get(fd)?;
    Ok(t.fds.insert(file, true)? as u64)
}

const KCMP_FILE: i32 = 0;
const KCMP_VM: i32 = 1;
const KCMP_FILES: i32 = 2;
const KCMP_SIGHAND: i32 = 4;

/// kcmp's order of two objects: 0 the same, 1 or 2 as their addresses compare.
fn order(a: usize, b: usize) -> u64 {
    u64::from(a < b) | (u64::from(a > b) << 1)
}

/// Implements kcmp(2) for KCMP_FILE (the open file descriptions behind two descriptors),
/// KCMP_VM (address spaces), KCMP_FILES (descriptor tables) and KCMP_SIGHAND (signal
/// actions: a process's threads share them); the other types are EINVAL. ESRCH for a pid
/// that names nothing, EPERM without ptrace access to both.
pub fn sys_kcmp(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (g1, r1) = resources_of(t, a.int(0))?;
    let (g2, r2) = resources_of(t, a.int(1))?;
    if !may_access(t, &g1) || !may_access(t, &g2) {
        return Err(Errno::EPERM);
    }
    match a.int(2) {
        KCMP_FILE => {
            let f1 = r1.ok_or(Errno::EBADF)?.fds.get(a.u(3) as i32)?;
            let f2 = r2.ok_or(Errno::EBADF)?.fds.get(a.u(4) as i32)?;
            Ok(order(Arc::as_ptr(&f1) as usize, Arc::as_ptr(&f2) as usize))
        }
        KCMP_VM | KCMP_FILES => {
            let (r1, r2) = (r1.ok_or(Errno::ESRCH)?, r2.ok_or(Errno::ESRCH)?);
            Ok(if a.int(2) == KCMP_VM {
                order(Arc::as_ptr(&r1.mm) as usize, Arc::as_ptr(&r2.mm) as usize)
            } else {
                order(Arc::as_ptr(&r1.fds) as usize, Arc::as_ptr(&r2.fds) as usize)
            })
        }
        KCMP_SIGHAND => Ok(order(Arc::as_ptr(&g1) as usize, Arc::as_ptr(&g2) as usize)),
        _ => Err(Errno::EINVAL),
    }
}
