//! Unix domain sockets (AF_UNIX): host Unix sockets whose names live in the sandbox.
//!
//! Every guest Unix socket is a host Unix socket of the same type, so data, `SCM_RIGHTS`,
//! blocking, `poll`/`epoll` and wake-on-request all come from the host kernel. What this
//! module adds is the naming, which must stay inside the sandbox:
//!
//! - **Pathname addresses** are paths in the sandbox's root, confined like every path. `bind`
//!   resolves the *parent* directory inside the root (an `O_PATH` fd from `openat2` with
//!   `RESOLVE_IN_ROOT`) and binds `/proc/self/fd/<dirfd>/<basename>`: the last component is
//!   created by the host's `mknod`, which never follows a symlink (an existing name, symlink
//!   or not, is `EADDRINUSE`, as on Linux), and the whole name stays short whatever the host
//!   path of the root. A basename too long for that form is bound by its bare name from a
//!   helper thread whose working directory (unshared from the process) is the directory.
//!   `connect` and `sendto` resolve the *whole* path inside the root (following symlinks there,
//!   as Linux's connect does) to an `O_PATH` fd of the socket file and connect to
//!   `/proc/self/fd/<fd>`. Relative paths are joined to the task's working directory.
//! - **Abstract addresses** (`sun_path[0] == 0`) are shared by every process of a host network
//!   namespace, so the host name is the guest's prefixed with a tag unique to the sandbox
//!   (`"\0torpor-<random>/"`). A guest name too long to fit after the tag is replaced by a
//!   128-bit hash of it. Two sandboxes never see each other's abstract names, nor the host's.
//! - **Autobind** (bind with only the family, or a send or connect with `SO_PASSCRED` set on an
//!   unbound socket) picks `"\0" + 5 hex digits` like Linux, bound under the tag.
//! - The **guest view** of every address the host reports (getsockname, getpeername, accept,
//!   recvfrom, recvmsg) is the name the binding guest used, found in the sandbox's registry by
//!   the host name; anything else (a host process's socket) shows as unnamed.
//!
//! The registry ([`UnixNamespace`], one per sandbox, in its [`NetPolicy`]) is keyed by the host
//! socket's inode and also records credentials: all guest processes live in one host
//! process, so the host's `SO_PEERCRED` and `SCM_CREDENTIALS` would name the holder. The
//! registry keeps the guest pid/uid/gid of the task that created, connected, listened on or
//! last sent on each socket, and the peer's credentials when known at connect time;
//! [`peer_credentials`] answers `SO_PEERCRED` as Linux does (the connecting process for an
//! accepted socket, the listening process for a client, the creator for a socketpair), using
//! the host's `sock_diag` interface to find an accepted socket's peer.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

use abi::Errno;

use super::host::{self, family_of, RawSockAddr};
use super::NetPolicy;
use crate::fs::{self, Root};

/// `sizeof(sun_path)`.
pub const SUN_PATH_MAX: usize = 108;
/// `offsetof(struct sockaddr_un, sun_path)`.
const SUN_PATH_OFFSET: usize = 2;
/// Attempts at picking a free autobind name.
const AUTOBIND_TRIES: usize = 1 << 12;

/// A Unix socket address as the guest sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum UnixAddr {
    /// No name (an unbound socket, a socketpair end).
    Unnamed,
    /// A path (without its NUL).
    Path(Vec<u8>),
    /// An abstract name (the bytes after the leading NUL).
    Abstract(Vec<u8>),
}

impl UnixAddr {
    /// Decodes an address passed to bind/connect/sendto, with Linux's checks
    /// (`unix_validate_addr`, `unix_mkname_bsd`): a length of at most the family, more than
    /// `sockaddr_un`, or another family is `EINVAL`; a path ends at its first NUL.
    ///
    /// # Errors
    /// EINVAL as above.
    pub fn decode(b: &[u8]) -> Result<UnixAddr, Errno> {
        if b.len() <= SUN_PATH_OFFSET || b.len() > SUN_PATH_OFFSET + SUN_PATH_MAX {
            return Err(Errno::EINVAL);
        }
        if family_of(b) != libc::AF_UNIX {
            return Err(Errno::EINVAL);
        }
        let p = &b[SUN_PATH_OFFSET..];
        if p[0] == 0 {
            return Ok(UnixAddr::Abstract(p[1..].to_vec()));
        }
        let end = p.iter().position(|&c| c == 0).unwrap_or(p.len());
        Ok(UnixAddr::Path(p[..end].to_vec()))
    }

