//! The syscall table: one entry per implemented number, with its support level; everything
//! else is ENOSYS, logged once per number.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use abi::Errno;

use super::{
    sys_adjtimex, sys_aio, sys_attr, sys_cachestat, sys_cred, sys_eventfd, sys_exec, sys_file,
    sys_file_attr, sys_fork, sys_fs, sys_futex_waitv, sys_info, sys_inotify, sys_io_uring,
    sys_ioprio, sys_lsm, sys_membarrier, sys_mm, sys_mount_info, sys_mq, sys_mseal, sys_msg,
    sys_ns, sys_openat2, sys_pidfd, sys_pipe, sys_poll, sys_prctl, sys_process, sys_rw,
    sys_sched_attr, sys_sem, sys_session, sys_shm, sys_signal, sys_signalfd, sys_socket, sys_stat,
    sys_time, sys_timer, sys_vmsplice, sys_xattr, SysResult, SyscallArgs,
};
use crate::task::Task;

/// A handler.
pub type Handler = fn(&mut Task, &SyscallArgs) -> SysResult;

/// How completely a syscall is implemented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    /// As on Linux.
    Full,
    /// Implemented with the stated gaps.
    Partial(&'static str),
}

/// One table entry.
pub struct Entry {
    /// Syscall number.
    pub nr: u64,
    /// Name as in the Linux table.
    pub name: &'static str,
    /// The handler.
    pub handler: Handler,
    /// Support level.
    pub support: Support,
}

macro_rules! table {
    ($($nr:literal $name:ident => $h:path, $sup:expr;)*) => {
        /// Every implemented syscall.
        pub static TABLE: &[Entry] = &[
            $(Entry { nr: $nr, name: stringify!($name), handler: $h, support: $sup },)*
        ];
    };
}

use Support::{Full, Partial};

