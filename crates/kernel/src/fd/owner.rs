//! Signal-driven I/O: the owner of an open file (fcntl `F_SETOWN`, `F_SETOWN_EX`), the signal
//! it is sent (`F_SETSIG`), and the sending (Linux's `fs/fcntl.c`: `send_sigio`).
//!
//! An open file description has one owner: a thread, a process or a process group of the
//! sandbox, with the credentials of whoever set it (a signal reaches a target those may
//! signal, as Linux's `sigio_perm`). Who sends: leases being broken
//! ([`super::lease`]), directory notifications ([`super::dnotify`]) and pipes with
//! `O_ASYNC` ([`wrote`], [`read`]: the sandbox's own writes and reads of a pipe signal the
//! other end's owners, `POLL_IN` and `POLL_OUT`). Other readiness (sockets, terminals, a pipe
//! written from outside the sandbox) sends nothing: the host's descriptors keep no owner.
//!
//! A checkpoint saves the owner and the signal of each open file ([`SigIo::saved`]); a
//! pipe's `O_ASYNC` is its status flags, saved with them, and registers again at restore.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, Weak};

use abi::Errno;

use super::locks::FileKey;
use super::OpenFile;
use crate::task::{SigInfo, Task};

/// `F_OWNER_TID`, `F_OWNER_PID`, `F_OWNER_PGRP`: what an owner's id names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerKind {
    /// One thread.
    Tid,
    /// A process (any of its threads).
    Pid,
    /// Every process of a process group.
    Pgrp,
}

impl OwnerKind {
    /// `f_owner_ex.type`.
    pub fn code(self) -> i32 {
        match self {
            OwnerKind::Tid => 0,
            OwnerKind::Pid => 1,
            OwnerKind::Pgrp => 2,
        }
    }

    /// The kind `f_owner_ex.type` names.
    pub fn from_code(c: i32) -> Option<OwnerKind> {
        Some(match c {
            0 => OwnerKind::Tid,
            1 => OwnerKind::Pid,
            2 => OwnerKind::Pgrp,
            _ => return None,
        })
    }
}

/// An open file's owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// What `id` names.
    pub kind: OwnerKind,
    /// Thread, process or process group id (positive).
    pub id: i32,
    /// Real uid of whoever set it.
    pub uid: u32,
    /// Effective uid of whoever set it.
    pub euid: u32,
}

/// An open file's signal-driven I/O state.
#[derive(Debug, Default)]
pub struct SigIo {
    owner: Mutex<Option<Owner>>,
    sig: AtomicI32,
}

