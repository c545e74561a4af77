//! The socket layer: the sandbox's network policy and the guest's sockets, below the
//! syscall handlers (`syscalls/sys_socket.rs`, which decode arguments and dispatch by family).
//!
//! ```text
//! mod.rs    the network policy (this file): which host addresses Internet sockets may use
//! inet.rs   AF_INET/AF_INET6: address codecs and their translation through the policy
//! unix.rs   AF_UNIX: names confined to the root or tagged abstract names, credentials
//! netlink.rs AF_NETLINK routing sockets, in the sandbox's own network namespace only
//! cmsg.rs   control messages: SCM_RIGHTS (guest fds <-> host fds) and SCM_CREDENTIALS
//! host.rs   the host socket calls themselves (every `unsafe` of the layer)
//! ```
//!
//! Every guest socket is a host socket of the same family and type (always created
//! `SOCK_CLOEXEC` on the host; the guest's close-on-exec flag lives in the `FdTable`, its
//! `O_NONBLOCK` on the host fd), so blocking, readiness and data transfer are the host's.
//!
//! A `bind` to a published guest port binds the host address given by `--publish`; any other
//! bind lands on an ephemeral loopback port (the application can still talk to itself, but
//! nothing outside reaches it). `connect` reaches the sandbox's own listeners on loopback (the
//! guest port is translated to the host port behind it), and elsewhere only with
//! `allow_outbound`.
//!
//! A sandbox given a network namespace of its own by its engine (the OCI form: podman, CNI)
//! uses the [`NetPolicy::namespaced`] policy instead: binds and connects are the
//! application's own, unchanged, inside that namespace, whose reachability the engine decides
//! (as with runc).

pub mod cmsg;
pub mod host;
pub mod inet;
pub mod netlink;
pub mod unix;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;

/// One `--publish [HOST_IP:]HOST_PORT:GUEST_PORT` rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Publish {
    /// Host address to bind.
    pub host: SocketAddr,
    /// The guest port it stands for.
    pub guest_port: u16,
}

impl std::str::FromStr for Publish {
    type Err = String;

    fn from_str(s: &str) -> Result<Publish, String> {
        let bad = || format!("bad --publish {s:?}: expected [HOST_IP:]HOST_PORT:GUEST_PORT");
        let (rest, guest) = s.rsplit_once(':').ok_or_else(bad)?;
        let guest_port: u16 = guest.parse().map_err(|_| bad())?;
        let (ip, host_port) = match rest.rsplit_once(':') {
            Some((ip, p)) => {
                let ip = ip.trim_start_matches('[').trim_end_matches(']');
                (ip.parse::<IpAddr>().map_err(|_| bad())?, p)
            }
            None => (IpAddr::V4(Ipv4Addr::LOCALHOST), rest),
        };
        let host_port: u16 = host_port.parse().map_err(|_| bad())?;
        if guest_port == 0 {
            return Err(bad());
        }
        Ok(Publish {
            host: SocketAddr::new(ip, host_port),
            guest_port,
        })
    }
}

/// The policy, plus the ports the application has bound so far.
#[derive(Debug, Default)]
pub struct NetPolicy {
    publish: Vec<Publish>,
    allow_outbound: bool,
    /// Binds and connects pass through unchanged (a network namespace of the sandbox's own).
    namespaced: bool,
    /// The holder is in a network namespace of its own (loopback only) and published ports
    /// are the broker's: unpublished guest ports are the namespace's own ports, unchanged.
    private_loopback: bool,
    /// (guest port, IPv6 socket) → host address actually bound: a server's IPv4 and IPv6
    /// listeners on one port are two entries.
    bound: Mutex<HashMap<(u16, bool), SocketAddr>>,
    /// Guest ports held, by (port, IPv6, socket type): how many sockets hold each (a second
    /// bind is EADDRINUSE, as on Linux, unless it asks for SO_REUSEPORT).
    claims: Mutex<HashMap<(u16, bool, i32), u32>>,
    /// The sandbox's Unix socket names (abstract ones tagged on the host) and credentials.
    pub unix: unix::UnixNamespace,
    /// Host sockets kept from before a restore (a dormant sandbox's published listeners,
    /// inherited across its wake, `docs/design/dormant.md`): the bind of a published port
    /// adopts the one bound to the same host address, with the connections waiting in its
    /// queue, instead of making a new socket. See [`NetPolicy::keep_sockets`].
    kept: Mutex<Vec<OwnedFd>>,
}

