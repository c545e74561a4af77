//! The opcodes: what Linux checks when it reads a submission entry (its `prep`, which
//! fails the submission of the entry and stops the batch), and the request itself (its
//! `issue`, whose result, an errno included, is the completion's `res`).
//!
//! A request does what the system call of the same name does, through the same handler of
//! the syscall table (`table::dispatch`: the calling task's descriptors, memory, root and
//! working directory, credentials and confinement, exactly as if it had made the call), or
//! through the read and write paths read(2) and writev(2) use. Before a request that may
//! block on a pipe, socket or other stream (a read, a receive, an accept; a write, a send),
//! the file is polled: if it is not ready, the request waits ([`Outcome::Wait`]) instead of
//! blocking the call, as Linux arms its internal poll (`IORING_FEAT_FAST_POLL`), even for a
//! file in non-blocking mode; with `MSG_DONTWAIT` or `RWF_NOWAIT` it runs and completes with
//! EAGAIN, as on Linux.

use std::sync::Arc;
use std::time::{Duration, Instant};

use abi::aio::{RWF_APPEND, RWF_NOAPPEND, RWF_NOWAIT, RWF_SUPPORTED};
use abi::io_uring::{
    op, Sqe, IORING_ACCEPT_DONTWAIT, IORING_ACCEPT_MULTISHOT, IORING_ACCEPT_POLL_FIRST,
    IORING_ASYNC_CANCEL_ALL, IORING_ASYNC_CANCEL_ANY, IORING_ASYNC_CANCEL_FD,
    IORING_ASYNC_CANCEL_FD_FIXED, IORING_ASYNC_CANCEL_OP, IORING_ASYNC_CANCEL_USERDATA,
    IORING_FSYNC_DATASYNC, IORING_LINK_TIMEOUT_UPDATE, IORING_MSG_DATA, IORING_MSG_RING_CQE_SKIP,
    IORING_MSG_RING_FLAGS_PASS, IORING_NOP_INJECT_RESULT, IORING_POLL_ADD_LEVEL,
    IORING_POLL_ADD_MULTI, IORING_POLL_UPDATE_EVENTS, IORING_POLL_UPDATE_USER_DATA,
    IORING_RECVSEND_POLL_FIRST, IORING_TIMEOUT_ABS, IORING_TIMEOUT_BOOTTIME,
    IORING_TIMEOUT_ETIME_SUCCESS, IORING_TIMEOUT_MULTISHOT, IORING_TIMEOUT_REALTIME,
    IORING_TIMEOUT_UPDATE, IOSQE_BUFFER_SELECT, IOSQE_FIXED_FILE,
};
use abi::structs::Timespec;
use abi::Errno;
use platform::Gva;

use super::super::iovec::{copy_in_iovecs, MAX_RW};
use super::super::{sys_aio, sys_rw, table, SysResult, SyscallArgs};
use crate::fd::{host, FileKind, OpenFile, Ring};
use crate::io_uring::Wait;
use crate::task::Task;

/// `IORING_FILE_INDEX_ALLOC`: a new direct descriptor goes in the first free slot.
const FILE_INDEX_ALLOC: u32 = !0;
/// `SPLICE_F_FD_IN_FIXED`: the input of a splice or tee is a registered file.
const SPLICE_F_FD_IN_FIXED: u32 = 1 << 31;
/// The flags splice(2) knows (`SPLICE_F_ALL`).
const SPLICE_F_ALL: u32 = 0xf;
/// `IORING_SEND_ZC_REPORT_USAGE`... the `ioprio` flags of a send: POLL_FIRST and
/// `IORING_RECVSEND_FIXED_BUF` are taken.
const IORING_RECVSEND_FIXED_BUF: u16 = 1 << 2;
/// `O_NOTIFICATION_PIPE` (pipe2).
const O_NOTIFICATION_PIPE: u32 = libc::O_EXCL as u32;

/// What an opcode is, as Linux's `io_issue_def`.
#[derive(Clone, Copy)]
struct Def {
    /// torpor runs it (the others complete with EOPNOTSUPP, as an opcode Linux was built
    /// without, and IORING_REGISTER_PROBE says so).
    supported: bool,
    /// Its `ioprio` field means something (else it must be zero).
    ioprio: bool,
    /// It may take `IOSQE_BUFFER_SELECT`.
    buffer_select: bool,
}

const fn def(supported: bool, ioprio: bool, buffer_select: bool) -> Def {
    Def {
        supported,
        ioprio,
        buffer_select,
    }
}

fn def_of(opcode: u8) -> Def {
    match opcode {
        op::READV | op::READ => def(true, true, true),
        op::RECVMSG | op::RECV => def(true, true, true),
        op::WRITEV | op::READ_FIXED | op::WRITE_FIXED | op::WRITE => def(true, true, false),
        op::SENDMSG | op::SEND | op::ACCEPT => def(true, true, false),
        op::READV_FIXED | op::WRITEV_FIXED => def(true, true, false),
        op::NOP
        | op::FSYNC
        | op::POLL_ADD
        | op::POLL_REMOVE
        | op::SYNC_FILE_RANGE
        | op::TIMEOUT
        | op::TIMEOUT_REMOVE
        | op::ASYNC_CANCEL
        | op::LINK_TIMEOUT
        | op::CONNECT
        | op::FALLOCATE
        | op::OPENAT
        | op::CLOSE
        | op::FILES_UPDATE
        | op::STATX
        | op::FADVISE
        | op::MADVISE
        | op::OPENAT2
        | op::EPOLL_CTL
        | op::SPLICE
        | op::TEE
        | op::SHUTDOWN
        | op::RENAMEAT
        | op::UNLINKAT
        | op::MKDIRAT
        | op::SYMLINKAT
        | op::LINKAT
        | op::MSG_RING
        | op::FSETXATTR
        | op::SETXATTR
        | op::FGETXATTR
        | op::GETXATTR
        | op::SOCKET
        | op::FTRUNCATE
        | op::BIND
        | op::LISTEN
        | op::PIPE => def(true, false, false),
        op::READ_MULTISHOT => def(false, true, true),
        op::SEND_ZC | op::SENDMSG_ZC | op::RECV_ZC => def(false, true, false),
        _ => def(false, false, false),
    }
}

