//! A parked thread's state, taken on its own host thread (the only one that may read its
//! vCPU) at its park point: registers, FPU state, signal state and what the thread owns.
//! The task layer takes it ([`Task::capture`]); the checkpoint, above, stores it
//! (`crate::checkpoint::task` turns it into the checkpoint's `TaskState`).

use platform::UserContext;

use super::{Task, NSIG};
use crate::creds::Credentials;

/// Size of a `siginfo_t`.
pub const SIGINFO_SIZE: usize = 128;

/// What a parked thread gives of itself.
#[derive(Debug)]
pub struct Captured {
    /// Thread id.
    pub tid: i32,
    /// Its user registers, FS and GS bases.
    pub user: UserContext,
    /// Its FPU/SSE/AVX state, a standard XSAVE area.
    pub xsave: Vec<u8>,
    /// Its pending signals, `siginfo_t`s of [`SIGINFO_SIZE`] bytes one after the other.
    pub pending: Vec<u8>,
    /// The process's signal dispositions as this thread sees them (shared by its threads),
    /// `[handler, flags, restorer, mask]` by signal - 1.
    pub actions: Vec<[u64; 4]>,
    /// Blocked signals.
    pub sigmask: u64,
    /// Alternate signal stack: `(sp, size, flags)`.
    pub altstack: (u64, u64, i32),
    /// The mask rt_sigsuspend restores after a handler.
    pub saved_mask: Option<u64>,
    /// The syscall that last returned EINTR.
    pub interrupted_syscall: Option<u64>,
    /// Inside a syscall the park interrupted.
    pub in_syscall: bool,
    /// Working directory (guest path).
    pub cwd: Vec<u8>,
    /// File mode creation mask.
    pub umask: u32,
    /// Its credentials.
    pub creds: Credentials,
    /// Thread name, NUL-padded.
    pub comm: Vec<u8>,
    /// set_tid_address(2) pointer.
    pub clear_child_tid: u64,
}

impl Task {
    /// This thread's state; call it parked, on its own host thread.
    ///
    /// # Errors
    /// The platform does not give the FPU state.
    pub fn capture(&self) -> Result<Captured, platform::PlatformError> {
        let xsave = self.ctx.fpu()?;
        let mut pending = Vec::with_capacity(self.signals.pending().len() * SIGINFO_SIZE);
        for p in self.signals.pending() {
            pending.extend_from_slice(&p.0);
        }
        let alt = self.signals.altstack;
        let actions = (1..=NSIG as i32)
            .map(|s| {
                let a = self.signals.action(s);
                [a.handler, a.flags, a.restorer, a.mask]
            })
            .collect();
        Ok(Captured {
            tid: self.tid,
            user: *self.ctx.user(),
            xsave: xsave.to_vec(),
            pending,
            actions,
            sigmask: self.signals.mask,
            altstack: (alt.sp, alt.size, alt.flags),
            saved_mask: self.signals.saved_mask,
            interrupted_syscall: self.signals.interrupted_syscall,
            in_syscall: self.in_syscall,
            cwd: self.cwd(),
            umask: self.umask(),
            creds: (*self.creds).clone(),
            comm: self.comm().to_vec(),
            clear_child_tid: self.clear_child_tid,
        })
    }
}
