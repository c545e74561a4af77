//! io_setup, io_destroy, io_submit, io_cancel, io_getevents, io_pgetevents: Linux native
//! AIO over the process's contexts and their completion rings ([`crate::aio`]).
//!
//! A request runs while io_submit(2) runs, through the calls read(2), write(2), readv(2),
//! writev(2) and fsync(2) use, so every kind of descriptor behaves as it does there
//! (`aio_offset` applies to regular files and block devices, streams ignore it, as Linux's
//! `read_iter` does); its completion goes to the ring before the call returns, and the
//! eventfd of `IOCB_FLAG_RESFD` is signalled. What Linux checks at submission fails the
//! submission (the iocb copy, `aio_reserved2`, the descriptor and its mode, the eventfd, the
//! `RWF_*` flags, the iovecs, the offset, the opcode); what the I/O itself returns, an
//! errno included, is the completion's `res`. Nothing is left in flight, so io_cancel(2) of
//! a submitted request is EINVAL, as Linux answers for one that completed.
//!
//! `IOCB_CMD_POLL` is EINVAL (as before Linux 4.18): torpor does not keep requests pending.

use std::time::{Duration, Instant};

use abi::aio::{
    AioSigset, IoEvent, Iocb, IOCB_CMD_FDSYNC, IOCB_CMD_FSYNC, IOCB_CMD_PREAD, IOCB_CMD_PREADV,
    IOCB_CMD_PWRITE, IOCB_CMD_PWRITEV, IOCB_FLAG_IOPRIO, IOCB_FLAG_RESFD, KIOCB_KEY, RWF_APPEND,
    RWF_NOAPPEND, RWF_SUPPORTED,
};
use abi::structs::Timespec;
use abi::Errno;
use mm::{MmapRequest, Prot, VmaKind};
use platform::Gva;

use super::iovec::{copy_in_iovecs, MAX_RW};
use super::{SysResult, SyscallArgs};
use crate::aio::{AioContexts, AioError, Context, RingGeometry, RingMemory, AIO_MAX_NR};
use crate::creds::cap;
use crate::fd::{host, FileKind, OpenFile};
use crate::task::Task;

impl From<AioError> for Errno {
    fn from(e: AioError) -> Errno {
        match e {
            AioError::TooLarge => Errno::EINVAL,
            AioError::NoRoom | AioError::RingFull => Errno::EAGAIN,
            AioError::Fault => Errno::EFAULT,
        }
    }
}

/// A ring in the calling process's memory, through its user copies.
struct UserRing<'a>(&'a Task);

impl RingMemory for UserRing<'_> {
    fn read(&self, at: Gva, buf: &mut [u8]) -> Result<(), AioError> {
        self.0.copy_in(at, buf).map_err(|_| AioError::Fault)
    }

    fn write(&self, at: Gva, buf: &[u8]) -> Result<(), AioError> {
        self.0.copy_out(at, buf).map_err(|_| AioError::Fault)
    }
}

/// What `/proc/PID/maps` calls a ring, as on Linux.
const RING_NAME: &str = "/[aio] (deleted)";
/// How often a waiting io_getevents checks whether it was interrupted.
const POLL: Duration = Duration::from_millis(10);
/// Bytes of one `struct io_event`.
const EVENT_LEN: u64 = std::mem::size_of::<IoEvent>() as u64;
/// Offset of `aio_key` in `struct iocb`.
const KEY_AT: u64 = 8;

/// The CPUs the sandbox shows (`/sys/devices/system/cpu/possible`): a ring has at least 4
/// slots per CPU, as on Linux.
fn cpus() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// Maps a ring of `len` bytes.
fn map_ring(t: &mut Task, len: u64) -> Result<Gva, Errno> {
    let req = MmapRequest {
        addr: Gva(0),
        len,
        prot: Prot::RW,
        fixed: false,
        fixed_noreplace: false,
        kind: VmaKind::Anon,
        name: Some(RING_NAME.into()),
    };
    t.mm_restrict(|mm| mm.mmap(req))
        .map_err(|e| Errno(e.errno()))
}

/// Unmaps a ring (whatever the application left there, as Linux's `vm_munmap` does).
fn unmap_ring(t: &mut Task, ring: Gva, len: u64) {
    if let Err(e) = t.mm_restrict(|mm| mm.munmap(ring, len)) {
        tracing::debug!("aio: unmapping the ring at {ring}: {e}");
    }
}

