//! Descriptor tables through a checkpoint without KVM: saved, encoded as the checkpoint's
//! JSON, and made again, each object checked from its new host descriptor.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use super::blobs::{BlobWriter, Blobs};
use super::files;
use super::state::{FilesState, OpenFileState};
use crate::fd::{FdTable, FileKind, OpenFile, SocketState};
use crate::fs::Root;
use crate::net::{host, inet, NetPolicy};

/// A fresh directory under the system's temporary directory, removed on drop.
struct Dir(std::path::PathBuf);

impl Dir {
    fn new() -> Dir {
        let p = std::env::temp_dir().join(format!(
            "torpor-ckpt-files-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(p.join("sub")).unwrap();
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const OWNER: crate::net::unix::Ucred = crate::net::unix::Ucred {
    pid: 1,
    uid: 0,
    gid: 0,
};

fn owned(fd: i32) -> OwnedFd {
    assert!(fd >= 0, "{}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn read_some(fd: i32, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    // SAFETY: reading into a buffer we own.
    let got = unsafe { libc::read(fd, b.as_mut_ptr().cast(), n) };
    assert!(got >= 0, "{}", std::io::Error::last_os_error());
    b.truncate(got as usize);
    b
}

fn insert(t: &FdTable, fd: i32, f: OpenFile) -> Arc<OpenFile> {
    let f = Arc::new(f);
    t.insert_at(fd, f.clone(), false).unwrap();
    f
}

#[test]
fn a_descriptor_table_comes_back_with_its_objects_and_bytes() {
    let d = Dir::new();
    std::fs::write(d.0.join("f"), b"0123456789").unwrap();
    let root = Root::open(&d.0).unwrap();
    let net = Arc::new(NetPolicy::new(Vec::new(), false));
    let t = FdTable::new();

    // A pipe with bytes in it, both ends, the read end twice (dup).
    let mut p = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors.
    assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: writing from a literal.
    let n = unsafe { libc::write(p[1], b"queued".as_ptr().cast(), 6) };
    assert_eq!(n, 6);
    let r = insert(&t, 3, OpenFile::new(owned(p[0]), FileKind::Pipe, None));
    t.insert_at(9, r.clone(), true).unwrap();
    insert(&t, 4, OpenFile::new(owned(p[1]), FileKind::Pipe, None));
    // An eventfd (semaphore) holding 5.
    // SAFETY: eventfd with valid flags.
    let e = owned(unsafe { libc::eventfd(5, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) });
    let e = insert(
        &t,
        5,
        OpenFile::new(e, FileKind::EventFd { semaphore: true }, None),
    );
    // A file at offset 3, a directory.
    let f = root
        .open_at(b"/f", libc::O_RDWR | libc::O_CLOEXEC, 0)
        .unwrap();
    // SAFETY: lseek on our descriptor.
    unsafe { libc::lseek(f.as_raw_fd(), 3, libc::SEEK_SET) };
    insert(
        &t,
        6,
        OpenFile::new(f, FileKind::Regular, Some(b"/f".to_vec())),
    );
    let dir = root
        .open_at(b"/sub", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .unwrap();
    insert(
        &t,
        7,
        OpenFile::new(dir, FileKind::Directory, Some(b"/sub".to_vec())),
    );
    // A listening TCP socket bound through the policy.
    let s = host::socket(libc::AF_INET, libc::SOCK_STREAM, false, 0).unwrap();
    let s = OpenFile::new(
        s,
        FileKind::Socket(Mutex::new(SocketState {
            family: libc::AF_INET,
            kind: libc::SOCK_STREAM,
            ..SocketState::default()
        })),
        None,
    );
    inet::bind_as_guest(&net, &s, libc::AF_INET, "127.0.0.1:0".parse().unwrap()).unwrap();
    host::listen(s.host(), 8).unwrap();
    insert(&t, 8, s);
    // A Unix socket pair with bytes queued both ways, and one whose peer is gone after
    // sending its last words.
    let unix = |fd: OwnedFd| {
        let u = crate::net::unix::UnixRef::new(&net, std::os::fd::AsFd::as_fd(&fd), None).unwrap();
        OpenFile::new(
            fd,
            FileKind::Socket(Mutex::new(SocketState {
                family: libc::AF_UNIX,
                kind: libc::SOCK_STREAM,
                unix: Some(u),
                ..SocketState::default()
            })),
            None,
        )
    };
    let send = |fd: &OwnedFd, b: &[u8]| {
        // SAFETY: sending from a slice we hold.
        let n = unsafe { libc::send(fd.as_raw_fd(), b.as_ptr().cast(), b.len(), 0) };
        assert_eq!(n, b.len() as isize);
    };
    let (ua, ub) = host::socketpair(libc::SOCK_STREAM, false, 0).unwrap();
    send(&ua, b"to b");
    send(&ub, b"to a!");
    insert(&t, 10, unix(ua));
    insert(&t, 11, unix(ub));
    let (uc, ud) = host::socketpair(libc::SOCK_STREAM, false, 0).unwrap();
    send(&ud, b"last words");
    drop(ud);
    insert(&t, 13, unix(uc));
    // An epoll watching the eventfd (data 77), made after it: its number is below.
    // SAFETY: epoll_create1 with a valid flag.
    let ep = owned(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) });
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 77,
    };
    // SAFETY: a live event the host only reads.
    let rc = unsafe {
        libc::epoll_ctl(
            ep.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            e.host().as_raw_fd(),
            &mut ev,
        )
    };
    assert_eq!(rc, 0);
    insert(&t, 2, OpenFile::new(ep, FileKind::Epoll, None));

    let mut blobs = BlobWriter::new();
    let (tables, open_files) = files::export(&[(1, &t)], &root, &net, &mut blobs, None).unwrap();
    assert_eq!(open_files.len(), 10, "the dup'ed read end is one open file");
    let json = serde_json::to_string(&(tables, open_files)).unwrap();
    let (tables, open_files): (Vec<FilesState>, Vec<OpenFileState>) =
        serde_json::from_str(&json).unwrap();
    // The checkpoint left the pipe's bytes where they were.
    assert_eq!(read_some(p[0], 64), b"queued");

    let blobs = Blobs::new(blobs.into_payload());
    let net2 = Arc::new(NetPolicy::new(Vec::new(), false));
    let made = files::import(
        &open_files,
        &root,
        &net2,
        OWNER,
        &blobs,
        &[None, None, None],
    )
    .unwrap();
    let t2 = files::table(&tables[0], &made).unwrap();
    let fd = |n: i32| t2.get(n).unwrap().host().as_raw_fd();
    assert!(Arc::ptr_eq(&t2.get(3).unwrap(), &t2.get(9).unwrap()));
    assert!(t2.cloexec(9).unwrap() && !t2.cloexec(3).unwrap());
    // SAFETY: writing from a literal into the restored write end.
    assert_eq!(unsafe { libc::write(fd(4), b"+".as_ptr().cast(), 1) }, 1);
    assert_eq!(read_some(fd(3), 64), b"queued+");
    // The epoll set sees the eventfd ready, with the application's data.
    let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
    // SAFETY: epoll_wait into a local array of 4.
    let n = unsafe { libc::epoll_wait(fd(2), out.as_mut_ptr(), 4, 0) };
    assert_eq!(n, 1);
    assert_eq!({ out[0].u64 }, 77);
    assert_eq!(
        read_some(fd(5), 8),
        1u64.to_ne_bytes(),
        "a semaphore reads 1"
    );
    assert_eq!(read_some(fd(6), 64), b"3456789");
    assert_eq!(t2.get(7).unwrap().path.as_deref(), Some(&b"/sub"[..]));
    // The pair: each end reads what was queued to it, and they are connected to each other.
    assert_eq!(read_some(fd(10), 64), b"to a!");
    assert_eq!(read_some(fd(11), 64), b"to b");
    // SAFETY: writing from a literal into the restored end.
    assert_eq!(unsafe { libc::write(fd(10), b"x".as_ptr().cast(), 1) }, 1);
    assert_eq!(read_some(fd(11), 64), b"x");
    // The lone one: its last words, then the end of the stream.
    assert_eq!(read_some(fd(13), 64), b"last words");
    assert_eq!(read_some(fd(13), 64), b"");
    assert_ne!(
        host::int_opt(
            t2.get(8).unwrap().host(),
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN
        )
        .unwrap(),
        0,
        "the socket listens again"
    );
}

/// A dormant holder's checkpoint keeps a TCP connection open instead of saving it as reset:
/// the copy the export hands back, adopted by the restore through its number, is the very
/// connection (bytes its peer sent after the checkpoint are read from it). Without the copy
/// the connection comes back reset.
#[test]
fn a_kept_connection_is_the_same_connection_after_the_restore() {
    use std::io::{Read, Write};
    let dir = Dir::new();
    let root = Arc::new(Root::open(&dir.0).unwrap());
    let net = NetPolicy::new(Vec::new(), false);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (conn, _) = listener.accept().unwrap();
    let t = FdTable::new();
    insert(
        &t,
        5,
        OpenFile::new(
            OwnedFd::from(conn),
            FileKind::Socket(Mutex::new(SocketState {
                family: libc::AF_INET,
                kind: libc::SOCK_STREAM,
                ..SocketState::default()
            })),
            None,
        ),
    );
    let keep = std::cell::RefCell::new(Vec::new());
    let mut blobs = BlobWriter::new();
    let (tables, open_files) =
        files::export(&[(1, &t)], &root, &net, &mut blobs, Some(&keep)).unwrap();
    let kept = keep.into_inner();
    assert_eq!(kept.len(), 1, "one connection kept");
    let OpenFileState::InetSocket { kept: Some(n), .. } = &open_files[0] else {
        panic!("saved as kept: {:?}", open_files[0]);
    };
    assert_eq!(*n, kept[0].as_raw_fd());
    drop(t);
    peer.write_all(b"sent while dormant").unwrap();
    let blobs = Blobs::new(blobs.into_payload());
    let restore = |kept: Vec<OwnedFd>| {
        let net = Arc::new(NetPolicy::new(Vec::new(), false));
        net.keep_sockets(kept);
        let made =
            files::import(&open_files, &root, &net, OWNER, &blobs, &[None, None, None]).unwrap();
        files::table(&tables[0], &made).unwrap()
    };
    let t2 = restore(kept);
    let fd = t2.get(5).unwrap().host().as_raw_fd();
    assert_eq!(read_some(fd, 64), b"sent while dormant");
    // SAFETY: writing from a literal into the restored connection.
    assert_eq!(unsafe { libc::write(fd, b"answer".as_ptr().cast(), 6) }, 6);
    let mut got = [0u8; 6];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"answer");
    // Without the kept descriptor: reset, as any checkpoint's connection.
    let t3 = restore(Vec::new());
    let mut b = [0u8; 4];
    // SAFETY: reading into a local buffer from the restored socket.
    let r = unsafe {
        libc::read(
            t3.get(5).unwrap().host().as_raw_fd(),
            b.as_mut_ptr().cast(),
            4,
        )
    };
    assert_eq!(
        (r, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::ECONNRESET))
    );
}

/// A generated /proc file comes back with the bytes it was made with, at its offset, still
/// and a tunable opened for writing comes back writable.
#[test]
fn a_proc_file_comes_back_with_its_bytes_and_offset() {
    let d = Dir::new();
    let root = Root::open(&d.0).unwrap();
    let net = Arc::new(NetPolicy::new(Vec::new(), false));
    let t = FdTable::new();
    let made =
        crate::fs::procfs::remake(b"/proc/self/status", b"Name:\tjava\nPid:\t1\n", 0).unwrap();
    // SAFETY: lseek on our descriptor.
    unsafe { libc::lseek(made.as_raw_fd(), 6, libc::SEEK_SET) };
    insert(
        &t,
        9,
        OpenFile::new(
            made,
            FileKind::ProcFile,
            Some(b"/proc/self/status".to_vec()),
        ),
    );
    let mut blobs = BlobWriter::new();
    let (tables, open_files) = files::export(&[(1, &t)], &root, &net, &mut blobs, None).unwrap();
    let blobs = Blobs::new(blobs.into_payload());
    let back = files::import(&open_files, &root, &net, OWNER, &blobs, &[None, None, None]).unwrap();
    let t2 = files::table(&tables[0], &back).unwrap();
    let f = t2.get(9).unwrap();
    assert!(matches!(f.kind, FileKind::ProcFile));
    assert_eq!(read_some(f.host().as_raw_fd(), 64), b"java\nPid:\t1\n");
    // A tunable opened for writing comes back writable (a write checks its access mode).
    let t = FdTable::new();
    let path = b"/proc/sys/kernel/msgmax";
    let made = crate::fs::procfs::remake(path, b"8192\n", libc::O_WRONLY).unwrap();
    insert(
        &t,
        3,
        OpenFile::new(made, FileKind::ProcFile, Some(path.to_vec())),
    );
    let mut blobs = BlobWriter::new();
    let (tables, open_files) = files::export(&[(1, &t)], &root, &net, &mut blobs, None).unwrap();
    let blobs = Blobs::new(blobs.into_payload());
    let back = files::import(&open_files, &root, &net, OWNER, &blobs, &[None, None, None]).unwrap();
    let t2 = files::table(&tables[0], &back).unwrap();
    let f = t2.get(3).unwrap();
    assert_eq!(crate::fs::procfs::written_tunable(&f), Ok("kernel/msgmax"));
}

/// Why exporting process `pid`'s descriptor table `t` fails.
fn refusal(root: &Root, pid: i32, t: &FdTable) -> String {
    files::export(
        &[(pid, t)],
        root,
        &NetPolicy::new(Vec::new(), false),
        &mut BlobWriter::new(),
        None,
    )
    .unwrap_err()
    .to_string()
}

#[test]
fn what_cannot_be_saved_yet_is_named() {
    let d = Dir::new();
    let root = Root::open(&d.0).unwrap();
    let t = FdTable::new();
    // SAFETY: timerfd_create with valid arguments.
    let tf = owned(unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC) });
    insert(&t, 12, OpenFile::new(tf, FileKind::TimerFd, None));
    let msg = refusal(&root, 7, &t);
    assert!(
        msg.contains("process 7") && msg.contains("descriptor 12") && msg.contains("timerfd"),
        "{msg}"
    );
}

