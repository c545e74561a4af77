//! POSIX record locks (fcntl `F_SETLK`, `F_SETLKW`, `F_GETLK`) between the sandbox's own
//! processes.
//!
//! Every process of a sandbox is one host process, so a host POSIX lock would belong to all
//! of them: they would never exclude each other, and a close by any of them would release the
//! locks of all. Linux gives POSIX locks to a descriptor table (`fl_owner` is the
//! `files_struct`), and so does this module: each [`FdTable`](super::FdTable) keeps, per file
//! it has locked, a private open file description of that file (the descriptor opened again
//! through `/proc/self/fd`) and takes open-file-description locks (`F_OFD_*`) on it. The host
//! then makes them exclude each other, and exclude (and be excluded by) other host processes'
//! locks, with Linux's own range splitting and merging.
//!
//! What POSIX adds is done here:
//! - closing any descriptor of the file releases the table's locks on it
//!   ([`PosixLocks::forget`]); so do the table's end and a fork (a child's table starts with
//!   none);
//! - `SEEK_CUR` is the guest descriptor's offset, not the private one's (requests are made
//!   absolute first, [`absolute`]);
//! - `F_GETLK` names the process that holds a conflicting lock: the ranges each table holds
//!   are recorded ([`Ranges`]);
//! - `F_SETLKW` fails with EDEADLK instead of waiting when the wait would close a cycle of
//!   tables each waiting for a lock the next holds ([`PosixLocks::wait_for`], Linux's
//!   `posix_locks_deadlock`). The cycle is looked for through every table that holds a
//!   conflicting lock, not only the first Linux finds, so a deadlock is seen as soon as it
//!   exists (Linux may see it only once an unrelated holder lets go). Locks of host
//!   processes outside the sandbox are in no cycle.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};

use abi::Errno;

/// A file's identity: (device, inode).
pub type FileKey = (u64, u64);

/// A lock's absolute range: its first byte and its length (0: to the end of any file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// First byte.
    pub start: i64,
    /// Length; 0 means "to infinity".
    pub len: i64,
}

impl Span {
    /// One past the last byte (`i64::MAX` for a lock to infinity).
    fn end(self) -> i64 {
        if self.len == 0 {
            i64::MAX
        } else {
            self.start.saturating_add(self.len)
        }
    }

    fn overlaps(self, o: Span) -> bool {
        self.start < o.end() && o.start < self.end()
    }

    fn from_bounds(start: i64, end: i64) -> Span {
        Span {
            start,
            len: if end == i64::MAX { 0 } else { end - start },
        }
    }
}

/// A request's range made absolute: `whence` (`SEEK_SET`, `SEEK_CUR`, `SEEK_END`) resolved
/// with the descriptor's offset `cur` and the file's `size`, a negative length turned into the
/// bytes before the start (as POSIX allows).
///
/// # Errors
/// EINVAL for an unknown `whence`, a range starting before byte 0, or an overflow.
pub fn absolute(whence: i16, start: i64, len: i64, cur: i64, size: i64) -> Result<Span, Errno> {
    let base = match i32::from(whence) {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => cur,
        libc::SEEK_END => size,
        _ => return Err(Errno::EINVAL),
    };
    let mut s = base.checked_add(start).ok_or(Errno::EOVERFLOW)?;
    let mut l = len;
    if l < 0 {
        s = s.checked_add(l).ok_or(Errno::EINVAL)?;
        l = l.checked_neg().ok_or(Errno::EINVAL)?;
    }
    if s < 0 {
        return Err(Errno::EINVAL);
    }
    Ok(Span { start: s, len: l })
}

/// The ranges one table holds on one file, with their types (`F_RDLCK`, `F_WRLCK`): a
/// request replaces whatever it covers, as a POSIX lock of the same owner does.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Ranges(Vec<(Span, i16)>);

impl Ranges {
    /// Applies a granted request: `kind` over `span` (`F_UNLCK` removes it).
    pub fn apply(&mut self, span: Span, kind: i16) {
        let mut kept = Vec::with_capacity(self.0.len() + 2);
        for &(s, k) in &self.0 {
            if !s.overlaps(span) {
                kept.push((s, k));
                continue;
            }
            if s.start < span.start {
                kept.push((Span::from_bounds(s.start, span.start), k));
            }
            if s.end() > span.end() {
                kept.push((Span::from_bounds(span.end(), s.end()), k));
            }
        }
        if kind != libc::F_UNLCK as i16 {
            kept.push((span, kind));
        }
        self.0 = kept;
    }

