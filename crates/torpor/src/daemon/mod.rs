//! The process that holds a sandbox: builds it, serves its control socket, runs its task, and
//! (for detached sandboxes) keeps answering after the application exits, until `delete`.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use hibernate::background::Priority;
use hibernate::engine::{self, HibernateHandle, WakeMode};
use hibernate::state::State;
use kernel::task::TaskControl;
use kernel::{ExitStatus, Sandbox, SandboxConfig};
use serde_json::json;

use crate::control::{Request, Response};
use crate::janitor::Janitor;
use crate::oci::mounts::MountSpec;
use crate::{procfs, statedir};
use kernel::sandbox::spawn::{SpawnRequest, Spawner};

mod dormant;
mod exec;
mod provision;
mod wake;

pub use wake::wake_in_place;

/// How long a hibernate may wait for the task to pause.
const PARK_TIMEOUT: Duration = Duration::from_secs(10);

/// How the holder process was started.
#[derive(Clone, Debug)]
pub enum Holding {
    /// `torpor run` in the foreground: ends with the program.
    Foreground {
        /// `--volume`s, mounted on the copy-on-write root.
        volumes: Vec<MountSpec>,
    },
    /// `torpor run -d`: keeps answering after the program ends, until `delete`.
    Detached {
        /// `--volume`s, mounted on the copy-on-write root.
        volumes: Vec<MountSpec>,
    },
    /// The OCI form: the sandbox is `created` until `start` (unless `start_now`); the holder
    /// ends with the program, leaving its state directory (with the exit status) to `delete`.
    Oci {
        /// The bundle directory.
        bundle: PathBuf,
        /// `run`: start at once.
        start_now: bool,
    },
}

impl Holding {
    /// The friendly form's holding: detached when started by `-d` (which hands the holder a
    /// readiness descriptor, `ready_fd >= 0`), else in the foreground.
    pub fn friendly(ready_fd: i32, volumes: Vec<MountSpec>) -> Holding {
        if ready_fd >= 0 {
            Holding::Detached { volumes }
        } else {
            Holding::Foreground { volumes }
        }
    }
}

/// How a sandbox hibernates: its wake mode, the bound on its swap files, its keep-alive.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// How pages come back at a wake.
    pub wake_mode: WakeMode,
    /// The most bytes its swap and REAP files may hold.
    pub swap_quota: Option<u64>,
    /// Hibernate by itself after this long idle (`crate::keepalive`).
    pub hibernate_after: Option<std::time::Duration>,
    /// Hibernate early, longest idle first, while the host's MemAvailable is below this.
    pub memory_floor: Option<u64>,
    /// Go dormant after this long hibernated (`crate::dormancy`).
    pub dormant_after: Option<std::time::Duration>,
    /// The friendly form's CPU limit (`--cpus`): the holder joins a cgroup of its own,
    /// `/torpor/ID`, with that quota; its janitor removes it at the end.
    pub cpus: Option<f64>,
}

/// Work for the spawner thread.
type SpawnJob = Box<dyn FnOnce() + Send>;

/// Starts the spawner thread: it runs each job it is sent (an `exec`'s process being built and
/// started), with the process's seccomp filter only, until the queue's sender goes.
fn start_spawner() -> std::io::Result<mpsc::Sender<SpawnJob>> {
    let (tx, rx) = mpsc::channel::<SpawnJob>();
    std::thread::Builder::new()
        .name("spawner".into())
        .spawn(move || {
            for job in rx {
                job();
            }
        })?;
    Ok(tx)
}

/// Where a holder's sandbox comes from.
pub enum Origin {
    /// Built from its configuration: the program starts from its entry point.
    Build,
    /// Restored from a checkpoint (`torpor restore`), already opened and checked.
    Restore(Box<crate::snapshot::restoring::Restoring>),
    /// Cloned from a checkpoint (`torpor run --from`): restored over its memory image mapped
    /// copy-on-write, running at once.
    Clone(Box<crate::snapshot::restoring::Restoring>),
    /// A dormant holder waking in place (`crate::dormancy::wake`): restored from its own
    /// checkpoint, with what the holder kept across its execs.
    Wake(Box<wake::Woken>),
    /// An instance of a checkpoint started dormant (`torpor run --from DIR --dormant`): the
    /// holder sets up its root and ports and goes dormant at once, nothing run; its first
    /// request restores it (`provision.rs`).
    Provision(Box<crate::snapshot::restoring::Restoring>),
}

