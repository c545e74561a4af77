//! The trap platform behind the kernel's [`platform::Platform`] interface: guest memory is a
//! memfd the holder maps shared ([`GuestMemory::new_shared`]), each guest process a stub
//! process ([`crate::space::TrapSpace`]), each thread a stub thread
//! ([`crate::context::TrapContext`]).
//!
//! Where stubs come from (`spawner.rs`): in a holder, from the stub factory
//! ([`crate::spawner::start_factory`]), which the
//! holder starts while it confines itself, once it is inside its Landlock domain (so that it
//! may signal the stubs: kicks and kills) and before it installs its own seccomp filter (which
//! a stub must not inherit: a filter's KILL outranks the stub's TRAP). Elsewhere (tests, an
//! unconfined process), from one long-lived thread of the process (the spawner): a stub dies
//! with the thread that spawned it (`PR_SET_PDEATHSIG`), and the kernel asks for new address
//! spaces from task threads that end with their guest thread.
//!
//! A space's stub is spawned when its first thread first runs, not when the space is made:
//! the first process's space is built before the holder confines itself.

use std::os::fd::AsFd;
use std::sync::Arc;

use platform::{AddressSpace, CpuModel, GuestMemory, Platform, PlatformError, Vdso};

use crate::space::TrapSpace;
use crate::spawner::Spawner;
use crate::TrapError;

/// The trap platform.
pub struct TrapPlatform {
    cpu: CpuModel,
    spawner: Arc<Spawner>,
    /// The host's vDSO, as every stub has it.
    vdso: Option<crate::vdso::HostVdso>,
}

impl std::fmt::Debug for TrapPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrapPlatform")
            .field("cpu", &self.cpu)
            .finish()
    }
}

impl TrapPlatform {
    /// The platform: checks that this host can run it (FSGSBASE for user space, XSAVE).
    ///
    /// # Errors
    /// [`TrapError::Unsupported`] on a host without what the stubs need.
    pub fn new() -> Result<TrapPlatform, TrapError> {
        if crate::sys::auxval(crate::sys::AT_HWCAP2) & crate::sys::HWCAP2_FSGSBASE == 0 {
            return Err(TrapError::Unsupported(
                "FSGSBASE is not enabled for user space",
            ));
        }
        let xsave_size = crate::sys::xsave_size().ok_or(TrapError::Unsupported("no XSAVE"))?;
        if xsave_size > platform::FPU_STATE_SIZE {
            return Err(TrapError::Unsupported("an XSAVE area larger than 4 KiB"));
        }
        platform::kick::install_kick_handler();
        crate::spawner::opened();
        Ok(TrapPlatform {
            cpu: CpuModel {
                xcr0: crate::sys::user_xfeatures(),
                xsave_size,
                user_cs: 0x33,
                user_ss: 0x2b,
            },
            spawner: Arc::default(),
            vdso: crate::vdso::HostVdso::find(),
        })
    }
}

impl Platform for TrapPlatform {
    fn name(&self) -> &'static str {
        "trap"
    }

    fn cpu(&self) -> &CpuModel {
        &self.cpu
    }

    /// The host's vDSO, moved into every stub ([`crate::vdso`]).
    fn vdso(&self) -> Option<Vdso> {
        self.vdso.map(|v| Vdso {
            ehdr: v.ehdr_in_stub(),
            digest: v.digest(),
        })
    }

    fn processes(&self) -> Vec<u32> {
        self.spawner.pids()
    }

    fn shared_processes(&self) -> Vec<u32> {
        crate::spawner::factory_pid()
            .map(|p| vec![p])
            .unwrap_or_default()
    }

    fn new_memory(&self, size: u64) -> Result<Arc<GuestMemory>, PlatformError> {
        Ok(Arc::new(
            GuestMemory::new_shared(size).map_err(PlatformError::new)?,
        ))
    }

    /// A memfd, with the image's data copied in (holes stay holes): the stub maps only
    /// memfds, so clones on this platform do not share the image's pages.
    fn memory_from_image(
        &self,
        image: &std::fs::File,
        size: u64,
    ) -> Result<Arc<GuestMemory>, PlatformError> {
        let len = image.metadata().map_err(PlatformError::new)?.len();
        if len != size {
            return Err(PlatformError::msg(format!(
                "a memory image of {len} bytes for a memory of {size}"
            )));
        }
        let mem = GuestMemory::new_shared(size).map_err(PlatformError::new)?;
        copy_data_extents(image, &mem).map_err(PlatformError::new)?;
        Ok(Arc::new(mem))
    }

    /// Each address space is a stub process of its own mapping the memfd at the frames its
    /// page tables name: several can map one memory.
    fn address_spaces_share_memory(&self) -> bool {
        true
    }

    fn new_address_space(
        &self,
        mem: Arc<GuestMemory>,
    ) -> Result<Arc<dyn AddressSpace>, PlatformError> {
        if mem.backing_fd().is_none() {
            return Err(PlatformError::msg(
                "the trap platform needs guest memory backed by a memfd",
            ));
        }
        Ok(Arc::new(TrapSpace::new(self.spawner.clone(), mem)))
    }
}

/// Copies bytes `start..end` of `image` into `mem` at the same offsets: through the memfd
/// with `sendfile` (a copy in the kernel, page cache to page cache, without a fault per page
/// of the mapping), else read into the mapping.
fn copy_range(
    image: &std::fs::File,
    mem: &GuestMemory,
    start: u64,
    end: u64,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut at = start;
    if let Some(memfd) = mem.backing_fd() {
        // SAFETY: lseek on a descriptor the memory holds.
        if unsafe { libc::lseek(memfd.as_raw_fd(), at as libc::off_t, libc::SEEK_SET) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        while at < end {
            let mut from = at as libc::off_t;
            let n = ((end - at) as usize).min(1 << 30);
            // SAFETY: sendfile between two descriptors we hold, with a local offset.
            let got = unsafe { libc::sendfile(memfd.as_raw_fd(), image.as_raw_fd(), &mut from, n) };
            if got < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if got == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
            }
            at += got as u64;
        }
        return Ok(());
    }
    while at < end {
        let n = (end - at).min(1 << 20);
        let got = mem.read_from_fd(image.as_fd(), platform::Gpa(at), n, Some(at))?;
        if got == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
        }
        at += got as u64;
    }
    Ok(())
}

/// Copies the data extents of `image` into `mem` at the same offsets (holes are skipped: the
/// memory reads zero there already).
fn copy_data_extents(image: &std::fs::File, mem: &GuestMemory) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = image.as_raw_fd();
    let size = mem.size();
    let mut off: u64 = 0;
    while off < size {
        // SAFETY: lseek on a descriptor we hold; the result is checked.
        let start = unsafe { libc::lseek(fd, off as libc::off_t, libc::SEEK_DATA) };
        if start < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENXIO) {
                return Ok(()); // no data after `off`
            }
            return Err(e);
        }
        // SAFETY: as above.
        let end = unsafe { libc::lseek(fd, start, libc::SEEK_HOLE) };
        if end < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let (start, end) = (start as u64, (end as u64).min(size));
        copy_range(image, mem, start, end)?;
        off = end;
    }
    Ok(())
}