impl NetPolicy {
    /// A policy with these published ports.
    pub fn new(publish: Vec<Publish>, allow_outbound: bool) -> NetPolicy {
        NetPolicy {
            publish,
            allow_outbound,
            namespaced: false,
            private_loopback: false,
            bound: Mutex::new(HashMap::new()),
            claims: Mutex::new(HashMap::new()),
            unix: unix::UnixNamespace::new(),
            kept: Mutex::new(Vec::new()),
        }
    }

    /// The policy of a sandbox whose host sockets live in a network namespace of its own:
    /// every bind and connect is the application's own address.
    pub fn namespaced() -> NetPolicy {
        NetPolicy {
            namespaced: true,
            ..NetPolicy::new(Vec::new(), true)
        }
    }

    /// The policy of a holder in a network namespace of its own that holds only a loopback
    /// interface, whose published ports the broker binds in the host's namespace: every other
    /// guest port is the namespace's own port, so Linux's own rules apply to them (conflicts,
    /// `SO_REUSEADDR`, a dual-stack IPv6 listener reached over IPv4).
    pub fn private_loopback(publish: Vec<Publish>) -> NetPolicy {
        NetPolicy {
            private_loopback: true,
            ..NetPolicy::new(publish, false)
        }
    }

    /// Whether the holder's network namespace is the sandbox's own (an engine's, or the
    /// friendly form's private one), not the host's.
    pub fn has_own_namespace(&self) -> bool {
        self.namespaced || self.private_loopback
    }

    /// Whether a bind to guest port `port` binds that very port of the holder's own network
    /// namespace (no translation, no claim: the host's rules apply).
    pub fn port_is_own(&self, port: u16) -> bool {
        self.namespaced
            || (self.private_loopback && !self.publish.iter().any(|p| p.guest_port == port))
    }

    /// The host address to bind for a guest bind to `guest`.
    pub fn bind_target(&self, guest: SocketAddr) -> SocketAddr {
        if self.namespaced {
            return guest;
        }
        if guest.port() != 0 {
            if let Some(p) = self.publish.iter().find(|p| p.guest_port == guest.port()) {
                return p.host;
            }
        }
        let lo = guest_loopback(guest);
        if self.private_loopback {
            // The namespace's own port; an address it does not have stands for its loopback
            // (as every unpublished bind does in the host's namespace).
            let ip = inet::canonical(guest).ip();
            let ip = if ip.is_loopback() || ip.is_unspecified() {
                guest.ip()
            } else {
                lo
            };
            return SocketAddr::new(ip, guest.port());
        }
        SocketAddr::new(lo, 0)
    }

    /// Whether some socket of the sandbox is bound to guest port `guest_port`.
    pub fn is_bound(&self, guest_port: u16) -> bool {
        self.bound
            .lock()
            .map(|b| b.contains_key(&(guest_port, false)) || b.contains_key(&(guest_port, true)))
            .unwrap_or(false)
    }

    /// Records that guest port `guest_port` is served by host address `host` (for sockets of
    /// `host`'s family).
    pub fn record_bind(&self, guest_port: u16, host: SocketAddr) {
        if let Ok(mut b) = self.bound.lock() {
            b.insert((guest_port, host.is_ipv6()), host);
        }
    }

    /// The host address for a guest `connect` to `guest`, or `None` if the policy forbids it.
    pub fn connect_target(&self, guest: SocketAddr) -> Option<SocketAddr> {
        if self.namespaced {
            return Some(guest);
        }
        if guest.ip().is_loopback() || guest.ip().is_unspecified() {
            if self.port_is_own(guest.port()) {
                // A port of the holder's own namespace: as the application named it.
                return Some(guest);
            }
            let b = self.bound.lock().ok()?;
            // The listener of the connecting socket's family first (`::1` reaches the IPv6
            // one, `127.0.0.1` the IPv4 one), else the other family's.
            let v6 = guest.is_ipv6();
            let found = b
                .get(&(guest.port(), v6))
                .or_else(|| b.get(&(guest.port(), !v6)));
            if let Some(h) = found {
                let ip = if h.ip().is_unspecified() {
                    guest_loopback(guest)
                } else {
                    h.ip()
                };
                return Some(SocketAddr::new(ip, h.port()));
            }
            return if self.allow_outbound {
                Some(guest)
            } else {
                None
            };
        }
        self.allow_outbound.then_some(guest)
    }

