//! `torpor checkpoint` and `torpor restore` (issue 14; the design is
//! `docs/design/snapshots.md`).
//!
//! A checkpoint is written in two steps, because the confined holder may write only inside
//! its own state directory:
//!
//! 1. the holder pauses the sandbox (requests do not wake it), deflates it and writes the
//!    checkpoint (`hibernate::engine`: kernel state, blobs, memory images, MANIFEST last)
//!    into `STATE_DIR/checkpoint/`;
//! 2. this command copies the sandbox's writes to its root (the overlay's upper layer) into
//!    it, moves it to DIR (a copy into `DIR.partial` renamed when DIR is on another
//!    filesystem), and then stops the sandbox, or resumes it with `--leave-running`.
//!
//! `torpor restore DIR` checks the whole checkpoint (`hibernate::snapshot::Checkpoint::open`)
//! before anything starts, then runs a holder as `torpor run` does, whose sandbox is built by
//! `kernel::checkpoint::restore` over a root whose upper layer starts as the checkpoint's,
//! hibernated, its memory paged in from the checkpoint's images as it is touched. What the
//! holder needs of a checkpoint (its record, the opened checkpoint) is [`restoring`], below
//! the holder; the verbs here are above it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::control::{call, Request};

pub mod restoring;

use restoring::{Restoring, HOLDER_OUTPUT, UPPER};

/// The file podman checks for in a checkpoint directory before a restore (CRIU's
/// inventory); runc's form of `checkpoint` writes a marker by that name.
const CRIU_INVENTORY: &str = "inventory.img";

/// How long a checkpoint may take.
const TIMEOUT: Duration = Duration::from_secs(120);

/// `torpor checkpoint`: the friendly form `[--leave-running] ID DIR`, or runc's
/// `--image-path DIR [--leave-running] ID`, whose DIR may exist if it is empty (engines make
/// it first).
pub fn checkpoint_verb(a: crate::cli::CheckpointArgs) -> Result<u8> {
    match (&a.image_path, &a.dir) {
        (Some(image), None) => {
            let empty = std::fs::read_dir(image)
                .map(|mut d| d.next().is_none())
                .unwrap_or(false);
            if empty {
                std::fs::remove_dir(image)
                    .with_context(|| format!("replacing the empty {}", image.display()))?;
            }
            let code = checkpoint(&a.id, image, a.leave_running)?;
            // podman looks for CRIU's inventory before it restores a container (it only
            // checks that the file is there): a marker saying what the directory is.
            std::fs::write(
                image.join(CRIU_INVENTORY),
                "a torpor checkpoint, not a CRIU image: see MANIFEST\n",
            )
            .with_context(|| format!("writing {}", image.join(CRIU_INVENTORY).display()))?;
            Ok(code)
        }
        (None, Some(dir)) => checkpoint(&a.id, dir, a.leave_running),
        _ => bail!("checkpoint takes a directory, or --image-path DIR, not both"),
    }
}

/// `torpor checkpoint [--leave-running] ID DIR`.
pub fn checkpoint(id: &str, dir: &Path, leave_running: bool) -> Result<u8> {
    let sdir = crate::verbs::dir(id)?;
    if dir.symlink_metadata().is_ok() {
        bail!(
            "{} already exists: a checkpoint is written into a new directory",
            dir.display()
        );
    }
    let out = sdir.join(HOLDER_OUTPUT);
    if out.symlink_metadata().is_ok() {
        // Left by a checkpoint that was interrupted.
        crate::cowroot::remove_all(&out)
            .with_context(|| format!("removing the old {}", out.display()))?;
    }
    // A hibernated sandbox is checkpointed where it sleeps (no wake), and left so.
    call(&sdir, &Request::Checkpoint, TIMEOUT).context("writing the checkpoint")?;
    let result = finish_checkpoint(&sdir, &out, dir);
    if result.is_err() {
        let _ = crate::cowroot::remove_all(&out);
    }
    // Paused by the checkpoint: resumed (hibernated still, if it was), or stopped (an OCI
    // container as runc leaves it: stopped, its state kept until the engine's `delete`).
    if leave_running {
        call(&sdir, &Request::Resume, Duration::from_secs(10))?;
    } else if result.is_ok() && crate::oci::state::is_oci(&sdir) {
        crate::oci::kill(id, libc::SIGKILL, true)?;
    } else if result.is_ok() {
        crate::verbs::delete(id, true)?;
    } else {
        let _ = call(&sdir, &Request::Resume, Duration::from_secs(10));
    }
    result?;
    println!("{}", dir.display());
    Ok(0)
}

