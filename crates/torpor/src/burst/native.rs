//! The baseline of a burst: the same program run natively (no sandbox) in the same root
//! filesystem, by `chroot`, on a free port of the host.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::paper::http;
use crate::paper::workloads::Workload;

/// The guest port the workloads listen on (in their argv or `PORT=`).
const GUEST_PORT: &str = "8080";

/// A workload's program running natively; killed on drop.
pub struct Native {
    child: Child,
    /// Where it answers.
    pub addr: SocketAddr,
}

/// The argv and environment of `w` listening on `port` instead of the guest port.
pub fn command_for(w: &Workload, port: u16) -> (Vec<String>, Vec<String>) {
    let port = port.to_string();
    let argv = w
        .argv
        .iter()
        .map(|a| {
            if a == GUEST_PORT {
                port.clone()
            } else {
                a.clone()
            }
        })
        .collect();
    let env = w
        .env
        .iter()
        .map(|e| match e.split_once('=') {
            Some(("PORT", _)) => format!("PORT={port}"),
            _ => e.clone(),
        })
        .collect();
    (argv, env)
}

impl Native {
    /// Starts `w` in `root` with `chroot` (needs root) and waits until it answers.
    ///
    /// # Errors
    /// If it cannot start or does not answer within `timeout`.
    pub fn start(w: &Workload, root: &Path, timeout: Duration) -> anyhow::Result<Native> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("a free port")?
            .port();
        let (argv, env) = command_for(w, port);
        let child = Command::new("chroot")
            .arg(root)
            .args(&argv)
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", "/root")
            .envs(env.iter().filter_map(|e| e.split_once('=')))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("chroot (the native baseline needs root)")?;
        let mut native = Native {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let t = Instant::now();
        loop {
            if let Ok(r) = http::get(native.addr, w.path, Duration::from_secs(10)) {
                if r.status == 200 && String::from_utf8_lossy(&r.body).contains(w.expect) {
                    return Ok(native);
                }
            }
            if let Ok(Some(st)) = native.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = native.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                bail!("{} natively exited ({st}): {}", w.name, err.trim());
            }
            if t.elapsed() > timeout {
                bail!("{} natively did not answer within {timeout:?}", w.name);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Native {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guest_port_is_replaced_in_argv_and_env() {
        let all = crate::paper::workloads::all();
        for w in &all {
            let (argv, env) = command_for(w, 4321);
            assert!(
                !argv.iter().any(|a| a == GUEST_PORT),
                "{}: {argv:?}",
                w.name
            );
            assert!(
                !env.iter().any(|e| e.contains(GUEST_PORT)),
                "{}: {env:?}",
                w.name
            );
        }
        let go = all.iter().find(|w| w.name == "go").expect("go workload");
        assert_eq!(command_for(go, 4321).1, vec!["PORT=4321".to_string()]);
        let py = all
            .iter()
            .find(|w| w.name == "python")
            .expect("python workload");
        assert_eq!(
            command_for(py, 4321).0.last().map(String::as_str),
            Some("4321")
        );
    }
}
