//! System V shared memory segments of a sandbox (Linux's `struct shmid_kernel`, ipc/shm.c):
//! the segments by id and the rules of shmget(2) and shmctl(2) over them; the handlers
//! (`syscalls/sys_shm.rs`) copy the guest's structures and map the memory.
//!
//! A segment's memory is an anonymous [`SharedObject`] of the sandbox's shared space, so
//! attaching it in any process maps the same pages ([`mm::shared`]). Its attach count is the
//! number of mappings holding the object (a fork's copies count, as on Linux). A removed
//! segment (IPC_RMID) leaves the table at once, even while attached (Linux keeps it, with
//! key 0 and SHM_DEST, until the last detach); its memory goes with the last mapping.
//!
//! SHM_LOCK marks a segment locked (SHM_LOCKED in its mode) after Linux's checks; torpor
//! never swaps a segment's pages but by hibernating the whole sandbox, which a lock does not
//! change. The size locked is counted against the caller's `RLIMIT_MEMLOCK` with the other
//! segments the sandbox has locked (Linux counts per user).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use abi::Errno;
use mm::SharedObject;
use platform::PAGE_SIZE;

use super::caller::Caller;
use super::ids::{self, index_of, seq_of, IdCursor, StatBy};
use super::limits::{ShmLimits, SHMMIN, SHM_CEILING};
use super::{now, IpcPerm, IPC_PRIVATE};

/// `SHM_DEST` in a segment's mode: removed, still attached (never set here, see the module).
pub const SHM_DEST: u16 = 0o1000;
/// `SHM_LOCKED` in a segment's mode: locked in memory by SHM_LOCK.
pub const SHM_LOCKED: u16 = 0o2000;
/// `SHM_HUGETLB` in shmget's flags.
pub const SHM_HUGETLB: i32 = 0o4000;
/// `IPC_CREAT` in shmget's flags.
const IPC_CREAT: i32 = 0o1000;
/// `IPC_EXCL` in shmget's flags.
const IPC_EXCL: i32 = 0o2000;
/// The group whose members may make huge-page segments (`vm/hugetlb_shm_group`, 0).
const HUGETLB_SHM_GROUP: u32 = 0;

/// One shared memory segment.
#[derive(Debug, Clone)]
pub struct Segment {
    /// Its id, set when the table takes it.
    pub id: i32,
    /// Key, owner, creator, permission bits (and SHM_LOCKED).
    pub perm: IpcPerm,
    /// Size asked for at creation.
    pub size: u64,
    /// Creator's pid.
    pub cpid: i32,
    /// Last shmat/shmdt pid.
    pub lpid: i32,
    /// Last attach (seconds since the epoch, 0: none).
    pub atime: i64,
    /// Last detach.
    pub dtime: i64,
    /// Creation or last change.
    pub ctime: i64,
    /// The memory.
    pub object: Arc<SharedObject>,
}

impl Segment {
    /// Mappings attached (Linux's `shm_nattch`), for the segment held in the table.
    fn attached(&self) -> u64 {
        // The table holds one reference, every mapping one more.
        (Arc::strong_count(&self.object) as u64).saturating_sub(1)
    }

    /// Pages it takes (its size rounded up).
    fn pages(&self) -> u64 {
        self.size.div_ceil(PAGE_SIZE)
    }

    /// Bytes of its memory the host has allocated (Linux's resident `shm_rss`).
    fn resident(&self) -> u64 {
        self.object.allocated().unwrap_or(0)
    }

    /// `struct shmid64_ds` as IPC_STAT writes it (112 bytes, x86-64 layout).
    pub fn to_shmid_ds(&self) -> [u8; 112] {
        let mut b = [0u8; 112];
        self.perm.write_to(&mut b, seq_of(self.id));
        b[48..56].copy_from_slice(&self.size.to_le_bytes());
        b[56..64].copy_from_slice(&self.atime.to_le_bytes());
        b[64..72].copy_from_slice(&self.dtime.to_le_bytes());
        b[72..80].copy_from_slice(&self.ctime.to_le_bytes());
        b[80..84].copy_from_slice(&self.cpid.to_le_bytes());
        b[84..88].copy_from_slice(&self.lpid.to_le_bytes());
        b[88..96].copy_from_slice(&self.attached().to_le_bytes());
        b
    }
}

