//! A task's credentials as Linux keeps them (`struct cred`): real, effective, saved and
//! filesystem user and group ids, supplementary groups, the five capability sets, the
//! `keep_caps` flag and `no_new_privs`, with the rules by which the set*id calls, capset,
//! prctl and execve change them (kernel/sys.c, kernel/capability.c, security/commoncap.c).
//!
//! Pure data and rules, no host call: the syscall handlers (`syscalls/sys_cred.rs`) decode
//! and apply them; `fs::identity` makes a task's file calls with its filesystem ids; signals
//! and `/proc` ask [`Credentials::may_signal`] and [`Credentials::may_inspect`].

use serde::{Deserialize, Serialize};

/// Capability numbers used by the rules here (linux/capability.h).
pub mod cap {
    /// Change file ownership.
    pub const CHOWN: u32 = 0;
    /// Bypass file read, write and execute permission checks.
    pub const DAC_OVERRIDE: u32 = 1;
    /// Bypass file read and directory search checks.
    pub const DAC_READ_SEARCH: u32 = 2;
    /// Bypass checks that the caller owns the file.
    pub const FOWNER: u32 = 3;
    /// Keep set-user-ID bits on change, set set-group-ID for other groups.
    pub const FSETID: u32 = 4;
    /// Signal any process.
    pub const KILL: u32 = 5;
    /// Change group ids.
    pub const SETGID: u32 = 6;
    /// Change user ids.
    pub const SETUID: u32 = 7;
    /// Change capability sets and the bounding set.
    pub const SETPCAP: u32 = 8;
    /// Set immutable and append-only file flags.
    pub const LINUX_IMMUTABLE: u32 = 9;
    /// Bind ports below 1024.
    pub const NET_BIND_SERVICE: u32 = 10;
    /// Raw and packet sockets.
    pub const NET_RAW: u32 = 13;
    /// Lock memory past RLIMIT_MEMLOCK, among it System V segments (SHM_LOCK).
    pub const IPC_LOCK: u32 = 14;
    /// Bypass System V IPC permission checks.
    pub const IPC_OWNER: u32 = 15;
    /// chroot(2).
    pub const SYS_CHROOT: u32 = 18;
    /// Trace any process, read its `/proc` files.
    pub const SYS_PTRACE: u32 = 19;
    /// Administration, among it changing or removing others' System V IPC objects.
    pub const SYS_ADMIN: u32 = 21;
    /// Raise priorities, set other users' priorities.
    pub const SYS_NICE: u32 = 23;
    /// Override resource limits, among them a message queue's size past `msgmnb`.
    pub const SYS_RESOURCE: u32 = 24;
    /// Device nodes.
    pub const MKNOD: u32 = 27;
    /// Write the audit log.
    pub const AUDIT_WRITE: u32 = 29;
    /// Set file capabilities.
    pub const SETFCAP: u32 = 31;
    /// Override mandatory access control.
    pub const MAC_OVERRIDE: u32 = 32;
    /// Timers on the `_ALARM` clocks.
    pub const WAKE_ALARM: u32 = 35;
    /// The highest capability Linux knows (CAP_CHECKPOINT_RESTORE, Linux 5.9).
    pub const LAST: u32 = 40;

    /// Every capability's name without its `CAP_` prefix, by number.
    const NAMES: [&str; LAST as usize + 1] = [
        "CHOWN",
        "DAC_OVERRIDE",
        "DAC_READ_SEARCH",
        "FOWNER",
        "FSETID",
        "KILL",
        "SETGID",
        "SETUID",
        "SETPCAP",
        "LINUX_IMMUTABLE",
        "NET_BIND_SERVICE",
        "NET_BROADCAST",
        "NET_ADMIN",
        "NET_RAW",
        "IPC_LOCK",
        "IPC_OWNER",
        "SYS_MODULE",
        "SYS_RAWIO",
        "SYS_CHROOT",
        "SYS_PTRACE",
        "SYS_PACCT",
        "SYS_ADMIN",
        "SYS_BOOT",
        "SYS_NICE",
        "SYS_RESOURCE",
        "SYS_TIME",
        "SYS_TTY_CONFIG",
        "MKNOD",
        "LEASE",
        "AUDIT_WRITE",
        "AUDIT_CONTROL",
        "SETFCAP",
        "MAC_OVERRIDE",
        "MAC_ADMIN",
        "SYSLOG",
        "WAKE_ALARM",
        "BLOCK_SUSPEND",
        "AUDIT_READ",
        "PERFMON",
        "BPF",
        "CHECKPOINT_RESTORE",
    ];

