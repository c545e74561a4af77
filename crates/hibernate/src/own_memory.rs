//! The runtime's own memory while its sandbox sleeps: a hibernated sandbox should cost the
//! host what its state needs, not what running it touched.
//!
//! - malloc's thresholds stay at their defaults for the process's life
//!   ([`keep_allocator_thresholds`]);
//! - the lists a deflate builds up page by page grow in the deflating thread's own arena
//!   ([`vec_in_own_arena`]), never in another thread's, which would keep what they freed;
//! - after a deflate, the heap's free memory goes back to the host ([`trim_heap`]);
//! - the runtime's code and read-only data, the clean pages of its executable's and its
//!   libraries' private file mappings, are unmapped from the process ([`drop_code_pages`]).
//!   They stay in the host's page cache, shared with every other process that maps them, and
//!   come back on the next touch (a minor fault); the threads that run while the sandbox
//!   sleeps (control, keep-alive, pager) map again the little they execute. A mapping with a
//!   page of its own (a relocated or written page, copied on write) is never dropped: that
//!   page would read as the file's bytes again.

/// Keeps glibc malloc's thresholds at their defaults for the whole process (`mallopt`, 128
/// KiB: allocations from that size are mappings of their own, unmapped when freed; a heap's
/// free top from that size goes back to the host), so that what a hibernation frees goes
/// back to the host. Left to itself, malloc raises both after the first large free (the
/// deflate's buffers are megabytes) up to 32 and 64 MiB; a thread's arena then keeps its
/// free top resident (`malloc_trim` does not shrink a thread arena's top), hundreds of KiB
/// per hibernated sandbox.
pub(crate) fn keep_allocator_thresholds() {
    const THRESHOLD: libc::c_int = 128 << 10;
    // SAFETY: mallopt has no preconditions; these two parameters take byte counts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, THRESHOLD);
    }
}

/// An empty vector with room for 4 KiB, for a list a deflate builds up one entry at a time.
///
/// Started empty, such a list's first buffer would be small, and glibc serves small requests
/// (up to about 1 KiB) from the calling thread's cache of freed chunks, which may belong to
/// another thread's arena (an application thread's, whose allocations the deflating thread
/// freed). `realloc` grows a buffer inside the arena it came from: the list would grow inside
/// that arena, whose top, once the list is freed, stays resident while the sandbox sleeps
/// (`malloc_trim` gives back only the main arena's top): 130 KiB for a hibernated Video
/// sandbox on the trap platform, measured. From 4 KiB the buffer comes from the calling
/// thread's own arena: the main arena for a deflate, which runs on the process's first thread.
pub(crate) fn vec_in_own_arena<T>() -> Vec<T> {
    const FIRST_BUFFER: usize = 4 << 10;
    Vec::with_capacity(FIRST_BUFFER.div_ceil(std::mem::size_of::<T>().max(1)))
}

/// Gives the heap's free memory back to the host (the deflate's buffers were large and are
/// freed now: the hibernated process would keep them resident): the free pages inside every
/// arena, and the main arena's free top (a thread arena keeps its top, up to malloc's top
/// pad of 128 KiB).
pub(crate) fn trim_heap() {
    // SAFETY: malloc_trim has no preconditions.
    unsafe { libc::malloc_trim(0) };
}

/// Unmaps the clean pages of the process's read-only private file mappings (see the module
/// doc); returns (and logs) the bytes that were mapped. Errors are logged and leave the pages
/// mapped.
pub(crate) fn drop_code_pages() -> u64 {
    let smaps = match std::fs::read_to_string("/proc/self/smaps") {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!("reading /proc/self/smaps: {e}");
            return 0;
        }
    };
    let mut dropped = 0;
    for m in droppable(&smaps) {
        // SAFETY: a whole mapping of this process, read-only, backed by a file and holding no
        // page of its own (smaps says so): dropping it loses nothing, its pages read as the
        // file's bytes again on the next touch. Another thread running code in it faults.
        let r = unsafe { libc::madvise(m.start as *mut libc::c_void, m.len, libc::MADV_DONTNEED) };
        if r == 0 {
            dropped += m.rss;
        } else {
            tracing::debug!(
                "madvise(DONTNEED) of {:#x}+{:#x}: {}",
                m.start,
                m.len,
                std::io::Error::last_os_error()
            );
        }
    }
    tracing::debug!("{} KiB of the runtime's code unmapped", dropped >> 10);
    dropped
}

