//! Spawning a stub: the host checks and page images prepared once ([`StubTemplate`]), the
//! allocation-free fork ([`spawn_parts`], which the stub factory also runs), and the holder's
//! side built from the parts once the stub reports ready ([`StubProcess::from_parts`]).

use super::*;

/// Everything about spawning a stub that does not depend on the guest memory, checked and
/// computed once: building it allocates (and looks glibc's rseq symbols up with `dlsym`),
/// using it in [`spawn_parts`] does not. It is plain data, owning nothing on the heap.
///
/// The rseq registration it records is the *calling thread's*: [`spawn_parts`] must run on
/// that thread or on a `fork` copy of it, or on a template [`StubTemplate::without_rseq`]
/// (the stub factory's: it shares the holder's memory, and the kernel gives such a process no
/// rseq registration).
#[derive(Clone, Copy)]
pub(crate) struct StubTemplate {
    pub(crate) xsave_size: usize,
    blob: &'static [u8],
    meta: asm::Meta,
    /// The base filter's page image (`struct sock_fprog` then the instructions).
    base_filter: FilterImage,
    /// The application threads' filter, likewise.
    app_filter: FilterImage,
    rseq_area: u64,
    rseq_lens: [u64; 4],
    act: KSigaction,
    mask: u64,
    /// The host's vDSO, which every stub gets at [`VDSO_ADDR`].
    vdso: Option<crate::vdso::HostVdso>,
}

impl StubTemplate {
    /// This template for a process that has no rseq registration to undo: one that shares
    /// its parent's memory (`CLONE_VM`), which the kernel registers none for.
    pub(crate) fn without_rseq(self) -> StubTemplate {
        StubTemplate {
            rseq_area: 0,
            rseq_lens: [0; 4],
            ..self
        }
    }

    /// Checks the host and prepares the pieces of every stub spawn.
    ///
    /// # Errors
    /// [`TrapError::Unsupported`] without FSGSBASE for user space, with an XSAVE image too
    /// large for a sysmsg area, signal frames too large for the alternate stack, or stub code
    /// larger than its region.
    pub(crate) fn new() -> Result<StubTemplate, TrapError> {
        if sys::auxval(sys::AT_HWCAP2) & sys::HWCAP2_FSGSBASE == 0 {
            return Err(TrapError::Unsupported(
                "FSGSBASE is not enabled for user space",
            ));
        }
        let xsave_size = sys::xsave_size().ok_or(TrapError::Unsupported("no XSAVE"))?;
        if xsave_size as u64 > XSAVE_MAX || xsave_size < 576 {
            return Err(TrapError::Unsupported(
                "XSAVE image larger than a sysmsg area holds",
            ));
        }
        let minsig = sys::auxval(sys::AT_MINSIGSTKSZ);
        if minsig + 4096 > ALTSTACK_SIZE {
            return Err(TrapError::Unsupported(
                "signal frames larger than the alternate stack",
            ));
        }
        let blob = asm::blob();
        if blob.len() as u64 > CODE_SIZE {
            return Err(TrapError::Unsupported("stub code larger than its region"));
        }
        let meta = asm::meta();
        let handler_mask = HANDLED_SIGNALS
            .iter()
            .filter(|&&s| s != KICK_SIGNAL)
            .fold(0, |m, &s| m | sigbit(s));
        let (rseq_area, rseq_size) = rseq_registration();
        // glibc 2.35-2.39 register 32 bytes with `__rseq_size` 20; later ones the kernel's
        // feature size (AT_RSEQ_FEATURE_SIZE) rounded up to its alignment (AT_RSEQ_ALIGN).
        let feature = sys::auxval(27).next_multiple_of(sys::auxval(28).max(32));
        let rseq_lens = match rseq_size {
            0 => [0; 4],
            n => [u64::from(n), 32, 20, feature.max(32)],
        };
        Ok(StubTemplate {
            xsave_size,
            blob,
            meta,
            base_filter: filter_image(CTRL_FD_BASE_FILTER, &filter::base_filter(&meta)),
            app_filter: filter_image(CTRL_FD_APP_FILTER, &filter::app_filter(&meta)),
            rseq_area,
            rseq_lens,
            act: KSigaction {
                handler: CODE_ADDR + meta.handler,
                flags: (libc::SA_SIGINFO | libc::SA_ONSTACK) as u64 | SA_RESTORER,
                restorer: CODE_ADDR + meta.restorer,
                mask: u64::MAX,
            },
            mask: !handler_mask,
            vdso: crate::vdso::HostVdso::find(),
        })
    }
}

