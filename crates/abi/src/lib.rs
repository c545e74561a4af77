//! The Linux x86-64 ABI as torpor's kernel sees it: syscall numbers and names, errnos, flags
//! and `#[repr(C)]` structures. No logic lives here.
