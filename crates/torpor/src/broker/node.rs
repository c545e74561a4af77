//! The node's file broker: one privileged process serving the root holders of every
//! friendly-form sandbox of a state root, in place of one broker per sandbox. A dormant
//! sandbox is then one process (its broker was the second), and a hibernated one has one
//! helper fewer.
//!
//! ```text
//! holder, before it confines itself              torpor-broker --node STATE
//!   connect(STATE/.broker/sock) ───────────────▶   accept: who is it? (SO_PEERCRED,
//!   REGISTER + root fd + published addresses        SO_PEERPIDFD, /proc/PID/status: CAP_SYS_ADMIN
//!   ◀──────────────────────────── 0 / -errno         in the broker's user namespace)
//!   … then each call as to its own broker            the root's mount is the connection's:
//!                                                    every descriptor of every call must be on it
//! ```
//!
//! **Trust.** A connection is bound to one sandbox at its registration, which only a
//! privileged process may make: a holder registers before it drops its capabilities, and a
//! confined (or compromised) holder can neither register again nor name another sandbox's
//! files on its connection. What Landlock to the sandbox's root does for a sandbox's own
//! broker, the mount check does here (`server::on_the_sandboxs_mount`), with Landlock to the
//! state root beneath it. `docs/SECURITY.md` reviews it.
//!
//! **Life.** The first holder that finds no broker starts one (`torpor-broker --node`, which
//! detaches into a session of its own); a lock file makes it the only one. It serves its
//! holders one call at a time (epoll over their connections) and leaves a few seconds after
//! its last holder has gone. A holder keeps its connection through dormancy, as it keeps a
//! broker of its own.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kernel::fd::host as fdhost;

use super::server::{self, Caps, Policy};
use super::wire::{self, code, Request};

/// The broker's directory beneath the state root (hidden: not a sandbox).
const DIR: &str = ".broker";
/// Its listening socket, in [`DIR`].
const SOCKET: &str = "sock";
/// The lock its one instance holds, in [`DIR`].
const LOCK: &str = "lock";
/// Its standard error, in [`DIR`].
const LOG: &str = "log";
/// How long it stays with no holder.
const LINGER: Duration = Duration::from_secs(3);
/// How long a holder waits for a broker it started to listen.
const START_WAIT: Duration = Duration::from_secs(5);

/// `torpor-broker --node STATE`: detaches, then serves the holders of the state root `STATE`
/// until none is left. Never returns.
pub fn main(state: &Path) -> ! {
    // SAFETY: fork of a single-threaded process (the broker binary has started no thread);
    // the parent only exits.
    match unsafe { libc::fork() } {
        -1 => {
            eprintln!(
                "torpor: node broker: fork: {}",
                std::io::Error::last_os_error()
            );
            std::process::exit(1)
        }
        0 => {}
        _ => std::process::exit(0),
    }
    // SAFETY: setsid has no preconditions; the child of a fork is no group leader.
    unsafe { libc::setsid() };
    let code = match serve(state) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("torpor: node broker: {e:#}");
            1
        }
    };
    std::process::exit(code)
}

/// The broker's directory of the state root `state`, made if missing (mode 0700).
fn dir_of(state: &Path) -> Result<PathBuf> {
    let dir = state.join(DIR);
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("chmod {}", dir.display()))?;
    Ok(dir)
}