/// Whether torpor runs `opcode` (IORING_REGISTER_PROBE).
pub(super) fn supported(opcode: u8) -> bool {
    opcode < op::LAST && def_of(opcode).supported
}

/// What issuing a request came to.
pub(super) enum Outcome {
    /// Completed: the result, and whether it fails the link chain (an error, a short
    /// transfer).
    Done {
        /// The completion's `res`.
        res: i32,
        /// The rest of an `IOSQE_IO_LINK` chain is cancelled.
        fail: bool,
    },
    /// It waits (for a file, its turn, a count).
    Wait(Wait<OpenFile>),
    /// A timeout: it waits until then (or its count).
    Timer(Wait<OpenFile>, Instant),
    /// A multishot request produced a result (posted with `IORING_CQE_F_MORE`) and waits
    /// again.
    More(i32, Wait<OpenFile>),
    /// A cancellation: the pending requests whose first entry `matches` (all of them, or
    /// the first) complete with ECANCELED; the result is 0 (the count with `all`), ENOENT if
    /// none waits.
    Cancel {
        /// Which requests.
        matches: Box<dyn Fn(&Sqe) -> bool>,
        /// All of them (else the first).
        all: bool,
    },
}

/// Completed with `res` (an error fails the chain).
pub(super) fn done(res: i32) -> Outcome {
    Outcome::Done { res, fail: res < 0 }
}

fn err(e: Errno) -> Outcome {
    done(-e.0)
}

/// A syscall's result as a completion's `res` (results fit: transfers are capped at
/// `MAX_RW`).
pub(super) fn res_of(r: SysResult) -> i32 {
    match r {
        Ok(v) => v as i32,
        Err(e) => -e.0,
    }
}

/// Runs syscall `nr` as the task would (its handler in the table, with the task's file
/// identity when the call checks file access).
fn syscall(t: &mut Task, nr: u64, a: [u64; 6]) -> SysResult {
    table::dispatch(t, &SyscallArgs { nr, a })
}

fn call(t: &mut Task, nr: u64, a: [u64; 6]) -> Outcome {
    done(res_of(syscall(t, nr, a)))
}

// ---------------------------------------------------------------------------------------------
// Submission checks.

