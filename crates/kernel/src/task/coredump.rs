//! Core dumps: a process ended by a signal whose default action dumps core (SIGQUIT, SIGILL,
//! SIGTRAP, SIGABRT, SIGBUS, SIGFPE, SIGSEGV, SIGXCPU, SIGXFSZ, SIGSYS) leaves an ELF core
//! file, as Linux's `fs/coredump.c` and `fs/binfmt_elf.c`, named by the sandbox's
//! `/proc/sys/kernel/core_pattern` (default `core`, in the process's working directory; `%p`
//! and the other specifiers expanded; a `|program` pattern makes no file), when its
//! RLIMIT_CORE allows (the sandbox's default soft limit is 0: no file unless a process raises
//! it, as under Docker). Its parent then sees `WCOREDUMP` and `CLD_DUMPED`.
//!
//! The file is made as the process's filesystem ids inside the sandbox's root (never through
//! a symbolic link; an existing file must be a regular one owned by the process, with one
//! link, as Linux requires), mode 0600. It holds the ELF header, one `PT_NOTE` (the dumping
//! thread's `NT_PRSTATUS` with its registers, `NT_PRPSINFO`, `NT_SIGINFO`) and a `PT_LOAD` for
//! each mapping: its present pages are written, the rest left as holes (zeros), and a mapping
//! that cannot be read is a header without bytes. As on Linux, RLIMIT_CORE bounds the bytes
//! written (holes are free): a dump that does not fit is cut short, and still reported as a
//! core dump once its file was made (Linux's `elf_core_dump` sets `has_dumped` before it
//! writes); a limit below one page makes no file.
//!
//! Which mappings have their bytes written is Linux's `vma_dump_size`: none of a mapping marked
//! `MADV_DONTDUMP`; else as the process's `/proc/PID/coredump_filter` says ([`DEFAULT_FILTER`]
//! until changed): private anonymous memory (bit 0), shared anonymous memory (bit 1), private
//! file mappings (bit 2; with bit 0 a writable one, whose written pages are anonymous memory
//! on Linux), shared file mappings (bit 3), and the first page of a file mapping that starts
//! with an ELF header (bit 4). Every mapping still has its `PT_LOAD` header.
//!
//! Gaps: only the dumping thread's registers are written (Linux stops every thread first and
//! writes each one's); the other threads may still run while the memory is copied.

use std::os::fd::AsRawFd;

use platform::{Gva, PAGE_SIZE};

use super::{SigInfo, Task};

/// Whether `sig`'s default action dumps core.
pub fn dumps_core(sig: i32) -> bool {
    matches!(
        sig,
        libc::SIGQUIT
            | libc::SIGILL
            | libc::SIGTRAP
            | libc::SIGABRT
            | libc::SIGBUS
            | libc::SIGFPE
            | libc::SIGSEGV
            | libc::SIGXCPU
            | libc::SIGXFSZ
            | libc::SIGSYS
    )
}

/// `coredump_filter` bit: private anonymous memory.
const FILTER_ANON_PRIVATE: u32 = 1;
/// `coredump_filter` bit: shared anonymous memory.
const FILTER_ANON_SHARED: u32 = 2;
/// `coredump_filter` bit: private file mappings.
const FILTER_MAPPED_PRIVATE: u32 = 4;
/// `coredump_filter` bit: shared file mappings.
const FILTER_MAPPED_SHARED: u32 = 8;
/// `coredump_filter` bit: the ELF header page of file mappings.
const FILTER_ELF_HEADERS: u32 = 0x10;
/// A new process's `coredump_filter` (Linux's default, `MMF_DUMP_FILTER_DEFAULT`): anonymous
/// memory, ELF headers, private huge pages.
pub const DEFAULT_FILTER: u32 = 0x33;
/// The bits `coredump_filter` keeps (`MMF_DUMP_FILTER_BITS`: nine).
pub const FILTER_MASK: u32 = 0x1ff;

/// How much of a mapping a core dump writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dump {
    /// Its present pages.
    Whole,
    /// Its first page, if present (an ELF header).
    Header,
    /// No bytes.
    Nothing,
}

