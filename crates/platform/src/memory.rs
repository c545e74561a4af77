//! Guest-physical memory: one compact host mapping with bounds-checked access. Private
//! anonymous memory (the KVM platform registers it as the VM's only memslot), or a memfd
//! mapped shared ([`GuestMemory::new_shared`]: the trap platform maps its pages into the
//! application's own process too).
//!
//! vCPUs write this memory concurrently with the host, so no `&[u8]` or `&mut [u8]` into it is
//! ever created: every access is a volatile-free raw copy (`ptr::copy_nonoverlapping`) between a
//! host buffer and a checked guest range, or a host system call (`pread`, `write`, `madvise`)
//! handed a checked raw pointer.
//!
//! Read-only windows (private file pages shared through the page cache) are never written
//! by the host (a write is [`MemoryError::ReadOnly`]: their mapping is `PROT_READ`), and are
//! read through their file with `pread`, so that a page the file lost to a truncation reads
//! zero instead of raising SIGBUS in the runtime.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use std::sync::Arc;

use crate::addr::{Gpa, PAGE_SIZE};
use crate::shared::SharedWindow;
use crate::visible::{VisibleRange, MAX_OWN_SLOTS};

/// Errors of guest-memory access.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The mapping could not be created.
    #[error("cannot map {size} bytes of guest memory: {source}")]
    Map {
        /// Requested size.
        size: u64,
        /// Cause.
        source: io::Error,
    },
    /// The size is zero or not a multiple of 4 MiB.
    #[error("guest memory size {0} must be a non-zero multiple of 4 MiB")]
    BadSize(u64),
    /// An access fell outside guest-physical memory.
    #[error("guest-physical range {gpa}+{len:#x} is outside guest memory")]
    OutOfRange {
        /// Start of the access.
        gpa: Gpa,
        /// Its length.
        len: u64,
    },
    /// A write fell in a read-only shared window.
    #[error("guest-physical range {gpa}+{len:#x} is a read-only window")]
    ReadOnly {
        /// Start of the access.
        gpa: Gpa,
        /// Its length.
        len: u64,
    },
}

/// The VM's guest-physical memory: its own mapping from GPA 0, plus the shared windows
/// attached to it (see [`crate::shared`]).
pub struct GuestMemory {
    base: NonNull<u8>,
    size: u64,
    /// Shared windows attached, sorted by guest-physical address; never detached while the
    /// memory lives (a page table may point into any of them).
    windows: std::sync::RwLock<Vec<Arc<SharedWindow>>>,
    /// Registers a window as a memslot of the VM (set by the VM; slot numbers from 1).
    registrar: std::sync::OnceLock<Box<Registrar>>,
    /// Memslots the VM may have (KVM_CAP_NR_MEMSLOTS; set by the VM, unbounded before).
    slot_limit: std::sync::atomic::AtomicUsize,
    /// The mapping is a private mapping of a memory image file ([`GuestMemory::from_image`]):
    /// its pages are the file's until written (until [`GuestMemory::make_anonymous`]).
    image: std::sync::atomic::AtomicBool,
    /// The memfd behind a shared mapping ([`GuestMemory::new_shared`]).
    memfd: Option<std::os::fd::OwnedFd>,
    /// The prefix of the own memory the VM's memslots cover ([`crate::visible`]).
    visible: VisibleRange,
}

/// How the VM registers a shared window as memslot `slot`.
pub type Registrar = dyn Fn(u32, &SharedWindow) -> io::Result<()> + Send + Sync;

// SAFETY: `GuestMemory` owns a private anonymous mapping; all access goes through raw copies or
// system calls on checked ranges, which are safe to perform from any thread (the guest may race
// with them, which only affects the bytes it sees, never host memory safety).
unsafe impl Send for GuestMemory {}
// SAFETY: as for `Send`: no method hands out references into the mapping.
unsafe impl Sync for GuestMemory {}

/// Granule of guest memory sizes (the page allocator's chunk).
pub const MEMORY_GRANULE: u64 = 4 << 20;

impl GuestMemory {
    /// Maps `size` bytes of zeroed guest memory (not reserved: pages cost host memory only
    /// once touched).
    ///
    /// # Errors
    /// [`MemoryError::BadSize`] unless `size` is a non-zero multiple of 4 MiB;
    /// [`MemoryError::Map`] if the host refuses the mapping.
    pub fn new(size: u64) -> Result<Self, MemoryError> {
        Self::map(size, None)
    }

