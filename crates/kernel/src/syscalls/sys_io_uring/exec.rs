//! Submission and completion: the entries of one io_uring_enter(2) fetched, checked and
//! grouped into link chains; the chains run in order; a request that must wait becomes
//! [`Pending`] with the rest of its chain, and runs when its file is ready, its time or
//! count comes, or its turn (`IOSQE_IO_DRAIN`), in a later io_uring_enter(2) of the same
//! process.
//!
//! Link chains (`IOSQE_IO_LINK`, `IOSQE_IO_HARDLINK`) run one request after the other; a
//! failed request (an error, a short read or write) of an `IOSQE_IO_LINK` completes the rest
//! with ECANCELED. A chain with an entry that failed its checks does not run: that entry
//! completes with its error, the others with ECANCELED. An `IORING_OP_LINK_TIMEOUT` after a
//! request bounds its wait: the request is cancelled (ECANCELED) and the timeout completes
//! with ETIME; a request that completes in time completes its linked timeout with ECANCELED.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use abi::io_uring::{
    op, Cqe, Sqe, IORING_CQE_F_MORE, IORING_SETUP_SUBMIT_ALL, IORING_TIMEOUT_ETIME_SUCCESS,
    IORING_TIMEOUT_MULTISHOT, IOSQE_CQE_SKIP_SUCCESS, IOSQE_IO_DRAIN, IOSQE_IO_HARDLINK,
    IOSQE_IO_LINK,
};
use abi::Errno;

use super::ops::{self, Outcome};
use crate::fd::{host, FileKind, OpenFile, Ring};
use crate::io_uring::{Fetched, Pending, Wait};
use crate::task::Task;

/// A link chain as submitted: each entry with the error of its checks, if it failed them.
type Chain = Vec<(Sqe, Option<Errno>)>;

/// Why a pending request runs again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resume {
    /// Its file is ready.
    Ready,
    /// It is the first pending request (its drain is over), or was interrupted by a park.
    Turn,
    /// Its timeout's count of completions was reached.
    Count,
    /// Its deadline passed.
    Expired,
    /// The io_uring descriptor it polls was closed: it is cancelled.
    Gone,
}

/// Fetches and runs up to `n` submission entries (Linux's `io_submit_sqes`): how many were
/// consumed. The batch stops at an entry whose index is bad (not counted) and after an
/// entry that fails its checks (counted, unless `IORING_SETUP_SUBMIT_ALL`).
///
/// # Errors
/// EFAULT if the rings cannot be read (the host memory behind them failed).
pub(super) fn submit(t: &mut Task, ring: &Arc<Ring>, n: u32) -> Result<u32, Errno> {
    let mut chains: Vec<Chain> = Vec::new();
    let mut count = 0u32;
    {
        let mut sq = ring.lock_sq();
        let n = n.min(ring.queued(&sq).map_err(|_| Errno::EFAULT)?);
        let mut cur: Chain = Vec::new();
        for _ in 0..n {
            let sqe = match ring.fetch(&mut sq) {
                Ok(Fetched::Entry(s)) => s,
                Ok(Fetched::Dropped) | Err(_) => break,
            };
            count += 1;
            let prev = cur.last().map(|(s, _)| s.opcode);
            let checked = ops::prep(t, ring, &sqe, prev).err();
            let linked = sqe.flags & (IOSQE_IO_LINK | IOSQE_IO_HARDLINK) != 0;
            cur.push((sqe, checked));
            if !linked {
                chains.push(std::mem::take(&mut cur));
                if checked.is_some() && ring.flags & IORING_SETUP_SUBMIT_ALL == 0 {
                    break;
                }
            }
        }
        // A chain the batch cut is submitted as it is.
        if !cur.is_empty() {
            chains.push(cur);
        }
        ring.commit(&sq).map_err(|_| Errno::EFAULT)?;
    }
    for chain in chains {
        start(t, ring, chain);
    }
    Ok(count)
}

