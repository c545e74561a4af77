//! The trap platform's mechanism (design `docs/design/platforms.md` §3, stages T1 and T2):
//! application code runs in a *stub process* per guest address space, under a seccomp filter
//! that turns every system call into SIGSYS; the stub's signal handler reports each system
//! call or fault to the holder through a shared per-thread page ("sysmsg") and a futex, and
//! resumes with the registers the holder wrote there. No KVM, no ptrace.
//!
//! - [`StubProcess`]: spawn a stub over a guest memfd; map/unmap/protect ranges of that memfd
//!   in it (its mapper thread runs the `mmap` calls); attach shared windows (other host files,
//!   in per-stub [`WindowSlot`]s) and map ranges of them; start threads; kill it.
//! - [`StubThread`]: registers, FPU image, [`StubThread::switch`] (run until the next
//!   [`TrapExit`]) and a kicker.
//! - [`StubFactory`] ([`factory`]): the stub factory process (started before the holder
//!   installs its seccomp filter) that spawns stubs for any holder thread, as children of the
//!   holder.
//! - [`platform`](mod@platform), [`space`], [`context`]: the runtime's side, behind the
//!   `platform` crate's interface: [`TrapPlatform`] (guest memory as a shared memfd, stubs
//!   from the factory once [`start_factory`] ran), [`space::TrapSpace`] (a guest process: one
//!   stub, spawned when its first thread first runs) and [`context::TrapContext`] (a guest
//!   thread: a stub thread; a commit of page-table changes becomes the stub's mappings).
//! - [`bench`](mod@bench): the bare mechanisms' costs (SIGSYS trap, futex hand-off, native getpid) and
//!   the stub's round trip.
//!
//! Layout of the stub's region: [`sysmsg`]. Filters: [`filter`]. The stub code: `stub::asm`.
//! Host-call helpers (raw syscalls, futexes, shared mappings, memfds): [`sys`].
//!
//! # One switch
//! The holder writes the registers (and the XSAVE image if it changed) into the thread's
//! sysmsg area, swaps its state word to RUN and wakes the stub thread if it sleeps; it then
//! spins (only if the stub thread last ran on another CPU, see [`StubThread::set_spin`]) and
//! sleeps on the state word until EVENT. The stub thread, waiting in its signal handler,
//! copies the registers into its signal frame (CS/SS forced to 0x33/0x2b, RFLAGS masked to
//! the user-settable bits), `wrfsbase`/`wrgsbase`, and `rt_sigreturn`s into application
//! code. The next system call (SIGSYS from the filter), fault (SIGSEGV, SIGBUS, SIGFPE,
//! SIGILL, SIGTRAP) or kick (SIGUSR2) enters the handler on the sysmsg alternate stack with
//! every signal blocked; it saves the frame's registers, `rdfsbase`/`rdgsbase`, the XSAVE
//! image and the event, sets EVENT and wakes the holder if it sleeps. The holder copies
//! everything out once and validates it (the application can write every sysmsg area).
//!
//! # Security model (what is enforced in this slice)
//! - A stub holds nothing of the holder: everything below and above its region is unmapped;
//!   the host's vDSO and its data pages are moved into the region ([`vdso`]), for the
//!   application's clock calls; its descriptors are the control memfd (3), the guest memfd (4),
//!   the reply socket (5: an `AF_UNIX` `SOCK_SEQPACKET` socket whose other end the holder
//!   keeps, carrying window descriptors in and mapper completions out) and the window slots
//!   attached to it (64..1024, see [`sysmsg::WINDOW_FD_BASE`]); signal actions are reset,
//!   no_new_privs is set, core dumps are off, `RLIMIT_NOFILE` is at most
//!   [`sysmsg::STUB_NOFILE`].
//! - Its base seccomp filter allows only the stub code's own calls, each from its own
//!   `syscall` instruction (`instruction_pointer`) with its fixed arguments (the mapper maps
//!   only the guest memfd or a window slot, `MAP_SHARED|MAP_FIXED` below
//!   [`sysmsg::USER_END`], and a read-only slot never with `PROT_WRITE`); application threads
//!   stack a filter allowing only the handler's `futex` (wait/wake), `rt_sigreturn` and
//!   `exit`. Everything else traps; any non-x86-64 `arch` (`int 0x80`) kills the stub.
//! - Mapper completions arrive on the reply socket, which only the mapper's completion
//!   `write` can reach, so a guest scribbling on the (writable) reply page cannot make a failed
//!   `munmap` look done; window descriptors sent the other way are taken only by the mapper's
//!   `recvmsg`.
//! - Stubs from the [`StubFactory`] carry none of the holder's seccomp filters and do not die
//!   with the thread that asked for them. The factory drops every capability and lowers its
//!   rlimits before it serves; its namespaces (user, network, IPC, UTS, mount) are optional
//!   ([`FactoryOptions::namespaces`]): the runtime's [`start_factory`] starts it without them,
//!   because inside the holder's Landlock domain the holder cannot write the factory's
//!   `uid_map`.
//! - A dead stub makes every holder wait end in [`TrapError::StubDied`] within 50 ms.
//!
//! # Not in this slice (TODO)
//! - VMA counting against `vm.max_map_count` (design §3: fail a fault with `OutOfMemory` near
//!   the limit rather than let the mapper's `mmap` fail).
//! - Guest-triggered `int 0x80` kills the stub (the design's §3.4 wants it trapped and
//!   answered like KVM does; seccomp can only trap it if the filter allows the i386 arch).
//! - A hostile thread can keep a switch from returning (it can write its threads' state
//!   words, or block the kick signal through a forged `rt_sigreturn` frame): kicks do not end
//!   it, only [`StubProcess::kill`] does (design §3.2).

