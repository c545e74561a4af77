//! File descriptors: the per-process table and the open files behind it.
//!
//! Every open file is a host fd (a regular file or directory opened inside the root, a host
//! socket, pipe, eventfd, timerfd, inotify or epoll instance, a pseudo-terminal, or one of
//! the runtime's own stdio streams): reads and writes go straight between the host fd and
//! guest memory. Its [`FileKind`] says which, as the kernel created it, so that everything
//! that must know what a descriptor is (mmap, ioctl, a checkpoint) asks the kind, not the
//! host.

pub mod dnotify;
pub mod host;
mod hostio;
pub mod lease;
pub mod locks;
pub mod owner;
mod table;

pub use hostio::{
    iovecs, read_into_guest, read_into_guest_flags, write_from_guest, write_from_guest_flags,
    RwFlags,
};
pub use table::{FdTable, MAX_FDS};

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;

/// What kind of object an open file is.
#[derive(Debug)]
pub enum FileKind {
    /// A regular file, FIFO or device node opened from the root (also a file received from
    /// outside the sandbox that the kernel cannot tell apart).
    Regular,
    /// One end of a pipe made by pipe(2).
    Pipe,
    /// An eventfd.
    EventFd {
        /// Made with EFD_SEMAPHORE.
        semaphore: bool,
    },
    /// A timerfd.
    TimerFd,
    /// An inotify instance.
    Inotify,
    /// A memfd: an unlinked `O_TMPFILE` file in the root.
    Memfd,
    /// A pseudo-terminal the guest opened: the master (its `/dev/ptmx`) or that master's
    /// slave.
    Pty {
        /// The master side.
        master: bool,
    },
    /// A file of the runtime's own `/proc`.
    ProcFile,
    /// One of the harmless host character devices (`/dev/null`, `/dev/zero`, `/dev/full`,
    /// `/dev/random`, `/dev/urandom`) given when the root has no `/dev` of its own.
    HostDevice,
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
    /// A POSIX message queue descriptor (a host eventfd carrying the queue's readiness).
    Mqueue(std::sync::Arc<crate::ipc::mqueue::MqFile>),
    /// An io_uring instance (a host epoll instance carrying its readiness: see
    /// [`crate::io_uring`]).
    IoUring(std::sync::Arc<Ring>),
}

impl FileKind {
    /// Whether mmap(2) may map it (Linux answers ENODEV for the others).
    pub fn is_mappable(&self) -> bool {
        matches!(
            self,
            FileKind::Regular | FileKind::Memfd | FileKind::HostDevice | FileKind::ProcFile
        )
    }

    /// The kind of a descriptor received from elsewhere (SCM_RIGHTS), from the host's name
    /// of it (`/proc/self/fd/N`'s link) when it is no path in the root.
    pub fn from_host_link(link: &std::ffi::OsStr) -> Option<FileKind> {
        let link = link.as_encoded_bytes();
        Some(match link {
            _ if link.starts_with(b"pipe:[") => FileKind::Pipe,
            b"anon_inode:[eventfd]" => FileKind::EventFd { semaphore: false },
            b"anon_inode:[timerfd]" => FileKind::TimerFd,
            b"anon_inode:inotify" => FileKind::Inotify,
            b"anon_inode:[eventpoll]" => FileKind::Epoll,
            _ => return None,
        })
    }
}

/// An io_uring instance of the kernel's open files.
pub type Ring = crate::io_uring::IoUring<OpenFile>;

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
    /// Its owner and signal for signal-driven I/O ([`owner`]).
    pub sigio: owner::SigIo,
    /// The open that made it created its file (`F_CREATED_QUERY`).
    created: bool,
}

impl OpenFile {
    /// Wraps a host fd.
    pub fn new(fd: OwnedFd, kind: FileKind, path: Option<Vec<u8>>) -> OpenFile {
        OpenFile {
            fd,
            kind,
            path,
            sigio: owner::SigIo::default(),
            created: false,
        }
    }

    /// Marks it as made by an open that created its file.
    pub fn created_by_open(mut self) -> OpenFile {
        self.created = true;
        self
    }

    /// Whether the open that made it created its file (fcntl `F_CREATED_QUERY`).
    pub fn created(&self) -> bool {
        self.created
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn link_of(fd: &impl AsRawFd) -> std::path::PathBuf {
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap()
    }

    #[test]
    fn received_host_objects_are_told_apart() {
        let (r, _w) = std::io::pipe().unwrap();
        assert!(matches!(
            FileKind::from_host_link(link_of(&r).as_os_str()),
            Some(FileKind::Pipe)
        ));
        // SAFETY: plain host calls creating fresh descriptors owned below.
        let (efd, tfd, ifd, ep) = unsafe {
            (
                libc::eventfd(0, libc::EFD_CLOEXEC),
                libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC),
                libc::inotify_init1(libc::IN_CLOEXEC),
                libc::epoll_create1(libc::EPOLL_CLOEXEC),
            )
        };
        let own = |fd: i32| {
            assert!(fd >= 0);
            // SAFETY: a fresh descriptor owned by nobody else.
            unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }
        };
        let (efd, tfd, ifd, ep) = (own(efd), own(tfd), own(ifd), own(ep));
        let kind = |fd: &OwnedFd| FileKind::from_host_link(link_of(fd).as_os_str());
        assert!(matches!(kind(&efd), Some(FileKind::EventFd { .. })));
        assert!(matches!(kind(&tfd), Some(FileKind::TimerFd)));
        assert!(matches!(kind(&ifd), Some(FileKind::Inotify)));
        assert!(matches!(kind(&ep), Some(FileKind::Epoll)));
        // A path is not a host object of its own.
        let f = std::fs::File::open("/dev/null").unwrap();
        assert!(kind(&f.into()).is_none());
    }

    #[test]
    fn only_files_map() {
        assert!(FileKind::Regular.is_mappable());
        assert!(FileKind::Memfd.is_mappable());
        assert!(FileKind::HostDevice.is_mappable());
        assert!(!FileKind::Pipe.is_mappable());
        assert!(!FileKind::EventFd { semaphore: true }.is_mappable());
        assert!(!FileKind::Directory.is_mappable());
    }
}
