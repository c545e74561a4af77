//! vmsplice(2): user memory into a pipe, or a pipe's contents into user memory.
//!
//! The pipes are host pipes. Linux's vmsplice into a pipe waits for room (unless
//! non-blocking), then adds as much of the user's buffers as fits and returns that count;
//! here the guest's pages are copied by the host's write: one non-blocking write
//! (`RWF_NOWAIT`) takes what fits, and when nothing did a blocking write of one page's worth
//! waits for room first. The pages are copied rather than referenced, which
//! `SPLICE_F_GIFT` permits (a later change to the buffer does not reach the pipe's copy).
//! From a pipe it is a read into the guest's buffers.

use abi::Errno;

use super::iovec::copy_in_iovecs;
use super::sys_rw::{interrupted, skip_runs};
use super::{SysResult, SyscallArgs};
use crate::fd::{self, host};
use crate::task::Task;

/// `SPLICE_F_NONBLOCK`.
const SPLICE_F_NONBLOCK: u32 = 0x02;
/// `SPLICE_F_ALL`: MOVE, NONBLOCK, MORE, GIFT.
const SPLICE_F_ALL: u32 = 0x0f;
/// `PIPE_BUF`: a blocking write of at most this much waits for room for all of it.
const PIPE_BUF: u64 = 4096;
const NOWAIT: fd::RwFlags = abi::aio::RWF_NOWAIT as fd::RwFlags;

/// Implements vmsplice(2). EINVAL for unknown flags or too many iovecs; EBADF for a
/// descriptor not open, open for neither reading nor writing, or not a pipe (checked after
/// the iovecs, as Linux); an empty buffer is 0. The pipe end's open mode picks the
/// direction (written to if open for writing). Non-blocking with `SPLICE_F_NONBLOCK` or an
/// `O_NONBLOCK` pipe: EAGAIN then.
pub fn sys_vmsplice(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (fd, iov, count, flags) = (a.int(0), a.gva(1), a.u(2), a.u(3) as u32);
    if flags & !SPLICE_F_ALL != 0 {
        return Err(Errno::EINVAL);
    }
    let f = t.fds.get(fd)?;
    let status = host::status_flags(f.host())?;
    let to_pipe = match status & libc::O_ACCMODE {
        libc::O_WRONLY | libc::O_RDWR => true,
        libc::O_RDONLY => false,
        _ => return Err(Errno::EBADF),
    };
    let iov = copy_in_iovecs(t, iov, count)?;
    if iov.iter().all(|&(_, len)| len == 0) {
        return Ok(0);
    }
    let is_pipe = host::fstat(f.host()).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFIFO);
    if !is_pipe {
        return Err(Errno::EBADF);
    }
    let mut runs = Vec::new();
    for (base, len) in iov {
        if len > 0 {
            runs.extend(t.user_ranges(base, len, !to_pipe)?);
        }
    }
    let nonblock = flags & SPLICE_F_NONBLOCK != 0 || status & libc::O_NONBLOCK != 0;
    if !to_pipe {
        let how = if nonblock { NOWAIT } else { 0 };
        loop {
            match fd::read_into_guest_flags(&t.mem, f.host(), &runs, None, how) {
                Err(e) if e == Errno::EINTR && !interrupted(t) => continue,
                r => return r,
            }
        }
    }
    let r = loop {
        match fd::write_from_guest_flags(&t.mem, f.host(), &runs, None, NOWAIT) {
            Err(e) if e == Errno::EAGAIN && !nonblock => {}
            r => break r,
        }
        // Full: wait for room by writing the first page's worth (or less) blocking.
        let total: u64 = runs.iter().map(|r| r.1).sum();
        let first = super::sys_rw::take_runs(&runs, total.min(PIPE_BUF));
        match fd::write_from_guest_flags(&t.mem, f.host(), &first, None, 0) {
            Err(e) if e == Errno::EINTR && !interrupted(t) => continue,
            Err(e) => break Err(e),
            Ok(n) => {
                // Then whatever else fits.
                let rest = skip_runs(&runs, n);
                if n >= total || rest.is_empty() {
                    break Ok(n);
                }
                break Ok(
                    n + fd::write_from_guest_flags(&t.mem, f.host(), &rest, None, NOWAIT)
                        .unwrap_or(0),
                );
            }
        }
    };
    super::sys_socket::maybe_sigpipe(t, 0, &r);
    r
}
