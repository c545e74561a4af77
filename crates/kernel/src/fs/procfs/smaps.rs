//! `/proc/PID/smaps`: each VMA's `maps` line followed by its memory, in Linux's format and
//! field order. Sizes are what torpor knows: `Rss` the pages mapped present now (as mincore
//! sees them), a private mapping's counted as private and dirty but for the frames it shares
//! with processes it forked or was forked from (copy-on-write: shared and dirty, and in `Pss`
//! divided by how many map them, as Linux divides by the mapcount), a shared mapping's as
//! shared (not divided among the processes mapping them); `Locked` is `Rss` of a locked VMA
//! (mlock, `VmLck`); no swap, no huge pages.

use std::fmt::Write;

use mm::{MemoryManager, Prot, VmaKind};
use platform::PAGE_SIZE;

/// The whole of `/proc/PID/smaps` for address space `mm`.
pub(super) fn smaps(mm: &MemoryManager) -> Vec<u8> {
    let mut out = String::new();
    for v in mm.vmas() {
        out.push_str(&super::maps_line(v));
        let rss = mm.resident_pages(v.start, v.end).len() as u64 * PAGE_SIZE / 1024;
        let shared = v.kind.is_shared();
        // Frames a fork shares copy-on-write: each counts once among those that map it.
        let (cow, pss) = if shared {
            (0, rss)
        } else {
            let sharers = mm.sharers_in(v.start, v.end);
            let given: u64 = sharers
                .iter()
                .map(|&c| PAGE_SIZE - PAGE_SIZE / u64::from(c))
                .sum();
            let cow = (sharers.len() as u64 * PAGE_SIZE / 1024).min(rss);
            (cow, (rss * 1024).saturating_sub(given) / 1024)
        };
        let (private_dirty, shared_dirty) = if shared { (0, rss) } else { (rss - cow, cow) };
        let anonymous = if matches!(v.kind, VmaKind::Anon) {
            rss
        } else {
            0
        };
        let locked = if v.lock.is_locked() { rss } else { 0 };
        let fields = [
            ("Size", v.len() / 1024),
            ("KernelPageSize", PAGE_SIZE / 1024),
            ("MMUPageSize", PAGE_SIZE / 1024),
            ("Rss", rss),
            ("Pss", pss),
            ("Pss_Dirty", pss),
            ("Shared_Clean", 0),
            ("Shared_Dirty", shared_dirty),
            ("Private_Clean", 0),
            ("Private_Dirty", private_dirty),
            ("Referenced", rss),
            ("Anonymous", anonymous),
            ("KSM", 0),
            ("LazyFree", 0),
            ("AnonHugePages", 0),
            ("ShmemPmdMapped", 0),
            ("FilePmdMapped", 0),
            ("Shared_Hugetlb", 0),
            ("Private_Hugetlb", 0),
            ("Swap", 0),
            ("SwapPss", 0),
            ("Locked", locked),
        ];
        for (name, kb) in fields {
            // "Name:" padded to 16 columns and the number right-aligned to 8, as Linux's.
            let _ = writeln!(out, "{:<16}{kb:>8} kB", format!("{name}:"));
        }
        out.push_str("THPeligible:           0\n");
        out.push_str(&format!("VmFlags: {}\n", vm_flags(v)));
    }
    out.into_bytes()
}

/// The `VmFlags` line's mnemonics for `v` (Linux's `show_smap_vma_flags`), each followed by
/// a space.
fn vm_flags(v: &mm::Vma) -> String {
    let mut s = String::new();
    let mut flag = |on: bool, name: &str| {
        if on {
            s.push_str(name);
            s.push(' ');
        }
    };
    let may_write = match &v.kind {
        VmaKind::Shared { may_write, .. } => *may_write,
        _ => true,
    };
    flag(v.prot.contains(Prot::READ), "rd");
    flag(v.prot.contains(Prot::WRITE), "wr");
    flag(v.prot.contains(Prot::EXEC), "ex");
    flag(v.kind.is_shared(), "sh");
    flag(true, "mr");
    flag(may_write, "mw");
    flag(true, "me");
    if v.kind.is_shared() {
        flag(may_write, "ms");
    }
    flag(v.lock.is_locked(), "lo");
    s
}
