//! Builds guest programs from C source with the host's `cc`.
//!
//! Binaries are cached in `<target>/<profile>/guest-bin/` and rebuilt when
//! the source is newer than the binary. Builds go to a temporary name and are
//! renamed into place, so concurrent tests (threads or processes) never see a
//! half-written binary. No binaries are committed to the repository.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

static BUILD_LOCK: Mutex<()> = Mutex::new(());

/// Path of `tests/guest/NAME.c` in the workspace.
pub fn guest_source(name: &str) -> PathBuf {
    crate::workspace_root()
        .join("tests")
        .join("guest")
        .join(format!("{name}.c"))
}

/// Builds `tests/guest/NAME.c` statically (`cc -static -O2`) and returns the
/// binary's path.
///
/// # Panics
///
/// When the source is missing or does not compile.
pub fn guest_program(name: &str) -> PathBuf {
    build_static_c(name, &guest_source(name), &[])
}

/// Compiles `src` with `cc -static -O2 EXTRA_ARGS` into a cached binary named
/// after `name` and returns its path.
///
/// # Panics
///
/// When `cc` is missing or the compile fails (the message carries cc's
/// stderr).
pub fn build_static_c(name: &str, src: &Path, extra_args: &[&str]) -> PathBuf {
    build_c(name, src, true, extra_args)
}

/// Compiles `src` with `cc -O2` (plus `-static` when `static_link`) and
/// `extra_args`, into a cached binary, and returns its path. A dynamic build
/// is useful to test that torpor rejects dynamic ELF files.
///
/// # Panics
///
/// When `cc` is missing or the compile fails.
pub fn build_c(name: &str, src: &Path, static_link: bool, extra_args: &[&str]) -> PathBuf {
    let dir = crate::profile_dir().join("guest-bin");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));

    let mut key = DefaultHasher::new();
    src.hash(&mut key);
    static_link.hash(&mut key);
    extra_args.hash(&mut key);
    let out = dir.join(format!("{name}-{:08x}", key.finish() as u32));

    let _guard = BUILD_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let src_mtime = std::fs::metadata(src)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("guest source {}: {e}", src.display()));
    if let Ok(bin_mtime) = std::fs::metadata(&out).and_then(|m| m.modified()) {
        if bin_mtime >= src_mtime {
            return out;
        }
    }

    let tmp = dir.join(format!(".{name}-{}.tmp", crate::unique_token()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let mut cmd = Command::new(&cc);
    if static_link {
        cmd.arg("-static");
    }
    cmd.args(["-O2", "-Wall"])
        .args(extra_args)
        .arg("-o")
        .arg(&tmp)
        .arg(src);
    let result = cmd.output();
    match result {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let _ = std::fs::remove_file(&tmp);
            panic!(
                "compiling {} failed ({:?}):\n{}\n(static builds need libc6-dev)",
                src.display(),
                cmd,
                String::from_utf8_lossy(&o.stderr)
            );
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            panic!(
                "C compiler `{cc}` not found: install gcc and libc6-dev (needed to build {})",
                src.display()
            )
        }
        Err(e) => panic!("running `{cc}`: {e}"),
    }
    std::fs::rename(&tmp, &out).unwrap_or_else(|e| panic!("rename to {}: {e}", out.display()));
    out
}

/// Says whether the ELF file at `path` has no `PT_INTERP` program header, i.e.
/// is statically linked. `false` for a file that is not a 64-bit ELF.
pub fn elf_is_static(path: &Path) -> bool {
    const PT_INTERP: u32 = 3;
    let Ok(data) = std::fs::read(path) else {
        return false;
    };
    if data.len() < 64 || &data[..4] != b"\x7fELF" || data[4] != 2 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([data[o], data[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(data[0x20..0x28].try_into().expect("8 bytes")) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    (0..phnum).all(|i| {
        let o = phoff + i * phentsize;
        match data.get(o..o + 4) {
            Some(t) => u32::from_le_bytes(t.try_into().expect("4 bytes")) != PT_INTERP,
            None => false,
        }
    })
}
