//! Host socket calls: each function wraps one libc call on a host fd the caller owns, so
//! the socket layer above and the syscall handlers stay free of `unsafe`.
//!
//! Addresses travel as [`RawSockAddr`] (bytes in the Linux x86-64 layout, which is the host's),
//! data as host iovecs pointing into guest memory (see `fd::iovecs`), control messages as byte
//! buffers in the host's `cmsghdr` layout (see `net::cmsg`).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use abi::Errno;

/// `sizeof(struct sockaddr_storage)`: the most address bytes a syscall takes.
pub const SOCKADDR_MAX: usize = 128;

/// A socket address as bytes in the Linux x86-64 layout (which is the host's), aligned so the
/// host may read it as a `struct sockaddr`.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct RawSockAddr {
    /// The bytes (only the first `len` mean anything).
    pub bytes: [u8; SOCKADDR_MAX],
    /// How many bytes are meaningful.
    pub len: usize,
}

impl std::fmt::Debug for RawSockAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawSockAddr({:?})", self.as_bytes())
    }
}

impl RawSockAddr {
    /// No address (length 0).
    pub fn empty() -> RawSockAddr {
        RawSockAddr {
            bytes: [0; SOCKADDR_MAX],
            len: 0,
        }
    }

    /// An address holding `b` (truncated to [`SOCKADDR_MAX`]).
    pub fn from_bytes(b: &[u8]) -> RawSockAddr {
        let mut r = RawSockAddr::empty();
        r.len = b.len().min(SOCKADDR_MAX);
        r.bytes[..r.len].copy_from_slice(&b[..r.len]);
        r
    }

    /// The meaningful bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len.min(SOCKADDR_MAX)]
    }

    /// For the host to read.
    pub fn ptr(&self) -> *const libc::sockaddr {
        self.bytes.as_ptr().cast()
    }

    /// For the host to write.
    pub fn mut_ptr(&mut self) -> *mut libc::sockaddr {
        self.bytes.as_mut_ptr().cast()
    }

    /// The length as the host takes it.
    pub fn socklen(&self) -> libc::socklen_t {
        self.len.min(SOCKADDR_MAX) as libc::socklen_t
    }
}

/// The `sa_family` of address bytes (0 when too short).
pub fn family_of(b: &[u8]) -> i32 {
    match b {
        [lo, hi, ..] => i32::from(u16::from_le_bytes([*lo, *hi])),
        _ => 0,
    }
}

fn cvt(r: libc::c_int) -> Result<libc::c_int, Errno> {
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r)
    }
}

fn cvt_size(r: isize) -> Result<u64, Errno> {
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r as u64)
    }
}

