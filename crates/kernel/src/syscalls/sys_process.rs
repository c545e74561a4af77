//! Process and thread identity, exit, arch_prctl, set_tid_address, futex, robust lists.

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::task::{ExitStatus, Task};

/// Implements getpid(2).
pub fn sys_getpid(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Ok(t.pid as u64)
}

/// Implements gettid(2).
pub fn sys_gettid(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Ok(t.tid as u64)
}

/// Implements getppid(2): the sandbox's first process has no parent inside it.
pub fn sys_getppid(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Ok(0)
}

/// Implements getuid(2) and geteuid(2): the runtime's own credentials.
pub fn sys_getuid(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    // SAFETY: no preconditions.
    Ok(u64::from(unsafe { libc::getuid() }))
}

/// Implements getgid(2) and getegid(2).
pub fn sys_getgid(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    // SAFETY: no preconditions.
    Ok(u64::from(unsafe { libc::getgid() }))
}

/// Implements exit(2). With one thread per process, it ends the process.
pub fn sys_exit(t: &mut Task, a: &SyscallArgs) -> SysResult {
    t.exit = Some(ExitStatus::Exited(a.int(0) & 0xff));
    Ok(0)
}

/// Implements exit_group(2).
pub fn sys_exit_group(t: &mut Task, a: &SyscallArgs) -> SysResult {
    t.exit = Some(ExitStatus::Exited(a.int(0) & 0xff));
    Ok(0)
}

/// Implements sched_yield(2).
pub fn sys_sched_yield(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    std::thread::yield_now();
    Ok(0)
}

const ARCH_SET_GS: i32 = 0x1001;
const ARCH_SET_FS: i32 = 0x1002;
const ARCH_GET_FS: i32 = 0x1003;
const ARCH_GET_GS: i32 = 0x1004;

/// Implements arch_prctl(2).
pub fn sys_arch_prctl(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (code, addr) = (a.int(0), a.u(1));
    match code {
        ARCH_SET_FS | ARCH_SET_GS => {
            if addr >= platform::layout::USER_END.raw() {
                return Err(Errno::EPERM);
            }
            if code == ARCH_SET_FS {
                t.vcpu.user.fs_base = addr;
            } else {
                t.vcpu.user.gs_base = addr;
            }
            Ok(0)
        }
        ARCH_GET_FS => {
            t.write_u64(a.gva(1), t.vcpu.user.fs_base)?;
            Ok(0)
        }
        ARCH_GET_GS => {
            t.write_u64(a.gva(1), t.vcpu.user.gs_base)?;
            Ok(0)
        }
        _ => Err(Errno::EINVAL),
    }
}

/// Implements set_tid_address(2).
pub fn sys_set_tid_address(t: &mut Task, a: &SyscallArgs) -> SysResult {
    t.clear_child_tid = a.u(0);
    Ok(t.tid as u64)
}

/// Implements set_robust_list(2): recorded nowhere yet (no other thread can inherit a lock).
pub fn sys_set_robust_list(_t: &mut Task, a: &SyscallArgs) -> SysResult {
    if a.u(1) != 24 {
        return Err(Errno::EINVAL);
    }
    Ok(0)
}

const FUTEX_WAIT: i32 = 0;
const FUTEX_WAKE: i32 = 1;
const FUTEX_WAIT_BITSET: i32 = 9;
const FUTEX_WAKE_BITSET: i32 = 10;
const FUTEX_CMD_MASK: i32 = !(128 | 256);

/// Implements futex(2) for a single-threaded process: WAKE wakes nobody; WAIT returns EAGAIN
/// if the word changed and otherwise would sleep forever, which with no other thread is a
/// deadlock the application asked for: it sleeps until its timeout, or fails with EDEADLK.
pub fn sys_futex(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let op = a.int(1) & FUTEX_CMD_MASK;
    match op {
        FUTEX_WAKE | FUTEX_WAKE_BITSET => Ok(0),
        FUTEX_WAIT | FUTEX_WAIT_BITSET => {
            let mut b = [0u8; 4];
            t.copy_in(a.gva(0), &mut b)?;
            if u32::from_le_bytes(b) != a.u(2) as u32 {
                return Err(Errno::EAGAIN);
            }
            if a.u(3) == 0 {
                return Err(Errno(libc::EDEADLK));
            }
            let mut ts = [0u8; 16];
            t.copy_in(a.gva(3), &mut ts)?;
            let sec = i64::from_le_bytes(ts[..8].try_into().unwrap_or([0; 8]));
            let nsec = i64::from_le_bytes(ts[8..].try_into().unwrap_or([0; 8]));
            if sec < 0 || !(0..1_000_000_000).contains(&nsec) {
                return Err(Errno::EINVAL);
            }
            if op == FUTEX_WAIT {
                std::thread::sleep(std::time::Duration::new(sec as u64, nsec as u32));
            }
            Err(Errno::ETIMEDOUT)
        }
        _ => Err(Errno::ENOSYS),
    }
}

/// Implements rseq(2) as ENOSYS: glibc and others fall back to plain getcpu.
pub fn sys_rseq(_t: &mut Task, _a: &SyscallArgs) -> SysResult {
    Err(Errno::ENOSYS)
}

/// Implements prctl(2) for the options C runtimes use at start-up.
pub fn sys_prctl(t: &mut Task, a: &SyscallArgs) -> SysResult {
    match a.int(0) {
        libc::PR_SET_NAME => {
            let mut name = [0u8; 16];
            let s = t.copy_in_str(a.gva(1), 4096).or_else(|e| if e == Errno::ENAMETOOLONG { Ok(Vec::new()) } else { Err(e) })?;
            let n = s.len().min(15);
            name[..n].copy_from_slice(&s[..n]);
            t.comm = name;
            Ok(0)
        }
        libc::PR_GET_NAME => {
            let name = t.comm;
            t.copy_out(a.gva(1), &name)?;
            Ok(0)
        }
        libc::PR_GET_DUMPABLE => Ok(1),
        libc::PR_SET_DUMPABLE | libc::PR_SET_PDEATHSIG | libc::PR_SET_NO_NEW_PRIVS => Ok(0),
        _ => Err(Errno::EINVAL),
    }
}
