//! The stub's two seccomp programs, assembled by hand (classic BPF over `struct seccomp_data`).
//!
//! - The **base filter** (installed by the stub's init code, inherited by every thread):
//!   kills the process for any `arch` but x86-64 (`int 0x80`, 32-bit code), allows exactly the
//!   stub's own calls, each only from the address after its own `syscall` instruction in the stub
//!   code and with its fixed arguments, and traps (`SECCOMP_RET_TRAP`, SIGSYS) everything else.
//!   Sites: the mapper's `futex` wait, `mmap`, `munmap`, `mprotect`, `clone` and completion
//!   `write`; its shared-window calls (below); a new thread's `sigaltstack` and `seccomp`; the
//!   handler's.
//! - Shared windows (the mapper's own sites): `recvmsg` only on [`REPLY_FD`] into the reply
//!   page's fixed message header with `MSG_DONTWAIT`; `dup3` only of [`RECV_FD`] to a window
//!   slot descriptor (`WINDOW_FD_BASE..WINDOW_FD_END`), flags 0; `close` of [`RECV_FD`] (one
//!   site) or of a window slot (another); the window `mmap` only `MAP_SHARED|MAP_FIXED` below
//!   `USER_END` of a writable slot, or of a read-only slot without `PROT_WRITE`.
//! - The **application filter** (stacked by each application thread before it first runs
//!   application code): traps everything except the handler's `futex` (WAIT/WAKE),
//!   `rt_sigreturn` and `exit`, from the handler's sites only.
//!
//! Application code may jump to the stub's `syscall` instructions with its own registers; it
//! then gets at most a futex call, a sigreturn or the exit of its own thread. The mapper's
//! `mmap`/`munmap`/`mprotect`/`clone` are reachable only by the mapper thread (the application
//! filter traps them), and `mmap` only with `MAP_SHARED|MAP_FIXED` of the guest memfd or a window slot
//! below `USER_END`.
//!
//! A read-only slot's descriptor may still be a writable open file: the filter sees the `mmap`
//! only, not a later `mprotect` of the mapping, which the kernel allows for a shared mapping of
//! a writable file. The holder therefore attaches read-only windows through a read-only open
//! file when it can (see [`crate::StubProcess::attach_window`]).

use crate::stub::asm::Meta;
use crate::sysmsg::{
    CODE_ADDR, MEM_FD, RECV_FD, RECV_FLAGS, REPLY_ADDR, REPLY_FD, REPLY_MSGHDR, THREAD_CLONE_FLAGS,
    USER_END, WINDOW_FD_BASE, WINDOW_FD_END, WINDOW_RW_BASE,
};

/// `struct sock_filter`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockFilter {
    /// Opcode.
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Operand.
    pub k: u32,
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGE_K: u16 = 0x35;
const BPF_JSET_K: u16 = 0x45;
const BPF_RET_K: u16 = 0x06;

/// `SECCOMP_RET_KILL_PROCESS`.
pub const RET_KILL_PROCESS: u32 = 0x8000_0000;
/// `SECCOMP_RET_TRAP`.
pub const RET_TRAP: u32 = 0x0003_0000;
/// `SECCOMP_RET_ALLOW`.
pub const RET_ALLOW: u32 = 0x7fff_0000;
/// `AUDIT_ARCH_X86_64`.
pub const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;

const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_IP_LO: u32 = 8;
const OFF_IP_HI: u32 = 12;
const fn arg_lo(i: u32) -> u32 {
    16 + 8 * i
}
const fn arg_hi(i: u32) -> u32 {
    16 + 8 * i + 4
}

/// A condition on one argument of an allowed call.
#[derive(Clone, Copy, Debug)]
enum Check {
    /// The whole 64-bit argument equals the value.
    Eq(u32, u64),
    /// The argument is below `USER_END` (its high half is).
    BelowUserEnd(u32),
    /// The low half is 0 or 1 (`FUTEX_WAIT`, `FUTEX_WAKE`, shared).
    FutexWaitWake(u32),
    /// The argument is a window slot descriptor (high half 0, low half in
    /// `WINDOW_FD_BASE..WINDOW_FD_END`).
    WindowSlot(u32),
    /// Argument `fd` is a writable window slot, or a read-only one and argument `prot` lacks
    /// `PROT_WRITE`.
    WindowMmap {
        /// The descriptor's argument.
        fd: u32,
        /// The protection's argument.
        prot: u32,
    },
}