    /// Every capability's name (`CAP_CHOWN`...), by number.
    pub fn names() -> Vec<String> {
        NAMES.iter().map(|n| format!("CAP_{n}")).collect()
    }

    /// The number of capability `name` (`CAP_CHOWN` or `chown`, any case).
    pub fn by_name(name: &str) -> Option<u32> {
        let upper = name.to_ascii_uppercase();
        let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
        NAMES.iter().position(|n| *n == bare).map(|i| i as u32)
    }
}

/// The bit of capability `c`.
pub const fn bit(c: u32) -> u64 {
    1 << c
}

/// Every capability Linux knows.
pub const ALL_CAPS: u64 = (1 << (cap::LAST + 1)) - 1;

/// The capabilities a filesystem id change drops and raises (Linux's `CAP_FS_SET`).
pub const FS_CAPS: u64 = bit(cap::CHOWN)
    | bit(cap::DAC_OVERRIDE)
    | bit(cap::DAC_READ_SEARCH)
    | bit(cap::FOWNER)
    | bit(cap::FSETID)
    | bit(cap::LINUX_IMMUTABLE)
    | bit(cap::MKNOD)
    | bit(cap::MAC_OVERRIDE);

/// The file capabilities a task's calls may use through the runtime's file broker (the five
/// it keeps: `kernel::broker`), as one byte: bit `c` for capability `c` < 5.
pub const BROKER_CAPS: u64 = bit(cap::CHOWN)
    | bit(cap::DAC_OVERRIDE)
    | bit(cap::DAC_READ_SEARCH)
    | bit(cap::FOWNER)
    | bit(cap::FSETID);

/// The capabilities a container's root gets when its configuration names none: runc's and
/// Docker's default set.
pub const DEFAULT_CAPS: u64 = bit(cap::CHOWN)
    | bit(cap::DAC_OVERRIDE)
    | bit(cap::FSETID)
    | bit(cap::FOWNER)
    | bit(cap::MKNOD)
    | bit(cap::NET_RAW)
    | bit(cap::SETGID)
    | bit(cap::SETUID)
    | bit(cap::SETFCAP)
    | bit(cap::SETPCAP)
    | bit(cap::NET_BIND_SERVICE)
    | bit(cap::SYS_CHROOT)
    | bit(cap::KILL)
    | bit(cap::AUDIT_WRITE);

/// The five capability sets of a task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapSets {
    /// What the task's checks use.
    pub effective: u64,
    /// What it may make effective.
    pub permitted: u64,
    /// What an execve may keep (with the file's inheritable set, or ambient).
    pub inheritable: u64,
    /// The most an execve can grant.
    pub bounding: u64,
    /// What an execve of an unprivileged program keeps.
    pub ambient: u64,
}

impl CapSets {
    /// The sets a process of `uid` starts with, given the bounding set `bounding`: root has
    /// all of it permitted and effective, anyone else nothing.
    pub fn for_user(uid: u32, bounding: u64) -> CapSets {
        let have = if uid == 0 { bounding } else { 0 };
        CapSets {
            effective: have,
            permitted: have,
            inheritable: 0,
            bounding,
            ambient: 0,
        }
    }
}

/// A task's user and group ids, groups and capabilities (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credentials {
    /// Real user id (getuid).
    pub uid: u32,
    /// Effective user id (geteuid: permission checks but files').
    pub euid: u32,
    /// Saved set-user-id.
    pub suid: u32,
    /// Filesystem user id (file permission checks, owner of new files).
    pub fsuid: u32,
    /// Real group id.
    pub gid: u32,
    /// Effective group id.
    pub egid: u32,
    /// Saved set-group-id.
    pub sgid: u32,
    /// Filesystem group id.
    pub fsgid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// Capability sets.
    pub caps: CapSets,
    /// `PR_SET_KEEPCAPS`: permitted capabilities survive leaving uid 0 (cleared by execve).
    pub keep_caps: bool,
    /// `PR_SET_NO_NEW_PRIVS`: execve grants nothing (set-user-ID bits ignored).
    pub no_new_privs: bool,
    /// `PR_GET_DUMPABLE` (Linux keeps it per address space): cleared when the effective or
    /// filesystem ids change or capabilities are gained, and by a set-user-ID exec. A process
    /// that is not dumpable has its `/proc/PID` files owned by root, and other processes of
    /// its user may not read them.
    #[serde(default = "dumpable_default")]
    pub dumpable: bool,
}

