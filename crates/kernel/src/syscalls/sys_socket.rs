//! Sockets: host TCP/UDP sockets behind the sandbox's network policy.
//!
//! Every guest socket is a host socket of the same family and type (always created
//! `SOCK_CLOEXEC` on the host; the guest's close-on-exec flag lives in the `FdTable`, its
//! `O_NONBLOCK` on the host fd). Addresses are translated by [`NetPolicy`]:
//!
//! - `bind` binds the host address the policy picks (a published address, or an ephemeral
//!   loopback port) and remembers the guest's view (`SocketState::guest_local`), which is what
//!   `getsockname` reports. A stream socket that listens without binding is bound the same way
//!   first, so the host never auto-binds a listener to every interface.
//! - `connect` and `sendto` go where [`NetPolicy::connect_target`] says: the host port behind a
//!   guest port the sandbox bound, or (with outbound access) the address as given.
//! - Peer addresses on loopback that belong to one of the sandbox's own bindings are reported
//!   with the guest port (`getpeername`, `accept`, `recvfrom`).
//!
//! Data moves zero-copy: the guest buffer is translated to guest-physical runs and handed to
//! `sendmsg`/`recvmsg` as host iovecs.
//!
//! Differences from Linux:
//! - A UDP datagram sent to a loopback port nobody in the sandbox bound is dropped (as Linux
//!   does when nothing listens), but a `connect` to such a port fails with `ECONNREFUSED`
//!   even for UDP.
//! - The host enforces port conflicts between host addresses, not guest ports: two guest
//!   sockets binding the same unpublished guest port both succeed (each gets its own
//!   ephemeral host port; the later one wins in the policy's table).
//! - A SIGPIPE for a send on a broken connection is raised only when its disposition is the
//!   default (it ends the process); handlers are not yet delivered.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use abi::Errno;
use platform::{Gpa, Gva};

use super::{SysResult, SyscallArgs};
use crate::fd::{FileKind, OpenFile, SocketState, MAX_FDS};
use crate::net::NetPolicy;
use crate::task::Task;

/// `sizeof(struct sockaddr_storage)`: the most address bytes a syscall takes.
const SOCKADDR_MAX: usize = 128;
/// `sizeof(struct sockaddr_in)`.
const SOCKADDR_IN_LEN: usize = 16;
/// `sizeof(struct sockaddr_in6)`.
const SOCKADDR_IN6_LEN: usize = 28;
/// The shortest `sockaddr_in6` Linux accepts (no `sin6_scope_id`).
const SIN6_LEN_RFC2133: usize = 24;
/// Most option bytes copied for set/getsockopt (gVisor's `maxOptLen`).
const MAX_OPT_LEN: usize = 64;
/// Most bytes moved by one call (Linux's MAX_RW_COUNT).
const MAX_RW: u64 = 0x7fff_f000;
/// Most bytes one recv(2) without MSG_WAITALL asks for: a short read is always allowed there,
/// and this bounds the guest pages faulted in for a huge buffer.
const MAX_RECV_CHUNK: u64 = 4 << 20;
/// The type bits of socket(2)'s `type` (the rest are SOCK_NONBLOCK / SOCK_CLOEXEC).
const SOCK_TYPE_MASK: i32 = 0xf;
/// Linux's AF_MAX.
const AF_MAX: i32 = 46;
/// Linux's SOCK_MAX (one past SOCK_PACKET).
const SOCK_MAX: i32 = 11;
/// Linux's IPPROTO_MAX.
const IPPROTO_MAX: i32 = 263;

/// send flags passed through (MSG_NOSIGNAL is always added on the host).
const SEND_FLAGS: i32 = libc::MSG_DONTWAIT
    | libc::MSG_NOSIGNAL
    | libc::MSG_MORE
    | libc::MSG_OOB
    | libc::MSG_EOR
    | libc::MSG_CONFIRM;
/// recv flags passed through.
const RECV_FLAGS: i32 =
    libc::MSG_DONTWAIT | libc::MSG_PEEK | libc::MSG_WAITALL | libc::MSG_TRUNC | libc::MSG_OOB;

// ---------------------------------------------------------------------------------------------
// Socket addresses in the Linux x86-64 layout.

/// A socket address as bytes in the Linux x86-64 layout (which is the host's), aligned so the
/// host may read it as a `struct sockaddr`.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct RawSockAddr {
    bytes: [u8; SOCKADDR_MAX],
    len: usize,
}

impl RawSockAddr {
    fn empty() -> RawSockAddr {
        RawSockAddr {
            bytes: [0; SOCKADDR_MAX],
            len: 0,
        }
    }

    /// The meaningful bytes.
    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len.min(SOCKADDR_MAX)]
    }

    fn ptr(&self) -> *const libc::sockaddr {
        self.bytes.as_ptr().cast()
    }

    fn mut_ptr(&mut self) -> *mut libc::sockaddr {
        self.bytes.as_mut_ptr().cast()
    }

    fn socklen(&self) -> libc::socklen_t {
        self.len.min(SOCKADDR_MAX) as libc::socklen_t
    }
}

fn family_of(b: &[u8]) -> i32 {
    match b {
        [lo, hi, ..] => i32::from(u16::from_le_bytes([*lo, *hi])),
        _ => 0,
    }
}

/// Encodes `a` as a `sockaddr_in` or `sockaddr_in6`.
fn encode_sockaddr(a: &SocketAddr) -> RawSockAddr {
    let mut r = RawSockAddr::empty();
    match a {
        SocketAddr::V4(v4) => {
            r.bytes[0..2].copy_from_slice(&(libc::AF_INET as u16).to_le_bytes());
            r.bytes[2..4].copy_from_slice(&v4.port().to_be_bytes());
            r.bytes[4..8].copy_from_slice(&v4.ip().octets());
            r.len = SOCKADDR_IN_LEN;
        }
        SocketAddr::V6(v6) => {
            r.bytes[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_le_bytes());
            r.bytes[2..4].copy_from_slice(&v6.port().to_be_bytes());
            r.bytes[4..8].copy_from_slice(&v6.flowinfo().to_be_bytes());
            r.bytes[8..24].copy_from_slice(&v6.ip().octets());
            r.bytes[24..28].copy_from_slice(&v6.scope_id().to_le_bytes());
            r.len = SOCKADDR_IN6_LEN;
        }
    }
    r
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn v4_from(b: &[u8]) -> SocketAddr {
    let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
    SocketAddr::V4(SocketAddrV4::new(ip, be16(b, 2)))
}

fn v6_from(b: &[u8]) -> SocketAddr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&b[8..24]);
    let scope = if b.len() >= SOCKADDR_IN6_LEN {
        le32(b, 24)
    } else {
        0
    };
    SocketAddr::V6(SocketAddrV6::new(
        Ipv6Addr::from(o),
        be16(b, 2),
        be32(b, 4),
        scope,
    ))
}

