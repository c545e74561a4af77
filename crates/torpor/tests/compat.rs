//! Language runtimes from Debian packages, unmodified, in torpor: root
//! filesystems built by `scripts/build-rootfs.sh` (debootstrap, cached; see
//! `testutil::debian`), their programs run end to end and compared with the
//! same code run natively.

use std::path::PathBuf;
use std::process::Command;

use testutil::{run::run_command, Output, Torpor, DEFAULT_TIMEOUT};

fn torpor() -> Torpor {
    Torpor::new(env!("CARGO_BIN_EXE_torpor"))
}

/// Runs `/usr/bin/python3 -c CODE` in the Debian `python` root.
fn python3_in_torpor(root: &std::path::Path, code: &str) -> Output {
    torpor()
        .run(root, "/usr/bin/python3")
        .args(["-c", code])
        .host_env("TORPOR_LOG", "off")
        .output()
}

/// Runs `python3 -c CODE` natively: the host's `python3` when it has one,
/// else the root's own python3 under `chroot` (the build needed root, so
/// chroot works).
fn python3_native(root: &std::path::Path, code: &str) -> Output {
    let host = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("python3"))
            .find(|p| p.is_file())
    });
    let cmd = match host {
        Some(python3) => {
            let mut c = Command::new(python3);
            c.args(["-c", code]);
            c
        }
        None => {
            let mut c = Command::new("chroot");
            c.arg(root)
                .args(["/usr/bin/python3", "-c", code])
                .env_clear()
                .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
            c
        }
    };
    run_command(cmd, None, DEFAULT_TIMEOUT)
}

fn python_root() -> Option<PathBuf> {
    testutil::debian_rootfs("python")
}

#[test]
fn python3_prints() {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = python_root() else { return };
    let out = python3_in_torpor(&root, "print('hello from python3 in torpor', 6 * 7)");
    out.assert_code(0);
    assert_eq!(
        out.stdout_str(),
        "hello from python3 in torpor 42\n",
        "{out:?}"
    );
}

#[test]
fn python3_exit_status_passes_through() {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = python_root() else { return };
    let out = python3_in_torpor(&root, "import sys; print('bye'); sys.exit(3)");
    out.assert_code(3);
    assert_eq!(out.stdout_str(), "bye\n", "{out:?}");
}

#[test]
fn python3_computes() {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = python_root() else { return };
    let code = "import json, hashlib\n\
                print(json.dumps({'h': hashlib.sha256(b'torpor').hexdigest(), \
                'n': sum(i * i for i in range(100000)), 's': sorted('torpor')}))";
    let native = python3_native(&root, code);
    native.assert_code(0);
    let guest = python3_in_torpor(&root, code);
    guest.assert_code(0);
    assert!(guest.stdout_str().contains("\"h\": \""), "{guest:?}");
    assert_eq!(
        guest.stdout_str(),
        native.stdout_str(),
        "torpor and native outputs differ\ntorpor: {guest:?}\nnative: {native:?}"
    );
}

/// /proc/self/maps names the files mapped, as Linux does: the libraries the dynamic linker
/// mapped and the linker itself, by their resolved paths (JVMs, profilers and sanitizers find
/// them there).
#[test]
fn proc_self_maps_names_mapped_files_by_their_resolved_paths() {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = python_root() else { return };
    let code = "import ctypes\n\
                print('\\n'.join(sorted({l.split()[-1] for l in open('/proc/self/maps') \
                if l.split()[-1].startswith('/')})))";
    let out = python3_in_torpor(&root, code);
    out.assert_code(0);
    let text = out.stdout_str();
    let named: Vec<&str> = text.lines().collect();
    for lib in [
        "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libffi.so.8.1.2",
    ] {
        assert!(named.contains(&lib), "{lib} not in {named:?}");
    }
    for p in &named {
        let host = root.join(p.trim_start_matches('/'));
        let meta = std::fs::symlink_metadata(&host).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert!(meta.is_file(), "{p} is not a resolved file: {named:?}");
    }
    // Its device and inode are those stat(2) gives the application.
    let code = "import os\n\
                for l in open('/proc/self/maps'):\n\
                \x20   f = l.split()\n\
                \x20   if f[-1].endswith('/libc.so.6'):\n\
                \x20       st = os.stat(f[-1])\n\
                \x20       print(f[3] == '%02x:%02x' % (os.major(st.st_dev), os.minor(st.st_dev)), \
                int(f[4]) == st.st_ino)\n\
                \x20       break";
    let out = python3_in_torpor(&root, code);
    out.assert_code(0);
    assert_eq!(out.stdout_str(), "True True\n", "{out:?}");
}

