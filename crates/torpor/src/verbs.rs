//! The sandbox verbs that talk to a running sandbox through its control socket:
//! `hibernate`, `wake`, `dormant`, `kill`, `state`, `stats`, `list`, `delete`.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::control::{call, Request};
use crate::statedir;

const TIMEOUT: Duration = Duration::from_secs(60);

/// Lines of a gone sandbox's output log quoted in the error about it.
const OUTPUT_LINES: usize = 20;

pub(crate) fn dir(id: &str) -> Result<std::path::PathBuf> {
    let d = statedir::dir_of(id)?;
    if !d.is_dir() {
        bail!("sandbox {id:?} does not exist");
    }
    if !statedir::owner_alive(&d) {
        if crate::oci::state::is_oci(&d) {
            bail!("container {id:?} is not running (its state stays until delete)");
        }
        let err = std::fs::read_to_string(d.join("error")).unwrap_or_default();
        // Without an error of its own, what the holder said last goes with the news: the
        // directory, its log with it, is removed now.
        let said = if err.is_empty() {
            statedir::output_tail(&d, OUTPUT_LINES)
                .map(|t| format!("\nits last output:\n{t}"))
                .unwrap_or_default()
        } else {
            String::new()
        };
        let _ = std::fs::remove_dir_all(&d);
        if err.is_empty() {
            bail!("sandbox {id:?} is gone (its process exited); its state was removed{said}");
        }
        bail!("sandbox {id:?} stopped with an error: {}", err.trim());
    }
    Ok(d)
}

fn print(v: &serde_json::Value) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// `torpor hibernate [--wait D] [--compact] ID`.
pub fn hibernate(id: &str, wait: Duration, compact: bool) -> Result<u8> {
    let req = Request::Hibernate {
        wait_ms: Some(wait.as_millis() as u64),
        compact,
    };
    let v = call(&dir(id)?, &req, TIMEOUT + wait)?;
    print(&v)?;
    Ok(0)
}

/// `torpor wake ID`.
pub fn wake(id: &str) -> Result<u8> {
    call(&dir(id)?, &Request::Wake, TIMEOUT)?;
    Ok(0)
}

