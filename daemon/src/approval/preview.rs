//! What an approval request shows, and the exact-request hash a once-grant
//! is bound to.

use serde::{Deserialize, Serialize};

use crate::policy::{Classification, Tier};

/// The identity of one request: a once-grant is bound to the hash of exactly
/// these fields, so a different command, directory, tier or policy version
/// is a different request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestKey {
    /// `exec`, `write_file`, `apply_patch`, `mcp:<server>/<tool>`.
    pub tool: String,
    /// The exact command (exec) or a canonical summary of the call that
    /// includes a hash of its content (file tools).
    pub command: String,
    /// Working directory relative to the workspace root (`""` is the root).
    pub cwd: String,
    pub tier: Tier,
    /// BLAKE3 hex of the policy content in force (the policy version).
    pub policy_hash: String,
}

impl RequestKey {
    /// BLAKE3 hex over a domain tag and every field, length-prefixed (u64
    /// little endian), so no two distinct keys share an encoding.
    pub fn hash(&self) -> String {
        super::hash_fields(
            b"warden-request-v1\0",
            &[],
            &[
                &self.tool,
                &self.command,
                normalize_cwd(&self.cwd),
                self.tier.as_str(),
                &self.policy_hash,
            ],
        )
    }
}

/// `""`, `"."` and `"./"` all mean the workspace root; a trailing `/` is
/// dropped.
fn normalize_cwd(cwd: &str) -> &str {
    let c = cwd.trim_end_matches('/');
    let c = c.strip_prefix("./").unwrap_or(c);
    if c == "." {
        ""
    } else {
        c
    }
}

/// What the user sees before deciding (proto `Preview`): the tool, the exact
/// command, its classification (parts, tier, rule, paths written, hosts,
/// install intent), the diff for file tools, warnings, and the request hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preview {
    pub tool: String,
    /// The exact command (exec) or a one-line summary of the call.
    pub summary: String,
    pub classification: Classification,
    /// Unified diff for file tools and patches (redacted); empty otherwise.
    #[serde(default)]
    pub diff: String,
    #[serde(default)]
    pub warnings: Vec<String>,
    pub cwd: String,
    pub policy_hash: String,
    /// [`RequestKey::hash`] of the request.
    pub request_hash: String,
}

impl Preview {
    /// The preview of running `classification.command` in `cwd` under the
    /// policy version `policy_hash`.
    pub fn exec(classification: Classification, cwd: &str, policy_hash: &str) -> Preview {
        let key = RequestKey {
            tool: "exec".into(),
            command: classification.command.clone(),
            cwd: cwd.to_string(),
            tier: classification.tier,
            policy_hash: policy_hash.to_string(),
        };
        Preview::new(key, classification, String::new())
    }

    /// The preview of any tool call identified by `key`, with an optional
    /// diff (file tools, patches). Warnings come from the install intent.
    pub fn new(key: RequestKey, classification: Classification, diff: String) -> Preview {
        let warnings = classification
            .install
            .as_ref()
            .map(|i| i.warnings.clone())
            .unwrap_or_default();
        Preview {
            request_hash: key.hash(),
            tool: key.tool,
            summary: key.command,
            classification,
            diff,
            warnings,
            cwd: key.cwd,
            policy_hash: key.policy_hash,
        }
    }

    /// The key this preview was made from.
    pub fn key(&self) -> RequestKey {
        RequestKey {
            tool: self.tool.clone(),
            command: self.summary.clone(),
            cwd: self.cwd.clone(),
            tier: self.classification.tier,
            policy_hash: self.policy_hash.clone(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::policy::{Decision, Part};

    /// A classification of `command` with one part per `&&`-separated
    /// segment (a stand-in for the policy classifier in unit tests).
    pub(crate) fn classification(command: &str, tier: Tier, decision: Decision) -> Classification {
        Classification {
            command: command.to_string(),
            tier,
            decision,
            rule: None,
            reasons: vec![],
            parts: command
                .split("&&")
                .map(|seg| Part {
                    argv: seg.split_whitespace().map(String::from).collect(),
                    tier,
                    reasons: vec![],
                })
                .collect(),
            writes: vec![],
            hosts: vec![],
            install: None,
            justification: None,
        }
    }

    #[test]
    fn request_hash_binds_every_field() {
        let base = RequestKey {
            tool: "exec".into(),
            command: "touch a".into(),
            cwd: "".into(),
            tier: Tier::Write,
            policy_hash: "p1".into(),
        };
        let h = base.hash();
        let variants = [
            RequestKey {
                tool: "write_file".into(),
                ..base.clone()
            },
            RequestKey {
                command: "touch b".into(),
                ..base.clone()
            },
            RequestKey {
                cwd: "sub".into(),
                ..base.clone()
            },
            RequestKey {
                tier: Tier::Network,
                ..base.clone()
            },
            RequestKey {
                policy_hash: "p2".into(),
                ..base.clone()
            },
            // Field boundaries are length-prefixed.
            RequestKey {
                tool: "exectouch".into(),
                command: " a".into(),
                ..base.clone()
            },
        ];
        for v in variants {
            assert_ne!(v.hash(), h, "{v:?}");
        }
        for same in [".", "./"] {
            let k = RequestKey {
                cwd: same.into(),
                ..base.clone()
            };
            assert_eq!(k.hash(), h);
        }
    }

    #[test]
    fn preview_round_trips_its_key() {
        let c = classification("touch a", Tier::Write, Decision::Ask);
        let p = Preview::exec(c, "sub", "p1");
        assert_eq!(p.key().hash(), p.request_hash);
    }
}
