//! System V shared memory: shmget(2), shmat(2), shmdt(2), shmctl(2), over the sandbox's
//! segment table ([`crate::ipc`]).

use abi::Errno;
use mm::{MmapRequest, Prot, VmaKind};
use platform::{Gva, PAGE_SIZE};

use super::sys_msg::caller;
use super::{SysResult, SyscallArgs};
use crate::ipc;
use crate::ipc::ids::StatBy;
use crate::task::Task;

const IPC_RMID: i32 = 0;
const IPC_SET: i32 = 1;
const IPC_STAT: i32 = 2;
const IPC_INFO: i32 = 3;
/// Set by C libraries that ask for the 64-bit structures (the only ones on x86-64).
const IPC_64: i32 = 0x100;
const SHM_LOCK: i32 = 11;
const SHM_UNLOCK: i32 = 12;
const SHM_STAT: i32 = 13;
const SHM_INFO: i32 = 14;
const SHM_STAT_ANY: i32 = 15;
const SHM_RDONLY: i32 = 0o10000;
const SHM_RND: i32 = 0o20000;
const SHM_REMAP: i32 = 0o40000;
const SHM_EXEC: i32 = 0o100000;
/// SHMLBA on x86-64: a page.
const SHMLBA: u64 = PAGE_SIZE;

/// Implements shmget(2).
pub fn sys_shmget(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (key, size, flags) = (a.int(0), a.u(1), a.int(2));
    let space = t.group.procs.shm.clone();
    let who = caller(t);
    let id = t.group.procs.sysv_shm.get(key, size, flags, &who, |size| {
        space
            .anonymous(size, "sysv")
            .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::ENOMEM)))
    })?;
    Ok(id as u64)
}

/// Implements shmat(2): maps the whole segment, read-write or (SHM_RDONLY) read-only, at
/// `addr` (rounded down with SHM_RND; replacing what is there with SHM_REMAP) or where the
/// kernel picks.
pub fn sys_shmat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (id, addr, flags) = (a.int(0), a.u(1), a.int(2));
    if id < 0 {
        return Err(Errno::EINVAL);
    }
    let mut addr = addr;
    if addr != 0 && addr % SHMLBA != 0 {
        if flags & SHM_RND == 0 {
            return Err(Errno::EINVAL);
        }
        addr &= !(SHMLBA - 1);
    }
    if flags & SHM_REMAP != 0 && addr == 0 {
        return Err(Errno::EINVAL);
    }
    let seg = t.group.procs.sysv_shm.segment(id)?;
    let readonly = flags & SHM_RDONLY != 0;
    // Linux's ipcperms with S_IRUGO, S_IWUGO if writable, S_IXUGO with SHM_EXEC.
    let (mut prot, mut wanted) = if readonly {
        (Prot::READ, 0o444)
    } else {
        (Prot::RW, 0o666)
    };
    if flags & SHM_EXEC != 0 {
        prot = prot | Prot::EXEC;
        wanted |= 0o111;
    }
    if !caller(t).may(&seg.perm, wanted) {
        return Err(Errno::EACCES);
    }
    let request = MmapRequest {
        addr: Gva(addr),
        len: seg.size,
        prot,
        fixed: addr != 0 && flags & SHM_REMAP != 0,
        fixed_noreplace: addr != 0 && flags & SHM_REMAP == 0,
        kind: VmaKind::Shared {
            object: seg.object.clone(),
            offset: 0,
            may_write: !readonly,
        },
        name: Some("/SYSV".to_string()),
    };
    let at = t
        .mm_restrict(|mm| mm.mmap(request))
        .map_err(|e| match e.errno() {
            libc::EEXIST => Errno::EINVAL,
            n => Errno(n),
        })?;
    drop(seg);
    let pid = t.pid;
    let _ = t.group.procs.sysv_shm.update(id, |s| {
        s.lpid = pid;
        s.atime = ipc::now();
    });
    Ok(at.raw())
}

/// Implements shmdt(2): unmaps the segment attached at `addr` (EINVAL if none starts there).
pub fn sys_shmdt(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let addr = a.gva(0);
    if !addr.raw().is_multiple_of(SHMLBA) {
        return Err(Errno::EINVAL);
    }
    let (object, end) = {
        let mm = t.mm();
        let v = mm
            .find_vma(addr)
            .filter(|v| v.start == addr)
            .ok_or(Errno::EINVAL)?;
        let VmaKind::Shared {
            object, offset: 0, ..
        } = &v.kind
        else {
            return Err(Errno::EINVAL);
        };
        if object.name() != "sysv" {
            return Err(Errno::EINVAL);
        }
        let size = object.size().map_err(Errno::from)?;
        (object.clone(), Gva(addr.raw() + size))
    };
    // Every piece of this attach (mprotect may have split it) up to the segment's size.
    let len = {
        let mm = t.mm();
        let mut e = addr;
        while let Some(v) = mm.find_vma(e).filter(|v| {
            v.start < end
                && matches!(&v.kind, VmaKind::Shared { object: o, .. } if std::sync::Arc::ptr_eq(o, &object))
        }) {
            e = v.end.min(end);
            if e == end {
                break;
            }
        }
        e.raw() - addr.raw()
    };
    t.mm_restrict(|mm| mm.munmap(addr, len))
        .map_err(|e| Errno(e.errno()))?;
    t.group.procs.sysv_shm.detached(&object, t.pid);
    Ok(0)
}

/// Implements shmctl(2): IPC_STAT, SHM_STAT and SHM_STAT_ANY (by index; they return the
/// id), IPC_SET (owner, group, mode), IPC_RMID, IPC_INFO and SHM_INFO (they return the
/// highest index in use), SHM_LOCK and SHM_UNLOCK (see [`crate::ipc::shm`]).
pub fn sys_shmctl(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (id, cmd, buf) = (a.int(0), a.int(1), a.gva(2));
    if id < 0 || cmd < 0 {
        return Err(Errno::EINVAL);
    }
    let table = t.group.procs.sysv_shm.clone();
    let who = caller(t);
    match cmd & !IPC_64 {
        IPC_INFO => {
            let (info, max_idx) = table.ipc_info();
            t.copy_out(buf, &info)?;
            Ok(max_idx as u64)
        }
        SHM_INFO => {
            let (info, max_idx) = table.shm_info();
            t.copy_out(buf, &info)?;
            Ok(max_idx as u64)
        }
        c @ (IPC_STAT | SHM_STAT | SHM_STAT_ANY) => {
            let by = match c {
                IPC_STAT => StatBy::Id,
                SHM_STAT => StatBy::Index,
                _ => StatBy::IndexAny,
            };
            let (ds, full_id) = table.stat(id, by, &who)?;
            t.copy_out(buf, &ds)?;
            Ok(if c == IPC_STAT { 0 } else { full_id as u64 })
        }
        IPC_SET => {
            let mut ds = [0u8; 112];
            t.copy_in(buf, &mut ds)?;
            table.set(id, &ds, &who)?;
            Ok(0)
        }
        IPC_RMID => {
            table.remove(id, &who)?;
            Ok(0)
        }
        c @ (SHM_LOCK | SHM_UNLOCK) => {
            table.lock_segment(id, c == SHM_LOCK, &who)?;
            Ok(0)
        }
        _ => Err(Errno::EINVAL),
    }
}