/// One allowed call: from the site (address after its `syscall`), with the number and checks.
#[derive(Clone, Copy, Debug)]
struct Rule {
    site: u64,
    nr: u32,
    checks: &'static [Check],
}

fn stmt(code: u16, k: u32) -> SockFilter {
    SockFilter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}
fn jump(code: u16, k: u32, jt: u8, jf: u8) -> SockFilter {
    SockFilter { code, jt, jf, k }
}

/// Emits "if A != k: return `ret`".
fn require_eq(p: &mut Vec<SockFilter>, k: u32, ret: u32) {
    p.push(jump(BPF_JEQ_K, k, 1, 0));
    p.push(stmt(BPF_RET_K, ret));
}

fn emit_check(p: &mut Vec<SockFilter>, c: Check) {
    match c {
        Check::Eq(i, v) => {
            p.push(stmt(BPF_LD_W_ABS, arg_lo(i)));
            require_eq(p, v as u32, RET_TRAP);
            p.push(stmt(BPF_LD_W_ABS, arg_hi(i)));
            require_eq(p, (v >> 32) as u32, RET_TRAP);
        }
        Check::BelowUserEnd(i) => {
            p.push(stmt(BPF_LD_W_ABS, arg_hi(i)));
            // if hi >= USER_END >> 32: trap
            p.push(jump(BPF_JGE_K, (USER_END >> 32) as u32, 0, 1));
            p.push(stmt(BPF_RET_K, RET_TRAP));
        }
        Check::FutexWaitWake(i) => {
            p.push(stmt(BPF_LD_W_ABS, arg_lo(i)));
            p.push(jump(BPF_JEQ_K, libc::FUTEX_WAIT as u32, 2, 0));
            p.push(jump(BPF_JEQ_K, libc::FUTEX_WAKE as u32, 1, 0));
            p.push(stmt(BPF_RET_K, RET_TRAP));
        }
        Check::WindowSlot(i) => {
            p.push(stmt(BPF_LD_W_ABS, arg_hi(i)));
            require_eq(p, 0, RET_TRAP);
            p.push(stmt(BPF_LD_W_ABS, arg_lo(i)));
            // if lo < WINDOW_FD_BASE: trap
            p.push(jump(BPF_JGE_K, WINDOW_FD_BASE as u32, 1, 0));
            p.push(stmt(BPF_RET_K, RET_TRAP));
            // if lo >= WINDOW_FD_END: trap
            p.push(jump(BPF_JGE_K, WINDOW_FD_END as u32, 0, 1));
            p.push(stmt(BPF_RET_K, RET_TRAP));
        }
        Check::WindowMmap { fd, prot } => {
            p.push(stmt(BPF_LD_W_ABS, arg_hi(fd)));
            require_eq(p, 0, RET_TRAP);
            p.push(stmt(BPF_LD_W_ABS, arg_lo(fd)));
            // fd >= WINDOW_FD_END: trap
            p.push(jump(BPF_JGE_K, WINDOW_FD_END as u32, 0, 1));
            p.push(stmt(BPF_RET_K, RET_TRAP));
            // a writable slot: done (jump past the read-only slot's five instructions)
            p.push(jump(BPF_JGE_K, WINDOW_RW_BASE as u32, 5, 0));
            // below the read-only slots: trap
            p.push(jump(BPF_JGE_K, WINDOW_FD_BASE as u32, 1, 0));
            p.push(stmt(BPF_RET_K, RET_TRAP));
            // a read-only slot: PROT_WRITE traps (the kernel reads only the low bits of prot)
            p.push(stmt(BPF_LD_W_ABS, arg_lo(prot)));
            p.push(jump(BPF_JSET_K, libc::PROT_WRITE as u32, 0, 1));
            p.push(stmt(BPF_RET_K, RET_TRAP));
        }
    }
}

