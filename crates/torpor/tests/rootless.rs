//! Rootless: a user who is not root, but may open `/dev/kvm` and `/dev/userfaultfd` (group
//! `kvm`, as distributions set them up), runs, hibernates, wakes and deletes sandboxes, with
//! its state under its own home (`~/.local/state/torpor`) and no setuid helper. The test
//! creates that user (`torpor-rootless`) and gives the group access to the two devices when
//! they are root's alone.
//!
//! Needs root (to create the user) and /dev/kvm: otherwise it prints "skipped" and passes,
//! unless TORPOR_REQUIRE_KVM=1.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use testutil::Rootfs;

const USER: &str = "torpor-rootless";

fn sh(cmd: &str) -> std::process::Output {
    Command::new("sh")
        .args(["-c", cmd])
        .output()
        .expect("running sh")
}

/// Creates the user and opens the devices to group `kvm`; false (skip) when not root.
fn set_up() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        if std::env::var("TORPOR_REQUIRE_KVM").as_deref() == Ok("1") {
            panic!("the rootless test needs root to create its user");
        }
        println!("skipped: the rootless test needs root to create its user");
        return false;
    }
    let out = sh(&format!(
        "getent group kvm >/dev/null || groupadd -r kvm; \
         id {USER} >/dev/null 2>&1 || useradd -m -G kvm {USER}; \
         usermod -aG kvm {USER}; \
         for d in /dev/kvm /dev/userfaultfd; do \
           [ -e $d ] || continue; \
           [ \"$(stat -c %g $d)\" = 0 ] && chgrp kvm $d; chmod g+rw $d; \
         done"
    ));
    assert!(out.status.success(), "set-up: {out:?}");
    true
}

/// Runs `torpor ARGS` as the user, in its home, with its own environment.
fn as_user(args: &[&str]) -> std::process::Output {
    let home = format!("/home/{USER}");
    Command::new("runuser")
        .args(["-u", USER, "--", "env", "-i"])
        .arg(format!("HOME={home}"))
        .arg("PATH=/usr/bin:/bin")
        .arg("TORPOR_LOG=warn")
        .arg(env!("CARGO_BIN_EXE_torpor"))
        .args(args)
        .current_dir("/")
        .output()
        .expect("runuser")
}

/// Makes a test root readable by everyone (the user runs from it).
fn open_up(p: &Path) {
    let mut cur = Some(p);
    while let Some(d) = cur {
        if let Ok(m) = std::fs::metadata(d) {
            let mode = m.permissions().mode();
            if m.uid() == 0 && mode & 0o005 != 0o005 && d != Path::new("/") {
                let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode | 0o005));
            }
        }
        cur = d.parent();
    }
    let _ = sh(&format!("chmod -R a+rX '{}'", p.display()));
}

#[test]
fn a_user_who_is_not_root_runs_hibernates_wakes_and_deletes() {
    if !testutil::require_kvm() || !set_up() {
        return;
    }
    let r = Rootfs::new();
    let hello = r.guest_program("hello");
    let server = r.guest_program("http_server");
    open_up(r.path());
    let root = r.path().to_str().expect("utf-8 path");

    let out = as_user(&["run", root, "--", &hello]);
    assert!(out.status.success(), "foreground run: {out:?}");
    assert!(!out.stdout.is_empty());

    let port = testutil::free_port();
    let publish = format!("{port}:8080");
    let out = as_user(&["run", "-d", "-p", &publish, root, "--", &server, "8080"]);
    assert!(out.status.success(), "run -d: {out:?}");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let state = format!("/home/{USER}/.local/state/torpor/{id}");
    assert!(
        Path::new(&state).is_dir(),
        "state under the user's home: {state}"
    );
    let meta = std::fs::metadata(&state).expect("state dir");
    let uid = sh(&format!("id -u {USER}"));
    let uid: u32 = String::from_utf8_lossy(&uid.stdout)
        .trim()
        .parse()
        .expect("uid");
    assert_eq!(meta.uid(), uid, "the state belongs to the user");

    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let get = || testutil::http_get(addr, "/", std::time::Duration::from_secs(5));
    assert!(testutil::Detached::wait_until(
        std::time::Duration::from_secs(10),
        || get().is_ok()
    ));
    let out = as_user(&["hibernate", &id]);
    assert!(out.status.success(), "hibernate: {out:?}");
    let stats = as_user(&["stats", &id]);
    assert!(
        String::from_utf8_lossy(&stats.stdout).contains("\"state\":\"hibernated\""),
        "{stats:?}"
    );
    assert!(get().is_ok(), "a request wakes it");
    let out = as_user(&["delete", "--force", &id]);
    assert!(out.status.success(), "delete: {out:?}");
    assert!(!Path::new(&state).exists(), "delete removes the state");
}
