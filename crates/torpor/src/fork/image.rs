//! A template's fork image (`docs/design/fork.md` §2): written from the live sandbox, reused
//! while it sleeps, linked from a dormant one. Below the `fork` verb and the OCI `create`
//! that starts a container as a fork (`crate::oci`), so that neither names the other.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::control::{call, Request};
use crate::snapshot::restoring::{Restoring, HOLDER_OUTPUT, UPPER};

/// The directory of a template's fork images, in its state directory.
pub const DIR: &str = "fork";
/// The record of the image in use ([`Current`]).
const CURRENT: &str = "current.json";
/// How long writing an image may take.
const TIMEOUT: Duration = Duration::from_secs(120);
/// How long a plain request may take.
const REQUEST: Duration = Duration::from_secs(10);

/// The image a template's forks start from, and the template's counters when it was
/// written: while the template is hibernated with the same counters, nothing of it has run
/// since.
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct Current {
    /// The image's directory name in `fork/`.
    image: String,
    /// The template's wakes when the image was written.
    wakes: u64,
    /// Its deflates then.
    deflates: u64,
}

impl Current {
    /// Whether this image is still the template as it is, given its stats now.
    fn still_valid(&self, stats: &serde_json::Value) -> bool {
        stats["hibernate_state"] == "hibernated"
            && stats["wakes"].as_u64() == Some(self.wakes)
            && stats["deflates"].as_u64() == Some(self.deflates)
    }
}

/// The fork image of the sandbox `template`, written now unless the last one is still valid,
/// and the platform the template runs on.
///
/// # Errors
/// A template that is not there or not running (paused, stopped, a foreground one that
/// cannot be checkpointed), or an image that cannot be written.
pub fn image_of(template: &str) -> Result<(PathBuf, String)> {
    let sdir = crate::statedir::dir_of(template)?;
    if !sdir.is_dir() {
        bail!("sandbox {template:?} does not exist");
    }
    if !crate::statedir::owner_alive(&sdir) {
        bail!("sandbox {template:?} is not running");
    }
    let forks = sdir.join(DIR);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&forks)
        .with_context(|| format!("creating {}", forks.display()))?;
    let _lock = lock(&forks.join("lock"))?;
    let state = call(&sdir, &Request::State, REQUEST)?;
    let stats = call(&sdir, &Request::Stats, REQUEST)?;
    let platform = stats["platform"]
        .as_str()
        .context("the template's stats name no platform")?
        .to_string();
    match state["status"].as_str() {
        Some("dormant") => return Ok((image_of_dormant(&sdir, &forks)?, platform)),
        Some("paused") => bail!("{template} is paused: resume it before forking it"),
        Some("created") => bail!("{template} has not started: start it before forking it"),
        Some("stopped") => bail!("{template} has stopped"),
        _ => {}
    }
    if let Some(cur) = read_current(&forks) {
        let dir = forks.join(&cur.image);
        if cur.still_valid(&stats) && dir.is_dir() {
            return Ok((dir, platform));
        }
    }
    Ok((write_image(&sdir, &forks)?, platform))
}

/// Writes a new image of the running or hibernated sandbox at `sdir` into `forks`, and leaves
/// the sandbox hibernated.
fn write_image(sdir: &Path, forks: &Path) -> Result<PathBuf> {
    let out = sdir.join(HOLDER_OUTPUT);
    if out.symlink_metadata().is_ok() {
        // Left by a checkpoint that was interrupted.
        crate::cowroot::remove_all(&out)
            .with_context(|| format!("removing the old {}", out.display()))?;
    }
    // A hibernated template is checkpointed where it sleeps: it is not woken.
    if let Err(e) = call(sdir, &Request::Checkpoint, TIMEOUT) {
        // A checkpoint that fails (something of the template it cannot save yet) leaves it
        // paused: it carries on as it was (`resume` leaves a hibernated one hibernated).
        let _ = crate::cowroot::remove_all(&out);
        let _ = call(sdir, &Request::Resume, REQUEST);
        return Err(e).context("writing the template's image");
    }
    // Paused from here: nothing of the template runs until the unpause below.
    let name = format!("image-{}", unique_suffix());
    let dest = forks.join(&name);
    let written = (|| -> Result<serde_json::Value> {
        let upper = sdir.join("root").join("upper");
        if upper.is_dir() {
            let to = out.join(UPPER);
            std::fs::create_dir(&to).with_context(|| format!("creating {}", to.display()))?;
            crate::treecopy::copy_tree(&upper, &to)?;
        }
        std::fs::rename(&out, &dest)
            .with_context(|| format!("moving the image to {}", dest.display()))?;
        call(sdir, &Request::Stats, REQUEST)
    })();
    let stats = match written {
        Ok(s) => s,
        Err(e) => {
            let _ = crate::cowroot::remove_all(&out);
            let _ = crate::cowroot::remove_all(&dest);
            let _ = call(sdir, &Request::Resume, REQUEST);
            return Err(e);
        }
    };
    call(sdir, &Request::Unpause, REQUEST).context("leaving the template hibernated")?;
    let cur = Current {
        image: name,
        wakes: stats["wakes"].as_u64().unwrap_or(u64::MAX),
        deflates: stats["deflates"].as_u64().unwrap_or(u64::MAX),
    };
    write_current(forks, &cur)?;
    remove_other_images(forks, &cur.image);
    Ok(dest)
}

