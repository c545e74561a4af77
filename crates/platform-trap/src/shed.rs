//! What the stub factory drops of the holder's memory it was forked with.
//!
//! The factory (`crate::factory`) is a fork of the holder: at the fork it maps every page the
//! holder had, shared copy-on-write. Each page the holder writes afterwards (its heap, its
//! other threads' stacks and arenas: nearly all of them, over a sandbox's life) becomes a
//! private copy in the holder, and the factory's old copy becomes the factory's own, counted
//! whole in its PSS: about half a MiB per sandbox that nobody uses, since the factory runs
//! only allocation-free code on its own stack. So the holder lists, before the fork
//! ([`Shed::plan`], from `/proc/self/smaps`):
//! - to unmap: the private writable anonymous mappings (its heap, arenas, other threads'
//!   stacks) but those holding what the factory still uses (its stack, its thread's TLS and
//!   rseq area, given as addresses to keep) and the files' .bss (right after their data:
//!   torpor's statics, libc's state); and the executable's relocated read-only data but the
//!   GOT ([`relocated_data`]);
//! - to zap (`MADV_DONTNEED`): the read-only file mappings that hold no page of their own
//!   (text and read-only data, not the relocated `.data.rel.ro`), whose pages the factory
//!   shares with the holder and its helpers, each sharer's PSS counting a part: zapped, they
//!   come back from the page cache at the factory's next touch, only those it touches.
//!
//! The factory moves onto a stack of its own (`crate::factory`), unmaps and zaps first thing
//! ([`Shed::apply`]), the stack it was forked on included (a copy of the holder thread's,
//! whose pages would become the factory's own as the holder runs on; not where that stack
//! also holds the thread's TLS, as a thread other than the main one's does), and zaps again,
//! with the part of its stack below its frames, after each spawn ([`Shed::trim`]). An access to an
//! unmapped page after that is a segmentation fault of the factory, which the holder sees as
//! a dead factory ([`crate::TrapError::StubDied`]), never a silent read of zeros; a zapped
//! page reads the file's bytes, which are what it held.

/// The most ranges of each kind a plan holds (a holder with more mappings keeps the rest in
/// its factory).
const SHED_MAX: usize = 256;

/// What is left of the factory's stack below the frame that trims it: room for the frames of
/// the calls it makes next, which would only fault their pages back.
const STACK_SLACK: u64 = 16 << 10;

/// Address ranges `[start, end)`, lowest first.
#[derive(Clone, Copy)]
struct Ranges {
    ranges: [(u64, u64); SHED_MAX],
    len: usize,
}

impl Ranges {
    const EMPTY: Ranges = Ranges {
        ranges: [(0, 0); SHED_MAX],
        len: 0,
    };

    fn push(&mut self, r: (u64, u64)) {
        if self.len < SHED_MAX {
            self.ranges[self.len] = r;
            self.len += 1;
        }
    }

    fn get(&self) -> &[(u64, u64)] {
        &self.ranges[..self.len]
    }
}

/// The factory's plan for the holder's memory; plain data, built before the fork.
#[derive(Clone, Copy)]
pub(crate) struct Shed {
    unmap: Ranges,
    zap: Ranges,
    /// The mapping holding the first address kept (the stack of the thread that forks).
    stack: Option<(u64, u64)>,
    /// Whether that mapping holds none of the other addresses kept (a thread other than the
    /// main one has its TLS at the top of its stack): then a caller that moved to another
    /// stack may unmap it.
    stack_alone: bool,
}

impl Shed {
    /// The plan for the calling process's mappings (`/proc/self/smaps`), keeping those that
    /// contain an address of `keep`, the first of which is on the calling thread's stack;
    /// empty if the mappings cannot be read.
    pub(crate) fn plan(keep: &[u64]) -> Shed {
        let text = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
        let mut shed = Shed::from_smaps(&text, keep);
        if let Some(r) = relocated_data() {
            shed.unmap.push(r);
        }
        shed
    }

