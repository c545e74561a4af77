//! An OCI bundle: `config.json` read with `oci-spec` and turned into what torpor runs (a
//! [`SandboxConfig`] and the settings around it), with every field either honoured, refused
//! with a clear error, or named in a warning.
//!
//! What each part of the runtime spec becomes:
//! - `process.args/env/cwd`: the program (looked up in `PATH` inside the root when `args[0]`
//!   has no `/`), its argv, environment and working directory.
//! - `process.user`: the uid, gid and additional gids the application sees (getuid,
//!   getgroups, /proc, the auxiliary vector); files are opened with the runtime's host
//!   credentials inside the root.
//! - `process.rlimits`: the first process's limits (`RLIMIT_NOFILE` bounds its descriptor
//!   table, at most 4096; the others are reported to it), inherited by its children.
//! - `process.terminal`: a pseudo-terminal whose controller goes to `--console-socket`.
//! - `root.path` (relative to the bundle) and `root.readonly` (the sandbox's writes then fail
//!   with `EROFS`).
//! - `linux.resources.memory.limit`: the sandbox's memory size (rounded up to 4 MiB, at least
//!   16 MiB; 512 MiB without a limit).
//! - `linux.namespaces`: a `network` entry with a `path` puts the sandbox's host sockets in
//!   that namespace (what podman and CNI prepare); without a path, in a new empty one. The
//!   sandbox is its own pid, ipc, uts and mount world whatever the others say.
//! - `mounts`: bind mounts of host paths (read-only with `ro`) and tmpfs mounts are made on
//!   the root, confined to it (see [`super::mounts`]); /proc, /sys, /dev and its children are
//!   the kernel's own; other types are named in a warning.
//! - `linux.cgroupsPath` and `linux.resources` memory and CPU: the cgroup the holder joins
//!   before it builds the VM, with those limits (see [`super::cgroup`]); removed at `delete`.
//! - `linux.resources.pids.limit`: the most tasks (threads of every process) the sandbox may
//!   hold; fork and clone fail with `EAGAIN` beyond.
//! - `hostname` (or, for a pod's container, the engine's `/etc/hostname` file): the node
//!   name uname reports (`torpor` when neither is there).
//! - `annotations`: `dev.torpor.wake-mode` (`fault`, `reap`, `auto`) and
//!   `dev.torpor.hibernate-after` (a duration such as `30s`: the keep-alive policy) and
//!   `dev.torpor.memory-floor` (a size such as `2G`: hibernate early under memory pressure)
//!   and `dev.torpor.dormant-after` (a duration: a container hibernated that long goes
//!   dormant, `docs/design/dormant.md`) and `dev.torpor.template` (the ID of a live container
//!   of the same state root that consents with `dev.torpor.forkable=true`, in the same
//!   Kubernetes namespace: the container starts as a fork of it when there is one,
//!   `docs/design/fork.md`).
//! - `process.user` and `process.capabilities` (runc's default set when absent),
//!   `process.noNewPrivileges`: the first process's credentials, which torpor's kernel holds
//!   the application to (file modes, set*id, signals: `kernel::creds`).
//! - Everything the application kernel makes moot (seccomp, AppArmor, SELinux,
//!   devices, sysctl, the standard /proc, /sys, /dev mounts, which torpor's kernel provides
//!   itself) is logged at debug level. Fields torpor cannot honour yet are named in a warning:
//!   none of them widens what the application can reach.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use hibernate::engine::WakeMode;
use kernel::SandboxConfig;
use oci_spec::runtime::{LinuxNamespaceType, Spec};

use super::mounts::MountSpec;

/// The annotation that chooses the wake mode.
pub const WAKE_MODE_ANNOTATION: &str = "dev.torpor.wake-mode";
/// The annotation of the keep-alive policy (as `torpor run --hibernate-after`).
pub const HIBERNATE_AFTER_ANNOTATION: &str = "dev.torpor.hibernate-after";
/// The annotation of the memory-pressure floor (as `torpor run --memory-floor`).
pub const MEMORY_FLOOR_ANNOTATION: &str = "dev.torpor.memory-floor";
/// The annotation of the dormancy policy (as `torpor run --dormant-after`).
pub const DORMANT_AFTER_ANNOTATION: &str = "dev.torpor.dormant-after";
/// The annotation naming a live sandbox the container starts as a fork of (`torpor fork`).
pub const TEMPLATE_ANNOTATION: &str = "dev.torpor.template";
/// A template's consent to be forked by other containers (`true`).
pub const FORKABLE_ANNOTATION: &str = "dev.torpor.forkable";
/// The Kubernetes namespace of a CRI container's pod (set by containerd's CRI plugin).
pub const K8S_NAMESPACE_ANNOTATION: &str = "io.kubernetes.cri.sandbox-namespace";

