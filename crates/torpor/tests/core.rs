//! End-to-end tests of the sandbox core: real static binaries under
//! `torpor run`, compared with the same binaries run natively.
//!
//! Each test needs /dev/kvm: without it it prints "skipped" and passes,
//! unless TORPOR_REQUIRE_KVM=1 (CI), where it fails.
//!
//! The guest programs come from `tests/guest/*.c`, built by `testutil`; busybox
//! is Debian's `busybox-static`, copied into each root filesystem.

use std::time::Duration;

use testutil::{host_busybox, native, Output, Rootfs, Torpor};

fn torpor() -> Torpor {
    Torpor::new(env!("CARGO_BIN_EXE_torpor"))
}

/// Deterministic pseudo-random bytes (xorshift64).
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 24) as u8
        })
        .collect()
}

/// A root with busybox and some data files under /data.
fn fixture() -> Rootfs {
    let r = Rootfs::new();
    r.file(
        "/data/hello.txt",
        "Hello, torpor!\nsecond line\n\tindented third line\nno newline at end",
    )
    .file("/data/empty.txt", "")
    .file("/data/big.bin", noise(1 << 20, 0x9e37_79b9_7f4a_7c15))
    .file("/data/sub/nested.txt", "nested file\n".repeat(100))
    .file("/data/name with spaces.txt", "spaces\n")
    .dir("/data/emptydir")
    .symlink("/data/link-to-hello", "hello.txt");
    r
}

/// Runs `tests/guest/NAME.c` natively (cwd: the root's host directory) and in torpor, asserts
/// that both exit 0 with the same stdout, and returns torpor's run.
#[track_caller]
fn guest_same_as_native(name: &str) -> Output {
    let r = Rootfs::new();
    let prog = r.guest_program(name);
    let native = testutil::native(
        &testutil::guest_program(name),
        &[] as &[&str],
        r.path(),
        &[],
        None,
    );
    assert_eq!(native.code(), 0, "native run of {name}: {native:?}");
    let out = torpor()
        .run(r.path(), &prog)
        .host_env("TORPOR_LOG", "off")
        .output();
    out.assert_same_stdout(&native, name);
    out.assert_code(0);
    out
}

/// Asserts that `out`'s stdout has each of `lines`.
#[track_caller]
fn assert_has_lines(out: &Output, lines: &[&str]) {
    for line in lines {
        assert!(
            out.stdout_str().contains(line),
            "no {line:?} in:\n{}",
            out.stdout_str()
        );
    }
}

/// Runs `busybox ARGS` natively (cwd = the root's host directory) and under
/// torpor (cwd = /), and asserts identical status, stdout and stderr.
#[track_caller]
fn same_as_native(r: &Rootfs, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let nat = native(&host_busybox(), args, r.path(), &[("TZ", "UTC0")], stdin);
    let mut run = torpor()
        .run(r.path(), "/bin/busybox")
        .args(args)
        .guest_env("TZ=UTC0")
        .host_env("TORPOR_LOG", "off");
    if let Some(data) = stdin {
        run = run.stdin(data);
    }
    let got = run.output();
    assert_eq!(
        got.code(),
        nat.code(),
        "busybox {args:?}: status differs\nnative: {nat:?}\ntorpor: {got:?}"
    );
    assert!(
        got.stdout == nat.stdout,
        "busybox {args:?}: stdout differs\nnative: {nat:?}\ntorpor: {got:?}"
    );
    assert!(
        got.stderr == nat.stderr,
        "busybox {args:?}: stderr differs\nnative: {nat:?}\ntorpor: {got:?}"
    );
    got
}

#[test]
fn busybox_echo_matches_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = fixture();
    let out = same_as_native(&r, &["echo", "hello", "world"], None);
    assert_eq!(out.stdout, b"hello world\n");
    same_as_native(&r, &["echo", "-n", "no newline"], None);
    same_as_native(&r, &["echo", "-e", "tab\there\\nand a second line"], None);
    same_as_native(&r, &["echo"], None);
    let long = "x".repeat(100_000);
    same_as_native(&r, &["echo", &long], None);
}

#[test]
fn busybox_cat_matches_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = fixture();
    same_as_native(&r, &["cat", "data/hello.txt"], None);
    let out = same_as_native(&r, &["cat", "data/big.bin"], None);
    assert_eq!(out.stdout.len(), 1 << 20);
    same_as_native(
        &r,
        &[
            "cat",
            "data/hello.txt",
            "data/empty.txt",
            "data/sub/nested.txt",
            "data/name with spaces.txt",
        ],
        None,
    );
    same_as_native(&r, &["cat", "data/link-to-hello"], None);
    // stdin passes through.
    same_as_native(&r, &["cat"], Some(&noise(300_000, 7)));
    same_as_native(&r, &["cat", "-", "data/hello.txt"], Some(b"from stdin\n"));
}

