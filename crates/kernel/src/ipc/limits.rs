//! The tunables of a sandbox's System V IPC, as Linux keeps them per IPC namespace
//! (`struct ipc_namespace`'s `shm_ctl*`, `sem_ctls`, `msg_ctl*`) and shows them in
//! `/proc/sys/kernel`: a container's root may change them for its own namespace, and the
//! calls check them. Beside each, torpor keeps a ceiling of its own that bounds the host
//! memory a sandbox may take whatever it writes (past it a call fails with ENOMEM, as Linux
//! does when it cannot allocate).

use abi::Errno;

use super::ids::IPCMNI;

/// Linux's SHMMIN: the smallest segment.
pub const SHMMIN: u64 = 1;
/// Default largest segment (`kernel/shmmax`; Linux's default is far larger).
pub const SHMMAX: u64 = 1 << 36;
/// Default most segments (`kernel/shmmni`, Linux's SHMMNI).
pub const SHMMNI: usize = 4096;
/// Default pages of all segments together (`kernel/shmall`).
pub const SHMALL: u64 = SHMMAX / platform::PAGE_SIZE * SHMMNI as u64;
/// The largest segment torpor makes, whatever `shmmax` says.
pub const SHM_CEILING: u64 = SHMMAX;

/// Default most semaphores in one set (`kernel/sem`'s first field, Linux's SEMMSL).
pub const SEMMSL: usize = 32000;
/// Default most semaphore sets (`kernel/sem`'s fourth field, Linux's SEMMNI).
pub const SEMMNI: usize = 32000;
/// Default most semaphores in all sets (`kernel/sem`'s second field, Linux's SEMMNS).
pub const SEMMNS: usize = SEMMSL * SEMMNI;
/// Default most operations in one semop (`kernel/sem`'s third field, Linux's SEMOPM).
pub const SEMOPM: usize = 500;
/// The most semaphores in one set and operations in one semop torpor allocates, whatever
/// `kernel/sem` says.
pub const SEM_CEILING: usize = 32000;

/// Default largest message text (`kernel/msgmax`, Linux's MSGMAX).
pub const MSGMAX: usize = 8192;
/// Default bytes a new queue may hold (`kernel/msgmnb`, Linux's MSGMNB).
pub const MSGMNB: u64 = 16384;
/// Default most queues (`kernel/msgmni`, Linux's MSGMNI).
pub const MSGMNI: usize = 32000;

/// `kernel/shmmax`, `kernel/shmall`, `kernel/shmmni`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmLimits {
    /// Largest segment in bytes.
    pub max: u64,
    /// Pages of all segments together.
    pub all: u64,
    /// Most segments (at most [`IPCMNI`]).
    pub mni: usize,
}

impl Default for ShmLimits {
    fn default() -> Self {
        ShmLimits {
            max: SHMMAX,
            all: SHMALL,
            mni: SHMMNI,
        }
    }
}

/// `kernel/sem`: SEMMSL, SEMMNS, SEMOPM, SEMMNI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SemLimits {
    /// Most semaphores in one set.
    pub msl: i32,
    /// Most semaphores in all sets.
    pub mns: i32,
    /// Most operations in one semop.
    pub opm: i32,
    /// Most sets (0 to [`IPCMNI`]).
    pub mni: i32,
}

impl Default for SemLimits {
    fn default() -> Self {
        SemLimits {
            msl: SEMMSL as i32,
            mns: SEMMNS as i32,
            opm: SEMOPM as i32,
            mni: SEMMNI as i32,
        }
    }
}

/// `kernel/msgmax`, `kernel/msgmnb`, `kernel/msgmni`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgLimits {
    /// Largest message text.
    pub max: u32,
    /// Bytes a new queue may hold.
    pub mnb: u32,
    /// Most queues (at most [`IPCMNI`]).
    pub mni: u32,
}

impl Default for MsgLimits {
    fn default() -> Self {
        MsgLimits {
            max: MSGMAX as u32,
            mnb: MSGMNB as u32,
            mni: MSGMNI as u32,
        }
    }
}

/// The numbers written to a tunable, as Linux's `proc_dointvec` and `proc_doulongvec_minmax`
/// read them: decimal, optionally signed, separated by white space; at most `max` taken.
///
/// # Errors
/// EINVAL for text that is not such numbers, or none.
fn numbers(text: &[u8], max: usize) -> Result<Vec<i128>, Errno> {
    let text = std::str::from_utf8(text).map_err(|_| Errno::EINVAL)?;
    let mut out = Vec::new();
    for word in text.split_ascii_whitespace().take(max) {
        // Each number is at most 21 characters (Linux's TMPBUFLEN 22 with the NUL).
        if word.len() > 21 {
            return Err(Errno::EINVAL);
        }
        out.push(word.parse::<i128>().map_err(|_| Errno::EINVAL)?);
    }
    if out.is_empty() {
        return Err(Errno::EINVAL);
    }
    Ok(out)
}

/// One unsigned long (`proc_doulongvec_minmax`): EINVAL if negative or too large.
fn ulong(text: &[u8]) -> Result<u64, Errno> {
    u64::try_from(numbers(text, 1)?[0]).map_err(|_| Errno::EINVAL)
}

