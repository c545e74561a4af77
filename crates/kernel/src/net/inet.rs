//! Internet sockets (AF_INET, AF_INET6): host TCP/UDP sockets behind the sandbox's
//! [`NetPolicy`].
//!
//! Addresses are translated by the policy:
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
//! Differences from Linux:
//! - A UDP datagram sent to a loopback port nobody in the sandbox bound is dropped (as Linux
//!   does when nothing listens), but a `connect` to such a port fails with `ECONNREFUSED`
//!   even for UDP.
//! - In the host's network namespace (rootless holders, `--allow-outbound`), an unpublished
//!   guest port lands on an ephemeral loopback port of the host: a second bind of the same
//!   guest port by a socket of the same family and type is EADDRINUSE through the policy's
//!   claims, but binds of one port on two loopback addresses conflict where Linux would not,
//!   and an IPv4 client does not reach a dual-stack IPv6 listener. A root holder without
//!   `--allow-outbound` is in a network namespace of its own
//!   ([`NetPolicy::private_loopback`]): there unpublished guest ports are the namespace's own,
//!   and Linux's rules apply unchanged.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use abi::Errno;

use super::host::{self, family_of, RawSockAddr};
use super::{NetPolicy, PortLease};
use crate::fd::{FileKind, OpenFile, SocketState};

/// `sizeof(struct sockaddr_in)`.
pub const SOCKADDR_IN_LEN: usize = 16;
/// `sizeof(struct sockaddr_in6)`.
const SOCKADDR_IN6_LEN: usize = 28;
/// The shortest `sockaddr_in6` Linux accepts (no `sin6_scope_id`).
const SIN6_LEN_RFC2133: usize = 24;

