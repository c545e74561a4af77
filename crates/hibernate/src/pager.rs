//! The page-fault swap-in path: a handler thread serving userfaultfd faults on guest memory
//! from the page-state map and the current swap file.
//!
//! Guest memory (above the platform's reserved chunk) is registered with userfaultfd at the
//! first deflate and stays registered. A page dropped by a deflate faults on its next touch,
//! whether by the guest (through KVM) or by the runtime itself (a syscall's user copy). The
//! handler looks the page up:
//!
//! - `Swapped { slot }`: `pread` the slot, verify its CRC32C, `UFFDIO_COPY` write-protected
//!   (the page becomes `Cached { slot }` until written: see [`crate::uffd`]); neighbours of the
//!   same aligned 16-page window that are swapped in consecutive slots come along in the same
//!   read;
//! - anything else (zero, free, or never swapped): `UFFDIO_ZEROPAGE`.
//!
//! A page whose checksum fails, or a read error, must never reach the application: the handler
//! records the error in the sandbox directory and ends the process (the sandbox stops loudly).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use platform::{GuestMemory, PAGE_SIZE};

use crate::metrics::HibernateMetrics as Metrics;
use crate::pagestate::{PageIdx, PageState, PageStateMap};
use crate::reap::{ReapReader, WorkingSetRecorder};
use crate::swapstore::SwapStore;
use crate::uffd::{Event, Uffd};

/// Pages read together around a fault.
pub const FAULT_AROUND: u64 = 16;

/// What the handler reads from: the page-state map and the swap file it points into.
pub struct PagerState {
    /// State of every guest page.
    pub pages: PageStateMap,
    /// The swap files (layers of successive deflates).
    pub swap: SwapStore,
    /// The current REAP file.
    pub reap: Option<ReapReader>,
    /// Where the bytes of `File { slot }` pages are, by slot.
    pub files: Vec<FilePage>,
    /// Whether this wake was served by a REAP prefetch (faults are then residual).
    pub reap_wake: bool,
    /// Pages faulted in since the last wake, in order (REAP's working set).
    pub recorder: WorkingSetRecorder,
}

/// Exit status of the runtime when swapped data is lost or corrupt.
pub const EXIT_SWAP_CORRUPT: i32 = 70;

/// What a userfaultfd thread runs first to confine itself further (the runtime's per-role
/// seccomp filter); nothing until set.
static THREAD_CONFINEMENT: std::sync::OnceLock<ThreadConfinement> = std::sync::OnceLock::new();

/// What confines a userfaultfd thread: its role's filters, or why they could not be applied.
pub type ThreadConfinement = fn() -> Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Sets what every userfaultfd thread started from now on runs first to confine itself (its
/// role's seccomp filter). Set once; later calls are ignored.
pub fn set_thread_confinement(confine: ThreadConfinement) {
    let _ = THREAD_CONFINEMENT.set(confine);
}

/// Starts the handler thread of one process's memory. It holds the memory only weakly: when
/// the process is gone (its memory unmapped, and with it the registration), the thread ends
/// at its next check (every second without a fault).
pub fn spawn(
    uffd: Arc<Uffd>,
    mem: &Arc<GuestMemory>,
    state: Arc<RwLock<PagerState>>,
    metrics: Arc<Metrics>,
    error_file: PathBuf,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let range = (mem.host_base() as u64, mem.size());
    let alive = Arc::downgrade(mem);
    std::thread::Builder::new()
        .name("uffd".into())
        .spawn(move || {
            if let Some(confine) = THREAD_CONFINEMENT.get() {
                if let Err(e) = confine() {
                    tracing::error!("the userfaultfd thread's seccomp filter: {e}");
                }
            }
            serve(&uffd, range, &alive, &state, &metrics, &error_file)
        })
}

/// Waits up to a second for an event on `uffd`; false on a timeout.
fn event_ready(uffd: &Uffd) -> bool {
    let mut pfd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(uffd)),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, 1000) };
    n != 0
}

/// Records `msg` in the sandbox directory's error file and ends the process: swapped data is
/// lost or corrupt, and the application must not run on.
pub fn fatal(error_file: &std::path::Path, msg: &str) -> ! {
    tracing::error!("{msg}: stopping the sandbox");
    eprintln!("torpor: {msg}: stopping the sandbox");
    let _ = std::fs::write(error_file, format!("{msg}\n"));
    std::process::exit(EXIT_SWAP_CORRUPT);
}

