//! What the stub factory drops of the holder's memory it was forked with.
//!
//! The factory (`crate::factory`) is a fork of the holder: at the fork it maps every page the
//! holder had, shared copy-on-write. Each page the holder writes afterwards (its heap, its
//! other threads' stacks and arenas: nearly all of them, over a sandbox's life) becomes a
//! private copy in the holder, and the factory's old copy becomes the factory's own, counted
//! whole in its PSS: about half a MiB per sandbox that nobody uses, since the factory runs
//! only allocation-free code on its own stack. So the holder lists, before the fork, the
//! private writable anonymous mappings ([`Shed::plan`]: its heap, arenas, other threads'
//! stacks) but those holding what the factory still uses (its stack, its thread's TLS, given
//! as addresses to keep), and the factory unmaps them first thing ([`Shed::apply`]). File
//! mappings stay (text and read-only data are shared with the holder for good; libc's and
//! ld.so's data hold the state its wrappers read).
//!
//! An access to a dropped page after that is a segmentation fault of the factory, which the
//! holder sees as a dead factory ([`crate::TrapError::StubDied`]), never a silent read of
//! zeros.

/// The most ranges a plan holds (a holder with more mappings keeps the rest in its factory).
const SHED_MAX: usize = 256;

/// Address ranges `[start, end)` to unmap in the factory; plain data, built before the fork.
#[derive(Clone, Copy)]
pub(crate) struct Shed {
    ranges: [(u64, u64); SHED_MAX],
    len: usize,
}

impl Shed {
    /// The calling process's private writable anonymous mappings (`/proc/self/maps`) that
    /// contain none of the addresses `keep`; empty if the maps cannot be read.
    pub(crate) fn plan(keep: &[u64]) -> Shed {
        let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        Shed::from_maps(&text, keep)
    }

    fn from_maps(maps: &str, keep: &[u64]) -> Shed {
        let mut shed = Shed {
            ranges: [(0, 0); SHED_MAX],
            len: 0,
        };
        // The end of the last file mapping: an anonymous mapping right after one is that
        // file's .bss (torpor's statics, libc's state), which stays.
        let mut file_end = None;
        for line in maps.lines() {
            let Some(m) = parse(line) else { continue };
            let bss = file_end == Some(m.start);
            file_end = m.file.then_some(m.end);
            if !m.droppable || bss || shed.len == SHED_MAX {
                continue;
            }
            if keep.iter().any(|&a| (m.start..m.end).contains(&a)) {
                continue;
            }
            shed.ranges[shed.len] = (m.start, m.end);
            shed.len += 1;
        }
        shed
    }

    /// The ranges, lowest first.
    pub(crate) fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges[..self.len]
    }

    /// Unmaps the ranges. Allocation-free: for the factory, right after the fork.
    pub(crate) fn apply(&self) {
        for &(start, end) in self.ranges() {
            // SAFETY: the factory's copies of mappings it never touches again (see the
            // module documentation); nothing refers to them from its own stack or TLS.
            unsafe {
                crate::sys::raw(libc::SYS_munmap, [start, end - start, 0, 0, 0, 0]);
            }
        }
    }
}

/// One line of `/proc/PID/maps`, as far as the plan cares.
struct Mapping {
    start: u64,
    end: u64,
    /// A mapping of a file (a path), not anonymous memory or a special mapping.
    file: bool,
    /// Private, writable, of no file: the heap, an anonymous mapping (named by
    /// `PR_SET_VMA_ANON_NAME` or not); not the stack, the vDSO's or another special one.
    droppable: bool,
}

fn parse(line: &str) -> Option<Mapping> {
    let mut f = line.split_whitespace();
    let range = f.next()?;
    let perms = f.next()?.as_bytes();
    let path = f.nth(3).unwrap_or("");
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    if start >= end {
        return None;
    }
    let private_writable = perms.get(1) == Some(&b'w') && perms.get(3) == Some(&b'p');
    let anonymous = path.is_empty() || path == "[heap]" || path.starts_with("[anon:");
    Some(Mapping {
        start,
        end,
        file: path.starts_with('/'),
        droppable: private_writable && anonymous,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0000000-55d0c0100000 r--p 00000000 08:01 1234   /usr/bin/torpor
55d0c0100000-55d0c0500000 r-xp 00100000 08:01 1234   /usr/bin/torpor
55d0c0500000-55d0c0560000 r--p 00500000 08:01 1234   /usr/bin/torpor
55d0c0560000-55d0c0562000 rw-p 00560000 08:01 1234   /usr/bin/torpor
55d0c0562000-55d0c0563000 rw-p 00000000 00:00 0
55d0c1000000-55d0c1100000 rw-p 00000000 00:00 0      [heap]
7f0000000000-7f0000021000 rw-p 00000000 00:00 0
7f0000021000-7f0004000000 ---p 00000000 00:00 0
7f0100000000-7f0100001000 ---p 00000000 00:00 0
7f0100001000-7f0100801000 rw-p 00000000 00:00 0
7f0200000000-7f0200010000 rw-p 00000000 00:00 0      [anon:glibc: malloc arena]
7f0300000000-7f0300001000 rw-s 00000000 00:01 99     /memfd:torpor-guest (deleted)
7f0400000000-7f0400002000 rw-p 00030000 08:01 77     /usr/lib/x86_64-linux-gnu/libc.so.6
7f0400002000-7f0400010000 rw-p 00000000 00:00 0
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0      [stack]
7ffd00100000-7ffd00104000 r--p 00000000 00:00 0      [vvar]
7ffd00104000-7ffd00106000 r-xp 00000000 00:00 0      [vdso]
";

    #[test]
    fn drops_the_heap_and_anonymous_writable_mappings_but_those_kept() {
        // Kept: the stack, the vDSO, file mappings, shared memory, the files' .bss.
        let shed = Shed::from_maps(MAPS, &[]);
        // Not kept: torpor's and libc's .bss (right after their files' data).
        assert_eq!(
            shed.ranges(),
            &[
                (0x55d0_c100_0000, 0x55d0_c110_0000),
                (0x7f00_0000_0000, 0x7f00_0002_1000),
                (0x7f01_0000_1000, 0x7f01_0080_1000),
                (0x7f02_0000_0000, 0x7f02_0001_0000),
            ]
        );
        // A stack given as kept (a thread other than the main one's, its TLS at its top).
        let shed = Shed::from_maps(MAPS, &[0x7f01_0000_5000]);
        assert!(!shed
            .ranges()
            .iter()
            .any(|r| (r.0..r.1).contains(&0x7f01_0000_5000)));
        assert_eq!(shed.ranges().len(), 3);
    }

    #[test]
    fn malformed_lines_are_skipped() {
        let shed = Shed::from_maps("garbage\nzz-10 rw-p 0 0 0\n10-5 rw-p 0 0:0 0\n", &[]);
        assert!(shed.ranges().is_empty());
    }

    #[test]
    fn this_process_s_own_plan_keeps_its_stack_and_tls() {
        let local = 0u64;
        let here = &local as *const u64 as u64;
        // SAFETY: __errno_location has no preconditions.
        let errno = unsafe { libc::__errno_location() } as u64;
        let shed = Shed::plan(&[here, errno]);
        assert!(!shed.ranges().is_empty(), "a Rust test process has a heap");
        for &(s, e) in shed.ranges() {
            assert!(!(s..e).contains(&here) && !(s..e).contains(&errno));
        }
    }
}
