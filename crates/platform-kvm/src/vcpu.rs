//! A vCPU: runs one guest thread's ring-3 code and decodes each exit into an [`Exit`].
//!
//! The host keeps the thread's user-mode register state ([`UserContext`]). On every entry it
//! loads that state into the vCPU with ring-3 segments (through `KVM_CAP_SYNC_REGS`, so an
//! exit costs one `KVM_RUN`); on every exit the CPU is in a ring-0 stub and the host reads the
//! state back:
//! - syscall stub: the user `rip` and `rflags` are in `rcx` and `r11` (as `syscall` left them);
//! - exception stub: the CPU pushed `[error code,] rip, cs, rflags, rsp, ss` on the vCPU's
//!   ring-0 stack, read back from guest memory.
//!
//! Pending page-table updates are applied first by entering the PTE-sync stub (see
//! [`crate::stubs`]), one extra exit.

use std::sync::Arc;

use kvm_bindings::{kvm_msr_entry, kvm_regs, kvm_segment, kvm_sregs, kvm_xcrs, CpuId, Msrs};
use std::sync::atomic::AtomicU8;

use kvm_ioctls::{SyncReg, VcpuExit, VcpuFd, VmFd};

use platform::layout::{self, KERNEL_CS, KERNEL_SS, USER_CS, USER_SS};
use platform::{
    ExceptionInfo, Exit, Gpa, GuestMemory, Gva, PteRun, Regs, UserContext, FPU_STATE_SIZE,
};

use crate::kicker::VcpuKicker;
use crate::stubs;

/// A ring-0 syscall entry's frame on the user stack: see [`RawExit::SyscallOnUserStack`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawExit {
    /// A neutral exit.
    Exit(Exit),
    /// A syscall whose entry stub ran in ring 0 with the user's stack: the CPU pushed the
    /// 5-word #UD frame (rip = syscall stub, kernel cs…) at `frame` on the user stack. The
    /// context's `rip`/`rflags` are set from `rcx`/`r11`; the frame must be checked and `rsp`
    /// set to `frame + 40` (the user's stack pointer before the push): [`crate::KvmContext`]
    /// does it.
    SyscallOnUserStack {
        /// User address of the pushed frame.
        frame: Gva,
    },
}

