//! Sandbox-core benchmark: prints a table, asserts nothing about speed.
//!
//! Run with `cargo build --release && cargo bench -p torpor-bench --bench core`. Each figure is the median of
//! RUNS runs, with the spread (min - max), for each platform (`[kvm]` where
//! `/dev/kvm` opens, `[trap]`):
//!
//! - syscall round trip: (wall time of `getpid_loop 20000` - `getpid_loop 0`)
//!   / 20000, beside the platform's bare mechanism measured in the same run
//!   (KVM: the bare ring-3 exit round trip of `torpor-bench exit`; trap: a
//!   SIGSYS trap and return plus a futex hand-off between two processes on one
//!   CPU), their ratio, and KVM's round trip over trap's;
//! - first-touch page fault: (`touch_pages 64` - `touch_pages 0`) / 16384 pages;
//! - start to first guest instruction (`TORPOR_TIMINGS=1`), and every other
//!   `torpor-timing:` figure torpor prints;
//! - start to first HTTP response of a static server behind `--publish`;
//! - PSS of that idle server sandbox (`/proc/PID/smaps_rollup` of the holder and
//!   every process below it: janitor, file broker, and the trap platform's stubs).
//!
//! Native figures for the same programs are shown beside them where that means
//! something. On the development machines KVM is software (shadow paging), so
//! absolute times are far above hardware; ratios are what carry over.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};

use testutil::{free_port, http_get, median, native, Rootfs, Running, Torpor};

const RUNS: usize = 5;
const GETPIDS: u64 = 20_000;
/// Natively a getpid takes well under a microsecond: more calls to beat noise.
const NATIVE_GETPIDS: u64 = 2_000_000;
const TOUCH_MIB: u64 = 64;
const GUEST_PORT: u16 = 8080;

/// One row of the table: a name, a unit, and the samples (or why there are none).
struct Row {
    name: String,
    unit: &'static str,
    samples: Result<Vec<f64>, String>,
}

fn fmt_num(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn print_table(rows: &[Row]) {
    println!();
    println!("torpor core benchmark: median of {RUNS} runs [min - max]");
    println!("{:-<102}", "");
    println!("{:<62} {:>12}  {:<20} unit", "metric", "median", "spread");
    println!("{:-<102}", "");
    for r in rows {
        match &r.samples {
            Ok(s) if !s.is_empty() => {
                let min = s.iter().copied().fold(f64::INFINITY, f64::min);
                let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let spread = format!("[{} - {}]", fmt_num(min), fmt_num(max));
                println!(
                    "{:<62} {:>12}  {:<20} {}",
                    r.name,
                    fmt_num(median(s)),
                    spread,
                    r.unit
                );
            }
            Ok(_) => println!("{:<62} {:>12}  {:<20} {}", r.name, "n/a", "", r.unit),
            Err(e) => println!("{:<62} {:>12}  {:<20} {}  ({e})", r.name, "n/a", "", r.unit),
        }
    }
    println!("{:-<102}", "");
}

/// Runs `f` RUNS times; a panic or error in any run makes the row "n/a".
fn sample(f: impl Fn() -> Result<f64, String>) -> Result<Vec<f64>, String> {
    (0..RUNS)
        .map(|_| match catch_unwind(AssertUnwindSafe(&f)) {
            Ok(r) => r,
            Err(p) => Err(p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panicked".into())
                .lines()
                .next()
                .unwrap_or("")
                .to_owned()),
        })
        .collect()
}

fn row(name: &str, unit: &'static str, samples: Result<Vec<f64>, String>) -> Row {
    Row {
        name: name.into(),
        unit,
        samples,
    }
}

/// Wall time of one `torpor run ROOTFS -- PROGRAM ARG`, which must exit 0.
fn torpor_wall(t: &Torpor, root: &Path, prog: &str, arg: u64) -> Result<Duration, String> {
    let out = t
        .run(root, prog)
        .arg(arg.to_string())
        .host_env("TORPOR_LOG", "off")
        .output();
    if out.code() != 0 {
        return Err(format!(
            "exit {}: {}",
            out.code(),
            out.stderr_str().lines().next().unwrap_or("")
        ));
    }
    Ok(out.elapsed)
}

fn native_wall(prog: &Path, root: &Path, arg: u64) -> Result<Duration, String> {
    let out = native(prog, &[arg.to_string()], root, &[], None);
    if out.code() != 0 {
        return Err(format!("native exit {}", out.code()));
    }
    Ok(out.elapsed)
}

/// (wall(n) - wall(0)) / n in microseconds, using `wall`.
fn per_unit(
    wall: impl Fn(u64) -> Result<Duration, String>,
    n: u64,
    units: u64,
) -> Result<f64, String> {
    let base = wall(0)?;
    let full = wall(n)?;
    Ok((full.as_secs_f64() - base.as_secs_f64()) * 1e6 / units as f64)
}

/// The `torpor-timing: NAME_us=N` lines of one run of `getpid_loop 0`.
fn timings(t: &Torpor, root: &Path, prog: &str) -> Result<BTreeMap<String, f64>, String> {
    let out = t
        .run(root, prog)
        .arg("0")
        .host_env("TORPOR_TIMINGS", "1")
        .host_env("TORPOR_LOG", "off")
        .output();
    if out.code() != 0 {
        return Err(format!("exit {}", out.code()));
    }
    let m: BTreeMap<String, f64> = out
        .stderr_str()
        .lines()
        .filter_map(|l| l.strip_prefix("torpor-timing: "))
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.trim().to_owned(), v.trim().parse().ok()?)))
        .collect();
    if m.is_empty() {
        return Err("no torpor-timing lines".into());
    }
    Ok(m)
}

