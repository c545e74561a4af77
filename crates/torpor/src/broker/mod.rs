//! The file broker of a root holder: a small process that kept the file capabilities the
//! holder drops, and makes for it the file calls those capabilities are needed for
//! (`kernel::broker` says which and when).
//!
//! ```text
//! holder (uid 0, no capabilities)                 broker (`torpor __broker`)
//!   own call fails with EACCES/EPERM                 CAP_CHOWN, CAP_DAC_OVERRIDE,
//!   Client::call(op) ── SOCK_SEQPACKET ──────────▶   CAP_DAC_READ_SEARCH, CAP_FOWNER,
//!     request + its descriptors (SCM_RIGHTS)         CAP_FSETID; Landlock: the root only;
//!   ◀──────────── 0 / -errno (+ opened fd) ───────   seccomp: these calls only
//! ```
//!
//! The holder starts it before confining itself: `torpor-broker FD PARENT ROOT [ADDR...]`, a
//! small binary installed beside `torpor` (about 0.15 MiB of memory of its own, whatever the
//! holder does later). Without that binary, a plain fork while the holder is still
//! single-threaded (its memory then stays the holder's, shared copy-on-write, until the holder
//! goes dormant: then about 1.2 MiB is the broker's alone), else `torpor __broker FD PARENT
//! ROOT [ADDR...]`, an exec of the whole runtime (about 1.5 MiB). It ends with its holder, at
//! its socket's end of file. Calls are serialised on one
//! socket: they are the uncommon path (a directory of another user, a file given to the
//! application's user), each a round trip of a few tens of microseconds.

pub mod node;
mod server;
pub mod wire;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Mutex;

use abi::Errno;
use anyhow::{Context, Result};
use kernel::broker::{Broker, Op};

pub use server::main as serve;

/// Whether this process has one thread (then a fork needs no exec).
fn single_threaded() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.strip_prefix("Threads:").is_some_and(|n| n.trim() == "1"))
    })
}

/// The subcommand the broker runs as when its own binary is missing (not a user verb: `main`
/// dispatches it before parsing).
pub const SUBCOMMAND: &str = "__broker";

/// The broker's own binary, installed beside `torpor`.
pub const BINARY: &str = "torpor-broker";

/// The broker's own binary beside this executable, if it is there.
pub(crate) fn binary() -> Option<std::path::PathBuf> {
    let path = std::env::current_exe().ok()?.with_file_name(BINARY);
    path.is_file().then_some(path)
}

/// The holder's end of the broker's socket.
pub struct Client {
    sock: Mutex<OwnedFd>,
}

impl Broker for Client {
    fn call(&self, op: &Op<'_>, caps: u8) -> Result<Option<OwnedFd>, Errno> {
        let (req, fds) = wire::encode(op, caps);
        let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
        let sock = self.sock.lock().unwrap_or_else(|e| e.into_inner());
        let gone = |what: &str| {
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| {
                tracing::error!(
                    "the file broker is gone ({what}): privileged file calls fail with EIO"
                )
            });
            Errno::EIO
        };
        // A signal (the kicks of vCPU threads) interrupts either call: the request goes once,
        // its answer is waited for again.
        let bytes = req.to_bytes();
        loop {
            match wire::send(sock.as_fd(), &bytes, &raw) {
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                r => break r.map(|_| ()).map_err(|e| gone(&e.to_string()))?,
            }
        }
        let mut buf = [0u8; 8];
        let (n, mut got) = loop {
            match wire::recv(sock.as_fd(), &mut buf) {
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                r => break r.map_err(|e| gone(&e.to_string()))?,
            }
        };
        if n != 8 {
            return Err(gone("a short answer"));
        }
        let ret = i64::from_le_bytes(buf);
        if ret < 0 {
            let e = i32::try_from(-ret).unwrap_or(libc::EIO);
            return Err(Errno(e));
        }
        Ok(got.pop())
    }
}

/// The holder's end of its broker's socket, once installed: kept open across a holder's exec
/// into dormancy ([`client_fd`]) and adopted again by the woken holder ([`adopt`]).
static CLIENT_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// Installs `sock` as the kernel's broker client.
fn install(sock: OwnedFd) {
    CLIENT_FD.store(sock.as_raw_fd(), std::sync::atomic::Ordering::SeqCst);
    kernel::broker::install(Box::new(Client {
        sock: Mutex::new(sock),
    }));
}

/// The descriptor of this holder's end of its broker's socket, if it has a broker.
pub fn client_fd() -> Option<i32> {
    let fd = CLIENT_FD.load(std::sync::atomic::Ordering::SeqCst);
    (fd >= 0).then_some(fd)
}

/// Installs the broker a holder had before its exec (dormancy and its wake): `sock` is its
/// end of the broker's socket, which stayed open.
pub fn adopt(sock: OwnedFd) {
    install(sock);
}

/// The connection to the node's broker made before the holder's root was mounted
/// ([`connect_node`]), waiting for [`start_if_root`] to register on it.
static NODE: Mutex<Option<OwnedFd>> = Mutex::new(None);

