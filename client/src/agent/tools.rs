//! The tools offered to the model, each defined once ([`TOOLS`]: name,
//! description, argument schema) and dispatched to the daemon: `shell` to
//! Exec, the file tools to Files. Results returned to the model are the
//! daemon's redacted output, truncated with a marker past a budget.

use std::time::Instant;

use serde_json::{json, Value};
use tokio_stream::StreamExt;

use super::approver::{Approver, Verdict};
use super::provider::{ToolCall, ToolSpec};
use crate::cli::exec::{decision_name, tier_name};
use crate::pb::{self, exec_event::Event};
use crate::Client;

/// One argument of a tool.
struct Arg {
    name: &'static str,
    kind: &'static str,
    required: bool,
    doc: &'static str,
}

/// One tool's single definition.
struct ToolDef {
    name: &'static str,
    doc: &'static str,
    args: &'static [Arg],
}

const fn req(name: &'static str, kind: &'static str, doc: &'static str) -> Arg {
    Arg {
        name,
        kind,
        required: true,
        doc,
    }
}
const fn opt(name: &'static str, kind: &'static str, doc: &'static str) -> Arg {
    Arg {
        name,
        kind,
        required: false,
        doc,
    }
}

const TOOLS: &[ToolDef] = &[
    ToolDef {
        name: "shell",
        doc: "Run a bash command in the workspace (sandboxed; classified and decided by policy). Returns exit code, stdout and stderr.",
        args: &[req("command", "string", "The bash command."), opt("timeout_secs", "integer", "Wall-clock limit in seconds (default 120).")],
    },
    ToolDef {
        name: "read_file",
        doc: "Read a text file of the workspace (path relative to the workspace root).",
        args: &[
            req("path", "string", "File path relative to the workspace root."),
            opt("offset", "integer", "Byte offset to start at."),
            opt("limit", "integer", "At most this many bytes."),
        ],
    },
    ToolDef {
        name: "write_file",
        doc: "Create or replace a file of the workspace with the given content (atomic).",
        args: &[req("path", "string", "File path relative to the workspace root."), req("content", "string", "The whole new content.")],
    },
    ToolDef {
        name: "apply_patch",
        doc: "Apply a unified diff (git-style, may touch several files, create/delete/rename) atomically.",
        args: &[req("patch", "string", "The unified diff.")],
    },
    ToolDef {
        name: "list_dir",
        doc: "List a directory of the workspace.",
        args: &[req("path", "string", "Directory relative to the workspace root ('.' for the root).")],
    },
    ToolDef {
        name: "grep",
        doc: "Search file contents with a regular expression (Rust regex syntax).",
        args: &[req("pattern", "string", "The regular expression."), opt("path", "string", "File or directory to search (default: the whole workspace).")],
    },
];

/// Prefix of the tools of hosted MCP servers: `mcp__<server>__<tool>`
/// (server names never contain `__`).
pub const MCP_PREFIX: &str = "mcp__";

