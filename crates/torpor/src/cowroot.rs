//! A sandbox's copy-on-write root: an overlay of the image directory, private to the holder
//! process.
//!
//! `torpor run ROOTFS` must never modify ROOTFS, and two sandboxes started from one ROOTFS must
//! never see each other's files. [`prepare`] gives the calling process its own mount namespace
//! and mounts there an overlayfs whose lower layer is the image and whose upper layer (where every
//! write of the sandbox goes) lives in a directory of the sandbox's own, normally inside its state
//! directory:
//!
//! ```text
//! LAYER_DIR/upper    the sandbox's writes, deletions (whiteouts) and copied-up files
//! LAYER_DIR/work     overlayfs's scratch directory (holds a mode-000 `work/work`)
//! LAYER_DIR/merged   the mount point: the root the sandbox must use
//! ```
//!
//! The mount exists only in the holder's namespace: other processes on the host see `merged` as
//! an empty directory, and the mount goes away by itself when the holder (and anything it forked)
//! has exited. The layer directory is then plain files; [`remove_all`] removes it (or the whole
//! state directory), also without root.
//!
//! Ordering at the end of a sandbox: unmount first ([`CowRoot::unmount`], dropping the
//! [`CowRoot`], or the holder's exit), then remove. A `remove_dir_all` of the state directory
//! from inside the holder while the overlay is still mounted would walk into `merged` and delete
//! the sandbox's whole visible tree through the overlay (harmless to the image, but slow, and
//! it fails at the end with `EBUSY`); [`remove_all`] refuses that case instead.

use std::ffi::{CString, OsString};
use std::fs::DirBuilder;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// An overlay mounted on `LAYER_DIR/merged` in this process's private mount namespace.
///
/// Dropping it unmounts the overlay (lazily, `MNT_DETACH`: files still open in it stay usable),
/// so keep it alive as long as the sandbox runs; the process's exit unmounts it as well.
#[must_use = "dropping a CowRoot unmounts the sandbox's root"]
#[derive(Debug)]
// Accessors used by the tests and kept for callers that inspect a layer.
#[allow(dead_code)]
pub struct CowRoot {
    lower: PathBuf,
    layer_dir: PathBuf,
    upper: PathBuf,
    merged: PathBuf,
    user_namespace: bool,
    mounted: bool,
}

#[allow(dead_code)]
impl CowRoot {
    /// The merged view (image + this sandbox's writes): the path the sandbox must use as its root.
    pub fn merged(&self) -> &Path {
        &self.merged
    }

    /// The upper directory, which holds everything the sandbox changed.
    pub fn upper(&self) -> &Path {
        &self.upper
    }

    /// The (canonical) image directory, never written.
    pub fn lower(&self) -> &Path {
        &self.lower
    }

    /// The (canonical) layer directory holding `upper`, `work` and `merged`.
    pub fn layer_dir(&self) -> &Path {
        &self.layer_dir
    }

    /// Whether [`prepare`] had to enter a user namespace of its own (not running with
    /// `CAP_SYS_ADMIN`): the process then has a different user namespace from the host's.
    pub fn in_user_namespace(&self) -> bool {
        self.user_namespace
    }

    /// Unmounts the overlay (`umount2(MNT_DETACH)`): `merged` is an empty directory again, in this
    /// process as everywhere. The layer directory stays; remove it with [`remove_all`].
    pub fn unmount(mut self) -> Result<()> {
        self.mounted = false;
        detach(&self.merged)
    }

    /// Leaves the overlay mounted when this value goes: another process of the mount
    /// namespace (the sandbox's janitor) unmounts it.
    pub fn disown(mut self) {
        self.mounted = false;
    }
}

/// Unmounts the overlay on `merged` (`umount2(MNT_DETACH)`), as [`CowRoot::unmount`] does,
/// from a process that does not hold the [`CowRoot`] (the janitor).
///
/// # Errors
/// If `umount2` fails.
pub fn unmount_path(merged: &Path) -> Result<()> {
    detach(merged)
}

impl Drop for CowRoot {
    fn drop(&mut self) {
        if self.mounted {
            if let Err(e) = detach(&self.merged) {
                tracing::warn!("{e:#}");
            }
        }
    }
}

fn detach(merged: &Path) -> Result<()> {
    let c = cstring(merged)?;
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(io::Error::last_os_error())
            .with_context(|| format!("unmounting the copy-on-write root {}", merged.display()));
    }
    Ok(())
}

