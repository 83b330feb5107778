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
}

/// Restricts the calling thread (and its future children). Returns how
/// completely the kernel enforces the ruleset.
pub(crate) fn restrict(rules: &Rules) -> Result<Enforcement, String> {
    let abi = LANDLOCK_ABI;
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    let dev = read | AccessFs::WriteFile | AccessFs::IoctlDev | AccessFs::Truncate;
    let mut created = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .and_then(|r| r.scope(Scope::AbstractUnixSocket | Scope::Signal))
        .and_then(|r| r.create())
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
