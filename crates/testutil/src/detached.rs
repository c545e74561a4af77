//! A detached sandbox (`torpor run -d`) with its own state directory, driven through the
//! sandbox verbs, and force-deleted on drop.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::run::{run_command, Output};
use crate::tempdir::TempDir;

/// A sandbox started with `torpor run -d`.
pub struct Detached {
    bin: PathBuf,
    /// Its ID.
    pub id: String,
    state_dir: std::sync::Arc<TempDir>,
}

impl Detached {
    /// Starts `torpor run -d --name ID OPTIONS ROOTFS -- PROGRAM ARGS` with a private
    /// `TORPOR_STATE_DIR`, and panics if it does not start.
    pub fn start(
        bin: &Path,
        options: &[&str],
        rootfs: &Path,
        program: &str,
        args: &[&str],
    ) -> Detached {
        Self::start_with_env(bin, &[], options, rootfs, program, args)
    }

    /// As [`Detached::start`], with the variables `env` set in the holder's environment
    /// (the runtime's own switches, such as `TORPOR_COW_FORK`).
    pub fn start_with_env(
        bin: &Path,
        env: &[(&str, &str)],
        options: &[&str],
        rootfs: &Path,
        program: &str,
        args: &[&str],
    ) -> Detached {
        let state_dir = std::sync::Arc::new(TempDir::new("torpor-state"));
        Self::start_shared(bin, state_dir, env, options, rootfs, program, args).unwrap_or_else(
            |o| {
                panic!(
                    "torpor run -d failed: status {}\n{}",
                    o.code(),
                    o.stderr_str()
                )
            },
        )
    }

    /// As [`Detached::start`] in a given state directory; the failed command's output on error.
    pub fn start_in(
        bin: &Path,
        state_dir: TempDir,
        options: &[&str],
        rootfs: &Path,
        program: &str,
        args: &[&str],
    ) -> Result<Detached, Output> {
        Self::start_shared(
            bin,
            std::sync::Arc::new(state_dir),
            &[],
            options,
            rootfs,
            program,
            args,
        )
    }

    /// Starts another sandbox in this one's state directory (sandboxes that share a state
    /// root, such as the keep-alive registry); the directory goes with the last of them.
    pub fn start_beside(
        &self,
        options: &[&str],
        rootfs: &Path,
        program: &str,
        args: &[&str],
    ) -> Detached {
        Self::start_shared(
            &self.bin,
            self.state_dir.clone(),
            &[],
            options,
            rootfs,
            program,
            args,
        )
        .unwrap_or_else(|o| {
            panic!(
                "torpor run -d failed: status {}\n{}",
                o.code(),
                o.stderr_str()
            )
        })
    }

    fn start_shared(
        bin: &Path,
        state_dir: std::sync::Arc<TempDir>,
        env: &[(&str, &str)],
        options: &[&str],
        rootfs: &Path,
        program: &str,
        args: &[&str],
    ) -> Result<Detached, Output> {
        let id = format!("t{}", crate::tempdir::unique_token());
        let mut cmd = Command::new(bin);
        cmd.envs(env.iter().copied())
            .env("TORPOR_STATE_DIR", state_dir.path())
            .arg("run")
            .arg("-d")
            .arg("--name")
            .arg(&id);
        cmd.args(options)
            .arg(rootfs)
            .arg("--")
            .arg(program)
            .args(args);
        let out = run_command(cmd, None, Duration::from_secs(120));
        if out.code() != 0 {
            return Err(out);
        }
        assert_eq!(out.stdout_str().trim(), id, "run -d prints the ID");
        Ok(Detached {
            bin: bin.to_path_buf(),
            id,
            state_dir,
        })
    }

