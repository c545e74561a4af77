//! `/proc/PID/fdinfo/N`: what Linux shows of an open descriptor (its position, flags, mount
//! and inode, then what its kind adds: an inotify instance's watches, an eventfd's counter,
//! a timerfd's setting), read by `lsof`, by tools that follow a copy's progress through
//! `pos`, and by programs checking their own inotify masks.
//!
//! The lines are the host's for the runtime's descriptor behind the guest's, which is the
//! same open file (so the same position, inode and kind-specific state), with two changes:
//! `flags` shows the guest's close-on-exec bit (the runtime's copy always has it), and an
//! epoll instance's `tfd:` lines, which name the runtime's descriptors, are left out.

use std::os::fd::AsRawFd;

use abi::Errno;

use crate::task::Task;

/// The process and descriptor that `path` (lexically clean) names: `/proc/PID/fdinfo/N`
/// (or through `self` / `thread-self`).
pub(super) fn named(clean: &str, t: &Task) -> Option<(i32, i32)> {
    let (pid, _tid, what) = super::task_dir::thread_relative(clean, t)?;
    let n = what.strip_prefix("fdinfo/")?;
    let fd = n.parse::<i32>().ok().filter(|&fd| fd >= 0)?;
    Some((pid, fd))
}

/// The content of `/proc/PID/fdinfo/FD`.
///
/// # Errors
/// ENOENT for a descriptor or process that does not exist (any more).
pub(super) fn content(t: &Task, pid: i32, fd: i32) -> Result<Vec<u8>, Errno> {
    let table = if pid == t.pid {
        t.fds.clone()
    } else {
        let g = t.group.procs.group_of(pid).ok_or(Errno::ENOENT)?;
        // Another process's descriptors need Linux's ptrace read access.
        if !t.creds.may_inspect(&g.identity().creds) {
            return Err(Errno::EACCES);
        }
        g.resources().ok_or(Errno::ENOENT)?.fds
    };
    let file = table.get(fd).map_err(|_| Errno::ENOENT)?;
    let cloexec = table.cloexec(fd).unwrap_or(false);
    let host = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", file.host().as_raw_fd()))
        .map_err(|_| Errno::ENOENT)?;
    Ok(rewrite(&host, cloexec).into_bytes())
}

/// The host's fdinfo text as the guest sees it (see the module's documentation).
fn rewrite(host: &str, cloexec: bool) -> String {
    let mut out = String::with_capacity(host.len());
    for line in host.lines() {
        if line.starts_with("tfd:") {
            continue;
        }
        if let Some(v) = line.strip_prefix("flags:") {
            let flags = i64::from_str_radix(v.trim(), 8).unwrap_or(0);
            let flags = if cloexec {
                flags | i64::from(libc::O_CLOEXEC)
            } else {
                flags & !i64::from(libc::O_CLOEXEC)
            };
            out.push_str(&format!("flags:\t0{flags:o}\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::rewrite;

    #[test]
    fn the_guest_close_on_exec_bit_replaces_the_runtime_one_and_epoll_targets_go() {
        let host = "pos:\t0\nflags:\t02004002\nmnt_id:\t15\nino:\t1057\ntfd:        5 events:       19 data:                5  pos:0 ino:3 sdev:c\n";
        assert_eq!(
            rewrite(host, false),
            "pos:\t0\nflags:\t04002\nmnt_id:\t15\nino:\t1057\n"
        );
        assert_eq!(
            rewrite(
                "flags:\t0100000\ninotify wd:1 ino:2 sdev:3 mask:4 ignored_mask:0\n",
                true
            ),
            "flags:\t02100000\ninotify wd:1 ino:2 sdev:3 mask:4 ignored_mask:0\n"
        );
    }
}
