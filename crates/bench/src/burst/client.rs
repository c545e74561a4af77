//! The burst client: `n` connections opened at the same instant, one `GET` each, every
//! latency measured from that instant; and the host's listen-overflow counter.

use std::net::SocketAddr;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::paper::http;

/// Stack of a client thread (a thousand of them run at once).
const CLIENT_STACK: usize = 256 << 10;

/// What one burst gave.
#[derive(Clone, Debug, Default)]
pub struct Burst {
    /// Connections opened.
    pub n: usize,
    /// Latencies of the correct answers (ms, sorted).
    pub answered_ms: Vec<f64>,
    /// Connections not answered correctly within the timeout.
    pub failures: usize,
    /// The first few failures' messages.
    pub errors: Vec<String>,
    /// Rise of the host's `TcpExtListenOverflows` during the burst.
    pub overflows: u64,
}

impl Burst {
    /// The `q` quantile (0..=1) of the latencies, counting a failure as slower than any
    /// answer (so that p99 of a burst with 2 % failures is infinite).
    pub fn quantile(&self, q: f64) -> f64 {
        if self.n == 0 {
            return f64::NAN;
        }
        let rank = ((q * self.n as f64).ceil() as usize).clamp(1, self.n);
        self.answered_ms
            .get(rank - 1)
            .copied()
            .unwrap_or(f64::INFINITY)
    }

    /// The slowest answer (infinite if any connection failed).
    pub fn max(&self) -> f64 {
        self.quantile(1.0)
    }
}

/// One target of a burst: where to connect, what to ask, what a correct answer contains.
#[derive(Clone, Debug)]
pub struct Target {
    /// Address.
    pub addr: SocketAddr,
    /// Request path.
    pub path: &'static str,
    /// A string every correct answer contains.
    pub expect: &'static str,
}

/// Opens `n` connections to `target` at once (one thread each, released together), each
/// sending one `GET` and waiting up to `timeout` for its answer.
pub fn burst(target: &Target, n: usize, timeout: Duration) -> Burst {
    burst_many(&vec![target.clone(); n], timeout)
}

/// One connection to each of `targets`, all opened at once (a wake of many sandboxes).
pub fn burst_many(targets: &[Target], timeout: Duration) -> Burst {
    let n = targets.len();
    let gate = Arc::new(Barrier::new(n + 1));
    let overflows_before = listen_overflows();
    let mut threads = Vec::with_capacity(n);
    let mut spawn_failures = Vec::new();
    for t in targets {
        let t = t.clone();
        let gate = gate.clone();
        let spawned = std::thread::Builder::new()
            .stack_size(CLIENT_STACK)
            .spawn(move || {
                gate.wait();
                let start = Instant::now();
                http::timed_get(t.addr, t.path, t.expect, timeout)
                    .map(|_| start.elapsed().as_secs_f64() * 1e3)
                    .map_err(|e| format!("{e:#}"))
            });
        match spawned {
            Ok(h) => threads.push(h),
            Err(e) => spawn_failures.push(format!("cannot start a client thread: {e}")),
        }
    }
    // Threads that could not start would leave the others waiting at the gate forever.
    if !spawn_failures.is_empty() {
        for _ in 0..spawn_failures.len() {
            let gate = gate.clone();
            std::thread::spawn(move || gate.wait());
        }
    }
    gate.wait();
    let mut out = Burst {
        n,
        failures: spawn_failures.len(),
        errors: spawn_failures,
        ..Burst::default()
    };
    for h in threads {
        match h.join() {
            Ok(Ok(ms)) => out.answered_ms.push(ms),
            Ok(Err(e)) => {
                out.failures += 1;
                if out.errors.len() < 5 {
                    out.errors.push(e);
                }
            }
            Err(_) => out.failures += 1,
        }
    }
    out.answered_ms.sort_by(f64::total_cmp);
    out.overflows = listen_overflows().saturating_sub(overflows_before);
    out
}

/// The host's `TcpExt: ListenOverflows` counter (`/proc/net/netstat`, which `nstat` reads):
/// connections dropped because a listening socket's accept queue was full.
pub fn listen_overflows() -> u64 {
    let text = std::fs::read_to_string("/proc/net/netstat").unwrap_or_default();
    parse_netstat(&text, "TcpExt:", "ListenOverflows").unwrap_or(0)
}

/// A counter of `/proc/net/netstat`'s text: a line of names after `prefix`, then one of values.
fn parse_netstat(text: &str, prefix: &str, name: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(prefix));
    let (names, values) = (lines.next()?, lines.next()?);
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.parse().ok())
}

/// Raises the soft limit of open files to the hard limit: a burst of a thousand connections
/// needs more than the usual 1024.
pub fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid resource and a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_count_failures_as_slowest() {
        let b = Burst {
            n: 4,
            answered_ms: vec![1.0, 2.0, 3.0],
            failures: 1,
            ..Burst::default()
        };
        assert_eq!(b.quantile(0.5), 2.0);
        assert_eq!(b.quantile(0.75), 3.0);
        assert!(b.quantile(0.99).is_infinite());
        assert!(b.max().is_infinite());
        let ok = Burst {
            n: 100,
            answered_ms: (1..=100).map(f64::from).collect(),
            ..Burst::default()
        };
        assert_eq!(ok.quantile(0.5), 50.0);
        assert_eq!(ok.quantile(0.99), 99.0);
        assert_eq!(ok.max(), 100.0);
        assert!(Burst::default().quantile(0.5).is_nan());
    }

    #[test]
    fn netstat_counters() {
        let text = "TcpExt: SyncookiesSent ListenOverflows ListenDrops\n\
                    TcpExt: 0 126 130\n\
                    IpExt: InNoRoutes\nIpExt: 0\n";
        assert_eq!(parse_netstat(text, "TcpExt:", "ListenOverflows"), Some(126));
        assert_eq!(parse_netstat(text, "TcpExt:", "Nope"), None);
        assert_eq!(parse_netstat("", "TcpExt:", "ListenOverflows"), None);
    }

    #[test]
    fn a_burst_at_a_local_server_is_answered() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let server = std::thread::spawn(move || {
            for _ in 0..20 {
                let (mut s, _) = l.accept().expect("accept");
                // The whole request, or closing with it unread resets the connection.
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nhi\n");
            }
        });
        let t = Target {
            addr,
            path: "/",
            expect: "hi",
        };
        let b = burst(&t, 20, Duration::from_secs(10));
        server.join().expect("server");
        assert_eq!(
            (b.n, b.failures, b.answered_ms.len()),
            (20, 0, 20),
            "{:?}",
            b.errors
        );
        let wrong = Target {
            expect: "nope",
            ..t
        };
        // Nobody listens any more: every connection fails, none hangs.
        let b = burst(&wrong, 3, Duration::from_secs(2));
        assert_eq!(b.failures, 3);
    }
}
