//! What a checkpoint records of the kernel's objects: plain data, serialized as JSON into the
//! checkpoint's `state.json` (bulk bytes go to `blobs.bin`, named by [`BlobRef`]). Every field
//! is read back from an untrusted file: the restore checks what it uses.

use serde::{Deserialize, Serialize};

use super::blobs::BlobRef;

/// The kernel state of a sandbox: its processes and what they share.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxState {
    /// The node name uname reports.
    pub nodename: Vec<u8>,
    /// The NIS domain name uname reports.
    pub domainname: Vec<u8>,
    /// The sandbox's boot id (a new one for checkpoints that have none).
    #[serde(default)]
    pub boot_id: Option<[u8; 16]>,
    /// The id the next process or thread gets.
    pub next_id: i32,
    /// The most tasks the sandbox may hold.
    pub task_limit: usize,
    /// The open files of every process's descriptor table, each once.
    pub open_files: Vec<OpenFileState>,
    /// Its processes.
    pub processes: Vec<ProcessState>,
    /// The platform's vDSO its programs were given, if any (the trap platform's: the host's
    /// own). Programs keep pointers into it, so a restore needs the same.
    #[serde(default)]
    pub vdso: Option<VdsoState>,
    /// Its System V message queues (none in older checkpoints).
    #[serde(default)]
    pub msg_queues: MsgQueuesState,
    /// Its System V IPC tunables (Linux's defaults in older checkpoints).
    #[serde(default)]
    pub ipc_limits: IpcLimitsState,
    /// Its anonymous shared memory objects (`MAP_SHARED | MAP_ANONYMOUS`), by the index the
    /// address spaces' VMAs name them with.
    #[serde(default)]
    pub anon_shared: Vec<AnonSharedState>,
    /// What its open files signal: owners, `F_SETSIG` signals, leases, directory
    /// notification requests (none in older checkpoints).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file_signals: Vec<FileSignalsState>,
}

/// An open file's signal-driven I/O state ([`crate::fd::owner`], [`crate::fd::lease`],
/// [`crate::fd::dnotify`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSignalsState {
    /// The open file's index in `open_files`.
    pub file: usize,
    /// Its owner: type (`F_OWNER_TID`, `F_OWNER_PID`, `F_OWNER_PGRP`), id, and the real and
    /// effective uids of whoever set it.
    #[serde(default)]
    pub owner: Option<[i64; 4]>,
    /// Its `F_SETSIG` signal (0: SIGIO).
    #[serde(default)]
    pub sig: i32,
    /// Its lease (`F_RDLCK`, `F_WRLCK`) and the descriptor it was taken through.
    #[serde(default)]
    pub lease: Option<(i16, i32)>,
    /// Directory notification requests on it.
    #[serde(default)]
    pub dnotify: Vec<DnotifyState>,
}

/// A directory notification request (`F_NOTIFY`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnotifyState {
    /// The process whose descriptor table made it.
    pub pid: i32,
    /// The descriptor it was made through.
    pub fd: i32,
    /// Its `DN_*` mask.
    pub mask: u32,
}

/// An anonymous shared memory object: its bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnonSharedState {
    /// Its contents, the object's whole size.
    pub bytes: BlobRef,
}

/// The sandbox's System V IPC tunables, as `/proc/sys/kernel` shows them
/// ([`crate::ipc::limits`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IpcLimitsState {
    /// `shmmax`, `shmall`, `shmmni`.
    pub shm: [u64; 3],
    /// `sem`: SEMMSL, SEMMNS, SEMOPM, SEMMNI.
    pub sem: [i32; 4],
    /// `msgmax`, `msgmnb`, `msgmni`.
    pub msg: [u32; 3],
}

impl Default for IpcLimitsState {
    fn default() -> Self {
        use crate::ipc::limits::{MsgLimits, SemLimits, ShmLimits};
        let (shm, sem, msg) = (
            ShmLimits::default(),
            SemLimits::default(),
            MsgLimits::default(),
        );
        IpcLimitsState {
            shm: [shm.max, shm.all, shm.mni as u64],
            sem: [sem.msl, sem.mns, sem.opm, sem.mni],
            msg: [msg.max, msg.mnb, msg.mni],
        }
    }
}

/// The sandbox's System V message queues ([`crate::ipc::msg`]) and where their next id comes
/// from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MsgQueuesState {
    /// The sequence number of new ids.
    pub seq: i32,
    /// The index last given (-1: none yet).
    pub last_idx: i32,
    /// Where the search for a free index starts.
    pub next_idx: u32,
    /// The queues.
    pub queues: Vec<MsgQueueState>,
}

impl Default for MsgQueuesState {
    fn default() -> Self {
        MsgQueuesState {
            seq: 0,
            last_idx: -1,
            next_idx: 0,
            queues: Vec::new(),
        }
    }
}