/// Parses `exit_round_trip_us=N` from `torpor-bench exit`.
fn bench_exit() -> Result<f64, String> {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_torpor-bench"));
    cmd.arg("exit");
    let out = testutil::run_command(cmd, None, testutil::DEFAULT_TIMEOUT);
    if out.code() != 0 {
        return Err(format!("torpor-bench exit: exit {}", out.code()));
    }
    out.stdout_str()
        .lines()
        .chain(out.stderr_str().lines())
        .find_map(|l| {
            l.trim()
                .strip_prefix("exit_round_trip_us=")?
                .trim()
                .parse()
                .ok()
        })
        .ok_or_else(|| "no exit_round_trip_us= line".into())
}

/// Pss (KiB) from /proc/PID/smaps_rollup.
fn pss_kib(pid: u32) -> Result<f64, String> {
    testutil::pss_kib(pid)
        .map(|k| k as f64)
        .ok_or_else(|| format!("no PSS for process {pid}"))
}

/// Polls `addr` until an HTTP response arrives; returns the time since `since`.
fn first_response(
    server: &mut Running,
    addr: SocketAddr,
    since: Instant,
) -> Result<Duration, String> {
    let deadline = since + Duration::from_secs(120);
    loop {
        if let Ok(resp) = http_get(addr, "/", Duration::from_secs(10)) {
            if resp.status == 200 {
                return Ok(since.elapsed());
            }
        }
        if server.has_exited() {
            return Err("server exited".into());
        }
        if Instant::now() > deadline {
            return Err("no response within 120 s".into());
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Starts http_server (under torpor, or natively with `native_prog`), returns
/// (start to first response in ms, idle PSS in KiB).
fn http_once(
    t: &Torpor,
    root: &Path,
    prog: &str,
    native_prog: Option<&Path>,
) -> Result<(f64, f64), String> {
    let port = free_port();
    let started = Instant::now();
    let (mut server, addr) = match native_prog {
        None => {
            let s = t
                .run(root, prog)
                .publish(&format!("127.0.0.1:{port}:{GUEST_PORT}"))
                .arg(GUEST_PORT.to_string())
                .host_env("TORPOR_LOG", "off")
                .spawn();
            (s, SocketAddr::from(([127, 0, 0, 1], port)))
        }
        Some(p) => {
            let mut cmd = std::process::Command::new(p);
            cmd.arg(port.to_string()).current_dir(root);
            (
                Running::spawn(cmd, None),
                SocketAddr::from(([127, 0, 0, 1], port)),
            )
        }
    };
    let first = first_response(&mut server, addr, started)?;
    std::thread::sleep(Duration::from_millis(500)); // idle
    let pss = tree_pss_kib(server.pid())?;
    let _ = http_get(addr, "/quit", Duration::from_secs(10));
    let _ = server.terminate(Duration::from_secs(10));
    Ok((first.as_secs_f64() * 1e3, pss))
}

/// PSS (KiB) of `pid` and every process below it: the holder with its janitor and file
/// broker, and on the trap platform the stub processes, which map the guest pages they use.
/// A process that shares the holder's memory (trap's stub factory) is counted once.
fn tree_pss_kib(pid: u32) -> Result<f64, String> {
    let mut total = pss_kib(pid)?;
    let mut stack = vec![pid];
    while let Some(p) = stack.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for c in children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok())
            {
                if !testutil::same_memory(pid, c) {
                    total += pss_kib(c).unwrap_or(0.0);
                }
                stack.push(c);
            }
        }
    }
    Ok(total)
}

