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
    /// Deflate now.
    Hibernate,
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

/// Sends `req` to the sandbox whose directory is `dir` and returns its payload.
pub fn call(dir: &Path, req: &Request, timeout: Duration) -> Result<serde_json::Value> {
    let sock = dir.join("control.sock");
    let (path, _dirfd) = short_path(&sock)?;
    let mut s =
        UnixStream::connect(&path).with_context(|| format!("connecting to {}", sock.display()))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let mut line = serde_json::to_string(req)?;
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut resp = String::new();
    BufReader::new(s)
        .read_line(&mut resp)
        .context("reading the sandbox's answer")?;
    let r: Response = serde_json::from_str(resp.trim()).context("decoding the sandbox's answer")?;
    if r.ok {
        Ok(r.data.unwrap_or(serde_json::Value::Null))
    } else {
        Err(anyhow!(r.error.unwrap_or_else(|| "unknown error".into())))
    }
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
        assert!(matches!(r, Request::Hibernate));
        assert!(serde_json::from_str::<Request>(r#"{"op":"rm -rf"}"#).is_err());
    }
}
