//! `warden approve ID [--deny] [--scope once|session] [--prefix WORD]... [--reason TEXT]`
//!
//! Answers an approval request from any terminal of the session's user.
//! `once` grants exactly that request (same command, cwd, tier, policy
//! version) for one execution: re-running the same command in the same
//! session (`warden exec --session ID`) uses it. `session` grants an argv
//! prefix (never a shell or bare interpreter) until the session closes.
//! Prints the resolved request on standard output. Exit codes: 0 answered;
//! 125 when the daemon refused (unknown id, expired, already answered, bad
//! prefix) or cannot be reached, with the reason on standard error.

use super::{connect, say, GlobalArgs, EXIT_WARDEN};
use crate::pb;

/// Grant scope on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScopeArg {
    /// Exactly this request, one execution.
    Once,
    /// An argv prefix for the rest of the session.
    Session,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ApproveArgs {
    /// The approval request id (printed by `warden exec`).
    #[arg(value_name = "ID")]
    pub id: String,
    /// Deny instead of granting: the same request in the same run is then
    /// refused without asking again.
    #[arg(long)]
    pub deny: bool,
    /// What a grant covers.
    #[arg(long, value_enum, default_value = "once", conflicts_with = "deny")]
    pub scope: ScopeArg,
    /// For --scope session: the argv prefix, one word per flag
    /// (`--prefix git --prefix status`) [default: the suggested prefix].
    #[arg(long = "prefix", value_name = "WORD", requires = "scope")]
    pub prefix: Vec<String>,
    /// Why (kept in the audit log).
    #[arg(long, default_value = "")]
    pub reason: String,
}

/// One line describing a resolved request.
pub fn describe(a: &pb::ApprovalRequest) -> String {
    let state = pb::ApprovalState::try_from(a.state)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("APPROVAL_STATE_")
                .to_ascii_lowercase()
        })
        .unwrap_or_else(|_| "unknown".into());
    let scope = match pb::GrantScope::try_from(a.scope) {
        Ok(pb::GrantScope::Once) => " once".to_string(),
        Ok(pb::GrantScope::Session) => {
            format!(" for this session: prefix {:?}", a.prefix.join(" "))
        }
        _ => String::new(),
    };
    let summary = a.preview.as_ref().map(|p| p.summary.as_str()).unwrap_or("");
    format!("{} {state}{scope}: {summary}", a.id)
}

/// Runs `warden approve`; returns the exit code.
pub async fn run(args: ApproveArgs, global: &GlobalArgs) -> i32 {
    if args.scope != ScopeArg::Session && !args.prefix.is_empty() {
        say("--prefix needs --scope session");
        return EXIT_WARDEN;
    }
    let client = match connect(global).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let req = pb::ApproveRequest {
        request_id: args.id.clone(),
        decision: if args.deny {
            pb::Decision::Deny
        } else {
            pb::Decision::Allow
        } as i32,
        scope: match args.scope {
            ScopeArg::Once => pb::GrantScope::Once,
            ScopeArg::Session => pb::GrantScope::Session,
        } as i32,
        prefix: args.prefix,
        reason: args.reason,
    };
    match client.approvals().approve(req).await {
        Ok(r) => {
            println!("{}", describe(r.get_ref()));
            0
        }
        Err(s) => {
            say(format!("request {}: {}", args.id, s.message()));
            EXIT_WARDEN
        }
    }
}

