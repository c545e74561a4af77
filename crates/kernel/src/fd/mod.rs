//! File descriptors: the per-process table and the open files behind it.
//!
//! Every open file is a host fd (a regular file or directory opened inside the root, a host
//! socket, an epoll instance, or one of the runtime's own stdio streams): reads and writes go
//! straight between the host fd and guest memory.

mod hostio;
mod table;

pub use hostio::{iovecs, read_into_guest, write_from_guest};
pub use table::{FdTable, MAX_FDS};

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;

/// What kind of object an open file is.
#[derive(Debug)]
pub enum FileKind {
    /// A regular file, device or FIFO opened from the root.
    Regular,
    /// A directory opened from the root.
    Directory,
    /// One of the runtime's stdio streams, passed through.
    Stdio,
    /// A host socket.
    Socket(Mutex<SocketState>),
    /// A host epoll instance.
    Epoll,
    /// A pidfd on the sandbox's process with this pid (a host eventfd written when it exits).
    Pidfd(i32),
    /// A signalfd (a host eventfd written when a signal of its mask is queued).
    Signalfd(std::sync::Arc<crate::task::signalfd::SignalFd>),
}

/// What the kernel remembers of a socket beyond its host fd.
#[derive(Debug, Default, Clone)]
pub struct SocketState {
    /// Address family.
    pub family: i32,
    /// Socket type (SOCK_STREAM…).
    pub kind: i32,
    /// The address the application bound, as it asked (the host may use another).
    pub guest_local: Option<std::net::SocketAddr>,
    /// The policy's record of that binding, released when the socket is gone.
    pub lease: Option<std::sync::Arc<crate::net::PortLease>>,
    /// Its claim on its guest port (a second bind is EADDRINUSE), given back with it.
    pub claim: Option<std::sync::Arc<crate::net::PortClaim>>,
    /// An AF_UNIX socket's entry in the sandbox's Unix socket registry (its guest name and
    /// credentials), released when the last descriptor of this open file is gone.
    pub unix: Option<std::sync::Arc<crate::net::unix::UnixRef>>,
}

/// An open file description (shared by dup'ed descriptors).
#[derive(Debug)]
pub struct OpenFile {
    fd: OwnedFd,
    /// Its kind.
    pub kind: FileKind,
    /// Guest path it was opened by, if any (for directories: the base of *at calls).
    pub path: Option<Vec<u8>>,
}

impl OpenFile {
    /// Wraps a host fd.
    pub fn new(fd: OwnedFd, kind: FileKind, path: Option<Vec<u8>>) -> OpenFile {
        OpenFile { fd, kind, path }
    }

    /// The host fd.
    pub fn host(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The host fd, owned.
    pub fn owned(&self) -> &OwnedFd {
        &self.fd
    }

    /// Whether it is a socket.
    pub fn is_socket(&self) -> bool {
        matches!(self.kind, FileKind::Socket(_))
    }

    /// A copy of a socket's state (`None` for anything else).
    pub fn socket_state(&self) -> Option<SocketState> {
        match &self.kind {
            FileKind::Socket(m) => Some(m.lock().unwrap_or_else(|e| e.into_inner()).clone()),
            _ => None,
        }
    }
}
