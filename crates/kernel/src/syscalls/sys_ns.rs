//! Namespaces: setns(2), unshare(2), and the `CLONE_NEW*` flags of clone(2).
//!
//! A sandbox is the one set of namespaces its processes see ([`crate::fs::procfs::ns`]);
//! none can be made or entered. Each call validates its arguments as Linux does, then
//! answers EPERM where Linux checks CAP_SYS_ADMIN, as for a container's root without it
//! (also for a new user namespace, which Linux would let anyone make).

use std::sync::Arc;

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::fs::procfs::ns;
use crate::task::Task;

const CLONE_NEWTIME: u64 = 0x80;
const CLONE_NEWNS: u64 = libc::CLONE_NEWNS as u64;
const CLONE_NEWCGROUP: u64 = libc::CLONE_NEWCGROUP as u64;
const CLONE_NEWUTS: u64 = libc::CLONE_NEWUTS as u64;
const CLONE_NEWIPC: u64 = libc::CLONE_NEWIPC as u64;
const CLONE_NEWUSER: u64 = libc::CLONE_NEWUSER as u64;
const CLONE_NEWPID: u64 = libc::CLONE_NEWPID as u64;
const CLONE_NEWNET: u64 = libc::CLONE_NEWNET as u64;

/// The namespace flags clone(2) takes (CLONE_NEWTIME's bit is its exit signal's there).
pub(super) const CLONE_NAMESPACES: u64 = CLONE_NEWNS
    | CLONE_NEWCGROUP
    | CLONE_NEWUTS
    | CLONE_NEWIPC
    | CLONE_NEWUSER
    | CLONE_NEWPID
    | CLONE_NEWNET;

/// Every namespace type's flag (unshare and setns).
const ALL_NAMESPACES: u64 = CLONE_NAMESPACES | CLONE_NEWTIME;

/// The answer of clone(2) with `flags` that ask for new namespaces (some of
/// [`CLONE_NAMESPACES`]), after Linux's checks of their combinations: EINVAL for a new mount
/// or user namespace with CLONE_FS, for a new user or pid namespace with CLONE_THREAD; else
/// EPERM (CAP_SYS_ADMIN).
pub(super) fn clone_refusal(flags: u64) -> Errno {
    let fs = flags & libc::CLONE_FS as u64 != 0;
    let thread = flags & libc::CLONE_THREAD as u64 != 0;
    if (fs && flags & (CLONE_NEWNS | CLONE_NEWUSER) != 0)
        || (thread && flags & (CLONE_NEWUSER | CLONE_NEWPID) != 0)
    {
        return Errno::EINVAL;
    }
    Errno::EPERM
}

/// Implements unshare(2): CLONE_FILES and CLONE_FS give the caller a descriptor table and a
/// working directory of its own, CLONE_SYSVSEM is accepted (undo lists are per process
/// already), CLONE_THREAD, CLONE_SIGHAND and CLONE_VM only by a single-threaded process
/// (else EINVAL, as Linux); a new namespace is EPERM; unknown flags EINVAL.
pub fn sys_unshare(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let flags = a.u(0);
    let own = (libc::CLONE_THREAD
        | libc::CLONE_FS
        | libc::CLONE_SIGHAND
        | libc::CLONE_VM
        | libc::CLONE_FILES
        | libc::CLONE_SYSVSEM) as u64;
    if flags & !(own | ALL_NAMESPACES) != 0 {
        return Err(Errno::EINVAL);
    }
    let threads = (libc::CLONE_THREAD | libc::CLONE_SIGHAND | libc::CLONE_VM) as u64;
    if flags & threads != 0 && t.group.live() > 1 {
        return Err(Errno::EINVAL);
    }
    if flags & ALL_NAMESPACES != 0 {
        return Err(Errno::EPERM);
    }
    if flags & libc::CLONE_FS as u64 != 0 {
        t.fs = t.fs.copy();
    }
    if flags & libc::CLONE_FILES as u64 != 0 {
        unshare_files(t);
    }
    Ok(0)
}

/// Implements setns(2): with a namespace descriptor, EINVAL if `nstype` is neither 0 nor its
/// type, EINVAL for the user namespace (the caller's own: Linux refuses to enter it again),
/// else EPERM; with a pidfd, EINVAL unless `nstype` is a set of namespace flags, ESRCH for a
/// process gone, EINVAL with CLONE_NEWUSER (installed first, the caller's own), else EPERM;
/// any other descriptor EINVAL.
pub fn sys_setns(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (fd, nstype) = (a.int(0), a.u(1) as u32 as u64);
    let f = t.fds.get(fd)?;
    if let Some(n) = ns::of_file(&f) {
        if nstype != 0 && nstype != n.clone_flag() {
            return Err(Errno::EINVAL);
        }
        return Err(if n == ns::Namespace::User {
            Errno::EINVAL
        } else {
            Errno::EPERM
        });
    }
    if let crate::fd::FileKind::Pidfd(pid) = f.kind {
        if nstype == 0 || nstype & !ALL_NAMESPACES != 0 {
            return Err(Errno::EINVAL);
        }
        if pid != t.pid && t.group.procs.group_of(pid).is_none() {
            return Err(Errno::ESRCH);
        }
        if nstype & CLONE_NEWUSER != 0 {
            return Err(Errno::EINVAL);
        }
        return Err(Errno::EPERM);
    }
    Err(Errno::EINVAL)
}

/// Gives the caller's process a descriptor table of its own when it shares one with another
/// process (clone with CLONE_FILES), as Linux's unshare_files: at execve, and for
/// close_range's CLOSE_RANGE_UNSHARE. The copy holds the same open file descriptions.
pub(super) fn unshare_files(t: &mut Task) {
    let shared = t
        .group
        .procs
        .live_groups()
        .into_iter()
        .filter(|(pid, _)| *pid != t.pid)
        .filter_map(|(_, g)| g.resources())
        .any(|r| Arc::ptr_eq(&r.fds, &t.fds));
    if !shared {
        return;
    }
    t.fds = Arc::new(t.fds.fork_copy());
    if let Some(mut r) = t.group.resources() {
        r.fds = t.fds.clone();
        t.group.set_resources(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clone_refusals() {
        assert_eq!(clone_refusal(CLONE_NEWUTS), Errno::EPERM);
        assert_eq!(
            clone_refusal(CLONE_NEWNS | libc::CLONE_FS as u64),
            Errno::EINVAL
        );
        let thread = (libc::CLONE_THREAD | libc::CLONE_VM | libc::CLONE_SIGHAND) as u64;
        assert_eq!(clone_refusal(CLONE_NEWPID | thread), Errno::EINVAL);
        assert_eq!(clone_refusal(CLONE_NEWNET | thread), Errno::EPERM);
    }
}