table! {
    0 read => sys_rw::sys_read, Full;
    1 write => sys_rw::sys_write, Full;
    2 open => sys_file::sys_open, Full;
    3 close => sys_file::sys_close, Full;
    4 stat => sys_stat::sys_stat, Full;
    5 fstat => sys_stat::sys_fstat, Full;
    6 lstat => sys_stat::sys_lstat, Full;
    7 poll => sys_poll::sys_poll, Full;
    8 lseek => sys_rw::sys_lseek, Full;
    9 mmap => sys_mm::sys_mmap, Partial("MAP_SHARED file mappings are private copies");
    10 mprotect => sys_mm::sys_mprotect, Full;
    11 munmap => sys_mm::sys_munmap, Full;
    12 brk => sys_mm::sys_brk, Full;
    13 rt_sigaction => sys_signal::sys_rt_sigaction, Partial("SA_RESTORER required, as on Linux x86-64; a checkpoint does not keep a process stopped by a stop signal");
    14 rt_sigprocmask => sys_signal::sys_rt_sigprocmask, Full;
    15 rt_sigreturn => sys_signal::sys_rt_sigreturn, Full;
    16 ioctl => sys_file::sys_ioctl, Partial("TCGETS, TCSETS*, TIOCGWINSZ, TIOCSWINSZ, TIOCGPGRP/TIOCSPGRP (a foreground group per session, signalled by Ctrl-C through `exec -t`; no SIGTTIN/SIGTTOU for background reads and writes), FIONBIO, FIONREAD, FIOCLEX, FIONCLEX, FIOASYNC (as fcntl O_ASYNC); on a pseudo-terminal the guest opened (/dev/ptmx) also TIOCGPTN, TIOCSPTLCK, TIOCGPTPEER, and TIOCSCTTY/TIOCNOTTY accepted without effect; on a socket the interface queries (SIOCGIFINDEX, SIOCGIFNAME, SIOCGIFFLAGS..., SIOCGIFCONF) in the sandbox's own network namespace");
    17 pread64 => sys_rw::sys_pread64, Full;
    18 pwrite64 => sys_rw::sys_pwrite64, Full;
    19 readv => sys_rw::sys_readv, Full;
    20 writev => sys_rw::sys_writev, Full;
    21 access => sys_stat::sys_access, Full;
    22 pipe => sys_pipe::sys_pipe, Full;
    24 sched_yield => sys_process::sys_sched_yield, Full;
    25 mremap => sys_mm::sys_mremap, Full;
    28 madvise => sys_mm::sys_madvise, Full;
    462 mseal => sys_mseal::sys_mseal, Full;
    216 remap_file_pages => sys_mseal::sys_remap_file_pages, Full;
    26 msync => sys_mm::sys_msync, Partial("shared file mappings are the host page cache: MS_SYNC writes back the root's whole filesystem");
    32 dup => sys_file::sys_dup, Full;
    33 dup2 => sys_file::sys_dup2, Full;
    35 nanosleep => sys_time::sys_nanosleep, Full;
    39 getpid => sys_process::sys_getpid, Full;
    41 socket => sys_socket::sys_socket, Partial("AF_INET, AF_INET6 and AF_UNIX (stream, datagram, seqpacket); AF_NETLINK's NETLINK_ROUTE in the sandbox's own network namespace");
    42 connect => sys_socket::sys_connect, Partial("loopback to the sandbox's own ports unless outbound is allowed");
    43 accept => sys_socket::sys_accept, Full;
    44 sendto => sys_socket::sys_sendto, Full;
    45 recvfrom => sys_socket::sys_recvfrom, Full;
    46 sendmsg => sys_socket::sys_sendmsg, Partial("SCM_RIGHTS and SCM_CREDENTIALS on Unix sockets (credentials checked, recorded for the receiver); other control messages on Internet sockets passed to the host");
    47 recvmsg => sys_socket::sys_recvmsg, Partial("SCM_CREDENTIALS show the guest ids of the task that last sent on the sending socket, not of each message's sending thread");
    307 sendmmsg => sys_socket::sys_sendmmsg, Full;
    299 recvmmsg => sys_socket::sys_recvmmsg, Partial("the timeout is checked after each message, as on Linux; the time left is not stored back");
    48 shutdown => sys_socket::sys_shutdown, Full;
    53 socketpair => sys_socket::sys_socketpair, Partial("AF_UNIX only (EOPNOTSUPP for the others, as Linux for AF_INET)");
    49 bind => sys_socket::sys_bind, Partial("Internet ports map to published host addresses or loopback; Unix names are created in the root or a sandbox-private abstract namespace");
    50 listen => sys_socket::sys_listen, Full;
    51 getsockname => sys_socket::sys_getsockname, Full;
    52 getpeername => sys_socket::sys_getpeername, Full;
    54 setsockopt => sys_socket::sys_setsockopt, Full;
    55 getsockopt => sys_socket::sys_getsockopt, Full;
    60 exit => sys_process::sys_exit, Full;
    63 uname => sys_info::sys_uname, Full;
    135 personality => sys_info::sys_personality, Partial("the persona is kept and reported; but for UNAME26 (uname's release) it changes nothing");
    73 flock => sys_file::sys_flock, Full;
    74 fsync => sys_rw::sys_fsync, Full;
    75 fdatasync => sys_rw::sys_fsync, Partial("as fsync");
    77 ftruncate => sys_rw::sys_ftruncate, Full;
    72 fcntl => sys_file::sys_fcntl, Partial("F_DUPFD, F_GETFD/SETFD, F_GETFL/SETFL, record locks (F_GETLK/SETLK/SETLKW per descriptor table as on Linux, F_SETLKW's EDEADLK among the sandbox's processes; F_OFD_*), F_GET/SETPIPE_SZ, F_CREATED_QUERY; F_SETOWN/F_SETOWN_EX/F_SETSIG and their getters; SIGIO (or the F_SETSIG signal) is sent for leases, F_NOTIFY and O_ASYNC pipes written or read by the sandbox, not for sockets, terminals or a pipe's other end outside the sandbox; F_SETLEASE/F_GETLEASE broken by the sandbox's opens (not by truncate(2) nor outside opens); F_NOTIFY from host inotify, signalled after each syscall");
    79 getcwd => sys_fs::sys_getcwd, Full;
    80 chdir => sys_fs::sys_chdir, Full;
    81 fchdir => sys_fs::sys_fchdir, Full;
    161 chroot => sys_fs::sys_chroot, Partial("the calling thread only; a working directory outside the new root moves to it");
    83 mkdir => sys_fs::sys_mkdir, Full;
    84 rmdir => sys_fs::sys_rmdir, Full;
    87 unlink => sys_fs::sys_unlink, Full;
    89 readlink => sys_stat::sys_readlink, Full;
    95 umask => sys_fs::sys_umask, Full;
    96 gettimeofday => sys_time::sys_gettimeofday, Full;
    97 getrlimit => sys_info::sys_getrlimit, Full;
    160 setrlimit => sys_info::sys_setrlimit, Partial("RLIMIT_NOFILE bounds the descriptor table, other limits are kept and reported");
    102 getuid => sys_cred::sys_getuid, Full;
    104 getgid => sys_cred::sys_getgid, Full;
    107 geteuid => sys_cred::sys_geteuid, Full;
    108 getegid => sys_cred::sys_getegid, Full;
    115 getgroups => sys_cred::sys_getgroups, Full;
    118 getresuid => sys_cred::sys_getresuid, Full;
    120 getresgid => sys_cred::sys_getresgid, Full;
    105 setuid => sys_cred::sys_setuid, Full;
    106 setgid => sys_cred::sys_setgid, Full;
    113 setreuid => sys_cred::sys_setreuid, Full;
    114 setregid => sys_cred::sys_setregid, Full;
    117 setresuid => sys_cred::sys_setresuid, Full;
    119 setresgid => sys_cred::sys_setresgid, Full;
    122 setfsuid => sys_cred::sys_setfsuid, Full;
    123 setfsgid => sys_cred::sys_setfsgid, Full;
    116 setgroups => sys_cred::sys_setgroups, Full;
    125 capget => sys_cred::sys_capget, Full;
    126 capset => sys_cred::sys_capset, Partial("no file capabilities: an execve grants root's implicit ones and ambient ones only");
    110 getppid => sys_process::sys_getppid, Full;
    111 getpgrp => sys_session::sys_getpgrp, Full;
    109 setpgid => sys_session::sys_setpgid, Full;
    121 getpgid => sys_session::sys_getpgid, Full;
    112 setsid => sys_session::sys_setsid, Partial("no controlling terminal is attached or detached");
    124 getsid => sys_session::sys_getsid, Full;
    158 arch_prctl => sys_process::sys_arch_prctl, Partial("ARCH_SET_FS, ARCH_GET_FS, ARCH_SET_GS, ARCH_GET_GS");
    186 gettid => sys_process::sys_gettid, Full;
    201 time => sys_time::sys_time, Full;
    206 io_setup => sys_aio::sys_io_setup, Full;
    207 io_destroy => sys_aio::sys_io_destroy, Full;
    208 io_getevents => sys_aio::sys_io_getevents, Full;
    425 io_uring_setup => sys_io_uring::sys_io_uring_setup, Partial("IORING_SETUP_IOPOLL, HYBRID_IOPOLL, NO_MMAP, REGISTERED_FD_ONLY, R_DISABLED and CQE_MIXED are EINVAL; an SQPOLL ring has no polling thread: IORING_SQ_NEED_WAKEUP stays set and each io_uring_enter submits");
    426 io_uring_enter => sys_io_uring::sys_io_uring_enter, Partial("requests run in the call (one that must wait for a stream, a poll, a timeout or a drain runs in a later io_uring_enter of the same process); READ_MULTISHOT, WAITID, the FUTEX ops, URING_CMD, the zero-copy sends and receives, PROVIDE/REMOVE_BUFFERS, FIXED_FD_INSTALL and EPOLL_WAIT complete with EOPNOTSUPP; requests run through the syscall table by descriptor number take no registered file (EBADF)");
    427 io_uring_register => sys_io_uring::sys_io_uring_register, Partial("buffers, files (and updates), eventfd, probe, IOWQ_AFF and IOWQ_MAX_WORKERS (accepted, no workers); personalities, restrictions, registered rings, provided buffer rings and the rest are EINVAL; buffers count against RLIMIT_MEMLOCK per ring (Linux: per user) and are used through the process's current mappings, not pinned");
    209 io_submit => sys_aio::sys_io_submit, Partial("requests complete during the call (as Linux's buffered I/O does), so io_cancel finds none in flight; IOCB_CMD_POLL is EINVAL, as before Linux 4.18");
    210 io_cancel => sys_aio::sys_io_cancel, Partial("no request is ever in flight: EINVAL, as for a completed one");
    202 futex => sys_process::sys_futex, Partial("WAIT, WAKE, bitsets, REQUEUE, CMP_REQUEUE; no PI or WAKE_OP");
    159 adjtimex => sys_adjtimex::sys_adjtimex, Partial("reads the host clock's state; every setting mode is EPERM (no CAP_SYS_TIME over the host clock)");
    305 clock_adjtime => sys_adjtimex::sys_clock_adjtime, Partial("CLOCK_REALTIME as adjtimex; other clocks EOPNOTSUPP, no dynamic (PTP) clocks");
    461 lsm_list_modules => sys_lsm::sys_lsm_list_modules, Partial("the capability module only");
    459 lsm_get_self_attr => sys_lsm::sys_lsm_get_self_attr, Partial("no module provides attributes: EOPNOTSUPP");
    460 lsm_set_self_attr => sys_lsm::sys_lsm_set_self_attr, Partial("no module provides attributes: EOPNOTSUPP");
    468 file_getattr => sys_file_attr::sys_file_getattr, Partial("the host file's own attributes (EOPNOTSUPP where its filesystem has none)");
    469 file_setattr => sys_file_attr::sys_file_setattr, Partial("on the host file, by the host's checks (EOPNOTSUPP where its filesystem has none)");
    457 statmount => sys_mount_info::sys_statmount, Partial("the sandbox's mounts as mountinfo shows them: SB_BASIC, MNT_BASIC (every mount private), MNT_ROOT, MNT_POINT, FS_TYPE, MNT_NS_ID, MNT_OPTS, SB_SOURCE; no idmaps, option arrays or subtypes");
    458 listmount => sys_mount_info::sys_listmount, Partial("the sandbox's mounts as mountinfo shows them; one mount namespace");
    449 futex_waitv => sys_futex_waitv::sys_futex_waitv, Partial("32-bit words only, as Linux; FUTEX2_NUMA is EINVAL");
    272 unshare => sys_ns::sys_unshare, Partial("CLONE_FILES, CLONE_FS, CLONE_SYSVSEM, and CLONE_THREAD, CLONE_SIGHAND, CLONE_VM in a single-threaded process; a new namespace is EPERM (a new user namespace too, which Linux allows anyone)");
    308 setns => sys_ns::sys_setns, Partial("the sandbox's namespaces are the only ones: checked as Linux, then EPERM (EINVAL for the caller's own user namespace)");
    435 clone3 => sys_process::sys_clone3, Partial("ENOSYS on purpose: the C libraries fall back to clone");
    56 clone => sys_process::sys_clone, Partial("threads (CLONE_VM | CLONE_THREAD | CLONE_SIGHAND) and processes (a fork copies the parent's memory eagerly into a new VM); CLONE_FILES, CLONE_FS, CLONE_SIGHAND between processes and CLONE_VM without CLONE_VFORK are EINVAL; the CLONE_NEW* flags EPERM (no namespace can be made)");
    57 fork => sys_fork::sys_fork, Partial("the child gets an eager copy of the parent's memory (no copy-on-write)");
    58 vfork => sys_fork::sys_vfork, Partial("the child runs on a copy of the parent's memory: its writes are not seen by the parent");
    59 execve => sys_exec::sys_execve, Partial("set-user-ID and set-group-ID honoured without file capabilities; from a multi-threaded process the other threads end first (EAGAIN if they do not within 5 s)");
    322 execveat => sys_exec::sys_execveat, Partial("as execve; with AT_EMPTY_PATH the file is found again by the guest path it was opened by");
    61 wait4 => sys_fork::sys_wait4, Partial("the resource usage holds user and system time only");
    64 semget => sys_sem::sys_semget, Full;
    65 semop => sys_sem::sys_semop, Full;
    220 semtimedop => sys_sem::sys_semtimedop, Full;
    66 semctl => sys_sem::sys_semctl, Partial("GETNCNT and GETZCNT report 0; no IPC_INFO/SEM_INFO");
    68 msgget => sys_msg::sys_msgget, Full;
    69 msgsnd => sys_msg::sys_msgsnd, Full;
    70 msgrcv => sys_msg::sys_msgrcv, Full;
    71 msgctl => sys_msg::sys_msgctl, Full;
    240 mq_open => sys_mq::sys_mq_open, Full;
    241 mq_unlink => sys_mq::sys_mq_unlink, Full;
    242 mq_timedsend => sys_mq::sys_mq_timedsend, Full;
    243 mq_timedreceive => sys_mq::sys_mq_timedreceive, Full;
    244 mq_notify => sys_mq::sys_mq_notify, Partial("SIGEV_THREAD's cookies reach the C library's netlink socket through a datagram channel torpor puts behind it (its other uses of that socket end)");
    245 mq_getsetattr => sys_mq::sys_mq_getsetattr, Full;
    29 shmget => sys_shm::sys_shmget, Full;
    30 shmat => sys_shm::sys_shmat, Full;
    67 shmdt => sys_shm::sys_shmdt, Full;
    31 shmctl => sys_shm::sys_shmctl, Partial("IPC_STAT, SHM_STAT, IPC_SET, IPC_RMID, SHM_LOCK/UNLOCK; no IPC_INFO/SHM_INFO");
    282 signalfd => sys_signalfd::sys_signalfd, Full;
    289 signalfd4 => sys_signalfd::sys_signalfd4, Full;
    295 preadv => sys_rw::sys_preadv, Full;
    296 pwritev => sys_rw::sys_pwritev, Full;
    327 preadv2 => sys_rw::sys_preadv2, Partial("flags are hints and ignored");
    328 pwritev2 => sys_rw::sys_pwritev2, Partial("flags are hints and ignored (RWF_APPEND too)");
    36 getitimer => sys_time::sys_getitimer, Partial("ITIMER_VIRTUAL counts the process's whole CPU time, like ITIMER_PROF");
    38 setitimer => sys_time::sys_setitimer, Partial("ITIMER_VIRTUAL counts the process's whole CPU time, like ITIMER_PROF; CPU timers fire up to about 1 ms late");
    37 alarm => sys_time::sys_alarm, Full;
    221 fadvise64 => sys_rw::sys_fadvise64, Full;
    187 readahead => sys_rw::sys_readahead, Full;
    277 sync_file_range => sys_rw::sys_sync_file_range, Full;
    247 waitid => sys_fork::sys_waitid, Partial("the resource usage holds user and system time only");
    434 pidfd_open => sys_fork::sys_pidfd_open, Full;
    438 pidfd_getfd => sys_pidfd::sys_pidfd_getfd, Full;
    312 kcmp => sys_pidfd::sys_kcmp, Partial("KCMP_FILE, KCMP_VM, KCMP_FILES and KCMP_SIGHAND; the other types are EINVAL");
    324 membarrier => sys_membarrier::sys_membarrier, Partial("every command the host has; MEMBARRIER_CMD_FLAG_CPU's barrier covers every CPU; on the trap platform the expedited barriers are the host's MEMBARRIER_CMD_GLOBAL (slower)");
    251 ioprio_set => sys_ioprio::sys_ioprio_set, Partial("kept and reported per process (per thread on Linux), never given to the host's I/O scheduler");
    252 ioprio_get => sys_ioprio::sys_ioprio_get, Partial("kept and reported per process (per thread on Linux)");
    153 vhangup => sys_session::sys_vhangup, Partial("EPERM without CAP_SYS_TTY_CONFIG; with it, no terminal is hung up");
    424 pidfd_send_signal => sys_fork::sys_pidfd_send_signal, Full;
    217 getdents64 => sys_fs::sys_getdents64, Full;
    218 set_tid_address => sys_process::sys_set_tid_address, Full;
    228 clock_gettime => sys_time::sys_clock_gettime, Partial("CPU-time clocks of the caller's own thread and process only (the process clock counts the whole sandbox's host process)");
    229 clock_getres => sys_time::sys_clock_getres, Full;
    230 clock_nanosleep => sys_time::sys_clock_nanosleep, Full;
    231 exit_group => sys_process::sys_exit_group, Full;
    232 epoll_wait => sys_poll::sys_epoll_wait, Full;
    233 epoll_ctl => sys_poll::sys_epoll_ctl, Full;
    234 tgkill => sys_signal::sys_tgkill, Full;
    62 kill => sys_signal::sys_kill, Full;
    200 tkill => sys_signal::sys_tkill, Full;
    34 pause => sys_signal::sys_pause, Full;
    127 rt_sigpending => sys_signal::sys_rt_sigpending, Full;
    128 rt_sigtimedwait => sys_signal::sys_rt_sigtimedwait, Partial("restarted with the full timeout after a hibernation");
    129 rt_sigqueueinfo => sys_signal::sys_rt_sigqueueinfo, Full;
    130 rt_sigsuspend => sys_signal::sys_rt_sigsuspend, Full;
    131 sigaltstack => sys_signal::sys_sigaltstack, Full;
    297 rt_tgsigqueueinfo => sys_signal::sys_rt_tgsigqueueinfo, Partial("single process: only the calling thread");
    257 openat => sys_file::sys_openat, Full;
    437 openat2 => sys_openat2::sys_openat2, Partial("RESOLVE_* applied by torpor's own walk: NO_XDEV knows the sandbox's mounts and /proc; RESOLVE_CACHED is a plain lookup");
    258 mkdirat => sys_fs::sys_mkdirat, Full;
    262 newfstatat => sys_stat::sys_newfstatat, Full;
    263 unlinkat => sys_fs::sys_unlinkat, Full;
    267 readlinkat => sys_stat::sys_readlinkat, Full;
    269 faccessat => sys_stat::sys_faccessat, Full;
    23 select => sys_poll::sys_select, Full;
    270 pselect6 => sys_poll::sys_pselect6, Full;
    271 ppoll => sys_poll::sys_ppoll, Full;
    273 set_robust_list => sys_process::sys_set_robust_list, Full;
    274 get_robust_list => sys_process::sys_get_robust_list, Full;
    281 epoll_pwait => sys_poll::sys_epoll_pwait, Full;
    441 epoll_pwait2 => sys_poll::sys_epoll_pwait2, Partial("the timeout is rounded up to whole milliseconds");
    288 accept4 => sys_socket::sys_accept4, Full;
    291 epoll_create1 => sys_poll::sys_epoll_create1, Full;
    213 epoll_create => sys_poll::sys_epoll_create, Full;
    292 dup3 => sys_file::sys_dup3, Full;
    293 pipe2 => sys_pipe::sys_pipe2, Full;
    284 eventfd => sys_eventfd::sys_eventfd, Full;
    290 eventfd2 => sys_eventfd::sys_eventfd2, Full;
    283 timerfd_create => sys_eventfd::sys_timerfd_create, Full;
    286 timerfd_settime => sys_eventfd::sys_timerfd_settime, Full;
    287 timerfd_gettime => sys_eventfd::sys_timerfd_gettime, Full;
    222 timer_create => sys_timer::sys_timer_create, Partial("CLOCK_REALTIME, _MONOTONIC, _BOOTTIME, _TAI (the _ALARM clocks as their base clock, EPERM without CAP_WAKE_ALARM) and the CPU clocks of the process and its threads (a CPU timer fires up to about 1 ms late; a thread's clock is its host thread's, as clock_gettime reads it; other processes' CPU clocks are EINVAL); at most 4096 timers per process (then EAGAIN); a signal for the process goes to its first thread; an ignored signal's timer is queued again at its next expiry, not when the signal stops being ignored; a checkpoint keeps disarmed timers and fails on an armed one");
    223 timer_settime => sys_timer::sys_timer_settime, Full;
    224 timer_gettime => sys_timer::sys_timer_gettime, Full;
    225 timer_getoverrun => sys_timer::sys_timer_getoverrun, Full;
    226 timer_delete => sys_timer::sys_timer_delete, Full;
    99 sysinfo => sys_info::sys_sysinfo, Partial("memory figures are the sandbox's limit and allocator, load averages zero");
    204 sched_getaffinity => sys_info::sys_sched_getaffinity, Partial("the host CPUs, or the mask the calling thread set; other tasks report the host CPUs");
    302 prlimit64 => sys_info::sys_prlimit64, Partial("the calling process only; RLIMIT_NOFILE bounds the descriptor table, other limits are kept and reported");
    318 getrandom => sys_info::sys_getrandom, Full;
    170 sethostname => sys_info::sys_sethostname, Full;
    171 setdomainname => sys_info::sys_setdomainname, Full;
    309 getcpu => sys_info::sys_getcpu, Partial("the host CPU the thread runs on (within the affinity it set), node 0");
    140 getpriority => sys_info::sys_getpriority, Partial("the calling thread's nice value; other tasks of the sandbox report 0");
    141 setpriority => sys_info::sys_setpriority, Partial("the calling thread's nice value, seen by the guest only (the host scheduler is not told); for other tasks accepted and not recorded");
    142 sched_setparam => sys_info::sys_sched_setparam, Partial("SCHED_OTHER only: no effect");
    143 sched_getparam => sys_info::sys_sched_getparam, Full;
    144 sched_setscheduler => sys_info::sys_sched_setscheduler, Partial("SCHED_OTHER only (no effect); the other policies are EPERM");
    314 sched_setattr => sys_sched_attr::sys_sched_setattr, Partial("SCHED_OTHER and its nice value (the calling thread's; other tasks' accepted and not recorded); the other policies are EPERM");
    315 sched_getattr => sys_sched_attr::sys_sched_getattr, Partial("every task is SCHED_OTHER; the nice value is the calling thread's, other tasks report 0");
    145 sched_getscheduler => sys_info::sys_sched_getscheduler, Partial("every task is SCHED_OTHER");
    146 sched_get_priority_max => sys_info::sys_sched_get_priority_max, Full;
    147 sched_get_priority_min => sys_info::sys_sched_get_priority_min, Full;
    148 sched_rr_get_interval => sys_info::sys_sched_rr_get_interval, Full;
    203 sched_setaffinity => sys_info::sys_sched_setaffinity, Partial("the calling thread's mask is recorded and reported, the host scheduler is not told; other tasks' masks are accepted and not recorded");
    227 clock_settime => sys_time::sys_clock_settime, Partial("EPERM for CLOCK_REALTIME (the sandbox may not set the host's clock), EINVAL for the others");
    164 settimeofday => sys_time::sys_settimeofday, Partial("EPERM (the sandbox may not set the host's clock)");
    98 getrusage => sys_time::sys_getrusage, Partial("RUSAGE_SELF counts the calling thread only; RUSAGE_CHILDREN holds the reaped children's user and system time only");
    100 times => sys_time::sys_times, Partial("the calling thread's user and system time (the process's other threads are not counted) and the reaped children's");
    332 statx => sys_stat::sys_statx, Full;
    333 io_pgetevents => sys_aio::sys_io_pgetevents, Full;
    334 rseq => sys_process::sys_rseq, Partial("ENOSYS on purpose: the C libraries fall back");
    157 prctl => sys_prctl::sys_prctl, Partial("PR_SET_NAME, PR_GET_NAME, PR_SET/GET_DUMPABLE, PR_SET/GET_PDEATHSIG (sent when the parent process exits), PR_SET/GET_CHILD_SUBREAPER (not kept by a checkpoint), PR_SET/GET_NO_NEW_PRIVS, PR_SET/GET_KEEPCAPS, PR_CAPBSET_READ/DROP, PR_CAP_AMBIENT, PR_GET_SECUREBITS (none set; PR_SET_SECUREBITS only to none)");
    40 sendfile => sys_rw::sys_sendfile, Full;
    326 copy_file_range => sys_rw::sys_copy_file_range, Full;
    275 splice => sys_rw::sys_splice, Full;
    276 tee => sys_rw::sys_tee, Full;
    451 cachestat => sys_cachestat::sys_cachestat, Partial("the host's counts for the host file: a file of an overlay root (the copy-on-write root) reports no cached pages, its pages being the underlying file's");
    278 vmsplice => sys_vmsplice::sys_vmsplice, Partial("the user's pages are copied into the pipe (as SPLICE_F_GIFT allows), not referenced");
    439 faccessat2 => sys_stat::sys_faccessat2, Full;
    137 statfs => sys_stat::sys_statfs, Partial("the host filesystem holding the path in the root: /proc and /sys are not reported as procfs and sysfs");
    138 fstatfs => sys_stat::sys_fstatfs, Partial("the host filesystem of the descriptor's host file (a generated /proc file: tmpfs)");
    149 mlock => sys_mm::sys_mlock, Partial("pages are faulted in and stay resident while the sandbox runs; hibernation writes them to the swap file too");
    325 mlock2 => sys_mm::sys_mlock2, Partial("as mlock; MLOCK_ONFAULT faults nothing in");
    150 munlock => sys_mm::sys_munlock, Full;
    151 mlockall => sys_mm::sys_mlockall, Partial("MCL_FUTURE is accepted; later mappings are faulted in as they are touched");
    152 munlockall => sys_mm::sys_munlockall, Full;
    27 mincore => sys_mm::sys_mincore, Full;
    239 get_mempolicy => sys_mm::sys_get_mempolicy, Partial("one NUMA node (0); MPOL_F_ADDR reports the default policy (mbind is ENOSYS)");
    76 truncate => sys_attr::sys_truncate, Full;
    82 rename => sys_fs::sys_rename, Full;
    264 renameat => sys_fs::sys_renameat, Full;
    316 renameat2 => sys_fs::sys_renameat2, Full;
    85 creat => sys_file::sys_creat, Full;
    86 link => sys_fs::sys_link, Full;
    265 linkat => sys_fs::sys_linkat, Full;
    88 symlink => sys_fs::sys_symlink, Full;
    266 symlinkat => sys_fs::sys_symlinkat, Full;
    133 mknod => sys_fs::sys_mknod, Partial("regular files, FIFOs and sockets; device nodes are EPERM");
    259 mknodat => sys_fs::sys_mknodat, Partial("regular files, FIFOs and sockets; device nodes are EPERM");
    90 chmod => sys_attr::sys_chmod, Full;
    91 fchmod => sys_attr::sys_fchmod, Full;
    268 fchmodat => sys_attr::sys_fchmodat, Full;
    452 fchmodat2 => sys_attr::sys_fchmodat2, Full;
    92 chown => sys_attr::sys_chown, Full;
    93 fchown => sys_attr::sys_fchown, Full;
    94 lchown => sys_attr::sys_lchown, Full;
    260 fchownat => sys_attr::sys_fchownat, Full;
    132 utime => sys_attr::sys_utime, Full;
    235 utimes => sys_attr::sys_utimes, Full;
    261 futimesat => sys_attr::sys_futimesat, Full;
    280 utimensat => sys_attr::sys_utimensat, Full;
    285 fallocate => sys_file::sys_fallocate, Full;
    319 memfd_create => sys_file::sys_memfd_create, Partial("an unlinked file (O_TMPFILE) in the root's /dev/shm or /tmp, counted with the sandbox's files; no file seals, no MFD_HUGETLB");
    162 sync => sys_file::sys_sync, Partial("flushes the filesystem holding the root");
    306 syncfs => sys_file::sys_syncfs, Full;
    436 close_range => sys_file::sys_close_range, Partial("CLOSE_RANGE_UNSHARE leaves the table shared with the process's threads");
    188 setxattr => sys_xattr::sys_setxattr, Partial("setting trusted.* and security.* is EPERM");
    189 lsetxattr => sys_xattr::sys_lsetxattr, Partial("setting trusted.* and security.* is EPERM");
    190 fsetxattr => sys_xattr::sys_fsetxattr, Partial("setting trusted.* and security.* is EPERM");
    191 getxattr => sys_xattr::sys_getxattr, Full;
    192 lgetxattr => sys_xattr::sys_lgetxattr, Full;
    193 fgetxattr => sys_xattr::sys_fgetxattr, Full;
    194 listxattr => sys_xattr::sys_listxattr, Full;
    195 llistxattr => sys_xattr::sys_llistxattr, Full;
    196 flistxattr => sys_xattr::sys_flistxattr, Full;
    197 removexattr => sys_xattr::sys_removexattr, Partial("removing trusted.* and security.* is EPERM");
    198 lremovexattr => sys_xattr::sys_lremovexattr, Partial("removing trusted.* and security.* is EPERM");
    199 fremovexattr => sys_xattr::sys_fremovexattr, Partial("removing trusted.* and security.* is EPERM");
    253 inotify_init => sys_inotify::sys_inotify_init, Full;
    294 inotify_init1 => sys_inotify::sys_inotify_init1, Full;
    254 inotify_add_watch => sys_inotify::sys_inotify_add_watch, Full;
    255 inotify_rm_watch => sys_inotify::sys_inotify_rm_watch, Full;
    238 set_mempolicy => sys_mm::sys_set_mempolicy, Partial("one NUMA node (0); a new thread starts with the default policy, not its creator's");
}