/// Default memory when the bundle sets no limit.
const DEFAULT_MEMORY: u64 = 512 << 20;

/// Mount destinations whose contents torpor's kernel provides itself.
const KERNEL_MOUNTS: &[&str] = &[
    "/proc",
    "/sys",
    "/dev",
    "/dev/pts",
    "/dev/shm",
    "/dev/mqueue",
    "/sys/fs/cgroup",
];

/// Why a bundle cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The bundle directory is missing.
    #[error("bundle {0}: not a directory")]
    NoBundle(PathBuf),
    /// config.json is missing.
    #[error("bundle {0}: no config.json")]
    NoConfig(PathBuf),
    /// config.json does not parse.
    #[error("{path}: invalid config.json: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        reason: String,
    },
    /// A field is missing or has a value torpor refuses.
    #[error("config.json: {0}")]
    Field(String),
    /// The platform that would run the container cannot be opened.
    #[error("{0}")]
    Platform(String),
}

/// A bundle ready to run.
#[derive(Debug)]
pub struct Bundle {
    /// The bundle directory (absolute).
    pub dir: PathBuf,
    /// What the sandbox runs.
    pub sandbox: SandboxConfig,
    /// How it wakes from a hibernate.
    pub wake_mode: WakeMode,
    /// Hibernate by itself after this long idle.
    pub hibernate_after: Option<std::time::Duration>,
    /// Hibernate early while the host's MemAvailable is below this.
    pub memory_floor: Option<u64>,
    /// Go dormant once hibernated this long.
    pub dormant_after: Option<std::time::Duration>,
    /// `dev.torpor.template`: start as a fork of this live sandbox when there is one.
    pub template: Option<String>,
    /// The pod's Kubernetes namespace, for a CRI container.
    pub k8s_namespace: Option<String>,
    /// The cgroup to join (`linux.cgroupsPath`) and its limits.
    pub cgroup: Option<super::cgroup::CgroupSpec>,
    /// `root.readonly`.
    pub readonly_root: bool,
    /// Bind and tmpfs mounts to make on the root.
    pub mounts: Vec<MountSpec>,
    /// `process.terminal`.
    pub terminal: bool,
    /// The network namespace to join (`linux.namespaces` network with a path).
    pub netns_path: Option<PathBuf>,
    /// A new, empty network namespace (a network entry without a path).
    pub new_netns: bool,
    /// What is not honoured, one message each (logged by the caller).
    pub warnings: Vec<String>,
}