/// The segments of one sandbox, by index, and its `kernel/shm*` tunables.
#[derive(Debug, Default)]
pub struct ShmTable {
    inner: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    by_index: BTreeMap<usize, Segment>,
    cursor: IdCursor,
    limits: ShmLimits,
}

impl Table {
    /// Linux's `shm_obtain_object_check`: EINVAL when the index is free, also when another
    /// segment has it now (`ipc_checkid`).
    fn checked(&mut self, id: i32) -> Result<&mut Segment, Errno> {
        ids::checked(&mut self.by_index, id, Errno::EINVAL)
    }

    /// Pages of all segments (Linux's `shm_tot`).
    fn total_pages(&self) -> u64 {
        self.by_index.values().map(Segment::pages).sum()
    }
}

impl ShmTable {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many segments exist.
    pub fn segment_count(&self) -> usize {
        self.lock().by_index.len()
    }

    /// The tunables (`kernel/shmmax`, `shmall`, `shmmni`).
    pub fn limits(&self) -> ShmLimits {
        self.lock().limits
    }

    /// Changes the tunables (a write to `/proc/sys/kernel/shm*`).
    pub fn set_limits(&self, limits: ShmLimits) {
        self.lock().limits = limits;
    }

    /// shmget(2) by `who`: the id of the segment with `key`, made by `make` (given the size)
    /// when the key is IPC_PRIVATE or new with IPC_CREAT, with the permission bits of
    /// `flags`.
    ///
    /// # Errors
    /// As Linux, in its order: for an existing key EEXIST (IPC_CREAT|IPC_EXCL), EINVAL (larger
    /// than the segment), EACCES (`flags` ask for permissions it does not grant); for a new
    /// one ENOENT (no IPC_CREAT), EINVAL (size outside SHMMIN..=`shmmax`), ENOSPC (past
    /// `shmall`), EPERM or ENOMEM for SHM_HUGETLB (no huge pages here), ENOMEM past
    /// torpor's ceiling, ENOSPC (`shmmni` segments); `make`'s error.
    pub fn get(
        &self,
        key: i32,
        size: u64,
        flags: i32,
        who: &Caller,
        make: impl FnOnce(u64) -> Result<Arc<SharedObject>, Errno>,
    ) -> Result<i32, Errno> {
        let mut t = self.lock();
        if key != IPC_PRIVATE {
            if let Some(s) = t.by_index.values().find(|s| s.perm.key == key) {
                if flags & IPC_CREAT != 0 && flags & IPC_EXCL != 0 {
                    return Err(Errno::EEXIST);
                }
                if size > s.size {
                    return Err(Errno::EINVAL);
                }
                if !who.may(&s.perm, flags) {
                    return Err(Errno::EACCES);
                }
                return Ok(s.id);
            }
            if flags & IPC_CREAT == 0 {
                return Err(Errno::ENOENT);
            }
        }
        if size < SHMMIN || size > t.limits.max {
            return Err(Errno::EINVAL);
        }
        let pages = size.div_ceil(PAGE_SIZE);
        if t.total_pages().saturating_add(pages) > t.limits.all {
            return Err(Errno::ENOSPC);
        }
        if flags & SHM_HUGETLB != 0 {
            // Linux's hugetlb_file_setup: outside the group allowed huge pages, the size must
            // fit RLIMIT_MEMLOCK (EPERM); then no huge page can be reserved (ENOMEM).
            if !who.ipc_lock && !who.in_group(HUGETLB_SHM_GROUP) && size > who.memlock {
                return Err(Errno::EPERM);
            }
            return Err(Errno::ENOMEM);
        }
        if size > SHM_CEILING {
            return Err(Errno::ENOMEM);
        }
        if t.by_index.len() >= t.limits.mni {
            return Err(Errno::ENOSPC);
        }
        let seg = Segment {
            id: -1,
            perm: IpcPerm::new(key, who.euid, who.egid, flags),
            size,
            cpid: who.pid,
            lpid: 0,
            atime: 0,
            dtime: 0,
            ctime: now(),
            object: make(size)?,
        };
        let t = &mut *t;
        let by_index = &t.by_index;
        let mni = t.limits.mni;
        let (idx, id) = t
            .cursor
            .allocate(by_index.len(), mni, |i| by_index.contains_key(&i))?;
        t.by_index.insert(idx, Segment { id, ..seg });
        Ok(id)
    }

    /// A copy of segment `id`.
    ///
    /// # Errors
    /// EINVAL (no such segment, or another has its index now).
    pub fn segment(&self, id: i32) -> Result<Segment, Errno> {
        self.lock().checked(id).cloned()
    }

