//! The holder's side of going dormant (`crate::dormancy`): the `dormant` request writes the
//! sandbox's state into `DIR/dormant/` and stops the sandbox; the main thread, once the
//! sandbox's run has returned, execs `torpor-dormant` with the descriptors the outside world
//! sees.

use std::os::fd::{IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;

use anyhow::{Context, Result};
use hibernate::state::State;
use serde_json::json;

use super::{Daemon, PARK_TIMEOUT};
use crate::control::Response;
use crate::dormancy::{self, WakeRecord};
use crate::janitor::Janitor;

/// What the main thread needs to exec the dormant process: the published listeners and the
/// connections kept.
pub(super) struct Prepared {
    listeners: Vec<OwnedFd>,
    connections: Vec<OwnedFd>,
}

/// Whether a sandbox held as `holding` on `platform` can go dormant at all (its holder is then
/// confined so that it can exec its dormant process).
pub(super) fn possible(
    oci: bool,
    holding: &super::Holding,
    platform: &std::sync::Arc<dyn platform::Platform>,
) -> bool {
    (oci || matches!(holding, super::Holding::Detached { .. })) && platform.name() == "kvm"
}

/// Why this sandbox cannot go dormant, if it cannot.
fn refusal(d: &Daemon) -> Option<String> {
    if !d.detached && !d.oci {
        return Some("a sandbox in the foreground cannot go dormant (start it with run -d)".into());
    }
    if d.platform.name() != "kvm" {
        return Some(format!(
            "the {} platform cannot go dormant yet: its woken holder could not make the stub \
             factory without the holder's seccomp filter (docs/design/dormant.md)",
            d.platform.name()
        ));
    }
    if d.exit.lock().map(|e| e.is_some()).unwrap_or(true) {
        return Some("the sandbox has stopped".into());
    }
    if d.attached.load(Ordering::Relaxed) > 0 {
        return Some("a terminal is attached (exec -t): the sandbox stays hot".into());
    }
    if !crate::confine::exec_allowed() {
        return Some(format!(
            "this holder's confinement does not let it exec its dormant process ({} beside \
             torpor, and Landlock to allow only that)",
            dormancy::DORMANT_BINARY
        ));
    }
    None
}

/// The `dormant` request: checkpoints the sandbox into `DIR/dormant/` (a hibernated one
/// without a wake, from its deflated state; a running one after a deflate), keeps its
/// published listeners, and records what the dormant process answers. The sandbox is
/// stopped once the answer is out ([`stop_after_answer`]).
pub(super) fn prepare(d: &Daemon) -> Response {
    if let Some(why) = refusal(d) {
        return Response::error(why);
    }
    match try_prepare(d) {
        Ok(p) => {
            *d.dormancy.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
            Response::ok()
        }
        Err(e) => {
            dormancy::remove_state(&d.dir);
            // The checkpoint left the sandbox paused: it carries on (hibernated still, if it
            // was: its next request wakes it).
            if d.hib.is_paused() {
                let _ = d.hib.resume();
            }
            Response::error(format!("{e:#}"))
        }
    }
}

fn try_prepare(d: &Daemon) -> Result<Prepared> {
    let record = WakeRecord {
        host_files: Some(kernel::fs::procfs::host_files()),
        root: d.root.clone(),
        wake_mode: d.mode,
        swap_quota: d.policy.swap_quota,
        hibernate_after_ms: d.policy.hibernate_after.map(|t| t.as_millis() as u64),
        memory_floor: d.policy.memory_floor,
        dormant_after_ms: d.policy.dormant_after.map(|t| t.as_millis() as u64),
        broker_publishes: kernel::broker::publishes(),
        created: d.created,
        instance: None,
        oci_bundle: d.oci.then(|| d.bundle.clone()),
    };
    let mut status = status(&d.id, &d.bundle, d.created, d.platform.name(), d.mode);
    if d.oci {
        // To the engine a dormant container is running (it wakes by itself); `stats` says
        // dormant.
        status["state"] =
            crate::oci::state::status_json(&d.dir, &d.id, "running", Some(std::process::id()));
    }
    let mut kept = None;
    write_state(&d.dir, &record, &status, |checkpoint| {
        // A hibernated sandbox's checkpoint is written from its deflated state (it is not
        // woken); a running one's after a deflate.
        let (_, k) = d
            .hib
            .checkpoint_for_dormancy(checkpoint.to_path_buf(), d.record.clone(), PARK_TIMEOUT)
            .map_err(|e| anyhow::anyhow!("checkpointing the sandbox: {e}"))?;
        kept = Some(k);
        Ok(())
    })?;
    let kept = kept.unwrap_or_default();
    Ok(Prepared {
        // A container's listeners are all its own, in the engine's namespace (no published
        // ports: the pod's address is the container's).
        listeners: if d.oci {
            kept.listeners
        } else {
            published_only(kept.listeners, &d.published)
        },
        connections: kept.connections,
    })
}

/// Of `listeners`, those bound to one of the `published` host addresses: a listener the
/// application bound for itself is made again by the restore (inside a private namespace, a
/// kept copy would hold its port).
pub(super) fn published_only(
    listeners: Vec<OwnedFd>,
    published: &[std::net::SocketAddr],
) -> Vec<OwnedFd> {
    listeners
        .into_iter()
        .filter(|fd| {
            kernel::net::host::name(std::os::fd::AsFd::as_fd(fd), false)
                .ok()
                .and_then(|a| kernel::net::inet::parse_sockaddr(a.as_bytes()))
                .is_some_and(|a| {
                    // An IPv6 socket serves a published IPv4 address as its mapped form.
                    let a = std::net::SocketAddr::new(a.ip().to_canonical(), a.port());
                    published.contains(&a)
                })
        })
        .collect()
}

/// Writes a dormant sandbox's state into `dir/dormant`: the checkpoint (`checkpoint` writes
/// it into the directory it is given), the wake record and the status, under a temporary
/// name renamed last (a failure leaves no new `dormant/`). Nothing is synced to disk: the
/// state lasts as long as the dormant process, which ends with the host (a volatile
/// checkpoint, `hibernate::snapshot::CheckpointWriter::volatile`). The state the sandbox
/// last woke from stays until then: the new checkpoint links its memory images (a layered
/// checkpoint writes only what changed since).
///
/// # Errors
/// What `checkpoint` returns; a write or rename the host refuses.
pub(super) fn write_state(
    dir: &std::path::Path,
    record: &WakeRecord,
    status: &serde_json::Value,
    checkpoint: impl FnOnce(&std::path::Path) -> Result<()>,
) -> Result<()> {
    let tmp = dir.join(format!("{}.tmp", dormancy::DIR));
    let _ = crate::cowroot::remove_all(&tmp);
    // Owner only, whatever the holder's umask (0: the application's modes are its own).
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    let written = fill_state(&tmp, record, status, checkpoint);
    if written.is_err() {
        // Nothing half written stays for the next attempt to trip on.
        let _ = crate::cowroot::remove_all(&tmp);
    }
    written?;
    let dest = dir.join(dormancy::DIR);
    let old = dir.join(format!("{}.old", dormancy::DIR));
    let _ = crate::cowroot::remove_all(&old);
    if dest.exists() {
        std::fs::rename(&dest, &old).with_context(|| format!("renaming {}", dest.display()))?;
    }
    std::fs::rename(&tmp, &dest).with_context(|| format!("renaming to {}", dest.display()))?;
    let _ = crate::cowroot::remove_all(&old);
    Ok(())
}

/// Writes the checkpoint, the wake record and the status into `tmp`.
fn fill_state(
    tmp: &std::path::Path,
    record: &WakeRecord,
    status: &serde_json::Value,
    checkpoint: impl FnOnce(&std::path::Path) -> Result<()>,
) -> Result<()> {
    checkpoint(&tmp.join(dormancy::CHECKPOINT))?;
    if record.oci_bundle.is_some() {
        drop_written_pages(&tmp.join(dormancy::CHECKPOINT));
    }
    let write = |name: &str, bytes: &[u8]| -> std::io::Result<()> {
        use std::io::Write;
        std::os::unix::fs::OpenOptionsExt::mode(
            std::fs::OpenOptions::new().write(true).create_new(true),
            0o600,
        )
        .open(tmp.join(name))?
        .write_all(bytes)
    };
    write(
        dormancy::WAKE_RECORD,
        &serde_json::to_vec(record).context("encoding the wake record")?,
    )
    .context("writing the wake record")?;
    write(dormancy::STATUS, status.to_string().as_bytes()).context("writing the dormant status")
}

/// Drops from the host's page cache the pages of the checkpoint files a container's dormancy
/// wrote (written to disk first: the cache drops clean pages only): they were charged to the container's
/// cgroup, whose working set the kubelet reads (and evicts on), and a dormant container's
/// state is on disk; its wake reads them back (about 20 ms more for a Python server holding
/// 64 MiB). A friendly-form sandbox keeps them cached (`MemAvailable` counts them as free;
/// its next wake is faster). The images a layered checkpoint links (`mem-PID.base-K.img`)
/// keep theirs: other instances of the same checkpoint read them.
fn drop_written_pages(checkpoint: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(checkpoint) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().contains(".base-") {
            continue;
        }
        if let Ok(f) = std::fs::File::open(e.path()) {
            let _ = f.sync_data();
            // SAFETY: advice on a descriptor we hold; it changes no file content.
            unsafe {
                libc::posix_fadvise(
                    std::os::fd::AsRawFd::as_raw_fd(&f),
                    0,
                    0,
                    libc::POSIX_FADV_DONTNEED,
                )
            };
        }
    }
}

