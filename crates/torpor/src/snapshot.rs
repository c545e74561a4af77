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
//! hibernated, its memory paged in from the checkpoint's images as it is touched.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use hibernate::engine::{CheckpointState, HibernateHandle, Hibernator, WakeMode};
use hibernate::snapshot::{Blobs, Checkpoint, Kind, STATE};
use kernel::{Sandbox, SandboxConfig};
use serde::{Deserialize, Serialize};

use crate::control::{call, Request};

/// Where the holder writes a checkpoint, in its state directory.
pub const HOLDER_OUTPUT: &str = "checkpoint";

/// The checkpoint's copy of the sandbox's root's upper layer.
const UPPER: &str = "upper";

/// The file podman checks for in a checkpoint directory before a restore (CRIU's
/// inventory); runc's form of `checkpoint` writes a marker by that name.
const CRIU_INVENTORY: &str = "inventory.img";

/// How long a checkpoint may take.
const TIMEOUT: Duration = Duration::from_secs(120);

/// What a holder records of how its sandbox was started, so that a restore can start it
/// again the same way (saved beside the kernel state in `state.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HolderRecord {
    /// The root filesystem as given (the image, not the holder's overlay).
    pub rootfs: PathBuf,
    /// Program and arguments.
    pub program: String,
    /// argv.
    pub args: Vec<String>,
    /// Environment.
    pub env: Vec<String>,
    /// Working directory at start.
    pub cwd: String,
    /// Guest memory size.
    pub memory: u64,
    /// Published ports, `HOST_IP:HOST_PORT:GUEST_PORT`.
    pub publish: Vec<String>,
    /// Outbound connections allowed.
    pub allow_outbound: bool,
    /// The node name.
    pub hostname: String,
    /// Clean file pages shared through the page cache.
    pub share_files: bool,
    /// Most tasks.
    pub pids_limit: Option<usize>,
    /// How the sandbox wakes.
    pub wake_mode: WakeMode,
}

impl HolderRecord {
    /// The record of a sandbox started from `cfg`.
    pub fn of(cfg: &SandboxConfig, wake_mode: WakeMode) -> HolderRecord {
        HolderRecord {
            rootfs: cfg.rootfs.clone(),
            program: cfg.program.clone(),
            args: cfg.args.clone(),
            env: cfg.env.clone(),
            cwd: cfg.cwd.clone(),
            memory: cfg.memory,
            publish: cfg
                .publish
                .iter()
                .map(|p| match p.host {
                    std::net::SocketAddr::V4(a) => {
                        format!("{}:{}:{}", a.ip(), a.port(), p.guest_port)
                    }
                    std::net::SocketAddr::V6(a) => {
                        format!("[{}]:{}:{}", a.ip(), a.port(), p.guest_port)
                    }
                })
                .collect(),
            allow_outbound: cfg.allow_outbound,
            hostname: cfg.hostname.clone(),
            share_files: cfg.share_files,
            pids_limit: cfg.pids_limit,
            wake_mode,
        }
    }

    /// The configuration a restore runs with.
    ///
    /// # Errors
    /// A published port that does not parse.
    pub fn config(&self) -> Result<SandboxConfig> {
        Ok(SandboxConfig {
            rootfs: self.rootfs.clone(),
            program: self.program.clone(),
            args: self.args.clone(),
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            memory: self.memory,
            publish: self
                .publish
                .iter()
                .map(|p| {
                    p.parse()
                        .map_err(|e| anyhow::anyhow!("published port {p:?}: {e}"))
                })
                .collect::<Result<_>>()?,
            allow_outbound: self.allow_outbound,
            own_netns: false,
            creds: None,
            rlimits: None,
            pids_limit: self.pids_limit,
            hostname: self.hostname.clone(),
            share_files: self.share_files,
            platform: crate::platforms::open()?,
        })
    }
}

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
    let state = call(&sdir, &Request::State, Duration::from_secs(10))?;
    if state["status"] == "hibernated" {
        // Parked in its wait for a wake: the checkpoint parks it again, from a wake.
        call(&sdir, &Request::Wake, Duration::from_secs(10))?;
    }
    call(&sdir, &Request::Checkpoint, TIMEOUT).context("writing the checkpoint")?;
    let result = finish_checkpoint(&sdir, &out, dir);
    if result.is_err() {
        let _ = crate::cowroot::remove_all(&out);
    }
    // Paused by the checkpoint: resumed, or stopped (an OCI container as runc leaves it:
    // stopped, its state kept until the engine's `delete`).
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
        crate::cowroot::copy_tree(&upper, &to)?;
    }
    match std::fs::rename(out, dir) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            let mut partial = dir.as_os_str().to_owned();
            partial.push(".partial");
            let partial = PathBuf::from(partial);
            std::fs::create_dir(&partial)
                .with_context(|| format!("creating {}", partial.display()))?;
            crate::cowroot::copy_tree(out, &partial)?;
            std::fs::rename(&partial, dir)
                .with_context(|| format!("renaming {} to {}", partial.display(), dir.display()))?;
            crate::cowroot::remove_all(out)?;
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("moving the checkpoint to {}", dir.display())),
    }
}