fn dumpable_default() -> bool {
    true
}

impl Default for Credentials {
    /// Root with the default capabilities (what a process that has not yet published its
    /// own is taken for: the most protected).
    fn default() -> Credentials {
        Credentials::new(0, 0, Vec::new())
    }
}

/// Which of the set*id family changes ids, for the capability fix-ups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IdChange {
    /// setuid, setreuid, setresuid.
    User,
    /// setfsuid.
    Fs,
}

impl Credentials {
    /// A process of `uid`, `gid` and `groups`, every id of a kind the same, with Docker's
    /// default capabilities as its bounding set (all of them effective for root).
    pub fn new(uid: u32, gid: u32, groups: Vec<u32>) -> Credentials {
        Credentials::with_caps(uid, gid, groups, CapSets::for_user(uid, DEFAULT_CAPS))
    }

    /// A process of `uid`, `gid` and `groups` with capability sets `caps` (an OCI
    /// configuration's `process.capabilities`), as runc starts it.
    pub fn with_caps(uid: u32, gid: u32, groups: Vec<u32>, caps: CapSets) -> Credentials {
        Credentials {
            uid,
            euid: uid,
            suid: uid,
            fsuid: uid,
            gid,
            egid: gid,
            sgid: gid,
            fsgid: gid,
            groups,
            caps,
            keep_caps: false,
            no_new_privs: false,
            dumpable: true,
        }
    }

    /// The runtime process's own ids, with the default capabilities.
    pub fn of_runtime() -> Credentials {
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Credentials::new(uid, gid, Vec::new())
    }

    /// Whether capability `c` is in the effective set.
    pub fn capable(&self, c: u32) -> bool {
        self.caps.effective & bit(c) != 0
    }

    /// Whether the task is in group `g` for permission checks (effective or supplementary).
    pub fn in_group(&self, g: u32) -> bool {
        self.egid == g || self.groups.contains(&g)
    }

    /// The file capabilities the task's calls may use through the broker: its effective
    /// ones among [`BROKER_CAPS`].
    pub fn broker_caps(&self) -> u8 {
        (self.caps.effective & BROKER_CAPS) as u8
    }

    /// What Linux's `commit_creds` does when these credentials replace `old`: a change of
    /// effective or filesystem ids, or capabilities gained, makes the process not dumpable
    /// (`fs.suid_dumpable` 0).
    pub fn committed_over(&mut self, old: &Credentials) {
        if self.euid != old.euid
            || self.egid != old.egid
            || self.fsuid != old.fsuid
            || self.fsgid != old.fsgid
            || self.caps.permitted & !old.caps.permitted != 0
        {
            self.dumpable = false;
        }
    }

    /// The owner (uid, gid) of the process's `/proc/PID` files: its effective ids, or root
    /// when it is not dumpable.
    pub fn proc_owner(&self) -> (u32, u32) {
        if self.dumpable {
            (self.euid, self.egid)
        } else {
            (0, 0)
        }
    }

    /// setuid(2) (`setgid` with `group`): with CAP_SETUID every id; else the effective and
    /// filesystem ids, to the real or saved one.
    ///
    /// # Errors
    /// EPERM when not allowed; EINVAL for -1.
    pub fn set_id(&mut self, id: u32, group: bool) -> Result<(), abi::Errno> {
        if id == u32::MAX {
            return Err(abi::Errno::EINVAL);
        }
        let privileged = self.capable(if group { cap::SETGID } else { cap::SETUID });
        let old = self.clone();
        let [r, e, s, fs] = self.ids_mut(group);
        if privileged {
            (*r, *e, *s, *fs) = (id, id, id, id);
        } else if id == *r || id == *s {
            (*e, *fs) = (id, id);
        } else {
            return Err(abi::Errno::EPERM);
        }
        self.fix_caps(&old, group, IdChange::User);
        Ok(())
    }

