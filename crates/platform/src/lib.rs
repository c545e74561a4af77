//! The platform interface and what every platform shares.
//!
//! The kernel runs application code through a [`Platform`]: an [`AddressSpace`] per guest
//! process, a [`Context`] per thread whose `switch` returns a neutral [`Exit`] (a syscall, an
//! exception, an interruption). The implementations live in crates of their own
//! (`platform-kvm`, `platform-trap`) that only the front end depends on, so the compiler
//! proves that the kernel, memory manager and hibernation layer name no platform's types.
//!
//! This crate also holds guest-physical memory ([`GuestMemory`], with its shared windows) and
//! the guest layout, which every platform keeps the same so that page tables, swap files and
//! checkpoints do not depend on the platform.

pub mod addr;
pub mod context;
pub mod interface;
pub mod kick;
pub mod layout;
pub mod memory;
pub mod pagewalk;
pub mod shared;
pub mod visible;

pub use addr::{Gpa, Gva, PAGE_SHIFT, PAGE_SIZE};
pub use context::{
    CpuModel, ExceptionInfo, Exit, FpuState, PageRun, PteRun, Regs, UserContext, FPU_STATE_SIZE,
};
pub use interface::{
    AddressSpace, Commit, Context, Kick, Kicker, Platform, PlatformError, PtChanges, Vdso,
};
pub use memory::{GuestMemory, MemoryError};
pub use shared::{SharedWindow, SHARED_GPA_BASE, SHARED_GPA_END};
