//! A directory tree copied as `cp -a` copies it, in this process: an overlay's upper layer
//! into a checkpoint, a fork image or a new sandbox's upper layer. Running `cp` cost a fork
//! and exec of it on every fork and clone; a sandbox's upper layer is a few files.
//!
//! Kept as `cp -a` keeps them: the kinds of file (directories, regular files, symbolic
//! links, and device nodes, FIFOs and sockets made anew with their numbers: an overlay's
//! whiteouts are character devices 0:0), hard links among the copied files, ownership (when
//! the runtime may give it), modes, access and modification times, and extended attributes
//! (an overlay's `trusted.overlay.*` marks: a copy that cannot keep one of those fails, as
//! the layer would mean something else without it).

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// Copies the contents of directory `from` into the existing directory `to`, and `from`'s
/// own attributes onto `to` (as `cp -a FROM/. TO`).
///
/// # Errors
/// The first entry that cannot be read, made or given its attributes.
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let md = std::fs::symlink_metadata(from).with_context(|| format!("stat {}", from.display()))?;
    if !md.is_dir() {
        bail!("{} is not a directory", from.display());
    }
    let mut links = HashMap::new();
    copy_contents(from, to, &mut links)?;
    set_attributes(from, to, &md)
}

/// The first copy of each file with more than one link, by its (device, inode).
type Links = HashMap<(u64, u64), PathBuf>;

fn copy_contents(from: &Path, to: &Path, links: &mut Links) -> Result<()> {
    let entries = std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))?;
    for e in entries {
        let e = e.with_context(|| format!("reading {}", from.display()))?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let md =
            std::fs::symlink_metadata(&src).with_context(|| format!("stat {}", src.display()))?;
        copy_entry(&src, &dst, &md, links)?;
    }
    Ok(())
}

fn copy_entry(src: &Path, dst: &Path, md: &std::fs::Metadata, links: &mut Links) -> Result<()> {
    let ft = md.file_type();
    if !ft.is_dir() && md.nlink() > 1 {
        let key = (md.dev(), md.ino());
        if let Some(first) = links.get(&key) {
            return std::fs::hard_link(first, dst)
                .with_context(|| format!("linking {} to {}", dst.display(), first.display()));
        }
        links.insert(key, dst.to_path_buf());
    }
    if ft.is_dir() {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dst)
            .with_context(|| format!("creating {}", dst.display()))?;
        copy_contents(src, dst, links)?;
    } else if ft.is_file() {
        std::fs::copy(src, dst)
            .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
    } else if ft.is_symlink() {
        let target =
            std::fs::read_link(src).with_context(|| format!("reading link {}", src.display()))?;
        std::os::unix::fs::symlink(&target, dst)
            .with_context(|| format!("creating link {}", dst.display()))?;
    } else if ft.is_char_device() || ft.is_block_device() || ft.is_fifo() || ft.is_socket() {
        let path = cstring(dst)?;
        // SAFETY: a valid NUL-terminated path; mode and device are plain values.
        if unsafe { libc::mknod(path.as_ptr(), md.mode(), md.rdev()) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("creating {}", dst.display()));
        }
    } else {
        bail!("{}: a kind of file that cannot be copied", src.display());
    }
    set_attributes(src, dst, md)
}

/// Gives `dst` the ownership, mode, extended attributes and times of `src` (whose metadata
/// is `md`), in that order: a chown clears set-id bits, and writing attributes changes no
/// time the copy keeps.
fn set_attributes(src: &Path, dst: &Path, md: &std::fs::Metadata) -> Result<()> {
    let symlink = md.file_type().is_symlink();
    match std::os::unix::fs::lchown(dst, Some(md.uid()), Some(md.gid())) {
        Ok(()) => {}
        // As `cp -a`: a runtime that may not give a file away keeps it its own.
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
        Err(e) => return Err(e).with_context(|| format!("chown {}", dst.display())),
    }
    if !symlink {
        std::fs::set_permissions(dst, std::fs::Permissions::from_mode(md.mode() & 0o7777))
            .with_context(|| format!("chmod {}", dst.display()))?;
    }
    copy_xattrs(src, dst)?;
    set_times(
        dst,
        (md.atime(), md.atime_nsec()),
        (md.mtime(), md.mtime_nsec()),
    )
    .with_context(|| format!("setting the times of {}", dst.display()))?;
    Ok(())
}