    /// The `sockaddr_un` bytes Linux reports for it: the family alone when unnamed, the path
    /// with its NUL, or the abstract name with its leading NUL.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = (libc::AF_UNIX as u16).to_le_bytes().to_vec();
        match self {
            UnixAddr::Unnamed => {}
            UnixAddr::Path(p) => {
                v.extend_from_slice(p);
                v.push(0);
            }
            UnixAddr::Abstract(n) => {
                v.push(0);
                v.extend_from_slice(n);
            }
        }
        v
    }
}

/// Credentials as `struct ucred` carries them: guest ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ucred {
    /// Process id (the thread group's).
    pub pid: i32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

impl Ucred {
    /// `sizeof(struct ucred)`.
    pub const SIZE: usize = 12;

    /// What an unconnected socket reports: pid 0, ids -1 (Linux's `cred_to_ucred` of none).
    pub const NONE: Ucred = Ucred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };

    /// `struct ucred` bytes.
    pub fn to_bytes(self) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[0..4].copy_from_slice(&self.pid.to_ne_bytes());
        b[4..8].copy_from_slice(&self.uid.to_ne_bytes());
        b[8..12].copy_from_slice(&self.gid.to_ne_bytes());
        b
    }

    /// Reads `struct ucred` bytes (`None` if too short).
    pub fn from_bytes(b: &[u8]) -> Option<Ucred> {
        let w = |i: usize| -> Option<[u8; 4]> { b.get(i..i + 4)?.try_into().ok() };
        Some(Ucred {
            pid: i32::from_ne_bytes(w(0)?),
            uid: u32::from_ne_bytes(w(4)?),
            gid: u32::from_ne_bytes(w(8)?),
        })
    }
}

/// What the registry knows of one host Unix socket.
#[derive(Debug, Default)]
struct Entry {
    /// Open files of the sandbox referring to the socket.
    refs: usize,
    /// The task that created, connected, listened on or last sent on it.
    owner: Option<Ucred>,
    /// The task that connected or listened (what the other end's `SO_PEERCRED` shows).
    at_connect: Option<Ucred>,
    /// The peer's credentials, when known at connect time (a client, a socketpair end).
    peer: Option<Ucred>,
    /// Its guest name, and the host name it is bound by.
    name: Option<(UnixAddr, Vec<u8>)>,
    /// A pathname binding's parent directory, kept open so that its `/proc/self/fd` name
    /// cannot be reused by another binding while this one lives.
    dir: Option<OwnedFd>,
}

#[derive(Debug, Default)]
struct Registry {
    by_ino: HashMap<u64, Entry>,
    /// Host name (a sun_path, abstract ones with their leading NUL) → inode.
    by_name: HashMap<Vec<u8>, u64>,
}

/// The sandbox's Unix socket names and credentials (see the module doc).
#[derive(Debug)]
pub struct UnixNamespace {
    /// Host abstract-name prefix: `"\0torpor-<12 hex digits>/"`.
    tag: Vec<u8>,
    reg: Mutex<Registry>,
}

impl Default for UnixNamespace {
    fn default() -> UnixNamespace {
        UnixNamespace::new()
    }
}

/// Random bytes from the host (a counter mixed with the time if getrandom fails).
fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: the host writes at most `b.len()` bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == 8 {
        return u64::from_ne_bytes(b);
    }
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = DefaultHasher::new();
    std::time::SystemTime::now().hash(&mut h);
    std::process::id().hash(&mut h);
    COUNTER
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        .hash(&mut h);
    h.finish()
}

/// The host key of an address (the sun_path bytes that name it; empty when unnamed).
fn key_of(a: &UnixAddr) -> Vec<u8> {
    match a {
        UnixAddr::Unnamed => Vec::new(),
        UnixAddr::Path(p) => p.clone(),
        UnixAddr::Abstract(n) => {
            let mut k = vec![0];
            k.extend_from_slice(n);
            k
        }
    }
}

