//! Permissions between the sandbox's own users: file modes and owners on every path the
//! kernel resolves, sticky and set-group-ID directories, credentials (real, effective, saved,
//! filesystem ids; capabilities), set-user-ID programs, signals and `/proc/PID` files.
//!
//! `tests/guest/permissions.c` tries each operation as root, as a root without
//! CAP_DAC_OVERRIDE, as user 1000 and as nobody, and prints what each gave: its output in
//! torpor must be the native one (a chroot of the same root with a `/proc` of its own), so
//! every refusal is Linux's own, and every success too. Needs root on the host (the files'
//! owners) and /dev/kvm (or the trap platform).

use std::os::unix::fs::{chown, PermissionsExt};

use testutil::{Output, Rootfs, Torpor};

fn torpor() -> Torpor {
    Torpor::new(env!("CARGO_BIN_EXE_torpor"))
}

fn chmod(r: &Rootfs, rel: &str, mode: u32) {
    std::fs::set_permissions(r.host_path(rel), std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {rel}: {e}"));
}

fn own(r: &Rootfs, rel: &str, uid: u32, gid: u32) {
    chown(r.host_path(rel), Some(uid), Some(gid)).unwrap_or_else(|e| panic!("chown {rel}: {e}"));
}

/// A busybox root laid out as a Debian image's: root's files, a shadow file, a private home
/// of root and of user 1000, a sticky `/tmp`, a set-group-ID directory, a root-only program
/// and a set-user-ID-root one (both copies of the test program).
fn root_with_users() -> Rootfs {
    let r = Rootfs::new();
    r.file(
        "/etc/passwd",
        "root:x:0:0::/root:/bin/sh\nu1000:x:1000:1000::/home/u1000:/bin/sh\n\
         nobody:x:65534:65534::/:/bin/sh\n",
    )
    .file(
        "/etc/group",
        "root:x:0:\nshadow:x:42:\nstaff:x:50:\nnogroup:x:65534:\n",
    )
    .file("/etc/shadow", "root:*:19000:0:99999:7:::\n")
    .file("/root/secret", "root's\n")
    .file("/home/u1000/private", "1000's\n")
    .file("/tmp/rootfile", "root's\n")
    .file("/tmp/userfile", "1000's\n")
    .file("/tmp/chownme", "1000's\n")
    .dir("/usr/bin")
    .dir("/tmp/sgid")
    .dir("/proc");
    let program = r.guest_program("permissions");
    r.binary("/bin/rootonly", &r.host_path(&program));
    r.binary("/bin/suid", &r.host_path(&program));
    chmod(&r, "/etc/passwd", 0o644);
    own(&r, "/etc/shadow", 0, 42);
    chmod(&r, "/etc/shadow", 0o640);
    chmod(&r, "/root", 0o700);
    chmod(&r, "/root/secret", 0o600);
    own(&r, "/home/u1000", 1000, 1000);
    chmod(&r, "/home/u1000", 0o700);
    own(&r, "/home/u1000/private", 1000, 1000);
    chmod(&r, "/home/u1000/private", 0o600);
    chmod(&r, "/tmp/rootfile", 0o644);
    own(&r, "/tmp/userfile", 1000, 1000);
    own(&r, "/tmp/chownme", 1000, 1000);
    own(&r, "/tmp/sgid", 0, 50);
    chmod(&r, "/tmp/sgid", 0o2777);
    chmod(&r, "/bin/rootonly", 0o700);
    chmod(&r, "/bin/suid", 0o4755);
    r
}

/// The test program natively (see [`Rootfs::run_natively`]).
fn native(r: &Rootfs) -> Output {
    r.run_natively("/bin/permissions", false)
}

#[test]
fn users_are_held_to_linux_permissions_as_natively() {
    if !testutil::require_kvm() {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            std::env::var("TORPOR_REQUIRE_KVM").as_deref() != Ok("1"),
            "this test needs root (file owners)"
        );
        println!("skipped: needs root");
        return;
    }
    let r = root_with_users();
    // torpor first: it writes to a copy-on-write layer, leaving the root as it was for the
    // native run.
    let got = torpor()
        .run(r.path(), "/bin/permissions")
        .host_env("TORPOR_LOG", "off")
        .guest_env("PATH=/bin")
        .output();
    got.assert_code(0);
    let want = native(&r);
    want.assert_code(0);
    let (got, want) = (got.stdout_str(), want.stdout_str());
    // The checks themselves, so that a native run that refuses nothing cannot pass.
    for line in [
        "append /etc/passwd: EACCES",
        "read /etc/shadow: EACCES",
        "list /root: EACCES",
        "create /usr/bin/evil: EACCES",
        "unlink /tmp/rootfile: EPERM",
        "kill root TERM: EPERM",
        "sendto root's 0600 socket: EACCES",
        "root sends to its socket: ok",
        "read root environ: EACCES",
        "root without DAC reads 0600 of 1000: EACCES",
        "setuid program: uid=65534 euid=0 suid=0",
        "setuid program: uid=65534 euid=65534 suid=65534",
        "seteuid 0 from saved 0: ok",
        "sgid dir file group: 50",
        "chroot /tmp: EPERM",
        "chroot reads /u1000/private: ok",
        "chroot reads /etc/passwd: ENOENT",
        "write pipe-max-size: EACCES",
    ] {
        assert!(want.contains(line), "native run lacks {line:?}:\n{want}");
    }
    if got != want {
        let diff: Vec<String> = want
            .lines()
            .zip(got.lines())
            .filter(|(w, g)| w != g)
            .map(|(w, g)| format!("  native {w:?}\n  torpor {g:?}"))
            .collect();
        panic!(
            "torpor differs from Linux:\n{}\n--- torpor:\n{got}\n--- native:\n{want}",
            diff.join("\n")
        );
    }
}

