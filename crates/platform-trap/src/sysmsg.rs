//! The stub's region above `USER_END` and the layout of the pages the holder shares with it.
//!
//! Every address and offset here is used both by the stub's assembly (`stub::asm`, as `const`
//! operands) and by the holder (`stub`), so this file is the single source of truth.
//!
//! ```text
//! stub virtual address                     what                          backed by
//! 0x7fc0_0000_0000  CODE_ADDR   r-x        stub code (position-independent asm blob)   anonymous, private
//! 0x7fc0_0001_0000  CTRL_ADDR   r--        command page + two seccomp programs          control memfd [0, 0x3000)
//! 0x7fc0_0002_0000  REPLY_ADDR  rw-        mapper reply page                            control memfd [0x3000, 0x4000)
//! 0x7fc0_0004_0000  VDSO_ADDR   r--, r-x   the host's vDSO: data pages, then its code      the host kernel
//! 0x7fc0_0010_0000  SYSMSG_ADDR rw-        MAX_THREADS × SYSMSG_SIZE per-thread pages   control memfd [0x10000, …)
//! 0x7fc0_0110_0000  STUB_END
//! ```
//!
//! Descriptors of a stub: [`CTRL_FD`] (control memfd), [`MEM_FD`] (guest memory memfd),
//! [`REPLY_FD`] (the mapper's socket: completions out, window descriptors in); and the
//! attached shared windows, one per slot from [`WINDOW_FD_BASE`] (read-only slots, then
//! writable ones, up to [`WINDOW_FD_END`]); while a window is being attached, briefly its
//! received copy at [`RECV_FD`]. Nothing else.
//!
//! ```text
//! fd    0              RECV_FD: a window descriptor between its recvmsg and its dup3
//! fd    3, 4, 5        CTRL_FD, MEM_FD, REPLY_FD
//! fd   64 ..  544      read-only window slots (MAX_RO_WINDOWS = 480)
//! fd  544 .. 1024      writable window slots (MAX_RW_WINDOWS = 480)
//! RLIMIT_NOFILE        STUB_NOFILE = 1024 (= WINDOW_FD_END)
//! ```
//!
//! The region sits above [`USER_END`] (where the KVM platform puts its direct map), in the
//! same PML4 slot, so the application keeps `[0, USER_END)` exactly as on KVM. Nothing else is
//! mapped in a stub process (no holder memory; the host's vDSO and its data pages only moved
//! into [`VDSO_ADDR`], see [`crate::vdso`]; and the kernel's `[vsyscall]`
//! gate page, which is not a mapping and cannot be removed: the kernel emulates a call into
//! it as a system call, which the filter traps like any other, `rip` after the call).
//!
//! One sysmsg area (64 KiB, aligned to its size so the signal handler finds it by masking its
//! stack pointer):
//!
//! ```text
//! 0x0000 header: state word, event, saved registers, fs/gs base, fault info, tid, stack_t
//! 0x1000 XSAVE image (standard format, host size ≤ 16 KiB); the new thread's first stack
//!        pointer is its start (it pushes nothing)
//! 0x5000 alternate signal stack (44 KiB): the signal frame (ucontext + XSAVE) lives here
//! ```

/// End of the application's part of the address space (the same on every platform).
pub const USER_END: u64 = 0x7f80_0000_0000;
/// Base of the stub's region (1 GiB-aligned, 256 GiB above [`USER_END`]).
pub const STUB_BASE: u64 = 0x7fc0_0000_0000;