/// Decodes an address the guest passed for a socket of `family` (bind, connect, sendto), with
/// Linux's checks: too short is `EINVAL`, another family `EAFNOSUPPORT`. As Linux does for
/// IPv4, `AF_UNSPEC` is taken as `AF_INET` when `unspec_ok` (bind only allows it with
/// INADDR_ANY).
fn decode_guest_sockaddr(b: &[u8], family: i32, unspec_ok: bool) -> Result<SocketAddr, Errno> {
    match family {
        libc::AF_INET => {
            if b.len() < SOCKADDR_IN_LEN {
                return Err(Errno::EINVAL);
            }
            let f = family_of(b);
            if f != libc::AF_INET && !(f == libc::AF_UNSPEC && unspec_ok) {
                return Err(Errno::EAFNOSUPPORT);
            }
            Ok(v4_from(b))
        }
        libc::AF_INET6 => {
            if b.len() < SIN6_LEN_RFC2133 {
                return Err(Errno::EINVAL);
            }
            if family_of(b) != libc::AF_INET6 {
                return Err(Errno::EAFNOSUPPORT);
            }
            Ok(v6_from(b))
        }
        _ => Err(Errno::EAFNOSUPPORT),
    }
}

/// Decodes an address the host returned, by its own family.
fn parse_sockaddr(b: &[u8]) -> Option<SocketAddr> {
    match family_of(b) {
        libc::AF_INET if b.len() >= SOCKADDR_IN_LEN => Some(v4_from(b)),
        libc::AF_INET6 if b.len() >= SIN6_LEN_RFC2133 => Some(v6_from(b)),
        _ => None,
    }
}

/// `a` as an address of `family`: IPv4 addresses on an IPv6 socket become v4-mapped (the
/// wildcard becomes `::`); IPv6 loopback, wildcard and v4-mapped addresses on an IPv4 socket
/// become their IPv4 forms. `None` when there is no such form.
fn fit_family(a: SocketAddr, family: i32) -> Option<SocketAddr> {
    match (a, family) {
        (SocketAddr::V4(_), libc::AF_INET) | (SocketAddr::V6(_), libc::AF_INET6) => Some(a),
        (SocketAddr::V4(v4), libc::AF_INET6) => {
            let ip = if v4.ip().is_unspecified() {
                Ipv6Addr::UNSPECIFIED
            } else {
                v4.ip().to_ipv6_mapped()
            };
            Some(SocketAddr::new(IpAddr::V6(ip), a.port()))
        }
        (SocketAddr::V6(v6), libc::AF_INET) => {
            let ip = if v6.ip().is_unspecified() {
                Ipv4Addr::UNSPECIFIED
            } else if v6.ip().is_loopback() {
                Ipv4Addr::LOCALHOST
            } else {
                v6.ip().to_ipv4_mapped()?
            };
            Some(SocketAddr::new(IpAddr::V4(ip), a.port()))
        }
        _ => None,
    }
}

/// `a` with a v4-mapped IPv6 address turned into IPv4 (so loopback tests see 127.0.0.1).
fn canonical(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(ip) => SocketAddr::new(IpAddr::V4(ip), a.port()),
            None => a,
        },
        SocketAddr::V4(_) => a,
    }
}

/// How the guest sees a remote host address: a loopback peer that is one of the sandbox's own
/// bindings is shown with its guest port.
fn guest_view_of_remote(net: &NetPolicy, host: SocketAddr) -> SocketAddr {
    if host.port() != 0 && canonical(host).ip().is_loopback() {
        if let Some(g) = net.guest_port_of(host) {
            let mut a = host;
            a.set_port(g);
            return a;
        }
    }
    host
}

/// Raw host address bytes as the guest should see them (translated when they decode).
fn guest_view_bytes(net: &NetPolicy, raw: &RawSockAddr) -> RawSockAddr {
    match parse_sockaddr(raw.as_bytes()) {
        Some(a) => encode_sockaddr(&guest_view_of_remote(net, a)),
        None => *raw,
    }
}

// ---------------------------------------------------------------------------------------------
// Argument checks that need no guest memory.

/// What socket(2)'s arguments ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SocketSpec {
    family: i32,
    kind: i32,
    protocol: i32,
    nonblock: bool,
    cloexec: bool,
}

/// Checks socket(2)'s arguments in Linux's order.
fn parse_socket_args(domain: i32, ty: i32, protocol: i32) -> Result<SocketSpec, Errno> {
    if ty & !(SOCK_TYPE_MASK | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) != 0 {
        return Err(Errno::EINVAL);
    }
    if !(0..AF_MAX).contains(&domain) {
        return Err(Errno::EAFNOSUPPORT);
    }
    let kind = ty & SOCK_TYPE_MASK;
    if kind >= SOCK_MAX {
        return Err(Errno::EINVAL);
    }
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return Err(Errno::EAFNOSUPPORT);
    }
    if !(0..IPPROTO_MAX).contains(&protocol) {
        return Err(Errno::EINVAL);
    }
    let protocol = match (kind, protocol) {
        (libc::SOCK_STREAM, 0 | libc::IPPROTO_TCP) => libc::IPPROTO_TCP,
        (libc::SOCK_DGRAM, 0 | libc::IPPROTO_UDP) => libc::IPPROTO_UDP,
        (libc::SOCK_STREAM | libc::SOCK_DGRAM, _) => return Err(Errno::EPROTONOSUPPORT),
        (libc::SOCK_RAW, _) => return Err(Errno::EPERM),
        _ => return Err(Errno(libc::ESOCKTNOSUPPORT)),
    };
    Ok(SocketSpec {
        family: domain,
        kind,
        protocol,
        nonblock: ty & libc::SOCK_NONBLOCK != 0,
        cloexec: ty & libc::SOCK_CLOEXEC != 0,
    })
}

/// Checks accept4(2)'s flags; returns (nonblock, cloexec).
fn parse_accept_flags(flags: i32) -> Result<(bool, bool), Errno> {
    if flags & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) != 0 {
        return Err(Errno::EINVAL);
    }
    Ok((
        flags & libc::SOCK_NONBLOCK != 0,
        flags & libc::SOCK_CLOEXEC != 0,
    ))
}