    /// Whether `target` (a connect's host address) is one of the published host addresses, or
    /// the loopback address of a published wildcard one: the sandbox's own listener there.
    pub fn is_published_target(&self, target: SocketAddr) -> bool {
        let t = inet::canonical(target);
        self.publish.iter().any(|p| {
            let h = inet::canonical(p.host);
            h == t
                || (h.ip().is_unspecified()
                    && h.port() == t.port()
                    && h.is_ipv4() == t.is_ipv4()
                    && t.ip().is_loopback())
        })
    }

    /// The guest port that host port `host_port` stands for, if the application bound it.
    pub fn guest_port_of(&self, host: SocketAddr) -> Option<u16> {
        if self.namespaced {
            return Some(host.port());
        }
        let b = self.bound.lock().ok()?;
        b.iter()
            .find(|(_, h)| h.port() == host.port())
            .map(|((g, _), _)| *g)
    }
}

/// Host sockets handed to a sandbox's network policy when it is built (a dormant sandbox's
/// published listeners, inherited across its wake): shared, so that the configuration that
/// carries them stays cloneable; the first policy built takes them all
/// ([`NetPolicy::keep_sockets`]).
#[derive(Clone, Debug, Default)]
pub struct KeptSockets(std::sync::Arc<Mutex<Vec<OwnedFd>>>);

impl KeptSockets {
    /// These sockets, to be kept.
    pub fn new(sockets: Vec<OwnedFd>) -> KeptSockets {
        KeptSockets(std::sync::Arc::new(Mutex::new(sockets)))
    }