/// Gives the calling process a private mount namespace and mounts there a copy-on-write view of
/// `lower` on `layer_dir/merged`, with the writes in `layer_dir/upper`; returns it.
///
/// Steps: `lower` and `layer_dir` are resolved (`layer_dir` is created, mode 0700, if missing);
/// `layer_dir/{upper,work,merged}` are created fresh (mode 0700; `upper` then takes the mode and,
/// as root, the owner of `lower`'s top directory, which is what the sandbox sees as `/`); then
/// `unshare(CLONE_NEWNS)`, `mount(NULL, "/", MS_REC|MS_PRIVATE)` (nothing propagates to or from
/// the host) and `mount("overlay", merged, "overlay", "lowerdir=…,upperdir=…,workdir=…")`.
///
/// # Preconditions
///
/// **The process must be single-threaded** (checked: an error otherwise). `unshare(CLONE_NEWNS)`
/// succeeds in a multi-threaded process but moves only the calling thread: the other threads
/// would keep the host's namespace and see an empty `merged` (and `CLONE_NEWUSER`, used without
/// privilege, fails there with `EINVAL`). Threads started afterwards inherit the namespace of
/// the thread that starts them. So call this early in the holder, before any thread is spawned.
///
/// # Privileges
///
/// With `CAP_SYS_ADMIN` (root) the overlay is an ordinary one. Without it (`EPERM`), the process
/// enters a user namespace of its own as well (`CLONE_NEWUSER|CLONE_NEWNS`, its own uid and gid
/// mapped to themselves, `setgroups` denied) and mounts the overlay with `userxattr`. That needs
/// Linux ≥ 5.11 and unprivileged user namespaces; files of the image owned by unmapped users
/// (root) then show as the overflow id (65534) and cannot be copied up when modified (`EPERM`),
/// and device nodes in the image cannot be opened (user-namespace mounts are `nodev`).
///
/// # Layers
///
/// `lower` may itself be an overlay (for instance another sandbox's `merged`): the kernel stacks
/// at most two levels of overlayfs. `layer_dir` may not be on overlayfs (it cannot hold an
/// upper layer; put the state directory on another filesystem) and may not overlap `lower`.
/// Mounts below `lower` are not visible through the overlay.
///
/// On failure the directories created here are removed again; if the namespace was already
/// entered, the process stays in it (private, harmless).
#[cfg(test)]
pub fn prepare(lower: &Path, layer_dir: &Path) -> Result<CowRoot> {
    prepare_seeded(lower, layer_dir, None)
}

/// As [`prepare`], the upper layer starting as a copy of `seed` (a checkpoint's upper layer:
/// the files the checkpointed sandbox had written, whiteouts and overlay attributes
/// included), copied before the mount ([`crate::treecopy`]).
pub fn prepare_seeded(lower: &Path, layer_dir: &Path, seed: Option<&Path>) -> Result<CowRoot> {
    let lower_canon = std::fs::canonicalize(lower)
        .with_context(|| format!("root filesystem {}", lower.display()))?;
    if !lower_canon.is_dir() {
        bail!("root filesystem {} is not a directory", lower.display());
    }
    // Checked before anything is created: a layer inside the image would modify it.
    let layer = resolve_maybe_missing(layer_dir)?;
    if layer.starts_with(&lower_canon) || lower_canon.starts_with(&layer) {
        bail!(
            "the copy-on-write layer {} and the root filesystem {} overlap; \
             put the state directory outside the root filesystem",
            layer.display(),
            lower_canon.display()
        );
    }
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&layer)
        .with_context(|| format!("creating {}", layer.display()))?;
    let layer = std::fs::canonicalize(&layer)
        .with_context(|| format!("resolving {}", layer_dir.display()))?;
    if is_overlayfs(&layer)? {
        bail!(
            "{} is on overlayfs, which cannot hold the upper layer of the sandbox's \
             copy-on-write root; set TORPOR_STATE_DIR to a directory on another filesystem \
             (a volume or a tmpfs)",
            layer.display()
        );
    }
    let upper = layer.join("upper");
    let work = layer.join("work");
    let merged = layer.join("merged");
    for d in [&upper, &work, &merged] {
        if d.symlink_metadata().is_ok() {
            bail!(
                "{} already exists: a layer directory belongs to one sandbox only \
                 (refusing to reuse another sandbox's writes)",
                d.display()
            );
        }
    }
    let opts = overlay_options(&lower_canon, &upper, &work, false)?;
    let opts_userxattr = overlay_options(&lower_canon, &upper, &work, true)?;

    let threads = thread_count()?;
    if threads != 1 {
        bail!(
            "the copy-on-write root must be prepared before the process starts any thread \
             ({threads} threads now): unshare(CLONE_NEWNS) would move only the calling thread \
             into the private mount namespace"
        );
    }

    let mut created: Vec<&Path> = Vec::new();
    let result = (|| {
        for d in [&upper, &work, &merged] {
            DirBuilder::new()
                .mode(0o700)
                .create(d)
                .with_context(|| format!("creating {}", d.display()))?;
            created.push(d);
        }
        match seed {
            Some(seed) => crate::treecopy::copy_tree(seed, &upper)?,
            None => copy_root_attributes(&lower_canon, &upper)?,
        }
        let user_namespace = enter_private_namespace()?;
        let userxattr = !in_initial_user_namespace()?;
        let o = if userxattr { &opts_userxattr } else { &opts };
        mount_overlay(&merged, o, &lower_canon, user_namespace)?;
        Ok(user_namespace)
    })();
    match result {
        Ok(user_namespace) => Ok(CowRoot {
            lower: lower_canon,
            layer_dir: layer,
            upper,
            merged,
            user_namespace,
            mounted: true,
        }),
        Err(e) => {
            for d in created.iter().rev() {
                let _ = std::fs::remove_dir(d);
            }
            Err(e)
        }
    }
}

