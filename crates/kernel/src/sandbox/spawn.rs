//! Starting a process in a running sandbox from outside it (the OCI `exec`): a program loaded
//! into a VM of its own, like the first process, with the standard streams the caller hands
//! over, registered in the sandbox's process table without a parent inside the sandbox (no
//! process there can wait for it; the caller gets its exit status instead).

use std::os::fd::OwnedFd;
use std::sync::{mpsc, Arc};

use super::{NewProcess, ProcessImage, SandboxError};
use crate::fs::Root;
use crate::net::NetPolicy;
use crate::task::rlimit::Rlimits;
use crate::task::{Credentials, ExitStatus, ProcessTable};

/// What a process started from outside runs.
#[derive(Clone, Debug)]
pub struct SpawnRequest {
    /// argv (argv[0] is looked up as given: a guest path).
    pub args: Vec<String>,
    /// Environment, `K=V`.
    pub env: Vec<String>,
    /// Working directory inside the root.
    pub cwd: String,
    /// The ids it runs with (`exec --user`); `None`: the sandbox's first process's.
    pub creds: Option<Credentials>,
}

/// Starts processes in one sandbox (cheap to clone).
#[derive(Clone)]
pub struct Spawner {
    platform: Arc<dyn platform::Platform>,
    root: Arc<Root>,
    net: Arc<NetPolicy>,
    procs: Arc<ProcessTable>,
    memory: u64,
    creds: Arc<Credentials>,
    rlimits: Rlimits,
}

/// A started process: its pid in the sandbox, and its exit status once it ends.
pub struct Spawned {
    /// Process id inside the sandbox.
    pub pid: i32,
    /// Receives the exit status.
    pub exit: mpsc::Receiver<ExitStatus>,
}

impl Spawner {
    pub(crate) fn new(
        platform: Arc<dyn platform::Platform>,
        root: Arc<Root>,
        net: Arc<NetPolicy>,
        procs: Arc<ProcessTable>,
        memory: u64,
        creds: Arc<Credentials>,
        rlimits: Rlimits,
    ) -> Spawner {
        Spawner {
            platform,
            root,
            net,
            procs,
            memory,
            creds,
            rlimits,
        }
    }

    /// Sends `sig` to the foreground process group of the terminal of `pid`'s session (the
    /// group an exec'd shell put in the foreground, or the session leader's): Ctrl-C, or a
    /// window change, from the caller of an attached `exec -t`. Returns how many processes
    /// it reached.
    pub fn signal_foreground(&self, pid: i32, sig: i32) -> usize {
        self.procs.signal_foreground(pid, sig)
    }

    /// Loads and starts `req` with `stdio` as its descriptors 0-2.
    ///
    /// # Errors
    /// [`SandboxError`] for a missing program, a bad ELF, no memory, or a KVM failure.
    pub fn spawn(
        &self,
        req: &SpawnRequest,
        stdio: [Option<OwnedFd>; 3],
    ) -> Result<Spawned, SandboxError> {
        let program = req
            .args
            .first()
            .ok_or_else(|| SandboxError::ProgramNotFound(String::new()))?;
        let slot = self
            .procs
            .reserve_task()
            .map_err(|_| SandboxError::Memory("the sandbox's pids limit is reached".into()))?;
        // Another user's ids, never more capabilities than the sandbox's bounding set.
        let creds = match &req.creds {
            Some(c) => {
                let mut c = c.clone();
                let bound = self.creds.caps.bounding;
                c.caps.bounding &= bound;
                c.caps.permitted &= bound;
                c.caps.effective &= bound;
                c.caps.inheritable &= bound;
                c.caps.ambient &= bound;
                Arc::new(c)
            }
            None => self.creds.clone(),
        };
        let image = ProcessImage::build(
            &self.platform,
            &self.root,
            super::Program {
                path: program,
                args: &req.args,
                env: &req.env,
            },
            self.memory,
            &creds,
            &self.procs.shm,
        )?;
        let pid = self.procs.alloc_id();
        let mut task = image.into_task(NewProcess {
            pid,
            procs: self.procs.clone(),
            slot,
            root: self.root.clone(),
            cwd: &req.cwd,
            net: self.net.clone(),
            creds,
            rlimits: self.rlimits.clone(),
            stdio,
            program,
        });
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name(format!("exec-{pid}"))
            .spawn(move || {
                let status = match task.run() {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::error!("exec'd process {pid}: {e}");
                        ExitStatus::Signaled(libc::SIGKILL)
                    }
                };
                let group = task.group.clone();
                drop(task);
                group.wait_all_gone();
                let _ = tx.send(group.exit_status().unwrap_or(status));
            })
            .map_err(|e| SandboxError::Memory(format!("starting a thread: {e}")))?;
        Ok(Spawned { pid, exit: rx })
    }
}
