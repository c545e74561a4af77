//! poll, ppoll, pselect6 and epoll over host fds.
//!
//! Every guest descriptor is a host fd, so readiness is the host's: the guest's pollfd array
//! or fd_sets are translated to host fds and handed to the host's ppoll(2); a guest epoll
//! instance is a host epoll instance, and epoll_ctl(2) registers the host fd behind the guest
//! fd with the guest's `data` unchanged, so the host's epoll_wait(2) returns exactly what the
//! guest expects. The calls block in the host (one vCPU per host thread) holding no lock.
//!
//! Differences from Linux:
//! - The host epoll keys registrations by host fd (really by host open file description).
//!   Linux keys them by (file, fd number): there a guest may register both an fd and its dup
//!   separately; here the second `EPOLL_CTL_ADD` fails with EEXIST, since dup'ed guest fds
//!   share one host fd. As on Linux, a registration lasts until the last descriptor of the
//!   file is closed.
//! - The signal mask arguments of ppoll, pselect6 and epoll_pwait are checked and ignored.
//! - A host EINTR (a signal to the vCPU thread) reaches the guest as EINTR.

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use abi::structs::Timespec;
use abi::Errno;
use platform::Gva;

use super::{SysResult, SyscallArgs};
use crate::fd::{FdTable, FileKind, OpenFile, MAX_FDS};
use crate::task::Task;

/// `sizeof(struct pollfd)`.
const POLLFD_SIZE: usize = 8;
/// `sizeof(struct epoll_event)` on x86-64 (packed).
const EPOLL_EVENT_SIZE: usize = 12;
/// Most events fetched from the host per epoll_wait(2), unless the caller has more descriptors
/// open (a host epoll reports each ready file once per call, so it never has more events to
/// report than the sandbox has open files: a process with N descriptors gets up to N, as on
/// Linux).
const MAX_EPOLL_EVENTS: usize = 1024;
/// Linux's EP_MAX_EVENTS.
const EP_MAX_EVENTS: i32 = i32::MAX / EPOLL_EVENT_SIZE as i32;
/// The guest's `sizeof(sigset_t)`.
const SIGSET_SIZE: u64 = 8;

/// Linux's POLLIN_SET, POLLOUT_SET and POLLEX_SET: the poll events behind select's three sets.
const POLLIN_SET: i16 =
    libc::POLLRDNORM | libc::POLLRDBAND | libc::POLLIN | libc::POLLHUP | libc::POLLERR;
const POLLOUT_SET: i16 = libc::POLLWRBAND | libc::POLLWRNORM | libc::POLLOUT | libc::POLLERR;
const POLLEX_SET: i16 = libc::POLLPRI;

// ---------------------------------------------------------------------------------------------
// pollfd translation.

/// A guest pollfd array translated for the host.
struct PollSet {
    /// Host pollfds, one per guest entry (fd -1 where the host must ignore it).
    host: Vec<libc::pollfd>,
    /// Entries for a closed guest fd: revents is POLLNVAL.
    nval: Vec<bool>,
    /// The files behind the host fds, kept open across the host call.
    _files: Vec<Arc<OpenFile>>,
}

/// Decodes `raw` (guest pollfds) against `fds`: a negative fd is ignored (revents 0), a
/// closed one is POLLNVAL without reaching the host.
fn translate_pollfds(fds: &FdTable, raw: &[u8]) -> PollSet {
    let n = raw.len() / POLLFD_SIZE;
    let mut set = PollSet {
        host: Vec::with_capacity(n),
        nval: Vec::with_capacity(n),
        _files: Vec::new(),
    };
    for c in raw.chunks_exact(POLLFD_SIZE) {
        let fd = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        let events = i16::from_le_bytes([c[4], c[5]]);
        let (hfd, nval) = if fd < 0 {
            (-1, false)
        } else {
            match fds.get(fd) {
                Ok(f) => {
                    let h = f.host().as_raw_fd();
                    set._files.push(f);
                    (h, false)
                }
                Err(_) => (-1, true),
            }
        };
        set.host.push(libc::pollfd {
            fd: hfd,
            events,
            revents: 0,
        });
        set.nval.push(nval);
    }
    set
}

