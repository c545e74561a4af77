//! futex_waitv(2): one wait on up to 128 futex words, ended by a FUTEX_WAKE of any of them.
//!
//! The waiter is queued on every word's queue (the process's own, or the sandbox's for a
//! shared word, as futex(2) chooses) with one host word to sleep on; each queue entry carries
//! its index, which the wake writes there, so the call answers which word woke it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use abi::Errno;
use platform::Gva;

use super::sys_process::{futex_queues, FutexQueues};
use super::{SysResult, SyscallArgs};
use crate::task::{Task, WaitResult};

/// At most this many words in one call.
const FUTEX_WAITV_MAX: u64 = 128;
/// `FUTEX2_SIZE_U32`, the one size implemented (as on Linux).
const FUTEX2_SIZE_U32: u64 = 0x02;
const FUTEX2_SIZE_MASK: u64 = 0x03;
/// `FUTEX2_NUMA` and `FUTEX2_MPOL`: no NUMA nodes here, EINVAL.
const FUTEX2_PRIVATE: u64 = 128;
/// `FUTEX_PRIVATE_FLAG` as futex(2) takes it.
const FUTEX_PRIVATE_FLAG: i32 = 128;
/// `sizeof(struct futex_waitv)`: val, uaddr, flags (u32), reserved (u32).
const WAITV_SIZE: usize = 24;

/// One `struct futex_waitv` read and checked.
struct WaitOn {
    val: u32,
    uaddr: Gva,
    private: bool,
}

/// Implements futex_waitv(2). Errors in Linux's order: flags, count and array pointer
/// (EINVAL), the clock and timeout (EINVAL, EFAULT), each entry (EFAULT, EINVAL for unknown
/// or unimplemented flags, a value wider than 32 bits, a misaligned address), then the
/// words themselves (EFAULT, EAGAIN when one no longer holds its value). Returns the index of
/// a word that was woken; ETIMEDOUT at the absolute `timeout` of `clockid`.
pub fn sys_futex_waitv(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (waiters, nr, flags) = (a.gva(0), a.u(1) as u32 as u64, a.u(2) as u32);
    if flags != 0 || nr == 0 || nr > FUTEX_WAITV_MAX || waiters.raw() == 0 {
        return Err(Errno::EINVAL);
    }
    let deadline = if a.u(3) == 0 {
        None
    } else {
        let clock = a.int(4);
        if clock != libc::CLOCK_MONOTONIC && clock != libc::CLOCK_REALTIME {
            return Err(Errno::EINVAL);
        }
        let d = t
            .read_val::<abi::structs::Timespec>(a.gva(3))?
            .to_duration()?;
        Some((clock, d))
    };
    let mut list = Vec::with_capacity(nr as usize);
    for i in 0..nr as usize {
        let mut raw = [0u8; WAITV_SIZE];
        t.copy_in(
            Gva(waiters.raw().wrapping_add((i * WAITV_SIZE) as u64)),
            &mut raw,
        )?;
        list.push(parse(&raw)?);
    }
    if list.iter().any(|w| !w.uaddr.raw().is_multiple_of(4)) {
        return Err(Errno::EINVAL);
    }
    let mut queued: Vec<(FutexQueues, u64)> = Vec::with_capacity(list.len());
    let word = Arc::new(AtomicU32::new(0));
    let unqueue = |queued: &[(FutexQueues, u64)]| {
        for (q, key) in queued {
            q.table().dequeue(*key, &word);
        }
    };
    for (i, w) in list.iter().enumerate() {
        let op = if w.private { FUTEX_PRIVATE_FLAG } else { 0 };
        let (queues, key) = match futex_queues(t, w.uaddr, op) {
            Ok(qk) => qk,
            Err(e) => {
                unqueue(&queued);
                return Err(e);
            }
        };
        // The value check happens under the queue's lock: no wake in between is lost.
        let mut fault = None;
        let ok = queues.table().enqueue_tagged(key, &word, i as u32 + 1, || {
            let mut b = [0u8; 4];
            match t.copy_in(w.uaddr, &mut b) {
                Ok(()) => u32::from_le_bytes(b) == w.val,
                Err(e) => {
                    fault = Some(e);
                    false
                }
            }
        });
        if !ok {
            unqueue(&queued);
            // A wake of a word queued before this one already ended the wait.
            if let Some(i) = woken(&word) {
                return Ok(i);
            }
            return Err(fault.unwrap_or(Errno::EAGAIN));
        }
        queued.push((queues, key));
    }
    let timeout = deadline.map(|(clock, abs)| {
        let now = crate::task::host::clock_now(clock).unwrap_or(libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        });
        abs.saturating_sub(Duration::new(
            now.tv_sec.max(0) as u64,
            now.tv_nsec.clamp(0, 999_999_999) as u32,
        ))
    });
    t.control.set_idle(true);
    let (first_q, first_key) = &queued[0];
    let r = first_q.table().wait(*first_key, &word, timeout);
    unqueue(&queued);
    if let Some(i) = woken(&word) {
        return Ok(i);
    }
    match r {
        WaitResult::Woken | WaitResult::Interrupted => Err(Errno::EINTR),
        WaitResult::TimedOut => Err(Errno::ETIMEDOUT),
    }
}

