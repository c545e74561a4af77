//! `/proc/mounts`, `/proc/PID/mounts` and `/proc/PID/mountinfo`: the sandbox's own mounts,
//! what `df`, `findmnt` and `mount` list.
//!
//! They are the holder's mounts at or beneath the sandbox's root (its copy-on-write overlay,
//! volumes, tmpfs mounts of an OCI bundle), read from the holder's own
//! `/proc/self/mountinfo` and shown at their guest paths; nothing of the host's other mounts.
//! A root that is not a mount point of its own is shown as the filesystem that holds it.

use std::path::Path;

/// One mount as the guest sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Mount id and parent id (mountinfo's first two fields).
    pub id: u32,
    /// The parent's id.
    pub parent: u32,
    /// `major:minor`.
    pub dev: String,
    /// Guest path of the mount point, escaped as the kernel escapes it.
    pub point: String,
    /// Mount options (`rw,nosuid,...`).
    pub options: String,
    /// Filesystem type.
    pub fstype: String,
    /// Source.
    pub source: String,
    /// Superblock options.
    pub super_options: String,
}

/// The mounts of `mountinfo` (the holder's) at or beneath `root` (a host path, as the holder
/// sees it), at their guest paths, the root's first. A root that is no mount point of its own
/// is the mount that holds it, shown at `/`.
pub fn beneath(mountinfo: &str, root: &Path) -> Vec<Mount> {
    let root = root.to_string_lossy();
    let root = root.trim_end_matches('/');
    let mut holding: Option<Mount> = None;
    let mut out = Vec::new();
    for line in mountinfo.lines() {
        let Some(m) = parse(line) else { continue };
        let point = unescape(&m.point);
        let guest = if point == root {
            Some("/".to_string())
        } else {
            point
                .strip_prefix(root)
                .filter(|rest| rest.starts_with('/') && !root.is_empty())
                .map(str::to_string)
        };
        match guest {
            Some(g) => {
                // A later mount on the same point hides the earlier one.
                out.retain(|o: &Mount| o.point != escape(&g));
                out.push(Mount {
                    point: escape(&g),
                    ..m
                });
            }
            None => {
                // The deepest mount whose point is a prefix of the root holds it.
                let holds = point == "/"
                    || root
                        .strip_prefix(point.as_str())
                        .is_some_and(|rest| rest.starts_with('/'));
                let deeper = holding
                    .as_ref()
                    .is_none_or(|h| unescape(&h.point).len() <= point.len());
                if holds && deeper {
                    holding = Some(m);
                }
            }
        }
    }
    if !out.iter().any(|m| m.point == "/") {
        if let Some(h) = holding {
            out.insert(
                0,
                Mount {
                    point: "/".into(),
                    ..h
                },
            );
        }
    }
    out.sort_by_key(|m| (m.point != "/", m.point.matches('/').count()));
    out
}

/// `/proc/mounts` lines: `source point fstype options 0 0`.
pub fn mounts_file(mounts: &[Mount]) -> Vec<u8> {
    let mut s = String::new();
    for m in mounts {
        s.push_str(&format!(
            "{} {} {} {} 0 0\n",
            m.source, m.point, m.fstype, m.options
        ));
    }
    s.into_bytes()
}

/// `/proc/PID/mountinfo` lines.
pub fn mountinfo_file(mounts: &[Mount]) -> Vec<u8> {
    let mut s = String::new();
    for m in mounts {
        s.push_str(&format!(
            "{} {} {} / {} {} - {} {} {}\n",
            m.id, m.parent, m.dev, m.point, m.options, m.fstype, m.source, m.super_options
        ));
    }
    s.into_bytes()
}

/// The holder's mounts beneath `root`, from its own `/proc/self/mountinfo` (empty if it cannot
/// be read).
pub fn of_root(root: &Path) -> Vec<Mount> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|s| beneath(&s, root))
        .unwrap_or_default()
}

fn parse(line: &str) -> Option<Mount> {
    let (left, right) = line.split_once(" - ")?;
    let l: Vec<&str> = left.split(' ').collect();
    let r: Vec<&str> = right.split(' ').collect();
    if l.len() < 6 || r.len() < 3 {
        return None;
    }
    Some(Mount {
        id: l[0].parse().ok()?,
        parent: l[1].parse().ok()?,
        dev: l[2].to_string(),
        point: l[4].to_string(),
        options: l[5].to_string(),
        fstype: r[0].to_string(),
        source: r[1].to_string(),
        // Only whether it is read-only: an overlay's options name the host's directories.
        super_options: r[2].split(',').next().unwrap_or("rw").to_string(),
    })
}

/// The kernel's octal escapes (`\040` for a space) undone.
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Spaces, tabs, newlines and backslashes escaped as the kernel does.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            ' ' | '\t' | '\n' | '\\' => out.push_str(&format!("\\{:03o}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:25 / /proc rw,nosuid shared:5 - proc proc rw
40 22 0:40 / /var/lib/torpor/s1/root/merged rw,relatime - overlay overlay rw,lowerdir=/img
41 40 8:1 /data /var/lib/torpor/s1/root/merged/mnt/my\\040data rw,relatime - ext4 /dev/vda rw
42 22 0:41 / /var/lib/torpor/s2/root/merged rw - overlay overlay rw
";

    #[test]
    fn the_root_and_what_is_beneath_it_at_guest_paths() {
        let m = beneath(INFO, Path::new("/var/lib/torpor/s1/root/merged"));
        let points: Vec<&str> = m.iter().map(|m| m.point.as_str()).collect();
        assert_eq!(points, ["/", "/mnt/my\\040data"]);
        assert_eq!(m[0].fstype, "overlay");
        let text = String::from_utf8(mounts_file(&m)).unwrap();
        assert_eq!(
            text,
            "overlay / overlay rw,relatime 0 0\n/dev/vda /mnt/my\\040data ext4 rw,relatime 0 0\n"
        );
        let info = String::from_utf8(mountinfo_file(&m)).unwrap();
        // No host path: not the overlay's layers, not a volume's source directory.
        assert!(
            info.starts_with("40 22 0:40 / / rw,relatime - overlay overlay rw\n"),
            "{info}"
        );
        assert!(!info.contains("/img") && !info.contains("/data"), "{info}");
    }

    #[test]
    fn a_root_that_is_no_mount_point_is_shown_as_its_filesystem() {
        let m = beneath(INFO, Path::new("/tmp/rootfs"));
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].point.as_str(), m[0].fstype.as_str()), ("/", "ext4"));
        // Another sandbox's mounts are not shown, nor a sibling sharing a prefix.
        let m = beneath(INFO, Path::new("/var/lib/torpor/s1/root/mer"));
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].fstype, "ext4");
    }

    #[test]
    fn escapes_round_trip() {
        assert_eq!(unescape("/a\\040b\\134c"), "/a b\\c");
        assert_eq!(escape("/a b\\c"), "/a\\040b\\134c");
        assert_eq!(unescape("/trailing\\04"), "/trailing\\04");
    }
}