/// socket(2), always close-on-exec on the host.
///
/// # Errors
/// The host's errno.
pub fn socket(family: i32, kind: i32, nonblock: bool, protocol: i32) -> Result<OwnedFd, Errno> {
    let mut ty = kind | libc::SOCK_CLOEXEC;
    if nonblock {
        ty |= libc::SOCK_NONBLOCK;
    }
    // SAFETY: socket(2) takes no pointers.
    let fd = cvt(unsafe { libc::socket(family, ty, protocol) })?;
    // SAFETY: `fd` was just returned by socket(2) and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// socketpair(2) of AF_UNIX, always close-on-exec on the host.
///
/// # Errors
/// The host's errno.
pub fn socketpair(kind: i32, nonblock: bool, protocol: i32) -> Result<(OwnedFd, OwnedFd), Errno> {
    let mut ty = kind | libc::SOCK_CLOEXEC;
    if nonblock {
        ty |= libc::SOCK_NONBLOCK;
    }
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for both ends.
    cvt(unsafe { libc::socketpair(libc::AF_UNIX, ty, protocol, fds.as_mut_ptr()) })?;
    // SAFETY: two fresh fds owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// bind(2).
///
/// # Errors
/// The host's errno.
pub fn bind(fd: BorrowedFd<'_>, a: &RawSockAddr) -> Result<(), Errno> {
    // SAFETY: `a` holds `socklen()` initialised bytes; the host only reads them.
    cvt(unsafe { libc::bind(fd.as_raw_fd(), a.ptr(), a.socklen()) }).map(|_| ())
}

/// connect(2).
///
/// # Errors
/// The host's errno.
pub fn connect(fd: BorrowedFd<'_>, a: &RawSockAddr) -> Result<(), Errno> {
    // SAFETY: as for bind.
    cvt(unsafe { libc::connect(fd.as_raw_fd(), a.ptr(), a.socklen()) }).map(|_| ())
}

/// The backlog every listening host socket gets, whatever the application asks (see
/// `sys_listen`): connections that arrive while the sandbox is hibernated wait there.
pub const LISTEN_BACKLOG: i32 = 4096;

/// listen(2) on a host socket.
///
/// # Errors
/// The host's errno.
pub fn listen(fd: BorrowedFd<'_>, backlog: i32) -> Result<(), Errno> {
    // SAFETY: listen(2) takes no pointers.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), backlog) }).map(|_| ())
}

/// shutdown(2).
///
/// # Errors
/// The host's errno.
pub fn shutdown(fd: BorrowedFd<'_>, how: i32) -> Result<(), Errno> {
    // SAFETY: shutdown(2) takes no pointers.
    cvt(unsafe { libc::shutdown(fd.as_raw_fd(), how) }).map(|_| ())
}

/// accept4(2): the new socket and its peer's host address.
///
/// # Errors
/// The host's errno.
pub fn accept4(fd: BorrowedFd<'_>, flags: i32) -> Result<(OwnedFd, RawSockAddr), Errno> {
    let mut peer = RawSockAddr::empty();
    let mut len = SOCKADDR_MAX as libc::socklen_t;
    // SAFETY: `peer` has room for `len` bytes; the host writes at most that and updates `len`.
    let nfd = cvt(unsafe { libc::accept4(fd.as_raw_fd(), peer.mut_ptr(), &mut len, flags) })?;
    // SAFETY: `nfd` was just returned by accept4(2) and nothing else owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(nfd) };
    peer.len = (len as usize).min(SOCKADDR_MAX);
    Ok((owned, peer))
}

/// getsockname(2), or getpeername(2) when `peer`.
///
/// # Errors
/// The host's errno (ENOTCONN for an unconnected peer).
pub fn name(fd: BorrowedFd<'_>, peer: bool) -> Result<RawSockAddr, Errno> {
    let mut a = RawSockAddr::empty();
    let mut len = SOCKADDR_MAX as libc::socklen_t;
    // SAFETY: `a` has room for `len` bytes; the host writes at most that and updates `len`.
    let r = unsafe {
        if peer {
            libc::getpeername(fd.as_raw_fd(), a.mut_ptr(), &mut len)
        } else {
            libc::getsockname(fd.as_raw_fd(), a.mut_ptr(), &mut len)
        }
    };
    cvt(r)?;
    a.len = (len as usize).min(SOCKADDR_MAX);
    Ok(a)
}

/// Puts socket `new` in the place of `fd` (`dup3` onto its number: every holder of the
/// number now has `new`), keeping `fd`'s file status flags (`O_NONBLOCK`) and the options an
/// application sets before `bind` or `connect` that later calls rely on (`TCP_NODELAY`,
/// `SO_KEEPALIVE`, `SO_BROADCAST`); `new` is closed.
///
/// # Errors
/// The host's errno.
pub fn replace(fd: BorrowedFd<'_>, new: OwnedFd) -> Result<(), Errno> {
    // SAFETY: F_GETFL on an fd we own.
    let fl = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if fl < 0 {
        return Err(Errno::last());
    }
    let keep: Vec<(i32, i32, i32)> = [
        (libc::IPPROTO_TCP, libc::TCP_NODELAY),
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE),
        (libc::SOL_SOCKET, libc::SO_BROADCAST),
    ]
    .into_iter()
    .filter_map(|(level, name)| int_opt(fd, level, name).ok().map(|v| (level, name, v)))
    .filter(|&(_, _, v)| v != 0)
    .collect();
    for (level, name, v) in keep {
        let _ = set_int_opt(new.as_fd(), level, name, v);
    }
    // SAFETY: dup3 of a socket we own onto a number we own: the old socket behind it closes.
    if unsafe { libc::dup3(new.as_raw_fd(), fd.as_raw_fd(), libc::O_CLOEXEC) } < 0 {
        return Err(Errno::last());
    }
    // SAFETY: F_SETFL on an fd we own.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl) } < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// setsockopt(2).
///
/// # Errors
/// The host's errno.
pub fn setsockopt(fd: BorrowedFd<'_>, level: i32, name: i32, val: &[u8]) -> Result<(), Errno> {
    // SAFETY: the host reads at most `val.len()` bytes from `val`.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            val.as_ptr().cast(),
            val.len() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// getsockopt(2): the number of bytes written into `val`.
///
/// # Errors
/// The host's errno.
pub fn getsockopt(
    fd: BorrowedFd<'_>,
    level: i32,
    name: i32,
    val: &mut [u8],
) -> Result<usize, Errno> {
    let mut len = val.len() as libc::socklen_t;
    // SAFETY: the host writes at most `len` (= `val.len()`) bytes into `val` and updates `len`.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            val.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    Ok((len as usize).min(val.len()))
}

/// setsockopt(2) of an `int`.
///
/// # Errors
/// The host's errno.
pub fn set_int_opt(fd: BorrowedFd<'_>, level: i32, name: i32, v: i32) -> Result<(), Errno> {
    setsockopt(fd, level, name, &v.to_ne_bytes())
}

/// getsockopt(2) of an `int`.
///
/// # Errors
/// The host's errno.
pub fn int_opt(fd: BorrowedFd<'_>, level: i32, name: i32) -> Result<i32, Errno> {
    let mut v = [0u8; 4];
    getsockopt(fd, level, name, &mut v)?;
    Ok(i32::from_ne_bytes(v))
}

/// sendmsg(2) of guest memory (`iov` points into it), to `dest` if given, with a control
/// message buffer in the host layout.
///
/// # Errors
/// The host's errno.
pub fn sendmsg(
    fd: BorrowedFd<'_>,
    iov: &[libc::iovec],
    dest: Option<&RawSockAddr>,
    control: &[u8],
    flags: i32,
) -> Result<u64, Errno> {
    // SAFETY: an all-zero msghdr is valid (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    if let Some(d) = dest {
        msg.msg_name = d.ptr().cast_mut().cast();
        msg.msg_namelen = d.socklen();
    }
    msg.msg_iov = iov.as_ptr().cast_mut();
    msg.msg_iovlen = iov.len();
    if !control.is_empty() {
        msg.msg_control = control.as_ptr().cast_mut().cast();
        msg.msg_controllen = control.len();
    }
    // SAFETY: every iovec points into guest memory, bounds-checked by `host_ptr` (the mapping
    // lives as long as the VM); the host only reads it, `dest`'s bytes and `control`.
    cvt_size(unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, flags) })
}

