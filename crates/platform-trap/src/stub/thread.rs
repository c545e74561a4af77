//! Application threads in a stub: starting one ([`StubProcess::new_thread`]), its registers
//! and FPU state, and one [`StubThread::switch`] (run until the next trap, then report why).

use super::*;

impl StubProcess {
    /// Starts a new application thread in the stub; it waits in its handler for the first
    /// [`StubThread::switch`]. Its registers start zeroed (RFLAGS = 0x202, FS/GS base 0) and
    /// its FPU in the initial state (FCW 0x37f, MXCSR 0x1f80).
    ///
    /// # Errors
    /// [`TrapError::TooManyThreads`] with [`MAX_THREADS`] threads; [`TrapError::Protocol`]
    /// if the thread did not start as expected; [`TrapError::StubDied`].
    pub fn new_thread(&self) -> Result<StubThread, TrapError> {
        let sh = &self.shared;
        let slot = {
            let mut slots = sh.slots.lock().unwrap_or_else(|e| e.into_inner());
            let slot = slots
                .iter()
                .position(|&used| !used)
                .ok_or(TrapError::TooManyThreads)?;
            slots[slot] = true;
            slot
        };
        let mut t = StubThread {
            shared: Arc::clone(sh),
            slot,
            base: Shared::sysmsg_off(slot),
            tid: 0,
            pidfd: None,
            ctx: UserContext::default(),
            fpu: vec![0; sh.xsave_size],
            fpu_dirty: false,
            fpu_features: 0,
            mxcsr_mask: 0xffff,
            spin: DEFAULT_SPIN,
            started: false,
            pairing: crate::pair::Pairing::default(),
        };
        let c = &sh.ctrl;
        c.write_bytes(t.base, &[0u8; 0x100]);
        let tid = sh.command(OP_CLONE, [slot as u64, 0, 0, 0, 0])?;
        t.started = true;
        t.tid = i32::try_from(tid)
            .ok()
            .filter(|&t| t > 0)
            .ok_or(TrapError::Protocol("clone result"))?;
        let state = c.atomic_u32(t.base + S_STATE);
        let waiting = c.atomic_u32(t.base + S_HOLDER_WAITING);
        let v = sh.wait_until(
            state,
            |v| v != STATE_IDLE,
            Duration::ZERO,
            Some(Instant::now() + COMMAND_DEADLINE),
            Some(waiting),
            None,
        )?;
        if v != STATE_EVENT {
            return Err(TrapError::Protocol("thread start state"));
        }
        let exit = t.read_event()?;
        if exit != TrapExit::Syscall
            || t.ctx.regs.rax != libc::SYS_getpid as u64
            || t.ctx.regs.rip != CODE_ADDR + sh.meta.site_t_first
        {
            return Err(TrapError::Protocol("thread start event"));
        }
        // The frame's image tells the features the kernel saves; start from the init state.
        let magic = u32::from_le_bytes(t.fpu[464..468].try_into().expect("4 bytes"));
        let size = u32::from_le_bytes(t.fpu[480..484].try_into().expect("4 bytes"));
        let features = u64::from_le_bytes(t.fpu[472..480].try_into().expect("8 bytes"));
        if magic != FP_XSTATE_MAGIC1 || size as usize != sh.xsave_size || features & !sh.xcr0 != 0 {
            return Err(TrapError::Unsupported(
                "signal frame without the expected XSAVE image",
            ));
        }
        // What `set_fpu` accepts comes from the holder's own CPU view, not from the frame
        // (which other application threads could have written).
        t.fpu_features = sh.xcr0;
        t.mxcsr_mask = sh.mxcsr_mask;
        let mut init = vec![0u8; sh.xsave_size];
        init[0..2].copy_from_slice(&0x37fu16.to_le_bytes());
        init[24..28].copy_from_slice(&0x1f80u32.to_le_bytes());
        init[28..32].copy_from_slice(&t.mxcsr_mask.to_le_bytes());
        init[464..512].copy_from_slice(&t.fpu[464..512]);
        t.fpu = init;
        t.fpu_dirty = true;
        t.ctx = UserContext::default();
        t.ctx.regs.rflags = RFLAGS_FIXED;
        t.pidfd = thread_pidfd(sh.pid, t.tid);
        Ok(t)
    }
}