/// Runs a submitted chain.
fn start(t: &mut Task, ring: &Arc<Ring>, chain: Chain) {
    if chain.iter().any(|(_, e)| e.is_some()) {
        for (sqe, e) in &chain {
            complete(ring, sqe, -e.unwrap_or(Errno::ECANCELED).0, 0, true);
        }
        return;
    }
    let drain = chain.iter().any(|(s, _)| s.flags & IOSQE_IO_DRAIN != 0);
    let sqes: VecDeque<Sqe> = chain.into_iter().map(|(s, _)| s).collect();
    let must_wait = {
        let pending = ring.lock_pending();
        if drain {
            !pending.is_empty()
        } else {
            pending.iter().any(|p| p.blocks_later)
        }
    };
    if must_wait {
        defer(t, ring, sqes, Wait::Order, None, drain, 0);
        return;
    }
    run(t, ring, sqes, false, true, None, None, drain);
}

/// Posts the completion of `sqe` (none for a success with `IOSQE_CQE_SKIP_SUCCESS`).
fn complete(ring: &Ring, sqe: &Sqe, res: i32, flags: u32, inline: bool) {
    if sqe.flags & IOSQE_CQE_SKIP_SUCCESS != 0 && res >= 0 && flags & IORING_CQE_F_MORE == 0 {
        return;
    }
    let counts = !matches!(sqe.opcode, op::TIMEOUT | op::LINK_TIMEOUT);
    ring.post(
        Cqe {
            user_data: sqe.user_data,
            res,
            flags,
        },
        inline,
        counts,
    );
}

/// Whether a failure of `sqe` cancels the rest of its chain (`IOSQE_IO_LINK`, not
/// `IOSQE_IO_HARDLINK`).
fn severs(sqe: &Sqe) -> bool {
    sqe.flags & IOSQE_IO_HARDLINK == 0
}