/// One message queue: its id, permission, times, size, last processes and messages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MsgQueueState {
    /// Its id.
    pub id: i32,
    /// Its key (0: IPC_PRIVATE).
    pub key: i32,
    /// Owner's user id.
    pub uid: u32,
    /// Owner's group id.
    pub gid: u32,
    /// Creator's user id.
    pub cuid: u32,
    /// Creator's group id.
    pub cgid: u32,
    /// Permission bits.
    pub mode: u16,
    /// Last msgsnd, msgrcv and change times (seconds since the epoch).
    pub times: [i64; 3],
    /// Most bytes it holds (`msg_qbytes`).
    pub qbytes: u64,
    /// Processes of the last msgsnd and msgrcv.
    pub pids: [i32; 2],
    /// Each message's type and text length, in queue order.
    pub messages: Vec<MsgState>,
    /// The messages' texts, one after another.
    pub texts: BlobRef,
}

/// One queued message: its type and the length of its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MsgState {
    /// Its type.
    pub mtype: i64,
    /// Its text's length.
    pub len: u32,
}

/// A platform's vDSO: where its ELF header is and a digest of its code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VdsoState {
    /// The ELF header's address.
    pub ehdr: u64,
    /// The digest of its code.
    pub digest: u64,
}

impl From<platform::Vdso> for VdsoState {
    fn from(v: platform::Vdso) -> VdsoState {
        VdsoState {
            ehdr: v.ehdr,
            digest: v.digest,
        }
    }
}

/// One process: its table entry, program, limits, dispositions, address space, descriptors
/// and threads.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessState {
    /// Process id.
    pub pid: i32,
    /// Parent (0: none inside the sandbox).
    pub ppid: i32,
    /// Process group.
    pub pgid: i32,
    /// Session.
    pub sid: i32,
    /// Whether it has called execve.
    pub execed: bool,
    /// Signal its parent gets when it ends.
    pub exit_signal: i32,
    /// Guest path of its program.
    pub exe: Vec<u8>,
    /// Its arguments, each NUL-terminated.
    pub cmdline: Vec<u8>,
    /// Its environment as started, each entry NUL-terminated (none in older checkpoints).
    #[serde(default)]
    pub environ: Vec<u8>,
    /// Resource limits, `[cur, max]` by resource number.
    pub rlimits: Vec<[u64; 2]>,
    /// Signal dispositions `[handler, flags, restorer, mask]`, by signal number - 1.
    pub actions: Vec<[u64; 4]>,
    /// The address space (its pages are in the process's memory image).
    pub mm: mm::MmImage,
    /// The page allocator's state ([`mm::MemoryManager::export`]; a family's, once, for
    /// the processes that share a memory).
    pub allocator: BlobRef,
    /// The process whose memory this one's is: a child forked copy-on-write that shares
    /// frames with it (its page tables are pages of that memory, its memory image and
    /// allocator that process's). Absent for a process with a memory of its own, and
    /// before format 1.10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_of: Option<i32>,
    /// The descriptor table.
    pub files: FilesState,
    /// Its POSIX timers, all disarmed (none in older checkpoints; not written when there
    /// are none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub posix_timers: Vec<crate::task::posix_timer::SavedTimer>,
    /// Its threads, the leader first.
    pub threads: Vec<TaskState>,
}

/// One thread.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskState {
    /// Thread id.
    pub tid: i32,
    /// User registers.
    pub regs: RegsState,
    /// The FPU/SSE/AVX state, a standard XSAVE area.
    pub xsave: BlobRef,
    /// Blocked signals.
    pub sigmask: u64,
    /// Pending signals, 128-byte `siginfo_t`s one after the other.
    pub pending: BlobRef,
    /// Alternate signal stack: `(sp, size, flags)`.
    pub altstack: (u64, u64, i32),
    /// The mask rt_sigsuspend restores after a handler.
    pub saved_mask: Option<u64>,
    /// The syscall that last returned EINTR (restart decision at delivery).
    pub interrupted_syscall: Option<u64>,
    /// Inside a syscall a park interrupted: it runs again after the restore.
    pub in_syscall: bool,
    /// Working directory (guest path).
    pub cwd: Vec<u8>,
    /// File mode creation mask.
    pub umask: u32,
    /// User id the application sees.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// All of its credentials (ids of every kind, capabilities); a checkpoint without them
    /// (older) restores `uid`, `gid` and `groups` as every id of their kind.
    #[serde(default)]
    pub creds: Option<crate::creds::Credentials>,
    /// Thread name, NUL-padded.
    pub comm: Vec<u8>,
    /// set_tid_address(2) pointer.
    pub clear_child_tid: u64,
}

/// The user registers of a thread (KVM's layout, by name).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct RegsState {
    pub rax: u64,
    pub rbx: u64,
    pub rcx: u64,
    pub rdx: u64,
    pub rsi: u64,
    pub rdi: u64,
    pub rsp: u64,
    pub rbp: u64,
    pub r8: u64,
    pub r9: u64,
    pub r10: u64,
    pub r11: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
    pub rip: u64,
    pub rflags: u64,
    pub fs_base: u64,
    pub gs_base: u64,
}

