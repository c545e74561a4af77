//! The janitor of a friendly-form sandbox (`torpor run ROOTFS -- PROGRAM`): a child process,
//! forked while the holder is still single-threaded and unconfined, that unmounts the
//! sandbox's copy-on-write root and removes its state directory when the holder asks, or as
//! soon as the holder dies.
//!
//! Why a second process: the holder confines itself (docs/SECURITY.md) with Landlock, which
//! forbids unmounting, and without `CAP_SYS_ADMIN`; yet a sandbox's end must take its overlay
//! down before its directory can be removed (`cowroot::remove_all` refuses a mounted one). The
//! janitor shares the holder's private mount namespace, keeps the holder's privileges, and runs
//! none of the code the application can reach: it closes every inherited descriptor but its
//! end of a pipe, ignores the terminal's signals, and waits for one byte (the holder's
//! [`Janitor::finish`]: unmount and remove the directory) or the end of the pipe (the
//! holder's death, even by SIGKILL: unmount only, the directory stays for `torpor state` to
//! report the error and for `delete` to remove).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::cowroot::CowRoot;

/// The holder's side of its janitor. Dropping it is [`Janitor::finish`] (an early error of
/// the holder cleans up as its end does).
#[derive(Debug)]
pub struct Janitor {
    pid: libc::pid_t,
    pipe: Option<OwnedFd>,
}

/// Forks the janitor of the sandbox whose copy-on-write root is `cow` and whose state
/// directory is `dir`; from now on the janitor, not `cow`'s drop, unmounts the root.
///
/// # Errors
/// If the pipe or the fork fails (`cow` is then dropped: unmounted here).
///
/// # Preconditions
/// The process is single-threaded (as after `cowroot::prepare`): the child runs ordinary code.
pub fn spawn(cow: CowRoot, dir: &Path) -> Result<Janitor> {
    let merged = cow.merged().to_path_buf();
    let dir = dir.to_path_buf();
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pipe2 for the janitor");
    }
    // SAFETY: both descriptors are fresh and owned by nobody else.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the process is single-threaded (precondition), so the child may run any code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error()).context("forking the janitor");
    }
    if pid == 0 {
        drop(write_end);
        janitor_main(read_end, &merged, &dir);
    }
    drop(read_end);
    // The janitor unmounts: the holder must not (it will not be allowed to).
    cow.disown();
    Ok(Janitor {
        pid,
        pipe: Some(write_end),
    })
}

impl Janitor {
    /// Asks the janitor to unmount the root and remove the state directory now, and waits
    /// until it has (the holder's last act).
    pub fn finish(self) {
        drop(self);
    }
}

impl Drop for Janitor {
    fn drop(&mut self) {
        let Some(pipe) = self.pipe.take() else {
            return;
        };
        let byte = [1u8];
        // SAFETY: one byte from a local buffer to our pipe.
        unsafe { libc::write(pipe.as_raw_fd(), byte.as_ptr().cast(), 1) };
        drop(pipe);
        let mut status = 0;
        loop {
            // SAFETY: waiting for our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if r >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
    }
}

/// The janitor's whole life: wait, clean up, exit.
fn janitor_main(pipe: OwnedFd, merged: &Path, dir: &PathBuf) -> ! {
    let fd = pipe.as_raw_fd();
    // SAFETY: closing inherited descriptors (none of them is used by this process again) and
    // ignoring the terminal's signals (a Ctrl-C aimed at `torpor run` must not kill the
    // janitor before it cleans up).
    unsafe {
        if fd > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (fd - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (fd + 1) as u32, u32::MAX, 0u32);
        for sig in [
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGHUP,
            libc::SIGTERM,
            libc::SIGPIPE,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    let mut b = [0u8; 1];
    let asked = loop {
        // SAFETY: reading one byte into a local buffer from our pipe.
        let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        break n == 1;
    };
    let _ = crate::cowroot::unmount_path(merged);
    // A holder that died without asking (a corrupt swap file, SIGKILL) leaves its directory
    // for `torpor state` to report (its error file) and for `delete` or the next `list` to
    // remove, as before there was a janitor.
    if asked {
        let _ = crate::cowroot::remove_all(dir);
    }
    // SAFETY: ending the child without running the parent's exit handlers.
    unsafe { libc::_exit(0) }
}