#[test]
fn an_io_uring_instance_is_refused_by_name() {
    let d = Dir::new();
    let root = Root::open(&d.0).unwrap();
    let t = FdTable::new();
    let p = abi::io_uring::IoUringParams::default();
    let g = crate::io_uring::layout::Geometry::new(4, &p).unwrap();
    let (ring, ep) = crate::io_uring::IoUring::create(&mm::SharedSpace::new(), 0, g, 1, 0).unwrap();
    insert(
        &t,
        5,
        OpenFile::new(ep, FileKind::IoUring(Arc::new(ring)), None),
    );
    let msg = refusal(&root, 3, &t);
    assert!(
        msg.contains("process 3") && msg.contains("descriptor 5") && msg.contains("io_uring"),
        "{msg}"
    );
}

#[test]
fn a_malformed_table_is_refused() {
    let d = Dir::new();
    let root = Root::open(&d.0).unwrap();
    let net = Arc::new(NetPolicy::new(Vec::new(), false));
    let blobs = Blobs::new(Vec::new());
    // Open files that cannot be made.
    for json in [
        // A pipe whose bytes are outside the blob file.
        r#"[{"object":"pipe","pipe":1,"write_end":false,"flags":0,"capacity":4096,"data":{"off":0,"len":9,"crc":0}}]"#,
        // An epoll watching itself.
        r#"[{"object":"epoll","flags":2,"targets":[{"file":0,"events":1,"data":0}]}]"#,
        // A device a sandbox is never given.
        r#"[{"object":"host_device","path":[47,101,116,99,47,112,97,115,115,119,100],"flags":0}]"#,
        // A file outside the root.
        r#"[{"object":"regular","path":[47,46,46,47,120],"flags":0,"offset":0,"size":0}]"#,
    ] {
        let open_files: Vec<OpenFileState> = serde_json::from_str(json).unwrap();
        assert!(
            files::import(&open_files, &root, &net, OWNER, &blobs, &[None, None, None]).is_err(),
            "{json}"
        );
    }
    // A descriptor naming no open file.
    let table: FilesState =
        serde_json::from_str(r#"{"limit":64,"fds":[{"fd":3,"cloexec":false,"file":4}]}"#).unwrap();
    assert!(files::table(&table, &[]).is_err());
    // Unknown fields are refused by the decoder itself.
    assert!(serde_json::from_str::<FilesState>(r#"{"limit":1,"fds":[],"x":1}"#).is_err());
}

#[test]
fn message_queues_come_back_with_their_messages_and_ids() {
    use super::ipc::{export_msg_queues, import_msg_queues};
    use super::state::MsgQueuesState;
    use crate::ipc::msg::{Caller, Message, MsgTable, Selector, StatBy, IPC_CREAT, IPC_NOWAIT};

    let who = Caller {
        pid: 7,
        euid: 1000,
        egid: 1000,
        fsgid: 1000,
        ..Caller::default()
    };
    let t = MsgTable::default();
    let keyed = t.get(0x5151, IPC_CREAT | 0o640, &who).unwrap();
    let private = t.get(0, 0o600, &who).unwrap();
    let empty = t.get(0, 0o600, &who).unwrap();
    t.remove(empty, &who).unwrap();
    for (ty, text) in [(2, &b"two"[..]), (1, b""), (9, &[0xffu8; 8192][..])] {
        t.send(
            keyed,
            Message {
                mtype: ty,
                text: text.to_vec(),
            },
            true,
            &who,
            || false,
        )
        .unwrap();
    }
    let m = Message {
        mtype: 4,
        text: b"private".to_vec(),
    };
    t.send(private, m, true, &who, || false).unwrap();

    let mut blobs = BlobWriter::new();
    let state = export_msg_queues(&t, &mut blobs);
    let json = serde_json::to_string(&state).unwrap();
    let state: MsgQueuesState = serde_json::from_str(&json).unwrap();
    let blobs = Blobs::new(blobs.into_payload());
    let u = MsgTable::default();
    import_msg_queues(&state, &blobs, &u).unwrap();

    for id in [keyed, private] {
        assert_eq!(
            u.stat(id, StatBy::Id, &who).unwrap(),
            t.stat(id, StatBy::Id, &who).unwrap()
        );
    }
    assert_eq!(u.get(0x5151, 0, &who), Ok(keyed));
    // The next id is the one the sandbox would have given.
    assert_eq!(u.get(0, 0o600, &who), t.get(0, 0o600, &who));
    let take = |table: &MsgTable, id, sel| {
        table
            .receive(id, sel, 8192, IPC_NOWAIT, &who, || false)
            .map(|m| (m.mtype, m.text.len()))
    };
    assert_eq!(take(&u, keyed, Selector::AtMost(5)), Ok((1, 0)));
    assert_eq!(take(&u, keyed, Selector::First), Ok((2, 3)));
    assert_eq!(take(&u, keyed, Selector::First), Ok((9, 8192)));
    assert_eq!(
        u.receive(private, Selector::First, 100, 0, &who, || false)
            .map(|m| m.text),
        Ok(b"private".to_vec())
    );

    // A state whose texts do not match its messages is refused.
    let mut bad = state.clone();
    bad.queues[0].messages[0].len += 1;
    assert!(import_msg_queues(&bad, &blobs, &MsgTable::default()).is_err());
    let mut bad = state;
    bad.queues[1].messages.clear();
    assert!(import_msg_queues(&bad, &blobs, &MsgTable::default()).is_err());
}