/// Runs `chain` from its first request: `failed` cancels it all; `inline` for a chain run in
/// the call that submitted it; `deadline` bounds the first request's wait (a linked
/// timeout's, kept across waits); `resume` says why a pending first request runs again;
/// `drain` keeps later requests waiting while the chain waits.
#[allow(clippy::too_many_arguments)]
fn run(
    t: &mut Task,
    ring: &Arc<Ring>,
    mut chain: VecDeque<Sqe>,
    mut failed: bool,
    inline: bool,
    mut deadline: Option<Instant>,
    mut resume: Option<Resume>,
    drain: bool,
) {
    while let Some(sqe) = chain.pop_front() {
        if failed {
            complete(ring, &sqe, -Errno::ECANCELED.0, 0, inline);
            continue;
        }
        let outcome = match resume.take() {
            Some(Resume::Count) => Outcome::Done {
                res: 0,
                fail: false,
            },
            Some(Resume::Expired) if sqe.opcode == op::TIMEOUT => {
                // A multishot timeout fires `off` times (for ever when 0), each but the last
                // with IORING_CQE_F_MORE, and waits for its next period.
                if sqe.op_flags & IORING_TIMEOUT_MULTISHOT != 0 && sqe.off != 1 {
                    complete(ring, &sqe, -Errno::ETIME.0, IORING_CQE_F_MORE, inline);
                    let mut next = sqe;
                    next.off = sqe.off.saturating_sub(1);
                    let relative = sqe.op_flags & !abi::io_uring::IORING_TIMEOUT_ABS;
                    let at = ops::read_timeout(t, sqe.addr)
                        .map(|ts| ops::deadline(ts, relative))
                        .unwrap_or_else(|_| Instant::now() + Duration::from_secs(1));
                    chain.push_front(next);
                    defer(t, ring, chain, Wait::Never, Some(at), drain, 0);
                    return;
                }
                Outcome::Done {
                    res: -Errno::ETIME.0,
                    fail: true,
                }
            }
            Some(Resume::Gone) => Outcome::Done {
                res: -Errno::ECANCELED.0,
                fail: true,
            },
            Some(Resume::Expired) => {
                // Its linked timeout fired: the request is cancelled, then the timeout
                // completes with ETIME (the order Linux posts them in); the chain goes on as
                // after a failure.
                complete(ring, &sqe, -Errno::ECANCELED.0, 0, inline);
                if chain.front().is_some_and(|n| n.opcode == op::LINK_TIMEOUT) {
                    if let Some(lt) = chain.pop_front() {
                        complete(ring, &lt, -Errno::ETIME.0, 0, inline);
                    }
                }
                failed = severs(&sqe);
                deadline = None;
                continue;
            }
            _ => ops::issue(t, ring, &sqe),
        };
        let outcome = match outcome {
            Outcome::Cancel { matches, all } => {
                let res = cancel(t, ring, &*matches, all);
                Outcome::Done { res, fail: res < 0 }
            }
            // A blocking call a park interrupted: it runs again after the park.
            Outcome::Done { res, .. } if res == -Errno::EINTR.0 && t.control.park_requested() => {
                Outcome::Wait(Wait::Again)
            }
            o => o,
        };
        match outcome {
            Outcome::Done { res, fail } => {
                let fail = fail
                    && !(sqe.opcode == op::TIMEOUT
                        && res == -Errno::ETIME.0
                        && sqe.op_flags & IORING_TIMEOUT_ETIME_SUCCESS != 0);
                complete(ring, &sqe, res, 0, inline);
                // Its linked timeout: the request completed in time.
                if chain.front().is_some_and(|n| n.opcode == op::LINK_TIMEOUT) {
                    if let Some(lt) = chain.pop_front() {
                        complete(ring, &lt, -Errno::ECANCELED.0, 0, inline);
                    }
                }
                failed = fail && severs(&sqe);
                deadline = None;
            }
            Outcome::Wait(w) => {
                let dl = deadline.or_else(|| linked_deadline(t, &chain));
                chain.push_front(sqe);
                defer(t, ring, chain, w, dl, drain, 0);
                return;
            }
            Outcome::Timer(w, at) => {
                chain.push_front(sqe);
                defer(t, ring, chain, w, Some(at), drain, 0);
                return;
            }
            Outcome::Cancel { .. } => unreachable!("a cancellation is done above"),
            Outcome::More(res, w) => {
                complete(ring, &sqe, res, IORING_CQE_F_MORE, inline);
                let fired = if sqe.opcode == op::POLL_ADD {
                    ring.enter_count()
                } else {
                    0
                };
                chain.push_front(sqe);
                defer(t, ring, chain, w, deadline, drain, fired);
                return;
            }
        }
    }
}

/// The deadline of the linked timeout at the front of `rest` (the request before it waits
/// from now).
fn linked_deadline(t: &Task, rest: &VecDeque<Sqe>) -> Option<Instant> {
    let lt = rest.front().filter(|s| s.opcode == op::LINK_TIMEOUT)?;
    Some(match ops::read_timeout(t, lt.addr) {
        Ok(ts) => ops::deadline(ts, lt.op_flags),
        Err(_) => Instant::now(),
    })
}

/// Makes `chain` pending, its first request waiting for `wait`.
fn defer(
    t: &Task,
    ring: &Arc<Ring>,
    chain: VecDeque<Sqe>,
    wait: Wait<OpenFile>,
    deadline: Option<Instant>,
    blocks_later: bool,
    fired_in: u64,
) {
    let wait = match wait {
        Wait::Ready { file, events } if matches!(file.kind, FileKind::IoUring(_)) => {
            Wait::ReadyWeak {
                file: Arc::downgrade(&file),
                events,
            }
        }
        w => w,
    };
    let p = Pending {
        id: ring.next_id(),
        pid: t.pid,
        chain,
        failed: false,
        wait,
        deadline,
        blocks_later,
        fired_in,
    };
    ring.lock_pending().push(p);
    ring.notify();
}

