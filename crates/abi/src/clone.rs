//! The flags of clone(2) (`CLONE_*`, the low byte being the exit signal), as
//! `include/uapi/linux/sched.h` defines them.

/// Share the address space.
pub const CLONE_VM: u64 = 0x100;
/// Share the working directory, root and umask.
pub const CLONE_FS: u64 = 0x200;
/// Share the descriptor table.
pub const CLONE_FILES: u64 = 0x400;
/// Share the signal handlers.
pub const CLONE_SIGHAND: u64 = 0x800;
/// The child's parent is the caller's parent.
pub const CLONE_PARENT: u64 = 0x8000;
/// The parent sleeps until the child execs or exits.
pub const CLONE_VFORK: u64 = 0x4000;
/// A thread of the caller's thread group.
pub const CLONE_THREAD: u64 = 0x1_0000;
/// Share System V semaphore undo lists.
pub const CLONE_SYSVSEM: u64 = 0x4_0000;
/// Set the child's TLS (fs base) to the `tls` argument.
pub const CLONE_SETTLS: u64 = 0x8_0000;
/// Store the child's tid at `parent_tid` in the parent.
pub const CLONE_PARENT_SETTID: u64 = 0x10_0000;
/// Clear `child_tid` and wake a futex there when the child exits.
pub const CLONE_CHILD_CLEARTID: u64 = 0x20_0000;
/// Ignored since Linux 2.6.
pub const CLONE_DETACHED: u64 = 0x40_0000;
/// Store the child's tid at `child_tid` in the child.
pub const CLONE_CHILD_SETTID: u64 = 0x100_0000;
/// Share the I/O context (I/O scheduling; nothing to share in a sandbox).
pub const CLONE_IO: u64 = 0x8000_0000;
/// The exit signal's bits.
pub const CSIGNAL: u64 = 0xff;
