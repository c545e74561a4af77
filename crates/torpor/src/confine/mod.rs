//! The holder confines itself once its sandbox is set up (root, mounts, network namespace,
//! state directory, the program loaded), before the application's first instruction runs:
//!
//! 1. `no_new_privs`: nothing it could still execute gains privileges (and nothing can be
//!    executed: see 3); run as root, not dumpable (another holder, with the same uid and
//!    capabilities, cannot read its memory through `/proc`);
//! 2. capabilities: all dropped from the bounding set and the permitted, effective and
//!    inheritable sets, but CAP_SETUID, CAP_SETGID and CAP_FSETID of a root holder (its
//!    handler threads make the application's file calls with the application's filesystem
//!    ids, the only use the seccomp filter leaves the first two; the host drops the third
//!    by itself for a thread whose filesystem uid is not 0) and, only where this sandbox needs them ([`Needs`]), binding a port
//!    below the host's unprivileged start and creating a userfaultfd with kernel-mode faults
//!    where `/dev/userfaultfd` cannot be opened. The file capabilities the syscall handlers
//!    need on behalf of the application ([`KEPT_CAPS`]: file ownership and access checks
//!    inside the root) stay with the file broker of a root holder (`crate::broker`, started
//!    before: [`confine_broker`] confines it), not with the holder, which keeps them only if
//!    no broker runs;
//! 3. a filesystem view narrowed with Landlock ([`landlock`]): the sandbox's root, its
//!    state directory, `/dev/kvm` and a few host files (OCI holders and `torpor demo`: the
//!    friendly form's holder must unmount its copy-on-write root at the end, which Landlock
//!    forbids);
//! 4. a seccomp-BPF allowlist of the host calls the runtime makes ([`seccomp`]), on every
//!    thread (TSYNC): anything else kills the process.
//!
//! `TORPOR_SECCOMP=log` logs what would be killed instead (to find a call a new code path
//! makes: the host kernel's audit log shows each with its number); `TORPOR_SECCOMP=off` skips
//! the filter (debugging only). See docs/SECURITY.md.

pub mod devices;
pub mod landlock;
pub mod seccomp;

use anyhow::{bail, Context, Result};

/// Capabilities the holder always keeps (when it has them: as root). Everything else is
/// dropped, but what [`Needs`] adds.
pub const KEPT_CAPS: &[u32] = &[
    0, // CAP_CHOWN: files the application creates belong to its ids
    1, // CAP_DAC_OVERRIDE: files of the root owned by other users
    2, // CAP_DAC_READ_SEARCH
    3, // CAP_FOWNER: chmod, utimes of such files
    4, // CAP_FSETID
];

/// `CAP_FSETID`.
const CAP_FSETID: u32 = 4;
/// `CAP_SETGID`.
const CAP_SETGID: u32 = 6;
/// `CAP_SETUID`.
const CAP_SETUID: u32 = 7;
/// `CAP_NET_BIND_SERVICE`.
const CAP_NET_BIND_SERVICE: u32 = 10;
/// `CAP_SYS_PTRACE`.
const CAP_SYS_PTRACE: u32 = 19;

/// What this sandbox needs beside [`KEPT_CAPS`], decided before confinement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Binding a port below `net.ipv4.ip_unprivileged_port_start`: `CAP_NET_BIND_SERVICE`.
    pub low_ports: bool,
    /// A userfaultfd with kernel-mode faults without `/dev/userfaultfd` (before Linux 6.1, or
    /// the device not accessible) while `vm.unprivileged_userfaultfd` is 0:
    /// `CAP_SYS_PTRACE`.
    pub uffd_ptrace: bool,
    /// Going dormant (`crate::dormancy`): executing the runtime's own two binaries, through
    /// the descriptors [`EXEC_FDS`] only.
    pub dormancy: bool,
}

