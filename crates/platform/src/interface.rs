//! The platform interface: how the kernel runs application code and makes its page-table
//! changes visible, without knowing what runs it (a KVM vCPU, a trapped host thread).
//!
//! - A [`Platform`] makes guest memory and address spaces, and says what the application sees
//!   of the CPU.
//! - An [`AddressSpace`] is one guest process: its memory, and the execution contexts of its
//!   threads.
//! - A [`Context`] is one application thread: its registers and FPU state, and `switch`, which
//!   runs it until the next event and returns a neutral [`Exit`].
//!
//! The traits are object-safe so that the kernel, memory manager and hibernation layer stay
//! non-generic: a virtual call costs nothing beside an exit measured in microseconds.

use std::sync::Arc;

use crate::addr::Gpa;
use crate::context::{CpuModel, Exit, FpuState, PageRun, PteRun, UserContext};
use crate::memory::GuestMemory;

/// A platform failure. Any of these ends the sandbox (or the process it happened in): they are
/// host failures or a broken platform invariant, never something the application can cause on
/// purpose.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PlatformError(Box<dyn std::error::Error + Send + Sync>);

impl PlatformError {
    /// Wraps a platform's own error.
    pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> PlatformError {
        PlatformError(Box::new(e))
    }

    /// An error described by a message.
    pub fn msg(m: impl Into<String>) -> PlatformError {
        PlatformError(m.into().into())
    }
}

/// Interrupts one application thread: a running [`Context::switch`] returns
/// [`Exit::Interrupted`] soon, the next one at once, and a blocking host call on the thread
/// bound to the context returns `EINTR`.
pub trait Kick: Send + Sync {
    /// Kicks the thread.
    fn kick(&self);
}

/// A shared handle on a [`Kick`].
pub type Kicker = Arc<dyn Kick>;

/// How far page-table changes must reach when they are committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commit {
    /// Only entries were added (a fault): other threads with a stale view fault and pick the
    /// changes up themselves.
    Extend,
    /// Entries were removed, restricted or replaced (munmap, mprotect, copy-on-write): every
    /// other context of the address space must stop using the old translations before the
    /// memory manager's lock is released.
    Restrict,
}

/// The page-table changes the memory manager made since the last commit, in the two forms
/// platforms consume: the entries written (a platform whose hardware walks the tables, KVM)
/// and the user pages whose mapping changed (a platform that maps pages itself, trap; it
/// reads each page's entry from the tables).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PtChanges {
    /// Runs of changed entries.
    pub runs: Vec<PteRun>,
    /// Runs of user pages whose mapping changed.
    pub pages: Vec<PageRun>,
}

impl PtChanges {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.pages.is_empty()
    }
}

/// Runs one application thread.
pub trait Context: Send {
    /// The thread's registers.
    fn user(&self) -> &UserContext;
    /// The thread's registers, to edit (a syscall's result, a signal frame, a new thread).
    fn user_mut(&mut self) -> &mut UserContext;
    /// The thread's FPU state.
    ///
    /// # Errors
    /// [`PlatformError`] if the platform cannot read it.
    fn fpu(&self) -> Result<FpuState, PlatformError>;
    /// Replaces the thread's FPU state. Bytes that come from the application must have been
    /// checked against the platform's [`CpuModel`] first.
    ///
    /// # Errors
    /// [`PlatformError`] if the platform refuses the state.
    fn set_fpu(&mut self, state: &FpuState) -> Result<(), PlatformError>;
    /// Runs the thread from [`Context::user`] until the next event.
    ///
    /// # Errors
    /// [`PlatformError`] on a host failure: the thread cannot go on.
    fn switch(&mut self) -> Result<Exit, PlatformError>;
    /// Makes `changes` (and those other threads committed) visible to this thread before it
    /// next runs; with [`Commit::Restrict`], to every other thread of the address space too
    /// before returning, or by kicking them. Called with the memory manager's lock held.
    ///
    /// # Errors
    /// [`PlatformError`] on a host failure.
    fn commit(&mut self, changes: PtChanges, how: Commit) -> Result<(), PlatformError>;
    /// A handle other threads use to interrupt this one.
    fn kicker(&self) -> Kicker;
    /// Records the calling host thread as the one that runs this context (kicks reach it).
    fn bind_to_current_thread(&self);
    /// Forgets the context's host thread (call before that thread exits).
    fn unbind_thread(&self);
    /// The index of the (virtual) CPU the thread runs on, as `getcpu` reports it.
    fn cpu_index(&self) -> usize;
    /// Number of exits to the host so far.
    fn exits(&self) -> u64;
}

