//! listmount(2) and statmount(2): the sandbox's mounts by their unique ids.
//!
//! The mounts are those `/proc/self/mountinfo` shows ([`crate::fs::procfs::mounts`]: the
//! holder's mounts at or beneath the sandbox's root), each known by the host's unique mount id
//! (`statx`'s STATX_MNT_ID_UNIQUE of its mount point, what the guest's own statx answers) and
//! by mountinfo's id. A mount whose root the caller's root (after a chroot(2)) cannot reach is
//! EPERM without CAP_SYS_ADMIN, as on Linux.

use std::ffi::CString;
use std::path::PathBuf;

use abi::Errno;
use platform::Gva;

use super::{SysResult, SyscallArgs};
use crate::fs::procfs::mounts::{self, Mount};
use crate::task::Task;

/// `mnt_id_req`'s first size (size, mnt_ns_fd, mnt_id, param) and its latest (mnt_ns_id).
const MNT_ID_REQ_SIZE_VER0: usize = 24;
const MNT_ID_REQ_SIZE_VER1: usize = 32;
const PAGE_SIZE: usize = 4096;
/// Unique mount ids are above this.
const MNT_UNIQUE_ID_OFFSET: u64 = 1 << 31;
/// `LSMT_ROOT`: the caller's root mount.
const LSMT_ROOT: u64 = u64::MAX;
const LISTMOUNT_REVERSE: u32 = 1;
/// listmount's limit on the ids asked for.
const MAX_IDS: u64 = 1_000_000;
/// The one mount namespace's id (statmount's `mnt_ns_id`): the sandbox has no other.
const MNT_NS_ID: u64 = MNT_UNIQUE_ID_OFFSET + 1;
const STATX_MNT_ID_UNIQUE: u32 = 0x4000;

const STATMOUNT_SB_BASIC: u64 = 0x1;
const STATMOUNT_MNT_BASIC: u64 = 0x2;
const STATMOUNT_PROPAGATE_FROM: u64 = 0x4;
const STATMOUNT_MNT_ROOT: u64 = 0x8;
const STATMOUNT_MNT_POINT: u64 = 0x10;
const STATMOUNT_FS_TYPE: u64 = 0x20;
const STATMOUNT_MNT_NS_ID: u64 = 0x40;
const STATMOUNT_MNT_OPTS: u64 = 0x80;
const STATMOUNT_SB_SOURCE: u64 = 0x200;
const STATMOUNT_SUPPORTED_MASK: u64 = 0x1000;
/// What this statmount fills.
const SUPPORTED: u64 = STATMOUNT_SB_BASIC
    | STATMOUNT_MNT_BASIC
    | STATMOUNT_PROPAGATE_FROM
    | STATMOUNT_MNT_ROOT
    | STATMOUNT_MNT_POINT
    | STATMOUNT_FS_TYPE
    | STATMOUNT_MNT_NS_ID
    | STATMOUNT_MNT_OPTS
    | STATMOUNT_SB_SOURCE
    | STATMOUNT_SUPPORTED_MASK;
/// `sizeof(struct statmount)`, before its strings.
const STATMOUNT_SIZE: usize = 512;

/// A `struct mnt_id_req` read and checked.
struct Request {
    mnt_id: u64,
    param: u64,
}

/// One mount of the sandbox.
struct GuestMount {
    unique: u64,
    parent_unique: u64,
    /// Its guest path relative to the sandbox's root (unescaped).
    point: Vec<u8>,
    info: Mount,
    /// Whether the caller's root reaches its root.
    reachable: bool,
}

