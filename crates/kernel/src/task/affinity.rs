//! The host CPUs a sandbox may use, remembered before any of its threads runs.
//!
//! A platform may pin the runtime's task threads to one CPU at a time (the trap platform pairs
//! each with its stub thread, `platform-trap/src/pair.rs`). The application must still see
//! the CPUs the sandbox may use (`sched_getaffinity`: runtimes size their thread pools by it),
//! and a thread a task thread starts must not inherit that pin: each task thread frees itself
//! when it starts ([`free_current_thread`]), as do the runtime's own threads started from one.

use std::sync::OnceLock;

/// The CPUs the sandbox may use, as [`remember`] found them.
static HOST_CPUS: OnceLock<libc::cpu_set_t> = OnceLock::new();

/// The calling thread's allowed CPUs.
fn current() -> std::io::Result<libc::cpu_set_t> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid set of the size given.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(set)
}

/// Records the calling thread's CPUs as the sandbox's, once: call it before any of the
/// sandbox's threads runs.
pub fn remember() {
    if let Ok(set) = current() {
        let _ = HOST_CPUS.set(set);
    }
}

/// The CPUs the sandbox may use, as the bytes of a cpu_set_t (the calling thread's if
/// [`remember`] was not called).
///
/// # Errors
/// The host's, reading the calling thread's mask.
pub fn host_cpus() -> std::io::Result<Vec<u8>> {
    let set = match HOST_CPUS.get() {
        Some(s) => *s,
        None => current()?,
    };
    // SAFETY: cpu_set_t is plain data.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (&set as *const libc::cpu_set_t).cast::<u8>(),
            std::mem::size_of::<libc::cpu_set_t>(),
        )
    };
    Ok(bytes.to_vec())
}

/// Lets the calling thread run on every CPU the sandbox may use (a thread started from a
/// pinned task thread inherits its pin).
pub fn free_current_thread() {
    if let Some(set) = HOST_CPUS.get() {
        // SAFETY: a valid cpu_set_t of the size given.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(set), set) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_started_from_a_pinned_one_is_freed() {
        remember();
        let all = host_cpus().expect("cpus");
        let count = |b: &[u8]| b.iter().map(|x| x.count_ones()).sum::<u32>();
        if count(&all) < 2 {
            return; // one CPU: nothing to pin away from
        }
        let h = std::thread::spawn(move || {
            // SAFETY: a zeroed set with CPU 0 added, for this thread.
            let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: CPU 0 is within the set.
            unsafe { libc::CPU_SET(0, &mut one) };
            // SAFETY: a valid set of the size given.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&one), &one) };
            std::thread::spawn(|| {
                let inherited = current().expect("mask");
                free_current_thread();
                // SAFETY: CPU_COUNT reads the set.
                (
                    unsafe { libc::CPU_COUNT(&inherited) },
                    current().expect("mask"),
                )
            })
            .join()
            .expect("join")
        });
        let (inherited, freed) = h.join().expect("join");
        assert_eq!(inherited, 1);
        // SAFETY: cpu_set_t is plain data.
        let freed = unsafe {
            std::slice::from_raw_parts(
                (&freed as *const libc::cpu_set_t).cast::<u8>(),
                std::mem::size_of::<libc::cpu_set_t>(),
            )
        };
        assert_eq!(freed, &all[..]);
        // What the application is told stays the sandbox's CPUs.
        assert_eq!(host_cpus().expect("cpus"), all);
    }
}
