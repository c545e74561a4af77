//! POSIX message queues of a sandbox (Linux's `ipc/mqueue.c`): the queues by name, as the
//! mqueue filesystem of one IPC namespace holds them, each a priority-ordered list of
//! messages, and the rules of mq_open(2), mq_unlink(2), mq_timedsend(2), mq_timedreceive(2),
//! mq_notify(2) and mq_getsetattr(2) over them. The syscall handlers
//! (`syscalls/sys_mq.rs`) copy the guest's buffers and structures in and out; everything
//! here is plain data, checks and waits.
//!
//! A queue lives while it has a name or an open descriptor ([`Arc`]s of [`MessageQueue`]:
//! one in [`MqNamespace`]'s names, one in each descriptor). What it costs is charged, as on
//! Linux, to the user that created it (its `RLIMIT_MSGQUEUE` bounds the total: EMFILE) and
//! to the namespace's count of queues (`queues_max`: ENOSPC), and given back when it goes.
//!
//! Messages are kept by priority, highest first, in arrival order within one priority.
//! Waiting follows Linux's "pipelined" send and receive: a receiver finding the queue empty
//! (a sender finding it full) waits in a FIFO of waiters; a sender that finds a receiver
//! waiting hands its message to that receiver directly (the queue stays empty, no
//! notification), and a receiver that makes room moves the first waiting sender's message
//! into the queue. A waiter checks every [`POLL`] whether it was interrupted (a signal, a
//! park, the process ending: EINTR, which the task loop restarts or reports) and whether its
//! absolute `CLOCK_REALTIME` deadline has passed (ETIMEDOUT).
//!
//! A descriptor's readiness for poll, select and epoll is a host eventfd per open file
//! description ([`Readiness`]), which the queue sets after each change: its counter is 0
//! when the queue is empty (writable only), 1 when it holds messages and has room (readable
//! and writable), and the eventfd's largest value when it is full (readable only).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime};

use abi::mqueue::{MqAttr, HARD_MSGMAX, HARD_MSGSIZEMAX, MQ_PRIO_MAX};
use abi::Errno;

/// How often a blocked send or receive checks whether it was interrupted or timed out.
const POLL: Duration = Duration::from_millis(10);
/// Longest queue name (Linux's `NAME_MAX`).
pub const NAME_MAX: usize = 255;
/// What Linux reports as a queue file's size (`FILENT_SIZE`).
pub const FILE_SIZE: i64 = 80;
/// Bytes Linux charges per possible message beyond its text (`sizeof(struct msg_msg)`).
const MSG_HEADER: u64 = 48;
/// Bytes Linux charges per possible priority in use (`sizeof(struct posix_msg_tree_node)`).
const TREE_NODE: u64 = 40;

/// `sigev_notify`: a signal.
const SIGEV_SIGNAL: i32 = 0;
/// `sigev_notify`: nothing (the registration only holds the queue).
const SIGEV_NONE: i32 = 1;

/// The tunables of `/proc/sys/fs/mqueue` (one IPC namespace's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MqLimits {
    /// `queues_max`: the most queues (without `CAP_SYS_RESOURCE`).
    pub queues_max: u64,
    /// `msg_max`: the largest `mq_maxmsg` (without `CAP_SYS_RESOURCE`).
    pub msg_max: i64,
    /// `msgsize_max`: the largest `mq_msgsize` (without `CAP_SYS_RESOURCE`).
    pub msgsize_max: i64,
    /// `msg_default`: `mq_maxmsg` of a queue created without attributes.
    pub msg_default: i64,
    /// `msgsize_default`: `mq_msgsize` of a queue created without attributes.
    pub msgsize_default: i64,
}

impl Default for MqLimits {
    /// Linux's defaults (`DFLT_QUEUESMAX`, `DFLT_MSGMAX`, `DFLT_MSGSIZEMAX`, `DFLT_MSG`,
    /// `DFLT_MSGSIZE`).
    fn default() -> Self {
        MqLimits {
            queues_max: 256,
            msg_max: 10,
            msgsize_max: 8192,
            msg_default: 10,
            msgsize_default: 8192,
        }
    }
}

