//! `warden mcp list [--server S] [--json]` and `warden mcp call SERVER TOOL
//! [JSON] [--yes] [--json]`: the tools of the MCP servers the session's
//! policy hosts (`[[mcp.servers]]`), run by the daemon inside the sandbox.
//!
//! `call` prints the result's text on standard output (with `--json`, the
//! whole response as one JSON object). Exit codes: 0; 1 when the server says
//! the call failed (`isError`); 126 when policy or approval refused it
//! (`warden: denied ...` / `warden: approval required ...`, as `warden
//! exec`: on a terminal the preview is shown and answered); 125 for Warden's
//! own failures (server cannot start, bad arguments).

use std::path::PathBuf;

use super::{connect, say, GlobalArgs, EXIT_REFUSED, EXIT_WARDEN};
use crate::pb::{self, mcp_client::McpClient};

#[derive(Debug, Clone, clap::Args)]
pub struct McpArgs {
    /// Workspace root [default: the current directory].
    #[arg(long, global = true, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Policy (built-in name, name in the config dir, or TOML file) that
    /// lists the servers [default: the daemon's].
    #[arg(long, global = true, value_name = "NAME|FILE")]
    pub policy: Option<String>,
    /// Use an existing session instead of a new one-shot session.
    #[arg(long, global = true, value_name = "ID", conflicts_with_all = ["workspace", "policy"])]
    pub session: Option<String>,
    /// Print JSON on standard output.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: McpCommand,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum McpCommand {
    /// List the tools of the policy's MCP servers (starting them).
    List {
        /// Only this server.
        #[arg(long, value_name = "NAME")]
        server: Option<String>,
    },
    /// Call one tool.
    Call {
        server: String,
        tool: String,
        /// Arguments as a JSON object [default: {}].
        #[arg(value_name = "JSON")]
        arguments: Option<String>,
        /// Grant once if the policy asks (never overrides a deny).
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

/// Runs `warden mcp`; returns the exit code.
pub async fn run(args: McpArgs, global: &GlobalArgs) -> i32 {
    let client = match connect(global).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let (session_id, one_shot) = match &args.session {
        Some(id) => (id.clone(), false),
        None => {
            let ws = args.workspace.clone().unwrap_or_else(|| PathBuf::from("."));
            match client.create_session(&ws, args.policy.as_deref()).await {
                Ok(s) => (s.id, true),
                Err(e) => {
                    say(e);
                    return EXIT_WARDEN;
                }
            }
        }
    };
    let existing = (!one_shot).then_some(session_id.as_str());
    let code = match &args.command {
        McpCommand::List { server } => {
            list(&client, &session_id, server.as_deref(), args.json).await
        }
        McpCommand::Call {
            server,
            tool,
            arguments,
            yes,
        } => {
            let req = pb::CallMcpToolRequest {
                session_id: session_id.clone(),
                server: server.clone(),
                tool: tool.clone(),
                arguments_json: arguments.clone().unwrap_or_default(),
                approve: *yes,
                ..Default::default()
            };
            call(&client, req, existing, args.json).await
        }
    };
    if one_shot {
        let _ = client.close_session(&session_id).await;
    }
    code
}

fn tool_json(t: &pb::McpTool) -> serde_json::Value {
    use super::exec::{decision_name, tier_name};
    serde_json::json!({
        "server": t.server,
        "name": t.name,
        "title": t.title,
        "description": t.description,
        "input_schema": serde_json::from_str::<serde_json::Value>(&t.input_schema_json).unwrap_or_default(),
        "annotations": serde_json::from_str::<serde_json::Value>(&t.annotations_json).unwrap_or_default(),
        "trust": t.trust,
        "definition_hash": t.definition_hash,
        "pinned": t.pinned,
        "changed": t.changed,
        "warnings": t.warnings,
        "tier": tier_name(t.tier),
        "decision": decision_name(t.decision),
    })
}

async fn list(client: &crate::Client, session_id: &str, server: Option<&str>, json: bool) -> i32 {
    use super::exec::decision_name;
    let req = pb::ListMcpToolsRequest {
        session_id: session_id.to_string(),
        server: server.unwrap_or("").to_string(),
    };
    let r = match McpClient::new(client.channel()).list_mcp_tools(req).await {
        Ok(r) => r.into_inner(),
        Err(s) => {
            say(s.message());
            return EXIT_WARDEN;
        }
    };
    if r.servers.is_empty() && server.is_none() {
        say("no MCP servers are configured in the policy (add an [[mcp.servers]] entry to it)");
    }
    if json {
        let v = serde_json::json!({
            "servers": r.servers.iter().map(|s| serde_json::json!({
                "name": s.name, "trust": s.trust, "profile": s.profile, "running": s.running, "error": s.error,
            })).collect::<Vec<_>>(),
            "tools": r.tools.iter().map(tool_json).collect::<Vec<_>>(),
        });
        println!("{v}");
    } else {
        for s in &r.servers {
            if s.error.is_empty() {
                println!("{} ({}, sandbox {})", s.name, s.trust, s.profile);
            } else {
                println!("{} ({}): NOT RUNNING: {}", s.name, s.trust, s.error);
            }
            for t in r.tools.iter().filter(|t| t.server == s.name) {
                let first = t.description.lines().next().unwrap_or("");
                println!(
                    "  {:<24} {:<5} {}{}",
                    t.name,
                    decision_name(t.decision),
                    if t.changed { "[CHANGED] " } else { "" },
                    first
                );
                for w in &t.warnings {
                    println!("      warning: {w}");
                }
            }
        }
    }
    if r.servers.iter().any(|s| !s.error.is_empty()) {
        return EXIT_WARDEN;
    }
    0
}

fn response_json(r: &pb::CallMcpToolResponse) -> serde_json::Value {
    use super::exec::{decision_name, tier_name};
    serde_json::json!({
        "content": serde_json::from_str::<serde_json::Value>(&r.content_json).unwrap_or_default(),
        "text": r.text,
        "structured": serde_json::from_str::<serde_json::Value>(&r.structured_json).unwrap_or_default(),
        "is_error": r.is_error,
        "tier": tier_name(r.tier),
        "decision": decision_name(r.decision),
        "refusal": r.refusal,
        "approval_request_id": r.approval_request_id,
        "warnings": r.warnings,
        "redactions": r.redactions,
        "truncated": r.truncated,
        "pre_checkpoint_id": r.pre_checkpoint_id,
        "post_checkpoint_id": r.post_checkpoint_id,
        "definition_hash": r.definition_hash,
        "definition_changed": r.definition_changed,
        "profile": r.profile,
        "duration_ms": r.duration_ms,
    })
}

async fn call(
    client: &crate::Client,
    req: pb::CallMcpToolRequest,
    existing_session: Option<&str>,
    json: bool,
) -> i32 {
    let mut mcp = McpClient::new(client.channel());
    let mut answered = false;
    loop {
        let r = match mcp.call_mcp_tool(req.clone()).await {
            Ok(r) => r.into_inner(),
            Err(s) => return super::status_exit(&s, EXIT_WARDEN),
        };
        if let (Some(a), false) = (&r.approval, answered) {
            if super::approve::on_approval_required(client, a, existing_session)
                .await
                .is_err()
            {
                if json {
                    println!("{}", response_json(&r));
                }
                return EXIT_REFUSED;
            }
            answered = true;
            continue;
        }
        if json {
            println!("{}", response_json(&r));
        }
        if !r.refusal.is_empty() {
            say(&r.refusal);
            for w in &r.warnings {
                say(format!("warning: {w}"));
            }
            return EXIT_REFUSED;
        }
        if !json {
            for w in &r.warnings {
                say(format!("warning: {w}"));
            }
            println!("{}", r.text);
        }
        return if r.is_error { 1 } else { 0 };
    }
}
