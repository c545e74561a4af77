//! Linux native asynchronous I/O (io_setup(2) and its family, `include/uapi/linux/aio_abi.h`):
//! `struct iocb`, `struct io_event`, the header of the completion ring Linux maps into the
//! process (`struct aio_ring` of `fs/aio.c`), the request kinds and flags.

use crate::Pod;

/// `aio_lio_opcode`: read `aio_nbytes` bytes at `aio_offset` into `aio_buf`.
pub const IOCB_CMD_PREAD: u16 = 0;
/// `aio_lio_opcode`: write.
pub const IOCB_CMD_PWRITE: u16 = 1;
/// `aio_lio_opcode`: fsync(2) of the file.
pub const IOCB_CMD_FSYNC: u16 = 2;
/// `aio_lio_opcode`: fdatasync(2) of the file.
pub const IOCB_CMD_FDSYNC: u16 = 3;
/// `aio_lio_opcode`: wait until the file is ready for the poll events in `aio_buf`.
pub const IOCB_CMD_POLL: u16 = 5;
/// `aio_lio_opcode`: no operation (defined, never implemented by Linux: EINVAL).
pub const IOCB_CMD_NOOP: u16 = 6;
/// `aio_lio_opcode`: read into the `aio_nbytes` iovecs at `aio_buf`.
pub const IOCB_CMD_PREADV: u16 = 7;
/// `aio_lio_opcode`: write from iovecs.
pub const IOCB_CMD_PWRITEV: u16 = 8;

/// `aio_flags`: signal the eventfd `aio_resfd` when the request completes.
pub const IOCB_FLAG_RESFD: u32 = 1;
/// `aio_flags`: `aio_reqprio` is an I/O priority (class and level, as ioprio_set(2)'s).
pub const IOCB_FLAG_IOPRIO: u32 = 2;

/// The `RWF_*` flags of `aio_rw_flags` Linux knows (`RWF_SUPPORTED`: HIPRI, DSYNC, SYNC,
/// NOWAIT, APPEND, NOAPPEND, ATOMIC, DONTCACHE); others are EOPNOTSUPP.
pub const RWF_SUPPORTED: u32 = 0xff;
/// `RWF_NOWAIT`: fail with EAGAIN rather than block.
pub const RWF_NOWAIT: u32 = 0x08;
/// `RWF_APPEND`: append, whatever the offset.
pub const RWF_APPEND: u32 = 0x10;
/// `RWF_NOAPPEND`: write at the offset even on an `O_APPEND` file.
pub const RWF_NOAPPEND: u32 = 0x20;

/// `aio_key` of a submitted request (`KIOCB_KEY`): io_cancel(2) requires it.
pub const KIOCB_KEY: u32 = 0;

/// The ring header's `magic` (`AIO_RING_MAGIC`), which libaio checks before it reads
/// completions from the ring itself instead of calling io_getevents(2).
pub const AIO_RING_MAGIC: u32 = 0xa10a_10a1;
/// The ring header's `compat_features` (`AIO_RING_COMPAT_FEATURES`).
pub const AIO_RING_COMPAT_FEATURES: u32 = 1;
/// The ring header's `incompat_features` (`AIO_RING_INCOMPAT_FEATURES`).
pub const AIO_RING_INCOMPAT_FEATURES: u32 = 0;

/// `struct iocb` (64 bytes; the little-endian field order of x86-64).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Iocb {
    /// `aio_data`: the caller's value, returned in the completion's `data`.
    pub data: u64,
    /// `aio_key`: set to [`KIOCB_KEY`] by io_submit(2).
    pub key: u32,
    /// `aio_rw_flags`: `RWF_*` of the read or write.
    pub rw_flags: u32,
    /// `aio_lio_opcode`: one of `IOCB_CMD_*`.
    pub opcode: u16,
    /// `aio_reqprio`.
    pub reqprio: i16,
    /// `aio_fildes`.
    pub fildes: u32,
    /// `aio_buf`: the buffer, the iovec array, or a poll's events.
    pub buf: u64,
    /// `aio_nbytes`: the buffer's length or the iovec count.
    pub nbytes: u64,
    /// `aio_offset`.
    pub offset: i64,
    /// `aio_reserved2`: must be zero.
    pub reserved2: u64,
    /// `aio_flags`: `IOCB_FLAG_*`.
    pub flags: u32,
    /// `aio_resfd`: the eventfd of `IOCB_FLAG_RESFD`.
    pub resfd: u32,
}

// SAFETY: a `#[repr(C)]` struct of integers laid out without gaps (8+4+4+2+2+4+8+8+8+8+4+4 =
// 64 bytes, each field at a multiple of its size); every bit pattern is valid.
unsafe impl Pod for Iocb {}

/// `struct io_event` (32 bytes): one completion.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoEvent {
    /// The request's `aio_data`.
    pub data: u64,
    /// The address of the request's `struct iocb`.
    pub obj: u64,
    /// The result: bytes transferred, a poll's events, or a negative errno.
    pub res: i64,
    /// A second result (always 0).
    pub res2: i64,
}

// SAFETY: a `#[repr(C)]` struct of four 8-byte integers; every bit pattern is valid.
unsafe impl Pod for IoEvent {}

/// The header of the completion ring (`struct aio_ring`, 32 bytes), at the start of the
/// mapping whose address is the context's id; the events follow it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AioRingHeader {
    /// The context's index in the process's table of contexts.
    pub id: u32,
    /// Events the ring holds (one slot always stays empty).
    pub nr: u32,
    /// The next event to consume (the application may advance it itself).
    pub head: u32,
    /// Where the next completion goes.
    pub tail: u32,
    /// [`AIO_RING_MAGIC`].
    pub magic: u32,
    /// [`AIO_RING_COMPAT_FEATURES`].
    pub compat_features: u32,
    /// [`AIO_RING_INCOMPAT_FEATURES`].
    pub incompat_features: u32,
    /// The header's size (32).
    pub header_length: u32,
}

// SAFETY: a `#[repr(C)]` struct of eight `u32`; every bit pattern is valid.
unsafe impl Pod for AioRingHeader {}

/// The `struct __aio_sigset` io_pgetevents(2) reads: the mask's address and size.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AioSigset {
    /// The signal mask's address (NULL: the caller's mask stays).
    pub sigmask: u64,
    /// The mask's size (8).
    pub sigsetsize: u64,
}

// SAFETY: a `#[repr(C)]` struct of two `u64`; every bit pattern is valid.
unsafe impl Pod for AioSigset {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_are_linux_s() {
        assert_eq!(size_of::<Iocb>(), 64);
        assert_eq!(offset_of!(Iocb, key), 8);
        assert_eq!(offset_of!(Iocb, rw_flags), 12);
        assert_eq!(offset_of!(Iocb, opcode), 16);
        assert_eq!(offset_of!(Iocb, fildes), 20);
        assert_eq!(offset_of!(Iocb, buf), 24);
        assert_eq!(offset_of!(Iocb, offset), 40);
        assert_eq!(offset_of!(Iocb, flags), 56);
        assert_eq!(offset_of!(Iocb, resfd), 60);
        assert_eq!(size_of::<IoEvent>(), 32);
        assert_eq!(size_of::<AioRingHeader>(), 32);
        assert_eq!(size_of::<AioSigset>(), 16);
    }
}
