//! Stub tests that need the holder's internals: the base filter, in a real stub, refuses
//! what the holder's checks would.

use std::os::fd::AsFd;

use super::StubProcess;
use crate::sys;
use crate::TrapError;

/// A read-only window mapped with `PROT_WRITE` past the holder's check: the stub's filter
/// traps the mapper's `mmap` (SIGSYS on a thread without a stack), which kills the stub, rather
/// than the kernel answering (`EACCES` for the read-only reopening would be a `Mapper` error).
#[test]
fn filter_refuses_prot_write_on_a_read_only_slot() {
    let mem = sys::memfd("torpor-test-mem", 1 << 20).unwrap();
    let stub = StubProcess::spawn(mem.as_fd()).unwrap();
    let shm = sys::memfd("torpor-test-shm", 0x2000).unwrap();
    let ro = stub.attach_window(shm.as_fd(), false).unwrap();
    let rw = stub.attach_window(shm.as_fd(), true).unwrap();
    // What the filter allows works.
    stub.map_window_unchecked(ro, 0x40_0000, 0x1000, 0, libc::PROT_READ)
        .unwrap();
    stub.map_window_unchecked(rw, 0x50_0000, 0x2000, 0, libc::PROT_READ | libc::PROT_WRITE)
        .unwrap();
    // The holder refuses PROT_WRITE on the read-only slot…
    assert!(matches!(
        stub.map_window(ro, 0x60_0000, 0x1000, 0, libc::PROT_READ | libc::PROT_WRITE),
        Err(TrapError::Invalid(_))
    ));
    assert!(stub.is_alive());
    // …and so does the filter, which kills the stub.
    let r = stub.map_window_unchecked(ro, 0x60_0000, 0x1000, 0, libc::PROT_WRITE);
    assert!(matches!(r, Err(TrapError::StubDied)), "{r:?}");
    assert!(!stub.is_alive());
}

/// Other descriptors than slots: the filter refuses them too (the guest memfd through the
/// window site, a slot beyond the range).
#[test]
fn filter_refuses_non_slot_descriptors() {
    for fd in [crate::sysmsg::MEM_FD as u32, 3, 1024, 63] {
        let mem = sys::memfd("torpor-test-mem", 1 << 20).unwrap();
        let stub = StubProcess::spawn(mem.as_fd()).unwrap();
        let r = stub.map_window_unchecked(super::WindowSlot(fd), 0x40_0000, 0x1000, 0, 1);
        assert!(matches!(r, Err(TrapError::StubDied)), "fd {fd}: {r:?}");
    }
}
