//! The process that holds a sandbox: builds it, serves its control socket, runs its task, and
//! (for detached sandboxes) keeps answering after the application exits, until `delete`.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use hibernate::engine::{self, HibernateHandle, WakeMode};
use hibernate::state::State;
use kernel::task::TaskControl;
use kernel::{ExitStatus, Sandbox, SandboxConfig};
use serde_json::json;

use crate::control::{Request, Response};
use crate::{procfs, statedir};

/// How long a hibernate may wait for the task to pause.
const PARK_TIMEOUT: Duration = Duration::from_secs(10);

/// What the control thread knows of its sandbox.
struct Daemon {
    id: String,
    dir: PathBuf,
    bundle: PathBuf,
    created: u64,
    mode: WakeMode,
    control: Arc<TaskControl>,
    hib: HibernateHandle,
    exit: Mutex<Option<ExitStatus>>,
    deleted: Mutex<bool>,
    deleted_cv: Condvar,
}

/// Runs sandbox `cfg` under ID `id`. `ready` (detached runs) receives one line, `ok` or the
/// error, once the program runs. Returns the application's exit status.
pub fn serve(
    cfg: &SandboxConfig,
    id: &str,
    mode: WakeMode,
    ready: Option<OwnedFd>,
    detached: bool,
) -> Result<u8> {
    let mut ready = ready.map(std::fs::File::from);
    let result = start(cfg, id, mode, detached, &mut ready);
    match result {
        Err(e) => {
            if let Some(mut r) = ready {
                let _ = writeln!(r, "error: {e:#}");
            }
            if let Ok(dir) = statedir::dir_of(id) {
                let _ = std::fs::remove_dir_all(dir);
            }
            Err(e)
        }
        Ok(code) => Ok(code),
    }
}

fn start(
    cfg: &SandboxConfig,
    id: &str,
    mode: WakeMode,
    detached: bool,
    ready: &mut Option<std::fs::File>,
) -> Result<u8> {
    let dir = statedir::create(id)?;
    statedir::write_pid(&dir, std::process::id())?;
    let mut sandbox = Sandbox::build(cfg)?;
    let control = sandbox.control();
    let (hook, hib) = engine::new(sandbox.memory(), control.clone(), dir.clone(), mode)
        .context("setting up hibernation")?;
    sandbox.set_park_hook(Box::new(hook));
    let sock = dir.join("control.sock");
    let listener =
        UnixListener::bind(&sock).with_context(|| format!("binding {}", sock.display()))?;
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600))?;
    let daemon = Arc::new(Daemon {
        id: id.to_string(),
        dir: dir.clone(),
        bundle: cfg.rootfs.clone(),
        mode,
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        control,
        hib,
        exit: Mutex::new(None),
        deleted: Mutex::new(false),
        deleted_cv: Condvar::new(),
    });
    {
        let d = daemon.clone();
        std::thread::Builder::new()
            .name("control".into())
            .spawn(move || control_loop(&d, listener))?;
    }
    if let Err(e) = daemon
        .hib
        .shared()
        .state
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .transition(State::Running)
    {
        tracing::warn!("{e}");
    }
    if let Some(mut r) = ready.take() {
        let _ = writeln!(r, "ok");
    }
    let status = crate::run::run_timed(sandbox);
    {
        let mut st = daemon
            .hib
            .shared()
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let _ = st.transition(State::Stopped);
    }
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e).context("sandbox stopped");
        }
    };
    *daemon.exit.lock().unwrap_or_else(|e| e.into_inner()) = Some(status);
    if detached {
        // Keep answering `state` until `delete`.
        let mut deleted = daemon.deleted.lock().unwrap_or_else(|e| e.into_inner());
        while !*deleted {
            deleted = daemon
                .deleted_cv
                .wait(deleted)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(status.code() as u8)
}

fn control_loop(d: &Arc<Daemon>, listener: UnixListener) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let d = d.clone();
        // One thread per request: a hibernate must not block `state` or `stats`.
        let _ = std::thread::Builder::new()
            .name("control-req".into())
            .spawn(move || handle_conn(&d, conn));
    }
}

