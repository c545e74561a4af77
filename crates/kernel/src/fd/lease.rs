//! File leases (fcntl `F_SETLEASE`, `F_GETLEASE`), as Linux's `fs/locks.c` keeps them for
//! the sandbox's own opens.
//!
//! A lease belongs to an open file description of a regular file: a read lease, granted
//! while nobody has the file open for writing, or a write lease, granted while the holder's
//! description is the file's only one. An open by the sandbox that conflicts with one (any
//! open for writing or truncating; an open for reading against a write lease) breaks it: the
//! holder's owner is sent its signal (`SIGIO`, or the `F_SETSIG` one with `POLL_MSG` and the
//! lease's descriptor, [`super::owner::send`]), `F_GETLEASE` answers the type it must come
//! down to, and the opener waits until the holder has come down (or removed the lease), or
//! for the lease break time (45 s, Linux's `/proc/sys/fs/lease-break-time` default), after
//! which the lease is taken down for it; an opener with `O_NONBLOCK` gets EWOULDBLOCK at
//! once. Opens from outside the sandbox (another host process) are not seen, nor is
//! truncate(2) of a leased file (which breaks a lease on Linux).
//!
//! A lease goes when its open file description does (held here by a weak reference). A
//! checkpoint saves each description's lease type ([`saved`]) and restores it; a break in
//! progress is not saved: the opener's interrupted open runs again after the restore and
//! breaks it again.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use abi::Errno;

use super::locks::{regular_file_key, FileKey};
use super::{owner, OpenFile};
use crate::task::Task;

/// How long a lease holder has to come down before the lease is broken for the opener.
const BREAK_TIME: Duration = Duration::from_secs(45);
/// How often a waiting opener looks again.
const POLL: Duration = Duration::from_millis(5);
const RD: i16 = libc::F_RDLCK as i16;
const WR: i16 = libc::F_WRLCK as i16;
const UN: i16 = libc::F_UNLCK as i16;

struct Lease {
    key: FileKey,
    file: Weak<OpenFile>,
    /// The descriptor it was taken through (the siginfo's `si_fd`).
    fd: i32,
    kind: i16,
    /// Being broken: the type it must come down to and when it is taken down.
    breaking: Option<(i16, Instant)>,
}

impl Lease {
    fn of(&self, f: &Arc<OpenFile>) -> bool {
        std::ptr::eq(self.file.as_ptr(), Arc::as_ptr(f))
    }
}

static LEASES: Mutex<Vec<Lease>> = Mutex::new(Vec::new());
/// Whether any lease is held (opens skip the list otherwise).
static ANY: AtomicBool = AtomicBool::new(false);

fn leases() -> std::sync::MutexGuard<'static, Vec<Lease>> {
    let mut l = LEASES.lock().unwrap_or_else(|e| e.into_inner());
    l.retain(|x| x.file.strong_count() > 0);
    l
}

fn publish(l: &[Lease]) {
    ANY.store(!l.is_empty(), Ordering::Relaxed);
}

/// `F_GETLEASE`: the lease `f` holds (the type it must come down to while it is broken), or
/// `F_UNLCK`.
pub fn get(f: &Arc<OpenFile>) -> i32 {
    leases()
        .iter()
        .find(|l| l.of(f))
        .map_or(libc::F_UNLCK, |l| {
            i32::from(l.breaking.map_or(l.kind, |(target, _)| target))
        })
}

/// `F_SETLEASE` `arg` on `f` through descriptor `fd`.
///
/// # Errors
/// EACCES when the caller does not own the file (without CAP_LEASE); EINVAL for a file that
/// is not a regular file or an unknown type; EAGAIN for a lease that conflicts with the
/// file's opens or others' leases, or an `F_UNLCK` without a lease.
pub fn set(t: &mut Task, fd: i32, f: &Arc<OpenFile>, arg: i32) -> Result<(), Errno> {
    let st = crate::net::host::fstat(f.host())?;
    if st.st_uid != t.creds.fsuid && !t.creds.capable(CAP_LEASE) {
        return Err(Errno::EACCES);
    }
    let key = match regular_file_key(f.host()) {
        Some(k) => k,
        None => return Err(Errno::EINVAL),
    };
    let kind = match arg {
        libc::F_UNLCK => UN,
        libc::F_RDLCK => RD,
        libc::F_WRLCK => WR,
        _ => return Err(Errno::EINVAL),
    };
    if kind == UN {
        let mut l = leases();
        let before = l.len();
        l.retain(|x| !x.of(f));
        let removed = l.len() != before;
        publish(&l);
        return if removed { Ok(()) } else { Err(Errno::EAGAIN) };
    }
    conflicting_open(t, key, f, kind)?;
    let mut l = leases();
    for x in l.iter().filter(|x| x.key == key && !x.of(f)) {
        // No write lease beside another's lease; no new lease while one is being broken
        // for a writer.
        if kind == WR || x.breaking.is_some_and(|(target, _)| target == UN) {
            return Err(Errno::EAGAIN);
        }
    }
    match l.iter_mut().find(|x| x.of(f)) {
        Some(mine) => {
            mine.kind = kind;
            mine.fd = fd;
            // Coming down far enough ends a break.
            if mine.breaking.is_some_and(|(target, _)| kind == target) {
                mine.breaking = None;
            }
        }
        None => l.push(Lease {
            key,
            file: Arc::downgrade(f),
            fd,
            kind,
            breaking: None,
        }),
    }
    publish(&l);
    drop(l);
    // The lease's holder is told of breaks: its process owns the file from now on.
    owner::own_by_caller(t, f);
    Ok(())
}