    fn from_smaps(smaps: &str, keep: &[u64]) -> Shed {
        let mut shed = Shed {
            unmap: Ranges::EMPTY,
            zap: Ranges::EMPTY,
            stack: None,
            stack_alone: false,
        };
        // The end of the last file mapping: an anonymous mapping right after one is that
        // file's .bss, which stays.
        let mut file_end = None;
        for m in mappings(smaps) {
            let bss = file_end == Some(m.start);
            file_end = m.file.then_some(m.end);
            let kept = keep.iter().any(|&a| (m.start..m.end).contains(&a));
            if keep.first().is_some_and(|&a| (m.start..m.end).contains(&a)) {
                shed.stack = Some((m.start, m.end));
                shed.stack_alone = !keep[1..].iter().any(|&a| (m.start..m.end).contains(&a));
            }
            if kept {
                continue;
            }
            if m.private && m.writable && m.anonymous && !bss {
                shed.unmap.push((m.start, m.end));
            } else if m.private && !m.writable && m.file && m.own_pages == Some(0) {
                shed.zap.push((m.start, m.end));
            }
        }
        shed
    }

    /// The ranges to unmap.
    pub(crate) fn unmapped(&self) -> &[(u64, u64)] {
        self.unmap.get()
    }

    /// The ranges to zap.
    pub(crate) fn zapped(&self) -> &[(u64, u64)] {
        self.zap.get()
    }

    /// Unmaps the ranges, and the stack the plan was made on if the caller now runs on the
    /// stack `moved_to`; then trims. Returns the stack the caller runs on, for later trims
    /// (`moved_to`, else the one the plan was made on). Allocation-free: for the factory,
    /// right after the fork.
    pub(crate) fn apply(&self, moved_to: Option<(u64, u64)>) -> Option<(u64, u64)> {
        let unmap = |start: u64, end: u64| {
            // SAFETY: the factory's copies of mappings it never touches again (see the
            // module documentation); nothing refers to them from its own stack or TLS.
            unsafe {
                crate::sys::raw(libc::SYS_munmap, [start, end - start, 0, 0, 0, 0]);
            }
        };
        for &(start, end) in self.unmapped() {
            unmap(start, end);
        }
        if let (Some(old), Some(new), true) = (self.stack, moved_to, self.stack_alone) {
            if old != new {
                unmap(old.0, old.1);
            }
        }
        let stack = moved_to.or(self.stack);
        self.trim(stack);
        stack
    }

    /// Zaps the read-only file mappings and the part of `stack` (the caller's) below the
    /// caller's frame, less [`STACK_SLACK`]. Allocation-free.
    #[inline(never)]
    pub(crate) fn trim(&self, stack: Option<(u64, u64)>) {
        let dontneed = |start: u64, end: u64| {
            // SAFETY: pages that read back as they were: file pages never written here, or
            // stack below every live frame.
            unsafe {
                crate::sys::raw(
                    libc::SYS_madvise,
                    [start, end - start, libc::MADV_DONTNEED as u64, 0, 0, 0],
                );
            }
        };
        for &(start, end) in self.zapped() {
            dontneed(start, end);
        }
        let here = 0u8;
        let sp = std::hint::black_box(&here as *const u8 as u64);
        if let Some((start, end)) = stack {
            let below = (sp & !0xfff).saturating_sub(STACK_SLACK);
            if (start..end).contains(&sp) && below > start {
                dontneed(start, below);
            }
        }
    }
}

/// The whole pages of the executable's relocated read-only data (`.data.rel.ro`: vtables,
/// tables of pointers), which the factory never reads: its RELRO segment up to its dynamic
/// section, after which comes the GOT, which every call into libc reads. These pages are the
/// holder's own (written once by the dynamic linker), shared copy-on-write with the
/// processes it forked; each one's PSS counts a part. `None` without a RELRO segment or a
/// dynamic section after its start.
fn relocated_data() -> Option<(u64, u64)> {
    let phdr = crate::sys::auxval(libc::AT_PHDR);
    let phnum = crate::sys::auxval(libc::AT_PHNUM) as usize;
    if phdr == 0 || phnum == 0 {
        return None;
    }
    // SAFETY: AT_PHDR and AT_PHNUM describe the executable's program headers, mapped for the
    // process's life.
    let headers = unsafe { std::slice::from_raw_parts(phdr as *const libc::Elf64_Phdr, phnum) };
    let bias = phdr.checked_sub(headers.iter().find(|h| h.p_type == libc::PT_PHDR)?.p_vaddr)?;
    let relro = headers.iter().find(|h| h.p_type == libc::PT_GNU_RELRO)?;
    let dynamic = headers.iter().find(|h| h.p_type == libc::PT_DYNAMIC)?;
    let start = (bias + relro.p_vaddr).next_multiple_of(4096);
    let end = (bias + dynamic.p_vaddr) & !4095;
    let relro_end = bias + relro.p_vaddr + relro.p_memsz;
    (dynamic.p_vaddr >= relro.p_vaddr && bias + dynamic.p_vaddr < relro_end && start < end)
        .then_some((start, end))
}

