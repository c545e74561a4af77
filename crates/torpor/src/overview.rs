//! Many sandboxes at a glance: the table of `torpor list` (state, idle time, memory, swap,
//! wakes) and the Prometheus text format of `torpor stats --prometheus`, both built from the
//! JSON each sandbox's `stats` answers.

use std::fmt::Write as _;

use serde_json::Value;

/// Bytes per MiB.
const MIB: f64 = 1024.0 * 1024.0;

/// One sandbox in the table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// ID.
    pub id: String,
    /// Its state (`hot`, `hibernated`…), or why it is unknown.
    pub state: String,
    /// Holder pid.
    pub pid: Option<u64>,
    /// How long it has been in its state, when that state is an idle one (µs).
    pub idle_us: Option<u64>,
    /// PSS of the holder (bytes).
    pub pss: Option<u64>,
    /// Bytes of its swap and REAP files.
    pub swap: Option<u64>,
    /// Wakes so far.
    pub wakes: Option<u64>,
}

impl Row {
    /// The row of a sandbox whose `stats` answered `v`, at `now_us` (µs since the epoch).
    pub fn from_stats(id: &str, v: &Value, now_us: u64) -> Row {
        let num = |k: &str| v.get(k).and_then(Value::as_u64);
        let state = v
            .get("hibernate_state")
            .or_else(|| v.get("state"))
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string();
        let idle = matches!(state.as_str(), "hot" | "woken" | "hibernated");
        Row {
            id: id.to_string(),
            pid: num("pid"),
            idle_us: num("state_since_unix_us")
                .filter(|_| idle)
                .map(|since| now_us.saturating_sub(since)),
            pss: num("pss_bytes"),
            swap: Some(num("swap_bytes").unwrap_or(0) + num("reap_bytes").unwrap_or(0)),
            wakes: num("wakes"),
            state,
        }
    }

    /// A sandbox that did not answer: only what its state directory says.
    pub fn unreachable(id: &str, pid: Option<u64>) -> Row {
        Row {
            id: id.to_string(),
            state: "unreachable".into(),
            pid,
            idle_us: None,
            pss: None,
            swap: None,
            wakes: None,
        }
    }
}

/// `12s`, `3m05s`, `2h10m`.
fn duration(us: u64) -> String {
    let s = us / 1_000_000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / MIB)
}

/// The table `torpor list` prints.
pub fn table(rows: &[Row]) -> String {
    let mut s = format!(
        "{:<24} {:<18} {:>8} {:>8} {:>9} {:>9} {:>6}\n",
        "ID", "STATE", "PID", "IDLE", "PSS MiB", "SWAP MiB", "WAKES"
    );
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for r in rows {
        let _ = writeln!(
            s,
            "{:<24} {:<18} {:>8} {:>8} {:>9} {:>9} {:>6}",
            r.id,
            r.state,
            opt(r.pid.map(|p| p.to_string())),
            opt(r.idle_us.map(duration)),
            opt(r.pss.map(mib)),
            opt(r.swap.map(mib)),
            opt(r.wakes.map(|w| w.to_string())),
        );
    }
    s
}

/// One metric of the Prometheus export: name, type, help, the `stats` field it comes from and
/// the factor applied.
const METRICS: [(&str, &str, &str, &str, f64); 9] = [
    (
        "torpor_pss_bytes",
        "gauge",
        "Proportional set size of the sandbox's holder process.",
        "pss_bytes",
        1.0,
    ),
    (
        "torpor_rss_bytes",
        "gauge",
        "Resident set size of the sandbox's holder process.",
        "rss_bytes",
        1.0,
    ),
    (
        "torpor_swap_bytes",
        "gauge",
        "Bytes of the sandbox's swap files.",
        "swap_bytes",
        1.0,
    ),
    (
        "torpor_reap_bytes",
        "gauge",
        "Bytes of the sandbox's REAP (working set) files.",
        "reap_bytes",
        1.0,
    ),
    (
        "torpor_cpu_seconds_total",
        "counter",
        "CPU time used by the sandbox's holder process.",
        "cpu_time_us",
        1e-6,
    ),
    (
        "torpor_wakes_total",
        "counter",
        "Wakes from hibernation.",
        "wakes",
        1.0,
    ),
    (
        "torpor_deflates_total",
        "counter",
        "Deflates (hibernations).",
        "deflates",
        1.0,
    ),
    (
        "torpor_page_faults_total",
        "counter",
        "Pages brought back by userfaultfd after a wake.",
        "faults",
        1.0,
    ),
    (
        "torpor_last_wake_seconds",
        "gauge",
        "Duration of the last wake.",
        "last_wake_us",
        1e-6,
    ),
];

