//! Directory notification (fcntl `F_NOTIFY`, Linux's `fs/notify/dnotify`): a directory's
//! changes signal the owner of the descriptor that asked.
//!
//! The changes are the host's: every watched directory is a watch of one host inotify
//! instance (as inotify(7) instances are, `syscalls/sys_inotify.rs`), added through the
//! directory descriptor's `/proc/self/fd` link with the events the directory's requests ask
//! for. The host queues an event in the very call that changed the directory, so the
//! instance is read after every syscall while any request is in place ([`after_syscall`]):
//! the caller's own change signals it before its syscall returns, as on Linux. A change made
//! from outside the sandbox is seen after the sandbox's next syscall.
//!
//! Events map to `DN_*` as Linux's `convert_arg` maps them: `DN_CREATE` is a creation or a
//! move into the directory, `DN_DELETE` a deletion or a move out of it, `DN_RENAME` a move
//! within it (both halves of the rename at the same watch, with one cookie), `DN_ACCESS`,
//! `DN_MODIFY` and `DN_ATTRIB` the same inotify events (of an entry or of the directory
//! itself). The owner is sent `SIGIO`, or its `F_SETSIG` signal with `POLL_MSG` and the
//! descriptor ([`super::owner::send`]); without `DN_MULTISHOT` a request ends at its first
//! signal; a new request through the same file adds its events to the one in place, as
//! Linux's `attach_dn` does, and `F_NOTIFY` 0 ends it. A request belongs to the open file and the descriptor table that made it, and ends
//! when that table closes a descriptor of the file (Linux's `dnotify_flush`).
//!
//! A checkpoint saves each request (its file, descriptor, mask and the process whose table
//! made it, [`saved`]); a restore places them again ([`restore`]). Changes the host had
//! queued and not yet signalled are lost, as an inotify instance's queued events are.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use abi::Errno;

use super::locks::FileKey;
use super::{host, owner, FileKind, OpenFile};
use crate::task::Task;

const DN_ACCESS: u32 = 0x1;
const DN_MODIFY: u32 = 0x2;
const DN_CREATE: u32 = 0x4;
const DN_DELETE: u32 = 0x8;
const DN_RENAME: u32 = 0x10;
const DN_ATTRIB: u32 = 0x20;
const DN_MULTISHOT: u32 = 0x8000_0000;

/// One request: the file and the table (its address) that made it, the descriptor (the
/// siginfo's `si_fd`) and the `DN_*` mask.
struct Request {
    file: Weak<OpenFile>,
    table: usize,
    fd: i32,
    mask: u32,
}

/// A watched directory: its host watch and the requests on it.
struct Watch {
    wd: i32,
    key: FileKey,
    requests: Vec<Request>,
}

#[derive(Default)]
struct State {
    inotify: Option<OwnedFd>,
    watches: Vec<Watch>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);
/// Whether any request is in place (syscalls skip reading the instance otherwise).
static ACTIVE: AtomicBool = AtomicBool::new(false);

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let s = g.get_or_insert_with(State::default);
    let r = f(s);
    ACTIVE.store(!s.watches.is_empty(), Ordering::Relaxed);
    r
}

/// The host inotify events a `DN_*` mask needs.
fn inotify_mask(dn: u32) -> u32 {
    let mut m = 0;
    if dn & DN_ACCESS != 0 {
        m |= libc::IN_ACCESS;
    }
    if dn & DN_MODIFY != 0 {
        m |= libc::IN_MODIFY;
    }
    if dn & DN_CREATE != 0 {
        m |= libc::IN_CREATE | libc::IN_MOVED_TO;
    }
    if dn & DN_DELETE != 0 {
        m |= libc::IN_DELETE | libc::IN_MOVED_FROM;
    }
    if dn & DN_RENAME != 0 {
        m |= libc::IN_MOVED_FROM | libc::IN_MOVED_TO;
    }
    if dn & DN_ATTRIB != 0 {
        m |= libc::IN_ATTRIB;
    }
    m
}

/// The `DN_*` events one host event is; `rename` when it is the first half of a move within
/// the same directory.
fn dn_events(mask: u32, rename: bool) -> u32 {
    let mut d = 0;
    if mask & libc::IN_ACCESS != 0 {
        d |= DN_ACCESS;
    }
    if mask & libc::IN_MODIFY != 0 {
        d |= DN_MODIFY;
    }
    if mask & libc::IN_ATTRIB != 0 {
        d |= DN_ATTRIB;
    }
    if mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
        d |= DN_CREATE;
    }
    if mask & (libc::IN_DELETE | libc::IN_MOVED_FROM) != 0 {
        d |= DN_DELETE;
    }
    if rename {
        d |= DN_RENAME;
    }
    d
}

