//! Host calls about the calling thread and the machine it runs on: clocks, the thread's
//! resource usage, the clock tick, the host's system name, random bytes and the scheduler's
//! time slice. Each wraps one libc call and returns plain values or the host's errno, so that
//! the syscall handlers above stay free of `unsafe`.

use abi::Errno;

const ZERO_TIMESPEC: libc::timespec = libc::timespec {
    tv_sec: 0,
    tv_nsec: 0,
};

/// The host clock `clock` now (clock_gettime(2)).
///
/// # Errors
/// The host's errno (EINVAL for an unknown clock).
pub fn clock_now(clock: libc::clockid_t) -> Result<libc::timespec, Errno> {
    let mut ts = ZERO_TIMESPEC;
    // SAFETY: a clock id and a valid output buffer.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return Err(Errno::last());
    }
    Ok(ts)
}

/// The CPU clock of the calling host thread, if the host gives one.
pub fn thread_cpu_clock() -> Option<libc::clockid_t> {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: the calling thread's own handle and a valid output.
    (unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) } == 0).then_some(clock)
}

/// The calling host thread's resource usage (getrusage(2) with RUSAGE_THREAD).
///
/// # Errors
/// The host's errno.
pub fn thread_usage() -> Result<libc::rusage, Errno> {
    // SAFETY: `libc::rusage` is plain integers; all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid output buffer.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return Err(Errno::last());
    }
    Ok(ru)
}

/// The host's clock ticks per second (`_SC_CLK_TCK`, at least 1).
pub fn ticks_per_second() -> i64 {
    // SAFETY: sysconf takes no pointers.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1)
}

/// The host's elapsed clock ticks since an arbitrary point (times(2)'s result).
pub fn elapsed_ticks() -> i64 {
    // SAFETY: times(2) accepts a null buffer on Linux.
    unsafe { libc::times(std::ptr::null_mut()) }
}

/// The host's uname(2) answer (all fields empty should the host refuse).
pub fn uname() -> libc::utsname {
    // SAFETY: `libc::utsname` is byte arrays; all zeroes is a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: a valid output buffer; on failure it stays zeroed.
    unsafe { libc::uname(&mut u) };
    u
}

/// The bytes of a `utsname` field, up to its NUL.
pub fn uts_field(field: &[libc::c_char]) -> Vec<u8> {
    field
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect()
}

/// Random bytes from the host's pool into `buf` (getrandom(2) with `flags`); how many.
///
/// # Errors
/// The host's errno (EINTR, EAGAIN with GRND_NONBLOCK).
pub fn random(buf: &mut [u8], flags: u32) -> Result<usize, Errno> {
    // SAFETY: `buf` is writable for its length.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), flags) };
    usize::try_from(n).map_err(|_| Errno::last())
}

/// The round-robin time slice of the calling host thread (sched_rr_get_interval(2)).
///
/// # Errors
/// The host's errno.
pub fn rr_interval() -> Result<libc::timespec, Errno> {
    let mut ts = ZERO_TIMESPEC;
    // SAFETY: a valid output buffer.
    if unsafe { libc::sched_rr_get_interval(0, &mut ts) } != 0 {
        return Err(Errno::last());
    }
    Ok(ts)
}

/// The host's membarrier(2) with `cmd` and no flags: its return value (the QUERY mask, or 0).
///
/// # Errors
/// The host's errno (ENOSYS on a kernel without it, EINVAL for a command it lacks, EPERM for
/// an expedited barrier the runtime did not register for).
pub fn membarrier(cmd: i32) -> Result<i32, Errno> {
    // SAFETY: membarrier takes plain integers (command, flags, CPU) and no pointers.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) };
    if r < 0 {
        return Err(Errno::last());
    }
    Ok(i32::try_from(r).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_answers_about_this_thread() {
        let a = clock_now(libc::CLOCK_MONOTONIC).unwrap();
        let b = clock_now(libc::CLOCK_MONOTONIC).unwrap();
        assert!((b.tv_sec, b.tv_nsec) >= (a.tv_sec, a.tv_nsec));
        assert_eq!(clock_now(1234).map(|_| ()), Err(Errno::EINVAL));
        assert!(thread_cpu_clock().is_some());
        assert!(thread_usage().is_ok());
        assert!(ticks_per_second() >= 1);
        assert_eq!(
            &uname().sysname[..5],
            &[
                b'L' as libc::c_char,
                b'i' as _,
                b'n' as _,
                b'u' as _,
                b'x' as _
            ]
        );
        let mut buf = [0u8; 32];
        assert_eq!(random(&mut buf, 0).unwrap(), 32);
        assert!(buf.iter().any(|&b| b != 0));
        assert!(rr_interval().is_ok());
    }
}
