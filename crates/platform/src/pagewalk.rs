//! A walk of the x86-64 four-level page tables the memory manager keeps in guest memory, for
//! platforms that must read them themselves: the KVM platform (a syscall frame on the user
//! stack) and the trap platform (what its stubs map).

use crate::addr::Gpa;
use crate::memory::{GuestMemory, MemoryError};

/// Entry bit: present.
pub const PRESENT: u64 = 1;
/// Entry bit: writable.
pub const WRITABLE: u64 = 1 << 1;
/// Entry bit: reachable from user mode.
pub const USER: u64 = 1 << 2;
/// Entry bit: accessed.
pub const ACCESSED: u64 = 1 << 5;
/// Entry bit: dirty (leaf entries).
pub const DIRTY: u64 = 1 << 6;
/// Entry bit: a large page (PDPT and PD entries).
pub const LARGE: u64 = 1 << 7;
/// Entry bit: no instruction fetch.
pub const NO_EXEC: u64 = 1 << 63;
/// The frame address bits of an entry.
pub const ADDR: u64 = 0x000f_ffff_ffff_f000;

/// The entry that maps an address: where it lies, its value, and the size of the page it maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Guest-physical address of the entry.
    pub slot: Gpa,
    /// Its value.
    pub value: u64,
    /// Size of the page it maps: 4 KiB, or 2 MiB and 1 GiB for large pages.
    pub page_size: u64,
}

impl Entry {
    /// The guest-physical address of byte `va` of the page this entry maps.
    pub fn translate(&self, va: u64) -> Gpa {
        let offset = self.page_size - 1;
        Gpa((self.value & ADDR & !offset) + (va & offset))
    }
}

/// Walks the tables rooted at `root` down to the entry that maps `va`: `None` where a level
/// is not present.
///
/// # Errors
/// [`MemoryError`] if a table lies outside guest memory.
pub fn walk(mem: &GuestMemory, root: Gpa, va: u64) -> Result<Option<Entry>, MemoryError> {
    let mut table = root.raw() & ADDR;
    for level in (0..4u32).rev() {
        let shift = 12 + 9 * level;
        let slot = Gpa(table + 8 * ((va >> shift) & 0x1ff));
        let value = mem.read_u64(slot)?;
        if value & PRESENT == 0 {
            return Ok(None);
        }
        if level == 0 || (level < 3 && value & LARGE != 0) {
            return Ok(Some(Entry {
                slot,
                value,
                page_size: 1 << shift,
            }));
        }
        table = value & ADDR;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_to_small_and_large_pages() {
        let mem = GuestMemory::new(crate::memory::MEMORY_GRANULE).unwrap();
        // PML4 at 0x1000 → PDPT at 0x2000 → PD at 0x3000 → PT at 0x4000.
        let va: u64 = 0x40_1234;
        mem.write_u64(Gpa(0x1000), 0x2000 | PRESENT | USER).unwrap();
        mem.write_u64(Gpa(0x2000), 0x3000 | PRESENT | USER).unwrap();
        mem.write_u64(Gpa(0x3000 + 8 * 2), 0x4000 | PRESENT | USER)
            .unwrap();
        mem.write_u64(Gpa(0x4000 + 8), 0x9000 | PRESENT | USER | WRITABLE)
            .unwrap();
        let e = walk(&mem, Gpa(0x1000), va).unwrap().unwrap();
        assert_eq!((e.slot, e.page_size), (Gpa(0x4008), 4096));
        assert_eq!(e.translate(va), Gpa(0x9234));
        // The next page is absent.
        assert_eq!(walk(&mem, Gpa(0x1000), va + 0x1000).unwrap(), None);
        // A 2 MiB page in the PD's slot 3.
        mem.write_u64(Gpa(0x3000 + 8 * 3), 0x20_0000 | PRESENT | LARGE)
            .unwrap();
        let e = walk(&mem, Gpa(0x1000), 0x61_2345).unwrap().unwrap();
        assert_eq!(e.page_size, 2 << 20);
        assert_eq!(e.translate(0x61_2345), Gpa(0x21_2345));
        // A table outside memory is an error.
        mem.write_u64(Gpa(0x3000 + 8 * 4), (1 << 40) | PRESENT)
            .unwrap();
        assert!(walk(&mem, Gpa(0x1000), 0x80_0000).is_err());
    }
}
