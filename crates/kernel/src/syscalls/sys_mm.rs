//! mmap, munmap, mprotect, brk, mremap, madvise, mlock, mlock2, munlock, get_mempolicy,
//! set_mempolicy.

use std::sync::Arc;

use abi::Errno;
use mm::{MmapRequest, Prot, VmLock, VmaKind};
use platform::{Gva, PAGE_SIZE};

use super::{SysResult, SyscallArgs};
use crate::fd::FileKind;
use crate::task::Task;

pub(super) fn mm_err(e: mm::MmError) -> Errno {
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
/// region": a shared mapping maps a shared object of the sandbox (a new anonymous one, or the
/// file's), whose pages every process mapping it sees (`mm::shared`).
pub fn sys_mmap(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (addr, len, prot, flags, fd, off) = (a.gva(0), a.u(1), a.u(2), a.int(3), a.int(4), a.u(5));
    let share = flags & (libc::MAP_SHARED | libc::MAP_PRIVATE | libc::MAP_SHARED_VALIDATE);
    if flags & libc::MAP_ANONYMOUS == 0 {
        // Linux looks up the descriptor before anything else but the flags (EBADF first);
        // an O_PATH descriptor opens nothing to map (its lookup skips them: EBADF too).
        let f = t.fds.get(fd)?;
        if is_path_only(&f) {
            return Err(Errno::EBADF);
        }
    } else if share == libc::MAP_SHARED_VALIDATE {
        return Err(Errno::EINVAL);
    }
    // Flags Linux does not know are ignored, but with MAP_SHARED_VALIDATE (EOPNOTSUPP; MAP_SYNC
    // is refused the same way, torpor having no DAX file).
    if share == libc::MAP_SHARED_VALIDATE && flags & !MAP_FLAGS != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    let flags = flags & MAP_FLAGS;
    let prot = Prot::from_bits(prot).ok_or(Errno::EINVAL)?;
    if share == 0 || share == (libc::MAP_SHARED | libc::MAP_PRIVATE) {
        return Err(Errno::EINVAL);
    }
    if len == 0 || off % PAGE_SIZE != 0 {
        return Err(Errno::EINVAL);
    }
    let shared = share != libc::MAP_PRIVATE;
    // A file mapping shows its file's path in /proc/PID/maps, resolved as Linux's d_path
    // (symlinks followed: /usr/lib/…/libc.so.6, not the /lib/… the dynamic linker opened).
    let mut name = None;
    let kind = if flags & libc::MAP_ANONYMOUS != 0 {
        if shared {
            // Shared with the children this process forks: an object of its own.
            let object = t
                .group
                .procs
                .shm
                .anonymous(len, "anon")
                .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::ENOMEM)))?;
            VmaKind::Shared {
                object,
                offset: 0,
                may_write: true,
            }
        } else {
            VmaKind::Anon
        }
    } else {
        let f = t.fds.get(fd)?;
        if let FileKind::IoUring(ring) = &f.kind {
            name = Some(super::sys_io_uring::MAPPING_NAME.into());
            super::sys_io_uring::mapping(ring, addr, off)?
        } else {
            file_mapping(t, &f, &mut name, shared, prot, off)?
        }
    };
    let populate = flags & libc::MAP_POPULATE != 0;
    let map_locked = flags & libc::MAP_LOCKED != 0;
    let request = MmapRequest {
        addr,
        len,
        prot,
        fixed: flags & libc::MAP_FIXED != 0,
        fixed_noreplace: flags & libc::MAP_FIXED_NOREPLACE != 0,
        kind,
        name,
    };
    // A fixed mapping may replace pages: synced before the address space is unlocked.
    let at = t
        .mm_restrict(|mm| {
            let at = mm.mmap(request)?;
            let end = Gva(at.raw() + len.div_ceil(PAGE_SIZE) * PAGE_SIZE);
            if map_locked && mm.default_lock() == VmLock::None {
                // MAP_LOCKED: VM_LOCKED, as mlock(2) of the new mapping.
                mm.set_lock(at, end, VmLock::Locked)?;
            }
            // A locked mapping (MAP_LOCKED, mlockall's MCL_FUTURE) is faulted in now, as with
            // MAP_POPULATE; best effort, as Linux: a failure here does not fail the mmap.
            let locked = mm.find_vma(at).map(|v| v.lock) == Some(VmLock::Locked);
            if (populate || locked) && prot.is_accessible() {
                let write = prot.contains(Prot::WRITE) && !shared;
                let _ = mm.populate(at, len, write);
            }
            Ok(at)
        })
        .map_err(mm_err)?;
    Ok(at.raw())
}

