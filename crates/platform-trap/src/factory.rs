//! The stub factory (design `docs/design/platforms.md` §3.1): a process the holder starts
//! early, before it confines itself, that forks every stub the holder asks for.
//!
//! # Why a factory
//! - A stub forked by a confined holder inherits the holder's seccomp allowlist, and a
//!   filter's KILL outranks the stub's TRAP: any application system call outside the holder's
//!   allowlist would kill the stub instead of trapping. The factory was started before the
//!   holder installed its filter, so its stubs carry only their own filters (and the
//!   factory's, which fails what it does not list with `EPERM`: a stub's TRAP outranks that).
//! - `PR_SET_PDEATHSIG` fires when the parent *thread* exits; a stub forked from a task
//!   thread would die with that thread. A factory stub's parent is the thread that started
//!   the factory (below), not the one that asked for the stub.
//!
//! # Processes
//! [`StubFactory::start`] starts the factory from the calling thread with `clone3`:
//! `CLONE_VM`, so that it shares the holder's memory and has none of its own to count (a fork
//! would keep copies of the holder's pages, which become its own as the holder writes them);
//! on a stack the holder mapped for it; with a thread pointer of 0 (`CLONE_SETTLS`), because
//! it has no libc thread state: it runs only raw system calls and plain data, and any use of
//! libc's thread state (errno, cancellation, malloc's caches, which would be the holder
//! thread's) faults instead of corrupting the holder's; exit signal 0 (only the holder's
//! `waitid(__WALL)` sees its end). The kernel gives it no rseq registration, so its stubs
//! have none to undo. The factory, in order: sets
//! `PR_SET_PDEATHSIG(SIGKILL)` and checks that its parent is still the holder; keeps its socket
//! (moved to fd 3) and closes every other descriptor (of its own table: `CLONE_FILES` is not
//! shared); resets every signal action to the
//! default, then ignores the terminal's signals, SIGPIPE and SIGCHLD, and unblocks every
//! signal; `setsid` (out of the terminal's process group); with [`FactoryOptions::namespaces`]
//! enters new user (the holder's uid and gid mapped to 65534 inside; no setgroups), network,
//! IPC, UTS and mount namespaces; drops every capability (bounding set, ambient, effective,
//! permitted, inheritable); lowers `RLIMIT_NOFILE` ([`FactoryOptions::nofile`]) and
//! `RLIMIT_CORE` (0); sets no_new_privs; installs its seccomp filter
//! ([`crate::filter::factory_filter`]: the calls of the factory and of a stub's code, EPERM for
//! the rest); sets `PR_SET_PDEATHSIG` again (credential changes clear it) and re-checks its
//! parent; reports ready (or the failed step) and serves requests on a `SOCK_SEQPACKET`
//! socketpair until the holder closes its end.
//!
//! Sharing the holder's memory means the holder can write the factory's stack: an application
//! that took the holder over could take the factory over. The factory's filter keeps such a
//! factory to its few calls, all of which the holder's allowlist has too.
//!
//! One request carries the guest memfd (`SCM_RIGHTS`); the factory forks the stub exactly as
//! [`StubProcess::spawn`] does (the same `spawn_parts`), but with `CLONE_PARENT`: the stub's
//! parent is the factory's parent, the holder. It replies with the stub's pid, the xsave
//! size and three descriptors (the stub's pidfd, the control memfd, the holder's end of the
//! reply socketpair, through which the holder later sends the stub its shared windows), then
//! closes its copies: it keeps nothing of a stub. The holder maps the control memfd itself
//! and waits for the stub's ready report ([`StubProcess`]'s own set-up checks run there).
//!
//! Stubs are the *holder's* children rather than the factory's, on purpose:
//! - their `PR_SET_PDEATHSIG` is tied to the thread that started the factory (the holder's
//!   main thread), as the factory's own is, so the holder's death still takes every stub
//!   (directly, and through the factory) while a task thread's exit takes none;
//! - the holder reaps them (`waitid` on the pidfd in the stub's drop, as for
//!   [`StubProcess::spawn`]), so a stub's pid cannot be reused while the holder uses it for
//!   `tgkill` and `/proc` look-ups, and no zombie outlives its [`StubProcess`];
//! - a factory that dies (killed, OOM) takes no running address space with it: only new
//!   spawns fail.
//!
//! The cost: no PID namespace. `CLONE_PARENT` is refused to the init process of a PID
//! namespace, and a stub inside one would report namespace-local thread ids to the holder
//! (its mapper's `clone` result), which `tgkill` and `/proc` cannot use. Stubs see no pids
//! anyway (every system call of theirs but the stub code's own traps).
//!
//! # Preconditions of [`StubFactory::start`]
//! - Call it from a thread that lives as long as the sandbox (the runtime's main thread):
//!   the factory and every stub die when *that thread* exits.
//! - Call it before the holder confines itself with seccomp: the factory inherits the calling
//!   thread's filters.
//! - Other threads may run: the factory runs only allocation-free, lock-free code that leaves
//!   libc's thread state alone (raw system calls, data prepared before the `clone3`). Each
//!   stub it forks is a copy of the holder's whole address space, which the stub's first
//!   instructions unmap.
//!
//! # Not done (TODO)
//! - An empty tmpfs root in the mount namespace (pivot_root); the namespace is only private.
//! - A host-unprivileged uid for the stubs: the holder's uid is mapped (to 65534 inside), so
//!   stubs of a root holder are host root without any capability.
//! - `RLIMIT_NPROC`: threads count against it, it is per host uid (shared by every sandbox of
//!   that user), and root ignores it; the stubs cannot `clone` on their own anyway.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::filter::{self, SockFilter};
use crate::stub::{spawn_parts, CloneArgs, KSigaction, StubParts, StubTemplate, SPAWN_CALLS};
use crate::sys::{self, raw};
use crate::sysmsg::STUB_NOFILE;
use crate::{host, StubProcess, TrapError};

