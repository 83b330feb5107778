//! Confinement of every command: namespaces, mounts, rlimits, Landlock,
//! seccomp, applied by a single-threaded spawn helper (DESIGN.md, "Commands
//! are spawned by a single-threaded helper process").
//!
//! API contract used by the rest of the daemon:
//! - [`Spawner::start`] is called once in `main`, before the tokio runtime or
//!   any other thread exists.
//! - [`Spawner::spawn`] runs one command under a [`Profile`] and returns a
//!   [`Child`] whose [`Child::wait`] yields an [`ExitInfo`]; [`Child::kill`]
//!   ends every process the command started.
//!
//! This module decides nothing about policy: the caller picks the profile.

use serde::{Deserialize, Serialize};
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use crate::policy::Tier;

/// Errors of setting up or spawning a sandboxed command.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The spawn helper could not be started or has died.
    #[error("spawn helper: {0}")]
    Helper(String),
    /// A kernel mechanism the profile needs is missing or failed.
    #[error("sandbox set-up failed at {stage}: {message}")]
    Setup { stage: String, message: String },
    /// The policy requires a mechanism this kernel lacks (e.g. full Landlock).
    #[error("refused: {0}")]
    Refused(String),
    #[error("spawn failed: {0}")]
    Io(#[from] std::io::Error),
}

/// The sandbox profile a command runs under (DESIGN.md, "Tiers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// Workspace read-only, private network namespace (loopback only).
    SafeRead,
    /// Workspace read-write, private network namespace (loopback only).
    Write,
    /// Write plus the host's network.
    Network,
    /// Network plus a per-session layer over package caches.
    Install,
}

impl Profile {
    /// The profile of a tier; `None` for destructive (never runs).
    pub fn for_tier(tier: Tier) -> Option<Profile> {
        match tier {
            Tier::SafeRead => Some(Profile::SafeRead),
            Tier::Write => Some(Profile::Write),
            Tier::Network => Some(Profile::Network),
            Tier::Install => Some(Profile::Install),
            Tier::Destructive => None,
        }
    }

    /// `safe-read`, `write`, `network`, `install`.
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::SafeRead => "safe-read",
            Profile::Write => "write",
            Profile::Network => "network",
            Profile::Install => "install",
        }
    }
}

/// The policy file's `[sandbox]` section.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSettings {}

/// How completely Landlock was enforced for one execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforcement {
    Full,
    Partial,
    None,
}

impl Enforcement {
    /// `full`, `partial`, `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::Full => "full",
            Enforcement::Partial => "partial",
            Enforcement::None => "none",
        }
    }
}

/// One command to run.
#[derive(Debug, Clone)]
pub struct SpawnRequest {
    /// Program and arguments; `argv[0]` is resolved through `PATH` in `env`.
    pub argv: Vec<String>,
    /// The complete environment (already scrubbed by the caller); the
    /// sandbox may adjust `PATH` and add toolchain variables.
    pub env: Vec<(String, String)>,
    /// Absolute, canonical workspace root.
    pub workspace: PathBuf,
    /// Absolute working directory (inside the workspace).
    pub cwd: PathBuf,
    pub profile: Profile,
    pub settings: SandboxSettings,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    /// Exit status when it exited.
    pub code: Option<i32>,
    /// Signal number when it was killed by one.
    pub signal: Option<i32>,
}

/// Handle on the spawn helper. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Spawner {
    _private: (),
}

impl Spawner {
    /// Starts the spawn helper. Must be called before any other thread exists.
    pub fn start() -> Result<Spawner, SandboxError> {
        Ok(Spawner { _private: () })
    }

    /// Spawns `req` with stdin on `/dev/null` and stdout/stderr on the given
    /// fds (the write ends of pipes the caller reads).
    pub async fn spawn(
        &self,
        req: SpawnRequest,
        stdout: OwnedFd,
        stderr: OwnedFd,
    ) -> Result<Child, SandboxError> {
        // Placeholder until the spawn helper lands: a plain process in its own
        // process group (no confinement).
        let mut cmd = tokio::process::Command::new(&req.argv[0]);
        cmd.args(&req.argv[1..])
            .env_clear()
            .envs(req.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&req.cwd)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::from(stdout))
            .stderr(std::process::Stdio::from(stderr))
            .process_group(0)
            .kill_on_drop(true);
        let child = cmd.spawn()?;
        Ok(Child {
            pid: child.id().unwrap_or(0),
            landlock: Enforcement::None,
            inner: child,
        })
    }
}

/// A running sandboxed command.
pub struct Child {
    /// Pid in the daemon's pid namespace.
    pub pid: u32,
    /// Landlock enforcement status of this execution.
    pub landlock: Enforcement,
    inner: tokio::process::Child,
}

impl Child {
    /// Waits for the command (its init process) to end.
    pub async fn wait(&mut self) -> Result<ExitInfo, SandboxError> {
        use std::os::unix::process::ExitStatusExt;
        let st = self.inner.wait().await?;
        Ok(ExitInfo {
            code: st.code(),
            signal: st.signal(),
        })
    }

    /// Kills every process the command started. Idempotent.
    pub fn kill(&self) {
        self.kill_handle().kill()
    }

    /// A handle that can kill the command from elsewhere (timeouts, daemon
    /// shutdown, a client that went away).
    pub fn kill_handle(&self) -> KillHandle {
        KillHandle { pid: self.pid }
    }
}

/// Kills one command's processes; cheap to clone, safe to call after the
/// command ended.
#[derive(Debug, Clone)]
pub struct KillHandle {
    pid: u32,
}

impl KillHandle {
    /// Kills every process the command started. Idempotent.
    pub fn kill(&self) {
        if self.pid > 0 {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(self.pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}
