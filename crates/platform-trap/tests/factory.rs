//! The stub factory against real processes: started while other threads of the test process
//! run (and allocate), stubs spawned from several threads, surviving their requesting thread,
//! free of the holder's later seccomp filters, and working on after the factory's death. The
//! binary's allocator kills any other process that allocates (see [`NoAllocAfterFork`]).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    fds_of, guest_memory, guest_thread, max_open_files, run_write_exit, start_thread, status_field,
    DATA, MEM_SIZE, WRITE_EXIT,
};
use platform_trap::sys;
use platform_trap::{FactoryOptions, StubFactory, StubProcess, TrapError, TrapExit};

/// The allocator of this test binary: the system's, except that a process other than the
/// one that allocated first (the factory, which shares this multi-threaded process's memory, or
/// a stub it forks) dies at its first allocation (exit 99), which every test here would notice
/// as a failed start or spawn. Neither may allocate: the factory has no libc thread state of
/// its own, and a lock another thread held at a fork would deadlock a stub.
struct NoAllocAfterFork;

static FIRST_PID: AtomicI32 = AtomicI32::new(0);

impl NoAllocAfterFork {
    fn check() {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        match FIRST_PID.compare_exchange(0, pid, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => {}
            Err(first) if first == pid => {}
            // SAFETY: ends this (other) process at once.
            Err(_) => unsafe { libc::_exit(99) },
        }
    }
}

// SAFETY: forwards to the system allocator, which upholds `GlobalAlloc`'s contract.
unsafe impl GlobalAlloc for NoAllocAfterFork {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::check();
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        Self::check();
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: NoAllocAfterFork = NoAllocAfterFork;

/// `uname(DATA); exit_group(rax)` as raw bytes.
const UNAME_EXIT: [u8; 21] = [
    0xb8, 0x3f, 0x00, 0x00, 0x00, // mov eax, 63
    0xbf, 0x00, 0x00, 0x60, 0x00, // mov edi, 0x600000
    0x0f, 0x05, // syscall
    0x89, 0xc7, // mov edi, eax
    0xb8, 0xe7, 0x00, 0x00, 0x00, // mov eax, 231
    0x0f, 0x05, // syscall
];

/// A whole guest: memory, stub from the factory, [`WRITE_EXIT`] run to its end.
fn spawn_and_run(factory: &StubFactory) -> i32 {
    let (mem, view) = guest_memory(&WRITE_EXIT);
    let stub = factory.spawn(mem.as_fd()).unwrap();
    let mut t = guest_thread(&stub, WRITE_EXIT.len());
    run_write_exit(&mut t, &view);
    stub.pid()
}

fn ns(pid: &str, kind: &str) -> std::path::PathBuf {
    std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).unwrap()
}

/// Threads that allocate and free memory (and take a lock) in a loop until dropped: a fork
/// while one of them holds malloc's lock would deadlock a child that allocates.
struct Busy {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Busy {
    fn start(n: usize) -> Busy {
        let stop = Arc::new(AtomicBool::new(false));
        let lock = Arc::new(std::sync::Mutex::new(Vec::<Box<[u8]>>::new()));
        let threads = (0..n)
            .map(|i| {
                let (stop, lock) = (Arc::clone(&stop), Arc::clone(&lock));
                std::thread::spawn(move || {
                    let mut k = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        let v: Vec<Box<[u8]>> = (0..64)
                            .map(|j| vec![i as u8; 16 + (j * 37 + k) % 4000].into())
                            .collect();
                        let mut held = lock.lock().unwrap();
                        held.extend(v);
                        if held.len() > 1024 {
                            held.clear();
                        }
                        k = k.wrapping_add(1);
                    }
                })
            })
            .collect();
        Busy { stop, threads }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            t.join().unwrap();
        }
    }
}

#[test]
fn start_with_threads_running_and_spawn_from_many_threads() {
    let busy = Busy::start(3);
    // Several factories started while the other threads allocate: none may deadlock.
    let factories: Vec<StubFactory> = (0..6).map(|_| StubFactory::start().unwrap()).collect();
    let factory = Arc::new(factories.into_iter().next_back().unwrap());
    let stubs: Vec<i32> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let f = Arc::clone(&factory);
                s.spawn(move || (0..3).map(|_| spawn_and_run(&f)).collect::<Vec<_>>())
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    drop(busy);
    assert_eq!(stubs.len(), 12);
    assert!(factory.is_alive());
}

