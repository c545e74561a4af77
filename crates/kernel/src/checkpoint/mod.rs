//! Checkpoints of a sandbox's kernel state (issue 14, `docs/design/snapshots.md`): what its
//! processes, threads, descriptors and address spaces are, as plain data ([`state`]), taken
//! while every thread is parked, and a [`Sandbox`] built again from it in a new process.
//!
//! Guest memory is not here: the hibernate crate writes each process's pages into a memory
//! image and brings them back lazily. [`restore`] builds everything without touching guest
//! memory above the reserved region, so that the caller can register its pager first.
//!
//! Supported so far: one process with its threads; its descriptors may be the standard
//! streams, files, directories, host devices, pipes (with their buffered bytes), eventfds,
//! Internet sockets (listening ones listen again; connected ones come back reset) and epoll
//! instances watching them. Anything else makes the checkpoint fail with the descriptor, process or mapping
//! it could not save, and the sandbox goes on as before.

pub mod blobs;
pub mod files;
mod sockets;
pub mod state;
pub mod task;
#[cfg(test)]
mod tests;

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use mm::MemoryManager;
use platform::{GuestMemory, Vm};

use crate::fs::Root;
use crate::sandbox::{resolve_cwd, Sandbox, SandboxConfig, SandboxError};
use crate::task::rlimit::{Limit, Rlimits, NLIMITS};
use crate::task::Membership;
use crate::task::{ProcessResources, ProcessTable, SignalState, Task, TaskControl, ThreadGroup};
use blobs::{BlobWriter, Blobs};
use state::{ProcessState, SandboxState};

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

/// Saves the kernel state of the sandbox whose first thread is `task`, every thread parked
/// (the caller, the park hook, holds them). The caller has unmapped the file pages mapped
/// from shared windows ([`mm::MemoryManager::drop_file_window_pages`]) before saving the
/// memory: a new process has no window where they were.
///
/// # Errors
/// [`CheckpointError::Unsupported`] for more than one process or thread, or an object not
/// supported yet; the host's error reading one.
pub fn export(task: &Task, blobs: &mut BlobWriter) -> Result<SandboxState, CheckpointError> {
    let procs = &task.group.procs;
    let live = procs.live_groups();
    if live.len() != 1 {
        return Err(CheckpointError::Unsupported(format!(
            "a sandbox of {} processes (only one process is supported yet)",
            live.len(),
        )));
    }
    if task.group.real_timer.get().0 != std::time::Duration::ZERO
        || task
            .group
            .cpu_timers
            .iter()
            .any(|t| t.get(&task.group.cpu).0 != std::time::Duration::ZERO)
    {
        return Err(CheckpointError::Unsupported(
            "an armed interval timer (setitimer, alarm; not supported yet)".into(),
        ));
    }
    if procs.sysv_shm.segment_count() > 0 || procs.sysv_sem.set_count() > 0 {
        return Err(CheckpointError::Unsupported(
            "System V shared memory or semaphores (not supported yet)".into(),
        ));
    }
    let (ppid, execed, exit_signal) = procs.entry_of(task.pid).unwrap_or((0, false, 0));
    let member = procs.membership(task.pid).unwrap_or(Membership {
        pgid: task.pid,
        sid: task.pid,
    });
    let (mm, allocator) = {
        task.mm()
            .export()
            .map_err(|e| CheckpointError::Unsupported(format!("process {}: {e}", task.pid)))?
    };
    let rlimits = {
        let l = task.group.rlimits.lock().unwrap_or_else(|e| e.into_inner());
        (0..NLIMITS as u32)
            .map(|r| l.get(r).map(|l| [l.cur, l.max]).unwrap_or([0, 0]))
            .collect()
    };
    let actions = (1..=crate::task::NSIG as i32)
        .map(|s| {
            let a = task.signals.action(s);
            [a.handler, a.flags, a.restorer, a.mask]
        })
        .collect();
    let files = files::export(task.pid, &task.fds, &task.root, &task.net, blobs)?;
    // The other threads, parked by the caller, each give their state from their own thread.
    let others = task
        .group
        .capture_others(task.group.live().saturating_sub(1), THREAD_TIMEOUT)
        .ok_or_else(|| {
            CheckpointError::Host("the application's threads did not give their state".into())
        })?;
    let mut threads = vec![task::export(task, blobs)?];
    for c in others {
        threads.push(c.map_err(CheckpointError::Host)?.into_state(blobs));
    }
    threads[1..].sort_by_key(|t| t.tid);
    Ok(SandboxState {
        nodename: procs.nodename(),
        domainname: procs.domainname(),
        next_id: procs.next_id(),
        task_limit: procs.task_limit(),
        processes: vec![ProcessState {
            pid: task.pid,
            ppid,
            pgid: member.pgid,
            sid: member.sid,
            execed,
            exit_signal,
            exe: task.exe.clone(),
            cmdline: task.cmdline.to_vec(),
            rlimits,
            actions,
            mm,
            allocator: blobs.add(&allocator),
            files,
            threads,
        }],
    })
}

