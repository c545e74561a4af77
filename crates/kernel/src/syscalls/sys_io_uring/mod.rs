//! io_uring_setup, io_uring_enter, io_uring_register, and the mmap(2) of an io_uring
//! descriptor: Linux's io_uring over [`crate::io_uring`] instances.
//!
//! Requests run inside io_uring_enter(2), in the calling task's context: a request is the
//! system call it names, made by the caller through the syscall table (its descriptors,
//! memory, root, working directory and credentials: a path is resolved in the caller's root,
//! chroot included, exactly as the call would resolve it). One that would block on a stream
//! waits instead, and runs in a later io_uring_enter(2) of the same process (the wait for
//! completions, usually); so does a poll, a timeout, or a request behind an
//! `IOSQE_IO_DRAIN`. Completions are therefore only ever posted during an io_uring_enter(2)
//! (or a MSG_RING from another ring's). `IORING_SETUP_SQPOLL` rings are accepted: their
//! polling "thread" never runs on its own (`IORING_SQ_NEED_WAKEUP` stays set, as for a
//! thread asleep), so every io_uring_enter(2) submits what is queued, which is what an
//! application following the protocol (liburing's) does.
//!
//! Not supported (EINVAL at setup, as a kernel without them): `IORING_SETUP_IOPOLL` (and
//! `HYBRID_IOPOLL`), `NO_MMAP` (and `REGISTERED_FD_ONLY`), `R_DISABLED`, `CQE_MIXED`;
//! registered personalities, rings, wait regions, provided buffers and restrictions
//! (EINVAL from io_uring_register); the opcodes [`ops`] lists as unsupported (EOPNOTSUPP in
//! their completion, and absent from IORING_REGISTER_PROBE). Requests that name their file
//! by number for a system call (send, connect, fallocate...) do not take registered files.

mod exec;
mod ops;

use std::sync::Arc;
use std::time::{Duration, Instant};

use abi::io_uring::{
    op, FilesUpdate, GeteventsArg, IoUringParams, ProbeHeader, ProbeOp, IORING_ENTER_ABS_TIMER,
    IORING_ENTER_EXT_ARG, IORING_ENTER_EXT_ARG_REG, IORING_ENTER_GETEVENTS, IORING_ENTER_KNOWN,
    IORING_ENTER_REGISTERED_RING, IORING_FEAT_CQE_SKIP, IORING_FEAT_CUR_PERSONALITY,
    IORING_FEAT_EXT_ARG, IORING_FEAT_FAST_POLL, IORING_FEAT_LINKED_FILE,
    IORING_FEAT_NATIVE_WORKERS, IORING_FEAT_NODROP, IORING_FEAT_NO_IOWAIT, IORING_FEAT_POLL_32BITS,
    IORING_FEAT_RW_CUR_POS, IORING_FEAT_SINGLE_MMAP, IORING_FEAT_SQPOLL_NONFIXED,
    IORING_FEAT_SUBMIT_STABLE, IORING_MAX_BUFFER_LEN, IORING_MAX_FIXED_FILES,
    IORING_MAX_REG_BUFFERS, IORING_OFF_CQ_RING, IORING_OFF_MMAP_MASK, IORING_OFF_SQES,
    IORING_OFF_SQ_RING, IORING_REGISTER_BUFFERS, IORING_REGISTER_ENABLE_RINGS,
    IORING_REGISTER_EVENTFD, IORING_REGISTER_EVENTFD_ASYNC, IORING_REGISTER_FILES,
    IORING_REGISTER_FILES_UPDATE, IORING_REGISTER_IOWQ_AFF, IORING_REGISTER_IOWQ_MAX_WORKERS,
    IORING_REGISTER_PROBE, IORING_REGISTER_RESTRICTIONS, IORING_REGISTER_USE_REGISTERED_RING,
    IORING_SETUP_ATTACH_WQ, IORING_SETUP_COOP_TASKRUN, IORING_SETUP_CQE32, IORING_SETUP_CQE_MIXED,
    IORING_SETUP_DEFER_TASKRUN, IORING_SETUP_HYBRID_IOPOLL, IORING_SETUP_IOPOLL,
    IORING_SETUP_KNOWN, IORING_SETUP_NO_MMAP, IORING_SETUP_REGISTERED_FD_ONLY,
    IORING_SETUP_R_DISABLED, IORING_SETUP_SINGLE_ISSUER, IORING_SETUP_SQPOLL, IORING_SETUP_SQ_AFF,
    IORING_SETUP_TASKRUN_FLAG, IORING_SQ_NEED_WAKEUP, IORING_UNREGISTER_BUFFERS,
    IORING_UNREGISTER_EVENTFD, IORING_UNREGISTER_FILES, IORING_UNREGISTER_IOWQ_AFF,
    IO_URING_OP_SUPPORTED,
};
use abi::structs::{IoVec, Timespec};
use abi::Errno;
use mm::VmaKind;
use platform::Gva;

