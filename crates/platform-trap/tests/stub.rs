//! The stub against real processes: guest programs (raw machine code written into the guest
//! memfd) run in a stub, the test plays the holder's kernel.

mod common;

use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use common::{
    expect_fault, fds_of, guest, guest_memory, map_guest, maps_of, run_write_exit, start_thread,
    status_field, CODE, DATA, DATA_OFF, MEM_SIZE, WRITE_EXIT,
};
use platform_trap::sys::{self, Mapping};
use platform_trap::sysmsg::{STUB_BASE, STUB_END, USER_END};
use platform_trap::{bench, StubProcess, StubThread, TrapError, TrapExit};

/// A stub with `code` mapped r-x at [`CODE`] and a read-write data page at [`DATA`].
struct Guest {
    mem: OwnedFd,
    view: Mapping,
    stub: StubProcess,
}

impl Guest {
    fn new(code: &[u8]) -> Guest {
        let (mem, view) = guest_memory(code);
        let stub = StubProcess::spawn(mem.as_fd()).unwrap();
        map_guest(&stub, code.len());
        Guest { mem, view, stub }
    }

    fn thread(&self) -> StubThread {
        start_thread(&self.stub)
    }

    fn data_u64(&self, off: u64) -> u64 {
        self.view.read_u64(DATA_OFF + off)
    }
}

#[test]
fn stub_holds_nothing_of_the_holder() {
    let mem = sys::memfd("torpor-test-mem", MEM_SIZE).unwrap();
    let stub = StubProcess::spawn(mem.as_fd()).unwrap();
    for (start, end, line) in maps_of(stub.pid()) {
        if line.ends_with("[vsyscall]") {
            continue; // the kernel's gate page: not a mapping, cannot be removed
        }
        assert!(
            start >= STUB_BASE && end <= STUB_END,
            "foreign mapping in the stub: {line}"
        );
        assert!(start >= USER_END);
        if line.contains("[vdso]") {
            // The host's vDSO, moved into the region for the application's clock calls.
            assert!(start >= platform_trap::sysmsg::VDSO_ADDR, "{line}");
        }
    }
    // Descriptors: only the control memfd (3), the guest memory (4) and the reply socket (5).
    assert_eq!(fds_of(stub.pid()), [3, 4, 5]);
    assert_eq!(status_field(stub.pid(), "NoNewPrivs"), "1");
    assert_eq!(status_field(stub.pid(), "Seccomp"), "2");
}

#[test]
fn write_then_exit_group() {
    let g = Guest::new(&WRITE_EXIT);
    run_write_exit(&mut g.thread(), &g.view);
}

#[test]
fn getpid_round_trip() {
    let g = Guest::new(&bench::GETPID_LOOP);
    let mut t = g.thread();
    let mut samples = Vec::new();
    for i in 0..2000u64 {
        let start = Instant::now();
        assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
        samples.push(start.elapsed().as_nanos() as u64);
        assert_eq!(t.regs().regs.rax, 39);
        if i > 0 {
            assert_eq!(
                t.regs().regs.rcx,
                CODE + 7,
                "rcx = rip after syscall, as native"
            );
        }
        t.regs_mut().regs.rax = i;
    }
    println!(
        "stub getpid round trip: median {} ns",
        bench::median(&mut samples)
    );
}

guest!(
    fault_guest,
    fault_guest_start,
    fault_guest_end,
    "mov ebx, 0x500000",
    "mov rax, [rbx]",
    "mov rdi, rax",
    "mov eax, 60",
    "syscall",
    "ud2",
);

