//! io_uring (`include/uapi/linux/io_uring.h`): the parameters of io_uring_setup(2), the
//! submission and completion queue entries, the layout of the rings the application maps,
//! and the opcodes, flags and register commands, numbered as in Linux 6.18.

use crate::Pod;

/// mmap(2) offset of the submission ring (`IORING_OFF_SQ_RING`).
pub const IORING_OFF_SQ_RING: u64 = 0;
/// mmap(2) offset of the completion ring (`IORING_OFF_CQ_RING`; the same memory as the
/// submission ring: `IORING_FEAT_SINGLE_MMAP`).
pub const IORING_OFF_CQ_RING: u64 = 0x800_0000;
/// mmap(2) offset of the submission queue entries (`IORING_OFF_SQES`).
pub const IORING_OFF_SQES: u64 = 0x1000_0000;
/// The bits of an mmap offset that select the region (`IORING_OFF_MMAP_MASK`).
pub const IORING_OFF_MMAP_MASK: u64 = 0xf800_0000;

/// Most submission queue entries (`IORING_MAX_ENTRIES`).
pub const IORING_MAX_ENTRIES: u32 = 32768;
/// Most completion queue entries (`IORING_MAX_CQ_ENTRIES`).
pub const IORING_MAX_CQ_ENTRIES: u32 = 2 * IORING_MAX_ENTRIES;

/// Setup flag: polled I/O completion (`IORING_SETUP_IOPOLL`).
pub const IORING_SETUP_IOPOLL: u32 = 1 << 0;
/// Setup flag: a kernel thread polls the submission queue (`IORING_SETUP_SQPOLL`).
pub const IORING_SETUP_SQPOLL: u32 = 1 << 1;
/// Setup flag: `sq_thread_cpu` is the polling thread's CPU (`IORING_SETUP_SQ_AFF`).
pub const IORING_SETUP_SQ_AFF: u32 = 1 << 2;
/// Setup flag: the application gives `cq_entries` (`IORING_SETUP_CQSIZE`).
pub const IORING_SETUP_CQSIZE: u32 = 1 << 3;
/// Setup flag: clamp the sizes to the largest instead of EINVAL (`IORING_SETUP_CLAMP`).
pub const IORING_SETUP_CLAMP: u32 = 1 << 4;
/// Setup flag: share the async backend of the ring `wq_fd` (`IORING_SETUP_ATTACH_WQ`).
pub const IORING_SETUP_ATTACH_WQ: u32 = 1 << 5;
/// Setup flag: start disabled (`IORING_SETUP_R_DISABLED`).
pub const IORING_SETUP_R_DISABLED: u32 = 1 << 6;
/// Setup flag: go on submitting after an entry fails (`IORING_SETUP_SUBMIT_ALL`).
pub const IORING_SETUP_SUBMIT_ALL: u32 = 1 << 7;
/// Setup flag: no interrupting task work (`IORING_SETUP_COOP_TASKRUN`).
pub const IORING_SETUP_COOP_TASKRUN: u32 = 1 << 8;
/// Setup flag: `IORING_SQ_TASKRUN` tells of pending task work (`IORING_SETUP_TASKRUN_FLAG`).
pub const IORING_SETUP_TASKRUN_FLAG: u32 = 1 << 9;
/// Setup flag: 128-byte submission entries (`IORING_SETUP_SQE128`).
pub const IORING_SETUP_SQE128: u32 = 1 << 10;
/// Setup flag: 32-byte completion entries (`IORING_SETUP_CQE32`).
pub const IORING_SETUP_CQE32: u32 = 1 << 11;
/// Setup flag: one task submits (`IORING_SETUP_SINGLE_ISSUER`).
pub const IORING_SETUP_SINGLE_ISSUER: u32 = 1 << 12;
/// Setup flag: completions only when the submitter waits (`IORING_SETUP_DEFER_TASKRUN`).
pub const IORING_SETUP_DEFER_TASKRUN: u32 = 1 << 13;
/// Setup flag: the application provides the ring memory (`IORING_SETUP_NO_MMAP`).
pub const IORING_SETUP_NO_MMAP: u32 = 1 << 14;
/// Setup flag: the ring has only a registered descriptor (`IORING_SETUP_REGISTERED_FD_ONLY`).
pub const IORING_SETUP_REGISTERED_FD_ONLY: u32 = 1 << 15;
/// Setup flag: no submission index array (`IORING_SETUP_NO_SQARRAY`).
pub const IORING_SETUP_NO_SQARRAY: u32 = 1 << 16;
/// Setup flag: hybrid polled I/O (`IORING_SETUP_HYBRID_IOPOLL`).
pub const IORING_SETUP_HYBRID_IOPOLL: u32 = 1 << 17;
/// Setup flag: 16- and 32-byte completions mixed (`IORING_SETUP_CQE_MIXED`).
pub const IORING_SETUP_CQE_MIXED: u32 = 1 << 18;
/// Every setup flag Linux 6.18 knows; others are EINVAL.
pub const IORING_SETUP_KNOWN: u32 = (1 << 19) - 1;

