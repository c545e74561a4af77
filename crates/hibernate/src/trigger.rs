//! Which of a hibernated sandbox's sockets wake it: the triggers the deflated sandbox waits on.
//!
//! A hibernated sandbox has no thread running; its wait (in the engine) is an `epoll` on the
//! host sockets the application holds. A connection on a listener, or bytes on a connection to
//! a client outside the sandbox, is a request. A peer's close with nothing to read is not, nor
//! is traffic between the sandbox's own processes (nginx's master and workers).

use std::os::fd::{AsRawFd, BorrowedFd};

use kernel::net::host;

/// Whether a socket only links processes of this sandbox: a connected Unix socket whose host
/// peer is this host process (every guest process lives in it), such as a socketpair or a
/// connection to a listener of the sandbox. Data on it is the application talking to itself
/// (nginx's master and its workers), not a request: it stays queued in the host's buffers
/// through the hibernation instead of waking the sandbox as soon as it deflates.
pub fn sandbox_internal(fd: BorrowedFd<'_>) -> bool {
    let opt = |name| host::int_opt(fd, libc::SOL_SOCKET, name).ok();
    if opt(libc::SO_DOMAIN) != Some(libc::AF_UNIX) || opt(libc::SO_ACCEPTCONN) != Some(0) {
        return false;
    }
    // struct ucred: pid, uid, gid.
    let mut cred = [0u8; 12];
    let peer_pid = host::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERCRED, &mut cred)
        .ok()
        .filter(|&n| n >= 4)
        .map(|_| i32::from_ne_bytes([cred[0], cred[1], cred[2], cred[3]]));
    peer_pid.is_some_and(|pid| pid > 0 && pid as u32 == std::process::id())
}

/// Whether a readable socket brings a request: a listening socket (a connection waits) or a
/// connected one with bytes to read; not a connection whose peer closed with nothing left.
pub fn brings_work(fd: BorrowedFd<'_>) -> bool {
    if host::int_opt(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN).is_ok_and(|l| l != 0) {
        return true;
    }
    let mut b = [0u8; 1];
    // SAFETY: valid fd and a one-byte buffer; MSG_PEEK leaves the byte for the application.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
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
    use std::os::fd::AsFd;
    use std::os::unix::net::{UnixListener, UnixStream};

    #[test]
    fn a_socketpair_links_the_sandbox_to_itself() {
        let (a, mut b) = UnixStream::pair().expect("socketpair");
        assert!(sandbox_internal(a.as_fd()));
        b.write_all(b"x").expect("write");
        assert!(brings_work(a.as_fd()), "bytes wait");
    }

    #[test]
    fn a_listener_is_a_trigger_and_not_internal() {
        let dir = std::env::temp_dir().join(format!("torpor-trigger-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let l = UnixListener::bind(&dir).expect("bind");
        assert!(!sandbox_internal(l.as_fd()));
        assert!(
            brings_work(l.as_fd()),
            "a listener brings work when readable"
        );
        let _ = std::fs::remove_file(&dir);
    }

    #[test]
    fn a_tcp_connection_is_not_internal_and_a_close_is_no_work() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (s, _) = l.accept().expect("accept");
        assert!(!sandbox_internal(s.as_fd()));
        drop(c);
        assert!(!brings_work(s.as_fd()), "a close with nothing to read");
    }

    #[test]
    fn a_descriptor_that_is_no_socket_is_neither() {
        let f = std::fs::File::open("/proc/self/status").expect("a file");
        assert!(!sandbox_internal(f.as_fd()));
        assert!(!brings_work(f.as_fd()));
    }
}