/// (server, tool) of `mcp__<server>__<tool>` without its prefix.
fn mcp_target(rest: &str) -> Option<(&str, &str)> {
    let (server, tool) = rest.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

/// Specs of the tools of the MCP servers the session's policy hosts (the
/// daemon starts them in the sandbox). Tools whose names a model API cannot
/// carry (`[A-Za-z0-9_-]`, 64 bytes in all) are left out; a server that
/// cannot start contributes nothing (logged). The description says whose
/// words it is. Also returns the daemon's warnings about the offered tools
/// (tool name, warning).
pub async fn mcp_specs(
    client: &Client,
    session_id: &str,
) -> (Vec<ToolSpec>, Vec<(String, String)>) {
    let req = pb::ListMcpToolsRequest {
        session_id: session_id.to_string(),
        server: String::new(),
    };
    let r = match pb::mcp_client::McpClient::new(client.channel())
        .list_mcp_tools(req)
        .await
    {
        Ok(r) => r.into_inner(),
        Err(s) => {
            tracing::warn!("listing MCP tools: {}", s.message());
            return (vec![], vec![]);
        }
    };
    for s in r.servers.iter().filter(|s| !s.error.is_empty()) {
        tracing::warn!(server = %s.name, "MCP server not available: {}", s.error);
    }
    let mut warnings = Vec::new();
    let specs = r
        .tools
        .into_iter()
        .filter_map(|t| {
            let name = format!("{MCP_PREFIX}{}__{}", t.server, t.name);
            let ok = name.len() <= 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if ok {
                warnings.extend(t.warnings.iter().map(|w| (name.clone(), w.clone())));
            }
            ok.then(|| ToolSpec {
                name,
                description: format!(
                    "Tool {:?} of the MCP server {:?} ({}). The server describes it as: {}",
                    t.name, t.server, t.trust, t.description
                ),
                parameters: serde_json::from_str(&t.input_schema_json)
                    .unwrap_or_else(|_| json!({"type": "object"})),
            })
        })
        .collect();
    (specs, warnings)
}

/// JSON-schema tool specs for the model, generated from [`TOOLS`].
pub fn specs() -> Vec<ToolSpec> {
    TOOLS
        .iter()
        .map(|t| {
            let props: serde_json::Map<String, Value> =
                t.args.iter().map(|a| (a.name.to_string(), json!({"type": a.kind, "description": a.doc}))).collect();
            let required: Vec<&str> = t.args.iter().filter(|a| a.required).map(|a| a.name).collect();
            ToolSpec {
                name: t.name.to_string(),
                description: t.doc.to_string(),
                parameters: json!({"type": "object", "properties": props, "required": required, "additionalProperties": false}),
            }
        })
        .collect()
}

/// Checks a call's arguments against its tool's definition (schema layer:
/// a malformed call never reaches the daemon). Returns the reason it is
/// malformed.
pub fn validate(call: &ToolCall) -> Result<(), String> {
    if let Some(rest) = call.name.strip_prefix(MCP_PREFIX) {
        if mcp_target(rest).is_none() {
            return Err(format!("bad MCP tool name {:?}", call.name));
        }
        if call.malformed || !call.arguments.is_object() {
            return Err(format!(
                "the arguments of {} must be a JSON object",
                call.name
            ));
        }
        return Ok(());
    }
    let Some(def) = TOOLS.iter().find(|t| t.name == call.name) else {
        return Err(format!(
            "unknown tool {:?}; available: {}",
            call.name,
            TOOLS.iter().map(|t| t.name).collect::<Vec<_>>().join(", ")
        ));
    };
    if call.malformed {
        return Err(format!(
            "the arguments of {} are not a JSON object: {}",
            call.name, call.arguments
        ));
    }
    let Some(obj) = call.arguments.as_object() else {
        return Err(format!(
            "the arguments of {} must be a JSON object",
            call.name
        ));
    };
    for a in def.args {
        match obj.get(a.name) {
            None | Some(Value::Null) if a.required => {
                return Err(format!(
                    "{}: missing required argument {:?}",
                    call.name, a.name
                ))
            }
            Some(v) if !v.is_null() => {
                let ok = match a.kind {
                    "string" => v.is_string(),
                    "integer" => v.as_u64().is_some(),
                    _ => true,
                };
                if !ok {
                    return Err(format!(
                        "{}: argument {:?} must be a {}",
                        call.name, a.name, a.kind
                    ));
                }
            }
            _ => {}
        }
    }
    if let Some(extra) = obj
        .keys()
        .find(|k| !def.args.iter().any(|a| a.name == k.as_str()))
    {
        return Err(format!("{}: unknown argument {extra:?}", call.name));
    }
    Ok(())
}

/// What one tool call did, for the progress view, the summary and the model.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The text returned to the model (redacted by the daemon, truncated here).
    pub text: String,
    pub tier: Option<String>,
    pub decision: Option<String>,
    /// Refused by policy or approval (denied, approval refused).
    pub refused: bool,
    /// The arguments were malformed (answered with an error, nothing ran).
    pub malformed: bool,
    /// Set by [`Dispatcher::dispatch`] when the call failed: the first line
    /// of a result that starts with `error` (every failure path says so).
    pub error: Option<String>,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub files_changed: Vec<String>,
    pub pre_checkpoint: Option<String>,
    pub post_checkpoint: Option<String>,
}

