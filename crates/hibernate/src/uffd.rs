//! A minimal userfaultfd: exactly what the pager needs, over the kernel's own structs and ioctl
//! numbers from `linux-raw-sys` (pre-generated bindings, so the build needs no libclang).
//!
//! One [`Uffd`] is created (`userfaultfd(2)` with `O_CLOEXEC`, blocking reads, kernel-mode
//! faults included so that the runtime's own copies into guest memory fault too), handshaken
//! with `UFFDIO_API`, asking for asynchronous write protection (`UFFD_FEATURE_WP_ASYNC`, Linux
//! 6.7; `TORPOR_UFFD_WP=0` turns it off), and registers guest memory in `MISSING` mode, plus
//! `WP` mode when the feature is there. The handler thread reads page-fault events ([`Uffd::read_event`]) and
//! resolves them with `UFFDIO_COPY` ([`Uffd::copy`], [`Uffd::copy_write_protected`]) or
//! `UFFDIO_ZEROPAGE` ([`Uffd::zeropage`]), both of which wake the faulting threads.
//!
//! **Write tracking.** A page installed by [`Uffd::copy_write_protected`] carries the host's
//! uffd write-protect bit. In asynchronous mode the first write to it (by a vCPU through KVM,
//! or by the runtime's own copies) costs no event: the kernel clears the bit and lets the
//! write through. So a page whose bit is still set ([`written_pages`] reads them from
//! `/proc/self/pagemap`, bit 57) holds exactly what was copied in, and a deflate need not
//! write it again.
//!
//! Errors are `std::io::Error`s carrying the errno: `EEXIST` from `copy` or `zeropage` when the
//! (first) page is already present, `EAGAIN` from `copy` when only part of the range was copied
//! (a later page was present).

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use linux_raw_sys::general::{
    __NR_userfaultfd, uffd_msg, uffdio_api, uffdio_copy, uffdio_range, uffdio_register,
    uffdio_zeropage, UFFDIO_COPY_MODE_WP, UFFDIO_REGISTER_MODE_MISSING, UFFDIO_REGISTER_MODE_WP,
    UFFD_API, UFFD_EVENT_PAGEFAULT, UFFD_FEATURE_WP_ASYNC,
};
use linux_raw_sys::ioctl::{UFFDIO_API, UFFDIO_COPY, UFFDIO_REGISTER, UFFDIO_ZEROPAGE};

/// A userfaultfd object (the file descriptor, closed on drop).
#[derive(Debug)]
pub struct Uffd {
    fd: OwnedFd,
    /// Asynchronous write protection was granted by `UFFDIO_API` and the registration took
    /// `WP` mode too: copies can be write-protected and writes are tracked.
    tracks_writes: bool,
}

/// An event read from a [`Uffd`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A thread faulted on a missing page of a registered range.
    Pagefault {
        /// The faulting address (page-aligned: no exact-address feature is requested).
        addr: u64,
        /// `UFFD_PAGEFAULT_FLAG_*` bits (`UFFD_PAGEFAULT_FLAG_WRITE` for a write).
        flags: u64,
    },
    /// Any other event (none is enabled by [`Uffd::new`]): its `UFFD_EVENT_*` code.
    Other {
        /// The `event` byte of the message.
        event: u8,
    },
}

