//! The host network namespace a holder's sockets live in: an OCI bundle's own (joined by
//! path) or a new one with only loopback (a bundle asking for one, or a friendly-form holder
//! without outbound access).

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
    use std::os::fd::AsRawFd;
    // SAFETY: setns with a valid namespace fd and its type.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("joining network namespace {}", path.display()));
    }
    Ok(())
}

/// Moves this process into a new network namespace with its loopback interface up (an OCI
/// bundle asking for one; a friendly-form holder without outbound access, `crate::broker`).
///
/// # Errors
/// The host's refusal (no CAP_SYS_ADMIN).
pub fn new() -> Result<()> {
    // SAFETY: unshare with a valid flag.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error()).context("creating a network namespace");
    }
    // Bring `lo` up (SIOCGIFFLAGS / SIOCSIFFLAGS on any socket).
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
            ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            r = libc::ioctl(s, libc::SIOCSIFFLAGS, &mut ifr);
        }
        let e = std::io::Error::last_os_error();
        libc::close(s);
        (r, e)
    };
    if r.0 != 0 {
        return Err(r.1).context("bringing lo up");
    }
    Ok(())
}
