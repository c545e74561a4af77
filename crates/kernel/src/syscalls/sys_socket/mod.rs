//! Socket syscalls: thin handlers over the socket layer (`crate::net`).
//!
//! Each handler decodes and checks the guest's arguments (addresses, lengths, flags, the
//! `msghdr` of sendmsg/recvmsg), copies guest memory in and out, and dispatches by the
//! socket's family: Internet sockets to `net::inet` (addresses translated by the network
//! policy), Unix sockets to `net::unix` (names confined to the root or tagged abstract names,
//! guest credentials), control messages to `net::cmsg`. Host calls are in `net::host`.
//!
//! Data moves zero-copy: the guest buffer is translated to guest-physical runs and handed to
//! `sendmsg`/`recvmsg` as host iovecs. A blocking call is a blocking host call: a kick
//! interrupts it with EINTR and the task loop restarts it after a park.
//!
//! Differences from Linux: a SIGPIPE for a send on a broken connection is raised only when
//! its disposition is the default (it ends the process); handlers are not yet delivered.
//! sendmmsg and recvmmsg are not implemented.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

use abi::Errno;
use platform::{Gpa, Gva};

use super::iovec::{MAX_RW, UIO_MAXIOV};
use super::{SysResult, SyscallArgs};
use crate::fd::{FileKind, OpenFile, SocketState, MAX_FDS};
use crate::net::host::{self, family_of, RawSockAddr};
use crate::net::unix::{self, Ucred, UnixAddr, UnixRef};
use crate::net::{cmsg, inet, netlink};
use crate::task::Task;

mod mmsg;
pub use mmsg::{sys_recvmmsg, sys_sendmmsg};

/// Most option bytes copied for set/getsockopt: a `struct group_source_req` (264 bytes, the
/// largest fixed-size option torpor passes on) with room to spare.
const MAX_OPT_LEN: usize = 512;
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
/// The first port any user may bind (Linux's default `ip_unprivileged_port_start`).
const PRIVILEGED_PORTS_END: u16 = 1024;
/// `sizeof(struct msghdr)` on x86-64.
const MSGHDR_LEN: usize = 56;

/// send flags passed through (MSG_NOSIGNAL is always added on the host).
const SEND_FLAGS: i32 = libc::MSG_DONTWAIT
    | libc::MSG_NOSIGNAL
    | libc::MSG_MORE
    | libc::MSG_OOB
    | libc::MSG_EOR
    | libc::MSG_CONFIRM;
/// recv flags passed through (MSG_CMSG_CLOEXEC is applied by the kernel, to guest fds;
/// MSG_NOSIGNAL means nothing to a receive, and Linux takes it: glibc's mq_notify thread
/// passes it).
const RECV_FLAGS: i32 = libc::MSG_DONTWAIT
    | libc::MSG_NOSIGNAL
    | libc::MSG_PEEK
    | libc::MSG_WAITALL
    | libc::MSG_TRUNC
    | libc::MSG_OOB
    | libc::MSG_ERRQUEUE
    | libc::MSG_CMSG_CLOEXEC;

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
    let spec = |kind, protocol| SocketSpec {
        family: domain,
        kind,
        protocol,
        nonblock: ty & libc::SOCK_NONBLOCK != 0,
        cloexec: ty & libc::SOCK_CLOEXEC != 0,
    };
    if domain == libc::AF_UNIX {
        // Linux's unix_create.
        if protocol != 0 && protocol != libc::PF_UNIX {
            return Err(Errno::EPROTONOSUPPORT);
        }
        return match kind {
            libc::SOCK_STREAM | libc::SOCK_DGRAM | libc::SOCK_SEQPACKET => Ok(spec(kind, 0)),
            libc::SOCK_RAW => Ok(spec(libc::SOCK_DGRAM, 0)),
            _ => Err(Errno(libc::ESOCKTNOSUPPORT)),
        };
    }
    if domain == libc::AF_NETLINK {
        netlink::check_socket(kind, protocol)?;
        return Ok(spec(kind, protocol));
    }
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return Err(Errno::EAFNOSUPPORT);
    }
    if !(0..IPPROTO_MAX).contains(&protocol) {
        return Err(Errno::EINVAL);
    }
    match (kind, protocol) {
        (libc::SOCK_STREAM, 0 | libc::IPPROTO_TCP) => Ok(spec(kind, libc::IPPROTO_TCP)),
        (libc::SOCK_DGRAM, 0 | libc::IPPROTO_UDP) => Ok(spec(kind, libc::IPPROTO_UDP)),
        // UDP-Lite: datagrams with partial checksums, ports as UDP's.
        (libc::SOCK_DGRAM, libc::IPPROTO_UDPLITE) => Ok(spec(kind, libc::IPPROTO_UDPLITE)),
        (libc::SOCK_STREAM | libc::SOCK_DGRAM, _) => Err(Errno::EPROTONOSUPPORT),
        // Linux's inet_create: a raw socket names its protocol (0 is EPROTONOSUPPORT); torpor
        // gives none (raw packets would reach the host's network as the runtime).
        (libc::SOCK_RAW, 0) => Err(Errno::EPROTONOSUPPORT),
        (libc::SOCK_RAW, _) => Err(Errno::EPERM),
        _ => Err(Errno(libc::ESOCKTNOSUPPORT)),
    }
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