/// A host `sockaddr_un` naming `sun_path` (a path gets its NUL when there is room).
pub fn sockaddr(sun_path: &[u8]) -> RawSockAddr {
    let mut b = (libc::AF_UNIX as u16).to_le_bytes().to_vec();
    b.extend_from_slice(&sun_path[..sun_path.len().min(SUN_PATH_MAX)]);
    if sun_path.first() != Some(&0) && sun_path.len() < SUN_PATH_MAX {
        b.push(0);
    }
    RawSockAddr::from_bytes(&b)
}

impl UnixNamespace {
    /// A namespace with a fresh random tag.
    pub fn new() -> UnixNamespace {
        let tag = format!("\0torpor-{:012x}/", random_u64() & 0xffff_ffff_ffff);
        UnixNamespace {
            tag: tag.into_bytes(),
            reg: Mutex::new(Registry::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.reg.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The host sun_path for guest abstract name `name`: the tag and the name, or the tag and
    /// a 128-bit hash of the name when both do not fit.
    pub fn host_abstract(&self, name: &[u8]) -> Vec<u8> {
        let mut h = self.tag.clone();
        if h.len() + name.len() <= SUN_PATH_MAX {
            h.extend_from_slice(name);
        } else {
            let mut a = DefaultHasher::new();
            (0u8, name).hash(&mut a);
            let mut b = DefaultHasher::new();
            (1u8, name).hash(&mut b);
            h.extend_from_slice(format!("#{:016x}{:016x}", a.finish(), b.finish()).as_bytes());
        }
        h
    }

    /// The guest's view of an address the host reported: the name the binding guest used,
    /// an abstract name under the sandbox's tag without it, unnamed otherwise.
    pub fn guest_view(&self, host_addr: &[u8]) -> UnixAddr {
        let Ok(a) = UnixAddr::decode(host_addr) else {
            return UnixAddr::Unnamed;
        };
        let key = key_of(&a);
        let reg = self.lock();
        if let Some(e) = reg.by_name.get(&key).and_then(|i| reg.by_ino.get(i)) {
            if let Some((g, _)) = &e.name {
                return g.clone();
            }
        }
        match key.strip_prefix(self.tag.as_slice()) {
            Some(rest) if !rest.starts_with(b"#") => UnixAddr::Abstract(rest.to_vec()),
            _ => UnixAddr::Unnamed,
        }
    }

    /// The guest name of the socket with inode `ino`.
    pub fn local_name(&self, ino: u64) -> UnixAddr {
        self.lock()
            .by_ino
            .get(&ino)
            .and_then(|e| e.name.as_ref())
            .map_or(UnixAddr::Unnamed, |(g, _)| g.clone())
    }

    fn register(&self, ino: u64, owner: Option<Ucred>) {
        let mut reg = self.lock();
        let e = reg.by_ino.entry(ino).or_default();
        e.refs += 1;
        if e.owner.is_none() {
            e.owner = owner;
        }
    }

    fn release(&self, ino: u64) {
        let gone = {
            let mut reg = self.lock();
            let Some(e) = reg.by_ino.get_mut(&ino) else {
                return;
            };
            e.refs = e.refs.saturating_sub(1);
            if e.refs > 0 {
                return;
            }
            let e = reg.by_ino.remove(&ino);
            if let Some((_, host)) = e.as_ref().and_then(|e| e.name.as_ref()) {
                if reg.by_name.get(host) == Some(&ino) {
                    reg.by_name.remove(host);
                }
            }
            e
        };
        // The directory fd closes outside the lock.
        drop(gone);
    }

    fn update(&self, ino: u64, f: impl FnOnce(&mut Entry)) {
        if let Some(e) = self.lock().by_ino.get_mut(&ino) {
            f(e);
        }
    }

    /// Records that `cred` sent on the socket (what a receiver's `SCM_CREDENTIALS` shows).
    pub fn note_sender(&self, ino: u64, cred: Ucred) {
        self.update(ino, |e| e.owner = Some(cred));
    }

    /// Records that `cred` listened on the socket.
    pub fn note_listen(&self, ino: u64, cred: Ucred) {
        self.update(ino, |e| {
            e.at_connect = Some(cred);
            e.owner = Some(cred);
        });
    }

    /// Records both ends of a socketpair made by `cred`.
    pub fn note_pair(&self, a: u64, b: u64, cred: Ucred) {
        for ino in [a, b] {
            self.update(ino, |e| {
                e.at_connect = Some(cred);
                e.peer = Some(cred);
            });
        }
    }

    fn set_name(&self, ino: u64, guest: UnixAddr, host: Vec<u8>, dir: Option<OwnedFd>) {
        let mut reg = self.lock();
        if let Some(e) = reg.by_ino.get_mut(&ino) {
            e.name = Some((guest, host.clone()));
            e.dir = dir;
            reg.by_name.insert(host, ino);
        }
    }

    /// Gives an accepted socket its listener's name (what Linux's getsockname reports for
    /// it); the listener keeps the host name's registration.
    pub fn note_accept(&self, listener: u64, accepted: u64) {
        let mut reg = self.lock();
        let name = reg.by_ino.get(&listener).and_then(|e| e.name.clone());
        if let Some(e) = reg.by_ino.get_mut(&accepted) {
            e.name = name;
        }
    }

    fn is_named(&self, ino: u64) -> bool {
        self.lock()
            .by_ino
            .get(&ino)
            .is_some_and(|e| e.name.is_some())
    }

    /// The credentials recorded for the socket bound to the host name of `host_addr`, as its
    /// connect or listen left them.
    fn creds_of_host_name(&self, host_addr: &[u8]) -> Option<Ucred> {
        let key = key_of(&UnixAddr::decode(host_addr).ok()?);
        let reg = self.lock();
        let e = reg.by_ino.get(reg.by_name.get(&key)?)?;
        e.at_connect.or(e.owner)
    }

    fn entry_creds(&self, ino: u64, pick: impl Fn(&Entry) -> Option<Ucred>) -> Option<Ucred> {
        self.lock().by_ino.get(&ino).and_then(pick)
    }
}

/// A Unix socket's place in the registry, held by its open file: dropping the last one
/// forgets the socket (its name, credentials and kept directory fd).
#[derive(Debug)]
pub struct UnixRef {
    net: Arc<NetPolicy>,
    ino: u64,
}

impl UnixRef {
    /// Registers the host socket `fd` (created, accepted or received by a task with `owner`).
    ///
    /// # Errors
    /// The host's errno if the socket cannot be fstat'ed.
    pub fn new(
        net: &Arc<NetPolicy>,
        fd: BorrowedFd<'_>,
        owner: Option<Ucred>,
    ) -> Result<Arc<UnixRef>, Errno> {
        let ino = host::inode(fd)?;
        net.unix.register(ino, owner);
        Ok(Arc::new(UnixRef {
            net: net.clone(),
            ino,
        }))
    }

    /// The host socket's inode.
    pub fn ino(&self) -> u64 {
        self.ino
    }
}

impl Drop for UnixRef {
    fn drop(&mut self) {
        self.net.unix.release(self.ino);
    }
}

/// Where the calling task stands: what a Unix socket operation needs of it.
pub struct Caller<'a> {
    /// The sandbox's network policy (and Unix namespace).
    pub net: &'a Arc<NetPolicy>,
    /// The sandbox's root.
    pub root: &'a Root,
    /// The task's working directory (a guest path).
    pub cwd: Vec<u8>,
    /// The task's file mode creation mask (a bound socket file's mode is `0777 & !umask`).
    pub umask: u32,
    /// The task's guest credentials.
    pub cred: Ucred,
}

/// A host address to connect or send to, with the fd that pins what it names.
pub struct HostTarget {
    /// The host address.
    pub addr: RawSockAddr,
    /// The `O_PATH` fd the address goes through (`/proc/self/fd/N`), if any.
    _pin: Option<OwnedFd>,
}

/// Splits a guest path into its parent and last component (trailing slashes stay with the
/// component, so the host treats them as Linux does).
fn split_parent(path: &[u8]) -> (&[u8], &[u8]) {
    let mut end = path.len();
    while end > 1 && path[end - 1] == b'/' {
        end -= 1;
    }
    match path[..end].iter().rposition(|&c| c == b'/') {
        Some(0) => (&b"/"[..], &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&b"."[..], path),
    }
}

/// Binds `fd` to `base` in the directory `dir`: through `/proc/self/fd/<dir>/<base>`, or by
/// the bare name from a thread whose working directory is `dir` when that does not fit in
/// sun_path. Returns the host name bound.
fn bind_in_dir(fd: BorrowedFd<'_>, dir: &OwnedFd, base: &[u8]) -> Result<Vec<u8>, Errno> {
    let mut via = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
    via.extend_from_slice(base);
    if via.len() < SUN_PATH_MAX {
        let own = host::bind(fd, &sockaddr(&via));
        if own.is_ok() {
            return Ok(via);
        }
        // A directory the confined holder may not write: the broker binds the socket, through
        // its own `/proc/self/fd` name of `dir`, which the host then reports.
        crate::broker::retry_with(own, || crate::broker::Op::BindUnix {
            socket: fd,
            dir: dir.as_fd(),
            name: base,
        })?;
        let bound = host::name(fd, false)?;
        // sun_family (2 bytes), then the path, NUL-terminated or not.
        let path = bound.as_bytes().get(2..).unwrap_or(&[]);
        let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
        return Ok(path[..end].to_vec());
    }
    let dirfd = dir.as_raw_fd();
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: unshare(CLONE_FS) and fchdir take no pointers; only this helper
            // thread's working directory changes, the process's is untouched.
            if unsafe { libc::unshare(libc::CLONE_FS) } != 0 || unsafe { libc::fchdir(dirfd) } != 0
            {
                return Err(Errno::last());
            }
            host::bind(fd, &sockaddr(base))
        })
        .join()
        .unwrap_or(Err(Errno::EIO))
    })?;
    Ok(base.to_vec())
}