/// What recvmsg(2) returned besides the data.
#[derive(Debug)]
pub struct Received {
    /// Bytes (or, with MSG_TRUNC, the datagram's full length).
    pub len: u64,
    /// The source address.
    pub from: RawSockAddr,
    /// Control bytes written (a prefix of the buffer passed).
    pub control_len: usize,
    /// The message flags (MSG_TRUNC, MSG_CTRUNC…).
    pub flags: i32,
}

/// recvmsg(2) into guest memory (`iov` points into it), control messages into `control`.
///
/// # Errors
/// The host's errno.
pub fn recvmsg(
    fd: BorrowedFd<'_>,
    iov: &[libc::iovec],
    control: &mut [u8],
    flags: i32,
) -> Result<Received, Errno> {
    let mut from = RawSockAddr::empty();
    // SAFETY: an all-zero msghdr is valid (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = from.mut_ptr().cast();
    msg.msg_namelen = SOCKADDR_MAX as libc::socklen_t;
    msg.msg_iov = iov.as_ptr().cast_mut();
    msg.msg_iovlen = iov.len();
    if !control.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = control.len();
    }
    // SAFETY: every iovec points into guest memory, bounds-checked by `host_ptr`; the host
    // writes at most their lengths there, at most SOCKADDR_MAX bytes into `from` and at most
    // `control.len()` bytes into `control`.
    let len = cvt_size(unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, flags) })?;
    from.len = (msg.msg_namelen as usize).min(SOCKADDR_MAX);
    Ok(Received {
        len,
        from,
        control_len: if control.is_empty() {
            0
        } else {
            msg.msg_controllen.min(control.len())
        },
        flags: msg.msg_flags,
    })
}

