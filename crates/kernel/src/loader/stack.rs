//! The initial process stack, laid out as Linux's `create_elf_tables`:
//!
//! ```text
//! high  ┌───────────────────────────┐
//!       │ argv/envp strings, random │
//!       ├───────────────────────────┤
//!       │ auxv (AT_NULL last)        │
//!       │ NULL, envp[]              │
//!       │ NULL, argv[]              │
//! rsp → │ argc                      │ (16-byte aligned)
//! low   └───────────────────────────┘
//! ```

use mm::{MemoryManager, MmError, MmapRequest, Prot, VmaKind};
use platform::{layout, Gva};

use super::LoadedImage;

/// Size of the stack mapping.
pub const STACK_SIZE: u64 = 8 << 20;

const AT_NULL: u64 = 0;
const AT_PHDR: u64 = 3;
const AT_PHENT: u64 = 4;
const AT_PHNUM: u64 = 5;
const AT_PAGESZ: u64 = 6;
const AT_BASE: u64 = 7;
const AT_FLAGS: u64 = 8;
const AT_ENTRY: u64 = 9;
const AT_UID: u64 = 11;
const AT_EUID: u64 = 12;
const AT_GID: u64 = 13;
const AT_EGID: u64 = 14;
const AT_PLATFORM: u64 = 15;
const AT_HWCAP: u64 = 16;
const AT_CLKTCK: u64 = 17;
const AT_SECURE: u64 = 23;
const AT_RANDOM: u64 = 25;
const AT_HWCAP2: u64 = 26;
const AT_EXECFN: u64 = 31;
const AT_SYSINFO_EHDR: u64 = 33;

/// The built stack: where the thread starts.
#[derive(Clone, Copy, Debug)]
pub struct StackImage {
    /// Initial `rsp` (points at argc).
    pub sp: Gva,
    /// Lowest address of the stack mapping.
    pub bottom: Gva,
}

/// The ids and the secure-exec flag the auxiliary vector tells the program (`AT_UID`,
/// `AT_EUID`, `AT_GID`, `AT_EGID`, `AT_SECURE`: the dynamic loader ignores `LD_*` variables
/// in a set-user-ID program).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuxIds {
    /// Real user id.
    pub uid: u32,
    /// Effective user id.
    pub euid: u32,
    /// Real group id.
    pub gid: u32,
    /// Effective group id.
    pub egid: u32,
    /// The exec changed ids or gained capabilities.
    pub secure: bool,
}

impl AuxIds {
    /// What `creds` (after the exec) tell, with the exec's `secure` flag.
    pub fn of(creds: &crate::creds::Credentials, secure: bool) -> AuxIds {
        AuxIds {
            uid: creds.uid,
            euid: creds.euid,
            gid: creds.gid,
            egid: creds.egid,
            secure,
        }
    }
}

/// Maps the stack just below the top of user space and writes argc, argv, envp and auxv
/// (with `AT_SYSINFO_EHDR` = `vdso`, the platform's vDSO, if it maps one).
///
/// # Errors
/// [`MmError`] if the stack cannot be mapped or the arguments do not fit.
pub fn build_stack(
    mm: &mut MemoryManager,
    image: &LoadedImage,
    argv: &[Vec<u8>],
    envp: &[Vec<u8>],
    execfn: &[u8],
    ids: AuxIds,
    vdso: Option<u64>,
) -> Result<StackImage, MmError> {
    let top = layout::USER_END.raw() - 0x1000; // a guard page below the direct map
    let bottom = top - STACK_SIZE;
    mm.mmap(MmapRequest {
        addr: Gva(bottom),
        len: STACK_SIZE,
        prot: Prot::RW,
        fixed: true,
        fixed_noreplace: false,
        kind: VmaKind::Anon,
        name: Some("[stack]".into()),
    })?;
    let strings: usize =
        argv.iter().chain(envp).map(|s| s.len() + 1).sum::<usize>() + execfn.len() + 1;
    if strings as u64 > STACK_SIZE / 4 {
        return Err(MmError::InvalidArgument("arguments too long"));
    }
    // Strings at the top.
    let mut p = top;
    let mut push_str = |mm: &mut MemoryManager, s: &[u8]| -> Result<u64, MmError> {
        p -= s.len() as u64 + 1;
        let mut b = s.to_vec();
        b.push(0);
        mm.copy_out(Gva(p), &b)?;
        Ok(p)
    };
    let execfn_at = push_str(mm, execfn)?;
    let mut argv_at = Vec::with_capacity(argv.len());
    for a in argv {
        argv_at.push(push_str(mm, a)?);
    }
    let mut envp_at = Vec::with_capacity(envp.len());
    for e in envp {
        envp_at.push(push_str(mm, e)?);
    }
    let platform_at = push_str(mm, b"x86_64")?;
    let mut random = [0u8; 16];
    getrandom(&mut random);
    p = (p - 16) & !15;
    mm.copy_out(Gva(p), &random)?;
    let random_at = p;

    let mut auxv: Vec<(u64, u64)> = vec![
        (AT_PHDR, image.phdr.raw()),
        (AT_PHENT, 56),
        (AT_PHNUM, image.phnum),
        (AT_PAGESZ, 4096),
        (AT_BASE, image.interp_base.raw()),
        (AT_FLAGS, 0),
        (AT_ENTRY, image.program_entry.raw()),
        (AT_UID, u64::from(ids.uid)),
        (AT_EUID, u64::from(ids.euid)),
        (AT_GID, u64::from(ids.gid)),
        (AT_EGID, u64::from(ids.egid)),
        (AT_PLATFORM, platform_at),
        (AT_HWCAP, hwcap()),
        (AT_CLKTCK, 100),
        (AT_SECURE, u64::from(ids.secure)),
        (AT_RANDOM, random_at),
        (AT_HWCAP2, 0),
        (AT_EXECFN, execfn_at),
    ];
    if let Some(ehdr) = vdso {
        auxv.push((AT_SYSINFO_EHDR, ehdr));
    }
    auxv.push((AT_NULL, 0));
    let words = 1 + argv_at.len() + 1 + envp_at.len() + 1 + 2 * auxv.len();
    let sp = (p - 8 * words as u64) & !15;
    let mut table = Vec::with_capacity(words);
    table.push(argv_at.len() as u64);
    table.extend(&argv_at);
    table.push(0);
    table.extend(&envp_at);
    table.push(0);
    for (k, v) in auxv {
        table.push(k);
        table.push(v);
    }
    let bytes: Vec<u8> = table.iter().flat_map(|w| w.to_le_bytes()).collect();
    mm.copy_out(Gva(sp), &bytes)?;
    Ok(StackImage {
        sp: Gva(sp),
        bottom: Gva(bottom),
    })
}

fn hwcap() -> u64 {
    // CPUID.1:EDX, as Linux reports it in AT_HWCAP.
    let r = std::arch::x86_64::__cpuid(1);
    u64::from(r.edx)
}

fn getrandom(buf: &mut [u8]) {
    // SAFETY: `buf` is a valid writable buffer of `buf.len()` bytes.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != buf.len() as isize {
        // Fall back to the clock: AT_RANDOM seeds stack protectors, not keys.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (t >> ((i % 16) * 8)) as u8 ^ (i as u8).wrapping_mul(151);
        }
    }
}
