//! Span names and attribute keys, all in one place.
//!
//! Where one exists, the name is the OpenTelemetry GenAI semantic convention's
//! (semconv 1.41, `gen_ai.*` and `error.type`); everything Warden adds is
//! under `warden.*`.

// ---- span names --------------------------------------------------------

/// The agent run (GenAI `invoke_agent` operation).
pub const SPAN_INVOKE_AGENT: &str = "invoke_agent";
/// One step of the agent loop (a model call and the tool calls it asked for).
pub const SPAN_STEP: &str = "step";
/// Prefix of a model call span: `chat {gen_ai.request.model}`.
pub const SPAN_CHAT_PREFIX: &str = "chat";
/// Prefix of a tool call span: `execute_tool {gen_ai.tool.name}`.
pub const SPAN_EXECUTE_TOOL_PREFIX: &str = "execute_tool";
/// Waiting for a user's answer to an approval request.
pub const SPAN_APPROVAL_WAIT: &str = "approval_wait";
/// Writing a checkpoint (pre or post a tool call).
pub const SPAN_CHECKPOINT_WRITE: &str = "checkpoint_write";
/// Rolling the workspace back to a checkpoint.
pub const SPAN_ROLLBACK: &str = "rollback";
/// Resuming an interrupted run.
pub const SPAN_RESUME: &str = "resume";

/// `chat {model}`.
pub fn chat_span_name(model: &str) -> String {
    format!("{SPAN_CHAT_PREFIX} {model}")
}

/// `execute_tool {tool}`.
pub fn execute_tool_span_name(tool: &str) -> String {
    format!("{SPAN_EXECUTE_TOOL_PREFIX} {tool}")
}

// ---- OpenTelemetry GenAI semantic conventions (1.41) --------------------

pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
pub const GEN_AI_RESPONSE_ID: &str = "gen_ai.response.id";
pub const GEN_AI_RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
pub const GEN_AI_TOOL_TYPE: &str = "gen_ai.tool.type";
pub const GEN_AI_CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// Opt-in only (message contents): the model's reply.
pub const GEN_AI_OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
pub const ERROR_TYPE: &str = "error.type";

/// `gen_ai.operation.name` values.
pub const OP_INVOKE_AGENT: &str = "invoke_agent";
pub const OP_CHAT: &str = "chat";
pub const OP_EXECUTE_TOOL: &str = "execute_tool";

// ---- Warden ---------------------------------------------------------------

pub const SESSION_ID: &str = "warden.session.id";
pub const RUN_ID: &str = "warden.run.id";
pub const RUN_TASK: &str = "warden.run.task";
pub const RUN_POLICY: &str = "warden.run.policy";
pub const RUN_OUTCOME: &str = "warden.run.outcome";
pub const RUN_OUTCOME_REASON: &str = "warden.run.outcome_reason";
pub const RUN_STEPS: &str = "warden.run.steps";
/// Set on a resumed run's spans: the step it resumed from.
pub const RUN_RESUMED_FROM_STEP: &str = "warden.run.resumed_from_step";
pub const USAGE_TOTAL_TOKENS: &str = "warden.usage.total_tokens";
/// Cost in micro-dollars.
pub const USAGE_COST_MICROS: &str = "warden.usage.cost_micros";
pub const STEP_ID: &str = "warden.step.id";
pub const STEP_NUMBER: &str = "warden.step.number";
pub const CHECKPOINT_PRE: &str = "warden.checkpoint.pre";
pub const CHECKPOINT_POST: &str = "warden.checkpoint.post";
pub const CHECKPOINT_ID: &str = "warden.checkpoint.id";
pub const CHECKPOINT_KIND: &str = "warden.checkpoint.kind";
pub const CHECKPOINT_ROOT_HASH: &str = "warden.checkpoint.root_hash";
pub const MODEL_LATENCY_MS: &str = "warden.model.latency_ms";
/// Tool calls the model requested in one response.
pub const MODEL_TOOL_CALLS: &str = "warden.model.tool_calls";
pub const CONTEXT_DEGRADED: &str = "warden.context.degraded";
pub const CONTEXT_DEGRADED_KIND: &str = "warden.context.degraded.kind";
pub const CONTEXT_DEGRADED_MESSAGES: &str = "warden.context.degraded.messages";
pub const CONTEXT_TOKENS_BEFORE: &str = "warden.context.tokens_before";
pub const CONTEXT_TOKENS_AFTER: &str = "warden.context.tokens_after";
pub const TIER: &str = "warden.tier";
pub const DECISION: &str = "warden.decision";
pub const RULE: &str = "warden.rule";
/// The command (redacted, clipped); its output is opt-in.
pub const COMMAND: &str = "warden.command";
pub const PATH: &str = "warden.path";
pub const REFUSED: &str = "warden.refused";
pub const REFUSAL: &str = "warden.refusal";
pub const APPROVAL_REQUEST_ID: &str = "warden.approval.request_id";
/// granted | denied | expired | cancelled
pub const APPROVAL_OUTCOME: &str = "warden.approval.outcome";
pub const APPROVAL_SCOPE: &str = "warden.approval.scope";
pub const SANDBOX_PROFILE: &str = "warden.sandbox.profile";
/// Landlock enforcement: full | partial | none.
pub const SANDBOX_LANDLOCK: &str = "warden.sandbox.landlock";
pub const EXIT_CODE: &str = "warden.exit.code";
pub const EXIT_SIGNAL: &str = "warden.exit.signal";
pub const EXIT_TIMED_OUT: &str = "warden.exit.timed_out";
pub const DURATION_MS: &str = "warden.duration_ms";
/// Bytes of (redacted) output sent back.
pub const OUTPUT_BYTES: &str = "warden.output.bytes";
pub const OUTPUT_TRUNCATED: &str = "warden.output.truncated";
pub const OUTPUT_DROPPED_BYTES: &str = "warden.output.dropped_bytes";
/// Opt-in only: the command's output (redacted, clipped).
pub const OUTPUT_STDOUT: &str = "warden.output.stdout";
pub const OUTPUT_STDERR: &str = "warden.output.stderr";
pub const REDACTIONS: &str = "warden.redactions";
pub const FILES_CHANGED: &str = "warden.files.changed";
pub const FILES_CHANGED_PATHS: &str = "warden.files.changed.paths";
pub const TOOL_IDEMPOTENT: &str = "warden.tool.idempotent";
/// none | workspace | external
pub const TOOL_SIDE_EFFECTS: &str = "warden.tool.side_effects";
pub const ROLLBACK_TARGET: &str = "warden.rollback.target";

/// `error.type` values Warden sets itself.
pub const ERROR_REFUSED: &str = "refused";
pub const ERROR_TIMEOUT: &str = "timeout";
