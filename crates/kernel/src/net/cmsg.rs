//! Control messages (`msg_control` of sendmsg/recvmsg) between the guest and the host.
//!
//! The guest's `cmsghdr` layout is the host's (x86-64: a 16-byte header, data aligned to 8),
//! so a control buffer crosses almost unchanged; what changes is what the data means:
//!
//! - `SCM_RIGHTS` carries fd numbers. On send, each guest fd is looked up in the sender's
//!   table (`EBADF` if not open; an io_uring instance is `EINVAL`, as on Linux) and replaced
//!   by its host fd; the host kernel then passes the open files themselves. On receive, the
//!   host has installed the files as host fds of the holder (always close-on-exec,
//!   `MSG_CMSG_CLOEXEC`): each becomes an open file of the receiver's table, of the kind its
//!   host fd shows ([`received_file`]), and its guest number replaces the host one. The host
//!   buffer is exactly as large as the guest's, so the host's truncation (the fds that do not
//!   fit are closed, `MSG_CTRUNC`) is Linux's.
//! - `SCM_CREDENTIALS` carries a `struct ucred`. On send, the guest's values are checked as
//!   Linux checks them (its own pid, uid and gid, unless it is root: `EPERM`) and not passed to
//!   the host, which would refuse the guest pid; they are recorded as the sending socket's
//!   credentials instead. On receive, the host's values (the holder's pid) are replaced by the
//!   sender's guest credentials (see `unix::sender_credentials`).
//!
//! Malformed headers are `EINVAL`, more than `SCM_MAX_FD` fds `EINVAL`, another
//! `SOL_SOCKET` type on a Unix socket `EINVAL` (Linux's `__scm_send`); other levels are
//! ignored on Unix sockets and passed through on Internet sockets, where `SCM_RIGHTS` and
//! `SCM_CREDENTIALS` are ignored (dropped, as Linux accepts and ignores them).

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use abi::Errno;

use super::host;
use super::unix::{Ucred, UnixRef};
use super::NetPolicy;
use crate::fd::{FdTable, FileKind, OpenFile, SocketState};
use crate::fs::Root;

/// `sizeof(struct cmsghdr)`.
const CMSG_HDR: usize = 16;
/// Most fds one message may carry (Linux's SCM_MAX_FD).
pub const SCM_MAX_FD: usize = 253;
/// Most control bytes taken from or handed to the guest (Linux's `optmem_max` is of this
/// order; beyond it a send is `ENOBUFS`).
pub const MAX_CONTROL: usize = 128 << 10;

/// `CMSG_ALIGN`.
fn align(n: usize) -> usize {
    (n + 7) & !7
}

fn header(len: usize, level: i32, ty: i32) -> [u8; CMSG_HDR] {
    let mut h = [0u8; CMSG_HDR];
    h[0..8].copy_from_slice(&(len as u64).to_ne_bytes());
    h[8..12].copy_from_slice(&level.to_ne_bytes());
    h[12..16].copy_from_slice(&ty.to_ne_bytes());
    h
}

/// One control message: level, type and data.
struct Cmsg<'a> {
    level: i32,
    ty: i32,
    data: &'a [u8],
}

/// Splits a control buffer into messages as Linux walks it (`CMSG_FIRSTHDR`/`CMSG_NXTHDR`:
/// a tail shorter than a header is ignored; a header whose length is shorter than itself or
/// runs past the buffer is `EINVAL`).
fn parse(buf: &[u8]) -> Result<Vec<Cmsg<'_>>, Errno> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while buf.len().saturating_sub(at) >= CMSG_HDR {
        let h = &buf[at..at + CMSG_HDR];
        let len = u64::from_ne_bytes(h[0..8].try_into().map_err(|_| Errno::EINVAL)?);
        let len = usize::try_from(len).map_err(|_| Errno::EINVAL)?;
        if len < CMSG_HDR || len > buf.len() - at {
            return Err(Errno::EINVAL);
        }
        out.push(Cmsg {
            level: i32::from_ne_bytes(h[8..12].try_into().map_err(|_| Errno::EINVAL)?),
            ty: i32::from_ne_bytes(h[12..16].try_into().map_err(|_| Errno::EINVAL)?),
            data: &buf[at + CMSG_HDR..at + len],
        });
        at = at.saturating_add(align(len));
    }
    Ok(out)
}

