//! The OCI runtime command line (the interface runc, crun and runsc speak, which podman,
//! conmon and containerd's runc shim call): `create`, `start`, `state`, `kill`, `delete`,
//! `run --bundle`, `pause`, `resume`, `ps`, `features`.
//!
//! A container is a sandbox whose holder process (the container's `pid`) is started by
//! `create`: it reads the bundle, builds the sandbox (program loaded, nothing run), reports
//! ready and waits; `start` lets the program run. The holder keeps the caller's standard
//! input, output and error for the program, and ends with the program's exit status, which
//! the engine (a subreaper) collects; its state directory (`oci.json`, the exit status)
//! stays until `delete`. `pause`/`resume` hibernate and wake the sandbox without
//! wake-on-request.
//!
//! How the two command-line forms are told apart: `run` with `-- PROGRAM` is the friendly
//! form (`torpor run ROOTFS -- PROGRAM`); `run` without `--` is the OCI form (`torpor run
//! [--bundle DIR] [-d] ID`, the bundle defaulting to the current directory, as runc's). The
//! other verbs are shared: `state`, `kill` and `delete` of a container created by the OCI
//! form follow the runtime spec.

pub mod bundle;
pub mod cgroup;
pub mod mounts;
pub mod state;

use std::io::BufRead;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::control::{call, Request};
use crate::statedir;
use bundle::Bundle;

/// Exit status of a failed OCI verb (as runc's).
pub const EXIT_OCI_ERROR: u8 = 1;

const TIMEOUT: Duration = Duration::from_secs(60);

/// Options of `create` (and of the OCI `run`).
#[derive(Debug, Clone)]
pub struct CreateOptions {
    /// Container ID.
    pub id: String,
    /// Bundle directory.
    pub bundle: PathBuf,
    /// Where to write the holder's pid.
    pub pid_file: Option<PathBuf>,
    /// Where to send the terminal's controller (`process.terminal`).
    pub console_socket: Option<PathBuf>,
    /// Restore the container from this checkpoint (`restore --image-path`) instead of
    /// starting its program.
    pub restore: Option<PathBuf>,
}

/// `create`: starts the holder, which loads the program and waits for `start`.
pub fn create(opts: &CreateOptions) -> Result<u8> {
    create_holder(opts, false)?;
    Ok(0)
}

/// Checks the ID and the bundle (so that a bad one fails before any process is started),
/// starts the holder (which runs the program at once if `start_now`), and writes its pid to
/// `--pid-file`; returns the pid and the state directory.
fn create_holder(opts: &CreateOptions, start_now: bool) -> Result<(u32, PathBuf)> {
    statedir::check_id(&opts.id)?;
    let dir = statedir::dir_of(&opts.id)?;
    if dir.exists() && (statedir::owner_alive(&dir) || state::is_oci(&dir)) {
        bail!("container {:?} already exists", opts.id);
    }
    let b = Bundle::load(&opts.bundle)?;
    if b.terminal && opts.console_socket.is_none() {
        bail!("config.json: process.terminal is set but no --console-socket was given");
    }
    let pid = match spawn_forked(opts, &b, start_now) {
        Some(pid) => Ok(pid),
        None => spawn_holder(opts, start_now, None),
    };
    let pid = match pid {
        Ok(pid) => pid,
        Err(e) => {
            // The holder may have made its cgroup before it failed.
            if let Some(c) = &b.cgroup {
                for w in cgroup::remove(&c.path) {
                    tracing::warn!("{w}");
                }
            }
            return Err(e);
        }
    };
    if let Some(p) = &opts.pid_file {
        write_pid_file(p, pid)?;
    }
    Ok((pid, dir))
}