/// One guest process: guest memory and the contexts of its threads.
pub trait AddressSpace: Send + Sync {
    /// The process's guest memory.
    fn memory(&self) -> &Arc<GuestMemory>;
    /// A host CPU clock that counts the application code this space runs outside the
    /// runtime's own threads (the trap platform's stub process), once it runs; None where the
    /// runtime's threads run it themselves (KVM: a vCPU's time is its thread's).
    fn cpu_clock(&self) -> Option<libc::clockid_t> {
        None
    }
    /// A context for a new thread whose page tables are rooted at `root`, with zeroed
    /// registers (the caller sets them and the FPU state). A context dropped goes back to
    /// its space (a platform may reuse it for the next thread).
    ///
    /// # Errors
    /// [`PlatformError`] if the platform has no room for another thread.
    fn new_context(&self, root: Gpa) -> Result<Box<dyn Context>, PlatformError>;
    /// Whether every write of the application to guest memory goes through the runtime's own
    /// mapping of it (true for a VM, whose memory is that mapping), so that a write-protect of
    /// that mapping (userfaultfd) sees it. Where the application's process maps the memory
    /// itself (trap), a page brought back by a wake may have been written without a trace
    /// there: a deflate then writes every resident page.
    fn holder_sees_writes(&self) -> bool {
        true
    }
    /// Maps `pages` of the process whose page tables are rooted at `root` ahead of the
    /// application's touches (after a wake brought their frames back in one batch): a platform
    /// that maps pages itself saves a fault per page run. Nothing by default.
    ///
    /// # Errors
    /// [`PlatformError`] on a host failure.
    fn prefault(&self, root: Gpa, pages: &[PageRun]) -> Result<(), PlatformError> {
        let _ = (root, pages);
        Ok(())
    }
    /// Called before hibernation drops pages of the memory: nothing of the application may
    /// reach a dropped page other than through the holder's mapping of the memory.
    ///
    /// # Errors
    /// [`PlatformError`] on a host failure.
    fn evict_all(&self) -> Result<(), PlatformError> {
        Ok(())
    }
}

/// A vDSO a platform maps for the application ([`Platform::vdso`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vdso {
    /// Its ELF header's address (above the user range).
    pub ehdr: u64,
    /// A digest of its code. Programs keep pointers into it, so a checkpoint's processes can
    /// resume only where the same code is mapped at the same address.
    pub digest: u64,
}

/// A way to run application code.
pub trait Platform: Send + Sync + std::fmt::Debug {
    /// The platform's name, as `--platform` takes it.
    fn name(&self) -> &'static str;
    /// What the application sees of the CPU.
    fn cpu(&self) -> &CpuModel;
    /// New guest-physical memory of `size` bytes, zero-filled.
    ///
    /// # Errors
    /// [`PlatformError`] if the host refuses the memory.
    fn new_memory(&self, size: u64) -> Result<Arc<GuestMemory>, PlatformError>;
    /// The host processes the platform runs the application in, beside the runtime's own
    /// (none on KVM; the stubs on trap): their memory is the sandbox's too.
    fn processes(&self) -> Vec<u32> {
        Vec::new()
    }
    /// The platform's host processes that share the runtime's own memory (the trap platform's
    /// stub factory): nothing of their own to count, and not to be counted again as helpers.
    fn shared_processes(&self) -> Vec<u32> {
        Vec::new()
    }
    /// Guest memory of `size` bytes whose contents are the file `image` (a checkpoint's
    /// memory, for a clone). By default a private mapping of the file
    /// ([`GuestMemory::from_image`]: clones share the page cache's copy).
    ///
    /// # Errors
    /// [`PlatformError`] if the file has another size or cannot be mapped or read.
    fn memory_from_image(
        &self,
        image: &std::fs::File,
        size: u64,
    ) -> Result<Arc<GuestMemory>, PlatformError> {
        Ok(Arc::new(
            GuestMemory::from_image(image, size).map_err(PlatformError::new)?,
        ))
    }
    /// The vDSO every address space of this platform has mapped, outside the user range, if
    /// any: the kernel passes its ELF header to each new program (`AT_SYSINFO_EHDR`), whose
    /// clock calls then need no system call. None by default.
    fn vdso(&self) -> Option<Vdso> {
        None
    }
    /// Whether several address spaces may map one guest memory at once, each with its own
    /// page tables (a fork sharing its parent's frames copy-on-write). False by default: a
    /// KVM VM registers its whole memory as its own memslot (`docs/design/cow-fork.md` §1).
    fn address_spaces_share_memory(&self) -> bool {
        false
    }
    /// A new address space over `mem`.
    ///
    /// # Errors
    /// [`PlatformError`] if the platform cannot make one (no `/dev/kvm`…).
    fn new_address_space(
        &self,
        mem: Arc<GuestMemory>,
    ) -> Result<Arc<dyn AddressSpace>, PlatformError>;
}