/// Submission entry flag: `fd` indexes the registered files (`IOSQE_FIXED_FILE`).
pub const IOSQE_FIXED_FILE: u8 = 1 << 0;
/// Submission entry flag: start after every earlier request completed (`IOSQE_IO_DRAIN`).
pub const IOSQE_IO_DRAIN: u8 = 1 << 1;
/// Submission entry flag: the next entry runs after this one succeeds (`IOSQE_IO_LINK`).
pub const IOSQE_IO_LINK: u8 = 1 << 2;
/// Submission entry flag: the next entry runs after this one, whatever its result
/// (`IOSQE_IO_HARDLINK`).
pub const IOSQE_IO_HARDLINK: u8 = 1 << 3;
/// Submission entry flag: do not try the request inline first (`IOSQE_ASYNC`).
pub const IOSQE_ASYNC: u8 = 1 << 4;
/// Submission entry flag: take a buffer from a provided group (`IOSQE_BUFFER_SELECT`).
pub const IOSQE_BUFFER_SELECT: u8 = 1 << 5;
/// Submission entry flag: no completion entry when it succeeds (`IOSQE_CQE_SKIP_SUCCESS`).
pub const IOSQE_CQE_SKIP_SUCCESS: u8 = 1 << 6;
/// Every submission entry flag (`SQE_VALID_FLAGS`).
pub const IOSQE_VALID: u8 = 0x7f;

/// io_uring_enter(2) flag: wait for `min_complete` completions (`IORING_ENTER_GETEVENTS`).
pub const IORING_ENTER_GETEVENTS: u32 = 1 << 0;
/// io_uring_enter(2) flag: wake the submission polling thread (`IORING_ENTER_SQ_WAKEUP`).
pub const IORING_ENTER_SQ_WAKEUP: u32 = 1 << 1;
/// io_uring_enter(2) flag: wait for room in the submission queue (`IORING_ENTER_SQ_WAIT`).
pub const IORING_ENTER_SQ_WAIT: u32 = 1 << 2;
/// io_uring_enter(2) flag: the argument is a `struct io_uring_getevents_arg`
/// (`IORING_ENTER_EXT_ARG`).
pub const IORING_ENTER_EXT_ARG: u32 = 1 << 3;
/// io_uring_enter(2) flag: `fd` is a registered ring index (`IORING_ENTER_REGISTERED_RING`).
pub const IORING_ENTER_REGISTERED_RING: u32 = 1 << 4;
/// io_uring_enter(2) flag: the timeout is absolute (`IORING_ENTER_ABS_TIMER`).
pub const IORING_ENTER_ABS_TIMER: u32 = 1 << 5;
/// io_uring_enter(2) flag: the argument is in a registered wait region
/// (`IORING_ENTER_EXT_ARG_REG`).
pub const IORING_ENTER_EXT_ARG_REG: u32 = 1 << 6;
/// io_uring_enter(2) flag: do not count the wait as I/O wait (`IORING_ENTER_NO_IOWAIT`).
pub const IORING_ENTER_NO_IOWAIT: u32 = 1 << 7;
/// Every io_uring_enter(2) flag Linux 6.18 knows; others are EINVAL.
pub const IORING_ENTER_KNOWN: u32 = 0xff;

