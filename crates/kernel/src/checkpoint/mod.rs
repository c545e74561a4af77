//! Checkpoints of a sandbox's kernel state (issue 14, `docs/design/snapshots.md`): what its
//! processes, threads, descriptors and address spaces are, as plain data ([`state`]), taken
//! while every thread is parked, and a [`Sandbox`] built again from it in a new process.
//!
//! Guest memory is not here: the hibernate crate writes each process's pages into a memory
//! image and brings them back lazily. [`restore`] builds everything without touching guest
//! memory above the reserved region, so that the caller can register its pager first.
//!
//! Supported so far: every process with its threads; its descriptors may be the standard
//! streams, files, directories, host devices, pipes (with their buffered bytes), eventfds,
//! Internet sockets (listening ones listen again; connected ones come back reset) and epoll
//! instances watching them; the sandbox's System V message queues with their messages
//! ([`ipc`]); its processes' disarmed POSIX timers. Anything else makes the checkpoint fail
//! with the descriptor, process, timer or mapping it could not save, and the sandbox goes on
//! as before.

pub mod blobs;
mod families;
mod file_signals;
pub mod files;
pub mod ipc;
mod sockets;
pub mod state;
pub mod task;
#[cfg(test)]
mod tests;

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use mm::MemoryManager;
use platform::{AddressSpace, GuestMemory};

use crate::fs::Root;
use crate::sandbox::{resolve_cwd, Sandbox, SandboxConfig, SandboxError};
use crate::task::rlimit::{Limit, Rlimits, NLIMITS};
use crate::task::Membership;
use crate::task::{ProcessResources, ProcessTable, SignalState, Task, TaskControl, ThreadGroup};
use blobs::{BlobWriter, Blobs};
use state::{AnonSharedState, OpenFileState, ProcessState, SandboxState, VdsoState};

/// How long the parked threads have to give their state.
const THREAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Why a checkpoint or a restore failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The sandbox holds something a checkpoint cannot save yet.
    #[error("cannot checkpoint {0}")]
    Unsupported(String),
    /// A host call failed while saving.
    #[error("checkpoint: {0}")]
    Host(String),
    /// The saved state cannot be restored (malformed, or the files it names changed).
    #[error("cannot restore: {0}")]
    Restore(String),
}

/// Saves the kernel state of the parked sandbox `sandbox`, every thread of every process
/// parked (the caller, the park hook, holds them). The caller has unmapped the file
/// pages mapped from shared windows ([`mm::MemoryManager::drop_file_window_pages`]) before
/// saving the memory: a new process has no window where they were.
///
/// # Errors
/// [`CheckpointError::Unsupported`] for an object not supported yet; the host's error
/// reading one.
pub fn export(
    sandbox: &crate::task::ParkedSandbox<'_>,
    blobs: &mut BlobWriter,
) -> Result<SandboxState, CheckpointError> {
    export_with(sandbox, blobs, None)
}

/// [`export`] for a holder going dormant: its connected Internet sockets are saved as *kept*
/// (their host descriptors' numbers) and returned as copies, which the holder keeps open
/// through its dormancy for the restore to adopt ([`crate::net::KeptSockets`]).
///
/// # Errors
/// As [`export`].
pub fn export_keeping_connections(
    sandbox: &crate::task::ParkedSandbox<'_>,
    blobs: &mut BlobWriter,
) -> Result<(SandboxState, Vec<OwnedFd>), CheckpointError> {
    let keep = std::cell::RefCell::new(Vec::new());
    let state = export_with(sandbox, blobs, Some(&keep))?;
    Ok((state, keep.into_inner()))
}

