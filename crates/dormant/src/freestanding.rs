//! The program's entry point and what a program without the C library must define itself:
//! `_start`, the panic handler, and the memory functions the compiler calls.

use core::ffi::{c_char, CStr};

use dormant::args::{Options, USAGE};
use dormant::serve::{self, StatusError, Wake};
use dormant::sys::{self, Fd};

/// The status file's largest size (it is about 600 bytes).
const STATUS_MAX: usize = 64 << 10;
/// The longest request line looked at (an `exec` with a long command line is a wake
/// whatever follows).
const PEEK_MAX: usize = 64 << 10;
/// The most `--watch` descriptors.
const WATCH_MAX: usize = 16 << 10;
/// The most arguments of the wake command.
const WAKE_ARGS_MAX: usize = 4096;

/// The process's buffers, in its zero-filled data: a page costs memory only once written.
struct Buffers {
    status: [u8; STATUS_MAX],
    peek: [u8; PEEK_MAX],
    watch: [Fd; WATCH_MAX],
    argv: [*const u8; WAKE_ARGS_MAX + 3],
    woken_by: [u8; 21],
    path: [u8; 4096],
}

static mut BUFFERS: Buffers = Buffers {
    status: [0; STATUS_MAX],
    peek: [0; PEEK_MAX],
    watch: [0; WATCH_MAX],
    argv: [core::ptr::null(); WAKE_ARGS_MAX + 3],
    woken_by: [0; 21],
    path: [0; 4096],
};

core::arch::global_asm!(
    ".globl _start",
    "_start:",
    "xor ebp, ebp",
    "mov rdi, rsp",
    "and rsp, -16",
    "call {entry}",
    "ud2",
    entry = sym entry,
);

/// Called by `_start` with the initial stack: `argc`, the argument pointers, a null, the
/// environment pointers, a null.
///
/// # Safety
/// `sp` is the stack the kernel set up for the program.
unsafe extern "C" fn entry(sp: *const usize) -> ! {
    // SAFETY: the kernel's initial stack layout (System V x86-64 ABI, 3.4.1).
    let (argc, argv, envp) = unsafe {
        let argc = *sp;
        let argv = sp.add(1) as *const *const u8;
        (argc, argv, argv.add(argc + 1))
    };
    // SAFETY: the only reference to the buffers, taken once, in a single-threaded process.
    let b = unsafe { &mut *core::ptr::addr_of_mut!(BUFFERS) };
    let arg = |i: usize| -> &'static CStr {
        // SAFETY: i < argc: a NUL-terminated string of the initial stack, alive until exit.
        unsafe { CStr::from_ptr(*argv.add(i) as *const c_char) }
    };
    let opts = match Options::parse((1..argc).map(arg), &mut b.watch) {
        Ok(o) => o,
        Err(e) => {
            sys::eprint(&[b"torpor-dormant: ", e.what.as_bytes()]);
            if let Some(a) = e.arg {
                sys::eprint(&[b" \"", a, b"\""]);
            }
            sys::eprint(&[b" (", USAGE.as_bytes(), b")\n"]);
            sys::exit(2);
        }
    };
    let status = match serve::load_status(opts.status, &mut b.status) {
        Ok(s) => s,
        Err(e) => {
            let why: &[u8] = match e {
                StatusError::Read(e) => e.describe().as_bytes(),
                StatusError::TooLarge => b"larger than 64 KiB",
                StatusError::NotJson => b"not a JSON object",
            };
            sys::eprint(&[
                b"torpor-dormant: ",
                opts.status.to_bytes(),
                b": ",
                why,
                b"\n",
            ]);
            sys::exit(1);
        }
    };
    if let Some(fd) = opts.reclaim {
        // Not fatal: the sandbox is as dormant without it, its cgroup only larger.
        if let Err(e) = dormant::reclaim::reclaim(fd) {
            sys::eprint(&[
                b"torpor-dormant: reclaiming the cgroup's memory: ",
                e.describe().as_bytes(),
                b"\n",
            ]);
        }
    }
    let woken_by = match serve::serve(opts.control, opts.watch, status, &mut b.peek) {
        Ok(Wake::Watched(fd) | Wake::Request(fd)) => fd,
        Ok(Wake::Deleted) => sys::exit(0),
        Err(e) => {
            sys::eprint(&[b"torpor-dormant: ", e.describe().as_bytes(), b"\n"]);
            sys::exit(1);
        }
    };
    let _ = sys::set_cloexec(woken_by, false);
    // WAKE... --woken-by FD, null-terminated.
    let wake = 1 + opts.wake;
    if argc - wake > WAKE_ARGS_MAX {
        sys::eprint(&[b"torpor-dormant: too many wake arguments\n"]);
        sys::exit(2);
    }
    for i in wake..argc {
        // SAFETY: i < argc.
        b.argv[i - wake] = unsafe { *argv.add(i) };
    }
    let n = argc - wake;
    let mut digits = [0u8; 20];
    let d = sys::decimal(woken_by as u64, &mut digits);
    b.woken_by[..d.len()].copy_from_slice(d);
    b.woken_by[d.len()] = 0;
    b.argv[n] = c"--woken-by".as_ptr() as *const u8;
    b.argv[n + 1] = b.woken_by.as_ptr();
    b.argv[n + 2] = core::ptr::null();
    let name = arg(wake);
    let err = match opts.exec_fd {
        Some(fd) => {
            let _ = sys::set_cloexec(fd, false);
            // SAFETY: null-terminated arrays of NUL-terminated strings (the initial stack's
            // and the buffers'), alive across the call.
            unsafe { sys::exec_fd(fd, b.argv.as_ptr(), envp) }
        }
        // SAFETY: as above; `envp` is the kernel's, null-terminated.
        None => unsafe { exec_in_path(name, &b.argv, envp, &mut b.path) },
    };
    sys::eprint(&[
        b"torpor-dormant: exec ",
        name.to_bytes(),
        b": ",
        err.describe().as_bytes(),
        b"\n",
    ]);
    sys::exit(1)
}