impl SigIo {
    /// The owner, if any.
    pub fn owner(&self) -> Option<Owner> {
        *self.owner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets (or, `None`, clears) the owner.
    pub fn set_owner(&self, o: Option<Owner>) {
        *self.owner.lock().unwrap_or_else(|e| e.into_inner()) = o;
    }

    /// The signal `F_SETSIG` chose (0: SIGIO without siginfo).
    pub fn sig(&self) -> i32 {
        self.sig.load(Ordering::Relaxed)
    }

    /// Sets the signal.
    pub fn set_sig(&self, sig: i32) {
        self.sig.store(sig, Ordering::Relaxed);
    }

    /// What a checkpoint saves: owner (kind code, id, uid, euid) and signal, `None` when
    /// neither was set.
    pub fn saved(&self) -> Option<(Option<[i64; 4]>, i32)> {
        let o = self.owner();
        let sig = self.sig();
        if o.is_none() && sig == 0 {
            return None;
        }
        let o = o.map(|o| {
            [
                i64::from(o.kind.code()),
                i64::from(o.id),
                i64::from(o.uid),
                i64::from(o.euid),
            ]
        });
        Some((o, sig))
    }

    /// Restores what [`saved`](Self::saved) gave (read from a checkpoint: checked).
    ///
    /// # Errors
    /// A description of what is wrong.
    pub fn restore(&self, owner: Option<[i64; 4]>, sig: i32) -> Result<(), String> {
        if !(0..=64).contains(&sig) {
            return Err(format!("signal-driven I/O signal {sig}"));
        }
        let owner = match owner {
            None => None,
            Some([k, id, uid, euid]) => {
                let kind = i32::try_from(k)
                    .ok()
                    .and_then(OwnerKind::from_code)
                    .ok_or_else(|| format!("file owner type {k}"))?;
                let bad = || format!("file owner {id}");
                Some(Owner {
                    kind,
                    id: i32::try_from(id).ok().filter(|i| *i > 0).ok_or_else(bad)?,
                    uid: u32::try_from(uid).map_err(|_| bad())?,
                    euid: u32::try_from(euid).map_err(|_| bad())?,
                })
            }
        };
        self.set_owner(owner);
        self.set_sig(sig);
        Ok(())
    }
}

/// `F_GETOWN`: a process or thread id, a process group's negated.
pub fn get_own(f: &OpenFile) -> i32 {
    match f.sigio.owner() {
        None => 0,
        Some(o) if o.kind == OwnerKind::Pgrp => -o.id,
        Some(o) => o.id,
    }
}

/// `F_SETOWN`: `who` > 0 a process, < 0 a process group, 0 none.
///
/// # Errors
/// EINVAL for `i32::MIN`; ESRCH when no process or group has that id.
pub fn set_own(t: &Task, f: &OpenFile, who: i32) -> Result<(), Errno> {
    if who == i32::MIN {
        return Err(Errno::EINVAL);
    }
    let kind = if who < 0 {
        OwnerKind::Pgrp
    } else {
        OwnerKind::Pid
    };
    set(t, f, kind, who.abs())
}

/// `F_SETOWN_EX` from the guest's `struct f_owner_ex` (type, pid).
///
/// # Errors
/// EINVAL for an unknown type or a negative id; ESRCH when it names nobody.
pub fn set_own_ex(t: &Task, f: &OpenFile, raw: [u8; 8]) -> Result<(), Errno> {
    let kind = i32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
    let id = i32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]);
    let kind = OwnerKind::from_code(kind).ok_or(Errno::EINVAL)?;
    if id < 0 {
        return Err(Errno::EINVAL);
    }
    set(t, f, kind, id)
}

/// `F_GETOWN_EX`'s `struct f_owner_ex`.
pub fn get_own_ex(f: &OpenFile) -> [u8; 8] {
    let (kind, id) = f
        .sigio
        .owner()
        .map_or((OwnerKind::Tid.code(), 0), |o| (o.kind.code(), o.id));
    let mut out = [0u8; 8];
    out[0..4].copy_from_slice(&kind.to_le_bytes());
    out[4..8].copy_from_slice(&id.to_le_bytes());
    out
}

/// Makes the caller's process the owner (what setting a lease or a directory notification
/// does, as Linux's `__f_setown(filp, task_pid(current), PIDTYPE_TGID)`).
pub fn own_by_caller(t: &Task, f: &OpenFile) {
    f.sigio.set_owner(Some(Owner {
        kind: OwnerKind::Pid,
        id: t.pid,
        uid: t.creds.uid,
        euid: t.creds.euid,
    }));
}

fn set(t: &Task, f: &OpenFile, kind: OwnerKind, id: i32) -> Result<(), Errno> {
    if id == 0 {
        f.sigio.set_owner(None);
        return Ok(());
    }
    let procs = &t.group.procs;
    // Linux looks the number up as any pid (find_vpid): a thread's id names its process
    // for F_SETOWN too.
    let exists = match kind {
        OwnerKind::Pgrp => !procs.group_members(id).is_empty() || procs.group_of(id).is_some(),
        _ => {
            id == t.pid
                || id == t.tid
                || procs.group_of(id).is_some()
                || procs.live_groups().iter().any(|(_, g)| g.has_thread(id))
        }
    };
    if !exists {
        return Err(Errno::ESRCH);
    }
    f.sigio.set_owner(Some(Owner {
        kind,
        id,
        uid: t.creds.uid,
        euid: t.creds.euid,
    }));
    Ok(())
}

/// `POLL_IN`.
pub const POLL_IN: i32 = 1;
/// `POLL_OUT`.
pub const POLL_OUT: i32 = 2;
/// `POLL_MSG`.
pub const POLL_MSG: i32 = 3;

/// si_band for each `POLL_*` reason (Linux's `band_table`).
fn band(reason: i32) -> i64 {
    match reason {
        POLL_IN => 0x1 | 0x40,
        POLL_OUT => 0x4 | 0x100 | 0x200,
        POLL_MSG => 0x1 | 0x40 | 0x400,
        4 => 0x8,
        5 => 0x2 | 0x80,
        6 => 0x10 | 0x8,
        _ => !0,
    }
}

