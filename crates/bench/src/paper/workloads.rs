//! The paper's workloads: each an HTTP service on guest port 8080 in a Debian root filesystem
//! built by `scripts/build-rootfs.sh` (embedded here, run on first use), with its
//! application files installed under `/app/paper` of the root.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

/// One workload.
pub struct Workload {
    /// Short name (file names, CSV rows, `--only`).
    pub name: &'static str,
    /// Label in tables and plots.
    pub label: &'static str,
    /// Debian root filesystem (a NAME of `scripts/build-rootfs.sh`).
    pub root: &'static str,
    /// Program and arguments inside the root.
    pub argv: Vec<String>,
    /// Environment (K=V).
    pub env: Vec<String>,
    /// Files to install in the root: (path inside the root, contents).
    pub files: Vec<(&'static str, &'static [u8])>,
    /// Request path.
    pub path: &'static str,
    /// A string every correct answer contains.
    pub expect: &'static str,
    /// Guest memory.
    pub memory: &'static str,
    /// Java sources to compile with the host's `javac` into `/app/paper`.
    pub javac: Option<&'static str>,
}

const PY_HELLO: &str = include_str!("apps/hello.py");
const NODE_HELLO: &str = include_str!("apps/hello.js");
const JAVA_HELLO: &str = include_str!("../../../../tests/apps/java/Hello.java");
// The FunctionBench-style servers are shared with the imaging tests.
const PY_WORKLOADS: &str = include_str!("../../../../tests/apps/imaging/workloads.py");
const PY_TEXTSERVER: &str = include_str!("../../../../tests/apps/imaging/textserver.py");
const PY_FLOAT: &str = include_str!("../../../../tests/apps/imaging/float_server.py");
const PY_IMAGE: &str = include_str!("../../../../tests/apps/imaging/resize_server.py");
const PY_VIDEO: &str = include_str!("../../../../tests/apps/imaging/video_server.py");
const BUILD_ROOTFS: &str = include_str!("../../../../scripts/build-rootfs.sh");

