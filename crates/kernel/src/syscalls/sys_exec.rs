//! execve(2): replaces the calling process's program.
//!
//! The new image is built beside the old one: fresh guest memory and VM, the ELF (and its
//! interpreter) loaded, the stack written. Any failure up to there returns an errno to the
//! old program, untouched. Then the task switches to the new VM's vCPU (the point of no
//! return), closes its close-on-exec descriptors and resets its signal handlers; the old
//! memory is freed when its last reference goes. `#!` scripts run their interpreter.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

use abi::Errno;
use mm::MemoryManager;
use platform::Gva;

use super::{SysResult, SyscallArgs};
use crate::fs;
use crate::loader::{self, LoadError};
use crate::task::Task;

/// Most bytes of arguments plus environment (Linux's default ARG_MAX with an 8 MiB stack).
const MAX_ARG_BYTES: usize = 2 << 20;
/// Most argv or envp entries.
const MAX_ARG_COUNT: usize = 0x7fff_ffff / 8;
/// Most nested `#!` interpreters (Linux allows 4 levels, then ELOOP).
const MAX_INTERP_DEPTH: usize = 4;
/// Longest `#!` line read (Linux's BINPRM_BUF_SIZE).
const SHEBANG_MAX: usize = 256;

/// Implements execve(2).
pub fn sys_execve(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let path = t.copy_in_path(a.gva(0))?;
    let mut budget = MAX_ARG_BYTES;
    let argv = read_strings(t, a.gva(1), &mut budget)?;
    let envp = read_strings(t, a.gva(2), &mut budget)?;
    execve(t, path, argv, envp)
}