/// Builds the sandbox `state` describes over `cfg`'s root, memory size and policies. Its
/// guest memory is `memory` (a clone's: the memory image mapped privately), or fresh and
/// empty above the reserved region: then the caller registers the pager that fills it from
/// the checkpoint's memory image before the first task runs. Every thread is asked to park
/// at once (the caller's park hook decides when they resume). `stdio` become the standard
/// streams the sandbox's descriptors named.
///
/// # Errors
/// [`SandboxError::Restore`] for a state this build cannot restore, or files that changed;
/// the other [`SandboxError`]s as [`Sandbox::build`].
pub fn restore(
    cfg: &SandboxConfig,
    state: &SandboxState,
    blobs: &Blobs,
    stdio: [Option<OwnedFd>; 3],
    memory: Option<Arc<GuestMemory>>,
) -> Result<Sandbox, SandboxError> {
    let started = std::time::Instant::now();
    let bad = |e: CheckpointError| SandboxError::Restore(e.to_string());
    let [p] = &state.processes[..] else {
        return Err(bad(CheckpointError::Restore(format!(
            "{} processes (one is supported yet)",
            state.processes.len()
        ))));
    };
    let Some((t, other_threads)) = p.threads.split_first() else {
        return Err(bad(CheckpointError::Restore(
            "a process without threads".into(),
        )));
    };
    if t.tid != p.pid || other_threads.len() >= platform::layout::MAX_VCPUS {
        return Err(bad(CheckpointError::Restore(format!(
            "process {}: {} threads, the first {}",
            p.pid,
            p.threads.len(),
            t.tid
        ))));
    }
    let root = Root::open(&cfg.rootfs).map_err(|source| SandboxError::Rootfs {
        path: cfg.rootfs.clone(),
        source,
    })?;
    if p.mm.mem_size != cfg.memory {
        return Err(bad(CheckpointError::Restore(format!(
            "the checkpoint's guest memory is {} bytes, not {}",
            p.mm.mem_size, cfg.memory
        ))));
    }
    let procs = ProcessTable::new();
    procs.shm.set_share_files(cfg.share_files);
    procs.set_task_limit(state.task_limit);
    procs.memory.set_limit(cfg.memory / platform::PAGE_SIZE);
    procs.set_nodename(&state.nodename);
    procs.set_domainname(&state.domainname);
    let slot = procs
        .reserve_task()
        .map_err(|_| SandboxError::Memory("no room for the first task".into()))?;

    let mem = match memory {
        Some(m) if m.size() == cfg.memory => m,
        Some(m) => {
            return Err(SandboxError::Memory(format!(
                "a memory of {} bytes for a sandbox of {}",
                m.size(),
                cfg.memory
            )))
        }
        None => {
            Arc::new(GuestMemory::new(cfg.memory).map_err(|e| SandboxError::Memory(e.to_string()))?)
        }
    };
    let vm = Arc::new(Vm::new(mem.clone())?);
    let allocator = blobs
        .get(p.allocator)
        .map_err(|e| SandboxError::Restore(format!("the page allocator's state: {e}")))?;
    let mut open = |id: &mm::FileId| -> Result<std::fs::File, String> {
        root.open_at(id.path.as_bytes(), libc::O_RDONLY | libc::O_CLOEXEC, 0)
            .map(std::fs::File::from)
            .map_err(|e| e.to_string())
    };
    let mut mm = MemoryManager::import(mem.clone(), &p.mm, allocator, &mut open, Some(&procs.shm))
        .map_err(|e| SandboxError::Restore(e.to_string()))?;
    mm.allocator_mut().set_budget(procs.memory.clone());
    let vcpu = vm.create_vcpu(0, mm.cr3())?;
    let net = Arc::new(crate::sandbox::net_policy(cfg));
    let owner = crate::net::unix::Ucred {
        pid: p.pid,
        uid: t.uid,
        gid: t.gid,
    };
    let fds = files::import(&p.files, &root, &net, owner, blobs, &stdio).map_err(bad)?;

    let group = ThreadGroup::new(vm.clone(), p.pid, procs.clone());
    let exe_key = root
        .open_at(&p.exe, libc::O_PATH | libc::O_CLOEXEC, 0)
        .ok()
        .and_then(|fd| crate::fd::locks::regular_file_key(std::os::fd::AsFd::as_fd(&fd)));
    group.set_exe_key(exe_key);
    {
        let mut l = group.rlimits.lock().unwrap_or_else(|e| e.into_inner());
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
                .map_err(|_| SandboxError::Restore(format!("resource limit {r}: {cur} > {max}")))?;
        }
        *l = limits;
    }
    procs.add(p.pid, p.ppid, group.clone(), p.exit_signal);
    procs.restore_entry(
        p.pid,
        Membership {
            pgid: p.pgid,
            sid: p.sid,
        },
        p.execed,
    );
    procs.set_next_id(state.next_id.max(p.pid + 1));
    let control = Arc::new(TaskControl::new(vcpu.kicker()));
    let pte_gen = group.join(t.tid, control.clone());
    let mm = Arc::new(Mutex::new(mm));
    let fds = Arc::new(fds);
    group.set_resources(ProcessResources {
        mm: mm.clone(),
        mem: mem.clone(),
        fds: fds.clone(),
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
        pte_gen,
        thread_exit_only: false,
        in_syscall: false,
        control,
        park_hook: None,
        tid: t.tid,
        pid: p.pid,
        vcpu,
        mm,
        mem,
        fds,
        cwd: Vec::new(),
        root: Arc::new(root),
        umask: 0o022,
        net,
        signals,
        clear_child_tid: 0,
        exit: None,
        comm: [0; 16],
        exe: p.exe.clone(),
        cmdline: p.cmdline.clone().into(),
        creds: Arc::new(crate::task::Credentials::of_runtime()),
        slot,
    };
    task::import(&mut task, t, blobs).map_err(bad)?;
    task.cwd = resolve_cwd(&task.root, &String::from_utf8_lossy(&task.cwd));
    task.publish_identity();
    // The first thing every thread does is park: the caller's hook holds the first until
    // the wake, and the group holds the others until the hook lets them go.
    task.group.hold_others();
    let mut threads = Vec::with_capacity(other_threads.len());
    for ts in other_threads {
        let vcpu = vm.create_vcpu(task.group.alloc_vcpu_index(), task.mm().cr3())?;
        let slot = task.group.procs.reserve_task().map_err(|_| {
            SandboxError::Restore(format!("no room for thread {} (pids limit)", ts.tid))
        })?;
        let mut th = task.child(crate::task::ChildParts {
            tid: ts.tid,
            pid: p.pid,
            vcpu,
            mm: task.mm.clone(),
            mem: task.mem.clone(),
            fds: task.fds.clone(),
            group: task.group.clone(),
            signals: task.signals.clone(),
            clear_child_tid: 0,
            slot,
        });
        task::import(&mut th, ts, blobs).map_err(bad)?;
        th.cwd = resolve_cwd(&th.root, &String::from_utf8_lossy(&th.cwd));
        th.control.set_park();
        threads.push(th);
    }
    task.control.set_park();
    Ok(Sandbox::from_task(task, started, vm, threads))
}