    /// IPC_STAT, SHM_STAT, SHM_STAT_ANY: the segment's `struct shmid64_ds` and its id.
    ///
    /// # Errors
    /// EINVAL (no such segment or index), EACCES (no read permission, but with SHM_STAT_ANY).
    pub fn stat(&self, id: i32, by: StatBy, who: &Caller) -> Result<([u8; 112], i32), Errno> {
        let mut t = self.lock();
        let s = ids::stat_target(&mut t.by_index, id, by, who, Errno::EINVAL)?;
        Ok((s.to_shmid_ds(), s.id))
    }

    /// IPC_SET from the guest's `struct shmid64_ds` `ds`: owner, group and permission bits.
    ///
    /// # Errors
    /// EINVAL (as [`ShmTable::segment`]); EPERM unless `who` owns or created it or has
    /// CAP_SYS_ADMIN; EINVAL for the uid or gid -1.
    pub fn set(&self, id: i32, ds: &[u8; 112], who: &Caller) -> Result<(), Errno> {
        let mut t = self.lock();
        let s = t.checked(id)?;
        if !who.controls(&s.perm) {
            return Err(Errno::EPERM);
        }
        s.perm.update_from(ds)?;
        s.ctime = now();
        Ok(())
    }

    /// IPC_RMID: removes segment `id` from the table (its memory lives on while attached).
    ///
    /// # Errors
    /// EINVAL; EPERM unless `who` owns or created it or has CAP_SYS_ADMIN.
    pub fn remove(&self, id: i32, who: &Caller) -> Result<(), Errno> {
        let mut t = self.lock();
        if !who.controls(&t.checked(id)?.perm) {
            return Err(Errno::EPERM);
        }
        t.by_index.remove(&index_of(id));
        Ok(())
    }

    /// SHM_LOCK (`lock`) or SHM_UNLOCK of segment `id`, as Linux's `shmctl_do_lock`.
    ///
    /// # Errors
    /// EINVAL; without CAP_IPC_LOCK, EPERM unless `who` owns or created it, EPERM for
    /// SHM_LOCK with an `RLIMIT_MEMLOCK` of 0 and ENOMEM when the locked segments would
    /// exceed it.
    pub fn lock_segment(&self, id: i32, lock: bool, who: &Caller) -> Result<(), Errno> {
        let mut t = self.lock();
        let locked_elsewhere: u64 = t
            .by_index
            .values()
            .filter(|s| s.id != id && s.perm.mode & SHM_LOCKED != 0)
            .map(|s| s.pages() * PAGE_SIZE)
            .sum();
        let s = t.checked(id)?;
        if !who.ipc_lock {
            if who.euid != s.perm.uid && who.euid != s.perm.cuid {
                return Err(Errno::EPERM);
            }
            if lock && who.memlock == 0 {
                return Err(Errno::EPERM);
            }
        }
        if lock {
            if s.perm.mode & SHM_LOCKED == 0
                && !who.ipc_lock
                && locked_elsewhere + s.pages() * PAGE_SIZE > who.memlock
            {
                return Err(Errno::ENOMEM);
            }
            s.perm.mode |= SHM_LOCKED;
        } else {
            s.perm.mode &= !SHM_LOCKED;
        }
        Ok(())
    }

    /// Changes segment `id` under the table's lock.
    ///
    /// # Errors
    /// EINVAL (as [`ShmTable::segment`]).
    pub fn update<R>(&self, id: i32, f: impl FnOnce(&mut Segment) -> R) -> Result<R, Errno> {
        self.lock().checked(id).map(f)
    }

    /// Records a detach of `object` by `pid`, if it is a segment still in the table.
    pub fn detached(&self, object: &Arc<SharedObject>, pid: i32) {
        let mut t = self.lock();
        if let Some(s) = t
            .by_index
            .values_mut()
            .find(|s| Arc::ptr_eq(&s.object, object))
        {
            s.lpid = pid;
            s.dtime = now();
        }
    }

    /// Whether `object` is the memory of a segment still in the table.
    pub fn holds(&self, object: &Arc<SharedObject>) -> bool {
        self.lock()
            .by_index
            .values()
            .any(|s| Arc::ptr_eq(&s.object, object))
    }