/// Encodes `a` as a `sockaddr_in` or `sockaddr_in6`.
pub fn encode_sockaddr(a: &SocketAddr) -> RawSockAddr {
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
pub fn decode_guest_sockaddr(b: &[u8], family: i32, unspec_ok: bool) -> Result<SocketAddr, Errno> {
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
pub fn parse_sockaddr(b: &[u8]) -> Option<SocketAddr> {
    match family_of(b) {
        libc::AF_INET if b.len() >= SOCKADDR_IN_LEN => Some(v4_from(b)),
        libc::AF_INET6 if b.len() >= SIN6_LEN_RFC2133 => Some(v6_from(b)),
        _ => None,
    }
}

/// `a` as an address of `family`: IPv4 addresses on an IPv6 socket become v4-mapped (the
/// wildcard becomes `::`); IPv6 loopback, wildcard and v4-mapped addresses on an IPv4 socket
/// become their IPv4 forms. `None` when there is no such form.
pub fn fit_family(a: SocketAddr, family: i32) -> Option<SocketAddr> {
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
pub fn canonical(a: SocketAddr) -> SocketAddr {
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
pub fn guest_view_of_remote(net: &NetPolicy, host: SocketAddr) -> SocketAddr {
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
pub fn guest_view_bytes(net: &NetPolicy, raw: &RawSockAddr) -> RawSockAddr {
    match parse_sockaddr(raw.as_bytes()) {
        Some(a) => encode_sockaddr(&guest_view_of_remote(net, a)),
        None => *raw,
    }
}

/// Records the address the guest bound (its view, not the host's).
fn set_guest_local(f: &OpenFile, a: SocketAddr) {
    if let FileKind::Socket(m) = &f.kind {
        m.lock().unwrap_or_else(|e| e.into_inner()).guest_local = Some(a);
    }
}

/// Binds `f`'s host socket for a guest bind to `guest`, and records the binding.
pub fn bind_as_guest(
    net: &Arc<NetPolicy>,
    f: &OpenFile,
    family: i32,
    guest: SocketAddr,
) -> Result<(), Errno> {
    // A second socket of the same family and type on a guest port is EADDRINUSE, as on
    // Linux (each would otherwise land on a host port of its own), unless SO_REUSEPORT.
    let kind = match &f.kind {
        FileKind::Socket(m) => m.lock().unwrap_or_else(|e| e.into_inner()).kind,
        _ => 0,
    };
    let claim = if guest.port() != 0 && !net.port_is_own(guest.port()) {
        let reuse = host::int_opt(f.host(), libc::SOL_SOCKET, libc::SO_REUSEPORT).unwrap_or(0) != 0;
        Some(net.claim(guest.port(), family == libc::AF_INET6, kind, reuse)?)
    } else {
        None
    };
    // A failed bind drops the claim.
    bind_claimed(net, f, family, guest)?;
    if let (Some(c), FileKind::Socket(m)) = (claim, &f.kind) {
        m.lock().unwrap_or_else(|e| e.into_inner()).claim = Some(Arc::new(c));
    }
    Ok(())
}

/// [`bind_as_guest`] once the guest port is claimed.
fn bind_claimed(
    net: &Arc<NetPolicy>,
    f: &OpenFile,
    family: i32,
    guest: SocketAddr,
) -> Result<(), Errno> {
    let target = net.bind_target(guest);
    // A published port (or, for an engine's namespace, any given port) of the host; not a port
    // of the holder's own private namespace, which is the guest's own.
    let published = target.port() != 0 && (net.is_namespaced() || !net.port_is_own(guest.port()));
    // A published IPv6 address other than `[::]` is not an IPv4 socket's: `--publish
    // [::1]:...` is served by the server's IPv6 listener, not by its IPv4 one on 127.0.0.1.
    let fitted = match (target, published) {
        (SocketAddr::V6(v6), true) if family == libc::AF_INET && !v6.ip().is_unspecified() => None,
        _ => fit_family(target, family),
    };
    let bound = match fitted {
        Some(host) => {
            if published {
                // A published port: let a restarted server rebind while old connections
                // linger.
                host::set_int_opt(f.host(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
            }
            if let Some(kept) = published
                .then(|| net.take_kept(|k| kept_fits(k, f.host(), family, host)))
                .flatten()
            {
                // A socket kept from before a restore, its waiting connections with it.
                host::replace(f.host(), kept).map(|()| host)
            } else if published && crate::broker::publishes() {
                bind_through_broker(f, family, host)
            } else {
                host::bind(f.host(), &encode_sockaddr(&host)).map(|()| host)
            }
        }
        None => Err(Errno::EADDRNOTAVAIL),
    };
    let host = match bound {
        Ok(h) => h,
        // The published host address does not fit this socket's family (an IPv6-only socket
        // and an IPv4 address, an IPv4 socket and `--publish [::1]:...`), or is taken by the
        // server's socket of the other family (Redis, PostgreSQL and memcached bind 0.0.0.0
        // and [::] with IPV6_V6ONLY, in either order): natively both binds succeed, so this
        // socket gets a loopback port of its own family, reachable from inside the sandbox,
        // and the other family's socket serves the published port.
        Err(e)
            if published
                && (matches!(e, Errno::EADDRNOTAVAIL | Errno::EINVAL)
                    || (e == Errno::EADDRINUSE && net.is_bound(guest.port()))) =>
        {
            let lo = fit_family(wildcard(family), family)
                .map(|w| SocketAddr::new(guest_loopback_of(w), 0))
                .ok_or(e)?;
            host::bind(f.host(), &encode_sockaddr(&lo))?;
            lo
        }
        Err(e) => return Err(e),
    };
    let actual = host::name(f.host(), false)
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
        m.lock().unwrap_or_else(|e| e.into_inner()).lease =
            Some(Arc::new(PortLease::new(net.clone(), guest_port, actual)));
    }
    Ok(())
}

/// Whether the kept socket `kept` is bound to `addr` with this family and the type and
/// `IPV6_V6ONLY` of `socket` (see [`NetPolicy::keep_sockets`]). Asked only while kept sockets
/// remain: a bind without them reads no option.
fn kept_fits(kept: BorrowedFd<'_>, socket: BorrowedFd<'_>, family: i32, addr: SocketAddr) -> bool {
    let opt = |fd, level, name| host::int_opt(fd, level, name).ok();
    let same = |level, name| {
        let k = opt(kept, level, name);
        k.is_some() && k == opt(socket, level, name)
    };
    opt(kept, libc::SOL_SOCKET, libc::SO_DOMAIN) == Some(family)
        // A listener (a kept connection has the same local address).
        && opt(kept, libc::SOL_SOCKET, libc::SO_ACCEPTCONN) == Some(1)
        && same(libc::SOL_SOCKET, libc::SO_TYPE)
        && (family != libc::AF_INET6 || same(libc::IPPROTO_IPV6, libc::IPV6_V6ONLY))
        && host::name(kept, false)
            .ok()
            .and_then(|r| parse_sockaddr(r.as_bytes()))
            == Some(addr)
}

/// A published port's bind when the holder is in a network namespace of its own: the broker
/// makes the socket, bound in the host's namespace, and it takes the place of `f`'s.
fn bind_through_broker(f: &OpenFile, family: i32, host: SocketAddr) -> Result<SocketAddr, Errno> {
    let kind = host::int_opt(f.host(), libc::SOL_SOCKET, libc::SO_TYPE)?;
    let v6only = family == libc::AF_INET6
        && host::int_opt(f.host(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY).unwrap_or(0) != 0;
    let reuseport = host::int_opt(f.host(), libc::SOL_SOCKET, libc::SO_REUSEPORT).unwrap_or(0) != 0;
    let new = crate::broker::socket(&crate::broker::Op::BindInet {
        family,
        kind,
        addr: host,
        v6only,
        reuseport,
    })?;
    host::replace(f.host(), new)?;
    Ok(host)
}

/// A connect to the sandbox's own published listener when the holder is in a network
/// namespace of its own: the broker connects a socket of the host's namespace, which takes
/// the place of `f`'s. `None` when `target` is not such a listener (the holder connects).
pub fn connect_through_broker(
    net: &NetPolicy,
    f: &OpenFile,
    st: &SocketState,
    target: SocketAddr,
) -> Option<Result<(), Errno>> {
    if !crate::broker::publishes() || !net.is_published_target(target) {
        return None;
    }
    let r = crate::broker::socket(&crate::broker::Op::ConnectInet {
        family: st.family,
        kind: st.kind,
        addr: target,
    })
    .and_then(|new| host::replace(f.host(), new));
    Some(r)
}

/// The loopback address of `a`'s family.
fn guest_loopback_of(a: SocketAddr) -> IpAddr {
    if a.is_ipv4() {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        IpAddr::V6(Ipv6Addr::LOCALHOST)
    }
}

/// Whether the host socket has a local port yet.
pub fn is_bound(f: &OpenFile) -> bool {
    host::name(f.host(), false)
        .ok()
        .and_then(|r| parse_sockaddr(r.as_bytes()))
        .is_some_and(|a| a.port() != 0)
}

/// The wildcard address of `family`, port 0.
pub fn wildcard(family: i32) -> SocketAddr {
    if family == libc::AF_INET6 {
        SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0)
    } else {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)
    }
}

/// Binds an unbound socket through the policy before the host would auto-bind it to every
/// interface.
pub fn ensure_bound(net: &Arc<NetPolicy>, f: &OpenFile, st: &SocketState) -> Result<(), Errno> {
    if st.guest_local.is_none() && !is_bound(f) {
        bind_as_guest(net, f, st.family, wildcard(st.family))?;
    }
    Ok(())
}

/// The host address for a guest connect/sendto to `guest`, or the errno the policy implies.
pub fn outbound_target(
    net: &NetPolicy,
    family: i32,
    guest: SocketAddr,
) -> Result<SocketAddr, Errno> {
    let c = canonical(guest);
    match net.connect_target(c) {
        Some(h) => fit_family(h, family).ok_or(Errno::ENETUNREACH),
        None if c.ip().is_loopback() || c.ip().is_unspecified() => Err(Errno::ECONNREFUSED),
        None => Err(Errno::ENETUNREACH),
    }
}

/// The host peer address, canonical.
pub fn peer_of(f: &OpenFile) -> Option<SocketAddr> {
    let r = host::name(f.host(), true).ok()?;
    parse_sockaddr(r.as_bytes()).map(canonical)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Publish;
    use std::os::fd::OwnedFd;

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

    fn guest_socket(family: i32) -> OpenFile {
        let state = SocketState {
            family,
            kind: libc::SOCK_STREAM,
            ..SocketState::default()
        };
        OpenFile::new(
            host::socket(family, libc::SOCK_STREAM, false, 0).unwrap(),
            FileKind::Socket(std::sync::Mutex::new(state)),
            None,
        )
    }

    /// A dormant sandbox's published listener, kept across its wake: the restored server's
    /// bind adopts it, and the connection made while it slept, waiting in its queue with its
    /// bytes, is the first one the server accepts (docs/design/dormant.md, slice 2).
    #[test]
    fn a_published_bind_adopts_a_kept_listener_and_its_waiting_connection() {
        use std::io::{Read, Write};
        let kept = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let host_addr = kept.local_addr().unwrap();
        let publish = vec![Publish {
            host: host_addr,
            guest_port: 8080,
        }];
        let n = Arc::new(NetPolicy::new(publish, false));
        // Made while the sandbox slept.
        let mut client = std::net::TcpStream::connect(host_addr).unwrap();
        client.write_all(b"sent while dormant").unwrap();
        // A kept socket of another family, or a socket not bound there, is not taken.
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        n.keep_sockets(vec![OwnedFd::from(other), OwnedFd::from(kept)]);
        let v6 = guest_socket(libc::AF_INET6);
        let _ = bind_as_guest(&n, &v6, libc::AF_INET6, "[::]:8080".parse().unwrap());
        assert_eq!(n.kept_left(), 2, "an IPv6 socket took an IPv4 listener");

        let f = guest_socket(libc::AF_INET);
        bind_as_guest(&n, &f, libc::AF_INET, "0.0.0.0:8080".parse().unwrap()).unwrap();
        assert_eq!(n.kept_left(), 1);
        host::listen(f.host(), host::LISTEN_BACKLOG).unwrap();
        let local = f.socket_state().unwrap().guest_local.unwrap();
        assert_eq!(local, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(n.guest_port_of(host_addr), Some(8080));
        let (conn, _) = host::accept4(f.host(), libc::SOCK_CLOEXEC).unwrap();
        let mut conn = std::fs::File::from(conn);
        let mut got = [0u8; 18];
        conn.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"sent while dormant");
        conn.write_all(b"answered").unwrap();
        let mut answer = [0u8; 8];
        client.read_exact(&mut answer).unwrap();
        assert_eq!(&answer, b"answered");
    }

    #[test]
    fn host_bind_through_policy() {
        // No KVM needed: a real host socket bound the way sys_bind does.
        let n = Arc::new(NetPolicy::new(Vec::new(), false));
        let state = SocketState {
            family: libc::AF_INET,
            kind: libc::SOCK_STREAM,
            ..SocketState::default()
        };
        let f = OpenFile::new(
            host::socket(libc::AF_INET, libc::SOCK_STREAM, false, 0).unwrap(),
            FileKind::Socket(std::sync::Mutex::new(state)),
            None,
        );
        assert!(!is_bound(&f));
        bind_as_guest(&n, &f, libc::AF_INET, "0.0.0.0:81".parse().unwrap()).unwrap();
        assert!(is_bound(&f));
        let local = f.socket_state().unwrap().guest_local.unwrap();
        assert_eq!(local, "0.0.0.0:81".parse().unwrap());
        let host = parse_sockaddr(host::name(f.host(), false).unwrap().as_bytes()).unwrap();
        assert!(host.ip().is_loopback());
        assert_eq!(n.guest_port_of(host), Some(81));
        assert_eq!(
            outbound_target(&n, libc::AF_INET, "127.0.0.1:81".parse().unwrap()),
            Ok(host)
        );
        // Options round-trip through the host.
        host::set_int_opt(f.host(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 1).unwrap();
        let mut v = [0u8; 64];
        assert_eq!(
            host::getsockopt(f.host(), libc::IPPROTO_TCP, libc::TCP_NODELAY, &mut v),
            Ok(4)
        );
        assert_ne!(v[..4], [0, 0, 0, 0]);
    }
}
