//! `/proc/sys`: the kernel tunables programs read to size themselves (`pid_max`, the pipe and
//! inotify limits, the System V IPC limits, `somaxconn`), read-only as a container's
//! `/proc/sys` is, but for those that are the sandbox's own, which its root may write
//! ([`write`]): the System V IPC limits and the POSIX message queue limits of `fs/mqueue`
//! (its IPC namespace's), the host and domain names (its UTS namespace's), its core dumps'
//! `kernel/core_pattern`, and `fs/pipe-max-size` and `fs/inotify/max_user_instances`, which
//! torpor enforces within the host's own (F_SETPIPE_SZ, inotify_init).
//!
//! Each value is what bounds the sandbox: torpor's own for what torpor implements (pids,
//! threads, System V shared memory, semaphores and message queues, AIO events, the lowest
//! mappable address), the host kernel's for what the host enforces on the sandbox's behalf (pipes,
//! inotify, descriptors, listen backlogs), read once before the holder is confined
//! ([`prime_host_values`]).

use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use abi::Errno;

use crate::task::Task;

/// What a tunable's value comes from.
enum Source {
    /// A fixed value of torpor's.
    Fixed(&'static str),
    /// Computed for the caller's sandbox.
    Sandbox(fn(&Task) -> String),
    /// The host's file of the same name (the host enforces that limit).
    Host,
}

/// The tunables, by their path under `/proc/sys/`.
const TUNABLES: &[(&str, Source)] = &[
    ("kernel/pid_max", Source::Fixed("4194304")),
    ("kernel/threads-max", Source::Sandbox(threads_max)),
    ("kernel/ngroups_max", Source::Fixed("65536")),
    ("kernel/cap_last_cap", Source::Sandbox(cap_last_cap)),
    ("kernel/overflowuid", Source::Fixed("65534")),
    ("kernel/overflowgid", Source::Fixed("65534")),
    ("kernel/ostype", Source::Fixed("Linux")),
    ("kernel/osrelease", Source::Sandbox(osrelease)),
    ("kernel/version", Source::Sandbox(version)),
    ("kernel/hostname", Source::Sandbox(hostname)),
    ("kernel/domainname", Source::Sandbox(domainname)),
    ("kernel/shmmax", Source::Sandbox(shmmax)),
    ("kernel/shmall", Source::Sandbox(shmall)),
    ("kernel/shmmni", Source::Sandbox(shmmni)),
    ("kernel/sem", Source::Sandbox(sem)),
    ("kernel/msgmax", Source::Sandbox(msgmax)),
    ("kernel/msgmnb", Source::Sandbox(msgmnb)),
    ("kernel/msgmni", Source::Sandbox(msgmni)),
    ("kernel/core_pattern", Source::Sandbox(core_pattern)),
    ("kernel/core_uses_pid", Source::Fixed("0")),
    // torpor's kernel loads no module and taints nothing.
    ("kernel/tainted", Source::Fixed("0")),
    ("kernel/random/uuid", Source::Sandbox(uuid)),
    ("kernel/random/boot_id", Source::Sandbox(boot_id)),
    ("fs/mqueue/queues_max", Source::Sandbox(mq_queues_max)),
    ("fs/mqueue/msg_max", Source::Sandbox(mq_msg_max)),
    ("fs/mqueue/msgsize_max", Source::Sandbox(mq_msgsize_max)),
    ("fs/mqueue/msg_default", Source::Sandbox(mq_msg_default)),
    (
        "fs/mqueue/msgsize_default",
        Source::Sandbox(mq_msgsize_default),
    ),
    ("vm/mmap_min_addr", Source::Sandbox(mmap_min_addr)),
    ("vm/overcommit_memory", Source::Fixed("0")),
    ("fs/aio-nr", Source::Sandbox(aio_nr)),
    ("fs/aio-max-nr", Source::Sandbox(aio_max_nr)),
    ("fs/pipe-max-size", Source::Sandbox(pipe_max_size)),
    ("fs/pipe-user-pages-soft", Source::Host),
    ("fs/pipe-user-pages-hard", Source::Host),
    ("fs/nr_open", Source::Host),
    ("fs/file-max", Source::Host),
    ("fs/inotify/max_queued_events", Source::Host),
    (
        "fs/inotify/max_user_instances",
        Source::Sandbox(inotify_max_instances),
    ),
    ("fs/inotify/max_user_watches", Source::Host),
    ("net/core/somaxconn", Source::Host),
];

/// The sandbox's own tunables that read as the host's until written.
const OWN_OVER_HOST: [&str; 2] = ["fs/pipe-max-size", "fs/inotify/max_user_instances"];

/// The name under `/proc/sys/` of the tunable at `path` (a lexically clean path), if torpor
/// has it.
pub fn name_of(path: &str) -> Option<&'static str> {
    let rest = path.strip_prefix("/proc/sys/")?;
    TUNABLES.iter().map(|(n, _)| *n).find(|n| *n == rest)
}