/// Where a holder that may go dormant keeps its two executables open (`O_PATH`):
/// `torpor-dormant` and `torpor`. Its seccomp filter allows `execveat` of these two
/// descriptors alone, and Landlock the execution of those two files alone
/// ([`exec_allowed`]). Fixed numbers, high enough to be free when they are placed (before the
/// application runs) and below any `RLIMIT_NOFILE`.
pub const EXEC_FDS: [std::os::fd::RawFd; 2] = [990, 991];

/// Whether this holder may exec its dormant process: its filter and Landlock say so.
static EXEC_ALLOWED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this holder's confinement lets it go dormant ([`Needs::dormancy`] was asked for,
/// Landlock enforces what it may execute, and both binaries are open at [`EXEC_FDS`]).
pub fn exec_allowed() -> bool {
    EXEC_ALLOWED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Opens the runtime's two binaries at [`EXEC_FDS`] (close-on-exec; kept across the execs
/// of dormancy by `crate::dormancy::close_others_on_exec`).
fn pin_executables(exes: &[std::path::PathBuf]) -> Result<()> {
    for (path, &at) in exes.iter().zip(EXEC_FDS.iter()) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .with_context(|| format!("{}: NUL in path", path.display()))?;
        // SAFETY: a NUL-terminated path; O_PATH opens nothing's contents.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("opening {}", path.display()));
        }
        // SAFETY: dup3 of our fresh descriptor onto a fixed number no one uses yet (the
        // application has not run); then the fresh one is closed.
        let r = unsafe { libc::dup3(fd, at, libc::O_CLOEXEC) };
        let e = std::io::Error::last_os_error();
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(fd) };
        if r < 0 {
            return Err(e).with_context(|| format!("placing {} at {at}", path.display()));
        }
    }
    Ok(())
}

impl Needs {
    /// What a sandbox with `publish` (or, `namespaced`, a network namespace of its own where
    /// the application binds its own ports) needs, from this host's settings.
    pub fn of(publish: &[kernel::net::Publish], namespaced: bool) -> Needs {
        let start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(1024);
        let low_ports = if namespaced {
            // The application may bind any port: only a namespace whose engine lowered the
            // start to 0 (Docker, containerd's CRI) needs nothing.
            start > 0
        } else {
            publish.iter().any(|p| u32::from(p.host.port()) < start)
        };
        let unprivileged_uffd = std::fs::read_to_string("/proc/sys/vm/unprivileged_userfaultfd")
            .is_ok_and(|s| s.trim() == "1");
        let device = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/userfaultfd")
            .is_ok();
        Needs {
            low_ports,
            uffd_ptrace: !unprivileged_uffd && !device,
            dormancy: false,
        }
    }

    /// The capabilities these needs add.
    fn caps(self) -> Vec<u32> {
        let mut caps = Vec::new();
        if self.low_ports {
            caps.push(CAP_NET_BIND_SERVICE);
        }
        if self.uffd_ptrace {
            caps.push(CAP_SYS_PTRACE);
        }
        caps
    }
}

/// Highest capability number to drop from the bounding set (the kernel ignores unknown ones
/// with EINVAL, which ends the loop).
const CAP_LAST: u32 = 63;

/// How the filter acts (`TORPOR_SECCOMP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Kill the process on a call outside the allowlist (the default).
    Kill,
    /// Log such calls and let them through.
    Log,
    /// No filter.
    Off,
}

impl Mode {
    /// From `TORPOR_SECCOMP` (kill, log, off; default kill).
    pub fn from_env() -> Result<Mode> {
        match std::env::var("TORPOR_SECCOMP").as_deref() {
            Err(_) | Ok("") | Ok("kill") | Ok("on") => Ok(Mode::Kill),
            Ok("log") => Ok(Mode::Log),
            Ok("off") => Ok(Mode::Off),
            Ok(other) => bail!("TORPOR_SECCOMP={other:?}: expected kill, log or off"),
        }
    }
}