/// A pidfd for thread `tid` of the stub `pid`, if it is one (the tid comes from the reply page,
/// which the application can forge: a tid outside the stub is refused).
pub(super) fn thread_pidfd(pid: i32, tid: i32) -> Option<OwnedFd> {
    let task = format!("/proc/{pid}/task/{tid}");
    let ours = || std::path::Path::new(&task).exists();
    if !ours() {
        return None;
    }
    let fd = sys::pidfd_open(tid, sys::PIDFD_THREAD).ok()?;
    // Still ours after the open: the pidfd cannot refer to a reused tid elsewhere.
    ours().then_some(fd)
}

/// One application thread in a stub: its registers and FPU as of the last event, and the
/// means to run it until the next.
pub struct StubThread {
    shared: Arc<Shared>,
    slot: usize,
    /// Offset of the sysmsg area in the control mapping.
    base: u64,
    tid: i32,
    /// A pidfd for this thread (`PIDFD_THREAD`), to wait for its exit.
    pidfd: Option<OwnedFd>,
    ctx: UserContext,
    fpu: Vec<u8>,
    fpu_dirty: bool,
    /// XSAVE features an image may hold (the host's XCR0).
    fpu_features: u64,
    mxcsr_mask: u32,
    spin: Duration,
    started: bool,
    /// Its CPU pairing with the holder thread ([`crate::pair`]).
    pairing: crate::pair::Pairing,
}

const REG_COUNT: usize = 18;

fn regs_to_array(r: &Regs) -> [u64; REG_COUNT] {
    [
        r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rsp, r.rbp, r.r8, r.r9, r.r10, r.r11, r.r12,
        r.r13, r.r14, r.r15, r.rip, r.rflags,
    ]
}

fn regs_from_array(a: [u64; REG_COUNT]) -> Regs {
    Regs {
        rax: a[0],
        rbx: a[1],
        rcx: a[2],
        rdx: a[3],
        rsi: a[4],
        rdi: a[5],
        rsp: a[6],
        rbp: a[7],
        r8: a[8],
        r9: a[9],
        r10: a[10],
        r11: a[11],
        r12: a[12],
        r13: a[13],
        r14: a[14],
        r15: a[15],
        rip: a[16],
        rflags: a[17],
    }
}

fn canonical(a: u64) -> bool {
    !(0x8000_0000_0000..0xffff_8000_0000_0000).contains(&a)
}

impl StubThread {
    /// The registers as of the last event (for a syscall: number in `rax`, `rip` after the
    /// `syscall` instruction).
    pub fn regs(&self) -> &UserContext {
        &self.ctx
    }

    /// The registers the next [`StubThread::switch`] resumes with.
    pub fn regs_mut(&mut self) -> &mut UserContext {
        &mut self.ctx
    }

    /// The FPU/SSE/AVX state as a standard (non-compacted) XSAVE image of the host's size,
    /// as of the last event.
    pub fn fpu(&self) -> &[u8] {
        &self.fpu
    }

