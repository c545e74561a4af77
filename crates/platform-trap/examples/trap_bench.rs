//! The trap platform's figures (design §3, stage T1): the bare mechanisms and the stub's
//! `getpid` round trip, medians over `ITERS` iterations (first argument; default 20000).
//! "Default adaptive spin": the holder spins up to [`platform_trap::DEFAULT_SPIN`] and the
//! stub handler up to [`platform_trap::DEFAULT_STUB_SPIN`] `pause`s, each only when the other
//! side last ran on another CPU. The ratio compares with the trap plus the hand-off on the
//! same placement (one CPU for unpinned and same-CPU runs).
//!
//! `cargo run -p platform-trap --release --example trap_bench [iters]`

use std::time::Duration;

use platform_trap::bench::{self, Placement};

fn main() {
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    host_facts();
    println!("medians over {iters} iterations (ns)");
    println!(
        "native getpid                        {:>8}",
        bench::native_getpid_ns(iters)
    );
    let trap = bench::sigsys_trap_ns(iters);
    println!("SIGSYS trap + return (in-process)    {trap:>8}");
    let same = bench::futex_handoff_ns(iters, true);
    let cross = bench::futex_handoff_ns(iters, false);
    println!("futex hand-off round trip, same CPU  {same:>8}");
    println!("futex hand-off round trip, 2 CPUs    {cross:>8}");
    println!("stub getpid round trip:");
    let (spin, stub_spin) = (
        platform_trap::DEFAULT_SPIN,
        platform_trap::DEFAULT_STUB_SPIN,
    );
    let none = Duration::ZERO;
    let configs: [(&str, Placement, Duration, u64); 7] = [
        ("unpinned, no spin", Placement::Free, none, 0),
        (
            "unpinned, default adaptive spin",
            Placement::Free,
            spin,
            stub_spin,
        ),
        ("same CPU, no spin", Placement::SameCpu, none, 0),
        (
            "same CPU, default adaptive spin",
            Placement::SameCpu,
            spin,
            stub_spin,
        ),
        ("2 CPUs, no spin", Placement::CrossCpu, none, 0),
        (
            "2 CPUs, holder spins <=20 us only",
            Placement::CrossCpu,
            Duration::from_micros(20),
            0,
        ),
        (
            "2 CPUs, default adaptive spin",
            Placement::CrossCpu,
            spin,
            stub_spin,
        ),
    ];
    for (name, placement, spin, stub_spin) in configs {
        match bench::stub_getpid_ns(iters, placement, spin, stub_spin) {
            Ok(ns) => {
                let base = trap
                    + if placement == Placement::CrossCpu {
                        cross
                    } else {
                        same
                    };
                println!(
                    "  {name:<38} {ns:>8}   ({:.2}x trap + hand-off)",
                    ns as f64 / base as f64
                );
            }
            Err(e) => println!("  {name:<38} failed: {e}"),
        }
    }
}

/// XSAVE size and features as signal frames carry them, FSGSBASE and the signal stack minimum.
fn host_facts() {
    use std::os::fd::AsFd;
    let mem = platform_trap::sys::memfd("facts", 4096).expect("memfd");
    let stub = platform_trap::StubProcess::spawn(mem.as_fd()).expect("stub");
    let t = stub.new_thread().expect("thread");
    let f = t.fpu();
    let features = u64::from_le_bytes(f[472..480].try_into().expect("8 bytes"));
    println!(
        "XSAVE image {} bytes, features {features:#x}; AT_HWCAP2 {:#x}; AT_MINSIGSTKSZ {}",
        stub.xsave_size(),
        platform_trap::sys::auxval(platform_trap::sys::AT_HWCAP2),
        platform_trap::sys::auxval(platform_trap::sys::AT_MINSIGSTKSZ),
    );
}
