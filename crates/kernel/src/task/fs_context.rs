//! What `CLONE_FS` shares between tasks (Linux's `fs_struct`): the working directory and the
//! file mode creation mask. Threads share one (pthreads, Go and the JVM clone with
//! `CLONE_FS`): a `chdir` or `umask` in one is seen by the others. A process made by fork, or
//! a thread made without the flag, gets a copy. (The root is the sandbox's, the same for all.)

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// A working directory and a umask, shared by the tasks cloned with `CLONE_FS`.
#[derive(Debug)]
pub struct FsContext {
    /// Working directory (a guest path).
    cwd: Mutex<Vec<u8>>,
    /// File mode creation mask.
    umask: AtomicU32,
}

impl FsContext {
    /// A context of its own.
    pub fn new(cwd: Vec<u8>, umask: u32) -> Arc<FsContext> {
        Arc::new(FsContext {
            cwd: Mutex::new(cwd),
            umask: AtomicU32::new(umask & 0o777),
        })
    }

    /// The working directory.
    pub fn cwd(&self) -> Vec<u8> {
        self.cwd.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Changes the working directory for every task sharing the context.
    pub fn set_cwd(&self, cwd: Vec<u8>) {
        *self.cwd.lock().unwrap_or_else(|e| e.into_inner()) = cwd;
    }

    /// The file mode creation mask.
    pub fn umask(&self) -> u32 {
        self.umask.load(Ordering::Relaxed)
    }

    /// Sets the mask (its permission bits), answering the previous one.
    pub fn set_umask(&self, mask: u32) -> u32 {
        self.umask.swap(mask & 0o777, Ordering::Relaxed)
    }

    /// A copy of its own (fork, or clone without `CLONE_FS`).
    pub fn copy(&self) -> Arc<FsContext> {
        FsContext::new(self.cwd(), self.umask())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_contexts_see_each_others_changes_and_copies_do_not() {
        let a = FsContext::new(b"/".to_vec(), 0o022);
        let shared = a.clone();
        let copy = a.copy();
        shared.set_cwd(b"/tmp".to_vec());
        assert_eq!(shared.set_umask(0o7077), 0o022);
        assert_eq!(a.cwd(), b"/tmp");
        assert_eq!(a.umask(), 0o077, "only the permission bits");
        assert_eq!(copy.cwd(), b"/");
        assert_eq!(copy.umask(), 0o022);
    }
}
