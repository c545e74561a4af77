//! System V semaphore sets of a sandbox (Linux's `struct sem_array`, ipc/sem.c): the sets by
//! id, each with its semaphores, the undo adjustments of each process, and the rules of
//! semget(2), semop(2) and semctl(2) over them. The handlers (`syscalls/sys_sem.rs`) copy the
//! guest's structures in and out.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use abi::Errno;

use super::caller::Caller;
use super::ids::{self, index_of, seq_of, IdCursor, StatBy};
use super::limits::SEM_CEILING;
use super::{now, IpcPerm, IPC_PRIVATE};

pub use super::limits::{SemLimits, SEMMNI, SEMMNS, SEMMSL, SEMOPM};

/// Largest semaphore value (Linux's SEMVMX).
pub const SEMVMX: i32 = 32767;
/// Permission asked for by IPC_STAT, SEM_STAT and the reading commands.
pub const READ: i32 = 0o444;
/// Permission asked for by semop's changes and SETVAL, SETALL.
pub const ALTER: i32 = 0o222;
/// `IPC_CREAT` in semget's flags.
const IPC_CREAT: i32 = 0o1000;
/// `IPC_EXCL` in semget's flags.
const IPC_EXCL: i32 = 0o2000;

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
    /// Its id, set when the table takes it.
    pub id: i32,
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
    pub fn to_semid_ds(&self) -> [u8; 104] {
        let mut b = [0u8; 104];
        self.perm.write_to(&mut b, seq_of(self.id));
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

/// The semaphore sets of one sandbox, by index, the undo adjustments of each process and
/// the `kernel/sem` tunables.
#[derive(Debug, Default)]
pub struct SemTable {
    inner: Mutex<SemInner>,
    changed: std::sync::Condvar,
}

#[derive(Debug, Default)]
struct SemInner {
    by_index: BTreeMap<usize, SemSet>,
    cursor: IdCursor,
    limits: SemLimits,
    /// SEM_UNDO adjustments: (pid, set, semaphore) → amount to add back at the pid's exit.
    undo: HashMap<(i32, i32, u16), i32>,
}

impl SemInner {
    /// Linux's `sem_obtain_object_check`: EINVAL when the index is free, also when another
    /// set has it now (`ipc_checkid`).
    fn checked(&mut self, id: i32) -> Result<&mut SemSet, Errno> {
        ids::checked(&mut self.by_index, id, Errno::EINVAL)
    }

    /// The set a waiter waits on, still there (`None` once removed).
    fn live(&mut self, id: i32) -> Option<&mut SemSet> {
        self.by_index.get_mut(&index_of(id)).filter(|s| s.id == id)
    }

    /// Semaphores in all sets (Linux's `used_sems`).
    fn used_sems(&self) -> usize {
        self.by_index.values().map(|s| s.sems.len()).sum()
    }
}

impl SemTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, SemInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many semaphore sets exist.
    pub fn set_count(&self) -> usize {
        self.lock().by_index.len()
    }

    /// The tunables (`kernel/sem`).
    pub fn limits(&self) -> SemLimits {
        self.lock().limits
    }

    /// Changes the tunables (a write to `/proc/sys/kernel/sem`).
    pub fn set_limits(&self, limits: SemLimits) {
        self.lock().limits = limits;
    }

    /// semget(2) by `who`: the id of the set with `key`, made with `nsems` semaphores and the
    /// permission bits of `flags` when the key is IPC_PRIVATE or new with IPC_CREAT.
    ///
    /// # Errors
    /// As Linux, in its order: EINVAL for `nsems` outside 0..=SEMMSL; for an existing key
    /// EEXIST (IPC_CREAT|IPC_EXCL), EINVAL (more semaphores than it has), EACCES (`flags` ask
    /// for permissions it does not grant); for a new one ENOENT (no IPC_CREAT), EINVAL
    /// (`nsems` 0), ENOSPC (past SEMMNS semaphores or SEMMNI sets), ENOMEM past torpor's
    /// ceiling.
    pub fn get(&self, key: i32, nsems: i32, flags: i32, who: &Caller) -> Result<i32, Errno> {
        let mut t = self.lock();
        if nsems < 0 || nsems > t.limits.msl {
            return Err(Errno::EINVAL);
        }
        if key != IPC_PRIVATE {
            if let Some(set) = t.by_index.values().find(|s| s.perm.key == key) {
                if flags & IPC_CREAT != 0 && flags & IPC_EXCL != 0 {
                    return Err(Errno::EEXIST);
                }
                if nsems as usize > set.sems.len() {
                    return Err(Errno::EINVAL);
                }
                if !who.may(&set.perm, flags) {
                    return Err(Errno::EACCES);
                }
                return Ok(set.id);
            }
            if flags & IPC_CREAT == 0 {
                return Err(Errno::ENOENT);
            }
        }
        if nsems == 0 {
            return Err(Errno::EINVAL);
        }
        if t.used_sems() + nsems as usize > usize::try_from(t.limits.mns).unwrap_or(0) {
            return Err(Errno::ENOSPC);
        }
        if nsems as usize > SEM_CEILING {
            return Err(Errno::ENOMEM);
        }
        let t = &mut *t;
        let by_index = &t.by_index;
        let mni = usize::try_from(t.limits.mni).unwrap_or(0);
        let (idx, id) = t
            .cursor
            .allocate(by_index.len(), mni, |i| by_index.contains_key(&i))?;
        let set = SemSet {
            id,
            perm: IpcPerm::new(key, who.euid, who.egid, flags),
            otime: 0,
            ctime: now(),
            sems: vec![Sem::default(); nsems as usize],
        };
        t.by_index.insert(idx, set);
        Ok(id)
    }

    /// Reads or changes set `id` under the table's lock; waiters are woken afterwards, since
    /// values may have changed.
    ///
    /// # Errors
    /// EINVAL (no such set, or another has its index now).
    pub fn with<R>(&self, id: i32, f: impl FnOnce(&mut SemSet) -> R) -> Result<R, Errno> {
        let r = self.lock().checked(id).map(f);
        self.changed.notify_all();
        r
    }

    /// IPC_STAT, SEM_STAT, SEM_STAT_ANY: the set's `struct semid64_ds` and its id.
    ///
    /// # Errors
    /// EINVAL (no such set or index), EACCES (no read permission, but with SEM_STAT_ANY).
    pub fn stat(&self, id: i32, by: StatBy, who: &Caller) -> Result<([u8; 104], i32), Errno> {
        let mut t = self.lock();
        let s = ids::stat_target(&mut t.by_index, id, by, who, Errno::EINVAL)?;
        Ok((s.to_semid_ds(), s.id))
    }

    /// IPC_SET from the guest's `struct semid64_ds` `ds`: owner, group and permission bits.
    ///
    /// # Errors
    /// EINVAL (as [`SemTable::with`]); EPERM unless `who` owns or created it or has
    /// CAP_SYS_ADMIN; EINVAL for the uid or gid -1.
    pub fn set(&self, id: i32, ds: &[u8; 104], who: &Caller) -> Result<(), Errno> {
        let mut t = self.lock();
        let s = t.checked(id)?;
        if !who.controls(&s.perm) {
            return Err(Errno::EPERM);
        }
        s.perm.update_from(ds)?;
        s.ctime = now();
        drop(t);
        self.changed.notify_all();
        Ok(())
    }

    /// IPC_RMID: removes set `id`; its waiters fail with EIDRM.
    ///
    /// # Errors
    /// EINVAL; EPERM unless `who` owns or created it or has CAP_SYS_ADMIN.
    pub fn remove(&self, id: i32, who: &Caller) -> Result<(), Errno> {
        let mut t = self.lock();
        if !who.controls(&t.checked(id)?.perm) {
            return Err(Errno::EPERM);
        }
        t.by_index.remove(&index_of(id));
        t.undo.retain(|(_, set, _), _| *set != id);
        drop(t);
        self.changed.notify_all();
        Ok(())
    }

    /// IPC_INFO (`usage` false) or SEM_INFO (true): `struct seminfo` (ten ints: `semmap`,
    /// `semmni`, `semmns`, `semmnu`, `semmsl`, `semopm`, `semume`, `semusz`, `semvmx`,
    /// `semaem`) and the highest index in use (0 when none). SEM_INFO reports in `semusz`
    /// and `semaem` the sets and semaphores in use; IPC_INFO Linux's nominal SEMUSZ and
    /// SEMAEM.
    pub fn info(&self, usage: bool) -> ([u8; 40], i32) {
        let t = self.lock();
        let l = &t.limits;
        // Linux's SEMMAP and SEMMNU are SEMMNS, SEMUME is SEMOPM, SEMAEM is SEMVMX, SEMUSZ 20.
        let nominal_mns = SEMMNS as i32;
        let (usz, aem) = if usage {
            (t.by_index.len() as i32, t.used_sems() as i32)
        } else {
            (20, SEMVMX)
        };
        let fields = [
            nominal_mns,
            l.mni,
            l.mns,
            nominal_mns,
            l.msl,
            l.opm,
            SEMOPM as i32,
            usz,
            SEMVMX,
            aem,
        ];
        let mut b = [0u8; 40];
        for (i, v) in fields.into_iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        let max_idx = t.by_index.keys().next_back().map_or(0, |&i| i as i32);
        (b, max_idx)
    }

    /// `/proc/sysvipc/sem`: a header, then a line per set in index order, in Linux's format
    /// (ipc/sem.c, `sysvipc_sem_proc_show`).
    pub fn proc_file(&self) -> Vec<u8> {
        use std::fmt::Write;
        let t = self.lock();
        let mut out = String::from(
            "       key      semid perms      nsems   uid   gid  cuid  cgid      otime      ctime\n",
        );
        for s in t.by_index.values() {
            let p = &s.perm;
            let _ = writeln!(
                out,
                "{:>10} {:>10}  {:>4o} {:>10} {:>5} {:>5} {:>5} {:>5} {:>10} {:>10}",
                p.key,
                s.id,
                p.mode,
                s.sems.len(),
                p.uid,
                p.gid,
                p.cuid,
                p.cgid,
                s.otime as u64,
                s.ctime as u64,
            );
        }
        out.into_bytes()
    }

    /// Tries `ops` on set `id` atomically, for process `pid`: all applied, or none.
    fn try_ops(t: &mut SemInner, id: i32, ops: &[SemOp], pid: i32) -> Result<(), SemWait> {
        let set = t.live(id).ok_or(SemWait::Fail(Errno::EIDRM))?;
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
        t.checked(id)?;
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
            if let Some(s) = t.live(id).and_then(|s| s.sems.get_mut(usize::from(num))) {
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

impl super::ids::IpcObject for SemSet {
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

    #[test]
    fn operations_are_atomic_and_undone() {
        let t = SemTable::default();
        let id = t.get(IPC_PRIVATE, 2, 0o600, &root()).unwrap();
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
        assert_eq!(t.remove(id, &nobody()), Err(Errno::EPERM));
        t.remove(id, &root()).unwrap();
        assert_eq!(
            t.semop(id, &[op(0, 1, 0)], 7, None, || false),
            Err(Errno::EINVAL)
        );
    }

    #[test]
    fn ids_info_and_limits() {
        let t = SemTable::default();
        let a = t.get(7, 3, IPC_CREAT | 0o600, &root()).unwrap();
        let b = t.get(IPC_PRIVATE, 2, 0o600, &root()).unwrap();
        assert_eq!((a, b), (0, 1));
        assert_eq!(t.get(7, 4, 0, &root()), Err(Errno::EINVAL));
        assert_eq!(t.get(7, 0, 0o400, &nobody()), Err(Errno::EACCES));
        assert_eq!(t.get(7, 0, 0, &nobody()), Ok(a));
        assert_eq!(t.stat(1, StatBy::Index, &nobody()), Err(Errno::EACCES));
        assert_eq!(t.stat(1, StatBy::IndexAny, &nobody()).unwrap().1, b);
        let (info, max) = t.info(true);
        let int = |i: usize| i32::from_le_bytes(info[i * 4..i * 4 + 4].try_into().unwrap());
        assert_eq!((max, int(7), int(9)), (1, 2, 5));
        let (info, _) = t.info(false);
        let int = |i: usize| i32::from_le_bytes(info[i * 4..i * 4 + 4].try_into().unwrap());
        assert_eq!(
            (int(1), int(4), int(5), int(7), int(9)),
            (32000, 32000, 500, 20, 32767)
        );
        // kernel/sem lowered: SEMMSL, SEMMNS, SEMMNI bound new sets.
        t.set_limits(t.limits().with(b"3 6 10 3").unwrap());
        assert_eq!(t.get(IPC_PRIVATE, 4, 0, &root()), Err(Errno::EINVAL));
        assert_eq!(t.get(IPC_PRIVATE, 2, 0, &root()), Err(Errno::ENOSPC));
        t.get(IPC_PRIVATE, 1, 0, &root()).unwrap();
        assert_eq!(t.get(IPC_PRIVATE, 1, 0, &root()), Err(Errno::ENOSPC));
    }

    #[test]
    fn proc_file_is_linuxs() {
        let t = SemTable::default();
        let id = t.get(4660, 5, IPC_CREAT | 0o640, &root()).unwrap();
        t.with(id, |s| {
            s.otime = 1796548654;
            s.ctime = 1796548654;
        })
        .unwrap();
        let want = [
            "       key      semid perms      nsems   uid   gid  cuid  cgid      otime      ctime",
            "      4660          0   640          5     0     0     0     0 1796548654 1796548654",
        ];
        let got = String::from_utf8(t.proc_file()).unwrap();
        assert_eq!(got.lines().collect::<Vec<_>>(), want);
    }
}
