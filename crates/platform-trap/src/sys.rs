//! Thin host-call helpers: raw system calls (usable between `clone` and the jump into the stub
//! code, where libc's errno and locks must not be touched), futexes on shared memory, pidfds,
//! CPU facts, and a shared mapping that unmaps itself.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

/// `AT_HWCAP2`.
pub const AT_HWCAP2: u64 = 26;
/// `HWCAP2_FSGSBASE`: the kernel lets user space use `rdfsbase`/`wrfsbase`.
pub const HWCAP2_FSGSBASE: u64 = 1 << 1;
/// `AT_MINSIGSTKSZ`: the kernel's minimum signal stack size for this CPU.
pub const AT_MINSIGSTKSZ: u64 = 51;
/// `PIDFD_THREAD` (= `O_EXCL`): a pidfd for a thread rather than a process (Linux ≥ 6.9).
pub const PIDFD_THREAD: u64 = libc::O_EXCL as u64;
/// `PIDFD_SIGNAL_THREAD`.
pub const PIDFD_SIGNAL_THREAD: u64 = 1;

/// A raw system call with up to six arguments; returns the kernel's value (`-errno` on
/// failure). Touches no memory but what the call itself does.
///
/// # Safety
/// The call and its arguments must be valid for the calling context (pointers valid, no
/// call that breaks Rust's assumptions about this process's memory).
#[inline(always)]
pub unsafe fn raw(nr: i64, a: [u64; 6]) -> i64 {
    let ret: i64;
    // SAFETY: the caller vouches for the call; `syscall` clobbers only rax, rcx, r11 and
    // memory the call writes.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr => ret,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// Converts a raw return value into a `Result`.
pub fn check(ret: i64) -> io::Result<i64> {
    if (-4095..0).contains(&ret) {
        Err(io::Error::from_raw_os_error(-ret as i32))
    } else {
        Ok(ret)
    }
}

/// `futex(word, op, val, timeout)` (shared: the word may be in memory another process maps);
/// returns the raw result.
///
/// # Safety
/// `timeout` is 0 or the address of a valid `timespec`.
unsafe fn futex(word: &AtomicU32, op: i32, val: u32, timeout: u64) -> i64 {
    // SAFETY: `word` is a valid, aligned u32; the caller vouches for `timeout`.
    unsafe {
        raw(
            libc::SYS_futex,
            [
                word.as_ptr() as u64,
                op as u64,
                u64::from(val),
                timeout,
                0,
                0,
            ],
        )
    }
}

/// `FUTEX_WAIT` (shared: the word may be in memory another process maps) while `*word ==
/// val`, for at most `timeout`. Returns the raw result (`-ETIMEDOUT`, `-EAGAIN`, `-EINTR`, 0).
pub fn futex_wait(word: &AtomicU32, val: u32, timeout: Option<Duration>) -> i64 {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tsp = ts.as_ref().map_or(0, |t| t as *const libc::timespec as u64);
    // SAFETY: `tsp` is null or a valid timespec.
    unsafe { futex(word, libc::FUTEX_WAIT, val, tsp) }
}

/// `FUTEX_WAKE` (shared) of up to `n` waiters on `word`.
pub fn futex_wake(word: &AtomicU32, n: u32) {
    // SAFETY: no timeout.
    unsafe { futex(word, libc::FUTEX_WAKE, n, 0) };
}

/// Whether the process or thread behind `pidfd` has exited (its pidfd is readable).
pub fn pidfd_exited(pidfd: BorrowedFd<'_>) -> bool {
    pidfd_wait(pidfd, Duration::ZERO)
}

/// Waits up to `timeout` for the pidfd to become readable (the task exited).
pub fn pidfd_wait(pidfd: BorrowedFd<'_>, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    r > 0 && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
}

/// `poll` for `POLLIN` on `fd` and on `pidfd` until `deadline` (retried on `EINTR`): the two
/// `revents`, both 0 once the deadline has passed.
///
/// # Errors
/// The `poll` error.
pub(crate) fn poll_with_pidfd(
    fd: BorrowedFd<'_>,
    pidfd: BorrowedFd<'_>,
    deadline: Instant,
) -> io::Result<[i16; 2]> {
    loop {
        let mut fds = [
            libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: two valid pollfds.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if r >= 0 {
            return Ok([fds[0].revents, fds[1].revents]);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// A descriptor this process owns, closed by a raw `close` when dropped. For the code that
/// runs in the stub factory ([`crate::factory`]), which shares the holder's memory but has no
/// libc thread state of its own: libc's `close` (which `OwnedFd`'s drop calls) reads and
/// writes the calling thread's state. The holder takes one over with `OwnedFd::from`.
#[derive(Debug)]
pub struct Fd(RawFd);

impl Fd {
    /// Takes ownership of `fd`.
    ///
    /// # Safety
    /// `fd` is an open descriptor that nothing else owns.
    pub unsafe fn from_raw(fd: RawFd) -> Fd {
        Fd(fd)
    }
}

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

impl AsFd for Fd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: open for as long as `self` lives.
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { raw(libc::SYS_close, [self.0 as u64, 0, 0, 0, 0, 0]) };
    }
}

impl From<Fd> for OwnedFd {
    fn from(fd: Fd) -> OwnedFd {
        let fd = std::mem::ManuallyDrop::new(fd);
        // SAFETY: ownership moves from `fd`, which is not dropped.
        unsafe { OwnedFd::from_raw_fd(fd.0) }
    }
}

/// A close-on-exec `AF_UNIX` `SOCK_SEQPACKET` socketpair. Raw system calls only: usable in a
/// process forked from a multi-threaded one, and in the stub factory.
///
/// # Errors
/// The `socketpair` error.
pub(crate) fn seqpacket_pair() -> io::Result<(Fd, Fd)> {
    let mut pair: [RawFd; 2] = [-1; 2];
    // SAFETY: socketpair writes two descriptors into `pair`.
    check(unsafe {
        raw(
            libc::SYS_socketpair,
            [
                libc::AF_UNIX as u64,
                (libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC) as u64,
                0,
                pair.as_mut_ptr() as u64,
                0,
                0,
            ],
        )
    })?;
    // SAFETY: two new descriptors we own.
    Ok(unsafe { (Fd::from_raw(pair[0]), Fd::from_raw(pair[1])) })
}

/// Reaps the exited child behind `pidfd` (`waitid(P_PIDFD, WEXITED | __WALL | flags)`, e.g.
/// `WNOHANG` in `flags`), ignoring the result.
pub(crate) fn pidfd_reap(pidfd: BorrowedFd<'_>, flags: i32) {
    // SAFETY: a zeroed siginfo for waitid to fill.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pidfd and siginfo.
    unsafe {
        libc::waitid(
            libc::P_PIDFD,
            pidfd.as_raw_fd() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::__WALL | flags,
        )
    };
}

/// `pidfd_open(pid, flags)`.
pub fn pidfd_open(pid: i32, flags: u64) -> io::Result<OwnedFd> {
    // SAFETY: no memory arguments.
    let fd = check(unsafe { raw(libc::SYS_pidfd_open, [pid as u64, flags, 0, 0, 0, 0]) })?;
    // SAFETY: a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `pidfd_send_signal(pidfd, sig, NULL, flags)`.
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: i32, flags: u64) -> io::Result<()> {
    // SAFETY: no memory arguments (null siginfo).
    check(unsafe {
        raw(
            libc::SYS_pidfd_send_signal,
            [pidfd.as_raw_fd() as u64, sig as u64, 0, flags, 0, 0],
        )
    })
    .map(drop)
}

/// `getauxval(t)`.
pub fn auxval(t: u64) -> u64 {
    // SAFETY: getauxval reads the process's auxiliary vector; no preconditions.
    unsafe { libc::getauxval(t as libc::c_ulong) as u64 }
}

/// The size of the standard XSAVE image of [`user_xfeatures`], the image Linux writes in this
/// process's signal frames, or `None` without OSXSAVE. It is not CPUID 0xD.0's EBX, the size
/// for all of XCR0: on a CPU with AMX that counts the 8 KiB of tile data, which a process
/// only carries once it asked for it.
pub fn xsave_size() -> Option<usize> {
    let l1 = core::arch::x86_64::__cpuid(1);
    if l1.ecx & (1 << 27) == 0 {
        return None;
    }
    Some(xsave_size_of(user_xfeatures(), |i| {
        let d = core::arch::x86_64::__cpuid_count(0xd, i);
        (d.eax, d.ebx)
    }))
}

/// The standard-layout XSAVE size of the features `mask`, given each feature's (size, offset)
/// (CPUID 0xD.i's EAX and EBX): the legacy area and header (576 bytes), up to the end of the
/// furthest feature.
fn xsave_size_of(mask: u64, size_offset: impl Fn(u32) -> (u32, u32)) -> usize {
    (2..64u32)
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| {
            let (size, offset) = size_offset(i);
            offset as usize + size as usize
        })
        .fold(576, usize::max)
}

/// The XSAVE features this process's state carries, in its signal frames among others: XCR0
/// less the features the OS enables only on request (those whose CPUID 0xD.i ECX bit 2 says
/// XFD may disable them: AMX's tile data), which Linux gives a process only after an
/// `arch_prctl(ARCH_REQ_XCOMP_PERM)` that neither torpor nor its stubs make (and torpor
/// refuses to applications). Requires OSXSAVE, checked by [`xsave_size`].
pub fn user_xfeatures() -> u64 {
    let xcr0 = xcr0();
    (2..64u32)
        .filter(|i| xcr0 & (1 << i) != 0)
        .filter(|&i| core::arch::x86_64::__cpuid_count(0xd, i).ecx & (1 << 2) != 0)
        .fold(xcr0, |m, i| m & !(1 << i))
}

/// One line of `/proc/PID/maps`: `START-END PERMS OFFSET DEV INODE [PATH]`.
pub(crate) struct MapsLine<'a> {
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// The path or special name (`[heap]`, `[vdso]`…), empty for an anonymous mapping.
    pub(crate) path: &'a str,
}

impl MapsLine<'_> {
    /// The line parsed; `None` if malformed or empty (`START >= END`).
    pub(crate) fn parse(line: &str) -> Option<MapsLine<'_>> {
        let mut f = line.split_whitespace();
        let (start, end) = f.next()?.split_once('-')?;
        let start = u64::from_str_radix(start, 16).ok()?;
        let end = u64::from_str_radix(end, 16).ok()?;
        let perms = f.next()?.as_bytes();
        if start >= end || perms.len() != 4 {
            return None;
        }
        Some(MapsLine {
            start,
            end,
            path: f.nth(3).unwrap_or(""),
        })
    }
}

