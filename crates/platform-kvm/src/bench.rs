//! Self-contained platform measurements and checks, on a VM with hand-built page tables (no
//! kernel, no page allocator): the bare exit round trip, the syscall-stub round trip and the
//! PTE-sync round trip. Used by `torpor-bench exit` and the platform's KVM tests.

use std::sync::Arc;
use std::time::Instant;

use crate::vcpu::{RawExit, Vcpu, VcpuError};
use crate::vm::{Vm, VmError};
use platform::layout;
use platform::memory::GuestMemory;
use platform::{Exit, PteRun};
use platform::{Gpa, Gva, PAGE_SIZE};

/// User virtual address where [`TestVm`] maps its code page.
pub const CODE: Gva = Gva(0x10_0000);
/// User virtual address of [`TestVm`]'s data page (present, writable).
pub const DATA: Gva = Gva(0x11_0000);
/// User virtual address in [`TestVm`] that is not mapped.
pub const UNMAPPED: Gva = Gva(0x12_0000);

const PML4: Gpa = Gpa(0x40_0000);
const KPDPT: Gpa = Gpa(0x40_1000);
const KPD: Gpa = Gpa(0x40_2000);
const KPT: Gpa = Gpa(0x40_9000);
const UPDPT: Gpa = Gpa(0x40_3000);
const UPD: Gpa = Gpa(0x40_4000);
const UPT: Gpa = Gpa(0x40_5000);
/// Frame behind [`CODE`].
pub const CODE_FRAME: Gpa = Gpa(0x40_6000);
/// Frame behind [`DATA`] at start.
pub const DATA_FRAME: Gpa = Gpa(0x40_7000);
/// A spare frame tests may map.
pub const SPARE_FRAME: Gpa = Gpa(0x40_8000);

/// A one-vCPU VM with a direct map of its first GiB, one user code page and one data page.
pub struct TestVm {
    /// The VM.
    pub vm: Vm,
    /// Its only vCPU.
    pub vcpu: Vcpu,
    /// Its memory.
    pub mem: Arc<GuestMemory>,
}

const P: u64 = 1;
const RW: u64 = 2;
const US: u64 = 4;
const PS: u64 = 0x80;

impl TestVm {
    /// Builds the VM and loads `code` at [`CODE`]; the thread starts there with `rsp` at the
    /// end of the data page.
    ///
    /// # Errors
    /// [`VmError`] if KVM is unavailable or refuses the set-up.
    pub fn new(code: &[u8]) -> Result<Self, VmError> {
        let mem = Arc::new(GuestMemory::new(64 << 20)?);
        let w = |gpa: Gpa, v: u64| mem.write_u64(gpa, v);
        w(
            PML4.add(((layout::DIRECT_MAP_BASE >> 39) & 511) * 8),
            KPDPT.raw() | P | RW | US,
        )?;
        w(KPDPT, KPD.raw() | P | RW | US)?;
        // The first 2 MiB through a page table: the stub page is user-readable (see
        // `stubs`), the rest supervisor-only.
        w(KPD, KPT.raw() | P | RW | US)?;
        for i in 0..512u64 {
            let flags = if i << 12 == layout::STUBS.raw() {
                P | US
            } else {
                P | RW
            };
            w(KPT.add(i * 8), (i << 12) | flags)?;
        }
        for i in 1..32u64 {
            w(KPD.add(i * 8), (i << 21) | P | RW | PS)?;
        }
        w(PML4, UPDPT.raw() | P | RW | US)?;
        w(UPDPT, UPD.raw() | P | RW | US)?;
        w(UPD, UPT.raw() | P | RW | US)?;
        w(UPT.add(8 * (CODE.raw() >> 12)), CODE_FRAME.raw() | P | US)?;
        w(
            UPT.add(8 * (DATA.raw() >> 12)),
            DATA_FRAME.raw() | P | RW | US,
        )?;
        mem.write(CODE_FRAME, code)?;
        let vm = Vm::new(mem.clone())?;
        let mut vcpu = vm.create_vcpu(0, PML4)?;
        vcpu.user.regs.rip = CODE.raw();
        vcpu.user.regs.rsp = DATA.raw() + PAGE_SIZE;
        Ok(TestVm { vm, vcpu, mem })
    }

    /// Writes the PTE for user page `va` (in the first 2 MiB... 4 MiB of user space covered by
    /// the one page table) in memory and returns the run that the PTE-sync stub must rewrite.
    pub fn set_pte(&self, va: Gva, value: u64) -> Result<PteRun, platform::MemoryError> {
        let entry = UPT.add(8 * ((va.raw() >> 12) & 511));
        self.mem.write_u64(entry, value)?;
        Ok(PteRun {
            first: layout::direct_map(entry),
            count: 1,
        })
    }

    /// The PTE value mapping `frame` user-readable and writable.
    pub fn user_rw(frame: Gpa) -> u64 {
        frame.raw() | P | RW | US
    }
}

/// Platform round-trip figures, in microseconds per operation.
#[derive(Clone, Copy, Debug)]
pub struct RoundTrips {
    /// A bare exit: a ring-3 store to unbacked guest-physical memory exits to the host (MMIO),
    /// and the host resumes the guest at once.
    pub bare_exit_us: f64,
    /// A ring-3 `syscall` into the stub, out to the host and straight back (no kernel work).
    pub syscall_us: f64,
    /// The same with a one-entry PTE sync before each return.
    pub syscall_with_pte_sync_us: f64,
}

/// Measures [`RoundTrips`] over `n` iterations each.
///
/// # Errors
/// [`VmError`] if KVM is unavailable; [`VcpuError`] (wrapped) on an unexpected exit.
pub fn round_trips(n: u32) -> Result<RoundTrips, VmError> {
    // loop: syscall ; jmp loop
    let mut t = TestVm::new(&[0x0f, 0x05, 0xeb, 0xfc])?;
    let time = |t: &mut TestVm, sync: bool| -> Result<f64, VcpuError> {
        let run = t.set_pte(DATA, TestVm::user_rw(DATA_FRAME))?;
        let start = Instant::now();
        for _ in 0..n {
            let s: &[PteRun] = if sync {
                std::slice::from_ref(&run)
            } else {
                &[]
            };
            match t.vcpu.run(s)? {
                RawExit::Exit(Exit::Syscall) => {}
                other => return Err(VcpuError::Unexpected(format!("{other:?}"))),
            }
        }
        Ok(start.elapsed().as_secs_f64() * 1e6 / f64::from(n.max(1)))
    };
    let syscall_us = time(&mut t, false)?;
    let syscall_with_pte_sync_us = time(&mut t, true)?;

    // loop: mov [DATA], al ; jmp loop — with DATA mapped to a frame outside the memslot.
    let d = DATA.raw() as u32;
    let mut code = vec![0x88, 0x04, 0x25];
    code.extend_from_slice(&d.to_le_bytes());
    code.extend_from_slice(&[0xeb, 0xf7]);
    let mut m = TestVm::new(&code)?;
    let outside = Gpa(m.mem.size());
    m.set_pte(DATA, TestVm::user_rw(outside))?;
    let took = m.vcpu.count_mmio_exits(n)?;
    let bare_exit_us = took.as_secs_f64() * 1e6 / f64::from(n.max(1));
    Ok(RoundTrips {
        bare_exit_us,
        syscall_us,
        syscall_with_pte_sync_us,
    })
}
