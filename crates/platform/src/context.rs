//! What a platform hands the kernel about one application thread: its registers, its FPU
//! state, and why it stopped running ([`Exit`]). Neutral types: the same on every platform.

use crate::addr::Gva;

/// General-purpose registers, `rip` and `rflags` of an application thread (the order of
/// Linux's `struct user_regs_struct` is not kept: fields are named).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Regs {
    pub rax: u64,
    pub rbx: u64,
    pub rcx: u64,
    pub rdx: u64,
    pub rsi: u64,
    pub rdi: u64,
    pub rsp: u64,
    pub rbp: u64,
    pub r8: u64,
    pub r9: u64,
    pub r10: u64,
    pub r11: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
    pub rip: u64,
    pub rflags: u64,
}

/// The user-mode state of an application thread that the kernel reads and edits between
/// exits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserContext {
    /// General-purpose registers, `rip` and `rflags`.
    pub regs: Regs,
    /// FS base (thread pointer, set by `arch_prctl(ARCH_SET_FS)`).
    pub fs_base: u64,
    /// GS base.
    pub gs_base: u64,
}

/// Information about an exception the application raised, with x86 vector numbers on every
/// platform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExceptionInfo {
    /// The vector (14 = page fault, 13 = general protection, 6 = invalid opcode…).
    pub vector: u8,
    /// The error code, for vectors that have one (for a page fault: bit 1 write, bit 4
    /// instruction fetch).
    pub error_code: Option<u64>,
    /// The faulting address, for page faults (CR2).
    pub cr2: Gva,
}

/// Why [`crate::Context::switch`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The thread executed `syscall`: the number and arguments are in the context's registers
    /// (number in `rax`), whose `rip` already points after the instruction. Set `rax` to the
    /// result.
    Syscall,
    /// The thread took an exception; the context's `rip` is the faulting instruction.
    Exception(ExceptionInfo),
    /// The switch was interrupted (a kick, or a host signal).
    Interrupted,
    /// An access to memory the host could not back: a page of a shared file window whose
    /// file was truncated below it. The context's `rip` is the faulting instruction; Linux
    /// sends SIGBUS.
    MemoryFault,
}

/// One run of consecutive page-table entries the kernel's memory manager changed (the
/// platform decides what making them visible to the application takes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PteRun {
    /// Direct-map address of the first entry.
    pub first: Gva,
    /// Number of 8-byte entries (the run never crosses a page).
    pub count: u32,
}

/// A run of consecutive user pages whose mappings changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageRun {
    /// The first page.
    pub first: Gva,
    /// Number of pages.
    pub count: u32,
}

/// Size of an [`FpuState`] image.
pub const FPU_STATE_SIZE: usize = 4096;

/// A thread's x87/SSE/AVX state in the standard (non-compacted) XSAVE layout: legacy FXSAVE
/// area at 0, XSAVE header at 512, AVX upper halves at 576. Bytes beyond the features the
/// platform's [`CpuModel`] enables are zero.
pub type FpuState = Box<[u8; FPU_STATE_SIZE]>;

/// What the application sees of the CPU on a platform, where it differs between platforms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuModel {
    /// XSAVE features enabled for the application (XCR0).
    pub xcr0: u64,
    /// Size of the standard-format XSAVE area of those features (CPUID 0xD, EBX), as signal
    /// frames hold it; at most [`FPU_STATE_SIZE`].
    pub xsave_size: usize,
    /// The code segment selector of user mode, as signal frames show it.
    pub user_cs: u16,
    /// The stack segment selector of user mode.
    pub user_ss: u16,
}
