//! The container's cgroup (`linux.cgroupsPath`), as runc's cgroupfs driver makes it: the
//! holder process joins it before it builds the VM (so every page of the sandbox is charged
//! there from the start), its CPU and memory limits are written there, and `delete` removes it.
//!
//! Engines read a container's figures from the cgroup of its pid: containerd's runc shim
//! computes the CRI's ContainerStats (memory working set, CPU) from `/proc/PID/cgroup`, so a
//! holder left in the shim's cgroup reported the whole machine's memory.
//!
//! - Hierarchies: every cgroup v1 hierarchy mounted (`/proc/self/mountinfo`, type `cgroup`:
//!   memory, cpu, cpuacct, pids, cpuset, devices, freezer, blkio, `name=systemd`…) and the v2
//!   one (type `cgroup2`: the whole tree on a unified host, the controller-less `unified`
//!   mount on a hybrid one). The container's directory is `MOUNT/cgroupsPath` in each.
//! - The path: `/a/b` (cgroupfs, as the CRI's `/k8s.io/ID` or podman's
//!   `/libpod_parent/libpod-ID`); a relative one is taken from the root; the systemd form
//!   `SLICE:PREFIX:NAME` becomes the directories systemd would make
//!   (`/a.slice/a-b.slice/PREFIX-NAME.scope`), created directly, without systemd.
//! - Limits: `linux.resources.memory.limit` plus [`HOLDER_OVERHEAD`] (the guest's own limit
//!   is the sandbox's memory size, which torpor's kernel enforces; the cgroup's bounds the
//!   holder process, its page tables, its VM and the page cache of its swap file too),
//!   `linux.resources.cpu` shares, quota and period (v1 `cpu.shares`, `cpu.cfs_*`; v2
//!   `cpu.weight`, `cpu.max`). The pids limit stays torpor's own (guest tasks, not host
//!   threads).
//! - A holder that is not root and may not create the directories (rootless) goes on in its
//!   own cgroup, with a warning, as rootless runc does.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the cgroup's memory limit allows beyond the guest's memory: the holder process
/// (about 5 MiB), its VM structures and the page cache of its swap and REAP files.
pub const HOLDER_OVERHEAD: u64 = 64 << 20;

/// Why the holder could not be put in its cgroup.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// `linux.cgroupsPath` cannot be used.
    #[error("linux.cgroupsPath {path:?}: {why}")]
    Path {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A cgroup file or directory could not be made or written.
    #[error("cgroup {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The host's error.
        source: std::io::Error,
    },
}

/// The cgroup a container asks for, and its limits.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CgroupSpec {
    /// The path inside each hierarchy, absolute and normalised (`/k8s.io/ID`).
    pub path: String,
    /// The memory limit to write (the guest's limit plus [`HOLDER_OVERHEAD`]).
    pub memory_limit: Option<u64>,
    /// `linux.resources.cpu.shares`.
    pub cpu_shares: Option<u64>,
    /// `linux.resources.cpu.quota` (microseconds per period; negative: none).
    pub cpu_quota: Option<i64>,
    /// `linux.resources.cpu.period` (microseconds).
    pub cpu_period: Option<u64>,
}

impl CgroupSpec {
    /// The cgroup of a config.json: `None` when it names no `linux.cgroupsPath`.
    ///
    /// # Errors
    /// [`CgroupError::Path`] for a path with `..` or a malformed systemd form.
    pub fn from_spec(spec: &oci_spec::runtime::Spec) -> Result<Option<CgroupSpec>, CgroupError> {
        let Some(linux) = spec.linux() else {
            return Ok(None);
        };
        let Some(raw) = linux.cgroups_path() else {
            return Ok(None);
        };
        let raw = raw.to_string_lossy();
        if raw.is_empty() {
            return Ok(None);
        }
        let mut c = CgroupSpec {
            path: normalise(&raw)?,
            ..CgroupSpec::default()
        };
        if let Some(res) = linux.resources() {
            if let Some(limit) = res.memory().as_ref().and_then(|m| m.limit()) {
                if limit > 0 {
                    c.memory_limit = Some((limit as u64).saturating_add(HOLDER_OVERHEAD));
                }
            }
            if let Some(cpu) = res.cpu() {
                c.cpu_shares = cpu.shares().filter(|&s| s > 0);
                c.cpu_quota = cpu.quota().filter(|&q| q > 0);
                c.cpu_period = cpu.period().filter(|&p| p > 0);
            }
        }
        Ok(Some(c))
    }
}