/// A mapping [`droppable`] found.
#[derive(Debug, PartialEq, Eq)]
struct Mapping {
    start: usize,
    len: usize,
    /// Bytes resident in it.
    rss: u64,
}

/// One mapping of `/proc/PID/smaps` as read so far.
struct Entry<'a> {
    start: usize,
    end: usize,
    perms: &'a str,
    path: &'a str,
    rss_kib: u64,
    anonymous_kib: u64,
    vm_flags: &'a str,
}

impl Entry<'_> {
    /// Read-only, private, backed by a regular file (not a device), with pages resident and
    /// none of its own, and neither locked nor a raw PFN/IO mapping.
    fn is_droppable(&self) -> bool {
        let p = self.perms.as_bytes();
        let special = self
            .vm_flags
            .split_whitespace()
            .any(|f| matches!(f, "lo" | "io" | "pf" | "dd"));
        p.len() == 4
            && p[1] == b'-'
            && p[3] == b'p'
            && self.path.starts_with('/')
            && !self.path.starts_with("/dev/")
            && self.rss_kib > 0
            && self.anonymous_kib == 0
            && !special
    }
}

/// The mappings of `smaps` (the text of `/proc/PID/smaps`) whose pages can be dropped without
/// losing a byte.
fn droppable(smaps: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    let mut cur: Option<Entry<'_>> = None;
    let mut finish = |e: Option<Entry<'_>>| {
        if let Some(e) = e.filter(Entry::is_droppable) {
            out.push(Mapping {
                start: e.start,
                len: e.end - e.start,
                rss: e.rss_kib * 1024,
            });
        }
    };
    for line in smaps.lines() {
        if let Some(e) = header(line) {
            finish(cur.replace(e));
            continue;
        }
        let Some(e) = cur.as_mut() else { continue };
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let kib = || value.split_whitespace().next().and_then(|v| v.parse().ok());
        match key {
            // An unreadable figure keeps the mapping (taken as holding pages of its own).
            "Rss" => e.rss_kib = kib().unwrap_or(0),
            "Anonymous" => e.anonymous_kib = kib().unwrap_or(u64::MAX),
            "VmFlags" => e.vm_flags = value,
            _ => {}
        }
    }
    finish(cur);
    out
}