/// Implements io_setup(2): `*ctxp` must be 0; the ring is mapped and its address stored
/// there. The events asked for count against the sandbox's `aio-max-nr`.
pub fn sys_io_setup(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let nr_events = a.u(0) as u32;
    let ctxp = a.gva(1);
    if t.read_u64(ctxp)? != 0 || nr_events == 0 {
        return Err(Errno::EINVAL);
    }
    let geometry = RingGeometry::for_request(nr_events, cpus(), AIO_MAX_NR)?;
    let procs = t.group.procs.clone();
    procs.aio_nr.reserve(geometry.max_reqs)?;
    let ring = match map_ring(t, geometry.len) {
        Ok(r) => r,
        Err(e) => {
            procs.aio_nr.release(geometry.max_reqs);
            return Err(e);
        }
    };
    let group = t.group.clone();
    let mut table = group.aio.lock();
    let ctx = Context::new(AioContexts::free_index(&table), ring, geometry);
    let stored = t
        .write_val(ring, &ctx.initial_header())
        .and_then(|()| t.write_u64(ctxp, ring.raw()));
    if let Err(e) = stored {
        drop(table);
        unmap_ring(t, ring, geometry.len);
        procs.aio_nr.release(geometry.max_reqs);
        return Err(e);
    }
    table.insert(ring.raw(), ctx);
    Ok(0)
}

/// Implements io_destroy(2): the context goes, its ring is unmapped, and io_getevents calls
/// waiting on it return (EINVAL if they got nothing).
pub fn sys_io_destroy(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let group = t.group.clone();
    let ctx = group.aio.lock().remove(&a.u(0)).ok_or(Errno::EINVAL)?;
    group.aio.notify();
    t.group.procs.aio_nr.release(ctx.geometry.max_reqs);
    unmap_ring(t, ctx.ring, ctx.geometry.len);
    Ok(0)
}

