//! One application thread on the trap platform, behind the kernel's [`Context`]: a stub
//! thread, whose commits make the stub map what the memory manager's page tables say
//! ([`crate::walk`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use platform::{
    Commit, Context, ExceptionInfo, Exit, FpuState, Gpa, GuestMemory, Gva, Kick, Kicker,
    PlatformError, PtChanges, UserContext, FPU_STATE_SIZE,
};

use platform::{pagewalk, PAGE_SIZE};

use crate::process_stub::ProcessStub;
use crate::{StubThread, TrapError, TrapExit};

/// A thread of a stub. The stub thread (and the space's stub) is started when the context
/// first runs; until then the context keeps the registers and FPU state it is given.
pub struct TrapContext {
    space: Arc<ProcessStub>,
    thread: Option<StubThread>,
    /// The registers until the stub thread exists.
    regs: UserContext,
    /// An FPU state set before the stub thread exists.
    fpu: Option<FpuState>,
    root: Gpa,
    index: usize,
    exits: u64,
    kick: Arc<TrapKick>,
    /// The page of the last page fault, until the next commit maps it (see `walk.rs`).
    faulted: Option<u64>,
}

/// Kicks a stub thread out of application code and the holder's task thread out of a
/// blocking host call.
struct TrapKick {
    /// Kicks the stub thread, once it exists.
    stub: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
    /// A kick came before the stub thread existed: its first switch is interrupted.
    early: AtomicBool,
    thread: Mutex<Option<libc::pthread_t>>,
}

impl Kick for TrapKick {
    fn kick(&self) {
        match &*self.stub.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(k) => k(),
            None => self.early.store(true, Ordering::SeqCst),
        }
        if let Some(t) = *self.thread.lock().unwrap_or_else(|e| e.into_inner()) {
            // SAFETY: `t` is a live thread: the context clears it before its thread exits.
            unsafe { libc::pthread_kill(t, platform::kick::kick_signal()) };
        }
    }
}

impl TrapContext {
    pub(crate) fn new(space: Arc<ProcessStub>, root: Gpa, index: usize) -> TrapContext {
        TrapContext {
            space,
            thread: None,
            regs: UserContext {
                regs: platform::Regs {
                    rflags: 0x202,
                    ..Default::default()
                },
                ..Default::default()
            },
            fpu: None,
            root,
            index,
            exits: 0,
            kick: Arc::new(TrapKick {
                stub: Mutex::new(None),
                early: AtomicBool::new(false),
                thread: Mutex::new(None),
            }),
            faulted: None,
        }
    }

    fn mem(&self) -> &GuestMemory {
        &self.space.mem
    }

    /// The stub thread, started (with the stub, the first time) on the first run.
    fn thread(&mut self) -> Result<&mut StubThread, TrapError> {
        if self.thread.is_none() {
            let mut t = self.space.stub()?.new_thread()?;
            *t.regs_mut() = self.regs;
            if let Some(f) = self.fpu.take() {
                t.set_fpu(&f[..])?;
            }
            *self.kick.stub.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(t.kicker()));
            self.thread = Some(t);
        }
        self.thread
            .as_mut()
            .ok_or(TrapError::Protocol("no stub thread"))
    }

    /// The initial FPU state (as after `fninit` and a reset MXCSR).
    fn init_fpu() -> FpuState {
        let mut a = Box::new([0u8; FPU_STATE_SIZE]);
        a[0..2].copy_from_slice(&0x37fu16.to_le_bytes());
        a[24..28].copy_from_slice(&0x1f80u32.to_le_bytes());
        a[28..32].copy_from_slice(&crate::sys::mxcsr_mask().to_le_bytes());
        a
    }

    /// Whether the two bytes before `rip` are a `syscall` instruction (0f 05), read through
    /// the page tables without touching their accessed bits.
    fn after_syscall_instruction(&self) -> bool {
        let rip = self.user().regs.rip;
        let mut bytes = [0u8; 2];
        for (i, b) in bytes.iter_mut().enumerate() {
            let va = rip.wrapping_sub(2).wrapping_add(i as u64);
            let Some(gpa) = self.translate(va) else {
                return false;
            };
            let mut one = [0u8; 1];
            if self.mem().read(gpa, &mut one).is_err() {
                return false;
            }
            *b = one[0];
        }
        bytes == [0x0f, 0x05]
    }

    /// The guest-physical address of user byte `va` (in guest memory or a window), if the
    /// tables map it.
    fn translate(&self, va: u64) -> Option<Gpa> {
        let entry = pagewalk::walk(self.mem(), self.root, va).ok()??;
        (entry.page_size == PAGE_SIZE && entry.value & pagewalk::USER != 0)
            .then(|| entry.translate(va))
    }
}