impl Uffd {
    /// Creates a userfaultfd with `O_CLOEXEC`, blocking reads, and handling kernel-mode faults
    /// too (no `UFFD_USER_MODE_ONLY`: this needs `CAP_SYS_PTRACE`, or
    /// `vm.unprivileged_userfaultfd = 1`), then does the `UFFDIO_API` handshake asking for
    /// `UFFD_FEATURE_WP_ASYNC` (a kernel without it gets a handshake with no optional
    /// features, on a second descriptor: the handshake can be done once only).
    ///
    /// # Errors
    /// The errno of `userfaultfd(2)` (`EPERM` when not permitted) or of `UFFDIO_API`.
    pub fn new() -> io::Result<Self> {
        // `TORPOR_UFFD_WP=0` turns write tracking off (every deflate then writes every
        // resident page again): a switch to rule it out when chasing a lost write.
        if std::env::var("TORPOR_UFFD_WP").as_deref() == Ok("0") {
            return Self::with_features(0);
        }
        match Self::with_features(UFFD_FEATURE_WP_ASYNC.into()) {
            Ok(u) => Ok(u),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::info!("userfaultfd without asynchronous write protection: deflates write every resident page");
                Self::with_features(0)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether writes to pages installed by [`Uffd::copy_write_protected`] are tracked.
    pub fn tracks_writes(&self) -> bool {
        self.tracks_writes
    }

    fn with_features(features: u64) -> io::Result<Self> {
        // SAFETY: userfaultfd(2) takes one flags argument and touches no memory of this process.
        let mut fd =
            unsafe { libc::syscall(libc::c_long::from(__NR_userfaultfd), libc::O_CLOEXEC) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EPERM) {
                return Err(e);
            }
            // Without CAP_SYS_PTRACE (a user who is not root): Linux 6.1's /dev/userfaultfd
            // gives the same descriptor to whoever may open it.
            fd = libc::c_long::from(Self::from_device().map_err(|_| e)?);
        }
        // SAFETY: `fd` is a descriptor just returned by the kernel, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        let mut uffd = Uffd {
            fd,
            tracks_writes: false,
        };
        let mut api = uffdio_api {
            api: UFFD_API.into(),
            features,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API reads and writes a `uffdio_api`, which `api` is.
        unsafe { uffd.ioctl(UFFDIO_API, &mut api) }?;
        // The kernel answers with every feature it has, asked for or not: only one asked for
        // is on (write protection without WP_ASYNC would stop each writer until an event is
        // answered, which the pager does not do).
        let wp_async = u64::from(UFFD_FEATURE_WP_ASYNC);
        uffd.tracks_writes = features & wp_async != 0 && api.features & wp_async != 0;
        Ok(uffd)
    }

    /// A userfaultfd from `/dev/userfaultfd` (`USERFAULTFD_IOC_NEW`), as a raw descriptor.
    fn from_device() -> io::Result<RawFd> {
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open("/dev/userfaultfd")?;
        /// `_IO(0xAA, 0x00)`.
        const USERFAULTFD_IOC_NEW: libc::c_ulong = 0xAA00;
        // SAFETY: the ioctl takes the new descriptor's flags by value.
        let fd = unsafe { libc::ioctl(dev.as_raw_fd(), USERFAULTFD_IOC_NEW, libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(fd)
    }

    /// Registers `len` bytes at `start` (page-aligned, an existing private anonymous or shared
    /// mapping) in `MISSING` mode: a touch of a page not present there becomes an event. With
    /// write tracking, in `WP` mode too (if the range refuses it, tracking is turned off and
    /// the range registered in `MISSING` mode alone).
    ///
    /// # Errors
    /// The errno of `UFFDIO_REGISTER` (`EINVAL` for a misaligned or unsupported range).
    pub fn register(&mut self, start: *mut c_void, len: usize) -> io::Result<()> {
        if self.tracks_writes {
            let mode = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP;
            match self.register_mode(start, len, mode) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    tracing::info!(
                        "userfaultfd write protection refused ({e}): not tracking writes"
                    );
                    self.tracks_writes = false;
                }
            }
        }
        self.register_mode(start, len, UFFDIO_REGISTER_MODE_MISSING)
    }

    fn register_mode(&self, start: *mut c_void, len: usize, mode: u32) -> io::Result<()> {
        let mut reg = uffdio_register {
            range: uffdio_range {
                start: start as u64,
                len: len as u64,
            },
            mode: mode.into(),
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER reads and writes a `uffdio_register`, which `reg` is; it only
        // changes how faults on the range are handled, never the memory's contents.
        unsafe { self.ioctl(UFFDIO_REGISTER, &mut reg) }?;
        Ok(())
    }

    /// `UFFDIO_COPY`: atomically fills the missing pages at `dst` with `len` bytes from `src`
    /// and wakes the threads faulting on them. Returns the bytes copied (`len`).
    ///
    /// # Errors
    /// `EEXIST` when the first page of the range is already present; `EAGAIN` when some pages
    /// were copied but a later one was present (or the mappings changed); others per
    /// `ioctl_userfaultfd(2)`.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes; `dst` must be page-aligned, inside a range
    /// registered with this object, and `len` a multiple of the page size. The pages at `dst`
    /// change under any reference to them.
    pub unsafe fn copy(
        &self,
        src: *const c_void,
        dst: *mut c_void,
        len: usize,
    ) -> io::Result<usize> {
        // SAFETY: the caller's contract.
        unsafe { self.copy_mode(src, dst, len, 0) }
    }

    /// As [`Uffd::copy`], and the pages are installed write-protected when writes are tracked
    /// ([`Uffd::tracks_writes`]; otherwise a plain copy): their first write clears the bit
    /// (see the module doc). Returns the bytes copied and whether they are write-protected.
    ///
    /// # Errors
    /// As [`Uffd::copy`].
    ///
    /// # Safety
    /// As [`Uffd::copy`].
    pub unsafe fn copy_write_protected(
        &self,
        src: *const c_void,
        dst: *mut c_void,
        len: usize,
    ) -> io::Result<(usize, bool)> {
        let mode = if self.tracks_writes {
            UFFDIO_COPY_MODE_WP
        } else {
            0
        };
        // SAFETY: the caller's contract.
        let n = unsafe { self.copy_mode(src, dst, len, mode) }?;
        Ok((n, self.tracks_writes))
    }

    /// # Safety
    /// As [`Uffd::copy`].
    unsafe fn copy_mode(
        &self,
        src: *const c_void,
        dst: *mut c_void,
        len: usize,
        mode: u32,
    ) -> io::Result<usize> {
        let mut copy = uffdio_copy {
            dst: dst as u64,
            src: src as u64,
            len: len as u64,
            mode: mode.into(),
            copy: 0,
        };
        // SAFETY: UFFDIO_COPY reads and writes a `uffdio_copy`, which `copy` is; the memory it
        // reads and fills is the caller's contract.
        unsafe { self.ioctl(UFFDIO_COPY, &mut copy) }?;
        Ok(copy.copy as usize)
    }

    /// `UFFDIO_ZEROPAGE`: maps zero pages on the missing pages of `len` bytes at `dst` and
    /// wakes the threads faulting on them. Returns the bytes zeroed (`len`).
    ///
    /// # Errors
    /// `EEXIST` when the first page of the range is already present; others per
    /// `ioctl_userfaultfd(2)`.
    ///
    /// # Safety
    /// `dst` must be page-aligned, inside a range registered with this object, and `len` a
    /// multiple of the page size. The pages at `dst` change under any reference to them.
    pub unsafe fn zeropage(&self, dst: *mut c_void, len: usize) -> io::Result<usize> {
        let mut zero = uffdio_zeropage {
            range: uffdio_range {
                start: dst as u64,
                len: len as u64,
            },
            mode: 0,
            zeropage: 0,
        };
        // SAFETY: UFFDIO_ZEROPAGE reads and writes a `uffdio_zeropage`, which `zero` is; the
        // memory it fills is the caller's contract.
        unsafe { self.ioctl(UFFDIO_ZEROPAGE, &mut zero) }?;
        Ok(zero.zeropage as usize)
    }

    /// Reads one event, blocking until there is one. `Ok(None)` when the read was interrupted
    /// (`EINTR`) or found nothing (`EAGAIN`): read again.
    ///
    /// # Errors
    /// The errno of `read(2)`, or a short read.
    pub fn read_event(&self) -> io::Result<Option<Event>> {
        let mut msg = std::mem::MaybeUninit::<uffd_msg>::uninit();
        let size = std::mem::size_of::<uffd_msg>();
        // SAFETY: the kernel writes at most `size` bytes, the size of `msg`'s storage.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), msg.as_mut_ptr().cast(), size) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EINTR) | Some(libc::EAGAIN) => Ok(None),
                _ => Err(e),
            };
        }
        if n as usize != size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("short read from userfaultfd: {n} of {size} bytes"),
            ));
        }
        // SAFETY: the kernel filled all of `msg`, plain integers for which any bytes are valid.
        let msg = unsafe { msg.assume_init() };
        let event = msg.event;
        if u32::from(event) != UFFD_EVENT_PAGEFAULT {
            return Ok(Some(Event::Other { event }));
        }
        // SAFETY: a `UFFD_EVENT_PAGEFAULT` message carries its `pagefault` member (read by
        // value: the message is packed).
        let pf = unsafe { msg.arg.pagefault };
        Ok(Some(Event::Pagefault {
            addr: pf.address,
            flags: pf.flags,
        }))
    }

    /// `ioctl(fd, request, arg)`, the errno as an error.
    ///
    /// # Safety
    /// `T` must be the struct `request` takes, and what the ioctl does to memory other than
    /// `arg` must be sound.
    unsafe fn ioctl<T>(&self, request: u32, arg: &mut T) -> io::Result<()> {
        // SAFETY: the caller's contract; `arg` is a valid, exclusive `T`.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), request as _, arg as *mut T) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Bit 57 of a `/proc/PID/pagemap` entry: the page is uffd write-protected.
const PAGEMAP_UFFD_WP: u64 = 1 << 57;

/// For each of the `pages` pages of this process's memory from `start` (page-aligned),
/// whether it has been written since it was installed write-protected: true for a page whose
/// uffd write-protect bit is clear (written, installed without the bit, or not present), read
/// from `/proc/self/pagemap` in chunks.
///
/// # Errors
/// Opening or reading `/proc/self/pagemap`.
pub fn written_pages(start: *const c_void, pages: usize) -> io::Result<Vec<bool>> {
    use std::os::unix::fs::FileExt;
    let map = std::fs::File::open("/proc/self/pagemap")?;
    let first = start as u64 / 4096;
    let mut out = Vec::with_capacity(pages);
    let mut buf = vec![0u8; 8 * 32768];
    while out.len() < pages {
        let n = (pages - out.len()).min(buf.len() / 8);
        let bytes = &mut buf[..n * 8];
        map.read_exact_at(bytes, (first + out.len() as u64) * 8)?;
        out.extend(bytes.chunks_exact(8).map(|e| {
            let v = u64::from_le_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]);
            v & PAGEMAP_UFFD_WP == 0
        }));
    }
    Ok(out)
}