/// Writes the results back into the guest pollfd bytes; returns how many entries have
/// events.
fn pollfd_results(set: &PollSet, raw: &mut [u8]) -> u64 {
    let mut count = 0;
    for ((c, h), &nval) in raw
        .chunks_exact_mut(POLLFD_SIZE)
        .zip(&set.host)
        .zip(&set.nval)
    {
        let revents = if nval { libc::POLLNVAL } else { h.revents };
        c[6..8].copy_from_slice(&revents.to_le_bytes());
        if revents != 0 {
            count += 1;
        }
    }
    count
}

// ---------------------------------------------------------------------------------------------
// Timeouts.

/// A guest timespec as the host's, checked as Linux's `timespec64_valid` (EINVAL otherwise).
fn host_timespec(ts: Timespec) -> Result<libc::timespec, Errno> {
    ts.to_duration()?;
    Ok(libc::timespec {
        tv_sec: ts.sec,
        tv_nsec: ts.nsec,
    })
}

/// poll(2)'s millisecond timeout: negative is forever.
fn ms_timeout(ms: i32) -> Option<libc::timespec> {
    (ms >= 0).then(|| libc::timespec {
        tv_sec: i64::from(ms / 1000),
        tv_nsec: i64::from(ms % 1000) * 1_000_000,
    })
}

/// The time left of `ts` after `elapsed`.
fn remaining(ts: &libc::timespec, elapsed: Duration) -> Timespec {
    let total = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
    Timespec::from_duration(total.saturating_sub(elapsed))
}

/// Reads an optional timespec argument.
fn read_timespec(t: &Task, addr: Gva) -> Result<Option<libc::timespec>, Errno> {
    if addr.0 == 0 {
        return Ok(None);
    }
    host_timespec(t.read_val(addr)?).map(Some)
}

/// Stores the time left back into the guest's timespec, as Linux's ppoll and pselect6 do (a
/// failure to store it is ignored, as there).
fn write_back_timeout(t: &Task, addr: Gva, ts: Option<&libc::timespec>, start: Instant) {
    if let Some(ts) = ts {
        let _ = t.write_val(addr, &remaining(ts, start.elapsed()));
    }
}

/// Reads the optional signal mask argument of ppoll, pselect6 and epoll_pwait: EINVAL for a
/// size other than a sigset's, EFAULT for a bad pointer.
pub(super) fn read_sigmask(t: &Task, mask: Gva, size: u64) -> Result<Option<u64>, Errno> {
    if mask.0 == 0 {
        return Ok(None);
    }
    if size != SIGSET_SIZE {
        return Err(Errno::EINVAL);
    }
    t.read_u64(mask).map(Some)
}

/// Runs `wait` with the signal mask `mask` in place of the caller's, as ppoll, pselect6 and
/// epoll_pwait do atomically: a signal the temporary mask unblocks interrupts the wait
/// (EINTR, at once if one is already pending), one it blocks does not. The caller's mask is
/// back when the call returns, or, when a handler interrupted it, once that handler returns
/// (its frame saves the caller's mask, as for rt_sigsuspend).
pub(super) fn with_sigmask(
    t: &mut Task,
    mask: Option<u64>,
    wait: impl FnOnce(&mut Task) -> SysResult,
) -> SysResult {
    let Some(m) = mask else {
        return wait(t);
    };
    // Restarted after an interruption nobody handled: the caller's mask is already saved.
    if t.signals.saved_mask.is_none() {
        t.signals.saved_mask = Some(t.signals.mask);
    }
    t.signals.set_mask(m);
    t.absorb_external_signal();
    let r = if t.signals.has_deliverable() {
        Err(Errno::EINTR)
    } else {
        wait(t)
    };
    if r != Err(Errno::EINTR) {
        if let Some(old) = t.signals.saved_mask.take() {
            t.signals.set_mask(old);
        }
    }
    r
}

