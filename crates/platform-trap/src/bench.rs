//! The trap platform's costs, each as a median in nanoseconds: the bare mechanisms (stage T1:
//! native `getpid`, an in-process SIGSYS trap, a cross-process futex hand-off on one CPU and
//! across two) and the stub's system call round trip with no kernel behind it.
//!
//! The bare measurements run in forked children (a seccomp filter cannot be removed; the
//! hand-off needs two processes); they report through a pipe. Timing buffers are allocated
//! before the fork.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::{StubProcess, TrapError, TrapExit};

/// Median of `v` (sorts it).
pub fn median(v: &mut [u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[v.len() / 2]
}

/// Pins thread `tid` (0: the calling thread) to `cpu`.
pub fn pin(tid: i32, cpu: usize) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET stays in bounds for cpu < 1024.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Unpins thread `tid` (0: the calling thread): every online CPU.
pub fn unpin(tid: i32) {
    // SAFETY: as in `pin`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let n = libc::sysconf(libc::_SC_NPROCESSORS_ONLN).max(1) as usize;
        for c in 0..n.min(1024) {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Native `getpid` (a raw system call), median over batches of 64.
pub fn native_getpid_ns(iters: usize) -> u64 {
    const BATCH: usize = 64;
    let mut samples = Vec::with_capacity(iters / BATCH + 1);
    for _ in 0..iters.div_ceil(BATCH) {
        let t = Instant::now();
        for _ in 0..BATCH {
            // SAFETY: getpid has no arguments.
            unsafe { libc::syscall(libc::SYS_getpid) };
        }
        samples.push(t.elapsed().as_nanos() as u64 / BATCH as u64);
    }
    median(&mut samples)
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: a valid two-element array.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(r, 0, "pipe2");
    // SAFETY: two new descriptors we own.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Forks; the child runs `f`, writes its u64 result to the pipe and exits. Returns the
/// result, or 0 if the child failed.
fn in_child(f: impl FnOnce() -> u64) -> u64 {
    let (r, w) = pipe();
    // SAFETY: fork; the child only runs `f` (which uses memory allocated before the fork)
    // and exits with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let v = f();
        // SAFETY: writing 8 bytes from a local to our pipe, then exiting without unwinding.
        unsafe {
            libc::write(w.as_raw_fd(), (&v as *const u64).cast(), 8);
            libc::_exit(0);
        }
    }
    drop(w);
    let mut v = 0u64;
    // SAFETY: reading 8 bytes into a local; then reaping our child.
    unsafe {
        libc::read(r.as_raw_fd(), (&mut v as *mut u64).cast(), 8);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    v
}

extern "C" fn on_sigsys(_: libc::c_int, _: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid ucontext to an SA_SIGINFO handler.
    unsafe {
        let uc = uc.cast::<libc::ucontext_t>();
        (*uc).uc_mcontext.gregs[libc::REG_RAX as usize] = 42;
    }
}

/// One SIGSYS trap and return in-process: a filter traps `getppid`, a handler sets `rax` and
/// returns (through glibc's restorer and `rt_sigreturn`). Median of single calls.
pub fn sigsys_trap_ns(iters: usize) -> u64 {
    let mut samples = vec![0u64; iters];
    in_child(move || {
        // BPF: load nr; if getppid: TRAP; ALLOW.
        let prog = [
            libc::sock_filter {
                code: 0x20,
                jt: 0,
                jf: 0,
                k: 0,
            },
            libc::sock_filter {
                code: 0x15,
                jt: 0,
                jf: 1,
                k: libc::SYS_getppid as u32,
            },
            libc::sock_filter {
                code: 0x06,
                jt: 0,
                jf: 0,
                k: crate::filter::RET_TRAP,
            },
            libc::sock_filter {
                code: 0x06,
                jt: 0,
                jf: 0,
                k: crate::filter::RET_ALLOW,
            },
        ];
        let fprog = libc::sock_fprog {
            len: prog.len() as u16,
            filter: prog.as_ptr().cast_mut(),
        };
        // SAFETY: installs a handler for SIGSYS and a filter on this (forked, single-threaded)
        // child only.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigsys as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGSYS, &sa, std::ptr::null_mut());
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            if libc::syscall(libc::SYS_seccomp, 1, 0, &fprog as *const libc::sock_fprog) != 0 {
                return 0;
            }
        }
        for s in samples.iter_mut() {
            let t = Instant::now();
            // SAFETY: trapped; the handler makes it return 42.
            let r = unsafe { libc::syscall(libc::SYS_getppid) };
            *s = t.elapsed().as_nanos() as u64;
            if r != 42 {
                return 0;
            }
        }
        median(&mut samples)
    })
}

/// A futex ping-pong round trip between two processes over a shared page: one CPU for both
/// (`same_cpu`), or CPUs 0 and 1.
pub fn futex_handoff_ns(iters: usize, same_cpu: bool) -> u64 {
    // SAFETY: a fresh shared anonymous page.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(page, libc::MAP_FAILED);
    // SAFETY: the page is ours, aligned, zeroed; both processes use it only as an atomic.
    let word = unsafe { &*page.cast::<std::sync::atomic::AtomicU32>() };
    let mut samples = vec![0u64; iters];
    let (r, w) = pipe();
    // SAFETY: fork; the child runs the pong loop over the shared page and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let _ = pin(0, 0);
        for _ in 0..iters {
            while word.load(std::sync::atomic::Ordering::Acquire) != 1 {
                crate::sys::futex_wait(word, 0, Some(Duration::from_secs(5)));
            }
            word.store(0, std::sync::atomic::Ordering::Release);
            crate::sys::futex_wake(word, 1);
        }
        // SAFETY: exit without unwinding.
        unsafe { libc::_exit(0) };
    }
    drop((r, w));
    let _ = pin(0, if same_cpu { 0 } else { 1 });
    for s in samples.iter_mut() {
        let t = Instant::now();
        word.store(1, std::sync::atomic::Ordering::Release);
        crate::sys::futex_wake(word, 1);
        while word.load(std::sync::atomic::Ordering::Acquire) != 0 {
            crate::sys::futex_wait(word, 1, Some(Duration::from_secs(5)));
        }
        *s = t.elapsed().as_nanos() as u64;
    }
    unpin(0);
    // SAFETY: reap our child, unmap our page.
    unsafe {
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        libc::munmap(page, 4096);
    }
    median(&mut samples)
}

/// The guest of [`stub_getpid_ns`]: `1: mov eax, 39; syscall; jmp 1b`.
pub const GETPID_LOOP: [u8; 9] = [0xb8, 0x27, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xeb, 0xf7];

/// How to place the holder thread and the stub thread for [`stub_getpid_ns`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Neither is pinned.
    Free,
    /// Both on CPU 0.
    SameCpu,
    /// Holder on CPU 0, stub thread on CPU 1.
    CrossCpu,
}

/// The stub's system call round trip: a guest loop calling `getpid`, each call answered by
/// the holder (`rax` = 1234). `spin` is the holder's spin before sleeping, `stub_spin` the
/// stub handler's (in `pause` iterations). Median of single switches.
///
/// # Errors
/// Any [`TrapError`] of the stub.
pub fn stub_getpid_ns(
    iters: usize,
    placement: Placement,
    spin: Duration,
    stub_spin: u64,
) -> Result<u64, TrapError> {
    let mem = crate::sys::memfd("torpor-bench-mem", 1 << 20)?;
    crate::sys::write_fd(&mem, 0, &GETPID_LOOP)?;
    let stub = StubProcess::spawn(std::os::fd::AsFd::as_fd(&mem))?;
    stub.map(0x40_0000, 4096, 0, libc::PROT_READ | libc::PROT_EXEC)?;
    stub.set_stub_spin(stub_spin);
    let mut t = stub.new_thread()?;
    t.set_spin(spin);
    match placement {
        Placement::Free => {}
        Placement::SameCpu => {
            let _ = pin(0, 0);
            let _ = pin(t.tid(), 0);
        }
        Placement::CrossCpu => {
            let _ = pin(0, 0);
            let _ = pin(t.tid(), 1);
        }
    }
    t.regs_mut().regs.rip = 0x40_0000;
    let mut samples = vec![0u64; iters];
    let mut result = Ok(());
    for s in samples.iter_mut() {
        let start = Instant::now();
        match t.switch() {
            Ok(TrapExit::Syscall) => {}
            Ok(_) => {
                result = Err(TrapError::Protocol("unexpected exit in the getpid loop"));
                break;
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        }
        *s = start.elapsed().as_nanos() as u64;
        t.regs_mut().regs.rax = 1234;
    }
    unpin(0);
    result?;
    Ok(median(&mut samples))
}