/// What a holder needs to drive a freshly spawned stub (which may still be setting itself
/// up: [`StubProcess::from_parts`] waits for it).
pub(crate) struct StubParts {
    /// The stub's pid, as the holder's PID namespace sees it.
    pub(crate) pid: i32,
    /// A pidfd of the stub.
    pub(crate) pidfd: sys::Fd,
    /// The control memfd (command page, filters, reply page, sysmsg areas).
    pub(crate) ctrl_fd: sys::Fd,
    /// The holder's end of the reply socketpair.
    pub(crate) reply_sock: sys::Fd,
}

/// The host calls of [`spawn_parts`], by [`SpawnError::call`].
pub(crate) const SPAWN_CALLS: [&str; 6] = [
    "memfd_create",
    "ftruncate",
    "mmap",
    "socketpair",
    "clone3",
    "fcntl(F_ADD_SEALS)",
];

/// A failed host call of [`spawn_parts`] (plain data: it crosses the factory's socket).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpawnError {
    /// Index in [`SPAWN_CALLS`].
    pub(crate) call: u8,
    /// The errno.
    pub(crate) errno: i32,
}

impl SpawnError {
    /// `SpawnError` of `call` with the errno of `e` (`EIO` if it has none).
    fn io(call: u8, e: std::io::Error) -> SpawnError {
        SpawnError {
            call,
            errno: e.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    /// The call's name.
    pub(crate) fn call_name(self) -> &'static str {
        SPAWN_CALLS.get(self.call as usize).copied().unwrap_or("?")
    }
}

impl From<SpawnError> for TrapError {
    fn from(e: SpawnError) -> TrapError {
        TrapError::Host {
            call: e.call_name(),
            source: std::io::Error::from_raw_os_error(e.errno),
        }
    }
}

/// Forks a stub for the guest memory `memory` and returns its parts at once, without waiting
/// for its set-up. The child's parent is the caller's process, or with `clone_parent` the
/// caller's own parent (`CLONE_PARENT`: the stub factory hands its stubs to the holder); its
/// `PR_SET_PDEATHSIG` then checks that its parent is `parent_pid`.
///
/// Allocation-free, lock-free and free of libc's thread state (raw system calls only, the
/// template's prepared data), so that a process forked from a multi-threaded one may call it,
/// and the stub factory, which shares the holder's memory but not its threads.
pub(crate) fn spawn_parts(
    t: &StubTemplate,
    memory: BorrowedFd<'_>,
    parent_pid: i32,
    clone_parent: bool,
) -> Result<StubParts, SpawnError> {
    // The control memfd: command page, filters, reply page, sysmsg areas.
    // SAFETY: a valid C string; the flags are known.
    let fd = sys::check(unsafe {
        raw(
            libc::SYS_memfd_create,
            [
                c"torpor-stub-ctrl".as_ptr() as u64,
                u64::from(libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING),
                0,
                0,
                0,
                0,
            ],
        )
    })
    .map_err(|e| SpawnError::io(0, e))?;
    // SAFETY: a new descriptor we own.
    let ctrl_fd = unsafe { sys::Fd::from_raw(fd as RawFd) };
    // SAFETY: valid descriptor.
    sys::check(unsafe {
        raw(
            libc::SYS_ftruncate,
            [ctrl_fd.as_raw_fd() as u64, CTRL_FD_SIZE, 0, 0, 0, 0],
        )
    })
    .map_err(|e| SpawnError::io(1, e))?;
    // SAFETY: valid descriptor; sealing only restricts later size changes.
    sys::check(unsafe {
        raw(
            libc::SYS_fcntl,
            [
                ctrl_fd.as_raw_fd() as u64,
                libc::F_ADD_SEALS as u64,
                (libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL) as u64,
                0,
                0,
                0,
            ],
        )
    })
    .map_err(|e| SpawnError::io(5, e))?;
    let ctrl = Mapping::shared(ctrl_fd.as_fd(), CTRL_FD_SIZE as usize)
        .map_err(|e| SpawnError::io(2, e))?;
    ctrl.write_u64(CTRL_FD_CMD + CMD_XSAVE_SIZE, t.xsave_size as u64);
    ctrl.write_u64(CTRL_FD_CMD + CMD_STUB_SPIN, DEFAULT_STUB_SPIN);
    ctrl.write_u64(CTRL_FD_CMD + CMD_DONE_OK, 1);
    ctrl.write_u64(CTRL_FD_CMD + CMD_DONE_ERR, 2);
    for (off, image) in [
        (CTRL_FD_BASE_FILTER, &t.base_filter),
        (CTRL_FD_APP_FILTER, &t.app_filter),
    ] {
        for (i, w) in image.words().iter().enumerate() {
            ctrl.write_u64(off + 8 * i as u64, *w);
        }
    }
    // The reply socketpair: [holder's end, stub's end]. SEQPACKET: one completion, one window
    // descriptor per message. The stub's end is closed here once the child has its copy.
    let (reply_sock, stub_sock) = sys::seqpacket_pair().map_err(|e| SpawnError::io(3, e))?;

    let mut plan = ChildPlan {
        holder_pid: i64::from(parent_pid),
        ctrl_fd: ctrl_fd.as_raw_fd(),
        mem_fd: memory.as_raw_fd(),
        reply_fd: stub_sock.as_raw_fd(),
        reply: ctrl.at(CTRL_FD_REPLY),
        blob: t.blob.as_ptr(),
        blob_len: t.blob.len(),
        temp_len: t.blob.len().next_multiple_of(4096),
        init_off: t.meta.init as usize,
        rseq_area: t.rseq_area,
        rseq_lens: t.rseq_lens,
        act: t.act,
        dfl: KSigaction {
            handler: 0,
            flags: 0,
            restorer: 0,
            mask: 0,
        },
        mask: t.mask,
        no_core: libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        },
        no_altstack: libc::stack_t {
            ss_sp: std::ptr::null_mut(),
            ss_flags: libc::SS_DISABLE,
            ss_size: 0,
        },
        vdso: [(0, 0, 0); crate::vdso::MAX_PIECES],
        vdso_moves: 0,
    };
    if let Some(v) = &t.vdso {
        for (slot, m) in plan.vdso.iter_mut().zip(v.moves()) {
            *slot = m;
            plan.vdso_moves += 1;
        }
    }

