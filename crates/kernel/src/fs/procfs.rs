//! A small /proc and /sys: the files language runtimes read about themselves and the machine,
//! generated at open time into an anonymous memory file (`memfd`), so that read, lseek, fstat
//! and mmap work on them as on any file.
//!
//! | path | content |
//! |---|---|
//! | `/proc/self/maps`, `/proc/1/maps` | the address space's VMAs, Linux's format |
//! | `/proc/self/status`, `/proc/self/stat` | identity, state, memory of the process |
//! | `/proc/self/cmdline` | the arguments the program was started with (NUL-separated) |
//! | `/proc/meminfo` | the sandbox's memory limit and free memory |
//! | `/proc/cpuinfo`, `/sys/devices/system/cpu/online` | the host's (what the vCPUs run on) |
//!
//! `/proc/self/…`, `/proc/thread-self/…` and `/proc/PID/…` with the caller's own pid name the
//! caller's process; `readlink` of `/proc/self/fd/N` and `/proc/self/exe` is answered by the
//! syscall layer ([`self_relative`] splits such paths).

use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};

use abi::Errno;
use mm::{Prot, VmaKind};

use crate::task::Task;

/// The part after `/proc/self/`, `/proc/thread-self/` or `/proc/PID/` when PID is `pid` (the
/// caller's process), e.g. `maps` or `fd/3`.
pub fn self_relative(path: &[u8], pid: i32) -> Option<&str> {
    let p = std::str::from_utf8(path).ok()?.trim_end_matches('/');
    let rest = p.strip_prefix("/proc/")?;
    let (who, what) = rest.split_once('/')?;
    let me = who == "self" || who == "thread-self" || who.parse::<i32>().ok() == Some(pid);
    me.then_some(what)
}

/// Whether `path` is one of the generated files of process `pid`.
fn normalise(path: &[u8], pid: i32) -> Option<&'static str> {
    if let Some(what) = self_relative(path, pid) {
        return Some(match what {
            "maps" => "maps",
            "status" => "status",
            "stat" => "stat",
            "cmdline" => "cmdline",
            _ => return None,
        });
    }
    let p = std::str::from_utf8(path).ok()?;
    let p = p.trim_end_matches('/');
    Some(match p {
        "/proc/meminfo" => "meminfo",
        "/proc/cpuinfo" => "cpuinfo",
        "/sys/devices/system/cpu/online" | "/sys/devices/system/cpu/possible" => "online",
        _ => return None,
    })
}

/// Opens a generated file, if `path` names one.
///
/// # Errors
/// The host's errno if the memory file cannot be made.
pub fn open(t: &Task, path: &[u8]) -> Option<Result<OwnedFd, Errno>> {
    let which = normalise(path, t.pid)?;
    let content = match which {
        "maps" => maps(t),
        "cmdline" => t.cmdline.to_vec(),
        "status" => status(t),
        "stat" => stat(t),
        "meminfo" => meminfo(t),
        "cpuinfo" => std::fs::read("/proc/cpuinfo").unwrap_or_default(),
        "online" => {
            std::fs::read("/sys/devices/system/cpu/online").unwrap_or_else(|_| b"0\n".to_vec())
        }
        _ => return None,
    };
    Some(memfd_with(&content))
}

