//! The policy file's `[sandbox]` section: extra read-only paths, protected
//! paths, limits, and whether full Landlock enforcement is required.
//!
//! Every field has a default, so a policy without a `[sandbox]` section (or
//! with only some keys) parses. Unknown keys are refused (fail closed).

use serde::{Deserialize, Serialize};
use std::path::{Component, Path, PathBuf};

use super::SandboxError;

/// The policy's `[sandbox]` section.
///
/// ```toml
/// [sandbox]
/// read_only_paths = ["/srv/sdk"]          # bound read-only at the same path
/// protected_paths = ["deploy/secrets"]    # relative to the workspace root
/// require_full_landlock = false
/// [sandbox.limits]
/// nproc = 1024
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxSettings {
    /// Extra absolute host paths bound read-only at their own path (SDKs,
    /// toolchains the defaults miss). Paths that do not exist are skipped.
    /// A path that is, contains, or lies inside a hidden path (the daemon's
    /// state dir, `/run`, `$XDG_RUNTIME_DIR`) is refused.
    pub read_only_paths: Vec<PathBuf>,
    /// Extra protected paths, relative to the workspace root, read-only even
    /// in a writable workspace (in addition to [`DEFAULT_PROTECTED`]).
    pub protected_paths: Vec<PathBuf>,
    /// Refuse to run a command rather than run it with partial or no Landlock
    /// enforcement.
    pub require_full_landlock: bool,
    /// Resource limits of each command.
    pub limits: Limits,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        SandboxSettings {
            read_only_paths: Vec::new(),
            protected_paths: Vec::new(),
            require_full_landlock: false,
            limits: Limits::default(),
        }
    }
}

/// Paths inside the workspace that stay read-only in every profile:
/// git hooks and config (code that runs on the user's next `git` command),
/// direnv's `.envrc`, editor tasks, husky hooks.
pub const DEFAULT_PROTECTED: &[&str] = &[
    ".git/hooks",
    ".git/config",
    // Files that redirect git to another config and hooks directory
    // (gitrepository-layout(5)): as dangerous as .git/config itself.
    ".git/commondir",
    ".git/config.worktree",
    ".git/worktrees",
    ".git/modules",
    ".envrc",
    ".vscode",
    ".husky",
];

/// Per-command resource limits (`setrlimit(2)`; cgroup v2 where delegated).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// `RLIMIT_NPROC`: processes of the sandbox uid inside the command's own
    /// user namespace (counted per namespace since Linux 5.14).
    pub nproc: u64,
    /// `RLIMIT_NOFILE`: open file descriptors per process.
    pub nofile: u64,
    /// `RLIMIT_FSIZE`: largest file a process may write, bytes.
    pub fsize_bytes: u64,
    /// `RLIMIT_CPU`: CPU seconds per process.
    pub cpu_seconds: u64,
    /// `RLIMIT_DATA`: data segment + private writable mappings per process,
    /// bytes. Must be at least 4 GiB: lower breaks V8, Go and the JVM.
    pub data_bytes: u64,
    /// Size of each private tmpfs (`/tmp`, `/var/tmp`, `/dev/shm`, `$HOME`),
    /// bytes.
    pub tmpfs_bytes: u64,
    /// cgroup v2 `memory.max` of each command (all its processes together),
    /// bytes; `0`: none. Needs a delegated cgroup v2 subtree: without one a
    /// command under a policy that sets it is refused (see `cgroup.rs`).
    /// At least 16 MiB when set.
    pub cgroup_memory_max_bytes: u64,
    /// cgroup v2 `pids.max` of each command; `0`: none. As above; at least
    /// 8 when set.
    pub cgroup_pids_max: u64,
}

const GIB: u64 = 1 << 30;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            nproc: 1024,
            nofile: 8192,
            fsize_bytes: 4 * GIB,
            cpu_seconds: 3600,
            data_bytes: 8 * GIB,
            tmpfs_bytes: GIB,
            cgroup_memory_max_bytes: 0,
            cgroup_pids_max: 0,
        }
    }
}