/// What the control thread knows of its sandbox.
struct Daemon {
    id: String,
    dir: PathBuf,
    bundle: PathBuf,
    /// The OCI form (state names follow the runtime spec).
    oci: bool,
    /// Whether the program was started (OCI `created` until then); `None` once a kill or
    /// delete cancelled a sandbox that never started.
    started: Mutex<Option<bool>>,
    started_cv: Condvar,
    /// Starts `exec`'d processes (set once the sandbox is built).
    spawner: Mutex<Option<Spawner>>,
    /// The sandbox's root as the holder sees it (a friendly form's overlay, visible only in
    /// the holder's mount namespace): where an `exec`'s program is looked up.
    root: PathBuf,
    /// The spawner thread's queue: an `exec` builds its process there, outside the control
    /// role, whose filter allows no new VM (`confine::enter_control_role`).
    spawn_jobs: Mutex<mpsc::Sender<SpawnJob>>,
    created: u64,
    mode: WakeMode,
    keepalive: crate::keepalive::Policy,
    control: Arc<TaskControl>,
    hib: HibernateHandle,
    /// How many tasks the sandbox holds now.
    live_tasks: Box<dyn Fn() -> usize + Send + Sync>,
    /// The sandbox's processes now.
    processes: Box<dyn Fn() -> Vec<kernel::ProcessInfo> + Send + Sync>,
    exit: Mutex<Option<ExitStatus>>,
    deleted: Mutex<bool>,
    deleted_cv: Condvar,
    /// How the sandbox was started, as a checkpoint records it (`crate::snapshot`).
    record: serde_json::Value,
    /// What runs the application.
    platform: Arc<dyn platform::Platform>,
    /// `exec -t` sessions attached now: while there is one, the keep-alive policy leaves the
    /// sandbox hot (a shell waiting for its operator's next line is not an idle function).
    attached: std::sync::atomic::AtomicUsize,
    /// CPU time (ns) of the control requests' threads that ended: the holder's housekeeping,
    /// which the keep-alive policy leaves out of the sandbox's CPU time.
    control_cpu_ns: AtomicU64,
    /// Started by `run -d` (a sandbox in the foreground or an OCI one cannot go dormant yet).
    detached: bool,
    /// How it hibernates, as started (recorded for a wake from dormancy).
    policy: Policy,
    /// The published ports' host addresses.
    published: Vec<std::net::SocketAddr>,
    /// The control socket's listener's descriptor (kept across the exec into dormancy).
    control_fd: std::os::fd::RawFd,
    /// Set by a `dormant` request that succeeded: the main thread execs the dormant process
    /// once the sandbox has stopped.
    dormancy: Mutex<Option<dormant::Prepared>>,
    /// Control requests being served (an exec into dormancy lets them finish first).
    in_flight: std::sync::atomic::AtomicUsize,
    /// The janitor of a friendly-form sandbox, until it finishes or is dismissed
    /// ([`dismiss_janitor_when_hibernated`]).
    janitor: Mutex<Option<Janitor>>,
    /// Started by root (not rootless).
    root_holder: bool,
}

/// A detached sandbox that hibernates lets its janitor go (one process less while it sleeps,
/// as dormancy does): from then on its end is `delete`'s to clean up, which removes the
/// directory once the holder is gone (its mount namespace, and the root mounted in it, end
/// with the holder), or the next torpor command's (`statedir::cleanup_orphans`) after a
/// SIGKILL. A sandbox in the foreground keeps it (its end removes its directory itself), and
/// so does one with a cgroup of its own (the janitor removes the cgroup) and a rootless one
/// (its root's upper layer holds files of the user namespace's ids, which only the janitor,
/// inside it, can remove).
fn dismiss_janitor_when_hibernated(d: &Daemon) {
    if !d.detached || d.policy.cpus.is_some() || !d.root_holder {
        return;
    }
    let j = d.janitor.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(j) = j {
        j.dismiss();
        tracing::debug!("hibernated: janitor dismissed");
    }
}

/// Runs sandbox `cfg` under ID `id`. `ready` (detached runs) receives one line, `ok` or the
/// error, once the program runs. Returns the application's exit status.
pub fn serve(
    cfg: &SandboxConfig,
    id: &str,
    policy: &Policy,
    ready: Option<OwnedFd>,
    holding: Holding,
) -> Result<u8> {
    serve_from(cfg, id, policy, ready, holding, Origin::Build)
}

/// As [`serve`], for a sandbox built or restored as `origin` says.
pub fn serve_from(
    cfg: &SandboxConfig,
    id: &str,
    policy: &Policy,
    ready: Option<OwnedFd>,
    holding: Holding,
    origin: Origin,
) -> Result<u8> {
    let mut ready = ready;
    let result = start(cfg, id, policy, &holding, &mut ready, &origin);
    match result {
        Err(e) => {
            crate::ready::report(ready, Err(&e));
            if let Ok(dir) = statedir::dir_of(id) {
                let _ = crate::cowroot::remove_all(&dir);
            }
            Err(e)
        }
        Ok(code) => Ok(code),
    }
}

