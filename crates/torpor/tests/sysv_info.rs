//! System V IPC's views and tunables (`tests/guest/sysv_info.c`): shmctl's IPC_INFO,
//! SHM_INFO, SHM_STAT, SHM_STAT_ANY, SHM_LOCK and SHM_UNLOCK; semctl's IPC_INFO, SEM_INFO,
//! SEM_STAT and SEM_STAT_ANY; `/proc/sysvipc/shm` and `sem`; the IPC limits of
//! `/proc/sys/kernel` written by root and enforced, refused to another user; a segment's
//! attach count once a child that attached it was waited for.
//!
//! The program's output in torpor must be the native one: a chroot of the same root in fresh
//! IPC, PID and mount namespaces (ids then start at 0 in both, and the tunables written are
//! the namespace's). The native run needs root on the host; without it only torpor's output
//! is checked. Needs /dev/kvm (or the trap platform).

use testutil::Rootfs;

#[test]
fn sysv_info_and_tunables_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    Rootfs::new().assert_guest_matches_native(
        std::path::Path::new(env!("CARGO_BIN_EXE_torpor")),
        "sysv_info",
        true,
        &[
            "shmget: 0 1\n",
            "IPC_INFO: 1 shmmin 1 shmmni 4096\n",
            "shmmax as in /proc: 1\n",
            "SHM_INFO: 1 used 2 tot 5 rss 2 swp 0\n",
            "SHM_STAT 1: is the id 1, segsz 5000 mode 640\n",
            "IPC_STAT of index 1's id + 32768: EINVAL\n",
            "mode 2600\n",
            "child attached and exited: status 0, nattch 0\n",
            "SEM_INFO: 1 semusz 2 semaem 5\n",
            "  key 20817 id 1 mode 640 size 5000 nattch 0 uid 0\n",
            "  key 20818 id 1 mode 644 nsems 2 uid 0\n",
            "nobody: IPC_STAT: EACCES\n",
            "nobody: SHM_STAT_ANY 0: ok, is the id 1\n",
            "nobody: SHM_LOCK: EPERM\n",
            "nobody: shmget(key, 0400): EACCES\n",
            "nobody: SEM_STAT_ANY 0: ok, is the id 1\n",
            "nobody: open shmmax for writing: EACCES\n",
            "shmmax: 8192\n",
            "shmget(8193): EINVAL\n",
            "shmmni = 40000: EINVAL\n",
            "shmget, 2 of 2: ENOSPC\n",
            "shmget past shmall: ENOSPC\n",
            "sem = 2 5 1 40000: ERANGE\n",
            "sem: 2\t6\t1\t32000\n",
            "semop of 2 past semopm: E2BIG\n",
            "msgsnd(101): EINVAL\n",
            "msgget, 1 of 1: ENOSPC\n",
            "done\n",
        ],
        "System V IPC views and tunables",
    );
}