/// Which store a page's bytes are in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Store {
    Swap,
    Reap,
    File,
}

/// Which store a page's bytes are in, and at which slot.
fn location(s: PageState) -> Option<(Store, u32)> {
    match s {
        PageState::Swapped { slot } => Some((Store::Swap, slot)),
        PageState::Reap { slot } => Some((Store::Reap, slot)),
        PageState::File { slot } => Some((Store::File, slot)),
        _ => None,
    }
}

/// A clean file page dropped at deflate: its file, the offset of its bytes, and their CRC32C
/// at the time (a file changed on the host since stops the sandbox rather than feed it other
/// bytes).
#[derive(Clone, Debug)]
pub struct FilePage {
    /// The mapped file.
    pub file: std::sync::Arc<std::fs::File>,
    /// Offset of the page in it.
    pub offset: u64,
    /// CRC32C of the page's 4 KiB as they were in memory.
    pub crc: u32,
}

impl FilePage {
    /// Reads the page into `buf` (4 KiB) and checks it.
    ///
    /// # Errors
    /// [`FilePageError`]: an I/O error, or a file that changed on the host.
    pub fn read_into(&self, buf: &mut [u8]) -> Result<(), FilePageError> {
        read_file_page(&self.file, self.offset, buf).map_err(FilePageError::Io)?;
        if crc32c::crc32c(buf) != self.crc {
            return Err(FilePageError::Changed {
                offset: self.offset,
            });
        }
        Ok(())
    }
}

/// Why the pager could not bring a page back (the sandbox then stops: see [`fatal`]).
#[derive(Debug, thiserror::Error)]
enum ReadBackError {
    #[error(transparent)]
    PageFile(crate::pagefile::PageFileError),
    #[error(transparent)]
    FilePage(FilePageError),
    #[error("no file for a file page")]
    NoFile,
}

/// Why a clean page of a mapped file could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum FilePageError {
    /// The host's read failed.
    #[error("reading a mapped file: {0}")]
    Io(#[source] std::io::Error),
    /// The page no longer has the bytes it had when it was dropped.
    #[error("mapped file changed on the host (offset {offset:#x})")]
    Changed {
        /// Offset of the page in its file.
        offset: u64,
    },
}

/// Reads the 4 KiB of a file page (bytes past the end of the file read as zero, as the demand
/// fault that first loaded it made them).
pub fn read_file_page(file: &std::fs::File, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    buf[done..].fill(0);
    Ok(())
}

