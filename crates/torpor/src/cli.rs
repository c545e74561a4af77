//! Command-line syntax.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use kernel::net::Publish;

/// torpor: a sandbox runtime that runs unmodified Linux programs under KVM.
#[derive(Parser, Debug)]
#[command(name = "torpor", version, about)]
pub struct Cli {
    /// The flags OCI callers (podman, conmon, containerd's shim) pass before the verb.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Global flags, as runc has them.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct GlobalArgs {
    /// Directory holding the sandboxes' state (overrides TORPOR_STATE_DIR).
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Write the runtime's log to FILE instead of standard error.
    #[arg(long, global = true, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Log format: text or json (one object per line: level, msg, time).
    #[arg(long, global = true, default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// Debug logging.
    #[arg(long, global = true)]
    pub debug: bool,
    /// Accepted for compatibility: torpor places nothing in cgroups itself.
    #[arg(long, global = true)]
    pub systemd_cgroup: bool,
    /// Accepted for compatibility (rootless is decided by the caller's uid).
    #[arg(long, global = true, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub rootless: Option<String>,
    /// What runs the application: kvm (a VM), trap (a host process whose every syscall
    /// traps), or auto (kvm where /dev/kvm opens, else trap). Default: TORPOR_PLATFORM, else
    /// auto.
    #[arg(long, global = true, value_enum)]
    pub platform: Option<crate::platforms::Kind>,
}

static GLOBAL: std::sync::OnceLock<GlobalArgs> = std::sync::OnceLock::new();

/// Remembers the global flags, so that processes this one starts get them too.
pub fn set_global(g: &GlobalArgs) {
    let _ = GLOBAL.set(g.clone());
}

/// The global flags this process was started with.
pub fn global() -> GlobalArgs {
    GLOBAL.get().cloned().unwrap_or_default()
}

