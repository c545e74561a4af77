use super::*;
use crate::fault::Access;

pub(crate) const MIB: u64 = 1 << 20;

pub(crate) fn mm(size: u64) -> MemoryManager {
    MemoryManager::new(Arc::new(GuestMemory::new(size).unwrap())).unwrap()
}

pub(crate) fn anon(addr: u64, len: u64, prot: Prot, fixed: bool) -> MmapRequest {
    MmapRequest {
        addr: Gva(addr),
        len,
        prot,
        fixed,
        fixed_noreplace: false,
        kind: VmaKind::Anon,
        name: None,
    }
}

#[test]
fn fork_copies_pages_privately() {
    let mut m = mm(16 * MIB);
    let a = m.mmap(anon(0, 0x3000, Prot::RW, false)).unwrap();
    m.copy_out(Gva(a.0 + 0x1000), b"parent data").unwrap();
    m.set_brk_base(Gva(0x40_0000));
    let mut c = m
        .fork_into(Arc::new(GuestMemory::new(16 * MIB).unwrap()))
        .unwrap();
    assert_eq!(c.stats().mapped_pages, m.stats().mapped_pages);
    assert_eq!(c.vmas().count(), m.vmas().count());
    assert_eq!(c.current_brk(), m.current_brk());
    let mut b = [0u8; 11];
    c.copy_in(Gva(a.0 + 0x1000), &mut b).unwrap();
    assert_eq!(&b, b"parent data");
    // Writes after the fork stay on their side.
    c.copy_out(Gva(a.0 + 0x1000), b"child  data").unwrap();
    m.copy_in(Gva(a.0 + 0x1000), &mut b).unwrap();
    assert_eq!(&b, b"parent data");
    // Untouched pages are still demand-zero in the child.
    c.copy_in(Gva(a.0 + 0x2000), &mut b).unwrap();
    assert_eq!(b, [0u8; 11]);
    assert!(!c.has_pte_sync());
}

#[test]
fn new_builds_tables() {
    let m = mm(16 * MIB);
    let s = m.stats();
    assert_eq!(s.page_table_pages, 4);
    assert_eq!(s.total_pages, 3072);
    assert_eq!(s.free_pages, 3072 - 4);
    assert_eq!(s.vma_count, 0);
    assert_eq!(m.cr3(), layout::RESERVED_END);
}

#[test]
fn mmap_picks_top_down_and_honours_hints() {
    let mut m = mm(16 * MIB);
    let a = m.mmap(anon(0, 0x3000, Prot::RW, false)).unwrap();
    assert_eq!(a, Gva(DEFAULT_MMAP_BASE.0 - 0x3000));
    let b = m.mmap(anon(0, 1, Prot::READ, false)).unwrap();
    assert_eq!(b, Gva(a.0 - 0x1000));
    // A free hint is used (rounded up to a page)...
    let c = m.mmap(anon(0x1000_0001, 0x2000, Prot::RW, false)).unwrap();
    assert_eq!(c, Gva(0x1000_1000));
    // ...a taken one is not.
    let d = m.mmap(anon(0x1000_1000, 0x1000, Prot::RW, false)).unwrap();
    assert_eq!(d, Gva(b.0 - 0x1000));
    // Hints below mmap_min_addr are ignored.
    let e = m.mmap(anon(0x1000, 0x1000, Prot::RW, false)).unwrap();
    assert_eq!(e, Gva(d.0 - 0x1000));
    assert_eq!(m.stats().vma_count, 4); // a, b, c, and d merged with e
}

