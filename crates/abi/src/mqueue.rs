//! POSIX message queues (mq_open(2) and its family): `struct mq_attr`, the limits Linux puts
//! on a queue's attributes, and the `siginfo_t` code of a queue's notification signal.

use crate::Pod;

/// Priorities are below this (`MQ_PRIO_MAX`; mq_send's EINVAL past it).
pub const MQ_PRIO_MAX: u32 = 32768;
/// The most messages a queue may hold for a caller with `CAP_SYS_RESOURCE` (`HARD_MSGMAX`).
pub const HARD_MSGMAX: i64 = 65536;
/// The largest message for a caller with `CAP_SYS_RESOURCE` (`HARD_MSGSIZEMAX`).
pub const HARD_MSGSIZEMAX: i64 = 16 * 1024 * 1024;
/// `si_code` of a queue's notification signal (`SI_MESGQ`).
pub const SI_MESGQ: i32 = -3;
/// Bytes of the cookie a `SIGEV_THREAD` notification hands the netlink socket
/// (`NOTIFY_COOKIE_LEN`).
pub const NOTIFY_COOKIE_LEN: usize = 32;

/// `struct mq_attr` (64 bytes on x86-64).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MqAttr {
    /// `mq_flags`: 0 or `O_NONBLOCK`.
    pub flags: i64,
    /// `mq_maxmsg`: the most messages queued.
    pub maxmsg: i64,
    /// `mq_msgsize`: the largest message.
    pub msgsize: i64,
    /// `mq_curmsgs`: the messages queued now.
    pub curmsgs: i64,
    /// `__reserved`: ignored when read, zero when written.
    pub reserved: [i64; 4],
}

// SAFETY: a `#[repr(C)]` struct of `i64` fields without gaps; every bit pattern is valid.
unsafe impl Pod for MqAttr {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mq_attr_is_linux_x86_64s() {
        assert_eq!(std::mem::size_of::<MqAttr>(), 64);
        assert_eq!(std::mem::offset_of!(MqAttr, curmsgs), 24);
    }
}