fn serve(state: &Path) -> Result<()> {
    let dir = dir_of(state)?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(LOG))
        .context("opening the broker's log")?;
    // SAFETY: dup2 of a file we hold onto standard error.
    unsafe { libc::dup2(log.as_raw_fd(), 2) };
    let Some(_lock) = take_lock(&dir.join(LOCK))? else {
        // Another broker serves this state root.
        return Ok(());
    };
    let dir_fd = std::fs::File::open(&dir).context("opening the broker's directory")?;
    let sock_path = socket_path(&dir_fd);
    let _ = std::fs::remove_file(dir.join(SOCKET));
    let listener = listen(&sock_path).context("listening on the broker's socket")?;
    raise_descriptor_limit();
    // SAFETY: umask has no preconditions; the broker is single-threaded.
    unsafe { libc::umask(0) };
    // SAFETY: prctl with a NUL-terminated name of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"torpor-broker".as_ptr(), 0, 0, 0) };
    let own_uid_map = std::fs::read_to_string("/proc/self/uid_map").ok();
    crate::confine::confine_node_broker(state)?;
    let mut caps = Caps::read().map_err(|e| anyhow::anyhow!("capget: {e}"))?;
    let ep = fdhost::epoll_create()
        .map_err(errno)
        .context("epoll_create1")?;
    watch(&ep, listener.as_fd(), LISTENER)?;
    let mut clients: HashMap<RawFd, Client> = HashMap::new();
    let mut alone_since = Some(Instant::now());
    let mut buf = vec![0u8; wire::MAX_REQUEST];
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
    loop {
        // With holders, wait for them; alone, until it is time to leave.
        let timeout = match alone_since {
            Some(t) if t.elapsed() >= LINGER => {
                // No holder left: the next one starts a broker again. The socket goes first,
                // so that no holder connects to a broker that is leaving; the lock file while
                // still held (a broker that locks a file no longer in the directory tries
                // again, `take_lock`); then the directory, if nothing else is in it.
                let _ = std::fs::remove_file(dir.join(SOCKET));
                let _ = std::fs::remove_file(dir.join(LOCK));
                if std::fs::metadata(dir.join(LOG)).is_ok_and(|m| m.len() == 0) {
                    let _ = std::fs::remove_file(dir.join(LOG));
                }
                let _ = std::fs::remove_dir(&dir);
                return Ok(());
            }
            Some(t) => (LINGER - t.elapsed()).as_millis() as i32 + 1,
            None => -1,
        };
        let n = match fdhost::epoll_wait(ep.as_fd(), &mut events, timeout) {
            Ok(n) => n,
            Err(e) if e == abi::Errno::EINTR => 0,
            Err(e) => return Err(errno(e)).context("epoll_wait"),
        };
        for key in events[..n].iter().map(|e| e.u64) {
            if key == LISTENER {
                while let Ok((conn, _)) = kernel::net::host::accept4(
                    listener.as_fd(),
                    libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                ) {
                    watch(&ep, conn.as_fd(), conn.as_raw_fd() as u64)?;
                    clients.insert(
                        conn.as_raw_fd(),
                        Client {
                            sock: conn,
                            policy: None,
                        },
                    );
                }
            } else {
                let fd = key as RawFd;
                let gone = match clients.get_mut(&fd) {
                    Some(c) => !serve_one(c, &mut buf, &mut caps, own_uid_map.as_deref()),
                    None => false,
                };
                if gone {
                    // Closing the connection takes it out of the epoll set.
                    clients.remove(&fd);
                }
            }
        }
        alone_since = match (clients.is_empty(), alone_since) {
            (true, None) => Some(Instant::now()),
            (true, t) => t,
            (false, _) => None,
        };
    }
}

/// The epoll key of the listening socket (a connection's is its descriptor number).
const LISTENER: u64 = u64::MAX;

/// Adds `fd` to the epoll set `ep` for reading, under `key`.
fn watch(ep: &OwnedFd, fd: BorrowedFd<'_>, key: u64) -> Result<()> {
    let ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: key,
    };
    fdhost::epoll_ctl(ep.as_fd(), libc::EPOLL_CTL_ADD, fd, ev)
        .map_err(errno)
        .context("epoll_ctl")
}

/// The host layer's errno as an I/O error.
fn errno(e: abi::Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.0)
}

/// The lock file `path`, locked: `None` if another broker holds it. A lock taken on a file a
/// leaving broker has just removed is no lock: taken again on the file now there.
fn take_lock(path: &Path) -> Result<Option<std::fs::File>> {
    use std::os::unix::fs::MetadataExt;
    loop {
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .context("opening the broker's lock")?;
        if fdhost::flock(lock.as_fd(), libc::LOCK_EX | libc::LOCK_NB).is_err() {
            return Ok(None);
        }
        let held = lock.metadata().context("fstat of the lock")?.ino();
        if std::fs::metadata(path).is_ok_and(|m| m.ino() == held) {
            return Ok(Some(lock));
        }
    }
}

/// One holder's connection, and what it registered.
struct Client {
    sock: OwnedFd,
    policy: Option<Policy>,
}

