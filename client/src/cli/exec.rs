//! `warden exec [--workspace DIR] [--policy NAME|FILE] [--timeout SECS] [--yes] [--json] -- WORDS...`
//!
//! WORDS are joined with single spaces into one script run by `bash -c` (as
//! ssh does). Standard output carries only the command's standard output;
//! every Warden message goes to standard error. Exit codes: the command's
//! own; 124 on timeout; 126 when policy or approval refused it (message
//! starting `warden: denied` or `warden: approval required`); 128+N when
//! killed by signal N; 125 for Warden's own failures, including usage
//! errors (no WORDS, `--timeout 0`: clap's 2 is mapped in `main`).
//!
//! When the policy asks: on a terminal the preview is shown and the user
//! answers y (once) / n (deny) / a (always for this session, prefix shown);
//! without a terminal and without `--yes` it exits 126 with `warden:
//! approval required` and the request id. In a session opened with `warden
//! session open`, `warden approve ID` answers it from another terminal and
//! repeating the same command with `--session SID` uses the grant; a
//! one-shot session's request expires with it.
//!
//! Without `--session` this is one Exec call in a one-shot session that the
//! daemon opens and closes (closed before the command's exit code is
//! returned; listed by `warden session list --all`, its checkpoints by
//! `warden checkpoint list`). With `--json` the first line is
//! `{"event":"session","id":...}`.

use std::io::Write;
use std::path::PathBuf;

use tokio_stream::StreamExt;

use super::{connect, say, GlobalArgs, EXIT_REFUSED, EXIT_TIMEOUT, EXIT_WARDEN};
use crate::pb::{self, exec_event::Event};

#[derive(Debug, Clone, clap::Args)]
#[command(trailing_var_arg = true)]
pub struct ExecArgs {
    /// Workspace root [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Policy: a built-in name (default, ci, strict), a name in the config
    /// dir, or a TOML file [default: the daemon's].
    #[arg(long, value_name = "NAME|FILE")]
    pub policy: Option<String>,
    /// Run in an existing session instead of a new one-shot session.
    #[arg(long, value_name = "ID", conflicts_with_all = ["workspace", "policy"])]
    pub session: Option<String>,
    /// Wall-clock limit in seconds (1..=86400) [default: the policy's, 120].
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: Option<u64>,
    /// Grant once if the policy asks for approval (never overrides a deny).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Print events as JSON lines on standard output instead of raw output.
    #[arg(long)]
    pub json: bool,
    /// The command: joined with spaces and run by `bash -c`. Options of
    /// `warden exec` come first; a mistyped one is a usage error (125), not
    /// part of the command (put `--` before a command starting with `-`).
    #[arg(required = true, value_name = "WORDS")]
    pub words: Vec<String>,
}

/// Runs `warden exec`; returns the exit code.
pub async fn run(args: ExecArgs, global: &GlobalArgs) -> i32 {
    let command = args.words.join(" ");
    if command.trim().is_empty() {
        say("the command is empty");
        return EXIT_WARDEN;
    }
    if command.contains('\0') {
        say("the command contains a NUL byte");
        return EXIT_WARDEN;
    }
    let client = match connect(global).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let code = call(&client, command, &args).await;
    // `main` runs exec on a current-thread runtime: stop an embedded daemon
    // without blocking it.
    client.shutdown().await;
    code
}

/// The Exec call and its events; returns the exit code.
async fn call(client: &crate::Client, command: String, args: &ExecArgs) -> i32 {
    let req = pb::ExecRequest {
        session_id: args.session.clone().unwrap_or_default(),
        command,
        timeout_ms: args.timeout.map(|s| s * 1000).unwrap_or(0),
        approve: args.yes,
        ..Default::default()
    };
    let events = match &args.session {
        Some(_) => match client.exec_client().exec(req).await {
            Ok(r) => r.into_inner(),
            Err(s) => return super::status_exit(&s, EXIT_WARDEN),
        },
        // One call: the daemon opens the one-shot session, runs the command
        // and closes the session before the stream ends. A refusal to open
        // it (bad workspace or policy) is Warden's failure: 125.
        None => {
            let ws = args.workspace.clone().unwrap_or_else(|| PathBuf::from("."));
            match client.exec_one_shot(&ws, args.policy.as_deref(), req).await {
                Ok(events) => events,
                Err(e) => {
                    say(e);
                    return EXIT_WARDEN;
                }
            }
        }
    };
    let mut one_shot = None;
    let (code, ended) = stream(client, events, args, &mut one_shot).await;
    // Leaving before the daemon ended the call (approval refused here, an
    // error): the daemon closes the one-shot session once it sees us gone;
    // close it now so it is closed (its request expired) when we exit.
    if let (Some(id), false) = (one_shot, ended) {
        let _ = client.close_session(&id).await;
    }
    code
}