/// Linux's `io_init_req` and the opcode's `prep`: EINVAL for an unknown opcode, bad flags or
/// a field that must be zero... `prev` is the opcode of the request this one is linked
/// after, if any.
pub(super) fn prep(t: &Task, ring: &Ring, sqe: &Sqe, prev: Option<u8>) -> Result<(), Errno> {
    if sqe.opcode >= op::LAST {
        return Err(Errno::EINVAL);
    }
    let d = def_of(sqe.opcode);
    if sqe.flags & !abi::io_uring::IOSQE_VALID != 0 {
        return Err(Errno::EINVAL);
    }
    if sqe.flags & IOSQE_BUFFER_SELECT != 0 && !d.buffer_select {
        return Err(Errno::EOPNOTSUPP);
    }
    if sqe.flags & abi::io_uring::IOSQE_CQE_SKIP_SUCCESS != 0 {
        ring.drain_disabled
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
    if sqe.flags & abi::io_uring::IOSQE_IO_DRAIN != 0
        && ring
            .drain_disabled
            .load(std::sync::atomic::Ordering::Relaxed)
    {
        return Err(Errno::EOPNOTSUPP);
    }
    if !d.ioprio && sqe.ioprio != 0 {
        return Err(Errno::EINVAL);
    }
    // No personality is ever registered (IORING_REGISTER_PERSONALITY is EINVAL).
    if sqe.personality != 0 {
        return Err(Errno::EINVAL);
    }
    if !d.supported {
        return Err(Errno::EOPNOTSUPP);
    }
    let fixed = sqe.flags & IOSQE_FIXED_FILE != 0;
    let zero = |fields: &[u64]| {
        if fields.iter().any(|&f| f != 0) {
            Err(Errno::EINVAL)
        } else {
            Ok(())
        }
    };
    let (off, addr, len, fl) = (sqe.off, sqe.addr, u64::from(sqe.len), sqe.op_flags);
    let (bi, sfi, a3) = (
        u64::from(sqe.buf_index),
        sqe.splice_fd_in as u32 as u64,
        sqe.addr3,
    );
    // The path-based requests take no registered file.
    let no_fixed = || if fixed { Err(Errno::EBADF) } else { Ok(()) };
    match sqe.opcode {
        op::NOP if fl & !IORING_NOP_INJECT_RESULT != 0 => return Err(Errno::EINVAL),
        op::READV
        | op::WRITEV
        | op::READ
        | op::WRITE
        | op::READ_FIXED
        | op::WRITE_FIXED
        | op::READV_FIXED
        | op::WRITEV_FIXED
            if sqe.ioprio != 0 =>
        {
            sys_aio::check_ioprio(t, sqe.ioprio as i16)?;
        }
        op::FSYNC => {
            if fl & !IORING_FSYNC_DATASYNC != 0 {
                return Err(Errno::EINVAL);
            }
            zero(&[addr, bi, sfi])?;
        }
        op::SYNC_FILE_RANGE => zero(&[addr, bi, sfi])?,
        op::FALLOCATE => zero(&[bi, u64::from(fl), sfi])?,
        op::POLL_ADD => {
            zero(&[bi, off, addr])?;
            if sqe.len & !(IORING_POLL_ADD_MULTI | IORING_POLL_ADD_LEVEL) != 0 {
                return Err(Errno::EINVAL);
            }
        }
        op::POLL_REMOVE => {
            zero(&[bi, sfi])?;
            let f = sqe.len;
            let known =
                IORING_POLL_UPDATE_EVENTS | IORING_POLL_UPDATE_USER_DATA | IORING_POLL_ADD_MULTI;
            if f & !known != 0 || f == IORING_POLL_ADD_MULTI {
                return Err(Errno::EINVAL);
            }
        }
        op::SENDMSG | op::SEND => {
            let known = IORING_RECVSEND_POLL_FIRST
                | if sqe.opcode == op::SEND {
                    IORING_RECVSEND_FIXED_BUF
                } else {
                    0
                };
            if sqe.ioprio & !known != 0 {
                return Err(Errno::EINVAL);
            }
        }
        op::RECVMSG | op::RECV => {
            // Multishot receives need provided buffers, which torpor does not take.
            if sqe.ioprio & !IORING_RECVSEND_POLL_FIRST != 0 {
                return Err(Errno::EINVAL);
            }
            zero(&[if sqe.opcode == op::RECV { off } else { 0 }])?;
        }
        op::TIMEOUT | op::LINK_TIMEOUT => {
            let link = sqe.opcode == op::LINK_TIMEOUT;
            if link && (prev.is_none() || prev == Some(op::LINK_TIMEOUT)) {
                return Err(Errno::EINVAL);
            }
            zero(&[bi, sfi])?;
            if sqe.len != 1 || (link && off != 0) {
                return Err(Errno::EINVAL);
            }
            let known = IORING_TIMEOUT_ABS
                | IORING_TIMEOUT_BOOTTIME
                | IORING_TIMEOUT_REALTIME
                | IORING_TIMEOUT_ETIME_SUCCESS
                | if link { 0 } else { IORING_TIMEOUT_MULTISHOT };
            if fl & !known != 0
                || (fl & IORING_TIMEOUT_BOOTTIME != 0 && fl & IORING_TIMEOUT_REALTIME != 0)
            {
                return Err(Errno::EINVAL);
            }
            read_timeout(t, addr)?;
        }
        op::TIMEOUT_REMOVE => {
            zero(&[bi, len, sfi])?;
            let update = IORING_TIMEOUT_UPDATE | IORING_LINK_TIMEOUT_UPDATE;
            if fl & update != 0 {
                if (fl & update).count_ones() > 1
                    || fl
                        & !(update
                            | IORING_TIMEOUT_ABS
                            | IORING_TIMEOUT_BOOTTIME
                            | IORING_TIMEOUT_REALTIME)
                        != 0
                {
                    return Err(Errno::EINVAL);
                }
                read_timeout(t, off)?;
            } else if fl != 0 {
                return Err(Errno::EINVAL);
            }
        }
        op::ASYNC_CANCEL => {
            zero(&[off, sfi])?;
            let known = IORING_ASYNC_CANCEL_ALL
                | IORING_ASYNC_CANCEL_FD
                | IORING_ASYNC_CANCEL_ANY
                | IORING_ASYNC_CANCEL_FD_FIXED
                | IORING_ASYNC_CANCEL_USERDATA
                | IORING_ASYNC_CANCEL_OP;
            let any = fl & IORING_ASYNC_CANCEL_ANY != 0;
            if fl & !known != 0
                || (any && fl & (IORING_ASYNC_CANCEL_FD | IORING_ASYNC_CANCEL_OP) != 0)
            {
                return Err(Errno::EINVAL);
            }
        }
        op::ACCEPT => {
            zero(&[len, bi])?;
            let known = IORING_ACCEPT_MULTISHOT | IORING_ACCEPT_DONTWAIT | IORING_ACCEPT_POLL_FIRST;
            let slot = sqe.splice_fd_in as u32;
            if sqe.ioprio & !known != 0
                || fl as i32 & !(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) != 0
                || (slot != 0 && fl as i32 & libc::SOCK_CLOEXEC != 0)
                || (sqe.ioprio & IORING_ACCEPT_MULTISHOT != 0
                    && slot != 0
                    && slot != FILE_INDEX_ALLOC)
            {
                return Err(Errno::EINVAL);
            }
        }
        op::CONNECT => zero(&[len, bi, u64::from(fl), sfi])?,
        op::OPENAT | op::OPENAT2 => {
            zero(&[bi])?;
            no_fixed()?;
            if sfi != 0 && fl as i32 & libc::O_CLOEXEC != 0 && sqe.opcode == op::OPENAT {
                return Err(Errno::EINVAL);
            }
        }
        op::CLOSE => {
            zero(&[off, addr, len, u64::from(fl), bi])?;
            no_fixed()?;
            if sfi != 0 && sqe.fd != 0 {
                return Err(Errno::EINVAL);
            }
        }
        op::FILES_UPDATE => {
            zero(&[u64::from(fl), sfi])?;
            if sqe.len == 0 || fixed {
                return Err(Errno::EINVAL);
            }
        }
        op::STATX | op::RENAMEAT | op::LINKAT => {
            zero(&[bi, sfi])?;
            no_fixed()?;
        }
        op::UNLINKAT => {
            zero(&[off, len, bi, sfi])?;
            no_fixed()?;
            if fl as i32 & !libc::AT_REMOVEDIR != 0 {
                return Err(Errno::EINVAL);
            }
        }
        op::MKDIRAT => {
            zero(&[off, u64::from(fl), bi, sfi])?;
            no_fixed()?;
        }
        op::SYMLINKAT => {
            zero(&[len, u64::from(fl), bi, sfi])?;
            no_fixed()?;
        }
        op::FADVISE | op::MADVISE | op::EPOLL_CTL => zero(&[bi, sfi])?,
        op::SHUTDOWN => zero(&[off, addr, u64::from(fl), bi, sfi, a3])?,
        op::SPLICE | op::TEE => {
            if sqe.opcode == op::TEE {
                zero(&[addr, off])?;
            }
            if fl & !(SPLICE_F_FD_IN_FIXED | SPLICE_F_ALL) != 0 {
                return Err(Errno::EINVAL);
            }
        }
        op::MSG_RING => {
            zero(&[bi])?;
            if fl & !(IORING_MSG_RING_CQE_SKIP | IORING_MSG_RING_FLAGS_PASS) != 0 {
                return Err(Errno::EINVAL);
            }
        }
        op::FSETXATTR | op::SETXATTR | op::FGETXATTR | op::GETXATTR => {
            if matches!(sqe.opcode, op::SETXATTR | op::GETXATTR) {
                no_fixed()?;
            }
            if matches!(sqe.opcode, op::FGETXATTR | op::GETXATTR) && fl != 0 {
                return Err(Errno::EINVAL);
            }
        }
        op::SOCKET => {
            zero(&[addr, u64::from(fl), bi])?;
            let flags = (off as i32) & !0xf;
            if flags & !(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) != 0
                || (sfi != 0 && flags & libc::SOCK_CLOEXEC != 0)
            {
                return Err(Errno::EINVAL);
            }
        }
        op::FTRUNCATE => zero(&[u64::from(fl), addr, len, bi, sfi, a3])?,
        op::BIND => zero(&[len, bi, u64::from(fl), u64::from(sqe.ioprio)])?,
        op::LISTEN => zero(&[addr, bi, u64::from(fl), sfi, off])?,
        op::PIPE => {
            zero(&[sqe.fd as u32 as u64, off, a3])?;
            let known =
                (libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_DIRECT) as u32 | O_NOTIFICATION_PIPE;
            if fl & !known != 0 {
                return Err(Errno::EINVAL);
            }
        }
        _ => {}
    }
    Ok(())
}

/// Reads a timeout's `struct __kernel_timespec` at `addr`: EFAULT, or EINVAL for a negative
/// one.
pub(super) fn read_timeout(t: &Task, addr: u64) -> Result<Duration, Errno> {
    t.read_val::<Timespec>(Gva(addr))?.to_duration()
}

/// When a timeout of `ts` with `flags` (`IORING_TIMEOUT_ABS` and a clock) expires (a time
/// too far to be kept is a century away).
pub(super) fn deadline(ts: Duration, flags: u32) -> Instant {
    let now = Instant::now();
    let left = if flags & IORING_TIMEOUT_ABS == 0 {
        ts
    } else {
        let clock = if flags & IORING_TIMEOUT_REALTIME != 0 {
            libc::CLOCK_REALTIME
        } else if flags & IORING_TIMEOUT_BOOTTIME != 0 {
            libc::CLOCK_BOOTTIME
        } else {
            libc::CLOCK_MONOTONIC
        };
        let clock_now = crate::task::host::clock_now(clock)
            .map(|c| {
                Duration::new(
                    c.tv_sec.max(0) as u64,
                    c.tv_nsec.clamp(0, 999_999_999) as u32,
                )
            })
            .unwrap_or_default();
        ts.saturating_sub(clock_now)
    };
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    now.checked_add(left.min(CENTURY)).unwrap_or(now)
}

// ---------------------------------------------------------------------------------------------
// Files.

/// The request's file: `sqe.fd` in the descriptor table, or in the registered files with
/// `IOSQE_FIXED_FILE`. EBADF otherwise.
fn file_of(t: &Task, ring: &Ring, sqe: &Sqe) -> Result<Arc<OpenFile>, Errno> {
    if sqe.flags & IOSQE_FIXED_FILE != 0 {
        return fixed_file(ring, sqe.fd as u32);
    }
    t.fds.get(sqe.fd)
}

/// Registered file `index`: EBADF if there is none.
fn fixed_file(ring: &Ring, index: u32) -> Result<Arc<OpenFile>, Errno> {
    ring.lock_registered()
        .files
        .as_ref()
        .and_then(|f| f.get(index as usize))
        .and_then(Clone::clone)
        .ok_or(Errno::EBADF)
}

/// Requests that name their file by descriptor number only (they run through the syscall
/// table): with `IOSQE_FIXED_FILE` they are EBADF in torpor.
fn by_number(sqe: &Sqe) -> Result<(), Errno> {
    if sqe.flags & IOSQE_FIXED_FILE != 0 {
        return Err(Errno::EBADF);
    }
    Ok(())
}

/// Whether a request on `f` may wait for it: a stream (pipe, socket, terminal, eventfd...),
/// not a regular file, directory or block device.
fn pollable(f: &OpenFile) -> bool {
    host::fstat(f.host()).is_ok_and(|st| {
        !matches!(
            st.st_mode & libc::S_IFMT,
            libc::S_IFREG | libc::S_IFDIR | libc::S_IFBLK
        )
    })
}

/// The poll events of `f` among `events` now (POLLERR and POLLHUP always count).
pub(super) fn poll_now(f: &OpenFile, events: i16) -> i16 {
    use std::os::fd::AsRawFd;
    let mut p = [libc::pollfd {
        fd: f.host().as_raw_fd(),
        events,
        revents: 0,
    }];
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match host::ppoll(&mut p, Some(&zero)) {
        Ok(_) => p[0].revents,
        Err(_) => 0,
    }
}

/// The wait of a request for `events` on `f`, unless it must run now: `nowait` (the request
/// asked not to wait: RWF_NOWAIT, MSG_DONTWAIT...), a file that is not a stream, or a file
/// ready now. A stream in non-blocking mode waits too, as on Linux (which polls it).
fn wait_for(f: &Arc<OpenFile>, events: i16, nowait: bool) -> Option<Wait<OpenFile>> {
    if nowait || !pollable(f) {
        return None;
    }
    if poll_now(f, events) != 0 {
        return None;
    }
    Some(Wait::Ready {
        file: f.clone(),
        events,
    })
}

/// A request on a stream found ready that still got EAGAIN (another reader came first, or
/// a non-blocking file): it waits again, unless it asked not to.
fn again(f: &Arc<OpenFile>, events: i16, res: i32, nowait: bool) -> Option<Wait<OpenFile>> {
    (res == -Errno::EAGAIN.0 && !nowait && pollable(f)).then(|| Wait::Ready {
        file: f.clone(),
        events,
    })
}

// ---------------------------------------------------------------------------------------------
// Requests.

/// Runs the request `sqe` (which passed [`prep`]) for task `t`; `call` counts the
/// io_uring_enter(2) call.
pub(super) fn issue(t: &mut Task, ring: &Arc<Ring>, sqe: &Sqe) -> Outcome {
    let fd = sqe.fd as i64 as u64;
    let (off, addr, len, fl) = (sqe.off, sqe.addr, u64::from(sqe.len), sqe.op_flags);
    match sqe.opcode {
        op::NOP => done(if fl & IORING_NOP_INJECT_RESULT != 0 {
            sqe.len as i32
        } else {
            0
        }),
        op::READ => read_write(t, ring, sqe, Rw::Plain, false),
        op::WRITE => read_write(t, ring, sqe, Rw::Plain, true),
        op::READV => read_write(t, ring, sqe, Rw::Vectored, false),
        op::WRITEV => read_write(t, ring, sqe, Rw::Vectored, true),
        op::READ_FIXED => read_write(t, ring, sqe, Rw::Fixed, false),
        op::WRITE_FIXED => read_write(t, ring, sqe, Rw::Fixed, true),
        op::READV_FIXED => read_write(t, ring, sqe, Rw::VectoredFixed, false),
        op::WRITEV_FIXED => read_write(t, ring, sqe, Rw::VectoredFixed, true),
        op::FSYNC => match file_of(t, ring, sqe) {
            Ok(f) => done(res_of(host::fsync(f.host()).map(|()| 0))),
            Err(e) => err(e),
        },
        op::POLL_ADD => poll_add(t, ring, sqe),
        op::POLL_REMOVE => poll_remove(ring, sqe),
        op::SYNC_FILE_RANGE => match by_number(sqe) {
            Ok(()) => call(t, 277, [fd, off, len, u64::from(fl), 0, 0]),
            Err(e) => err(e),
        },
        op::SENDMSG | op::SEND | op::RECVMSG | op::RECV => send_recv(t, ring, sqe),
        op::ACCEPT => accept(t, ring, sqe),
        op::CONNECT => match by_number(sqe) {
            Ok(()) => call(t, 42, [fd, addr, off, 0, 0, 0]),
            Err(e) => err(e),
        },
        op::FALLOCATE => match by_number(sqe) {
            Ok(()) => call(t, 285, [fd, len, off, addr, 0, 0]),
            Err(e) => err(e),
        },
        op::FADVISE => match by_number(sqe) {
            Ok(()) => call(
                t,
                221,
                [
                    fd,
                    off,
                    if addr != 0 { addr } else { len },
                    u64::from(fl),
                    0,
                    0,
                ],
            ),
            Err(e) => err(e),
        },
        op::MADVISE => call(
            t,
            28,
            [
                addr,
                if off != 0 { off } else { len },
                u64::from(fl),
                0,
                0,
                0,
            ],
        ),
        op::OPENAT => {
            let r = syscall(
                t,
                257,
                [
                    fd,
                    addr,
                    u64::from(fl) | libc::O_LARGEFILE as u64,
                    len,
                    0,
                    0,
                ],
            );
            direct(t, ring, sqe, r)
        }
        op::OPENAT2 => {
            let r = syscall(t, 437, [fd, addr, off, len, 0, 0]);
            direct(t, ring, sqe, r)
        }
        op::CLOSE => close(t, ring, sqe),
        op::FILES_UPDATE => done(res_of(super::files_update(
            t,
            ring,
            off as u32,
            Gva(addr),
            sqe.len,
        ))),
        op::STATX => call(t, 332, [fd, addr, u64::from(fl), len, off, 0]),
        op::EPOLL_CTL => call(t, 233, [fd, len, off, addr, 0, 0]),
        op::SPLICE | op::TEE => splice(t, ring, sqe),
        op::SHUTDOWN => match by_number(sqe) {
            Ok(()) => call(t, 48, [fd, len, 0, 0, 0, 0]),
            Err(e) => err(e),
        },
        op::RENAMEAT => call(t, 316, [fd, addr, len, off, u64::from(fl), 0]),
        op::UNLINKAT => call(t, 263, [fd, addr, u64::from(fl), 0, 0, 0]),
        op::MKDIRAT => call(t, 258, [fd, addr, len, 0, 0, 0]),
        op::SYMLINKAT => call(t, 266, [addr, fd, off, 0, 0, 0]),
        op::LINKAT => call(t, 265, [fd, addr, len, off, u64::from(fl), 0]),
        op::FSETXATTR => match by_number(sqe) {
            Ok(()) => call(t, 190, [fd, addr, off, len, u64::from(fl), 0]),
            Err(e) => err(e),
        },
        op::SETXATTR => call(t, 188, [sqe.addr3, addr, off, len, u64::from(fl), 0]),
        op::FGETXATTR => match by_number(sqe) {
            Ok(()) => call(t, 193, [fd, addr, off, len, 0, 0]),
            Err(e) => err(e),
        },
        op::GETXATTR => call(t, 191, [sqe.addr3, addr, off, len, 0, 0]),
        op::SOCKET => {
            let r = syscall(t, 41, [fd, off, len, 0, 0, 0]);
            direct(t, ring, sqe, r)
        }
        op::FTRUNCATE => match by_number(sqe) {
            Ok(()) => call(t, 77, [fd, off, 0, 0, 0, 0]),
            Err(e) => err(e),
        },
        op::BIND => match by_number(sqe) {
            Ok(()) => call(t, 49, [fd, addr, off, 0, 0, 0]),
            Err(e) => err(e),
        },
        op::LISTEN => match by_number(sqe) {
            Ok(()) => call(t, 50, [fd, len, 0, 0, 0, 0]),
            Err(e) => err(e),
        },
        op::PIPE => {
            if sqe.splice_fd_in != 0 {
                return err(Errno::EINVAL);
            }
            call(t, 293, [addr, u64::from(fl), 0, 0, 0, 0])
        }
        op::MSG_RING => msg_ring(t, ring, sqe),
        op::TIMEOUT => timeout(t, ring, sqe),
        op::TIMEOUT_REMOVE => timeout_remove(t, ring, sqe),
        op::ASYNC_CANCEL => async_cancel(sqe),
        // A linked timeout whose request completed (a chain's head cannot be one: prep).
        op::LINK_TIMEOUT => err(Errno::ECANCELED),
        _ => err(Errno::EOPNOTSUPP),
    }
}

/// The kinds of read and write.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rw {
    /// READ, WRITE: `len` bytes at `addr`.
    Plain,
    /// READV, WRITEV: `len` iovecs at `addr`.
    Vectored,
    /// READ_FIXED, WRITE_FIXED: bytes inside registered buffer `buf_index`.
    Fixed,
    /// READV_FIXED, WRITEV_FIXED: iovecs inside registered buffer `buf_index`.
    VectoredFixed,
}

