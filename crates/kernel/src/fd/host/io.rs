//! Host calls that move a descriptor's position or its data between host descriptors, or
//! push its data to disk: seek, truncate, sendfile, splice, copy_file_range, tee, positional
//! reads, advice and syncs. Guest buffers never pass here (those go through `fd::hostio`).

use std::os::fd::{AsRawFd, BorrowedFd};

use abi::Errno;

use super::cvt;

fn cvt_size(r: isize) -> Result<usize, Errno> {
    usize::try_from(r).map_err(|_| Errno::last())
}

/// lseek(2) with `whence` (the caller checks it); the new position.
///
/// # Errors
/// The host's errno (ESPIPE for a pipe, EINVAL for a negative result).
pub fn seek(fd: BorrowedFd<'_>, offset: i64, whence: i32) -> Result<u64, Errno> {
    // SAFETY: integers only.
    let r = unsafe { libc::lseek(fd.as_raw_fd(), offset, whence) };
    u64::try_from(r).map_err(|_| Errno::last())
}

/// ftruncate(2).
///
/// # Errors
/// The host's errno (EINVAL for a descriptor not open for writing).
pub fn truncate(fd: BorrowedFd<'_>, len: i64) -> Result<(), Errno> {
    // SAFETY: integers only.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len) }).map(|_| ())
}

/// posix_fadvise(2).
///
/// # Errors
/// The host's answer (ESPIPE for a pipe or socket, EINVAL for bad advice).
pub fn fadvise(fd: BorrowedFd<'_>, offset: i64, len: i64, advice: i32) -> Result<(), Errno> {
    // SAFETY: integers only; posix_fadvise returns its error instead of setting errno.
    match unsafe { libc::posix_fadvise(fd.as_raw_fd(), offset, len, advice) } {
        0 => Ok(()),
        e => Err(Errno(e)),
    }
}

/// readahead(2) of `count` bytes at `offset` into the host's page cache.
///
/// # Errors
/// The host's errno (EBADF for a descriptor not open for reading, EINVAL for one whose file
/// cannot be read ahead).
pub fn readahead(fd: BorrowedFd<'_>, offset: i64, count: usize) -> Result<(), Errno> {
    // SAFETY: integers only.
    cvt_size(unsafe { libc::readahead(fd.as_raw_fd(), offset, count) }).map(|_| ())
}

/// sync_file_range(2) (the caller checks the flags).
///
/// # Errors
/// The host's errno.
pub fn sync_range(fd: BorrowedFd<'_>, offset: i64, len: i64, flags: u32) -> Result<(), Errno> {
    // SAFETY: integers only.
    cvt(unsafe { libc::sync_file_range(fd.as_raw_fd(), offset, len, flags) }).map(|_| ())
}

/// fsync(2).
///
/// # Errors
/// The host's errno (EINVAL for a pipe or socket, as on Linux).
pub fn fsync(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    // SAFETY: no memory is passed.
    cvt(unsafe { libc::fsync(fd.as_raw_fd()) }).map(|_| ())
}

fn offset_ptr(o: &mut Option<i64>) -> *mut i64 {
    match o {
        Some(v) => v,
        None => std::ptr::null_mut(),
    }
}

/// sendfile(2) of up to `count` bytes from `inp` to `out`, from `offset` (which moves) or
/// from `inp`'s position when None; the bytes sent.
///
/// # Errors
/// The host's errno.
pub fn sendfile(
    out: BorrowedFd<'_>,
    inp: BorrowedFd<'_>,
    offset: &mut Option<i64>,
    count: usize,
) -> Result<usize, Errno> {
    // SAFETY: the offset pointer is null or points at the caller's live value.
    cvt_size(unsafe { libc::sendfile(out.as_raw_fd(), inp.as_raw_fd(), offset_ptr(offset), count) })
}

/// Which call moves the data in [`transfer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transfer {
    /// splice(2): one side is a pipe.
    Splice,
    /// copy_file_range(2): two files.
    CopyFileRange,
}

