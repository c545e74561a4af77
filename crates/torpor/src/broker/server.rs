//! The broker process: confines itself, then makes each requested call on the descriptors
//! that came with it.

use std::ffi::CString;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use kernel::fs::{OpenHow, RESOLVE_IN_ROOT, RESOLVE_NO_MAGICLINKS};
use kernel::net::inet::{self, canonical};
use kernel::net::{host, unix};

use super::wire::{self, code, Request};

/// `torpor-broker FD PARENT ROOT [ADDR...]` (or `torpor __broker ...`): serves the holder `PARENT` on socket `FD` until
/// it goes, making sockets for the published host addresses `ADDR`. Never returns.
pub fn main(args: &[String]) -> ! {
    let parsed = parse(args);
    let parent = parsed.as_ref().map_or(0, |p| p.1);
    let code = exit_code(
        parsed.and_then(|(sock, parent, root, published)| serve(sock, parent, &root, published)),
        parent,
    );
    std::process::exit(code)
}

/// The broker's life in a child forked from a single-threaded holder (no exec: its memory
/// stays the holder's, shared copy-on-write): serves on `sock` until the holder goes and
/// returns the exit status.
pub fn forked(
    sock: OwnedFd,
    parent: i32,
    root: &std::path::Path,
    published: Vec<SocketAddr>,
) -> i32 {
    exit_code(serve(sock, parent, root, published), parent)
}

/// The broker's exit status. An error is said on standard error, unless the holder goes
/// within a second or two: then the holder failed first (its own error says why) and took
/// down what the broker was starting on (its root, removed with the state directory).
fn exit_code(r: anyhow::Result<()>, parent: i32) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            for _ in 0..if parent > 0 { 100 } else { 0 } {
                // SAFETY: getppid has no preconditions.
                if unsafe { libc::getppid() } != parent {
                    return 1;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            eprintln!("torpor: file broker: {e:#}");
            1
        }
    }
}

/// The arguments of `torpor __broker`.
fn parse(args: &[String]) -> anyhow::Result<(OwnedFd, i32, PathBuf, Vec<SocketAddr>)> {
    let [fd, parent, root, published @ ..] = args else {
        anyhow::bail!("usage: torpor-broker FD PARENT ROOT [ADDR...]");
    };
    let published: Vec<SocketAddr> = published
        .iter()
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let fd: RawFd = fd.parse()?;
    let parent: i32 = parent.parse()?;
    // SAFETY: the holder passed this descriptor to us alone; it is ours from here.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok((sock, parent, PathBuf::from(root), published))
}

fn serve(
    sock: OwnedFd,
    parent: i32,
    root: &std::path::Path,
    published: Vec<SocketAddr>,
) -> anyhow::Result<()> {
    // Ends with the holder: at the end of file of its socket, which the holder's exit (or
    // death) closes; and at once if it went before this started. (Not PR_SET_PDEATHSIG: that
    // follows the thread that started the broker, which need not live as long as its
    // process.)
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != parent {
        return Ok(());
    }
    // Modes arrive with the application's umask applied already (the holder's threads run
    // with umask 0 for the same reason): none of the runtime's on top.
    // SAFETY: umask has no preconditions; the broker is single-threaded.
    unsafe { libc::umask(0) };
    // Named in `ps` and `/proc/PID/comm` (a forked broker has its holder's command line).
    // SAFETY: prctl with a NUL-terminated name of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"torpor-broker".as_ptr(), 0, 0, 0) };
    // As `/proc/self/fd` links name files: canonical.
    let root = std::fs::canonicalize(root)?;
    let publish: Vec<kernel::net::Publish> = published
        .iter()
        .map(|&host| kernel::net::Publish {
            host,
            guest_port: host.port(),
        })
        .collect();
    let low_ports = crate::confine::Needs::of(&publish, false).low_ports;
    crate::confine::confine_broker(&root, low_ports)?;
    let policy = Policy {
        root,
        published,
        mount: None,
    };
    let mut caps = Caps::read().map_err(|e| anyhow::anyhow!("capget: {e}"))?;
    let mut buf = vec![0u8; wire::MAX_REQUEST];
    loop {
        let (n, fds) = match wire::recv(sock.as_fd(), &mut buf) {
            Ok((0, _)) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) => return Ok(()),
            Ok(r) => r,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                let _ = wire::send(sock.as_fd(), &(-i64::from(libc::E2BIG)).to_le_bytes(), &[]);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let (ret, opened) = answer(&buf[..n], fds, &policy, &mut caps);
        if !reply(sock.as_fd(), ret, opened.as_ref())? {
            return Ok(());
        }
    }
}

