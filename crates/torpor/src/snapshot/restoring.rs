//! A checkpoint as the holder sees it: the record of how its sandbox was started
//! ([`HolderRecord`], saved in the checkpoint's state) and a checkpoint opened for a restore or
//! a clone ([`Restoring`]: every check passed, the sandbox built from it, its memory paged in
//! or mapped). The verbs that write and start checkpoints are the parent module's.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use hibernate::engine::{CheckpointState, HibernateHandle, Hibernator, WakeMode};
use hibernate::snapshot::{Blobs, Checkpoint, Kind, STATE};
use kernel::{Sandbox, SandboxConfig};
use serde::{Deserialize, Serialize};

/// Where the holder writes a checkpoint, in its state directory.
pub const HOLDER_OUTPUT: &str = "checkpoint";

/// The checkpoint's copy of the sandbox's root's upper layer.
pub(crate) const UPPER: &str = "upper";

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
            publish: cfg.publish.iter().map(publish_spec).collect(),
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
            kept_sockets: Default::default(),
        })
    }
}

/// `p` as `--publish` takes it: `HOST_IP:HOST_PORT:GUEST_PORT`, an IPv6 address in brackets.
pub fn publish_spec(p: &kernel::net::Publish) -> String {
    match p.host {
        std::net::SocketAddr::V4(a) => format!("{}:{}:{}", a.ip(), a.port(), p.guest_port),
        std::net::SocketAddr::V6(a) => format!("[{}]:{}:{}", a.ip(), a.port(), p.guest_port),
    }
}

