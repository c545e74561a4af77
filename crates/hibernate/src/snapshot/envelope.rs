//! The checksummed envelope around every non-page file of a checkpoint (its manifest, its
//! state, its blobs): a 64-byte header, then the payload.
//!
//! ```text
//! offset  size  field
//!      0     8  magic          "TORPCKPT"
//!      8     8  kind           "manifest", "state\0\0\0", "blobs\0\0\0", zero-padded
//!     16     2  format_major   FORMAT_MAJOR
//!     18     2  format_minor   FORMAT_MINOR
//!     20     4  payload_crc    crc32c of the payload
//!     24    28  reserved       zero
//!     52     8  payload_len    bytes after the header; the file is exactly 64 + payload_len
//!     60     4  header_crc     crc32c of bytes 0..60
//! ```
//!
//! All integers little-endian. Reading checks,
//! in order: length at least the header, magic, kind, header checksum, version, exact length,
//! payload checksum; a payload above [`MAX_PAYLOAD`] is refused before anything is allocated.

use std::io::Read;
use std::path::Path;

use super::{SnapshotError, FORMAT_MAJOR, FORMAT_MINOR};

/// Magic of every envelope.
pub const MAGIC: [u8; 8] = *b"TORPCKPT";
/// Bytes of the header.
pub const HEADER_BYTES: usize = 64;
/// Largest payload read (a state or a blob file; page data lives in page files).
pub const MAX_PAYLOAD: u64 = 256 << 20;

/// What an envelope holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The checkpoint's manifest.
    Manifest,
    /// The sandbox's kernel state.
    State,
    /// Binary blobs the state refers to.
    Blobs,
    /// A process's recorded working set as a page list (a layered checkpoint's, format 1.9:
    /// its pages are read from the memory images).
    WorkingSet,
}

impl Kind {
    fn tag(self) -> [u8; 8] {
        match self {
            Kind::Manifest => *b"manifest",
            Kind::State => *b"state\0\0\0",
            Kind::Blobs => *b"blobs\0\0\0",
            Kind::WorkingSet => *b"workset\0",
        }
    }
}

fn header(kind: Kind, payload: &[u8]) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..16].copy_from_slice(&kind.tag());
    h[16..18].copy_from_slice(&FORMAT_MAJOR.to_le_bytes());
    h[18..20].copy_from_slice(&FORMAT_MINOR.to_le_bytes());
    h[20..24].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    h[52..60].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    let crc = crc32c::crc32c(&h[..60]);
    h[60..64].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The envelope's bytes: header and payload.
