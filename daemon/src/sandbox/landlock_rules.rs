//! The Landlock layer (kernel `Documentation/userspace-api/landlock.rst`):
//! a second, independent filesystem boundary under the mount tree.
//!
//! The ruleset is pinned to [`LANDLOCK_ABI`] (ABI 6, Linux 6.12): it handles
//! every filesystem right that ABI knows (including `REFER`, `TRUNCATE` and
//! `IOCTL_DEV`) and scopes abstract Unix sockets and signals to the sandbox.
//! With best-effort compatibility an older kernel yields partial (or no)
//! enforcement, which is recorded per execution as an [`Enforcement`].

use landlock::{
    Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use std::path::PathBuf;

use super::Enforcement;

/// The Landlock ABI the ruleset is written against.
pub const LANDLOCK_ABI: ABI = ABI::V6;

/// What the command may do where (paths as the command sees them, after
/// `pivot_root`).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Rules {
    /// Read, list and execute.
    pub read: Vec<PathBuf>,
    /// Every filesystem right.
    pub write: Vec<PathBuf>,
    /// Read and write existing files, device ioctls (`/dev`).
    pub devices: Vec<PathBuf>,
    /// Pretend the kernel knows at most this Landlock ABI
    /// ([`ABI_CAP_ENV`]; tests of older kernels). `None`: the real one.
    pub abi_cap: Option<i64>,
}

/// Environment variable of the daemon (read by the spawn helper at start):
/// `WARDEN_LANDLOCK_ABI_CAP=N` makes the sandbox behave as on a kernel whose
/// highest Landlock ABI is `N` — the ruleset then really handles only the
/// rights of ABI `N` (none for `0`) and the execution is recorded as
/// `partial` (or `none`). It can only weaken Landlock, never strengthen
/// it, and the weakening is always reported; it exists so the
/// "refuse rather than run weaker" path can be tested on a new kernel.
pub const ABI_CAP_ENV: &str = "WARDEN_LANDLOCK_ABI_CAP";

/// The cap from [`ABI_CAP_ENV`] in this process's environment (invalid
/// values are ignored: no cap).
pub(crate) fn abi_cap_from_env() -> Option<i64> {
    std::env::var(ABI_CAP_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|v| *v >= 0)
}

/// Restricts the calling thread (and its future children). Returns how
/// completely the kernel enforces the ruleset.
pub(crate) fn restrict(rules: &Rules) -> Result<Enforcement, String> {
    let pinned = LANDLOCK_ABI as i64;
    let effective = match rules.abi_cap {
        Some(cap) => kernel_abi().min(cap),
        None => pinned,
    };
    if effective < 1 {
        // As on a kernel without Landlock.
        return Ok(Enforcement::None);
    }
    let capped = effective < pinned;
    let abi = if capped {
        ABI::from(effective as i32)
    } else {
        LANDLOCK_ABI
    };
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    let dev = (read | AccessFs::WriteFile | AccessFs::IoctlDev | AccessFs::Truncate) & all;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(|e| format!("landlock ruleset: {e}"))?;
    if !capped {
        ruleset = ruleset
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .map_err(|e| format!("landlock ruleset: {e}"))?;
    }
    let mut created = ruleset
        .create()
        .map_err(|e| format!("landlock ruleset: {e}"))?;
    // Listing `/` (not reading files) is allowed: tools walk the root, and
    // every directory the mount tree shows is readable anyway.
    let root = [std::path::PathBuf::from("/")];
    let list: landlock::BitFlags<AccessFs> = AccessFs::ReadDir.into();
    let groups = [
        (&rules.read[..], read),
        (&rules.write[..], all),
        (&rules.devices[..], dev),
        (&root[..], list),
    ];
    for (paths, access) in groups {
        for p in paths {
            let fd = match PathFd::new(p) {
                Ok(fd) => fd,
                Err(_) => continue, // not in the view: nothing to allow
            };
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| format!("landlock rule {}: {e}", p.display()))?;
        }
    }
    let st = created
        .restrict_self()
        .map_err(|e| format!("landlock restrict_self: {e}"))?;
    Ok(match st.ruleset {
        // Rights of the pinned ABI were left unhandled on purpose.
        RulesetStatus::FullyEnforced if capped => Enforcement::Partial,
        RulesetStatus::FullyEnforced => Enforcement::Full,
        RulesetStatus::PartiallyEnforced => Enforcement::Partial,
        RulesetStatus::NotEnforced => Enforcement::None,
    })
}

/// The highest Landlock ABI the running kernel supports (0 = none), from
/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`.
pub fn kernel_abi() -> i64 {
    // SAFETY: documented probe call with a null attr and size 0.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    if r < 0 {
        0
    } else {
        r
    }
}

/// Fixed Landlock errata of the running kernel (bit mask; kernel doc
/// "Errata").
#[allow(dead_code)]
pub fn kernel_errata() -> u32 {
    landlock::Erratum::current().bits()
}