/// Feature: one mmap serves both rings (`IORING_FEAT_SINGLE_MMAP`).
pub const IORING_FEAT_SINGLE_MMAP: u32 = 1 << 0;
/// Feature: completions are never dropped while memory lasts (`IORING_FEAT_NODROP`).
pub const IORING_FEAT_NODROP: u32 = 1 << 1;
/// Feature: submitted entries may be reused at once (`IORING_FEAT_SUBMIT_STABLE`).
pub const IORING_FEAT_SUBMIT_STABLE: u32 = 1 << 2;
/// Feature: offset -1 is the file position (`IORING_FEAT_RW_CUR_POS`).
pub const IORING_FEAT_RW_CUR_POS: u32 = 1 << 3;
/// Feature: requests run with the submitter's credentials (`IORING_FEAT_CUR_PERSONALITY`).
pub const IORING_FEAT_CUR_PERSONALITY: u32 = 1 << 4;
/// Feature: a request on a file not ready waits for it internally (`IORING_FEAT_FAST_POLL`).
pub const IORING_FEAT_FAST_POLL: u32 = 1 << 5;
/// Feature: 32-bit poll events (`IORING_FEAT_POLL_32BITS`).
pub const IORING_FEAT_POLL_32BITS: u32 = 1 << 6;
/// Feature: SQPOLL rings take ordinary descriptors (`IORING_FEAT_SQPOLL_NONFIXED`).
pub const IORING_FEAT_SQPOLL_NONFIXED: u32 = 1 << 7;
/// Feature: `IORING_ENTER_EXT_ARG` (`IORING_FEAT_EXT_ARG`).
pub const IORING_FEAT_EXT_ARG: u32 = 1 << 8;
/// Feature: requests run in threads of the process (`IORING_FEAT_NATIVE_WORKERS`).
pub const IORING_FEAT_NATIVE_WORKERS: u32 = 1 << 9;
/// Feature: `IOSQE_CQE_SKIP_SUCCESS` (`IORING_FEAT_CQE_SKIP`).
pub const IORING_FEAT_CQE_SKIP: u32 = 1 << 11;
/// Feature: a linked request's file is looked up when it runs (`IORING_FEAT_LINKED_FILE`).
pub const IORING_FEAT_LINKED_FILE: u32 = 1 << 12;
/// Feature: `IORING_ENTER_NO_IOWAIT` (`IORING_FEAT_NO_IOWAIT`).
pub const IORING_FEAT_NO_IOWAIT: u32 = 1 << 17;

/// Submission ring flag: io_uring_enter(2) must wake the polling thread
/// (`IORING_SQ_NEED_WAKEUP`).
pub const IORING_SQ_NEED_WAKEUP: u32 = 1 << 0;
/// Submission ring flag: completions wait in the overflow list (`IORING_SQ_CQ_OVERFLOW`).
pub const IORING_SQ_CQ_OVERFLOW: u32 = 1 << 1;
/// Submission ring flag: work waits for io_uring_enter(2) (`IORING_SQ_TASKRUN`).
pub const IORING_SQ_TASKRUN: u32 = 1 << 2;

/// Completion ring flag (set by the application): no eventfd notifications
/// (`IORING_CQ_EVENTFD_DISABLED`).
pub const IORING_CQ_EVENTFD_DISABLED: u32 = 1 << 0;

/// Completion entry flag: more completions will come for the request (`IORING_CQE_F_MORE`).
pub const IORING_CQE_F_MORE: u32 = 1 << 1;

