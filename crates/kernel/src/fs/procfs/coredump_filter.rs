//! `/proc/PID/coredump_filter`: which kinds of mapping a core dump of the process writes
//! (`task::coredump`), kept per process ([`ThreadGroup::coredump_filter`]), shown as eight
//! hex digits and set by writing a number (decimal, `0x` hex or `0` octal, as Linux's
//! `kstrtouint` with base 0 reads it) whose nine low bits are kept.

use std::sync::atomic::Ordering;

use abi::Errno;

use crate::task::coredump::FILTER_MASK;
use crate::task::{Task, ThreadGroup};

/// The file's content for process `g`.
pub(super) fn content(g: &ThreadGroup) -> Vec<u8> {
    format!("{:08x}\n", g.coredump_filter.load(Ordering::Relaxed)).into_bytes()
}

/// The process whose `coredump_filter` `clean` (a lexically clean path) names.
pub(super) fn pid_of(clean: &str, t: &Task) -> Option<i32> {
    let (pid, _, what) = super::task_dir::thread_relative(clean, t)?;
    (what == "coredump_filter").then_some(pid)
}

/// A write of `data` to process `pid`'s file: the filter's new bits. The writer needs the
/// access ptrace would (the file is its process's, mode 0644, on Linux).
///
/// # Errors
/// EINVAL for text that is not a number below 2^32; ESRCH for a process that exited; EACCES
/// for another user's process.
pub(super) fn write(t: &Task, pid: i32, data: &[u8]) -> Result<(), Errno> {
    let value = parse(data).ok_or(Errno::EINVAL)?;
    let group = if pid == t.pid {
        t.group.clone()
    } else {
        let g = t.group.procs.group_of(pid).ok_or(Errno::ESRCH)?;
        if !t.creds.may_inspect(&g.identity().creds) {
            return Err(Errno::EACCES);
        }
        g
    };
    group
        .coredump_filter
        .store(value & FILTER_MASK, Ordering::Relaxed);
    Ok(())
}

/// A number as `kstrtouint(…, 0, …)` reads it: one trailing newline allowed.
fn parse(data: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(data).ok()?;
    let text = text.strip_suffix('\n').unwrap_or(text);
    let text = text.strip_prefix('+').unwrap_or(text);
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        u32::from_str_radix(hex, 16).ok()
    } else if text.len() > 1 && text.starts_with('0') {
        u32::from_str_radix(&text[1..], 8).ok()
    } else {
        text.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn numbers_are_read_as_kstrtouint_with_base_0() {
        assert_eq!(parse(b"0x33\n"), Some(0x33));
        assert_eq!(parse(b"33"), Some(33));
        assert_eq!(parse(b"017"), Some(0o17));
        assert_eq!(parse(b"0"), Some(0));
        assert_eq!(parse(b"x"), None);
        assert_eq!(parse(b"-1"), None);
        assert_eq!(parse(b"0x1ffffffff"), None);
    }
}
