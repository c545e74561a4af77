//! Running `torpor` (or a program natively) with captured output and a
//! timeout. A process still running at its deadline is killed (SIGKILL) and
//! the call panics with what it printed so far: a hang fails the test instead
//! of hanging CI.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Default deadline for one run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// What a finished process did.
#[derive(Clone)]
pub struct Output {
    /// How it ended.
    pub status: ExitStatus,
    /// Everything written to stdout.
    pub stdout: Vec<u8>,
    /// Everything written to stderr.
    pub stderr: Vec<u8>,
    /// Wall time from spawn to exit.
    pub elapsed: Duration,
}

impl Output {
    /// The status as a shell shows it: the exit code, or 128 + the signal
    /// number for a process killed by a signal.
    pub fn code(&self) -> i32 {
        match (self.status.code(), self.status.signal()) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => -1,
        }
    }

    /// Stdout as (lossy) UTF-8.
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Stderr as (lossy) UTF-8.
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// Panics unless this (a run under torpor) printed exactly what `native` (the same
    /// program run natively) printed on stdout, showing both and this run's stderr;
    /// `what` names the case.
    #[track_caller]
    pub fn assert_same_stdout(&self, native: &Output, what: &str) {
        assert!(
            self.stdout == native.stdout,
            "{what}: stdout differs\n--- native:\n{}\n--- torpor:\n{}\n--- torpor stderr:\n{}",
            native.stdout_str(),
            self.stdout_str(),
            self.stderr_str()
        );
    }

    /// Panics, showing both streams, unless the status is `code`.
    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Output {
        assert_eq!(self.code(), code, "unexpected exit status\n{self:?}");
        self
    }
}

impl fmt::Debug for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX: usize = 4000;
        let clip = |b: &[u8]| {
            let s = String::from_utf8_lossy(b);
            if s.len() > MAX {
                let mut cut = MAX;
                while !s.is_char_boundary(cut) {
                    cut -= 1;
                }
                format!("{}... [{} bytes in all]", &s[..cut], b.len())
            } else {
                s.into_owned()
            }
        };
        write!(
            f,
            "status {} ({:?}) after {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}\n--------------",
            self.code(),
            self.status,
            self.elapsed,
            clip(&self.stdout),
            clip(&self.stderr)
        )
    }
}

type Sink = Arc<Mutex<Vec<u8>>>;

fn drain(mut from: impl Read + Send + 'static, into: Sink) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16384];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => into
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend_from_slice(&buf[..n]),
            }
        }
    })
}

/// A process running in the background with its output being captured.
/// Dropping it kills the process.
pub struct Running {
    child: Child,
    started: Instant,
    stdout: Sink,
    stderr: Sink,
    readers: Vec<JoinHandle<()>>,
    what: String,
}

impl Running {
    /// Spawns `cmd` with stdout and stderr captured and `stdin` (if any) fed
    /// to it, then closed; without `stdin`, standard input is /dev/null.
    ///
    /// # Panics
    ///
    /// When the program cannot be started.
    pub fn spawn(mut cmd: Command, stdin: Option<Vec<u8>>) -> Running {
        let what = format!("{cmd:?}");
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let started = Instant::now();
        // A program just written can be briefly "busy" (ETXTBSY): another test thread forked
        // while its write descriptor was open, and the child holds it until its own exec.
        let mut tries = 0;
        let mut child = loop {
            match cmd.spawn() {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
                r => break r.unwrap_or_else(|e| panic!("cannot start {what}: {e}")),
            }
        };
        let (stdout, stderr): (Sink, Sink) = Default::default();
        let mut readers = vec![
            drain(child.stdout.take().expect("piped stdout"), stdout.clone()),
            drain(child.stderr.take().expect("piped stderr"), stderr.clone()),
        ];
        if let Some(data) = stdin {
            let mut pipe = child.stdin.take().expect("piped stdin");
            readers.push(std::thread::spawn(move || {
                let _ = pipe.write_all(&data);
            }));
        }
        Running {
            child,
            started,
            stdout,
            stderr,
            readers,
            what,
        }
    }