/// One int within `min..=max` (`proc_dointvec_minmax`): EINVAL otherwise.
fn int_within(text: &[u8], min: i64, max: i64) -> Result<i64, Errno> {
    let v = numbers(text, 1)?[0];
    if v < i128::from(min) || v > i128::from(max) {
        return Err(Errno::EINVAL);
    }
    Ok(v as i64)
}

impl ShmLimits {
    /// The text of tunable `name` (`shmmax`, `shmall` or `shmmni`).
    pub fn show(&self, name: &str) -> Option<String> {
        Some(match name {
            "shmmax" => self.max.to_string(),
            "shmall" => self.all.to_string(),
            "shmmni" => self.mni.to_string(),
            _ => return None,
        })
    }

    /// These limits with `text` written to tunable `name`.
    ///
    /// # Errors
    /// EINVAL for text that is not a number in the tunable's range; ENOENT for a name that is
    /// not one of these.
    pub fn with(mut self, name: &str, text: &[u8]) -> Result<ShmLimits, Errno> {
        match name {
            "shmmax" => self.max = ulong(text)?,
            "shmall" => self.all = ulong(text)?,
            "shmmni" => self.mni = int_within(text, 0, IPCMNI as i64)? as usize,
            _ => return Err(Errno::ENOENT),
        }
        Ok(self)
    }
}

impl SemLimits {
    /// The text of `kernel/sem`: the four values, tab-separated.
    pub fn show(&self) -> String {
        format!("{}\t{}\t{}\t{}", self.msl, self.mns, self.opm, self.mni)
    }

    /// These limits with `text` written to `kernel/sem`: up to four ints, in order (those
    /// not given are kept), as Linux's `proc_ipc_sem_dointvec`.
    ///
    /// # Errors
    /// EINVAL for text that is not ints; ERANGE for SEMMNI outside 0 to [`IPCMNI`].
    pub fn with(self, text: &[u8]) -> Result<SemLimits, Errno> {
        let v = numbers(text, 4)?;
        let mut fields = [self.msl, self.mns, self.opm, self.mni];
        for (f, n) in fields.iter_mut().zip(&v) {
            *f = i32::try_from(*n).map_err(|_| Errno::EINVAL)?;
        }
        let [msl, mns, opm, mni] = fields;
        if !(0..=IPCMNI as i32).contains(&mni) {
            return Err(Errno::ERANGE);
        }
        Ok(SemLimits { msl, mns, opm, mni })
    }
}

impl MsgLimits {
    /// The text of tunable `name` (`msgmax`, `msgmnb` or `msgmni`).
    pub fn show(&self, name: &str) -> Option<String> {
        Some(match name {
            "msgmax" => self.max.to_string(),
            "msgmnb" => self.mnb.to_string(),
            "msgmni" => self.mni.to_string(),
            _ => return None,
        })
    }

    /// These limits with `text` written to tunable `name`.
    ///
    /// # Errors
    /// EINVAL for text that is not a number in the tunable's range (0 to `INT_MAX`, to
    /// [`IPCMNI`] for `msgmni`); ENOENT for a name that is not one of these.
    pub fn with(mut self, name: &str, text: &[u8]) -> Result<MsgLimits, Errno> {
        let int = |max: i64| int_within(text, 0, max).map(|v| v as u32);
        match name {
            "msgmax" => self.max = int(i64::from(i32::MAX))?,
            "msgmnb" => self.mnb = int(i64::from(i32::MAX))?,
            "msgmni" => self.mni = int(IPCMNI as i64)?,
            _ => return Err(Errno::ENOENT),
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_read_as_linux_reads_them() {
        let shm = ShmLimits::default();
        assert_eq!(shm.with("shmmax", b"8192\n").unwrap().max, 8192);
        assert_eq!(shm.with("shmmax", b"-1"), Err(Errno::EINVAL));
        assert_eq!(shm.with("shmmni", b"32769"), Err(Errno::EINVAL));
        assert_eq!(shm.with("shmmni", b" 7 9").unwrap().mni, 7);
        assert_eq!(shm.with("shmall", b""), Err(Errno::EINVAL));
        assert_eq!(shm.with("shmall", b"x"), Err(Errno::EINVAL));
        let sem = SemLimits::default();
        assert_eq!(sem.show(), "32000\t1024000000\t500\t32000");
        let s = sem.with(b"250 32000\n").unwrap();
        assert_eq!((s.msl, s.mns, s.opm, s.mni), (250, 32000, 500, 32000));
        assert_eq!(sem.with(b"1 2 3 40000"), Err(Errno::ERANGE));
        assert_eq!(sem.with(b"1 2 3 4294967296"), Err(Errno::EINVAL));
        let msg = MsgLimits::default();
        assert_eq!(msg.with("msgmni", b"40\n").unwrap().mni, 40);
        assert_eq!(msg.with("msgmax", b"-5"), Err(Errno::EINVAL));
        assert_eq!(msg.show("msgmnb").as_deref(), Some("16384"));
    }
}