/// Copies `src`'s extended attributes onto `dst`. One that cannot be set is left out, as
/// `cp -a` leaves it, unless it is an overlay's: without those the layer means something else.
fn copy_xattrs(src: &Path, dst: &Path) -> Result<()> {
    let (s, d) = (cstring(src)?, cstring(dst)?);
    let names =
        list_xattrs(&s).with_context(|| format!("listing attributes of {}", src.display()))?;
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let Ok(cname) = CString::new(name) else {
            continue;
        };
        let value = match get_xattr(&s, &cname) {
            Ok(v) => v,
            // Removed meanwhile.
            Err(e) if e.raw_os_error() == Some(libc::ENODATA) => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("reading an attribute of {}", src.display()))
            }
        };
        // SAFETY: valid NUL-terminated path and name; `value` is a readable buffer of its length.
        let r = unsafe {
            libc::lsetxattr(
                d.as_ptr(),
                cname.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            let overlay =
                name.starts_with(b"trusted.overlay.") || name.starts_with(b"user.overlay.");
            if overlay {
                return Err(e).with_context(|| {
                    format!(
                        "setting {} on {}",
                        String::from_utf8_lossy(name),
                        dst.display()
                    )
                });
            }
            tracing::debug!(
                "not copying attribute {} of {}: {e}",
                String::from_utf8_lossy(name),
                src.display()
            );
        }
    }
    Ok(())
}

/// The NUL-separated names of `path`'s extended attributes (the link's own, not its target's).
fn list_xattrs(path: &CString) -> std::io::Result<Vec<u8>> {
    // SAFETY: a valid path, and a buffer writable for `len` bytes (or null with 0).
    match sized(|buf, len| unsafe { libc::llistxattr(path.as_ptr(), buf.cast(), len) }) {
        // A filesystem without extended attributes has none to copy.
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => Ok(Vec::new()),
        r => r,
    }
}

/// The value of attribute `name` of `path` (the link's own).
fn get_xattr(path: &CString, name: &CString) -> std::io::Result<Vec<u8>> {
    // SAFETY: a valid path and name, and a buffer writable for `len` bytes (or null with 0).
    sized(|buf, len| unsafe { libc::lgetxattr(path.as_ptr(), name.as_ptr(), buf.cast(), len) })
}

/// The bytes a call of the `*xattr` kind gives: `call(null, 0)` says how many, `call(buf,
/// len)` writes them, and `ERANGE` says they grew meanwhile (then it asks again).
fn sized(call: impl Fn(*mut u8, usize) -> isize) -> std::io::Result<Vec<u8>> {
    loop {
        let n = call(std::ptr::null_mut(), 0);
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut buf = vec![0u8; n.unsigned_abs()];
        let m = call(buf.as_mut_ptr(), buf.len());
        if m >= 0 {
            buf.truncate(m.unsigned_abs());
            return Ok(buf);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE) {
            return Err(e);
        }
    }
}

/// `p` as a C string for a host call. (`cowroot` has its own: it copies layers with this
/// module, which must not reach back into it.)
fn cstring(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .with_context(|| format!("{}: a path with a NUL byte", p.display()))
}