/// Reads the call's events to the end; returns the exit code and whether the
/// daemon ended the stream (false: we left early). Sets `one_shot` to the
/// session of a one-shot call.
async fn stream(
    client: &crate::Client,
    mut events: tonic::Streaming<pb::ExecEvent>,
    args: &ExecArgs,
    one_shot: &mut Option<String>,
) -> (i32, bool) {
    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr();
    let mut exit: Option<pb::ExitEvent> = None;
    while let Some(ev) = events.next().await {
        let ev = match ev {
            Ok(ev) => ev,
            Err(s) => return (super::status_exit(&s, EXIT_WARDEN), false),
        };
        if args.json {
            if let Some(line) = event_json(&ev) {
                let _ = writeln!(stdout, "{line}");
                let _ = stdout.flush();
            }
        }
        match ev.event {
            Some(Event::Stdout(c)) if !args.json => {
                let _ = stdout.write_all(&c.data);
                let _ = stdout.flush();
            }
            Some(Event::Stderr(c)) if !args.json => {
                let _ = stderr.write_all(&c.data);
                let _ = stderr.flush();
            }
            Some(Event::Exit(e)) => exit = Some(e),
            Some(Event::Session(s)) => *one_shot = Some(s.id),
            Some(Event::ApprovalRequired(a)) => {
                let existing = args.session.as_deref();
                if let Err(code) = super::approve::on_approval_required(client, &a, existing).await
                {
                    return (code, false);
                }
            }
            _ => {}
        }
    }
    let Some(e) = exit else {
        say("the daemon ended the call without an exit status");
        return (EXIT_WARDEN, true);
    };
    (exit_code(&e), true)
}

/// Maps an exit event to the CLI's exit code (and says why on stderr).
pub fn exit_code(e: &pb::ExitEvent) -> i32 {
    if e.refused {
        say(&e.refusal);
        if !e.approval_request_id.is_empty() {
            say(format!("approval request id: {}", e.approval_request_id));
        }
        return EXIT_REFUSED;
    }
    if e.timed_out {
        say(format!(
            "timed out after {} ms; the command and all its processes were killed",
            e.duration_ms
        ));
        return EXIT_TIMEOUT;
    }
    if e.stdout_dropped_bytes > 0 || e.stderr_dropped_bytes > 0 {
        say(format!(
            "output truncated: {} stdout and {} stderr bytes dropped",
            e.stdout_dropped_bytes, e.stderr_dropped_bytes
        ));
    }
    if e.signal > 0 {
        return 128 + e.signal;
    }
    if (0..=255).contains(&e.code) {
        e.code
    } else {
        EXIT_WARDEN
    }
}

/// `safe-read`, `write`, ... for a proto tier value.
pub fn tier_name(t: i32) -> &'static str {
    match pb::Tier::try_from(t).unwrap_or(pb::Tier::Unspecified) {
        pb::Tier::SafeRead => "safe-read",
        pb::Tier::Write => "write",
        pb::Tier::Network => "network",
        pb::Tier::Install => "install",
        pb::Tier::Destructive => "destructive",
        pb::Tier::Unspecified => "unspecified",
    }
}

/// `allow`, `ask`, `deny` for a proto decision value.
pub fn decision_name(d: i32) -> &'static str {
    match pb::Decision::try_from(d).unwrap_or(pb::Decision::Unspecified) {
        pb::Decision::Allow => "allow",
        pb::Decision::Ask => "ask",
        pb::Decision::Deny => "deny",
        pb::Decision::Unspecified => "unspecified",
    }
}

/// One exec event as a JSON line (`--json`).
pub fn event_json(ev: &pb::ExecEvent) -> Option<serde_json::Value> {
    use serde_json::json;
    Some(match ev.event.as_ref()? {
        Event::Decision(d) => {
            let c = d.classification.clone().unwrap_or_default();
            json!({"event": "decision", "tier": tier_name(c.tier), "decision": decision_name(c.decision),
                   "rule": if c.rule.is_empty() { None } else { Some(c.rule) }, "reasons": c.reasons, "profile": d.profile})
        }
        Event::ApprovalRequired(a) => json!({"event": "approval_required", "request_id": a.id,
            "summary": a.preview.as_ref().map(|p| p.summary.clone())}),
        Event::ApprovalResolved(a) => {
            json!({"event": "approval_resolved", "request_id": a.request_id, "state": a.state})
        }
        Event::Started(s) => {
            json!({"event": "started", "pid": s.pid, "landlock": s.landlock, "profile": s.profile})
        }
        Event::Stdout(c) => json!({"event": "stdout", "data": String::from_utf8_lossy(&c.data)}),
        Event::Stderr(c) => json!({"event": "stderr", "data": String::from_utf8_lossy(&c.data)}),
        Event::Checkpoint(c) => {
            json!({"event": "checkpoint", "id": c.checkpoint_id, "kind": c.kind, "root_hash": c.root_hash})
        }
        Event::Session(s) => json!({"event": "session", "id": s.id, "workspace": s.workspace,
            "policy": s.policy_name, "policy_hash": s.policy_hash}),
        Event::Exit(e) => {
            json!({"event": "exit", "code": e.code, "signal": e.signal, "duration_ms": e.duration_ms,
            "timed_out": e.timed_out, "refused": e.refused, "refusal": e.refusal,
            "stdout_dropped_bytes": e.stdout_dropped_bytes, "stderr_dropped_bytes": e.stderr_dropped_bytes,
            "redactions": e.redactions, "pre_checkpoint_id": e.pre_checkpoint_id, "post_checkpoint_id": e.post_checkpoint_id})
        }
    })
}
