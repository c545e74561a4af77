//! mmap, munmap, mprotect, brk, mremap, madvise.

use std::sync::Arc;

use abi::Errno;
use mm::{MmapRequest, Prot, VmaKind};
use platform::{Gva, PAGE_SIZE};

use super::{SysResult, SyscallArgs};
use crate::fd::FileKind;
use crate::task::Task;

fn mm_err(e: mm::MmError) -> Errno {
    if e.is_internal() {
        tracing::error!("memory manager: {e}");
    }
    Errno(e.errno())
}

const MAP_FLAGS: i32 = libc::MAP_SHARED
    | libc::MAP_PRIVATE
    | libc::MAP_SHARED_VALIDATE
    | libc::MAP_FIXED
    | libc::MAP_ANONYMOUS
    | libc::MAP_GROWSDOWN
    | libc::MAP_DENYWRITE
    | libc::MAP_EXECUTABLE
    | libc::MAP_LOCKED
    | libc::MAP_NORESERVE
    | libc::MAP_POPULATE
    | libc::MAP_NONBLOCK
    | libc::MAP_STACK
    | libc::MAP_HUGETLB
    | libc::MAP_FIXED_NOREPLACE
    | 0x40; // MAP_32BIT

/// Implements mmap(2).
///
/// "MAP_SHARED … Updates to the mapping are visible to other processes mapping the same
/// region": file-backed shared mappings are not supported yet and are refused with ENODEV
/// unless read-only (where a private copy is indistinguishable).
pub fn sys_mmap(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (addr, len, prot, flags, fd, off) = (a.gva(0), a.u(1), a.u(2), a.int(3), a.int(4), a.u(5));
    if flags & !MAP_FLAGS != 0 {
        return Err(Errno::EINVAL);
    }
    let prot = Prot::from_bits(prot).ok_or(Errno::EINVAL)?;
    let share = flags & (libc::MAP_SHARED | libc::MAP_PRIVATE | libc::MAP_SHARED_VALIDATE);
    if share == 0 || share == (libc::MAP_SHARED | libc::MAP_PRIVATE) {
        return Err(Errno::EINVAL);
    }
    if len == 0 || off % PAGE_SIZE != 0 {
        return Err(Errno::EINVAL);
    }
    let shared = share != libc::MAP_PRIVATE;
    let kind = if flags & libc::MAP_ANONYMOUS != 0 {
        VmaKind::Anon
    } else {
        let f = t.fds.get(fd)?;
        if !matches!(f.kind, FileKind::Regular) {
            return Err(Errno::ENODEV);
        }
        if shared && prot.contains(Prot::WRITE) {
            return Err(Errno::ENODEV);
        }
        let file = f.owned().try_clone().map_err(Errno::from)?;
        VmaKind::File {
            file: Arc::new(std::fs::File::from(file)),
            offset: off,
        }
    };
    let populate = flags & libc::MAP_POPULATE != 0;
    let mut mm = t.mm();
    let at = mm
        .mmap(MmapRequest {
            addr,
            len,
            prot,
            fixed: flags & libc::MAP_FIXED != 0,
            fixed_noreplace: flags & libc::MAP_FIXED_NOREPLACE != 0,
            kind,
            name: None,
        })
        .map_err(mm_err)?;
    if populate && prot.is_accessible() {
        // Best effort, as Linux: a failure here does not fail the mmap.
        let _ = mm.populate(at, len, prot.contains(Prot::WRITE));
    }
    Ok(at.raw())
}

/// Implements munmap(2).
pub fn sys_munmap(t: &mut Task, a: &SyscallArgs) -> SysResult {
    t.mm().munmap(a.gva(0), a.u(1)).map_err(mm_err)?;
    Ok(0)
}

/// Implements mprotect(2).
pub fn sys_mprotect(t: &mut Task, a: &SyscallArgs) -> SysResult {
    // PROT_GROWSDOWN/PROT_GROWSUP are accepted and ignored.
    let bits = a.u(2) & !0x0300_0000;
    let prot = Prot::from_bits(bits).ok_or(Errno::EINVAL)?;
    t.mm().mprotect(a.gva(0), a.u(1), prot).map_err(mm_err)?;
    Ok(0)
}

/// Implements brk(2): "On success, brk() returns the new program break; on failure, the
/// current break" (the raw syscall never fails).
pub fn sys_brk(t: &mut Task, a: &SyscallArgs) -> SysResult {
    Ok(t.mm().brk(a.gva(0)).raw())
}

/// Implements mremap(2).
pub fn sys_mremap(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let flags = a.u(3) as u32;
    if flags & !(mm::MREMAP_MAYMOVE | mm::MREMAP_FIXED) != 0 {
        return Err(Errno::EINVAL);
    }
    t.mm()
        .mremap(a.gva(0), a.u(1), a.u(2), flags, Gva(a.u(4)))
        .map(|g| g.raw())
        .map_err(mm_err)
}

/// Implements madvise(2).
pub fn sys_madvise(t: &mut Task, a: &SyscallArgs) -> SysResult {
    t.mm().madvise(a.gva(0), a.u(1), a.int(2)).map_err(mm_err)?;
    Ok(0)
}