/// Who makes a call, as the queue's checks see them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MqCaller {
    /// Process id: a notification's owner, the sender a signal names.
    pub pid: i32,
    /// Real user id: the sender a notification signal names.
    pub uid: u32,
    /// Filesystem user id: owner of what it creates, matched against a queue's owner.
    pub fsuid: u32,
    /// Filesystem group id: group of what it creates.
    pub fsgid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// The file creation mask.
    pub umask: u32,
    /// CAP_DAC_OVERRIDE: permission bits do not apply.
    pub dac_override: bool,
    /// CAP_DAC_READ_SEARCH: read permission bits do not apply.
    pub dac_read_search: bool,
    /// CAP_FOWNER: may unlink another user's queue.
    pub fowner: bool,
    /// CAP_SYS_RESOURCE: past `queues_max`, `msg_max` and `msgsize_max`.
    pub sys_resource: bool,
    /// Its `RLIMIT_MSGQUEUE` (bytes its user's queues may cost).
    pub msgqueue_limit: u64,
}

impl MqCaller {
    fn in_group(&self, gid: u32) -> bool {
        self.fsgid == gid || self.groups.contains(&gid)
    }

    /// Linux's `generic_permission` on a queue file owned by `uid`/`gid` with `mode`, for
    /// `want` (read 4, write 2).
    fn may(&self, mode: u32, uid: u32, gid: u32, want: u32) -> bool {
        let bits = if self.fsuid == uid {
            mode >> 6
        } else if self.in_group(gid) {
            mode >> 3
        } else {
            mode
        } & 7;
        if want & !bits == 0 || self.dac_override {
            return true;
        }
        want == 4 && self.dac_read_search
    }
}

/// The access an open file description has: from mq_open's `O_RDONLY`, `O_WRONLY`, `O_RDWR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// May receive (and read the status line).
    pub read: bool,
    /// May send.
    pub write: bool,
}

impl Access {
    /// The access of `oflag` (EINVAL for `O_WRONLY | O_RDWR`).
    ///
    /// # Errors
    /// EINVAL.
    pub fn of(oflag: i32) -> Result<Access, Errno> {
        match oflag & libc::O_ACCMODE {
            libc::O_RDONLY => Ok(Access {
                read: true,
                write: false,
            }),
            libc::O_WRONLY => Ok(Access {
                read: false,
                write: true,
            }),
            libc::O_RDWR => Ok(Access {
                read: true,
                write: true,
            }),
            _ => Err(Errno::EINVAL),
        }
    }

    fn bits(self) -> u32 {
        (if self.read { 4 } else { 0 }) | (if self.write { 2 } else { 0 })
    }
}

/// What a registered process is told when a message arrives in the empty queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notify {
    /// `SIGEV_NONE`: nothing; the registration only keeps others from registering.
    Nothing,
    /// `SIGEV_SIGNAL`: this signal (0: none) with this `si_value`.
    Signal {
        /// The signal.
        signo: i32,
        /// `sigev_value`, passed as `si_value`.
        value: u64,
    },
    /// `SIGEV_THREAD`: the C library's cookie, sent as a datagram through `to` (the other
    /// end of the socket its notification thread reads, `sys_mq`).
    Thread {
        /// The cookie (its last byte is set to say why it is sent).
        cookie: [u8; abi::mqueue::NOTIFY_COOKIE_LEN],
        /// Where it is sent.
        to: Channel,
    },
}

/// The sending end of a `SIGEV_THREAD` notification's channel; two are equal when they are
/// the same channel.
#[derive(Debug, Clone)]
pub struct Channel(pub std::sync::Arc<std::os::fd::OwnedFd>);

impl PartialEq for Channel {
    fn eq(&self, other: &Channel) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Channel {}

impl Notify {
    /// The `sigev_notify` it came from.
    pub fn sigev_notify(&self) -> i32 {
        match self {
            Notify::Nothing => SIGEV_NONE,
            Notify::Signal { .. } => SIGEV_SIGNAL,
            Notify::Thread { .. } => abi::timer::SIGEV_THREAD,
        }
    }
}

/// A process's registration for notification (one per queue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The registered process.
    pub owner: i32,
    /// What it is told.
    pub how: Notify,
}

/// A notification a send must post: the registration it ended, with the sender's process
/// and real user ids for `si_pid` and `si_uid` (a signal), or the cookie to send (`thread`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    /// The process to signal.
    pub owner: i32,
    /// The signal.
    pub signo: i32,
    /// Its `si_value`.
    pub value: u64,
    /// The sender's process id.
    pub pid: i32,
    /// The sender's real user id.
    pub uid: u32,
    /// A `SIGEV_THREAD` registration's cookie and where to send it (then no signal).
    pub thread: Option<([u8; abi::mqueue::NOTIFY_COOKIE_LEN], Channel)>,
}