/// The siginfo signal-driven I/O sends: SIGIO from the kernel when no signal was chosen,
/// else the chosen one with the reason, band and descriptor (si_code `SI_SIGIO` for the
/// signals that have codes of their own).
fn siginfo(sig: i32, fd: i32, reason: i32) -> SigInfo {
    if sig == 0 {
        return SigInfo::kernel(libc::SIGIO);
    }
    const SI_SIGIO: i32 = -5;
    let specific = [
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGTRAP,
        libc::SIGCHLD,
        libc::SIGSYS,
    ];
    let code = if specific.contains(&sig) {
        SI_SIGIO
    } else {
        reason
    };
    let mut s = SigInfo([0; 128]);
    s.0[0..4].copy_from_slice(&sig.to_le_bytes());
    s.0[8..12].copy_from_slice(&code.to_le_bytes());
    s.0[16..24].copy_from_slice(&band(reason).to_le_bytes());
    s.0[24..28].copy_from_slice(&fd.to_le_bytes());
    s
}

/// Whether the owner's setter may signal a process with these credentials (Linux's
/// `sigio_perm`: its effective uid is root's, or either of its uids is the target's real or
/// saved one).
fn may_signal(o: &Owner, c: &crate::task::Credentials) -> bool {
    o.euid == 0 || [o.uid, o.euid].iter().any(|u| *u == c.uid || *u == c.suid)
}

/// Sends `f`'s owner its signal for event `reason` on descriptor `fd` (Linux's
/// `send_sigio`); nothing when it has no owner. `t` is the task the event happens in: a
/// signal to its own process is queued on it, to be delivered as its syscall returns.
pub fn send(t: &mut Task, f: &OpenFile, fd: i32, reason: i32) {
    let Some(o) = f.sigio.owner() else {
        return;
    };
    let info = siginfo(f.sigio.sig(), fd, reason);
    let sig = info.signo();
    let procs = t.group.procs.clone();
    match o.kind {
        OwnerKind::Tid => {
            if o.id == t.tid {
                if may_signal(&o, &t.creds) {
                    t.queue_signal(info);
                }
                return;
            }
            let mut groups = procs.live_groups();
            groups.push((t.pid, t.group.clone()));
            if let Some((_, g)) = groups.iter().find(|(_, g)| g.has_thread(o.id)) {
                if may_signal(&o, &g.identity().creds) {
                    g.signal_thread_info(o.id, sig, Some(info));
                }
            }
        }
        OwnerKind::Pid => to_process(t, &o, o.id, info),
        OwnerKind::Pgrp => {
            for (pid, _) in procs.group_members(o.id) {
                to_process(t, &o, pid, info);
            }
        }
    }
}

fn to_process(t: &mut Task, o: &Owner, pid: i32, info: SigInfo) {
    if pid == t.pid {
        if may_signal(o, &t.creds) {
            t.queue_signal(info);
        }
        return;
    }
    if let Some(g) = t.group.procs.group_of(pid) {
        if may_signal(o, &g.identity().creds) {
            g.post_siginfo(info);
        }
    }
}

/// A file registered for signal-driven I/O (`O_ASYNC` set on a pipe): the pipe, the end,
/// and the descriptor it was set through (the siginfo's `si_fd`, as Linux's `fa_fd`).
struct Async {
    key: FileKey,
    reads: bool,
    writes: bool,
    fd: i32,
    file: Weak<OpenFile>,
}

static ASYNC: Mutex<Vec<Async>> = Mutex::new(Vec::new());
/// Whether any file is registered (reads and writes skip the registry otherwise).
static ANY_ASYNC: AtomicBool = AtomicBool::new(false);

fn registry() -> std::sync::MutexGuard<'static, Vec<Async>> {
    ASYNC.lock().unwrap_or_else(|e| e.into_inner())
}

/// A pipe's identity, if `fd` is one (a pipe of pipe(2) or a FIFO).
fn pipe_key(fd: BorrowedFd<'_>) -> Option<FileKey> {
    let st = crate::net::host::fstat(fd).ok()?;
    (st.st_mode & libc::S_IFMT == libc::S_IFIFO).then_some((st.st_dev, st.st_ino))
}

