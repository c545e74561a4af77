//! Descriptor passing over Unix sockets (`SCM_RIGHTS`): one `sendmsg` or `recvmsg` with the
//! descriptors beside the bytes, for the broker. (The control socket's `control.rs` has its
//! own: it is compiled alone into the fuzz crate.)

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// A connected `SOCK_SEQPACKET` pair, close-on-exec.
///
/// # Errors
/// The errno of `socketpair`.
pub fn seqpacket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut sv = [0; 2];
    // SAFETY: socketpair fills two fds.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            sv.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh fds owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) })
}

/// Most descriptors [`recv`] takes from one message.
pub const MAX_FDS: usize = 2;

/// Sends `data` and `fds` (`SCM_RIGHTS`) in one `sendmsg`, without SIGPIPE: the bytes sent.
///
/// # Errors
/// The errno of `sendmsg`.
pub fn send(sock: BorrowedFd<'_>, data: &[u8], fds: &[RawFd]) -> std::io::Result<usize> {
    let iov = [std::io::IoSlice::new(data)];
    let payload = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_SPACE has no preconditions.
    let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: the msghdr points at live locals for the call; the control message is written
    // through the CMSG macros inside `cbuf`, which is `space` bytes long.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = space as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(payload) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(c),
                payload as usize,
            );
        }
        libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Receives one message into `buf` with up to [`MAX_FDS`] descriptors: its length (0 when
/// the peer is gone) and the descriptors (close-on-exec).
///
/// # Errors
/// The errno of `recvmsg`; `EMSGSIZE` for a datagram or control data cut short.
pub fn recv(sock: BorrowedFd<'_>, buf: &mut [u8]) -> std::io::Result<(usize, Vec<OwnedFd>)> {
    // SAFETY: CMSG_SPACE has no preconditions.
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS * 4) as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut fds = Vec::new();
    // SAFETY: the msghdr points at live buffers; received descriptors are taken into OwnedFds
    // right after the call, each exactly once.
    let (n, flags) = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let n = libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n > 0 {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    let data = libc::CMSG_DATA(c).cast::<i32>();
                    for i in 0..len / 4 {
                        fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        (n, msg.msg_flags)
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(std::io::Error::from_raw_os_error(libc::EMSGSIZE));
    }
    Ok((n as usize, fds))
}