/// A mapping's first line (`start-end perms offset dev inode [path]`), or None for a field
/// line (`Key: value`).
fn header(line: &str) -> Option<Entry<'_>> {
    let mut f = line.split_whitespace();
    let (start, end) = f.next()?.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    let perms = f.next()?;
    let (_offset, _dev, _inode) = (f.next()?, f.next()?, f.next()?);
    // The path is the rest of the line (it may hold spaces: " (deleted)").
    let path = f.next().map_or("", |first| {
        let at = line.find(first).unwrap_or(line.len());
        line[at..].trim_end()
    });
    (end > start).then_some(Entry {
        start,
        end,
        perms,
        path,
        rss_kib: 0,
        // Unknown until its line is read: keep the mapping unless smaps says it has none.
        anonymous_kib: u64::MAX,
        vm_flags: "",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0a0000000-55d0a0400000 r--p 00000000 08:01 1234 /usr/bin/torpor
Size:               4096 kB
Rss:                1024 kB
Anonymous:             0 kB
VmFlags: rd mr mw me sd
55d0a0400000-55d0a0800000 r-xp 00400000 08:01 1234 /usr/bin/torpor
Size:               4096 kB
Rss:                2048 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me sd
55d0a0800000-55d0a0810000 r--p 00800000 08:01 1234 /usr/bin/torpor
Size:                 64 kB
Rss:                  64 kB
Anonymous:            60 kB
VmFlags: rd mr mw me ac sd
55d0a0810000-55d0a0812000 rw-p 00810000 08:01 1234 /usr/bin/torpor
Size:                  8 kB
Rss:                   8 kB
Anonymous:             0 kB
VmFlags: rd wr mr mw me ac sd
7f0000000000-7f0000100000 r--s 00000000 00:01 77 /memfd:torpor-guest (deleted)
Size:               1024 kB
Rss:                1024 kB
Anonymous:             0 kB
VmFlags: rd mr mw me sd
7f0000100000-7f0000200000 r--p 00000000 00:00 0 
Size:               1024 kB
Rss:                 512 kB
Anonymous:           512 kB
VmFlags: rd mr mw me ac sd
7f0000200000-7f0000300000 r-xp 00000000 08:01 99 /usr/lib/my lib.so (deleted)
Size:               1024 kB
Rss:                 256 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me sd
7f0000300000-7f0000301000 r--p 00000000 00:05 3 /dev/some-device
Size:                  4 kB
Rss:                   4 kB
Anonymous:             0 kB
VmFlags: rd mr mw me sd
7f0000400000-7f0000500000 r--p 00000000 08:01 98 /usr/lib/untouched.so
Size:               1024 kB
Rss:                   0 kB
Anonymous:             0 kB
VmFlags: rd mr mw me sd
7f0000500000-7f0000501000 r--p 00000000 08:01 97 /usr/lib/locked.so
Size:                  4 kB
Rss:                   4 kB
Anonymous:             0 kB
VmFlags: rd mr mw me lo sd
7f0000600000-7f0000601000 r--p 00000000 08:01 96 /usr/lib/no-anon-line.so
Size:                  4 kB
Rss:                   4 kB
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]
Size:                  4 kB
Rss:                   0 kB
Anonymous:             0 kB
VmFlags: ex
";

    #[test]
    fn only_clean_read_only_private_file_mappings_are_dropped() {
        let got = droppable(SMAPS);
        assert_eq!(
            got,
            vec![
                Mapping {
                    start: 0x55d0a0000000,
                    len: 0x400000,
                    rss: 1024 << 10
                },
                Mapping {
                    start: 0x55d0a0400000,
                    len: 0x400000,
                    rss: 2048 << 10
                },
                Mapping {
                    start: 0x7f0000200000,
                    len: 0x100000,
                    rss: 256 << 10
                },
            ]
        );
    }

    /// Rss of the mapping at `addr` in this process's smaps.
    fn rss_at(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some(e) = header(line) {
                inside = e.start == addr;
            } else if inside && line.starts_with("Rss:") {
                return line.split_whitespace().nth(1).unwrap().parse().unwrap();
            }
        }
        panic!("no mapping at {addr:#x}");
    }

    /// Maps `file` privately with `prot` (after writing `written` through a writable mapping
    /// first, when given).
    fn map(file: &std::fs::File, len: usize, written: Option<u8>) -> *mut u8 {
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh private mapping of our own file; unmapped by the test.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let p = p.cast::<u8>();
        for i in (0..len).step_by(4096) {
            // SAFETY: inside the mapping.
            unsafe {
                match written {
                    Some(b) => p.add(i).write_volatile(b),
                    None => {
                        p.add(i).read_volatile();
                    }
                }
            }
        }
        // SAFETY: our own mapping.
        assert_eq!(unsafe { libc::mprotect(p.cast(), len, libc::PROT_READ) }, 0);
        p
    }

    #[test]
    fn dropped_pages_read_as_the_file_again_and_written_ones_are_kept() {
        use std::io::Write;
        const LEN: usize = 16 * 4096;
        let path = std::env::temp_dir().join(format!("own-memory-{}", std::process::id()));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&[7u8; LEN]).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let clean = map(&f, LEN, None);
        let written = map(&f, LEN, Some(9));
        assert_eq!(rss_at(clean as usize), (LEN / 1024) as u64);

        assert!(drop_code_pages() >= LEN as u64);

        assert_eq!(rss_at(clean as usize), 0, "the clean mapping is dropped");
        assert_eq!(
            rss_at(written as usize),
            (LEN / 1024) as u64,
            "the written mapping is kept"
        );
        for i in (0..LEN).step_by(4096) {
            // SAFETY: inside the mappings.
            unsafe {
                assert_eq!(clean.add(i).read_volatile(), 7);
                assert_eq!(written.add(i).read_volatile(), 9);
            }
        }
        // SAFETY: our own mappings.
        unsafe {
            libc::munmap(clean.cast(), LEN);
            libc::munmap(written.cast(), LEN);
        }
    }
}

