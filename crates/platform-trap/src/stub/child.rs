//! The stub child between `clone3` and the jump into the stub code: the kernel structures it
//! fills, the fork itself, and [`child_main`], raw system calls only (no allocation, no libc
//! state, no locks), as the module doc of `stub` describes step by step.

use super::*;

/// The kernel's `struct sigaction` (x86-64).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct KSigaction {
    pub(crate) handler: u64,
    pub(crate) flags: u64,
    pub(crate) restorer: u64,
    pub(crate) mask: u64,
}

/// The kernel's `struct clone_args` (version 0).
#[repr(C)]
pub(crate) struct CloneArgs {
    pub(crate) flags: u64,
    pub(crate) pidfd: u64,
    pub(crate) child_tid: u64,
    pub(crate) parent_tid: u64,
    pub(crate) exit_signal: u64,
    pub(crate) stack: u64,
    pub(crate) stack_size: u64,
    pub(crate) tls: u64,
}

/// Which side of [`fork_with_pidfd`] returned.
pub(crate) enum Forked {
    /// The new process.
    Child,
    /// The caller, with the new process's pid and pidfd.
    Parent { pid: i32, pidfd: sys::Fd },
}

/// A fork-like `clone3` (no `CLONE_VM`, no new stack, exit signal 0) with `CLONE_PIDFD` and
/// `flags`; `Err(errno)` if it fails. Allocation-free.
///
/// # Safety
/// The child is a copy of this process with only the calling thread in it: on
/// [`Forked::Child`] the caller must run only code that neither allocates nor takes a lock
/// another thread of this process might have held at the fork, and end the process itself.
pub(crate) unsafe fn fork_with_pidfd(flags: u64) -> Result<Forked, i32> {
    let mut pidfd: i32 = -1;
    let args = CloneArgs {
        flags: libc::CLONE_PIDFD as u64 | flags,
        pidfd: &mut pidfd as *mut i32 as u64,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: 0,
        stack: 0,
        stack_size: 0,
        tls: 0,
    };
    // SAFETY: a fork-like clone3 (no CLONE_VM, no stack): the child gets a copy of this
    // process and, by this function's contract, runs only what its caller may run there.
    let pid = unsafe {
        raw(
            libc::SYS_clone3,
            [
                &args as *const CloneArgs as u64,
                size_of::<CloneArgs>() as u64,
                0,
                0,
                0,
                0,
            ],
        )
    };
    match pid {
        0 => Ok(Forked::Child),
        p if p < 0 => Err(-p as i32),
        p => {
            // SAFETY: clone3 stored a new pidfd we own.
            let pidfd = unsafe { sys::Fd::from_raw(pidfd) };
            Ok(Forked::Parent {
                pid: p as i32,
                pidfd,
            })
        }
    }
}

pub(super) const SA_RESTORER: u64 = 0x0400_0000;
pub(super) const RSEQ_SIG: u64 = 0x5305_3053;

/// glibc's rseq registration of the calling thread: (area address, `__rseq_size`), or size 0
/// if this libc registers none or does not say (looked up at run time: glibc ≥ 2.35 exports
/// `__rseq_offset`/`__rseq_size`; other libcs do not).
pub(super) fn rseq_registration() -> (u64, u32) {
    // SAFETY: dlsym with RTLD_DEFAULT and valid C strings; the symbols, when present, are
    // glibc's read-only `ptrdiff_t __rseq_offset` and `unsigned int __rseq_size`.
    unsafe {
        let off = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr());
        let size = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr());
        if off.is_null() || size.is_null() {
            return (0, 0);
        }
        let (off, size) = (*off.cast::<isize>(), *size.cast::<u32>());
        let tp: u64;
        // The thread pointer: glibc's TCB starts with a pointer to itself.
        core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly));
        (tp.wrapping_add_signed(off as i64), size)
    }
}

pub(super) fn sigbit(sig: i32) -> u64 {
    1u64 << (sig - 1)
}

/// Set-up steps of the child, reported in [`REPLY_STAGE`].
pub(super) const STAGE_NAMES: [&str; 13] = [
    "none",
    "PR_SET_PDEATHSIG / parent check",
    "PR_SET_NO_NEW_PRIVS",
    "RLIMIT_CORE / RLIMIT_NOFILE",
    "rseq unregistration",
    "sigaltstack",
    "rt_sigaction",
    "rt_sigprocmask",
    "descriptors",
    "temporary code mapping",
    "mprotect of the temporary code",
    "robust list",
    "vDSO move",
];

