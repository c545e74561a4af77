//! Host calls on names and metadata: each function wraps one libc call on descriptors and
//! names the caller holds and returns the host's errno, so that the syscall handlers above
//! stay free of `unsafe`, as descriptors' are with `fd::host` and sockets' with `net::host`.
//!
//! Names travel as `&CStr` (a last component from [`super::Root::parent_of`], or a
//! `/proc/self/fd/N` path from [`super::host_fd_path`]), buffers as slices, never as raw
//! pointers. The calls that act on a descriptor's own inode (stat, statx, readlink, chown,
//! utimensat) pass the empty path with `AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW` where the host call
//! takes it: a symlink itself for an `O_PATH | O_NOFOLLOW` descriptor. Structures the guest is
//! handed as they are (`struct stat`, `struct statx`, `struct statfs`: the host's layout is
//! Linux x86-64's) come back as their bytes.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd};

use abi::Errno;

const AT_EMPTY_PATH: i32 = libc::AT_EMPTY_PATH;
const AT_SYMLINK_NOFOLLOW: i32 = libc::AT_SYMLINK_NOFOLLOW;
const AT_SYMLINK_FOLLOW: i32 = libc::AT_SYMLINK_FOLLOW;

/// Size of `struct statx`.
pub const STATX_SIZE: usize = std::mem::size_of::<libc::statx>();
/// Size of `struct statfs`.
pub const STATFS_SIZE: usize = std::mem::size_of::<libc::statfs>();

/// A host call's `int` result: the host's errno, read at once, for a negative one.
fn cvt(r: libc::c_int) -> Result<(), Errno> {
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// A host call's `ssize_t` (or `long`) result as a count: the host's errno for a negative one.
fn cvt_size(r: isize) -> Result<usize, Errno> {
    usize::try_from(r).map_err(|_| Errno::last())
}

/// The host structures handed to the guest as they are: plain integers with no implicit
/// padding (their gaps are named fields), whose bytes are Linux x86-64's layout.
trait Plain: Copy {}
impl Plain for libc::stat {}
impl Plain for libc::statx {}
impl Plain for libc::statfs {}

fn bytes_of<T: Plain>(v: &T) -> &[u8] {
    // SAFETY: `T` is plain integers without padding, so all its bytes are initialised; the
    // slice borrows `v` and covers exactly its size.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

// --- Names -----------------------------------------------------------------------------------

/// mkdirat(2) of `name` in `dir` with `mode` (the caller applies the umask).
///
/// # Errors
/// The host's errno.
pub fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> Result<(), Errno> {
    // SAFETY: a NUL-terminated name; integers otherwise.
    cvt(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) })
}

/// unlinkat(2) of `name` in `dir` (`flags`: 0 or AT_REMOVEDIR, which the host checks).
///
/// # Errors
/// The host's errno.
pub fn unlinkat(dir: BorrowedFd<'_>, name: &CStr, flags: i32) -> Result<(), Errno> {
    // SAFETY: a NUL-terminated name; integers otherwise.
    cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) })
}

/// renameat2(2) of `old` in `old_dir` to `new` in `new_dir` with `flags` (RENAME_*).
///
/// # Errors
/// The host's errno.
pub fn renameat2(
    old_dir: BorrowedFd<'_>,
    old: &CStr,
    new_dir: BorrowedFd<'_>,
    new: &CStr,
    flags: u32,
) -> Result<(), Errno> {
    // SAFETY: NUL-terminated names; integers otherwise.
    cvt(unsafe {
        libc::renameat2(
            old_dir.as_raw_fd(),
            old.as_ptr(),
            new_dir.as_raw_fd(),
            new.as_ptr(),
            flags,
        )
    })
}

/// linkat(2) of the very inode `src` refers to as `name` in `dir` (AT_EMPTY_PATH, which the
/// host lets only a process with CAP_DAC_READ_SEARCH use).
///
/// # Errors
/// The host's errno (ENOENT or EPERM without that capability).
pub fn link_fd(src: BorrowedFd<'_>, dir: BorrowedFd<'_>, name: &CStr) -> Result<(), Errno> {
    // SAFETY: the empty path and a NUL-terminated name; integers otherwise.
    cvt(unsafe {
        libc::linkat(
            src.as_raw_fd(),
            c"".as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            AT_EMPTY_PATH,
        )
    })
}