/// Address of the stub's code (read-execute).
pub const CODE_ADDR: u64 = STUB_BASE;
/// Room for the stub's code (the blob must fit).
pub const CODE_SIZE: u64 = 0x1_0000;
/// Address of the control pages (read-only in the stub).
pub const CTRL_ADDR: u64 = STUB_BASE + 0x1_0000;
/// Size of the read-only control mapping: command page and the two filter programs.
pub const CTRL_RO_SIZE: u64 = 0x3000;
/// Address of the mapper's reply page (read-write in the stub).
pub const REPLY_ADDR: u64 = STUB_BASE + 0x2_0000;
/// Where the stub's start code moves the host's vDSO (its data pages and code, in the
/// kernel's order and spacing; see [`crate::vdso`]).
pub const VDSO_ADDR: u64 = STUB_BASE + 0x4_0000;
/// Room for the vDSO (data pages and code together).
pub const VDSO_SIZE: u64 = 0xc_0000;
/// Where the stub's start code puts the temporary copy of the stub code (or lower, in
/// 16 MiB steps, if the place is taken; else at one of a few places far below): below the
/// region, so that the init code's unmapping of everything else keeps the moved vDSO.
pub const TEMP_CODE_ADDR: u64 = STUB_BASE - 0x1_0000_0000;
/// Address of the first thread's sysmsg area.
pub const SYSMSG_ADDR: u64 = STUB_BASE + 0x10_0000;
/// log2 of [`SYSMSG_SIZE`].
pub const SYSMSG_SHIFT: u32 = 16;
/// Bytes of one thread's sysmsg area.
pub const SYSMSG_SIZE: u64 = 1 << SYSMSG_SHIFT;
/// Threads a stub can hold at once.
pub const MAX_THREADS: u64 = 256;
/// Bytes of all sysmsg areas.
pub const SYSMSG_TOTAL: u64 = MAX_THREADS * SYSMSG_SIZE;
/// End of the stub's region.
pub const STUB_END: u64 = SYSMSG_ADDR + SYSMSG_TOTAL;
/// Highest address + 1 the stub unmaps up to (x86-64 4-level `TASK_SIZE`).
pub const MAP_TOP: u64 = 0x7fff_ffff_f000;

/// The stub's descriptor of the control memfd.
pub const CTRL_FD: u64 = 3;
/// The stub's descriptor of the guest memory memfd.
pub const MEM_FD: u64 = 4;
/// The stub's descriptor of the mapper's socket (`AF_UNIX`, `SOCK_SEQPACKET`; the holder
/// keeps the other end). The mapper writes one 8-byte message per command, 1 (success) or 2
/// (failure); the holder sends window descriptors the other way (`SCM_RIGHTS`), which only
/// the mapper's `recvmsg` takes. Application threads can neither write nor read it (their
/// filter traps every call but the handler's), so unlike the reply page, a completion and its
/// success cannot be forged.
pub const REPLY_FD: u64 = 5;
/// Where a window descriptor lands when the mapper receives it: the lowest free descriptor
/// (0, 1 and 2 are closed in a stub, and the mapper closes it right after its `dup3` to the
/// slot). The mapper duplicates this fixed number, never one read from writable memory.
pub const RECV_FD: u64 = 0;
/// The first window slot descriptor (the first read-only slot).
pub const WINDOW_FD_BASE: u64 = 64;
/// Read-only window slots a stub holds at once (descriptors `WINDOW_FD_BASE..WINDOW_RW_BASE`).
pub const MAX_RO_WINDOWS: u64 = 480;
/// Writable window slots a stub holds at once (descriptors `WINDOW_RW_BASE..WINDOW_FD_END`).
pub const MAX_RW_WINDOWS: u64 = 480;
/// The first writable window slot descriptor.
pub const WINDOW_RW_BASE: u64 = WINDOW_FD_BASE + MAX_RO_WINDOWS;
/// One past the last window slot descriptor.
pub const WINDOW_FD_END: u64 = WINDOW_RW_BASE + MAX_RW_WINDOWS;
/// A stub's `RLIMIT_NOFILE`: room for every window slot. A stub sets it (soft and hard) at
/// its start when its hard limit allows; the stub factory's default
/// ([`crate::FactoryOptions::nofile`]) is the same.
pub const STUB_NOFILE: u64 = WINDOW_FD_END;

