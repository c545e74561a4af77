//! Descriptor tables in a checkpoint: each open file saved by what it is (path and offset,
//! a pipe's buffered bytes, an eventfd's counter), and made again at restore.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use super::blobs::{BlobWriter, Blobs};
use super::state::{FdState, FilesState, OpenFileState};
use super::CheckpointError;
use crate::fd::{FdTable, FileKind, OpenFile};
use crate::fs::Root;
use crate::net::host::fstat;

/// Flags a reopen must not repeat: the file exists and keeps its bytes.
const CREATION_FLAGS: i32 = libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC;

/// Saves the descriptor tables `tables` (each process's, by pid) and the open files they
/// refer to, each once (descriptors made by dup, inherited by fork or passed between the
/// sandbox's processes share one); bulk bytes into `blobs`. Returns each table's state, in
/// order, and the open files they index.
///
/// # Errors
/// [`CheckpointError::Unsupported`] naming the descriptor and what it is, for an object a
/// checkpoint cannot save yet; the host's error reading one.
pub fn export(
    tables: &[(i32, &FdTable)],
    root: &Root,
    net: &crate::net::NetPolicy,
    blobs: &mut BlobWriter,
    keep: Option<&std::cell::RefCell<Vec<OwnedFd>>>,
) -> Result<(Vec<FilesState>, Vec<OpenFileState>), CheckpointError> {
    let mut index: HashMap<*const OpenFile, usize> = HashMap::new();
    let mut open_files: Vec<Option<OpenFileState>> = Vec::new();
    let mut states = Vec::new();
    // (pid, fd, file) of every descriptor of every table.
    let mut all: Vec<(i32, i32, Arc<OpenFile>)> = Vec::new();
    for (pid, fds) in tables {
        let mut out = Vec::new();
        for (fd, file) in fds.iter() {
            let cloexec = fds.cloexec(fd).unwrap_or(false);
            let key = Arc::as_ptr(&file);
            let at = match index.get(&key) {
                Some(&i) => i,
                None => {
                    open_files.push(None);
                    index.insert(key, open_files.len() - 1);
                    open_files.len() - 1
                }
            };
            out.push(FdState {
                fd,
                cloexec,
                file: at,
            });
            all.push((*pid, fd, file));
        }
        states.push(FilesState {
            limit: fds.limit(),
            fds: out,
        });
    }
    // The sandbox's Unix sockets, by host inode: a connected one's peer among them is a pair.
    let unix: std::collections::HashSet<u64> = all
        .iter()
        .filter(|(_, _, f)| {
            f.socket_state()
                .is_some_and(|st| st.family == libc::AF_UNIX)
        })
        .filter_map(|(_, _, f)| crate::net::host::inode(f.host()).ok())
        .collect();
    let cx = Context {
        root,
        net,
        unix: &unix,
        pipes: std::cell::RefCell::new(HashMap::new()),
        keep,
    };
    // Every open file once; epoll instances once the files they watch have their places.
    let by_host: HashMap<i32, usize> = all
        .iter()
        .filter_map(|(_, _, f)| {
            index
                .get(&Arc::as_ptr(f))
                .map(|&i| (f.host().as_raw_fd(), i))
        })
        .collect();
    for pass_epoll in [false, true] {
        for (pid, fd, file) in &all {
            let at = index[&Arc::as_ptr(file)];
            let is_epoll = matches!(file.kind, FileKind::Epoll);
            if is_epoll != pass_epoll || open_files[at].is_some() {
                continue;
            }
            let state = if is_epoll {
                export_epoll(*pid, *fd, file, &by_host)?
            } else {
                export_file(*pid, *fd, file, &cx, blobs)?
            };
            open_files[at] = Some(state);
        }
    }
    Ok((states, open_files.into_iter().flatten().collect()))
}

