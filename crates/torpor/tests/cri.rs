//! Kubernetes' view of torpor: a private containerd (Debian's package) whose CRI plugin has a
//! `torpor` runtime handler (containerd's runc shim with `BinaryName` = this torpor) beside a
//! `runc` one, driven over its CRI socket by a real CRI client (the `k8s-cri` crate, gRPC), in
//! the order the kubelet calls it. No registry: the images (a static pause program, busybox
//! with its applet links, Debian's python3) are built here and imported into `k8s.io`.
//!
//! One pod (a Python HTTP server holding 64 MiB, a busybox sidecar that fetches from it on
//! localhost) on a CNI bridge network: the sidecar's log in the CRI format, ExecSync's output
//! and status, `hostname`, the pod IP serving HTTP, and StopContainer's exit code are the same
//! under torpor and runc. Under torpor, with the pod annotation `dev.torpor.hibernate-after`,
//! the server hibernates by itself: ContainerStats' working set falls by at least 80 % while
//! the CRI still says RUNNING, and the next request is answered. Stop and remove leave no
//! holder process, state directory, swap file, cgroup or network namespace.
//!
//! `bench_pod_start_and_wake` (ignored; `scripts/bench-cri.sh`) measures pod start to first
//! response and the first response after an idle hibernate, torpor against runc.
//!
//! Needs root, /dev/kvm, containerd, runc, containernetworking-plugins (/usr/lib/cni) and the
//! Debian `python` root: without them the tests print "skipped" and pass, unless
//! TORPOR_REQUIRE_KVM=1. The containerd root (content and unpacked images, so that the 1 GB
//! Python image is imported once) is kept in `ROOTFS_CACHE/.cri-containerd`, used by one test
//! process at a time (a lock file); everything else is in a temporary directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use testutil::{http_get, Detached, TempDir};
use tonic::transport::{Channel, Endpoint, Uri};

const BIN: &str = env!("CARGO_BIN_EXE_torpor");
const PAUSE_IMAGE: &str = "localhost/torpor/pause:1";
const BUSYBOX_IMAGE: &str = "localhost/torpor/busybox:1";
const BRIDGE: &str = "trpcri0";
const NETWORK: &str = "torpor-cri-test";
const SUBNET: &str = "10.244.77.0/24";
const PORT: u16 = 8080;

/// The Python server: 64 MiB of data it touched, `hello from py` on every GET.
const PY_SERVER: &str = r#"
import http.server, socketserver
ballast = b"x" * (64 << 20)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello from py\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
print("serving", flush=True)
# socketserver's server: http.server's would look its own name up in DNS (getfqdn), which
# waits 10 s for a resolver on a pod network with no way out.
socketserver.TCPServer(("", 8080), H).serve_forever()
"#;

/// The sidecar: fetches from the server on localhost (its log), then waits; SIGTERM ends it
/// with status 0 (a trap, so that PID 1 under runc ends as under torpor).
const SIDECAR: &str = "until wget -qO- http://127.0.0.1:8080/ 2>/dev/null; do sleep 0.2; done; \
                       trap 'exit 0' TERM; sleep 3600 & wait";

/// Skips (false, with a `skipped:` line) or, with TORPOR_REQUIRE_KVM=1, fails.
fn require(ok: bool, what: &str) -> bool {
    if !ok {
        assert!(
            std::env::var("TORPOR_REQUIRE_KVM").as_deref() != Ok("1"),
            "{what} and TORPOR_REQUIRE_KVM=1"
        );
        println!("skipped: {what}");
    }
    ok
}