// Offsets in the control memfd.
/// Command page.
pub const CTRL_FD_CMD: u64 = 0;
/// The base filter's `sock_fprog` (instructions follow at +16).
pub const CTRL_FD_BASE_FILTER: u64 = 0x1000;
/// The application threads' filter's `sock_fprog`.
pub const CTRL_FD_APP_FILTER: u64 = 0x2000;
/// Mapper reply page.
pub const CTRL_FD_REPLY: u64 = 0x3000;
/// First sysmsg area.
pub const CTRL_FD_SYSMSG: u64 = 0x1_0000;
/// Size of the control memfd.
pub const CTRL_FD_SIZE: u64 = CTRL_FD_SYSMSG + SYSMSG_TOTAL;
/// Stub address of the base filter's `sock_fprog`.
pub const BASE_FPROG: u64 = CTRL_ADDR + CTRL_FD_BASE_FILTER;
/// Stub address of the application filter's `sock_fprog`.
pub const APP_FPROG: u64 = CTRL_ADDR + CTRL_FD_APP_FILTER;

// Command page (holder writes, stub reads).
/// u32 futex word: incremented by the holder after it wrote a command.
pub const CMD_SEQ: u64 = 0x00;
/// u64: the operation (`OP_*`).
pub const CMD_OP: u64 = 0x08;
/// u64 × 5: arguments.
pub const CMD_ARGS: u64 = 0x10;
/// u64: bytes of the XSAVE image the handler copies (the host's size).
pub const CMD_XSAVE_SIZE: u64 = 0x100;
/// u64: how many `pause` iterations a handler spins on its state word before `FUTEX_WAIT`.
pub const CMD_STUB_SPIN: u64 = 0x108;
/// u64 = 1: what the mapper writes to the reply socket after a successful command.
pub const CMD_DONE_OK: u64 = 0x110;
/// u64 = 2: what the mapper writes after a failed one.
pub const CMD_DONE_ERR: u64 = 0x118;
/// [`OP_MAP_BATCH`]'s table: up to [`BATCH_MAX`] entries of four u64 (gva, length, prot,
/// memfd offset), read-only to the stub like the rest of the command page.
pub const CMD_BATCH: u64 = 0x200;
/// Bytes of one [`CMD_BATCH`] entry.
pub const BATCH_ENTRY: u64 = 32;
/// Entries [`CMD_BATCH`] holds.
pub const BATCH_MAX: u64 = (0x1000 - CMD_BATCH) / BATCH_ENTRY;

/// Mapper operation: `mmap(a0, a1, a2 prot, MAP_SHARED|MAP_FIXED, MEM_FD, a3 offset)`.
pub const OP_MAP: u64 = 1;
/// Mapper operation: `munmap(a0, a1)`.
pub const OP_UNMAP: u64 = 2;
/// Mapper operation: `mprotect(a0, a1, a2)`.
pub const OP_PROTECT: u64 = 3;
/// Mapper operation: clone an application thread on sysmsg slot a0; result: its tid.
pub const OP_CLONE: u64 = 4;
/// Mapper operation: receive one window descriptor from [`REPLY_FD`] (`recvmsg` into the
/// reply page's message header; a failed `recvmsg` kills the stub: a message may be left
/// queued), `dup3(RECV_FD, a0, 0)`, `close(RECV_FD)`; result: the `dup3`'s.
pub const OP_RECV_WINDOW: u64 = 5;
/// Mapper operation: `mmap(a0, a1, a2 prot, MAP_SHARED|MAP_FIXED, a4 window slot fd, a3
/// offset)`.
pub const OP_MAP_WINDOW: u64 = 6;
/// Mapper operation: `close(a0)` (a window slot descriptor).
pub const OP_CLOSE_WINDOW: u64 = 7;
/// Mapper operation: the first a0 (1..=[`BATCH_MAX`]) entries of [`CMD_BATCH`], each an
/// [`OP_MAP`] through the same `mmap` instruction, in order, stopping at the first failure
/// (its result); result 0 when all are done.
pub const OP_MAP_BATCH: u64 = 8;