/// The path of a `linux.cgroupsPath` value inside each hierarchy (see the module doc).
///
/// # Errors
/// [`CgroupError::Path`] for `..` components or a systemd form without three parts.
pub fn normalise(raw: &str) -> Result<String, CgroupError> {
    let bad = |why| CgroupError::Path {
        path: raw.to_string(),
        why,
    };
    let path = if !raw.starts_with('/') && raw.contains(':') {
        let parts: Vec<&str> = raw.split(':').collect();
        let [slice, prefix, name] = parts[..] else {
            return Err(bad("the systemd form is SLICE:PREFIX:NAME"));
        };
        if name.is_empty() {
            return Err(bad("the systemd form needs a NAME"));
        }
        let unit = if name.ends_with(".slice") || name.ends_with(".scope") {
            name.to_string()
        } else if prefix.is_empty() {
            format!("{name}.scope")
        } else {
            format!("{prefix}-{name}.scope")
        };
        format!(
            "{}/{unit}",
            expand_slice(slice).ok_or_else(|| bad("bad slice name"))?
        )
    } else {
        raw.to_string()
    };
    let mut out = String::new();
    for c in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
        if c == ".." {
            return Err(bad("\"..\" is not allowed"));
        }
        out.push('/');
        out.push_str(c);
    }
    if out.is_empty() {
        return Err(bad("the root cgroup is not a container's"));
    }
    Ok(out)
}

/// systemd's directories of a slice: `a-b.slice` is `/a.slice/a-b.slice`; empty is
/// `system.slice`, `-.slice` the root.
fn expand_slice(slice: &str) -> Option<String> {
    let slice = if slice.is_empty() {
        "system.slice"
    } else {
        slice
    };
    if slice == "-.slice" {
        return Some(String::new());
    }
    let stem = slice.strip_suffix(".slice")?;
    if stem.is_empty() || stem.contains('/') || stem.starts_with('-') || stem.ends_with('-') {
        return None;
    }
    let mut out = String::new();
    let mut prefix = String::new();
    for part in stem.split('-') {
        if part.is_empty() {
            return None;
        }
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(part);
        out.push('/');
        out.push_str(&prefix);
        out.push_str(".slice");
    }
    Some(out)
}

/// One mounted cgroup hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// Where it is mounted.
    pub mount: PathBuf,
    /// cgroup v2 (`cgroup2`) rather than v1.
    pub v2: bool,
    /// Its controllers (`memory`, `cpu`…; none for a named v1 hierarchy, nor for the v2
    /// `unified` mount of a hybrid host).
    pub controllers: Vec<String>,
}

