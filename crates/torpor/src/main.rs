//! The `torpor` command.

mod cli;
mod control;
mod daemon;
mod demo;
mod paper;
mod procfs;
mod run;
mod statedir;
mod verbs;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    init_logging();
    let result = match cli.command {
        cli::Command::Run(args) => run::run(args),
        cli::Command::Demo => demo::demo(),
        cli::Command::Syscalls => {
            print!("{}", kernel::syscalls::table::markdown());
            Ok(0)
        }
        cli::Command::Hibernate { id } => verbs::hibernate(&id),
        cli::Command::Wake { id } => verbs::wake(&id),
        cli::Command::Kill { id, signal } => verbs::kill(&id, &signal),
        cli::Command::State { id } => verbs::state(&id),
        cli::Command::Stats { id } => verbs::stats(&id),
        cli::Command::List => verbs::list(),
        cli::Command::Delete { id, force } => verbs::delete(&id, force),
        cli::Command::BenchExit { iterations } => run::bench_exit(iterations),
        cli::Command::Bench {
            which: cli::BenchCommand::Paper(args),
        } => paper::run(args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("torpor: {e:#}");
            ExitCode::from(run::EXIT_RUNTIME_ERROR)
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TORPOR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
