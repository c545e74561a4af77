//! mseal(2) and remap_file_pages(2): two changes to existing mappings beside the mmap family
//! (`sys_mm`), each a call into the address space (`mm`).

use abi::Errno;

use super::sys_mm::mm_err;
use super::{SysResult, SyscallArgs};
use crate::task::Task;

/// Implements mseal(2) (Linux 6.10): seals the mappings of the range against munmap,
/// mremap, mprotect, a fixed mmap over them and discarding madvise on read-only anonymous
/// memory (all EPERM from then on). No flags (EINVAL); EINVAL for an unaligned start or an
/// overflowing length, ENOMEM for a range with unmapped parts.
pub fn sys_mseal(t: &mut Task, a: &SyscallArgs) -> SysResult {
    if a.u(2) != 0 {
        return Err(Errno::EINVAL);
    }
    t.mm_restrict(|mm| mm.mseal(a.gva(0), a.u(1)))
        .map_err(mm_err)?;
    Ok(0)
}

/// Implements remap_file_pages(2), deprecated, as Linux emulates it: a shared mapping's
/// range mapped again over itself from another page of the same file or segment
/// ([`mm::MemoryManager::remap_file_pages`]). `prot` must be 0 (EINVAL); of the flags only
/// MAP_NONBLOCK means anything, and nothing here. A System V segment removed since it was
/// attached is EIDRM, as Linux's mmap of it.
pub fn sys_remap_file_pages(t: &mut Task, a: &SyscallArgs) -> SysResult {
    if a.u(2) != 0 {
        return Err(Errno::EINVAL);
    }
    let start = platform::Gva(a.u(0) & !(platform::PAGE_SIZE - 1));
    let object = t.mm().find_vma(start).and_then(|v| match &v.kind {
        mm::VmaKind::Shared { object, .. } => Some(object.clone()),
        _ => None,
    });
    if let Some(object) = object {
        if object.name() == "sysv" && !t.group.procs.sysv_shm.holds(&object) {
            return Err(Errno::EIDRM);
        }
    }
    t.mm_restrict(|mm| mm.remap_file_pages(a.gva(0), a.u(1), a.u(3)))
        .map_err(mm_err)?;
    Ok(0)
}
