//! Zero-copy I/O between host fds and guest memory: the guest buffer is translated to
//! guest-physical runs and handed to `readv`/`writev`/`preadv`/`pwritev` as host iovecs.

use std::os::fd::{AsRawFd, BorrowedFd};

use abi::Errno;
use platform::{Gpa, GuestMemory};

/// Most iovecs handed to one host call (IOV_MAX).
const IOV_MAX: usize = 1024;

/// Host iovecs for guest-physical runs (at most IOV_MAX of them), each bounds-checked.
///
/// # Errors
/// EFAULT if a run leaves guest memory.
pub fn iovecs(mem: &GuestMemory, runs: &[(Gpa, u64)]) -> Result<Vec<libc::iovec>, Errno> {
    runs.iter()
        .take(IOV_MAX)
        .map(|&(gpa, len)| {
            let p = mem.host_ptr(gpa, len).map_err(|_| Errno::EFAULT)?;
            Ok(libc::iovec {
                iov_base: p.cast(),
                iov_len: len as usize,
            })
        })
        .collect()
}

/// Which way data moves.
#[derive(Clone, Copy)]
enum Direction {
    IntoGuest,
    FromGuest,
}

/// `RWF_*` flags of a transfer (0: a plain readv/writev or preadv/pwritev).
pub type RwFlags = i32;

fn transfer(
    mem: &GuestMemory,
    fd: BorrowedFd<'_>,
    runs: &[(Gpa, u64)],
    offset: Option<i64>,
    dir: Direction,
    flags: RwFlags,
) -> Result<u64, Errno> {
    if runs.is_empty() {
        return Ok(0);
    }
    let iov = iovecs(mem, runs)?;
    let (fd, cnt) = (fd.as_raw_fd(), iov.len() as i32);
    // preadv2/pwritev2 take the file position as offset -1.
    let at = offset.unwrap_or(-1);
    // SAFETY: every iovec points into guest memory, bounds-checked by `host_ptr`; the host
    // kernel writes (reads) at most their lengths.
    let n = unsafe {
        match (dir, offset) {
            (Direction::IntoGuest, _) if flags != 0 => {
                libc::preadv2(fd, iov.as_ptr(), cnt, at, flags)
            }
            (Direction::FromGuest, _) if flags != 0 => {
                libc::pwritev2(fd, iov.as_ptr(), cnt, at, flags)
            }
            (Direction::IntoGuest, Some(off)) => libc::preadv(fd, iov.as_ptr(), cnt, off),
            (Direction::IntoGuest, None) => libc::readv(fd, iov.as_ptr(), cnt),
            (Direction::FromGuest, Some(off)) => libc::pwritev(fd, iov.as_ptr(), cnt, off),
            (Direction::FromGuest, None) => libc::writev(fd, iov.as_ptr(), cnt),
        }
    };
    if n < 0 {
        Err(Errno::last())
    } else {
        Ok(n as u64)
    }
}

/// Reads from `fd` into the guest-physical `runs` (at `offset`, or the file position).
///
/// # Errors
/// The host's errno.
pub fn read_into_guest(
    mem: &GuestMemory,
    fd: BorrowedFd<'_>,
    runs: &[(Gpa, u64)],
    offset: Option<i64>,
) -> Result<u64, Errno> {
    transfer(mem, fd, runs, offset, Direction::IntoGuest, 0)
}

/// [`read_into_guest`] with `RWF_*` `flags` (preadv2(2)'s; RWF_NOWAIT: EAGAIN rather than
/// block).
///
/// # Errors
/// The host's errno (EOPNOTSUPP for flags the file does not take).
pub fn read_into_guest_flags(
    mem: &GuestMemory,
    fd: BorrowedFd<'_>,
    runs: &[(Gpa, u64)],
    offset: Option<i64>,
    flags: RwFlags,
) -> Result<u64, Errno> {
    transfer(mem, fd, runs, offset, Direction::IntoGuest, flags)
}

/// Writes the guest-physical `runs` to `fd` (at `offset`, or the file position).
///
/// # Errors
/// The host's errno.
pub fn write_from_guest(
    mem: &GuestMemory,
    fd: BorrowedFd<'_>,
    runs: &[(Gpa, u64)],
    offset: Option<i64>,
) -> Result<u64, Errno> {
    transfer(mem, fd, runs, offset, Direction::FromGuest, 0)
}

/// [`write_from_guest`] with `RWF_*` `flags` (pwritev2(2)'s).
///
/// # Errors
/// The host's errno (EOPNOTSUPP for flags the file does not take).
pub fn write_from_guest_flags(
    mem: &GuestMemory,
    fd: BorrowedFd<'_>,
    runs: &[(Gpa, u64)],
    offset: Option<i64>,
    flags: RwFlags,
) -> Result<u64, Errno> {
    transfer(mem, fd, runs, offset, Direction::FromGuest, flags)
}