/// The image of a dormant template: its own checkpoint's files linked (the template stays
/// dormant), with a copy of its root's upper layer. Written at every fork: a dormant
/// template's checkpoint is gone once it wakes.
fn image_of_dormant(sdir: &Path, forks: &Path) -> Result<PathBuf> {
    let checkpoint = sdir
        .join(crate::dormancy::DIR)
        .join(crate::dormancy::CHECKPOINT);
    let restoring = Restoring::open(&checkpoint)?;
    let name = format!("image-{}", unique_suffix());
    let dest = forks.join(&name);
    let made = (|| -> Result<()> {
        restoring.link_into(&dest)?;
        let upper = sdir.join("root").join("upper");
        if upper.is_dir() {
            let to = dest.join(UPPER);
            std::fs::create_dir(&to).with_context(|| format!("creating {}", to.display()))?;
            crate::treecopy::copy_tree(&upper, &to)?;
        }
        Ok(())
    })();
    if let Err(e) = made {
        let _ = crate::cowroot::remove_all(&dest);
        return Err(e);
    }
    // No record: the next fork links the dormant checkpoint again.
    let _ = std::fs::remove_file(forks.join(CURRENT));
    remove_other_images(forks, &name);
    Ok(dest)
}

/// The record of the image in use, if there is a readable one.
fn read_current(forks: &Path) -> Option<Current> {
    let bytes = std::fs::read(forks.join(CURRENT)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Writes the record under a temporary name, renamed over the old one.
fn write_current(forks: &Path, cur: &Current) -> Result<()> {
    let tmp = forks.join(format!("{CURRENT}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(&serde_json::to_vec(cur)?)?;
    f.sync_all()?;
    std::fs::rename(&tmp, forks.join(CURRENT)).context("recording the fork image")
}

/// Removes every image but `keep` (instances made from them hold their files already).
fn remove_other_images(forks: &Path, keep: &str) {
    let Ok(entries) = std::fs::read_dir(forks) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("image-") && name != keep {
            let _ = crate::cowroot::remove_all(&e.path());
        }
    }
}

/// A name suffix no other image of this template has: the time in nanoseconds and this
/// process's pid.
fn unique_suffix() -> String {
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{ns}-{}", std::process::id())
}

/// An exclusive `flock` on `path` (made if missing), held while the returned file lives.
fn lock(path: &Path) -> Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    kernel::fd::host::flock(std::os::fd::AsFd::as_fd(&f), libc::LOCK_EX)
        .map_err(|e| std::io::Error::from_raw_os_error(e.0))
        .with_context(|| format!("locking {}", path.display()))?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(state: &str, wakes: u64, deflates: u64) -> serde_json::Value {
        serde_json::json!({"hibernate_state": state, "wakes": wakes, "deflates": deflates})
    }

    /// An image stays the template's only while the template has stayed hibernated with the
    /// counters it had when the image was written.
    #[test]
    fn an_image_is_valid_only_while_the_template_has_not_run() {
        let cur = Current {
            image: "image-1".into(),
            wakes: 3,
            deflates: 4,
        };
        assert!(cur.still_valid(&stats("hibernated", 3, 4)));
        // Woken since (by a request), or running now.
        assert!(!cur.still_valid(&stats("hibernated", 4, 5)));
        assert!(!cur.still_valid(&stats("woken", 3, 4)));
        assert!(!cur.still_valid(&stats("hot", 3, 4)));
        // Hibernated again by a deflate of its own after running.
        assert!(!cur.still_valid(&stats("hibernated", 3, 5)));
        // Stats without the counters never validate an image.
        assert!(!cur.still_valid(&serde_json::json!({"hibernate_state": "hibernated"})));
    }

    #[test]
    fn the_record_round_trips_and_refuses_unknown_fields() {
        let dir = std::env::temp_dir().join(format!("torpor-fork-rec-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert!(read_current(&dir).is_none());
        let cur = Current {
            image: "image-7".into(),
            wakes: 1,
            deflates: 2,
        };
        write_current(&dir, &cur).unwrap();
        assert_eq!(read_current(&dir), Some(cur));
        std::fs::write(
            dir.join(CURRENT),
            br#"{"image":"x","wakes":1,"deflates":2,"extra":1}"#,
        )
        .unwrap();
        assert!(read_current(&dir).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
