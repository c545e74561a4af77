//! Checks of a checkpoint directory: every corruption, truncation, version and layout case
//! is refused at open with an error naming the file, before anything could be restored.

use std::path::{Path, PathBuf};

use super::*;
use crate::pagestate::PageIdx;
use crate::swapfile::SwapWriter;
use crate::testutil::TempDir;

/// A complete checkpoint in `parent/ckpt`: a state, blobs and a memory image of three pages.
fn checkpoint(parent: &TempDir) -> PathBuf {
    checkpoint_named(parent, "ckpt", false)
}

/// [`checkpoint`] in `parent/name`, volatile (nothing synced) if asked.
fn checkpoint_named(parent: &TempDir, name: &str, volatile: bool) -> PathBuf {
    let dir = parent.path().join(name);
    let mut w = CheckpointWriter::create(&dir).unwrap();
    if volatile {
        w = w.volatile();
    }
    let mut blobs = BlobWriter::new();
    let xsave = blobs.add(&[0xab; 512]);
    let state = serde_json::json!({ "processes": [1], "xsave": xsave });
    w.write_envelope(STATE, Kind::State, state.to_string().as_bytes())
        .unwrap();
    w.write_envelope(BLOBS, Kind::Blobs, &blobs.into_payload())
        .unwrap();
    let mem = w.path("mem-1.img").unwrap();
    let mut sw = SwapWriter::create(&mem, 64).unwrap();
    let pages: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i + 1; 4096]).collect();
    let batch: Vec<(PageIdx, &[u8])> = pages
        .iter()
        .enumerate()
        .map(|(i, p)| (PageIdx(10 + i as u64), p.as_slice()))
        .collect();
    sw.write_batch(&batch).unwrap();
    sw.finish().unwrap();
    w.add_page_file("mem-1.img", FileKind::Memory).unwrap();
    w.finish().unwrap();
    dir
}

fn rewrite_manifest(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join(MANIFEST);
    let payload = envelope::read(&path, Kind::Manifest).unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(&payload).unwrap();
    edit(&mut v);
    std::fs::write(
        &path,
        envelope::encode(Kind::Manifest, v.to_string().as_bytes()),
    )
    .unwrap();
}

#[test]
fn a_volatile_checkpoint_holds_the_same_files_as_a_durable_one() {
    let t = TempDir::new();
    let durable = checkpoint_named(&t, "durable", false);
    let volatile = checkpoint_named(&t, "volatile", true);
    let (d, v) = (
        Checkpoint::open(&durable).unwrap(),
        Checkpoint::open(&volatile).unwrap(),
    );
    let names = |c: &Checkpoint| -> Vec<(String, u64)> {
        c.manifest()
            .files
            .iter()
            .map(|f| (f.name.clone(), f.len))
            .collect()
    };
    assert_eq!(names(&d), names(&v));
    assert_eq!(
        d.envelope(STATE, Kind::State).unwrap(),
        v.envelope(STATE, Kind::State).unwrap()
    );
    assert_eq!(
        d.envelope(BLOBS, Kind::Blobs).unwrap(),
        v.envelope(BLOBS, Kind::Blobs).unwrap()
    );
    // A page file's header has its own creation stamp: compare the pages.
    let pages = |c: &Checkpoint| -> Vec<[u8; 4096]> {
        let mem = crate::swapfile::SwapReader::open(&c.path("mem-1.img").unwrap()).unwrap();
        (10..13)
            .map(|p| {
                let mut page = [0u8; 4096];
                mem.read_page(PageIdx(p), &mut page).unwrap();
                page
            })
            .collect()
    };
    assert_eq!(pages(&d), pages(&v));
    assert!(!volatile.join("MANIFEST.tmp").exists());
}

#[test]
fn a_checkpoint_reads_back() {
    let t = TempDir::new();
    let dir = checkpoint(&t);
    let c = Checkpoint::open(&dir).unwrap();
    assert_eq!(c.manifest().format.major, FORMAT_MAJOR);
    assert_eq!(c.manifest().files.len(), 3);
    let state: serde_json::Value =
        serde_json::from_slice(&c.envelope(STATE, Kind::State).unwrap()).unwrap();
    let xsave: BlobRef = serde_json::from_value(state["xsave"].clone()).unwrap();
    assert_eq!(c.blobs().unwrap().get(xsave).unwrap(), &[0xab; 512][..]);
    let mem = crate::swapfile::SwapReader::open(&c.path("mem-1.img").unwrap()).unwrap();
    let mut page = [0u8; 4096];
    mem.read_page(PageIdx(11), &mut page).unwrap();
    assert_eq!(page, [2u8; 4096]);
    assert!(c.path("other").is_none());
    // Every file is private to its owner.
    use std::os::unix::fs::PermissionsExt;
    for f in std::fs::read_dir(&dir).unwrap() {
        let mode = f.unwrap().metadata().unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
    }
}

#[test]
fn an_unfinished_checkpoint_is_incomplete() {
    let t = TempDir::new();
    let dir = t.path().join("ckpt");
    let mut w = CheckpointWriter::create(&dir).unwrap();
    w.write_envelope(STATE, Kind::State, b"{}").unwrap();
    drop(w);
    let e = Checkpoint::open(&dir).unwrap_err();
    assert!(matches!(e, SnapshotError::Incomplete(_)), "{e}");
    // And the directory is not reused.
    assert!(matches!(
        CheckpointWriter::create(&dir),
        Err(SnapshotError::Exists(_))
    ));
}