/// Confines the calling process (every thread) as the module says: with `trees`, its files
/// are those beneath them (the sandbox's root and state directory) and a few host paths
/// ([`landlock`]; both forms: the friendly form's copy-on-write root is taken down by its
/// janitor, `crate::janitor`); what `needs` asks is kept beside [`KEPT_CAPS`].
///
/// # Errors
/// When a step fails: the sandbox must not run unconfined by accident.
pub fn confine(mode: Mode, needs: Needs, trees: Option<&[&std::path::Path]>) -> Result<()> {
    // SAFETY: prctl with constant arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error()).context("PR_SET_NO_NEW_PRIVS");
    }
    if mode != Mode::Off && devices::make_private_dev()? {
        tracing::debug!("the holder has a /dev of its own");
    }
    // What the kernel reads of the host's /sys, read now: /sys stays closed.
    kernel::fs::procfs::prime_host_files();
    // A holder that may go dormant executes its two binaries (and their interpreter and
    // libraries are read again): only where Landlock can say that nothing else executes.
    let exes = if needs.dormancy {
        crate::dormancy::executables()
    } else {
        Vec::new()
    };
    let mut landlocked = false;
    if let (Some(trees), true) = (trees, mode != Mode::Off) {
        let libs = if exes.is_empty() {
            Vec::new()
        } else {
            crate::dormancy::shared_objects()
        };
        landlocked = landlock::restrict(trees, &exes, &libs)?;
    }
    let exec_fds = if needs.dormancy && exes.len() == EXEC_FDS.len() && landlocked {
        pin_executables(&exes)?;
        EXEC_ALLOWED.store(true, std::sync::atomic::Ordering::SeqCst);
        Some(EXEC_FDS)
    } else {
        None
    };
    // In a network namespace of its own, the holder binds no published port itself.
    let needs = if kernel::broker::publishes() {
        Needs {
            low_ports: false,
            ..needs
        }
    } else {
        needs
    };
    tracing::debug!(?needs, "dropping capabilities");
    let file_caps = if kernel::broker::installed() {
        &[][..]
    } else {
        KEPT_CAPS
    };
    let mut keep = needs.caps();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        // The handler threads take the application's filesystem ids and groups for its file
        // calls (`kernel::fs::identity`); the seccomp filter allows setfsuid, setfsgid and
        // setgroups alone of the calls these two capabilities permit. CAP_FSETID, which the
        // host drops by itself while a thread's filesystem uid is not 0: a root application's
        // new file in a set-group-ID directory, or chmod g+s of a file of another group,
        // keeps its set-group-ID bit (the host clears it silently without, leaving the broker
        // nothing to retry).
        keep.extend([CAP_FSETID, CAP_SETGID, CAP_SETUID]);
    }
    drop_capabilities(file_caps, &keep)?;
    if root {
        // Every root holder keeps the same few capabilities, so without this one holder could
        // read another's memory (`/proc/PID/mem`: same uid, no capability beyond its own).
        // Not dumpable, it is reachable only with CAP_SYS_PTRACE, which no holder keeps here.
        // (A rootless holder stays dumpable: its user reads its `/proc` files for `stats`.)
        // SAFETY: prctl with constant arguments.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error()).context("PR_SET_DUMPABLE");
        }
    }
    // The trap platform's stub factory: inside the Landlock domain and without capabilities
    // (so are the stubs it makes, which the holder may then kick), but without the holder's
    // seccomp filter (whose KILL would outrank a stub's TRAP).
    platform_trap::start_factory().context("starting the trap platform's stub factory")?;
    if mode == Mode::Off {
        tracing::warn!("TORPOR_SECCOMP=off: the runtime runs without its seccomp filter");
        mark_confined(Some(mode));
        return Ok(());
    }
    let bpf = seccomp::filter(mode == Mode::Log, exec_fds).map_err(anyhow::Error::msg)?;
    seccompiler::apply_filter_all_threads(&bpf).context("installing the seccomp filter")?;
    mark_confined(Some(mode));
    // Per role: the userfaultfd threads (started at the first deflate) add a narrower filter.
    let _ = PAGER_LOG_ONLY.set(mode == Mode::Log);
    hibernate::pager::set_thread_confinement(confine_pager_thread);
    Ok(())
}

