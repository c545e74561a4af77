//! The ELF loader: maps an executable (ET_EXEC, PIE or static-PIE) and, for a dynamic one, its
//! interpreter (PT_INTERP: the root filesystem's own `ld.so`) into a fresh address space, and
//! builds the initial stack (argv, envp, auxv) as Linux's `binfmt_elf` does.

mod stack;

use std::fs::File;
use std::sync::Arc;

use goblin::container::{Container, Ctx, Endian};
use goblin::elf::program_header::{PF_R, PF_W, PF_X, PT_INTERP, PT_LOAD, PT_PHDR};
use goblin::elf::{Elf, Header, ProgramHeader};
use mm::{MemoryManager, MmapRequest, Prot, VmaKind};
use platform::{Gva, PAGE_SIZE};

pub use stack::{build_stack, AuxIds, StackImage};

/// Errors loading a program.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// Guest path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Not an ELF file.
    #[error("{0} is not an ELF executable")]
    NotElf(String),
    /// An ELF file torpor cannot run.
    #[error("{path}: {why}")]
    Unsupported {
        /// Guest path.
        path: String,
        /// Why.
        why: String,
    },
    /// A dynamically linked program whose interpreter is not in the root filesystem.
    #[error("{path} is a dynamic ELF whose interpreter {interp} is not in the root filesystem ({errno})")]
    NoInterpreter {
        /// Guest path of the program.
        path: String,
        /// The interpreter it names (PT_INTERP).
        interp: String,
        /// Why opening it failed.
        errno: abi::Errno,
    },
    /// Mapping a segment failed.
    #[error("mapping {path}: {source}")]
    Map {
        /// Guest path.
        path: String,
        /// Cause.
        source: mm::MmError,
    },
}

/// Where the program landed: what the initial stack's auxv and the first instruction need.
#[derive(Clone, Copy, Debug)]
pub struct LoadedImage {
    /// Where execution starts: the interpreter's entry point, or the program's.
    pub entry: Gva,
    /// The program's own entry point (AT_ENTRY).
    pub program_entry: Gva,
    /// Address of the program headers in memory (AT_PHDR).
    pub phdr: Gva,
    /// Number of program headers (AT_PHNUM).
    pub phnum: u64,
    /// Base of the interpreter (AT_BASE), 0 for a static program.
    pub interp_base: Gva,
    /// End of the highest segment: the initial program break.
    pub brk: Gva,
}

/// Base at which a position-independent program (ET_DYN) is placed, as Linux's
/// ELF_ET_DYN_BASE.
const PIE_BASE: u64 = 0x5555_5555_4000;

/// Most bytes of program headers an ELF file may have (Linux refuses a larger table).
const MAX_PHDR_BYTES: usize = 64 << 10;

/// Longest PT_INTERP path (PATH_MAX).
const MAX_INTERP_BYTES: u64 = 4096;

/// One mapped ELF object.
struct Mapped {
    entry: u64,
    phdr: u64,
    phnum: u64,
    end: u64,
}

/// What the loader reads of an ELF file: its header, its program headers and the interpreter
/// it names. Nothing else is read: the segments are mapped (through the page cache), not
/// copied, so starting a large program costs a few hundred bytes of reads, not its size.
struct ElfImage {
    header: Header,
    program_headers: Vec<ProgramHeader>,
    interpreter: Option<String>,
}

/// Reads `len` bytes at `offset` of `file`; a file too short is a malformed ELF.
fn read_at(path: &str, file: &File, offset: u64, len: usize) -> Result<Vec<u8>, LoadError> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, offset).map_err(|source| {
        if source.kind() == std::io::ErrorKind::UnexpectedEof {
            LoadError::Unsupported {
                path: path.into(),
                why: "malformed ELF: truncated".into(),
            }
        } else {
            LoadError::Read {
                path: path.into(),
                source,
            }
        }
    })?;
    Ok(buf)
}

