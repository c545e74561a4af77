//! Where sandboxes keep their state: one directory per sandbox (mode 0700) under a base
//! directory, holding the control socket, the `pid` file, the output log of detached runs and
//! the swap and REAP files.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The base directory: `$TORPOR_STATE_DIR`, else `/var/lib/torpor` for root, else
/// `$XDG_STATE_HOME/torpor` or `~/.local/state/torpor`. It holds swap files, so it must be on
/// disk, not on a tmpfs such as /run.
pub fn base_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TORPOR_STATE_DIR") {
        return PathBuf::from(d);
    }
    // SAFETY: no preconditions.
    let uid = unsafe { libc::getuid() };
    if uid == 0 {
        return PathBuf::from("/var/lib/torpor");
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME") {
        return PathBuf::from(d).join("torpor");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".local/state/torpor");
    }
    PathBuf::from(format!("/tmp/torpor-{uid}"))
}

/// Checks a sandbox ID: 1-64 of `[A-Za-z0-9_.-]`, not starting with `.` or `-`.
pub fn check_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('.')
        && !id.starts_with('-')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if !ok {
        bail!("invalid sandbox ID {id:?}: use 1-64 letters, digits, '_', '.' or '-', not starting with '.' or '-'");
    }
    Ok(())
}

/// The ID `--name` gives (checked), or a new random one.
///
/// # Errors
/// As [`check_id`].
pub fn id_or_new(name: Option<&str>) -> Result<String> {
    match name {
        Some(n) => {
            check_id(n)?;
            Ok(n.to_string())
        }
        None => Ok(new_id()),
    }
}

/// A fresh random ID (12 hex digits).
pub fn new_id() -> String {
    let mut b = [0u8; 6];
    // SAFETY: `b` is writable for its length.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        b.copy_from_slice(&(t as u64 ^ u64::from(std::process::id())).to_le_bytes()[..6]);
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The directory of sandbox `id`.
pub fn dir_of(id: &str) -> Result<PathBuf> {
    check_id(id)?;
    Ok(base_dir().join(id))
}

/// Creates the base directory and the sandbox's own directory; fails if the ID is taken by a
/// live sandbox, and clears the leftovers of a dead one.
pub fn create(id: &str) -> Result<PathBuf> {
    let base = base_dir();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&base)
        .with_context(|| format!("creating state directory {}", base.display()))?;
    sweep_now_and_then(&base);
    let dir = dir_of(id)?;
    if dir.exists() {
        if owner_alive(&dir) || (crate::oci::state::is_oci(&dir) && !dir.join("pid").exists()) {
            bail!("a sandbox named {id:?} already exists");
        }
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("removing stale {}", dir.display()))?;
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// Writes the pid file of the process holding the sandbox. A file that already says so (a
/// dormant holder woken in place keeps its pid) is left alone: truncating it frees its block,
/// which a file system mounted with `discard` hands to the disk before the call returns (a
/// wait for the device in every dormant wake, seen with `perf sched` on this machine's disk).
pub fn write_pid(dir: &Path, pid: u32) -> Result<()> {
    let p = dir.join("pid");
    if read_pid(dir) == i32::try_from(pid).ok() {
        return Ok(());
    }
    std::fs::write(&p, format!("{pid}\n"))?;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

/// The pid recorded in a sandbox directory.
pub fn read_pid(dir: &Path) -> Option<i32> {
    std::fs::read_to_string(dir.join("pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether process `pid` exists and has not ended (a zombie waiting for its parent to reap
/// it has ended: a detached holder's parent may be slow to do so).
pub fn pid_alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks for existence.
    let exists = pid > 0
        && (unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM));
    exists && !is_zombie(pid)
}

/// Whether `/proc/PID/stat` says the process is a zombie (state `Z`) or dead (`X`).
fn is_zombie(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may hold anything.
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .is_some_and(|s| s == "Z" || s == "X")
}

/// Whether the process that owns `dir` is alive (a directory without a pid file yet counts as
/// alive for a few seconds: its owner is starting).
pub fn owner_alive(dir: &Path) -> bool {
    match read_pid(dir) {
        Some(pid) => pid_alive(pid),
        None => std::fs::metadata(dir)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age.as_secs() < 10),
    }
}

/// The last `lines` lines of a detached sandbox's output log (`output.log` in its directory:
/// what its holder wrote on stdout and stderr), read from at most its last 4 KiB; `None` if
/// there is no log or nothing in it.
pub fn output_tail(dir: &Path, lines: usize) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    const MAX: u64 = 4 << 10;
    let mut f = std::fs::File::open(dir.join("output.log")).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(MAX))).ok()?;
    let mut bytes = Vec::new();
    f.take(MAX).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.trim_end().lines().collect();
    // A line cut by the 4 KiB window is left out, unless it is all there is.
    let whole = if len > MAX && all.len() > 1 {
        &all[1..]
    } else {
        &all[..]
    };
    let tail = whole[whole.len().saturating_sub(lines)..].join("\n");
    (!tail.trim().is_empty()).then_some(tail)
}

