//! `cargo bench -p torpor-bench --bench cow`: fork + exit + wait of a process holding 10, 200
//! and 1,000 MiB it has written (`tests/guest/fork_cost.c`), natively, on the KVM platform
//! and on the trap platform, in one run (issue 35's baseline, `docs/design/cow-fork.md` §6,
//! slice S0). Prints a Markdown table: the median of every round of every run, in ms, and
//! each platform's ratio to native. Today a fork copies the parent's private memory at once;
//! the copy-on-write fork of issue 35 is measured against these figures.

use testutil::{median, Rootfs, Torpor};

/// The sizes, in MiB.
const SIZES: [u64; 3] = [10, 200, 1000];
/// Runs of the program per size and platform.
const RUNS: usize = 3;
/// Forks per run.
const ROUNDS: usize = 5;
/// The sandbox's memory: the parent and one child's whole copy of 1,000 MiB.
const MEMORY: &str = "3G";

/// The rounds' times a run printed, or why it failed.
fn rounds(out: &testutil::Output) -> Result<Vec<f64>, String> {
    if out.code() != 0 {
        return Err(format!("exit {}: {}", out.code(), out.stderr_str().trim()));
    }
    let v: Vec<f64> = out
        .stdout_str()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    if v.len() == ROUNDS {
        Ok(v)
    } else {
        Err(format!("{} rounds printed, {ROUNDS} expected", v.len()))
    }
}

fn main() {
    let t = Torpor::new(testutil::built_torpor_bin());
    let r = Rootfs::new();
    let prog = r.guest_program("fork_cost");
    let native = testutil::guest_program("fork_cost");
    let platforms = testutil::platforms();
    print!("| parent holds | native, ms |");
    for p in &platforms {
        print!(" {p}, ms | {p} / native |");
    }
    println!();
    print!("|---:|---:|");
    for _ in &platforms {
        print!("---:|---:|");
    }
    println!();
    for mib in SIZES {
        let args = [mib.to_string(), ROUNDS.to_string()];
        let mut all = Vec::new();
        for _ in 0..RUNS {
            let out = testutil::native(&native, &args, r.path(), &[], None);
            match rounds(&out) {
                Ok(v) => all.extend(v),
                Err(e) => panic!("native fork_cost {mib}: {e}"),
            }
        }
        let base = median(&all);
        print!("| {mib} MiB | {base:.2} |");
        for p in &platforms {
            let mut all = Vec::new();
            let mut err = None;
            for _ in 0..RUNS {
                let out = t
                    .run(r.path(), &prog)
                    .memory(MEMORY)
                    .args(&args)
                    .host_env("TORPOR_PLATFORM", p)
                    .timeout(std::time::Duration::from_secs(600))
                    .output();
                match rounds(&out) {
                    Ok(v) => all.extend(v),
                    Err(e) => err = Some(e),
                }
            }
            match err {
                None => {
                    let m = median(&all);
                    print!(" {m:.1} | {:.1}x |", m / base);
                }
                Some(e) => print!(" failed: {e} | |"),
            }
        }
        println!();
    }
}