#[test]
fn factory_stubs_are_confined_and_children_of_the_holder() {
    let factory = StubFactory::start().unwrap();
    let fpid = factory.pid().to_string();
    let me = std::process::id().to_string();
    // The factory: the holder's child, in its own namespaces, without capabilities.
    assert_eq!(status_field(factory.pid(), "PPid"), me);
    for kind in ["user", "net", "ipc", "uts", "mnt"] {
        assert_ne!(ns(&fpid, kind), ns("self", kind), "{kind} namespace");
    }
    assert_eq!(status_field(factory.pid(), "CapEff"), "0000000000000000");
    assert_eq!(status_field(factory.pid(), "NoNewPrivs"), "1");
    // Its own filter (the calls it and its stubs make, EPERM for the rest) and no other.
    assert_eq!(status_field(factory.pid(), "Seccomp"), "2");
    assert_eq!(status_field(factory.pid(), "Seccomp_filters"), "1");
    assert_eq!(
        fds_of(factory.pid()).len(),
        1,
        "the factory keeps only its socket"
    );

    let (mem, view) = guest_memory(&WRITE_EXIT);
    let stub = factory.spawn(mem.as_fd()).unwrap();
    let pid = stub.pid();
    // The stub: made by the factory (its namespaces), handed to the holder (its parent).
    assert_eq!(status_field(pid, "PPid"), me);
    for kind in ["user", "net", "ipc", "uts", "mnt"] {
        assert_eq!(
            ns(&pid.to_string(), kind),
            ns(&fpid, kind),
            "{kind} namespace"
        );
    }
    for caps in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(status_field(pid, caps), "0000000000000000", "{caps}");
    }
    assert_eq!(status_field(pid, "NoNewPrivs"), "1");
    assert_eq!(status_field(pid, "Seccomp"), "2");
    // The factory's filter and its own: nothing of the test process's.
    assert_eq!(status_field(pid, "Seccomp_filters"), "2");
    assert_eq!(max_open_files(pid), ["1024", "1024"]);
    assert_eq!(fds_of(pid), [3, 4, 5]);
    // The factory keeps nothing of it (it closes its copies just after its reply).
    let deadline = Instant::now() + Duration::from_secs(2);
    while fds_of(factory.pid()).len() != 1 {
        assert!(Instant::now() < deadline, "the factory keeps descriptors");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut t = guest_thread(&stub, WRITE_EXIT.len());
    run_write_exit(&mut t, &view);
    // Dropping the stub kills and reaps it (the holder is its parent).
    drop(t);
    drop(stub);
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
}

#[test]
fn without_namespaces() {
    let factory = StubFactory::start_with(FactoryOptions {
        namespaces: false,
        nofile: 16,
    })
    .unwrap();
    let fpid = factory.pid().to_string();
    assert_eq!(ns(&fpid, "user"), ns("self", "user"));
    let pid = spawn_and_run(&factory);
    assert!(pid > 0);
    assert!(matches!(
        StubFactory::start_with(FactoryOptions {
            namespaces: false,
            nofile: 8,
        }),
        Err(TrapError::Invalid(_))
    ));
}

#[test]
fn stub_outlives_the_thread_that_asked_for_it() {
    let factory = StubFactory::start().unwrap();
    let (mem, view) = guest_memory(&WRITE_EXIT);
    let stub = std::thread::scope(|s| {
        s.spawn(|| factory.spawn(mem.as_fd()).unwrap())
            .join()
            .unwrap()
    });
    // The requesting thread is gone; a parent-death signal tied to it would have fired.
    std::thread::sleep(Duration::from_millis(100));
    assert!(stub.is_alive());
    let mut t = guest_thread(&stub, WRITE_EXIT.len());
    run_write_exit(&mut t, &view);

    // For contrast: a stub forked directly by a short-lived thread dies with it.
    let direct = std::thread::spawn(|| {
        let mem = sys::memfd("torpor-test-mem", MEM_SIZE).unwrap();
        StubProcess::spawn(mem.as_fd()).unwrap()
    })
    .join()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while direct.is_alive() {
        assert!(Instant::now() < deadline, "direct stub outlived its thread");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Installs, in the calling thread only, a filter that kills the process on `uname` (as the
/// holder's allowlist kills on anything it does not list).
fn kill_on_uname() {
    let prog = [
        // A = seccomp_data.nr
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: libc::SYS_uname as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: 0x8000_0000, // SECCOMP_RET_KILL_PROCESS
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: 0x7fff_0000, // SECCOMP_RET_ALLOW
        },
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prctl with a valid program; affects only this thread (no TSYNC).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &fprog as *const libc::sock_fprog,
            ),
            0
        );
    }
}

