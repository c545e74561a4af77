//! The runtime's seccomp-BPF allowlist: the host system calls the holder process makes once
//! its sandbox is set up (every thread role: vCPU threads running syscall handlers and the
//! hibernator, the control thread, the userfaultfd threads, timer threads). Anything else kills
//! the process (`SECCOMP_RET_KILL_PROCESS`, logged by the host kernel's audit as type 1326 with
//! the call's number).
//!
//! What is not here, on purpose: `execve`/`execveat` (but `execveat` of the two descriptors
//! of a holder that may go dormant, `super::EXEC_FDS`; a compromised handler cannot start a
//! program), `ptrace`, `process_vm_readv`/`process_vm_writev`, `mount`, `umount2`,
//! `pivot_root`, `chroot`, `setns`, `unshare` with new namespaces, the `set*id` family (but
//! `setfsuid`, `setfsgid` and `setgroups`, which change only what the thread's file calls may
//! reach: `kernel::fs::identity`),
//! module loading, `kexec`, `reboot`, `bpf`, `perf_event_open`, `keyctl`/`add_key`,
//! `open_by_handle_at`, `swapon`, `acct`, `quotactl`, `personality`. `socket` is limited to the
//! families the application may use (IPv4, IPv6, Unix, netlink's routing sockets) and
//! netlink's `sock_diag` (used to find a Unix socket's peer); `unshare` to `CLONE_FS` (a handler thread's own umask). (The
//! friendly form's copy-on-write root is taken down by its janitor, `crate::janitor`.)

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Calls allowed with any arguments.
const ALLOWED: &[libc::c_long] = &[
    // Memory.
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_mremap,
    libc::SYS_madvise,
    libc::SYS_mincore,
    libc::SYS_brk,
    libc::SYS_memfd_create,
    libc::SYS_msync,
    libc::SYS_mlock,
    libc::SYS_munlock,
    libc::SYS_membarrier,
    // Threads, futexes, signals, time.
    libc::SYS_clone,
    libc::SYS_clone3,
    libc::SYS_futex,
    libc::SYS_set_robust_list,
    libc::SYS_get_robust_list,
    libc::SYS_rseq,
    libc::SYS_set_tid_address,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_setaffinity,
    libc::SYS_getcpu,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_rt_sigqueueinfo,
    libc::SYS_rt_tgsigqueueinfo,
    libc::SYS_sigaltstack,
    libc::SYS_tgkill,
    libc::SYS_tkill,
    libc::SYS_kill,
    libc::SYS_getpid,
    libc::SYS_gettid,
    libc::SYS_getppid,
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getegid,
    libc::SYS_getgroups,
    libc::SYS_getresuid,
    libc::SYS_getresgid,
    libc::SYS_getpgrp,
    libc::SYS_getpgid,
    libc::SYS_getsid,
    libc::SYS_getrlimit,
    libc::SYS_prlimit64,
    libc::SYS_getrusage,
    libc::SYS_times,
    libc::SYS_sysinfo,
    libc::SYS_uname,
    libc::SYS_getrandom,
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_clock_nanosleep,
    // adjtimex with no mode bits (the guest's adjtimex reads the host clock's state); setting
    // the clock needs CAP_SYS_TIME, which the holder has not.
    libc::SYS_adjtimex,
    libc::SYS_gettimeofday,
    libc::SYS_time,
    libc::SYS_nanosleep,
    libc::SYS_timerfd_create,
    libc::SYS_timerfd_settime,
    libc::SYS_timerfd_gettime,
    libc::SYS_restart_syscall,
    libc::SYS_prctl,
    libc::SYS_arch_prctl,
    libc::SYS_capget,
    // A handler thread takes the application's filesystem ids and groups for its file calls
    // (`kernel::fs::identity`): filesystem access only, per thread; the other set*id calls
    // stay out.
    libc::SYS_setfsuid,
    libc::SYS_setfsgid,
    libc::SYS_setgroups,
    libc::SYS_umask,
    libc::SYS_getpriority,
    libc::SYS_sched_getparam,
    libc::SYS_sched_getscheduler,
    libc::SYS_sched_get_priority_max,
    libc::SYS_sched_get_priority_min,
    libc::SYS_sched_rr_get_interval,
    libc::SYS_wait4,
    libc::SYS_waitid,
    // Files, inside the root (the kernel confines the paths) and the state directory.
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_open,
    libc::SYS_creat,
    libc::SYS_close,
    libc::SYS_close_range,
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
    libc::SYS_lseek,
    libc::SYS_sendfile,
    libc::SYS_splice,
    libc::SYS_tee,
    libc::SYS_copy_file_range,
    libc::SYS_fstat,
    libc::SYS_stat,
    libc::SYS_lstat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    libc::SYS_statfs,
    libc::SYS_fstatfs,
    libc::SYS_access,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_readlink,
    libc::SYS_readlinkat,
    libc::SYS_getdents64,
    libc::SYS_getcwd,
    libc::SYS_chdir,
    libc::SYS_fchdir,
    libc::SYS_mkdir,
    libc::SYS_mkdirat,
    libc::SYS_rmdir,
    libc::SYS_unlink,
    libc::SYS_unlinkat,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_link,
    libc::SYS_linkat,
    libc::SYS_symlink,
    libc::SYS_symlinkat,
    libc::SYS_mknodat,
    libc::SYS_chmod,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    libc::SYS_fchmodat2,
    libc::SYS_chown,
    libc::SYS_fchown,
    libc::SYS_lchown,
    libc::SYS_fchownat,
    libc::SYS_utimensat,
    libc::SYS_futimesat,
    libc::SYS_utimes,
    libc::SYS_truncate,
    libc::SYS_ftruncate,
    libc::SYS_fallocate,
    libc::SYS_fadvise64,
    libc::SYS_readahead,
    // cachestat (the guest's cachestat, on the host file: not in every libc's table).
    451,
    // file_getattr, file_setattr (the guest's, on the host file's inode).
    468,
    469,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_sync,
    libc::SYS_syncfs,
    libc::SYS_sync_file_range,
    libc::SYS_flock,
    libc::SYS_fcntl,
    libc::SYS_dup,
    libc::SYS_dup2,
    libc::SYS_dup3,
    libc::SYS_pipe,
    libc::SYS_pipe2,
    libc::SYS_ioctl,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_getxattr,
    libc::SYS_lgetxattr,
    libc::SYS_fgetxattr,
    libc::SYS_listxattr,
    libc::SYS_llistxattr,
    libc::SYS_flistxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    libc::SYS_inotify_init1,
    libc::SYS_inotify_add_watch,
    libc::SYS_inotify_rm_watch,
    // Waiting.
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_select,
    libc::SYS_pselect6,
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_eventfd2,
    libc::SYS_signalfd4,
    // Sockets (their creation is filtered below).
    libc::SYS_socketpair,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_connect,
    libc::SYS_shutdown,
    libc::SYS_sendto,
    libc::SYS_recvfrom,
    libc::SYS_sendmsg,
    libc::SYS_recvmsg,
    libc::SYS_sendmmsg,
    libc::SYS_recvmmsg,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_setsockopt,
    libc::SYS_getsockopt,
    // Hibernation: userfaultfd (ioctls above).
    libc::SYS_userfaultfd,
    // pidfds of the runtime's own children are not used, but glibc's posix_spawn may be;
    // the trap platform's stub processes are driven and ended through theirs.
    libc::SYS_pidfd_open,
    libc::SYS_pidfd_send_signal,
];