fn export_with(
    sandbox: &crate::task::ParkedSandbox<'_>,
    blobs: &mut BlobWriter,
    keep: Option<&std::cell::RefCell<Vec<OwnedFd>>>,
) -> Result<SandboxState, CheckpointError> {
    let task = sandbox.task();
    let procs = &task.group.procs;
    if procs.sysv_shm.segment_count() > 0 || procs.sysv_sem.set_count() > 0 {
        return Err(CheckpointError::Unsupported(
            "System V shared memory or semaphores (not supported yet)".into(),
        ));
    }
    // Named queues (`MqNamespace::export`) are not in the state yet: refuse rather than lose
    // their messages. An open queue descriptor is refused with the open files.
    if procs.posix_mq.queue_count() > 0 {
        return Err(CheckpointError::Unsupported(
            "POSIX message queues (not supported yet)".into(),
        ));
    }
    if procs.exited_count() > 0 {
        return Err(CheckpointError::Unsupported(
            "a process that has exited and was not waited for (not supported yet)".into(),
        ));
    }
    // The caller's process first, then the others by pid.
    let mut groups = procs.live_groups();
    groups.sort_by_key(|(pid, _)| (*pid != task.pid, *pid));
    if groups.first().map(|(pid, _)| *pid) != Some(task.pid) {
        return Err(CheckpointError::Host(
            "the first process is not live".into(),
        ));
    }
    let mut resources = Vec::with_capacity(groups.len());
    let mut timers = Vec::with_capacity(groups.len());
    for (pid, g) in &groups {
        // A context's ring is the process's memory, but the context itself (its id, size and
        // trusted tail) is not in the state yet: refuse rather than restore a ring io_submit
        // and io_getevents would not know.
        if !g.aio.is_empty() {
            return Err(CheckpointError::Unsupported(format!(
                "process {pid}: Linux AIO contexts (io_setup; not supported yet)"
            )));
        }
        let armed = g.real_timer.get().0 != std::time::Duration::ZERO
            || g.cpu_timers
                .iter()
                .any(|t| t.get(g).0 != std::time::Duration::ZERO);
        if armed {
            return Err(CheckpointError::Unsupported(format!(
                "process {pid}: an armed interval timer (setitimer, alarm; not supported yet)"
            )));
        }
        timers.push(saved_timers(*pid, g)?);
        let r = g
            .resources()
            .ok_or_else(|| CheckpointError::Host(format!("process {pid} has no threads")))?;
        if resources
            .iter()
            .any(|(_, o): &(i32, crate::task::ProcessResources)| Arc::ptr_eq(&o.fds, &r.fds))
        {
            return Err(CheckpointError::Unsupported(format!(
                "process {pid}: a descriptor table shared with another process (not supported \
                 yet)"
            )));
        }
        resources.push((*pid, r));
    }
    let tables: Vec<(i32, &crate::fd::FdTable)> =
        resources.iter().map(|(pid, r)| (*pid, &*r.fds)).collect();
    let (files, open_files) = files::export(&tables, &task.root, &task.net, blobs, keep)?;
    let file_signals = file_signals::export(&tables, &files);
    let mut processes = Vec::with_capacity(groups.len());
    let mut anon = mm::AnonObjects::default();
    // Processes that share frames copy-on-write are saved a family at a time.
    let mut shared = families::export(&resources, &mut anon, blobs)?;
    let each = groups.iter().zip(&resources).zip(files).zip(timers);
    for ((((pid, g), (_, res)), files), posix_timers) in each {
        // Each parked thread gives its state from its own host thread; the caller's is here.
        let mine = *pid == task.pid;
        let others = g
            .capture_others(g.live().saturating_sub(usize::from(mine)), THREAD_TIMEOUT)
            .ok_or_else(|| {
                CheckpointError::Host(format!(
                    "process {pid}: the application's threads did not give their state"
                ))
            })?;
        let mut captured = Vec::with_capacity(others.len() + 1);
        if mine {
            captured.push(task::capture(task)?);
        }
        for c in others {
            captured.push(c.map_err(CheckpointError::Host)?);
        }
        // The leader first (a restored process's first thread), then by thread id.
        captured.sort_by_key(|c| (c.tid != *pid, c.tid));
        let actions = captured
            .first()
            .map(|c| c.actions.clone())
            .ok_or_else(|| CheckpointError::Host(format!("process {pid}: no thread")))?;
        let identity = g.identity();
        let (exe, cmdline, environ) = if mine {
            (
                task.exe.clone(),
                task.cmdline.to_vec(),
                task.environ.to_vec(),
            )
        } else {
            (
                identity.exe.clone(),
                identity.cmdline.to_vec(),
                identity.environ.to_vec(),
            )
        };
        let (ppid, execed, exit_signal) = procs.entry_of(*pid).unwrap_or((0, false, 0));
        let member = procs.membership(*pid).unwrap_or(Membership {
            pgid: *pid,
            sid: *pid,
        });
        let (mm, allocator, memory_of) = match shared.remove(pid) {
            Some(saved) => saved,
            None => {
                let (mm, allocator) = res
                    .mm
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .export(&mut anon)
                    .map_err(|e| CheckpointError::Unsupported(format!("process {pid}: {e}")))?;
                (mm, blobs.add(&allocator), None)
            }
        };
        let rlimits = {
            let l = g.rlimits.lock().unwrap_or_else(|e| e.into_inner());
            (0..NLIMITS as u32)
                .map(|r| l.get(r).map(|l| [l.cur, l.max]).unwrap_or([0, 0]))
                .collect()
        };
        processes.push(ProcessState {
            pid: *pid,
            ppid,
            pgid: member.pgid,
            sid: member.sid,
            execed,
            exit_signal,
            exe,
            cmdline,
            environ,
            rlimits,
            actions,
            mm,
            allocator,
            memory_of,
            files,
            posix_timers,
            threads: captured
                .into_iter()
                .map(|c| task::into_state(c, blobs))
                .collect(),
        });
    }
    Ok(SandboxState {
        nodename: procs.nodename(),
        domainname: procs.domainname(),
        boot_id: Some(procs.boot_id()),
        next_id: procs.next_id(),
        task_limit: procs.task_limit(),
        open_files,
        processes,
        vdso: task.group.platform.vdso().map(VdsoState::from),
        msg_queues: ipc::export_msg_queues(&procs.sysv_msg, blobs),
        ipc_limits: ipc::export_limits(procs),
        anon_shared: anon
            .objects()
            .iter()
            .map(|o| {
                o.read_all()
                    .map(|b| AnonSharedState {
                        bytes: blobs.add(&b),
                    })
                    .map_err(|e| CheckpointError::Host(format!("reading shared memory: {e}")))
            })
            .collect::<Result<_, _>>()?,
        file_signals,
    })
}