// Reply page (stub writes, holder reads; any stub thread can write it, so the holder uses it
// only for details: the errno of a failure, a new thread's tid).
/// u32: the sequence number of the last command done (0 once the stub is ready).
pub const REPLY_DONE: u64 = 0x00;
/// i64: the last command's result (a raw syscall return: `-errno` on failure).
pub const REPLY_RESULT: u64 = 0x08;
/// u32: set by the stub's start code (Rust, before the blob) when a set-up step failed.
pub const REPLY_STAGE: u64 = 0x10;
/// i64: the failed step's return value.
pub const REPLY_ERRNO: u64 = 0x18;
/// u64: the stub's `RLIMIT_NOFILE`, written by its start code (before any application code
/// runs; the holder reads it once, when the stub is ready).
pub const REPLY_NOFILE: u64 = 0x20;
/// `struct msghdr` (56 bytes) of the mapper's `recvmsg`, rebuilt by the mapper before each.
pub const REPLY_MSGHDR: u64 = 0x40;
/// `struct iovec` of that `recvmsg`.
pub const REPLY_IOV: u64 = 0x80;
/// Its data buffer (the holder's message: 8 bytes, ignored).
pub const REPLY_RECV_DATA: u64 = 0x90;
/// Its control buffer ([`REPLY_CMSG_LEN`] bytes: room for one `SCM_RIGHTS` descriptor).
pub const REPLY_CMSG: u64 = 0xa0;
/// Bytes of [`REPLY_CMSG`].
pub const REPLY_CMSG_LEN: u64 = 0x20;
/// `MSG_DONTWAIT`: the mapper's `recvmsg` never blocks (the holder sends before it commands).
pub const RECV_FLAGS: u64 = libc::MSG_DONTWAIT as u64;

// Sysmsg header.
/// u32 futex word, one of the `STATE_*` values.
pub const S_STATE: u64 = 0x00;
/// u32: kind of event (`EV_*`), written by the handler.
pub const S_EVENT: u64 = 0x04;
/// u32: the host signal number.
pub const S_SIGNO: u64 = 0x08;
/// i32: the signal's `si_code`.
pub const S_SICODE: u64 = 0x0c;
/// u64: `REG_TRAPNO` (x86 vector).
pub const S_TRAPNO: u64 = 0x10;
/// u64: `REG_ERR` (error code).
pub const S_ERR: u64 = 0x18;
/// u64: `si_addr` (faulting address).
pub const S_ADDR: u64 = 0x20;
/// u32: non-zero when the holder wrote a new XSAVE image (the handler clears it).
pub const S_FPU_DIRTY: u64 = 0x28;
/// u64: FS base.
pub const S_FS_BASE: u64 = 0x30;
/// u64: GS base.
pub const S_GS_BASE: u64 = 0x38;
/// 18 × u64 in [`platform::Regs`] order: rax rbx rcx rdx rsi rdi rsp rbp r8–r15 rip rflags.
pub const S_REGS: u64 = 0x40;
/// u32: the thread's tid (`CLONE_CHILD_SETTID`/`CLONE_CHILD_CLEARTID`).
pub const S_TID: u64 = 0xd0;
/// `stack_t` (24 bytes) the new thread passes to `sigaltstack`.
pub const S_STACK_T: u64 = 0xd8;
/// u32: non-zero while the holder sleeps (or is about to sleep) on the state word: the
/// handler wakes it only then (a spinning holder needs no `FUTEX_WAKE`).
pub const S_HOLDER_WAITING: u64 = 0xf0;
/// u32: non-zero while the handler sleeps (or is about to sleep) on the state word.
pub const S_STUB_WAITING: u64 = 0xf4;
/// u32: the CPU the stub thread stopped on (from the kernel's per-CPU segment limit).
pub const S_STUB_CPU: u64 = 0xf8;
/// u32: the CPU the holder thread ran on when it set RUN; the handler spins (see
/// [`CMD_STUB_SPIN`]) only when it runs on another one.
pub const S_HOLDER_CPU: u64 = 0xfc;
/// The kernel's per-CPU segment selector (`__CPUNODE_SEG`): `lsl` gives `node << 12 | cpu`.
pub const CPUNODE_SEG: u64 = 0x7b;
/// XSAVE image.
pub const S_XSAVE: u64 = 0x1000;
/// Largest XSAVE image that fits.
pub const XSAVE_MAX: u64 = 0x4000;
/// Alternate signal stack.
pub const S_ALTSTACK: u64 = 0x5000;
/// Size of the alternate signal stack.
pub const ALTSTACK_SIZE: u64 = SYSMSG_SIZE - S_ALTSTACK;
/// A new thread's stack pointer (offset): below the XSAVE image, never pushed to.
pub const S_THREAD_STACK: u64 = S_XSAVE;