#[test]
fn page_fault_then_retry() {
    let g = Guest::new(fault_guest());
    let mut t = g.thread();
    let (error_code, addr) = expect_fault(t.switch().unwrap(), 14, libc::SIGSEGV);
    assert_eq!(addr, 0x50_0000);
    assert_eq!(error_code & 0x4, 0x4, "user-mode fault: {error_code:#x}");
    assert_eq!(
        error_code & 0x3,
        0,
        "read of a not-present page: {error_code:#x}"
    );
    assert_eq!(t.regs().regs.rip, CODE + 5, "rip at the faulting load");
    sys::write_fd(&g.mem, 0x20_0000, &0x1234_5678_9abc_def0u64.to_le_bytes()).unwrap();
    g.stub
        .map(0x50_0000, 4096, 0x20_0000, libc::PROT_READ)
        .unwrap();
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!(t.regs().regs.rax, 60);
    assert_eq!(t.regs().regs.rdi, 0x1234_5678_9abc_def0);
}

guest!(
    regs_guest,
    regs_guest_start,
    regs_guest_end,
    "mov r8, 0x0808080808080808",
    "mov r9, 0x0909090909090909",
    "mov r10, 0x1010101010101010",
    "mov r11, 0x1111111111111111",
    "mov r12, 0x1212121212121212",
    "mov r13, 0x1313131313131313",
    "mov r14, 0x1414141414141414",
    "mov r15, 0x1515151515151515",
    "mov rbx, 0x0b0b0b0b0b0b0b0b",
    "mov rbp, 0x0c0c0c0c0c0c0c0c",
    "movq xmm0, r8",
    "mov eax, 500",
    "syscall",
    "mov eax, 0x600000",
    "mov [rax], r12",
    "movdqu [rax + 16], xmm1",
    "mov [rax + 32], r8",
    "mov [rax + 40], rbx",
    "movq [rax + 48], xmm0",
    "mov eax, 60",
    "syscall",
);

#[test]
fn registers_and_fpu() {
    let g = Guest::new(regs_guest());
    let mut t = g.thread();
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    let r = t.regs().regs;
    assert_eq!(r.rax, 500);
    assert_eq!(
        [r.r8, r.r9, r.r10, r.r12, r.r13, r.r14, r.r15, r.rbx, r.rbp],
        [
            0x0808080808080808,
            0x0909090909090909,
            0x1010101010101010,
            0x1212121212121212,
            0x1313131313131313,
            0x1414141414141414,
            0x1515151515151515,
            0x0b0b0b0b0b0b0b0b,
            0x0c0c0c0c0c0c0c0c
        ]
    );
    assert_eq!(r.r11, r.rflags, "r11 = rflags after syscall, as native");
    let fpu = t.fpu().to_vec();
    assert_eq!(fpu.len(), g.stub.xsave_size());
    assert_eq!(
        u64::from_le_bytes(fpu[160..168].try_into().unwrap()),
        0x0808080808080808,
        "xmm0"
    );
    assert_eq!(
        u32::from_le_bytes(fpu[24..28].try_into().unwrap()),
        0x1f80,
        "MXCSR"
    );
    let mut img = fpu.clone();
    img[176..192].copy_from_slice(&[0xa5; 16]); // xmm1
    img[512] |= 2; // XSTATE_BV: SSE state present
    t.set_fpu(&img).unwrap();
    t.regs_mut().regs.r12 = 0xdead_beef_0bad_f00d;
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!(t.regs().regs.rax, 60);
    assert_eq!(
        g.data_u64(0),
        0xdead_beef_0bad_f00d,
        "r12 as set by the holder"
    );
    assert_eq!(g.data_u64(16), 0xa5a5_a5a5_a5a5_a5a5, "xmm1 low");
    assert_eq!(g.data_u64(24), 0xa5a5_a5a5_a5a5_a5a5, "xmm1 high");
    assert_eq!(g.data_u64(32), 0x0808080808080808, "r8 kept");
    assert_eq!(g.data_u64(40), 0x0b0b0b0b0b0b0b0b, "rbx kept");
    assert_eq!(g.data_u64(48), 0x0808080808080808, "xmm0 kept");
    // A header with a compacted format or unknown features is refused.
    let mut bad = fpu.clone();
    bad[527] = 0x80; // XCOMP_BV bit 63
    assert!(matches!(t.set_fpu(&bad), Err(TrapError::Invalid(_))));
}

