//! Who makes a System V IPC call, as Linux's permission checks see it (`ipcperms`,
//! `ipcctl_obtain_check`), shared by segments, semaphore sets and message queues.

use super::IpcPerm;

/// Who makes a call, as Linux's IPC checks (`ipcperms`, `ipcctl_obtain_check`) see them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// Its process id (a queue's `msg_lspid`, `msg_lrpid`).
    pub pid: i32,
    /// Effective user id: the owner of what it creates, matched against owner and creator.
    pub euid: u32,
    /// Effective group id: the group of what it creates.
    pub egid: u32,
    /// Filesystem group id, matched with `groups` against the queue's groups (`in_group_p`).
    pub fsgid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// CAP_IPC_OWNER: permission bits do not apply.
    pub ipc_owner: bool,
    /// CAP_SYS_ADMIN: may change or remove others' queues.
    pub sys_admin: bool,
    /// CAP_SYS_RESOURCE: may raise `msg_qbytes` past `msgmnb`.
    pub sys_resource: bool,
    /// CAP_IPC_LOCK: may lock any segment in memory (SHM_LOCK), whatever its limit.
    pub ipc_lock: bool,
    /// Its soft `RLIMIT_MEMLOCK` in bytes: how much it may lock without CAP_IPC_LOCK.
    pub memlock: u64,
}

impl Caller {
    /// Linux's `ipcperms`: whether the `rwx` bits of `flag` (repeated in the user, group and
    /// other positions, as in msgget's flags; read 4, write 2) are all granted on `perm`.
    pub fn may(&self, perm: &IpcPerm, flag: i32) -> bool {
        let requested = ((flag >> 6) | (flag >> 3) | flag) & 0o7;
        let mut granted = i32::from(perm.mode);
        if self.euid == perm.uid || self.euid == perm.cuid {
            granted >>= 6;
        } else if self.in_group(perm.gid) || self.in_group(perm.cgid) {
            granted >>= 3;
        }
        requested & !granted & 0o7 == 0 || self.ipc_owner
    }

    /// Whether it may change or remove the object (IPC_SET, IPC_RMID): its owner, its
    /// creator, or CAP_SYS_ADMIN.
    pub fn controls(&self, perm: &IpcPerm) -> bool {
        self.euid == perm.uid || self.euid == perm.cuid || self.sys_admin
    }

    /// Linux's `in_group_p`: whether `gid` is its filesystem group or a supplementary one.
    pub fn in_group(&self, gid: u32) -> bool {
        self.fsgid == gid || self.groups.contains(&gid)
    }
}
