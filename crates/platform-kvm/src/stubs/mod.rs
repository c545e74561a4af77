//! Ring-0 stubs: the only code that runs in guest ring 0, a few instructions each.
//!
//! Ring 0 is emulated on the machines torpor targets (about 1 µs an instruction), so every stub
//! exits to the host at once with an `out` whose port number names the event:
//!
//! | stub | entered by | does | port |
//! |---|---|---|---|
//! | syscall entry | `syscall` (LSTAR) | `ud2`, which enters exception stub 6 | [`PORT_EXCEPTION_BASE`] + 6 |
//! | exception `v` (0-31) | IDT gate `v` | `out` (twice: see [`EXIT_TWICE`]) | [`PORT_EXCEPTION_BASE`] + `v` |
//! | spurious (32-255) | IDT gate | `out` | [`PORT_SPURIOUS`] |
//! | PTE sync | the host, with a batch | rewrites dirty PTE runs in place, reloads CR3, `out` | [`PORT_PTE_SYNC_DONE`] |
//!
//! The host returns to ring 3 by setting registers and segments itself (`sysretq` is not
//! usable on these machines). The PTE-sync stub exists because host writes to present guest
//! page-table entries are invisible to a shadow MMU: rewriting each dirty entry from ring 0
//! (`rep movsq` with source = destination) makes KVM resynchronise its shadow, and the CR3
//! reload flushes the TLB.

use platform::layout::STUBS;
use platform::memory::{GuestMemory, MemoryError};
use platform::Gpa;

/// Port of the PTE-sync stub's completion.
pub const PORT_PTE_SYNC_DONE: u16 = 0x11;
/// Port of vectors 32-255 (no interrupt source exists: these mean a bug or a hostile guest).
pub const PORT_SPURIOUS: u16 = 0x1f;
/// Port of exception vector 0; vector `v` (< 32) uses this + `v`.
pub const PORT_EXCEPTION_BASE: u16 = 0x20;

/// Offset of the syscall entry inside the stub page.
const OFF_SYSCALL: u64 = 0x000;
/// Offset of the PTE-sync stub.
const OFF_PTE_SYNC: u64 = 0x020;
/// Offset of the return-to-user stub.
const OFF_IRET: u64 = 0x080;
/// Offset of exception stub 0; stub `v` is at `+ 8 * v`.
const OFF_EXCEPTIONS: u64 = 0x100;

/// `ud2; ud2`.
///
/// On the PVM hypervisor of these machines, `syscall` from ring 3 jumps to LSTAR without
/// leaving user mode (page permissions are checked as for ring 3, `out` faults). So the stub
/// raises #UD, which is delivered through the IDT to exception stub 6 in ring 0, which exits.
/// The host recognises a syscall by the #UD's rip being this stub. For this the stub page is
/// mapped user-readable and read-only; nothing in it is secret, and jumping to it from ring 3
/// is no different from executing `syscall`.
const SYSCALL_ENTRY: [u8; 4] = [0x0f, 0x0b, 0x0f, 0x0b];

/// The PTE-sync stub. Input: `rsi` = direct-map address of an array of `{ first: u64, count:
/// u64 }` runs, `rdx` = number of runs (> 0).
///
/// ```text
/// 00: 48 8b 3e        top: mov  rdi, [rsi]        ; first entry of the run
/// 03: 48 8b 4e 08          mov  rcx, [rsi+8]      ; entries in the run
/// 07: 48 89 f0             mov  rax, rsi
/// 0a: 48 89 fe             mov  rsi, rdi
/// 0d: f3 48 a5             rep movsq              ; rewrite each entry with itself
/// 10: 48 89 c6             mov  rsi, rax
/// 13: 48 83 c6 10          add  rsi, 16
/// 17: 48 ff ca             dec  rdx
/// 1a: 75 e4                jnz  top
/// 1c: 0f 20 d8             mov  rax, cr3
/// 1f: 0f 22 d8             mov  cr3, rax          ; flush the TLB
/// 22: e6 11                out  PORT_PTE_SYNC_DONE, al
/// 24: e6 11                out  PORT_PTE_SYNC_DONE, al   ; see EXIT_TWICE
/// 26: 0f 0b                ud2
/// ```
const PTE_SYNC: [u8; 40] = [
    0x48,
    0x8b,
    0x3e,
    0x48,
    0x8b,
    0x4e,
    0x08,
    0x48,
    0x89,
    0xf0,
    0x48,
    0x89,
    0xfe,
    0xf3,
    0x48,
    0xa5,
    0x48,
    0x89,
    0xc6,
    0x48,
    0x83,
    0xc6,
    0x10,
    0x48,
    0xff,
    0xca,
    0x75,
    0xe4,
    0x0f,
    0x20,
    0xd8,
    0x0f,
    0x22,
    0xd8,
    0xe6,
    PORT_PTE_SYNC_DONE as u8,
    0xe6,
    PORT_PTE_SYNC_DONE as u8,
    0x0f,
    0x0b,
];

