//! Shared windows against real processes: host files other than the guest memfd (a memfd of a
//! shared object, a regular file) attached to a stub, mapped at guest addresses, read and
//! written by guest code; read-only slots stay read-only; slots are reused and leak nothing.
//! Both spawn paths: [`StubProcess::spawn`] and the stub factory.

mod common;

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use common::{
    expect_fault, fds_of, guest, guest_memfd, map_guest, maps_of, max_open_files, start_thread,
};
use platform_trap::sys::{self, Mapping};
use platform_trap::{StubFactory, StubProcess, StubThread, TrapError, TrapExit, WindowSlot};

/// Where the tests map windows.
const WIN: u64 = 0x80_0000;
const WIN2: u64 = 0x90_0000;

guest!(
    read_write_guest,
    read_write_guest_start,
    read_write_guest_end,
    // rbx: where to read (reported in rdi by syscall 500); r12, r13: where and what to write
    // (then syscall 501).
    "mov rdi, [rbx]",
    "mov eax, 500",
    "syscall",
    "mov [r12], r13",
    "mov eax, 501",
    "syscall",
    "ud2",
);

/// A stub over a fresh guest memfd with [`read_write_guest`] at [`CODE`](common::CODE) and a
/// stack at [`DATA`](common::DATA).
struct Guest {
    _mem: OwnedFd,
    stub: StubProcess,
}

enum Spawn<'a> {
    Direct,
    Factory(&'a StubFactory),
}

impl Guest {
    fn new(how: Spawn<'_>) -> Guest {
        let code = read_write_guest();
        let mem = guest_memfd(code);
        let stub = match how {
            Spawn::Direct => StubProcess::spawn(mem.as_fd()).unwrap(),
            Spawn::Factory(f) => f.spawn(mem.as_fd()).unwrap(),
        };
        map_guest(&stub, code.len());
        Guest { _mem: mem, stub }
    }

    /// A thread that reads `read`, then writes `value` to `write`.
    fn thread(&self, read: u64, write: u64, value: u64) -> StubThread {
        let mut t = start_thread(&self.stub);
        let r = &mut t.regs_mut().regs;
        (r.rbx, r.r12, r.r13) = (read, write, value);
        t
    }
}

/// The `flags:` field of `/proc/<pid>/fdinfo/<fd>` (octal).
fn fd_flags(pid: i32, fd: u32) -> i32 {
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap();
    let line = info.lines().find(|l| l.starts_with("flags:")).unwrap();
    i32::from_str_radix(line.split_whitespace().nth(1).unwrap(), 8).unwrap()
}

/// The `/proc/<pid>/maps` line of the mapping that starts at `addr`.
fn map_line(pid: i32, addr: u64) -> String {
    let maps = maps_of(pid);
    match maps.iter().find(|(start, _, _)| *start == addr) {
        Some((_, _, line)) => line.clone(),
        None => panic!("nothing mapped at {addr:#x}:\n{maps:#?}"),
    }
}

fn pread_u64(fd: &OwnedFd, off: u64) -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: an 8-byte buffer we own.
    let n = unsafe { libc::pread(fd.as_raw_fd(), b.as_mut_ptr().cast(), 8, off as i64) };
    assert_eq!(n, 8);
    u64::from_le_bytes(b)
}

