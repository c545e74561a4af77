//! The dormant process's one loop: waits on the control socket and the watched descriptors,
//! answers the read-only control verbs from the status file, and returns what woke it.

use crate::json;
use crate::sys::{self, Errno, Fd, SysResult};

/// Why the dormant process ends.
#[derive(Debug, PartialEq, Eq)]
pub enum Wake {
    /// A watched descriptor became ready (a connection, data, or its peer's close).
    Watched(Fd),
    /// A control request that needs the sandbox itself, still unread in this connection
    /// (close-on-exec: the caller clears it for the wake command).
    Request(Fd),
    /// `delete`: answered; the process ends without waking the sandbox (the `delete` verb
    /// removes the directory).
    Deleted,
}

/// The answer to a control request.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// `{"ok":true,"data":DATA}`, DATA the raw JSON text.
    Data(&'a [u8]),
    /// `{"ok":true}` (`delete`).
    Done,
    /// `{"ok":false,"error":"bad request: …"}`.
    BadRequest,
}

impl Reply<'_> {
    /// The reply line's pieces (newline included).
    pub fn parts(&self) -> [&[u8]; 3] {
        match self {
            Reply::Data(d) => [b"{\"ok\":true,\"data\":", d, b"}\n"],
            Reply::Done => [b"{\"ok\":true}\n", b"", b""],
            Reply::BadRequest => [
                b"{\"ok\":false,\"error\":\"bad request: not a JSON object\"}\n",
                b"",
                b"",
            ],
        }
    }
}

/// The answer to the control request `line` from the status `status` (a JSON object), or
/// None when the request needs the sandbox (a wake). `state` and `stats` are answered, from
/// the status's member of that name; so is `delete`, and a line that is not a JSON object (an
/// error, as the holder answers one).
pub fn answer<'s>(line: &[u8], status: &'s [u8]) -> Option<Reply<'s>> {
    let op = match json::member(line, "op") {
        Ok(op) => op?,
        Err(json::Malformed) => return Some(Reply::BadRequest),
    };
    if json::is_string(op, "delete") {
        return Some(Reply::Done);
    }
    for verb in ["state", "stats"] {
        if json::is_string(op, verb) {
            // A status without the verb's answer: the sandbox answers itself.
            return json::member(status, verb).ok().flatten().map(Reply::Data);
        }
    }
    None
}

/// Why the status file cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusError {
    /// It cannot be read.
    Read(Errno),
    /// It is larger than the buffer.
    TooLarge,
    /// It is not a JSON object.
    NotJson,
}

/// Reads the status file `path` into `buf` and checks that it is a JSON object.
///
/// # Errors
/// As [`StatusError`] says.
pub fn load_status<'b>(path: &core::ffi::CStr, buf: &'b mut [u8]) -> Result<&'b [u8], StatusError> {
    let fd = sys::open_read(path).map_err(StatusError::Read)?;
    let mut len = 0;
    let r = loop {
        if len == buf.len() {
            break Err(StatusError::TooLarge);
        }
        match sys::read(fd, &mut buf[len..]) {
            Ok(0) => break Ok(()),
            Ok(n) => len += n,
            Err(e) => break Err(StatusError::Read(e)),
        }
    };
    sys::close(fd);
    r?;
    let text = &buf[..len];
    json::member(text, "state").map_err(|_| StatusError::NotJson)?;
    Ok(text)
}

/// How long a client has to send its request line, in milliseconds.
const REQUEST_TIMEOUT_MS: u64 = 5000;

/// The first line of a control connection, looked at without consuming it.
#[derive(Debug, PartialEq, Eq)]
enum Peeked {
    /// The client closed, or sent no whole line within [`REQUEST_TIMEOUT_MS`].
    Nothing,
    /// The request line's length (without its newline), at the start of the buffer.
    Line(usize),
    /// A line longer than the buffer: longer than any verb answered here.
    Long,
}

/// Peeks at the first line of a control connection without consuming it.
fn peek_line(conn: Fd, buf: &mut [u8]) -> SysResult<Peeked> {
    let deadline = sys::now_ms() + REQUEST_TIMEOUT_MS;
    loop {
        let left = deadline.saturating_sub(sys::now_ms());
        if left == 0 || !sys::wait_readable(conn, left as i32) {
            return Ok(Peeked::Nothing);
        }
        let Some(n) = sys::peek(conn, buf)? else {
            // Readable by poll's word but nothing to peek (an error pending): not a spin.
            sys::sleep_1ms();
            continue;
        };
        if n == 0 {
            return Ok(Peeked::Nothing);
        }
        if let Some(end) = buf[..n].iter().position(|&b| b == b'\n') {
            return Ok(Peeked::Line(end));
        }
        if n == buf.len() {
            return Ok(Peeked::Long);
        }
        // Part of a line: readable at once, so wait a little for the rest.
        sys::sleep_1ms();
    }
}

/// What one control connection asks of the dormant process.
enum Served {
    /// Answered.
    Answered,
    /// A request for the sandbox, unread in this connection.
    Wake(Fd),
    /// `delete`, answered.
    Deleted,
}