/// How the factory confines itself (and so its stubs).
#[derive(Clone, Copy, Debug)]
pub struct FactoryOptions {
    /// Enter new user, network, IPC, UTS and mount namespaces (needs user namespaces:
    /// [`StubFactory::start_with`] fails with [`TrapError::Setup`] without them).
    pub namespaces: bool,
    /// `RLIMIT_NOFILE` of the factory and its stubs (at least 16: a stub's set-up moves its
    /// descriptors through fds 10-12). Default [`STUB_NOFILE`] (1024): a stub's shared-window
    /// slots are descriptors 64..1024 (480 read-only, 480 writable); with a lower limit, only
    /// the slots below it can be attached ([`TrapError::TooManyWindows`] beyond). A stub
    /// lowers a higher limit to [`STUB_NOFILE`].
    pub nofile: u64,
}

impl Default for FactoryOptions {
    fn default() -> FactoryOptions {
        FactoryOptions {
            namespaces: true,
            nofile: STUB_NOFILE,
        }
    }
}

/// Deadline of the factory's start-up report and of a spawn request's answer.
const FACTORY_DEADLINE: Duration = Duration::from_secs(10);

const MAGIC: u32 = 0x544f_5246;
const OP_SPAWN: u32 = 1;
const REQUEST_LEN: usize = 8;
const REPLY_LEN: usize = 24;

/// The factory's start-up steps, by the step number of its failure report.
const STARTUP_STEPS: [&str; 12] = [
    "none",
    "factory PR_SET_PDEATHSIG / parent check",
    "factory descriptors",
    "factory signal dispositions",
    "factory setsid",
    "factory unshare(CLONE_NEWUSER)",
    "factory uid/gid maps",
    "factory unshare(CLONE_NEWNET|CLONE_NEWIPC|CLONE_NEWUTS|CLONE_NEWNS)",
    "factory capabilities",
    "factory rlimits",
    "factory PR_SET_NO_NEW_PRIVS",
    "factory seccomp filter",
];
const ST_PDEATHSIG: u32 = 1;
const ST_FDS: u32 = 2;
const ST_SIGNALS: u32 = 3;
const ST_SETSID: u32 = 4;
const ST_USERNS: u32 = 5;
const ST_IDMAP: u32 = 6;
const ST_NAMESPACES: u32 = 7;
const ST_CAPS: u32 = 8;
const ST_RLIMIT: u32 = 9;
const ST_NNP: u32 = 10;
const ST_FILTER: u32 = 11;
/// Step numbers of a spawn's failed host call: `STEP_SPAWN + SpawnError::call`.
const STEP_SPAWN: u32 = 100;
/// The request was malformed.
const STEP_REQUEST: u32 = 200;

