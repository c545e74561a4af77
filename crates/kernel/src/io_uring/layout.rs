//! The sizes of an io_uring instance's queues and the layout of its two shared regions, as
//! Linux's `io_uring_fill_params` and `rings_size` compute them.
//!
//! ```text
//!  rings (IORING_OFF_SQ_RING = IORING_OFF_CQ_RING)           sqes (IORING_OFF_SQES)
//!  +0  sq.head  sq.tail  cq.head  cq.tail                     +0  sqe[0]  (64 or 128 bytes)
//!  +16 sq_mask  cq_mask  sq_entries  cq_entries               ... sqe[sq_entries - 1]
//!  +32 sq_dropped  sq_flags  cq_flags  cq_overflow
//!  +64 cqe[cq_entries] (16 or 32 bytes each)
//!  ... (64-byte aligned) u32 sq_array[sq_entries], unless IORING_SETUP_NO_SQARRAY
//! ```
//!
//! The kernel writes `sq.head`, `cq.tail`, the masks and sizes, `sq_dropped`, `sq_flags` and
//! `cq_overflow`; the application writes `sq.tail`, `cq.head`, `cq_flags`, the index array
//! and the entries. The application's words are read, never trusted: an index is masked, a
//! count capped.

use abi::io_uring::{
    CqringOffsets, IoUringParams, SqringOffsets, IORING_MAX_CQ_ENTRIES, IORING_MAX_ENTRIES,
    IORING_SETUP_CLAMP, IORING_SETUP_CQE32, IORING_SETUP_CQSIZE, IORING_SETUP_NO_SQARRAY,
    IORING_SETUP_SQE128,
};
use platform::PAGE_SIZE;

/// Offset of `sq.head`.
pub const SQ_HEAD: u64 = 0;
/// Offset of `sq.tail`.
pub const SQ_TAIL: u64 = 4;
/// Offset of `cq.head`.
pub const CQ_HEAD: u64 = 8;
/// Offset of `cq.tail`.
pub const CQ_TAIL: u64 = 12;
/// Offset of `sq_ring_mask`.
pub const SQ_MASK: u64 = 16;
/// Offset of `cq_ring_mask`.
pub const CQ_MASK: u64 = 20;
/// Offset of `sq_ring_entries`.
pub const SQ_ENTRIES: u64 = 24;
/// Offset of `cq_ring_entries`.
pub const CQ_ENTRIES: u64 = 28;
/// Offset of `sq_dropped`.
pub const SQ_DROPPED: u64 = 32;
/// Offset of `sq_flags`.
pub const SQ_FLAGS: u64 = 36;
/// Offset of `cq_flags`.
pub const CQ_FLAGS: u64 = 40;
/// Offset of `cq_overflow`.
pub const CQ_OVERFLOW: u64 = 44;
/// Offset of the first completion entry (`cqes`, cache-line aligned).
pub const CQES: u64 = 64;
/// Linux's `SMP_CACHE_BYTES` on x86-64: the index array starts on a cache line.
const CACHE_LINE: u64 = 64;

/// Why the sizes asked of io_uring_setup(2) are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    /// No entries, too many without `IORING_SETUP_CLAMP`, or a completion queue smaller
    /// than the submission queue (EINVAL).
    #[error("bad queue sizes")]
    Invalid,
}

/// The sizes of an instance's queues and regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Submission queue entries (a power of two).
    pub sq_entries: u32,
    /// Completion queue entries (a power of two, at least `sq_entries`).
    pub cq_entries: u32,
    /// Bytes of a submission entry (64, or 128 with `IORING_SETUP_SQE128`).
    pub sqe_size: u64,
    /// Bytes of a completion entry (16, or 32 with `IORING_SETUP_CQE32`).
    pub cqe_size: u64,
    /// Offset of the index array in the rings, if there is one.
    pub sq_array: Option<u64>,
    /// Bytes of the rings region (whole pages).
    pub rings_len: u64,
    /// Bytes of the submission entries region (whole pages).
    pub sqes_len: u64,
}

impl Geometry {
    /// The geometry io_uring_setup(`entries`, `p`) makes (`p.flags` and, with
    /// `IORING_SETUP_CQSIZE`, `p.cq_entries` are read).
    ///
    /// # Errors
    /// [`GeometryError::Invalid`] as Linux's `io_uring_fill_params`.
    pub fn new(entries: u32, p: &IoUringParams) -> Result<Geometry, GeometryError> {
        if entries == 0 {
            return Err(GeometryError::Invalid);
        }
        let clamp = p.flags & IORING_SETUP_CLAMP != 0;
        let entries = match entries {
            e if e <= IORING_MAX_ENTRIES => e,
            _ if clamp => IORING_MAX_ENTRIES,
            _ => return Err(GeometryError::Invalid),
        };
        let sq_entries = entries.next_power_of_two();
        let cq_entries = if p.flags & IORING_SETUP_CQSIZE != 0 {
            let cq = match p.cq_entries {
                0 => return Err(GeometryError::Invalid),
                c if c <= IORING_MAX_CQ_ENTRIES => c,
                _ if clamp => IORING_MAX_CQ_ENTRIES,
                _ => return Err(GeometryError::Invalid),
            }
            .next_power_of_two();
            if cq < sq_entries {
                return Err(GeometryError::Invalid);
            }
            cq
        } else {
            2 * sq_entries
        };
        let sqe_size = if p.flags & IORING_SETUP_SQE128 != 0 {
            128
        } else {
            64
        };
        let cqe_size = if p.flags & IORING_SETUP_CQE32 != 0 {
            32
        } else {
            16
        };
        let mut end = (CQES + cqe_size * u64::from(cq_entries)).next_multiple_of(CACHE_LINE);
        let sq_array = (p.flags & IORING_SETUP_NO_SQARRAY == 0).then_some(end);
        if sq_array.is_some() {
            end += 4 * u64::from(sq_entries);
        }
        Ok(Geometry {
            sq_entries,
            cq_entries,
            sqe_size,
            cqe_size,
            sq_array,
            rings_len: end.next_multiple_of(PAGE_SIZE),
            sqes_len: (sqe_size * u64::from(sq_entries)).next_multiple_of(PAGE_SIZE),
        })
    }

