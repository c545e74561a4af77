//! System V IPC of a sandbox: shared memory segments (`shmget`, `shmat`, `shmctl`) and
//! semaphore sets (`semget`, `semop`, `semctl`) here, message queues in [`msg`], private to
//! the sandbox like Linux's IPC namespace.
//!
//! A segment's memory is an anonymous [`SharedObject`] of the sandbox's shared space, so
//! attaching it in any process maps the same pages ([`mm::shared`]). Its attach count is the
//! number of mappings holding the object (a fork's copies count, as on Linux); a removed
//! segment (`IPC_RMID`) leaves the table at once and its memory goes with the last mapping.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use abi::Errno;
use mm::SharedObject;

pub mod mqueue;
pub mod msg;

/// `IPC_PRIVATE`: always a new segment.
pub const IPC_PRIVATE: i32 = 0;
/// Largest segment (Linux's default `shmmax` is larger; this bounds host memory).
pub const SHMMAX: u64 = 1 << 36;
/// Most segments in one sandbox.
pub const SHMMNI: usize = 4096;

/// Who owns a System V object and who may use it (`struct ipc64_perm`), shared by segments
/// and semaphore sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpcPerm {
    /// Its key (`IPC_PRIVATE` for an anonymous one).
    pub key: i32,
    /// Owner's user id.
    pub uid: u32,
    /// Owner's group id.
    pub gid: u32,
    /// Creator's user id.
    pub cuid: u32,
    /// Creator's group id.
    pub cgid: u32,
    /// Permission bits (low 9).
    pub mode: u16,
}

impl IpcPerm {
    /// An object with `key`, created and owned by `uid`/`gid`, with the low 9 bits of `flags`.
    pub fn new(key: i32, uid: u32, gid: u32, flags: i32) -> IpcPerm {
        IpcPerm {
            key,
            uid,
            gid,
            cuid: uid,
            cgid: gid,
            mode: (flags & 0o777) as u16,
        }
    }

    /// Whether `uid`/`gid` may read (and, with `write`, alter) it, as Linux checks for a
    /// process without CAP_IPC_OWNER (uid 0 may).
    pub fn allows(&self, uid: u32, gid: u32, write: bool) -> bool {
        if uid == 0 {
            return true;
        }
        let bits = if uid == self.uid || uid == self.cuid {
            self.mode >> 6
        } else if gid == self.gid || gid == self.cgid {
            self.mode >> 3
        } else {
            self.mode
        };
        bits & 4 != 0 && (!write || bits & 2 != 0)
    }

    /// Whether `uid` may change or remove it (IPC_SET, IPC_RMID): its owner, creator or root.
    pub fn owned_by(&self, uid: u32) -> bool {
        uid == 0 || uid == self.uid || uid == self.cuid
    }

    /// IPC_SET: the owner and permission bits of the `struct ipc64_perm` at the start of `ds`
    /// (at least 22 bytes), if `me` owns it (EPERM otherwise).
    ///
    /// # Errors
    /// EPERM.
    pub fn set_from(&mut self, me: u32, ds: &[u8]) -> Result<(), Errno> {
        if !self.owned_by(me) || ds.len() < 22 {
            return Err(Errno::EPERM);
        }
        let field = |at: usize| u32::from_le_bytes([ds[at], ds[at + 1], ds[at + 2], ds[at + 3]]);
        self.uid = field(4);
        self.gid = field(8);
        self.mode = (self.mode & !0o777) | (u16::from_le_bytes([ds[20], ds[21]]) & 0o777);
        Ok(())
    }

    /// Writes it as `struct ipc64_perm` at the start of `b` (48 bytes), with sequence `seq`.
    fn write_to(&self, b: &mut [u8], seq: u16) {
        b[0..4].copy_from_slice(&self.key.to_le_bytes());
        b[4..8].copy_from_slice(&self.uid.to_le_bytes());
        b[8..12].copy_from_slice(&self.gid.to_le_bytes());
        b[12..16].copy_from_slice(&self.cuid.to_le_bytes());
        b[16..20].copy_from_slice(&self.cgid.to_le_bytes());
        b[20..22].copy_from_slice(&self.mode.to_le_bytes());
        b[24..26].copy_from_slice(&seq.to_le_bytes());
    }
}