/// The POSIX timers of process `pid` as a checkpoint saves them: the disarmed ones.
fn saved_timers(
    pid: i32,
    g: &ThreadGroup,
) -> Result<Vec<crate::task::posix_timer::SavedTimer>, CheckpointError> {
    g.posix_timers.export(g).map_err(|e| {
        CheckpointError::Unsupported(format!(
            "process {pid}: an armed POSIX timer ({e}; not supported yet)"
        ))
    })
}

/// The host sockets a sandbox restored from `state` with `cfg` would listen on, made now as
/// its restore makes them (each listening Internet socket of the state bound through `cfg`'s
/// network policy, listening): for a dormant sandbox started from a checkpoint without
/// running it (`run --from --dormant`), whose wake adopts them, with the connections that
/// arrived meanwhile ([`crate::net::KeptSockets`]). Sockets bound only inside the sandbox's
/// own namespace are made too; the caller keeps those it publishes.
///
/// # Errors
/// [`SandboxError::Restore`] naming the socket that cannot be made.
pub fn listeners(cfg: &SandboxConfig, state: &SandboxState) -> Result<Vec<OwnedFd>, SandboxError> {
    let net = Arc::new(crate::sandbox::net_policy(cfg));
    let mut out = Vec::new();
    for (i, of) in state.open_files.iter().enumerate() {
        let OpenFileState::InetSocket {
            family,
            kind,
            protocol,
            flags,
            local,
            listening: true,
            options,
            ..
        } = of
        else {
            continue;
        };
        let file = sockets::import(
            &sockets::SocketSpec {
                family: *family,
                kind: *kind,
                protocol: *protocol,
                flags: *flags,
                local: local.as_deref(),
                listening: true,
                connected: false,
                options,
                kept: None,
            },
            &net,
        )
        .map_err(|e| SandboxError::Restore(format!("open file {i}: {e}")))?;
        let fd = file
            .host()
            .try_clone_to_owned()
            .map_err(|e| SandboxError::Restore(format!("open file {i}: {e}")))?;
        out.push(fd);
    }
    Ok(out)
}

