//! Ids of System V objects as Linux makes them (`struct ipc_ids`, ipc/util.c), shared by
//! segments, semaphore sets and message queues: an object's index in its table (the lowest
//! free one at or after the last given, cycling within `max(64, 3/2 * objects)`) plus a
//! sequence number, raised each time the index wraps, times [`IPCMNI`]. A fresh sandbox's
//! objects are thus numbered 0, 1, 2... as in a fresh IPC namespace, and an id whose object
//! was removed and whose index was given again names nothing, not the new object.

use std::collections::BTreeMap;

use abi::Errno;

use super::caller::Caller;
use super::IpcPerm;

/// An object of a System V table (segment, semaphore set, message queue): its id and
/// permissions, which [`checked`] and [`stat_target`] look at.
pub trait IpcObject {
    /// Its id.
    fn id(&self) -> i32;
    /// Its owner, creator and mode.
    fn perm(&self) -> &IpcPerm;
}

/// Linux's `ipc_obtain_object_check`: the object `id` names in `by_index` (objects by
/// index); EINVAL for a negative id or a free index, `stale` when another object has the
/// index now (`ipc_checkid`: EINVAL for segments and sets, EIDRM for queues).
pub fn checked<T: IpcObject>(
    by_index: &mut BTreeMap<usize, T>,
    id: i32,
    stale: Errno,
) -> Result<&mut T, Errno> {
    if id < 0 {
        return Err(Errno::EINVAL);
    }
    let o = by_index.get_mut(&index_of(id)).ok_or(Errno::EINVAL)?;
    if o.id() != id {
        return Err(stale);
    }
    Ok(o)
}

/// The object a stat command names (IPC_STAT by id, as [`checked`]; the `*_STAT` commands
/// by index), after the read permission check all but the `*_STAT_ANY` ones make.
///
/// # Errors
/// As [`checked`] (`stale` too); EINVAL for a free index; EACCES without read permission.
pub fn stat_target<'a, T: IpcObject>(
    by_index: &'a mut BTreeMap<usize, T>,
    id: i32,
    by: StatBy,
    who: &Caller,
    stale: Errno,
) -> Result<&'a mut T, Errno> {
    if id < 0 {
        return Err(Errno::EINVAL);
    }
    let o = match by {
        StatBy::Id => checked(by_index, id, stale)?,
        StatBy::Index | StatBy::IndexAny => by_index.get_mut(&index_of(id)).ok_or(Errno::EINVAL)?,
    };
    // Read permission (Linux's `ipcperms` with S_IRUGO).
    if by != StatBy::IndexAny && !who.may(o.perm(), 0o444) {
        return Err(Errno::EACCES);
    }
    Ok(o)
}

/// An id is its sequence number times IPCMNI plus its index (Linux's IPCMNI, `1 << 15`); the
/// most objects of one kind a sandbox may hold.
pub const IPCMNI: usize = 1 << 15;
/// Sequence numbers wrap to 0 here (Linux's `ipcid_seq_max()`).
pub const SEQ_MAX: i32 = i32::MAX >> 15;
/// Indices cycle within at least this many (Linux's `ipc_min_cycle`).
const MIN_CYCLE: usize = 64;

/// The index part of an id (non-negative).
pub fn index_of(id: i32) -> usize {
    (id as u32 as usize) & (IPCMNI - 1)
}

/// The sequence part of an id, as `ipc64_perm.__seq` shows it.
pub fn seq_of(id: i32) -> u16 {
    (id >> 15) as u16
}

/// Where the next id comes from (Linux's `ipc_ids`: `seq`, `last_idx` and the cyclic
/// allocator's next index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdCursor {
    /// The sequence number of new ids.
    pub seq: i32,
    /// The index last given (-1: none yet).
    pub last_idx: i32,
    /// Where the search for a free index starts.
    pub next_idx: u32,
}

impl Default for IdCursor {
    fn default() -> Self {
        IdCursor {
            seq: 0,
            last_idx: -1,
            next_idx: 0,
        }
    }
}

impl IdCursor {
    /// Linux's `ipc_addid`: the index and id of a new object in a table holding `in_use`
    /// objects at most `limit` (the namespace's `*mni`), `taken` telling which indices are in
    /// use.
    ///
    /// # Errors
    /// ENOSPC when the table holds `limit` objects or no index is free.
    pub fn allocate(
        &mut self,
        in_use: usize,
        limit: usize,
        taken: impl Fn(usize) -> bool,
    ) -> Result<(usize, i32), Errno> {
        if in_use >= limit.min(IPCMNI) {
            return Err(Errno::ENOSPC);
        }
        let end = (in_use * 3 / 2).clamp(MIN_CYCLE, IPCMNI);
        let free_from = |start: usize| (start..end).find(|&i| !taken(i));
        let idx = free_from(self.next_idx as usize)
            .or_else(|| free_from(0))
            .ok_or(Errno::ENOSPC)?;
        if idx as i32 <= self.last_idx {
            self.seq += 1;
            if self.seq >= SEQ_MAX {
                self.seq = 0;
            }
        }
        self.last_idx = idx as i32;
        self.next_idx = idx as u32 + 1;
        Ok((idx, (self.seq << 15) + idx as i32))
    }

    /// Whether a saved cursor is one Linux could have (a restore checks it).
    pub fn is_valid(&self) -> bool {
        (0..SEQ_MAX).contains(&self.seq)
            && (-1..IPCMNI as i32).contains(&self.last_idx)
            && self.next_idx as usize <= IPCMNI
    }
}

/// How the stat commands of shmctl, semctl and msgctl name an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatBy {
    /// IPC_STAT: by id; read permission needed.
    Id,
    /// SHM_STAT, SEM_STAT, MSG_STAT: by index in the table; read permission needed.
    Index,
    /// SHM_STAT_ANY, SEM_STAT_ANY, MSG_STAT_ANY: by index, whatever the permissions.
    IndexAny,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_cycle_and_raise_the_sequence() {
        let mut c = IdCursor::default();
        let mut used = std::collections::BTreeSet::new();
        for want in 0..3 {
            let (i, id) = c.allocate(used.len(), 100, |i| used.contains(&i)).unwrap();
            assert_eq!((i, id), (want, want as i32));
            used.insert(i);
        }
        used.remove(&0);
        // Index 0 is free but the search goes on from 3, up to the cycle's end (64).
        assert_eq!(
            c.allocate(used.len(), 100, |i| used.contains(&i)),
            Ok((3, 3))
        );
        used.insert(3);
        c.next_idx = 64;
        // Wrapped: index 0 again, with the next sequence.
        assert_eq!(
            c.allocate(used.len(), 100, |i| used.contains(&i)),
            Ok((0, 1 << 15))
        );
        assert_eq!((index_of(1 << 15), seq_of(1 << 15)), (0, 1));
        assert_eq!(c.allocate(4, 4, |_| false), Err(Errno::ENOSPC), "the limit");
        assert!(c.is_valid());
    }
}