/// Whether `[addr, addr + len)` lies inside registered buffer `index` (EFAULT otherwise, as
/// Linux's `io_import_fixed`).
fn in_buffer(ring: &Ring, index: u16, addr: u64, len: u64) -> Result<(), Errno> {
    let reg = ring.lock_registered();
    let (base, size) = reg
        .buffers
        .get(usize::from(index))
        .copied()
        .flatten()
        .ok_or(Errno::EFAULT)?;
    let end = addr.checked_add(len).ok_or(Errno::EFAULT)?;
    if addr < base || end > base + size {
        return Err(Errno::EFAULT);
    }
    Ok(())
}

/// The reads and writes, as Linux's `io_read` and `io_write`: `off` is the file's offset
/// (-1: its position, which moves, `IORING_FEAT_RW_CUR_POS`), ignored for streams; `rw_flags`
/// are preadv2(2)'s; a short transfer fails a link chain.
fn read_write(t: &mut Task, ring: &Ring, sqe: &Sqe, kind: Rw, write: bool) -> Outcome {
    let f = match file_of(t, ring, sqe).and_then(|f| sys_rw::check_file(&f).map(|()| f)) {
        Ok(f) => f,
        Err(e) => return err(e),
    };
    let rwf = sqe.op_flags;
    if rwf & !RWF_SUPPORTED != 0 {
        return err(Errno::EOPNOTSUPP);
    }
    if rwf & RWF_APPEND != 0 && rwf & RWF_NOAPPEND != 0 {
        return err(Errno::EINVAL);
    }
    if sqe.flags & IOSQE_BUFFER_SELECT != 0 {
        // No buffer group was ever provided (PROVIDE_BUFFERS is EOPNOTSUPP).
        return err(Errno::ENOBUFS);
    }
    let offset = match (sqe.off as i64, sys_aio::positional(&f)) {
        (-1, _) => None,
        (o, _) if o < 0 => return err(Errno::EINVAL),
        (_, false) => None,
        (o, true) => Some(o),
    };
    let events = if write { libc::POLLOUT } else { libc::POLLIN };
    if let Some(w) = wait_for(&f, events, rwf & RWF_NOWAIT != 0) {
        return Outcome::Wait(w);
    }
    let flags = rwf as crate::fd::RwFlags;
    let buf = Gva(sqe.addr);
    let (r, want) = match kind {
        Rw::Plain | Rw::Fixed => {
            let len = u64::from(sqe.len);
            if kind == Rw::Fixed {
                if let Err(e) = in_buffer(ring, sqe.buf_index, sqe.addr, len) {
                    return err(e);
                }
            }
            let r = if write {
                sys_rw::write_file_from_user(t, &f, buf, len, offset, flags)
            } else {
                sys_rw::read_file_to_user(t, &f, buf, len, offset, flags)
            };
            (r, len.min(MAX_RW))
        }
        Rw::Vectored | Rw::VectoredFixed => {
            let iov = match sys_rw::check_vectored(&f, offset)
                .and_then(|()| copy_in_iovecs(t, buf, u64::from(sqe.len)))
            {
                Ok(v) => v,
                Err(e) => return err(e),
            };
            if kind == Rw::VectoredFixed {
                for &(base, len) in &iov {
                    if let Err(e) = in_buffer(ring, sqe.buf_index, base.raw(), len) {
                        return err(e);
                    }
                }
            }
            let want = iov.iter().map(|&(_, l)| l).sum::<u64>().min(MAX_RW);
            (
                sys_rw::vectored_file_io(t, &f, &iov, write, offset, flags),
                want,
            )
        }
    };
    if write {
        super::super::sys_socket::maybe_sigpipe(t, 0, &r);
    }
    let res = res_of(r);
    if let Some(w) = again(&f, events, res, rwf & RWF_NOWAIT != 0) {
        return Outcome::Wait(w);
    }
    Outcome::Done {
        res,
        fail: res < 0 || res as u64 != want,
    }
}