fn index() -> &'static [Option<&'static Entry>] {
    static INDEX: OnceLock<Vec<Option<&'static Entry>>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let max = TABLE.iter().map(|e| e.nr).max().unwrap_or(0) as usize;
        let mut v = vec![None; max + 1];
        for e in TABLE {
            v[e.nr as usize] = Some(e);
        }
        v
    })
}

/// The entry for `nr`.
pub fn lookup(nr: u64) -> Option<&'static Entry> {
    index().get(usize::try_from(nr).ok()?).copied().flatten()
}

/// The Linux name of syscall `nr`, implemented or not.
pub fn name_of(nr: u64) -> &'static str {
    if let Some(e) = lookup(nr) {
        return e.name;
    }
    usize::try_from(nr)
        .ok()
        .and_then(syscalls::Sysno::new)
        .map(|s| s.name())
        .unwrap_or("unknown")
}

/// Whether the host checks syscall `nr`'s file access against the caller's filesystem ids:
/// its handler runs as the task ([`crate::fs::identity`]). The calls that resolve a path,
/// change a file's metadata, or bind or connect a Unix socket by name. (execve takes the
/// task's ids for its opens itself: the rest of it builds a VM as the runtime.)
pub fn checks_file_access(nr: u64) -> bool {
    matches!(
        nr,
        2 // open
        | 4 // stat
        | 6 // lstat
        | 21 // access
        | 42 // connect
        | 49 // bind
        | 72 // fcntl (F_SETFL O_NOATIME)
        | 76 // truncate
        | 80..=95 // chdir .. umask: fchdir, rename, mkdir, rmdir, creat, link, unlink, symlink,
                  // readlink, chmod, fchmod, chown, fchown, lchown
        | 132 // utime
        | 133 // mknod
        | 137 // statfs
        | 161 // chroot
        | 188..=199 // the xattr calls
        | 235 // utimes
        | 254 // inotify_add_watch
        | 257..=269 // openat .. faccessat
        | 280 // utimensat
        | 303 // name_to_handle_at
        | 316 // renameat2
        | 332 // statx
        | 437 // openat2
        | 439 // faccessat2
        | 452 // fchmodat2
        | 468 // file_getattr
        | 469 // file_setattr
    )
}

