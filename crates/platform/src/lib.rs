//! The KVM platform: the VM, its guest-physical memory, the descriptor tables, the ring-0
//! stubs, and vCPUs whose exits are decoded into events for the kernel.
//!
//! Guest ring 0 holds only stubs that exit to the host at once (on the machines torpor is
//! built on, ring-0 code is emulated and costs about 1 µs an instruction). The application runs
//! in ring 3; a `syscall` or an exception enters a stub, which executes one `out` whose port
//! names the event; the host handles it and resumes ring 3 by setting registers and segments.
//! Page-table updates are written by the PTE-sync stub (host writes to present entries are not
//! seen by a shadow MMU).

pub mod addr;
pub mod bench;
pub mod layout;
pub mod memory;
pub mod shared;

pub use addr::{Gpa, Gva, PAGE_SHIFT, PAGE_SIZE};
pub use memory::{GuestMemory, MemoryError};
pub use shared::{SharedWindow, SHARED_GPA_BASE, SHARED_GPA_END};
pub mod gdt;
pub mod kick;
pub mod stubs;
pub mod vcpu;
pub mod vm;

pub use kick::VcpuKicker;
pub use vcpu::{ExceptionInfo, Exit, PteRun, Regs, UserContext, Vcpu, VcpuError, XSAVE_AREA_SIZE};
pub use vm::{Vm, VmError};