/// POLL_ADD: completes with the events (among those asked, plus POLLERR and POLLHUP) once
/// the file has one; multishot (`IORING_POLL_ADD_MULTI`) completes with
/// `IORING_CQE_F_MORE` each time and waits again (level-triggered, at most once per
/// io_uring_enter(2)).
fn poll_add(t: &mut Task, ring: &Ring, sqe: &Sqe) -> Outcome {
    let f = match file_of(t, ring, sqe) {
        Ok(f) => f,
        Err(e) => return err(e),
    };
    let events = (sqe.op_flags & 0xffff) as u16 as i16 | libc::POLLERR | libc::POLLHUP;
    let rev = poll_now(&f, events) & events;
    let wait = Wait::Ready { file: f, events };
    match (rev, sqe.len & IORING_POLL_ADD_MULTI != 0) {
        (0, _) => Outcome::Wait(wait),
        (r, true) => Outcome::More(i32::from(r as u16), wait),
        (r, false) => done(i32::from(r as u16)),
    }
}

/// POLL_REMOVE: cancels the poll whose `user_data` is `addr` (ENOENT if none waits), or
/// updates its events (`IORING_POLL_UPDATE_EVENTS`) and user data
/// (`IORING_POLL_UPDATE_USER_DATA`, to `off`).
fn poll_remove(ring: &Ring, sqe: &Sqe) -> Outcome {
    let target = sqe.addr;
    let is_poll = move |s: &Sqe| s.opcode == op::POLL_ADD && s.user_data == target;
    let update = sqe.len & (IORING_POLL_UPDATE_EVENTS | IORING_POLL_UPDATE_USER_DATA);
    if update == 0 {
        return Outcome::Cancel {
            matches: Box::new(is_poll),
            all: false,
        };
    }
    let mut pending = ring.lock_pending();
    let Some(p) = pending
        .iter_mut()
        .find(|p| p.chain.front().is_some_and(is_poll))
    else {
        return err(Errno::ENOENT);
    };
    if let Some(first) = p.chain.front_mut() {
        if sqe.len & IORING_POLL_UPDATE_EVENTS != 0 {
            let events = (sqe.op_flags & 0xffff) as u16 as i16 | libc::POLLERR | libc::POLLHUP;
            first.op_flags = sqe.op_flags;
            first.len = (first.len & !IORING_POLL_ADD_MULTI) | (sqe.len & IORING_POLL_ADD_MULTI);
            if let Wait::Ready { events: e, .. } | Wait::ReadyWeak { events: e, .. } = &mut p.wait {
                *e = events;
            }
        }
        if sqe.len & IORING_POLL_UPDATE_USER_DATA != 0 {
            first.user_data = sqe.off;
        }
    }
    done(0)
}