/// Reads and checks the header, program headers and interpreter of the x86-64 executable
/// `file`.
fn read_image(path: &str, file: &File) -> Result<ElfImage, LoadError> {
    use goblin::elf::header::{EI_CLASS, EI_DATA, ELFCLASS64, ELFDATA2LSB};
    use std::os::unix::fs::FileExt;
    let unsupported = |why: String| LoadError::Unsupported {
        path: path.into(),
        why,
    };
    let mut head = [0u8; goblin::elf::header::header64::SIZEOF_EHDR];
    let mut got = 0;
    while got < head.len() {
        match file.read_at(&mut head[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(LoadError::Read {
                    path: path.into(),
                    source,
                })
            }
        }
    }
    if got < 4 || head[..4] != *b"\x7fELF" {
        return Err(LoadError::NotElf(path.into()));
    }
    if got < head.len() || head[EI_CLASS] != ELFCLASS64 || head[EI_DATA] != ELFDATA2LSB {
        return Err(unsupported("not an x86-64 ELF".into()));
    }
    let header =
        Elf::parse_header(&head).map_err(|e| unsupported(format!("malformed ELF: {e}")))?;
    if header.e_machine != goblin::elf::header::EM_X86_64 {
        return Err(unsupported("not an x86-64 ELF".into()));
    }
    match header.e_type {
        goblin::elf::header::ET_EXEC | goblin::elf::header::ET_DYN => {}
        t => return Err(unsupported(format!("ELF type {t} is not executable"))),
    }
    let ctx = Ctx::new(Container::Big, Endian::Little);
    if usize::from(header.e_phentsize) != ProgramHeader::size(ctx) {
        return Err(unsupported("malformed ELF: program header size".into()));
    }
    let table = usize::from(header.e_phnum) * ProgramHeader::size(ctx);
    if table == 0 || table > MAX_PHDR_BYTES {
        return Err(unsupported("malformed ELF: program header table".into()));
    }
    let bytes = read_at(path, file, header.e_phoff, table)?;
    let program_headers = ProgramHeader::parse(&bytes, 0, usize::from(header.e_phnum), ctx)
        .map_err(|e| unsupported(format!("malformed ELF: {e}")))?;
    let interpreter = match program_headers.iter().find(|p| p.p_type == PT_INTERP) {
        None => None,
        Some(p) => {
            if p.p_filesz < 2 || p.p_filesz > MAX_INTERP_BYTES {
                return Err(unsupported("malformed ELF: PT_INTERP".into()));
            }
            let mut name = read_at(path, file, p.p_offset, p.p_filesz as usize)?;
            // The path ends at its first NUL.
            if let Some(nul) = name.iter().position(|&b| b == 0) {
                name.truncate(nul);
            }
            Some(
                String::from_utf8(name)
                    .map_err(|_| unsupported("malformed ELF: PT_INTERP is not UTF-8".into()))?,
            )
        }
    };
    Ok(ElfImage {
        header,
        program_headers,
        interpreter,
    })
}

/// Loads the executable at `path` (opened as `file`) into `mm`; a dynamic one gets its
/// interpreter (PT_INTERP, e.g. the root's own `ld.so`), opened through `root`. With
/// `files`, the sandbox's shared space, segments of files that qualify are backed by the
/// page cache (`mm`'s `pagecache.rs`) instead of copied.
///
/// # Errors
/// [`LoadError`] for an unreadable, non-ELF or malformed file, or a missing interpreter.
pub fn load_elf(
    mm: &mut MemoryManager,
    root: &crate::fs::Root,
    path: &str,
    file: File,
    files: Option<&Arc<mm::SharedSpace>>,
) -> Result<LoadedImage, LoadError> {
    let elf = read_image(path, &file)?;
    let interp = elf.interpreter.clone();
    let is_dyn = elf.header.e_type == goblin::elf::header::ET_DYN;
    let bias = if is_dyn { PIE_BASE } else { 0 };
    let cache = files.and_then(|s| s.private_file(&file, true));
    // Its mappings are named by the file's resolved path, as Linux's d_path.
    let shown = shown_path(root, &file, path);
    let main = map_object(mm, &shown, (Arc::new(file), cache), &elf, bias)?;
    let (entry, interp_base) = match interp {
        None => (main.entry, 0),
        Some(ip) => {
            let fd = root
                .open_at(ip.as_bytes(), libc::O_RDONLY, 0)
                .map_err(|errno| LoadError::NoInterpreter {
                    path: path.into(),
                    interp: ip.clone(),
                    errno,
                })?;
            let ifile = File::from(fd);
            let ielf = read_image(&ip, &ifile)?;
            if ielf.header.e_type != goblin::elf::header::ET_DYN || ielf.interpreter.is_some() {
                return Err(LoadError::Unsupported {
                    path: ip,
                    why: "an interpreter must be a static ET_DYN object".into(),
                });
            }
            // Reserve the interpreter's whole span below the mmap base, then map its segments
            // into it.
            let (lo, hi) = span(&ielf).ok_or_else(|| LoadError::Unsupported {
                path: ip.clone(),
                why: "no loadable segment".into(),
            })?;
            let reserved = mm
                .mmap(MmapRequest {
                    addr: Gva(0),
                    len: hi - lo,
                    prot: Prot::NONE,
                    fixed: false,
                    fixed_noreplace: false,
                    kind: VmaKind::Anon,
                    name: None,
                })
                .map_err(|source| LoadError::Map {
                    path: ip.clone(),
                    source,
                })?
                .raw();
            // Segments linked above the reserved range cannot be moved down into it.
            let base = reserved
                .checked_sub(lo)
                .ok_or_else(|| LoadError::Unsupported {
                    path: ip.clone(),
                    why: "interpreter linked above the mmap area".into(),
                })?;
            let icache = files.and_then(|s| s.private_file(&ifile, true));
            let ishown = shown_path(root, &ifile, &ip);
            let m = map_object(mm, &ishown, (Arc::new(ifile), icache), &ielf, base)?;
            (m.entry, base)
        }
    };
    Ok(LoadedImage {
        entry: Gva(entry),
        program_entry: Gva(main.entry),
        phdr: Gva(main.phdr),
        phnum: main.phnum,
        interp_base: Gva(interp_base),
        brk: Gva(main.end),
    })
}

