//! Private file mappings backed by the host's page cache: which files qualify, and the
//! read-only object whose windows show their pages.
//!
//! Linux maps the clean pages of a `MAP_PRIVATE` file mapping (program text, libraries,
//! read-only data, and writable data until written) straight from the page cache, shared by
//! every process mapping the file, and copies a page only on the first write to it. torpor
//! does the same for mappings that are not writable, across the VMs of a sandbox and across
//! sandboxes: a private mapping of a
//! regular file of the root gets the file's read-only [`SharedObject`] (one per inode in the
//! sandbox), whose [`SharedWindow`](platform::SharedWindow)s are `PROT_READ`, `MAP_SHARED`
//! host mappings of an `O_RDONLY` descriptor attached to the VM as read-only memslots. Every
//! holder process mapping the same file maps the same page-cache pages, so N sandboxes of
//! one image hold one copy of libpython. The guest's page tables map such pages read-only,
//! and only while the mapping is not writable: a writable private mapping gets copies at
//! its first touch (`cow.rs` says why, and how copies are made).
//!
//! A write to the file (`write(2)`, a `MAP_SHARED` mapping) shows in the read-only private
//! mappings, as on Linux: both reach the same page cache. The guest can never write the file:
//! the host mapping cannot be made writable (read-only descriptor), the memslot is read-only
//! where KVM allows, and the runtime's own writes to such pages are refused by
//! `GuestMemory`.
//!
//! A file's object is made by its first executable mapping (program text, libraries: the
//! ELF loader's segments, `mmap` with `PROT_EXEC`), or by any mapping of an ELF file (the
//! dynamic linker maps a library whole and read-only before it maps its code: that first
//! mapping keeps the library's headers, symbols and relocations, 8.6 MiB of Node.js's
//! libnode), and is kept while the sandbox lives; every private mapping of that file then
//! uses it (a library's read-only data too; its writable data copies at the first touch).
//! What does not qualify keeps the copying path (`VmaKind::File` without an object):
//! data files never mapped executable (an application maps and unmaps them: their windows
//! and descriptors would pile up), files that are not regular, unlinked files
//! (`memfd_create`, `O_TMPFILE`), files of `tmpfs`, `ramfs`, `proc` or `sysfs` (their pages
//! are memory, or generated), and every file when sharing is off (`torpor run
//! --no-share-files`, `TORPOR_SHARE_FILES=0`).

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::shared::{SharedObject, SharedSpace};

/// Memslots kept free for shared windows that have no fallback (`MAP_SHARED` objects,
/// System V segments): page-cache windows of private mappings stop short of them.
pub const RESERVED_SLOTS: usize = 64;

/// Filesystems whose files are not shared through windows (`statfs` magic numbers).
const UNSHARED_FS: [i64; 4] = [
    0x0102_1994, // TMPFS_MAGIC
    0x8584_58f6, // RAMFS_MAGIC
    0x9fa0,      // PROC_SUPER_MAGIC
    0x6265_6572, // SYSFS_MAGIC
];

impl SharedSpace {
    /// Turns the sharing of private file pages on or off (on by default); mappings made
    /// before keep what they have.
    pub fn set_share_files(&self, on: bool) {
        self.share_files.store(on, Ordering::Relaxed);
    }

    /// Whether private file mappings share their clean pages through the page cache.
    pub fn shares_files(&self) -> bool {
        self.share_files.load(Ordering::Relaxed)
    }

    /// The read-only object whose pages back the clean pages of a private mapping of `file`
    /// (one per inode in the sandbox), or `None` when the file does not qualify (see the
    /// module's doc), sharing is off, or the file cannot be reopened read-only: the mapping
    /// then copies pages as before.
    ///
    /// An object is made by an executable mapping (`exec`: program text, a library's code,
    /// every segment the ELF loader maps) or a mapping of an ELF file (the dynamic linker's
    /// first, read-only mapping of a library), and kept for the sandbox's life, like the windows
    /// VMs attach (a VM never detaches one); later private mappings of the same file (a
    /// library's read-only data and writable data segments) share it whatever their rights.
    /// Other files keep the copying path, so that the windows and descriptors held stay
    /// bounded by the programs and libraries the sandbox runs, not by the data files it
    /// maps and unmaps.
    pub fn private_file(self: &Arc<Self>, file: &File, exec: bool) -> Option<Arc<SharedObject>> {
        if !self.shares_files() {
            return None;
        }
        let meta = file.metadata().ok()?;
        if !meta.file_type().is_file() || meta.nlink() == 0 {
            return None;
        }
        let key = (meta.dev(), meta.ino());
        let mut files = self
            .readonly_files
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(obj) = files.get(&key) {
            return Some(obj.clone());
        }
        if !(exec || is_elf(file)) || !shareable_fs(file) {
            return None;
        }
        let fd = match read_only_fd(file) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::debug!("not sharing a private file mapping: {e}");
                return None;
            }
        };
        let obj = Arc::new(SharedObject::of_file(self.clone(), fd, false));
        files.insert(key, obj.clone());
        Some(obj)
    }
}

