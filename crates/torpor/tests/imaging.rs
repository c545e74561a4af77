//! Imaging workloads (FunctionBench's image and video processing) from
//! Debian's python3-pil and python3-opencv, unmodified, in torpor: the
//! scripts of `tests/apps/imaging/` run in the `python` root filesystem (see
//! `scripts/build-rootfs.sh`) under torpor and natively (`chroot ROOT
//! python3 ...`), and must write the same files byte for byte.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use testutil::{run::run_command, Output, Torpor};

/// One run may import NumPy and OpenCV (hundreds of shared libraries).
const TIMEOUT: Duration = Duration::from_secs(300);

fn torpor() -> Torpor {
    Torpor::new(env!("CARGO_BIN_EXE_torpor"))
}

/// A fresh directory `/tmp/imaging-<random>` inside the root (so that both
/// the sandbox and `chroot` see it), holding a copy of `tests/apps/imaging/`;
/// removed on drop (kept with `TORPOR_KEEP_TMP=1`).
struct WorkDir {
    host: PathBuf,
    guest: String,
}

impl WorkDir {
    fn new(root: &Path) -> WorkDir {
        let guest = format!("/tmp/imaging-{}", testutil::unique_token());
        let host = root.join(&guest[1..]);
        std::fs::create_dir_all(&host).unwrap_or_else(|e| panic!("create {}: {e}", host.display()));
        let apps = testutil::workspace_root().join("tests/apps/imaging");
        for entry in std::fs::read_dir(&apps).unwrap_or_else(|e| panic!("{}: {e}", apps.display()))
        {
            let path = entry.expect("read_dir entry").path();
            if path.extension().is_some_and(|e| e == "py") {
                let to = host.join(path.file_name().expect("file name"));
                std::fs::copy(&path, &to)
                    .unwrap_or_else(|e| panic!("copy {} to {}: {e}", path.display(), to.display()));
            }
        }
        WorkDir { host, guest }
    }

    /// A new empty subdirectory; returns its guest path.
    fn subdir(&self, name: &str) -> String {
        std::fs::create_dir(self.host.join(name)).expect("create subdirectory");
        format!("{}/{name}", self.guest)
    }

    /// The host path of a guest path inside this directory.
    fn host_path(&self, guest: &str) -> PathBuf {
        let rel = guest
            .strip_prefix(&self.guest)
            .and_then(|r| r.strip_prefix('/'))
            .unwrap_or_else(|| panic!("{guest} is not under {}", self.guest));
        self.host.join(rel)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if std::env::var("TORPOR_KEEP_TMP").as_deref() == Ok("1") {
            eprintln!("keeping {}", self.host.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.host);
    }
}

/// The guest's environment, for both runs: no `.pyc` files written next to
/// the scripts, the same locale.
const GUEST_ENV: &[(&str, &str)] = &[
    (
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ),
    ("PYTHONDONTWRITEBYTECODE", "1"),
    ("LANG", "C.UTF-8"),
];

/// Runs `python3 ARGS` from the root natively, under `chroot`.
fn python3_native(root: &Path, args: &[&str]) -> Output {
    let mut c = Command::new("chroot");
    c.arg(root)
        .arg("/usr/bin/python3")
        .args(args)
        .env_clear()
        .envs(GUEST_ENV.iter().copied());
    run_command(c, None, TIMEOUT)
}

/// Runs `python3 ARGS` from the root in torpor.
/// Runs python3 in torpor with the work directory mounted as a volume at the same guest path
/// (the sandbox's other writes stay in its copy-on-write layer).
fn python3_in_torpor(root: &Path, work: &WorkDir, args: &[&str]) -> Output {
    let mut run = torpor()
        .run(root, "/usr/bin/python3")
        .option(
            "--volume",
            format!("{}:{}", work.host.display(), work.guest),
        )
        .args(args)
        .memory("2G")
        .host_env("TORPOR_LOG", "warn")
        .timeout(TIMEOUT);
    for (k, v) in GUEST_ENV {
        run = run.guest_env(&format!("{k}={v}"));
    }
    run.output()
}

/// Asserts that the torpor run printed what the native one did, on stdout and on stderr (where
/// torpor's own warnings go too, an unsupported syscall among them).
#[track_caller]
fn assert_same_output(guest: &Output, native: &Output) {
    assert_eq!(
        (guest.stdout_str(), guest.stderr_str()),
        (native.stdout_str(), native.stderr_str()),
        "torpor and native outputs differ\ntorpor: {guest:?}\nnative: {native:?}"
    );
}

/// Asserts that two files hold the same bytes.
#[track_caller]
fn assert_same_file(native: &Path, guest: &Path) {
    let a = std::fs::read(native).unwrap_or_else(|e| panic!("{}: {e}", native.display()));
    let b = std::fs::read(guest).unwrap_or_else(|e| panic!("{}: {e}", guest.display()));
    assert!(!a.is_empty(), "{} is empty", native.display());
    if a != b {
        let first = a.iter().zip(&b).position(|(x, y)| x != y);
        panic!(
            "{} ({} bytes) and {} ({} bytes) differ (first difference at byte {first:?})",
            native.display(),
            a.len(),
            guest.display(),
            b.len()
        );
    }
}

fn python_root() -> Option<PathBuf> {
    testutil::debian_rootfs("python")
}

#[test]
fn pillow_resize_matches_native() {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = python_root() else { return };
    let work = WorkDir::new(&root);
    let script = format!("{}/resize.py", work.guest);

    let native_dir = work.subdir("native");
    let native = python3_native(&root, &[&script, &native_dir]);
    native.assert_code(0);
    let guest_dir = work.subdir("torpor");
    let guest = python3_in_torpor(&root, &work, &[&script, &guest_dir]);
    guest.assert_code(0);
    println!("native: {:?}, torpor: {:?}", native.elapsed, guest.elapsed);

    assert_same_output(&guest, &native);
    for name in ["input.png", "small.png", "large.jpg"] {
        assert_same_file(
            &work.host_path(&format!("{native_dir}/{name}")),
            &work.host_path(&format!("{guest_dir}/{name}")),
        );
    }
}

#[test]
fn opencv_grayscale_video_matches_native() {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = python_root() else { return };
    let work = WorkDir::new(&root);
    let script = format!("{}/video.py", work.guest);

    // One input for both runs, made natively: 60 frames of 320x240, MJPG.
    let input = format!("{}/input.avi", work.guest);
    python3_native(&root, &[&script, "make", &input, "60", "320", "240"]).assert_code(0);

    // MJPG in an AVI holds nothing that varies from run to run (no time
    // stamps, no encoder randomness): the files themselves are compared.
    let native_out = format!("{}/native.avi", work.guest);
    let native = python3_native(&root, &[&script, "gray", &input, &native_out]);
    native.assert_code(0);
    let guest_out = format!("{}/torpor.avi", work.guest);
    let guest = python3_in_torpor(&root, &work, &[&script, "gray", &input, &guest_out]);
    guest.assert_code(0);
    println!("native: {:?}, torpor: {:?}", native.elapsed, guest.elapsed);

    assert!(native.stdout_str().starts_with("frames=60 "), "{native:?}");
    // The same frames were decoded, and the same file written (the line
    // also names the output file's size and checksum).
    assert_same_output(&guest, &native);
    assert_same_file(&work.host_path(&native_out), &work.host_path(&guest_out));
}