pub mod bench;
pub mod context;
pub mod factory;
pub mod filter;
pub(crate) mod pair;
pub mod platform;
mod process_stub;
pub mod space;
mod spawner;
mod stub;
pub mod sys;
pub mod sysmsg;
pub mod vdso;
pub(crate) mod walk;

pub use crate::platform::TrapPlatform;
pub use crate::spawner::start_factory;
pub use factory::{FactoryOptions, StubFactory};
pub use stub::{
    stub_syscall_instructions, StubProcess, StubThread, WindowSlot, DEFAULT_SPIN, DEFAULT_STUB_SPIN,
};

/// Why [`StubThread::switch`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrapExit {
    /// The thread executed `syscall`: the number (`si_syscall`) is in `rax`, the arguments in
    /// `rdi, rsi, rdx, r10, r8, r9`, `rip` points after the instruction. Set `rax` to the result.
    Syscall,
    /// The thread took an exception. `rip` is where Linux reports it (the faulting
    /// instruction, or after `int3`).
    Fault {
        /// x86 vector (`REG_TRAPNO`): 14 page fault, 13 general protection, 6 invalid opcode,
        /// 0 divide error, 3 breakpoint, 1 debug, 17 alignment check…
        vector: u8,
        /// The error code (`REG_ERR`; for a page fault: bit 1 write, bit 4 fetch).
        error_code: u64,
        /// The faulting address (`si_addr`; CR2 for a page fault).
        addr: u64,
        /// The host signal that reported it (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP).
        signal: i32,
    },
    /// The thread was kicked ([`StubThread::kicker`]).
    Interrupted,
}

/// Errors of the trap platform.
#[derive(Debug, thiserror::Error)]
pub enum TrapError {
    /// A host call of the holder failed.
    #[error("{call}: {source}")]
    Host {
        /// The call.
        call: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The stub failed a set-up step before it ran its own code.
    #[error("stub set-up failed at {step}: {ret}")]
    Setup {
        /// The step.
        step: &'static str,
        /// Its raw return value.
        ret: i64,
    },
    /// The stub process is dead.
    #[error("the stub process died")]
    StubDied,
    /// The host lacks something the platform needs.
    #[error("unsupported host: {0}")]
    Unsupported(&'static str),
    /// An invalid argument from the caller.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// The stub's report does not make sense (the application may have scribbled on it).
    #[error("malformed report from the stub: {0}")]
    Protocol(&'static str),
    /// A mapper command failed in the stub with this errno.
    #[error("mapper command failed: errno {0}")]
    Mapper(i32),
    /// Every sysmsg slot holds a thread.
    #[error("too many threads in one stub")]
    TooManyThreads,
    /// The stub did not answer a command in time.
    #[error("the stub did not answer in time")]
    Timeout,
    /// Every shared-window slot of the kind asked for is attached in this stub.
    #[error("too many shared windows in one stub")]
    TooManyWindows,
}

/// [`TrapError::Host`] for `call`, as a `map_err` argument.
pub(crate) fn host(call: &'static str) -> impl FnOnce(std::io::Error) -> TrapError {
    move |source| TrapError::Host { call, source }
}
