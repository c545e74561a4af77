use super::*;

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
        parse_socket_args(libc::AF_PACKET, libc::SOCK_DGRAM, 0),
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
        Ok(libc::MSG_PEEK | libc::MSG_TRUNC | libc::MSG_CMSG_CLOEXEC)
    );
    // The error queue is the host socket's (EAGAIN when empty, as Linux).
    assert_eq!(
        recv_flags(libc::MSG_ERRQUEUE),
        Ok(libc::MSG_ERRQUEUE | libc::MSG_CMSG_CLOEXEC)
    );
    assert_eq!(recv_flags(libc::MSG_EOR), Err(Errno::EINVAL));
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
fn unix_socket_args() {
    let s = parse_socket_args(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0).unwrap();
    assert_eq!(
        (s.family, s.kind, s.cloexec),
        (libc::AF_UNIX, libc::SOCK_SEQPACKET, true)
    );
    assert_eq!(
        parse_socket_args(libc::AF_UNIX, libc::SOCK_STREAM, 2),
        Err(Errno::EPROTONOSUPPORT)
    );
    assert_eq!(
        parse_socket_args(libc::AF_UNIX, libc::SOCK_RAW, 0).map(|s| s.kind),
        Ok(libc::SOCK_DGRAM)
    );
    assert_eq!(
        parse_socket_args(libc::AF_UNIX, 10, 0), // SOCK_PACKET
        Err(Errno(libc::ESOCKTNOSUPPORT))
    );
}

#[test]
fn msghdr_layout() {
    let mut b = [0u8; MSGHDR_LEN];
    b[0..8].copy_from_slice(&0x1000u64.to_le_bytes());
    b[8..12].copy_from_slice(&16u32.to_le_bytes());
    b[16..24].copy_from_slice(&0x2000u64.to_le_bytes());
    b[24..32].copy_from_slice(&2u64.to_le_bytes());
    b[32..40].copy_from_slice(&0x3000u64.to_le_bytes());
    b[40..48].copy_from_slice(&24u64.to_le_bytes());
    assert_eq!(
        MsgHdr::decode(&b),
        MsgHdr {
            name: Gva(0x1000),
            namelen: 16,
            iov: Gva(0x2000),
            iovlen: 2,
            control: Gva(0x3000),
            controllen: 24
        }
    );
    assert_eq!(std::mem::size_of::<libc::msghdr>(), MSGHDR_LEN);
}