fn program(rules: &[Rule]) -> Vec<SockFilter> {
    let mut p = Vec::new();
    p.push(stmt(BPF_LD_W_ABS, OFF_ARCH));
    require_eq(&mut p, AUDIT_ARCH_X86_64, RET_KILL_PROCESS);
    p.push(stmt(BPF_LD_W_ABS, OFF_IP_HI));
    require_eq(&mut p, (CODE_ADDR >> 32) as u32, RET_TRAP);
    for r in rules {
        let mut body = Vec::new();
        body.push(stmt(BPF_LD_W_ABS, OFF_NR));
        require_eq(&mut body, r.nr, RET_TRAP);
        for &c in r.checks {
            emit_check(&mut body, c);
        }
        body.push(stmt(BPF_RET_K, RET_ALLOW));
        p.push(stmt(BPF_LD_W_ABS, OFF_IP_LO));
        let skip = u8::try_from(body.len()).expect("filter rule too long");
        p.push(jump(BPF_JEQ_K, (CODE_ADDR + r.site) as u32, 0, skip));
        p.extend(body);
    }
    p.push(stmt(BPF_RET_K, RET_TRAP));
    p
}

const FUTEX_CHECKS: &[Check] = &[Check::FutexWaitWake(1)];

fn handler_rules(m: &Meta) -> Vec<Rule> {
    vec![
        Rule {
            site: m.site_h_wake,
            nr: libc::SYS_futex as u32,
            checks: FUTEX_CHECKS,
        },
        Rule {
            site: m.site_h_wait,
            nr: libc::SYS_futex as u32,
            checks: FUTEX_CHECKS,
        },
        Rule {
            site: m.site_h_sigreturn,
            nr: libc::SYS_rt_sigreturn as u32,
            checks: &[],
        },
        Rule {
            site: m.site_h_exit,
            nr: libc::SYS_exit as u32,
            checks: &[],
        },
    ]
}

/// The base filter for a blob with label offsets `m`.
pub(crate) fn base_filter(m: &Meta) -> Vec<SockFilter> {
    const MMAP: &[Check] = &[
        Check::BelowUserEnd(0),
        Check::Eq(3, (libc::MAP_SHARED | libc::MAP_FIXED) as u64),
        Check::Eq(4, MEM_FD),
    ];
    const BELOW: &[Check] = &[Check::BelowUserEnd(0)];
    const CLONE: &[Check] = &[Check::Eq(0, THREAD_CLONE_FLAGS)];
    const SECCOMP: &[Check] = &[Check::Eq(0, 1), Check::Eq(1, 0)];
    const WRITE: &[Check] = &[Check::Eq(0, REPLY_FD), Check::Eq(2, 8)];
    const MMAP_WINDOW: &[Check] = &[
        Check::BelowUserEnd(0),
        Check::Eq(3, (libc::MAP_SHARED | libc::MAP_FIXED) as u64),
        Check::WindowMmap { fd: 4, prot: 2 },
    ];
    const RECVMSG: &[Check] = &[
        Check::Eq(0, REPLY_FD),
        Check::Eq(1, REPLY_ADDR + REPLY_MSGHDR),
        Check::Eq(2, RECV_FLAGS),
    ];
    const DUP3: &[Check] = &[Check::Eq(0, RECV_FD), Check::WindowSlot(1), Check::Eq(2, 0)];
    const CLOSE_RECV: &[Check] = &[Check::Eq(0, RECV_FD)];
    const CLOSE_WINDOW: &[Check] = &[Check::WindowSlot(0)];
    let mut rules = vec![
        Rule {
            site: m.site_m_write,
            nr: libc::SYS_write as u32,
            checks: WRITE,
        },
        Rule {
            site: m.site_m_wait,
            nr: libc::SYS_futex as u32,
            checks: FUTEX_CHECKS,
        },
        Rule {
            site: m.site_m_mmap,
            nr: libc::SYS_mmap as u32,
            checks: MMAP,
        },
        Rule {
            site: m.site_m_munmap,
            nr: libc::SYS_munmap as u32,
            checks: BELOW,
        },
        Rule {
            site: m.site_m_mprotect,
            nr: libc::SYS_mprotect as u32,
            checks: BELOW,
        },
        Rule {
            site: m.site_m_clone,
            nr: libc::SYS_clone as u32,
            checks: CLONE,
        },
        Rule {
            site: m.site_m_recvmsg,
            nr: libc::SYS_recvmsg as u32,
            checks: RECVMSG,
        },
        Rule {
            site: m.site_m_dup3,
            nr: libc::SYS_dup3 as u32,
            checks: DUP3,
        },
        Rule {
            site: m.site_m_close_recv,
            nr: libc::SYS_close as u32,
            checks: CLOSE_RECV,
        },
        Rule {
            site: m.site_m_close_window,
            nr: libc::SYS_close as u32,
            checks: CLOSE_WINDOW,
        },
        Rule {
            site: m.site_m_mmap_window,
            nr: libc::SYS_mmap as u32,
            checks: MMAP_WINDOW,
        },
        Rule {
            site: m.site_t_altstack,
            nr: libc::SYS_sigaltstack as u32,
            checks: &[],
        },
        Rule {
            site: m.site_t_seccomp,
            nr: libc::SYS_seccomp as u32,
            checks: SECCOMP,
        },
    ];
    rules.extend(handler_rules(m));
    program(&rules)
}