/// What the dormant process answers `state` and `stats` with.
pub(super) fn status(
    id: &str,
    bundle: &std::path::Path,
    created: u64,
    platform: &str,
    mode: hibernate::engine::WakeMode,
) -> serde_json::Value {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.as_micros() as u64)
        .unwrap_or(0);
    json!({
        "state": {
            "ociVersion": "1.0.2",
            "id": id,
            "status": "dormant",
            "pid": std::process::id(),
            "bundle": bundle,
            "created": created,
            "exitStatus": null,
        },
        "stats": {
            "id": id,
            "state": "dormant",
            "hibernate_state": "dormant",
            "pid": std::process::id(),
            "platform": platform,
            "platform_pids": [],
            "platform_shared_pids": [],
            // The dormant process's own figures are read by `torpor stats` (verbs.rs).
            "pss_bytes": 0,
            "holder_pss_bytes": 0,
            "rss_bytes": 0,
            "wake_mode": mode,
            "state_since_unix_us": since,
        },
    })
}

/// The `--dormant-after` policy, on a thread of its own: once the sandbox has stayed
/// hibernated for `after`, it goes dormant. Waits on the state machine (no polling: a
/// hibernated sandbox's wait costs nothing).
pub(super) fn after_hibernated(d: &Daemon, after: std::time::Duration) {
    // The longest wait for a change out of a state other than hibernated.
    const WATCH: std::time::Duration = std::time::Duration::from_secs(3600);
    loop {
        if d.exit.lock().map_or(true, |e| e.is_some()) {
            return;
        }
        let state = d.hib.state();
        if state == State::Stopped {
            return;
        }
        if state != State::Hibernated {
            d.hib.wait_while(state, WATCH);
            continue;
        }
        let since = std::time::Instant::now();
        if d.hib.wait_while(State::Hibernated, after) != State::Hibernated
            || since.elapsed() < after
        {
            continue;
        }
        let r = prepare(d);
        if r.ok {
            tracing::debug!("hibernated for {after:?}: going dormant");
            stop_after_answer(d);
            return;
        }
        tracing::warn!(
            "--dormant-after: {}",
            r.error.unwrap_or_else(|| "refused".into())
        );
        // Not again until the sandbox has been woken and hibernated anew.
        d.hib.wait_while(State::Hibernated, WATCH);
    }
}

