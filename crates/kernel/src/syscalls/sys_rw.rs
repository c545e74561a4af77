//! read, write, readv, writev, pread64, pwrite64, lseek: zero-copy between host fds and guest
//! memory.

use abi::Errno;
use platform::Gva;

use super::{SysResult, SyscallArgs};
use crate::fd::{self, host, FileKind};
use crate::task::Task;

use super::iovec::{copy_in_iovecs, MAX_RW};

fn check_rw(t: &Task, fd: i32) -> Result<std::sync::Arc<crate::fd::OpenFile>, Errno> {
    let f = t.fds.get(fd)?;
    check_file(&f)?;
    Ok(f)
}

/// What read(2) and write(2) refuse of any open file: a directory (EISDIR).
pub(super) fn check_file(f: &crate::fd::OpenFile) -> Result<(), Errno> {
    if matches!(f.kind, FileKind::Directory) {
        return Err(Errno::EISDIR);
    }
    Ok(())
}

/// Reads from `fd` into user memory `buf..buf+len`.
pub fn read_to_user(t: &mut Task, fd: i32, buf: Gva, len: u64, offset: Option<i64>) -> SysResult {
    read_to_user_flags(t, fd, buf, len, offset, 0)
}

/// [`read_to_user`] with preadv2(2)'s `RWF_*` flags, which reach a host file's read (the
/// runtime's own kinds of file take none).
pub(super) fn read_to_user_flags(
    t: &mut Task,
    fd: i32,
    buf: Gva,
    len: u64,
    offset: Option<i64>,
    flags: fd::RwFlags,
) -> SysResult {
    let f = check_rw(t, fd)?;
    read_file_to_user(t, &f, buf, len, offset, flags)
}

/// [`read_to_user_flags`] of an open file (one the caller checked with [`check_file`]).
pub(super) fn read_file_to_user(
    t: &mut Task,
    f: &std::sync::Arc<crate::fd::OpenFile>,
    buf: Gva,
    len: u64,
    offset: Option<i64>,
    flags: fd::RwFlags,
) -> SysResult {
    if let FileKind::Signalfd(s) = &f.kind {
        if offset.is_some() {
            return Err(Errno::ESPIPE);
        }
        return super::sys_signalfd::read(t, f, s, buf, len);
    }
    if let FileKind::Mqueue(m) = &f.kind {
        let bytes = m.read(len, offset)?;
        t.copy_out(buf, &bytes)?;
        return Ok(bytes.len() as u64);
    }
    let len = len.min(MAX_RW);
    let runs = t.user_ranges(buf, len, true)?;
    fd::read_into_guest_flags(&t.mem, f.host(), &runs, offset, flags)
}

/// Writes user memory `buf..buf+len` to `fd`.
pub fn write_from_user(
    t: &mut Task,
    fd: i32,
    buf: Gva,
    len: u64,
    offset: Option<i64>,
) -> SysResult {
    write_from_user_flags(t, fd, buf, len, offset, 0)
}

/// [`write_from_user`] with pwritev2(2)'s `RWF_*` flags (as [`read_to_user_flags`]); with
/// RWF_NOWAIT a blocking stream's short write is not completed.
pub(super) fn write_from_user_flags(
    t: &mut Task,
    fd: i32,
    buf: Gva,
    len: u64,
    offset: Option<i64>,
    flags: fd::RwFlags,
) -> SysResult {
    let f = check_rw(t, fd)?;
    write_file_from_user(t, &f, buf, len, offset, flags)
}

