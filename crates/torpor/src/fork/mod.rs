//! `torpor fork TEMPLATE`: a new sandbox that carries on from the live sandbox TEMPLATE as it
//! is now, under an identity of its own (issue 31; the design is `docs/design/fork.md`).
//!
//! ```text
//! torpor fork T ──▶ T's fork image, T/fork/image-N: reused while T has stayed hibernated
//!                   since it was written (its wakes and deflates unchanged); else written now:
//!                   T paused and deflated (a hibernated T is woken first), its checkpoint and
//!                   root's upper layer copied out, and T left *hibernated* (`unpause`: the
//!                   next request wakes it, nothing of it runs meanwhile). A dormant T's own
//!                   checkpoint is linked instead (T stays dormant).
//!               ──▶ `run --from T/fork/image-N` under the instance's ID, ports, host name:
//!                   its memory is the image's, mapped copy-on-write (KVM) or copied (trap).
//! ```
//!
//! One image serves every fork until the template runs again, so forking many instances of
//! a hibernated template writes one image. Images are written under a lock
//! (`T/fork/lock`), so that concurrent forks share one. An older image is removed when a new
//! one is written: instances made from it hold its files open or mapped already.

pub mod image;

use anyhow::{bail, Context, Result};

use crate::snapshot::restoring::{publish_spec, Restoring};
use image::image_of;

/// `torpor fork`: prepares TEMPLATE's fork image and starts the instance from it.
pub fn fork(a: crate::cli::ForkArgs) -> Result<u8> {
    let id = crate::statedir::id_or_new(a.name.as_deref())?;
    let (image, platform) = image_of(&a.template)?;
    tracing::debug!(image = %image.display(), "fork: image ready");
    let record = Restoring::open(&image)?.record()?;
    if a.publish.is_empty() && !record.publish.is_empty() {
        bail!(
            "the template publishes {}: give the instance ports of its own with -p \
             [HOST_IP:]HOST_PORT:GUEST_PORT (the template's are the template's)",
            record.publish.join(", ")
        );
    }
    let mut argv: Vec<String> = crate::cli::global_args()
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // The instance runs where its template ran: its memory holds that platform's vDSO.
    argv.push(format!("--platform={platform}"));
    argv.extend(["run".into(), "--from".into()]);
    argv.push(image.to_string_lossy().into_owned());
    argv.push(format!("--name={id}"));
    for p in &a.publish {
        argv.push(format!("--publish={}", publish_spec(p)));
    }
    if let Some(h) = &a.hostname {
        argv.push(format!("--hostname={h}"));
    }
    if a.allow_outbound {
        argv.push("--allow-outbound".into());
    }
    if let Some(t) = a.hibernate_after {
        argv.push(format!("--hibernate-after={}ms", t.as_millis()));
    }
    if a.detach {
        return crate::run::detach_args(&id, "run", argv);
    }
    let cli = <crate::cli::Cli as clap::Parser>::try_parse_from(
        std::iter::once("torpor".to_string()).chain(argv),
    )
    .context("the instance's command line")?;
    match cli.command {
        crate::cli::Command::Run(args) => crate::snapshot::clone(args),
        _ => bail!("the instance's command line is not a run"),
    }
}
