//! Which of a hibernated sandbox's sockets wake it: the triggers the deflated sandbox waits on.
//!
//! A hibernated sandbox has no thread running; its wait (in the engine) is an `epoll` on the
//! host sockets the application holds. A connection on a listener, or bytes on a connection to
//! a client outside the sandbox, is a request. A peer's close with nothing to read is not, nor
//! is traffic between the sandbox's own processes (nginx's master and workers).

/// Whether a socket only links processes of this sandbox: a connected Unix socket whose host
/// peer is this host process (every guest process lives in it), such as a socketpair or a
/// connection to a listener of the sandbox. Data on it is the application talking to itself
/// (nginx's master and its workers), not a request: it stays queued in the host's buffers
/// through the hibernation instead of waking the sandbox as soon as it deflates.
pub fn sandbox_internal(fd: i32) -> bool {
    let int_opt = |name: libc::c_int| {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: valid fd and output buffer of `len` bytes.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                name,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        (r == 0).then_some(v)
    };
    if int_opt(libc::SO_DOMAIN) != Some(libc::AF_UNIX) || int_opt(libc::SO_ACCEPTCONN) != Some(0) {
        return false;
    }
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: valid fd and output buffer of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    r == 0 && cred.pid > 0 && cred.pid as u32 == std::process::id()
}

/// Whether a readable socket brings a request: a listening socket (a connection waits) or a
/// connected one with bytes to read; not a connection whose peer closed with nothing left.
pub fn brings_work(fd: i32) -> bool {
    if fd < 0 {
        return false;
    }
    let mut listening: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: valid fd and output buffer of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut listening as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r == 0 && listening != 0 {
        return true;
    }
    let mut b = [0u8; 1];
    // SAFETY: valid fd and a one-byte buffer; MSG_PEEK leaves the byte for the application.
    let n = unsafe {
        libc::recv(
            fd,
            b.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::{UnixListener, UnixStream};

    #[test]
    fn a_socketpair_links_the_sandbox_to_itself() {
        let (a, mut b) = UnixStream::pair().expect("socketpair");
        assert!(sandbox_internal(a.as_raw_fd()));
        b.write_all(b"x").expect("write");
        assert!(brings_work(a.as_raw_fd()), "bytes wait");
    }

    #[test]
    fn a_listener_is_a_trigger_and_not_internal() {
        let dir = std::env::temp_dir().join(format!("torpor-trigger-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let l = UnixListener::bind(&dir).expect("bind");
        assert!(!sandbox_internal(l.as_raw_fd()));
        assert!(
            brings_work(l.as_raw_fd()),
            "a listener brings work when readable"
        );
        let _ = std::fs::remove_file(&dir);
    }

    #[test]
    fn a_tcp_connection_is_not_internal_and_a_close_is_no_work() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (s, _) = l.accept().expect("accept");
        assert!(!sandbox_internal(s.as_raw_fd()));
        drop(c);
        assert!(!brings_work(s.as_raw_fd()), "a close with nothing to read");
    }

    #[test]
    fn a_closed_or_bad_fd_is_neither() {
        assert!(!sandbox_internal(-1));
        assert!(!brings_work(-1));
    }
}