/// The child between `clone3` and the jump into the stub code.
///
/// # Safety
/// Only in the child of `clone3`, with `p` prepared by the holder.
pub(super) unsafe fn child_main(p: &ChildPlan) -> ! {
    let fail = |stage: u32, ret: i64| -> ! {
        // SAFETY: the reply page of the inherited shared mapping; then exit.
        unsafe {
            p.reply
                .add(REPLY_ERRNO as usize)
                .cast::<i64>()
                .write_volatile(ret);
            p.reply
                .add(REPLY_STAGE as usize)
                .cast::<u32>()
                .write_volatile(stage);
            raw(
                libc::SYS_exit_group,
                [100 + u64::from(stage), 0, 0, 0, 0, 0],
            );
        }
        #[allow(clippy::empty_loop)]
        loop {}
    };
    // SAFETY: raw system calls on this process only, with pointers into `p`
    // and this stack; the memory they affect (signal state, descriptors, new mappings) is
    // this child's.
    unsafe {
        let r = raw(
            libc::SYS_prctl,
            [
                libc::PR_SET_PDEATHSIG as u64,
                libc::SIGKILL as u64,
                0,
                0,
                0,
                0,
            ],
        );
        if r < 0 {
            fail(1, r);
        }
        let ppid = raw(libc::SYS_getppid, [0; 6]);
        if ppid != p.holder_pid {
            fail(1, ppid);
        }
        let r = raw(
            libc::SYS_prctl,
            [libc::PR_SET_NO_NEW_PRIVS as u64, 1, 0, 0, 0, 0],
        );
        if r < 0 {
            fail(2, r);
        }
        let r = raw(
            libc::SYS_setrlimit,
            [
                libc::RLIMIT_CORE as u64,
                &p.no_core as *const libc::rlimit as u64,
                0,
                0,
                0,
                0,
            ],
        );
        if r < 0 {
            fail(3, r);
        }
        // RLIMIT_NOFILE: room for every window slot and no more (a lower hard limit stays);
        // reported to the holder, which reads it before any application code runs.
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let r = raw(
            libc::SYS_prlimit64,
            [
                0,
                libc::RLIMIT_NOFILE as u64,
                0,
                &mut lim as *mut libc::rlimit as u64,
                0,
                0,
            ],
        );
        if r < 0 {
            fail(3, r);
        }
        let nofile = lim.rlim_max.min(STUB_NOFILE);
        lim = libc::rlimit {
            rlim_cur: nofile,
            rlim_max: nofile,
        };
        let r = raw(
            libc::SYS_prlimit64,
            [
                0,
                libc::RLIMIT_NOFILE as u64,
                &lim as *const libc::rlimit as u64,
                0,
                0,
                0,
            ],
        );
        if r < 0 {
            fail(3, r);
        }
        p.reply
            .add(REPLY_NOFILE as usize)
            .cast::<u64>()
            .write_volatile(nofile);
        if p.rseq_lens[0] != 0 {
            // glibc registered `rseq_area` with a length this code cannot read back: try the
            // lengths glibc versions use. The kernel would write to it after it is unmapped.
            let mut r = -1;
            for len in p.rseq_lens {
                r = raw(libc::SYS_rseq, [p.rseq_area, len, 1, RSEQ_SIG, 0, 0]);
                if r == 0 {
                    break;
                }
            }
            if r != 0 {
                fail(4, r);
            }
        }
        let r = raw(libc::SYS_set_robust_list, [0, 24, 0, 0, 0, 0]);
        if r < 0 {
            fail(11, r);
        }
        let r = raw(
            libc::SYS_sigaltstack,
            [&p.no_altstack as *const libc::stack_t as u64, 0, 0, 0, 0, 0],
        );
        if r < 0 {
            fail(5, r);
        }
        for sig in 1..=64i32 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let act = if HANDLED_SIGNALS.contains(&sig) {
                &p.act
            } else {
                &p.dfl
            };
            let r = raw(
                libc::SYS_rt_sigaction,
                [sig as u64, act as *const KSigaction as u64, 0, 8, 0, 0],
            );
            if r < 0 && HANDLED_SIGNALS.contains(&sig) {
                fail(6, r);
            }
        }
        let r = raw(
            libc::SYS_rt_sigprocmask,
            [
                libc::SIG_SETMASK as u64,
                &p.mask as *const u64 as u64,
                0,
                8,
                0,
                0,
            ],
        );
        if r < 0 {
            fail(7, r);
        }
        // Descriptors: control memfd → 3, guest memfd → 4, reply socket → 5, nothing else.
        // (First above 10, so that moving one does not close another.)
        let mut high = [0i64; 3];
        for (h, fd) in high.iter_mut().zip([p.ctrl_fd, p.mem_fd, p.reply_fd]) {
            *h = raw(
                libc::SYS_fcntl,
                [fd as u64, libc::F_DUPFD as u64, 10, 0, 0, 0],
            );
            if *h < 0 {
                fail(8, *h);
            }
        }
        for (h, fd) in high.iter().zip([CTRL_FD, MEM_FD, REPLY_FD]) {
            let r = raw(libc::SYS_dup2, [*h as u64, fd, 0, 0, 0, 0]);
            if r < 0 {
                fail(8, r);
            }
        }
        let r1 = raw(libc::SYS_close_range, [0, CTRL_FD - 1, 0, 0, 0, 0]);
        let r2 = raw(
            libc::SYS_close_range,
            [REPLY_FD + 1, u64::from(u32::MAX), 0, 0, 0, 0],
        );
        if r1 < 0 || r2 < 0 {
            fail(8, r1.min(r2));
        }
        // The descriptor table grown now to hold every window slot, while this process has
        // one thread: grown later (a window's `dup3` into a slot past the first 64), the
        // kernel would wait for an RCU grace period because the stub's threads share the
        // table, 10-25 ms on this kind of host, in the first touch of a file mapping by every
        // new process.
        if nofile > WINDOW_FD_BASE {
            let top = nofile - 1;
            let r = raw(libc::SYS_dup2, [REPLY_FD, top, 0, 0, 0, 0]);
            if r < 0 {
                fail(8, r);
            }
            let r = raw(libc::SYS_close, [top, 0, 0, 0, 0, 0]);
            if r < 0 {
                fail(8, r);
            }
        }
        // The host's vDSO into the stub's region (see `crate::vdso`).
        for &(from, len, to) in &p.vdso[..p.vdso_moves] {
            let r = raw(
                libc::SYS_mremap,
                [
                    from,
                    len,
                    len,
                    (libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED) as u64,
                    to,
                    0,
                ],
            );
            if r != to as i64 {
                fail(12, r);
            }
        }
        // A temporary copy of the stub code, below the final region (the init code unmaps
        // everything else but the region's vDSO part): at TEMP_CODE_ADDR or lower, in 16 MiB
        // steps, if that is taken (a large mapping of the holder's may cover it), else at
        // one of a few places far below, where a process maps nothing of its own.
        const FAR: [u64; 3] = [0x4000_0000_0000, 0x1000_0000_0000, 0x10_0000_0000];
        let mut temp = 0u64;
        for i in 0..64u64 {
            let base = match i / 16 {
                0 => TEMP_CODE_ADDR,
                k => FAR[(k - 1) as usize],
            };
            let want = base - (i % 16) * 0x100_0000;
            let t = raw(
                libc::SYS_mmap,
                [
                    want,
                    p.temp_len as u64,
                    (libc::PROT_READ | libc::PROT_WRITE) as u64,
                    (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE) as u64,
                    u64::MAX,
                    0,
                ],
            );
            if t == want as i64 {
                temp = want;
                break;
            }
            if t != -i64::from(libc::EEXIST) {
                fail(9, t);
            }
        }
        if temp == 0 {
            fail(9, 0);
        }
        let dst = temp as *mut u8;
        for i in 0..p.blob_len {
            dst.add(i).write_volatile(p.blob.add(i).read());
        }
        let r = raw(
            libc::SYS_mprotect,
            [
                temp,
                p.temp_len as u64,
                (libc::PROT_READ | libc::PROT_EXEC) as u64,
                0,
                0,
                0,
            ],
        );
        if r < 0 {
            fail(10, r);
        }
        core::arch::asm!(
            "jmp {entry}",
            entry = in(reg) temp + p.init_off as u64,
            in("rdi") temp,
            in("rsi") p.temp_len as u64,
            in("rdx") p.blob_len as u64,
            options(noreturn),
        );
    }
}
