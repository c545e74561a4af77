//! POSIX message queues: mq_open(2), mq_unlink(2), mq_timedsend(2), mq_timedreceive(2),
//! mq_notify(2), mq_getsetattr(2), over the sandbox's queues
//! ([`crate::ipc::mqueue::MqNamespace`]). The handlers copy names, messages, `struct mq_attr`,
//! `struct sigevent` and timeouts in and out, in the order Linux checks them, and post a
//! notification signal a send fired; the queues apply Linux's rules.
//!
//! A descriptor is a host eventfd carrying the queue's readiness (so poll, select and epoll
//! see it), of kind [`FileKind::Mqueue`]; read(2) of it gives the status line of Linux's
//! mqueue filesystem, fstat(2) the queue file's mode, owner and times.
//!
//! `SIGEV_THREAD` notification is the C library's: it passes the kernel a netlink socket,
//! which its notification thread reads, and a cookie for the kernel to send there when a
//! message comes (or the registration goes). The host's netlink socket takes no datagram
//! from the holder (that needs CAP_NET_ADMIN), so at the first such registration the
//! socket's host descriptor is replaced in place by one end of a datagram socket pair whose
//! other end torpor keeps ([`notification_channel`]): the thread's `recv` then reads the
//! cookies torpor sends. The arguments are checked first as Linux checks them (EFAULT for
//! the cookie, EBADF, ENOTSOCK, EINVAL for a socket of another family).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use abi::mqueue::{MqAttr, MQ_PRIO_MAX, NOTIFY_COOKIE_LEN, SI_MESGQ};
use abi::structs::Timespec;
use abi::timer::{Sigevent, SIGEV_NONE, SIGEV_SIGNAL, SIGEV_THREAD};
use abi::Errno;
use platform::Gva;

use super::{SysResult, SyscallArgs};
use crate::creds::cap;
use crate::fd::{host, FileKind, OpenFile};
use crate::ipc::mqueue::{Access, Fired, MqCaller, MqFile, Notify};
use crate::task::{SigInfo, Task};

/// The caller as the queue checks see it.
fn caller(t: &Task) -> MqCaller {
    let c = &t.creds;
    let limit = t
        .group
        .rlimits
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(libc::RLIMIT_MSGQUEUE)
        .map_or(u64::MAX, |l| l.cur);
    MqCaller {
        pid: t.pid,
        uid: c.uid,
        fsuid: c.fsuid,
        fsgid: c.fsgid,
        groups: c.groups.clone(),
        umask: t.umask(),
        dac_override: c.capable(cap::DAC_OVERRIDE),
        dac_read_search: c.capable(cap::DAC_READ_SEARCH),
        fowner: c.capable(cap::FOWNER),
        sys_resource: c.capable(cap::SYS_RESOURCE),
        msgqueue_limit: limit,
    }
}

/// Whether a blocked send or receive must return (EINTR): a signal, a park (the call is
/// then restarted once the task is unparked), the process ending.
fn interruption(t: &Task) -> impl Fn() -> bool {
    let control = t.control.clone();
    let group = t.group.clone();
    let tid = t.tid;
    move || control.park_requested() || control.signal_pending() || group.must_leave(tid)
}

/// The open file at `fd` and its queue description (EBADF for another kind of file).
fn mq_file(t: &Task, fd: i32) -> Result<(Arc<OpenFile>, Arc<MqFile>), Errno> {
    let f = t.fds.get(fd)?;
    let FileKind::Mqueue(m) = &f.kind else {
        return Err(Errno::EBADF);
    };
    let m = m.clone();
    Ok((f, m))
}

/// Whether the description is in non-blocking mode (its host eventfd carries O_NONBLOCK, as
/// fcntl(2) and mq_getsetattr set it).
fn nonblocking(f: &OpenFile) -> bool {
    host::status_flags(f.host()).is_ok_and(|fl| fl & libc::O_NONBLOCK != 0)
}