/// Saves an epoll instance: its interest list from the host's `fdinfo` (`tfd: N events: E
/// data: D …` per watched descriptor), each watched host descriptor named by its open file.
fn export_epoll(
    pid: i32,
    fd: i32,
    file: &OpenFile,
    by_host: &HashMap<i32, usize>,
) -> Result<OpenFileState, CheckpointError> {
    let what =
        |w: String| CheckpointError::Unsupported(format!("process {pid}, descriptor {fd}: {w}"));
    let host = file.host();
    let flags = get_fl(host).map_err(|e| CheckpointError::Host(format!("F_GETFL: {e}")))?;
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", host.as_raw_fd()))
        .map_err(|e| CheckpointError::Host(format!("epoll fdinfo: {e}")))?;
    let mut targets = Vec::new();
    for line in info.lines().filter(|l| l.starts_with("tfd:")) {
        let mut it = line.split_whitespace();
        let mut field = |name: &str| -> Option<&str> {
            while let Some(k) = it.next() {
                if k == name {
                    return it.next();
                }
            }
            None
        };
        let tfd = field("tfd:").and_then(|v| v.parse::<i32>().ok());
        let events = field("events:").and_then(|v| u32::from_str_radix(v, 16).ok());
        let data = field("data:").and_then(|v| u64::from_str_radix(v, 16).ok());
        let (Some(tfd), Some(events), Some(data)) = (tfd, events, data) else {
            return Err(CheckpointError::Host(format!(
                "an epoll fdinfo line {line:?}"
            )));
        };
        let file = *by_host.get(&tfd).ok_or_else(|| {
            what(
                "an epoll instance watching a descriptor the process no longer holds \
                  (not supported yet)"
                    .into(),
            )
        })?;
        targets.push(super::state::EpollTarget { file, events, data });
    }
    Ok(OpenFileState::Epoll { flags, targets })
}

/// What saving one open file needs beside it.
struct Context<'a> {
    root: &'a Root,
    net: &'a crate::net::NetPolicy,
    /// The table's Unix sockets (host inodes).
    unix: &'a std::collections::HashSet<u64>,
    /// The bytes of each pipe saved so far, by pipe inode: its two ends share them, read
    /// once.
    pipes: std::cell::RefCell<HashMap<u64, super::blobs::BlobRef>>,
    /// Where a dormant holder's checkpoint puts copies of the connected sockets it keeps.
    keep: Option<&'a std::cell::RefCell<Vec<OwnedFd>>>,
}