/// The address families `socket(2)` may create.
const SOCKET_FAMILIES: &[libc::c_int] = &[libc::AF_INET, libc::AF_INET6, libc::AF_UNIX];

/// The filter: [`ALLOWED`], `socket` of [`SOCKET_FAMILIES`] and netlink `sock_diag` and
/// `route`,
/// `unshare(CLONE_FS)`; everything else kills the process, or only logs it with `log_only`
/// (to find what a new code path calls).
///
/// # Errors
/// A message if the filter cannot be built (a bug).
pub fn filter(
    log_only: bool,
    exec_fds: Option<[std::os::fd::RawFd; 2]>,
) -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &nr in ALLOWED {
        rules.insert(nr, Vec::new());
    }
    let eq = |arg: u8, v: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, v)
            .map_err(|e| e.to_string())
    };
    let mut socket = Vec::new();
    for &family in SOCKET_FAMILIES {
        socket.push(SeccompRule::new(vec![eq(0, family as u64)?]).map_err(|e| e.to_string())?);
    }
    for protocol in [libc::NETLINK_SOCK_DIAG, libc::NETLINK_ROUTE] {
        socket.push(
            SeccompRule::new(vec![
                eq(0, libc::AF_NETLINK as u64)?,
                eq(2, protocol as u64)?,
            ])
            .map_err(|e| e.to_string())?,
        );
    }
    rules.insert(libc::SYS_socket, socket);
    rules.insert(
        libc::SYS_unshare,
        vec![SeccompRule::new(vec![eq(0, libc::CLONE_FS as u64)?]).map_err(|e| e.to_string())?],
    );
    // A thread's own nice value (`PRIO_PROCESS`, 0: the calling thread), for the work of a
    // dormancy (`hibernate::background`): no other process's.
    rules.insert(
        libc::SYS_setpriority,
        vec![
            SeccompRule::new(vec![eq(0, libc::PRIO_PROCESS as u64)?, eq(1, 0)?])
                .map_err(|e| e.to_string())?,
        ],
    );
    // A thread adding its role's filter to its own (SECCOMP_SET_MODE_FILTER, no flags): a
    // filter can only take calls away.
    rules.insert(
        libc::SYS_seccomp,
        vec![SeccompRule::new(vec![
            eq(0, libc::SECCOMP_SET_MODE_FILTER as u64)?,
            eq(1, 0)?,
        ])
        .map_err(|e| e.to_string())?],
    );
    // A holder that may go dormant: `execveat` of its two pinned binaries with an empty path
    // (`super::EXEC_FDS`; Landlock lets nothing else execute, also by an absolute path).
    if let Some(fds) = exec_fds {
        let mut exec = Vec::new();
        for fd in fds {
            exec.push(
                SeccompRule::new(vec![eq(0, fd as u64)?, eq(4, libc::AT_EMPTY_PATH as u64)?])
                    .map_err(|e| e.to_string())?,
            );
        }
        rules.insert(libc::SYS_execveat, exec);
    }
    compile(rules, log_only)
}