/// Implements a guest bind of the socket `fd` (registered as `ino`) to `addr`.
///
/// # Errors
/// The path's resolution errno (ENOENT, ENOTDIR, EACCES…), EADDRINUSE for an existing name,
/// EINVAL for a socket already bound (from the host, in Linux's order).
pub fn bind(c: &Caller<'_>, fd: BorrowedFd<'_>, ino: u64, addr: &UnixAddr) -> Result<(), Errno> {
    let ns = &c.net.unix;
    match addr {
        UnixAddr::Unnamed => autobind(ns, fd, ino),
        UnixAddr::Abstract(n) => {
            let host = ns.host_abstract(n);
            host::bind(fd, &sockaddr(&host))?;
            ns.set_name(ino, addr.clone(), host, None);
            Ok(())
        }
        UnixAddr::Path(p) => {
            let guest = fs::join(&c.cwd, p);
            let (parent, base) = split_parent(&guest);
            let bare: &[u8] = {
                let mut b = base;
                while let Some(r) = b.strip_suffix(b"/") {
                    b = r;
                }
                b
            };
            if bare.is_empty() || bare == b"." || bare == b".." {
                // An existing directory entry, as Linux's mknod finds it.
                return Err(Errno::EADDRINUSE);
            }
            let dir = c
                .root
                .open_at(parent, libc::O_PATH | libc::O_DIRECTORY, 0)?;
            let host = bind_in_dir(fd, &dir, base)?;
            host::chmod_nofollow(&dir, base, 0o777 & !c.umask);
            ns.set_name(ino, addr.clone(), host, Some(dir));
            Ok(())
        }
    }
}