fn have(cmd: &str, arg: &str) -> bool {
    Command::new(cmd)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn sh(script: &str) -> testutil::Output {
    let mut c = Command::new("bash");
    c.args(["-o", "pipefail", "-c", script]);
    testutil::run_command(c, None, Duration::from_secs(600))
}

/// A private containerd with the `torpor` and `runc` handlers, and a CRI client.
struct Cri {
    dir: TempDir,
    root: PathBuf,
    _lock: std::fs::File,
    daemon: Child,
    rt: tokio::runtime::Runtime,
    client: RuntimeServiceClient<Channel>,
    python_image: String,
}

/// Calls one CRI method synchronously: `rpc!(cri, method, request)`.
macro_rules! rpc {
    ($c:expr, $m:ident, $req:expr) => {{
        let mut client = $c.client.clone();
        $c.rt
            .block_on(client.$m($req))
            .map(|r| r.into_inner())
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", stringify!($m), $c.log()))
    }};
}

impl Cri {
    fn start() -> Option<Cri> {
        if !testutil::require_kvm() {
            return None;
        }
        // SAFETY: geteuid has no preconditions.
        let root_user = unsafe { libc::geteuid() } == 0;
        if !require(root_user, "containerd's CRI needs root") {
            return None;
        }
        let tools = have("containerd", "--version")
            && have("ctr", "--version")
            && have("runc", "--version")
            && have("ip", "-V")
            && ["bridge", "host-local", "loopback"]
                .iter()
                .all(|p| Path::new("/usr/lib/cni").join(p).exists());
        if !require(
            tools,
            "containerd, runc, iproute2 or containernetworking-plugins (/usr/lib/cni) is not installed",
        ) {
            return None;
        }
        let python = testutil::debian_rootfs("python")?;
        let cache = testutil::debian::rootfs_cache_dir().expect("a rootfs cache directory");
        let root = cache.join(".cri-containerd");
        std::fs::create_dir_all(&root).expect("creating the containerd root");
        let lock = std::fs::File::create(cache.join(".cri-containerd.lock")).expect("lock file");
        // SAFETY: flock on a file we own; blocks until the other test process is done.
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };

        let dir = TempDir::new("torpor-cri");
        let p = dir.path();
        std::fs::create_dir_all(p.join("net.d")).unwrap();
        std::fs::write(
            p.join("net.d/10-torpor.conflist"),
            format!(
                r#"{{"cniVersion":"1.0.0","name":"{NETWORK}","plugins":[{{"type":"bridge","bridge":"{BRIDGE}","isGateway":true,"ipMasq":false,"ipam":{{"type":"host-local","dataDir":"{}","ranges":[[{{"subnet":"{SUBNET}"}}]],"routes":[{{"dst":"0.0.0.0/0"}}]}}}},{{"type":"loopback"}}]}}"#,
                p.join("ipam").display()
            ),
        )
        .unwrap();
        let config = format!(
            r#"version = 2
root = "{root}"
state = "{d}/state"
[grpc]
  address = "{d}/c.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.torpor]
      runtime_type = "io.containerd.runc.v2"
      pod_annotations = ["dev.torpor.*"]
      container_annotations = ["dev.torpor.*"]
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.torpor.options]
        BinaryName = "{BIN}"
        Root = "{d}/torpor"
        SystemdCgroup = false
"#,
            root = root.display(),
            d = p.display()
        );
        std::fs::write(p.join("config.toml"), config).unwrap();
        let daemon = Command::new("containerd")
            .arg("--config")
            .arg(p.join("config.toml"))
            .stdout(std::fs::File::create(p.join("containerd.log")).unwrap())
            .stderr(std::fs::File::create(p.join("containerd.err")).unwrap())
            .spawn()
            .expect("starting containerd");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let sock = p.join("c.sock");
        let up = Detached::wait_until(Duration::from_secs(30), || sock.exists());
        let channel = up
            .then(|| {
                rt.block_on(async {
                    let sock = sock.clone();
                    Endpoint::try_from("http://[::]")
                        .ok()?
                        .connect_with_connector(tower::service_fn(move |_: Uri| {
                            let sock = sock.clone();
                            async move {
                                Ok::<_, std::io::Error>(TokioIo::new(
                                    tokio::net::UnixStream::connect(sock).await?,
                                ))
                            }
                        }))
                        .await
                        .ok()
                })
            })
            .flatten();
        let log = std::fs::read_to_string(p.join("containerd.err")).unwrap_or_default();
        let channel = channel.unwrap_or_else(|| panic!("containerd did not start: {log}"));
        let c = Cri {
            client: RuntimeServiceClient::new(channel),
            dir,
            root,
            _lock: lock,
            daemon,
            rt,
            python_image: String::new(),
        };
        let ready = Detached::wait_until(Duration::from_secs(30), || {
            let mut client = c.client.clone();
            c.rt.block_on(client.status(cri::StatusRequest::default()))
                .is_ok_and(|r| {
                    r.into_inner().status.is_some_and(|s| {
                        s.conditions
                            .iter()
                            .all(|x| x.status || x.r#type != "RuntimeReady")
                    })
                })
        });
        assert!(ready, "CRI not ready: {}", c.log());
        let mut c = c;
        c.remove_all_pods();
        c.import_images(&python);
        Some(c)
    }

    fn log(&self) -> String {
        let t = std::fs::read_to_string(self.dir.path().join("containerd.err")).unwrap_or_default();
        let tail: Vec<&str> = t.lines().rev().take(40).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    fn ctr(&self, args: &str) -> testutil::Output {
        sh(&format!(
            "ctr --address {} -n k8s.io {args}",
            self.dir.path().join("c.sock").display()
        ))
    }

    /// Where the shim keeps torpor's state (`Root` + the namespace).
    fn torpor_root(&self) -> PathBuf {
        self.dir.path().join("torpor/k8s.io")
    }

    /// Pods left by an earlier, interrupted run (the containerd root is kept).
    fn remove_all_pods(&self) {
        let pods = rpc!(
            self,
            list_pod_sandbox,
            cri::ListPodSandboxRequest::default()
        );
        for p in pods.items {
            self.remove_pod(&p.id);
        }
    }

    fn remove_pod(&self, id: &str) {
        let mut client = self.client.clone();
        let _ = self
            .rt
            .block_on(client.stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            }));
        let _ = self
            .rt
            .block_on(client.remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: id.into(),
            }));
    }

    /// Builds and imports the pause and busybox images, and the Python one unless the kept
    /// containerd root has it already (its tag follows the root's package list).
    fn import_images(&mut self, python: &Path) {
        let work = self.dir.path().join("images");
        let pause = work.join("pause-root");
        std::fs::create_dir_all(&pause).unwrap();
        std::fs::copy(testutil::guest_program("pause"), pause.join("pause")).unwrap();
        self.import(&pause, PAUSE_IMAGE, &["/pause"], &[]);

        let bb = work.join("busybox-root");
        for d in ["bin", "tmp", "etc", "proc", "sys", "dev"] {
            std::fs::create_dir_all(bb.join(d)).unwrap();
        }
        std::fs::copy(testutil::host_busybox(), bb.join("bin/busybox")).unwrap();
        let list = Command::new(testutil::host_busybox())
            .arg("--list")
            .output()
            .expect("busybox --list");
        for applet in String::from_utf8_lossy(&list.stdout).split_whitespace() {
            if applet != "busybox" {
                let _ = std::os::unix::fs::symlink("busybox", bb.join("bin").join(applet));
            }
        }
        self.import(&bb, BUSYBOX_IMAGE, &[], &["/bin/sh"]);

        let stamp = std::fs::read(python.join(".torpor-complete")).unwrap_or_default();
        let tag = stamp.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
        });
        self.python_image = format!("localhost/torpor/python:{tag:016x}");
        let listed = self.ctr("images ls -q").stdout_str();
        if !listed.lines().any(|l| l == self.python_image) {
            let started = Instant::now();
            let image = self.python_image.clone();
            self.import(python, &image, &[], &["python3"]);
            println!("imported {image} in {:?}", started.elapsed());
        }
    }

    /// An OCI image layout of one uncompressed layer (the directory `root`), streamed into
    /// `ctr images import` under the name `name`.
    fn import(&self, root: &Path, name: &str, entrypoint: &[&str], cmd: &[&str]) {
        let layout = self
            .dir
            .path()
            .join("images")
            .join(name.replace(['/', ':'], "_"));
        let blobs = layout.join("blobs/sha256");
        std::fs::create_dir_all(&blobs).unwrap();
        let layer = blobs.join("layer.tmp");
        let o = sh(&format!(
            "tar --numeric-owner --xattrs -C '{}' -cf '{}' . 2>&1",
            root.display(),
            layer.display()
        ));
        assert_eq!(o.code(), 0, "tar of {}: {}", root.display(), o.stdout_str());
        let digest = |p: &Path| -> String {
            let o = sh(&format!("sha256sum '{}'", p.display()));
            o.stdout_str()
                .split_whitespace()
                .next()
                .expect("sha256sum output")
                .to_string()
        };
        let layer_digest = digest(&layer);
        let layer_size = std::fs::metadata(&layer).unwrap().len();
        std::fs::rename(&layer, blobs.join(&layer_digest)).unwrap();
        let blob = |data: String| -> (String, usize) {
            let tmp = blobs.join("blob.tmp");
            std::fs::write(&tmp, &data).unwrap();
            let d = digest(&tmp);
            std::fs::rename(&tmp, blobs.join(&d)).unwrap();
            (d, data.len())
        };
        let (config, config_size) = blob(
            serde_json::json!({
                "architecture": "amd64",
                "os": "linux",
                "config": {
                    "Entrypoint": entrypoint,
                    "Cmd": cmd,
                    "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                },
                "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_digest}")]},
            })
            .to_string(),
        );
        let (manifest, manifest_size) = blob(
            serde_json::json!({
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": format!("sha256:{config}"), "size": config_size},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                            "digest": format!("sha256:{layer_digest}"), "size": layer_size}],
            })
            .to_string(),
        );
        let tag = name.rsplit(':').next().unwrap_or("latest");
        std::fs::write(
            layout.join("index.json"),
            serde_json::json!({
                "schemaVersion": 2,
                "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                               "digest": format!("sha256:{manifest}"), "size": manifest_size,
                               "annotations": {"io.containerd.image.name": name,
                                               "org.opencontainers.image.ref.name": tag}}],
            })
            .to_string(),
        )
        .unwrap();
        std::fs::write(
            layout.join("oci-layout"),
            r#"{"imageLayoutVersion":"1.0.0"}"#,
        )
        .unwrap();
        let o = sh(&format!(
            "tar -C '{}' -cf - . | ctr --address {} -n k8s.io images import - 2>&1",
            layout.display(),
            self.dir.path().join("c.sock").display()
        ));
        assert_eq!(o.code(), 0, "ctr images import {name}: {}", o.stdout_str());
        let _ = std::fs::remove_dir_all(&layout);
    }
}

