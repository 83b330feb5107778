//! The pipeline of one MCP tool call (DESIGN.md, "The pipeline of one tool
//! call"): validate -> start the server (lazily) and list its tools -> trust
//! policy and pin -> journal `planned` -> approval (preview with the
//! server's words and the poisoning scan) -> pin -> checkpoint (pre) ->
//! audit `mcp_call_start`, journal `started` -> `tools/call` (timeout) ->
//! checkpoint (post, writable profiles) -> redaction and result cap ->
//! audit `mcp_call_end`, journal `completed`/`failed`.
//!
//! Unary like the file tools: when the policy asks and the call carries no
//! `approve`, the request is raised and the outcome carries it (refusal
//! `approval required (request ID)`); after `warden approve ID` the same call
//! (same tool definition and arguments) uses the grant.

use std::sync::Arc;

use rmcp::model::{CallToolResult, Tool};

use super::config::{ServerConfig, Trust};
use super::host::{McpHost, Running};
use super::{pin, scan, trust, McpError};
use crate::approval::{
    Actor, ApprovalRecord, CallContext, Gate, Layer, NewRecord, Preview, RequestKey,
};
use crate::checkpoint::{Checkpoint, CheckpointMeta};
use crate::policy::{Classification, Decision, Part, Tier};
use crate::redact::Redactor;
use crate::sandbox::Profile;
use crate::session::journal::{CallKey, SideEffects, ToolDecl};
use crate::session::{Peer, Session, SessionManager};

/// Largest accepted `arguments_json`, bytes.
pub const MAX_ARGUMENTS_BYTES: usize = 1 << 20;
/// Longest accepted server or tool name, bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Bytes of a result's text kept in the step journal.
const JOURNAL_TEXT_BYTES: usize = 16 * 1024;

/// One CallMcpTool request.
#[derive(Debug, Clone, Default)]
pub struct McpCall {
    pub session_id: String,
    pub server: String,
    pub tool: String,
    /// A JSON object; empty means `{}`.
    pub arguments_json: String,
    /// Grant once if the policy asks (`--yes`).
    pub approve: bool,
    pub run_id: String,
    pub step_id: String,
    pub tool_call_id: String,
}

/// How one call ended.
#[derive(Debug, Clone, Default)]
pub struct McpOutcome {
    pub tier: Option<Tier>,
    pub decision: Option<Decision>,
    /// Set when policy or approval refused the call (`denied ...`,
    /// `approval required (request ID)`, `refused: ...`).
    pub refusal: Option<String>,
    /// The request raised (or found pending) when the call was asked about.
    pub approval: Option<Box<ApprovalRecord>>,
    /// The approval request involved, if any.
    pub approval_request_id: Option<String>,
    /// Poisoning findings and the changed-definition warning.
    pub warnings: Vec<String>,
    /// The result's `content` blocks as JSON (redacted, capped).
    pub content_json: String,
    /// The text of the result's text blocks, joined by newlines (redacted,
    /// capped); other blocks are named in brackets.
    pub text: String,
    /// `structuredContent` as JSON (redacted), empty when absent.
    pub structured_json: String,
    /// The server said the call failed (MCP `isError`).
    pub is_error: bool,
    pub redactions: u32,
    /// The result was cut at the server's `max_result_bytes`.
    pub truncated: bool,
    pub pre_checkpoint_id: Option<String>,
    pub post_checkpoint_id: Option<String>,
    pub definition_hash: String,
    pub definition_changed: bool,
    pub profile: Option<Profile>,
    /// Wall-clock time of the `tools/call`, ms.
    pub duration_ms: u64,
}