/// SENDMSG, SEND, RECVMSG, RECV: sendmsg(2), sendto(2), recvmsg(2), recvfrom(2) with
/// `msg_flags` (a send never raises SIGPIPE: io_uring adds MSG_NOSIGNAL); they wait for the
/// socket unless it is non-blocking or MSG_DONTWAIT is given. A short transfer with
/// MSG_WAITALL fails a link chain.
fn send_recv(t: &mut Task, ring: &Ring, sqe: &Sqe) -> Outcome {
    if let Err(e) = by_number(sqe) {
        return err(e);
    }
    let f = match t.fds.get(sqe.fd) {
        Ok(f) => f,
        Err(e) => return err(e),
    };
    if sqe.flags & IOSQE_BUFFER_SELECT != 0 {
        return err(Errno::ENOBUFS);
    }
    let send = matches!(sqe.opcode, op::SENDMSG | op::SEND);
    let flags = sqe.op_flags as i32 | if send { libc::MSG_NOSIGNAL } else { 0 };
    let events = if send { libc::POLLOUT } else { libc::POLLIN };
    if let Some(w) = wait_for(&f, events, flags & libc::MSG_DONTWAIT != 0) {
        return Outcome::Wait(w);
    }
    let fd = sqe.fd as i64 as u64;
    let (addr, len, flags64) = (sqe.addr, u64::from(sqe.len), flags as u32 as u64);
    let r = match sqe.opcode {
        op::SENDMSG => syscall(t, 46, [fd, addr, flags64, 0, 0, 0]),
        op::RECVMSG => syscall(t, 47, [fd, addr, flags64, 0, 0, 0]),
        op::SEND => {
            if sqe.ioprio & IORING_RECVSEND_FIXED_BUF != 0 {
                if let Err(e) = in_buffer(ring, sqe.buf_index, addr, len) {
                    return err(e);
                }
            }
            let addr_len = u64::from(sqe.splice_fd_in as u32 & 0xffff);
            syscall(t, 44, [fd, addr, len, flags64, sqe.off, addr_len])
        }
        _ => syscall(t, 45, [fd, addr, len, flags64, 0, 0]),
    };
    let res = res_of(r);
    if let Some(w) = again(&f, events, res, flags & libc::MSG_DONTWAIT != 0) {
        return Outcome::Wait(w);
    }
    let waitall = flags & libc::MSG_WAITALL != 0 && matches!(sqe.opcode, op::SEND | op::RECV);
    Outcome::Done {
        res,
        fail: res < 0 || (waitall && (res as u64) < len),
    }
}

