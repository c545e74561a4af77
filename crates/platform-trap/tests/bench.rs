//! The bench functions work (small iteration counts; the figures are printed, not checked).

use std::time::Duration;

use platform_trap::bench::{self, Placement};

#[test]
fn bare_mechanisms_and_round_trip() {
    let native = bench::native_getpid_ns(2000);
    let trap = bench::sigsys_trap_ns(500);
    let same = bench::futex_handoff_ns(500, true);
    let cross = bench::futex_handoff_ns(500, false);
    let stub = bench::stub_getpid_ns(500, Placement::SameCpu, Duration::ZERO, 0).unwrap();
    println!("native {native} ns, trap {trap} ns, hand-off {same}/{cross} ns, stub {stub} ns");
    assert!(native > 0 && trap > 0 && same > 0 && cross > 0 && stub > 0);
}
