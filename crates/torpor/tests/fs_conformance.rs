//! Errno conformance of the path and file syscalls, gVisor-style: `tests/guest/fs_conformance.c`
//! runs natively (in a scratch directory on the host) and in torpor (in `/tmp` of a throwaway
//! root on the same host filesystem), and the two outputs must be identical, line for line.
//! The program prints one line per check (call, return value, errno name) and nothing that
//! differs between two runs (no pids, inode or fd numbers, no times it did not set).
//!
//! Both runs are root's: the runtime runs as root on the host and the guest is root inside.
//!
//! Deliberate differences are kept out of the program and listed in
//! `docs/results/fs-conformance.md`: device nodes (mknod S_IFCHR/S_IFBLK is EPERM in the
//! sandbox), `trusted.*`/`security.*` extended attributes (EPERM to set), POSIX record locks
//! between two processes of one sandbox (they share one host process, so they do not conflict),
//! and EXDEV (a sandbox root is one host filesystem).
//!
//! Needs /dev/kvm: without it the test prints "skipped" and passes, unless
//! TORPOR_REQUIRE_KVM=1.

use testutil::{Output, Rootfs, TempDir, Torpor};

fn torpor() -> Torpor {
    Torpor::new(env!("CARGO_BIN_EXE_torpor"))
}

/// A readable diff of two outputs: every line that differs, with its line number and the
/// section (`## name`) it belongs to.
fn diff(native: &str, sandboxed: &str) -> Option<String> {
    let (a, b): (Vec<&str>, Vec<&str>) = (native.lines().collect(), sandboxed.lines().collect());
    let mut out = String::new();
    let mut section = "";
    let mut shown = 0;
    for i in 0..a.len().max(b.len()) {
        let (x, y) = (a.get(i).copied(), b.get(i).copied());
        if let Some(s) = x.filter(|l| l.starts_with("## ")) {
            section = s;
        }
        if x != y {
            shown += 1;
            if shown <= 60 {
                out.push_str(&format!(
                    "line {} [{section}]\n  native: {}\n  torpor: {}\n",
                    i + 1,
                    x.unwrap_or("<missing>"),
                    y.unwrap_or("<missing>")
                ));
            }
        }
    }
    if shown == 0 {
        return None;
    }
    if shown > 60 {
        out.push_str(&format!("... and {} more differing lines\n", shown - 60));
    }
    Some(format!(
        "{shown} of {} lines differ\n{out}",
        a.len().max(b.len())
    ))
}

fn check_native(out: &Output) {
    assert_eq!(
        out.code(),
        0,
        "native run failed:\n{}\n{}",
        out.stdout_str(),
        out.stderr_str()
    );
}

#[test]
fn path_and_file_syscalls_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("fs_conformance");
    // The native run works in a directory of its own on the same host filesystem as the root
    // (both are under the temporary directory), so filesystem-dependent answers agree.
    let scratch = TempDir::new("torpor-fsconf-native");
    let native = testutil::native(
        &r.host_path(&prog),
        &[] as &[&str],
        scratch.path(),
        &[],
        None,
    );
    check_native(&native);
    let got = torpor()
        .run(r.path(), &prog)
        .cwd("/tmp")
        .host_env("TORPOR_LOG", "off")
        .output();
    let (n, t) = (native.stdout_str(), got.stdout_str());
    assert!(
        n.lines().count() > 500,
        "the native run printed too little:\n{n}"
    );
    if let Some(d) = diff(&n, &t) {
        panic!(
            "fs_conformance: torpor differs from native\n{d}\n--- torpor stderr:\n{}",
            got.stderr_str()
        );
    }
    assert_eq!(got.code(), 0, "torpor stderr: {}", got.stderr_str());
}

#[test]
fn diff_names_the_differing_lines() {
    assert_eq!(diff("## a\nx = 0\n", "## a\nx = 0\n"), None);
    let d = diff("## a\nx = 0\ny = 1\n", "## a\nx = -1 ENOSYS\n").expect("differs");
    assert!(d.contains("line 2 [## a]"), "{d}");
    assert!(d.contains("native: x = 0"), "{d}");
    assert!(d.contains("torpor: x = -1 ENOSYS"), "{d}");
    assert!(d.contains("torpor: <missing>"), "{d}");
}

/// What the test compares of a host file: contents, mode, owner, size, times and `user.`
/// extended attributes.
fn fingerprint(p: &std::path::Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("no NUL");
    let mut names = [0u8; 1024];
    // SAFETY: a NUL-terminated path and a buffer of the given size.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    let xattr = String::from_utf8_lossy(&names[..n.max(0) as usize]).into_owned();
    format!(
        "{:?} mode {:o} uid {} gid {} size {} mtime {}.{} nlink {} xattr {xattr}",
        std::fs::read(p).ok(),
        m.mode(),
        m.uid(),
        m.gid(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.nlink()
    )
}

fn listing(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Every call that creates, removes, renames or changes a file, aimed at a host directory
/// outside the root through absolute and relative symlinks and `..`: the directory and its
/// file stay exactly as they were.
#[test]
fn path_calls_stay_inside_the_root() {
    if !testutil::require_kvm() {
        return;
    }
    let outside = TempDir::new("torpor-fsconf-outside");
    let victim = outside.path().join("victim");
    std::fs::write(&victim, b"host data").expect("write victim");
    // A `user.` attribute the guest tries to remove (if the host filesystem has them).
    let c = std::ffi::CString::new(victim.as_os_str().as_encoded_bytes()).expect("no NUL");
    // SAFETY: NUL-terminated path and name, a one-byte value.
    unsafe {
        libc::setxattr(
            c.as_ptr(),
            c"user.keep".as_ptr(),
            b"1".as_ptr().cast(),
            1,
            0,
        )
    };
    let (before_list, before) = (listing(outside.path()), fingerprint(&victim));

    let r = Rootfs::new();
    let prog = r.guest_program("fs_escape");
    r.file("/tmp/mine", b"guest data");
    r.symlink("/out_abs", outside.path());
    r.symlink("/out_file", &victim);
    r.symlink(
        "/out_rel",
        format!("../../../../../..{}", outside.path().display()),
    );
    let got = torpor()
        .run(r.path(), &prog)
        .arg(outside.path())
        .host_env("TORPOR_LOG", "off")
        .output();
    assert!(
        got.stdout_str().contains("fs_escape: done"),
        "{}\n{}",
        got.stdout_str(),
        got.stderr_str()
    );
    assert_eq!(
        listing(outside.path()),
        before_list,
        "the host directory changed:\n{}",
        got.stdout_str()
    );
    assert_eq!(
        fingerprint(&victim),
        before,
        "the host file changed:\n{}",
        got.stdout_str()
    );
}