/// The opcodes (`enum io_uring_op`).
pub mod op {
    /// No operation.
    pub const NOP: u8 = 0;
    /// readv(2) at an offset.
    pub const READV: u8 = 1;
    /// writev(2) at an offset.
    pub const WRITEV: u8 = 2;
    /// fsync(2) or fdatasync(2).
    pub const FSYNC: u8 = 3;
    /// A read into a registered buffer.
    pub const READ_FIXED: u8 = 4;
    /// A write from a registered buffer.
    pub const WRITE_FIXED: u8 = 5;
    /// Wait for poll events.
    pub const POLL_ADD: u8 = 6;
    /// Cancel a `POLL_ADD`.
    pub const POLL_REMOVE: u8 = 7;
    /// sync_file_range(2).
    pub const SYNC_FILE_RANGE: u8 = 8;
    /// sendmsg(2).
    pub const SENDMSG: u8 = 9;
    /// recvmsg(2).
    pub const RECVMSG: u8 = 10;
    /// A timer, or a count of completions.
    pub const TIMEOUT: u8 = 11;
    /// Cancel a `TIMEOUT`.
    pub const TIMEOUT_REMOVE: u8 = 12;
    /// accept4(2).
    pub const ACCEPT: u8 = 13;
    /// Cancel a request.
    pub const ASYNC_CANCEL: u8 = 14;
    /// A timeout on the request it is linked to.
    pub const LINK_TIMEOUT: u8 = 15;
    /// connect(2).
    pub const CONNECT: u8 = 16;
    /// fallocate(2).
    pub const FALLOCATE: u8 = 17;
    /// openat(2).
    pub const OPENAT: u8 = 18;
    /// close(2).
    pub const CLOSE: u8 = 19;
    /// Update registered files.
    pub const FILES_UPDATE: u8 = 20;
    /// statx(2).
    pub const STATX: u8 = 21;
    /// read(2) or pread(2).
    pub const READ: u8 = 22;
    /// write(2) or pwrite(2).
    pub const WRITE: u8 = 23;
    /// posix_fadvise(2).
    pub const FADVISE: u8 = 24;
    /// madvise(2).
    pub const MADVISE: u8 = 25;
    /// send(2).
    pub const SEND: u8 = 26;
    /// recv(2).
    pub const RECV: u8 = 27;
    /// openat2(2).
    pub const OPENAT2: u8 = 28;
    /// epoll_ctl(2).
    pub const EPOLL_CTL: u8 = 29;
    /// splice(2).
    pub const SPLICE: u8 = 30;
    /// Provide buffers to a group.
    pub const PROVIDE_BUFFERS: u8 = 31;
    /// Remove buffers from a group.
    pub const REMOVE_BUFFERS: u8 = 32;
    /// tee(2).
    pub const TEE: u8 = 33;
    /// shutdown(2).
    pub const SHUTDOWN: u8 = 34;
    /// renameat2(2).
    pub const RENAMEAT: u8 = 35;
    /// unlinkat(2).
    pub const UNLINKAT: u8 = 36;
    /// mkdirat(2).
    pub const MKDIRAT: u8 = 37;
    /// symlinkat(2).
    pub const SYMLINKAT: u8 = 38;
    /// linkat(2).
    pub const LINKAT: u8 = 39;
    /// Post a completion to another ring.
    pub const MSG_RING: u8 = 40;
    /// fsetxattr(2).
    pub const FSETXATTR: u8 = 41;
    /// setxattr(2).
    pub const SETXATTR: u8 = 42;
    /// fgetxattr(2).
    pub const FGETXATTR: u8 = 43;
    /// getxattr(2).
    pub const GETXATTR: u8 = 44;
    /// socket(2).
    pub const SOCKET: u8 = 45;
    /// A driver command.
    pub const URING_CMD: u8 = 46;
    /// A zero-copy send.
    pub const SEND_ZC: u8 = 47;
    /// A zero-copy sendmsg.
    pub const SENDMSG_ZC: u8 = 48;
    /// A read that repeats.
    pub const READ_MULTISHOT: u8 = 49;
    /// waitid(2).
    pub const WAITID: u8 = 50;
    /// A futex wait.
    pub const FUTEX_WAIT: u8 = 51;
    /// A futex wake.
    pub const FUTEX_WAKE: u8 = 52;
    /// A wait on several futexes.
    pub const FUTEX_WAITV: u8 = 53;
    /// Install a registered file as a descriptor.
    pub const FIXED_FD_INSTALL: u8 = 54;
    /// ftruncate(2).
    pub const FTRUNCATE: u8 = 55;
    /// bind(2).
    pub const BIND: u8 = 56;
    /// listen(2).
    pub const LISTEN: u8 = 57;
    /// A zero-copy receive.
    pub const RECV_ZC: u8 = 58;
    /// epoll_wait(2).
    pub const EPOLL_WAIT: u8 = 59;
    /// readv(2) into registered buffers.
    pub const READV_FIXED: u8 = 60;
    /// writev(2) from registered buffers.
    pub const WRITEV_FIXED: u8 = 61;
    /// pipe2(2).
    pub const PIPE: u8 = 62;
    /// One past the last opcode of Linux 6.18 (`IORING_OP_LAST`); higher ones are EINVAL.
    pub const LAST: u8 = 63;
}