    /// Whether a held range overlaps `span` and conflicts with a lock of type `kind` (a write
    /// lock conflicts with any, a read lock only with a write lock).
    pub fn conflicts(&self, span: Span, kind: i16) -> bool {
        self.0.iter().any(|&(s, k)| {
            s.overlaps(span) && (kind == libc::F_WRLCK as i16 || k == libc::F_WRLCK as i16)
        })
    }

    /// Whether a held range of type `kind` overlaps `span` (the lock `F_GETLK` reported).
    pub fn holds(&self, span: Span, kind: i16) -> bool {
        self.0.iter().any(|&(s, k)| k == kind && s.overlaps(span))
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One table's locks on one file: the private open file description they are taken on, and
/// the ranges held.
#[derive(Debug)]
pub struct FileLocks {
    ofd: OwnedFd,
    /// The process that took them (the table's owner), for `F_GETLK`.
    pub pid: i32,
    ranges: Mutex<Ranges>,
}

impl FileLocks {
    /// The private open file description.
    pub fn ofd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.ofd.as_fd()
    }

    /// Whether a held range of type `kind` overlaps `span`.
    pub fn holds(&self, span: Span, kind: i16) -> bool {
        self.ranges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .holds(span, kind)
    }

    /// Whether a held range conflicts with a request of type `kind` over `span`.
    pub fn conflicts(&self, span: Span, kind: i16) -> bool {
        self.ranges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .conflicts(span, kind)
    }

    /// Records a granted request.
    pub fn apply(&self, span: Span, kind: i16) {
        self.ranges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .apply(span, kind);
    }
}

/// A descriptor table's POSIX locks, by file.
#[derive(Debug, Default)]
pub struct PosixLocks {
    files: Mutex<HashMap<FileKey, Arc<FileLocks>>>,
    /// The request an `F_SETLKW` of the table waits on: file, range and type.
    waiting: Mutex<Option<(FileKey, Span, i16)>>,
}

/// Makes looking for a cycle and recording a wait one step, so that two requests closing a
/// cycle together cannot both miss it.
static WAITS: Mutex<()> = Mutex::new(());

/// Linux's bound on the chain of waiters followed (`MAX_DEADLK_ITERATIONS`).
const MAX_CHAIN: usize = 10;

/// A table's recorded `F_SETLKW` wait; it ends when this is dropped.
#[derive(Debug)]
pub struct Waiting<'a>(&'a PosixLocks);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        *self.0.waiting.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

impl PosixLocks {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<FileKey, Arc<FileLocks>>> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The table's locks on `key`, if it took any.
    pub fn get(&self, key: FileKey) -> Option<Arc<FileLocks>> {
        self.lock().get(&key).cloned()
    }

    /// The table's locks on the file behind `fd` (`key`), made on first use with a private
    /// open file description of it, read-write where the host allows, else with `access`.
    ///
    /// # Errors
    /// The host's errno from opening the file again.
    pub fn get_or_open(
        &self,
        key: FileKey,
        fd: BorrowedFd<'_>,
        access: i32,
        pid: i32,
    ) -> Result<Arc<FileLocks>, Errno> {
        if let Some(l) = self.get(key) {
            return Ok(l);
        }
        let raw = fd.as_raw_fd();
        let ofd = crate::fs::reopen(&raw, libc::O_RDWR | libc::O_NOCTTY)
            .or_else(|_| crate::fs::reopen(&raw, access | libc::O_NOCTTY))?;
        let l = Arc::new(FileLocks {
            ofd,
            pid,
            ranges: Mutex::new(Ranges::default()),
        });
        Ok(self.lock().entry(key).or_insert(l).clone())
    }

    /// Releases the table's locks on `key` (a descriptor of the file was closed): the
    /// private description closes once no request is using it.
    pub fn forget(&self, key: FileKey) {
        let gone = self.lock().remove(&key);
        drop(gone);
    }

    /// Whether the table holds no lock.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Whether the table holds a lock on `key` that conflicts with `kind` over `span`.
    fn blocks(&self, key: FileKey, span: Span, kind: i16) -> bool {
        self.get(key).is_some_and(|l| l.conflicts(span, kind))
    }