    /// setreuid(2) (`setregid` with `group`); -1 leaves an id as it is.
    ///
    /// # Errors
    /// EPERM when not allowed.
    pub fn set_re_ids(&mut self, real: u32, eff: u32, group: bool) -> Result<(), abi::Errno> {
        let privileged = self.capable(if group { cap::SETGID } else { cap::SETUID });
        let old = self.clone();
        let [r, e, s, fs] = self.ids_mut(group);
        let (or, oe, os) = (*r, *e, *s);
        if real != u32::MAX && !privileged && real != or && real != oe {
            return Err(abi::Errno::EPERM);
        }
        if eff != u32::MAX && !privileged && eff != or && eff != oe && eff != os {
            return Err(abi::Errno::EPERM);
        }
        if real != u32::MAX {
            *r = real;
        }
        if eff != u32::MAX {
            *e = eff;
        }
        if real != u32::MAX || (eff != u32::MAX && eff != or) {
            *s = *e;
        }
        *fs = *e;
        self.fix_caps(&old, group, IdChange::User);
        Ok(())
    }

    /// setresuid(2) (`setresgid` with `group`); -1 leaves an id as it is.
    ///
    /// # Errors
    /// EPERM when an id is none of the current three and the caller lacks the capability.
    pub fn set_res_ids(&mut self, ids: [u32; 3], group: bool) -> Result<(), abi::Errno> {
        let privileged = self.capable(if group { cap::SETGID } else { cap::SETUID });
        let old = self.clone();
        let [r, e, s, fs] = self.ids_mut(group);
        let cur = [*r, *e, *s];
        if !privileged && ids.iter().any(|&i| i != u32::MAX && !cur.contains(&i)) {
            return Err(abi::Errno::EPERM);
        }
        for (slot, &new) in [r, e, s].into_iter().zip(&ids) {
            if new != u32::MAX {
                *slot = new;
            }
        }
        *fs = *e;
        self.fix_caps(&old, group, IdChange::User);
        Ok(())
    }

    /// setfsuid(2) (`setfsgid` with `group`): the previous filesystem id; the change is made
    /// only when `id` is one of the current four or the caller has the capability.
    pub fn set_fs_id(&mut self, id: u32, group: bool) -> u32 {
        let privileged = self.capable(if group { cap::SETGID } else { cap::SETUID });
        let old = self.clone();
        let [r, e, s, fs] = self.ids_mut(group);
        let prev = *fs;
        if id != u32::MAX && (privileged || [*r, *e, *s, *fs].contains(&id)) {
            *fs = id;
            self.fix_caps(&old, group, IdChange::Fs);
        }
        prev
    }

    /// setgroups(2).
    ///
    /// # Errors
    /// EPERM without CAP_SETGID.
    pub fn set_groups(&mut self, groups: Vec<u32>) -> Result<(), abi::Errno> {
        if !self.capable(cap::SETGID) {
            return Err(abi::Errno::EPERM);
        }
        self.groups = groups;
        Ok(())
    }

    fn ids_mut(&mut self, group: bool) -> [&mut u32; 4] {
        if group {
            [
                &mut self.gid,
                &mut self.egid,
                &mut self.sgid,
                &mut self.fsgid,
            ]
        } else {
            [
                &mut self.uid,
                &mut self.euid,
                &mut self.suid,
                &mut self.fsuid,
            ]
        }
    }

    /// Linux's `cap_task_fix_setuid`: leaving uid 0 drops capabilities, coming back to an
    /// effective uid 0 raises the permitted ones; a filesystem id leaving or reaching 0
    /// drops or raises the filesystem capabilities. Group changes change no capability.
    fn fix_caps(&mut self, old: &Credentials, group: bool, change: IdChange) {
        if group {
            return;
        }
        let c = &mut self.caps;
        match change {
            IdChange::User => {
                let was_root = old.uid == 0 || old.euid == 0 || old.suid == 0;
                if was_root && self.uid != 0 && self.euid != 0 && self.suid != 0 {
                    if !self.keep_caps {
                        c.permitted = 0;
                        c.effective = 0;
                    }
                    c.ambient = 0;
                }
                if old.euid == 0 && self.euid != 0 {
                    c.effective = 0;
                }
                if old.euid != 0 && self.euid == 0 {
                    c.effective = c.permitted;
                }
                // The filesystem id follows the effective one (setfsuid's own rule).
                if old.fsuid == 0 && self.fsuid != 0 {
                    c.effective &= !FS_CAPS;
                }
                if old.fsuid != 0 && self.fsuid == 0 && self.euid == 0 {
                    c.effective |= c.permitted & FS_CAPS;
                }
            }
            IdChange::Fs => {
                if old.fsuid == 0 && self.fsuid != 0 {
                    c.effective &= !FS_CAPS;
                }
                if old.fsuid != 0 && self.fsuid == 0 {
                    c.effective |= c.permitted & FS_CAPS;
                }
            }
        }
    }