/// The confinement of a holder woken from dormancy (`crate::dormancy::wake`): its filters,
/// Landlock domain, capabilities and `no_new_privs` carried over its execs; what is per
/// image is done again (not dumpable as root, the roles' filters to come). The kernel's host
/// files come from the dormancy record (`wake_in_place` adopts them first): the domain lets
/// this image read none of them.
///
/// # Errors
/// A step the host refuses.
pub fn inherited(mode: Mode) -> Result<()> {
    kernel::fs::procfs::prime_host_files();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // An exec made the process dumpable again.
        // SAFETY: prctl with constant arguments.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error()).context("PR_SET_DUMPABLE");
        }
    }
    // The executables stay where the filter names them, closed to the application's
    // processes.
    let pinned = EXEC_FDS
        .iter()
        .all(|&fd| crate::dormancy::set_cloexec(fd, true).is_ok());
    EXEC_ALLOWED.store(pinned, std::sync::atomic::Ordering::SeqCst);
    mark_confined(Some(mode));
    let _ = PAGER_LOG_ONLY.set(mode == Mode::Log);
    hibernate::pager::set_thread_confinement(confine_pager_thread);
    Ok(())
}

/// Once the process is confined: how its filters act (`None` when unconfined), for the roles
/// that add one later (the control thread waits for it, [`enter_control_role`]).
static CONFINED: (std::sync::Mutex<Option<Option<Mode>>>, std::sync::Condvar) =
    (std::sync::Mutex::new(None), std::sync::Condvar::new());

/// Records that the process is confined with `mode` (`None`: it will not be), waking a control
/// thread waiting in [`enter_control_role`].
fn mark_confined(mode: Option<Mode>) {
    let (m, cv) = &CONFINED;
    *m.lock().unwrap_or_else(|e| e.into_inner()) = Some(mode);
    cv.notify_all();
}

/// The control thread's role: it waits until the process filter is in place (a thread's own
/// filter would make the process's synchronisation fail), then stacks the control filter
/// (`seccomp::control_filter`) on itself; the request threads it starts inherit it.
///
/// # Errors
/// The filter cannot be installed.
pub fn enter_control_role() -> std::result::Result<(), String> {
    let (m, cv) = &CONFINED;
    let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
    while g.is_none() {
        g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
    }
    let mode = (*g).flatten();
    drop(g);
    match mode {
        None | Some(Mode::Off) => Ok(()),
        Some(mode) => {
            let bpf = seccomp::control_filter(mode == Mode::Log)?;
            seccompiler::apply_filter(&bpf).map_err(|e| e.to_string())
        }
    }
}

/// Whether the pager's filter only logs (`TORPOR_SECCOMP=log`).
static PAGER_LOG_ONLY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Installs the userfaultfd thread's filters on the calling thread (stacked on the process's).
fn confine_pager_thread() -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
    for bpf in seccomp::pager_filters(PAGER_LOG_ONLY.get().copied().unwrap_or(false))? {
        seccompiler::apply_filter(&bpf)?;
    }
    Ok(())
}

/// Confines the file broker (`crate::broker`) before it serves: `no_new_privs`, Landlock to
/// the sandbox's root alone, only [`KEPT_CAPS`], not dumpable, and its own seccomp filter
/// (the file calls it makes for the holder, its socket, memory).
///
/// # Errors
/// When a step fails: the broker must not serve unconfined.
pub fn confine_broker(root: &std::path::Path, low_ports: bool) -> Result<()> {
    confine_a_broker(&Broker {
        trees: &[root],
        read: &[],
        // Binding a published port below the host's unprivileged start is the broker's now.
        low_ports,
        node: false,
    })
}

