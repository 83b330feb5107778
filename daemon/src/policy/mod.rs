//! Command classification into tiers and the policy files that turn a tier
//! into allow / ask / deny (DESIGN.md, "Tiers"; `policies/README.md`).
//!
//! This module parses and decides; it never spawns anything.

mod awk;
mod commands;
mod opts;
mod packages;
mod rules;
mod shell;
mod tier;

#[cfg(test)]
mod corpus_tests;
#[cfg(test)]
mod policy_tests;

pub use rules::{Examples, Rule};
pub use shell::{MAX_COMMANDS, MAX_DEPTH, MAX_INPUT_BYTES};
pub use tier::{Decision, Tier};

use std::sync::Arc;

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

/// What the analysis knows about a part beyond its JSON fields.
#[derive(Debug, Clone, Default)]
pub(crate) struct PartDetail {
    /// Paths the part writes (workspace-relative, or absolute outside it).
    pub writes: Vec<String>,
    /// Hosts the part reaches, where known.
    pub hosts: Vec<String>,
    /// The argv at each wrapper level (`timeout 5 git push`, then `git push`);
    /// rules match any level.
    pub chain: Vec<Vec<String>>,
    /// `lockfile`, `registry`, `requirements`, `git`, `path`, `url`,
    /// `project`, `unknown` for install parts (the install guard's reading
    /// when it has one).
    pub install_source: Option<String>,
    /// The install guard's reading of this part (`crate::install::parse_intent`).
    pub intent: Option<crate::install::InstallIntent>,
}

impl Default for Part {
    /// An empty part of tier `write` (the fail-closed tier).
    fn default() -> Self {
        Part {
            argv: Vec::new(),
            tier: Tier::Write,
            reasons: Vec::new(),
        }
    }
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

impl Classification {
    /// The reason to show for the decision: without a deciding rule, the
    /// first reason of the first part whose tier is the command's (the
    /// part that decided: `rm -rf /` in `touch q; rm -rf /`), else the
    /// first reason overall.
    pub fn deciding_reason(&self) -> Option<&str> {
        let part = self
            .rule
            .is_none()
            .then(|| self.parts.iter().find(|p| p.tier == self.tier))
            .flatten()
            .and_then(|p| p.reasons.first());
        part.or(self.reasons.first()).map(String::as_str)
    }
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
    /// Install guard settings (`install` module).
    #[serde(default)]
    pub install: crate::install::InstallSettings,
    /// Ordered rules; deny wins over ask over allow.
    #[serde(default, rename = "rule")]
    pub rules: Vec<Rule>,
    /// MCP servers sessions may use (`mcp` module).
    #[serde(default)]
    pub mcp: crate::mcp::McpSettings,
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
    rules: Arc<Vec<rules::CompiledRule>>,
}

/// Policies compiled into the binary, so `--policy default` works anywhere.
pub const BUILTIN: &[(&str, &str)] = &[
    ("default", include_str!("../../../policies/default.toml")),
    ("ci", include_str!("../../../policies/ci.toml")),
    ("strict", include_str!("../../../policies/strict.toml")),
];

impl Policy {
    /// Parses and validates a policy from TOML content: the schema, every
    /// rule (unique id, at least one criterion, valid globs and regex), then
    /// every rule's `examples`.
    ///
    /// Errors: [`PolicyError::Parse`] when the TOML does not fit the schema
    /// or a rule is invalid, [`PolicyError::Example`] when a rule's examples fail.
    pub fn from_toml(name: &str, source: &str) -> Result<Policy, PolicyError> {
        let parse_err = |message: String| PolicyError::Parse {
            name: name.to_string(),
            message,
        };
        let file: PolicyFile = toml::from_str(source).map_err(|e| parse_err(e.to_string()))?;
        file.mcp.validate().map_err(parse_err)?;
        let mut compiled = Vec::with_capacity(file.rules.len());
        for (i, r) in file.rules.iter().enumerate() {
            if file.rules[..i].iter().any(|o| o.id == r.id) {
                return Err(parse_err(format!("duplicate rule id {:?}", r.id)));
            }
            let c = rules::CompiledRule::new(r.clone())
                .map_err(|m| parse_err(format!("rule {:?}: {m}", r.id)))?;
            compiled.push(c);
        }
        let policy = Policy {
            name: name.to_string(),
            hash: blake3::hash(source.as_bytes()).to_hex().to_string(),
            source: source.to_string(),
            file,
            rules: Arc::new(compiled),
        };
        policy.check_examples()?;
        Ok(policy)
    }