/// The mapping of file `f` (not anonymous memory): its shared object or its pages copied
/// on write; `name` gets its path, as `/proc/PID/maps` shows it.
fn file_mapping(
    t: &Task,
    f: &crate::fd::OpenFile,
    name: &mut Option<String>,
    shared: bool,
    prot: Prot,
    off: u64,
) -> Result<VmaKind, Errno> {
    if !f.kind.is_mappable() {
        return Err(Errno::ENODEV);
    }
    *name = t
        .root
        .guest_path_of(f.owned())
        .ok()
        .map(|p| String::from_utf8_lossy(&p).into_owned());
    // Linux: the descriptor must be readable, and writable for a writable shared map.
    let mode = access_mode(f)?;
    if mode == libc::O_WRONLY {
        return Err(Errno::EACCES);
    }
    let file = std::fs::File::from(f.owned().try_clone().map_err(Errno::from)?);
    Ok(if shared {
        let object = t.group.procs.shm.file(&file).map_err(Errno::from)?;
        let may_write = mode == libc::O_RDWR && object.is_writable();
        if prot.contains(Prot::WRITE) && !may_write {
            return Err(Errno::EACCES);
        }
        VmaKind::Shared {
            object,
            offset: off,
            may_write,
        }
    } else {
        // Clean pages from the page cache, copied on write (`mm`'s `pagecache.rs`), when
        // the file qualifies (mapped executable, now or before) and sharing is on.
        let cache = t
            .group
            .procs
            .shm
            .private_file(&file, prot.contains(Prot::EXEC));
        VmaKind::File {
            file: Arc::new(file),
            offset: off,
            cache,
        }
    })
}

/// The access mode (O_RDONLY, O_WRONLY, O_RDWR) of an open file.
/// Whether `f` was opened with O_PATH (its host descriptor says so).
pub(super) fn is_path_only(f: &crate::fd::OpenFile) -> bool {
    crate::fd::host::status_flags(f.host()).is_ok_and(|fl| fl & libc::O_PATH != 0)
}

fn access_mode(f: &crate::fd::OpenFile) -> Result<i32, Errno> {
    Ok(crate::fd::host::status_flags(f.host())? & libc::O_ACCMODE)
}

/// Implements munmap(2).
pub fn sys_munmap(t: &mut Task, a: &SyscallArgs) -> SysResult {
    t.mm_restrict(|mm| mm.munmap(a.gva(0), a.u(1)))
        .map_err(mm_err)?;
    Ok(0)
}

/// Implements mprotect(2).
pub fn sys_mprotect(t: &mut Task, a: &SyscallArgs) -> SysResult {
    // PROT_GROWSDOWN/PROT_GROWSUP are accepted and ignored.
    let bits = a.u(2) & !0x0300_0000;
    let prot = Prot::from_bits(bits).ok_or(Errno::EINVAL)?;
    t.mm_restrict(|mm| mm.mprotect(a.gva(0), a.u(1), prot))
        .map_err(mm_err)?;
    Ok(0)
}

/// Implements brk(2): "On success, brk() returns the new program break; on failure, the
/// current break" (the raw syscall never fails).
pub fn sys_brk(t: &mut Task, a: &SyscallArgs) -> SysResult {
    Ok(t.mm_restrict(|mm| mm.brk(a.gva(0))).raw())
}

/// Implements mremap(2).
pub fn sys_mremap(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let flags = a.u(3) as u32;
    if flags & !(mm::MREMAP_MAYMOVE | mm::MREMAP_FIXED) != 0 {
        return Err(Errno::EINVAL);
    }
    let (old_len, new_len) = (a.u(1), a.u(2));
    t.mm_restrict(|mm| {
        let at = mm.mremap(a.gva(0), old_len, new_len, flags, Gva(a.u(4)))?;
        // A locked mapping that grew: its new pages are faulted in now, as Linux's mremap
        // does (best effort).
        let old_end = old_len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let new_end = new_len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        if new_end > old_end {
            let _ = mm.populate_locked(Gva(at.raw() + old_end), Gva(at.raw() + new_end));
        }
        Ok(at)
    })
    .map(|g| g.raw())
    .map_err(mm_err)
}

