//! A process's user and group ids and capabilities: getuid(2) and its family, setuid(2),
//! setgid(2), setreuid(2), setregid(2), setresuid(2), setresgid(2), setgroups(2),
//! setfsuid(2), setfsgid(2), capget(2), capset(2).
//!
//! The rules are Linux's, in [`crate::creds`]; each handler decodes its arguments and
//! applies one of them to a copy of the task's credentials. Each thread changes its own (glibc
//! broadcasts the set*id calls to every thread of the process, as Linux requires). The
//! filesystem ids are what the host checks the task's file calls against
//! ([`crate::fs::identity`]).

use std::sync::Arc;

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::task::{Credentials, Task};

/// Most supplementary groups (Linux's NGROUPS_MAX).
const NGROUPS_MAX: usize = 65536;

/// `_LINUX_CAPABILITY_VERSION_1`: one 32-bit set of each kind.
const CAP_V1: u32 = 0x1998_0330;
/// `_LINUX_CAPABILITY_VERSION_2` (deprecated, same layout as 3).
const CAP_V2: u32 = 0x2007_1026;
/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words of each set.
const CAP_V3: u32 = 0x2008_0522;

fn id(a: &SyscallArgs, i: usize) -> u32 {
    a.u(i) as u32
}

/// Applies `change` to a copy of the task's credentials and installs it if it succeeded.
fn change<T>(
    t: &mut Task,
    change: impl FnOnce(&mut Credentials) -> Result<T, Errno>,
) -> Result<T, Errno> {
    let mut c = (*t.creds).clone();
    let r = change(&mut c)?;
    c.committed_over(&t.creds);
    if c != *t.creds {
        t.creds = Arc::new(c);
        t.publish_identity();
    }
    Ok(r)
}

/// Implements getuid(2).
pub fn sys_getuid(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Ok(u64::from(t.creds.uid))
}

/// Implements geteuid(2).
pub fn sys_geteuid(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Ok(u64::from(t.creds.euid))
}

/// Implements getgid(2).
pub fn sys_getgid(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Ok(u64::from(t.creds.gid))
}

/// Implements getegid(2).
pub fn sys_getegid(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Ok(u64::from(t.creds.egid))
}

/// Implements getresuid(2).
pub fn sys_getresuid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let c = t.creds.clone();
    for (i, v) in [c.uid, c.euid, c.suid].into_iter().enumerate() {
        t.write_u32(a.gva(i), v)?;
    }
    Ok(0)
}

/// Implements getresgid(2).
pub fn sys_getresgid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let c = t.creds.clone();
    for (i, v) in [c.gid, c.egid, c.sgid].into_iter().enumerate() {
        t.write_u32(a.gva(i), v)?;
    }
    Ok(0)
}

/// Implements getgroups(2).
pub fn sys_getgroups(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let size = a.int(0);
    if size < 0 {
        return Err(Errno::EINVAL);
    }
    let groups = t.creds.groups.clone();
    if size == 0 {
        return Ok(groups.len() as u64);
    }
    if (size as usize) < groups.len() {
        return Err(Errno::EINVAL);
    }
    let bytes: Vec<u8> = groups.iter().flat_map(|g| g.to_le_bytes()).collect();
    t.copy_out(a.gva(1), &bytes)?;
    Ok(groups.len() as u64)
}

/// Implements setuid(2).
pub fn sys_setuid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    change(t, |c| c.set_id(id(a, 0), false)).map(|()| 0)
}

/// Implements setgid(2).
pub fn sys_setgid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    change(t, |c| c.set_id(id(a, 0), true)).map(|()| 0)
}

/// Implements setreuid(2).
pub fn sys_setreuid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    change(t, |c| c.set_re_ids(id(a, 0), id(a, 1), false)).map(|()| 0)
}

/// Implements setregid(2).
pub fn sys_setregid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    change(t, |c| c.set_re_ids(id(a, 0), id(a, 1), true)).map(|()| 0)
}

/// Implements setresuid(2).
pub fn sys_setresuid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    change(t, |c| c.set_res_ids([id(a, 0), id(a, 1), id(a, 2)], false)).map(|()| 0)
}