/// [`write_from_user_flags`] to an open file (one the caller checked with [`check_file`]).
pub(super) fn write_file_from_user(
    t: &mut Task,
    f: &std::sync::Arc<crate::fd::OpenFile>,
    buf: Gva,
    len: u64,
    offset: Option<i64>,
    flags: fd::RwFlags,
) -> SysResult {
    if let FileKind::Mqueue(m) = &f.kind {
        // Linux's queue file has no write: EINVAL, after the access check.
        return Err(if m.access.write {
            Errno::EINVAL
        } else {
            Errno::EBADF
        });
    }
    if matches!(f.kind, FileKind::ProcFile) {
        return write_proc_file(t, f, &[(buf, len)]);
    }
    let len = within_file_size_limit(t, f, offset, len.min(MAX_RW))?;
    let runs = t.user_ranges(buf, len, false)?;
    let mut done = fd::write_from_guest_flags(&t.mem, f.host(), &runs, offset, flags)?;
    // Linux's blocking write to a pipe, socket or terminal returns early only for a signal:
    // the host's returns early for the runtime's own kicks too (another thread's munmap, a
    // park), so the rest is written unless the task has a signal or a park waiting.
    let nowait = flags & abi::aio::RWF_NOWAIT as i32 != 0;
    if done == 0 || done >= len || nowait || !blocking_stream(f) {
        return Ok(done);
    }
    while done < len && !interrupted(t) {
        let rest = skip_runs(&runs, done);
        let at = offset.map(|o| o + done as i64);
        match fd::write_from_guest_flags(&t.mem, f.host(), &rest, at, flags) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e == Errno::EINTR || e == Errno::EAGAIN => continue,
            // An error after some bytes went: the count, as Linux returns it.
            Err(_) => break,
        }
    }
    Ok(done)
}

/// Most bytes one write to a /proc file may carry (a tunable's value is a few numbers).
const PROC_WRITE_MAX: u64 = platform::PAGE_SIZE;

/// A write of the guest buffers `iov` to `f`, a file of the runtime's /proc: to a tunable or
/// a thread's `comm` opened for writing, gathered (at most [`PROC_WRITE_MAX`] bytes, EINVAL
/// past it) and written as its new value ([`crate::fs::procfs::write`]); EBADF for the rest.
fn write_proc_file(t: &mut Task, f: &crate::fd::OpenFile, iov: &[(Gva, u64)]) -> SysResult {
    let total = iov
        .iter()
        .try_fold(0u64, |n, &(_, len)| n.checked_add(len))
        .ok_or(Errno::EINVAL)?;
    if total > PROC_WRITE_MAX {
        return Err(Errno::EINVAL);
    }
    let mut data = Vec::with_capacity(total as usize);
    for &(base, len) in iov {
        let mut part = vec![0u8; len as usize];
        t.copy_in(base, &mut part)?;
        data.extend_from_slice(&part);
    }
    crate::fs::procfs::write(t, f, &data)?;
    Ok(total)
}

/// splice(2) from a pipe into a file of /proc (a tunable, a thread's name): the bytes taken
/// from the pipe are written as one write(2) would write them.
fn splice_to_proc_file(
    t: &mut Task,
    a: &SyscallArgs,
    inp: &crate::fd::OpenFile,
    out: &crate::fd::OpenFile,
) -> SysResult {
    if a.u(3) != 0 {
        // An offset on the output: /proc's files are written whole.
        return Err(Errno::ESPIPE);
    }
    // Only a file opened for writing takes bytes (EBADF before the pipe is touched).
    if !crate::fs::procfs::opened_for_writing(out) {
        return Err(Errno::EBADF);
    }
    let len = a.len(4)?.min(PROC_WRITE_MAX) as usize;
    let mut data = vec![0u8; len];
    let n = fd::host::read(inp.host(), &mut data)?;
    crate::fs::procfs::write(t, out, &data[..n])?;
    Ok(n as u64)
}

/// The caller's RLIMIT_FSIZE soft limit (`INFINITY` when unlimited).
fn file_size_limit(t: &Task) -> Result<u64, Errno> {
    Ok(t.group
        .rlimits
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(libc::RLIMIT_FSIZE)?
        .cur)
}

