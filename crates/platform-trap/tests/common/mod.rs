//! What the integration tests share: a guest's layout (code at [`CODE`], a stack and data page
//! at [`DATA`]), guest code, setting a guest up in a stub, and looks at a stub through /proc.

// Each test binary compiles this module and uses only its share of it.
#![allow(dead_code, unused_imports, unused_macros)]

use std::os::fd::{AsFd, OwnedFd};

use platform_trap::sys::{self, Mapping};
use platform_trap::{StubProcess, StubThread, TrapExit};

/// Guest code address.
pub const CODE: u64 = 0x40_0000;
/// Guest stack/data page address and its memfd offset.
pub const DATA: u64 = 0x60_0000;
pub const DATA_OFF: u64 = 0x10_0000;
/// Size of a guest memfd.
pub const MEM_SIZE: u64 = 16 << 20;

/// Defines `fn $name() -> &'static [u8]`: the bytes of the assembly between two labels
/// (position-independent code; the test copies it into guest memory).
macro_rules! guest {
    ($name:ident, $start:ident, $end:ident, $($asm:literal),* $(,)?) => {
        core::arch::global_asm!(
            ".pushsection .text.torpor_guest,\"ax\",@progbits",
            concat!(".globl ", stringify!($start)),
            concat!(stringify!($start), ":"),
            $($asm,)*
            concat!(".globl ", stringify!($end)),
            concat!(stringify!($end), ":"),
            ".popsection",
        );
        fn $name() -> &'static [u8] {
            extern "C" {
                static $start: u8;
                static $end: u8;
            }
            // SAFETY: two labels of one section, start before end.
            unsafe {
                let s = core::ptr::addr_of!($start);
                let e = core::ptr::addr_of!($end);
                std::slice::from_raw_parts(s, e as usize - s as usize)
            }
        }
    };
}
pub(crate) use guest;

/// `write(1, "hi\n", 3); exit_group(7)` as raw bytes.
pub const WRITE_EXIT: [u8; 41] = [
    0xb8, 0x01, 0x00, 0x00, 0x00, // mov eax, 1
    0xbf, 0x01, 0x00, 0x00, 0x00, // mov edi, 1
    0x48, 0x8d, 0x35, 0x15, 0x00, 0x00, 0x00, // lea rsi, [rip + 21] (msg)
    0xba, 0x03, 0x00, 0x00, 0x00, // mov edx, 3
    0x0f, 0x05, // syscall
    0xbf, 0x07, 0x00, 0x00, 0x00, // mov edi, 7
    0xb8, 0xe7, 0x00, 0x00, 0x00, // mov eax, 231
    0x0f, 0x05, // syscall
    0x0f, 0x0b, // ud2
    b'h', b'i', b'\n', // msg
];

/// Runs [`WRITE_EXIT`] in `t` (mapped at [`CODE`], `view` its guest memory) to its
/// `exit_group`.
pub fn run_write_exit(t: &mut StubThread, view: &Mapping) {
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    let r = t.regs().regs;
    assert_eq!((r.rax, r.rdi, r.rdx), (1, 1, 3));
    assert_eq!(r.rsi, CODE + 38);
    assert_eq!(r.rip, CODE + 24, "rip after the syscall instruction");
    let mut buf = [0u8; 3];
    view.read_bytes(r.rsi - CODE, &mut buf);
    assert_eq!(&buf, b"hi\n");
    t.regs_mut().regs.rax = 3;
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!((t.regs().regs.rax, t.regs().regs.rdi), (231, 7));
}

/// A guest memfd of [`MEM_SIZE`] holding `code` at offset 0.
pub fn guest_memfd(code: &[u8]) -> OwnedFd {
    let mem = sys::memfd("torpor-test-mem", MEM_SIZE).unwrap();
    sys::write_fd(&mem, 0, code).unwrap();
    mem
}

/// [`guest_memfd`] and the holder's view of it.
pub fn guest_memory(code: &[u8]) -> (OwnedFd, Mapping) {
    let mem = guest_memfd(code);
    let view = Mapping::shared(mem.as_fd(), MEM_SIZE as usize).unwrap();
    (mem, view)
}

/// Maps `code_len` bytes of code r-x at [`CODE`] and a read-write page at [`DATA`] in `stub`.
pub fn map_guest(stub: &StubProcess, code_len: usize) {
    let len = (code_len as u64).next_multiple_of(4096);
    stub.map(CODE, len, 0, libc::PROT_READ | libc::PROT_EXEC)
        .unwrap();
    stub.map(DATA, 4096, DATA_OFF, libc::PROT_READ | libc::PROT_WRITE)
        .unwrap();
}

/// A new thread of `stub` at [`CODE`] with its stack at the top of the [`DATA`] page.
pub fn start_thread(stub: &StubProcess) -> StubThread {
    let mut t = stub.new_thread().unwrap();
    t.regs_mut().regs.rip = CODE;
    t.regs_mut().regs.rsp = DATA + 4096;
    t
}

/// [`map_guest`], then [`start_thread`].
pub fn guest_thread(stub: &StubProcess, code_len: usize) -> StubThread {
    map_guest(stub, code_len);
    start_thread(stub)
}

/// The error code and address of `exit`, which must be a fault of `vector` reported by
/// `signal`.
#[track_caller]
pub fn expect_fault(exit: TrapExit, vector: u8, signal: i32) -> (u64, u64) {
    match exit {
        TrapExit::Fault {
            vector: v,
            error_code,
            addr,
            signal: s,
        } if (v, s) == (vector, signal) => (error_code, addr),
        _ => panic!("expected vector {vector} by signal {signal}, got {exit:?}"),
    }
}

/// The open descriptors of process `pid`, sorted.
pub fn fds_of(pid: i32) -> Vec<u32> {
    let mut fds: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .map(|e| {
            e.unwrap()
                .file_name()
                .into_string()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    fds.sort_unstable();
    fds
}

/// The mappings of process `pid`: start, end and the whole `/proc/<pid>/maps` line.
pub fn maps_of(pid: i32) -> Vec<(u64, u64, String)> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
        .map(|l| {
            let range = l.split_whitespace().next().unwrap();
            let (a, b) = range.split_once('-').unwrap();
            (
                u64::from_str_radix(a, 16).unwrap(),
                u64::from_str_radix(b, 16).unwrap(),
                l.to_string(),
            )
        })
        .collect()
}

/// The value of `field` in /proc/PID/status.
pub fn status_field(pid: i32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in {status}"))
        .trim()
        .to_string()
}

/// The soft and hard `RLIMIT_NOFILE` of process `pid` (`Max open files` in its limits).
pub fn max_open_files(pid: i32) -> [String; 2] {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    [fields[3].to_string(), fields[4].to_string()]
}
