//! System V message queues of a sandbox (Linux's `struct msg_queue`, ipc/msg.c): the queues
//! by id, each holding typed messages, and the rules of msgget(2), msgsnd(2), msgrcv(2) and
//! msgctl(2) over them. The syscall handlers (`syscalls/sys_msg.rs`) copy the guest's
//! structures in and out; everything here is plain data and checks.
//!
//! Ids are made as Linux makes them: a queue's index in the table (the lowest free one at or
//! after the last given, cycling within `max(64, 3/2 * queues)`) plus a sequence number,
//! raised each time the index wraps, times 32768. A fresh sandbox's queues are thus numbered
//! 0, 1, 2... as in a fresh IPC namespace, and an id whose queue was removed and whose index
//! was given again fails with EIDRM, not with the new queue.
//!
//! A blocked msgsnd (queue full) or msgrcv (no matching message) waits on the table's
//! condition variable, checking every 10 ms whether it was interrupted (a signal, a park,
//! the process ending: EINTR, which the task loop restarts or reports) and whether its queue
//! is still there (EIDRM once IPC_RMID removed it). Waiters are not served in arrival order:
//! each wake-up lets every waiter try again.
//!
//! Beside Linux's per-queue limit (`msg_qbytes`), all the sandbox's queued messages together
//! are bounded by [`MSGPOOL`] KiB, each counted with [`MSG_HEADER`] bytes more (Linux's
//! `struct msg_msg`): host memory stays bounded whatever `msg_qbytes` a privileged guest
//! sets. Past that bound a send waits (or fails with EAGAIN) as on a full queue.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use abi::Errno;

pub use super::caller::Caller;
use super::ids::{index_of, IPCMNI};
pub use super::ids::{IdCursor, StatBy};
use super::{now, IpcPerm, IPC_PRIVATE};

pub use super::limits::{MsgLimits, MSGMAX, MSGMNB, MSGMNI};
/// Linux's nominal message pool in KiB (MSGPOOL), which IPC_INFO reports; here the bound on
/// all the sandbox's queued messages together.
pub const MSGPOOL: u64 = MSGMNI as u64 * MSGMNB / 1024;
/// What a queued message costs the pool beyond its text (the size of Linux's `msg_msg`).
pub const MSG_HEADER: u64 = 48;
/// Linux's MSGSSZ (message segment size), reported by IPC_INFO.
const MSGSSZ: i32 = 16;
/// Linux's MSGSEG (segments, capped to an unsigned short), reported by IPC_INFO.
const MSGSEG: u16 = 0xffff;
/// How often a blocked send or receive checks whether it was interrupted.
const POLL: Duration = Duration::from_millis(10);

/// `IPC_CREAT` in msgget's flags.
pub const IPC_CREAT: i32 = 0o1000;
/// `IPC_EXCL` in msgget's flags.
pub const IPC_EXCL: i32 = 0o2000;
/// `IPC_NOWAIT` in msgsnd's and msgrcv's flags: fail instead of waiting.
pub const IPC_NOWAIT: i32 = 0o4000;
/// `MSG_NOERROR`: truncate a message longer than the buffer instead of failing (E2BIG).
pub const MSG_NOERROR: i32 = 0o10000;
/// `MSG_EXCEPT`: with a positive type, the first message of another type.
pub const MSG_EXCEPT: i32 = 0o20000;
/// `MSG_COPY`: a copy of the message at index `msgtyp`, left in the queue.
pub const MSG_COPY: i32 = 0o40000;

/// Permission bit asked for by a read (msgrcv, IPC_STAT).
const READ: i32 = 4;
/// Permission bit asked for by a write (msgsnd).
const WRITE: i32 = 2;

/// One message: its type (at least 1) and text (at most `msgmax` bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Its type.
    pub mtype: i64,
    /// Its text.
    pub text: Vec<u8>,
}

/// Which message msgrcv takes (Linux's `SEARCH_*` modes, from `msgtyp` and the flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selector {
    /// `msgtyp` 0: the first message.
    First,
    /// `msgtyp` > 0: the first message of that type.
    Type(i64),
    /// `msgtyp` > 0 with MSG_EXCEPT: the first message of another type.
    NotType(i64),
    /// `msgtyp` < 0: the first message of the lowest type at most `|msgtyp|`.
    AtMost(i64),
    /// MSG_COPY: the message at this position (0 the first).
    Index(i64),
}

impl Selector {
    /// The selection of msgrcv(`msgtyp`, `flags`), as Linux's `convert_mode`.
    pub fn new(msgtyp: i64, flags: i32) -> Selector {
        if flags & MSG_COPY != 0 {
            Selector::Index(msgtyp)
        } else if msgtyp == 0 {
            Selector::First
        } else if msgtyp < 0 {
            // -i64::MIN does not exist: Linux takes i64::MAX.
            Selector::AtMost(msgtyp.checked_neg().unwrap_or(i64::MAX))
        } else if flags & MSG_EXCEPT != 0 {
            Selector::NotType(msgtyp)
        } else {
            Selector::Type(msgtyp)
        }
    }