    /// Maps `size` bytes of zeroed guest memory backed by a memfd of its own, shared: another
    /// process given [`GuestMemory::backing_fd`] maps the same pages (guest-physical address =
    /// offset in the memfd). The memfd's size is sealed, so no one can shrink it under the
    /// mapping (the runtime's accesses could then fault).
    ///
    /// # Errors
    /// As [`GuestMemory::new`].
    pub fn new_shared(size: u64) -> Result<Self, MemoryError> {
        if size == 0 || !size.is_multiple_of(MEMORY_GRANULE) {
            return Err(MemoryError::BadSize(size));
        }
        let err = |source| MemoryError::Map { size, source };
        // SAFETY: a NUL-terminated name and valid flags; the result is checked.
        let fd = unsafe {
            libc::memfd_create(
                c"torpor-guest".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(err(io::Error::last_os_error()));
        }
        // SAFETY: a descriptor we just created and own.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let len = i64::try_from(size).map_err(|_| MemoryError::BadSize(size))?;
        // SAFETY: plain calls on a descriptor we own.
        let sealed = unsafe {
            libc::ftruncate(fd.as_raw_fd(), len) == 0
                && libc::fcntl(
                    fd.as_raw_fd(),
                    libc::F_ADD_SEALS,
                    libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
                ) == 0
        };
        if !sealed {
            return Err(err(io::Error::last_os_error()));
        }
        let mut m = Self::map_fd(size, libc::MAP_SHARED, fd.as_raw_fd())?;
        m.memfd = Some(fd);
        Ok(m)
    }

    /// The memfd behind memory made by [`GuestMemory::new_shared`].
    pub fn backing_fd(&self) -> Option<BorrowedFd<'_>> {
        self.memfd.as_ref().map(std::os::fd::AsFd::as_fd)
    }

    /// Maps `size` bytes of guest memory whose initial contents are the file `image`, byte
    /// for byte (guest-physical address = file offset; holes read as zero), privately: the
    /// host's page cache holds one copy of the file for every memory mapping it, and a page
    /// written becomes a copy of this memory's own (a clone of a checkpoint pays only for the
    /// pages it writes). Such memory cannot be registered with a userfaultfd, and
    /// [`GuestMemory::discard`] replaces pages with anonymous zero pages instead of dropping
    /// them (dropped, they would read as the file's bytes again).
    ///
    /// # Errors
    /// [`MemoryError::BadSize`] unless `size` is a non-zero multiple of 4 MiB and the file's
    /// length; [`MemoryError::Map`] if the host refuses the mapping.
    pub fn from_image(image: &std::fs::File, size: u64) -> Result<Self, MemoryError> {
        match image.metadata() {
            Ok(m) if m.len() == size => Self::map(size, Some(image)),
            Ok(_) => Err(MemoryError::BadSize(size)),
            Err(source) => Err(MemoryError::Map { size, source }),
        }
    }

    /// `size` bytes mapped private: anonymous, or of `image`.
    fn map(size: u64, image: Option<&std::fs::File>) -> Result<Self, MemoryError> {
        if size == 0 || !size.is_multiple_of(MEMORY_GRANULE) {
            return Err(MemoryError::BadSize(size));
        }
        let (flags, fd) = match image {
            Some(f) => (0, std::os::fd::AsRawFd::as_raw_fd(f)),
            None => (libc::MAP_ANONYMOUS, -1),
        };
        let m = Self::map_fd(size, libc::MAP_PRIVATE | flags, fd)?;
        m.image
            .store(image.is_some(), std::sync::atomic::Ordering::SeqCst);
        Ok(m)
    }