    /// `tests/guest/http_server.c` of `root` in a detached sandbox started by `bin` with
    /// `options`, published on a free port (in the state directory of `beside`, if given),
    /// once it answers; and its address.
    pub fn http_server(
        bin: &Path,
        root: &crate::Rootfs,
        options: &[&str],
        beside: Option<&Detached>,
    ) -> (Detached, std::net::SocketAddr) {
        let prog = root.guest_program("http_server");
        let port = crate::free_port();
        let publish = format!("{port}:8080");
        let mut opts = vec!["-p", publish.as_str()];
        opts.extend_from_slice(options);
        let sb = match beside {
            None => Detached::start(bin, &opts, root.path(), &prog, &["8080"]),
            Some(first) => first.start_beside(&opts, root.path(), &prog, &["8080"]),
        };
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        assert!(
            Detached::wait_until(Duration::from_secs(10), || {
                crate::http_get(addr, "/", Duration::from_secs(2)).is_ok()
            }),
            "http_server did not answer on {addr}"
        );
        (sb, addr)
    }

    /// `torpor checkpoint ID DIR` into a new temporary directory: the directory (removed
    /// when dropped) and DIR in it. Panics if the checkpoint fails.
    pub fn checkpoint_to_temp(&self) -> (TempDir, PathBuf) {
        let t = TempDir::new("torpor-ckpt");
        let dir = t.path().join("ckpt");
        let out = self.verb("checkpoint", &[&dir.to_string_lossy()]);
        assert_eq!(out.code(), 0, "checkpoint: {}", out.stderr_str());
        (t, dir)
    }

    /// `torpor restore -d --name ID OPTIONS DIR` in this sandbox's state directory: the
    /// restored sandbox, or the failed command's output.
    pub fn restore_beside(&self, options: &[&str], dir: &Path) -> Result<Detached, Output> {
        let id = format!("t{}", crate::tempdir::unique_token());
        let mut cmd = Command::new(&self.bin);
        cmd.env("TORPOR_STATE_DIR", self.state_dir.path())
            .arg("restore")
            .arg("-d")
            .arg("--name")
            .arg(&id)
            .args(options)
            .arg(dir);
        let out = run_command(cmd, None, Duration::from_secs(120));
        if out.code() != 0 {
            return Err(out);
        }
        assert_eq!(out.stdout_str().trim(), id, "restore -d prints the ID");
        Ok(Detached {
            bin: self.bin.clone(),
            id,
            state_dir: self.state_dir.clone(),
        })
    }

    /// `torpor run -d --name ID --from DIR OPTIONS` in this sandbox's state directory: a
    /// clone of the checkpoint DIR, or the failed command's output.
    pub fn clone_beside(&self, options: &[&str], dir: &Path) -> Result<Detached, Output> {
        let id = format!("t{}", crate::tempdir::unique_token());
        let mut cmd = Command::new(&self.bin);
        cmd.env("TORPOR_STATE_DIR", self.state_dir.path())
            .arg("run")
            .arg("-d")
            .arg("--name")
            .arg(&id)
            .arg("--from")
            .arg(dir)
            .args(options);
        let out = run_command(cmd, None, Duration::from_secs(120));
        if out.code() != 0 {
            return Err(out);
        }
        assert_eq!(out.stdout_str().trim(), id, "run -d --from prints the ID");
        Ok(Detached {
            bin: self.bin.clone(),
            id,
            state_dir: self.state_dir.clone(),
        })
    }

    /// `torpor fork ID -d --name NEW OPTIONS` in this sandbox's state directory: a new
    /// instance of this sandbox as it is now, or the failed command's output.
    pub fn fork_beside(&self, options: &[&str]) -> Result<Detached, Output> {
        let id = format!("f{}", crate::tempdir::unique_token());
        let mut cmd = Command::new(&self.bin);
        cmd.env("TORPOR_STATE_DIR", self.state_dir.path())
            .arg("fork")
            .arg(&self.id)
            .arg("-d")
            .arg("--name")
            .arg(&id)
            .args(options);
        let out = run_command(cmd, None, Duration::from_secs(120));
        if out.code() != 0 {
            return Err(out);
        }
        assert_eq!(out.stdout_str().trim(), id, "fork -d prints the ID");
        Ok(Detached {
            bin: self.bin.clone(),
            id,
            state_dir: self.state_dir.clone(),
        })
    }