/// Runs `program args` from the Debian root `name` with guest port 8080 published, and checks
/// that 100 sequential requests (each a new connection) all get a body containing `want`.
fn serves_100_requests(name: &str, program: &str, args: &[&str], want: &str) {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = testutil::debian_rootfs(name) else {
        return;
    };
    let port = testutil::free_port();
    let mut server = torpor()
        .run(&root, program)
        .args(args)
        .publish(&format!("127.0.0.1:{port}:8080"))
        .memory("1G")
        .host_env("TORPOR_LOG", "off")
        .spawn();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let start = std::time::Instant::now();
    let mut up = false;
    while start.elapsed() < std::time::Duration::from_secs(120) {
        if testutil::http_get(addr, "/", std::time::Duration::from_secs(10)).is_ok() {
            up = true;
            break;
        }
        assert!(
            !server.has_exited(),
            "{name} server exited: {}",
            String::from_utf8_lossy(&server.stderr_so_far())
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(up, "{name} server did not answer within 120 s");
    for i in 0..100 {
        let r = testutil::http_get(addr, "/", std::time::Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{name}: request {i}: {e}"));
        assert!(
            r.body_str().contains(want),
            "{name}: request {i}: {:?}",
            r.body_str()
        );
    }
    server.kill();
}

const PY_SERVER: &str = r#"
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = b"hello from python\n"
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), H).serve_forever()
"#;

const NODE_SERVER: &str =
    r#"require('http').createServer((q, s) => s.end('hello from node\n')).listen(8080)"#;

#[test]
fn python_http_server_answers_100_requests() {
    serves_100_requests(
        "python",
        "/usr/bin/python3",
        &["-c", PY_SERVER],
        "hello from python",
    );
}

#[test]
fn node_http_server_answers_100_requests() {
    serves_100_requests(
        "node",
        "/usr/bin/node",
        &["-e", NODE_SERVER],
        "hello from node",
    );
}

#[test]
fn go_net_http_server_answers_100_requests() {
    serves_100_requests("go", "/app/hello", &[], "Hello");
}

#[test]
fn java_http_server_answers_100_requests() {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = testutil::debian_rootfs("java") else {
        return;
    };
    testutil::build_java_hello(&root);
    serves_100_requests(
        "java",
        "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
        &["-cp", "/app", "Hello"],
        "hello from java",
    );
}

/// `/usr/bin/java` is a chain of symlinks (through /etc/alternatives): the JVM finds
/// `libjli.so` beside the file `/proc/self/exe` names, so that must be the resolved file.
#[test]
fn java_through_its_symlinks_prints_its_version() {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = testutil::debian_rootfs("java") else {
        return;
    };
    let out = torpor()
        .run(&root, "/usr/bin/java")
        .args(["-version"])
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_eq!(out.code(), 0, "java -version: {}", out.stderr_str());
    assert!(
        out.stderr_str().contains("openjdk version \"17"),
        "{}",
        out.stderr_str()
    );
}

/// `mkdir -p` of an absolute path starts with mkdir("/"), which must be EEXIST.
#[test]
fn mkdir_p_of_an_absolute_path() {
    if !testutil::require_kvm() {
        return;
    }
    let Some(root) = testutil::debian_rootfs("java") else {
        return;
    };
    let out = torpor()
        .run(&root, "/bin/sh")
        .args([
            "-c",
            "mkdir -p /srv/a/b/c && test -d /srv/a/b/c && echo made",
        ])
        .host_env("TORPOR_LOG", "off")
        .output();
    assert_eq!(out.code(), 0, "mkdir -p: {}", out.stderr_str());
    assert_eq!(out.stdout_str(), "made\n");
}
