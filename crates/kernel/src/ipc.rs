//! System V IPC of a sandbox, private to it like Linux's IPC namespace: shared memory
//! segments ([`shm`]), semaphore sets ([`sem`]) and message queues ([`msg`]), their ids
//! ([`ids`]), who calls ([`caller`]) and the namespace's tunables ([`limits`]).

use abi::Errno;

pub mod caller;
pub mod ids;
pub mod limits;
pub mod mqueue;
pub mod msg;
pub mod sem;
pub mod shm;

pub use caller::Caller;
pub use limits::{SHMMAX, SHMMNI};
pub use sem::{SemOp, SemSet, SemTable, SEMVMX, SEM_UNDO};
pub use shm::{Segment, ShmTable};

/// `IPC_PRIVATE`: always a new object.
pub const IPC_PRIVATE: i32 = 0;

/// Who owns a System V object and who may use it (`struct ipc64_perm`), shared by segments,
/// semaphore sets and message queues.
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
    /// Permission bits (low 9; a segment's SHM_DEST and SHM_LOCKED above them).
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

    /// IPC_SET: the owner, group and permission bits of the `struct ipc64_perm` at the start
    /// of `ds` (at least 22 bytes); the caller has checked that it may.
    ///
    /// # Errors
    /// EINVAL for the uid or gid -1 (Linux's invalid ids) or a `ds` too short.
    pub fn update_from(&mut self, ds: &[u8]) -> Result<(), Errno> {
        let field = |at: usize| -> Result<u32, Errno> {
            let b = ds.get(at..at + 4).ok_or(Errno::EINVAL)?;
            Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let (uid, gid) = (field(4)?, field(8)?);
        let mode = ds.get(20..22).ok_or(Errno::EINVAL)?;
        if uid == u32::MAX || gid == u32::MAX {
            return Err(Errno::EINVAL);
        }
        self.uid = uid;
        self.gid = gid;
        self.mode = (self.mode & !0o777) | (u16::from_le_bytes([mode[0], mode[1]]) & 0o777);
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

/// Seconds since the epoch, for the objects' times.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
