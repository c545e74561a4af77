//! `torpor-dormant --status FILE --control FD [--watch FD]... -- WAKE...`: see the library.
//! On a wake it execs `WAKE... --woken-by FD` (FD: the watched descriptor that became ready,
//! or the control connection whose request waits unread), every descriptor inherited.

use std::ffi::CString;
use std::os::fd::{IntoRawFd, RawFd};
use std::process::ExitCode;

fn keep_across_exec(fd: RawFd) {
    // SAFETY: F_SETFD on a descriptor of ours; clearing FD_CLOEXEC only.
    unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
}

extern "C" {
    /// The C library's environment of this process.
    static environ: *const *const libc::c_char;
}

/// This process's environment, as `execve` takes it.
fn environment() -> *const *const libc::c_char {
    // SAFETY: reading the C library's `environ` pointer (no thread changes it here).
    unsafe { environ }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match dormant::Options::parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("torpor-dormant: {e}");
            return ExitCode::from(2);
        }
    };
    let woken_by = match dormant::serve(&opts) {
        Ok(dormant::Wake::Watched(fd)) => fd,
        Ok(dormant::Wake::Request(conn)) => conn.into_raw_fd(),
        Ok(dormant::Wake::Deleted) => return ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("torpor-dormant: {e}");
            return ExitCode::from(1);
        }
    };
    keep_across_exec(woken_by);
    let mut argv = opts.wake.clone();
    argv.push("--woken-by".into());
    argv.push(woken_by.to_string());
    let Ok(argv) = argv
        .into_iter()
        .map(CString::new)
        .collect::<Result<Vec<_>, _>>()
    else {
        eprintln!("torpor-dormant: a wake argument holds a NUL byte");
        return ExitCode::from(2);
    };
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    match opts.exec_fd {
        // SAFETY: an empty NUL-terminated path with AT_EMPTY_PATH (the descriptor is the
        // file), a null-terminated array of NUL-terminated strings alive across the call,
        // and our own environment.
        Some(fd) => unsafe {
            keep_across_exec(fd);
            libc::syscall(
                libc::SYS_execveat,
                fd,
                c"".as_ptr(),
                ptrs.as_ptr(),
                environment(),
                libc::AT_EMPTY_PATH,
            );
        },
        // SAFETY: a NUL-terminated path and a null-terminated array of NUL-terminated
        // strings, all alive across the call; the environment is ours.
        None => unsafe {
            libc::execvp(ptrs[0], ptrs.as_ptr());
        },
    }
    eprintln!(
        "torpor-dormant: exec {:?}: {}",
        opts.wake[0],
        std::io::Error::last_os_error()
    );
    ExitCode::from(1)
}