    /// IPC_INFO: `struct shminfo64` (72 bytes: `shmmax`, `shmmin`, `shmmni`, `shmseg`,
    /// `shmall` and four unused longs) and the highest index in use (0 when none).
    pub fn ipc_info(&self) -> ([u8; 72], i32) {
        let t = self.lock();
        let mut b = [0u8; 72];
        let l = &t.limits;
        // SHMSEG, segments per process, is SHMMNI on Linux.
        let seg = super::limits::SHMMNI as u64;
        for (i, v) in [l.max, SHMMIN, l.mni as u64, seg, l.all]
            .into_iter()
            .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        (b, max_index(&t))
    }

    /// SHM_INFO: `struct shm_info` (48 bytes: `used_ids` as an int, then `shm_tot`,
    /// `shm_rss`, `shm_swp` in pages and two unused longs) and the highest index in use.
    pub fn shm_info(&self) -> ([u8; 48], i32) {
        let t = self.lock();
        let mut b = [0u8; 48];
        let used = t.by_index.len() as i32;
        let rss: u64 = t.by_index.values().map(|s| s.resident() / PAGE_SIZE).sum();
        b[0..4].copy_from_slice(&used.to_le_bytes());
        b[8..16].copy_from_slice(&t.total_pages().to_le_bytes());
        b[16..24].copy_from_slice(&rss.to_le_bytes());
        (b, max_index(&t))
    }

    /// `/proc/sysvipc/shm`: a header, then a line per segment in index order, in Linux's
    /// format (ipc/shm.c, `sysvipc_shm_proc_show`, 64-bit).
    pub fn proc_file(&self) -> Vec<u8> {
        use std::fmt::Write;
        let t = self.lock();
        let mut out = String::from(
            "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  \
             cuid  cgid      atime      dtime      ctime                   rss                  \
             swap\n",
        );
        for s in t.by_index.values() {
            let p = &s.perm;
            let rss = s.resident() / PAGE_SIZE * PAGE_SIZE;
            let _ = writeln!(
                out,
                "{:>10} {:>10}  {:>4o} {:>21} {:>5} {:>5}  {:>5} {:>5} {:>5} {:>5} {:>5} {:>10} \
                 {:>10} {:>10} {:>21} {:>21}",
                p.key,
                s.id,
                p.mode,
                s.size,
                s.cpid as u32,
                s.lpid as u32,
                s.attached(),
                p.uid,
                p.gid,
                p.cuid,
                p.cgid,
                s.atime as u64,
                s.dtime as u64,
                s.ctime as u64,
                rss,
                0,
            );
        }
        out.into_bytes()
    }
}

/// Linux's `ipc_get_maxidx`, 0 when the table is empty.
fn max_index(t: &Table) -> i32 {
    t.by_index.keys().next_back().map_or(0, |&i| i as i32)
}

