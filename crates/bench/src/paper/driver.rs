//! Drives sandboxes for the benchmark through the `torpor` command itself (`run -d`,
//! `hibernate`, `stats`, `delete`), exactly as a user would, with a private state directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::http;
use super::workloads::Workload;

/// How long a workload may take to answer its first request.
const START_TIMEOUT: Duration = Duration::from_secs(180);
/// How long one request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The `torpor` binary and the state directory the benchmark's sandboxes live in.
pub struct Driver {
    bin: PathBuf,
    state: PathBuf,
    next: std::cell::Cell<u32>,
}

/// A detached sandbox running a workload, deleted on drop.
pub struct Sandbox<'a> {
    driver: &'a Driver,
    /// Its ID.
    pub id: String,
    /// Where its published port answers.
    pub addr: SocketAddr,
}

/// The `torpor` command the benchmarks drive: `$TORPOR_BIN` if set, else the `torpor` beside
/// this executable (`cargo build --release` puts both in `target/release`).
///
/// # Errors
/// If neither exists, with what to do about it.
pub fn torpor_executable() -> anyhow::Result<PathBuf> {
    if let Some(bin) = std::env::var_os("TORPOR_BIN") {
        let bin = PathBuf::from(bin);
        anyhow::ensure!(bin.is_file(), "TORPOR_BIN={}: no such file", bin.display());
        return Ok(bin);
    }
    let me = std::env::current_exe().context("this executable's path")?;
    let bin = me.with_file_name("torpor");
    anyhow::ensure!(
        bin.is_file(),
        "no torpor command beside {} (build it: cargo build --release; or set TORPOR_BIN)",
        me.display()
    );
    Ok(bin)
}

impl Driver {
    /// A driver using the `torpor` command of [`torpor_executable`] and a fresh state
    /// directory under `base`.
    ///
    /// # Errors
    /// If the executable cannot be found or the directory cannot be made.
    pub fn new(base: &Path) -> anyhow::Result<Driver> {
        let bin = torpor_executable()?;
        let state = base.join(format!("torpor-paper-{}", std::process::id()));
        std::fs::create_dir_all(&state)
            .with_context(|| format!("create state directory {}", state.display()))?;
        Ok(Driver {
            bin,
            state,
            next: std::cell::Cell::new(0),
        })
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.env("TORPOR_STATE_DIR", &self.state)
            .env("TORPOR_LOG", "error")
            .stdin(Stdio::null());
        c
    }

    /// Runs `torpor ARGS` and returns its stdout.
    fn verb(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self
            .cmd()
            .args(args)
            .output()
            .with_context(|| format!("torpor {}", args.join(" ")))?;
        if !out.status.success() {
            bail!(
                "torpor {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Starts `w` detached with `wake_mode` and returns at once (not waiting for readiness).
    ///
    /// # Errors
    /// If `torpor run -d` fails.
    pub fn start(&self, w: &Workload, root: &Path, wake_mode: &str) -> anyhow::Result<Sandbox<'_>> {
        self.start_with(w, root, wake_mode, &[])
    }

    /// [`Driver::start`] with more `torpor run` options (`--hibernate-after 2s`…).
    ///
    /// # Errors
    /// If `torpor run -d` fails.
    pub fn start_with(
        &self,
        w: &Workload,
        root: &Path,
        wake_mode: &str,
        extra: &[&str],
    ) -> anyhow::Result<Sandbox<'_>> {
        let n = self.next_number();
        let id = format!("paper-{}-{n}", w.name);
        let (port, publish) = published_port()?;
        let mut c = self.cmd();
        c.args(["run", "-d", "--name", &id, "--memory", w.memory])
            .args(["-p", &publish, "--wake-mode", wake_mode])
            .args(extra);
        for e in &w.env {
            c.args(["-e", e]);
        }
        c.arg(root).arg("--").args(&w.argv);
        let out = c.output().context("torpor run -d")?;
        if !out.status.success() {
            bail!(
                "torpor run -d {}: {}",
                w.name,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(self.sandbox(id, port))
    }

    /// `torpor checkpoint ID DIR` of `sb` (which is gone after it).
    ///
    /// # Errors
    /// If the verb fails.
    pub fn checkpoint(&self, sb: &Sandbox<'_>, dir: &Path) -> anyhow::Result<()> {
        let d = dir.to_string_lossy();
        self.verb(&["checkpoint", &sb.id, &d]).map(|_| ())
    }

    /// A sandbox of `w` started, answering and warmed up (three requests, then a moment of
    /// quiet): what a checkpoint of a template is taken from.
    ///
    /// # Errors
    /// If it does not start or answer.
    pub fn start_warm(&self, w: &Workload, root: &Path) -> anyhow::Result<Sandbox<'_>> {
        let sb = self.start(w, root, "auto")?;
        sb.wait_ready(w)?;
        for _ in 0..3 {
            sb.request(w)?;
        }
        std::thread::sleep(Duration::from_millis(200));
        Ok(sb)
    }

    /// [`Self::start_warm`], then hibernated and woken by one request: its working set (the
    /// pages that request touched) is recorded, and a checkpoint taken now carries it, so
    /// that an instance started from the checkpoint prefetches it at its first request (a
    /// platform's template; without it the first request faults its pages one at a time).
    ///
    /// # Errors
    /// If it does not start, answer or hibernate.
    pub fn start_primed(&self, w: &Workload, root: &Path) -> anyhow::Result<Sandbox<'_>> {
        let sb = self.start_warm(w, root)?;
        sb.hibernate()?;
        sb.request(w)?;
        std::thread::sleep(Duration::from_millis(200));
        Ok(sb)
    }

    /// `torpor restore -d` (when `clone` is false) or `torpor run -d --from` (a clone) of the
    /// checkpoint `dir` of workload `w`, published on a free port; returns at once.
    ///
    /// # Errors
    /// If the verb fails.
    pub fn start_from_checkpoint(
        &self,
        w: &Workload,
        dir: &Path,
        clone: bool,
    ) -> anyhow::Result<Sandbox<'_>> {
        let n = self.next_number();
        let id = format!("{}-{}-{n}", if clone { "clone" } else { "restore" }, w.name);
        let (port, publish) = published_port()?;
        let d = dir.to_string_lossy();
        let args: Vec<&str> = if clone {
            vec!["run", "-d", "--name", &id, "-p", &publish, "--from", &d]
        } else {
            vec!["restore", "-d", "--name", &id, "-p", &publish, &d]
        };
        self.verb(&args)?;
        Ok(self.sandbox(id, port))
    }

