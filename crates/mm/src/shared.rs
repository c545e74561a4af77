//! Memory shared between the processes of a sandbox: the objects behind `MAP_SHARED`
//! mappings (anonymous ones, files, POSIX shared memory in `/dev/shm`) and System V segments.
//!
//! Each process of a sandbox is its own VM, so sharing cannot come from one page table: a
//! [`SharedObject`] is host memory that every VM mapping it attaches as a
//! [`SharedWindow`](platform::SharedWindow) at the same guest-physical address. An object is
//! cut into [`WINDOW_SIZE`] windows made on first use, each with its own addresses from the
//! sandbox's [`SharedSpace`], so an object can grow (a file extended with `ftruncate`) without
//! moving what is mapped. Anonymous objects are `memfd`s of fixed size; file objects map the
//! host file itself, so the guest's stores and `read(2)`/`write(2)` see the same bytes, and
//! two `mmap`s of one file (by inode) share one object.
//!
//! Pages of shared objects are not the page allocator's: unmapping never frees them, fork
//! maps the same pages in the child, and the deflate of a hibernation leaves them resident.
//!
//! The same windows, read-only, back the clean pages of private file mappings (program
//! text, libraries): `pagecache.rs`.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, Weak};

use platform::{Gpa, SharedWindow, PAGE_SIZE, SHARED_GPA_BASE, SHARED_GPA_END};

/// Size of one window of a shared object (and the gap left between windows, so that two
/// windows never look contiguous in guest-physical memory).
pub const WINDOW_SIZE: u64 = 2 << 20;

/// The shared memory of one sandbox: guest-physical addresses for windows, and the file
/// objects by inode (so that every `mmap` of one file shares pages).
pub struct SharedSpace {
    next_gpa: Mutex<u64>,
    files: Mutex<HashMap<(u64, u64), Weak<SharedObject>>>,
    /// Read-only objects of files by inode, behind the clean pages of private file mappings
    /// (see `pagecache.rs`); kept for the sandbox's life, as the windows VMs attach are.
    pub(crate) readonly_files: Mutex<HashMap<(u64, u64), Arc<SharedObject>>>,
    /// Whether private file mappings share their clean pages through the page cache.
    pub(crate) share_files: std::sync::atomic::AtomicBool,
    /// The anonymous objects (their memory is the sandbox's own: hibernation swaps it).
    anonymous: Mutex<Vec<Weak<SharedObject>>>,
}

impl Default for SharedSpace {
    fn default() -> Self {
        SharedSpace {
            next_gpa: Mutex::default(),
            files: Mutex::default(),
            readonly_files: Mutex::default(),
            share_files: std::sync::atomic::AtomicBool::new(true),
            anonymous: Mutex::default(),
        }
    }
}

impl std::fmt::Debug for SharedSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSpace").finish_non_exhaustive()
    }
}

impl SharedSpace {
    /// An empty space.
    pub fn new() -> Arc<SharedSpace> {
        Arc::new(SharedSpace::default())
    }

    /// Guest-physical addresses for `len` bytes (plus a gap), or `ENOMEM` when the space is
    /// used up.
    fn take(&self, len: u64) -> io::Result<Gpa> {
        let mut next = self.next_gpa.lock().unwrap_or_else(|e| e.into_inner());
        let at = SHARED_GPA_BASE.raw() + *next;
        let end = at
            .checked_add(len + WINDOW_SIZE)
            .filter(|&e| e <= SHARED_GPA_END.raw())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        *next = end - SHARED_GPA_BASE.raw();
        Ok(Gpa(at))
    }

    /// The windows of every live anonymous object (memory only the sandbox holds, which a
    /// deflate writes out; file objects' pages are the files').
    pub fn anonymous_windows(&self) -> Vec<Arc<SharedWindow>> {
        let anon = self.anonymous.lock().unwrap_or_else(|e| e.into_inner());
        anon.iter()
            .filter_map(Weak::upgrade)
            .flat_map(|o| o.windows())
            .collect()
    }

    /// The windows of every live file object, `MAP_SHARED` ones and the read-only ones behind
    /// private file mappings (their pages are the files': a deflate can drop them from the
    /// runtime's mappings, and they come back from the page cache or the disk).
    pub fn file_windows(&self) -> Vec<Arc<SharedWindow>> {
        let mut out: Vec<Arc<SharedWindow>> = {
            let files = self.files.lock().unwrap_or_else(|e| e.into_inner());
            files
                .values()
                .filter_map(Weak::upgrade)
                .flat_map(|o| o.windows())
                .collect()
        };
        let readonly = self
            .readonly_files
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        out.extend(readonly.values().flat_map(|o| o.windows()));
        out
    }