/// For a container whose bundle names a template (`dev.torpor.template`): its holder
/// restored from the template's fork image, on the template's platform, if the template is
/// there and the restore goes through; `None` (a normal start follows) otherwise, the reason
/// logged.
fn spawn_forked(opts: &CreateOptions, b: &Bundle, start_now: bool) -> Option<u32> {
    let template = b.template.as_deref().filter(|_| opts.restore.is_none())?;
    if let Err(why) = may_fork(template, b) {
        tracing::warn!("{}: not a fork of {template}: {why}; started anew", opts.id);
        return None;
    }
    let (image, platform) = match crate::fork::image::image_of(template) {
        Ok(i) => i,
        Err(e) => {
            tracing::info!(
                "{}: not a fork of {template} ({e:#}): started anew",
                opts.id
            );
            return None;
        }
    };
    let forked = CreateOptions {
        restore: Some(image),
        ..opts.clone()
    };
    match spawn_holder(&forked, start_now, Some(&platform)) {
        Ok(pid) => Some(pid),
        Err(e) => {
            tracing::warn!(
                "{}: the fork of {template} failed ({e:#}): started anew",
                opts.id
            );
            None
        }
    }
}

/// Whether a container of bundle `b` may start as a fork of `template`: a fork gets a copy of
/// the template's memory (its secrets with it), so the template must be a container that
/// consents (`dev.torpor.forkable=true` in its own config) and, for containers of
/// Kubernetes pods, of the same namespace.
fn may_fork(template: &str, b: &Bundle) -> std::result::Result<(), String> {
    let dir = statedir::dir_of(template).map_err(|e| e.to_string())?;
    let Some(rec) = state::Record::load(&dir) else {
        return Err("it is not a container of this state root".into());
    };
    consents(&rec.annotations, b.k8s_namespace.as_ref())
}

/// Whether a template of `annotations` consents to be forked by a container of Kubernetes
/// namespace `ns` (none outside Kubernetes).
fn consents(
    annotations: &std::collections::HashMap<String, String>,
    ns: Option<&String>,
) -> std::result::Result<(), String> {
    if annotations
        .get(bundle::FORKABLE_ANNOTATION)
        .map(String::as_str)
        != Some("true")
    {
        return Err(format!(
            "it does not consent ({}=true in its config)",
            bundle::FORKABLE_ANNOTATION
        ));
    }
    if annotations.get(bundle::K8S_NAMESPACE_ANNOTATION) != ns {
        return Err("it is in another Kubernetes namespace".into());
    }
    Ok(())
}

/// Starts `torpor oci-holder …` with this process's standard streams and waits for its
/// readiness line; returns its pid. A fork (`platform` given) runs on its template's
/// platform, as a boot of its own.
fn spawn_holder(opts: &CreateOptions, start_now: bool, platform: Option<&str>) -> Result<u32> {
    use std::os::unix::process::CommandExt;
    let ready = crate::ready::Readiness::new()?;
    let bundle = opts
        .bundle
        .canonicalize()
        .with_context(|| format!("bundle {}", opts.bundle.display()))?;
    let mut cmd = std::process::Command::new("/proc/self/exe");
    cmd.arg0("torpor");
    cmd.args(crate::cli::global_args());
    cmd.arg("oci-holder")
        .arg("--bundle")
        .arg(&bundle)
        .arg(format!("--ready-fd={}", ready.child_fd()));
    if start_now {
        cmd.arg("--start");
    }
    if let Some(c) = &opts.console_socket {
        cmd.arg("--console-socket").arg(c);
    }
    if let Some(r) = &opts.restore {
        let r = r
            .canonicalize()
            .with_context(|| format!("checkpoint {}", r.display()))?;
        cmd.arg("--restore").arg(r);
        if let Some(p) = platform {
            cmd.arg("--forked").env(crate::platforms::ENV, p);
        }
    }
    cmd.arg(&opts.id);
    match ready.spawn(cmd, "the container's holder process")? {
        Ok(child) => Ok(child.id()),
        Err(msg) => {
            if let Ok(d) = statedir::dir_of(&opts.id) {
                if !statedir::owner_alive(&d) {
                    let _ = std::fs::remove_dir_all(d);
                }
            }
            if msg.is_empty() {
                bail!("the container's holder process exited before it was ready");
            }
            bail!("{msg}")
        }
    }
}