/// CAP_LEASE.
const CAP_LEASE: u32 = 28;

/// Linux's `check_conflicting_open`: a read lease needs the file open for writing nowhere
/// (not even through `f`); a write lease needs `f` to be its only open description. The
/// sandbox's descriptor tables are what is seen.
fn conflicting_open(t: &Task, key: FileKey, f: &Arc<OpenFile>, kind: i16) -> Result<(), Errno> {
    for file in open_descriptions(t, key) {
        let access = super::host::status_flags(file.host())
            .map_or(libc::O_RDONLY, |fl| fl & libc::O_ACCMODE);
        let conflict = if kind == RD {
            access != libc::O_RDONLY
        } else {
            !Arc::ptr_eq(&file, f)
        };
        if conflict {
            return Err(Errno::EAGAIN);
        }
    }
    Ok(())
}

/// Every open file description of file `key` in the sandbox's descriptor tables, once.
fn open_descriptions(t: &Task, key: FileKey) -> Vec<Arc<OpenFile>> {
    let mut tables = vec![t.fds.clone()];
    for (_, g) in t.group.procs.live_groups() {
        if let Some(r) = g.resources() {
            if !tables.iter().any(|x| Arc::ptr_eq(x, &r.fds)) {
                tables.push(r.fds.clone());
            }
        }
    }
    let mut out: Vec<Arc<OpenFile>> = Vec::new();
    for table in tables {
        for (_, file) in table.iter() {
            if out.iter().any(|x| Arc::ptr_eq(x, &file)) {
                continue;
            }
            // O_PATH descriptors open nothing: the host answers F_GETFL for them, so they
            // are told apart by their flag.
            let path_only =
                super::host::status_flags(file.host()).is_ok_and(|fl| fl & libc::O_PATH != 0);
            if !path_only && regular_file_key(file.host()) == Some(key) {
                out.push(file);
            }
        }
    }
    out
}

/// Whether any lease is held in the runtime.
pub fn any() -> bool {
    ANY.load(Ordering::Relaxed)
}

/// An open of the file behind `file` with open flags `flags` by the sandbox: leases it
/// conflicts with are broken (Linux's `break_lease`), and the open waits for their holders.
///
/// # Errors
/// EWOULDBLOCK for an open with `O_NONBLOCK` that broke a lease; EINTR when a signal comes
/// while it waits.
pub fn break_on_open(t: &mut Task, file: BorrowedFd<'_>, flags: i32) -> Result<(), Errno> {
    if !any() {
        return Ok(());
    }
    let Some(key) = regular_file_key(file) else {
        return Ok(());
    };
    let want_write = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
    loop {
        let mut tell: Vec<(Arc<OpenFile>, i32)> = Vec::new();
        let mut conflicts = false;
        {
            let now = Instant::now();
            let mut l = leases();
            // Breaks whose time is up are done for their holders.
            for x in l.iter_mut() {
                if let Some((target, deadline)) = x.breaking {
                    if now >= deadline {
                        x.kind = target;
                        x.breaking = None;
                    }
                }
            }
            l.retain(|x| x.kind != UN);
            for x in l.iter_mut().filter(|x| x.key == key) {
                if !(want_write || x.kind == WR) {
                    continue;
                }
                conflicts = true;
                let target = if want_write { UN } else { RD };
                let newly = match x.breaking {
                    None => true,
                    Some((t0, _)) => t0 != UN && target == UN,
                };
                if newly {
                    x.breaking = Some((target, now + BREAK_TIME));
                    if let Some(file) = x.file.upgrade() {
                        tell.push((file, x.fd));
                    }
                }
            }
            publish(&l);
        }
        for (file, fd) in tell {
            owner::send(t, &file, fd, owner::POLL_MSG);
        }
        if !conflicts {
            return Ok(());
        }
        if flags & libc::O_NONBLOCK != 0 {
            return Err(Errno::EAGAIN);
        }
        if t.control.signal_pending() || t.control.park_requested() || t.signals.has_deliverable() {
            return Err(Errno::EINTR);
        }
        std::thread::sleep(POLL);
    }
}

/// The lease `f` holds, for a checkpoint (`F_RDLCK` or `F_WRLCK`; a break in progress is
/// not kept).
pub fn saved(f: &Arc<OpenFile>) -> Option<i16> {
    leases().iter().find(|l| l.of(f)).map(|l| l.kind)
}

/// Gives `f`, taken through descriptor `fd`, the lease a checkpoint saved.
///
/// # Errors
/// A description of what is wrong (a type that is no lease's, a file that is no regular
/// file).
pub fn restore(f: &Arc<OpenFile>, fd: i32, kind: i16) -> Result<(), String> {
    if kind != RD && kind != WR {
        return Err(format!("lease type {kind}"));
    }
    let key = regular_file_key(f.host()).ok_or("a lease on a file that is no regular file")?;
    let mut l = leases();
    l.retain(|x| !x.of(f));
    l.push(Lease {
        key,
        file: Arc::downgrade(f),
        fd,
        kind,
        breaking: None,
    });
    publish(&l);
    Ok(())
}
