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
//! holder's death, even by SIGKILL: unmount and remove the page files (swap, REAP, a
//! checkpoint being written); the directory stays, with the output log and the error file,
//! for `torpor state` to report the error and for `delete` to remove).
//!
//! A detached sandbox lets its janitor go ([`Janitor::dismiss`]: one process while it
//! sleeps) when it goes dormant and, if root started it, when it first hibernates; its end
//! is then `delete`'s to clean up, or the next torpor command's after a SIGKILL. Sandboxes
//! with a cgroup of their own keep it, and so do rootless ones while hibernated.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use anyhow::{Context, Result};

use crate::cowroot::CowRoot;

/// The holder's side of its janitor. Dropping it is [`Janitor::finish`] (an early error of
/// the holder cleans up as its end does).
#[derive(Debug)]
pub struct Janitor {
    /// The holder's end of the request pipe: a byte asks for the clean-up; its closing (the
    /// holder's exit) says the holder is gone.
    request: Option<OwnedFd>,
    /// Where the janitor says it is done with the directory.
    done: Option<OwnedFd>,
    /// Its process id (0: not known, as in a holder woken from dormancy).
    pid: libc::pid_t,
}

/// A pipe: (read end, write end), close-on-exec.
fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pipe2 for the janitor");
    }
    // SAFETY: both descriptors are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Forks the janitor of the sandbox whose copy-on-write root is `cow` and whose state
/// directory is `dir` (and whose cgroup, if any, is `cgroup`: the janitor removes it once the
/// holder has left it, at its exit); from now on the janitor, not `cow`'s drop, unmounts the
/// root.
///
/// # Errors
/// If a pipe or the fork fails (`cow` is then dropped: unmounted here).
///
/// # Preconditions
/// The process is single-threaded (as after `cowroot::prepare`): the child runs ordinary code.
pub fn spawn(cow: CowRoot, dir: &Path, cgroup: Option<String>) -> Result<Janitor> {
    let merged = cow.merged().to_path_buf();
    let dir = dir.to_path_buf();
    let (request_r, request_w) = pipe()?;
    let (done_r, done_w) = pipe()?;
    // SAFETY: the process is single-threaded (precondition), so the child may run any code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error()).context("forking the janitor");
    }
    if pid == 0 {
        drop(request_w);
        drop(done_r);
        janitor_main(&request_r, &done_w, &merged, &dir, cgroup.as_deref());
    }
    drop(request_r);
    drop(done_w);
    // The janitor unmounts: the holder must not (it will not be allowed to).
    cow.disown();
    Ok(Janitor {
        request: Some(request_w),
        done: Some(done_r),
        pid,
    })
}

impl Janitor {
    /// Asks the janitor to unmount the root and remove the state directory now, and waits
    /// until it has (the holder's last act).
    pub fn finish(self) {
        drop(self);
    }

    /// Lets the janitor go without cleaning anything (a holder going dormant: one process
    /// less while it sleeps). From then on the sandbox's end is `delete`'s to clean up (it
    /// removes the directory once the holder is gone; its mount namespace, and the root
    /// mounted in it, end with the holder), or the next sandbox's start's
    /// (`statedir::cleanup_orphans`) after a SIGKILL. Returns once the janitor has exited.
    pub fn dismiss(mut self) {
        let (Some(request), Some(done)) = (self.request.take(), self.done.take()) else {
            return;
        };
        let byte = [DISMISS];
        // SAFETY: one byte from a local buffer to our pipe.
        unsafe { libc::write(request.as_raw_fd(), byte.as_ptr().cast(), 1) };
        // Its exit closes its end of the answer pipe; then it is reaped (the dormant process
        // waits for no child).
        while read_byte(done.as_raw_fd()).is_some() {}
        if self.pid > 0 {
            // SAFETY: waitpid of our own child, which has exited.
            unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), 0) };
        }
    }

    /// The holder's two pipe ends, made to survive an `execve` (a holder going dormant): the
    /// janitor keeps waiting for the process, whatever image it runs. Give them back with
    /// [`Janitor::from_raw_fds`] in the new image.
    ///
    /// # Errors
    /// The host's refusal to change a descriptor's flags (the janitor then stays as it was).
    pub fn into_raw_fds(mut self) -> std::io::Result<(i32, i32)> {
        let (Some(request), Some(done)) = (self.request.as_ref(), self.done.as_ref()) else {
            return Err(std::io::Error::from_raw_os_error(libc::EBADF));
        };
        for fd in [request.as_raw_fd(), done.as_raw_fd()] {
            crate::dormancy::set_cloexec(fd, false)?;
        }
        let request = self.request.take().map(std::os::fd::IntoRawFd::into_raw_fd);
        let done = self.done.take().map(std::os::fd::IntoRawFd::into_raw_fd);
        Ok((request.unwrap_or(-1), done.unwrap_or(-1)))
    }

    /// The janitor of a holder that went dormant and woke in this image, from the pipe ends
    /// [`Janitor::into_raw_fds`] kept (close-on-exec again from here).
    ///
    /// # Errors
    /// A descriptor that is not open.
    pub fn from_raw_fds(request: i32, done: i32) -> std::io::Result<Janitor> {
        for fd in [request, done] {
            crate::dormancy::set_cloexec(fd, true)?;
        }
        // SAFETY: the two descriptors were handed over by the image this process ran before
        // (`into_raw_fds`), open and owned by nobody else in this one.
        Ok(unsafe {
            Janitor {
                request: Some(OwnedFd::from_raw_fd(request)),
                done: Some(OwnedFd::from_raw_fd(done)),
                pid: 0,
            }
        })
    }
}