    /// capset(2) on the caller itself.
    ///
    /// # Errors
    /// EPERM when a set would grow beyond what Linux allows: inheritable beyond the old
    /// inheritable and permitted (bounding, with CAP_SETPCAP), permitted beyond the old
    /// permitted, effective beyond the new permitted.
    pub fn set_caps(
        &mut self,
        effective: u64,
        permitted: u64,
        inheritable: u64,
    ) -> Result<(), abi::Errno> {
        let (effective, permitted, inheritable) = (
            effective & ALL_CAPS,
            permitted & ALL_CAPS,
            inheritable & ALL_CAPS,
        );
        let c = self.caps;
        let inheritable_limit = if self.capable(cap::SETPCAP) {
            c.inheritable | c.bounding
        } else {
            c.inheritable | c.permitted
        };
        if inheritable & !inheritable_limit != 0
            || inheritable & !(c.inheritable | c.bounding) != 0
            || permitted & !c.permitted != 0
            || effective & !permitted != 0
        {
            return Err(abi::Errno::EPERM);
        }
        self.caps.effective = effective;
        self.caps.permitted = permitted;
        self.caps.inheritable = inheritable;
        // Ambient capabilities must stay permitted and inheritable.
        self.caps.ambient &= permitted & inheritable;
        Ok(())
    }

    /// `prctl(PR_CAPBSET_DROP)`.
    ///
    /// # Errors
    /// EINVAL for an unknown capability, EPERM without CAP_SETPCAP.
    pub fn drop_bounding(&mut self, c: u64) -> Result<(), abi::Errno> {
        if c > u64::from(cap::LAST) {
            return Err(abi::Errno::EINVAL);
        }
        if !self.capable(cap::SETPCAP) {
            return Err(abi::Errno::EPERM);
        }
        self.caps.bounding &= !(1 << c);
        Ok(())
    }

    /// `prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE or _LOWER)`.
    ///
    /// # Errors
    /// EINVAL for an unknown capability, EPERM to raise one not both permitted and
    /// inheritable.
    pub fn set_ambient(&mut self, c: u64, raise: bool) -> Result<(), abi::Errno> {
        if c > u64::from(cap::LAST) {
            return Err(abi::Errno::EINVAL);
        }
        let b = 1u64 << c;
        if raise {
            if self.caps.permitted & b == 0 || self.caps.inheritable & b == 0 {
                return Err(abi::Errno::EPERM);
            }
            self.caps.ambient |= b;
        } else {
            self.caps.ambient &= !b;
        }
        Ok(())
    }

    /// What execve of a program owned by `owner` (uid, gid) with `mode` does to the ids and
    /// capabilities (Linux's `cap_bprm_creds_from_file`, no file capabilities: every file is
    /// unprivileged but for root's implicit ones). `honour_setid` is false on a nosuid mount.
    /// Answers whether the exec is secure (AT_SECURE: ids changed or capabilities gained).
    pub fn exec(&mut self, owner: (u32, u32), mode: u32, honour_setid: bool) -> bool {
        let old = self.clone();
        let setid_allowed = honour_setid && !self.no_new_privs;
        if setid_allowed && mode & libc::S_ISUID != 0 {
            self.euid = owner.0;
        }
        if setid_allowed && mode & libc::S_ISGID != 0 && mode & libc::S_IXGRP != 0 {
            self.egid = owner.1;
        }
        let is_setid = self.euid != self.uid || self.egid != self.gid;
        let c = &mut self.caps;
        if is_setid {
            c.ambient = 0;
        }
        let root = self.euid == 0 || self.uid == 0;
        c.permitted = if root { c.bounding | c.inheritable } else { 0 };
        if root {
            // Root's implicit file capabilities: ambient is moot.
            c.ambient = 0;
        }
        c.permitted |= c.ambient;
        c.effective = if self.euid == 0 {
            c.permitted
        } else {
            c.ambient
        };
        self.suid = self.euid;
        self.fsuid = self.euid;
        self.sgid = self.egid;
        self.fsgid = self.egid;
        self.keep_caps = false;
        let secure = is_setid || self.caps.permitted & !old.caps.permitted != 0;
        self.dumpable = !secure;
        secure
    }

