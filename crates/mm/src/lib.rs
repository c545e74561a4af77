//! Guest memory management for one sandbox: the reclaim-oriented page allocator, the guest's
//! four-level page tables, VMAs, demand paging and copies to and from user memory.
//!
//! Module map:
//! - [`alloc`]: the page allocator over guest-physical memory (4 MiB chunks, two-level free
//!   bitmap, 16-bit reference counts, known-zero tracking for deflation);
//! - `family`: [`Family`], the allocator shared by the address spaces of a fork family
//!   (copy-on-write fork);
//! - [`pagetable`]: page tables in guest memory, the kernel direct map, and the record of
//!   written entries for the platform's PTE-sync stub (the shadow MMU does not see host writes
//!   to present entries);
//! - [`vma`]: VMAs and their sorted set (split, merge, gap search);
//! - `manager`: [`MemoryManager`], the address space (Linux's `struct mm_struct`): mmap,
//!   munmap, mprotect, brk, mremap, madvise;
//! - `fault`: demand faults with fault-around;
//! - `pagecache`: which private file mappings are backed by the host's page cache, through
//!   a read-only shared object of the file;
//! - `resident`: mincore's residency, the host page cache's for file and shared pages;
//! - `cow`: copy-on-write of those page-cache pages into frames of the VM's own;
//! - `usercopy`: copies between the kernel and user memory, user buffers as guest-physical
//!   runs;
//! - [`shared`]: memory shared between the sandbox's processes (MAP_SHARED objects, System V
//!   segments), shown to each VM as shared windows;
//! - [`Pod`] (re-exported from `abi`): the marker for values copied as raw bytes;
//! - [`image`]: checkpoint and restore of an address space ([`MmImage`], export, import).
//!
//! Locks: the kernel wraps each `MemoryManager` in one `Mutex`, shared by the threads of a
//! thread group; this crate's own locks are those of [`shared`] (the sandbox's shared objects
//! by kind, each object's windows, the next free shared address), taken under it in that
//! order and never held while taking anything else:
//!
//! ```text
//! kernel: MemoryManager mutex (one per address space)
//!   Family allocator (one per family of address spaces over one memory; leaf)
//!   SharedSpace.files | .readonly_files | .anonymous
//!     SharedObject.windows
//!       SharedSpace.next_gpa
//! ```
//!
//! Hold the `MemoryManager` mutex for a whole operation (a syscall's copies, a fault), never
//! while the application runs or across a blocking host call other than the platform's commit;
//! guest-physical runs from [`MemoryManager::user_ranges`] are valid only while it is held.
//! The whole lock order is in `docs/ARCHITECTURE.md` ("Locks").

pub mod alloc;
mod cow;
mod family;
mod fault;
pub mod image;
mod manager;
mod pagecache;
pub mod pagetable;
mod resident;
pub mod shared;
mod usercopy;
pub mod vma;

pub use abi::Pod;
pub use alloc::{
    AllocError, AllocImageError, MemoryBudget, PageAllocator, CHUNK_PAGES, CHUNK_SIZE,
};
pub use family::{Family, Pins};
pub use fault::{Access, FaultError, FAULT_AROUND};
pub use image::{AnonObjects, FileId, MmImage, VmaImage, VmaKindImage};
pub use manager::{
    CleanFilePage, MemoryManager, MmError, MmStats, MmapRequest, DEFAULT_MMAP_BASE, MREMAP_FIXED,
    MREMAP_MAYMOVE, STACK_RESERVE,
};
pub use pagecache::RESERVED_SLOTS;
pub use pagetable::{PageTableError, PageTables, PteFlags, PteRun};
pub use shared::{SharedObject, SharedSpace};
pub use vma::{
    Prot, VmAdvice, VmLock, Vma, VmaError, VmaKind, VmaSet, MAX_MAP_COUNT, MMAP_MIN_ADDR,
};
