//! Internet sockets in a checkpoint: saved by what the application made of them (family,
//! type, options, the address it bound, listening or connected), made again at restore
//! through the sandbox's network policy, as the application's own calls would.
//!
//! Unix sockets without a name are saved too: a pair of the sandbox's own comes back as a
//! new pair holding the stream bytes queued in each direction; one whose peer is gone or
//! outside the sandbox comes back with its peer closed (reads see the end of the stream).
//! Named and listening Unix sockets are not supported yet.
//!
//! A listening socket is bound and listens again (connections waiting in the old backlog
//! are lost: the old holder's exit resets them). A connected TCP socket comes back *reset*:
//! its next read fails with ECONNRESET and poll reports an error, as after the peer vanished
//! (neither the host's connection nor its peer can move to a new process; CRIU's TCP repair
//! needs privileges and the same addresses).

use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
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
    keep: Option<&std::cell::RefCell<Vec<OwnedFd>>>,
    unsupported: &dyn Fn(&str) -> CheckpointError,
) -> Result<OpenFileState, CheckpointError> {
    let fd = file.host();
    match st.family {
        libc::AF_INET | libc::AF_INET6 => {}
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
    // A dormant holder keeps its connections open (a copy, recorded by its number).
    let kept = match keep {
        Some(keep) if connected => {
            let copy = fd
                .try_clone_to_owned()
                .map_err(|e| CheckpointError::Host(format!("keeping a connection: {e}")))?;
            let n = copy.as_raw_fd();
            keep.borrow_mut().push(copy);
            Some(n)
        }
        _ => None,
    };
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
        kept,
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
    /// A kept connection's host descriptor (a dormant holder's wake).
    pub(super) kept: Option<i32>,
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
    if let Some(kept) = s
        .kept
        .filter(|_| s.connected)
        .and_then(|n| net.take_kept(|k| k.as_raw_fd() == n))
    {
        // The very connection, kept open while the sandbox was dormant: bytes its peer sent
        // meanwhile wait in it.
        let file = OpenFile::new(
            kept,
            FileKind::Socket(Mutex::new(SocketState {
                family: s.family,
                kind: s.kind,
                ..SocketState::default()
            })),
            None,
        );
        // SAFETY: F_SETFL on the socket just adopted.
        if unsafe { libc::fcntl(file.host().as_raw_fd(), libc::F_SETFL, s.flags) } < 0 {
            return Err(format!("F_SETFL: {}", std::io::Error::last_os_error()));
        }
        return Ok(file);
    }
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

/// Saves an unnamed Unix socket: its identity and its peer's (`by_ino` holds the sandbox's
/// Unix sockets by host inode), and the stream bytes queued to it, left in place.
pub(super) fn export_unix(
    file: &OpenFile,
    st: &SocketState,
    flags: i32,
    blobs: &mut super::blobs::BlobWriter,
    net: &NetPolicy,
    in_sandbox: &dyn Fn(u64) -> bool,
    unsupported: &dyn Fn(&str) -> CheckpointError,
) -> Result<OpenFileState, CheckpointError> {
    let fd = file.host();
    let id = host::inode(fd).map_err(|e| CheckpointError::Host(format!("fstat: {e}")))?;
    let named = !matches!(net.unix.local_name(id), crate::net::unix::UnixAddr::Unnamed);
    let listening = host::int_opt(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN).unwrap_or(0) != 0;
    if named || listening {
        return Err(unsupported(
            "a named or listening Unix socket (not supported yet)",
        ));
    }
    let connected = host::name(fd, true).is_ok();
    let peer = if connected {
        host::unix_peer_inode(id).filter(|p| in_sandbox(*p))
    } else {
        None
    };
    let queued = peek_queue(fd).map_err(|e| CheckpointError::Host(format!("its queue: {e}")))?;
    if !queued.is_empty() && st.kind != libc::SOCK_STREAM {
        return Err(unsupported(
            "a Unix datagram or seqpacket socket with messages queued (not supported yet)",
        ));
    }
    Ok(OpenFileState::UnixSocket {
        kind: st.kind,
        flags,
        id,
        connected,
        peer,
        queued: blobs.add(&queued),
    })
}

/// The bytes waiting in a socket's receive queue, read with MSG_PEEK (left in place).
fn peek_queue(fd: BorrowedFd<'_>) -> std::io::Result<Vec<u8>> {
    // SAFETY: FIONREAD into a local int.
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) } < 0 || n <= 0 {
        return Ok(Vec::new());
    }
    let mut b = vec![0u8; n as usize];
    // SAFETY: receiving into a buffer we own, without consuming (MSG_PEEK).
    let got = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            b.as_mut_ptr().cast(),
            b.len(),
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    if got < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EAGAIN) {
            return Ok(Vec::new());
        }
        return Err(e);
    }
    b.truncate(got as usize);
    Ok(b)
}