#[test]
fn every_truncation_of_every_file_is_refused() {
    let t = TempDir::new();
    let dir = checkpoint(&t);
    for name in [MANIFEST, STATE, BLOBS, "mem-1.img"] {
        let path = dir.join(name);
        let good = std::fs::read(&path).unwrap();
        // Every cut of the small files; a spread of cuts of the page file.
        let step = if good.len() > 4096 { 509 } else { 1 };
        for cut in (0..good.len()).step_by(step) {
            std::fs::write(&path, &good[..cut]).unwrap();
            assert!(Checkpoint::open(&dir).is_err(), "{name} cut at {cut}");
        }
        let mut longer = good.clone();
        longer.extend_from_slice(b"tail");
        std::fs::write(&path, &longer).unwrap();
        assert!(Checkpoint::open(&dir).is_err(), "{name} extended");
        std::fs::write(&path, &good).unwrap();
        Checkpoint::open(&dir).unwrap();
    }
}

#[test]
fn a_flipped_byte_in_any_file_is_refused() {
    let t = TempDir::new();
    let dir = checkpoint(&t);
    for name in [MANIFEST, STATE, BLOBS] {
        let path = dir.join(name);
        let good = std::fs::read(&path).unwrap();
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x01;
            std::fs::write(&path, &bad).unwrap();
            assert!(Checkpoint::open(&dir).is_err(), "{name} byte {i}");
        }
        std::fs::write(&path, &good).unwrap();
    }
    // A page file's header, index or trailer: refused at open; a page's data: at its read.
    let path = dir.join("mem-1.img");
    let good = std::fs::read(&path).unwrap();
    let index = 4096 + 3 * 4096;
    for i in (0..64).chain(index..good.len()) {
        let mut bad = good.clone();
        bad[i] ^= 0x01;
        std::fs::write(&path, &bad).unwrap();
        assert!(Checkpoint::open(&dir).is_err(), "page file byte {i}");
    }
    let mut bad = good.clone();
    bad[4096 + 5] ^= 0x01;
    std::fs::write(&path, &bad).unwrap();
    let c = Checkpoint::open(&dir).unwrap();
    let mem = crate::swapfile::SwapReader::open(&c.path("mem-1.img").unwrap()).unwrap();
    let mut page = [0u8; 4096];
    assert!(mem.read_page(PageIdx(10), &mut page).is_err());
    assert_eq!(page, [0u8; 4096], "no wrong byte handed out");
}

#[test]
fn another_version_or_layout_is_refused_with_a_clear_error() {
    let t = TempDir::new();
    let dir = checkpoint(&t);
    rewrite_manifest(&dir, |v| v["format"]["major"] = (FORMAT_MAJOR + 1).into());
    let e = Checkpoint::open(&dir).unwrap_err();
    assert!(matches!(e, SnapshotError::Version { .. }), "{e}");
    assert!(e.to_string().contains("this torpor reads"), "{e}");

    let t2 = TempDir::new();
    let dir = checkpoint(&t2);
    rewrite_manifest(&dir, |v| v["layout_id"] = (layout_id() ^ 1).into());
    assert!(matches!(
        Checkpoint::open(&dir),
        Err(SnapshotError::Layout { .. })
    ));
}

#[test]
fn unknown_fields_odd_names_missing_files_and_symlinks_are_refused() {
    let t = TempDir::new();
    let dir = checkpoint(&t);
    rewrite_manifest(&dir, |v| v["surprise"] = 1.into());
    assert!(matches!(
        Checkpoint::open(&dir),
        Err(SnapshotError::Corrupt { .. })
    ));

    for name in ["../escape", "/etc/passwd", ".hidden", "", "a/b"] {
        let t = TempDir::new();
        let dir = checkpoint(&t);
        rewrite_manifest(&dir, |v| v["files"][0]["name"] = name.into());
        let e = Checkpoint::open(&dir).unwrap_err();
        assert!(matches!(e, SnapshotError::BadName(_)), "{name:?}: {e}");
    }

    let t1 = TempDir::new();
    let dir = checkpoint(&t1);
    std::fs::remove_file(dir.join(BLOBS)).unwrap();
    assert!(matches!(
        Checkpoint::open(&dir),
        Err(SnapshotError::Missing(_))
    ));

    // A listed file replaced by a symlink to an identical copy: not followed.
    let t3 = TempDir::new();
    let dir = checkpoint(&t3);
    let copy = t3.path().join("state-copy");
    std::fs::copy(dir.join(STATE), &copy).unwrap();
    std::fs::remove_file(dir.join(STATE)).unwrap();
    std::os::unix::fs::symlink(&copy, dir.join(STATE)).unwrap();
    assert!(matches!(
        Checkpoint::open(&dir),
        Err(SnapshotError::Open { .. })
    ));

    // Two files swapped: each has a valid envelope, but not the listed checksum.
    let t4 = TempDir::new();
    let dir = checkpoint(&t4);
    let (s, b) = (dir.join(STATE), dir.join(BLOBS));
    let (sb, bb) = (std::fs::read(&s).unwrap(), std::fs::read(&b).unwrap());
    std::fs::write(&s, &bb).unwrap();
    std::fs::write(&b, &sb).unwrap();
    assert!(Checkpoint::open(&dir).is_err());
}