/// The BPF program of `rules`: what they match is allowed, anything else kills the process
/// (or is only logged, with `log_only`).
fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, log_only: bool) -> Result<BpfProgram, String> {
    let mismatch = if log_only {
        SeccompAction::Log
    } else {
        SeccompAction::KillProcess
    };
    build(rules, mismatch, SeccompAction::Allow)
}

/// The BPF program of `rules`: `matched` for what they match, `mismatch` for anything else.
fn build(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    mismatch: SeccompAction,
    matched: SeccompAction,
) -> Result<BpfProgram, String> {
    let f = SeccompFilter::new(rules, mismatch, matched, TargetArch::x86_64)
        .map_err(|e| e.to_string())?;
    f.try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())
}

/// What the userfaultfd thread (`hibernate::pager`) calls: it reads fault events, reads
/// pages from the swap, REAP and program files and installs them, and on a corrupt file
/// writes the sandbox's error file and ends the process. Its filter stacks on the process's:
/// a compromised pager can do no more than this.
const PAGER_ALLOWED: &[libc::c_long] = &[
    libc::SYS_read,
    libc::SYS_pread64,
    libc::SYS_preadv,
    libc::SYS_readahead,
    libc::SYS_fadvise64,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_write,
    libc::SYS_writev,
    libc::SYS_close,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
    libc::SYS_mremap,
    libc::SYS_brk,
    libc::SYS_futex,
    libc::SYS_sched_yield,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_clock_gettime,
    libc::SYS_getrandom,
    libc::SYS_getpid,
    libc::SYS_gettid,
    libc::SYS_tgkill,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigreturn,
    libc::SYS_sigaltstack,
    libc::SYS_exit,
    libc::SYS_exit_group,
];

