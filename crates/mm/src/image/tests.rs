use std::path::PathBuf;

use super::*;
use crate::fault::{Access, FaultError};
use crate::manager::tests::{anon, mm, MIB};
use crate::manager::MmapRequest;
use crate::pagetable::PteFlags;

/// `MAP_SHARED` mappings, of files and of anonymous memory: saved, restored, refused.
mod shared;

/// A file of four pages, page i filled with byte i + 1, beside the test binary (not in
/// /tmp: a tmpfs's files are not shared through the page cache); removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str) -> TempFile {
        let exe = std::env::current_exe().unwrap();
        let path = exe
            .parent()
            .unwrap()
            .join(format!("mm-image-{name}-{}", std::process::id()));
        let data: Vec<u8> = (0..0x4000u32).map(|i| (i / 0x1000) as u8 + 1).collect();
        std::fs::write(&path, data).unwrap();
        TempFile(path)
    }

    fn open(&self) -> Arc<File> {
        Arc::new(File::open(&self.0).unwrap())
    }

    fn name(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A fixed private mapping of `file` named by its path.
#[allow(clippy::too_many_arguments)]
fn map_file(
    m: &mut MemoryManager,
    tf: &TempFile,
    file: Arc<File>,
    addr: u64,
    len: u64,
    offset: u64,
    prot: Prot,
    cache: Option<Arc<SharedObject>>,
) -> Gva {
    m.mmap(MmapRequest {
        addr: Gva(addr),
        len,
        prot,
        fixed: true,
        fixed_noreplace: false,
        kind: VmaKind::File {
            file,
            offset,
            cache,
        },
        name: Some(tf.name()),
    })
    .unwrap()
}

/// A fixed `MAP_SHARED` mapping of `object` (the object of `tf`), named by its path.
#[allow(clippy::too_many_arguments)]
fn map_shared(
    m: &mut MemoryManager,
    tf: &TempFile,
    object: Arc<SharedObject>,
    addr: u64,
    len: u64,
    offset: u64,
    prot: Prot,
    may_write: bool,
) -> Gva {
    m.mmap(MmapRequest {
        addr: Gva(addr),
        len,
        prot,
        fixed: true,
        fixed_noreplace: false,
        kind: VmaKind::Shared {
            object,
            offset,
            may_write,
        },
        name: Some(tf.name()),
    })
    .unwrap()
}

/// A fresh memory of `m`'s size holding `m`'s allocated pages, free pages left as holes:
/// what a restore's pager provides.
pub(super) fn restored_memory(m: &MemoryManager) -> Arc<GuestMemory> {
    let old = m.memory();
    let mem = Arc::new(GuestMemory::new(old.size()).unwrap());
    let mut page = vec![0u8; PAGE_SIZE as usize];
    for gpa in (layout::RESERVED_END.0..old.size()).step_by(PAGE_SIZE as usize) {
        if !m.allocator().is_free(Gpa(gpa)) {
            old.read(Gpa(gpa), &mut page).unwrap();
            mem.write(Gpa(gpa), &page).unwrap();
        }
    }
    mem
}

fn reopen_path(id: &FileId) -> Result<File, String> {
    File::open(&id.path).map_err(|e| e.to_string())
}

/// The VMAs as comparable values (files by device and inode).
fn vma_list(m: &MemoryManager) -> Vec<(Gva, Gva, Prot, Option<String>, String)> {
    m.vmas()
        .map(|v| {
            let kind = match &v.kind {
                VmaKind::Anon => "anon".to_string(),
                VmaKind::File {
                    file,
                    offset,
                    cache,
                } => {
                    let meta = file.metadata().unwrap();
                    format!(
                        "file {}:{} at {offset:#x}, cache {}",
                        meta.dev(),
                        meta.ino(),
                        cache.is_some()
                    )
                }
                VmaKind::Shared {
                    object,
                    offset,
                    may_write,
                } => {
                    let (dev, ino) = object.file_identity().unwrap_or((0, 0));
                    format!(
                        "shared {dev}:{ino} (file {}) at {offset:#x}, may write {may_write}",
                        object.is_file()
                    )
                }
            };
            (v.start, v.end, v.prot, v.name.clone(), kind)
        })
        .collect()
}

/// Anonymous memory (split by mprotect, a PROT_NONE page keeping its data, a freed dirty
/// page), a file's text, its data through a second descriptor (written: a private copy)
/// and an untouched page of it, a heap and a moved mmap base.
struct Populated {
    m: MemoryManager,
    tf: TempFile,
    anon: Gva,
    freed_frame: Gpa,
    untouched: Gva,
}

fn populated(name: &str) -> Populated {
    let tf = TempFile::new(name);
    let mut m = mm(16 * MIB);
    let a = m.mmap(anon(0x1000_0000, 0x8000, Prot::RW, true)).unwrap();
    for p in [0u64, 2, 3, 5] {
        m.copy_out(a.add(p * PAGE_SIZE), &[p as u8 + 0x10; 100])
            .unwrap();
    }
    m.mprotect(a.add(0x2000), 0x1000, Prot::READ).unwrap();
    m.mprotect(a.add(0x5000), 0x1000, Prot::NONE).unwrap();
    let text = map_file(
        &mut m,
        &tf,
        tf.open(),
        0x3000_0000,
        0x2000,
        0,
        Prot::READ | Prot::EXEC,
        None,
    );
    let data = map_file(
        &mut m,
        &tf,
        tf.open(),
        0x3000_2000,
        0x1000,
        0x2000,
        Prot::RW,
        None,
    );
    let untouched = map_file(
        &mut m,
        &tf,
        tf.open(),
        0x3100_0000,
        0x1000,
        0x3000,
        Prot::READ,
        None,
    );
    // Adjacent to the untouched page, the same rights and contiguous offsets, through
    // another descriptor: apart (a reopened file must not merge them).
    map_file(
        &mut m,
        &tf,
        tf.open(),
        0x30ff_f000,
        0x1000,
        0x2000,
        Prot::READ,
        None,
    );
    m.handle_fault(text, Access::EXEC).unwrap();
    m.copy_out(data.add(8), b"private").unwrap();
    m.set_brk_base(Gva(0x60_0123));
    assert_eq!(m.brk(Gva(0x60_5000)), Gva(0x60_5000));
    m.copy_out(Gva(0x60_1000), &[9; 0x100]).unwrap();
    m.set_mmap_base(Gva(0x7e00_0000_0000));
    // Last, so that no later allocation reuses the freed page.
    let junk = m.mmap(anon(0x2000_0000, 0x1000, Prot::RW, true)).unwrap();
    m.copy_out(junk, &[0xee; 4096]).unwrap();
    let freed_frame = m.page_tables().entry(junk).unwrap().0;
    m.munmap(junk, 0x1000).unwrap();
    assert!(m
        .allocator()
        .dirty_free_runs()
        .any(|(g, _)| g == freed_frame));
    Populated {
        m,
        tf,
        anon: a,
        freed_frame,
        untouched,
    }
}

#[test]
fn export_json_import_round_trip() {
    let Populated {
        mut m,
        tf: _tf,
        anon: a,
        freed_frame,
        untouched,
    } = populated("round-trip");
    let (image, bytes) = m.export(&mut AnonObjects::default()).unwrap();
    assert_eq!(image.vmas.len(), m.stats().vma_count);
    assert_eq!(
        image.vmas.len(),
        10,
        "anon split in 5, four file VMAs, heap"
    );
    let json = serde_json::to_string(&image).unwrap();
    let image2: MmImage = serde_json::from_str(&json).unwrap();
    assert_eq!(image2, image);

    let mut opened = Vec::new();
    let mut open = |id: &FileId| {
        opened.push(id.clone());
        reopen_path(id)
    };
    let mut r = MemoryManager::import(
        restored_memory(&m),
        &image2,
        &bytes,
        &mut open,
        None,
        &AnonObjects::default(),
    )
    .unwrap();
    assert_eq!(opened.len(), 1, "one open for the file's four VMAs");
    assert_eq!(r.stats(), m.stats());
    assert_eq!(r.cr3(), m.cr3());
    assert_eq!(r.current_brk(), m.current_brk());
    assert_eq!(r.mmap_base(), m.mmap_base());
    assert_eq!(vma_list(&r), vma_list(&m));
    let files: Vec<&Arc<File>> = r
        .vmas()
        .filter_map(|v| match &v.kind {
            VmaKind::File { file, .. } => Some(file),
            _ => None,
        })
        .collect();
    assert_eq!(files.len(), 4);
    assert!(files.iter().all(|f| Arc::ptr_eq(f, files[0])));
    assert_eq!(
        r.allocator().free_page_runs().collect::<Vec<_>>(),
        m.allocator().free_page_runs().collect::<Vec<_>>()
    );
    // Every mapped user page: the same frame, entry and bytes.
    let frames = m.page_tables().frames_in(Gva(0), layout::USER_END);
    assert_eq!(r.page_tables().frames_in(Gva(0), layout::USER_END), frames);
    assert!(frames.len() > 10, "{} pages mapped", frames.len());
    for (va, frame, flags) in &frames {
        let (mut x, mut y) = (vec![0u8; 4096], vec![0u8; 4096]);
        m.memory().read(*frame, &mut x).unwrap();
        r.memory().read(*frame, &mut y).unwrap();
        assert_eq!(x, y, "page {va}");
        if flags.contains(PteFlags::PRESENT) {
            assert_eq!(
                r.page_tables().translate(*va),
                m.page_tables().translate(*va)
            );
            r.copy_in(*va, &mut y).unwrap();
            assert_eq!(x, y, "page {va} through the page tables");
        }
    }
    assert!(!r.has_pte_sync() && !r.take_replaced());
    // Saving the restored space gives the same image.
    assert_eq!(
        r.export(&mut AnonObjects::default()).unwrap(),
        (image.clone(), bytes.clone())
    );

    // It runs on: PROT_NONE kept its bytes, a new page is zero (the freed one, whose old
    // bytes were left out), an untouched file page is read from the reopened file, the
    // heap grows.
    r.mprotect(a.add(0x5000), 0x1000, Prot::RW).unwrap();
    assert_eq!(r.read_val::<u8>(a.add(0x5000)).unwrap(), 0x15);
    let n = r.mmap(anon(0x2000_0000, 0x1000, Prot::RW, true)).unwrap();
    assert_eq!(r.read_val::<u64>(n).unwrap(), 0);
    assert_eq!(r.page_tables().entry(n).unwrap().0, freed_frame);
    r.write_val(n, &0x1234u64).unwrap();
    assert_eq!(r.read_val::<u64>(n).unwrap(), 0x1234);
    let top = r.mmap(anon(0, 0x3000, Prot::RW, false)).unwrap();
    assert_eq!(top, Gva(0x7e00_0000_0000 - 0x3000));
    r.write_val(top.add(0x2000), &5u8).unwrap();
    assert_eq!(r.read_val::<u8>(top.add(0x2000)).unwrap(), 5);
    assert_eq!(r.read_val::<u8>(untouched.add(5)).unwrap(), 4);
    assert_eq!(r.brk(Gva(0x60_8000)), Gva(0x60_8000));
    r.write_val(Gva(0x60_7000), &7u32).unwrap();
    assert_eq!(r.read_val::<u32>(Gva(0x60_1000)).unwrap(), 0x0909_0909);
    // The counter carried on: four faults (the page at 0x20000000, the new top mapping,
    // the file page, the heap).
    assert_eq!(r.stats().faults, m.stats().faults + 4);
    let s = r.stats();
    assert_eq!(
        s.total_pages - s.free_pages,
        s.page_table_pages + s.mapped_pages
    );
    // The original is untouched by all this.
    assert_eq!(
        m.read_val::<u8>(a.add(0x5000)).unwrap_err(),
        MmError::Fault(a.add(0x5000))
    );
}

/// Sets the host protection of `mem`'s pages above RESERVED_END.
fn protect(mem: &GuestMemory, prot: i32) {
    let len = (mem.size() - layout::RESERVED_END.0) as usize;
    // SAFETY: the range is the part of `mem`'s own mapping above RESERVED_END; changing its
    // protection affects no Rust object, and the test does not use this memory while it is
    // inaccessible.
    let rc = unsafe {
        libc::mprotect(
            mem.host_base().add(layout::RESERVED_END.0 as usize).cast(),
            len,
            prot,
        )
    };
    assert_eq!(rc, 0);
}

/// Guest memory is neither read nor written by an export (the memory may be deflated) or
/// an import (it is not restored yet): with the pages inaccessible to the host, any
/// access would kill the test.
#[test]
fn export_and_import_touch_no_guest_memory() {
    let p = populated("no-touch");
    protect(p.m.memory(), libc::PROT_NONE);
    let exported = p.m.export(&mut AnonObjects::default());
    protect(p.m.memory(), libc::PROT_READ | libc::PROT_WRITE);
    let (image, bytes) = exported.unwrap();
    let mem = Arc::new(GuestMemory::new(16 * MIB).unwrap());
    protect(&mem, libc::PROT_NONE);
    let r = MemoryManager::import(
        mem.clone(),
        &image,
        &bytes,
        &mut reopen_path,
        None,
        &AnonObjects::default(),
    );
    protect(&mem, libc::PROT_READ | libc::PROT_WRITE);
    let r = r.unwrap();
    assert_eq!(r.stats(), p.m.stats());
}

#[test]
fn page_cache_pages_are_dropped_for_export_and_come_back_after_import() {
    let tf = TempFile::new("cache");
    let space = SharedSpace::new();
    let mut m = mm(16 * MIB);
    m.memory().set_registrar(Box::new(|_, _| Ok(())));
    let file = tf.open();
    let cache = space.private_file(&file, true);
    assert!(cache.is_some());
    let t = map_file(
        &mut m,
        &tf,
        file,
        0x3000_0000,
        0x4000,
        0,
        Prot::READ | Prot::EXEC,
        cache,
    );
    m.handle_fault(t, Access::READ).unwrap();
    // Page 1 copied (made writable, written, read-only again): the VM's own frame. Page
    // 3 PROT_NONE, keeping its page-cache page.
    m.mprotect(t.add(0x1000), 0x1000, Prot::RW).unwrap();
    m.copy_out(t.add(0x1000), b"own").unwrap();
    m.mprotect(t.add(0x1000), 0x1000, Prot::READ | Prot::EXEC)
        .unwrap();
    m.mprotect(t.add(0x3000), 0x1000, Prot::NONE).unwrap();
    let in_windows = |m: &MemoryManager| {
        m.page_tables()
            .frames_in(t, t.add(0x4000))
            .iter()
            .filter(|(_, f, _)| !m.memory().is_own(*f))
            .count()
    };
    assert_eq!(in_windows(&m), 3);
    let err = m.export(&mut AnonObjects::default()).unwrap_err();
    assert!(err.to_string().contains("drop_file_window_pages"), "{err}");
    m.take_pte_sync();
    assert!(!m.take_replaced());
    let (mapped, free) = (m.stats().mapped_pages, m.stats().free_pages);

    assert_eq!(m.drop_file_window_pages(), 3);
    assert_eq!(in_windows(&m), 0);
    assert_eq!(m.stats().mapped_pages, mapped - 3);
    assert_eq!(
        m.stats().free_pages,
        free,
        "window pages are not the allocator's"
    );
    assert_eq!(m.stats().vma_count, 2);
    assert!(
        m.take_replaced(),
        "the other threads must drop the old entries"
    );
    assert_eq!(m.take_pte_sync().len(), 2, "entries 0 and 2-3");
    assert!(m
        .memory()
        .is_own(m.page_tables().entry(t.add(0x1000)).unwrap().0));
    assert_eq!(m.drop_file_window_pages(), 0);
    assert!(!m.take_replaced());
    // Left running: a touch maps the page cache again.
    assert_eq!(m.read_val::<u8>(t.add(0x2000)).unwrap(), 3);
    assert!(m
        .memory()
        .is_read_only(m.page_tables().translate(t).unwrap().0));
    assert_eq!(m.drop_file_window_pages(), 2);

    let (image, bytes) = m.export(&mut AnonObjects::default()).unwrap();
    assert_eq!(
        image.file_pages.iter().map(|[_, n]| n).sum::<u64>(),
        2,
        "the dropped pages are saved for the restore to map ahead: {:?}",
        image.file_pages
    );
    assert!(image.vmas.iter().all(|v| matches!(
        v.kind,
        VmaKindImage::File {
            page_cache: true,
            ..
        }
    )));
    // Restored where files are shared: page-cache pages again, the copy kept.
    let mem = restored_memory(&m);
    mem.set_registrar(Box::new(|_, _| Ok(())));
    let space2 = SharedSpace::new();
    let mut r = MemoryManager::import(
        mem,
        &image,
        &bytes,
        &mut reopen_path,
        Some(&space2),
        &AnonObjects::default(),
    )
    .unwrap();
    assert!(r
        .vmas()
        .all(|v| matches!(v.kind, VmaKind::File { cache: Some(_), .. })));
    // The pages the checkpoint dropped are mapped again ahead, from the page cache, and
    // counted as no fault of the process's.
    let [first, _] = image.file_pages[0];
    assert!(r.page_tables().entry(Gva(first)).is_none());
    let faults = r.stats().faults;
    assert!(r.prefault_file_pages() > 0);
    assert_eq!(r.stats().faults, faults);
    assert!(
        r.sizes_ahead.is_none(),
        "a fault after the batch reads the file's size again (a truncated file's page faults)"
    );
    let (frame, _) = r.page_tables().entry(Gva(first)).expect("mapped ahead");
    assert!(r.memory().is_read_only(frame), "a page-cache page");
    assert_eq!(r.prefault_file_pages(), 0, "once");
    assert_eq!(r.read_val::<u8>(t.add(0x2000)).unwrap(), 3);
    assert!(r
        .memory()
        .is_read_only(r.page_tables().translate(t.add(0x2000)).unwrap().0));
    let mut own = [0u8; 3];
    r.copy_in(t.add(0x1000), &mut own).unwrap();
    assert_eq!(&own, b"own");
    // Restored without sharing: the pages are copies.
    let mut r = MemoryManager::import(
        restored_memory(&m),
        &image,
        &bytes,
        &mut reopen_path,
        None,
        &AnonObjects::default(),
    )
    .unwrap();
    assert!(r
        .vmas()
        .all(|v| matches!(v.kind, VmaKind::File { cache: None, .. })));
    assert_eq!(r.read_val::<u8>(t.add(0x2000)).unwrap(), 3);
    assert!(r
        .memory()
        .is_own(r.page_tables().translate(t.add(0x2000)).unwrap().0));
}

#[test]
fn changed_or_missing_files_are_refused_at_import() {
    let p = populated("changed");
    let (image, bytes) = p.m.export(&mut AnonObjects::default()).unwrap();
    let import = |open: &mut dyn FnMut(&FileId) -> Result<File, String>| {
        MemoryManager::import(
            restored_memory(&p.m),
            &image,
            &bytes,
            open,
            None,
            &AnonObjects::default(),
        )
    };
    assert!(import(&mut reopen_path).is_ok());
    let err = refused(import(&mut |_| Err("no such file".into())));
    assert!(err.to_string().contains("no such file"), "{err}");
    // The same size, another modification time.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&p.tf.0)
        .unwrap();
    let mtime = f.metadata().unwrap().modified().unwrap();
    f.set_modified(mtime + std::time::Duration::from_secs(1))
        .unwrap();
    let err = refused(import(&mut reopen_path));
    assert!(
        err.to_string()
            .contains(&format!("{} changed since the checkpoint", p.tf.name())),
        "{err}"
    );
    f.set_modified(mtime).unwrap();
    assert!(import(&mut reopen_path).is_ok());
    // Another size, the same modification time.
    f.set_len(0x5000).unwrap();
    f.set_modified(mtime).unwrap();
    let err = refused(import(&mut reopen_path));
    assert!(
        err.to_string().contains("changed since the checkpoint"),
        "{err}"
    );
}

#[test]
fn corrupt_images_are_refused() {
    let p = populated("corrupt");
    let (good, bytes) = p.m.export(&mut AnonObjects::default()).unwrap();
    let import = |image: &MmImage, bytes: &[u8]| {
        MemoryManager::import(
            Arc::new(GuestMemory::new(16 * MIB).unwrap()),
            image,
            bytes,
            &mut reopen_path,
            None,
            &AnonObjects::default(),
        )
    };
    assert!(import(&good, &bytes).is_ok());
    let cases: Vec<(&str, Edit)> = vec![
        (
            "overlapping VMAs",
            Box::new(|i| i.vmas[1].start = i.vmas[0].end - PAGE_SIZE),
        ),
        ("unsorted VMAs", Box::new(|i| i.vmas.swap(0, 1))),
        ("empty VMA", Box::new(|i| i.vmas[0].end = i.vmas[0].start)),
        ("unaligned VMA", Box::new(|i| i.vmas[0].start += 8)),
        (
            "VMA past the user half",
            Box::new(|i| {
                let last = i.vmas.len() - 1;
                i.vmas[last].end = layout::USER_END.0 + PAGE_SIZE;
            }),
        ),
        ("bad rights", Box::new(|i| i.vmas[0].prot = 8)),
        ("unaligned file offset", Box::new(|i| set_offset(i, 0x800))),
        (
            "overflowing file offset",
            Box::new(|i| set_offset(i, !0xfff)),
        ),
        ("root unaligned", Box::new(|i| i.pt_root += 8)),
        ("root outside memory", Box::new(|i| i.pt_root = 16 * MIB)),
        (
            "root in the reserved region",
            Box::new(|i| i.pt_root = 0x1000),
        ),
        ("root on a free page", Box::new(|i| i.pt_root = 15 * MIB)),
        ("memory size", Box::new(|i| i.mem_size = 32 * MIB)),
        ("table pages", Box::new(|i| i.table_pages += 1)),
        ("mapped pages", Box::new(|i| i.mapped -= 1)),
        (
            "no table pages",
            Box::new(|i| {
                i.mapped += i.table_pages;
                i.table_pages = 0;
            }),
        ),
        ("huge counters", Box::new(|i| i.table_pages = u64::MAX)),
        (
            "break below its base",
            Box::new(|i| i.brk = i.brk_base.unwrap() - 1),
        ),
        (
            "break past the user half",
            Box::new(|i| i.brk = layout::USER_END.0 + 1),
        ),
        ("break without a base", Box::new(|i| i.brk_base = None)),
        ("unaligned mmap base", Box::new(|i| i.mmap_base += 1)),
        (
            "mmap base in the stack reserve",
            Box::new(|i| i.mmap_base = layout::USER_END.0),
        ),
        (
            "file pages past the user half",
            Box::new(|i| i.file_pages = vec![[layout::USER_END.0 - 4096, 2]]),
        ),
        (
            "unaligned file pages",
            Box::new(|i| i.file_pages = vec![[0x40_0001, 1]]),
        ),
        (
            "too many file pages",
            Box::new(|i| i.file_pages = vec![[0x40_0000, u64::MAX / 4096]]),
        ),
    ];
    for (what, edit) in cases {
        let mut image = good.clone();
        edit(&mut image);
        match import(&image, &bytes) {
            Err(MmError::Checkpoint(why)) => eprintln!("{what}: {why}"),
            Err(e) => panic!("{what}: {e}"),
            Ok(_) => panic!("{what} was accepted"),
        }
    }
    // Allocator bytes truncated, extended, corrupted, or another process's.
    let mut longer = bytes.clone();
    longer.push(0);
    let mut flipped = bytes.clone();
    flipped[40] ^= 1;
    let other = mm(16 * MIB).export(&mut AnonObjects::default()).unwrap().1;
    for (what, b) in [
        ("truncated", &bytes[..bytes.len() - 1]),
        ("empty", &[][..]),
        ("extended", &longer[..]),
        ("corrupted", &flipped[..]),
        ("another address space's", &other[..]),
    ] {
        assert!(
            matches!(import(&good, b), Err(MmError::Checkpoint(_))),
            "{what} allocator bytes accepted"
        );
    }
}

/// A change made to a good image.
type Edit = Box<dyn Fn(&mut MmImage)>;

/// The error of a refused import.
fn refused(r: Result<MemoryManager, MmError>) -> MmError {
    match r {
        Ok(_) => panic!("accepted"),
        Err(e) => e,
    }
}

fn set_offset(image: &mut MmImage, to: u64) {
    let v = image
        .vmas
        .iter_mut()
        .find(|v| matches!(v.kind, VmaKindImage::File { .. }))
        .unwrap();
    if let VmaKindImage::File { offset, .. } = &mut v.kind {
        *offset = to;
    }
}

#[test]
fn unknown_fields_are_refused() {
    let p = populated("fields");
    let (image, _) = p.m.export(&mut AnonObjects::default()).unwrap();
    let json = serde_json::to_value(&image).unwrap();
    let mut top = json.clone();
    top["extra"] = 1.into();
    let mut vma = json.clone();
    vma["vmas"][0]["extra"] = 1.into();
    let mut file = json.clone();
    let i = image
        .vmas
        .iter()
        .position(|v| matches!(v.kind, VmaKindImage::File { .. }))
        .unwrap();
    file["vmas"][i]["kind"]["File"]["extra"] = 1.into();
    let mut id = json.clone();
    id["vmas"][i]["kind"]["File"]["file"]["extra"] = 1.into();
    assert!(serde_json::from_value::<MmImage>(json).is_ok());
    for bad in [top, vma, file, id] {
        assert!(serde_json::from_value::<MmImage>(bad).is_err());
    }
}

#[test]
fn locks_survive_a_round_trip_and_old_images_have_none() {
    let mut p = populated("locks");
    let a = p.anon;
    p.m.set_lock(a, a.add(0x2000), crate::VmLock::Locked)
        .unwrap();
    p.m.lock_all(None, crate::VmLock::OnFault);
    let (image, bytes) = p.m.export(&mut AnonObjects::default()).unwrap();
    let json = serde_json::to_value(&image).unwrap();
    // Unlocked VMAs and an unlocked address space write no field: an image without locks is
    // what format 1.6 wrote, and one of format 1.6 reads as unlocked.
    let unlocked = image.vmas.iter().filter(|v| v.lock == 0).count();
    let without = json["vmas"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v.get("lock").is_none())
        .count();
    assert_eq!(unlocked, without);
    assert!(unlocked < image.vmas.len());
    assert_eq!(json["def_lock"], 2);
    let r = MemoryManager::import(
        restored_memory(&p.m),
        &serde_json::from_value(json.clone()).unwrap(),
        &bytes,
        &mut reopen_path,
        None,
        &AnonObjects::default(),
    )
    .unwrap();
    assert_eq!(r.locked_bytes(), 0x2000);
    assert_eq!(r.default_lock(), crate::VmLock::OnFault);
    let mut old = json.clone();
    old.as_object_mut().unwrap().remove("def_lock");
    for v in old["vmas"].as_array_mut().unwrap() {
        v.as_object_mut().unwrap().remove("lock");
    }
    let r = MemoryManager::import(
        restored_memory(&p.m),
        &serde_json::from_value(old).unwrap(),
        &bytes,
        &mut reopen_path,
        None,
        &AnonObjects::default(),
    )
    .unwrap();
    assert_eq!(r.locked_bytes(), 0);
    assert_eq!(r.default_lock(), crate::VmLock::None);
    let mut bad = json;
    bad["vmas"][0]["lock"] = 3.into();
    let e = refused(MemoryManager::import(
        restored_memory(&p.m),
        &serde_json::from_value(bad).unwrap(),
        &bytes,
        &mut reopen_path,
        None,
        &AnonObjects::default(),
    ));
    assert!(e.to_string().contains("lock 3"), "{e}");
}

#[test]
fn madvise_marks_survive_a_round_trip_and_old_images_have_none() {
    let mut p = populated("advice");
    let a = p.anon;
    p.m.madvise(a, 0x1000, libc::MADV_WIPEONFORK).unwrap();
    p.m.madvise(a, 0x2000, libc::MADV_DONTDUMP).unwrap();
    let (image, bytes) = p.m.export(&mut AnonObjects::default()).unwrap();
    let json = serde_json::to_value(&image).unwrap();
    // Unmarked VMAs write no field: what format 1.7 wrote.
    let marked = image.vmas.iter().filter(|v| v.advice != 0).count();
    let with = json["vmas"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v.get("advice").is_some())
        .count();
    assert_eq!((marked, with), (2, 2));
    let import = |json: serde_json::Value| {
        MemoryManager::import(
            restored_memory(&p.m),
            &serde_json::from_value(json).unwrap(),
            &bytes,
            &mut reopen_path,
            None,
            &AnonObjects::default(),
        )
    };
    let r = import(json.clone()).unwrap();
    let first = r.find_vma(a).unwrap().advice;
    assert!(first.contains(crate::VmAdvice::WIPE_ON_FORK | crate::VmAdvice::DONT_DUMP));
    assert_eq!(
        r.find_vma(a.add(0x1000)).unwrap().advice,
        crate::VmAdvice::DONT_DUMP
    );
    let mut old = json.clone();
    for v in old["vmas"].as_array_mut().unwrap() {
        v.as_object_mut().unwrap().remove("advice");
    }
    let r = import(old).unwrap();
    assert!(r.vmas().all(|v| v.advice == crate::VmAdvice::NONE));
    let mut bad = json;
    bad["vmas"][0]["advice"] = 8.into();
    let e = refused(import(bad));
    assert!(e.to_string().contains("advice 0x8"), "{e}");
}