/// EFBIG, with the SIGXFSZ Linux sends the caller with it.
fn file_too_big(t: &mut Task) -> Errno {
    t.queue_signal(crate::task::signal::SigInfo::kernel(libc::SIGXFSZ));
    Errno::EFBIG
}

/// Whether a regular file of `size` bytes may grow to `new_size` under RLIMIT_FSIZE, as
/// Linux's `inode_newsize_ok`: growing past the soft limit is `EFBIG` with a SIGXFSZ for the
/// caller (shrinking, or staying within it, is fine). For truncate, ftruncate and fallocate.
pub(super) fn new_size_allowed(t: &mut Task, size: u64, new_size: u64) -> Result<(), Errno> {
    if new_size <= size {
        return Ok(());
    }
    let limit = file_size_limit(t)?;
    if limit != crate::task::rlimit::INFINITY && new_size > limit {
        return Err(file_too_big(t));
    }
    Ok(())
}

/// `len` cut to what `RLIMIT_FSIZE` lets a write (write, pwrite, writev, pwritev) to the
/// regular file `f` at `offset` (its
/// own offset when `None`, its end with `O_APPEND`) carry, as Linux's
/// `generic_write_check_limits`: a write that starts at or beyond the limit gets SIGXFSZ and
/// EFBIG.
///
/// # Errors
/// EFBIG; the host's errno reading the file's offset or size.
fn within_file_size_limit(
    t: &mut Task,
    f: &crate::fd::OpenFile,
    offset: Option<i64>,
    len: u64,
) -> Result<u64, Errno> {
    let limit = file_size_limit(t)?;
    if limit == crate::task::rlimit::INFINITY || len == 0 {
        return Ok(len);
    }
    let host = f.host();
    let st = host::fstat(host)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Ok(len);
    }
    let pos = match offset {
        Some(o) => o as u64,
        None if host::status_flags(host)? & libc::O_APPEND != 0 => st.st_size as u64,
        None => host::seek(host, 0, libc::SEEK_CUR)?,
    };
    if pos >= limit {
        return Err(file_too_big(t));
    }
    Ok(len.min(limit - pos))
}

/// Whether `f` is a pipe, socket or character device open in blocking mode.
fn blocking_stream(f: &crate::fd::OpenFile) -> bool {
    let host = f.host();
    match host::status_flags(host) {
        Ok(fl) if fl & libc::O_NONBLOCK == 0 => {}
        _ => return false,
    }
    host::fstat(host).is_ok_and(|st| {
        matches!(
            st.st_mode & libc::S_IFMT,
            libc::S_IFIFO | libc::S_IFSOCK | libc::S_IFCHR
        )
    })
}

/// Whether the task has a signal to take or a park request: a blocking call returns then.
pub(super) fn interrupted(t: &Task) -> bool {
    t.control.signal_pending() || t.control.park_requested() || t.signals.has_deliverable()
}

/// `runs` without their first `skip` bytes.
pub(super) fn skip_runs(runs: &[(platform::Gpa, u64)], mut skip: u64) -> Vec<(platform::Gpa, u64)> {
    let mut out = Vec::with_capacity(runs.len());
    for &(gpa, len) in runs {
        if skip >= len {
            skip -= len;
            continue;
        }
        out.push((platform::Gpa(gpa.0 + skip), len - skip));
        skip = 0;
    }
    out
}

/// The first `take` bytes of `runs`.
pub(super) fn take_runs(runs: &[(platform::Gpa, u64)], mut take: u64) -> Vec<(platform::Gpa, u64)> {
    let mut out = Vec::with_capacity(runs.len());
    for &(gpa, len) in runs {
        if take == 0 {
            break;
        }
        out.push((gpa, len.min(take)));
        take -= len.min(take);
    }
    out
}

/// Implements read(2).
pub fn sys_read(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let r = read_to_user(t, a.int(0), a.gva(1), a.len(2)?, None);
    if r.is_ok_and(|n| n > 0) {
        crate::fd::owner::read(t, a.int(0));
    }
    r
}