/// Once the `dormant` request is answered: stops the sandbox (its state is on disk), which
/// ends its run on the main thread ([`exec_if_prepared`] then runs there).
pub(super) fn stop_after_answer(d: &Daemon) {
    if d.dormancy.lock().map(|p| p.is_some()).unwrap_or(false) {
        d.control.send_signal(libc::SIGKILL);
        d.hib.stop();
    }
}

/// On the main thread, once the sandbox's run has returned: if the sandbox went dormant,
/// execs the dormant process (no return). Returns otherwise, or with the error of an exec
/// that failed (the sandbox's state stays on disk for the next attempt's `restore`).
pub(super) fn exec_if_prepared(d: &Daemon, janitor: Option<Janitor>) -> Result<Option<Janitor>> {
    let Some(p) = d.dormancy.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return Ok(janitor);
    };
    // Requests being answered finish first (the exec would end their connections; a
    // client retries a read-only one that is cut anyway).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while d.in_flight.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    Err(exec_dormant(Handover {
        dir: &d.dir,
        id: &d.id,
        control_fd: d.control_fd,
        listeners: p.listeners,
        connections: p.connections,
        janitor,
        keep_janitor: d.policy.cpus.is_some(),
    }))
}

/// What the exec into the dormant process keeps.
pub(super) struct Handover<'a> {
    /// The sandbox's state directory.
    pub dir: &'a std::path::Path,
    /// Its ID.
    pub id: &'a str,
    /// The control socket's listener.
    pub control_fd: RawFd,
    /// The published listeners.
    pub listeners: Vec<OwnedFd>,
    /// The connections the checkpoint saved as kept.
    pub connections: Vec<OwnedFd>,
    /// The janitor, dismissed unless `keep_janitor` (a sandbox with a cgroup of its own,
    /// which the janitor removes at the end).
    pub janitor: Option<Janitor>,
    /// Whether the janitor stays through dormancy.
    pub keep_janitor: bool,
}

