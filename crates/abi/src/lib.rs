//! The Linux x86-64 ABI as torpor's kernel sees it: errnos, flags and `#[repr(C)]`
//! structures. No logic lives here beyond conversions.

pub mod errno;
pub mod structs;

pub use errno::Errno;