#[cfg(test)]
mod arena_tests {
    use super::vec_in_own_arena;

    /// A thread arena's heaps are 64 MiB-aligned mappings (glibc's `HEAP_MAX_SIZE` on 64-bit);
    /// the main arena's chunks are in the `brk` heap.
    const HEAP_MAX: usize = 64 << 20;

    /// Which arena a small chunk at `p` belongs to: 0 for the main arena, else the base of
    /// the thread arena's heap.
    fn arena_of(p: *const u8) -> usize {
        let p = p as usize;
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        let in_brk = maps
            .lines()
            .filter(|l| l.ends_with("[heap]"))
            .filter_map(|l| l.split(' ').next()?.split_once('-'))
            .filter_map(|(a, b)| {
                Some(usize::from_str_radix(a, 16).ok()?..usize::from_str_radix(b, 16).ok()?)
            })
            .any(|r| r.contains(&p));
        if in_brk {
            0
        } else {
            p & !(HEAP_MAX - 1)
        }
    }

    /// Chunks the size of a list's first buffer (4 entries of 16 bytes), allocated by a thread
    /// that ends once it has handed them over, and the arena of the last.
    #[allow(clippy::vec_box, reason = "each entry is a chunk of its own")]
    fn chunks_of_another_thread() -> (Vec<Box<[u64; 8]>>, usize) {
        std::thread::spawn(|| {
            let chunks: Vec<Box<[u64; 8]>> = (0..7).map(|_| Box::new([7u64; 8])).collect();
            // The chunk freed last, which the next request of its size gets back.
            let arena = arena_of(chunks[chunks.len() - 1].as_ptr().cast());
            (chunks, arena)
        })
        .join()
        .expect("the allocating thread")
    }

    #[test]
    fn a_list_grows_in_its_own_thread_s_arena_whoever_freed_the_chunks_it_might_reuse() {
        // On a thread of its own (the test harness's threads share arenas with other tests).
        std::thread::spawn(|| {
            let probe = vec![0u8; 8192];
            let own = arena_of(probe.as_ptr());
            let (chunks, theirs) = (0..8)
                .map(|_| chunks_of_another_thread())
                .find(|(_, a)| *a != own)
                .expect("a thread with an arena other than this one's");
            // This thread's cache of freed chunks of that size emptied (it holds 7 a size),
            // then filled with the other arena's.
            let held: Vec<Box<[u64; 8]>> = (0..16).map(|_| Box::new([0u64; 8])).collect();
            drop(chunks);
            // Grown from empty, as a list is (its first buffer has room for 4 entries).
            let mut plain: Vec<[u64; 2]> = Vec::new();
            plain.extend([[1, 2]]);
            assert_eq!(
                arena_of(plain.as_ptr().cast()),
                theirs,
                "an empty list's first buffer comes from the cached chunks of the other arena"
            );
            let mut list: Vec<[u64; 2]> = vec_in_own_arena();
            // Grown to 64 KiB (below the size malloc maps on its own).
            for i in 0..4096 {
                list.push([i, i]);
            }
            assert_eq!(arena_of(list.as_ptr().cast()), own);
            drop((plain, held, probe));
        })
        .join()
        .expect("the test thread");
    }
}