/// Execs `torpor-dormant` with what `h` keeps (everything else closed at the exec); returns
/// only the error of a step or of the exec.
pub(super) fn exec_dormant(h: Handover<'_>) -> anyhow::Error {
    match try_exec_dormant(h) {
        Err(e) => e,
        Ok(never) => match never {},
    }
}

fn try_exec_dormant(h: Handover<'_>) -> Result<std::convert::Infallible> {
    let [dormant_fd, torpor_fd] = crate::confine::EXEC_FDS;
    let mut keep: Vec<RawFd> = vec![h.control_fd, dormant_fd, torpor_fd];
    let listeners: Vec<RawFd> = h
        .listeners
        .into_iter()
        .map(IntoRawFd::into_raw_fd)
        .collect();
    let connections: Vec<RawFd> = h
        .connections
        .into_iter()
        .map(IntoRawFd::into_raw_fd)
        .collect();
    keep.extend(&connections);
    keep.extend(&listeners);
    let mut wake_args: Vec<String> = Vec::new();
    match h.janitor {
        // One process less while dormant: `delete` cleans up after the woken holder (or the
        // next start's `cleanup_orphans` after a SIGKILL).
        Some(j) if !h.keep_janitor => j.dismiss(),
        // A sandbox with a cgroup of its own keeps the janitor that removes it.
        Some(j) => {
            let (r, w) = j.into_raw_fds().context("keeping the janitor's pipes")?;
            keep.extend([r, w]);
            wake_args.extend(["--janitor".into(), format!("{r},{w}")]);
        }
        None => {}
    }
    if let Some(b) = crate::broker::client_fd() {
        keep.push(b);
        wake_args.extend(["--broker".into(), b.to_string()]);
    }
    let reclaim = crate::oci::cgroup::reclaim_fd();
    if let Some(r) = reclaim {
        keep.push(r);
        wake_args.extend(["--reclaim".into(), r.to_string()]);
    }
    for l in listeners.iter().chain(&connections) {
        wake_args.extend(["--keep".into(), l.to_string()]);
    }
    // The hibernation's page files held the stopped sandbox's memory: the checkpoint has its
    // own copy.
    hibernate::engine::remove_page_files(h.dir);
    dormancy::close_others_on_exec(&keep)?;
    let mut argv: Vec<String> = vec![
        dormancy::DORMANT_BINARY.into(),
        "--status".into(),
        h.dir
            .join(dormancy::DIR)
            .join(dormancy::STATUS)
            .to_string_lossy()
            .into_owned(),
        "--control".into(),
        h.control_fd.to_string(),
    ];
    // A connection, or bytes (or the peer's close) on a kept connection, wakes it.
    for l in listeners.iter().chain(&connections) {
        argv.extend(["--watch".into(), l.to_string()]);
    }
    // Once the holder has gone, what the sandbox's cgroup still holds of the kernel's
    // caches goes back (the `reclaim` module of `crates/dormant`).
    if let Some(r) = reclaim {
        argv.extend(["--reclaim".into(), r.to_string()]);
    }
    argv.extend(["--exec-fd".into(), torpor_fd.to_string(), "--".into()]);
    argv.push("torpor".into());
    argv.extend(
        crate::cli::global_args()
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned()),
    );
    argv.extend([
        "__wake".into(),
        h.id.to_string(),
        "--control".into(),
        h.control_fd.to_string(),
    ]);
    argv.extend(wake_args);
    tracing::debug!(?argv, "going dormant");
    let err = exec_fd(dormant_fd, &argv);
    Err(err).with_context(|| format!("executing {}", dormancy::DORMANT_BINARY))
}