/// The Prometheus text exposition format (version 0.0.4) of the sandboxes whose `stats`
/// answered `sandboxes` (ID, JSON): each metric once with its HELP and TYPE, one sample per
/// sandbox labelled by `id`, and `torpor_state` with value 1 for each sandbox's state.
pub fn prometheus(sandboxes: &[(String, Value)]) -> String {
    let mut s = String::new();
    for (name, kind, help, field, factor) in METRICS {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (id, v) in sandboxes {
            if let Some(x) = v.get(field).and_then(Value::as_f64) {
                let _ = writeln!(s, "{name}{{id=\"{}\"}} {}", label(id), x * factor);
            }
        }
    }
    let _ = writeln!(
        s,
        "# HELP torpor_state The sandbox's state (1 for the state it is in).\n\
         # TYPE torpor_state gauge"
    );
    for (id, v) in sandboxes {
        let state = v.get("state").and_then(Value::as_str).unwrap_or("unknown");
        let _ = writeln!(
            s,
            "torpor_state{{id=\"{}\",state=\"{}\"}} 1",
            label(id),
            label(state)
        );
    }
    s
}

/// A label value escaped as the text format asks (backslash, quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats() -> Value {
        serde_json::json!({
            "state": "hibernated", "pid": 42, "pss_bytes": 3 * 1024 * 1024,
            "rss_bytes": 6_000_000, "swap_bytes": 1024 * 1024, "reap_bytes": 1024 * 1024,
            "cpu_time_us": 1_500_000, "wakes": 2, "deflates": 3, "faults": 7,
            "last_wake_us": 2500, "state_since_unix_us": 1_000_000u64
        })
    }

    #[test]
    fn rows_and_table() {
        let r = Row::from_stats("fn-1", &stats(), 1_000_000 + 125_000_000);
        assert_eq!(r.idle_us, Some(125_000_000));
        assert_eq!(r.swap, Some(2 * 1024 * 1024));
        let t = table(&[r, Row::unreachable("gone", Some(7))]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("ID") && lines[0].contains("WAKES"));
        assert!(
            lines[1].contains("hibernated") && lines[1].contains("2m05s"),
            "{t}"
        );
        assert!(lines[1].contains("3.0") && lines[1].contains("2.0"), "{t}");
        assert!(
            lines[2].contains("unreachable") && lines[2].contains(" - "),
            "{t}"
        );
        // A busy sandbox has no idle time.
        let mut busy = stats();
        busy["state"] = "running".into();
        assert_eq!(Row::from_stats("b", &busy, 5_000_000).idle_us, None);
        assert_eq!(duration(7_300_000_000), "2h01m");
    }

    #[test]
    fn prometheus_text() {
        let text = prometheus(&[("fn \"1\"".into(), stats())]);
        assert!(
            text.contains(
                "# TYPE torpor_wakes_total counter\ntorpor_wakes_total{id=\"fn \\\"1\\\"\"} 2\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("torpor_cpu_seconds_total{id=\"fn \\\"1\\\"\"} 1.5\n"),
            "{text}"
        );
        assert!(text.contains("torpor_state{id=\"fn \\\"1\\\"\",state=\"hibernated\"} 1\n"));
        // Every sample line is NAME{labels} VALUE.
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = l.rsplit_once(' ').expect("a value");
            assert!(value.parse::<f64>().is_ok(), "{l}");
        }
    }
}
