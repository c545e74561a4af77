//! `torpor run`: one sandbox in the foreground.

use anyhow::{Context, Result};

use crate::statedir;
use kernel::{Sandbox, SandboxConfig};

use crate::cli::RunArgs;

/// Exit status for errors of the runtime itself (as docker and runc use 125).
pub const EXIT_RUNTIME_ERROR: u8 = 125;

/// The node name of a sandbox started by `torpor run` (an OCI bundle names its own).
pub const DEFAULT_HOSTNAME: &str = "torpor";

/// The PATH a program runs with when its image or command line sets none (runc's and
/// podman's default).
pub const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Runs the sandbox described by `args` and returns the application's exit status.
pub fn run(args: RunArgs) -> Result<u8> {
    ignore_sigpipe();
    let id = statedir::id_or_new(args.name.as_deref())?;
    if args.detach {
        return detach(&id, "run");
    }
    let program = args.command[0].clone();
    let Some(rootfs) = args.rootfs.clone() else {
        anyhow::bail!("torpor run needs ROOTFS");
    };
    let mut env = args.env.clone();
    if !env.iter().any(|e| e.starts_with("PATH=")) {
        env.insert(0, DEFAULT_PATH.to_string());
    }
    if !rootfs.is_dir() {
        anyhow::bail!(
            "root filesystem {} does not exist or is not a directory",
            rootfs.display()
        );
    }
    // As a shell would: `python3` is the first one on the guest's PATH, `./app` is relative
    // to the working directory; what is not found is the kernel's error to give.
    let program = crate::program::resolve(&rootfs, &program, &env, &args.cwd).unwrap_or(program);
    let user = match &args.user {
        Some(spec) => {
            let root = kernel::fs::Root::open(&rootfs)
                .with_context(|| format!("opening {}", rootfs.display()))?;
            Some(crate::user::resolve(&root, spec)?)
        }
        None => None,
    };
    if let Some(home) = user.as_ref().and_then(|u| u.home.clone()) {
        if !env.iter().any(|e| e.starts_with("HOME=")) {
            env.push(format!("HOME={home}"));
        }
    }
    let cfg = SandboxConfig {
        rootfs,
        program: program.clone(),
        args: args.command.clone(),
        env,
        cwd: args.cwd.clone(),
        memory: args.memory,
        publish: args.publish.clone(),
        allow_outbound: args.allow_outbound,
        own_netns: false,
        creds: user.map(|u| u.creds),
        rlimits: None,
        pids_limit: Some(args.pids_limit as usize),
        hostname: args
            .hostname
            .clone()
            .unwrap_or_else(|| DEFAULT_HOSTNAME.into()),
        share_files: !args.no_share_files && share_files_from_env(),
        platform: crate::platforms::open()?,
        kept_sockets: Default::default(),
    };
    if !cfg.rootfs.is_dir() {
        anyhow::bail!(
            "root filesystem {} does not exist or is not a directory",
            cfg.rootfs.display()
        );
    }
    let holding = crate::daemon::Holding::friendly(args.ready_fd, args.volume.clone());
    crate::daemon::serve(
        &cfg,
        &id,
        &crate::daemon::Policy {
            wake_mode: args.wake_mode,
            swap_quota: args.swap_quota,
            hibernate_after: args.hibernate_after,
            memory_floor: args.memory_floor,
            dormant_after: args.dormant_after,
            cpus: args.cpus,
        },
        crate::ready::from_fd(args.ready_fd),
        holding,
    )
}

/// Whether private file pages are shared through the page cache unless a flag says
/// otherwise: `TORPOR_SHARE_FILES=0` turns it off.
pub fn share_files_from_env() -> bool {
    std::env::var("TORPOR_SHARE_FILES").map_or(true, |v| v.trim() != "0")
}