// ---------------------------------------------------------------------------------------------
// poll and ppoll.

fn do_poll(t: &mut Task, ufds: Gva, nfds: u32, timeout: Option<libc::timespec>) -> SysResult {
    if nfds as usize > MAX_FDS {
        return Err(Errno::EINVAL);
    }
    let mut raw = vec![0u8; nfds as usize * POLLFD_SIZE];
    if !raw.is_empty() {
        t.copy_in(ufds, &mut raw)?;
    }
    let mut set = translate_pollfds(&t.fds, &raw);
    // A POLLNVAL entry is already an event: do not wait.
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let timeout = if set.nval.iter().any(|&v| v) {
        Some(zero)
    } else {
        timeout
    };
    crate::fd::host::ppoll(&mut set.host, timeout.as_ref())?;
    let n = pollfd_results(&set, &mut raw);
    if !raw.is_empty() {
        t.copy_out(ufds, &raw)?;
    }
    Ok(n)
}

/// Implements poll(2).
pub fn sys_poll(t: &mut Task, a: &SyscallArgs) -> SysResult {
    do_poll(t, a.gva(0), a.u(1) as u32, ms_timeout(a.int(2)))
}

/// Implements ppoll(2), with its signal mask in place while it waits; the time left is
/// stored back into `*tmo_p`, as Linux does.
pub fn sys_ppoll(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let ts = read_timespec(t, a.gva(2))?;
    let mask = read_sigmask(t, a.gva(3), a.u(4))?;
    let start = Instant::now();
    let r = with_sigmask(t, mask, |t| do_poll(t, a.gva(0), a.u(1) as u32, ts));
    write_back_timeout(t, a.gva(2), ts.as_ref(), start);
    r
}

// ---------------------------------------------------------------------------------------------
// pselect6.

/// Bytes of an fd_set of `n` bits as Linux copies it (whole longs).
fn fd_set_bytes(n: usize) -> usize {
    n.div_ceil(64) * 8
}

fn bit(set: &[u8], fd: usize) -> bool {
    set.get(fd / 8).is_some_and(|b| b & (1 << (fd % 8)) != 0)
}

fn set_bit(set: &mut [u8], fd: usize) {
    if let Some(b) = set.get_mut(fd / 8) {
        *b |= 1 << (fd % 8);
    }
}

/// Turns select's three sets (`None` for a null pointer) into pollfds over the first `n` fds.
/// Returns (guest fd, requested events) pairs; EBADF for a set bit on a closed fd.
fn select_to_poll(
    n: usize,
    sets: &[Option<Vec<u8>>; 3],
    is_open: impl Fn(i32) -> bool,
) -> Result<Vec<(i32, i16)>, Errno> {
    let masks = [POLLIN_SET, POLLOUT_SET, POLLEX_SET];
    let mut out = Vec::new();
    for fd in 0..n {
        let mut events = 0i16;
        for (s, m) in sets.iter().zip(masks) {
            if s.as_deref().is_some_and(|s| bit(s, fd)) {
                events |= m;
            }
        }
        if events != 0 {
            let gfd = fd as i32;
            if !is_open(gfd) {
                return Err(Errno::EBADF);
            }
            out.push((gfd, events));
        }
    }
    Ok(out)
}

/// Fills select's result sets from poll results; returns the number of set bits.
fn poll_to_select(
    n: usize,
    polled: &[(i32, i16)],
    revents: &[i16],
    sets: &[Option<Vec<u8>>; 3],
) -> ([Option<Vec<u8>>; 3], u64) {
    let mut out: [Option<Vec<u8>>; 3] =
        [0, 1, 2].map(|i| sets[i].as_ref().map(|_| vec![0u8; fd_set_bytes(n)]));
    let masks = [POLLIN_SET, POLLOUT_SET, POLLEX_SET];
    let mut count = 0;
    for (&(fd, _), &rev) in polled.iter().zip(revents) {
        let fd = fd as usize;
        for ((inp, o), m) in sets.iter().zip(out.iter_mut()).zip(masks) {
            if let (Some(inp), Some(o)) = (inp, o) {
                if bit(inp, fd) && rev & m != 0 {
                    set_bit(o, fd);
                    count += 1;
                }
            }
        }
    }
    (out, count)
}