/// One descriptor's readiness for poll, select and epoll: a host eventfd (the descriptor's
/// own host file) whose counter the queue sets after each change.
#[derive(Debug)]
pub struct Readiness {
    /// A duplicate of the descriptor's host eventfd.
    event: OwnedFd,
    /// The state last written: 0 empty, 1 neither empty nor full, 2 full.
    level: AtomicU8,
}

impl Readiness {
    /// Readiness carried by `event` (a duplicate of a new, zeroed eventfd).
    pub fn new(event: OwnedFd) -> Readiness {
        Readiness {
            event,
            level: AtomicU8::new(0),
        }
    }

    /// Makes the eventfd readable when `curmsgs > 0` and writable when below `maxmsg`.
    fn set(&self, curmsgs: usize, maxmsg: usize) {
        let level = if curmsgs == 0 {
            0
        } else if curmsgs < maxmsg {
            1
        } else {
            2
        };
        if self.level.swap(level, Ordering::SeqCst) == level {
            return;
        }
        let fd = self.event.as_raw_fd();
        // The eventfd shares the guest descriptor's O_NONBLOCK: read it only when readable.
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        if unsafe { libc::poll(&mut p, 1, 0) } == 1 {
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into a local from a readable eventfd we hold.
            unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
        }
        // The counter is 0 now: a write up to the largest value never blocks.
        let v: u64 = match level {
            0 => return,
            1 => 1,
            _ => u64::MAX - 1,
        };
        // SAFETY: writes 8 bytes from a local to an eventfd we hold.
        unsafe { libc::write(fd, (&v as *const u64).cast(), 8) };
    }
}

/// A waiting sender (with its message) or receiver (without).
#[derive(Debug)]
struct Waiter {
    id: u64,
    msg: Option<(u32, Vec<u8>)>,
}

/// Times of the queue's file (seconds and nanoseconds since the epoch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileTimes {
    /// Last access.
    pub atime: (i64, u32),
    /// Last modification (a message sent or received).
    pub mtime: (i64, u32),
    /// Last change.
    pub ctime: (i64, u32),
}

fn now() -> (i64, u32) {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or((0, 0), |d| (d.as_secs() as i64, d.subsec_nanos()))
}

#[derive(Debug, Default)]
struct QueueState {
    /// Messages by priority; each list in arrival order.
    by_prio: BTreeMap<u32, VecDeque<Vec<u8>>>,
    curmsgs: usize,
    /// Bytes of text queued (`QSIZE`).
    qsize: u64,
    /// Permission bits, owner and group of the queue's file.
    mode: u32,
    uid: u32,
    gid: u32,
    /// Whether it still has its name.
    linked: bool,
    times: FileTimes,
    notify: Option<Registration>,
    senders: VecDeque<Waiter>,
    receivers: VecDeque<Waiter>,
    /// Messages senders handed to waiting receivers, by waiter id, until they take them.
    handed: HashMap<u64, (u32, Vec<u8>)>,
    next_waiter: u64,
    watchers: Vec<Weak<Readiness>>,
}

impl QueueState {
    fn insert(&mut self, prio: u32, text: Vec<u8>) {
        self.qsize += text.len() as u64;
        self.curmsgs += 1;
        self.by_prio.entry(prio).or_default().push_back(text);
    }

    fn take(&mut self) -> Option<(u32, Vec<u8>)> {
        let mut entry = self.by_prio.last_entry()?;
        let prio = *entry.key();
        let text = entry.get_mut().pop_front()?;
        if entry.get().is_empty() {
            entry.remove();
        }
        self.curmsgs -= 1;
        self.qsize -= text.len() as u64;
        Some((prio, text))
    }

    fn touch(&mut self) {
        let t = now();
        self.times = FileTimes {
            atime: t,
            mtime: t,
            ctime: t,
        };
    }
}

/// What the namespace's queues cost, and its tunables (Linux's `mq_lock` data).
#[derive(Debug, Default)]
struct Usage {
    limits: MqLimits,
    /// Queues that exist (named or open: Linux's `mq_queues_count`).
    queues: u64,
    /// Bytes charged to each user's `RLIMIT_MSGQUEUE`.
    charged: HashMap<u32, u64>,
}