fn export_file(
    pid: i32,
    fd: i32,
    file: &OpenFile,
    cx: &Context<'_>,
    blobs: &mut BlobWriter,
) -> Result<OpenFileState, CheckpointError> {
    let root = cx.root;
    let host = file.host();
    let unsupported = |what: &str| {
        CheckpointError::Unsupported(format!("process {pid}, descriptor {fd}: {what}"))
    };
    let io = |what: &str, e: &dyn std::fmt::Display| {
        CheckpointError::Host(format!("process {pid}, descriptor {fd}: {what}: {e}"))
    };
    let flags = get_fl(host).map_err(|e| io("F_GETFL", &e))?;
    Ok(match &file.kind {
        FileKind::Stdio => OpenFileState::Stdio {
            stream: fd.clamp(0, 2),
        },
        FileKind::Regular => {
            let st = fstat(host).map_err(|e| io("fstat", &e))?;
            if st.st_nlink == 0 {
                return Err(unsupported("a deleted file (not supported yet)"));
            }
            let path = root
                .guest_path_of(&host.as_raw_fd())
                .map_err(|_| unsupported("a file outside the root"))?;
            match st.st_mode & libc::S_IFMT {
                libc::S_IFREG => {}
                libc::S_IFCHR => return Ok(OpenFileState::RootDevice { path, flags }),
                _ => return Err(unsupported("a FIFO or block device (not supported yet)")),
            }
            OpenFileState::Regular {
                path,
                flags,
                offset: tell(host).map_err(|e| io("lseek", &e))?,
                size: st.st_size as u64,
            }
        }
        FileKind::Directory => OpenFileState::Directory {
            path: root
                .guest_path_of(&host.as_raw_fd())
                .map_err(|_| unsupported("a directory outside the root"))?,
            flags,
            offset: tell(host).map_err(|e| io("lseek", &e))?,
        },
        FileKind::HostDevice => {
            let link = std::fs::read_link(format!("/proc/self/fd/{}", host.as_raw_fd()))
                .map_err(|e| io("readlink", &e))?;
            OpenFileState::HostDevice {
                path: link.into_os_string().into_encoded_bytes(),
                flags,
            }
        }
        FileKind::Pipe => {
            let st = fstat(host).map_err(|e| io("fstat", &e))?;
            let write_end = flags & libc::O_ACCMODE == libc::O_WRONLY;
            // SAFETY: F_GETPIPE_SZ on a descriptor we own.
            let capacity = unsafe { libc::fcntl(host.as_raw_fd(), libc::F_GETPIPE_SZ) };
            if capacity < 0 {
                return Err(io("F_GETPIPE_SZ", &std::io::Error::last_os_error()));
            }
            let saved = cx.pipes.borrow().get(&st.st_ino).copied();
            let data = match saved {
                Some(d) => d,
                None => {
                    let bytes = peek_pipe(host, capacity)
                        .map_err(|e| io("reading the pipe's bytes", &e))?;
                    let d = blobs.add(&bytes);
                    cx.pipes.borrow_mut().insert(st.st_ino, d);
                    d
                }
            };
            OpenFileState::Pipe {
                pipe: st.st_ino,
                write_end,
                flags,
                capacity,
                data,
            }
        }
        FileKind::EventFd { semaphore } => OpenFileState::EventFd {
            count: eventfd_count(host).map_err(|e| io("reading the eventfd's counter", &e))?,
            semaphore: *semaphore,
            flags,
        },
        FileKind::ProcFile => {
            let path = file
                .path
                .clone()
                .ok_or_else(|| unsupported("a /proc file with no path"))?;
            if path.ends_with(b"/pagemap") {
                // A sparse file of 256 GiB, its entries this address space's: not saved.
                return Err(unsupported("an open /proc/PID/pagemap"));
            }
            // Read through a reopen of its memfd: a file of its own offset (the application's
            // stays), and readable whatever the access a tunable was opened with.
            let reader = crate::fs::reopen(&host.as_raw_fd(), libc::O_RDONLY)
                .map_err(|e| io("reopening the /proc file", &e))?;
            let mut content = Vec::new();
            std::io::Read::read_to_end(&mut std::fs::File::from(reader), &mut content)
                .map_err(|e| io("reading the /proc file", &e))?;
            OpenFileState::ProcFile {
                path,
                flags,
                offset: tell(host).map_err(|e| io("lseek", &e))?,
                content: blobs.add(&content),
            }
        }
        FileKind::Socket(m) => {
            let st = m.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if st.family == libc::AF_UNIX {
                super::sockets::export_unix(
                    file,
                    &st,
                    flags,
                    blobs,
                    cx.net,
                    &|ino| cx.unix.contains(&ino),
                    &unsupported,
                )?
            } else {
                super::sockets::export(file, &st, flags, cx.keep, &unsupported)?
            }
        }
        other => {
            return Err(unsupported(&format!(
                "{} (not supported yet)",
                kind_name(other)
            )))
        }
    })
}

/// What a descriptor is, for an error.
fn kind_name(kind: &FileKind) -> &'static str {
    match kind {
        FileKind::Regular => "a file",
        FileKind::Pipe => "a pipe",
        FileKind::EventFd { .. } => "an eventfd",
        FileKind::TimerFd => "a timerfd",
        FileKind::Inotify => "an inotify instance",
        FileKind::Memfd => "a memfd",
        FileKind::Pty { .. } => "a pseudo-terminal",
        FileKind::ProcFile => "a /proc file",
        FileKind::HostDevice => "a host device",
        FileKind::Directory => "a directory",
        FileKind::Stdio => "a standard stream",
        FileKind::Socket(_) => "a socket",
        FileKind::Epoll => "an epoll instance",
        FileKind::Pidfd(_) => "a pidfd",
        FileKind::Signalfd(_) => "a signalfd",
        FileKind::Mqueue(_) => "a POSIX message queue descriptor",
        FileKind::IoUring(_) => "an io_uring instance",
    }
}

