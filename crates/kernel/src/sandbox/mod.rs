//! A sandbox: builds the VM, the address space and the first task from a configuration, and
//! runs it to completion.

pub mod spawn;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use mm::MemoryManager;
use platform::{AddressSpace, GuestMemory, Platform};

use crate::fd::{FdTable, FileKind, OpenFile};
use crate::fs::{self, Root};
use crate::loader;
use crate::net::{NetPolicy, Publish};
use crate::task::{SignalState, Task};

pub use crate::task::ExitStatus;

/// What to run and with which limits (kept apart from the runtime objects it builds).
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// Host directory that becomes `/`.
    pub rootfs: PathBuf,
    /// Program path inside the root.
    pub program: String,
    /// argv (argv[0] included).
    pub args: Vec<String>,
    /// Environment, `K=V`.
    pub env: Vec<String>,
    /// Working directory inside the root.
    pub cwd: String,
    /// Guest memory size in bytes (a multiple of 4 MiB).
    pub memory: u64,
    /// Published ports.
    pub publish: Vec<Publish>,
    /// Whether the application may connect to hosts other than its own listeners.
    pub allow_outbound: bool,
    /// The sandbox's host sockets live in a network namespace of its own (given by an
    /// engine): binds and connects are passed through unchanged ([`NetPolicy::namespaced`]);
    /// `publish` and `allow_outbound` are then unused.
    pub own_netns: bool,
    /// The ids the application sees (`None`: the runtime's own).
    pub creds: Option<crate::creds::Credentials>,
    /// Resource limits of the first process (`None`: Linux's defaults).
    pub rlimits: Option<crate::task::rlimit::Rlimits>,
    /// Most tasks (threads of every process) the sandbox may hold; fork and clone fail with
    /// `EAGAIN` beyond (`None`: [`crate::task::process::DEFAULT_TASK_LIMIT`]).
    pub pids_limit: Option<usize>,
    /// The node name uname(2) reports (`torpor` for `torpor run`; an OCI bundle's
    /// `hostname`, the pod's name under Kubernetes).
    pub hostname: String,
    /// Whether clean pages of private file mappings (program text, libraries) are backed by
    /// the host's page cache and shared with every process and sandbox mapping the same
    /// file, instead of copied (`torpor run --no-share-files` turns it off).
    pub share_files: bool,
    /// What runs the application (`torpor run --platform`).
    pub platform: Arc<dyn Platform>,
    /// Host sockets kept from before this start, which the binds of published ports adopt
    /// (a dormant sandbox waking: its listeners with their waiting connections).
    pub kept_sockets: crate::net::KeptSockets,
}

/// One process of a sandbox, as `torpor ps` shows it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ProcessInfo {
    /// Its pid inside the sandbox.
    pub pid: i32,
    /// Its parent's (0 for the first process).
    pub ppid: i32,
    /// Its real user id.
    pub uid: u32,
    /// Its live threads.
    pub threads: usize,
    /// CPU time used, in milliseconds.
    pub cpu_ms: u64,
    /// Its name (`comm`).
    pub comm: String,
    /// Its arguments.
    pub args: Vec<String>,
}