/// Errors running a vCPU. Any of these ends the sandbox: they are host failures or a broken
/// platform invariant, never something the application can cause on purpose.
#[derive(Debug, thiserror::Error)]
pub enum VcpuError {
    /// A KVM ioctl failed.
    #[error("KVM {op} failed: {source}")]
    Kvm {
        /// The operation.
        op: &'static str,
        /// Cause.
        source: kvm_ioctls::Error,
    },
    /// An exception was raised in ring 0 (inside a stub).
    #[error("exception {vector} in a ring-0 stub at rip {rip:#x} (cr2 {cr2:#x})")]
    KernelFault {
        /// The vector.
        vector: u8,
        /// Faulting ring-0 instruction.
        rip: u64,
        /// CR2.
        cr2: u64,
    },
    /// KVM reported an exit the platform does not expect.
    #[error("unexpected vCPU exit: {0}")]
    Unexpected(String),
    /// The ring-0 stack could not be read.
    #[error("reading the exception frame: {0}")]
    Frame(#[from] platform::MemoryError),
    /// The vCPU index is out of range.
    #[error("vCPU index {0} exceeds the platform limit")]
    BadIndex(usize),
}

/// Size of the area [`Vcpu::get_xsave`] and [`Vcpu::set_xsave`] exchange (`struct kvm_xsave`).
pub const XSAVE_AREA_SIZE: usize = FPU_STATE_SIZE;

/// Largest number of runs in one PTE-sync batch (the batch buffer is one page).
pub const MAX_RUNS_PER_BATCH: usize = 4096 / 16;

const RFLAGS_RESERVED: u64 = 1 << 1;
const RFLAGS_IF: u64 = 1 << 9;
/// Flags ring 3 may set: CF PF AF ZF SF TF DF OF AC ID (never IOPL, NT, VM, IF is forced on).
const USER_RFLAGS_MASK: u64 = 0x0024_0dd5;
const MSR_STAR: u32 = 0xc000_0081;
const MSR_LSTAR: u32 = 0xc000_0082;
const MSR_FMASK: u32 = 0xc000_0084;
const EFER_SCE: u64 = 1 << 0;
const EFER_LME: u64 = 1 << 8;
const EFER_LMA: u64 = 1 << 10;
const EFER_NXE: u64 = 1 << 11;
const CR0_PE: u64 = 1 << 0;
const CR0_MP: u64 = 1 << 1;
const CR0_ET: u64 = 1 << 4;
const CR0_NE: u64 = 1 << 5;
const CR0_WP: u64 = 1 << 16;
const CR0_PG: u64 = 1 << 31;
const CR4_PAE: u64 = 1 << 5;
const CR4_OSFXSR: u64 = 1 << 9;
const CR4_OSXMMEXCPT: u64 = 1 << 10;
const CR4_OSXSAVE: u64 = 1 << 18;

/// A vCPU with its host-side copy of the running thread's user context.
pub struct Vcpu {
    fd: VcpuFd,
    mem: Arc<GuestMemory>,
    index: usize,
    kernel_sregs: kvm_sregs,
    /// The thread's user-mode state; the kernel reads and edits it between runs.
    pub user: UserContext,
    exits: u64,
    kicker: VcpuKicker,
}

fn segment(selector: u16, code: bool, dpl: u8) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_: if code { 11 } else { 3 },
        present: 1,
        dpl,
        db: u8::from(!code),
        s: 1,
        l: u8::from(code),
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

impl Vcpu {
    pub(crate) fn new(
        vm: &VmFd,
        mem: Arc<GuestMemory>,
        cpuid: &CpuId,
        index: usize,
        cr3: Gpa,
    ) -> Result<Self, VcpuError> {
        if index >= layout::MAX_VCPUS {
            return Err(VcpuError::BadIndex(index));
        }
        let kvm = |op| move |source| VcpuError::Kvm { op, source };
        let mut fd = vm.create_vcpu(index as u64).map_err(kvm("CREATE_VCPU"))?;
        fd.set_cpuid2(cpuid).map_err(kvm("SET_CPUID2"))?;

        // x87, SSE and AVX state enabled (XCR0 = 7), as DESIGN.md measured.
        let mut xcrs = kvm_xcrs {
            nr_xcrs: 1,
            ..Default::default()
        };
        xcrs.xcrs[0].xcr = 0;
        xcrs.xcrs[0].value = 7;
        fd.set_xcrs(&xcrs).map_err(kvm("SET_XCRS"))?;

        let mut s = fd.get_sregs().map_err(kvm("GET_SREGS"))?;
        let kcode = segment(KERNEL_CS, true, 0);
        let kdata = segment(KERNEL_SS, false, 0);
        s.cs = kcode;
        s.ds = kdata;
        s.es = kdata;
        s.fs = kdata;
        s.gs = kdata;
        s.ss = kdata;
        let tss_sel = layout::TSS_SELECTOR_BASE + 16 * index as u16;
        s.tr = kvm_segment {
            base: layout::direct_map(layout::tss(index)).raw(),
            limit: crate::gdt::TSS_LIMIT,
            selector: tss_sel,
            type_: 11, // busy 64-bit TSS
            present: 1,
            dpl: 0,
            db: 0,
            s: 0,
            l: 0,
            g: 0,
            avl: 0,
            unusable: 0,
            padding: 0,
        };
        s.gdt.base = layout::direct_map(layout::GDT).raw();
        s.gdt.limit = (layout::GDT_SIZE - 1) as u16;
        s.idt.base = layout::direct_map(layout::IDT).raw();
        s.idt.limit = 256 * 16 - 1;
        s.cr0 = CR0_PE | CR0_MP | CR0_ET | CR0_NE | CR0_WP | CR0_PG;
        s.cr4 = CR4_PAE | CR4_OSFXSR | CR4_OSXMMEXCPT | CR4_OSXSAVE;
        s.cr3 = cr3.raw();
        s.efer = EFER_SCE | EFER_LME | EFER_LMA | EFER_NXE;
        fd.set_sregs(&s).map_err(kvm("SET_SREGS"))?;

        let msrs = Msrs::from_entries(&[
            // sysret selectors base 0x10 (unused: the host returns to ring 3), syscall CS 0x08.
            kvm_msr_entry {
                index: MSR_STAR,
                data: (0x10u64 << 48) | (u64::from(KERNEL_CS) << 32),
                ..Default::default()
            },
            kvm_msr_entry {
                index: MSR_LSTAR,
                data: layout::direct_map(stubs::syscall_entry()).raw(),
                ..Default::default()
            },
            // Mask TF, IF, DF, IOPL, NT, AC on syscall entry.
            kvm_msr_entry {
                index: MSR_FMASK,
                data: 0x4_7700,
                ..Default::default()
            },
        ])
        .map_err(|e| VcpuError::Unexpected(format!("MSR list: {e:?}")))?;
        let n = fd.set_msrs(&msrs).map_err(kvm("SET_MSRS"))?;
        if n != 3 {
            return Err(VcpuError::Unexpected(format!("KVM accepted {n} of 3 MSRs")));
        }

        fd.set_sync_valid_reg(SyncReg::Register);
        fd.set_sync_valid_reg(SyncReg::SystemRegister);
        let immediate_exit =
            std::ptr::addr_of_mut!(fd.get_kvm_run().immediate_exit).cast::<AtomicU8>();
        platform::kick::install_kick_handler();
        Ok(Vcpu {
            kicker: VcpuKicker::new(immediate_exit),
            fd,
            mem,
            index,
            kernel_sregs: s,
            user: UserContext {
                regs: Regs {
                    rflags: RFLAGS_RESERVED,
                    ..Default::default()
                },
                ..Default::default()
            },
            exits: 0,
        })
    }