/// Confines the node's file broker (`crate::broker::node`) before it serves: as
/// [`confine_broker`], with Landlock to the state root `state` (every friendly-form sandbox's
/// root is beneath it) and `/proc` read-only (who registers), CAP_NET_BIND_SERVICE kept (a
/// sandbox's published low port), and the node broker's filter.
///
/// # Errors
/// When a step fails: the broker must not serve unconfined.
pub fn confine_node_broker(state: &std::path::Path) -> Result<()> {
    confine_a_broker(&Broker {
        trees: &[state],
        read: &[std::path::Path::new("/proc")],
        low_ports: true,
        node: true,
    })
}

/// How a broker is confined.
struct Broker<'a> {
    /// Landlock: full access beneath these.
    trees: &'a [&'a std::path::Path],
    /// Landlock: reading beneath these.
    read: &'a [&'a std::path::Path],
    /// CAP_NET_BIND_SERVICE kept.
    low_ports: bool,
    /// The node's broker's filter, not a sandbox broker's.
    node: bool,
}

fn confine_a_broker(b: &Broker<'_>) -> Result<()> {
    // SAFETY: prctl with constant arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error()).context("PR_SET_NO_NEW_PRIVS");
    }
    let mode = Mode::from_env()?;
    if mode != Mode::Off {
        landlock::restrict_to_trees_reading(b.trees, b.read)?;
    }
    let bind = if b.low_ports {
        &[CAP_NET_BIND_SERVICE][..]
    } else {
        &[]
    };
    drop_capabilities(KEPT_CAPS, bind)?;
    // SAFETY: prctl with constant arguments.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error()).context("PR_SET_DUMPABLE");
    }
    if mode == Mode::Off {
        return Ok(());
    }
    let log = mode == Mode::Log;
    let bpf = if b.node {
        seccomp::node_broker_filter(log)
    } else {
        seccomp::broker_filter(log)
    }
    .map_err(anyhow::Error::msg)?;
    seccompiler::apply_filter(&bpf).context("installing the broker's seccomp filter")?;
    Ok(())
}