/// The preview of a request as text for a terminal.
pub fn render_preview(a: &pb::ApprovalRequest) -> String {
    use super::exec::{decision_name, tier_name};
    use std::fmt::Write;
    let mut s = String::new();
    let Some(p) = &a.preview else {
        return s;
    };
    let _ = writeln!(s, "  {}: {}", p.tool, p.summary);
    if !p.cwd.is_empty() {
        let _ = writeln!(s, "  cwd: {}", p.cwd);
    }
    if let Some(c) = &p.classification {
        let rule = if c.rule.is_empty() {
            "(tier matrix)"
        } else {
            &c.rule
        };
        let _ = writeln!(
            s,
            "  tier: {}   decision: {}   rule: {rule}",
            tier_name(c.tier),
            decision_name(c.decision)
        );
        for r in &c.reasons {
            let _ = writeln!(s, "  why: {r}");
        }
        for part in &c.parts {
            let _ = writeln!(
                s,
                "  part [{}]: {}",
                tier_name(part.tier),
                part.argv.join(" ")
            );
        }
        if !c.writes.is_empty() {
            let _ = writeln!(s, "  writes: {}", c.writes.join(", "));
        }
        if !c.hosts.is_empty() {
            let _ = writeln!(s, "  hosts: {}", c.hosts.join(", "));
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
            let _ = writeln!(
                s,
                "  install: {} {} {} (scripts {})",
                i.manager,
                i.operation,
                pkgs.join(" "),
                if i.scripts_enabled { "run" } else { "off" }
            );
        }
    }
    for w in &p.warnings {
        let _ = writeln!(s, "  warning: {w}");
    }
    if !p.diff.is_empty() {
        let _ = writeln!(s, "{}", p.diff);
    }
    s
}

/// Said when a one-shot session (no `--session`) met an approval request:
/// the request expires with the session, so `warden approve` cannot answer it.
pub const ONE_SHOT_HINT: &str = "this one-shot session ends now and its request expires with it: pass --yes to grant once, run on a terminal to be asked, or open a session (`warden session open`), call again with `--session ID` and answer with `warden approve REQUEST` from another terminal";

/// What `warden exec` does with an `approval_required` event: on a terminal
/// (standard input and standard error both terminals) show the preview and
/// ask y / n / a (always for this session, with the prefix shown), then
/// answer through `Approvals.Approve` and let the stream go on. Otherwise
/// print `warden: approval required` with the request id and how to answer
/// it, and return the exit code 126.
pub async fn on_approval_required(
    client: &crate::Client,
    a: &pb::ApprovalRequest,
    existing_session: Option<&str>,
) -> Result<(), i32> {
    use std::io::IsTerminal;
    let summary = a.preview.as_ref().map(|p| p.summary.as_str()).unwrap_or("");
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    if !interactive {
        say(format!("approval required (request {}): {summary}", a.id));
        match existing_session {
            Some(sid) => say(format!(
                "answer from any terminal with `warden approve {}` (or --deny, --scope session), then repeat the same call with `--session {sid}`",
                a.id
            )),
            None => say(ONE_SHOT_HINT),
        }
        return Err(super::EXIT_REFUSED);
    }
    let prefix = a.suggested_prefix.join(" ");
    eprintln!("warden: approval required (request {}):", a.id);
    eprint!("{}", render_preview(a));
    let question = if prefix.is_empty() {
        "warden: allow? [y] once  [n] deny: ".to_string()
    } else {
        format!(
            "warden: allow? [y] once  [n] deny  [a] always for this session (prefix `{prefix}`): "
        )
    };
    let (grant, scope) = loop {
        eprint!("{question}");
        let line = tokio::task::spawn_blocking(|| {
            let mut l = String::new();
            std::io::stdin().read_line(&mut l).map(|n| (n, l))
        })
        .await;
        let answer = match line {
            Ok(Ok((0, _))) | Ok(Err(_)) | Err(_) => {
                // End of input: leave the request pending.
                say(format!("approval required (request {}): no answer", a.id));
                return Err(super::EXIT_REFUSED);
            }
            Ok(Ok((_, l))) => l.trim().to_ascii_lowercase(),
        };
        match answer.as_str() {
            "y" | "yes" => break (true, pb::GrantScope::Once),
            "n" | "no" => break (false, pb::GrantScope::Once),
            "a" | "always" if !prefix.is_empty() => break (true, pb::GrantScope::Session),
            _ => continue,
        }
    };
    let req = pb::ApproveRequest {
        request_id: a.id.clone(),
        decision: if grant {
            pb::Decision::Allow
        } else {
            pb::Decision::Deny
        } as i32,
        scope: scope as i32,
        prefix: vec![],
        reason: "answered at the terminal".into(),
    };
    if let Err(s) = client.approvals().approve(req).await {
        // The stream still ends with the daemon's verdict (expired, ...).
        say(format!("request {}: {}", a.id, s.message()));
    }
    Ok(())
}
