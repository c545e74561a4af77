//! `torpor run`: one sandbox in the foreground.

use anyhow::{Context, Result};
use kernel::{Sandbox, SandboxConfig};

use crate::cli::RunArgs;

/// Exit status for errors of the runtime itself (as docker and runc use 125).
pub const EXIT_RUNTIME_ERROR: u8 = 125;

const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Runs the sandbox described by `args` and returns the application's exit status.
pub fn run(args: RunArgs) -> Result<u8> {
    ignore_sigpipe();
    let program = args.command[0].clone();
    let mut env = args.env.clone();
    if !env.iter().any(|e| e.starts_with("PATH=")) {
        env.insert(0, DEFAULT_PATH.to_string());
    }
    let cfg = SandboxConfig {
        rootfs: args.rootfs.clone(),
        program: program.clone(),
        args: args.command.clone(),
        env,
        cwd: args.cwd.clone(),
        memory: args.memory,
        publish: args.publish.clone(),
        allow_outbound: args.allow_outbound,
    };
    run_config(&cfg)
}

/// Builds and runs a sandbox from `cfg`.
pub fn run_config(cfg: &SandboxConfig) -> Result<u8> {
    if !cfg.rootfs.is_dir() {
        anyhow::bail!("root filesystem {} does not exist or is not a directory", cfg.rootfs.display());
    }
    let sandbox = Sandbox::build(cfg)?;
    let timings = std::env::var("TORPOR_TIMINGS").is_ok_and(|v| v == "1");
    if timings {
        eprintln!("torpor-timing: start_to_first_instruction_us={}", sandbox.started().elapsed().as_micros());
    }
    let started = sandbox.started();
    let status = sandbox.run().context("sandbox stopped")?;
    if timings {
        eprintln!("torpor-timing: run_us={}", started.elapsed().as_micros());
    }
    Ok(status.code() as u8)
}

/// The runtime must survive writes to closed sockets: the application gets EPIPE instead.
fn ignore_sigpipe() {
    // SAFETY: setting a signal disposition to SIG_IGN has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// `torpor bench-exit`: prints the platform's round trips.
pub fn bench_exit(iterations: u32) -> Result<u8> {
    let r = platform::bench::round_trips(iterations.max(1))?;
    println!("exit_round_trip_us={:.1}", r.syscall_us);
    println!("exit_round_trip_with_pte_sync_us={:.1}", r.syscall_with_pte_sync_us);
    Ok(0)
}