/// One shared memory segment.
#[derive(Debug, Clone)]
pub struct Segment {
    /// Key, owner, creator and permission bits.
    pub perm: IpcPerm,
    /// Size asked for at creation.
    pub size: u64,
    /// Creator's pid and last shmat/shmdt pid.
    pub cpid: i32,
    /// Last shmat/shmdt pid.
    pub lpid: i32,
    /// Last attach, detach, change times (seconds).
    pub atime: i64,
    /// Last detach.
    pub dtime: i64,
    /// Last change.
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

    /// `struct shmid64_ds` as IPC_STAT writes it (112 bytes, x86-64 layout).
    fn to_shmid_ds(&self, id_seq: u16) -> [u8; 112] {
        let mut b = [0u8; 112];
        self.perm.write_to(&mut b, id_seq);
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

/// The segments of one sandbox, by id.
#[derive(Debug, Default)]
pub struct ShmTable {
    inner: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    next_id: i32,
    segments: HashMap<i32, Segment>,
}

/// Seconds since the epoch, for the segment's times.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl ShmTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many segments exist.
    pub fn segment_count(&self) -> usize {
        self.lock().segments.len()
    }

    /// shmget(2): the id of the segment with `key`, created (by `make`) when asked and
    /// allowed. Errors as Linux: EINVAL for a size outside 1..=SHMMAX or larger than an
    /// existing segment's, EEXIST with IPC_CREAT|IPC_EXCL on an existing key, ENOENT
    /// without IPC_CREAT for a missing one, ENOSPC when the table is full.
    pub fn get(
        &self,
        key: i32,
        size: u64,
        create: bool,
        exclusive: bool,
        make: impl FnOnce() -> Result<Segment, Errno>,
    ) -> Result<i32, Errno> {
        let mut t = self.lock();
        if key != IPC_PRIVATE {
            if let Some((&id, seg)) = t.segments.iter().find(|(_, s)| s.perm.key == key) {
                if create && exclusive {
                    return Err(Errno::EEXIST);
                }
                if size > seg.size {
                    return Err(Errno::EINVAL);
                }
                return Ok(id);
            }
            if !create {
                return Err(Errno::ENOENT);
            }
        }
        if size == 0 || size > SHMMAX {
            return Err(Errno::EINVAL);
        }
        if t.segments.len() >= SHMMNI {
            return Err(Errno::ENOSPC);
        }
        let seg = make()?;
        // Ids are never reused while the sandbox lives (Linux cycles a sequence number).
        t.next_id += 1;
        let id = t.next_id;
        t.segments.insert(id, seg);
        Ok(id)
    }

    /// A copy of segment `id` (EINVAL if there is none).
    pub fn segment(&self, id: i32) -> Result<Segment, Errno> {
        self.lock().segments.get(&id).cloned().ok_or(Errno::EINVAL)
    }

    /// IPC_STAT of segment `id`: its `struct shmid64_ds` (EINVAL if there is none).
    pub fn stat(&self, id: i32) -> Result<[u8; 112], Errno> {
        let t = self.lock();
        let s = t.segments.get(&id).ok_or(Errno::EINVAL)?;
        Ok(s.to_shmid_ds(id as u16))
    }

    /// Changes segment `id` under the table's lock.
    pub fn update<R>(&self, id: i32, f: impl FnOnce(&mut Segment) -> R) -> Result<R, Errno> {
        self.lock()
            .segments
            .get_mut(&id)
            .map(f)
            .ok_or(Errno::EINVAL)
    }

    /// Removes segment `id` from the table (its memory lives on while attached).
    pub fn remove(&self, id: i32) -> Result<(), Errno> {
        self.lock()
            .segments
            .remove(&id)
            .map(|_| ())
            .ok_or(Errno::EINVAL)
    }

    /// Records a detach of `object` by `pid`, if it is a segment still in the table.
    pub fn detached(&self, object: &Arc<SharedObject>, pid: i32) {
        let mut t = self.lock();
        if let Some(s) = t
            .segments
            .values_mut()
            .find(|s| Arc::ptr_eq(&s.object, object))
        {
            s.lpid = pid;
            s.dtime = now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(space: &Arc<mm::SharedSpace>, key: i32, size: u64) -> Result<Segment, Errno> {
        Ok(Segment {
            perm: IpcPerm::new(key, 0, 0, 0o600),
            size,
            cpid: 1,
            lpid: 0,
            atime: 0,
            dtime: 0,
            ctime: now(),
            object: space.anonymous(size, "sysv").map_err(|_| Errno::ENOMEM)?,
        })
    }

    #[test]
    fn keys_and_errors() {
        let space = mm::SharedSpace::new();
        let t = ShmTable::default();
        let a = t.get(42, 100, true, true, || seg(&space, 42, 100)).unwrap();
        assert_eq!(
            t.get(42, 100, true, true, || seg(&space, 42, 100)),
            Err(Errno::EEXIST)
        );
        assert_eq!(t.get(42, 50, false, false, || unreachable!()), Ok(a));
        assert_eq!(
            t.get(42, 200, false, false, || unreachable!()),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            t.get(43, 10, false, false, || unreachable!()),
            Err(Errno::ENOENT)
        );
        assert_eq!(
            t.get(IPC_PRIVATE, 0, true, false, || seg(&space, 0, 1)),
            Err(Errno::EINVAL)
        );
        let b = t
            .get(IPC_PRIVATE, 10, true, false, || seg(&space, 0, 10))
            .unwrap();
        assert_ne!(a, b);
        let nattch =
            |t: &ShmTable| u64::from_le_bytes(t.stat(a).unwrap()[88..96].try_into().unwrap());
        assert_eq!(nattch(&t), 0);
        let held = t.segment(a).unwrap().object.clone();
        assert_eq!(nattch(&t), 1);
        t.remove(a).unwrap();
        assert_eq!(t.segment(a).unwrap_err(), Errno::EINVAL);
        drop(held);
    }
}

/// Most semaphores in one set (Linux's SEMMSL).
pub const SEMMSL: usize = 32000;
/// Largest semaphore value (Linux's SEMVMX).
pub const SEMVMX: i32 = 32767;
/// Most operations in one semop (Linux's SEMOPM).
pub const SEMOPM: usize = 500;
/// Most sets in one sandbox.
pub const SEMMNI: usize = 32000;

/// One semaphore of a set.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sem {
    /// Its value.
    pub value: i32,
    /// The pid of the last operation on it.
    pub pid: i32,
}

/// One System V semaphore set.
#[derive(Debug, Clone)]
pub struct SemSet {
    /// Key, owner, creator and permission bits.
    pub perm: IpcPerm,
    /// Last semop time.
    pub otime: i64,
    /// Last change time.
    pub ctime: i64,
    /// The semaphores.
    pub sems: Vec<Sem>,
}

impl SemSet {
    /// `struct semid64_ds` as IPC_STAT writes it (104 bytes, x86-64 layout).
    pub fn to_semid_ds(&self, id_seq: u16) -> [u8; 104] {
        let mut b = [0u8; 104];
        self.perm.write_to(&mut b, id_seq);
        b[48..56].copy_from_slice(&self.otime.to_le_bytes());
        b[64..72].copy_from_slice(&self.ctime.to_le_bytes());
        b[80..88].copy_from_slice(&(self.sems.len() as u64).to_le_bytes());
        b
    }
}

/// One operation of semop(2) (`struct sembuf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SemOp {
    /// Which semaphore.
    pub num: u16,
    /// Add (> 0), wait for zero (0), or wait and take (< 0).
    pub op: i16,
    /// IPC_NOWAIT, SEM_UNDO.
    pub flags: i16,
}

/// `IPC_NOWAIT` in a sembuf's flags.
pub const IPC_NOWAIT: i16 = 0o4000;
/// `SEM_UNDO` in a sembuf's flags.
pub const SEM_UNDO: i16 = 0x1000;

/// Why a semop did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SemWait {
    /// It would block: the caller waits (or returns EAGAIN with IPC_NOWAIT).
    Block,
    /// An errno for the application.
    Fail(Errno),
}

