//! The swap and REAP file formats (crates/hibernate/src/pagefile.rs): opening, validating and
//! reading a damaged file must give an error, never a panic, never wrong bytes.
//!
//! - [`run_swap`], [`run_reap`]: the input is `[fix-ups: u8][file bytes]`. The harness can
//!   repair what a random mutation almost always breaks first (bit 3: magic, version and page
//!   size; bit 5: each index entry's page checksum; bit 0: the header checksum; bit 4: the
//!   trailer magic; bit 2: the index checksum; bit 1: the trailer checksum), so that the
//!   fuzzer reaches the deeper checks. Whatever opens must read back exactly the file's
//!   bytes for each slot, with a matching checksum, or fail with a zeroed buffer.
//! - [`run_corrupt`]: a valid file written by the real writer from the input's pages, then
//!   damaged by the input's edits (byte flips and sets, truncation, extension), with no
//!   repair: every page read back must be the page written, or an error.

use std::path::PathBuf;

use hibernate::pagefile::PAGE_BYTES;
use hibernate::reap::REAP_MAGIC;
use hibernate::swapfile::SWAP_MAGIC;
use hibernate::{PageIdx, ReapReader, ReapWriter, SwapReader, SwapWriter};

use crate::util::crc32c;

const HEADER: usize = 4096;
const TRAILER: usize = 32;

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]))
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}

fn path(name: &str) -> PathBuf {
    crate::util::scratch_dir("pagefile").join(name)
}

/// Applies the fix-ups of `flags` to a file image expected to carry `magic`.
pub fn fix_up(flags: u8, magic: [u8; 8], f: &mut [u8]) {
    let len = f.len();
    if flags & 8 != 0 && len >= 16 {
        f[0..8].copy_from_slice(&magic);
        f[8..12].copy_from_slice(&1u32.to_le_bytes());
        f[12..16].copy_from_slice(&(PAGE_BYTES as u32).to_le_bytes());
    }
    let trailer_at = len.checked_sub(TRAILER).filter(|&t| t >= HEADER);
    // Index region per the trailer, when it is consistent with the length.
    let index = trailer_at.and_then(|t| {
        let off = usize::try_from(le64(f, t + 8)).ok()?;
        let count = usize::try_from(le64(f, t + 16)).ok()?;
        let end = off.checked_add(count.checked_mul(16)?)?;
        (end == t && off >= HEADER).then_some((off, count))
    });
    if flags & 32 != 0 {
        if let Some((off, count)) = index {
            for s in 0..count {
                let e = off + s * 16;
                let slot = le32(f, e + 8) as usize;
                let data = HEADER + slot * PAGE_BYTES;
                if data + PAGE_BYTES <= off {
                    let c = crc32c(&f[data..data + PAGE_BYTES]);
                    f[e + 12..e + 16].copy_from_slice(&c.to_le_bytes());
                }
            }
        }
    }
    if flags & 1 != 0 && len >= 64 {
        let c = crc32c(&f[0..60]);
        f[60..64].copy_from_slice(&c.to_le_bytes());
    }
    if let Some(t) = trailer_at {
        if flags & 16 != 0 {
            f[t..t + 8].copy_from_slice(b"TORPIDX\0");
        }
        if flags & 4 != 0 {
            if let Some((off, count)) = index {
                let c = crc32c(&f[off..off + count * 16]);
                f[t + 24..t + 28].copy_from_slice(&c.to_le_bytes());
            }
        }
        if flags & 2 != 0 {
            let c = crc32c(&f[t..t + 28]);
            f[t + 28..t + 32].copy_from_slice(&c.to_le_bytes());
        }
    }
}

/// The bytes the file holds in `slot`, if it has them.
fn slot_bytes(file: &[u8], slot: u32) -> Option<&[u8]> {
    let at = HEADER + slot as usize * PAGE_BYTES;
    file.get(at..at + PAGE_BYTES)
}

