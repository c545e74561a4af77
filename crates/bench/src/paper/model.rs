//! What `torpor-bench paper` measures: raw samples per workload and metric, and their
//! summaries. Latencies are in milliseconds, memory in bytes.

use std::collections::BTreeMap;

/// One measured quantity of a workload (the paper's Figures 6 and 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Metric {
    /// Runtime launch to the first response, application start-up included (ms).
    ColdMs,
    /// Request latency on an initialised, idle sandbox (ms).
    HotMs,
    /// Request latency of the same server run natively (in a chroot of its root), its
    /// requests taken in turn with the sandbox's hot ones (ms).
    NativeHotMs,
    /// First request after a hibernate, pages coming back by page faults (ms).
    FaultWakeMs,
    /// First request after a hibernate with a recorded working set prefetched (REAP) (ms).
    ReapWakeMs,
    /// Request latency on a woken sandbox, after its first request (ms).
    WokenMs,
    /// Launch of a clone of a warmed-up sandbox's checkpoint (`torpor run --from`) to its
    /// first response (ms).
    CloneMs,
    /// PSS of one hot sandbox, with the other instances running (bytes).
    PssHot,
    /// PSS of one hibernated sandbox (bytes).
    PssHibernated,
    /// PSS of one woken sandbox after it served requests (bytes).
    PssWoken,
}

impl Metric {
    /// Every metric, in report order.
    pub const ALL: [Metric; 10] = [
        Metric::ColdMs,
        Metric::HotMs,
        Metric::NativeHotMs,
        Metric::FaultWakeMs,
        Metric::ReapWakeMs,
        Metric::WokenMs,
        Metric::CloneMs,
        Metric::PssHot,
        Metric::PssHibernated,
        Metric::PssWoken,
    ];

    /// Column name in the CSV files.
    pub fn key(self) -> &'static str {
        match self {
            Metric::ColdMs => "cold_ms",
            Metric::HotMs => "hot_ms",
            Metric::NativeHotMs => "native_hot_ms",
            Metric::FaultWakeMs => "fault_wake_ms",
            Metric::ReapWakeMs => "reap_wake_ms",
            Metric::WokenMs => "woken_ms",
            Metric::CloneMs => "clone_ms",
            Metric::PssHot => "pss_hot_bytes",
            Metric::PssHibernated => "pss_hibernated_bytes",
            Metric::PssWoken => "pss_woken_bytes",
        }
    }

    /// Whether the metric is a latency (ms) rather than memory (bytes).
    pub fn is_latency(self) -> bool {
        !matches!(
            self,
            Metric::PssHot | Metric::PssHibernated | Metric::PssWoken
        )
    }
}

/// Median and spread of a metric's samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Median.
    pub median: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
}

impl Summary {
    /// The summary of `samples`, or `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Summary {
            n,
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// The `q` quantile of `samples` (nearest rank; failed ones, NaN, left out), NaN of none.
pub fn quantile(samples: &[f64], q: f64) -> f64 {
    let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return f64::NAN;
    }
    let i = ((s.len() as f64 * q).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

/// The lines of a `workload,kind,ms` samples file: for each workload, each kind's samples.
pub fn samples_csv<'a>(rows: impl IntoIterator<Item = (&'a str, &'a str, &'a [f64])>) -> String {
    let mut csv = String::from("workload,kind,ms\n");
    for (label, kind, v) in rows {
        for x in v {
            csv.push_str(&format!("{label},{kind},{x:.3}\n"));
        }
    }
    csv
}

/// The results of one workload.
#[derive(Clone, Debug, Default)]
pub struct WorkloadResult {
    /// Short name (`python`, `image-large`…), used in file names and CSV rows.
    pub name: String,
    /// Label for tables and plots (`Python hello`, `Image 2.6 MB`…).
    pub label: String,
    /// Samples per metric, in the order taken.
    pub samples: BTreeMap<Metric, Vec<f64>>,
    /// Problems met while measuring (a metric may then be missing).
    pub errors: Vec<String>,
    /// Sandboxes that failed to start and were started again (the failure, for the report).
    pub retries: Vec<String>,
}

impl WorkloadResult {
    /// Adds a sample.
    pub fn push(&mut self, m: Metric, v: f64) {
        self.samples.entry(m).or_default().push(v);
    }

    /// The summary of a metric, if it was measured.
    pub fn summary(&self, m: Metric) -> Option<Summary> {
        self.samples.get(&m).and_then(|s| Summary::of(s))
    }

    /// Median of a metric.
    pub fn median(&self, m: Metric) -> Option<f64> {
        self.summary(m).map(|s| s.median)
    }

    /// Ratio of two medians (`a / b`), if both exist and `b` is not zero.
    pub fn ratio(&self, a: Metric, b: Metric) -> Option<f64> {
        match (self.median(a), self.median(b)) {
            (Some(x), Some(y)) if y != 0.0 => Some(x / y),
            _ => None,
        }
    }
}

/// How the run was made (printed in the report so every number can be traced).
#[derive(Clone, Debug, Default)]
pub struct RunInfo {
    /// The command line.
    pub command: String,
    /// Whether `--quick` was given.
    pub quick: bool,
    /// Repetitions of each latency measurement.
    pub reps: usize,
    /// Instances running for the PSS measurement.
    pub instances: usize,
    /// UTC date and time of the start (RFC 3339).
    pub started: String,
    /// Wall time of the whole run, in seconds.
    pub took_s: f64,
    /// Host description (kernel, CPU count, KVM module).
    pub host: String,
    /// torpor's version and git commit, if known.
    pub version: String,
    /// Notes on the method (what is evicted from the page cache before wakes, etc.).
    pub notes: Vec<String>,
    /// The platform the sandboxes ran on (`kvm`, `trap`).
    pub platform: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries() {
        assert_eq!(Summary::of(&[]), None);
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (3, 2.0, 1.0, 3.0));
        assert_eq!(Summary::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert_eq!(Summary::of(&[f64::NAN, 1.0]).unwrap().n, 1);
    }

    #[test]
    fn ratios() {
        let mut w = WorkloadResult::default();
        w.push(Metric::PssHot, 100.0);
        w.push(Metric::PssHibernated, 10.0);
        assert_eq!(w.ratio(Metric::PssHibernated, Metric::PssHot), Some(0.1));
        assert_eq!(w.ratio(Metric::PssWoken, Metric::PssHot), None);
    }
}
