//! A deflate and an inflate of fake guest memory built from the public API only: zero pages
//! recorded in the page-state map and not written, the rest swapped in batches, a recorded
//! working set put in the REAP file, and everything restored byte for byte.

use std::path::PathBuf;

use hibernate::{
    PageIdx, PageKind, PageState, PageStateMap, ReapReader, ReapWriter, RecordOutcome, SwapReader,
    SwapWriter, WorkingSetRecorder,
};

const PAGES: u64 = 300;
const PS: usize = 4096;

struct Base(PathBuf);
impl Drop for Base {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn memory() -> Vec<u8> {
    let mut m = vec![0u8; PAGES as usize * PS];
    for p in 0..PAGES as usize {
        if p % 3 == 0 {
            continue; // a zero page
        }
        for (i, b) in m[p * PS..(p + 1) * PS].iter_mut().enumerate() {
            *b = (p * 31 + i * 7 + (i >> 8)) as u8;
        }
    }
    m
}

#[test]
fn deflate_then_inflate_restores_memory() {
    let base = Base(std::env::temp_dir().join(format!("hibernate-it-{}", std::process::id())));
    std::fs::create_dir_all(&base.0).unwrap();
    let (reap_path, swap_path) = (base.0.join("reap"), base.0.join("swap"));
    let mem = memory();
    let mut map = PageStateMap::new(PAGES).unwrap();

    // The working set recorded on an earlier wake (REAP), in fault order.
    let mut rec = WorkingSetRecorder::new(PAGES, 1024);
    rec.start();
    for p in [200u64, 10, 11, 12, 13, 14, 50, 10] {
        let _ = rec.record(PageIdx(p));
    }
    assert_eq!(rec.record(PageIdx(PAGES)), RecordOutcome::OutOfRange);
    let set = rec.stop();
    assert_eq!(set.len(), 7); // 12 is a zero page: recorded, but not written to REAP

    let page = |p: u64| &mem[p as usize * PS..(p as usize + 1) * PS];
    let is_zero = |d: &[u8]| d.iter().all(|&b| b == 0);

    // Deflate: REAP pages first (recorded order), then zero pages, then the rest in runs.
    let mut rw = ReapWriter::create(&reap_path, PAGES).unwrap();
    let reap_pages: Vec<(PageIdx, &[u8])> = set
        .iter()
        .filter(|p| !is_zero(page(p.0)))
        .map(|&p| (p, page(p.0)))
        .collect();
    let slots = rw.write_batch(&reap_pages).unwrap();
    for (k, (p, _)) in reap_pages.iter().enumerate() {
        map.set(
            *p,
            PageState::Reap {
                slot: slots.start + k as u32,
            },
        )
        .unwrap();
    }
    rw.finish().unwrap();
    for p in 0..PAGES {
        if map.get(PageIdx(p)).unwrap() == PageState::Resident && is_zero(page(p)) {
            map.set(PageIdx(p), PageState::Zero).unwrap();
        }
    }
    let mut sw = SwapWriter::create(&swap_path, PAGES).unwrap();
    let runs: Vec<_> = map.runs(PageKind::Resident, 8).collect();
    for run in runs {
        let batch: Vec<(PageIdx, &[u8])> = (0..run.count)
            .map(|k| (PageIdx(run.first.0 + k), page(run.first.0 + k)))
            .collect();
        let slots = sw.write_batch(&batch).unwrap();
        map.set_range(
            run.first,
            run.count,
            PageState::Swapped { slot: slots.start },
        )
        .unwrap();
    }
    let index = sw.finish().unwrap();
    let c = map.counts();
    assert_eq!(c.resident, 0);
    assert_eq!(c.zero, 100);
    assert_eq!(c.reap, 6);
    assert_eq!(c.swapped, 194);
    assert_eq!(index.len(), 194);

    // Inflate: REAP prefetch in batches, then "faults" for the rest.
    let mut out = vec![0xEEu8; mem.len()];
    let reap = ReapReader::open(&reap_path).unwrap();
    reap.read_batches(2 * PS, |b| {
        for (p, data) in b.runs() {
            let at = p.0 as usize * PS;
            out[at..at + data.len()].copy_from_slice(data);
        }
        Ok::<(), hibernate::ReapError>(())
    })
    .unwrap();
    let swap = SwapReader::open(&swap_path).unwrap();
    let mut buf = [0u8; PS];
    for (p, st) in map.iter() {
        let at = p.0 as usize * PS;
        match st {
            PageState::Zero => out[at..at + PS].fill(0),
            PageState::Swapped { slot } => {
                swap.read_page(p, &mut buf).unwrap();
                assert_eq!(swap.index().lookup(p).unwrap().0, slot);
                out[at..at + PS].copy_from_slice(&buf);
            }
            PageState::Reap { .. } => {}
            other => panic!("page {p} left {other:?}"),
        }
    }
    assert!(out == mem, "inflated memory differs");
}