fn check_swap(file: &[u8], p: &std::path::Path) {
    let Ok(r) = SwapReader::open(p) else {
        return;
    };
    let mut buf = [0u8; PAGE_BYTES];
    for (slot, e) in (0u32..).zip(r.index().entries().iter().take(64)) {
        buf.fill(0xa5);
        match r.read_page(e.page(), &mut buf) {
            Ok(()) => {
                assert_eq!(
                    Some(&buf[..]),
                    slot_bytes(file, slot),
                    "page {:?}: wrong bytes",
                    e.page()
                );
                assert_eq!(crc32c(&buf), e.crc());
            }
            Err(_) => assert!(buf.iter().all(|&b| b == 0), "buffer not zeroed on error"),
        }
    }
    // Pages the file does not hold, slot ranges outside it, a wrong buffer size.
    for page in [r.page_count(), u64::MAX, 0] {
        buf.fill(0xa5);
        if r.read_page(PageIdx(page), &mut buf).is_err() {
            assert!(buf.iter().all(|&b| b == 0));
        }
    }
    let slots = r.slots();
    for (first, count) in [
        (0, slots),
        (slots, 1),
        (u32::MAX, 2),
        (slots.saturating_sub(1), 2),
    ] {
        let n = (count as usize).min(16);
        let mut big = vec![0xa5u8; n * PAGE_BYTES];
        match r.read_slots_into(first, count, &mut big) {
            Ok(()) => {
                for k in 0..n {
                    let s = first + k as u32;
                    assert_eq!(
                        Some(&big[k * PAGE_BYTES..(k + 1) * PAGE_BYTES]),
                        slot_bytes(file, s)
                    );
                }
            }
            Err(_) => assert!(big.iter().all(|&b| b == 0)),
        }
    }
}

fn check_reap(file: &[u8], p: &std::path::Path) {
    let Ok(r) = ReapReader::open(p) else {
        return;
    };
    let _ = r.working_set();
    let _ = r.data_bytes();
    let mut slot = 0u32;
    let res: Result<(), hibernate::ReapError> = r.read_batches(3 * PAGE_BYTES, |b| {
        for (k, (page, bytes)) in b.pages().enumerate() {
            assert_eq!(b.entries[k].page(), page);
            assert_eq!(
                Some(bytes),
                slot_bytes(file, slot),
                "page {page:?}: wrong bytes"
            );
            slot += 1;
        }
        let mut total = 0;
        for (_, bytes) in b.runs() {
            total += bytes.len();
        }
        assert_eq!(total, b.data.len());
        Ok(())
    });
    if res.is_ok() {
        assert_eq!(slot, r.index().len() as u32);
        let all = r.read_all().expect("read_all after a clean read_batches");
        for (i, (page, bytes)) in all.iter().enumerate() {
            assert_eq!(*page, r.index().entries()[i].page());
            assert_eq!(Some(&bytes[..]), slot_bytes(file, i as u32));
        }
    }
}

fn run_raw(data: &[u8], magic: [u8; 8], name: &str) -> (Vec<u8>, PathBuf) {
    let (flags, rest) = data.split_first().map_or((0, &[][..]), |(f, r)| (*f, r));
    let mut file = rest.to_vec();
    fix_up(flags, magic, &mut file);
    let p = path(name);
    std::fs::write(&p, &file).expect("write the page file");
    (file, p)
}

/// The `swapfile` harness.
pub fn run_swap(data: &[u8]) {
    let (file, p) = run_raw(data, SWAP_MAGIC, "swap");
    check_swap(&file, &p);
}

/// The `reapfile` harness.
pub fn run_reap(data: &[u8]) {
    let (file, p) = run_raw(data, REAP_MAGIC, "reap");
    check_reap(&file, &p);
    // The same bytes as a swap file must be refused (wrong magic) or read correctly.
    check_swap(&file, &p);
}

