//! Checkpoint and restore of a family: the address spaces that share one guest memory's
//! frames copy-on-write (a process and the children it forked, [`Family`]). Their frames are
//! one memory's, saved once with one allocator (its reference counts say which frames
//! several of them map); each member keeps an [`MmImage`] of its own (its VMAs, its page
//! tables, which are pages of that memory). A restore builds the members over one memory
//! and one allocator again, so the frames they shared are shared again.
//!
//! The books balance for the family, not per member: every reference the allocator counts
//! is a member's page-table page or a frame one of its tables maps.

use std::fs::File;
use std::sync::Arc;

use platform::GuestMemory;

use super::{
    books_balance, check_size, held_by, import_allocator, refuse, AnonObjects, FileId, MmImage,
};
use crate::family::Family;
use crate::manager::{MemoryManager, MmError};
use crate::shared::SharedSpace;

impl MemoryManager {
    /// The images of `members`, every address space of one family (one image each, in their
    /// order), and the family's allocator's bytes ([`export`](Self::export) for a family).
    /// Frames they released and keep for a commit must have been settled first
    /// ([`settle_released`](Self::settle_released)): those references are in no table.
    ///
    /// # Errors
    /// As [`export`](Self::export) for each member; address spaces of different families,
    /// or not all of the family's; frames released and not yet freed; books that do not
    /// balance for the family.
    pub fn export_family(
        members: &[&MemoryManager],
        anon: &mut AnonObjects,
    ) -> Result<(Vec<MmImage>, Vec<u8>), MmError> {
        let Some(first) = members.first() else {
            return Err(refuse("a family without members".into()));
        };
        let family = first.family();
        if members.iter().any(|m| !m.family().same_as(family)) {
            return Err(refuse(
                "address spaces of different families exported as one".into(),
            ));
        }
        if family.members() != members.len() {
            return Err(refuse(format!(
                "{} address spaces of a family of {}: every member is exported with it",
                members.len(),
                family.members()
            )));
        }
        let mut images = Vec::with_capacity(members.len());
        let mut held = 0usize;
        for m in members {
            if !m.released.is_empty() || !m.committing.is_empty() {
                return Err(refuse(
                    "frames released and not yet freed (settle_released first)".into(),
                ));
            }
            let image = m.export_parts(anon)?;
            held += (image.table_pages + image.mapped) as usize;
            images.push(image);
        }
        let alloc = family.lock();
        books_balance(held, alloc.references(), "references to allocated pages")?;
        Ok((images, alloc.export_bytes()))
    }

