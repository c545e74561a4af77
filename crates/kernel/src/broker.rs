//! File and socket calls the holder is not privileged to make: handed to a broker.
//!
//! A holder started as root keeps no capability once confined (docs/SECURITY.md). It is still
//! uid 0, so it owns and reaches most of a root filesystem (files of root, directories others
//! may search); what it cannot do any more (reach a directory of another user with mode 0700,
//! give a new file to the application's user, change a file it does not own) fails with
//! EACCES or EPERM, and is then asked of the *broker*: a small process of the runtime's that
//! kept the file capabilities (`CAP_CHOWN`, `CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH`,
//! `CAP_FOWNER`, `CAP_FSETID`), confined to the sandbox's root by Landlock and to these calls
//! by its own seccomp filter (`torpor`'s `broker` module). It makes the same call on the
//! descriptors the holder passes it, and nothing else.
//!
//! A friendly-form holder with no outbound access also lives in a network namespace of its own
//! (loopback only: the application's unpublished ports and its own connections stay there);
//! the broker, left in the host's, makes the sockets of its published ports
//! ([`Op::BindInet`]) and connects to them when the application does ([`Op::ConnectInet`]),
//! for those addresses only. [`set_publishes`] turns that on; [`publishes`] tells the socket
//! layer.
//!
//! Each [`Op`] is one host call with its descriptors; the holder makes its own call
//! ([`retry_with`], [`retry_open`]) first, as the task ([`crate::fs::identity`]), and asks the
//! broker only on EACCES or EPERM and only for a task holding file capabilities, which the
//! broker then uses alone (the common path costs nothing; a root application without
//! CAP_DAC_OVERRIDE is held to file modes, an unprivileged one is never helped).

use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use abi::Errno;

/// One file call, as the host makes it; descriptors are the holder's, passed to the broker.
#[derive(Debug)]
pub enum Op<'a> {
    /// `openat2(dir, path, {flags, mode, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS})`: answers
    /// with the new descriptor.
    OpenAt2 {
        /// Directory the path is resolved in (the root).
        dir: BorrowedFd<'a>,
        /// Path, NUL-free.
        path: &'a [u8],
        /// Open flags.
        flags: i32,
        /// Mode for a created file.
        mode: u32,
    },
    /// `mkdirat(dir, name, mode)`.
    MkdirAt {
        /// Parent directory.
        dir: BorrowedFd<'a>,
        /// Name.
        name: &'a [u8],
        /// Mode.
        mode: u32,
    },
    /// `mknodat(dir, name, mode, dev)`.
    MknodAt {
        /// Parent directory.
        dir: BorrowedFd<'a>,
        /// Name.
        name: &'a [u8],
        /// Mode and type.
        mode: u32,
        /// Device number.
        dev: u64,
    },
    /// `unlinkat(dir, name, flags)`.
    UnlinkAt {
        /// Parent directory.
        dir: BorrowedFd<'a>,
        /// Name.
        name: &'a [u8],
        /// `AT_REMOVEDIR` or 0.
        flags: i32,
    },
    /// `renameat2(old_dir, old, new_dir, new, flags)`.
    RenameAt2 {
        /// Source directory.
        old_dir: BorrowedFd<'a>,
        /// Source name.
        old: &'a [u8],
        /// Target directory.
        new_dir: BorrowedFd<'a>,
        /// Target name.
        new: &'a [u8],
        /// `RENAME_*` flags.
        flags: u32,
    },
    /// `linkat(old_dir, old, new_dir, new, flags)`.
    LinkAt {
        /// Source directory (or the file itself, with `AT_EMPTY_PATH`).
        old_dir: BorrowedFd<'a>,
        /// Source name.
        old: &'a [u8],
        /// Target directory.
        new_dir: BorrowedFd<'a>,
        /// Target name.
        new: &'a [u8],
        /// `AT_*` flags.
        flags: i32,
    },
    /// `symlinkat(target, dir, name)`.
    SymlinkAt {
        /// The link's contents.
        target: &'a [u8],
        /// Parent directory.
        dir: BorrowedFd<'a>,
        /// Name.
        name: &'a [u8],
    },
    /// `fchownat(dir, name, uid, gid, flags)` (`name` empty with `AT_EMPTY_PATH`: the file).
    FchownAt {
        /// Directory, or the file itself.
        dir: BorrowedFd<'a>,
        /// Name.
        name: &'a [u8],
        /// Owner.
        uid: u32,
        /// Group.
        gid: u32,
        /// `AT_*` flags.
        flags: i32,
    },
    /// `fchmodat(AT_FDCWD, "/proc/self/fd/<file>", mode, 0)`: works on `O_PATH` descriptors.
    Chmod {
        /// The file.
        file: BorrowedFd<'a>,
        /// Mode.
        mode: u32,
    },
    /// `utimensat(dir, name, times, flags)` (`name` empty: the file itself).
    UtimensAt {
        /// Directory, or the file itself.
        dir: BorrowedFd<'a>,
        /// Name.
        name: &'a [u8],
        /// Access and modification times (`UTIME_NOW`/`UTIME_OMIT` in `tv_nsec` as usual).
        times: [libc::timespec; 2],
        /// `AT_*` flags.
        flags: i32,
    },
    /// `setxattr("/proc/self/fd/<file>", name, value, flags)`.
    SetXattr {
        /// The file.
        file: BorrowedFd<'a>,
        /// Attribute name.
        name: &'a [u8],
        /// Value.
        value: &'a [u8],
        /// `XATTR_CREATE`/`XATTR_REPLACE`.
        flags: i32,
    },
    /// `removexattr("/proc/self/fd/<file>", name)`.
    RemoveXattr {
        /// The file.
        file: BorrowedFd<'a>,
        /// Attribute name.
        name: &'a [u8],
    },
    /// A new Internet socket of the host's network namespace, bound to a published host
    /// address: answers with it.
    BindInet {
        /// `AF_INET` or `AF_INET6`.
        family: i32,
        /// `SOCK_STREAM` or `SOCK_DGRAM`.
        kind: i32,
        /// The published host address.
        addr: SocketAddr,
        /// `IPV6_V6ONLY` (an IPv6 socket only).
        v6only: bool,
        /// `SO_REUSEPORT`.
        reuseport: bool,
    },
    /// A new Internet socket of the host's network namespace, connected to a published host
    /// address (the application's own listener): answers with it.
    ConnectInet {
        /// `AF_INET` or `AF_INET6`.
        family: i32,
        /// `SOCK_STREAM` or `SOCK_DGRAM`.
        kind: i32,
        /// The published host address (its loopback form for a wildcard one).
        addr: SocketAddr,
    },
    /// `bind(socket, "/proc/self/fd/<dir>/<name>")`: a Unix socket's name in a directory.
    BindUnix {
        /// The socket.
        socket: BorrowedFd<'a>,
        /// Parent directory.
        dir: BorrowedFd<'a>,
        /// Name.
        name: &'a [u8],
    },
}