/// The content of tunable `name` (one of [`name_of`]'s) for `t`'s sandbox, newline-ended.
pub fn value(t: &Task, name: &str) -> Vec<u8> {
    let v = match TUNABLES.iter().find(|(n, _)| *n == name).map(|(_, s)| s) {
        Some(Source::Fixed(v)) => v.to_string(),
        Some(Source::Sandbox(f)) => f(t),
        Some(Source::Host) => host_value(name).unwrap_or_default(),
        None => String::new(),
    };
    format!("{v}\n").into_bytes()
}

/// The host's tunables torpor passes on, read once ([`host_values`]) or adopted
/// ([`adopt_host_values`]).
static VALUES: OnceLock<Vec<(&'static str, String)>> = OnceLock::new();

/// The host's tunables torpor passes on, read once.
fn host_values() -> &'static Vec<(&'static str, String)> {
    VALUES.get_or_init(|| {
        TUNABLES
            .iter()
            .filter(|(n, s)| matches!(s, Source::Host) || OWN_OVER_HOST.contains(n))
            .filter_map(|(n, _)| {
                let v = std::fs::read_to_string(format!("/proc/sys/{n}")).ok()?;
                Some((*n, v.trim_end().to_string()))
            })
            .collect()
    })
}

fn host_value(name: &str) -> Option<String> {
    host_values()
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.clone())
}

/// Reads the host's tunables now, while the holder may still open `/proc/sys`.
pub fn prime_host_values() {
    host_values();
}

/// The host's tunables as names and values.
pub(super) fn host_values_owned() -> Vec<(String, String)> {
    host_values()
        .iter()
        .map(|(n, v)| (n.to_string(), v.clone()))
        .collect()
}

/// Takes `values` as the host's tunables, unless read already: those of the names torpor
/// passes on, the others ignored.
pub(super) fn adopt_host_values(values: &[(String, String)]) {
    let known = values
        .iter()
        .filter_map(|(n, v)| {
            let (name, _) = TUNABLES.iter().find(|(t, _)| t == n)?;
            Some((*name, v.clone()))
        })
        .collect();
    let _ = VALUES.set(known);
}

fn threads_max(t: &Task) -> String {
    t.group.procs.task_limit().to_string()
}

fn cap_last_cap(_: &Task) -> String {
    crate::creds::cap::LAST.to_string()
}

fn osrelease(_: &Task) -> String {
    let u = crate::task::host::uname();
    String::from_utf8_lossy(&crate::task::host::uts_field(&u.release)).into_owned()
}

fn version(_: &Task) -> String {
    let u = crate::task::host::uname();
    String::from_utf8_lossy(&crate::task::host::uts_field(&u.version)).into_owned()
}

fn hostname(t: &Task) -> String {
    String::from_utf8_lossy(&t.group.procs.nodename()).into_owned()
}

fn domainname(t: &Task) -> String {
    String::from_utf8_lossy(&t.group.procs.domainname()).into_owned()
}

fn shmmax(t: &Task) -> String {
    ipc_value(t, "kernel/shmmax")
}

fn shmall(t: &Task) -> String {
    ipc_value(t, "kernel/shmall")
}

fn shmmni(t: &Task) -> String {
    ipc_value(t, "kernel/shmmni")
}

fn sem(t: &Task) -> String {
    ipc_value(t, "kernel/sem")
}

fn msgmax(t: &Task) -> String {
    ipc_value(t, "kernel/msgmax")
}

fn msgmnb(t: &Task) -> String {
    ipc_value(t, "kernel/msgmnb")
}

fn msgmni(t: &Task) -> String {
    ipc_value(t, "kernel/msgmni")
}

/// The System V IPC tunable `name` of `t`'s sandbox.
fn ipc_value(t: &Task, name: &str) -> String {
    let procs = &t.group.procs;
    match name.strip_prefix("kernel/").unwrap_or(name) {
        "sem" => procs.sysv_sem.limits().show(),
        n @ ("shmmax" | "shmall" | "shmmni") => procs.sysv_shm.limits().show(n).unwrap_or_default(),
        n => procs.sysv_msg.limits().show(n).unwrap_or_default(),
    }
}