/// Errors building or running a sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The root filesystem is missing or unusable.
    #[error("root filesystem {path}: {source}")]
    Rootfs {
        /// Host path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The program is not in the root.
    #[error("program {0} not found in the root filesystem")]
    ProgramNotFound(String),
    /// The program cannot be opened.
    #[error("cannot open program {path}: {errno}")]
    ProgramOpen {
        /// Guest path.
        path: String,
        /// Errno.
        errno: abi::Errno,
    },
    /// Loading failed.
    #[error(transparent)]
    Load(#[from] loader::LoadError),
    /// Guest memory could not be set up.
    #[error("guest memory: {0}")]
    Memory(String),
    /// The VM could not be built.
    #[error(transparent)]
    Platform(#[from] platform::PlatformError),
    /// A checkpoint's state cannot be restored.
    #[error("cannot restore the checkpoint: {0}")]
    Restore(String),
    /// The sandbox failed while running.
    #[error("sandbox failed: {0}")]
    Run(#[from] crate::task::TaskError),
}

/// Timings of the start-up, in microseconds since `Sandbox::build` began.
#[derive(Clone, Copy, Debug, Default)]
pub struct StartTimings {
    /// VM, memory and task built, program loaded.
    pub built_us: u64,
}

/// A built sandbox, ready to run its first task.
pub struct Sandbox {
    task: Task,
    /// The first process's other threads, started by [`Sandbox::run`] (a restore).
    threads: Vec<Task>,
    started: Instant,
    /// Start-up timings.
    pub timings: StartTimings,
    _space: Arc<dyn AddressSpace>,
}

impl Sandbox {
    /// Builds the sandbox: memory, VM, address space, the loaded program and its stack.
    ///
    /// # Errors
    /// [`SandboxError`] for a missing root or program, a bad ELF, or a KVM failure.
    pub fn build(cfg: &SandboxConfig) -> Result<Sandbox, SandboxError> {
        let started = Instant::now();
        let root = Root::open(&cfg.rootfs).map_err(|source| SandboxError::Rootfs {
            path: cfg.rootfs.clone(),
            source,
        })?;
        let creds = Arc::new(
            cfg.creds
                .clone()
                .unwrap_or_else(crate::creds::Credentials::of_runtime),
        );
        crate::task::affinity::remember();
        let procs = crate::task::ProcessTable::new();
        procs.shm.set_share_files(cfg.share_files);
        let program = Program {
            path: &cfg.program,
            args: &cfg.args,
            env: &cfg.env,
        };
        let image = ProcessImage::build(
            &cfg.platform,
            &root,
            program,
            cfg.memory,
            &creds,
            &procs.shm,
        )?;
        let stdio = runtime_stdio();
        if let Some(n) = cfg.pids_limit {
            procs.set_task_limit(n);
        }
        // The memory limit bounds the sandbox, all its processes together.
        procs.memory.set_limit(cfg.memory / platform::PAGE_SIZE);
        procs.set_nodename(cfg.hostname.as_bytes());
        let slot = procs
            .reserve_task()
            .map_err(|_| SandboxError::Memory("no room for the first task".into()))?;
        let space = image.space.clone();
        let task = image.into_task(NewProcess {
            pid: 1,
            procs,
            slot,
            root: Arc::new(root),
            cwd: &cfg.cwd,
            net: Arc::new(net_policy(cfg)),
            creds,
            rlimits: cfg.rlimits.clone().unwrap_or_default(),
            stdio,
            program: &cfg.program,
        });
        let timings = StartTimings {
            built_us: started.elapsed().as_micros() as u64,
        };
        Ok(Sandbox {
            task,
            threads: Vec::new(),
            started,
            timings,
            _space: space,
        })
    }

    /// A sandbox whose first task is `task` (built by a restore).
    pub(crate) fn from_task(
        task: Task,
        started: Instant,
        space: Arc<dyn AddressSpace>,
        threads: Vec<Task>,
    ) -> Sandbox {
        let timings = StartTimings {
            built_us: started.elapsed().as_micros() as u64,
        };
        Sandbox {
            task,
            threads,
            started,
            timings,
            _space: space,
        }
    }

    /// When `build` began.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Runs the first task until the application exits.
    ///
    /// # Errors
    /// [`SandboxError::Run`] on a host failure.
    pub fn run(mut self) -> Result<ExitStatus, SandboxError> {
        for t in std::mem::take(&mut self.threads) {
            let tid = t.tid;
            if let Err(e) = t.spawn(format!("vcpu-{tid}")) {
                self.task
                    .group
                    .exit_group(ExitStatus::Signaled(libc::SIGKILL));
                return Err(SandboxError::Restore(format!("starting thread {tid}: {e}")));
            }
        }
        let status = self.task.run()?;
        // The first thread may end before the others (pthread_exit): the process lives on.
        let group = self.task.group.clone();
        group.wait_all_gone();
        // The first process is the sandbox's init: the others end with it.
        group.procs.kill_all_but(1);
        Ok(group.exit_status().unwrap_or(status))
    }

    /// Renames the sandbox (its UTS namespace: every process's node name), as a clone
    /// started under a host name of its own.
    pub fn set_hostname(&self, name: &[u8]) {
        self.task.group.procs.set_nodename(name);
    }

    /// Gives the sandbox a boot id of its own (a clone or a fork is not its template's boot).
    pub fn renew_boot_id(&self) {
        self.task
            .group
            .procs
            .set_boot_id(crate::task::new_boot_id());
    }

    /// Cross-thread control of the first task.
    pub fn control(&self) -> Arc<crate::task::TaskControl> {
        self.task.control.clone()
    }

    /// How many tasks (threads of every process) the sandbox holds now, as a function the
    /// holder can call later from any thread.
    pub fn live_tasks(&self) -> impl Fn() -> usize + Send + Sync + 'static {
        let procs = self.task.group.procs.clone();
        move || procs.live_tasks()
    }

    /// The sandbox's processes as a function the holder can call later from any thread
    /// (`torpor ps`: pids as the sandbox sees them), by pid.
    pub fn process_list(&self) -> impl Fn() -> Vec<ProcessInfo> + Send + Sync + 'static {
        let procs = self.task.group.procs.clone();
        move || {
            let mut out: Vec<ProcessInfo> = procs
                .live_groups()
                .into_iter()
                .map(|(pid, g)| {
                    let id = g.identity();
                    ProcessInfo {
                        pid,
                        ppid: procs.parent_of(pid),
                        uid: id.creds.uid,
                        threads: g.live(),
                        cpu_ms: g.cpu_time().as_millis() as u64,
                        comm: id.name(),
                        args: id.args(),
                    }
                })
                .collect();
            out.sort_by_key(|p| p.pid);
            out
        }
    }

    /// Sets what the first task runs when parked.
    pub fn set_park_hook(&mut self, hook: Box<dyn crate::task::ParkHook>) {
        self.task.park_hook = Some(hook);
    }

    /// Guest memory of the sandbox.
    pub fn memory(&self) -> Arc<GuestMemory> {
        self.task.mem.clone()
    }

    /// Lets every process's threads run from their first park on (a restore holds them until
    /// its park hook's wake; a clone, whose memory is there already, runs at once).
    pub fn release_held(&self) {
        for (_, g) in self.task.group.procs.live_groups() {
            g.resume_others();
        }
    }

    /// Maps ahead of their first touch, in each process, the file pages its checkpoint had
    /// mapped (`mm`'s `prefault_file_pages`), then has its platform map every page its tables
    /// hold: a clone's or a fork's memory is all there already, and on the trap platform,
    /// whose stubs map guest pages themselves, the first request would otherwise take a fault
    /// per page run (a platform whose application reaches memory through the runtime's
    /// mapping has nothing to map). Returns the pages mapped or asked for.
    pub fn map_ahead(&self) -> u64 {
        let mut spaces = vec![(self.task.mm.clone(), self.task.group.space())];
        for (pid, g) in self.task.group.procs.live_groups() {
            if pid != self.task.pid {
                if let Some(r) = g.resources() {
                    spaces.push((r.mm, r.space));
                }
            }
        }
        let mut pages = 0;
        for (mm, space) in spaces {
            let mut mm = mm.lock().unwrap_or_else(|e| e.into_inner());
            // The program's text and libraries the checkpointed process had mapped, mapped
            // again from the page cache (no guest fault a page when they run).
            pages += mm.prefault_file_pages() as u64;
            if space.holder_sees_writes() {
                continue;
            }
            let runs = mm.present_pages_of(|_| true);
            pages += runs.iter().map(|r| u64::from(r.count)).sum::<u64>();
            if let Err(e) = space.prefault(mm.cr3(), &runs) {
                tracing::warn!("mapping a process's pages ahead: {e}");
            }
        }
        pages
    }

    /// Each guest memory of the sandbox under the lowest pid of the processes that map it
    /// (processes forked copy-on-write share their parent's), the first process's first (a
    /// restored sandbox has several before it runs).
    pub fn process_memories(&self) -> Vec<(i32, Arc<GuestMemory>)> {
        let mut all = vec![(self.task.pid, self.task.mem.clone())];
        for (pid, g) in self.task.group.procs.live_groups() {
            if pid != self.task.pid {
                if let Some(r) = g.resources() {
                    all.push((pid, r.mem));
                }
            }
        }
        all.sort_by_key(|(pid, _)| *pid);
        // A memory once, under the lowest pid of the processes that share it.
        let mut out: Vec<(i32, Arc<GuestMemory>)> = Vec::with_capacity(all.len());
        for (pid, mem) in all {
            if !out.iter().any(|(_, m)| Arc::ptr_eq(m, &mem)) {
                out.push((pid, mem));
            }
        }
        // The first process's first.
        if let Some(i) = out.iter().position(|(_, m)| Arc::ptr_eq(m, &self.task.mem)) {
            let first = out.remove(i);
            out.insert(0, first);
        }
        out
    }

    /// Number of vCPU exits so far.
    pub fn exits(&self) -> u64 {
        self.task.ctx.exits()
    }

    /// A handle that starts more processes in this sandbox from outside (OCI `exec`).
    pub fn spawner(&self) -> spawn::Spawner {
        spawn::Spawner::new(
            self.task.group.platform.clone(),
            self.task.root.clone(),
            self.task.net.clone(),
            self.task.group.procs.clone(),
            self.task.mem.size(),
            self.task.creds.clone(),
            self.task
                .group
                .rlimits
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

/// A program loaded into fresh guest memory of its own, with its stack written and vCPU 0
/// ready at its entry point: what the first process and every process started from outside
/// begin with.
pub(crate) struct ProcessImage {
    pub(crate) mem: Arc<GuestMemory>,
    pub(crate) platform: Arc<dyn Platform>,
    pub(crate) space: Arc<dyn AddressSpace>,
    pub(crate) mm: MemoryManager,
    pub(crate) ctx: Box<dyn platform::Context>,
    /// The program's guest path.
    pub(crate) exe: Vec<u8>,
    /// Its file's (device, inode): not writable while the process runs (ETXTBSY).
    pub(crate) exe_key: Option<(u64, u64)>,
    /// Its argv, NUL-separated (/proc/PID/cmdline).
    pub(crate) cmdline: Arc<[u8]>,
    /// Its environment, NUL-separated (/proc/PID/environ).
    pub(crate) environ: Arc<[u8]>,
}

/// The program a new process runs: a guest path in the root, its arguments and environment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Program<'a> {
    /// The guest path.
    pub path: &'a str,
    /// argv.
    pub args: &'a [String],
    /// envp.
    pub env: &'a [String],
}

impl ProcessImage {
    /// Loads `program` (found in `root`) into `memory` bytes of new guest memory.
    pub(crate) fn build(
        platform: &Arc<dyn Platform>,
        root: &Root,
        program: Program<'_>,
        memory: u64,
        creds: &crate::creds::Credentials,
        files: &Arc<mm::SharedSpace>,
    ) -> Result<ProcessImage, SandboxError> {
        let Program {
            path: program,
            args,
            env,
        } = program;
        let prog_path = fs::join(b"/", program.as_bytes());
        let prog = match root.open_at(&prog_path, libc::O_RDONLY, 0) {
            Ok(fd) => fd,
            Err(e) if e == abi::Errno::ENOENT || e == abi::Errno::ENOTDIR => {
                return Err(SandboxError::ProgramNotFound(program.to_string()))
            }
            Err(errno) => {
                return Err(SandboxError::ProgramOpen {
                    path: program.to_string(),
                    errno,
                })
            }
        };
        // /proc/self/exe names the file itself, symlinks resolved (a program started through
        // /usr/bin/java → /etc/alternatives/java → … finds its libraries beside the real file).
        let exe = root
            .guest_path_of(&prog)
            .unwrap_or_else(|_| prog_path.clone());
        let exe_key = crate::fd::locks::regular_file_key(std::os::fd::AsFd::as_fd(&prog));
        let mem = platform
            .new_memory(memory)
            .map_err(|e| SandboxError::Memory(e.to_string()))?;
        let space = platform.new_address_space(mem.clone())?;
        let mut mm =
            MemoryManager::new(mem.clone()).map_err(|e| SandboxError::Memory(e.to_string()))?;
        let image = loader::load_elf(
            &mut mm,
            root,
            program,
            std::fs::File::from(prog),
            Some(files),
        )?;
        mm.set_brk_base(image.brk);
        let argv: Vec<Vec<u8>> = args.iter().map(|s| s.as_bytes().to_vec()).collect();
        let envp: Vec<Vec<u8>> = env.iter().map(|s| s.as_bytes().to_vec()).collect();
        let ids = loader::AuxIds::of(creds, false);
        let vdso = platform.vdso().map(|v| v.ehdr);
        let stack =
            loader::build_stack(&mut mm, &image, &argv, &envp, program.as_bytes(), ids, vdso)
                .map_err(|e| SandboxError::Memory(e.to_string()))?;
        let mut ctx = space.new_context(mm.cr3())?;
        ctx.user_mut().regs.rip = image.entry.raw();
        ctx.user_mut().regs.rsp = stack.sp.raw();
        Ok(ProcessImage {
            mem,
            platform: platform.clone(),
            space,
            mm,
            ctx,
            exe,
            exe_key,
            cmdline: crate::task::cmdline_of(&argv),
            environ: crate::task::cmdline_of(&envp),
        })
    }
}

/// What a process started from outside (the sandbox's first, or an exec'd one) gets besides
/// its image.
pub(crate) struct NewProcess<'a> {
    /// Its process id.
    pub(crate) pid: i32,
    /// The sandbox's processes; it is added there without a parent inside the sandbox.
    pub(crate) procs: Arc<crate::task::ProcessTable>,
    /// Its place in the task count.
    pub(crate) slot: crate::task::TaskSlot,
    /// The sandbox's root.
    pub(crate) root: Arc<Root>,
    /// Its working directory (a guest path).
    pub(crate) cwd: &'a str,
    /// The sandbox's network policy.
    pub(crate) net: Arc<NetPolicy>,
    /// The ids it sees.
    pub(crate) creds: Arc<crate::creds::Credentials>,
    /// Its resource limits.
    pub(crate) rlimits: crate::task::rlimit::Rlimits,
    /// Its descriptors 0-2.
    pub(crate) stdio: [Option<std::os::fd::OwnedFd>; 3],
    /// Its program (for its name).
    pub(crate) program: &'a str,
}

impl ProcessImage {
    /// The process's first task: a thread group of its own, registered in `p.procs` without
    /// a parent, with `p`'s descriptors, limits and ids.
    pub(crate) fn into_task(self, p: NewProcess<'_>) -> Task {
        self.mm.allocator().set_budget(p.procs.memory.clone());
        let fds = FdTable::new();
        install_stdio(&fds, p.stdio);
        fds.set_limit(p.rlimits.nofile());
        let group = crate::task::ThreadGroup::new(
            self.platform.clone(),
            self.space.clone(),
            p.pid,
            p.procs.clone(),
        );
        group.set_exe_key(self.exe_key);
        *group.rlimits.lock().unwrap_or_else(|e| e.into_inner()) = p.rlimits;
        crate::task::cpu_limit::CpuLimit::restart(&group);
        p.procs.add(p.pid, 0, group.clone(), 0);
        let control = Arc::new(crate::task::TaskControl::new(self.ctx.kicker()));
        control.set_comm(comm_of(p.program));
        group.join(p.pid, control.clone());
        let mm = Arc::new(Mutex::new(self.mm));
        let fds = Arc::new(fds);
        group.set_resources(crate::task::ProcessResources {
            mm: mm.clone(),
            mem: self.mem.clone(),
            fds: fds.clone(),
            space: self.space.clone(),
        });
        let task = Task {
            group,
            thread_exit_only: false,
            in_syscall: false,
            pins: Default::default(),
            control,
            park_hook: None,
            tid: p.pid,
            pid: p.pid,
            ctx: self.ctx,
            mm,
            mem: self.mem,
            fds,
            fs: crate::task::FsContext::new(resolve_cwd(&p.root, p.cwd), 0o022),
            root: p.root,
            net: p.net,
            signals: SignalState::default(),
            clear_child_tid: 0,
            exit: None,
            exe: self.exe,
            cmdline: self.cmdline,
            environ: self.environ,
            creds: p.creds,
            slot: p.slot,
        };
        task.publish_identity();
        task
    }
}

/// Copies of the runtime's standard streams (`None` for one that is closed), for the
/// sandbox's first process.
pub fn runtime_stdio() -> [Option<std::os::fd::OwnedFd>; 3] {
    std::array::from_fn(|n| {
        // SAFETY: duplicating the runtime's own stdio fd; the copy is owned by the caller.
        let d = unsafe { libc::fcntl(n as i32, libc::F_DUPFD_CLOEXEC, 3) };
        // SAFETY: `d` is a fresh fd owned by nobody else.
        (d >= 0)
            .then(|| unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(d) })
    })
}

/// The network policy `cfg` asks for.
pub(crate) fn net_policy(cfg: &SandboxConfig) -> NetPolicy {
    let net = if cfg.own_netns {
        NetPolicy::namespaced()
    } else if crate::broker::publishes() {
        NetPolicy::private_loopback(cfg.publish.clone())
    } else {
        NetPolicy::new(cfg.publish.clone(), cfg.allow_outbound)
    };
    net.keep_sockets(cfg.kept_sockets.take());
    net
}

/// The guest working directory `cwd` resolved in `root` (`/` if it is not a directory there).
pub(crate) fn resolve_cwd(root: &Root, cwd: &str) -> Vec<u8> {
    let c = fs::join(b"/", cwd.as_bytes());
    match root.open_at(&c, libc::O_PATH | libc::O_DIRECTORY, 0) {
        Ok(fd) => root.guest_path_of(&fd).unwrap_or(c),
        Err(_) => b"/".to_vec(),
    }
}

/// Puts `stdio` (fds for 0, 1 and 2; `None` leaves one closed) into a new descriptor table.
pub(crate) fn install_stdio(fds: &FdTable, stdio: [Option<std::os::fd::OwnedFd>; 3]) {
    for (n, fd) in stdio.into_iter().enumerate() {
        if let Some(owned) = fd {
            let _ = fds.insert_at(
                n as i32,
                Arc::new(OpenFile::new(owned, FileKind::Stdio, None)),
                false,
            );
        }
    }
}

/// A thread name from a program path: its last component, at most 15 bytes, NUL-padded.
pub(crate) fn comm_of(program: &str) -> [u8; 16] {
    let base = program.rsplit('/').next().unwrap_or(program).as_bytes();
    let mut c = [0u8; 16];
    let n = base.len().min(15);
    c[..n].copy_from_slice(&base[..n]);
    c
}
