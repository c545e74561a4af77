//! Debian root filesystems for the language-runtime tests, built by
//! `scripts/build-rootfs.sh` (debootstrap) into a cache directory and reused.
//!
//! [`debian_rootfs`] runs the script at most once per process; the script
//! itself decides whether the cached root is up to date (complete, and built
//! with the package list the script holds now) and returns at once when it
//! is, so a changed package list rebuilds the root on its next use. Runs from
//! parallel test processes are serialized by a file lock (`flock`), so the
//! one that waited finds the root complete. The cache directory is
//! `$TORPOR_ROOTFS_CACHE`, else `$HOME/.cache/torpor/rootfs`.
//!
//! - `TORPOR_SKIP_DEBIAN=1` skips every test that needs one;
//! - a failed build (no network, not root, no debootstrap) skips the test
//!   too, with a `skipped: ...` line, unless `TORPOR_REQUIRE_KVM=1` (as CI
//!   sets it): then it fails;
//! - `TORPOR_ROOTFS_TIMEOUT` (seconds, default 1200) bounds one build.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Environment variable that skips the tests needing a Debian root filesystem.
pub const SKIP_DEBIAN_ENV: &str = "TORPOR_SKIP_DEBIAN";

/// Environment variable naming the cache directory of root filesystems.
pub const ROOTFS_CACHE_ENV: &str = "TORPOR_ROOTFS_CACHE";

/// Marker file of a complete root filesystem (written last by the script).
pub const COMPLETE_MARKER: &str = ".torpor-complete";

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1200);

/// Results of this process's builds, by name (`None`: unavailable).
static BUILDS: Mutex<Option<HashMap<String, Option<PathBuf>>>> = Mutex::new(None);

/// Path of `scripts/build-rootfs.sh` in the workspace.
pub fn build_script() -> PathBuf {
    crate::workspace_root()
        .join("scripts")
        .join("build-rootfs.sh")
}

/// The cache directory of root filesystems: `$TORPOR_ROOTFS_CACHE`, else
/// `$HOME/.cache/torpor/rootfs`; `None` when neither is set.
pub fn rootfs_cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os(ROOTFS_CACHE_ENV).filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some(
        PathBuf::from(home)
            .join(".cache")
            .join("torpor")
            .join("rootfs"),
    )
}

/// The Debian root filesystem `name` (`python`, `node`, `java`, `go` or
/// `base`; see `scripts/build-rootfs.sh`), built on first use.
///
/// Returns `None` after printing `skipped: ...` when `TORPOR_SKIP_DEBIAN=1`
/// or when the build fails, so that a test can begin with
/// `let Some(root) = testutil::debian_rootfs("python") else { return };`.
///
/// # Panics
///
/// When the build fails and `TORPOR_REQUIRE_KVM=1` (CI must not skip
/// silently), with the end of the build's log.
pub fn debian_rootfs(name: &str) -> Option<PathBuf> {
    if std::env::var(SKIP_DEBIAN_ENV).as_deref() == Ok("1") {
        println!("skipped: Debian root filesystem '{name}' not wanted ({SKIP_DEBIAN_ENV}=1)");
        return None;
    }
    let mut builds = BUILDS.lock().unwrap_or_else(|p| p.into_inner());
    let builds = builds.get_or_insert_with(HashMap::new);
    if let Some(done) = builds.get(name) {
        if done.is_none() {
            if std::env::var(crate::REQUIRE_KVM_ENV).as_deref() == Ok("1") {
                panic!("Debian root filesystem '{name}': its build failed earlier in this process");
            }
            println!("skipped: Debian root filesystem '{name}' unavailable (its build failed earlier in this process)");
        }
        return done.clone();
    }
    let result = build(name);
    // Recorded before any panic: the other tests of this process must not
    // build again.
    builds.insert(name.to_owned(), result.as_ref().ok().cloned());
    let root = match result {
        Ok(root) => Some(root),
        Err(why) => {
            if std::env::var(crate::REQUIRE_KVM_ENV).as_deref() == Ok("1") {
                panic!(
                    "Debian root filesystem '{name}' could not be built and {}=1 \
                     (set {SKIP_DEBIAN_ENV}=1 to skip these tests deliberately): {why}",
                    crate::REQUIRE_KVM_ENV
                );
            }
            println!("skipped: Debian root filesystem '{name}' unavailable: {why}");
            None
        }
    };
    root
}

