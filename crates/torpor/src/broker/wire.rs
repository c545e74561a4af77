//! The broker's messages: one `SOCK_SEQPACKET` datagram each way per call, descriptors as
//! `SCM_RIGHTS`.
//!
//! ```text
//! request   op u8 | caps u8 | 6 × 0 | 6 × u64 ints | 3 × u32 string lengths | u32 0 | the strings' bytes
//!           + up to 2 descriptors
//! answer    i64: 0, or -errno                                    + the opened descriptor, if any
//! ```
//! Integers are little-endian. Which ints, strings and descriptors an op uses is fixed by the
//! op ([`encode`], and the broker's `execute`). `caps` are the file capabilities the call may
//! use (bit `c` for capability `c`, the five the broker keeps): the application's own.

use std::os::fd::BorrowedFd;

use kernel::broker::Op;

/// Largest request (an extended attribute's value is at most 64 KiB, names 255 bytes, paths
/// 4 KiB).
pub const MAX_REQUEST: usize = HEADER + 3 * 4096 + 65536;
/// Bytes before the strings.
const HEADER: usize = 8 + 6 * 8 + 3 * 4 + 4;

/// Operation codes.
pub mod code {
    /// `Op::OpenAt2`.
    pub const OPENAT2: u8 = 1;
    /// `Op::MkdirAt`.
    pub const MKDIRAT: u8 = 2;
    /// `Op::MknodAt`.
    pub const MKNODAT: u8 = 3;
    /// `Op::UnlinkAt`.
    pub const UNLINKAT: u8 = 4;
    /// `Op::RenameAt2`.
    pub const RENAMEAT2: u8 = 5;
    /// `Op::LinkAt`.
    pub const LINKAT: u8 = 6;
    /// `Op::SymlinkAt`.
    pub const SYMLINKAT: u8 = 7;
    /// `Op::FchownAt`.
    pub const FCHOWNAT: u8 = 8;
    /// `Op::Chmod`.
    pub const CHMOD: u8 = 9;
    /// `Op::UtimensAt`.
    pub const UTIMENSAT: u8 = 10;
    /// `Op::SetXattr`.
    pub const SETXATTR: u8 = 11;
    /// `Op::RemoveXattr`.
    pub const REMOVEXATTR: u8 = 12;
    /// `Op::BindUnix`.
    pub const BIND_UNIX: u8 = 13;
    /// `Op::BindInet`.
    pub const BIND_INET: u8 = 14;
    /// `Op::ConnectInet`.
    pub const CONNECT_INET: u8 = 15;
    /// A holder's registration with the node's broker (`broker::node`): its root's
    /// descriptor, its published host addresses (strs\[0\], space-separated).
    pub const REGISTER: u8 = 16;
}

/// A request, decoded.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// One of [`code`].
    pub op: u8,
    /// The file capabilities the call may use (bit `c` for capability `c` < 5).
    pub caps: u8,
    /// Integer arguments.
    pub ints: [u64; 6],
    /// String arguments (paths, names, values), empty where the op has fewer.
    pub strs: [Vec<u8>; 3],
}

/// The request for `op`, made with file capabilities `caps`, and the descriptors it passes.
pub fn encode<'a>(op: &Op<'a>, caps: u8) -> (Request, Vec<BorrowedFd<'a>>) {
    let r = |op: u8, ints: &[u64], strs: &[&[u8]]| {
        let mut i = [0u64; 6];
        i[..ints.len()].copy_from_slice(ints);
        let mut st: [Vec<u8>; 3] = Default::default();
        for (k, v) in strs.iter().enumerate() {
            st[k] = v.to_vec();
        }
        Request {
            op,
            caps,
            ints: i,
            strs: st,
        }
    };
    match *op {
        Op::OpenAt2 {
            dir,
            path,
            flags,
            mode,
        } => (
            r(code::OPENAT2, &[flags as u32 as u64, mode.into()], &[path]),
            vec![dir],
        ),
        Op::MkdirAt { dir, name, mode } => (r(code::MKDIRAT, &[mode.into()], &[name]), vec![dir]),
        Op::MknodAt {
            dir,
            name,
            mode,
            dev,
        } => (r(code::MKNODAT, &[mode.into(), dev], &[name]), vec![dir]),
        Op::UnlinkAt { dir, name, flags } => (
            r(code::UNLINKAT, &[flags as u32 as u64], &[name]),
            vec![dir],
        ),
        Op::RenameAt2 {
            old_dir,
            old,
            new_dir,
            new,
            flags,
        } => (
            r(code::RENAMEAT2, &[flags.into()], &[old, new]),
            vec![old_dir, new_dir],
        ),
        Op::LinkAt {
            old_dir,
            old,
            new_dir,
            new,
            flags,
        } => (
            r(code::LINKAT, &[flags as u32 as u64], &[old, new]),
            vec![old_dir, new_dir],
        ),
        Op::SymlinkAt { target, dir, name } => {
            (r(code::SYMLINKAT, &[], &[target, name]), vec![dir])
        }
        Op::FchownAt {
            dir,
            name,
            uid,
            gid,
            flags,
        } => (
            r(
                code::FCHOWNAT,
                &[uid.into(), gid.into(), flags as u32 as u64],
                &[name],
            ),
            vec![dir],
        ),
        Op::Chmod { file, mode } => (r(code::CHMOD, &[mode.into()], &[]), vec![file]),
        Op::UtimensAt {
            dir,
            name,
            times,
            flags,
        } => (
            r(
                code::UTIMENSAT,
                &[
                    times[0].tv_sec as u64,
                    times[0].tv_nsec as u64,
                    times[1].tv_sec as u64,
                    times[1].tv_nsec as u64,
                    flags as u32 as u64,
                ],
                &[name],
            ),
            vec![dir],
        ),
        Op::SetXattr {
            file,
            name,
            value,
            flags,
        } => (
            r(code::SETXATTR, &[flags as u32 as u64], &[name, value]),
            vec![file],
        ),
        Op::RemoveXattr { file, name } => (r(code::REMOVEXATTR, &[], &[name]), vec![file]),
        Op::BindUnix { socket, dir, name } => (r(code::BIND_UNIX, &[], &[name]), vec![socket, dir]),
        Op::BindInet {
            family,
            kind,
            addr,
            v6only,
            reuseport,
        } => (
            r(
                code::BIND_INET,
                &[
                    family as u32 as u64,
                    kind as u32 as u64,
                    u64::from(v6only),
                    u64::from(reuseport),
                ],
                &[addr.to_string().as_bytes()],
            ),
            vec![],
        ),
        Op::ConnectInet { family, kind, addr } => (
            r(
                code::CONNECT_INET,
                &[family as u32 as u64, kind as u32 as u64],
                &[addr.to_string().as_bytes()],
            ),
            vec![],
        ),
    }
}