/// A checkpoint opened for a restore: every check passed, its state read.
pub struct Restoring {
    /// A clone's own host name (`run --from --hostname`).
    pub hostname: Option<String>,
    /// The restored sandbox is a new boot (a fork), not the checkpointed one.
    pub new_boot: bool,
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
            new_boot: false,
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
        self.sandbox_over(cfg, &[])
    }

    /// [`Restoring::sandbox`] over `memories` (pid and guest memory; a process not named
    /// gets a new, empty one).
    fn sandbox_over(
        &self,
        cfg: &SandboxConfig,
        memories: &[(i32, std::sync::Arc<platform::GuestMemory>)],
    ) -> Result<Sandbox> {
        let sandbox = kernel::checkpoint::restore(
            cfg,
            &self.state.kernel,
            &self.blobs,
            kernel::sandbox::runtime_stdio(),
            memories,
        )?;
        if self.new_boot {
            sandbox.renew_boot_id();
        }
        Ok(sandbox)
    }

    /// Builds the sandbox as [`Restoring::sandbox`] does, with its park hook and handle as
    /// [`Restoring::hibernator`] gives them, its memories made first and their working sets
    /// read in meanwhile, on a thread of their own (`hibernate::engine::page_in`): the wake
    /// of a dormant sandbox, whose request is waiting for it.
    ///
    /// # Errors
    /// As both.
    pub fn sandbox_prefetching(
        &self,
        cfg: &SandboxConfig,
        dir: PathBuf,
        mode: WakeMode,
    ) -> Result<(Sandbox, Hibernator, HibernateHandle)> {
        let mut memories = Vec::new();
        // A memory per process, or per family of processes that share one (forked
        // copy-on-write: the others name it in `memory_of`).
        for p in self.own_memories() {
            let mem = cfg
                .platform
                .new_memory(cfg.memory)
                .with_context(|| format!("the guest memory of process {}", p.pid))?;
            memories.push((p.pid, mem));
        }
        let paged = hibernate::engine::page_in(&self.checkpoint, &memories, dir, mode, true)
            .map_err(|e| anyhow::anyhow!("restoring the memory: {e}"))?;
        let sandbox = self.sandbox_over(cfg, &memories)?;
        let (hib, handle) = hibernate::engine::restored_paged(paged, sandbox.control())
            .map_err(|e| anyhow::anyhow!("restoring the memory: {e}"))?;
        Ok((sandbox, hib, handle))
    }

    /// The processes of the checkpoint with a memory of their own (and an image of it): all
    /// but those that share another's, forked copy-on-write.
    fn own_memories(&self) -> impl Iterator<Item = &kernel::checkpoint::state::ProcessState> {
        self.state
            .kernel
            .processes
            .iter()
            .filter(|p| p.memory_of.is_none())
    }

    /// Builds a clone over `cfg`: the sandbox as restored, its guest memory the checkpoint's
    /// memory image mapped copy-on-write ([`Restoring::memory_file`]), so every clone of the
    /// checkpoint shares the host page cache's one copy of the pages it only reads.
    ///
    /// # Errors
    /// As [`Restoring::sandbox`]; the memory file cannot be made or mapped.
    pub fn clone_sandbox(&self, cfg: &SandboxConfig) -> Result<Sandbox> {
        let mut memories = Vec::new();
        for p in self.own_memories() {
            let file = self.memory_file(p.pid)?;
            tracing::debug!(pid = p.pid, "clone: memory file open");
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
        tracing::debug!("clone: memory made");
        let sandbox = self.sandbox_over(cfg, &memories)?;
        if let Some(h) = &self.hostname {
            sandbox.set_hostname(h.as_bytes());
        }
        if !self.new_boot {
            // A clone always has a boot id of its own.
            sandbox.renew_boot_id();
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
        let layers = hibernate::engine::memory_image_layers(&self.checkpoint, pid);
        let mut readers = Vec::with_capacity(layers.len());
        for name in &layers {
            let image = self.checkpoint.path(name).with_context(|| {
                format!("the checkpoint has no memory image {name} of process {pid}")
            })?;
            readers.push(
                hibernate::swapfile::SwapReader::open(&image)
                    .with_context(|| format!("{}", image.display()))?,
            );
        }
        let size = readers[readers.len() - 1].page_count() * platform::PAGE_SIZE;
        if readers
            .iter()
            .any(|r| r.page_count() * platform::PAGE_SIZE != size)
        {
            anyhow::bail!("the memory images of process {pid} are of memories of other sizes");
        }
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
            let mut buf = vec![0u8; BATCH as usize * platform::PAGE_SIZE as usize];
            for reader in &readers {
                let entries = reader.index().entries();
                for (first, chunk) in (0u32..)
                    .step_by(BATCH as usize)
                    .zip(entries.chunks(BATCH as usize))
                {
                    let n = chunk.len() as u32;
                    let bytes = &mut buf[..n as usize * platform::PAGE_SIZE as usize];
                    reader.read_slots_into(first, n, bytes)?;
                    for (i, e) in chunk.iter().enumerate() {
                        let page = &bytes[i * platform::PAGE_SIZE as usize..]
                            [..platform::PAGE_SIZE as usize];
                        out.write_all_at(page, e.page().0 * platform::PAGE_SIZE)?;
                    }
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

    /// The host sockets the sandbox restored with `cfg` listens on, made now (bound through
    /// its network policy, listening): a dormant instance keeps them until its wake adopts
    /// them ([`kernel::checkpoint::listeners`]).
    ///
    /// # Errors
    /// A socket that cannot be made or bound.
    pub fn listeners(&self, cfg: &SandboxConfig) -> Result<Vec<std::os::fd::OwnedFd>> {
        Ok(kernel::checkpoint::listeners(cfg, &self.state.kernel)?)
    }

    /// Puts this checkpoint's files (those its manifest lists, and the manifest) into the new
    /// directory `dest`: hard links where both are on one file system (no copy of the pages),
    /// copies otherwise.
    ///
    /// # Errors
    /// The directory or a file cannot be made.
    pub fn link_into(&self, dest: &Path) -> Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dest)
            .with_context(|| format!("creating {}", dest.display()))?;
        let names = self
            .checkpoint
            .manifest()
            .files
            .iter()
            .map(|f| f.name.as_str())
            .chain([hibernate::snapshot::MANIFEST]);
        for name in names {
            let (from, to) = (self.dir.join(name), dest.join(name));
            std::fs::hard_link(&from, &to)
                .or_else(|_| std::fs::copy(&from, &to).map(|_| ()))
                .with_context(|| format!("putting {} into {}", from.display(), dest.display()))?;
        }
        Ok(())
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
