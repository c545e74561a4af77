//! Dormant sandboxes (issue 30; the design is `docs/design/dormant.md`): below hibernated,
//! a sandbox whose holder keeps nothing but what the outside world sees.
//!
//! ```text
//! torpor dormant ID ──▶ holder (daemon::dormant): checkpoint of the paused sandbox into
//!                       DIR/dormant/checkpoint, copies of its published listeners kept,
//!                       DIR/dormant/{status,wake}.json, the sandbox stopped; then the main
//!                       thread execs torpor-dormant (same pid, same cgroup) keeping the
//!                       listeners, the control socket, the janitor's pipes, the broker's socket
//! torpor-dormant    ──▶ one thread: answers state/stats from status.json; a connection, or
//!                       any other verb (left unread), execs `torpor __wake ID ...`
//! torpor __wake     ──▶ (wake) restores DIR/dormant/checkpoint in place: the kept listeners
//!                       adopted with their waiting connections, the same root, janitor and
//!                       broker, the confinement it inherited; the pending request served
//! ```
//!
//! The holder's exec is allowed by its seccomp filter and by Landlock for the runtime's own
//! two binaries only (`crate::confine`); the new images inherit the filters and the Landlock
//! domain, so neither gains anything the holder did not have.

use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// The directory of a dormant sandbox's state, in its state directory.
pub const DIR: &str = "dormant";
/// The checkpoint inside it.
pub const CHECKPOINT: &str = "checkpoint";
/// What `torpor-dormant` answers `state` and `stats` with.
pub const STATUS: &str = "status.json";
/// What the woken holder needs beside the checkpoint ([`WakeRecord`]).
pub const WAKE_RECORD: &str = "wake.json";
/// The dormant process's binary, found beside `torpor`.
pub const DORMANT_BINARY: &str = "torpor-dormant";

/// What a holder going dormant records for its wake, beside the checkpoint (which has the
/// sandbox's own configuration).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WakeRecord {
    /// The root the sandbox sees, as the holder mounted it (the copy-on-write overlay, still
    /// mounted in the holder's mount namespace).
    pub root: PathBuf,
    /// How it hibernates.
    pub wake_mode: hibernate::engine::WakeMode,
    /// `--swap-quota`.
    pub swap_quota: Option<u64>,
    /// `--hibernate-after`, in milliseconds.
    pub hibernate_after_ms: Option<u64>,
    /// `--memory-floor`.
    pub memory_floor: Option<u64>,
    /// `--dormant-after`, in milliseconds.
    #[serde(default)]
    pub dormant_after_ms: Option<u64>,
    /// Whether the broker binds the published ports (the holder lives in a network
    /// namespace of its own).
    pub broker_publishes: bool,
    /// When the sandbox was created (seconds since the epoch).
    pub created: u64,
    /// For an instance started dormant from another sandbox's checkpoint (`run --from DIR
    /// --dormant`): what it has of its own, where the checkpoint's record says the other's.
    #[serde(default)]
    pub instance: Option<Instance>,
    /// For an OCI container, its bundle: the woken holder is the container's again.
    #[serde(default)]
    pub oci_bundle: Option<PathBuf>,
    /// The host files the kernel's generated ones are made from, as the holder read them
    /// before its confinement: the woken holder, confined from its first instruction, takes
    /// them from here (absent in older records: read as far as the confinement lets it).
    #[serde(default)]
    pub host_files: Option<kernel::fs::procfs::HostFiles>,
}

/// What an instance started dormant from a checkpoint has of its own.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instance {
    /// Its published ports, `HOST_IP:HOST_PORT:GUEST_PORT`.
    pub publish: Vec<String>,
    /// Outbound connections allowed.
    pub allow_outbound: bool,
    /// Its node name (`--hostname`), if it has one of its own.
    pub hostname: Option<String>,
}

/// The stats of a dormant sandbox (answered by its dormant process from the figures written
/// when it went dormant) with the dormant process's own memory and CPU time, read here.
pub fn with_own_figures(v: &mut serde_json::Value) {
    if v.get("state").and_then(|s| s.as_str()) != Some("dormant") {
        return;
    }
    let Some(pid) = v.get("pid").and_then(serde_json::Value::as_u64) else {
        return;
    };
    let (pss, rss) = crate::procfs::pss_rss(pid as u32).unwrap_or((0, 0));
    v["pss_bytes"] = pss.into();
    v["holder_pss_bytes"] = pss.into();
    v["rss_bytes"] = rss.into();
    v["cpu_time_us"] = crate::procfs::cpu_time_us(pid as u32).unwrap_or(0).into();
}

/// Sets or clears `FD_CLOEXEC` on `fd`.
///
/// # Errors
/// The host's refusal (a descriptor that is not open).
pub fn set_cloexec(fd: RawFd, on: bool) -> std::io::Result<()> {
    // SAFETY: fcntl on a descriptor number with integer arguments.
    let r = unsafe { libc::fcntl(fd, libc::F_SETFD, if on { libc::FD_CLOEXEC } else { 0 }) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes every descriptor of this process but `keep` (and the standard streams) close on
/// exec, whoever opened it: the dormant process inherits only what it is given.
///
/// # Errors
/// `/proc/self/fd` cannot be listed.
pub fn close_others_on_exec(keep: &[RawFd]) -> Result<()> {
    let fds: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")
        .context("listing /proc/self/fd")?
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect();
    for fd in fds {
        if fd > 2 && !keep.contains(&fd) {
            // The directory's own descriptor is gone by now: EBADF is fine.
            let _ = set_cloexec(fd, true);
        }
    }
    for &fd in keep {
        set_cloexec(fd, false).with_context(|| format!("keeping descriptor {fd}"))?;
    }
    Ok(())
}

/// The binaries a holder may execute (its Landlock rules), in the order of
/// `crate::confine::EXEC_FDS`: `torpor-dormant` (found beside `torpor`), then `torpor`
/// itself. Empty if the runtime's own path cannot be read.
pub fn executables() -> Vec<PathBuf> {
    let Ok(exe) = std::env::current_exe() else {
        return Vec::new();
    };
    match exe.parent() {
        Some(dir) => vec![dir.join(DORMANT_BINARY), exe],
        None => Vec::new(),
    }
}

/// The shared objects this process maps (the C library, the ELF interpreter...): what an
/// exec of the runtime's binaries loads again, which Landlock must let it read.
pub fn shared_objects() -> Vec<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut v: Vec<PathBuf> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.starts_with('/') && p.contains(".so"))
        .map(PathBuf::from)
        .collect();
    v.sort();
    v.dedup();
    v.push(PathBuf::from("/etc/ld.so.cache"));
    v
}

/// Removes a dormant sandbox's state (its checkpoint), as its holder's death or `delete`
/// does.
pub fn remove_state(dir: &Path) {
    let _ = crate::cowroot::remove_all(&dir.join(DIR));
    let _ = crate::cowroot::remove_all(&dir.join(format!("{DIR}.tmp")));
    let _ = crate::cowroot::remove_all(&dir.join(format!("{DIR}.old")));
}

/// Reads the wake record of the dormant sandbox whose state directory is `dir`.
///
/// # Errors
/// A missing or corrupt record.
pub fn read_record(dir: &Path) -> Result<WakeRecord> {
    let path = dir.join(DIR).join(WAKE_RECORD);
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("corrupt {}", path.display()))
}