/// `fsync_flags`: fdatasync(2) (`IORING_FSYNC_DATASYNC`).
pub const IORING_FSYNC_DATASYNC: u32 = 1 << 0;

/// `timeout_flags`: the time is absolute (`IORING_TIMEOUT_ABS`).
pub const IORING_TIMEOUT_ABS: u32 = 1 << 0;
/// `timeout_flags`: update a timeout (`IORING_TIMEOUT_UPDATE`).
pub const IORING_TIMEOUT_UPDATE: u32 = 1 << 1;
/// `timeout_flags`: CLOCK_BOOTTIME (`IORING_TIMEOUT_BOOTTIME`).
pub const IORING_TIMEOUT_BOOTTIME: u32 = 1 << 2;
/// `timeout_flags`: CLOCK_REALTIME (`IORING_TIMEOUT_REALTIME`).
pub const IORING_TIMEOUT_REALTIME: u32 = 1 << 3;
/// `timeout_flags`: update a linked timeout (`IORING_LINK_TIMEOUT_UPDATE`).
pub const IORING_LINK_TIMEOUT_UPDATE: u32 = 1 << 4;
/// `timeout_flags`: expiry is a success (-ETIME without failing links)
/// (`IORING_TIMEOUT_ETIME_SUCCESS`).
pub const IORING_TIMEOUT_ETIME_SUCCESS: u32 = 1 << 5;
/// `timeout_flags`: rearm after each expiry (`IORING_TIMEOUT_MULTISHOT`).
pub const IORING_TIMEOUT_MULTISHOT: u32 = 1 << 6;

/// `len` of POLL_ADD: report every event, not just the first (`IORING_POLL_ADD_MULTI`).
pub const IORING_POLL_ADD_MULTI: u32 = 1 << 0;
/// `len` of POLL_REMOVE: update the events (`IORING_POLL_UPDATE_EVENTS`).
pub const IORING_POLL_UPDATE_EVENTS: u32 = 1 << 1;
/// `len` of POLL_REMOVE: update the user data (`IORING_POLL_UPDATE_USER_DATA`).
pub const IORING_POLL_UPDATE_USER_DATA: u32 = 1 << 2;
/// `len` of POLL_ADD: level-triggered (`IORING_POLL_ADD_LEVEL`).
pub const IORING_POLL_ADD_LEVEL: u32 = 1 << 3;

/// `cancel_flags`: every match (`IORING_ASYNC_CANCEL_ALL`).
pub const IORING_ASYNC_CANCEL_ALL: u32 = 1 << 0;
/// `cancel_flags`: match on the descriptor (`IORING_ASYNC_CANCEL_FD`).
pub const IORING_ASYNC_CANCEL_FD: u32 = 1 << 1;
/// `cancel_flags`: match any request (`IORING_ASYNC_CANCEL_ANY`).
pub const IORING_ASYNC_CANCEL_ANY: u32 = 1 << 2;
/// `cancel_flags`: the descriptor is a registered file (`IORING_ASYNC_CANCEL_FD_FIXED`).
pub const IORING_ASYNC_CANCEL_FD_FIXED: u32 = 1 << 3;
/// `cancel_flags`: match on the user data (`IORING_ASYNC_CANCEL_USERDATA`).
pub const IORING_ASYNC_CANCEL_USERDATA: u32 = 1 << 4;
/// `cancel_flags`: match on the opcode (`IORING_ASYNC_CANCEL_OP`).
pub const IORING_ASYNC_CANCEL_OP: u32 = 1 << 5;