/// Serves one control connection (closed unless it is handed on).
fn serve_control(conn: Fd, status: &[u8], buf: &mut [u8]) -> Served {
    let len = match peek_line(conn, buf) {
        Ok(Peeked::Line(len)) if len > 0 => len,
        // A request for the sandbox, unread.
        Ok(Peeked::Long) => return Served::Wake(conn),
        // A client that sent nothing in time, or went away.
        _ => {
            sys::close(conn);
            return Served::Answered;
        }
    };
    let Some(reply) = answer(&buf[..len], status) else {
        return Served::Wake(conn);
    };
    // Consume the request line, then answer.
    let mut left = len + 1;
    while left > 0 {
        match sys::read(conn, &mut buf[..left]) {
            Ok(0) | Err(_) => break,
            Ok(n) => left -= n,
        }
    }
    for p in reply.parts() {
        if sys::write_all(conn, p).is_err() {
            break;
        }
    }
    sys::close(conn);
    if reply == Reply::Done {
        Served::Deleted
    } else {
        Served::Answered
    }
}

/// Waits until the sandbox must wake, answering the read-only control verbs from `status`
/// meanwhile; `buf` holds a request line while it is looked at.
///
/// # Errors
/// A descriptor cannot be watched, or the wait fails.
pub fn serve(control: Fd, watch: &[Fd], status: &[u8], buf: &mut [u8]) -> SysResult<Wake> {
    let ep = sys::epoll_create()?;
    sys::epoll_add(ep, control, libc::EPOLLIN as u32)?;
    for &w in watch {
        sys::epoll_add(
            ep,
            w,
            (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLPRI) as u32,
        )?;
    }
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 16];
    loop {
        let n = sys::epoll_wait(ep, &mut events)?;
        for ev in &events[..n] {
            let fd = ev.u64 as Fd;
            if fd != control {
                sys::close(ep);
                return Ok(Wake::Watched(fd));
            }
            let Ok(conn) = sys::accept(control) else {
                continue;
            };
            match serve_control(conn, status, buf) {
                Served::Answered => {}
                Served::Wake(pending) => {
                    sys::close(ep);
                    return Ok(Wake::Request(pending));
                }
                Served::Deleted => return Ok(Wake::Deleted),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    fn line(r: Option<Reply<'_>>) -> Option<std::string::String> {
        r.map(|r| {
            let v: Vec<u8> = r.parts().concat();
            std::string::String::from_utf8(v).unwrap()
        })
    }

    #[test]
    fn read_only_verbs_are_answered_others_wake() {
        let status = br#"{"state":{"status":"dormant"},"stats":{"rss":1}}"#;
        assert_eq!(
            line(answer(br#"{"op":"state"}"#, status)).unwrap(),
            "{\"ok\":true,\"data\":{\"status\":\"dormant\"}}\n"
        );
        assert!(line(answer(br#"{"op": "stats", "id": "x"}"#, status))
            .unwrap()
            .contains("\"data\":{\"rss\":1}"));
        assert_eq!(answer(br#"{"op":"exec","args":["ls"]}"#, status), None);
        assert_eq!(answer(br#"{"op":"wake"}"#, status), None);
        assert_eq!(answer(br#"{"args":[]}"#, status), None);
        assert_eq!(answer(br#"{"op":1}"#, status), None);
        assert_eq!(answer(br#"{"op":"delete"}"#, status), Some(Reply::Done));
        assert!(line(answer(b"not json", status))
            .unwrap()
            .contains("\"ok\":false"));
        // A status without the verb's answer: the sandbox answers itself.
        assert_eq!(answer(br#"{"op":"stats"}"#, b"{}"), None);
        // Every reply is one line of JSON.
        for r in [
            answer(br#"{"op":"state"}"#, status),
            Some(Reply::Done),
            Some(Reply::BadRequest),
        ] {
            let l = line(r).unwrap();
            assert_eq!(l.matches('\n').count(), 1);
            assert!(l.ends_with('\n'));
            assert_eq!(
                crate::json::member(l.trim_end().as_bytes(), "ok").map(|o| o.is_some()),
                Ok(true)
            );
        }
    }

    #[test]
    fn the_status_file_is_checked() {
        let dir =
            std::env::temp_dir().join(std::format!("torpor-dormant-status-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = |n: &str| std::ffi::CString::new(dir.join(n).to_str().unwrap()).unwrap();
        std::fs::write(dir.join("ok"), br#"{"state":{}}"#).unwrap();
        std::fs::write(dir.join("bad"), b"{\"state\":").unwrap();
        std::fs::write(dir.join("big"), [b' '; 100]).unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(
            load_status(&path("ok"), &mut buf),
            Ok(&br#"{"state":{}}"#[..])
        );
        assert_eq!(
            load_status(&path("bad"), &mut buf),
            Err(StatusError::NotJson)
        );
        assert_eq!(
            load_status(&path("big"), &mut buf),
            Err(StatusError::TooLarge)
        );
        assert_eq!(
            load_status(&path("missing"), &mut buf),
            Err(StatusError::Read(Errno(libc::ENOENT)))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