/// The cgroup hierarchies of a `/proc/self/mountinfo` text, one per hierarchy (the first
/// mount of each).
pub fn parse_mountinfo(text: &str) -> Vec<Hierarchy> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for line in text.lines() {
        // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        let (Some(dev), Some(mount), Some(fstype)) = (l.get(2), l.get(4), r.first()) else {
            continue;
        };
        let v2 = match *fstype {
            "cgroup" => false,
            "cgroup2" => true,
            _ => continue,
        };
        if seen.contains(dev) {
            continue;
        }
        seen.push(*dev);
        let controllers = if v2 {
            Vec::new()
        } else {
            r.get(2)
                .map(|o| {
                    o.split(',')
                        .filter(|c| {
                            !matches!(*c, "rw" | "ro" | "clone_children" | "noprefix")
                                && !c.contains('=')
                        })
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        out.push(Hierarchy {
            mount: PathBuf::from(unescape_mount(mount)),
            v2,
            controllers,
        });
    }
    out
}

/// A mountinfo path with its octal escapes (`\040` for a space) decoded.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let v = b[i + 1..i + 4]
                .iter()
                .fold(0u32, |a, d| a * 8 + u32::from(d - b'0'));
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The host's cgroup hierarchies (a v2 one with the controllers its root has).
pub fn hierarchies() -> Vec<Hierarchy> {
    let mut h = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default();
    for x in h.iter_mut().filter(|x| x.v2) {
        x.controllers = std::fs::read_to_string(x.mount.join("cgroup.controllers"))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect();
    }
    h
}

/// The container's directory in hierarchy `h`.
fn dir_in(h: &Hierarchy, path: &str) -> PathBuf {
    h.mount.join(path.trim_start_matches('/'))
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    std::fs::write(path, value).map_err(io_err(path))
}

/// Puts this process into the cgroup `spec` in every hierarchy, creating the directories and
/// writing the limits first, and keeps the memory hierarchy's reclaim file open
/// ([`reclaim_fd`]). Returns warnings (what was left out, and why).
///
/// # Errors
/// [`CgroupError::Io`] when a directory cannot be made or a file written (as root; a process
/// that is not root and may not make them only gets a warning).
pub fn join(spec: &CgroupSpec) -> Result<Vec<String>, CgroupError> {
    let mut warnings = Vec::new();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let pid = std::process::id().to_string();
    for h in hierarchies() {
        let dir = dir_in(&h, &spec.path);
        match make_dirs(&h, &dir) {
            Ok(()) => {}
            Err(CgroupError::Io { path, source })
                if !root
                    && matches!(
                        source.kind(),
                        ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem
                    ) =>
            {
                warnings.push(format!(
                    "linux.cgroupsPath: {}: {source} (not root: the container stays in the runtime's cgroup)",
                    path.display()
                ));
                continue;
            }
            Err(e) => return Err(e),
        }
        for (file, value) in limit_files(&h, spec) {
            let p = dir.join(file);
            if !p.exists() {
                warnings.push(format!(
                    "cgroup {}: no {file} (controller not enabled): limit not set",
                    dir.display()
                ));
                continue;
            }
            write(&p, &value)?;
        }
        write(&dir.join("cgroup.procs"), &pid)?;
        if let Some(file) = reclaim_file(&h) {
            keep_reclaim_file(&dir.join(file));
        }
    }
    Ok(warnings)
}

/// The file of hierarchy `h` that asks the kernel to reclaim a cgroup's memory: v1
/// `memory.force_empty`, v2 `memory.reclaim`; none without the memory controller.
fn reclaim_file(h: &Hierarchy) -> Option<&'static str> {
    h.controllers
        .iter()
        .any(|c| c == "memory")
        .then_some(if h.v2 {
            "memory.reclaim"
        } else {
            "memory.force_empty"
        })
}

/// The memory reclaim file of the cgroup this process joined ([`join`]), open for writing:
/// what a dormant holder writes once the sandbox's state is on disk (`crate::dormancy`),
/// opened at the join because a confined holder cannot, and kept through every dormancy and
/// wake (`--reclaim FD`).
static RECLAIM: std::sync::OnceLock<std::os::fd::OwnedFd> = std::sync::OnceLock::new();

/// Keeps `fd` as the cgroup's memory reclaim file (the first one kept stays): a woken
/// holder's, inherited.
pub fn adopt_reclaim(fd: std::os::fd::OwnedFd) {
    let _ = RECLAIM.set(fd);
}

/// The memory reclaim file kept, if any.
pub fn reclaim_fd() -> Option<std::os::fd::RawFd> {
    RECLAIM.get().map(std::os::fd::AsRawFd::as_raw_fd)
}

