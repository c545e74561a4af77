//! The descriptor table: guest fd numbers to open files, with close-on-exec flags.

use std::sync::Arc;

use abi::Errno;

use super::locks::{regular_file_key, PosixLocks};
use super::OpenFile;

/// Most descriptors a process may hold (RLIMIT_NOFILE).
pub const MAX_FDS: usize = 4096;

#[derive(Debug, Clone)]
struct Slot {
    file: Arc<OpenFile>,
    cloexec: bool,
}

/// A process's file descriptor table (Linux's `struct files_struct`), shared by the threads of
/// a thread group behind `Arc`; its own mutex is held only inside each method.
#[derive(Debug)]
pub struct FdTable {
    slots: std::sync::Mutex<Vec<Option<Slot>>>,
    /// Descriptors at or above this are refused (RLIMIT_NOFILE, at most [`MAX_FDS`]).
    limit: std::sync::atomic::AtomicUsize,
    /// The POSIX record locks this table holds (Linux gives them to the `files_struct`):
    /// released when a descriptor of their file closes, never inherited by a fork.
    pub locks: PosixLocks,
}

impl Default for FdTable {
    fn default() -> FdTable {
        FdTable {
            slots: std::sync::Mutex::new(Vec::new()),
            limit: std::sync::atomic::AtomicUsize::new(MAX_FDS),
            locks: PosixLocks::default(),
        }
    }
}