/// Connects this root holder to the node's file broker of state root `state` (starting one if
/// there is none), to register with once its root is mounted ([`start_if_root`]): called
/// while the holder is still in the mount namespace it was started in, which a broker it
/// starts then shares (not the holder's own, which would outlive the holder in it).
/// `TORPOR_NODE_BROKER=0` keeps a broker per sandbox; so does any failure here (logged).
pub fn connect_node(state: &Path) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || std::env::var("TORPOR_NODE_BROKER").as_deref() == Ok("0")
    {
        return;
    }
    match node::connect_or_start(state) {
        Ok(sock) => *NODE.lock().unwrap_or_else(|e| e.into_inner()) = Some(sock),
        Err(e) => tracing::warn!("the node's file broker: {e:#}; starting one for this sandbox"),
    }
}

/// Starts the broker of a root holder (nothing for a rootless one, which has no capability
/// to hand over) of the sandbox `cfg`, or registers it with the node's broker it connected to
/// ([`connect_node`]); then, for a friendly-form sandbox without outbound access, moves the
/// holder into a network namespace of its own (loopback only), leaving its published ports
/// to the broker. `TORPOR_NETNS=0` keeps the host's network namespace.
///
/// # Errors
/// As [`start`]; the namespace cannot be made.
pub fn start_if_root(cfg: &kernel::SandboxConfig) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    let own_netns = !cfg.allow_outbound
        && !cfg.own_netns
        && std::env::var("TORPOR_NETNS").as_deref() != Ok("0");
    let published: Vec<std::net::SocketAddr> = if own_netns {
        cfg.publish.iter().map(|p| p.host).collect()
    } else {
        Vec::new()
    };
    let node = NODE.lock().unwrap_or_else(|e| e.into_inner()).take();
    match node.map(|sock| node::register(sock, &cfg.rootfs, &published)) {
        Some(Ok(sock)) => install(sock),
        Some(Err(e)) => {
            tracing::warn!("the node's file broker: {e:#}; starting one for this sandbox");
            start(&cfg.rootfs, &published)?;
        }
        None => start(&cfg.rootfs, &published)?,
    }
    if own_netns {
        crate::netns::new()?;
        // The application's unpublished ports are this namespace's own: any of them, as in a
        // container, for a holder that keeps no capability (its published ones are bound by
        // the broker, which keeps CAP_NET_BIND_SERVICE).
        std::fs::write("/proc/sys/net/ipv4/ip_unprivileged_port_start", "0")
            .context("opening the private namespace's low ports")?;
        kernel::broker::set_publishes();
    }
    Ok(())
}

/// Starts the broker of a holder whose sandbox root is `root` (and whose published host
/// addresses are `published`, when the broker makes their sockets), and installs its client
/// for the kernel's calls.
///
/// # Errors
/// The socket pair or the process cannot be made.
pub fn start(root: &Path, published: &[std::net::SocketAddr]) -> Result<()> {
    let (ours, theirs) = crate::fdpass::seqpacket_pair().context("broker socket pair")?;
    let child_fd = theirs.as_raw_fd();
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    let own_binary = binary();
    if own_binary.is_none() && single_threaded() {
        // A plain fork: the broker's memory stays the holder's, shared copy-on-write while
        // the holder runs (but all its own once the holder has gone dormant).
        // SAFETY: the process has one thread, so the child may run any code; it only closes
        // descriptors, serves, and leaves with _exit.
        match unsafe { libc::fork() } {
            -1 => return Err(std::io::Error::last_os_error()).context("forking the broker"),
            0 => {
                drop(ours);
                // Nothing of the holder's but its socket and stderr.
                // SAFETY: close_range over descriptor numbers; `theirs` and 2 stay.
                unsafe {
                    libc::syscall(libc::SYS_close_range, 0u32, 1u32, 0u32);
                    libc::syscall(libc::SYS_close_range, 3u32, (child_fd - 1) as u32, 0u32);
                    libc::syscall(libc::SYS_close_range, (child_fd + 1) as u32, u32::MAX, 0u32);
                }
                let code = server::forked(theirs, parent, root, published.to_vec());
                // SAFETY: leaving the child without the holder's exit handlers.
                unsafe { libc::_exit(code) }
            }
            _ => {
                drop(theirs);
                install(ours);
                return Ok(());
            }
        }
    }
    let mut cmd = match own_binary {
        Some(path) => std::process::Command::new(path),
        None => {
            let mut c = std::process::Command::new("/proc/self/exe");
            c.arg(SUBCOMMAND);
            c
        }
    };
    cmd.arg(child_fd.to_string())
        .arg(parent.to_string())
        .arg(root)
        .args(published.iter().map(|a| a.to_string()));
    // SAFETY: between fork and exec only async-signal-safe calls: fcntl to let the broker's
    // end of the socket survive the exec, close of the standard input and output (nothing of
    // the holder's but its socket and stderr, as a forked broker; no /dev/null needed, which
    // a host's /dev may lack).
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            if libc::fcntl(child_fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(0);
            libc::close(1);
            Ok(())
        });
    }
    let child = cmd.spawn().context("starting the file broker")?;
    drop(theirs);
    // The broker is reaped by whoever reaps the holder's children (it ends with the holder).
    std::mem::forget(child);
    install(ours);
    Ok(())
}
