//! Checkpoint and restore of an address space: [`MmImage`], the part of a [`MemoryManager`]
//! that does not live in guest memory, with [`MemoryManager::export`] and
//! [`MemoryManager::import`].
//!
//! A checkpoint saves the guest's pages above [`layout::RESERVED_END`] on its own (the page
//! tables are guest pages: they come back with them); what remains is the page-table root and
//! counters, the VMAs, the break and mmap base, the counters of [`MmStats`](crate::MmStats),
//! and the page allocator's state (bytes: `alloc/image.rs`). A file mapping's `Arc<File>`
//! cannot be saved: it is recorded as a [`FileId`] (the guest path the VMA is named by, as
//! Linux's `d_path`, and the file's size and modification time) and reopened through a
//! caller's function at import, which refuses a file that changed since.
//!
//! A `MAP_SHARED` mapping of a file (a regular file of the sandbox's root, `/dev/shm`
//! included; read-only or writable) is saved the same way: its pages are the file's page
//! cache, seen through a window of the file's [`SharedObject`], so its bytes are in the file
//! (the checkpoint keeps the sandbox's files) and an import only maps the file's object again
//! (from the restoring sandbox's [`SharedSpace`]); its pages attach at the first fault, as
//! after an mmap.
//!
//! [`MemoryManager::import`] builds the manager over a fresh [`GuestMemory`] whose pages are
//! filled later (lazily, by a pager): it neither reads nor writes guest memory. The image is
//! untrusted input (a file on disk): every field is checked, and anything inconsistent is an
//! error, never a panic.
//!
//! Anonymous shared memory (`MAP_SHARED | MAP_ANONYMOUS`: memfd objects whose bytes are in no
//! file) is saved by reference: each object once in an [`AnonObjects`] table the caller
//! saves the bytes of, each VMA by its index and offset. Not supported yet: System V
//! segments, refused by `export`. Pages in windows
//! of file objects (page-cache pages of private file mappings, pages of `MAP_SHARED` file
//! mappings: frames at guest-physical addresses a new process does not have) must be unmapped
//! first with [`MemoryManager::drop_file_window_pages`]; they fault back from the file.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use platform::layout;
use platform::{Gpa, GuestMemory, Gva, PAGE_SIZE};

use crate::alloc::PageAllocator;
use crate::manager::{MemoryManager, MmError, STACK_RESERVE};
use crate::pagetable::PageTables;
use crate::shared::{SharedObject, SharedSpace};
use crate::vma::{Prot, VmAdvice, VmLock, Vma, VmaKind, VmaSet};

mod family;

/// Which file a file mapping (private or `MAP_SHARED`) maps, in a form that survives the
/// process: the guest path to reopen it by, and the size and modification time it had at the
/// checkpoint, which the reopened file must still have.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash)]
#[serde(deny_unknown_fields)]
pub struct FileId {
    /// The file's path in the sandbox's root, resolved (symlinks followed), as the VMA's
    /// name shows it in `/proc/PID/maps`.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its modification time, in nanoseconds since the epoch.
    pub mtime_ns: i64,
}

impl FileId {
    /// The identity of `file` (known to the guest as `path`) as `fstat` gives it now.
    ///
    /// # Errors
    /// The host's errno of fstat.
    pub fn of_file(path: String, file: &File) -> io::Result<FileId> {
        let meta = file.metadata()?;
        Ok(FileId {
            path,
            size: meta.size(),
            mtime_ns: mtime_ns(&meta),
        })
    }

    /// Whether `file` (reopened) still has the size and modification time recorded.
    ///
    /// # Errors
    /// The host's errno of fstat.
    pub fn matches(&self, file: &File) -> io::Result<bool> {
        let meta = file.metadata()?;
        Ok(meta.size() == self.size && mtime_ns(&meta) == self.mtime_ns)
    }
}

/// The modification time of `meta` in nanoseconds (saturating far from the epoch).
fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    meta.mtime()
        .saturating_mul(1_000_000_000)
        .saturating_add(meta.mtime_nsec())
}

