//! Shared helpers for torpor's end-to-end tests and benchmarks.
//!
//! - [`require_kvm`]: skip a test without `/dev/kvm`, or fail it when
//!   `TORPOR_REQUIRE_KVM=1` (as CI sets it);
//! - [`guest`]: build the C programs of `tests/guest/` (and others) with
//!   `cc`, cached under the target directory;
//! - [`Rootfs`]: a throwaway root filesystem holding Debian's static busybox;
//! - [`Torpor`] and [`run`]: run `torpor run`, or a program natively, with a
//!   timeout that kills a hung process so that a hang fails the test instead of
//!   hanging CI;
//! - [`Terminal`]: a pseudo-terminal a test types into and reads from;
//! - [`net`]: a free-port finder and a minimal HTTP/1.1 client;
//! - [`debian_rootfs`]: Debian root filesystems (debootstrap, cached) for the
//!   language-runtime tests.
//!
//! No dependencies beyond std, so it adds nothing to the build.

pub mod counting;
pub mod debian;
pub mod detached;
pub mod guest;
pub mod net;
pub mod rootfs;
pub mod run;
pub mod tempdir;
pub mod terminal;

use std::path::PathBuf;

pub use debian::{assert_directory_listing, build_java_hello, debian_rootfs, python_http_server};
pub use detached::{json_field, Detached};
pub use guest::{build_c, build_static_c, elf_is_static, guest_program, guest_source};
pub use net::{answers_within, free_port, http_get, read_response, HttpResponse};
pub use rootfs::{host_busybox, Rootfs};
pub use run::{native, run_command, Output, RunBuilder, Running, Torpor, DEFAULT_TIMEOUT};
pub use tempdir::{unique_token, TempDir};
pub use terminal::Terminal;

/// Environment variable that turns a missing `/dev/kvm` into a failure.
pub const REQUIRE_KVM_ENV: &str = "TORPOR_REQUIRE_KVM";

/// Says whether `/dev/kvm` can be opened read-write (always true on the trap platform,
/// [`platform_is_trap`], which needs none).
///
/// Returns `false` after printing `skipped: /dev/kvm not available` when it
/// cannot, so that a test can begin with
/// `if !testutil::require_kvm() { return; }`.
///
/// # Panics
///
/// When `/dev/kvm` cannot be opened and `TORPOR_REQUIRE_KVM=1`.
pub fn require_kvm() -> bool {
    if platform_is_trap() {
        // The trap platform runs without /dev/kvm.
        return true;
    }
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        Ok(_) => true,
        Err(e) => {
            if std::env::var(REQUIRE_KVM_ENV).as_deref() == Ok("1") {
                panic!("/dev/kvm not available ({e}) and {REQUIRE_KVM_ENV}=1");
            }
            println!("skipped: /dev/kvm not available ({e})");
            false
        }
    }
}

/// Whether the tests run on the trap platform (`TORPOR_PLATFORM=trap`, which the `torpor`
/// processes they start inherit).
pub fn platform_is_trap() -> bool {
    std::env::var("TORPOR_PLATFORM").as_deref() == Ok("trap")
}

/// Whether a single-threaded process's fork shares its memory copy-on-write in the sandboxes
/// the tests start: on the trap platform, unless `TORPOR_COW_FORK=0` (which the `torpor`
/// processes inherit) asks for copies.
pub fn forks_share_memory() -> bool {
    platform_is_trap() && std::env::var("TORPOR_COW_FORK").as_deref() != Ok("0")
}

/// The platforms a benchmark compares on this host: KVM and trap where `/dev/kvm` opens,
/// trap alone (said on standard output) where it does not.
pub fn platforms() -> Vec<&'static str> {
    let kvm = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    if kvm {
        vec!["kvm", "trap"]
    } else {
        println!("/dev/kvm not available: the trap platform only");
        vec!["trap"]
    }
}

/// Whether processes `a` and `b` share one address space (`kcmp(KCMP_VM)`; false if either
/// is gone or may not be compared): the trap platform's stub factory shares its holder's, so
/// its smaps are the holder's and must not be counted twice.
pub fn same_memory(a: u32, b: u32) -> bool {
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: kcmp compares two processes' kernel objects; no memory arguments.
    unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            a as libc::c_long,
            b as libc::c_long,
            KCMP_VM,
            0,
            0,
        ) == 0
    }
}

/// PSS of process `pid` in KiB (`/proc/PID/smaps_rollup`), if readable.
pub fn pss_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()?
        .lines()
        .find_map(|l| {
            l.strip_prefix("Pss:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
}

/// The workspace root (the directory holding `tests/guest/`).
pub fn workspace_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent()
        .and_then(|p| p.parent())
        .map(PathBuf::from)
        .expect("testutil lives at <workspace>/crates/testutil")
}

/// The cargo profile directory the running test or bench was built into
/// (`<target>/debug` or `<target>/release`), found from the running
/// executable, which cargo puts in `<profile dir>/deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("executable has a parent directory");
    if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().expect("deps has a parent").to_path_buf()
    } else {
        deps.to_path_buf()
    }
}

/// Path of the `torpor` binary: `$TORPOR_BIN` if set, else `torpor` in the
/// profile directory of the running test (where cargo builds it for the
/// integration tests and benches of the `torpor` package).
///
/// Integration tests of the `torpor` package should prefer
/// `env!("CARGO_BIN_EXE_torpor")`, which cargo guarantees is built.
pub fn torpor_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TORPOR_BIN") {
        return PathBuf::from(p);
    }
    profile_dir().join("torpor")
}

/// [`torpor_bin`] for the benchmarks of `crates/bench`, which cargo does not build `torpor`
/// for (it is a binary of another package): panics with what to do when it is missing.
pub fn built_torpor_bin() -> PathBuf {
    let bin = torpor_bin();
    assert!(
        bin.is_file(),
        "{}: no torpor command; build it first (cargo build --release), or set TORPOR_BIN",
        bin.display()
    );
    bin
}

/// The median of `v` (the mean of the two middle values for an even count); NaN when empty.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}