#[test]
fn busybox_errors_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = fixture();
    // errno mapping shows in the messages: ENOENT, EISDIR, ENOTDIR.
    same_as_native(&r, &["cat", "data/missing.txt"], None).assert_code(1);
    same_as_native(&r, &["cat", "data/sub"], None).assert_code(1);
    same_as_native(&r, &["cat", "data/hello.txt/x"], None).assert_code(1);
    same_as_native(&r, &["ls", "data/nope"], None);
    same_as_native(&r, &["true"], None).assert_code(0);
    same_as_native(&r, &["false"], None).assert_code(1);
}

#[test]
fn busybox_ls_matches_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = fixture();
    let out = same_as_native(&r, &["ls", "data"], None);
    assert!(out.stdout_str().contains("hello.txt"), "{out:?}");
    same_as_native(&r, &["ls", "-a", "data"], None);
    same_as_native(&r, &["ls", "-1R", "data"], None);
    same_as_native(&r, &["ls", "-d", "data/sub", "data/emptydir"], None);
    same_as_native(&r, &["ls", "-F", "data"], None);
    same_as_native(&r, &["ls", "data/emptydir"], None);
}

#[test]
fn busybox_ls_long_matches_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = fixture();
    // Sizes, modes, link counts, numeric owners and times come from stat.
    same_as_native(&r, &["ls", "-ln", "data"], None);
    same_as_native(&r, &["ls", "-lnaR", "data/sub"], None);
}

#[test]
fn busybox_wc_matches_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = fixture();
    same_as_native(&r, &["wc", "data/hello.txt"], None);
    same_as_native(
        &r,
        &[
            "wc",
            "-l",
            "-w",
            "-c",
            "data/hello.txt",
            "data/sub/nested.txt",
            "data/empty.txt",
        ],
        None,
    );
    same_as_native(&r, &["wc", "-c", "data/big.bin"], None);
    same_as_native(&r, &["wc"], Some(b"one two\nthree\n"));
}

#[test]
fn busybox_sha256sum_matches_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = fixture();
    let out = same_as_native(
        &r,
        &[
            "sha256sum",
            "data/big.bin",
            "data/hello.txt",
            "data/empty.txt",
        ],
        None,
    );
    assert_eq!(out.stdout_str().lines().count(), 3, "{out:?}");
    same_as_native(&r, &["sha256sum", "bin/busybox"], None);
    same_as_native(&r, &["sha256sum"], Some(&noise(200_000, 3)));
    let sums = native(
        &host_busybox(),
        &["sha256sum", "data/big.bin", "data/sub/nested.txt"],
        r.path(),
        &[],
        None,
    );
    r.file("/data/SUMS", &sums.stdout);
    same_as_native(&r, &["sha256sum", "-c", "data/SUMS"], None).assert_code(0);
}

#[test]
fn memory_env_and_cwd_options() {
    if !testutil::require_kvm() {
        return;
    }
    let r = fixture();
    let out = torpor()
        .run(r.path(), "/bin/busybox")
        .memory("64M")
        .args(["echo", "small"])
        .output();
    out.assert_code(0);
    assert_eq!(out.stdout, b"small\n", "{out:?}");

    let out = torpor()
        .run(r.path(), "/bin/busybox")
        .guest_env("GREETING=hello there")
        .guest_env("OTHER=1")
        .arg("env")
        .output();
    out.assert_code(0);
    let env = out.stdout_str();
    assert!(env.lines().any(|l| l == "GREETING=hello there"), "{out:?}");
    assert!(env.lines().any(|l| l == "OTHER=1"), "{out:?}");

    let out = torpor()
        .run(r.path(), "/bin/busybox")
        .cwd("/data/sub")
        .args(["cat", "nested.txt"])
        .output();
    out.assert_code(0);
    assert_eq!(out.stdout_str(), "nested file\n".repeat(100), "{out:?}");
    let out = torpor()
        .run(r.path(), "/bin/busybox")
        .cwd("/data/sub")
        .args(["cat", "/data/hello.txt"])
        .output();
    out.assert_code(0);
    assert_eq!(
        out.stdout,
        std::fs::read(r.host_path("/data/hello.txt")).expect("read"),
        "{out:?}"
    );
    let out = torpor()
        .run(r.path(), "/bin/busybox")
        .cwd("/data")
        .arg("pwd")
        .output();
    out.assert_code(0);
    assert_eq!(out.stdout, b"/data\n", "{out:?}");
}