/// Whether (level, optname) is passed through to the host, for setting or getting.
fn sockopt_allowed(level: i32, name: i32, set: bool) -> bool {
    match level {
        libc::SOL_SOCKET => match name {
            libc::SO_REUSEADDR
            | libc::SO_REUSEPORT
            | libc::SO_KEEPALIVE
            | libc::SO_SNDBUF
            | libc::SO_RCVBUF
            | libc::SO_LINGER
            | libc::SO_RCVTIMEO
            | libc::SO_SNDTIMEO
            | libc::SO_BROADCAST
            | libc::SO_OOBINLINE
            | libc::SO_RCVLOWAT => true,
            libc::SO_ERROR
            | libc::SO_TYPE
            | libc::SO_DOMAIN
            | libc::SO_PROTOCOL
            | libc::SO_ACCEPTCONN => !set,
            _ => false,
        },
        libc::IPPROTO_TCP => matches!(
            name,
            libc::TCP_NODELAY
                | libc::TCP_KEEPIDLE
                | libc::TCP_KEEPINTVL
                | libc::TCP_KEEPCNT
                | libc::TCP_QUICKACK
                | libc::TCP_DEFER_ACCEPT
                | libc::TCP_FASTOPEN
                | libc::TCP_CORK
                | libc::TCP_MAXSEG
                | libc::TCP_USER_TIMEOUT
        ),
        libc::IPPROTO_IPV6 => matches!(
            name,
            libc::IPV6_V6ONLY | libc::IPV6_UNICAST_HOPS | libc::IPV6_TCLASS
        ),
        libc::IPPROTO_IP => matches!(name, libc::IP_TOS | libc::IP_TTL),
        _ => false,
    }
}

/// The host flags for a guest send: the guest's, checked, plus MSG_NOSIGNAL.
fn send_flags(flags: i32) -> Result<i32, Errno> {
    if flags & !SEND_FLAGS != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(flags | libc::MSG_NOSIGNAL)
}

/// The host flags for a guest recv.
fn recv_flags(flags: i32) -> Result<i32, Errno> {
    if flags & !RECV_FLAGS != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(flags)
}

// ---------------------------------------------------------------------------------------------
// Host calls. Each wraps one libc call on a host fd the caller owns.

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

fn host_socket(spec: &SocketSpec) -> Result<OwnedFd, Errno> {
    let mut ty = spec.kind | libc::SOCK_CLOEXEC;
    if spec.nonblock {
        ty |= libc::SOCK_NONBLOCK;
    }
    // SAFETY: socket(2) takes no pointers.
    let fd = cvt(unsafe { libc::socket(spec.family, ty, spec.protocol) })?;
    // SAFETY: `fd` was just returned by socket(2) and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn host_bind(fd: BorrowedFd<'_>, a: &RawSockAddr) -> Result<(), Errno> {
    // SAFETY: `a` holds `socklen()` initialised bytes; the host only reads them.
    cvt(unsafe { libc::bind(fd.as_raw_fd(), a.ptr(), a.socklen()) }).map(|_| ())
}

fn host_connect(fd: BorrowedFd<'_>, a: &RawSockAddr) -> Result<(), Errno> {
    // SAFETY: as for bind.
    cvt(unsafe { libc::connect(fd.as_raw_fd(), a.ptr(), a.socklen()) }).map(|_| ())
}

fn host_listen(fd: BorrowedFd<'_>, backlog: i32) -> Result<(), Errno> {
    // SAFETY: listen(2) takes no pointers.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), backlog) }).map(|_| ())
}

fn host_shutdown(fd: BorrowedFd<'_>, how: i32) -> Result<(), Errno> {
    // SAFETY: shutdown(2) takes no pointers.
    cvt(unsafe { libc::shutdown(fd.as_raw_fd(), how) }).map(|_| ())
}

fn host_accept4(fd: BorrowedFd<'_>, flags: i32) -> Result<(OwnedFd, RawSockAddr), Errno> {
    let mut peer = RawSockAddr::empty();
    let mut len = SOCKADDR_MAX as libc::socklen_t;
    // SAFETY: `peer` has room for `len` bytes; the host writes at most that and updates `len`.
    let nfd = cvt(unsafe { libc::accept4(fd.as_raw_fd(), peer.mut_ptr(), &mut len, flags) })?;
    // SAFETY: `nfd` was just returned by accept4(2) and nothing else owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(nfd) };
    peer.len = (len as usize).min(SOCKADDR_MAX);
    Ok((owned, peer))
}

fn host_name(fd: BorrowedFd<'_>, peer: bool) -> Result<RawSockAddr, Errno> {
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

fn host_setsockopt(fd: BorrowedFd<'_>, level: i32, name: i32, val: &[u8]) -> Result<(), Errno> {
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

fn host_getsockopt(
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

fn set_int_opt(fd: BorrowedFd<'_>, level: i32, name: i32, v: i32) -> Result<(), Errno> {
    host_setsockopt(fd, level, name, &v.to_ne_bytes())
}

/// sendmsg(2) of guest memory, to `dest` if given.
fn sendmsg_from_guest(
    fd: BorrowedFd<'_>,
    iov: &[libc::iovec],
    dest: Option<&RawSockAddr>,
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
    // SAFETY: every iovec points into guest memory, bounds-checked by `host_ptr` (the mapping
    // lives as long as the VM); the host only reads it, and only reads `dest`'s bytes.
    cvt_size(unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, flags) })
}

/// recvmsg(2) into guest memory; fills `from` with the source address.
fn recvmsg_into_guest(
    fd: BorrowedFd<'_>,
    iov: &[libc::iovec],
    from: &mut RawSockAddr,
    flags: i32,
) -> Result<u64, Errno> {
    // SAFETY: an all-zero msghdr is valid (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = from.mut_ptr().cast();
    msg.msg_namelen = SOCKADDR_MAX as libc::socklen_t;
    msg.msg_iov = iov.as_ptr().cast_mut();
    msg.msg_iovlen = iov.len();
    // SAFETY: every iovec points into guest memory, bounds-checked by `host_ptr`; the host
    // writes at most their lengths there, and at most SOCKADDR_MAX bytes into `from`.
    let n = cvt_size(unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, flags) })?;
    from.len = (msg.msg_namelen as usize).min(SOCKADDR_MAX);
    Ok(n)
}

