//! Guest I/O vectors and the limits every data-moving call shares (Linux's `MAX_RW_COUNT`,
//! `UIO_MAXIOV`): read by the file calls (`sys_rw`) and the socket calls (`sys_socket`) alike.

use abi::Errno;
use platform::Gva;

use crate::task::Task;

/// Most bytes moved by one call (Linux's MAX_RW_COUNT).
pub(super) const MAX_RW: u64 = 0x7fff_f000;
/// Most iovecs (UIO_MAXIOV).
pub(super) const UIO_MAXIOV: u64 = 1024;

/// Reads an iovec array from the user, capped in count and total length.
pub(super) fn copy_in_iovecs(t: &Task, addr: Gva, count: u64) -> Result<Vec<(Gva, u64)>, Errno> {
    if count > UIO_MAXIOV {
        return Err(Errno::EINVAL);
    }
    let mut raw = vec![0u8; count as usize * 16];
    t.copy_in(addr, &mut raw)?;
    let mut total = 0u64;
    let mut out = Vec::with_capacity(count as usize);
    for c in raw.chunks_exact(16) {
        let mut b = [0u8; 8];
        b.copy_from_slice(&c[..8]);
        let base = u64::from_le_bytes(b);
        b.copy_from_slice(&c[8..]);
        let len = u64::from_le_bytes(b);
        if len > isize::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        let len = len.min(MAX_RW - total);
        total += len;
        out.push((Gva(base), len));
    }
    Ok(out)
}