/// The tunables the sandbox's root may write: its IPC namespace's System V limits (and the
/// POSIX message queue limits, `fs/mqueue/*`), its UTS namespace's names, its core dumps'
/// `core_pattern`, and the pipe and inotify limits torpor enforces for it.
const WRITABLE: [&str; 12] = [
    "kernel/core_pattern",
    "kernel/hostname",
    "kernel/domainname",
    "fs/pipe-max-size",
    "fs/inotify/max_user_instances",
    "kernel/shmmax",
    "kernel/shmall",
    "kernel/shmmni",
    "kernel/sem",
    "kernel/msgmax",
    "kernel/msgmnb",
    "kernel/msgmni",
];

/// Whether tunable `name` (one of [`name_of`]'s) may be written.
pub fn writable(name: &str) -> bool {
    WRITABLE.contains(&name) || name.starts_with("fs/mqueue/")
}

/// Writes `text` to tunable `name` of `t`'s sandbox, as Linux's `proc_dointvec_minmax`,
/// `proc_doulongvec_minmax` and `proc_ipc_sem_dointvec` read it: the new value applies to
/// the calls made from now on.
///
/// # Errors
/// EINVAL for text that is not a value in the tunable's range, ERANGE for a SEMMNI beyond
/// 32768 (Linux's), EACCES for a tunable that cannot be written.
pub fn write(t: &Task, name: &str, text: &[u8]) -> Result<(), Errno> {
    let procs = &t.group.procs;
    match name {
        "kernel/sem" => {
            let l = procs.sysv_sem.limits().with(text)?;
            procs.sysv_sem.set_limits(l);
        }
        "kernel/shmmax" | "kernel/shmall" | "kernel/shmmni" => {
            let l = procs.sysv_shm.limits().with(&name[7..], text)?;
            procs.sysv_shm.set_limits(l);
        }
        "kernel/msgmax" | "kernel/msgmnb" | "kernel/msgmni" => {
            let l = procs.sysv_msg.limits().with(&name[7..], text)?;
            procs.sysv_msg.set_limits(l);
        }
        n if n.starts_with("fs/mqueue/") => write_mqueue(t, n, text)?,
        // The sandbox's UTS namespace (sethostname, setdomainname): the text up to a
        // newline, at most 64 bytes (Linux's proc_do_uts_string).
        "kernel/hostname" | "kernel/domainname" => {
            let end = text.iter().position(|&b| b == b'\n' || b == 0);
            let value = &text[..end.unwrap_or(text.len())];
            if value.len() > 64 {
                return Err(Errno::EINVAL);
            }
            if name == "kernel/hostname" {
                procs.set_nodename(value);
            } else {
                procs.set_domainname(value);
            }
        }
        "fs/pipe-max-size" => {
            // Linux rounds it up to a power-of-two number of pages (round_pipe_size).
            let v = decimal(text)?;
            if v == 0 || v > 1 << 31 {
                return Err(Errno::EINVAL);
            }
            let rounded = v.max(platform::PAGE_SIZE).next_power_of_two();
            procs.pipe_max_size.store(rounded, Ordering::Relaxed);
        }
        "fs/inotify/max_user_instances" => {
            let v = decimal(text)?;
            if v > i32::MAX as u64 {
                return Err(Errno::EINVAL);
            }
            // 0 means "the host's" here: a sandbox that sets no instance at all gets one.
            procs
                .inotify_max_instances
                .store(v.max(1), Ordering::Relaxed);
        }
        "kernel/core_pattern" => {
            *procs.core_pattern.lock().unwrap_or_else(|e| e.into_inner()) =
                crate::task::coredump::pattern_from(text)?;
        }
        _ => return Err(Errno::EACCES),
    }
    Ok(())
}

/// A decimal number, as Linux's proc_dointvec reads one (surrounding blanks allowed).
fn decimal(text: &[u8]) -> Result<u64, Errno> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or(Errno::EINVAL)
}

fn pipe_max_size(t: &Task) -> String {
    sandbox_or_host(&t.group.procs.pipe_max_size, "fs/pipe-max-size")
}

fn inotify_max_instances(t: &Task) -> String {
    sandbox_or_host(
        &t.group.procs.inotify_max_instances,
        "fs/inotify/max_user_instances",
    )
}

/// The sandbox's value of a tunable once written, else the host's.
fn sandbox_or_host(v: &std::sync::atomic::AtomicU64, name: &str) -> String {
    match v.load(Ordering::Relaxed) {
        0 => host_value(name).unwrap_or_default(),
        n => n.to_string(),
    }
}