/// The global flags as arguments for a child `torpor` process.
pub fn global_args() -> Vec<std::ffi::OsString> {
    let mut v: Vec<std::ffi::OsString> = Vec::new();
    if let Some(g) = GLOBAL.get() {
        if let Some(r) = &g.root {
            v.push("--root".into());
            v.push(r.clone().into());
        }
        if let Some(l) = &g.log {
            v.push("--log".into());
            v.push(l.clone().into());
        }
        v.push(format!("--log-format={}", g.log_format).into());
        if g.debug {
            v.push("--debug".into());
        }
    }
    v
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run PROGRAM from ROOTFS in a new sandbox, in the foreground.
    Run(RunArgs),
    /// Run the bundled example program in a temporary sandbox.
    Demo,
    /// Deflate a sandbox: free pages to the host, the rest to its swap file, no CPU.
    Hibernate {
        /// How long to wait for a request in flight to be answered before refusing (e.g.
        /// 500ms, 10s, 1m). Applies to a sandbox of one task; one with more threads or
        /// processes is parked at once, its requests in flight finishing after the wake.
        #[arg(long, default_value = "10s", value_parser = parse_wait)]
        wait: std::time::Duration,
        /// Write every live page into one fresh swap file per process, instead of only what
        /// changed since the last deflate beside the older files (reclaims the disk space of
        /// rewritten pages; torpor compacts by itself when the files are mostly dead)
        #[arg(long)]
        compact: bool,
        /// Sandbox ID.
        id: String,
    },
    /// Wake a hibernated sandbox (pages come back as they are touched).
    Wake {
        /// Sandbox ID.
        id: String,
    },
    /// Make a sandbox dormant: its state goes to its state directory and its holder becomes
    /// one small process (no VM, no guest memory) keeping its published ports and control
    /// socket, until a connection or a request wakes it in place. `state`, `list` and
    /// `stats` answer without waking it.
    Dormant {
        /// Sandbox ID.
        id: String,
    },
    /// Internal: a dormant holder waking in place (started by `torpor-dormant`).
    #[command(name = "__wake", hide = true)]
    WakeInPlace(WakeArgs),
    /// Send a signal: SIGSTOP hibernates, SIGCONT wakes, others go to the application.
    Kill {
        /// Send it to every process of the container (OCI form; the sandbox's processes end
        /// together anyway).
        #[arg(long, short = 'a')]
        all: bool,
        /// Sandbox ID.
        id: String,
        /// Signal name or number (default SIGTERM).
        #[arg(default_value = "SIGTERM")]
        signal: String,
    },
    /// Print a sandbox's OCI-style state as JSON.
    State {
        /// Sandbox ID.
        id: String,
    },
    /// Print a sandbox's metrics as one JSON object (with --prometheus, every sandbox's, or
    /// the one named, in the Prometheus text format).
    Stats {
        /// The Prometheus text exposition format, for a scraper (e.g. through node_exporter's
        /// textfile collector).
        #[arg(long)]
        prometheus: bool,
        /// Sandbox ID (optional with --prometheus: all of them).
        id: Option<String>,
    },
    /// List sandboxes: state, idle time, memory, swap and wakes.
    List {
        /// Redraw the list every SECONDS until interrupted (like top).
        #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2",
              value_parser = clap::value_parser!(u32).range(1..=3600))]
        watch: Option<u32>,
    },
    /// Remove a stopped sandbox (with --force, stop it first) and everything it owned.
    Delete {
        /// Stop a running sandbox first.
        #[arg(long, short = 'f')]
        force: bool,
        /// Sandbox ID.
        id: String,
    },
    /// Write a checkpoint of a running sandbox into a new directory DIR (memory, processes,
    /// descriptors, its files' changes), then stop it unless --leave-running.
    Checkpoint(CheckpointArgs),
    /// Start a sandbox from a checkpoint DIR: it resumes where it was checkpointed, its
    /// memory coming back lazily as it is touched.
    Restore(RestoreArgs),
    /// Start a new sandbox that carries on from the running or hibernated sandbox TEMPLATE as
    /// it is now (memory, processes, descriptors, files), under its own ID, ports and root;
    /// the template is left hibernated (a dormant one stays dormant)
    Fork(ForkArgs),
    /// OCI: create a container from a bundle; its program waits for `start`.
    Create(CreateArgs),
    /// OCI: start the program of a created container.
    Start {
        /// Container ID.
        id: String,
    },
    /// OCI: pause a container (hibernate it; requests wait until `resume`).
    Pause {
        /// Container ID.
        id: String,
    },
    /// OCI: resume a paused container.
    Resume {
        /// Container ID.
        id: String,
    },
    /// The sandbox's processes, with their pids inside it (a table, or JSON). For an OCI
    /// container, `--format json` is runc's: the host processes (its holder).
    Ps {
        /// table or json.
        #[arg(long, short = 'f', default_value = "table")]
        format: String,
        /// Container ID.
        id: String,
        /// ps(1) options (accepted, not used).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        ps_args: Vec<String>,
    },
    /// Run another process in a running sandbox (any: `torpor run`'s or an OCI container),
    /// with this command's standard streams, and exit with its status.
    Exec {
        /// Process JSON file (the runtime spec's process object).
        #[arg(long, short = 'p')]
        process: Option<PathBuf>,
        /// Environment variable K=V (without --process).
        #[arg(long = "env", short = 'e')]
        env: Vec<String>,
        /// Working directory (without --process).
        #[arg(long, short = 'w')]
        cwd: Option<String>,
        /// Run as USER[:GROUP] (names from the sandbox's /etc/passwd and /etc/group, or
        /// numbers); default: the ids of the sandbox's first process.
        #[arg(long, short = 'u')]
        user: Option<String>,
        /// Detach.
        #[arg(long, short = 'd')]
        detach: bool,
        /// Pid file.
        #[arg(long)]
        pid_file: Option<PathBuf>,
        /// Console socket.
        #[arg(long)]
        console_socket: Option<PathBuf>,
        /// Give the process a terminal: sent to --console-socket when given (podman,
        /// containerd), else relayed to this command's own terminal (raw mode, window size,
        /// Ctrl-C to the process).
        #[arg(long, short = 't')]
        tty: bool,
        /// Keep standard input attached (it always is, as runc's; accepted for the `-it` of
        /// docker and podman).
        #[arg(long, short = 'i')]
        interactive: bool,
        /// Container ID and command.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        rest: Vec<String>,
    },
    /// OCI: print the features this runtime supports, as JSON.
    Features,
    /// Internal: the holder process of an OCI container.
    #[command(hide = true)]
    OciHolder {
        /// Bundle directory.
        #[arg(long)]
        bundle: PathBuf,
        /// Readiness pipe.
        #[arg(long)]
        ready_fd: i32,
        /// Console socket.
        #[arg(long)]
        console_socket: Option<PathBuf>,
        /// Start at once (OCI `run`).
        #[arg(long)]
        start: bool,
        /// Restore from this checkpoint instead of starting the program (OCI `restore`).
        #[arg(long)]
        restore: Option<PathBuf>,
        /// The checkpoint is a template's fork image (`dev.torpor.template`): the container
        /// is a new boot, not the template's.
        #[arg(long, requires = "restore")]
        forked: bool,
        /// Container ID.
        id: String,
    },
    /// Print the syscall table as Markdown (docs/SYSCALLS.md).
    #[command(hide = true)]
    Syscalls,
}

