//! `cargo bench -p torpor-bench --bench cow`: fork + exit + wait of a process holding 10, 200
//! and 1,000 MiB it has written (`tests/guest/fork_cost.c`), natively, on the KVM platform
//! and on the trap platform, in one run (issue 35's baseline, `docs/design/cow-fork.md` §6,
//! slice S0). Prints a Markdown table: the median of every round of every run, in ms, and
//! each platform's ratio to native. A fork copies the parent's private memory at once, but
//! on the trap platform with `TORPOR_COW_FORK=1` (the "trap, CoW" column), where it shares
//! it copy-on-write (`docs/design/cow-fork.md`, S1).
//!
//! Then the parent's writes after such a fork, its child gone (`fork_cost MIB ROUNDS
//! writes`: every page written again, timed), which a copy-on-write fork left write-protected.
//!
//! Then the memory of a pre-fork server (`tests/guest/prefork.c`: a parent holding 200 MiB
//! it wrote, four workers each writing 1% of it): the PSS of the whole process tree
//! natively, and of the sandbox (`torpor stats`' `pss_bytes`: the holder and its stubs) on
//! each platform, against the same program with no worker.
//!
//! Then Debian's gunicorn with `--preload` (`cow/gunicorn.rs`): four workers against one, on
//! the `wsgi` root (`scripts/build-rootfs.sh wsgi`: python3 and gunicorn; the table is left
//! out, saying why, when that root cannot be built). `cargo bench -p torpor-bench --bench
//! cow -- gunicorn` prints that table alone.

use testutil::{median, Rootfs, Torpor};

#[path = "cow/gunicorn.rs"]
mod gunicorn;

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

/// The configurations measured beside native: a label, the platform, and whether
/// `TORPOR_COW_FORK=1` is set.
fn configs() -> Vec<(String, &'static str, bool)> {
    let mut v = Vec::new();
    for p in testutil::platforms() {
        v.push((p.to_string(), p, false));
        if p == "trap" {
            v.push(("trap, CoW".to_string(), p, true));
        }
    }
    v
}

/// The pre-fork server's heap, MiB, and its workers.
const PREFORK_MIB: u64 = 200;
const PREFORK_WORKERS: u32 = 4;

fn main() {
    let configs = configs();
    // `cargo bench --bench cow -- gunicorn`: that table alone.
    if std::env::args().skip(1).any(|a| a == "gunicorn") {
        gunicorn_memory(&configs);
        return;
    }
    let r = Rootfs::new();
    timed_table(&r, &configs, &[], "parent holds");
    println!();
    timed_table(
        &r,
        &configs,
        &["writes"],
        "writes after a fork, parent holds",
    );
    println!();
    prefork_memory(&r, &configs);
    println!();
    gunicorn_memory(&configs);
}

/// gunicorn's workers, one against four.
const GUNICORN_WORKERS: u32 = 4;

