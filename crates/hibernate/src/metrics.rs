//! Hibernate counters for `torpor stats`: atomics that the deflate path, the userfaultfd
//! handler and the prefetcher bump without locks, and a serialisable snapshot.
//!
//! Three kinds of field:
//! - cumulative since the sandbox started: `faults`, `fault_bytes`, `deflates`, `wakes`;
//! - gauges set at each deflate: `swap_bytes`, `reap_bytes` (bytes now held in the files);
//! - about the last wake, reset by [`HibernateMetrics::begin_wake`]: `prefetched_bytes`,
//!   `prefetched_file_bytes`, `prefetch_us`, `residual_faults` (faults on pages outside the REAP set), and
//!   `last_wake_us` (from wake trigger to vCPUs resumed); `last_deflate_us` likewise for the
//!   last deflate.
//!
//! All accesses are `Relaxed`: each counter is independent, and a snapshot taken during a
//! wake may mix values from before and after an update, which is fine for statistics.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Live hibernate counters of one sandbox.
#[derive(Debug, Default)]
pub struct HibernateMetrics {
    /// Pages faulted in after a hibernate (cumulative).
    pub faults: AtomicU64,
    /// Bytes brought back by faults (cumulative).
    pub fault_bytes: AtomicU64,
    /// Bytes prefetched from the REAP file on the last wake.
    pub prefetched_bytes: AtomicU64,
    /// Bytes of the working set's file pages read ahead on the last wake (`filereap`).
    pub prefetched_file_bytes: AtomicU64,
    /// Bytes in the swap file (set at each deflate).
    pub swap_bytes: AtomicU64,
    /// Bytes in the REAP file (set at each deflate).
    pub reap_bytes: AtomicU64,
    /// Duration of the last deflate, µs.
    pub last_deflate_us: AtomicU64,
    /// Duration of the last wake (trigger to vCPUs running), µs.
    pub last_wake_us: AtomicU64,
    /// Duration of the last REAP prefetch, µs.
    pub prefetch_us: AtomicU64,
    /// Faults since the last wake on pages outside the REAP set.
    pub residual_faults: AtomicU64,
    /// Completed deflates (cumulative).
    pub deflates: AtomicU64,
    /// Completed wakes (cumulative).
    pub wakes: AtomicU64,
}

/// A point-in-time copy of [`HibernateMetrics`], as printed by `torpor stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsSnapshot {
    /// See [`HibernateMetrics::faults`].
    pub faults: u64,
    /// See [`HibernateMetrics::fault_bytes`].
    pub fault_bytes: u64,
    /// See [`HibernateMetrics::prefetched_bytes`].
    pub prefetched_bytes: u64,
    /// See [`HibernateMetrics::prefetched_file_bytes`].
    pub prefetched_file_bytes: u64,
    /// See [`HibernateMetrics::swap_bytes`].
    pub swap_bytes: u64,
    /// See [`HibernateMetrics::reap_bytes`].
    pub reap_bytes: u64,
    /// See [`HibernateMetrics::last_deflate_us`].
    pub last_deflate_us: u64,
    /// See [`HibernateMetrics::last_wake_us`].
    pub last_wake_us: u64,
    /// See [`HibernateMetrics::prefetch_us`].
    pub prefetch_us: u64,
    /// See [`HibernateMetrics::residual_faults`].
    pub residual_faults: u64,
    /// See [`HibernateMetrics::deflates`].
    pub deflates: u64,
    /// See [`HibernateMetrics::wakes`].
    pub wakes: u64,
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl HibernateMetrics {
    /// Zeroed counters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one fault that brought back `bytes`; `outside_reap_set` marks a residual fault.
    pub fn record_fault(&self, bytes: u64, outside_reap_set: bool) {
        self.faults.fetch_add(1, Relaxed);
        self.fault_bytes.fetch_add(bytes, Relaxed);
        if outside_reap_set {
            self.residual_faults.fetch_add(1, Relaxed);
        }
    }

    /// Records a finished deflate: its duration and what the files now hold.
    pub fn record_deflate(&self, took: Duration, swap_bytes: u64, reap_bytes: u64) {
        self.last_deflate_us.store(us(took), Relaxed);
        self.swap_bytes.store(swap_bytes, Relaxed);
        self.reap_bytes.store(reap_bytes, Relaxed);
        self.deflates.fetch_add(1, Relaxed);
    }

    /// Resets the per-wake fields at the start of a wake.
    pub fn begin_wake(&self) {
        self.prefetched_bytes.store(0, Relaxed);
        self.prefetched_file_bytes.store(0, Relaxed);
        self.prefetch_us.store(0, Relaxed);
        self.residual_faults.store(0, Relaxed);
    }

    /// Records the REAP prefetch of this wake: `bytes` from the REAP files, `file_bytes` of
    /// file pages read ahead.
    pub fn record_prefetch(&self, bytes: u64, file_bytes: u64, took: Duration) {
        self.prefetched_bytes.store(bytes, Relaxed);
        self.prefetched_file_bytes.store(file_bytes, Relaxed);
        self.prefetch_us.store(us(took), Relaxed);
    }

    /// Records a finished wake (trigger to vCPUs resumed).
    pub fn record_wake(&self, took: Duration) {
        self.last_wake_us.store(us(took), Relaxed);
        self.wakes.fetch_add(1, Relaxed);
    }

    /// Copies every counter.
    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            faults: self.faults.load(Relaxed),
            fault_bytes: self.fault_bytes.load(Relaxed),
            prefetched_bytes: self.prefetched_bytes.load(Relaxed),
            prefetched_file_bytes: self.prefetched_file_bytes.load(Relaxed),
            swap_bytes: self.swap_bytes.load(Relaxed),
            reap_bytes: self.reap_bytes.load(Relaxed),
            last_deflate_us: self.last_deflate_us.load(Relaxed),
            last_wake_us: self.last_wake_us.load(Relaxed),
            prefetch_us: self.prefetch_us.load(Relaxed),
            residual_faults: self.residual_faults.load(Relaxed),
            deflates: self.deflates.load(Relaxed),
            wakes: self.wakes.load(Relaxed),
        }
    }
}