/// Sets the access and modification times (seconds, nanoseconds) of `path` itself (a link's
/// own, not its target's).
fn set_times(path: &Path, atime: (i64, i64), mtime: (i64, i64)) -> Result<()> {
    let times = [atime, mtime].map(|(tv_sec, tv_nsec)| libc::timespec { tv_sec, tv_nsec });
    let path = cstring(path)?;
    // SAFETY: a valid NUL-terminated path and two timespecs.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            path.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("torpor-treecopy-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn set_mtime(p: &Path, secs: i64, nsec: i64) {
        set_times(p, (secs, nsec), (secs, nsec)).unwrap();
    }

    #[test]
    fn a_tree_is_copied_with_its_kinds_links_modes_times_and_attributes() {
        let (base, out) = (temp("from"), temp("to"));
        let src = base.join("upper");
        std::fs::create_dir_all(src.join("a/b")).unwrap();
        std::fs::write(src.join("a/b/file"), b"bytes of a file").unwrap();
        std::fs::set_permissions(src.join("a/b/file"), std::fs::Permissions::from_mode(0o640))
            .unwrap();
        std::fs::hard_link(src.join("a/b/file"), src.join("a/linked")).unwrap();
        std::os::unix::fs::symlink("b/file", src.join("a/sym")).unwrap();
        std::fs::set_permissions(src.join("a"), std::fs::Permissions::from_mode(0o751)).unwrap();
        let fifo = cstring(&src.join("fifo")).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let file = cstring(&src.join("a/b/file")).unwrap();
        let (name, value) = (c"user.torpor-test", b"value");
        // SAFETY: valid path, name and value.
        let xattr = unsafe {
            libc::setxattr(
                file.as_ptr(),
                name.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        } == 0;
        // A whiteout, as an overlay makes it (a root runtime may make device nodes).
        let whiteout = cstring(&src.join("gone")).unwrap();
        // SAFETY: a valid path.
        let made_whiteout = unsafe { libc::mknod(whiteout.as_ptr(), libc::S_IFCHR, 0) } == 0;
        set_mtime(&src.join("a/b/file"), 1_000_000_000, 123_456_789);
        set_mtime(&src.join("a/sym"), 1_100_000_000, 5);
        set_mtime(&src.join("a/b"), 1_200_000_000, 0);
        set_mtime(&src, 1_300_000_000, 7);

        copy_tree(&src, &out).unwrap();

        assert_eq!(
            std::fs::read(out.join("a/b/file")).unwrap(),
            b"bytes of a file"
        );
        let f = std::fs::metadata(out.join("a/b/file")).unwrap();
        assert_eq!(f.mode() & 0o7777, 0o640);
        assert_eq!((f.mtime(), f.mtime_nsec()), (1_000_000_000, 123_456_789));
        let l = std::fs::metadata(out.join("a/linked")).unwrap();
        assert_eq!(l.ino(), f.ino(), "hard links stay one file");
        assert_eq!(f.nlink(), 2);
        assert_eq!(
            std::fs::read_link(out.join("a/sym")).unwrap(),
            Path::new("b/file")
        );
        let s = std::fs::symlink_metadata(out.join("a/sym")).unwrap();
        assert_eq!(s.mtime(), 1_100_000_000);
        let a = std::fs::metadata(out.join("a")).unwrap();
        assert_eq!(a.mode() & 0o7777, 0o751);
        assert_eq!(
            std::fs::metadata(out.join("a/b")).unwrap().mtime(),
            1_200_000_000,
            "a directory's time is set after its contents"
        );
        assert!(std::fs::symlink_metadata(out.join("fifo"))
            .unwrap()
            .file_type()
            .is_fifo());
        let root = std::fs::metadata(&out).unwrap();
        assert_eq!(
            (root.mtime(), root.mtime_nsec()),
            (1_300_000_000, 7),
            "FROM/. onto TO"
        );
        if xattr {
            let copy = cstring(&out.join("a/b/file")).unwrap();
            assert_eq!(get_xattr(&copy, &name.to_owned()).unwrap(), value);
        }
        if made_whiteout {
            let w = std::fs::symlink_metadata(out.join("gone")).unwrap();
            assert!(w.file_type().is_char_device());
            assert_eq!(w.rdev(), 0);
        }
        std::fs::remove_dir_all(&base).unwrap();
        std::fs::remove_dir_all(&out).unwrap();
    }

    #[test]
    fn a_missing_or_plain_source_is_an_error_and_an_existing_entry_is_not_overwritten() {
        let (base, out) = (temp("bad"), temp("bad-out"));
        assert!(copy_tree(&base.join("missing"), &out).is_err());
        std::fs::write(base.join("plain"), b"x").unwrap();
        assert!(copy_tree(&base.join("plain"), &out).is_err());
        let src = base.join("src");
        std::fs::create_dir(&src).unwrap();
        std::fs::create_dir(src.join("d")).unwrap();
        std::fs::create_dir(out.join("d")).unwrap();
        let e = copy_tree(&src, &out).unwrap_err();
        assert!(format!("{e:#}").contains("creating"), "{e:#}");
        std::fs::remove_dir_all(&base).unwrap();
        std::fs::remove_dir_all(&out).unwrap();
    }
}
