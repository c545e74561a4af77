//! The host identity a holder thread makes a task's file calls with.
//!
//! Files are opened, created, changed and removed by the host kernel on the task's behalf,
//! so the host kernel is also what checks the task's right to do so: for the length of a
//! file call ([`act_as`]), the holder thread takes the task's filesystem user and group ids
//! and supplementary groups (`setfsuid`, `setfsgid`, `setgroups`, each a per-thread call at
//! the host's level). The host then applies Linux's own rules to every directory searched on
//! the way and to the file itself (modes, owners, ACLs, sticky and set-group-ID directories,
//! `O_NOATIME`, `utimes`, hard-link protection), and gives new files the task's ids, as it
//! would to the same program run natively.
//!
//! The holder itself keeps no file capability (docs/SECURITY.md): a task whose capabilities
//! would override a check (root's CAP_DAC_OVERRIDE and its kin) has its refused call made
//! again by the file broker with those of its capabilities only ([`broker_caps`],
//! `crate::broker`).
//!
//! A holder that is not root in its user namespace cannot take other ids: it then makes the
//! calls with its own (warned once), which is what a rootless runtime's user may do anyway.
//! A holder that is root but cannot take a task's ids (not mapped in its user namespace)
//! refuses the call with EACCES rather than make it as itself.
//!
//! Taking ids costs host calls (two to take them, two to give them back), so the syscall
//! dispatcher keeps a task's ids on its thread from one file call to the next
//! ([`become_task`]) and gives them back only before work of the runtime's own that opens
//! host paths on that thread ([`become_runtime`]: a new VM's `/dev/kvm`, a shared object's
//! reopening, the deflate's and the checkpoint's files): the calls of
//! `syscalls::table::needs_runtime_identity`, and the park. Any other call a task makes opens
//! no host path. [`act_as`] is the scoped form, for a part of a call.

use std::cell::{Cell, RefCell};
use std::sync::OnceLock;

use abi::Errno;

use crate::creds::Credentials;

/// The runtime's own filesystem identity, read once.
struct Runtime {
    uid: u32,
    gid: u32,
    /// Root in its user namespace: it may take other ids (CAP_SETUID and CAP_SETGID kept).
    root: bool,
}

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        // SAFETY: geteuid/getegid have no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Runtime {
            uid,
            gid,
            root: uid == 0,
        }
    })
}

thread_local! {
    /// The filesystem ids in force on this host thread (None: the runtime's own).
    static CURRENT: Cell<Option<(u32, u32)>> = const { Cell::new(None) };
    /// The supplementary groups installed on this host thread (None: the runtime's own).
    static GROUPS: RefCell<Option<Vec<u32>>> = const { RefCell::new(None) };
    /// The filesystem ids this thread has taken and checked once.
    static VERIFIED: Cell<Option<(u32, u32)>> = const { Cell::new(None) };
    /// The broker capabilities of the task this thread acts for (None: the runtime itself).
    static ACTING: Cell<Option<u8>> = const { Cell::new(None) };
}

/// While alive, the calling host thread makes file calls as a task (see [`act_as`]); dropped,
/// the thread acts as before (the runtime, or the task of an enclosing guard).
#[must_use = "the identity lasts as long as the guard"]
pub struct Acting {
    /// The filesystem ids to put back, if they were changed.
    restore: Option<Option<(u32, u32)>>,
    previous: Option<u8>,
}

impl Drop for Acting {
    fn drop(&mut self) {
        if let Some(ids) = self.restore {
            let rt = runtime();
            let (uid, gid) = ids.unwrap_or((rt.uid, rt.gid));
            set_fs_ids(uid, gid);
            CURRENT.with(|c| c.set(ids));
        }
        ACTING.with(|a| a.set(self.previous));
    }
}

