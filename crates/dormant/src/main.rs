//! `torpor-dormant --status FILE --control FD [--watch FD]... [--exec-fd FD] [--reclaim FD] --
//! WAKE...`: see the library. On a wake it execs `WAKE... --woken-by FD` (FD: the watched
//! descriptor that became ready, or the control connection whose request waits unread), every
//! descriptor inherited.
//!
//! A freestanding program: its own entry point (`_start`), no C library (linked `-nostdlib
//! -static`, `build.rs`), a panic ends it with status 101. Built for tests (`cargo test`,
//! clippy's test build) it is an empty program on `std`.

#![cfg_attr(not(test), no_std)]
#![cfg_attr(not(test), no_main)]

#[cfg(test)]
fn main() {}

#[cfg(not(test))]
mod freestanding;