#[test]
fn mmap_errors() {
    let mut m = mm(16 * MIB);
    assert_eq!(
        m.mmap(anon(0, 0, Prot::RW, false)).unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(
        m.mmap(anon(0, u64::MAX, Prot::RW, false))
            .unwrap_err()
            .errno(),
        libc::ENOMEM
    );
    assert_eq!(
        m.mmap(anon(0x10001, 0x1000, Prot::RW, true))
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    assert_eq!(
        m.mmap(anon(0x1000, 0x1000, Prot::RW, true))
            .unwrap_err()
            .errno(),
        libc::EPERM
    );
    let top = layout::USER_END.0 - 0x1000;
    assert_eq!(
        m.mmap(anon(top, 0x2000, Prot::RW, true))
            .unwrap_err()
            .errno(),
        libc::ENOMEM
    );
    assert_eq!(m.mmap(anon(top, 0x1000, Prot::RW, true)).unwrap(), Gva(top));
    let mut f = anon(0, 0x1000, Prot::READ, false);
    let file = Arc::new(std::fs::File::open("/dev/null").unwrap());
    f.kind = VmaKind::File {
        file: file.clone(),
        offset: 0x800,
        cache: None,
    };
    assert_eq!(m.mmap(f.clone()).unwrap_err().errno(), libc::EINVAL);
    f.kind = VmaKind::File {
        file,
        offset: !0xfff,
        cache: None,
    };
    assert_eq!(m.mmap(f).unwrap_err().errno(), libc::EOVERFLOW);
    assert_eq!(m.stats().vma_count, 1);
}

#[test]
fn mmap_fixed_replaces_and_noreplace_refuses() {
    let mut m = mm(16 * MIB);
    let a = m.mmap(anon(0x40_0000, 0x4000, Prot::RW, true)).unwrap();
    m.copy_out(a, &[7u8; 0x4000]).unwrap();
    let used = m.stats().free_pages;
    let mut req = anon(0x40_1000, 0x1000, Prot::READ, false);
    req.fixed_noreplace = true;
    assert_eq!(
        m.mmap(req.clone()).unwrap_err(),
        MmError::Exists(Gva(0x40_1000))
    );
    req.addr = Gva(0x40_4000);
    assert_eq!(m.mmap(req).unwrap(), Gva(0x40_4000));
    // MAP_FIXED over the middle page: its old frame goes back, contents are fresh zero.
    m.mmap(anon(0x40_1000, 0x1000, Prot::RW, true)).unwrap();
    assert_eq!(m.stats().free_pages, used + 1);
    let mut buf = [1u8; 3];
    m.copy_in(Gva(0x40_0fff), &mut buf).unwrap();
    assert_eq!(buf, [7, 0, 0]);
    assert_eq!(m.stats().vma_count, 2); // [0x400000,0x404000) rw merged back, then r--
}

#[test]
fn munmap_frees_frames() {
    let mut m = mm(16 * MIB);
    let free0 = m.stats().free_pages;
    let a = m.mmap(anon(0, 0x10000, Prot::RW, false)).unwrap();
    m.copy_out(a, &vec![1u8; 0x10000]).unwrap();
    assert_eq!(m.stats().mapped_pages, 16);
    let tables = m.stats().page_table_pages;
    assert_eq!(m.stats().free_pages, free0 - 16 - (tables - 4));
    m.munmap(a.add(0x4000), 0x4000).unwrap();
    assert_eq!(m.stats().mapped_pages, 12);
    assert_eq!(m.stats().vma_count, 2);
    assert_eq!(
        m.copy_in(a.add(0x4000), &mut [0u8; 1]).unwrap_err(),
        MmError::Fault(a.add(0x4000))
    );
    m.munmap(a, 0x10000).unwrap();
    assert_eq!(m.stats().mapped_pages, 0);
    assert_eq!(m.stats().vma_count, 0);
    assert_eq!(m.stats().free_pages, free0 - (tables - 4));
    // Unmapping nothing is fine; bad arguments are not.
    m.munmap(a, 0x1000).unwrap();
    assert_eq!(
        m.munmap(a.add(1), 0x1000).unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(m.munmap(a, 0).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(m.munmap(a, u64::MAX).unwrap_err().errno(), libc::EINVAL);
}

#[test]
fn mprotect_updates_vmas_and_ptes() {
    let mut m = mm(16 * MIB);
    let a = m.mmap(anon(0, 0x3000, Prot::RW, false)).unwrap();
    m.copy_out(a, &[5u8; 0x3000]).unwrap();
    m.take_pte_sync();
    m.mprotect(a.add(0x1000), 0x1000, Prot::READ).unwrap();
    assert_eq!(m.stats().vma_count, 3);
    let (_, f) = m.page_tables().translate(a.add(0x1000)).unwrap();
    assert!(!f.contains(PteFlags::WRITABLE) && f.contains(PteFlags::USER));
    assert_eq!(m.take_pte_sync().len(), 1);
    assert_eq!(
        m.copy_out(a.add(0x1000), &[1]).unwrap_err(),
        MmError::Fault(a.add(0x1000))
    );
    // PROT_NONE keeps the data; back to RW, it is still there.
    m.mprotect(a, 0x3000, Prot::NONE).unwrap();
    assert_eq!(m.stats().vma_count, 1);
    assert!(m.page_tables().translate(a).is_none());
    assert_eq!(
        m.handle_fault(a, Access::READ),
        Err(crate::FaultError::AccessDenied)
    );
    m.mprotect(a, 0x3000, Prot::RW).unwrap();
    let mut b = [0u8; 2];
    m.copy_in(a.add(0x1fff), &mut b).unwrap();
    assert_eq!(b, [5, 5]);
    // Holes.
    assert_eq!(
        m.mprotect(a, 0x4000, Prot::READ).unwrap_err().errno(),
        libc::ENOMEM
    );
    assert_eq!(m.find_vma(a).unwrap().prot, Prot::RW);
    assert_eq!(
        m.mprotect(a.add(1), 0x1000, Prot::READ)
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    assert_eq!(
        m.mprotect(a, u64::MAX, Prot::READ).unwrap_err().errno(),
        libc::ENOMEM
    );
    m.mprotect(a, 0, Prot::READ).unwrap();
}

#[test]
fn brk_grows_and_shrinks() {
    let mut m = mm(16 * MIB);
    assert_eq!(m.brk(Gva(0x60_0000)), Gva(0)); // no base yet
    let base = Gva(0x60_0123);
    m.set_brk_base(base);
    assert_eq!(m.brk(Gva(0)), base);
    assert_eq!(m.brk(Gva(0x50_0000)), base);
    assert_eq!(m.brk(Gva(0x60_5000)), Gva(0x60_5000));
    let heap = m.find_vma(Gva(0x60_1000)).unwrap();
    assert_eq!((heap.start, heap.end), (Gva(0x60_1000), Gva(0x60_5000)));
    assert_eq!(heap.name.as_deref(), Some("[heap]"));
    m.copy_out(Gva(0x60_1000), &[9u8; 0x4000]).unwrap();
    let free = m.stats().free_pages;
    assert_eq!(m.brk(Gva(0x60_2800)), Gva(0x60_2800));
    assert_eq!(m.stats().free_pages, free + 2);
    assert_eq!(m.find_vma(Gva(0x60_2000)).unwrap().end, Gva(0x60_3000));
    assert!(m.find_vma(Gva(0x60_3000)).is_none());
    // Growing again reads zeros where the freed page was.
    assert_eq!(m.brk(Gva(0x60_4000)), Gva(0x60_4000));
    assert_eq!(m.stats().vma_count, 1);
    assert_eq!(m.read_val::<u64>(Gva(0x60_3000)).unwrap(), 0);
    // Blocked by a mapping (with a guard page).
    m.mmap(anon(0x60_6000, 0x1000, Prot::RW, true)).unwrap();
    assert_eq!(m.brk(Gva(0x60_5800)), Gva(0x60_4000));
    assert_eq!(m.brk(Gva(0x60_5000)), Gva(0x60_5000));
    assert_eq!(m.brk(Gva(u64::MAX)), Gva(0x60_5000));
    // Back to the base: the heap is gone.
    assert_eq!(m.brk(base), base);
    assert!(m.find_vma(Gva(0x60_1000)).is_none());
}

#[test]
fn mremap_shrink_grow_move() {
    let mut m = mm(16 * MIB);
    let a = m.mmap(anon(0x100_0000, 0x2000, Prot::RW, true)).unwrap();
    m.copy_out(a, b"hello").unwrap();
    m.copy_out(a.add(0x1000), b"world").unwrap();
    // Grow in place.
    assert_eq!(m.mremap(a, 0x2000, 0x4000, 0, Gva(0)).unwrap(), a);
    assert_eq!(m.find_vma(a).unwrap().end, a.add(0x4000));
    // Shrink in place frees the tail.
    m.copy_out(a.add(0x3000), b"x").unwrap();
    let mapped = m.stats().mapped_pages;
    assert_eq!(m.mremap(a, 0x4000, 0x2000, 0, Gva(0)).unwrap(), a);
    assert_eq!(m.stats().mapped_pages, mapped - 2);
    // Blocked: ENOMEM without MAYMOVE, moved with it, same frames.
    m.mmap(anon(0x100_2000, 0x1000, Prot::READ, true)).unwrap();
    assert_eq!(
        m.mremap(a, 0x2000, 0x3000, 0, Gva(0)).unwrap_err().errno(),
        libc::ENOMEM
    );
    let frame0 = m.page_tables().entry(a).unwrap().0;
    let free = m.stats().free_pages;
    let b = m.mremap(a, 0x2000, 0x3000, MREMAP_MAYMOVE, Gva(0)).unwrap();
    assert_ne!(b, a);
    assert_eq!(m.page_tables().entry(b).unwrap().0, frame0);
    assert!(m.find_vma(a).is_none());
    assert_eq!(m.find_vma(b).unwrap().end, b.add(0x3000));
    let mut buf = [0u8; 5];
    m.copy_in(b.add(0x1000), &mut buf).unwrap();
    assert_eq!(&buf, b"world");
    assert!(
        m.stats().free_pages + 3 >= free,
        "no copies: at most new tables"
    );
    // Fixed move.
    let c = Gva(0x200_0000);
    assert_eq!(
        m.mremap(b, 0x3000, 0x1000, MREMAP_MAYMOVE | MREMAP_FIXED, c)
            .unwrap(),
        c
    );
    m.copy_in(c, &mut buf).unwrap();
    assert_eq!(&buf, b"hello");
    assert!(m.find_vma(b).is_none());
    // Errors.
    assert_eq!(
        m.mremap(c, 0x1000, 0x2000, MREMAP_FIXED, Gva(0x300_0000))
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    assert_eq!(
        m.mremap(c, 0x1000, 0x2000, 0x80, Gva(0))
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    assert_eq!(
        m.mremap(c, 0x1000, 0, 0, Gva(0)).unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(
        m.mremap(c, 0x2000, 0x3000, 0, Gva(0)).unwrap_err().errno(),
        libc::EFAULT
    );
    assert_eq!(
        m.mremap(Gva(0x900_0000), 0x1000, 0x2000, 0, Gva(0))
            .unwrap_err()
            .errno(),
        libc::EFAULT
    );
    assert_eq!(
        m.mremap(
            c,
            0x1000,
            0x2000,
            MREMAP_MAYMOVE | MREMAP_FIXED,
            Gva(c.0 - 0x1000)
        )
        .unwrap_err()
        .errno(),
        libc::EINVAL
    );
}

#[test]
fn mremap_file_mapping_keeps_offsets() {
    let path = std::env::temp_dir().join(format!("mm-mremap-{}", std::process::id()));
    let data: Vec<u8> = (0..0x4000u32).map(|i| (i / 0x1000) as u8 + 1).collect();
    std::fs::write(&path, &data).unwrap();
    let file = Arc::new(std::fs::File::open(&path).unwrap());
    let mut m = mm(16 * MIB);
    let req = MmapRequest {
        addr: Gva(0),
        len: 0x1000,
        prot: Prot::READ,
        fixed: false,
        fixed_noreplace: false,
        kind: VmaKind::File {
            file,
            offset: 0x1000,
            cache: None,
        },
        name: None,
    };
    let a = m.mmap(req.clone()).unwrap();
    m.mmap(MmapRequest {
        addr: a.add(0x1000),
        fixed: true,
        ..anon(0, 0x1000, Prot::READ, true)
    })
    .unwrap();
    let b = m.mremap(a, 0x1000, 0x2000, MREMAP_MAYMOVE, Gva(0)).unwrap();
    assert_eq!(m.read_val::<u8>(b).unwrap(), 2);
    assert_eq!(m.read_val::<u8>(b.add(0x1000)).unwrap(), 3);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn madvise_dontneed_zeroes() {
    let mut m = mm(16 * MIB);
    let a = m.mmap(anon(0, 0x2000, Prot::RW, false)).unwrap();
    m.copy_out(a, &[3u8; 0x2000]).unwrap();
    let free = m.stats().free_pages;
    m.madvise(a, 0x1000, libc::MADV_DONTNEED).unwrap();
    assert_eq!(m.stats().free_pages, free + 1);
    assert_eq!(m.read_val::<u32>(a).unwrap(), 0);
    assert_eq!(m.read_val::<u8>(a.add(0x1000)).unwrap(), 3);
    m.madvise(a, 0x2000, libc::MADV_WILLNEED).unwrap();
    assert_eq!(m.madvise(a, 0x2000, 7).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(m.madvise(a, 0x2000, 999).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(
        m.madvise(a.add(1), 0x1000, libc::MADV_FREE)
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    assert_eq!(
        m.madvise(a, 0x3000, libc::MADV_FREE).unwrap_err().errno(),
        libc::ENOMEM
    );
    assert_eq!(m.read_val::<u8>(a.add(0x1000)).unwrap(), 0);
    m.madvise(a, 0, libc::MADV_DONTNEED).unwrap();
}

#[test]
fn whole_address_space_operations_are_cheap_and_safe() {
    let mut m = mm(16 * MIB);
    let a = m.mmap(anon(0, 0x3000, Prot::RW, false)).unwrap();
    m.copy_out(a, &[1u8; 0x3000]).unwrap();
    let all = layout::USER_END.0 - MMAP_MIN_ADDR.0;
    assert_eq!(
        m.mprotect(MMAP_MIN_ADDR, all, Prot::READ)
            .unwrap_err()
            .errno(),
        libc::ENOMEM
    );
    assert_eq!(
        m.madvise(MMAP_MIN_ADDR, all, libc::MADV_DONTNEED)
            .unwrap_err()
            .errno(),
        libc::ENOMEM
    );
    assert_eq!(m.stats().mapped_pages, 0);
    m.munmap(Gva(0), layout::USER_END.0).unwrap();
    assert_eq!(m.stats().vma_count, 0);
    assert_eq!(
        m.munmap(Gva(0), layout::USER_END.0 + 1)
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
}

/// Random operations (a fixed-seed generator) never panic, and every allocated page is
/// either a page table or a mapped user page.
#[test]
fn random_operations_keep_the_books_balanced() {
    let mut m = mm(16 * MIB);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let region = 0x1000_0000u64;
    m.set_brk_base(Gva(region + 40 * PAGE_SIZE + 0x10));
    let (mut max_mapped, mut max_vmas) = (0, 0);
    for _ in 0..3000 {
        let addr = Gva(region + (next() % 64) * PAGE_SIZE + if next() % 16 == 0 { 1 } else { 0 });
        let len = (next() % 12) * PAGE_SIZE + if next() % 8 == 0 { 7 } else { 0 };
        let prot = Prot::from_bits(next() % 8).unwrap();
        match next() % 9 {
            0 => drop(m.mmap(anon(addr.0, len, prot, true))),
            1 => drop(m.munmap(addr, len)),
            2 => drop(m.mprotect(addr, len, prot)),
            3 => drop(m.mremap(
                addr,
                len,
                (next() % 8) * PAGE_SIZE,
                (next() % 4) as u32,
                Gva(region + 0x100_0000),
            )),
            4 => drop(m.madvise(addr, len, libc::MADV_DONTNEED)),
            5 => drop(m.copy_out(addr, &vec![0x5a; len as usize])),
            6 => drop(m.copy_in(addr, &mut vec![0; len as usize])),
            7 => drop(m.handle_fault(
                addr,
                Access {
                    write: next() % 2 == 0,
                    exec: next() % 3 == 0,
                },
            )),
            _ => drop(m.brk(addr)),
        }
        let s = m.stats();
        max_mapped = max_mapped.max(s.mapped_pages);
        max_vmas = max_vmas.max(s.vma_count);
        assert_eq!(
            s.total_pages - s.free_pages,
            s.page_table_pages + s.mapped_pages
        );
        // Every user page with a frame lies inside a VMA with matching rights.
        for (va, _, flags) in m.page_tables().frames_in(Gva(0), layout::USER_END) {
            let vma = m.find_vma(va).expect("frame outside any VMA");
            assert_eq!(
                flags.without(PteFlags::ACCESSED | PteFlags::DIRTY),
                pte_flags(vma.prot).without(PteFlags::ACCESSED)
            );
        }
    }
    assert!(
        max_mapped > 20 && max_vmas > 5,
        "the test exercised little: {max_mapped} {max_vmas}"
    );
    m.munmap(Gva(0), layout::USER_END.0).unwrap();
    assert_eq!(m.stats().mapped_pages, 0);
}

#[test]
fn errno_mapping_is_total() {
    let all = [
        MmError::InvalidArgument(""),
        MmError::NoMemory(""),
        MmError::Fault(Gva(0)),
        MmError::Exists(Gva(0)),
        MmError::BelowMinAddr(Gva(0)),
        MmError::OffsetOverflow,
        MmError::StringTooLong(1),
        MmError::Internal(String::new()),
        MmError::Checkpoint(String::new()),
    ];
    let errnos: Vec<_> = all.iter().map(MmError::errno).collect();
    assert_eq!(
        errnos,
        vec![
            libc::EINVAL,
            libc::ENOMEM,
            libc::EFAULT,
            libc::EEXIST,
            libc::EPERM,
            libc::EOVERFLOW,
            libc::ENAMETOOLONG,
            libc::EFAULT,
            libc::EINVAL
        ]
    );
    assert!(all[7].is_internal() && !all[0].is_internal() && !all[8].is_internal());
}

#[test]
fn madvise_marks_split_merge_and_steer_fork() {
    let mut m = mm(16 * MIB);
    let a = m.mmap(anon(0, 0x4000, Prot::RW, false)).unwrap();
    m.copy_out(a, &[0x5a; 0x4000]).unwrap();
    m.madvise(a.add(0x2000), 0x2000, libc::MADV_WIPEONFORK)
        .unwrap();
    m.madvise(a, 0x1000, libc::MADV_DONTFORK).unwrap();
    assert_eq!(m.vmas().count(), 3);
    let mut c = m
        .fork_into(Arc::new(GuestMemory::new(16 * MIB).unwrap()))
        .unwrap();
    // MADV_DONTFORK: no mapping in the child; MADV_WIPEONFORK: zeros, the mark kept.
    assert!(c.find_vma(a).is_none());
    let mut b = [0u8; 1];
    c.copy_in(a.add(0x1000), &mut b).unwrap();
    assert_eq!(b, [0x5a]);
    c.copy_in(a.add(0x3000), &mut b).unwrap();
    assert_eq!(b, [0]);
    assert!(c
        .find_vma(a.add(0x3000))
        .unwrap()
        .advice
        .contains(VmAdvice::WIPE_ON_FORK));
    // Undone, the VMAs merge again.
    m.madvise(a, 0x4000, libc::MADV_KEEPONFORK).unwrap();
    m.madvise(a, 0x4000, libc::MADV_DOFORK).unwrap();
    assert_eq!(m.vmas().count(), 1);
    // Only private anonymous memory may be wiped on fork.
    let shared = MmapRequest {
        kind: VmaKind::Shared {
            object: crate::shared::SharedSpace::new()
                .anonymous(0x1000, "anon")
                .unwrap(),
            offset: 0,
            may_write: true,
        },
        ..anon(0, 0x1000, Prot::RW, false)
    };
    let s = m.mmap(shared).unwrap();
    assert_eq!(
        m.madvise(s, 0x1000, libc::MADV_WIPEONFORK)
            .map_err(|e| e.errno()),
        Err(libc::EINVAL)
    );
}

#[test]
fn max_map_count_bounds_mmap_and_munmap_splits() {
    let mut m = mm(16 * MIB);
    let mut at = 0x1000_0000u64;
    while m.vmas().count() <= MAX_MAP_COUNT {
        m.mmap(MmapRequest {
            prot: Prot::NONE,
            ..anon(at, 0x3000, Prot::NONE, true)
        })
        .unwrap();
        at += 0x6000;
    }
    assert_eq!(
        m.mmap(anon(at, 0x1000, Prot::NONE, true))
            .map_err(|e| e.errno()),
        Err(libc::ENOMEM)
    );
    m.munmap(Gva(at - 0x6000), 0x3000).unwrap();
    // A hole inside one mapping at the limit: ENOMEM; its end is fine.
    assert_eq!(
        m.munmap(Gva(0x1000_1000), 0x1000).map_err(|e| e.errno()),
        Err(libc::ENOMEM)
    );
    m.munmap(Gva(0x1000_2000), 0x1000).unwrap();
}
