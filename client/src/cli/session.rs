//! `warden session open [--workspace DIR] [--policy NAME|FILE] [--json]`,
//! `warden session list [--all] [--json]`, `warden session close ID`.
//!
//! A session outlives the command that opened it, so an approval request
//! raised in it can be answered from another terminal: `warden exec
//! --session ID -- WORDS` exits 126 naming the request, `warden approve
//! REQUEST` grants it, and re-running the same command in the same session
//! uses the grant (the same holds for `warden fs` and `warden mcp call`).
//! `open` prints the session id on standard output (or one JSON object).
//! Closing kills the session's running commands, expires its pending
//! approvals and ends its session grants. Exit codes: 0 done; 125 when the
//! daemon refused (unknown id, bad workspace or policy) or cannot be reached.

use std::path::PathBuf;

use super::{connect, say, GlobalArgs, EXIT_WARDEN};
use crate::pb;

#[derive(Debug, Clone, clap::Args)]
pub struct SessionArgs {
    #[command(subcommand)]
    pub command: SessionCommand,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum SessionCommand {
    /// Open a session and print its id.
    Open {
        /// Workspace root [default: the current directory].
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Policy: a built-in name (default, ci, strict), a name in the
        /// config dir, or a TOML file [default: the daemon's].
        #[arg(long, value_name = "NAME|FILE")]
        policy: Option<String>,
        /// Print the session as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// List your sessions, newest first (open ones unless --all).
    List {
        /// Include closed sessions.
        #[arg(long)]
        all: bool,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Close a session (idempotent).
    Close {
        /// The session id.
        #[arg(value_name = "ID")]
        id: String,
    },
}

fn session_json(s: &pb::Session) -> serde_json::Value {
    let state = match pb::SessionState::try_from(s.state) {
        Ok(pb::SessionState::Open) => "open",
        Ok(pb::SessionState::Closed) => "closed",
        _ => "unspecified",
    };
    serde_json::json!({"id": s.id, "workspace": s.workspace, "policy": s.policy_name,
        "policy_hash": s.policy_hash, "state": state, "created_at_ms": s.created_at_ms,
        "closed_at_ms": s.closed_at_ms})
}

/// Runs `warden session`; returns the exit code.
pub async fn run(args: SessionArgs, global: &GlobalArgs) -> i32 {
    let client = match connect(global).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    match args.command {
        SessionCommand::Open {
            workspace,
            policy,
            json,
        } => {
            let ws = workspace.unwrap_or_else(|| PathBuf::from("."));
            match client.create_session(&ws, policy.as_deref()).await {
                Ok(s) => {
                    if json {
                        println!("{}", session_json(&s));
                    } else {
                        println!("{}", s.id);
                        say(format!(
                            "session {} open on {} (policy {}); use --session {} with exec, fs and mcp call; close with `warden session close {}`",
                            s.id, s.workspace, s.policy_name, s.id, s.id
                        ));
                    }
                    0
                }
                Err(e) => {
                    say(e);
                    EXIT_WARDEN
                }
            }
        }
        SessionCommand::List { all, json } => {
            let r = match client
                .sessions()
                .list_sessions(pb::ListSessionsRequest {
                    include_closed: all,
                    limit: 0,
                })
                .await
            {
                Ok(r) => r.into_inner(),
                Err(s) => {
                    say(s.message());
                    return EXIT_WARDEN;
                }
            };
            for s in &r.sessions {
                if json {
                    println!("{}", session_json(s));
                } else {
                    let v = session_json(s);
                    println!(
                        "{}  {:<6} {:<10} {}",
                        s.id,
                        v["state"].as_str().unwrap_or(""),
                        s.policy_name,
                        s.workspace
                    );
                }
            }
            0
        }
        SessionCommand::Close { id } => {
            match client
                .sessions()
                .close_session(pb::CloseSessionRequest {
                    session_id: id.clone(),
                })
                .await
            {
                Ok(_) => {
                    say(format!("session {id} closed"));
                    0
                }
                Err(s) => {
                    say(format!("session {id}: {}", s.message()));
                    EXIT_WARDEN
                }
            }
        }
    }
}