/// Makes the open files `open_files` describes (the descriptor tables' objects: see
/// [`table`]). `stdio` are the restoring runtime's streams.
///
/// # Errors
/// [`CheckpointError::Restore`] naming the open file, for a file that is gone or changed, or
/// a malformed state.
pub fn import(
    open_files: &[OpenFileState],
    root: &Root,
    net: &Arc<crate::net::NetPolicy>,
    owner: crate::net::unix::Ucred,
    blobs: &Blobs,
    stdio: &[Option<OwnedFd>; 3],
) -> Result<Vec<Arc<OpenFile>>, CheckpointError> {
    let bad = |what: String| CheckpointError::Restore(what);
    // Unix sockets first, together: the two ends of a pair come from one socketpair.
    let mut unix_specs = Vec::new();
    for of in open_files {
        if let OpenFileState::UnixSocket {
            kind,
            flags,
            id,
            connected,
            peer,
            queued,
        } = of
        {
            let bytes = blobs
                .get(*queued)
                .map_err(|e| bad(format!("a Unix socket's queued bytes: {e}")))?;
            unix_specs.push(super::sockets::UnixSocketSpec {
                kind: *kind,
                flags: *flags,
                id: *id,
                connected: *connected,
                peer: *peer,
                queued: bytes,
            });
        }
    }
    let mut unix = super::sockets::import_unix(&unix_specs, net, owner).map_err(bad)?;
    // Pipes first: both ends of one pipe come from one pipe2.
    let mut pipes: HashMap<u64, (OwnedFd, OwnedFd)> = HashMap::new();
    let mut files: Vec<Option<Arc<OpenFile>>> = vec![None; open_files.len()];
    // Epoll instances last: they watch the others.
    let is_epoll = |f: &OpenFileState| matches!(f, OpenFileState::Epoll { .. });
    let order = open_files
        .iter()
        .enumerate()
        .filter(|(_, f)| !is_epoll(f))
        .chain(open_files.iter().enumerate().filter(|(_, f)| is_epoll(f)));
    // A Unix socket saved under several open files (one received through SCM_RIGHTS, here a
    // description of its own, is on Linux the sender's): one socket, shared by them.
    let mut unix_made: HashMap<u64, Arc<OpenFile>> = HashMap::new();
    for (i, of) in order {
        let fail =
            |what: &str, e: &dyn std::fmt::Display| bad(format!("open file {i}: {what}: {e}"));
        if let OpenFileState::UnixSocket { id, .. } = of {
            if let Some(f) = unix_made.get(id) {
                files[i] = Some(f.clone());
                continue;
            }
        }
        let file = match of {
            OpenFileState::Stdio { stream } => {
                let own = stdio
                    .get(*stream as usize)
                    .and_then(|s| s.as_ref())
                    .ok_or_else(|| bad(format!("open file {i}: no standard stream {stream}")))?;
                let dup = own.try_clone().map_err(|e| fail("dup", &e))?;
                OpenFile::new(dup, FileKind::Stdio, None)
            }
            OpenFileState::Regular {
                path,
                flags,
                offset,
                size,
            } => {
                let fd = root
                    .open_at(path, (flags & !CREATION_FLAGS) | libc::O_CLOEXEC, 0)
                    .map_err(|e| fail(&String::from_utf8_lossy(path), &e))?;
                let st = fstat(fd.as_fd()).map_err(|e| fail("fstat", &e))?;
                if st.st_size as u64 != *size && flags & libc::O_ACCMODE == libc::O_RDONLY {
                    return Err(bad(format!(
                        "{} changed since the checkpoint ({} bytes, was {size})",
                        String::from_utf8_lossy(path),
                        st.st_size
                    )));
                }
                seek(fd.as_fd(), *offset).map_err(|e| fail("lseek", &e))?;
                OpenFile::new(fd, FileKind::Regular, Some(path.clone()))
            }
            OpenFileState::RootDevice { path, flags } => {
                let fd = root
                    .open_at(path, (flags & !CREATION_FLAGS) | libc::O_CLOEXEC, 0)
                    .map_err(|e| fail(&String::from_utf8_lossy(path), &e))?;
                let st = fstat(fd.as_fd()).map_err(|e| fail("fstat", &e))?;
                if st.st_mode & libc::S_IFMT != libc::S_IFCHR {
                    return Err(bad(format!(
                        "{} is no longer a character device",
                        String::from_utf8_lossy(path)
                    )));
                }
                OpenFile::new(fd, FileKind::Regular, Some(path.clone()))
            }
            OpenFileState::Directory {
                path,
                flags,
                offset,
            } => {
                let fd = root
                    .open_at(
                        path,
                        (flags & !CREATION_FLAGS) | libc::O_DIRECTORY | libc::O_CLOEXEC,
                        0,
                    )
                    .map_err(|e| fail(&String::from_utf8_lossy(path), &e))?;
                seek(fd.as_fd(), *offset).map_err(|e| fail("lseek", &e))?;
                OpenFile::new(fd, FileKind::Directory, Some(path.clone()))
            }
            OpenFileState::HostDevice { path, flags } => {
                const DEVICES: [&[u8]; 5] = [
                    b"/dev/null",
                    b"/dev/zero",
                    b"/dev/full",
                    b"/dev/random",
                    b"/dev/urandom",
                ];
                if !DEVICES.contains(&path.as_slice()) {
                    return Err(bad(format!(
                        "open file {i}: {} is not a device a sandbox is given",
                        String::from_utf8_lossy(path)
                    )));
                }
                let c = std::ffi::CString::new(path.clone()).map_err(|e| fail("path", &e))?;
                let access = flags & libc::O_ACCMODE;
                // SAFETY: open of a NUL-terminated path; the result is checked.
                let fd = unsafe { libc::open(c.as_ptr(), access | libc::O_CLOEXEC) };
                if fd < 0 {
                    return Err(fail("open", &std::io::Error::last_os_error()));
                }
                // SAFETY: a fresh descriptor owned by nobody else.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                set_fl(fd.as_fd(), *flags).map_err(|e| fail("F_SETFL", &e))?;
                OpenFile::new(fd, FileKind::HostDevice, Some(path.clone()))
            }
            OpenFileState::Pipe {
                pipe,
                write_end,
                flags,
                capacity,
                data,
            } => {
                if !pipes.contains_key(pipe) {
                    let bytes = blobs.get(*data).map_err(|e| fail("the pipe's bytes", &e))?;
                    let made = new_pipe(*capacity, bytes).map_err(|e| fail("pipe", &e))?;
                    pipes.insert(*pipe, made);
                }
                let (r, w) = &pipes[pipe];
                let end = if *write_end { w } else { r };
                let fd = end.try_clone().map_err(|e| fail("dup", &e))?;
                set_fl(fd.as_fd(), *flags).map_err(|e| fail("F_SETFL", &e))?;
                OpenFile::new(fd, FileKind::Pipe, None)
            }
            OpenFileState::ProcFile {
                path,
                flags,
                offset,
                content,
            } => {
                let bytes = blobs.get(*content).map_err(|e| fail("its bytes", &e))?;
                let fd = crate::fs::procfs::remake(path, bytes, flags & libc::O_ACCMODE)
                    .map_err(|e| fail(&String::from_utf8_lossy(path), &e))?;
                set_fl(fd.as_fd(), *flags).map_err(|e| fail("F_SETFL", &e))?;
                seek(fd.as_fd(), *offset).map_err(|e| fail("lseek", &e))?;
                OpenFile::new(fd, FileKind::ProcFile, Some(path.clone()))
            }
            OpenFileState::EventFd {
                count,
                semaphore,
                flags,
            } => {
                let efd_flags =
                    libc::EFD_CLOEXEC | if *semaphore { libc::EFD_SEMAPHORE } else { 0 };
                // SAFETY: eventfd with valid flags; the result is checked.
                let fd = unsafe { libc::eventfd(0, efd_flags) };
                if fd < 0 {
                    return Err(fail("eventfd", &std::io::Error::last_os_error()));
                }
                // SAFETY: a fresh descriptor owned by nobody else.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                if *count > 0 {
                    if *count == u64::MAX {
                        return Err(bad(format!("open file {i}: an eventfd counter of 2^64-1")));
                    }
                    // SAFETY: writing 8 bytes from a local to our eventfd.
                    let n = unsafe { libc::write(fd.as_raw_fd(), (count as *const u64).cast(), 8) };
                    if n != 8 {
                        return Err(fail("eventfd write", &std::io::Error::last_os_error()));
                    }
                }
                set_fl(fd.as_fd(), *flags).map_err(|e| fail("F_SETFL", &e))?;
                OpenFile::new(
                    fd,
                    FileKind::EventFd {
                        semaphore: *semaphore,
                    },
                    None,
                )
            }
            OpenFileState::InetSocket {
                family,
                kind,
                protocol,
                flags,
                local,
                listening,
                connected,
                peer: _,
                options,
                kept,
            } => super::sockets::import(
                &super::sockets::SocketSpec {
                    family: *family,
                    kind: *kind,
                    protocol: *protocol,
                    flags: *flags,
                    local: local.as_deref(),
                    listening: *listening,
                    connected: *connected,
                    options,
                    kept: *kept,
                },
                net,
            )
            .map_err(|e| bad(format!("open file {i}: {e}")))?,
            OpenFileState::UnixSocket { id, .. } => unix
                .remove(id)
                .ok_or_else(|| bad(format!("open file {i}: a Unix socket saved twice")))?,
            OpenFileState::Epoll { flags, targets } => {
                // SAFETY: epoll_create1 with a valid flag; the result is checked.
                let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
                if ep < 0 {
                    return Err(fail("epoll_create1", &std::io::Error::last_os_error()));
                }
                // SAFETY: a fresh descriptor owned by nobody else.
                let ep = unsafe { OwnedFd::from_raw_fd(ep) };
                for t in targets {
                    let target = files
                        .get(t.file)
                        .and_then(|f| f.as_ref())
                        .filter(|_| {
                            !matches!(open_files.get(t.file), Some(OpenFileState::Epoll { .. }))
                        })
                        .ok_or_else(|| {
                            bad(format!(
                                "open file {i}: an epoll target {} that is no file",
                                t.file
                            ))
                        })?;
                    let mut ev = libc::epoll_event {
                        events: t.events,
                        u64: t.data,
                    };
                    // SAFETY: `ev` is a live epoll_event the host only reads.
                    let r = unsafe {
                        libc::epoll_ctl(
                            ep.as_raw_fd(),
                            libc::EPOLL_CTL_ADD,
                            target.host().as_raw_fd(),
                            &mut ev,
                        )
                    };
                    if r < 0 {
                        return Err(fail("epoll_ctl", &std::io::Error::last_os_error()));
                    }
                }
                set_fl(ep.as_fd(), *flags).map_err(|e| fail("F_SETFL", &e))?;
                OpenFile::new(ep, FileKind::Epoll, None)
            }
        };
        let file = Arc::new(file);
        if let OpenFileState::UnixSocket { id, .. } = of {
            unix_made.insert(*id, file.clone());
        }
        files[i] = Some(file);
    }
    // The pipes' ends nobody holds close here (their readers see EOF, writers EPIPE).
    drop(pipes);
    files
        .into_iter()
        .enumerate()
        .map(|(i, f)| f.ok_or_else(|| bad(format!("open file {i} was not made"))))
        .collect()
}