    /// The state directory's base (TORPOR_STATE_DIR).
    pub fn state_base(&self) -> &Path {
        self.state_dir.path()
    }

    /// The sandbox's own directory.
    pub fn dir(&self) -> PathBuf {
        self.state_dir.path().join(&self.id)
    }

    /// `torpor ARGS…` in this sandbox's state directory.
    pub fn verb_in_base(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(&self.bin);
        cmd.env("TORPOR_STATE_DIR", self.state_dir.path())
            .args(args);
        run_command(cmd, None, Duration::from_secs(180))
    }

    /// `torpor VERB ID EXTRA…`.
    pub fn verb(&self, verb: &str, extra: &[&str]) -> Output {
        let mut cmd = Command::new(&self.bin);
        cmd.env("TORPOR_STATE_DIR", self.state_dir.path()).arg(verb);
        if verb == "delete" {
            cmd.args(extra).arg(&self.id);
        } else {
            cmd.arg(&self.id).args(extra);
        }
        run_command(cmd, None, Duration::from_secs(180))
    }

    /// `torpor VERB ID`, which must succeed; its stdout.
    pub fn ok(&self, verb: &str, extra: &[&str]) -> String {
        let o = self.verb(verb, extra);
        assert_eq!(o.code(), 0, "torpor {verb} {}: {}", self.id, o.stderr_str());
        o.stdout_str()
    }

    /// A numeric or string field of `torpor stats` (as text, quotes stripped).
    pub fn stat(&self, field: &str) -> String {
        let s = self.ok("stats", &[]);
        json_field(&s, field).unwrap_or_else(|| panic!("no field {field:?} in {s}"))
    }

    /// A numeric field of `torpor stats`.
    pub fn stat_u64(&self, field: &str) -> u64 {
        let v = self.stat(field);
        v.parse()
            .unwrap_or_else(|_| panic!("{field} = {v:?} is not a number"))
    }

    /// The holder process's pid.
    pub fn pid(&self) -> u32 {
        self.stat_u64("pid") as u32
    }

    /// Whether process `pid` has ended: gone, or a zombie its (adoptive) parent has not
    /// reaped yet (a holder after `delete`).
    pub fn process_ended(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                Some(
                    s[s.rfind(')')? + 1..]
                        .split_whitespace()
                        .next()?
                        .to_string(),
                )
            })
            .is_none_or(|state| state == "Z" || state == "X")
    }

    /// Polls `f` every 20 ms until it returns true or `timeout` passes.
    pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        f()
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        let _ = self.verb("delete", &["--force"]);
    }
}

/// The value of top-level `"field":` in a one-line JSON object (a small reader, enough for
/// `torpor stats`, whose top-level values are numbers, strings or objects).
pub fn json_field(json: &str, field: &str) -> Option<String> {
    let key = format!("\"{field}\":");
    let mut depth = 0i32;
    let bytes = json.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth -= 1,
            b'"' if depth == 1 && json[i..].starts_with(&key) => {
                let rest = json[i + key.len()..].trim_start();
                if let Some(r) = rest.strip_prefix('"') {
                    return r.find('"').map(|e| r[..e].to_string());
                }
                let end = rest.find([',', '}']).unwrap_or(rest.len());
                return Some(rest[..end].trim().to_string());
            }
            b'"' => {
                // skip a string
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields() {
        let j = r#"{"a":1,"b":"x","c":{"a":5,"d":"y"},"e":[1,2],"state":"woken"}"#;
        assert_eq!(json_field(j, "a").as_deref(), Some("1"));
        assert_eq!(json_field(j, "b").as_deref(), Some("x"));
        assert_eq!(json_field(j, "d"), None);
        assert_eq!(json_field(j, "state").as_deref(), Some("woken"));
    }
}
