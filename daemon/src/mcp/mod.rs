//! Hosting MCP servers as tools, with server trust levels (issue 13).
//!
//! A session's policy lists MCP servers (`[[mcp.servers]]`, [`config`]).
//! The daemon starts a stdio server inside the sandbox on first use
//! ([`host`]), lists its tools and runs calls of them through the same
//! pipeline as every other tool ([`call`]): validation, the trust policy
//! ([`trust`]) and approvals with a preview (the server's own words, a
//! tool-poisoning scan: [`scan`]), the definition pin ([`pin`]: a changed
//! definition asks again), the step journal, pre/post checkpoints, the
//! audit log, a result cap and redaction.
//!
//! Annotations (`readOnlyHint`, `idempotentHint`, ...) are believed only
//! from `trusted` servers; verified and untrusted servers see the workspace
//! read-only, so per-call checkpoints stay true.

pub mod call;
pub mod config;
pub mod host;
pub mod pin;
pub mod scan;
pub mod trust;

pub use call::{McpCall, McpOutcome, McpToolInfo};
pub use config::{McpSettings, ServerConfig, Trust};
pub use host::McpHost;
pub use pin::MCP_MIGRATIONS;

/// Audit action recorded (durably) before a tool call is sent to a server.
pub const ACTION_CALL_START: &str = "mcp_call_start";
/// Audit action recorded after a tool call ended (or failed).
pub const ACTION_CALL_END: &str = "mcp_call_end";

/// Errors of hosting MCP servers and calling their tools. The gRPC layer
/// maps them: `InvalidArgument` -> INVALID_ARGUMENT; `NotFound` ->
/// NOT_FOUND; `Unsupported` -> FAILED_PRECONDITION; `Start`, `Server`,
/// `Timeout`, `Unavailable` -> UNAVAILABLE; `Session` as the session's.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    /// A server kind this daemon does not host (streamable HTTP).
    #[error("{0}")]
    Unsupported(String),
    #[error("MCP server {server:?} could not start: {message}")]
    Start { server: String, message: String },
    #[error("MCP server {server:?}: {message}")]
    Server { server: String, message: String },
    #[error("MCP server {server:?}: {what} took longer than {ms} ms (server stopped)")]
    Timeout {
        server: String,
        what: String,
        ms: u64,
    },
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Session(#[from] crate::session::SessionError),
}

impl From<McpError> for crate::session::SessionError {
    fn from(e: McpError) -> Self {
        use crate::session::SessionError as S;
        match e {
            McpError::InvalidArgument(m) => S::InvalidArgument(m),
            McpError::NotFound(m) => S::NotFound(m),
            McpError::Unsupported(m) => S::FailedPrecondition(m),
            McpError::Session(s) => s,
            e @ (McpError::Start { .. }
            | McpError::Server { .. }
            | McpError::Timeout { .. }
            | McpError::Unavailable(_)) => S::Unavailable(e.to_string()),
        }
    }
}
