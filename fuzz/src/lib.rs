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
//! | `control` | [`oci::run_control`] | the control socket's `Request` (crates/torpor/src/control.rs, included as source) |
//! | `bundle` | [`bundle::run`] | `Bundle::load` (crates/torpor/src/oci/bundle.rs, included as source) on a bundle directory |

pub mod bundle;
pub mod elf;
pub mod oci;
pub mod pagefile;
pub mod shebang;
pub mod util;

/// The control socket's messages, compiled from the torpor binary crate's own source.
#[path = "../../crates/torpor/src/control.rs"]
#[allow(dead_code, missing_docs)]
pub mod control_src;

/// The OCI bundle parser, compiled from the torpor binary crate's own source; the items of
/// that crate it refers to are provided by [`mounts`], [`cowroot`], [`units`] and [`run`] below
/// (when bundle.rs starts using another one, this target needs a stand-in for it too).
#[path = "../../crates/torpor/src/oci/bundle.rs"]
#[allow(dead_code, missing_docs)]
pub mod bundle_src;

/// The bind mounts of a bundle, which `bundle.rs` parses (`super::mounts`), compiled from
/// the torpor crate's source.
#[path = "../../crates/torpor/src/oci/mounts.rs"]
#[allow(dead_code, missing_docs)]
pub mod mounts;

/// Stand-in for `crates/torpor/src/cowroot.rs`: `mounts.rs` enters a mount namespace before
/// mounting, which the harness never does.
pub mod cowroot {
    /// Refuses (the harness only parses bundles).
    pub fn enter_private_namespace() -> anyhow::Result<()> {
        anyhow::bail!("the fuzz harness mounts nothing")
    }
}

/// The units `bundle.rs` parses sizes with (`crate::units`), compiled from the torpor crate's
/// source.
#[path = "../../crates/torpor/src/units.rs"]
#[allow(dead_code)]
pub mod units;

/// Stand-in for `crates/torpor/src/run.rs`: the constant `bundle.rs` uses.
pub mod run {
    /// The default PATH.
    pub const DEFAULT_PATH: &str =
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
}
