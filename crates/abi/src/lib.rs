//! The Linux x86-64 ABI as torpor's kernel sees it: errnos, flags and `#[repr(C)]`
//! structures. No logic lives here beyond conversions.

pub mod aio;
pub mod clone;
pub mod errno;
pub mod io_uring;
pub mod ioctl;
pub mod mqueue;
pub mod pod;
pub mod signal;
pub mod structs;
pub mod timer;

pub use errno::Errno;
pub use pod::Pod;
