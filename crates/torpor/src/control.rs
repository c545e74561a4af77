//! The control socket of a sandbox: one JSON request line, one JSON response line.
//!
//! ```text
//! → {"op":"state"}            ← {"ok":true,"data":{…OCI-style state…}}
//! → {"op":"stats"}            ← {"ok":true,"data":{…}}
//! → {"op":"hibernate"}        ← {"ok":true,"data":{…deflate report…}}
//! → {"op":"wake"}             ← {"ok":true,"data":{…}}
//! → {"op":"kill","signal":15} ← {"ok":true}
//! → {"op":"delete"}           ← {"ok":true}
//! → {"op":"start"}            ← {"ok":true}   (OCI: a created sandbox starts its program)
//! → {"op":"pause"}            ← {"ok":true,"data":{…deflate report…}}   (OCI pause)
//! → {"op":"resume"}           ← {"ok":true}
//! → {"op":"dormant"}          ← {"ok":true}   (the holder then becomes torpor-dormant)
//! → {"op":"exec","args":[…],"env":[…],"cwd":"/"} + 3 fds (SCM_RIGHTS: the process's
//!   stdin, stdout, stderr)     ← {"ok":true,"data":{"pid":N}} then, when it ends,
//!                                {"ok":true,"data":{"exit":STATUS}}
//! ```

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};

/// A request.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    /// OCI-style state.
    State,
    /// Metrics.
    Stats,
    /// The sandbox's processes (`torpor ps`), pids as the sandbox sees them.
    Processes,
    /// Deflate, once the request in flight is answered.
    Hibernate {
        /// How long to wait for it (milliseconds; the daemon's default when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
        /// Write every live page into one fresh swap file instead of adding what changed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        compact: bool,
    },
    /// Inflate now.
    Wake,
    /// Send a signal.
    Kill {
        /// Signal number.
        signal: i32,
    },
    /// Stop the sandbox and remove its state.
    Delete,
    /// Start the program of a created sandbox (OCI `start`).
    Start,
    /// Hibernate until `resume`, whatever arrives (OCI `pause`).
    Pause,
    /// End a pause (OCI `resume`).
    Resume,
    /// End a pause without a wake: the sandbox stays hibernated until its next request
    /// (`torpor fork` leaves its template so).
    Unpause,
    /// Write the sandbox's state into its state directory and become dormant
    /// (`crate::dormancy`): answered before the holder's exec.
    Dormant,
    /// Pause the sandbox and write a checkpoint of it into `checkpoint/` in its state
    /// directory (`torpor checkpoint` moves it where the user asked); it stays paused until
    /// `resume`.
    Checkpoint,
    /// Start another process in the sandbox (OCI `exec`); its standard streams travel with
    /// the request.
    Exec {
        /// argv.
        args: Vec<String>,
        /// Environment.
        env: Vec<String>,
        /// Working directory.
        cwd: String,
        /// `USER[:GROUP]` to run as (names from the root's /etc/passwd and /etc/group, or
        /// numbers); absent: the sandbox's first process's ids.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        /// The caller relays a terminal to the process (`exec -t`): the sandbox stays hot
        /// while it is attached. Either way the caller may send [`ExecMessage`] lines once the
        /// process runs.
        #[serde(default)]
        terminal: bool,
    },
}

/// What the caller of an `exec` may send on its connection once the process runs, one JSON
/// object a line.
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
pub struct ExecMessage {
    /// A signal for the foreground process group of the process's terminal (its own group
    /// unless a shell in it put another in the foreground): Ctrl-C or a window change of an
    /// attached terminal, or a signal the caller received.
    pub signal: i32,
}

/// A response.
#[derive(Serialize, Deserialize, Debug)]
pub struct Response {
    /// Success.
    pub ok: bool,
    /// Payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    /// Error message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Response {
    /// Success with a payload.
    pub fn data(v: serde_json::Value) -> Response {
        Response {
            ok: true,
            data: Some(v),
            error: None,
        }
    }
    /// Success without one.
    pub fn ok() -> Response {
        Response {
            ok: true,
            data: None,
            error: None,
        }
    }
    /// Failure.
    pub fn error(e: impl std::fmt::Display) -> Response {
        Response {
            ok: false,
            data: None,
            error: Some(e.to_string()),
        }
    }
}

