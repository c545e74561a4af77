//! The holder's filesystem view, narrowed with Landlock: once confined, it can open files only
//! beneath the sandbox's root (with its volumes), its state directory, `/dev/kvm` (a fork or
//! execve opens a new VM), `/dev/userfaultfd` (hibernation without CAP_SYS_PTRACE), the
//! harmless character devices the kernel may hand the application, and read its own `/proc`
//! entries and a few host-wide ones (the CPU list of `/sys` is read before,
//! `kernel::fs::procfs::prime_host_files`). Everything else on the host is EACCES, whatever
//! the holder's uid and capabilities.
//!
//! Where Landlock scopes the process (ABI 6, Linux 6.12), the holder also cannot signal a
//! process outside its domain (a holder still uid 0 would otherwise be allowed to signal every
//! root process of the host) nor connect to an abstract Unix socket made outside it (the
//! host's, when the holder shares the host's network namespace).
//!
//! Landlock is an unprivileged LSM (Linux 5.13 and later); without it (an older kernel, or one
//! built without it) the holder runs on with the other layers and says so in its log.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

const SYS_LANDLOCK_CREATE_RULESET: libc::c_long = 444;
const SYS_LANDLOCK_ADD_RULE: libc::c_long = 445;
const SYS_LANDLOCK_RESTRICT_SELF: libc::c_long = 446;
const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;

// Filesystem rights (include/uapi/linux/landlock.h).
const EXECUTE: u64 = 1 << 0;
const WRITE_FILE: u64 = 1 << 1;
const READ_FILE: u64 = 1 << 2;
const READ_DIR: u64 = 1 << 3;
const REMOVE_DIR: u64 = 1 << 4;
const REMOVE_FILE: u64 = 1 << 5;
const MAKE_CHAR: u64 = 1 << 6;
const MAKE_DIR: u64 = 1 << 7;
const MAKE_REG: u64 = 1 << 8;
const MAKE_SOCK: u64 = 1 << 9;
const MAKE_FIFO: u64 = 1 << 10;
const MAKE_BLOCK: u64 = 1 << 11;
const MAKE_SYM: u64 = 1 << 12;
/// ABI 2.
const REFER: u64 = 1 << 13;
/// ABI 3.
const TRUNCATE: u64 = 1 << 14;
/// ABI 5.
const IOCTL_DEV: u64 = 1 << 15;

// Scopes (ABI 6).
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

/// The scopes a Landlock ABI version knows.
fn known_scopes(abi: i64) -> u64 {
    if abi >= 6 {
        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
    } else {
        0
    }
}

/// The rights a Landlock ABI version knows.
fn known_rights(abi: i64) -> u64 {
    let mut r = EXECUTE
        | WRITE_FILE
        | READ_FILE
        | READ_DIR
        | REMOVE_DIR
        | REMOVE_FILE
        | MAKE_CHAR
        | MAKE_DIR
        | MAKE_REG
        | MAKE_SOCK
        | MAKE_FIFO
        | MAKE_BLOCK
        | MAKE_SYM;
    if abi >= 2 {
        r |= REFER;
    }
    if abi >= 3 {
        r |= TRUNCATE;
    }
    if abi >= 5 {
        r |= IOCTL_DEV;
    }
    r
}

/// `struct landlock_ruleset_attr` as of ABI 6 (the kernel takes a shorter one from older
/// callers: its size is passed).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// Everything but executing and making device nodes.
const FULL: u64 = WRITE_FILE
    | READ_FILE
    | READ_DIR
    | REMOVE_DIR
    | REMOVE_FILE
    | MAKE_DIR
    | MAKE_REG
    | MAKE_SOCK
    | MAKE_FIFO
    | MAKE_SYM
    | REFER
    | TRUNCATE;
const READ: u64 = READ_FILE | READ_DIR;
const DEVICE: u64 = READ_FILE | WRITE_FILE | IOCTL_DEV;

/// Restricts the calling process's filesystem access to `trees` (full access beneath each)
/// and the fixed host paths above. Returns false when the kernel has no Landlock.
///
/// # Errors
/// When Landlock is there but the ruleset cannot be built or enforced.
pub fn restrict(trees: &[&Path], executables: &[PathBuf], libraries: &[PathBuf]) -> Result<bool> {
    restrict_with(trees, Some((executables, libraries)), &[])
}

/// Restricts the calling process's filesystem access to `trees` and, for reading only,
/// `read`: a sandbox's file broker (its root alone), the node's (the state root, and `/proc`
/// to check who registers).
///
/// # Errors
/// As [`restrict`].
pub fn restrict_to_trees_reading(trees: &[&Path], read: &[&Path]) -> Result<bool> {
    restrict_with(trees, None, read)
}

/// The host files beside the trees: none (the broker), or the holder's, with the binaries it
/// may execute (a holder that may go dormant: the runtime's own two) and the libraries those
/// load (read only).
type HostFiles<'a> = Option<(&'a [PathBuf], &'a [PathBuf])>;