/// The factory's names of `spawn_parts`' calls (as [`SPAWN_CALLS`], for error messages).
const FACTORY_CALLS: [&str; SPAWN_CALLS.len()] = [
    "stub factory: memfd_create",
    "stub factory: ftruncate",
    "stub factory: mmap",
    "stub factory: socketpair",
    "stub factory: clone3",
    "stub factory: fcntl(F_ADD_SEALS)",
];

/// The factory's answer: `step` 0 for success (start-up, or a stub with its three
/// descriptors), else the failed step and its errno.
#[derive(Clone, Copy, Debug, Default)]
struct Reply {
    step: u32,
    errno: i32,
    pid: i32,
    xsave_size: u64,
}

impl Reply {
    fn encode(self) -> [u8; REPLY_LEN] {
        let mut b = [0u8; REPLY_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.step.to_le_bytes());
        b[8..12].copy_from_slice(&self.errno.to_le_bytes());
        b[12..16].copy_from_slice(&self.pid.to_le_bytes());
        b[16..24].copy_from_slice(&self.xsave_size.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Reply> {
        let b: &[u8; REPLY_LEN] = b.try_into().ok()?;
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        (u32_at(0) == MAGIC).then(|| Reply {
            step: u32_at(4),
            errno: u32_at(8) as i32,
            pid: u32_at(12) as i32,
            xsave_size: u64::from(u32_at(16)) | u64::from(u32_at(20)) << 32,
        })
    }

    fn failed(step: u32, errno: i32) -> Reply {
        Reply {
            step,
            errno,
            ..Reply::default()
        }
    }
}

fn request() -> [u8; REQUEST_LEN] {
    let mut b = [0u8; REQUEST_LEN];
    b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&OP_SPAWN.to_le_bytes());
    b
}

/// The holder's side of the stub factory: [`StubFactory::spawn`] asks it for a stub.
/// Dropping it kills the factory (its stubs live on: they are the holder's children).
pub struct StubFactory {
    /// The holder's end of the socketpair; the lock serialises request and answer.
    sock: Mutex<OwnedFd>,
    pid: i32,
    pidfd: OwnedFd,
    /// Set once the factory is known dead (or killed because it stopped answering).
    dead: AtomicBool,
    /// What the factory reads and runs on (its plan and its stack): kept until it is reaped,
    /// in [`Drop`], which runs before the fields are dropped. The plan's template (the xsave
    /// size, the stub code's offsets) serves [`StubProcess::from_parts`] here too.
    plan: Box<FactoryPlan>,
    _stack: sys::Mapping,
}

impl std::fmt::Debug for StubFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StubFactory")
            .field("pid", &self.pid)
            .field("dead", &self.dead.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Waits until `sock` is readable or hung up (true), the process behind `pidfd` exited with
/// nothing to read (false), or the deadline passes (`Timeout`).
fn wait_readable(
    sock: BorrowedFd<'_>,
    pidfd: BorrowedFd<'_>,
    deadline: Instant,
) -> Result<bool, TrapError> {
    let [sock_events, pidfd_events] =
        sys::poll_with_pidfd(sock, pidfd, deadline).map_err(host("poll"))?;
    if sock_events != 0 {
        Ok(true)
    } else if pidfd_events != 0 {
        Ok(false)
    } else {
        Err(TrapError::Timeout)
    }
}

impl StubFactory {
    /// Starts a stub factory with [`FactoryOptions::default`] (namespaces on).
    ///
    /// # Errors
    /// As [`StubFactory::start_with`].
    pub fn start() -> Result<StubFactory, TrapError> {
        StubFactory::start_with(FactoryOptions::default())
    }

    /// Forks the stub factory from the calling thread and waits until it has confined
    /// itself. See the module documentation for the preconditions: call it from the
    /// runtime's main thread (the factory and its stubs die with the calling thread), before
    /// guest memory exists and before the holder installs its seccomp filter; other threads
    /// may already run.
    ///
    /// # Errors
    /// [`TrapError::Unsupported`] as [`StubProcess::spawn`]; [`TrapError::Invalid`] for
    /// `nofile` below 16; [`TrapError::Host`] if the socketpair or the fork fails;
    /// [`TrapError::Setup`] with the factory's failed start-up step (e.g. user namespaces
    /// unavailable); [`TrapError::StubDied`] if it died before reporting;
    /// [`TrapError::Timeout`] if it did not report within 10 s.
    pub fn start_with(options: FactoryOptions) -> Result<StubFactory, TrapError> {
        if options.nofile < 16 {
            return Err(TrapError::Invalid("RLIMIT_NOFILE below 16"));
        }
        // The factory has no rseq registration (the kernel gives a CLONE_VM child none).
        let template = StubTemplate::new()?.without_rseq();
        let (ours, theirs) = sys::seqpacket_pair().map_err(host("socketpair"))?;
        // SAFETY: getpid, geteuid and getegid have no preconditions.
        let (holder_pid, uid, gid) = unsafe { (libc::getpid(), libc::geteuid(), libc::getegid()) };
        let plan = Box::new(FactoryPlan {
            sock: theirs.as_raw_fd(),
            holder_pid,
            uid,
            gid,
            options,
            template,
            filter: filter::factory_filter(),
        });
        let stack = sys::Mapping::anonymous(FACTORY_STACK).map_err(host("mmap"))?;
        // SAFETY: the factory runs `factory_enter` on `stack` with `plan`, both kept until it
        // is reaped (the struct below owns them); it allocates nothing, takes no lock and
        // leaves libc's thread state alone (module documentation).
        let (pid, pidfd) = unsafe { start_factory(&plan, &stack) }
            .map_err(|errno| host("clone3")(std::io::Error::from_raw_os_error(errno)))?;
        drop(theirs);
        // From here on, dropping `factory` kills and reaps the factory.
        let factory = StubFactory {
            sock: Mutex::new(ours.into()),
            pid,
            pidfd: pidfd.into(),
            dead: AtomicBool::new(false),
            plan,
            _stack: stack,
        };
        let reply = {
            let sock = factory.sock.lock().unwrap_or_else(|e| e.into_inner());
            factory.answer(sock.as_fd())?
        };
        if reply.step != 0 {
            let step = STARTUP_STEPS
                .get(reply.step as usize)
                .copied()
                .unwrap_or("factory start-up");
            return Err(TrapError::Setup {
                step,
                ret: -i64::from(reply.errno),
            });
        }
        if reply.pid != pid || reply.xsave_size != factory.plan.template.xsave_size as u64 {
            return Err(TrapError::Protocol("stub factory start-up report"));
        }
        tracing::debug!(pid, ?options, "trap: stub factory ready");
        Ok(factory)
    }

    /// The factory's process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether the factory process is still alive.
    pub fn is_alive(&self) -> bool {
        !self.dead.load(Ordering::Relaxed) && !sys::pidfd_exited(self.pidfd.as_fd())
    }

    /// Marks the factory dead and kills it (it may be alive but no longer trusted to answer
    /// in step).
    fn broken(&self) {
        self.dead.store(true, Ordering::Relaxed);
        let _ = sys::pidfd_send_signal(self.pidfd.as_fd(), libc::SIGKILL, 0);
    }

    /// Receives one reply (the caller holds the socket's lock), without descriptors.
    fn answer(&self, sock: BorrowedFd<'_>) -> Result<Reply, TrapError> {
        let mut fds = [None, None, None, None];
        let (reply, n) = self.answer_with_fds(sock, &mut fds)?;
        if n != 0 {
            self.broken();
            return Err(TrapError::Protocol("stub factory reply descriptors"));
        }
        Ok(reply)
    }

    /// Receives one reply and its descriptors (the caller holds the socket's lock). A dead
    /// factory is [`TrapError::StubDied`]; a silent one is killed ([`TrapError::Timeout`]):
    /// a late answer would otherwise be taken for the next request's.
    fn answer_with_fds(
        &self,
        sock: BorrowedFd<'_>,
        fds: &mut [Option<sys::Fd>; sys::MAX_PASSED_FDS],
    ) -> Result<(Reply, usize), TrapError> {
        let readable =
            match wait_readable(sock, self.pidfd.as_fd(), Instant::now() + FACTORY_DEADLINE) {
                Ok(r) => r,
                Err(e) => {
                    self.broken();
                    return Err(e);
                }
            };
        if !readable {
            self.dead.store(true, Ordering::Relaxed);
            return Err(TrapError::StubDied);
        }
        let mut buf = [0u8; REPLY_LEN + 8];
        match sys::recv_with_fds(sock, &mut buf, fds) {
            Ok((0, _)) => {
                // The end of the stream: the factory is gone.
                self.dead.store(true, Ordering::Relaxed);
                Err(TrapError::StubDied)
            }
            Ok((n, nfds)) => match Reply::decode(&buf[..n]) {
                Some(r) => Ok((r, nfds)),
                None => {
                    self.broken();
                    Err(TrapError::Protocol("stub factory reply"))
                }
            },
            Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNRESET | libc::EPIPE)) => {
                // It died with our request unread.
                self.dead.store(true, Ordering::Relaxed);
                Err(TrapError::StubDied)
            }
            Err(e) => {
                self.broken();
                Err(host("recvmsg from the stub factory")(e))
            }
        }
    }