fn handle_conn(d: &Daemon, conn: UnixStream) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut line = String::new();
    let Ok(mut w) = conn.try_clone() else { return };
    if BufReader::new(conn).read_line(&mut line).is_err() {
        return;
    }
    let resp = match serde_json::from_str::<Request>(line.trim()) {
        Ok(req) => handle(d, req),
        Err(e) => Response::error(format!("bad request: {e}")),
    };
    let mut out = serde_json::to_string(&resp).unwrap_or_else(|_| r#"{"ok":false}"#.into());
    out.push('\n');
    let _ = w.write_all(out.as_bytes());
}

fn state_name(d: &Daemon) -> &'static str {
    if d.exit.lock().map(|e| e.is_some()).unwrap_or(false) {
        return "stopped";
    }
    d.hib.state().as_str()
}

fn handle(d: &Daemon, req: Request) -> Response {
    match req {
        Request::State => {
            let exit = *d.exit.lock().unwrap_or_else(|e| e.into_inner());
            Response::data(json!({
                "ociVersion": "1.0.2",
                "id": d.id,
                "status": state_name(d),
                "pid": std::process::id(),
                "bundle": d.bundle,
                "created": d.created,
                "exitStatus": exit.map(|e| e.code()),
            }))
        }
        Request::Stats => Response::data(stats(d)),
        Request::Hibernate => hibernate(d),
        Request::Wake => match d.hib.wake() {
            Ok(()) => Response::ok(),
            Err(e) => Response::error(e),
        },
        Request::Kill { signal } => match signal {
            libc::SIGSTOP => hibernate(d),
            libc::SIGCONT => match d.hib.wake() {
                Ok(()) => Response::ok(),
                Err(e) => Response::error(e),
            },
            s if (1..=64).contains(&s) => {
                if d.exit.lock().map(|e| e.is_some()).unwrap_or(false) {
                    return Response::error("the sandbox has stopped");
                }
                d.control.send_signal(s);
                d.hib.stop_if_hibernated();
                Response::ok()
            }
            s => Response::error(format!("invalid signal {s}")),
        },
        Request::Delete => {
            if d.exit.lock().map(|e| e.is_none()).unwrap_or(false) {
                d.control.send_signal(libc::SIGKILL);
                d.hib.stop();
            }
            *d.deleted.lock().unwrap_or_else(|e| e.into_inner()) = true;
            d.deleted_cv.notify_all();
            Response::ok()
        }
    }
}

fn hibernate(d: &Daemon) -> Response {
    if d.exit.lock().map(|e| e.is_some()).unwrap_or(false) {
        return Response::error("the sandbox has stopped");
    }
    match d.hib.hibernate(PARK_TIMEOUT) {
        Ok(r) => Response::data(serde_json::to_value(r).unwrap_or_default()),
        Err(e) => Response::error(e),
    }
}

fn stats(d: &Daemon) -> serde_json::Value {
    let pid = std::process::id();
    let (pss, rss) = procfs::pss_rss(pid).unwrap_or((0, 0));
    let shared = d.hib.shared();
    let m = shared.metrics.snapshot();
    let machine = shared.state.lock().map(|s| s.to_json()).unwrap_or_default();
    let transitions = machine.get("transitions").cloned().unwrap_or_default();
    let mut v = json!({
        "id": d.id,
        "state": state_name(d),
        "pid": pid,
        "pss_bytes": pss,
        "rss_bytes": rss,
        "cpu_time_us": procfs::cpu_time_us(pid),
        "busy_periods": d.control.busy_periods(),
        "wake_mode": d.mode,
        "transitions": transitions,
        "state_since_unix_us": machine.get("since_unix_us").cloned().unwrap_or_default(),
    });
    if let (Some(obj), serde_json::Value::Object(mo)) = (
        v.as_object_mut(),
        serde_json::to_value(m).unwrap_or_default(),
    ) {
        for (k, val) in mo {
            obj.insert(k, val);
        }
    }
    let _ = &d.dir;
    v
}

/// The write end of the readiness pipe given to a detached child.
pub fn ready_fd(fd: i32) -> Option<OwnedFd> {
    if fd < 0 {
        return None;
    }
    // SAFETY: the parent passed this fd to us for this purpose only; we own it from here.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}
