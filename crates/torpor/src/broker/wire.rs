//! The broker's messages: one `SOCK_SEQPACKET` datagram each way per call, descriptors as
//! `SCM_RIGHTS`.
//!
//! ```text
//! request   op u8 | 7 × 0 | 6 × u64 ints | 3 × u32 string lengths | u32 0 | the strings' bytes
//!           + up to 2 descriptors
//! answer    i64: 0, or -errno                                    + the opened descriptor, if any
//! ```
//! Integers are little-endian. Which ints, strings and descriptors an op uses is fixed by the
//! op ([`encode`], and the broker's `execute`).

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use kernel::broker::Op;

/// Largest request (an extended attribute's value is at most 64 KiB, names 255 bytes, paths
/// 4 KiB).
pub const MAX_REQUEST: usize = HEADER + 3 * 4096 + 65536;
/// Bytes before the strings.
const HEADER: usize = 8 + 6 * 8 + 3 * 4 + 4;
/// Most descriptors a request carries.
pub const MAX_FDS: usize = 2;

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
}

/// A request, decoded.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// One of [`code`].
    pub op: u8,
    /// Integer arguments.
    pub ints: [u64; 6],
    /// String arguments (paths, names, values), empty where the op has fewer.
    pub strs: [Vec<u8>; 3],
}

/// The request for `op` and the descriptors it passes.
pub fn encode<'a>(op: &Op<'a>) -> (Request, Vec<BorrowedFd<'a>>) {
    let r = |op: u8, ints: &[u64], strs: &[&[u8]]| {
        let mut i = [0u64; 6];
        i[..ints.len()].copy_from_slice(ints);
        let mut st: [Vec<u8>; 3] = Default::default();
        for (k, v) in strs.iter().enumerate() {
            st[k] = v.to_vec();
        }
        Request {
            op,
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
    }
}

impl Request {
    /// The request's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.strs.iter().map(Vec::len).sum::<usize>());
        out.push(self.op);
        out.extend_from_slice(&[0; 7]);
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
            ints,
            strs,
        })
    }
}

/// Sends `data` and `fds` as one datagram.
///
/// # Errors
/// The errno of `sendmsg`.
pub fn send(sock: BorrowedFd<'_>, data: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let iov = [std::io::IoSlice::new(data)];
    let payload = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_SPACE has no preconditions.
    let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: the msghdr points at live locals for the call; the control message is written
    // through the CMSG macros inside `cbuf`, which is `space` bytes long.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = space as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(payload) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(c),
                payload as usize,
            );
        }
        libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Receives one datagram into `buf` with up to [`MAX_FDS`] descriptors: its length (0 when
/// the peer is gone) and the descriptors (close-on-exec).
///
/// # Errors
/// The errno of `recvmsg`; `EMSGSIZE` for a datagram or control data cut short.
pub fn recv(sock: BorrowedFd<'_>, buf: &mut [u8]) -> std::io::Result<(usize, Vec<OwnedFd>)> {
    // SAFETY: CMSG_SPACE has no preconditions.
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS * 4) as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut fds = Vec::new();
    // SAFETY: the msghdr points at live buffers; received descriptors are taken into OwnedFds
    // right after the call, each exactly once.
    let (n, flags) = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let n = libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n > 0 {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    let data = libc::CMSG_DATA(c).cast::<i32>();
                    for i in 0..len / 4 {
                        fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        (n, msg.msg_flags)
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(std::io::Error::from_raw_os_error(libc::EMSGSIZE));
    }
    Ok((n as usize, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

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
            let (req, fds) = encode(op);
            assert!(!fds.is_empty() && fds.len() <= MAX_FDS);
            let b = req.to_bytes();
            assert_eq!(Request::from_bytes(&b).as_ref(), Some(&req), "{op:?}");
            // Cut short, extended, or with a length past the end: refused.
            assert!(Request::from_bytes(&b[..b.len() - 1]).is_none());
            let mut longer = b.clone();
            longer.push(0);
            assert!(Request::from_bytes(&longer).is_none());
        }
        assert!(Request::from_bytes(&[1; 10]).is_none());
        let mut lying = encode(&ops[0]).0.to_bytes();
        lying[56..60].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Request::from_bytes(&lying).is_none());
    }

    #[test]
    fn a_datagram_carries_its_descriptors() {
        let mut sv = [0; 2];
        // SAFETY: socketpair fills two fds.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                sv.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0);
        // SAFETY: fresh fds owned by nobody else.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
        let f = std::fs::File::open("/").unwrap();
        send(a.as_fd(), b"hello", &[f.as_raw_fd(), f.as_raw_fd()]).unwrap();
        let mut buf = [0u8; 64];
        let (n, fds) = recv(b.as_fd(), &mut buf).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"hello"[..], 2));
        drop(a);
        assert_eq!(recv(b.as_fd(), &mut buf).unwrap().0, 0, "peer gone");
    }
}
