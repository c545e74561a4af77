//! Command-line syntax.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use kernel::net::Publish;

/// torpor: a sandbox runtime that runs unmodified Linux programs under KVM.
#[derive(Parser, Debug)]
#[command(name = "torpor", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
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
        /// Sandbox ID.
        id: String,
    },
    /// Wake a hibernated sandbox (pages come back as they are touched).
    Wake {
        /// Sandbox ID.
        id: String,
    },
    /// Send a signal: SIGSTOP hibernates, SIGCONT wakes, others go to the application.
    Kill {
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
    /// Print a sandbox's metrics as one JSON object.
    Stats {
        /// Sandbox ID.
        id: String,
    },
    /// List sandboxes.
    List,
    /// Remove a stopped sandbox (with --force, stop it first) and everything it owned.
    Delete {
        /// Stop a running sandbox first.
        #[arg(long, short = 'f')]
        force: bool,
        /// Sandbox ID.
        id: String,
    },
    /// Benchmarks.
    Bench {
        /// Which benchmark.
        #[command(subcommand)]
        which: BenchCommand,
    },
    /// Print the syscall table as Markdown (docs/SYSCALLS.md).
    #[command(hide = true)]
    Syscalls,
    /// Measure the bare vCPU exit round trip (for the benchmarks).
    #[command(hide = true)]
    BenchExit {
        /// Iterations.
        #[arg(long, default_value_t = 2000)]
        iterations: u32,
    },
}

/// Benchmarks of `torpor bench`.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// The paper's evaluation (latency: Figure 6; memory: Figure 7) on this machine: CSV files,
    /// docs/results/paper.md and PNG plots. Needs root (it builds Debian roots with debootstrap).
    Paper(crate::paper::PaperArgs),
}

/// Arguments of `torpor run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Guest memory size (e.g. 512M, 1G); rounded up to 4 MiB.
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    pub memory: u64,
    /// Publish a guest port on the host: [HOST_IP:]HOST_PORT:GUEST_PORT.
    #[arg(long = "publish", short = 'p')]
    pub publish: Vec<Publish>,
    /// Set an environment variable in the sandbox (K=V).
    #[arg(long = "env", short = 'e', value_parser = parse_env)]
    pub env: Vec<String>,
    /// Working directory inside the sandbox.
    #[arg(long, default_value = "/")]
    pub cwd: String,
    /// Let the application connect to hosts other than its own listeners.
    #[arg(long)]
    pub allow_outbound: bool,
    /// How a hibernated sandbox wakes: fault (pages fault back), reap (prefetch the working
    /// set recorded on the first wake), auto (reap, re-recording when many faults miss the set).
    #[arg(long, default_value = "auto", value_parser = parse_wake_mode)]
    pub wake_mode: hibernate::engine::WakeMode,
    /// Run in the background: print the sandbox ID once the program runs, and return.
    #[arg(long, short = 'd')]
    pub detach: bool,
    /// Sandbox ID (default: a random one).
    #[arg(long)]
    pub name: Option<String>,
    /// Internal: the write end of a readiness pipe (set by `run -d` for its child).
    #[arg(long, hide = true, default_value_t = -1)]
    pub ready_fd: i32,
    /// Host directory used as the sandbox's root filesystem.
    pub rootfs: PathBuf,
    /// Program (a path inside ROOTFS) and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// Parses `512M`, `1G`, `4096K` or a byte count, rounded up to 4 MiB.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1u64 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1u64 << 30),
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("bad size {s:?}: expected e.g. 512M or 1G"))?;
    let bytes = n
        .checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} is too large"))?;
    let granule = platform::memory::MEMORY_GRANULE;
    let rounded = bytes.div_ceil(granule).saturating_mul(granule);
    if rounded < 16 << 20 {
        return Err(format!("memory {s:?} is too small: at least 16M"));
    }
    if rounded > 64 << 30 {
        return Err(format!("memory {s:?} is too large: at most 64G"));
    }
    Ok(rounded)
}

fn parse_wake_mode(s: &str) -> Result<hibernate::engine::WakeMode, String> {
    s.parse()
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
    fn envs() {
        assert!(parse_env("A=b").is_ok());
        assert!(parse_env("A=").is_ok());
        assert!(parse_env("=b").is_err());
        assert!(parse_env("AB").is_err());
    }
}
