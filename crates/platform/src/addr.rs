//! Address newtypes: guest-physical (`Gpa`) and guest-virtual (`Gva`) addresses.
//!
//! A bare `u64` never crosses a module boundary as an address: the type says which address
//! space it belongs to.

use std::fmt;

/// Size of a base page, in bytes.
pub const PAGE_SIZE: u64 = 4096;
/// log2 of [`PAGE_SIZE`].
pub const PAGE_SHIFT: u32 = 12;

/// A guest-physical address: an offset into the VM's one memory region.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Gpa(pub u64);

/// A guest-virtual address, as the application (ring 3) or a stub (ring 0) sees it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Gva(pub u64);

macro_rules! addr_impl {
    ($t:ident, $name:literal) => {
        impl $t {
            /// The raw address.
            pub const fn raw(self) -> u64 {
                self.0
            }
            /// Rounded down to a page boundary.
            pub const fn page_down(self) -> Self {
                $t(self.0 & !(PAGE_SIZE - 1))
            }
            /// Rounded up to a page boundary, or `None` on overflow.
            pub const fn page_up(self) -> Option<Self> {
                match self.0.checked_add(PAGE_SIZE - 1) {
                    Some(v) => Some($t(v & !(PAGE_SIZE - 1))),
                    None => None,
                }
            }
            /// Offset within its page.
            pub const fn page_offset(self) -> u64 {
                self.0 & (PAGE_SIZE - 1)
            }
            /// Whether the address is page-aligned.
            pub const fn is_page_aligned(self) -> bool {
                self.page_offset() == 0
            }
            /// `self + n`, or `None` on overflow.
            pub const fn checked_add(self, n: u64) -> Option<Self> {
                match self.0.checked_add(n) {
                    Some(v) => Some($t(v)),
                    None => None,
                }
            }
            /// `self + n`; the caller knows it cannot overflow.
            pub const fn add(self, n: u64) -> Self {
                $t(self.0 + n)
            }
        }
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($name, "({:#x})"), self.0)
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:#x}", self.0)
            }
        }
    };
}
addr_impl!(Gpa, "Gpa");
addr_impl!(Gva, "Gva");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(Gva(0x1234).page_down(), Gva(0x1000));
        assert_eq!(Gva(0x1234).page_up(), Some(Gva(0x2000)));
        assert_eq!(Gva(0x2000).page_up(), Some(Gva(0x2000)));
        assert_eq!(Gva(u64::MAX).page_up(), None);
        assert_eq!(Gpa(0x1fff).page_offset(), 0xfff);
        assert!(Gpa(0x3000).is_page_aligned());
    }
}