/// `torpor run --user nobody`: the friendly form's user is held to the image's modes.
#[test]
fn run_as_nobody_cannot_touch_roots_files() {
    if !testutil::require_kvm() {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipped: needs root");
        return;
    }
    let r = root_with_users();
    let script = "busybox echo evil >> /etc/passwd; echo passwd $?; \
                  busybox cat /etc/shadow; echo shadow $?; \
                  busybox ls /root; echo root $?; \
                  busybox touch /usr/bin/evil; echo usrbin $?; \
                  busybox rm -f /tmp/rootfile; echo sticky $?; \
                  busybox touch /tmp/mine && busybox stat -c '%u:%g' /tmp/mine";
    let out = torpor()
        .run(r.path(), "/bin/busybox")
        .option("--user", "nobody")
        .args(["sh", "-c", script])
        .host_env("TORPOR_LOG", "off")
        .output();
    out.assert_code(0);
    assert_eq!(
        out.stdout_str(),
        "passwd 1\nshadow 1\nroot 1\nusrbin 1\nsticky 1\n65534:65534\n",
        "{out:?}"
    );
    // The same as root succeeds.
    let out = torpor()
        .run(r.path(), "/bin/busybox")
        .args([
            "sh",
            "-c",
            "busybox cat /etc/shadow >/dev/null && busybox ls /root && \
             busybox touch /usr/bin/ok && busybox rm /tmp/userfile && echo done",
        ])
        .host_env("TORPOR_LOG", "off")
        .output();
    out.assert_code(0);
    assert_eq!(out.stdout_str(), "secret\ndone\n", "{out:?}");
}

/// A `--volume`'s files are checked with their host owners and modes as seen through the
/// mount, for the application's user, never the holder's.
#[test]
fn volume_files_follow_their_host_owners() {
    if !testutil::require_kvm() {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipped: needs root");
        return;
    }
    let r = root_with_users();
    let vol = testutil::TempDir::new("torpor-volume");
    let private = vol.path().join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::write(private.join("data"), "1000's\n").unwrap();
    for p in [&private, &private.join("data")] {
        chown(p, Some(1000), Some(1000)).unwrap();
    }
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let volume = format!("{}:/data", vol.path().display());
    let script = "busybox cat /data/private/data; echo read $?; \
                  busybox touch /data/private/new; echo create $?";
    let run = |user: &str| {
        torpor()
            .run(r.path(), "/bin/busybox")
            .option("--user", user)
            .option("--volume", &volume)
            .args(["sh", "-c", script])
            .host_env("TORPOR_LOG", "off")
            .output()
    };
    let out = run("nobody");
    out.assert_code(0);
    assert_eq!(out.stdout_str(), "read 1\ncreate 1\n", "{out:?}");
    let out = run("u1000");
    out.assert_code(0);
    assert_eq!(out.stdout_str(), "1000's\nread 0\ncreate 0\n", "{out:?}");
    let made = std::fs::metadata(private.join("new")).expect("the file on the host");
    assert_eq!(
        (
            std::os::unix::fs::MetadataExt::uid(&made),
            std::os::unix::fs::MetadataExt::gid(&made)
        ),
        (1000, 1000),
        "a file the application made belongs to its user"
    );
}