pub fn encode(kind: Kind, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
    out.extend_from_slice(&header(kind, payload));
    out.extend_from_slice(payload);
    out
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads and checks the envelope at `path` (opened without following a symlink) and returns
/// its payload.
///
/// # Errors
/// [`SnapshotError::Open`], [`SnapshotError::Io`]; [`SnapshotError::Corrupt`] for a short
/// file, a bad magic, kind or checksum, a length other than the header says, or a payload
/// above [`MAX_PAYLOAD`]; [`SnapshotError::Version`] for a format this build does not read.
pub fn read(path: &Path, kind: Kind) -> Result<Vec<u8>, SnapshotError> {
    let mut file = super::open_nofollow(path)?;
    let len = file
        .metadata()
        .map_err(|e| SnapshotError::io("reading the length of", path, e))?
        .len();
    let corrupt = |what: &str| SnapshotError::Corrupt {
        file: path.to_path_buf(),
        what: what.to_string(),
    };
    if len < HEADER_BYTES as u64 {
        return Err(corrupt("shorter than its header (truncated)"));
    }
    let mut h = [0u8; HEADER_BYTES];
    file.read_exact(&mut h)
        .map_err(|e| SnapshotError::io("reading", path, e))?;
    if h[0..8] != MAGIC {
        return Err(SnapshotError::NotACheckpoint(path.to_path_buf()));
    }
    if h[8..16] != kind.tag() {
        return Err(corrupt("holds another kind of data than its name says"));
    }
    if le32(&h, 60) != crc32c::crc32c(&h[..60]) {
        return Err(corrupt("header checksum mismatch"));
    }
    let (major, minor) = (le16(&h, 16), le16(&h, 18));
    if major != FORMAT_MAJOR || minor > FORMAT_MINOR {
        return Err(SnapshotError::Version { major, minor });
    }
    let payload_len = u64::from_le_bytes(h[52..60].try_into().unwrap_or_default());
    if payload_len > MAX_PAYLOAD {
        return Err(corrupt("payload larger than this build reads"));
    }
    if len != HEADER_BYTES as u64 + payload_len {
        return Err(corrupt(&format!(
            "{len} bytes where its header says {} (truncated or extended)",
            HEADER_BYTES as u64 + payload_len
        )));
    }
    let mut payload = vec![0u8; payload_len as usize];
    file.read_exact(&mut payload)
        .map_err(|e| SnapshotError::io("reading", path, e))?;
    if crc32c::crc32c(&payload) != le32(&h, 20) {
        return Err(corrupt("payload checksum mismatch"));
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    fn write(dir: &TempDir, bytes: &[u8]) -> std::path::PathBuf {
        let p = dir.path().join("env");
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn round_trip() {
        let d = TempDir::new();
        let p = write(&d, &encode(Kind::State, b"{\"a\":1}"));
        assert_eq!(read(&p, Kind::State).unwrap(), b"{\"a\":1}");
        let p = write(&d, &encode(Kind::Blobs, b""));
        assert_eq!(read(&p, Kind::Blobs).unwrap(), b"");
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_refused() {
        let d = TempDir::new();
        let good = encode(Kind::State, b"some state payload of a few bytes");
        for cut in 0..good.len() {
            let p = write(&d, &good[..cut]);
            assert!(read(&p, Kind::State).is_err(), "cut at {cut}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(matches!(
            read(&write(&d, &longer), Kind::State),
            Err(SnapshotError::Corrupt { .. })
        ));
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            let p = write(&d, &bad);
            assert!(read(&p, Kind::State).is_err(), "byte {i} flipped");
        }
    }

    #[test]
    fn magic_kind_and_version_are_clear_errors() {
        let d = TempDir::new();
        let good = encode(Kind::State, b"x");
        let mut bad = good.clone();
        bad[0..8].copy_from_slice(b"NOTTORPR");
        assert!(matches!(
            read(&write(&d, &bad), Kind::State),
            Err(SnapshotError::NotACheckpoint(_))
        ));
        assert!(matches!(
            read(&write(&d, &good), Kind::Manifest),
            Err(SnapshotError::Corrupt { .. })
        ));
        // Another major, or a newer minor: refused with the versions named.
        for (major, minor) in [(FORMAT_MAJOR + 1, 0), (FORMAT_MAJOR, FORMAT_MINOR + 1)] {
            let mut v = good.clone();
            v[16..18].copy_from_slice(&major.to_le_bytes());
            v[18..20].copy_from_slice(&minor.to_le_bytes());
            let crc = crc32c::crc32c(&v[..60]);
            v[60..64].copy_from_slice(&crc.to_le_bytes());
            let e = read(&write(&d, &v), Kind::State).unwrap_err();
            assert!(matches!(e, SnapshotError::Version { .. }), "{e}");
            assert!(e.to_string().contains(&format!("{major}.{minor}")), "{e}");
        }
    }

    #[test]
    fn a_huge_declared_payload_allocates_nothing() {
        let d = TempDir::new();
        let mut v = encode(Kind::Blobs, b"");
        v[52..60].copy_from_slice(&(MAX_PAYLOAD + 1).to_le_bytes());
        let crc = crc32c::crc32c(&v[..60]);
        v[60..64].copy_from_slice(&crc.to_le_bytes());
        let e = read(&write(&d, &v), Kind::Blobs).unwrap_err();
        assert!(e.to_string().contains("larger"), "{e}");
    }

    #[test]
    fn a_symlink_is_not_followed() {
        let d = TempDir::new();
        let target = write(&d, &encode(Kind::State, b"x"));
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(matches!(
            read(&link, Kind::State),
            Err(SnapshotError::Open { .. })
        ));
    }
}