#[test]
fn static_c_program_files_and_200mib_allocations() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("files_alloc");
    r.file(
        "/data/input.txt",
        "line one of the input\nline two: \u{e9}t\u{e9}\n",
    );
    let nat = native(
        &testutil::guest_program("files_alloc"),
        &["data/input.txt"],
        r.path(),
        &[],
        None,
    );
    assert_eq!(nat.code(), 3, "native run\n{nat:?}");
    let got = torpor()
        .run(r.path(), &prog)
        .cwd("/")
        .arg("data/input.txt")
        .timeout(Duration::from_secs(300))
        .output();
    assert_eq!(got.code(), 3, "torpor run\n{got:?}");
    assert!(
        got.stdout == nat.stdout,
        "stdout differs\nnative: {nat:?}\ntorpor: {got:?}"
    );
    assert!(
        got.stdout_str().contains("line two: \u{e9}t\u{e9}"),
        "{got:?}"
    );
}

#[test]
fn null_write_dies_with_sigsegv() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("null_write");
    let nat = native(
        &testutil::guest_program("null_write"),
        &[] as &[&str],
        r.path(),
        &[],
        None,
    );
    assert_eq!(nat.code(), 139, "native\n{nat:?}");
    let got = torpor().run(r.path(), &prog).output();
    assert_eq!(got.code(), 139, "torpor run must exit 128+SIGSEGV\n{got:?}");
    assert_eq!(got.stdout, b"null_write: writing to NULL\n", "{got:?}");
}

#[test]
fn wild_pointers_get_efault_like_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("bad_pointers");
    let nat = native(
        &testutil::guest_program("bad_pointers"),
        &[] as &[&str],
        r.path(),
        &[],
        None,
    );
    nat.assert_code(0);
    let got = torpor()
        .run(r.path(), &prog)
        .host_env("TORPOR_LOG", "off")
        .output();
    got.assert_code(0);
    assert!(
        got.stdout == nat.stdout,
        "stdout differs\nnative: {nat:?}\ntorpor: {got:?}"
    );
}

#[test]
fn paths_and_symlinks_cannot_leave_the_root() {
    if !testutil::require_kvm() {
        return;
    }
    // The secret lives in its own temp dir, outside the root.
    let outside = testutil::TempDir::new("torpor-outside");
    let marker = format!("TORPOR-SECRET-{}", testutil::unique_token());
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, format!("{marker}\n")).expect("write secret");
    let secret_str = secret.to_str().expect("utf-8 temp path");

    let r = Rootfs::new();
    let prog = r.guest_program("escape");
    r.symlink("/link_abs", &secret)
        .symlink("/link_dir", outside.path())
        .symlink("/link_rel", format!("../../../../../../../..{secret_str}"));

    // Unconfined, the probes do find the secret: they are real.
    let nat = native(
        &testutil::guest_program("escape"),
        &[secret_str],
        r.path(),
        &[],
        None,
    );
    assert!(
        nat.stdout_str().contains(&marker),
        "native run should read the secret\n{nat:?}"
    );

    let got = torpor().run(r.path(), &prog).arg(secret_str).output();
    let all = format!("{}{}", got.stdout_str(), got.stderr_str());
    assert!(
        !all.contains(&marker),
        "the guest read a host file outside its root\n{got:?}"
    );
    got.assert_code(0);
    let text = got.stdout_str();
    assert!(text.contains("escape: done"), "{got:?}");
    assert!(
        !text.lines().any(|l| l.starts_with("READ absolute")),
        "{got:?}"
    );
    if let Some(cwd) = text
        .lines()
        .find_map(|l| l.strip_prefix("CWD after chdir(..) x64: "))
    {
        assert_eq!(cwd, "/", "chdir(\"..\") must stop at the root\n{got:?}");
    }
    // "/.." and "/../../.." are "/" again.
    let listing = |label: &str| {
        let prefix = format!("LS {label}: ");
        let mut v: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .map(str::to_owned)
            .collect();
        v.sort();
        v
    };
    let root = listing("/");
    assert!(
        root.contains(&"bin".to_owned()) && root.contains(&"link_abs".to_owned()),
        "{got:?}"
    );
    assert_eq!(listing("/.."), root, "\"/..\" must list the root\n{got:?}");
    assert_eq!(
        listing("/../../.."),
        root,
        "\"/../../..\" must list the root\n{got:?}"
    );
}

#[test]
fn demo_runs() {
    if !testutil::require_kvm() {
        return;
    }
    let out = torpor().cmd(&["demo"]);
    out.assert_code(0);
    let text = out.stdout_str();
    for want in [
        "Hello from inside a torpor sandbox!",
        "uname: sysname = Linux, machine = x86_64",
        "file /tmp/torpor-demo.txt: wrote and read back 27 bytes: ok",
        "Goodbye from the sandbox.",
    ] {
        assert!(text.contains(want), "demo output lacks {want:?}\n{out:?}");
    }
}