/// Linux's autobind: `"\0" + 5 hex digits`, under the sandbox's tag on the host. A socket
/// already named keeps its name (and the call succeeds, as on Linux).
///
/// # Errors
/// The host's errno; EADDRINUSE if no name is free.
pub fn autobind(ns: &UnixNamespace, fd: BorrowedFd<'_>, ino: u64) -> Result<(), Errno> {
    if ns.is_named(ino) {
        return Ok(());
    }
    let mut n = random_u64();
    for _ in 0..AUTOBIND_TRIES {
        let name = format!("{:05x}", n & 0xfffff).into_bytes();
        let host = ns.host_abstract(&name);
        match host::bind(fd, &sockaddr(&host)) {
            Ok(()) => {
                ns.set_name(ino, UnixAddr::Abstract(name), host, None);
                return Ok(());
            }
            Err(e) if e == Errno::EADDRINUSE => n = n.wrapping_add(1),
            Err(e) => return Err(e),
        }
    }
    Err(Errno::EADDRINUSE)
}

/// Autobinds an unnamed socket that has `SO_PASSCRED` set, as Linux does before a connect or
/// send (so that the host never autobinds it outside the sandbox's tag).
///
/// # Errors
/// As [`autobind`].
pub fn autobind_if_passcred(ns: &UnixNamespace, fd: BorrowedFd<'_>, ino: u64) -> Result<(), Errno> {
    if host::int_opt(fd, libc::SOL_SOCKET, libc::SO_PASSCRED).unwrap_or(0) != 0 {
        autobind(ns, fd, ino)?;
    }
    Ok(())
}

