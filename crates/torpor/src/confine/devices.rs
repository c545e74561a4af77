//! A `/dev` of the holder's own: a small tmpfs over `/dev` in its private mount namespace,
//! holding new nodes of the few host devices it opens (`kvm`, `userfaultfd`, `null`, `zero`,
//! `full`, `random`, `urandom`) and a new `devpts` instance for the application's
//! pseudo-terminals.
//!
//! A root holder keeps no capability, but it is still uid 0, the owner of the host's device
//! nodes: `chmod` and `chown` ask for ownership, not for a Landlock right, so a compromised
//! holder could have changed the mode of the host's `/dev/kvm` or `/dev/null` for every other
//! user. Its own nodes reach the same devices, and a change to them stays in its namespace.
//! The application's terminals get a `devpts` of their own too: the host's `/dev/pts` (other
//! users' terminals) is out of reach.
//!
//! Only for a root holder in a private mount namespace of its own ([`crate::cowroot`] records
//! it); a rootless holder owns no host device.

use std::ffi::{CStr, CString};
use std::os::unix::fs::MetadataExt;

use anyhow::{Context, Result};

/// The device nodes the holder opens, as names under `/dev`.
const DEVICES: [&str; 7] = [
    "kvm",
    "userfaultfd",
    "null",
    "zero",
    "full",
    "random",
    "urandom",
];

fn c(path: &str) -> Result<CString> {
    CString::new(path).with_context(|| format!("{path}: NUL in path"))
}

fn check(r: libc::c_int, what: &str) -> Result<()> {
    if r != 0 {
        return Err(std::io::Error::last_os_error()).context(what.to_string());
    }
    Ok(())
}

/// Mounts a `fstype` filesystem (no set-uid, no execution) on `target`.
fn mount(source: &CStr, target: &CStr, fstype: &CStr, data: &CStr) -> Result<()> {
    // SAFETY: valid NUL-terminated strings.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            data.as_ptr().cast(),
        )
    };
    check(r, &format!("mounting {}", target.to_string_lossy()))
}

/// Covers `/dev` with the holder's own (see the module). Returns false when it does not apply
/// (not root, or no private mount namespace).
///
/// # Errors
/// A mount or a node cannot be made.
pub fn make_private_dev() -> Result<bool> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !crate::cowroot::in_private_mount_namespace() {
        return Ok(false);
    }
    // The host's nodes first: what they are, before they are covered.
    let nodes: Vec<(&str, u32, u64, u32, u32)> = DEVICES
        .iter()
        .filter_map(|name| {
            let m = std::fs::metadata(format!("/dev/{name}")).ok()?;
            (m.mode() & libc::S_IFMT == libc::S_IFCHR)
                .then(|| (*name, m.mode(), m.rdev(), m.uid(), m.gid()))
        })
        .collect();
    // A tmpfs over /dev in this process's private mount namespace (MS_PRIVATE: nothing
    // propagates to the host's).
    mount(c"torpor-dev", c"/dev", c"tmpfs", c"mode=0755,size=64k")?;
    for (name, mode, rdev, uid, gid) in nodes {
        let path = c(&format!("/dev/{name}"))?;
        // SAFETY: a valid path; a character device node of the host's own number.
        let r = unsafe { libc::mknod(path.as_ptr(), libc::S_IFCHR | (mode & 0o777), rdev) };
        check(r, &format!("mknod /dev/{name}"))?;
        // The umask may have narrowed the mode; the owner is the host node's.
        // SAFETY: a valid path.
        let r = unsafe { libc::chmod(path.as_ptr(), mode & 0o777) };
        check(r, &format!("chmod /dev/{name}"))?;
        // SAFETY: a valid path.
        let r = unsafe { libc::chown(path.as_ptr(), uid, gid) };
        check(r, &format!("chown /dev/{name}"))?;
    }
    std::fs::create_dir("/dev/pts").context("mkdir /dev/pts")?;
    // A new devpts instance, private to this namespace.
    mount(
        c"devpts",
        c"/dev/pts",
        c"devpts",
        c"newinstance,ptmxmode=0666,mode=0620",
    )?;
    std::os::unix::fs::symlink("pts/ptmx", "/dev/ptmx").context("/dev/ptmx")?;
    Ok(true)
}
