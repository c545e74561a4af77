//! The application kernel: tasks, the x86-64 syscall table, files confined to the sandbox's
//! root, the socket layer (Internet sockets behind a publish policy, Unix sockets named inside
//! the sandbox), and the ELF loader.
//!
//! Lock order (outermost first):
//!
//! ```text
//! Task (owned by its vCPU thread, unlocked)
//!   MemoryManager (Mutex, shared by a thread group)
//! ```
//!
//! No lock is held across `KVM_RUN` or a blocking host call.

pub mod broker;
pub mod checkpoint;
pub mod creds;
pub mod fd;
pub mod fs;
pub mod ipc;
pub mod loader;
pub mod net;
pub mod sandbox;
pub mod syscalls;
pub mod task;

pub use sandbox::{ExitStatus, ProcessInfo, Sandbox, SandboxConfig, SandboxError};