/// Runs the build script (under `flock`), which returns at once when the
/// root is complete and up to date, and builds or rebuilds it otherwise.
fn build(name: &str) -> Result<PathBuf, String> {
    let cache =
        rootfs_cache_dir().ok_or_else(|| format!("neither {ROOTFS_CACHE_ENV} nor HOME is set"))?;
    let root = cache.join(name);
    std::fs::create_dir_all(&cache).map_err(|e| format!("create {}: {e}", cache.display()))?;
    let lock = cache.join(format!(".{name}.test-lock"));
    let log_path = cache.join(format!(".{name}.log"));
    // Appended to: a process waiting for another's build must not truncate
    // its log (the lock serializes the writers; the tail is the latest run).
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("open {}: {e}", log_path.display()))?;
    let log2 = log.try_clone().map_err(|e| format!("dup log: {e}"))?;
    let timeout = std::env::var("TORPOR_ROOTFS_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_TIMEOUT);

    println!(
        "debian rootfs '{name}': checking or building {} (log: {})",
        root.display(),
        log_path.display()
    );
    let started = Instant::now();
    // `flock LOCK CMD` holds the lock while the script runs: another test
    // process waits, then finds the root complete (the script's own lock is
    // a different file, so the two never wait for each other).
    let mut cmd = Command::new("flock");
    cmd.arg(&lock)
        .arg(build_script())
        .arg(name)
        .arg(&cache)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2))
        .process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {cmd:?}: {e} (flock is in util-linux)"))?;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() >= timeout => {
                // The whole group: flock, the script, debootstrap, apt-get.
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", child.id())])
                    .status();
                let _ = child.wait();
                return Err(format!(
                    "build timed out after {timeout:?}, killed\n{}",
                    log_tail(&log_path)
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Err(format!("waiting for the build: {e}")),
        }
    };
    let secs = started.elapsed().as_secs_f64();
    if !status.success() {
        return Err(format!(
            "{} {name} failed ({status}) after {secs:.1}s: {}\n{}",
            build_script().display(),
            last_line(&log_path),
            log_tail(&log_path)
        ));
    }
    if !root.join(COMPLETE_MARKER).exists() {
        return Err(format!(
            "the build succeeded but {} has no {COMPLETE_MARKER}\n{}",
            root.display(),
            log_tail(&log_path)
        ));
    }
    println!("debian rootfs '{name}': ready at {} after {secs:.1}s (up to date, built, or waited for another process's build)", root.display());
    Ok(root)
}

/// The last non-empty line of the build log (the script's error, usually).
fn last_line(path: &Path) -> String {
    let data = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&data);
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(empty log)")
        .to_owned()
}

/// The last lines of the build log, indented, to show with an error.
fn log_tail(path: &Path) -> String {
    const LINES: usize = 30;
    match std::fs::read(path) {
        Ok(data) => {
            let text = String::from_utf8_lossy(&data);
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(LINES);
            let mut s = format!("--- last lines of {} ---\n", path.display());
            for l in &lines[start..] {
                s.push_str("  ");
                s.push_str(l);
                s.push('\n');
            }
            s
        }
        Err(e) => format!("(no build log {}: {e})", path.display()),
    }
}

/// Compiles `tests/apps/java/Hello.java` (a com.sun.net.httpserver hello-world answering
/// "hello from java" on port 8080) with the host's `javac` into `ROOT/app`, so that the
/// root runs it as `java -cp /app Hello`.
///
/// # Panics
///
/// When `javac` (Debian's openjdk-17-jdk-headless) is missing or fails.
pub fn build_java_hello(root: &std::path::Path) {
    let src = crate::workspace_root().join("tests/apps/java/Hello.java");
    let app = root.join("app");
    std::fs::create_dir_all(&app).unwrap_or_else(|e| panic!("create {}: {e}", app.display()));
    let ok = std::process::Command::new("javac")
        .args(["--release", "17", "-d"])
        .arg(&app)
        .arg(&src)
        .status()
        .expect("javac (Debian's openjdk-17-jdk-headless) is needed to build the Java test server")
        .success();
    assert!(ok, "javac failed on {}", src.display());
}

/// Debian's Python serving its root directory (`python3 -m http.server`) in a detached
/// sandbox of `bin` with 512 MiB, published on `127.0.0.1:PORT`, once it answers (`None`
/// where the Debian root is skipped: see the module doc).
pub fn python_http_server(bin: &Path) -> Option<(crate::Detached, std::net::SocketAddr)> {
    let root = debian_rootfs("python")?;
    let port = crate::free_port();
    let sb = crate::Detached::start(
        bin,
        &["--memory", "512M", "-p", &format!("127.0.0.1:{port}:8080")],
        &root,
        "/usr/bin/python3",
        &["-m", "http.server", "8080"],
    );
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        crate::answers_within(addr, Duration::from_secs(120)),
        "python did not answer within 120 s"
    );
    Some((sb, addr))
}

/// Asserts that `addr` answers `GET /` with Python's directory listing (`what` names the
/// request in the failure).
pub fn assert_directory_listing(addr: std::net::SocketAddr, what: &str) {
    let body = crate::http_get(addr, "/", Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .body_str();
    assert!(body.contains("Directory listing"), "{what}: {body}");
}