/// Every exiting stub executes its `out` twice in a row. When a host signal interrupts
/// `KVM_RUN` just as a stub's `out` exit is being taken, the hypervisor of these machines can
/// return `EINTR` with the port I/O still to be completed; the next `KVM_RUN` then completes it
/// (skipping the `out`) and resumes the guest at the next instruction. The second `out` makes
/// that resumption exit again, with the same port and the same stack, instead of falling into
/// the `ud2` (a fault in ring 0, which stops the sandbox).
pub const EXIT_TWICE: bool = true;

/// Guest-physical address of the syscall entry (LSTAR points at its direct-map address).
pub const fn syscall_entry() -> Gpa {
    Gpa(STUBS.raw() + OFF_SYSCALL)
}

/// The return-to-user stub: `iretq` (48 cf), entered by the host with `rsp` pointing at a
/// `rip, cs, rflags, rsp, ss` frame it wrote on the vCPU's ring-0 stack. Entering ring 3 this
/// way (rather than by setting ring-3 segments from the host) keeps KVM's notion of the guest's
/// privilege level consistent with the CPU's: on the PVM hypervisor of these machines a vCPU
/// put into ring 3 by KVM_SET_SREGS alone takes `syscall` without switching to ring 0.
const IRET: [u8; 4] = [0x48, 0xcf, 0x0f, 0x0b];

/// Guest-physical address of the return-to-user stub.
pub const fn iret() -> Gpa {
    Gpa(STUBS.raw() + OFF_IRET)
}

/// Guest-physical address of the PTE-sync stub.
pub const fn pte_sync() -> Gpa {
    Gpa(STUBS.raw() + OFF_PTE_SYNC)
}

/// Guest-physical address of the stub for IDT vector `vector`.
pub const fn exception_stub(vector: u8) -> Gpa {
    Gpa(STUBS.raw() + OFF_EXCEPTIONS + 8 * vector as u64)
}

/// The port an exception stub exits on.
pub const fn exception_port(vector: u8) -> u16 {
    if vector < 32 {
        PORT_EXCEPTION_BASE + vector as u16
    } else {
        PORT_SPURIOUS
    }
}

/// Whether the CPU pushes an error code for `vector`.
pub const fn has_error_code(vector: u8) -> bool {
    matches!(vector, 8 | 10 | 11 | 12 | 13 | 14 | 17 | 21 | 29 | 30)
}

/// Writes every stub into the stub page.
///
/// # Errors
/// [`MemoryError`] if guest memory is smaller than the reserved region.
pub fn write_stubs(mem: &GuestMemory) -> Result<(), MemoryError> {
    mem.fill(STUBS, 0xcc, 0x1000)?; // int3 everywhere else
    mem.write(syscall_entry(), &SYSCALL_ENTRY)?;
    mem.write(pte_sync(), &PTE_SYNC)?;
    mem.write(iret(), &IRET)?;
    for v in 0..=255u8 {
        let port = exception_port(v) as u8;
        mem.write(exception_stub(v), &[0xe6, port, 0xe6, port, 0x0f, 0x0b])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stubs_do_not_overlap() {
        assert!(OFF_SYSCALL + SYSCALL_ENTRY.len() as u64 <= OFF_PTE_SYNC);
        assert!(OFF_PTE_SYNC + PTE_SYNC.len() as u64 <= OFF_IRET);
        assert!(OFF_IRET + IRET.len() as u64 <= OFF_EXCEPTIONS);
        assert!(exception_stub(255).raw() + 8 <= STUBS.raw() + 0x1000);
    }

    #[test]
    fn pte_sync_loop_jumps_to_its_top() {
        // jnz at 0x1a, 2 bytes long, targets offset 0.
        let rel = PTE_SYNC[0x1b] as i8;
        assert_eq!(0x1c + i64::from(rel), 0);
    }

    #[test]
    fn ports() {
        assert_eq!(exception_port(14), 0x2e);
        assert_eq!(exception_port(200), PORT_SPURIOUS);
        assert!(has_error_code(14) && !has_error_code(6));
    }
}