/// One mapping of `/proc/PID/smaps`, as far as the plan cares.
struct Mapping {
    start: u64,
    end: u64,
    private: bool,
    writable: bool,
    /// A mapping of a file (a path).
    file: bool,
    /// Of no file: the heap, an anonymous mapping (named by `PR_SET_VMA_ANON_NAME` or not);
    /// not the stack, the vDSO's or another special one.
    anonymous: bool,
    /// Its `Anonymous:` figure: pages of its own, not the file's (`None` if not given).
    own_pages: Option<u64>,
}

/// The mappings of a `/proc/PID/smaps` text (or of a `maps` text, without `own_pages`);
/// malformed lines are skipped.
fn mappings(smaps: &str) -> Vec<Mapping> {
    let mut v: Vec<Mapping> = Vec::new();
    for line in smaps.lines() {
        if let Some(m) = header(line) {
            v.push(m);
        } else if let (Some(m), Some(kb)) = (v.last_mut(), line.strip_prefix("Anonymous:")) {
            m.own_pages = kb.split_whitespace().next().and_then(|n| n.parse().ok());
        }
    }
    v
}

fn header(line: &str) -> Option<Mapping> {
    let m = crate::sys::MapsLine::parse(line)?;
    Some(Mapping {
        start: m.start,
        end: m.end,
        private: m.perms[3] == b'p',
        writable: m.perms[1] == b'w',
        file: m.path.starts_with('/'),
        anonymous: m.path.is_empty() || m.path == "[heap]" || m.path.starts_with("[anon:"),
        own_pages: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0c0000000-55d0c0100000 r--p 00000000 08:01 1234   /usr/bin/torpor
Size:               1024 kB
Anonymous:             0 kB
55d0c0100000-55d0c0500000 r-xp 00100000 08:01 1234   /usr/bin/torpor
Anonymous:             0 kB
55d0c0500000-55d0c0560000 r--p 00500000 08:01 1234   /usr/bin/torpor
Anonymous:           384 kB
55d0c0560000-55d0c0562000 rw-p 00560000 08:01 1234   /usr/bin/torpor
Anonymous:             8 kB
55d0c0562000-55d0c0563000 rw-p 00000000 00:00 0
Anonymous:             4 kB
55d0c1000000-55d0c1100000 rw-p 00000000 00:00 0      [heap]
7f0000000000-7f0000021000 rw-p 00000000 00:00 0
7f0000021000-7f0004000000 ---p 00000000 00:00 0
7f0100000000-7f0100001000 ---p 00000000 00:00 0
7f0100001000-7f0100801000 rw-p 00000000 00:00 0
7f0200000000-7f0200010000 rw-p 00000000 00:00 0      [anon:glibc: malloc arena]
7f0300000000-7f0300001000 rw-s 00000000 00:01 99     /memfd:torpor-guest (deleted)
Anonymous:             0 kB
7f0400000000-7f0400001000 r--p 00000000 08:01 77     /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             4 kB
7f0400001000-7f0400002000 rw-p 00030000 08:01 77     /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             4 kB
7f0400002000-7f0400010000 rw-p 00000000 00:00 0
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0      [stack]
7ffd00100000-7ffd00104000 r--p 00000000 00:00 0      [vvar]
7ffd00104000-7ffd00106000 r-xp 00000000 00:00 0      [vdso]
";

    #[test]
    fn unmaps_the_heap_and_anonymous_writable_mappings_but_those_kept() {
        // Kept: the stack, the vDSO, file mappings, shared memory, the files' .bss.
        let shed = Shed::from_smaps(SMAPS, &[0x7ffd_0000_1000]);
        assert_eq!(
            shed.unmapped(),
            &[
                (0x55d0_c100_0000, 0x55d0_c110_0000),
                (0x7f00_0000_0000, 0x7f00_0002_1000),
                (0x7f01_0000_1000, 0x7f01_0080_1000),
                (0x7f02_0000_0000, 0x7f02_0001_0000),
            ]
        );
        assert_eq!(shed.stack, Some((0x7ffd_0000_0000, 0x7ffd_0002_1000)));
        assert!(shed.stack_alone);
        // A stack given as kept (a thread other than the main one's, its TLS at its top).
        let shed = Shed::from_smaps(SMAPS, &[0x7f01_0000_5000, 0x7f01_0080_0000]);
        assert!(!shed
            .unmapped()
            .iter()
            .any(|r| (r.0..r.1).contains(&0x7f01_0000_5000)));
        assert_eq!(shed.unmapped().len(), 3);
        assert_eq!(shed.stack, Some((0x7f01_0000_1000, 0x7f01_0080_1000)));
        assert!(!shed.stack_alone, "its TLS is there");
    }

    #[test]
    fn zaps_read_only_file_mappings_without_pages_of_their_own() {
        let shed = Shed::from_smaps(SMAPS, &[]);
        // Text and read-only data; not the relocated .data.rel.ro, libc's relocated part,
        // writable data, shared memory or the vDSO.
        assert_eq!(
            shed.zapped(),
            &[
                (0x55d0_c000_0000, 0x55d0_c010_0000),
                (0x55d0_c010_0000, 0x55d0_c050_0000),
            ]
        );
        // A plain `maps` text says nothing of a mapping's own pages: nothing is zapped.
        let maps: String = SMAPS
            .lines()
            .filter(|l| !l.contains("kB"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(Shed::from_smaps(&maps, &[]).zapped().is_empty());
    }

    #[test]
    fn the_relocated_data_ends_before_the_dynamic_section_and_the_got() {
        // This test binary is a PIE with full RELRO, like torpor.
        let Some((start, end)) = relocated_data() else {
            panic!("no RELRO segment in this test binary");
        };
        assert!(start % 4096 == 0 && end % 4096 == 0 && start < end);
        extern "C" {
            static _DYNAMIC: u8;
        }
        // SAFETY: only the address of the linker-defined symbol is taken.
        let dynamic = unsafe { &_DYNAMIC as *const u8 as u64 };
        assert!(end <= dynamic, "{end:#x} past _DYNAMIC {dynamic:#x}");
        // Inside one of the executable's read-only mappings.
        let exe = std::fs::read_link("/proc/self/exe").expect("exe");
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        assert!(maps
            .lines()
            .filter_map(header)
            .any(|m| { m.start <= start && end <= m.end && !m.writable && m.file }));
        assert!(maps.contains(exe.to_str().expect("path")));
    }

    #[test]
    fn malformed_lines_are_skipped() {
        let shed = Shed::from_smaps(
            "garbage\nzz-10 rw-p 0 0 0\n10-5 rw-p 0 0:0 0\nAnonymous: 0 kB\n",
            &[],
        );
        assert!(shed.unmapped().is_empty() && shed.zapped().is_empty());
        assert!(shed.stack.is_none());
    }

    #[test]
    fn this_process_s_own_plan_keeps_its_stack_and_tls() {
        let local = 0u64;
        let here = &local as *const u64 as u64;
        // SAFETY: __errno_location has no preconditions.
        let errno = unsafe { libc::__errno_location() } as u64;
        let shed = Shed::plan(&[here, errno]);
        assert!(
            !shed.unmapped().is_empty(),
            "a Rust test process has a heap"
        );
        assert!(!shed.zapped().is_empty(), "and text");
        for &(s, e) in shed.unmapped().iter().chain(shed.zapped()) {
            assert!(!(s..e).contains(&here) && !(s..e).contains(&errno));
        }
        assert!(shed.stack.is_some_and(|(s, e)| (s..e).contains(&here)));
    }
}