/// One tool of a hosted server, as ListMcpTools shows it.
#[derive(Debug, Clone)]
pub struct McpToolInfo {
    pub server: String,
    pub trust: Trust,
    pub name: String,
    pub title: String,
    /// The server's description (redacted): its words, not Warden's.
    pub description: String,
    pub input_schema_json: String,
    /// Annotations as claimed (believed only for trusted servers).
    pub annotations_json: String,
    pub definition_hash: String,
    pub pinned: bool,
    /// Pinned at another definition: the next call asks again.
    pub changed: bool,
    pub warnings: Vec<String>,
    pub tier: Tier,
    pub decision: Decision,
}

/// One server of the session's policy, as ListMcpTools shows it.
#[derive(Debug, Clone)]
pub struct McpServerInfo {
    pub name: String,
    pub trust: Trust,
    pub profile: Profile,
    pub running: bool,
    /// Why it could not be started or listed; empty when fine.
    pub error: String,
}

fn check_name(what: &str, v: &str) -> Result<(), McpError> {
    if v.is_empty() {
        return Err(McpError::InvalidArgument(format!("{what} is required")));
    }
    if v.len() > MAX_NAME_BYTES || v.chars().any(char::is_control) {
        return Err(McpError::InvalidArgument(format!(
            "{what} {v:?} is longer than {MAX_NAME_BYTES} bytes or has control characters"
        )));
    }
    Ok(())
}

/// Validates a call (schema layer) and returns its arguments.
///
/// Errors (InvalidArgument): empty or over-long server or tool name,
/// control characters, arguments over [`MAX_ARGUMENTS_BYTES`], not JSON, or
/// not a JSON object.
pub fn validate(c: &McpCall) -> Result<serde_json::Map<String, serde_json::Value>, McpError> {
    check_name("server", &c.server)?;
    check_name("tool", &c.tool)?;
    if c.arguments_json.len() > MAX_ARGUMENTS_BYTES {
        return Err(McpError::InvalidArgument(format!(
            "arguments_json is {} bytes, over the {MAX_ARGUMENTS_BYTES}-byte limit",
            c.arguments_json.len()
        )));
    }
    if c.arguments_json.trim().is_empty() {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_str::<serde_json::Value>(&c.arguments_json) {
        Ok(serde_json::Value::Object(o)) => Ok(o),
        Ok(_) => Err(McpError::InvalidArgument(
            "arguments_json must be a JSON object".into(),
        )),
        Err(e) => Err(McpError::InvalidArgument(format!(
            "arguments_json is not JSON: {e}"
        ))),
    }
}

fn server_of<'a>(session: &'a Session, name: &str) -> Result<&'a ServerConfig, McpError> {
    session.policy.file.mcp.server(name).ok_or_else(|| {
        McpError::NotFound(format!(
            "no MCP server named {name:?} in the session's policy {:?}",
            session.policy.name
        ))
    })
}

fn tool_id(server: &str, tool: &str) -> String {
    format!("mcp:{server}/{tool}")
}

fn to_checkpoint_effects(s: SideEffects) -> crate::checkpoint::SideEffects {
    match s {
        SideEffects::None => crate::checkpoint::SideEffects::None,
        SideEffects::Workspace => crate::checkpoint::SideEffects::Workspace,
        SideEffects::External => crate::checkpoint::SideEffects::External,
    }
}

/// The warnings of a definition: poisoning findings (for every trust level)
/// and a changed pin.
fn warnings_of(id: &str, tool: &Tool, pin: Option<&pin::Pin>, hash: &str) -> Vec<String> {
    let mut w: Vec<String> = scan::scan_tool(tool)
        .iter()
        .map(|f| f.warning(id))
        .collect();
    if let Some(p) = pin.filter(|p| p.definition_hash != hash) {
        w.insert(
            0,
            format!(
                "the definition of {id} CHANGED since it was pinned at {} (possible rug pull): pinned blake3 {}, now {}",
                p.pinned_at_ms, p.definition_hash, hash
            ),
        );
    }
    w
}