/// The index the wake of `word` wrote, if one did.
fn woken(word: &AtomicU32) -> Option<u64> {
    match word.load(Ordering::SeqCst) {
        0 => None,
        tag => Some(u64::from(tag - 1)),
    }
}

/// One `struct futex_waitv`: EINVAL for unknown flags, a size other than 32 bits, NUMA, a
/// non-zero reserved field or a value wider than the size.
fn parse(raw: &[u8; WAITV_SIZE]) -> Result<WaitOn, Errno> {
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&raw[i..i + 8]);
        u64::from_le_bytes(b)
    };
    let u32_at = |i: usize| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&raw[i..i + 4]);
        u32::from_le_bytes(b)
    };
    let (val, uaddr, flags, reserved) = (u64_at(0), u64_at(8), u64::from(u32_at(16)), u32_at(20));
    if flags & !(FUTEX2_SIZE_MASK | FUTEX2_PRIVATE) != 0
        || reserved != 0
        || flags & FUTEX2_SIZE_MASK != FUTEX2_SIZE_U32
    {
        return Err(Errno::EINVAL);
    }
    let val = u32::try_from(val).map_err(|_| Errno::EINVAL)?;
    Ok(WaitOn {
        val,
        uaddr: Gva(uaddr),
        private: flags & FUTEX2_PRIVATE != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(val: u64, uaddr: u64, flags: u32, reserved: u32) -> [u8; WAITV_SIZE] {
        let mut raw = [0u8; WAITV_SIZE];
        raw[..8].copy_from_slice(&val.to_le_bytes());
        raw[8..16].copy_from_slice(&uaddr.to_le_bytes());
        raw[16..20].copy_from_slice(&flags.to_le_bytes());
        raw[20..].copy_from_slice(&reserved.to_le_bytes());
        raw
    }

    #[test]
    fn entries_checked_as_linux() {
        let w = parse(&entry(7, 0x1000, 0x82, 0)).expect("valid");
        assert_eq!((w.val, w.uaddr.raw(), w.private), (7, 0x1000, true));
        assert!(parse(&entry(0, 0x1000, 0x80, 0)).is_err()); // no size
        assert!(parse(&entry(0, 0x1000, 0x03, 0)).is_err()); // 64 bits
        assert!(parse(&entry(0, 0x1000, 0x06, 0)).is_err()); // NUMA
        assert!(parse(&entry(0, 0x1000, 0x02, 1)).is_err()); // reserved
        assert!(parse(&entry(1 << 32, 0x1000, 0x02, 0)).is_err()); // value too wide
    }
}
