//! file_getattr(2) and file_setattr(2): a file's extended attributes of the inode (the
//! FS_IOC_FSGETXATTR ones: xflags, extent sizes, project id) by path.
//!
//! The path is torpor's to resolve (in the root, with the guest's AT_* flags); the attributes
//! are the host file's, read and set by the host's own calls on that inode, so a filesystem
//! without them answers EOPNOTSUPP as it would natively.

use std::os::fd::AsFd;

use abi::Errno;

use super::sys_stat::open_path;
use super::{SysResult, SyscallArgs};
use crate::fs::host::{self, FILE_ATTR_SIZE};
use crate::task::Task;

const AT_SYMLINK_NOFOLLOW: i32 = 0x100;
const AT_EMPTY_PATH: i32 = 0x1000;
const PAGE_SIZE: usize = 4096;

/// The checks both calls make first: the flags (EINVAL), then the size (E2BIG above a page,
/// EINVAL below the first version's).
fn check(flags: i32, size: usize) -> Result<(), Errno> {
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return Err(Errno::EINVAL);
    }
    if size > PAGE_SIZE {
        return Err(Errno::E2BIG);
    }
    if size < FILE_ATTR_SIZE {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// The file named by `dirfd` and the path at `name` (NULL or empty with AT_EMPTY_PATH:
/// `dirfd` itself), as an O_PATH descriptor.
fn target(t: &Task, a: &SyscallArgs, flags: i32) -> Result<std::os::fd::OwnedFd, Errno> {
    let path = if a.u(1) == 0 && flags & AT_EMPTY_PATH != 0 {
        Vec::new()
    } else {
        t.copy_in_str(a.gva(1), libc::PATH_MAX as usize)?
    };
    open_path(t, a.int(0), &path, flags)
}

/// Implements file_getattr(2): the attributes copied out as `copy_struct_to_user` does (a
/// larger buffer's tail zeroed).
pub fn sys_file_getattr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (size, flags) = (a.u(3) as usize, a.int(4));
    check(flags, size)?;
    let fd = target(t, a, flags)?;
    let attr = host::file_getattr(fd.as_fd())?;
    let mut out = vec![0u8; size];
    out[..FILE_ATTR_SIZE].copy_from_slice(&attr);
    t.copy_out(a.gva(2), &out)?;
    Ok(0)
}

/// Implements file_setattr(2): the structure is read (a larger one's tail must be zero:
/// E2BIG) before the path is looked up.
pub fn sys_file_setattr(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (size, flags) = (a.u(3) as usize, a.int(4));
    check(flags, size)?;
    let mut raw = vec![0u8; size];
    t.copy_in(a.gva(2), &mut raw)?;
    if raw[FILE_ATTR_SIZE..].iter().any(|&b| b != 0) {
        return Err(Errno::E2BIG);
    }
    let mut attr = [0u8; FILE_ATTR_SIZE];
    attr.copy_from_slice(&raw[..FILE_ATTR_SIZE]);
    let fd = target(t, a, flags)?;
    host::file_setattr(fd.as_fd(), &attr)?;
    Ok(0)
}