/// Whether the process runs under personality(STICKY_TIMEOUTS): select and pselect6 leave
/// the timeout as it was instead of storing the time left.
fn sticky_timeouts(t: &Task) -> bool {
    const STICKY_TIMEOUTS: u32 = 0x0400_0000;
    t.group
        .personality
        .load(std::sync::atomic::Ordering::Relaxed)
        & STICKY_TIMEOUTS
        != 0
}

/// Implements pselect6(2) on top of the host's ppoll(2), with its signal mask in place while
/// it waits; the time left is stored back, as Linux does.
pub fn sys_pselect6(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let ts_addr = a.gva(4);
    let ts = read_timespec(t, ts_addr)?;
    // The sixth argument points at { const sigset_t *ss; size_t ss_len; }.
    let sig = a.gva(5);
    let mask = if sig.0 != 0 {
        let mut b = [0u8; 16];
        t.copy_in(sig, &mut b)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[..8]);
        let ss = u64::from_le_bytes(w);
        w.copy_from_slice(&b[8..]);
        read_sigmask(t, Gva(ss), u64::from_le_bytes(w))?
    } else {
        None
    };
    let sets = [a.gva(1), a.gva(2), a.gva(3)];
    let start = Instant::now();
    let r = with_sigmask(t, mask, |t| do_select(t, a.int(0), sets, ts));
    if !sticky_timeouts(t) {
        write_back_timeout(t, ts_addr, ts.as_ref(), start);
    }
    r
}

/// Implements select(2): pselect6 with a `timeval` timeout (the time left stored back, as
/// Linux does) and no signal mask.
pub fn sys_select(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let tv_addr = a.gva(4);
    let ts = if tv_addr.0 == 0 {
        None
    } else {
        let tv: abi::structs::Timeval = t.read_val(tv_addr)?;
        if tv.sec < 0 || !(0..1_000_000).contains(&tv.usec) {
            return Err(Errno::EINVAL);
        }
        Some(libc::timespec {
            tv_sec: tv.sec,
            tv_nsec: tv.usec * 1000,
        })
    };
    let start = Instant::now();
    let r = do_select(t, a.int(0), [a.gva(1), a.gva(2), a.gva(3)], ts);
    if let Some(ts) = ts.filter(|_| !sticky_timeouts(t)) {
        let left = remaining(&ts, start.elapsed());
        let _ = t.write_val(
            tv_addr,
            &abi::structs::Timeval {
                sec: left.sec,
                usec: left.nsec / 1000,
            },
        );
    }
    r
}

/// select's work: waits for the descriptors of the three sets (`readfds`, `writefds`,
/// `exceptfds`; null pointers for absent ones) and writes back those ready.
fn do_select(
    t: &mut Task,
    nfds: i32,
    set_addrs: [Gva; 3],
    ts: Option<libc::timespec>,
) -> SysResult {
    if nfds < 0 {
        return Err(Errno::EINVAL);
    }
    // Linux caps nfds at the size of the descriptor table.
    let n = (nfds as usize).min(MAX_FDS);
    let size = fd_set_bytes(n);
    let mut sets: [Option<Vec<u8>>; 3] = [None, None, None];
    for (i, s) in sets.iter_mut().enumerate() {
        let p = set_addrs[i];
        if p.0 != 0 {
            let mut b = vec![0u8; size];
            if size > 0 {
                t.copy_in(p, &mut b)?;
            }
            *s = Some(b);
        }
    }
    let polled = select_to_poll(n, &sets, |fd| t.fds.get(fd).is_ok())?;
    let files: Vec<Arc<OpenFile>> = polled
        .iter()
        .filter_map(|&(fd, _)| t.fds.get(fd).ok())
        .collect();
    let mut host: Vec<libc::pollfd> = polled
        .iter()
        .zip(&files)
        .map(|(&(_, events), f)| libc::pollfd {
            fd: f.host().as_raw_fd(),
            events,
            revents: 0,
        })
        .collect();
    crate::fd::host::ppoll(&mut host, ts.as_ref())?;
    let revents: Vec<i16> = host.iter().map(|h| h.revents).collect();
    let (out, count) = poll_to_select(n, &polled, &revents, &sets);
    for (i, o) in out.iter().enumerate() {
        if let Some(o) = o {
            if !o.is_empty() {
                t.copy_out(set_addrs[i], o)?;
            }
        }
    }
    drop(files);
    Ok(count)
}

