//! The application kernel: tasks, the x86-64 syscall table, files confined to the sandbox's
//! root, the socket layer (Internet sockets behind a publish policy, Unix sockets named inside
//! the sandbox), and the ELF loader.
//!
//! Locks: a `Task` belongs to its host thread, unlocked; the kernel's 42 locks (the process
//! table, a thread group's members and futex queues, each address space's `MemoryManager`
//! mutex...) and their order are listed in `docs/ARCHITECTURE.md` ("Locks"). In short: no
//! lock is held while application code runs; the `MemoryManager` mutex is held for a whole
//! operation, including the platform's commit of page-table changes (the PTE-sync `KVM_RUN`
//! on KVM, the mapper's round trips on trap), and taken before the hibernation pager's state;
//! guest I/O (reads, writes, polls, futex waits) runs with no lock held.

pub mod aio;
pub mod broker;
pub mod checkpoint;
pub mod creds;
pub mod fd;
pub mod fs;
pub mod io_uring;
pub mod ipc;
pub mod loader;
pub mod net;
pub mod sandbox;
pub mod syscalls;
pub mod task;

pub use sandbox::{ExitStatus, ProcessInfo, Sandbox, SandboxConfig, SandboxError};