/// Prints the memory of gunicorn `--preload` with one worker and with
/// [`GUNICORN_WORKERS`], natively and in each configuration.
fn gunicorn_memory(configs: &[(String, &'static str, bool)]) {
    let Some(root) = testutil::debian_rootfs("wsgi") else {
        println!("gunicorn: no `wsgi` root filesystem (scripts/build-rootfs.sh wsgi)");
        return;
    };
    println!(
        "| gunicorn --preload, {} MiB of data, PSS in MiB | 1 worker | {GUNICORN_WORKERS} workers | {GUNICORN_WORKERS} workers / 1 |",
        gunicorn::DATA_MIB
    );
    println!("|---|---:|---:|---:|");
    let row = |label: &str, measure: &dyn Fn(u32) -> Result<u64, String>| match (
        measure(1),
        measure(GUNICORN_WORKERS),
    ) {
        (Ok(one), Ok(all)) => {
            let (one, all) = (one as f64 / MIB_F, all as f64 / MIB_F);
            println!("| {label} | {one:.1} | {all:.1} | {:.2}x |", all / one);
        }
        (Err(e), _) | (_, Err(e)) => println!("| {label} | failed: {e} | | |"),
    };
    row("native", &|w| gunicorn::native_pss(&root, w));
    for (label, p, cow) in configs {
        row(label, &|w| gunicorn::sandbox_pss(&root, w, p, *cow));
    }
}

/// Runs `fork_cost MIB ROUNDS MODE...` (which prints a time in ms per round) at each of
/// [`SIZES`], natively and in each configuration, and prints the medians and ratios to
/// native.
fn timed_table(r: &Rootfs, configs: &[(String, &'static str, bool)], mode: &[&str], what: &str) {
    let t = Torpor::new(testutil::built_torpor_bin());
    let prog = r.guest_program("fork_cost");
    let native = testutil::guest_program("fork_cost");
    print!("| {what} | native, ms |");
    for (label, ..) in configs {
        print!(" {label}, ms | {label} / native |");
    }
    println!();
    print!("|---:|---:|");
    for _ in configs {
        print!("---:|---:|");
    }
    println!();
    for mib in SIZES {
        let mut args = vec![mib.to_string(), ROUNDS.to_string()];
        args.extend(mode.iter().map(|m| m.to_string()));
        let mut all = Vec::new();
        for _ in 0..RUNS {
            let out = testutil::native(&native, &args, r.path(), &[], None);
            match rounds(&out) {
                Ok(v) => all.extend(v),
                Err(e) => panic!("native fork_cost {mib} {mode:?}: {e}"),
            }
        }
        let base = median(&all);
        print!("| {mib} MiB | {base:.2} |");
        for (_, p, cow) in configs {
            let mut all = Vec::new();
            let mut err = None;
            for _ in 0..RUNS {
                let out = t
                    .run(r.path(), &prog)
                    .memory(MEMORY)
                    .args(&args)
                    .host_env("TORPOR_PLATFORM", p)
                    .host_env("TORPOR_COW_FORK", if *cow { "1" } else { "0" })
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

/// Prints the pre-fork server's memory with [`PREFORK_WORKERS`] workers and with none,
/// natively and in each configuration.
fn prefork_memory(r: &Rootfs, configs: &[(String, &'static str, bool)]) {
    let mib = PREFORK_MIB.to_string();
    let native = testutil::guest_program("prefork");
    let prog = r.guest_program("prefork");
    println!(
        "| {PREFORK_MIB} MiB, PSS in MiB | no worker | {PREFORK_WORKERS} workers | {PREFORK_WORKERS} workers / none |"
    );
    println!("|---|---:|---:|---:|");
    let row = |label: &str, measure: &dyn Fn(u32) -> Result<f64, String>| match (
        measure(0),
        measure(PREFORK_WORKERS),
    ) {
        (Ok(one), Ok(all)) => {
            println!("| {label} | {one:.1} | {all:.1} | {:.2}x |", all / one);
        }
        (Err(e), _) | (_, Err(e)) => println!("| {label} | failed: {e} | | |"),
    };
    row("native", &|workers| {
        prefork::native_pss(&native, &mib, workers).map(|b| b as f64 / MIB_F)
    });
    for (label, p, cow) in configs {
        row(label, &|workers| {
            prefork::sandbox_pss(r, &prog, &mib, workers, p, *cow).map(|b| b as f64 / MIB_F)
        });
    }
}

const MIB_F: f64 = 1048576.0;

/// Running `prefork` until it is ready, and reading its memory.
mod prefork {
    use std::io::{BufRead, BufReader};
    use std::path::Path;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use testutil::Rootfs;

    /// The PSS of a process and its descendants, bytes.
    pub fn tree_pss(pid: u32) -> u64 {
        let mut total = 0;
        let mut todo = vec![pid];
        while let Some(p) = todo.pop() {
            let rollup =
                std::fs::read_to_string(format!("/proc/{p}/smaps_rollup")).unwrap_or_default();
            total += rollup
                .lines()
                .find_map(|l| l.strip_prefix("Pss:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0)
                * 1024;
            let children =
                std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")).unwrap_or_default();
            todo.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
        total
    }

    /// `prefork MIB WORKERS` run natively: the PSS of its tree once it is ready.
    pub fn native_pss(prog: &Path, mib: &str, workers: u32) -> Result<u64, String> {
        let mut child = Command::new(prog)
            .args([mib, &workers.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", prog.display()))?;
        let mut line = String::new();
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let _ = BufReader::new(stdout).read_line(&mut line);
        let pss = if line.trim() == "ready" {
            Ok(tree_pss(child.id()))
        } else {
            Err(format!("prefork printed {line:?}"))
        };
        // The workers, then the parent.
        let pid = child.id() as i32;
        let workers: Vec<i32> = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|c| c.parse().ok())
            .collect();
        for p in workers.into_iter().chain([pid]) {
            // SAFETY: signals a process of our own tree.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        let _ = child.wait();
        pss
    }

    /// `prefork MIB WORKERS` in a detached sandbox: `torpor stats`' PSS once it is ready.
    pub fn sandbox_pss(
        r: &Rootfs,
        prog: &str,
        mib: &str,
        workers: u32,
        platform: &str,
        cow: bool,
    ) -> Result<u64, String> {
        let w = workers.to_string();
        detached_pss(r.path(), &[prog, mib, &w], platform, cow, |log| {
            log.contains("ready")
        })
    }

    /// `ARGS` run detached in a sandbox of 2 GiB on `root` (on `platform`, its forks
    /// sharing memory or not as `cow` says): `torpor stats`' PSS once `ready` holds for its
    /// output log (within two minutes); the sandbox is deleted after.
    pub fn detached_pss(
        root: &Path,
        args: &[&str],
        platform: &str,
        cow: bool,
        ready: impl Fn(&str) -> bool,
    ) -> Result<u64, String> {
        let bin = testutil::built_torpor_bin();
        let state = testutil::TempDir::new("torpor-cow-bench");
        let id = "cow-bench";
        let torpor = |args: &[&str]| {
            Command::new(&bin)
                .env("TORPOR_STATE_DIR", state.path())
                .env("TORPOR_PLATFORM", platform)
                .env("TORPOR_COW_FORK", if cow { "1" } else { "0" })
                .args(args)
                .output()
                .map_err(|e| format!("{}: {e}", bin.display()))
        };
        let root = root.to_string_lossy();
        let mut run = vec!["run", "-d", "--name", id, "--memory", "2G", &root, "--"];
        run.extend_from_slice(args);
        let started = torpor(&run)?;
        if !started.status.success() {
            return Err(String::from_utf8_lossy(&started.stderr).trim().to_string());
        }
        let log = state.path().join(id).join("output.log");
        let deadline = Instant::now() + Duration::from_secs(120);
        let result = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if ready(&text) {
                let stats = torpor(&["stats", id])?;
                let text = String::from_utf8_lossy(&stats.stdout).to_string();
                break testutil::json_field(&text, "pss_bytes")
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or(format!("no pss_bytes in {text}"));
            }
            if Instant::now() > deadline {
                break Err(format!("not ready: {text}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let _ = torpor(&["delete", "--force", id]);
        result
    }
}