/// `torpor dormant ID`: asks the holder to go dormant and waits until the dormant process
/// answers.
///
/// # Errors
/// The sandbox does not exist, refuses (a state or a platform that cannot go dormant), or
/// its dormant process does not answer.
pub fn dormant(id: &str) -> Result<u8> {
    let dir = dir(id)?;
    call(&dir, &Request::Dormant, std::time::Duration::from_secs(120))?;
    // The holder answers before its exec: the dormant process answers `state` once it runs.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let st = call(&dir, &Request::State, std::time::Duration::from_secs(10));
        if let Ok(v) = &st {
            if v.get("status").and_then(|s| s.as_str()) == Some("dormant") {
                return Ok(0);
            }
        }
        if std::time::Instant::now() >= deadline {
            bail!("sandbox {id:?} did not become dormant: {st:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Parses `SIGSTOP`, `STOP`, `stop` or `19`.
pub fn parse_signal(s: &str) -> Result<i32> {
    if let Ok(n) = s.parse::<i32>() {
        if (1..=64).contains(&n) {
            return Ok(n);
        }
        bail!("invalid signal number {n}");
    }
    let name = s.to_ascii_uppercase();
    let name = name.strip_prefix("SIG").unwrap_or(&name);
    let n = match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        "CONT" => libc::SIGCONT,
        "STOP" => libc::SIGSTOP,
        "TSTP" => libc::SIGTSTP,
        "ALRM" => libc::SIGALRM,
        "WINCH" => libc::SIGWINCH,
        _ => bail!("unknown signal {s:?}"),
    };
    Ok(n)
}

/// `torpor kill [--all] ID SIGNAL`: SIGSTOP hibernates, SIGCONT wakes, others go to the
/// application. A container of the OCI form follows runc ([`crate::oci::kill`]).
pub fn kill(id: &str, signal: &str, all: bool) -> Result<u8> {
    let signal = parse_signal(signal)?;
    if crate::oci::state::is_oci(&statedir::dir_of(id)?) {
        return crate::oci::kill(id, signal, all);
    }
    call(&dir(id)?, &Request::Kill { signal }, TIMEOUT)?;
    Ok(0)
}

/// `torpor state ID`.
pub fn state(id: &str) -> Result<u8> {
    let d = statedir::dir_of(id)?;
    if crate::oci::state::is_oci(&d) {
        print(&crate::oci::state_json(id)?)?;
        return Ok(0);
    }
    print(&call(&dir(id)?, &Request::State, TIMEOUT)?)?;
    Ok(0)
}

/// `torpor stats ID`, or `torpor stats --prometheus [ID]`.
pub fn stats(id: Option<&str>, prometheus: bool) -> Result<u8> {
    if !prometheus {
        let id = id.context("a sandbox ID is needed (or --prometheus for all of them)")?;
        let mut v = call(&dir(id)?, &Request::Stats, TIMEOUT)?;
        crate::dormancy::with_own_figures(&mut v);
        with_platform(&mut v);
        with_helpers(&mut v);
        println!("{}", serde_json::to_string(&v)?);
        return Ok(0);
    }
    let ids = match id {
        Some(id) => vec![id.to_string()],
        None => statedir::list_ids(),
    };
    let mut answered = Vec::new();
    for id in ids {
        let d = statedir::dir_of(&id)?;
        match call(&d, &Request::Stats, Duration::from_secs(5)) {
            Ok(mut v) => {
                crate::dormancy::with_own_figures(&mut v);
                with_platform(&mut v);
                answered.push((id, v))
            }
            // One sandbox gone or stuck does not hide the others from the scraper.
            Err(e) if id_is_listed(&id) => tracing::warn!("{id}: {e:#}"),
            Err(e) => return Err(e),
        }
    }
    print!("{}", crate::overview::prometheus(&answered));
    Ok(0)
}

/// The platform's processes a sandbox's stats list under `field`: `platform_pids` (the trap
/// platform's stubs, with memory of their own) or `platform_shared_pids` (its stub factory,
/// which shares the holder's).
fn pids_in(v: &serde_json::Value, field: &str) -> Vec<u32> {
    v.get(field)
        .and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(serde_json::Value::as_u64)
                .map(|p| p as u32)
                .collect()
        })
        .unwrap_or_default()
}

/// Adds the PSS and RSS of the platform's processes to a sandbox's `pss_bytes` and
/// `rss_bytes`: the trap platform's stubs map pages of guest memory (their PSS is their share
/// of those), and their figures are readable here but not to the holder (they are not
/// dumpable).
fn with_platform(v: &mut serde_json::Value) {
    let (mut pss, mut rss) = (0, 0);
    for p in pids_in(v, "platform_pids") {
        let (ps, rs) = crate::procfs::pss_rss(p).unwrap_or((0, 0));
        pss += ps;
        rss += rs;
    }
    for (field, add) in [("pss_bytes", pss), ("rss_bytes", rss)] {
        if let Some(n) = v.get(field).and_then(serde_json::Value::as_u64) {
            v[field] = (n + add).into();
        }
    }
    if let Some(o) = v.as_object_mut() {
        o.insert("platform_pss_bytes".into(), pss.into());
    }
}

/// Adds `helpers_pss_bytes` to a sandbox's stats: its holder's child processes (the janitor,
/// the file broker), which the holder cannot read itself (a root holder's broker is not
/// dumpable).
fn with_helpers(v: &mut serde_json::Value) {
    if let Some(pid) = v.get("pid").and_then(serde_json::Value::as_u64) {
        // The platform's processes: the trap stubs are in `pss_bytes` already, the stub
        // factory's memory is the holder's.
        let mut platform = pids_in(v, "platform_pids");
        platform.extend(pids_in(v, "platform_shared_pids"));
        let helpers = crate::procfs::children_pss(pid as u32, &platform);
        if let Some(o) = v.as_object_mut() {
            o.insert("helpers_pss_bytes".into(), helpers.into());
        }
    }
}

