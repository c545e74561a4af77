//! Internet sockets in a checkpoint: saved by what the application made of them (family,
//! type, options, the address it bound, listening or connected), made again at restore
//! through the sandbox's network policy, as the application's own calls would.
//!
//! A listening socket is bound and listens again (connections waiting in the old backlog
//! are lost: the old holder's exit resets them). A connected TCP socket comes back *reset*:
//! its next read fails with ECONNRESET and poll reports an error, as after the peer vanished
//! (neither the host's connection nor its peer can move to a new process; CRIU's TCP repair
//! needs privileges and the same addresses).

use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::{Arc, Mutex};

use super::state::OpenFileState;
use super::CheckpointError;
use crate::fd::{FileKind, OpenFile, SocketState};
use crate::net::{host, inet, NetPolicy};

/// The options a checkpoint keeps: `(level, name)`, for the kinds they apply to.
fn options(family: i32, kind: i32) -> Vec<(i32, i32)> {
    let mut v = vec![
        (libc::SOL_SOCKET, libc::SO_REUSEADDR),
        (libc::SOL_SOCKET, libc::SO_REUSEPORT),
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE),
        (libc::SOL_SOCKET, libc::SO_BROADCAST),
    ];
    if kind == libc::SOCK_STREAM {
        v.push((libc::IPPROTO_TCP, libc::TCP_NODELAY));
    }
    if family == libc::AF_INET6 {
        v.push((libc::IPPROTO_IPV6, libc::IPV6_V6ONLY));
    }
    v
}

/// Saves an Internet socket (`Err` with what it is for any other family).
pub(super) fn export(
    file: &OpenFile,
    st: &SocketState,
    flags: i32,
    unsupported: &dyn Fn(&str) -> CheckpointError,
) -> Result<OpenFileState, CheckpointError> {
    let fd = file.host();
    match st.family {
        libc::AF_INET | libc::AF_INET6 => {}
        libc::AF_UNIX => return Err(unsupported("a Unix socket (not supported yet)")),
        _ => return Err(unsupported("a netlink socket (not supported yet)")),
    }
    let opt = |level, name| host::int_opt(fd, level, name);
    let protocol = opt(libc::SOL_SOCKET, libc::SO_PROTOCOL).unwrap_or(0);
    let listening = opt(libc::SOL_SOCKET, libc::SO_ACCEPTCONN).unwrap_or(0) != 0;
    let connected = host::name(fd, true).is_ok();
    if connected && st.kind != libc::SOCK_STREAM {
        return Err(unsupported(
            "a connected datagram socket (not supported yet)",
        ));
    }
    let peer = if connected {
        inet::peer_of(file).map(|p| p.to_string())
    } else {
        None
    };
    let options = options(st.family, st.kind)
        .into_iter()
        .filter_map(|(level, name)| opt(level, name).ok().map(|v| [level, name, v]))
        .collect();
    Ok(OpenFileState::InetSocket {
        family: st.family,
        kind: st.kind,
        protocol,
        flags,
        local: st.guest_local.map(|a| a.to_string()),
        listening,
        connected,
        peer,
        options,
    })
}

/// What [`import`] makes a socket from.
pub(super) struct SocketSpec<'a> {
    pub(super) family: i32,
    pub(super) kind: i32,
    pub(super) protocol: i32,
    pub(super) flags: i32,
    pub(super) local: Option<&'a str>,
    pub(super) listening: bool,
    pub(super) connected: bool,
    pub(super) options: &'a [[i32; 3]],
}

/// Makes the socket `s` describes, bound and listening through `net` as the application's
/// calls made it, or reset if it was connected.
pub(super) fn import(s: &SocketSpec<'_>, net: &Arc<NetPolicy>) -> Result<OpenFile, String> {
    if !matches!(s.family, libc::AF_INET | libc::AF_INET6)
        || !matches!(s.kind, libc::SOCK_STREAM | libc::SOCK_DGRAM)
    {
        return Err(format!(
            "a socket of family {} and type {}",
            s.family, s.kind
        ));
    }
    let allowed = options(s.family, s.kind);
    let fd =
        host::socket(s.family, s.kind, false, s.protocol).map_err(|e| format!("socket: {e}"))?;
    for [level, name, v] in s.options {
        if !allowed.contains(&(*level, *name)) {
            return Err(format!("socket option {level}/{name}"));
        }
        host::set_int_opt(fd.as_fd(), *level, *name, *v)
            .map_err(|e| format!("socket option {level}/{name}: {e}"))?;
    }
    let file = OpenFile::new(
        fd,
        FileKind::Socket(Mutex::new(SocketState {
            family: s.family,
            kind: s.kind,
            ..SocketState::default()
        })),
        None,
    );
    if s.connected {
        reset(file.host(), s.family).map_err(|e| format!("a reset connection: {e}"))?;
    } else if let Some(local) = s.local {
        let addr: SocketAddr = local
            .parse()
            .map_err(|_| format!("a local address {local:?}"))?;
        inet::bind_as_guest(net, &file, s.family, addr)
            .map_err(|e| format!("binding {addr} again: {e}"))?;
    }
    if s.listening {
        host::listen(file.host(), host::LISTEN_BACKLOG).map_err(|e| format!("listen: {e}"))?;
    }
    // SAFETY: F_SETFL on the socket we just made.
    if unsafe { libc::fcntl(file.host().as_raw_fd(), libc::F_SETFL, s.flags) } < 0 {
        return Err(format!("F_SETFL: {}", std::io::Error::last_os_error()));
    }
    Ok(file)
}

/// Connects the stream socket `fd` to a loopback listener of its own whose accepted end is
/// closed with a zero linger: `fd` holds a reset connection.
fn reset(fd: BorrowedFd<'_>, family: i32) -> Result<(), abi::Errno> {
    let lo: SocketAddr = if family == libc::AF_INET6 {
        "[::1]:0".parse().map_err(|_| abi::Errno::EINVAL)?
    } else {
        "127.0.0.1:0".parse().map_err(|_| abi::Errno::EINVAL)?
    };
    let listener = host::socket(family, libc::SOCK_STREAM, false, 0)?;
    host::bind(listener.as_fd(), &inet::encode_sockaddr(&lo))?;
    host::listen(listener.as_fd(), 1)?;
    let at = host::name(listener.as_fd(), false)?;
    host::connect(fd, &at)?;
    let (accepted, _) = host::accept4(listener.as_fd(), libc::SOCK_CLOEXEC)?;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt with a local linger struct of the size given.
    unsafe {
        libc::setsockopt(
            accepted.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as u32,
        )
    };
    drop(accepted);
    Ok(())
}