/// copy_mnt_id_req and the namespace lookup: EFAULT, E2BIG, EINVAL as Linux; a namespace
/// descriptor that is not open is EBADF, one that is open no mount namespace EINVAL, a
/// namespace id other than the sandbox's ENOENT.
fn read_request(t: &Task, at: Gva) -> Result<Request, Errno> {
    let size = t.read_val::<u32>(at)? as usize;
    if size > PAGE_SIZE {
        return Err(Errno::E2BIG);
    }
    if size < MNT_ID_REQ_SIZE_VER0 {
        return Err(Errno::EINVAL);
    }
    let mut raw = vec![0u8; size];
    t.copy_in(at, &mut raw)?;
    if raw.len() > MNT_ID_REQ_SIZE_VER1 && raw[MNT_ID_REQ_SIZE_VER1..].iter().any(|&b| b != 0) {
        return Err(Errno::E2BIG);
    }
    raw.resize(MNT_ID_REQ_SIZE_VER1, 0);
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&raw[i..i + 8]);
        u64::from_le_bytes(b)
    };
    let ns_fd = u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]);
    let (mnt_id, param, ns_id) = (u64_at(8), u64_at(16), u64_at(24));
    if ns_fd != 0 && ns_id != 0 {
        return Err(Errno::EINVAL);
    }
    if mnt_id <= MNT_UNIQUE_ID_OFFSET {
        return Err(Errno::EINVAL);
    }
    if ns_fd != 0 {
        // No descriptor of the sandbox is a mount namespace's.
        t.fds.get(ns_fd as i32)?;
        return Err(Errno::EINVAL);
    }
    if ns_id != 0 && ns_id != MNT_NS_ID {
        return Err(Errno::ENOENT);
    }
    Ok(Request { mnt_id, param })
}

/// The host's unique mount id of the mount at host path `path`.
fn unique_id(path: &std::path::Path) -> Option<u64> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: `libc::statx` is plain integers; all zeroes is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a writable `struct statx`.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            STATX_MNT_ID_UNIQUE,
            &mut stx,
        )
    };
    (r == 0).then_some(stx.stx_mnt_id)
}

/// Whether guest path `path` is `dir` or beneath it.
fn beneath(path: &[u8], dir: &[u8]) -> bool {
    dir == b"/" || path == dir || (path.starts_with(dir) && path.get(dir.len()) == Some(&b'/'))
}

/// The caller's root as a guest path of the sandbox's root (`/` unless chrooted).
fn caller_root(t: &Task) -> Vec<u8> {
    let sandbox = t.root.sandbox_path();
    match t.root.host_path().strip_prefix(sandbox) {
        Ok(rest) if !rest.as_os_str().is_empty() => {
            let mut p = b"/".to_vec();
            p.extend_from_slice(rest.as_os_str().as_encoded_bytes());
            p
        }
        _ => b"/".to_vec(),
    }
}

/// The sandbox's mounts, with their unique ids (those whose id cannot be read are left out).
fn table(t: &Task) -> Vec<GuestMount> {
    let sandbox: PathBuf = t.root.sandbox_path().to_path_buf();
    let root = caller_root(t);
    let list = mounts::of_root(&sandbox);
    let mut out: Vec<GuestMount> = Vec::with_capacity(list.len());
    for m in list {
        let point = mounts::unescape(&m.point).into_bytes();
        let host = if point == b"/" {
            sandbox.clone()
        } else {
            let mut h = sandbox.clone().into_os_string();
            h.push(std::ffi::OsStr::new(
                &String::from_utf8_lossy(&point).into_owned(),
            ));
            PathBuf::from(h)
        };
        let Some(unique) = unique_id(&host) else {
            continue;
        };
        let reachable = beneath(&point, &root);
        out.push(GuestMount {
            unique,
            parent_unique: unique,
            point,
            info: m,
            reachable,
        });
    }
    let by_old: Vec<(u32, u64)> = out.iter().map(|m| (m.info.id, m.unique)).collect();
    for m in &mut out {
        if let Some((_, p)) = by_old.iter().find(|(id, _)| *id == m.info.parent) {
            m.parent_unique = *p;
        }
    }
    out
}

/// The mount of `list` whose unique id is `id`, if the caller may look at it: one its root
/// does not reach needs CAP_SYS_ADMIN.
///
/// # Errors
/// ENOENT for no such mount, EPERM for one out of reach.
fn mount_named<'a>(t: &Task, list: &'a [GuestMount], id: u64) -> Result<&'a GuestMount, Errno> {
    let m = list.iter().find(|m| m.unique == id).ok_or(Errno::ENOENT)?;
    if !m.reachable && !t.creds.capable(crate::creds::cap::SYS_ADMIN) {
        return Err(Errno::EPERM);
    }
    Ok(m)
}

