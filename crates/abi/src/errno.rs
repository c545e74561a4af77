//! Linux error numbers, as returned (negated) in `rax` by a failing syscall.

use std::fmt;
use std::io;

/// A Linux errno value (positive).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

macro_rules! errnos {
    ($($name:ident),* $(,)?) => {
        impl Errno {
            $(
                #[doc = concat!("`", stringify!($name), "`")]
                pub const $name: Errno = Errno(libc::$name);
            )*
        }
    };
}
errnos!(
    EPERM,
    ENOENT,
    ESRCH,
    EINTR,
    EIO,
    ENXIO,
    E2BIG,
    ENOEXEC,
    EBADF,
    ECHILD,
    EAGAIN,
    ENOMEM,
    EACCES,
    EFAULT,
    EBUSY,
    EEXIST,
    EXDEV,
    ENODEV,
    ENOTDIR,
    EISDIR,
    EINVAL,
    ENFILE,
    EMFILE,
    ENOTTY,
    EFBIG,
    ENOSPC,
    ESPIPE,
    EROFS,
    EMLINK,
    EPIPE,
    ERANGE,
    EIDRM,
    ENOMSG,
    ENAMETOOLONG,
    ENOSYS,
    ENOTEMPTY,
    ELOOP,
    ENOTSOCK,
    EDESTADDRREQ,
    EMSGSIZE,
    EPROTOTYPE,
    ENOPROTOOPT,
    EPROTONOSUPPORT,
    EOPNOTSUPP,
    EAFNOSUPPORT,
    EADDRINUSE,
    EADDRNOTAVAIL,
    ENETUNREACH,
    ECONNABORTED,
    ECONNRESET,
    ENOTCONN,
    ETIMEDOUT,
    ECONNREFUSED,
    EHOSTUNREACH,
    EALREADY,
    EINPROGRESS,
    EOVERFLOW,
    ENOTSUP,
    ETIME,
    ECANCELED,
    EBADFD,
    EBADR,
    ENOBUFS,
    EOWNERDEAD,
);

impl Errno {
    /// The errno of a host I/O error (`EIO` when it carries none).
    pub fn from_io(e: &io::Error) -> Errno {
        Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }

    /// The errno left by the last failing host libc call.
    pub fn last() -> Errno {
        Errno::from_io(&io::Error::last_os_error())
    }

    /// The value a syscall returns for this error: `-errno` as an unsigned register.
    pub fn as_return(self) -> u64 {
        (-i64::from(self.0)) as u64
    }
}

impl From<io::Error> for Errno {
    fn from(e: io::Error) -> Errno {
        Errno::from_io(&e)
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Errno({} {})",
            self.0,
            io::Error::from_raw_os_error(self.0)
        )
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", io::Error::from_raw_os_error(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negated_return() {
        assert_eq!(Errno::ENOSYS.as_return(), (-38i64) as u64);
        assert_eq!(
            Errno::from_io(&io::Error::from_raw_os_error(2)),
            Errno::ENOENT
        );
    }
}
