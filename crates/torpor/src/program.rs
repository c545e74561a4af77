//! Which program a command line names in a root filesystem, as `execvp` would find it: the
//! OCI bundle's `process.args[0]` and `torpor run ROOTFS -- PROGRAM` alike (`python3` is the
//! first `python3` of the guest's `PATH` in the root, following links inside the root only).

use std::path::{Path, PathBuf};

/// The search path when the environment sets none (runc's and podman's default PATH).
const DEFAULT_SEARCH_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The guest path of the program `arg0`: itself when it holds a `/` (relative to `cwd`), else
/// the first `PATH` entry of `env` (or the default one) where the root has such a file.
/// Symbolic links are followed inside the root only (an absolute link target is taken
/// relative to the root), at most 40 of them.
pub fn resolve(rootfs: &Path, arg0: &str, env: &[String], cwd: &str) -> Option<String> {
    if arg0.contains('/') {
        let p = if arg0.starts_with('/') {
            arg0.to_string()
        } else {
            format!("{}/{}", cwd.trim_end_matches('/'), arg0)
        };
        return exists_in_root(rootfs, &p).then_some(p);
    }
    let path = env
        .iter()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or(DEFAULT_SEARCH_PATH);
    path.split(':')
        .filter(|d| d.starts_with('/'))
        .map(|d| format!("{}/{}", d.trim_end_matches('/'), arg0))
        .find(|p| exists_in_root(rootfs, p))
}

/// Whether guest path `p` names a file inside `rootfs`, following symbolic links as the
/// sandbox would (inside the root).
pub fn exists_in_root(rootfs: &Path, p: &str) -> bool {
    let mut path = p.to_string();
    for _ in 0..40 {
        // Resolve the directories' links by walking component by component.
        let mut cur = PathBuf::from("/");
        let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let mut restart = None;
        for (i, c) in comps.iter().enumerate() {
            match *c {
                "." => continue,
                ".." => {
                    cur.pop();
                    continue;
                }
                _ => cur.push(c),
            }
            let host = rootfs.join(cur.strip_prefix("/").unwrap_or(&cur));
            match std::fs::symlink_metadata(&host) {
                Ok(m) if m.file_type().is_symlink() => {
                    let Ok(target) = std::fs::read_link(&host) else {
                        return false;
                    };
                    let target = target.to_string_lossy().into_owned();
                    let rest = comps[i + 1..].join("/");
                    let base = if target.starts_with('/') {
                        target
                    } else {
                        let parent = cur.parent().unwrap_or(Path::new("/"));
                        format!("{}/{}", parent.display(), target)
                    };
                    restart = Some(if rest.is_empty() {
                        base
                    } else {
                        format!("{base}/{rest}")
                    });
                    break;
                }
                Ok(m) if i + 1 == comps.len() => return m.is_file(),
                Ok(m) if m.is_dir() => {}
                _ => return false,
            }
        }
        match restart {
            Some(next) => path = next,
            None => return false,
        }
    }
    false
}