/// The absolute `CLOCK_REALTIME` timeout at `at` (NULL: none), checked as Linux's
/// `prepare_timeout`.
fn deadline(t: &Task, at: Gva) -> Result<Option<SystemTime>, Errno> {
    if at.raw() == 0 {
        return Ok(None);
    }
    let ts: Timespec = t.read_val(at)?;
    let since_epoch: Duration = ts.to_duration()?;
    Ok(Some(
        SystemTime::UNIX_EPOCH
            .checked_add(since_epoch)
            .unwrap_or(SystemTime::UNIX_EPOCH + Duration::from_secs(i64::MAX as u64 / 2)),
    ))
}

/// Implements mq_open(2). The name is the C library's without its leading `/`. As on
/// Linux, the attributes are read whenever given, the descriptor is always close-on-exec,
/// and a full descriptor table is EMFILE before the queue is looked up.
pub fn sys_mq_open(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (oflag, mode) = (a.int(1), a.u(2) as u32);
    let attr = if a.u(3) != 0 {
        Some(t.read_val::<MqAttr>(a.gva(3))?)
    } else {
        None
    };
    let name = t.copy_in_path(a.gva(0))?;
    if !t.fds.has_room() {
        return Err(Errno::EMFILE);
    }
    let ns = t.group.procs.posix_mq.clone();
    let queue = ns.open(&name, oflag, mode & 0o7777, attr, &caller(t))?;
    let access = Access::of(oflag)?;
    let mut efd_flags = libc::EFD_CLOEXEC;
    if oflag & libc::O_NONBLOCK != 0 {
        efd_flags |= libc::EFD_NONBLOCK;
    }
    let event = host::eventfd(0, efd_flags)?;
    let dup = event.try_clone().map_err(Errno::from)?;
    let file = MqFile::new(queue, access, dup);
    let mut path = b"/".to_vec();
    path.extend_from_slice(&name);
    let open = OpenFile::new(event, FileKind::Mqueue(Arc::new(file)), Some(path));
    Ok(t.fds.insert(Arc::new(open), true)? as u64)
}

/// Implements mq_unlink(2).
pub fn sys_mq_unlink(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let name = t.copy_in_path(a.gva(0))?;
    t.group.procs.posix_mq.unlink(&name, &caller(t))?;
    Ok(0)
}

/// Implements mq_timedsend(2): the timeout is checked first (EFAULT, EINVAL), then the
/// priority (EINVAL), the descriptor (EBADF, also without write access), the length
/// (EMSGSIZE) and the text copied in (EFAULT). A timeout already past fails only if the
/// queue is full.
pub fn sys_mq_timedsend(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (fd, text_at, len, prio) = (a.int(0), a.gva(1), a.u(2), a.u(3) as u32);
    let deadline = deadline(t, a.gva(4))?;
    if prio >= MQ_PRIO_MAX {
        return Err(Errno::EINVAL);
    }
    let (f, m) = mq_file(t, fd)?;
    if !m.access.write {
        return Err(Errno::EBADF);
    }
    let (_, msgsize) = m.queue.limits();
    if len > msgsize as u64 {
        return Err(Errno::EMSGSIZE);
    }
    // At most mq_msgsize (16 MiB with CAP_SYS_RESOURCE).
    let mut text = vec![0u8; len as usize];
    t.copy_in(text_at, &mut text)?;
    let who = caller(t);
    let fired = m
        .queue
        .send(prio, text, nonblocking(&f), deadline, &who, interruption(t))?;
    if let Some(fired) = fired {
        post_notification(t, fired);
    }
    Ok(0)
}

/// Sends the notification signal a send fired: `SI_MESGQ`, the sender's pid and real uid,
/// the registration's `si_value`. It goes to the registered process whatever the sender
/// may signal, as on Linux; a process gone meanwhile gets nothing.
fn post_notification(t: &mut Task, fired: Fired) {
    if let Some((cookie, to)) = &fired.thread {
        send_cookie(*cookie, &to.0, NOTIFY_WOKENUP);
        return;
    }
    let mut info = SigInfo::user(fired.signo, SI_MESGQ, fired.pid, fired.uid);
    info.0[abi::timer::SI_VALUE..abi::timer::SI_VALUE + 8]
        .copy_from_slice(&fired.value.to_le_bytes());
    if fired.owner == t.pid {
        t.queue_signal(info);
    } else if let Some(g) = t.group.procs.group_of(fired.owner) {
        g.post_siginfo(info);
    }
}