    /// The address spaces `images` describe (one family, as
    /// [`export_family`](Self::export_family) gave them) over `mem`, one fresh guest memory
    /// whose pages are (or will be) the checkpoint's, their frames counted by one allocator
    /// made from `allocator`: the frames they shared at the checkpoint are shared again,
    /// read-only until a write copies them. Files reopen as in [`import`](Self::import).
    ///
    /// # Errors
    /// As [`import`](Self::import) for each image; no image; books that do not balance for
    /// the family (every reference a page-table page or a mapped frame of a member).
    pub fn import_family(
        mem: Arc<GuestMemory>,
        images: &[&MmImage],
        allocator: &[u8],
        open: &mut dyn FnMut(&FileId) -> Result<File, String>,
        files: Option<&Arc<SharedSpace>>,
        anon: &AnonObjects,
    ) -> Result<Vec<MemoryManager>, MmError> {
        if images.is_empty() {
            return Err(refuse("a family without members".into()));
        }
        let mut held = 0usize;
        for image in images {
            check_size(&mem, image)?;
            let (tables, mapped) = held_by(image);
            held = held
                .checked_add(tables)
                .and_then(|h| h.checked_add(mapped))
                .ok_or_else(|| refuse("page counts out of range".into()))?;
        }
        let alloc = import_allocator(&mem, allocator)?;
        books_balance(held, alloc.references(), "references to allocated pages")?;
        let mut family = Some(Family::new(alloc));
        let mut out: Vec<MemoryManager> = Vec::with_capacity(images.len());
        for image in images {
            let handle = match (family.take(), out.first()) {
                (Some(f), _) => f,
                (None, Some(first)) => first.family().join(),
                (None, None) => return Err(refuse("a family without members".into())),
            };
            let mut mm = Self::import_parts(mem.clone(), image, handle, open, files, anon)?;
            mm.read_only_after_fork = images.len() > 1;
            out.push(mm);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::tests::{anon, mm, MIB};
    use crate::pagetable::PteFlags;
    use crate::vma::Prot;
    use platform::{Gva, PAGE_SIZE};

    fn read(m: &mut MemoryManager, at: Gva) -> [u8; 2] {
        let mut b = [0u8; 2];
        m.copy_in(at, &mut b).unwrap();
        b
    }

    fn no_files(_: &FileId) -> Result<File, String> {
        Err("no files here".into())
    }

    /// Three generations: the parent wrote pages 0-3 ("p", i), forked the child, which
    /// wrote page 0 ("c", 0) and forked the grandchild.
    fn generations() -> (MemoryManager, MemoryManager, MemoryManager, Gva) {
        let mut p = mm(32 * MIB);
        let a = p.mmap(anon(0, 4 * PAGE_SIZE, Prot::RW, false)).unwrap();
        for i in 0..4u64 {
            p.copy_out(a.add(i * PAGE_SIZE), &[b'p', i as u8]).unwrap();
        }
        let mut c = p.fork_sharing().unwrap();
        c.copy_out(a, &[b'c', 0]).unwrap();
        // The copy released the child's reference to the parent's page 0: freed once
        // committed, or settled (a deflate settles before a checkpoint).
        c.settle_released();
        let g = c.fork_sharing().unwrap();
        (p, c, g, a)
    }

    fn round_trip(members: &[&MemoryManager]) -> Vec<MemoryManager> {
        let mut anon_objects = AnonObjects::default();
        let (images, alloc) = MemoryManager::export_family(members, &mut anon_objects).unwrap();
        // Through JSON, as a checkpoint stores them.
        let images: Vec<MmImage> = images
            .iter()
            .map(|i| serde_json::from_str(&serde_json::to_string(i).unwrap()).unwrap())
            .collect();
        let mem = crate::image::tests::restored_memory(members[0]);
        let refs: Vec<&MmImage> = images.iter().collect();
        MemoryManager::import_family(mem, &refs, &alloc, &mut no_files, None, &anon_objects)
            .unwrap()
    }

    #[test]
    fn a_family_comes_back_sharing_what_it_shared() {
        let (p, c, g, a) = generations();
        let mut back = round_trip(&[&p, &c, &g]);
        assert_eq!(back[0].family().members(), 3);
        assert!(back[0].family().same_as(back[2].family()));
        let page1 = a.add(PAGE_SIZE);
        let frames: Vec<_> = back
            .iter()
            .map(|m| m.page_tables().entry(page1).unwrap())
            .collect();
        // Page 1: one frame for the three, read-only, three references.
        assert!(frames.iter().all(|(f, _)| *f == frames[0].0));
        assert!(frames
            .iter()
            .all(|(_, fl)| !fl.contains(PteFlags::WRITABLE)));
        assert_eq!(back[0].allocator().refcount(frames[0].0), Ok(3));
        // Page 0: the parent's own, the child's copy shared with the grandchild.
        let p0 = back[0].page_tables().entry(a).unwrap().0;
        let c0 = back[1].page_tables().entry(a).unwrap().0;
        assert_ne!(p0, c0);
        assert_eq!(back[2].page_tables().entry(a).unwrap().0, c0);
        let [mut bp, mut bc, mut bg]: [MemoryManager; 3] = match back.try_into() {
            Ok(v) => v,
            Err(_) => unreachable!(),
        };
        assert_eq!(read(&mut bp, a), [b'p', 0]);
        assert_eq!(read(&mut bc, a), [b'c', 0]);
        assert_eq!(read(&mut bg, a), [b'c', 0]);
        // A write after the restore stays on its side.
        bc.copy_out(page1, &[b'C', 1]).unwrap();
        assert_eq!(read(&mut bc, page1), [b'C', 1]);
        assert_eq!(read(&mut bp, page1), [b'p', 1]);
        assert_eq!(read(&mut bg, page1), [b'p', 1]);
        bc.settle_released();
        assert_eq!(bp.allocator().refcount(frames[0].0), Ok(2));
        back = vec![bp, bc, bg];
        drop(back);
    }

    #[test]
    fn a_family_is_exported_whole_and_settled() {
        let (p, mut c, g, a) = generations();
        let mut anon_objects = AnonObjects::default();
        // Not without the grandchild.
        assert!(matches!(
            MemoryManager::export_family(&[&p, &c], &mut anon_objects),
            Err(MmError::Checkpoint(_))
        ));
        // Nor alone, as a process of its own.
        assert!(matches!(
            p.export(&mut anon_objects),
            Err(MmError::Checkpoint(_))
        ));
        // A frame released and kept for a commit is in no table: settled first.
        c.munmap(a.add(3 * PAGE_SIZE), PAGE_SIZE).unwrap();
        assert!(matches!(
            MemoryManager::export_family(&[&p, &c, &g], &mut anon_objects),
            Err(MmError::Checkpoint(_))
        ));
        c.settle_released();
        let back = round_trip(&[&p, &c, &g]);
        assert!(back[1].page_tables().entry(a.add(3 * PAGE_SIZE)).is_none());
    }

    #[test]
    fn images_that_do_not_balance_with_the_family_are_refused() {
        let (p, c, g, _) = generations();
        let mut anon_objects = AnonObjects::default();
        let (images, alloc) =
            MemoryManager::export_family(&[&p, &c, &g], &mut anon_objects).unwrap();
        let mem = crate::image::tests::restored_memory(&p);
        // A member left out: the allocator counts references no table holds.
        let two: Vec<&MmImage> = images.iter().take(2).collect();
        let r = MemoryManager::import_family(
            mem.clone(),
            &two,
            &alloc,
            &mut no_files,
            None,
            &anon_objects,
        );
        assert!(matches!(r, Err(MmError::Checkpoint(_))));
        // A member counted twice.
        let four: Vec<&MmImage> = images.iter().chain(images.first()).collect();
        let r =
            MemoryManager::import_family(mem, &four, &alloc, &mut no_files, None, &anon_objects);
        assert!(matches!(r, Err(MmError::Checkpoint(_))));
    }
}
