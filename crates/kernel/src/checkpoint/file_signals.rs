//! What open files signal in a checkpoint: each one's owner and `F_SETSIG` signal
//! ([`crate::fd::owner`]), lease ([`crate::fd::lease`]) and directory notification requests
//! ([`crate::fd::dnotify`]), by the open file's index among the checkpoint's open files.
//! Pipes with `O_ASYNC` come back from their saved status flags.

use std::collections::HashMap;
use std::sync::Arc;

use super::state::{DnotifyState, FileSignalsState, FilesState};
use super::CheckpointError;
use crate::fd::{dnotify, lease, FdTable, OpenFile};

/// The signal state of the open files of `tables` (each process's, as
/// [`super::files::export`] indexed them in `files`).
pub fn export(tables: &[(i32, &FdTable)], files: &[FilesState]) -> Vec<FileSignalsState> {
    // Each open file once, by its index; each table's address, by pid.
    let mut index: HashMap<*const OpenFile, (usize, Arc<OpenFile>, i32)> = HashMap::new();
    let mut pid_of: HashMap<usize, i32> = HashMap::new();
    for ((pid, table), state) in tables.iter().zip(files) {
        pid_of.insert(*table as *const FdTable as usize, *pid);
        for (fd, file) in table.iter() {
            if let Some(d) = state.fds.iter().find(|d| d.fd == fd) {
                index
                    .entry(Arc::as_ptr(&file))
                    .or_insert((d.file, file.clone(), fd));
            }
        }
    }
    let mut out: HashMap<usize, FileSignalsState> = HashMap::new();
    let blank = |file| FileSignalsState {
        file,
        owner: None,
        sig: 0,
        lease: None,
        dnotify: Vec::new(),
    };
    for (i, file, fd) in index.values() {
        if let Some((owner, sig)) = file.sigio.saved() {
            let e = out.entry(*i).or_insert_with(|| blank(*i));
            e.owner = owner;
            e.sig = sig;
        }
        if let Some(kind) = lease::saved(file) {
            out.entry(*i).or_insert_with(|| blank(*i)).lease = Some((kind, *fd));
        }
    }
    for (file, table, fd, mask) in dnotify::saved() {
        let (Some((i, _, _)), Some(&pid)) = (index.get(&Arc::as_ptr(&file)), pid_of.get(&table))
        else {
            continue;
        };
        out.entry(*i)
            .or_insert_with(|| blank(*i))
            .dnotify
            .push(DnotifyState { pid, fd, mask });
    }
    let mut v: Vec<FileSignalsState> = out.into_values().collect();
    v.sort_by_key(|s| s.file);
    v
}

/// Gives the restored open files `files` their owners, signals and leases.
///
/// # Errors
/// [`CheckpointError::Restore`] for a record naming no open file or holding bad values.
pub fn import(states: &[FileSignalsState], files: &[Arc<OpenFile>]) -> Result<(), CheckpointError> {
    let bad = |what: String| CheckpointError::Restore(what);
    for s in states {
        let file = files.get(s.file).ok_or_else(|| {
            bad(format!(
                "signal state of open file {}: no such file",
                s.file
            ))
        })?;
        file.sigio.restore(s.owner, s.sig).map_err(bad)?;
        if let Some((kind, fd)) = s.lease {
            lease::restore(file, fd, kind).map_err(bad)?;
        }
    }
    Ok(())
}

/// Places again the directory notification requests process `pid`'s table made (`fds`, as
/// restored), and registers its pipes with `O_ASYNC`.
///
/// # Errors
/// [`CheckpointError::Restore`] for a request naming no open file, or one the host refuses.
pub fn import_table(
    states: &[FileSignalsState],
    pid: i32,
    fds: &Arc<FdTable>,
    files: &[Arc<OpenFile>],
) -> Result<(), CheckpointError> {
    let bad = |what: String| CheckpointError::Restore(what);
    crate::fd::owner::restored(fds);
    for s in states {
        for d in s.dnotify.iter().filter(|d| d.pid == pid) {
            let file = files
                .get(s.file)
                .ok_or_else(|| bad(format!("directory notification of open file {}", s.file)))?;
            dnotify::restore(Arc::as_ptr(fds) as usize, d.fd, file, d.mask).map_err(bad)?;
        }
    }
    Ok(())
}