fn serve(
    uffd: &Uffd,
    (base, size): (u64, u64),
    alive: &std::sync::Weak<GuestMemory>,
    state: &RwLock<PagerState>,
    metrics: &Metrics,
    error_file: &Path,
) {
    let mut buf = vec![0u8; (FAULT_AROUND * PAGE_SIZE) as usize];
    loop {
        if !event_ready(uffd) {
            if alive.strong_count() == 0 {
                tracing::debug!("the process's memory is gone: uffd thread ends");
                return;
            }
            continue;
        }
        let event = match uffd.read_event() {
            Ok(Some(e)) => e,
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!("userfaultfd closed: {e}");
                return;
            }
        };
        let addr = match event {
            Event::Pagefault { addr, .. } => addr,
            _ => continue,
        };
        if addr < base || addr >= base + size {
            continue;
        }
        let page = (addr - base) / PAGE_SIZE;
        let mut st = match state.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let residual = st.reap_wake;
        let Some((store, slot)) = location(st.pages.get(PageIdx(page)).unwrap_or(PageState::Zero))
        else {
            let host = base + page * PAGE_SIZE;
            // SAFETY: `host` is a page of guest memory, registered with this uffd.
            match unsafe { uffd.zeropage(host as *mut _, PAGE_SIZE as usize) } {
                Ok(_) => {}
                Err(e) if is_eexist(&e) => {}
                Err(e) => fatal(
                    error_file,
                    &format!("UFFDIO_ZEROPAGE at page {page:#x} failed: {e}"),
                ),
            }
            let _ = st.pages.set(PageIdx(page), PageState::Resident);
            st.recorder.record(PageIdx(page));
            // A zero page (a frame the guest just took from its allocator) is no miss of the
            // REAP set: only faults that read swapped data count as residual.
            metrics.record_fault(0, false);
            continue;
        };
        // Extend to neighbours of the aligned window held in consecutive slots of the same file.
        let win = page - page % FAULT_AROUND;
        let same = |s: Result<PageState, _>, want: u64| matches!(s.ok().and_then(location), Some((r, sl)) if r == store && u64::from(sl) == want);
        let mut first = page;
        let mut first_slot = u64::from(slot);
        while first > win
            && first_slot > 0
            && same(st.pages.get(PageIdx(first - 1)), first_slot - 1)
        {
            first -= 1;
            first_slot -= 1;
        }
        let mut count = (page - first) + 1;
        while first + count < win + FAULT_AROUND
            && first + count < st.pages.len()
            && same(st.pages.get(PageIdx(first + count)), first_slot + count)
        {
            count += 1;
        }
        let bytes = (count * PAGE_SIZE) as usize;
        let read = match store {
            Store::Reap => st.reap.as_ref().map(|r| {
                r.read_slots_into(first_slot as u32, count as u32, &mut buf[..bytes])
                    .map_err(ReadBackError::PageFile)
            }),
            Store::Swap => (!st.swap.is_empty()).then(|| {
                st.swap
                    .read_pages_into(
                        PageIdx(first),
                        first_slot as u32,
                        count as u32,
                        &mut buf[..bytes],
                    )
                    .map_err(ReadBackError::PageFile)
            }),
            Store::File => Some((0..count).try_for_each(|k| {
                let at = (k * PAGE_SIZE) as usize;
                match st.files.get((first_slot + k) as usize) {
                    Some(fp) => fp
                        .read_into(&mut buf[at..at + PAGE_SIZE as usize])
                        .map_err(ReadBackError::FilePage),
                    None => Err(ReadBackError::NoFile),
                }
            })),
        };
        match read {
            Some(Ok(())) => {}
            Some(Err(e)) => fatal(
                error_file,
                &format!("swapped data unreadable or corrupt: {e}"),
            ),
            None => fatal(
                error_file,
                &format!("page {page:#x} is swapped out but its file is not open"),
            ),
        }
        let host = base + first * PAGE_SIZE;
        // Pages from the swap come in write-protected: while unwritten, their slot still holds
        // their bytes (`Cached`), and the next deflate keeps it instead of writing them again.
        let copy = |src: &[u8], dst: u64, len: usize| -> std::io::Result<bool> {
            // SAFETY: `src` holds `len` verified bytes; `dst` is guest memory inside the
            // registered range (pages of the map, which covers guest memory).
            unsafe {
                if store == Store::Swap {
                    uffd.copy_write_protected(src.as_ptr().cast(), dst as *mut _, len)
                        .map(|(_, wp)| wp)
                } else {
                    uffd.copy(src.as_ptr().cast(), dst as *mut _, len)
                        .map(|_| false)
                }
            }
        };
        let mut protected = false;
        match copy(&buf[..bytes], host, bytes) {
            Ok(wp) => protected = wp,
            Err(e) if is_eexist(&e) => {
                // Some page of the run is present already: fall back to the faulting page only.
                let off = ((page - first) * PAGE_SIZE) as usize;
                let h = base + page * PAGE_SIZE;
                match copy(&buf[off..off + PAGE_SIZE as usize], h, PAGE_SIZE as usize) {
                    Ok(wp) => protected = wp,
                    Err(e) if is_eexist(&e) => {}
                    Err(e) => fatal(
                        error_file,
                        &format!("UFFDIO_COPY at page {page:#x} failed: {e}"),
                    ),
                }
                count = 1;
                first_slot += page - first;
                first = page;
            }
            Err(e) => fatal(
                error_file,
                &format!("UFFDIO_COPY at page {page:#x} failed: {e}"),
            ),
        }
        for p in first..first + count {
            let now = match (protected, store) {
                (true, Store::Swap) => PageState::Cached {
                    slot: (first_slot + (p - first)) as u32,
                },
                _ => PageState::Resident,
            };
            let _ = st.pages.set(PageIdx(p), now);
            st.recorder.record(PageIdx(p));
        }
        metrics.record_fault(count * PAGE_SIZE, residual);
    }
}

fn is_eexist(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::EEXIST)
}