/// `ioctl` requests of the userfaultfd thread: UFFDIO_COPY, UFFDIO_ZEROPAGE, UFFDIO_WAKE.
const PAGER_IOCTLS: [u64; 3] = [0xc028_aa03, 0xc020_aa04, 0x8010_aa02];

/// The userfaultfd thread's filters, to stack on the process's in this order (the second
/// allows no `seccomp` call): [`pager_reads_filter`], which fails a read-only `openat`, and
/// [`pager_filter`], which lets that through to it.
///
/// # Errors
/// A message if a filter cannot be built (a bug).
pub fn pager_filters(log_only: bool) -> Result<[BpfProgram; 2], String> {
    Ok([pager_reads_filter()?, pager_filter(log_only)?])
}

/// `openat`'s flags that say what an open is for: access mode, creation, truncation, a
/// directory, a path only.
const OPEN_PURPOSE: u64 =
    (libc::O_ACCMODE | libc::O_CREAT | libc::O_TRUNC | libc::O_DIRECTORY | libc::O_PATH) as u64;

/// `openat`'s flags (argument 2) masked by [`OPEN_PURPOSE`] equal to `purpose`.
fn open_for(purpose: libc::c_int) -> Result<SeccompRule, String> {
    SeccompRule::new(vec![SeccompCondition::new(
        2,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(OPEN_PURPOSE),
        purpose as u64,
    )
    .map_err(|e| e.to_string())?])
    .map_err(|e| e.to_string())
}

/// The userfaultfd thread's own filter (see [`PAGER_ALLOWED`]): also `ioctl` of
/// [`PAGER_IOCTLS`], `openat` to create a file for writing (the error file; Landlock keeps it
/// inside the state directory) and a read-only `openat`, which [`pager_reads_filter`] then
/// fails.
///
/// # Errors
/// A message if the filter cannot be built (a bug).
pub fn pager_filter(log_only: bool) -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &nr in PAGER_ALLOWED {
        rules.insert(nr, Vec::new());
    }
    let cond = |arg: u8, len: SeccompCmpArgLen, op: SeccompCmpOp, v: u64| {
        SeccompCondition::new(arg, len, op, v).map_err(|e| e.to_string())
    };
    let mut ioctl = Vec::new();
    for req in PAGER_IOCTLS {
        ioctl.push(
            SeccompRule::new(vec![cond(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                req,
            )?])
            .map_err(|e| e.to_string())?,
        );
    }
    rules.insert(libc::SYS_ioctl, ioctl);
    // O_WRONLY|O_CREAT|O_TRUNC (and O_CLOEXEC): what std::fs::write asks; and O_RDONLY,
    // failed by the second filter. No directories, no paths of other kinds.
    rules.insert(
        libc::SYS_openat,
        vec![
            open_for(libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC)?,
            open_for(libc::O_RDONLY)?,
        ],
    );
    compile(rules, log_only)
}