/// Implements madvise(2).
pub fn sys_madvise(t: &mut Task, a: &SyscallArgs) -> SysResult {
    t.mm_restrict(|mm| mm.madvise(a.gva(0), a.u(1), a.int(2)))
        .map_err(mm_err)?;
    Ok(0)
}

/// `[addr, addr + len)` widened to whole pages, as mlock(2) and munlock(2) take it; EINVAL
/// when the end wraps around, as on Linux.
fn lock_range(addr: u64, len: u64) -> Result<(Gva, Gva), Errno> {
    let start = addr & !(PAGE_SIZE - 1);
    let end = addr
        .checked_add(len)
        .and_then(|e| e.checked_add(PAGE_SIZE - 1))
        .ok_or(Errno::EINVAL)?
        & !(PAGE_SIZE - 1);
    Ok((Gva(start), Gva(end)))
}

/// The accessible parts of `[start, end)`: `(start, len, write)` for each accessible VMA it
/// overlaps. ENOMEM when a page of the range is not mapped ("Some of the
/// specified address range does not correspond to mapped pages in the address space").
fn locked_parts(
    mm: &mm::MemoryManager,
    start: Gva,
    end: Gva,
) -> Result<Vec<(Gva, u64, bool)>, Errno> {
    let mut parts = Vec::new();
    let mut next = start;
    for v in mm.vmas() {
        if next >= end {
            break;
        }
        if v.end <= next {
            continue;
        }
        if v.start > next {
            return Err(Errno::ENOMEM);
        }
        let to = if v.end < end { v.end } else { end };
        if v.prot.is_accessible() {
            // A writable private mapping is faulted in for writing, as Linux does (it breaks
            // copy-on-write now rather than at the first store).
            parts.push((next, to.raw() - next.raw(), v.prot.contains(Prot::WRITE)));
        }
        next = to;
    }
    if next < end {
        return Err(Errno::ENOMEM);
    }
    Ok(parts)
}

/// mlock2's only flag.
const MLOCK_ONFAULT: u64 = 1;

/// Linux's `__mlock_posix_error_return`: a page that cannot be faulted in is ENOMEM, a lack
/// of memory EAGAIN.
fn populate_err(e: mm::MmError) -> Errno {
    match e.errno() {
        libc::ENOMEM => Errno::EAGAIN,
        libc::EFAULT => Errno::ENOMEM,
        other => Errno(other),
    }
}

fn mlock_range(t: &mut Task, addr: u64, len: u64, flags: u64) -> SysResult {
    if flags & !MLOCK_ONFAULT != 0 {
        return Err(Errno::EINVAL);
    }
    let (start, end) = lock_range(addr, len)?;
    if start == end {
        return Ok(0);
    }
    let lock = if flags & MLOCK_ONFAULT != 0 {
        VmLock::OnFault
    } else {
        VmLock::Locked
    };
    let mut mm = t.mm();
    mm.set_lock(start, end, lock).map_err(mm_err)?;
    mm.populate_locked(start, end).map_err(populate_err)?;
    Ok(0)
}

/// Implements mlock(2): the range must be mapped; its mappings are locked (`VmLck`,
/// smaps' `Locked`) and their pages faulted in now. The sandbox has no swap of its own while
/// it runs, so they stay resident, except that hibernation writes every page to the
/// sandbox's swap file, locked or not (a documented gap). RLIMIT_MEMLOCK is not enforced.
pub fn sys_mlock(t: &mut Task, a: &SyscallArgs) -> SysResult {
    mlock_range(t, a.u(0), a.u(1), 0)
}

/// Implements mlock2(2): mlock(2), or with MLOCK_ONFAULT the range locked with nothing
/// faulted in now.
pub fn sys_mlock2(t: &mut Task, a: &SyscallArgs) -> SysResult {
    mlock_range(t, a.u(0), a.u(1), a.u(2))
}

/// mlockall's flags.
const MCL_CURRENT: u64 = 1;
const MCL_FUTURE: u64 = 2;
const MCL_ONFAULT: u64 = 4;