fn start(
    cfg: &SandboxConfig,
    id: &str,
    policy: &Policy,
    holding: &Holding,
    ready: &mut Option<OwnedFd>,
    origin: &Origin,
) -> Result<u8> {
    let mut holder = crate::snapshot::restoring::HolderRecord::of(cfg, policy.wake_mode);
    if let Origin::Wake(w) = origin {
        // A woken holder's root is its overlay, mounted in its own namespace only: its next
        // checkpoint records the root it was started over, as the first one did (a fork of
        // it mounts its own overlay there).
        holder.rootfs = w.restoring.record()?.rootfs;
    }
    let record = serde_json::to_value(holder).context("recording the sandbox's configuration")?;
    let woken = match origin {
        Origin::Wake(w) => Some(w),
        _ => None,
    };
    tracing::debug!("holder: started");
    // A holder waking from dormancy has its directory, root, janitor and broker already.
    let dir = if woken.is_some() {
        statedir::dir_of(id)?
    } else {
        statedir::create(id)?
    };
    statedir::write_pid(&dir, std::process::id())?;
    let (oci, bundle, start_now) = match holding {
        Holding::Oci { bundle, start_now } => (true, bundle.clone(), *start_now),
        _ => (false, cfg.rootfs.clone(), true),
    };
    if oci && woken.is_none() {
        crate::oci::state::Record::new(id, &bundle, &cfg.rootfs).save(&dir)?;
    }
    // The friendly form never writes into ROOTFS: the sandbox's writes go to its own
    // copy-on-write layer in its state directory (the OCI form's root is the container's own).
    // Its janitor, forked now (single-threaded, unconfined), takes the root down and removes
    // the state directory at the end, which the confined holder may not.
    let mut cfg = cfg.clone();
    let janitor = if oci {
        None
    } else if let Some(w) = woken {
        w.take_janitor()
    } else {
        let seed = match origin {
            Origin::Restore(r) | Origin::Clone(r) | Origin::Provision(r) => r.upper(),
            Origin::Build | Origin::Wake(_) => None,
        };
        // A root holder shares the node's file broker, unless its sandbox has a cgroup of
        // its own (a broker started from it would live there); connected before the root is
        // mounted in the holder's own mount namespace (`broker::connect_node`).
        if policy.cpus.is_none() {
            crate::broker::connect_node(&statedir::base_dir());
        }
        let cow = crate::cowroot::prepare_seeded(&cfg.rootfs, &dir.join("root"), seed.as_deref())?;
        cfg.rootfs = cow.merged().to_path_buf();
        tracing::debug!("holder: root mounted");
        // The janitor stays out of the sandbox's cgroup, so that it can remove it.
        let cgroup = policy.cpus.map(|cpus| cpu_cgroup(id, cpus));
        let janitor = crate::janitor::spawn(cow, &dir, cgroup.as_ref().map(|c| c.path.clone()))?;
        if let Some(c) = &cgroup {
            for w in crate::oci::cgroup::join(c).context("joining the sandbox's cgroup")? {
                tracing::warn!("{w}");
            }
        }
        Some(janitor)
    };
    if let (Holding::Foreground { volumes } | Holding::Detached { volumes }, None) =
        (holding, woken)
    {
        crate::oci::mounts::apply(&cfg.rootfs, volumes)?;
    }
    let cfg = &cfg;
    // Still single-threaded: the broker is a plain fork (and the network namespace is left
    // before the sandbox makes any socket).
    if woken.is_none() {
        crate::broker::start_if_root(cfg)?;
    }
    tracing::debug!("holder: broker ready");
    if let Origin::Provision(r) = origin {
        // Nothing of the sandbox is built: its state goes to `dormant/` and this process
        // becomes the dormant one.
        return Err(provision::provision(
            &provision::Instance {
                cfg,
                id,
                dir: &dir,
                policy,
                checkpoint: r,
            },
            ready,
            janitor,
        ));
    }
    let mode = policy.wake_mode;
    let (mut sandbox, mut hook, hib) = match origin {
        Origin::Build => {
            let sandbox = Sandbox::build(cfg)?;
            let (hook, hib) = engine::new(sandbox.memory(), sandbox.control(), dir.clone(), mode)
                .context("setting up hibernation")?;
            (sandbox, hook, hib)
        }
        Origin::Provision(_) => bail!("a dormant instance builds no sandbox"),
        Origin::Restore(r) => {
            let sandbox = r.sandbox(cfg)?;
            let (hook, hib) = r.hibernator(&sandbox, dir.clone(), mode)?;
            (sandbox, hook, hib)
        }
        Origin::Wake(w) => {
            // The request that woke it waits: its working set comes in while the rest of
            // the sandbox is built.
            let (sandbox, hook, hib) = w.restoring.sandbox_prefetching(cfg, dir.clone(), mode)?;
            tracing::debug!("wake: sandbox restored");
            if let Some(h) = &w.restoring.hostname {
                sandbox.set_hostname(h.as_bytes());
            }
            (sandbox, hook, hib)
        }
        Origin::Clone(r) => {
            let sandbox = r.clone_sandbox(cfg)?;
            tracing::debug!("clone: sandbox restored");
            let pages = sandbox.map_ahead();
            tracing::debug!(pages, "clone: pages mapped ahead");
            sandbox.release_held();
            let (hook, hib) = engine::new(sandbox.memory(), sandbox.control(), dir.clone(), mode)
                .context("setting up hibernation")?;
            (sandbox, hook, hib)
        }
    };
    let control = sandbox.control();
    hook.set_swap_quota(policy.swap_quota);
    sandbox.set_park_hook(Box::new(hook));
    let listener = match woken.and_then(|w| w.take_control()) {
        Some(l) => l,
        None => bind_control(&dir)?,
    };
    let control_fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
    let daemon = Arc::new(Daemon {
        id: id.to_string(),
        dir: dir.clone(),
        bundle,
        oci,
        started: Mutex::new(Some(start_now)),
        started_cv: Condvar::new(),
        spawner: Mutex::new(Some(sandbox.spawner())),
        root: cfg.rootfs.clone(),
        spawn_jobs: Mutex::new(start_spawner()?),
        mode,
        keepalive: crate::keepalive::Policy {
            after: policy.hibernate_after,
            memory_floor: policy.memory_floor,
        },
        created: woken.map_or_else(
            || {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0)
            },
            |w| w.created,
        ),
        control,
        hib,
        live_tasks: Box::new(sandbox.live_tasks()),
        processes: Box::new(sandbox.process_list()),
        exit: Mutex::new(None),
        deleted: Mutex::new(false),
        deleted_cv: Condvar::new(),
        record,
        platform: cfg.platform.clone(),
        attached: std::sync::atomic::AtomicUsize::new(0),
        control_cpu_ns: AtomicU64::new(0),
        detached: matches!(holding, Holding::Detached { .. }),
        policy: *policy,
        published: cfg.publish.iter().map(|p| p.host).collect(),
        control_fd,
        dormancy: Mutex::new(None),
        in_flight: std::sync::atomic::AtomicUsize::new(0),
        janitor: Mutex::new(janitor),
        // SAFETY: geteuid has no preconditions.
        root_holder: unsafe { libc::geteuid() } == 0,
    });
    {
        let d = daemon.clone();
        // The request that woke a dormant holder, unread: served first.
        let pending = woken.and_then(|w| w.take_pending());
        std::thread::Builder::new()
            .name("control".into())
            .spawn(move || {
                let _housekeeping = procfs::housekeeping();
                control_loop(&d, listener, pending)
            })?;
    }
    // A restored sandbox goes from creating to hibernated as its task first parks.
    if !matches!(origin, Origin::Restore(_) | Origin::Wake(_)) {
        if let Err(e) = daemon.hib.enter(State::Running) {
            tracing::warn!("{e}");
        }
    }
    // Everything the sandbox needs is open or mapped: the holder confines itself before the
    // application can run (docs/SECURITY.md).
    // The keep-alive registry is shared by the sandboxes of this state root.
    let registry = if policy.memory_floor.is_some() {
        let r = crate::keepalive::Registry::open(registry_dir(), id)
            .context("opening the keep-alive registry")?;
        Some(r)
    } else {
        None
    };
    if woken.is_some() {
        // Confined since before its exec: the filters and the Landlock domain carried over.
        crate::confine::inherited(crate::confine::Mode::from_env()?)
            .context("confining the runtime")?;
        tracing::debug!("wake: confined");
    } else {
        confine_holder(
            cfg,
            &dir,
            policy,
            dormant::possible(oci, holding, &cfg.platform),
        )?;
    }
    crate::confine::test_hook();
    if matches!(origin, Origin::Restore(_)) && start_now {
        // A restored sandbox is ready once its task has parked into `hibernated` (its
        // first act, at the start of the run below): `restore -d` returns only then, so
        // that `state` right after says hibernated, not creating.
        let (d, ready) = (daemon.clone(), ready.take());
        std::thread::Builder::new()
            .name("control-req".into())
            .spawn(move || {
                let _housekeeping = procfs::housekeeping();
                d.hib.wait_while(State::Creating, RESTORE_READY_WAIT);
                crate::ready::report(ready, Ok(()));
            })?;
    } else {
        crate::ready::report(ready.take(), Ok(()));
    }
    if !wait_for_start(&daemon) {
        // Killed or deleted before it started: the program never ran.
        let status = (*daemon.exit.lock().unwrap_or_else(|e| e.into_inner()))
            .unwrap_or(ExitStatus::Signaled(libc::SIGKILL));
        return Ok(finish_oci(&daemon, status));
    }
    if let Some(after) = policy.dormant_after {
        if !dormant::possible(oci, holding, &cfg.platform) {
            tracing::warn!(
                "--dormant-after: this sandbox cannot go dormant (a detached sandbox or an OCI \
                 container on the KVM platform can)"
            );
        } else {
            let d = daemon.clone();
            std::thread::Builder::new()
                .name("keepalive".into())
                .spawn(move || {
                    let _housekeeping = procfs::housekeeping();
                    // Nobody waits for a dormancy: its steps yield to the sandboxes a
                    // client waits for (`hibernate::background`).
                    hibernate::background::lower_calling_thread();
                    dormant::after_hibernated(&d, after)
                })?;
        }
    }
    if daemon.keepalive.after.is_some() || daemon.keepalive.memory_floor.is_some() {
        let d = daemon.clone();
        std::thread::Builder::new()
            .name("keepalive".into())
            .spawn(move || {
                let _housekeeping = procfs::housekeeping();
                if d.policy.dormant_after.is_some() {
                    // Its samples and the waits of its hibernations are the way back to
                    // sleep of a sandbox that goes dormant next, which nobody waits for.
                    hibernate::background::lower_calling_thread();
                }
                keep_alive(&d, registry.as_ref())
            })?;
    }
    let status = run_timed(sandbox);
    // A sandbox stopped to go dormant: this process becomes the dormant one (no return).
    let janitor = daemon
        .janitor
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let janitor = match dormant::exec_if_prepared(&daemon, janitor) {
        Ok(j) => j,
        Err(e) => {
            // Its state stays in `dormant/` (the janitor removes it with the rest).
            return Err(e).context("the sandbox stopped to go dormant, and could not");
        }
    };
    let _ = daemon.hib.enter(State::Stopped);
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            drop(janitor);
            return Err(e).context("sandbox stopped");
        }
    };
    *daemon.exit.lock().unwrap_or_else(|e| e.into_inner()) = Some(status);
    if oci {
        return Ok(finish_oci(&daemon, status));
    }
    if matches!(holding, Holding::Detached { .. }) {
        // Keep answering `state` until `delete`.
        let mut deleted = daemon.deleted.lock().unwrap_or_else(|e| e.into_inner());
        while !*deleted {
            deleted = daemon
                .deleted_cv
                .wait(deleted)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
    if let Some(j) = janitor {
        j.finish();
    }
    Ok(status.code() as u8)
}

/// Binds the control socket of the sandbox whose state directory is `dir` (mode 0600).
///
/// # Errors
/// The host's refusal.
fn bind_control(dir: &std::path::Path) -> Result<UnixListener> {
    let sock = dir.join("control.sock");
    let (path, _dirfd) = crate::control::short_path(&sock)?;
    let l = UnixListener::bind(&path).with_context(|| format!("binding {}", sock.display()))?;
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// The keep-alive registry's directory, shared by the sandboxes of this state root.
fn registry_dir() -> PathBuf {
    statedir::base_dir().join(".keepalive")
}

/// Confines the holder of sandbox `cfg` (docs/SECURITY.md): its files are the sandbox's root,
/// its state directory `dir`, the keep-alive registry (with a memory floor) and the engine's
/// `--log` file (an error after this point still reaches it); with `dormancy`, it may exec
/// its dormant process.
///
/// # Errors
/// A step of the confinement fails: the sandbox must not run unconfined.
fn confine_holder(
    cfg: &SandboxConfig,
    dir: &std::path::Path,
    policy: &Policy,
    dormancy: bool,
) -> Result<()> {
    let log = crate::cli::global().log.clone();
    let registry = registry_dir();
    let mut trees: Vec<&std::path::Path> = vec![&cfg.rootfs, dir];
    if policy.memory_floor.is_some() {
        trees.push(&registry);
    }
    if let Some(l) = &log {
        trees.push(l);
    }
    let mut needs = crate::confine::Needs::of(&cfg.publish, cfg.own_netns);
    needs.dormancy = dormancy;
    crate::confine::confine(crate::confine::Mode::from_env()?, needs, Some(&trees[..]))
        .context("confining the runtime")
}

/// Waits (OCI `created`) until `start`; false if a kill or delete came first.
fn wait_for_start(d: &Daemon) -> bool {
    let mut st = d.started.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        match *st {
            Some(true) => return true,
            None => return false,
            Some(false) => st = d.started_cv.wait(st).unwrap_or_else(|e| e.into_inner()),
        }
    }
}

/// The end of an OCI holder: the exit status goes to the state directory (for `state` and
/// `delete`), the control socket goes away, and the holder exits with the program's status.
fn finish_oci(d: &Daemon, status: ExitStatus) -> u8 {
    *d.exit.lock().unwrap_or_else(|e| e.into_inner()) = Some(status);
    let _ = std::fs::write(d.dir.join("exit"), format!("{}\n", status.code()));
    let _ = std::fs::remove_file(d.dir.join("control.sock"));
    status.code() as u8
}

/// Whether the program has been started.
fn is_started(d: &Daemon) -> bool {
    *d.started.lock().unwrap_or_else(|e| e.into_inner()) == Some(true)
}

/// Cancels a sandbox that never started (kill or delete while `created`); false if it had.
fn cancel_start(d: &Daemon, status: ExitStatus) -> bool {
    let mut st = d.started.lock().unwrap_or_else(|e| e.into_inner());
    if *st != Some(false) {
        return false;
    }
    *st = None;
    *d.exit.lock().unwrap_or_else(|e| e.into_inner()) = Some(status);
    // The holder is woken once the answer is written (handle_conn): it exits at once.
    true
}

fn control_loop(d: &Arc<Daemon>, listener: UnixListener, pending: Option<UnixStream>) {
    // The control role's own filter, once the process is confined; its request threads
    // inherit it. Without it the control thread does not serve.
    if let Err(e) = crate::confine::enter_control_role() {
        tracing::error!("the control thread's seccomp filter: {e}");
        return;
    }
    crate::confine::control_test_hook();
    for conn in pending.into_iter().map(Ok).chain(listener.incoming()) {
        let Ok(conn) = conn else { continue };
        let d = d.clone();
        d.in_flight.fetch_add(1, Ordering::SeqCst);
        // One thread per request: a hibernate must not block `state` or `stats`.
        let _ = std::thread::Builder::new()
            .name("control-req".into())
            .spawn(move || {
                let housekeeping = procfs::housekeeping();
                handle_conn(&d, conn);
                d.in_flight.fetch_sub(1, Ordering::SeqCst);
                drop(housekeeping);
                d.control_cpu_ns
                    .fetch_add(procfs::thread_cpu_ns(), Ordering::Relaxed);
            });
    }
}

fn handle_conn(d: &Daemon, conn: UnixStream) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok((line, fds)) = crate::control::recv_with_fds(&conn) else {
        return;
    };
    let mut w = conn;
    let resp = match serde_json::from_str::<Request>(line.trim()) {
        Ok(Request::Exec {
            args,
            env,
            cwd,
            user,
            terminal,
        }) => {
            let req = SpawnRequest {
                args,
                env,
                cwd,
                creds: None,
            };
            return exec::exec(d, w, req, user.as_deref(), terminal, fds);
        }
        Ok(Request::Dormant) => {
            let resp = dormant::prepare(d);
            reply(&mut w, &resp);
            drop(w);
            dormant::stop_after_answer(d);
            return;
        }
        Ok(req) => handle(d, req),
        Err(e) => Response::error(format!("bad request: {e}")),
    };
    reply(&mut w, &resp);
    // A start cancelled by this request ends the holder only now that the answer is out.
    d.started_cv.notify_all();
}

