//! What the harnesses share: a scratch directory on tmpfs, crc32c, a small deterministic
//! generator and mutator (for the replay in the normal test command).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

thread_local! {
    static DIRS: std::cell::RefCell<Vec<(String, PathBuf)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A fresh directory for this thread and `name` under /dev/shm (or the temp dir), created
/// once and reused (small, on tmpfs, named after the pid); [`remove_scratch_dirs`] removes
/// them (the replay test does; a libFuzzer process leaves them).
pub fn scratch_dir(name: &str) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    DIRS.with(|d| {
        let mut d = d.borrow_mut();
        if let Some((_, p)) = d.iter().find(|(n, _)| n == name) {
            return p.clone();
        }
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let p = base.join(format!(
            "torpor-fuzz-{}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            name
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("scratch dir");
        d.push((name.to_string(), p.clone()));
        p
    })
}

/// Removes this thread's scratch directories; the harnesses must not run on this thread
/// afterwards.
pub fn remove_scratch_dirs() {
    DIRS.with(|d| {
        for (_, p) in d.borrow_mut().drain(..) {
            let _ = std::fs::remove_dir_all(p);
        }
    });
}

/// crc32c (Castagnoli), bit by bit through a table: the page files' checksum.
pub fn crc32c(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let t = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, e) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0x82f6_3b78 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            *e = c;
        }
        t
    });
    let mut c = !0u32;
    for &b in data {
        c = t[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// xorshift64.
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0.max(1);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// A libFuzzer-like mutation of `input`: byte flips and sets, interesting integers,
/// insertions, deletions, truncation, duplication of a block, splicing with `other`.
pub fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(8) {
        let len = v.len();
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                v[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                v[i] = rng.next() as u8;
            }
            2 if len >= 8 => {
                const INTERESTING: [u64; 8] = [
                    0,
                    1,
                    0x7f,
                    0xff,
                    0x8000_0000,
                    0xffff_ffff,
                    u64::MAX,
                    1 << 63,
                ];
                let i = rng.below(len - 7);
                let w = [1, 2, 4, 8][rng.below(4)];
                let x = INTERESTING[rng.below(8)].to_le_bytes();
                v[i..i + w].copy_from_slice(&x[..w]);
            }
            3 => {
                let i = rng.below(len + 1);
                let n = 1 + rng.below(16);
                let ins: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                v.splice(i..i, ins);
            }
            4 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                v.drain(i..i + n);
            }
            5 if len > 0 => v.truncate(rng.below(len)),
            6 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(256));
                let block = v[i..i + n].to_vec();
                let at = rng.below(len + 1);
                v.splice(at..at, block);
            }
            7 if !other.is_empty() => {
                let cut = rng.below(v.len() + 1);
                let from = rng.below(other.len());
                v.truncate(cut);
                v.extend_from_slice(&other[from..]);
            }
            _ if len > 0 => {
                let i = rng.below(len);
                v[i] = v[i].wrapping_add(1 + rng.below(3) as u8);
            }
            _ => v.push(rng.next() as u8),
        }
    }
    v
}