/// linkat(2) of the file host path `path` leads to, its last symlink followed
/// (AT_SYMLINK_FOLLOW: a `/proc/self/fd/N` link reaches the descriptor's inode), as `name` in
/// `dir`.
///
/// # Errors
/// The host's errno.
pub fn link_path(path: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> Result<(), Errno> {
    // SAFETY: NUL-terminated path and name; integers otherwise.
    cvt(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            path.as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            AT_SYMLINK_FOLLOW,
        )
    })
}

/// symlinkat(2): `name` in `dir`, a symlink holding `target` as given.
///
/// # Errors
/// The host's errno.
pub fn symlinkat(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> Result<(), Errno> {
    // SAFETY: NUL-terminated target and name; an integer otherwise.
    cvt(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) })
}

/// mknodat(2) of `name` in `dir` with `mode` (type and permissions) and `dev` (the caller
/// admits only regular files, FIFOs and sockets).
///
/// # Errors
/// The host's errno.
pub fn mknodat(dir: BorrowedFd<'_>, name: &CStr, mode: u32, dev: u64) -> Result<(), Errno> {
    // SAFETY: a NUL-terminated name; integers otherwise.
    cvt(unsafe { libc::mknodat(dir.as_raw_fd(), name.as_ptr(), mode, dev) })
}

// --- Modes, owners, times --------------------------------------------------------------------

/// chmod of the file host path `path` leads to (fchmodat(2) from the working directory, no
/// flags: a `/proc/self/fd/N` link is followed to the descriptor's inode).
///
/// # Errors
/// The host's errno.
pub fn chmod_path(path: &CStr, mode: u32) -> Result<(), Errno> {
    // SAFETY: a NUL-terminated path; integers otherwise.
    cvt(unsafe { libc::fchmodat(libc::AT_FDCWD, path.as_ptr(), mode, 0) })
}

/// fchmod(2).
///
/// # Errors
/// The host's errno.
pub fn fchmod(fd: BorrowedFd<'_>, mode: u32) -> Result<(), Errno> {
    // SAFETY: integers only.
    cvt(unsafe { libc::fchmod(fd.as_raw_fd(), mode) })
}

/// Changes the owner of the inode `fd` refers to (fchownat(2) of the empty path with
/// AT_EMPTY_PATH: a symlink itself for a descriptor opened without following).
///
/// # Errors
/// The host's errno.
pub fn chown_fd(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> Result<(), Errno> {
    // SAFETY: the empty path; integers otherwise.
    cvt(unsafe { libc::fchownat(fd.as_raw_fd(), c"".as_ptr(), uid, gid, AT_EMPTY_PATH) })
}

/// fchown(2).
///
/// # Errors
/// The host's errno.
pub fn fchown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> Result<(), Errno> {
    // SAFETY: integers only.
    cvt(unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) })
}

fn times_ptr(times: Option<&[libc::timespec; 2]>) -> *const libc::timespec {
    times.map_or(std::ptr::null(), |ts| ts.as_ptr())
}

/// Sets the times of the file `fd` refers to (`None`: both now) by the raw utimensat(2) with a
/// null path and no flags, which the C library's wrapper refuses.
///
/// # Errors
/// The host's errno.
pub fn utimens_fd(fd: BorrowedFd<'_>, times: Option<&[libc::timespec; 2]>) -> Result<(), Errno> {
    // SAFETY: a null path, two timespecs (or null) that outlive the call; integers otherwise.
    let r = unsafe {
        libc::syscall(
            libc::SYS_utimensat,
            fd.as_raw_fd(),
            std::ptr::null::<libc::c_char>(),
            times_ptr(times),
            0,
        )
    };
    cvt(r as libc::c_int)
}

/// Sets the times of the inode `fd` refers to (`None`: both now) by utimensat(2) of the empty
/// path with AT_EMPTY_PATH and AT_SYMLINK_NOFOLLOW (a symlink itself for a descriptor opened
/// without following).
///
/// # Errors
/// The host's errno.
pub fn utimens_empty_path(
    fd: BorrowedFd<'_>,
    times: Option<&[libc::timespec; 2]>,
) -> Result<(), Errno> {
    let flags = AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW;
    // SAFETY: the empty path, two timespecs (or null) that outlive the call.
    cvt(unsafe { libc::utimensat(fd.as_raw_fd(), c"".as_ptr(), times_ptr(times), flags) })
}

/// Opens the file host path `path` leads to for writing (close-on-exec) and truncates it to
/// `len` bytes (the caller checks that it is a regular file: no FIFO or device is opened).
///
/// # Errors
/// The host's errno, of the open or of the ftruncate.
pub fn truncate_path(path: &CStr, len: i64) -> Result<(), Errno> {
    let w = crate::fd::host::open(path, libc::O_WRONLY)?;
    // SAFETY: integers only, on the descriptor just opened.
    cvt(unsafe { libc::ftruncate(w.as_raw_fd(), len) })
}

