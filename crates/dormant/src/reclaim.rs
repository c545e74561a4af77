//! Giving back what the sandbox's cgroup still holds once it is dormant.
//!
//! A container's memory, as its engine reports it (containerd's ContainerStats working set:
//! the cgroup's usage less its inactive file pages), keeps what running the sandbox charged
//! to its cgroup after the holder has gone: the cached names and inodes of the files the
//! program opened, the page cache of the image files it read twice and of the checkpoint the
//! dormancy wrote. All of it is reclaimable, but nothing reclaims it on an idle host, so a
//! dormant container would show megabytes it does not use. Its state is on disk: the dormant
//! process asks the kernel once, at its start, to reclaim the cgroup's memory (cgroup v1
//! `memory.force_empty`, v2 `memory.reclaim`, opened by the holder before it was confined).
//! Its own few pages stay (the host has no swap, or they come back at the next touch).

use crate::sys::{self, Fd, SysResult};

/// What is written to the reclaim file: v1's `memory.force_empty` ignores the bytes and
/// reclaims all it can; v2's `memory.reclaim` takes an amount, this one more than any
/// sandbox holds (the kernel stops when nothing more can go, with `EAGAIN`).
pub const ALL: &[u8] = b"1T";

/// Asks the kernel to reclaim the memory of the cgroup whose reclaim file `fd` is. `EAGAIN`
/// (v2: less than asked could go) is success.
///
/// # Errors
/// The host's (`EBADF` for a descriptor that is not open for writing).
pub fn reclaim(fd: Fd) -> SysResult<()> {
    match sys::write_all(fd, ALL) {
        Err(sys::Errno(libc::EAGAIN)) => Ok(()),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;

    #[test]
    fn the_reclaim_file_gets_the_amount_and_a_closed_one_is_an_error() {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into `fds`.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        reclaim(fds[1]).unwrap();
        let mut buf = [0u8; 8];
        let n = sys::read(fds[0], &mut buf).unwrap();
        assert_eq!(&buf[..n], ALL);
        sys::close(fds[0]);
        sys::close(fds[1]);
        assert_eq!(reclaim(fds[1]), Err(sys::Errno(libc::EBADF)));
    }
}