impl FdTable {
    /// An empty table.
    pub fn new() -> FdTable {
        FdTable::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<Slot>>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The file at `fd`.
    ///
    /// # Errors
    /// EBADF if `fd` is not open.
    pub fn get(&self, fd: i32) -> Result<Arc<OpenFile>, Errno> {
        let slots = self.lock();
        usize::try_from(fd)
            .ok()
            .and_then(|i| slots.get(i))
            .and_then(|s| s.as_ref())
            .map(|s| s.file.clone())
            .ok_or(Errno::EBADF)
    }

    /// Sets the number of descriptors the process may hold (RLIMIT_NOFILE); descriptors
    /// already open above it stay open, as on Linux.
    pub fn set_limit(&self, n: usize) {
        self.limit
            .store(n.min(MAX_FDS), std::sync::atomic::Ordering::Relaxed);
    }

    /// The number of descriptors the process may hold.
    pub fn limit(&self) -> usize {
        self.max()
    }

    fn max(&self) -> usize {
        self.limit.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Installs `file` at the lowest free descriptor `>= min`.
    ///
    /// # Errors
    /// EMFILE when the table is full; EINVAL if `min` is out of range.
    pub fn insert_from(&self, min: i32, file: Arc<OpenFile>, cloexec: bool) -> Result<i32, Errno> {
        let min = usize::try_from(min).map_err(|_| Errno::EINVAL)?;
        let max = self.max();
        if min >= max {
            return Err(Errno::EINVAL);
        }
        let mut slots = self.lock();
        let idx = (min..max)
            .find(|&i| slots.get(i).is_none_or(|s| s.is_none()))
            .ok_or(Errno::EMFILE)?;
        if slots.len() <= idx {
            slots.resize(idx + 1, None);
        }
        slots[idx] = Some(Slot { file, cloexec });
        Ok(idx as i32)
    }

    /// Whether a descriptor is free below the limit (a call that makes an object before
    /// installing it checks first: EMFILE, as Linux's `get_unused_fd_flags`).
    pub fn has_room(&self) -> bool {
        let max = self.max();
        let slots = self.lock();
        (0..max).any(|i| slots.get(i).is_none_or(|s| s.is_none()))
    }

    /// Installs `file` at the lowest free descriptor.
    ///
    /// # Errors
    /// EMFILE when the table is full.
    pub fn insert(&self, file: Arc<OpenFile>, cloexec: bool) -> Result<i32, Errno> {
        self.insert_from(0, file, cloexec)
    }

    /// Installs `file` exactly at `fd`, closing what was there (dup2 semantics).
    ///
    /// # Errors
    /// EBADF if `fd` is out of range.
    pub fn insert_at(&self, fd: i32, file: Arc<OpenFile>, cloexec: bool) -> Result<(), Errno> {
        let max = self.max();
        let idx = usize::try_from(fd)
            .ok()
            .filter(|&i| i < max)
            .ok_or(Errno::EBADF)?;
        let old = {
            let mut slots = self.lock();
            if slots.len() <= idx {
                slots.resize(idx + 1, None);
            }
            slots[idx].replace(Slot { file, cloexec })
        };
        // The replaced file is released outside the lock.
        if let Some(old) = old {
            self.closed(&old.file);
        }
        Ok(())
    }

    /// Closes `fd`.
    ///
    /// # Errors
    /// EBADF if it is not open.
    pub fn remove(&self, fd: i32) -> Result<Arc<OpenFile>, Errno> {
        let mut slots = self.lock();
        let slot = usize::try_from(fd)
            .ok()
            .and_then(|i| slots.get_mut(i))
            .and_then(|s| s.take())
            .ok_or(Errno::EBADF)?;
        drop(slots);
        self.closed(&slot.file);
        Ok(slot.file)
    }

    /// A descriptor of `file` was closed: the table's POSIX locks on its file go, as on Linux
    /// (whichever descriptor took them).
    fn closed(&self, file: &OpenFile) {
        // Its directory notification requests end too (Linux's dnotify_flush).
        super::dnotify::forget(self as *const FdTable as usize, file);
        if self.locks.is_empty() {
            return;
        }
        if let Some(key) = regular_file_key(file.host()) {
            self.locks.forget(key);
        }
    }

    /// The close-on-exec flag of `fd`.
    ///
    /// # Errors
    /// EBADF if it is not open.
    pub fn cloexec(&self, fd: i32) -> Result<bool, Errno> {
        let slots = self.lock();
        usize::try_from(fd)
            .ok()
            .and_then(|i| slots.get(i))
            .and_then(|s| s.as_ref())
            .map(|s| s.cloexec)
            .ok_or(Errno::EBADF)
    }

    /// Sets the close-on-exec flag of `fd`.
    ///
    /// # Errors
    /// EBADF if it is not open.
    pub fn set_cloexec(&self, fd: i32, on: bool) -> Result<(), Errno> {
        let mut slots = self.lock();
        let slot = usize::try_from(fd)
            .ok()
            .and_then(|i| slots.get_mut(i))
            .and_then(|s| s.as_mut())
            .ok_or(Errno::EBADF)?;
        slot.cloexec = on;
        Ok(())
    }

    /// A copy for a forked process: the same descriptors, flags and open files (whose
    /// offsets and status flags the two processes then share, as on Linux).
    pub fn fork_copy(&self) -> FdTable {
        FdTable {
            slots: std::sync::Mutex::new(self.lock().clone()),
            limit: std::sync::atomic::AtomicUsize::new(self.max()),
            locks: PosixLocks::default(),
        }
    }

    /// Closes every close-on-exec descriptor (execve).
    pub fn close_on_exec(&self) {
        let closed: Vec<Slot> = {
            let mut slots = self.lock();
            slots
                .iter_mut()
                .filter(|s| s.as_ref().is_some_and(|s| s.cloexec))
                .filter_map(Option::take)
                .collect()
        };
        // The files close here, outside the table's lock.
        for s in &closed {
            self.closed(&s.file);
        }
        drop(closed);
    }

    /// The open descriptors and their files, in order (a snapshot).
    pub fn iter(&self) -> impl Iterator<Item = (i32, Arc<OpenFile>)> {
        let v: Vec<(i32, Arc<OpenFile>)> = self
            .lock()
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i as i32, s.file.clone())))
            .collect();
        v.into_iter()
    }

    /// Number of open descriptors.
    pub fn len(&self) -> usize {
        self.lock().iter().filter(|s| s.is_some()).count()
    }

    /// Whether no descriptor is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fd::FileKind;
    use std::os::fd::OwnedFd;

    fn file() -> Arc<OpenFile> {
        let f: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        Arc::new(OpenFile::new(f, FileKind::Regular, None))
    }

    #[test]
    fn lowest_free_and_dup2() {
        let t = FdTable::new();
        assert_eq!(t.insert(file(), false).unwrap(), 0);
        assert_eq!(t.insert(file(), true).unwrap(), 1);
        assert_eq!(t.insert(file(), false).unwrap(), 2);
        t.remove(1).unwrap();
        assert_eq!(t.insert(file(), false).unwrap(), 1);
        assert_eq!(t.insert_from(10, file(), false).unwrap(), 10);
        t.insert_at(5, file(), true).unwrap();
        assert!(t.cloexec(5).unwrap());
        assert_eq!(t.get(7).err(), Some(Errno::EBADF));
        assert_eq!(t.get(-1).err(), Some(Errno::EBADF));
        assert_eq!(t.remove(99).err(), Some(Errno::EBADF));
        assert_eq!(
            t.insert_at(MAX_FDS as i32, file(), false).err(),
            Some(Errno::EBADF)
        );
        assert_eq!(t.len(), 5);
    }
}
