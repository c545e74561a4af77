//! Binary blobs of a checkpoint (XSAVE areas, allocator bitmaps, bytes queued in pipes): one
//! enveloped file, `blobs.bin`, each blob named in the state by a [`BlobRef`] (offset, length,
//! crc32c), so the state stays readable JSON and bulk bytes stay binary.

use serde::{Deserialize, Serialize};

/// A blob reference that does not name the bytes it was made for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlobError {
    /// The reference points outside the blob file.
    #[error("a blob reference points outside the blob file")]
    OutOfBounds,
    /// The bytes do not match the reference's checksum.
    #[error("blob checksum mismatch")]
    Checksum,
}

/// Where a blob is in the blob file's payload, and its checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlobRef {
    /// Offset in the payload.
    pub off: u64,
    /// Length in bytes.
    pub len: u64,
    /// crc32c of the bytes.
    pub crc: u32,
}

/// Collects blobs while a checkpoint is written.
#[derive(Debug, Default)]
pub struct BlobWriter {
    bytes: Vec<u8>,
}

impl BlobWriter {
    /// No blob yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `data`; the reference names it.
    pub fn add(&mut self, data: &[u8]) -> BlobRef {
        let off = self.bytes.len() as u64;
        self.bytes.extend_from_slice(data);
        BlobRef {
            off,
            len: data.len() as u64,
            crc: crc32c::crc32c(data),
        }
    }

    /// The payload of the blob file.
    pub fn into_payload(self) -> Vec<u8> {
        self.bytes
    }
}

/// The blobs of a checkpoint being restored (the envelope already checked).
#[derive(Debug)]
pub struct Blobs {
    bytes: Vec<u8>,
}

impl Blobs {
    /// Over the blob file's payload.
    pub fn new(payload: Vec<u8>) -> Self {
        Blobs { bytes: payload }
    }

    /// The bytes `r` names, checked against its bounds and checksum.
    ///
    /// # Errors
    /// [`BlobError`] for a reference outside the file or bytes that do not match its
    /// checksum.
    pub fn get(&self, r: BlobRef) -> Result<&[u8], BlobError> {
        let end = r
            .off
            .checked_add(r.len)
            .filter(|&e| e <= self.bytes.len() as u64)
            .ok_or(BlobError::OutOfBounds)?;
        let data = &self.bytes[r.off as usize..end as usize];
        if crc32c::crc32c(data) != r.crc {
            return Err(BlobError::Checksum);
        }
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_come_back_checked() {
        let mut w = BlobWriter::new();
        let a = w.add(b"xsave area");
        let b = w.add(b"");
        let c = w.add(&[7u8; 5000]);
        let blobs = Blobs::new(w.into_payload());
        assert_eq!(blobs.get(a).unwrap(), b"xsave area");
        assert_eq!(blobs.get(b).unwrap(), b"");
        assert_eq!(blobs.get(c).unwrap(), &[7u8; 5000][..]);
        // Out of bounds, overflowing, or another checksum: errors, never other bytes.
        for bad in [
            BlobRef { len: 6000, ..c },
            BlobRef {
                off: u64::MAX,
                len: 2,
                crc: 0,
            },
            BlobRef {
                crc: a.crc ^ 1,
                ..a
            },
            BlobRef {
                off: a.off + 1,
                ..a
            },
        ] {
            assert!(blobs.get(bad).is_err());
        }
    }
}