/// Whether `file` starts with the ELF magic.
fn is_elf(file: &File) -> bool {
    use std::os::unix::fs::FileExt;
    let mut magic = [0u8; 4];
    file.read_exact_at(&mut magic, 0).is_ok() && magic == *b"\x7fELF"
}

/// Whether `file` lives on a filesystem whose pages may be shared (not memory or generated).
fn shareable_fs(file: &File) -> bool {
    // SAFETY: an all-zero statfs is valid; fstatfs fills it from a valid fd.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and a writable statfs.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    #[allow(clippy::unnecessary_cast)]
    let magic = st.f_type as i64;
    !UNSHARED_FS.contains(&magic)
}

/// A descriptor of `file`'s inode opened `O_RDONLY`: a duplicate when `file` is read-only
/// already, else a reopening through `/proc/self/fd` (the same inode).
fn read_only_fd(file: &File) -> std::io::Result<OwnedFd> {
    // SAFETY: F_GETFL on a valid fd.
    let fl = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    if fl < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if fl & libc::O_ACCMODE == libc::O_RDONLY {
        return Ok(OwnedFd::from(file.try_clone()?));
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    Ok(OwnedFd::from(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str, data: &[u8]) -> std::path::PathBuf {
        // Beside the test binary, not in /tmp: that may be a tmpfs, whose files are not
        // shared.
        let exe = std::env::current_exe().unwrap();
        let p = exe
            .parent()
            .unwrap()
            .join(format!("mm-pagecache-{name}-{}", std::process::id()));
        std::fs::write(&p, data).unwrap();
        p
    }

    #[test]
    fn one_read_only_object_per_inode() {
        let p = temp("obj", &[3u8; 9000]);
        let s = SharedSpace::new();
        let a = File::open(&p).unwrap();
        let b = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        assert!(
            s.private_file(&a, false).is_none(),
            "not mapped executable yet"
        );
        let oa = s.private_file(&a, true).expect("a regular file qualifies");
        let ob = s.private_file(&b, false).unwrap();
        assert!(Arc::ptr_eq(&oa, &ob));
        assert!(!oa.is_writable() && oa.is_file());
        let (w, _) = oa.page(8192).unwrap();
        assert!(!w.is_writable());
        assert_eq!(s.file_windows().len(), 1);
        // Not the object of MAP_SHARED mappings.
        let shared = s.file(&b).unwrap();
        assert!(!Arc::ptr_eq(&shared, &oa));
        s.set_share_files(false);
        assert!(s.private_file(&a, true).is_none());
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn an_elf_file_qualifies_before_it_is_mapped_executable() {
        let mut elf = b"\x7fELF".to_vec();
        elf.resize(8192, 0);
        let p = temp("elf", &elf);
        let q = temp("data", b"\x7fELx and more");
        let s = SharedSpace::new();
        assert!(
            s.private_file(&File::open(&p).unwrap(), false).is_some(),
            "the dynamic linker's first, read-only mapping of a library"
        );
        assert!(s.private_file(&File::open(&q).unwrap(), false).is_none());
        std::fs::remove_file(&p).unwrap();
        std::fs::remove_file(&q).unwrap();
    }

    #[test]
    fn unlinked_and_special_files_do_not_qualify() {
        let s = SharedSpace::new();
        let p = temp("unlinked", b"x");
        let f = File::open(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        assert!(s.private_file(&f, true).is_none(), "unlinked");
        assert!(s
            .private_file(&File::open("/dev/zero").unwrap(), true)
            .is_none());
        assert!(s
            .private_file(&File::open("/proc/self/stat").unwrap(), true)
            .is_none());
    }
}