guest!(
    fs_guest,
    fs_guest_start,
    fs_guest_end,
    "mov r12, fs:[0]",
    "rdfsbase r13",
    "mov eax, 500",
    "syscall",
    "rdfsbase r14",
    "mov r15, fs:[8]",
    "mov eax, 501",
    "syscall",
    "ud2",
);

#[test]
fn fs_base() {
    let g = Guest::new(fs_guest());
    sys::write_fd(
        &g.mem,
        DATA_OFF + 0x100,
        &0x1111_2222_3333_4444u64.to_le_bytes(),
    )
    .unwrap();
    sys::write_fd(
        &g.mem,
        DATA_OFF + 0x208,
        &0x5555_6666_7777_8888u64.to_le_bytes(),
    )
    .unwrap();
    let mut t = g.thread();
    t.regs_mut().fs_base = DATA + 0x100;
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!(t.regs().regs.r12, 0x1111_2222_3333_4444);
    assert_eq!(t.regs().regs.r13, DATA + 0x100);
    assert_eq!(t.regs().fs_base, DATA + 0x100);
    t.regs_mut().fs_base = DATA + 0x200;
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!(t.regs().regs.rax, 501);
    assert_eq!(t.regs().regs.r14, DATA + 0x200);
    assert_eq!(t.regs().regs.r15, 0x5555_6666_7777_8888);
    t.regs_mut().fs_base = 0x8000_0000_0000;
    assert!(matches!(t.switch(), Err(TrapError::Invalid(_))));
}

guest!(
    exceptions_guest,
    exceptions_guest_start,
    exceptions_guest_end,
    // mmap(0x700000, 4096, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_FIXED, -1, 0)
    "mov edi, 0x700000",
    "mov esi, 4096",
    "mov edx, 3",
    "mov r10d, 0x32",
    "mov r8, -1",
    "xor r9d, r9d",
    "mov eax, 9",
    "syscall",
    "int3",
    "ud2",
    "xor ecx, ecx",
    "div ecx",
    "hlt",
    "mov eax, 60",
    "syscall",
);

#[test]
fn syscalls_are_trapped_and_exceptions_reported() {
    let g = Guest::new(exceptions_guest());
    let mut t = g.thread();
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!(t.regs().regs.rax, 9, "mmap reported, not executed");
    assert_eq!(t.regs().regs.rdi, 0x70_0000);
    for (start, end, line) in maps_of(g.stub.pid()) {
        assert!(
            end <= 0x70_0000 || start >= 0x70_1000,
            "the guest's mmap ran: {line}"
        );
    }
    t.regs_mut().regs.rax = (-libc::ENOSYS) as u64;

    expect_fault(t.switch().unwrap(), 3, libc::SIGTRAP);
    let after_int3 = t.regs().regs.rip;

    expect_fault(t.switch().unwrap(), 6, libc::SIGILL);
    assert_eq!(t.regs().regs.rip, after_int3, "rip at ud2");
    t.regs_mut().regs.rip += 2;

    expect_fault(t.switch().unwrap(), 0, libc::SIGFPE);
    t.regs_mut().regs.rip += 2;

    expect_fault(t.switch().unwrap(), 13, libc::SIGSEGV);
    t.regs_mut().regs.rip += 1;

    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!(t.regs().regs.rax, 60);
}

/// `jmp .`
const SPIN: [u8; 2] = [0xeb, 0xfe];

#[test]
fn kick_interrupts_a_looping_thread() {
    let g = Guest::new(&SPIN);
    let mut t = g.thread();
    let kick = t.kicker();
    let kicker = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        kick();
    });
    let start = Instant::now();
    assert_eq!(t.switch().unwrap(), TrapExit::Interrupted);
    assert!(start.elapsed() >= Duration::from_millis(90));
    assert_eq!(t.regs().regs.rip, CODE);
    kicker.join().unwrap();
    // A kick while the thread is stopped interrupts the next switch at once.
    t.kicker()();
    assert_eq!(t.switch().unwrap(), TrapExit::Interrupted);
}

