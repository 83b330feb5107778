//! `warden.v1.Mcp`: the tools of the MCP servers a session's policy hosts
//! ([`crate::mcp`]) over gRPC.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::approvals::approval_to_proto;
use super::{peer, redacted, status};
use crate::mcp::{call, McpError, McpHost};
use crate::proto::v1::{self as pb, mcp_server::Mcp};
use crate::redact::Redactor;
use crate::session::SessionManager;

pub struct McpService {
    mgr: Arc<SessionManager>,
    host: Arc<McpHost>,
}

impl McpService {
    /// A service with its own server host (servers stop with their session,
    /// when idle, and with the daemon).
    pub fn new(mgr: Arc<SessionManager>) -> Self {
        let host = McpHost::new(&mgr);
        McpService { mgr, host }
    }
}

/// An MCP error as a status, its message (which can carry the server's
/// stderr) redacted by the session's redactor when there is one.
fn mcp_status(e: McpError, session: Option<&Redactor>) -> Status {
    redacted(status(e.into()), session)
}

impl McpService {
    /// The redactor of `session_id` if `peer` may use that open session.
    fn session_redactor(&self, session_id: &str, peer: crate::session::Peer) -> Option<Redactor> {
        let s = self.mgr.open_session_for(session_id, peer).ok()?;
        Some(self.mgr.redactor(&s))
    }
}

#[tonic::async_trait]
impl Mcp for McpService {
    async fn list_mcp_tools(
        &self,
        req: Request<pb::ListMcpToolsRequest>,
    ) -> Result<Response<pb::ListMcpToolsResponse>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        let (tools, servers) =
            call::list_tools(&self.mgr, &self.host, peer, &r.session_id, &r.server)
                .await
                .map_err(|e| mcp_status(e, self.session_redactor(&r.session_id, peer).as_ref()))?;
        Ok(Response::new(pb::ListMcpToolsResponse {
            tools: tools
                .into_iter()
                .map(|t| pb::McpTool {
                    server: t.server,
                    name: t.name,
                    title: t.title,
                    description: t.description,
                    input_schema_json: t.input_schema_json,
                    annotations_json: t.annotations_json,
                    trust: t.trust.as_str().into(),
                    definition_hash: t.definition_hash,
                    pinned: t.pinned,
                    changed: t.changed,
                    warnings: t.warnings,
                    tier: t.tier.to_proto(),
                    decision: t.decision.to_proto(),
                })
                .collect(),
            servers: servers
                .into_iter()
                .map(|s| pb::McpServer {
                    name: s.name,
                    trust: s.trust.as_str().into(),
                    profile: s.profile.as_str().into(),
                    running: s.running,
                    error: s.error,
                })
                .collect(),
        }))
    }

    async fn call_mcp_tool(
        &self,
        req: Request<pb::CallMcpToolRequest>,
    ) -> Result<Response<pb::CallMcpToolResponse>, Status> {
        use crate::telemetry::names as n;
        let peer = peer(&req)?;
        let parent = crate::telemetry::parent_from_metadata(req.metadata());
        let r = req.into_inner();
        // One `execute_tool mcp__<server>__<tool>` span per call (the name
        // the agent loop offers the tool under), in the run's trace.
        let mut span = super::traces::tool_span(
            &self.mgr,
            peer,
            &format!("mcp__{}__{}", r.server, r.tool),
            &r.session_id,
            &r.run_id,
            &r.step_id,
            &r.tool_call_id,
            parent,
        );
        span.set("warden.mcp.server", r.server.clone())
            .set("warden.mcp.tool", r.tool.clone());
        let c = crate::mcp::McpCall {
            session_id: r.session_id,
            server: r.server,
            tool: r.tool,
            arguments_json: r.arguments_json,
            approve: r.approve,
            run_id: r.run_id,
            step_id: r.step_id,
            tool_call_id: r.tool_call_id,
        };
        let sid = c.session_id.clone();
        let o = match call::call(&self.mgr, &self.host, peer, c).await {
            Ok(o) => o,
            Err(e) => {
                let st = span.fail(mcp_status(e, self.session_redactor(&sid, peer).as_ref()));
                span.finish();
                return Err(st);
            }
        };
        if let Some(t) = o.tier {
            span.set(n::TIER, t.as_str());
        }
        if let Some(d) = o.decision {
            span.set(n::DECISION, d.as_str());
        }
        if let Some(p) = o.profile {
            span.set(n::SANDBOX_PROFILE, p.as_str());
        }
        if let Some(id) = &o.pre_checkpoint_id {
            span.set(n::CHECKPOINT_PRE, id.clone());
        }
        if let Some(id) = &o.post_checkpoint_id {
            span.set(n::CHECKPOINT_POST, id.clone());
        }
        if let Some(id) = &o.approval_request_id {
            span.set(n::APPROVAL_REQUEST_ID, id.clone());
        }
        span.set(n::REDACTIONS, o.redactions)
            .set(n::OUTPUT_TRUNCATED, o.truncated)
            .set(n::DURATION_MS, o.duration_ms)
            .set("warden.mcp.definition_changed", o.definition_changed);
        match &o.refusal {
            Some(reason) => span.refused(reason),
            None if o.is_error => span.error("tool_error", "the MCP tool returned an error result"),
            None => span.ok(),
        }
        span.finish();
        Ok(Response::new(pb::CallMcpToolResponse {
            content_json: o.content_json,
            text: o.text,
            structured_json: o.structured_json,
            is_error: o.is_error,
            tier: o.tier.map(|t| t.to_proto()).unwrap_or_default(),
            decision: o.decision.map(|d| d.to_proto()).unwrap_or_default(),
            refusal: o.refusal.unwrap_or_default(),
            approval: o.approval.as_deref().map(approval_to_proto),
            approval_request_id: o.approval_request_id.unwrap_or_default(),
            warnings: o.warnings,
            redactions: o.redactions,
            truncated: o.truncated,
            pre_checkpoint_id: o.pre_checkpoint_id.unwrap_or_default(),
            post_checkpoint_id: o.post_checkpoint_id.unwrap_or_default(),
            definition_hash: o.definition_hash,
            definition_changed: o.definition_changed,
            profile: o
                .profile
                .map(|p| p.as_str().to_string())
                .unwrap_or_default(),
            duration_ms: o.duration_ms,
        }))
    }
}