/// Implements execveat(2): the program is `path` relative to `dirfd` (AT_FDCWD: the working
/// directory), or with AT_EMPTY_PATH and an empty path the file open on `dirfd` (glibc's
/// fexecve), found again by the guest path it was opened by. With AT_SYMLINK_NOFOLLOW a
/// symlink as the last component is ELOOP.
pub fn sys_execveat(t: &mut Task, a: &SyscallArgs) -> SysResult {
    const AT_EMPTY_PATH: i32 = 0x1000;
    const AT_SYMLINK_NOFOLLOW: i32 = 0x100;
    let (dirfd, flags) = (a.int(0), a.int(4));
    if flags & !(AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0 {
        return Err(Errno::EINVAL);
    }
    let rel = t.copy_in_str(a.gva(1), libc::PATH_MAX as usize)?;
    let path = if rel.is_empty() {
        if flags & AT_EMPTY_PATH == 0 {
            return Err(Errno::ENOENT);
        }
        let f = t.fds.get(dirfd)?;
        match (&f.kind, &f.path) {
            (crate::fd::FileKind::Directory, _) => return Err(Errno::EACCES),
            (crate::fd::FileKind::Regular | crate::fd::FileKind::Memfd, Some(p)) => p.clone(),
            _ => return Err(Errno::EACCES),
        }
    } else {
        super::sys_file::resolve(t, dirfd, &rel)?
    };
    if flags & AT_SYMLINK_NOFOLLOW != 0 && !rel.is_empty() {
        let fd = t.root.open_at(&path, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        let st = crate::fd::host::fstat(fd.as_fd())?;
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            return Err(Errno::ELOOP);
        }
    }
    let mut budget = MAX_ARG_BYTES;
    let argv = read_strings(t, a.gva(2), &mut budget)?;
    let envp = read_strings(t, a.gva(3), &mut budget)?;
    execve(t, path, argv, envp)
}

/// Reads a NULL-terminated array of string pointers (a NULL array is empty).
fn read_strings(t: &Task, at: Gva, budget: &mut usize) -> Result<Vec<Vec<u8>>, Errno> {
    let mut out = Vec::new();
    if at.raw() == 0 {
        return Ok(out);
    }
    for i in 0..MAX_ARG_COUNT {
        let p = t.read_u64(Gva(at
            .raw()
            .checked_add(8 * i as u64)
            .ok_or(Errno::EFAULT)?))?;
        if p == 0 {
            return Ok(out);
        }
        let s = t.copy_in_str(Gva(p), *budget).map_err(|e| {
            if e == Errno::ENAMETOOLONG {
                Errno::E2BIG
            } else {
                e
            }
        })?;
        *budget = budget.checked_sub(s.len() + 1).ok_or(Errno::E2BIG)?;
        out.push(s);
    }
    Err(Errno::E2BIG)
}

fn load_errno(e: &LoadError) -> Errno {
    match e {
        LoadError::NoInterpreter { errno, .. } => *errno,
        LoadError::Read { .. } => Errno::EIO,
        LoadError::Map { .. } => Errno::ENOMEM,
        _ => Errno::ENOEXEC,
    }
}

/// ETXTBSY when a process of the sandbox has the regular file `key` (device, inode) open
/// for writing (Linux's `deny_write_access` at exec). Every descriptor table of the sandbox
/// is looked at once: an exec is rare beside the opens it would otherwise slow down.
fn refuse_file_open_for_writing(t: &Task, key: crate::fd::locks::FileKey) -> Result<(), Errno> {
    for table in t.sandbox_fd_tables() {
        for (_, f) in table.iter() {
            if !matches!(f.kind, crate::fd::FileKind::Regular) {
                continue;
            }
            if crate::fd::locks::regular_file_key(f.host()) != Some(key) {
                continue;
            }
            let writes = crate::fd::host::status_flags(f.host())
                .is_ok_and(|fl| fl & libc::O_ACCMODE != libc::O_RDONLY && fl & libc::O_PATH == 0);
            if writes {
                return Err(Errno(libc::ETXTBSY));
            }
        }
    }
    Ok(())
}

/// Opens `path` for execution, as the task: a regular file it may execute (Linux's
/// `may_open` with MAY_EXEC: an execute bit it is granted, or, with CAP_DAC_OVERRIDE, any
/// execute bit). The caller acts as the task ([`crate::fs::identity`]).
fn open_executable(t: &Task, path: &[u8]) -> Result<(OwnedFd, Vec<u8>), Errno> {
    let mut gpath = fs::join(&t.cwd(), path);
    // `/proc/self/exe` (a program running itself again) names the caller's program.
    if crate::fs::procfs::self_relative(&gpath, t.pid) == Some("exe") {
        gpath = t.exe.clone();
    }
    let fd = t.root.open_at(&gpath, libc::O_RDONLY, 0)?;
    let st = crate::fd::host::fstat(fd.as_fd())?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_mode & 0o111 == 0 {
        return Err(Errno::EACCES);
    }
    crate::fs::identity::permits(std::os::fd::AsFd::as_fd(&fd), &t.creds, libc::X_OK)?;
    let shown = t.root.guest_path_of(&fd).unwrap_or(gpath);
    Ok((fd, shown))
}

/// The task's credentials once it runs the program open on `fd` (its set-user-ID and
/// set-group-ID bits honoured unless the task has `no_new_privs` or the file lies on a
/// nosuid mount), and whether the exec is secure (AT_SECURE).
fn creds_after_exec(t: &Task, fd: &OwnedFd) -> Result<(crate::creds::Credentials, bool), Errno> {
    let st = crate::fd::host::fstat(fd.as_fd())?;
    let mut honour = true;
    if st.st_mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
        if let Ok(vfs) = crate::fs::host::fstatvfs(fd.as_fd()) {
            honour = vfs.f_flag & libc::ST_NOSUID == 0;
        }
    }
    let mut creds = (*t.creds).clone();
    let secure = creds.exec((st.st_uid, st.st_gid), st.st_mode, honour);
    Ok((creds, secure))
}