/// The page-aligned `[low, high)` the PT_LOAD segments span (before relocation).
fn span(elf: &ElfImage) -> Option<(u64, u64)> {
    let loads = elf.program_headers.iter().filter(|p| p.p_type == PT_LOAD);
    let lo = loads.clone().map(|p| p.p_vaddr & !(PAGE_SIZE - 1)).min()?;
    let hi = loads.map(|p| p.p_vaddr.saturating_add(p.p_memsz)).max()?;
    Some((lo, hi.checked_add(PAGE_SIZE - 1)? & !(PAGE_SIZE - 1)))
}

/// The guest path `/proc/PID/maps` shows for `file`, opened as `path`: its resolved path in
/// the root (symlinks followed), else `path`.
fn shown_path(root: &crate::fs::Root, file: &File, path: &str) -> String {
    root.guest_path_of(file)
        .map(|p| String::from_utf8_lossy(&p).into_owned())
        .unwrap_or_else(|_| path.to_string())
}

/// Maps the PT_LOAD segments of `elf` at `bias`.
fn map_object(
    mm: &mut MemoryManager,
    path: &str,
    (file, cache): (Arc<File>, Option<Arc<mm::SharedObject>>),
    elf: &ElfImage,
    bias: u64,
) -> Result<Mapped, LoadError> {
    let unsupported = |why: String| LoadError::Unsupported {
        path: path.into(),
        why,
    };
    let mut end_max = 0u64;
    let mut phdr_addr = None;
    let mut first_load_vaddr_minus_offset = None;
    let loads: Vec<_> = elf
        .program_headers
        .iter()
        .filter(|p| p.p_type == PT_LOAD)
        .collect();
    if loads.is_empty() {
        return Err(unsupported("no loadable segment".into()));
    }
    for ph in &loads {
        if ph.p_memsz < ph.p_filesz || ph.p_offset % PAGE_SIZE != ph.p_vaddr % PAGE_SIZE {
            return Err(unsupported("inconsistent PT_LOAD segment".into()));
        }
        let vaddr = ph
            .p_vaddr
            .checked_add(bias)
            .ok_or_else(|| unsupported("segment overflows".into()))?;
        let end = vaddr
            .checked_add(ph.p_memsz)
            .ok_or_else(|| unsupported("segment overflows".into()))?;
        if end > platform::layout::USER_END.raw() {
            return Err(unsupported("segment beyond the user address space".into()));
        }
        let mut prot = Prot::NONE;
        if ph.p_flags & PF_R != 0 {
            prot = prot | Prot::READ;
        }
        if ph.p_flags & PF_W != 0 {
            prot = prot | Prot::WRITE;
        }
        if ph.p_flags & PF_X != 0 {
            prot = prot | Prot::EXEC;
        }
        let page = vaddr & !(PAGE_SIZE - 1);
        let off_page = ph.p_offset & !(PAGE_SIZE - 1);
        let file_end = vaddr + ph.p_filesz;
        if first_load_vaddr_minus_offset.is_none() {
            first_load_vaddr_minus_offset = Some(vaddr.wrapping_sub(ph.p_offset));
        }
        let map = |mm: &mut MemoryManager, addr: u64, len: u64, kind: VmaKind| {
            mm.mmap(MmapRequest {
                addr: Gva(addr),
                len,
                prot,
                fixed: true,
                fixed_noreplace: false,
                kind,
                name: Some(path.to_string()),
            })
            .map_err(|source| LoadError::Map {
                path: path.into(),
                source,
            })
        };
        // File-backed part, up to the page holding the end of the file data.
        let file_map_end = (file_end + PAGE_SIZE - 1) & !(PAGE_SIZE - 1);
        if ph.p_filesz > 0 {
            map(
                mm,
                page,
                file_map_end - page,
                VmaKind::File {
                    file: file.clone(),
                    offset: off_page,
                    cache: cache.clone(),
                },
            )?;
            // Bytes of the last file page past p_filesz belong to .bss: zero them. The page is
            // private, so writing it does not touch the file.
            let tail = file_map_end - file_end;
            if tail > 0 && ph.p_memsz > ph.p_filesz {
                let zeros = vec![0u8; tail as usize];
                write_zeros(mm, Gva(file_end), &zeros).map_err(|source| LoadError::Map {
                    path: path.into(),
                    source,
                })?;
            }
        }
        let anon_start = if ph.p_filesz > 0 { file_map_end } else { page };
        let mem_end = (end + PAGE_SIZE - 1) & !(PAGE_SIZE - 1);
        if mem_end > anon_start {
            map(mm, anon_start, mem_end - anon_start, VmaKind::Anon)?;
        }
        end_max = end_max.max(end);
        // (Header values are the file's: any sum may overflow. AT_PHDR is only reported to
        // the program, so it wraps as Linux's does.)
        if ph.p_offset <= elf.header.e_phoff
            && ph
                .p_offset
                .checked_add(ph.p_filesz)
                .is_some_and(|file_end| elf.header.e_phoff < file_end)
        {
            phdr_addr.get_or_insert(vaddr + (elf.header.e_phoff - ph.p_offset));
        }
    }
    if let Some(p) = elf.program_headers.iter().find(|p| p.p_type == PT_PHDR) {
        phdr_addr = Some(p.p_vaddr.wrapping_add(bias));
    }
    let phdr = phdr_addr
        .or_else(|| first_load_vaddr_minus_offset.map(|b| b.wrapping_add(elf.header.e_phoff)))
        .unwrap_or(0);
    Ok(Mapped {
        entry: elf.header.e_entry.wrapping_add(bias),
        phdr,
        phnum: elf.program_headers.len() as u64,
        end: end_max,
    })
}