    let parent_flag = if clone_parent {
        libc::CLONE_PARENT as u64
    } else {
        0
    };
    // Exit signal 0: only a `waitid(__WALL)` (the holder's, in `Shared::drop`) sees the
    // stub's end. With CLONE_PARENT the kernel takes the caller's own exit signal instead
    // (the factory's, 0 too) and refuses any other value.
    // SAFETY: the child runs only `child_main`, which never returns.
    let (pid, pidfd) = match unsafe { fork_with_pidfd(parent_flag) } {
        // SAFETY: in the child, with the plan prepared above.
        Ok(Forked::Child) => unsafe { child_main(&plan) },
        Ok(Forked::Parent { pid, pidfd }) => (pid, pidfd),
        Err(errno) => return Err(SpawnError { call: 4, errno }),
    };
    drop(stub_sock);
    Ok(StubParts {
        pid,
        pidfd,
        ctrl_fd,
        reply_sock,
    })
}

impl StubProcess {
    /// Spawns a stub process for the guest memory `memory` (a memfd the holder created and
    /// sized; guest-physical address = offset in it), forked from the calling thread (see
    /// [`crate::factory::StubFactory`] for stubs that must not inherit the caller's seccomp
    /// filters or die with the calling thread). Returns once the stub is ready for
    /// mapper commands, with nothing mapped below [`USER_END`].
    ///
    /// # Errors
    /// [`TrapError::Unsupported`] without FSGSBASE for user space or with an XSAVE image too
    /// large for a sysmsg area; [`TrapError::Host`] if a host call fails;
    /// [`TrapError::Setup`] if the child failed a set-up step; [`TrapError::StubDied`] if it died.
    pub fn spawn(memory: BorrowedFd<'_>) -> Result<StubProcess, TrapError> {
        let t = StubTemplate::new()?;
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let parts = spawn_parts(&t, memory, pid, false)?;
        StubProcess::from_parts(parts, &t)
    }