/// A memfd "shared object" with a pattern at 0x1000, attached read-only and mapped r-- at
/// [`WIN`]: the guest reads it; its write faults and changes nothing; `PROT_WRITE` is refused.
fn read_only_memfd(g: &Guest) {
    const PATTERN: u64 = 0xfeed_face_cafe_beef;
    let shm = sys::memfd("torpor-test-shm", 0x10000).unwrap();
    sys::write_fd(&shm, 0x1000, &PATTERN.to_le_bytes()).unwrap();
    let view = Mapping::shared(shm.as_fd(), 0x10000).unwrap();
    let slot = g.stub.attach_window(shm.as_fd(), false).unwrap();
    assert!(!slot.is_writable());
    assert!((64..544).contains(&slot.fd()), "{slot:?}");
    // The stub holds a read-only open file (the holder reopened the writable memfd).
    assert_eq!(
        fd_flags(g.stub.pid(), slot.fd()) & libc::O_ACCMODE,
        libc::O_RDONLY
    );
    g.stub
        .map_window(slot, WIN, 4096, 0x1000, libc::PROT_READ)
        .unwrap();
    let line = map_line(g.stub.pid(), WIN);
    assert!(
        line.contains(" r--s ") && line.contains("torpor-test-shm"),
        "{line}"
    );

    let mut t = g.thread(WIN, WIN + 8, 0x5555);
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!(t.regs().regs.rax, 500);
    assert_eq!(t.regs().regs.rdi, PATTERN, "the guest reads the window");
    let (error_code, addr) = expect_fault(t.switch().unwrap(), 14, libc::SIGSEGV);
    assert_eq!(addr, WIN + 8);
    assert_eq!(error_code & 0x2, 0x2, "a write fault: {error_code:#x}");
    assert_eq!(error_code & 0x1, 0x1, "on a present page: {error_code:#x}");
    assert_eq!(view.read_u64(0x1008), 0, "the holder's copy is unchanged");
    assert_eq!(view.read_u64(0x1000), PATTERN);

    // PROT_WRITE on a read-only slot: refused by the holder (the filter test is in the
    // crate: `stub::tests`, and `filter::tests::window_verdicts`).
    assert!(matches!(
        g.stub
            .map_window(slot, WIN2, 4096, 0, libc::PROT_READ | libc::PROT_WRITE),
        Err(TrapError::Invalid(_))
    ));
    // Nor can `protect` make the mapping writable: the stub's file is read-only.
    assert!(matches!(
        g.stub
            .protect(WIN, 4096, libc::PROT_READ | libc::PROT_WRITE),
        Err(TrapError::Mapper(libc::EACCES))
    ));
    // The stub lives on and its mapping is as it was.
    assert!(g.stub.is_alive());
    assert!(map_line(g.stub.pid(), WIN).contains(" r--s "));
    drop(t);
    g.stub.detach_window(slot).unwrap();
}

/// A regular temporary file attached writable and mapped rw- at [`WIN2`]: the guest's write
/// reaches the file.
fn writable_file(g: &Guest) {
    let path = std::env::temp_dir().join(format!(
        "torpor-window-{}-{}",
        std::process::id(),
        g.stub.pid()
    ));
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    f.write_all(&[0x11; 8192]).unwrap();
    let file = OwnedFd::from(f);
    let slot = g.stub.attach_window(file.as_fd(), true).unwrap();
    assert!(slot.is_writable());
    assert!((544..1024).contains(&slot.fd()), "{slot:?}");
    g.stub
        .map_window(slot, WIN2, 8192, 0, libc::PROT_READ | libc::PROT_WRITE)
        .unwrap();
    assert!(map_line(g.stub.pid(), WIN2).contains(" rw-s "));
    let mut t = g.thread(WIN2 + 0x1000, WIN2 + 0x1008, 0x1122_3344_5566_7788);
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!(t.regs().regs.rdi, 0x1111_1111_1111_1111);
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!(t.regs().regs.rax, 501);
    assert_eq!(pread_u64(&file, 0x1008), 0x1122_3344_5566_7788);
    assert_eq!(pread_u64(&file, 0x1000), 0x1111_1111_1111_1111);
    // A file not open for writing cannot be a writable window.
    let ro = std::fs::File::open("/proc/self/exe").unwrap();
    assert!(matches!(
        g.stub.attach_window(ro.as_fd(), true),
        Err(TrapError::Invalid(_))
    ));
    drop(t);
    g.stub.detach_window(slot).unwrap();
}