fn write_zeros(mm: &mut MemoryManager, at: Gva, zeros: &[u8]) -> Result<(), mm::MmError> {
    // The segment may be read-only (a read-only segment with a .bss tail is unusual but legal):
    // write through the kernel's view, which ignores protections (and copies a page-cache
    // page first).
    mm.poke(at, zeros)
}

#[cfg(test)]
mod tests {
    use super::*;
    use platform::GuestMemory;

    /// A little x86-64 ELF: one program header per `(type, vaddr, offset, filesz, memsz)`,
    /// then `interp` (NUL-terminated) at the offset a PT_INTERP entry names.
    fn elf(e_type: u16, phs: &[(u32, u64, u64, u64, u64)], interp: &[u8]) -> Vec<u8> {
        let mut v = b"\x7fELF\x02\x01\x01".to_vec();
        v.resize(16, 0);
        let phnum = phs.len() as u16;
        for (x, n) in [
            (e_type as u64, 2),
            (62, 2),
            (1, 4),
            (0x1000, 8),
            (64, 8),
            (0, 8),
        ] {
            v.extend_from_slice(&x.to_le_bytes()[..n]);
        }
        for (x, n) in [
            (0u64, 4),
            (64, 2),
            (56, 2),
            (phnum as u64, 2),
            (64, 2),
            (0, 2),
            (0, 2),
        ] {
            v.extend_from_slice(&x.to_le_bytes()[..n]);
        }
        for &(t, vaddr, off, filesz, memsz) in phs {
            v.extend_from_slice(&t.to_le_bytes());
            v.extend_from_slice(&5u32.to_le_bytes());
            for x in [off, vaddr, vaddr, filesz, memsz, 0x1000] {
                v.extend_from_slice(&x.to_le_bytes());
            }
        }
        v.extend_from_slice(interp);
        v.push(0);
        v.resize(0x2000, 0xcc);
        v
    }