/// What a person reads before deciding: the server's words marked as such,
/// the annotations as claimed, the arguments.
fn preview_text(
    cfg: &ServerConfig,
    profile: Profile,
    tool: &Tool,
    hash: &str,
    pin: Option<&pin::Pin>,
    args: &serde_json::Map<String, serde_json::Value>,
) -> String {
    let mut s = format!(
        "MCP tool {} on server {:?} ({}; sandbox profile {})\n",
        tool_id(&cfg.name, &tool.name),
        cfg.name,
        cfg.trust.as_str(),
        profile.as_str()
    );
    s.push_str(&format!(
        "definition blake3 {hash} ({})\n",
        match pin {
            None => "first use: pinned when this call runs".to_string(),
            Some(p) if p.definition_hash == hash => format!("pinned at {}", p.pinned_at_ms),
            Some(p) => format!("CHANGED; pinned was {}", p.definition_hash),
        }
    ));
    s.push_str(&format!(
        "The server's description (its words, not Warden's{}):\n",
        if cfg.trust == Trust::Trusted {
            ""
        } else {
            "; not verified"
        }
    ));
    let desc = tool.description.as_deref().unwrap_or("(none)");
    for line in desc.lines() {
        s.push_str("  | ");
        s.push_str(line);
        s.push('\n');
    }
    if let Some(a) = &tool.annotations {
        s.push_str(&format!(
            "Annotations claimed{}: {}\n",
            if cfg.trust == Trust::Trusted {
                ""
            } else {
                " (not believed: the server is not trusted)"
            },
            serde_json::to_string(a).unwrap_or_default()
        ));
    }
    s.push_str("Arguments:\n");
    s.push_str(
        &serde_json::to_string_pretty(&serde_json::Value::Object(args.clone())).unwrap_or_default(),
    );
    s.push('\n');
    s
}

/// Redacts every string in `v` in place; returns the number of findings.
fn redact_value(r: &Redactor, v: &mut serde_json::Value) -> u32 {
    match v {
        serde_json::Value::String(s) => {
            let (out, f) = r.redact(s);
            *s = out;
            f.len() as u32
        }
        serde_json::Value::Array(a) => a.iter_mut().map(|x| redact_value(r, x)).sum(),
        serde_json::Value::Object(o) => o.values_mut().map(|x| redact_value(r, x)).sum(),
        _ => 0,
    }
}

/// Cuts `s` to at most `max` bytes at a char boundary.
fn cut(s: &mut String, max: usize) -> bool {
    if s.len() <= max {
        return false;
    }
    let mut i = max;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    s.truncate(i);
    true
}

/// The redacted, capped rendering of a result: (content JSON, text,
/// structured JSON, redactions, truncated).
fn render(
    r: &CallToolResult,
    redactor: &Redactor,
    max: usize,
) -> (String, String, String, u32, bool) {
    let mut content = serde_json::to_value(&r.content).unwrap_or(serde_json::Value::Null);
    let mut redactions = redact_value(redactor, &mut content);
    let mut text = String::new();
    if let serde_json::Value::Array(blocks) = &content {
        for b in blocks {
            if !text.is_empty() {
                text.push('\n');
            }
            match b.get("type").and_then(|t| t.as_str()) {
                Some("text") => text.push_str(b.get("text").and_then(|t| t.as_str()).unwrap_or("")),
                Some(kind) => {
                    let mime = b.get("mimeType").and_then(|m| m.as_str()).unwrap_or("");
                    text.push_str(&format!("[{kind} {mime}]"));
                }
                None => text.push_str("[content]"),
            }
        }
    }
    let mut structured = match &r.structured_content {
        Some(v) => {
            let mut v = v.clone();
            redactions += redact_value(redactor, &mut v);
            v.to_string()
        }
        None => String::new(),
    };
    let mut content_json = content.to_string();
    let mut truncated = false;
    if cut(&mut text, max) {
        truncated = true;
        text.push_str(&format!("\n[warden: result truncated at {max} bytes]"));
    }
    if content_json.len() > max {
        truncated = true;
        content_json = serde_json::json!([{"type": "text", "text": text}]).to_string();
    }
    if structured.len() > max {
        truncated = true;
        structured.clear();
    }
    (content_json, text, structured, redactions, truncated)
}

