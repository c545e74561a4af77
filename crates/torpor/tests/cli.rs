//! The `torpor run` error cases: each is one `torpor: ` line on stderr and
//! exit status 125, and nothing runs.

use std::process::Command;

use testutil::{run::run_command, Output, Rootfs, Torpor, DEFAULT_TIMEOUT};

fn torpor() -> Torpor {
    Torpor::new(env!("CARGO_BIN_EXE_torpor"))
}

/// Asserts exit 125 and a stderr of exactly one line starting `torpor: `
/// (logging is off so that only the error shows); returns that line.
#[track_caller]
fn assert_cli_error(out: &Output) -> String {
    assert_eq!(out.code(), 125, "expected exit status 125\n{out:?}");
    let err = out.stderr_str();
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr\n{out:?}");
    assert!(
        lines[0].starts_with("torpor: "),
        "the error line must start with `torpor: `\n{out:?}"
    );
    assert!(out.stdout.is_empty(), "nothing may reach stdout\n{out:?}");
    lines[0].to_owned()
}

#[test]
fn missing_rootfs() {
    if !testutil::require_kvm() {
        return;
    }
    let gone = testutil::TempDir::new("torpor-gone");
    let path = gone.path().join("no-such-rootfs");
    let out = torpor()
        .run(&path, "/bin/busybox")
        .arg("true")
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_cli_error(&out);
}

#[test]
fn program_not_found() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let out = torpor()
        .run(r.path(), "/bin/no-such-program")
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_cli_error(&out);
}

#[test]
fn not_an_elf() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    r.binary("/bin/script", &testutil::guest_source("hello"));
    let out = torpor()
        .run(r.path(), "/bin/script")
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_cli_error(&out);
}

#[test]
fn dynamic_elf_without_its_interpreter_is_a_clear_error() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let dynamic = testutil::build_c(
        "hello-dynamic",
        &testutil::guest_source("hello"),
        false,
        &[],
    );
    assert!(
        !testutil::elf_is_static(&dynamic),
        "cc built a static binary without -static?"
    );
    r.binary("/bin/hello", &dynamic);
    let out = torpor()
        .run(r.path(), "/bin/hello")
        .host_env("TORPOR_LOG", "off")
        .output();
    let line = assert_cli_error(&out);
    assert!(
        line.contains("dynamic") && line.contains("ld-linux"),
        "the message must name the missing interpreter\n{out:?}"
    );
}

#[test]
fn dynamic_elf_runs_with_the_roots_own_ld_so_and_libc() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let dynamic = testutil::build_c(
        "hello-dynamic",
        &testutil::guest_source("hello"),
        false,
        &[],
    );
    r.binary("/bin/hello", &dynamic);
    // The host's loader and C library, as a Debian root filesystem has them.
    r.binary(
        "/lib64/ld-linux-x86-64.so.2",
        &std::fs::canonicalize("/lib64/ld-linux-x86-64.so.2").unwrap(),
    );
    r.binary(
        "/lib/x86_64-linux-gnu/libc.so.6",
        &std::fs::canonicalize("/lib/x86_64-linux-gnu/libc.so.6").unwrap(),
    );
    let native = testutil::native(&dynamic, &["one", "two"], r.path(), &[], None);
    let out = torpor()
        .run(r.path(), "/bin/hello")
        .args(["one", "two"])
        .host_env("TORPOR_LOG", "off")
        .output();
    out.assert_code(native.code());
    assert_eq!(out.stdout_str(), native.stdout_str());
}

#[test]
fn static_hello_runs() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("hello");
    let out = torpor().run(r.path(), &prog).args(["a", "b c"]).output();
    out.assert_code(0);
    assert_eq!(
        out.stdout_str(),
        "hello from a guest, 2 argument(s)\narg 1: a\narg 2: b c\n",
        "{out:?}"
    );
}

#[test]
fn no_kvm_is_a_clear_error_and_auto_runs_on_trap() {
    if !testutil::require_kvm() {
        return;
    }
    // Hide /dev/kvm in a private mount namespace (needs root and unshare).
    let probe = Command::new("unshare")
        .args(["-m", "sh", "-c", "mount -t tmpfs none /dev"])
        .output();
    if !matches!(probe, Ok(ref o) if o.status.success()) {
        println!("skipped: cannot hide /dev/kvm here (unshare -m with a tmpfs on /dev failed)");
        return;
    }
    let r = Rootfs::new();
    let without_kvm = |platform: Option<&str>| {
        let mut cmd = Command::new("unshare");
        cmd.args([
            "-m",
            "sh",
            "-c",
            "mount -t tmpfs none /dev && exec \"$0\" \"$@\"",
        ])
        .arg(torpor().bin());
        if let Some(p) = platform {
            cmd.args(["--platform", p]);
        }
        cmd.args(["run"])
            .arg(r.path())
            .args(["--", "/bin/busybox", "echo", "ran"])
            .env("TORPOR_LOG", "off")
            .env_remove("TORPOR_PLATFORM");
        run_command(cmd, None, DEFAULT_TIMEOUT)
    };
    // The KVM platform asked for: one clear line.
    let out = without_kvm(Some("kvm"));
    let line = assert_cli_error(&out);
    assert!(
        line.to_lowercase().contains("kvm"),
        "the message must name /dev/kvm\n{out:?}"
    );
    // The default (auto) takes the trap platform.
    let out = without_kvm(None);
    out.assert_code(0);
    assert_eq!(out.stdout_str(), "ran\n", "{out:?}");
}
