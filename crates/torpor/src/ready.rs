//! The readiness pipe between a command that starts a holder process in the background
//! (`run -d`, OCI `create`, `exec --detach`) and that process: the holder writes one line,
//! `ok` once it is ready or `error: MESSAGE`, and the starting command returns only then, with
//! the holder's error as its own.

use std::io::{BufRead, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Command};

use anyhow::{Context, Result};

/// The starting side: a pipe whose write end the child inherits.
pub struct Readiness {
    rd: std::fs::File,
    wr: OwnedFd,
}

impl Readiness {
    /// A new pipe (both ends close-on-exec; [`Readiness::spawn`] keeps the write end open in
    /// the child).
    ///
    /// # Errors
    /// The host's error.
    pub fn new() -> Result<Readiness> {
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for the two ends.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error()).context("creating the readiness pipe");
        }
        // SAFETY: both ends are fresh fds owned here.
        let (rd, wr) = unsafe {
            (
                std::fs::File::from_raw_fd(fds[0]),
                OwnedFd::from_raw_fd(fds[1]),
            )
        };
        Ok(Readiness { rd, wr })
    }

    /// The two ends, for a caller that forks instead of spawning (`exec --detach`).
    pub fn into_parts(self) -> (std::fs::File, OwnedFd) {
        (self.rd, self.wr)
    }

    /// The descriptor number the child writes to (give it as `--ready-fd=N`).
    pub fn child_fd(&self) -> i32 {
        self.wr.as_raw_fd()
    }

    /// Spawns `cmd` (keeping the write end open across its exec) and waits for its line:
    /// the child once it says `ok`; otherwise the child has been waited for and the error is
    /// its message (empty if it died without one).
    ///
    /// # Errors
    /// Starting `cmd` fails: the host's error, with `what` as context.
    pub fn spawn(self, mut cmd: Command, what: &str) -> Result<std::result::Result<Child, String>> {
        use std::os::unix::process::CommandExt;
        let wfd = self.child_fd();
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                libc::fcntl(wfd, libc::F_SETFD, 0);
                Ok(())
            });
        }
        let mut child = cmd.spawn().with_context(|| format!("starting {what}"))?;
        drop(self.wr);
        let mut line = String::new();
        std::io::BufReader::new(self.rd).read_line(&mut line).ok();
        let line = line.trim();
        if line == "ok" {
            return Ok(Ok(child));
        }
        let _ = child.wait();
        Ok(Err(line
            .strip_prefix("error: ")
            .unwrap_or(line)
            .to_string()))
    }
}

/// The holder's side: reports `ok`, or `error: E`, on the pipe it was given (if any).
pub fn report(ready: Option<OwnedFd>, result: std::result::Result<(), &anyhow::Error>) {
    if let Some(r) = ready {
        let mut f = std::fs::File::from(r);
        let _ = match result {
            Ok(()) => writeln!(f, "ok"),
            Err(e) => writeln!(f, "error: {e:#}"),
        };
    }
}

/// The holder's end of the pipe, from the `--ready-fd` it was given (`None` for -1).
pub fn from_fd(fd: i32) -> Option<OwnedFd> {
    if fd < 0 {
        return None;
    }
    // SAFETY: the starting command passed this fd to us for this purpose only; we own it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}