impl MetricsSnapshot {
    /// As a JSON value (fields named as in `torpor stats`).
    pub fn to_json(&self) -> serde_json::Value {
        // Serialising a struct of integers cannot fail.
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn lifecycle_and_json() {
        let m = HibernateMetrics::new();
        m.record_deflate(Duration::from_micros(1500), 40960, 8192);
        m.begin_wake();
        m.record_prefetch(8192, 4096, Duration::from_micros(300));
        m.record_fault(4096, true);
        m.record_fault(4096, false);
        m.record_wake(Duration::from_millis(2));
        let s = m.snapshot();
        assert_eq!(
            s,
            MetricsSnapshot {
                faults: 2,
                fault_bytes: 8192,
                prefetched_bytes: 8192,
                prefetched_file_bytes: 4096,
                swap_bytes: 40960,
                reap_bytes: 8192,
                last_deflate_us: 1500,
                last_wake_us: 2000,
                prefetch_us: 300,
                residual_faults: 1,
                deflates: 1,
                wakes: 1,
            }
        );
        // The next wake resets only the per-wake fields.
        m.begin_wake();
        let s2 = m.snapshot();
        assert_eq!(
            (
                s2.prefetched_bytes,
                s2.prefetched_file_bytes,
                s2.prefetch_us,
                s2.residual_faults
            ),
            (0, 0, 0, 0)
        );
        assert_eq!(
            (s2.faults, s2.swap_bytes, s2.last_wake_us),
            (2, 40960, 2000)
        );
        let j = s.to_json();
        for k in [
            "faults",
            "fault_bytes",
            "prefetched_bytes",
            "prefetched_file_bytes",
            "swap_bytes",
            "reap_bytes",
            "last_deflate_us",
            "last_wake_us",
            "prefetch_us",
            "residual_faults",
        ] {
            assert!(j[k].is_u64(), "{k}");
        }
        assert_eq!(j["residual_faults"], 1);
        let back: MetricsSnapshot = serde_json::from_value(j).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn concurrent_faults_all_count() {
        let m = Arc::new(HibernateMetrics::new());
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        m.record_fault(4096, false);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(m.snapshot().faults, 40_000);
        assert_eq!(m.snapshot().fault_bytes, 40_000 * 4096);
    }

    #[test]
    fn huge_durations_saturate() {
        let m = HibernateMetrics::new();
        m.record_wake(Duration::MAX);
        assert_eq!(m.snapshot().last_wake_us, u64::MAX);
    }
}