/// Drops every capability but `file_caps` and `also_keep` from the bounding set and the
/// process's sets.
fn drop_capabilities(file_caps: &[u32], also_keep: &[u32]) -> Result<()> {
    let kept = |c: u32| file_caps.contains(&c) || also_keep.contains(&c);
    for cap in 0..=CAP_LAST {
        if kept(cap) {
            continue;
        }
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                // Past the last capability the kernel knows.
                Some(libc::EINVAL) => break,
                // Without CAP_SETPCAP (not root) the bounding set stays; the process has no
                // capabilities to use anyway.
                Some(libc::EPERM) => break,
                _ => return Err(e).context("PR_CAPBSET_DROP"),
            }
        }
    }
    let mask = file_caps
        .iter()
        .chain(also_keep)
        .fold(0u64, |m, &c| m | (1u64 << c));
    let mut header = CapHeader {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget with a valid header and two data structs (version 3).
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error()).context("capget");
    }
    for (i, d) in data.iter_mut().enumerate() {
        let keep = (mask >> (32 * i)) as u32;
        d.effective &= keep;
        d.permitted &= keep;
        d.inheritable = 0;
    }
    // SAFETY: capset with the header and data just read and narrowed.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error()).context("capset");
    }
    // Ambient capabilities go too.
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    Ok(())
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Test-only (`crates/torpor/tests/confinement.rs`): with `TORPOR_TEST_FORBIDDEN_CALL=execve`
/// the confined holder tries to run `/bin/sh`, as a compromised syscall handler would, and the
/// filter must kill it; with `TORPOR_TEST_FORBIDDEN_CALL=open` it tries to read the host's
/// `/etc/passwd` and init's environment, to signal init, and to connect to the host's abstract
/// socket `TORPOR_TEST_ABSTRACT`, says what happened on stderr, and goes on.
pub fn test_hook() {
    if std::env::var("TORPOR_TEST_FORBIDDEN_CALL").as_deref() == Ok("open") {
        match std::fs::read("/etc/passwd") {
            Ok(b) => eprintln!(
                "torpor: test hook: read the host's /etc/passwd ({} bytes)",
                b.len()
            ),
            Err(e) => eprintln!("torpor: test hook: the host's /etc/passwd: {e}"),
        }
        // Another process's environment (init's: root's, like the holder).
        match std::fs::read("/proc/1/environ") {
            Ok(b) => eprintln!(
                "torpor: test hook: read /proc/1/environ ({} bytes)",
                b.len()
            ),
            Err(e) => eprintln!("torpor: test hook: /proc/1/environ: {e}"),
        }
        // The device nodes it could change the mode of (it owns the host's, as uid 0) are its
        // own: /dev is the holder's tmpfs, and /dev/pts a devpts of its own (no host terminal).
        let own_dev = std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| {
            m.lines()
                .any(|l| l.contains(" /dev ") && l.contains(" - tmpfs torpor-dev "))
        });
        let host_ptys = std::fs::read_dir("/dev/pts")
            .map(|d| d.flatten().filter(|e| e.file_name() != "ptmx").count())
            .unwrap_or(0);
        eprintln!("torpor: test hook: own /dev: {own_dev}, host terminals seen: {host_ptys}");
        // A signal to a host process (init; signal 0 only asks whether it may be sent).
        // SAFETY: kill with signal 0 sends nothing.
        let r = unsafe { libc::kill(1, 0) };
        eprintln!(
            "torpor: test hook: signal to the host's init: {}",
            if r == 0 {
                "allowed".to_string()
            } else {
                std::io::Error::last_os_error().to_string()
            }
        );
        // An abstract Unix socket of the host, named by the test.
        if let Ok(name) = std::env::var("TORPOR_TEST_ABSTRACT") {
            use std::os::linux::net::SocketAddrExt;
            let r = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                .and_then(|a| std::os::unix::net::UnixStream::connect_addr(&a));
            eprintln!(
                "torpor: test hook: the host's abstract socket: {}",
                match r {
                    Ok(_) => "connected".to_string(),
                    Err(e) => e.to_string(),
                }
            );
        }
    }
    if std::env::var("TORPOR_TEST_FORBIDDEN_CALL").as_deref() == Ok("execve") {
        let sh = c"/bin/sh";
        let argv = [sh.as_ptr(), std::ptr::null()];
        let envp = [std::ptr::null()];
        // SAFETY: NUL-terminated path and NULL-terminated argument and environment arrays.
        unsafe { libc::execve(sh.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
        eprintln!(
            "torpor: the forbidden execve returned: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Test-only (`crates/torpor/tests/confinement.rs`): with
/// `TORPOR_TEST_FORBIDDEN_CALL=control-socket` the control thread, once in its role, makes a
/// socket, as a compromised control thread would to reach out; its filter must kill the
/// process (the handlers' filter alone allows sockets).
pub fn control_test_hook() {
    if std::env::var("TORPOR_TEST_FORBIDDEN_CALL").as_deref() == Ok("control-socket") {
        // SAFETY: socket takes no pointers.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
        eprintln!(
            "torpor: the control thread's forbidden socket returned {fd}: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unprivileged_start() -> u16 {
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1024)
    }

    #[test]
    fn a_low_published_port_keeps_net_bind_service() {
        let start = unprivileged_start();
        if start == 0 {
            return; // every port is unprivileged on this host
        }
        let low: kernel::net::Publish = format!("127.0.0.1:{}:8080", start - 1).parse().unwrap();
        let high: kernel::net::Publish = format!("127.0.0.1:{start}:80").parse().unwrap();
        assert!(Needs::of(&[low], false).low_ports);
        // The guest port does not matter: the host binds the host port.
        assert!(!Needs::of(&[high], false).low_ports);
        assert!(!Needs::of(&[], false).low_ports);
        // In a namespace of its own the application binds its own ports.
        assert!(Needs::of(&[], true).low_ports);
        assert_eq!(
            Needs {
                low_ports: true,
                uffd_ptrace: true,
                dormancy: false,
            }
            .caps(),
            [CAP_NET_BIND_SERVICE, CAP_SYS_PTRACE]
        );
        assert!(Needs::default().caps().is_empty());
    }
}