    fn load(name: &str, program: &[u8], interp: Option<&[u8]>) -> Result<LoadedImage, LoadError> {
        let dir = std::env::temp_dir().join(format!("loader-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(i) = interp {
            std::fs::write(dir.join("i"), i).unwrap();
        }
        let root = crate::fs::Root::open(&dir).unwrap();
        let file_path = dir.join("prog");
        std::fs::write(&file_path, program).unwrap();
        let mem = Arc::new(GuestMemory::new(16 << 20).unwrap());
        let mut mm = MemoryManager::new(mem).unwrap();
        let r = load_elf(
            &mut mm,
            &root,
            "/prog",
            File::open(&file_path).unwrap(),
            None,
        );
        let _ = std::fs::remove_dir_all(&dir);
        r
    }

    /// The loader reads only the header, the program headers and the interpreter's name: each
    /// of them malformed or cut short is a clear error, not a panic or a partial load.
    #[test]
    fn malformed_headers_are_clear_errors() {
        let good = elf(2, &[(PT_LOAD, 0x40_0000, 0, 0x100, 0x1000)], b"");
        assert!(load("good", &good, None).is_ok());
        assert!(matches!(
            load("notelf", b"#!/bin/sh\n", None),
            Err(LoadError::NotElf(_))
        ));
        let why = |r: Result<LoadedImage, LoadError>| match r {
            Err(LoadError::Unsupported { why, .. }) => why,
            other => panic!("{:?}", other.map(|i| i.entry)),
        };
        // 32-bit class.
        let mut p = good.clone();
        p[4] = 1;
        assert_eq!(why(load("class", &p, None)), "not an x86-64 ELF");
        // Only the ELF header.
        assert!(why(load("short", &good[..64], None)).contains("truncated"));
        // Program headers of another size.
        let mut p = good.clone();
        p[54] = 32;
        assert!(why(load("phentsize", &p, None)).contains("program header size"));
        // No program headers.
        let mut p = good.clone();
        p[56] = 0;
        assert!(why(load("phnum", &p, None)).contains("program header table"));
        // A PT_INTERP longer than PATH_MAX.
        let p = elf(
            2,
            &[
                (3, 0, 0x100, 8192, 8192),
                (PT_LOAD, 0x40_0000, 0, 0x100, 0x1000),
            ],
            b"",
        );
        assert!(why(load("interp", &p, None)).contains("PT_INTERP"));
    }

    /// Found by the `elf` fuzz target: an interpreter whose segments are linked above the
    /// address its span was reserved at made the base computation underflow (a panic in a
    /// build with overflow checks). It is refused.
    #[test]
    fn interpreter_linked_above_the_mmap_area_is_refused() {
        let interp = elf(3, &[(PT_LOAD, 0x7f7f_0000_0000, 0, 0x100, 0x1000)], b"");
        let prog = elf(
            2,
            &[
                (3, 0x40_0000, 0x1000 - 8, 3, 3),
                (PT_LOAD, 0x40_0000, 0, 0x100, 0x1000),
            ],
            b"",
        );
        // PT_INTERP at file offset 0xff8: "/i\0".
        let mut prog = prog;
        prog[0xff8..0xffb].copy_from_slice(b"/i\0");
        let r = load("above", &prog, Some(&interp));
        assert!(
            matches!(r, Err(LoadError::Unsupported { .. })),
            "{:?}",
            r.map(|i| i.entry)
        );
    }

    /// Found by reading the loader after the fuzz target's find: header sums that overflow
    /// (AT_PHDR from a PT_PHDR at the top of the address space plus the load bias) are not
    /// panics either.
    #[test]
    fn overflowing_header_values_are_not_panics() {
        // A position-independent program: PT_PHDR's address plus the load bias wraps.
        let prog = elf(
            3,
            &[
                (PT_PHDR, u64::MAX - 0xfff, 64, 0, 0),
                (PT_LOAD, 0x40_0000, 0, 0x100, 0x1000),
                (PT_LOAD, 0x60_0000, u64::MAX - 0xfff, 0, 0x1000),
            ],
            b"",
        );
        let _ = load("overflow1", &prog, None);
        let mut prog = elf(2, &[(PT_LOAD, 0x40_0000, 0, 0x100, 0x1000)], b"");
        prog[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes()); // e_phoff
        let _ = load("overflow2", &prog, None);
    }
}