fn argv(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Every workload, in the paper's order.
pub fn all() -> Vec<Workload> {
    let py = |name, label, file: &'static str, src: &'static str, path, expect, memory| Workload {
        name,
        label,
        root: "python",
        argv: argv(&["/usr/bin/python3", file, "8080"]),
        env: vec![],
        files: vec![
            (file, src.as_bytes()),
            ("/app/paper/workloads.py", PY_WORKLOADS.as_bytes()),
            ("/app/paper/textserver.py", PY_TEXTSERVER.as_bytes()),
        ],
        path,
        expect,
        memory,
        javac: None,
    };
    vec![
        py(
            "python",
            "Python hello",
            "/app/paper/hello.py",
            PY_HELLO,
            "/",
            "hello",
            "512M",
        ),
        Workload {
            name: "node",
            label: "Node.js hello",
            root: "node",
            argv: argv(&["/usr/bin/node", "/app/paper/hello.js", "8080"]),
            env: vec![],
            files: vec![("/app/paper/hello.js", NODE_HELLO.as_bytes())],
            path: "/",
            expect: "hello",
            memory: "1G",
            javac: None,
        },
        Workload {
            name: "go",
            label: "Go hello",
            root: "go",
            argv: argv(&["/app/hello"]),
            env: vec!["PORT=8080".into()],
            files: vec![],
            path: "/",
            expect: "Hello",
            memory: "512M",
            javac: None,
        },
        Workload {
            name: "java",
            label: "Java hello",
            root: "java",
            argv: argv(&[
                "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
                "-cp",
                "/app/paper",
                "Hello",
            ]),
            env: vec![],
            files: vec![],
            path: "/",
            expect: "hello",
            memory: "1G",
            javac: Some(JAVA_HELLO),
        },
        py(
            "float",
            "Float operation",
            "/app/paper/float_server.py",
            PY_FLOAT,
            "/float?n=1000000",
            "sum=",
            "512M",
        ),
        py(
            "image-small",
            "Image (Pillow) small",
            "/app/paper/resize_server.py",
            PY_IMAGE,
            "/resize?size=small",
            "sha256=",
            "1G",
        ),
        py(
            "image-large",
            "Image (Pillow) 2.6 MB",
            "/app/paper/resize_server.py",
            PY_IMAGE,
            "/resize?size=large",
            "sha256=",
            "1G",
        ),
        py(
            "video",
            "Video (OpenCV)",
            "/app/paper/video_server.py",
            PY_VIDEO,
            "/video",
            "frames=",
            "2G",
        ),
    ]
}

impl Workload {
    /// The command line and environment that make the server listen on `port` instead of
    /// the guest port 8080 (for a native run beside the sandbox): an argument or a `PORT`
    /// variable of 8080 is replaced; a server given neither (the Java hello, which takes its
    /// port as its first argument) gets the port as a last argument.
    pub fn on_port(&self, port: u16) -> (Vec<String>, Vec<String>) {
        let mut replaced = false;
        let mut swap = |v: &String, old: &str, new: String| {
            if v == old {
                replaced = true;
                new
            } else {
                v.clone()
            }
        };
        let mut argv: Vec<String> = self
            .argv
            .iter()
            .map(|a| swap(a, "8080", port.to_string()))
            .collect();
        let env: Vec<String> = self
            .env
            .iter()
            .map(|e| swap(e, "PORT=8080", format!("PORT={port}")))
            .collect();
        if !replaced {
            argv.push(port.to_string());
        }
        (argv, env)
    }
}

/// The cache directory of the Debian roots (as `scripts/build-rootfs.sh` chooses it).
pub fn rootfs_cache() -> PathBuf {
    if let Some(d) = std::env::var_os("TORPOR_ROOTFS_CACHE") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache/torpor/rootfs")
}

/// The root filesystem of `name`, built first if needed (the embedded
/// `scripts/build-rootfs.sh`; it needs root and debootstrap, and does nothing when the root
/// is complete).
///
/// # Errors
/// If the build fails.
pub fn ensure_root(name: &str) -> anyhow::Result<PathBuf> {
    let out = Command::new("bash")
        .arg("-c")
        .arg(BUILD_ROOTFS)
        .arg("build-rootfs.sh")
        .arg(name)
        .arg(rootfs_cache())
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("run bash (scripts/build-rootfs.sh)")?;
    if !out.status.success() {
        bail!("building the {name} root filesystem failed (see above)");
    }
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok(PathBuf::from(path))
}

/// Installs the workload's files (and compiled Java classes) in `root`.
///
/// # Errors
/// If a file cannot be written or javac fails.
pub fn install(w: &Workload, root: &Path) -> anyhow::Result<()> {
    for (rel, data) in &w.files {
        let p = root.join(rel.trim_start_matches('/'));
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).with_context(|| format!("create {}", d.display()))?;
        }
        std::fs::write(&p, data).with_context(|| format!("write {}", p.display()))?;
    }
    if let Some(src) = w.javac {
        let dir = root.join("app/paper");
        std::fs::create_dir_all(&dir)?;
        let tmp = std::env::temp_dir().join(format!("torpor-paper-java-{}", std::process::id()));
        std::fs::create_dir_all(&tmp)?;
        std::fs::write(tmp.join("Hello.java"), src)?;
        let st = Command::new("javac")
            .args(["--release", "17", "-d"])
            .arg(&dir)
            .arg(tmp.join("Hello.java"))
            .status()
            .context("javac (apt-get install openjdk-17-jdk-headless) builds the Java workload")?;
        let _ = std::fs::remove_dir_all(&tmp);
        if !st.success() {
            bail!("javac failed on the Java workload");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_moves_to_another_port() {
        for w in all() {
            let (argv, env) = w.on_port(9123);
            let mentions = argv
                .iter()
                .chain(&env)
                .filter(|a| a.contains("9123"))
                .count();
            assert_eq!(mentions, 1, "{}: {argv:?} {env:?}", w.name);
            assert!(
                !argv.iter().chain(&env).any(|a| a.contains("8080")),
                "{}",
                w.name
            );
            assert_eq!(argv[0], w.argv[0]);
        }
        let java = all().into_iter().find(|w| w.name == "java").expect("java");
        assert_eq!(
            java.on_port(9123).0.last().map(String::as_str),
            Some("9123")
        );
        let go = all().into_iter().find(|w| w.name == "go").expect("go");
        assert_eq!(go.on_port(9123).1, vec!["PORT=9123".to_string()]);
    }
}