/// Builds the sandbox `state` describes over `cfg`'s root, memory size and policies. Each
/// process's guest memory is the one `memories` gives for its pid (a clone's: the memory
/// image mapped privately), or fresh and empty above the reserved region: then the caller
/// registers the pager that fills it from the checkpoint's memory image before any thread
/// runs ([`Sandbox::process_memories`]). Every thread is asked to park at once (the caller's
/// park hook decides when they resume). `stdio` become the standard streams the sandbox's
/// descriptors named.
///
/// # Errors
/// [`SandboxError::Restore`] for a state this build cannot restore, or files that changed;
/// the other [`SandboxError`]s as [`Sandbox::build`].
pub fn restore(
    cfg: &SandboxConfig,
    state: &SandboxState,
    blobs: &Blobs,
    stdio: [Option<OwnedFd>; 3],
    memories: &[(i32, Arc<GuestMemory>)],
) -> Result<Sandbox, SandboxError> {
    let started = std::time::Instant::now();
    let bad = |e: CheckpointError| SandboxError::Restore(e.to_string());
    if let Some(v) = state.vdso {
        if cfg.platform.vdso().map(VdsoState::from) != Some(v) {
            return Err(SandboxError::Restore(format!(
                "the checkpoint's programs use the vDSO of the platform they ran on (at {:#x}, \
                 digest {:#x}), which the {} platform of this host does not map: restore it \
                 with the platform it was taken on, on the same kernel",
                v.ehdr,
                v.digest,
                cfg.platform.name()
            )));
        }
    }
    let first = state
        .processes
        .first()
        .ok_or_else(|| bad(CheckpointError::Restore("no process".into())))?;
    let first_thread = first
        .threads
        .first()
        .ok_or_else(|| bad(CheckpointError::Restore("a process without threads".into())))?;
    let root = Arc::new(
        Root::open(&cfg.rootfs).map_err(|source| SandboxError::Rootfs {
            path: cfg.rootfs.clone(),
            source,
        })?,
    );
    crate::task::affinity::remember();
    let procs = ProcessTable::new();
    procs.shm.set_share_files(cfg.share_files);
    procs.set_task_limit(state.task_limit);
    procs.memory.set_limit(cfg.memory / platform::PAGE_SIZE);
    procs.set_nodename(&state.nodename);
    procs.set_domainname(&state.domainname);
    if let Some(id) = state.boot_id {
        procs.set_boot_id(id);
    }
    ipc::import_msg_queues(&state.msg_queues, blobs, &procs.sysv_msg).map_err(bad)?;
    ipc::import_limits(&state.ipc_limits, &procs).map_err(bad)?;
    let net = Arc::new(crate::sandbox::net_policy(cfg));
    let owner = crate::net::unix::Ucred {
        pid: first.pid,
        uid: first_thread.uid,
        gid: first_thread.gid,
    };
    let files = files::import(&state.open_files, &root, &net, owner, blobs, &stdio).map_err(bad)?;
    file_signals::import(&state.file_signals, &files).map_err(bad)?;
    let anon = import_anon_shared(&state.anon_shared, blobs, &procs).map_err(bad)?;
    let cx = RestoreContext {
        cfg,
        blobs,
        root,
        procs: procs.clone(),
        net,
        files,
        anon,
        file_signals: &state.file_signals,
    };
    for p in &state.processes {
        if state.processes.iter().filter(|q| q.pid == p.pid).count() != 1 || p.pid < 1 {
            return Err(bad(CheckpointError::Restore(format!(
                "process {} twice",
                p.pid
            ))));
        }
    }
    // A memory per process, or per family (processes that share frames copy-on-write).
    let mut made = std::collections::HashMap::new();
    for family in families::of(&state.processes).map_err(bad)? {
        let first = family[0];
        if family.len() > 1 && !cfg.platform.address_spaces_share_memory() {
            return Err(SandboxError::Restore(format!(
                "processes {} share their memory copy-on-write (a fork on the trap platform): \
                 the {} platform cannot restore them yet (restore on the trap platform)",
                family
                    .iter()
                    .map(|p| p.pid.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                cfg.platform.name()
            )));
        }
        let memory = memories
            .iter()
            .find(|(pid, _)| *pid == first.pid)
            .map(|(_, m)| m.clone());
        let mem = cx.memory(first, memory)?;
        for (p, mm) in family.iter().zip(cx.address_spaces(&family, &mem)?) {
            made.insert(p.pid, cx.process(p, mem.clone(), mm)?);
        }
    }
    // The tasks in the state's order: the first process's leader is the sandbox's task.
    let mut tasks = Vec::new();
    let mut first_vm = None;
    for p in &state.processes {
        let (space, mut threads) = made
            .remove(&p.pid)
            .ok_or_else(|| bad(CheckpointError::Restore(format!("process {}", p.pid))))?;
        first_vm.get_or_insert(space);
        tasks.append(&mut threads);
    }
    let max_pid = state.processes.iter().map(|p| p.pid).max().unwrap_or(1);
    procs.set_next_id(state.next_id.max(max_pid + 1));
    let vm = first_vm.ok_or_else(|| bad(CheckpointError::Restore("no process".into())))?;
    let mut tasks = tasks.into_iter();
    let task = tasks
        .next()
        .ok_or_else(|| bad(CheckpointError::Restore("no thread".into())))?;
    Ok(Sandbox::from_task(task, started, vm, tasks.collect()))
}

/// What every restored process shares.
struct RestoreContext<'a> {
    cfg: &'a SandboxConfig,
    blobs: &'a Blobs,
    root: Arc<Root>,
    procs: Arc<ProcessTable>,
    net: Arc<crate::net::NetPolicy>,
    /// The open files of the sandbox, by [`state::FdState::file`].
    files: Vec<Arc<crate::fd::OpenFile>>,
    /// Its anonymous shared memory objects, made again with their bytes.
    anon: mm::AnonObjects,
    /// What its open files signal (directory notification requests are placed per table).
    file_signals: &'a [state::FileSignalsState],
}