/// What backs a saved VMA (the saveable kinds of [`VmaKind`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub enum VmaKindImage {
    /// Anonymous memory.
    Anon,
    /// A private mapping of a file.
    File {
        /// The file.
        file: FileId,
        /// File offset of the VMA's start (page-aligned).
        offset: u64,
        /// Whether the mapping's clean pages were the page cache's (the file's read-only
        /// object, `pagecache.rs`); restored so when the restoring sandbox shares files.
        page_cache: bool,
    },
    /// A `MAP_SHARED` mapping of a file: its pages are the file's (the file's
    /// [`SharedObject`] in the sandbox's [`SharedSpace`]), so the bytes are in the file.
    SharedFile {
        /// The file.
        file: FileId,
        /// File offset of the VMA's start (page-aligned).
        offset: u64,
        /// Whether the mapping may be made writable (its descriptor was opened read-write:
        /// Linux's `VM_MAYWRITE`). A VMA with `PROT_WRITE` needs it, and a restore needs a
        /// file object it may write.
        may_write: bool,
    },
    /// A `MAP_SHARED | MAP_ANONYMOUS` mapping: its pages are those of an anonymous object
    /// shared by the sandbox's processes, saved once for all of them by the caller
    /// ([`AnonObjects`]) and named here by its index.
    SharedAnon {
        /// The object's index in the checkpoint's table.
        object: u32,
        /// Offset of the VMA's start in the object (page-aligned).
        offset: u64,
        /// Whether the mapping may be made writable.
        may_write: bool,
    },
}

/// The anonymous shared objects the address spaces of a checkpoint map, each once: filled by
/// [`MemoryManager::export`] (an object mapped by several processes gets one index), and at a
/// restore the objects made again, in the same order, for [`MemoryManager::import`].
#[derive(Default)]
pub struct AnonObjects {
    objects: Vec<Arc<SharedObject>>,
    index: HashMap<*const SharedObject, u32>,
}

impl AnonObjects {
    /// A table of objects made again for a restore, in their saved order.
    pub fn of(objects: Vec<Arc<SharedObject>>) -> AnonObjects {
        let index = objects
            .iter()
            .enumerate()
            .map(|(i, o)| (Arc::as_ptr(o), i as u32))
            .collect();
        AnonObjects { objects, index }
    }

    /// The index of `object`, added if new.
    fn index_of(&mut self, object: &Arc<SharedObject>) -> u32 {
        let n = self.objects.len() as u32;
        *self.index.entry(Arc::as_ptr(object)).or_insert_with(|| {
            self.objects.push(object.clone());
            n
        })
    }

    /// The objects, by index.
    pub fn objects(&self) -> &[Arc<SharedObject>] {
        &self.objects
    }
}

/// A saved VMA: `[start, end)` with its rights, name and backing.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct VmaImage {
    /// First address (page-aligned).
    pub start: u64,
    /// End address, exclusive (page-aligned, above `start`, at most the end of the user half).
    pub end: u64,
    /// `PROT_*` bits.
    pub prot: u32,
    /// Name shown in `/proc/PID/maps` (the file's path for a file mapping).
    pub name: Option<String>,
    /// Backing.
    pub kind: VmaKindImage,
    /// Its lock ([`VmLock::code`]: 0 none, 1 mlock, 2 mlock on fault). Absent before
    /// format 1.7, and left out when 0, so that an image without locked mappings is read by
    /// an older torpor as before.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lock: u8,
    /// Sealed by mseal(2). Absent before format 1.7 (nothing was sealed then).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sealed: bool,
    /// What madvise(2) marked it with ([`VmAdvice::bits`]: 1 wipe on fork, 2 not copied by
    /// fork, 4 left out of core dumps). Absent before format 1.8, and left out when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub advice: u8,
}

/// Whether a lock code is 0 (not locked), to leave it out of an image.
fn is_zero(code: &u8) -> bool {
    *code == 0
}

/// The state of a [`MemoryManager`] outside guest memory (see the module's doc); the page
/// allocator's state travels beside it as bytes. Invariants, checked by
/// [`MemoryManager::import`]: `mem_size` is the restoring memory's size; `pt_root` is an
/// allocated page; every allocated page is a page table or a mapped user frame
/// (`table_pages + mapped` equals the allocator's used pages); the VMAs are sorted,
/// page-aligned, non-overlapping and in the user half; a break without a base is 0, one with
/// a base lies between it and the end of the user half.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MmImage {
    /// Size of guest memory in bytes.
    pub mem_size: u64,
    /// Guest-physical address of the PML4 (CR3).
    pub pt_root: u64,
    /// Pages holding page tables (direct map included).
    pub table_pages: u64,
    /// User leaf entries owning a frame (present or PROT_NONE).
    pub mapped: u64,
    /// Ceiling of the top-down search for new mappings.
    pub mmap_base: u64,
    /// Start of the heap, once the loader set it.
    pub brk_base: Option<u64>,
    /// The program break.
    pub brk: u64,
    /// Faults served.
    pub faults: u64,
    /// Pages mapped from the page cache.
    pub cache_maps: u64,
    /// Copies-on-write of page-cache pages.
    pub cow_copies: u64,
    /// Runs `[address of the first page, pages]` of file-window pages (program text,
    /// libraries' read-only data) the process had mapped at the checkpoint: a restore maps
    /// them again ahead ([`MemoryManager::prefault_file_pages`]). Absent before format 1.3.
    #[serde(default)]
    pub file_pages: Vec<[u64; 2]>,
    /// The VMAs, in address order.
    pub vmas: Vec<VmaImage>,
    /// The lock of mappings made from now on (mlockall's MCL_FUTURE, [`VmLock::code`]).
    /// Absent before format 1.7, and left out when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub def_lock: u8,
}

