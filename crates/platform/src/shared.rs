//! Shared windows: host memory that several VMs map at once, so that processes of a sandbox
//! (each its own VM) share pages as `MAP_SHARED` mappings, POSIX and System V shared memory
//! promise.
//!
//! A window is a `MAP_SHARED` host mapping of part of a file (a `memfd` for anonymous shared
//! memory, or the mapped file itself, so the guest's stores are the file's bytes and `read(2)`
//! sees them at once). It lives at a guest-physical address above the VM's own memory,
//! [`SHARED_GPA_BASE`] and up, chosen once by the sandbox so that it is the same in every VM
//! that maps it: a forked child's page tables need no rewriting. Each VM registers an
//! attached window as a memslot of its own ([`GuestMemory::attach`](crate::GuestMemory::attach));
//! the guest's page tables point straight at it, and the host reaches it through the same
//! checked accessors as the VM's memory.
//!
//! ```text
//! GPA 0 ─ VM's own memory (one memslot) ─ size │ … │ 512 GiB ─ window ─ gap ─ window … ─ 1 TiB
//! ```

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use crate::addr::{Gpa, PAGE_SIZE};

/// First guest-physical address of shared windows (above any VM's own memory: the direct map
/// covers at most 512 GiB).
pub const SHARED_GPA_BASE: Gpa = Gpa(1 << 39);
/// End of the shared-window space.
pub const SHARED_GPA_END: Gpa = Gpa(1 << 40);

/// A host mapping of `size` bytes of a file from `offset`, shown to the guest at `gpa`.
pub struct SharedWindow {
    gpa: Gpa,
    size: u64,
    writable: bool,
    base: NonNull<u8>,
    /// Offset in the file of the window's first byte.
    offset: u64,
    /// The mapped file (kept open as long as the mapping).
    file: Arc<OwnedFd>,
}

// SAFETY: the mapping is only reached through raw copies on checked ranges (see
// `GuestMemory`), which are safe from any thread.
unsafe impl Send for SharedWindow {}
// SAFETY: as for `Send`.
unsafe impl Sync for SharedWindow {}

impl SharedWindow {
    /// Maps `size` bytes (page multiple) of `file` from `offset` (page-aligned), to be shown
    /// at guest-physical `gpa` (page-aligned, inside the shared-window space); read-only
    /// unless `writable`.
    ///
    /// # Errors
    /// `EINVAL` for a misaligned or misplaced window; the host's errno if the mapping fails.
    pub fn new(
        file: Arc<OwnedFd>,
        offset: u64,
        size: u64,
        gpa: Gpa,
        writable: bool,
    ) -> io::Result<Arc<Self>> {
        let inside = gpa.0 >= SHARED_GPA_BASE.0
            && gpa
                .0
                .checked_add(size)
                .is_some_and(|e| e <= SHARED_GPA_END.0);
        if size == 0
            || !size.is_multiple_of(PAGE_SIZE)
            || !offset.is_multiple_of(PAGE_SIZE)
            || !gpa.is_page_aligned()
            || !inside
        {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: a fresh shared mapping of a file we hold open; no existing memory changes.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                if writable {
                    libc::PROT_READ | libc::PROT_WRITE
                } else {
                    libc::PROT_READ
                },
                libc::MAP_SHARED,
                file.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(Arc::new(SharedWindow {
            gpa,
            size,
            writable,
            base,
            offset,
            file,
        }))
    }

    /// Guest-physical address of the window's first byte.
    pub fn gpa(&self) -> Gpa {
        self.gpa
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The mapped file and the offset of the window's first byte in it.
    pub fn file(&self) -> (&Arc<OwnedFd>, u64) {
        (&self.file, self.offset)
    }

    /// Whether `gpa..gpa+len` lies inside the window; its host pointer if so.
    pub fn ptr(&self, gpa: Gpa, len: u64) -> Option<*mut u8> {
        self.host_ptr(gpa, len)
    }

    /// Whether the host mapping may be written.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Host address of the window's first byte (for the memslot).
    pub fn host_base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Copies the window's bytes at `gpa` into `buf` (the guest may be writing them: each
    /// byte is one it held at some point).
    ///
    /// # Errors
    /// `EFAULT` if the range leaves the window.
    pub fn read(&self, gpa: Gpa, buf: &mut [u8]) -> io::Result<()> {
        let src = self
            .host_ptr(gpa, buf.len() as u64)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
        // SAFETY: `src..src+len` is inside the mapping (checked); `buf` is a distinct host
        // buffer.
        unsafe { std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copies `buf` into the window at `gpa`.
    ///
    /// # Errors
    /// `EFAULT` if the range leaves the window; `EACCES` for a read-only window.
    pub fn write(&self, gpa: Gpa, buf: &[u8]) -> io::Result<()> {
        let dst = self.writable_ptr(gpa, buf.len() as u64)?;
        // SAFETY: `dst..dst+len` is inside a writable mapping (checked); `buf` is a distinct
        // host buffer.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), dst, buf.len()) };
        Ok(())
    }

    /// Reads the `u32` at `gpa` (4-byte aligned) with acquire ordering: the value the guest
    /// published with a release store (or a plain one, on x86), and what it wrote before.
    ///
    /// # Errors
    /// `EFAULT` if unaligned or outside the window.
    pub fn load_u32(&self, gpa: Gpa) -> io::Result<u32> {
        let p = self.aligned_u32(gpa, self.host_ptr(gpa, 4))?;
        // SAFETY: in bounds and 4-byte aligned (checked); an atomic access, because the guest
        // and other threads access the word concurrently; the mapping outlives the borrow.
        let a = unsafe { std::sync::atomic::AtomicU32::from_ptr(p) };
        Ok(a.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Writes the `u32` at `gpa` (4-byte aligned) with release ordering: what this thread
    /// wrote before is visible to a guest that reads the word.
    ///
    /// # Errors
    /// `EFAULT` if unaligned or outside the window; `EACCES` for a read-only window.
    pub fn store_u32(&self, gpa: Gpa, value: u32) -> io::Result<()> {
        let p = self.aligned_u32(gpa, Some(self.writable_ptr(gpa, 4)?))?;
        // SAFETY: as in `load_u32`, in a writable mapping.
        let a = unsafe { std::sync::atomic::AtomicU32::from_ptr(p) };
        a.store(value, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    fn writable_ptr(&self, gpa: Gpa, len: u64) -> io::Result<*mut u8> {
        if !self.writable {
            return Err(io::Error::from_raw_os_error(libc::EACCES));
        }
        self.host_ptr(gpa, len)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))
    }

    fn aligned_u32(&self, gpa: Gpa, p: Option<*mut u8>) -> io::Result<*mut u32> {
        match p {
            Some(p) if gpa.0.is_multiple_of(4) => Ok(p.cast::<u32>()),
            _ => Err(io::Error::from_raw_os_error(libc::EFAULT)),
        }
    }

    /// Whether `gpa..gpa+len` lies inside the window; its host pointer if so.
    pub(crate) fn host_ptr(&self, gpa: Gpa, len: u64) -> Option<*mut u8> {
        let off = gpa.0.checked_sub(self.gpa.0)?;
        let end = off.checked_add(len)?;
        // SAFETY: `off + len <= size`, so the offset stays inside the mapping.
        (end <= self.size).then(|| unsafe { self.base.as_ptr().add(off as usize) })
    }
}

impl Drop for SharedWindow {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping this object created; every VM that registered it as a
        // memslot holds an `Arc` to it, so none is left.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.size as usize) };
    }
}

impl std::fmt::Debug for SharedWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedWindow({}+{:#x})", self.gpa, self.size)
    }
}