/// A descriptor table: its descriptors, each naming an open file of
/// [`SandboxState::open_files`] (descriptors made by dup, inherited or passed share one).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesState {
    /// The most descriptors (RLIMIT_NOFILE).
    pub limit: usize,
    /// Descriptors.
    pub fds: Vec<FdState>,
}

/// One descriptor.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FdState {
    /// Its number.
    pub fd: i32,
    /// Close-on-exec.
    pub cloexec: bool,
    /// Index of its open file in [`SandboxState::open_files`].
    pub file: usize,
}

/// An open file description, by what it is.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case", tag = "object")]
pub enum OpenFileState {
    /// One of the runtime's standard streams: after a restore, the restoring runtime's.
    Stdio {
        /// Which (0, 1 or 2).
        stream: i32,
    },
    /// A regular file, FIFO or device opened from the root.
    Regular {
        /// Guest path.
        path: Vec<u8>,
        /// Status flags and access mode (`F_GETFL`).
        flags: i32,
        /// File offset.
        offset: i64,
        /// Size when checkpointed (a file that changed since is refused).
        size: u64,
    },
    /// A directory opened from the root.
    Directory {
        /// Guest path.
        path: Vec<u8>,
        /// Status flags (`F_GETFL`).
        flags: i32,
        /// Position of the next getdents.
        offset: i64,
    },
    /// A character device of the root (its own `/dev/null`…), opened again by path.
    RootDevice {
        /// Guest path.
        path: Vec<u8>,
        /// Status flags and access mode.
        flags: i32,
    },
    /// A harmless host device (`/dev/null`…) given when the root has no `/dev`.
    HostDevice {
        /// Host path.
        path: Vec<u8>,
        /// Status flags.
        flags: i32,
    },
    /// One end of a pipe made by pipe(2).
    Pipe {
        /// The pipe's identity (host inode): the ends of one pipe share it.
        pipe: u64,
        /// The write end (else the read end).
        write_end: bool,
        /// Status flags.
        flags: i32,
        /// Capacity in bytes.
        capacity: i32,
        /// The bytes buffered in the pipe (the same for both ends).
        data: BlobRef,
    },
    /// An Internet socket (TCP or UDP, IPv4 or IPv6).
    InetSocket {
        /// AF_INET or AF_INET6.
        family: i32,
        /// SOCK_STREAM or SOCK_DGRAM.
        kind: i32,
        /// Protocol.
        protocol: i32,
        /// Status flags.
        flags: i32,
        /// The address the application bound (its view).
        local: Option<String>,
        /// Listening.
        listening: bool,
        /// A connected stream: it comes back reset.
        connected: bool,
        /// Its peer as the application saw it (for the record).
        peer: Option<String>,
        /// Options kept: `[level, name, value]`.
        options: Vec<[i32; 3]>,
        /// A connection a dormant holder kept open (format 1.2): the host descriptor it
        /// holds it at, which its wake adopts instead of a reset (`docs/design/dormant.md`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kept: Option<i32>,
    },
    /// An unnamed Unix socket: unconnected, or connected to another socket of the sandbox
    /// (its pair), or to one gone or outside (it comes back with its peer closed).
    UnixSocket {
        /// SOCK_STREAM, SOCK_SEQPACKET or SOCK_DGRAM.
        kind: i32,
        /// Status flags.
        flags: i32,
        /// Its identity (host inode), which its peer's `peer` names.
        id: u64,
        /// Connected.
        connected: bool,
        /// The peer's identity, if it is a socket of the sandbox.
        peer: Option<u64>,
        /// Stream bytes waiting to be read from it.
        queued: BlobRef,
    },
    /// An epoll instance and its interest list.
    Epoll {
        /// Status flags.
        flags: i32,
        /// What it watches.
        targets: Vec<EpollTarget>,
    },
    /// A file of the sandbox's generated `/proc` (made when it was opened): the bytes it
    /// was made with, made again as they were.
    ProcFile {
        /// Guest path it was opened by.
        path: Vec<u8>,
        /// Status flags and access mode.
        flags: i32,
        /// File offset.
        offset: i64,
        /// Its bytes.
        content: BlobRef,
    },
    /// An eventfd.
    EventFd {
        /// Its counter.
        count: u64,
        /// EFD_SEMAPHORE.
        semaphore: bool,
        /// Status flags.
        flags: i32,
    },
}

/// One entry of an epoll instance's interest list.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpollTarget {
    /// Index of the watched open file in [`SandboxState::open_files`].
    pub file: usize,
    /// The events asked for, with their flags (EPOLLET, EPOLLONESHOT…; a fired one-shot
    /// entry has no event bits left).
    pub events: u32,
    /// The application's data, given back with each event.
    pub data: u64,
}