/// A refused export or import, with its reason.
fn refuse(why: String) -> MmError {
    MmError::Checkpoint(why)
}

/// Checks an export's books: the page-table pages and mapped frames of the address spaces
/// (`held`) against what the allocator counts (`counted`, its used pages or, for a family,
/// its references: `what`). More held than counted: pages of file windows (page cache,
/// `MAP_SHARED` files) are still mapped, which are not the allocator's; fewer: pages the
/// allocator holds that nothing maps.
fn books_balance(held: usize, counted: usize, what: &str) -> Result<(), MmError> {
    match held.cmp(&counted) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater => Err(refuse(format!(
            "{} mapped pages are not the allocator's: pages of file windows (page cache, \
             MAP_SHARED files) are still mapped (call drop_file_window_pages first)",
            held - counted
        ))),
        std::cmp::Ordering::Less => Err(refuse(format!(
            "{counted} {what} but {held} page-table pages and mapped pages"
        ))),
    }
}

impl MemoryManager {
    /// The address space's state for a checkpoint: the image and the page allocator's bytes
    /// ([`PageAllocator::export_bytes`]). Guest memory itself is the caller's to save (every
    /// allocated page above [`layout::RESERVED_END`]; free pages must be left out: they are
    /// imported as known zero). Guest memory is neither read nor written (it may be deflated).
    ///
    /// # Errors
    /// [`MmError::Checkpoint`] for what cannot be restored: a System V mapping; a file mapping without a path (its VMA has no name) or whose file
    /// was deleted; a `MAP_SHARED` mapping of something other than a regular file (a
    /// device); pages of file windows still mapped (call
    /// [`drop_file_window_pages`](Self::drop_file_window_pages) first: found by counting,
    /// as mapped pages that are not the allocator's); books that do not balance otherwise
    /// (allocated pages other than tables and mapped frames); a failed `fstat`; an address
    /// space whose family has other members (frames shared copy-on-write).
    pub fn export(&self, anon: &mut AnonObjects) -> Result<(MmImage, Vec<u8>), MmError> {
        let members = self.family().members();
        if members > 1 {
            return Err(refuse(format!(
                "its memory is shared copy-on-write with {} forked address space(s): \
                 exported with them (export_family)",
                members - 1
            )));
        }
        let image = self.export_parts(anon)?;
        // Every allocated page is a table or a mapped frame, mapped once; any other mapped page
        // is a window's (a page-cache page, a MAP_SHARED file's page; anonymous shared memory
        // was refused above), not the allocator's: counted, not looked for, so that guest
        // memory is not read.
        let used = self.alloc.lock().used_pages();
        books_balance(
            (image.table_pages + image.mapped) as usize,
            used,
            "pages allocated",
        )?;
        Ok((image, self.alloc.lock().export_bytes()))
    }

