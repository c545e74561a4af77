//! The threads of a process in /proc: `/proc/PID/task/` lists them, `/proc/PID/task/TID/`
//! (and `/proc/thread-self/`, the caller's own) holds what `/proc/PID/` does, seen from that
//! thread: its id, name and state in `stat` and `status`, its `comm`, which the threads of
//! its own process may write (Linux's `comm_write`: EINVAL for any other writer).

use std::sync::Arc;

use abi::Errno;

use crate::task::{Task, TaskControl};

/// The process, thread (for a path under `/proc/PID/task/TID/` or `/proc/thread-self/`) and
/// file a lexically clean `/proc/…` path names; `None` for a path naming no process, or a
/// thread that is not one of its process's live threads.
pub(super) fn thread_relative(clean: &str, t: &Task) -> Option<(i32, Option<i32>, String)> {
    let rest = clean.strip_prefix("/proc/")?;
    if let Some(what) = rest.strip_prefix("thread-self/") {
        return Some((t.pid, Some(t.tid), what.to_owned()));
    }
    let (pid, what) = super::process_relative(clean.as_bytes(), t)?;
    let Some(tail) = what.strip_prefix("task/") else {
        return Some((pid, None, what.to_owned()));
    };
    let (tid, what) = tail.split_once('/')?;
    let tid = tid.parse::<i32>().ok().filter(|&x| x > 0)?;
    control_of(t, pid, tid)?;
    Some((pid, Some(tid), what.to_owned()))
}

/// The control of live thread `tid` of process `pid` (the caller's own or another of the
/// sandbox's).
pub(super) fn control_of(t: &Task, pid: i32, tid: i32) -> Option<Arc<TaskControl>> {
    if pid == t.pid {
        return t.group.member_control(tid);
    }
    t.group.procs.group_of(pid)?.member_control(tid)
}

/// The live threads of process `pid`, in increasing order; `None` for a process that exited.
pub(super) fn thread_ids(t: &Task, pid: i32) -> Option<Vec<i32>> {
    if pid == t.pid {
        return Some(t.group.thread_ids());
    }
    Some(t.group.procs.group_of(pid)?.thread_ids())
}

/// The entries of `/proc/PID/task`, `.` and `..` first, then a directory per live thread
/// (its position its id plus 2, stable while threads come and go).
pub(super) fn task_entries(t: &Task, pid: i32) -> Option<Vec<super::DirEntry>> {
    let mut out = vec![
        (0, b".".to_vec(), libc::DT_DIR),
        (1, b"..".to_vec(), libc::DT_DIR),
    ];
    for tid in thread_ids(t, pid)? {
        out.push((tid as u64 + 2, tid.to_string().into_bytes(), libc::DT_DIR));
    }
    Some(out)
}

/// A thread's name from `data` written to its `comm` file: up to the first NUL, at most 15
/// bytes (Linux's `comm_write` keeps a newline and truncates), NUL-padded.
pub(super) fn comm_from(data: &[u8]) -> [u8; 16] {
    let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let mut name = [0u8; 16];
    let n = end.min(15);
    name[..n].copy_from_slice(&data[..n]);
    name
}

/// Writes `data` as the name of thread `tid` of process `pid` (`/proc/PID/comm` names the
/// first thread): a thread of the writer's own process only, else EINVAL as on Linux; ESRCH
/// for a thread that exited meanwhile.
pub(super) fn write_comm(t: &Task, pid: i32, tid: i32, data: &[u8]) -> Result<(), Errno> {
    if pid != t.pid {
        return Err(Errno::EINVAL);
    }
    let name = comm_from(data);
    if tid == t.tid {
        t.set_comm(name);
        return Ok(());
    }
    let control = t.group.member_control(tid).ok_or(Errno::ESRCH)?;
    control.set_comm(name);
    if tid == t.pid {
        // The first thread speaks for the process to the others' /proc: republished with
        // its new name.
        let mut id = t.group.identity();
        id.comm = name;
        t.group.set_identity(id);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comm_is_cut_at_nul_and_15_bytes() {
        assert_eq!(&comm_from(b"worker\n")[..8], b"worker\n\0");
        assert_eq!(&comm_from(b"a\0b")[..2], b"a\0");
        let long = comm_from(b"0123456789abcdefgh");
        assert_eq!(&long[..15], b"0123456789abcde");
        assert_eq!(long[15], 0);
        assert_eq!(comm_from(b""), [0; 16]);
    }
}
