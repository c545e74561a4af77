//! prctl(2): the process and thread attributes C runtimes and servers set (names, the
//! parent-death signal, subreapers, timer slack, dumpability and the credential options).

use abi::Errno;

use super::{SysResult, SyscallArgs};
use crate::task::Task;

/// Implements prctl(2) for the options C runtimes use at start-up.
pub fn sys_prctl(t: &mut Task, a: &SyscallArgs) -> SysResult {
    match a.int(0) {
        libc::PR_SET_NAME => {
            let mut name = [0u8; 16];
            let s = t.copy_in_str(a.gva(1), 4096).or_else(|e| {
                if e == Errno::ENAMETOOLONG {
                    Ok(Vec::new())
                } else {
                    Err(e)
                }
            })?;
            let n = s.len().min(15);
            name[..n].copy_from_slice(&s[..n]);
            t.set_comm(name);
            Ok(0)
        }
        libc::PR_GET_NAME => {
            let name = t.comm();
            t.copy_out(a.gva(1), &name)?;
            Ok(0)
        }
        libc::PR_GET_DUMPABLE => Ok(u64::from(t.creds.dumpable)),
        libc::PR_SET_PDEATHSIG => {
            let sig = a.int(1);
            if !(0..=crate::task::NSIG as i32).contains(&sig) {
                return Err(Errno::EINVAL);
            }
            t.group.procs.set_pdeathsig(t.pid, sig);
            Ok(0)
        }
        libc::PR_SET_CHILD_SUBREAPER => {
            t.group.procs.set_subreaper(t.pid, a.u(1) != 0);
            Ok(0)
        }
        libc::PR_GET_CHILD_SUBREAPER => {
            let on = i32::from(t.group.procs.is_subreaper(t.pid));
            t.copy_out(a.gva(1), &on.to_le_bytes())?;
            Ok(0)
        }
        libc::PR_GET_PDEATHSIG => {
            let sig = t.group.procs.pdeathsig(t.pid);
            t.copy_out(a.gva(1), &sig.to_le_bytes())?;
            Ok(0)
        }
        libc::PR_SET_TIMERSLACK => {
            t.control.set_timer_slack(a.u(1));
            Ok(0)
        }
        libc::PR_GET_TIMERSLACK => Ok(t.control.timer_slack()),
        _ => prctl_creds(t, a),
    }
}

/// The prctl(2) options on credentials: KEEPCAPS, NO_NEW_PRIVS, the bounding set, ambient
/// capabilities and the securebits Linux reports (none set).
fn prctl_creds(t: &mut Task, a: &SyscallArgs) -> SysResult {
    use crate::creds::cap;
    let flag = |v: u64| match v {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(Errno::EINVAL),
    };
    let mut c = (*t.creds).clone();
    let answer = match a.int(0) {
        libc::PR_SET_DUMPABLE => {
            c.dumpable = flag(a.u(1))?;
            0
        }
        libc::PR_GET_KEEPCAPS => u64::from(c.keep_caps),
        libc::PR_SET_KEEPCAPS => {
            c.keep_caps = flag(a.u(1))?;
            0
        }
        libc::PR_GET_NO_NEW_PRIVS => {
            if a.u(1) | a.u(2) | a.u(3) | a.u(4) != 0 {
                return Err(Errno::EINVAL);
            }
            u64::from(c.no_new_privs)
        }
        libc::PR_SET_NO_NEW_PRIVS => {
            if a.u(1) != 1 || a.u(2) | a.u(3) | a.u(4) != 0 {
                return Err(Errno::EINVAL);
            }
            c.no_new_privs = true;
            0
        }
        libc::PR_CAPBSET_READ => {
            if a.u(1) > u64::from(cap::LAST) {
                return Err(Errno::EINVAL);
            }
            (c.caps.bounding >> a.u(1)) & 1
        }
        libc::PR_CAPBSET_DROP => {
            c.drop_bounding(a.u(1))?;
            0
        }
        libc::PR_CAP_AMBIENT => {
            let rest_zero = a.u(3) | a.u(4) == 0;
            match a.u(1) as i32 {
                libc::PR_CAP_AMBIENT_IS_SET if rest_zero => {
                    if a.u(2) > u64::from(cap::LAST) {
                        return Err(Errno::EINVAL);
                    }
                    (c.caps.ambient >> a.u(2)) & 1
                }
                libc::PR_CAP_AMBIENT_RAISE if rest_zero => {
                    c.set_ambient(a.u(2), true)?;
                    0
                }
                libc::PR_CAP_AMBIENT_LOWER if rest_zero => {
                    c.set_ambient(a.u(2), false)?;
                    0
                }
                libc::PR_CAP_AMBIENT_CLEAR_ALL if a.u(2) | a.u(3) | a.u(4) == 0 => {
                    c.caps.ambient = 0;
                    0
                }
                _ => return Err(Errno::EINVAL),
            }
        }
        libc::PR_GET_SECUREBITS => 0,
        libc::PR_SET_SECUREBITS => {
            if !c.capable(cap::SETPCAP) {
                return Err(Errno::EPERM);
            }
            // Only the bits Linux starts with (none) are kept; others would change rules
            // this kernel does not model.
            if a.u(1) != 0 {
                return Err(Errno::EINVAL);
            }
            0
        }
        _ => return Err(Errno::EINVAL),
    };
    if c != *t.creds {
        t.creds = std::sync::Arc::new(c);
        t.publish_identity();
    }
    Ok(answer)
}