/// UDP-Lite's socket options (linux/udp.h).
const UDPLITE_SEND_CSCOV: i32 = 10;
const UDPLITE_RECV_CSCOV: i32 = 11;

/// Whether (level, optname) is passed through to the host, for setting or getting.
/// The errno of an option torpor does not pass on, as Linux answers one it does not know:
/// ENOPROTOOPT at a level of the socket's own protocols (the socket layer, IP or IPv6, its
/// transport). At any other level, the IP layer's answer for an Internet socket
/// (`ip_setsockopt` ENOPROTOOPT but `do_ip_getsockopt` EOPNOTSUPP; IPv6 ENOPROTOOPT both
/// ways), EOPNOTSUPP for other families.
fn refused_sockopt(st: &SocketState, level: i32, set: bool) -> Errno {
    let transport = match st.kind {
        libc::SOCK_STREAM => libc::IPPROTO_TCP,
        libc::SOCK_DGRAM => libc::IPPROTO_UDP,
        _ => -1,
    };
    let own = level == libc::SOL_SOCKET
        || match st.family {
            libc::AF_INET => level == libc::IPPROTO_IP || level == transport,
            libc::AF_INET6 => {
                level == libc::IPPROTO_IPV6 || level == libc::IPPROTO_IP || level == transport
            }
            _ => false,
        };
    let foreign_is_unknown = match st.family {
        libc::AF_INET => set,
        libc::AF_INET6 => true,
        _ => false,
    };
    if own || foreign_is_unknown {
        Errno::ENOPROTOOPT
    } else {
        Errno::EOPNOTSUPP
    }
}

/// Whether (level, optname) is a multicast option: group membership (IP_ADD_MEMBERSHIP,
/// MCAST_JOIN_GROUP, IPV6_JOIN_GROUP and their source-specific and leaving forms) and the
/// sending interface, TTL and loop. They are passed to the host only where the holder's
/// network namespace is the sandbox's own ([`netlink::allowed`]): there a group joined is
/// joined on the sandbox's interfaces alone, never on the host's.
fn multicast_option(level: i32, name: i32) -> bool {
    const MCAST_JOIN_GROUP: i32 = 42;
    const MCAST_MSFILTER: i32 = 48;
    match level {
        libc::IPPROTO_IP => {
            matches!(name, 32..=40) || (MCAST_JOIN_GROUP..=MCAST_MSFILTER).contains(&name)
        }
        libc::IPPROTO_IPV6 => {
            matches!(name, 17..=21) || (MCAST_JOIN_GROUP..=MCAST_MSFILTER).contains(&name)
        }
        _ => false,
    }
}

/// Whether the caller's sandbox may use (level, optname) on a socket, for setting or getting.
fn option_permitted(t: &Task, level: i32, name: i32, set: bool) -> bool {
    sockopt_allowed(level, name, set) || (multicast_option(level, name) && netlink::allowed(&t.net))
}

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
            | libc::SO_RCVLOWAT
            | libc::SO_PASSCRED
            | libc::SO_PEEK_OFF => true,
            libc::SO_ERROR
            | libc::SO_TYPE
            | libc::SO_DOMAIN
            | libc::SO_PROTOCOL
            | libc::SO_ACCEPTCONN
            | libc::SO_PEERCRED => !set,
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
        libc::IPPROTO_IPV6 => match name {
            libc::IPV6_V6ONLY
            | libc::IPV6_UNICAST_HOPS
            | libc::IPV6_TCLASS
            // RFC 3542's ancillary data: ask for the hop limit, traffic class or packet
            // info of received datagrams.
            | libc::IPV6_RECVHOPLIMIT
            | libc::IPV6_RECVTCLASS
            | libc::IPV6_RECVPKTINFO => true,
            libc::IPV6_HOPLIMIT => !set,
            _ => false,
        },
        libc::IPPROTO_IP => matches!(
            name,
            libc::IP_TOS | libc::IP_TTL | libc::IP_RECVTOS | libc::IP_RECVTTL
        ),
        // UDP-Lite's checksum coverage.
        libc::IPPROTO_UDPLITE => matches!(name, UDPLITE_SEND_CSCOV | UDPLITE_RECV_CSCOV),
        libc::SOL_NETLINK => netlink::sockopt_allowed(level, name),
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

/// The host flags for a guest recv (received fds are always close-on-exec on the host).
fn recv_flags(flags: i32) -> Result<i32, Errno> {
    if flags & !RECV_FLAGS != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(flags | libc::MSG_CMSG_CLOEXEC)
}

/// A `struct msghdr` as the guest laid it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MsgHdr {
    name: Gva,
    namelen: u32,
    iov: Gva,
    iovlen: u64,
    control: Gva,
    controllen: u64,
}