    /// Asks the factory for a stub over the guest memory `memory` (a memfd, as for
    /// [`StubProcess::spawn`]) and returns it once ready. Callable from any thread, also
    /// concurrently (requests are serialised; the stubs' set-up waits are not). The stub is a
    /// child of the holder process; it does not die with the calling thread, and carries no
    /// seccomp filter of the holder installed after [`StubFactory::start`].
    ///
    /// # Errors
    /// [`TrapError::StubDied`] if the factory is dead (it never hangs: its death closes the
    /// socket) or the new stub died during its set-up; [`TrapError::Timeout`] if the factory
    /// did not answer within 10 s (it is then killed); [`TrapError::Host`] with the factory's
    /// failed call (`"stub factory: memfd_create"`, …) or the holder's own;
    /// [`TrapError::Setup`] if the stub failed a set-up step; [`TrapError::Protocol`] for a
    /// malformed answer.
    pub fn spawn(&self, memory: BorrowedFd<'_>) -> Result<StubProcess, TrapError> {
        let parts = {
            let sock = self.sock.lock().unwrap_or_else(|e| e.into_inner());
            if self.dead.load(Ordering::Relaxed) {
                return Err(TrapError::StubDied);
            }
            if let Err(e) = sys::send_with_fds(sock.as_fd(), &request(), &[memory.as_raw_fd()]) {
                return Err(match e.raw_os_error() {
                    Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN) => {
                        self.dead.store(true, Ordering::Relaxed);
                        TrapError::StubDied
                    }
                    _ => host("sendmsg to the stub factory")(e),
                });
            }
            let mut fds = [None, None, None, None];
            let (reply, nfds) = self.answer_with_fds(sock.as_fd(), &mut fds)?;
            match reply.step {
                0 => {}
                s if (STEP_SPAWN..STEP_SPAWN + FACTORY_CALLS.len() as u32).contains(&s) => {
                    return Err(TrapError::Host {
                        call: FACTORY_CALLS[(s - STEP_SPAWN) as usize],
                        source: std::io::Error::from_raw_os_error(reply.errno),
                    });
                }
                STEP_REQUEST => {
                    return Err(TrapError::Host {
                        call: "stub factory: request",
                        source: std::io::Error::from_raw_os_error(reply.errno),
                    });
                }
                _ => return Err(TrapError::Protocol("stub factory reply step")),
            }
            let [Some(pidfd), Some(ctrl_fd), Some(reply_sock), None] = fds else {
                return Err(TrapError::Protocol("stub factory reply descriptors"));
            };
            if nfds != 3
                || reply.pid <= 0
                || reply.xsave_size != self.plan.template.xsave_size as u64
            {
                return Err(TrapError::Protocol("stub factory reply"));
            }
            StubParts {
                pid: reply.pid,
                pidfd,
                ctrl_fd,
                reply_sock,
            }
        };
        StubProcess::from_parts(parts, &self.plan.template)
    }
}

