//! Typed access to a syscall's number and arguments (rdi, rsi, rdx, r10, r8, r9).

use abi::Errno;
use platform::{Gva, Regs};

/// A syscall's number and raw arguments.
#[derive(Clone, Copy, Debug)]
pub struct SyscallArgs {
    /// Syscall number (rax).
    pub nr: u64,
    /// Arguments.
    pub a: [u64; 6],
}

impl SyscallArgs {
    /// Reads them from the registers at a syscall exit.
    pub fn from_regs(r: &Regs) -> SyscallArgs {
        SyscallArgs {
            nr: r.rax,
            a: [r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9],
        }
    }

    /// Argument `i` as a raw u64.
    pub fn u(&self, i: usize) -> u64 {
        self.a[i]
    }

    /// Argument `i` as an int (fd, flags…), truncated as the kernel does.
    pub fn int(&self, i: usize) -> i32 {
        self.a[i] as i32
    }

    /// Argument `i` as a user address.
    pub fn gva(&self, i: usize) -> Gva {
        Gva(self.a[i])
    }

    /// Argument `i` as a size_t length, rejecting values that do not fit ssize_t.
    ///
    /// # Errors
    /// EINVAL.
    pub fn len(&self, i: usize) -> Result<u64, Errno> {
        if self.a[i] > isize::MAX as u64 {
            Err(Errno::EINVAL)
        } else {
            Ok(self.a[i])
        }
    }
}