/// Implements mq_timedreceive(2): the timeout is checked first, then the descriptor (EBADF,
/// also without read access) and the buffer's length (EMSGSIZE below `mq_msgsize`). The
/// priority is written, then the text; a message taken is gone even if they fail
/// (EFAULT), as on Linux. Returns the text's length.
pub fn sys_mq_timedreceive(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (fd, buf, len, prio_at) = (a.int(0), a.gva(1), a.u(2), a.gva(3));
    let deadline = deadline(t, a.gva(4))?;
    let (f, m) = mq_file(t, fd)?;
    if !m.access.read {
        return Err(Errno::EBADF);
    }
    let (_, msgsize) = m.queue.limits();
    if len < msgsize as u64 {
        return Err(Errno::EMSGSIZE);
    }
    let (prio, text) = m
        .queue
        .receive(nonblocking(&f), deadline, interruption(t))?;
    if prio_at.raw() != 0 {
        t.copy_out(prio_at, &prio.to_le_bytes())?;
    }
    t.copy_out(buf, &text)?;
    Ok(text.len() as u64)
}

/// Implements mq_notify(2): registers the caller's process for `SIGEV_SIGNAL` (a signal up
/// to 64; 0 registers without a signal) or `SIGEV_NONE`, or with NULL removes its
/// registration. `SIGEV_THREAD`: see the module's documentation.
pub fn sys_mq_notify(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let fd = a.int(0);
    let how = if a.u(1) != 0 {
        let ev: Sigevent = t.read_val(a.gva(1))?;
        Some(match ev.notify {
            SIGEV_NONE => Notify::Nothing,
            SIGEV_SIGNAL if (0..=crate::task::NSIG as i32).contains(&ev.signo) => Notify::Signal {
                signo: ev.signo,
                value: ev.value,
            },
            SIGEV_THREAD => return thread_notification(t, fd, &ev),
            _ => return Err(Errno::EINVAL),
        })
    } else {
        None
    };
    register(t, fd, how)
}

/// Registers (or with `None` removes) the caller's notification on queue `fd`; a
/// `SIGEV_THREAD` registration removed or replaced is told (NOTIFY_REMOVED).
fn register(t: &Task, fd: i32, how: Option<Notify>) -> SysResult {
    let (_, m) = mq_file(t, fd)?;
    let procs = t.group.procs.clone();
    let old = m
        .queue
        .notify(t.pid, how, |pid| procs.group_of(pid).is_some())?;
    tell_removed(old);
    Ok(0)
}

/// The last byte of a `SIGEV_THREAD` cookie: why it is sent (Linux's NOTIFY_WOKENUP and
/// NOTIFY_REMOVED).
const NOTIFY_WOKENUP: u8 = 1;
const NOTIFY_REMOVED: u8 = 2;

/// Sends a `SIGEV_THREAD` registration's cookie, its last byte set to `why`. A full or
/// closed socket loses it, as Linux's `netlink_sendskb` would.
fn send_cookie(mut cookie: [u8; NOTIFY_COOKIE_LEN], to: &std::os::fd::OwnedFd, why: u8) {
    cookie[NOTIFY_COOKIE_LEN - 1] = why;
    if let Err(e) = host::send_datagram(std::os::fd::AsFd::as_fd(to), &cookie) {
        tracing::debug!("mq_notify: the notification cookie was not sent: {e:?}");
    }
}

/// Tells a `SIGEV_THREAD` registration that went that it did.
fn tell_removed(old: Option<crate::ipc::mqueue::Registration>) {
    if let Some(crate::ipc::mqueue::Registration {
        how: Notify::Thread { cookie, to },
        ..
    }) = old
    {
        send_cookie(cookie, &to.0, NOTIFY_REMOVED);
    }
}