/// splice(2) or copy_file_range(2) of up to `len` bytes from `inp` to `out`, each at its
/// offset (which moves) or at its position when None; the host checks the kinds, offsets,
/// flags and overlap and answers as Linux. The bytes moved.
///
/// # Errors
/// The host's errno.
pub fn transfer(
    call: Transfer,
    inp: BorrowedFd<'_>,
    off_in: &mut Option<i64>,
    out: BorrowedFd<'_>,
    off_out: &mut Option<i64>,
    len: usize,
    flags: u32,
) -> Result<usize, Errno> {
    let (i, o) = (inp.as_raw_fd(), out.as_raw_fd());
    let (pi, po) = (offset_ptr(off_in), offset_ptr(off_out));
    // SAFETY: the offset pointers are null or point at the caller's live values.
    cvt_size(unsafe {
        match call {
            Transfer::Splice => libc::splice(i, pi, o, po, len, flags),
            Transfer::CopyFileRange => libc::copy_file_range(i, pi, o, po, len, flags),
        }
    })
}

/// tee(2) of up to `len` bytes between two pipes.
///
/// # Errors
/// The host's errno.
pub fn tee(
    inp: BorrowedFd<'_>,
    out: BorrowedFd<'_>,
    len: usize,
    flags: u32,
) -> Result<usize, Errno> {
    // SAFETY: integers only.
    cvt_size(unsafe { libc::tee(inp.as_raw_fd(), out.as_raw_fd(), len, flags) })
}

/// read(2) into `buf` (a pipe's bytes, taken); the bytes read.
///
/// # Errors
/// The host's errno.
pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize, Errno> {
    // SAFETY: `buf` is writable for its length.
    cvt_size(unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
}

/// pread(2) into `buf` at `offset`; the bytes read.
///
/// # Errors
/// The host's errno.
pub fn pread(fd: BorrowedFd<'_>, buf: &mut [u8], offset: i64) -> Result<usize, Errno> {
    // SAFETY: `buf` is writable for its length.
    cvt_size(unsafe { libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), offset) })
}

/// cachestat(2)'s syscall number (x86-64; not in every libc).
const SYS_CACHESTAT: libc::c_long = 451;

/// cachestat(2) of `len` bytes from `off` (0: to the end) of the host file: its page cache
/// counts (cached, dirty, under writeback, evicted, recently evicted), with the guest's
/// `flags` for the host to check.
///
/// # Errors
/// The host's errno (EINVAL for flags, EPERM, EOPNOTSUPP for hugetlbfs...).
pub fn cachestat(fd: BorrowedFd<'_>, off: u64, len: u64, flags: u32) -> Result<[u64; 5], Errno> {
    let range = [off, len];
    let mut out = [0u64; 5];
    // SAFETY: a descriptor we own, a 16-byte `struct cachestat_range` and a 40-byte
    // `struct cachestat` that live across the call.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd.as_raw_fd(),
            range.as_ptr(),
            out.as_mut_ptr(),
            flags,
        )
    };
    if r < 0 {
        return Err(Errno::last());
    }
    Ok(out)
}

/// Sends `data` as one datagram without waiting (a full socket is EAGAIN).
///
/// # Errors
/// The host's errno.
pub fn send_datagram(fd: BorrowedFd<'_>, data: &[u8]) -> Result<(), Errno> {
    // SAFETY: `data` is readable for its length.
    cvt_size(unsafe {
        libc::send(
            fd.as_raw_fd(),
            data.as_ptr().cast(),
            data.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    #[test]
    fn data_moves_between_files_at_the_offsets_given() {
        let dir = std::env::temp_dir().join(format!("torpor-fd-io-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut a = std::fs::File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("a"))
            .unwrap();
        a.write_all(b"hello world").unwrap();
        let b = std::fs::File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("b"))
            .unwrap();
        let (mut oi, mut oo) = (Some(6), Some(0));
        let n = transfer(
            Transfer::CopyFileRange,
            a.as_fd(),
            &mut oi,
            b.as_fd(),
            &mut oo,
            5,
            0,
        )
        .unwrap();
        assert_eq!((n, oi, oo), (5, Some(11), Some(5)));
        let mut buf = [0u8; 8];
        assert_eq!(pread(b.as_fd(), &mut buf, 0).unwrap(), 5);
        assert_eq!(&buf[..5], b"world");
        assert_eq!(seek(a.as_fd(), 0, libc::SEEK_END).unwrap(), 11);
        truncate(a.as_fd(), 5).unwrap();
        assert_eq!(seek(a.as_fd(), 0, libc::SEEK_END).unwrap(), 5);
        assert_eq!(seek(a.as_fd(), -100, libc::SEEK_SET), Err(Errno::EINVAL));
        fsync(a.as_fd()).unwrap();
        sync_range(a.as_fd(), 0, 5, 0).unwrap();
        fadvise(a.as_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL).unwrap();
        assert_eq!(fadvise(a.as_fd(), 0, 0, 999), Err(Errno::EINVAL));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