/// The `uretprobe` system call's number.
const URETPROBE: u64 = 335;

/// Vectors whose exceptions carry an error code.
fn has_error_code(vector: u8) -> bool {
    matches!(vector, 8 | 10..=14 | 17 | 21)
}

impl Context for TrapContext {
    fn user(&self) -> &UserContext {
        match &self.thread {
            Some(t) => t.regs(),
            None => &self.regs,
        }
    }

    fn user_mut(&mut self) -> &mut UserContext {
        match &mut self.thread {
            Some(t) => t.regs_mut(),
            None => &mut self.regs,
        }
    }

    fn fpu(&self) -> Result<FpuState, PlatformError> {
        let Some(t) = &self.thread else {
            return Ok(self.fpu.clone().unwrap_or_else(Self::init_fpu));
        };
        let img = t.fpu();
        let mut out = Box::new([0u8; FPU_STATE_SIZE]);
        let n = img.len().min(FPU_STATE_SIZE);
        out[..n].copy_from_slice(&img[..n]);
        Ok(out)
    }

    fn set_fpu(&mut self, state: &FpuState) -> Result<(), PlatformError> {
        match &mut self.thread {
            Some(t) => t.set_fpu(&state[..]).map_err(PlatformError::new),
            None => {
                self.fpu = Some(state.clone());
                Ok(())
            }
        }
    }

    fn switch(&mut self) -> Result<Exit, PlatformError> {
        self.exits += 1;
        if self.kick.early.swap(false, Ordering::SeqCst) {
            self.thread().map_err(PlatformError::new)?;
            return Ok(Exit::Interrupted);
        }
        let thread = self.thread().map_err(PlatformError::new)?;
        let exit = thread.switch().map_err(PlatformError::new)?;
        if let TrapExit::Fault {
            vector,
            error_code,
            addr,
            signal,
        } = exit
        {
            tracing::trace!(vector, error_code, addr, signal, "trap: fault");
            if vector == 14 {
                self.faulted = Some(addr & !(PAGE_SIZE - 1));
            }
        }
        Ok(match exit {
            TrapExit::Syscall => Exit::Syscall,
            TrapExit::Interrupted => Exit::Interrupted,
            TrapExit::Fault {
                signal: libc::SIGBUS,
                ..
            } => Exit::MemoryFault,
            // Linux (6.11+) lets `uretprobe` (335) past every seccomp filter, and answers a
            // call from outside its trampoline with SIGILL: to the application it was a system
            // call, as on KVM (which answers ENOSYS).
            TrapExit::Fault {
                signal: libc::SIGILL,
                ..
            } if self.after_syscall_instruction() => {
                self.user_mut().regs.rax = URETPROBE;
                Exit::Syscall
            }
            TrapExit::Fault {
                vector,
                error_code,
                addr,
                ..
            } => Exit::Exception(ExceptionInfo {
                vector,
                error_code: has_error_code(vector).then_some(error_code),
                cr2: Gva(addr),
            }),
        })
    }

    fn commit(&mut self, changes: PtChanges, _how: Commit) -> Result<(), PlatformError> {
        // Every thread of the stub shares its host address space: a mapping changed by the
        // mapper is seen by all of them once the command returns (the host kernel's own TLB
        // shootdown), so a restriction needs no kicks.
        if changes.pages.is_empty() {
            return Ok(());
        }
        let stub = self.space.stub().map_err(PlatformError::new)?;
        let faulted = self.faulted.take();
        self.space
            .sync_pages(&stub, self.root, &changes.pages, faulted, false)
    }

    fn kicker(&self) -> Kicker {
        self.kick.clone()
    }

    fn bind_to_current_thread(&self) {
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() };
        *self.kick.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(me);
    }

    fn unbind_thread(&self) {
        *self.kick.thread.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn cpu_index(&self) -> usize {
        self.index
    }

    fn exits(&self) -> u64 {
        self.exits
    }
}
