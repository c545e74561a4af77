//! Descriptor tables: the GDT (flat kernel and user segments plus one TSS per vCPU), the IDT
//! (every vector goes to its exit stub) and the 64-bit TSSs (ring-0 stack per vCPU).
//!
//! These are written once into the platform's reserved region before any vCPU runs; the guest
//! never changes them.

use crate::stubs;
use platform::layout::{self, KERNEL_CS, MAX_VCPUS};
use platform::memory::{GuestMemory, MemoryError};
use platform::Gpa;

/// 64-bit code segment, DPL 0.
const KERNEL_CODE: u64 = 0x0020_9a00_0000_0000;
/// Data segment, DPL 0.
const KERNEL_DATA: u64 = 0x0000_9200_0000_0000;
/// Data segment, DPL 3.
const USER_DATA: u64 = 0x0000_f200_0000_0000;
/// 64-bit code segment, DPL 3.
const USER_CODE: u64 = 0x0020_fa00_0000_0000;
/// Size of a 64-bit TSS minus one.
pub const TSS_LIMIT: u32 = 0x67;

/// Encodes the two 8-byte words of a 64-bit available-TSS system descriptor.
pub fn tss_descriptor(base: u64, limit: u32) -> [u64; 2] {
    let low = (u64::from(limit) & 0xffff)
        | ((base & 0xff_ffff) << 16)
        | (0x89u64 << 40) // present, DPL 0, type 9 (available 64-bit TSS)
        | ((u64::from(limit) >> 16 & 0xf) << 48)
        | (((base >> 24) & 0xff) << 56);
    [low, base >> 32]
}

/// Encodes a 64-bit interrupt gate to `handler` in segment `selector`, callable from `dpl`.
pub fn interrupt_gate(handler: u64, selector: u16, dpl: u8) -> [u64; 2] {
    let low = (handler & 0xffff)
        | (u64::from(selector) << 16)
        | ((0x8e | (u64::from(dpl & 3) << 5)) << 40) // present, interrupt gate
        | (((handler >> 16) & 0xffff) << 48);
    [low, handler >> 32]
}

/// Writes the GDT, the IDT and every vCPU's TSS into guest memory.
///
/// # Errors
/// [`MemoryError`] if guest memory is smaller than the reserved region.
pub fn write_tables(mem: &GuestMemory) -> Result<(), MemoryError> {
    let gdt = [0, KERNEL_CODE, KERNEL_DATA, USER_DATA, USER_CODE, 0];
    for (i, d) in gdt.iter().enumerate() {
        mem.write_u64(layout::GDT.add(i as u64 * 8), *d)?;
    }
    for cpu in 0..MAX_VCPUS {
        let base = layout::direct_map(layout::tss(cpu)).raw();
        let [lo, hi] = tss_descriptor(base, TSS_LIMIT);
        let at = layout::GDT.add(u64::from(layout::TSS_SELECTOR_BASE) + 16 * cpu as u64);
        mem.write_u64(at, lo)?;
        mem.write_u64(at.add(8), hi)?;
        // TSS: RSP0 at offset 4 (unaligned for u64, so written as bytes), I/O map base past
        // the limit (no I/O permission bitmap).
        let tss = layout::tss(cpu);
        mem.fill(tss, 0, layout::TSS_SLOT)?;
        let rsp0 = layout::direct_map(layout::stack_top(cpu)).raw();
        mem.write(tss.add(4), &rsp0.to_le_bytes())?;
        mem.write(tss.add(102), &((TSS_LIMIT + 1) as u16).to_le_bytes())?;
    }
    for vector in 0..=255u8 {
        let handler = layout::direct_map(stubs::exception_stub(vector)).raw();
        // int3 and into may be raised from ring 3 on purpose.
        let dpl = if vector == 3 || vector == 4 { 3 } else { 0 };
        let [lo, hi] = interrupt_gate(handler, KERNEL_CS, dpl);
        let at = Gpa(layout::IDT.raw() + u64::from(vector) * 16);
        mem.write_u64(at, lo)?;
        mem.write_u64(at.add(8), hi)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tss_descriptor_fields() {
        let [lo, hi] = tss_descriptor(0xffff_8000_1234_5678, 0x67);
        assert_eq!(lo & 0xffff, 0x67);
        assert_eq!((lo >> 16) & 0xff_ffff, 0x34_5678);
        assert_eq!((lo >> 40) & 0xff, 0x89);
        assert_eq!(lo >> 56, 0x12);
        assert_eq!(hi, 0xffff_8000);
    }

    #[test]
    fn gate_fields() {
        let [lo, hi] = interrupt_gate(0xffff_8000_0000_4100, 0x08, 3);
        assert_eq!(lo & 0xffff, 0x4100);
        assert_eq!((lo >> 16) & 0xffff, 0x08);
        assert_eq!((lo >> 40) & 0xff, 0xee);
        assert_eq!(lo >> 48, 0x0000);
        assert_eq!(hi, 0xffff_8000);
    }
}