/// `VERB -d` (`run`, `restore`): starts this same command line, without `-d`, as a session
/// leader in the background with its output in the sandbox directory, and returns once it
/// reports ready.
pub fn detach(id: &str, verb: &str) -> Result<u8> {
    detach_args(id, verb, std::env::args().skip(1).collect())
}

/// [`detach`] of the command line `argv` (without the program's name) instead of this
/// process's own: `torpor fork -d` starts its instance as a `run --from`.
pub fn detach_args(id: &str, verb: &str, argv: Vec<String>) -> Result<u8> {
    use std::os::unix::process::CommandExt;
    let dir = statedir::dir_of(id)?;
    if dir.exists() && statedir::owner_alive(&dir) {
        anyhow::bail!("a sandbox named {id:?} already exists");
    }
    let ready = crate::ready::Readiness::new()?;
    let log_path = statedir::base_dir().join(format!(".{id}.log"));
    std::fs::create_dir_all(statedir::base_dir()).ok();
    let log = std::fs::File::create(&log_path).context("creating the output log")?;
    let mut args: Vec<String> = Vec::new();
    let mut skip_next = false;
    let mut after_dashdash = false;
    for a in argv {
        if after_dashdash {
            args.push(a);
            continue;
        }
        if skip_next {
            skip_next = false;
            continue;
        }
        match a.as_str() {
            "--" => {
                after_dashdash = true;
                args.push(a);
            }
            "-d" | "--detach" => {}
            "--name" => skip_next = true,
            s if s.starts_with("--name=") => {}
            _ => args.push(a),
        }
    }
    // Insert the ID and the pipe right after the verb.
    let pos = args
        .iter()
        .position(|a| a == verb)
        .map(|p| p + 1)
        .unwrap_or(0);
    args.insert(pos, format!("--ready-fd={}", ready.child_fd()));
    args.insert(pos, format!("--name={id}"));
    let mut cmd = std::process::Command::new("/proc/self/exe");
    cmd.arg0("torpor")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // A process group of its own, so that the terminal's job control leaves it alone, but
    // not a session of its own: a new session is a new scheduling autogroup
    // (`kernel.sched_autogroup_enabled`), which the scheduler gives its fair share whatever
    // the nice values inside, so the work a holder does at background priority
    // (`hibernate::background`: going back to sleep) would take as much of the CPU from
    // another sandbox's wake as the wake itself. Holders started together share their
    // caller's group; a sandbox with `--cpus` has a cgroup of its own.
    // SAFETY: setpgid is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::setpgid(0, 0);
            Ok(())
        });
    }
    let msg = match ready.spawn(cmd, "the sandbox process")? {
        Ok(_) => {
            // The output log moves into the sandbox's directory.
            let _ = std::fs::rename(&log_path, dir.join("output.log"));
            println!("{id}");
            return Ok(0);
        }
        Err(msg) => msg,
    };
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_file(&log_path);
    if msg.is_empty() {
        anyhow::bail!(
            "the sandbox process exited before the program started: {}",
            log.trim()
        );
    }
    anyhow::bail!("{msg}")
}

/// Builds and runs a sandbox from `cfg`.
pub fn run_config(cfg: &SandboxConfig) -> Result<u8> {
    if !cfg.rootfs.is_dir() {
        anyhow::bail!(
            "root filesystem {} does not exist or is not a directory",
            cfg.rootfs.display()
        );
    }
    crate::broker::start_if_root(cfg)?;
    let sandbox = Sandbox::build(cfg)?;
    let needs = crate::confine::Needs::of(&cfg.publish, cfg.own_netns);
    crate::confine::confine(
        crate::confine::Mode::from_env()?,
        needs,
        Some(&[&cfg.rootfs]),
    )
    .context("confining the runtime")?;
    let status = crate::daemon::run_timed(sandbox).context("sandbox stopped")?;
    Ok(status.code() as u8)
}

/// The runtime must survive writes to closed sockets: the application gets EPIPE instead.
fn ignore_sigpipe() {
    // SAFETY: setting a signal disposition to SIG_IGN has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}