    /// The image of this address space alone (VMAs, tables, counters), its books not
    /// checked: [`export`](Self::export) and [`export_family`](Self::export_family) check
    /// them, for one address space or for a family.
    fn export_parts(&self, anon: &mut AnonObjects) -> Result<MmImage, MmError> {
        let mut ids: HashMap<*const (), FileId> = HashMap::new();
        let mut vmas = Vec::with_capacity(self.vmas.len());
        for v in self.vmas.iter() {
            let kind = match &v.kind {
                VmaKind::Anon => VmaKindImage::Anon,
                VmaKind::Shared {
                    object,
                    offset,
                    may_write,
                } if !object.is_file() && object.name() == "anon" => VmaKindImage::SharedAnon {
                    object: anon.index_of(object),
                    offset: *offset,
                    may_write: *may_write,
                },
                VmaKind::Shared { object, .. } if !object.is_file() => {
                    let what = match object.name() {
                        "io_uring" => "io_uring rings",
                        _ => "System V shared memory",
                    };
                    return Err(refuse(format!(
                        "MAP_SHARED mapping {}-{} ({}): checkpoints of {what} are not \
                         supported yet",
                        v.start,
                        v.end,
                        v.name.as_deref().unwrap_or("anonymous")
                    )));
                }
                VmaKind::Shared {
                    object,
                    offset,
                    may_write,
                } => VmaKindImage::SharedFile {
                    file: Self::file_id(
                        v,
                        Mapping::Shared,
                        Arc::as_ptr(object).cast(),
                        || object.metadata(),
                        &mut ids,
                    )?,
                    offset: *offset,
                    may_write: *may_write,
                },
                VmaKind::File {
                    file,
                    offset,
                    cache,
                } => VmaKindImage::File {
                    file: Self::file_id(
                        v,
                        Mapping::Private,
                        Arc::as_ptr(file).cast(),
                        || file.metadata(),
                        &mut ids,
                    )?,
                    offset: *offset,
                    page_cache: cache.is_some(),
                },
            };
            vmas.push(VmaImage {
                start: v.start.0,
                end: v.end.0,
                prot: v.prot.bits() as u32,
                name: v.name.clone(),
                kind,
                lock: v.lock.code(),
                sealed: v.sealed,
                advice: v.advice.bits(),
            });
        }
        let table_pages = self.pt.table_pages();
        let mapped = self.pt.mapped_pages();
        Ok(MmImage {
            mem_size: self.mem.size(),
            pt_root: self.pt.root().0,
            table_pages: table_pages as u64,
            mapped: mapped as u64,
            mmap_base: self.mmap_base.0,
            brk_base: self.brk_base.map(|b| b.0),
            brk: self.brk.0,
            faults: self.faults,
            cache_maps: self.cache_maps,
            cow_copies: self.cow_copies,
            file_pages: page_runs(&self.file_pages),
            vmas,
            def_lock: self.def_lock.code(),
        })
    }

    /// The [`FileId`] of the file of file mapping `v` (`file` is the address of its
    /// `Arc<File>` or shared object, which `ids` remembers; `stat` gives its metadata), after
    /// checking that it can be reopened (a path, a linked file; a regular file, for a shared
    /// mapping, whose bytes are then the file's).
    fn file_id(
        v: &Vma,
        mapping: Mapping,
        file: *const (),
        stat: impl FnOnce() -> io::Result<std::fs::Metadata>,
        ids: &mut HashMap<*const (), FileId>,
    ) -> Result<FileId, MmError> {
        let range = format!("{}-{}", v.start, v.end);
        let Some(path) = v.name.clone() else {
            return Err(refuse(format!(
                "{mapping} {range} has no path: its file cannot be reopened"
            )));
        };
        if let Some(id) = ids.get(&file) {
            return Ok(FileId { path, ..id.clone() });
        }
        let meta = stat().map_err(|e| refuse(format!("{path} ({range}): fstat: {e}")))?;
        if meta.nlink() == 0 {
            return Err(refuse(format!(
                "{path} ({range}) was deleted: checkpoints of deleted mapped files are not \
                 supported yet"
            )));
        }
        if mapping == Mapping::Shared && !meta.file_type().is_file() {
            return Err(refuse(format!(
                "{mapping} {range} ({path}) is not of a regular file: checkpoints of shared \
                 mappings of devices are not supported yet"
            )));
        }
        let id = FileId {
            path,
            size: meta.size(),
            mtime_ns: mtime_ns(&meta),
        };
        ids.insert(file, id.clone());
        Ok(id)
    }

    /// The address space `image` and `allocator` (from [`export`](Self::export)) describe,
    /// over `mem`, a fresh guest memory of the same size whose pages above
    /// [`layout::RESERVED_END`] are (or will be) the checkpoint's, free pages reading zero.
    /// Guest memory is neither read nor written. File mappings reopen their files through
    /// `open` (once per [`FileId`]: one `Arc<File>` for a library's segments), which must
    /// resolve the guest path in the sandbox's root; with `files`, the sandbox's shared space,
    /// mappings that used the page cache use it again (when the space shares files and the
    /// file still qualifies; else their pages are copies, as they would be without sharing).
    /// A `MAP_SHARED` file mapping maps the reopened file's object from `files`
    /// ([`SharedSpace::file`], as mmap does: one object per inode, shared with the sandbox's
    /// other mappings of the file). `open` may open read-only: the object reopens the file
    /// read-write itself when the runtime may.
    ///
    /// The allocator counts against no budget: the caller sets the sandbox's with
    /// `allocator().set_budget(..)`, which charges the pages in use. Nothing awaits the
    /// PTE-sync stub (a new VM loads CR3 from [`cr3`](Self::cr3)), and no shared window is
    /// attached: they attach at the first fault in each.
    ///
    /// # Errors
    /// [`MmError::Checkpoint`] with the reason: a memory of another size (or too large for the
    /// direct map), allocator bytes refused by [`PageAllocator::import_bytes`], a page-table
    /// root that is not an allocated page, counters that do not balance with the allocator,
    /// a break or mmap base out of range, VMAs unsorted, overlapping, unaligned or outside the
    /// user half, bad rights or file offsets, a file `open` fails for, or a file that changed
    /// since the checkpoint (size or modification time); for a `MAP_SHARED` file mapping:
    /// no `files`, `PROT_WRITE` without `may_write`, a file whose object cannot be made
    /// ([`SharedSpace::file`]) or, with `may_write`, cannot be written here.
    pub fn import(
        mem: Arc<GuestMemory>,
        image: &MmImage,
        allocator: &[u8],
        open: &mut dyn FnMut(&FileId) -> Result<File, String>,
        files: Option<&Arc<SharedSpace>>,
        anon: &AnonObjects,
    ) -> Result<MemoryManager, MmError> {
        check_size(&mem, image)?;
        let alloc = import_allocator(&mem, allocator)?;
        let (table_pages, mapped) = held_by(image);
        if table_pages.checked_add(mapped) != Some(alloc.used_pages()) {
            return Err(refuse(format!(
                "{} page-table pages and {} mapped pages, but {} pages allocated",
                image.table_pages,
                image.mapped,
                alloc.used_pages()
            )));
        }
        Self::import_parts(
            mem,
            image,
            crate::family::Family::new(alloc),
            open,
            files,
            anon,
        )
    }