fn push(out: &mut Vec<u8>, level: i32, ty: i32, data: &[u8]) {
    let len = CMSG_HDR + data.len();
    out.extend_from_slice(&header(len, level, ty));
    out.extend_from_slice(data);
    out.resize(align(out.len()), 0);
}

/// A guest control buffer made ready for the host.
#[derive(Default)]
pub struct Outgoing {
    /// Host control bytes.
    pub bytes: Vec<u8>,
    /// The files whose host fds `bytes` names, kept open until the send returns.
    _files: Vec<Arc<OpenFile>>,
    /// Credentials the guest sent (checked).
    pub creds: Option<Ucred>,
}

/// Who is sending, for the `SCM_CREDENTIALS` check.
#[derive(Clone, Copy)]
pub struct Sender {
    /// The sender's own credentials.
    pub cred: Ucred,
    /// Whether it may claim other credentials (uid 0: CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID).
    pub privileged: bool,
}

/// Translates the guest's control buffer for a send on a socket of `family`.
///
/// # Errors
/// EINVAL for a malformed buffer, too many fds or an unknown `SOL_SOCKET` type; EBADF for an
/// fd that is not open; EPERM for credentials the sender may not claim.
pub fn to_host(
    guest: &[u8],
    family: i32,
    fds: &FdTable,
    sender: Sender,
) -> Result<Outgoing, Errno> {
    let mut out = Outgoing::default();
    let mut nfds = 0usize;
    for c in parse(guest)? {
        if c.level != libc::SOL_SOCKET {
            if family != libc::AF_UNIX {
                push(&mut out.bytes, c.level, c.ty, c.data);
            }
            continue;
        }
        if family != libc::AF_UNIX {
            // SCM_RIGHTS and SCM_CREDENTIALS mean nothing to an Internet socket: Linux's
            // `__sock_cmsg_send` accepts and ignores them. They are dropped here, so that a
            // guest fd number never reaches the host as one.
            if c.ty != libc::SCM_RIGHTS && c.ty != libc::SCM_CREDENTIALS {
                push(&mut out.bytes, c.level, c.ty, c.data);
            }
            continue;
        }
        match c.ty {
            libc::SCM_RIGHTS => {
                let n = c.data.len() / 4;
                if n == 0 {
                    continue;
                }
                nfds += n;
                if nfds > SCM_MAX_FD {
                    return Err(Errno::EINVAL);
                }
                let mut data = Vec::with_capacity(n * 4);
                for w in c.data.chunks_exact(4) {
                    let fd = i32::from_ne_bytes([w[0], w[1], w[2], w[3]]);
                    let f = fds.get(fd)?;
                    // Linux refuses to pass an io_uring instance (`scm_fp_copy`).
                    if matches!(f.kind, crate::fd::FileKind::IoUring(_)) {
                        return Err(Errno::EINVAL);
                    }
                    data.extend_from_slice(&f.host().as_raw_fd().to_ne_bytes());
                    out._files.push(f);
                }
                push(&mut out.bytes, libc::SOL_SOCKET, libc::SCM_RIGHTS, &data);
            }
            libc::SCM_CREDENTIALS => {
                if c.data.len() != Ucred::SIZE {
                    return Err(Errno::EINVAL);
                }
                let u = Ucred::from_bytes(c.data).ok_or(Errno::EINVAL)?;
                let ok = sender.privileged
                    || (u.pid == sender.cred.pid
                        && u.uid == sender.cred.uid
                        && u.gid == sender.cred.gid);
                if !ok {
                    return Err(Errno::EPERM);
                }
                out.creds = Some(u);
            }
            _ => return Err(Errno::EINVAL),
        }
    }
    Ok(out)
}

/// What a received control buffer became.
pub struct Incoming {
    /// Guest control bytes.
    pub bytes: Vec<u8>,
    /// Set when fds were dropped (MSG_CTRUNC).
    pub truncated: bool,
}