/// Implements write(2). A write to a socket or pipe whose reader is gone ends the process with
/// SIGPIPE (default disposition), as on Linux.
pub fn sys_write(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let r = write_from_user(t, a.int(0), a.gva(1), a.len(2)?, None);
    super::sys_socket::maybe_sigpipe(t, 0, &r);
    if r.is_ok_and(|n| n > 0) {
        crate::fd::owner::wrote(t, a.int(0));
    }
    r
}

fn offset(a: &SyscallArgs, i: usize) -> Result<i64, Errno> {
    let o = a.u(i) as i64;
    if o < 0 {
        Err(Errno::EINVAL)
    } else {
        Ok(o)
    }
}

/// Implements pread64(2).
pub fn sys_pread64(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let off = offset(a, 3)?;
    read_to_user(t, a.int(0), a.gva(1), a.len(2)?, Some(off))
}

/// Implements pwrite64(2).
pub fn sys_pwrite64(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let off = offset(a, 3)?;
    write_from_user(t, a.int(0), a.gva(1), a.len(2)?, Some(off))
}

fn vectored(t: &mut Task, a: &SyscallArgs, write: bool) -> SysResult {
    vectored_at(t, a, write, None)
}

/// readv/writev, at `offset` for preadv/pwritev (the file position is not used nor moved).
fn vectored_at(t: &mut Task, a: &SyscallArgs, write: bool, offset: Option<i64>) -> SysResult {
    vectored_io(t, a.int(0), a.gva(1), a.u(2), write, offset, 0)
}

/// readv/writev of `fd` through the `count` iovecs at `iov`, at `offset` (the file position
/// when None), with preadv2(2)'s `RWF_*` flags.
pub(super) fn vectored_io(
    t: &mut Task,
    fd: i32,
    iov: Gva,
    count: u64,
    write: bool,
    offset: Option<i64>,
    flags: fd::RwFlags,
) -> SysResult {
    let f = check_rw(t, fd)?;
    check_vectored(&f, offset)?;
    let iov = copy_in_iovecs(t, iov, count)?;
    vectored_file_io(t, &f, &iov, write, offset, flags)
}