impl Command {
    /// Whether this is a verb of the OCI form, whose failures exit with status 1 (as runc's).
    pub fn is_oci(&self) -> bool {
        match self {
            Command::Run(a) => a.command.is_empty(),
            Command::Create(_)
            | Command::Start { .. }
            | Command::Pause { .. }
            | Command::Resume { .. }
            | Command::Features
            | Command::OciHolder { .. } => true,
            Command::Exec { rest, .. } => rest.first().is_some_and(|id| {
                crate::statedir::dir_of(id).is_ok_and(|d| crate::oci::state::is_oci(&d))
            }),
            Command::Restore(a) => a.image_path.is_some(),
            Command::Checkpoint(a) => a.image_path.is_some(),
            Command::State { id }
            | Command::Delete { id, .. }
            | Command::Kill { id, .. }
            | Command::Ps { id, .. } => {
                crate::statedir::dir_of(id).is_ok_and(|d| crate::oci::state::is_oci(&d))
            }
            _ => false,
        }
    }
}

/// Arguments of `create` (OCI).
#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    /// Bundle directory (holding config.json).
    #[arg(long, short = 'b', default_value = ".")]
    pub bundle: PathBuf,
    /// What `create` and the OCI `run` share.
    #[command(flatten)]
    pub oci: OciCreateFlags,
    /// Accepted for compatibility (no extra descriptors are passed).
    #[arg(long, default_value_t = 0)]
    pub preserve_fds: u32,
    /// Container ID.
    pub id: String,
}

/// The flags `create` and the OCI form of `run` share.
#[derive(clap::Args, Debug, Clone)]
pub struct OciCreateFlags {
    /// OCI: write the container's pid (its holder process) to this file.
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// OCI: Unix socket to send the terminal's controller to (process.terminal).
    #[arg(long)]
    pub console_socket: Option<PathBuf>,
    /// OCI: accepted for compatibility.
    #[arg(long)]
    pub no_pivot: bool,
    /// OCI: accepted for compatibility.
    #[arg(long)]
    pub no_new_keyring: bool,
}