/// A mapping in the holder (of a file, shared, or anonymous), unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; all accesses go through raw pointers and
// atomics, so sharing the handle between threads is sound.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` from offset 0, read-write, shared.
    pub fn shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
        Mapping::new(len, libc::MAP_SHARED, fd.as_raw_fd())
    }

    /// A private anonymous read-write mapping of `len` bytes (`MAP_NORESERVE`: its pages are
    /// allocated as touched).
    pub fn anonymous(len: usize) -> io::Result<Mapping> {
        Mapping::new(
            len,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
        )
    }

    /// `len` bytes mapped read-write with `flags` from `fd`'s offset 0. A raw call: the stub
    /// factory maps stubs' control pages with it.
    fn new(len: usize, flags: i32, fd: RawFd) -> io::Result<Mapping> {
        // SAFETY: a fresh mapping chosen by the kernel; no existing memory is affected.
        let p = check(unsafe {
            raw(
                libc::SYS_mmap,
                [
                    0,
                    len as u64,
                    (libc::PROT_READ | libc::PROT_WRITE) as u64,
                    flags as u64,
                    fd as u64,
                    0,
                ],
            )
        })?;
        Ok(Mapping {
            ptr: NonNull::new(p as *mut u8)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?,
            len,
        })
    }

    /// The address of byte `off` (`off` must be below the length).
    pub fn at(&self, off: u64) -> *mut u8 {
        assert!((off as usize) < self.len);
        // SAFETY: in bounds, checked above.
        unsafe { self.ptr.as_ptr().add(off as usize) }
    }

    /// The address of the `T` at `off`, which must be aligned for `T` and wholly in bounds.
    fn aligned<T>(&self, off: u64) -> *mut T {
        assert!(
            (off as usize).is_multiple_of(align_of::<T>())
                && off as usize + size_of::<T>() <= self.len
        );
        self.at(off).cast()
    }

    /// The u32 at `off` as an atomic (for futex words).
    pub fn atomic_u32(&self, off: u64) -> &AtomicU32 {
        // SAFETY: aligned, in bounds, lives as long as `self`; other processes access it
        // only as a 32-bit word too.
        unsafe { &*self.aligned::<AtomicU32>(off) }
    }

    /// Reads the u64 at `off` (volatile: the other side may write concurrently).
    pub fn read_u64(&self, off: u64) -> u64 {
        // SAFETY: aligned and in bounds (checked by `aligned`).
        unsafe { self.aligned::<u64>(off).read_volatile() }
    }

    /// Writes the u64 at `off`.
    pub fn write_u64(&self, off: u64, v: u64) {
        // SAFETY: aligned and in bounds (checked by `aligned`).
        unsafe { self.aligned::<u64>(off).write_volatile(v) }
    }

    /// Reads the u32 at `off`.
    pub fn read_u32(&self, off: u64) -> u32 {
        // SAFETY: aligned and in bounds (checked by `aligned`).
        unsafe { self.aligned::<u32>(off).read_volatile() }
    }

    /// Writes the u32 at `off`.
    pub fn write_u32(&self, off: u64, v: u32) {
        // SAFETY: aligned and in bounds (checked by `aligned`).
        unsafe { self.aligned::<u32>(off).write_volatile(v) }
    }

    /// Copies `dst.len()` bytes from `off` (once, volatile, 8 bytes at a time where aligned).
    pub fn read_bytes(&self, off: u64, dst: &mut [u8]) {
        assert!(off as usize + dst.len() <= self.len);
        let src = self.at(off);
        let words = if off & 7 == 0 { dst.len() / 8 } else { 0 };
        for i in 0..words {
            // SAFETY: in bounds (checked above) and 8-byte aligned (`off` is).
            let w = unsafe { src.add(8 * i).cast::<u64>().read_volatile() };
            dst[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
        }
        for (i, b) in dst.iter_mut().enumerate().skip(8 * words) {
            // SAFETY: in bounds, checked above.
            *b = unsafe { src.add(i).read_volatile() };
        }
    }

    /// Copies `src` to `off`.
    pub fn write_bytes(&self, off: u64, src: &[u8]) {
        assert!(off as usize + src.len() <= self.len);
        let dst = self.at(off);
        let words = if off & 7 == 0 { src.len() / 8 } else { 0 };
        for i in 0..words {
            let w = u64::from_le_bytes(src[8 * i..8 * i + 8].try_into().expect("8 bytes"));
            // SAFETY: in bounds (checked above) and 8-byte aligned (`off` is).
            unsafe { dst.add(8 * i).cast::<u64>().write_volatile(w) };
        }
        for (i, b) in src.iter().enumerate().skip(8 * words) {
            // SAFETY: in bounds, checked above.
            unsafe { dst.add(i).write_volatile(*b) };
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping; nothing borrows it any more.
        unsafe {
            raw(
                libc::SYS_munmap,
                [self.ptr.as_ptr() as u64, self.len as u64, 0, 0, 0, 0],
            )
        };
    }
}

/// A new memfd of `size` bytes (close-on-exec), e.g. guest memory for tests and benches.
///
/// # Errors
/// [`crate::TrapError::Host`] if `memfd_create` or `ftruncate` fails.
pub fn memfd(name: &str, size: u64) -> Result<OwnedFd, crate::TrapError> {
    let cname =
        std::ffi::CString::new(name).map_err(|_| crate::TrapError::Invalid("memfd name"))?;
    // SAFETY: a valid C string.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(crate::TrapError::Host {
            call: "memfd_create",
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: a new descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: valid descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } < 0 {
        return Err(crate::TrapError::Host {
            call: "ftruncate",
            source: io::Error::last_os_error(),
        });
    }
    Ok(fd)
}