/// `ioprio` of send and receive: poll before the first try (`IORING_RECVSEND_POLL_FIRST`).
pub const IORING_RECVSEND_POLL_FIRST: u16 = 1 << 0;
/// `ioprio` of ACCEPT: accept repeatedly (`IORING_ACCEPT_MULTISHOT`).
pub const IORING_ACCEPT_MULTISHOT: u16 = 1 << 0;
/// `ioprio` of ACCEPT: fail with EAGAIN rather than wait (`IORING_ACCEPT_DONTWAIT`).
pub const IORING_ACCEPT_DONTWAIT: u16 = 1 << 1;
/// `ioprio` of ACCEPT: poll before the first try (`IORING_ACCEPT_POLL_FIRST`).
pub const IORING_ACCEPT_POLL_FIRST: u16 = 1 << 2;

/// `addr` of MSG_RING: post `len` and `off` to the target ring (`IORING_MSG_DATA`).
pub const IORING_MSG_DATA: u64 = 0;
/// `msg_ring_flags`: no completion on the target ring (`IORING_MSG_RING_CQE_SKIP`).
pub const IORING_MSG_RING_CQE_SKIP: u32 = 1 << 0;
/// `msg_ring_flags`: the target completion's flags are `file_index`
/// (`IORING_MSG_RING_FLAGS_PASS`).
pub const IORING_MSG_RING_FLAGS_PASS: u32 = 1 << 1;

/// `rw_flags` of NOP: complete with `len` as the result (`IORING_NOP_INJECT_RESULT`).
pub const IORING_NOP_INJECT_RESULT: u32 = 1 << 0;

/// Register command: fixed buffers (`IORING_REGISTER_BUFFERS`).
pub const IORING_REGISTER_BUFFERS: u32 = 0;
/// Register command (`IORING_UNREGISTER_BUFFERS`).
pub const IORING_UNREGISTER_BUFFERS: u32 = 1;
/// Register command: fixed files (`IORING_REGISTER_FILES`).
pub const IORING_REGISTER_FILES: u32 = 2;
/// Register command (`IORING_UNREGISTER_FILES`).
pub const IORING_UNREGISTER_FILES: u32 = 3;
/// Register command: an eventfd signalled on completions (`IORING_REGISTER_EVENTFD`).
pub const IORING_REGISTER_EVENTFD: u32 = 4;
/// Register command (`IORING_UNREGISTER_EVENTFD`).
pub const IORING_UNREGISTER_EVENTFD: u32 = 5;
/// Register command: replace fixed files (`IORING_REGISTER_FILES_UPDATE`).
pub const IORING_REGISTER_FILES_UPDATE: u32 = 6;
/// Register command: an eventfd signalled on completions that did not complete inline
/// (`IORING_REGISTER_EVENTFD_ASYNC`).
pub const IORING_REGISTER_EVENTFD_ASYNC: u32 = 7;
/// Register command: which opcodes are supported (`IORING_REGISTER_PROBE`).
pub const IORING_REGISTER_PROBE: u32 = 8;
/// Register command: restrict a disabled ring's opcodes (`IORING_REGISTER_RESTRICTIONS`).
pub const IORING_REGISTER_RESTRICTIONS: u32 = 11;
/// Register command: enable a ring created disabled (`IORING_REGISTER_ENABLE_RINGS`).
pub const IORING_REGISTER_ENABLE_RINGS: u32 = 12;
/// Register command: the async workers' CPUs (`IORING_REGISTER_IOWQ_AFF`).
pub const IORING_REGISTER_IOWQ_AFF: u32 = 17;
/// Register command (`IORING_UNREGISTER_IOWQ_AFF`).
pub const IORING_UNREGISTER_IOWQ_AFF: u32 = 18;
/// Register command: the most async workers (`IORING_REGISTER_IOWQ_MAX_WORKERS`).
pub const IORING_REGISTER_IOWQ_MAX_WORKERS: u32 = 19;
/// Register command flag: `fd` is a registered ring index
/// (`IORING_REGISTER_USE_REGISTERED_RING`).
pub const IORING_REGISTER_USE_REGISTERED_RING: u32 = 1 << 31;