    /// Runs every rule's examples. Errors: [`PolicyError::Example`] naming
    /// the rule and the command that matched or did not.
    pub fn check_examples(&self) -> Result<(), PolicyError> {
        let ctx = ClassifyContext::default();
        for r in self.rules.iter() {
            let err = |message: String| PolicyError::Example {
                name: self.name.clone(),
                rule: r.rule.id.clone(),
                message,
            };
            for ex in &r.rule.examples.matches {
                let a = analyze(ex, &ctx);
                if !a
                    .parts
                    .iter()
                    .enumerate()
                    .any(|(i, p)| r.matches(p, &a.details[i]))
                {
                    return Err(err(format!("example {ex:?} should match but does not")));
                }
            }
            for ex in &r.rule.examples.no_match {
                let a = analyze(ex, &ctx);
                if a.parts
                    .iter()
                    .enumerate()
                    .any(|(i, p)| r.matches(p, &a.details[i]))
                {
                    return Err(err(format!("example {ex:?} should not match but does")));
                }
            }
        }
        Ok(())
    }

    /// Number of examples over all rules (shown by `warden policy check`).
    pub fn example_count(&self) -> usize {
        self.file
            .rules
            .iter()
            .map(|r| r.examples.matches.len() + r.examples.no_match.len())
            .sum()
    }

    /// The built-in policy `name`, if there is one.
    pub fn builtin(name: &str) -> Option<Policy> {
        BUILTIN
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(n, src)| Policy::from_toml(n, src).expect("built-in policy is valid"))
    }

    /// The rule with id `id`.
    pub fn rule(&self, id: &str) -> Option<&Rule> {
        self.file.rules.iter().find(|r| r.id == id)
    }

    /// Classifies `command` (a bash command string) and decides it under
    /// this policy. Never fails and never spawns: what cannot be classified
    /// is `write` with a decision of at least `ask`.
    ///
    /// Per part, the matching rules decide (deny > ask > allow; the first
    /// rule in file order among equals), else the tier matrix; a rule makes
    /// a destructive part less strict than the matrix only when its `tier`
    /// names `destructive`. The whole command gets the strictest part
    /// decision and the highest part tier.
    pub fn classify(&self, command: &str, ctx: &ClassifyContext) -> Classification {
        let a = analyze_with(command, ctx, Some(&self.file.install));
        let mut tier = if a.unclassifiable || a.parts.is_empty() {
            Tier::Write
        } else {
            Tier::SafeRead
        };
        let mut decision = None::<Decision>;
        let mut guard_notes: Vec<String> = Vec::new();
        let mut rule: Option<&rules::CompiledRule> = None;
        for (i, p) in a.parts.iter().enumerate() {
            tier = tier.max(p.tier);
            let mut part_rule: Option<&rules::CompiledRule> = None;
            let matrix = self.file.tiers.decide(p.tier);
            for r in self.rules.iter() {
                // A rule relaxes a destructive part only when it names the tier.
                let relaxes_destructive = p.tier == Tier::Destructive
                    && r.rule.decision < matrix
                    && !r.rule.tiers.contains(&Tier::Destructive);
                if !relaxes_destructive
                    && r.matches(p, &a.details[i])
                    && part_rule.is_none_or(|b| r.rule.decision > b.rule.decision)
                {
                    part_rule = Some(r);
                }
            }
            let mut d = part_rule.map_or(matrix, |r| r.rule.decision);
            if let (Tier::Install, Some(intent)) = (p.tier, &a.details[i].intent) {
                if part_rule.is_none() && self.file.install.allows_without_asking(intent) {
                    d = Decision::Allow;
                    guard_notes.push("install guard: lockfile install allowed by [install]".into());
                }
                if let Some(why) = intent.always_asks() {
                    if d == Decision::Allow {
                        d = Decision::Ask;
                        guard_notes.push(format!("install guard: {why}: at least ask"));
                    }
                }
            }
            if decision.is_none_or(|cur| d > cur) {
                decision = Some(d);
                rule = part_rule;
            } else if decision == Some(d) && rule.is_none() && part_rule.is_some() {
                rule = part_rule;
            }
        }
        let mut decision = decision.unwrap_or_else(|| self.file.tiers.decide(Tier::Write));
        let mut reasons = a.reasons.clone();
        let mut raised = false;
        if a.unclassifiable && decision < Decision::Ask {
            raised = true;
            rule = None;
        }
        for p in &a.parts {
            if p.tier == tier || p.tier > Tier::SafeRead {
                for r in &p.reasons {
                    if !reasons.contains(r) {
                        reasons.push(r.clone());
                    }
                }
            }
        }
        reasons.extend(guard_notes);
        match rule {
            Some(r) => reasons.push(format!("rule {}: {}", r.rule.id, r.rule.decision)),
            None => reasons.push(format!("policy {}: {} -> {}", self.name, tier, decision)),
        }
        if raised {
            decision = Decision::Ask;
            reasons.push("not fully classified: decision raised to ask".into());
        }
        let mut writes: Vec<String> = Vec::new();
        let mut hosts: Vec<String> = Vec::new();
        for p in &a.details {
            for w in &p.writes {
                if !writes.contains(w) {
                    writes.push(w.clone());
                }
            }
            for h in &p.hosts {
                if !hosts.contains(h) {
                    hosts.push(h.clone());
                }
            }
        }
        Classification {
            command: command.to_string(),
            tier,
            decision,
            rule: rule.map(|r| r.rule.id.clone()),
            reasons,
            parts: a.parts,
            writes,
            hosts,
            install: a.details.iter().find_map(|d| d.intent.clone()),
            justification: rule.and_then(|r| r.rule.justification.clone()),
        }
    }