#[test]
fn dead_stub_is_an_error_not_a_hang() {
    let g = Guest::new(&SPIN);
    let mut t = g.thread();
    let pid = g.stub.pid();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: SIGKILL to the stub process we spawned.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let start = Instant::now();
    assert!(matches!(t.switch(), Err(TrapError::StubDied)));
    assert!(start.elapsed() < Duration::from_secs(2));
    killer.join().unwrap();
    assert!(matches!(t.switch(), Err(TrapError::StubDied)));
    assert!(matches!(
        g.stub.map(0x80_0000, 4096, 0, libc::PROT_READ),
        Err(TrapError::StubDied)
    ));
    assert!(!g.stub.is_alive());
}

guest!(
    threads_guest,
    threads_guest_start,
    threads_guest_end,
    "2:",
    "mov eax, 39",
    "mov rdi, r12",
    "syscall",
    "cmp rax, r12",
    "jne 3f",
    "dec r13",
    "jnz 2b",
    "mov eax, 60",
    "syscall",
    "3:",
    "ud2",
);

#[test]
fn two_threads_in_one_stub() {
    const N: u64 = 500;
    let g = Guest::new(threads_guest());
    let threads: Vec<StubThread> = (0..2).map(|_| g.thread()).collect();
    std::thread::scope(|s| {
        for (id, mut t) in threads.into_iter().enumerate() {
            s.spawn(move || {
                let id = id as u64 + 1;
                t.regs_mut().regs.r12 = id;
                t.regs_mut().regs.r13 = N;
                let mut calls = 0;
                loop {
                    let exit = t.switch().unwrap();
                    assert_eq!(exit, TrapExit::Syscall);
                    match t.regs().regs.rax {
                        39 => {
                            assert_eq!(t.regs().regs.rdi, id);
                            calls += 1;
                            t.regs_mut().regs.rax = id;
                        }
                        60 => break,
                        nr => panic!("syscall {nr}"),
                    }
                }
                assert_eq!(calls, N);
            });
        }
    });
    // Both threads exit; their slots are reused by new threads.
    let mut t = g.thread();
    t.regs_mut().regs.r12 = 9;
    t.regs_mut().regs.r13 = 1;
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!(t.regs().regs.rdi, 9);
}

guest!(
    flags_guest,
    flags_guest_start,
    flags_guest_end,
    "pushfq",
    "pop r12",
    "xor r13d, r13d",
    "mov r13w, cs",
    "xor r14d, r14d",
    "mov r14w, ss",
    "mov eax, 500",
    "syscall",
    "ud2",
);

#[test]
fn rflags_masked_and_host_user_selectors() {
    let g = Guest::new(flags_guest());
    let mut t = g.thread();
    // IOPL 3 and VIF are not user-settable; CF, DF and AC are.
    t.regs_mut().regs.rflags = 0x3000 | 0x8_0000 | 0x1 | 0x400 | 0x4_0000;
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    let r = t.regs().regs;
    assert_eq!(r.r12, 0x1 | 0x400 | 0x4_0000 | 0x202);
    assert_eq!((r.r13, r.r14), (0x33, 0x2b));
}

#[test]
fn jumps_to_the_stubs_own_syscalls_are_trapped() {
    let g = Guest::new(&SPIN);
    let mut t = g.thread();
    for (name, addr) in platform_trap::stub_syscall_instructions() {
        // mmap(0x700000, 4096, PROT_READ|PROT_WRITE, MAP_SHARED|MAP_FIXED, <guest memfd>, 0):
        // exactly what the base filter lets the mapper do.
        let r = &mut t.regs_mut().regs;
        r.rip = addr;
        (r.rax, r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9) = (9, 0x70_0000, 4096, 3, 0x11, 4, 0);
        assert_eq!(t.switch().unwrap(), TrapExit::Syscall, "{name}");
        assert_eq!(t.regs().regs.rax, 9, "{name}");
        assert_eq!(t.regs().regs.rip, addr + 2, "{name}");
    }
    for (start, end, line) in maps_of(g.stub.pid()) {
        assert!(
            end <= 0x70_0000 || start >= 0x70_1000,
            "a jump mapped memory: {line}"
        );
    }
}