// --- Extended attributes ---------------------------------------------------------------------

/// setxattr(2) on the file host path `path` leads to.
///
/// # Errors
/// The host's errno.
pub fn setxattr(path: &CStr, name: &CStr, value: &[u8], flags: i32) -> Result<(), Errno> {
    let (v, n) = (value.as_ptr().cast(), value.len());
    // SAFETY: NUL-terminated path and name, a value of `n` bytes.
    cvt(unsafe { libc::setxattr(path.as_ptr(), name.as_ptr(), v, n, flags) })
}

/// fsetxattr(2).
///
/// # Errors
/// The host's errno.
pub fn fsetxattr(fd: BorrowedFd<'_>, name: &CStr, value: &[u8], flags: i32) -> Result<(), Errno> {
    let (v, n) = (value.as_ptr().cast(), value.len());
    // SAFETY: a NUL-terminated name, a value of `n` bytes.
    cvt(unsafe { libc::fsetxattr(fd.as_raw_fd(), name.as_ptr(), v, n, flags) })
}

/// getxattr(2) on the file host path `path` leads to, into `buf` (empty: a size query); the
/// value's length.
///
/// # Errors
/// The host's errno (ERANGE when `buf` is too small).
pub fn getxattr(path: &CStr, name: &CStr, buf: &mut [u8]) -> Result<usize, Errno> {
    let (v, n) = (buf.as_mut_ptr().cast(), buf.len());
    // SAFETY: NUL-terminated path and name, a writable buffer of `n` bytes.
    cvt_size(unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), v, n) })
}

/// fgetxattr(2) into `buf` (empty: a size query); the value's length.
///
/// # Errors
/// The host's errno (ERANGE when `buf` is too small).
pub fn fgetxattr(fd: BorrowedFd<'_>, name: &CStr, buf: &mut [u8]) -> Result<usize, Errno> {
    let (v, n) = (buf.as_mut_ptr().cast(), buf.len());
    // SAFETY: a NUL-terminated name, a writable buffer of `n` bytes.
    cvt_size(unsafe { libc::fgetxattr(fd.as_raw_fd(), name.as_ptr(), v, n) })
}

/// listxattr(2) on the file host path `path` leads to, into `buf` (empty: a size query); the
/// list's length.
///
/// # Errors
/// The host's errno (ERANGE when `buf` is too small).
pub fn listxattr(path: &CStr, buf: &mut [u8]) -> Result<usize, Errno> {
    let (v, n) = (buf.as_mut_ptr().cast(), buf.len());
    // SAFETY: a NUL-terminated path, a writable buffer of `n` bytes.
    cvt_size(unsafe { libc::listxattr(path.as_ptr(), v, n) })
}

/// flistxattr(2) into `buf` (empty: a size query); the list's length.
///
/// # Errors
/// The host's errno (ERANGE when `buf` is too small).
pub fn flistxattr(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize, Errno> {
    let (v, n) = (buf.as_mut_ptr().cast(), buf.len());
    // SAFETY: a writable buffer of `n` bytes.
    cvt_size(unsafe { libc::flistxattr(fd.as_raw_fd(), v, n) })
}

/// removexattr(2) on the file host path `path` leads to.
///
/// # Errors
/// The host's errno.
pub fn removexattr(path: &CStr, name: &CStr) -> Result<(), Errno> {
    // SAFETY: NUL-terminated path and name.
    cvt(unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) })
}

/// fremovexattr(2).
///
/// # Errors
/// The host's errno.
pub fn fremovexattr(fd: BorrowedFd<'_>, name: &CStr) -> Result<(), Errno> {
    // SAFETY: a NUL-terminated name.
    cvt(unsafe { libc::fremovexattr(fd.as_raw_fd(), name.as_ptr()) })
}

// --- Directories -----------------------------------------------------------------------------