/// Dispatches tool calls of one run to the daemon.
pub struct Dispatcher<'a> {
    /// The run's spans: tool calls carry the current step's `traceparent`.
    pub trace: Option<&'a super::trace::RunTrace>,
    pub client: &'a Client,
    pub session_id: String,
    pub run_id: String,
    pub approver: &'a dyn Approver,
    /// Most bytes of tool output returned to the model.
    pub budget_bytes: usize,
}

fn arg_str(v: &Value, k: &str) -> String {
    v.get(k)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The answer to approval request `id` that the approver's `verdict` gives.
fn answer_of(id: &str, verdict: &Verdict) -> pb::ApproveRequest {
    let (decision, scope) = match verdict {
        Verdict::Once => (pb::Decision::Allow, pb::GrantScope::Once),
        Verdict::Session => (pb::Decision::Allow, pb::GrantScope::Session),
        Verdict::Refuse(_) => (pb::Decision::Deny, pb::GrantScope::Once),
    };
    pb::ApproveRequest {
        request_id: id.to_string(),
        decision: decision as i32,
        scope: scope as i32,
        prefix: vec![],
        reason: match verdict {
            Verdict::Refuse(why) => why.clone(),
            _ => "granted by the agent's approver".into(),
        },
    }
}

/// Cuts `s` to `budget` bytes (keeping head and tail) with a marker.
pub fn truncate(s: &str, budget: usize) -> String {
    if s.len() <= budget {
        return s.to_string();
    }
    let half = budget / 2;
    let mut head = half;
    while !s.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = s.len() - half;
    while !s.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n[warden: {} bytes of output omitted]\n{}",
        &s[..head],
        tail - head,
        &s[tail..]
    )
}

/// The first line of `text`, at most 500 bytes (cut at a char boundary).
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let mut end = line.len().min(500);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_string()
}