#[test]
fn timings_report_first_instruction() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let out = torpor()
        .run(r.path(), "/bin/busybox")
        .host_env("TORPOR_TIMINGS", "1")
        .arg("true")
        .output();
    out.assert_code(0);
    let us = out
        .stderr_str()
        .lines()
        .find_map(|l| l.strip_prefix("torpor-timing: start_to_first_instruction_us="))
        .map(|v| v.trim().parse::<f64>());
    assert!(
        matches!(us, Some(Ok(v)) if v > 0.0),
        "no start_to_first_instruction_us timing\n{out:?}"
    );
}

#[test]
fn unknown_syscalls_get_enosys_logged_once_and_host_ports_are_off_limits() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("sandbox_limits");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let out = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), &prog)
        .arg(&port)
        .host_env("TORPOR_LOG", "warn")
        .output();
    out.assert_code(0);
    let stdout = out.stdout_str();
    assert_eq!(
        stdout
            .matches("lookup_dcookie: -1 Function not implemented")
            .count(),
        2,
        "{stdout}"
    );
    assert_eq!(
        stdout
            .matches("syscall 1000: -1 Function not implemented")
            .count(),
        2,
        "{stdout}"
    );
    assert!(
        stdout.contains("connect to host port: Connection refused"),
        "{stdout}"
    );
    assert!(
        listener.accept().is_err(),
        "the sandbox reached a host listener"
    );
    let stderr = out.stderr_str();
    assert_eq!(
        stderr
            .matches("unsupported syscall 212 (lookup_dcookie)")
            .count(),
        1,
        "logged once: {stderr}"
    );
    assert_eq!(
        stderr.matches("unsupported syscall 1000 (unknown)").count(),
        1,
        "logged once: {stderr}"
    );
}

#[test]
fn static_pie_runs() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let pie = testutil::build_c(
        "hello-static-pie",
        &testutil::guest_source("hello"),
        false,
        &["-static-pie", "-fPIE"],
    );
    r.binary("/bin/hello-pie", &pie);
    let data = std::fs::read(&pie).unwrap();
    assert_eq!(
        u16::from_le_bytes([data[16], data[17]]),
        3,
        "built as ET_DYN (static-PIE)"
    );
    let native = testutil::native(&pie, &[] as &[&str], r.path(), &[], None);
    let out = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), "/bin/hello-pie")
        .host_env("TORPOR_LOG", "off")
        .output();
    out.assert_code(native.code());
    assert_eq!(out.stdout, native.stdout);
}

/// Corners of Linux's semantics LTP's syscall tests found different (`tests/guest/edge_cases.c`):
/// the same output as natively, and the lines that differed before.
#[test]
fn edge_cases_found_by_ltp_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    let out = guest_same_as_native("edge_cases");
    assert_has_lines(
        &out,
        &[
            "futex wake shared, unmapped: EFAULT",
            "futex cmp_requeue, negative count: EINVAL",
            "mmap of a closed fd, length 0: EBADF",
            "mmap of a file MAP_SHARED_VALIDATE, unknown flag: EOPNOTSUPP",
            "with STICKY_TIMEOUTS: 0",
            "another thread sees its waiting leader as S",
            "kill of a zombie: ok",
            "kill of a thread's id reaches its process: ok, delivered 1",
            "exec'd with an empty argv: argc 1, argv[0] empty",
            "children's CPU time: wait4 rusage >= 0.2s 1, tms_cutime grew 1, RUSAGE_CHILDREN >= 0.2s 1",
            "subreaper: not inherited 1, orphan reaped here 1, saw its new parent 1, flag 1",
            "rt_tgsigqueueinfo, kernel si_code, another thread: EPERM",
            "getcwd of a removed directory: ENOENT",
            "msync MS_INVALIDATE of a locked mapping: EBUSY",
        ],
    );
}