/// Makes the calling host thread act as `creds` for file calls until the guard is dropped:
/// its filesystem ids and groups become the task's, and a broker retry may use only the
/// task's file capabilities.
///
/// # Errors
/// EACCES if the host refuses the task's ids to a root holder (ids not mapped in its user
/// namespace): the call must not be made as the runtime.
pub fn act_as(creds: &Credentials) -> Result<Acting, Errno> {
    let previous = ACTING.with(|a| a.replace(Some(creds.broker_caps())));
    let rt = runtime();
    let mut guard = Acting {
        restore: None,
        previous,
    };
    let now = CURRENT.with(Cell::get);
    let want = (creds.fsuid, creds.fsgid);
    let want_cell = if want == (rt.uid, rt.gid) {
        None
    } else {
        Some(want)
    };
    if now == want_cell && (want_cell.is_none() || installed_groups_are(&creds.groups)) {
        return Ok(guard);
    }
    if !rt.root {
        warn_once_rootless();
        return Ok(guard);
    }
    if want_cell.is_some() {
        install_groups(&creds.groups)?;
    }
    guard.restore = Some(now);
    set_fs_ids(want.0, want.1);
    CURRENT.with(|c| c.set(want_cell));
    if want_cell.is_some() && VERIFIED.with(Cell::get) != Some(want) {
        // setfsuid never fails: it answers the previous id. Asking with an invalid one tells
        // the id now in force.
        // SAFETY: setfsuid/setfsgid with -1 change nothing.
        let got = unsafe {
            (
                libc::syscall(libc::SYS_setfsuid, -1i32) as u32,
                libc::syscall(libc::SYS_setfsgid, -1i32) as u32,
            )
        };
        if got != want {
            tracing::warn!(
                "the host refused ids {}:{} to this thread: the sandbox's file call is refused",
                want.0,
                want.1
            );
            return Err(Errno::EACCES);
        }
        VERIFIED.with(|v| v.set(Some(want)));
    }
    Ok(guard)
}

fn installed_groups_are(groups: &[u32]) -> bool {
    GROUPS.with(|g| g.borrow().as_deref() == Some(groups))
}

/// Whether `creds` may access the file open on `fd` with `mode` (`R_OK`, `W_OK`, `X_OK`
/// bits; Linux's `inode_permission`), for calls that check a right without opening for it
/// (access, chdir, execve). The caller acts as `creds` ([`act_as`]): the host checks mode
/// bits and ACLs; the task's capabilities, which the holder lacks, then override as
/// `generic_permission` lets them (CAP_DAC_OVERRIDE: read and write always, execute where any
/// execute bit is set or a directory; CAP_DAC_READ_SEARCH: read, and search directories).
///
/// # Errors
/// EACCES when refused; the host's errno when it cannot tell (EROFS for writing a read-only
/// file system).
pub fn permits(
    fd: std::os::fd::BorrowedFd<'_>,
    creds: &Credentials,
    mode: i32,
) -> Result<(), Errno> {
    use crate::creds::cap;
    use std::os::fd::AsRawFd;
    // SAFETY: an all-zero stat is valid; fstat fills it from a valid fd.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and a writable stat.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(Errno::last());
    }
    let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
    let any_x = st.st_mode & 0o111 != 0;
    for want in [libc::R_OK, libc::W_OK, libc::X_OK] {
        if mode & want == 0 {
            continue;
        }
        // SAFETY: a valid descriptor and an empty NUL-terminated path with AT_EMPTY_PATH.
        let r = unsafe {
            libc::syscall(
                libc::SYS_faccessat2,
                fd.as_raw_fd(),
                c"".as_ptr(),
                want,
                libc::AT_EACCESS | libc::AT_EMPTY_PATH,
            )
        };
        if r == 0 {
            continue;
        }
        let e = Errno::last();
        if e != Errno::EACCES {
            return Err(e);
        }
        let overridden = match want {
            libc::R_OK => creds.capable(cap::DAC_OVERRIDE) || creds.capable(cap::DAC_READ_SEARCH),
            libc::W_OK => creds.capable(cap::DAC_OVERRIDE),
            _ => {
                (creds.capable(cap::DAC_OVERRIDE) && (is_dir || any_x))
                    || (is_dir && creds.capable(cap::DAC_READ_SEARCH))
            }
        };
        if !overridden {
            return Err(Errno::EACCES);
        }
    }
    Ok(())
}

/// Keeps the calling thread acting as `creds` for file calls after the call that made it so
/// (see the module doc): [`act_as`] whose guard gives back the task's capabilities for broker
/// retries but leaves its ids installed.
///
/// # Errors
/// As [`act_as`].
pub fn become_task(creds: &Credentials) -> Result<CapsGuard, Errno> {
    let acting = act_as(creds)?;
    let previous = acting.previous;
    // Neither the ids (giving them back is `become_runtime`'s) nor the capabilities (the
    // returned guard's) are given back here.
    std::mem::forget(acting);
    Ok(CapsGuard { previous })
}

/// Gives the calling thread the runtime's filesystem ids back, if a task's are installed.
pub fn become_runtime() {
    if CURRENT.with(Cell::get).is_some() {
        let rt = runtime();
        set_fs_ids(rt.uid, rt.gid);
        CURRENT.with(|c| c.set(None));
    }
}

/// While alive, a broker retry on the calling thread may use the capabilities of the task
/// [`become_task`] was given; dropped, those of the thread's previous actor.
#[must_use = "the task's capabilities last as long as the guard"]
pub struct CapsGuard {
    previous: Option<u8>,
}