impl Drop for Janitor {
    fn drop(&mut self) {
        let (Some(request), Some(done)) = (self.request.take(), self.done.take()) else {
            return;
        };
        let byte = [FINISH];
        // SAFETY: one byte from a local buffer to our pipe.
        unsafe { libc::write(request.as_raw_fd(), byte.as_ptr().cast(), 1) };
        // Its answer, or the end of the pipe if it died.
        let mut b = [0u8; 1];
        loop {
            // SAFETY: reading one byte into a local buffer from our pipe.
            let n = unsafe { libc::read(done.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
            if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
        // The request pipe closes with this process: then the janitor knows the holder has
        // left its cgroup.
        std::mem::forget(request);
    }
}

/// The request byte that asks for the clean-up.
const FINISH: u8 = 1;
/// The request byte that lets the janitor go without cleaning ([`Janitor::dismiss`]).
const DISMISS: u8 = 2;

/// Reads one byte from `fd`: the byte, or None at the end of the pipe (or an error).
fn read_byte(fd: i32) -> Option<u8> {
    let mut b = [0u8; 1];
    loop {
        // SAFETY: reading one byte into a local buffer from our pipe.
        let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return (n == 1).then_some(b[0]);
    }
}

/// The janitor's whole life: wait, clean up, exit.
fn janitor_main(
    request: &OwnedFd,
    done: &OwnedFd,
    merged: &Path,
    dir: &Path,
    cgroup: Option<&str>,
) -> ! {
    let (rq, dn) = (request.as_raw_fd(), done.as_raw_fd());
    let (lo, hi) = (rq.min(dn) as u32, rq.max(dn) as u32);
    // SAFETY: closing inherited descriptors but our two pipes (none of the others is used by
    // this process again) and ignoring the terminal's signals (a Ctrl-C aimed at `torpor run`
    // must not kill the janitor before it cleans up).
    unsafe {
        if lo > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, lo - 1, 0u32);
        }
        if hi > lo + 1 {
            libc::syscall(libc::SYS_close_range, lo + 1, hi - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, hi + 1, u32::MAX, 0u32);
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
    let request = read_byte(rq);
    if request == Some(DISMISS) {
        // SAFETY: ending the child without running the parent's exit handlers.
        unsafe { libc::_exit(0) }
    }
    let asked = request.is_some();
    let _ = crate::cowroot::unmount_path(merged);
    // A holder that died without asking (a corrupt swap file, SIGKILL) leaves its directory
    // for `torpor state` to report (its error file) and for `delete` or the next `list` to
    // remove, as before there was a janitor; but its swap and REAP files and a checkpoint it
    // was writing, which can be gigabytes and explain nothing, go at once.
    if !asked {
        hibernate::engine::remove_page_files(dir);
        let _ = crate::cowroot::remove_all(&dir.join(crate::snapshot::restoring::HOLDER_OUTPUT));
        // A dormant sandbox's state (its checkpoint) goes with its process.
        crate::dormancy::remove_state(dir);
    }
    if asked {
        let _ = crate::cowroot::remove_all(dir);
        let byte = [1u8];
        // SAFETY: one byte from a local buffer to our pipe.
        unsafe { libc::write(dn, byte.as_ptr().cast(), 1) };
        // Then the holder's exit.
        while read_byte(rq).is_some() {}
    }
    // The sandbox's cgroup (`--cpus`) is empty once the holder is gone.
    if let Some(path) = cgroup {
        let _ = crate::oci::cgroup::remove(path);
    }
    // SAFETY: ending the child without running the parent's exit handlers.
    unsafe { libc::_exit(0) }
}