impl AsFd for Uffd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linux_raw_sys::general::UFFD_PAGEFAULT_FLAG_WRITE;

    const PAGE: usize = 4096;

    #[test]
    fn ioctl_numbers_and_layout_are_the_kernels() {
        assert_eq!(UFFDIO_API, 0xc018_aa3f);
        assert_eq!(UFFDIO_REGISTER, 0xc020_aa00);
        assert_eq!(UFFDIO_COPY, 0xc028_aa03);
        assert_eq!(UFFDIO_ZEROPAGE, 0xc020_aa04);
        assert_eq!(std::mem::size_of::<uffd_msg>(), 32);
        assert_eq!(std::mem::size_of::<uffdio_copy>(), 40);
    }

    /// A userfaultfd, or `None` (after the skip line) where userfaultfd(2) is not permitted.
    fn uffd_or_skip() -> Option<Uffd> {
        match Uffd::new() {
            Ok(u) => Some(u),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::ENOSYS)) => {
                assert!(
                    std::env::var("TORPOR_REQUIRE_KVM").as_deref() != Ok("1"),
                    "TORPOR_REQUIRE_KVM=1 but userfaultfd(2) failed: {e}"
                );
                eprintln!("skipped: userfaultfd not available ({e})");
                None
            }
            Err(e) => panic!("userfaultfd: {e}"),
        }
    }

    /// The next event, within 10 s (so a broken registration fails instead of hanging).
    fn next_fault(uffd: &Uffd) -> (u64, u64) {
        let mut pfd = libc::pollfd {
            fd: uffd.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, 10_000) };
        assert_eq!(n, 1, "no userfaultfd event within 10 s");
        match uffd.read_event().expect("reading an event") {
            Some(Event::Pagefault { addr, flags }) => (addr, flags),
            other => panic!("expected a page fault, got {other:?}"),
        }
    }

    #[test]
    fn serves_faults_with_copy_and_zeropage() {
        let Some(mut uffd) = uffd_or_skip() else {
            return;
        };
        let pages = 6;
        // Never unmapped on a failure, so a fault thread still running then touches mapped
        // memory.
        let base = anonymous(pages) as usize;
        uffd.register(base as *mut c_void, pages * PAGE)
            .expect("UFFDIO_REGISTER");

        let mut pipe = [0; 2];
        // SAFETY: `pipe` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
        let said = b"from a kernel copy";
        // SAFETY: `said` is readable for its length; the pipe's write end is open.
        let w = unsafe { libc::write(pipe[1], said.as_ptr().cast(), said.len()) };
        assert_eq!(w, said.len() as isize);

        // The toucher: page 0 read by user code, page 1 written by user code, page 2 written by
        // the kernel (a pipe read into it).
        let toucher = std::thread::spawn(move || {
            let mut p0 = vec![0u8; PAGE];
            let mut p1 = vec![0u8; PAGE];
            let mut p2 = vec![0u8; PAGE];
            // SAFETY: pages 0..3 of the mapping, which outlives this thread (joined, or never
            // unmapped); each access blocks until the test serves its fault.
            unsafe {
                std::ptr::copy_nonoverlapping(base as *const u8, p0.as_mut_ptr(), PAGE);
                std::ptr::write_volatile((base + PAGE + 8) as *mut u8, 0x5a);
                std::ptr::copy_nonoverlapping((base + PAGE) as *const u8, p1.as_mut_ptr(), PAGE);
                let n = libc::read(pipe[0], (base + 2 * PAGE) as *mut c_void, PAGE);
                std::ptr::copy_nonoverlapping(
                    (base + 2 * PAGE) as *const u8,
                    p2.as_mut_ptr(),
                    PAGE,
                );
                (p0, p1, p2, n)
            }
        });

        let pattern: Vec<u8> = (0..PAGE).map(|i| (i * 7 + 3) as u8).collect();
        // Page 0: a read fault, served by a copy.
        let (addr, flags) = next_fault(&uffd);
        assert_eq!(addr, base as u64);
        assert_eq!(
            flags & u64::from(UFFD_PAGEFAULT_FLAG_WRITE),
            0,
            "a read fault"
        );
        // SAFETY: `pattern` has a page; page 0 is in the registered range, referenced by nothing.
        let n = unsafe { uffd.copy(pattern.as_ptr().cast(), base as *mut c_void, PAGE) };
        assert_eq!(n.expect("UFFDIO_COPY"), PAGE);
        // Page 1: a write fault, served by a zero page.
        let (addr, flags) = next_fault(&uffd);
        assert_eq!(addr, (base + PAGE) as u64);
        assert_ne!(
            flags & u64::from(UFFD_PAGEFAULT_FLAG_WRITE),
            0,
            "a write fault"
        );
        // SAFETY: page 1 is in the registered range, referenced by nothing.
        let n = unsafe { uffd.zeropage((base + PAGE) as *mut c_void, PAGE) };
        assert_eq!(n.expect("UFFDIO_ZEROPAGE"), PAGE);
        // Page 2: a fault from the kernel's copy to user memory (not user-mode only), a copy.
        let (addr, _) = next_fault(&uffd);
        assert_eq!(addr, (base + 2 * PAGE) as u64);
        // SAFETY: as for page 0.
        let n = unsafe {
            uffd.copy(
                pattern.as_ptr().cast(),
                (base + 2 * PAGE) as *mut c_void,
                PAGE,
            )
        };
        assert_eq!(n.expect("UFFDIO_COPY"), PAGE);

        let (p0, p1, p2, read) = toucher.join().expect("the toucher thread");
        assert_eq!(p0, pattern);
        let mut want1 = vec![0u8; PAGE];
        want1[8] = 0x5a;
        assert_eq!(p1, want1);
        assert_eq!(read, said.len() as isize);
        assert_eq!(&p2[..said.len()], said);
        assert_eq!(&p2[said.len()..], &pattern[said.len()..]);

        // Present pages: EEXIST from both operations.
        // SAFETY: as above; the kernel refuses to touch a present page.
        let e = unsafe { uffd.copy(pattern.as_ptr().cast(), base as *mut c_void, PAGE) };
        assert_eq!(
            e.expect_err("copy onto a present page").raw_os_error(),
            Some(libc::EEXIST)
        );
        // SAFETY: as above.
        let e = unsafe { uffd.zeropage((base + PAGE) as *mut c_void, PAGE) };
        assert_eq!(
            e.expect_err("zeropage onto a present page").raw_os_error(),
            Some(libc::EEXIST)
        );
        // A run whose second page is present: the first is copied, then EAGAIN.
        // SAFETY: page 5 is in the registered range, referenced by nothing.
        let n = unsafe { uffd.zeropage((base + 5 * PAGE) as *mut c_void, PAGE) };
        assert_eq!(n.expect("UFFDIO_ZEROPAGE ahead of a fault"), PAGE);
        let two: Vec<u8> = pattern.iter().chain(&pattern).copied().collect();
        // SAFETY: `two` has two pages; pages 4 and 5 are in the registered range.
        let e = unsafe {
            uffd.copy(
                two.as_ptr().cast(),
                (base + 4 * PAGE) as *mut c_void,
                2 * PAGE,
            )
        };
        assert_eq!(
            e.expect_err("copy onto a partly present run")
                .raw_os_error(),
            Some(libc::EAGAIN)
        );
        // SAFETY: page 4 is present now (copied above); no thread touches the mapping any more.
        let p4 = unsafe { std::slice::from_raw_parts((base + 4 * PAGE) as *const u8, PAGE) };
        assert_eq!(p4, &pattern[..]);

        // SAFETY: the mapping made above; the toucher thread has ended.
        unsafe {
            libc::close(pipe[0]);
            libc::close(pipe[1]);
            libc::munmap(base as *mut c_void, pages * PAGE);
        }
    }

    /// A fresh private anonymous mapping of `pages` pages (unmapped by the caller).
    fn anonymous(pages: usize) -> *mut c_void {
        // SAFETY: a fresh mapping; nothing else uses the range.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                pages * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        base
    }

    #[test]
    fn without_asking_for_it_nothing_is_write_protected() {
        if uffd_or_skip().is_none() {
            return;
        }
        let mut plain = Uffd::with_features(0).expect("userfaultfd");
        assert!(!plain.tracks_writes());
        let pages = 2;
        let base = anonymous(pages);
        plain.register(base, pages * PAGE).expect("UFFDIO_REGISTER");
        let data = vec![1u8; PAGE];
        // SAFETY: page 0 is a missing page of the registered range; `data` has a page.
        let (_, wp) = unsafe { plain.copy_write_protected(data.as_ptr().cast(), base, PAGE) }
            .expect("UFFDIO_COPY");
        assert!(!wp);
        // A write goes through at once (a write-protected page would wait for an answer).
        // SAFETY: page 0 is present.
        unsafe { std::ptr::write_volatile(base.cast::<u8>(), 2) };
        // SAFETY: the mapping is this test's own.
        unsafe { libc::munmap(base, pages * PAGE) };
    }

    #[test]
    fn write_protected_copies_track_writes() {
        if uffd_or_skip().is_none() {
            return;
        }
        let mut uffd =
            Uffd::with_features(UFFD_FEATURE_WP_ASYNC.into()).expect("userfaultfd with WP_ASYNC");
        let pages = 4;
        let base = anonymous(pages);
        uffd.register(base, pages * PAGE).expect("UFFDIO_REGISTER");
        assert!(
            uffd.tracks_writes(),
            "Linux 6.7 and later track writes asynchronously"
        );
        let data = vec![0x42u8; 3 * PAGE];
        // SAFETY: pages 0..3 are missing pages of the registered range; `data` has 3 pages.
        let (n, wp) = unsafe { uffd.copy_write_protected(data.as_ptr().cast(), base, 3 * PAGE) }
            .expect("UFFDIO_COPY");
        assert_eq!((n, wp), (3 * PAGE, true));
        let written = |w: &[bool]| w.iter().map(|&b| b as u8).collect::<Vec<_>>();
        // Page 3 is not present: "written" (nothing to trust).
        assert_eq!(written(&written_pages(base, pages).unwrap()), [0, 0, 0, 1]);
        // A read leaves the bit; a store by user code, or by the kernel on the process's
        // behalf (a read(2) into the page), clears it without any event.
        // SAFETY: pages 0..3 are present pages of the mapping.
        unsafe {
            assert_eq!(std::ptr::read_volatile((base as *const u8).add(PAGE)), 0x42);
            std::ptr::write_volatile((base as *mut u8).add(8), 1);
        }
        let mut pipe = [0; 2];
        // SAFETY: `pipe` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
        // SAFETY: one byte from a static; then a read into page 2 of the mapping.
        unsafe {
            assert_eq!(libc::write(pipe[1], b"x".as_ptr().cast(), 1), 1);
            assert_eq!(
                libc::read(pipe[0], base.cast::<u8>().add(2 * PAGE).cast(), 1),
                1
            );
        }
        assert_eq!(written(&written_pages(base, pages).unwrap()), [1, 0, 1, 1]);
        // SAFETY: the descriptors and mapping are this test's own.
        unsafe {
            libc::close(pipe[0]);
            libc::close(pipe[1]);
            libc::munmap(base, pages * PAGE);
        }
    }
}