    /// `torpor run -d --from DIR --dormant` of the checkpoint `dir` of workload `w`, published
    /// on a free port, with more options `extra` (`--dormant-after 2s`…): an instance started
    /// dormant; returns once it is.
    ///
    /// # Errors
    /// If the verb fails.
    pub fn start_dormant_instance(
        &self,
        w: &Workload,
        dir: &Path,
        extra: &[&str],
    ) -> anyhow::Result<Sandbox<'_>> {
        let n = self.next_number();
        let id = format!("dormant-{}-{n}", w.name);
        let (port, publish) = published_port()?;
        let d = dir.to_string_lossy();
        let mut args: Vec<&str> = vec!["run", "-d", "--name", &id, "-p", &publish, "--from", &d];
        args.push("--dormant");
        args.extend_from_slice(extra);
        self.verb(&args)?;
        Ok(self.sandbox(id, port))
    }

    /// `torpor fork -d` of the live sandbox `template` (workload `w`), published on a free
    /// port; returns once the instance runs.
    ///
    /// # Errors
    /// If the verb fails.
    pub fn fork(&self, w: &Workload, template: &Sandbox<'_>) -> anyhow::Result<Sandbox<'_>> {
        let n = self.next_number();
        let id = format!("fork-{}-{n}", w.name);
        let (port, publish) = published_port()?;
        self.verb(&["fork", &template.id, "-d", "--name", &id, "-p", &publish])?;
        Ok(self.sandbox(id, port))
    }

    /// The next number of a sandbox's ID.
    fn next_number(&self) -> u32 {
        let n = self.next.get();
        self.next.set(n + 1);
        n
    }

    /// The sandbox `id` started by this driver, answering on 127.0.0.1:`port`.
    fn sandbox(&self, id: String, port: u16) -> Sandbox<'_> {
        Sandbox {
            driver: self,
            id,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    /// Removes the state directory (every sandbox must be gone).
    pub fn cleanup(&self) {
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.cleanup();
    }
}

impl Sandbox<'_> {
    /// Waits until the workload answers `GET path` correctly; returns the time waited.
    ///
    /// # Errors
    /// If it does not within the start timeout, or its holder died.
    pub fn wait_ready(&self, w: &Workload) -> anyhow::Result<Duration> {
        wait_answer(
            self.addr,
            w,
            || {
                std::fs::read_to_string(self.driver.state.join(&self.id).join("output.log"))
                    .unwrap_or_default()
            },
            || false,
        )
    }

    /// One timed request (ms).
    ///
    /// # Errors
    /// A failed request or a wrong answer.
    pub fn request(&self, w: &Workload) -> anyhow::Result<f64> {
        http::timed_get(self.addr, w.path, w.expect, REQUEST_TIMEOUT)
    }

    /// `torpor stats` as JSON.
    ///
    /// # Errors
    /// If the verb fails or prints something else than JSON.
    pub fn stats(&self) -> anyhow::Result<serde_json::Value> {
        let s = self.driver.verb(&["stats", &self.id])?;
        serde_json::from_str(&s).context("torpor stats output")
    }

    /// The holder's PSS in bytes.
    ///
    /// # Errors
    /// As [`Sandbox::stats`].
    pub fn pss(&self) -> anyhow::Result<f64> {
        self.stats()?
            .get("pss_bytes")
            .and_then(|v| v.as_f64())
            .context("no pss_bytes in torpor stats")
    }

    /// The sandbox's state name.
    ///
    /// # Errors
    /// As [`Sandbox::stats`].
    pub fn state(&self) -> anyhow::Result<String> {
        Ok(self
            .stats()?
            .get("state")
            .and_then(|v| v.as_str())
            .unwrap_or("?")
            .to_string())
    }

    /// Makes the sandbox dormant (`torpor dormant`, which returns once the dormant process
    /// answers).
    ///
    /// # Errors
    /// If `torpor dormant` fails.
    pub fn dormant(&self) -> anyhow::Result<()> {
        self.driver.verb(&["dormant", &self.id]).map(|_| ())
    }

    /// Hibernates the sandbox. A socket with bytes to read (a request still being handled)
    /// wakes it at once; then it waits a little and tries again, until it stays hibernated.
    ///
    /// # Errors
    /// If `torpor hibernate` fails, or the sandbox never stays hibernated.
    pub fn hibernate(&self) -> anyhow::Result<()> {
        for _ in 0..50 {
            self.driver.verb(&["hibernate", &self.id])?;
            if self.state()? == "hibernated" {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("{} does not stay hibernated", self.id)
    }
}

impl Drop for Sandbox<'_> {
    fn drop(&mut self) {
        let _ = self.driver.verb(&["delete", "--force", &self.id]);
    }
}

/// Waits until `GET w.path` at `addr` answers correctly; returns the time waited. `output`
/// gives the server's output for the error; `gone` says whether the server has ended (then
/// there is no point waiting).
///
/// # Errors
/// A wrong first answer, or none within the start timeout or before the server ended.
pub fn wait_answer(
    addr: SocketAddr,
    w: &Workload,
    output: impl Fn() -> String,
    mut gone: impl FnMut() -> bool,
) -> anyhow::Result<Duration> {
    let t = Instant::now();
    loop {
        match http::get(addr, w.path, REQUEST_TIMEOUT) {
            Ok(r) if r.status == 200 && String::from_utf8_lossy(&r.body).contains(w.expect) => {
                return Ok(t.elapsed())
            }
            Ok(r) => bail!(
                "{}: unexpected first answer: status {} {:?}",
                w.name,
                r.status,
                String::from_utf8_lossy(&r.body)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ),
            Err(_) if t.elapsed() < START_TIMEOUT && !gone() => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => {
                let log = output();
                let tail: String = log.chars().rev().take(2000).collect();
                bail!(
                    "{} did not answer (waited {:?}): {e}; its output: {}",
                    w.name,
                    t.elapsed(),
                    tail.chars().rev().collect::<String>()
                )
            }
        }
    }
}

/// A free port of the loopback interface, and `--publish`'s form of it for the workloads'
/// port 8080.
fn published_port() -> anyhow::Result<(u16, String)> {
    let port = free_port()?;
    Ok((port, format!("127.0.0.1:{port}:8080")))
}

/// A free TCP port on the loopback interface.
pub fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("bind a free port")?;
    Ok(l.local_addr()?.port())
}

/// The regular files under `dir` (symlinks not followed), for [`evict`].
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => todo.push(e.path()),
                Ok(t) if t.is_file() => out.push(e.path()),
                _ => {}
            }
        }
    }
    out
}

/// Evicts `files` from the host page cache (written back first), as after a long idle
/// period under memory pressure, while the rest of the host (the torpor binary, the host's
/// libraries, other sandboxes' files) stays cached, as on a host running many sandboxes.
pub fn evict(files: &[PathBuf]) {
    // SAFETY: sync has no preconditions; it writes back the swap file just written, which
    // POSIX_FADV_DONTNEED would otherwise leave cached.
    unsafe { libc::sync() };
    for f in files {
        let Ok(file) = std::fs::File::open(f) else {
            continue;
        };
        // SAFETY: a valid fd; offset 0 and length 0 mean the whole file.
        unsafe {
            libc::posix_fadvise(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
                0,
                libc::POSIX_FADV_DONTNEED,
            )
        };
    }
}

impl Sandbox<'_> {
    /// The files of the sandbox's state directory (its swap and REAP files).
    pub fn state_files(&self) -> Vec<PathBuf> {
        files_under(&self.driver.state.join(&self.id))
    }
}