/// Points the host watch of `w` at what its requests ask (removed when none is left).
/// Returns false when the watch is gone.
fn rewatch(inotify: &OwnedFd, w: &mut Watch, dir: Option<&OpenFile>) -> bool {
    w.requests.retain(|r| r.file.strong_count() > 0);
    let mask = w.requests.iter().fold(0, |m, r| m | inotify_mask(r.mask));
    if mask == 0 {
        let _ = host::inotify_rm_watch(inotify.as_fd(), w.wd);
        return false;
    }
    let dir = dir.map(|d| (d.host().as_raw_fd(), None)).or_else(|| {
        w.requests
            .iter()
            .find_map(|r| r.file.upgrade())
            .map(|f| (f.host().as_raw_fd(), Some(f)))
    });
    if let Some((raw, _keep)) = dir {
        let path = crate::fs::host_fd_path(&raw);
        if let Ok(wd) = host::inotify_add_watch(inotify.as_fd(), &path, mask) {
            w.wd = wd;
        }
    }
    true
}

/// `F_NOTIFY` `arg` on directory `f` through descriptor `fd` of the caller's table.
///
/// # Errors
/// ENOTDIR for a file that is no directory; the host's errno placing the watch.
pub fn set(t: &Task, fd: i32, f: &Arc<OpenFile>, arg: u32) -> Result<(), Errno> {
    let table = Arc::as_ptr(&t.fds) as usize;
    if arg & !DN_MULTISHOT == 0 {
        forget(table, f);
        return Ok(());
    }
    if !matches!(f.kind, FileKind::Directory) {
        return Err(Errno::ENOTDIR);
    }
    add(table, fd, f, arg)?;
    // Linux's fcntl_dirnotify: the caller's process owns the file from now on.
    owner::own_by_caller(t, f);
    Ok(())
}

fn add(table: usize, fd: i32, f: &Arc<OpenFile>, arg: u32) -> Result<(), Errno> {
    let st = crate::net::host::fstat(f.host())?;
    let key = (st.st_dev, st.st_ino);
    with_state(|s| {
        if s.inotify.is_none() {
            s.inotify = Some(host::inotify_init(libc::IN_NONBLOCK)?);
        }
        let Some(inotify) = s.inotify.as_ref() else {
            return Err(Errno::ENOMEM);
        };
        let path = crate::fs::host_fd_path(&f.host().as_raw_fd());
        let at = match s.watches.iter().position(|w| w.key == key) {
            Some(i) => i,
            None => {
                let wd = host::inotify_add_watch(inotify.as_fd(), &path, inotify_mask(arg))?;
                s.watches.push(Watch {
                    wd,
                    key,
                    requests: Vec::new(),
                });
                s.watches.len() - 1
            }
        };
        let w = &mut s.watches[at];
        let same = |r: &Request| r.table == table && std::ptr::eq(r.file.as_ptr(), Arc::as_ptr(f));
        match w.requests.iter_mut().find(|r| same(r)) {
            // A second request through the same file adds its events (and keeps a
            // DN_MULTISHOT already asked for), as Linux's attach_dn.
            Some(r) => {
                r.mask |= arg;
                r.fd = fd;
            }
            None => w.requests.push(Request {
                file: Arc::downgrade(f),
                table,
                fd,
                mask: arg,
            }),
        }
        rewatch(inotify, w, Some(f));
        Ok(())
    })
}

/// Ends the requests table `table` made on `f` (it closed a descriptor of `f`, or asked
/// for none).
pub fn forget(table: usize, f: &OpenFile) {
    if !ACTIVE.load(Ordering::Relaxed) {
        return;
    }
    with_state(|s| {
        let Some(inotify) = s.inotify.as_ref() else {
            return;
        };
        s.watches.retain_mut(|w| {
            let before = w.requests.len();
            w.requests
                .retain(|r| !(r.table == table && std::ptr::eq(r.file.as_ptr(), f)));
            w.requests.len() == before || rewatch(inotify, w, None)
        });
    });
}

