//! `torpor __wake ID ...`: a dormant holder waking in place. `torpor-dormant` execs it with
//! the descriptors the holder kept (the control socket, published listeners, the janitor's
//! pipes, the broker's socket) and the one that woke it; it restores the sandbox from its
//! checkpoint in `DIR/dormant/` as `torpor restore` does, adopting the kept listeners (the
//! connection that woke it is waiting in one), and serves the request that woke it, if one
//! did.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};

use crate::janitor::Janitor;
use crate::snapshot::restoring::Restoring;

/// What a woken holder takes over from its dormant self (`super::Origin::Wake`).
pub struct Woken {
    /// Its checkpoint, opened and checked.
    pub restoring: Restoring,
    /// When the sandbox was created (seconds since the epoch).
    pub created: u64,
    control: Mutex<Option<UnixListener>>,
    janitor: Mutex<Option<Janitor>>,
    pending: Mutex<Option<UnixStream>>,
}

impl Woken {
    /// The control socket's listener (once).
    pub fn take_control(&self) -> Option<UnixListener> {
        self.control
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// The janitor (once).
    pub fn take_janitor(&self) -> Option<Janitor> {
        self.janitor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// The control connection whose request woke the sandbox, unread (once).
    pub fn take_pending(&self) -> Option<UnixStream> {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

/// Takes ownership of an inherited descriptor, close-on-exec from here.
///
/// # Errors
/// It is not open.
fn inherited(fd: RawFd) -> Result<OwnedFd> {
    if fd < 3 {
        bail!("descriptor {fd} is a standard stream, not one a dormant holder keeps");
    }
    crate::dormancy::set_cloexec(fd, true)
        .with_context(|| format!("descriptor {fd} is not open"))?;
    // SAFETY: the descriptor was kept open across the exec for this image, which owns it
    // from here (each number is taken once: the caller passes distinct ones).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `torpor __wake`: the holder again, restored from its dormant state.
///
/// # Errors
/// The state is missing or corrupt, a kept descriptor is not open, or the restore fails.
pub fn wake_in_place(a: crate::cli::WakeArgs) -> Result<u8> {
    tracing::debug!("wake: started");
    let dir = crate::statedir::dir_of(&a.id)?;
    let record = crate::dormancy::read_record(&dir)?;
    // Before anything reads them: this image cannot (its confinement came with it).
    if let Some(h) = &record.host_files {
        kernel::fs::procfs::adopt_host_files(h);
    }
    let mut numbers = vec![a.control];
    numbers.extend(&a.keep);
    numbers.extend(a.broker);
    numbers.extend(a.reclaim);
    let mut seen = numbers.clone();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != numbers.len() {
        bail!("a descriptor is named twice: {numbers:?}");
    }
    let control = UnixListener::from(inherited(a.control)?);
    let kept = a
        .keep
        .iter()
        .map(|&fd| inherited(fd))
        .collect::<Result<Vec<_>>>()?;
    let pending = match a.woken_by {
        Some(fd) if fd != a.control && !a.keep.contains(&fd) => {
            Some(UnixStream::from(inherited(fd)?))
        }
        _ => None,
    };
    let janitor = match a.janitor.as_deref() {
        None => None,
        Some(s) => {
            let (r, w) = s
                .split_once(',')
                .and_then(|(r, w)| Some((r.parse().ok()?, w.parse().ok()?)))
                .with_context(|| format!("--janitor {s:?}: expected REQUEST,DONE"))?;
            Some(Janitor::from_raw_fds(r, w).context("the janitor's pipes")?)
        }
    };
    if let Some(b) = a.broker {
        crate::broker::adopt(inherited(b)?);
    }
    if let Some(r) = a.reclaim {
        crate::oci::cgroup::adopt_reclaim(inherited(r)?);
    }
    if record.broker_publishes {
        kernel::broker::set_publishes();
    }
    let mut restoring = Restoring::open(
        &dir.join(crate::dormancy::DIR)
            .join(crate::dormancy::CHECKPOINT),
    )?;
    tracing::debug!("wake: checkpoint open");
    let (_, mut cfg) = restoring.config(Some(&record.root))?;
    if let Some(i) = &record.instance {
        cfg.publish = i
            .publish
            .iter()
            .map(|p| {
                p.parse()
                    .map_err(|e| anyhow::anyhow!("published port {p:?}: {e}"))
            })
            .collect::<Result<_>>()?;
        cfg.allow_outbound = i.allow_outbound;
        restoring.hostname = i.hostname.clone();
        // An instance's first wake restores its template's checkpoint: a boot of its own.
        // (Its later dormancies save its own state, without an instance record.)
        restoring.new_boot = true;
    }
    // A container's network is the engine's namespace, which this process is still in: every
    // port is the container's own (the checkpoint's record is of a friendly-form sandbox).
    cfg.own_netns |= record.oci_bundle.is_some();
    cfg.kept_sockets = kernel::net::KeptSockets::new(kept);
    let policy = super::Policy {
        wake_mode: record.wake_mode,
        swap_quota: record.swap_quota,
        hibernate_after: record
            .hibernate_after_ms
            .map(std::time::Duration::from_millis),
        memory_floor: record.memory_floor,
        dormant_after: record
            .dormant_after_ms
            .map(std::time::Duration::from_millis),
        cpus: None,
    };
    let woken = Woken {
        restoring,
        created: record.created,
        control: Mutex::new(Some(control)),
        janitor: Mutex::new(janitor),
        pending: Mutex::new(pending),
    };
    super::serve_from(
        &cfg,
        &a.id,
        &policy,
        None,
        match record.oci_bundle {
            // The container's holder again (its mounts are still in this process's namespace).
            Some(bundle) => super::Holding::Oci {
                bundle,
                start_now: true,
            },
            None => super::Holding::Detached {
                volumes: Vec::new(),
            },
        },
        super::Origin::Wake(Box::new(woken)),
    )
}
