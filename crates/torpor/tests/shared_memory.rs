//! Memory shared between processes (`tests/guest/shared_memory.c`): MAP_SHARED anonymous
//! memory across fork, process-shared mutexes and semaphores (futexes on shared memory
//! between VMs), POSIX shared memory in /dev/shm, shared file mappings coherent with
//! read/write, System V shared memory and the errors of each, compared with a native run.
//!
//! Each test needs /dev/kvm: without it it prints "skipped" and passes, unless
//! TORPOR_REQUIRE_KVM=1.

use testutil::{Rootfs, Torpor};

#[test]
fn shared_memory_matches_native() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    r.dir("tmp").dir("dev/shm");
    r.file("etc/passwd", "root:x:0:0::/:/bin/sh\n");
    let prog = r.guest_program("shared_memory");
    let nat = testutil::native(
        &r.host_path("bin/shared_memory"),
        &[] as &[&str],
        r.path(),
        &[],
        None,
    );
    assert_eq!(nat.code(), 0, "native run: {nat:?}");
    let got = Torpor::new(env!("CARGO_BIN_EXE_torpor"))
        .run(r.path(), &prog)
        .host_env("TORPOR_LOG", "off")
        .output();
    got.assert_same_stdout(&nat, "shared memory");
    assert_eq!(got.code(), 0, "torpor stderr: {}", got.stderr_str());
    assert!(got.stdout_str().contains("mutex counter: 40000"));
    assert!(got.stdout_str().ends_with("done\n"));
}
