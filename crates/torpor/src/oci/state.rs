//! The OCI container state kept on disk (`oci.json` in the sandbox's state directory), so
//! that `state` and `delete` still work once the holder process has ended with its program,
//! and the state JSON of the runtime spec (`ociVersion`, `id`, `status`, `pid`, `bundle`,
//! `annotations`, plus runc's `rootfs` and `created`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// The runtime-spec version torpor implements.
pub const OCI_VERSION: &str = "1.0.2";

/// The file in the state directory.
const FILE: &str = "oci.json";

/// What `create` records.
#[derive(Debug, Serialize, Deserialize)]
pub struct Record {
    /// Container ID.
    pub id: String,
    /// Bundle directory.
    pub bundle: PathBuf,
    /// Root filesystem (host path).
    pub rootfs: PathBuf,
    /// Creation time, RFC 3339 in UTC.
    pub created: String,
    /// The bundle's annotations.
    #[serde(default)]
    pub annotations: HashMap<String, String>,
    /// The container's cgroup (`linux.cgroupsPath`, normalised), removed by `delete`.
    #[serde(default)]
    pub cgroups_path: Option<String>,
}

impl Record {
    /// A record for a container created now; the annotations come from the bundle's
    /// config.json.
    pub fn new(id: &str, bundle: &Path, rootfs: &Path) -> Record {
        let config = std::fs::read_to_string(bundle.join("config.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
        let annotations = config
            .as_ref()
            .and_then(|v| {
                serde_json::from_value::<HashMap<String, String>>(v.get("annotations")?.clone())
                    .ok()
            })
            .unwrap_or_default();
        let cgroups_path = config
            .as_ref()
            .and_then(|v| v.get("linux")?.get("cgroupsPath")?.as_str())
            .filter(|p| !p.is_empty())
            .and_then(|p| super::cgroup::normalise(p).ok());
        Record {
            id: id.to_string(),
            bundle: bundle.to_path_buf(),
            rootfs: rootfs.to_path_buf(),
            created: rfc3339_now(),
            annotations,
            cgroups_path,
        }
    }

    /// Writes the record into the state directory `dir`.
    ///
    /// # Errors
    /// The host's error.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let p = dir.join(FILE);
        std::fs::write(&p, serde_json::to_vec(self)?)
            .with_context(|| format!("writing {}", p.display()))
    }

    /// The record of the state directory `dir`, if it is an OCI container's.
    pub fn load(dir: &Path) -> Option<Record> {
        let t = std::fs::read(dir.join(FILE)).ok()?;
        serde_json::from_slice(&t).ok()
    }
}

/// Whether the state directory `dir` is an OCI container's (kept until `delete`).
pub fn is_oci(dir: &Path) -> bool {
    dir.join(FILE).is_file()
}

/// The exit status recorded when the holder ended.
pub fn exit_status(dir: &Path) -> Option<i32> {
    std::fs::read_to_string(dir.join("exit"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The runtime spec's state of the container in `dir` with `status`; `pid` is the holder's
/// (0 once stopped, as runc reports).
pub fn status_json(dir: &Path, id: &str, status: &str, pid: Option<u32>) -> serde_json::Value {
    let rec = Record::load(dir);
    let pid = if status == "stopped" {
        0
    } else {
        pid.unwrap_or(0)
    };
    let mut v = serde_json::json!({
        "ociVersion": OCI_VERSION,
        "id": id,
        "status": status,
        "pid": pid,
        "bundle": rec.as_ref().map(|r| r.bundle.clone()).unwrap_or_default(),
        "rootfs": rec.as_ref().map(|r| r.rootfs.clone()).unwrap_or_default(),
        "created": rec.as_ref().map(|r| r.created.clone()).unwrap_or_default(),
        "annotations": rec.as_ref().map(|r| r.annotations.clone()).unwrap_or_default(),
    });
    if let (Some(code), Some(obj)) = (exit_status(dir), v.as_object_mut()) {
        obj.insert("exitStatus".into(), code.into());
    }
    v
}

/// The current time as RFC 3339 in UTC with nanoseconds, as runc writes `created`.
pub(crate) fn rfc3339_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(now.as_secs() as i64, now.subsec_nanos())
}

/// Formats seconds since the epoch (UTC) as `YYYY-MM-DDTHH:MM:SS.NNNNNNNNNZ`.
fn rfc3339(secs: i64, nanos: u32) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.000000005Z");
        assert_eq!(rfc3339(1_796_040_000, 0), "2026-11-30T12:00:00.000000000Z");
    }

    #[test]
    fn stopped_state_has_pid_zero_and_exit_status() {
        let d = std::env::temp_dir().join(format!("torpor-oci-state-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Record::new("c1", Path::new("/b"), Path::new("/b/rootfs"))
            .save(&d)
            .unwrap();
        std::fs::write(d.join("exit"), "3\n").unwrap();
        let v = status_json(&d, "c1", "stopped", Some(42));
        assert_eq!(v["status"], "stopped");
        assert_eq!(v["pid"], 0);
        assert_eq!(v["exitStatus"], 3);
        assert_eq!(v["bundle"], "/b");
        assert!(is_oci(&d));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