/// getdents64(2) into `buf`: the host's `struct linux_dirent64` records, as many bytes of them
/// as it wrote (0 at the end of the directory).
///
/// # Errors
/// The host's errno (EINVAL when `buf` cannot hold one record).
pub fn getdents64(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize, Errno> {
    // SAFETY: getdents64 writes at most `buf.len()` bytes into `buf`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            fd.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    cvt_size(r as isize)
}

// --- Status ----------------------------------------------------------------------------------

/// The status of the inode `fd` refers to (fstatat(2) of the empty path with AT_EMPTY_PATH and
/// AT_SYMLINK_NOFOLLOW: a symlink itself for a descriptor opened without following).
///
/// # Errors
/// The host's errno.
pub fn stat(fd: BorrowedFd<'_>) -> Result<libc::stat, Errno> {
    // SAFETY: `libc::stat` is plain integers; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let flags = AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW;
    // SAFETY: the empty path and a writable `struct stat`.
    cvt(unsafe { libc::fstatat(fd.as_raw_fd(), c"".as_ptr(), &mut st, flags) })?;
    Ok(st)
}

/// The bytes of `st`: Linux x86-64's `struct stat`, as the guest is handed it.
pub fn stat_bytes(st: &libc::stat) -> &[u8] {
    bytes_of(st)
}

/// statx(2) of the inode `fd` refers to (the empty path with AT_EMPTY_PATH and
/// AT_SYMLINK_NOFOLLOW) for the fields in `mask`: Linux x86-64's `struct statx`, as bytes.
///
/// # Errors
/// The host's errno.
pub fn statx(fd: BorrowedFd<'_>, mask: u32) -> Result<[u8; STATX_SIZE], Errno> {
    // SAFETY: `libc::statx` is plain integers; all zeroes is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let flags = AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW;
    // SAFETY: the empty path and a writable `struct statx`.
    cvt(unsafe { libc::statx(fd.as_raw_fd(), c"".as_ptr(), flags, mask, &mut stx) })?;
    let mut out = [0u8; STATX_SIZE];
    out.copy_from_slice(bytes_of(&stx));
    Ok(out)
}

/// The `struct statx` bytes of a file the kernel describes itself by `st` (basic fields:
/// type, mode, links, ids, inode, size, blocks and the three times; its device split in two).
pub fn statx_of(st: &libc::stat) -> [u8; STATX_SIZE] {
    // SAFETY: `libc::statx` is plain integers; all zeroes is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    stx.stx_mask = libc::STATX_BASIC_STATS;
    stx.stx_blksize = st.st_blksize as u32;
    stx.stx_nlink = st.st_nlink as u32;
    stx.stx_uid = st.st_uid;
    stx.stx_gid = st.st_gid;
    stx.stx_mode = st.st_mode as u16;
    stx.stx_ino = st.st_ino;
    stx.stx_size = st.st_size as u64;
    stx.stx_blocks = st.st_blocks as u64;
    (stx.stx_atime.tv_sec, stx.stx_atime.tv_nsec) = (st.st_atime, st.st_atime_nsec as u32);
    (stx.stx_mtime.tv_sec, stx.stx_mtime.tv_nsec) = (st.st_mtime, st.st_mtime_nsec as u32);
    (stx.stx_ctime.tv_sec, stx.stx_ctime.tv_nsec) = (st.st_ctime, st.st_ctime_nsec as u32);
    stx.stx_dev_major = libc::major(st.st_dev);
    stx.stx_dev_minor = libc::minor(st.st_dev);
    let mut out = [0u8; STATX_SIZE];
    out.copy_from_slice(bytes_of(&stx));
    out
}

/// readlinkat(2) of the symlink `fd` refers to (the empty path: an `O_PATH | O_NOFOLLOW`
/// descriptor of a symlink) into `buf`; the length of the target written (truncated to
/// `buf`, no NUL).
///
/// # Errors
/// The host's errno (ENOENT when `fd` is no symlink).
pub fn readlink(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize, Errno> {
    let (v, n) = (buf.as_mut_ptr().cast(), buf.len());
    // SAFETY: the empty path, a writable buffer of `n` bytes.
    cvt_size(unsafe { libc::readlinkat(fd.as_raw_fd(), c"".as_ptr(), v, n) })
}

/// fstatfs(2): Linux x86-64's `struct statfs` of the filesystem holding the file, as bytes.
///
/// # Errors
/// The host's errno.
pub fn statfs(fd: BorrowedFd<'_>) -> Result<[u8; STATFS_SIZE], Errno> {
    // SAFETY: `libc::statfs` is plain integers; all zeroes is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a writable `struct statfs`.
    cvt(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) })?;
    let mut out = [0u8; STATFS_SIZE];
    out.copy_from_slice(bytes_of(&st));
    Ok(out)
}