    /// Records that the table is about to wait (`F_SETLKW`) for `kind` over `span` of `key`,
    /// unless that would deadlock: some table of `others` (the sandbox's other tables) that
    /// holds a conflicting lock waits, directly or through a chain of waiters, for a lock
    /// this table holds.
    ///
    /// # Errors
    /// EDEADLK for a wait that would never end.
    pub fn wait_for<'a>(
        &'a self,
        others: &[&PosixLocks],
        key: FileKey,
        span: Span,
        kind: i16,
    ) -> Result<Waiting<'a>, Errno> {
        let _serial = WAITS.lock().unwrap_or_else(|e| e.into_inner());
        // Tables (by index in `others`) whose locks the request waits for, then whose locks
        // those wait for, and so on.
        let mut seen = vec![false; others.len()];
        let mut frontier: Vec<usize> = (0..others.len())
            .filter(|&i| others[i].blocks(key, span, kind))
            .collect();
        for _ in 0..MAX_CHAIN {
            let mut next = Vec::new();
            for i in frontier {
                if std::mem::replace(&mut seen[i], true) {
                    continue;
                }
                let Some((k, s, t)) = *others[i].waiting.lock().unwrap_or_else(|e| e.into_inner())
                else {
                    continue;
                };
                if self.blocks(k, s, t) {
                    return Err(Errno(libc::EDEADLK));
                }
                next.extend(
                    (0..others.len()).filter(|&j| j != i && !seen[j] && others[j].blocks(k, s, t)),
                );
            }
            if next.is_empty() {
                break;
            }
            frontier = next;
        }
        *self.waiting.lock().unwrap_or_else(|e| e.into_inner()) = Some((key, span, kind));
        Ok(Waiting(self))
    }
}

/// The (device, inode) of a host descriptor, if it is a regular file (the only files POSIX
/// locks are kept per table for; others keep the host's own locks).
pub fn regular_file_key(fd: BorrowedFd<'_>) -> Option<FileKey> {
    // SAFETY: a zeroed stat is a valid output buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on a valid descriptor into a valid buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    (st.st_mode & libc::S_IFMT == libc::S_IFREG).then_some((st.st_dev, st.st_ino))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RD: i16 = libc::F_RDLCK as i16;
    const WR: i16 = libc::F_WRLCK as i16;
    const UN: i16 = libc::F_UNLCK as i16;

    fn span(start: i64, len: i64) -> Span {
        Span { start, len }
    }

    #[test]
    fn requests_become_absolute() {
        let set = libc::SEEK_SET as i16;
        let cur = libc::SEEK_CUR as i16;
        let end = libc::SEEK_END as i16;
        assert_eq!(absolute(set, 10, 5, 100, 1000), Ok(span(10, 5)));
        assert_eq!(absolute(cur, 10, 5, 100, 1000), Ok(span(110, 5)));
        assert_eq!(absolute(end, -10, 0, 100, 1000), Ok(span(990, 0)));
        // A negative length covers the bytes before the start.
        assert_eq!(absolute(set, 10, -4, 0, 0), Ok(span(6, 4)));
        assert_eq!(absolute(set, 2, -4, 0, 0), Err(Errno::EINVAL));
        assert_eq!(absolute(set, -1, 1, 0, 0), Err(Errno::EINVAL));
        assert_eq!(absolute(7, 0, 0, 0, 0), Err(Errno::EINVAL));
        assert_eq!(absolute(cur, i64::MAX, 1, 1, 0), Err(Errno::EOVERFLOW));
    }

    #[test]
    fn ranges_split_and_replace_like_one_owner_s_locks() {
        let mut r = Ranges::default();
        r.apply(span(0, 0), WR);
        // Unlocking the middle leaves both ends.
        r.apply(span(10, 10), UN);
        assert!(r.conflicts(span(0, 10), RD));
        assert!(!r.conflicts(span(10, 10), WR));
        assert!(r.conflicts(span(20, 1), RD));
        assert!(r.conflicts(span(1 << 40, 1), RD));
        // A read lock over a written range downgrades it: only writers conflict there.
        r.apply(span(0, 10), RD);
        assert!(!r.conflicts(span(0, 10), RD));
        assert!(r.conflicts(span(5, 1), WR));
        // F_GETLK's owner: who holds a lock of the reported type there.
        assert!(r.holds(span(9, 0), RD));
        assert!(!r.holds(span(0, 10), WR));
        assert!(r.holds(span(20, 1), WR));
        r.apply(span(0, 0), UN);
        assert!(r.is_empty());
    }

    #[test]
    fn spans_to_infinity_overlap_everything_after_them() {
        assert!(span(5, 0).overlaps(span(1 << 50, 1)));
        assert!(!span(5, 0).overlaps(span(0, 5)));
        assert!(span(0, 6).overlaps(span(5, 0)));
    }
}
