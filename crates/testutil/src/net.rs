//! Network helpers: free ports and a minimal HTTP/1.1 client.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// A TCP port on 127.0.0.1 that was free a moment ago (bound, then released).
///
/// # Panics
///
/// When no port can be bound.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

/// A parsed HTTP response.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// The status code, e.g. 200.
    pub status: u16,
    /// Header lines, as (name, value).
    pub headers: Vec<(String, String)>,
    /// The body (`Content-Length` bytes, or up to EOF without one).
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as (lossy) UTF-8.
    pub fn body_str(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Reads one response from `stream` (which may stay open for keep-alive).
pub fn read_response(stream: &mut TcpStream) -> io::Result<HttpResponse> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte)? == 0 {
            return Err(invalid(format!(
                "connection closed inside the header: {:?}",
                String::from_utf8_lossy(&head)
            )));
        }
        head.push(byte[0]);
        if head.len() > 65536 {
            return Err(invalid("header too long".into()));
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid(format!("bad status line {status_line:?}")))?;
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let len = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| {
            v.parse::<usize>()
                .map_err(|_| invalid(format!("bad Content-Length {v:?}")))
        })
        .transpose()?;
    let mut body = Vec::new();
    match len {
        Some(n) => {
            body.resize(n, 0);
            stream.read_exact(&mut body)?;
        }
        None => {
            stream.read_to_end(&mut body)?;
        }
    }
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

/// `GET path` on a new connection with `Connection: close`; every step is
/// bounded by `timeout`.
pub fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> io::Result<HttpResponse> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    read_response(&mut s)
}

/// Whether a server at `addr` answers `GET /` within `within` (a request every 20 ms or so,
/// each bounded by 10 s): for a server that is still starting.
pub fn answers_within(addr: SocketAddr, within: Duration) -> bool {
    crate::Detached::wait_until(within, || {
        http_get(addr, "/", Duration::from_secs(10)).is_ok()
    })
}