/// Makes the descriptor table `state` describes over the open files `files` ([`import`]).
///
/// # Errors
/// [`CheckpointError::Restore`] for a descriptor naming no open file, or out of range.
pub fn table(state: &FilesState, files: &[Arc<OpenFile>]) -> Result<FdTable, CheckpointError> {
    let bad = |what: String| CheckpointError::Restore(what);
    let table = FdTable::new();
    table.set_limit(state.limit);
    for d in &state.fds {
        let file = files
            .get(d.file)
            .ok_or_else(|| bad(format!("descriptor {} names no open file", d.fd)))?;
        table
            .insert_at(d.fd, file.clone(), d.cloexec)
            .map_err(|e| bad(format!("descriptor {}: {e}", d.fd)))?;
    }
    Ok(table)
}

/// A new pipe of `capacity` bytes holding `bytes`.
fn new_pipe(capacity: i32, bytes: &[u8]) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut p = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into `p`.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
    // SAFETY: F_SETPIPE_SZ on our pipe; a smaller capacity than asked is refused below.
    let got = unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, capacity.max(4096)) };
    if got < 0 || (got as usize) < bytes.len() {
        return Err(std::io::Error::other(format!(
            "a pipe of {capacity} bytes cannot be made here"
        )));
    }
    let mut done = 0;
    while done < bytes.len() {
        // SAFETY: writing from a slice we hold; the pipe has room for all of it.
        let n = unsafe {
            libc::write(
                w.as_raw_fd(),
                bytes[done..].as_ptr().cast(),
                bytes.len() - done,
            )
        };
        if n <= 0 {
            return Err(std::io::Error::last_os_error());
        }
        done += n as usize;
    }
    Ok((r, w))
}