/// Fails a read-only `openat` with `EACCES` (and lets every other call through to the
/// thread's other filters).
///
/// The pager reads nothing by name, but the C library may: glibc opens
/// `/proc/sys/vm/overcommit_memory` the first time a thread arena's heap shrinks, from
/// whichever thread's `free` shrinks it, to learn whether it may give pages back with
/// `MADV_DONTNEED`. When that was the pager, the open killed the process (a sandbox gone
/// without a word, seen in the test suite: the kernel's audit log named the `uffd` thread
/// and `openat`). Failed, glibc takes the answer for no (not "strict overcommit") and goes
/// on. The open would have been denied either way: an error instead of the kill is all the
/// difference.
///
/// # Errors
/// A message if the filter cannot be built (a bug).
pub fn pager_reads_filter() -> Result<BpfProgram, String> {
    let rules = BTreeMap::from([(libc::SYS_openat, vec![open_for(libc::O_RDONLY)?])]);
    build(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
    )
}

/// What the file broker (`crate::broker`) calls: it receives requests with descriptors, makes
/// the file call each names, and answers. Its only filter: a compromised broker can do no
/// more than this, inside the root Landlock leaves it.
const BROKER_ALLOWED: &[libc::c_long] = &[
    libc::SYS_recvmsg,
    libc::SYS_sendmsg,
    libc::SYS_close,
    libc::SYS_openat2,
    // Making an opened descriptor blocking again.
    libc::SYS_fcntl,
    libc::SYS_mkdirat,
    libc::SYS_mknodat,
    libc::SYS_unlinkat,
    // The C library's renameat2 without flags is the older renameat.
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_fchownat,
    libc::SYS_fchmodat,
    libc::SYS_utimensat,
    libc::SYS_setxattr,
    libc::SYS_removexattr,
    libc::SYS_bind,
    libc::SYS_connect,
    libc::SYS_setsockopt,
    // Where a descriptor leads (`/proc/self/fd`), and what it is: the checks of metadata calls.
    libc::SYS_readlink,
    libc::SYS_readlinkat,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    // Each call uses only the application's own file capabilities (`server::use_caps`).
    libc::SYS_capget,
    libc::SYS_capset,
    libc::SYS_write,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_madvise,
    libc::SYS_brk,
    libc::SYS_futex,
    libc::SYS_sigaltstack,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_exit,
    libc::SYS_exit_group,
];

/// The file broker's filter (see [`BROKER_ALLOWED`]), and `socket` of the Internet families
/// (its published ports' sockets, when the holder is in a network namespace of its own).
///
/// # Errors
/// A message if the filter cannot be built (a bug).
pub fn broker_filter(log_only: bool) -> Result<BpfProgram, String> {
    broker_filter_with(&[], log_only)
}

/// What the node's file broker does beside a sandbox's: accept its holders' connections on
/// its socket and wait on all of them (epoll), check who registers (`SO_PEERCRED`,
/// `SO_PEERPIDFD`, `/proc/PID/status` and `uid_map` read, the pidfd polled), and read each
/// descriptor's mount (`statx`, in [`BROKER_ALLOWED`] already).
const NODE_BROKER_ALLOWED: &[libc::c_long] = &[
    libc::SYS_accept4,
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_getsockopt,
    libc::SYS_openat,
    libc::SYS_read,
    libc::SYS_ppoll,
    libc::SYS_clock_gettime,
    // Its table of holders' keys (a hash map's seed), and its files' removal as it leaves.
    libc::SYS_getrandom,
    libc::SYS_unlink,
    libc::SYS_rmdir,
];

/// The node's file broker's filter: a sandbox broker's ([`broker_filter`]) and
/// [`NODE_BROKER_ALLOWED`].
///
/// # Errors
/// A message if the filter cannot be built (a bug).
pub fn node_broker_filter(log_only: bool) -> Result<BpfProgram, String> {
    broker_filter_with(NODE_BROKER_ALLOWED, log_only)
}

fn broker_filter_with(more: &[libc::c_long], log_only: bool) -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BROKER_ALLOWED
        .iter()
        .chain(more)
        .map(|&nr| (nr, Vec::new()))
        .collect();
    let mut socket = Vec::new();
    for family in [libc::AF_INET, libc::AF_INET6] {
        socket.push(
            SeccompRule::new(vec![SeccompCondition::new(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                family as u64,
            )
            .map_err(|e| e.to_string())?])
            .map_err(|e| e.to_string())?,
        );
    }
    rules.insert(libc::SYS_socket, socket);
    compile(rules, log_only)
}