/// Implements listmount(2): the ids of the mounts beneath the one asked for (every mount
/// the caller's root reaches for LSMT_ROOT, that one included), in increasing order (or
/// decreasing with LISTMOUNT_REVERSE) after `param`.
pub fn sys_listmount(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (ids_at, nr, flags) = (a.gva(1), a.u(2), a.u(3) as u32);
    if flags & !LISTMOUNT_REVERSE != 0 {
        return Err(Errno::EINVAL);
    }
    if nr > MAX_IDS {
        return Err(Errno::EOVERFLOW);
    }
    let req = read_request(t, a.gva(0))?;
    if req.param != 0 && req.param <= MNT_UNIQUE_ID_OFFSET {
        return Err(Errno::EINVAL);
    }
    let list = table(t);
    let mut ids: Vec<u64> = if req.mnt_id == LSMT_ROOT {
        list.iter()
            .filter(|m| m.reachable)
            .map(|m| m.unique)
            .collect()
    } else {
        let m = mount_named(t, &list, req.mnt_id)?;
        list.iter()
            .filter(|o| o.unique != m.unique && beneath(&o.point, &m.point))
            .map(|o| o.unique)
            .collect()
    };
    let reverse = flags & LISTMOUNT_REVERSE != 0;
    ids.sort_unstable();
    if reverse {
        ids.reverse();
        if req.param != 0 {
            ids.retain(|&id| id < req.param);
        }
    } else {
        ids.retain(|&id| id > req.param);
    }
    ids.truncate(nr as usize);
    if ids.is_empty() {
        return Ok(0);
    }
    let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
    t.copy_out(ids_at, &bytes)?;
    Ok(ids.len() as u64)
}

/// `struct statmount`'s fields and strings as they are built.
struct Statmount {
    fixed: [u8; STATMOUNT_SIZE],
    strings: Vec<u8>,
    mask: u64,
}