/// `execveat(fd, "", argv, environ, AT_EMPTY_PATH)`: the only exec the holder's filter allows
/// (`crate::confine::EXEC_FDS`). Returns only on failure.
fn exec_fd(fd: RawFd, argv: &[String]) -> std::io::Error {
    let Ok(args) = argv
        .iter()
        .map(|a| std::ffi::CString::new(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()
    else {
        return std::io::Error::from_raw_os_error(libc::EINVAL);
    };
    let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let env: Vec<std::ffi::CString> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k.into_encoded_bytes();
            kv.push(b'=');
            kv.extend(v.into_encoded_bytes());
            std::ffi::CString::new(kv).ok()
        })
        .collect();
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    // SAFETY: an empty NUL-terminated path with AT_EMPTY_PATH (the descriptor is the file),
    // and null-terminated arrays of NUL-terminated strings alive across the call.
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            fd,
            c"".as_ptr(),
            ptrs.as_ptr(),
            envp.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    std::io::Error::last_os_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dormancy whose checkpoint fails leaves nothing behind: no `dormant/`, and no
    /// `dormant.tmp` for the next attempt to find in its way.
    #[test]
    fn a_failed_dormancy_leaves_no_state() {
        let dir = std::env::temp_dir().join(format!("torpor-dormant-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let record: WakeRecord = serde_json::from_value(serde_json::json!({
            "root": "/nonexistent",
            "wake_mode": "auto",
            "swap_quota": null,
            "hibernate_after_ms": null,
            "memory_floor": null,
            "broker_publishes": false,
            "created": 0,
        }))
        .unwrap();
        let status = serde_json::json!({});
        let failed = write_state(&dir, &record, &status, |cp| {
            std::fs::create_dir(cp)?;
            std::fs::write(cp.join("half"), b"written")?;
            anyhow::bail!("the disk is full")
        });
        assert!(failed.is_err());
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert!(left.is_empty(), "left behind: {left:?}");
        // The next attempt goes through.
        write_state(&dir, &record, &status, |cp| Ok(std::fs::create_dir(cp)?)).unwrap();
        assert!(dir.join(dormancy::DIR).join(dormancy::CHECKPOINT).is_dir());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