/// Reads the host's queued changes and signals the owners of the requests they match
/// (called after every syscall; nothing to do while no request is in place).
pub fn after_syscall(t: &mut Task) {
    if !ACTIVE.load(Ordering::Relaxed) {
        return;
    }
    let events = with_state(|s| s.inotify.as_ref().map(read_events).unwrap_or_default());
    if events.is_empty() {
        return;
    }
    let mut tell: Vec<(Arc<OpenFile>, i32)> = Vec::new();
    with_state(|s| {
        let Some(inotify) = s.inotify.as_ref() else {
            return;
        };
        let mut by_wd: HashMap<i32, usize> = HashMap::new();
        for (i, w) in s.watches.iter().enumerate() {
            by_wd.insert(w.wd, i);
        }
        let mut changed = vec![false; s.watches.len()];
        for (n, &(wd, mask, cookie)) in events.iter().enumerate() {
            let Some(&i) = by_wd.get(&wd) else {
                continue;
            };
            if mask & libc::IN_IGNORED != 0 {
                // The directory is gone: so are its requests.
                s.watches[i].requests.clear();
                changed[i] = true;
                continue;
            }
            let rename = mask & libc::IN_MOVED_FROM != 0
                && events[n + 1..]
                    .iter()
                    .any(|&(w2, m2, c2)| w2 == wd && c2 == cookie && m2 & libc::IN_MOVED_TO != 0);
            let dn = dn_events(mask, rename);
            let w = &mut s.watches[i];
            w.requests.retain(|r| {
                if r.mask & dn == 0 {
                    return true;
                }
                if let Some(f) = r.file.upgrade() {
                    tell.push((f, r.fd));
                }
                r.mask & DN_MULTISHOT != 0
            });
            changed[i] = true;
        }
        let mut i = 0;
        s.watches.retain_mut(|w| {
            let keep = !changed[i] || rewatch(inotify, w, None);
            i += 1;
            keep
        });
    });
    for (f, fd) in tell {
        owner::send(t, &f, fd, owner::POLL_MSG);
    }
}

/// The (watch descriptor, mask, cookie) of every event the host has queued.
fn read_events(inotify: &OwnedFd) -> Vec<(i32, u32, u32)> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: reading into a buffer of its length from a descriptor the state owns.
        let n = unsafe {
            libc::read(
                inotify.as_raw_fd(),
                buf.as_mut_ptr().cast::<libc::c_void>(),
                buf.len(),
            )
        };
        let Ok(n) = usize::try_from(n) else {
            return out;
        };
        if n == 0 {
            return out;
        }
        let mut at = 0;
        // struct inotify_event: wd, mask, cookie, len, then `len` bytes of name.
        while at + 16 <= n {
            let word = |o: usize| u32::from_le_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
            let (wd, mask, cookie, len) =
                (word(at) as i32, word(at + 4), word(at + 8), word(at + 12));
            out.push((wd, mask, cookie));
            at += 16 + len as usize;
        }
    }
}

/// The requests in place, for a checkpoint: (file, table, descriptor, mask) of each whose
/// file is still open.
pub fn saved() -> Vec<(Arc<OpenFile>, usize, i32, u32)> {
    if !ACTIVE.load(Ordering::Relaxed) {
        return Vec::new();
    }
    with_state(|s| {
        s.watches
            .iter()
            .flat_map(|w| &w.requests)
            .filter_map(|r| r.file.upgrade().map(|f| (f, r.table, r.fd, r.mask)))
            .collect()
    })
}

/// Places again a request a checkpoint saved: on directory `f`, descriptor `fd` of `table`.
///
/// # Errors
/// A description of what is wrong (a file that is no directory, the host refusing the
/// watch).
pub fn restore(table: usize, fd: i32, f: &Arc<OpenFile>, mask: u32) -> Result<(), String> {
    if !matches!(f.kind, FileKind::Directory) || mask & !DN_MULTISHOT == 0 {
        return Err(format!(
            "directory notification {mask:#x} on descriptor {fd}"
        ));
    }
    add(table, fd, f, mask).map_err(|e| format!("directory notification on {fd}: {e:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_map_as_linux_convert_arg() {
        assert_eq!(inotify_mask(DN_ATTRIB | DN_MULTISHOT), libc::IN_ATTRIB);
        assert_eq!(
            inotify_mask(DN_RENAME),
            libc::IN_MOVED_FROM | libc::IN_MOVED_TO
        );
        // A move out of the directory is a deletion, not a rename.
        assert_eq!(dn_events(libc::IN_MOVED_FROM, false), DN_DELETE);
        assert_eq!(dn_events(libc::IN_MOVED_FROM, true), DN_DELETE | DN_RENAME);
        assert_eq!(dn_events(libc::IN_MOVED_TO, false), DN_CREATE);
        assert_eq!(
            dn_events(libc::IN_ATTRIB | libc::IN_ISDIR, false),
            DN_ATTRIB
        );
    }
}
