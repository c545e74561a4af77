//! `torpor-bench`: the benchmarks that drive the `torpor` command as a user would and write
//! the figures of `docs/results/` (the paper's evaluation, bursts, density, shared files,
//! snapshots) and the bare vCPU exit round trip the `core` benchmark reads.
//!
//! It is a separate command so that none of this code is in the runtime every sandbox runs:
//! it finds `torpor` beside itself (`cargo build --release` builds both) or at `$TORPOR_BIN`.

mod burst;
mod density;
mod dormantbench;
mod forkbench;
mod paper;
mod share;
mod snapbench;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The command line of `torpor-bench`.
#[derive(Parser, Debug)]
#[command(
    name = "torpor-bench",
    version,
    about = "Benchmarks of the torpor runtime"
)]
struct Cli {
    /// The platform the benchmarked sandboxes run on: kvm, trap or auto (exported as
    /// TORPOR_PLATFORM to every `torpor` command the benchmark runs).
    #[arg(long, global = true, value_enum)]
    platform: Option<torpor::platforms::Kind>,
    /// Which benchmark.
    #[command(subcommand)]
    benchmark: Benchmark,
}

/// The benchmarks.
#[derive(Subcommand, Debug)]
enum Benchmark {
    /// The paper's evaluation (latency: Figure 6; memory: Figure 7) on this machine: CSV files,
    /// docs/results/paper.md and PNG plots. Needs root (it builds Debian roots with debootstrap).
    Paper(paper::PaperArgs),
    /// Bursts of 10, 100 and 1,000 concurrent connections at a hot and at a hibernated
    /// sandbox (Python, Node.js, Go hello-worlds) beside the same program run natively, and
    /// 100 sandboxes woken at once: burst.md, CSV files and a plot. Needs root.
    Burst(burst::BurstArgs),
    /// Many sandboxes hibernated by the keep-alive policy (10, 100, 1,000): host memory and
    /// PSS per sandbox, idle CPU, wake latency under a Zipf request stream, every one
    /// answering: density.md, density.csv, density.png. Needs root.
    Density(density::DensityArgs),
    /// The dormant tier against the hibernated one: the first response after a wake from each
    /// (Python, Node.js, Go hellos), the time to go dormant, what each tier keeps on the host,
    /// and many Python sandboxes dormant at once: dormant.md, dormant.csv. Needs root.
    Dormant(dormantbench::DormantArgs),
    /// Sandbox fork against cold start, clone and REAP wake (Python, Node.js, Go, Java
    /// hellos), from the command to the first response, and the memory of many forked
    /// instances against as many cold-started: fork.md, fork.csv. Needs root.
    Fork(forkbench::ForkArgs),
    /// Clean pages of program text and libraries shared through the host's page cache
    /// against copied (`--no-share-files`): the PSS of 10 Python sandboxes hot at once
    /// against 10 times one's, and Node.js hello's first request after a page-fault wake:
    /// share.md. Needs root.
    Share(share::ShareArgs),
    /// Checkpoints on the paper's eight workloads: restore and clone against cold start (first
    /// response, page cache dropped), and the memory of many clones of one Python server
    /// against as many cold-started and woken ones: snapshots.md. Needs root.
    Snapshots(snapbench::SnapshotsArgs),
    /// The bare vCPU exit round trip of the KVM platform and its syscall round trips, in this
    /// process (no sandbox): the mechanism figures of `cargo bench -p torpor-bench --bench core`.
    Exit {
        /// Iterations.
        #[arg(long, default_value_t = 2000)]
        iterations: u32,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(p) = cli.platform {
        // Before any thread starts; every `torpor` command the benchmark runs inherits it.
        std::env::set_var(torpor::platforms::ENV, p.name());
    }
    let result = match cli.benchmark {
        Benchmark::Paper(args) => paper::run(args),
        Benchmark::Burst(args) => burst::run(args),
        Benchmark::Density(args) => density::run(args),
        Benchmark::Dormant(args) => dormantbench::run(args),
        Benchmark::Fork(args) => forkbench::run(args),
        Benchmark::Share(args) => share::run(args),
        Benchmark::Snapshots(args) => snapbench::run(args),
        Benchmark::Exit { iterations } => exit_round_trips(iterations),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("torpor-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `torpor-bench exit`: prints the KVM platform's round trips.
fn exit_round_trips(iterations: u32) -> anyhow::Result<u8> {
    let r = platform_kvm::bench::round_trips(iterations.max(1))?;
    println!("exit_round_trip_us={:.1}", r.bare_exit_us);
    println!("platform_syscall_round_trip_us={:.1}", r.syscall_us);
    println!(
        "platform_syscall_with_pte_sync_us={:.1}",
        r.syscall_with_pte_sync_us
    );
    Ok(0)
}
