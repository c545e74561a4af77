//! `torpor demo`: runs the bundled example program in a temporary sandbox.

use std::os::unix::fs::PermissionsExt;

use anyhow::{Context, Result};
use kernel::SandboxConfig;

/// The example program, a static binary built from `demo/hello.c` by build.rs.
static DEMO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/demo"));

/// Writes the example into a fresh root filesystem and runs it.
pub fn demo() -> Result<u8> {
    let dir = std::env::temp_dir().join(format!("torpor-demo-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("bin")).context("creating the demo root filesystem")?;
    std::fs::create_dir_all(dir.join("tmp"))?;
    let bin = dir.join("bin/hello");
    std::fs::write(&bin, DEMO)?;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755))?;
    let cfg = SandboxConfig {
        rootfs: dir.clone(),
        program: "/bin/hello".into(),
        args: vec!["/bin/hello".into(), "from".into(), "torpor".into()],
        env: vec!["PATH=/bin".into(), "HOME=/tmp".into()],
        cwd: "/".into(),
        memory: 64 << 20,
        publish: Vec::new(),
        allow_outbound: false,
        own_netns: false,
        creds: None,
        rlimits: None,
        pids_limit: None,
        hostname: crate::run::DEFAULT_HOSTNAME.into(),
        share_files: crate::run::share_files_from_env(),
        platform: crate::platforms::open()?,
        kept_sockets: Default::default(),
    };
    let r = crate::run::run_config(&cfg);
    let _ = std::fs::remove_dir_all(&dir);
    r
}