    /// The position of the message it selects in `messages`, if any.
    fn find(self, messages: &VecDeque<Message>) -> Option<usize> {
        let mut types = messages.iter().map(|m| m.mtype);
        match self {
            Selector::First => (!messages.is_empty()).then_some(0),
            Selector::Type(t) => types.position(|m| m == t),
            Selector::NotType(t) => types.position(|m| m != t),
            Selector::AtMost(t) => {
                let mut best: Option<(usize, i64)> = None;
                for (i, m) in types.enumerate() {
                    if m <= t && best.is_none_or(|(_, b)| m < b) {
                        best = Some((i, m));
                    }
                }
                best.map(|(i, _)| i)
            }
            Selector::Index(n) => usize::try_from(n).ok().filter(|&n| n < messages.len()),
        }
    }
}

/// One message queue.
#[derive(Debug, Clone)]
pub struct MsgQueue {
    /// Its id (sequence number and index), set when the table takes it.
    pub id: i32,
    /// Key, owner, creator and permission bits.
    pub perm: IpcPerm,
    /// Time of the last msgsnd (seconds since the epoch, 0: none).
    pub stime: i64,
    /// Time of the last msgrcv.
    pub rtime: i64,
    /// Time of the creation or last IPC_SET.
    pub ctime: i64,
    /// Most bytes (and messages) it holds (`msg_qbytes`).
    pub qbytes: u64,
    /// Process of the last msgsnd (0: none).
    pub lspid: i32,
    /// Process of the last msgrcv (0: none).
    pub lrpid: i32,
    messages: VecDeque<Message>,
    /// Bytes of text queued (`msg_cbytes`).
    cbytes: u64,
}

impl MsgQueue {
    /// An empty queue with `perm`, created now, holding up to [`MSGMNB`] bytes (msgget gives
    /// it the sandbox's `msgmnb`).
    pub fn new(perm: IpcPerm) -> MsgQueue {
        MsgQueue {
            id: -1,
            perm,
            stime: 0,
            rtime: 0,
            ctime: now(),
            qbytes: MSGMNB,
            lspid: 0,
            lrpid: 0,
            messages: VecDeque::new(),
            cbytes: 0,
        }
    }

    /// Its messages, in queue order.
    pub fn messages(&self) -> impl ExactSizeIterator<Item = &Message> {
        self.messages.iter()
    }

    /// Bytes of text queued (`msg_cbytes`).
    pub fn cbytes(&self) -> u64 {
        self.cbytes
    }

    /// Appends `m` without checking the limits (msgsnd checks them; a restore brings back
    /// what was queued).
    pub fn push(&mut self, m: Message) {
        self.cbytes += m.text.len() as u64;
        self.messages.push_back(m);
    }

    /// What it costs the sandbox's pool.
    fn pooled(&self) -> u64 {
        self.cbytes + self.messages.len() as u64 * MSG_HEADER
    }

    /// Linux's `msg_fits_inqueue`: `len` more bytes and one more message within `msg_qbytes`.
    fn fits(&self, len: u64) -> bool {
        self.cbytes + len <= self.qbytes && (self.messages.len() as u64) < self.qbytes
    }

    /// `struct msqid64_ds` as IPC_STAT writes it (120 bytes, x86-64 layout): the permission
    /// (48 bytes), `msg_stime`, `msg_rtime`, `msg_ctime`, `msg_cbytes`, `msg_qnum`,
    /// `msg_qbytes` (8 bytes each), `msg_lspid`, `msg_lrpid` (4 each), two unused longs.
    pub fn to_msqid_ds(&self) -> [u8; 120] {
        let mut b = [0u8; 120];
        self.perm.write_to(&mut b, (self.id >> 15) as u16);
        b[48..56].copy_from_slice(&self.stime.to_le_bytes());
        b[56..64].copy_from_slice(&self.rtime.to_le_bytes());
        b[64..72].copy_from_slice(&self.ctime.to_le_bytes());
        b[72..80].copy_from_slice(&self.cbytes.to_le_bytes());
        b[80..88].copy_from_slice(&(self.messages.len() as u64).to_le_bytes());
        b[88..96].copy_from_slice(&self.qbytes.to_le_bytes());
        b[96..100].copy_from_slice(&self.lspid.to_le_bytes());
        b[100..104].copy_from_slice(&self.lrpid.to_le_bytes());
        b
    }
}

/// A table's queues and id state, as a checkpoint saves and restores them.
#[derive(Debug, Clone, Default)]
pub struct MsgImage {
    /// Where the next id comes from.
    pub cursor: IdCursor,
    /// The queues, each with its id.
    pub queues: Vec<MsgQueue>,
}

/// Why a saved table cannot be taken back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// The table already holds queues.
    #[error("the message queue table is not empty")]
    NotEmpty,
    /// More queues than [`IPCMNI`], or more bytes than [`MSGPOOL`] KiB.
    #[error("more message queues or queued bytes than a sandbox may hold")]
    TooMuch,
    /// The id state is out of range.
    #[error("message queue ids: a sequence or index out of range")]
    BadCursor,
    /// A queue that Linux could not have made.
    #[error("message queue {0}: {1}")]
    BadQueue(i32, &'static str),
}