/// `p` made absolute with its longest existing ancestor canonicalized (symlinks resolved) and the
/// missing rest appended; a missing rest may not hold `..`.
fn resolve_maybe_missing(p: &Path) -> Result<PathBuf> {
    let abs = std::path::absolute(p).with_context(|| format!("resolving {}", p.display()))?;
    let mut existing = abs.as_path();
    let mut rest = Vec::new();
    loop {
        match std::fs::canonicalize(existing) {
            Ok(mut c) => {
                c.extend(rest.iter().rev());
                return Ok(c);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
                    bail!("{}: its missing part may not hold '..'", p.display());
                };
                rest.push(name.to_os_string());
                existing = parent;
            }
            Err(e) => return Err(e).with_context(|| format!("resolving {}", p.display())),
        }
    }
}

/// Removes `dir` and everything in it, like `std::fs::remove_dir_all`, but
///
/// - refuses (an error, nothing removed) when something is mounted at or below `dir` in this
///   process's namespace, such as a [`CowRoot`] not yet unmounted: removing would delete through
///   the mount;
/// - without root, makes directories writable first when needed: overlayfs's `work/work` is
///   mode 000, and the sandbox may have left read-only directories in `upper`.
///
/// A missing `dir` is not an error.
pub fn remove_all(dir: &Path) -> io::Result<()> {
    let canon = match std::fs::canonicalize(dir) {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mounted = mounts_under(&std::fs::read("/proc/self/mountinfo")?, &canon);
    if let Some(m) = mounted.first() {
        return Err(io::Error::other(format!(
            "not removing {}: {} is still mounted (unmount the copy-on-write root first)",
            canon.display(),
            m.display()
        )));
    }
    match std::fs::remove_dir_all(&canon) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            make_dirs_writable(&canon);
            std::fs::remove_dir_all(&canon)
        }
        r => r,
    }
}

/// Adds owner rwx to every directory under `root` that lacks it (never following symlinks);
/// errors are left for the removal to report.
fn make_dirs_writable(root: &Path) {
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(md) = d.symlink_metadata() else {
            continue;
        };
        if !md.is_dir() {
            continue;
        }
        if md.mode() & 0o700 != 0o700 {
            let perm = std::fs::Permissions::from_mode((md.mode() & 0o7777) | 0o700);
            let _ = std::fs::set_permissions(&d, perm);
        }
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    stack.push(e.path());
                }
            }
        }
    }
}

/// The overlay's option string, each path escaped (`\`, `,` and `:` behind a backslash, as
/// overlayfs unescapes them), checked to fit the page that mount(2) copies.
fn overlay_options(lower: &Path, upper: &Path, work: &Path, userxattr: bool) -> Result<CString> {
    let mut o: Vec<u8> = Vec::new();
    if userxattr {
        o.extend_from_slice(b"userxattr,");
    }
    o.extend_from_slice(b"lowerdir=");
    o.extend_from_slice(&escape(lower));
    o.extend_from_slice(b",upperdir=");
    o.extend_from_slice(&escape(upper));
    o.extend_from_slice(b",workdir=");
    o.extend_from_slice(&escape(work));
    let page = page_size();
    if o.len() + 1 > page {
        bail!(
            "the overlay's mount options for {} take {} bytes, more than the {page} mount(2) \
             accepts; use shorter paths for the root filesystem and the state directory",
            lower.display(),
            o.len() + 1
        );
    }
    CString::new(o).context("a path holds a NUL byte")
}

