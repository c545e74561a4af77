//! The tools an operator runs inside a sandbox (`kubectl exec`, `podman exec`) read `/proc`:
//! busybox's and procps' `ps`, `top -bn1` and `pgrep` list the sandbox's own processes, `df`
//! and `findmnt` its own mounts (issue 32, item 5).
//!
//! The busybox test runs everywhere /dev/kvm (or the trap platform) does; the procps one needs
//! the Debian `servers` root (`scripts/build-rootfs.sh servers`, which has procps): without
//! it it prints "skipped" and passes, unless TORPOR_REQUIRE_KVM=1.

use testutil::{Rootfs, Torpor};

fn torpor() -> Torpor {
    Torpor::new(env!("CARGO_BIN_EXE_torpor"))
}

/// The lines of `out` between the `--- NAME` marker and the next marker.
fn section<'a>(out: &'a str, name: &str) -> Vec<&'a str> {
    out.lines()
        .skip_while(|l| *l != format!("--- {name}"))
        .skip(1)
        .take_while(|l| !l.starts_with("--- "))
        .collect()
}

#[test]
fn busybox_ps_top_and_df_see_the_sandbox() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    r.file("/etc/passwd", "root:x:0:0::/root:/bin/sh\n");
    let script = "busybox sleep 30 & a=$!; busybox sleep 31 & b=$!; \
         echo '--- ls'; busybox ls /proc; \
         echo '--- ps'; busybox ps; \
         echo '--- top'; busybox top -bn1; \
         echo '--- df'; busybox df /; \
         echo '--- mounts'; busybox cat /proc/mounts; \
         echo '--- stat'; busybox cat /proc/stat; \
         echo '--- end'; kill $a $b";
    let out = torpor()
        .run(r.path(), "/bin/busybox")
        .args(["sh", "-c", script])
        .output();
    out.assert_code(0);
    let out = out.stdout_str();

    let ls = section(&out, "ls");
    for name in [
        "1", "self", "meminfo", "stat", "uptime", "loadavg", "mounts",
    ] {
        assert!(ls.contains(&name), "/proc lacks {name}: {ls:?}");
    }
    // Only the sandbox's processes: a handful of small pids, none of the host's.
    let pids: Vec<u32> = ls.iter().filter_map(|l| l.parse().ok()).collect();
    assert!(pids.len() >= 3 && pids.iter().all(|&p| p < 100), "{pids:?}");

    let ps = section(&out, "ps");
    assert!(ps[0].contains("PID") && ps[0].contains("COMMAND"), "{ps:?}");
    let line_of = |lines: &[&str], what: &str| {
        lines
            .iter()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} in {lines:#?}; the whole output:\n{out}"))
            .to_string()
    };
    assert!(
        line_of(&ps, "sh -c").trim_start().starts_with("1 "),
        "{ps:?}"
    );
    line_of(&ps, "sleep 30");
    line_of(&ps, "sleep 31");

    let top = section(&out, "top");
    line_of(&top, "Load average:");
    line_of(&top, "sleep 31");

    let df = section(&out, "df");
    assert!(df.len() == 2 && df[1].ends_with(" /"), "{df:?}");
    let mounts = section(&out, "mounts");
    assert!(
        mounts.iter().any(|l| l.split(' ').nth(1) == Some("/")),
        "{mounts:?}"
    );
    // No host path in the mounts the sandbox sees.
    let host = r.path().to_string_lossy().into_owned();
    assert!(!out.contains(&host), "a host path in:\n{out}");

    let stat = section(&out, "stat");
    assert!(stat[0].starts_with("cpu "), "{stat:?}");
    line_of(&stat, "btime ");
}

#[test]
fn procps_ps_pgrep_top_and_df_see_the_sandbox() {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = testutil::debian_rootfs("servers") else {
        return;
    };
    let script = "sleep 30 & a=$!; sleep 31 & b=$!; \
         echo '--- ps'; ps -ef; \
         echo '--- pgrep'; pgrep -x sleep; \
         echo '--- top'; top -bn1; \
         echo '--- df'; df /; \
         echo '--- findmnt'; findmnt -n -o TARGET; \
         echo '--- end'; kill $a $b";
    let out = torpor()
        .run(&root, "/bin/sh")
        .args(["-c", script])
        .guest_env("PATH=/usr/sbin:/usr/bin:/sbin:/bin")
        .output();
    out.assert_code(0);
    let out = out.stdout_str();
    let ps = section(&out, "ps");
    assert!(ps[0].starts_with("UID") && ps[0].contains("CMD"), "{ps:?}");
    assert!(ps.iter().any(|l| l.ends_with("sleep 30")), "{ps:?}");
    assert!(ps.iter().any(|l| l.contains("ps -ef")), "{ps:?}");
    // pgrep by name finds the two sleeps ps lists, and nothing else.
    let mut sleeps: Vec<&str> = ps
        .iter()
        .filter(|l| l.ends_with("sleep 30") || l.ends_with("sleep 31"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    sleeps.sort_unstable();
    let mut found = section(&out, "pgrep");
    found.sort_unstable();
    assert_eq!(found, sleeps, "pgrep -x sleep against ps -ef:\n{out}");
    let top = section(&out, "top");
    assert!(top.iter().any(|l| l.starts_with("top - ")), "{top:?}");
    assert!(top.iter().any(|l| l.contains("sleep")), "{top:?}");
    let df = section(&out, "df");
    assert!(df.len() == 2 && df[1].ends_with(" /"), "{df:?}");
    assert_eq!(section(&out, "findmnt"), ["/"]);
}