impl SandboxSettings {
    /// Checks the settings; called before every spawn.
    ///
    /// Errors: [`SandboxError::Refused`] naming the offending key when a
    /// read-only path is relative or contains `..`, a protected path is
    /// absolute or escapes the workspace, or a limit is zero / below its floor.
    pub fn validate(&self) -> Result<(), SandboxError> {
        for p in &self.read_only_paths {
            if !p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
                return Err(SandboxError::Refused(format!(
                    "sandbox.read_only_paths: {} must be absolute without `..`",
                    p.display()
                )));
            }
            if p == Path::new("/") {
                return Err(SandboxError::Refused(
                    "sandbox.read_only_paths: `/` would expose the whole host".into(),
                ));
            }
        }
        for p in &self.protected_paths {
            if !is_clean_relative(p) {
                return Err(SandboxError::Refused(format!(
                    "sandbox.protected_paths: {} must be relative to the workspace, without `..`",
                    p.display()
                )));
            }
        }
        let l = &self.limits;
        for (name, v, floor) in [
            (
                "cgroup_memory_max_bytes",
                l.cgroup_memory_max_bytes,
                16 << 20,
            ),
            ("cgroup_pids_max", l.cgroup_pids_max, 8),
        ] {
            if v != 0 && v < floor {
                return Err(SandboxError::Refused(format!(
                    "sandbox.limits.{name} = {v} is below the minimum {floor} (0: no limit)"
                )));
            }
        }
        let checks: [(&str, u64, u64); 6] = [
            ("nproc", l.nproc, 16),
            ("nofile", l.nofile, 64),
            ("fsize_bytes", l.fsize_bytes, 1 << 20),
            ("cpu_seconds", l.cpu_seconds, 1),
            ("data_bytes", l.data_bytes, 256 << 20),
            ("tmpfs_bytes", l.tmpfs_bytes, 1 << 20),
        ];
        for (name, v, floor) in checks {
            if v < floor {
                return Err(SandboxError::Refused(format!(
                    "sandbox.limits.{name} = {v} is below the minimum {floor}"
                )));
            }
        }
        Ok(())
    }

    /// Whether the policy sets cgroup v2 limits (they need delegation).
    pub fn wants_cgroup(&self) -> bool {
        self.limits.cgroup_memory_max_bytes != 0 || self.limits.cgroup_pids_max != 0
    }

    /// [`Self::all_protected`] plus what the workspace repository's
    /// `core.hooksPath` names inside `workspace` (read now from its git
    /// config: [`crate::workspace::hooks_path_protected`]). The one list of
    /// protected paths for every writer (sandbox, file tools, MCP servers).
    pub fn protected_in(&self, workspace: &Path) -> Vec<PathBuf> {
        let mut out = self.all_protected();
        for p in crate::workspace::hooks_path_protected(workspace) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }

    /// Default plus policy protected paths, deduplicated, relative.
    pub fn all_protected(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = DEFAULT_PROTECTED.iter().map(PathBuf::from).collect();
        for p in &self.protected_paths {
            if !out.contains(p) {
                out.push(p.clone());
            }
        }
        out
    }
}

/// Relative, non-empty, only normal components.
fn is_clean_relative(p: &Path) -> bool {
    p.components().next().is_some() && p.components().all(|c| matches!(c, Component::Normal(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_section_parses_with_defaults() {
        let s: SandboxSettings = toml::from_str("").unwrap();
        assert_eq!(s, SandboxSettings::default());
        assert!(s.limits.data_bytes >= 4 * GIB);
        s.validate().unwrap();
    }

    #[test]
    fn unknown_key_is_refused() {
        assert!(toml::from_str::<SandboxSettings>("writable_host = true").is_err());
        assert!(toml::from_str::<SandboxSettings>("[limits]\nbogus = 1").is_err());
    }

    #[test]
    fn bad_paths_and_limits_are_refused() {
        let cases = [
            "read_only_paths = [\"relative\"]",
            "read_only_paths = [\"/a/../etc\"]",
            "read_only_paths = [\"/\"]",
            "protected_paths = [\"/abs\"]",
            "protected_paths = [\"../up\"]",
            "protected_paths = [\"\"]",
            "[limits]\nnproc = 0",
            "[limits]\ndata_bytes = 1",
            "[limits]\ncgroup_memory_max_bytes = 1000000",
            "[limits]\ncgroup_pids_max = 2",
        ];
        for c in cases {
            let s: SandboxSettings = toml::from_str(c).unwrap();
            assert!(s.validate().is_err(), "{c} accepted");
        }
    }

    #[test]
    fn protected_paths_merge_with_defaults() {
        let s: SandboxSettings =
            toml::from_str("protected_paths = [\"deploy\", \".envrc\"]").unwrap();
        let all = s.all_protected();
        assert!(all.contains(&PathBuf::from(".git/hooks")));
        assert!(all.contains(&PathBuf::from("deploy")));
        assert_eq!(all.iter().filter(|p| p.as_os_str() == ".envrc").count(), 1);
    }
}
