//! Process groups and sessions: setpgid(2), getpgid(2), getpgrp(2), setsid(2), getsid(2).
//!
//! The sandbox's [`ProcessTable`](crate::task::ProcessTable) keeps each process's group and
//! session: a child starts in its parent's, a process with no parent inside the sandbox (the
//! first one, an OCI exec'd one) leads its own. kill(2) with 0 or a negative pid, wait4(2) and
//! waitid(2) on a group use them. There is no controlling terminal to attach to a session:
//! the terminal's foreground group (TIOCGPGRP) is whichever process asks.

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::task::Task;

/// Implements setpgid(2).
pub fn sys_setpgid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (pid, pgid) = (a.int(0), a.int(1));
    if pid < 0 || pgid < 0 {
        return Err(Errno::EINVAL);
    }
    t.group.procs.set_pgid(t.pid, pid, pgid)?;
    Ok(0)
}

/// Implements getpgid(2): 0 names the caller.
pub fn sys_getpgid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let pid = if a.int(0) == 0 { t.pid } else { a.int(0) };
    let m = t.group.procs.membership(pid).ok_or(Errno::ESRCH)?;
    Ok(m.pgid as u64)
}

/// Implements getpgrp(2).
pub fn sys_getpgrp(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    let m = t.group.procs.membership(t.pid).ok_or(Errno::ESRCH)?;
    Ok(m.pgid as u64)
}

/// Implements setsid(2).
pub fn sys_setsid(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Ok(t.group.procs.set_sid(t.pid)? as u64)
}

/// Implements getsid(2): 0 names the caller.
pub fn sys_getsid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let pid = if a.int(0) == 0 { t.pid } else { a.int(0) };
    let m = t.group.procs.membership(pid).ok_or(Errno::ESRCH)?;
    Ok(m.sid as u64)
}

/// CAP_SYS_TTY_CONFIG's number.
const CAP_SYS_TTY_CONFIG: u32 = 26;

/// Implements vhangup(2): EPERM without CAP_SYS_TTY_CONFIG (which the default capability set
/// lacks, as a container's); with it, 0 and nothing done (a session has no controlling
/// terminal of its own here to hang up).
pub fn sys_vhangup(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    if !t.creds.capable(CAP_SYS_TTY_CONFIG) {
        return Err(Errno::EPERM);
    }
    Ok(0)
}