/// One POSIX message queue (Linux's `struct mqueue_inode_info`).
#[derive(Debug)]
pub struct MessageQueue {
    state: Mutex<QueueState>,
    /// Notified when a message is queued or taken, or a waiter served.
    changed: Condvar,
    /// `mq_maxmsg`.
    maxmsg: i64,
    /// `mq_msgsize`.
    msgsize: i64,
    /// Its inode number (for fstat).
    ino: u64,
    /// The user charged for it and how much.
    charge: (u32, u64),
    usage: Arc<Mutex<Usage>>,
}

impl Drop for MessageQueue {
    fn drop(&mut self) {
        let mut u = lock(&self.usage);
        u.queues = u.queues.saturating_sub(1);
        if let Some(c) = u.charged.get_mut(&self.charge.0) {
            *c = c.saturating_sub(self.charge.1);
            if *c == 0 {
                u.charged.remove(&self.charge.0);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a queue of `maxmsg` messages of `msgsize` bytes costs its user (Linux's `mq_bytes`
/// plus `mq_treesize`), `None` on overflow (EOVERFLOW).
fn cost(maxmsg: i64, msgsize: i64) -> Option<u64> {
    let (n, s) = (maxmsg as u64, msgsize as u64);
    let tree = n * MSG_HEADER + n.min(u64::from(MQ_PRIO_MAX)) * TREE_NODE;
    n.checked_mul(s)?.checked_add(tree)
}

/// A queue's state for a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueImage {
    /// Its name, if it still has one.
    pub name: Option<Vec<u8>>,
    /// `mq_maxmsg`.
    pub maxmsg: i64,
    /// `mq_msgsize`.
    pub msgsize: i64,
    /// Permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// The messages (priority, text), in the order they are received.
    pub messages: Vec<(u32, Vec<u8>)>,
}

static NEXT_INO: AtomicU64 = AtomicU64::new(1);

impl MessageQueue {
    /// `mq_maxmsg` and `mq_msgsize`.
    pub fn limits(&self) -> (i64, i64) {
        (self.maxmsg, self.msgsize)
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        lock(&self.state)
    }

    fn maxmsg(&self) -> usize {
        self.maxmsg as usize
    }

    /// Sets every descriptor's readiness and wakes waiters.
    fn changed(&self, s: &mut QueueState) {
        let (cur, max) = (s.curmsgs, self.maxmsg());
        s.watchers.retain(|w| match w.upgrade() {
            Some(r) => {
                r.set(cur, max);
                true
            }
            None => false,
        });
        self.changed.notify_all();
    }

    /// Adds a descriptor whose readiness follows the queue.
    pub fn watch(&self, r: &Arc<Readiness>) {
        let mut s = self.lock();
        r.set(s.curmsgs, self.maxmsg());
        s.watchers.push(Arc::downgrade(r));
    }

    /// Waits for a change, up to [`POLL`] or until `deadline`.
    fn wait<'a>(
        &self,
        s: MutexGuard<'a, QueueState>,
        deadline: Option<SystemTime>,
    ) -> MutexGuard<'a, QueueState> {
        let slice = deadline
            .and_then(|d| d.duration_since(SystemTime::now()).ok())
            .map_or(POLL, |left| left.min(POLL));
        self.changed
            .wait_timeout(s, slice)
            .unwrap_or_else(|e| e.into_inner())
            .0
    }

    /// mq_timedsend(2) by `who`: queues `text` with `prio`, or hands it to a waiting
    /// receiver. On a full queue: EAGAIN if `nonblock`, else waits until there is room,
    /// `deadline` (ETIMEDOUT) or `interrupted` (EINTR). Returns the notification signal to
    /// post, if the message made the empty queue non-empty for a registered process.
    ///
    /// # Errors
    /// EMSGSIZE (longer than `mq_msgsize`), EAGAIN, ETIMEDOUT, EINTR.
    pub fn send(
        &self,
        prio: u32,
        text: Vec<u8>,
        nonblock: bool,
        deadline: Option<SystemTime>,
        who: &MqCaller,
        interrupted: impl Fn() -> bool,
    ) -> Result<Option<Fired>, Errno> {
        if text.len() as u64 > self.msgsize as u64 {
            return Err(Errno::EMSGSIZE);
        }
        let mut s = self.lock();
        if s.curmsgs < self.maxmsg() {
            let mut fired = None;
            if let Some(r) = s.receivers.pop_front() {
                s.handed.insert(r.id, (prio, text));
            } else {
                s.insert(prio, text);
                if s.curmsgs == 1 {
                    fired = s.notify.take().and_then(|reg| match reg.how {
                        Notify::Signal { signo, value } if signo != 0 => Some(Fired {
                            owner: reg.owner,
                            signo,
                            value,
                            pid: who.pid,
                            uid: who.uid,
                            thread: None,
                        }),
                        Notify::Thread { cookie, to } => Some(Fired {
                            owner: reg.owner,
                            signo: 0,
                            value: 0,
                            pid: who.pid,
                            uid: who.uid,
                            thread: Some((cookie, to)),
                        }),
                        _ => None,
                    });
                }
            }
            s.touch();
            self.changed(&mut s);
            return Ok(fired);
        }
        if nonblock {
            return Err(Errno::EAGAIN);
        }
        let id = s.next_waiter;
        s.next_waiter += 1;
        s.senders.push_back(Waiter {
            id,
            msg: Some((prio, text)),
        });
        loop {
            s = self.wait(s, deadline);
            let pos = s.senders.iter().position(|w| w.id == id);
            let Some(pos) = pos else {
                // A receiver moved the message into the queue.
                return Ok(None);
            };
            if interrupted() {
                s.senders.remove(pos);
                return Err(Errno::EINTR);
            }
            if deadline.is_some_and(|d| SystemTime::now() >= d) {
                s.senders.remove(pos);
                return Err(Errno::ETIMEDOUT);
            }
        }
    }

    /// mq_timedreceive(2): the oldest message of the highest priority, or one a sender
    /// hands over while the caller waits. On an empty queue: EAGAIN if `nonblock`, else
    /// waits until a message comes, `deadline` (ETIMEDOUT) or `interrupted` (EINTR). The
    /// caller checked the buffer holds `mq_msgsize` bytes.
    ///
    /// # Errors
    /// EAGAIN, ETIMEDOUT, EINTR.
    pub fn receive(
        &self,
        nonblock: bool,
        deadline: Option<SystemTime>,
        interrupted: impl Fn() -> bool,
    ) -> Result<(u32, Vec<u8>), Errno> {
        let mut s = self.lock();
        if let Some(m) = s.take() {
            // Room now: the first waiting sender's message goes in.
            if let Some(mut w) = s.senders.pop_front() {
                if let Some((prio, text)) = w.msg.take() {
                    s.insert(prio, text);
                }
            }
            s.touch();
            self.changed(&mut s);
            return Ok(m);
        }
        if nonblock {
            return Err(Errno::EAGAIN);
        }
        let id = s.next_waiter;
        s.next_waiter += 1;
        s.receivers.push_back(Waiter { id, msg: None });
        loop {
            s = self.wait(s, deadline);
            if let Some(pos) = s.receivers.iter().position(|w| w.id == id) {
                if interrupted() {
                    s.receivers.remove(pos);
                    return Err(Errno::EINTR);
                }
                if deadline.is_some_and(|d| SystemTime::now() >= d) {
                    s.receivers.remove(pos);
                    return Err(Errno::ETIMEDOUT);
                }
                continue;
            }
            // Served: a sender took the entry and left the message in `handed`.
            let m = s.handed.remove(&id);
            self.changed(&mut s);
            return m.ok_or(Errno::EINTR);
        }
    }

    /// mq_notify(2) by `who`: with `how`, registers it (EBUSY if another live process is
    /// registered; `alive` tells whether a process still exists); without, removes its
    /// registration if it has one. Returns the registration removed or replaced (a
    /// `SIGEV_THREAD` one is told, Linux's NOTIFY_REMOVED).
    ///
    /// # Errors
    /// EBUSY.
    pub fn notify(
        &self,
        who: i32,
        how: Option<Notify>,
        alive: impl Fn(i32) -> bool,
    ) -> Result<Option<Registration>, Errno> {
        let mut s = self.lock();
        let old = match how {
            None => {
                if s.notify.as_ref().is_none_or(|r| r.owner != who) {
                    return Ok(None);
                }
                s.notify.take()
            }
            Some(how) => {
                if s.notify.as_ref().is_some_and(|r| alive(r.owner)) {
                    return Err(Errno::EBUSY);
                }
                s.notify.replace(Registration { owner: who, how })
            }
        };
        s.times.ctime = now();
        s.times.atime = s.times.ctime;
        Ok(old)
    }

    /// A descriptor of the queue was closed by process `pid` (Linux's `mqueue_flush_file`):
    /// its registration goes, and is returned.
    pub fn flush(&self, pid: i32) -> Option<Registration> {
        let mut s = self.lock();
        if s.notify.as_ref().is_some_and(|r| r.owner == pid) {
            return s.notify.take();
        }
        None
    }

    /// The attributes mq_getsetattr reports (`mq_flags` left 0).
    pub fn attr(&self) -> MqAttr {
        MqAttr {
            maxmsg: self.maxmsg,
            msgsize: self.msgsize,
            curmsgs: self.lock().curmsgs as i64,
            ..MqAttr::default()
        }
    }

    /// What a read of the descriptor shows (Linux's `mqueue_read_file`): the bytes queued
    /// and the registration (its kind, signal and process).
    pub fn status_line(&self) -> Vec<u8> {
        let mut s = self.lock();
        let (notify, signo, pid) = match &s.notify {
            None => (0, 0, 0),
            Some(r) => match &r.how {
                Notify::Signal { signo, .. } => (SIGEV_SIGNAL, *signo, r.owner),
                h => (h.sigev_notify(), 0, r.owner),
            },
        };
        let t = now();
        s.times.atime = t;
        s.times.ctime = t;
        format!(
            "QSIZE:{:<10} NOTIFY:{:<5} SIGNO:{:<5} NOTIFY_PID:{:<6}\n",
            s.qsize, notify, signo, pid
        )
        .into_bytes()
    }

    /// What fstat shows: permission bits, owner, group, whether it still has its name, its
    /// inode number and times.
    pub fn file_status(&self) -> (u32, u32, u32, bool, u64, FileTimes) {
        let s = self.lock();
        (s.mode, s.uid, s.gid, s.linked, self.ino, s.times)
    }

    /// Whether `who` may open it with `access` (EACCES otherwise).
    fn check_open(&self, access: Access, who: &MqCaller) -> Result<(), Errno> {
        let s = self.lock();
        if who.may(s.mode, s.uid, s.gid, access.bits()) {
            Ok(())
        } else {
            Err(Errno::EACCES)
        }
    }

    /// Its state for a checkpoint. Waiters are not saved (parked tasks restart their calls),
    /// nor is a registration: only a process holding a descriptor has one, and a checkpoint
    /// refuses descriptors.
    fn image(&self, name: Option<Vec<u8>>) -> QueueImage {
        let s = self.lock();
        let mut messages = Vec::with_capacity(s.curmsgs);
        for (prio, list) in s.by_prio.iter().rev() {
            for text in list {
                messages.push((*prio, text.clone()));
            }
        }
        QueueImage {
            name,
            maxmsg: self.maxmsg,
            msgsize: self.msgsize,
            mode: s.mode,
            uid: s.uid,
            gid: s.gid,
            messages,
        }
    }
}

/// An open message queue description: the queue, the access mq_open gave, the readiness
/// its host eventfd carries, and the position of read(2) in the status line.
#[derive(Debug)]
pub struct MqFile {
    /// The queue.
    pub queue: Arc<MessageQueue>,
    /// What the description may do.
    pub access: Access,
    /// Kept for the queue to set (it holds it weakly).
    _readiness: Arc<Readiness>,
    /// Where the next read(2) of the status line starts.
    pos: Mutex<u64>,
}

impl MqFile {
    /// A description of `queue` with `access`, whose readiness `event` (a duplicate of the
    /// descriptor's host eventfd) follows the queue from now on.
    pub fn new(queue: Arc<MessageQueue>, access: Access, event: OwnedFd) -> MqFile {
        let readiness = Arc::new(Readiness::new(event));
        queue.watch(&readiness);
        MqFile {
            queue,
            access,
            _readiness: readiness,
            pos: Mutex::new(0),
        }
    }

    /// read(2) of up to `len` bytes of the status line at `offset` (pread) or at the
    /// description's position, which it then advances.
    ///
    /// # Errors
    /// EBADF without read access.
    pub fn read(&self, len: u64, offset: Option<i64>) -> Result<Vec<u8>, Errno> {
        if !self.access.read {
            return Err(Errno::EBADF);
        }
        let line = self.queue.status_line();
        let mut pos = lock(&self.pos);
        let at = offset.map_or(*pos, |o| o as u64);
        let start = usize::try_from(at).unwrap_or(usize::MAX).min(line.len());
        let end = start
            .saturating_add(usize::try_from(len).unwrap_or(usize::MAX))
            .min(line.len());
        if offset.is_none() {
            *pos += (end - start) as u64;
        }
        Ok(line[start..end].to_vec())
    }
}

/// Why a saved set of queues cannot be taken back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MqImportError {
    /// The namespace already holds queues.
    #[error("the POSIX message queue namespace is not empty")]
    NotEmpty,
    /// A queue Linux could not have made.
    #[error("POSIX message queue {0}: {1}")]
    BadQueue(String, &'static str),
}

#[derive(Debug, Default)]
struct Names {
    by_name: BTreeMap<Vec<u8>, Arc<MessageQueue>>,
}

/// The POSIX message queues of one sandbox (one IPC namespace's mqueue filesystem).
#[derive(Debug, Default)]
pub struct MqNamespace {
    names: Mutex<Names>,
    usage: Arc<Mutex<Usage>>,
}

/// Checks a queue name as Linux's lookup in the mqueue root does (the C library has taken
/// its leading `/`).
///
/// # Errors
/// ENOENT for an empty name, EACCES for `.`, `..` or a name with a `/`, ENAMETOOLONG past
/// [`NAME_MAX`].
pub fn check_name(name: &[u8]) -> Result<(), Errno> {
    if name.is_empty() {
        return Err(Errno::ENOENT);
    }
    if name == b"." || name == b".." || name.contains(&b'/') {
        return Err(Errno::EACCES);
    }
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

impl MqNamespace {
    /// The tunables.
    pub fn limits(&self) -> MqLimits {
        lock(&self.usage).limits
    }

    /// Changes the tunables (a write to `/proc/sys/fs/mqueue`).
    pub fn set_limits(&self, l: MqLimits) {
        lock(&self.usage).limits = l;
    }

    /// How many queues exist (named, or unlinked and still open).
    pub fn queue_count(&self) -> u64 {
        lock(&self.usage).queues
    }

    /// mq_open(2) by `who`: the queue named `name` (checked by [`check_name`]), made with
    /// `mode` (less the umask) and `attr` (or the defaults) when missing and `O_CREAT` asks.
    ///
    /// # Errors
    /// As [`check_name`]; ENOENT (missing, no `O_CREAT`), EEXIST (`O_CREAT | O_EXCL` on an
    /// existing one), EINVAL (`O_WRONLY | O_RDWR`; attributes out of range), EACCES (no
    /// permission for the access asked), ENOSPC (`queues_max` queues), EOVERFLOW, EMFILE
    /// (past the user's `RLIMIT_MSGQUEUE`).
    pub fn open(
        &self,
        name: &[u8],
        oflag: i32,
        mode: u32,
        attr: Option<MqAttr>,
        who: &MqCaller,
    ) -> Result<Arc<MessageQueue>, Errno> {
        check_name(name)?;
        let mut names = lock(&self.names);
        if let Some(q) = names.by_name.get(name) {
            if oflag & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL {
                return Err(Errno::EEXIST);
            }
            let access = Access::of(oflag)?;
            q.check_open(access, who)?;
            return Ok(q.clone());
        }
        if oflag & libc::O_CREAT == 0 {
            return Err(Errno::ENOENT);
        }
        let q = Arc::new(self.create(mode & !who.umask & 0o7777, attr, who)?);
        names.by_name.insert(name.to_vec(), q.clone());
        Ok(q)
    }

    /// Makes a queue (Linux's `mqueue_create_attr` and `mqueue_get_inode`).
    fn create(
        &self,
        mode: u32,
        attr: Option<MqAttr>,
        who: &MqCaller,
    ) -> Result<MessageQueue, Errno> {
        let mut u = lock(&self.usage);
        let l = u.limits;
        if u.queues >= l.queues_max && !who.sys_resource {
            return Err(Errno::ENOSPC);
        }
        let (maxmsg, msgsize) = match attr {
            Some(a) => (a.maxmsg, a.msgsize),
            None => (
                l.msg_max.min(l.msg_default),
                l.msgsize_max.min(l.msgsize_default),
            ),
        };
        if maxmsg <= 0 || msgsize <= 0 {
            return Err(Errno::EINVAL);
        }
        let (most_msgs, largest) = if who.sys_resource {
            (HARD_MSGMAX, HARD_MSGSIZEMAX)
        } else {
            (l.msg_max, l.msgsize_max)
        };
        if maxmsg > most_msgs || msgsize > largest {
            return Err(Errno::EINVAL);
        }
        let bytes = cost(maxmsg, msgsize).ok_or(Errno::EOVERFLOW)?;
        let charged = u.charged.get(&who.fsuid).copied().unwrap_or(0);
        match charged.checked_add(bytes) {
            Some(total) if total <= who.msgqueue_limit => {}
            _ => return Err(Errno::EMFILE),
        }
        *u.charged.entry(who.fsuid).or_insert(0) += bytes;
        u.queues += 1;
        let mut state = QueueState {
            mode,
            uid: who.fsuid,
            gid: who.fsgid,
            linked: true,
            ..QueueState::default()
        };
        state.touch();
        Ok(MessageQueue {
            state: Mutex::new(state),
            changed: Condvar::new(),
            maxmsg,
            msgsize,
            ino: NEXT_INO.fetch_add(1, Ordering::Relaxed),
            charge: (who.fsuid, bytes),
            usage: self.usage.clone(),
        })
    }

    /// mq_unlink(2) by `who`: removes the name; the queue lives on while a descriptor holds
    /// it. Only its owner (or CAP_FOWNER) may.
    ///
    /// # Errors
    /// As [`check_name`]; ENOENT, EACCES.
    pub fn unlink(&self, name: &[u8], who: &MqCaller) -> Result<(), Errno> {
        check_name(name)?;
        let mut names = lock(&self.names);
        let q = names.by_name.get(name).ok_or(Errno::ENOENT)?;
        {
            let mut s = q.lock();
            // Linux answers EACCES (not the sticky directory's EPERM) for another's queue.
            if who.fsuid != s.uid && !who.fowner {
                return Err(Errno::EACCES);
            }
            s.linked = false;
            s.times.ctime = now();
        }
        let gone = names.by_name.remove(name);
        drop(names);
        drop(gone);
        Ok(())
    }

    /// The named queues, for a checkpoint.
    pub fn export(&self) -> Vec<QueueImage> {
        lock(&self.names)
            .by_name
            .iter()
            .map(|(n, q)| q.image(Some(n.clone())))
            .collect()
    }

    /// Takes back the named queues of a checkpoint into this empty namespace, as their
    /// owners made them (charged to the owner; the limits are not checked again, a
    /// privileged creator may have passed them), checking what Linux could not have made.
    ///
    /// # Errors
    /// [`MqImportError`]; the namespace is left empty.
    pub fn import(&self, images: Vec<QueueImage>) -> Result<(), MqImportError> {
        let mut names = lock(&self.names);
        if !names.by_name.is_empty() {
            return Err(MqImportError::NotEmpty);
        }
        let mut made = BTreeMap::new();
        for im in images {
            let label = String::from_utf8_lossy(im.name.as_deref().unwrap_or(b"?")).into_owned();
            let bad = |why| Err(MqImportError::BadQueue(label.clone(), why));
            let Some(name) = im.name else {
                return bad("no name");
            };
            if check_name(&name).is_err() || made.contains_key(&name) {
                return bad("a name Linux could not have given, or given twice");
            }
            if !(1..=HARD_MSGMAX).contains(&im.maxmsg)
                || !(1..=HARD_MSGSIZEMAX).contains(&im.msgsize)
            {
                return bad("attributes out of range");
            }
            if im.mode > 0o7777 || im.messages.len() > im.maxmsg as usize {
                return bad("a mode beyond 07777 or more messages than mq_maxmsg");
            }
            if im
                .messages
                .iter()
                .any(|(p, t)| *p >= MQ_PRIO_MAX || t.len() as u64 > im.msgsize as u64)
            {
                return bad("a message of a priority or size the queue refuses");
            }
            if im.messages.windows(2).any(|w| w[0].0 < w[1].0) {
                return bad("messages out of priority order");
            }
            let who = MqCaller {
                fsuid: im.uid,
                fsgid: im.gid,
                sys_resource: true,
                msgqueue_limit: u64::MAX,
                ..MqCaller::default()
            };
            let attr = MqAttr {
                maxmsg: im.maxmsg,
                msgsize: im.msgsize,
                ..MqAttr::default()
            };
            let q = match self.create(im.mode, Some(attr), &who) {
                Ok(q) => q,
                Err(_) => return bad("it cannot be made"),
            };
            {
                let mut s = q.lock();
                for (prio, text) in im.messages {
                    s.insert(prio, text);
                }
            }
            made.insert(name, Arc::new(q));
        }
        names.by_name = made;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
