//! uname, getrandom, getrlimit, prlimit64.

use abi::structs::UTS_FIELD;
use abi::Errno;

use crate::task::rlimit::Limit;

use super::{SysResult, SyscallArgs};
use crate::task::Task;

/// Implements uname(2): Linux x86-64 with the host's release, the sandbox's own node name.
pub fn sys_uname(t: &mut Task, a: &SyscallArgs) -> SysResult {
    // SAFETY: a zeroed utsname is a valid output buffer.
    let mut host: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid output buffer.
    unsafe { libc::uname(&mut host) };
    let field = |s: &[libc::c_char]| -> Vec<u8> {
        s.iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect()
    };
    let fields: [Vec<u8>; 6] = [
        b"Linux".to_vec(),
        b"torpor".to_vec(),
        field(&host.release),
        field(&host.version),
        b"x86_64".to_vec(),
        b"(none)".to_vec(),
    ];
    let mut out = vec![0u8; UTS_FIELD * 6];
    for (i, f) in fields.iter().enumerate() {
        let n = f.len().min(UTS_FIELD - 1);
        out[i * UTS_FIELD..i * UTS_FIELD + n].copy_from_slice(&f[..n]);
    }
    t.copy_out(a.gva(0), &out)?;
    Ok(0)
}

/// Implements getrandom(2).
pub fn sys_getrandom(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let flags = a.u(2) as u32;
    if flags & !(libc::GRND_NONBLOCK | libc::GRND_RANDOM | 0x4) != 0 {
        return Err(Errno::EINVAL);
    }
    let len = (a.len(1)? as usize).min(1 << 25);
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` is writable for `len` bytes.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), len, 0) };
    if n < 0 {
        return Err(Errno::last());
    }
    t.copy_out(a.gva(0), &buf[..n as usize])?;
    Ok(n as u64)
}

fn limits(t: &Task) -> std::sync::MutexGuard<'_, crate::task::rlimit::Rlimits> {
    t.group.rlimits.lock().unwrap_or_else(|e| e.into_inner())
}

fn encode(l: Limit) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&l.cur.to_le_bytes());
    b[8..].copy_from_slice(&l.max.to_le_bytes());
    b
}

fn decode(b: &[u8; 16]) -> Limit {
    let mut cur = [0u8; 8];
    let mut max = [0u8; 8];
    cur.copy_from_slice(&b[..8]);
    max.copy_from_slice(&b[8..]);
    Limit {
        cur: u64::from_le_bytes(cur),
        max: u64::from_le_bytes(max),
    }
}

/// Sets a limit of the calling process; the descriptor table follows RLIMIT_NOFILE.
fn set_limit(t: &Task, resource: u32, new: Limit) -> Result<(), Errno> {
    let mut l = limits(t);
    l.set(resource, new)?;
    t.fds.set_limit(l.nofile());
    Ok(())
}

/// Implements getrlimit(2).
pub fn sys_getrlimit(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let l = limits(t).get(a.u(0) as u32)?;
    t.copy_out(a.gva(1), &encode(l))?;
    Ok(0)
}

/// Implements setrlimit(2).
pub fn sys_setrlimit(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let mut b = [0u8; 16];
    t.copy_in(a.gva(1), &mut b)?;
    set_limit(t, a.u(0) as u32, decode(&b))?;
    Ok(0)
}

/// Implements prlimit64(2) for the calling process: the old limits out, then the new in.
pub fn sys_prlimit64(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let pid = a.int(0);
    if pid != 0 && pid != t.pid {
        return Err(Errno::ESRCH);
    }
    let resource = a.u(1) as u32;
    let old = limits(t).get(resource)?;
    let new = if a.u(2) != 0 {
        let mut b = [0u8; 16];
        t.copy_in(a.gva(2), &mut b)?;
        Some(decode(&b))
    } else {
        None
    };
    if let Some(n) = new {
        set_limit(t, resource, n)?;
    }
    if a.u(3) != 0 {
        t.copy_out(a.gva(3), &encode(old))?;
    }
    Ok(0)
}

/// Implements sysinfo(2): uptime from the host's monotonic clock, memory figures from the
/// sandbox's own memory (its limit and its page allocator), one process.
pub fn sys_sysinfo(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let stats = t.mm().stats();
    let page = platform::PAGE_SIZE;
    let total = stats.total_pages as u64 * page;
    let free = stats.free_pages as u64 * page;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid clock id and output buffer.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    // struct sysinfo: uptime, loads[3], totalram, freeram, sharedram, bufferram, totalswap,
    // freeswap (longs), procs (u16 + pad), totalhigh, freehigh (longs), mem_unit (u32), pad.
    let mut out = vec![0u8; 112];
    let put =
        |out: &mut Vec<u8>, at: usize, v: u64| out[at..at + 8].copy_from_slice(&v.to_le_bytes());
    put(&mut out, 0, ts.tv_sec as u64);
    put(&mut out, 32, total);
    put(&mut out, 40, free);
    out[80..82].copy_from_slice(&1u16.to_le_bytes());
    out[104..108].copy_from_slice(&1u32.to_le_bytes());
    t.copy_out(a.gva(0), &out)?;
    Ok(0)
}

/// Implements sched_getaffinity(2): the host CPUs this process may run on.
pub fn sys_sched_getaffinity(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let len = a.u(1) as usize;
    if len == 0 || len % 8 != 0 {
        return Err(Errno::EINVAL);
    }
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid buffer of the size given.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Err(Errno::last());
    }
    // SAFETY: cpu_set_t is plain data.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (&set as *const libc::cpu_set_t).cast::<u8>(),
            std::mem::size_of::<libc::cpu_set_t>(),
        )
    };
    let n = len.min(bytes.len());
    t.copy_out(a.gva(2), &bytes[..n])?;
    Ok(n as u64)
}

/// Implements getcpu(2): the calling thread's vCPU index as its CPU, NUMA node 0. (Some
/// runtimes, the JVM among them, fall back to the legacy vsyscall page, which torpor does not
/// map, when this fails.)
pub fn sys_getcpu(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let cpu = t.vcpu.index() as u32;
    if a.u(0) != 0 {
        t.write_u32(a.gva(0), cpu)?;
    }
    if a.u(1) != 0 {
        t.write_u32(a.gva(1), 0)?;
    }
    Ok(0)
}
