use super::layout::{CQES, CQ_HEAD, SQ_TAIL};
use super::*;
use abi::io_uring::{IoUringParams, IORING_SETUP_CQE32};

/// An instance whose files are nothing (none is registered here).
type Ring = IoUring<()>;

fn instance(entries: u32, flags: u32) -> (Ring, OwnedFd) {
    let space = mm::SharedSpace::new();
    let p = IoUringParams {
        flags,
        ..IoUringParams::default()
    };
    let g = Geometry::new(entries, &p).unwrap();
    IoUring::create(&space, flags, g, 1, 0).unwrap()
}

fn word(r: &Ring, at: u64) -> u32 {
    r.rings.load_u32(at).unwrap()
}

/// Queues a NOP with `data` in slot `slot`, naming entry `index` in the array.
fn queue(r: &Ring, slot: u32, index: u32, data: u64) {
    let sqe = Sqe {
        user_data: data,
        ..Sqe::default()
    };
    r.sqes
        .write_bytes(r.geometry.sqe_at(index), abi::pod::as_bytes(&sqe))
        .unwrap();
    let array = r.geometry.sq_array.unwrap();
    r.rings
        .store_u32(
            array + 4 * u64::from(slot & (r.geometry.sq_entries - 1)),
            index,
        )
        .unwrap();
}

fn cqe(data: u64, res: i32) -> Cqe {
    Cqe {
        user_data: data,
        res,
        flags: 0,
    }
}

/// The completion in slot `i` of the queue.
fn slot(r: &Ring, i: u32) -> Cqe {
    let mut b = [0u8; 16];
    r.rings.read_bytes(r.geometry.cqe_at(i), &mut b).unwrap();
    abi::pod::from_bytes(&b).unwrap()
}

#[test]
fn the_header_is_written_at_creation() {
    let (r, _ep) = instance(3, 0);
    assert_eq!(word(&r, layout::SQ_MASK), 3);
    assert_eq!(word(&r, layout::CQ_MASK), 7);
    assert_eq!(word(&r, layout::SQ_ENTRIES), 4);
    assert_eq!(word(&r, layout::CQ_ENTRIES), 8);
    assert_eq!(word(&r, SQ_FLAGS), 0);
}

#[test]
fn entries_are_fetched_through_the_index_array() {
    let (r, _ep) = instance(4, 0);
    queue(&r, 0, 2, 20);
    queue(&r, 1, 0, 10);
    r.rings.store_u32(SQ_TAIL, 2).unwrap();
    let mut sq = r.lock_sq();
    assert_eq!(r.queued(&sq).unwrap(), 2);
    let got: Vec<u64> = (0..2)
        .map(|_| match r.fetch(&mut sq).unwrap() {
            Fetched::Entry(s) => s.user_data,
            Fetched::Dropped => 0,
        })
        .collect();
    assert_eq!(got, [20, 10]);
    // The head moves only at the commit.
    assert_eq!(word(&r, SQ_HEAD), 0);
    r.commit(&sq).unwrap();
    assert_eq!(word(&r, SQ_HEAD), 2);
    assert_eq!(r.queued(&sq).unwrap(), 0);
}

#[test]
fn hostile_submission_words_stay_inside_the_queue() {
    let (r, _ep) = instance(4, 0);
    // An index past the entries: dropped and counted.
    queue(&r, 0, 0, 1);
    r.rings
        .store_u32(r.geometry.sq_array.unwrap(), 1000)
        .unwrap();
    // A tail far ahead of the head: at most the queue's size.
    r.rings.store_u32(SQ_TAIL, 1_000_000).unwrap();
    let mut sq = r.lock_sq();
    assert_eq!(r.queued(&sq).unwrap(), 4);
    assert!(matches!(r.fetch(&mut sq).unwrap(), Fetched::Dropped));
    assert_eq!(word(&r, SQ_DROPPED), 1);
    // A tail behind the head (wrapping): still capped.
    r.rings.store_u32(SQ_TAIL, 0).unwrap();
    assert_eq!(r.queued(&sq).unwrap(), 4);
}

#[test]
fn completions_overflow_and_come_back_in_order() {
    let (r, _ep) = instance(1, 0);
    // Two slots: the third completion waits in the overflow list.
    for d in 1..=3 {
        r.post(cqe(d, d as i32), true, true);
    }
    assert_eq!(word(&r, CQ_TAIL), 2);
    assert_eq!(
        word(&r, SQ_FLAGS) & IORING_SQ_CQ_OVERFLOW,
        IORING_SQ_CQ_OVERFLOW
    );
    assert_eq!(r.available(false), (3, false));
    assert_eq!((slot(&r, 0).user_data, slot(&r, 1).user_data), (1, 2));
    // The application consumes one: the overflowed one takes the free slot.
    r.rings.store_u32(CQ_HEAD, 1).unwrap();
    assert_eq!(r.available(false), (2, false));
    assert_eq!(slot(&r, 2).user_data, 3);
    assert_eq!(word(&r, SQ_FLAGS) & IORING_SQ_CQ_OVERFLOW, 0);
    assert_eq!(r.completions(), 3);
}

#[test]
fn completions_past_the_overflow_limit_are_lost_and_reported_once() {
    let (r, _ep) = instance(1, 0);
    for d in 0..(MAX_OVERFLOW as u64 + 2 + 5) {
        r.post(cqe(d, 0), true, true);
    }
    assert_eq!(word(&r, CQ_OVERFLOW), 5);
    assert!(r.available(true).1);
    assert!(!r.available(true).1);
}

#[test]
fn a_wild_completion_head_loses_nothing() {
    let (r, _ep) = instance(1, 0);
    // A head far from the tail: the queue looks full, completions wait in the overflow list.
    r.rings.store_u32(CQ_HEAD, 0x8000_0000).unwrap();
    r.post(cqe(1, 0), true, true);
    assert_eq!(word(&r, CQ_TAIL), 0);
    let (n, lost) = r.available(false);
    assert!(n <= r.geometry.cq_entries + 1 && !lost);
    r.rings.store_u32(CQ_HEAD, 0).unwrap();
    r.available(false);
    assert_eq!(slot(&r, 0).user_data, 1);
}

#[test]
fn big_completions_have_their_second_half_zeroed() {
    let (r, _ep) = instance(1, IORING_SETUP_CQE32);
    assert_eq!(r.geometry.cqe_size, 32);
    r.rings.write_bytes(CQES + 16, &[0xff; 16]).unwrap();
    r.post(cqe(7, 3), true, true);
    let mut b = [0u8; 32];
    r.rings.read_bytes(CQES, &mut b).unwrap();
    assert_eq!(&b[..8], &7u64.to_le_bytes());
    assert_eq!(&b[16..], &[0u8; 16]);
}

#[test]
fn the_descriptor_is_readable_while_completions_wait() {
    use std::os::fd::AsRawFd;
    let (r, ep) = instance(2, 0);
    let readable = || {
        let mut p = [libc::pollfd {
            fd: ep.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        host::ppoll(&mut p, Some(&zero)).unwrap() == 1
    };
    assert!(!readable());
    r.post(cqe(1, 0), true, true);
    assert!(readable());
    r.rings.store_u32(CQ_HEAD, 1).unwrap();
    assert_eq!(r.available(false).0, 0);
    assert!(!readable());
}
