//! Plain-old-data: the types whose values may be copied to and from guest memory as raw bytes
//! (the only raw-pointer code of this crate). The structures of [`crate::structs`] are `Pod`,
//! so the kernel reads and writes them whole (`Task::read_val`, `Task::write_val`) instead of
//! decoding bytes at hand-written offsets.

use std::mem::{size_of, MaybeUninit};

/// A type whose every byte pattern is a valid value and which has no padding, so that it can
/// be built from guest bytes and written out as bytes.
///
/// # Safety
/// Implementors must have no padding bytes, no invalid bit patterns (no `bool`, `char`,
/// references, enums or `NonZero*`), and no interior pointers: `#[repr(C)]` structs of `Pod`
/// fields laid out without gaps, integers, and arrays of `Pod`.
pub unsafe trait Pod: Copy + 'static {}

macro_rules! pod {
    ($($t:ty),*) => { $(
        // SAFETY: integers have no padding and every bit pattern is valid.
        unsafe impl Pod for $t {}
    )* };
}
pod!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize);

// SAFETY: an array of `Pod` has no padding between elements (size is a multiple of alignment)
// and every bit pattern of each element is valid.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}

/// The bytes of `v`.
pub fn as_bytes<T: Pod>(v: &T) -> &[u8] {
    // SAFETY: `T: Pod` has no padding, so all `size_of::<T>()` bytes behind `v` are
    // initialised; the slice borrows `v` and lives no longer.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
}

/// A `T` built from `bytes` (exactly `size_of::<T>()` long, else `None`).
pub fn from_bytes<T: Pod>(bytes: &[u8]) -> Option<T> {
    if bytes.len() != size_of::<T>() {
        return None;
    }
    let mut v = MaybeUninit::<T>::uninit();
    // SAFETY: `bytes` has exactly `size_of::<T>()` bytes and does not overlap the local `v`;
    // after the copy every byte of `v` is initialised and, `T` being `Pod`, any pattern is a
    // valid `T`.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr().cast::<u8>(), bytes.len());
        Some(v.assume_init())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let v: [u32; 2] = [0x1122_3344, 0xdead_beef];
        let b = as_bytes(&v).to_vec();
        assert_eq!(b[0], 0x44);
        assert_eq!(from_bytes::<[u32; 2]>(&b), Some(v));
        assert_eq!(from_bytes::<u64>(&b[..7]), None);
    }
}