/// What the control role never does (the thread that accepts control connections and the
/// per-request threads it starts: state, stats, hibernate, wake, kill, delete): make a
/// socket or reach an address, change a file's metadata, make links, device nodes or copies
/// between descriptors, watch files, or build a VM (an `exec` request hands its process to the
/// spawner thread, which keeps the process filter). Its filter stacks on the process's: a
/// compromised control thread (its JSON parsing is its own attack surface) can do no more than
/// the deflate, the wake and the state directory need.
const CONTROL_DENIED: &[libc::c_long] = &[
    libc::SYS_socket,
    libc::SYS_socketpair,
    libc::SYS_connect,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_mknodat,
    libc::SYS_link,
    libc::SYS_linkat,
    libc::SYS_symlink,
    libc::SYS_symlinkat,
    libc::SYS_chmod,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    libc::SYS_fchmodat2,
    libc::SYS_chown,
    libc::SYS_fchown,
    libc::SYS_lchown,
    libc::SYS_fchownat,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    libc::SYS_splice,
    libc::SYS_tee,
    libc::SYS_copy_file_range,
    libc::SYS_sendfile,
    libc::SYS_inotify_init1,
    libc::SYS_inotify_add_watch,
];

/// `KVM_CREATE_VM` and `KVM_CREATE_VCPU` (`_IO(KVMIO, 0x01)`, `_IO(KVMIO, 0x41)`).
const KVM_CREATE_IOCTLS: [u64; 2] = [0xae01, 0xae41];