impl Dispatcher<'_> {
    /// `msg` as a request carrying the run's `traceparent`, if traced.
    fn req<T>(&self, msg: T) -> tonic::Request<T> {
        match self.trace {
            Some(t) => t.traced(msg),
            None => tonic::Request::new(msg),
        }
    }

    /// Runs one tool call; never fails (errors become the result text).
    pub async fn dispatch(&self, step_id: &str, call: &ToolCall) -> Outcome {
        if let Err(why) = validate(call) {
            let text = format!("error: malformed tool call: {why}");
            return Outcome {
                error: Some(first_line(&text)),
                text,
                malformed: true,
                ..Default::default()
            };
        }
        let started = Instant::now();
        let mut out = match call.name.as_str() {
            "shell" => self.shell(step_id, call).await,
            "read_file" => self.read_file(call).await,
            "write_file" | "apply_patch" => self.write(step_id, call).await,
            "list_dir" => self.list_dir(call).await,
            "grep" => self.grep(call).await,
            n if n.starts_with(MCP_PREFIX) => self.mcp(step_id, call).await,
            _ => unreachable!("validated"),
        };
        out.duration_ms = started.elapsed().as_millis() as u64;
        if out.text.starts_with("error") {
            out.error = Some(first_line(&out.text));
        }
        out.text = truncate(&out.text, self.budget_bytes);
        out
    }

    /// A tool of a hosted MCP server (`CallMcpTool`); when the policy asks,
    /// the approver answers and the call is made once more.
    async fn mcp(&self, step_id: &str, call: &ToolCall) -> Outcome {
        let Some((server, tool)) = call.name.strip_prefix(MCP_PREFIX).and_then(mcp_target) else {
            unreachable!("validated")
        };
        let req = pb::CallMcpToolRequest {
            session_id: self.session_id.clone(),
            server: server.to_string(),
            tool: tool.to_string(),
            arguments_json: call.arguments.to_string(),
            run_id: self.run_id.clone(),
            step_id: step_id.to_string(),
            tool_call_id: call.id.clone(),
            ..Default::default()
        };
        let mut mcp = pb::mcp_client::McpClient::new(self.client.channel());
        let mut answered = false;
        loop {
            let r = match mcp.call_mcp_tool(self.req(req.clone())).await {
                Ok(r) => r.into_inner(),
                Err(s) => {
                    return Outcome {
                        text: format!("error: {}", s.message()),
                        ..Default::default()
                    }
                }
            };
            let mut out = Outcome {
                tier: Some(tier_name(r.tier).into()),
                decision: Some(decision_name(r.decision).into()),
                pre_checkpoint: (!r.pre_checkpoint_id.is_empty())
                    .then(|| r.pre_checkpoint_id.clone()),
                post_checkpoint: (!r.post_checkpoint_id.is_empty())
                    .then(|| r.post_checkpoint_id.clone()),
                ..Default::default()
            };
            if let (Some(a), false) = (&r.approval, answered) {
                answered = true;
                let verdict = self.approver.decide(a).await;
                let answer = answer_of(&a.id, &verdict);
                if let Err(s) = self.client.approvals().approve(answer).await {
                    tracing::warn!("approve {}: {}", a.id, s.message());
                }
                if let Verdict::Refuse(why) = verdict {
                    out.refused = true;
                    out.text = format!("refused: {} ({why}); take another way", r.refusal);
                    return out;
                }
                continue;
            }
            if !r.refusal.is_empty() {
                out.refused = true;
                out.text = format!("refused: {}; take another way", r.refusal);
                return out;
            }
            out.text = if r.is_error {
                format!("error (reported by the MCP server): {}", r.text)
            } else {
                r.text
            };
            return out;
        }
    }

    async fn shell(&self, step_id: &str, call: &ToolCall) -> Outcome {
        let command = arg_str(&call.arguments, "command");
        let timeout_ms = call
            .arguments
            .get("timeout_secs")
            .and_then(Value::as_u64)
            .map(|s| s.saturating_mul(1000))
            .unwrap_or(0);
        let mut approve = false;
        // At most two attempts: the second after the user granted an ask
        // that the daemon answered with a refusal (no interactive wait).
        for _ in 0..2 {
            let req = pb::ExecRequest {
                session_id: self.session_id.clone(),
                command: command.clone(),
                timeout_ms,
                approve,
                run_id: self.run_id.clone(),
                step_id: step_id.to_string(),
                tool_call_id: call.id.clone(),
                ..Default::default()
            };
            let mut stream = match self.client.exec_client().exec(self.req(req)).await {
                Ok(s) => s.into_inner(),
                Err(s) => {
                    return Outcome {
                        text: format!("error: {}", s.message()),
                        ..Default::default()
                    }
                }
            };
            let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
            let mut out = Outcome::default();
            let mut exit = None;
            while let Some(ev) = stream.next().await {
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(s) => {
                        return Outcome {
                            text: format!("error: {}", s.message()),
                            ..out
                        }
                    }
                };
                match ev.event {
                    Some(Event::Decision(d)) => {
                        let c = d.classification.unwrap_or_default();
                        out.tier = Some(tier_name(c.tier).into());
                        out.decision = Some(decision_name(c.decision).into());
                    }
                    Some(Event::ApprovalRequired(a)) => {
                        let verdict = self.approver.decide(&a).await;
                        let r = answer_of(&a.id, &verdict);
                        if let Err(s) = self.client.approvals().approve(r.clone()).await {
                            // A session grant the daemon refuses (no safe
                            // prefix, e.g. a compound command) falls back to
                            // a once-grant, so the call never waits out the
                            // expiry; anything else is answered as denied.
                            tracing::warn!("approve {}: {}", a.id, s.message());
                            let fallback = if verdict == Verdict::Session {
                                pb::ApproveRequest {
                                    scope: pb::GrantScope::Once as i32,
                                    ..r
                                }
                            } else {
                                pb::ApproveRequest {
                                    decision: pb::Decision::Deny as i32,
                                    scope: pb::GrantScope::Once as i32,
                                    ..r
                                }
                            };
                            let _ = self.client.approvals().approve(fallback).await;
                        }
                    }
                    Some(Event::Stdout(c)) => stdout.extend_from_slice(&c.data),
                    Some(Event::Stderr(c)) => stderr.extend_from_slice(&c.data),
                    Some(Event::Checkpoint(c)) if c.kind == "pre" => {
                        out.pre_checkpoint = Some(c.checkpoint_id)
                    }
                    Some(Event::Checkpoint(c)) if c.kind == "post" => {
                        out.post_checkpoint = Some(c.checkpoint_id)
                    }
                    Some(Event::Exit(e)) => exit = Some(e),
                    _ => {}
                }
            }
            let Some(e) = exit else {
                return Outcome {
                    text: "error: the daemon ended the call without an exit status".into(),
                    ..out
                };
            };
            if e.refused {
                let asked =
                    e.refusal.starts_with("approval required") && e.approval_request_id.is_empty();
                if asked && !approve {
                    let classification = self
                        .client
                        .policy()
                        .classify(pb::ClassifyRequest {
                            session_id: self.session_id.clone(),
                            command: command.clone(),
                        })
                        .await
                        .ok()
                        .map(|r| r.into_inner());
                    let preview = pb::ApprovalRequest {
                        preview: Some(pb::Preview {
                            tool: "shell".into(),
                            summary: command.clone(),
                            classification,
                            ..Default::default()
                        }),
                        ..Default::default()
                    };
                    match self.approver.decide(&preview).await {
                        Verdict::Once | Verdict::Session => {
                            approve = true;
                            continue;
                        }
                        Verdict::Refuse(why) => {
                            out.refused = true;
                            out.text = format!("refused: {} ({why}); take another way", e.refusal);
                            return out;
                        }
                    }
                }
                out.refused = true;
                out.text = format!("refused: {}; take another way", e.refusal);
                return out;
            }
            out.exit_code = Some(if e.signal > 0 { 128 + e.signal } else { e.code });
            if !e.pre_checkpoint_id.is_empty() {
                out.pre_checkpoint = Some(e.pre_checkpoint_id.clone());
            }
            if !e.post_checkpoint_id.is_empty() {
                out.post_checkpoint = Some(e.post_checkpoint_id.clone());
            }
            let mut text = String::new();
            if e.timed_out {
                text.push_str(&format!("timed out after {} ms (killed)\n", e.duration_ms));
            } else if e.signal > 0 {
                text.push_str(&format!("killed by signal {}\n", e.signal));
            } else {
                text.push_str(&format!("exit code {}\n", e.code));
            }
            if !stdout.is_empty() {
                text.push_str("--- stdout ---\n");
                text.push_str(&String::from_utf8_lossy(&stdout));
            }
            if !stderr.is_empty() {
                text.push_str("\n--- stderr ---\n");
                text.push_str(&String::from_utf8_lossy(&stderr));
            }
            out.text = text;
            return out;
        }
        Outcome {
            text: "refused: approval required".into(),
            refused: true,
            ..Default::default()
        }
    }

    async fn read_file(&self, call: &ToolCall) -> Outcome {
        let a = &call.arguments;
        let req = pb::ReadFileRequest {
            session_id: self.session_id.clone(),
            path: arg_str(a, "path"),
            offset: a.get("offset").and_then(Value::as_u64).unwrap_or(0),
            limit: a.get("limit").and_then(Value::as_u64).unwrap_or(0),
            run_id: self.run_id.clone(),
            tool_call_id: call.id.clone(),
        };
        let mut out = Outcome {
            tier: Some("safe-read".into()),
            ..Default::default()
        };
        match self.client.files().read_file(self.req(req)).await {
            Ok(r) => {
                let r = r.into_inner();
                out.decision = Some("allow".into());
                out.text = if r.binary {
                    format!("binary file ({} bytes); not shown", r.size_bytes)
                } else if r.truncated {
                    format!(
                        "{}\n[warden: truncated; the file has {} bytes]",
                        r.content, r.size_bytes
                    )
                } else {
                    r.content
                };
            }
            Err(s) => {
                out.refused = s.code() == tonic::Code::PermissionDenied;
                out.text = format!("error: {}", s.message());
            }
        }
        out
    }

    async fn write(&self, step_id: &str, call: &ToolCall) -> Outcome {
        let a = &call.arguments;
        let mut out = Outcome {
            tier: Some("write".into()),
            ..Default::default()
        };
        let summary = if call.name == "write_file" {
            format!("write_file {}", arg_str(a, "path"))
        } else {
            "apply_patch".to_string()
        };
        let mut approve = false;
        for _ in 0..2 {
            let result = if call.name == "write_file" {
                let req = pb::WriteFileRequest {
                    session_id: self.session_id.clone(),
                    path: arg_str(a, "path"),
                    content: arg_str(a, "content").into_bytes(),
                    approve,
                    run_id: self.run_id.clone(),
                    step_id: step_id.to_string(),
                    tool_call_id: call.id.clone(),
                    ..Default::default()
                };
                self.client
                    .files()
                    .write_file(self.req(req))
                    .await
                    .map(|r| {
                        let r = r.into_inner();
                        (
                            vec![arg_str(a, "path")],
                            r.pre_checkpoint_id,
                            r.post_checkpoint_id,
                            format!("wrote {} bytes", r.size_bytes),
                        )
                    })
            } else {
                let req = pb::ApplyPatchRequest {
                    session_id: self.session_id.clone(),
                    patch: arg_str(a, "patch"),
                    approve,
                    run_id: self.run_id.clone(),
                    step_id: step_id.to_string(),
                    tool_call_id: call.id.clone(),
                };
                self.client
                    .files()
                    .apply_patch(self.req(req))
                    .await
                    .map(|r| {
                        let r = r.into_inner();
                        let paths: Vec<String> = r.changes.iter().map(|c| c.path.clone()).collect();
                        let text = format!(
                            "patch applied: {}",
                            r.changes
                                .iter()
                                .map(|c| format!("{} {}", c.kind, c.path))
                                .collect::<Vec<_>>()
                                .join(", ")
                        );
                        (paths, r.pre_checkpoint_id, r.post_checkpoint_id, text)
                    })
            };
            match result {
                Ok((paths, pre, post, text)) => {
                    out.decision = Some(if approve { "ask" } else { "allow" }.into());
                    out.files_changed = paths;
                    out.pre_checkpoint = Some(pre).filter(|s| !s.is_empty());
                    out.post_checkpoint = Some(post).filter(|s| !s.is_empty());
                    out.text = text;
                    return out;
                }
                Err(s)
                    if s.code() == tonic::Code::PermissionDenied
                        && s.message().starts_with("approval required")
                        && !approve =>
                {
                    let preview = pb::ApprovalRequest {
                        preview: Some(pb::Preview {
                            tool: call.name.clone(),
                            summary: summary.clone(),
                            diff: arg_str(a, "patch"),
                            ..Default::default()
                        }),
                        ..Default::default()
                    };
                    match self.approver.decide(&preview).await {
                        Verdict::Once | Verdict::Session => approve = true,
                        Verdict::Refuse(why) => {
                            out.refused = true;
                            out.decision = Some("ask".into());
                            out.text =
                                format!("refused: {} ({why}); take another way", s.message());
                            return out;
                        }
                    }
                }
                Err(s) => {
                    out.refused = s.code() == tonic::Code::PermissionDenied;
                    if out.refused {
                        out.decision = Some("deny".into());
                    }
                    out.text = format!("error: {}", s.message());
                    return out;
                }
            }
        }
        out
    }

    async fn list_dir(&self, call: &ToolCall) -> Outcome {
        let req = pb::ListDirRequest {
            session_id: self.session_id.clone(),
            path: arg_str(&call.arguments, "path"),
            depth: 1,
            limit: 0,
            run_id: self.run_id.clone(),
            tool_call_id: call.id.clone(),
            ..Default::default()
        };
        let mut out = Outcome {
            tier: Some("safe-read".into()),
            decision: Some("allow".into()),
            ..Default::default()
        };
        out.text = match self.client.files().list_dir(self.req(req)).await {
            Ok(r) => {
                let r = r.into_inner();
                let mut s: String = r
                    .entries
                    .iter()
                    .map(|e| format!("{}{}\n", e.path, if e.kind == "dir" { "/" } else { "" }))
                    .collect();
                if r.truncated {
                    s.push_str("[warden: listing truncated]\n");
                }
                s
            }
            Err(s) => format!("error: {}", s.message()),
        };
        out
    }

    async fn grep(&self, call: &ToolCall) -> Outcome {
        let a = &call.arguments;
        let req = pb::GrepRequest {
            session_id: self.session_id.clone(),
            pattern: arg_str(a, "pattern"),
            path: arg_str(a, "path"),
            case_insensitive: false,
            limit: 0,
            run_id: self.run_id.clone(),
            tool_call_id: call.id.clone(),
            ..Default::default()
        };
        let mut out = Outcome {
            tier: Some("safe-read".into()),
            decision: Some("allow".into()),
            ..Default::default()
        };
        out.text = match self.client.files().grep(self.req(req)).await {
            Ok(r) => {
                let r = r.into_inner();
                let mut s: String = r
                    .matches
                    .iter()
                    .map(|m| format!("{}:{}:{}\n", m.path, m.line, m.text))
                    .collect();
                if s.is_empty() {
                    s = "no matches\n".into();
                }
                if r.truncated {
                    s.push_str("[warden: matches truncated]\n");
                }
                s
            }
            Err(s) => format!("error: {}", s.message()),
        };
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: Value) -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: args,
            malformed: false,
        }
    }

    #[test]
    fn specs_come_from_one_definition_each() {
        let s = specs();
        assert_eq!(s.len(), TOOLS.len());
        let shell = s.iter().find(|t| t.name == "shell").unwrap();
        assert_eq!(shell.parameters["required"], json!(["command"]));
    }

    #[test]
    fn malformed_calls_are_caught_before_dispatch() {
        assert!(validate(&call("shell", json!({"command": "ls"}))).is_ok());
        assert!(validate(&call("shell", json!({})))
            .unwrap_err()
            .contains("missing"));
        assert!(validate(&call("shell", json!({"command": 3})))
            .unwrap_err()
            .contains("string"));
        assert!(
            validate(&call("shell", json!({"command": "ls", "sudo": true})))
                .unwrap_err()
                .contains("unknown argument")
        );
        assert!(validate(&call("rm_rf", json!({})))
            .unwrap_err()
            .contains("unknown tool"));
        let mut c = call("shell", json!("{oops"));
        c.malformed = true;
        assert!(validate(&c).is_err());
    }

    #[test]
    fn truncation_keeps_head_and_tail() {
        let s = "a".repeat(100) + &"b".repeat(100);
        let t = truncate(&s, 50);
        assert!(
            t.starts_with("aaaa")
                && t.ends_with("bbbb")
                && t.contains("150 bytes of output omitted")
        );
        assert_eq!(truncate("short", 50), "short");
    }
}
