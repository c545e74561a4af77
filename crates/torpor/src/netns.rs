//! The host network namespace a holder's sockets live in: an OCI bundle's own (joined by
//! path) or a new one with only loopback (a bundle asking for one, or a friendly-form holder
//! without outbound access).

use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;

use anyhow::{Context, Result};

/// Moves this (single-threaded) process into the network namespace at `path`: its host
/// sockets, and so the application's, live there.
///
/// # Errors
/// The namespace cannot be opened or joined.
pub fn join(path: &Path) -> Result<()> {
    let f = std::fs::File::open(path)
        .with_context(|| format!("opening network namespace {}", path.display()))?;
    enter(f.as_fd()).with_context(|| format!("joining network namespace {}", path.display()))
}

/// `setns(ns, CLONE_NEWNET)`: moves the calling thread into the network namespace `ns`.
fn enter(ns: std::os::fd::BorrowedFd<'_>) -> std::io::Result<()> {
    // SAFETY: setns with a namespace descriptor the caller holds and its type.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Moves this process into a new network namespace with its loopback interface up (an OCI
/// bundle asking for one; a friendly-form holder without outbound access, `crate::broker`).
/// Loopback also carries multicast (IFF_MULTICAST, and the route of 224.0.0.0/4 through it):
/// a program that joins a group on the default interface, as on a container's `eth0`, joins
/// it there instead of failing with ENODEV.
///
/// The namespace is owned by a user namespace of its own ([`owned_apart`]), not the host's:
/// the host broadcasts every device event (a KVM VM made or ended: each wake and each
/// dormancy) to the event socket of each network namespace its own user namespace owns, at a
/// cost that grew with the sandboxes on the node (at 10,000 the largest single cost of a
/// stream of wakes). Where the host refuses a user namespace, the holder's own is used.
///
/// # Errors
/// The host's refusal (no CAP_SYS_ADMIN).
pub fn new() -> Result<()> {
    match owned_apart() {
        Ok(ns) => enter(ns.as_fd()).context("joining the new network namespace")?,
        Err(e) => {
            tracing::debug!("a network namespace of the host's user namespace: {e}");
            // SAFETY: unshare with a valid flag.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error())
                    .context("creating a network namespace");
            }
        }
    }
    // Bring `lo` up, with multicast (SIOCGIFFLAGS / SIOCSIFFLAGS on any socket).
    // SAFETY: a plain datagram socket; closed below.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(std::io::Error::last_os_error()).context("socket for lo");
    }
    // SAFETY: a zeroed ifreq with the name set; the ioctls read and write only that struct.
    let r = unsafe {
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            ifr.ifr_name[i] = *b as libc::c_char;
        }
        let mut r = libc::ioctl(s, libc::SIOCGIFFLAGS, &mut ifr);
        if r == 0 {
            ifr.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_MULTICAST) as libc::c_short;
            r = libc::ioctl(s, libc::SIOCSIFFLAGS, &mut ifr);
        }
        let e = std::io::Error::last_os_error();
        if r == 0 {
            add_multicast_route(s);
        }
        libc::close(s);
        (r, e)
    };
    if r.0 != 0 {
        return Err(r.1).context("bringing lo up");
    }
    Ok(())
}

/// Routes IPv4 multicast (224.0.0.0/4) through `lo` (SIOCADDRT on socket `s`). A failure is
/// only logged: multicast then fails as where no interface carries it.
fn add_multicast_route(s: libc::c_int) {
    let inet = |addr: [u8; 4]| {
        // SAFETY: an all-zero sockaddr is valid; the family and address are set below.
        let mut a: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        a.sin_family = libc::AF_INET as libc::sa_family_t;
        a.sin_addr.s_addr = u32::from_ne_bytes(addr);
        // SAFETY: sockaddr_in and sockaddr have the same size and a compatible layout.
        unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(a) }
    };
    let mut dev = *b"lo\0";
    // SAFETY: an all-zero rtentry is valid; the fields SIOCADDRT reads are set below.
    let mut rt: libc::rtentry = unsafe { std::mem::zeroed() };
    rt.rt_dst = inet([224, 0, 0, 0]);
    rt.rt_genmask = inet([240, 0, 0, 0]);
    rt.rt_flags = libc::RTF_UP;
    rt.rt_dev = dev.as_mut_ptr().cast();
    // SAFETY: SIOCADDRT reads one rtentry and the NUL-terminated device name it points at,
    // both alive for the call.
    if unsafe { libc::ioctl(s, libc::SIOCADDRT, &rt) } != 0 {
        tracing::warn!(
            "no multicast route through lo: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// The host user that owns the user namespace of a sandbox's network namespace: `nobody`.
/// Not root: the owner of a user namespace holds every capability over it whatever its
/// own, so a holder (euid 0) owning it would keep `CAP_NET_ADMIN` over its network
/// namespace after dropping its capabilities. Owned by `nobody`, a capability over it is
/// the holder's own in the host's user namespace, as for a namespace of that one. (A
/// process running as `nobody` gains nothing: joining the namespace needs `CAP_SYS_ADMIN`
/// in its own user namespace too, and nothing of it is reachable by path.)
const OWNER_UID: libc::uid_t = 65534;

/// A new network namespace owned by a new user namespace, as an open descriptor: made by a
/// short-lived child that becomes [`OWNER_UID`] and calls `unshare(CLONE_NEWUSER |
/// CLONE_NEWNET)`, whose namespace this process opens before ending it. The user namespace
/// has no ids mapped and nothing lives in it once the child is gone; this process, still
/// privileged, joins the network namespace, brings `lo` up and sets its sysctls with the
/// capabilities it holds in the host's user namespace, and loses them there when it drops
/// them.
///
/// # Errors
/// The host's refusal of the child, of the namespaces (user namespaces disabled or at their
/// limit), or of opening the namespace.
fn owned_apart() -> std::io::Result<std::os::fd::OwnedFd> {
    use std::io::{Error, Read};
    let (mut ready, tell) = std::io::pipe()?;
    // SAFETY: the child makes only async-signal-safe calls (prctl, raw setgroups, setresgid
    // and setresuid of its one thread, unshare, write, pause) until it is killed, as after a
    // fork of a process that may have threads.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: see above; the child never returns into the parent's code.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            let id = OWNER_UID as libc::c_long;
            let made = libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) == 0
                && libc::syscall(libc::SYS_setresgid, id, id, id) == 0
                && libc::syscall(libc::SYS_setresuid, id, id, id) == 0
                && libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) == 0;
            let byte = [u8::from(made)];
            libc::write(tell.as_raw_fd(), byte.as_ptr().cast(), 1);
            loop {
                libc::pause();
            }
        }
    }
    drop(tell);
    let mut byte = [0u8];
    let told = ready.read_exact(&mut byte);
    let ns = match (told, byte[0]) {
        (Ok(()), 1) => std::fs::File::open(format!("/proc/{pid}/ns/net")).map(Into::into),
        (Ok(()), _) => Err(Error::other(
            "the host refused a user and network namespace",
        )),
        (Err(e), _) => Err(e),
    };
    // SAFETY: kill and waitpid of our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    ns
}