/// `fchmodat2(dir, name, mode, AT_SYMLINK_NOFOLLOW)`: sets the mode of the file `name` in
/// `dir` without following a symlink there (a guest thread may have replaced the file by one
/// meanwhile). Best effort: a host without fchmodat2 leaves the mode the host's umask gave.
pub fn chmod_nofollow(dir: &OwnedFd, name: &[u8], mode: u32) {
    /// fchmodat2(2)'s number on x86-64 (Linux 6.6).
    const SYS_FCHMODAT2: libc::c_long = 452;
    let Ok(c) = std::ffi::CString::new(name) else {
        return;
    };
    // SAFETY: valid dirfd and NUL-terminated name; no other pointers.
    unsafe {
        libc::syscall(
            SYS_FCHMODAT2,
            dir.as_raw_fd(),
            c.as_ptr(),
            mode,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
}

/// Whether the host fd is in blocking mode.
pub fn is_blocking(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: F_GETFL on an fd we own takes no pointers.
    let fl = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    fl >= 0 && fl & libc::O_NONBLOCK == 0
}

/// Waits for an in-progress connect on a blocking socket; its result, as SO_ERROR reports it.
///
/// # Errors
/// EINTR when kicked; the connect's error.
pub fn wait_connected(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one live pollfd the host may update.
    cvt(unsafe { libc::poll(&mut p, 1, -1) })?;
    match int_opt(fd, libc::SOL_SOCKET, libc::SO_ERROR)? {
        0 => Ok(()),
        e => Err(Errno(e)),
    }
}

/// A read-only interface query (one of [`abi::ioctl::is_interface_query`]'s `SIOCGIF*`
/// requests) with a whole `struct ifreq`, which the host fills in.
///
/// # Errors
/// EINVAL for another request; the host's errno (ENODEV for an unknown interface).
pub fn interface_query(
    fd: BorrowedFd<'_>,
    req: u64,
    ifr: &mut [u8; abi::ioctl::IFREQ_LEN],
) -> Result<(), Errno> {
    if !abi::ioctl::is_interface_query(req) {
        return Err(Errno::EINVAL);
    }
    // SAFETY: the query requests read and write one `struct ifreq`, which `ifr` is.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), req as _, ifr.as_mut_ptr()) }).map(|_| ())
}

/// `SIOCGIFCONF`: the interfaces with an IPv4 address as `struct ifreq`s into `out` (as many
/// as fit), or only the length the list needs when `out` is None; the bytes written or needed.
///
/// # Errors
/// The host's errno.
pub fn interface_list(fd: BorrowedFd<'_>, out: Option<&mut [u8]>) -> Result<i32, Errno> {
    let (cap, ptr) = match out {
        Some(b) => (b.len().min(i32::MAX as usize), b.as_mut_ptr() as u64),
        None => (0, 0),
    };
    let mut ifc = [0u8; abi::ioctl::IFCONF_LEN];
    ifc[0..4].copy_from_slice(&(cap as i32).to_le_bytes());
    ifc[8..16].copy_from_slice(&ptr.to_le_bytes());
    // SAFETY: SIOCGIFCONF with a `struct ifconf` whose buffer is `out` (`cap` bytes) or null
    // (then only the length is written).
    cvt(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            abi::ioctl::SIOCGIFCONF as _,
            ifc.as_mut_ptr(),
        )
    })?;
    Ok(i32::from_le_bytes([ifc[0], ifc[1], ifc[2], ifc[3]]))
}