    /// The root of the page tables the vCPU runs on.
    pub fn cr3(&self) -> Gpa {
        Gpa(self.kernel_sregs.cr3)
    }

    /// The guest memory the vCPU runs over.
    pub fn memory(&self) -> &Arc<GuestMemory> {
        &self.mem
    }

    /// This vCPU's index.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Whether this vCPU belongs to the VM over `mem`.
    pub fn is_over(&self, mem: &Arc<GuestMemory>) -> bool {
        Arc::ptr_eq(&self.mem, mem)
    }

    /// Makes a vCPU whose thread ended ready for a new thread of the same process (KVM
    /// cannot destroy a vCPU, so indexes would run out): page tables at `cr3`, no event in
    /// flight, no immediate exit, fresh user state (the caller sets registers and FPU).
    ///
    /// # Errors
    /// [`VcpuError::Kvm`] if KVM refuses to clear the events.
    pub fn reset_for_new_thread(&mut self, cr3: Gpa) -> Result<(), VcpuError> {
        self.fd
            .set_vcpu_events(&kvm_bindings::kvm_vcpu_events::default())
            .map_err(|source| VcpuError::Kvm {
                op: "SET_VCPU_EVENTS",
                source,
            })?;
        self.set_immediate_exit(false);
        self.kernel_sregs.cr3 = cr3.raw();
        self.user = UserContext {
            regs: Regs {
                rflags: RFLAGS_RESERVED,
                ..Default::default()
            },
            ..Default::default()
        };
        Ok(())
    }

    /// Number of exits taken so far.
    pub fn exits(&self) -> u64 {
        self.exits
    }

    /// Sets the immediate-exit flag: the next `KVM_RUN` returns at once with [`Exit::Interrupted`].
    pub fn set_immediate_exit(&mut self, on: bool) {
        self.fd.set_kvm_immediate_exit(u8::from(on));
    }

    /// A handle other threads use to interrupt this vCPU.
    pub fn kicker(&self) -> VcpuKicker {
        self.kicker.clone()
    }

