//! pipe, pipe2: host pipes.

use std::sync::Arc;

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::fd::{FileKind, OpenFile};
use crate::task::Task;

fn make_pipe(t: &mut Task, a: &SyscallArgs, flags: i32) -> SysResult {
    if flags & !(libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_DIRECT) != 0 {
        return Err(Errno::EINVAL);
    }
    // The host's close-on-exec is always on (the guest's lives in the fd table).
    let (r, w) = crate::fd::host::pipe(flags & !libc::O_CLOEXEC)?;
    let cloexec = flags & libc::O_CLOEXEC != 0;
    let rfd = t
        .fds
        .insert(Arc::new(OpenFile::new(r, FileKind::Pipe, None)), cloexec)?;
    let wfd = match t
        .fds
        .insert(Arc::new(OpenFile::new(w, FileKind::Pipe, None)), cloexec)
    {
        Ok(fd) => fd,
        Err(e) => {
            let _ = t.fds.remove(rfd);
            return Err(e);
        }
    };
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&rfd.to_le_bytes());
    out[4..].copy_from_slice(&wfd.to_le_bytes());
    if let Err(e) = t.copy_out(a.gva(0), &out) {
        let _ = t.fds.remove(rfd);
        let _ = t.fds.remove(wfd);
        return Err(e);
    }
    Ok(0)
}

/// Implements pipe(2).
pub fn sys_pipe(t: &mut Task, a: &SyscallArgs) -> SysResult {
    make_pipe(t, a, 0)
}

/// Implements pipe2(2).
pub fn sys_pipe2(t: &mut Task, a: &SyscallArgs) -> SysResult {
    make_pipe(t, a, a.int(1))
}
