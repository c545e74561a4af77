//! cachestat(2): the page cache's counts for a range of a file, the host's for the host file
//! behind the descriptor (the guest's files are host files: their cache is the host's).

use super::{SysResult, SyscallArgs};
use crate::fd::host;
use crate::task::Task;

/// Implements cachestat(2). Errors in Linux's order: EBADF for a descriptor not open, then
/// the host's own checks of the file and the flags (EPERM, EINVAL), then EFAULT for either
/// structure.
pub fn sys_cachestat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let f = t.fds.get(a.int(0))?;
    let mut range = [0u8; 16];
    let range_ok = t.copy_in(a.gva(1), &mut range);
    let (mut off, mut len) = ([0u8; 8], [0u8; 8]);
    off.copy_from_slice(&range[..8]);
    len.copy_from_slice(&range[8..]);
    let counts = host::cachestat(
        f.host(),
        u64::from_le_bytes(off),
        u64::from_le_bytes(len),
        a.u(3) as u32,
    )?;
    range_ok?;
    let mut out = [0u8; 40];
    for (i, c) in counts.iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&c.to_le_bytes());
    }
    t.copy_out(a.gva(2), &out)?;
    Ok(0)
}