/// What readv(2) and writev(2) refuse of an open file before they read the iovecs: an offset
/// on a socket or signalfd (ESPIPE), a message queue (EINVAL).
pub(super) fn check_vectored(f: &crate::fd::OpenFile, offset: Option<i64>) -> Result<(), Errno> {
    if offset.is_some() && (f.is_socket() || matches!(f.kind, FileKind::Signalfd(_))) {
        return Err(Errno::ESPIPE);
    }
    if matches!(f.kind, FileKind::Mqueue(_)) {
        // The queue's status line is for read(2) (the host eventfd is not the guest's).
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// [`vectored_io`] of an open file (checked with [`check_file`] and [`check_vectored`])
/// through the iovecs `iov`, already read.
pub(super) fn vectored_file_io(
    t: &mut Task,
    f: &std::sync::Arc<crate::fd::OpenFile>,
    iov: &[(Gva, u64)],
    write: bool,
    offset: Option<i64>,
    flags: fd::RwFlags,
) -> SysResult {
    if write && matches!(f.kind, FileKind::ProcFile) {
        return write_proc_file(t, f, iov);
    }
    let mut runs = Vec::new();
    for &(base, len) in iov {
        if len > 0 {
            runs.extend(t.user_ranges(base, len, !write)?);
        }
    }
    if write {
        let total = runs.iter().map(|r| r.1).sum::<u64>();
        let allowed = within_file_size_limit(t, f, offset, total)?;
        if allowed < total {
            runs = take_runs(&runs, allowed);
        }
        fd::write_from_guest_flags(&t.mem, f.host(), &runs, offset, flags)
    } else {
        fd::read_into_guest_flags(&t.mem, f.host(), &runs, offset, flags)
    }
}

/// The offset argument of preadv/pwritev (one 64-bit register on x86-64): EINVAL if negative.
fn vector_offset(a: &SyscallArgs) -> Result<Option<i64>, Errno> {
    let off = a.u(3) as i64;
    if off < 0 {
        return Err(Errno::EINVAL);
    }
    Ok(Some(off))
}

/// Implements preadv(2).
pub fn sys_preadv(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let off = vector_offset(a)?;
    vectored_at(t, a, false, off)
}

/// Implements pwritev(2).
pub fn sys_pwritev(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let off = vector_offset(a)?;
    vectored_at(t, a, true, off)
}

/// The offset of preadv2/pwritev2: -1 is the file position (None). Their flags are hints
/// (RWF_HIPRI, RWF_NOWAIT…) honoured as none; unknown ones are EOPNOTSUPP.
fn vector2_offset(a: &SyscallArgs) -> Result<Option<i64>, Errno> {
    if a.u(5) & !0x1f != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    if a.u(3) as i64 == -1 {
        Ok(None)
    } else {
        vector_offset(a)
    }
}

/// Implements preadv2(2) (see [`vector2_offset`]).
pub fn sys_preadv2(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let off = vector2_offset(a)?;
    vectored_at(t, a, false, off)
}

/// Implements pwritev2(2) (as preadv2).
pub fn sys_pwritev2(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let off = vector2_offset(a)?;
    let r = vectored_at(t, a, true, off);
    super::sys_socket::maybe_sigpipe(t, 0, &r);
    r
}

/// Implements readv(2).
pub fn sys_readv(t: &mut Task, a: &SyscallArgs) -> SysResult {
    vectored(t, a, false)
}

/// Implements writev(2) (SIGPIPE as write(2)).
pub fn sys_writev(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let r = vectored(t, a, true);
    super::sys_socket::maybe_sigpipe(t, 0, &r);
    if r.is_ok_and(|n| n > 0) {
        crate::fd::owner::wrote(t, a.int(0));
    }
    r
}

/// Implements lseek(2).
pub fn sys_lseek(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    if f.is_socket() {
        return Err(Errno::ESPIPE);
    }
    let whence = a.int(2);
    if !matches!(
        whence,
        libc::SEEK_SET | libc::SEEK_CUR | libc::SEEK_END | libc::SEEK_DATA | libc::SEEK_HOLE
    ) {
        return Err(Errno::EINVAL);
    }
    host::seek(f.host(), a.u(1) as i64, whence)
}

/// Implements sendfile(2) between two host fds.
pub fn sys_sendfile(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let out = check_rw(t, a.int(0))?;
    let inp = check_rw(t, a.int(1))?;
    let count = a.len(3)?.min(MAX_RW) as usize;
    let off_ptr = a.gva(2);
    let mut off = get_off(t, off_ptr)?;
    if off.is_some_and(|o| o < 0) {
        return Err(Errno::EINVAL);
    }
    let n = host::sendfile(out.host(), inp.host(), &mut off, count)?;
    put_off(t, off_ptr, off)?;
    Ok(n as u64)
}

/// Implements ftruncate(2).
pub fn sys_ftruncate(t: &mut Task, a: &SyscallArgs) -> SysResult {
    // A directory is EINVAL here, as for any descriptor not open for writing (the host says so).
    let f = t.fds.get(a.int(0))?;
    let len = a.u(1) as i64;
    if len < 0 {
        return Err(Errno::EINVAL);
    }
    let st = host::fstat(f.host())?;
    if st.st_mode & libc::S_IFMT == libc::S_IFREG {
        new_size_allowed(t, st.st_size as u64, len as u64)?;
    }
    host::truncate(f.host(), len)?;
    Ok(0)
}

/// Implements fadvise64(2): the advice goes to the host file (ESPIPE for a pipe or socket).
pub fn sys_fadvise64(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    host::fadvise(f.host(), a.u(1) as i64, a.u(2) as i64, a.int(3))?;
    Ok(0)
}

/// Implements readahead(2) on the host file (the guest's files are the host's).
pub fn sys_readahead(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    host::readahead(f.host(), a.u(1) as i64, a.u(2) as usize)?;
    Ok(0)
}

/// Implements sync_file_range(2) on the host file.
pub fn sys_sync_file_range(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    let (off, n, flags) = (a.u(1) as i64, a.u(2) as i64, a.u(3) as u32);
    if off < 0 || n < 0 || flags & !7 != 0 {
        return Err(Errno::EINVAL);
    }
    host::sync_range(f.host(), off, n, flags)?;
    Ok(0)
}

/// Implements fsync(2) and fdatasync(2).
pub fn sys_fsync(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    // Sockets and pipes: the host says EINVAL, as Linux does.
    host::fsync(f.host())?;
    Ok(0)
}

/// Reads the optional `loff_t *` argument of copy_file_range and splice: None for NULL.
fn get_off(t: &Task, p: Gva) -> Result<Option<i64>, Errno> {
    if p.raw() == 0 {
        return Ok(None);
    }
    Ok(Some(t.read_u64(p)? as i64))
}

/// Writes an offset back to its `loff_t *` argument, if there was one.
fn put_off(t: &Task, p: Gva, off: Option<i64>) -> Result<(), Errno> {
    match off {
        Some(o) => t.write_u64(p, o as u64),
        None => Ok(()),
    }
}

/// splice(2) and copy_file_range(2): the guest's offset words (null: the file position) are
/// read, handed to `call` on the two host files, and written back.
fn transfer(
    t: &mut Task,
    a: &SyscallArgs,
    inp: &crate::fd::OpenFile,
    out: &crate::fd::OpenFile,
    call: host::Transfer,
) -> SysResult {
    let (pin, pout) = (a.gva(1), a.gva(3));
    let mut off_in = get_off(t, pin)?;
    let mut off_out = get_off(t, pout)?;
    let len = a.len(4)?.min(MAX_RW) as usize;
    let n = host::transfer(
        call,
        inp.host(),
        &mut off_in,
        out.host(),
        &mut off_out,
        len,
        a.u(5) as u32,
    )?;
    put_off(t, pin, off_in)?;
    put_off(t, pout, off_out)?;
    Ok(n as u64)
}

/// Implements copy_file_range(2) between the two host files (the host checks the kinds, the
/// offsets, the flags and the overlap, and answers as Linux).
pub fn sys_copy_file_range(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let inp = t.fds.get(a.int(0))?;
    let out = t.fds.get(a.int(2))?;
    transfer(t, a, &inp, &out, host::Transfer::CopyFileRange)
}

/// Implements splice(2) between the two host files (one of them a pipe, as on Linux: the
/// host checks it).
pub fn sys_splice(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let inp = t.fds.get(a.int(0))?;
    let out = t.fds.get(a.int(2))?;
    // A directory is never open for writing (EBADF, Linux's FMODE_WRITE check) and has no
    // splice_read (EINVAL).
    if matches!(out.kind, FileKind::Directory) {
        return Err(Errno::EBADF);
    }
    if matches!(inp.kind, FileKind::Directory) {
        return Err(Errno::EINVAL);
    }
    if matches!(out.kind, FileKind::ProcFile) {
        return splice_to_proc_file(t, a, &inp, &out);
    }
    transfer(t, a, &inp, &out, host::Transfer::Splice)
}

/// Implements tee(2) between two host pipes.
pub fn sys_tee(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let inp = check_rw(t, a.int(0))?;
    let out = check_rw(t, a.int(1))?;
    let len = a.len(2)?.min(MAX_RW) as usize;
    let n = host::tee(inp.host(), out.host(), len, a.u(3) as u32)?;
    Ok(n as u64)
}