/// Whether syscall `nr`'s handler may open host paths as the runtime (a new VM's
/// `/dev/kvm`, a shared object reopened through `/proc/self/fd`, a stub process): the thread
/// gives back a task's filesystem ids first ([`crate::fs::identity::become_runtime`]).
pub fn needs_runtime_identity(nr: u64) -> bool {
    matches!(
        nr,
        9 // mmap
        | 25 // mremap
        | 29..=31 // shmget, shmat, shmctl
        | 56..=59 // clone, fork, vfork, execve
        | 60 // exit
        | 231 // exit_group
        | 319 // memfd_create
        | 322 // execveat
        | 435 // clone3
    )
}

/// Runs the handler for the syscall in `args`.
///
/// Entries whose note starts "ENOSYS on purpose" answer ENOSYS without the unknown-syscall log.
pub fn dispatch(task: &mut Task, args: &SyscallArgs) -> SysResult {
    match lookup(args.nr) {
        Some(e) => {
            let r = if checks_file_access(args.nr) {
                let creds = task.creds.clone();
                let _caps = crate::fs::identity::become_task(&creds)?;
                (e.handler)(task, args)
            } else {
                if needs_runtime_identity(args.nr) {
                    crate::fs::identity::become_runtime();
                }
                (e.handler)(task, args)
            };
            tracing::trace!(target: "syscall", name = e.name, a0 = args.a[0], a1 = args.a[1], a2 = args.a[2], ?r);
            // Directory changes the syscall made signal their watchers before it returns.
            crate::fd::dnotify::after_syscall(task);
            r
        }
        None => missing(args),
    }
}

