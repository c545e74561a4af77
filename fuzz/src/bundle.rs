//! `Bundle::load` (the torpor library's `oci::bundle`, crates/torpor/src/oci/bundle.rs) on a
//! bundle whose config.json is the fuzzer's bytes, and whose root holds a program, symbolic
//! links (relative, absolute, looping, escaping the root) and directories, so that
//! `process.args[0]` resolution through PATH and links is exercised. Errors are fine; a
//! panic is not; a loaded bundle's program must be a guest path whose file is inside the root.

use std::path::{Path, PathBuf};

use torpor::oci::bundle::Bundle;

thread_local! {
    static DIR: PathBuf = {
        let dir = crate::util::scratch_dir("bundle");
        let root = dir.join("rootfs");
        for d in ["bin", "usr/bin", "etc", "tmp/deep/er"] {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        std::fs::write(root.join("bin/prog"), b"\x7fELF").expect("write");
        std::fs::write(root.join("usr/bin/env"), b"\x7fELF").expect("write");
        let links: [(&str, &str); 6] = [
            ("bin/sh", "prog"),
            ("bin/abs", "/bin/prog"),
            ("bin/loop", "loop"),
            ("bin/escape", "../../../../../../bin/true"),
            ("usr/bin/up", "../../bin/prog"),
            ("lib", "usr/bin"),
        ];
        for (l, t) in links {
            let _ = std::os::unix::fs::symlink(t, root.join(l));
        }
        dir
    };
}

/// The harness.
pub fn run(data: &[u8]) {
    DIR.with(|dir| {
        std::fs::write(dir.join("config.json"), data).expect("write config.json");
        let Ok(b) = Bundle::load(dir) else {
            return;
        };
        let program = &b.sandbox.program;
        assert!(
            program.starts_with('/'),
            "program {program:?} is not absolute"
        );
        let root = b.sandbox.rootfs.canonicalize().expect("root");
        // Resolve as the sandbox would, inside the root: the file must exist there.
        assert!(
            resolves_inside(&root, program),
            "program {program:?} not in the root"
        );
    });
}

/// Whether guest path `p` resolves to a regular file under `root` with links followed inside
/// it (openat2 RESOLVE_IN_ROOT, as the kernel opens programs).
fn resolves_inside(root: &Path, p: &str) -> bool {
    let Ok(dir) = kernel::fs::Root::open(root) else {
        return false;
    };
    dir.open_at(p.as_bytes(), libc::O_RDONLY, 0)
        .is_ok_and(|fd| {
            std::fs::File::from(fd)
                .metadata()
                .is_ok_and(|m| m.is_file())
        })
}