/// The bytes buffered in the pipe `end` belongs to, left in place: duplicated with tee(2)
/// into a scratch pipe and read from there.
fn peek_pipe(end: BorrowedFd<'_>, capacity: i32) -> std::io::Result<Vec<u8>> {
    // A read end of the same pipe, whichever end the descriptor is.
    let c = std::ffi::CString::new(format!("/proc/self/fd/{}", end.as_raw_fd()))
        .map_err(std::io::Error::other)?;
    // SAFETY: open of a NUL-terminated path; the result is checked.
    let r = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    let r = unsafe { OwnedFd::from_raw_fd(r) };
    let mut p = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into `p`.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors owned by nobody else.
    let (sr, sw) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
    // SAFETY: F_SETPIPE_SZ on our scratch pipe.
    unsafe { libc::fcntl(sw.as_raw_fd(), libc::F_SETPIPE_SZ, capacity.max(4096)) };
    // SAFETY: tee between two pipes we hold; it copies without consuming.
    let n = unsafe {
        libc::tee(
            r.as_raw_fd(),
            sw.as_raw_fd(),
            capacity.max(4096) as usize,
            libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EAGAIN) {
            return Ok(Vec::new()); // empty
        }
        return Err(e);
    }
    let mut out = vec![0u8; n as usize];
    let mut done = 0;
    while done < out.len() {
        // SAFETY: reading into the part of `out` not yet filled.
        let got = unsafe {
            libc::read(
                sr.as_raw_fd(),
                out[done..].as_mut_ptr().cast(),
                out.len() - done,
            )
        };
        if got <= 0 {
            return Err(std::io::Error::last_os_error());
        }
        done += got as usize;
    }
    Ok(out)
}

/// An eventfd's counter, from the host's `/proc/self/fdinfo`.
fn eventfd_count(fd: BorrowedFd<'_>) -> std::io::Result<u64> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))?;
    info.lines()
        .find_map(|l| l.strip_prefix("eventfd-count:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .ok_or_else(|| std::io::Error::other("no eventfd-count in fdinfo"))
}

fn get_fl(fd: BorrowedFd<'_>) -> std::io::Result<i32> {
    // SAFETY: F_GETFL on a descriptor we hold.
    let f = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if f < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(f)
}

fn set_fl(fd: BorrowedFd<'_>, flags: i32) -> std::io::Result<()> {
    // SAFETY: F_SETFL on a descriptor we hold (the host ignores the access mode).
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn tell(fd: BorrowedFd<'_>) -> std::io::Result<i64> {
    // SAFETY: lseek on a descriptor we hold.
    let off = unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_CUR) };
    if off < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(off)
}

fn seek(fd: BorrowedFd<'_>, offset: i64) -> std::io::Result<()> {
    // SAFETY: lseek on a descriptor we hold.
    if unsafe { libc::lseek(fd.as_raw_fd(), offset, libc::SEEK_SET) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