/// Makes [`Op`]s with the privileges the holder dropped.
pub trait Broker: Send + Sync {
    /// Makes `op` with file capabilities `caps` only (bit `c` for capability `c` < 5, of
    /// those the broker keeps: the task's own, [`crate::fs::identity::broker_caps`]): the
    /// descriptor it opened, if any.
    ///
    /// # Errors
    /// The call's errno; EIO if the broker is gone.
    fn call(&self, op: &Op<'_>, caps: u8) -> Result<Option<OwnedFd>, Errno>;
}

static BROKER: OnceLock<Box<dyn Broker>> = OnceLock::new();

/// Whether the broker makes the published ports' sockets (the holder is in a network
/// namespace of its own).
static PUBLISHES: AtomicBool = AtomicBool::new(false);

/// Records that the holder left the host's network namespace: published ports go through the
/// broker from now on.
pub fn set_publishes() {
    PUBLISHES.store(true, Ordering::Relaxed);
}

/// Whether published ports' sockets are the broker's to make.
pub fn publishes() -> bool {
    PUBLISHES.load(Ordering::Relaxed) && installed()
}

/// Asks the broker for a socket: [`Op::BindInet`] or [`Op::ConnectInet`].
///
/// # Errors
/// The broker's errno; EIO without a broker or without an answering descriptor.
pub fn socket(op: &Op<'_>) -> Result<OwnedFd, Errno> {
    call(op)?.ok_or(Errno::EIO)
}

/// Asks the broker for `op` outright (the holder's own attempt failed in a way only the
/// broker's privileges answer).
///
/// # Errors
/// The broker's errno; EIO without a broker.
pub fn call(op: &Op<'_>) -> Result<Option<OwnedFd>, Errno> {
    BROKER
        .get()
        .ok_or(Errno::EIO)?
        .call(op, crate::fs::identity::broker_caps())
}

/// Installs the process's broker (once; a later call is ignored).
pub fn install(broker: Box<dyn Broker>) {
    let _ = BROKER.set(broker);
}

/// Whether a broker is installed.
pub fn installed() -> bool {
    BROKER.get().is_some()
}

/// The result of the holder's own call, or, when that failed for lack of privilege (EACCES,
/// EPERM) and a broker is installed, the broker's answer to `op()`.
///
/// # Errors
/// The holder's errno, or the broker's.
pub fn retry_with<'a, T>(own: Result<T, Errno>, op: impl FnOnce() -> Op<'a>) -> Result<(), Errno> {
    retry(own.map(drop), op, |_| Ok(()))
}

/// As [`retry_with`], the broker's call made with capabilities `means` besides the task's
/// own: those its form of the call needs as a means, not as a right the task must hold (a
/// link by descriptor, `AT_EMPTY_PATH`, takes CAP_DAC_READ_SEARCH).
///
/// # Errors
/// The holder's errno, or the broker's.
pub fn retry_adding<'a, T>(
    own: Result<T, Errno>,
    means: u8,
    op: impl FnOnce() -> Op<'a>,
) -> Result<(), Errno> {
    match own {
        Err(e) if e == Errno::EACCES || e == Errno::EPERM => {
            let caps = crate::fs::identity::broker_caps();
            match BROKER.get() {
                Some(b) if caps != 0 => b.call(&op(), caps | means).map(drop),
                _ => Err(e),
            }
        }
        r => r.map(drop),
    }
}

/// As [`retry_with`], for a call that opens a descriptor.
///
/// # Errors
/// The holder's errno, or the broker's (EIO if the broker answered without a descriptor).
pub fn retry_open<'a>(
    own: Result<OwnedFd, Errno>,
    op: impl FnOnce() -> Op<'a>,
) -> Result<OwnedFd, Errno> {
    retry(own, op, |fd| fd.ok_or(Errno::EIO))
}

fn retry<'a, T>(
    own: Result<T, Errno>,
    op: impl FnOnce() -> Op<'a>,
    answer: impl FnOnce(Option<OwnedFd>) -> Result<T, Errno>,
) -> Result<T, Errno> {
    match own {
        Err(e) if e == Errno::EACCES || e == Errno::EPERM => {
            // Only a task whose capabilities would have overridden the check is answered by
            // the broker, and with those capabilities alone.
            let caps = crate::fs::identity::broker_caps();
            match BROKER.get() {
                Some(b) if caps != 0 => answer(b.call(&op(), caps)?),
                _ => Err(e),
            }
        }
        r => r,
    }
}