/// ACCEPT: accept4(2) (the new descriptor, or a registered file slot with `file_index`);
/// waits for a connection on a blocking socket; multishot (`IORING_ACCEPT_MULTISHOT`)
/// completes with `IORING_CQE_F_MORE` for each connection and waits again.
fn accept(t: &mut Task, ring: &Ring, sqe: &Sqe) -> Outcome {
    if let Err(e) = by_number(sqe) {
        return err(e);
    }
    let f = match t.fds.get(sqe.fd) {
        Ok(f) => f,
        Err(e) => return err(e),
    };
    let multishot = sqe.ioprio & IORING_ACCEPT_MULTISHOT != 0;
    let nowait = sqe.ioprio & IORING_ACCEPT_DONTWAIT != 0;
    if let Some(w) = wait_for(&f, libc::POLLIN, nowait) {
        return Outcome::Wait(w);
    }
    let fd = sqe.fd as i64 as u64;
    let r = syscall(
        t,
        288,
        [fd, sqe.addr, sqe.off, u64::from(sqe.op_flags), 0, 0],
    );
    let res = match direct(t, ring, sqe, r) {
        Outcome::Done { res, .. } => res,
        other => return other,
    };
    if let Some(w) = again(&f, libc::POLLIN, res, nowait) {
        return Outcome::Wait(w);
    }
    if multishot && res >= 0 {
        // Waits again for the next connection.
        return Outcome::More(
            res,
            Wait::Ready {
                file: f,
                events: libc::POLLIN,
            },
        );
    }
    done(res)
}

/// A request that made a descriptor (OPENAT, OPENAT2, ACCEPT, SOCKET): with `file_index`
/// the new file goes to registered file slot `file_index - 1` (or the first free one with
/// `IORING_FILE_INDEX_ALLOC`, whose index is the result) instead of the descriptor table.
fn direct(t: &mut Task, ring: &Ring, sqe: &Sqe, r: SysResult) -> Outcome {
    let slot = sqe.splice_fd_in as u32;
    let fd = match r {
        Ok(fd) if slot != 0 => fd as i32,
        other => return done(res_of(other)),
    };
    let file = match t.fds.remove(fd) {
        Ok(f) => f,
        Err(e) => return err(e),
    };
    done(res_of(super::install_fixed(ring, file, slot)))
}

/// CLOSE: close(2) of `fd`, or of registered file slot `file_index - 1`. An io_uring
/// descriptor is EBADF, as on Linux.
fn close(t: &mut Task, ring: &Ring, sqe: &Sqe) -> Outcome {
    let slot = sqe.splice_fd_in as u32;
    if slot != 0 {
        let mut reg = ring.lock_registered();
        let taken = reg
            .files
            .as_mut()
            .and_then(|f| f.get_mut(slot as usize - 1))
            .and_then(Option::take);
        return done(if taken.is_some() { 0 } else { -Errno::EBADF.0 });
    }
    match t.fds.get(sqe.fd) {
        Ok(f) if matches!(f.kind, FileKind::IoUring(_)) => err(Errno::EBADF),
        Ok(_) => call(t, 3, [sqe.fd as i64 as u64, 0, 0, 0, 0, 0]),
        Err(e) => err(e),
    }
}