    /// A new anonymous object of `len` bytes (rounded up to pages), zero-filled: what
    /// `mmap(MAP_SHARED | MAP_ANONYMOUS)` and `shmget` create.
    ///
    /// # Errors
    /// The host's errno (memfd, ftruncate); `ENOMEM` when no addresses are left.
    pub fn anonymous(self: &Arc<Self>, len: u64, name: &str) -> io::Result<Arc<SharedObject>> {
        let len = len
            .checked_next_multiple_of(PAGE_SIZE)
            .filter(|&l| l > 0)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let cname = std::ffi::CString::new(format!("torpor-shm-{name}"))
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a valid NUL-terminated name and flags; the result is checked.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate on a valid fd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let obj = Arc::new(SharedObject {
            space: self.clone(),
            file: Arc::new(fd),
            name: name.to_string(),
            writable: true,
            fixed_len: Some(len),
            windows: Mutex::new(HashMap::new()),
        });
        let mut anon = self.anonymous.lock().unwrap_or_else(|e| e.into_inner());
        anon.retain(|w| w.strong_count() > 0);
        anon.push(Arc::downgrade(&obj));
        Ok(obj)
    }

    /// The object of host file `file` (one per inode in the sandbox), for a `MAP_SHARED`
    /// mapping of it.
    ///
    /// # Errors
    /// The host's errno of fstat or dup.
    pub fn file(self: &Arc<Self>, file: &std::fs::File) -> io::Result<Arc<SharedObject>> {
        let meta = file.metadata()?;
        let key = (
            std::os::unix::fs::MetadataExt::dev(&meta),
            std::os::unix::fs::MetadataExt::ino(&meta),
        );
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(obj) = files.get(&key).and_then(Weak::upgrade) {
            return Ok(obj);
        }
        files.retain(|_, w| w.strong_count() > 0);
        // The object keeps its own descriptor, reopened read-write through /proc (the same
        // inode) so that the first mapper's read-only descriptor does not make every later
        // writable mapping fail; a file that cannot be written gives a read-only object.
        let reopened = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/self/fd/{}", file.as_raw_fd()));
        // (A runtime without the file capabilities may not reopen a file of another user: the
        // descriptor itself then serves, writable if it was opened so.)
        let (fd, writable) = match reopened {
            Ok(f) => (OwnedFd::from(f), true),
            Err(_) => {
                // SAFETY: F_GETFL on a valid fd.
                let fl = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
                let rw = fl >= 0 && fl & libc::O_ACCMODE == libc::O_RDWR;
                (OwnedFd::from(file.try_clone()?), rw)
            }
        };
        let obj = Arc::new(SharedObject::of_file(self.clone(), fd, writable));
        files.insert(key, Arc::downgrade(&obj));
        Ok(obj)
    }
}

impl SharedObject {
    /// A file object over `fd` (its size is the file's), with windows writable or not.
    pub(crate) fn of_file(space: Arc<SharedSpace>, fd: OwnedFd, writable: bool) -> SharedObject {
        SharedObject {
            space,
            file: Arc::new(fd),
            name: String::new(),
            writable,
            fixed_len: None,
            windows: Mutex::new(HashMap::new()),
        }
    }
}

/// Host memory shared by the processes that map it (see the module's doc).
pub struct SharedObject {
    space: Arc<SharedSpace>,
    file: Arc<OwnedFd>,
    /// What made an anonymous object (`anon`, `sysv`…), empty for a file.
    name: String,
    /// Whether its windows may be written (false for a file the runtime cannot write).
    writable: bool,
    /// The size of an anonymous object; `None` for a file (its size is the file's).
    fixed_len: Option<u64>,
    windows: Mutex<HashMap<u64, Arc<SharedWindow>>>,
}

impl std::fmt::Debug for SharedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedObject(fd {})", self.file.as_raw_fd())
    }
}

