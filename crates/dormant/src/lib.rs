//! The dormant process (`torpor-dormant`, issue 30; design in `docs/design/dormant.md`): what
//! a dormant sandbox is while nothing asks for it. One thread, no VM, no guest memory, holding
//! only what the outside world sees: the sandbox's control socket and the descriptors it
//! watches (published listening sockets, kept connections). It answers the read-only control
//! verbs (`state`, `stats`) from the status file written when the sandbox went dormant, and
//! on anything else (a connection or data on a watched descriptor, any other verb) it ends by
//! `execve` of its wake command, which inherits every descriptor (the waiting connection
//! still in its listener's queue, the waiting request still unread in its control connection).
//!
//! The binary is small on purpose: a dormant sandbox's host memory is this process's private
//! pages and page tables (the full `torpor` binary costs about 0.8 MiB of private pages once
//! started, most of it relocations; see the design).

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// The command line: `torpor-dormant --status FILE --control FD [--watch FD]... [--exec-fd FD]
/// -- WAKE...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The status file: a JSON object with the answers to `state` and `stats`
    /// (`{"state": …, "stats": …}`).
    pub status: PathBuf,
    /// The control socket's listener (inherited).
    pub control: RawFd,
    /// Descriptors whose readiness wakes the sandbox (inherited).
    pub watch: Vec<RawFd>,
    /// The wake command and its arguments; `--woken-by FD` is appended.
    pub wake: Vec<String>,
    /// The wake command's executable as an open descriptor (`execveat` with an empty path:
    /// the only exec a confined holder's seccomp filter allows); `WAKE[0]` is then only its
    /// name. Without it, `WAKE[0]` is looked up in `PATH`.
    pub exec_fd: Option<RawFd>,
}

/// What a bad command line lacks or has wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (usage: torpor-dormant --status FILE --control FD [--watch FD]... -- WAKE...)",
            self.0
        )
    }
}

impl Options {
    /// Parses the arguments after the program name.
    ///
    /// # Errors
    /// A missing or malformed option, or no wake command.
    pub fn parse(args: &[String]) -> Result<Options, UsageError> {
        let fd = |v: Option<&String>, what: &str| -> Result<RawFd, UsageError> {
            v.and_then(|s| s.parse::<RawFd>().ok())
                .filter(|&n| n >= 0)
                .ok_or_else(|| UsageError(format!("{what} needs a descriptor number")))
        };
        let (mut status, mut control, mut watch, mut exec_fd) = (None, None, Vec::new(), None);
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--status" => {
                    let v = it
                        .next()
                        .ok_or_else(|| UsageError("--status needs a file".into()))?;
                    status = Some(PathBuf::from(v));
                }
                "--control" => control = Some(fd(it.next(), "--control")?),
                "--watch" => watch.push(fd(it.next(), "--watch")?),
                "--exec-fd" => exec_fd = Some(fd(it.next(), "--exec-fd")?),
                "--" => break,
                other => return Err(UsageError(format!("unknown argument {other:?}"))),
            }
        }
        let wake: Vec<String> = it.cloned().collect();
        if wake.is_empty() {
            return Err(UsageError("no wake command after --".into()));
        }
        Ok(Options {
            status: status.ok_or_else(|| UsageError("--status is required".into()))?,
            control: control.ok_or_else(|| UsageError("--control is required".into()))?,
            watch,
            wake,
            exec_fd,
        })
    }
}

/// Why the dormant process ends.
#[derive(Debug)]
pub enum Wake {
    /// A watched descriptor became ready (a connection, data, or its peer's close).
    Watched(RawFd),
    /// A control request that needs the sandbox itself, still unread in this connection.
    Request(OwnedFd),
    /// `delete`: answered; the process ends without waking the sandbox (its janitor cleans
    /// up when it sees the process gone, and the `delete` verb removes the directory).
    Deleted,
}

/// The answer to the control request `line` from the status `status`, or None when the
/// request needs the sandbox (a wake). `state` and `stats` are answered; so is a malformed
/// line (an error, as the holder answers one).
pub fn answer(line: &[u8], status: &serde_json::Value) -> Option<String> {
    let req: serde_json::Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            return Some(
                serde_json::json!({"ok": false, "error": format!("bad request: {e}")}).to_string(),
            )
        }
    };
    let op = req.get("op").and_then(|o| o.as_str())?;
    let data = match op {
        "state" | "stats" => status.get(op)?,
        _ => return None,
    };
    Some(serde_json::json!({"ok": true, "data": data}).to_string())
}

/// The longest request line read before deciding (an `exec` with a long command line is a
/// wake whatever follows).
const PEEK_MAX: usize = 64 << 10;

/// How long a client has to send its request line.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The first line of a control connection, looked at without consuming it.
enum Peeked {
    /// The client closed, or sent no whole line within [`REQUEST_TIMEOUT`].
    Nothing,
    /// The request line (without its newline).
    Line(Vec<u8>),
    /// A line longer than [`PEEK_MAX`]: longer than any verb answered here.
    Long,
}

