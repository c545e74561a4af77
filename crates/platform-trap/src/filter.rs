//! The stub's two seccomp programs, assembled by hand (classic BPF over `struct seccomp_data`).
//!
//! - The **base filter** (installed by the stub's init code, inherited by every thread):
//!   kills the process for any `arch` but x86-64 (`int 0x80`, 32-bit code), allows exactly the
//!   stub's own calls, each only from the address after its own `syscall` instruction in the stub
//!   code and with its fixed arguments, and traps (`SECCOMP_RET_TRAP`, SIGSYS) everything else.
//!   Sites: the mapper's `futex` wait, `mmap`, `munmap`, `mprotect`, `clone` and completion
//!   `write`; a new thread's `sigaltstack` and `seccomp`; the handler's.
//! - The **application filter** (stacked by each application thread before it first runs
//!   application code): traps everything except the handler's `futex` (WAIT/WAKE),
//!   `rt_sigreturn` and `exit`, from the handler's sites only.
//!
//! Application code may jump to the stub's `syscall` instructions with its own registers; it
//! then gets at most a futex call, a sigreturn or the exit of its own thread. The mapper's
//! `mmap`/`munmap`/`mprotect`/`clone` are reachable only by the mapper thread (the application
//! filter traps them), and `mmap` only with `MAP_SHARED|MAP_FIXED` of the guest memfd below
//! `USER_END`.

use crate::stub::asm::Meta;
use crate::sysmsg::{CODE_ADDR, MEM_FD, REPLY_FD, THREAD_CLONE_FLAGS, USER_END};

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
                BPF_RET_K => return i.k,
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    const CTRL_ADDR_FOR_TEST: u64 = crate::sysmsg::CTRL_ADDR;

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
}