guest!(
    int80_guest,
    int80_guest_start,
    int80_guest_end,
    "mov eax, 20",
    "int 0x80",
    "ud2",
);

#[test]
fn int80_kills_the_stub() {
    let g = Guest::new(int80_guest());
    let mut t = g.thread();
    assert!(matches!(t.switch(), Err(TrapError::StubDied)));
}

guest!(
    mapper_guest,
    mapper_guest_start,
    mapper_guest_end,
    "mov eax, 0x600000",
    "mov qword ptr [rax], 42",
    "mov eax, 500",
    "syscall",
    "mov eax, 0x600000",
    "mov rbx, [rax]",
    "mov eax, 501",
    "syscall",
    "ud2",
);

#[test]
fn mapper_protect_unmap_map() {
    let g = Guest::new(mapper_guest());
    let mut t = g.thread();
    g.stub.protect(DATA, 4096, libc::PROT_READ).unwrap();
    let (error_code, addr) = expect_fault(t.switch().unwrap(), 14, libc::SIGSEGV);
    // The error code describes the host's PTE: the P bit is set only if the stub had touched
    // the page (here it had not), so only the write bit is meaningful.
    assert_eq!(
        (addr, error_code & 2),
        (DATA, 2),
        "write to a read-only page"
    );
    g.stub
        .protect(DATA, 4096, libc::PROT_READ | libc::PROT_WRITE)
        .unwrap();
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!(t.regs().regs.rax, 500);
    assert_eq!(g.data_u64(0), 42);
    g.stub.unmap(DATA, 4096).unwrap();
    let (error_code, addr) = expect_fault(t.switch().unwrap(), 14, libc::SIGSEGV);
    assert_eq!((addr, error_code & 1), (DATA, 0), "not present");
    g.stub.map(DATA, 4096, DATA_OFF, libc::PROT_READ).unwrap();
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!((t.regs().regs.rax, t.regs().regs.rbx), (501, 42));
    // Failures come back as errors; bad ranges never reach the stub.
    assert!(matches!(
        g.stub.protect(0x90_0000, 4096, libc::PROT_READ),
        Err(TrapError::Mapper(libc::ENOMEM))
    ));
    assert!(matches!(
        g.stub.map(USER_END - 4096, 8192, 0, libc::PROT_READ),
        Err(TrapError::Invalid(_))
    ));
    assert!(matches!(
        g.stub.unmap(0x40_0100, 4096),
        Err(TrapError::Invalid(_))
    ));
}

guest!(
    forger_guest,
    forger_guest_start,
    forger_guest_end,
    // Forge the mapper's reply page forever: "done" with a success value, then a failure.
    "mov rax, 0x7fc000020000",
    "2:",
    "mov dword ptr [rax], 0x7fffffff",
    "mov qword ptr [rax + 8], 0",
    "mov qword ptr [rax + 8], -12",
    "jmp 2b",
);

#[test]
fn forged_mapper_replies_do_not_change_outcomes() {
    let g = Guest::new(forger_guest());
    let mut t = g.thread();
    let kick = t.kicker();
    std::thread::scope(|s| {
        let forger = s.spawn(move || t.switch());
        std::thread::sleep(Duration::from_millis(20));
        for _ in 0..200 {
            g.stub
                .map(0x80_0000, 4096, 0x30_0000, libc::PROT_READ)
                .unwrap();
            g.stub.unmap(0x80_0000, 4096).unwrap();
            assert!(matches!(
                g.stub.protect(0x90_0000, 4096, libc::PROT_READ),
                Err(TrapError::Mapper(_))
            ));
        }
        kick();
        assert_eq!(forger.join().unwrap().unwrap(), TrapExit::Interrupted);
    });
}