/// Implements mlockall(2), as Linux's `apply_mlockall_flags`: MCL_CURRENT locks every mapping
/// and (without MCL_ONFAULT) faults in their accessible pages now, ignoring pages that cannot
/// be, as Linux's `mm_populate`; MCL_FUTURE locks the mappings made from now on (an mmap,
/// a growing break fault theirs in at once); MCL_ONFAULT makes either lock on fault.
pub fn sys_mlockall(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let flags = a.u(0);
    if flags == 0 || flags & !(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) != 0 || flags == MCL_ONFAULT
    {
        return Err(Errno::EINVAL);
    }
    let lock = if flags & MCL_ONFAULT != 0 {
        VmLock::OnFault
    } else {
        VmLock::Locked
    };
    let future = if flags & MCL_FUTURE != 0 {
        lock
    } else {
        VmLock::None
    };
    let current = (flags & MCL_CURRENT != 0).then_some(lock);
    let mut mm = t.mm();
    mm.lock_all(current, future);
    if current == Some(VmLock::Locked) {
        let _ = mm.populate_locked(Gva(0), platform::layout::USER_END);
    }
    Ok(0)
}

/// Implements munlockall(2): no mapping is locked any more, nor are later ones.
pub fn sys_munlockall(t: &mut Task, _a: &SyscallArgs) -> SysResult {
    t.mm().lock_all(Some(VmLock::None), VmLock::None);
    Ok(0)
}

/// Implements mincore(2): one byte per page of `[addr, addr + len)` (`addr` page-aligned,
/// every page mapped), bit 0 set for a page resident now (`MemoryManager::resident_pages`:
/// a shared or file page counts when the host's page cache holds it).
pub fn sys_mincore(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (addr, len, vec) = (a.u(0), a.u(1), a.gva(2));
    if addr % PAGE_SIZE != 0 {
        return Err(Errno::EINVAL);
    }
    let pages = len.div_ceil(PAGE_SIZE);
    let end = pages
        .checked_mul(PAGE_SIZE)
        .and_then(|l| addr.checked_add(l))
        .filter(|&e| e <= platform::layout::USER_END.raw())
        .ok_or(Errno::ENOMEM)?;
    if pages == 0 {
        return Ok(0);
    }
    let (start, end) = (Gva(addr), Gva(end));
    // Every page of the range mapped, whatever its protection (else ENOMEM), as mlock's.
    locked_parts(&t.mm(), start, end)?;
    // In chunks: a mapped range may be a reservation of terabytes.
    const CHUNK: u64 = 1 << 16;
    let mut first = 0;
    while first < pages {
        let n = (pages - first).min(CHUNK);
        let from = Gva(addr + first * PAGE_SIZE);
        let to = Gva(from.raw() + n * PAGE_SIZE);
        let mut out = vec![0u8; n as usize];
        for va in t.mm().resident_pages(from, to) {
            out[((va.raw() - from.raw()) / PAGE_SIZE) as usize] = 1;
        }
        t.copy_out(Gva(vec.raw().wrapping_add(first)), &out)?;
        first += n;
    }
    Ok(0)
}

/// Implements munlock(2): the range must be mapped; its mappings are no longer locked.
pub fn sys_munlock(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (start, end) = lock_range(a.u(0), a.u(1))?;
    if start == end {
        return Ok(0);
    }
    t.mm().set_lock(start, end, VmLock::None).map_err(mm_err)?;
    Ok(0)
}

// NUMA memory policies (Linux's mm/mempolicy.c) for a sandbox that is one node, node 0.
const MPOL_DEFAULT: u32 = 0;
const MPOL_PREFERRED: u32 = 1;
const MPOL_BIND: u32 = 2;
const MPOL_INTERLEAVE: u32 = 3;
const MPOL_LOCAL: u32 = 4;
/// One past the last mode (MPOL_PREFERRED_MANY = 5; no MPOL_WEIGHTED_INTERLEAVE).
const MPOL_MAX: u32 = 6;
const MPOL_F_STATIC_NODES: u32 = 1 << 15;
const MPOL_F_RELATIVE_NODES: u32 = 1 << 14;
const MPOL_F_NUMA_BALANCING: u32 = 1 << 13;
const MPOL_MODE_FLAGS: u32 = MPOL_F_STATIC_NODES | MPOL_F_RELATIVE_NODES | MPOL_F_NUMA_BALANCING;
const MPOL_F_NODE: u64 = 1;
const MPOL_F_ADDR: u64 = 2;
const MPOL_F_MEMS_ALLOWED: u64 = 4;
/// The sandbox is one NUMA node, node 0 (Linux's `nr_node_ids`).
const NR_NODE_IDS: u64 = 1;
/// Linux's MAX_NUMNODES on Debian's x86-64 kernels (NODES_SHIFT = 10): the bits of a node
/// mask from there on must be zero.
const MAX_NUMNODES: u64 = 1024;

