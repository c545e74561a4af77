//! System V message queues (`tests/guest/msg_queues.c`): msgget's keys and flags, msgsnd
//! and msgrcv by type with their errors, a parent and a forked child exchanging messages and
//! waking each other, IPC_RMID waking blocked receivers and senders with EIDRM, a signal
//! interrupting a blocked msgrcv, IPC_NOWAIT's ENOMSG and EAGAIN, another user's
//! permissions, msgctl's views (IPC_STAT's counts and pids, MSG_STAT, IPC_INFO, MSG_INFO),
//! `/proc/sysvipc/msg` and the limits in `/proc/sys/kernel`.
//!
//! A second test checkpoints a sandbox whose queues hold messages and whose child process
//! waits in msgrcv, restores it, and checks that the queues, their messages and ids, and the
//! waiting child came back.
//!
//! The program's output in torpor must be the native one: a chroot of the same root in fresh
//! IPC, PID and mount namespaces (queue ids then start at 0 in both). The native run needs
//! root on the host; without it only torpor's output is checked. Needs /dev/kvm (or the trap
//! platform).

use std::time::Duration;

use testutil::{Detached, Rootfs};

#[test]
fn message_queues_match_native() {
    if !testutil::require_kvm() {
        return;
    }
    Rootfs::new().assert_guest_matches_native(
        std::path::Path::new(env!("CARGO_BIN_EXE_torpor")),
        "msg_queues",
        true,
        &[
            "msgmnb: 16384\n",
            "msgget(IPC_PRIVATE): 0\n",
            "again, IPC_EXCL: EEXIST\n",
            "msgsnd(type 0): EINVAL\n",
            "five sent: qnum 5 cbytes 22 qbytes 16384 mode 600 uid 0 cuid 0\n",
            "lspid is me 1, lrpid 0, stime set 1, rtime 1\n",
            "type -3: type 1 len 5 \"one-a\"\n",
            "type 3 MSG_EXCEPT: type 1 len 5 \"one-b\"\n",
            "MSG_COPY 1: type 5 len 4 \"five\"\n",
            "empty, IPC_NOWAIT: ENOMSG\n",
            "4-byte buffer: E2BIG\n",
            "4-byte buffer, MSG_NOERROR: type 1 len 4 \"0123\"\n",
            "one more byte, IPC_NOWAIT: EAGAIN\n",
            "child: blocked send: ok\n",
            "parent's reply: type 2 len 9 \"pong:ping\"\n",
            "lspid is the child 1, lrpid is me 1\n",
            "child: blocked receive: EIDRM\n",
            "child: blocked send: EIDRM\n",
            "child: receive interrupted: EINTR, handler ran 1\n",
            "user: msgsnd: EACCES\n",
            "root: IPC_RMID: EPERM\n",
            "user: woken: ok, IPC_RMID: ok\n",
            "MSG_INFO: max index 1 pool 2 map 2 ",
            "  key 29041 id 1 mode 600 cbytes 4 qnum 1 uid 1000 gid 1000 cuid 0 cgid 0\n",
            "done\n",
        ],
        "message queues",
    );
}

fn log_of(sb: &Detached) -> String {
    std::fs::read_to_string(sb.dir().join("output.log")).unwrap_or_default()
}

#[test]
fn message_queues_survive_a_checkpoint() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let prog = r.guest_program("msg_queues");
    let bin: &std::path::Path = env!("CARGO_BIN_EXE_torpor").as_ref();
    let sb = Detached::start(bin, &[], r.path(), &prog, &["checkpoint"]);
    assert!(
        Detached::wait_until(Duration::from_secs(60), || log_of(&sb).contains("ready")),
        "the program never got ready: {}",
        log_of(&sb)
    );
    let (_t, dir) = sb.checkpoint_to_temp();
    let restored = sb
        .restore_beside(&[], &dir)
        .unwrap_or_else(|o| panic!("restore: {}", o.stderr_str()));
    restored.ok("kill", &["SIGUSR1"]);
    assert!(
        Detached::wait_until(Duration::from_secs(60), || restored
            .verb("state", &[])
            .stdout_str()
            .contains("\"exitStatus\": 0")),
        "the restored program did not exit 0: {}\n{}",
        log_of(&restored),
        restored.ok("state", &[])
    );
    assert_eq!(
        log_of(&restored),
        "child woke: type 7 \"wake\"\n\
         queue: qnum 3 cbytes 8198 mode 600 lspid is me 1\n\
         keyed: qnum 0 lrpid is the child 1, same id 1\n\
         type -2: type 1 len 3 \"one\"\n\
         type 0: type 2 len 3 \"two\"\n\
         type 3: 8192 bytes, the same 1\n\
         next id: 2\n\
         all queues kept\n"
    );
}