    /// True when a rule with `idempotent = true` matches every part of
    /// `command` (used by resume to decide whether a step may be re-run).
    pub fn is_idempotent(&self, command: &str, ctx: &ClassifyContext) -> bool {
        let a = analyze(command, ctx);
        !a.unclassifiable
            && !a.parts.is_empty()
            && a.parts.iter().enumerate().all(|(i, p)| {
                self.rules
                    .iter()
                    .any(|r| r.rule.idempotent && r.matches(p, &a.details[i]))
            })
    }
}

/// The parts of one command string, before any policy applies.
struct Analysis {
    parts: Vec<Part>,
    reasons: Vec<String>,
    unclassifiable: bool,
    details: Vec<PartDetail>,
}

fn analyze(command: &str, ctx: &ClassifyContext) -> Analysis {
    analyze_with(command, ctx, None)
}

/// Parses and classifies `command`; install parts get the install guard's
/// intent (reading requirement and lock files from the workspace when `ctx`
/// has one, within `install`'s limits).
fn analyze_with(
    command: &str,
    ctx: &ClassifyContext,
    install: Option<&crate::install::InstallSettings>,
) -> Analysis {
    let mut an = shell::Analyzer::new(ctx);
    an.analyze(command, 0);
    for d in an.details.iter_mut() {
        if d.install_source.is_none() {
            continue;
        }
        // Outermost first: `sudo npm ci` is a system install, not the
        // lockfile install its inner argv looks like; wrappers the install
        // parser does not know (`timeout`, `nice`) fall through to the inner
        // argv.
        let intent = d
            .chain
            .iter()
            .find_map(|argv| match (&ctx.workspace, install) {
                (Some(ws), Some(settings)) => crate::install::parse_intent_with(
                    argv,
                    ws,
                    ctx.cwd.as_deref().unwrap_or(std::path::Path::new("")),
                    settings,
                ),
                _ => crate::install::parse_intent(argv),
            });
        if let Some(i) = intent {
            d.install_source = Some(if i.is_unknown() {
                "unknown".to_string()
            } else {
                i.source.clone()
            });
            d.intent = Some(i);
        }
    }
    if an.parts.is_empty() && !an.unclassifiable {
        an.fail(vec![], "no command found: not classified");
    }
    Analysis {
        parts: an.parts,
        reasons: an.reasons,
        unclassifiable: an.unclassifiable,
        details: an.details,
    }
}