/// Arguments of `torpor run`: the friendly form `run [OPTIONS] ROOTFS -- PROGRAM [ARGS]`, or
/// the OCI form `run [--bundle DIR] [-d] ID` (told apart by the `--`).
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// OCI form: bundle directory (default: the current directory).
    #[arg(long, short = 'b')]
    pub bundle: Option<PathBuf>,
    /// OCI form: the flags it shares with `create`.
    #[command(flatten)]
    pub oci: OciCreateFlags,
    /// Guest memory size (e.g. 512M, 1G); rounded up to 4 MiB.
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    pub memory: u64,
    /// Publish a guest port on the host: [HOST_IP:]HOST_PORT:GUEST_PORT.
    #[arg(long = "publish", short = 'p')]
    pub publish: Vec<Publish>,
    /// Mount a host directory or file in the sandbox: HOST_PATH:GUEST_PATH[:ro] (writes there
    /// reach the host, unlike writes to the root). Repeatable.
    #[arg(long = "volume", short = 'v', value_parser = parse_volume)]
    pub volume: Vec<crate::oci::mounts::MountSpec>,
    /// Set an environment variable in the sandbox (K=V).
    #[arg(long = "env", short = 'e', value_parser = parse_env)]
    pub env: Vec<String>,
    /// Working directory inside the sandbox.
    #[arg(long, default_value = "/")]
    pub cwd: String,
    /// Run as USER[:GROUP] (names from the root's /etc/passwd and /etc/group, or numbers);
    /// default: the runtime's own ids.
    #[arg(long, short = 'u')]
    pub user: Option<String>,
    /// Most tasks (threads of every process) the sandbox may hold; fork and clone fail with
    /// EAGAIN beyond.
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u32).range(1..))]
    pub pids_limit: u32,
    /// Let the application connect to hosts other than its own listeners.
    #[arg(long)]
    pub allow_outbound: bool,
    /// The node name uname(2) reports (default `torpor`; a clone's default: its template's).
    #[arg(long, value_parser = parse_hostname)]
    pub hostname: Option<String>,
    /// Copy every page of program text and libraries into the sandbox's own memory instead
    /// of mapping those of read-only mappings from the host's page cache (shared with every
    /// process and sandbox mapping the same file). `TORPOR_SHARE_FILES=0` does the same.
    #[arg(long)]
    pub no_share_files: bool,
    /// How a hibernated sandbox wakes: fault (pages fault back), reap (prefetch the working
    /// set recorded on the first wake), auto (reap, re-recording when many faults miss the set).
    #[arg(long, default_value = "auto", value_parser = parse_wake_mode)]
    pub wake_mode: hibernate::engine::WakeMode,
    /// The most bytes the sandbox's swap and REAP files may hold (e.g. 256M, 2G): a hibernate
    /// that could need more fails with a clear error and the sandbox stays hot. Default: no
    /// limit but the disk's.
    #[arg(long, value_parser = parse_bytes)]
    pub swap_quota: Option<u64>,
    /// Hibernate by itself after this long idle (no request, almost no CPU), e.g. 30s, 5m;
    /// the next connection wakes it. Default: only when told (`torpor hibernate`).
    #[arg(long, value_parser = crate::keepalive::parse_after)]
    pub hibernate_after: Option<std::time::Duration>,
    /// Under memory pressure, hibernate early: while the host's MemAvailable is below SIZE
    /// (e.g. 2G), idle sandboxes that set this hibernate, longest idle first.
    #[arg(long, value_parser = parse_bytes)]
    pub memory_floor: Option<u64>,
    /// Go dormant once hibernated this long (e.g. 10m): the sandbox's state goes to its state
    /// directory and its holder becomes one small process until the next request (see
    /// `torpor dormant`). With --hibernate-after the sandbox hibernates by itself first.
    /// Detached (-d) sandboxes on the KVM platform.
    #[arg(long, value_parser = crate::keepalive::parse_after)]
    pub dormant_after: Option<std::time::Duration>,
    /// Limit the sandbox to this many CPUs (e.g. 0.5, 2): a cgroup of its own with a CFS
    /// quota (needs root and a cpu controller, v1 or v2).
    #[arg(long, value_parser = parse_cpus)]
    pub cpus: Option<f64>,
    /// Run in the background: print the sandbox ID once the program runs, and return.
    #[arg(long, short = 'd')]
    pub detach: bool,
    /// Sandbox ID (default: a random one).
    #[arg(long)]
    pub name: Option<String>,
    /// Internal: the write end of a readiness pipe (set by `run -d` for its child).
    #[arg(long, hide = true, default_value_t = -1)]
    pub ready_fd: i32,
    /// Start a clone of the sandbox checkpointed in DIR (`torpor checkpoint`) instead of a
    /// program: its memory is the checkpoint's, shared copy-on-write with every other clone.
    /// ROOTFS may then be left out (default: the checkpointed sandbox's).
    #[arg(long, value_name = "DIR")]
    pub from: Option<PathBuf>,
    /// With --from and -d: start the instance dormant (see `torpor dormant`): nothing runs
    /// and no memory is used until its first request restores it in place. A platform can
    /// provision many instances of one function this way.
    #[arg(long, requires = "from")]
    pub dormant: bool,
    /// Host directory used as the sandbox's root filesystem (in the OCI form: the container
    /// ID).
    #[arg(value_name = "ROOTFS", required_unless_present = "from")]
    pub rootfs: Option<PathBuf>,
    /// Program (a path inside ROOTFS) and its arguments; without them, the OCI form.
    #[arg(last = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// Arguments of `torpor fork`.
#[derive(clap::Args, Debug)]
pub struct ForkArgs {
    /// The live sandbox to fork (started with `run -d` or `restore -d`).
    pub template: String,
    /// The instance's ID (default: a random one).
    #[arg(long)]
    pub name: Option<String>,
    /// Publish a guest port of the instance on the host: [HOST_IP:]HOST_PORT:GUEST_PORT.
    /// Needed when the template publishes ports (those stay the template's).
    #[arg(long = "publish", short = 'p')]
    pub publish: Vec<Publish>,
    /// The instance's node name (default: the template's).
    #[arg(long, value_parser = parse_hostname)]
    pub hostname: Option<String>,
    /// Let the instance connect to hosts other than its own listeners.
    #[arg(long)]
    pub allow_outbound: bool,
    /// Hibernate the instance by itself after this long idle (e.g. 30s).
    #[arg(long, value_parser = crate::keepalive::parse_after)]
    pub hibernate_after: Option<std::time::Duration>,
    /// Run the instance in the background: print its ID once it runs, and return.
    #[arg(long, short = 'd')]
    pub detach: bool,
}