/// State: the thread has not reported yet (or was reset by the holder).
pub const STATE_IDLE: u32 = 0;
/// State: the thread stopped in its handler and saved an event (stub → holder).
pub const STATE_EVENT: u32 = 1;
/// State: run the application code with the saved registers (holder → stub).
pub const STATE_RUN: u32 = 2;
/// State: the thread must exit (holder → stub).
pub const STATE_EXIT: u32 = 3;

/// Event: a system call (SIGSYS); `rax` holds `si_syscall`.
pub const EV_SYSCALL: u32 = 1;
/// Event: a fault (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP).
pub const EV_FAULT: u32 = 2;
/// Event: the kick signal.
pub const EV_KICK: u32 = 3;

/// The kick signal: SIGUSR2. A standard signal, so several kicks before the thread stops
/// merge into one `Interrupted`; nothing else in a stub uses it.
pub const KICK_SIGNAL: i32 = libc::SIGUSR2;

/// The signals whose handler is the stub's (the event reporter).
pub const HANDLED_SIGNALS: [i32; 7] = [
    libc::SIGSYS,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGTRAP,
    KICK_SIGNAL,
];

/// `clone` flags of an application thread.
pub const THREAD_CLONE_FLAGS: u64 = (libc::CLONE_VM
    | libc::CLONE_FS
    | libc::CLONE_FILES
    | libc::CLONE_SIGHAND
    | libc::CLONE_THREAD
    | libc::CLONE_SYSVSEM
    | libc::CLONE_CHILD_SETTID
    | libc::CLONE_CHILD_CLEARTID) as u64;

/// The user-settable RFLAGS bits (CF PF AF ZF SF TF DF OF AC ID); the handler also forces IF
/// and the reserved bit 1.
pub const RFLAGS_USER_MASK: u64 = 0x0024_0dd5;
/// Bits the handler always sets in RFLAGS.
pub const RFLAGS_FIXED: u64 = 0x202;
/// The host's user code selector (64-bit).
pub const USER_CS: u64 = 0x33;
/// The host's user stack selector.
pub const USER_SS: u64 = 0x2b;