/// Writes `data` at `off` of `fd` (`pwrite`, all of it).
///
/// # Errors
/// [`crate::TrapError::Host`] if `pwrite` fails or writes short.
pub fn write_fd(fd: &OwnedFd, off: u64, data: &[u8]) -> Result<(), crate::TrapError> {
    // SAFETY: a valid buffer of `data.len()` bytes.
    let n = unsafe {
        libc::pwrite(
            fd.as_raw_fd(),
            data.as_ptr().cast(),
            data.len(),
            off as libc::off_t,
        )
    };
    if n != data.len() as isize {
        return Err(crate::TrapError::Host {
            call: "pwrite",
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// XCR0: the XSAVE features the OS enabled (requires OSXSAVE, checked by [`xsave_size`]).
fn xcr0() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: XGETBV with ECX = 0 is valid when CR4.OSXSAVE is set (CPUID.1:ECX.OSXSAVE,
    // which callers check first through `xsave_size`).
    unsafe {
        core::arch::asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") hi,
            options(nomem, nostack, preserves_flags));
    }
    u64::from(hi) << 32 | u64::from(lo)
}

/// The MXCSR bits this CPU supports (FXSAVE's MXCSR_MASK; 0xffbf if it reports 0).
pub fn mxcsr_mask() -> u32 {
    #[repr(C, align(16))]
    struct Area([u8; 512]);
    let mut area = Area([0; 512]);
    // SAFETY: FXSAVE writes 512 bytes to a 16-byte-aligned buffer we own.
    unsafe {
        core::arch::asm!("fxsave64 [{}]", in(reg) area.0.as_mut_ptr(), options(nostack, preserves_flags));
    }
    match u32::from_le_bytes([area.0[28], area.0[29], area.0[30], area.0[31]]) {
        0 => 0xffbf,
        m => m,
    }
}

/// Room for the control message of up to [`MAX_PASSED_FDS`] descriptors (`SCM_RIGHTS`).
#[repr(C, align(8))]
struct CmsgBuf([u8; 64]);

/// The most descriptors [`send_with_fds`] and [`recv_with_fds`] pass in one message.
pub const MAX_PASSED_FDS: usize = 4;

/// `sendmsg` of `data` with `fds` attached (`SCM_RIGHTS`), `MSG_NOSIGNAL` (a closed peer is
/// `EPIPE`, not SIGPIPE). Raw system calls only, allocation-free: usable in a process forked
/// from a multi-threaded one, and in the stub factory. Retries on `EINTR`.
///
/// # Errors
/// The `sendmsg` error; `EINVAL` for more than [`MAX_PASSED_FDS`] descriptors.
pub fn send_with_fds(sock: BorrowedFd<'_>, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > MAX_PASSED_FDS {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut cbuf = CmsgBuf([0; 64]);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: a zeroed msghdr is valid (no name, no iovecs, no control).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let bytes = std::mem::size_of_val(fds) as u32;
        // SAFETY: pure size computations.
        let (space, len) = unsafe { (libc::CMSG_SPACE(bytes), libc::CMSG_LEN(bytes)) };
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        msg.msg_controllen = space as usize;
        // SAFETY: the control buffer is 8-aligned and large enough for one header and
        // MAX_PASSED_FDS descriptors (checked above), so the first header and its data lie
        // inside it.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = len as usize;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(c),
                bytes as usize,
            );
        }
    }
    loop {
        // SAFETY: msghdr, iovec and control buffer are valid for the call.
        let n = unsafe {
            raw(
                libc::SYS_sendmsg,
                [
                    sock.as_raw_fd() as u64,
                    &msg as *const libc::msghdr as u64,
                    libc::MSG_NOSIGNAL as u64,
                    0,
                    0,
                    0,
                ],
            )
        };
        if n != -i64::from(libc::EINTR) {
            return check(n).map(|_| ());
        }
    }
}