// ---------------------------------------------------------------------------------------------
// Guest-memory helpers.

/// The open socket at `fd`: EBADF if not open, ENOTSOCK if not a socket.
fn socket_file(t: &Task, fd: i32) -> Result<Arc<OpenFile>, Errno> {
    let f = t.fds.get(fd)?;
    if !f.is_socket() {
        return Err(Errno::ENOTSOCK);
    }
    Ok(f)
}

fn state_of(f: &OpenFile) -> SocketState {
    match &f.kind {
        FileKind::Socket(m) => m.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        _ => SocketState::default(),
    }
}

fn set_guest_local(f: &OpenFile, a: SocketAddr) {
    if let FileKind::Socket(m) = &f.kind {
        m.lock().unwrap_or_else(|e| e.into_inner()).guest_local = Some(a);
    }
}

/// Reads a socket address argument (Linux's `move_addr_to_kernel`): EINVAL for a negative
/// length or one beyond `sockaddr_storage`.
fn copy_in_sockaddr(t: &Task, addr: Gva, len: i32) -> Result<Vec<u8>, Errno> {
    let len = usize::try_from(len).map_err(|_| Errno::EINVAL)?;
    if len > SOCKADDR_MAX {
        return Err(Errno::EINVAL);
    }
    let mut b = vec![0u8; len];
    if len > 0 {
        t.copy_in(addr, &mut b)?;
    }
    Ok(b)
}

/// Reads an `int` length the guest passed by pointer.
fn read_len(t: &Task, ptr: Gva) -> Result<i32, Errno> {
    let mut b = [0u8; 4];
    t.copy_in(ptr, &mut b)?;
    Ok(i32::from_le_bytes(b))
}

/// Writes an address to the guest with addrlen in/out semantics (Linux's
/// `move_addr_to_user`): at most `*addrlen` bytes are copied, and the full length is stored.
fn copy_out_sockaddr(t: &Task, addr: Gva, addrlen: Gva, bytes: &[u8]) -> Result<(), Errno> {
    let ulen = usize::try_from(read_len(t, addrlen)?).map_err(|_| Errno::EINVAL)?;
    let n = ulen.min(bytes.len());
    if n > 0 {
        t.copy_out(addr, &bytes[..n])?;
    }
    t.write_u32(addrlen, bytes.len() as u32)
}

/// Binds `f`'s host socket for a guest bind to `guest`, and records the binding.
fn bind_as_guest(
    net: &Arc<NetPolicy>,
    f: &OpenFile,
    family: i32,
    guest: SocketAddr,
) -> Result<(), Errno> {
    let target = net.bind_target(guest);
    let host = fit_family(target, family).ok_or(Errno::EADDRNOTAVAIL)?;
    if host.port() != 0 {
        // A published port: let a restarted server rebind while old connections linger.
        set_int_opt(f.host(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    }
    host_bind(f.host(), &encode_sockaddr(&host))?;
    let actual = host_name(f.host(), false)
        .ok()
        .and_then(|r| parse_sockaddr(r.as_bytes()))
        .unwrap_or(host);
    let guest_port = if guest.port() == 0 {
        actual.port()
    } else {
        guest.port()
    };
    net.record_bind(guest_port, actual);
    let mut local = guest;
    local.set_port(guest_port);
    set_guest_local(f, local);
    if let FileKind::Socket(m) = &f.kind {
        m.lock().unwrap_or_else(|e| e.into_inner()).lease = Some(Arc::new(
            crate::net::PortLease::new(net.clone(), guest_port, actual),
        ));
    }
    Ok(())
}

/// Whether the host socket has a local port yet.
fn is_bound(f: &OpenFile) -> bool {
    host_name(f.host(), false)
        .ok()
        .and_then(|r| parse_sockaddr(r.as_bytes()))
        .is_some_and(|a| a.port() != 0)
}

/// The wildcard address of `family`, port 0.
fn wildcard(family: i32) -> SocketAddr {
    if family == libc::AF_INET6 {
        SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0)
    } else {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)
    }
}

/// Binds an unbound socket through the policy before the host would auto-bind it to every
/// interface.
fn ensure_bound(net: &Arc<NetPolicy>, f: &OpenFile, st: &SocketState) -> Result<(), Errno> {
    if st.guest_local.is_none() && !is_bound(f) {
        bind_as_guest(net, f, st.family, wildcard(st.family))?;
    }
    Ok(())
}

/// The host address for a guest connect/sendto to `guest`, or the errno the policy implies.
fn outbound_target(net: &NetPolicy, family: i32, guest: SocketAddr) -> Result<SocketAddr, Errno> {
    let c = canonical(guest);
    match net.connect_target(c) {
        Some(h) => fit_family(h, family).ok_or(Errno::ENETUNREACH),
        None if c.ip().is_loopback() || c.ip().is_unspecified() => Err(Errno::ECONNREFUSED),
        None => Err(Errno::ENETUNREACH),
    }
}

/// A send or write failed with EPIPE without MSG_NOSIGNAL: Linux raises SIGPIPE (which the
/// application may handle, block or ignore).
pub(super) fn maybe_sigpipe(t: &mut Task, guest_flags: i32, r: &Result<u64, Errno>) {
    if guest_flags & libc::MSG_NOSIGNAL == 0 && matches!(r, Err(e) if *e == Errno::EPIPE) {
        let info = crate::task::signal::SigInfo::kernel(libc::SIGPIPE);
        t.queue_signal(info);
    }
}

// ---------------------------------------------------------------------------------------------
// Handlers.

/// Implements socket(2).
pub fn sys_socket(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let spec = parse_socket_args(a.int(0), a.int(1), a.int(2))?;
    let fd = host_socket(&spec)?;
    let state = SocketState {
        family: spec.family,
        kind: spec.kind,
        guest_local: None,
        lease: None,
    };
    let file = Arc::new(OpenFile::new(fd, FileKind::Socket(Mutex::new(state)), None));
    Ok(t.fds.insert(file, spec.cloexec)? as u64)
}