/// `execvp`: runs `name` found in the directories of `PATH` (or as given, when it holds a
/// slash). Returns only the error: the last directory's, or EACCES when one refused.
///
/// # Safety
/// `argv` and `envp` are null-terminated arrays of NUL-terminated strings.
unsafe fn exec_in_path(
    name: &CStr,
    argv: &[*const u8],
    envp: *const *const u8,
    path: &mut [u8; 4096],
) -> sys::Errno {
    let name = name.to_bytes_with_nul();
    if name.contains(&b'/') {
        // SAFETY: the caller's contract; `name` is NUL-terminated.
        return unsafe { sys::exec_path(name.as_ptr(), argv.as_ptr(), envp) };
    }
    let mut dirs: &[u8] = b"/usr/local/bin:/usr/bin:/bin";
    let mut e = envp;
    // SAFETY: a null-terminated array of NUL-terminated strings.
    while let Some(var) = unsafe { e.as_ref() }.filter(|p| !p.is_null()) {
        // SAFETY: a NUL-terminated string of the initial stack.
        let var = unsafe { CStr::from_ptr(*var as *const c_char) }.to_bytes();
        if let Some(v) = var.strip_prefix(b"PATH=") {
            dirs = v;
            break;
        }
        // SAFETY: within the array, which ends with a null.
        e = unsafe { e.add(1) };
    }
    let mut err = sys::Errno(libc::ENOENT);
    let mut refused = false;
    for dir in dirs.split(|&c| c == b':') {
        let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
        if dir.len() + 1 + name.len() > path.len() {
            continue;
        }
        path[..dir.len()].copy_from_slice(dir);
        path[dir.len()] = b'/';
        path[dir.len() + 1..dir.len() + 1 + name.len()].copy_from_slice(name);
        // SAFETY: the caller's contract; `path` is NUL-terminated (`name` ends with one).
        err = unsafe { sys::exec_path(path.as_ptr(), argv.as_ptr(), envp) };
        refused |= err.0 == libc::EACCES;
        if !matches!(err.0, libc::ENOENT | libc::ENOTDIR | libc::EACCES) {
            break;
        }
    }
    if refused && matches!(err.0, libc::ENOENT | libc::ENOTDIR) {
        err = sys::Errno(libc::EACCES);
    }
    err
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    sys::eprint(&[b"torpor-dormant: panic\n"]);
    sys::exit(101)
}

/// Referenced by the precompiled `core`, which is built to unwind; this program never unwinds
/// (`panic = "abort"` in every profile it is built with).
#[no_mangle]
extern "C" fn rust_eh_personality() {}

// The memory functions the compiler's code calls (the C library's, elsewhere). Written with
// string instructions: a loop here could be turned by the compiler into a call to itself.

/// # Safety
/// `dst` and `src` are valid for `n` bytes and do not overlap.
#[no_mangle]
unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller's contract; `rep movsb` copies n bytes forward.
    unsafe {
        core::arch::asm!(
            "rep movsb",
            inout("rcx") n => _,
            inout("rdi") dst => _,
            inout("rsi") src => _,
            options(nostack, preserves_flags),
        );
    }
    dst
}

/// # Safety
/// `dst` and `src` are valid for `n` bytes; they may overlap.
#[no_mangle]
unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dst as usize).wrapping_sub(src as usize) >= n {
        // SAFETY: a forward copy is correct when dst is below src or past its end.
        return unsafe { memcpy(dst, src, n) };
    }
    // SAFETY: the caller's contract; copying backward (direction flag set, then cleared as
    // the ABI requires) from the last byte.
    unsafe {
        core::arch::asm!(
            "std",
            "rep movsb",
            "cld",
            inout("rcx") n => _,
            inout("rdi") dst.add(n).wrapping_sub(1) => _,
            inout("rsi") src.add(n).wrapping_sub(1) => _,
            options(nostack),
        );
    }
    dst
}

/// # Safety
/// `dst` is valid for `n` bytes.
#[no_mangle]
unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY: the caller's contract; `rep stosb` stores n bytes forward.
    unsafe {
        core::arch::asm!(
            "rep stosb",
            inout("rcx") n => _,
            inout("rdi") dst => _,
            in("al") c as u8,
            options(nostack, preserves_flags),
        );
    }
    dst
}

/// # Safety
/// `a` and `b` are valid for `n` bytes.
#[no_mangle]
unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i < n {
        // SAFETY: i < n, within both ranges; volatile so that the loop stays a loop.
        let (x, y) = unsafe {
            (
                core::ptr::read_volatile(a.add(i)),
                core::ptr::read_volatile(b.add(i)),
            )
        };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
        i += 1;
    }
    0
}

/// # Safety
/// `s` is a NUL-terminated string.
#[no_mangle]
unsafe extern "C" fn strlen(s: *const u8) -> usize {
    let mut n = 0;
    // SAFETY: up to and including the NUL, within the string; volatile so that the loop
    // stays a loop.
    while unsafe { core::ptr::read_volatile(s.add(n)) } != 0 {
        n += 1;
    }
    n
}

/// # Safety
/// `a` and `b` are valid for `n` bytes.
#[no_mangle]
unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: the caller's contract.
    unsafe { memcmp(a, b, n) }
}