/// The application threads' filter.
pub(crate) fn app_filter(m: &Meta) -> Vec<SockFilter> {
    program(&handler_rules(m))
}

/// `SECCOMP_RET_ERRNO | EPERM`.
pub const RET_EPERM: u32 = 0x0005_0000 | libc::EPERM as u32;

/// The system calls the stub factory's filter lets through: the factory's own (serving
/// requests, forking stubs) and those of a stub's code, from the fork to its last thread's
/// exit.
pub const FACTORY_SYSCALLS: [i64; 32] = [
    // The factory's: reporting, serving requests, a stub's control memfd and socketpair.
    libc::SYS_getpid,
    libc::SYS_getppid,
    libc::SYS_sendmsg,
    libc::SYS_recvmsg,
    libc::SYS_memfd_create,
    libc::SYS_ftruncate,
    libc::SYS_fcntl,
    libc::SYS_socketpair,
    libc::SYS_clone3,
    libc::SYS_close,
    libc::SYS_exit_group,
    // A stub's set-up before its own filter (`child_main` and the init code).
    libc::SYS_prctl,
    libc::SYS_setrlimit,
    libc::SYS_prlimit64,
    libc::SYS_rseq,
    libc::SYS_set_robust_list,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_dup2,
    libc::SYS_close_range,
    libc::SYS_mremap,
    libc::SYS_seccomp,
    // A stub's own calls under its filter (see the module documentation).
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_write,
    libc::SYS_futex,
    libc::SYS_clone,
    libc::SYS_dup3,
    libc::SYS_sigaltstack,
    libc::SYS_rt_sigreturn,
    libc::SYS_exit,
];

/// The stub factory's filter (`crate::factory`): allows [`FACTORY_SYSCALLS`] and fails any
/// other call with `EPERM`, whatever the architecture.
///
/// The factory installs it once it has confined itself, so every stub it forks inherits it,
/// under the stub's own filters. A stub's filters still decide for the stub: their `TRAP`
/// and `KILL` outrank `ERRNO`, so an application's system calls trap as before, and the
/// stub's own calls are all on the list. What the filter confines is the factory itself: it
/// shares the holder's memory (`CLONE_VM`), so an application that took the holder over
/// could take the factory over too; it would find no more calls there than those listed,
/// which the holder's own allowlist has.
///
/// A binary search over the sorted numbers (a few instructions per call: it runs on every
/// system call an application makes).
pub(crate) fn factory_filter() -> Vec<SockFilter> {
    let mut nrs: Vec<u32> = FACTORY_SYSCALLS.iter().map(|&n| n as u32).collect();
    nrs.sort_unstable();
    nrs.dedup();
    let mut p = vec![stmt(BPF_LD_W_ABS, OFF_ARCH)];
    require_eq(&mut p, AUDIT_ARCH_X86_64, RET_EPERM);
    p.push(stmt(BPF_LD_W_ABS, OFF_NR));
    p.extend(search(&nrs));
    p
}

