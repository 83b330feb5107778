//! The trust policy of one MCP tool call: tier, decision and declaration
//! from the server's trust level, the policy's per-tool rule, the tool's
//! annotations (believed only from trusted servers: MCP specification,
//! "ToolAnnotations": clients should never make tool use decisions based on
//! annotations received from untrusted servers) and the definition pin.

use rmcp::model::Tool;

use super::config::{ServerConfig, Trust};
use crate::policy::Tier;
use crate::policy::{Decision, TierMatrix};
use crate::session::journal::{SideEffects, ToolDecl};

/// What the trust policy says about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub tier: Tier,
    pub decision: Decision,
    /// `mcp.servers.<server>.tools.<tool>` when a per-tool rule decided.
    pub rule: Option<String>,
    pub reasons: Vec<String>,
    pub decl: ToolDecl,
}

/// The annotation hints as the MCP specification defaults them
/// (readOnly false, destructive true, idempotent false, openWorld true).
fn hints(tool: &Tool) -> (bool, bool, bool, bool) {
    let a = tool.annotations.as_ref();
    (
        a.and_then(|a| a.read_only_hint).unwrap_or(false),
        a.and_then(|a| a.destructive_hint).unwrap_or(true),
        a.and_then(|a| a.idempotent_hint).unwrap_or(false),
        a.and_then(|a| a.open_world_hint).unwrap_or(true),
    )
}

/// Decides one call of `tool` on server `cfg` under the tier matrix
/// `tiers`. `changed` says the definition differs from its pin: an allow
/// then becomes ask.
///
/// - trusted: tier from annotations (readOnlyHint -> safe-read; otherwise
///   write, or network when the server has the network and the tool is
///   open-world); the per-tool rule, else the tier matrix, decides;
///   idempotency and side effects from annotations.
/// - verified / untrusted: tier write; the per-tool rule decides, else ask
///   (deny when the matrix denies write); not idempotent, external side
///   effects.
pub fn decide(cfg: &ServerConfig, tool: &Tool, tiers: &TierMatrix, changed: bool) -> Verdict {
    let (read_only, _destructive, idempotent, open_world) = hints(tool);
    let rule = cfg.tools.get(tool.name.as_ref()).copied();
    let mut reasons = Vec::new();
    let (tier, mut decision, decl) = if cfg.trust == Trust::Trusted {
        let tier = if read_only {
            reasons.push("trusted server: the tool is annotated readOnlyHint".into());
            Tier::SafeRead
        } else if cfg.network && open_world {
            reasons.push("trusted server: open-world tool with network access".into());
            Tier::Network
        } else {
            reasons.push("trusted server: the tool may write the workspace".into());
            Tier::Write
        };
        let side_effects = if read_only {
            SideEffects::None
        } else if cfg.network && open_world {
            SideEffects::External
        } else {
            SideEffects::Workspace
        };
        let decl = ToolDecl {
            idempotent: read_only || idempotent,
            side_effects,
            compensation: (side_effects == SideEffects::Workspace)
                .then(|| "roll the workspace back to the step's pre-checkpoint".to_string()),
        };
        (tier, rule.unwrap_or_else(|| tiers.decide(tier)), decl)
    } else {
        reasons.push(format!(
            "{} server: annotations are not believed; every call asks unless a rule names the tool",
            cfg.trust.as_str()
        ));
        let decl = ToolDecl {
            idempotent: false,
            side_effects: SideEffects::External,
            compensation: None,
        };
        let d = rule.unwrap_or_else(|| tiers.decide(Tier::Write).max(Decision::Ask));
        (Tier::Write, d, decl)
    };
    let rule = rule.map(|d| {
        reasons.insert(
            0,
            format!("policy rule for tool {:?}: {}", tool.name, d.as_str()),
        );
        format!("mcp.servers.{}.tools.{}", cfg.name, tool.name)
    });
    if changed && decision == Decision::Allow {
        decision = Decision::Ask;
        reasons.insert(
            0,
            "the tool's definition changed since it was pinned: asking again".into(),
        );
    }
    Verdict {
        tier,
        decision,
        rule,
        reasons,
        decl,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ToolAnnotations;

    fn tool(read_only: Option<bool>) -> Tool {
        let mut t = Tool::new("write_note", "Writes a note.", serde_json::Map::new());
        if let Some(r) = read_only {
            t.annotations = Some(ToolAnnotations::new().read_only(r));
        }
        t
    }

    fn cfg(trust: Trust) -> ServerConfig {
        let mut c = ServerConfig::stdio("notes", "notes-server", &[]);
        c.trust = trust;
        c
    }

    #[test]
    fn annotations_lower_the_decision_only_for_trusted_servers() {
        let m = TierMatrix::default();
        let v = decide(&cfg(Trust::Trusted), &tool(Some(true)), &m, false);
        assert_eq!((v.tier, v.decision), (Tier::SafeRead, Decision::Allow));
        assert!(v.decl.idempotent);
        assert_eq!(v.decl.side_effects, SideEffects::None);
        for trust in [Trust::Verified, Trust::Untrusted] {
            let v = decide(&cfg(trust), &tool(Some(true)), &m, false);
            assert_eq!(
                (v.tier, v.decision),
                (Tier::Write, Decision::Ask),
                "{trust:?}"
            );
            assert!(!v.decl.idempotent);
            assert_eq!(v.decl.side_effects, SideEffects::External);
        }
        let v = decide(&cfg(Trust::Trusted), &tool(None), &m, false);
        assert_eq!((v.tier, v.decision), (Tier::Write, Decision::Ask));
        assert_eq!(v.decl.side_effects, SideEffects::Workspace);
    }

    #[test]
    fn per_tool_rules_win_and_changes_ask_again() {
        let m = TierMatrix::default();
        let mut c = cfg(Trust::Untrusted);
        c.tools.insert("write_note".into(), Decision::Allow);
        let v = decide(&c, &tool(None), &m, false);
        assert_eq!(v.decision, Decision::Allow);
        assert_eq!(
            v.rule.as_deref(),
            Some("mcp.servers.notes.tools.write_note")
        );
        let v = decide(&c, &tool(None), &m, true);
        assert_eq!(v.decision, Decision::Ask);
        assert!(v.reasons[0].contains("changed"));
        c.tools.insert("write_note".into(), Decision::Deny);
        assert_eq!(decide(&c, &tool(None), &m, true).decision, Decision::Deny);
        let v = decide(&cfg(Trust::Trusted), &tool(Some(true)), &m, true);
        assert_eq!(v.decision, Decision::Ask);
    }

    #[test]
    fn a_matrix_that_denies_writes_denies_untrusted_calls() {
        let m = TierMatrix {
            write: Decision::Deny,
            ..TierMatrix::default()
        };
        assert_eq!(
            decide(&cfg(Trust::Untrusted), &tool(None), &m, false).decision,
            Decision::Deny
        );
    }
}