/// The answer to the request `bytes` that came with `fds`, made under `policy`: 0 or
/// -errno, and the descriptor the call opened.
pub(super) fn answer(
    bytes: &[u8],
    fds: Vec<OwnedFd>,
    policy: &Policy,
    caps: &mut Caps,
) -> (i64, Option<OwnedFd>) {
    match Request::from_bytes(bytes) {
        Some(req) => {
            let mut run = || {
                check_request(&req, &fds, policy)?;
                caps.use_only(req.caps)?;
                execute(&req, &fds)
            };
            match run() {
                Ok(opened) => (0i64, opened),
                Err(errno) => (-i64::from(errno), None),
            }
        }
        None => (-i64::from(libc::EINVAL), None),
    }
}

/// Sends the answer `ret` (and `opened`) on `sock`. Returns false when the holder is gone
/// (its end closed while we answered).
///
/// # Errors
/// Any other error of the send.
pub(super) fn reply(
    sock: BorrowedFd<'_>,
    ret: i64,
    opened: Option<&OwnedFd>,
) -> std::io::Result<bool> {
    let raw: Vec<RawFd> = opened.iter().map(|f| f.as_raw_fd()).collect();
    loop {
        match wire::send(sock, &ret.to_le_bytes(), &raw) {
            Ok(_) => return Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNRESET | libc::EPIPE)) => {
                return Ok(false)
            }
            Err(e) => return Err(e),
        }
    }
}