/// Detach, then attach again: the same slot; a detached slot is refused.
fn reuse(g: &Guest) {
    let shm = sys::memfd("torpor-test-shm", 0x1000).unwrap();
    for writable in [false, true] {
        let a = g.stub.attach_window(shm.as_fd(), writable).unwrap();
        let b = g.stub.attach_window(shm.as_fd(), writable).unwrap();
        assert_ne!(a, b);
        g.stub.detach_window(a).unwrap();
        assert!(matches!(
            g.stub.detach_window(a),
            Err(TrapError::Invalid(_))
        ));
        assert!(matches!(
            g.stub.map_window(a, WIN, 4096, 0, libc::PROT_READ),
            Err(TrapError::Invalid(_))
        ));
        let c = g.stub.attach_window(shm.as_fd(), writable).unwrap();
        assert_eq!(c, a, "the freed slot is reused");
        g.stub.map_window(c, WIN, 4096, 0, libc::PROT_READ).unwrap();
        g.stub.detach_window(b).unwrap();
        g.stub.detach_window(c).unwrap();
    }
}

/// 100 attach/detach cycles leave the stub's descriptors as they were.
fn no_leak(g: &Guest) {
    let pid = g.stub.pid();
    let before = fds_of(pid);
    assert_eq!(before, [3, 4, 5]);
    let shm = sys::memfd("torpor-test-shm", 0x1000).unwrap();
    for i in 0..100 {
        let slot = g.stub.attach_window(shm.as_fd(), i % 2 == 1).unwrap();
        if i % 10 == 0 {
            assert_eq!(fds_of(pid), [3, 4, 5, slot.fd()]);
        }
        g.stub.detach_window(slot).unwrap();
    }
    assert_eq!(fds_of(pid), before);
}

fn all(g: &Guest) {
    read_only_memfd(g);
    writable_file(g);
    reuse(g);
    no_leak(g);
}

#[test]
fn windows_in_a_spawned_stub() {
    all(&Guest::new(Spawn::Direct));
}

#[test]
fn windows_in_a_factory_stub() {
    let factory = StubFactory::start().unwrap();
    let g = Guest::new(Spawn::Factory(&factory));
    all(&g);
    assert_eq!(max_open_files(g.stub.pid()), ["1024", "1024"]);
}

#[test]
fn too_many_windows() {
    let g = Guest::new(Spawn::Direct);
    let shm = sys::memfd("torpor-test-shm", 0x1000).unwrap();
    let slots: Vec<WindowSlot> = (0..480)
        .map(|_| g.stub.attach_window(shm.as_fd(), false).unwrap())
        .collect();
    assert_eq!(slots.last().unwrap().fd(), 543);
    assert!(matches!(
        g.stub.attach_window(shm.as_fd(), false),
        Err(TrapError::TooManyWindows)
    ));
    // The writable kind is separate.
    let w = g.stub.attach_window(shm.as_fd(), true).unwrap();
    assert_eq!(w.fd(), 544);
    g.stub.detach_window(slots[7]).unwrap();
    assert_eq!(g.stub.attach_window(shm.as_fd(), false).unwrap(), slots[7]);
    assert_eq!(fds_of(g.stub.pid()).len(), 3 + 481);
    // Dropping the stub with windows attached is fine.
    drop(g);
}

/// A factory with a lower `RLIMIT_NOFILE`: only the slots below it can be attached.
#[test]
fn slots_stop_at_the_stubs_descriptor_limit() {
    let factory = StubFactory::start_with(platform_trap::FactoryOptions {
        namespaces: false,
        nofile: 100,
    })
    .unwrap();
    let g = Guest::new(Spawn::Factory(&factory));
    let shm = sys::memfd("torpor-test-shm", 0x1000).unwrap();
    assert!(matches!(
        g.stub.attach_window(shm.as_fd(), true),
        Err(TrapError::TooManyWindows)
    ));
    let slots: Vec<WindowSlot> = (64..100)
        .map(|_| g.stub.attach_window(shm.as_fd(), false).unwrap())
        .collect();
    assert_eq!(slots.last().unwrap().fd(), 99);
    assert!(matches!(
        g.stub.attach_window(shm.as_fd(), false),
        Err(TrapError::TooManyWindows)
    ));
    g.stub
        .map_window(slots[35], WIN, 4096, 0, libc::PROT_READ)
        .unwrap();
}