/// Parses a `#!interpreter [arg]` line (the first bytes of a file, at most 256) as Linux's
/// `load_script` does (fs/binfmt_script.c): the interpreter and its optional argument, or
/// None when `head` is not a script or its interpreter path is cut off by the 256-byte
/// limit (never run a truncated path). The interpreter ends at the first space, tab or NUL,
/// the argument at the end of the line or the first NUL (both are C strings on Linux). One
/// leniency: carriage returns at the end of the line are trimmed with spaces and tabs, so
/// that CRLF scripts run. Public for the fuzz targets (`fuzz/`).
pub fn parse_shebang(head: &[u8]) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    let spacetab = |c: u8| c == b' ' || c == b'\t';
    // Linux's bprm->buf: the first SHEBANG_MAX bytes, NUL-padded.
    let mut buf = [0u8; SHEBANG_MAX];
    let n = head.len().min(SHEBANG_MAX);
    buf[..n].copy_from_slice(&head[..n]);
    if !buf.starts_with(b"#!") {
        return None;
    }
    let last = SHEBANG_MAX - 1;
    let non_spacetab = |from: usize, to: usize| (from..=to).find(|&i| !spacetab(buf[i]));
    let terminator =
        |from: usize, to: usize| (from..=to).find(|&i| spacetab(buf[i]) || buf[i] == 0);
    // The line ends at the first newline before any NUL; without one, the interpreter must
    // be followed by a space, tab or NUL within the buffer, else it may be truncated.
    let newline = buf
        .iter()
        .take_while(|&&c| c != 0)
        .position(|&c| c == b'\n');
    let mut end = match newline {
        Some(i) => i,
        None => {
            terminator(non_spacetab(2, last)?, last)?;
            last
        }
    };
    while spacetab(buf[end - 1]) || buf[end - 1] == b'\r' {
        end -= 1;
    }
    let name = non_spacetab(2, end)?;
    if name == end {
        return None;
    }
    let sep = terminator(name, end);
    let arg = match sep {
        Some(s) if buf[s] != 0 => non_spacetab(s, end),
        _ => None,
    };
    let c_string = |from: usize, to: usize| -> Vec<u8> {
        buf[from..to]
            .iter()
            .take_while(|&&c| c != 0)
            .copied()
            .collect()
    };
    let name_end = match (arg, sep) {
        (Some(_), Some(s)) => s,
        _ => end,
    };
    Some((c_string(name, name_end), arg.map(|a| c_string(a, end))))
}

