//! Language-runtime benchmark: cold start (launch to first HTTP response, the runtime's own
//! start-up included) and hot request latency of the Python, Node.js, Go and Java
//! hello-worlds, in torpor beside the same root filesystem run natively (chroot), with ratios.
//! Prints a table, asserts nothing about speed.
//!
//! Run with `cargo bench -p torpor-bench --bench runtimes` (as root: the Debian roots are built with
//! debootstrap on first use, and the native runs use chroot).

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use testutil::{free_port, http_get, median};

const COLD_RUNS: usize = 3;
const HOT_REQUESTS: usize = 200;

struct Workload {
    name: &'static str,
    root: &'static str,
    argv: Vec<String>,
    setup: fn(&std::path::Path),
}

fn java_setup(root: &std::path::Path) {
    testutil::build_java_hello(root);
}

fn no_setup(_: &std::path::Path) {}

fn workloads() -> Vec<Workload> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        Workload {
            name: "python",
            root: "python",
            argv: s(&["/usr/bin/python3", "-c", "import http.server\nclass H(http.server.BaseHTTPRequestHandler):\n def do_GET(self):\n  b=b'hello\\n'; self.send_response(200); self.send_header('Content-Length',str(len(b))); self.end_headers(); self.wfile.write(b)\n def log_message(self,*a): pass\nhttp.server.ThreadingHTTPServer(('0.0.0.0',8080),H).serve_forever()"]),
            setup: no_setup,
        },
        Workload {
            name: "node",
            root: "node",
            argv: s(&["/usr/bin/node", "-e", "require('http').createServer((q,s)=>s.end('hello\\n')).listen(8080)"]),
            setup: no_setup,
        },
        Workload { name: "go", root: "go", argv: s(&["/app/hello"]), setup: no_setup },
        Workload {
            name: "java",
            root: "java",
            argv: s(&["/usr/lib/jvm/java-17-openjdk-amd64/bin/java", "-cp", "/app", "Hello"]),
            setup: java_setup,
        },
    ]
}

fn spawn(native: bool, root: &std::path::Path, argv: &[String], port: u16) -> Child {
    let mut c = if native {
        let mut c = Command::new("chroot");
        c.arg(root)
            .args(argv)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("PORT", "8080");
        c
    } else {
        let mut c = Command::new(testutil::built_torpor_bin());
        c.env("TORPOR_LOG", "off")
            .args([
                "run",
                "--memory",
                "1G",
                "--publish",
                &format!("127.0.0.1:{port}:8080"),
            ])
            .arg(root)
            .arg("--")
            .args(argv);
        c
    };
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn")
}

/// Launch to first response, ms; leaves the server running for the hot phase.
// The child is returned to the caller, who kills and waits for it (`stop`).
#[allow(clippy::zombie_processes)]
fn cold_start(native: bool, root: &std::path::Path, argv: &[String]) -> (f64, Child, SocketAddr) {
    let port = if native { 8080 } else { free_port() };
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let t = Instant::now();
    let mut child = spawn(native, root, argv, port);
    loop {
        if http_get(addr, "/", Duration::from_secs(5)).is_ok() {
            return (t.elapsed().as_secs_f64() * 1e3, child, addr);
        }
        if t.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no response within 120 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn stop(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
    std::thread::sleep(Duration::from_millis(200));
}

fn main() {
    if !testutil::require_kvm() {
        return;
    }
    println!("hello-world HTTP servers: cold start (launch to first response, median of {COLD_RUNS}) and hot latency (median of {HOT_REQUESTS} requests)\n");
    println!(
        "{:<8} | {:>12} {:>12} {:>7} | {:>12} {:>12} {:>7}",
        "runtime", "cold torpor", "cold native", "ratio", "hot torpor", "hot native", "ratio"
    );
    println!(
        "{:<8} | {:>12} {:>12} {:>7} | {:>12} {:>12} {:>7}",
        "", "ms", "ms", "x", "ms", "ms", "x"
    );
    for w in workloads() {
        let Some(root) = testutil::debian_rootfs(w.root) else {
            continue;
        };
        (w.setup)(&root);
        let mut figures = Vec::new();
        // The native runs need /proc in the chroot (the JVM finds itself through /proc/self/exe).
        struct ProcMount(std::path::PathBuf);
        impl Drop for ProcMount {
            fn drop(&mut self) {
                let _ = Command::new("umount").arg("-l").arg(&self.0).status();
            }
        }
        let proc_dir = root.join("proc");
        let _ = std::fs::create_dir_all(&proc_dir);
        let _proc = Command::new("mount")
            .args(["-t", "proc", "proc"])
            .arg(&proc_dir)
            .status()
            .ok()
            .filter(|s| s.success())
            .map(|_| ProcMount(proc_dir.clone()));
        for native in [false, true] {
            let mut colds = Vec::new();
            let mut hots = Vec::new();
            for run in 0..COLD_RUNS {
                let (ms, child, addr) = cold_start(native, &root, &w.argv);
                colds.push(ms);
                if run == COLD_RUNS - 1 {
                    for _ in 0..20 {
                        let _ = http_get(addr, "/", Duration::from_secs(10));
                    }
                    for _ in 0..HOT_REQUESTS {
                        let t = Instant::now();
                        http_get(addr, "/", Duration::from_secs(10)).expect("hot request");
                        hots.push(t.elapsed().as_secs_f64() * 1e3);
                    }
                }
                stop(child);
            }
            figures.push((median(&colds), median(&hots)));
        }
        let (ct, ht) = figures[0];
        let (cn, hn) = figures[1];
        println!(
            "{:<8} | {:>12.1} {:>12.1} {:>7.2} | {:>12.2} {:>12.2} {:>7.2}",
            w.name,
            ct,
            cn,
            ct / cn,
            ht,
            hn,
            ht / hn
        );
    }
}