/// A thread's memory policy other than the default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MemPolicy {
    /// MPOL_PREFERRED … MPOL_PREFERRED_MANY.
    mode: u32,
    /// MPOL_F_STATIC_NODES, MPOL_F_RELATIVE_NODES, MPOL_F_NUMA_BALANCING.
    flags: u32,
    /// The first word of the mask get_mempolicy reports: the caller's own mask with
    /// MPOL_F_STATIC_NODES or MPOL_F_RELATIVE_NODES, else the nodes in effect (node 0).
    nodes: u64,
}

std::thread_local! {
    /// The calling task's policy (None: MPOL_DEFAULT). Linux keeps it per thread; every task
    /// runs on a host thread of its own, so a host thread-local is per task. Unlike Linux, a
    /// new thread or process starts with the default policy rather than its creator's.
    static MEMPOLICY: std::cell::Cell<Option<MemPolicy>> = const { std::cell::Cell::new(None) };
}

/// A node mask read from the application (Linux's get_nodes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct UserNodes {
    /// No bit set.
    empty: bool,
    /// Nodes 0 to 63.
    word0: u64,
}

/// Decodes the words of a node mask of `bits` bits (`maxnode - 1`): the bits beyond `bits` in
/// the last word are ignored; EINVAL when a node at or beyond MAX_NUMNODES is set.
fn user_nodes(words: &[u64], bits: u64) -> Result<UserNodes, Errno> {
    let mut empty = true;
    for (i, &w) in words.iter().enumerate() {
        let first = i as u64 * 64;
        let left = bits.saturating_sub(first);
        let w = if left < 64 {
            w & ((1u64 << left) - 1)
        } else {
            w
        };
        if w != 0 {
            if first >= MAX_NUMNODES {
                return Err(Errno::EINVAL);
            }
            empty = false;
        }
    }
    Ok(UserNodes {
        empty,
        word0: words.first().map_or(0, |&w| {
            if bits < 64 {
                w & ((1u64 << bits) - 1)
            } else {
                w
            }
        }),
    })
}

/// Reads the node mask at `nmask` of `maxnode - 1` bits, as Linux's get_nodes: empty for a
/// NULL mask or `maxnode` 1, EINVAL beyond a page of bits.
fn read_nodemask(t: &Task, nmask: Gva, maxnode: u64) -> Result<UserNodes, Errno> {
    let bits = maxnode.wrapping_sub(1);
    if bits == 0 || nmask.raw() == 0 {
        return Ok(UserNodes {
            empty: true,
            word0: 0,
        });
    }
    if bits > PAGE_SIZE * 8 {
        return Err(Errno::EINVAL);
    }
    let mut bytes = vec![0u8; (bits.div_ceil(64) * 8) as usize];
    t.copy_in(nmask, &mut bytes)?;
    let words: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect();
    user_nodes(&words, bits)
}

/// Splits set_mempolicy's `mode` argument into the mode and its flags, as Linux's
/// sanitize_mpol_flags.
fn mode_and_flags(arg: u32) -> Result<(u32, u32), Errno> {
    let flags = arg & MPOL_MODE_FLAGS;
    let mode = arg & !MPOL_MODE_FLAGS;
    if mode >= MPOL_MAX
        || (flags & MPOL_F_STATIC_NODES != 0 && flags & MPOL_F_RELATIVE_NODES != 0)
        || (flags & MPOL_F_NUMA_BALANCING != 0 && mode != MPOL_BIND)
    {
        return Err(Errno::EINVAL);
    }
    Ok((mode, flags))
}