    /// `size` bytes mapped with `flags` (private anonymous, private of an image file, or shared
    /// of a memfd) from `fd`'s offset 0.
    fn map_fd(size: u64, flags: i32, fd: i32) -> Result<Self, MemoryError> {
        let len = usize::try_from(size).map_err(|_| MemoryError::BadSize(size))?;
        // SAFETY: a fresh mapping (anonymous, private of a file we hold open, or shared of our
        // own memfd); no existing memory is affected, and private writes never reach a file.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_NORESERVE | flags,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MemoryError::Map {
                size,
                source: io::Error::last_os_error(),
            });
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or(MemoryError::Map {
            size,
            source: io::Error::from_raw_os_error(libc::ENOMEM),
        })?;
        Ok(GuestMemory {
            base,
            size,
            windows: std::sync::RwLock::new(Vec::new()),
            registrar: std::sync::OnceLock::new(),
            slot_limit: std::sync::atomic::AtomicUsize::new(usize::MAX),
            image: std::sync::atomic::AtomicBool::new(false),
            memfd: None,
            visible: VisibleRange::new(size),
        })
    }

    /// Whether the memory is a private mapping of an image file ([`GuestMemory::from_image`]).
    pub fn is_image(&self) -> bool {
        self.image.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Replaces the memory from `from` to its end with anonymous zero pages (a clone's first
    /// deflate, once every page it holds is written out): from then on it is ordinary
    /// memory, which a userfaultfd can serve. The memory below `from` stays as it is.
    ///
    /// # Errors
    /// [`MemoryError::OutOfRange`] for an unaligned `from`; [`MemoryError::Map`] if the host
    /// refuses (the memory is then unchanged).
    pub fn make_anonymous(&self, from: Gpa) -> Result<(), MemoryError> {
        let len = self.size.saturating_sub(from.raw());
        if !from.is_page_aligned() || len == 0 {
            return Err(MemoryError::OutOfRange { gpa: from, len });
        }
        // The caller has saved the range's contents.
        self.zero_own(from, len)
            .map_err(|source| MemoryError::Map { size: len, source })?;
        self.image.store(false, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Replaces `len` bytes of this memory's own mapping at `gpa` (page-aligned, checked by
    /// the caller) with anonymous zero pages of the same rights.
    fn zero_own(&self, gpa: Gpa, len: u64) -> io::Result<()> {
        let p = self
            .host_ptr(gpa, len)
            .map_err(|_| io::Error::from_raw_os_error(libc::EFAULT))?;
        // SAFETY: a page-aligned range inside our own mapping, replaced in place by a private
        // anonymous one of the same rights; nothing else maps it.
        let r = unsafe {
            libc::mmap(
                p.cast(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if r == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Sets how many memslots the VM may have in all (its own memory's included): KVM's
    /// `KVM_CAP_NR_MEMSLOTS`.
    pub fn set_slot_limit(&self, slots: usize) {
        self.slot_limit
            .store(slots, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sets how windows become memslots of the VM (once, by the VM over this memory).
    pub fn set_registrar(&self, r: Box<Registrar>) {
        let _ = self.registrar.set(r);
    }

    /// The prefix of the own memory the VM is told about, and how it grows.
    pub fn visible_range(&self) -> &VisibleRange {
        &self.visible
    }

    /// Makes the own memory's `[0, end)` usable by the guest before a page there is handed
    /// out (see [`crate::visible`]; nothing to do without a VM).
    ///
    /// # Errors
    /// As [`VisibleRange::expose`].
    pub fn expose(&self, end: u64) -> io::Result<()> {
        self.visible.expose(end)
    }

    /// Attaches a shared window: the VM sees it at its guest-physical address from now on.
    /// Attaching one already attached does nothing.
    ///
    /// # Errors
    /// `ENOSPC` when the VM has no memslot left;
    /// the host's errno if KVM refuses the memslot; `EEXIST` if another window overlaps it.
    pub fn attach(&self, w: &Arc<SharedWindow>) -> io::Result<()> {
        self.attach_keeping(w, 0)
    }

    /// As [`attach`](Self::attach), but a window not attached yet is refused with `ENOSPC`
    /// unless `reserve` memslots stay free after it (for windows that have no fallback).
    ///
    /// # Errors
    /// As [`attach`](Self::attach).
    pub fn attach_keeping(&self, w: &Arc<SharedWindow>, reserve: usize) -> io::Result<()> {
        let mut ws = self.windows.write().unwrap_or_else(|e| e.into_inner());
        if ws.iter().any(|x| Arc::ptr_eq(x, w)) {
            return Ok(());
        }
        let overlaps = |x: &Arc<SharedWindow>| {
            x.gpa().0 < w.gpa().0 + w.size() && w.gpa().0 < x.gpa().0 + x.size()
        };
        if ws.iter().any(overlaps) {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        // A VM registers the window as a memslot; without a registrar (the trap platform,
        // whose stubs map each window's file themselves) it is only recorded.
        if let Some(register) = self.registrar.get() {
            let limit = self.slot_limit.load(std::sync::atomic::Ordering::Relaxed);
            if (ws.len() + 1 + MAX_OWN_SLOTS).saturating_add(reserve) >= limit {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            let slot = u32::try_from(ws.len() + 1)
                .map_err(|_| io::Error::from_raw_os_error(libc::ENOSPC))?;
            register(slot, w)?;
        }
        let at = ws.partition_point(|x| x.gpa() < w.gpa());
        ws.insert(at, w.clone());
        Ok(())
    }

    /// The windows attached (a fork attaches the same ones to the child).
    pub fn windows(&self) -> Vec<Arc<SharedWindow>> {
        self.windows
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether `gpa` is a page of this VM's own memory (not of a shared window).
    pub fn is_own(&self, gpa: Gpa) -> bool {
        gpa.0 < self.size
    }

    /// Whether `gpa` is a page of an attached shared window.
    pub fn is_shared(&self, gpa: Gpa) -> bool {
        !self.is_own(gpa) && self.window_ptr(gpa, 1).is_some()
    }

    fn window_ptr(&self, gpa: Gpa, len: u64) -> Option<*mut u8> {
        self.window_at(gpa).and_then(|w| w.host_ptr(gpa, len))
    }

    /// The attached window holding `gpa`.
    fn window_at(&self, gpa: Gpa) -> Option<Arc<SharedWindow>> {
        let ws = self.windows.read().unwrap_or_else(|e| e.into_inner());
        let i = ws.partition_point(|x| x.gpa() <= gpa);
        i.checked_sub(1).map(|i| ws[i].clone())
    }

    /// Whether `gpa` is a page of an attached window the host may not write (a read-only
    /// file mapping: private file pages backed by the page cache).
    pub fn is_read_only(&self, gpa: Gpa) -> bool {
        !self.is_own(gpa)
            && self
                .window_at(gpa)
                .is_some_and(|w| w.host_ptr(gpa, 1).is_some() && !w.is_writable())
    }

    /// As [`host_ptr`](Self::host_ptr), for a write: a read-only window's range is refused
    /// (the host mapping is `PROT_READ`; writing it would fault the runtime).
    fn host_ptr_mut(&self, gpa: Gpa, len: u64) -> Result<*mut u8, MemoryError> {
        if self.is_read_only(gpa) {
            return Err(MemoryError::ReadOnly { gpa, len });
        }
        self.host_ptr(gpa, len)
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Host virtual address of guest-physical address 0 (for the KVM memslot, madvise,
    /// userfaultfd registration and mincore).
    pub fn host_base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Checks that `gpa..gpa+len` lies inside guest memory (the VM's own, or one attached
    /// shared window) and returns its host pointer.
    ///
    /// # Errors
    /// [`MemoryError::OutOfRange`] otherwise.
    pub fn host_ptr(&self, gpa: Gpa, len: u64) -> Result<*mut u8, MemoryError> {
        match gpa.0.checked_add(len) {
            Some(end) if end <= self.size => {
                // SAFETY: `gpa.0 + len <= size`, so the offset stays inside the mapping.
                Ok(unsafe { self.base.as_ptr().add(gpa.0 as usize) })
            }
            Some(_) if gpa.0 >= self.size => self
                .window_ptr(gpa, len)
                .ok_or(MemoryError::OutOfRange { gpa, len }),
            _ => Err(MemoryError::OutOfRange { gpa, len }),
        }
    }

    /// Whether each page from `first` (of the VM's own memory) has its data in host memory
    /// now (`mincore` of the host mapping; one byte per page of `out`, bit 0): not for a page
    /// never touched, or discarded by a hibernation, or swapped out by the host. The pages
    /// past the end of the VM's own memory are reported resident.
    ///
    /// # Errors
    /// The host's, from `mincore` (`out` then says every page is resident).
    pub fn residency(&self, first: Gpa, out: &mut [u8]) -> io::Result<()> {
        let first = first.page_down();
        let own = self.size.saturating_sub(first.0) / crate::PAGE_SIZE;
        let n = out.len().min(own as usize);
        out.fill(1);
        if n == 0 {
            return Ok(());
        }
        let ptr = self
            .host_ptr(first, n as u64 * crate::PAGE_SIZE)
            .map_err(io::Error::other)?;
        // SAFETY: `n` pages of this mapping (checked by host_ptr), `n` bytes of output.
        let r =
            unsafe { libc::mincore(ptr.cast(), n * crate::PAGE_SIZE as usize, out.as_mut_ptr()) };
        if r != 0 {
            let e = io::Error::last_os_error();
            out.fill(1);
            return Err(e);
        }
        Ok(())
    }

    /// Copies guest memory at `gpa` into `buf`.
    ///
    /// # Errors
    /// [`MemoryError::OutOfRange`] if the range leaves guest memory.
    pub fn read(&self, gpa: Gpa, buf: &mut [u8]) -> Result<(), MemoryError> {
        let src = self.host_ptr(gpa, buf.len() as u64)?;
        if self.is_read_only(gpa) {
            return self.read_window_file(gpa, buf);
        }
        // SAFETY: `src..src+len` is inside the mapping (checked); `buf` is a distinct host buffer.
        unsafe { std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copies `buf` into guest memory at `gpa`.
    ///
    /// # Errors
    /// [`MemoryError::OutOfRange`] if the range leaves guest memory;
    /// [`MemoryError::ReadOnly`] if it lies in a read-only window.
    pub fn write(&self, gpa: Gpa, buf: &[u8]) -> Result<(), MemoryError> {
        let dst = self.host_ptr_mut(gpa, buf.len() as u64)?;
        // SAFETY: `dst..dst+len` is inside the mapping (checked); `buf` is a distinct host buffer.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), dst, buf.len()) };
        Ok(())
    }

    /// Reads a little-endian `u64` at `gpa` (which must be 8-byte aligned).
    ///
    /// # Errors
    /// [`MemoryError::OutOfRange`] if unaligned or outside guest memory.
    pub fn read_u64(&self, gpa: Gpa) -> Result<u64, MemoryError> {
        if !gpa.0.is_multiple_of(8) {
            return Err(MemoryError::OutOfRange { gpa, len: 8 });
        }
        let p = self.host_ptr(gpa, 8)?.cast::<u64>();
        // SAFETY: in bounds and 8-byte aligned (the mapping is page-aligned); a volatile read
        // because the guest may write it concurrently.
        Ok(unsafe { p.read_volatile() })
    }

    /// Writes a `u64` at `gpa` (which must be 8-byte aligned).
    ///
    /// # Errors
    /// [`MemoryError::OutOfRange`] if unaligned or outside guest memory.
    pub fn write_u64(&self, gpa: Gpa, value: u64) -> Result<(), MemoryError> {
        if !gpa.0.is_multiple_of(8) {
            return Err(MemoryError::OutOfRange { gpa, len: 8 });
        }
        let p = self.host_ptr_mut(gpa, 8)?.cast::<u64>();
        // SAFETY: in bounds and 8-byte aligned; volatile because the guest may read it.
        unsafe { p.write_volatile(value) };
        Ok(())
    }

    /// Fills `len` bytes at `gpa` with `byte`.
    ///
    /// # Errors
    /// [`MemoryError::OutOfRange`] if the range leaves guest memory.
    pub fn fill(&self, gpa: Gpa, byte: u8, len: u64) -> Result<(), MemoryError> {
        let dst = self.host_ptr_mut(gpa, len)?;
        // SAFETY: in bounds (checked).
        unsafe { std::ptr::write_bytes(dst, byte, len as usize) };
        Ok(())
    }

    /// Copies `len` bytes inside guest memory from `src` to `dst` (ranges may not overlap).
    ///
    /// # Errors
    /// [`MemoryError::OutOfRange`] if either range leaves guest memory or they overlap;
    /// [`MemoryError::ReadOnly`] if either is in a read-only window (read those with
    /// [`read`](Self::read)).
    pub fn copy_within(&self, src: Gpa, dst: Gpa, len: u64) -> Result<(), MemoryError> {
        let s = self.host_ptr(src, len)?;
        let d = self.host_ptr_mut(dst, len)?;
        if self.is_read_only(src) {
            return Err(MemoryError::ReadOnly { gpa: src, len });
        }
        if src.0 < dst.0 + len && dst.0 < src.0 + len {
            return Err(MemoryError::OutOfRange { gpa: dst, len });
        }
        // SAFETY: both in bounds and disjoint (checked).
        unsafe { std::ptr::copy_nonoverlapping(s, d, len as usize) };
        Ok(())
    }

    /// Returns the host pages behind `gpa..gpa+len` (page-aligned) to the host: pages of the
    /// VM's own memory read as zero afterwards (MADV_DONTNEED); a window's come back from
    /// its file.
    ///
    /// # Errors
    /// [`MemoryError::OutOfRange`] if the range leaves guest memory or is not page-aligned.
    pub fn discard(&self, gpa: Gpa, len: u64) -> Result<(), MemoryError> {
        if !gpa.is_page_aligned() || !len.is_multiple_of(PAGE_SIZE) {
            return Err(MemoryError::OutOfRange { gpa, len });
        }
        let p = self.host_ptr(gpa, len)?;
        if self.is_image() && self.is_own(gpa) {
            // Dropped pages of a private file mapping read as the file's bytes again: put
            // anonymous zero pages in their place (the memslot follows the host mapping).
            if let Err(e) = self.zero_own(gpa, len) {
                tracing::warn!("replacing image pages failed: {e}");
            }
            return Ok(());
        }
        if let (Some(fd), true) = (&self.memfd, self.is_own(gpa)) {
            // Shared memory keeps its pages in the memfd: punch them out (every process's
            // mapping of them reads zero afterwards).
            // SAFETY: a plain call on our own memfd, over a checked range.
            let r = unsafe {
                libc::fallocate(
                    fd.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    gpa.raw() as i64,
                    len as i64,
                )
            };
            if r != 0 {
                tracing::warn!(
                    "fallocate(PUNCH_HOLE) failed: {}",
                    io::Error::last_os_error()
                );
            }
            return Ok(());
        }
        // SAFETY: a page-aligned range inside our own private mapping, or a window's shared
        // one (whose pages stay the file's: only the runtime's mapping of them is dropped);
        // dropping them is what the caller asks for.
        let r = unsafe { libc::madvise(p.cast(), len as usize, libc::MADV_DONTNEED) };
        if r != 0 {
            tracing::warn!("madvise(DONTNEED) failed: {}", io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reads up to `len` bytes from `fd` at `offset` (or the current position when `offset` is
    /// `None`) straight into guest memory at `gpa`. Returns the count read.
    ///
    /// # Errors
    /// `EFAULT` if the range leaves guest memory; the host's errno otherwise.
    pub fn read_from_fd(
        &self,
        fd: BorrowedFd<'_>,
        gpa: Gpa,
        len: u64,
        offset: Option<u64>,
    ) -> io::Result<usize> {
        let p = self
            .host_ptr_mut(gpa, len)
            .map_err(|_| io::Error::from_raw_os_error(libc::EFAULT))?;
        // SAFETY: `p..p+len` is inside guest memory (checked); the host kernel writes it.
        let r = unsafe {
            match offset {
                Some(off) => libc::pread(fd.as_raw_fd(), p.cast(), len as usize, off as i64),
                None => libc::read(fd.as_raw_fd(), p.cast(), len as usize),
            }
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }
}

impl GuestMemory {
    /// Reads `buf` at `gpa` of a read-only window through its file (`pread`), not its
    /// mapping: a page the file lost to a truncation since it was mapped reads short (zeros
    /// here) instead of raising SIGBUS in the runtime. The bytes are the page cache's, the
    /// same the mapping shows.
    fn read_window_file(&self, gpa: Gpa, buf: &mut [u8]) -> Result<(), MemoryError> {
        let len = buf.len() as u64;
        let w = self
            .window_at(gpa)
            .ok_or(MemoryError::OutOfRange { gpa, len })?;
        let (file, base) = w.file();
        let mut at = base + (gpa.0 - w.gpa().0);
        let mut done = 0usize;
        while done < buf.len() {
            let rest = &mut buf[done..];
            // SAFETY: `rest` is a host buffer of `rest.len()` writable bytes.
            let r = unsafe {
                libc::pread(
                    file.as_raw_fd(),
                    rest.as_mut_ptr().cast(),
                    rest.len(),
                    at as libc::off_t,
                )
            };
            match r {
                n if n > 0 => {
                    done += n as usize;
                    at += n as u64;
                }
                0 => break,
                _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
                _ => break,
            }
        }
        buf[done..].fill(0);
        Ok(())
    }
}

impl Drop for GuestMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping this object created; nothing refers to it any more
        // (the VM holding the memslot is dropped before, see `Vm`).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.size as usize) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_is_the_memfd_and_discards_by_punching_holes() {
        let m = GuestMemory::new_shared(MEMORY_GRANULE).unwrap();
        m.write(Gpa(0x5000), &[9u8; 4096]).unwrap();
        let fd = m.backing_fd().expect("a memfd");
        let mut b = [0u8; 16];
        // SAFETY: a plain read into a local buffer.
        let n = unsafe { libc::pread(fd.as_raw_fd(), b.as_mut_ptr().cast(), 16, 0x5000) };
        assert_eq!((n, b), (16, [9u8; 16]), "the memfd holds the guest's bytes");
        // The size is sealed.
        // SAFETY: a plain call on a descriptor we hold.
        assert_ne!(unsafe { libc::ftruncate(fd.as_raw_fd(), 4096) }, 0);
        m.discard(Gpa(0x5000), 4096).unwrap();
        // SAFETY: an all-zero stat is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat into a local struct.
        assert_eq!(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) }, 0);
        assert_eq!(st.st_blocks, 0, "the punched page no longer takes memory");
        m.read(Gpa(0x5000), &mut b).unwrap();
        assert_eq!(b, [0u8; 16]);
        assert!(GuestMemory::new(MEMORY_GRANULE)
            .unwrap()
            .backing_fd()
            .is_none());
    }

    #[test]
    fn image_memory_reads_the_file_copies_on_write_and_discards_to_zero() {
        let path = std::env::temp_dir().join(format!("torpor-image-{}", std::process::id()));
        let size = MEMORY_GRANULE;
        {
            let f = std::fs::File::create(&path).unwrap();
            f.set_len(size).unwrap();
            std::os::unix::fs::FileExt::write_all_at(&f, &[7u8; 4096], 0x5000).unwrap();
        }
        let f = std::fs::File::open(&path).unwrap();
        assert!(
            GuestMemory::from_image(&f, size * 2).is_err(),
            "another length"
        );
        let m = GuestMemory::from_image(&f, size).unwrap();
        assert!(m.is_image());
        let mut b = [0u8; 4096];
        m.read(Gpa(0x5000), &mut b).unwrap();
        assert_eq!(b, [7u8; 4096]);
        m.read(Gpa(0x6000), &mut b).unwrap();
        assert_eq!(b, [0u8; 4096], "a hole reads zero");
        m.write(Gpa(0x5000), &[9u8; 16]).unwrap();
        let mut file_bytes = [0u8; 16];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut file_bytes, 0x5000).unwrap();
        assert_eq!(file_bytes, [7u8; 16], "a write stays the memory's own");
        m.discard(Gpa(0x5000), 0x1000).unwrap();
        m.read(Gpa(0x5000), &mut b).unwrap();
        assert_eq!(
            b, [0u8; 4096],
            "a discarded page reads zero, not the file's bytes"
        );
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn bounds_are_checked() {
        let m = GuestMemory::new(MEMORY_GRANULE).unwrap();
        assert!(m.write(Gpa(MEMORY_GRANULE - 4), &[1, 2, 3, 4]).is_ok());
        assert!(m.write(Gpa(MEMORY_GRANULE - 3), &[1, 2, 3, 4]).is_err());
        assert!(m.read_u64(Gpa(u64::MAX - 3)).is_err());
        assert!(m.read_u64(Gpa(4)).is_err());
        m.write_u64(Gpa(8), 0xdead_beef).unwrap();
        assert_eq!(m.read_u64(Gpa(8)).unwrap(), 0xdead_beef);
        let mut b = [0u8; 4];
        m.read(Gpa(MEMORY_GRANULE - 4), &mut b).unwrap();
        assert_eq!(b, [1, 2, 3, 4]);
        assert!(GuestMemory::new(12345).is_err());
    }

    #[test]
    fn discard_zeroes() {
        let m = GuestMemory::new(MEMORY_GRANULE).unwrap();
        m.fill(Gpa(0x2000), 0xaa, 0x1000).unwrap();
        m.discard(Gpa(0x2000), 0x1000).unwrap();
        assert_eq!(m.read_u64(Gpa(0x2000)).unwrap(), 0);
        assert!(m.discard(Gpa(0x2001), 0x1000).is_err());
    }
}