impl MsgHdr {
    fn decode(b: &[u8; MSGHDR_LEN]) -> MsgHdr {
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        MsgHdr {
            name: Gva(u64_at(0)),
            namelen: u64_at(8) as u32,
            iov: Gva(u64_at(16)),
            iovlen: u64_at(24),
            control: Gva(u64_at(32)),
            controllen: u64_at(40),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Guest-memory helpers.

/// The open socket at `fd` and its state: EBADF if not open (an `O_PATH` descriptor, which
/// Linux's socket calls do not see, included), ENOTSOCK if not a socket.
fn socket_file(t: &Task, fd: i32) -> Result<(Arc<OpenFile>, SocketState), Errno> {
    let f = t.fds.get(fd)?;
    let Some(st) = f.socket_state() else {
        let path_only =
            crate::fd::host::status_flags(f.host()).is_ok_and(|fl| fl & libc::O_PATH != 0);
        return Err(if path_only {
            Errno::EBADF
        } else {
            Errno::ENOTSOCK
        });
    };
    Ok((f, st))
}

/// The registry inode of a Unix socket (None for others).
fn unix_ino(st: &SocketState) -> Option<u64> {
    st.unix.as_ref().map(|u| u.ino())
}

/// The calling task's guest credentials.
fn ucred(t: &Task) -> Ucred {
    Ucred {
        pid: t.pid,
        uid: t.creds.euid,
        gid: t.creds.egid,
    }
}

/// What the Unix socket layer needs of the calling task.
fn caller(t: &Task) -> unix::Caller<'_> {
    unix::Caller {
        net: &t.net,
        root: &t.root,
        cwd: t.cwd(),
        umask: t.umask(),
        cred: ucred(t),
    }
}

/// Wraps a new host socket as an open file (a Unix one joins the registry, owned by `owner`).
fn socket_open_file(
    t: &Task,
    fd: OwnedFd,
    family: i32,
    kind: i32,
    owner: Option<Ucred>,
) -> Result<Arc<OpenFile>, Errno> {
    let mut state = SocketState {
        family,
        kind,
        ..SocketState::default()
    };
    if family == libc::AF_UNIX {
        state.unix = Some(UnixRef::new(&t.net, fd.as_fd(), owner)?);
    }
    Ok(Arc::new(OpenFile::new(
        fd,
        FileKind::Socket(Mutex::new(state)),
        None,
    )))
}

/// Reads a socket address argument (Linux's `move_addr_to_kernel`): EINVAL for a negative
/// length or one beyond `sockaddr_storage`.
fn copy_in_sockaddr(t: &Task, addr: Gva, len: i64) -> Result<Vec<u8>, Errno> {
    let len = usize::try_from(len).map_err(|_| Errno::EINVAL)?;
    if len > host::SOCKADDR_MAX {
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

/// The guest's view of a peer or source address the host reported for socket `st`.
/// `unnamed_empty`: an unnamed Unix peer is reported with length 0 (recvfrom/recvmsg), not as
/// the bare family (accept/getpeername).
fn guest_addr(t: &Task, st: &SocketState, raw: &RawSockAddr, unnamed_empty: bool) -> Vec<u8> {
    if st.family == libc::AF_UNIX {
        if raw.len == 0 {
            return Vec::new();
        }
        return match t.net.unix.guest_view(raw.as_bytes()) {
            UnixAddr::Unnamed if unnamed_empty => Vec::new(),
            a => a.encode(),
        };
    }
    if raw.len == 0 {
        return Vec::new();
    }
    inet::guest_view_bytes(&t.net, raw).as_bytes().to_vec()
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

/// Implements socket(2): AF_INET, AF_INET6, AF_UNIX, and AF_NETLINK's routing sockets in the
/// sandbox's own network namespace.
pub fn sys_socket(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let spec = parse_socket_args(a.int(0), a.int(1), a.int(2))?;
    if spec.family == libc::AF_NETLINK && !netlink::allowed(&t.net) {
        return Err(Errno::EAFNOSUPPORT);
    }
    let fd = host::socket(spec.family, spec.kind, spec.nonblock, spec.protocol)?;
    let file = socket_open_file(t, fd, spec.family, spec.kind, Some(ucred(t)))?;
    Ok(t.fds.insert(file, spec.cloexec)? as u64)
}

/// Implements socketpair(2) for AF_UNIX: two connected host sockets, unnamed, each showing
/// its creator as its peer's credentials.
pub fn sys_socketpair(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let spec = parse_socket_args(a.int(0), a.int(1), a.int(2))?;
    if spec.family != libc::AF_UNIX {
        return Err(Errno::EOPNOTSUPP);
    }
    let (x, y) = host::socketpair(spec.kind, spec.nonblock, 0)?;
    let cred = ucred(t);
    let fx = socket_open_file(t, x, spec.family, spec.kind, Some(cred))?;
    let fy = socket_open_file(t, y, spec.family, spec.kind, Some(cred))?;
    if let (Some(ix), Some(iy)) = (
        fx.socket_state().as_ref().and_then(unix_ino),
        fy.socket_state().as_ref().and_then(unix_ino),
    ) {
        t.net.unix.note_pair(ix, iy, cred);
    }
    let gx = t.fds.insert(fx, spec.cloexec)?;
    let gy = match t.fds.insert(fy, spec.cloexec) {
        Ok(g) => g,
        Err(e) => {
            let _ = t.fds.remove(gx);
            return Err(e);
        }
    };
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&gx.to_le_bytes());
    out[4..].copy_from_slice(&gy.to_le_bytes());
    if let Err(e) = t.copy_out(a.gva(3), &out) {
        let _ = t.fds.remove(gx);
        let _ = t.fds.remove(gy);
        return Err(e);
    }
    Ok(0)
}

/// Implements connect(2).
pub fn sys_connect(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (f, st) = socket_file(t, a.int(0))?;
    let raw = copy_in_sockaddr(t, a.gva(1), i64::from(a.int(2)))?;
    if raw.len() < 2 {
        return Err(Errno::EINVAL);
    }
    if family_of(&raw) == libc::AF_UNSPEC && st.kind == libc::SOCK_DGRAM {
        // "Connecting" a datagram socket to AF_UNSPEC dissolves its association.
        let r = RawSockAddr::from_bytes(&raw[..raw.len().min(inet::SOCKADDR_IN_LEN)]);
        host::connect(f.host(), &r)?;
        return Ok(0);
    }
    if let Some(ino) = unix_ino(&st) {
        return connect_unix(t, &f, &st, ino, &raw);
    }
    if st.family == libc::AF_NETLINK {
        host::connect(f.host(), &netlink::decode(&raw)?)?;
        return Ok(0);
    }
    let guest = inet::decode_guest_sockaddr(&raw, st.family, false)?;
    let host_addr = inet::outbound_target(&t.net, st.family, guest)?;
    if let Some(r) = inet::connect_through_broker(&t.net, &f, &st, host_addr) {
        return r.map(|()| 0);
    }
    if st.kind == libc::SOCK_DGRAM && inet::canonical(host_addr).ip().is_loopback() {
        inet::ensure_bound(&t.net, &f, &st)?;
    }
    match host::connect(f.host(), &inet::encode_sockaddr(&host_addr)) {
        Ok(()) => Ok(0),
        Err(e) if st.kind != libc::SOCK_STREAM || !host::is_blocking(f.host()) => Err(e),
        // A blocking connect interrupted by a park request is restarted by the task loop: it
        // waits for the attempt already under way instead of failing with EALREADY, and
        // succeeds if that attempt completed in between (EISCONN to the same peer).
        Err(e) if e == Errno::EINTR || e == Errno::EALREADY => {
            host::wait_connected(f.host()).map(|()| 0)
        }
        Err(e)
            if e == Errno(libc::EISCONN)
                && inet::peer_of(&f) == Some(inet::canonical(host_addr)) =>
        {
            Ok(0)
        }
        Err(e) => Err(e),
    }
}

fn connect_unix(t: &Task, f: &OpenFile, st: &SocketState, ino: u64, raw: &[u8]) -> SysResult {
    let addr = UnixAddr::decode(raw)?;
    let c = caller(t);
    let target = unix::target(&c, &addr)?;
    unix::autobind_if_passcred(&t.net.unix, f.host(), ino)?;
    host::connect(f.host(), &target.addr)?;
    let stream = st.kind != libc::SOCK_DGRAM;
    unix::note_connect(&t.net.unix, f.host(), ino, c.cred, stream);
    Ok(0)
}

fn accept_common(t: &mut Task, a: &SyscallArgs, flags: i32) -> SysResult {
    let (nonblock, cloexec) = parse_accept_flags(flags)?;
    let (f, st) = socket_file(t, a.int(0))?;
    // Linux reserves the descriptor before accepting: do not take a connection we cannot
    // install.
    if t.fds.len() >= MAX_FDS {
        return Err(Errno::EMFILE);
    }
    let mut hflags = libc::SOCK_CLOEXEC;
    if nonblock {
        hflags |= libc::SOCK_NONBLOCK;
    }
    let (nfd, peer) = host::accept4(f.host(), hflags)?;
    let file = socket_open_file(t, nfd, st.family, st.kind, Some(ucred(t)))?;
    if let (Some(l), Some(n)) = (
        unix_ino(&st),
        file.socket_state().as_ref().and_then(unix_ino),
    ) {
        t.net.unix.note_accept(l, n);
    }
    let addr = a.gva(1);
    if addr.0 != 0 {
        // On failure the connection is dropped with `file`, as on Linux.
        let view = guest_addr(t, &st, &peer, false);
        copy_out_sockaddr(t, addr, a.gva(2), &view)?;
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

/// A host destination, with whatever keeps its name valid until the send returns.
enum Dest {
    None,
    Inet(RawSockAddr),
    Unix(unix::HostTarget),
    /// Handed to the host unchanged (a Unix stream socket rejects any address itself).
    Raw(RawSockAddr),
}

impl Dest {
    fn raw(&self) -> Option<&RawSockAddr> {
        match self {
            Dest::None => None,
            Dest::Inet(r) | Dest::Raw(r) => Some(r),
            Dest::Unix(t) => Some(&t.addr),
        }
    }
}

/// The host destination for a send with guest address `raw` on socket `st`, or `Ok(None)`
/// when the datagram is to be dropped silently (nobody in the sandbox listens there).
fn send_dest(t: &Task, f: &OpenFile, st: &SocketState, raw: &[u8]) -> Result<Option<Dest>, Errno> {
    if raw.is_empty() {
        return Ok(Some(Dest::None));
    }
    if let Some(ino) = unix_ino(st) {
        return match st.kind {
            libc::SOCK_DGRAM => {
                let addr = UnixAddr::decode(raw)?;
                let target = unix::target(&caller(t), &addr)?;
                unix::autobind_if_passcred(&t.net.unix, f.host(), ino)?;
                Ok(Some(Dest::Unix(target)))
            }
            // Linux ignores a seqpacket socket's address.
            libc::SOCK_SEQPACKET => Ok(Some(Dest::None)),
            _ => Ok(Some(Dest::Raw(RawSockAddr::from_bytes(raw)))),
        };
    }
    if st.family == libc::AF_NETLINK {
        return Ok(Some(Dest::Raw(netlink::decode(raw)?)));
    }
    // TCP ignores a destination.
    if st.kind != libc::SOCK_DGRAM {
        return Ok(Some(Dest::None));
    }
    let guest = inet::decode_guest_sockaddr(raw, st.family, st.family == libc::AF_INET)?;
    match inet::outbound_target(&t.net, st.family, guest) {
        Ok(h) => {
            if inet::canonical(h).ip().is_loopback() {
                inet::ensure_bound(&t.net, f, st)?;
            }
            Ok(Some(Dest::Inet(inet::encode_sockaddr(&h))))
        }
        Err(e) if e == Errno::ECONNREFUSED => Ok(None),
        Err(e) => Err(e),
    }
}

/// sendto/sendmsg: `runs` of guest memory, to guest address `dest` (empty: none), with the
/// guest control bytes `control`.
fn send_common(
    t: &mut Task,
    fd: i32,
    runs: &[(Gpa, u64)],
    dest: &[u8],
    control: &[u8],
    guest_flags: i32,
) -> SysResult {
    let (f, st) = socket_file(t, fd)?;
    let flags = send_flags(guest_flags)?;
    let total: u64 = runs.iter().map(|r| r.1).sum();
    let Some(dest) = send_dest(t, &f, &st, dest)? else {
        return Ok(total);
    };
    // A datagram to a socket file: the host checks the task's write permission on that file
    // (the call is not among `table::checks_file_access`, which most sends need not pay for).
    let _task_ids = match dest {
        Dest::Unix(_) => Some(crate::fs::identity::become_task(&t.creds)?),
        _ => None,
    };
    let sender = cmsg::Sender {
        cred: ucred(t),
        privileged: t.creds.capable(crate::creds::cap::SETUID),
    };
    let out = cmsg::to_host(control, st.family, &t.fds, sender)?;
    if let Some(ino) = unix_ino(&st) {
        t.net
            .unix
            .note_sender(ino, out.creds.unwrap_or(sender.cred));
    }
    let stream = st.kind == libc::SOCK_STREAM;
    let mut done = 0u64;
    let mut rest: &[(Gpa, u64)] = runs;
    let mut control: &[u8] = &out.bytes;
    let r = loop {
        let iov = crate::fd::iovecs(&t.mem, rest)?;
        let want: u64 = iov.iter().map(|v| v.iov_len as u64).sum();
        match host::sendmsg(f.host(), &iov, dest.raw(), control, flags) {
            Ok(n) => {
                done += n;
                rest = &rest[iov.len()..];
                control = &[];
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

/// Implements sendto(2).
///
/// A stream send is split into host calls of at most IOV_MAX runs (see `fd::iovecs`) and
/// stops at the first short one, as a blocking Linux send returns only when all is queued.
pub fn sys_sendto(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let len = a.len(2)?.min(MAX_RW);
    let dest = if a.u(4) != 0 {
        copy_in_sockaddr(t, a.gva(4), i64::from(a.int(5)))?
    } else {
        Vec::new()
    };
    let runs = t.user_ranges(a.gva(1), len, false)?;
    send_common(t, a.int(0), &runs, &dest, &[], a.int(3))
}

/// The guest runs of an iovec array.
fn iov_runs(t: &Task, iov: Gva, count: u64, write: bool) -> Result<Vec<(Gpa, u64)>, Errno> {
    if count > UIO_MAXIOV {
        return Err(Errno::EMSGSIZE);
    }
    let mut runs = Vec::new();
    for (base, len) in super::iovec::copy_in_iovecs(t, iov, count)? {
        if len > 0 {
            runs.extend(t.user_ranges(base, len, write)?);
        }
    }
    Ok(runs)
}

fn read_msghdr(t: &Task, at: Gva) -> Result<MsgHdr, Errno> {
    let mut b = [0u8; MSGHDR_LEN];
    t.copy_in(at, &mut b)?;
    Ok(MsgHdr::decode(&b))
}

/// Implements sendmsg(2), with SCM_RIGHTS and SCM_CREDENTIALS on Unix sockets.
pub fn sys_sendmsg(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let fd = a.int(0);
    socket_file(t, fd)?;
    let m = read_msghdr(t, a.gva(1))?;
    let dest = if m.name.0 != 0 {
        copy_in_sockaddr(t, m.name, i64::from(m.namelen as i32))?
    } else {
        Vec::new()
    };
    let control = if m.controllen > 0 {
        let len = usize::try_from(m.controllen).map_err(|_| Errno(libc::ENOBUFS))?;
        if len > cmsg::MAX_CONTROL {
            return Err(Errno(libc::ENOBUFS));
        }
        let mut c = vec![0u8; len];
        t.copy_in(m.control, &mut c)?;
        c
    } else {
        Vec::new()
    };
    let runs = iov_runs(t, m.iov, m.iovlen, false)?;
    send_common(t, fd, &runs, &dest, &control, a.int(2))
}

/// What a receive gave the guest besides the data.
struct RecvResult {
    len: u64,
    /// The source address in guest form (empty when none).
    from: Vec<u8>,
    /// Guest control bytes.
    control: Vec<u8>,
    /// Message flags for recvmsg.
    flags: i32,
}

/// recvfrom/recvmsg: into `runs`, with room for `control_cap` control bytes.
fn recv_common(
    t: &mut Task,
    fd: i32,
    runs: &[(Gpa, u64)],
    guest_flags: i32,
    control_cap: usize,
) -> Result<RecvResult, Errno> {
    let (f, st) = socket_file(t, fd)?;
    let flags = recv_flags(guest_flags)?;
    let waitall = flags & libc::MSG_WAITALL != 0
        && st.kind == libc::SOCK_STREAM
        && flags & libc::MSG_PEEK == 0;
    let mut control = vec![0u8; control_cap.min(cmsg::MAX_CONTROL)];
    let mut first: Option<host::Received> = None;
    let mut done = 0u64;
    let mut rest: &[(Gpa, u64)] = runs;
    loop {
        let iov = crate::fd::iovecs(&t.mem, rest)?;
        let want: u64 = iov.iter().map(|v| v.iov_len as u64).sum();
        let ctl: &mut [u8] = if first.is_none() {
            &mut control
        } else {
            &mut []
        };
        match host::recvmsg(f.host(), &iov, ctl, flags) {
            Ok(r) => {
                let n = r.len;
                done += n;
                if first.is_none() {
                    first = Some(r);
                }
                rest = &rest[iov.len()..];
                if !waitall || n < want || rest.is_empty() {
                    break;
                }
            }
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        }
    }
    let Some(r) = first else {
        return Err(Errno::EIO);
    };
    let from = guest_addr(t, &st, &r.from, true);
    let cloexec = guest_flags & libc::MSG_CMSG_CLOEXEC != 0;
    let ino = unix_ino(&st);
    let (net, root, fds) = (t.net.clone(), t.root.clone(), t.fds.clone());
    let inc = cmsg::from_host(
        &control[..r.control_len],
        |hostfd| {
            let file = cmsg::received_file(hostfd, &net, &root);
            fds.insert(Arc::new(file), cloexec)
        },
        |hc| match ino {
            Some(i) => unix::sender_credentials(&net.unix, i, r.from.as_bytes(), hc),
            None => hc,
        },
    );
    let mut flags = r.flags & !libc::MSG_CMSG_CLOEXEC;
    if inc.truncated {
        flags |= libc::MSG_CTRUNC;
    }
    Ok(RecvResult {
        len: done,
        from,
        control: inc.bytes,
        flags,
    })
}

/// Implements recvfrom(2).
pub fn sys_recvfrom(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (_, st) = socket_file(t, a.int(0))?;
    let guest_flags = a.int(3);
    recv_flags(guest_flags)?;
    let waitall = guest_flags & libc::MSG_WAITALL != 0
        && st.kind == libc::SOCK_STREAM
        && guest_flags & libc::MSG_PEEK == 0;
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
    let r = recv_common(t, a.int(0), &runs, guest_flags & !libc::MSG_CMSG_CLOEXEC, 0)?;
    if addr.0 != 0 {
        copy_out_sockaddr(t, addr, addrlen, &r.from)?;
    }
    Ok(r.len)
}

/// Implements recvmsg(2): the source address, the data and the control messages (received
/// fds installed in the caller's table, credentials in guest terms) as Linux fills them.
pub fn sys_recvmsg(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let fd = a.int(0);
    socket_file(t, fd)?;
    let at = a.gva(1);
    let m = read_msghdr(t, at)?;
    if m.name.0 != 0 && (m.namelen as i32) < 0 {
        return Err(Errno::EINVAL);
    }
    let control_cap = if m.control.0 == 0 {
        0
    } else {
        usize::try_from(m.controllen).unwrap_or(usize::MAX)
    };
    let runs = iov_runs(t, m.iov, m.iovlen, true)?;
    let r = recv_common(t, fd, &runs, a.int(2), control_cap)?;
    // msg_namelen: the full length, the copy capped at the guest's; 0 without a name buffer.
    let namelen = if m.name.0 != 0 {
        let n = r.from.len().min(m.namelen as usize);
        if n > 0 {
            t.copy_out(m.name, &r.from[..n])?;
        }
        r.from.len() as u32
    } else {
        0
    };
    t.copy_out(Gva(at.0 + 8), &namelen.to_le_bytes())?;
    if !r.control.is_empty() {
        t.copy_out(m.control, &r.control)?;
    }
    t.write_u64(Gva(at.0 + 40), r.control.len() as u64)?;
    t.copy_out(Gva(at.0 + 48), &r.flags.to_le_bytes())?;
    Ok(r.len)
}

/// Implements shutdown(2).
pub fn sys_shutdown(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (f, _) = socket_file(t, a.int(0))?;
    let how = a.int(1);
    if !matches!(how, libc::SHUT_RD | libc::SHUT_WR | libc::SHUT_RDWR) {
        return Err(Errno::EINVAL);
    }
    host::shutdown(f.host(), how)?;
    Ok(0)
}

/// Implements bind(2).
///
/// Internet sockets: the host binds the address the network policy picks; the guest keeps
/// seeing the address it asked for (with the port the host chose if it asked for port 0).
/// Unix sockets: the name is created in the root (or the sandbox's abstract namespace), see
/// `net::unix`; an address of the family alone autobinds.
pub fn sys_bind(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (f, st) = socket_file(t, a.int(0))?;
    let raw = copy_in_sockaddr(t, a.gva(1), i64::from(a.int(2)))?;
    if let Some(ino) = unix_ino(&st) {
        let addr = if raw.len() == 2 && family_of(&raw) == libc::AF_UNIX {
            UnixAddr::Unnamed
        } else {
            UnixAddr::decode(&raw)?
        };
        unix::bind(&caller(t), f.host(), ino, &addr)?;
        return Ok(0);
    }
    if st.family == libc::AF_NETLINK {
        host::bind(f.host(), &netlink::decode(&raw)?)?;
        return Ok(0);
    }
    let guest = inet::decode_guest_sockaddr(&raw, st.family, st.family == libc::AF_INET)?;
    // Linux takes AF_UNSPEC for IPv4 only with INADDR_ANY.
    if family_of(&raw) == libc::AF_UNSPEC && !guest.ip().is_unspecified() {
        return Err(Errno::EAFNOSUPPORT);
    }
    if st.guest_local.is_some() {
        return Err(Errno::EINVAL);
    }
    // A port below 1024 (Linux's default net.ipv4.ip_unprivileged_port_start) needs
    // CAP_NET_BIND_SERVICE, which a container's root has and its other users have not.
    if (1..PRIVILEGED_PORTS_END).contains(&guest.port())
        && !t.creds.capable(crate::creds::cap::NET_BIND_SERVICE)
    {
        return Err(Errno::EACCES);
    }
    inet::bind_as_guest(&t.net, &f, st.family, guest)?;
    Ok(0)
}

/// The host backlog of every listening socket: connections that arrive while the sandbox is
/// hibernated, waking or busy wait in the host's queue instead of being dropped (clients would
/// retry after 1, 3, 7… s). The host's `net.core.somaxconn` caps it (4096 by default).
const HOST_BACKLOG: i32 = host::LISTEN_BACKLOG;

/// Implements listen(2). An unbound Internet stream socket is first bound through the policy
/// (Linux would bind the wildcard address and an ephemeral port); an unbound Unix socket is
/// EINVAL, from the host. The application's backlog is advisory, as on Linux: the host
/// socket gets [`HOST_BACKLOG`] whatever it asks, so a burst at a hibernated sandbox is not
/// dropped at the door (a larger queue than asked is what Linux itself may give).
pub fn sys_listen(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (f, st) = socket_file(t, a.int(0))?;
    if st.kind == libc::SOCK_STREAM && st.family != libc::AF_UNIX {
        inet::ensure_bound(&t.net, &f, &st)?;
    }
    host::listen(f.host(), a.int(1).max(HOST_BACKLOG))?;
    if let Some(ino) = unix_ino(&st) {
        t.net.unix.note_listen(ino, ucred(t));
    }
    Ok(0)
}

/// Implements getsockname(2): the address the guest bound, or the host's with the guest
/// port when one is known; a Unix socket's guest name (the family alone when unnamed).
pub fn sys_getsockname(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (f, st) = socket_file(t, a.int(0))?;
    let ulen = read_len(t, a.gva(2))?;
    if ulen < 0 {
        return Err(Errno::EINVAL);
    }
    let bytes = if let Some(ino) = unix_ino(&st) {
        t.net.unix.local_name(ino).encode()
    } else {
        local_inet_name(t, &f, &st)?
    };
    copy_out_sockaddr(t, a.gva(1), a.gva(2), &bytes)?;
    Ok(0)
}

fn local_inet_name(t: &Task, f: &OpenFile, st: &SocketState) -> Result<Vec<u8>, Errno> {
    let raw = match st.guest_local {
        Some(g) => inet::encode_sockaddr(&g),
        None => {
            let h = host::name(f.host(), false)?;
            match inet::parse_sockaddr(h.as_bytes()) {
                Some(mut addr) => {
                    if addr.port() != 0 {
                        if let Some(g) = t.net.guest_port_of(addr) {
                            addr.set_port(g);
                        }
                    }
                    inet::encode_sockaddr(&addr)
                }
                None => h,
            }
        }
    };
    Ok(raw.as_bytes().to_vec())
}

/// Implements getpeername(2).
pub fn sys_getpeername(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (f, st) = socket_file(t, a.int(0))?;
    let ulen = read_len(t, a.gva(2))?;
    if ulen < 0 {
        return Err(Errno::EINVAL);
    }
    let h = host::name(f.host(), true)?;
    let view = guest_addr(t, &st, &h, false);
    copy_out_sockaddr(t, a.gva(1), a.gva(2), &view)?;
    Ok(0)
}

/// An interface query ioctl (`SIOCGIFINDEX`...) on socket `f`: the host's answer in the
/// sandbox's own network namespace, ENODEV in the host's (the sandbox sees no interface of the
/// host).
pub fn interface_ioctl(t: &Task, f: &OpenFile, req: u64, arg: Gva) -> SysResult {
    if f.socket_state().is_none() {
        return Err(Errno::ENOTTY);
    }
    let mut ifr = [0u8; netlink::IFREQ_LEN];
    t.copy_in(arg, &mut ifr)?;
    if !netlink::allowed(&t.net) {
        return Err(Errno::ENODEV);
    }
    host::interface_query(f.host(), req, &mut ifr)?;
    t.copy_out(arg, &ifr)?;
    Ok(0)
}

/// `SIOCGIFCONF` on socket `f`: the list of interfaces with an IPv4 address, into the
/// caller's buffer (at most [`netlink::IFCONF_MAX`] bytes of it), or the length it needs when
/// the buffer pointer is null. Empty in the host's network namespace.
pub fn interface_list_ioctl(t: &Task, f: &OpenFile, arg: Gva) -> SysResult {
    if f.socket_state().is_none() {
        return Err(Errno::ENOTTY);
    }
    let mut ifc = [0u8; netlink::IFCONF_LEN];
    t.copy_in(arg, &mut ifc)?;
    let len = i32::from_le_bytes([ifc[0], ifc[1], ifc[2], ifc[3]]);
    let buf = u64::from_le_bytes(ifc[8..16].try_into().unwrap_or([0; 8]));
    if len < 0 {
        return Err(Errno::EINVAL);
    }
    let filled: i32 = if !netlink::allowed(&t.net) {
        0
    } else {
        let cap = if buf == 0 {
            0
        } else {
            (len as usize).min(netlink::IFCONF_MAX)
        };
        let mut out = vec![0u8; cap];
        let n = host::interface_list(f.host(), (buf != 0).then_some(&mut out[..]))?;
        if buf != 0 {
            let n = (n.max(0) as usize).min(cap);
            t.copy_out(Gva(buf), &out[..n])?;
        }
        n
    };
    t.copy_out(arg, &filled.to_le_bytes())?;
    Ok(0)
}

/// Implements setsockopt(2) for a whitelist of options, passed to the host socket.
/// Anything else is ENOPROTOOPT.
pub fn sys_setsockopt(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (f, st) = socket_file(t, a.int(0))?;
    let (level, name) = (a.int(1), a.int(2));
    if !option_permitted(t, level, name, true) {
        return Err(refused_sockopt(&st, level, true));
    }
    let len = usize::try_from(a.int(4))
        .map_err(|_| Errno::EINVAL)?
        .min(MAX_OPT_LEN);
    let mut val = vec![0u8; len];
    if len > 0 {
        t.copy_in(a.gva(3), &mut val)?;
    }
    host::setsockopt(f.host(), level, name, &val)?;
    Ok(0)
}

/// Implements getsockopt(2) for the same whitelist as setsockopt(2) plus read-only options
/// (SO_ERROR, SO_TYPE…). SO_PEERCRED of a Unix socket reports the peer's guest pid, uid and
/// gid (see `net::unix::peer_credentials`).
pub fn sys_getsockopt(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (f, st) = socket_file(t, a.int(0))?;
    let (level, name) = (a.int(1), a.int(2));
    if !option_permitted(t, level, name, false) {
        return Err(refused_sockopt(&st, level, false));
    }
    let ulen = usize::try_from(read_len(t, a.gva(4))?).map_err(|_| Errno::EINVAL)?;
    let mut val = vec![0u8; ulen.min(MAX_OPT_LEN)];
    let n = if level == libc::SOL_SOCKET && name == libc::SO_PEERCRED {
        let mut hv = [0u8; Ucred::SIZE];
        host::getsockopt(f.host(), level, name, &mut hv)?;
        let mut cred = Ucred::from_bytes(&hv).ok_or(Errno::EINVAL)?;
        if let Some(ino) = unix_ino(&st) {
            cred = unix::peer_credentials(&t.net.unix, f.host(), ino, cred);
        }
        let n = val.len().min(Ucred::SIZE);
        val[..n].copy_from_slice(&cred.to_bytes()[..n]);
        n
    } else {
        host::getsockopt(f.host(), level, name, &mut val)?
    };
    if n > 0 {
        t.copy_out(a.gva(3), &val[..n])?;
    }
    t.write_u32(a.gva(4), n as u32)?;
    Ok(0)
}

#[cfg(test)]
mod tests;
