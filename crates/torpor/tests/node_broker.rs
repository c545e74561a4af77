//! The node's file broker (`torpor::broker::node`): one privileged process for every root
//! holder of a state root. These tests speak its protocol as a holder (or an attacker in a
//! holder's place) would: who may register, and what a registered connection may reach.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kernel::broker::Op;
use torpor::broker::{node, wire};

/// The environment variable that makes this test binary a registering child (see
/// [`an_unprivileged_process_cannot_register`]).
const CHILD: &str = "TORPOR_NODE_BROKER_TEST_CHILD";

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A state root with a node broker serving it, ended (and removed) on drop.
struct Broker {
    state: PathBuf,
}

impl Broker {
    fn start(name: &str) -> Broker {
        let state = std::env::temp_dir().join(format!("torpor-nb-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&state);
        std::fs::create_dir_all(&state).unwrap();
        let st = std::process::Command::new(env!("CARGO_BIN_EXE_torpor-broker"))
            .arg("--node")
            .arg(&state)
            .status()
            .unwrap();
        assert!(st.success(), "torpor-broker --node: {st}");
        let sock = state.join(".broker/sock");
        let t = Instant::now();
        while !sock.exists() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the broker never listened"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Broker { state }
    }

    fn connect(&self) -> OwnedFd {
        node::connect_or_start(&self.state).expect("connecting to the node broker")
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// Makes `op` on `sock` as a holder's client does: 0, or the errno.
fn call(sock: &OwnedFd, op: &Op<'_>) -> i32 {
    let (req, fds) = wire::encode(op, 0x1f);
    let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
    wire::send(sock.as_fd(), &req.to_bytes(), &raw).unwrap();
    let mut buf = [0u8; 8];
    let (n, _) = wire::recv(sock.as_fd(), &mut buf).unwrap();
    assert_eq!(n, 8);
    let r = i64::from_le_bytes(buf);
    if r < 0 {
        -r as i32
    } else {
        0
    }
}

fn errno_of(e: &anyhow::Error) -> Option<i32> {
    e.chain()
        .find_map(|c| c.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::raw_os_error)
}

/// A process without CAP_SYS_ADMIN (a confined holder, or whatever took one over) cannot
/// register a root of its choosing, while a privileged one can; a root that is not a mount of
/// its own is refused.
#[test]
fn an_unprivileged_process_cannot_register() {
    if let Ok(state) = std::env::var(CHILD) {
        // The child: without CAP_SYS_ADMIN (its bounding set lost it before the exec), as a
        // confined holder is.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap();
        assert_eq!(eff & (1 << 21), 0, "the child kept CAP_SYS_ADMIN");
        let sock = node::connect_or_start(Path::new(&state)).unwrap();
        let e = node::register(sock, Path::new("/"), &[]).unwrap_err();
        assert_eq!(errno_of(&e), Some(libc::EPERM), "{e:#}");
        return;
    }
    if !is_root() {
        eprintln!("skipped: the node broker serves root holders");
        return;
    }
    let b = Broker::start("unpriv");
    // setpriv (util-linux): the whole process without CAP_SYS_ADMIN, every thread.
    let out = std::process::Command::new("setpriv")
        .arg("--bounding-set=-sys_admin")
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "an_unprivileged_process_cannot_register",
            "--nocapture",
        ])
        .env(CHILD, &b.state)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the unprivileged child: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Not a mount of its own: refused.
    let e = node::register(b.connect(), &b.state, &[]).unwrap_err();
    assert_eq!(errno_of(&e), Some(libc::EXDEV), "{e:#}");
    // A mount's root, by a privileged process: accepted.
    node::register(b.connect(), Path::new("/"), &[]).expect("a privileged registration");
    let log = std::fs::read_to_string(b.state.join(".broker/log")).unwrap_or_default();
    assert!(log.contains("refused a registration"), "log: {log}");
}

/// A registered connection reaches its root's mount only: a descriptor of another mount is
/// refused, a name that climbs is refused, and beyond the state root Landlock refuses too.
#[test]
fn a_registered_holder_reaches_its_root_mount_only() {
    if !is_root() {
        eprintln!("skipped: the node broker serves root holders");
        return;
    }
    let b = Broker::start("reach");
    // "/" is a mount's root; the state root is beneath it (on the same mount here, or not:
    // the test asks only what each layer refuses).
    let sock = node::register(b.connect(), Path::new("/"), &[]).expect("registration");
    let state = std::fs::File::open(&b.state).unwrap();
    let on_root_mount = mount_of(&b.state) == mount_of(Path::new("/"));
    // A directory of another mount (/proc): refused, whatever the call.
    let proc_dir = std::fs::File::open("/proc").unwrap();
    fn mkdir<'a>(dir: &'a std::fs::File, name: &'a [u8]) -> Op<'a> {
        Op::MkdirAt {
            dir: dir.as_fd(),
            name,
            mode: 0o755,
        }
    }
    assert_eq!(call(&sock, &mkdir(&proc_dir, b"x")), libc::EPERM);
    if on_root_mount {
        // On the root's mount, beneath the state root: made.
        assert_eq!(call(&sock, &mkdir(&state, b"made")), 0);
        assert!(b.state.join("made").is_dir());
        // A name that climbs out: refused before the call.
        assert_eq!(call(&sock, &mkdir(&state, b"../escaped")), libc::EPERM);
        assert!(!b.state.parent().unwrap().join("escaped").exists());
        // On the root's mount but beyond the state root: Landlock's refusal.
        let tmp = std::fs::File::open(b.state.parent().unwrap()).unwrap();
        let name = format!("torpor-nb-outside-{}", std::process::id());
        assert_eq!(call(&sock, &mkdir(&tmp, name.as_bytes())), libc::EACCES);
        assert!(!b.state.parent().unwrap().join(&name).exists());
    }
    // A request before any registration, on a new connection: refused, and the connection
    // ends.
    let fresh = b.connect();
    assert_eq!(call(&fresh, &mkdir(&state, b"early")), libc::EPERM);
    assert!(!b.state.join("early").exists());
}

/// The broker leaves a few seconds after its last holder, removing its socket.
#[test]
fn the_broker_leaves_after_its_last_holder() {
    if !is_root() {
        eprintln!("skipped: the node broker serves root holders");
        return;
    }
    let b = Broker::start("leaves");
    let sock = node::register(b.connect(), Path::new("/"), &[]).expect("registration");
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        b.state.join(".broker/sock").exists(),
        "it stays while a holder is there"
    );
    drop(sock);
    let t = Instant::now();
    while b.state.join(".broker/sock").exists() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the broker outlived its last holder"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn mount_of(p: &Path) -> u64 {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: an all-zero statx is a valid value of the plain C struct.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx of a NUL-terminated path into a local.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            0,
            libc::STATX_MNT_ID_UNIQUE,
            &mut stx,
        )
    };
    assert_eq!(r, 0);
    stx.stx_mnt_id
}