/// SPLICE and TEE: `splice_fd_in` (a registered file with `SPLICE_F_FD_IN_FIXED`) to `fd`;
/// SPLICE's offsets are values (-1: none), not pointers.
fn splice(t: &mut Task, ring: &Ring, sqe: &Sqe) -> Outcome {
    let flags = sqe.op_flags;
    let input = if flags & SPLICE_F_FD_IN_FIXED != 0 {
        fixed_file(ring, sqe.splice_fd_in as u32)
    } else {
        t.fds.get(sqe.splice_fd_in)
    };
    let files = input.and_then(|i| Ok((i, file_of(t, ring, sqe)?)));
    let (inp, out) = match files.and_then(|(i, o)| {
        sys_rw::check_file(&i)?;
        sys_rw::check_file(&o)?;
        Ok((i, o))
    }) {
        Ok(p) => p,
        Err(e) => return err(e),
    };
    let len = u64::from(sqe.len).min(MAX_RW) as usize;
    let flags = flags & SPLICE_F_ALL;
    let r = if sqe.opcode == op::TEE {
        host::tee(inp.host(), out.host(), len, flags)
    } else {
        let value = |v: u64| (v as i64 != -1).then_some(v as i64);
        let (mut off_in, mut off_out) = (value(sqe.addr), value(sqe.off));
        host::transfer(
            host::Transfer::Splice,
            inp.host(),
            &mut off_in,
            out.host(),
            &mut off_out,
            len,
            flags,
        )
    };
    done(res_of(r.map(|n| n as u64)))
}

/// MSG_RING: posts a completion to the ring `fd` (`IORING_MSG_DATA`: user data `off`,
/// result `len`, flags `file_index` with `IORING_MSG_RING_FLAGS_PASS`). Passing a
/// registered file (`IORING_MSG_SEND_FD`) is EINVAL.
fn msg_ring(t: &mut Task, ring: &Ring, sqe: &Sqe) -> Outcome {
    let target = match file_of(t, ring, sqe) {
        Ok(f) => f,
        Err(e) => return err(e),
    };
    let FileKind::IoUring(target) = &target.kind else {
        return err(Errno::EBADFD);
    };
    let pass = sqe.op_flags & IORING_MSG_RING_FLAGS_PASS != 0;
    if sqe.addr != IORING_MSG_DATA
        || sqe.addr3 != 0
        || sqe.op_flags & !IORING_MSG_RING_FLAGS_PASS != 0
        || (!pass && sqe.splice_fd_in != 0)
    {
        return err(Errno::EINVAL);
    }
    target.post(
        abi::io_uring::Cqe {
            user_data: sqe.off,
            res: sqe.len as i32,
            flags: if pass { sqe.splice_fd_in as u32 } else { 0 },
        },
        false,
        true,
    );
    done(0)
}

/// TIMEOUT: completes with ETIME when its time passes (a success for the link chain with
/// `IORING_TIMEOUT_ETIME_SUCCESS`), or with 0 once `off` other completions were posted;
/// `IORING_TIMEOUT_MULTISHOT` fires every period (`off` times, or for ever when 0).
fn timeout(t: &mut Task, ring: &Ring, sqe: &Sqe) -> Outcome {
    let ts = match read_timeout(t, sqe.addr) {
        Ok(ts) => ts,
        Err(e) => return err(e),
    };
    let at = deadline(ts, sqe.op_flags);
    let multishot = sqe.op_flags & IORING_TIMEOUT_MULTISHOT != 0;
    let wait = if sqe.off != 0 && !multishot {
        Wait::Count(ring.completions().saturating_add(sqe.off))
    } else {
        Wait::Never
    };
    Outcome::Timer(wait, at)
}

/// TIMEOUT_REMOVE: cancels the timeout whose user data is `addr` (ENOENT if none waits), or
/// gives it (`IORING_TIMEOUT_UPDATE`) or a linked timeout (`IORING_LINK_TIMEOUT_UPDATE`) the
/// time at `off`.
fn timeout_remove(t: &Task, ring: &Ring, sqe: &Sqe) -> Outcome {
    let target = sqe.addr;
    let fl = sqe.op_flags;
    if fl & (IORING_TIMEOUT_UPDATE | IORING_LINK_TIMEOUT_UPDATE) == 0 {
        let is_timeout = move |s: &Sqe| s.opcode == op::TIMEOUT && s.user_data == target;
        return Outcome::Cancel {
            matches: Box::new(is_timeout),
            all: false,
        };
    }
    let ts = match read_timeout(t, sqe.off) {
        Ok(ts) => ts,
        Err(e) => return err(e),
    };
    let link = fl & IORING_LINK_TIMEOUT_UPDATE != 0;
    let mut pending = ring.lock_pending();
    let found = pending.iter_mut().find(|p| {
        let i = usize::from(link);
        p.chain.get(i).is_some_and(|s| {
            s.user_data == target && s.opcode == if link { op::LINK_TIMEOUT } else { op::TIMEOUT }
        }) && (!link || p.deadline.is_some())
    });
    match found {
        Some(p) => {
            p.deadline = Some(deadline(ts, fl));
            drop(pending);
            ring.notify();
            done(0)
        }
        None => err(Errno::ENOENT),
    }
}

/// ASYNC_CANCEL: cancels the waiting request(s) matching the user data `addr` (or the
/// descriptor `fd` with `IORING_ASYNC_CANCEL_FD`, the opcode `len` with
/// `IORING_ASYNC_CANCEL_OP`, any with `IORING_ASYNC_CANCEL_ANY`); 0 (or the count with
/// `IORING_ASYNC_CANCEL_ALL` or `ANY`), ENOENT if none waits. Requests never run in the
/// background in torpor, so none is ever EALREADY.
fn async_cancel(sqe: &Sqe) -> Outcome {
    let fl = sqe.op_flags;
    let any = fl & IORING_ASYNC_CANCEL_ANY != 0;
    let by_fd = fl & IORING_ASYNC_CANCEL_FD != 0;
    let by_op = fl & IORING_ASYNC_CANCEL_OP != 0;
    let by_data = fl & IORING_ASYNC_CANCEL_USERDATA != 0 || !(any || by_fd || by_op);
    let fixed = fl & IORING_ASYNC_CANCEL_FD_FIXED != 0;
    let (fd, opcode, data) = (sqe.fd, sqe.len, sqe.addr);
    let matches = move |s: &Sqe| {
        any || ((!by_fd || (s.fd == fd && (s.flags & IOSQE_FIXED_FILE != 0) == fixed))
            && (!by_op || u32::from(s.opcode) == opcode)
            && (!by_data || s.user_data == data))
    };
    let all = any || fl & IORING_ASYNC_CANCEL_ALL != 0;
    Outcome::Cancel {
        matches: Box::new(matches),
        all,
    }
}