fn id_is_listed(id: &str) -> bool {
    statedir::list_ids().iter().any(|i| i == id)
}

/// `torpor list [--watch [SECONDS]]`.
pub fn list(watch: Option<u32>) -> Result<u8> {
    let Some(every) = watch else {
        return list_once();
    };
    loop {
        // Clear the screen and go home, as top does, then the table and the time.
        print!("\x1b[H\x1b[2J");
        list_once()?;
        println!(
            "\n(every {every} s; {} sandboxes; Ctrl-C to stop)",
            statedir::list_ids().len()
        );
        std::thread::sleep(Duration::from_secs(u64::from(every)));
    }
}

fn list_once() -> Result<u8> {
    statedir::cleanup_orphans(&statedir::base_dir());
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let mut rows = Vec::new();
    for id in statedir::list_ids() {
        let Ok(d) = statedir::dir_of(&id) else {
            continue;
        };
        let row = match call(&d, &Request::Stats, Duration::from_secs(5)) {
            Ok(v) => crate::overview::Row::from_stats(&id, &v, now_us),
            Err(_) => {
                crate::overview::Row::unreachable(&id, statedir::read_pid(&d).map(|p| p as u64))
            }
        };
        rows.push(row);
    }
    print!("{}", crate::overview::table(&rows));
    Ok(0)
}

/// `torpor delete [--force] ID`. With `--force`, a sandbox that does not exist is not an
/// error (as runc: engines clean up after containers that may already be gone).
pub fn delete(id: &str, force: bool) -> Result<u8> {
    let d = statedir::dir_of(id)?;
    if !d.is_dir() {
        if force {
            return Ok(0);
        }
        bail!("sandbox {id:?} does not exist");
    }
    let pid = statedir::read_pid(&d);
    let cgroup = crate::oci::state::Record::load(&d).and_then(|r| r.cgroups_path);
    if statedir::owner_alive(&d) {
        let status = match call(&d, &Request::State, Duration::from_secs(10)) {
            Ok(st) => st["status"].as_str().unwrap_or("").to_string(),
            // It ended between the two looks: nothing is running any more.
            Err(_) if !statedir::owner_alive(&d) => "stopped".to_string(),
            Err(e) => return Err(e).context("asking the sandbox its state"),
        };
        if status != "stopped" && !force {
            bail!("sandbox {id:?} is {status}: stop it first, or use delete --force");
        }
        // The holder ends as it deletes: if it ended before its answer was written (its
        // sandbox stopping at that moment), the wait below still makes sure it is gone.
        if let Err(e) = call(&d, &Request::Delete, Duration::from_secs(10)) {
            tracing::debug!(
                "delete {id}: no answer from the holder ({e:#}); waiting for it to end"
            );
        }
        let start = Instant::now();
        // A dormant sandbox's process ends at once, leaving the directory to this verb.
        while d.exists()
            && start.elapsed() < Duration::from_secs(10)
            && pid.is_none_or(statedir::pid_alive)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        if d.exists() {
            if let Some(pid) = pid {
                // SAFETY: killing the sandbox's own holder process, recorded in its pid file.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
    // The holder removes its directory (swap and REAP files included) when it ends; make sure.
    let start = Instant::now();
    while let Some(p) = pid {
        if !statedir::pid_alive(p) || start.elapsed() > Duration::from_secs(5) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = std::fs::remove_dir_all(&d);
    // An OCI container's cgroup (its holder has left it by now).
    if let Some(path) = cgroup {
        for w in crate::oci::cgroup::remove(&path) {
            tracing::warn!("{w}");
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals() {
        assert_eq!(parse_signal("SIGSTOP").unwrap(), libc::SIGSTOP);
        assert_eq!(parse_signal("cont").unwrap(), libc::SIGCONT);
        assert_eq!(parse_signal("9").unwrap(), 9);
        assert!(parse_signal("0").is_err());
        assert!(parse_signal("SIGFOO").is_err());
    }
}