/// The bare mechanism of the trap platform, measured here: one SIGSYS trap and return in a
/// process (µs), and one futex hand-off there and back between two processes on one CPU.
fn trap_mechanism() -> (Vec<f64>, Vec<f64>) {
    let trap: Vec<f64> = (0..RUNS)
        .map(|_| platform_trap::bench::sigsys_trap_ns(20_000) as f64 / 1e3)
        .collect();
    let handoff: Vec<f64> = (0..RUNS)
        .map(|_| platform_trap::bench::futex_handoff_ns(20_000, true) as f64 / 1e3)
        .collect();
    (trap, handoff)
}

fn main() {
    if !testutil::require_kvm() {
        return;
    }
    let t = Torpor::new(testutil::built_torpor_bin());
    let r = Rootfs::new();
    let getpid = r.guest_program("getpid_loop");
    let touch = r.guest_program("touch_pages");
    let http = r.guest_program("http_server");
    let (getpid_native, touch_native, http_native) = (
        testutil::guest_program("getpid_loop"),
        testutil::guest_program("touch_pages"),
        testutil::guest_program("http_server"),
    );
    let root = r.path();
    let mut rows = Vec::new();

    // Native figures, once.
    rows.push(row(
        "native getpid",
        "us",
        sample(|| {
            per_unit(
                |n| native_wall(&getpid_native, root, n),
                NATIVE_GETPIDS,
                NATIVE_GETPIDS,
            )
        }),
    ));
    let pages = TOUCH_MIB * 256;
    rows.push(row(
        "native first-touch page fault",
        "us",
        sample(|| per_unit(|n| native_wall(&touch_native, root, n), TOUCH_MIB, pages)),
    ));

    let mut round_trips: BTreeMap<&str, f64> = BTreeMap::new();
    for platform in testutil::platforms() {
        // The bench is single-threaded here; every torpor it starts inherits it.
        std::env::set_var("TORPOR_PLATFORM", platform);
        let tag = |name: &str| format!("[{platform}] {name}");

        // Syscall round trip beside the platform's bare mechanism, measured in the same run.
        let mut syscall = Vec::new();
        let mut sys_err = None;
        let mut bare = Vec::new();
        let mut bare_err = None;
        let mechanism = if platform == "trap" {
            Some(trap_mechanism())
        } else {
            None
        };
        for i in 0..RUNS {
            match per_unit(|n| torpor_wall(&t, root, &getpid, n), GETPIDS, GETPIDS) {
                Ok(v) => syscall.push(v),
                Err(e) => sys_err = Some(e),
            }
            match &mechanism {
                Some((trap, handoff)) => bare.push(trap[i] + handoff[i]),
                None => match bench_exit() {
                    Ok(v) => bare.push(v),
                    Err(e) => bare_err = Some(e),
                },
            }
        }
        if !syscall.is_empty() {
            round_trips.insert(platform, median(&syscall));
        }
        let ratio: Vec<f64> = syscall.iter().zip(&bare).map(|(s, e)| s / e).collect();
        let both = sys_err.is_none() && bare_err.is_none();
        rows.push(row(
            &tag("syscall round trip (getpid loop)"),
            "us",
            sys_err.map_or(Ok(syscall), Err),
        ));
        let bare_name = if platform == "trap" {
            "bare mechanism: SIGSYS trap + futex hand-off"
        } else {
            "bare mechanism: VM exit round trip (torpor-bench exit)"
        };
        rows.push(row(&tag(bare_name), "us", bare_err.map_or(Ok(bare), Err)));
        if let Some((trap, handoff)) = mechanism {
            rows.push(row(&tag("  SIGSYS trap and return"), "us", Ok(trap)));
            rows.push(row(
                &tag("  futex hand-off between two processes, one CPU"),
                "us",
                Ok(handoff),
            ));
        }
        rows.push(row(
            &tag("syscall / bare mechanism"),
            "x",
            if both {
                Ok(ratio)
            } else {
                Err("needs both".into())
            },
        ));

        // First-touch page faults.
        rows.push(row(
            &tag(&format!(
                "first-touch page fault ({TOUCH_MIB} MiB, per 4 KiB page)"
            )),
            "us",
            sample(|| per_unit(|n| torpor_wall(&t, root, &touch, n), TOUCH_MIB, pages)),
        ));

        // Start-up timings reported by torpor itself.
        let runs: Vec<Result<BTreeMap<String, f64>, String>> =
            (0..RUNS).map(|_| timings(&t, root, &getpid)).collect();
        match runs.iter().find_map(|r| r.as_ref().err()) {
            Some(e) => rows.push(row(
                &tag("start to first guest instruction"),
                "us",
                Err(e.clone()),
            )),
            None => {
                let maps: Vec<&BTreeMap<String, f64>> =
                    runs.iter().filter_map(|r| r.as_ref().ok()).collect();
                let first = "start_to_first_instruction_us";
                let mut names: Vec<&String> = maps[0].keys().collect();
                names.sort_by_key(|n| (n.as_str() != first, n.as_str()));
                if !maps[0].contains_key(first) {
                    rows.push(row(
                        &tag("start to first guest instruction"),
                        "us",
                        Err("not reported".into()),
                    ));
                }
                for name in names {
                    let v: Vec<f64> = maps.iter().filter_map(|m| m.get(name).copied()).collect();
                    let label = if name == first {
                        "start to first guest instruction".to_owned()
                    } else {
                        format!("  timing {}", name.trim_end_matches("_us"))
                    };
                    rows.push(row(&tag(&label), "us", Ok(v)));
                }
            }
        }
        rows.push(row(
            &tag("start to exit, busybox true"),
            "ms",
            sample(|| {
                let out = t
                    .run(root, "/bin/busybox")
                    .arg("true")
                    .host_env("TORPOR_LOG", "off")
                    .output();
                if out.code() != 0 {
                    return Err(format!("exit {}", out.code()));
                }
                Ok(out.elapsed.as_secs_f64() * 1e3)
            }),
        ));
        http_rows(&mut rows, &t, root, &http, &tag(""), None);
    }
    std::env::remove_var("TORPOR_PLATFORM");
    http_rows(&mut rows, &t, root, &http, "(native) ", Some(&http_native));
    if let (Some(kvm), Some(trap)) = (round_trips.get("kvm"), round_trips.get("trap")) {
        rows.push(row(
            "syscall round trip, kvm / trap (medians)",
            "x",
            Ok(vec![kvm / trap]),
        ));
    }

    print_table(&rows);
}

/// HTTP: cold start to first response, then PSS while idle (`prefix` names the platform).
fn http_rows(
    rows: &mut Vec<Row>,
    t: &Torpor,
    root: &Path,
    http: &str,
    prefix: &str,
    native_prog: Option<&Path>,
) {
    let results: Vec<Result<(f64, f64), String>> = (0..RUNS)
        .map(|_| {
            catch_unwind(AssertUnwindSafe(|| http_once(t, root, http, native_prog)))
                .unwrap_or_else(|_| Err("panicked".into()))
        })
        .collect();
    let err = results.iter().find_map(|r| r.as_ref().err().cloned());
    let ok: Vec<(f64, f64)> = results.into_iter().filter_map(Result::ok).collect();
    let (first, pss): (Vec<f64>, Vec<f64>) = ok.into_iter().unzip();
    rows.push(row(
        &format!("{prefix}start to first HTTP response"),
        "ms",
        err.clone().map_or(Ok(first), Err),
    ));
    rows.push(row(
        &format!("{prefix}PSS of idle HTTP server (process tree)"),
        "KiB",
        err.map_or(Ok(pss), Err),
    ));
}