/// Opens `path`, a reclaim file, for writing and keeps it ([`reclaim_fd`]); a failure is
/// logged, and a dormant sandbox's cgroup then keeps its caches.
fn keep_reclaim_file(path: &Path) {
    match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(f) => adopt_reclaim(f.into()),
        Err(e) => tracing::debug!(
            "{}: {e}: a dormant sandbox's cgroup keeps its caches",
            path.display()
        ),
    }
}

/// The limit files of hierarchy `h` and their values for `spec`.
fn limit_files(h: &Hierarchy, spec: &CgroupSpec) -> Vec<(&'static str, String)> {
    let mut v = Vec::new();
    let has = |c: &str| h.controllers.iter().any(|x| x == c);
    if has("memory") {
        if let Some(m) = spec.memory_limit {
            v.push((
                if h.v2 {
                    "memory.max"
                } else {
                    "memory.limit_in_bytes"
                },
                m.to_string(),
            ));
        }
    }
    if has("cpu") {
        if h.v2 {
            if let Some(s) = spec.cpu_shares {
                // runc's conversion of shares (2..262144) to a weight (1..10000).
                let s = s.clamp(2, 262_144);
                v.push(("cpu.weight", (1 + ((s - 2) * 9999) / 262_142).to_string()));
            }
            if spec.cpu_quota.is_some() || spec.cpu_period.is_some() {
                let quota = spec
                    .cpu_quota
                    .map_or_else(|| "max".to_string(), |q| q.to_string());
                v.push((
                    "cpu.max",
                    format!("{quota} {}", spec.cpu_period.unwrap_or(100_000)),
                ));
            }
        } else {
            if let Some(s) = spec.cpu_shares {
                v.push(("cpu.shares", s.to_string()));
            }
            if let Some(p) = spec.cpu_period {
                v.push(("cpu.cfs_period_us", p.to_string()));
            }
            if let Some(q) = spec.cpu_quota {
                v.push(("cpu.cfs_quota_us", q.to_string()));
            }
        }
    }
    v
}

