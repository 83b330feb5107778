//! Who answers approval requests during a run (`--approve prompt|yes|no`,
//! and the demo's built-in approver).

use std::io::{BufRead, IsTerminal, Write};

use crate::cli::exec::tier_name;
use crate::pb;

/// An approver's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Grant this one request.
    Once,
    /// Grant the request's argv prefix for the rest of the session.
    Session,
    /// Refuse, with the reason told to the model.
    Refuse(String),
}

/// Decides approval requests.
#[tonic::async_trait]
pub trait Approver: Send + Sync {
    async fn decide(&self, req: &pb::ApprovalRequest) -> Verdict;
}

/// `--approve yes`: grants every ask once (a deny stays a deny: denied calls
/// never reach an approver).
pub struct Yes;
#[tonic::async_trait]
impl Approver for Yes {
    async fn decide(&self, _: &pb::ApprovalRequest) -> Verdict {
        Verdict::Once
    }
}

/// `--approve no`: refuses every ask.
pub struct No;
#[tonic::async_trait]
impl Approver for No {
    async fn decide(&self, _: &pb::ApprovalRequest) -> Verdict {
        Verdict::Refuse("approvals are refused in this run (--approve no)".into())
    }
}

/// The demo's approver: grants workspace writes, refuses everything else
/// (network, install).
pub struct WritesOnly;
#[tonic::async_trait]
impl Approver for WritesOnly {
    async fn decide(&self, req: &pb::ApprovalRequest) -> Verdict {
        let p = req.preview.clone().unwrap_or_default();
        // File tools are write-tier by definition; a command whose tier is
        // unknown (no classification in the preview) is refused, not
        // assumed to be a write.
        let file_tool = matches!(p.tool.as_str(), "write_file" | "apply_patch");
        let tier = match (&p.classification, file_tool) {
            (Some(c), _) => c.tier,
            (None, true) => pb::Tier::Write as i32,
            (None, false) => pb::Tier::Unspecified as i32,
        };
        if tier == pb::Tier::Write as i32 || tier == pb::Tier::SafeRead as i32 {
            Verdict::Once
        } else {
            Verdict::Refuse(format!(
                "the demo approver refuses {} commands",
                tier_name(tier)
            ))
        }
    }
}

/// `--approve prompt`: shows the preview on the terminal and asks
/// y (once) / n / a (always for this session).
pub struct Prompt;
#[tonic::async_trait]
impl Approver for Prompt {
    async fn decide(&self, req: &pb::ApprovalRequest) -> Verdict {
        let req = req.clone();
        tokio::task::spawn_blocking(move || prompt(&req))
            .await
            .unwrap_or_else(|_| Verdict::Refuse("the prompt failed".into()))
    }
}

/// Renders an approval preview for a person.
pub fn render_preview(req: &pb::ApprovalRequest) -> String {
    let p = req.preview.clone().unwrap_or_default();
    let mut s = format!("  tool:    {}\n  command: {}\n", p.tool, p.summary);
    if let Some(c) = &p.classification {
        s.push_str(&format!(
            "  tier:    {}{}\n",
            tier_name(c.tier),
            if c.rule.is_empty() {
                String::new()
            } else {
                format!(" (rule {})", c.rule)
            }
        ));
        for r in c.reasons.iter().take(4) {
            s.push_str(&format!("  why:     {r}\n"));
        }
        if !c.writes.is_empty() {
            s.push_str(&format!("  writes:  {}\n", c.writes.join(", ")));
        }
        if !c.hosts.is_empty() {
            s.push_str(&format!("  hosts:   {}\n", c.hosts.join(", ")));
        }
        if let Some(i) = &c.install {
            let pkgs: Vec<String> = i
                .packages
                .iter()
                .map(|p| {
                    if p.version.is_empty() {
                        p.name.clone()
                    } else {
                        format!("{}@{}", p.name, p.version)
                    }
                })
                .collect();
            s.push_str(&format!(
                "  install: {} {} {}\n",
                i.manager,
                i.operation,
                pkgs.join(" ")
            ));
        }
    }
    for w in &p.warnings {
        s.push_str(&format!("  WARNING: {w}\n"));
    }
    if !p.diff.is_empty() {
        s.push_str("  diff:\n");
        for l in p.diff.lines().take(40) {
            s.push_str(&format!("    {l}\n"));
        }
    }
    s
}

fn prompt(req: &pb::ApprovalRequest) -> Verdict {
    if !std::io::stdin().is_terminal() {
        return Verdict::Refuse("approval required and no terminal to ask on".into());
    }
    let mut err = std::io::stderr();
    let _ = write!(
        err,
        "\nwarden: approval required\n{}  allow? [y]es once / [n]o / [a]lways in this session: ",
        render_preview(req)
    );
    let _ = err.flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return Verdict::Refuse("no answer".into());
    }
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Verdict::Once,
        "a" | "always" => Verdict::Session,
        _ => Verdict::Refuse("the user said no".into()),
    }
}