fn write_pid_file(path: &Path, pid: u32) -> Result<()> {
    // Written whole then renamed, so a reader never sees a partial pid.
    let tmp = path.with_extension("torpor-tmp");
    std::fs::write(&tmp, pid.to_string()).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

/// The hidden `oci-holder` command: the container's process; with `restore`, restored from
/// that checkpoint (checked before anything is set up) instead of starting its program (and,
/// when the checkpoint is a template's fork image, as a boot of its own).
pub fn holder(
    id: &str,
    bundle_dir: &Path,
    ready_fd: i32,
    console_socket: Option<&Path>,
    start_now: bool,
    restore: Option<(&Path, bool)>,
) -> Result<u8> {
    let ready = crate::ready::from_fd(ready_fd);
    let mut restoring = None;
    let prepared = (|| -> Result<Bundle> {
        let b = Bundle::load(bundle_dir)?;
        if let Some((dir, forked)) = restore {
            let mut r = crate::snapshot::restoring::Restoring::open(dir)?;
            r.new_boot = forked;
            r.enter_time_namespace()?;
            restoring = Some(r);
        }
        for w in &b.warnings {
            tracing::warn!("{w}");
        }
        // Before anything is built, so that every page of the sandbox is charged there.
        if let Some(c) = &b.cgroup {
            for w in cgroup::join(c)? {
                tracing::warn!("{w}");
            }
        }
        if let Some(p) = &b.netns_path {
            crate::netns::join(p)?;
        } else if b.new_netns {
            crate::netns::new()?;
        }
        if b.terminal {
            let sock = console_socket.context("process.terminal needs --console-socket")?;
            crate::console::attach(sock)?;
        }
        Ok(b)
    })();
    let b = match prepared {
        Ok(b) => b,
        Err(e) => {
            crate::ready::report(ready, Err(&e));
            return Err(e);
        }
    };
    let mut cfg = b.sandbox;
    if let Err(e) = mounts::apply(&cfg.rootfs, &b.mounts) {
        crate::ready::report(ready, Err(&e));
        return Err(e);
    }
    if b.readonly_root {
        cfg.rootfs = crate::cowroot::readonly(&cfg.rootfs)?;
    }
    let origin = match restoring {
        Some(r) => crate::daemon::Origin::Restore(Box::new(r)),
        None => crate::daemon::Origin::Build,
    };
    crate::daemon::serve_from(
        &cfg,
        id,
        &crate::daemon::Policy {
            wake_mode: b.wake_mode,
            swap_quota: None,
            hibernate_after: b.hibernate_after,
            memory_floor: b.memory_floor,
            dormant_after: b.dormant_after,
            cpus: None,
        },
        ready,
        crate::daemon::Holding::Oci {
            bundle: b.dir,
            start_now,
        },
        origin,
    )
}

/// The state directory of container `id`, which must exist.
fn container_dir(id: &str) -> Result<PathBuf> {
    let d = statedir::dir_of(id)?;
    if !d.is_dir() {
        bail!("container {id:?} does not exist");
    }
    Ok(d)
}

/// `start ID`.
pub fn start(id: &str) -> Result<u8> {
    let d = container_dir(id)?;
    if !statedir::owner_alive(&d) {
        bail!("container {id:?} is stopped");
    }
    call(&d, &Request::Start, TIMEOUT)?;
    Ok(0)
}

/// The spec's state JSON of container `id` (also for a stopped one whose holder has ended).
pub fn state_json(id: &str) -> Result<serde_json::Value> {
    let d = container_dir(id)?;
    if statedir::owner_alive(&d) {
        if let Ok(v) = call(&d, &Request::State, TIMEOUT) {
            return Ok(v);
        }
    }
    Ok(state::status_json(&d, id, "stopped", None))
}

/// `kill [--all] ID SIGNAL` of a container, as runc answers it: a stopped container (its
/// program ended, its state kept until `delete`) takes `--all` as done (runc signals the
/// processes left in its cgroup: none), and refuses a plain kill with runc's "container not
/// running", the text containerd's runc shim takes as "already gone"; an unknown ID "does not
/// exist".
pub fn kill(id: &str, signal: i32, all: bool) -> Result<u8> {
    kill_in(&container_dir(id)?, id, signal, all)
}

/// [`kill`] of the container whose state directory is `d`.
fn kill_in(d: &Path, id: &str, signal: i32, all: bool) -> Result<u8> {
    if statedir::owner_alive(d) && !d.join("exit").exists() {
        match call(d, &Request::Kill { signal }, TIMEOUT) {
            Ok(_) => return Ok(0),
            // The program ended while we asked (its holder answers "has stopped", or has
            // already closed its control socket): as stopped below.
            Err(_) if is_stopped(d) => {}
            Err(e) => return Err(e),
        }
    }
    if all {
        return Ok(0);
    }
    bail!("cannot signal container {id:?}: container not running (it has stopped)")
}

/// Whether the container in `dir` has stopped: its holder has ended, or has recorded the
/// program's exit status and is ending.
fn is_stopped(dir: &Path) -> bool {
    dir.join("exit").exists() || !statedir::owner_alive(dir)
}

/// `pause ID` / `resume ID`.
pub fn pause(id: &str, pause: bool) -> Result<u8> {
    let d = container_dir(id)?;
    if !statedir::owner_alive(&d) {
        bail!("container {id:?} is not running");
    }
    call(
        &d,
        if pause {
            &Request::Pause
        } else {
            &Request::Resume
        },
        TIMEOUT,
    )?;
    Ok(0)
}

/// `ps [--format table|json] ID`: the host processes of the container (its holder).
pub fn ps(id: &str, format: &str) -> Result<u8> {
    let d = container_dir(id)?;
    let oci = state::is_oci(&d);
    if oci && format == "json" {
        // runc's: the container's host processes, which engines read.
        let v = state_json(id)?;
        let pid = v["pid"].as_u64().unwrap_or(0);
        let pids: Vec<u64> = if pid > 0 { vec![pid] } else { Vec::new() };
        println!("{}", serde_json::to_string(&pids)?);
        return Ok(0);
    }
    if !statedir::owner_alive(&d) {
        bail!("sandbox {id:?} is not running");
    }
    let v = call(&d, &Request::Processes, TIMEOUT)?;
    let procs: Vec<kernel::ProcessInfo> =
        serde_json::from_value(v).context("the sandbox's answer to ps")?;
    match format {
        "json" => println!("{}", serde_json::to_string(&procs)?),
        "table" => print!("{}", process_table(&procs)),
        other => bail!("unknown format {other:?}: expected table or json"),
    }
    Ok(0)
}

/// `ps`'s table: pid, parent, user id, threads, CPU time and command line.
fn process_table(procs: &[kernel::ProcessInfo]) -> String {
    let mut s = format!(
        "{:>7} {:>7} {:>6} {:>4} {:>9}  {}\n",
        "PID", "PPID", "UID", "THR", "TIME", "COMMAND"
    );
    for p in procs {
        let cmd = if p.args.is_empty() {
            format!("[{}]", p.comm)
        } else {
            p.args.join(" ")
        };
        s.push_str(&format!(
            "{:>7} {:>7} {:>6} {:>4} {:>9}  {}\n",
            p.pid,
            p.ppid,
            p.uid,
            p.threads,
            format!("{}.{:02}s", p.cpu_ms / 1000, p.cpu_ms % 1000 / 10),
            cmd
        ));
    }
    s
}

/// `features`: what this runtime supports, in the runtime spec's features format.
pub fn features() -> Result<u8> {
    let v = serde_json::json!({
        "ociVersionMin": "1.0.0",
        "ociVersionMax": "1.2.0",
        "hooks": [],
        "mountOptions": [],
        "linux": {
            "namespaces": ["network", "pid", "ipc", "uts", "mount"],
            "capabilities": kernel::creds::cap::names(),
            "cgroup": {"v1": true, "v2": true, "systemd": false, "systemdUser": false},
            "seccomp": {"enabled": false},
            "apparmor": {"enabled": false},
            "selinux": {"enabled": false}
        },
        "annotations": {
            "dev.torpor.wake-mode": "fault | reap | auto: how a hibernated sandbox wakes",
            "io.github.torpor.kind": "application kernel under KVM"
        }
    });
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(0)
}

/// The OCI `run`: `create` then `start`; in the foreground, waits for the program and returns
/// its exit status.
pub fn run(opts: &CreateOptions, detach: bool) -> Result<u8> {
    let (pid, dir) = create_holder(opts, true)?;
    if detach {
        return Ok(0);
    }
    // The holder is our child: its exit status is the program's.
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid as i32, &mut status, 0) };
        if r == pid as i32 {
            break;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            bail!(
                "waiting for the container: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status) as u8
    } else {
        128 + libc::WTERMSIG(status) as u8
    })
}