/// The sandbox's anonymous shared memory objects made again in `procs`' shared space, each
/// holding its saved bytes, in their saved order.
fn import_anon_shared(
    saved: &[AnonSharedState],
    blobs: &Blobs,
    procs: &ProcessTable,
) -> Result<mm::AnonObjects, CheckpointError> {
    let mut objects = Vec::with_capacity(saved.len());
    for (i, a) in saved.iter().enumerate() {
        let bytes = blobs
            .get(a.bytes)
            .map_err(|e| CheckpointError::Restore(format!("shared memory object {i}: {e}")))?;
        if bytes.is_empty() || !(bytes.len() as u64).is_multiple_of(platform::PAGE_SIZE) {
            return Err(CheckpointError::Restore(format!(
                "shared memory object {i} of {} bytes",
                bytes.len()
            )));
        }
        let err =
            |e: std::io::Error| CheckpointError::Restore(format!("shared memory object {i}: {e}"));
        let o = procs
            .shm
            .anonymous(bytes.len() as u64, "anon")
            .map_err(err)?;
        // Its zero pages stay holes (a new object reads zero there), as they were not
        // allocated before either.
        for (n, page) in bytes.chunks(platform::PAGE_SIZE as usize).enumerate() {
            if page.iter().any(|&b| b != 0) {
                o.write_at(page, n as u64 * platform::PAGE_SIZE)
                    .map_err(err)?;
            }
        }
        objects.push(o);
    }
    Ok(mm::AnonObjects::of(objects))
}