/// Implements connect(2).
pub fn sys_connect(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = socket_file(t, a.int(0))?;
    let st = state_of(&f);
    let raw = copy_in_sockaddr(t, a.gva(1), a.int(2))?;
    if raw.len() < 2 {
        return Err(Errno::EINVAL);
    }
    if family_of(&raw) == libc::AF_UNSPEC && st.kind == libc::SOCK_DGRAM {
        // "Connecting" a datagram socket to AF_UNSPEC dissolves its association.
        let mut r = RawSockAddr::empty();
        r.len = raw.len().min(SOCKADDR_IN_LEN);
        r.bytes[..r.len].copy_from_slice(&raw[..r.len]);
        host_connect(f.host(), &r)?;
        return Ok(0);
    }
    let guest = decode_guest_sockaddr(&raw, st.family, false)?;
    let host = outbound_target(&t.net, st.family, guest)?;
    if st.kind == libc::SOCK_DGRAM && canonical(host).ip().is_loopback() {
        ensure_bound(&t.net, &f, &st)?;
    }
    match host_connect(f.host(), &encode_sockaddr(&host)) {
        Ok(()) => Ok(0),
        Err(e) if st.kind != libc::SOCK_STREAM || !is_blocking(&f) => Err(e),
        // A blocking connect interrupted by a park request is restarted by the task loop: it
        // waits for the attempt already under way instead of failing with EALREADY, and
        // succeeds if that attempt completed in between (EISCONN to the same peer).
        Err(e) if e == Errno::EINTR || e == Errno::EALREADY => wait_connected(&f).map(|()| 0),
        Err(e) if e == Errno(libc::EISCONN) && peer_of(&f) == Some(canonical(host)) => Ok(0),
        Err(e) => Err(e),
    }
}

/// Whether the host socket is in blocking mode.
fn is_blocking(f: &OpenFile) -> bool {
    // SAFETY: F_GETFL on an fd we own takes no pointers.
    let fl = unsafe { libc::fcntl(f.host().as_raw_fd(), libc::F_GETFL) };
    fl >= 0 && fl & libc::O_NONBLOCK == 0
}

/// The host peer address, canonical.
fn peer_of(f: &OpenFile) -> Option<SocketAddr> {
    let r = host_name(f.host(), true).ok()?;
    parse_sockaddr(r.as_bytes()).map(canonical)
}