#[test]
fn pipes_devices_sysinfo_and_affinity_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    let out = guest_same_as_native("misc_io");
    assert_has_lines(
        &out,
        &[
            "pipe: 14 through a pipe, cloexec 1",
            // splice/tee/copy_file_range reach the host's (they were ENOSYS).
            "splice file@4 -> pipe: 6, offset now 10, file offset 16",
            "copy_file_range no offsets: 4, file offsets 4 4",
            // Nice values and scheduling policies (ENOSYS before).
            "setpriority +1: 0, now 1 (self by pid: 1)",
            "sched_getscheduler: 0, -1: EINVAL, no such pid: ESRCH",
            "sched_setaffinity cpu 0: 0, now 1 cpu(s), cpu 0 1",
            "times: positive 1, fields >= 0 1",
            // epoll_wait returned at most 1024 events.
            "epoll_wait with 1500 ready: 1500",
            // Found missing or wrong by LTP's syscall tests (issue 32).
            "mincore: ok, touched page resident 1",
            "mincore over a hole: ENOMEM",
            "mlockall current: ok",
            "readahead pipe: EINVAL",
            "sendmmsg: 3, lengths 3 5 6",
            "recvmmsg: 3, lengths 3 5 6, third seven!",
            "getsockopt level 500: EOPNOTSUPP",
            "setsockopt level 500: ENOPROTOOPT",
            "setsockopt UDP level on TCP: ENOPROTOOPT",
            "accept on O_PATH: EBADF, on a directory: ENOTSOCK",
            "clock_nanosleep thread cpu clock: EOPNOTSUPP",
            "write at the file size limit: EFBIG, across it: 6",
            "writev across the file size limit: 70",
            "ftruncate past the file size limit: EFBIG, to it: ok; truncate past it: EFBIG; fallocate past it: EFBIG, keeping the size: ok",
            "nobody binds port 81: EACCES",
            "nobody raises a hard limit: EPERM",
            "clock_gettime TAI: ok",
            "personality: query 0, set returns 0, now 0x40000, UNAME26 release 2.6 1, bad domain ok",
            // msync, getrusage, clock_settime were ENOSYS; CPU-time clocks EINVAL.
            "msync MS_SYNC: 0, file has synced",
            "thread cpu clock: 0, gettime 0, positive 1",
            "getrusage self: 0, thread: 0, children: 0, who 5: EINVAL",
            "clock_settime MONOTONIC: EINVAL, bad clock: EINVAL",
            // memfd_create was ENOSYS.
            "memfd_create: ok, cloexec 1, link /memfd:misc (deleted), write 10, offset 10",
            // UDP-Lite was EPROTONOSUPPORT, IPV6_RECVHOPLIMIT ENOPROTOOPT.
            "udplite socket: ok, send coverage 0 -> 8, protocol 136, datagram 4 lite",
            "IPV6_RECVHOPLIMIT: 0, recvmsg 3 six, hop limit cmsg 64",
            // /proc/self/fd/N, /dev/fd/N and /dev/stdout were no files (ENOENT).
            "reopen pipe: ok, wrote 5, read again",
            "reopen file: ok, read 4 0123, first offset 3",
            "reopen socket: ENXIO",
            "stat /dev/stdout is fd 1: 1",
            // /proc/self and /proc/PID were no directories (ENOENT).
            "/proc/self lists status maps fd: 1 1 1",
            "/proc/self/fd lists an open descriptor: 1",
            "pidfd_send_signal through /proc/PID: 0, delivered 1",
            "closing while listing /proc/self/fd: getdents 0, left open 0",
            "stat /proc/self/status: 0, regular 1, mode 444",
            "status SigCgt has SIGUSR2: 1, SigIgn has SIGTTOU: 1",
            // A process could write (and truncate) its own program (found by the syscall fuzzer).
            "open own program for writing: ETXTBSY",
            "reopen own program for writing: ETXTBSY",
            "truncate own program: ETXTBSY",
        ],
    );
}

/// /proc about threads and locked memory (`tests/guest/proc_files.c`): `/proc/self/task`
/// lists the threads, a thread's comm (PR_SET_NAME, and written through /proc by another
/// thread), stat, status and `/proc/thread-self`; `VmLck` after mlock, mlock2, munlock,
/// mlockall, munlockall and MAP_LOCKED; smaps' Rss and Locked; pagemap's present bits.
#[test]
fn proc_threads_and_locked_memory_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    let out = guest_same_as_native("proc_files");
    assert_has_lines(
        &out,
        &[
            // /proc/PID/task was ENOENT, VmLck and smaps missing, locks not recorded.
            "task listing: 4 threads, dots 2, main 1, workers 3",
            "worker 1: comm worker-1, state S, stat id 1=1, status Pid 1=1 Tgid 1=1, thread-self 1=1",
            "names seen by the workers: worker-0 renamed worker-2",
            "mlock2 onfault: 0, then 36 kB",
            "smaps after mlock: Rss 32 kB, Locked 32 kB",
            "pagemap: read 32, touched present 1 1, unmapped 0",
            "mlockall future: 0 kB now, a new 8-page mapping: 32 kB, 8 pages resident",
            "MAP_LOCKED 1 MiB: 1024 kB",
            "child after fork: 0 kB",
        ],
    );
}

