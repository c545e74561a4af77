//! The host calls of the dormant process, made directly (`syscall` instruction): the process
//! links no C library, so that it maps nothing but its own few pages (no dynamic loader, no
//! libc relocations, no heap).

use core::ffi::CStr;

/// A descriptor number.
pub type Fd = i32;

/// A host error number (`errno`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    /// The C library's text for the common numbers, else `os error N`.
    pub fn describe(self) -> &'static str {
        match self.0 {
            libc::EPERM => "Operation not permitted",
            libc::ENOENT => "No such file or directory",
            libc::EINTR => "Interrupted system call",
            libc::EIO => "Input/output error",
            libc::E2BIG => "Argument list too long",
            libc::ENOEXEC => "Exec format error",
            libc::EBADF => "Bad file descriptor",
            libc::ENOMEM => "Cannot allocate memory",
            libc::EACCES => "Permission denied",
            libc::EFAULT => "Bad address",
            libc::ENOTDIR => "Not a directory",
            libc::EISDIR => "Is a directory",
            libc::EINVAL => "Invalid argument",
            libc::EMFILE => "Too many open files",
            libc::EFBIG => "File too large",
            libc::ENAMETOOLONG => "File name too long",
            libc::ELOOP => "Too many levels of symbolic links",
            libc::ENOTSOCK => "Socket operation on non-socket",
            libc::EEXIST => "File exists",
            _ => "os error",
        }
    }
}

/// A call's result: its value, or the host's error.
pub type SysResult<T> = Result<T, Errno>;