guest!(
    avx_guest,
    avx_guest_start,
    avx_guest_end,
    "vpcmpeqb ymm2, ymm2, ymm2",
    "mov eax, 500",
    "syscall",
    "mov eax, 0x600000",
    "vmovdqu [rax], ymm3",
    "vmovdqu [rax + 32], ymm2",
    "mov eax, 60",
    "syscall",
);

#[test]
fn avx_upper_halves_survive_and_can_be_set() {
    let g = Guest::new(avx_guest());
    let mut t = g.thread();
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    let fpu = t.fpu().to_vec();
    // Standard layout: YMM_Hi128 (component 2) at 576, 16 bytes per register.
    assert_ne!(fpu[512] & 4, 0, "XSTATE_BV: AVX state in use");
    assert_eq!(&fpu[576 + 32..576 + 48], &[0xff; 16], "ymm2 upper half");
    assert_eq!(&fpu[160 + 32..160 + 48], &[0xff; 16], "xmm2");
    let mut img = fpu.clone();
    img[160 + 48..160 + 64].copy_from_slice(&[0x11; 16]); // xmm3
    img[576 + 48..576 + 64].copy_from_slice(&[0x22; 16]); // ymm3 upper half
    t.set_fpu(&img).unwrap();
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!(g.data_u64(0), 0x1111_1111_1111_1111);
    assert_eq!(g.data_u64(16), 0x2222_2222_2222_2222);
    assert_eq!(g.data_u64(24), 0x2222_2222_2222_2222);
    assert_eq!(g.data_u64(56), u64::MAX, "ymm2 kept");
}

guest!(
    counter_guest,
    counter_guest_start,
    counter_guest_end,
    "xor r12d, r12d",
    "2:",
    "mov eax, 39",
    "mov rdi, r12",
    "mov rsi, r12",
    "not rsi",
    "syscall",
    "cmp rax, r12",
    "jne 3f",
    "inc r12",
    "jmp 2b",
    "3:",
    "ud2",
);

/// Kicks racing with system calls: every event is either the next call with intact registers
/// or an interruption, and the guest sees every answer.
#[test]
fn kicks_racing_with_syscalls() {
    let g = Guest::new(counter_guest());
    let mut t = g.thread();
    let kick = t.kicker();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                kick();
                std::thread::sleep(Duration::from_micros(50));
            }
        });
        let (mut calls, mut kicks) = (0u64, 0u64);
        while calls < 5000 {
            match t.switch().unwrap() {
                TrapExit::Syscall => {
                    let r = t.regs().regs;
                    assert_eq!((r.rax, r.rdi, r.rsi), (39, calls, !calls));
                    t.regs_mut().regs.rax = calls;
                    calls += 1;
                }
                TrapExit::Interrupted => kicks += 1,
                e => panic!("{e:?} after {calls} calls"),
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        println!("{calls} calls, {kicks} interruptions");
        assert!(kicks > 0);
    });
}

#[test]
fn kill_ends_a_running_switch() {
    let g = Guest::new(&SPIN);
    let mut t = g.thread();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            g.stub.kill();
        });
        assert!(matches!(t.switch(), Err(TrapError::StubDied)));
    });
}

#[test]
fn sigbus_beyond_the_memfd() {
    let g = Guest::new(fault_guest());
    g.stub
        .map(0x50_0000, 4096, MEM_SIZE, libc::PROT_READ)
        .unwrap();
    let mut t = g.thread();
    let (_, addr) = expect_fault(t.switch().unwrap(), 14, libc::SIGBUS);
    assert_eq!(addr, 0x50_0000);
    g.stub
        .map(0x50_0000, 4096, 0x20_0000, libc::PROT_READ)
        .unwrap();
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!((t.regs().regs.rax, t.regs().regs.rdi), (60, 0));
}

guest!(
    scribbler_guest,
    scribbler_guest_start,
    scribbler_guest_end,
    // r12 = a sysmsg area; write pseudo-random words all over its header page.
    "mov r13, 0x9e3779b97f4a7c15",
    "2:",
    "mov rcx, r13",
    "shl rcx, 13",
    "xor r13, rcx",
    "mov rcx, r13",
    "shr rcx, 7",
    "xor r13, rcx",
    "mov rcx, r13",
    "shl rcx, 17",
    "xor r13, rcx",
    "mov rcx, r13",
    "and ecx, 0xff8",
    "mov [r12 + rcx], r13",
    "jmp 2b",
);

