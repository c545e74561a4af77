//! Resource limits of a process (getrlimit, setrlimit, prlimit64), inherited across fork and
//! set by the OCI `process.rlimits`. torpor enforces what its own structures bound:
//! `RLIMIT_NOFILE` caps the descriptor table (itself at most [`MAX_FDS`] entries, so larger
//! values read back as [`MAX_FDS`]), `RLIMIT_SIGPENDING` bounds the real-time signals queued
//! to a thread (`ThreadGroup::queue_full`); the others are kept and reported for the
//! application's own use (a runtime sizing its thread stacks from `RLIMIT_STACK`, say).

use abi::Errno;

use crate::fd::MAX_FDS;

/// Number of resources (`RLIM_NLIMITS`).
pub const NLIMITS: usize = 16;

/// `RLIM_INFINITY`.
pub const INFINITY: u64 = u64::MAX;

/// One resource's soft (current) and hard (maximum) limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Soft limit.
    pub cur: u64,
    /// Hard limit.
    pub max: u64,
}

/// All of a process's limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rlimits([Limit; NLIMITS]);

impl Default for Rlimits {
    /// Linux's defaults for a process started by root (`INIT_RLIMITS`): 8 MiB of stack, no
    /// core files (a soft limit of 0 under an unlimited hard one, which a process may lower
    /// or raise to), [`MAX_FDS`] descriptors, everything else unlimited.
    fn default() -> Rlimits {
        let mut l = [Limit {
            cur: INFINITY,
            max: INFINITY,
        }; NLIMITS];
        l[libc::RLIMIT_STACK as usize].cur = 8 << 20;
        l[libc::RLIMIT_CORE as usize].cur = 0;
        l[libc::RLIMIT_NOFILE as usize] = Limit {
            cur: MAX_FDS as u64,
            max: MAX_FDS as u64,
        };
        Rlimits(l)
    }
}

impl Rlimits {
    /// The limits of `resource`.
    ///
    /// # Errors
    /// `EINVAL` for an unknown resource.
    pub fn get(&self, resource: u32) -> Result<Limit, Errno> {
        self.0.get(resource as usize).copied().ok_or(Errno::EINVAL)
    }

    /// Sets `resource`'s limits as setrlimit(2) does for a privileged process: `EINVAL` when
    /// the soft limit exceeds the hard one. `RLIMIT_NOFILE` is capped at [`MAX_FDS`].
    ///
    /// # Errors
    /// `EINVAL` for an unknown resource or `cur > max`.
    pub fn set(&mut self, resource: u32, new: Limit) -> Result<(), Errno> {
        if new.cur > new.max {
            return Err(Errno::EINVAL);
        }
        let slot = self.0.get_mut(resource as usize).ok_or(Errno::EINVAL)?;
        *slot = if resource == libc::RLIMIT_NOFILE {
            Limit {
                cur: new.cur.min(MAX_FDS as u64),
                max: new.max.min(MAX_FDS as u64),
            }
        } else {
            new
        };
        Ok(())
    }

    /// The number of descriptors the process may hold.
    pub fn nofile(&self) -> usize {
        self.0[libc::RLIMIT_NOFILE as usize].cur as usize
    }
}

/// The resource number of an OCI rlimit type name (`RLIMIT_NOFILE`…).
pub fn resource_of(name: &str) -> Option<u32> {
    Some(match name {
        "RLIMIT_CPU" => libc::RLIMIT_CPU,
        "RLIMIT_FSIZE" => libc::RLIMIT_FSIZE,
        "RLIMIT_DATA" => libc::RLIMIT_DATA,
        "RLIMIT_STACK" => libc::RLIMIT_STACK,
        "RLIMIT_CORE" => libc::RLIMIT_CORE,
        "RLIMIT_RSS" => libc::RLIMIT_RSS,
        "RLIMIT_NPROC" => libc::RLIMIT_NPROC,
        "RLIMIT_NOFILE" => libc::RLIMIT_NOFILE,
        "RLIMIT_MEMLOCK" => libc::RLIMIT_MEMLOCK,
        "RLIMIT_AS" => libc::RLIMIT_AS,
        "RLIMIT_LOCKS" => libc::RLIMIT_LOCKS,
        "RLIMIT_SIGPENDING" => libc::RLIMIT_SIGPENDING,
        "RLIMIT_MSGQUEUE" => libc::RLIMIT_MSGQUEUE,
        "RLIMIT_NICE" => libc::RLIMIT_NICE,
        "RLIMIT_RTPRIO" => libc::RLIMIT_RTPRIO,
        "RLIMIT_RTTIME" => libc::RLIMIT_RTTIME,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_set_and_caps() {
        let mut r = Rlimits::default();
        assert_eq!(r.get(libc::RLIMIT_STACK).unwrap().cur, 8 << 20);
        assert_eq!(r.get(99), Err(Errno::EINVAL));
        let nofile = libc::RLIMIT_NOFILE;
        r.set(
            nofile,
            Limit {
                cur: 100,
                max: 1 << 20,
            },
        )
        .unwrap();
        assert_eq!(
            r.get(nofile).unwrap(),
            Limit {
                cur: 100,
                max: MAX_FDS as u64
            }
        );
        assert_eq!(r.nofile(), 100);
        assert_eq!(r.set(nofile, Limit { cur: 5, max: 4 }), Err(Errno::EINVAL));
        assert_eq!(r.nofile(), 100, "a refused set changes nothing");
        assert_eq!(resource_of("RLIMIT_NPROC"), Some(libc::RLIMIT_NPROC));
        assert_eq!(resource_of("RLIMIT_BOGUS"), None);
    }
}