impl super::ids::IpcObject for Segment {
    fn id(&self) -> i32 {
        self.id
    }
    fn perm(&self) -> &IpcPerm {
        &self.perm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> Caller {
        Caller {
            pid: 1,
            memlock: 8 << 20,
            ..Caller::default()
        }
    }

    fn nobody() -> Caller {
        Caller {
            pid: 2,
            euid: 65534,
            egid: 65534,
            fsgid: 65534,
            ..Caller::default()
        }
    }

    fn get(t: &ShmTable, key: i32, size: u64, flags: i32, who: &Caller) -> Result<i32, Errno> {
        let space = mm::SharedSpace::new();
        t.get(key, size, flags, who, |n| {
            space.anonymous(n, "sysv").map_err(|_| Errno::ENOMEM)
        })
    }

    #[test]
    fn keys_ids_and_errors() {
        let t = ShmTable::default();
        let r = root();
        let a = get(&t, 42, 100, IPC_CREAT | IPC_EXCL | 0o600, &r).unwrap();
        assert_eq!(a, 0);
        assert_eq!(
            get(&t, 42, 100, IPC_CREAT | IPC_EXCL, &r),
            Err(Errno::EEXIST)
        );
        assert_eq!(get(&t, 42, 50, 0, &r), Ok(a));
        assert_eq!(get(&t, 42, 200, 0, &r), Err(Errno::EINVAL));
        // Asking for permissions the segment does not grant: EACCES.
        assert_eq!(get(&t, 42, 50, 0o400, &nobody()), Err(Errno::EACCES));
        assert_eq!(get(&t, 43, 10, 0, &r), Err(Errno::ENOENT));
        assert_eq!(get(&t, IPC_PRIVATE, 0, 0, &r), Err(Errno::EINVAL));
        let b = get(&t, IPC_PRIVATE, 10, 0o600, &r).unwrap();
        assert_eq!(b, 1);
        let nattch = |t: &ShmTable| {
            let ds = t.stat(a, StatBy::Id, &r).unwrap().0;
            u64::from_le_bytes(ds[88..96].try_into().unwrap())
        };
        assert_eq!(nattch(&t), 0);
        let held = t.segment(a).unwrap().object.clone();
        assert_eq!(nattch(&t), 1);
        assert_eq!(t.remove(a, &nobody()), Err(Errno::EPERM));
        t.remove(a, &r).unwrap();
        assert_eq!(t.segment(a).unwrap_err(), Errno::EINVAL);
        assert!(!t.holds(&held));
        drop(held);
        // By index: SHM_STAT needs read permission, SHM_STAT_ANY does not.
        assert_eq!(t.stat(1, StatBy::Index, &nobody()), Err(Errno::EACCES));
        assert_eq!(t.stat(1, StatBy::IndexAny, &nobody()).unwrap().1, b);
        assert_eq!(t.stat(0, StatBy::IndexAny, &r), Err(Errno::EINVAL));
    }

    #[test]
    fn limits_bound_segments() {
        let t = ShmTable::default();
        let r = root();
        t.set_limits(t.limits().with("shmmax", b"8192").unwrap());
        assert_eq!(get(&t, IPC_PRIVATE, 8193, 0, &r), Err(Errno::EINVAL));
        get(&t, IPC_PRIVATE, 8192, 0, &r).unwrap();
        t.set_limits(t.limits().with("shmall", b"3").unwrap());
        assert_eq!(get(&t, IPC_PRIVATE, 8192, 0, &r), Err(Errno::ENOSPC));
        get(&t, IPC_PRIVATE, 1, 0, &r).unwrap();
        t.set_limits(ShmLimits {
            mni: 2,
            ..ShmLimits::default()
        });
        assert_eq!(get(&t, IPC_PRIVATE, 1, 0, &r), Err(Errno::ENOSPC));
        // Huge pages: none here.
        assert_eq!(
            get(&t, 9, 1, IPC_CREAT | SHM_HUGETLB, &r),
            Err(Errno::ENOMEM)
        );
        assert_eq!(
            get(&t, 9, 1, IPC_CREAT | SHM_HUGETLB, &nobody()),
            Err(Errno::EPERM)
        );
        let (info, max) = t.shm_info();
        assert_eq!(max, 1);
        assert_eq!(i32::from_le_bytes(info[0..4].try_into().unwrap()), 2);
        assert_eq!(u64::from_le_bytes(info[8..16].try_into().unwrap()), 3);
        let (info, _) = t.ipc_info();
        assert_eq!(u64::from_le_bytes(info[8..16].try_into().unwrap()), 1);
        assert_eq!(u64::from_le_bytes(info[16..24].try_into().unwrap()), 2);
    }

    #[test]
    fn lock_and_unlock() {
        let t = ShmTable::default();
        let r = root();
        let id = get(&t, IPC_PRIVATE, 100, 0o600, &r).unwrap();
        let mode = |t: &ShmTable| t.segment(id).unwrap().perm.mode;
        assert_eq!(t.lock_segment(id, true, &nobody()), Err(Errno::EPERM));
        t.lock_segment(id, true, &r).unwrap();
        assert_eq!(mode(&t), 0o600 | SHM_LOCKED);
        t.lock_segment(id, false, &r).unwrap();
        assert_eq!(mode(&t), 0o600);
        let no_memlock = Caller { memlock: 0, ..r };
        assert_eq!(t.lock_segment(id, true, &no_memlock), Err(Errno::EPERM));
    }

    #[test]
    fn proc_file_is_linuxs() {
        let t = ShmTable::default();
        let id = get(&t, 4660, 2048, IPC_CREAT | 0o640, &root()).unwrap();
        t.update(id, |s| {
            s.cpid = 21887;
            s.ctime = 1796547556;
        })
        .unwrap();
        let want = [
            "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap",
            "      4660          0   640                  2048 21887     0      0     0     0     0     0          0          0 1796547556                     0                     0",
        ];
        let got = String::from_utf8(t.proc_file()).unwrap();
        assert_eq!(got.lines().collect::<Vec<_>>(), want);
    }
}