/// Cancels the pending requests whose first entry `matches` (the first one only unless
/// `all`): each completes with ECANCELED, then the rest of its chain runs as after a failure.
/// The cancelling request's result: 0 (the count with `all`), or ENOENT.
fn cancel(t: &mut Task, ring: &Arc<Ring>, matches: &dyn Fn(&Sqe) -> bool, all: bool) -> i32 {
    let removed: Vec<Pending<OpenFile>> = {
        let mut pending = ring.lock_pending();
        let mut out = Vec::new();
        let mut i = 0;
        while i < pending.len() {
            if pending[i].chain.front().is_some_and(matches) && (all || out.is_empty()) {
                out.push(pending.remove(i));
            } else {
                i += 1;
            }
        }
        out
    };
    if removed.is_empty() {
        return -Errno::ENOENT.0;
    }
    let n = removed.len();
    for mut p in removed {
        let Some(first) = p.chain.pop_front() else {
            continue;
        };
        complete(ring, &first, -Errno::ECANCELED.0, 0, true);
        if p.chain
            .front()
            .is_some_and(|n| n.opcode == op::LINK_TIMEOUT)
        {
            if let Some(lt) = p.chain.pop_front() {
                complete(ring, &lt, -Errno::ECANCELED.0, 0, true);
            }
        }
        // The rest runs in the submitter's process only (its memory); elsewhere it is
        // cancelled too.
        let failed = severs(&first) || p.pid != t.pid;
        run(t, ring, p.chain, failed, true, None, None, false);
    }
    ring.notify();
    if all {
        n as i32
    } else {
        0
    }
}

/// What a pending request needs polled.
struct Poll {
    id: u64,
    fd: i32,
    events: i16,
    /// Keeps the file open across the poll.
    _file: Arc<crate::fd::OpenFile>,
}

/// The pending requests of `t`'s process, seen at `now`: those that may run (with why),
/// those that need their file polled, and the nearest deadline.
fn survey(
    t: &Task,
    ring: &Ring,
    now: Instant,
    call: u64,
) -> (Vec<(u64, Resume)>, Vec<Poll>, Option<Instant>) {
    let pending = ring.lock_pending();
    let completions = ring.completions();
    let mut ready = Vec::new();
    let mut polls = Vec::new();
    let mut nearest: Option<Instant> = None;
    for (i, p) in pending.iter().enumerate() {
        if p.pid != t.pid {
            continue;
        }
        if let Some(d) = p.deadline {
            if d <= now {
                ready.push((p.id, Resume::Expired));
                continue;
            }
            nearest = Some(nearest.map_or(d, |n| n.min(d)));
        }
        match &p.wait {
            Wait::Order if i == 0 => ready.push((p.id, Resume::Turn)),
            Wait::Again => ready.push((p.id, Resume::Turn)),
            Wait::Count(n) if completions >= *n => ready.push((p.id, Resume::Count)),
            // A multishot poll completes once per io_uring_enter(2).
            Wait::Ready { .. } if p.fired_in == call && call != 0 => {}
            Wait::Ready { file, events } => polls.push(Poll {
                id: p.id,
                fd: file.host().as_raw_fd(),
                events: *events,
                _file: file.clone(),
            }),
            Wait::ReadyWeak { .. } if p.fired_in == call && call != 0 => {}
            Wait::ReadyWeak { file, events } => match file.upgrade() {
                Some(file) => polls.push(Poll {
                    id: p.id,
                    fd: file.host().as_raw_fd(),
                    events: *events,
                    _file: file,
                }),
                None => ready.push((p.id, Resume::Gone)),
            },
            _ => {}
        }
    }
    (ready, polls, nearest)
}

/// Most rounds of [`progress`] in one call (a file that polls ready but whose request waits
/// again, over and over, must not hold the call).
const MAX_ROUNDS: usize = 64;