fn escape(p: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for &b in p.as_os_str().as_bytes() {
        if matches!(b, b'\\' | b',' | b':') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

fn thread_count() -> Result<usize> {
    Ok(std::fs::read_dir("/proc/self/task")
        .context("reading /proc/self/task")?
        .count())
}

fn cstring(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .with_context(|| format!("{} holds a NUL byte", p.display()))
}

fn is_overlayfs(p: &Path) -> Result<bool> {
    let c = cstring(p)?;
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid path and `st` a valid, writable statfs.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error()).with_context(|| format!("statfs {}", p.display()));
    }
    Ok(st.f_type == libc::OVERLAYFS_SUPER_MAGIC)
}

/// Gives `upper` the permission bits (and, with the privilege to, the owner) of `lower`'s top
/// directory: overlayfs shows the upper directory's attributes for the merged root.
fn copy_root_attributes(lower: &Path, upper: &Path) -> Result<()> {
    let md = lower
        .metadata()
        .with_context(|| format!("stat {}", lower.display()))?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::lchown(upper, Some(md.uid()), Some(md.gid()))
            .with_context(|| format!("chown {}", upper.display()))?;
    }
    std::fs::set_permissions(upper, std::fs::Permissions::from_mode(md.mode() & 0o7777))
        .with_context(|| format!("chmod {}", upper.display()))
}

/// Unshares the mount namespace (inside a new user namespace when `CAP_SYS_ADMIN` is missing)
/// and makes every mount in it private. Returns whether a user namespace was entered.
/// Whether this process entered a private mount namespace of its own with the host's
/// privileges (not in a user namespace): mounts it makes stay in it.
static PRIVATE_MOUNTS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether [`enter_private_namespace`] put this process in a private mount namespace of its
/// own, outside any user namespace.
pub(crate) fn in_private_mount_namespace() -> bool {
    PRIVATE_MOUNTS.load(std::sync::atomic::Ordering::SeqCst)
}

pub(crate) fn enter_private_namespace() -> Result<bool> {
    // SAFETY: unshare takes no pointers; the process is single-threaded (checked by the caller).
    let user_namespace = if unsafe { libc::unshare(libc::CLONE_NEWNS) } == 0 {
        false
    } else {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EPERM) {
            return Err(e).context("unshare(CLONE_NEWNS) for the copy-on-write root");
        }
        enter_user_namespace(&e)?;
        true
    };
    // SAFETY: NULL source, type and data are allowed for a propagation change; "/" is a valid
    // NUL-terminated string.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error())
            .context("making the mounts of the private namespace private (MS_REC|MS_PRIVATE)");
    }
    PRIVATE_MOUNTS.store(!user_namespace, std::sync::atomic::Ordering::SeqCst);
    Ok(user_namespace)
}

fn enter_user_namespace(first: &io::Error) -> Result<()> {
    // SAFETY: geteuid and getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // SAFETY: unshare takes no pointers; the process is single-threaded (checked by the caller),
    // as CLONE_NEWUSER requires.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
        let e = io::Error::last_os_error();
        bail!(
            "cannot give the sandbox a copy-on-write root: a private mount namespace needs \
             CAP_SYS_ADMIN (unshare(CLONE_NEWNS): {first}), and an unprivileged user namespace \
             was refused too (unshare(CLONE_NEWUSER): {e}; user namespaces may be disabled, e.g. \
             user.max_user_namespaces=0 or an AppArmor/SELinux policy); run torpor as root"
        );
    }
    let write = |file: &str, text: String| -> Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(file)
            .with_context(|| format!("opening {file}"))?;
        f.write_all(text.as_bytes())
            .with_context(|| format!("writing {text:?} to {file} in the new user namespace"))
    };
    // Before Linux 3.19 there is no setgroups file (and no need to deny).
    if Path::new("/proc/self/setgroups").exists() {
        write("/proc/self/setgroups", "deny".into())?;
    }
    write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))?;
    Ok(())
}

/// Whether this process is in the initial user namespace (identity map of every id); outside it
/// overlayfs cannot use `trusted.*` xattrs and needs `userxattr`.
fn in_initial_user_namespace() -> Result<bool> {
    let map =
        std::fs::read_to_string("/proc/self/uid_map").context("reading /proc/self/uid_map")?;
    let fields: Vec<&str> = map.split_whitespace().collect();
    Ok(fields == ["0", "0", "4294967295"])
}

