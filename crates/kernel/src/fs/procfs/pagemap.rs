//! `/proc/PID/pagemap`: 8 bytes per virtual page of the user half, at offset
//! `address / PAGE_SIZE * 8`, as Linux's (`Documentation/admin-guide/mm/pagemap.rst`): bit 63
//! "page present", bit 61 "page is a file-page or shared-anon", bits 0-54 the frame number.
//! The frame number is 0, as Linux shows it to a reader without CAP_SYS_ADMIN (torpor's
//! frames are guest-physical, of no use to the application). Nothing is ever swapped (bit 62)
//! while the sandbox runs.
//!
//! The file is a sparse memory file the size of the whole table (2^35 entries: 256 GiB, of
//! which only the pages of present entries take memory); the holes read as zero, an absent
//! page's entry.

use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;

use abi::Errno;
use mm::MemoryManager;
use platform::{layout, PAGE_SIZE};

/// Bit 63: the page is present.
const PM_PRESENT: u64 = 1 << 63;
/// Bit 61: the page is a file's or shared anonymous memory's.
const PM_FILE: u64 = 1 << 61;
/// Bytes of one entry.
const ENTRY: u64 = 8;

/// The entry of a present page of a VMA of kind `shared_or_file`.
fn entry(shared_or_file: bool) -> u64 {
    PM_PRESENT | if shared_or_file { PM_FILE } else { 0 }
}

/// `/proc/PID/pagemap` of address space `mm`, as a memory file.
///
/// # Errors
/// The host's errno if the memory file cannot be made or written.
pub(super) fn file(mm: &MemoryManager) -> Result<OwnedFd, Errno> {
    let fd = super::memfd_with(b"", 0o400)?;
    let f = std::fs::File::from(fd);
    f.set_len(layout::USER_END.raw() / PAGE_SIZE * ENTRY)
        .map_err(Errno::from)?;
    for v in mm.vmas() {
        let e = entry(!matches!(v.kind, mm::VmaKind::Anon)).to_le_bytes();
        // Runs of consecutive present pages, one write each.
        let mut run: Vec<u8> = Vec::new();
        let mut run_start = 0u64;
        let mut next = None;
        for va in mm.resident_pages(v.start, v.end) {
            let at = va.raw() / PAGE_SIZE * ENTRY;
            if next != Some(at) {
                if !run.is_empty() {
                    f.write_all_at(&run, run_start).map_err(Errno::from)?;
                    run.clear();
                }
                run_start = at;
            }
            run.extend_from_slice(&e);
            next = Some(at + ENTRY);
        }
        if !run.is_empty() {
            f.write_all_at(&run, run_start).map_err(Errno::from)?;
        }
    }
    Ok(OwnedFd::from(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_mark_present_and_file_pages() {
        assert_eq!(entry(false), 1 << 63);
        assert_eq!(entry(true), (1 << 63) | (1 << 61));
        // The table covers the user half: the last page's entry ends the file.
        assert_eq!(layout::USER_END.raw() / PAGE_SIZE * ENTRY % ENTRY, 0);
    }
}