/// A `SIGEV_THREAD` registration: the cookie and the netlink socket checked as Linux
/// checks them, then the cookie registered, to be sent through the socket's channel.
fn thread_notification(t: &Task, fd: i32, ev: &Sigevent) -> SysResult {
    let mut cookie = [0u8; NOTIFY_COOKIE_LEN];
    t.copy_in(Gva(ev.value), &mut cookie)?;
    let sock = t.fds.get(ev.signo)?;
    let Some(state) = sock.socket_state() else {
        return Err(Errno::ENOTSOCK);
    };
    if state.family != libc::AF_NETLINK {
        return Err(Errno::EINVAL);
    }
    mq_file(t, fd)?;
    let to = notification_channel(t, &sock)?;
    register(
        t,
        fd,
        Some(Notify::Thread {
            cookie,
            to: crate::ipc::mqueue::Channel(to),
        }),
    )
}

/// The sending end of the channel behind netlink socket `sock`, made at its first
/// `SIGEV_THREAD` registration (see the module's documentation): the socket's host
/// descriptor becomes one end of a new datagram pair. The process's threads are kicked, so
/// that a `recv` already blocked on the old socket restarts on the new one.
fn notification_channel(
    t: &Task,
    sock: &Arc<OpenFile>,
) -> Result<Arc<std::os::fd::OwnedFd>, Errno> {
    let channels = &t.group.procs.mq_channels;
    let mut list = channels.lock().unwrap_or_else(|e| e.into_inner());
    list.retain(|(f, _)| f.strong_count() > 0);
    if let Some((_, to)) = list
        .iter()
        .find(|(f, _)| f.upgrade().is_some_and(|f| Arc::ptr_eq(&f, sock)))
    {
        return Ok(to.clone());
    }
    let (ours, theirs) = host::datagram_pair()?;
    host::replace_descriptor(&ours, sock.host())?;
    drop(ours);
    let to = Arc::new(theirs);
    list.push((Arc::downgrade(sock), to.clone()));
    drop(list);
    t.group.kick_all();
    Ok(to)
}

/// Implements mq_getsetattr(2): `mq_flags` may only hold O_NONBLOCK (EINVAL), which sets
/// the description's mode; the old attributes are those before the change.
pub fn sys_mq_getsetattr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (fd, new_at, old_at) = (a.int(0), a.gva(1), a.gva(2));
    let new = if new_at.raw() != 0 {
        let n: MqAttr = t.read_val(new_at)?;
        if n.flags & !i64::from(libc::O_NONBLOCK) != 0 {
            return Err(Errno::EINVAL);
        }
        Some(n)
    } else {
        None
    };
    let (f, m) = mq_file(t, fd)?;
    let mut old = m.queue.attr();
    if nonblocking(&f) {
        old.flags = i64::from(libc::O_NONBLOCK);
    }
    if let Some(n) = new {
        host::set_nonblocking(f.host(), n.flags != 0)?;
    }
    if old_at.raw() != 0 {
        t.write_val(old_at, &old)?;
    }
    Ok(0)
}

/// A descriptor of `file` was closed by the caller's process: a queue's registration of the
/// process goes (Linux's `mqueue_flush_file`).
pub fn closed(t: &Task, file: &OpenFile) {
    if let FileKind::Mqueue(m) = &file.kind {
        tell_removed(m.queue.flush(t.pid));
    }
}

/// `struct stat` of a queue descriptor, as Linux's mqueue filesystem shows its file: a
/// regular file of 80 bytes with the queue's mode, owner and times.
pub fn stat(m: &MqFile) -> libc::stat {
    let (mode, uid, gid, linked, ino, times) = m.queue.file_status();
    let mut st = host::empty_stat();
    st.st_mode = libc::S_IFREG | mode;
    st.st_uid = uid;
    st.st_gid = gid;
    st.st_nlink = u64::from(linked);
    st.st_ino = ino;
    st.st_size = crate::ipc::mqueue::FILE_SIZE;
    st.st_blksize = 4096;
    st.st_atime = times.atime.0;
    st.st_atime_nsec = i64::from(times.atime.1);
    st.st_mtime = times.mtime.0;
    st.st_mtime_nsec = i64::from(times.mtime.1);
    st.st_ctime = times.ctime.0;
    st.st_ctime_nsec = i64::from(times.ctime.1);
    st
}
