//! The ELF loader on fuzzer bytes: a program and, for a dynamic one, its interpreter.
//!
//! Input: `[n: u16 LE][program: n bytes][interpreter: the rest]`. The program is handed to
//! `load_elf` as a memfd; the interpreter is the file `/i` of a root directory (so a program
//! whose PT_INTERP says `/i` gets it). On success the initial stack is built and the entry
//! point, program headers and stack are read through the memory manager, which faults the
//! file-backed pages in from the fuzzer's bytes. Nothing may panic; a loaded image must lie in
//! the user half.

use std::fs::File;
use std::io::{Seek, Write};
use std::os::fd::FromRawFd;
use std::sync::Arc;

use kernel::fs::Root;
use kernel::loader;
use mm::MemoryManager;
use platform::GuestMemory;

/// Guest memory given to each load (MAP_NORESERVE: only touched pages cost).
const MEMORY: u64 = 32 << 20;

fn memfd(bytes: &[u8]) -> File {
    // SAFETY: a valid NUL-terminated name; the fd returned is ours.
    let fd = unsafe { libc::memfd_create(c"fuzz-elf".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a fresh descriptor we own.
    let mut f = unsafe { File::from_raw_fd(fd) };
    f.write_all(bytes).expect("memfd write");
    // The loader reads from the current offset, as from a freshly opened file.
    f.seek(std::io::SeekFrom::Start(0)).expect("memfd seek");
    f
}

thread_local! {
    static ROOT: (std::path::PathBuf, Root) = {
        let dir = crate::util::scratch_dir("elf-root");
        let root = Root::open(&dir).expect("root");
        (dir, root)
    };
}

/// Splits the input into program and interpreter.
pub fn split(data: &[u8]) -> (&[u8], &[u8]) {
    if data.len() < 2 {
        return (data, &[]);
    }
    let n = usize::from(u16::from_le_bytes([data[0], data[1]])).min(data.len() - 2);
    (&data[2..2 + n], &data[2 + n..])
}

/// Builds an input from a program and an interpreter (for seeds).
pub fn join(program: &[u8], interp: &[u8]) -> Vec<u8> {
    let n = program.len().min(0xffff);
    let mut v = (n as u16).to_le_bytes().to_vec();
    v.extend_from_slice(&program[..n]);
    v.extend_from_slice(interp);
    v
}

/// The harness.
pub fn run(data: &[u8]) {
    let (program, interp) = split(data);
    ROOT.with(|(dir, root)| {
        let ipath = dir.join("i");
        if interp.is_empty() {
            let _ = std::fs::remove_file(&ipath);
        } else {
            std::fs::write(&ipath, interp).expect("write interpreter");
        }
        let mem = Arc::new(GuestMemory::new(MEMORY).expect("guest memory"));
        let mut mm = MemoryManager::new(mem).expect("memory manager");
        let Ok(image) = loader::load_elf(&mut mm, root, "/fuzz", memfd(program), None) else {
            return;
        };
        let end = platform::layout::USER_END.raw();
        assert!(
            image.brk.raw() <= end,
            "brk {:#x} beyond the user half",
            image.brk.raw()
        );
        assert!(
            image.interp_base.raw() < end,
            "interpreter base {:#x}",
            image.interp_base.raw()
        );
        let Ok(stack) = loader::build_stack(
            &mut mm,
            &image,
            &[b"/fuzz".to_vec(), b"arg".to_vec()],
            &[b"K=V".to_vec()],
            b"/fuzz",
            loader::AuxIds::default(),
            None,
        ) else {
            return;
        };
        // What the program and ld.so touch first: the entry point, the program headers
        // (AT_PHDR), the stack. Faults read the file pages; errors are fine, panics are not.
        for (at, len) in [
            (image.entry, 64),
            (image.program_entry, 64),
            (image.phdr, image.phnum.saturating_mul(56).min(1 << 16)),
            (stack.sp, 64),
        ] {
            if let Ok(runs) = mm.user_ranges(at, len, false) {
                let mut buf = vec![0u8; 4096];
                for (gpa, n) in runs {
                    let n = (n as usize).min(buf.len());
                    mm.memory()
                        .read(gpa, &mut buf[..n])
                        .expect("a translated range is readable");
                }
            }
        }
    });
}