    /// The address space `image` describes over `mem`, its frames `family`'s (whose
    /// allocator the caller checked the image's books against): [`import`](Self::import)'s
    /// common part with [`import_family`](Self::import_family).
    fn import_parts(
        mem: Arc<GuestMemory>,
        image: &MmImage,
        family: crate::family::Family,
        open: &mut dyn FnMut(&FileId) -> Result<File, String>,
        files: Option<&Arc<SharedSpace>>,
        anon: &AnonObjects,
    ) -> Result<MemoryManager, MmError> {
        let root = Gpa(image.pt_root);
        if !mem.is_own(root) || family.lock().refcount(root).map_or(true, |rc| rc == 0) {
            return Err(refuse(format!(
                "page-table root {root} is not an allocated page of guest memory"
            )));
        }
        let (table_pages, mapped) = held_by(image);
        if table_pages == 0 {
            return Err(refuse("an address space without page tables".into()));
        }
        let (mmap_base, brk_base, brk) = check_scalars(image)?;
        let def_lock = VmLock::from_code(image.def_lock)
            .ok_or_else(|| refuse(format!("default lock {}", image.def_lock)))?;
        let vmas = check_vmas(&image.vmas, anon)?;
        let vmas = reopen(vmas, open, files)?;
        let pt = PageTables::from_parts(mem.clone(), root, table_pages, mapped);
        let mut mm = MemoryManager::from_parts(mem, family, pt);
        mm.vmas = vmas;
        mm.mmap_base = mmap_base;
        mm.brk_base = brk_base;
        mm.brk = brk;
        mm.faults = image.faults;
        mm.cache_maps = image.cache_maps;
        mm.cow_copies = image.cow_copies;
        mm.file_pages = check_file_pages(&image.file_pages)?;
        mm.def_lock = def_lock;
        Ok(mm)
    }

    /// Unmaps every page of a file mapping whose frame is in a window of a file object (not
    /// the VM's own memory: a shared window at or above [`platform::SHARED_GPA_BASE`]),
    /// present or PROT_NONE, keeping the VMAs; returns how many. Those are the page-cache
    /// pages of private file mappings and every page of `MAP_SHARED` mappings, of files and
    /// of anonymous shared memory (whose bytes the checkpoint saves apart). A checkpoint
    /// calls it before saving, so that no saved entry points into a window a new process
    /// would not have; the pages fault back from the file, here or after a restore.
    ///
    /// As munmap of those pages: the cleared entries await the PTE-sync stub
    /// ([`take_pte_sync`](Self::take_pte_sync)), and [`take_replaced`](Self::take_replaced)
    /// reports them, so that the thread that publishes them kicks the others, which may
    /// still hold the old translations (a sandbox left running after its checkpoint).
    /// Window pages are not the allocator's: nothing is freed.
    pub fn drop_file_window_pages(&mut self) -> usize {
        // Each range, and whether it maps a file (whose pages a restore maps again ahead).
        let ranges: Vec<(Gva, Gva, bool)> = self
            .vmas
            .iter()
            .filter_map(|v| match &v.kind {
                VmaKind::Anon => None,
                VmaKind::File { .. } => Some((v.start, v.end, true)),
                VmaKind::Shared { object, .. } => Some((v.start, v.end, object.is_file())),
            })
            .collect();
        let (mut dropped, mut n) = (Vec::new(), 0);
        for (start, end, file) in ranges {
            for (va, frame, _) in self.pt.frames_in(start, end) {
                if !self.mem.is_own(frame) && self.pt.unmap(va).is_some() {
                    n += 1;
                    if file {
                        dropped.push(va);
                    }
                }
            }
        }
        if n > 0 {
            self.replaced = true;
            // What the next restore maps ahead (a drop of nothing keeps the last set: nothing
            // was touched since).
            dropped.truncate(MAX_FILE_PAGES);
            self.file_pages = dropped;
        }
        n
    }