/// The policy `mode` with `flags` and the caller's `nodes` makes, as Linux's mpol_new and
/// mpol_set_nodemask with node 0 the only node allowed (None: the default policy).
fn new_policy(mode: u32, flags: u32, nodes: UserNodes) -> Result<Option<MemPolicy>, Errno> {
    let user_mask = flags & (MPOL_F_STATIC_NODES | MPOL_F_RELATIVE_NODES) != 0;
    let mut mode = mode;
    match mode {
        MPOL_DEFAULT if nodes.empty => return Ok(None),
        MPOL_DEFAULT => return Err(Errno::EINVAL),
        MPOL_PREFERRED if nodes.empty => {
            if user_mask {
                return Err(Errno::EINVAL);
            }
            mode = MPOL_LOCAL;
        }
        MPOL_LOCAL if !nodes.empty || user_mask => return Err(Errno::EINVAL),
        MPOL_LOCAL => {}
        _ if nodes.empty => return Err(Errno::EINVAL),
        _ => {}
    }
    if mode == MPOL_LOCAL {
        return Ok(Some(MemPolicy {
            mode,
            flags,
            nodes: 0,
        }));
    }
    // The nodes in effect: relative nodes fold onto the allowed ones (node 0 alone), other
    // masks are intersected with them.
    let effective = if flags & MPOL_F_RELATIVE_NODES != 0 {
        1
    } else {
        nodes.word0 & 1
    };
    if effective == 0 {
        return Err(Errno::EINVAL);
    }
    Ok(Some(MemPolicy {
        mode,
        flags,
        nodes: if user_mask { nodes.word0 } else { effective },
    }))
}

/// Implements set_mempolicy(2): the calling task's policy, checked as Linux does (the modes up
/// to MPOL_PREFERRED_MANY, their flags, a node mask naming node 0) and reported back by
/// get_mempolicy. With one node every policy allocates from node 0.
pub fn sys_set_mempolicy(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (mode, flags) = mode_and_flags(a.u(0) as u32)?;
    let nodes = read_nodemask(t, a.gva(1), a.u(2))?;
    let policy = new_policy(mode, flags, nodes)?;
    MEMPOLICY.with(|p| p.set(policy));
    Ok(0)
}

/// The bytes get_mempolicy(2) writes at `nmask` for a node mask `nodes` (bit n: node n) and
/// the caller's `maxnode`, as Linux's copy_nodes_to_user: `ALIGN(maxnode - 1, 64) / 8` bytes,
/// the kernel's own words (one long for one node) followed by zeros; EINVAL beyond a page.
fn nodemask_bytes(maxnode: u64, nodes: u64) -> Result<Vec<u8>, Errno> {
    let copy = maxnode.saturating_sub(1).div_ceil(64) * 8;
    let nbytes = NR_NODE_IDS.div_ceil(64) * 8;
    if copy > nbytes && copy > PAGE_SIZE {
        return Err(Errno::EINVAL);
    }
    let mut out = vec![0u8; copy as usize];
    let own = copy.min(nbytes) as usize;
    out[..own].copy_from_slice(&nodes.to_le_bytes()[..own]);
    Ok(out)
}

/// Implements get_mempolicy(2): the task's policy (set_mempolicy) or, with MPOL_F_ADDR, the
/// policy of the mapping at `addr`, always the default (mbind is not implemented); node 0 for
/// MPOL_F_NODE, node 0 alone allowed for MPOL_F_MEMS_ALLOWED.
pub fn sys_get_mempolicy(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (policy, nmask, maxnode, addr, flags) = (a.gva(0), a.gva(1), a.u(2), a.u(3), a.u(4));
    if nmask.raw() != 0 && maxnode < NR_NODE_IDS {
        return Err(Errno::EINVAL);
    }
    if flags & !(MPOL_F_NODE | MPOL_F_ADDR | MPOL_F_MEMS_ALLOWED) != 0 {
        return Err(Errno::EINVAL);
    }
    let (value, nodes) = if flags & MPOL_F_MEMS_ALLOWED != 0 {
        if flags & (MPOL_F_NODE | MPOL_F_ADDR) != 0 {
            return Err(Errno::EINVAL);
        }
        (0, 1)
    } else {
        let pol = if flags & MPOL_F_ADDR != 0 {
            let mut mm = t.mm();
            if mm.find_vma(Gva(addr)).is_none() {
                return Err(Errno::EFAULT);
            }
            if flags & MPOL_F_NODE != 0 {
                // The node of the page at `addr`, faulted in as Linux does to find it.
                mm.populate(Gva(addr), 1, false).map_err(mm_err)?;
            }
            None
        } else if addr != 0 {
            return Err(Errno::EINVAL);
        } else {
            MEMPOLICY.with(std::cell::Cell::get)
        };
        let value = if flags & MPOL_F_NODE != 0 {
            match (flags & MPOL_F_ADDR != 0, pol) {
                // The page's node, or the next interleave node: node 0.
                (true, _) => 0,
                (false, Some(p)) if p.mode == MPOL_INTERLEAVE => 0,
                _ => return Err(Errno::EINVAL),
            }
        } else {
            pol.map_or(MPOL_DEFAULT, |p| p.mode | p.flags)
        };
        (value, pol.map_or(0, |p| p.nodes))
    };
    if policy.raw() != 0 {
        t.copy_out(policy, &value.to_le_bytes())?;
    }
    if nmask.raw() != 0 {
        let bytes = nodemask_bytes(maxnode, nodes)?;
        t.copy_out(nmask, &bytes)?;
    }
    Ok(0)
}