/// Lists the tools of every server of the session's policy (or only
/// `server`), starting servers as needed. A server that cannot be started
/// or listed is reported in its [`McpServerInfo`] and contributes no tools.
///
/// Errors: NotFound (session; `server` not in the policy), PermissionDenied,
/// FailedPrecondition (closed session).
pub async fn list_tools(
    mgr: &Arc<SessionManager>,
    host: &Arc<McpHost>,
    peer: Peer,
    session_id: &str,
    server: &str,
) -> Result<(Vec<McpToolInfo>, Vec<McpServerInfo>), McpError> {
    let session = mgr.open_session_for(session_id, peer)?;
    let configs: Vec<ServerConfig> = if server.is_empty() {
        session.policy.file.mcp.servers.clone()
    } else {
        vec![server_of(&session, server)?.clone()]
    };
    let redactor = mgr.redactor(&session);
    let mut tools = Vec::new();
    let mut servers = Vec::new();
    // Servers start and list in parallel: one slow or broken server costs
    // its own timeout, not the sum of all of them.
    let mut set = tokio::task::JoinSet::new();
    for (i, cfg) in configs.iter().enumerate() {
        let (host, session, cfg) = (host.clone(), session.clone(), cfg.clone());
        set.spawn(async move {
            let r = async {
                let running = host.get(&session, &cfg).await?;
                running.list_tools().await
            }
            .await;
            (i, r)
        });
    }
    let mut results: Vec<Option<Result<Vec<Tool>, McpError>>> =
        configs.iter().map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        let (i, r) =
            joined.map_err(|e| McpError::Unavailable(format!("listing MCP tools: {e}")))?;
        results[i] = Some(r);
    }
    for (cfg, listed) in configs.into_iter().zip(results) {
        let profile = super::host::profile_for(&cfg);
        let Some(listed) = listed else { continue };
        let list = match listed {
            Ok(l) => l,
            Err(e) => {
                servers.push(McpServerInfo {
                    name: cfg.name.clone(),
                    trust: cfg.trust,
                    profile,
                    running: false,
                    error: redactor.redact(&e.to_string()).0,
                });
                continue;
            }
        };
        servers.push(McpServerInfo {
            name: cfg.name.clone(),
            trust: cfg.trust,
            profile,
            running: true,
            error: String::new(),
        });
        let identity = cfg.identity();
        let mut refused = Vec::new();
        for t in list {
            if name_has_secret(&redactor, &t.name) {
                refused.push(redactor.redact(&t.name).0);
                continue;
            }
            let hash = pin::definition_hash(&t);
            let pinned = pin::get(mgr.db(), &identity, &t.name)
                .map_err(|e| McpError::Unavailable(format!("pin store: {e}")))?;
            let changed = pinned.as_ref().is_some_and(|p| p.definition_hash != hash);
            let v = trust::decide(&cfg, &t, &session.policy.file.tiers, changed);
            let id = tool_id(&cfg.name, &t.name);
            tools.push(McpToolInfo {
                server: cfg.name.clone(),
                trust: cfg.trust,
                name: t.name.to_string(),
                title: redactor.redact(t.title.as_deref().unwrap_or("")).0,
                description: redactor.redact(t.description.as_deref().unwrap_or("")).0,
                input_schema_json: redactor
                    .redact(&serde_json::Value::Object((*t.input_schema).clone()).to_string())
                    .0,
                annotations_json: t
                    .annotations
                    .as_ref()
                    .map(|a| {
                        redactor
                            .redact(&serde_json::to_string(a).unwrap_or_default())
                            .0
                    })
                    .unwrap_or_default(),
                warnings: warnings_of(&id, &t, pinned.as_ref(), &hash)
                    .into_iter()
                    .map(|w| redactor.redact(&w).0)
                    .collect(),
                definition_hash: hash,
                pinned: pinned.is_some(),
                changed,
                tier: v.tier,
                decision: v.decision,
            });
        }
        if !refused.is_empty() {
            tracing::warn!(server = %cfg.name, tools = ?refused, "MCP tools refused: their names contain secrets");
            if let Some(s) = servers.last_mut() {
                s.error = format!(
                    "tools refused (not offered), their names contain secrets: {}",
                    refused.join(", ")
                );
            }
        }
    }
    Ok((tools, servers))
}