impl Drop for StubFactory {
    fn drop(&mut self) {
        // SIGKILL (its stubs are the holder's children: they live on), then reap (exit
        // signal 0: only this waitid sees it).
        let _ = sys::pidfd_send_signal(self.pidfd.as_fd(), libc::SIGKILL, 0);
        sys::pidfd_reap(self.pidfd.as_fd(), 0);
    }
}

/// Everything the factory needs, prepared before it starts. It shares the holder's memory
/// and only reads the plan, which the holder never changes.
struct FactoryPlan {
    sock: RawFd,
    holder_pid: i32,
    uid: u32,
    gid: u32,
    options: FactoryOptions,
    template: StubTemplate,
    /// Its seccomp program ([`filter::factory_filter`]).
    filter: Vec<SockFilter>,
}

/// The size of the factory's stack (its pages are touched only as used: a spawn's frames, a
/// few pages in all, which count as the holder's).
const FACTORY_STACK: usize = 256 << 10;

/// The factory's socket after its set-up.
const FACTORY_SOCK: RawFd = 3;

/// Starts the factory: `clone3` with `CLONE_VM | CLONE_SETTLS` (thread pointer 0) |
/// `CLONE_PIDFD`, exit signal 0, on `stack`; the child calls [`factory_enter`] with `plan`.
/// Returns the factory's pid and pidfd, or the errno.
///
/// # Safety
/// `plan` and `stack` must outlive the factory (until it is reaped), and nothing else may use
/// `stack`.
unsafe fn start_factory(plan: &FactoryPlan, stack: &sys::Mapping) -> Result<(i32, sys::Fd), i32> {
    let mut pidfd: i32 = -1;
    let args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_SETTLS | libc::CLONE_PIDFD) as u64,
        pidfd: &mut pidfd as *mut i32 as u64,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: 0,
        stack: stack.at(0) as u64,
        stack_size: FACTORY_STACK as u64,
        tls: 0,
    };
    let ret: i64;
    // SAFETY: in the caller, a plain `clone3`. The child starts with the stack pointer at the
    // top of `stack` (16-byte aligned, as the ABI wants before the call), every other
    // register as here but rax, and never comes back here: `factory_enter` does not return.
    unsafe {
        core::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r12",
            "call {enter}",
            "ud2",
            "2:",
            enter = sym factory_enter,
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") &args as *const CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") plan as *const FactoryPlan,
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    if ret < 0 {
        return Err(-ret as i32);
    }
    // SAFETY: clone3 stored a new pidfd we own.
    Ok((ret as i32, unsafe { sys::Fd::from_raw(pidfd) }))
}

