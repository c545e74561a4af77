//! Sandbox-core benchmark: prints a table, asserts nothing about speed.
//!
//! Run with `cargo bench -p torpor --bench core`. Each figure is the median of
//! RUNS runs, with the spread (min - max):
//!
//! - syscall round trip: (wall time of `getpid_loop 20000` - `getpid_loop 0`)
//!   / 20000, beside the bare ring-3 exit round trip that `torpor bench-exit`
//!   measures in the same run, and their ratio;
//! - first-touch page fault: (`touch_pages 64` - `touch_pages 0`) / 16384 pages;
//! - start to first guest instruction (`TORPOR_TIMINGS=1`), and every other
//!   `torpor-timing:` figure torpor prints;
//! - start to first HTTP response of a static server behind `--publish`;
//! - PSS of that idle server sandbox (`/proc/PID/smaps_rollup`).
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
    println!("{:-<92}", "");
    println!("{:<52} {:>12}  {:<20} unit", "metric", "median", "spread");
    println!("{:-<92}", "");
    for r in rows {
        match &r.samples {
            Ok(s) if !s.is_empty() => {
                let min = s.iter().copied().fold(f64::INFINITY, f64::min);
                let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let spread = format!("[{} - {}]", fmt_num(min), fmt_num(max));
                println!(
                    "{:<52} {:>12}  {:<20} {}",
                    r.name,
                    fmt_num(median(s)),
                    spread,
                    r.unit
                );
            }
            Ok(_) => println!("{:<52} {:>12}  {:<20} {}", r.name, "n/a", "", r.unit),
            Err(e) => println!("{:<52} {:>12}  {:<20} {}  ({e})", r.name, "n/a", "", r.unit),
        }
    }
    println!("{:-<92}", "");
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

/// Parses `exit_round_trip_us=N` from `torpor bench-exit`.
fn bench_exit(t: &Torpor) -> Result<f64, String> {
    let out = t.cmd(&["bench-exit"]);
    if out.code() != 0 {
        return Err(format!("bench-exit exit {}", out.code()));
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
    let text =
        std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).map_err(|e| e.to_string())?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix("Pss:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .ok_or_else(|| "no Pss line".into())
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
    let pss = pss_kib(server.pid())?;
    let _ = http_get(addr, "/quit", Duration::from_secs(10));
    let _ = server.terminate(Duration::from_secs(10));
    Ok((first.as_secs_f64() * 1e3, pss))
}

fn main() {
    if !testutil::require_kvm() {
        return;
    }
    let t = Torpor::new(env!("CARGO_BIN_EXE_torpor"));
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

    // Syscall round trip beside the bare exit, measured in the same runs.
    let mut syscall = Vec::new();
    let mut exit = Vec::new();
    let mut exit_err = None;
    let mut sys_err = None;
    for _ in 0..RUNS {
        match per_unit(|n| torpor_wall(&t, root, &getpid, n), GETPIDS, GETPIDS) {
            Ok(v) => syscall.push(v),
            Err(e) => sys_err = Some(e),
        }
        match bench_exit(&t) {
            Ok(v) => exit.push(v),
            Err(e) => exit_err = Some(e),
        }
    }
    let ratio: Vec<f64> = syscall.iter().zip(&exit).map(|(s, e)| s / e).collect();
    let syscall_ok = sys_err.is_none();
    let exit_ok = exit_err.is_none();
    rows.push(row(
        "syscall round trip (getpid loop)",
        "us",
        sys_err.map_or(Ok(syscall), Err),
    ));
    rows.push(row(
        "bare exit round trip (torpor bench-exit)",
        "us",
        exit_err.map_or(Ok(exit), Err),
    ));
    rows.push(row(
        "syscall / bare exit",
        "x",
        if syscall_ok && exit_ok {
            Ok(ratio)
        } else {
            Err("needs both".into())
        },
    ));
    rows.push(row(
        "  native getpid",
        "us",
        sample(|| {
            per_unit(
                |n| native_wall(&getpid_native, root, n),
                NATIVE_GETPIDS,
                NATIVE_GETPIDS,
            )
        }),
    ));

    // First-touch page faults.
    let pages = TOUCH_MIB * 256;
    rows.push(row(
        &format!("first-touch page fault ({TOUCH_MIB} MiB, per 4 KiB page)"),
        "us",
        sample(|| per_unit(|n| torpor_wall(&t, root, &touch, n), TOUCH_MIB, pages)),
    ));
    rows.push(row(
        "  native first touch",
        "us",
        sample(|| per_unit(|n| native_wall(&touch_native, root, n), TOUCH_MIB, pages)),
    ));

    // Start-up timings reported by torpor itself.
    let runs: Vec<Result<BTreeMap<String, f64>, String>> =
        (0..RUNS).map(|_| timings(&t, root, &getpid)).collect();
    match runs.iter().find_map(|r| r.as_ref().err()) {
        Some(e) => rows.push(row(
            "start to first guest instruction",
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
                    "start to first guest instruction",
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
                rows.push(row(&label, "us", Ok(v)));
            }
        }
    }
    rows.push(row(
        "start to exit, busybox true",
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

    // HTTP: cold start to first response, then PSS while idle.
    let mut http_rows = |label: &str, native_prog: Option<&Path>| {
        let results: Vec<Result<(f64, f64), String>> = (0..RUNS)
            .map(|_| {
                catch_unwind(AssertUnwindSafe(|| http_once(&t, root, &http, native_prog)))
                    .unwrap_or_else(|_| Err("panicked".into()))
            })
            .collect();
        let err = results.iter().find_map(|r| r.as_ref().err().cloned());
        let ok: Vec<(f64, f64)> = results.into_iter().filter_map(Result::ok).collect();
        let (first, pss): (Vec<f64>, Vec<f64>) = ok.into_iter().unzip();
        rows.push(row(
            &format!("start to first HTTP response{label}"),
            "ms",
            err.clone().map_or(Ok(first), Err),
        ));
        rows.push(row(
            &format!("PSS of idle HTTP server{label}"),
            "KiB",
            err.map_or(Ok(pss), Err),
        ));
    };
    http_rows("", None);
    http_rows(" (native)", Some(&http_native));

    print_table(&rows);
}