/// `O_ASYNC` was set (`on`) or cleared on `f` through descriptor `fd` (F_SETFL, FIOASYNC):
/// a pipe's end is (un)registered. Other files keep the flag and send nothing.
pub fn set_async(f: &Arc<OpenFile>, fd: i32, on: bool) {
    let Some(key) = pipe_key(f.host()) else {
        return;
    };
    let mut r = registry();
    r.retain(|a| a.file.strong_count() > 0 && !std::ptr::eq(a.file.as_ptr(), Arc::as_ptr(f)));
    if on {
        let access = super::host::status_flags(f.host()).map_or(0, |fl| fl & libc::O_ACCMODE);
        r.push(Async {
            key,
            reads: access != libc::O_WRONLY,
            writes: access != libc::O_RDONLY,
            fd,
            file: Arc::downgrade(f),
        });
    }
    ANY_ASYNC.store(!r.is_empty(), Ordering::Relaxed);
}

/// The caller wrote to descriptor `fd`: if it is a pipe, the owners of its reading ends
/// with `O_ASYNC` are sent `POLL_IN`.
pub fn wrote(t: &mut Task, fd: i32) {
    io_done(t, fd, true);
}

/// The caller read from descriptor `fd`: if it is a pipe, the owners of its writing ends
/// with `O_ASYNC` are sent `POLL_OUT`.
pub fn read(t: &mut Task, fd: i32) {
    io_done(t, fd, false);
}

fn io_done(t: &mut Task, fd: i32, wrote: bool) {
    if !ANY_ASYNC.load(Ordering::Relaxed) {
        return;
    }
    let Ok(f) = t.fds.get(fd) else {
        return;
    };
    let Some(key) = pipe_key(f.host()) else {
        return;
    };
    let targets: Vec<(Arc<OpenFile>, i32)> = registry()
        .iter()
        .filter(|a| a.key == key && if wrote { a.reads } else { a.writes })
        .filter_map(|a| a.file.upgrade().map(|f| (f, a.fd)))
        .collect();
    for (file, afd) in targets {
        let still = super::host::status_flags(file.host()).is_ok_and(|fl| fl & libc::O_ASYNC != 0);
        if still {
            send(t, &file, afd, if wrote { POLL_IN } else { POLL_OUT });
        }
    }
}

/// Registers again, after a restore, the pipe ends whose status flags have `O_ASYNC`, by
/// the lowest descriptor of `fds` that holds each.
pub fn restored(fds: &super::FdTable) {
    for (fd, f) in fds.iter() {
        let on = super::host::status_flags(f.host()).is_ok_and(|fl| fl & libc::O_ASYNC != 0);
        if on
            && !registry()
                .iter()
                .any(|a| std::ptr::eq(a.file.as_ptr(), Arc::as_ptr(&f)))
        {
            set_async(&f, fd, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siginfo_carries_reason_band_and_fd() {
        let s = siginfo(libc::SIGUSR1, 7, POLL_IN);
        assert_eq!(s.signo(), libc::SIGUSR1);
        assert_eq!(s.code(), POLL_IN);
        assert_eq!(i64::from_le_bytes(s.0[16..24].try_into().unwrap()), 0x41);
        assert_eq!(i32::from_le_bytes(s.0[24..28].try_into().unwrap()), 7);
        // No signal chosen: plain SIGIO from the kernel.
        let s = siginfo(0, 7, POLL_IN);
        assert_eq!(s.signo(), libc::SIGIO);
        assert_eq!(s.code(), 0x80);
        // A signal with codes of its own gets SI_SIGIO.
        assert_eq!(siginfo(libc::SIGCHLD, 7, POLL_MSG).code(), -5);
    }

    #[test]
    fn saved_owner_comes_back() {
        let a = SigIo::default();
        assert_eq!(a.saved(), None);
        a.set_owner(Some(Owner {
            kind: OwnerKind::Pgrp,
            id: 12,
            uid: 1000,
            euid: 0,
        }));
        a.set_sig(libc::SIGRTMIN() + 1);
        let (o, s) = a.saved().unwrap();
        let b = SigIo::default();
        b.restore(o, s).unwrap();
        assert_eq!(b.owner(), a.owner());
        assert_eq!(b.sig(), a.sig());
        assert!(b.restore(Some([7, 1, 0, 0]), 0).is_err());
        assert!(b.restore(Some([0, -1, 0, 0]), 0).is_err());
        assert!(b.restore(None, 65).is_err());
    }
}