use super::{SysResult, SyscallArgs};
use crate::fd::{FileKind, OpenFile, Ring};
use crate::io_uring::layout::Geometry;
use crate::io_uring::{IoUring, RingError};
use crate::task::Task;

impl From<RingError> for Errno {
    fn from(e: RingError) -> Errno {
        match e {
            RingError::Fault => Errno::EFAULT,
            RingError::Host(e) => e,
        }
    }
}

/// What io_uring_setup(2) answers in `features`.
const FEATURES: u32 = IORING_FEAT_SINGLE_MMAP
    | IORING_FEAT_NODROP
    | IORING_FEAT_SUBMIT_STABLE
    | IORING_FEAT_RW_CUR_POS
    | IORING_FEAT_CUR_PERSONALITY
    | IORING_FEAT_FAST_POLL
    | IORING_FEAT_POLL_32BITS
    | IORING_FEAT_SQPOLL_NONFIXED
    | IORING_FEAT_EXT_ARG
    | IORING_FEAT_NATIVE_WORKERS
    | IORING_FEAT_CQE_SKIP
    | IORING_FEAT_LINKED_FILE
    | IORING_FEAT_NO_IOWAIT;

/// The setup flags torpor does not implement (EINVAL, as a kernel that does not know them).
const UNSUPPORTED_SETUP: u32 = IORING_SETUP_IOPOLL
    | IORING_SETUP_HYBRID_IOPOLL
    | IORING_SETUP_NO_MMAP
    | IORING_SETUP_REGISTERED_FD_ONLY
    | IORING_SETUP_R_DISABLED
    | IORING_SETUP_CQE_MIXED;

/// One past Linux 6.18's last register command (`IORING_REGISTER_LAST`).
const REGISTER_LAST: u32 = 36;
/// The size of `struct io_uring_getevents_arg`.
const GETEVENTS_ARG_SIZE: u64 = std::mem::size_of::<GeteventsArg>() as u64;
/// How long a wait for completions sleeps at most before it looks again (another thread's
/// completion also wakes it at once, through the ring's wake eventfd).
const BACKSTOP: Duration = Duration::from_millis(100);
/// `IORING_REGISTER_FILES_SKIP`: a files update leaves the slot as it is.
const FILES_SKIP: i32 = -2;
/// `IORING_FILE_INDEX_ALLOC`.
const FILE_INDEX_ALLOC: u32 = !0;

