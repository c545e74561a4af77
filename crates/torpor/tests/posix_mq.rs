//! POSIX message queues (`tests/guest/mq.c`): mq_open's names, flags, attributes and errors,
//! priorities, O_NONBLOCK and mq_setattr, EMSGSIZE, EBADF, absolute timeouts, a blocked
//! receive woken by a forked child's send and a blocked send woken by its receive, EINTR,
//! poll's readiness, read(2) and fstat of a descriptor, mq_unlink while open, mq_notify
//! (SIGEV_SIGNAL's siginfo, SIGEV_NONE, EBUSY, removal by mq_notify(NULL) and by a close),
//! another user's permissions and `/proc/sys/fs/mqueue`.
//!
//! The program's output in torpor must be the native one: a chroot of the same root in fresh
//! IPC, PID and mount namespaces. The native run needs root on the host; without it only
//! torpor's output is checked. Needs /dev/kvm (or the trap platform).

use testutil::Rootfs;

#[test]
fn posix_message_queues_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    Rootfs::new().assert_guest_matches_native(
        std::path::Path::new(env!("CARGO_BIN_EXE_torpor")),
        "mq",
        true,
        &[
        "queues_max: 256\n",
        "defaults: ok flags 0 maxmsg 10 msgsize 8192 curmsgs 0\n",
        "fstat: ok mode 100644 size 80 nlink 1\n",
        "again, O_EXCL: EEXIST\n",
        "raw with a slash: EACCES\n",
        "256-byte name: ENAMETOOLONG\n",
        "maxmsg 11: EINVAL\n",
        "full: poll 1 IN\n",
        "send, full: EAGAIN\n",
        "send 17 bytes: EMSGSIZE\n",
        "read: 10 \"QSIZE:4   \", then 50, write EINVAL\n",
        "first: prio 5 len 2 \"bb\"\n",
        "third: prio 1 len 1 \"c\"\n",
        "timed receive: ETIMEDOUT after >= 90 ms 1\n",
        "timed send, full: ETIMEDOUT\n",
        "send on O_RDONLY: EBADF\n",
        "blocked receive: prio 7 len 10 \"from child\"\n",
        "blocked send: ok, waited >= 50 ms 1\n",
        "receive interrupted: EINTR, handler ran 1\n",
        "signal 10 code SI_MESGQ 1 pid is me 1 uid 0 value 0x1234\n",
        "from the child: signal 10 pid is the child 1\n",
        "child: register: EBUSY\n",
        "no signal: 1\n",
        "after a close: 60 bytes \"QSIZE:0          NOTIFY:0     SIGNO:0     \" pid is me 0, is 0 1\n",
        "raw SIGEV_THREAD, stdout: ENOTSOCK\n",
        "still there: prio 3 len 4 \"kept\"\n",
        "user: open 0600: EACCES\n",
        "user: unlink root's: EACCES\n",
        "done\n",
        ],
        "POSIX message queues",
    );
}