/// The message queues of one sandbox, by index, shared by all its processes.
#[derive(Debug, Default)]
pub struct MsgTable {
    inner: Mutex<Queues>,
    /// Notified when a message is queued or taken, a queue is changed or removed.
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Queues {
    by_index: BTreeMap<usize, MsgQueue>,
    cursor: IdCursor,
    limits: MsgLimits,
    /// What all queued messages cost (text plus [`MSG_HEADER`] each).
    pooled: u64,
}

impl Queues {
    /// Linux's `ipc_obtain_object_check`: the queue with this id; EINVAL when its index is
    /// free, EIDRM when another queue has it now.
    fn checked(&mut self, id: i32) -> Result<&mut MsgQueue, Errno> {
        super::ids::checked(&mut self.by_index, id, Errno::EIDRM)
    }

    /// The queue a waiter waits on, still there (EIDRM once removed).
    fn live(&mut self, id: i32) -> Result<&mut MsgQueue, Errno> {
        self.by_index
            .get_mut(&index_of(id))
            .filter(|q| q.id == id)
            .ok_or(Errno::EIDRM)
    }

    /// Linux's `ipc_addid`: gives `q` an id and takes it (ENOSPC when the table is full).
    fn add(&mut self, mut q: MsgQueue) -> Result<i32, Errno> {
        let by_index = &self.by_index;
        let (idx, id) = self
            .cursor
            .allocate(by_index.len(), self.limits.mni as usize, |i| {
                by_index.contains_key(&i)
            })?;
        q.id = id;
        self.by_index.insert(idx, q);
        Ok(id)
    }
}

impl MsgTable {
    fn lock(&self) -> MutexGuard<'_, Queues> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits up to [`POLL`] for a change.
    fn wait<'a>(&self, t: MutexGuard<'a, Queues>) -> MutexGuard<'a, Queues> {
        self.changed
            .wait_timeout(t, POLL)
            .unwrap_or_else(|e| e.into_inner())
            .0
    }

    /// How many queues exist.
    pub fn queue_count(&self) -> usize {
        self.lock().by_index.len()
    }

    /// The tunables (`kernel/msgmax`, `msgmnb`, `msgmni`).
    pub fn limits(&self) -> MsgLimits {
        self.lock().limits
    }

    /// Changes the tunables (a write to `/proc/sys/kernel/msg*`); queues already made keep
    /// their `msg_qbytes`.
    pub fn set_limits(&self, limits: MsgLimits) {
        self.lock().limits = limits;
    }

    /// msgget(2): the id of the queue with `key`, made for `who` with the permission bits of
    /// `flags` when the key is IPC_PRIVATE or new with IPC_CREAT.
    ///
    /// # Errors
    /// EEXIST with IPC_CREAT|IPC_EXCL on an existing key, ENOENT without IPC_CREAT on a
    /// missing one, EACCES when `flags` ask for permissions the queue does not grant,
    /// ENOSPC when the sandbox has `msgmni` queues.
    pub fn get(&self, key: i32, flags: i32, who: &Caller) -> Result<i32, Errno> {
        let mut t = self.lock();
        if key != IPC_PRIVATE {
            if let Some(q) = t.by_index.values().find(|q| q.perm.key == key) {
                if flags & IPC_CREAT != 0 && flags & IPC_EXCL != 0 {
                    return Err(Errno::EEXIST);
                }
                if !who.may(&q.perm, flags) {
                    return Err(Errno::EACCES);
                }
                return Ok(q.id);
            }
            if flags & IPC_CREAT == 0 {
                return Err(Errno::ENOENT);
            }
        }
        let mut q = MsgQueue::new(IpcPerm::new(key, who.euid, who.egid, flags));
        q.qbytes = u64::from(t.limits.mnb);
        t.add(q)
    }

    /// msgsnd(2) by `who`: appends `msg` to queue `id`, waiting while the queue is full
    /// (unless `nowait`) until there is room or `interrupted` says so.
    ///
    /// # Errors
    /// EINVAL (no such queue), EIDRM (another queue has its index, or it was removed while
    /// waiting), EACCES (no write permission), EAGAIN (full, with `nowait`), EINTR.
    pub fn send(
        &self,
        id: i32,
        msg: Message,
        nowait: bool,
        who: &Caller,
        interrupted: impl Fn() -> bool,
    ) -> Result<(), Errno> {
        let len = msg.text.len() as u64;
        let cost = len + MSG_HEADER;
        let mut t = self.lock();
        t.checked(id)?;
        loop {
            let pool_has_room = t.pooled + cost <= MSGPOOL * 1024;
            let q = t.live(id)?;
            if !who.may(&q.perm, WRITE) {
                return Err(Errno::EACCES);
            }
            if q.fits(len) && pool_has_room {
                q.lspid = who.pid;
                q.stime = now();
                q.push(msg);
                t.pooled += cost;
                drop(t);
                self.changed.notify_all();
                return Ok(());
            }
            if nowait {
                return Err(Errno::EAGAIN);
            }
            if interrupted() {
                return Err(Errno::EINTR);
            }
            t = self.wait(t);
        }
    }

    /// msgrcv(2) by `who`: takes the message `sel` selects from queue `id` (with MSG_COPY, a
    /// copy of it), its text cut to `bufsz` bytes with MSG_NOERROR; waits for one unless
    /// IPC_NOWAIT, until one comes or `interrupted` says so.
    ///
    /// # Errors
    /// EINVAL (no such queue; MSG_COPY without IPC_NOWAIT or with MSG_EXCEPT; MSG_COPY of a
    /// message longer than `bufsz` with MSG_NOERROR), EIDRM, EACCES (no read permission),
    /// E2BIG (the message is longer than `bufsz`, without MSG_NOERROR: it stays queued),
    /// ENOMSG (none, with IPC_NOWAIT), EINTR.
    pub fn receive(
        &self,
        id: i32,
        sel: Selector,
        bufsz: usize,
        flags: i32,
        who: &Caller,
        interrupted: impl Fn() -> bool,
    ) -> Result<Message, Errno> {
        let copy = flags & MSG_COPY != 0;
        if id < 0 || copy && (flags & MSG_EXCEPT != 0 || flags & IPC_NOWAIT == 0) {
            return Err(Errno::EINVAL);
        }
        let mut t = self.lock();
        t.checked(id)?;
        loop {
            let msgmax = t.limits.max as usize;
            let q = t.live(id)?;
            if !who.may(&q.perm, READ) {
                return Err(Errno::EACCES);
            }
            if let Some(i) = sel.find(&q.messages) {
                let size = q.messages[i].text.len();
                if bufsz < size && flags & MSG_NOERROR == 0 {
                    return Err(Errno::E2BIG);
                }
                if copy {
                    // Linux copies into a message of min(bufsz, MSGMAX) bytes.
                    if size > bufsz.min(msgmax) {
                        return Err(Errno::EINVAL);
                    }
                    return Ok(q.messages[i].clone());
                }
                let Some(mut m) = q.messages.remove(i) else {
                    return Err(Errno::ENOMSG);
                };
                q.cbytes -= size as u64;
                q.rtime = now();
                q.lrpid = who.pid;
                t.pooled -= size as u64 + MSG_HEADER;
                drop(t);
                self.changed.notify_all();
                m.text.truncate(bufsz);
                return Ok(m);
            }
            if flags & IPC_NOWAIT != 0 {
                return Err(Errno::ENOMSG);
            }
            if interrupted() {
                return Err(Errno::EINTR);
            }
            t = self.wait(t);
        }
    }

    /// IPC_STAT, MSG_STAT, MSG_STAT_ANY: the queue's `struct msqid64_ds` and its id.
    ///
    /// # Errors
    /// EINVAL (no such queue or index), EIDRM (IPC_STAT of an id whose index another queue
    /// has), EACCES (no read permission, but with MSG_STAT_ANY).
    pub fn stat(&self, id: i32, by: StatBy, who: &Caller) -> Result<([u8; 120], i32), Errno> {
        let mut t = self.lock();
        let q = super::ids::stat_target(&mut t.by_index, id, by, who, Errno::EIDRM)?;
        Ok((q.to_msqid_ds(), q.id))
    }

    /// IPC_SET from the guest's `struct msqid64_ds` `ds`: owner, group, permission bits and
    /// `msg_qbytes`. Waiters try again (a sender may fit now, a receiver may have lost its
    /// permission).
    ///
    /// # Errors
    /// EINVAL, EIDRM (as [`MsgTable::stat`]); EPERM unless `who` owns or created it or has
    /// CAP_SYS_ADMIN, and for `msg_qbytes` past `msgmnb` without CAP_SYS_RESOURCE; EINVAL
    /// for the uid or gid -1.
    pub fn set(&self, id: i32, ds: &[u8; 120], who: &Caller) -> Result<(), Errno> {
        let u32_at = |at: usize| u32::from_le_bytes([ds[at], ds[at + 1], ds[at + 2], ds[at + 3]]);
        let (uid, gid) = (u32_at(4), u32_at(8));
        let mode = u16::from_le_bytes([ds[20], ds[21]]);
        // Linux passes msg_qbytes on as an int: the check and the value are the int's.
        let qbytes = u32_at(88) as i32;
        let mut t = self.lock();
        let mnb = i64::from(t.limits.mnb);
        let q = t.checked(id)?;
        if !who.controls(&q.perm) {
            return Err(Errno::EPERM);
        }
        if i64::from(qbytes) > mnb && !who.sys_resource {
            return Err(Errno::EPERM);
        }
        if uid == u32::MAX || gid == u32::MAX {
            return Err(Errno::EINVAL);
        }
        q.perm.uid = uid;
        q.perm.gid = gid;
        q.perm.mode = (q.perm.mode & !0o777) | (mode & 0o777);
        q.qbytes = i64::from(qbytes) as u64;
        q.ctime = now();
        drop(t);
        self.changed.notify_all();
        Ok(())
    }

    /// IPC_RMID: removes queue `id` with its messages; its waiters fail with EIDRM.
    ///
    /// # Errors
    /// EINVAL, EIDRM (as [`MsgTable::stat`]); EPERM unless `who` owns or created it or has
    /// CAP_SYS_ADMIN.
    pub fn remove(&self, id: i32, who: &Caller) -> Result<(), Errno> {
        let mut t = self.lock();
        let q = t.checked(id)?;
        if !who.controls(&q.perm) {
            return Err(Errno::EPERM);
        }
        if let Some(q) = t.by_index.remove(&index_of(id)) {
            t.pooled -= q.pooled();
        }
        drop(t);
        self.changed.notify_all();
        Ok(())
    }

    /// IPC_INFO (`usage` false) or MSG_INFO (true): `struct msginfo` (32 bytes: `msgpool`,
    /// `msgmap`, `msgmax`, `msgmnb`, `msgmni`, `msgssz`, `msgtql` as ints, `msgseg` as an
    /// unsigned short) and the highest index in use (0 when none). MSG_INFO reports in
    /// `msgpool`, `msgmap` and `msgtql` the queues, messages and bytes in use; IPC_INFO
    /// Linux's nominal limits.
    pub fn info(&self, usage: bool) -> ([u8; 32], i32) {
        let t = self.lock();
        let clamp = |v: u64| v.min(i32::MAX as u64) as i32;
        let (pool, map, tql) = if usage {
            let messages = t.by_index.values().map(|q| q.messages.len() as u64).sum();
            let bytes = t.by_index.values().map(|q| q.cbytes).sum();
            (t.by_index.len() as i32, clamp(messages), clamp(bytes))
        } else {
            (MSGPOOL as i32, MSGMNB as i32, MSGMNB as i32)
        };
        let mut b = [0u8; 32];
        for (i, v) in [
            pool,
            map,
            t.limits.max as i32,
            t.limits.mnb as i32,
            t.limits.mni as i32,
            MSGSSZ,
            tql,
        ]
        .into_iter()
        .enumerate()
        {
            b[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        b[28..30].copy_from_slice(&MSGSEG.to_le_bytes());
        let max_idx = t.by_index.keys().next_back().map_or(0, |&i| i as i32);
        (b, max_idx)
    }

    /// `/proc/sysvipc/msg`: a header, then a line per queue in index order, in Linux's
    /// format (key, id, mode, bytes, messages, last pids, owner, creator, times).
    pub fn proc_file(&self) -> Vec<u8> {
        use std::fmt::Write;
        let t = self.lock();
        let mut out = String::from(
            "       key      msqid perms      cbytes       qnum lspid lrpid   uid   gid  cuid  \
             cgid      stime      rtime      ctime\n",
        );
        for q in t.by_index.values() {
            let p = &q.perm;
            let _ = writeln!(
                out,
                "{:>10} {:>10}  {:>4o}  {:>10} {:>10} {:>5} {:>5} {:>5} {:>5} {:>5} {:>5} {:>10} \
                 {:>10} {:>10}",
                p.key,
                q.id,
                p.mode,
                q.cbytes,
                q.messages.len(),
                q.lspid as u32,
                q.lrpid as u32,
                p.uid,
                p.gid,
                p.cuid,
                p.cgid,
                q.stime as u64,
                q.rtime as u64,
                q.ctime as u64,
            );
        }
        out.into_bytes()
    }

    /// A copy of the queues and id state (for a checkpoint).
    pub fn export(&self) -> MsgImage {
        let t = self.lock();
        MsgImage {
            cursor: t.cursor,
            queues: t.by_index.values().cloned().collect(),
        }
    }

    /// Takes back the queues and id state of `image` into this empty table (a restore),
    /// checking what Linux could not have made.
    ///
    /// # Errors
    /// [`ImportError`]; the table is left empty.
    pub fn import(&self, image: MsgImage) -> Result<(), ImportError> {
        let mut t = self.lock();
        if !t.by_index.is_empty() {
            return Err(ImportError::NotEmpty);
        }
        let c = image.cursor;
        if !c.is_valid() {
            return Err(ImportError::BadCursor);
        }
        if image.queues.len() > IPCMNI {
            return Err(ImportError::TooMuch);
        }
        let mut queues = BTreeMap::new();
        let mut pooled = 0u64;
        for q in image.queues {
            let bad = |why| Err(ImportError::BadQueue(q.id, why));
            if q.id < 0 {
                return bad("a negative id");
            }
            if q.perm.mode > 0o777 {
                return bad("permission bits beyond 0777");
            }
            if q.messages
                .iter()
                .any(|m| m.mtype < 1 || m.text.len() as u64 > MSGPOOL * 1024)
            {
                return bad("a message of type below 1 or longer than the pool");
            }
            if q.cbytes != q.messages.iter().map(|m| m.text.len() as u64).sum::<u64>() {
                return bad("a byte count that is not its messages'");
            }
            if q.perm.key != IPC_PRIVATE
                && queues.values().any(|o: &MsgQueue| o.perm.key == q.perm.key)
            {
                return bad("a key another queue has");
            }
            pooled += q.pooled();
            if queues.insert(index_of(q.id), q).is_some() {
                return Err(ImportError::BadQueue(-1, "two queues at one index"));
            }
        }
        if pooled > MSGPOOL * 1024 {
            return Err(ImportError::TooMuch);
        }
        t.by_index = queues;
        t.cursor = c;
        t.pooled = pooled;
        Ok(())
    }
}

impl super::ids::IpcObject for MsgQueue {
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
            ipc_owner: true,
            sys_admin: true,
            sys_resource: true,
            ..Caller::default()
        }
    }

    fn user(uid: u32, gid: u32) -> Caller {
        Caller {
            pid: 2,
            euid: uid,
            egid: gid,
            fsgid: gid,
            ..Caller::default()
        }
    }

    fn msg(mtype: i64, text: &[u8]) -> Message {
        Message {
            mtype,
            text: text.to_vec(),
        }
    }

    fn send(t: &MsgTable, id: i32, mtype: i64, text: &[u8]) -> Result<(), Errno> {
        t.send(id, msg(mtype, text), true, &root(), || false)
    }

    fn recv(t: &MsgTable, id: i32, msgtyp: i64, flags: i32) -> Result<Message, Errno> {
        t.receive(
            id,
            Selector::new(msgtyp, flags),
            MSGMAX,
            flags | IPC_NOWAIT,
            &root(),
            || false,
        )
    }

    fn stat_u64(t: &MsgTable, id: i32, at: usize) -> u64 {
        let (ds, _) = t.stat(id, StatBy::Id, &root()).unwrap();
        u64::from_le_bytes(ds[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn ids_are_linuxs() {
        let t = MsgTable::default();
        let a = t.get(IPC_PRIVATE, 0o600, &root()).unwrap();
        let b = t.get(IPC_PRIVATE, 0o600, &root()).unwrap();
        assert_eq!((a, b), (0, 1));
        t.remove(a, &root()).unwrap();
        // The index is not given again at once; the removed id is gone.
        assert_eq!(t.get(IPC_PRIVATE, 0o600, &root()), Ok(2));
        assert_eq!(send(&t, a, 1, b"x"), Err(Errno::EINVAL));
        // Past the cycle of 64 indices the free ones come back with the next sequence.
        for i in 3..64 {
            let x = t.get(IPC_PRIVATE, 0o600, &root()).unwrap();
            assert_eq!(x, i);
            t.remove(x, &root()).unwrap();
        }
        assert_eq!(t.get(IPC_PRIVATE, 0o600, &root()), Ok(1 << 15));
        // The old id 0 names an index another queue has now.
        assert_eq!(send(&t, 0, 1, b"x"), Err(Errno::EIDRM));
        assert_eq!(t.stat(0, StatBy::Index, &root()).unwrap().1, 1 << 15);
        assert_eq!(t.stat(b, StatBy::Id, &root()).unwrap().1, b);
        assert_eq!(t.info(true).1, 2);
        assert_eq!(t.stat(64, StatBy::Index, &root()), Err(Errno::EINVAL));
    }

    #[test]
    fn keys_and_creation() {
        let t = MsgTable::default();
        let id = t.get(7, IPC_CREAT | IPC_EXCL | 0o640, &root()).unwrap();
        assert_eq!(
            t.get(7, IPC_CREAT | IPC_EXCL | 0o600, &root()),
            Err(Errno::EEXIST)
        );
        assert_eq!(t.get(7, 0, &root()), Ok(id));
        assert_eq!(t.get(7, IPC_CREAT, &root()), Ok(id));
        assert_eq!(t.get(8, 0o600, &root()), Err(Errno::ENOENT));
        // Asking for permissions the queue does not grant: EACCES; asking none: the id.
        assert_eq!(t.get(7, 0o600, &user(1000, 1000)), Err(Errno::EACCES));
        assert_eq!(t.get(7, 0, &user(1000, 1000)), Ok(id));
        // Group 0 may read (0640).
        assert_eq!(t.get(7, 0o400, &user(1000, 0)), Ok(id));
        // IPC_PRIVATE makes a new queue even without IPC_CREAT.
        assert_ne!(t.get(IPC_PRIVATE, 0, &root()), Ok(id));
        assert_eq!(t.queue_count(), 2);
    }

    #[test]
    fn receive_selects_by_type() {
        let t = MsgTable::default();
        let id = t.get(IPC_PRIVATE, 0o600, &root()).unwrap();
        for (ty, text) in [
            (3, "three"),
            (1, "one-a"),
            (2, "two"),
            (1, "one-b"),
            (5, "five"),
        ] {
            send(&t, id, ty, text.as_bytes()).unwrap();
        }
        assert_eq!(recv(&t, id, 2, 0).unwrap(), msg(2, b"two"));
        // The first of the lowest type at most 3.
        assert_eq!(recv(&t, id, -3, 0).unwrap(), msg(1, b"one-a"));
        // The first not of type 3.
        assert_eq!(recv(&t, id, 3, MSG_EXCEPT).unwrap(), msg(1, b"one-b"));
        // MSG_EXCEPT does not change 0 nor a negative type.
        assert_eq!(recv(&t, id, -4, MSG_EXCEPT).unwrap(), msg(3, b"three"));
        assert_eq!(recv(&t, id, 4, 0), Err(Errno::ENOMSG));
        assert_eq!(recv(&t, id, i64::MIN, 0).unwrap(), msg(5, b"five"));
        assert_eq!(recv(&t, id, 0, 0), Err(Errno::ENOMSG));
        assert_eq!(stat_u64(&t, id, 80), 0);
        assert_eq!(stat_u64(&t, id, 72), 0);
    }

    #[test]
    fn copy_leaves_the_message() {
        let t = MsgTable::default();
        let id = t.get(IPC_PRIVATE, 0o600, &root()).unwrap();
        send(&t, id, 4, b"first").unwrap();
        send(&t, id, 9, b"second").unwrap();
        assert_eq!(recv(&t, id, 1, MSG_COPY).unwrap(), msg(9, b"second"));
        assert_eq!(recv(&t, id, 2, MSG_COPY), Err(Errno::ENOMSG));
        assert_eq!(recv(&t, id, -1, MSG_COPY), Err(Errno::ENOMSG));
        assert_eq!(stat_u64(&t, id, 80), 2);
        // MSG_COPY needs IPC_NOWAIT and refuses MSG_EXCEPT.
        let copy = |flags| t.receive(id, Selector::new(0, flags), 100, flags, &root(), || false);
        assert_eq!(copy(MSG_COPY), Err(Errno::EINVAL));
        assert_eq!(copy(MSG_COPY | IPC_NOWAIT | MSG_EXCEPT), Err(Errno::EINVAL));
        // A copy is never cut: E2BIG, or EINVAL with MSG_NOERROR.
        let short = |flags| t.receive(id, Selector::Index(0), 2, flags, &root(), || false);
        assert_eq!(short(MSG_COPY | IPC_NOWAIT), Err(Errno::E2BIG));
        assert_eq!(
            short(MSG_COPY | IPC_NOWAIT | MSG_NOERROR),
            Err(Errno::EINVAL)
        );
    }

    #[test]
    fn long_messages_fail_or_are_cut() {
        let t = MsgTable::default();
        let id = t.get(IPC_PRIVATE, 0o600, &root()).unwrap();
        send(&t, id, 1, b"0123456789").unwrap();
        let take = |flags| {
            t.receive(id, Selector::First, 4, flags | IPC_NOWAIT, &root(), || {
                false
            })
        };
        assert_eq!(take(0), Err(Errno::E2BIG));
        assert_eq!(stat_u64(&t, id, 80), 1);
        assert_eq!(take(MSG_NOERROR).unwrap(), msg(1, b"0123"));
        assert_eq!(stat_u64(&t, id, 80), 0);
    }

    #[test]
    fn a_full_queue_refuses_or_blocks() {
        let t = MsgTable::default();
        let id = t.get(IPC_PRIVATE, 0o600, &root()).unwrap();
        let big = vec![7u8; MSGMAX];
        send(&t, id, 1, &big).unwrap();
        send(&t, id, 1, &big).unwrap();
        assert_eq!(stat_u64(&t, id, 72), MSGMNB);
        assert_eq!(send(&t, id, 1, b"x"), Err(Errno::EAGAIN));
        // An empty message still fits: the bound on bytes is not one on messages.
        send(&t, id, 1, b"").unwrap();
        // Waiting, interrupted: EINTR.
        assert_eq!(
            t.send(id, msg(1, b"x"), false, &root(), || true),
            Err(Errno::EINTR)
        );
        // Lowering msg_qbytes to 2 also bounds the number of messages.
        let mut ds = t.stat(id, StatBy::Id, &root()).unwrap().0;
        for _ in 0..3 {
            recv(&t, id, 0, 0).unwrap();
        }
        ds[88..96].copy_from_slice(&2u64.to_le_bytes());
        t.set(id, &ds, &root()).unwrap();
        send(&t, id, 1, b"").unwrap();
        send(&t, id, 1, b"").unwrap();
        assert_eq!(send(&t, id, 1, b""), Err(Errno::EAGAIN));
        // A waiting receiver is woken by a send from another thread.
        let t = std::sync::Arc::new(MsgTable::default());
        let id = t.get(IPC_PRIVATE, 0o600, &root()).unwrap();
        let t2 = t.clone();
        let waiter = std::thread::spawn(move || {
            t2.receive(id, Selector::Type(2), 100, 0, &root(), || false)
        });
        std::thread::sleep(Duration::from_millis(50));
        send(&t, id, 1, b"other").unwrap();
        send(&t, id, 2, b"mine").unwrap();
        assert_eq!(waiter.join().unwrap(), Ok(msg(2, b"mine")));
        // And a removal wakes it with EIDRM.
        let t2 = t.clone();
        let waiter = std::thread::spawn(move || {
            t2.receive(id, Selector::Type(2), 100, 0, &root(), || false)
        });
        std::thread::sleep(Duration::from_millis(50));
        t.remove(id, &root()).unwrap();
        assert_eq!(waiter.join().unwrap(), Err(Errno::EIDRM));
    }

    #[test]
    fn permissions_and_control() {
        let t = MsgTable::default();
        let id = t.get(IPC_PRIVATE, 0o620, &root()).unwrap();
        let other = user(1000, 1000);
        let group = user(1000, 0);
        let recv_as = |who: &Caller| t.receive(id, Selector::First, 10, IPC_NOWAIT, who, || false);
        // Group members may write (but not read); others neither.
        assert_eq!(t.send(id, msg(1, b"g"), true, &group, || false), Ok(()));
        assert_eq!(recv_as(&group), Err(Errno::EACCES));
        assert_eq!(
            t.send(id, msg(1, b"o"), true, &other, || false),
            Err(Errno::EACCES)
        );
        assert_eq!(t.stat(id, StatBy::Id, &other), Err(Errno::EACCES));
        assert_eq!(t.stat(id, StatBy::Index, &other), Err(Errno::EACCES));
        assert_eq!(t.stat(id, StatBy::IndexAny, &other).map(|s| s.1), Ok(id));
        // The last sender is recorded.
        let (ds, _) = t.stat(id, StatBy::Id, &root()).unwrap();
        assert_eq!(i32::from_le_bytes(ds[96..100].try_into().unwrap()), 2);
        // Only the owner, the creator or CAP_SYS_ADMIN may change or remove it.
        let mut ds = t.stat(id, StatBy::Id, &root()).unwrap().0;
        assert_eq!(t.set(id, &ds, &other), Err(Errno::EPERM));
        assert_eq!(t.remove(id, &other), Err(Errno::EPERM));
        // Give it to 1000 with 0600: 1000 may read, and remove it.
        ds[4..8].copy_from_slice(&1000u32.to_le_bytes());
        ds[20..22].copy_from_slice(&0o600u16.to_le_bytes());
        t.set(id, &ds, &root()).unwrap();
        assert_eq!(recv_as(&other), Ok(msg(1, b"g")));
        // Raising msg_qbytes past MSGMNB needs CAP_SYS_RESOURCE.
        ds[88..96].copy_from_slice(&(MSGMNB + 1).to_le_bytes());
        assert_eq!(t.set(id, &ds, &other), Err(Errno::EPERM));
        ds[88..96].copy_from_slice(&(MSGMNB - 1).to_le_bytes());
        t.set(id, &ds, &other).unwrap();
        assert_eq!(stat_u64(&t, id, 88), MSGMNB - 1);
        ds[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(t.set(id, &ds, &other), Err(Errno::EINVAL));
        t.remove(id, &other).unwrap();
        assert_eq!(t.remove(id, &other), Err(Errno::EINVAL));
    }

    #[test]
    fn info_counts_what_is_queued() {
        let t = MsgTable::default();
        let (b, max) = t.info(false);
        let int =
            |b: &[u8; 32], i: usize| i32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().unwrap());
        assert_eq!(max, 0);
        assert_eq!(
            (0..7).map(|i| int(&b, i)).collect::<Vec<_>>(),
            [512000, 16384, 8192, 16384, 32000, 16, 16384]
        );
        assert_eq!(u16::from_le_bytes([b[28], b[29]]), 0xffff);
        let a = t.get(IPC_PRIVATE, 0o600, &root()).unwrap();
        let c = t.get(IPC_PRIVATE, 0o600, &root()).unwrap();
        send(&t, a, 1, b"abc").unwrap();
        send(&t, c, 1, b"de").unwrap();
        send(&t, c, 1, b"").unwrap();
        let (b, max) = t.info(true);
        assert_eq!((max, int(&b, 0), int(&b, 1), int(&b, 6)), (1, 2, 3, 5));
    }

    #[test]
    fn proc_file_is_linuxs() {
        let t = MsgTable::default();
        let id = t.get(4660, IPC_CREAT | 0o640, &root()).unwrap();
        send(&t, id, 3, b"abcde").unwrap();
        t.get(IPC_PRIVATE, 0o600, &root()).unwrap();
        for q in t.lock().by_index.values_mut() {
            (q.stime, q.rtime, q.ctime) = (if q.id == 0 { 1796547556 } else { 0 }, 0, 1796547556);
            q.lspid = if q.id == 0 { 21887 } else { 0 };
        }
        // As Linux's (ipc/msg.c, sysvipc_msg_proc_show), line for line.
        let want = [
            "       key      msqid perms      cbytes       qnum lspid lrpid   uid   gid  cuid  cgid      stime      rtime      ctime",
            "      4660          0   640           5          1 21887     0     0     0     0     0 1796547556          0 1796547556",
            "         0          1   600           0          0     0     0     0     0     0     0          0          0 1796547556",
        ];
        let got = String::from_utf8(t.proc_file()).unwrap();
        assert_eq!(got.lines().collect::<Vec<_>>(), want);
        assert!(got.ends_with('\n'));
    }

    #[test]
    fn export_and_import_keep_everything() {
        let t = MsgTable::default();
        let a = t.get(5, IPC_CREAT | 0o644, &root()).unwrap();
        send(&t, a, 3, b"kept").unwrap();
        send(&t, a, 1, b"").unwrap();
        let image = t.export();
        let u = MsgTable::default();
        u.import(image.clone()).unwrap();
        assert_eq!(
            u.stat(a, StatBy::Id, &root()),
            t.stat(a, StatBy::Id, &root())
        );
        assert_eq!(u.get(5, 0, &root()), Ok(a));
        assert_eq!(u.get(IPC_PRIVATE, 0, &root()), Ok(1));
        assert_eq!(recv(&u, a, 3, 0).unwrap(), msg(3, b"kept"));
        assert_eq!(u.import(image.clone()), Err(ImportError::NotEmpty));
        // What Linux could not have made is refused.
        let mut bad = image.clone();
        bad.queues[0].push(msg(0, b"type 0"));
        assert!(matches!(
            MsgTable::default().import(bad),
            Err(ImportError::BadQueue(..))
        ));
        let mut bad = image.clone();
        bad.queues.push(bad.queues[0].clone());
        assert!(MsgTable::default().import(bad).is_err());
        let mut bad = image;
        bad.cursor.seq = -1;
        assert_eq!(MsgTable::default().import(bad), Err(ImportError::BadCursor));
    }
}
