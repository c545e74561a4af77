//! A minimal HTTP/1.0 GET client for the benchmark (one connection per request).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A response: status code and body.
#[derive(Debug)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// Body bytes (after the headers).
    pub body: Vec<u8>,
}

/// Sends `GET path` to `addr` and reads the whole response (the server closes the
/// connection, or Content-Length bytes arrive).
///
/// # Errors
/// Connection, timeout or parse errors.
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> std::io::Result<Response> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.set_nodelay(true)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if let Some(len) = len {
                if buf.len() >= end + 4 + len {
                    break;
                }
            }
        }
    }
    let end = find(&buf, b"\r\n\r\n").ok_or_else(|| bad("no end of headers"))?;
    let status = String::from_utf8_lossy(&buf[..end])
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status code"))?;
    Ok(Response {
        status,
        body: buf[end + 4..].to_vec(),
    })
}

/// Sends a GET and returns its latency in milliseconds, checking the status is 200 and the
/// body contains `want`.
///
/// # Errors
/// A failed request, or an unexpected answer.
pub fn timed_get(
    addr: SocketAddr,
    path: &str,
    want: &str,
    timeout: Duration,
) -> anyhow::Result<f64> {
    let t = Instant::now();
    let r = get(addr, path, timeout)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let body = String::from_utf8_lossy(&r.body);
    if r.status != 200 || !body.contains(want) {
        anyhow::bail!(
            "GET {path}: status {}, body {:?} (expected {want:?})",
            r.status,
            body.chars().take(200).collect::<String>()
        );
    }
    Ok(ms)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