/// The host address for a guest connect or sendto to `addr`: a path resolved entirely inside
/// the root (symlinks followed there) and reached through its `O_PATH` fd, or the tagged
/// abstract name.
///
/// # Errors
/// The path's resolution errno (ENOENT, ELOOP, EACCES…); EINVAL for an unnamed address.
pub fn target(c: &Caller<'_>, addr: &UnixAddr) -> Result<HostTarget, Errno> {
    match addr {
        UnixAddr::Unnamed => Err(Errno::EINVAL),
        UnixAddr::Abstract(n) => Ok(HostTarget {
            addr: sockaddr(&c.net.unix.host_abstract(n)),
            _pin: None,
        }),
        UnixAddr::Path(p) => {
            let guest = fs::join(&c.cwd, p);
            let pin = c.root.open_at(&guest, libc::O_PATH, 0)?;
            let via = format!("/proc/self/fd/{}", pin.as_raw_fd()).into_bytes();
            Ok(HostTarget {
                addr: sockaddr(&via),
                _pin: Some(pin),
            })
        }
    }
}

/// Records a successful connect of the socket `ino` by `cred`: what its peer's
/// `SO_PEERCRED` reports, and (for a connection-oriented socket) the listener's credentials
/// as its own `SO_PEERCRED`.
pub fn note_connect(ns: &UnixNamespace, fd: BorrowedFd<'_>, ino: u64, cred: Ucred, stream: bool) {
    let listener = if stream {
        host::name(fd, true)
            .ok()
            .and_then(|p| ns.creds_of_host_name(p.as_bytes()))
    } else {
        None
    };
    ns.update(ino, |e| {
        e.at_connect = Some(cred);
        e.owner = Some(cred);
        if listener.is_some() {
            e.peer = listener;
        }
    });
}

/// `SO_PEERCRED` of the socket `fd` (inode `ino`) in guest terms (see the module doc).
/// `host_cred` is what the host reported.
pub fn peer_credentials(
    ns: &UnixNamespace,
    fd: BorrowedFd<'_>,
    ino: u64,
    host_cred: Ucred,
) -> Ucred {
    if host_cred.pid == 0 {
        return host_cred;
    }
    if host::int_opt(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN).unwrap_or(0) != 0 {
        if let Some(c) = ns.entry_creds(ino, |e| e.at_connect.or(e.owner)) {
            return c;
        }
    }
    if let Some(c) = ns.entry_creds(ino, |e| e.peer) {
        return c;
    }
    if let Some(c) =
        host::unix_peer_inode(ino).and_then(|p| ns.entry_creds(p, |e| e.at_connect.or(e.owner)))
    {
        return c;
    }
    outside(host_cred)
}

/// Credentials of a host process outside the sandbox: its pid is not in the sandbox's pid
/// space (0, as Linux reports a pid from outside a pid namespace); the holder's own pid means
/// an unknown socket of the sandbox, reported the same way.
fn outside(host_cred: Ucred) -> Ucred {
    Ucred {
        pid: 0,
        ..host_cred
    }
}