impl Request {
    /// The request's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.strs.iter().map(Vec::len).sum::<usize>());
        out.push(self.op);
        out.push(self.caps);
        out.extend_from_slice(&[0; 6]);
        for i in self.ints {
            out.extend_from_slice(&i.to_le_bytes());
        }
        for s in &self.strs {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(&[0; 4]);
        for s in &self.strs {
            out.extend_from_slice(s);
        }
        out
    }

    /// Decodes a request; `None` if it is malformed (short, lengths that do not add up).
    pub fn from_bytes(b: &[u8]) -> Option<Request> {
        if b.len() < HEADER || b.len() > MAX_REQUEST {
            return None;
        }
        let u64_at = |at: usize| {
            b.get(at..at + 8)
                .and_then(|s| s.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let u32_at = |at: usize| {
            b.get(at..at + 4)
                .and_then(|s| s.try_into().ok())
                .map(u32::from_le_bytes)
        };
        let mut ints = [0u64; 6];
        for (k, v) in ints.iter_mut().enumerate() {
            *v = u64_at(8 + 8 * k)?;
        }
        let mut strs: [Vec<u8>; 3] = Default::default();
        let mut at = HEADER;
        for (k, s) in strs.iter_mut().enumerate() {
            let len = u32_at(56 + 4 * k)? as usize;
            *s = b.get(at..at.checked_add(len)?)?.to_vec();
            at += len;
        }
        if at != b.len() {
            return None;
        }
        Some(Request {
            op: b[0],
            caps: b[1],
            ints,
            strs,
        })
    }
}

pub use crate::fdpass::{recv, send};

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, AsRawFd};

    #[test]
    fn requests_round_trip_and_malformed_ones_are_refused() {
        let f = std::fs::File::open("/").unwrap();
        let ops = [
            Op::OpenAt2 {
                dir: f.as_fd(),
                path: b"etc/passwd",
                flags: libc::O_RDONLY,
                mode: 0,
            },
            Op::RenameAt2 {
                old_dir: f.as_fd(),
                old: b"a",
                new_dir: f.as_fd(),
                new: b"b",
                flags: 1,
            },
            Op::SetXattr {
                file: f.as_fd(),
                name: b"user.x",
                value: &[0, 1, 2],
                flags: 0,
            },
            Op::Chmod {
                file: f.as_fd(),
                mode: 0o644,
            },
        ];
        for op in &ops {
            let (req, fds) = encode(op, 0x15);
            assert!(fds.len() <= crate::fdpass::MAX_FDS);
            let b = req.to_bytes();
            assert_eq!(Request::from_bytes(&b).as_ref(), Some(&req), "{op:?}");
            // Cut short, extended, or with a length past the end: refused.
            assert!(Request::from_bytes(&b[..b.len() - 1]).is_none());
            let mut longer = b.clone();
            longer.push(0);
            assert!(Request::from_bytes(&longer).is_none());
        }
        assert!(Request::from_bytes(&[1; 10]).is_none());
        let mut lying = encode(&ops[0], 0).0.to_bytes();
        lying[56..60].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Request::from_bytes(&lying).is_none());
    }

    #[test]
    fn a_datagram_carries_its_descriptors() {
        let (a, b) = crate::fdpass::seqpacket_pair().unwrap();
        let f = std::fs::File::open("/").unwrap();
        send(a.as_fd(), b"hello", &[f.as_raw_fd(), f.as_raw_fd()]).unwrap();
        let mut buf = [0u8; 64];
        let (n, fds) = recv(b.as_fd(), &mut buf).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"hello"[..], 2));
        drop(a);
        assert_eq!(recv(b.as_fd(), &mut buf).unwrap().0, 0, "peer gone");
    }
}