    /// Replaces the FPU state the next switch resumes with. `xsave` is a standard XSAVE image
    /// at least [`StubProcess::xsave_size`] long (the rest is ignored). Bytes 464..512 (the
    /// kernel's software-reserved area) are ignored.
    ///
    /// # Errors
    /// [`TrapError::Invalid`] if the image is too short, its XSAVE header is not a standard
    /// one with features the host saves, or MXCSR sets reserved bits.
    pub fn set_fpu(&mut self, xsave: &[u8]) -> Result<(), TrapError> {
        let n = self.fpu.len();
        let img = xsave
            .get(..n)
            .ok_or(TrapError::Invalid("XSAVE image too short"))?;
        let bv = u64::from_le_bytes(img[512..520].try_into().expect("8 bytes"));
        if bv & !self.fpu_features != 0 || img[520..576].iter().any(|&b| b != 0) {
            return Err(TrapError::Invalid("XSAVE header"));
        }
        let mxcsr = u32::from_le_bytes(img[24..28].try_into().expect("4 bytes"));
        if mxcsr & !self.mxcsr_mask != 0 {
            return Err(TrapError::Invalid("MXCSR reserved bits"));
        }
        let sw: [u8; 48] = self.fpu[464..512].try_into().expect("48 bytes");
        self.fpu.copy_from_slice(img);
        self.fpu[464..512].copy_from_slice(&sw);
        self.fpu_dirty = true;
        Ok(())
    }

    /// The stub thread's host tid (for affinity and tests).
    pub fn tid(&self) -> i32 {
        self.tid
    }

    /// How long [`StubThread::switch`] spins on the state word before it sleeps, when the
    /// stub thread last stopped on another CPU than the holder's current one (on one CPU,
    /// spinning only delays the stub thread). Default [`DEFAULT_SPIN`].
    pub fn set_spin(&mut self, spin: Duration) {
        self.spin = spin;
    }