/// The broker's capability sets, and which file capabilities are effective now.
///
/// Each call may use only the file capabilities of the application it is made for (a root
/// whose configuration drops CAP_DAC_OVERRIDE is held to file modes): the broker keeps the
/// five in its permitted set and makes effective, per call, those the request names
/// (`capset`, only when they change). Its other capabilities (CAP_NET_BIND_SERVICE for a
/// low published port) stay effective.
pub(super) struct Caps {
    header: CapHeader,
    data: [CapData; 2],
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

impl Caps {
    /// The calling thread's sets.
    pub(super) fn read() -> std::io::Result<Caps> {
        let mut c = Caps {
            header: CapHeader {
                version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
                pid: 0,
            },
            data: [CapData::default(); 2],
        };
        // SAFETY: capget with a version-3 header and room for its two data structs.
        if unsafe { libc::syscall(libc::SYS_capget, &mut c.header, c.data.as_mut_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(c)
    }

    /// Makes effective, of the five file capabilities (bits 0-4), those of `file` only.
    fn use_only(&mut self, file: u8) -> Result<(), i32> {
        const FILE: u32 = 0x1f;
        let permitted = self.data[0].permitted;
        let want = (self.data[0].effective & !FILE) | (u32::from(file) & FILE & permitted);
        if want == self.data[0].effective {
            return Ok(());
        }
        let old = self.data[0].effective;
        self.data[0].effective = want;
        // SAFETY: capset of the calling thread with its own sets, effective narrowed or
        // widened within permitted.
        if unsafe { libc::syscall(libc::SYS_capset, &mut self.header, self.data.as_ptr()) } != 0 {
            self.data[0].effective = old;
            return Err(libc::EPERM);
        }
        Ok(())
    }
}

/// Refuses what Landlock does not cover: calls that change a file's metadata (owner, mode,
/// times, attributes: no Landlock right guards them) must name a file beneath the root (by
/// its descriptor, or as one plain component of a directory beneath the root, its last
/// symlink not followed), and not a device, socket or pipe of the host's.
fn check_request(req: &Request, fds: &[OwnedFd], policy: &Policy) -> Result<(), i32> {
    if let Some(mount) = policy.mount {
        on_the_sandboxs_mount(req, fds, mount)?;
    }
    let root = policy.root.as_path();
    let metadata_of = |k: usize, name: Option<&[u8]>| -> Result<(), i32> {
        let fd = fds.get(k).ok_or(libc::EBADF)?;
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map_err(|_| libc::EPERM)?;
        if !beneath(&link, root) {
            return Err(libc::EPERM);
        }
        match name {
            Some(n) if !n.is_empty() => plain_component(n),
            _ => {
                // The file itself: a file, directory or symlink, never a host device.
                let st = host::fstat(fd.as_fd()).map_err(|_| libc::EBADF)?;
                match st.st_mode & libc::S_IFMT {
                    libc::S_IFREG | libc::S_IFDIR | libc::S_IFLNK => Ok(()),
                    _ => Err(libc::EPERM),
                }
            }
        }
    };
    let nofollow = |flags: u64| -> Result<(), i32> {
        let f = flags as i32;
        if f & (libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH) == 0 {
            return Err(libc::EPERM);
        }
        Ok(())
    };
    match req.op {
        code::FCHOWNAT => {
            nofollow(req.ints[2])?;
            metadata_of(0, Some(&req.strs[0]))
        }
        code::UTIMENSAT => {
            nofollow(req.ints[4])?;
            metadata_of(0, Some(&req.strs[0]))
        }
        code::CHMOD | code::SETXATTR | code::REMOVEXATTR => metadata_of(0, None),
        code::BIND_INET | code::CONNECT_INET => {
            let addr = inet_addr(req)?;
            // (An IPv6 socket's address of a published IPv4 one is its IPv4-mapped form.)
            let ok = if req.op == code::BIND_INET {
                policy
                    .published
                    .iter()
                    .any(|&p| canonical(p) == canonical(addr))
            } else {
                policy.reaches(canonical(addr))
            };
            if !ok {
                return Err(libc::EACCES);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// What the node's broker checks that Landlock checks for a sandbox's own broker: every
/// descriptor of a request (but a Unix socket to bind) is on the sandbox's root mount, the
/// mount the holder registered (`mount`, its unique id), and each name a call resolves from
/// one is a plain component, so that no call reaches above the root (the `..` of the root
/// of a mount is its parent mount's). `openat2` resolves its path in the root
/// (`RESOLVE_IN_ROOT`) and may take any.
fn on_the_sandboxs_mount(req: &Request, fds: &[OwnedFd], mount: u64) -> Result<(), i32> {
    let skip = usize::from(req.op == code::BIND_UNIX);
    for fd in fds.iter().skip(skip) {
        if mount_of(fd.as_fd()) != Some(mount) {
            return Err(libc::EPERM);
        }
    }
    if skip == 1 {
        let sock = fds.first().ok_or(libc::EBADF)?;
        let st = host::fstat(sock.as_fd()).map_err(|_| libc::EBADF)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return Err(libc::EPERM);
        }
    }
    let names: &[usize] = match req.op {
        code::MKDIRAT | code::MKNODAT | code::UNLINKAT | code::BIND_UNIX => &[0],
        code::RENAMEAT2 => &[0, 1],
        code::SYMLINKAT => &[1],
        // An empty old name is the descriptor itself (AT_EMPTY_PATH).
        code::LINKAT if req.strs[0].is_empty() => &[1],
        code::LINKAT => &[0, 1],
        // Their names are checked with the metadata calls' rules (`check_request`).
        _ => &[],
    };
    for &k in names {
        plain_component(&req.strs[k])?;
    }
    Ok(())
}

/// The unique id of the mount `fd` is on (`statx`, Linux 6.8).
pub(super) fn mount_of(fd: BorrowedFd<'_>) -> Option<u64> {
    mount_and_root(fd).map(|(m, _)| m)
}

/// The unique id of the mount `fd` is on, and whether `fd` is that mount's root.
pub(super) fn mount_and_root(fd: BorrowedFd<'_>) -> Option<(u64, bool)> {
    // SAFETY: an all-zero statx is a valid value of the plain C struct.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx on a descriptor we hold, with an empty path and AT_EMPTY_PATH, into a
    // local buffer.
    let r = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_MNT_ID_UNIQUE,
            &mut stx,
        )
    };
    if r != 0 || stx.stx_mask & libc::STATX_MNT_ID_UNIQUE == 0 {
        return None;
    }
    let root = stx.stx_attributes_mask & libc::STATX_ATTR_MOUNT_ROOT as u64 != 0
        && stx.stx_attributes & libc::STATX_ATTR_MOUNT_ROOT as u64 != 0;
    Some((stx.stx_mnt_id, root))
}

/// What the broker may do beside files: the published host addresses it binds and connects;
/// for the node's broker, the sandbox's root mount every descriptor must be on.
pub(super) struct Policy {
    pub(super) root: PathBuf,
    pub(super) published: Vec<SocketAddr>,
    pub(super) mount: Option<u64>,
}

impl Policy {
    /// Whether a connect to `addr` reaches the sandbox's own published listener: a published
    /// address, or the loopback address of a published wildcard one.
    fn reaches(&self, addr: SocketAddr) -> bool {
        self.published.iter().map(|&p| canonical(p)).any(|p| {
            p == addr
                || (p.ip().is_unspecified()
                    && p.port() == addr.port()
                    && p.is_ipv4() == addr.is_ipv4()
                    && addr.ip().is_loopback())
        })
    }
}

/// The address of a socket request, checked against its family; a stream or datagram type.
fn inet_addr(req: &Request) -> Result<SocketAddr, i32> {
    let addr: SocketAddr = std::str::from_utf8(&req.strs[0])
        .ok()
        .and_then(|a| a.parse().ok())
        .ok_or(libc::EINVAL)?;
    let family = req.ints[0] as i32;
    let fits =
        (family == libc::AF_INET && addr.is_ipv4()) || (family == libc::AF_INET6 && addr.is_ipv6());
    let kind = req.ints[1] as i32;
    if !fits || !(kind == libc::SOCK_STREAM || kind == libc::SOCK_DGRAM) {
        return Err(libc::EINVAL);
    }
    Ok(addr)
}

/// [`code::BIND_INET`] and [`code::CONNECT_INET`]: the new socket.
fn inet_socket(req: &Request) -> Result<OwnedFd, i32> {
    let addr = inet_addr(req)?;
    let (family, kind) = (req.ints[0] as i32, req.ints[1] as i32);
    let errno = |e: abi::Errno| e.0;
    let sock = host::socket(family, kind, false, 0).map_err(errno)?;
    let fd = sock.as_fd();
    let raw = inet::encode_sockaddr(&addr);
    if req.op == code::BIND_INET {
        // A restarted server rebinds while old connections linger.
        host::set_int_opt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1).map_err(errno)?;
        if family == libc::AF_INET6 && req.ints[2] != 0 {
            host::set_int_opt(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1).map_err(errno)?;
        }
        if req.ints[3] != 0 {
            host::set_int_opt(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1).map_err(errno)?;
        }
        host::bind(fd, &raw).map_err(errno)?;
    } else {
        // A loopback connect to a listener completes at once.
        host::connect(fd, &raw).map_err(errno)?;
    }
    Ok(sock)
}

/// Whether host path `p` is `root` or beneath it.
fn beneath(p: &std::path::Path, root: &std::path::Path) -> bool {
    p.starts_with(root)
}

/// One path component, not `.` or `..` (trailing slashes allowed).
fn plain_component(n: &[u8]) -> Result<(), i32> {
    let trimmed = n.strip_suffix(b"/").unwrap_or(n);
    let bare = trimmed
        .iter()
        .rposition(|&b| b != b'/')
        .map_or(&b""[..], |i| &trimmed[..=i]);
    if bare.is_empty() || bare == b"." || bare == b".." || bare.contains(&b'/') {
        return Err(libc::EPERM);
    }
    Ok(())
}

/// A NUL-free string argument as a C string.
fn cstr(b: &[u8]) -> Result<CString, i32> {
    CString::new(b).map_err(|_| libc::EINVAL)
}

/// `/proc/self/fd/<fd>`, and `/<name>` after it when given.
fn proc_path(fd: BorrowedFd<'_>, name: Option<&[u8]>) -> Result<CString, i32> {
    let mut p = format!("/proc/self/fd/{}", fd.as_raw_fd()).into_bytes();
    if let Some(n) = name {
        p.push(b'/');
        p.extend_from_slice(n);
    }
    cstr(&p)
}

fn check(r: libc::c_long) -> Result<(), i32> {
    if r < 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    Ok(())
}

/// Makes the call `req` names on `fds`: the descriptor it opened, if any, or its errno.
fn execute(req: &Request, fds: &[OwnedFd]) -> Result<Option<OwnedFd>, i32> {
    let fd = |k: usize| fds.get(k).map(|f| f.as_fd()).ok_or(libc::EBADF);
    let int = |k: usize| req.ints[k];
    let s = |k: usize| req.strs[k].as_slice();
    // SAFETY: every call below takes descriptors received with the request, NUL-terminated
    // strings built here and plain integers (the host checks everything else); the one fd
    // taken into an OwnedFd is fresh from openat2.
    unsafe {
        match req.op {
            code::BIND_INET | code::CONNECT_INET => return inet_socket(req).map(Some),
            code::OPENAT2 => {
                let path = cstr(s(0))?;
                // Never blocking: the broker serves one call at a time, and a FIFO without a
                // partner would hold it (and every handler waiting for it) forever. A
                // blocking open of a FIFO's read end returns at once instead of waiting for
                // a writer; of its write end, ENXIO while no reader is there. The returned
                // descriptor is blocking again if the call asked so.
                let asked = int(0) as u32;
                // (An O_PATH descriptor opens nothing: openat2 takes no other flag with it.)
                let nonblock = if asked & libc::O_PATH as u32 == 0 {
                    libc::O_NONBLOCK as u32
                } else {
                    0
                };
                let how = OpenHow {
                    flags: u64::from(asked | libc::O_CLOEXEC as u32 | nonblock),
                    mode: int(1) & 0o7777,
                    resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
                };
                let r = libc::syscall(
                    libc::SYS_openat2,
                    fd(0)?.as_raw_fd(),
                    path.as_ptr(),
                    &how as *const OpenHow,
                    std::mem::size_of::<OpenHow>(),
                );
                check(r)?;
                let opened = OwnedFd::from_raw_fd(r as RawFd);
                if nonblock != 0 && asked & libc::O_NONBLOCK as u32 == 0 {
                    let fl = libc::fcntl(opened.as_raw_fd(), libc::F_GETFL);
                    check(fl.into())?;
                    check(
                        libc::fcntl(opened.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK)
                            .into(),
                    )?;
                }
                return Ok(Some(opened));
            }
            code::MKDIRAT => {
                let name = cstr(s(0))?;
                check(libc::mkdirat(fd(0)?.as_raw_fd(), name.as_ptr(), int(0) as u32).into())?;
            }
            code::MKNODAT => {
                let name = cstr(s(0))?;
                let mode = int(0) as u32;
                // Only what the holder makes: files, FIFOs and sockets, never devices.
                if !matches!(
                    mode & libc::S_IFMT,
                    0 | libc::S_IFREG | libc::S_IFIFO | libc::S_IFSOCK
                ) {
                    return Err(libc::EPERM);
                }
                check(libc::mknodat(fd(0)?.as_raw_fd(), name.as_ptr(), mode, int(1)).into())?;
            }
            code::UNLINKAT => {
                let name = cstr(s(0))?;
                check(libc::unlinkat(fd(0)?.as_raw_fd(), name.as_ptr(), int(0) as i32).into())?;
            }
            code::RENAMEAT2 => {
                let (old, new) = (cstr(s(0))?, cstr(s(1))?);
                check(
                    libc::renameat2(
                        fd(0)?.as_raw_fd(),
                        old.as_ptr(),
                        fd(1)?.as_raw_fd(),
                        new.as_ptr(),
                        int(0) as u32,
                    )
                    .into(),
                )?;
            }
            code::LINKAT => {
                let (old, new) = (cstr(s(0))?, cstr(s(1))?);
                check(
                    libc::linkat(
                        fd(0)?.as_raw_fd(),
                        old.as_ptr(),
                        fd(1)?.as_raw_fd(),
                        new.as_ptr(),
                        int(0) as i32,
                    )
                    .into(),
                )?;
            }
            code::SYMLINKAT => {
                let (target, name) = (cstr(s(0))?, cstr(s(1))?);
                check(libc::symlinkat(target.as_ptr(), fd(0)?.as_raw_fd(), name.as_ptr()).into())?;
            }
            code::FCHOWNAT => {
                let name = cstr(s(0))?;
                check(
                    libc::fchownat(
                        fd(0)?.as_raw_fd(),
                        name.as_ptr(),
                        int(0) as u32,
                        int(1) as u32,
                        int(2) as i32,
                    )
                    .into(),
                )?;
            }
            code::CHMOD => {
                let p = proc_path(fd(0)?, None)?;
                check(
                    libc::fchmodat(libc::AT_FDCWD, p.as_ptr(), int(0) as u32 & 0o7777, 0).into(),
                )?;
            }
            code::UTIMENSAT => {
                let name = cstr(s(0))?;
                let times = [
                    libc::timespec {
                        tv_sec: int(0) as i64,
                        tv_nsec: int(1) as i64,
                    },
                    libc::timespec {
                        tv_sec: int(2) as i64,
                        tv_nsec: int(3) as i64,
                    },
                ];
                check(
                    libc::utimensat(
                        fd(0)?.as_raw_fd(),
                        name.as_ptr(),
                        times.as_ptr(),
                        int(4) as i32,
                    )
                    .into(),
                )?;
            }
            code::SETXATTR => {
                let p = proc_path(fd(0)?, None)?;
                let name = cstr(s(0))?;
                let v = s(1);
                check(
                    libc::setxattr(
                        p.as_ptr(),
                        name.as_ptr(),
                        v.as_ptr().cast(),
                        v.len(),
                        int(0) as i32,
                    )
                    .into(),
                )?;
            }
            code::REMOVEXATTR => {
                let p = proc_path(fd(0)?, None)?;
                let name = cstr(s(0))?;
                check(libc::removexattr(p.as_ptr(), name.as_ptr()).into())?;
            }
            code::BIND_UNIX => {
                let p = proc_path(fd(1)?, Some(s(0)))?;
                if p.as_bytes().len() >= unix::SUN_PATH_MAX {
                    return Err(libc::ENAMETOOLONG);
                }
                host::bind(fd(0)?, &unix::sockaddr(p.as_bytes())).map_err(|e| e.0)?;
            }
            _ => return Err(libc::ENOSYS),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn metadata_calls_stay_beneath_the_root() {
        let root = Path::new("/state/b1/root/merged");
        assert!(beneath(Path::new("/state/b1/root/merged"), root));
        assert!(beneath(Path::new("/state/b1/root/merged/etc/passwd"), root));
        assert!(!beneath(Path::new("/state/b1/root/merged2/x"), root));
        assert!(!beneath(Path::new("/dev/kvm"), root));
        assert!(!beneath(Path::new("/etc/passwd"), root));
        for ok in [&b"file"[..], b"dir/", b"a.b", b"..."] {
            assert_eq!(plain_component(ok), Ok(()), "{ok:?}");
        }
        for bad in [&b"."[..], b"..", b"../x", b"a/b", b"", b"/", b"../"] {
            assert_eq!(plain_component(bad), Err(libc::EPERM), "{bad:?}");
        }
    }

    #[test]
    fn metadata_calls_on_host_files_are_refused() {
        let root = std::env::temp_dir().join(format!("broker-root-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let inside = std::fs::File::create(root.join("f")).unwrap();
        let policy = Policy {
            root: root.clone(),
            published: vec![],
            mount: None,
        };
        let outside = std::fs::File::open("/dev/null").unwrap();
        let chmod = |f: &std::fs::File| {
            let op = kernel::broker::Op::Chmod {
                file: f.as_fd(),
                mode: 0o600,
            };
            let req = super::super::wire::encode(&op, 0x1f).0;
            check_request(&req, &[OwnedFd::from(f.try_clone().unwrap())], &policy)
        };
        assert_eq!(chmod(&inside), Ok(()));
        assert_eq!(chmod(&outside), Err(libc::EPERM));
        // A name that follows its symlink, or climbs out: refused.
        let dir = std::fs::File::open(&root).unwrap();
        for (name, flags) in [(&b"f"[..], 0), (&b".."[..], libc::AT_SYMLINK_NOFOLLOW)] {
            let op = kernel::broker::Op::FchownAt {
                dir: dir.as_fd(),
                name,
                uid: 1,
                gid: 1,
                flags,
            };
            let req = super::super::wire::encode(&op, 0x1f).0;
            let fds = [OwnedFd::from(dir.try_clone().unwrap())];
            assert_eq!(
                check_request(&req, &fds, &policy),
                Err(libc::EPERM),
                "{name:?}"
            );
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn sockets_only_for_published_addresses() {
        let policy = Policy {
            root: PathBuf::from("/nonexistent"),
            mount: None,
            published: vec![
                "127.0.0.1:18080".parse().unwrap(),
                "0.0.0.0:9000".parse().unwrap(),
            ],
        };
        let req = |op: kernel::broker::Op<'_>| super::super::wire::encode(&op, 0x1f).0;
        let bind = |a: &str| {
            req(kernel::broker::Op::BindInet {
                family: libc::AF_INET,
                kind: libc::SOCK_STREAM,
                addr: a.parse().unwrap(),
                v6only: false,
                reuseport: false,
            })
        };
        let connect = |a: &str| {
            req(kernel::broker::Op::ConnectInet {
                family: libc::AF_INET,
                kind: libc::SOCK_STREAM,
                addr: a.parse().unwrap(),
            })
        };
        let check = |r: &Request| check_request(r, &[], &policy);
        assert_eq!(check(&bind("127.0.0.1:18080")), Ok(()));
        assert_eq!(check(&bind("0.0.0.0:9000")), Ok(()));
        assert_eq!(check(&bind("127.0.0.1:22")), Err(libc::EACCES));
        assert_eq!(check(&bind("127.0.0.1:9000")), Err(libc::EACCES));
        let mut mapped = bind("[::ffff:127.0.0.1]:18080");
        mapped.ints[0] = libc::AF_INET6 as u64;
        assert_eq!(check(&mapped), Ok(()), "a dual-stack socket's bind");
        assert_eq!(check(&connect("127.0.0.1:18080")), Ok(()));
        assert_eq!(check(&connect("127.0.0.1:9000")), Ok(()));
        assert_eq!(check(&connect("10.0.0.1:9000")), Err(libc::EACCES));
        assert_eq!(check(&connect("127.0.0.1:5432")), Err(libc::EACCES));
        // A family that does not fit the address: refused.
        let mut v6 = bind("127.0.0.1:18080");
        v6.ints[0] = libc::AF_INET6 as u64;
        assert_eq!(check(&v6), Err(libc::EINVAL));
    }
}