/// A checkpoint opened for a restore: every check passed, its state read.
pub struct Restoring {
    /// A clone's own host name (`run --from --hostname`).
    pub hostname: Option<String>,
    dir: PathBuf,
    checkpoint: Checkpoint,
    state: CheckpointState,
    blobs: Blobs,
}

impl Restoring {
    /// Opens and checks the checkpoint at `dir` (nothing is started).
    ///
    /// # Errors
    /// The first check that fails, naming the file; a state this build cannot read.
    pub fn open(dir: &Path) -> Result<Restoring> {
        let checkpoint = Checkpoint::open(dir)?;
        let payload = checkpoint.envelope(STATE, Kind::State)?;
        let state: CheckpointState = serde_json::from_slice(&payload)
            .with_context(|| format!("corrupt checkpoint file {}", dir.join(STATE).display()))?;
        let blobs = checkpoint.blobs()?;
        Ok(Restoring {
            hostname: None,
            dir: dir.to_path_buf(),
            checkpoint,
            state,
            blobs,
        })
    }

    /// How the checkpointed sandbox was started.
    ///
    /// # Errors
    /// A record this build cannot read.
    pub fn record(&self) -> Result<HolderRecord> {
        serde_json::from_value(self.state.holder.clone()).with_context(|| {
            format!(
                "corrupt checkpoint file {}: the holder's record",
                self.dir.join(STATE).display()
            )
        })
    }