    /// The thread's x87/SSE/AVX state (`KVM_GET_XSAVE`): the standard (non-compacted) XSAVE
    /// layout, legacy FXSAVE area at 0, XSAVE header at 512, AVX upper halves at 576.
    ///
    /// # Errors
    /// [`VcpuError::Kvm`] if the ioctl fails.
    pub fn get_xsave(&self) -> Result<Box<[u8; XSAVE_AREA_SIZE]>, VcpuError> {
        let x = self.fd.get_xsave().map_err(|source| VcpuError::Kvm {
            op: "GET_XSAVE",
            source,
        })?;
        let mut out = Box::new([0u8; XSAVE_AREA_SIZE]);
        for (i, w) in x.region.iter().enumerate() {
            out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        Ok(out)
    }

    /// Replaces the thread's x87/SSE/AVX state (`KVM_SET_XSAVE`) with `area`, in the layout
    /// [`Vcpu::get_xsave`] returns. KVM rejects (`EINVAL`) an area whose header names features
    /// outside XCR0, or whose MXCSR sets reserved bits: check them first when the bytes come
    /// from the application.
    ///
    /// # Errors
    /// [`VcpuError::Kvm`] if the ioctl fails.
    pub fn set_xsave(&mut self, area: &[u8; XSAVE_AREA_SIZE]) -> Result<(), VcpuError> {
        let mut x = kvm_bindings::kvm_xsave::default();
        for (i, w) in x.region.iter_mut().enumerate() {
            let mut b = [0u8; 4];
            b.copy_from_slice(&area[4 * i..4 * i + 4]);
            *w = u32::from_le_bytes(b);
        }
        // SAFETY: `x` is a full 4096-byte kvm_xsave. KVM may read beyond it only when XSAVE
        // features are enabled dynamically (AMX through arch_prctl(ARCH_REQ_XCOMP_GUEST_PERM)),
        // which this process never does: XCR0 is x87|SSE|AVX, whose state fits in 4096 bytes.
        unsafe { self.fd.set_xsave(&x) }.map_err(|source| VcpuError::Kvm {
            op: "SET_XSAVE",
            source,
        })
    }

    /// Records the calling thread as this vCPU's thread (the one kicks are sent to). Call it
    /// from the thread that will call [`Vcpu::run`].
    pub fn bind_to_current_thread(&self) {
        // SAFETY: pthread_self has no preconditions.
        self.kicker
            .set_thread(Some(unsafe { libc::pthread_self() }));
    }

    /// Forgets the vCPU's thread (call before that thread exits).
    pub fn unbind_thread(&self) {
        self.kicker.set_thread(None);
    }

    /// Applies `sync` (pending page-table updates) through the PTE-sync stub, then runs the
    /// thread in ring 3 from [`Vcpu::user`] until the next exit.
    ///
    /// # Errors
    /// [`VcpuError`] on a KVM failure, an exception inside a stub, or an unexpected exit.
    pub fn run(&mut self, sync: &[PteRun]) -> Result<RawExit, VcpuError> {
        self.sync_ptes(sync)?;
        self.load_user_frame()?;
        let mut kicked = false;
        let port = loop {
            let entered = match self.enter() {
                Err(VcpuError::Kvm { op: "RUN", source }) if source.errno() == libc::EFAULT => {
                    let synced = self.fd.sync_regs();
                    if synced.sregs.cs.dpl != 3 {
                        return Err(VcpuError::Kvm { op: "RUN", source });
                    }
                    self.user.regs = from_kvm(&synced.regs);
                    self.user.fs_base = synced.sregs.fs.base;
                    self.user.gs_base = synced.sregs.gs.base;
                    return Ok(RawExit::Exit(Exit::MemoryFault));
                }
                r => r?,
            };
            match entered {
                Some(port) => break port,
                None => {
                    if self.event_in_flight()? {
                        // KVM_RUN was interrupted after the CPU raised an exception (or took
                        // an interrupt) but before delivering it through the IDT. KVM keeps
                        // that event and re-injects it at the next entry, at whatever `rip`
                        // the vCPU then has: rewriting the registers now (the `iretq` or
                        // PTE-sync stub) would deliver, say, a syscall's #UD in ring 0 at the
                        // `iretq` ("exception 6 in a ring-0 stub"). Let it reach its stub
                        // first; its exit is this run's result and the kick is reported on
                        // the next entry.
                        tracing::debug!("interrupted with an event in flight: delivering it");
                        kicked = true;
                        self.fd.set_kvm_immediate_exit(0);
                        continue;
                    }
                    let synced = self.fd.sync_regs();
                    if synced.sregs.cs.dpl == 3 {
                        // Interrupted in ring 3: the registers there are the thread's state.
                        self.user.regs = from_kvm(&synced.regs);
                        self.user.fs_base = synced.sregs.fs.base;
                        self.user.gs_base = synced.sregs.gs.base;
                        return Ok(RawExit::Exit(Exit::Interrupted));
                    }
                    let at_exit_stub = (0..32u8).any(|v| {
                        let stub = layout::direct_map(stubs::exception_stub(v)).raw();
                        synced.regs.rip == stub || synced.regs.rip == stub + 2
                    });
                    if !at_exit_stub {
                        // Before the entry stub ran (or a stale view of a finished exit): the
                        // saved context stands.
                        return Ok(RawExit::Exit(Exit::Interrupted));
                    }
                    // A guest event was delivered to its exception stub but its exit did not
                    // reach us: let the stub run (its `out`s, see `stubs::EXIT_TWICE`) so the
                    // event is not lost; the kick is reported on the next entry.
                    kicked = true;
                    self.fd.set_kvm_immediate_exit(0);
                }
            }
        };
        if kicked {
            self.fd.set_kvm_immediate_exit(1);
        }
        let synced = self.fd.sync_regs();
        let regs = synced.regs;
        match port {
            p if (stubs::PORT_EXCEPTION_BASE..stubs::PORT_EXCEPTION_BASE + 32).contains(&p) => {
                let vector = (p - stubs::PORT_EXCEPTION_BASE) as u8;
                let cr2 = synced.sregs.cr2;
                let Some(sp) = layout::from_direct_map(Gva(regs.rsp)) else {
                    if vector == 6 {
                        // The syscall stub's #UD taken in ring 0: on this hypervisor `syscall`
                        // sometimes lands in ring 0, where the #UD frame is pushed on the
                        // current (user) stack. The kernel checks that frame through the
                        // address space and completes the syscall.
                        self.user.regs = from_kvm(&regs);
                        self.user.regs.rip = regs.rcx;
                        self.user.regs.rflags = regs.r11;
                        return Ok(RawExit::SyscallOnUserStack {
                            frame: Gva(regs.rsp),
                        });
                    }
                    return Err(VcpuError::KernelFault {
                        vector,
                        rip: regs.rip,
                        cr2,
                    });
                };
                let (mut vector, mut sp) = (vector, sp);
                let (error_code, rip, rflags, rsp) = loop {
                    let mut frame = [0u64; 6];
                    let n = if stubs::has_error_code(vector) { 6 } else { 5 };
                    for (i, slot) in frame.iter_mut().take(n).enumerate() {
                        *slot = self.mem.read_u64(sp.add(8 * i as u64))?;
                    }
                    let (error_code, f) = if n == 6 {
                        (Some(frame[0]), &frame[1..6])
                    } else {
                        (None, &frame[0..5])
                    };
                    let (rip, cs, rflags, rsp) = (f[0], f[1], f[2], f[3]);
                    if cs & 3 == 3 {
                        break (error_code, rip, rflags, rsp);
                    }
                    // A fault inside an exception stub, just after its first `out`: on these
                    // machines a port-I/O exit interrupted by a host signal can resume there in
                    // a state where the stub's next instruction faults. The stub's own event is
                    // intact one frame up (no stack switch in ring 0): decode that one.
                    let nested = (0..32u8)
                        .find(|&v| rip == layout::direct_map(stubs::exception_stub(v)).raw() + 2);
                    match (nested, layout::from_direct_map(Gva(rsp))) {
                        (Some(v), Some(outer)) if outer != sp => {
                            tracing::debug!(
                                vector,
                                outer_vector = v,
                                "fault after a stub's exit: decoding the stub's event"
                            );
                            vector = v;
                            sp = outer;
                        }
                        _ => {
                            tracing::error!(
                                vector,
                                rip = format_args!("{rip:#x}"),
                                frame_rsp = format_args!("{rsp:#x}"),
                                sp = format_args!("{:#x}", sp.raw()),
                                cs = format_args!("{:#x}", f_cs(&frame, error_code.is_some())),
                                exit_rsp = format_args!("{:#x}", regs.rsp),
                                exit_rip = format_args!("{:#x}", regs.rip),
                                "fault in a ring-0 stub"
                            );
                            return Err(VcpuError::KernelFault { vector, rip, cr2 });
                        }
                    }
                };
                if vector == 6 && rip == layout::direct_map(stubs::syscall_entry()).raw() {
                    // The syscall entry's `ud2`: `syscall` left the user rip and rflags in
                    // rcx and r11, and the user rsp untouched.
                    self.user.regs = from_kvm(&regs);
                    self.user.regs.rip = regs.rcx;
                    self.user.regs.rflags = regs.r11;
                    self.user.regs.rsp = rsp;
                    return Ok(RawExit::Exit(Exit::Syscall));
                }
                self.user.regs = from_kvm(&regs);
                self.user.regs.rip = rip;
                self.user.regs.rflags = rflags;
                self.user.regs.rsp = rsp;
                Ok(RawExit::Exit(Exit::Exception(ExceptionInfo {
                    vector,
                    error_code,
                    cr2: Gva(cr2),
                })))
            }
            other => Err(VcpuError::Unexpected(format!(
                "port {other:#x} at rip {:#x} (cpl {})",
                regs.rip, synced.sregs.cs.dpl
            ))),
        }
    }

    /// Applies pending page-table updates through the PTE-sync stub, in batches.
    ///
    /// The stub rewrites each entry by reading it and writing it back, which is not atomic:
    /// the caller must keep every host writer of those page tables out until this returns (a
    /// write landing in between, such as another thread's `munmap` clearing an entry, would be
    /// undone, leaving a freed frame mapped).
    ///
    /// # Errors
    /// [`VcpuError`] on a KVM failure or an exception inside the stub.
    pub fn sync_ptes(&mut self, runs: &[PteRun]) -> Result<(), VcpuError> {
        for batch in runs.chunks(MAX_RUNS_PER_BATCH) {
            self.run_pte_sync(batch)?;
        }
        Ok(())
    }

    /// Prepares entry to ring 3 through the return-to-user stub: writes the `iretq` frame on
    /// the ring-0 stack and loads the user's registers (with `rsp`/`rip` pointing at the frame
    /// and the stub) and ring-0 segments with the user's FS and GS bases.
    fn load_user_frame(&mut self) -> Result<(), VcpuError> {
        let user = self.user;
        let top = layout::stack_top(self.index);
        let frame_gpa = Gpa(top.raw() - 40);
        let rflags = (user.regs.rflags & USER_RFLAGS_MASK) | RFLAGS_RESERVED | RFLAGS_IF;
        let frame = [
            user.regs.rip,
            u64::from(USER_CS),
            rflags,
            user.regs.rsp,
            u64::from(USER_SS),
        ];
        for (i, v) in frame.iter().enumerate() {
            self.mem.write_u64(frame_gpa.add(8 * i as u64), *v)?;
        }
        let mut regs = to_kvm(&user.regs);
        regs.rsp = layout::direct_map(frame_gpa).raw();
        regs.rip = layout::direct_map(stubs::iret()).raw();
        regs.rflags = RFLAGS_RESERVED;
        let mut sregs = self.kernel_sregs;
        sregs.fs.base = user.fs_base;
        sregs.gs.base = user.gs_base;
        let sync_regs = self.fd.sync_regs_mut();
        sync_regs.regs = regs;
        sync_regs.sregs = sregs;
        self.fd.set_sync_dirty_reg(SyncReg::Register);
        self.fd.set_sync_dirty_reg(SyncReg::SystemRegister);
        Ok(())
    }

    /// Runs the thread from [`Vcpu::user`] and counts `n` MMIO-write exits, resuming after each
    /// at once: the cost of a bare exit to the host and back (benchmarks only).
    pub(crate) fn count_mmio_exits(&mut self, n: u32) -> Result<std::time::Duration, VcpuError> {
        self.load_user_frame()?;
        let start = std::time::Instant::now();
        for _ in 0..n {
            match self.fd.run() {
                Ok(VcpuExit::MmioWrite(..)) => {}
                Ok(other) => {
                    return Err(VcpuError::Unexpected(format!(
                        "{other:?} while counting MMIO exits"
                    )))
                }
                Err(source) => return Err(VcpuError::Kvm { op: "RUN", source }),
            }
        }
        Ok(start.elapsed())
    }

    /// Enters the PTE-sync stub with one batch and waits for it to finish.
    fn run_pte_sync(&mut self, batch: &[PteRun]) -> Result<(), VcpuError> {
        let buf = layout::batch(self.index);
        for (i, run) in batch.iter().enumerate() {
            self.mem
                .write_u64(buf.add(16 * i as u64), run.first.raw())?;
            self.mem
                .write_u64(buf.add(16 * i as u64 + 8), u64::from(run.count))?;
        }
        let regs = kvm_regs {
            rip: layout::direct_map(stubs::pte_sync()).raw(),
            rsp: layout::direct_map(layout::stack_top(self.index)).raw(),
            rflags: RFLAGS_RESERVED,
            rsi: layout::direct_map(buf).raw(),
            rdx: batch.len() as u64,
            ..Default::default()
        };
        let sregs = self.kernel_sregs;
        let sync_regs = self.fd.sync_regs_mut();
        sync_regs.regs = regs;
        sync_regs.sregs = sregs;
        self.fd.set_sync_dirty_reg(SyncReg::Register);
        self.fd.set_sync_dirty_reg(SyncReg::SystemRegister);
        // The stub is a bounded loop: finish it even if a host signal interrupts it.
        let mut was_immediate = self.fd.get_kvm_run().immediate_exit;
        self.fd.set_kvm_immediate_exit(0);
        let result = loop {
            match self.enter() {
                Ok(Some(stubs::PORT_PTE_SYNC_DONE)) => break Ok(()),
                Ok(None) => {
                    // A kick arrived: finish the stub, then report it on the next entry.
                    was_immediate = 1;
                    continue;
                }
                Ok(Some(p)) => {
                    let s = self.fd.sync_regs();
                    break Err(if p >= stubs::PORT_EXCEPTION_BASE {
                        VcpuError::KernelFault {
                            vector: (p - stubs::PORT_EXCEPTION_BASE) as u8,
                            rip: s.regs.rip,
                            cr2: s.sregs.cr2,
                        }
                    } else {
                        VcpuError::Unexpected(format!("port {p:#x} during PTE sync"))
                    });
                }
                Err(e) => break Err(e),
            }
        };
        self.fd.set_kvm_immediate_exit(was_immediate);
        result
    }

    /// Whether the vCPU holds an exception, interrupt or NMI that the CPU has raised but not
    /// yet delivered (`KVM_GET_VCPU_EVENTS`): KVM will inject it at the next entry.
    fn event_in_flight(&self) -> Result<bool, VcpuError> {
        let ev = self.fd.get_vcpu_events().map_err(|source| VcpuError::Kvm {
            op: "GET_VCPU_EVENTS",
            source,
        })?;
        Ok(ev.exception.injected != 0
            || ev.exception.pending != 0
            || ev.interrupt.injected != 0
            || ev.nmi.injected != 0)
    }

    /// One `KVM_RUN`: `Some(port)` for a stub's `out`, `None` when interrupted.
    fn enter(&mut self) -> Result<Option<u16>, VcpuError> {
        self.exits += 1;
        match self.fd.run() {
            Ok(VcpuExit::IoOut(port, _)) => Ok(Some(port)),
            Ok(VcpuExit::Intr) => {
                self.fd.set_kvm_immediate_exit(0);
                Ok(None)
            }
            Ok(other) => {
                let desc = format!("{other:?}");
                let s = self.fd.sync_regs();
                Err(VcpuError::Unexpected(format!(
                    "{desc} at rip {:#x} cpl {} cr2 {:#x}",
                    s.regs.rip, s.sregs.cs.dpl, s.sregs.cr2
                )))
            }
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {
                self.fd.set_kvm_immediate_exit(0);
                Ok(None)
            }
            Err(source) => Err(VcpuError::Kvm { op: "RUN", source }),
        }
    }
}

impl Drop for Vcpu {
    fn drop(&mut self) {
        self.kicker.detach();
    }
}

/// The CS field of an exception frame read from the stack (for diagnostics).
fn f_cs(frame: &[u64; 6], has_error_code: bool) -> u64 {
    frame[if has_error_code { 2 } else { 1 }]
}

/// The registers of KVM's layout in the platform's.
fn from_kvm(r: &kvm_regs) -> Regs {
    Regs {
        rax: r.rax,
        rbx: r.rbx,
        rcx: r.rcx,
        rdx: r.rdx,
        rsi: r.rsi,
        rdi: r.rdi,
        rsp: r.rsp,
        rbp: r.rbp,
        r8: r.r8,
        r9: r.r9,
        r10: r.r10,
        r11: r.r11,
        r12: r.r12,
        r13: r.r13,
        r14: r.r14,
        r15: r.r15,
        rip: r.rip,
        rflags: r.rflags,
    }
}

/// The platform's registers in KVM's layout.
fn to_kvm(r: &Regs) -> kvm_regs {
    kvm_regs {
        rax: r.rax,
        rbx: r.rbx,
        rcx: r.rcx,
        rdx: r.rdx,
        rsi: r.rsi,
        rdi: r.rdi,
        rsp: r.rsp,
        rbp: r.rbp,
        r8: r.r8,
        r9: r.r9,
        r10: r.r10,
        r11: r.r11,
        r12: r.r12,
        r13: r.r13,
        r14: r.r14,
        r15: r.r15,
        rip: r.rip,
        rflags: r.rflags,
    }
}