/// membarrier, ioprio_get/ioprio_set, sched_getattr/sched_setattr, vhangup, pidfd_getfd, kcmp,
/// mseal, cachestat, vmsplice and remap_file_pages (all ENOSYS before) answer as natively.
#[test]
fn small_calls_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    let out = guest_same_as_native("small_calls");
    assert_has_lines(
        &out,
        &[
            "membarrier private unregistered: -1 EPERM",
            "membarrier private: 0 ok",
            "ioprio_get after: 16387 ok",
            "sched_setattr nice 5: 0 ok",
            "getpriority raw: 15 ok",
            "vhangup as nobody: -1 EPERM",
            "pidfd_getfd: ok, cloexec 1",
            "kcmp same file: 0 ok",
            "munmap sealed: -1 EPERM",
            "madvise dontneed read-only sealed: -1 EPERM",
            "  into memory: backwards",
            "vmsplice full nonblock: -1 EAGAIN",
            "cachestat bad fd: -1 EBADF",
            "  after: B B",
        ],
    );
}

/// Linux native AIO (`tests/guest/aio.c`): io_setup's checks and its ring (the header libaio
/// reads, in /proc/self/maps), reads, writes, vectors and syncs of files, pipes and devices
/// with their completions' results, the submission errors, IOCB_FLAG_RESFD, io_getevents and
/// io_pgetevents (errors, timeouts, another thread's wait, a signal), io_cancel, the ring
/// consumed in user space and filled up, a fork's child without contexts, io_destroy.
#[test]
fn aio_matches_native() {
    if !testutil::require_kvm() {
        return;
    }
    guest_same_as_native("aio");
}

/// io_uring (`tests/guest/io_uring.c`, raw system calls, no liburing): io_uring_setup's
/// checks and answer (sizes, ring offsets), the rings mapped from the descriptor, reads and
/// writes (at offsets, at the file position, vectored), registered buffers and files, error
/// completions (bad descriptors, unknown opcodes and flags, a failed entry stopping the
/// batch), link chains, hostile ring indexes, requests that wait (an empty pipe or socket, a
/// poll, timeouts, a drain) and their cancellation, the overflow list, the probe, sockets,
/// paths, MSG_RING, a registered eventfd, a fork's child sharing the ring, SQPOLL.
#[test]
fn io_uring_matches_native() {
    if !testutil::require_kvm() {
        return;
    }
    guest_same_as_native("io_uring");
}

/// Pseudo-terminals (`misc_io pty`): openpty through the host's `/dev/ptmx` and TIOCGPTPEER,
/// terminal ioctls on both ends, EIO on the master once the slave is gone, forkpty.
/// (An OCI holder's Landlock rules do not allow /dev/ptmx and /dev/pts yet: there the guest's
/// open of /dev/ptmx is EACCES.)
#[test]
fn pseudo_terminals_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("misc_io");
    let native = testutil::native(
        &testutil::guest_program("misc_io"),
        &["pty"],
        r.path(),
        &[],
        None,
    );
    let out = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), &prog)
        .args(["pty"])
        .host_env("TORPOR_LOG", "off")
        .output();
    out.assert_code(0);
    assert_eq!(out.stdout_str(), native.stdout_str());
    assert!(
        out.stdout_str()
            .contains("forkpty child said: child: tty 1, session leader 1"),
        "{}",
        out.stdout_str()
    );
}

/// 2,000 threads over a process's life (8 at a time), more than a VM's 255 vCPUs: ended
/// threads' vCPUs are reused, each new thread starting with its creator's FPU state
/// (`tests/guest/many_threads.c`, compared with a native run).
#[test]
fn thousands_of_threads_over_a_process_life() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let bin = testutil::build_static_c(
        "many_threads",
        &testutil::guest_source("many_threads"),
        &["-pthread"],
    );
    r.binary("/bin/many_threads", &bin);
    let native = testutil::native(&bin, &[] as &[&str], r.path(), &[], None);
    native.assert_code(0);
    let out = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), "/bin/many_threads")
        .host_env("TORPOR_LOG", "off")
        .output();
    out.assert_code(0);
    assert_eq!(out.stdout_str(), native.stdout_str());
}

/// Threads share their working directory and umask (CLONE_FS), a forked child does not:
/// a server that chdirs after starting its threads serves from the new directory.
#[test]
fn threads_share_cwd_and_umask_as_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let bin = testutil::build_static_c(
        "fs_share",
        &testutil::guest_source("fs_share"),
        &["-pthread"],
    );
    r.binary("/bin/fs_share", &bin);
    let native = testutil::native(&bin, &[] as &[&str], r.path(), &[], None);
    native.assert_code(0);
    assert_eq!(
        native.stdout_str(),
        "thread sees main's chdir: yes\nmain sees thread's umask: 077\n\
         main sees thread's chdir: yes\nfork child's chdir reaches parent: no\n\
         fork child's umask reaches parent: no\n"
    );
    let out = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), "/bin/fs_share")
        .host_env("TORPOR_LOG", "off")
        .output();
    out.assert_code(0);
    assert_eq!(out.stdout_str(), native.stdout_str());
}