/// The semaphore sets of one sandbox, by id, and the undo adjustments of each process.
#[derive(Debug, Default)]
pub struct SemTable {
    inner: Mutex<SemInner>,
    changed: std::sync::Condvar,
}

#[derive(Debug, Default)]
struct SemInner {
    next_id: i32,
    sets: HashMap<i32, SemSet>,
    /// SEM_UNDO adjustments: (pid, set, semaphore) → amount to add back at the pid's exit.
    undo: HashMap<(i32, i32, u16), i32>,
}

impl SemTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, SemInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many semaphore sets exist.
    pub fn set_count(&self) -> usize {
        self.lock().sets.len()
    }

    /// semget(2): as [`ShmTable::get`], for `nsems` semaphores (0 only to look one up).
    pub fn get(
        &self,
        key: i32,
        nsems: i32,
        create: bool,
        exclusive: bool,
        make: impl FnOnce() -> SemSet,
    ) -> Result<i32, Errno> {
        if !(0..=SEMMSL as i32).contains(&nsems) {
            return Err(Errno::EINVAL);
        }
        let mut t = self.lock();
        if key != IPC_PRIVATE {
            if let Some((&id, set)) = t.sets.iter().find(|(_, s)| s.perm.key == key) {
                if create && exclusive {
                    return Err(Errno::EEXIST);
                }
                if nsems as usize > set.sems.len() {
                    return Err(Errno::EINVAL);
                }
                return Ok(id);
            }
            if !create {
                return Err(Errno::ENOENT);
            }
        }
        if nsems == 0 {
            return Err(Errno::EINVAL);
        }
        if t.sets.len() >= SEMMNI {
            return Err(Errno::ENOSPC);
        }
        let mut set = make();
        set.sems = vec![Sem::default(); nsems as usize];
        t.next_id += 1;
        let id = t.next_id;
        t.sets.insert(id, set);
        Ok(id)
    }

    /// Reads or changes set `id` under the table's lock (EINVAL if there is none); waiters
    /// are woken afterwards, since values may have changed.
    pub fn with<R>(&self, id: i32, f: impl FnOnce(&mut SemSet) -> R) -> Result<R, Errno> {
        let r = self.lock().sets.get_mut(&id).map(f).ok_or(Errno::EINVAL);
        self.changed.notify_all();
        r
    }

    /// Removes set `id` (IPC_RMID): its waiters fail with EIDRM.
    pub fn remove(&self, id: i32) -> Result<(), Errno> {
        let mut t = self.lock();
        t.sets.remove(&id).ok_or(Errno::EINVAL)?;
        t.undo.retain(|(_, set, _), _| *set != id);
        drop(t);
        self.changed.notify_all();
        Ok(())
    }

    /// Tries `ops` on set `id` atomically, for process `pid`: all applied, or none.
    fn try_ops(t: &mut SemInner, id: i32, ops: &[SemOp], pid: i32) -> Result<(), SemWait> {
        let set = t.sets.get_mut(&id).ok_or(SemWait::Fail(Errno::EIDRM))?;
        if ops.iter().any(|o| usize::from(o.num) >= set.sems.len()) {
            return Err(SemWait::Fail(Errno::EFBIG));
        }
        let mut values: Vec<i32> = set.sems.iter().map(|s| s.value).collect();
        for o in ops {
            let v = &mut values[usize::from(o.num)];
            match o.op {
                0 if *v != 0 => return Err(SemWait::Block),
                0 => {}
                op if op > 0 => {
                    let n = *v + i32::from(op);
                    if n > SEMVMX {
                        return Err(SemWait::Fail(Errno::ERANGE));
                    }
                    *v = n;
                }
                op => {
                    let n = *v + i32::from(op);
                    if n < 0 {
                        return Err(SemWait::Block);
                    }
                    *v = n;
                }
            }
        }
        for o in ops {
            set.sems[usize::from(o.num)].pid = pid;
        }
        for (s, v) in set.sems.iter_mut().zip(values) {
            s.value = v;
        }
        set.otime = now();
        for o in ops.iter().filter(|o| o.flags & SEM_UNDO != 0 && o.op != 0) {
            *t.undo.entry((pid, id, o.num)).or_insert(0) -= i32::from(o.op);
        }
        Ok(())
    }

    /// semop(2) for process `pid`: applies `ops` atomically, waiting while they would block
    /// (unless IPC_NOWAIT: EAGAIN) until `deadline` (EAGAIN) or `interrupted` (EINTR).
    ///
    /// # Errors
    /// EINVAL for a missing set, EIDRM if it is removed while waiting, EFBIG for a semaphore
    /// number out of range, ERANGE past SEMVMX, EAGAIN, EINTR.
    pub fn semop(
        &self,
        id: i32,
        ops: &[SemOp],
        pid: i32,
        deadline: Option<std::time::Instant>,
        interrupted: impl Fn() -> bool,
    ) -> Result<(), Errno> {
        let mut t = self.lock();
        if !t.sets.contains_key(&id) {
            return Err(Errno::EINVAL);
        }
        loop {
            match Self::try_ops(&mut t, id, ops, pid) {
                Ok(()) => {
                    drop(t);
                    self.changed.notify_all();
                    return Ok(());
                }
                Err(SemWait::Fail(e)) => return Err(e),
                Err(SemWait::Block) => {}
            }
            if ops.iter().any(|o| o.flags & IPC_NOWAIT != 0) {
                return Err(Errno::EAGAIN);
            }
            if interrupted() {
                return Err(Errno::EINTR);
            }
            let now = std::time::Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(Errno::EAGAIN);
            }
            let slice = deadline.map_or(std::time::Duration::from_millis(10), |d| {
                (d - now).min(std::time::Duration::from_millis(10))
            });
            t = self
                .changed
                .wait_timeout(t, slice)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Applies process `pid`'s SEM_UNDO adjustments (it exited).
    pub fn process_exited(&self, pid: i32) {
        let mut t = self.lock();
        let adj: Vec<((i32, i32, u16), i32)> = t
            .undo
            .iter()
            .filter(|((p, _, _), _)| *p == pid)
            .map(|(k, v)| (*k, *v))
            .collect();
        if adj.is_empty() {
            return;
        }
        for ((_, id, num), v) in adj {
            t.undo.remove(&(pid, id, num));
            if let Some(s) = t
                .sets
                .get_mut(&id)
                .and_then(|s| s.sems.get_mut(usize::from(num)))
            {
                s.value = (s.value + v).clamp(0, SEMVMX);
                s.pid = pid;
            }
        }
        drop(t);
        self.changed.notify_all();
    }

    /// Forgets the undo adjustments of semaphore `num` of set `id` (SETVAL, SETALL).
    pub fn clear_undo(&self, id: i32, num: Option<u16>) {
        self.lock()
            .undo
            .retain(|(_, set, n), _| !(*set == id && num.is_none_or(|k| k == *n)));
    }
}