/// One application thread scribbles on another's sysmsg header while that one makes system
/// calls: the holder gets events, errors or the stub's death, never a crash or a hang
/// (a watchdog kills the stub, as the kernel layer would).
#[test]
fn scribbling_on_another_threads_sysmsg() {
    use platform_trap::sysmsg::{SYSMSG_ADDR, SYSMSG_SIZE};
    let g = Guest::new(scribbler_guest());
    let mut scribbler = g.thread();
    let mut victim = g.thread();
    victim.regs_mut().regs.rip = CODE + 0x800;
    sys::write_fd(&g.mem, 0x800, &bench::GETPID_LOOP).unwrap();
    scribbler.regs_mut().regs.r12 = SYSMSG_ADDR + SYSMSG_SIZE; // the victim's slot (1)
    let start = Instant::now();
    let (mut events, mut outcome) = (0u32, None);
    std::thread::scope(|s| {
        s.spawn(|| scribbler.switch());
        s.spawn(|| {
            std::thread::sleep(Duration::from_secs(2));
            g.stub.kill();
        });
        for _ in 0..100_000 {
            match victim.switch() {
                Ok(_) => events += 1,
                Err(e) => {
                    outcome = Some(e);
                    break;
                }
            }
        }
        g.stub.kill();
    });
    println!(
        "{events} events, then {outcome:?} after {:?}",
        start.elapsed()
    );
    assert!(start.elapsed() < Duration::from_secs(10));
}

guest!(
    vsyscall_guest,
    vsyscall_guest_start,
    vsyscall_guest_end,
    "mov rsp, 0x601000",
    "xor edi, edi",
    "mov rax, 0xffffffffff600400",
    "call rax",
    "mov rdi, rax",
    "mov eax, 60",
    "syscall",
);

/// The host's vsyscall page (emulated, execute-only here) cannot be unmapped: a call into it
/// is a system call like any other (`time`, 201), trapped by the filter; the application
/// never reaches the host's clock.
#[test]
fn vsyscall_page_is_trapped_too() {
    let g = Guest::new(vsyscall_guest());
    let mut t = g.thread();
    let exit = t.switch().unwrap();
    println!(
        "vsyscall time: {exit:?}, rax {}, rip {:#x}",
        t.regs().regs.rax,
        t.regs().regs.rip
    );
    assert_eq!(exit, TrapExit::Syscall);
    assert_eq!(t.regs().regs.rax, 201);
    t.regs_mut().regs.rax = 77;
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!((t.regs().regs.rax, t.regs().regs.rdi), (60, 77));
}

/// The kernel's guest memory (`platform::GuestMemory::new_shared`, a sealed memfd) backs a
/// stub directly: GPA = memfd offset.
#[test]
fn backed_by_platform_guest_memory() {
    use platform::{Gpa, GuestMemory};
    let mem = GuestMemory::new_shared(MEM_SIZE).unwrap();
    mem.write(Gpa(0x50_0000), &WRITE_EXIT).unwrap();
    let stub = StubProcess::spawn(mem.backing_fd().unwrap()).unwrap();
    stub.map(CODE, 4096, 0x50_0000, libc::PROT_READ | libc::PROT_EXEC)
        .unwrap();
    let mut t = stub.new_thread().unwrap();
    t.regs_mut().regs.rip = CODE;
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    let mut buf = [0u8; 3];
    mem.read(Gpa(0x50_0000 + t.regs().regs.rsi - CODE), &mut buf)
        .unwrap();
    assert_eq!(&buf, b"hi\n");
    t.regs_mut().regs.rax = 3;
    assert_eq!(t.switch().unwrap(), TrapExit::Syscall);
    assert_eq!((t.regs().regs.rax, t.regs().regs.rdi), (231, 7));
}

