//! `warden mcp-serve [--workspace DIR] [--policy NAME] [--approve no|yes]`:
//! Warden as an MCP server over stdio (Model Context Protocol, transport
//! "stdio" of the MCP specification), built on the official Rust SDK `rmcp`.
//!
//! Standard output carries only JSON-RPC messages; every log line goes to
//! standard error. The server offers the agent's tools (`shell`, `read_file`,
//! `write_file`, `apply_patch`, `list_dir`, `grep`, defined once in
//! [`crate::agent::tools`]) and runs each call through the daemon in one
//! session on the workspace: sandbox, policy, approvals, checkpoints and
//! audit are the daemon's, exactly as for `warden run`.
//!
//! Approvals (MCP specification 2025-06-18, "Elicitation"): when the
//! connected client declared the `elicitation` capability (form mode) at
//! initialisation, a call the policy asks about sends the client an
//! `elicitation/create` request whose message is the approval preview (tool,
//! command, tier, reasons, warnings) and whose schema is one required
//! boolean, `approve`. Only `accept` with `approve: true` grants the request
//! (once); `decline`, `cancel`, `approve: false`, malformed content, a
//! transport error or no answer before the request expires refuse it, and
//! the call returns a tool error (`isError: true`) naming the refusal. A
//! client without the capability gets that refusal without being asked,
//! unless `--approve yes` grants every ask once. A deny is never asked:
//! denied calls are refused before any elicitation.
//!
//! Exit codes: 0 when the client closed the connection, 125 (Warden failed)
//! when the daemon cannot be reached, the session cannot be opened or the
//! transport fails.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitationAction, ElicitationSchema, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{ElicitationMode, RequestContext};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, ServiceExt};

use super::{connect, say, GlobalArgs, EXIT_WARDEN};
use crate::agent::approver::{self, Approver, Verdict};
use crate::agent::provider::ToolCall;
use crate::agent::tools;
use crate::Client;

/// How approval requests are answered (no terminal: standard input carries
/// the protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum McpApprove {
    /// Ask the MCP client's user by elicitation when the client supports
    /// it; otherwise refuse, and the reason reaches the client as a tool
    /// error.
    No,
    /// Grant every ask once (a deny stays a deny).
    Yes,
}

#[derive(Debug, Clone, clap::Args)]
pub struct McpServeArgs {
    /// Workspace root [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Policy name or file [default: the daemon's].
    #[arg(long, value_name = "NAME|FILE")]
    pub policy: Option<String>,
    /// How approval requests are answered.
    #[arg(long, value_enum, default_value = "no")]
    pub approve: McpApprove,
    /// Most bytes of one tool result returned to the MCP client (longer
    /// output keeps its head and tail around a marker).
    #[arg(long, default_value_t = 64 * 1024, value_parser = clap::value_parser!(u64).range(1024..=16 * 1024 * 1024))]
    pub max_output: u64,
}

/// The MCP server: one daemon session, the agent's tools.
struct WardenMcp {
    client: Client,
    session_id: String,
    /// `Some` with `--approve yes`; `None`: elicitation where the client
    /// supports it, else refusal.
    approver: Option<Arc<dyn Approver>>,
    budget_bytes: usize,
    /// Numbers the calls of this connection (`mcp-N` step and call ids).
    calls: AtomicU64,
}

/// The MCP tool list, from the agent's single tool definitions.
fn mcp_tools() -> Vec<Tool> {
    tools::specs()
        .into_iter()
        .map(|s| {
            let schema = match s.parameters {
                serde_json::Value::Object(o) => o,
                _ => serde_json::Map::new(),
            };
            Tool::new(s.name, s.description, schema)
        })
        .collect()
}

impl WardenMcp {
    /// Runs one call through the daemon; refusals and malformed calls come
    /// back as tool errors with the reason.
    async fn call(
        &self,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        peer: &Peer<RoleServer>,
    ) -> CallToolResult {
        let approver: Arc<dyn Approver> = match &self.approver {
            Some(a) => a.clone(),
            None if peer
                .supported_elicitation_modes()
                .contains(&ElicitationMode::Form) =>
            {
                Arc::new(Elicit { peer: peer.clone() })
            }
            None => Arc::new(NoElicitation),
        };
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let call = ToolCall {
            id: format!("mcp-{n}"),
            name: name.to_string(),
            arguments: serde_json::Value::Object(arguments),
            malformed: false,
        };
        let dispatcher = tools::Dispatcher {
            trace: None,
            client: &self.client,
            session_id: self.session_id.clone(),
            // No run record: MCP calls are plain session calls (checkpointed
            // and audited by the daemon, not journaled as an agent run).
            run_id: String::new(),
            approver: approver.as_ref(),
            budget_bytes: self.budget_bytes,
        };
        let out = dispatcher.dispatch(&call.id, &call).await;
        tracing::info!(
            tool = name,
            tier = out.tier.as_deref().unwrap_or("-"),
            decision = out.decision.as_deref().unwrap_or("-"),
            refused = out.refused,
            exit_code = ?out.exit_code,
            duration_ms = out.duration_ms,
            "mcp call"
        );
        let failed = out.refused || out.malformed || out.text.starts_with("error:");
        let content = vec![ContentBlock::text(out.text)];
        if failed {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        }
    }
}