fn memfd_with(content: &[u8]) -> Result<OwnedFd, Errno> {
    // SAFETY: a valid NUL-terminated name and flags.
    let fd = unsafe { libc::memfd_create(c"torpor-proc".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a fresh fd owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut f = std::fs::File::from(owned);
    f.write_all(content).map_err(Errno::from)?;
    use std::io::Seek;
    f.seek(std::io::SeekFrom::Start(0)).map_err(Errno::from)?;
    Ok(OwnedFd::from(f))
}

fn maps(t: &Task) -> Vec<u8> {
    let mm = t.mm();
    let mut out = String::new();
    for v in mm.vmas() {
        let (offset, file, share) = match &v.kind {
            VmaKind::File { offset, .. } => (*offset, true, 'p'),
            VmaKind::Shared { offset, object, .. } => (*offset, object.is_file(), 's'),
            VmaKind::Anon => (0, false, 'p'),
        };
        let perm = |p: Prot, c: char| if v.prot.contains(p) { c } else { '-' };
        let name = v.name.clone().unwrap_or_default();
        let line = format!(
            "{:08x}-{:08x} {}{}{}{} {:08x} 00:00 {} ",
            v.start.raw(),
            v.end.raw(),
            perm(Prot::READ, 'r'),
            perm(Prot::WRITE, 'w'),
            perm(Prot::EXEC, 'x'),
            share,
            offset,
            if file { 1 } else { 0 },
        );
        out.push_str(&line);
        if !name.is_empty() {
            out.push_str(&" ".repeat(73usize.saturating_sub(line.len())));
            out.push_str(&name);
        }
        out.push('\n');
    }
    out.into_bytes()
}

fn comm(t: &Task) -> String {
    String::from_utf8_lossy(t.comm.split(|&c| c == 0).next().unwrap_or(b"")).into_owned()
}

fn status(t: &Task) -> Vec<u8> {
    let stats = t.mm().stats();
    let rss_kb = stats.mapped_pages as u64 * 4;
    let (uid, gid) = (t.creds.uid, t.creds.gid);
    format!(
        "Name:\t{}\nUmask:\t{:04o}\nState:\tR (running)\nTgid:\t{pid}\nNgid:\t0\nPid:\t{tid}\nPPid:\t{ppid}\n\
         TracerPid:\t0\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{gid}\t{gid}\t{gid}\t{gid}\nFDSize:\t64\n\
         VmRSS:\t{rss_kb} kB\nThreads:\t{threads}\nSigBlk:\t{:016x}\nCpus_allowed_list:\t0\n",
        comm(t),
        t.umask,
        t.signals.mask,
        pid = t.pid,
        tid = t.tid,
        ppid = t.group.procs.parent_of(t.pid),
        threads = t.group.live(),
    )
    .into_bytes()
}

fn stat(t: &Task) -> Vec<u8> {
    let stats = t.mm().stats();
    let mut fields = vec!["0".to_string(); 52];
    fields[0] = t.pid.to_string();
    fields[1] = format!("({})", comm(t));
    fields[2] = "R".into();
    fields[3] = t.group.procs.parent_of(t.pid).to_string(); // ppid
    let member = t.group.procs.membership(t.pid);
    fields[4] = member.map_or(t.pid, |m| m.pgid).to_string(); // pgrp
    fields[5] = member.map_or(t.pid, |m| m.sid).to_string(); // session
    fields[7] = "-1".into(); // tpgid
    fields[19] = t.group.live().to_string(); // num_threads
    fields[22] = (stats.mapped_pages as u64 * 4096).to_string(); // vsize (approx.)
    fields[23] = stats.mapped_pages.to_string(); // rss
    let mut s = fields.join(" ");
    s.push('\n');
    s.into_bytes()
}

fn meminfo(t: &Task) -> Vec<u8> {
    let stats = t.mm().stats();
    let total = stats.total_pages as u64 * 4;
    let free = stats.free_pages as u64 * 4;
    format!(
        "MemTotal:       {total:>8} kB\nMemFree:        {free:>8} kB\nMemAvailable:   {free:>8} kB\n\
         Buffers:               0 kB\nCached:                0 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n"
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(normalise(b"/proc/self/maps", 1), Some("maps"));
        assert_eq!(normalise(b"/proc/1/status", 1), Some("status"));
        assert_eq!(normalise(b"/proc/7/cmdline", 7), Some("cmdline"));
        assert_eq!(normalise(b"/proc/thread-self/stat/", 3), Some("stat"));
        assert_eq!(normalise(b"/proc/meminfo", 1), Some("meminfo"));
        assert_eq!(normalise(b"/proc/2/maps", 1), None);
        assert_eq!(normalise(b"/proc/self/environ", 1), None);
        assert_eq!(self_relative(b"/proc/self/fd/3", 1), Some("fd/3"));
        assert_eq!(self_relative(b"/proc/9/fd/3", 1), None);
        assert_eq!(self_relative(b"/proc/selfish/fd", 1), None);
        assert_eq!(normalise(b"/etc/passwd", 1), None);
    }

    #[test]
    fn memfd_round_trip() {
        use std::io::Read;
        let fd = memfd_with(b"hello").unwrap();
        let mut s = String::new();
        std::fs::File::from(fd).read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello");
    }
}