/// `recvmsg` of one message into `data`, with the descriptors it carries stored in `fds`
/// (close-on-exec; the first [`MAX_PASSED_FDS`], the others are closed). Returns the data
/// length (0 at the end of the stream) and the number of descriptors the message carried.
/// Raw system calls only, allocation-free (usable in the stub factory); retries on `EINTR`.
/// A truncated message or control part is an error (`EMSGSIZE`), its descriptors closed.
///
/// # Errors
/// The `recvmsg` error, or `EMSGSIZE`.
pub fn recv_with_fds(
    sock: BorrowedFd<'_>,
    data: &mut [u8],
    fds: &mut [Option<Fd>; MAX_PASSED_FDS],
) -> io::Result<(usize, usize)> {
    let mut cbuf = CmsgBuf([0; 64]);
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: a zeroed msghdr is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = cbuf.0.len();
    let n = loop {
        // SAFETY: msghdr, iovec and control buffer are valid for the call.
        let n = unsafe {
            raw(
                libc::SYS_recvmsg,
                [
                    sock.as_raw_fd() as u64,
                    &mut msg as *mut libc::msghdr as u64,
                    libc::MSG_CMSG_CLOEXEC as u64,
                    0,
                    0,
                    0,
                ],
            )
        };
        if n != -i64::from(libc::EINTR) {
            break check(n)? as usize;
        }
    };
    let mut count = 0;
    // SAFETY: walking the control messages the kernel wrote into our buffer, within
    // `msg_controllen`; each SCM_RIGHTS payload is an array of new descriptors we own.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let payload = (*c).cmsg_len - libc::CMSG_LEN(0) as usize;
                let p = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..payload / size_of::<RawFd>() {
                    let fd = Fd::from_raw(p.add(i).read_unaligned());
                    if count < MAX_PASSED_FDS {
                        fds[count] = Some(fd);
                    }
                    // Beyond the room: counted, dropped (closed) here.
                    count += 1;
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        for f in fds.iter_mut() {
            *f = None;
        }
        return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
    }
    Ok((n, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CPUID 0xD.i (size, offset) of a Sapphire Rapids: AVX, AVX-512's three, PKRU, AMX's two.
    fn sapphire_rapids(i: u32) -> (u32, u32) {
        match i {
            2 => (256, 576),
            5 => (64, 1088),
            6 => (512, 1152),
            7 => (1024, 1664),
            9 => (8, 2688),
            17 => (64, 2752),
            18 => (8192, 2816),
            _ => (0, 0),
        }
    }

    #[test]
    fn the_xsave_size_ends_at_the_furthest_feature_asked_for() {
        let avx512 = 0b10_1110_0111;
        assert_eq!(xsave_size_of(0b11, sapphire_rapids), 576);
        assert_eq!(xsave_size_of(0b111, sapphire_rapids), 832);
        assert_eq!(xsave_size_of(avx512, sapphire_rapids), 2696);
        // Without AMX's tile data (a process that did not ask for it): 2816, not 11008.
        assert_eq!(xsave_size_of(avx512 | 1 << 17, sapphire_rapids), 2816);
        assert_eq!(
            xsave_size_of(avx512 | 1 << 17 | 1 << 18, sapphire_rapids),
            11008
        );
    }

    #[test]
    fn this_host_s_user_features_fit_the_platform_s_fpu_state() {
        let Some(size) = xsave_size() else {
            return; // no XSAVE: the platform refuses this host
        };
        let f = user_xfeatures();
        assert_eq!(f & 0b11, 0b11, "x87 and SSE: {f:#x}");
        assert_eq!(f & !xcr0(), 0);
        assert!((576..=platform::FPU_STATE_SIZE).contains(&size), "{size}");
    }
}