fn missing(args: &SyscallArgs) -> SysResult {
    static SEEN: Mutex<Option<HashSet<u64>>> = Mutex::new(None);
    let first = {
        let mut g = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        g.get_or_insert_with(HashSet::new).insert(args.nr)
    };
    if first {
        tracing::warn!(
            "unsupported syscall {} ({}) args {:x?}: returning ENOSYS",
            args.nr,
            name_of(args.nr),
            args.a
        );
    }
    Err(Errno::ENOSYS)
}

/// The syscall table as Markdown (`docs/SYSCALLS.md`): every x86-64 syscall Linux defines,
/// implemented, partial (with what is missing) or ENOSYS.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Syscalls\n\nGenerated from `crates/kernel/src/syscalls/table.rs` by `torpor syscalls` \
         (a test fails when this file and the table differ). Every x86-64 system call Linux \
         defines, and what torpor does with it.\n\n| nr | name | status | notes |\n|---:|---|---|---|\n",
    );
    let (mut full, mut partial, mut missing) = (0, 0, 0);
    for sys in syscalls::Sysno::iter() {
        let nr = sys.id() as u64;
        let (status, note) = match lookup(nr) {
            Some(Entry {
                support: Support::Full,
                ..
            }) => {
                full += 1;
                ("implemented", String::new())
            }
            Some(Entry {
                support: Support::Partial(n),
                ..
            }) if n.starts_with("ENOSYS") => {
                missing += 1;
                ("ENOSYS", n.to_string())
            }
            Some(Entry {
                support: Support::Partial(n),
                ..
            }) => {
                partial += 1;
                ("partial", n.to_string())
            }
            None => {
                missing += 1;
                ("ENOSYS", String::new())
            }
        };
        out.push_str(&format!("| {nr} | {} | {status} | {note} |\n", sys.name()));
    }
    out.push_str(&format!(
        "\n{full} implemented, {partial} partial, {missing} ENOSYS.\n"
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        let mut seen = HashSet::new();
        for e in TABLE {
            assert!(seen.insert(e.nr), "duplicate entry {}", e.nr);
            // The name matches Linux's table for that number.
            let linux = syscalls::Sysno::new(e.nr as usize).map(|s| s.name());
            assert_eq!(linux, Some(e.name), "entry {} is named {}", e.nr, e.name);
        }
        assert_eq!(lookup(39).map(|e| e.name), Some("getpid"));
        assert!(lookup(9999).is_none());
        assert_eq!(name_of(56), "clone");
    }

    #[test]
    fn docs_syscalls_md_is_up_to_date() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/SYSCALLS.md");
        let on_disk = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            on_disk == markdown(),
            "docs/SYSCALLS.md is stale: regenerate it with `cargo run -p torpor -- syscalls > docs/SYSCALLS.md`"
        );
    }
}
