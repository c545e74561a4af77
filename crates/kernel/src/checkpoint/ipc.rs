//! System V IPC through a checkpoint: the tunables, and the message queues (each queue's
//! fields in the state, its messages' texts in one blob). (Shared memory segments and
//! semaphore sets are not saved yet: a checkpoint of a sandbox holding one fails.)

use super::blobs::{BlobWriter, Blobs};
use super::state::{IpcLimitsState, MsgQueueState, MsgQueuesState, MsgState};
use super::CheckpointError;
use crate::ipc::ids::IPCMNI;
use crate::ipc::limits::{MsgLimits, SemLimits, ShmLimits};
use crate::ipc::msg::{IdCursor, Message, MsgImage, MsgQueue, MsgTable, MSGPOOL, MSG_HEADER};
use crate::ipc::IpcPerm;
use crate::task::ProcessTable;

/// The tunables of the sandbox `procs` is the process table of.
pub fn export_limits(procs: &ProcessTable) -> IpcLimitsState {
    let (shm, sem, msg) = (
        procs.sysv_shm.limits(),
        procs.sysv_sem.limits(),
        procs.sysv_msg.limits(),
    );
    IpcLimitsState {
        shm: [shm.max, shm.all, shm.mni as u64],
        sem: [sem.msl, sem.mns, sem.opm, sem.mni],
        msg: [msg.max, msg.mnb, msg.mni],
    }
}

/// Gives the sandbox `procs` is the process table of the tunables `state` holds.
///
/// # Errors
/// [`CheckpointError::Restore`] for values Linux would not take (a `*mni` past 32768,
/// `msgmax` or `msgmnb` past `INT_MAX`).
pub fn import_limits(state: &IpcLimitsState, procs: &ProcessTable) -> Result<(), CheckpointError> {
    let [shm_max, shm_all, shm_mni] = state.shm;
    let [msl, mns, opm, sem_mni] = state.sem;
    let [msg_max, msg_mnb, msg_mni] = state.msg;
    let mni_ok = |n: i64| (0..=IPCMNI as i64).contains(&n);
    if !mni_ok(shm_mni as i64)
        || !mni_ok(i64::from(sem_mni))
        || !mni_ok(i64::from(msg_mni))
        || msg_max > i32::MAX as u32
        || msg_mnb > i32::MAX as u32
    {
        return Err(CheckpointError::Restore(
            "System V IPC tunables out of Linux's ranges".into(),
        ));
    }
    procs.sysv_shm.set_limits(ShmLimits {
        max: shm_max,
        all: shm_all,
        mni: shm_mni as usize,
    });
    procs.sysv_sem.set_limits(SemLimits {
        msl,
        mns,
        opm,
        mni: sem_mni,
    });
    procs.sysv_msg.set_limits(MsgLimits {
        max: msg_max,
        mnb: msg_mnb,
        mni: msg_mni,
    });
    Ok(())
}

/// The queues of `table`, their texts added to `blobs`.
pub fn export_msg_queues(table: &MsgTable, blobs: &mut BlobWriter) -> MsgQueuesState {
    let image = table.export();
    let queues = image
        .queues
        .iter()
        .map(|q| {
            let texts: Vec<u8> = q.messages().flat_map(|m| m.text.iter().copied()).collect();
            MsgQueueState {
                id: q.id,
                key: q.perm.key,
                uid: q.perm.uid,
                gid: q.perm.gid,
                cuid: q.perm.cuid,
                cgid: q.perm.cgid,
                mode: q.perm.mode,
                times: [q.stime, q.rtime, q.ctime],
                qbytes: q.qbytes,
                pids: [q.lspid, q.lrpid],
                messages: q
                    .messages()
                    .map(|m| MsgState {
                        mtype: m.mtype,
                        // At most MSGMAX: a message never grows.
                        len: m.text.len() as u32,
                    })
                    .collect(),
                texts: blobs.add(&texts),
            }
        })
        .collect();
    MsgQueuesState {
        seq: image.cursor.seq,
        last_idx: image.cursor.last_idx,
        next_idx: image.cursor.next_idx,
        queues,
    }
}

/// Puts the queues `state` describes into the empty `table`, their texts read from `blobs`.
///
/// # Errors
/// [`CheckpointError::Restore`] for a blob that is not there or does not hold the texts the
/// queue lists, or a queue Linux could not have made.
pub fn import_msg_queues(
    state: &MsgQueuesState,
    blobs: &Blobs,
    table: &MsgTable,
) -> Result<(), CheckpointError> {
    let bad = |id: i32, why: String| CheckpointError::Restore(format!("message queue {id}: {why}"));
    let mut queues = Vec::with_capacity(state.queues.len().min(IPCMNI));
    // What the messages cost the sandbox's pool, checked as they are read.
    let mut pooled = 0u64;
    for s in &state.queues {
        let texts = blobs.get(s.texts).map_err(|e| bad(s.id, e.to_string()))?;
        let mut q = MsgQueue::new(IpcPerm {
            key: s.key,
            uid: s.uid,
            gid: s.gid,
            cuid: s.cuid,
            cgid: s.cgid,
            mode: s.mode,
        });
        q.id = s.id;
        [q.stime, q.rtime, q.ctime] = s.times;
        q.qbytes = s.qbytes;
        [q.lspid, q.lrpid] = s.pids;
        let mut at = 0usize;
        for m in &s.messages {
            let len = m.len as usize;
            let text = texts
                .get(at..at + len)
                .filter(|_| len as u64 <= MSGPOOL * 1024)
                .ok_or_else(|| bad(s.id, "a message beyond its texts".into()))?;
            at += len;
            pooled += len as u64 + MSG_HEADER;
            if pooled > MSGPOOL * 1024 {
                return Err(bad(
                    s.id,
                    "more queued bytes than a sandbox may hold".into(),
                ));
            }
            q.push(Message {
                mtype: m.mtype,
                text: text.to_vec(),
            });
        }
        if at != texts.len() {
            return Err(bad(s.id, "texts that no message holds".into()));
        }
        queues.push(q);
    }
    table
        .import(MsgImage {
            cursor: IdCursor {
                seq: state.seq,
                last_idx: state.last_idx,
                next_idx: state.next_idx,
            },
            queues,
        })
        .map_err(|e| CheckpointError::Restore(e.to_string()))
}