    /// Whether a task with these credentials may send a signal to a process whose
    /// credentials are `target` (Linux's `kill_ok_by_cred`): its real or effective uid is
    /// the target's real or saved one, or it has CAP_KILL.
    pub fn may_signal(&self, target: &Credentials) -> bool {
        [self.uid, self.euid]
            .iter()
            .any(|u| *u == target.uid || *u == target.suid)
            || self.capable(cap::KILL)
    }

    /// Whether a task with these credentials may read another process's private `/proc`
    /// files (environ, mem, fd: `ptrace_may_access` with `PTRACE_MODE_READ_FSCREDS`): its
    /// filesystem ids are each of the target's user and group ids, or it has
    /// CAP_SYS_PTRACE (and the target holds no capability the caller lacks).
    pub fn may_inspect(&self, target: &Credentials) -> bool {
        self.may_ptrace(target, self.fsuid, self.fsgid)
    }

    /// Whether a task with these credentials may take hold of another process
    /// (pidfd_getfd: `ptrace_may_access` with `PTRACE_MODE_ATTACH_REALCREDS`): as
    /// [`Self::may_inspect`], with the caller's real ids.
    pub fn may_attach(&self, target: &Credentials) -> bool {
        self.may_ptrace(target, self.uid, self.gid)
    }

