//! Locations (socket, state dir, config dir) and policy-name resolution.
//!
//! Defaults follow the XDG Base Directory spec for ordinary users and FHS
//! locations for root:
//! - socket: `$XDG_RUNTIME_DIR/warden/wardend.sock`, root: `/run/warden/wardend.sock`
//! - state: `$XDG_STATE_HOME/warden` (else `~/.local/state/warden`), root: `/var/lib/warden`
//! - policies: `$XDG_CONFIG_HOME/warden/policies` (else `~/.config/...`), then `/etc/warden/policies`

use std::path::{Path, PathBuf};

use crate::policy::{Policy, PolicyError};

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}

fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// The default socket path: `WARDEN_SOCKET`, else the XDG / root default.
pub fn default_socket() -> PathBuf {
    if let Some(p) = env_path("WARDEN_SOCKET") {
        return p;
    }
    if is_root() {
        return PathBuf::from("/run/warden/wardend.sock");
    }
    match env_path("XDG_RUNTIME_DIR") {
        Some(d) => d.join("warden/wardend.sock"),
        None => std::env::temp_dir().join(format!("warden-{}/wardend.sock", nix::unistd::getuid())),
    }
}

/// The default state dir: `WARDEN_STATE_DIR`, else the XDG / root default.
pub fn default_state_dir() -> PathBuf {
    if let Some(p) = env_path("WARDEN_STATE_DIR") {
        return p;
    }
    if is_root() {
        return PathBuf::from("/var/lib/warden");
    }
    env_path("XDG_STATE_HOME")
        .unwrap_or_else(|| home().join(".local/state"))
        .join("warden")
}

/// Directories searched for `NAME.toml` policies, in order.
pub fn policy_dirs() -> Vec<PathBuf> {
    let user = env_path("XDG_CONFIG_HOME")
        .unwrap_or_else(|| home().join(".config"))
        .join("warden/policies");
    vec![user, PathBuf::from("/etc/warden/policies")]
}

/// Resolves a `--policy NAME|FILE` argument to its name and TOML content:
/// a path (contains `/` or ends in `.toml`) is read as a file; a name is
/// looked up in [`policy_dirs`] and then among the built-in policies.
///
/// This runs in the client: the daemon never opens policy paths on a
/// client's behalf. Errors: [`PolicyError::Unknown`], [`PolicyError::Parse`]
/// (unreadable file, invalid content).
pub fn resolve_policy(arg: &str) -> Result<Policy, PolicyError> {
    let looks_like_path = arg.contains('/') || arg.ends_with(".toml");
    if looks_like_path {
        let path = Path::new(arg);
        let src = std::fs::read_to_string(path).map_err(|e| PolicyError::Parse {
            name: arg.to_string(),
            message: format!("cannot read {}: {e}", path.display()),
        })?;
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or(arg);
        return Policy::from_toml(name, &src);
    }
    if arg.is_empty()
        || !arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(PolicyError::Unknown(arg.to_string()));
    }
    for dir in policy_dirs() {
        let path = dir.join(format!("{arg}.toml"));
        if let Ok(src) = std::fs::read_to_string(&path) {
            return Policy::from_toml(arg, &src);
        }
    }
    Policy::builtin(arg).ok_or_else(|| PolicyError::Unknown(arg.to_string()))
}
