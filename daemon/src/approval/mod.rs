//! Approval requests, grants (scope, expiry, single use) and the audit log.
//!
//! Three layers decide a tool call, distinct in code, errors and audit
//! ([`Layer`]): the **schema** layer (argument validation in
//! `crate::session::exec::validate`, gRPC `INVALID_ARGUMENT`, never reaches
//! policy; recorded by [`Approvals::record_rejection`]), the **policy** layer
//! (`crate::policy`: allow / ask / deny) and the **user** layer (approval
//! requests and grants, [`Approvals`]). [`Approvals::decide`] combines the
//! policy's decision with the user's grants into a [`Gate`].
//!
//! Approvals are durable facts, not UI events: every request, grant, denial,
//! expiry and use is a row in the `approvals` table committed together with
//! its record in the hash-chained [`AuditLog`], so a denial still refuses the
//! same request after a restart and a once-grant is used exactly once.

mod audit;
mod layer;
mod preview;
mod scope;
mod store;

pub use audit::{
    actions, verify_chain, AuditError, AuditLog, AuditRecord, BreakKind, Head, NewRecord,
    VerifyReport, AUDIT_COLUMNS, GENESIS_HASH, HEAD_FILE,
};
pub use layer::{Actor, Layer};
pub use preview::{Preview, RequestKey};
pub use scope::{covering, suggest_prefix, validate_prefix, PrefixError, SessionGrant};
pub use store::{
    Answer, ApprovalConfig, ApprovalRecord, ApprovalState, Approvals, CallContext, Gate, Scope,
    DEFAULT_EXPIRY,
};

use crate::state::Migrations;

/// The `approval` module's tables: version 1 `audit_log` (append-only,
/// hash-chained), version 2 `approvals` (requests and grants).
pub const APPROVAL_MIGRATIONS: Migrations = Migrations {
    module: "approval",
    steps: &[audit::AUDIT_SCHEMA_V1, store::APPROVALS_SCHEMA_V1],
};

/// BLAKE3 hex of a domain `tag`, the `fixed` byte strings as they are, and
/// each of `fields` prefixed with its length (u64 little endian), so no two
/// distinct field lists share an encoding.
fn hash_fields(tag: &[u8], fixed: &[&[u8]], fields: &[&str]) -> String {
    let mut h = blake3::Hasher::new();
    h.update(tag);
    for f in fixed {
        h.update(f);
    }
    for s in fields {
        h.update(&(s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    }
    h.finalize().to_hex().to_string()
}

/// Errors of approvals and the audit log. The gRPC layer maps them:
/// `NotFound` -> NOT_FOUND; `Expired`, `AlreadyResolved`, `NotGranted` ->
/// FAILED_PRECONDITION; `Prefix`, `NoPrefix` -> INVALID_ARGUMENT;
/// `Audit`, `Sql` -> INTERNAL.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error("approval request {0} not found")]
    NotFound(String),
    #[error("approval request {id} expired")]
    Expired { id: String },
    #[error("approval request {id} is already {state}")]
    AlreadyResolved { id: String, state: ApprovalState },
    #[error("approval request {id} is not an unused grant (it is {state})")]
    NotGranted { id: String, state: ApprovalState },
    #[error(transparent)]
    Prefix(#[from] PrefixError),
    #[error("approval request {id}: a session grant needs an explicit prefix (compound or unparsed command)")]
    NoPrefix { id: String },
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error("approvals database: {0}")]
    Sql(#[from] rusqlite::Error),
}