/// Serves one message of `c`. Returns false when the holder is gone (or broke the protocol).
fn serve_one(c: &mut Client, buf: &mut [u8], caps: &mut Caps, own_uid_map: Option<&str>) -> bool {
    let (n, fds) = match wire::recv(c.sock.as_fd(), buf) {
        Ok((0, _)) => return false,
        Ok(r) => r,
        Err(e) if e.raw_os_error() == Some(libc::EINTR) => return true,
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return true,
        Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
            return server::reply(c.sock.as_fd(), -i64::from(libc::E2BIG), None).unwrap_or(false)
        }
        Err(_) => return false,
    };
    let bytes = &buf[..n];
    let (ret, opened) = match &c.policy {
        None => match admit(c.sock.as_fd(), bytes, fds, own_uid_map) {
            Ok(policy) => {
                c.policy = Some(policy);
                (0, None)
            }
            Err(errno) => {
                // A refused registration ends the connection.
                let _ = server::reply(c.sock.as_fd(), -i64::from(errno), None);
                return false;
            }
        },
        Some(policy) => server::answer(bytes, fds, policy, caps),
    };
    server::reply(c.sock.as_fd(), ret, opened.as_ref()).unwrap_or(false)
}

/// Checks a registration (`bytes`, with the root's descriptor in `fds`) made on `sock`: the
/// peer is privileged in the broker's own user namespace, the descriptor is the root of a
/// mount. Returns the connection's policy.
fn admit(
    sock: BorrowedFd<'_>,
    bytes: &[u8],
    fds: Vec<OwnedFd>,
    own_uid_map: Option<&str>,
) -> Result<Policy, i32> {
    let req = Request::from_bytes(bytes).ok_or(libc::EINVAL)?;
    if req.op != code::REGISTER {
        return Err(libc::EPERM);
    }
    if !peer_is_privileged(sock, own_uid_map) {
        eprintln!("torpor: node broker: refused a registration from an unprivileged process");
        return Err(libc::EPERM);
    }
    let [root] = <[OwnedFd; 1]>::try_from(fds).map_err(|_| libc::EINVAL)?;
    let (mount, is_root) = server::mount_and_root(root.as_fd()).ok_or(libc::EINVAL)?;
    if !is_root {
        // A root that is not a mount of its own shares its mount with the host's files.
        return Err(libc::EXDEV);
    }
    let link = std::fs::read_link(format!("/proc/self/fd/{}", root.as_raw_fd()))
        .map_err(|_| libc::EBADF)?;
    let published = std::str::from_utf8(&req.strs[0])
        .map_err(|_| libc::EINVAL)?
        .split_whitespace()
        .map(|a| a.parse::<SocketAddr>().map_err(|_| libc::EINVAL))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Policy {
        root: link,
        published,
        mount: Some(mount),
    })
}

/// Whether the peer of `sock` has CAP_SYS_ADMIN in this broker's user namespace: a holder
/// before it confines itself, never a confined one (nor a process in a user namespace of its
/// own, whose capabilities are that namespace's: its `uid_map` differs from the broker's,
/// `own_uid_map`, since without CAP_SETUID it maps one id). The pidfd taken with the
/// credentials shows the pid was not reused while its `/proc` files were read.
fn peer_is_privileged(sock: BorrowedFd<'_>, own_uid_map: Option<&str>) -> bool {
    let Some(own_uid_map) = own_uid_map else {
        return false;
    };
    use kernel::net::host;
    // struct ucred: pid, uid, gid.
    let mut cred = [0u8; 12];
    if host::getsockopt(sock, libc::SOL_SOCKET, libc::SO_PEERCRED, &mut cred) != Ok(12) {
        return false;
    }
    let pid = i32::from_ne_bytes([cred[0], cred[1], cred[2], cred[3]]);
    let uid = u32::from_ne_bytes([cred[4], cred[5], cred[6], cred[7]]);
    if uid != 0 || pid <= 0 {
        return false;
    }
    let Ok(pidfd) = host::int_opt(sock, libc::SOL_SOCKET, SO_PEERPIDFD) else {
        return false;
    };
    if pidfd < 0 {
        return false;
    }
    // SAFETY: a fresh descriptor the kernel gave us (SO_PEERPIDFD, Linux 6.5).
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let same_userns =
        std::fs::read_to_string(format!("/proc/{pid}/uid_map")).is_ok_and(|m| m == own_uid_map);
    let privileged = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|eff| eff & (1 << CAP_SYS_ADMIN) != 0);
    // A pidfd is readable once its process has exited.
    let mut pfd = [libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    let now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let alive = fdhost::ppoll(&mut pfd, Some(&now)) == Ok(0);
    same_userns && privileged && alive
}