impl Bundle {
    /// Reads and checks `DIR/config.json`.
    ///
    /// # Errors
    /// [`BundleError`] for a missing bundle or config, invalid JSON, an unsupported
    /// `ociVersion`, no `process.args`, a missing root, or a program not in the root.
    pub fn load(dir: &Path) -> Result<Bundle, BundleError> {
        if !dir.is_dir() {
            return Err(BundleError::NoBundle(dir.to_path_buf()));
        }
        let dir = dir
            .canonicalize()
            .map_err(|_| BundleError::NoBundle(dir.to_path_buf()))?;
        let path = dir.join("config.json");
        if !path.is_file() {
            return Err(BundleError::NoConfig(dir));
        }
        let text = std::fs::read_to_string(&path).map_err(|e| BundleError::Invalid {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let spec: Spec = serde_json::from_str(&text).map_err(|e| BundleError::Invalid {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        from_spec(&dir, &spec)
    }
}

/// Checks `spec` (of the bundle at `dir`) and turns it into a [`Bundle`].
fn from_spec(dir: &Path, spec: &Spec) -> Result<Bundle, BundleError> {
    let field = |m: String| BundleError::Field(m);
    let version = spec.version();
    let known = ["1.0", "1.1", "1.2"]
        .iter()
        .any(|v| version == *v || version.starts_with(&format!("{v}.")));
    if !known {
        return Err(field(format!(
            "ociVersion {version:?} is not supported (1.0.x to 1.2.x are)"
        )));
    }
    let mut warnings = Vec::new();

    let root = spec
        .root()
        .as_ref()
        .ok_or_else(|| field("no root".into()))?;
    let rootfs = if root.path().is_absolute() {
        root.path().clone()
    } else {
        dir.join(root.path())
    };
    if !rootfs.is_dir() {
        return Err(field(format!(
            "root.path {} is not a directory",
            rootfs.display()
        )));
    }
    let readonly_root = root.readonly().unwrap_or(false);

    let process = spec
        .process()
        .as_ref()
        .ok_or_else(|| field("no process".into()))?;
    let args = process.args().clone().unwrap_or_default();
    let Some(arg0) = args.first() else {
        return Err(field("process.args is empty".into()));
    };
    let env = process.env().clone().unwrap_or_default();
    let cwd = process.cwd().to_string_lossy().into_owned();
    if !cwd.starts_with('/') {
        return Err(field(format!("process.cwd {cwd:?} is not absolute")));
    }
    let program = crate::program::resolve(&rootfs, arg0, &env, &cwd).ok_or_else(|| {
        field(format!(
            "process.args[0] {arg0:?}: not found in the root {}",
            rootfs.display()
        ))
    })?;
    let user = process.user();
    let creds = credentials(
        user.uid(),
        user.gid(),
        user.additional_gids().clone().unwrap_or_default(),
        process.capabilities().as_ref(),
        process.no_new_privileges().unwrap_or(false),
        &mut warnings,
    );
    let mut rlimits = kernel::task::rlimit::Rlimits::default();
    for rl in process.rlimits().iter().flatten() {
        let name = serde_json::to_value(rl.typ())
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let Some(resource) = kernel::task::rlimit::resource_of(&name) else {
            warnings.push(format!("process.rlimits: unknown type {name:?}"));
            continue;
        };
        let limit = kernel::task::rlimit::Limit {
            cur: rl.soft(),
            max: rl.hard(),
        };
        rlimits.set(resource, limit).map_err(|_| {
            field(format!(
                "process.rlimits {name}: soft limit above the hard one"
            ))
        })?;
    }
    let mut memory = DEFAULT_MEMORY;
    let mut pids_limit = None;
    let mut netns_path = None;
    let mut new_netns = false;
    if let Some(linux) = spec.linux() {
        if let Some(res) = linux.resources() {
            if let Some(limit) = res.memory().as_ref().and_then(|m| m.limit()) {
                if limit > 0 {
                    memory = crate::units::parse_size(&limit.to_string())
                        .map_err(|e| field(format!("linux.resources.memory.limit {limit}: {e}")))?;
                }
            }
            if let Some(p) = res.pids() {
                // 0 or a negative limit means none.
                if p.limit() > 0 {
                    pids_limit = Some(p.limit() as usize);
                }
            }
        }
        for ns in linux.namespaces().iter().flatten() {
            match ns.typ() {
                LinuxNamespaceType::Network => match ns.path() {
                    Some(p) => netns_path = Some(p.clone()),
                    None => new_netns = true,
                },
                LinuxNamespaceType::User => {
                    if linux.uid_mappings().is_some() || linux.gid_mappings().is_some() {
                        warnings.push(
                            "linux.uidMappings/gidMappings: the application sees the runtime's own ids"
                                .into(),
                        );
                    }
                }
                other => tracing::debug!("namespace {other:?}: the sandbox is its own world"),
            }
        }
    }

    let mut mounts = Vec::new();
    for m in spec.mounts().iter().flatten() {
        let dest = m.destination().to_string_lossy().into_owned();
        if KERNEL_MOUNTS.contains(&dest.as_str()) {
            continue;
        }
        let options = m.options().clone().unwrap_or_default();
        match MountSpec::from_oci(m.typ().as_deref(), m.source().as_deref(), &dest, &options) {
            Ok(spec) => mounts.push(spec),
            Err(why) => warnings.push(format!("mount {dest}: {why}")),
        }
    }
    if let Some(h) = spec.hooks() {
        let n = [
            h.prestart().as_ref().map(Vec::len),
            h.create_runtime().as_ref().map(Vec::len),
            h.create_container().as_ref().map(Vec::len),
            h.start_container().as_ref().map(Vec::len),
            h.poststart().as_ref().map(Vec::len),
            h.poststop().as_ref().map(Vec::len),
        ]
        .into_iter()
        .flatten()
        .sum::<usize>();
        if n > 0 {
            warnings.push(format!("hooks ({n}): not run"));
        }
    }

    let hostname = hostname_of(spec);
    let annotations: HashMap<String, String> = spec.annotations().clone().unwrap_or_default();
    let wake_mode = match annotations.get(WAKE_MODE_ANNOTATION) {
        Some(v) => v
            .parse()
            .map_err(|e| field(format!("annotation {WAKE_MODE_ANNOTATION}: {e}")))?,
        None => WakeMode::Auto,
    };
    // A duration annotation (`30s`, `10m`), if it is there.
    let after = |name: &str| {
        annotations
            .get(name)
            .map(|v| {
                crate::keepalive::parse_after(v)
                    .map_err(|e| field(format!("annotation {name}: {e}")))
            })
            .transpose()
    };
    let hibernate_after = after(HIBERNATE_AFTER_ANNOTATION)?;
    let dormant_after = after(DORMANT_AFTER_ANNOTATION)?;
    let template = annotations
        .get(TEMPLATE_ANNOTATION)
        .map(|v| {
            crate::statedir::check_id(v)
                .map(|()| v.clone())
                .map_err(|e| field(format!("annotation {TEMPLATE_ANNOTATION}: {e}")))
        })
        .transpose()?;
    let memory_floor = annotations
        .get(MEMORY_FLOOR_ANNOTATION)
        .map(|v| {
            crate::units::parse_bytes(v)
                .map_err(|e| field(format!("annotation {MEMORY_FLOOR_ANNOTATION}: {e}")))
        })
        .transpose()?;

    let cgroup = super::cgroup::CgroupSpec::from_spec(spec).map_err(|e| field(e.to_string()))?;

    let mut env = env;
    if !env.iter().any(|e| e.starts_with("PATH=")) {
        env.insert(0, crate::run::DEFAULT_PATH.to_string());
    }
    // The engine decides the network: the namespace it names, else the host's (as runc).
    let own_netns = true;
    Ok(Bundle {
        dir: dir.to_path_buf(),
        sandbox: SandboxConfig {
            rootfs,
            program,
            args,
            env,
            cwd,
            memory,
            publish: Vec::new(),
            allow_outbound: true,
            own_netns,
            creds: Some(creds),
            rlimits: Some(rlimits),
            pids_limit,
            hostname,
            share_files: crate::run::share_files_from_env(),
            platform: crate::platforms::open().map_err(|e| BundleError::Platform(e.to_string()))?,
            kept_sockets: Default::default(),
        },
        wake_mode,
        hibernate_after,
        memory_floor,
        dormant_after,
        template,
        k8s_namespace: annotations.get(K8S_NAMESPACE_ANNOTATION).cloned(),
        cgroup,
        readonly_root,
        mounts,
        terminal: process.terminal().unwrap_or(false),
        netns_path,
        new_netns,
        warnings,
    })
}

/// The sandbox's node name: `hostname`, else (a container of a pod, which joins the pod's
/// UTS namespace by path and has no `hostname` of its own) the first line of the file the
/// engine bind-mounts on `/etc/hostname`, else `torpor`. At most 64 bytes, as Linux's.
/// The first process's credentials from `process.user` and `process.capabilities`, as
/// runc starts it: the capability sets set as configured, then the execve of the program
/// (root keeps its bounding set, anyone else its ambient capabilities). A configuration without
/// capabilities gets runc's default set; unknown names are warned about and skipped.
fn credentials(
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
    caps: Option<&oci_spec::runtime::LinuxCapabilities>,
    no_new_privs: bool,
    warnings: &mut Vec<String>,
) -> kernel::creds::Credentials {
    use kernel::creds::cap;
    let mut c = kernel::creds::Credentials::new(uid, gid, groups);
    if let Some(caps) = caps {
        let mut set = |what: &str, list: &Option<oci_spec::runtime::Capabilities>| {
            let mut mask = 0u64;
            for one in list.iter().flatten() {
                let name = serde_json::to_value(one)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                match cap::by_name(&name) {
                    Some(n) => mask |= 1 << n,
                    None => warnings.push(format!("process.capabilities.{what}: unknown {name:?}")),
                }
            }
            mask
        };
        c.caps = kernel::creds::CapSets {
            effective: set("effective", caps.effective()),
            permitted: set("permitted", caps.permitted()),
            inheritable: set("inheritable", caps.inheritable()),
            bounding: set("bounding", caps.bounding()),
            ambient: set("ambient", caps.ambient()),
        };
    }
    c.exec((0, 0), 0o755, false);
    c.no_new_privs = no_new_privs;
    c
}

fn hostname_of(spec: &Spec) -> String {
    let valid = |h: &str| !h.is_empty() && h.len() <= 64 && !h.contains(['\0', '/', '\n']);
    if let Some(h) = spec.hostname().as_deref().filter(|h| valid(h)) {
        return h.to_string();
    }
    let from_file = spec
        .mounts()
        .iter()
        .flatten()
        .find(|m| m.destination() == Path::new("/etc/hostname"))
        .and_then(|m| m.source().as_ref())
        .and_then(|src| {
            use std::io::Read;
            let mut buf = Vec::new();
            // A short read: the file is the engine's, but its size is not ours to trust.
            std::fs::File::open(src)
                .ok()?
                .take(256)
                .read_to_end(&mut buf)
                .ok()?;
            let text = String::from_utf8(buf).ok()?;
            Some(text.lines().next()?.trim().to_string())
        })
        .filter(|h| valid(h));
    from_file.unwrap_or_else(|| crate::run::DEFAULT_HOSTNAME.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempBundle(PathBuf);
    impl Drop for TempBundle {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn bundle(config: &str) -> TempBundle {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "torpor-bundle-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        ));
        std::fs::create_dir_all(d.join("rootfs/bin")).unwrap();
        std::fs::create_dir_all(d.join("rootfs/usr")).unwrap();
        std::fs::write(d.join("rootfs/bin/busybox"), b"\x7fELF").unwrap();
        std::os::unix::fs::symlink("busybox", d.join("rootfs/bin/sh")).unwrap();
        std::os::unix::fs::symlink("/bin", d.join("rootfs/usr/bin")).unwrap();
        std::fs::write(d.join("config.json"), config).unwrap();
        TempBundle(d)
    }

    fn config(args: &str, extra: &str) -> String {
        format!(
            r#"{{"ociVersion":"1.0.2","process":{{"user":{{"uid":0,"gid":0}},"args":{args},"env":["PATH=/usr/bin:/bin"],"cwd":"/"}},"root":{{"path":"rootfs"}}{extra}}}"#
        )
    }

    #[test]
    fn a_minimal_bundle_loads() {
        let b = bundle(&config(r#"["sh","-c","true"]"#, ""));
        let got = Bundle::load(&b.0).unwrap();
        // sh is found through PATH; /usr/bin is a link to /bin.
        assert_eq!(got.sandbox.program, "/usr/bin/sh");
        assert_eq!(got.sandbox.args, ["sh", "-c", "true"]);
        assert_eq!(got.sandbox.memory, DEFAULT_MEMORY);
        assert!(!got.readonly_root && !got.terminal);
        assert_eq!(got.wake_mode, WakeMode::Auto);
        assert_eq!(got.sandbox.hostname, "torpor");
        assert!(got.warnings.is_empty(), "{:?}", got.warnings);
    }

    #[test]
    fn hostname_from_the_spec_or_the_engines_file() {
        let b = bundle(&config(r#"["sh"]"#, r#","hostname":"web""#));
        assert_eq!(Bundle::load(&b.0).unwrap().sandbox.hostname, "web");
        // A pod's container: no hostname, /etc/hostname bind-mounted from the pod's file.
        let b = bundle("{}");
        std::fs::write(b.0.join("hostname"), "pod-1\n").unwrap();
        let extra = format!(
            r#","mounts":[{{"destination":"/etc/hostname","type":"bind","source":"{}","options":["rbind","rw"]}}]"#,
            b.0.join("hostname").display()
        );
        std::fs::write(b.0.join("config.json"), config(r#"["sh"]"#, &extra)).unwrap();
        std::fs::create_dir_all(b.0.join("rootfs/etc")).unwrap();
        std::fs::write(b.0.join("rootfs/etc/hostname"), "").unwrap();
        assert_eq!(Bundle::load(&b.0).unwrap().sandbox.hostname, "pod-1");
    }

    #[test]
    fn limits_namespaces_and_annotations() {
        let extra = r#","linux":{"resources":{"memory":{"limit":268435456},"pids":{"limit":100}},"namespaces":[{"type":"pid"},{"type":"network","path":"/run/netns/x"}]},"annotations":{"dev.torpor.wake-mode":"fault","dev.torpor.hibernate-after":"30s","dev.torpor.memory-floor":"2G","dev.torpor.dormant-after":"5m"},"mounts":[{"destination":"/proc","type":"proc","source":"proc"},{"destination":"/data","type":"bind","source":"/srv/data"}]"#;
        let b = bundle(&config(r#"["/bin/busybox","true"]"#, extra));
        let got = Bundle::load(&b.0).unwrap();
        assert_eq!(got.sandbox.memory, 256 << 20);
        assert_eq!(got.sandbox.pids_limit, Some(100));
        assert_eq!(got.netns_path, Some(PathBuf::from("/run/netns/x")));
        assert_eq!(got.wake_mode, WakeMode::Fault);
        assert_eq!(
            got.hibernate_after,
            Some(std::time::Duration::from_secs(30))
        );
        assert_eq!(got.memory_floor, Some(2 << 30));
        assert_eq!(got.dormant_after, Some(std::time::Duration::from_secs(300)));
        assert!(got.warnings.is_empty(), "{:?}", got.warnings);
        assert_eq!(got.mounts.len(), 1);
        assert_eq!(got.mounts[0].destination(), "/data");
    }

    #[test]
    fn bad_bundles_are_refused_clearly() {
        let missing = std::env::temp_dir().join("torpor-no-such-bundle");
        assert!(matches!(
            Bundle::load(&missing),
            Err(BundleError::NoBundle(_))
        ));

        let b = bundle("{");
        std::fs::remove_file(b.0.join("config.json")).unwrap();
        assert!(matches!(Bundle::load(&b.0), Err(BundleError::NoConfig(_))));

        let b = bundle("{ not json");
        let e = Bundle::load(&b.0).unwrap_err();
        assert!(e.to_string().contains("invalid config.json"), "{e}");

        let b = bundle(&config(r#"["sh"]"#, "").replace("1.0.2", "0.9.0"));
        let e = Bundle::load(&b.0).unwrap_err();
        assert!(e.to_string().contains("ociVersion"), "{e}");

        let b = bundle(&config(r#"["nosuchprogram"]"#, ""));
        let e = Bundle::load(&b.0).unwrap_err();
        assert!(e.to_string().contains("not found"), "{e}");

        let b = bundle(&config("[]", ""));
        let e = Bundle::load(&b.0).unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");

        let b = bundle(&config(r#"["sh"]"#, "").replace(r#""path":"rootfs""#, r#""path":"nope""#));
        let e = Bundle::load(&b.0).unwrap_err();
        assert!(e.to_string().contains("root.path"), "{e}");

        let b = bundle(&config(
            r#"["sh"]"#,
            r#","annotations":{"dev.torpor.wake-mode":"sometimes"}"#,
        ));
        let e = Bundle::load(&b.0).unwrap_err();
        assert!(e.to_string().contains("wake-mode"), "{e}");

        let b = bundle(&config(
            r#"["sh"]"#,
            r#","annotations":{"dev.torpor.hibernate-after":"1ms"}"#,
        ));
        let e = Bundle::load(&b.0).unwrap_err();
        assert!(e.to_string().contains("hibernate-after"), "{e}");

        let b = bundle(&config(
            r#"["sh"]"#,
            r#","annotations":{"dev.torpor.dormant-after":"soon"}"#,
        ));
        let e = Bundle::load(&b.0).unwrap_err();
        assert!(e.to_string().contains("dormant-after"), "{e}");
    }

    #[test]
    fn links_that_leave_the_root_do_not_resolve_outside() {
        let b = bundle(&config(r#"["/bin/escape"]"#, ""));
        // An absolute link is taken inside the root: /etc/passwd of the root does not exist.
        std::os::unix::fs::symlink("/etc/passwd", b.0.join("rootfs/bin/escape")).unwrap();
        assert!(Bundle::load(&b.0).is_err());
        assert!(!crate::program::exists_in_root(
            &b.0.join("rootfs"),
            "/../../../etc/passwd"
        ));
    }
}