/// Arguments of `torpor checkpoint`: `checkpoint [--leave-running] ID DIR`, or runc's form
/// `checkpoint --image-path DIR [--work-path W] [--leave-running] ID` (the OCI engines').
#[derive(clap::Args, Debug)]
pub struct CheckpointArgs {
    /// Keep the sandbox running after the checkpoint (it resumes where it was).
    #[arg(long)]
    pub leave_running: bool,
    /// runc's form: the checkpoint directory (new, or empty).
    #[arg(long)]
    pub image_path: Option<PathBuf>,
    /// runc's form: accepted (torpor keeps no work files).
    #[arg(long)]
    pub work_path: Option<PathBuf>,
    /// runc's checkpoint flags, accepted.
    #[command(flatten)]
    pub runc: RuncCheckpointFlags,
    /// Sandbox ID.
    pub id: String,
    /// The checkpoint directory to create (without --image-path).
    #[arg(required_unless_present = "image_path")]
    pub dir: Option<PathBuf>,
}

/// The flags runc's `checkpoint` and `restore` take that torpor accepts and needs not: CRIU's
/// options (connected TCP sockets always come back reset; locks, external Unix sockets, shell
/// jobs and cgroups need nothing).
#[derive(clap::Args, Debug, Default)]
pub struct RuncCheckpointFlags {
    /// Accepted.
    #[arg(long, hide = true)]
    pub tcp_established: bool,
    /// Accepted.
    #[arg(long, hide = true)]
    pub file_locks: bool,
    /// Accepted.
    #[arg(long, hide = true)]
    pub ext_unix_sk: bool,
    /// Accepted.
    #[arg(long, hide = true)]
    pub shell_job: bool,
    /// Accepted.
    #[arg(long, hide = true)]
    pub manage_cgroups_mode: Option<String>,
}

/// Arguments of `torpor restore`.
#[derive(clap::Args, Debug)]
pub struct RestoreArgs {
    /// The root filesystem the checkpointed sandbox ran on (default: the path it had; its
    /// files must be unchanged).
    #[arg(long, value_name = "ROOTFS")]
    pub rootfs: Option<PathBuf>,
    /// Publish a guest port on the host: [HOST_IP:]HOST_PORT:GUEST_PORT (default: the
    /// checkpointed sandbox's).
    #[arg(long = "publish", short = 'p')]
    pub publish: Vec<Publish>,
    /// How the restored sandbox's memory comes back: fault, reap or auto (default: the
    /// checkpointed sandbox's).
    #[arg(long, value_parser = parse_wake_mode)]
    pub wake_mode: Option<hibernate::engine::WakeMode>,
    /// Run in the background: print the sandbox ID once it is restored, and return.
    #[arg(long, short = 'd')]
    pub detach: bool,
    /// Sandbox ID (default: a random one).
    #[arg(long)]
    pub name: Option<String>,
    /// Internal: the write end of a readiness pipe (set by `restore -d` for its child).
    #[arg(long, hide = true, default_value_t = -1)]
    pub ready_fd: i32,
    /// runc's form (the OCI engines'): the checkpoint directory; the positional argument is
    /// then the container ID, restored into `--bundle`.
    #[arg(long)]
    pub image_path: Option<PathBuf>,
    /// runc's form: the bundle directory (default: the current directory).
    #[arg(long, short = 'b')]
    pub bundle: Option<PathBuf>,
    /// runc's form: accepted (torpor keeps no work files).
    #[arg(long)]
    pub work_path: Option<PathBuf>,
    /// runc's form: write the container's pid (its holder process) to this file.
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// runc's form: Unix socket to send the terminal's controller to.
    #[arg(long)]
    pub console_socket: Option<PathBuf>,
    /// runc's restore flags, accepted.
    #[command(flatten)]
    pub runc: RuncCheckpointFlags,
    /// Accepted for runc compatibility.
    #[arg(long, hide = true)]
    pub no_pivot: bool,
    /// The checkpoint directory (made by `torpor checkpoint`); with --image-path, the
    /// container ID.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

pub use crate::units::{parse_bytes, parse_duration, parse_size};

/// Parses `HOST:GUEST[:ro|:rw]`.
fn parse_volume(s: &str) -> Result<crate::oci::mounts::MountSpec, String> {
    let bad = || format!("bad --volume {s:?}: expected HOST_PATH:GUEST_PATH[:ro]");
    let parts: Vec<&str> = s.split(':').collect();
    let (host, guest, readonly) = match parts.as_slice() {
        [h, g] => (*h, *g, false),
        [h, g, "ro"] => (*h, *g, true),
        [h, g, "rw"] => (*h, *g, false),
        _ => return Err(bad()),
    };
    if !host.starts_with('/') || !guest.starts_with('/') {
        return Err(bad());
    }
    let host = std::path::Path::new(host)
        .canonicalize()
        .map_err(|e| format!("--volume {s:?}: {host}: {e}"))?;
    Ok(crate::oci::mounts::MountSpec::Bind {
        source: host,
        destination: guest.to_string(),
        readonly,
        recursive: true,
    })
}

/// Parses `hibernate --wait`: a duration of at most 10 minutes.
fn parse_wait(s: &str) -> Result<std::time::Duration, String> {
    let d = parse_duration(s)?;
    if d > std::time::Duration::from_secs(600) {
        return Err(format!("duration {s:?} is too long: at most 10m"));
    }
    Ok(d)
}

/// Parses `--cpus`: a number of CPUs between 0.01 and 1024.
fn parse_cpus(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("bad --cpus {s:?}: expected a number such as 0.5 or 2"))?;
    if !(0.01..=1024.0).contains(&v) {
        return Err(format!("--cpus {s:?}: between 0.01 and 1024"));
    }
    Ok(v)
}

