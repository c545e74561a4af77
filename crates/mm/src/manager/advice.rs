//! The madvise(2) advice that marks mappings rather than acting on their pages once:
//! `MADV_WIPEONFORK` / `MADV_KEEPONFORK`, `MADV_DONTFORK` / `MADV_DOFORK` and
//! `MADV_DONTDUMP` / `MADV_DODUMP` set or clear a [`VmAdvice`] mark on every VMA of the range
//! (split at its ends), which fork (`fork_into`) and the kernel's core dump then honour.

use platform::Gva;

use super::{MemoryManager, MmError};
use crate::vma::{VmAdvice, VmaKind};

/// The mark an advice sets or clears, and whether it sets it; `None` for other advice.
pub(super) fn mark_of(advice: i32) -> Option<(VmAdvice, bool)> {
    Some(match advice {
        libc::MADV_WIPEONFORK => (VmAdvice::WIPE_ON_FORK, true),
        libc::MADV_KEEPONFORK => (VmAdvice::WIPE_ON_FORK, false),
        libc::MADV_DONTFORK => (VmAdvice::DONT_FORK, true),
        libc::MADV_DOFORK => (VmAdvice::DONT_FORK, false),
        libc::MADV_DONTDUMP => (VmAdvice::DONT_DUMP, true),
        libc::MADV_DODUMP => (VmAdvice::DONT_DUMP, false),
        _ => return None,
    })
}

impl MemoryManager {
    /// Sets (`on`) or clears `mark` on the mapped parts of `[start, end)` (page-aligned,
    /// non-empty). `MADV_WIPEONFORK` applies to private anonymous memory only: `EINVAL` if
    /// the range holds any other mapping (then nothing changes; Linux may have marked the
    /// VMAs before it).
    ///
    /// # Errors
    /// `EINVAL` as above; the caller reports unmapped parts (`ENOMEM`).
    pub(super) fn mark(
        &mut self,
        start: Gva,
        end: Gva,
        mark: VmAdvice,
        on: bool,
    ) -> Result<(), MmError> {
        if mark == VmAdvice::WIPE_ON_FORK
            && on
            && self
                .vmas
                .overlapping(start, end)
                .any(|v| !matches!(v.kind, VmaKind::Anon))
        {
            return Err(MmError::InvalidArgument(
                "MADV_WIPEONFORK on a file or shared mapping",
            ));
        }
        let parts: Vec<(Gva, Gva)> = self
            .vmas
            .overlapping(start, end)
            .map(|v| (v.start.max(start), v.end.min(end)))
            .collect();
        for (from, to) in parts {
            self.vmas
                .set_advice(from, to, mark, on)
                .map_err(|e| MmError::Internal(e.to_string()))?;
        }
        Ok(())
    }
}