/// What Linux's `io_uring_sanitise_params` refuses, then what torpor does not implement.
fn check_setup_flags(flags: u32) -> Result<(), Errno> {
    let has = |f: u32| flags & f != 0;
    let bad = has(!IORING_SETUP_KNOWN)
        || (has(IORING_SETUP_REGISTERED_FD_ONLY) && !has(IORING_SETUP_NO_MMAP))
        || (has(IORING_SETUP_SQPOLL)
            && has(IORING_SETUP_COOP_TASKRUN
                | IORING_SETUP_TASKRUN_FLAG
                | IORING_SETUP_DEFER_TASKRUN))
        || (has(IORING_SETUP_TASKRUN_FLAG)
            && !has(IORING_SETUP_COOP_TASKRUN | IORING_SETUP_DEFER_TASKRUN))
        || (has(IORING_SETUP_HYBRID_IOPOLL) && !has(IORING_SETUP_IOPOLL))
        || (has(IORING_SETUP_DEFER_TASKRUN) && !has(IORING_SETUP_SINGLE_ISSUER))
        || (has(IORING_SETUP_CQE32) && has(IORING_SETUP_CQE_MIXED))
        || has(UNSUPPORTED_SETUP);
    if bad {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// The CPUs the sandbox shows (`IORING_SETUP_SQ_AFF` names one of them).
fn cpus() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// Implements io_uring_setup(2): checks `*params` as Linux (EFAULT, EINVAL for reserved
/// fields, unknown or conflicting flags, bad sizes), makes the instance, its rings (host
/// memory of the sandbox, mapped from the descriptor) and answers in `*params` (sizes,
/// features, ring offsets); the descriptor is close-on-exec, as Linux's.
pub fn sys_io_uring_setup(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let entries = a.u(0) as u32;
    let at = a.gva(1);
    let mut p: IoUringParams = t.read_val(at)?;
    if p.resv.iter().any(|&r| r != 0) {
        return Err(Errno::EINVAL);
    }
    check_setup_flags(p.flags)?;
    let geometry = Geometry::new(entries, &p).map_err(|_| Errno::EINVAL)?;
    let sqpoll = p.flags & IORING_SETUP_SQPOLL != 0;
    if p.flags & IORING_SETUP_ATTACH_WQ != 0 {
        let w = t.fds.get(p.wq_fd as i32).map_err(|_| Errno::ENXIO)?;
        match &w.kind {
            FileKind::IoUring(r) if !sqpoll || r.flags & IORING_SETUP_SQPOLL != 0 => {}
            _ => return Err(Errno::EINVAL),
        }
    }
    if p.flags & IORING_SETUP_SQ_AFF != 0 && (!sqpoll || p.sq_thread_cpu >= cpus()) {
        return Err(Errno::EINVAL);
    }
    let sq_flags = if sqpoll { IORING_SQ_NEED_WAKEUP } else { 0 };
    let (ring, ep) = IoUring::create(&t.group.procs.shm, p.flags, geometry, t.tid, sq_flags)?;
    {
        let mut reg = ring.lock_registered();
        reg.max_workers = [geometry.sq_entries.min(4 * cpus()), 65536];
    }
    p.sq_entries = geometry.sq_entries;
    p.cq_entries = geometry.cq_entries;
    p.features = FEATURES;
    p.sq_off = geometry.sq_offsets();
    p.cq_off = geometry.cq_offsets();
    t.write_val(at, &p)?;
    let file = OpenFile::new(ep, FileKind::IoUring(Arc::new(ring)), None);
    Ok(t.fds.insert(Arc::new(file), true)? as u64)
}

/// The instance behind descriptor `fd` (EBADF, EOPNOTSUPP for another kind of file).
fn ring_of(t: &Task, fd: i32) -> Result<Arc<Ring>, Errno> {
    match &t.fds.get(fd)?.kind {
        FileKind::IoUring(r) => Ok(r.clone()),
        _ => Err(Errno::EOPNOTSUPP),
    }
}

/// Implements io_uring_enter(2): submits up to `to_submit` queued entries (all of them on
/// an SQPOLL ring, whose answer is `to_submit`), runs the pending requests that can run,
/// and with IORING_ENTER_GETEVENTS waits for `min_complete` completions (the signal mask
/// and timeout of `argp`). The number of entries consumed, or the wait's error if none
/// were; a submission cut short returns without waiting, as on Linux.
pub fn sys_io_uring_enter(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let fd = a.u(0) as u32 as i32;
    let (to_submit, min_complete, flags) = (a.u(1) as u32, a.u(2) as u32, a.u(3) as u32);
    if flags & !IORING_ENTER_KNOWN != 0 {
        return Err(Errno::EINVAL);
    }
    if flags & IORING_ENTER_REGISTERED_RING != 0 {
        // No ring descriptor is ever registered.
        return Err(Errno::EBADF);
    }
    let ring = ring_of(t, fd)?;
    ring.enter();
    exec::reap_orphans(t, &ring);
    let mut ret = 0u64;
    if ring.flags & IORING_SETUP_SQPOLL != 0 {
        exec::submit(t, &ring, u32::MAX)?;
        ret = u64::from(to_submit);
    } else if to_submit > 0 {
        if ring.flags & IORING_SETUP_SINGLE_ISSUER != 0 && t.tid != ring.creator {
            return Err(Errno::EEXIST);
        }
        let n = exec::submit(t, &ring, to_submit)?;
        if n != to_submit {
            return Ok(u64::from(n));
        }
        ret = u64::from(n);
    }
    // Pending requests that can run now (an interrupted poll is looked at again below or
    // in the next call).
    let _ = exec::progress(t, &ring, None);
    if flags & IORING_ENTER_GETEVENTS != 0 {
        let waited = wait(t, &ring, min_complete, flags, a.gva(4), a.u(5));
        if ret == 0 {
            waited?;
        }
    }
    Ok(ret)
}

/// Whether a wait must end: a signal to take, the process ending.
fn interrupted(t: &mut Task) -> bool {
    t.absorb_external_signal();
    t.exit.is_some() || t.group.must_leave(t.tid) || t.signals.has_deliverable()
}

/// The wait of IORING_ENTER_GETEVENTS (Linux's `io_cqring_wait`): for `min_complete`
/// completions (at most the queue's size), running the pending requests as they become
/// ready. The argument is the signal mask (and its size), or with IORING_ENTER_EXT_ARG a
/// `struct io_uring_getevents_arg` (mask, size, timeout; EINVAL for another size). The
/// mask is read and put in place only if the call must wait, as on Linux. ETIME when the
/// timeout passes, EINTR for a signal, EBADR once after completions were lost; none of
/// them if completions wait. A hibernation parks the task inside the wait, which then goes
/// on (the timeout's clock included).
fn wait(
    t: &mut Task,
    ring: &Arc<Ring>,
    min_complete: u32,
    flags: u32,
    argp: Gva,
    argsz: u64,
) -> Result<(), Errno> {
    let (sig, sigsz, ts) = if flags & IORING_ENTER_EXT_ARG != 0 {
        if flags & IORING_ENTER_EXT_ARG_REG != 0 || argsz != GETEVENTS_ARG_SIZE {
            return Err(Errno::EINVAL);
        }
        let arg: GeteventsArg = t.read_val(argp)?;
        let ts = match arg.ts {
            0 => None,
            at => Some(t.read_val::<Timespec>(Gva(at))?),
        };
        (Gva(arg.sigmask), u64::from(arg.sigmask_sz), ts)
    } else {
        (argp, argsz, None)
    };
    let min = min_complete.min(ring.geometry.cq_entries);
    if ring.available(false).0 >= min {
        return Ok(());
    }
    let deadline = ts.map(|ts| {
        let ns = i128::from(ts.sec) * 1_000_000_000 + i128::from(ts.nsec);
        let d = Duration::from_nanos(u64::try_from(ns.max(0)).unwrap_or(u64::MAX));
        let abs = if flags & IORING_ENTER_ABS_TIMER != 0 {
            abi::io_uring::IORING_TIMEOUT_ABS
        } else {
            0
        };
        ops::deadline(d, abs)
    });
    let mask = super::sys_poll::read_sigmask(t, sig, sigsz)?;
    super::sys_poll::with_sigmask(t, mask, |t| loop {
        let (n, lost) = ring.available(true);
        let none = |e: Errno| if n > 0 { Ok(0) } else { Err(e) };
        if n >= min {
            return Ok(0);
        }
        if lost {
            return none(Errno::EBADR);
        }
        // A park (hibernation) happens inside the wait, which goes on after it: the call
        // may have submitted entries already, and must not return before its completions.
        if t.control.park_requested() && !t.park_in_call() {
            return none(Errno::EINTR);
        }
        if interrupted(t) {
            return none(Errno::EINTR);
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| d <= now) {
            return none(Errno::ETIME);
        }
        let until = deadline.map_or(now + BACKSTOP, |d| d.min(now + BACKSTOP));
        match exec::progress(t, ring, Some(until)) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    })
    .map(|_| ())
}

/// Implements io_uring_register(2): fixed buffers and files (and their updates), the
/// completion eventfd, the opcode probe, the async workers' affinity and limits (accepted:
/// torpor has no async workers). EINVAL for the rest.
pub fn sys_io_uring_register(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let fd = a.u(0) as u32 as i32;
    let opcode = a.u(1) as u32;
    let (arg, nr) = (a.gva(2), a.u(3) as u32);
    let registered_ring = opcode & IORING_REGISTER_USE_REGISTERED_RING != 0;
    let opcode = opcode & !IORING_REGISTER_USE_REGISTERED_RING;
    if opcode >= REGISTER_LAST || fd == -1 {
        return Err(Errno::EINVAL);
    }
    if registered_ring {
        return Err(Errno::EBADF);
    }
    let ring = ring_of(t, fd)?;
    let none = |arg: Gva, nr: u32| {
        if arg.raw() != 0 || nr != 0 {
            Err(Errno::EINVAL)
        } else {
            Ok(())
        }
    };
    match opcode {
        IORING_REGISTER_BUFFERS => register_buffers(t, &ring, arg, nr),
        IORING_UNREGISTER_BUFFERS => {
            none(arg, nr)?;
            let mut reg = ring.lock_registered();
            if reg.buffers.is_empty() {
                return Err(Errno::ENXIO);
            }
            reg.buffers.clear();
            Ok(0)
        }
        IORING_REGISTER_FILES => register_files(t, &ring, arg, nr),
        IORING_UNREGISTER_FILES => {
            none(arg, nr)?;
            ring.lock_registered()
                .files
                .take()
                .map(|_| 0)
                .ok_or(Errno::ENXIO)
        }
        IORING_REGISTER_FILES_UPDATE => {
            if nr == 0 {
                return Err(Errno::EINVAL);
            }
            let up: FilesUpdate = t.read_val(arg)?;
            if up.resv != 0 {
                return Err(Errno::EINVAL);
            }
            files_update(t, &ring, up.offset, Gva(up.fds), nr)
        }
        IORING_REGISTER_EVENTFD | IORING_REGISTER_EVENTFD_ASYNC => {
            if nr != 1 {
                return Err(Errno::EINVAL);
            }
            if ring.lock_registered().eventfd.is_some() {
                return Err(Errno::EBUSY);
            }
            let efd: i32 = t.read_val(arg)?;
            let f = t.fds.get(efd)?;
            if !matches!(f.kind, FileKind::EventFd { .. }) {
                return Err(Errno::EINVAL);
            }
            let mut reg = ring.lock_registered();
            if reg.eventfd.is_some() {
                return Err(Errno::EBUSY);
            }
            let dup = f.owned().try_clone().map_err(Errno::from)?;
            reg.eventfd = Some((Arc::new(dup), opcode == IORING_REGISTER_EVENTFD_ASYNC));
            Ok(0)
        }
        IORING_UNREGISTER_EVENTFD => {
            none(arg, nr)?;
            ring.lock_registered()
                .eventfd
                .take()
                .map(|_| 0)
                .ok_or(Errno::ENXIO)
        }
        IORING_REGISTER_PROBE => probe(t, arg, nr),
        // The ring is never disabled.
        IORING_REGISTER_RESTRICTIONS | IORING_REGISTER_ENABLE_RINGS => Err(Errno::EBADFD),
        IORING_REGISTER_IOWQ_AFF => {
            if arg.raw() == 0 || nr == 0 {
                return Err(Errno::EINVAL);
            }
            let mut mask = vec![0u8; (nr as usize).min(1024)];
            t.copy_in(arg, &mut mask)?;
            Ok(0)
        }
        IORING_UNREGISTER_IOWQ_AFF => {
            none(arg, nr)?;
            Ok(0)
        }
        IORING_REGISTER_IOWQ_MAX_WORKERS => {
            if arg.raw() == 0 || nr != 2 {
                return Err(Errno::EINVAL);
            }
            let new: [u32; 2] = [t.read_val(arg)?, t.read_val(arg.add(4))?];
            if new.iter().any(|&n| n > i32::MAX as u32) {
                return Err(Errno::EINVAL);
            }
            let old = {
                let mut reg = ring.lock_registered();
                let old = reg.max_workers;
                for (cur, n) in reg.max_workers.iter_mut().zip(new) {
                    if n != 0 {
                        *cur = n;
                    }
                }
                old
            };
            t.copy_out(arg, &[old[0].to_le_bytes(), old[1].to_le_bytes()].concat())?;
            Ok(0)
        }
        _ => Err(Errno::EINVAL),
    }
}

/// IORING_REGISTER_BUFFERS: `nr` iovecs at `arg`, each a buffer whose pages must be mapped
/// and writable (Linux pins them); a NULL base with length 0 is an empty slot. EBUSY if
/// buffers are registered; EINVAL for none or too many; EFAULT for a buffer of more than 1
/// GiB, of zero length, or not mapped; ENOMEM past RLIMIT_MEMLOCK without CAP_IPC_LOCK.
fn register_buffers(t: &mut Task, ring: &Ring, arg: Gva, nr: u32) -> SysResult {
    if arg.raw() == 0 {
        return Err(Errno::EFAULT);
    }
    if !ring.lock_registered().buffers.is_empty() {
        return Err(Errno::EBUSY);
    }
    if nr == 0 || nr > IORING_MAX_REG_BUFFERS {
        return Err(Errno::EINVAL);
    }
    // Without CAP_IPC_LOCK the pinned pages count against RLIMIT_MEMLOCK (Linux counts them
    // per user, across rings; here per ring).
    let memlock = if t.creds.capable(crate::creds::cap::IPC_LOCK) {
        u64::MAX
    } else {
        t.group
            .rlimits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(libc::RLIMIT_MEMLOCK)
            .map_or(0, |l| l.cur)
    };
    let mut pinned = 0u64;
    let mut bufs = Vec::with_capacity(nr as usize);
    for i in 0..u64::from(nr) {
        let at = arg.checked_add(16 * i).ok_or(Errno::EFAULT)?;
        let iov: IoVec = t.read_val(at)?;
        if iov.len > isize::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        if iov.base == 0 {
            if iov.len != 0 {
                return Err(Errno::EFAULT);
            }
            bufs.push(None);
            continue;
        }
        if iov.len == 0 || iov.len > IORING_MAX_BUFFER_LEN {
            return Err(Errno::EFAULT);
        }
        let Some(end) = iov.base.checked_add(iov.len) else {
            return Err(Errno::EOVERFLOW);
        };
        let page = platform::PAGE_SIZE;
        pinned += end.div_ceil(page) * page - iov.base / page * page;
        if pinned > memlock {
            return Err(Errno::ENOMEM);
        }
        t.user_ranges(Gva(iov.base), iov.len, true)
            .map_err(|_| Errno::EFAULT)?;
        bufs.push(Some((iov.base, iov.len)));
    }
    let mut reg = ring.lock_registered();
    if !reg.buffers.is_empty() {
        return Err(Errno::EBUSY);
    }
    reg.buffers = bufs;
    Ok(0)
}

/// IORING_REGISTER_FILES: `nr` descriptors at `arg` (-1: an empty slot). EBUSY if files are
/// registered; EINVAL for none; EMFILE past the limits; EBADF for a bad descriptor or an
/// io_uring one.
fn register_files(t: &mut Task, ring: &Ring, arg: Gva, nr: u32) -> SysResult {
    if arg.raw() == 0 {
        return Err(Errno::EFAULT);
    }
    if ring.lock_registered().files.is_some() {
        return Err(Errno::EBUSY);
    }
    if nr == 0 {
        return Err(Errno::EINVAL);
    }
    if nr > IORING_MAX_FIXED_FILES || nr as usize > t.fds.limit() {
        return Err(Errno::EMFILE);
    }
    let mut files = Vec::with_capacity(nr as usize);
    for i in 0..u64::from(nr) {
        let fd: i32 = t.read_val(arg.checked_add(4 * i).ok_or(Errno::EFAULT)?)?;
        if fd == -1 {
            files.push(None);
            continue;
        }
        let f = t.fds.get(fd)?;
        if matches!(f.kind, FileKind::IoUring(_)) {
            return Err(Errno::EBADF);
        }
        files.push(Some(f));
    }
    let mut reg = ring.lock_registered();
    if reg.files.is_some() {
        return Err(Errno::EBUSY);
    }
    reg.files = Some(files);
    Ok(0)
}

/// Replaces registered files from slot `offset` with the `nr` descriptors at `fds` (-1
/// empties a slot, -2 skips it), as IORING_REGISTER_FILES_UPDATE and IORING_OP_FILES_UPDATE;
/// with `IORING_FILE_INDEX_ALLOC` each goes to a free slot, whose index is written back.
/// The number of descriptors done, or the first error if none was.
fn files_update(t: &mut Task, ring: &Ring, offset: u32, fds: Gva, nr: u32) -> SysResult {
    let mut done = 0u32;
    let mut failure = None;
    if ring.lock_registered().files.is_none() {
        return Err(Errno::ENXIO);
    }
    if offset != FILE_INDEX_ALLOC {
        let len = ring.lock_registered().files.as_ref().map_or(0, Vec::len);
        if u64::from(offset) + u64::from(nr) > len as u64 {
            return Err(Errno::EINVAL);
        }
    }
    while done < nr {
        let at = fds.checked_add(4 * u64::from(done)).ok_or(Errno::EFAULT);
        let r = at.and_then(|at| {
            let fd: i32 = t.read_val(at)?;
            if offset == FILE_INDEX_ALLOC {
                let f = t.fds.get(fd)?;
                let slot = install_fixed(ring, f, FILE_INDEX_ALLOC)?;
                return t.write_val(at, &(slot as i32));
            }
            if fd == FILES_SKIP {
                return Ok(());
            }
            let new = match fd {
                -1 => None,
                fd => {
                    let f = t.fds.get(fd)?;
                    if matches!(f.kind, FileKind::IoUring(_)) {
                        return Err(Errno::EBADF);
                    }
                    Some(f)
                }
            };
            let mut reg = ring.lock_registered();
            if let Some(slot) = reg
                .files
                .as_mut()
                .and_then(|f| f.get_mut((offset + done) as usize))
            {
                *slot = new;
            }
            Ok(())
        });
        if let Err(e) = r {
            failure = Some(e);
            break;
        }
        done += 1;
    }
    match failure {
        Some(e) if done == 0 => Err(e),
        _ => Ok(u64::from(done)),
    }
}

/// Puts `file` in registered slot `slot - 1`, or with `IORING_FILE_INDEX_ALLOC` the first
/// free one (its index is the result; ENFILE when none is free). ENXIO without registered
/// files, EINVAL past their end, EBADF for an io_uring file.
fn install_fixed(ring: &Ring, file: Arc<OpenFile>, slot: u32) -> SysResult {
    if matches!(file.kind, FileKind::IoUring(_)) {
        return Err(Errno::EBADF);
    }
    let mut reg = ring.lock_registered();
    let files = reg.files.as_mut().ok_or(Errno::ENXIO)?;
    if slot == FILE_INDEX_ALLOC {
        let i = files
            .iter()
            .position(Option::is_none)
            .ok_or(Errno::ENFILE)?;
        files[i] = Some(file);
        return Ok(i as u64);
    }
    let entry = files.get_mut(slot as usize - 1).ok_or(Errno::EINVAL)?;
    *entry = Some(file);
    Ok(0)
}

/// IORING_REGISTER_PROBE: fills the `struct io_uring_probe` at `arg` (with room for `nr`
/// opcodes, at most 256; it must be zeroed: EINVAL otherwise) with the last opcode Linux 6.18
/// knows and, for each opcode, whether torpor runs it.
fn probe(t: &mut Task, arg: Gva, nr: u32) -> SysResult {
    if arg.raw() == 0 || nr > 256 {
        return Err(Errno::EINVAL);
    }
    let head = std::mem::size_of::<ProbeHeader>();
    let one = std::mem::size_of::<ProbeOp>();
    let mut bytes = vec![0u8; head + one * nr as usize];
    t.copy_in(arg, &mut bytes)?;
    if bytes.iter().any(|&b| b != 0) {
        return Err(Errno::EINVAL);
    }
    let n = nr.min(u32::from(op::LAST)) as u8;
    let header = ProbeHeader {
        last_op: op::LAST - 1,
        ops_len: n,
        ..ProbeHeader::default()
    };
    bytes[..head].copy_from_slice(abi::pod::as_bytes(&header));
    for i in 0..n {
        let o = ProbeOp {
            op: i,
            flags: if ops::supported(i) {
                IO_URING_OP_SUPPORTED
            } else {
                0
            },
            ..ProbeOp::default()
        };
        let at = head + one * usize::from(i);
        bytes[at..at + one].copy_from_slice(abi::pod::as_bytes(&o));
    }
    t.copy_out(arg, &bytes)?;
    Ok(0)
}

/// The mapping mmap(2) makes of an io_uring descriptor at offset `off`: the rings for
/// `IORING_OFF_SQ_RING` and `IORING_OFF_CQ_RING`, the submission entries for
/// `IORING_OFF_SQES` (the offset's low bits are ignored, as Linux does); shared whatever the
/// flags. EINVAL for an address (Linux picks the address itself, MAP_FIXED or not), ENOMEM
/// for another offset (Linux's `io_uring_get_unmapped_area` answers so).
pub(super) fn mapping(ring: &Ring, addr: Gva, off: u64) -> Result<VmaKind, Errno> {
    if addr.raw() != 0 {
        return Err(Errno::EINVAL);
    }
    let object = match off & IORING_OFF_MMAP_MASK {
        IORING_OFF_SQ_RING | IORING_OFF_CQ_RING => ring.rings.clone(),
        IORING_OFF_SQES => ring.sqes.clone(),
        _ => return Err(Errno::ENOMEM),
    };
    Ok(VmaKind::Shared {
        object,
        offset: 0,
        may_write: true,
    })
}

/// What `/proc/PID/maps` names an io_uring mapping, as on Linux.
pub(super) const MAPPING_NAME: &str = "anon_inode:[io_uring]";
