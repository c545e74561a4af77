//! sched_getattr(2), sched_setattr(2): the extensible `struct sched_attr` over the
//! scheduling torpor has (see `sys_info`): every task is SCHED_OTHER, its nice value the
//! calling thread's own; the other policies are EPERM, as for a process without
//! CAP_SYS_NICE (the host scheduler is never told).

use abi::Errno;
use platform::Gva;

use super::{SysResult, SyscallArgs};
use crate::task::Task;

/// `SCHED_ATTR_SIZE_VER0`: the first published struct (up to `sched_period`).
const SIZE_VER0: usize = 48;
/// `SCHED_ATTR_SIZE_VER1`: with the utilisation clamps, the struct Linux has now.
const SIZE_VER1: usize = 56;
/// The largest size either call takes (a page).
const MAX_SIZE: usize = 4096;

const SCHED_OTHER: u32 = 0;
const SCHED_FIFO: u32 = 1;
const SCHED_RR: u32 = 2;
const SCHED_BATCH: u32 = 3;
const SCHED_IDLE: u32 = 5;
const SCHED_DEADLINE: u32 = 6;

const FLAG_KEEP_POLICY: u64 = 0x08;
const FLAG_KEEP_PARAMS: u64 = 0x10;
const FLAG_UTIL_CLAMP: u64 = 0x60;
/// `SCHED_FLAG_ALL`.
const FLAG_ALL: u64 = 0x7f;
/// `SCHED_FLAG_SUGOV` (internal to Linux's schedutil, accepted by the check).
const FLAG_SUGOV: u64 = 0x1000_0000;
/// A utilisation clamp's top (`SCHED_CAPACITY_SCALE`): what Linux reports for no clamp.
const CAPACITY_SCALE: u32 = 1024;

/// `struct sched_attr`, decoded.
#[derive(Default)]
struct SchedAttr {
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut v = [0u8; 4];
    v.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(v)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(v)
}

/// Reads the guest's struct as Linux's `sched_copy_attr`: a size of 0 means VER0; a size
/// below VER0, above a page, or larger than Linux's struct with non-zero bytes beyond it is
/// E2BIG (and the struct's size is written back to `size`).
fn copy_in_attr(t: &Task, addr: Gva) -> Result<SchedAttr, Errno> {
    let mut sz = [0u8; 4];
    t.copy_in(addr, &mut sz)?;
    let mut size = u32::from_le_bytes(sz) as usize;
    if size == 0 {
        size = SIZE_VER0;
    }
    let too_big = |t: &Task| {
        t.write_u32(addr, SIZE_VER1 as u32)?;
        Err(Errno::E2BIG)
    };
    if !(SIZE_VER0..=MAX_SIZE).contains(&size) {
        return too_big(t);
    }
    let mut b = vec![0u8; size.max(SIZE_VER1)];
    t.copy_in(addr, &mut b[..size])?;
    if b[SIZE_VER1..].iter().any(|&x| x != 0) {
        return too_big(t);
    }
    let attr = SchedAttr {
        policy: u32_at(&b, 4),
        flags: u64_at(&b, 8),
        nice: (u32_at(&b, 16) as i32).clamp(-20, 19),
        priority: u32_at(&b, 20),
        runtime: u64_at(&b, 24),
        deadline: u64_at(&b, 32),
        period: u64_at(&b, 40),
    };
    if attr.flags & FLAG_UTIL_CLAMP != 0 && size < SIZE_VER1 {
        return Err(Errno::EINVAL);
    }
    Ok(attr)
}

/// Linux's `__checkparam_dl`: a deadline and a runtime of at least 1024 ns, runtime ≤
/// deadline ≤ period (a period of 0 is the deadline), none with the top bit set.
fn deadline_params_ok(a: &SchedAttr) -> bool {
    let period = if a.period == 0 { a.deadline } else { a.period };
    a.deadline != 0
        && a.runtime >= 1024
        && a.deadline & (1 << 63) == 0
        && period & (1 << 63) == 0
        && a.runtime <= a.deadline
        && a.deadline <= period
}

/// Implements sched_setattr(2): SCHED_OTHER with a nice value (the calling thread's, as
/// setpriority; another task's is accepted and not recorded; lowering it needs
/// CAP_SYS_NICE, else EPERM); the other policies, once their parameters check out, are
/// EPERM. Errors in Linux's order: EINVAL for a null struct, a negative pid or flags, E2BIG
/// for a bad size, ESRCH for no such task, then EINVAL for the parameters, then EPERM.
pub fn sys_sched_setattr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (pid, addr, flags) = (a.int(0), a.gva(1), a.u(2) as u32);
    if addr.raw() == 0 || pid < 0 || flags != 0 {
        return Err(Errno::EINVAL);
    }
    let mut attr = copy_in_attr(t, addr)?;
    if (attr.policy as i32) < 0 {
        return Err(Errno::EINVAL);
    }
    let own = super::sys_info::sched_target(t, pid)?;
    if attr.flags & FLAG_KEEP_POLICY != 0 {
        attr.policy = SCHED_OTHER;
    }
    if attr.flags & FLAG_KEEP_PARAMS != 0 {
        attr.nice = if own { super::sys_info::own_nice() } else { 0 };
        attr.priority = 0;
    }
    let rt = matches!(attr.policy, SCHED_FIFO | SCHED_RR);
    match attr.policy {
        SCHED_OTHER | SCHED_BATCH | SCHED_IDLE | SCHED_FIFO | SCHED_RR | SCHED_DEADLINE => {}
        _ => return Err(Errno::EINVAL),
    }
    if attr.flags & !(FLAG_ALL | FLAG_SUGOV) != 0
        || attr.priority > 99
        || rt != (attr.priority != 0)
        || (attr.policy == SCHED_DEADLINE && !deadline_params_ok(&attr))
    {
        return Err(Errno::EINVAL);
    }
    if attr.policy != SCHED_OTHER {
        return Err(Errno::EPERM);
    }
    if own {
        if attr.nice < super::sys_info::own_nice()
            && !t.creds.capable(crate::creds::cap::SYS_NICE)
            && t.creds.euid != 0
        {
            return Err(Errno::EPERM);
        }
        super::sys_info::set_own_nice(attr.nice);
    }
    Ok(0)
}

/// Implements sched_getattr(2): SCHED_OTHER, no flags, the task's nice value (the calling
/// thread's own; other tasks 0), no utilisation clamp; `size` is set to what was written
/// (the smaller of the guest's buffer and Linux's struct).
pub fn sys_sched_getattr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (pid, addr, usize_, flags) = (a.int(0), a.gva(1), a.u(2) as u32 as usize, a.u(3) as u32);
    if addr.raw() == 0 || pid < 0 || !(SIZE_VER0..=MAX_SIZE).contains(&usize_) || flags != 0 {
        return Err(Errno::EINVAL);
    }
    let own = super::sys_info::sched_target(t, pid)?;
    let nice = if own { super::sys_info::own_nice() } else { 0 };
    let size = usize_.min(SIZE_VER1);
    let mut b = [0u8; SIZE_VER1];
    b[0..4].copy_from_slice(&(size as u32).to_le_bytes());
    b[4..8].copy_from_slice(&SCHED_OTHER.to_le_bytes());
    b[16..20].copy_from_slice(&nice.to_le_bytes());
    b[52..56].copy_from_slice(&CAPACITY_SCALE.to_le_bytes());
    t.copy_out(addr, &b[..size])?;
    Ok(0)
}
