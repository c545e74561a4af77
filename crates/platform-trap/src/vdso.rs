//! The host's vDSO, moved into every stub so that the application's clock calls run without a
//! trap.
//!
//! A Python `http.server` request makes 13 system calls on this platform, 5 of them
//! `clock_gettime`: with no vDSO, glibc traps for each. Linux gives every process a vDSO:
//! code (`[vdso]`) that reads the clock from data pages the kernel keeps up to date
//! (`[vvar]`, and since Linux 6.13 `[vvar_vclock]`) at fixed offsets from itself, and the
//! CPU's time-stamp counter. The stub's start code moves these mappings (`mremap`, which the
//! kernel allows for special mappings of the same size) to [`VDSO_ADDR`], above the
//! application's range, keeping their order and spacing; the kernel passes the moved code's
//! ELF header to the application as `AT_SYSINFO_EHDR` ([`platform::Platform::vdso`]). The
//! application then reads the host's clocks exactly as a host process does, and a clock the
//! vDSO cannot read (a CPU-time clock, or a host clock source without vDSO support) falls
//! back to a `syscall` instruction, which the filter traps like any other.
//!
//! What the application sees: the host's clocks (which the `clock_gettime` system call gives
//! it already), the vDSO's code and its data pages (read-only; the kernel's timekeeping
//! parameters and the random generator's generation counter), and `getcpu`'s answer, the host
//! CPU. The layout is the running kernel's, the same in every process, so the holder computes
//! the same address as the stubs; a checkpoint records the vDSO's digest so that a restore on
//! another kernel is refused ([`HostVdso::digest`]).
//!
//! `TORPOR_TRAP_VDSO=off` leaves the vDSO out (the stub unmaps it, as everything else).

use crate::sysmsg::{VDSO_ADDR, VDSO_SIZE};

/// The special mappings of the vDSO a kernel may make.
pub(crate) const MAX_PIECES: usize = 4;

/// Where the host's vDSO mappings are in this process and where the stubs get them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostVdso {
    /// `(start, length)` of each mapping in this process (and in every process forked from
    /// it), lowest first; `count` of them are used.
    pieces: [(u64, u64); MAX_PIECES],
    count: usize,
    /// Offset of the ELF header from the lowest mapping's start.
    ehdr_offset: u64,
    /// FNV-1a digest of the code mapping's bytes.
    digest: u64,
}

impl HostVdso {
    /// The vDSO of this process, unless `TORPOR_TRAP_VDSO=off`, or the kernel mapped none, or
    /// its layout is not one the stub's region holds.
    pub fn find() -> Option<HostVdso> {
        if std::env::var_os("TORPOR_TRAP_VDSO").is_some_and(|v| v == "off") {
            return None;
        }
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        let ehdr = crate::sys::auxval(AT_SYSINFO_EHDR);
        let v = Self::from_maps(&maps, ehdr)?;
        let (code_start, code_len) = v.pieces[..v.count]
            .iter()
            .copied()
            .find(|&(s, l)| (s..s + l).contains(&ehdr))?;
        // SAFETY: `[vdso]` is mapped readable in this process for its lifetime (nothing here
        // moves or unmaps it: only the stubs, after their fork, move their copies).
        let code =
            unsafe { std::slice::from_raw_parts(code_start as *const u8, code_len as usize) };
        Some(HostVdso {
            digest: fnv1a(code),
            ..v
        })
    }

    /// Parses `/proc/self/maps` text for the vDSO's mappings (`[vvar…]` and `[vdso]`), with
    /// the ELF header at `ehdr` (`AT_SYSINFO_EHDR`); `None` unless they are adjacent or
    /// nearly so, fit [`VDSO_SIZE`] and the header is in `[vdso]`. The digest is left 0.
    fn from_maps(maps: &str, ehdr: u64) -> Option<HostVdso> {
        let mut pieces = [(0u64, 0u64); MAX_PIECES];
        let mut count = 0;
        let mut code = None;
        for line in maps.lines() {
            let Some(m) = crate::sys::MapsLine::parse(line) else {
                continue;
            };
            let name = m.path;
            if !(name.starts_with("[vvar") || name == "[vdso]") {
                continue;
            }
            let (s, e) = (m.start, m.end);
            if count == MAX_PIECES {
                return None;
            }
            if name == "[vdso]" {
                code = Some((s, e));
            }
            pieces[count] = (s, e - s);
            count += 1;
        }
        let (cs, ce) = code?;
        if !(cs..ce).contains(&ehdr) {
            return None;
        }
        pieces[..count].sort_unstable();
        let low = pieces[0].0;
        let (last, last_len) = pieces[count - 1];
        if last + last_len - low > VDSO_SIZE {
            return None;
        }
        Some(HostVdso {
            pieces,
            count,
            ehdr_offset: ehdr - low,
            digest: 0,
        })
    }

    /// The ELF header's address in every stub.
    pub fn ehdr_in_stub(&self) -> u64 {
        VDSO_ADDR + self.ehdr_offset
    }

    /// A digest of the vDSO's code: equal digests, same code at the same offsets.
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// The moves the stub's start code makes: `(from, length, to)`.
    pub(crate) fn moves(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        let low = self.pieces[0].0;
        self.pieces[..self.count]
            .iter()
            .map(move |&(s, l)| (s, l, VDSO_ADDR + (s - low)))
    }
}

/// `AT_SYSINFO_EHDR`: the vDSO's ELF header.
const AT_SYSINFO_EHDR: u64 = 33;

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS_6_18: &str = "\
7ffd1c5e4000-7ffd1c605000 rw-p 00000000 00:00 0                          [stack]
7fdd51c64000-7fdd51c68000 r--p 00000000 00:00 0                          [vvar]
7fdd51c68000-7fdd51c6a000 r--p 00000000 00:00 0                          [vvar_vclock]
7fdd51c6a000-7fdd51c6c000 r-xp 00000000 00:00 0                          [vdso]
";

    #[test]
    fn keeps_the_kernels_layout_and_finds_the_header() {
        let v = HostVdso::from_maps(MAPS_6_18, 0x7fdd_51c6_a000).expect("a vDSO");
        let moves: Vec<_> = v.moves().collect();
        assert_eq!(
            moves,
            vec![
                (0x7fdd_51c6_4000, 0x4000, VDSO_ADDR),
                (0x7fdd_51c6_8000, 0x2000, VDSO_ADDR + 0x4000),
                (0x7fdd_51c6_a000, 0x2000, VDSO_ADDR + 0x6000),
            ]
        );
        assert_eq!(v.ehdr_in_stub(), VDSO_ADDR + 0x6000);
    }

    #[test]
    fn refuses_what_the_region_cannot_hold() {
        // The header outside [vdso].
        assert_eq!(HostVdso::from_maps(MAPS_6_18, 0x7fdd_51c6_4000), None);
        // No vDSO at all.
        assert_eq!(HostVdso::from_maps("", 0), None);
        // Data pages far from the code.
        let far = "\
7f0000000000-7f0000004000 r--p 00000000 00:00 0 [vvar]
7fdd51c6a000-7fdd51c6c000 r-xp 00000000 00:00 0 [vdso]
";
        assert_eq!(HostVdso::from_maps(far, 0x7fdd_51c6_a000), None);
    }

    #[test]
    fn this_host_has_one_the_stub_can_hold() {
        let v = HostVdso::find().expect("this kernel maps a vDSO");
        assert_ne!(v.digest(), 0);
        assert_eq!(HostVdso::find(), Some(v), "the same every time");
    }
}