    /// Linux's `__ptrace_may_access` for the caller's ids `uid` and `gid`.
    fn may_ptrace(&self, target: &Credentials, uid: u32, gid: u32) -> bool {
        if !target.dumpable {
            return self.capable(cap::SYS_PTRACE);
        }
        let same_user = [target.uid, target.euid, target.suid]
            .iter()
            .all(|&u| u == uid);
        let same_group = [target.gid, target.egid, target.sgid]
            .iter()
            .all(|&g| g == gid);
        if same_user && same_group {
            return target.caps.permitted & !self.caps.permitted == 0
                || self.capable(cap::SYS_PTRACE);
        }
        self.capable(cap::SYS_PTRACE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u32 = u32::MAX;

    fn root() -> Credentials {
        Credentials::new(0, 0, vec![])
    }

    fn ids(c: &Credentials) -> [u32; 4] {
        [c.uid, c.euid, c.suid, c.fsuid]
    }

    #[test]
    fn capabilities_by_name() {
        assert_eq!(cap::by_name("CAP_CHOWN"), Some(cap::CHOWN));
        assert_eq!(
            cap::by_name("net_bind_service"),
            Some(cap::NET_BIND_SERVICE)
        );
        assert_eq!(cap::by_name("CAP_CHECKPOINT_RESTORE"), Some(cap::LAST));
        assert_eq!(cap::by_name("CAP_NONSENSE"), None);
    }

    #[test]
    fn root_drops_to_a_user_for_good_with_setuid() {
        let mut c = root();
        assert!(c.capable(cap::DAC_OVERRIDE));
        c.set_id(65534, false).unwrap();
        assert_eq!(ids(&c), [65534; 4]);
        assert_eq!(c.caps.effective, 0);
        assert_eq!(c.caps.permitted, 0);
        assert_eq!(c.set_id(0, false), Err(abi::Errno::EPERM));
        assert_eq!(c.set_id(M, false), Err(abi::Errno::EINVAL));
    }

    #[test]
    fn seteuid_keeps_the_saved_root_and_comes_back() {
        let mut c = root();
        // seteuid(1000) is setresuid(-1, 1000, -1) in glibc.
        c.set_res_ids([M, 1000, M], false).unwrap();
        assert_eq!(ids(&c), [0, 1000, 0, 1000]);
        assert_eq!(c.caps.effective, 0);
        assert_eq!(c.caps.permitted, DEFAULT_CAPS);
        c.set_res_ids([M, 0, M], false).unwrap();
        assert_eq!(ids(&c), [0, 0, 0, 0]);
        assert_eq!(c.caps.effective, DEFAULT_CAPS);
    }

    #[test]
    fn an_unprivileged_user_moves_only_among_its_own_ids() {
        let mut c = Credentials::new(1000, 1000, vec![]);
        c.euid = 2000;
        c.suid = 2000;
        c.set_re_ids(2000, 1000, false).unwrap();
        assert_eq!([c.uid, c.euid, c.suid], [2000, 1000, 1000]);
        assert_eq!(c.set_res_ids([3000, M, M], false), Err(abi::Errno::EPERM));
        assert_eq!(c.set_id(3000, false), Err(abi::Errno::EPERM));
        assert_eq!(c.set_groups(vec![1]), Err(abi::Errno::EPERM));
        // setfsuid answers the old id and refuses silently.
        assert_eq!(c.set_fs_id(3000, false), 1000);
        assert_eq!(c.fsuid, 1000);
        assert_eq!(c.set_fs_id(2000, false), 1000);
        assert_eq!(c.fsuid, 2000);
    }

    #[test]
    fn setreuid_sets_the_saved_id_as_linux_does() {
        let mut c = root();
        c.set_re_ids(M, 1000, false).unwrap();
        // The effective id differs from the real one: the saved id follows it.
        assert_eq!([c.uid, c.euid, c.suid], [0, 1000, 1000]);
        let mut c = root();
        c.set_re_ids(M, 0, false).unwrap();
        assert_eq!([c.uid, c.euid, c.suid], [0, 0, 0]);
    }

    #[test]
    fn keepcaps_keeps_permitted_across_leaving_root() {
        let mut c = root();
        c.keep_caps = true;
        c.set_res_ids([65534, 65534, 65534], false).unwrap();
        assert_eq!(c.caps.permitted, DEFAULT_CAPS);
        assert_eq!(c.caps.effective, 0);
        // ... and capset may make them effective again (setpriv, gosu).
        c.set_caps(bit(cap::NET_BIND_SERVICE), c.caps.permitted, 0)
            .unwrap();
        assert!(c.capable(cap::NET_BIND_SERVICE));
        // An exec of an unprivileged program keeps only the ambient ones.
        c.exec((0, 0), 0o755, true);
        assert_eq!(c.caps.permitted, 0);
        assert!(!c.keep_caps);
    }

    #[test]
    fn filesystem_id_drops_and_raises_the_file_capabilities() {
        let mut c = root();
        assert_eq!(c.set_fs_id(1000, false), 0);
        assert!(!c.capable(cap::DAC_OVERRIDE));
        assert!(c.capable(cap::KILL));
        c.set_fs_id(0, false);
        assert!(c.capable(cap::DAC_OVERRIDE));
    }

    #[test]
    fn capset_never_grows_a_set() {
        let mut c = Credentials::new(0, 0, vec![]);
        c.set_caps(bit(cap::CHOWN), bit(cap::CHOWN) | bit(cap::KILL), 0)
            .unwrap();
        assert_eq!(
            c.set_caps(0, bit(cap::CHOWN) | bit(cap::SYS_PTRACE), 0),
            Err(abi::Errno::EPERM)
        );
        assert_eq!(
            c.set_caps(bit(cap::SETUID), bit(cap::CHOWN), 0),
            Err(abi::Errno::EPERM)
        );
        // Without CAP_SETPCAP, inheritable stays within permitted.
        assert_eq!(
            c.set_caps(0, bit(cap::CHOWN), bit(cap::KILL) | bit(cap::SETPCAP)),
            Err(abi::Errno::EPERM)
        );
        c.set_caps(0, bit(cap::CHOWN), bit(cap::CHOWN)).unwrap();
        assert_eq!(
            c.drop_bounding(u64::from(cap::KILL)),
            Err(abi::Errno::EPERM)
        );
        assert_eq!(c.drop_bounding(99), Err(abi::Errno::EINVAL));
    }

    #[test]
    fn ambient_capabilities_survive_an_unprivileged_exec() {
        let mut c = root();
        let nbs = bit(cap::NET_BIND_SERVICE);
        c.set_caps(c.caps.effective, c.caps.permitted, nbs).unwrap();
        c.set_ambient(u64::from(cap::NET_BIND_SERVICE), true)
            .unwrap();
        assert_eq!(
            c.set_ambient(u64::from(cap::KILL), true),
            Err(abi::Errno::EPERM)
        );
        c.keep_caps = true;
        c.set_res_ids([1000, 1000, 1000], false).unwrap();
        assert_eq!(c.caps.ambient, 0, "leaving root clears ambient, as Linux");
        let mut c = root();
        c.set_caps(c.caps.effective, c.caps.permitted, nbs).unwrap();
        c.set_ambient(u64::from(cap::NET_BIND_SERVICE), true)
            .unwrap();
        c.uid = 1000;
        c.euid = 1000;
        c.suid = 1000;
        c.fsuid = 1000;
        c.exec((0, 0), 0o755, true);
        assert_eq!(c.caps.permitted, nbs);
        assert_eq!(c.caps.effective, nbs);
    }

    #[test]
    fn setuid_programs_run_with_their_owner_unless_no_new_privs() {
        let mut c = Credentials::new(1000, 1000, vec![]);
        let secure = c.exec((0, 0), 0o4755, true);
        assert!(secure);
        assert_eq!(ids(&c), [1000, 0, 0, 0]);
        assert_eq!(c.caps.effective, DEFAULT_CAPS);
        let mut c = Credentials::new(1000, 1000, vec![]);
        c.no_new_privs = true;
        assert!(!c.exec((0, 0), 0o4755, true));
        assert_eq!(ids(&c), [1000; 4]);
        assert_eq!(c.caps.effective, 0);
        let mut c = Credentials::new(1000, 1000, vec![]);
        assert!(!c.exec((0, 0), 0o4755, false), "nosuid mount");
        // set-group-ID needs the group execute bit.
        let mut c = Credentials::new(1000, 1000, vec![]);
        c.exec((0, 42), 0o2755, true);
        assert_eq!([c.gid, c.egid, c.sgid, c.fsgid], [1000, 42, 42, 42]);
        let mut c = Credentials::new(1000, 1000, vec![]);
        c.exec((0, 42), 0o2745, true);
        assert_eq!(c.egid, 1000);
    }

    #[test]
    fn root_exec_keeps_the_bounding_set_only() {
        let mut c = root();
        c.set_caps(0, 0, 0).unwrap();
        assert!(!c.capable(cap::CHOWN));
        c.exec((0, 0), 0o755, true);
        assert_eq!(c.caps.effective, DEFAULT_CAPS);
        let mut c = Credentials::with_caps(0, 0, vec![], CapSets::for_user(0, bit(cap::CHOWN)));
        c.exec((0, 0), 0o755, true);
        assert_eq!(c.caps.effective, bit(cap::CHOWN));
    }

    #[test]
    fn signals_follow_the_real_and_saved_ids() {
        let root = root();
        let nobody = Credentials::new(65534, 65534, vec![]);
        let mut other = Credentials::new(1000, 1000, vec![]);
        assert!(root.may_signal(&nobody));
        assert!(!nobody.may_signal(&root));
        assert!(!nobody.may_signal(&other));
        other.suid = 65534;
        assert!(nobody.may_signal(&other));
        // A set-user-ID program still running as its caller's real id may be signalled.
        let mut su = nobody.clone();
        su.exec((0, 0), 0o4755, true);
        assert!(nobody.may_signal(&su));
    }

    #[test]
    fn proc_files_of_another_user_are_closed() {
        let root = root();
        let nobody = Credentials::new(65534, 65534, vec![]);
        assert!(!nobody.may_inspect(&root));
        assert!(nobody.may_inspect(&nobody.clone()));
        // Root without CAP_SYS_PTRACE (Docker's default) reads only its own.
        assert!(!root.may_inspect(&nobody));
        assert!(root.may_inspect(&root.clone()));
        let mut su = nobody.clone();
        su.exec((0, 0), 0o4755, true);
        assert!(!nobody.may_inspect(&su));
        assert!(root.may_inspect(&Credentials::new(0, 0, vec![])));
    }
}