#[cfg(test)]
mod sem_tests {
    use super::*;

    fn set() -> SemSet {
        SemSet {
            perm: IpcPerm::new(0, 0, 0, 0o600),
            otime: 0,
            ctime: 0,
            sems: Vec::new(),
        }
    }

    #[test]
    fn operations_are_atomic_and_undone() {
        let t = SemTable::default();
        let id = t.get(IPC_PRIVATE, 2, true, false, set).unwrap();
        let op = |num, op, flags| SemOp { num, op, flags };
        // Taking from 0 would block: with IPC_NOWAIT, EAGAIN and nothing changed.
        let r = t.semop(id, &[op(0, 1, 0), op(1, -1, IPC_NOWAIT)], 7, None, || false);
        assert_eq!(r, Err(Errno::EAGAIN));
        assert_eq!(t.with(id, |s| s.sems[0].value).unwrap(), 0);
        t.semop(id, &[op(0, 2, SEM_UNDO), op(1, 1, 0)], 7, None, || false)
            .unwrap();
        t.semop(id, &[op(0, -1, 0)], 8, None, || false).unwrap();
        assert_eq!(
            t.with(id, |s| (s.sems[0].value, s.sems[1].value)).unwrap(),
            (1, 1)
        );
        // Process 7 exits: its +2 is taken back (clamped at 0).
        t.process_exited(7);
        assert_eq!(t.with(id, |s| s.sems[0].value).unwrap(), 0);
        assert_eq!(
            t.semop(id, &[op(5, 1, 0)], 7, None, || false),
            Err(Errno::EFBIG)
        );
        // A blocked wait ends with EINTR when interrupted.
        assert_eq!(
            t.semop(id, &[op(0, -1, 0)], 7, None, || true),
            Err(Errno::EINTR)
        );
        t.remove(id).unwrap();
        assert_eq!(
            t.semop(id, &[op(0, 1, 0)], 7, None, || false),
            Err(Errno::EINVAL)
        );
    }
}
