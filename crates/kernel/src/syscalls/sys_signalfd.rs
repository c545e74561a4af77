//! signalfd(2), signalfd4(2), and reads of a signalfd (see [`crate::task::signalfd`]).

use std::sync::Arc;

use abi::Errno;
use platform::Gva;

use super::{SysResult, SyscallArgs};
use crate::fd::{FileKind, OpenFile};
use crate::task::signalfd::SignalFd;
use crate::task::{SigInfo, Task};

const SFD_NONBLOCK: i32 = libc::O_NONBLOCK;
const SFD_CLOEXEC: i32 = libc::O_CLOEXEC;
/// Size of `struct signalfd_siginfo`.
const SSI_SIZE: usize = 128;

fn unblockable() -> u64 {
    (1u64 << (libc::SIGKILL - 1)) | (1u64 << (libc::SIGSTOP - 1))
}

/// Implements signalfd(2).
pub fn sys_signalfd(t: &mut Task, a: &SyscallArgs) -> SysResult {
    signalfd(t, a.int(0), a.gva(1), a.u(2), 0)
}

/// Implements signalfd4(2).
pub fn sys_signalfd4(t: &mut Task, a: &SyscallArgs) -> SysResult {
    signalfd(t, a.int(0), a.gva(1), a.u(2), a.int(3))
}

fn signalfd(t: &mut Task, fd: i32, mask_at: Gva, size: u64, flags: i32) -> SysResult {
    if size != 8 || flags & !(SFD_NONBLOCK | SFD_CLOEXEC) != 0 {
        return Err(Errno::EINVAL);
    }
    let mask = t.read_u64(mask_at)? & !unblockable();
    if fd != -1 {
        let f = t.fds.get(fd)?;
        let FileKind::Signalfd(s) = &f.kind else {
            return Err(Errno::EINVAL);
        };
        s.set_mask(mask);
        refresh(t, s);
        return Ok(fd as u64);
    }
    let mut efd_flags = libc::EFD_CLOEXEC;
    if flags & SFD_NONBLOCK != 0 {
        efd_flags |= libc::EFD_NONBLOCK;
    }
    let event = crate::fd::host::eventfd(0, efd_flags)?;
    let s = Arc::new(SignalFd::new(mask, event.try_clone().map_err(Errno::from)?));
    t.group.add_signalfd(&s);
    refresh(t, &s);
    let file = Arc::new(OpenFile::new(event, FileKind::Signalfd(s), None));
    Ok(t.fds.insert(file, flags & SFD_CLOEXEC != 0)? as u64)
}

/// Makes the descriptor's readiness match the task's pending signals.
fn refresh(t: &mut Task, s: &SignalFd) {
    t.absorb_external_signal();
    if t.signals.pending_set() & s.mask() != 0 {
        s.raise();
    } else {
        s.clear();
    }
}

/// A read of `len` bytes at `buf` from signalfd `f`: takes pending signals of its mask,
/// each as a `struct signalfd_siginfo`; EAGAIN without one on a non-blocking descriptor,
/// else waits for one (EINTR if another signal is delivered first).
pub(super) fn read(t: &mut Task, f: &OpenFile, s: &SignalFd, buf: Gva, len: u64) -> SysResult {
    let room = len as usize / SSI_SIZE;
    if room == 0 {
        return Err(Errno::EINVAL);
    }
    let nonblocking =
        crate::fd::host::status_flags(f.host()).is_ok_and(|fl| fl & libc::O_NONBLOCK != 0);
    loop {
        t.absorb_external_signal();
        let mut out = Vec::new();
        while out.len() < room * SSI_SIZE {
            match t.dequeue_signal(s.mask()) {
                Some(info) => out.extend_from_slice(&to_ssi(&info)),
                None => break,
            }
        }
        refresh(t, s);
        if !out.is_empty() {
            t.copy_out(buf, &out)?;
            return Ok(out.len() as u64);
        }
        if nonblocking {
            return Err(Errno::EAGAIN);
        }
        super::sys_signal::wait_for_signal(t, None, s.mask())?;
    }
}

/// `struct signalfd_siginfo` from a queued siginfo.
fn to_ssi(info: &SigInfo) -> [u8; SSI_SIZE] {
    let b = &info.0;
    let word = |at: usize| [b[at], b[at + 1], b[at + 2], b[at + 3]];
    let mut o = [0u8; SSI_SIZE];
    let signo = info.signo();
    o[0..4].copy_from_slice(&word(0)); // ssi_signo
    o[4..8].copy_from_slice(&word(4)); // ssi_errno
    o[8..12].copy_from_slice(&word(8)); // ssi_code
    let fault = matches!(
        signo,
        libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE | libc::SIGTRAP
    );
    if fault {
        o[72..80].copy_from_slice(&b[16..24]); // ssi_addr
    } else if info.code() == abi::timer::SI_TIMER {
        o[24..28].copy_from_slice(&word(16)); // ssi_tid: the timer's id
        o[32..36].copy_from_slice(&word(20)); // ssi_overrun
        o[44..48].copy_from_slice(&word(24)); // ssi_int
        o[48..56].copy_from_slice(&b[24..32]); // ssi_ptr
    } else {
        o[12..16].copy_from_slice(&word(16)); // ssi_pid
        o[16..20].copy_from_slice(&word(20)); // ssi_uid
        if signo == libc::SIGCHLD {
            o[40..44].copy_from_slice(&word(24)); // ssi_status
        } else {
            o[44..48].copy_from_slice(&word(24)); // ssi_int
            o[48..56].copy_from_slice(&b[24..32]); // ssi_ptr
        }
    }
    o
}
