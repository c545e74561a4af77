//! A terminal for a container whose `process.terminal` is set: a new pseudo-terminal whose
//! controller end goes to the engine through `--console-socket` (one `SCM_RIGHTS` message, as
//! runc sends it), and whose other end becomes the holder's standard input, output and error,
//! and so the application's.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use anyhow::{Context, Result};

/// Opens a pseudo-terminal, sends its controller to the Unix socket at `socket`, and makes the
/// terminal this process's controlling terminal and standard streams.
pub fn attach(socket: &Path) -> Result<()> {
    let (controller, terminal) = openpty()?;
    let stream = UnixStream::connect(socket)
        .with_context(|| format!("connecting to console socket {}", socket.display()))?;
    send_fd(&stream, &controller, "/dev/ptmx")
        .with_context(|| format!("sending the terminal to {}", socket.display()))?;
    drop(controller);
    crate::logging::keep_stderr();
    let t = terminal.as_raw_fd();
    // SAFETY: plain calls on fds owned here; a new session so that the terminal can become
    // the controlling one.
    unsafe {
        libc::setsid();
        if libc::ioctl(t, libc::TIOCSCTTY, 0) != 0 {
            return Err(std::io::Error::last_os_error()).context("TIOCSCTTY");
        }
        for fd in 0..3 {
            if libc::dup2(t, fd) < 0 {
                return Err(std::io::Error::last_os_error()).context("dup2 of the terminal");
            }
        }
    }
    Ok(())
}

/// A new pseudo-terminal: its controller and its replica (both close-on-exec, neither the
/// caller's controlling terminal).
pub(crate) fn openpty() -> Result<(OwnedFd, OwnedFd)> {
    // SAFETY: posix_openpt/grantpt/unlockpt/ptsname_r on a fresh fd, with a local buffer.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if m < 0 {
            return Err(std::io::Error::last_os_error()).context("posix_openpt");
        }
        let controller = OwnedFd::from_raw_fd(m);
        if libc::grantpt(m) != 0 || libc::unlockpt(m) != 0 {
            return Err(std::io::Error::last_os_error()).context("unlockpt");
        }
        let mut name = [0 as libc::c_char; 128];
        if libc::ptsname_r(m, name.as_mut_ptr(), name.len()) != 0 {
            return Err(std::io::Error::last_os_error()).context("ptsname_r");
        }
        let s = libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if s < 0 {
            return Err(std::io::Error::last_os_error()).context("opening the terminal");
        }
        Ok((controller, OwnedFd::from_raw_fd(s)))
    }
}

/// Sends `fd` with `name` as the message's bytes (runc sends the terminal's path).
fn send_fd(stream: &UnixStream, fd: &OwnedFd, name: &str) -> Result<()> {
    let iov = [IoSlice::new(name.as_bytes())];
    // SAFETY: CMSG_SPACE of one int; the buffer is large and aligned enough for one cmsghdr.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<i32>() as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: msghdr fields point at live locals for the sendmsg call; the control message is
    // filled in through the CMSG macros within `cbuf`.
    let r = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<i32>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>(), fd.as_raw_fd());
        libc::sendmsg(stream.as_raw_fd(), &msg, 0)
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}