/// Implements io_submit(2): submits the first `nr` of the iocbs `iocbpp` points to (at most
/// the ring's size), stopping at the first that fails. Returns how many were submitted, or
/// the first one's error.
pub fn sys_io_submit(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let nr = a.u(1) as i64;
    if nr < 0 {
        return Err(Errno::EINVAL);
    }
    let id = a.u(0);
    let slots = match t.group.aio.lock().get(&id) {
        Some(c) => i64::from(c.geometry.nr),
        None => return Err(Errno::EINVAL),
    };
    let iocbpp = a.gva(2);
    let mut done = 0u64;
    let mut failed = None;
    for i in 0..nr.min(slots) as u64 {
        let at = iocbpp
            .raw()
            .checked_add(i * 8)
            .ok_or(Errno::EFAULT)
            .and_then(|p| t.read_u64(Gva(p)));
        let r = at.and_then(|user| submit_one(t, id, Gva(user)));
        match r {
            Ok(()) => done += 1,
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    match failed {
        Some(e) if done == 0 => Err(e),
        _ => Ok(done),
    }
}

/// One request: a ring slot, the checks, the I/O, the completion.
fn submit_one(t: &mut Task, id: u64, user: Gva) -> Result<(), Errno> {
    let cb: Iocb = t.read_val(user)?;
    if cb.reserved2 != 0 || (cb.nbytes as i64) < 0 {
        return Err(Errno::EINVAL);
    }
    let group = t.group.clone();
    {
        let mut table = group.aio.lock();
        let c = table.get_mut(&id).ok_or(Errno::EINVAL)?;
        c.reserve(&UserRing(t))?;
    }
    let outcome = match run(t, user, &cb) {
        // A park (not a signal) broke a blocking transfer: the call stops here and runs
        // again once the task is unparked.
        Ok((Err(Errno::EINTR), _)) if t.control.park_requested() => Err(Errno::EINTR),
        other => other,
    };
    let mut table = group.aio.lock();
    let Some(c) = table.get_mut(&id) else {
        // Destroyed meanwhile: the completion has no ring to go to.
        return outcome.map(|_| ());
    };
    let (res, resfd) = match outcome {
        Ok(done) => done,
        Err(e) => {
            c.unreserve();
            return Err(e);
        }
    };
    let ev = IoEvent {
        data: cb.data,
        obj: user.raw(),
        res: match res {
            Ok(n) => n as i64,
            Err(e) => -i64::from(e.0),
        },
        res2: 0,
    };
    if let Err(e) = c.complete(&UserRing(t), &ev) {
        tracing::debug!("aio: completion of {user} lost: {e}");
    }
    drop(table);
    group.aio.notify();
    if let Some(efd) = resfd {
        host::eventfd_signal(efd.host());
    }
    Ok(())
}

/// The checks of submission and the I/O: the I/O's result (the completion's `res`) and the
/// eventfd to signal, or the submission's error.
type Ran = (SysResult, Option<std::sync::Arc<OpenFile>>);

fn run(t: &mut Task, user: Gva, cb: &Iocb) -> Result<Ran, Errno> {
    let f = t.fds.get(cb.fildes as i32)?;
    let resfd = if cb.flags & IOCB_FLAG_RESFD != 0 {
        let e = t.fds.get(cb.resfd as i32)?;
        if !matches!(e.kind, FileKind::EventFd { .. }) {
            return Err(Errno::EINVAL);
        }
        Some(e)
    } else {
        None
    };
    t.write_u32(user.add(KEY_AT), KIOCB_KEY)?;
    let res = match cb.opcode {
        IOCB_CMD_PREAD => transfer(t, &f, cb, false, false)?,
        IOCB_CMD_PWRITE => transfer(t, &f, cb, true, false)?,
        IOCB_CMD_PREADV => transfer(t, &f, cb, false, true)?,
        IOCB_CMD_PWRITEV => transfer(t, &f, cb, true, true)?,
        IOCB_CMD_FSYNC | IOCB_CMD_FDSYNC => sync(&f, cb)?,
        _ => return Err(Errno::EINVAL),
    };
    Ok((res, resfd))
}

/// Whether the description was opened for reading (`write`: writing), Linux's
/// `FMODE_READ` / `FMODE_WRITE`.
fn open_for(f: &OpenFile, write: bool) -> bool {
    if let FileKind::Mqueue(m) = &f.kind {
        return if write { m.access.write } else { m.access.read };
    }
    let Ok(fl) = host::status_flags(f.host()) else {
        return false;
    };
    if fl & libc::O_PATH != 0 {
        return false;
    }
    match fl & libc::O_ACCMODE {
        libc::O_RDWR => true,
        libc::O_WRONLY => write,
        _ => !write,
    }
}

/// Whether Linux's file of this kind has `read_iter` (`write`: `write_iter`), without which
/// AIO is EINVAL.
fn has_iter(kind: &FileKind, write: bool) -> bool {
    match kind {
        FileKind::Directory
        | FileKind::TimerFd
        | FileKind::Inotify
        | FileKind::Epoll
        | FileKind::Pidfd(_)
        | FileKind::Mqueue(_) => false,
        FileKind::EventFd { .. } | FileKind::Signalfd(_) => !write,
        _ => true,
    }
}

/// Whether `aio_offset` applies: a regular file or block device (streams have no position
/// a read at an offset could use; Linux's `read_iter` of a pipe ignores it).
pub(super) fn positional(f: &OpenFile) -> bool {
    host::fstat(f.host())
        .is_ok_and(|st| matches!(st.st_mode & libc::S_IFMT, libc::S_IFREG | libc::S_IFBLK))
}

/// `aio_reqprio` with IOCB_FLAG_IOPRIO, checked as Linux's `ioprio_check_cap`: the
/// real-time class needs CAP_SYS_ADMIN or CAP_SYS_NICE, an unknown class is EINVAL.
pub(super) fn check_ioprio(t: &Task, prio: i16) -> Result<(), Errno> {
    match (prio as u16) >> 13 {
        1 if !(t.creds.capable(cap::SYS_ADMIN) || t.creds.capable(cap::SYS_NICE)) => {
            Err(Errno::EPERM)
        }
        0..=3 => Ok(()),
        _ => Err(Errno::EINVAL),
    }
}

/// Whether `[addr, addr + len)` lies in the user half (Linux's `access_ok`).
pub(super) fn user_range(addr: Gva, len: u64) -> Result<(), Errno> {
    match addr.checked_add(len) {
        Some(end) if end <= platform::layout::USER_END => Ok(()),
        _ => Err(Errno::EFAULT),
    }
}

/// IOCB_CMD_PREAD(V) and PWRITE(V), as Linux's `aio_read` and `aio_write`.
fn transfer(
    t: &mut Task,
    f: &OpenFile,
    cb: &Iocb,
    write: bool,
    vectored: bool,
) -> Result<SysResult, Errno> {
    if cb.flags & IOCB_FLAG_IOPRIO != 0 {
        check_ioprio(t, cb.reqprio)?;
    }
    let rwf = cb.rw_flags;
    if rwf & !RWF_SUPPORTED != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    if rwf & RWF_APPEND != 0 && rwf & RWF_NOAPPEND != 0 {
        return Err(Errno::EINVAL);
    }
    if !open_for(f, write) {
        return Err(Errno::EBADF);
    }
    if !has_iter(&f.kind, write) {
        return Err(Errno::EINVAL);
    }
    let buf = Gva(cb.buf);
    let total = if vectored {
        let iov = copy_in_iovecs(t, buf, cb.nbytes)?;
        for &(base, len) in &iov {
            user_range(base, len)?;
        }
        iov.iter().map(|&(_, len)| len).sum::<u64>()
    } else {
        let len = cb.nbytes.min(MAX_RW);
        user_range(buf, len)?;
        len
    };
    if cb.offset < 0 || cb.offset.checked_add(total as i64).is_none() {
        return Err(Errno::EINVAL);
    }
    let offset = positional(f).then_some(cb.offset);
    let fd = cb.fildes as i32;
    let flags = rwf as crate::fd::RwFlags;
    let r = match (vectored, write) {
        (true, _) => super::sys_rw::vectored_io(t, fd, buf, cb.nbytes, write, offset, flags),
        (false, true) => super::sys_rw::write_from_user_flags(t, fd, buf, total, offset, flags),
        (false, false) => super::sys_rw::read_to_user_flags(t, fd, buf, total, offset, flags),
    };
    if write {
        super::sys_socket::maybe_sigpipe(t, 0, &r);
    }
    // Flags the file does not take (RWF_NOWAIT where the host cannot honour it) are the
    // submission's error, as Linux checks them at submission.
    if rwf != 0 && r == Err(Errno::EOPNOTSUPP) {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(r)
}

/// IOCB_CMD_FSYNC and FDSYNC, as Linux's `aio_fsync`: the other fields must be zero, and
/// the file must have an fsync (regular files, directories, block devices).
fn sync(f: &OpenFile, cb: &Iocb) -> Result<SysResult, Errno> {
    if cb.buf != 0 || cb.offset != 0 || cb.nbytes != 0 || cb.rw_flags != 0 {
        return Err(Errno::EINVAL);
    }
    let syncable = !matches!(f.kind, FileKind::ProcFile)
        && host::fstat(f.host()).is_ok_and(|st| {
            matches!(
                st.st_mode & libc::S_IFMT,
                libc::S_IFREG | libc::S_IFDIR | libc::S_IFBLK
            )
        });
    if !syncable {
        return Err(Errno::EINVAL);
    }
    Ok(host::fsync(f.host()).map(|()| 0))
}

/// Implements io_cancel(2). The iocb's `aio_key` is read first (EFAULT), and must be
/// [`KIOCB_KEY`]; no request is ever still in flight, so a valid context answers EINVAL,
/// as Linux does for a request that completed.
pub fn sys_io_cancel(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let key = a
        .gva(1)
        .checked_add(KEY_AT)
        .ok_or(Errno::EFAULT)
        .and_then(|at| t.read_val::<u32>(at))?;
    if key != KIOCB_KEY {
        return Err(Errno::EINVAL);
    }
    if !t.group.aio.lock().contains_key(&a.u(0)) {
        return Err(Errno::EINVAL);
    }
    Err(Errno::EINVAL)
}

/// How long io_getevents may wait.
#[derive(Clone, Copy)]
enum Wait {
    /// No timeout.
    Forever,
    /// Until then.
    Until(Instant),
    /// A zero or negative timeout: one look.
    Once,
}

/// Reads io_getevents' relative timeout (NULL: none). Linux does not check the fields: a
/// negative time is no wait, nanoseconds past a second add up.
fn read_timeout(t: &Task, at: Gva) -> Result<Wait, Errno> {
    if at.raw() == 0 {
        return Ok(Wait::Forever);
    }
    let ts: Timespec = t.read_val(at)?;
    let ns = i128::from(ts.sec) * 1_000_000_000 + i128::from(ts.nsec);
    if ns <= 0 {
        return Ok(Wait::Once);
    }
    let d = Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX));
    Ok(Instant::now()
        .checked_add(d)
        .map_or(Wait::Forever, Wait::Until))
}

/// Whether a waiting io_getevents must return: a signal to take, a park, the process
/// ending.
fn interrupted(t: &mut Task) -> bool {
    t.absorb_external_signal();
    t.exit.is_some()
        || t.group.must_leave(t.tid)
        || t.signals.has_deliverable()
        || t.control.park_requested()
}

/// Linux's `do_io_getevents`: between `min_nr` and `nr` completions into `events`, waiting
/// for `min_nr` as `wait` allows. Returns how many were stored; what was stored stays
/// stored when an interruption, the timeout or an io_destroy ends the wait.
fn get_events(
    t: &mut Task,
    id: u64,
    min_nr: i64,
    nr: i64,
    events: Gva,
    wait: Wait,
) -> Result<u64, Errno> {
    let group = t.group.clone();
    let mut table = group.aio.lock();
    if !table.contains_key(&id) || min_nr > nr || min_nr < 0 {
        return Err(Errno::EINVAL);
    }
    let (min_nr, nr) = (min_nr as u64, nr as u64);
    let mut got = 0u64;
    let partial = |got: u64, e: Errno| if got == 0 { Err(e) } else { Ok(got) };
    loop {
        let Some(c) = table.get(&id) else {
            return partial(got, Errno::EINVAL);
        };
        if got < nr {
            let ring = UserRing(t);
            let (evs, head) = match c.peek(&ring, nr - got) {
                Ok(p) => p,
                Err(e) => return partial(got, e.into()),
            };
            if !evs.is_empty() {
                let bytes: Vec<u8> = evs
                    .iter()
                    .flat_map(|e| abi::pod::as_bytes(e).iter().copied())
                    .collect();
                let stored = events
                    .checked_add(got * EVENT_LEN)
                    .ok_or(Errno::EFAULT)
                    .and_then(|at| t.copy_out(at, &bytes));
                if let Err(e) = stored {
                    return partial(got, e);
                }
                if let Err(e) = c.consume(&ring, head) {
                    return partial(got, e.into());
                }
                got += evs.len() as u64;
            }
        }
        if got >= min_nr {
            return Ok(got);
        }
        let slice = match wait {
            Wait::Once => return Ok(got),
            Wait::Until(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => left.min(POLL),
                _ => return Ok(got),
            },
            Wait::Forever => POLL,
        };
        if interrupted(t) {
            return Ok(got);
        }
        table = group.aio.wait(table, slice);
    }
}

/// Implements io_getevents(2). Nothing gathered and a signal to take is EINTR (never
/// restarted, as on Linux).
pub fn sys_io_getevents(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let wait = read_timeout(t, a.gva(4))?;
    let n = get_events(t, a.u(0), a.u(1) as i64, a.u(2) as i64, a.gva(3), wait)?;
    if n == 0 && interrupted(t) {
        return Err(Errno::EINTR);
    }
    Ok(n)
}

/// Implements io_pgetevents(2): io_getevents with the signal mask of `usig` (a
/// `struct __aio_sigset`: the mask's address, NULL for none, and its size) in place while it
/// waits, as ppoll does. The timeout and `usig` are read first (EFAULT), then the mask
/// (EINVAL for a size other than 8, EFAULT).
pub fn sys_io_pgetevents(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let wait = read_timeout(t, a.gva(4))?;
    let mask = if a.u(5) != 0 {
        let s: AioSigset = t.read_val(a.gva(5))?;
        super::sys_poll::read_sigmask(t, Gva(s.sigmask), s.sigsetsize)?
    } else {
        None
    };
    let (id, min_nr, nr, events) = (a.u(0), a.u(1) as i64, a.u(2) as i64, a.gva(3));
    super::sys_poll::with_sigmask(t, mask, |t| {
        let n = get_events(t, id, min_nr, nr, events, wait)?;
        if n == 0 && interrupted(t) {
            return Err(Errno::EINTR);
        }
        Ok(n)
    })
}