    /// Maps again the file-window pages that the checkpointed process had mapped (recorded
    /// by [`drop_file_window_pages`](Self::drop_file_window_pages) and saved with the
    /// image), as their first touches would: a restored process then takes no fault for each
    /// page of its program's text it runs again (a guest exit and a round trip each; a
    /// restore does this on the host, a few microseconds a page). Only pages of file
    /// mappings that are still there and not writable-private (those get copies, at their
    /// first touch); a page that cannot be mapped now (a file grown shorter) is left to its
    /// fault. Returns how many faults it served; the fault counter does not count them.
    pub fn prefault_file_pages(&mut self) -> usize {
        let pages = std::mem::take(&mut self.file_pages);
        let faults = self.faults;
        let mut served = 0;
        // One size per file for the batch: an fstat a page was most of a Go binary's restore.
        self.sizes_ahead = Some(std::collections::HashMap::new());
        for va in pages {
            if self.pt.entry(va).is_some() {
                // Mapped by the fault-around of a neighbour.
                continue;
            }
            let Some(vma) = self.vmas.find(va) else {
                continue;
            };
            let file = match &vma.kind {
                VmaKind::Anon => false,
                VmaKind::File { .. } => !vma.prot.contains(Prot::WRITE),
                VmaKind::Shared { object, .. } => object.is_file(),
            };
            if !file || !vma.prot.is_accessible() {
                continue;
            }
            let access = if vma.prot.contains(Prot::READ) {
                crate::fault::Access::READ
            } else {
                crate::fault::Access::EXEC
            };
            if self.handle_fault(va, access).is_ok() {
                served += 1;
            }
        }
        self.sizes_ahead = None;
        self.faults = faults;
        served
    }
}

/// Refuses an image of a memory of another size than `mem`, or one too large for the direct
/// map.
fn check_size(mem: &GuestMemory, image: &MmImage) -> Result<(), MmError> {
    if image.mem_size != mem.size() {
        return Err(refuse(format!(
            "image of {} bytes of guest memory, the memory has {}",
            image.mem_size,
            mem.size()
        )));
    }
    if mem.size() > layout::DIRECT_MAP_SIZE {
        return Err(refuse(format!(
            "guest memory of {} bytes is too large for the direct map",
            mem.size()
        )));
    }
    Ok(())
}

/// The page allocator saved as `bytes` for `mem` (its size checked against the image's by
/// the caller), growing the VM's memory as it allocates.
fn import_allocator(mem: &Arc<GuestMemory>, bytes: &[u8]) -> Result<PageAllocator, MmError> {
    let mut alloc =
        PageAllocator::import_bytes(mem.size(), bytes).map_err(|e| refuse(e.to_string()))?;
    if !alloc.set_grow(crate::manager::exposing(mem)) {
        return Err(refuse(
            "the VM refused the memory up to the last page allocated".into(),
        ));
    }
    Ok(alloc)
}

/// An image's page-table pages and mapped frames (`usize::MAX` where they do not fit).
fn held_by(image: &MmImage) -> (usize, usize) {
    (
        usize::try_from(image.table_pages).unwrap_or(usize::MAX),
        usize::try_from(image.mapped).unwrap_or(usize::MAX),
    )
}

/// The most file-window pages a checkpoint records for a restore to map ahead (256 MiB).
const MAX_FILE_PAGES: usize = 65536;

/// `pages` (ascending addresses) as runs `[first, count]`.
fn page_runs(pages: &[Gva]) -> Vec<[u64; 2]> {
    let mut runs: Vec<[u64; 2]> = Vec::new();
    for va in pages {
        match runs.last_mut() {
            Some([start, n]) if *start + *n * PAGE_SIZE == va.0 => *n += 1,
            _ => runs.push([va.0, 1]),
        }
    }
    runs
}