/// fstatvfs(3): the filesystem holding the file (its `f_flag` says `ST_NOSUID`, `ST_RDONLY`…).
///
/// # Errors
/// The host's errno.
pub fn fstatvfs(fd: BorrowedFd<'_>) -> Result<libc::statvfs, Errno> {
    // SAFETY: `libc::statvfs` is plain integers; all zeroes is a valid value.
    let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a writable `struct statvfs`.
    cvt(unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut vfs) })?;
    Ok(vfs)
}

/// `sizeof(struct file_attr)` (FILE_ATTR_SIZE_VER0 = FILE_ATTR_SIZE_LATEST).
pub const FILE_ATTR_SIZE: usize = 24;
/// file_getattr(2)'s syscall number (x86-64; not in every libc).
const SYS_FILE_GETATTR: libc::c_long = 468;
/// file_setattr(2)'s.
const SYS_FILE_SETATTR: libc::c_long = 469;

/// file_getattr(2) of the inode `fd` refers to (by its `/proc/self/fd` link, as an
/// `O_PATH` descriptor is no file to these calls): its `struct file_attr` (xflags, extent
/// sizes, project id), as bytes.
///
/// # Errors
/// The host's errno (EOPNOTSUPP where the filesystem has no such attributes).
pub fn file_getattr(fd: BorrowedFd<'_>) -> Result<[u8; FILE_ATTR_SIZE], Errno> {
    let mut out = [0u8; FILE_ATTR_SIZE];
    let path = super::host_fd_path(&fd);
    // SAFETY: a NUL-terminated path and a writable buffer of the structure's size.
    let r = unsafe {
        libc::syscall(
            SYS_FILE_GETATTR,
            libc::AT_FDCWD,
            path.as_ptr(),
            out.as_mut_ptr(),
            FILE_ATTR_SIZE,
            0,
        )
    };
    cvt_size(r as isize)?;
    Ok(out)
}

