//! The x86-64 syscall table and its handlers, one file per family.
//!
//! Handlers decode and check their arguments (ABI structures through `abi`, read and written
//! whole with `Task::read_val` / `write_val`), apply Linux's rules, and call the subsystems
//! (`mm`, `fs`, `net`, `task`). They make no host call of their own and hold no `unsafe`: the
//! host is reached through the host layer below them (`fd::host`, `fs::host`, `net::host`,
//! `task::host`). Errors are errnos (`SysResult`); guest input never panics the runtime.

mod args;
mod iovec;
mod sys_adjtimex;
mod sys_aio;
mod sys_attr;
mod sys_cachestat;
mod sys_cred;
mod sys_eventfd;
mod sys_exec;
mod sys_file;
mod sys_file_attr;
mod sys_fork;
mod sys_fs;
mod sys_futex_waitv;
mod sys_info;
mod sys_inotify;
mod sys_io_uring;
mod sys_ioprio;
mod sys_lsm;
mod sys_membarrier;
mod sys_mm;
mod sys_mount_info;
mod sys_mq;
mod sys_mseal;
mod sys_msg;
mod sys_ns;
mod sys_openat2;
mod sys_pidfd;
mod sys_pipe;
mod sys_poll;
mod sys_prctl;
mod sys_process;
mod sys_rw;
mod sys_sched_attr;
mod sys_sem;
mod sys_session;
mod sys_shm;
mod sys_signal;
mod sys_signalfd;
mod sys_socket;
mod sys_stat;
mod sys_time;
mod sys_timer;
mod sys_vmsplice;
mod sys_xattr;
pub mod table;

pub use args::SyscallArgs;
pub use sys_exec::parse_shebang;
pub(crate) use sys_process::exit_robust_list;
pub use table::{dispatch, Support, TABLE};

/// What a handler returns: the value for `rax`, or an errno.
pub type SysResult = Result<u64, abi::Errno>;