/// The pages of an image's `file_pages` runs, checked: page-aligned, in the user half, at
/// most [`MAX_FILE_PAGES`] in all.
fn check_file_pages(runs: &[[u64; 2]]) -> Result<Vec<Gva>, MmError> {
    let mut pages = Vec::new();
    for &[start, n] in runs {
        let end = n
            .checked_mul(PAGE_SIZE)
            .and_then(|len| start.checked_add(len));
        let fits = Gva(start).is_page_aligned()
            && end.is_some_and(|e| e <= layout::USER_END.0)
            && pages.len() as u64 + n <= MAX_FILE_PAGES as u64;
        if !fits {
            return Err(refuse(format!(
                "file pages at {:#x} ({n} pages) out of range",
                start
            )));
        }
        pages.extend((0..n).map(|i| Gva(start + i * PAGE_SIZE)));
    }
    Ok(pages)
}

/// The mmap base, break base and break of `image`, checked.
fn check_scalars(image: &MmImage) -> Result<(Gva, Option<Gva>, Gva), MmError> {
    let mmap_base = Gva(image.mmap_base);
    if !mmap_base.is_page_aligned() || mmap_base.0 > layout::USER_END.0 - STACK_RESERVE {
        return Err(refuse(format!("mmap base {mmap_base} out of range")));
    }
    let brk = Gva(image.brk);
    let brk_base = image.brk_base.map(Gva);
    let ok = match brk_base {
        None => brk.0 == 0,
        Some(base) => base <= brk && brk <= layout::USER_END,
    };
    if !ok {
        let base = brk_base.map_or_else(|| "none".to_string(), |b| b.to_string());
        return Err(refuse(format!(
            "break {brk} out of range (heap base: {base})"
        )));
    }
    Ok((mmap_base, brk_base, brk))
}

/// How a file is mapped (for messages and checks).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mapping {
    /// `MAP_PRIVATE`.
    Private,
    /// `MAP_SHARED`.
    Shared,
}

impl std::fmt::Display for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mapping::Private => "private file mapping",
            Mapping::Shared => "MAP_SHARED file mapping",
        })
    }
}

/// The file of a checked VMA, to reopen.
struct FileRef<'a> {
    id: &'a FileId,
    offset: u64,
    how: Reopen,
}

/// What a reopened file backs.
enum Reopen {
    /// A private mapping, with its clean pages from the page cache or not.
    Private { page_cache: bool },
    /// A `MAP_SHARED` mapping, which may be made writable or not.
    Shared { may_write: bool },
}

/// `images` checked (sorted, disjoint, page-aligned ranges of the user half; valid rights
/// and file offsets), as anonymous VMAs and, for file mappings, the file to reopen.
fn check_vmas<'a>(
    images: &'a [VmaImage],
    anon: &AnonObjects,
) -> Result<Vec<(Vma, Option<FileRef<'a>>)>, MmError> {
    let mut out = Vec::with_capacity(images.len());
    let mut prev_end = Gva(0);
    for v in images {
        let (start, end) = (Gva(v.start), Gva(v.end));
        let range = format!("VMA {start}-{end}");
        if !(start < end && start.is_page_aligned() && end.is_page_aligned())
            || end > layout::USER_END
        {
            return Err(refuse(format!(
                "{range} is not a page-aligned range of the user half"
            )));
        }
        if start < prev_end {
            return Err(refuse(format!(
                "{range} overlaps or precedes the VMA ending at {prev_end}"
            )));
        }
        prev_end = end;
        let prot = Prot::from_bits(u64::from(v.prot))
            .ok_or_else(|| refuse(format!("{range} has rights {:#x}", v.prot)))?;
        let lock = VmLock::from_code(v.lock)
            .ok_or_else(|| refuse(format!("{range} has lock {}", v.lock)))?;
        let advice = VmAdvice::from_bits(v.advice)
            .ok_or_else(|| refuse(format!("{range} has advice {:#x}", v.advice)))?;
        let (kind, file) = match &v.kind {
            VmaKindImage::Anon => (VmaKind::Anon, None),
            VmaKindImage::File {
                file,
                offset,
                page_cache,
            } => {
                check_offset(&range, *offset, end.0 - start.0)?;
                let file = FileRef {
                    id: file,
                    offset: *offset,
                    how: Reopen::Private {
                        page_cache: *page_cache,
                    },
                };
                (VmaKind::Anon, Some(file))
            }
            VmaKindImage::SharedFile {
                file,
                offset,
                may_write,
            } => {
                check_offset(&range, *offset, end.0 - start.0)?;
                if prot.contains(Prot::WRITE) && !may_write {
                    return Err(refuse(format!(
                        "{range} is writable, but its MAP_SHARED file may not be written"
                    )));
                }
                let file = FileRef {
                    id: file,
                    offset: *offset,
                    how: Reopen::Shared {
                        may_write: *may_write,
                    },
                };
                (VmaKind::Anon, Some(file))
            }
            VmaKindImage::SharedAnon {
                object,
                offset,
                may_write,
            } => {
                check_offset(&range, *offset, end.0 - start.0)?;
                let o = anon.objects().get(*object as usize).ok_or_else(|| {
                    refuse(format!(
                        "{range} maps shared object {object}, which is not saved"
                    ))
                })?;
                let size = o
                    .size()
                    .map_err(|e| refuse(format!("{range}: its shared object: {e}")))?;
                if offset + (end.0 - start.0) > size {
                    return Err(refuse(format!(
                        "{range} at offset {offset:#x} goes past the end of its shared object \
                         ({size} bytes)"
                    )));
                }
                if prot.contains(Prot::WRITE) && !may_write {
                    return Err(refuse(format!(
                        "{range} is writable, but its shared memory may not be written"
                    )));
                }
                let kind = VmaKind::Shared {
                    object: o.clone(),
                    offset: *offset,
                    may_write: *may_write,
                };
                (kind, None)
            }
        };
        let vma = Vma {
            start,
            end,
            prot,
            kind,
            name: v.name.clone(),
            lock,
            sealed: v.sealed,
            advice,
        };
        out.push((vma, file));
    }
    Ok(out)
}