/// `syscall(n, a, b, c, d, e, f)`.
///
/// # Safety
/// The arguments must be valid for call `n`: every pointer to memory of the right size and
/// lifetime for what the host reads or writes there.
#[cfg(target_arch = "x86_64")]
unsafe fn syscall6(n: i64, a: usize, b: usize, c: usize, d: usize, e: usize, f: usize) -> isize {
    let ret: isize;
    // SAFETY: the Linux x86-64 system call convention; the kernel clobbers rcx and r11 only.
    // What the call does with the arguments is the caller's contract.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            in("r10") d,
            in("r8") e,
            in("r9") f,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// [`syscall6`] of a call with three arguments.
///
/// # Safety
/// As [`syscall6`].
unsafe fn syscall3(n: i64, a: usize, b: usize, c: usize) -> isize {
    // SAFETY: the caller's contract.
    unsafe { syscall6(n, a, b, c, 0, 0, 0) }
}

#[cfg(not(target_arch = "x86_64"))]
compile_error!("torpor-dormant makes its host calls for x86-64 only");

/// A raw result as [`SysResult`].
fn check(ret: isize) -> SysResult<usize> {
    if (-4095..0).contains(&ret) {
        Err(Errno(-ret as i32))
    } else {
        Ok(ret as usize)
    }
}

/// `read(fd, buf)`, retried on EINTR.
pub fn read(fd: Fd, buf: &mut [u8]) -> SysResult<usize> {
    loop {
        // SAFETY: the host writes at most `buf.len()` bytes into `buf`.
        let r = unsafe {
            syscall3(
                libc::SYS_read,
                fd as usize,
                buf.as_mut_ptr() as usize,
                buf.len(),
            )
        };
        match check(r) {
            Err(Errno(libc::EINTR)) => continue,
            r => return r,
        }
    }
}

/// Writes all of `buf` to `fd` (a short write is continued, EINTR retried).
pub fn write_all(fd: Fd, mut buf: &[u8]) -> SysResult<()> {
    while !buf.is_empty() {
        // SAFETY: the host reads at most `buf.len()` bytes of `buf`.
        let r = unsafe {
            syscall3(
                libc::SYS_write,
                fd as usize,
                buf.as_ptr() as usize,
                buf.len(),
            )
        };
        match check(r) {
            Ok(0) => return Err(Errno(libc::EIO)),
            Ok(n) => buf = &buf[n.min(buf.len())..],
            Err(Errno(libc::EINTR)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Opens `path` for reading, close-on-exec.
pub fn open_read(path: &CStr) -> SysResult<Fd> {
    // SAFETY: a NUL-terminated path the host only reads.
    let r = unsafe {
        syscall3(
            libc::SYS_openat,
            libc::AT_FDCWD as usize,
            path.as_ptr() as usize,
            (libc::O_RDONLY | libc::O_CLOEXEC) as usize,
        )
    };
    check(r).map(|fd| fd as Fd)
}

/// Closes `fd` (its error, as close's always, ignored).
pub fn close(fd: Fd) {
    // SAFETY: close takes no pointers.
    unsafe { syscall6(libc::SYS_close, fd as usize, 0, 0, 0, 0, 0) };
}

/// Sets or clears `FD_CLOEXEC` on `fd`.
pub fn set_cloexec(fd: Fd, on: bool) -> SysResult<()> {
    let flags = if on { libc::FD_CLOEXEC } else { 0 };
    // SAFETY: F_SETFD takes an integer.
    let r = unsafe {
        syscall3(
            libc::SYS_fcntl,
            fd as usize,
            libc::F_SETFD as usize,
            flags as usize,
        )
    };
    check(r).map(|_| ())
}

/// `epoll_create1(EPOLL_CLOEXEC)`.
pub fn epoll_create() -> SysResult<Fd> {
    // SAFETY: takes no pointers.
    let r = unsafe { syscall3(libc::SYS_epoll_create1, libc::EPOLL_CLOEXEC as usize, 0, 0) };
    check(r).map(|fd| fd as Fd)
}

/// Adds `fd` to epoll `ep` for `events`, its number as the event's data.
pub fn epoll_add(ep: Fd, fd: Fd, events: u32) -> SysResult<()> {
    let ev = libc::epoll_event {
        events,
        u64: fd as u64,
    };
    // SAFETY: `ev` is a live epoll_event the host only reads.
    let r = unsafe {
        syscall6(
            libc::SYS_epoll_ctl,
            ep as usize,
            libc::EPOLL_CTL_ADD as usize,
            fd as usize,
            &ev as *const libc::epoll_event as usize,
            0,
            0,
        )
    };
    check(r).map(|_| ())
}

/// Waits without a timeout for events of `ep`; the number filled in `events` (EINTR: 0).
pub fn epoll_wait(ep: Fd, events: &mut [libc::epoll_event]) -> SysResult<usize> {
    // SAFETY: the host writes at most `events.len()` entries into `events`.
    let r = unsafe {
        syscall6(
            libc::SYS_epoll_wait,
            ep as usize,
            events.as_mut_ptr() as usize,
            events.len().min(i32::MAX as usize),
            usize::MAX, // -1: no timeout
            0,
            0,
        )
    };
    match check(r) {
        Err(Errno(libc::EINTR)) => Ok(0),
        r => r,
    }
}

/// Accepts a connection on `fd`, close-on-exec.
pub fn accept(fd: Fd) -> SysResult<Fd> {
    // SAFETY: null address pointers: the peer's address is not asked for.
    let r = unsafe {
        syscall6(
            libc::SYS_accept4,
            fd as usize,
            0,
            0,
            libc::SOCK_CLOEXEC as usize,
            0,
            0,
        )
    };
    check(r).map(|fd| fd as Fd)
}

/// Looks at what waits in socket `fd` without consuming it and without blocking
/// (`MSG_PEEK | MSG_DONTWAIT`); EAGAIN as `Ok(None)`.
pub fn peek(fd: Fd, buf: &mut [u8]) -> SysResult<Option<usize>> {
    // SAFETY: the host writes at most `buf.len()` bytes into `buf`; null address pointers.
    let r = unsafe {
        syscall6(
            libc::SYS_recvfrom,
            fd as usize,
            buf.as_mut_ptr() as usize,
            buf.len(),
            (libc::MSG_PEEK | libc::MSG_DONTWAIT) as usize,
            0,
            0,
        )
    };
    match check(r) {
        Ok(n) => Ok(Some(n)),
        Err(Errno(libc::EAGAIN)) | Err(Errno(libc::EINTR)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Waits up to `ms` milliseconds for `fd` to be readable; whether it is.
pub fn wait_readable(fd: Fd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, which the host reads and writes.
    let r = unsafe {
        syscall3(
            libc::SYS_poll,
            &mut p as *mut libc::pollfd as usize,
            1,
            ms as usize,
        )
    };
    matches!(check(r), Ok(n) if n > 0)
}

/// Milliseconds of the monotonic clock.
pub fn now_ms() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the host writes one timespec into `t`.
    unsafe {
        syscall3(
            libc::SYS_clock_gettime,
            libc::CLOCK_MONOTONIC as usize,
            &mut t as *mut libc::timespec as usize,
            0,
        )
    };
    (t.tv_sec as u64) * 1000 + (t.tv_nsec as u64) / 1_000_000
}

/// Sleeps one millisecond.
pub fn sleep_1ms() {
    let t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    // SAFETY: the host reads one timespec; no remainder is asked for.
    unsafe {
        syscall3(
            libc::SYS_nanosleep,
            &t as *const libc::timespec as usize,
            0,
            0,
        )
    };
}

/// `execveat(fd, "", argv, envp, AT_EMPTY_PATH)`: runs the file open as `fd`. Returns only
/// on failure.
///
/// # Safety
/// `argv` and `envp` are null-terminated arrays of pointers to NUL-terminated strings.
pub unsafe fn exec_fd(fd: Fd, argv: *const *const u8, envp: *const *const u8) -> Errno {
    // SAFETY: an empty NUL-terminated path; the arrays are the caller's contract.
    let r = unsafe {
        syscall6(
            libc::SYS_execveat,
            fd as usize,
            c"".as_ptr() as usize,
            argv as usize,
            envp as usize,
            libc::AT_EMPTY_PATH as usize,
            0,
        )
    };
    check(r).err().unwrap_or(Errno(libc::EINVAL))
}

/// `execve(path, argv, envp)`. Returns only on failure.
///
/// # Safety
/// As [`exec_fd`]; `path` is NUL-terminated.
pub unsafe fn exec_path(path: *const u8, argv: *const *const u8, envp: *const *const u8) -> Errno {
    // SAFETY: the caller's contract.
    let r = unsafe {
        syscall3(
            libc::SYS_execve,
            path as usize,
            argv as usize,
            envp as usize,
        )
    };
    check(r).err().unwrap_or(Errno(libc::EINVAL))
}

/// Ends the process with `code`.
pub fn exit(code: i32) -> ! {
    // SAFETY: exit_group takes no pointers and does not return.
    unsafe {
        core::arch::asm!(
            "syscall",
            in("rax") libc::SYS_exit_group,
            in("rdi") code,
            options(noreturn, nostack),
        )
    }
}

/// Writes `parts` to standard error (errors ignored: nowhere else to report them).
pub fn eprint(parts: &[&[u8]]) {
    for p in parts {
        let _ = write_all(2, p);
    }
}

/// `n` in decimal into `buf`; the digits written.
pub fn decimal(n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    let mut n = n;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;

    #[test]
    fn decimals() {
        let mut b = [0u8; 20];
        assert_eq!(decimal(0, &mut b), b"0");
        assert_eq!(decimal(4096, &mut b), b"4096");
        assert_eq!(decimal(u64::MAX, &mut b), b"18446744073709551615");
    }

    #[test]
    fn calls_and_their_errors() {
        assert_eq!(open_read(c"/nonexistent/x"), Err(Errno(libc::ENOENT)));
        assert_eq!(Errno(libc::ENOENT).describe(), "No such file or directory");
        let fd = open_read(c"/proc/self/stat").expect("open");
        let mut buf = [0u8; 64];
        let n = read(fd, &mut buf).expect("read");
        assert!(n > 0);
        close(fd);
        assert_eq!(read(1 << 20, &mut buf), Err(Errno(libc::EBADF)));
        assert!(now_ms() > 0);
    }
}
