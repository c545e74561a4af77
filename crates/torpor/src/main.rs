//! The `torpor` command: parses the command line and hands each verb to the library.

use std::process::ExitCode;

use clap::Parser;
use torpor::{broker, cli, demo, fork, logging, oci, platforms, run, snapshot, verbs};

fn main() -> ExitCode {
    // As every Unix tool: a verb whose output pipe closes (`torpor stats ID | head`) ends
    // quietly instead of panicking on EPIPE. The holder (`run`) ignores SIGPIPE itself.
    // SAFETY: setting a signal disposition to SIG_DFL has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(broker::SUBCOMMAND) {
        broker::serve(&args[2..]);
    }
    let cli = cli::Cli::parse();
    cli::set_global(&cli.global);
    if let Some(root) = &cli.global.root {
        // Before any thread starts: the state directory of every verb.
        std::env::set_var("TORPOR_STATE_DIR", root);
    }
    if let Some(p) = cli.global.platform {
        // Before any thread starts; holders this process starts inherit it.
        std::env::set_var(platforms::ENV, p.name());
    }
    logging::init(&cli.global);
    let oci_verb = cli.command.is_oci();
    let result = match cli.command {
        cli::Command::Run(args) if args.from.is_some() => snapshot::clone(args),
        cli::Command::Run(args) if args.command.is_empty() => oci::run(
            &oci::CreateOptions {
                id: args
                    .rootfs
                    .as_deref()
                    .unwrap_or(std::path::Path::new(""))
                    .to_string_lossy()
                    .into_owned(),
                bundle: args.bundle.clone().unwrap_or_else(|| ".".into()),
                pid_file: args.oci.pid_file.clone(),
                console_socket: args.oci.console_socket.clone(),
                restore: None,
            },
            args.detach,
        ),
        cli::Command::Run(args) if args.bundle.is_some() => Err(anyhow::anyhow!(
            "run: --bundle is the OCI form (run --bundle DIR ID), which takes no -- PROGRAM"
        )),
        cli::Command::Run(args) => run::run(args),
        cli::Command::Demo => demo::demo(),
        cli::Command::Syscalls => {
            print!("{}", kernel::syscalls::table::markdown());
            Ok(0)
        }
        cli::Command::Hibernate { id, wait, compact } => verbs::hibernate(&id, wait, compact),
        cli::Command::Wake { id } => verbs::wake(&id),
        cli::Command::Dormant { id } => verbs::dormant(&id),
        cli::Command::WakeInPlace(args) => torpor::daemon::wake_in_place(args),
        cli::Command::Kill { id, signal, all } => verbs::kill(&id, &signal, all),
        cli::Command::State { id } => verbs::state(&id),
        cli::Command::Stats { id, prometheus } => verbs::stats(id.as_deref(), prometheus),
        cli::Command::List { watch } => verbs::list(watch),
        cli::Command::Delete { id, force } => verbs::delete(&id, force),
        cli::Command::Checkpoint(args) => snapshot::checkpoint_verb(args),
        cli::Command::Restore(args) => snapshot::restore(args),
        cli::Command::Fork(args) => fork::fork(args),
        cli::Command::Create(a) => oci::create(&oci::CreateOptions {
            id: a.id,
            bundle: a.bundle,
            pid_file: a.oci.pid_file,
            console_socket: a.oci.console_socket,
            restore: None,
        }),
        cli::Command::Start { id } => oci::start(&id),
        cli::Command::Pause { id } => oci::pause(&id, true),
        cli::Command::Resume { id } => oci::pause(&id, false),
        cli::Command::Ps { format, id, .. } => oci::ps(&id, &format),
        cli::Command::Features => oci::features(),
        cli::Command::Exec {
            process,
            env,
            cwd,
            user,
            detach,
            pid_file,
            console_socket,
            tty,
            interactive: _,
            rest,
        } => match rest.split_first() {
            None => Err(anyhow::anyhow!("exec: no container ID")),
            Some((id, args)) => oci::exec(&oci::ExecOptions {
                id: id.clone(),
                process,
                args: args.to_vec(),
                env,
                cwd,
                tty,
                user,
                detach,
                pid_file,
                console_socket,
            }),
        },
        cli::Command::OciHolder {
            bundle,
            ready_fd,
            console_socket,
            start,
            restore,
            forked,
            id,
        } => oci::holder(
            &id,
            &bundle,
            ready_fd,
            console_socket.as_deref(),
            start,
            restore.as_deref().map(|r| (r, forked)),
        ),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            logging::report_error(&cli.global, &format!("{e:#}"));
            ExitCode::from(if oci_verb {
                oci::EXIT_OCI_ERROR
            } else {
                run::EXIT_RUNTIME_ERROR
            })
        }
    }
}
