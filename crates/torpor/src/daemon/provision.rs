//! `torpor run --from DIR --dormant`: an instance of a checkpoint that is dormant from the
//! start. Its holder sets up what a clone's does (state directory, copy-on-write root seeded
//! with the checkpoint's files, janitor, broker), makes the listening sockets the restored
//! sandbox will have on the instance's own published ports, puts the checkpoint's files into
//! `dormant/` (hard links: no copy of the pages), confines itself and execs `torpor-dormant`
//! without building anything of the sandbox: no VM, no guest memory, no program run. Its first
//! request restores it in place as any dormant sandbox's (`wake.rs`).

use std::os::fd::OwnedFd;
use std::path::Path;

use anyhow::Context;

use super::{dormant, Policy};
use crate::dormancy::{self, WakeRecord};
use crate::janitor::Janitor;
use crate::snapshot::restoring::Restoring;
use kernel::SandboxConfig;

/// The instance to start dormant.
pub(super) struct Instance<'a> {
    /// Its configuration (the checkpoint's, with the instance's ports and root).
    pub cfg: &'a SandboxConfig,
    /// Its ID.
    pub id: &'a str,
    /// Its state directory.
    pub dir: &'a Path,
    /// Its policy.
    pub policy: &'a Policy,
    /// The checkpoint it is an instance of, opened and checked.
    pub checkpoint: &'a Restoring,
}

/// Starts `i` dormant: returns only with the error of a step (the holder then ends, its
/// janitor cleaning up), after reporting it on `ready`.
pub(super) fn provision(
    i: &Instance<'_>,
    ready: &mut Option<OwnedFd>,
    janitor: Option<Janitor>,
) -> anyhow::Error {
    let e = match try_provision(i, ready, janitor) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    crate::ready::report(ready.take(), Err(&e));
    e
}

fn try_provision(
    i: &Instance<'_>,
    ready: &mut Option<OwnedFd>,
    janitor: Option<Janitor>,
) -> anyhow::Result<std::convert::Infallible> {
    if !dormant::possible(
        false,
        &super::Holding::Detached {
            volumes: Vec::new(),
        },
        &i.cfg.platform,
    ) {
        anyhow::bail!(
            "the {} platform cannot go dormant yet: run --dormant needs the KVM platform",
            i.cfg.platform.name()
        );
    }
    let listeners = i
        .checkpoint
        .listeners(i.cfg)
        .context("making the instance's listening sockets")?;
    let published: Vec<std::net::SocketAddr> = i.cfg.publish.iter().map(|p| p.host).collect();
    let made = listeners.len();
    let listeners = dormant::published_only(listeners, &published);
    if made > 0 && !published.is_empty() && listeners.is_empty() {
        // An instance that could not answer its first request must not look ready.
        anyhow::bail!(
            "none of the checkpoint's {made} listening sockets could be bound to a published \
             address ({}): is the port taken?",
            published
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let record = WakeRecord {
        host_files: Some(kernel::fs::procfs::host_files()),
        root: i.cfg.rootfs.clone(),
        wake_mode: i.policy.wake_mode,
        swap_quota: i.policy.swap_quota,
        hibernate_after_ms: i.policy.hibernate_after.map(|t| t.as_millis() as u64),
        memory_floor: i.policy.memory_floor,
        dormant_after_ms: i.policy.dormant_after.map(|t| t.as_millis() as u64),
        broker_publishes: kernel::broker::publishes(),
        created,
        instance: Some(dormancy::Instance {
            publish: crate::snapshot::restoring::HolderRecord::of(i.cfg, i.policy.wake_mode)
                .publish,
            allow_outbound: i.cfg.allow_outbound,
            hostname: i.checkpoint.hostname.clone(),
        }),
        oci_bundle: None,
    };
    let status = dormant::status(
        i.id,
        &i.cfg.rootfs,
        created,
        i.cfg.platform.name(),
        i.policy.wake_mode,
    );
    dormant::write_state(i.dir, &record, &status, |dest| i.checkpoint.link_into(dest))?;
    let control = super::bind_control(i.dir)?;
    if i.policy.memory_floor.is_some() {
        crate::keepalive::Registry::open(super::registry_dir(), i.id)
            .context("opening the keep-alive registry")?;
    }
    super::confine_holder(i.cfg, i.dir, i.policy, true)?;
    crate::ready::report(ready.take(), Ok(()));
    let control_fd = std::os::fd::AsRawFd::as_raw_fd(&control);
    // The listener's descriptor is handed over by number: the exec keeps it open.
    std::mem::forget(control);
    Err(dormant::exec_dormant(dormant::Handover {
        dir: i.dir,
        id: i.id,
        control_fd,
        listeners,
        connections: Vec::new(),
        janitor,
        keep_janitor: i.policy.cpus.is_some(),
    }))
}