/// Replaces the task's program with `path` run with `argv` and `envp`.
///
/// # Errors
/// The errno for the old program: ENOENT, EACCES, ENOEXEC, ELOOP, E2BIG, ENOMEM, EAGAIN.
pub(crate) fn execve(
    t: &mut Task,
    mut path: Vec<u8>,
    mut argv: Vec<Vec<u8>>,
    envp: Vec<Vec<u8>>,
) -> SysResult {
    let mut depth = 0;
    // An empty argv gets an empty argv[0], as Linux does since 5.18 (programs assume argc >= 1).
    if argv.is_empty() {
        argv.push(Vec::new());
    }
    // The program and its interpreters are found and opened as the task; the new VM is the
    // runtime's to build.
    let acting = crate::fs::identity::act_as(&t.creds.clone())?;
    let (fd, exe) = loop {
        let (fd, exe) = open_executable(t, &path)?;
        let mut head = [0u8; SHEBANG_MAX];
        let n = crate::fd::host::pread(fd.as_fd(), &mut head, 0).map_err(|_| Errno::EIO)?;
        let Some((interp, arg)) = parse_shebang(&head[..n]) else {
            break (fd, exe);
        };
        depth += 1;
        if depth > MAX_INTERP_DEPTH {
            return Err(Errno::ELOOP);
        }
        // argv becomes: interpreter [arg] script-path original-argv[1..].
        let mut new_argv = vec![interp.clone()];
        new_argv.extend(arg);
        new_argv.push(path.clone());
        new_argv.extend(argv.into_iter().skip(1));
        argv = new_argv;
        path = interp;
    };
    drop(acting);
    let name = String::from_utf8_lossy(&exe).into_owned();
    let exe_key = crate::fd::locks::regular_file_key(std::os::fd::AsFd::as_fd(&fd));
    if let Some(key) = exe_key {
        refuse_file_open_for_writing(t, key)?;
    }
    let (creds, secure) = creds_after_exec(t, &fd)?;

    let (mem, space) = super::sys_fork::new_space(&t.group.platform, t.mem.size(), "execve")?;
    let mut mm = MemoryManager::new(mem.clone()).map_err(|_| Errno::ENOMEM)?;
    mm.allocator().set_budget(t.group.procs.memory.clone());
    let acting = crate::fs::identity::act_as(&t.creds.clone())?;
    let image = loader::load_elf(
        &mut mm,
        &t.root,
        &name,
        std::fs::File::from(fd),
        Some(&t.group.procs.shm),
    )
    .map_err(|e| {
        tracing::debug!("execve {name}: {e}");
        load_errno(&e)
    })?;
    drop(acting);
    mm.set_brk_base(image.brk);
    let ids = loader::AuxIds::of(&creds, secure);
    let vdso = t.group.platform.vdso().map(|v| v.ehdr);
    let stack = loader::build_stack(&mut mm, &image, &argv, &envp, &path, ids, vdso)
        .map_err(|_| Errno::E2BIG)?;
    let mut ctx = space.new_context(mm.cr3()).map_err(|e| {
        tracing::warn!("execve: {e}");
        Errno::EAGAIN
    })?;
    ctx.user_mut().regs.rip = image.entry.raw();
    ctx.user_mut().regs.rsp = stack.sp.raw();

    // Linux's de_thread: the other threads of the process end, and this one takes the
    // process id. (If they cannot be ended, the exec fails before anything changed.)
    if t.group.live() > 1 {
        if !t
            .group
            .end_other_threads(t.tid, t.pid, std::time::Duration::from_secs(5))
        {
            tracing::warn!("execve: the process's other threads did not end");
            return Err(Errno::EAGAIN);
        }
        t.tid = t.pid;
    }

    // Point of no return: the task moves to the new address space.
    t.ctx.unbind_thread();
    ctx.bind_to_current_thread();
    t.control.set_kicker(ctx.kicker());
    t.ctx = ctx;
    t.mm = Arc::new(Mutex::new(mm));
    t.mem = mem;
    // A descriptor table shared with another process (clone with CLONE_FILES) becomes the
    // caller's own: its close-on-exec closes must not reach the other process.
    super::sys_ns::unshare_files(t);
    t.group.set_space(space);
    t.group.set_resources(crate::task::ProcessResources {
        mm: t.mm.clone(),
        mem: t.mem.clone(),
        fds: t.fds.clone(),
        space: t.group.space(),
    });
    t.fds.close_on_exec();
    t.signals.reset_for_exec();
    t.group.posix_timers.clear();
    // The AIO contexts went with the old address space, their rings in it.
    t.group.aio.clear(&t.group.procs.aio_nr);
    // membarrier registrations belong to the old address space (Linux's
    // membarrier_exec_mmap).
    t.group
        .membarrier
        .store(0, std::sync::atomic::Ordering::Relaxed);
    t.clear_child_tid = 0;
    // The old program's robust list is gone with its memory (glibc registers the new one).
    t.control.set_robust_list(0);
    t.exe = exe;
    t.creds = Arc::new(creds);
    t.group.set_exe_key(exe_key);
    t.cmdline = crate::task::cmdline_of(&argv);
    t.environ = crate::task::cmdline_of(&envp);
    t.control.set_comm(crate::sandbox::comm_of(&name));
    t.publish_identity();
    t.group.procs.release_vfork(t.pid);
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::parse_shebang;

    #[test]
    fn shebang_lines() {
        assert_eq!(
            parse_shebang(b"#!/bin/sh\necho"),
            Some((b"/bin/sh".to_vec(), None))
        );
        assert_eq!(
            parse_shebang(b"#! /usr/bin/env  python3 \r\n"),
            Some((b"/usr/bin/env".to_vec(), Some(b"python3".to_vec())))
        );
        assert_eq!(
            parse_shebang(b"#!/bin/busybox sh -e\n"),
            Some((b"/bin/busybox".to_vec(), Some(b"sh -e".to_vec())))
        );
        assert_eq!(parse_shebang(b"#!   \n"), None);
        assert_eq!(parse_shebang(b"\x7fELF"), None);
        assert_eq!(
            parse_shebang(b"#!/bin/sh"),
            Some((b"/bin/sh".to_vec(), None))
        );
    }

    /// Found by the `shebang` fuzz target (differential against Linux's binfmt_script).
    #[test]
    fn shebang_lines_as_linux_cuts_them() {
        // An interpreter path cut off by the 256-byte limit is not run (Linux: ENOEXEC).
        let mut long = b"#!/".to_vec();
        long.resize(300, b'a');
        assert_eq!(parse_shebang(&long[..256]), None);
        // A path that ends within the limit, and an argument that does not, are fine.
        let mut ok = b"#!/bin/sh ".to_vec();
        ok.resize(300, b'x');
        let (interp, arg) = parse_shebang(&ok[..256]).unwrap();
        assert_eq!(interp, b"/bin/sh");
        assert_eq!(arg.unwrap().len(), 256 - 10 - 1);
        // A NUL ends the interpreter and the argument (C strings).
        assert_eq!(
            parse_shebang(b"#!/bin/sh\0-x\n"),
            Some((b"/bin/sh".to_vec(), None))
        );
        assert_eq!(
            parse_shebang(b"#!/bin/sh -e\0x y\n"),
            Some((b"/bin/sh".to_vec(), Some(b"-e".to_vec())))
        );
        // A newline after a NUL does not end the line.
        assert_eq!(
            parse_shebang(b"#!/bin/sh \0\n"),
            Some((b"/bin/sh".to_vec(), Some(Vec::new())))
        );
    }
}