// Layout of the kernel's `struct ucontext` (x86-64) and `siginfo_t`.
/// `uc_mcontext` in `ucontext`.
const UC_MCONTEXT: u64 = 40;
/// `rax` in `ucontext`… (the `UC_*` offsets include `UC_MCONTEXT`).
pub const UC_R8: u64 = UC_MCONTEXT;
/// `r9`.
pub const UC_R9: u64 = UC_MCONTEXT + 8;
/// `r10`.
pub const UC_R10: u64 = UC_MCONTEXT + 16;
/// `r11`.
pub const UC_R11: u64 = UC_MCONTEXT + 24;
/// `r12`.
pub const UC_R12: u64 = UC_MCONTEXT + 32;
/// `r13`.
pub const UC_R13: u64 = UC_MCONTEXT + 40;
/// `r14`.
pub const UC_R14: u64 = UC_MCONTEXT + 48;
/// `r15`.
pub const UC_R15: u64 = UC_MCONTEXT + 56;
/// `rdi`.
pub const UC_RDI: u64 = UC_MCONTEXT + 64;
/// `rsi`.
pub const UC_RSI: u64 = UC_MCONTEXT + 72;
/// `rbp`.
pub const UC_RBP: u64 = UC_MCONTEXT + 80;
/// `rbx`.
pub const UC_RBX: u64 = UC_MCONTEXT + 88;
/// `rdx`.
pub const UC_RDX: u64 = UC_MCONTEXT + 96;
/// `rax`.
pub const UC_RAX: u64 = UC_MCONTEXT + 104;
/// `rcx`.
pub const UC_RCX: u64 = UC_MCONTEXT + 112;
/// `rsp`.
pub const UC_RSP: u64 = UC_MCONTEXT + 120;
/// `rip`.
pub const UC_RIP: u64 = UC_MCONTEXT + 128;
/// `eflags`.
pub const UC_EFLAGS: u64 = UC_MCONTEXT + 136;
/// `cs`, `gs`, `fs`, `ss` (4 × u16).
pub const UC_CSGSFS: u64 = UC_MCONTEXT + 144;
/// `err`.
pub const UC_ERR: u64 = UC_MCONTEXT + 152;
/// `trapno`.
pub const UC_TRAPNO: u64 = UC_MCONTEXT + 160;
/// `fpstate` (pointer to the XSAVE image in the frame).
pub const UC_FPSTATE: u64 = UC_MCONTEXT + 184;
/// `uc_sigmask`.
pub const UC_SIGMASK: u64 = UC_MCONTEXT + 256;
/// `si_code` in `siginfo_t`.
pub const SI_CODE: u64 = 8;
/// `si_addr` (and `si_call_addr`) in `siginfo_t`.
pub const SI_ADDR: u64 = 16;
/// `si_syscall` in `siginfo_t`.
pub const SI_SYSCALL: u64 = 24;

/// Offset in an XSAVE image of the software-reserved bytes the kernel uses for its
/// `fpx_sw_bytes` (magic, sizes): the handler never overwrites them.
pub const XSAVE_SW_BYTES: u64 = 464;
/// Offset of the XSAVE header (XSTATE_BV).
pub const XSAVE_HEADER: u64 = 512;

const _: () = assert!(CODE_ADDR + CODE_SIZE <= CTRL_ADDR);
const _: () = assert!(CTRL_ADDR + CTRL_RO_SIZE <= REPLY_ADDR);
const _: () = assert!(REPLY_ADDR + 0x1000 <= VDSO_ADDR);
const _: () = assert!(VDSO_ADDR + VDSO_SIZE <= SYSMSG_ADDR);
const _: () = assert!(TEMP_CODE_ADDR >= USER_END);
const _: () = assert!(SYSMSG_ADDR & (SYSMSG_SIZE - 1) == 0);
const _: () = assert!(S_XSAVE + XSAVE_MAX <= S_ALTSTACK);
const _: () = assert!(STUB_BASE >= USER_END && STUB_END <= MAP_TOP);
const _: () = assert!(STUB_END - STUB_BASE < 1 << 32);
const _: () = assert!(REPLY_NOFILE + 8 <= REPLY_MSGHDR && REPLY_MSGHDR + 56 <= REPLY_IOV);
const _: () = assert!(REPLY_CMSG + REPLY_CMSG_LEN <= 0x1000);
const _: () = assert!(REPLY_FD < WINDOW_FD_BASE && WINDOW_FD_END <= 1 << 31);