/// Creates `dir` and its missing parents inside hierarchy `h`: a new v1 cpuset directory gets
/// its parent's CPUs and memory nodes (it starts with none, and could hold no process); on
/// v2, each parent delegates the controllers it has to its children (best effort).
fn make_dirs(h: &Hierarchy, dir: &Path) -> Result<(), CgroupError> {
    let Ok(rel) = dir.strip_prefix(&h.mount) else {
        return Ok(());
    };
    let cpuset = h.controllers.iter().any(|c| c == "cpuset");
    let mut cur = h.mount.clone();
    for c in rel.components() {
        let parent = cur.clone();
        if h.v2 {
            enable_controllers(&parent);
        }
        cur.push(c);
        match std::fs::create_dir(&cur) {
            Ok(()) => {
                if cpuset {
                    for f in ["cpuset.cpus", "cpuset.mems"] {
                        let mine = std::fs::read_to_string(cur.join(f)).unwrap_or_default();
                        if mine.trim().is_empty() {
                            let theirs =
                                std::fs::read_to_string(parent.join(f)).map_err(io_err(&parent))?;
                            write(&cur.join(f), theirs.trim())?;
                        }
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err(&cur)(e)),
        }
    }
    Ok(())
}

/// Writes `+C` to `dir/cgroup.subtree_control` for each controller `dir` has (ignored when
/// the kernel refuses, e.g. a directory holding processes).
fn enable_controllers(dir: &Path) {
    let Ok(have) = std::fs::read_to_string(dir.join("cgroup.controllers")) else {
        return;
    };
    let on = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    for c in have.split_whitespace() {
        if !on.split_whitespace().any(|x| x == c) {
            let _ = std::fs::write(dir.join("cgroup.subtree_control"), format!("+{c}"));
        }
    }
}

/// Removes the container's directory (`path`, as [`normalise`] gives it) from every
/// hierarchy, waiting up to 2 s for its last process to leave; parents are left (they are
/// shared, as `/k8s.io`). Returns what could not be removed.
pub fn remove(path: &str) -> Vec<String> {
    let mut left = Vec::new();
    for h in hierarchies() {
        let dir = dir_in(&h, path);
        let start = Instant::now();
        loop {
            match std::fs::remove_dir(&dir) {
                Ok(()) => break,
                Err(e) if e.kind() == ErrorKind::NotFound => break,
                Err(e)
                    if e.raw_os_error() == Some(libc::EBUSY)
                        && start.elapsed() < Duration::from_secs(2) =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => {
                    left.push(format!("cgroup {}: {e}", dir.display()));
                    break;
                }
            }
        }
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_as_runc_makes_them() {
        assert_eq!(normalise("/k8s.io/abc").unwrap(), "/k8s.io/abc");
        assert_eq!(normalise("k8s.io//abc/").unwrap(), "/k8s.io/abc");
        assert_eq!(
            normalise("machine.slice:libpod:abc").unwrap(),
            "/machine.slice/libpod-abc.scope"
        );
        assert_eq!(
            normalise("kubepods-besteffort-pod1.slice:cri-containerd:abc").unwrap(),
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-abc.scope"
        );
        assert_eq!(normalise(":p:n").unwrap(), "/system.slice/p-n.scope");
        assert!(normalise("/a/../b").is_err());
        assert!(normalise("a:b").is_err());
        assert!(normalise("/").is_err());
        assert!(normalise("bad:p:n").is_err());
    }

    #[test]
    fn hierarchies_of_a_hybrid_host() {
        let text = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw
50 23 0:32 / /mnt/again\\040here rw - cgroup cgroup rw,memory
51 23 0:40 / /mnt/cs rw - cgroup cgroup rw,cpuset,clone_children";
        let h = parse_mountinfo(text);
        assert_eq!(h.len(), 5);
        assert_eq!(h[0].mount, Path::new("/sys/fs/cgroup/cpu"));
        assert_eq!(h[0].controllers, ["cpu"]);
        assert_eq!(h[1].controllers, ["memory"]);
        assert!(h[2].controllers.is_empty() && !h[2].v2);
        assert!(h[3].v2);
        assert_eq!(h[4].controllers, ["cpuset"]);
        assert_eq!(unescape_mount("/mnt/again\\040here"), "/mnt/again here");
    }

    #[test]
    fn the_reclaim_file_is_the_memory_hierarchys() {
        let h = |v2: bool, c: &[&str]| Hierarchy {
            mount: PathBuf::from("/sys/fs/cgroup"),
            v2,
            controllers: c.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(
            reclaim_file(&h(false, &["memory"])),
            Some("memory.force_empty")
        );
        assert_eq!(
            reclaim_file(&h(true, &["cpu", "memory"])),
            Some("memory.reclaim")
        );
        assert_eq!(reclaim_file(&h(false, &["cpu", "cpuacct"])), None);
        assert_eq!(reclaim_file(&h(true, &[])), None);
    }

    #[test]
    fn limits_per_hierarchy() {
        let spec = CgroupSpec {
            path: "/x".into(),
            memory_limit: Some(100),
            cpu_shares: Some(1024),
            cpu_quota: Some(50_000),
            cpu_period: None,
        };
        let v1 = Hierarchy {
            mount: "/sys/fs/cgroup/cpu".into(),
            v2: false,
            controllers: vec!["cpu".into()],
        };
        assert_eq!(
            limit_files(&v1, &spec),
            [
                ("cpu.shares", "1024".to_string()),
                ("cpu.cfs_quota_us", "50000".to_string())
            ]
        );
        let mem = Hierarchy {
            mount: "/sys/fs/cgroup/memory".into(),
            v2: false,
            controllers: vec!["memory".into()],
        };
        assert_eq!(
            limit_files(&mem, &spec),
            [("memory.limit_in_bytes", "100".to_string())]
        );
    }
}