/// Translates a received host control buffer for the guest: `install` turns each received
/// host fd into a guest fd (or fails, which drops it and the rest), `creds` maps the host's
/// `SCM_CREDENTIALS`.
pub fn from_host(
    host_bytes: &[u8],
    mut install: impl FnMut(OwnedFd) -> Result<i32, Errno>,
    creds: impl Fn(Ucred) -> Ucred,
) -> Incoming {
    let mut out = Incoming {
        bytes: Vec::with_capacity(host_bytes.len()),
        truncated: false,
    };
    // The host wrote these messages itself: parsing cannot fail, but a failure would only
    // mean nothing to hand over.
    let msgs = parse(host_bytes).unwrap_or_default();
    for c in msgs {
        match (c.level, c.ty) {
            (libc::SOL_SOCKET, libc::SCM_RIGHTS) => {
                let mut data = Vec::with_capacity(c.data.len());
                let mut failed = false;
                for w in c.data.chunks_exact(4) {
                    let raw = i32::from_ne_bytes([w[0], w[1], w[2], w[3]]);
                    if raw < 0 {
                        continue;
                    }
                    // SAFETY: the host kernel just installed `raw` for this process in
                    // recvmsg's SCM_RIGHTS; nothing else owns it.
                    let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                    if failed {
                        continue; // closed here
                    }
                    match install(owned) {
                        Ok(g) => data.extend_from_slice(&g.to_ne_bytes()),
                        Err(_) => {
                            failed = true;
                            out.truncated = true;
                        }
                    }
                }
                if !data.is_empty() {
                    push(&mut out.bytes, libc::SOL_SOCKET, libc::SCM_RIGHTS, &data);
                }
            }
            (libc::SOL_SOCKET, libc::SCM_CREDENTIALS) => match Ucred::from_bytes(c.data) {
                Some(u) => push(
                    &mut out.bytes,
                    libc::SOL_SOCKET,
                    libc::SCM_CREDENTIALS,
                    &creds(u).to_bytes(),
                ),
                None => push(&mut out.bytes, c.level, c.ty, c.data),
            },
            _ => push(&mut out.bytes, c.level, c.ty, c.data),
        }
    }
    // Linux counts CMSG_SPACE for every message, the last one capped at the buffer: the
    // host's length already is that.
    out.bytes.truncate(host_bytes.len());
    out
}