/// Most registered buffers (`IORING_MAX_REG_BUFFERS`).
pub const IORING_MAX_REG_BUFFERS: u32 = 1 << 14;
/// Largest registered buffer (`SZ_1G`).
pub const IORING_MAX_BUFFER_LEN: u64 = 1 << 30;
/// Most registered files (`IORING_MAX_FIXED_FILES`).
pub const IORING_MAX_FIXED_FILES: u32 = 1 << 20;
/// `flags` of a probe's opcode: supported (`IO_URING_OP_SUPPORTED`).
pub const IO_URING_OP_SUPPORTED: u16 = 1 << 0;

/// Offsets in the submission ring (`struct io_sqring_offsets`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SqringOffsets {
    /// The head index (the kernel's).
    pub head: u32,
    /// The tail index (the application's).
    pub tail: u32,
    /// `entries - 1`.
    pub ring_mask: u32,
    /// The number of entries.
    pub ring_entries: u32,
    /// `IORING_SQ_*` flags.
    pub flags: u32,
    /// Entries dropped for a bad index.
    pub dropped: u32,
    /// The index array.
    pub array: u32,
    /// Reserved.
    pub resv1: u32,
    /// The ring's address with `IORING_SETUP_NO_MMAP`.
    pub user_addr: u64,
}

/// Offsets in the completion ring (`struct io_cqring_offsets`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqringOffsets {
    /// The head index (the application's).
    pub head: u32,
    /// The tail index (the kernel's).
    pub tail: u32,
    /// `entries - 1`.
    pub ring_mask: u32,
    /// The number of entries.
    pub ring_entries: u32,
    /// Completions lost.
    pub overflow: u32,
    /// The entries.
    pub cqes: u32,
    /// `IORING_CQ_*` flags.
    pub flags: u32,
    /// Reserved.
    pub resv1: u32,
    /// The ring's address with `IORING_SETUP_NO_MMAP`.
    pub user_addr: u64,
}

/// `struct io_uring_params` (120 bytes): io_uring_setup(2)'s argument and answer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoUringParams {
    /// Submission queue entries (the answer: a power of two).
    pub sq_entries: u32,
    /// Completion queue entries (given with `IORING_SETUP_CQSIZE`).
    pub cq_entries: u32,
    /// `IORING_SETUP_*`.
    pub flags: u32,
    /// The polling thread's CPU (`IORING_SETUP_SQ_AFF`).
    pub sq_thread_cpu: u32,
    /// Milliseconds the polling thread spins before it sleeps.
    pub sq_thread_idle: u32,
    /// `IORING_FEAT_*` (the answer).
    pub features: u32,
    /// The ring of `IORING_SETUP_ATTACH_WQ`.
    pub wq_fd: u32,
    /// Must be zero.
    pub resv: [u32; 3],
    /// The submission ring's layout (the answer).
    pub sq_off: SqringOffsets,
    /// The completion ring's layout (the answer).
    pub cq_off: CqringOffsets,
}

/// `struct io_uring_sqe` (64 bytes; 128 with `IORING_SETUP_SQE128`, the rest command data).
/// Its unions are read through the field the opcode uses, under the names below.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sqe {
    /// The opcode.
    pub opcode: u8,
    /// `IOSQE_*`.
    pub flags: u8,
    /// I/O priority, or per-opcode flags.
    pub ioprio: u16,
    /// The descriptor (or registered file index).
    pub fd: i32,
    /// `off`, `addr2`: an offset or a second address.
    pub off: u64,
    /// `addr`, `splice_off_in`: a buffer, iovecs, a path...
    pub addr: u64,
    /// A length or count.
    pub len: u32,
    /// `rw_flags`, `fsync_flags`, `poll32_events`, `msg_flags`, `open_flags`...
    pub op_flags: u32,
    /// Returned in the completion.
    pub user_data: u64,
    /// `buf_index`, `buf_group`.
    pub buf_index: u16,
    /// A registered personality.
    pub personality: u16,
    /// `splice_fd_in`, `file_index`, `addr_len`.
    pub splice_fd_in: i32,
    /// `addr3`: a third address.
    pub addr3: u64,
    /// Reserved.
    pub pad2: u64,
}