    /// Builds the holder's side of a stub from its parts (spawned by this process or by the
    /// stub factory) and waits until the stub is ready: maps the control memfd, checks it is
    /// one `spawn_parts` prepared for this host, waits for the stub's ready report.
    ///
    /// # Errors
    /// [`TrapError::Setup`] if the stub failed a set-up step, [`TrapError::StubDied`] if it
    /// died, [`TrapError::Protocol`] for a control memfd of the wrong size or layout,
    /// [`TrapError::Host`] if mapping it fails.
    pub(crate) fn from_parts(parts: StubParts, t: &StubTemplate) -> Result<StubProcess, TrapError> {
        let StubParts {
            pid,
            pidfd,
            ctrl_fd,
            reply_sock,
        } = parts;
        let (pidfd, ctrl_fd, reply_sock) = (
            OwnedFd::from(pidfd),
            OwnedFd::from(ctrl_fd),
            OwnedFd::from(reply_sock),
        );
        // SAFETY: a zeroed stat for fstat to fill.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor and stat buffer.
        if unsafe { libc::fstat(ctrl_fd.as_raw_fd(), &mut st) } < 0 {
            return Err(host("fstat")(std::io::Error::last_os_error()));
        }
        if st.st_size as u64 != CTRL_FD_SIZE {
            return Err(TrapError::Protocol("control memfd size"));
        }
        let ctrl = Mapping::shared(ctrl_fd.as_fd(), CTRL_FD_SIZE as usize).map_err(host("mmap"))?;
        drop(ctrl_fd);
        let xsave_size = t.xsave_size;
        let shared = Arc::new(Shared {
            pid,
            pidfd,
            ctrl,
            reply_sock,
            mapper: Mutex::new(0),
            mapper_pin: Mutex::default(),
            windows: Mutex::new(Windows::new()),
            nofile: AtomicU64::new(0),
            slots: Mutex::new(vec![false; MAX_THREADS as usize]),
            xsave_size,
            xcr0: sys::user_xfeatures(),
            mxcsr_mask: sys::mxcsr_mask(),
            meta: t.meta,
            dead: AtomicBool::new(false),
        });
        if shared.ctrl.read_u64(CTRL_FD_CMD + CMD_XSAVE_SIZE) != xsave_size as u64 {
            return Err(TrapError::Protocol("control memfd layout"));
        }
        let ready = shared.wait_reply(Instant::now() + COMMAND_DEADLINE);
        let stage = shared.ctrl.read_u32(CTRL_FD_REPLY + REPLY_STAGE);
        if stage != 0 {
            let ret = shared.ctrl.read_u64(CTRL_FD_REPLY + REPLY_ERRNO) as i64;
            let step = STAGE_NAMES.get(stage as usize).copied().unwrap_or("?");
            return Err(TrapError::Setup { step, ret });
        }
        match ready {
            Ok(0) => {}
            Ok(_) => return Err(TrapError::Protocol("stub set-up failed")),
            Err(e) => return Err(e),
        }
        // Written by the child before the stub code ran, so before any application code.
        let nofile = shared
            .ctrl
            .read_u64(CTRL_FD_REPLY + REPLY_NOFILE)
            .min(STUB_NOFILE);
        shared.nofile.store(nofile, Ordering::Relaxed);
        tracing::debug!(
            pid,
            xsave_size,
            nofile,
            blob = t.blob.len(),
            "trap: stub ready"
        );
        Ok(StubProcess { shared })
    }
}

/// The page image of a seccomp program at control-memfd offset `off`, as words:
/// `struct sock_fprog { unsigned short len; struct sock_filter *filter; }` (the pointer as the
/// stub sees it), then the instructions at `off + 16`.
pub(super) fn filter_image(off: u64, prog: &[SockFilter]) -> FilterImage {
    assert!(
        prog.len() * 8 + 16 <= 4096,
        "seccomp program larger than its page"
    );
    let mut image = FilterImage {
        words: [0; 512],
        len: 2 + prog.len(),
    };
    image.words[0] = prog.len() as u64;
    image.words[1] = CTRL_ADDR + off + 16;
    for (w, f) in image.words[2..].iter_mut().zip(prog) {
        *w = u64::from(f.code)
            | u64::from(f.jt) << 16
            | u64::from(f.jf) << 24
            | u64::from(f.k) << 32;
    }
    image
}

/// A seccomp program's page image in the control memfd, as words: `struct sock_fprog`
/// (length, then the address of the instructions) and the instructions, at most a page.
#[derive(Clone, Copy)]
pub(super) struct FilterImage {
    words: [u64; 512],
    len: usize,
}

impl FilterImage {
    fn words(&self) -> &[u64] {
        &self.words[..self.len]
    }
}
