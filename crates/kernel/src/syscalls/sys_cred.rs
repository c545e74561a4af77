//! Changing a process's user and group ids: setuid(2), setgid(2), setreuid(2),
//! setregid(2), setresuid(2), setresgid(2), setgroups(2), setfsuid(2), setfsgid(2).
//!
//! The sandbox keeps one id per process for real, effective, saved and filesystem ids
//! ([`Credentials`]): a change sets them all. As on Linux, uid 0 may take any id and any
//! other user only its own; ids are what the application sees (getuid, /proc, SO_PEERCRED)
//! and what System V permissions check, while files are still opened with the runtime's
//! host credentials inside the root. Each thread changes its own (glibc broadcasts the call
//! to every thread of the process, as Linux requires).

use std::sync::Arc;

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::task::{Credentials, Task};

/// Most supplementary groups (Linux's NGROUPS_MAX).
const NGROUPS_MAX: usize = 65536;

/// The id asked for among `ids` (-1 leaves one unchanged): the effective one if given,
/// else the real, else the saved; None when all are -1.
fn wanted(ids: &[u32]) -> Option<u32> {
    let order: &[usize] = match ids.len() {
        // set*id(id).
        1 => &[0],
        // setre*id(r, e): effective first.
        2 => &[1, 0],
        // setres*id(r, e, s): effective, real, saved.
        _ => &[1, 0, 2],
    };
    order
        .iter()
        .filter_map(|&i| ids.get(i).copied())
        .find(|&i| i != u32::MAX)
}

/// Applies a user id change: every given id must be the current one unless the caller is
/// root (EPERM otherwise).
fn change_uid(t: &mut Task, ids: &[u32]) -> SysResult {
    let Some(new) = wanted(ids) else { return Ok(0) };
    let cur = t.creds.uid;
    if cur != 0 && ids.iter().any(|&i| i != u32::MAX && i != cur) {
        return Err(Errno::EPERM);
    }
    if new != cur {
        let mut c = (*t.creds).clone();
        c.uid = new;
        t.creds = Arc::new(c);
        t.publish_identity();
    }
    Ok(0)
}

/// Applies a group id change (root, or the current gid only).
fn change_gid(t: &mut Task, ids: &[u32]) -> SysResult {
    let Some(new) = wanted(ids) else { return Ok(0) };
    if t.creds.uid != 0 && ids.iter().any(|&i| i != u32::MAX && i != t.creds.gid) {
        return Err(Errno::EPERM);
    }
    if new != t.creds.gid {
        let mut c: Credentials = (*t.creds).clone();
        c.gid = new;
        t.creds = Arc::new(c);
        t.publish_identity();
    }
    Ok(0)
}

fn id(a: &SyscallArgs, i: usize) -> u32 {
    a.u(i) as u32
}

/// Implements setuid(2).
pub fn sys_setuid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    if id(a, 0) == u32::MAX {
        return Err(Errno::EINVAL);
    }
    change_uid(t, &[id(a, 0)])
}

/// Implements setgid(2).
pub fn sys_setgid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    if id(a, 0) == u32::MAX {
        return Err(Errno::EINVAL);
    }
    change_gid(t, &[id(a, 0)])
}

/// Implements setreuid(2).
pub fn sys_setreuid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    change_uid(t, &[id(a, 0), id(a, 1)])
}

/// Implements setregid(2).
pub fn sys_setregid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    change_gid(t, &[id(a, 0), id(a, 1)])
}

/// Implements setresuid(2).
pub fn sys_setresuid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    change_uid(t, &[id(a, 0), id(a, 1), id(a, 2)])
}

/// Implements setresgid(2).
pub fn sys_setresgid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    change_gid(t, &[id(a, 0), id(a, 1), id(a, 2)])
}

/// Implements setfsuid(2): returns the previous id; changes it as setuid would, silently
/// refusing what setuid refuses.
pub fn sys_setfsuid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let old = t.creds.uid;
    let _ = change_uid(t, &[id(a, 0)]);
    Ok(u64::from(old))
}

/// Implements setfsgid(2).
pub fn sys_setfsgid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let old = t.creds.gid;
    let _ = change_gid(t, &[id(a, 0)]);
    Ok(u64::from(old))
}

/// Implements setgroups(2) (root only).
pub fn sys_setgroups(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let n = a.u(0);
    if n > NGROUPS_MAX as u64 {
        return Err(Errno::EINVAL);
    }
    if t.creds.uid != 0 {
        return Err(Errno::EPERM);
    }
    let mut raw = vec![0u8; n as usize * 4];
    t.copy_in(a.gva(1), &mut raw)?;
    let groups = raw
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let mut c = (*t.creds).clone();
    c.groups = groups;
    t.creds = Arc::new(c);
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::wanted;

    #[test]
    fn which_id_is_taken() {
        let m = u32::MAX;
        assert_eq!(wanted(&[5]), Some(5));
        assert_eq!(wanted(&[m, m]), None);
        assert_eq!(wanted(&[3, m]), Some(3));
        assert_eq!(wanted(&[3, 4]), Some(4));
        assert_eq!(wanted(&[1, 2, 3]), Some(2));
        assert_eq!(wanted(&[1, m, 3]), Some(1));
        assert_eq!(wanted(&[m, m, 3]), Some(3));
    }
}