/// The open file a received host fd becomes, of the kind its host fd shows: a socket (its
/// family and type from the host; a Unix socket joins the registry), a directory (with its
/// guest path when it lies in the root), an epoll instance, or any other file.
pub fn received_file(fd: OwnedFd, net: &Arc<NetPolicy>, root: &Root) -> OpenFile {
    let mode = host::fstat(fd.as_fd()).map_or(0, |s| s.st_mode & libc::S_IFMT);
    match mode {
        libc::S_IFSOCK => {
            let opt = |name| host::int_opt(fd.as_fd(), libc::SOL_SOCKET, name).unwrap_or(0);
            let family = opt(libc::SO_DOMAIN);
            let mut state = SocketState {
                family,
                kind: opt(libc::SO_TYPE),
                ..SocketState::default()
            };
            if family == libc::AF_UNIX {
                state.unix = UnixRef::new(net, fd.as_fd(), None).ok();
            }
            OpenFile::new(fd, FileKind::Socket(Mutex::new(state)), None)
        }
        libc::S_IFDIR => {
            let path = root.guest_path_of(&fd).ok();
            OpenFile::new(fd, FileKind::Directory, path)
        }
        _ => {
            let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()));
            if let Some(kind) = link
                .ok()
                .and_then(|l| FileKind::from_host_link(l.as_os_str()))
            {
                return OpenFile::new(fd, kind, None);
            }
            let path = root.guest_path_of(&fd).ok();
            OpenFile::new(fd, FileKind::Regular, path)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(level: i32, ty: i32, data: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        push(&mut v, level, ty, data);
        v
    }

    fn me() -> Sender {
        Sender {
            cred: Ucred {
                pid: 5,
                uid: 1000,
                gid: 1000,
            },
            privileged: false,
        }
    }

    #[test]
    fn malformed_buffers_are_einval() {
        let t = FdTable::new();
        let mut m = msg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &[0; 4]);
        m[0] = 8; // shorter than a header
        assert_eq!(
            to_host(&m, libc::AF_UNIX, &t, me()).err(),
            Some(Errno::EINVAL)
        );
        let mut m = msg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &[0; 4]);
        m[0] = 200; // past the buffer
        assert_eq!(
            to_host(&m, libc::AF_UNIX, &t, me()).err(),
            Some(Errno::EINVAL)
        );
        let mut m = msg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &[0; 4]);
        m[0..8].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert_eq!(
            to_host(&m, libc::AF_UNIX, &t, me()).err(),
            Some(Errno::EINVAL)
        );
        let m = msg(libc::SOL_SOCKET, 99, &[0; 4]);
        assert_eq!(
            to_host(&m, libc::AF_UNIX, &t, me()).err(),
            Some(Errno::EINVAL)
        );
        // A short tail is ignored; so are other levels on a Unix socket.
        assert!(to_host(&[0; 15], libc::AF_UNIX, &t, me())
            .unwrap()
            .bytes
            .is_empty());
        let m = msg(libc::IPPROTO_IP, 1, &[1, 2, 3, 4]);
        assert!(to_host(&m, libc::AF_UNIX, &t, me())
            .unwrap()
            .bytes
            .is_empty());
        assert_eq!(to_host(&m, libc::AF_INET, &t, me()).unwrap().bytes, m);
        // Rights on an Internet socket are accepted and dropped: no fd number reaches the
        // host.
        let m = msg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &0i32.to_ne_bytes());
        assert!(to_host(&m, libc::AF_INET, &t, me())
            .unwrap()
            .bytes
            .is_empty());
    }

    #[test]
    fn rights_become_host_fds_and_bad_ones_ebadf() {
        let t = FdTable::new();
        let f: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        let host_fd = f.as_raw_fd();
        let g = t
            .insert(Arc::new(OpenFile::new(f, FileKind::Regular, None)), false)
            .unwrap();
        let m = msg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &g.to_ne_bytes());
        let out = to_host(&m, libc::AF_UNIX, &t, me()).unwrap();
        assert_eq!(
            out.bytes,
            msg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &host_fd.to_ne_bytes())
        );
        let m = msg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &77i32.to_ne_bytes());
        assert_eq!(
            to_host(&m, libc::AF_UNIX, &t, me()).err(),
            Some(Errno::EBADF)
        );
        let many = vec![0u8; 4 * (SCM_MAX_FD + 1)];
        let m = msg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &many);
        assert_eq!(
            to_host(&m, libc::AF_UNIX, &t, me()).err(),
            Some(Errno::EINVAL)
        );
    }

    #[test]
    fn credentials_are_checked() {
        let t = FdTable::new();
        let good = msg(
            libc::SOL_SOCKET,
            libc::SCM_CREDENTIALS,
            &me().cred.to_bytes(),
        );
        let out = to_host(&good, libc::AF_UNIX, &t, me()).unwrap();
        assert!(out.bytes.is_empty());
        assert_eq!(out.creds, Some(me().cred));
        let other = Ucred {
            pid: 6,
            ..me().cred
        };
        let bad = msg(libc::SOL_SOCKET, libc::SCM_CREDENTIALS, &other.to_bytes());
        assert_eq!(
            to_host(&bad, libc::AF_UNIX, &t, me()).err(),
            Some(Errno::EPERM)
        );
        let root = Sender {
            privileged: true,
            ..me()
        };
        assert!(to_host(&bad, libc::AF_UNIX, &t, root).is_ok());
        let short = msg(libc::SOL_SOCKET, libc::SCM_CREDENTIALS, &[0; 8]);
        assert_eq!(
            to_host(&short, libc::AF_UNIX, &t, me()).err(),
            Some(Errno::EINVAL)
        );
    }

    #[test]
    fn received_rights_are_renumbered_and_failures_truncate() {
        let fds: Vec<i32> = (0..3)
            .map(|_| {
                let f: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
                std::os::fd::IntoRawFd::into_raw_fd(f)
            })
            .collect();
        let data: Vec<u8> = fds.iter().flat_map(|f| f.to_ne_bytes()).collect();
        let host = msg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &data);
        let mut next = 10;
        let inc = from_host(
            &host,
            |_fd| {
                next += 1;
                if next > 12 {
                    Err(Errno::EMFILE)
                } else {
                    Ok(next)
                }
            },
            |u| u,
        );
        assert!(inc.truncated);
        let want: Vec<u8> = [11i32, 12].iter().flat_map(|f| f.to_ne_bytes()).collect();
        assert_eq!(inc.bytes, msg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &want));
        let cred = Ucred {
            pid: 1,
            uid: 2,
            gid: 3,
        };
        let host = msg(libc::SOL_SOCKET, libc::SCM_CREDENTIALS, &cred.to_bytes());
        let inc = from_host(&host, |_| Ok(0), |u| Ucred { pid: 42, ..u });
        assert_eq!(Ucred::from_bytes(&inc.bytes[16..]).unwrap().pid, 42);
    }
}