/// Options of `exec`.
#[derive(Debug, Clone, Default)]
pub struct ExecOptions {
    /// Container ID.
    pub id: String,
    /// A process.json (the runtime spec's `process` object).
    pub process: Option<PathBuf>,
    /// The command when there is no process file.
    pub args: Vec<String>,
    /// Extra environment (`-e K=V`) when there is no process file.
    pub env: Vec<String>,
    /// Working directory when there is no process file.
    pub cwd: Option<String>,
    /// A terminal (`-t`) when there is no process file.
    pub tty: bool,
    /// `USER[:GROUP]` to run as (`-u`) when there is no process file.
    pub user: Option<String>,
    /// Return once the process runs; a child of this command waits for it.
    pub detach: bool,
    /// Where to write the pid of the process that ends with the exec'd one.
    pub pid_file: Option<PathBuf>,
    /// Where to send a terminal's controller.
    pub console_socket: Option<PathBuf>,
}

/// `exec`: runs another process in a running container, with this command's standard
/// streams (or a new terminal), and exits with its status. With `--detach`, a child of this
/// command does the waiting (its pid goes to `--pid-file`) and this one returns once the
/// process runs.
pub fn exec(o: &ExecOptions) -> Result<u8> {
    let d = container_dir(&o.id)?;
    if !statedir::owner_alive(&d) {
        bail!("container {:?} is not running", o.id);
    }
    let (args, mut env, cwd, terminal) = match &o.process {
        Some(p) => {
            let t =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            let proc: oci_spec::runtime::Process = serde_json::from_str(&t)
                .with_context(|| format!("{}: invalid process JSON", p.display()))?;
            (
                proc.args().clone().unwrap_or_default(),
                proc.env().clone().unwrap_or_default(),
                proc.cwd().to_string_lossy().into_owned(),
                proc.terminal().unwrap_or(false),
            )
        }
        None => (
            o.args.clone(),
            o.env.clone(),
            o.cwd.clone().unwrap_or_else(|| "/".into()),
            o.tty,
        ),
    };
    if args.is_empty() {
        bail!("exec: no command");
    }
    if !env.iter().any(|e| e.starts_with("PATH=")) {
        env.insert(0, crate::run::DEFAULT_PATH.to_string());
    }
    let cwd = if cwd.is_empty() { "/".to_string() } else { cwd };
    // With a console socket (podman, containerd) the engine relays the terminal; without
    // one this command does, from its own terminal (as runc in the foreground).
    let relay = match (terminal, &o.console_socket) {
        (true, Some(sock)) => {
            crate::console::attach(sock)?;
            None
        }
        (true, None) if o.detach => bail!("exec: a detached terminal needs --console-socket"),
        (true, None) => Some(crate::attach::Pty::open()?),
        (false, _) => None,
    };
    // Blocked now, so that a Ctrl-C while the process starts reaches it once it runs.
    let signals = crate::attach::forwarded_signals()?;
    let ready = if o.detach {
        Some(detach_waiter(o.pid_file.as_deref())?)
    } else {
        None
    };
    if !o.detach {
        if let Some(p) = &o.pid_file {
            write_pid_file(p, std::process::id())?;
        }
    }
    let user = if o.process.is_some() {
        None
    } else {
        o.user.clone()
    };
    // The holder looks the program up on PATH, in the root it sees (a friendly sandbox's
    // overlay is visible to it alone).
    let req = Request::Exec {
        args,
        env,
        cwd,
        user,
        terminal: relay.is_some(),
    };
    let stdio = match &relay {
        Some(pty) => [pty.replica.as_raw_fd(); 3],
        None => [0, 1, 2],
    };
    let started = crate::control::call_with_fds(&d, &req, &stdio);
    let (conn, _) = match started {
        Ok(x) => x,
        Err(e) => {
            crate::ready::report(ready, Err(&e));
            return Err(e);
        }
    };
    crate::ready::report(ready, Ok(()));
    // The process holds the replica now: its terminal ends when the process and what it
    // left behind are gone.
    let controller = relay.map(|pty| pty.controller);
    crate::attach::run(conn, &signals, controller)
}