    /// A handle that makes a running [`StubThread::switch`] of this thread return
    /// [`TrapExit::Interrupted`] soon: it sends the kick signal to the stub thread (`tgkill`;
    /// a no-op once the stub is gone). A kick sent while the thread is stopped stays pending and
    /// interrupts the next switch at once; several kicks merge into one.
    pub fn kicker(&self) -> impl Fn() + Send + Sync + 'static {
        let shared = Arc::downgrade(&self.shared);
        let tid = self.tid;
        move || {
            // tgkill: only a thread of the stub's thread group can be hit (the tid came from
            // the forgeable reply page), and while `Shared` lives the stub is not reaped, so
            // its pid cannot have been reused.
            if let Some(sh) = shared.upgrade() {
                // SAFETY: no memory arguments.
                unsafe { libc::syscall(libc::SYS_tgkill, sh.pid, tid, KICK_SIGNAL) };
            }
        }
    }

    /// Runs application code until the next event: writes the registers (and the FPU image if
    /// it changed) to sysmsg, sets RUN, wakes the stub thread and waits for EVENT; then copies
    /// the event out once.
    ///
    /// # Errors
    /// [`TrapError::StubDied`] if the stub process died (detected within 50 ms);
    /// [`TrapError::Invalid`] for a non-canonical FS/GS base; [`TrapError::Protocol`] if the
    /// stub thread's report is malformed (the application can scribble on sysmsg).
    pub fn switch(&mut self) -> Result<TrapExit, TrapError> {
        if self.shared.dead.load(Ordering::Relaxed) {
            return Err(TrapError::StubDied);
        }
        if !canonical(self.ctx.fs_base) || !canonical(self.ctx.gs_base) {
            return Err(TrapError::Invalid("non-canonical FS/GS base"));
        }
        let c = &self.shared.ctrl;
        let b = self.base;
        for (i, v) in regs_to_array(&self.ctx.regs).iter().enumerate() {
            c.write_u64(b + S_REGS + 8 * i as u64, *v);
        }
        c.write_u64(b + S_FS_BASE, self.ctx.fs_base);
        c.write_u64(b + S_GS_BASE, self.ctx.gs_base);
        if self.fpu_dirty {
            c.write_bytes(b + S_XSAVE, &self.fpu);
            c.write_u32(b + S_FPU_DIRTY, 1);
            self.fpu_dirty = false;
        }
        // SAFETY: sched_getcpu has no preconditions (vDSO getcpu).
        let cpu = unsafe { libc::sched_getcpu() } as u32;
        c.write_u32(b + S_HOLDER_CPU, cpu);
        let pidfd = self.pidfd.as_ref().map(AsFd::as_fd);
        self.pairing.before_run(self.tid, pidfd, cpu);
        let state = c.atomic_u32(b + S_STATE);
        // The register writes above are volatile, not atomic: keep them before RUN.
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        // xchg: a full barrier before the load of the stub's waiting flag (see `wait_until`).
        state.swap(STATE_RUN, Ordering::SeqCst);
        if c.atomic_u32(b + S_STUB_WAITING).load(Ordering::SeqCst) != 0 {
            sys::futex_wake(state, 1);
        }
        // Spinning pays only when the stub thread runs on another CPU.
        let spin = if !self.pairing.is_pinned() && c.read_u32(b + S_STUB_CPU) != cpu {
            self.spin
        } else {
            Duration::ZERO
        };
        let waiting = c.atomic_u32(b + S_HOLDER_WAITING);
        let pinned = self.pairing.is_pinned();
        let started = Instant::now();
        let (tid, pairing) = (self.tid, &mut self.pairing);
        let mut release = || pairing.release(tid, pidfd);
        let long_wait: Option<(Duration, &mut dyn FnMut())> = if pinned {
            Some((crate::pair::RELEASE_AFTER, &mut release))
        } else {
            None
        };
        let v = self.shared.wait_until(
            state,
            |v| v != STATE_RUN,
            spin,
            None,
            Some(waiting),
            long_wait,
        )?;
        self.pairing.after_run(started.elapsed(), self.tid, pidfd);
        if v != STATE_EVENT {
            return Err(TrapError::Protocol("thread state"));
        }
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        self.read_event()
    }

    /// Copies the event, registers and FPU image out of sysmsg (once) and decodes the event.
    fn read_event(&mut self) -> Result<TrapExit, TrapError> {
        let c = &self.shared.ctrl;
        let b = self.base;
        let mut a = [0u64; REG_COUNT];
        for (i, v) in a.iter_mut().enumerate() {
            *v = c.read_u64(b + S_REGS + 8 * i as u64);
        }
        self.ctx.regs = regs_from_array(a);
        self.ctx.fs_base = c.read_u64(b + S_FS_BASE);
        self.ctx.gs_base = c.read_u64(b + S_GS_BASE);
        c.read_bytes(b + S_XSAVE, &mut self.fpu);
        let event = c.read_u32(b + S_EVENT);
        match event {
            EV_SYSCALL => Ok(TrapExit::Syscall),
            EV_KICK => Ok(TrapExit::Interrupted),
            EV_FAULT => {
                let trapno = c.read_u64(b + S_TRAPNO);
                let vector = u8::try_from(trapno)
                    .ok()
                    .filter(|&v| v < 32)
                    .ok_or(TrapError::Protocol("trap number"))?;
                Ok(TrapExit::Fault {
                    vector,
                    error_code: c.read_u64(b + S_ERR),
                    addr: c.read_u64(b + S_ADDR),
                    signal: c.read_u32(b + S_SIGNO) as i32,
                })
            }
            _ => Err(TrapError::Protocol("event kind")),
        }
    }
}

impl Drop for StubThread {
    fn drop(&mut self) {
        let pidfd = self.pidfd.as_ref().map(AsFd::as_fd);
        self.pairing.release(self.tid, pidfd);
        let sh = &self.shared;
        let mut free = !self.started;
        if self.started && sh.alive().is_ok() {
            // Tell the thread to exit from its handler, then wait until it is gone so its
            // sysmsg area can be reused.
            let c = &sh.ctrl;
            let state = c.atomic_u32(self.base + S_STATE);
            if state.load(Ordering::Acquire) == STATE_EVENT {
                state.store(STATE_EXIT, Ordering::SeqCst);
                sys::futex_wake(state, 1);
                free = match &self.pidfd {
                    Some(fd) => sys::pidfd_wait(fd.as_fd(), Duration::from_secs(1)),
                    None => false,
                };
            }
        }
        if free {
            let mut slots = sh.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots[self.slot] = false;
        }
    }
}