/// The factory's whole life: sets up, reports, serves, exits when the holder closes its end.
///
/// # Safety
/// Only as [`start_factory`]'s child, with `plan` as given there.
unsafe extern "C" fn factory_enter(plan: *const FactoryPlan) -> ! {
    // SAFETY: the holder keeps the plan until the factory is reaped, and never writes it.
    let p = unsafe { &*plan };
    let report = match factory_setup(p) {
        Ok(()) => Reply {
            // SAFETY: getpid has no preconditions.
            pid: unsafe { raw(libc::SYS_getpid, [0; 6]) } as i32,
            xsave_size: p.template.xsave_size as u64,
            ..Reply::default()
        },
        Err((step, errno)) => Reply::failed(step, errno),
    };
    // The socket is at FACTORY_SOCK once the descriptor step (the first) passed.
    let fd = if report.step == ST_FDS {
        p.sock
    } else {
        FACTORY_SOCK
    };
    // SAFETY: the socket stays open for the factory's life.
    let sock = unsafe { BorrowedFd::borrow_raw(fd) };
    if sys::send_with_fds(sock, &report.encode(), &[]).is_err() || report.step != 0 {
        exit(1);
    }
    serve(p, sock)
}

fn exit(code: u64) -> ! {
    // SAFETY: ends this process.
    unsafe { raw(libc::SYS_exit_group, [code, 0, 0, 0, 0, 0]) };
    #[allow(clippy::empty_loop)]
    loop {}
}

/// A raw system call's result as `Err(errno)` on failure.
fn ok(r: i64) -> Result<i64, i32> {
    if r < 0 {
        Err(-r as i32)
    } else {
        Ok(r)
    }
}

/// `PR_SET_PDEATHSIG(SIGKILL)`, then checks that the parent is still the holder.
fn pdeathsig(holder_pid: i32) -> Result<(), i32> {
    // SAFETY: prctl without memory arguments; getppid.
    unsafe {
        ok(raw(
            libc::SYS_prctl,
            [
                libc::PR_SET_PDEATHSIG as u64,
                libc::SIGKILL as u64,
                0,
                0,
                0,
                0,
            ],
        ))?;
        if raw(libc::SYS_getppid, [0; 6]) != i64::from(holder_pid) {
            return Err(libc::ESRCH);
        }
    }
    Ok(())
}