#[test]
fn batched_maps_land_where_each_asks() {
    let mem = sys::memfd("torpor-test-mem", MEM_SIZE).unwrap();
    let stub = StubProcess::spawn(mem.as_fd()).unwrap();
    // More single pages than one batch holds, each from its own offset (every other page,
    // backwards, so that no two merge), alternating read-only and read-write.
    let n = platform_trap::sysmsg::BATCH_MAX + 7;
    let base = 0x1000_0000u64;
    let maps: Vec<(u64, u64, u64, i32)> = (0..n)
        .map(|i| {
            let prot = if i % 2 == 0 {
                libc::PROT_READ
            } else {
                libc::PROT_READ | libc::PROT_WRITE
            };
            (base + 2 * i * 4096, 4096, (n - i) * 4096, prot)
        })
        .collect();
    stub.map_many(&maps).unwrap();
    let seen = maps_of(stub.pid());
    for &(gva, _, offset, prot) in &maps {
        let (_, _, line) = seen
            .iter()
            .find(|(s, _, _)| *s == gva)
            .unwrap_or_else(|| panic!("nothing mapped at {gva:#x}"));
        let f: Vec<&str> = line.split_whitespace().collect();
        let perms = if prot & libc::PROT_WRITE != 0 {
            "rw-s"
        } else {
            "r--s"
        };
        assert_eq!(
            (f[1], u64::from_str_radix(f[2], 16).unwrap()),
            (perms, offset),
            "{line}"
        );
    }
    // Bad entries are refused before anything reaches the stub.
    assert!(matches!(
        stub.map_many(&[
            (base, 4096, 0, libc::PROT_READ),
            (USER_END, 4096, 0, libc::PROT_READ)
        ]),
        Err(TrapError::Invalid(_))
    ));
}

/// The stub's start code puts its temporary code copy at `TEMP_CODE_ADDR` or a little lower;
/// a holder whose own mappings cover that whole range (a large guest memory can land there)
/// still gets a stub, its code copied to a place far below the region.
#[test]
fn a_stub_starts_when_the_holder_covers_the_temporary_code_address() {
    use platform_trap::sysmsg::TEMP_CODE_ADDR;
    let below = 512u64 << 20;
    let start = TEMP_CODE_ADDR - below;
    let len = below + (64 << 20);
    // Other tests of this binary run in parallel and their mappings (guest memory) can
    // already lie in the range: cover what is free, page by page where a chunk is taken,
    // so that the whole range is mapped one way or another.
    let mut ours = Vec::new();
    let map_at = |addr: u64, len: u64| -> bool {
        // SAFETY: a new inaccessible mapping at a fixed address that NOREPLACE keeps from
        // replacing anything of this process.
        let r = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                len as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if r == libc::MAP_FAILED {
            assert_eq!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EEXIST),
                "mapping {addr:#x}+{len:#x}"
            );
            return false;
        }
        assert_eq!(
            r as u64, addr,
            "MAP_FIXED_NOREPLACE maps where asked or fails"
        );
        true
    };
    const CHUNK: u64 = 2 << 20;
    for chunk in (start..start + len).step_by(CHUNK as usize) {
        if map_at(chunk, CHUNK) {
            ours.push((chunk, CHUNK));
            continue;
        }
        for page in (chunk..chunk + CHUNK).step_by(4096) {
            if map_at(page, 4096) {
                ours.push((page, 4096));
            }
        }
    }
    let g = Guest::new(&WRITE_EXIT);
    run_write_exit(&mut g.thread(), &g.view);
    for (s, e, line) in maps_of(g.stub.pid()) {
        assert!(
            line.ends_with("[vsyscall]") || (s >= STUB_BASE && e <= STUB_END) || s < USER_END,
            "foreign mapping in the stub: {line}"
        );
    }
    for (addr, len) in ours {
        // SAFETY: mappings made above by this test, unmapped once.
        unsafe { libc::munmap(addr as *mut libc::c_void, len as usize) };
    }
}