/// `SO_PEERPIDFD` (Linux 6.5).
const SO_PEERPIDFD: libc::c_int = 77;
/// CAP_SYS_ADMIN's bit.
const CAP_SYS_ADMIN: u32 = 21;

/// A connection to the node broker of state root `state`, starting one if there is none.
///
/// # Errors
/// The broker cannot be started or reached.
pub fn connect_or_start(state: &Path) -> Result<OwnedFd> {
    let deadline = Instant::now() + START_WAIT;
    let mut last_start: Option<Instant> = None;
    loop {
        match connect(state) {
            Ok(sock) => return Ok(sock),
            Err(e) if Instant::now() >= deadline => {
                return Err(e).context("connecting to the node's file broker")
            }
            Err(_) => {}
        }
        // Started again now and then: one that found a leaving broker's lock has left.
        if last_start.is_none_or(|t| t.elapsed() >= Duration::from_millis(500)) {
            start(state)?;
            last_start = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Registers the holder calling this (privileged, before it confines itself) on `sock`, its
/// connection to the node's broker: its sandbox's root is `root` (a mount of its own), its
/// published host addresses `published`. Returns the connection, to install as the holder's
/// broker client.
///
/// # Errors
/// The broker is gone or refuses (a root that is no mount of its own).
pub fn register(sock: OwnedFd, root: &Path, published: &[SocketAddr]) -> Result<OwnedFd> {
    let root_fd = std::fs::File::open(root)
        .with_context(|| format!("opening the root {}", root.display()))?;
    let addrs: Vec<String> = published.iter().map(ToString::to_string).collect();
    let req = Request {
        op: code::REGISTER,
        caps: 0,
        ints: [0; 6],
        strs: [addrs.join(" ").into_bytes(), Vec::new(), Vec::new()],
    }
    .to_bytes();
    try_register(&sock, &req, root_fd.as_raw_fd()).context("registering")?;
    Ok(sock)
}

fn try_register(sock: &OwnedFd, req: &[u8], root: RawFd) -> std::io::Result<()> {
    wire::send(sock.as_fd(), req, &[root])?;
    let mut buf = [0u8; 8];
    let (n, _) = wire::recv(sock.as_fd(), &mut buf)?;
    if n != 8 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let ret = i64::from_le_bytes(buf);
    if ret < 0 {
        return Err(std::io::Error::from_raw_os_error(
            i32::try_from(-ret).unwrap_or(libc::EIO),
        ));
    }
    Ok(())
}

/// Starts a node broker for `state` (`torpor-broker --node STATE`, which detaches at once);
/// one that finds another serving leaves.
fn start(state: &Path) -> Result<()> {
    let Some(binary) = super::binary() else {
        bail!("{} is not installed beside torpor", super::BINARY);
    };
    let mut cmd = std::process::Command::new(binary);
    cmd.arg("--node")
        .arg(state)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let st = cmd.status().context("starting the node's file broker")?;
    if !st.success() {
        bail!("the node's file broker did not start ({st})");
    }
    Ok(())
}

/// `/proc/self/fd/N/sock` for the broker's directory open as `dir` (a socket path fits in
/// `sun_path` however deep the state root is).
fn socket_path(dir: &std::fs::File) -> Vec<u8> {
    format!("/proc/self/fd/{}/{SOCKET}", dir.as_raw_fd()).into_bytes()
}

fn listen(path: &[u8]) -> std::io::Result<OwnedFd> {
    use kernel::net::host;
    let sock = host::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET, true, 0).map_err(errno)?;
    host::bind(sock.as_fd(), &kernel::net::unix::sockaddr(path)).map_err(errno)?;
    host::listen(sock.as_fd(), 1024).map_err(errno)?;
    Ok(sock)
}

fn connect(state: &Path) -> std::io::Result<OwnedFd> {
    use kernel::net::host;
    let dir = std::fs::File::open(state.join(DIR))?;
    let path = socket_path(&dir);
    let sock = host::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET, false, 0).map_err(errno)?;
    host::connect(sock.as_fd(), &kernel::net::unix::sockaddr(&path)).map_err(errno)?;
    Ok(sock)
}

/// The soft limit of open descriptors raised to the hard one: one per holder.
fn raise_descriptor_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