/// The sandbox's pipe-max-size: what F_SETPIPE_SZ may ask for without CAP_SYS_RESOURCE.
pub fn pipe_max_size_of(t: &Task) -> u64 {
    pipe_max_size(t).trim().parse().unwrap_or(1 << 20)
}

/// The sandbox's max_user_instances: how many inotify instances its processes may hold.
pub fn inotify_max_instances_of(t: &Task) -> u64 {
    inotify_max_instances(t).trim().parse().unwrap_or(128)
}

fn core_pattern(t: &Task) -> String {
    let p = t.group.procs.core_pattern.lock();
    String::from_utf8_lossy(&p.unwrap_or_else(|e| e.into_inner())).into_owned()
}

fn aio_nr(t: &Task) -> String {
    t.group.procs.aio_nr.current().to_string()
}

fn aio_max_nr(_: &Task) -> String {
    crate::aio::AIO_MAX_NR.to_string()
}

fn mq_queues_max(t: &Task) -> String {
    t.group.procs.posix_mq.limits().queues_max.to_string()
}

fn mq_msg_max(t: &Task) -> String {
    t.group.procs.posix_mq.limits().msg_max.to_string()
}

fn mq_msgsize_max(t: &Task) -> String {
    t.group.procs.posix_mq.limits().msgsize_max.to_string()
}

fn mq_msg_default(t: &Task) -> String {
    t.group.procs.posix_mq.limits().msg_default.to_string()
}

fn mq_msgsize_default(t: &Task) -> String {
    t.group.procs.posix_mq.limits().msgsize_default.to_string()
}

/// A write of `text` to POSIX message queue tunable `name`: a decimal integer within
/// Linux's bounds for it (`ipc/mq_sysctl.c`).
///
/// # Errors
/// EINVAL for text that is not such a number, or a tunable that is not one of these.
fn write_mqueue(t: &Task, name: &str, text: &[u8]) -> Result<(), abi::Errno> {
    use abi::mqueue::{HARD_MSGMAX, HARD_MSGSIZEMAX};
    let v: i64 = std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or(abi::Errno::EINVAL)?;
    let within = |lo: i64, hi: i64| {
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(abi::Errno::EINVAL)
        }
    };
    let ns = &t.group.procs.posix_mq;
    let mut l = ns.limits();
    match name {
        "fs/mqueue/queues_max" => l.queues_max = within(0, i64::from(i32::MAX))? as u64,
        "fs/mqueue/msg_max" => l.msg_max = within(1, HARD_MSGMAX)?,
        "fs/mqueue/msgsize_max" => l.msgsize_max = within(128, HARD_MSGSIZEMAX)?,
        "fs/mqueue/msg_default" => l.msg_default = within(1, HARD_MSGMAX)?,
        "fs/mqueue/msgsize_default" => l.msgsize_default = within(128, HARD_MSGSIZEMAX)?,
        _ => return Err(abi::Errno::EINVAL),
    }
    ns.set_limits(l);
    Ok(())
}

fn uuid(_: &Task) -> String {
    // A random (version 4) UUID on every read, as Linux's.
    uuid_text(&crate::task::new_boot_id())
}

fn boot_id(t: &Task) -> String {
    uuid_text(&t.group.procs.boot_id())
}

/// A UUID's 16 bytes in the text form `8-4-4-4-12`.
fn uuid_text(b: &[u8; 16]) -> String {
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

fn mmap_min_addr(_: &Task) -> String {
    mm::MMAP_MIN_ADDR.raw().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_tunables_are_found() {
        assert_eq!(name_of("/proc/sys/kernel/pid_max"), Some("kernel/pid_max"));
        assert_eq!(
            name_of("/proc/sys/fs/inotify/max_user_watches"),
            Some("fs/inotify/max_user_watches")
        );
        assert_eq!(name_of("/proc/sys/kernel/msgmnb"), Some("kernel/msgmnb"));
        assert_eq!(name_of("/proc/sys/kernel"), None);
        assert_eq!(
            name_of("/proc/sys/kernel/core_pattern"),
            Some("kernel/core_pattern")
        );
        assert_eq!(name_of("/proc/sys/kernel/modprobe"), None);
        assert_eq!(name_of("/proc/kernel/pid_max"), None);
    }

    #[test]
    fn host_tunables_are_the_hosts() {
        let ours = host_value("fs/pipe-max-size").expect("the host has pipe-max-size");
        let host = std::fs::read_to_string("/proc/sys/fs/pipe-max-size").unwrap();
        assert_eq!(ours, host.trim_end());
    }
}