/// Writes `text` to `path` (a /proc file).
fn write_proc(path: &core::ffi::CStr, text: &[u8]) -> Result<(), i32> {
    // SAFETY: a valid C string; the descriptor is closed below.
    let fd = ok(unsafe {
        raw(
            libc::SYS_openat,
            [
                libc::AT_FDCWD as u64,
                path.as_ptr() as u64,
                (libc::O_WRONLY | libc::O_CLOEXEC) as u64,
                0,
                0,
                0,
            ],
        )
    })?;
    // SAFETY: writing our buffer to the descriptor just opened, then closing it.
    let r = unsafe {
        let r = raw(
            libc::SYS_write,
            [fd as u64, text.as_ptr() as u64, text.len() as u64, 0, 0, 0],
        );
        raw(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
        r
    };
    match ok(r)? {
        n if n as usize == text.len() => Ok(()),
        _ => Err(libc::EIO),
    }
}

/// `"65534 OUTSIDE 1\n"` in `buf`; returns its length.
fn id_map_line(buf: &mut [u8; 32], outside: u32) -> usize {
    let head = b"65534 ";
    buf[..head.len()].copy_from_slice(head);
    let mut n = head.len();
    let mut digits = [0u8; 10];
    let mut d = 0;
    let mut v = outside;
    loop {
        digits[d] = b'0' + (v % 10) as u8;
        d += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in (0..d).rev() {
        buf[n] = digits[i];
        n += 1;
    }
    buf[n..n + 3].copy_from_slice(b" 1\n");
    n + 3
}

/// The factory's confinement, in order (see the module documentation). Allocation-free.
fn factory_setup(p: &FactoryPlan) -> Result<(), (u32, i32)> {
    let step = |s: u32| move |e: i32| (s, e);
    // SAFETY: raw system calls on this process's own descriptors, signal state,
    // namespaces, credentials and limits, with pointers to locals.
    unsafe {
        // Descriptors: the socket to FACTORY_SOCK, nothing else.
        let fds = step(ST_FDS);
        if p.sock != FACTORY_SOCK {
            ok(raw(
                libc::SYS_dup3,
                [p.sock as u64, FACTORY_SOCK as u64, 0, 0, 0, 0],
            ))
            .map_err(fds)?;
        }
        ok(raw(
            libc::SYS_close_range,
            [0, FACTORY_SOCK as u64 - 1, 0, 0, 0, 0],
        ))
        .map_err(fds)?;
        ok(raw(
            libc::SYS_close_range,
            [FACTORY_SOCK as u64 + 1, u64::from(u32::MAX), 0, 0, 0, 0],
        ))
        .map_err(fds)?;

        pdeathsig(p.holder_pid).map_err(step(ST_PDEATHSIG))?;

        // Signals: defaults (the holder's handlers are of no use here), the terminal's,
        // SIGPIPE and SIGCHLD ignored, nothing blocked.
        let sigs = step(ST_SIGNALS);
        let dfl = KSigaction {
            handler: libc::SIG_DFL as u64,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        let ign = KSigaction {
            handler: libc::SIG_IGN as u64,
            ..dfl
        };
        let ignored = [
            libc::SIGHUP,
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGPIPE,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
            libc::SIGCHLD,
        ];
        for sig in 1..=64i32 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let act = if ignored.contains(&sig) { &ign } else { &dfl };
            let r = raw(
                libc::SYS_rt_sigaction,
                [sig as u64, act as *const KSigaction as u64, 0, 8, 0, 0],
            );
            // Signals glibc reserves for itself (32, 33) may refuse: that is fine.
            if r < 0 && ignored.contains(&sig) {
                return Err(sigs(-r as i32));
            }
        }
        let empty = 0u64;
        ok(raw(
            libc::SYS_rt_sigprocmask,
            [
                libc::SIG_SETMASK as u64,
                &empty as *const u64 as u64,
                0,
                8,
                0,
                0,
            ],
        ))
        .map_err(sigs)?;
        ok(raw(libc::SYS_setsid, [0; 6])).map_err(step(ST_SETSID))?;

        if p.options.namespaces {
            ok(raw(
                libc::SYS_unshare,
                [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0],
            ))
            .map_err(step(ST_USERNS))?;
            let ids = step(ST_IDMAP);
            write_proc(c"/proc/self/setgroups", b"deny").map_err(ids)?;
            let mut line = [0u8; 32];
            let n = id_map_line(&mut line, p.uid);
            write_proc(c"/proc/self/uid_map", &line[..n]).map_err(ids)?;
            let n = id_map_line(&mut line, p.gid);
            write_proc(c"/proc/self/gid_map", &line[..n]).map_err(ids)?;
            let flags =
                libc::CLONE_NEWNET | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS | libc::CLONE_NEWNS;
            ok(raw(libc::SYS_unshare, [flags as u64, 0, 0, 0, 0, 0]))
                .map_err(step(ST_NAMESPACES))?;
        }

        // Capabilities: none left in any set. The bounding set needs CAP_SETPCAP (absent for
        // an unprivileged holder without namespaces, where it does not matter: nothing is
        // ever executed and the other sets are empty already).
        let caps = step(ST_CAPS);
        for cap in 0..64u64 {
            let r = raw(
                libc::SYS_prctl,
                [libc::PR_CAPBSET_DROP as u64, cap, 0, 0, 0, 0],
            );
            if r == -i64::from(libc::EINVAL) {
                break; // past the last capability
            }
        }
        ok(raw(
            libc::SYS_prctl,
            [
                libc::PR_CAP_AMBIENT as u64,
                libc::PR_CAP_AMBIENT_CLEAR_ALL as u64,
                0,
                0,
                0,
                0,
            ],
        ))
        .map_err(caps)?;
        let header: [u32; 2] = [0x2008_0522, 0]; // _LINUX_CAPABILITY_VERSION_3, this process
        let data = [0u32; 6];
        ok(raw(
            libc::SYS_capset,
            [header.as_ptr() as u64, data.as_ptr() as u64, 0, 0, 0, 0],
        ))
        .map_err(caps)?;

        let limits = step(ST_RLIMIT);
        for (res, v) in [
            (libc::RLIMIT_NOFILE, p.options.nofile),
            (libc::RLIMIT_CORE, 0),
        ] {
            let lim = libc::rlimit {
                rlim_cur: v,
                rlim_max: v,
            };
            ok(raw(
                libc::SYS_prlimit64,
                [0, res as u64, &lim as *const libc::rlimit as u64, 0, 0, 0],
            ))
            .map_err(limits)?;
        }
        ok(raw(
            libc::SYS_prctl,
            [libc::PR_SET_NO_NEW_PRIVS as u64, 1, 0, 0, 0, 0],
        ))
        .map_err(step(ST_NNP))?;

        let fprog = libc::sock_fprog {
            // A few dozen instructions (checked by the filter's tests).
            len: p.filter.len() as u16,
            filter: p.filter.as_ptr() as *mut libc::sock_filter,
        };
        ok(raw(
            libc::SYS_seccomp,
            [
                libc::SECCOMP_SET_MODE_FILTER as u64,
                0,
                &fprog as *const libc::sock_fprog as u64,
                0,
                0,
                0,
            ],
        ))
        .map_err(step(ST_FILTER))?;
    }
    // Credential changes (the new user namespace) clear the parent-death signal.
    pdeathsig(p.holder_pid).map_err(step(ST_PDEATHSIG))
}

/// Serves spawn requests until the holder closes its end (or the socket fails).
fn serve(p: &FactoryPlan, sock: BorrowedFd<'_>) -> ! {
    loop {
        let mut buf = [0u8; REQUEST_LEN + 8];
        let mut fds = [None, None, None, None];
        let reply_to = match sys::recv_with_fds(sock, &mut buf, &mut fds) {
            Ok((0, _)) => exit(0),
            Ok((n, nfds)) => {
                if buf[..n] != request() || nfds != 1 {
                    Err(Reply::failed(STEP_REQUEST, libc::EINVAL))
                } else if let Some(mem) = fds[0].take() {
                    spawn_parts(&p.template, mem.as_fd(), p.holder_pid, true)
                        .map_err(|e| Reply::failed(STEP_SPAWN + u32::from(e.call), e.errno))
                } else {
                    Err(Reply::failed(STEP_REQUEST, libc::EINVAL))
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                Err(Reply::failed(STEP_REQUEST, libc::EMSGSIZE))
            }
            Err(_) => exit(2),
        };
        let sent = match reply_to {
            Ok(parts) => {
                let reply = Reply {
                    pid: parts.pid,
                    xsave_size: p.template.xsave_size as u64,
                    ..Reply::default()
                };
                sys::send_with_fds(
                    sock,
                    &reply.encode(),
                    &[
                        parts.pidfd.as_raw_fd(),
                        parts.ctrl_fd.as_raw_fd(),
                        parts.reply_sock.as_raw_fd(),
                    ],
                )
                // `parts` drops here: the factory keeps nothing of the stub.
            }
            Err(reply) => sys::send_with_fds(sock, &reply.encode(), &[]),
        };
        if sent.is_err() {
            exit(3);
        }
    }
}