/// Implements setresgid(2).
pub fn sys_setresgid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    change(t, |c| c.set_res_ids([id(a, 0), id(a, 1), id(a, 2)], true)).map(|()| 0)
}

/// Implements setfsuid(2): returns the previous id; refuses silently.
pub fn sys_setfsuid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    change(t, |c| Ok(c.set_fs_id(id(a, 0), false))).map(u64::from)
}

/// Implements setfsgid(2).
pub fn sys_setfsgid(t: &mut Task, a: &SyscallArgs) -> SysResult {
    change(t, |c| Ok(c.set_fs_id(id(a, 0), true))).map(u64::from)
}

/// Implements setgroups(2) (CAP_SETGID).
pub fn sys_setgroups(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let n = a.u(0);
    if n > NGROUPS_MAX as u64 {
        return Err(Errno::EINVAL);
    }
    if !t.creds.capable(crate::creds::cap::SETGID) {
        return Err(Errno::EPERM);
    }
    let mut raw = vec![0u8; n as usize * 4];
    t.copy_in(a.gva(1), &mut raw)?;
    let groups = raw
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    change(t, |c| c.set_groups(groups)).map(|()| 0)
}

/// The header's version and the number of 32-bit words per set it asks for; an unknown
/// version is answered with the preferred one written back and EINVAL.
fn cap_header(t: &Task, a: &SyscallArgs) -> Result<(usize, i32), Errno> {
    let mut hdr = [0u8; 8];
    t.copy_in(a.gva(0), &mut hdr)?;
    let version = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
    let pid = i32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
    match version {
        CAP_V1 => Ok((1, pid)),
        CAP_V2 | CAP_V3 => Ok((2, pid)),
        _ => {
            t.write_u32(a.gva(0), CAP_V3)?;
            Err(Errno::EINVAL)
        }
    }
}

/// Implements capget(2): the sets of the caller (pid 0 or its own) or of another process of
/// the sandbox.
pub fn sys_capget(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (words, pid) = match cap_header(t, a) {
        Ok(v) => v,
        // A probe for the preferred version: no data pointer, no error.
        Err(Errno::EINVAL) if a.u(1) == 0 => return Ok(0),
        Err(e) => return Err(e),
    };
    if a.u(1) == 0 {
        return Ok(0);
    }
    if pid < 0 {
        return Err(Errno::EINVAL);
    }
    let caps = if pid == 0 || pid == t.pid {
        t.creds.caps
    } else {
        let g = t.group.procs.group_of(pid).ok_or(Errno::ESRCH)?;
        g.identity().creds.caps
    };
    let mut out = Vec::with_capacity(12 * words);
    for w in 0..words {
        for set in [caps.effective, caps.permitted, caps.inheritable] {
            out.extend_from_slice(&((set >> (32 * w)) as u32).to_le_bytes());
        }
    }
    t.copy_out(a.gva(1), &out)?;
    Ok(0)
}

/// Implements capset(2) on the caller itself (EPERM for another process, as Linux).
pub fn sys_capset(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (words, pid) = cap_header(t, a)?;
    if pid != 0 && pid != t.pid {
        return Err(Errno::EPERM);
    }
    let mut raw = vec![0u8; 12 * words];
    t.copy_in(a.gva(1), &mut raw)?;
    let word = |w: usize, k: usize| {
        let o = 12 * w + 4 * k;
        u64::from(u32::from_le_bytes([
            raw[o],
            raw[o + 1],
            raw[o + 2],
            raw[o + 3],
        ])) << (32 * w)
    };
    let set = |k: usize| (0..words).fold(0u64, |acc, w| acc | word(w, k));
    let (eff, perm, inh) = (set(0), set(1), set(2));
    let keep_high = |new: u64, old: u64| {
        if words == 1 {
            new | (old & !0xffff_ffff)
        } else {
            new
        }
    };
    let old = t.creds.caps;
    change(t, |c| {
        c.set_caps(
            keep_high(eff, old.effective),
            keep_high(perm, old.permitted),
            keep_high(inh, old.inheritable),
        )
    })
    .map(|()| 0)
}