/// `struct io_uring_cqe` (16 bytes; 32 with `IORING_SETUP_CQE32`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// The request's `user_data`.
    pub user_data: u64,
    /// The result, or a negative errno.
    pub res: i32,
    /// `IORING_CQE_F_*`.
    pub flags: u32,
}

/// `struct io_uring_getevents_arg` (24 bytes): io_uring_enter(2)'s argument with
/// `IORING_ENTER_EXT_ARG`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GeteventsArg {
    /// A signal mask for the wait (NULL: none).
    pub sigmask: u64,
    /// Its size.
    pub sigmask_sz: u32,
    /// Microseconds to wait before returning with fewer completions (`min_wait_usec`).
    pub min_wait_usec: u32,
    /// A `struct __kernel_timespec` timeout (NULL: none).
    pub ts: u64,
}

/// `struct io_uring_files_update` (`IORING_REGISTER_FILES_UPDATE`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilesUpdate {
    /// The first slot to replace.
    pub offset: u32,
    /// Must be zero.
    pub resv: u32,
    /// The address of the new descriptors (`__s32[]`).
    pub fds: u64,
}

/// The header of `struct io_uring_probe` (16 bytes), before its `struct io_uring_probe_op`s.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeHeader {
    /// The last opcode the kernel knows.
    pub last_op: u8,
    /// Entries filled in.
    pub ops_len: u8,
    /// Reserved.
    pub resv: u16,
    /// Reserved.
    pub resv2: [u32; 3],
}

/// `struct io_uring_probe_op` (8 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeOp {
    /// The opcode.
    pub op: u8,
    /// Reserved.
    pub resv: u8,
    /// `IO_URING_OP_SUPPORTED`.
    pub flags: u16,
    /// Reserved.
    pub resv2: u32,
}

// SAFETY: `#[repr(C)]` structs of integers whose fields each sit at a multiple of their size
// with no gap and no tail padding (sizes checked by the tests below); every bit pattern is
// valid.
unsafe impl Pod for SqringOffsets {}
// SAFETY: as above.
unsafe impl Pod for CqringOffsets {}
// SAFETY: as above.
unsafe impl Pod for IoUringParams {}
// SAFETY: as above.
unsafe impl Pod for Sqe {}
// SAFETY: as above.
unsafe impl Pod for Cqe {}
// SAFETY: as above.
unsafe impl Pod for GeteventsArg {}
// SAFETY: as above.
unsafe impl Pod for FilesUpdate {}
// SAFETY: as above.
unsafe impl Pod for ProbeHeader {}
// SAFETY: as above.
unsafe impl Pod for ProbeOp {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_are_linux_s() {
        assert_eq!(size_of::<SqringOffsets>(), 40);
        assert_eq!(size_of::<CqringOffsets>(), 40);
        assert_eq!(size_of::<IoUringParams>(), 120);
        assert_eq!(offset_of!(IoUringParams, sq_off), 40);
        assert_eq!(offset_of!(IoUringParams, cq_off), 80);
        assert_eq!(size_of::<Sqe>(), 64);
        assert_eq!(offset_of!(Sqe, off), 8);
        assert_eq!(offset_of!(Sqe, addr), 16);
        assert_eq!(offset_of!(Sqe, len), 24);
        assert_eq!(offset_of!(Sqe, op_flags), 28);
        assert_eq!(offset_of!(Sqe, user_data), 32);
        assert_eq!(offset_of!(Sqe, buf_index), 40);
        assert_eq!(offset_of!(Sqe, splice_fd_in), 44);
        assert_eq!(offset_of!(Sqe, addr3), 48);
        assert_eq!(size_of::<Cqe>(), 16);
        assert_eq!(size_of::<GeteventsArg>(), 24);
        assert_eq!(size_of::<FilesUpdate>(), 16);
        assert_eq!(size_of::<ProbeHeader>(), 16);
        assert_eq!(size_of::<ProbeOp>(), 8);
    }
}
