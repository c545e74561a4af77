//! Where things live in guest-physical and guest-virtual memory.
//!
//! ```text
//! guest-physical                                 guest-virtual
//! 0x000000 ┌──────────────────────────────┐      0x0000_0000_0000_0000 ┌─────────────────┐
//!          │ (unused: null page)          │                            │ application     │
//! 0x001000 │ GDT (2 pages)                │                            │ (ring 3)        │
//! 0x003000 │ IDT (256 gates)              │                            │                 │
//! 0x004000 │ ring-0 stubs (code)          │      0x0000_7f80_0000_0000 ├─────────────────┤
//! 0x008000 │ TSS, one per vCPU            │        DIRECT_MAP_BASE     │ all of guest-   │
//! 0x010000 │ ring-0 stacks, one per vCPU  │                            │ physical memory │
//! 0x110000 │ PTE batches, one per vCPU    │                            │ (ring 0 only,   │
//! 0x210000 │ (spare)                      │                            │ but the stub    │
//! 0x400000 ├──────────────────────────────┤                            │ page, read-only)│
//!          │ page allocator's chunks:     │      0x0000_8000_0000_0000 └─────────────────┘
//!          │ application pages and page   │
//!          │ tables                       │
//!          └──────────────────────────────┘
//! ```
//!
//! The first 4 MiB chunk is reserved for the platform; everything above it belongs to the page
//! allocator. Ring-0 code reaches guest-physical memory through the direct map only.

use crate::addr::{Gpa, Gva};

/// Base of the direct map of all guest-physical memory (supervisor-only except the stub page).
///
/// It sits in the last PML4 slot of the lower half, not in the upper half as on Linux: the PVM
/// hypervisor of these machines rejects guest addresses in the upper half outside a range it
/// assigns. The application keeps 127.5 TiB below it.
pub const DIRECT_MAP_BASE: u64 = 0x0000_7f80_0000_0000;
/// First guest-physical address owned by the page allocator; below it, the platform's region.
pub const RESERVED_END: Gpa = Gpa(0x40_0000);
/// Highest user address + 1: the application owns everything below the direct map.
pub const USER_END: Gva = Gva(DIRECT_MAP_BASE);
/// Size of the direct-map window (one PML4 slot).
pub const DIRECT_MAP_SIZE: u64 = 1 << 39;

/// The GDT (2 pages).
pub const GDT: Gpa = Gpa(0x1000);
/// Size of the GDT region in bytes.
pub const GDT_SIZE: u64 = 0x2000;
/// The IDT (256 16-byte gates).
pub const IDT: Gpa = Gpa(0x3000);
/// The ring-0 stub code.
pub const STUBS: Gpa = Gpa(0x4000);
/// The TSS array: one 128-byte slot per vCPU.
pub const TSS_BASE: Gpa = Gpa(0x8000);
/// Bytes per TSS slot.
pub const TSS_SLOT: u64 = 128;
/// Ring-0 stacks: one page per vCPU.
pub const STACKS_BASE: Gpa = Gpa(0x1_0000);
/// PTE batch buffers: one page per vCPU.
pub const BATCH_BASE: Gpa = Gpa(0x11_0000);
/// The most vCPUs a VM can have (bounded by the GDT's TSS descriptors and the reserved region).
pub const MAX_VCPUS: usize = 256;

/// Kernel selector: 64-bit code, DPL 0.
pub const KERNEL_CS: u16 = 0x08;
/// Kernel selector: data, DPL 0.
pub const KERNEL_SS: u16 = 0x10;
/// User selector: data, DPL 3 (with RPL 3).
pub const USER_SS: u16 = 0x1b;
/// User selector: 64-bit code, DPL 3 (with RPL 3).
pub const USER_CS: u16 = 0x23;
/// Selector of vCPU 0's TSS; vCPU `i` uses `TSS_SELECTOR_BASE + 16 * i`.
pub const TSS_SELECTOR_BASE: u16 = 0x30;

/// The ring-0 (direct-map) virtual address of a guest-physical address.
pub const fn direct_map(gpa: Gpa) -> Gva {
    Gva(DIRECT_MAP_BASE + gpa.0)
}

/// The guest-physical address behind a direct-map virtual address, if it is one.
pub const fn from_direct_map(gva: Gva) -> Option<Gpa> {
    if gva.0 >= DIRECT_MAP_BASE && gva.0 - DIRECT_MAP_BASE < DIRECT_MAP_SIZE {
        Some(Gpa(gva.0 - DIRECT_MAP_BASE))
    } else {
        None
    }
}

/// Whether `gva` lies in the application's (ring-3) half of the address space.
pub const fn is_user(gva: Gva) -> bool {
    gva.0 < USER_END.0
}

/// Guest-physical address of vCPU `index`'s TSS.
pub const fn tss(index: usize) -> Gpa {
    Gpa(TSS_BASE.0 + index as u64 * TSS_SLOT)
}

/// Guest-physical address of the top of vCPU `index`'s ring-0 stack.
pub const fn stack_top(index: usize) -> Gpa {
    Gpa(STACKS_BASE.0 + (index as u64 + 1) * 0x1000)
}

/// Guest-physical address of vCPU `index`'s PTE batch buffer (one page).
pub const fn batch(index: usize) -> Gpa {
    Gpa(BATCH_BASE.0 + index as u64 * 0x1000)
}

// The platform's regions fit the reserved chunk, and every TSS descriptor fits the GDT.
const _: () = {
    assert!(tss(MAX_VCPUS - 1).0 + TSS_SLOT <= STACKS_BASE.0);
    assert!(stack_top(MAX_VCPUS - 1).0 <= BATCH_BASE.0);
    assert!(batch(MAX_VCPUS - 1).0 + 0x1000 <= RESERVED_END.0);
    assert!(GDT.0 + GDT_SIZE <= IDT.0);
    assert!(TSS_SELECTOR_BASE as u64 + 16 * MAX_VCPUS as u64 <= GDT_SIZE);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_map_round_trip() {
        let g = Gpa(0x12345);
        assert_eq!(from_direct_map(direct_map(g)), Some(g));
        assert_eq!(from_direct_map(Gva(0x1000)), None);
        assert!(is_user(Gva(0x40_0000)));
        assert!(!is_user(direct_map(g)));
        assert_eq!(from_direct_map(Gva(0xffff_8000_0000_0000)), None);
    }
}
