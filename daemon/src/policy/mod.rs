//! Command classification into tiers and the policy files that turn a tier
//! into allow / ask / deny (DESIGN.md, "Tiers"; `policies/README.md`).
//!
//! This module parses and decides; it never spawns anything.

mod tier;

pub use tier::{Decision, Tier};

use serde::{Deserialize, Serialize};

/// Errors of loading or using a policy.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The policy file is not valid TOML or does not fit the schema.
    #[error("policy {name}: {message}")]
    Parse { name: String, message: String },
    /// A rule's `examples` did not match as declared.
    #[error("policy {name}: rule {rule}: {message}")]
    Example {
        name: String,
        rule: String,
        message: String,
    },
    /// No policy of that name in the config dirs nor built in.
    #[error("unknown policy {0:?} (not a file, not in the config dir, not built in)")]
    Unknown(String),
}

/// One classified part of a command (a simple command, redirection or
/// substitution).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    /// Words after quote removal.
    pub argv: Vec<String>,
    pub tier: Tier,
    #[serde(default)]
    pub reasons: Vec<String>,
}

/// The result of classifying one command string and deciding it by policy.
/// JSON field names are an interface (`warden classify --json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Classification {
    pub command: String,
    pub tier: Tier,
    pub decision: Decision,
    /// Id of the rule that decided, `None` when the tier matrix decided.
    pub rule: Option<String>,
    pub reasons: Vec<String>,
    /// Every part with its own tier (`commands` in JSON).
    #[serde(rename = "commands")]
    pub parts: Vec<Part>,
    /// Paths the command writes (redirection targets, argument paths).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<String>,
    /// Hosts the command reaches, where known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Parsed package-install intent (install guard), when the command installs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<crate::install::InstallIntent>,
    /// Justification text of the deciding rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub justification: Option<String>,
}

/// Where a command would run, for the rules that depend on it (argv0
/// resolving into the workspace, redirections into the workspace or `/tmp`).
#[derive(Debug, Clone, Default)]
pub struct ClassifyContext {
    /// Absolute workspace root; `None` when classifying without a session.
    pub workspace: Option<std::path::PathBuf>,
    /// Working directory relative to the workspace root.
    pub cwd: Option<std::path::PathBuf>,
}

/// The policy file's schema (`policies/*.toml`). Sections owned by other
/// modules (`[sandbox]`, `[redact]`, `[checkpoint]`, `[install]`) are typed by
/// those modules.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    /// Free-text description shown by `warden policy check`.
    #[serde(default)]
    pub description: Option<String>,
    /// Tier -> decision matrix.
    #[serde(default)]
    pub tiers: TierMatrix,
    /// Sandbox profile settings (`sandbox` module).
    #[serde(default)]
    pub sandbox: crate::sandbox::SandboxSettings,
    /// Secret-scanning settings (`redact` module).
    #[serde(default)]
    pub redact: crate::redact::RedactSettings,
    /// Checkpoint settings (`checkpoint` module).
    #[serde(default)]
    pub checkpoint: crate::checkpoint::CheckpointSettings,
    /// Exec defaults: timeout and output cap.
    #[serde(default)]
    pub exec: ExecSettings,
    /// Ordered rules; deny wins over ask over allow.
    #[serde(default, rename = "rule")]
    pub rules: Vec<toml::Value>,
}

/// Decision per tier.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TierMatrix {
    pub safe_read: Decision,
    pub write: Decision,
    pub network: Decision,
    pub install: Decision,
    pub destructive: Decision,
}

impl Default for TierMatrix {
    fn default() -> Self {
        TierMatrix {
            safe_read: Decision::Allow,
            write: Decision::Ask,
            network: Decision::Ask,
            install: Decision::Ask,
            destructive: Decision::Deny,
        }
    }
}

impl TierMatrix {
    /// The decision for `tier`.
    pub fn decide(&self, tier: Tier) -> Decision {
        match tier {
            Tier::SafeRead => self.safe_read,
            Tier::Write => self.write,
            Tier::Network => self.network,
            Tier::Install => self.install,
            Tier::Destructive => self.destructive,
        }
    }
}

/// `[exec]`: defaults for command execution.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecSettings {
    /// Default wall-clock timeout, ms.
    #[serde(default = "ExecSettings::default_timeout_ms")]
    pub timeout_ms: u64,
    /// Default per-stream output cap, bytes.
    #[serde(default = "ExecSettings::default_output_limit")]
    pub output_limit_bytes: u64,
}

impl ExecSettings {
    fn default_timeout_ms() -> u64 {
        120_000
    }
    fn default_output_limit() -> u64 {
        1 << 20
    }
}

impl Default for ExecSettings {
    fn default() -> Self {
        ExecSettings {
            timeout_ms: Self::default_timeout_ms(),
            output_limit_bytes: Self::default_output_limit(),
        }
    }
}

/// A loaded, validated policy.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Name for display and audit ("default", a file name).
    pub name: String,
    /// BLAKE3 hex of the TOML content: the policy version.
    pub hash: String,
    /// The TOML content as loaded.
    pub source: String,
    pub file: PolicyFile,
}

/// Policies compiled into the binary, so `--policy default` works anywhere.
pub const BUILTIN: &[(&str, &str)] = &[
    ("default", include_str!("../../../policies/default.toml")),
    ("ci", include_str!("../../../policies/ci.toml")),
    ("strict", include_str!("../../../policies/strict.toml")),
];

impl Policy {
    /// Parses and validates a policy from TOML content.
    ///
    /// Errors: [`PolicyError::Parse`] when the TOML does not fit the schema,
    /// [`PolicyError::Example`] when a rule's examples fail.
    pub fn from_toml(name: &str, source: &str) -> Result<Policy, PolicyError> {
        let file: PolicyFile = toml::from_str(source).map_err(|e| PolicyError::Parse {
            name: name.to_string(),
            message: e.to_string(),
        })?;
        Ok(Policy {
            name: name.to_string(),
            hash: blake3::hash(source.as_bytes()).to_hex().to_string(),
            source: source.to_string(),
            file,
        })
    }

    /// The built-in policy `name`, if there is one.
    pub fn builtin(name: &str) -> Option<Policy> {
        BUILTIN
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(n, src)| Policy::from_toml(n, src).expect("built-in policy is valid"))
    }

    /// Classifies `command` and decides it under this policy. Never fails:
    /// what cannot be classified is `write` with decision `ask`.
    pub fn classify(&self, command: &str, _ctx: &ClassifyContext) -> Classification {
        // Placeholder until the classifier lands: everything is write / ask.
        let tier = Tier::Write;
        Classification {
            command: command.to_string(),
            tier,
            decision: self.file.tiers.decide(tier),
            rule: None,
            reasons: vec!["not classified yet: treated as write".into()],
            parts: vec![],
            writes: vec![],
            hosts: vec![],
            install: None,
            justification: None,
        }
    }
}