/// The guest credentials to show for a message received on socket `ino` whose host
/// `SCM_CREDENTIALS` were `host_cred` and whose source address was `from`: the sandbox task
/// that last sent on the sending socket.
pub fn sender_credentials(ns: &UnixNamespace, ino: u64, from: &[u8], host_cred: Ucred) -> Ucred {
    if u32::try_from(host_cred.pid).ok() != Some(std::process::id()) {
        return outside(host_cred);
    }
    let by_name = (from.len() > SUN_PATH_OFFSET)
        .then(|| {
            let key = key_of(&UnixAddr::decode(from).ok()?);
            let reg = ns.lock();
            reg.by_name.get(&key).copied()
        })
        .flatten();
    let sender = by_name.or_else(|| host::unix_peer_inode(ino));
    sender
        .and_then(|s| ns.entry_creds(s, |e| e.owner))
        .unwrap_or_else(|| outside(host_cred))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn raw(path: &[u8], abs: bool) -> Vec<u8> {
        let mut v = vec![1, 0];
        if abs {
            v.push(0);
        }
        v.extend_from_slice(path);
        v
    }

    #[test]
    fn addresses_decode_and_encode_like_linux() {
        assert_eq!(UnixAddr::decode(&[1, 0]), Err(Errno::EINVAL));
        assert_eq!(UnixAddr::decode(&[]), Err(Errno::EINVAL));
        assert_eq!(
            UnixAddr::decode(&raw(b"x", false)[..]),
            Ok(UnixAddr::Path(b"x".to_vec()))
        );
        let mut inet = raw(b"x", false);
        inet[0] = 2;
        assert_eq!(UnixAddr::decode(&inet), Err(Errno::EINVAL));
        assert_eq!(
            UnixAddr::decode(&raw(b"a\0junk", false)),
            Ok(UnixAddr::Path(b"a".to_vec()))
        );
        assert_eq!(
            UnixAddr::decode(&raw(b"a\0b", true)),
            Ok(UnixAddr::Abstract(b"a\0b".to_vec()))
        );
        assert_eq!(
            UnixAddr::decode(&raw(&[b'p'; 109], false)),
            Err(Errno::EINVAL)
        );
        let full = UnixAddr::decode(&raw(&[b'p'; 108], false)).unwrap();
        assert_eq!(full.encode().len(), 111); // Linux reports 111 for a 108-byte path
        assert_eq!(UnixAddr::Unnamed.encode(), vec![1, 0]);
        assert_eq!(
            UnixAddr::Abstract(b"ab".to_vec()).encode(),
            vec![1, 0, 0, b'a', b'b']
        );
        assert_eq!(
            UnixAddr::Path(b"/s".to_vec()).encode(),
            vec![1, 0, b'/', b's', 0]
        );
    }

    #[test]
    fn parents_split_like_mknod() {
        assert_eq!(split_parent(b"/a/b"), (&b"/a"[..], &b"b"[..]));
        assert_eq!(split_parent(b"/b"), (&b"/"[..], &b"b"[..]));
        assert_eq!(split_parent(b"/a/b/"), (&b"/a"[..], &b"b/"[..]));
        assert_eq!(split_parent(b"b"), (&b"."[..], &b"b"[..]));
        assert_eq!(split_parent(b"/"), (&b"/"[..], &b""[..]));
    }

    #[test]
    fn abstract_names_are_tagged_and_stripped() {
        let a = UnixNamespace::new();
        let b = UnixNamespace::new();
        assert_ne!(a.tag, b.tag);
        let h = a.host_abstract(b"name");
        assert!(h.starts_with(&a.tag) && h.ends_with(b"name"));
        let mut host = vec![1, 0];
        host.extend_from_slice(&h);
        assert_eq!(a.guest_view(&host), UnixAddr::Abstract(b"name".to_vec()));
        // Another sandbox's or the host's names show as unnamed.
        assert_eq!(b.guest_view(&host), UnixAddr::Unnamed);
        assert_eq!(a.guest_view(&raw(b"hostname", true)), UnixAddr::Unnamed);
        let long = a.host_abstract(&[b'x'; 107]);
        assert!(long.len() <= SUN_PATH_MAX);
        assert_ne!(long, a.host_abstract(&[b'y'; 107]));
    }

    #[test]
    fn binds_resolve_inside_the_root_and_report_guest_names() {
        let base = std::env::temp_dir().join(format!("torpor-unix-{}", std::process::id()));
        let root_dir = base.join("root");
        std::fs::create_dir_all(root_dir.join("tmp")).unwrap();
        std::os::unix::fs::symlink("/tmp", root_dir.join("lnk")).unwrap();
        let root = Root::open(&root_dir).unwrap();
        let net = Arc::new(NetPolicy::new(Vec::new(), false));
        let cred = Ucred {
            pid: 7,
            uid: 1,
            gid: 2,
        };
        let c = Caller {
            net: &net,
            root: &root,
            cwd: b"/tmp".to_vec(),
            umask: 0o027,
            cred,
        };
        let srv = host::socket(libc::AF_UNIX, libc::SOCK_STREAM, false, 0).unwrap();
        let sref = UnixRef::new(&net, srv.as_fd(), Some(cred)).unwrap();
        // `..` clamps at the root; the socket lands in ROOT/tmp.
        let a = UnixAddr::Path(b"../../../tmp/s".to_vec());
        bind(&c, srv.as_fd(), sref.ino(), &a).unwrap();
        assert!(root_dir.join("tmp/s").exists());
        let mode = std::fs::symlink_metadata(root_dir.join("tmp/s")).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o750
        );
        assert_eq!(net.unix.local_name(sref.ino()), a);
        assert_eq!(
            bind(&c, srv.as_fd(), sref.ino(), &UnixAddr::Path(b"t".to_vec())),
            Err(Errno::EINVAL)
        );
        host::listen(srv.as_fd(), 4).unwrap();
        net.unix.note_listen(sref.ino(), cred);
        // An existing name (here a symlink) is EADDRINUSE and nothing is followed.
        let other = host::socket(libc::AF_UNIX, libc::SOCK_STREAM, false, 0).unwrap();
        let oref = UnixRef::new(&net, other.as_fd(), None).unwrap();
        assert_eq!(
            bind(
                &c,
                other.as_fd(),
                oref.ino(),
                &UnixAddr::Path(b"/lnk".to_vec())
            ),
            Err(Errno::EADDRINUSE)
        );
        // Through the symlinked directory: /lnk -> /tmp inside the root.
        let t = target(&c, &UnixAddr::Path(b"/lnk/s".to_vec())).unwrap();
        host::connect(other.as_fd(), &t.addr).unwrap();
        let client_cred = Ucred { pid: 9, ..cred };
        note_connect(&net.unix, other.as_fd(), oref.ino(), client_cred, true);
        let peer = host::name(other.as_fd(), true).unwrap();
        assert_eq!(net.unix.guest_view(peer.as_bytes()), a);
        let (acc, from) = host::accept4(srv.as_fd(), libc::SOCK_CLOEXEC).unwrap();
        assert_eq!(net.unix.guest_view(from.as_bytes()), UnixAddr::Unnamed);
        let aref = UnixRef::new(&net, acc.as_fd(), Some(cred)).unwrap();
        let hc = Ucred {
            pid: 1,
            uid: 0,
            gid: 0,
        };
        assert_eq!(
            peer_credentials(&net.unix, acc.as_fd(), aref.ino(), hc),
            client_cred
        );
        assert_eq!(
            peer_credentials(&net.unix, other.as_fd(), oref.ino(), hc),
            cred
        );
        assert_eq!(
            target(&c, &UnixAddr::Path(b"/nope".to_vec())).err(),
            Some(Errno::ENOENT)
        );
        // A long basename is bound from a helper thread.
        let long = vec![b'l'; 100];
        let lsock = host::socket(libc::AF_UNIX, libc::SOCK_DGRAM, false, 0).unwrap();
        let lref = UnixRef::new(&net, lsock.as_fd(), None).unwrap();
        bind(&c, lsock.as_fd(), lref.ino(), &UnixAddr::Path(long.clone())).unwrap();
        assert!(root_dir
            .join("tmp")
            .join(std::str::from_utf8(&long).unwrap())
            .exists());
        // Autobind gives a 5-digit abstract name.
        let auto = host::socket(libc::AF_UNIX, libc::SOCK_DGRAM, false, 0).unwrap();
        let autoref = UnixRef::new(&net, auto.as_fd(), None).unwrap();
        autobind(&net.unix, auto.as_fd(), autoref.ino()).unwrap();
        match net.unix.local_name(autoref.ino()) {
            UnixAddr::Abstract(n) => assert_eq!(n.len(), 5),
            other => panic!("{other:?}"),
        }
        drop(sref);
        assert_eq!(net.unix.guest_view(peer.as_bytes()), UnixAddr::Unnamed);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
