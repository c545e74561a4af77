//! The holder's side of `exec` (OCI, and `torpor exec` of any sandbox): a process started in
//! the sandbox with the caller's three descriptors, its pid and then its exit status answered
//! on the request's connection, and while it runs the caller's signals (Ctrl-C and window
//! changes of an attached terminal, or signals the caller itself received) read from that
//! connection and sent to the terminal's foreground process group inside.

use std::io::{BufRead, BufReader};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::mpsc;

use kernel::sandbox::spawn::SpawnRequest;
use kernel::ExitStatus;
use serde_json::json;

use super::{is_started, reply, Daemon, SpawnJob};
use crate::control::{ExecMessage, Response};

/// Starts `req`, answers with its pid, forwards the caller's signals while it runs, and
/// answers with its exit status once it ends. A program named without a path is looked up
/// on its `PATH` in the root. `terminal`: the caller relays a terminal to it, which holds
/// the sandbox hot while attached.
pub(super) fn exec(
    d: &Daemon,
    mut w: UnixStream,
    mut req: SpawnRequest,
    user: Option<&str>,
    terminal: bool,
    fds: Vec<OwnedFd>,
) {
    if let Some(spec) = user {
        // Names from the sandbox's own /etc/passwd and /etc/group, as `run --user`.
        let found = kernel::fs::Root::open(&d.root)
            .map_err(anyhow::Error::from)
            .and_then(|root| crate::user::resolve(&root, spec));
        match found {
            Ok(u) => {
                if let Some(home) = u
                    .home
                    .filter(|_| !req.env.iter().any(|e| e.starts_with("HOME=")))
                {
                    req.env.push(format!("HOME={home}"));
                }
                req.creds = Some(u.creds);
            }
            Err(e) => return reply(&mut w, &Response::error(format!("exec: {e:#}"))),
        }
    }
    if let Some(arg0) = req.args.first().filter(|a| !a.starts_with('/')) {
        match crate::program::resolve(&d.root, arg0, &req.env, &req.cwd) {
            Some(p) => req.args[0] = p,
            None => {
                return reply(
                    &mut w,
                    &Response::error(format!("exec: {arg0:?} not found")),
                )
            }
        }
    }
    let Some(spawner) = d.spawner.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
        return reply(&mut w, &Response::error("the sandbox is not running"));
    };
    if !is_started(d) || d.exit.lock().map(|e| e.is_some()).unwrap_or(false) {
        return reply(&mut w, &Response::error("the sandbox is not running"));
    }
    if fds.len() != 3 {
        return reply(
            &mut w,
            &Response::error("exec needs three descriptors (stdin, stdout, stderr)"),
        );
    }
    let mut it = fds.into_iter();
    let stdio = [it.next(), it.next(), it.next()];
    // Bytes arriving for a hibernated sandbox would not wake it for this process: wake first.
    let _ = d.hib.wake();
    // Built by the spawner thread: the control role may not make a VM.
    let (tx, rx) = mpsc::channel();
    let job: SpawnJob = {
        let spawner = spawner.clone();
        Box::new(move || {
            let _ = tx.send(spawner.spawn(&req, stdio));
        })
    };
    let sent = d
        .spawn_jobs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send(job);
    let Ok(spawned) = sent
        .map_err(|_| ())
        .and_then(|()| rx.recv().map_err(|_| ()))
    else {
        return reply(&mut w, &Response::error("exec: the spawner thread is gone"));
    };
    let p = match spawned {
        Err(e) => return reply(&mut w, &Response::error(format!("exec: {e}"))),
        Ok(p) => p,
    };
    reply(&mut w, &Response::data(json!({ "pid": p.pid })));
    let _attached = terminal.then(|| Attached::new(d));
    let messages = w.try_clone().ok();
    let (pid, spawner) = (p.pid, &spawner);
    std::thread::scope(|s| {
        if let Some(conn) = &messages {
            // The request's read timeout no longer applies: the caller speaks when its user
            // does.
            let _ = conn.set_read_timeout(None);
            s.spawn(move || {
                for line in BufReader::new(conn).lines() {
                    let Ok(line) = line else { break };
                    match serde_json::from_str::<ExecMessage>(&line) {
                        Ok(m) if (1..=64).contains(&m.signal) => {
                            spawner.signal_foreground(pid, m.signal);
                            d.hib.stop_if_hibernated();
                        }
                        _ => tracing::debug!("exec {pid}: ignored message {line:?}"),
                    }
                }
            });
        }
        let status = p.exit.recv().unwrap_or(ExitStatus::Signaled(libc::SIGKILL));
        reply(&mut w, &Response::data(json!({ "exit": status.code() })));
        // Ends the reader above (the caller may keep its end open a little longer).
        if let Some(conn) = &messages {
            let _ = conn.shutdown(std::net::Shutdown::Read);
        }
    });
}

/// An attached terminal session, counted while it lasts (see `Daemon::attached`).
struct Attached<'a>(&'a Daemon);

impl<'a> Attached<'a> {
    fn new(d: &'a Daemon) -> Self {
        d.attached.fetch_add(1, Ordering::Relaxed);
        Attached(d)
    }
}

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        self.0.attached.fetch_sub(1, Ordering::Relaxed);
    }
}