/// How much of mapping `v` a dump with `coredump_filter` bits `filter` writes (Linux's
/// `vma_dump_size`, without huge pages and DAX).
fn dump_of(v: &mm::Vma, filter: u32) -> Dump {
    let on = |bit: u32| filter & bit != 0;
    if v.advice.contains(mm::VmAdvice::DONT_DUMP) {
        return Dump::Nothing;
    }
    let whole_if = |yes: bool| if yes { Dump::Whole } else { Dump::Nothing };
    match &v.kind {
        mm::VmaKind::Anon => whole_if(on(FILTER_ANON_PRIVATE)),
        mm::VmaKind::Shared { object, .. } if object.is_file() => {
            whole_if(on(FILTER_MAPPED_SHARED))
        }
        mm::VmaKind::Shared { .. } => whole_if(on(FILTER_ANON_SHARED)),
        mm::VmaKind::File { offset, .. } => {
            if on(FILTER_MAPPED_PRIVATE)
                || (on(FILTER_ANON_PRIVATE) && v.prot.contains(mm::Prot::WRITE))
            {
                Dump::Whole
            } else if on(FILTER_ELF_HEADERS) && *offset == 0 {
                Dump::Header
            } else {
                Dump::Nothing
            }
        }
    }
}

/// `/proc/sys/kernel/core_pattern`'s default: the file name a core dump gets.
pub const CORE_PATTERN: &str = "core";

/// Linux's `CORENAME_MAX_SIZE`: a pattern is cut to one byte less.
const CORENAME_MAX_SIZE: usize = 128;

/// A `core_pattern` written as `text`: its first line, cut to [`CORENAME_MAX_SIZE`] - 1
/// bytes as Linux's `proc_dostring` cuts it.
///
/// # Errors
/// None yet (every text is a pattern); the `Result` is the tunables' writer's.
pub fn pattern_from(text: &[u8]) -> Result<Vec<u8>, abi::Errno> {
    let line = text.split(|&b| b == b'\n').next().unwrap_or_default();
    Ok(line[..line.len().min(CORENAME_MAX_SIZE - 1)].to_vec())
}

const EHDR_SIZE: usize = 64;
const PHDR_SIZE: usize = 56;
const NT_PRSTATUS: u32 = 1;
const NT_PRPSINFO: u32 = 3;
const NT_SIGINFO: u32 = 0x5349_4749;
const PRSTATUS_SIZE: usize = 336;
const PRPSINFO_SIZE: usize = 136;
const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;

/// One mapping of the dump: its range, rights (`PF_*`), the bytes it has in the file (0, a
/// page or all of it), and the pages to write there.
struct Segment {
    start: u64,
    end: u64,
    flags: u32,
    filesz: u64,
    pages: Vec<Gva>,
}

impl Task {
    /// Writes the core file for fatal signal `info`; returns whether it was made (the
    /// parent's `WCOREDUMP`).
    pub(crate) fn dump_core(&mut self, info: &SigInfo) -> bool {
        let limit = self
            .group
            .rlimits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(libc::RLIMIT_CORE)
            .map_or(0, |l| l.cur);
        if limit < PAGE_SIZE {
            return false;
        }
        match self.write_core(info, limit) {
            Ok(done) => done,
            Err(e) => {
                tracing::debug!(pid = self.pid, ?e, "no core dump");
                false
            }
        }
    }

