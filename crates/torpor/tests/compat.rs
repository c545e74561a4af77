//! Language runtimes from Debian packages, unmodified, in torpor: root
//! filesystems built by `scripts/build-rootfs.sh` (debootstrap, cached; see
//! `testutil::debian`), their programs run end to end and compared with the
//! same code run natively.

use std::path::PathBuf;
use std::process::Command;

use testutil::{run::run_command, Output, Torpor, DEFAULT_TIMEOUT};

fn torpor() -> Torpor {
    Torpor::new(env!("CARGO_BIN_EXE_torpor"))
}

/// Runs `/usr/bin/python3 -c CODE` in the Debian `python` root.
fn python3_in_torpor(root: &std::path::Path, code: &str) -> Output {
    torpor().run(root, "/usr/bin/python3").args(["-c", code]).host_env("TORPOR_LOG", "off").output()
}

/// Runs `python3 -c CODE` natively: the host's `python3` when it has one,
/// else the root's own python3 under `chroot` (the build needed root, so
/// chroot works).
fn python3_native(root: &std::path::Path, code: &str) -> Output {
    let host = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).map(|d| d.join("python3")).find(|p| p.is_file())
    });
    let cmd = match host {
        Some(python3) => {
            let mut c = Command::new(python3);
            c.args(["-c", code]);
            c
        }
        None => {
            let mut c = Command::new("chroot");
            c.arg(root).args(["/usr/bin/python3", "-c", code]).env_clear().env("PATH", "/usr/bin:/bin");
            c
        }
    };
    run_command(cmd, None, DEFAULT_TIMEOUT)
}

fn python_root() -> Option<PathBuf> {
    testutil::debian_rootfs("python")
}

#[test]
fn python3_prints() {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = python_root() else { return };
    let out = python3_in_torpor(&root, "print('hello from python3 in torpor', 6 * 7)");
    out.assert_code(0);
    assert_eq!(out.stdout_str(), "hello from python3 in torpor 42\n", "{out:?}");
}

#[test]
fn python3_exit_status_passes_through() {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = python_root() else { return };
    let out = python3_in_torpor(&root, "import sys; print('bye'); sys.exit(3)");
    out.assert_code(3);
    assert_eq!(out.stdout_str(), "bye\n", "{out:?}");
}

#[test]
fn python3_computes() {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = python_root() else { return };
    let code = "import json, hashlib\n\
                print(json.dumps({'h': hashlib.sha256(b'torpor').hexdigest(), \
                'n': sum(i * i for i in range(100000)), 's': sorted('torpor')}))";
    let native = python3_native(&root, code);
    native.assert_code(0);
    let guest = python3_in_torpor(&root, code);
    guest.assert_code(0);
    assert!(guest.stdout_str().contains("\"h\": \""), "{guest:?}");
    assert_eq!(guest.stdout_str(), native.stdout_str(), "torpor and native outputs differ\ntorpor: {guest:?}\nnative: {native:?}");
}