/// The control role's filter (see [`CONTROL_DENIED`]): stacked on the process's, it kills the
/// process on those calls and lets the rest through to the process filter.
///
/// # Errors
/// A message if the filter cannot be built (a bug).
pub fn control_filter(log_only: bool) -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        CONTROL_DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
    let mut ioctl = Vec::new();
    for req in KVM_CREATE_IOCTLS {
        ioctl.push(
            SeccompRule::new(vec![SeccompCondition::new(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                req,
            )
            .map_err(|e| e.to_string())?])
            .map_err(|e| e.to_string())?,
        );
    }
    rules.insert(libc::SYS_ioctl, ioctl);
    let matched = if log_only {
        SeccompAction::Log
    } else {
        SeccompAction::KillProcess
    };
    build(rules, SeccompAction::Allow, matched)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_control_filter_builds_and_takes_calls_away() {
        assert!(control_filter(false).is_ok());
        // Nothing it takes away is a call the process filter lacks for no reason: each is one
        // the handlers make.
        for nr in CONTROL_DENIED {
            let in_process_filter = ALLOWED.contains(nr) || *nr == libc::SYS_socket;
            assert!(in_process_filter, "{nr} is the handlers' only");
        }
        // What the deflate, the wake and the state directory need stays.
        for nr in [
            libc::SYS_openat,
            libc::SYS_pwrite64,
            libc::SYS_unlinkat,
            libc::SYS_renameat2,
            libc::SYS_userfaultfd,
            libc::SYS_madvise,
            libc::SYS_clone3,
            libc::SYS_accept4,
        ] {
            assert!(!CONTROL_DENIED.contains(&nr), "{nr} is the control role's");
        }
    }

    /// In a child process under the pager's filters: `openat(path, flags)`'s errno (0 for a
    /// descriptor), or how the child died.
    fn open_under_pager_filters(path: &std::ffi::CStr, flags: libc::c_int) -> String {
        let filters = pager_filters(false).expect("the filters");
        // SAFETY: the child makes raw calls only (prctl, seccomp, openat, _exit) on data
        // prepared before the fork.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            // SAFETY: the child's own calls, as above.
            unsafe {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                for f in &filters {
                    let prog = libc::sock_fprog {
                        len: f.len() as u16,
                        filter: f.as_ptr().cast_mut().cast(),
                    };
                    if libc::syscall(libc::SYS_seccomp, 1, 0, &prog) != 0 {
                        libc::_exit(100);
                    }
                }
                let fd = libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path.as_ptr(), flags);
                let code = if fd >= 0 {
                    0
                } else {
                    *libc::__errno_location()
                };
                libc::_exit(code);
            }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if libc::WIFSIGNALED(status) {
            format!("killed by signal {}", libc::WTERMSIG(status))
        } else {
            format!("errno {}", libc::WEXITSTATUS(status))
        }
    }

    #[test]
    fn the_pager_fails_a_read_only_open_and_dies_of_any_other() {
        let overcommit = c"/proc/sys/vm/overcommit_memory";
        // What glibc asks when a thread arena's heap first shrinks.
        assert_eq!(
            open_under_pager_filters(overcommit, libc::O_RDONLY | libc::O_CLOEXEC),
            format!("errno {}", libc::EACCES)
        );
        assert_eq!(
            open_under_pager_filters(overcommit, libc::O_RDWR),
            format!("killed by signal {}", libc::SIGSYS)
        );
        assert_eq!(
            open_under_pager_filters(c"/", libc::O_RDONLY | libc::O_DIRECTORY),
            format!("killed by signal {}", libc::SIGSYS)
        );
        // The error file: created for writing.
        let dir = std::env::temp_dir().join(format!("torpor-pager-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let file = std::ffi::CString::new(dir.join("error").into_os_string().into_encoded_bytes())
            .expect("a path");
        assert_eq!(
            open_under_pager_filters(&file, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC),
            "errno 0"
        );
        std::fs::remove_dir_all(&dir).expect("removed");
    }

    #[test]
    fn the_pager_filter_builds_and_is_narrower() {
        assert!(pager_filter(false).is_ok());
        for nr in [
            libc::SYS_socket,
            libc::SYS_connect,
            libc::SYS_execve,
            libc::SYS_clone,
            libc::SYS_clone3,
            libc::SYS_openat2,
            libc::SYS_unlinkat,
            libc::SYS_renameat2,
        ] {
            assert!(!PAGER_ALLOWED.contains(&nr), "{nr} is not the pager's");
        }
        for nr in PAGER_ALLOWED {
            assert!(
                ALLOWED.contains(nr),
                "{nr}: the process filter allows all the pager's calls"
            );
        }
    }

    #[test]
    fn the_broker_filter_builds_and_starts_no_program() {
        assert!(broker_filter(false).is_ok());
        for nr in [
            libc::SYS_socket, // only with conditions: the Internet families
            libc::SYS_execve,
            libc::SYS_clone,
            libc::SYS_clone3,
            libc::SYS_openat,
            libc::SYS_ioctl,
            libc::SYS_ptrace,
        ] {
            assert!(!BROKER_ALLOWED.contains(&nr), "{nr} is not the broker's");
        }
    }

    #[test]
    fn the_filter_builds_and_leaves_out_the_dangerous_calls() {
        assert!(filter(false, None).is_ok());
        assert!(filter(false, Some(super::super::EXEC_FDS)).is_ok());
        for nr in [
            libc::SYS_execve,
            libc::SYS_execveat,
            libc::SYS_ptrace,
            libc::SYS_mount,
            libc::SYS_umount2,
            libc::SYS_setns,
            libc::SYS_setuid,
            libc::SYS_setresuid,
            libc::SYS_setreuid,
            libc::SYS_setgid,
            libc::SYS_setresgid,
            libc::SYS_capset,
            libc::SYS_init_module,
            libc::SYS_bpf,
            libc::SYS_process_vm_writev,
        ] {
            assert!(!ALLOWED.contains(&nr), "{nr} must not be allowed");
        }
    }
}