/// Parses `--hostname`: 1 to 64 bytes, no NUL (Linux's `__NEW_UTS_LEN`).
fn parse_hostname(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 64 || s.contains('\0') {
        return Err(format!("bad --hostname {s:?}: 1 to 64 bytes"));
    }
    Ok(s.to_string())
}

fn parse_wake_mode(s: &str) -> Result<hibernate::engine::WakeMode, String> {
    s.parse()
        .map_err(|e: hibernate::engine::UnknownWakeMode| e.to_string())
}

fn parse_env(s: &str) -> Result<String, String> {
    match s.split_once('=') {
        Some((k, _)) if !k.is_empty() && !k.contains('\0') && !s.contains('\0') => {
            Ok(s.to_string())
        }
        _ => Err(format!("bad --env {s:?}: expected KEY=VALUE")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("17M").unwrap(), 20 << 20);
        assert!(parse_size("1M").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999G").is_err());
    }

    #[test]
    fn volumes() {
        let v = parse_volume("/tmp:/data:ro").unwrap();
        assert_eq!(v.destination(), "/data");
        assert!(parse_volume("/tmp:/data:rx").is_err());
        assert!(parse_volume("tmp:/data").is_err());
        assert!(parse_volume("/no/such/dir/x:/data").is_err());
    }

    #[test]
    fn envs() {
        assert!(parse_env("A=b").is_ok());
        assert!(parse_env("A=").is_ok());
        assert!(parse_env("=b").is_err());
        assert!(parse_env("AB").is_err());
    }
}

/// The arguments `torpor-dormant` starts the wake with.
#[derive(clap::Args, Debug)]
pub struct WakeArgs {
    /// Sandbox ID.
    pub id: String,
    /// The control socket's listener.
    #[arg(long)]
    pub control: i32,
    /// The janitor's request and answer pipes, `REQUEST,DONE`.
    #[arg(long)]
    pub janitor: Option<String>,
    /// The file broker's socket.
    #[arg(long)]
    pub broker: Option<i32>,
    /// The sandbox cgroup's memory reclaim file (`crate::oci::cgroup::reclaim_fd`).
    #[arg(long)]
    pub reclaim: Option<i32>,
    /// A host socket kept while dormant (repeated): a published listener, or a connection
    /// the checkpoint names by this number.
    #[arg(long)]
    pub keep: Vec<i32>,
    /// What woke it: one of the listeners, or a control connection with its request unread.
    #[arg(long)]
    pub woken_by: Option<i32>,
}