    /// The process id (of `torpor` itself, for a sandbox).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// When the process was spawned.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Stdout captured so far.
    pub fn stdout_so_far(&self) -> Vec<u8> {
        self.stdout
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stderr captured so far.
    pub fn stderr_so_far(&self) -> Vec<u8> {
        self.stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Has the process exited? (Does not reap it for good: [`Running::wait`]
    /// still returns its output.)
    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    fn collect(&mut self, status: ExitStatus) -> Output {
        let elapsed = self.started.elapsed();
        // A descendant that outlived the process may still hold the pipes:
        // give the readers a moment, then leave them behind.
        let deadline = Instant::now() + Duration::from_secs(3);
        while self.readers.iter().any(|r| !r.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        for r in self.readers.drain(..) {
            if r.is_finished() {
                let _ = r.join();
            }
        }
        Output {
            status,
            stdout: std::mem::take(&mut *self.stdout.lock().unwrap_or_else(|p| p.into_inner())),
            stderr: std::mem::take(&mut *self.stderr.lock().unwrap_or_else(|p| p.into_inner())),
            elapsed,
        }
    }

    /// Waits up to `timeout` for the process to exit and returns its output.
    ///
    /// # Panics
    ///
    /// At the deadline, after killing the process, with its output so far.
    pub fn wait(mut self, timeout: Duration) -> Output {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return self.collect(status),
                Ok(None) if Instant::now() >= deadline => {
                    let out = self.kill();
                    panic!(
                        "timed out after {timeout:?}, killed: {}\n{out:?}",
                        self.what
                    );
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => panic!("waiting for {}: {e}", self.what),
            }
        }
    }

    /// Kills the process (SIGKILL) and returns its output.
    pub fn kill(&mut self) -> Output {
        let _ = self.child.kill();
        let status = self
            .child
            .wait()
            .unwrap_or_else(|e| panic!("waiting for {}: {e}", self.what));
        self.collect(status)
    }

    /// Sends SIGTERM and waits up to `timeout` (then SIGKILL).
    pub fn terminate(mut self, timeout: Duration) -> Output {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return self.collect(status);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.kill()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `cmd` to completion within `timeout`, feeding it `stdin`.
///
/// # Panics
///
/// When it cannot start, or at the deadline (after killing it).
pub fn run_command(cmd: Command, stdin: Option<Vec<u8>>, timeout: Duration) -> Output {
    Running::spawn(cmd, stdin).wait(timeout)
}

/// Runs `program ARGS` natively in directory `cwd`, with an empty environment
/// plus `env`, within [`DEFAULT_TIMEOUT`].
pub fn native<S: AsRef<OsStr>>(
    program: &Path,
    args: &[S],
    cwd: &Path,
    env: &[(&str, &str)],
    stdin: Option<&[u8]>,
) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().copied());
    run_command(cmd, stdin.map(<[u8]>::to_vec), DEFAULT_TIMEOUT)
}

/// The `torpor` binary, to build commands with.
#[derive(Debug, Clone)]
pub struct Torpor {
    bin: PathBuf,
}

impl Torpor {
    /// Uses the binary at `bin` (in the torpor package's integration tests:
    /// `env!("CARGO_BIN_EXE_torpor")`).
    pub fn new(bin: impl Into<PathBuf>) -> Torpor {
        Torpor { bin: bin.into() }
    }

    /// Uses [`crate::torpor_bin`].
    pub fn from_env() -> Torpor {
        Torpor::new(crate::torpor_bin())
    }

    /// The binary's path.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// `torpor ARGS`, any subcommand, run within [`DEFAULT_TIMEOUT`].
    pub fn cmd<S: AsRef<OsStr>>(&self, args: &[S]) -> Output {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args);
        run_command(cmd, None, DEFAULT_TIMEOUT)
    }

    /// Starts building `torpor run [OPTIONS] ROOTFS -- PROGRAM [ARGS]`.
    pub fn run(&self, rootfs: impl AsRef<Path>, program: &str) -> RunBuilder {
        RunBuilder {
            bin: self.bin.clone(),
            options: Vec::new(),
            rootfs: rootfs.as_ref().to_path_buf(),
            program: program.into(),
            args: Vec::new(),
            host_env: Vec::new(),
            stdin: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// A `torpor run` command line being built.
#[derive(Debug, Clone)]
pub struct RunBuilder {
    bin: PathBuf,
    options: Vec<OsString>,
    rootfs: PathBuf,
    program: OsString,
    args: Vec<OsString>,
    host_env: Vec<(OsString, OsString)>,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
}

impl RunBuilder {
    /// Appends one argument for the guest program.
    pub fn arg(mut self, a: impl AsRef<OsStr>) -> Self {
        self.args.push(a.as_ref().to_owned());
        self
    }

    /// Appends arguments for the guest program.
    pub fn args<S: AsRef<OsStr>>(mut self, a: impl IntoIterator<Item = S>) -> Self {
        self.args
            .extend(a.into_iter().map(|s| s.as_ref().to_owned()));
        self
    }

    /// Adds an option before ROOTFS (e.g. `option("--memory", "1G")`).
    pub fn option(mut self, name: &str, value: impl AsRef<OsStr>) -> Self {
        self.options.push(name.into());
        self.options.push(value.as_ref().to_owned());
        self
    }

    /// `--memory SIZE`.
    pub fn memory(self, size: &str) -> Self {
        self.option("--memory", size)
    }

    /// `--publish SPEC`.
    pub fn publish(self, spec: &str) -> Self {
        self.option("--publish", spec)
    }

    /// `--env K=V` (the guest's environment).
    pub fn guest_env(self, kv: &str) -> Self {
        self.option("--env", kv)
    }

    /// `--cwd DIR`.
    pub fn cwd(self, dir: &str) -> Self {
        self.option("--cwd", dir)
    }

    /// Sets an environment variable of the torpor process itself (e.g.
    /// `TORPOR_TIMINGS`, `TORPOR_LOG`).
    pub fn host_env(mut self, k: &str, v: &str) -> Self {
        self.host_env.push((k.into(), v.into()));
        self
    }

    /// Feeds `data` to standard input (default: /dev/null).
    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(data.into());
        self
    }

    /// Sets the deadline (default [`DEFAULT_TIMEOUT`]).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// The command line, ready to spawn.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("run")
            .args(&self.options)
            .arg(&self.rootfs)
            .arg("--")
            .arg(&self.program)
            .args(&self.args);
        cmd.envs(self.host_env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// Runs to completion within the timeout.
    ///
    /// # Panics
    ///
    /// At the deadline, after killing torpor, with its output so far.
    pub fn output(self) -> Output {
        let cmd = self.command();
        run_command(cmd, self.stdin, self.timeout)
    }

    /// Starts in the background (killed when the handle is dropped).
    pub fn spawn(self) -> Running {
        let cmd = self.command();
        Running::spawn(cmd, self.stdin)
    }
}
