//! Netlink routing sockets (`AF_NETLINK`, `NETLINK_ROUTE`): how a program lists its network
//! interfaces and addresses (`getifaddrs`, `if_nameindex`, `ip addr`, Node.js's
//! `os.networkInterfaces()`, scoped IPv6 names such as `%lo`).
//!
//! They are the host's own netlink sockets, offered only where the holder's network namespace
//! is the sandbox's ([`NetPolicy::has_own_namespace`]): the friendly form's private namespace,
//! which holds a loopback interface alone, or the one its engine gave an OCI container.
//! There the kernel answers with exactly the interfaces the sandbox has. Changing them
//! (`RTM_NEWADDR`, `RTM_NEWROUTE`...) needs CAP_NET_ADMIN, which the holder does not keep:
//! EPERM, as for an unprivileged container. A holder in the host's namespace (rootless,
//! `--allow-outbound`) would show the host's interfaces: there the family stays unsupported.
//!
//! Addresses (`struct sockaddr_nl`: a port id and multicast groups) pass unchanged: the port
//! ids are the host kernel's, as the messages' `nlmsg_pid` are.
//!
//! The older interface queries, `ioctl`s with a `struct ifreq` on any socket
//! (`SIOCGIFINDEX`, which `if_nametoindex` uses, `SIOCGIFNAME`, `SIOCGIFFLAGS`...), and
//! `SIOCGIFCONF`'s list, follow the same rule ([`is_interface_query`]); in the host's
//! namespace they are ENODEV (the list: empty). So do `/proc/net/dev` and
//! `/proc/net/if_inet6` (`fs::procfs`), which `ifconfig` and Java's `NetworkInterface` read.

use abi::Errno;

use super::host::RawSockAddr;
use super::NetPolicy;

/// `sizeof(struct sockaddr_nl)`.
pub const SOCKADDR_NL_LEN: usize = 12;

/// Whether the sandbox may open netlink routing sockets.
pub fn allowed(net: &NetPolicy) -> bool {
    net.has_own_namespace()
}

/// Checks socket(2)'s type and protocol for `AF_NETLINK`, as Linux's `netlink_create`: raw or
/// datagram sockets; `NETLINK_ROUTE` only (the other protocols are EPROTONOSUPPORT here).
///
/// # Errors
/// ESOCKTNOSUPPORT, EPROTONOSUPPORT.
pub fn check_socket(kind: i32, protocol: i32) -> Result<(), Errno> {
    if kind != libc::SOCK_RAW && kind != libc::SOCK_DGRAM {
        return Err(Errno(libc::ESOCKTNOSUPPORT));
    }
    if protocol != libc::NETLINK_ROUTE {
        return Err(Errno::EPROTONOSUPPORT);
    }
    Ok(())
}

/// A guest `sockaddr_nl` for bind, connect or a send: the family and length checked.
///
/// # Errors
/// EINVAL for a short address or another family.
pub fn decode(raw: &[u8]) -> Result<RawSockAddr, Errno> {
    if raw.len() < SOCKADDR_NL_LEN || super::host::family_of(raw) != libc::AF_NETLINK {
        return Err(Errno::EINVAL);
    }
    Ok(RawSockAddr::from_bytes(&raw[..SOCKADDR_NL_LEN]))
}

/// Whether (level, optname) of a netlink socket is passed through: group membership, strict
/// checking and extended acknowledgements.
pub fn sockopt_allowed(level: i32, name: i32) -> bool {
    level == libc::SOL_NETLINK
        && matches!(
            name,
            libc::NETLINK_ADD_MEMBERSHIP
                | libc::NETLINK_DROP_MEMBERSHIP
                | libc::NETLINK_PKTINFO
                | libc::NETLINK_EXT_ACK
                | libc::NETLINK_GET_STRICT_CHK
                | libc::NETLINK_CAP_ACK
                | libc::NETLINK_NO_ENOBUFS
        )
}

pub use abi::ioctl::{is_interface_query, IFCONF_LEN, IFREQ_LEN, SIOCGIFCONF};

/// The largest `SIOCGIFCONF` buffer filled (the rest of a larger one is left alone).
pub const IFCONF_MAX: usize = 64 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_routing_sockets_of_the_sandbox_s_own_namespace() {
        assert!(check_socket(libc::SOCK_RAW, libc::NETLINK_ROUTE).is_ok());
        assert!(check_socket(libc::SOCK_DGRAM, 0).is_ok());
        assert_eq!(
            check_socket(libc::SOCK_RAW, libc::NETLINK_AUDIT),
            Err(Errno::EPROTONOSUPPORT)
        );
        assert_eq!(
            check_socket(libc::SOCK_STREAM, 0),
            Err(Errno(libc::ESOCKTNOSUPPORT))
        );
        assert!(!allowed(&NetPolicy::new(Vec::new(), true)));
        assert!(allowed(&NetPolicy::namespaced()));
        assert!(allowed(&NetPolicy::private_loopback(Vec::new())));
    }

    #[test]
    fn interface_queries_only_read() {
        assert!(is_interface_query(libc::SIOCGIFINDEX));
        assert!(is_interface_query(libc::SIOCGIFNAME));
        assert!(!is_interface_query(libc::SIOCSIFFLAGS));
        assert!(!is_interface_query(libc::SIOCGIFCONF));
    }

    #[test]
    fn addresses_are_checked() {
        let mut a = [0u8; 12];
        a[..2].copy_from_slice(&(libc::AF_NETLINK as u16).to_le_bytes());
        assert_eq!(decode(&a).map(|r| r.len), Ok(12));
        assert_eq!(decode(&a[..8]).err(), Some(Errno::EINVAL));
        a[0] = libc::AF_INET as u8;
        assert_eq!(decode(&a).err(), Some(Errno::EINVAL));
    }
}