/// Pages of a test file: `n` pages with indexes and contents derived from `seed`.
pub fn pages(seed: &[u8], n: usize) -> Vec<(PageIdx, Vec<u8>)> {
    let mut out: Vec<(PageIdx, Vec<u8>)> = Vec::new();
    let mut rng = crate::util::Rng(
        0x9e37_79b9
            ^ seed
                .iter()
                .fold(7u64, |h, &b| h.wrapping_mul(31) ^ u64::from(b)),
    );
    while out.len() < n {
        let page = PageIdx(rng.below(64) as u64);
        if out.iter().any(|(p, _)| *p == page) {
            continue;
        }
        let mut bytes = vec![0u8; PAGE_BYTES];
        for chunk in bytes.chunks_mut(8) {
            chunk.copy_from_slice(&rng.next().to_le_bytes());
        }
        out.push((page, bytes));
    }
    out
}

/// Writes a valid file of `pages` with the real writer and returns its bytes.
pub fn write_valid(reap: bool, pages: &[(PageIdx, Vec<u8>)], p: &std::path::Path) -> Vec<u8> {
    let _ = std::fs::remove_file(p);
    let batch: Vec<(PageIdx, &[u8])> = pages.iter().map(|(i, b)| (*i, &b[..])).collect();
    if reap {
        let mut w = ReapWriter::create(p, 64).expect("create");
        w.write_batch(&batch).expect("write");
        w.finish().expect("finish");
    } else {
        let mut w = SwapWriter::create(p, 64).expect("create");
        w.write_batch(&batch).expect("write");
        w.finish().expect("finish");
    }
    std::fs::read(p).expect("read back")
}

/// The `pagefile_corrupt` harness. Input: `[kind][pages][edits: 4 bytes each]`; an edit is
/// `[op][offset: u16 LE][value]` (offset scaled over the file), op % 4: flip bits, set a
/// byte, truncate, append.
pub fn run_corrupt(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let reap = data[0] & 1 != 0;
    let n = 1 + usize::from(data[1] % 8);
    let pages = pages(&data[..2], n);
    let p = path("corrupt");
    let mut file = write_valid(reap, &pages, &p);
    let mut edited = false;
    for e in data[2..].chunks_exact(4) {
        let len = file.len();
        let off = (usize::from(u16::from_le_bytes([e[1], e[2]])) * len.max(1)) >> 16;
        match e[0] % 4 {
            0 if len > 0 => file[off] ^= e[3] | 1,
            1 if len > 0 && file[off] != e[3] => file[off] = e[3],
            2 => file.truncate(off),
            3 => file.extend(std::iter::repeat_n(e[3], 1 + usize::from(e[3]))),
            _ => continue,
        }
        edited = true;
    }
    std::fs::write(&p, &file).expect("write the damaged file");
    let original = |page: PageIdx| pages.iter().find(|(i, _)| *i == page).map(|(_, b)| &b[..]);
    let mut buf = [0u8; PAGE_BYTES];
    if reap {
        let Ok(r) = ReapReader::open(&p) else {
            return;
        };
        let res: Result<(), hibernate::ReapError> = r.read_batches(2 * PAGE_BYTES, |b| {
            for (page, bytes) in b.pages() {
                assert_eq!(
                    Some(bytes),
                    original(page),
                    "REAP page {page:?}: wrong bytes"
                );
            }
            Ok(())
        });
        if !edited {
            res.expect("an intact REAP file reads back");
        }
        for (page, _) in &pages {
            if r.read_page(*page, &mut buf).is_ok() {
                assert_eq!(Some(&buf[..]), original(*page));
            }
        }
    } else {
        let r = SwapReader::open(&p);
        if !edited {
            assert!(r.is_ok(), "an intact swap file opens");
        }
        let Ok(r) = r else { return };
        for (page, _) in &pages {
            buf.fill(0xa5);
            match r.read_page(*page, &mut buf) {
                Ok(()) => assert_eq!(
                    Some(&buf[..]),
                    original(*page),
                    "swap page {page:?}: wrong bytes"
                ),
                Err(_) => {
                    assert!(edited, "an intact swap file reads back");
                    assert!(buf.iter().all(|&b| b == 0));
                }
            }
        }
    }
}
