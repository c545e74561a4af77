//! Which platform runs a sandbox: `--platform kvm|trap|auto` (a global flag, also read from
//! `TORPOR_PLATFORM` so that the holder processes a verb starts inherit it). `auto` takes KVM
//! where `/dev/kvm` opens, else the trap platform. The platform is opened in the process that
//! runs the sandbox (the holder).

use std::sync::Arc;

use anyhow::{bail, Context as _};
use platform::Platform;

/// The environment variable that carries the choice to holder processes.
pub const ENV: &str = "TORPOR_PLATFORM";

/// A platform by name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// KVM where `/dev/kvm` opens, else trap.
    #[default]
    Auto,
    /// The KVM platform (guest ring 3 of a VM).
    Kvm,
    /// The trap platform (a host process under a seccomp filter that traps every syscall).
    Trap,
}

impl Kind {
    /// The name `--platform` takes.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Auto => "auto",
            Kind::Kvm => "kvm",
            Kind::Trap => "trap",
        }
    }

    /// The choice `TORPOR_PLATFORM` holds (`auto` when unset).
    ///
    /// # Errors
    /// For a value that names no platform.
    pub fn from_env() -> anyhow::Result<Kind> {
        match std::env::var(ENV) {
            Err(_) => Ok(Kind::Auto),
            Ok(v) => match v.as_str() {
                "" | "auto" => Ok(Kind::Auto),
                "kvm" => Ok(Kind::Kvm),
                "trap" => Ok(Kind::Trap),
                other => bail!("{ENV}={other}: the platforms are kvm, trap and auto"),
            },
        }
    }
}

/// The platform `open` would take: `auto` resolved (`Kind::Auto` on a bad value).
pub fn resolved() -> Kind {
    match Kind::from_env().unwrap_or(Kind::Auto) {
        Kind::Auto => match platform_kvm::KvmPlatform::new() {
            Ok(_) => Kind::Kvm,
            Err(_) => Kind::Trap,
        },
        k => k,
    }
}

/// Opens the platform `TORPOR_PLATFORM` names.
///
/// # Errors
/// With `kvm`, without a usable `/dev/kvm` ("cannot open /dev/kvm (…): KVM is required"); with
/// `trap`, on a host without what it needs (FSGSBASE for user space).
pub fn open() -> anyhow::Result<Arc<dyn Platform>> {
    match Kind::from_env()? {
        Kind::Kvm => Ok(Arc::new(platform_kvm::KvmPlatform::new()?)),
        Kind::Trap => Ok(Arc::new(
            platform_trap::TrapPlatform::new().context("the trap platform")?,
        )),
        Kind::Auto => match platform_kvm::KvmPlatform::new() {
            Ok(kvm) => Ok(Arc::new(kvm)),
            Err(e) => {
                tracing::debug!("{e}: using the trap platform");
                Ok(Arc::new(
                    platform_trap::TrapPlatform::new()
                        .with_context(|| format!("{e}, and the trap platform"))?,
                ))
            }
        },
    }
}
