//! lsm_list_modules(2), lsm_get_self_attr(2), lsm_set_self_attr(2): the Linux Security
//! Modules the sandbox has. torpor has none but the capability module every Linux kernel
//! has, which provides no process attributes: the attribute calls answer EOPNOTSUPP after
//! Linux's argument checks.

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::task::Task;

/// LSM_ID_CAPABILITY.
const LSM_ID_CAPABILITY: u64 = 100;
/// LSM_FLAG_SINGLE: one module's attribute.
const LSM_FLAG_SINGLE: u32 = 1;
/// LSM_ATTR_UNDEF.
const LSM_ATTR_UNDEF: u64 = 0;
/// `sizeof(struct lsm_ctx)` without its context: id, flags, len, ctx_len.
const LSM_CTX_SIZE: u64 = 32;
const PAGE_SIZE: u64 = 4096;

/// The active modules' ids, in order.
const ACTIVE: &[u64] = &[LSM_ID_CAPABILITY];

/// Implements lsm_list_modules(2): the size needed is written to `*size` before the check
/// that it fits (E2BIG), then the ids; returns how many.
pub fn sys_lsm_list_modules(t: &mut Task, a: &SyscallArgs) -> SysResult {
    if a.u(2) as u32 != 0 {
        return Err(Errno::EINVAL);
    }
    let total = (ACTIVE.len() * 8) as u32;
    let usize_ = t.read_val::<u32>(a.gva(1))?;
    t.write_u32(a.gva(1), total)?;
    if usize_ < total {
        return Err(Errno::E2BIG);
    }
    for (i, id) in ACTIVE.iter().enumerate() {
        t.write_u64(platform::Gva(a.u(0).wrapping_add(i as u64 * 8)), *id)?;
    }
    Ok(ACTIVE.len() as u64)
}

/// Implements lsm_get_self_attr(2): no module gives any attribute, so the size written is 0
/// and the answer EOPNOTSUPP (also for the one module LSM_FLAG_SINGLE names).
pub fn sys_lsm_get_self_attr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (attr, flags) = (a.u(0), a.u(3) as u32);
    if attr == LSM_ATTR_UNDEF || flags & !LSM_FLAG_SINGLE != 0 {
        return Err(Errno::EINVAL);
    }
    t.read_val::<u32>(a.gva(2))?;
    if flags & LSM_FLAG_SINGLE != 0 {
        if a.u(1) == 0 {
            return Err(Errno::EINVAL);
        }
        // The module's id must be named (LSM_ID_UNDEF is 0).
        if t.read_val::<u64>(a.gva(1))? == 0 {
            return Err(Errno::EINVAL);
        }
    }
    t.write_u32(a.gva(2), 0)?;
    Err(Errno::EOPNOTSUPP)
}

/// Implements lsm_set_self_attr(2): the context is checked as Linux checks it, then no
/// module takes it (EOPNOTSUPP).
pub fn sys_lsm_set_self_attr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (size, flags) = (a.u(2) as u32 as u64, a.u(3) as u32);
    if flags != 0 || size < LSM_CTX_SIZE {
        return Err(Errno::EINVAL);
    }
    if size > PAGE_SIZE {
        return Err(Errno::E2BIG);
    }
    let mut raw = vec![0u8; size as usize];
    t.copy_in(a.gva(1), &mut raw)?;
    let field = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&raw[i * 8..i * 8 + 8]);
        u64::from_le_bytes(b)
    };
    let (len, ctx_len) = (field(2), field(3));
    let needed = ctx_len.saturating_add(LSM_CTX_SIZE);
    if size < len || size < needed || len < needed {
        return Err(Errno::EINVAL);
    }
    Err(Errno::EOPNOTSUPP)
}