/// Waits for an in-progress connect on a blocking socket; its result, as SO_ERROR reports it.
fn wait_connected(f: &OpenFile) -> Result<(), Errno> {
    let mut p = libc::pollfd {
        fd: f.host().as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one live pollfd the host may update.
    cvt(unsafe { libc::poll(&mut p, 1, -1) })?;
    let mut v = [0u8; 4];
    host_getsockopt(f.host(), libc::SOL_SOCKET, libc::SO_ERROR, &mut v)?;
    match i32::from_ne_bytes(v) {
        0 => Ok(()),
        e => Err(Errno(e)),
    }
}

fn accept_common(t: &mut Task, a: &SyscallArgs, flags: i32) -> SysResult {
    let (nonblock, cloexec) = parse_accept_flags(flags)?;
    let f = socket_file(t, a.int(0))?;
    let st = state_of(&f);
    // Linux reserves the descriptor before accepting: do not take a connection we cannot
    // install.
    if t.fds.len() >= MAX_FDS {
        return Err(Errno::EMFILE);
    }
    let mut hflags = libc::SOCK_CLOEXEC;
    if nonblock {
        hflags |= libc::SOCK_NONBLOCK;
    }
    let (nfd, peer) = host_accept4(f.host(), hflags)?;
    let state = SocketState {
        family: st.family,
        kind: st.kind,
        guest_local: None,
        lease: None,
    };
    let file = Arc::new(OpenFile::new(
        nfd,
        FileKind::Socket(Mutex::new(state)),
        None,
    ));
    let addr = a.gva(1);
    if addr.0 != 0 {
        // On failure the connection is dropped with `file`, as on Linux.
        let view = guest_view_bytes(&t.net, &peer);
        copy_out_sockaddr(t, addr, a.gva(2), view.as_bytes())?;
    }
    Ok(t.fds.insert(file, cloexec)? as u64)
}

/// Implements accept(2).
pub fn sys_accept(t: &mut Task, a: &SyscallArgs) -> SysResult {
    accept_common(t, a, 0)
}

/// Implements accept4(2).
pub fn sys_accept4(t: &mut Task, a: &SyscallArgs) -> SysResult {
    accept_common(t, a, a.int(3))
}

/// Implements sendto(2).
///
/// A stream send is split into host calls of at most IOV_MAX runs (see `fd::iovecs`) and stops at the first
/// short one, as a blocking Linux send returns only when all is queued.
pub fn sys_sendto(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = socket_file(t, a.int(0))?;
    let st = state_of(&f);
    let guest_flags = a.int(3);
    let flags = send_flags(guest_flags)?;
    let len = a.len(2)?.min(MAX_RW);
    let mut dest = None;
    if a.u(4) != 0 {
        let raw = copy_in_sockaddr(t, a.gva(4), a.int(5))?;
        // TCP ignores a destination; an empty one means "none" on Linux.
        if st.kind == libc::SOCK_DGRAM && !raw.is_empty() {
            let guest = decode_guest_sockaddr(&raw, st.family, st.family == libc::AF_INET)?;
            match outbound_target(&t.net, st.family, guest) {
                Ok(h) => dest = Some(h),
                // Nobody in the sandbox listens there: the datagram is lost, as on Linux.
                Err(e) if e == Errno::ECONNREFUSED => return Ok(len),
                Err(e) => return Err(e),
            }
        }
    }
    if let Some(h) = dest {
        if canonical(h).ip().is_loopback() {
            ensure_bound(&t.net, &f, &st)?;
        }
    }
    let dest_raw = dest.map(|h| encode_sockaddr(&h));
    let runs = t.user_ranges(a.gva(1), len, false)?;
    let stream = st.kind == libc::SOCK_STREAM;
    let mut done = 0u64;
    let mut rest: &[(Gpa, u64)] = &runs;
    let r = loop {
        let iov = crate::fd::iovecs(&t.mem, rest)?;
        let want: u64 = iov.iter().map(|v| v.iov_len as u64).sum();
        match sendmsg_from_guest(f.host(), &iov, dest_raw.as_ref(), flags) {
            Ok(n) => {
                done += n;
                rest = &rest[iov.len()..];
                if !stream || n < want || rest.is_empty() {
                    break Ok(done);
                }
            }
            Err(_) if done > 0 => break Ok(done),
            Err(e) => break Err(e),
        }
    };
    maybe_sigpipe(t, guest_flags, &r);
    r
}

/// Implements recvfrom(2).
pub fn sys_recvfrom(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = socket_file(t, a.int(0))?;
    let st = state_of(&f);
    let flags = recv_flags(a.int(3))?;
    let waitall = flags & libc::MSG_WAITALL != 0
        && st.kind == libc::SOCK_STREAM
        && flags & libc::MSG_PEEK == 0;
    let cap = if waitall { MAX_RW } else { MAX_RECV_CHUNK };
    let len = a.len(2)?.min(cap);
    let (addr, addrlen) = (a.gva(4), a.gva(5));
    if addr.0 != 0 {
        // Fail before consuming data if the length cannot be read.
        let l = read_len(t, addrlen)?;
        if l < 0 {
            return Err(Errno::EINVAL);
        }
    }
    let runs = t.user_ranges(a.gva(1), len, true)?;
    let mut from = RawSockAddr::empty();
    let mut done = 0u64;
    let mut rest: &[(Gpa, u64)] = &runs;
    loop {
        let iov = crate::fd::iovecs(&t.mem, rest)?;
        let want: u64 = iov.iter().map(|v| v.iov_len as u64).sum();
        let mut this = RawSockAddr::empty();
        match recvmsg_into_guest(f.host(), &iov, &mut this, flags) {
            Ok(n) => {
                if done == 0 {
                    from = this;
                }
                done += n;
                rest = &rest[iov.len()..];
                if !waitall || n < want || rest.is_empty() {
                    break;
                }
            }
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        }
    }
    if addr.0 != 0 {
        let view = if from.len > 0 {
            guest_view_bytes(&t.net, &from)
        } else {
            from
        };
        copy_out_sockaddr(t, addr, addrlen, view.as_bytes())?;
    }
    Ok(done)
}

/// Implements shutdown(2).
pub fn sys_shutdown(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = socket_file(t, a.int(0))?;
    let how = a.int(1);
    if !matches!(how, libc::SHUT_RD | libc::SHUT_WR | libc::SHUT_RDWR) {
        return Err(Errno::EINVAL);
    }
    host_shutdown(f.host(), how)?;
    Ok(0)
}

/// Implements bind(2).
///
/// The host binds the address the network policy picks; the guest keeps seeing the address
/// it asked for (with the port the host chose if it asked for port 0).
pub fn sys_bind(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = socket_file(t, a.int(0))?;
    let st = state_of(&f);
    let raw = copy_in_sockaddr(t, a.gva(1), a.int(2))?;
    let guest = decode_guest_sockaddr(&raw, st.family, st.family == libc::AF_INET)?;
    // Linux takes AF_UNSPEC for IPv4 only with INADDR_ANY.
    if family_of(&raw) == libc::AF_UNSPEC && !guest.ip().is_unspecified() {
        return Err(Errno::EAFNOSUPPORT);
    }
    if st.guest_local.is_some() {
        return Err(Errno::EINVAL);
    }
    bind_as_guest(&t.net, &f, st.family, guest)?;
    Ok(0)
}

/// Implements listen(2). An unbound stream socket is first bound through the policy (Linux
/// would bind the wildcard address and an ephemeral port).
pub fn sys_listen(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = socket_file(t, a.int(0))?;
    let st = state_of(&f);
    if st.kind == libc::SOCK_STREAM {
        ensure_bound(&t.net, &f, &st)?;
    }
    host_listen(f.host(), a.int(1))?;
    Ok(0)
}

/// Implements getsockname(2): the address the guest bound, or the host's with the guest
/// port when one is known.
pub fn sys_getsockname(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = socket_file(t, a.int(0))?;
    let st = state_of(&f);
    let ulen = read_len(t, a.gva(2))?;
    if ulen < 0 {
        return Err(Errno::EINVAL);
    }
    let raw = match st.guest_local {
        Some(g) => encode_sockaddr(&g),
        None => {
            let h = host_name(f.host(), false)?;
            match parse_sockaddr(h.as_bytes()) {
                Some(mut addr) => {
                    if addr.port() != 0 {
                        if let Some(g) = t.net.guest_port_of(addr) {
                            addr.set_port(g);
                        }
                    }
                    encode_sockaddr(&addr)
                }
                None => h,
            }
        }
    };
    copy_out_sockaddr(t, a.gva(1), a.gva(2), raw.as_bytes())?;
    Ok(0)
}

/// Implements getpeername(2).
pub fn sys_getpeername(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = socket_file(t, a.int(0))?;
    let ulen = read_len(t, a.gva(2))?;
    if ulen < 0 {
        return Err(Errno::EINVAL);
    }
    let h = host_name(f.host(), true)?;
    let view = guest_view_bytes(&t.net, &h);
    copy_out_sockaddr(t, a.gva(1), a.gva(2), view.as_bytes())?;
    Ok(0)
}

/// Implements setsockopt(2) for a whitelist of options, passed to the host socket.
/// Anything else is ENOPROTOOPT.
pub fn sys_setsockopt(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = socket_file(t, a.int(0))?;
    let (level, name) = (a.int(1), a.int(2));
    if !sockopt_allowed(level, name, true) {
        return Err(Errno::ENOPROTOOPT);
    }
    let len = usize::try_from(a.int(4))
        .map_err(|_| Errno::EINVAL)?
        .min(MAX_OPT_LEN);
    let mut val = vec![0u8; len];
    if len > 0 {
        t.copy_in(a.gva(3), &mut val)?;
    }
    host_setsockopt(f.host(), level, name, &val)?;
    Ok(0)
}

/// Implements getsockopt(2) for the same whitelist as setsockopt(2) plus read-only options
/// (SO_ERROR, SO_TYPE…).
pub fn sys_getsockopt(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = socket_file(t, a.int(0))?;
    let (level, name) = (a.int(1), a.int(2));
    if !sockopt_allowed(level, name, false) {
        return Err(Errno::ENOPROTOOPT);
    }
    let ulen = usize::try_from(read_len(t, a.gva(4))?).map_err(|_| Errno::EINVAL)?;
    let mut val = vec![0u8; ulen.min(MAX_OPT_LEN)];
    let n = host_getsockopt(f.host(), level, name, &mut val)?;
    if n > 0 {
        t.copy_out(a.gva(3), &val[..n])?;
    }
    t.write_u32(a.gva(4), n as u32)?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_round_trips() {
        for s in [
            "127.0.0.1:80",
            "0.0.0.0:0",
            "10.1.2.3:65535",
            "[::1]:8080",
            "[fe80::1%3]:22",
            "[::ffff:1.2.3.4]:9",
        ] {
            let a: SocketAddr = s.parse().unwrap();
            let r = encode_sockaddr(&a);
            let fam = if a.is_ipv4() {
                libc::AF_INET
            } else {
                libc::AF_INET6
            };
            assert_eq!(family_of(r.as_bytes()), fam);
            assert_eq!(
                decode_guest_sockaddr(r.as_bytes(), fam, false),
                Ok(a),
                "{s}"
            );
            assert_eq!(parse_sockaddr(r.as_bytes()), Some(a), "{s}");
        }
        let v6 = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 1, 0x1234_5678, 7));
        assert_eq!(parse_sockaddr(encode_sockaddr(&v6).as_bytes()), Some(v6));
    }

    #[test]
    fn sockaddr_layout_matches_libc() {
        let r = encode_sockaddr(&"1.2.3.4:258".parse().unwrap());
        assert_eq!(r.len, std::mem::size_of::<libc::sockaddr_in>());
        assert_eq!(&r.bytes[..8], &[2, 0, 1, 2, 1, 2, 3, 4]);
        let r = encode_sockaddr(&"[::1]:1".parse().unwrap());
        assert_eq!(r.len, std::mem::size_of::<libc::sockaddr_in6>());
        assert_eq!(r.bytes[23], 1);
    }

    #[test]
    fn sockaddr_decode_errors() {
        let v4 = encode_sockaddr(&"127.0.0.1:80".parse().unwrap());
        let v6 = encode_sockaddr(&"[::1]:80".parse().unwrap());
        assert_eq!(
            decode_guest_sockaddr(&v4.as_bytes()[..15], libc::AF_INET, false),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            decode_guest_sockaddr(&[], libc::AF_INET, false),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            decode_guest_sockaddr(v6.as_bytes(), libc::AF_INET, false),
            Err(Errno::EAFNOSUPPORT)
        );
        assert_eq!(
            decode_guest_sockaddr(v4.as_bytes(), libc::AF_INET6, false),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            decode_guest_sockaddr(&v6.as_bytes()[..23], libc::AF_INET6, false),
            Err(Errno::EINVAL)
        );
        // RFC 2133 length: no scope id.
        let short = decode_guest_sockaddr(&v6.as_bytes()[..24], libc::AF_INET6, false).unwrap();
        assert_eq!(short, "[::1]:80".parse().unwrap());
        let mut pad = [0u8; 28];
        pad[..16].copy_from_slice(v4.as_bytes());
        assert_eq!(
            decode_guest_sockaddr(&pad, libc::AF_INET6, false),
            Err(Errno::EAFNOSUPPORT)
        );
        // AF_UNSPEC is taken as AF_INET only when allowed.
        let mut unspec = v4;
        unspec.bytes[0] = 0;
        assert_eq!(
            decode_guest_sockaddr(unspec.as_bytes(), libc::AF_INET, false),
            Err(Errno::EAFNOSUPPORT)
        );
        assert_eq!(
            decode_guest_sockaddr(unspec.as_bytes(), libc::AF_INET, true),
            Ok("127.0.0.1:80".parse().unwrap())
        );
        assert_eq!(
            decode_guest_sockaddr(v4.as_bytes(), libc::AF_UNIX, false),
            Err(Errno::EAFNOSUPPORT)
        );
        assert_eq!(parse_sockaddr(&[1, 0, 0]), None);
        assert_eq!(parse_sockaddr(&[]), None);
    }

    #[test]
    fn family_fitting() {
        let p = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(
            fit_family(p("127.0.0.1:5"), libc::AF_INET6),
            Some(p("[::ffff:127.0.0.1]:5"))
        );
        assert_eq!(
            fit_family(p("0.0.0.0:5"), libc::AF_INET6),
            Some(p("[::]:5"))
        );
        assert_eq!(
            fit_family(p("[::1]:5"), libc::AF_INET),
            Some(p("127.0.0.1:5"))
        );
        assert_eq!(fit_family(p("[::]:5"), libc::AF_INET), Some(p("0.0.0.0:5")));
        assert_eq!(
            fit_family(p("[::ffff:10.0.0.1]:5"), libc::AF_INET),
            Some(p("10.0.0.1:5"))
        );
        assert_eq!(fit_family(p("[2001:db8::1]:5"), libc::AF_INET), None);
        assert_eq!(canonical(p("[::ffff:127.0.0.1]:5")), p("127.0.0.1:5"));
    }

    #[test]
    fn policy_translation() {
        let n = NetPolicy::new(vec!["127.0.0.1:18080:80".parse().unwrap()], false);
        n.record_bind(80, "127.0.0.1:18080".parse().unwrap());
        let p = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(
            outbound_target(&n, libc::AF_INET, p("127.0.0.1:80")),
            Ok(p("127.0.0.1:18080"))
        );
        assert_eq!(
            outbound_target(&n, libc::AF_INET6, p("[::ffff:127.0.0.1]:80")),
            Ok(p("[::ffff:127.0.0.1]:18080"))
        );
        assert_eq!(
            outbound_target(&n, libc::AF_INET, p("127.0.0.1:81")),
            Err(Errno::ECONNREFUSED)
        );
        assert_eq!(
            outbound_target(&n, libc::AF_INET, p("8.8.8.8:53")),
            Err(Errno::ENETUNREACH)
        );
        assert_eq!(
            guest_view_of_remote(&n, p("127.0.0.1:18080")),
            p("127.0.0.1:80")
        );
        assert_eq!(
            guest_view_of_remote(&n, p("10.0.0.1:18080")),
            p("10.0.0.1:18080")
        );
        assert_eq!(
            guest_view_of_remote(&n, p("127.0.0.1:5555")),
            p("127.0.0.1:5555")
        );
    }

    #[test]
    fn socket_args() {
        let s = parse_socket_args(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
        .unwrap();
        assert_eq!(
            s,
            SocketSpec {
                family: libc::AF_INET,
                kind: libc::SOCK_STREAM,
                protocol: libc::IPPROTO_TCP,
                nonblock: true,
                cloexec: true
            }
        );
        let s = parse_socket_args(libc::AF_INET6, libc::SOCK_DGRAM, libc::IPPROTO_UDP).unwrap();
        assert_eq!(
            (s.kind, s.protocol, s.nonblock, s.cloexec),
            (libc::SOCK_DGRAM, libc::IPPROTO_UDP, false, false)
        );
        assert_eq!(
            parse_socket_args(libc::AF_INET, libc::SOCK_STREAM | 0x100, 0),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            parse_socket_args(libc::AF_UNIX, libc::SOCK_STREAM, 0),
            Err(Errno::EAFNOSUPPORT)
        );
        assert_eq!(
            parse_socket_args(-1, libc::SOCK_STREAM, 0),
            Err(Errno::EAFNOSUPPORT)
        );
        assert_eq!(
            parse_socket_args(1000, libc::SOCK_STREAM, 0),
            Err(Errno::EAFNOSUPPORT)
        );
        assert_eq!(
            parse_socket_args(libc::AF_INET, 0, 0),
            Err(Errno(libc::ESOCKTNOSUPPORT))
        );
        assert_eq!(parse_socket_args(libc::AF_INET, 12, 0), Err(Errno::EINVAL));
        assert_eq!(
            parse_socket_args(libc::AF_INET, libc::SOCK_STREAM, -1),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            parse_socket_args(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_UDP),
            Err(Errno::EPROTONOSUPPORT)
        );
        assert_eq!(
            parse_socket_args(libc::AF_INET, libc::SOCK_RAW, 1),
            Err(Errno::EPERM)
        );
        assert_eq!(
            parse_socket_args(libc::AF_INET, libc::SOCK_SEQPACKET, 0),
            Err(Errno(libc::ESOCKTNOSUPPORT))
        );
        assert_eq!(parse_accept_flags(libc::SOCK_NONBLOCK), Ok((true, false)));
        assert_eq!(parse_accept_flags(libc::SOCK_CLOEXEC), Ok((false, true)));
        assert_eq!(parse_accept_flags(1), Err(Errno::EINVAL));
    }

    #[test]
    fn msg_flags_and_options() {
        assert_eq!(send_flags(0), Ok(libc::MSG_NOSIGNAL));
        assert_eq!(
            send_flags(libc::MSG_DONTWAIT),
            Ok(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
        );
        assert_eq!(send_flags(libc::MSG_PEEK), Err(Errno::EINVAL));
        assert_eq!(
            recv_flags(libc::MSG_PEEK | libc::MSG_TRUNC),
            Ok(libc::MSG_PEEK | libc::MSG_TRUNC)
        );
        assert_eq!(recv_flags(libc::MSG_ERRQUEUE), Err(Errno::EINVAL));
        assert!(sockopt_allowed(libc::SOL_SOCKET, libc::SO_REUSEADDR, true));
        assert!(sockopt_allowed(libc::SOL_SOCKET, libc::SO_ERROR, false));
        assert!(!sockopt_allowed(libc::SOL_SOCKET, libc::SO_ERROR, true));
        assert!(!sockopt_allowed(
            libc::SOL_SOCKET,
            libc::SO_BINDTODEVICE,
            true
        ));
        assert!(sockopt_allowed(libc::IPPROTO_TCP, libc::TCP_NODELAY, true));
        assert!(sockopt_allowed(
            libc::IPPROTO_IPV6,
            libc::IPV6_V6ONLY,
            false
        ));
        assert!(!sockopt_allowed(libc::IPPROTO_UDP, 1, false));
    }

    #[test]
    fn host_bind_through_policy() {
        // No KVM needed: a real host socket bound the way sys_bind does.
        let n = Arc::new(NetPolicy::new(Vec::new(), false));
        let spec = parse_socket_args(libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
        let state = SocketState {
            family: libc::AF_INET,
            kind: libc::SOCK_STREAM,
            guest_local: None,
            lease: None,
        };
        let f = OpenFile::new(
            host_socket(&spec).unwrap(),
            FileKind::Socket(Mutex::new(state)),
            None,
        );
        assert!(!is_bound(&f));
        bind_as_guest(&n, &f, libc::AF_INET, "0.0.0.0:81".parse().unwrap()).unwrap();
        assert!(is_bound(&f));
        let local = state_of(&f).guest_local.unwrap();
        assert_eq!(local, "0.0.0.0:81".parse().unwrap());
        let host = parse_sockaddr(host_name(f.host(), false).unwrap().as_bytes()).unwrap();
        assert!(host.ip().is_loopback());
        assert_eq!(n.guest_port_of(host), Some(81));
        assert_eq!(
            outbound_target(&n, libc::AF_INET, "127.0.0.1:81".parse().unwrap()),
            Ok(host)
        );
        // Options round-trip through the host.
        set_int_opt(f.host(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 1).unwrap();
        let mut v = [0u8; 64];
        assert_eq!(
            host_getsockopt(f.host(), libc::IPPROTO_TCP, libc::TCP_NODELAY, &mut v),
            Ok(4)
        );
        assert_ne!(v[..4], [0, 0, 0, 0]);
    }
}

/// Implements socketpair(2) for AF_UNIX: two connected host sockets, which name no path and
/// reach nothing outside the sandbox.
pub fn sys_socketpair(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (domain, ty, proto) = (a.int(0), a.int(1), a.int(2));
    if domain != libc::AF_UNIX {
        return Err(Errno::EAFNOSUPPORT);
    }
    let flags = ty & (libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
    let kind = ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
    if !matches!(
        kind,
        libc::SOCK_STREAM | libc::SOCK_DGRAM | libc::SOCK_SEQPACKET
    ) {
        return Err(Errno(libc::ESOCKTNOSUPPORT));
    }
    if proto != 0 {
        return Err(Errno::EPROTONOSUPPORT);
    }
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for both ends; the host ends are always close-on-exec.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            kind | (flags & libc::SOCK_NONBLOCK) | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(Errno::last());
    }
    let cloexec = flags & libc::SOCK_CLOEXEC != 0;
    let mut guest = [0i32; 2];
    for (i, fd) in fds.iter().enumerate() {
        // SAFETY: a fresh fd owned by nobody else.
        let owned = unsafe { OwnedFd::from_raw_fd(*fd) };
        let state = SocketState {
            family: libc::AF_UNIX,
            kind,
            guest_local: None,
            lease: None,
        };
        let file = Arc::new(OpenFile::new(
            owned,
            FileKind::Socket(Mutex::new(state)),
            None,
        ));
        match t.fds.insert(file, cloexec) {
            Ok(g) => guest[i] = g,
            Err(e) => {
                if i == 1 {
                    let _ = t.fds.remove(guest[0]);
                }
                return Err(e);
            }
        }
    }
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&guest[0].to_le_bytes());
    out[4..].copy_from_slice(&guest[1].to_le_bytes());
    if let Err(e) = t.copy_out(a.gva(3), &out) {
        let _ = t.fds.remove(guest[0]);
        let _ = t.fds.remove(guest[1]);
        return Err(e);
    }
    Ok(0)
}