/// Removes the directories of sandboxes whose owner process is gone (swap files included),
/// and the page files of stopped OCI containers.
pub fn cleanup_orphans(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        // Hidden directories are the runtime's own (the keep-alive registry, the node's file
        // broker), not sandboxes.
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        if !e.file_type().is_ok_and(|t| t.is_dir()) || owner_alive(&p) {
            continue;
        }
        if crate::oci::state::is_oci(&p) {
            // A stopped OCI container's state stays until `delete` (its engine reads its exit
            // status), but not its page files: an OCI holder has no janitor to remove them at
            // its death.
            let freed = hibernate::engine::remove_page_files(&p);
            if freed > 0 {
                tracing::info!("removed {freed} bytes of page files of {}", p.display());
            }
        } else {
            tracing::info!("removing orphaned sandbox state {}", p.display());
            let _ = std::fs::remove_dir_all(&p);
        }
    }
}

/// The stamp whose time is that of the last sweep a start made ([`sweep_now_and_then`]).
const SWEPT: &str = ".swept";
/// How often a start sweeps the base directory for orphans at most.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// [`cleanup_orphans`] of `base`, unless a start did it less than [`SWEEP_EVERY`] ago: a
/// sweep reads every sandbox's pid file, so one per start made starting the N-th sandbox
/// O(N) (about 95 ms at 3,000 sandboxes, most of a start). `list` and a verb naming a dead
/// sandbox still clean up at once.
fn sweep_now_and_then(base: &Path) {
    let stamp = base.join(SWEPT);
    let recent = std::fs::metadata(&stamp)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age < SWEEP_EVERY);
    if recent {
        return;
    }
    let _ = std::fs::write(&stamp, b"");
    cleanup_orphans(base);
}

/// IDs of the sandboxes under the base directory, sorted.
pub fn list_ids() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(base_dir())
        .map(|r| {
            r.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|name| !name.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(check_id("web-1_a.b").is_ok());
        assert!(check_id("").is_err());
        assert!(check_id("../etc").is_err());
        assert!(check_id(".hidden").is_err());
        assert!(check_id("-x").is_err());
        assert!(check_id(&"a".repeat(65)).is_err());
        assert!(check_id("a/b").is_err());
        assert_eq!(new_id().len(), 12);
    }

    #[test]
    fn output_tail_is_the_last_lines_of_the_log() {
        let dir = std::env::temp_dir().join(format!("torpor-tail-{}", new_id()));
        std::fs::create_dir(&dir).unwrap();
        assert_eq!(output_tail(&dir, 3), None, "no log");
        std::fs::write(dir.join("output.log"), "\n\n").unwrap();
        assert_eq!(output_tail(&dir, 3), None, "nothing in it");
        std::fs::write(dir.join("output.log"), "a\nb\nc\nd\n").unwrap();
        assert_eq!(output_tail(&dir, 3).as_deref(), Some("b\nc\nd"));
        assert_eq!(output_tail(&dir, 9).as_deref(), Some("a\nb\nc\nd"));
        // A long log: only its end is read, and the line the window cuts is left out.
        let long: String = (0..1000)
            .map(|i| format!("line {i:04} of the log\n"))
            .collect();
        std::fs::write(dir.join("output.log"), &long).unwrap();
        let tail = output_tail(&dir, 1000).unwrap();
        assert!(tail.ends_with("line 0999 of the log"), "{tail}");
        assert!(
            tail.lines()
                .all(|l| l.starts_with("line ") && l.len() == 20),
            "{tail}"
        );
        assert!(tail.len() < 4096);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