impl SharedObject {
    /// The host file (or memfd) holding the object's bytes.
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.file.as_fd()
    }

    /// The object's size now: fixed for an anonymous one, the file's for a file.
    ///
    /// # Errors
    /// The host's errno of fstat.
    pub fn size(&self) -> io::Result<u64> {
        if let Some(l) = self.fixed_len {
            return Ok(l);
        }
        // SAFETY: an all-zero stat is valid; fstat fills it from a valid fd.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd and a writable stat.
        if unsafe { libc::fstat(self.file.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st.st_size as u64)
    }

    /// Bytes of the object the host has allocated (its `st_blocks`): the pages written so
    /// far of an anonymous object.
    ///
    /// # Errors
    /// The host's errno of fstat.
    pub fn allocated(&self) -> io::Result<u64> {
        // SAFETY: an all-zero stat is valid; fstat fills it from a valid fd.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd and a writable stat.
        if unsafe { libc::fstat(self.file.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((st.st_blocks as u64).saturating_mul(512))
    }

    /// The object's bytes, `0..size` (an anonymous object's content, for a checkpoint).
    ///
    /// # Errors
    /// The host's errno of fstat or pread.
    pub fn read_all(&self) -> io::Result<Vec<u8>> {
        let len =
            usize::try_from(self.size()?).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        let mut buf = vec![0u8; len];
        std::os::unix::fs::FileExt::read_exact_at(&self.as_file()?, &mut buf, 0)?;
        Ok(buf)
    }

    /// Writes `bytes` at offset `at` of the object (a restore's), which must hold them.
    ///
    /// # Errors
    /// `EINVAL` past the object's end; the host's errno of pwrite.
    pub fn write_at(&self, bytes: &[u8], at: u64) -> io::Result<()> {
        let end = at.checked_add(bytes.len() as u64);
        if end.is_none_or(|e| e > self.size().unwrap_or(0)) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        std::os::unix::fs::FileExt::write_all_at(&self.as_file()?, bytes, at)
    }

    /// The object's descriptor as a `File` (a duplicate).
    fn as_file(&self) -> io::Result<std::fs::File> {
        Ok(std::fs::File::from(self.file.try_clone()?))
    }

    /// What made an anonymous object (the name given to [`SharedSpace::anonymous`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the object's pages may be mapped writable.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The device and inode of a file object, as `fstat` gives them (`/proc/PID/maps`
    /// shows them); `None` for anonymous memory or a failed `fstat`.
    pub fn file_identity(&self) -> Option<(u64, u64)> {
        if !self.is_file() {
            return None;
        }
        // SAFETY: an all-zero stat is valid; fstat fills it from a valid fd.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd and a writable stat.
        if unsafe { libc::fstat(self.file.as_raw_fd(), &mut st) } != 0 {
            return None;
        }
        Some((st.st_dev, st.st_ino))
    }

    /// Whether the object is a file (not anonymous memory).
    pub fn is_file(&self) -> bool {
        self.fixed_len.is_none()
    }

    /// `fstat` of the object's own descriptor (for a file object: the file's size, times and
    /// links; the descriptor is a reopening of the mapper's, the same inode).
    pub(crate) fn metadata(&self) -> io::Result<std::fs::Metadata> {
        std::fs::File::from(self.file.try_clone()?).metadata()
    }

    /// The windows made so far.
    pub fn windows(&self) -> Vec<Arc<SharedWindow>> {
        self.windows
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Copies the object's bytes at `offset` into `buf`, through its windows (the memory
    /// the processes mapping it see, which they may be writing meanwhile).
    ///
    /// # Errors
    /// `EFAULT` past the object's end; the host's errno if a window cannot be mapped.
    pub fn read_bytes(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.each_run(offset, buf.len(), |w, gpa, range| {
            w.read(gpa, &mut buf[range])
        })
    }

    /// Copies `buf` into the object at `offset`, through its windows.
    ///
    /// # Errors
    /// As [`read_bytes`](Self::read_bytes); `EACCES` for an object that may not be written.
    pub fn write_bytes(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.each_run(offset, buf.len(), |w, gpa, range| w.write(gpa, &buf[range]))
    }

    /// Calls `f` for each run of `len` bytes from `offset` that lies in one window: the
    /// window, the run's guest-physical address in it, and the run's range within the
    /// caller's buffer.
    fn each_run(
        &self,
        offset: u64,
        len: usize,
        mut f: impl FnMut(&SharedWindow, Gpa, std::ops::Range<usize>) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut done = 0usize;
        while done < len {
            let at = offset
                .checked_add(done as u64)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
            let (w, page) = self.page(at)?;
            let n = (len - done).min(self.run_in_window(at));
            f(&w, Gpa(page.raw() + at % PAGE_SIZE), done..done + n)?;
            done += n;
        }
        Ok(())
    }

    /// Reads the `u32` at `offset` (4-byte aligned) atomically, with acquire ordering.
    ///
    /// # Errors
    /// `EFAULT` if unaligned or past the object's end.
    pub fn load_u32(&self, offset: u64) -> io::Result<u32> {
        let (w, page) = self.page(offset)?;
        w.load_u32(Gpa(page.raw() + offset % PAGE_SIZE))
    }

    /// Writes the `u32` at `offset` (4-byte aligned) atomically, with release ordering.
    ///
    /// # Errors
    /// As [`load_u32`](Self::load_u32); `EACCES` for an object that may not be written.
    pub fn store_u32(&self, offset: u64, value: u32) -> io::Result<()> {
        let (w, page) = self.page(offset)?;
        w.store_u32(Gpa(page.raw() + offset % PAGE_SIZE), value)
    }

    /// Bytes from `offset` to the end of its window (contiguous in one host mapping).
    fn run_in_window(&self, offset: u64) -> usize {
        (WINDOW_SIZE - offset % WINDOW_SIZE) as usize
    }

    /// The window holding byte `offset` of the object (made on first use) and the
    /// guest-physical address of that byte's page.
    ///
    /// # Errors
    /// `EFAULT` (the caller sends SIGBUS) for an offset at or past the object's end; the
    /// host's errno if the window cannot be mapped; `ENOMEM` when no addresses are left.
    pub fn page(&self, offset: u64) -> io::Result<(Arc<SharedWindow>, Gpa)> {
        self.page_within(offset, self.size()?)
    }

    /// [`page`](Self::page), for an object of `size` bytes (read by the caller: one `fstat`
    /// for many pages).
    ///
    /// # Errors
    /// As [`page`](Self::page).
    pub fn page_within(&self, offset: u64, size: u64) -> io::Result<(Arc<SharedWindow>, Gpa)> {
        let page = offset & !(PAGE_SIZE - 1);
        if page >= size {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        let idx = page / WINDOW_SIZE;
        let mut ws = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let w = match ws.get(&idx) {
            Some(w) => w.clone(),
            None => {
                let gpa = self.space.take(WINDOW_SIZE)?;
                let w = SharedWindow::new(
                    self.file.clone(),
                    idx * WINDOW_SIZE,
                    WINDOW_SIZE,
                    gpa,
                    self.writable,
                )?;
                ws.insert(idx, w.clone());
                w
            }
        };
        Ok((w.clone(), Gpa(w.gpa().raw() + (page - idx * WINDOW_SIZE))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_objects_get_distinct_windows() {
        let s = SharedSpace::new();
        let a = s.anonymous(3 * WINDOW_SIZE, "a").unwrap();
        let b = s.anonymous(PAGE_SIZE, "b").unwrap();
        let (wa0, ga0) = a.page(0).unwrap();
        let (wa2, ga2) = a.page(2 * WINDOW_SIZE + 5 * PAGE_SIZE + 7).unwrap();
        let (_, gb) = b.page(0).unwrap();
        assert_eq!(ga0, wa0.gpa());
        assert_eq!(ga2.raw(), wa2.gpa().raw() + 5 * PAGE_SIZE);
        assert!(!Arc::ptr_eq(&wa0, &wa2));
        // Same page, same window and address.
        assert_eq!(a.page(PAGE_SIZE).unwrap().1.raw(), ga0.raw() + PAGE_SIZE);
        assert!(gb.raw() >= SHARED_GPA_BASE.raw() && gb != ga0 && gb != ga2);
        assert_eq!(
            b.page(PAGE_SIZE).unwrap_err().raw_os_error(),
            Some(libc::EFAULT)
        );
    }

    #[test]
    fn one_object_per_file() {
        let dir = std::env::temp_dir().join(format!("torpor-shm-test-{}", std::process::id()));
        std::fs::write(&dir, vec![7u8; 5000]).unwrap();
        let s = SharedSpace::new();
        let f1 = std::fs::File::open(&dir).unwrap();
        let f2 = std::fs::File::open(&dir).unwrap();
        let a = s.file(&f1).unwrap();
        let b = s.file(&f2).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.size().unwrap(), 5000);
        assert!(a.page(4096).is_ok());
        assert!(a.page(8192).is_err(), "past the end of the file");
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn bytes_and_words_cross_windows() {
        let s = SharedSpace::new();
        let a = s.anonymous(2 * WINDOW_SIZE, "t").unwrap();
        let data: Vec<u8> = (0..64u8).collect();
        let at = WINDOW_SIZE - 20;
        a.write_bytes(at, &data).unwrap();
        let mut back = vec![0u8; 64];
        a.read_bytes(at, &mut back).unwrap();
        assert_eq!(back, data);
        // The same bytes through the memfd: one object.
        assert_eq!(
            &a.read_all().unwrap()[at as usize..at as usize + 64],
            &data[..]
        );
        a.store_u32(8, 0xdead_beef).unwrap();
        assert_eq!(a.load_u32(8).unwrap(), 0xdead_beef);
        assert_eq!(
            a.load_u32(6).unwrap_err().raw_os_error(),
            Some(libc::EFAULT)
        );
        assert!(a.read_bytes(2 * WINDOW_SIZE - 4, &mut back).is_err());
    }
}