/// Refuses a file offset that is unaligned or overflows with the VMA's length `len`.
fn check_offset(range: &str, offset: u64, len: u64) -> Result<(), MmError> {
    if !offset.is_multiple_of(PAGE_SIZE) || offset.checked_add(len).is_none() {
        return Err(refuse(format!("{range} has file offset {offset:#x}")));
    }
    Ok(())
}

/// The VMA set of checked `vmas`, their files reopened through `open` (once per file) and
/// checked against their [`FileId`], with the page cache of `files` where they had one, and
/// the objects of `files` for `MAP_SHARED` file mappings.
fn reopen(
    vmas: Vec<(Vma, Option<FileRef<'_>>)>,
    open: &mut dyn FnMut(&FileId) -> Result<File, String>,
    files: Option<&Arc<SharedSpace>>,
) -> Result<VmaSet, MmError> {
    let mut opened: HashMap<&FileId, Arc<File>> = HashMap::new();
    let mut caches: HashMap<&FileId, Option<Arc<SharedObject>>> = HashMap::new();
    let mut objects: HashMap<&FileId, Arc<SharedObject>> = HashMap::new();
    let mut set = VmaSet::new();
    for (mut vma, file) in vmas {
        if let Some(FileRef { id, offset, how }) = file {
            let range = format!("{}-{}", vma.start, vma.end);
            let f = match opened.get(id) {
                Some(f) => f.clone(),
                None => {
                    let f = open(id).map_err(|e| refuse(format!("{}: {e}", id.path)))?;
                    match id.matches(&f) {
                        Ok(true) => {}
                        Ok(false) => {
                            return Err(refuse(format!("{} changed since the checkpoint", id.path)))
                        }
                        Err(e) => return Err(refuse(format!("{}: fstat: {e}", id.path))),
                    }
                    let f = Arc::new(f);
                    opened.insert(id, f.clone());
                    f
                }
            };
            vma.kind = match how {
                Reopen::Private { page_cache } => {
                    let cache = if page_cache {
                        // As the mmap that made it: the file had a read-only object, so it
                        // qualifies (`exec`) unless sharing is off or the file is on a
                        // filesystem that is not shared here.
                        caches
                            .entry(id)
                            .or_insert_with(|| files.and_then(|s| s.private_file(&f, true)))
                            .clone()
                    } else {
                        None
                    };
                    VmaKind::File {
                        file: f,
                        offset,
                        cache,
                    }
                }
                Reopen::Shared { may_write } => {
                    let Some(space) = files else {
                        return Err(refuse(format!(
                            "MAP_SHARED file mapping {range} ({}): no shared space to map the \
                             file in",
                            id.path
                        )));
                    };
                    let object = match objects.get(id) {
                        Some(o) => o.clone(),
                        None => {
                            let o = space.file(&f).map_err(|e| {
                                refuse(format!("{} ({range}): its shared object: {e}", id.path))
                            })?;
                            objects.insert(id, o.clone());
                            o
                        }
                    };
                    if may_write && !object.is_writable() {
                        return Err(refuse(format!(
                            "{} ({range}) is mapped MAP_SHARED read-write, but this runtime \
                             cannot write it",
                            id.path
                        )));
                    }
                    VmaKind::Shared {
                        object,
                        offset,
                        may_write,
                    }
                }
            };
        }
        set.insert_unmerged(vma)
            .map_err(|e| refuse(e.to_string()))?;
    }
    Ok(set)
}

#[cfg(test)]
mod tests;
