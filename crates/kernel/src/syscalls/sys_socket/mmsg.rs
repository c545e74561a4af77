//! sendmmsg(2) and recvmmsg(2): several messages in one call, each one a sendmsg or recvmsg
//! of its own (`struct mmsghdr`: a `msghdr` and the byte count written back into it), as
//! Linux's `__sys_sendmmsg` and `do_recvmmsg` loop.

use std::time::{Duration, Instant};

use abi::structs::Timespec;
use abi::Errno;
use platform::Gva;

use super::super::iovec::UIO_MAXIOV;
use super::super::{SysResult, SyscallArgs};
use super::{sys_recvmsg, sys_sendmsg, MSGHDR_LEN};
use crate::task::Task;

/// `sizeof(struct mmsghdr)` on x86-64: the msghdr, `msg_len`, padding.
const MMSGHDR_LEN: u64 = 64;

/// recvmmsg's flag: after the first message, take only those already queued.
const MSG_WAITFORONE: i32 = 0x10000;

/// The `i`th entry of the vector at `vec`, and where its `msg_len` is.
fn entry(vec: Gva, i: u64) -> Result<(Gva, Gva), Errno> {
    let at = vec.0.checked_add(i * MMSGHDR_LEN).ok_or(Errno::EFAULT)?;
    Ok((Gva(at), Gva(at + MSGHDR_LEN as u64)))
}

/// Implements sendmmsg(2): sends up to `vlen` (at most UIO_MAXIOV) messages, storing each
/// one's byte count; the number sent, or the first message's error when none was.
pub fn sys_sendmmsg(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (fd, vec, flags) = (a.u(0), a.gva(1), a.u(3));
    let vlen = a.u(2).min(UIO_MAXIOV);
    let mut sent = 0;
    while sent < vlen {
        let (msg, len_at) = entry(vec, sent)?;
        let one = SyscallArgs {
            nr: 46,
            a: [fd, msg.0, flags, 0, 0, 0],
        };
        match sys_sendmsg(t, &one) {
            Ok(n) => {
                // A count that cannot be stored ends the call, as Linux's put_user failure.
                if t.write_val(len_at, &(n as u32)).is_err() {
                    return if sent == 0 {
                        Err(Errno::EFAULT)
                    } else {
                        Ok(sent)
                    };
                }
                sent += 1;
            }
            Err(e) if sent == 0 => return Err(e),
            // Linux reports the messages sent; the error is lost (the next call meets it).
            Err(_) => break,
        }
    }
    Ok(sent)
}

/// Implements recvmmsg(2): receives up to `vlen` (at most UIO_MAXIOV) messages, storing each
/// one's byte count. With MSG_WAITFORONE only the first may wait. The timeout, as on Linux, is
/// checked after each message (it does not bound the wait for one); the time left is not
/// stored back.
pub fn sys_recvmmsg(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (fd, vec) = (a.u(0), a.gva(1));
    let vlen = a.u(2).min(UIO_MAXIOV);
    let mut flags = a.int(3);
    let deadline = if a.u(4) == 0 {
        None
    } else {
        let ts: Timespec = t.read_val(a.gva(4))?;
        let d: Duration = ts.to_duration()?;
        Some(Instant::now() + d)
    };
    let wait_for_one = flags & MSG_WAITFORONE != 0;
    flags &= !MSG_WAITFORONE;
    let mut got = 0;
    while got < vlen {
        let (msg, len_at) = entry(vec, got)?;
        let one = SyscallArgs {
            nr: 47,
            a: [fd, msg.0, flags as u32 as u64, 0, 0, 0],
        };
        match sys_recvmsg(t, &one) {
            Ok(n) => {
                if t.write_val(len_at, &(n as u32)).is_err() {
                    return if got == 0 {
                        Err(Errno::EFAULT)
                    } else {
                        Ok(got)
                    };
                }
                got += 1;
            }
            Err(e) if got == 0 => return Err(e),
            Err(_) => break,
        }
        if wait_for_one {
            flags |= libc::MSG_DONTWAIT;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
    }
    Ok(got)
}