/// Wakes the hibernated sandbox at `dir` and returns once its wake has begun (the request
/// only signals it), so that a request that parks it again (`checkpoint`) finds it awake.
///
/// # Errors
/// The request's; a sandbox still hibernated after `timeout`.
pub fn wake(dir: &Path, timeout: Duration) -> Result<()> {
    call(dir, &Request::Wake, timeout)?;
    let deadline = std::time::Instant::now() + timeout;
    while call(dir, &Request::State, timeout)?["status"] == "hibernated" {
        if std::time::Instant::now() >= deadline {
            anyhow::bail!("the sandbox does not wake");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Sends `req` to the sandbox whose directory is `dir` and returns its payload. A read-only
/// request whose connection is reset before any answer (a holder that was just becoming
/// dormant: its exec ends the connections it had accepted) is sent again, a few times.
pub fn call(dir: &Path, req: &Request, timeout: Duration) -> Result<serde_json::Value> {
    let read_only = matches!(req, Request::State | Request::Stats | Request::Processes);
    let mut tries = 0;
    loop {
        match call_once(dir, req, timeout) {
            Err(e) if read_only && tries < 5 && reset_before_answer(&e) => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

/// Whether `e` is a connection reset or closed before the answer came.
fn reset_before_answer(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof
            )
        })
    })
}

fn call_once(dir: &Path, req: &Request, timeout: Duration) -> Result<serde_json::Value> {
    let s = connect(dir)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    (&s).write_all(request_line(req)?.as_bytes())?;
    read_answer(&mut BufReader::new(s))
}

/// Sends `req` with `fds` attached (SCM_RIGHTS) to the sandbox in `dir`, and returns the
/// connection, positioned after the first answer line, and that answer's payload.
pub fn call_with_fds(
    dir: &Path,
    req: &Request,
    fds: &[std::os::fd::RawFd],
) -> Result<(BufReader<UnixStream>, serde_json::Value)> {
    let s = connect(dir)?;
    send_with_fds(&s, request_line(req)?.as_bytes(), fds).context("sending the request")?;
    let mut r = BufReader::new(s);
    let v = read_answer(&mut r)?;
    Ok((r, v))
}

/// Connects to the control socket of the sandbox in `dir`.
fn connect(dir: &Path) -> Result<UnixStream> {
    let sock = dir.join("control.sock");
    let (path, _dirfd) = short_path(&sock)?;
    UnixStream::connect(&path).with_context(|| format!("connecting to {}", sock.display()))
}

/// `req` as one line of the wire format.
fn request_line(req: &Request) -> Result<String> {
    let mut line = serde_json::to_string(req)?;
    line.push('\n');
    Ok(line)
}

/// Reads one answer line: its payload, or its error.
pub fn read_answer(r: &mut BufReader<UnixStream>) -> Result<serde_json::Value> {
    let mut resp = String::new();
    let n = r
        .read_line(&mut resp)
        .context("reading the sandbox's answer")?;
    if n == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the sandbox closed the connection without an answer",
        ))
        .context("reading the sandbox's answer");
    }
    let a: Response = serde_json::from_str(resp.trim()).context("decoding the sandbox's answer")?;
    if a.ok {
        Ok(a.data.unwrap_or(serde_json::Value::Null))
    } else {
        Err(anyhow!(a.error.unwrap_or_else(|| "unknown error".into())))
    }
}

// (Self-contained, as `crate::fdpass::send` is not: this file is compiled alone into the
// fuzz crate's `control` target.)
fn send_with_fds(s: &UnixStream, data: &[u8], fds: &[std::os::fd::RawFd]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let iov = [std::io::IoSlice::new(data)];
    let payload = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_SPACE has no preconditions.
    let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: msghdr fields point at live locals for the call; the control message is written
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
        libc::sendmsg(s.as_raw_fd(), &msg, 0)
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if n as usize != data.len() {
        return Err(std::io::Error::other("short send of a control request"));
    }
    Ok(())
}