impl Drop for Cri {
    fn drop(&mut self) {
        if let Ok(pods) = self.rt.block_on(
            self.client
                .clone()
                .list_pod_sandbox(cri::ListPodSandboxRequest::default()),
        ) {
            for p in pods.into_inner().items {
                self.remove_pod(&p.id);
            }
        }
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
        // Mounts of containers a failed test left (their shims end with their tasks).
        let _ = sh(&format!(
            "grep -oE '({}|{})[^ ]*' /proc/self/mounts | sort -r | xargs -r umount -l",
            self.root.display(),
            self.dir.path().display()
        ));
        let _ = sh(&format!("ip link del {BRIDGE} 2>/dev/null"));
    }
}

/// What a pod gave, to compare runtimes.
#[derive(Debug, PartialEq, Eq)]
struct Outputs {
    side_log: Vec<String>,
    exec: (String, String, i32),
    hostname: String,
    http: String,
    side_exit: i32,
}

/// A pod as the kubelet makes it: RunPodSandbox, then CreateContainer + StartContainer for
/// each container.
struct Pod {
    id: String,
    config: cri::PodSandboxConfig,
    ip: String,
    netns: Option<String>,
    started: Instant,
}

fn ns_options() -> cri::NamespaceOption {
    cri::NamespaceOption {
        network: cri::NamespaceMode::Pod as i32,
        pid: cri::NamespaceMode::Container as i32,
        ipc: cri::NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

impl Cri {
    fn run_pod(&self, handler: &str, name: &str, annotations: &[(&str, &str)]) -> Pod {
        let logs = self
            .dir
            .path()
            .join("logs")
            .join(format!("{handler}-{name}-{}", testutil::unique_token()));
        std::fs::create_dir_all(&logs).unwrap();
        let config = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{}", testutil::unique_token()),
                namespace: "default".into(),
                attempt: 0,
            }),
            hostname: name.into(),
            log_directory: logs.to_string_lossy().into_owned(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            linux: Some(cri::LinuxPodSandboxConfig {
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(ns_options()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let started = Instant::now();
        let id = rpc!(
            self,
            run_pod_sandbox,
            cri::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: handler.into(),
            }
        )
        .pod_sandbox_id;
        let st = rpc!(
            self,
            pod_sandbox_status,
            cri::PodSandboxStatusRequest {
                pod_sandbox_id: id.clone(),
                verbose: true,
            }
        );
        let ip = st
            .status
            .as_ref()
            .and_then(|s| s.network.as_ref())
            .map(|n| n.ip.clone())
            .unwrap_or_default();
        assert!(!ip.is_empty(), "pod {id} has no IP: {}", self.log());
        // The network namespace CNI made, from the verbose info's runtime spec.
        let netns = st
            .info
            .get("info")
            .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
            .and_then(|v| {
                v["runtimeSpec"]["linux"]["namespaces"]
                    .as_array()?
                    .iter()
                    .find(|n| n["type"] == "network")?["path"]
                    .as_str()
                    .map(str::to_string)
            });
        Pod {
            id,
            config,
            ip,
            netns,
            started,
        }
    }

    fn start_container(&self, pod: &Pod, name: &str, image: &str, command: &[&str]) -> String {
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            command: command.iter().map(|s| s.to_string()).collect(),
            log_path: format!("{name}.log"),
            linux: Some(cri::LinuxContainerConfig {
                security_context: Some(cri::LinuxContainerSecurityContext {
                    namespace_options: Some(ns_options()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let id = rpc!(
            self,
            create_container,
            cri::CreateContainerRequest {
                pod_sandbox_id: pod.id.clone(),
                config: Some(config),
                sandbox_config: Some(pod.config.clone()),
            }
        )
        .container_id;
        rpc!(
            self,
            start_container,
            cri::StartContainerRequest {
                container_id: id.clone(),
            }
        );
        id
    }

    fn status(&self, id: &str) -> cri::ContainerStatus {
        rpc!(
            self,
            container_status,
            cri::ContainerStatusRequest {
                container_id: id.into(),
                verbose: false,
            }
        )
        .status
        .expect("a container status")
    }

    fn working_set(&self, id: &str) -> u64 {
        rpc!(
            self,
            container_stats,
            cri::ContainerStatsRequest {
                container_id: id.into(),
            }
        )
        .stats
        .and_then(|s| s.memory)
        .and_then(|m| m.working_set_bytes)
        .map_or(0, |v| v.value)
    }

    fn exec_sync(&self, id: &str, cmd: &[&str]) -> (String, String, i32) {
        let r = rpc!(
            self,
            exec_sync,
            cri::ExecSyncRequest {
                container_id: id.into(),
                cmd: cmd.iter().map(|s| s.to_string()).collect(),
                timeout: 30,
            }
        );
        (
            String::from_utf8_lossy(&r.stdout).into_owned(),
            String::from_utf8_lossy(&r.stderr).into_owned(),
            r.exit_code,
        )
    }

    fn stop_and_remove(&self, pod: &Pod, containers: &[&str]) {
        for c in containers {
            rpc!(
                self,
                stop_container,
                cri::StopContainerRequest {
                    container_id: c.to_string(),
                    timeout: 2,
                }
            );
            rpc!(
                self,
                remove_container,
                cri::RemoveContainerRequest {
                    container_id: c.to_string(),
                }
            );
        }
        rpc!(
            self,
            stop_pod_sandbox,
            cri::StopPodSandboxRequest {
                pod_sandbox_id: pod.id.clone(),
            }
        );
        rpc!(
            self,
            remove_pod_sandbox,
            cri::RemovePodSandboxRequest {
                pod_sandbox_id: pod.id.clone(),
            }
        );
    }

    /// What the pod and its containers left behind, one line each.
    fn leftovers(&self, pod: &Pod, containers: &[&str]) -> Vec<String> {
        let mut ids: Vec<&str> = containers.to_vec();
        ids.push(&pod.id);
        let mut left = Vec::new();
        let listed = rpc!(self, list_containers, cri::ListContainersRequest::default());
        for c in listed.containers {
            if c.pod_sandbox_id == pod.id {
                left.push(format!("container {} still listed", c.id));
            }
        }
        // Holder processes (`torpor … oci-holder … ID`) and shims (`-id ID`).
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
                continue;
            };
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if ids.iter().any(|id| cmdline.contains(id)) {
                left.push(format!(
                    "process {}: {cmdline}",
                    e.file_name().to_string_lossy()
                ));
            }
        }
        // torpor's state directories (swap and REAP files are in them).
        for id in &ids {
            let d = self.torpor_root().join(id);
            if d.exists() {
                left.push(format!("state directory {}", d.display()));
            }
        }
        let swap = sh(&format!(
            "find '{}' -name '*swap*' 2>/dev/null",
            self.torpor_root().display()
        ));
        left.extend(swap.stdout_str().lines().map(|l| format!("swap file {l}")));
        for id in &ids {
            for ctl in ["memory", "cpu", "pids"] {
                let d = Path::new("/sys/fs/cgroup")
                    .join(ctl)
                    .join("k8s.io")
                    .join(id);
                if d.exists() {
                    left.push(format!("cgroup {}", d.display()));
                }
            }
        }
        if let Some(ns) = &pod.netns {
            if Path::new(ns).exists() {
                left.push(format!("network namespace {ns}"));
            }
        }
        left
    }
}

fn get(ip: &str, timeout: Duration) -> std::io::Result<testutil::HttpResponse> {
    let addr: SocketAddr = format!("{ip}:{PORT}")
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    http_get(addr, "/", timeout)
}

/// Waits for the pod IP to answer; returns when it did.
fn first_response(ip: &str, within: Duration) -> Option<Instant> {
    let start = Instant::now();
    while start.elapsed() < within {
        if get(ip, Duration::from_secs(5)).is_ok_and(|r| r.body_str() == "hello from py\n") {
            return Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// The payloads of a CRI log file (`TIME STREAM TAG PAYLOAD` per line).
fn cri_log(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(4, ' ');
            let (_time, stream, tag, payload) = (f.next()?, f.next()?, f.next()?, f.next()?);
            Some(format!("{stream} {tag} {payload}"))
        })
        .collect()
}

/// The pod of the module doc under `handler`; with `hibernate`, the keep-alive checks.
fn pod_outputs(c: &Cri, handler: &str, hibernate: bool) -> Outputs {
    let pod = c.run_pod(
        handler,
        "web",
        &[
            ("dev.torpor.hibernate-after", "3s"),
            ("dev.torpor.wake-mode", "reap"),
        ],
    );
    let py = c.start_container(&pod, "py", &c.python_image, &["python3", "-c", PY_SERVER]);
    let side = c.start_container(&pod, "side", BUSYBOX_IMAGE, &["/bin/sh", "-c", SIDECAR]);
    let side_log_path = Path::new(&pod.config.log_directory).join("side.log");
    let logged = Detached::wait_until(Duration::from_secs(90), || {
        cri_log(&side_log_path)
            .iter()
            .any(|l| l.ends_with("hello from py"))
    });
    assert!(
        logged,
        "{handler}: the sidecar logged nothing; py: {:?}\n{}",
        cri_log(&Path::new(&pod.config.log_directory).join("py.log")),
        c.log()
    );
    let http = get(&pod.ip, Duration::from_secs(30))
        .map(|r| r.body_str())
        .unwrap_or_else(|e| format!("error: {e}"));
    let exec = c.exec_sync(&side, &["sh", "-c", "echo out; echo err >&2; exit 3"]);
    let hostname = c.exec_sync(&side, &["hostname"]).0;

    if hibernate {
        // The server hibernates by itself: the CRI's figures fall, its state does not.
        let hot = c.working_set(&py);
        assert!(hot > 64 << 20, "{handler}: hot working set {hot} bytes");
        let mut last = hot;
        let fell = Detached::wait_until(Duration::from_secs(60), || {
            last = c.working_set(&py);
            last * 5 <= hot
        });
        assert!(
            fell,
            "{handler}: working set {hot} -> {last} bytes (not down 80 %)"
        );
        println!(
            "{handler}: ContainerStats working set {:.1} MiB hot, {:.1} MiB hibernated (-{:.0} %)",
            hot as f64 / 1048576.0,
            last as f64 / 1048576.0,
            100.0 - 100.0 * last as f64 / hot as f64
        );
        assert_eq!(
            c.status(&py).state,
            cri::ContainerState::ContainerRunning as i32,
            "a hibernated container is running to the kubelet"
        );
        let t = Instant::now();
        let r = get(&pod.ip, Duration::from_secs(30)).expect("the request after the hibernate");
        assert_eq!(r.body_str(), "hello from py\n");
        println!(
            "{handler}: first response after the hibernate {:?}",
            t.elapsed()
        );
    } else {
        assert!(
            c.working_set(&py) > 0,
            "{handler}: no ContainerStats memory"
        );
    }

    rpc!(
        c,
        stop_container,
        cri::StopContainerRequest {
            container_id: side.clone(),
            timeout: 2,
        }
    );
    let side_exit = c.status(&side).exit_code;
    let side_log = cri_log(&side_log_path);
    c.stop_and_remove(&pod, &[&py, &side]);
    let gone = Detached::wait_until(Duration::from_secs(20), || {
        c.leftovers(&pod, &[&py, &side]).is_empty()
    });
    assert!(
        gone,
        "{handler}: left behind: {:#?}",
        c.leftovers(&pod, &[&py, &side])
    );
    Outputs {
        side_log,
        exec,
        hostname,
        http,
        side_exit,
    }
}

#[test]
fn a_pod_runs_on_torpor_as_on_runc_and_hibernates_when_idle() {
    let Some(c) = Cri::start() else { return };
    let torpor = pod_outputs(&c, "torpor", true);
    assert_eq!(torpor.side_log, ["stdout F hello from py"], "{torpor:?}");
    assert_eq!(
        torpor.exec,
        ("out\n".into(), "err\n".into(), 3),
        "{torpor:?}"
    );
    assert_eq!(torpor.hostname, "web\n");
    assert_eq!(torpor.http, "hello from py\n");
    assert_eq!(torpor.side_exit, 0);
    let runc = pod_outputs(&c, "runc", false);
    assert_eq!(torpor, runc, "torpor and runc differ");
}

/// A pod with `dev.torpor.dormant-after`: once idle, its server hibernates, then goes dormant
/// (its holder one small process, in the container's cgroup): the container's working set
/// falls to at most 1 MiB, it stays running to the kubelet, and its next request is answered
/// by the woken server.
#[test]
fn a_dormant_pod_is_running_and_smaller_than_hibernated_and_wakes() {
    let Some(c) = Cri::start() else { return };
    if testutil::platform_is_trap() {
        return;
    }
    let pod = c.run_pod(
        "torpor",
        "sleepy",
        &[
            ("dev.torpor.hibernate-after", "2s"),
            ("dev.torpor.dormant-after", "6s"),
            ("dev.torpor.wake-mode", "reap"),
        ],
    );
    let py = c.start_container(&pod, "py", &c.python_image, &["python3", "-c", PY_SERVER]);
    first_response(&pod.ip, Duration::from_secs(120)).expect("no first response");
    let hot = c.working_set(&py);
    let mut hibernated = hot;
    let fell = Detached::wait_until(Duration::from_secs(60), || {
        std::thread::sleep(Duration::from_millis(200));
        hibernated = c.working_set(&py);
        hibernated * 5 <= hot
    });
    assert!(fell, "working set {hot} -> {hibernated}: not hibernated");
    // Dormant: the holder's VM, threads and heaps gone, and what the cgroup still held of the
    // kernel's caches reclaimed (the page cache of the checkpoint and of the files the program
    // read, their cached names and inodes); what stays charged to the container is the
    // dormant process, its broker, and kernel memory (sockets, page tables).
    let mut dormant = hibernated;
    let fell = Detached::wait_until(Duration::from_secs(60), || {
        std::thread::sleep(Duration::from_millis(200));
        dormant = c.working_set(&py);
        dormant <= 1 << 20
    });
    println!(
        "ContainerStats working set {:.1} MiB hot, {:.2} MiB hibernated, {:.2} MiB dormant",
        hot as f64 / 1048576.0,
        hibernated as f64 / 1048576.0,
        dormant as f64 / 1048576.0
    );
    assert!(
        fell,
        "working set {hibernated} hibernated -> {dormant}: not dormant, or above 1 MiB\n{}",
        c.log()
    );
    assert_eq!(
        c.status(&py).state,
        cri::ContainerState::ContainerRunning as i32,
        "a dormant container is running to the kubelet"
    );
    let t = Instant::now();
    let r = get(&pod.ip, Duration::from_secs(30)).expect("the request after dormancy");
    assert_eq!(r.body_str(), "hello from py\n");
    println!("first response after dormancy {:?}", t.elapsed());
    c.stop_and_remove(&pod, &[&py]);
}

/// Pod start to first response, and the first response after an idle hibernate (torpor; the
/// same idle time for runc, whose server stays hot), through the CRI. Prints a Markdown table.
#[test]
#[ignore = "a benchmark: scripts/bench-cri.sh"]
fn bench_pod_start_and_wake() {
    let Some(c) = Cri::start() else { return };
    let runs: usize = std::env::var("TORPOR_CRI_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let mut rows = Vec::new();
    let mut idles = Vec::new();
    for handler in ["torpor", "runc"] {
        let (mut start, mut pod_ready, mut hot, mut woken) = (vec![], vec![], vec![], vec![]);
        for _ in 0..runs {
            let pod = c.run_pod(
                handler,
                "bench",
                &[
                    ("dev.torpor.hibernate-after", "2s"),
                    ("dev.torpor.wake-mode", "reap"),
                ],
            );
            let ready = pod.started.elapsed();
            let py = c.start_container(&pod, "py", &c.python_image, &["python3", "-c", PY_SERVER]);
            let first =
                first_response(&pod.ip, Duration::from_secs(120)).expect("no first response");
            start.push((first - pod.started).as_secs_f64() * 1e3);
            pod_ready.push(ready.as_secs_f64() * 1e3);
            let t = Instant::now();
            get(&pod.ip, Duration::from_secs(10)).expect("hot request");
            hot.push(t.elapsed().as_secs_f64() * 1e3);
            // Idle: torpor's holder hibernates by itself after 2 s; wait until the CRI sees
            // its memory fall (as the test does), and as long for runc.
            let hot_ws = c.working_set(&py);
            let idle = Instant::now();
            if handler == "torpor" {
                let hibernated = Detached::wait_until(Duration::from_secs(60), || {
                    std::thread::sleep(Duration::from_millis(200));
                    c.working_set(&py) * 4 <= hot_ws
                });
                assert!(hibernated, "the server did not hibernate");
                std::thread::sleep(Duration::from_millis(500));
                idles.push(idle.elapsed());
            } else {
                let wait = idles.iter().sum::<Duration>() / idles.len().max(1) as u32;
                std::thread::sleep(wait.max(Duration::from_secs(3)));
            }
            let t = Instant::now();
            let r = get(&pod.ip, Duration::from_secs(30)).expect("request after idle");
            assert_eq!(r.body_str(), "hello from py\n");
            woken.push(t.elapsed().as_secs_f64() * 1e3);
            c.stop_and_remove(&pod, &[&py]);
        }
        rows.push((handler, pod_ready, start, hot, woken));
    }
    let med = |v: &[f64]| testutil::median(v);
    let span = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        format!("{lo:.1}-{hi:.1}")
    };
    println!("\n| runtime | RunPodSandbox (ms) | pod start → first response (ms) | hot request (ms) | first request after idle (ms) |");
    println!("|---|---|---|---|---|");
    for (h, ready, start, hot, woken) in &rows {
        println!(
            "| {h} | {:.1} ({}) | {:.1} ({}) | {:.2} ({}) | {:.2} ({}) |",
            med(ready),
            span(ready),
            med(start),
            span(start),
            med(hot),
            span(hot),
            med(woken),
            span(woken)
        );
    }
    println!("\nmedians of {runs} runs (min-max in parentheses); after idle: torpor hibernated by its keep-alive policy (2 s), runc hot after the same idle time");
}