#[test]
fn pthreads_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let bin =
        testutil::build_static_c("threads", &testutil::guest_source("threads"), &["-pthread"]);
    r.binary("/bin/threads", &bin);
    let native = testutil::native(&bin, &[] as &[&str], r.path(), &[], None);
    for _ in 0..3 {
        let out = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
            .run(r.path(), "/bin/threads")
            .host_env("TORPOR_LOG", "off")
            .output();
        out.assert_code(native.code());
        assert_eq!(out.stdout_str(), native.stdout_str());
    }
}

/// sethostname(2) and setdomainname(2) name the whole sandbox (its UTS namespace): a child
/// started afterwards sees the new name; a user other than root may not (EPERM). Not compared
/// with a native run, which would rename the host.
#[test]
fn sethostname_renames_the_sandbox_for_root_only() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    r.file(
        "/etc/passwd",
        "root:x:0:0::/:/bin/sh\nnobody:x:65534:65534::/:/bin/sh\n",
    )
    .file("/etc/group", "root:x:0:\nnogroup:x:65534:\n");
    let out = torpor()
        .run(r.path(), "/bin/busybox")
        .args([
            "sh",
            "-c",
            "busybox hostname web2 && busybox hostname && busybox sh -c 'busybox uname -n'",
        ])
        .host_env("TORPOR_LOG", "off")
        .output();
    out.assert_code(0);
    assert_eq!(out.stdout_str(), "web2\nweb2\n");
    let out = torpor()
        .run(r.path(), "/bin/busybox")
        .option("--user", "nobody")
        .args([
            "sh",
            "-c",
            "busybox hostname other; echo $?; busybox hostname",
        ])
        .host_env("TORPOR_LOG", "off")
        .output();
    out.assert_code(0);
    assert_eq!(out.stdout_str(), "1\ntorpor\n", "{out:?}");
    assert!(
        out.stderr_str().contains("Operation not permitted"),
        "{out:?}"
    );
}

/// More corners LTP found (`tests/guest/limits_and_links.c`): timer slack, another user's
/// affinity, splice with a directory, O_PATH ioctl and mmap, a link out of /proc, exec of a
/// file open for writing, RLIMIT_SIGPENDING and RLIMIT_CPU, as natively; and the sandbox's
/// own /proc/sys tunables (pipe-max-size, domainname, max_user_instances) bind in torpor.
#[test]
fn limits_and_links_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    let out = guest_same_as_native("limits_and_links");
    assert_has_lines(
        &out,
        &[
            "timer slack: default 50000, set 70000, file 70000",
            "timer slack in a child: inherited 70000, reset to 70000",
            "sched_setaffinity of root's process as nobody: EPERM",
            "splice file -> directory: EBADF",
            "O_PATH ioctl: EBADF",
            "O_PATH mmap: EBADF",
            "link out of /proc: EXDEV",
            "exec of a file open for writing: ETXTBSY",
            "exec once closed: exit 7",
            "RT signal beyond RLIMIT_SIGPENDING: EAGAIN",
            "RLIMIT_CPU soft: SIGXCPU",
            "RLIMIT_CPU hard: KILL",
            "semop interrupted by a SA_RESTART handler: EINTR",
            "waitid on a non-blocking pidfd of a live child: EAGAIN",
            "once it exited: ok, pid matches 1",
            "SIOCATMARK, TCP: ok 0",
            "SIOCATMARK, TCP, no buffer: EFAULT",
            "SIOCSIFFLAGS, no buffer: EFAULT",
            "mq_notify SIGEV_THREAD: ok",
            "the notification thread ran with 43",
            "fdinfo of an inotify fd: mask 202, close-on-exec 1",
            "MCAST_JOIN_GROUP: ok",
            "and again: EADDRNOTAVAIL",
            "SCM_RIGHTS on a TCP socket: ok, 2 bytes, received hi",
        ],
    );
    let r = Rootfs::new();
    let prog = r.guest_program("limits_and_links");
    let got = torpor()
        .run(r.path(), &prog)
        .arg("tunables")
        .host_env("TORPOR_LOG", "off")
        .output();
    got.assert_code(0);
    assert_eq!(
        got.stdout_str(),
        "pipe-max-size write: ok\n\
         pipe-max-size now 8192\n\
         F_SETPIPE_SZ 8192: ok\n\
         F_SETPIPE_SZ 65536: EPERM\n\
         splice into domainname: 15\n\
         domainname now sandbox.example\n\
         max_user_instances write: ok\n\
         a fourth inotify instance beyond 3: EMFILE\n\
         after closing one: ok\n"
    );
}