/// Allows the (sorted) numbers `nrs`, fails others with `EPERM`: "A >= middle" splits the list
/// until four or fewer are left, compared one by one.
fn search(nrs: &[u32]) -> Vec<SockFilter> {
    if nrs.len() <= 4 {
        let mut p = Vec::new();
        for (i, &nr) in nrs.iter().enumerate() {
            // Equal: jump past the other comparisons and the EPERM, to the ALLOW.
            p.push(jump(BPF_JEQ_K, nr, (nrs.len() - i) as u8, 0));
        }
        p.push(stmt(BPF_RET_K, RET_EPERM));
        p.push(stmt(BPF_RET_K, RET_ALLOW));
        return p;
    }
    let mid = nrs.len() / 2;
    let (low, high) = (search(&nrs[..mid]), search(&nrs[mid..]));
    let skip = u8::try_from(low.len()).expect("factory filter too long");
    let mut p = vec![jump(BPF_JGE_K, nrs[mid], skip, 0)];
    p.extend(low);
    p.extend(high);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic-BPF interpreter for the subset above, to check the programs' verdicts.
    fn run(p: &[SockFilter], nr: u32, ip: u64, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_le_bytes());
        data[4..8].copy_from_slice(&AUDIT_ARCH_X86_64.to_le_bytes());
        data[8..16].copy_from_slice(&ip.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        let (mut pc, mut a) = (0usize, 0u32);
        loop {
            let i = p[pc];
            pc += 1;
            match i.code {
                BPF_LD_W_ABS => {
                    let o = i.k as usize;
                    a = u32::from_le_bytes(data[o..o + 4].try_into().unwrap());
                }
                BPF_JEQ_K => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
                BPF_JGE_K => pc += usize::from(if a >= i.k { i.jt } else { i.jf }),
                BPF_JSET_K => pc += usize::from(if a & i.k != 0 { i.jt } else { i.jf }),
                BPF_RET_K => return i.k,
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    const CTRL_ADDR_FOR_TEST: u64 = crate::sysmsg::CTRL_ADDR;

    /// The factory's filter allows exactly its list, whatever the arguments and site, fails
    /// every other number with EPERM (x32's included), and is short on every path.
    #[test]
    fn factory_filter_verdicts() {
        let p = factory_filter();
        let allowed: Vec<u32> = FACTORY_SYSCALLS.iter().map(|&n| n as u32).collect();
        for nr in (0..600).chain([0x4000_0000, 0x4000_0001, u32::MAX]) {
            let want = if allowed.contains(&nr) {
                RET_ALLOW
            } else {
                RET_EPERM
            };
            assert_eq!(run(&p, nr, 0x1234, [u64::MAX; 6]), want, "nr {nr}");
        }
        assert!(p.len() < 96, "{} instructions", p.len());
    }

    #[test]
    fn verdicts() {
        let m = crate::stub::asm::meta();
        let base = base_filter(&m);
        let app = app_filter(&m);
        let at = |off: u64| CODE_ADDR + off;
        let mmap_args = [0x40_0000, 4096, 5, 0x11, MEM_FD, 0];
        assert_eq!(run(&base, 9, at(m.site_m_mmap), mmap_args), RET_ALLOW);
        assert_eq!(run(&app, 9, at(m.site_m_mmap), mmap_args), RET_TRAP);
        // wrong flags, wrong fd, stub region, wrong site, wrong number
        assert_eq!(
            run(
                &base,
                9,
                at(m.site_m_mmap),
                [0x40_0000, 4096, 5, 0x12, MEM_FD, 0]
            ),
            RET_TRAP
        );
        assert_eq!(
            run(
                &base,
                9,
                at(m.site_m_mmap),
                [0x40_0000, 4096, 5, 0x11, 3, 0]
            ),
            RET_TRAP
        );
        assert_eq!(
            run(
                &base,
                9,
                at(m.site_m_mmap),
                [CODE_ADDR, 4096, 5, 0x11, MEM_FD, 0]
            ),
            RET_TRAP
        );
        assert_eq!(run(&base, 9, at(m.site_m_munmap), mmap_args), RET_TRAP);
        assert_eq!(run(&base, 10, at(m.site_m_mmap), mmap_args), RET_TRAP);
        assert_eq!(run(&base, 9, 0x40_0000, mmap_args), RET_TRAP);
        let write = [REPLY_FD, CTRL_ADDR_FOR_TEST, 8, 0, 0, 0];
        assert_eq!(run(&base, 1, at(m.site_m_write), write), RET_ALLOW);
        assert_eq!(run(&app, 1, at(m.site_m_write), write), RET_TRAP);
        assert_eq!(
            run(&base, 1, at(m.site_m_write), [1, 0, 8, 0, 0, 0]),
            RET_TRAP
        );
        assert_eq!(
            run(&base, 1, at(m.site_m_write), [REPLY_FD, 0, 9, 0, 0, 0]),
            RET_TRAP
        );
        let futex = [0, 1, 1, 0, 0, 0];
        assert_eq!(run(&base, 202, at(m.site_h_wake), futex), RET_ALLOW);
        assert_eq!(run(&app, 202, at(m.site_h_wake), futex), RET_ALLOW);
        assert_eq!(
            run(&app, 202, at(m.site_h_wait), [0, 0, 1, 0, 0, 0]),
            RET_ALLOW
        );
        assert_eq!(
            run(&app, 202, at(m.site_h_wait), [0, 6, 1, 0, 0, 0]),
            RET_TRAP
        );
        assert_eq!(run(&app, 15, at(m.site_h_sigreturn), [0; 6]), RET_ALLOW);
        assert_eq!(run(&app, 15, at(m.site_h_wait), [0; 6]), RET_TRAP);
        assert_eq!(run(&app, 39, at(m.site_t_first), [0; 6]), RET_TRAP);
        assert_eq!(
            run(
                &base,
                56,
                at(m.site_m_clone),
                [THREAD_CLONE_FLAGS, 0, 0, 0, 0, 0]
            ),
            RET_ALLOW
        );
        assert_eq!(
            run(&base, 56, at(m.site_m_clone), [0x11, 0, 0, 0, 0, 0]),
            RET_TRAP
        );
    }

    #[test]
    fn window_verdicts() {
        let m = crate::stub::asm::meta();
        let base = base_filter(&m);
        let app = app_filter(&m);
        let at = |off: u64| CODE_ADDR + off;
        let site = at(m.site_m_mmap_window);
        let (r, w, x) = (
            libc::PROT_READ as u64,
            libc::PROT_WRITE as u64,
            libc::PROT_EXEC as u64,
        );
        let mmap = |prot: u64, flags: u64, fd: u64| [0x40_0000, 4096, prot, flags, fd, 0x3000];
        let ro_first = WINDOW_FD_BASE;
        let ro_last = WINDOW_RW_BASE - 1;
        let rw_first = WINDOW_RW_BASE;
        let rw_last = WINDOW_FD_END - 1;
        // Read-only slots: read (and exec) only.
        for fd in [ro_first, ro_first + 1, ro_last] {
            assert_eq!(run(&base, 9, site, mmap(r, 0x11, fd)), RET_ALLOW, "{fd}");
            assert_eq!(run(&base, 9, site, mmap(r | x, 0x11, fd)), RET_ALLOW);
            assert_eq!(run(&base, 9, site, mmap(0, 0x11, fd)), RET_ALLOW);
            assert_eq!(run(&base, 9, site, mmap(r | w, 0x11, fd)), RET_TRAP, "{fd}");
            assert_eq!(run(&base, 9, site, mmap(w, 0x11, fd)), RET_TRAP);
            assert_eq!(run(&base, 9, site, mmap(w | 1 << 32, 0x11, fd)), RET_TRAP);
        }
        // Writable slots: any protection.
        for fd in [rw_first, rw_last] {
            assert_eq!(
                run(&base, 9, site, mmap(r | w, 0x11, fd)),
                RET_ALLOW,
                "{fd}"
            );
            assert_eq!(run(&base, 9, site, mmap(r, 0x11, fd)), RET_ALLOW);
        }
        // Not a slot: the guest memfd, the control memfd, the socket, out of range, high bits.
        for fd in [
            MEM_FD,
            3,
            REPLY_FD,
            RECV_FD,
            ro_first - 1,
            WINDOW_FD_END,
            WINDOW_FD_END + 100,
            ro_first | 1 << 32,
            rw_first | 1 << 32,
            u64::MAX,
        ] {
            assert_eq!(run(&base, 9, site, mmap(r, 0x11, fd)), RET_TRAP, "{fd:#x}");
        }
        // Flags, address, site, filter.
        assert_eq!(run(&base, 9, site, mmap(r, 0x12, rw_first)), RET_TRAP);
        assert_eq!(run(&base, 9, site, mmap(r, 0x01, rw_first)), RET_TRAP);
        let mut high = mmap(r, 0x11, rw_first);
        high[0] = USER_END;
        assert_eq!(run(&base, 9, site, high), RET_TRAP);
        assert_eq!(
            run(&base, 9, at(m.site_m_mmap), mmap(r, 0x11, rw_first)),
            RET_TRAP,
            "the guest memfd's site maps the guest memfd only"
        );
        assert_eq!(run(&app, 9, site, mmap(r, 0x11, rw_first)), RET_TRAP);

        // recvmsg: the socket, the fixed header, MSG_DONTWAIT; from its site only.
        let hdr = REPLY_ADDR + REPLY_MSGHDR;
        let recv = at(m.site_m_recvmsg);
        let ok = [REPLY_FD, hdr, RECV_FLAGS, 0, 0, 0];
        assert_eq!(run(&base, 47, recv, ok), RET_ALLOW);
        assert_eq!(run(&app, 47, recv, ok), RET_TRAP);
        assert_eq!(run(&base, 47, at(m.site_m_dup3), ok), RET_TRAP);
        for args in [
            [MEM_FD, hdr, RECV_FLAGS, 0, 0, 0],
            [REPLY_FD, 0x40_0000, RECV_FLAGS, 0, 0, 0],
            [REPLY_FD, hdr, 0, 0, 0, 0],
        ] {
            assert_eq!(run(&base, 47, recv, args), RET_TRAP, "{args:?}");
        }

        // dup3: from RECV_FD to a slot, flags 0.
        let dup3 = at(m.site_m_dup3);
        for fd in [ro_first, ro_last, rw_first, rw_last] {
            assert_eq!(run(&base, 292, dup3, [RECV_FD, fd, 0, 0, 0, 0]), RET_ALLOW);
            assert_eq!(run(&app, 292, dup3, [RECV_FD, fd, 0, 0, 0, 0]), RET_TRAP);
        }
        for args in [
            [RECV_FD, MEM_FD, 0, 0, 0, 0],
            [RECV_FD, REPLY_FD, 0, 0, 0, 0],
            [RECV_FD, ro_first - 1, 0, 0, 0, 0],
            [RECV_FD, WINDOW_FD_END, 0, 0, 0, 0],
            [RECV_FD, ro_first | 1 << 32, 0, 0, 0, 0],
            [3, ro_first, 0, 0, 0, 0],
            [MEM_FD, rw_first, 0, 0, 0, 0],
            [RECV_FD, ro_first, libc::O_CLOEXEC as u64, 0, 0, 0],
        ] {
            assert_eq!(run(&base, 292, dup3, args), RET_TRAP, "{args:?}");
        }

        // close: RECV_FD at its site, slots at theirs; nothing else.
        let close_recv = at(m.site_m_close_recv);
        let close_window = at(m.site_m_close_window);
        let one = |fd: u64| [fd, 0, 0, 0, 0, 0];
        assert_eq!(run(&base, 3, close_recv, one(RECV_FD)), RET_ALLOW);
        assert_eq!(run(&base, 3, close_recv, one(ro_first)), RET_TRAP);
        assert_eq!(run(&base, 3, close_window, one(RECV_FD)), RET_TRAP);
        for fd in [1, 2, 3, MEM_FD, REPLY_FD, ro_first - 1, WINDOW_FD_END] {
            assert_eq!(run(&base, 3, close_recv, one(fd)), RET_TRAP);
            assert_eq!(run(&base, 3, close_window, one(fd)), RET_TRAP);
        }
        for fd in [ro_first, rw_last] {
            assert_eq!(run(&base, 3, close_window, one(fd)), RET_ALLOW);
            assert_eq!(run(&app, 3, close_window, one(fd)), RET_TRAP);
        }
    }
}