impl Statmount {
    fn put_u32(&mut self, at: usize, v: u32) {
        self.fixed[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn put_u64(&mut self, at: usize, v: u64) {
        self.fixed[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// A string field: its offset in the strings, the string and its NUL.
    fn put_str(&mut self, at: usize, s: &[u8]) {
        let off = self.strings.len() as u32;
        self.put_u32(at, off);
        self.strings.extend_from_slice(s);
        self.strings.push(0);
    }
}

/// Implements statmount(2): SB_BASIC, MNT_BASIC, PROPAGATE_FROM, MNT_ROOT, MNT_POINT,
/// FS_TYPE, MNT_NS_ID, MNT_OPTS, SB_SOURCE and SUPPORTED_MASK; the other parts are left out
/// of the answer's mask. Strings that do not fit the buffer are EOVERFLOW.
pub fn sys_statmount(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (buf, bufsize, flags) = (a.gva(1), a.u(2) as usize, a.u(3) as u32);
    if flags != 0 {
        return Err(Errno::EINVAL);
    }
    let req = read_request(t, a.gva(0))?;
    let list = table(t);
    let m = mount_named(t, &list, req.mnt_id)?;
    let want = req.param;
    let mut s = Statmount {
        fixed: [0u8; STATMOUNT_SIZE],
        strings: Vec::new(),
        mask: 0,
    };
    let opts: Vec<&str> = m.info.options.split(',').collect();
    let has = |o: &str| opts.contains(&o);
    if want & STATMOUNT_SB_BASIC != 0 {
        let (major, minor) = m.info.dev.split_once(':').unwrap_or(("0", "0"));
        s.put_u32(16, major.parse().unwrap_or(0));
        s.put_u32(20, minor.parse().unwrap_or(0));
        s.put_u64(24, sb_magic(t, m));
        let sb_opts: Vec<&str> = m.info.super_options.split(',').collect();
        let mut sb_flags = 0u32;
        for (name, bit) in [
            ("ro", 1u32),
            ("sync", 16),
            ("dirsync", 128),
            ("lazytime", 1 << 25),
        ] {
            if sb_opts.contains(&name) {
                sb_flags |= bit;
            }
        }
        s.put_u32(32, sb_flags);
        s.mask |= STATMOUNT_SB_BASIC;
    }
    if want & STATMOUNT_MNT_BASIC != 0 {
        s.put_u64(40, m.unique);
        s.put_u64(48, m.parent_unique);
        s.put_u32(56, m.info.id);
        s.put_u32(60, m.info.parent);
        let mut attr = 0u64;
        for (name, bit) in [
            ("ro", 0x1u64),
            ("nosuid", 0x2),
            ("nodev", 0x4),
            ("noexec", 0x8),
            ("noatime", 0x10),
            ("strictatime", 0x20),
            ("nodiratime", 0x80),
            ("nosymfollow", 0x20_0000),
        ] {
            if has(name) {
                attr |= bit;
            }
        }
        s.put_u64(64, attr);
        // mountinfo shows no propagation: every mount is private (MS_PRIVATE).
        s.put_u64(72, 1 << 18);
        s.mask |= STATMOUNT_MNT_BASIC;
    }
    if want & STATMOUNT_PROPAGATE_FROM != 0 {
        s.put_u64(96, 0);
        s.mask |= STATMOUNT_PROPAGATE_FROM;
    }
    if want & STATMOUNT_FS_TYPE != 0 {
        s.put_str(36, m.info.fstype.as_bytes());
        s.mask |= STATMOUNT_FS_TYPE;
    }
    if want & STATMOUNT_MNT_ROOT != 0 {
        s.put_str(104, b"/");
        s.mask |= STATMOUNT_MNT_ROOT;
    }
    if want & STATMOUNT_MNT_POINT != 0 {
        let root = caller_root(t);
        let shown = if root == b"/" {
            m.point.clone()
        } else {
            match m.point.strip_prefix(root.as_slice()) {
                Some([]) => b"/".to_vec(),
                Some(rest) if rest.starts_with(b"/") => rest.to_vec(),
                _ => m.point.clone(),
            }
        };
        s.put_str(108, &shown);
        s.mask |= STATMOUNT_MNT_POINT;
    }
    if want & STATMOUNT_MNT_NS_ID != 0 {
        s.put_u64(112, MNT_NS_ID);
        s.mask |= STATMOUNT_MNT_NS_ID;
    }
    if want & STATMOUNT_MNT_OPTS != 0 {
        // The filesystem's own options: the superblock's, without rw/ro.
        let fs_opts: Vec<&str> = m
            .info
            .super_options
            .split(',')
            .filter(|o| *o != "rw" && *o != "ro" && !o.is_empty())
            .collect();
        s.put_str(4, fs_opts.join(",").as_bytes());
        s.mask |= STATMOUNT_MNT_OPTS;
    }
    if want & STATMOUNT_SB_SOURCE != 0 {
        s.put_str(124, m.info.source.as_bytes());
        s.mask |= STATMOUNT_SB_SOURCE;
    }
    if want & STATMOUNT_SUPPORTED_MASK != 0 {
        s.put_u64(144, SUPPORTED);
        s.mask |= STATMOUNT_SUPPORTED_MASK;
    }
    let total = STATMOUNT_SIZE + s.strings.len();
    if !s.strings.is_empty() && total > bufsize {
        return Err(Errno::EOVERFLOW);
    }
    let mask = s.mask;
    s.put_u64(8, mask);
    s.put_u32(0, total as u32);
    let mut out = s.fixed.to_vec();
    out.extend_from_slice(&s.strings);
    out.truncate(bufsize);
    t.copy_out(buf, &out)?;
    Ok(0)
}

/// The mount's filesystem magic (statfs's `f_type`), 0 if it cannot be read.
fn sb_magic(t: &Task, m: &GuestMount) -> u64 {
    let mut host = t
        .root
        .sandbox_path()
        .as_os_str()
        .as_encoded_bytes()
        .to_vec();
    if m.point != b"/" {
        host.extend_from_slice(&m.point);
    }
    let Ok(c) = CString::new(host) else { return 0 };
    // SAFETY: `libc::statfs` is plain integers; all zeroes is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a writable `struct statfs`.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return 0;
    }
    st.f_type as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_beneath() {
        assert!(beneath(b"/a", b"/"));
        assert!(beneath(b"/a/b", b"/a"));
        assert!(beneath(b"/a", b"/a"));
        assert!(!beneath(b"/ab", b"/a"));
        assert!(!beneath(b"/", b"/a"));
    }
}