// ---------------------------------------------------------------------------------------------
// epoll.

/// Decodes a packed `struct epoll_event`.
fn decode_epoll_event(b: &[u8; EPOLL_EVENT_SIZE]) -> libc::epoll_event {
    let events = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let mut d = [0u8; 8];
    d.copy_from_slice(&b[4..]);
    libc::epoll_event {
        events,
        u64: u64::from_le_bytes(d),
    }
}

/// Encodes events in the packed guest layout.
fn encode_epoll_events(evs: &[libc::epoll_event]) -> Vec<u8> {
    let mut out = Vec::with_capacity(evs.len() * EPOLL_EVENT_SIZE);
    for e in evs {
        // Copy the fields out of the (packed) host struct before borrowing them.
        let (events, data) = (e.events, e.u64);
        out.extend_from_slice(&events.to_le_bytes());
        out.extend_from_slice(&data.to_le_bytes());
    }
    out
}

/// Checks epoll_wait's maxevents; returns how many events to fetch from the host: at most
/// `open` (the caller's open descriptors) or [`MAX_EPOLL_EVENTS`], whichever is larger.
fn epoll_batch(maxevents: i32, open: usize) -> Result<usize, Errno> {
    if maxevents <= 0 || maxevents > EP_MAX_EVENTS {
        return Err(Errno::EINVAL);
    }
    Ok((maxevents as usize).min(MAX_EPOLL_EVENTS.max(open)))
}

fn epoll_file(t: &Task, epfd: i32) -> Result<Arc<OpenFile>, Errno> {
    let f = t.fds.get(epfd)?;
    if !matches!(f.kind, FileKind::Epoll) {
        return Err(Errno::EINVAL);
    }
    Ok(f)
}

fn create_epoll(t: &mut Task, cloexec: bool) -> SysResult {
    let owned = crate::fd::host::epoll_create()?;
    let file = Arc::new(OpenFile::new(owned, FileKind::Epoll, None));
    Ok(t.fds.insert(file, cloexec)? as u64)
}

fn do_epoll_wait(t: &mut Task, a: &SyscallArgs, timeout_ms: i32) -> SysResult {
    // Counting the open descriptors walks the table: only when the cap matters.
    let open = if a.int(2) as usize > MAX_EPOLL_EVENTS {
        t.fds.len()
    } else {
        0
    };
    let batch = epoll_batch(a.int(2), open)?;
    let f = epoll_file(t, a.int(0))?;
    let events = a.gva(1);
    // Fault the buffer in now so events taken from the host are not lost to EFAULT later.
    t.user_ranges(events, (batch * EPOLL_EVENT_SIZE) as u64, true)?;
    let mut buf = vec![libc::epoll_event { events: 0, u64: 0 }; batch];
    let n = crate::fd::host::epoll_wait(f.host(), &mut buf, timeout_ms)?;
    if n > 0 {
        t.copy_out(events, &encode_epoll_events(&buf[..n]))?;
    }
    Ok(n as u64)
}

/// Implements epoll_wait(2).
pub fn sys_epoll_wait(t: &mut Task, a: &SyscallArgs) -> SysResult {
    do_epoll_wait(t, a, a.int(3))
}

