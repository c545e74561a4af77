//! The platform a sandbox runs on, opened in the process that runs it (the holder).

use std::sync::Arc;

use platform::Platform;

/// The KVM platform.
///
/// # Errors
/// Without a usable `/dev/kvm` ("cannot open /dev/kvm (…): KVM is required").
pub fn open() -> anyhow::Result<Arc<dyn Platform>> {
    Ok(Arc::new(platform_kvm::KvmPlatform::new()?))
}