    fn write_core(&mut self, info: &SigInfo, limit: u64) -> Result<bool, abi::Errno> {
        let segments = self.core_segments();
        let notes = self.core_notes(info);
        let phnum = 1 + segments.len();
        let notes_at = EHDR_SIZE + PHDR_SIZE * phnum;
        let mut offset = (notes_at + notes.len()).next_multiple_of(PAGE_SIZE as usize) as u64;
        let mut head = elf_header(phnum as u16);
        head.extend(phdr(
            PT_NOTE,
            0,
            notes_at as u64,
            0,
            notes.len() as u64,
            0,
            4,
        ));
        let mut placed = Vec::with_capacity(segments.len());
        for s in &segments {
            let size = s.filesz;
            head.extend(phdr(
                PT_LOAD,
                s.flags,
                offset,
                s.start,
                size,
                s.end - s.start,
                PAGE_SIZE,
            ));
            placed.push(offset);
            offset += size;
        }
        head.extend(notes);

        let pattern = self
            .group
            .procs
            .core_pattern
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if pattern.first() == Some(&b'|') {
            // A pipe to a helper program: torpor runs none.
            return Ok(false);
        }
        let name = self.core_name(&pattern, info.signo());
        if name.is_empty() {
            return Ok(false);
        }
        let path = crate::fs::join(&self.cwd(), &name);
        let file = {
            let creds = self.creds.clone();
            let _as = crate::fs::identity::act_as(&creds)?;
            let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC;
            self.root.open_at(&path, flags, 0o600)?
        };
        let fd = file.as_raw_fd();
        // SAFETY: fstat of a descriptor this function owns into a zeroed stat.
        let st = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut st) != 0 {
                return Err(abi::Errno::last());
            }
            st
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG
            || st.st_nlink != 1
            || st.st_uid != self.creds.fsuid
        {
            return Err(abi::Errno::EPERM);
        }
        // SAFETY: truncating a descriptor this function owns.
        if unsafe { libc::ftruncate(fd, 0) } != 0 {
            return Err(abi::Errno::last());
        }
        let mut written = 0u64;
        let mut emit = |bytes: &[u8], at: u64| -> Result<bool, abi::Errno> {
            if written + bytes.len() as u64 > limit {
                return Ok(false);
            }
            write_all_at(fd, bytes, at)?;
            written += bytes.len() as u64;
            Ok(true)
        };
        if !emit(&head, 0)? {
            return Ok(true);
        }
        let mut page = vec![0u8; PAGE_SIZE as usize];
        for (s, at) in segments.iter().zip(placed) {
            for &va in &s.pages {
                if self.copy_in(va, &mut page).is_err() {
                    // Gone since it was listed (another thread unmapped it): a hole.
                    continue;
                }
                if !emit(&page, at + (va.0 - s.start))? {
                    tracing::debug!(pid = self.pid, limit, "core dump cut short by RLIMIT_CORE");
                    return Ok(true);
                }
            }
        }
        // The file covers every segment, holes included.
        // SAFETY: sizing a descriptor this function owns.
        if unsafe { libc::ftruncate(fd, offset as libc::off_t) } != 0 {
            return Err(abi::Errno::last());
        }
        tracing::debug!(pid = self.pid, bytes = written, "core dumped");
        Ok(true)
    }

    /// The process's mappings and, for the readable ones the filter and their marks let
    /// the dump write ([`dump_of`]), the pages that have a frame or a swap slot
    /// (never-touched pages stay holes rather than being allocated).
    fn core_segments(&self) -> Vec<Segment> {
        let filter = self
            .group
            .coredump_filter
            .load(std::sync::atomic::Ordering::Relaxed);
        let mut mm = self.mm();
        let listed: Vec<(Gva, Gva, mm::Prot, Gva)> = mm
            .vmas()
            .map(|v| {
                let dumped_end = match dump_of(v, filter) {
                    _ if !v.prot.contains(mm::Prot::READ) => v.start,
                    Dump::Whole => v.end,
                    Dump::Header => Gva(v.start.0 + PAGE_SIZE),
                    Dump::Nothing => v.start,
                };
                (v.start, v.end, v.prot, dumped_end)
            })
            .collect();
        let mut out = Vec::with_capacity(listed.len());
        for (start, end, prot, dumped_end) in listed {
            let mut pages: Vec<Gva> = mm
                .page_tables()
                .frames_in(start, dumped_end)
                .into_iter()
                .map(|(va, _, _)| va)
                .collect();
            let header_only = dumped_end.0 == start.0 + PAGE_SIZE && !pages.is_empty();
            if header_only && dumped_end != end {
                // Only an ELF header is written: the page must start with one.
                let mut magic = [0u8; 4];
                if mm.copy_in(start, &mut magic).is_err() || magic != *b"\x7fELF" {
                    pages.clear();
                }
            }
            let filesz = if pages.is_empty() {
                0
            } else {
                dumped_end.0 - start.0
            };
            out.push(Segment {
                start: start.0,
                end: end.0,
                flags: (u32::from(prot.contains(mm::Prot::READ)) << 2)
                    | (u32::from(prot.contains(mm::Prot::WRITE)) << 1)
                    | u32::from(prot.contains(mm::Prot::EXEC)),
                filesz,
                pages,
            });
        }
        out
    }

    /// The core file's name from `pattern` (Linux's `format_corename`): `%p` and `%P` the
    /// pid, `%i` and `%I` the tid, `%u` and `%g` the ids, `%s` the signal, `%t` the time,
    /// `%h` the host name, `%e` the thread's name, `%E` the program's path with `/` as `!`,
    /// `%c` the RLIMIT_CORE soft limit, `%%` a `%`; any other `%x` is dropped.
    fn core_name(&self, pattern: &[u8], signo: i32) -> Vec<u8> {
        let mut out = Vec::with_capacity(pattern.len());
        let mut bytes = pattern.iter();
        while let Some(&b) = bytes.next() {
            if b != b'%' {
                out.push(b);
                continue;
            }
            let text = match bytes.next() {
                Some(b'%') => "%".to_string(),
                Some(b'p' | b'P') => self.pid.to_string(),
                Some(b'i' | b'I') => self.tid.to_string(),
                Some(b'u') => self.creds.uid.to_string(),
                Some(b'g') => self.creds.gid.to_string(),
                Some(b's') => signo.to_string(),
                Some(b't') => std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs())
                    .to_string(),
                Some(b'h') => String::from_utf8_lossy(&self.group.procs.nodename()).into_owned(),
                Some(b'e') => {
                    let comm = self.comm();
                    let len = comm.iter().position(|&c| c == 0).unwrap_or(comm.len());
                    String::from_utf8_lossy(&comm[..len]).replace('/', "!")
                }
                Some(b'E') => String::from_utf8_lossy(&self.exe).replace('/', "!"),
                Some(b'c') => self
                    .group
                    .rlimits
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(libc::RLIMIT_CORE)
                    .map_or(0, |l| l.cur)
                    .to_string(),
                _ => String::new(),
            };
            out.extend_from_slice(text.as_bytes());
        }
        out
    }

    /// The `PT_NOTE` contents: NT_PRSTATUS, NT_PRPSINFO, NT_SIGINFO.
    fn core_notes(&self, info: &SigInfo) -> Vec<u8> {
        let member = self.group.procs.membership(self.pid);
        let (pgrp, sid) = member.map_or((self.pid, self.pid), |m| (m.pgid, m.sid));
        let ppid = self.group.procs.parent_of(self.pid);
        let user = self.ctx.user();
        let r = &user.regs;

        let mut status = vec![0u8; PRSTATUS_SIZE];
        put32(&mut status, 0, info.signo() as u32);
        put32(&mut status, 4, info.code() as u32);
        status[12..14].copy_from_slice(&(info.signo() as u16).to_le_bytes());
        put64(&mut status, 16, self.signals.pending_set());
        put64(&mut status, 24, self.signals.mask);
        for (i, v) in [self.tid, ppid, pgrp, sid].into_iter().enumerate() {
            put32(&mut status, 32 + 4 * i, v as u32);
        }
        // user_regs_struct, in its order; the segment selectors of a 64-bit user thread.
        let regs = [
            r.r15,
            r.r14,
            r.r13,
            r.r12,
            r.rbp,
            r.rbx,
            r.r11,
            r.r10,
            r.r9,
            r.r8,
            r.rax,
            r.rcx,
            r.rdx,
            r.rsi,
            r.rdi,
            u64::MAX,
            r.rip,
            0x33,
            r.rflags,
            r.rsp,
            0x2b,
            user.fs_base,
            user.gs_base,
            0,
            0,
            0,
            0,
        ];
        for (i, v) in regs.into_iter().enumerate() {
            put64(&mut status, 112 + 8 * i, v);
        }

        let mut ps = vec![0u8; PRPSINFO_SIZE];
        ps[1] = b'R';
        put32(&mut ps, 16, self.creds.uid);
        put32(&mut ps, 20, self.creds.gid);
        for (i, v) in [self.pid, ppid, pgrp, sid].into_iter().enumerate() {
            put32(&mut ps, 24 + 4 * i, v as u32);
        }
        let comm = &self.comm();
        let n = comm
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(comm.len())
            .min(16);
        ps[40..40 + n].copy_from_slice(&comm[..n]);
        let args: Vec<u8> = self
            .cmdline
            .iter()
            .map(|&b| if b == 0 { b' ' } else { b })
            .take(79)
            .collect();
        let args = args.trim_ascii_end();
        ps[56..56 + args.len()].copy_from_slice(args);

        let mut out = Vec::new();
        note(&mut out, NT_PRSTATUS, &status);
        note(&mut out, NT_PRPSINFO, &ps);
        note(&mut out, NT_SIGINFO, &info.0);
        out
    }
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// An ELF note named "CORE".
fn note(out: &mut Vec<u8>, kind: u32, desc: &[u8]) {
    out.extend(5u32.to_le_bytes());
    out.extend((desc.len() as u32).to_le_bytes());
    out.extend(kind.to_le_bytes());
    out.extend(b"CORE\0\0\0\0");
    out.extend(desc);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// An x86-64 ELF header of a core file with `phnum` program headers after it.
fn elf_header(phnum: u16) -> Vec<u8> {
    let mut h = vec![0u8; EHDR_SIZE];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 2; // ELFCLASS64
    h[5] = 1; // little-endian
    h[6] = 1; // EV_CURRENT
    h[16..18].copy_from_slice(&4u16.to_le_bytes()); // ET_CORE
    h[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    h[20..24].copy_from_slice(&1u32.to_le_bytes());
    h[32..40].copy_from_slice(&(EHDR_SIZE as u64).to_le_bytes()); // e_phoff
    h[52..54].copy_from_slice(&(EHDR_SIZE as u16).to_le_bytes());
    h[54..56].copy_from_slice(&(PHDR_SIZE as u16).to_le_bytes());
    h[56..58].copy_from_slice(&phnum.to_le_bytes());
    h
}

/// A program header.
fn phdr(
    kind: u32,
    flags: u32,
    offset: u64,
    vaddr: u64,
    filesz: u64,
    memsz: u64,
    align: u64,
) -> Vec<u8> {
    let mut p = Vec::with_capacity(PHDR_SIZE);
    p.extend(kind.to_le_bytes());
    p.extend(flags.to_le_bytes());
    p.extend(offset.to_le_bytes());
    p.extend(vaddr.to_le_bytes());
    p.extend(0u64.to_le_bytes()); // p_paddr
    p.extend(filesz.to_le_bytes());
    p.extend(memsz.to_le_bytes());
    p.extend(align.to_le_bytes());
    p
}

fn write_all_at(fd: i32, mut bytes: &[u8], mut at: u64) -> Result<(), abi::Errno> {
    while !bytes.is_empty() {
        // SAFETY: writes from a live slice to a descriptor the caller owns.
        let n = unsafe { libc::pwrite(fd, bytes.as_ptr().cast(), bytes.len(), at as libc::off_t) };
        if n < 0 {
            let e = abi::Errno::last();
            if e == abi::Errno::EINTR {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(abi::Errno::ENOSPC);
        }
        bytes = &bytes[n as usize..];
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_notes_are_laid_out_as_elf_says() {
        let h = elf_header(3);
        assert_eq!(h.len(), EHDR_SIZE);
        assert_eq!(&h[..4], b"\x7fELF");
        assert_eq!(u16::from_le_bytes([h[16], h[17]]), 4, "ET_CORE");
        assert_eq!(u16::from_le_bytes([h[56], h[57]]), 3);
        assert_eq!(
            phdr(PT_LOAD, 5, 4096, 0x1000, 8192, 8192, 4096).len(),
            PHDR_SIZE
        );
        let mut n = Vec::new();
        note(&mut n, NT_PRPSINFO, &[1, 2, 3]);
        // 12 bytes of header, "CORE\0" padded to 8, 3 bytes padded to 4.
        assert_eq!(n.len(), 12 + 8 + 4);
        assert_eq!(u32::from_le_bytes([n[0], n[1], n[2], n[3]]), 5);
        assert_eq!(u32::from_le_bytes([n[4], n[5], n[6], n[7]]), 3);
        assert!(dumps_core(libc::SIGABRT) && dumps_core(libc::SIGSEGV));
        assert!(!dumps_core(libc::SIGTERM) && !dumps_core(libc::SIGKILL));
    }
}
