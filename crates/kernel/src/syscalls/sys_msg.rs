//! System V message queues: msgget(2), msgsnd(2), msgrcv(2), msgctl(2), over the sandbox's
//! queue table ([`crate::ipc::msg::MsgTable`]). The handlers copy `struct msgbuf` (a long
//! type, then the text), `struct msqid64_ds` and `struct msginfo` in and out and say who
//! calls; the table applies Linux's rules.

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::creds::cap;
use crate::ipc::msg::{self, Caller, Message, Selector, StatBy};
use crate::task::Task;

const IPC_RMID: i32 = 0;
const IPC_SET: i32 = 1;
const IPC_STAT: i32 = 2;
const IPC_INFO: i32 = 3;
/// Set by C libraries that ask for the 64-bit structures (the only ones on x86-64).
const IPC_64: i32 = 0x100;
const MSG_STAT: i32 = 11;
const MSG_INFO: i32 = 12;
const MSG_STAT_ANY: i32 = 13;

/// The caller as the IPC permission checks see it (also for segments and semaphores).
pub(super) fn caller(t: &Task) -> Caller {
    let c = &t.creds;
    let memlock = t
        .group
        .rlimits
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(libc::RLIMIT_MEMLOCK)
        .map_or(0, |l| l.cur);
    Caller {
        pid: t.pid,
        euid: c.euid,
        egid: c.egid,
        fsgid: c.fsgid,
        groups: c.groups.clone(),
        ipc_owner: c.capable(cap::IPC_OWNER),
        sys_admin: c.capable(cap::SYS_ADMIN),
        sys_resource: c.capable(cap::SYS_RESOURCE),
        ipc_lock: c.capable(cap::IPC_LOCK),
        memlock,
    }
}

/// Whether a blocked msgsnd or msgrcv must return (EINTR): a signal, a park (the call is
/// then restarted once the task is unparked), the process ending.
fn interruption(t: &Task) -> impl Fn() -> bool {
    let control = t.control.clone();
    let group = t.group.clone();
    let tid = t.tid;
    move || control.park_requested() || control.signal_pending() || group.must_leave(tid)
}

/// Implements msgget(2).
pub fn sys_msgget(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let id = t.group.procs.sysv_msg.get(a.int(0), a.int(1), &caller(t))?;
    Ok(id as u64)
}

/// Implements msgsnd(2): the type is read first (EFAULT), then the size checked (EINVAL
/// past `msgmax` or negative), the type (EINVAL below 1), and the text copied in.
pub fn sys_msgsnd(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (id, msgp, msgsz, flags) = (a.int(0), a.gva(1), a.u(2), a.int(3));
    let mut mtype = [0u8; 8];
    t.copy_in(msgp, &mut mtype)?;
    let mtype = i64::from_le_bytes(mtype);
    let table = t.group.procs.sysv_msg.clone();
    if msgsz > u64::from(table.limits().max) || id < 0 {
        return Err(Errno::EINVAL);
    }
    if mtype < 1 {
        return Err(Errno::EINVAL);
    }
    // Past the pool no queue can ever hold it: torpor's ceiling on the text it allocates,
    // whatever `msgmax` a privileged guest set.
    if msgsz > msg::MSGPOOL * 1024 {
        return Err(Errno::ENOMEM);
    }
    let mut text = vec![0u8; msgsz as usize];
    t.copy_in(msgp.checked_add(8).ok_or(Errno::EFAULT)?, &mut text)?;
    table.send(
        id,
        Message { mtype, text },
        flags & msg::IPC_NOWAIT != 0,
        &caller(t),
        interruption(t),
    )?;
    Ok(0)
}

/// Implements msgrcv(2): writes the message's type and its text (cut to `msgsz` with
/// MSG_NOERROR) and returns the text's length. A message taken is gone even if the copy out
/// fails (EFAULT), as on Linux.
pub fn sys_msgrcv(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (id, msgp, msgsz, msgtyp, flags) = (a.int(0), a.gva(1), a.u(2), a.u(3) as i64, a.int(4));
    if id < 0 || msgsz > isize::MAX as u64 {
        return Err(Errno::EINVAL);
    }
    let table = t.group.procs.sysv_msg.clone();
    let m = table.receive(
        id,
        Selector::new(msgtyp, flags),
        msgsz as usize,
        flags,
        &caller(t),
        interruption(t),
    )?;
    t.copy_out(msgp, &m.mtype.to_le_bytes())?;
    t.copy_out(msgp.checked_add(8).ok_or(Errno::EFAULT)?, &m.text)?;
    Ok(m.text.len() as u64)
}

/// Implements msgctl(2): IPC_STAT, MSG_STAT and MSG_STAT_ANY (by index; they return the
/// id), IPC_SET (owner, group, mode, `msg_qbytes`), IPC_RMID, IPC_INFO and MSG_INFO (they
/// return the highest index in use).
pub fn sys_msgctl(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (id, cmd, buf) = (a.int(0), a.int(1), a.gva(2));
    if id < 0 || cmd < 0 {
        return Err(Errno::EINVAL);
    }
    let table = t.group.procs.sysv_msg.clone();
    let who = caller(t);
    match cmd & !IPC_64 {
        c @ (IPC_INFO | MSG_INFO) => {
            let (info, max_idx) = table.info(c == MSG_INFO);
            t.copy_out(buf, &info)?;
            Ok(max_idx as u64)
        }
        c @ (IPC_STAT | MSG_STAT | MSG_STAT_ANY) => {
            let by = match c {
                IPC_STAT => StatBy::Id,
                MSG_STAT => StatBy::Index,
                _ => StatBy::IndexAny,
            };
            let (ds, full_id) = table.stat(id, by, &who)?;
            t.copy_out(buf, &ds)?;
            Ok(if c == IPC_STAT { 0 } else { full_id as u64 })
        }
        IPC_SET => {
            let mut ds = [0u8; 120];
            t.copy_in(buf, &mut ds)?;
            table.set(id, &ds, &who)?;
            Ok(0)
        }
        IPC_RMID => {
            table.remove(id, &who)?;
            Ok(0)
        }
        _ => Err(Errno::EINVAL),
    }
}