fn reply(w: &mut UnixStream, resp: &Response) {
    let mut out = serde_json::to_string(resp).unwrap_or_else(|_| r#"{"ok":false}"#.into());
    out.push('\n');
    let _ = w.write_all(out.as_bytes());
}

fn state_name(d: &Daemon) -> &'static str {
    if d.exit.lock().map(|e| e.is_some()).unwrap_or(false) {
        return "stopped";
    }
    if d.oci {
        // The runtime spec's names: a hibernated sandbox that wakes by itself is running.
        if !is_started(d) {
            return "created";
        }
        if d.hib.is_paused() {
            return "paused";
        }
        return "running";
    }
    d.hib.state().as_str()
}

fn handle(d: &Daemon, req: Request) -> Response {
    match req {
        Request::State if d.oci => Response::data(crate::oci::state::status_json(
            &d.dir,
            &d.id,
            state_name(d),
            Some(std::process::id()),
        )),
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
        // Read from the process table: a hibernated sandbox is listed without waking it.
        Request::Processes => {
            Response::data(serde_json::to_value((d.processes)()).unwrap_or_default())
        }
        Request::Hibernate { wait_ms, compact } => {
            if compact {
                d.hib.compact_next_deflate();
            }
            hibernate(
                d,
                Priority::Asked,
                wait_ms.map_or(IDLE_TIMEOUT, std::time::Duration::from_millis),
            )
        }
        Request::Wake => match d.hib.wake() {
            Ok(()) => Response::ok(),
            Err(e) => Response::error(e),
        },
        Request::Exec { .. } => Response::error("exec requests carry descriptors"),
        // Answered by `handle_conn`, which stops the sandbox once the answer is out.
        Request::Dormant => Response::error("a dormant request is served on its connection"),
        Request::Start => {
            let mut st = d.started.lock().unwrap_or_else(|e| e.into_inner());
            match *st {
                Some(false) => {
                    *st = Some(true);
                    d.started_cv.notify_all();
                    Response::ok()
                }
                Some(true) => Response::error("the sandbox has already started"),
                None => Response::error("the sandbox has stopped"),
            }
        }
        Request::Checkpoint => {
            if !is_started(d) || d.exit.lock().map(|e| e.is_some()).unwrap_or(false) {
                return Response::error("only a running sandbox can be checkpointed");
            }
            let out = d.dir.join(crate::snapshot::restoring::HOLDER_OUTPUT);
            match d.hib.checkpoint(out, d.record.clone(), PARK_TIMEOUT) {
                Ok(r) => Response::data(serde_json::to_value(r).unwrap_or_default()),
                Err(e) => Response::error(e),
            }
        }
        Request::Pause => {
            if !is_started(d) || d.exit.lock().map(|e| e.is_some()).unwrap_or(false) {
                return Response::error("only a running sandbox can be paused");
            }
            match d.hib.pause(PARK_TIMEOUT) {
                Ok(r) => Response::data(serde_json::to_value(r).unwrap_or_default()),
                Err(e) => Response::error(e),
            }
        }
        Request::Resume => {
            if !d.hib.is_paused() {
                return Response::error("the sandbox is not paused");
            }
            match d.hib.resume() {
                Ok(()) => Response::ok(),
                Err(e) => Response::error(e),
            }
        }
        Request::Unpause => {
            if !d.hib.is_paused() {
                return Response::error("the sandbox is not paused");
            }
            match d.hib.unpause() {
                Ok(()) => Response::ok(),
                Err(e) => Response::error(e),
            }
        }
        Request::Kill { signal } if (1..=64).contains(&signal) && !is_started(d) => {
            // A created sandbox's program has not run: any signal ends it (as runc's init).
            if cancel_start(d, ExitStatus::Signaled(signal)) {
                Response::ok()
            } else {
                Response::error("the sandbox has stopped")
            }
        }
        Request::Kill { signal } if d.oci && matches!(signal, libc::SIGSTOP | libc::SIGCONT) => {
            // The OCI form has pause and resume for this; stop/cont go to the application.
            d.control.send_signal(signal);
            d.hib.stop_if_hibernated();
            Response::ok()
        }
        Request::Kill { signal } => match signal {
            libc::SIGSTOP => hibernate(d, Priority::Asked, IDLE_TIMEOUT),
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
            cancel_start(d, ExitStatus::Signaled(libc::SIGKILL));
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

/// The cgroup of a friendly-form sandbox limited to `cpus` CPUs (CFS quota over 100 ms).
fn cpu_cgroup(id: &str, cpus: f64) -> crate::oci::cgroup::CgroupSpec {
    const PERIOD_US: u64 = 100_000;
    crate::oci::cgroup::CgroupSpec {
        path: format!("/torpor/{id}"),
        cpu_quota: Some((cpus * PERIOD_US as f64).round().max(1000.0) as i64),
        cpu_period: Some(PERIOD_US),
        ..Default::default()
    }
}

/// The keep-alive policy's watcher: hibernates the sandbox once it has been idle long enough,
/// or early under memory pressure.
fn keep_alive(d: &Daemon, registry: Option<&crate::keepalive::Registry>) {
    crate::keepalive::watch(
        &d.keepalive,
        registry,
        || d.hib.state(),
        |most| {
            d.hib.wait_while(State::Hibernated, most);
        },
        || crate::keepalive::Sample {
            state: d.hib.state(),
            held: d.attached.load(Ordering::Relaxed) > 0,
            inputs: d.control.inputs(),
            cpu_us: procfs::own_cpu_time_us(d.control_cpu_ns.load(Ordering::Relaxed)).unwrap_or(0),
        },
        || {
            // Nobody waits for it. A sandbox that goes dormant next deflates at background
            // priority, on a thread of its own (`hibernate::background`), whose malloc arena
            // would stay resident in a holder that stays hibernated (about 200 KiB, measured);
            // the dormant holder's exec gives it back.
            let priority = if d.policy.dormant_after.is_some() {
                Priority::Background
            } else {
                Priority::Asked
            };
            let r = hibernate(d, priority, KEEPALIVE_WAIT);
            if r.ok {
                Ok(())
            } else {
                Err(r.error.unwrap_or_default())
            }
        },
        || {
            d.exit.lock().map_or(true, |e| e.is_some())
                || *d.deleted.lock().unwrap_or_else(|e| e.into_inner())
        },
    );
}

/// The longest `restore -d` waits for the restored task's first park before it returns.
const RESTORE_READY_WAIT: Duration = Duration::from_secs(30);

/// How long the keep-alive policy's hibernate waits for a request that began meanwhile.
const KEEPALIVE_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

fn hibernate(d: &Daemon, priority: Priority, idle_timeout: std::time::Duration) -> Response {
    if d.exit.lock().map(|e| e.is_some()).unwrap_or(false) {
        return Response::error("the sandbox has stopped");
    }
    // A single-task sandbox's request in flight finishes first (`idle_timeout` at most): its answer
    // must not freeze with nothing left to wake the sandbox. (With threads, the first task
    // says nothing of the requests the others serve.)
    let single = (d.live_tasks)() <= 1;
    let r = if single {
        d.hib
            .hibernate_when_idle(priority, idle_timeout, PARK_TIMEOUT)
    } else {
        d.hib.hibernate_with(priority, PARK_TIMEOUT)
    };
    match r {
        Ok(r) => {
            dismiss_janitor_when_hibernated(d);
            Response::data(serde_json::to_value(r).unwrap_or_default())
        }
        Err(e) => Response::error(e),
    }
}

/// How long a hibernate waits for the requests in flight, unless told (`hibernate --wait`).
const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

fn stats(d: &Daemon) -> serde_json::Value {
    let pid = std::process::id();
    let (pss, rss) = procfs::pss_rss(pid).unwrap_or((0, 0));
    // The platform's processes hold the application's memory too (the trap platform's stubs
    // map pages of guest memory): listed here, and added by `torpor stats`, which can read
    // their figures (not dumpable, they are not readable to the holder).
    let platform_pids = d.platform.processes();
    // The trap platform's stub factory shares the holder's memory: listed apart, counted once.
    let platform_shared_pids = d.platform.shared_processes();
    let shared = d.hib.shared();
    let m = shared.metrics.snapshot();
    let machine = shared.state.lock().map(|s| s.to_json()).unwrap_or_default();
    let transitions = machine.get("transitions").cloned().unwrap_or_default();
    let mut v = json!({
        "id": d.id,
        "state": state_name(d),
        // torpor's own state, also for an OCI container whose `state` is the runtime spec's
        // (running while hibernated).
        "hibernate_state": d.hib.state().as_str(),
        "pid": pid,
        "platform": d.platform.name(),
        "platform_pids": platform_pids,
        "platform_shared_pids": platform_shared_pids,
        "pss_bytes": pss,
        "holder_pss_bytes": pss,
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
    // The last deflate's figures of each process (a sandbox of several processes deflates
    // each one's memory into files of its own).
    let processes = shared
        .processes
        .lock()
        .map(|p| serde_json::to_value(&*p).unwrap_or_default())
        .unwrap_or_default();
    if let Some(obj) = v.as_object_mut() {
        obj.insert("processes".into(), processes);
    }
    let _ = &d.dir;
    v
}

/// Runs a built sandbox to its end; with `TORPOR_TIMINGS=1`, prints the start-up and run
/// times on stderr as `torpor-timing: NAME_us=N` lines.
pub fn run_timed(sandbox: Sandbox) -> Result<kernel::ExitStatus, kernel::SandboxError> {
    let timings = std::env::var("TORPOR_TIMINGS").is_ok_and(|v| v == "1");
    let started = sandbox.started();
    if timings {
        eprintln!(
            "torpor-timing: start_to_first_instruction_us={}",
            started.elapsed().as_micros()
        );
    }
    let status = sandbox.run();
    if timings {
        eprintln!("torpor-timing: run_us={}", started.elapsed().as_micros());
    }
    status
}
