//! The x86-64 signal frame as Linux writes it on the user stack (`struct rt_sigframe`:
//! the return address, a `struct ucontext`, a `siginfo_t`) and the extended FPU state
//! that follows it: offsets and sizes from `arch/x86/include/uapi/asm/sigcontext.h`,
//! `ucontext.h` and `fpu/signal.c`. The kernel builds and reads frames with these, never with
//! bare numbers.

/// `uc_flags`: the frame carries extended FPU state.
pub const UC_FP_XSTATE: u64 = 1;
/// `uc_flags`: `sigcontext.ss` is meaningful.
pub const UC_SIGCONTEXT_SS: u64 = 2;
/// `uc_flags`: rt_sigreturn restores `ss` as saved.
pub const UC_STRICT_RESTORE_SS: u64 = 4;

/// Offset of `uc_stack` (a `stack_t`) in `struct ucontext`.
pub const UC_STACK: usize = 16;
/// Offset of `uc_mcontext` (a `struct sigcontext`) in `struct ucontext`.
pub const UC_MCONTEXT: usize = 40;
/// Offset of `uc_sigmask` in `struct ucontext`.
pub const UC_SIGMASK: usize = 296;
/// Size of `struct ucontext` (with its 8-byte signal mask).
pub const UC_SIZE: usize = 304;
/// Size of `siginfo_t`.
pub const SIGINFO_SIZE: usize = 128;
/// Size of `struct rt_sigframe`: the return address, the ucontext, the siginfo.
pub const FRAME_SIZE: u64 = 8 + UC_SIZE as u64 + SIGINFO_SIZE as u64;
/// Size of `struct sigcontext`.
pub const SIGCONTEXT_SIZE: usize = 256;
/// Size of `stack_t`.
pub const STACK_T_SIZE: usize = 24;

/// `fpx_sw_bytes.magic1`: the FXSAVE area is followed by extended state.
pub const FP_XSTATE_MAGIC1: u32 = 0x4650_5853;
/// The word after the extended state (`FP_XSTATE_MAGIC2`).
pub const FP_XSTATE_MAGIC2: u32 = 0x4650_5845;
/// XSAVE feature bits of x87 and SSE.
pub const XFEATURE_FPSSE: u64 = 3;
/// Size of the legacy FXSAVE area.
pub const FXSAVE_SIZE: usize = 512;
/// Offset of `fpx_sw_bytes` in the FXSAVE area (its software-reserved bytes).
pub const SW_BYTES: usize = 464;
/// Offset of the XSAVE header (after the FXSAVE area).
pub const XSAVE_HEADER: usize = 512;
/// Offset of the AVX (YMM upper halves) component in the standard XSAVE layout.
pub const AVX_OFFSET: usize = 576;
/// MXCSR at reset: all exceptions masked.
pub const MXCSR_DEFAULT: u32 = 0x1f80;
/// x87 control word at reset.
pub const FCW_DEFAULT: u16 = 0x37f;

/// `sa_flags`: the handler takes a siginfo and a ucontext.
pub const SA_SIGINFO: u64 = 0x4;
/// `sa_flags`: run the handler on the alternate stack.
pub const SA_ONSTACK: u64 = 0x0800_0000;
/// `sa_flags`: restart interrupted syscalls.
pub const SA_RESTART: u64 = 0x1000_0000;
/// `sa_flags`: do not block the signal in its own handler.
pub const SA_NODEFER: u64 = 0x4000_0000;
/// `sa_flags`: reset the handler to SIG_DFL on entry.
pub const SA_RESETHAND: u64 = 0x8000_0000;
/// `sa_flags`: `sa_restorer` is the return address (always set by the C library).
pub const SA_RESTORER: u64 = 0x0400_0000;

/// `ss_flags`: the thread runs on the alternate stack.
pub const SS_ONSTACK: i32 = 1;
/// `ss_flags`: no alternate stack.
pub const SS_DISABLE: i32 = 2;
/// `ss_flags`: the alternate stack is disabled while a handler runs on it.
pub const SS_AUTODISARM: i32 = 1 << 31;
/// Smallest alternate stack (MINSIGSTKSZ).
pub const MINSIGSTKSZ: u64 = 2048;

// The software-reserved bytes (`struct _fpx_sw_bytes`, 48 bytes) fit in the FXSAVE area.
const _: () = assert!(SW_BYTES + 48 <= FXSAVE_SIZE);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_parts_fit_together() {
        // uc_flags (8), uc_link (8), then the stack_t; the sigcontext then the mask follow.
        assert_eq!(UC_STACK + STACK_T_SIZE, UC_MCONTEXT);
        assert_eq!(UC_MCONTEXT + SIGCONTEXT_SIZE, UC_SIGMASK);
        assert_eq!(UC_SIGMASK + 8, UC_SIZE);
        assert_eq!(FRAME_SIZE, 440);
    }
}