#[test]
fn holder_filter_installed_later_does_not_reach_factory_stubs() {
    let factory = StubFactory::start().unwrap();
    // A dedicated thread confines itself (as the holder does once the sandbox is set up):
    // its later `uname` would kill the process. (ERRNO would prove nothing: TRAP outranks it.)
    std::thread::scope(|s| {
        s.spawn(|| {
            kill_on_uname();
            // From the factory: the guest's uname traps to the holder.
            let (mem, _view) = guest_memory(&UNAME_EXIT);
            let stub = factory.spawn(mem.as_fd()).unwrap();
            // The factory's filter and the stub's own.
            assert_eq!(status_field(stub.pid(), "Seccomp_filters"), "2");
            let mut t = guest_thread(&stub, UNAME_EXIT.len());
            assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
            assert_eq!(t.regs().regs.rax, 63, "uname trapped");
            assert_eq!(t.regs().regs.rdi, DATA);
            t.regs_mut().regs.rax = 0;
            assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
            assert_eq!((t.regs().regs.rax, t.regs().regs.rdi), (231, 0));

            // For contrast: a stub forked by this thread inherits the filter and dies.
            let (mem, _view) = guest_memory(&UNAME_EXIT);
            let direct = StubProcess::spawn(mem.as_fd()).unwrap();
            // This thread's filter and the stub's own.
            assert_eq!(status_field(direct.pid(), "Seccomp_filters"), "2");
            let mut t = guest_thread(&direct, UNAME_EXIT.len());
            assert!(matches!(t.switch(), Err(TrapError::StubDied)));
        })
        .join()
        .unwrap();
    });
}

#[test]
fn dead_factory_fails_spawn_and_stubs_live_on() {
    let factory = StubFactory::start().unwrap();
    let (mem, view) = guest_memory(&WRITE_EXIT);
    let stub = factory.spawn(mem.as_fd()).unwrap();
    let mut t = guest_thread(&stub, WRITE_EXIT.len());
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);

    // SAFETY: signalling our own child (not reaped until the factory is dropped).
    assert_eq!(unsafe { libc::kill(factory.pid(), libc::SIGKILL) }, 0);
    let start = Instant::now();
    let (mem2, _view2) = guest_memory(&WRITE_EXIT);
    let err = factory.spawn(mem2.as_fd()).err();
    assert!(matches!(err, Some(TrapError::StubDied)), "{err:?}");
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(!factory.is_alive());
    assert!(matches!(
        factory.spawn(mem2.as_fd()),
        Err(TrapError::StubDied)
    ));
    drop(factory);

    // The existing stub goes on: its thread, its mapper, new threads.
    assert!(stub.is_alive());
    t.regs_mut().regs.rax = 3;
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!((t.regs().regs.rax, t.regs().regs.rdi), (231, 7));
    let mut t2 = start_thread(&stub);
    run_write_exit(&mut t2, &view);
}

/// The factory shares the test process's memory (`CLONE_VM`, as `kcmp` tells), so it has
/// none of its own to count; a stub it forks from there keeps nothing of that memory (a
/// buffer of the test process is not in the stub's anonymous memory), and runs.
#[test]
fn the_factory_shares_the_holder_s_memory() {
    const BIG: usize = 16 << 20;
    let big = vec![7u8; BIG];
    let factory = StubFactory::start().unwrap();
    // SAFETY: kcmp compares two processes' kernel objects; no memory arguments.
    let same = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            libc::getpid(),
            factory.pid(),
            1, // KCMP_VM
            0,
            0,
        )
    };
    assert_eq!(
        same,
        0,
        "kcmp(KCMP_VM): {}",
        std::io::Error::last_os_error()
    );
    let (mem, view) = guest_memory(&WRITE_EXIT);
    let stub = factory.spawn(mem.as_fd()).unwrap();
    let anon_kib: usize = status_field(stub.pid(), "RssAnon")
        .trim_end_matches(" kB")
        .parse()
        .unwrap();
    assert!(anon_kib < 1024, "the stub's RssAnon: {anon_kib} kB");
    let mut t = guest_thread(&stub, WRITE_EXIT.len());
    run_write_exit(&mut t, &view);
    assert_eq!(std::hint::black_box(big)[BIG - 1], 7);
}

#[test]
fn dropping_the_factory_keeps_its_stubs() {
    let factory = StubFactory::start().unwrap();
    let (mem, view) = guest_memory(&WRITE_EXIT);
    let stub = factory.spawn(mem.as_fd()).unwrap();
    let fpid = factory.pid();
    drop(factory);
    assert!(!std::path::Path::new(&format!("/proc/{fpid}")).exists());
    let mut t = guest_thread(&stub, WRITE_EXIT.len());
    run_write_exit(&mut t, &view);
}