/// Implements msync(2). A shared file mapping's pages are the host file's own page cache
/// (`mm::shared`), so `read(2)` and other mappings already see every store: MS_ASYNC and
/// MS_INVALIDATE have nothing to do; MS_SYNC writes the root's filesystem back (as sync(2)
/// does here) when the range holds a shared mapping of a file. Linux's checks: EINVAL for an
/// unaligned address, unknown flags or MS_ASYNC with MS_SYNC; ENOMEM when part of the range
/// is not mapped.
pub fn sys_msync(t: &mut Task, a: &SyscallArgs) -> SysResult {
    const MS_ASYNC: i32 = 1;
    const MS_INVALIDATE: i32 = 2;
    const MS_SYNC: i32 = 4;
    let (addr, len, flags) = (a.u(0), a.u(1), a.int(2));
    if flags & !(MS_ASYNC | MS_INVALIDATE | MS_SYNC) != 0
        || addr % PAGE_SIZE != 0
        || (flags & MS_ASYNC != 0 && flags & MS_SYNC != 0)
    {
        return Err(Errno::EINVAL);
    }
    let end = addr
        .checked_add(len)
        .and_then(|e| e.checked_add(PAGE_SIZE - 1))
        .ok_or(Errno::ENOMEM)?
        & !(PAGE_SIZE - 1);
    if end == addr {
        return Ok(0);
    }
    let (covered, file_backed, locked) = {
        let mm = t.mm();
        let mut at = addr;
        let mut file_backed = false;
        let mut locked = false;
        for v in mm.vmas() {
            if v.end.raw() <= at || v.start.raw() >= end {
                continue;
            }
            if v.start.raw() > at {
                break;
            }
            if let VmaKind::Shared { object, .. } = &v.kind {
                file_backed |= object.is_file();
            }
            locked |= v.lock != mm::VmLock::None;
            at = v.end.raw();
            if at >= end {
                break;
            }
        }
        (at >= end, file_backed, locked)
    };
    // Invalidating locked pages is refused (Linux: EBUSY).
    if flags & MS_INVALIDATE != 0 && locked {
        return Err(Errno::EBUSY);
    }
    if flags & MS_SYNC != 0 && file_backed {
        if let Ok(root) = t.root.open_at(b"/", libc::O_RDONLY | libc::O_DIRECTORY, 0) {
            // msync's answer does not depend on the sync's.
            let _ = crate::fd::host::syncfs(std::os::fd::AsFd::as_fd(&root));
        }
    }
    if !covered {
        return Err(Errno::ENOMEM);
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_ranges_cover_whole_pages() {
        assert_eq!(lock_range(0x1000, 0x1000), Ok((Gva(0x1000), Gva(0x2000))));
        assert_eq!(lock_range(0x1ff0, 0x20), Ok((Gva(0x1000), Gva(0x3000))));
        assert_eq!(lock_range(0x1234, 0), Ok((Gva(0x1000), Gva(0x2000))));
        assert_eq!(lock_range(0x1000, 0), Ok((Gva(0x1000), Gva(0x1000))));
        assert_eq!(lock_range(u64::MAX - 0x10, 0x100), Err(Errno::EINVAL));
        assert_eq!(lock_range(0x1000, u64::MAX - 0x800), Err(Errno::EINVAL));
    }

    #[test]
    fn nodemask_is_copied_as_linux_does() {
        // maxnode counts bits plus one (libnuma probes with 33, 65, ...).
        assert_eq!(nodemask_bytes(1, 1), Ok(vec![]));
        assert_eq!(nodemask_bytes(2, 1), Ok(vec![1, 0, 0, 0, 0, 0, 0, 0]));
        assert_eq!(nodemask_bytes(33, 1), Ok(vec![1, 0, 0, 0, 0, 0, 0, 0]));
        assert_eq!(nodemask_bytes(65, 0), Ok(vec![0; 8]));
        let mut long = vec![0u8; 16];
        long[0] = 1;
        assert_eq!(nodemask_bytes(66, 1), Ok(long));
        assert_eq!(nodemask_bytes(1025, 1).map(|v| v.len()), Ok(128));
        assert_eq!(
            nodemask_bytes(PAGE_SIZE * 8 + 1, 0).map(|v| v.len()),
            Ok(4096)
        );
        assert_eq!(nodemask_bytes(PAGE_SIZE * 8 + 2, 0), Err(Errno::EINVAL));
    }

    #[test]
    fn user_node_masks_are_decoded_as_linux_does() {
        let none = UserNodes {
            empty: true,
            word0: 0,
        };
        let node0 = UserNodes {
            empty: false,
            word0: 1,
        };
        assert_eq!(user_nodes(&[1], 1), Ok(node0));
        // Bits beyond maxnode - 1 are ignored.
        assert_eq!(user_nodes(&[2], 1), Ok(none));
        assert_eq!(user_nodes(&[0, 1 << 5], 64 + 5), Ok(none));
        assert_eq!(
            user_nodes(&[0, 1], 128),
            Ok(UserNodes {
                empty: false,
                word0: 0
            })
        );
        // Nodes from MAX_NUMNODES on must not be named.
        let mut words = vec![0u64; 32];
        words[16] = 1;
        assert_eq!(user_nodes(&words, 2048), Err(Errno::EINVAL));
        words[16] = 0;
        words[15] = 1 << 63;
        assert!(user_nodes(&words, 2048).is_ok());
    }

    #[test]
    fn policies_are_checked_as_linux_does() {
        let none = UserNodes {
            empty: true,
            word0: 0,
        };
        let node0 = UserNodes {
            empty: false,
            word0: 1,
        };
        let node3 = UserNodes {
            empty: false,
            word0: 8,
        };
        assert_eq!(
            mode_and_flags(MPOL_BIND | MPOL_F_STATIC_NODES),
            Ok((MPOL_BIND, MPOL_F_STATIC_NODES))
        );
        assert_eq!(mode_and_flags(6), Err(Errno::EINVAL));
        assert_eq!(mode_and_flags(u32::MAX), Err(Errno::EINVAL));
        assert_eq!(
            mode_and_flags(MPOL_BIND | MPOL_F_STATIC_NODES | MPOL_F_RELATIVE_NODES),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            mode_and_flags(MPOL_INTERLEAVE | MPOL_F_NUMA_BALANCING),
            Err(Errno::EINVAL)
        );

        assert_eq!(new_policy(MPOL_DEFAULT, 0, none), Ok(None));
        assert_eq!(new_policy(MPOL_DEFAULT, 0, node0), Err(Errno::EINVAL));
        let local = MemPolicy {
            mode: MPOL_LOCAL,
            flags: 0,
            nodes: 0,
        };
        assert_eq!(new_policy(MPOL_PREFERRED, 0, none), Ok(Some(local)));
        assert_eq!(
            new_policy(MPOL_PREFERRED, MPOL_F_STATIC_NODES, none),
            Err(Errno::EINVAL)
        );
        assert_eq!(new_policy(MPOL_LOCAL, 0, none), Ok(Some(local)));
        assert_eq!(new_policy(MPOL_LOCAL, 0, node0), Err(Errno::EINVAL));
        assert_eq!(new_policy(MPOL_BIND, 0, none), Err(Errno::EINVAL));
        assert_eq!(
            new_policy(MPOL_BIND, 0, node0),
            Ok(Some(MemPolicy {
                mode: MPOL_BIND,
                flags: 0,
                nodes: 1
            }))
        );
        // Node 3 does not exist: EINVAL, unless relative (folded onto node 0).
        assert_eq!(new_policy(MPOL_INTERLEAVE, 0, node3), Err(Errno::EINVAL));
        assert_eq!(
            new_policy(MPOL_INTERLEAVE, MPOL_F_STATIC_NODES, node3),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            new_policy(MPOL_INTERLEAVE, MPOL_F_RELATIVE_NODES, node3),
            Ok(Some(MemPolicy {
                mode: MPOL_INTERLEAVE,
                flags: MPOL_F_RELATIVE_NODES,
                nodes: 8
            }))
        );
        // libnuma's probe: MPOL_PREFERRED_MANY on the allowed nodes.
        assert_eq!(
            new_policy(5, 0, node0),
            Ok(Some(MemPolicy {
                mode: 5,
                flags: 0,
                nodes: 1
            }))
        );
    }
}
