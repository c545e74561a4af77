//! ioctl(2) requests on sockets that the kernel passes to the host, with the size of the
//! structure each reads or writes (`include/uapi/linux/sockios.h`, `if.h`).

/// `sizeof(struct ifreq)`.
pub const IFREQ_LEN: usize = 40;

/// `SIOCGIFCONF`: the list of interfaces with an IPv4 address (`struct ifconf`, whose buffer
/// is a pointer of the caller's).
pub const SIOCGIFCONF: u64 = 0x8912;

/// `SIOCATMARK`: whether a stream socket is at its urgent mark (an `int` out).
pub const SIOCATMARK: u64 = 0x8905;

/// `sizeof(struct ifconf)`: `ifc_len` (int, then 4 bytes of padding) and the buffer pointer.
pub const IFCONF_LEN: usize = 16;

/// Whether `req` is an ioctl that reads one interface's name, index, flags, addresses, MTU or
/// hardware address through one `struct ifreq` (and changes nothing).
pub fn is_interface_query(req: u64) -> bool {
    matches!(
        req,
        0x8910 // SIOCGIFNAME
            | 0x8913 // SIOCGIFFLAGS
            | 0x8915 // SIOCGIFADDR
            | 0x8919 // SIOCGIFBRDADDR
            | 0x891b // SIOCGIFNETMASK
            | 0x8921 // SIOCGIFMTU
            | 0x8927 // SIOCGIFHWADDR
            | 0x8933 // SIOCGIFINDEX
            | 0x8942 // SIOCGIFTXQLEN
    )
}