fn restrict_with(trees: &[&Path], host_files: HostFiles<'_>, read: &[&Path]) -> Result<bool> {
    // SAFETY: the version query takes no pointer.
    let abi = unsafe {
        libc::syscall(
            SYS_LANDLOCK_CREATE_RULESET,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if abi < 1 {
        tracing::warn!("Landlock is not available: the runtime keeps the host's filesystem view");
        return Ok(false);
    }
    let known = known_rights(abi);
    let attr = RulesetAttr {
        handled_access_fs: known,
        handled_access_net: 0,
        scoped: known_scopes(abi),
    };
    // Before ABI 4 the struct ends after the filesystem rights, before ABI 6 after the
    // network ones.
    let size = match abi {
        ..=3 => std::mem::size_of::<u64>(),
        4 | 5 => 2 * std::mem::size_of::<u64>(),
        _ => std::mem::size_of::<RulesetAttr>(),
    };
    // SAFETY: a valid attribute struct and a size no larger than it.
    let fd = unsafe {
        libc::syscall(
            SYS_LANDLOCK_CREATE_RULESET,
            &attr as *const RulesetAttr,
            size,
            0u32,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).context("landlock_create_ruleset");
    }
    // SAFETY: a fresh fd owned by nobody else.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    for t in trees {
        allow(&ruleset, t, FULL & known)?;
    }
    for r in read {
        allow(&ruleset, r, READ & known)?;
    }
    if let Some((executables, libraries)) = host_files {
        allow_host_files(&ruleset, known)?;
        // Executing needs reading the file and its interpreter (the host opens both for
        // execution); the interpreter reads the libraries.
        for exe in executables {
            allow(&ruleset, exe, (EXECUTE | READ_FILE) & known)?;
        }
        for lib in libraries {
            let rights = if is_interpreter(lib) {
                EXECUTE | READ_FILE
            } else {
                READ_FILE
            };
            allow(&ruleset, lib, rights & known)?;
        }
    }
    // SAFETY: the ruleset fd is valid; no flags.
    if unsafe { libc::syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset.as_raw_fd(), 0u32) } != 0 {
        return Err(std::io::Error::last_os_error()).context("landlock_restrict_self");
    }
    Ok(true)
}

/// Whether `path` is an ELF interpreter (`ld-linux*.so*`), which the host opens for
/// execution with the program.
fn is_interpreter(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("ld-linux") || n.starts_with("ld64"))
}

/// The holder's host files: devices (its own, `crate::confine::devices`, for a root holder),
/// a few of `/proc`.
fn allow_host_files(ruleset: &OwnedFd, known: u64) -> Result<()> {
    allow(ruleset, Path::new("/dev/kvm"), DEVICE & known)?;
    allow(ruleset, Path::new("/dev/userfaultfd"), DEVICE & known)?;
    // New pseudo-terminals for the application (openpty: /dev/ptmx, then its /dev/pts peer).
    allow(ruleset, Path::new("/dev/ptmx"), DEVICE & known)?;
    allow(ruleset, Path::new("/dev/pts"), (DEVICE | READ_DIR) & known)?;
    for dev in [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
    ] {
        allow(ruleset, Path::new(dev), (READ_FILE | WRITE_FILE) & known)?;
    }
    // Of /proc, the holder's own entries (`/proc/self` resolves to `/proc/<pid>`, its threads'
    // beneath) and the host-wide files it reads; not other processes' (a process of the same
    // uid reads their `environ` and `cmdline`).
    allow(ruleset, Path::new("/proc/self"), READ & known)?;
    for f in [
        "/proc/meminfo",
        "/proc/cpuinfo",
        "/proc/stat",
        "/proc/uptime",
        "/proc/loadavg",
    ] {
        allow(ruleset, Path::new(f), READ & known)?;
    }
    Ok(())
}

/// Adds "`rights` beneath `path`" to the ruleset; a path that does not exist is skipped.
fn allow(ruleset: &OwnedFd, path: &Path, rights: u64) -> Result<()> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .with_context(|| format!("{}: NUL in path", path.display()))?;
    // SAFETY: a NUL-terminated path; O_PATH opens nothing's contents.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Ok(());
    }
    // SAFETY: a fresh fd owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // A file (not a directory) takes only file rights.
    let is_dir = std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false);
    let rights = if is_dir {
        rights
    } else {
        rights & (READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV | EXECUTE)
    };
    let attr = PathBeneathAttr {
        allowed_access: rights,
        parent_fd: fd.as_raw_fd(),
    };
    // SAFETY: valid ruleset fd and attribute struct of the rule type.
    let r = unsafe {
        libc::syscall(
            SYS_LANDLOCK_ADD_RULE,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("landlock_add_rule {}", path.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_follow_the_abi() {
        assert_eq!(known_scopes(5), 0);
        assert_eq!(known_scopes(6), SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL);
    }

    #[test]
    fn rights_follow_the_abi() {
        assert_eq!(known_rights(1) & REFER, 0);
        assert_ne!(known_rights(2) & REFER, 0);
        assert_ne!(known_rights(5) & IOCTL_DEV, 0);
        assert_eq!(FULL & EXECUTE, 0);
        assert_eq!(FULL & (MAKE_CHAR | MAKE_BLOCK), 0);
    }
}