/// For `exec --detach`: forks; the parent waits until the child reports that the process
/// runs, writes the child's pid to `pid_file` and exits 0 (or 1 with the child's error); the
/// child goes on and gets the readiness pipe's write end.
fn detach_waiter(pid_file: Option<&Path>) -> Result<OwnedFd> {
    let (rd, wr) = crate::ready::Readiness::new()?.into_parts();
    // SAFETY: this process has one thread here (nothing has started any): fork is safe.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error()).context("fork");
    }
    if pid == 0 {
        drop(rd);
        return Ok(wr);
    }
    drop(wr);
    let mut line = String::new();
    std::io::BufReader::new(rd).read_line(&mut line).ok();
    if line.trim() == "ok" {
        if let Some(p) = pid_file {
            write_pid_file(p, pid as u32)?;
        }
        std::process::exit(0);
    }
    let msg = line
        .trim()
        .strip_prefix("error: ")
        .unwrap_or(line.trim())
        .to_string();
    crate::logging::report_error_global(&if msg.is_empty() {
        "exec: the process did not start".to_string()
    } else {
        msg
    });
    std::process::exit(i32::from(EXIT_OCI_ERROR));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_table_has_a_row_per_process() {
        let p = |pid, ppid, args: &[&str]| kernel::ProcessInfo {
            pid,
            ppid,
            uid: 0,
            threads: 1,
            cpu_ms: 1234,
            comm: "sh".into(),
            args: args.iter().map(|a| a.to_string()).collect(),
        };
        let t = process_table(&[p(1, 0, &["sh", "-c", "x"]), p(7, 1, &[])]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].contains("PID") && lines[0].ends_with("COMMAND"));
        assert!(lines[1].trim_start().starts_with("1 ") && lines[1].ends_with("  sh -c x"));
        assert!(lines[1].contains("1.23s"), "{t}");
        assert!(
            lines[2].ends_with("[sh]"),
            "a process without arguments shows its name: {t}"
        );
    }

    #[test]
    fn kill_of_a_stopped_container_answers_as_runc() {
        let d = std::env::temp_dir().join(format!("torpor-oci-kill-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        state::Record::new("c1", Path::new("/b"), Path::new("/b/rootfs"))
            .save(&d)
            .unwrap();
        std::fs::write(d.join("exit"), "0\n").unwrap();
        // containerd's runc shim sends `kill --all ID 9` after the program's exit.
        assert_eq!(kill_in(&d, "c1", libc::SIGKILL, true).unwrap(), 0);
        // A plain kill fails with the text the shim takes as "already gone".
        let e = kill_in(&d, "c1", libc::SIGTERM, false).unwrap_err();
        assert!(e.to_string().contains("container not running"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A template is forked only with its consent, and only within its Kubernetes namespace.
    #[test]
    fn a_template_consents_within_its_namespace() {
        let map = |kv: &[(&str, &str)]| -> std::collections::HashMap<String, String> {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let ns = |s: &str| Some(s.to_string());
        let forkable = (bundle::FORKABLE_ANNOTATION, "true");
        let in_a = (bundle::K8S_NAMESPACE_ANNOTATION, "a");
        assert!(consents(&map(&[forkable]), None).is_ok());
        assert!(consents(&map(&[]), None).is_err());
        assert!(consents(&map(&[(bundle::FORKABLE_ANNOTATION, "yes")]), None).is_err());
        assert!(consents(&map(&[forkable, in_a]), ns("a").as_ref()).is_ok());
        assert!(consents(&map(&[forkable, in_a]), ns("b").as_ref()).is_err());
        assert!(consents(&map(&[forkable, in_a]), None).is_err());
        assert!(consents(&map(&[forkable]), ns("a").as_ref()).is_err());
    }
}
