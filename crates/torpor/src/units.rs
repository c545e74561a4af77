//! The units users write sizes and durations in (`512M`, `10s`): parsed for the CLI's options,
//! the OCI configuration's limits and the annotations alike.

/// Parses a byte count with an optional K, M or G suffix (powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1u64 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1u64 << 30),
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("bad size {s:?}: expected e.g. 512M or 1G"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

/// Parses `512M`, `1G`, `4096K` or a byte count, rounded up to 4 MiB.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let bytes = parse_bytes(s)?;
    let granule = platform::memory::MEMORY_GRANULE;
    let rounded = bytes.div_ceil(granule).saturating_mul(granule);
    if rounded < 16 << 20 {
        return Err(format!("memory {s:?} is too small: at least 16M"));
    }
    if rounded > 64 << 30 {
        return Err(format!("memory {s:?} is too large: at most 64G"));
    }
    Ok(rounded)
}

/// Parses a duration such as `500ms`, `10s` or `1m`; each option checks its own bounds.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("bad duration {s:?} ({e}): expected e.g. 500ms, 10s or 1m"))
}