/// Copies the sandbox's root's upper layer into the holder's checkpoint `out`, then moves it
/// to `dir`.
fn finish_checkpoint(sdir: &Path, out: &Path, dir: &Path) -> Result<()> {
    let upper = sdir.join("root").join("upper");
    if upper.is_dir() {
        let to = out.join(UPPER);
        std::fs::create_dir(&to).with_context(|| format!("creating {}", to.display()))?;
        crate::treecopy::copy_tree(&upper, &to)?;
    }
    match std::fs::rename(out, dir) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            let mut partial = dir.as_os_str().to_owned();
            partial.push(".partial");
            let partial = PathBuf::from(partial);
            std::fs::create_dir(&partial)
                .with_context(|| format!("creating {}", partial.display()))?;
            crate::treecopy::copy_tree(out, &partial)?;
            std::fs::rename(&partial, dir)
                .with_context(|| format!("renaming {} to {}", partial.display(), dir.display()))?;
            crate::cowroot::remove_all(out)?;
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("moving the checkpoint to {}", dir.display())),
    }
}

/// `torpor restore [OPTIONS] DIR`, or runc's form `restore --image-path DIR [--bundle B]
/// [--detach] [--pid-file P] [--console-socket S] ID`: the OCI container ID restored into
/// its bundle (its root is the container's own, which kept its files).
pub fn restore(args: crate::cli::RestoreArgs) -> Result<u8> {
    if let Some(image) = &args.image_path {
        // Every check before the holder starts.
        Restoring::open(image)?;
        return crate::oci::run(
            &crate::oci::CreateOptions {
                id: args.dir.to_string_lossy().into_owned(),
                bundle: args.bundle.clone().unwrap_or_else(|| ".".into()),
                pid_file: args.pid_file.clone(),
                console_socket: args.console_socket.clone(),
                restore: Some(image.clone()),
            },
            args.detach,
        );
    }
    let id = crate::statedir::id_or_new(args.name.as_deref())?;
    // Every check before anything starts (also before a detached holder is).
    let restoring = Restoring::open(&args.dir)?;
    if args.detach {
        return crate::run::detach(&id, "restore");
    }
    // This process is the holder.
    restoring.enter_time_namespace()?;
    let (record, mut cfg) = restoring.config(args.rootfs.as_deref())?;
    if !args.publish.is_empty() {
        cfg.publish = args.publish.clone();
    }
    let holding = crate::daemon::Holding::friendly(args.ready_fd, Vec::new());
    crate::daemon::serve_from(
        &cfg,
        &id,
        &crate::daemon::Policy {
            wake_mode: args.wake_mode.unwrap_or(record.wake_mode),
            swap_quota: None,
            hibernate_after: None,
            memory_floor: None,
            dormant_after: None,
            cpus: None,
        },
        crate::ready::from_fd(args.ready_fd),
        holding,
        crate::daemon::Origin::Restore(Box::new(restoring)),
    )
}

/// `torpor run --from DIR [OPTIONS] [ROOTFS]`: a new sandbox cloned from a checkpoint. It
/// carries on where the checkpointed sandbox was, under a new ID, with its own published
/// ports (`--publish`; none by default: the checkpoint's are another sandbox's), its own
/// copy of the files the checkpointed sandbox had written, and its memory the checkpoint's
/// image mapped copy-on-write: any number of clones run at once, sharing the pages they only
/// read. What a clone must not hold, and what it shares with its template: `docs/SECURITY.md`.
pub fn clone(args: crate::cli::RunArgs) -> Result<u8> {
    let Some(from) = args.from.clone() else {
        bail!("run --from needs a checkpoint directory");
    };
    if !args.command.is_empty() {
        bail!("run --from starts the checkpoint's program: give no PROGRAM");
    }
    if args.dormant && !args.detach && args.ready_fd < 0 {
        bail!("run --from --dormant starts a detached instance: add -d");
    }
    let id = crate::statedir::id_or_new(args.name.as_deref())?;
    let mut restoring = Restoring::open(&from)?;
    restoring.hostname = args.hostname.clone();
    if args.detach {
        return crate::run::detach(&id, "run");
    }
    // This process is the holder.
    restoring.enter_time_namespace()?;
    let (record, mut cfg) = restoring.config(args.rootfs.as_deref())?;
    cfg.publish = args.publish.clone();
    cfg.allow_outbound = args.allow_outbound || record.allow_outbound;
    let holding = crate::daemon::Holding::friendly(args.ready_fd, args.volume.clone());
    let origin = if args.dormant {
        crate::daemon::Origin::Provision(Box::new(restoring))
    } else {
        crate::daemon::Origin::Clone(Box::new(restoring))
    };
    crate::daemon::serve_from(
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
        origin,
    )
}