/// One Unix socket of a checkpoint, as the restore makes it.
#[derive(Debug)]
pub(super) struct UnixSocketSpec<'a> {
    /// SOCK_STREAM, SOCK_SEQPACKET or SOCK_DGRAM.
    pub kind: i32,
    /// The status flags (F_SETFL).
    pub flags: i32,
    /// The socket's id in the checkpoint.
    pub id: u64,
    /// Whether it was connected.
    pub connected: bool,
    /// The id of its peer, if the peer was saved too.
    pub peer: Option<u64>,
    /// The bytes queued to it (sent by its peer, not yet read).
    pub queued: &'a [u8],
}

/// Makes the Unix sockets of a checkpoint, by id. A pair whose both ends were saved is one new socket pair, each end's queued bytes
/// written from the other; any other connected socket gets a pair whose other end is closed
/// (after its queued bytes are written); an unconnected one is a fresh socket.
pub(super) fn import_unix(
    sockets: &[UnixSocketSpec<'_>],
    net: &Arc<NetPolicy>,
    owner: crate::net::unix::Ucred,
) -> Result<std::collections::HashMap<u64, OpenFile>, String> {
    use std::collections::HashMap;
    let mut made: HashMap<u64, OpenFile> = HashMap::new();
    let of = |fd: std::os::fd::OwnedFd, kind: i32| -> Result<OpenFile, String> {
        let unix = crate::net::unix::UnixRef::new(net, fd.as_fd(), Some(owner))
            .map_err(|e| format!("registering a Unix socket: {e}"))?;
        Ok(OpenFile::new(
            fd,
            FileKind::Socket(Mutex::new(SocketState {
                family: libc::AF_UNIX,
                kind,
                unix: Some(unix),
                ..SocketState::default()
            })),
            None,
        ))
    };
    let by_id: HashMap<u64, &UnixSocketSpec<'_>> = sockets.iter().map(|s| (s.id, s)).collect();
    for s in sockets {
        let UnixSocketSpec {
            kind,
            id,
            connected,
            peer,
            queued,
            ..
        } = s;
        if made.contains_key(id) {
            continue;
        }
        if !matches!(
            *kind,
            libc::SOCK_STREAM | libc::SOCK_SEQPACKET | libc::SOCK_DGRAM
        ) {
            return Err(format!("a Unix socket of type {kind}"));
        }
        if !connected {
            let fd =
                host::socket(libc::AF_UNIX, *kind, false, 0).map_err(|e| format!("socket: {e}"))?;
            made.insert(*id, of(fd, *kind)?);
            continue;
        }
        let (a, b) = host::socketpair(*kind, false, 0).map_err(|e| format!("socketpair: {e}"))?;
        // Bytes queued to this end were sent from the other.
        write_all(b.as_fd(), queued).map_err(|e| format!("queued bytes: {e}"))?;
        let partner = peer
            .and_then(|p| by_id.get(&p))
            .filter(|p| p.peer == Some(*id));
        match partner {
            Some(p) => {
                write_all(a.as_fd(), p.queued).map_err(|e| format!("queued bytes: {e}"))?;
                let ia = host::inode(a.as_fd()).map_err(|e| e.to_string())?;
                let ib = host::inode(b.as_fd()).map_err(|e| e.to_string())?;
                let (fa, fb) = (of(a, *kind)?, of(b, *kind)?);
                net.unix.note_pair(ia, ib, owner);
                made.insert(*id, fa);
                made.insert(p.id, fb);
            }
            None => {
                made.insert(*id, of(a, *kind)?);
                drop(b);
            }
        }
    }
    for s in sockets {
        if let Some(f) = made.get(&s.id) {
            crate::fd::host::set_status_flags(f.host(), s.flags)
                .map_err(|e| format!("F_SETFL: {e}"))?;
        }
    }
    Ok(made)
}

fn write_all(fd: BorrowedFd<'_>, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: sending from a slice we hold.
        let n = unsafe {
            libc::send(
                fd.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n <= 0 {
            return Err(std::io::Error::last_os_error());
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}