/// A tool name the redactor finds a secret in (or cannot scan) is never
/// offered nor called: the name itself would carry the secret to the model.
fn name_has_secret(redactor: &Redactor, name: &str) -> bool {
    redactor
        .find(name.as_bytes())
        .map_or(true, |f| !f.is_empty())
}

/// State shared by the steps of one call.
struct Ctx<'a> {
    mgr: &'a Arc<SessionManager>,
    session: &'a Session,
    call: &'a McpCall,
    key: Option<CallKey>,
    actor: Actor,
}

impl Ctx<'_> {
    fn journal_end(
        &self,
        ok: bool,
        result: serde_json::Value,
        post: Option<&str>,
    ) -> Result<(), McpError> {
        if let Some(k) = &self.key {
            self.mgr.journal_finish(k, ok, &result, post)?;
        }
        Ok(())
    }

    fn audit(&self, action: &str, detail: serde_json::Value) -> Result<(), McpError> {
        self.mgr
            .audit()
            .append(NewRecord {
                session_id: &self.session.id,
                run_id: &self.call.run_id,
                step_id: &self.call.step_id,
                actor: &self.actor,
                action,
                detail,
                layer: Layer::Daemon,
            })
            .map(|_| ())
            .map_err(|e| McpError::Unavailable(format!("audit log: {e}")))
    }

    /// Ends a call that did not run: journal `failed` with the refusal.
    fn refuse(&self, mut out: McpOutcome, refusal: String) -> Result<McpOutcome, McpError> {
        self.journal_end(false, serde_json::json!({"refused": refusal}), None)?;
        out.refusal = Some(refusal);
        Ok(out)
    }
}