fn mount_overlay(merged: &Path, opts: &CString, lower: &Path, user_namespace: bool) -> Result<()> {
    let target = cstring(merged)?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let r = unsafe {
        libc::mount(
            c"overlay".as_ptr(),
            target.as_ptr(),
            c"overlay".as_ptr(),
            0,
            opts.as_ptr().cast(),
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    let hint = match e.raw_os_error() {
        Some(libc::ENODEV) => " (overlayfs is not available in this kernel: modprobe overlay)",
        Some(libc::EPERM) if user_namespace => {
            " (mounting overlayfs in a user namespace needs Linux 5.11 or later, and may be \
             forbidden by a security policy; run torpor as root)"
        }
        Some(libc::EINVAL) => {
            " (the kernel log says why: dmesg | grep overlay; e.g. the root filesystem is an \
             overlay stacked more than two deep, or the state directory's filesystem cannot hold \
             an upper layer)"
        }
        _ => "",
    };
    Err(e).with_context(|| {
        format!(
            "mounting the copy-on-write root of {} on {} (options {}){hint}",
            lower.display(),
            merged.display(),
            opts.to_string_lossy()
        )
    })
}

/// The mount points of a mountinfo text (`/proc/PID/mountinfo`) at or below `dir`.
fn mounts_under(mountinfo: &[u8], dir: &Path) -> Vec<PathBuf> {
    mountinfo
        .split(|&b| b == b'\n')
        .filter_map(|line| line.split(|&b| b == b' ').nth(4))
        .map(|f| PathBuf::from(OsString::from_vec(unescape_octal(f))))
        .filter(|p| p.starts_with(dir))
        .collect()
}

/// Undoes the kernel's `\ooo` escapes of mountinfo fields (space, tab, newline, backslash).
fn unescape_octal(f: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(f.len());
    let mut i = 0;
    while i < f.len() {
        if f[i] == b'\\'
            && i + 3 < f.len()
            && f[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push(
                ((f[i + 1] - b'0') << 6)
                    .wrapping_add((f[i + 2] - b'0') << 3)
                    .wrapping_add(f[i + 3] - b'0'),
            );
            i += 4;
        } else {
            out.push(f[i]);
            i += 1;
        }
    }
    out
}

/// Makes `root` read-only for this process (OCI `root.readonly`): in a private mount
/// namespace (same preconditions as [`prepare`]), `root` is bind-mounted onto itself and the
/// bind remounted read-only, so every write of the sandbox fails with `EROFS` while the host
/// keeps its own view. Returns the path to use as the sandbox's root.
pub fn readonly(root: &Path) -> Result<PathBuf> {
    let root = std::fs::canonicalize(root)
        .with_context(|| format!("root filesystem {}", root.display()))?;
    let threads = thread_count()?;
    if threads != 1 {
        bail!("a read-only root must be set up before the process starts any thread");
    }
    enter_private_namespace()?;
    let c = cstring(&root)?;
    let flags = libc::MS_BIND | libc::MS_REC;
    // SAFETY: NUL-terminated paths that outlive the calls; no data argument.
    unsafe {
        if libc::mount(
            c.as_ptr(),
            c.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        ) != 0
        {
            return Err(io::Error::last_os_error())
                .with_context(|| format!("bind-mounting {}", root.display()));
        }
        let ro = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
        if libc::mount(
            std::ptr::null(),
            c.as_ptr(),
            std::ptr::null(),
            ro,
            std::ptr::null(),
        ) != 0
        {
            return Err(io::Error::last_os_error())
                .with_context(|| format!("making {} read-only", root.display()));
        }
    }
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::AssertUnwindSafe;
    use testutil::TempDir;

    /// Whether the tests that mount may run: as root, or without root when
    /// `TORPOR_COWROOT_UNPRIVILEGED=1` asks to exercise the user-namespace path. Otherwise prints
    /// "skipped: needs root" and passes, unless `TORPOR_REQUIRE_KVM=1`.
    fn privileged() -> bool {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0
            || std::env::var("TORPOR_COWROOT_UNPRIVILEGED").as_deref() == Ok("1")
        {
            return true;
        }
        assert!(
            std::env::var("TORPOR_REQUIRE_KVM").as_deref() != Ok("1"),
            "TORPOR_REQUIRE_KVM=1 but the copy-on-write root tests need root"
        );
        eprintln!("skipped: needs root");
        false
    }

    /// Runs `f` in a forked child, which is single-threaded (the test harness is not), so that
    /// [`prepare`] may unshare there without touching the harness; the child's namespace and
    /// mounts vanish when it exits. Returns the child's error, if any.
    fn in_child(scratch: &Path, f: impl FnOnce() -> Result<()>) -> Result<(), String> {
        let report = scratch.join(format!("child-report-{}", testutil::unique_token()));
        // SAFETY: the child runs only `f` and leaves with _exit; the libc allocator is fork-safe,
        // and `f` takes no lock another thread could hold (no stdout, no environment writes).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid == 0 {
            let r = std::panic::catch_unwind(AssertUnwindSafe(f));
            let msg = match r {
                Ok(Ok(())) => String::new(),
                Ok(Err(e)) => format!("{e:#}"),
                Err(p) => p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panic".into()),
            };
            let ok = std::fs::write(&report, &msg).is_ok() && msg.is_empty();
            // SAFETY: _exit ends the child without running the harness's exit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        loop {
            // SAFETY: `status` is a valid int to write; `pid` is our child.
            let r = unsafe { libc::waitpid(pid, &mut status, 0) };
            if r == pid {
                break;
            }
            let e = io::Error::last_os_error();
            assert_eq!(e.kind(), io::ErrorKind::Interrupted, "waitpid: {e}");
        }
        let msg = std::fs::read_to_string(&report).unwrap_or_default();
        let _ = std::fs::remove_file(&report);
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            Ok(())
        } else {
            Err(format!("child failed (status {status:#x}): {msg}"))
        }
    }

    fn ensure(cond: bool, what: &str) -> Result<()> {
        if cond {
            Ok(())
        } else {
            bail!("{what}")
        }
    }

    fn mounted_in(pid: &str, path: &Path) -> bool {
        let info = std::fs::read(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
        mounts_under(&info, path).iter().any(|m| m == path)
    }

    /// An image: `a.txt`, `sub/b.txt`, mode 0755 at the top.
    fn image(dir: &Path) -> PathBuf {
        let lower = dir.join("lower");
        std::fs::create_dir_all(lower.join("sub")).unwrap();
        std::fs::write(lower.join("a.txt"), "lower a\n").unwrap();
        std::fs::write(lower.join("sub/b.txt"), "lower b\n").unwrap();
        std::fs::set_permissions(&lower, std::fs::Permissions::from_mode(0o755)).unwrap();
        lower
    }

    fn image_untouched(lower: &Path) {
        assert_eq!(
            std::fs::read_to_string(lower.join("a.txt")).unwrap(),
            "lower a\n"
        );
        assert_eq!(
            std::fs::read_to_string(lower.join("sub/b.txt")).unwrap(),
            "lower b\n"
        );
        let mut names: Vec<_> = std::fs::read_dir(lower)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["a.txt", "sub"]);
        assert_eq!(std::fs::read_dir(lower.join("sub")).unwrap().count(), 1);
    }

    #[test]
    fn writes_go_to_the_layer_and_the_mount_stays_private() {
        if !privileged() {
            return;
        }
        let tmp = TempDir::new("torpor-cowroot");
        let lower = image(tmp.path());
        let layer = tmp.path().join("state/root");
        let merged = std::fs::canonicalize(tmp.path())
            .unwrap()
            .join("state/root/merged");
        let m2 = merged.clone();
        in_child(tmp.path(), || {
            let root = prepare(&lower, &layer)?;
            let m = root.merged();
            ensure(m == m2, "merged is LAYER/merged")?;
            ensure(mounted_in("self", m), "mounted in the child")?;
            // SAFETY: getppid has no preconditions.
            let ppid = unsafe { libc::getppid() }.to_string();
            ensure(
                !mounted_in(&ppid, m),
                "not mounted in the parent's namespace",
            )?;
            ensure(!mounted_in("1", m), "not mounted in init's namespace")?;
            ensure(
                std::fs::read_to_string(m.join("a.txt"))? == "lower a\n",
                "the image shows through",
            )?;
            let mode = |p: &Path| p.metadata().map(|md| md.mode() & 0o7777);
            ensure(mode(m)? == 0o755, "the root has the image's mode")?;
            std::fs::write(m.join("new.txt"), "new\n")?;
            std::fs::write(m.join("a.txt"), "changed a\n")?;
            std::fs::remove_file(m.join("sub/b.txt"))?;
            std::fs::create_dir(m.join("newdir"))?;
            ensure(root.upper().join("new.txt").exists(), "new file in upper")?;
            ensure(!lower.join("new.txt").exists(), "new file not in lower")?;
            ensure(
                std::fs::read_to_string(root.upper().join("a.txt"))? == "changed a\n",
                "changed file copied up",
            )?;
            ensure(
                std::fs::read_to_string(lower.join("a.txt"))? == "lower a\n",
                "changed file unchanged in lower",
            )?;
            ensure(
                !m.join("sub/b.txt").exists(),
                "deleted file gone from merged",
            )?;
            ensure(
                lower.join("sub/b.txt").exists(),
                "deleted file kept in lower",
            )?;
            // Exit still mounted: the namespace's end unmounts it.
            std::mem::forget(root);
            Ok(())
        })
        .unwrap();
        image_untouched(&lower);
        assert!(!mounted_in("self", &merged), "the mount leaked to the host");
        assert_eq!(std::fs::read_dir(&merged).unwrap().count(), 0);
        assert!(layer.join("upper/new.txt").exists());
        remove_all(&layer).unwrap();
        assert!(!layer.exists());
        image_untouched(&lower);
    }

    #[test]
    fn two_layers_over_one_image_are_isolated() {
        if !privileged() {
            return;
        }
        let tmp = TempDir::new("torpor-cowroot");
        let lower = image(tmp.path());
        let (l1, l2) = (tmp.path().join("s1/root"), tmp.path().join("s2/root"));
        in_child(tmp.path(), || {
            let r1 = prepare(&lower, &l1)?;
            let r2 = prepare(&lower, &l2)?;
            let (m1, m2) = (r1.merged(), r2.merged());
            std::fs::write(m1.join("one.txt"), "1")?;
            std::fs::write(m2.join("two.txt"), "2")?;
            std::fs::write(m1.join("a.txt"), "a of 1")?;
            std::fs::remove_file(m2.join("sub/b.txt"))?;
            ensure(!m2.join("one.txt").exists(), "2 does not see 1's file")?;
            ensure(!m1.join("two.txt").exists(), "1 does not see 2's file")?;
            ensure(
                std::fs::read_to_string(m2.join("a.txt"))? == "lower a\n",
                "2 does not see 1's change",
            )?;
            ensure(m1.join("sub/b.txt").exists(), "1 does not see 2's deletion")?;
            r1.unmount()?;
            r2.unmount()?;
            Ok(())
        })
        .unwrap();
        image_untouched(&lower);
        remove_all(tmp.path().join("s1").as_path()).unwrap();
        remove_all(tmp.path().join("s2").as_path()).unwrap();
    }

    #[test]
    fn an_overlay_can_be_the_image() {
        if !privileged() {
            return;
        }
        let tmp = TempDir::new("torpor-cowroot");
        let lower = image(tmp.path());
        let (l1, l2) = (tmp.path().join("s1/root"), tmp.path().join("s2/root"));
        in_child(tmp.path(), || {
            let r1 = prepare(&lower, &l1)?;
            std::fs::write(r1.merged().join("x"), "x")?;
            ensure(is_overlayfs(r1.merged())?, "the first merged is an overlay")?;
            let r2 = prepare(r1.merged(), &l2)?;
            let (m1, m2) = (r1.merged(), r2.merged());
            ensure(
                m2.join("x").exists() && m2.join("a.txt").exists(),
                "both layers show",
            )?;
            std::fs::write(m2.join("y"), "y")?;
            std::fs::remove_file(m2.join("x"))?;
            ensure(!m1.join("y").exists(), "the outer write stays outer")?;
            ensure(m1.join("x").exists(), "the outer deletion stays outer")?;
            ensure(!lower.join("y").exists(), "nothing reaches the image")?;
            Ok(())
        })
        .unwrap();
        image_untouched(&lower);
        remove_all(tmp.path().join("s1").as_path()).unwrap();
        remove_all(tmp.path().join("s2").as_path()).unwrap();
    }

    #[test]
    fn paths_with_commas_colons_and_backslashes() {
        if !privileged() {
            return;
        }
        let tmp = TempDir::new("torpor-cowroot");
        let odd = tmp.path().join("im,a:ge \\x");
        std::fs::create_dir(&odd).unwrap();
        let lower = image(&odd);
        let layer = tmp.path().join("st,a:te \\y/root");
        in_child(tmp.path(), || {
            let r = prepare(&lower, &layer)?;
            ensure(r.merged().join("sub/b.txt").exists(), "the image shows")?;
            std::fs::write(r.merged().join("w"), "w")?;
            ensure(r.upper().join("w").exists(), "writes reach the upper layer")?;
            Ok(())
        })
        .unwrap();
        image_untouched(&lower);
        remove_all(&layer).unwrap();
    }

    #[test]
    fn remove_all_refuses_a_mounted_layer() {
        if !privileged() {
            return;
        }
        let tmp = TempDir::new("torpor-cowroot");
        let lower = image(tmp.path());
        let state = tmp.path().join("state");
        let layer = state.join("root");
        in_child(tmp.path(), || {
            let r = prepare(&lower, &layer)?;
            std::fs::write(r.merged().join("w"), "w")?;
            ensure(remove_all(&state).is_err(), "refused while mounted")?;
            ensure(r.merged().join("w").exists(), "nothing removed")?;
            let m = r.merged().to_path_buf();
            r.unmount()?;
            ensure(!mounted_in("self", &m), "unmounted")?;
            remove_all(&state)?;
            ensure(!state.exists(), "removed after the unmount")?;
            Ok(())
        })
        .unwrap();
        image_untouched(&lower);
    }

    #[test]
    fn refusals_before_any_mount() {
        let tmp = TempDir::new("torpor-cowroot");
        let lower = image(tmp.path());
        // A layer inside the image.
        let e = prepare(&lower, &lower.join("state")).unwrap_err();
        assert!(format!("{e:#}").contains("overlap"), "{e:#}");
        let e = prepare(&tmp.path().join("state"), &tmp.path().join("x")).unwrap_err();
        assert!(format!("{e:#}").contains("root filesystem"), "{e:#}");
        // Another sandbox's layer.
        let reused = tmp.path().join("reused");
        std::fs::create_dir_all(reused.join("upper")).unwrap();
        let e = prepare(&lower, &reused).unwrap_err();
        assert!(format!("{e:#}").contains("already exists"), "{e:#}");
        // The harness is multi-threaded (one more thread makes sure of it).
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || rx.recv());
        let e = prepare(&lower, &tmp.path().join("fresh")).unwrap_err();
        drop(tx);
        let _ = t.join();
        assert!(
            format!("{e:#}").contains("before the process starts any thread"),
            "{e:#}"
        );
        assert!(!tmp.path().join("fresh/upper").exists());
        image_untouched(&lower);
    }

    #[test]
    fn options_are_escaped_and_bounded() {
        let o = overlay_options(
            Path::new("/a,b:c\\d"),
            Path::new("/u"),
            Path::new("/w"),
            false,
        )
        .unwrap();
        assert_eq!(
            o.to_bytes(),
            b"lowerdir=/a\\,b\\:c\\\\d,upperdir=/u,workdir=/w".as_slice()
        );
        let o = overlay_options(Path::new("/l"), Path::new("/u"), Path::new("/w"), true).unwrap();
        assert_eq!(
            o.to_bytes(),
            b"userxattr,lowerdir=/l,upperdir=/u,workdir=/w"
        );
        let long = PathBuf::from(format!("/{}", "x".repeat(page_size())));
        let e = overlay_options(&long, Path::new("/u"), Path::new("/w"), false).unwrap_err();
        assert!(format!("{e:#}").contains("shorter paths"), "{e:#}");
    }

    #[test]
    fn missing_layer_paths_resolve() {
        let tmp = TempDir::new("torpor-cowroot");
        let t = std::fs::canonicalize(tmp.path()).unwrap();
        std::os::unix::fs::symlink(&t, t.join("link")).unwrap();
        assert_eq!(
            resolve_maybe_missing(&t.join("link/a/b")).unwrap(),
            t.join("a/b")
        );
        assert!(resolve_maybe_missing(&t.join("a/../b")).is_err());
        assert!(!t.join("a").exists());
    }

    #[test]
    fn mountinfo_mount_points() {
        let info = b"22 1 0:21 / /proc rw - proc proc rw\n\
                     67 44 0:39 / /st\\040x/root/merged rw - overlay overlay rw,lowerdir=/l\n\
                     68 44 0:40 / /st\\040xy rw - tmpfs tmpfs rw\n";
        assert_eq!(
            mounts_under(info, Path::new("/st x")),
            [PathBuf::from("/st x/root/merged")]
        );
        assert!(mounts_under(info, Path::new("/st")).is_empty());
        assert_eq!(unescape_octal(b"a\\134b\\011"), b"a\\b\t");
        assert_eq!(unescape_octal(b"a\\9"), b"a\\9");
    }
}
