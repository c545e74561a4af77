//! Throwaway root filesystems for sandboxes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::TempDir;

/// Where Debian's `busybox-static` package puts busybox.
pub const HOST_BUSYBOX: &str = "/bin/busybox";

/// The host's static busybox (Debian `busybox-static`).
///
/// # Panics
///
/// When `/bin/busybox` is missing or is a dynamic binary (Debian's plain
/// `busybox` package), with the package to install.
pub fn host_busybox() -> PathBuf {
    let p = PathBuf::from(HOST_BUSYBOX);
    assert!(
        p.exists(),
        "{HOST_BUSYBOX} is missing: apt-get install busybox-static"
    );
    assert!(
        crate::elf_is_static(&p),
        "{HOST_BUSYBOX} is not a static binary: apt-get install busybox-static"
    );
    p
}

/// A root filesystem in a temporary directory, removed on drop.
///
/// [`Rootfs::new`] holds `bin/busybox` (a copy of the host's static busybox)
/// and an empty `tmp/`; the builder methods add files, directories, symlinks
/// and binaries. Paths given to them are relative to the root (a leading `/`
/// is allowed and ignored).
#[derive(Debug)]
pub struct Rootfs {
    dir: TempDir,
}

impl Default for Rootfs {
    fn default() -> Self {
        Self::new()
    }
}

impl Rootfs {
    /// A root with `bin/busybox` and `tmp/`.
    pub fn new() -> Rootfs {
        let r = Rootfs::empty();
        r.binary("/bin/busybox", &host_busybox());
        r.dir("/tmp");
        let tmp = r.host_path("/tmp");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", tmp.display()));
        r
    }

    /// An empty root.
    pub fn empty() -> Rootfs {
        Rootfs {
            dir: TempDir::new("torpor-rootfs"),
        }
    }

    /// The root's host path.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The host path of `rel` inside the root.
    pub fn host_path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel.trim_start_matches('/'))
    }

    /// Runs the guest test program `tests/guest/NAME.c` in torpor (`bin`) in this root (given
    /// `/proc` and `/tmp`), checks that its output holds each of `lines` (so that a run that
    /// does nothing cannot pass), then, as root, that it is the program's output natively
    /// ([`Rootfs::run_natively`], in new IPC namespaces too with `ipc`). `what` names it in
    /// a failure.
    ///
    /// # Panics
    /// When torpor's run fails, lacks a line, or differs from the native run.
    pub fn assert_guest_matches_native(
        &self,
        bin: &std::path::Path,
        name: &str,
        ipc: bool,
        lines: &[&str],
        what: &str,
    ) {
        self.dir("/proc").dir("/tmp");
        let prog = self.guest_program(name);
        let got = crate::Torpor::new(bin)
            .run(self.path(), &prog)
            .host_env("TORPOR_LOG", "off")
            .output();
        assert_eq!(got.code(), 0, "torpor stderr: {}", got.stderr_str());
        let out = got.stdout_str();
        for line in lines {
            assert!(out.contains(line), "torpor's output lacks {line:?}:\n{out}");
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            println!("native comparison skipped: needs root");
            return;
        }
        let want = self.run_natively(&prog, ipc);
        want.assert_code(0);
        got.assert_same_stdout(&want, what);
    }

    /// Runs `program` (a path inside the root) natively, as the guest tests compare torpor
    /// with: in a chroot of this root, in new PID and mount namespaces (with this root's
    /// `/proc` mounted), and a new IPC namespace too with `ipc`; empty environment but
    /// `PATH=/bin`. Needs root on the host.
    pub fn run_natively(&self, program: &str, ipc: bool) -> crate::Output {
        let mut cmd = std::process::Command::new("unshare");
        cmd.arg("--fork");
        if ipc {
            cmd.arg("--ipc");
        }
        cmd.arg("--pid")
            .arg("--mount")
            .arg(format!(
                "--mount-proc={}",
                self.host_path("/proc").display()
            ))
            .arg("/usr/sbin/chroot")
            .arg(self.path())
            .arg(program)
            .env_clear()
            .env("PATH", "/bin");
        crate::run_command(cmd, None, std::time::Duration::from_secs(60))
    }

    fn parent_dirs(&self, rel: &str) -> PathBuf {
        let p = self.host_path(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("mkdir {}: {e}", parent.display()));
        }
        p
    }

    /// Adds a regular file (and its parent directories).
    pub fn file(&self, rel: &str, contents: impl AsRef<[u8]>) -> &Rootfs {
        let p = self.parent_dirs(rel);
        std::fs::write(&p, contents).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
        self
    }

    /// Adds a directory (and its parents).
    pub fn dir(&self, rel: &str) -> &Rootfs {
        let p = self.host_path(rel);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        self
    }

    /// Adds a symlink at `rel` whose target is `target`, verbatim (it may be
    /// absolute, relative, or point anywhere on the host).
    pub fn symlink(&self, rel: &str, target: impl AsRef<Path>) -> &Rootfs {
        let p = self.parent_dirs(rel);
        std::os::unix::fs::symlink(target.as_ref(), &p).unwrap_or_else(|e| {
            panic!(
                "symlink {} -> {}: {e}",
                p.display(),
                target.as_ref().display()
            )
        });
        self
    }

    /// Copies the host file `host` to `rel`, mode 0755.
    pub fn binary(&self, rel: &str, host: &Path) -> &Rootfs {
        let p = self.parent_dirs(rel);
        // A new file renamed over the old one, never a rewrite in place: a sandbox already
        // running the old one maps its pages from the page cache (shared file pages), and
        // would see them truncated and rewritten under it, as a Linux process would.
        let tmp = p.with_file_name(format!(
            ".{}.new",
            p.file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        ));
        std::fs::copy(host, &tmp)
            .unwrap_or_else(|e| panic!("copy {} to {}: {e}", host.display(), tmp.display()));
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", tmp.display()));
        std::fs::rename(&tmp, &p)
            .unwrap_or_else(|e| panic!("rename {} to {}: {e}", tmp.display(), p.display()));
        self
    }

    /// Builds `tests/guest/NAME.c` statically and copies it to `/bin/NAME`.
    /// Returns the guest path, `/bin/NAME`.
    pub fn guest_program(&self, name: &str) -> String {
        let guest = format!("/bin/{name}");
        self.binary(&guest, &crate::guest_program(name));
        guest
    }
}