/// Implements epoll_pwait(2): epoll_wait with its signal mask in place while it waits.
pub fn sys_epoll_pwait(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let mask = read_sigmask(t, a.gva(4), a.u(5))?;
    with_sigmask(t, mask, |t| do_epoll_wait(t, a, a.int(3)))
}

/// Implements epoll_pwait2(2): epoll_pwait with a `timespec` timeout (null: forever),
/// rounded up to whole milliseconds.
pub fn sys_epoll_pwait2(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let ms = match read_timespec(t, a.gva(3))? {
        None => -1,
        Some(ts) => {
            let ns = i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec);
            i32::try_from((ns + 999_999) / 1_000_000).unwrap_or(i32::MAX)
        }
    };
    let mask = read_sigmask(t, a.gva(4), a.u(5))?;
    with_sigmask(t, mask, |t| do_epoll_wait(t, a, ms))
}

/// Implements epoll_ctl(2): the guest fd's host fd is registered with the guest's `data`.
pub fn sys_epoll_ctl(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let (epfd, op, fd) = (a.int(0), a.int(1), a.int(2));
    // As Linux: the event is read first (not for EPOLL_CTL_DEL, where it may be null).
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    if op != libc::EPOLL_CTL_DEL {
        let mut b = [0u8; EPOLL_EVENT_SIZE];
        t.copy_in(a.gva(3), &mut b)?;
        ev = decode_epoll_event(&b);
    }
    let ep = t.fds.get(epfd)?;
    let target = t.fds.get(fd)?;
    if !matches!(ep.kind, FileKind::Epoll) || Arc::ptr_eq(&ep, &target) {
        return Err(Errno::EINVAL);
    }
    if !matches!(
        op,
        libc::EPOLL_CTL_ADD | libc::EPOLL_CTL_MOD | libc::EPOLL_CTL_DEL
    ) {
        return Err(Errno::EINVAL);
    }
    crate::fd::host::epoll_ctl(ep.host(), op, target.host(), ev)?;
    Ok(0)
}

/// Implements epoll_create(2): `size` must be positive and is otherwise ignored.
pub fn sys_epoll_create(t: &mut Task, a: &SyscallArgs) -> SysResult {
    if a.int(0) <= 0 {
        return Err(Errno::EINVAL);
    }
    create_epoll(t, false)
}