    /// Moves this process (single-threaded, before anything of the sandbox is made) into a
    /// new time namespace whose monotonic clock continues from the checkpoint's, as after a
    /// suspend (the time the sandbox spent checkpointed is not counted; boot time counts it),
    /// so that the restored application never sees its monotonic time go back, also after
    /// the host restarted. Needs CAP_SYS_ADMIN: without it (rootless), or for a checkpoint
    /// without clocks, the sandbox sees the host's clocks. Returns whether it did.
    ///
    /// # Errors
    /// The host's refusal once the namespace is made.
    pub fn enter_time_namespace(&self) -> Result<bool> {
        let Some(saved) = self.state.clocks else {
            return Ok(false);
        };
        // SAFETY: unshare of the time namespace for this process's children.
        if unsafe { libc::unshare(libc::CLONE_NEWTIME) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EPERM) {
                tracing::warn!("no time namespace (needs CAP_SYS_ADMIN): the restored sandbox sees the host's clocks");
                return Ok(false);
            }
            return Err(e).context("unshare(CLONE_NEWTIME)");
        }
        let now = hibernate::engine::Clocks::now();
        let monotonic = saved.monotonic_ns - now.monotonic_ns;
        let gap = (now.realtime_ns - saved.realtime_ns).max(0);
        let boottime = saved.boottime_ns + gap - now.boottime_ns;
        let line = |name: &str, ns: i64| {
            format!(
                "{name} {} {}\n",
                ns.div_euclid(1_000_000_000),
                ns.rem_euclid(1_000_000_000)
            )
        };
        std::fs::write(
            "/proc/self/timens_offsets",
            line("monotonic", monotonic) + &line("boottime", boottime),
        )
        .context("writing the time namespace's offsets")?;
        let ns = std::fs::File::open("/proc/self/ns/time_for_children")
            .context("opening the new time namespace")?;
        // SAFETY: setns into the time namespace just made, with its fd; this process is
        // single-threaded (nothing of the sandbox is made yet).
        if unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&ns), libc::CLONE_NEWTIME) } != 0 {
            return Err(std::io::Error::last_os_error()).context("entering the time namespace");
        }
        Ok(true)
    }

    /// How the checkpointed sandbox was started, and the configuration it is started again
    /// with, on `rootfs` if given (else the root it had), which must be a directory.
    ///
    /// # Errors
    /// As [`Restoring::record`]; a published port that does not parse; a missing root.
    pub fn config(&self, rootfs: Option<&Path>) -> Result<(HolderRecord, SandboxConfig)> {
        let record = self.record()?;
        let mut cfg = record.config()?;
        if let Some(r) = rootfs {
            cfg.rootfs = r.to_path_buf();
        }
        if !cfg.rootfs.is_dir() {
            bail!(
                "root filesystem {} does not exist or is not a directory (give it as \
                 ROOTFS, or with restore --rootfs)",
                cfg.rootfs.display()
            );
        }
        Ok((record, cfg))
    }

    /// The checkpoint's copy of the sandbox's root's upper layer, if it has one.
    pub fn upper(&self) -> Option<PathBuf> {
        let p = self.dir.join(UPPER);
        p.is_dir().then_some(p)
    }

    /// Builds the sandbox over `cfg` (its root already the new holder's overlay).
    ///
    /// # Errors
    /// A state that cannot be restored, or files that changed since.
    pub fn sandbox(&self, cfg: &SandboxConfig) -> Result<Sandbox> {
        Ok(kernel::checkpoint::restore(
            cfg,
            &self.state.kernel,
            &self.blobs,
            kernel::sandbox::runtime_stdio(),
            &[],
        )?)
    }

    /// Builds a clone over `cfg`: the sandbox as restored, its guest memory the checkpoint's
    /// memory image mapped copy-on-write ([`Restoring::memory_file`]), so every clone of the
    /// checkpoint shares the host page cache's one copy of the pages it only reads.
    ///
    /// # Errors
    /// As [`Restoring::sandbox`]; the memory file cannot be made or mapped.
    pub fn clone_sandbox(&self, cfg: &SandboxConfig) -> Result<Sandbox> {
        let mut memories = Vec::new();
        for p in &self.state.kernel.processes {
            let file = self.memory_file(p.pid)?;
            let mem = cfg
                .platform
                .memory_from_image(&file, cfg.memory)
                .with_context(|| {
                    format!(
                        "mapping the memory of process {} of {}",
                        p.pid,
                        self.dir.display()
                    )
                })?;
            memories.push((p.pid, mem));
        }
        let sandbox = kernel::checkpoint::restore(
            cfg,
            &self.state.kernel,
            &self.blobs,
            kernel::sandbox::runtime_stdio(),
            &memories,
        )?;
        if let Some(h) = &self.hostname {
            sandbox.set_hostname(h.as_bytes());
        }
        Ok(sandbox)
    }

    /// Process `pid`'s memory as a plain file for clones to map: guest-physical address =
    /// offset, absent pages holes (`mem-PID.raw` beside the checkpoint's image, made by the
    /// first clone from the image, every page checked as it is read, and kept for the next
    /// ones; written under a temporary name and renamed, so a clone never maps a partial
    /// one). Its pages are not checked again when mapped.
    ///
    /// # Errors
    /// The image's own errors; the host's writing or opening the file.
    pub fn memory_file(&self, pid: i32) -> Result<std::fs::File> {
        let raw = self.dir.join(format!("mem-{pid}.raw"));
        let image = self
            .checkpoint
            .path(&hibernate::engine::memory_image_name(pid))
            .with_context(|| format!("the checkpoint has no memory image of process {pid}"))?;
        let reader = hibernate::swapfile::SwapReader::open(&image)
            .with_context(|| format!("{}", image.display()))?;
        let size = reader.page_count() * platform::PAGE_SIZE;
        if let Ok(f) = std::fs::File::open(&raw) {
            if f.metadata().map(|m| m.len()).ok() == Some(size) {
                return Ok(f);
            }
        }
        let tmp = self
            .dir
            .join(format!("mem-{pid}.raw.{}.tmp", std::process::id()));
        let made = (|| -> Result<()> {
            use std::os::unix::fs::{FileExt, OpenOptionsExt};
            let out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&tmp)
                .with_context(|| format!("creating {}", tmp.display()))?;
            out.set_len(size)?;
            const BATCH: u32 = 512;
            let entries = reader.index().entries();
            let mut buf = vec![0u8; BATCH as usize * platform::PAGE_SIZE as usize];
            for (first, chunk) in (0u32..)
                .step_by(BATCH as usize)
                .zip(entries.chunks(BATCH as usize))
            {
                let n = chunk.len() as u32;
                let bytes = &mut buf[..n as usize * platform::PAGE_SIZE as usize];
                reader.read_slots_into(first, n, bytes)?;
                for (i, e) in chunk.iter().enumerate() {
                    let page =
                        &bytes[i * platform::PAGE_SIZE as usize..][..platform::PAGE_SIZE as usize];
                    out.write_all_at(page, e.page().0 * platform::PAGE_SIZE)?;
                }
            }
            out.sync_all()?;
            std::fs::rename(&tmp, &raw)
                .with_context(|| format!("renaming {} to {}", tmp.display(), raw.display()))?;
            Ok(())
        })();
        if let Err(e) = made {
            let _ = std::fs::remove_file(&tmp);
            return Err(e).with_context(|| format!("making {}", raw.display()));
        }
        std::fs::File::open(&raw).with_context(|| format!("opening {}", raw.display()))
    }

    /// The park hook and handle of `sandbox` just restored: hibernated, paging in from the
    /// checkpoint's memory image.
    ///
    /// # Errors
    /// The image's checks, or userfaultfd refused.
    pub fn hibernator(
        &self,
        sandbox: &Sandbox,
        dir: PathBuf,
        mode: WakeMode,
    ) -> Result<(Hibernator, HibernateHandle)> {
        hibernate::engine::restored(
            &self.checkpoint,
            &sandbox.process_memories(),
            sandbox.control(),
            dir,
            mode,
        )
        .map_err(|e| anyhow::anyhow!("restoring the memory: {e}"))
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
    crate::daemon::serve_from(
        &cfg,
        &id,
        &crate::daemon::Policy {
            wake_mode: args.wake_mode,
            swap_quota: args.swap_quota,
            hibernate_after: None,
            memory_floor: None,
            cpus: args.cpus,
        },
        crate::ready::from_fd(args.ready_fd),
        holding,
        crate::daemon::Origin::Clone(Box::new(restoring)),
    )
}