/// Runs the pending requests of `t`'s process that may run now; `timeout` bounds a wait for
/// one to become ready (None: no wait), during which another thread's completion or new
/// request (the ring's wake eventfd) also ends the wait. Returns whether one ran.
///
/// # Errors
/// EINTR when the wait was interrupted (a signal, a park: the caller checks which).
pub(super) fn progress(
    t: &mut Task,
    ring: &Arc<Ring>,
    timeout: Option<Instant>,
) -> Result<bool, Errno> {
    let call = ring.enter_count();
    let mut ran = false;
    let mut timeout = timeout;
    for round in 0..MAX_ROUNDS {
        // A park stops here (a request it interrupted waits for the next look).
        if round > 0 && t.control.park_requested() {
            break;
        }
        let now = Instant::now();
        let (mut ready, polls, nearest) = survey(t, ring, now, call);
        let mut fds: Vec<libc::pollfd> = polls
            .iter()
            .map(|p| libc::pollfd {
                fd: p.fd,
                events: p.events,
                revents: 0,
            })
            .collect();
        // Wait only when nothing is ready yet.
        let wait_until = match timeout {
            Some(until) if ready.is_empty() => Some(match nearest {
                Some(n) => n.min(until),
                None => until,
            }),
            _ => None,
        };
        let generation = ring.generation();
        if let Some(until) = wait_until {
            fds.push(libc::pollfd {
                fd: ring.wake_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            let left = until.saturating_duration_since(now);
            let ts = libc::timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            if ring.generation() == generation {
                host::ppoll(&mut fds, Some(&ts))?;
            }
            ring.clear_wake();
            // One wait per call: the caller checks its condition again.
            timeout = None;
        } else if !fds.is_empty() {
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            host::ppoll(&mut fds, Some(&zero))?;
        }
        for (p, f) in polls.iter().zip(&fds) {
            if f.revents != 0 {
                ready.push((p.id, Resume::Ready));
            }
        }
        // Expired deadlines found after the wait.
        if ready.is_empty() && wait_until.is_some() {
            let (again, _, _) = survey(t, ring, Instant::now(), call);
            ready = again
                .into_iter()
                .filter(|(_, r)| matches!(r, Resume::Expired | Resume::Count))
                .collect();
        }
        if ready.is_empty() {
            return Ok(ran);
        }
        // In submission order.
        let order: Vec<u64> = ring.lock_pending().iter().map(|p| p.id).collect();
        ready.sort_by_key(|(id, _)| order.iter().position(|o| o == id));
        for (id, why) in ready {
            let taken = {
                let mut pending = ring.lock_pending();
                pending
                    .iter()
                    .position(|p| p.id == id)
                    .map(|i| pending.remove(i))
            };
            let Some(p) = taken else {
                continue;
            };
            ran = true;
            let Pending {
                chain,
                failed,
                deadline,
                blocks_later,
                ..
            } = p;
            run(
                t,
                ring,
                chain,
                failed,
                false,
                deadline,
                Some(why),
                blocks_later,
            );
        }
        if !ran {
            return Ok(false);
        }
    }
    Ok(ran)
}

/// Cancels the pending requests of processes that are gone (their memory went with them):
/// each of their requests completes with ECANCELED.
pub(super) fn reap_orphans(t: &Task, ring: &Ring) {
    let procs = &t.group.procs;
    let orphans: Vec<Pending<OpenFile>> = {
        let mut pending = ring.lock_pending();
        let mut out = Vec::new();
        let mut i = 0;
        while i < pending.len() {
            let pid = pending[i].pid;
            if pid != t.pid && procs.group_of(pid).is_none() {
                out.push(pending.remove(i));
            } else {
                i += 1;
            }
        }
        out
    };
    for p in orphans {
        for sqe in &p.chain {
            complete(ring, sqe, -Errno::ECANCELED.0, 0, false);
        }
    }
}