/// Implements epoll_create1(2).
pub fn sys_epoll_create1(t: &mut Task, a: &SyscallArgs) -> SysResult {
    let flags = a.int(0);
    if flags & !libc::EPOLL_CLOEXEC != 0 {
        return Err(Errno::EINVAL);
    }
    create_epoll(t, flags & libc::EPOLL_CLOEXEC != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::OwnedFd;

    fn file() -> Arc<OpenFile> {
        let f: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        Arc::new(OpenFile::new(f, FileKind::Regular, None))
    }

    fn pollfd(fd: i32, events: i16) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&fd.to_le_bytes());
        b[4..6].copy_from_slice(&events.to_le_bytes());
        b[6..].copy_from_slice(&0x7777i16.to_le_bytes());
        b
    }

    #[test]
    fn pollfd_translation() {
        let fds = FdTable::new();
        assert_eq!(fds.insert(file(), false).unwrap(), 0);
        let mut raw = Vec::new();
        raw.extend_from_slice(&pollfd(0, libc::POLLIN));
        raw.extend_from_slice(&pollfd(-5, libc::POLLIN));
        raw.extend_from_slice(&pollfd(7, libc::POLLOUT));
        let mut set = translate_pollfds(&fds, &raw);
        assert_eq!(set.host.len(), 3);
        assert!(set.host[0].fd >= 0);
        assert_eq!((set.host[1].fd, set.host[2].fd), (-1, -1));
        assert_eq!(set.nval, vec![false, false, true]);
        crate::fd::host::ppoll(
            &mut set.host,
            Some(&libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            }),
        )
        .unwrap();
        let n = pollfd_results(&set, &mut raw);
        assert_eq!(n, 2);
        let rev = |i: usize| i16::from_le_bytes([raw[i * 8 + 6], raw[i * 8 + 7]]);
        assert_eq!(rev(0), libc::POLLIN); // /dev/null is always readable
        assert_eq!(rev(1), 0);
        assert_eq!(rev(2), libc::POLLNVAL);
        // Everything but revents is left alone.
        assert_eq!(&raw[16..22], &pollfd(7, libc::POLLOUT)[..6]);
    }

    #[test]
    fn timeouts() {
        let ts = host_timespec(Timespec { sec: 1, nsec: 5 }).unwrap();
        assert_eq!((ts.tv_sec, ts.tv_nsec), (1, 5));
        let bad = Timespec {
            sec: 1,
            nsec: 1_000_000_000,
        };
        assert_eq!(host_timespec(bad).err(), Some(Errno::EINVAL));
        let bad = Timespec { sec: -1, nsec: 0 };
        assert_eq!(host_timespec(bad).err(), Some(Errno::EINVAL));
        assert!(ms_timeout(-1).is_none());
        let t = ms_timeout(2500).unwrap();
        assert_eq!((t.tv_sec, t.tv_nsec), (2, 500_000_000));
        let left = remaining(&t, Duration::from_millis(600));
        assert_eq!(
            left,
            Timespec {
                sec: 1,
                nsec: 900_000_000
            }
        );
        assert_eq!(remaining(&t, Duration::from_secs(9)), Timespec::ZERO);
    }

    #[test]
    fn select_sets() {
        assert_eq!(fd_set_bytes(0), 0);
        assert_eq!(fd_set_bytes(1), 8);
        assert_eq!(fd_set_bytes(65), 16);
        let n = 70;
        let mut r = vec![0u8; fd_set_bytes(n)];
        let mut w = vec![0u8; fd_set_bytes(n)];
        set_bit(&mut r, 3);
        set_bit(&mut r, 66);
        set_bit(&mut w, 3);
        set_bit(&mut r, 69);
        let sets = [Some(r.clone()), Some(w), None];
        // fd 69 is set but closed.
        assert_eq!(
            select_to_poll(n, &sets, |fd| fd != 69).err(),
            Some(Errno::EBADF)
        );
        // Bits at or beyond n are not looked at.
        let polled = select_to_poll(69, &sets, |fd| fd != 69).unwrap();
        assert_eq!(
            polled,
            vec![(3, POLLIN_SET | POLLOUT_SET), (66, POLLIN_SET)]
        );
        let (out, count) = poll_to_select(
            69,
            &polled,
            &[libc::POLLOUT, libc::POLLIN | libc::POLLHUP],
            &sets,
        );
        assert_eq!(count, 2);
        let [ro, wo, eo] = out;
        let (ro, wo) = (ro.unwrap(), wo.unwrap());
        assert!(!bit(&ro, 3) && bit(&ro, 66) && bit(&wo, 3) && !bit(&wo, 66));
        assert!(eo.is_none());
        assert!(!bit(&[], 5));
    }

    #[test]
    fn epoll_layout_and_limits() {
        let mut b = [0u8; 12];
        b[..4].copy_from_slice(&(libc::EPOLLIN as u32 | libc::EPOLLET as u32).to_le_bytes());
        b[4..].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        let e = decode_epoll_event(&b);
        assert_eq!(encode_epoll_events(&[e, e]), [b, b].concat());
        assert_eq!(std::mem::size_of::<libc::epoll_event>(), EPOLL_EVENT_SIZE);
        assert_eq!(epoll_batch(0, 3), Err(Errno::EINVAL));
        assert_eq!(epoll_batch(-1, 3), Err(Errno::EINVAL));
        assert_eq!(epoll_batch(EP_MAX_EVENTS + 1, 3), Err(Errno::EINVAL));
        assert_eq!(epoll_batch(EP_MAX_EVENTS, 3), Ok(MAX_EPOLL_EVENTS));
        assert_eq!(epoll_batch(EP_MAX_EVENTS, 5000), Ok(5000));
        assert_eq!(epoll_batch(3, 5000), Ok(3));
    }
}
