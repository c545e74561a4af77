//! The native baseline: a workload's server run straight on the host, in a chroot of its
//! Debian root with a `/proc` of its own (`unshare --mount --pid --mount-proc`, and
//! `--map-root-user` when not root: the JVM finds its libraries through `/proc/self/exe`), on
//! a port of its own, so that `bench paper` measures its hot latency in the same run as the
//! sandbox's, request by request in turn.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;

use super::driver::{self, REQUEST_TIMEOUT};
use super::http;
use super::workloads::Workload;

/// A workload's server running natively, killed on drop.
pub struct Native {
    child: Child,
    /// Where it answers.
    pub addr: SocketAddr,
    /// Its standard output and error.
    log: PathBuf,
}

impl Native {
    /// Starts `w`'s server from `root` on a free port, its output in `log_dir`.
    ///
    /// # Errors
    /// If the port, the log file or the process cannot be had.
    pub fn start(w: &Workload, root: &Path, log_dir: &Path) -> anyhow::Result<Native> {
        let port = driver::free_port()?;
        let (argv, env) = w.on_port(port);
        let log = log_dir.join(format!("native-{}.log", w.name));
        let out =
            std::fs::File::create(&log).with_context(|| format!("create {}", log.display()))?;
        let mut c = Command::new("unshare");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            c.arg("--map-root-user");
        }
        c.args(["--mount", "--pid", "--fork", "--kill-child"])
            .arg(format!("--mount-proc={}", root.join("proc").display()))
            .arg("chroot")
            .arg(root)
            .args(&argv)
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", "/root")
            .env("LANG", "C.UTF-8")
            .envs(env.iter().filter_map(|e| e.split_once('=')))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        let child = c
            .spawn()
            .with_context(|| format!("start {} natively ({:?})", w.name, c.get_program()))?;
        Ok(Native {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            log,
        })
    }

    /// Waits until it answers correctly; returns the time waited.
    ///
    /// # Errors
    /// As [`driver::wait_answer`].
    pub fn wait_ready(&mut self, w: &Workload) -> anyhow::Result<Duration> {
        let log = self.log.clone();
        let child = &mut self.child;
        driver::wait_answer(
            self.addr,
            w,
            || std::fs::read_to_string(&log).unwrap_or_default(),
            || !matches!(child.try_wait(), Ok(None)),
        )
    }

    /// One timed request (ms).
    ///
    /// # Errors
    /// A failed request or a wrong answer.
    pub fn request(&self, w: &Workload) -> anyhow::Result<f64> {
        http::timed_get(self.addr, w.path, w.expect, REQUEST_TIMEOUT)
    }
}

impl Drop for Native {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}