/// Reads a request line from `s`, with the descriptors sent beside it (at most 8; any beyond
/// are closed by the kernel's truncation, and `MSG_CTRUNC` makes this fail).
pub fn recv_with_fds(s: &UnixStream) -> std::io::Result<(String, Vec<std::os::fd::OwnedFd>)> {
    use std::os::fd::{AsRawFd, FromRawFd};
    const MAX_FDS: usize = 8;
    let mut line = Vec::new();
    let mut fds = Vec::new();
    let mut buf = [0u8; 4096];
    while !line.contains(&b'\n') {
        // SAFETY: CMSG_SPACE has no preconditions.
        let space = unsafe { libc::CMSG_SPACE((MAX_FDS * 4) as u32) } as usize;
        let mut cbuf = vec![0u64; space.div_ceil(8)];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: msghdr points at live buffers; received descriptors are taken into OwnedFds
        // right after the call, each exactly once.
        let (n, flags) = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = space as _;
            let n = libc::recvmsg(s.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
            if n > 0 {
                let mut c = libc::CMSG_FIRSTHDR(&msg);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                        let len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                        let data = libc::CMSG_DATA(c).cast::<i32>();
                        for i in 0..len / 4 {
                            let fd = std::ptr::read_unaligned(data.add(i));
                            fds.push(std::os::fd::OwnedFd::from_raw_fd(fd));
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
        if flags & libc::MSG_CTRUNC != 0 {
            return Err(std::io::Error::other("too many descriptors with a request"));
        }
        if n == 0 {
            break;
        }
        line.extend_from_slice(&buf[..n as usize]);
        if line.len() > 1 << 20 {
            return Err(std::io::Error::other("request too long"));
        }
    }
    let end = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
    Ok((String::from_utf8_lossy(&line[..end]).into_owned(), fds))
}

/// A path for `sock` short enough for a Unix socket address (108 bytes): itself, or
/// `/proc/self/fd/N/NAME` through an `O_PATH` descriptor of its directory, which the caller
/// keeps open while it uses the path (engines pass state roots and 64-character IDs whose
/// joined paths are longer).
pub fn short_path(sock: &Path) -> Result<(std::path::PathBuf, Option<std::fs::File>)> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    if sock.as_os_str().len() < 100 {
        return Ok((sock.to_path_buf(), None));
    }
    let (Some(dir), Some(name)) = (sock.parent(), sock.file_name()) else {
        return Ok((sock.to_path_buf(), None));
    };
    let d = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(dir)
        .with_context(|| format!("opening {}", dir.display()))?;
    let p = Path::new("/proc/self/fd")
        .join(d.as_raw_fd().to_string())
        .join(name);
    Ok((p, Some(d)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_format() {
        assert_eq!(
            serde_json::to_string(&Request::Kill { signal: 9 }).unwrap(),
            r#"{"op":"kill","signal":9}"#
        );
        let r: Request = serde_json::from_str(r#"{"op":"hibernate"}"#).unwrap();
        assert!(matches!(
            r,
            Request::Hibernate {
                wait_ms: None,
                compact: false
            }
        ));
        let r: Request =
            serde_json::from_str(r#"{"op":"hibernate","wait_ms":250,"compact":true}"#).unwrap();
        assert!(matches!(
            r,
            Request::Hibernate {
                wait_ms: Some(250),
                compact: true
            }
        ));
        assert!(serde_json::from_str::<Request>(r#"{"op":"rm -rf"}"#).is_err());
    }

    #[test]
    fn an_exec_of_an_older_caller_has_no_terminal_and_messages_are_signals_only() {
        let r: Request =
            serde_json::from_str(r#"{"op":"exec","args":["sh"],"env":[],"cwd":"/"}"#).unwrap();
        assert!(matches!(
            r,
            Request::Exec {
                terminal: false,
                ..
            }
        ));
        let m: ExecMessage = serde_json::from_str(r#"{"signal":2}"#).unwrap();
        assert_eq!(m, ExecMessage { signal: 2 });
        assert!(serde_json::from_str::<ExecMessage>(r#"{"signal":"INT"}"#).is_err());
        assert!(serde_json::from_str::<ExecMessage>("{}").is_err());
    }
}