impl ServerHandler for WardenMcp {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = Implementation::new("warden", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(crate::agent::SYSTEM_PROMPT.to_string());
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(mcp_tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // An unknown tool is a protocol error (JSON-RPC -32602), as the MCP
        // specification asks; bad arguments of a known tool are tool errors.
        if !tools::specs().iter().any(|s| s.name == request.name) {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {:?}", request.name),
                None,
            ));
        }
        let args = request.arguments.unwrap_or_default();
        Ok(self.call(&request.name, args, &context.peer).await.into())
    }
}

/// How long an elicitation may wait for the user when the approval request
/// carries no expiry (ms).
const ELICIT_DEFAULT_WAIT_MS: i64 = 5 * 60 * 1000;

/// Refuses every ask: the MCP client cannot be asked.
struct NoElicitation;
#[tonic::async_trait]
impl Approver for NoElicitation {
    async fn decide(&self, _: &crate::pb::ApprovalRequest) -> Verdict {
        Verdict::Refuse(
            "approval required, and the MCP client declared no elicitation capability to ask \
             its user with (warden mcp-serve --approve yes grants asks)"
                .into(),
        )
    }
}

/// Asks the MCP client's user by form elicitation (MCP 2025-06-18,
/// `elicitation/create`): grants once only on `accept` with
/// `{"approve": true}`; everything else refuses with the reason.
struct Elicit {
    peer: Peer<RoleServer>,
}

/// The elicitation schema: one required boolean `approve`.
fn approve_schema() -> Result<ElicitationSchema, &'static str> {
    ElicitationSchema::builder()
        .required_bool_with("approve", |b| {
            b.title("Approve")
                .description("true runs this call once; false refuses it")
        })
        .build()
}

#[tonic::async_trait]
impl Approver for Elicit {
    async fn decide(&self, req: &crate::pb::ApprovalRequest) -> Verdict {
        let schema = match approve_schema() {
            Ok(s) => s,
            Err(e) => return Verdict::Refuse(format!("cannot build the elicitation schema: {e}")),
        };
        let wait_ms = if req.expires_at_ms > 0 {
            req.expires_at_ms - now_ms()
        } else {
            ELICIT_DEFAULT_WAIT_MS
        };
        if wait_ms <= 0 {
            return Verdict::Refuse("the approval request expired before it could be asked".into());
        }
        let message = format!(
            "Warden: approval required\n{}Approve this call once?",
            approver::render_preview(req)
        );
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: schema,
        };
        let timeout = std::time::Duration::from_millis(wait_ms as u64);
        match self
            .peer
            .create_elicitation_with_timeout(params, Some(timeout))
            .await
        {
            Ok(r) => match r.action {
                ElicitationAction::Accept => {
                    match r.content.as_ref().and_then(|c| c.get("approve")) {
                        Some(serde_json::Value::Bool(true)) => Verdict::Once,
                        Some(serde_json::Value::Bool(false)) => {
                            Verdict::Refuse("the MCP client's user did not approve".into())
                        }
                        _ => Verdict::Refuse(
                            "the MCP client's answer had no boolean \"approve\"".into(),
                        ),
                    }
                }
                ElicitationAction::Decline => {
                    Verdict::Refuse("the MCP client's user declined".into())
                }
                ElicitationAction::Cancel => {
                    Verdict::Refuse("the MCP client's user cancelled".into())
                }
                #[allow(unreachable_patterns)]
                _ => Verdict::Refuse("the MCP client answered with an unknown action".into()),
            },
            Err(e) => Verdict::Refuse(format!("the elicitation failed: {e}")),
        }
    }
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Sends log lines to standard error (standard output is the protocol's);
/// level from `WARDEN_LOG` [default: info, rmcp at warn].
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WARDEN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

pub async fn run(args: McpServeArgs, global: &GlobalArgs) -> i32 {
    init_logging();
    let client = match connect(global).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let ws = args.workspace.clone().unwrap_or_else(|| PathBuf::from("."));
    let session = match client.create_session(&ws, args.policy.as_deref()).await {
        Ok(s) => s,
        Err(e) => {
            say(format!("cannot open a session on {}: {e}", ws.display()));
            return EXIT_WARDEN;
        }
    };
    let approver: Option<Arc<dyn Approver>> = match args.approve {
        McpApprove::No => None,
        McpApprove::Yes => Some(Arc::new(approver::Yes)),
    };
    tracing::info!(session = %session.id, workspace = %ws.display(), "mcp-serve: serving on stdio");
    let server = WardenMcp {
        client: client.clone(),
        session_id: session.id.clone(),
        approver,
        budget_bytes: args.max_output as usize,
        calls: AtomicU64::new(0),
    };
    let code = match server.serve(rmcp::transport::stdio()).await {
        Ok(running) => match running.waiting().await {
            Ok(reason) => {
                tracing::info!(?reason, "mcp-serve: connection closed");
                0
            }
            Err(e) => {
                say(format!("the MCP service failed: {e}"));
                EXIT_WARDEN
            }
        },
        Err(e) => {
            say(format!("MCP initialisation failed: {e}"));
            EXIT_WARDEN
        }
    };
    if let Err(e) = client.close_session(&session.id).await {
        tracing::warn!("close session {}: {e}", session.id);
    }
    code
}