impl RestoreContext<'_> {
    /// The memory of process `p` (with the processes that share it): `memory` if given,
    /// else a fresh one of the sandbox's size.
    fn memory(
        &self,
        p: &ProcessState,
        memory: Option<Arc<GuestMemory>>,
    ) -> Result<Arc<GuestMemory>, SandboxError> {
        let cfg = self.cfg;
        if p.mm.mem_size != cfg.memory {
            return Err(SandboxError::Restore(format!(
                "process {}: a guest memory of {} bytes, not {}",
                p.pid, p.mm.mem_size, cfg.memory
            )));
        }
        match memory {
            Some(m) if m.size() == cfg.memory => Ok(m),
            Some(m) => Err(SandboxError::Memory(format!(
                "a memory of {} bytes for a sandbox of {}",
                m.size(),
                cfg.memory
            ))),
            None => cfg
                .platform
                .new_memory(cfg.memory)
                .map_err(|e| SandboxError::Memory(e.to_string())),
        }
    }

    /// The address spaces of `family` (one process, or the processes that share `mem`: the
    /// one whose memory it is first) over `mem`, in its order.
    fn address_spaces(
        &self,
        family: &[&ProcessState],
        mem: &Arc<GuestMemory>,
    ) -> Result<Vec<MemoryManager>, SandboxError> {
        let first = family[0];
        let allocator = self.blobs.get(first.allocator).map_err(|e| {
            SandboxError::Restore(format!(
                "process {}: the page allocator's state: {e}",
                first.pid
            ))
        })?;
        let root = &self.root;
        let mut open = |id: &mm::FileId| -> Result<std::fs::File, String> {
            root.open_at(id.path.as_bytes(), libc::O_RDONLY | libc::O_CLOEXEC, 0)
                .map(std::fs::File::from)
                .map_err(|e| e.to_string())
        };
        let shm = Some(&self.procs.shm);
        let made = if let [p] = family {
            MemoryManager::import(mem.clone(), &p.mm, allocator, &mut open, shm, &self.anon)
                .map(|mm| vec![mm])
        } else {
            let images: Vec<&mm::MmImage> = family.iter().map(|p| &p.mm).collect();
            MemoryManager::import_family(
                mem.clone(),
                &images,
                allocator,
                &mut open,
                shm,
                &self.anon,
            )
        };
        made.map_err(|e| SandboxError::Restore(format!("process {}: {e}", first.pid)))
    }

    /// Builds process `p` with its address space `mm` over `mem`: its VM, descriptor
    /// table, thread group and threads (the first the leader), every thread asked to park
    /// and the group holding them.
    fn process(
        &self,
        p: &ProcessState,
        mem: Arc<GuestMemory>,
        mm: MemoryManager,
    ) -> Result<(Arc<dyn AddressSpace>, Vec<Task>), SandboxError> {
        let bad = |e: CheckpointError| SandboxError::Restore(e.to_string());
        let (cfg, blobs, procs) = (self.cfg, self.blobs, &self.procs);
        let Some((t, other_threads)) = p.threads.split_first() else {
            return Err(bad(CheckpointError::Restore(format!(
                "process {} has no threads",
                p.pid
            ))));
        };
        if other_threads.len() >= platform::layout::MAX_VCPUS {
            return Err(bad(CheckpointError::Restore(format!(
                "process {}: {} threads",
                p.pid,
                p.threads.len()
            ))));
        }
        let slot = procs
            .reserve_task()
            .map_err(|_| SandboxError::Memory(format!("no room for process {}", p.pid)))?;
        let space = cfg.platform.new_address_space(mem.clone())?;
        let root = &self.root;
        mm.allocator().set_budget(procs.memory.clone());
        let ctx = space.new_context(mm.cr3())?;
        let fds = files::table(&p.files, &self.files).map_err(bad)?;

        let group = ThreadGroup::new(cfg.platform.clone(), space.clone(), p.pid, procs.clone());
        let exe_key = root
            .open_at(&p.exe, libc::O_PATH | libc::O_CLOEXEC, 0)
            .ok()
            .and_then(|fd| crate::fd::locks::regular_file_key(std::os::fd::AsFd::as_fd(&fd)));
        group.set_exe_key(exe_key);
        {
            let mut limits = Rlimits::default();
            for (r, [cur, max]) in p.rlimits.iter().enumerate() {
                limits
                    .set(
                        r as u32,
                        Limit {
                            cur: *cur,
                            max: *max,
                        },
                    )
                    .map_err(|_| {
                        SandboxError::Restore(format!("resource limit {r}: {cur} > {max}"))
                    })?;
            }
            *group.rlimits.lock().unwrap_or_else(|e| e.into_inner()) = limits;
            crate::task::cpu_limit::CpuLimit::restart(&group);
        }
        group
            .posix_timers
            .import(&p.posix_timers)
            .map_err(|e| SandboxError::Restore(format!("process {}: {e}", p.pid)))?;
        procs.add(p.pid, p.ppid, group.clone(), p.exit_signal);
        procs.restore_entry(
            p.pid,
            Membership {
                pgid: p.pgid,
                sid: p.sid,
            },
            p.execed,
        );
        let control = Arc::new(TaskControl::new(ctx.kicker()));
        group.join(t.tid, control.clone());
        let mm = Arc::new(Mutex::new(mm));
        let fds = Arc::new(fds);
        file_signals::import_table(self.file_signals, p.pid, &fds, &self.files).map_err(bad)?;
        group.set_resources(ProcessResources {
            mm: mm.clone(),
            mem: mem.clone(),
            fds: fds.clone(),
            space: space.clone(),
        });
        let mut signals = SignalState::default();
        for (i, a) in p.actions.iter().enumerate().take(crate::task::NSIG) {
            signals.set_action(
                i as i32 + 1,
                abi::structs::KernelSigaction {
                    handler: a[0],
                    flags: a[1],
                    restorer: a[2],
                    mask: a[3],
                },
            );
        }
        let mut task = Task {
            group,
            thread_exit_only: false,
            in_syscall: false,
            pins: Default::default(),
            control,
            park_hook: None,
            tid: t.tid,
            pid: p.pid,
            ctx,
            mm,
            mem,
            fds,
            fs: crate::task::FsContext::new(Vec::new(), 0o022),
            root: root.clone(),
            net: self.net.clone(),
            signals,
            clear_child_tid: 0,
            exit: None,
            exe: p.exe.clone(),
            cmdline: p.cmdline.clone().into(),
            environ: p.environ.clone().into(),
            creds: Arc::new(crate::creds::Credentials::of_runtime()),
            slot,
        };
        task::import(&mut task, t, blobs).map_err(bad)?;
        let cwd = resolve_cwd(&task.root, &String::from_utf8_lossy(&task.cwd()));
        task.fs.set_cwd(cwd);
        task.publish_identity();
        // The first thing every thread does is park: the caller's hook holds the sandbox's
        // first thread until the wake, and each group holds its other threads until the hook
        // lets them go.
        task.group.hold_others();
        let mut tasks = Vec::with_capacity(p.threads.len());
        for ts in other_threads {
            let cr3 = task.mm().cr3();
            let ctx = space.new_context(cr3)?;
            let slot = procs.reserve_task().map_err(|_| {
                SandboxError::Restore(format!("no room for thread {} (pids limit)", ts.tid))
            })?;
            let mut th = task.child(crate::task::ChildParts {
                tid: ts.tid,
                pid: p.pid,
                ctx,
                mm: task.mm.clone(),
                mem: task.mem.clone(),
                fds: task.fds.clone(),
                group: task.group.clone(),
                signals: task.signals.clone(),
                clear_child_tid: 0,
                slot,
                // A process's threads share one (they were cloned with CLONE_FS).
                share_fs: true,
            });
            task::import(&mut th, ts, blobs).map_err(bad)?;
            let cwd = resolve_cwd(&th.root, &String::from_utf8_lossy(&th.cwd()));
            th.fs.set_cwd(cwd);
            th.control.set_park();
            tasks.push(th);
        }
        task.control.set_park();
        tasks.insert(0, task);
        Ok((space, tasks))
    }
}
