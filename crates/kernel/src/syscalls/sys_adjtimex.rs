//! adjtimex(2) and clock_adjtime(2): the system clock's discipline (NTP state).
//!
//! The sandbox may read the host clock's state (the host's adjtimex with no mode bits), never
//! change it: a setting mode needs CAP_SYS_TIME in the initial user namespace, which no
//! sandbox has, so it is EPERM after Linux's own argument checks (EINVAL first).

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::task::Task;

/// `sizeof(struct timex)` on x86-64.
const TIMEX_SIZE: usize = 208;

const ADJ_FREQUENCY: u32 = 0x0002;
const ADJ_SETOFFSET: u32 = 0x0100;
const ADJ_ADJTIME: u32 = 0x8000;
const ADJ_OFFSET_SINGLESHOT: u32 = 0x0001;
const ADJ_OFFSET_READONLY: u32 = 0x2000;
/// Linux's PPM_SCALE: NSEC_PER_USEC << (NTP_SCALE_SHIFT - SHIFT_USEC).
const PPM_SCALE: i64 = 1000 << 16;

/// Implements adjtimex(2).
pub fn sys_adjtimex(t: &mut Task, a: &SyscallArgs) -> SysResult {
    adjtime(t, a.gva(0))
}

/// Implements clock_adjtime(2): CLOCK_REALTIME is adjtimex; the other clocks cannot be
/// adjusted (EOPNOTSUPP), an unknown clock is EINVAL.
pub fn sys_clock_adjtime(t: &mut Task, a: &SyscallArgs) -> SysResult {
    match a.int(0) {
        libc::CLOCK_REALTIME => adjtime(t, a.gva(1)),
        0..=9 | 11 => Err(Errno::EOPNOTSUPP),
        // A process's or thread's CPU clock (no adjustment either); a dynamic clock's
        // descriptor (CLOCKFD) names no PTP device here.
        id if id < 0 && id & 7 != 3 => Err(Errno::EOPNOTSUPP),
        _ => Err(Errno::EINVAL),
    }
}

fn adjtime(t: &mut Task, at: platform::Gva) -> SysResult {
    let mut raw = [0u8; TIMEX_SIZE];
    t.copy_in(at, &mut raw)?;
    let i64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&raw[i..i + 8]);
        i64::from_le_bytes(b)
    };
    let modes = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
    validate(modes, i64_at(16))?;
    let reads_only = modes == 0 || (modes & ADJ_ADJTIME != 0 && modes & ADJ_OFFSET_READONLY != 0);
    if !reads_only {
        return Err(Errno::EPERM);
    }
    // SAFETY: an all-zero `struct timex` is valid (modes 0: read only).
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    // The syscall itself (the C library's adjtimex is clock_adjtime, which the holder's
    // seccomp filter does not allow).
    // SAFETY: a valid, writable `struct timex`; modes 0 changes nothing.
    let state = unsafe { libc::syscall(libc::SYS_adjtimex, &mut tx as *mut libc::timex) };
    if state < 0 {
        return Err(Errno::last());
    }
    // SAFETY: `libc::timex` is the kernel's `struct timex`, plain integers, TIMEX_SIZE bytes.
    let bytes =
        unsafe { std::slice::from_raw_parts((&tx as *const libc::timex).cast::<u8>(), TIMEX_SIZE) };
    let mut out = bytes.to_vec();
    out[..4].copy_from_slice(&modes.to_le_bytes());
    t.copy_out(at, &out)?;
    Ok(state as u64)
}

/// Linux's timekeeping_validate_timex without CAP_SYS_TIME (so every setting mode is EPERM
/// before the checks of its value, but ADJ_FREQUENCY's with the read-only single shot):
/// `freq` is `timex.freq`.
fn validate(modes: u32, freq: i64) -> Result<(), Errno> {
    if modes & ADJ_ADJTIME != 0 {
        // The single-shot offset must come alone.
        if modes & ADJ_OFFSET_SINGLESHOT == 0 {
            return Err(Errno::EINVAL);
        }
        if modes & ADJ_OFFSET_READONLY == 0 {
            return Err(Errno::EPERM);
        }
    } else if modes != 0 {
        return Err(Errno::EPERM);
    }
    if modes & ADJ_SETOFFSET != 0 {
        return Err(Errno::EPERM);
    }
    if modes & ADJ_FREQUENCY != 0 && !(i64::MIN / PPM_SCALE..=i64::MAX / PPM_SCALE).contains(&freq)
    {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_checked_as_linux() {
        assert_eq!(validate(0, 0), Ok(()));
        assert_eq!(validate(ADJ_ADJTIME, 0), Err(Errno::EINVAL));
        assert_eq!(validate(0xa001, 0), Ok(()));
        assert_eq!(validate(0x8001, 0), Err(Errno::EPERM));
        assert_eq!(validate(ADJ_FREQUENCY, 0), Err(Errno::EPERM));
        assert_eq!(validate(0xa003, i64::MAX), Err(Errno::EINVAL));
    }
}