    /// The submission ring's offsets for io_uring_setup(2)'s answer.
    pub fn sq_offsets(&self) -> SqringOffsets {
        SqringOffsets {
            head: SQ_HEAD as u32,
            tail: SQ_TAIL as u32,
            ring_mask: SQ_MASK as u32,
            ring_entries: SQ_ENTRIES as u32,
            flags: SQ_FLAGS as u32,
            dropped: SQ_DROPPED as u32,
            array: self.sq_array.unwrap_or(0) as u32,
            resv1: 0,
            user_addr: 0,
        }
    }

    /// The completion ring's offsets for io_uring_setup(2)'s answer.
    pub fn cq_offsets(&self) -> CqringOffsets {
        CqringOffsets {
            head: CQ_HEAD as u32,
            tail: CQ_TAIL as u32,
            ring_mask: CQ_MASK as u32,
            ring_entries: CQ_ENTRIES as u32,
            overflow: CQ_OVERFLOW as u32,
            cqes: CQES as u32,
            flags: CQ_FLAGS as u32,
            resv1: 0,
            user_addr: 0,
        }
    }

    /// Offset in the rings of completion slot `index` (masked).
    pub fn cqe_at(&self, index: u32) -> u64 {
        CQES + self.cqe_size * u64::from(index & (self.cq_entries - 1))
    }

    /// Offset in the entries region of submission entry `index` (below `sq_entries`).
    pub fn sqe_at(&self, index: u32) -> u64 {
        self.sqe_size * u64::from(index & (self.sq_entries - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(flags: u32, cq: u32) -> IoUringParams {
        IoUringParams {
            flags,
            cq_entries: cq,
            ..IoUringParams::default()
        }
    }

    #[test]
    fn sizes_are_linux_s() {
        // The host's answer for 4 entries: array at 192 (64 + 8 * 16).
        let g = Geometry::new(3, &params(0, 0)).unwrap();
        assert_eq!((g.sq_entries, g.cq_entries), (4, 8));
        assert_eq!(g.sq_array, Some(192));
        assert_eq!(g.sq_offsets().array, 192);
        assert_eq!(g.cq_offsets().cqes, 64);
        assert_eq!((g.rings_len, g.sqes_len), (4096, 4096));
        let g = Geometry::new(32768, &params(IORING_SETUP_SQE128 | IORING_SETUP_CQE32, 0)).unwrap();
        assert_eq!(g.sqes_len, 128 * 32768);
        assert_eq!(
            g.rings_len,
            (64 + 32 * 65536 + 4 * 32768u64).next_multiple_of(4096)
        );
        let g = Geometry::new(8, &params(IORING_SETUP_NO_SQARRAY, 0)).unwrap();
        assert_eq!((g.sq_array, g.sq_offsets().array), (None, 0));
    }

    #[test]
    fn bad_sizes_are_refused_or_clamped() {
        assert!(Geometry::new(0, &params(0, 0)).is_err());
        assert!(Geometry::new(32769, &params(0, 0)).is_err());
        let g = Geometry::new(u32::MAX, &params(IORING_SETUP_CLAMP, 0)).unwrap();
        assert_eq!(g.sq_entries, 32768);
        assert!(Geometry::new(8, &params(IORING_SETUP_CQSIZE, 0)).is_err());
        assert!(Geometry::new(8, &params(IORING_SETUP_CQSIZE, 4)).is_err());
        let g = Geometry::new(8, &params(IORING_SETUP_CQSIZE, 9)).unwrap();
        assert_eq!(g.cq_entries, 16);
        assert!(Geometry::new(8, &params(IORING_SETUP_CQSIZE, 65537)).is_err());
        let g = Geometry::new(
            8,
            &params(IORING_SETUP_CQSIZE | IORING_SETUP_CLAMP, 1 << 30),
        )
        .unwrap();
        assert_eq!(g.cq_entries, 65536);
    }

    #[test]
    fn slots_wrap() {
        let g = Geometry::new(4, &params(0, 0)).unwrap();
        assert_eq!(g.cqe_at(8), CQES);
        assert_eq!(g.cqe_at(u32::MAX), CQES + 16 * 7);
        assert_eq!(g.sqe_at(5), 64);
    }
}