impl Drop for CapsGuard {
    fn drop(&mut self) {
        ACTING.with(|a| a.set(self.previous));
    }
}

/// The file capabilities a broker retry may use on the calling thread: those of the task it
/// acts for, or all of them when it acts for the runtime itself (setting a sandbox up,
/// restoring a checkpoint).
pub fn broker_caps() -> u8 {
    ACTING
        .with(Cell::get)
        .unwrap_or(crate::creds::BROKER_CAPS as u8)
}

/// Sets the calling thread's filesystem ids (the raw calls: per thread, never broadcast).
fn set_fs_ids(uid: u32, gid: u32) {
    // SAFETY: setfsuid/setfsgid change only the calling thread's filesystem ids.
    unsafe {
        libc::syscall(libc::SYS_setfsgid, gid);
        libc::syscall(libc::SYS_setfsuid, uid);
    }
}

/// Installs `groups` as the calling thread's supplementary groups unless they already are.
/// They stay installed after the call: the runtime's own file calls are made as the owner
/// (root) of what they touch, where groups do not count.
fn install_groups(groups: &[u32]) -> Result<(), Errno> {
    GROUPS.with(|g| {
        let mut g = g.borrow_mut();
        if g.as_deref() == Some(groups) {
            return Ok(());
        }
        // SAFETY: the raw setgroups changes the calling thread's groups only (glibc's wrapper
        // would broadcast it to every thread); `groups` is a valid array of its length.
        let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
        if r != 0 {
            let e = Errno::last();
            tracing::warn!("setgroups for a sandbox's file call: {e}");
            return Err(Errno::EACCES);
        }
        *g = Some(groups.to_vec());
        Ok(())
    })
}

fn warn_once_rootless() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::warn!(
            "the runtime is not root: the sandbox's users share its file access (permissions \
             between them are not enforced)"
        );
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on a thread of its own (identities are per thread).
    fn on_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().expect("thread")
    }

    #[test]
    fn a_task_of_the_runtimes_ids_changes_nothing() {
        on_thread(|| {
            let rt = runtime();
            let mut c = Credentials::new(rt.uid, rt.gid, vec![]);
            c.caps.effective = 0;
            let g = act_as(&c).unwrap();
            assert_eq!(
                broker_caps(),
                0,
                "a task without capabilities gets no broker"
            );
            assert!(g.restore.is_none());
            drop(g);
            assert_eq!(broker_caps(), crate::creds::BROKER_CAPS as u8);
        });
    }

    #[test]
    fn a_task_keeps_its_ids_and_capabilities_until_the_runtime_takes_them_back() {
        if runtime().uid != 0 {
            eprintln!("skipped: needs root to take other ids");
            return;
        }
        on_thread(|| {
            let nobody = Credentials::new(65534, 65534, vec![]);
            let fsuid = || {
                // SAFETY: setfsuid with -1 changes nothing and answers the id in force.
                unsafe { libc::syscall(libc::SYS_setfsuid, -1i32) as u32 }
            };
            {
                let _caps = become_task(&nobody).unwrap();
                assert_eq!(broker_caps(), 0, "nobody has no file capability");
                assert_eq!(fsuid(), 65534);
            }
            assert_eq!(fsuid(), 65534, "the ids stay for the next file call");
            become_runtime();
            assert_eq!(fsuid(), 0);
            assert_eq!(broker_caps(), crate::creds::BROKER_CAPS as u8);
        });
    }

    #[test]
    fn an_unprivileged_task_is_refused_what_its_user_may_not_do() {
        if runtime().uid != 0 {
            eprintln!("skipped: needs root to take other ids");
            return;
        }
        on_thread(|| {
            let dir = std::env::temp_dir().join(format!("torpor-identity-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let secret = dir.join("secret");
            std::fs::write(&secret, b"x").unwrap();
            std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
            let nobody = Credentials::new(65534, 65534, vec![]);
            {
                let _g = act_as(&nobody).unwrap();
                let e = std::fs::read(&secret).unwrap_err();
                assert_eq!(e.raw_os_error(), Some(libc::EACCES));
                // What it creates is its own.
                let mine = dir.join("mine");
                let e = std::fs::write(&mine, b"y").unwrap_err();
                assert_eq!(
                    e.raw_os_error(),
                    Some(libc::EACCES),
                    "root's 0755 directory"
                );
            }
            // Back to the runtime's identity.
            assert_eq!(std::fs::read(&secret).unwrap(), b"x");
            std::fs::remove_dir_all(&dir).unwrap();
        });
    }
}
