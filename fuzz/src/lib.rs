//! Harness functions of the fuzz targets: each takes the fuzzer's bytes, feeds them to one of
//! torpor's parsers of untrusted input and checks what must hold (no panic, and the
//! target's own invariants). `fuzz_targets/*.rs` wrap them for libFuzzer;
//! `crates/torpor/tests/fuzz.rs` includes the same files (`#[path]`) and replays the
//! committed seeds and a few thousand mutations of them in the normal test command.
//!
//! | target | harness | parser |
//! |---|---|---|
//! | `elf` | [`elf::run`] | `kernel::loader::load_elf` (program + PT_INTERP interpreter), then the initial stack and first touches |
//! | `shebang` | [`shebang::run`] | `kernel::syscalls::parse_shebang`, against a port of Linux's `binfmt_script` |
//! | `swapfile`, `reapfile` | [`pagefile::run_swap`], [`pagefile::run_reap`] | `SwapReader` / `ReapReader`: open, validate, read pages (checksums optionally fixed up by the harness) |
//! | `pagefile_corrupt` | [`pagefile::run_corrupt`] | a valid file written by the writers, then damaged: every byte read back must be the original |
//! | `oci_spec` | [`oci::run_spec`] | `serde_json` → `oci_spec::runtime::Spec` (config.json) |
//! | `control` | [`oci::run_control`] | the control socket's `Request` (the torpor library's `control`) |
//! | `bundle` | [`bundle::run`] | `Bundle::load` (the torpor library's `oci::bundle`) on a bundle directory |

pub mod bundle;
pub mod elf;
pub mod oci;
pub mod pagefile;
pub mod shebang;
pub mod util;
