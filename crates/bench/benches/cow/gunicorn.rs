//! The memory of Debian's gunicorn with `--preload` (issue 35's gate: four workers of one
//! Python app at most 1.5x one worker's PSS, as natively): a master that holds
//! [`DATA_MIB`] MiB of Python `bytes` it made before forking its workers, which serve
//! `wsgiref`'s demo app. Natively in a chroot of the `wsgi` root (`scripts/build-rootfs.sh`:
//! python3 and gunicorn), and in a sandbox on that root; the PSS of the whole process tree
//! (natively) or of the sandbox (`torpor stats`' `pss_bytes`: the holder and its stubs) once
//! every worker has booted.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The master's data, MiB.
pub const DATA_MIB: u64 = 100;

/// The program the master runs: makes the data, then gunicorn with `workers`.
fn script(workers: u32) -> String {
    format!(
        "import sys\n\
         DATA = [bytes([i % 251]) * 4096 for i in range({pages})]\n\
         sys.argv = ['gunicorn', '--preload', '-w', '{workers}', '-b', '127.0.0.1:0', \
         'wsgiref.simple_server:demo_app']\n\
         from gunicorn.app.wsgiapp import run\n\
         run()\n",
        pages = DATA_MIB * 256
    )
}

/// How many workers the log says have booted.
fn booted(log: &str) -> usize {
    log.matches("Booting worker with pid").count()
}

/// Waits until `log()` shows `workers` booted workers, then a second more (their imports
/// settle); an error with the log after two minutes.
fn wait_booted(workers: u32, log: impl Fn() -> String) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while booted(&log()) < workers as usize {
        if Instant::now() > deadline {
            return Err(format!("workers not booted: {}", log()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    Ok(())
}

/// gunicorn with `workers` run natively in a chroot of `root`: the PSS of its tree, bytes.
pub fn native_pss(root: &Path, workers: u32) -> Result<u64, String> {
    let log = testutil::TempDir::new("gunicorn-native");
    let log_path = log.path().join("log");
    let file = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
    let mut child = Command::new("/usr/sbin/chroot")
        .arg(root)
        .args(["/usr/bin/python3", "-c", &script(workers)])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .map_err(|e| format!("chroot: {e}"))?;
    let read = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let pss = wait_booted(workers, read).map(|()| super::prefork::tree_pss(child.id()));
    // The master stops its workers at SIGTERM.
    // SAFETY: signals a process of our own.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    pss
}

/// gunicorn with `workers` in a detached sandbox on `root`: `torpor stats`' PSS, bytes, a
/// second after every worker has booted.
pub fn sandbox_pss(root: &Path, workers: u32, platform: &str, cow: bool) -> Result<u64, String> {
    let script = script(workers);
    let args = ["/usr/bin/python3", "-c", &script];
    let all_booted = |log: &str| {
        let done = booted(log) >= workers as usize;
        if done {
            std::thread::sleep(Duration::from_secs(1));
        }
        done
    };
    super::prefork::detached_pss(root, &args, platform, cow, all_booted)
}