/// fstat(2) of a host fd.
///
/// # Errors
/// The host's errno.
pub fn fstat(fd: BorrowedFd<'_>) -> Result<libc::stat, Errno> {
    // SAFETY: an all-zero stat is valid plain data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

/// The inode number of a host socket (unique among the host's live sockets).
///
/// # Errors
/// The host's errno.
pub fn inode(fd: BorrowedFd<'_>) -> Result<u64, Errno> {
    fstat(fd).map(|s| s.st_ino)
}

/// `NETLINK_SOCK_DIAG`.
const NETLINK_SOCK_DIAG: i32 = 4;
/// `SOCK_DIAG_BY_FAMILY`.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `UDIAG_SHOW_PEER`.
const UDIAG_SHOW_PEER: u32 = 4;
/// `UNIX_DIAG_PEER`.
const UNIX_DIAG_PEER: u16 = 2;
/// `NLMSG_ERROR`.
const NLMSG_ERROR: u16 = 2;

/// The inode of the peer of the host Unix socket with inode `ino`, asked of the host's
/// `sock_diag` netlink interface (what `ss -x` shows as the peer). `None` if the socket has
/// no peer or the interface is missing.
pub fn unix_peer_inode(ino: u64) -> Option<u64> {
    let ino = u32::try_from(ino).ok()?;
    // SAFETY: socket(2) takes no pointers.
    let s = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if s < 0 {
        return None;
    }
    // SAFETY: a fresh fd owned by nobody else.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    // struct nlmsghdr (16 bytes) + struct unix_diag_req (24 bytes).
    let mut req = [0u8; 40];
    req[0..4].copy_from_slice(&40u32.to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[16] = libc::AF_UNIX as u8;
    req[20..24].copy_from_slice(&u32::MAX.to_ne_bytes()); // every state
    req[24..28].copy_from_slice(&ino.to_ne_bytes());
    req[28..32].copy_from_slice(&UDIAG_SHOW_PEER.to_ne_bytes());
    req[32..40].copy_from_slice(&[0xff; 8]); // no cookie
                                             // SAFETY: `req` is a valid buffer of its length; the kernel is the default destination.
    let n = unsafe { libc::send(s.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if n != req.len() as isize {
        return None;
    }
    let mut buf = [0u8; 512];
    // SAFETY: the host writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::recv(s.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    let resp = buf.get(..usize::try_from(n).ok()?)?;
    parse_diag_peer(resp)
}

/// Finds `UNIX_DIAG_PEER` in a `sock_diag` response.
fn parse_diag_peer(resp: &[u8]) -> Option<u64> {
    let u16_at = |b: &[u8], i: usize| Some(u16::from_ne_bytes([*b.get(i)?, *b.get(i + 1)?]));
    let u32_at = |b: &[u8], i: usize| {
        Some(u32::from_ne_bytes([
            *b.get(i)?,
            *b.get(i + 1)?,
            *b.get(i + 2)?,
            *b.get(i + 3)?,
        ]))
    };
    let msg_len = u32_at(resp, 0)? as usize;
    if u16_at(resp, 4)? == NLMSG_ERROR || msg_len > resp.len() {
        return None;
    }
    // nlmsghdr (16) + unix_diag_msg (16), then attributes aligned to 4.
    let mut at = 32;
    while at + 4 <= msg_len {
        let alen = usize::from(u16_at(resp, at)?);
        let atype = u16_at(resp, at + 2)?;
        if alen < 4 {
            return None;
        }
        if atype == UNIX_DIAG_PEER {
            return u32_at(resp, at + 4).map(u64::from).filter(|&p| p != 0);
        }
        at += (alen + 3) & !3;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn diag_finds_the_peer_of_a_socketpair() {
        let (a, b) = socketpair(libc::SOCK_STREAM, false, 0).unwrap();
        let (ia, ib) = (inode(a.as_fd()).unwrap(), inode(b.as_fd()).unwrap());
        assert_eq!(unix_peer_inode(ia), Some(ib));
        assert_eq!(unix_peer_inode(ib), Some(ia));
        let lone = socket(libc::AF_UNIX, libc::SOCK_STREAM, false, 0).unwrap();
        assert_eq!(unix_peer_inode(inode(lone.as_fd()).unwrap()), None);
        assert_eq!(parse_diag_peer(&[1, 2, 3]), None);
    }
}