    /// Takes every socket (none are left for a second policy).
    pub fn take(&self) -> Vec<OwnedFd> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl NetPolicy {
    /// Hands the policy host sockets to adopt (see the `kept` field): bound sockets, usually
    /// listening, each taken by the first bind of the sandbox to a published port whose host
    /// address, family, type and `IPV6_V6ONLY` are the socket's.
    pub fn keep_sockets(&self, sockets: Vec<OwnedFd>) {
        self.kept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(sockets);
    }

    /// How many kept sockets no bind has adopted yet.
    pub fn kept_left(&self) -> usize {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The first kept socket `fits` accepts, taken out of the pool.
    pub(crate) fn take_kept(&self, fits: impl Fn(BorrowedFd<'_>) -> bool) -> Option<OwnedFd> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let i = kept.iter().position(|fd| fits(fd.as_fd()))?;
        Some(kept.swap_remove(i))
    }

    /// Whether the sandbox has a network namespace of its own (addresses pass through).
    pub fn is_namespaced(&self) -> bool {
        self.namespaced
    }

    /// Claims guest port `port` for a socket of this family (`v6`) and type; EADDRINUSE when
    /// another socket holds it and `reuse` (SO_REUSEPORT) is not asked. The claim is given
    /// back when the returned [`PortClaim`] goes.
    ///
    /// # Errors
    /// EADDRINUSE.
    pub fn claim(
        self: &std::sync::Arc<Self>,
        port: u16,
        v6: bool,
        kind: i32,
        reuse: bool,
    ) -> Result<PortClaim, abi::Errno> {
        let mut c = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        let n = c.entry((port, v6, kind)).or_insert(0);
        if *n > 0 && !reuse {
            return Err(abi::Errno::EADDRINUSE);
        }
        *n += 1;
        Ok(PortClaim {
            net: self.clone(),
            key: (port, v6, kind),
        })
    }

    /// Forgets that `guest_port` is served by `host` (its socket closed); a later bind of the
    /// port recorded another host address is left alone.
    pub fn release(&self, guest_port: u16, host: SocketAddr) {
        if let Ok(mut b) = self.bound.lock() {
            let key = (guest_port, host.is_ipv6());
            if b.get(&key) == Some(&host) {
                b.remove(&key);
            }
        }
    }
}

/// A guest port's binding, held by the socket that bound it: released from the policy when the
/// last reference to the socket goes away.
#[derive(Debug)]
pub struct PortLease {
    net: std::sync::Arc<NetPolicy>,
    guest_port: u16,
    host: SocketAddr,
}

impl PortLease {
    /// A lease on `guest_port` → `host` in `net`.
    pub fn new(net: std::sync::Arc<NetPolicy>, guest_port: u16, host: SocketAddr) -> PortLease {
        PortLease {
            net,
            guest_port,
            host,
        }
    }
}

impl Drop for PortLease {
    fn drop(&mut self) {
        self.net.release(self.guest_port, self.host);
    }
}

/// One socket's claim on a guest port (see [`NetPolicy::claim`]), given back when it goes.
#[derive(Debug)]
pub struct PortClaim {
    net: std::sync::Arc<NetPolicy>,
    /// (port, IPv6, socket type).
    key: (u16, bool, i32),
}

impl Drop for PortClaim {
    fn drop(&mut self) {
        let mut c = self.net.claims.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = c.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.remove(&self.key);
            }
        }
    }
}

fn guest_loopback(a: SocketAddr) -> IpAddr {
    if a.is_ipv4() {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_passes_addresses_through() {
        let n = NetPolicy::namespaced();
        let a: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert_eq!(n.bind_target(a), a);
        let c: SocketAddr = "10.88.0.1:53".parse().unwrap();
        assert_eq!(n.connect_target(c), Some(c));
        assert_eq!(n.guest_port_of("0.0.0.0:8080".parse().unwrap()), Some(8080));
    }

    #[test]
    fn parse_publish() {
        let p: Publish = "8080:80".parse().unwrap();
        assert_eq!(p.host, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(p.guest_port, 80);
        let p: Publish = "0.0.0.0:9000:8000".parse().unwrap();
        assert_eq!(p.host, "0.0.0.0:9000".parse().unwrap());
        assert!("80".parse::<Publish>().is_err());
        assert!("x:80".parse::<Publish>().is_err());
        assert!("8080:0".parse::<Publish>().is_err());
    }

    #[test]
    fn binds_and_connects() {
        let n = NetPolicy::new(vec!["127.0.0.1:18080:80".parse().unwrap()], false);
        assert_eq!(
            n.bind_target("0.0.0.0:80".parse().unwrap()),
            "127.0.0.1:18080".parse().unwrap()
        );
        assert_eq!(
            n.bind_target("0.0.0.0:81".parse().unwrap()),
            "127.0.0.1:0".parse().unwrap()
        );
        n.record_bind(81, "127.0.0.1:40000".parse().unwrap());
        assert_eq!(
            n.connect_target("127.0.0.1:81".parse().unwrap()),
            Some("127.0.0.1:40000".parse().unwrap())
        );
        assert_eq!(n.connect_target("127.0.0.1:22".parse().unwrap()), None);
        assert_eq!(n.connect_target("10.0.0.1:80".parse().unwrap()), None);
        assert_eq!(
            n.guest_port_of("127.0.0.1:40000".parse().unwrap()),
            Some(81)
        );
    }

    #[test]
    fn a_private_loopback_keeps_unpublished_ports() {
        let n = NetPolicy::private_loopback(vec!["127.0.0.1:18080:80".parse().unwrap()]);
        // Published: the host address (the broker binds it in the host's namespace).
        assert_eq!(
            n.bind_target("[::]:80".parse().unwrap()),
            "127.0.0.1:18080".parse().unwrap()
        );
        assert!(!n.port_is_own(80));
        // Unpublished: the namespace's own port, wildcard and loopback kept.
        for a in ["0.0.0.0:81", "[::]:81", "127.0.0.1:81", "[::1]:0"] {
            let a: SocketAddr = a.parse().unwrap();
            assert_eq!(n.bind_target(a), a);
        }
        assert!(n.port_is_own(81));
        // An address the namespace lacks stands for its loopback.
        assert_eq!(
            n.bind_target("10.1.2.3:82".parse().unwrap()),
            "127.0.0.1:82".parse().unwrap()
        );
        // Connects to its own ports go as named; to a published one through the table.
        let c: SocketAddr = "127.0.0.1:81".parse().unwrap();
        assert_eq!(n.connect_target(c), Some(c));
        n.record_bind(80, "127.0.0.1:18080".parse().unwrap());
        assert_eq!(
            n.connect_target("127.0.0.1:80".parse().unwrap()),
            Some("127.0.0.1:18080".parse().unwrap())
        );
        // Nothing leaves the namespace.
        assert_eq!(n.connect_target("10.0.0.1:80".parse().unwrap()), None);
    }

    #[test]
    fn leases_release_ports() {
        let n = std::sync::Arc::new(NetPolicy::new(vec![], false));
        let host: SocketAddr = "127.0.0.1:40001".parse().unwrap();
        n.record_bind(90, host);
        let lease = PortLease::new(n.clone(), 90, host);
        assert!(n.connect_target("127.0.0.1:90".parse().unwrap()).is_some());
        drop(lease);
        assert_eq!(n.connect_target("127.0.0.1:90".parse().unwrap()), None);
        // A stale lease does not remove a newer binding.
        n.record_bind(90, "127.0.0.1:40002".parse().unwrap());
        drop(PortLease::new(n.clone(), 90, host));
        assert!(n.connect_target("127.0.0.1:90".parse().unwrap()).is_some());
    }
}