#[test]
fn memory_advice_and_residency_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    let out = guest_same_as_native("memory_advice");
    assert_has_lines(
        &out,
        &[
            "wipeonfork child: zero, grandchild: zero, parent kept: 1",
            "keeponfork: ok, child: kept",
            "wipeonfork half: first kept 1, last zero 1",
            "wipeonfork shared: EINVAL",
            "dontfork: ok, child: SEGV",
            "dofork: ok, child: kept",
            "coredump_filter default: 00000033",
            "coredump_filter in the child: 00000013",
            "coredump_filter after 0x7fff: 000001ff",
            "coredump_filter write junk: EINVAL",
            "mincore shared, one page written: 1",
            "mincore shared, one more written by a child: 2",
            "mlock shared: ok, resident: 8",
        ],
    );
}

/// The newer syscalls (openat2, futex_waitv, file_getattr/file_setattr, listmount/statmount,
/// the lsm_* calls, adjtimex/clock_adjtime) answer as Linux: their argument checks, the
/// RESOLVE_* flags, a futex_waitv woken on one of its words, the root mount's unique id.
#[test]
fn new_syscalls_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    let out = guest_same_as_native("new_syscalls");
    assert_has_lines(
        &out,
        &[
            "openat2 size 64, non-zero tail: E2BIG",
            "openat2 symlink, NO_SYMLINKS: ELOOP",
            "openat2 ../x, BENEATH: EXDEV",
            "openat2 up/f (link to ..), BENEATH: EXDEV",
            "openat2 rootf (link to /f), IN_ROOT: ok",
            "openat2 /proc/self/exe, NO_MAGICLINKS: ELOOP",
            "openat2 /proc/self/status, NO_XDEV: EXDEV",
            "openat2 create, BENEATH: ok, size 0, mode 600",
            "futex_waitv timeout (REALTIME): ETIMEDOUT",
            "futex_waitv woken by FUTEX_WAKE of word 2: ok, index 2, wake counted 1",
            "futex_waitv shared, woken by another process: wake counted 1, index 1",
            "file_getattr file as dirfd: ENOTDIR",
            "file_getattr of a file: answered",
            "listmount LSMT_ROOT: ok, has statx's root id 1, increasing 1",
            "statmount of the root: ok, mask 33, mnt_id is statx's 1, point /",
            "statmount of the old root after chroot, as nobody: EPERM",
            "listmount of the old root after chroot, as nobody: EPERM",
            "lsm_list_modules: ok, size matches count 1, capability listed 1",
            "adjtimex ADJ_ADJTIME alone: EINVAL, tai untouched 1",
            "adjtimex read: ok, tick 1",
            "clock_adjtime MONOTONIC: EOPNOTSUPP",
        ],
    );
}

/// `/proc/PID/ns` and namespace descriptors (readlink, stat, the NS_GET_* ioctls), setns,
/// unshare and clone's CLONE_NEW* refused as for a container's root (`tests/guest/namespaces.c`).
#[test]
fn namespace_files_and_refusals_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    let out = guest_same_as_native("namespaces");
    assert_has_lines(
        &out,
        &[
            "/proc/self/ns: cgroup@ ipc@ mnt@ net@ pid@ pid_for_children@ time@ time_for_children@ user@ uts@",
            "/proc/self lists ns as a directory: 1",
            "uts -> uts, shape 1; stat ok reg 1 mode 444 ino matches 1; lstat ok link 1",
            "pid_for_children -> pid, shape 1; stat ok reg 1 mode 444 ino matches 1; lstat ok link 1",
            "access /proc/self/ns/pid: ok",
            "/proc/CHILD/ns/uts is the parent's: 1",
            "their uts stat is the same inode: 1",
            "/proc/thread-self/ns/net is the process's: 1",
            "/proc/self/fd/N of it reads as the link: 1",
            "NS_GET_NSTYPE uts: ok is CLONE_NEWUTS 1",
            "NS_GET_PARENT uts: EINVAL",
            "NS_GET_PARENT pid: EPERM",
            "NS_GET_USERNS user: EPERM",
            "NS_GET_USERNS uts: ok, the user namespace 1, cloexec 1",
            "NS_GET_OWNER_UID user: ok uid 0",
            "NS_GET_OWNER_UID uts: EINVAL",
            "TCGETS on it: ENOTTY",
            "drop CAP_SYS_ADMIN: ok",
            "setns uts: EPERM",
            "setns uts as CLONE_NEWPID: EINVAL",
            "setns user: EINVAL",
            "setns pidfd, CLONE_NEWUTS: EPERM",
            "unshare CLONE_FILES: ok",
            "unshare CLONE_NEWUTS: EPERM",
            "clone CLONE_NEWPID: EPERM",
            "clone CLONE_NEWNS|CLONE_FS: EINVAL",
        ],
    );
}