/// Peeks at the first line of a control connection without consuming it.
fn peek_line(conn: &UnixStream) -> std::io::Result<Peeked> {
    conn.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    let deadline = std::time::Instant::now() + REQUEST_TIMEOUT;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: receiving into our own buffer, which is `buf.len()` bytes long.
        let n = unsafe {
            libc::recv(
                conn.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_PEEK,
            )
        };
        let n = usize::try_from(n).map_err(|_| std::io::Error::last_os_error())?;
        if n == 0 {
            return Ok(Peeked::Nothing);
        }
        if let Some(end) = buf[..n].iter().position(|&b| b == b'\n') {
            buf.truncate(end);
            return Ok(Peeked::Line(buf));
        }
        if n == buf.len() {
            if buf.len() >= PEEK_MAX {
                return Ok(Peeked::Long);
            }
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        // Part of a line: wait for the rest, within the deadline.
        if std::time::Instant::now() >= deadline {
            return Ok(Peeked::Nothing);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// What one control connection asks of the dormant process.
enum Served {
    /// Answered.
    Answered,
    /// A request for the sandbox, unread in this connection.
    Wake(OwnedFd),
    /// `delete`, answered.
    Deleted,
}

/// Whether the request line is `delete`.
fn is_delete(line: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v.get("op").and_then(|o| o.as_str()).map(|o| o == "delete"))
        .unwrap_or(false)
}

/// Serves one control connection.
fn serve_control(conn: UnixStream, status: &serde_json::Value) -> Served {
    let line = match peek_line(&conn) {
        Ok(Peeked::Line(line)) if !line.is_empty() => line,
        // A request for the sandbox, unread.
        Ok(Peeked::Long) => return Served::Wake(OwnedFd::from(conn)),
        // A client that sent nothing in time, or went away.
        _ => return Served::Answered,
    };
    let reply = if is_delete(&line) {
        Some(serde_json::json!({"ok": true}).to_string())
    } else {
        answer(&line, status)
    };
    match reply {
        Some(reply) => {
            let mut conn = conn;
            let mut discard = vec![0u8; line.len() + 1];
            let _ = conn.read_exact(&mut discard);
            let _ = conn.write_all(format!("{reply}\n").as_bytes());
            if is_delete(&line) {
                Served::Deleted
            } else {
                Served::Answered
            }
        }
        None => Served::Wake(OwnedFd::from(conn)),
    }
}

fn epoll_add(ep: BorrowedFd<'_>, fd: RawFd, events: u32) -> std::io::Result<()> {
    let mut ev = libc::epoll_event {
        events,
        u64: fd as u64,
    };
    // SAFETY: `ev` is a live epoll_event the host only reads.
    if unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Waits until the sandbox must wake, answering the read-only control verbs meanwhile.
///
/// # Errors
/// The status file cannot be read or is not JSON; a descriptor cannot be watched.
pub fn serve(opts: &Options) -> std::io::Result<Wake> {
    let status: serde_json::Value = serde_json::from_slice(&std::fs::read(&opts.status)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    // SAFETY: epoll_create1 takes no pointers; the result is checked and owned here.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    let ep = unsafe { OwnedFd::from_raw_fd(ep) };
    epoll_add(ep.as_fd(), opts.control, libc::EPOLLIN as u32)?;
    for &w in &opts.watch {
        epoll_add(
            ep.as_fd(),
            w,
            (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLPRI) as u32,
        )?;
    }
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 16];
    loop {
        // SAFETY: `events` has room for 16 entries; the host writes at most that many.
        let n = unsafe { libc::epoll_wait(ep.as_raw_fd(), events.as_mut_ptr(), 16, -1) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        for ev in &events[..n as usize] {
            let fd = ev.u64 as RawFd;
            if fd != opts.control {
                return Ok(Wake::Watched(fd));
            }
            // SAFETY: accepting on the inherited listener; the connection is close-on-exec
            // unless it is handed to the wake command.
            let c = unsafe {
                libc::accept4(
                    opts.control,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            if c < 0 {
                continue;
            }
            // SAFETY: a fresh descriptor owned by nobody else.
            let conn = UnixStream::from(unsafe { OwnedFd::from_raw_fd(c) });
            match serve_control(conn, &status) {
                Served::Answered => {}
                Served::Wake(pending) => return Ok(Wake::Request(pending)),
                Served::Deleted => return Ok(Wake::Deleted),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn the_command_line_is_checked() {
        let o = Options::parse(&args(
            "--status s.json --control 3 --watch 4 --watch 5 -- w -x",
        ))
        .unwrap();
        assert_eq!(o.control, 3);
        assert_eq!(o.watch, vec![4, 5]);
        assert_eq!(o.wake, args("w -x"));
        assert_eq!(o.exec_fd, None);
        let o = Options::parse(&args("--status s --control 3 --exec-fd 9 -- w")).unwrap();
        assert_eq!(o.exec_fd, Some(9));
        assert!(Options::parse(&args("--status s --control 3 --exec-fd -- w")).is_err());
        assert!(Options::parse(&args("--status s --control 3")).is_err());
        assert!(Options::parse(&args("--status s --control x -- w")).is_err());
        assert!(Options::parse(&args("--control 3 -- w")).is_err());
        assert!(Options::parse(&args("--status s --control 3 --bogus -- w")).is_err());
        assert!(Options::parse(&args("--status s --control -1 -- w")).is_err());
    }

    #[test]
    fn read_only_verbs_are_answered_others_wake() {
        let status = serde_json::json!({"state": {"status": "dormant"}, "stats": {"rss": 1}});
        let a = answer(br#"{"op":"state"}"#, &status).unwrap();
        assert_eq!(a, r#"{"data":{"status":"dormant"},"ok":true}"#);
        assert!(answer(br#"{"op":"stats"}"#, &status)
            .unwrap()
            .contains("\"rss\":1"));
        assert_eq!(answer(br#"{"op":"exec","args":["ls"]}"#, &status), None);
        assert_eq!(answer(br#"{"op":"wake"}"#, &status), None);
        assert!(answer(b"not json", &status)
            .unwrap()
            .contains("\"ok\":false"));
        // A status without the verb's answer: the sandbox answers itself.
        assert_eq!(answer(br#"{"op":"stats"}"#, &serde_json::json!({})), None);
    }
}
