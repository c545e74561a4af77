//! `#[repr(C)]` structures the syscall layer copies to and from the application, laid out as
//! on Linux x86-64.

/// `struct iovec`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct IoVec {
    /// Base address.
    pub base: u64,
    /// Length.
    pub len: u64,
}

/// `struct timespec`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Timespec {
    /// Seconds.
    pub sec: i64,
    /// Nanoseconds.
    pub nsec: i64,
}

/// `struct pollfd`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PollFd {
    /// File descriptor.
    pub fd: i32,
    /// Requested events.
    pub events: i16,
    /// Returned events.
    pub revents: i16,
}

/// `struct epoll_event` (packed on x86-64: 12 bytes).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default)]
pub struct EpollEvent {
    /// Event mask.
    pub events: u32,
    /// User data.
    pub data: u64,
}

/// `struct winsize`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Winsize {
    /// Rows.
    pub row: u16,
    /// Columns.
    pub col: u16,
    /// Width in pixels.
    pub xpixel: u16,
    /// Height in pixels.
    pub ypixel: u16,
}

/// Kernel `struct sigaction` as rt_sigaction(2) passes it (not glibc's).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct KernelSigaction {
    /// Handler address, or SIG_DFL (0) / SIG_IGN (1).
    pub handler: u64,
    /// SA_* flags.
    pub flags: u64,
    /// Restorer (SA_RESTORER).
    pub restorer: u64,
    /// Blocked signals during the handler.
    pub mask: u64,
}

/// `struct utsname`: six 65-byte fields.
pub const UTS_FIELD: usize = 65;