/// Runs one MCP tool call through the pipeline (module docs).
///
/// Errors: InvalidArgument (schema layer, recorded as `reject`), NotFound
/// (session, server, tool), PermissionDenied, FailedPrecondition (closed
/// session, a (run, tool call) already journaled, a url server),
/// Unavailable (the server cannot start, died, timed out; the audit log or
/// pin store cannot be written). A refusal by policy or approval is not an
/// error: the outcome carries it.
pub async fn call(
    mgr: &Arc<SessionManager>,
    host: &McpHost,
    peer: Peer,
    c: McpCall,
) -> Result<McpOutcome, McpError> {
    let args = match validate(&c) {
        Ok(a) => a,
        Err(e) => {
            mgr.record_rejection(
                peer,
                &c.session_id,
                &c.run_id,
                &c.step_id,
                "mcp",
                &e.to_string(),
            );
            return Err(e);
        }
    };
    let session = mgr.open_session_for(&c.session_id, peer)?;
    let cfg = server_of(&session, &c.server)?.clone();
    let running: Arc<Running> = host.get(&session, &cfg).await?;
    let tools = running.list_tools().await?;
    let Some(tool) = tools
        .into_iter()
        .find(|t| t.name == c.tool && !name_has_secret(&mgr.redactor(&session), &t.name))
    else {
        return Err(McpError::NotFound(format!(
            "MCP server {:?} has no tool {:?}",
            c.server, c.tool
        )));
    };
    let id = tool_id(&cfg.name, &tool.name);
    let def_json = pin::definition_json(&tool);
    let hash = pin::definition_hash(&tool);
    let identity = cfg.identity();
    let pin_err = |e: rusqlite::Error| McpError::Unavailable(format!("pin store: {e}"));
    let pinned = pin::get(mgr.db(), &identity, &tool.name).map_err(pin_err)?;
    let changed = pinned.as_ref().is_some_and(|p| p.definition_hash != hash);
    let verdict = trust::decide(&cfg, &tool, &session.policy.file.tiers, changed);
    let profile = running.profile;
    let redactor = mgr.redactor(&session);
    let warnings: Vec<String> = warnings_of(&id, &tool, pinned.as_ref(), &hash)
        .into_iter()
        .map(|w| redactor.redact(&w).0)
        .collect();
    let mut out = McpOutcome {
        tier: Some(verdict.tier),
        decision: Some(verdict.decision),
        warnings: warnings.clone(),
        definition_hash: hash.clone(),
        definition_changed: changed,
        profile: Some(profile),
        ..Default::default()
    };
    let cx = Ctx {
        mgr,
        session: &session,
        call: &c,
        key: CallKey::of(&c.run_id, &c.tool_call_id),
        actor: Actor::Peer(peer.uid),
    };
    let args_canon = pin::canonical_json(&serde_json::Value::Object(args.clone()));
    let args_shown = redactor.redact(&args_canon).0;

    // The step journal: `planned` before anything runs.
    let _in_flight = match &cx.key {
        Some(k) => {
            let decl: &ToolDecl = &verdict.decl;
            let a = serde_json::json!({"server": c.server, "tool": c.tool, "arguments": args_shown, "definition_hash": hash});
            Some(mgr.journal_plan(
                k,
                &session.id,
                &c.step_id,
                &id,
                &a.to_string(),
                verdict.tier.as_str(),
                decl,
            )?)
        }
        None => None,
    };

    // Approval: the request is bound to the tool, its definition hash and
    // the exact arguments; a session grant to the tool at this definition.
    let pinned_argv0 = format!("{id}@{hash}");
    let classification = Classification {
        command: format!("{pinned_argv0} {args_shown}"),
        tier: verdict.tier,
        decision: verdict.decision,
        rule: verdict.rule.clone(),
        reasons: verdict.reasons.clone(),
        parts: vec![Part {
            argv: vec![pinned_argv0.clone()],
            tier: verdict.tier,
            reasons: verdict.reasons.clone(),
        }],
        writes: vec![],
        hosts: vec![],
        install: None,
        justification: None,
    };
    let key = RequestKey {
        tool: id.clone(),
        command: format!("{pinned_argv0} {args_canon}"),
        cwd: String::new(),
        tier: verdict.tier,
        policy_hash: session.policy.hash.clone(),
    };
    let mut preview = Preview::new(
        key,
        classification,
        redactor
            .redact(&preview_text(
                &cfg,
                profile,
                &tool,
                &hash,
                pinned.as_ref(),
                &args,
            ))
            .0,
    );
    preview.summary = redactor.redact(&preview.summary).0;
    preview.warnings.extend(warnings.iter().cloned());
    let ctx = CallContext {
        session_id: &session.id,
        run_id: &c.run_id,
        step_id: &c.step_id,
        tool_call_id: &c.tool_call_id,
        actor: &cx.actor,
        redactor: Some(&redactor),
    };
    let gate = match mgr.approvals().decide(&ctx, &preview, c.approve) {
        Ok(g) => g,
        Err(e) => {
            let e: crate::session::SessionError = e.into();
            cx.journal_end(false, serde_json::json!({"error": e.to_string()}), None)?;
            return Err(e.into());
        }
    };
    out.approval_request_id = gate.approval_id().map(str::to_string);
    if let Some(refusal) = gate.refusal() {
        if let Gate::Ask(req) = gate {
            // Nothing was decided yet: the call stays planned (calling
            // again, or resuming the run, asks again).
            if let Some(k) = &cx.key {
                mgr.journal_unanswered(k, &serde_json::json!({"refused": refusal}))?;
            }
            out.approval = Some(req);
            out.refusal = Some(refusal);
            return Ok(out);
        }
        return cx.refuse(out, refusal);
    }

    // The definition is pinned when a call of it is first let run (and
    // re-pinned once a changed definition was approved).
    if pinned.as_ref().map(|p| p.definition_hash.as_str()) != Some(hash.as_str()) {
        pin::set(
            mgr.db(),
            &identity,
            &cfg.name,
            &tool.name,
            &hash,
            &def_json,
            &session.id,
            out.approval_request_id.as_deref().unwrap_or(""),
        )
        .map_err(pin_err)?;
    }

    // Checkpoint (pre): a call whose pre-checkpoint fails never runs.
    let meta = CheckpointMeta {
        session_id: session.id.clone(),
        run_id: c.run_id.clone(),
        step_id: c.step_id.clone(),
        tool_call_id: c.tool_call_id.clone(),
        tool: id.clone(),
        arguments_json: args_shown.clone(),
        tier: Some(verdict.tier),
        decision: Some(verdict.decision),
        side_effects: to_checkpoint_effects(verdict.decl.side_effects),
        compensation: verdict.decl.compensation.clone(),
        approval_ids: out.approval_request_id.iter().cloned().collect(),
        ..Default::default()
    };
    // One writer per workspace from the pre-checkpoint through the
    // nested-git quarantine, as for exec (a trusted server writes the
    // workspace; what it does between calls is not covered).
    let step_lock = mgr.checkpoints().step_lock(&session.workspace);
    let _one_writer = step_lock.lock().await;
    let pre: Option<Checkpoint> = match mgr.checkpoint_step(&session, None, &meta).await {
        Ok(p) => p,
        Err(e) => {
            let msg =
                format!("refused: the pre-checkpoint failed, so the tool was not called: {e}");
            return cx.refuse(out, msg);
        }
    };
    out.pre_checkpoint_id = pre.as_ref().map(|p| p.id.clone());

    // Run, once `mcp_call_start` is durable.
    let started_rec = cx.audit(
        super::ACTION_CALL_START,
        serde_json::json!({
            "tool": id,
            "server": cfg.name,
            "trust": cfg.trust.as_str(),
            "profile": profile.as_str(),
            "tier": verdict.tier,
            "definition_hash": hash,
            "arguments": args_shown,
            "approval_id": out.approval_request_id,
        }),
    );
    if let Err(e) = started_rec {
        cx.journal_end(false, serde_json::json!({"error": e.to_string()}), None)?;
        return Err(e);
    }
    if let Some(k) = &cx.key {
        mgr.journal_start(k, out.pre_checkpoint_id.as_deref())?;
    }
    let started = std::time::Instant::now();
    let result = running.call_tool(&c.tool, args).await;
    out.duration_ms = started.elapsed().as_millis() as u64;

    // Checkpoint (post): only a server that can write the workspace can
    // have changed it.
    let post = match (&pre, profile) {
        (Some(pre), p) if p != Profile::SafeRead => {
            match mgr.checkpoint_step(&session, Some(&pre.id), &meta).await {
                Ok(cp) => cp,
                Err(e) => {
                    tracing::error!(session = %session.id, error = %e, "post-checkpoint failed");
                    None
                }
            }
        }
        _ => None,
    };
    out.post_checkpoint_id = post.as_ref().map(|p| p.id.clone());
    // Protected paths that did not exist stay absent (as for exec).
    let removed =
        crate::session::exec::remove_created(&session.workspace, &running.absent_protected);
    if !removed.is_empty() {
        tracing::warn!(session = %session.id, server = %cfg.name, ?removed, "removed protected paths the MCP server created");
        out.warnings.push(format!(
            "removed {} that the server created: protected paths stay absent",
            removed.join(", ")
        ));
    }

    // Nested git repositories it planted are quarantined (as for exec).
    let before = running
        .nested_git
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut quarantined = Vec::new();
    if let Some(before) = before {
        let c = crate::session::nested_git::check_after(session.workspace.clone(), before).await;
        if let Some(n) = c.note("the server") {
            out.warnings.extend(n.lines().map(str::to_string));
        }
        quarantined = c.done.clone();
        *running.nested_git.lock().unwrap_or_else(|p| p.into_inner()) = Some(c.after);
    }

    let end = match &result {
        Ok(r) => {
            let (content_json, text, structured, redactions, truncated) =
                render(r, &redactor, cfg.max_result_bytes as usize);
            out.content_json = content_json;
            out.text = text;
            out.structured_json = structured;
            out.redactions = redactions;
            out.truncated = truncated;
            out.is_error = r.is_error == Some(true);
            serde_json::json!({
                "is_error": out.is_error,
                "duration_ms": out.duration_ms,
                "redactions": out.redactions,
                "truncated": out.truncated,
                "result_bytes": out.content_json.len(),
                "nested_git_quarantined": quarantined,
            })
        }
        Err(e) => {
            serde_json::json!({"error": redactor.redact(&e.to_string()).0, "duration_ms": out.duration_ms, "nested_git_quarantined": quarantined})
        }
    };
    let audited = cx.audit(super::ACTION_CALL_END, end);
    let (ok, jr) = match &result {
        Ok(_) => {
            let mut head = out.text.clone();
            cut(&mut head, JOURNAL_TEXT_BYTES);
            (
                !out.is_error,
                serde_json::json!({"is_error": out.is_error, "text": head, "truncated": out.truncated}),
            )
        }
        Err(e) => (
            false,
            serde_json::json!({"error": redactor.redact(&e.to_string()).0}),
        ),
    };
    cx.journal_end(ok, jr, out.post_checkpoint_id.as_deref())?;
    result?;
    audited?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(args: &str) -> McpCall {
        McpCall {
            session_id: "s".into(),
            server: "notes".into(),
            tool: "write_note".into(),
            arguments_json: args.into(),
            ..Default::default()
        }
    }

    #[test]
    fn bad_calls_are_invalid_arguments() {
        for (c, needle) in [
            (
                McpCall {
                    server: String::new(),
                    ..call("{}")
                },
                "server is required",
            ),
            (
                McpCall {
                    tool: String::new(),
                    ..call("{}")
                },
                "tool is required",
            ),
            (
                McpCall {
                    tool: "a\nb".into(),
                    ..call("{}")
                },
                "control",
            ),
            (call("[1]"), "object"),
            (call("{"), "not JSON"),
            (
                call(&format!(
                    "{{\"a\":\"{}\"}}",
                    "x".repeat(MAX_ARGUMENTS_BYTES)
                )),
                "limit",
            ),
        ] {
            match validate(&c) {
                Err(McpError::InvalidArgument(m)) => assert!(m.contains(needle), "{m}"),
                other => panic!("{c:?}: {other:?}"),
            }
        }
        assert!(validate(&call("")).unwrap().is_empty());
        assert_eq!(validate(&call("{\"a\":1}")).unwrap()["a"], 1);
    }

    #[test]
    fn results_are_redacted_and_capped() {
        let redactor = Redactor::for_session_id(&Default::default(), "s1");
        let key = "AKIAQWERTYUIOPASDFGH";
        let r = CallToolResult::success(vec![
            rmcp::model::ContentBlock::text(format!("key {key} end")),
            rmcp::model::ContentBlock::text("x".repeat(5000)),
        ]);
        let (json, text, _, n, truncated) = render(&r, &redactor, 1 << 20);
        assert!(!json.contains(key) && !text.contains(key), "{text}");
        assert!(n >= 1);
        assert!(!truncated);
        let (json, text, _, _, truncated) = render(&r, &redactor, 1000);
        assert!(truncated);
        assert!(text.contains("truncated at 1000 bytes"));
        assert!(json.len() < 1300, "{}", json.len());
        assert!(!json.contains(key));
    }
}
