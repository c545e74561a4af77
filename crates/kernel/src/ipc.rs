//! System V IPC of a sandbox: shared memory segments (`shmget`, `shmat`, `shmctl`), private
//! to the sandbox like Linux's IPC namespace.
//!
//! A segment's memory is an anonymous [`SharedObject`] of the sandbox's shared space, so
//! attaching it in any process maps the same pages ([`mm::shared`]). Its attach count is the
//! number of mappings holding the object (a fork's copies count, as on Linux); a removed
//! segment (`IPC_RMID`) leaves the table at once and its memory goes with the last mapping.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use abi::Errno;
use mm::SharedObject;

/// `IPC_PRIVATE`: always a new segment.
pub const IPC_PRIVATE: i32 = 0;
/// Largest segment (Linux's default `shmmax` is larger; this bounds host memory).
pub const SHMMAX: u64 = 1 << 36;
/// Most segments in one sandbox.
pub const SHMMNI: usize = 4096;

/// One shared memory segment.
#[derive(Debug, Clone)]
pub struct Segment {
    /// Its key (`IPC_PRIVATE` for an anonymous one).
    pub key: i32,
    /// Size asked for at creation.
    pub size: u64,
    /// Owner, creator and permission bits.
    pub uid: u32,
    /// Owner's group.
    pub gid: u32,
    /// Creator.
    pub cuid: u32,
    /// Creator's group.
    pub cgid: u32,
    /// Permission bits (low 9).
    pub mode: u16,
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
        b[0..4].copy_from_slice(&self.key.to_le_bytes());
        b[4..8].copy_from_slice(&self.uid.to_le_bytes());
        b[8..12].copy_from_slice(&self.gid.to_le_bytes());
        b[12..16].copy_from_slice(&self.cuid.to_le_bytes());
        b[16..20].copy_from_slice(&self.cgid.to_le_bytes());
        b[20..22].copy_from_slice(&self.mode.to_le_bytes());
        b[24..26].copy_from_slice(&id_seq.to_le_bytes());
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
            if let Some((&id, seg)) = t.segments.iter().find(|(_, s)| s.key == key) {
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
            key,
            size,
            uid: 0,
            gid: 0,
            cuid: 0,
            cgid: 0,
            mode: 0o600,
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