/// file_setattr(2) of the inode `fd` refers to (by its `/proc/self/fd` link) with `attr` (a
/// `struct file_attr`).
///
/// # Errors
/// The host's errno (EINVAL for unknown flags, EPERM, EOPNOTSUPP...).
pub fn file_setattr(fd: BorrowedFd<'_>, attr: &[u8; FILE_ATTR_SIZE]) -> Result<(), Errno> {
    let path = super::host_fd_path(&fd);
    // SAFETY: a NUL-terminated path and a readable buffer of the structure's size.
    let r = unsafe {
        libc::syscall(
            SYS_FILE_SETATTR,
            libc::AT_FDCWD,
            path.as_ptr(),
            attr.as_ptr(),
            FILE_ATTR_SIZE,
            0,
        )
    };
    cvt_size(r as isize).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::fd::AsFd;

    fn scratch(tag: &str) -> (std::path::PathBuf, std::fs::File) {
        let d = std::env::temp_dir().join(format!("torpor-fs-host-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let f = std::fs::File::open(&d).unwrap();
        (d, f)
    }

    #[test]
    fn names_are_made_moved_and_removed() {
        let (d, dir) = scratch("names");
        let dir = dir.as_fd();
        mkdirat(dir, c"a", 0o755).unwrap();
        assert_eq!(mkdirat(dir, c"a", 0o755), Err(Errno::EEXIST));
        renameat2(dir, c"a", dir, c"b", 0).unwrap();
        mknodat(dir, c"f", libc::S_IFREG | 0o600, 0).unwrap();
        assert_eq!(
            renameat2(dir, c"f", dir, c"b", 1), // RENAME_NOREPLACE
            Err(Errno::EEXIST)
        );
        symlinkat(c"/no/where", dir, c"l").unwrap();
        let l = crate::fd::host::open(
            &CString::new(d.join("l").into_os_string().into_encoded_bytes()).unwrap(),
            libc::O_PATH | libc::O_NOFOLLOW,
        )
        .unwrap();
        let mut buf = [0u8; 64];
        let n = readlink(l.as_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..n], b"/no/where");
        assert_eq!(
            stat(l.as_fd()).unwrap().st_mode & libc::S_IFMT,
            libc::S_IFLNK
        );
        let f = std::fs::File::open(d.join("f")).unwrap();
        assert_eq!(readlink(f.as_fd(), &mut buf), Err(Errno::ENOENT));
        assert_eq!(unlinkat(dir, c"b", 0), Err(Errno::EISDIR));
        unlinkat(dir, c"b", libc::AT_REMOVEDIR).unwrap();
        let proc = super::super::host_fd_path(&f);
        link_path(&proc, dir, c"g").unwrap();
        assert_eq!(stat(f.as_fd()).unwrap().st_nlink, 2);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn status_comes_back_as_linux_bytes() {
        let (d, dir) = scratch("stat");
        let st = stat(dir.as_fd()).unwrap();
        let b = stat_bytes(&st);
        assert_eq!(b.len(), 144);
        assert_eq!(&b[8..16], &st.st_ino.to_le_bytes());
        let x = statx(dir.as_fd(), libc::STATX_BASIC_STATS).unwrap();
        assert_eq!(STATX_SIZE, 256);
        assert_eq!(&x[32..40], &st.st_ino.to_le_bytes()); // stx_ino
        let fs = statfs(dir.as_fd()).unwrap();
        assert_eq!(STATFS_SIZE, 120);
        assert_ne!(&fs[8..16], &[0; 8]); // f_bsize
        assert!(fstatvfs(dir.as_fd()).unwrap().f_bsize > 0);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn modes_times_and_length_change() {
        let (d, dir) = scratch("attrs");
        mknodat(dir.as_fd(), c"f", libc::S_IFREG | 0o600, 0).unwrap();
        let f = std::fs::File::open(d.join("f")).unwrap();
        fchmod(f.as_fd(), 0o640).unwrap();
        assert_eq!(stat(f.as_fd()).unwrap().st_mode & 0o7777, 0o640);
        let proc = super::super::host_fd_path(&f);
        chmod_path(&proc, 0o604).unwrap();
        assert_eq!(stat(f.as_fd()).unwrap().st_mode & 0o7777, 0o604);
        let ts = libc::timespec {
            tv_sec: 1_000_000,
            tv_nsec: 0,
        };
        utimens_fd(f.as_fd(), Some(&[ts, ts])).unwrap();
        assert_eq!(stat(f.as_fd()).unwrap().st_mtime, 1_000_000);
        let later = libc::timespec {
            tv_sec: 2_000_000,
            tv_nsec: 0,
        };
        utimens_empty_path(f.as_fd(), Some(&[later, later])).unwrap();
        assert_eq!(stat(f.as_fd()).unwrap().st_atime, 2_000_000);
        chmod_path(&proc, 0o600).unwrap();
        truncate_path(&proc, 10).unwrap();
        assert_eq!(stat(f.as_fd()).unwrap().st_size, 10);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_directory_is_read_and_rewound() {
        let (d, _) = scratch("dents");
        std::fs::write(d.join("x"), b"").unwrap();
        let dir = std::fs::File::open(&d).unwrap();
        let mut buf = [0u8; 4096];
        let n = getdents64(dir.as_fd(), &mut buf).unwrap();
        assert!(n > 0);
        assert_eq!(getdents64(dir.as_fd(), &mut buf), Ok(0));
        assert_eq!(crate::fd::host::seek(dir.as_fd(), 0, libc::SEEK_SET), Ok(0));
        assert_eq!(getdents64(dir.as_fd(), &mut [0u8; 8]), Err(Errno::EINVAL));
        assert_eq!(getdents64(dir.as_fd(), &mut buf), Ok(n));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn user_attributes_round_trip_where_the_host_keeps_them() {
        let (d, _) = scratch("xattr");
        std::fs::write(d.join("f"), b"").unwrap();
        let f = std::fs::File::open(d.join("f")).unwrap();
        let proc = super::super::host_fd_path(&f);
        match setxattr(&proc, c"user.torpor", b"v1", 0) {
            Err(Errno::EOPNOTSUPP) => return, // no user xattrs on this filesystem
            r => r.unwrap(),
        }
        let mut buf = [0u8; 64];
        assert_eq!(fgetxattr(f.as_fd(), c"user.torpor", &mut []), Ok(2));
        assert_eq!(getxattr(&proc, c"user.torpor", &mut buf), Ok(2));
        assert_eq!(&buf[..2], b"v1");
        fsetxattr(f.as_fd(), c"user.torpor", b"v22", 0).unwrap();
        assert_eq!(
            fgetxattr(f.as_fd(), c"user.torpor", &mut buf[..1]),
            Err(Errno::ERANGE)
        );
        let n = flistxattr(f.as_fd(), &mut buf).unwrap();
        assert!(buf[..n].windows(12).any(|w| w == b"user.torpor\0"));
        assert_eq!(listxattr(&proc, &mut []), Ok(n));
        removexattr(&proc, c"user.torpor").unwrap();
        assert_eq!(
            fremovexattr(f.as_fd(), c"user.torpor"),
            Err(Errno(libc::ENODATA))
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
