//! Approval requests and grants as durable facts: every state change is a
//! row update committed in the same SQLite transaction as its audit record.
//!
//! States: `pending` -> `granted` | `denied` | `expired`; a granted `once`
//! request -> `consumed` (by its one execution) or `expired` (unused past its
//! expiry, or its session closed); a granted `session` request stays
//! `granted` (a session rule) until the session closes, then `expired`.

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use super::audit::{actions, AuditLog, NewRecord};
use super::layer::{Actor, Layer};
use super::preview::Preview;
use super::scope::{self, SessionGrant};
use super::ApprovalError;
use crate::policy::{Decision, Tier};
use crate::redact::Redactor;
use crate::state::Db;

/// Default time a request waits for an answer, and a once-grant waits for
/// its execution: 10 minutes.
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(600);

/// State of an approval request (proto `ApprovalState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalState {
    Pending,
    Granted,
    Denied,
    Expired,
    /// A once-grant used by its execution.
    Consumed,
}

impl ApprovalState {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalState::Pending => "pending",
            ApprovalState::Granted => "granted",
            ApprovalState::Denied => "denied",
            ApprovalState::Expired => "expired",
            ApprovalState::Consumed => "consumed",
        }
    }
}

impl fmt::Display for ApprovalState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ApprovalState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            ApprovalState::Pending,
            ApprovalState::Granted,
            ApprovalState::Denied,
            ApprovalState::Expired,
            ApprovalState::Consumed,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
        .ok_or_else(|| format!("unknown approval state {s:?}"))
    }
}

/// Scope of a grant (proto `GrantScope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// Exactly this request (its hash), for one execution.
    Once,
    /// An argv prefix, up to the request's tier, for the rest of the session.
    Session,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Once => "once",
            Scope::Session => "session",
        }
    }
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "once" => Ok(Scope::Once),
            "session" => Ok(Scope::Session),
            _ => Err(format!("unknown scope {s:?} (expected once, session)")),
        }
    }
}

/// One approval request and its resolution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    pub id: String,
    pub session_id: String,
    pub run_id: String,
    pub step_id: String,
    pub tool_call_id: String,
    pub preview: Preview,
    pub state: ApprovalState,
    /// Unix epoch ms.
    pub created_at_ms: i64,
    /// Pending: when it expires unanswered. Granted once: when the unused
    /// grant expires.
    pub expires_at_ms: i64,
    /// 0 while pending.
    pub resolved_at_ms: i64,
    /// Set once granted.
    pub scope: Option<Scope>,
    /// Session scope: the argv prefix granted.
    pub prefix: Vec<String>,
    pub reason: String,
    /// Who answered (`uid:1000`, `user:auto:--yes`, `daemon`).
    pub actor: String,
    /// Who asked (the peer of the call).
    pub requested_by: String,
}

/// The call being decided: where it belongs and who makes it.
#[derive(Debug, Clone, Copy)]
pub struct CallContext<'a> {
    pub session_id: &'a str,
    /// Empty for calls outside a run (the CLI): they share one implicit run
    /// per session for denials.
    pub run_id: &'a str,
    pub step_id: &'a str,
    pub tool_call_id: &'a str,
    pub actor: &'a Actor,
    /// Applied to every string in the audit details of this call (commands
    /// can carry secrets); `None` records them as they are.
    pub redactor: Option<&'a Redactor>,
}

/// The outcome of the policy and user layers for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// The policy allows it: run.
    Allowed,
    /// The policy denies it: never runs.
    PolicyDenied { reason: String },
    /// A user grant covers it: run. For `once` the grant is already
    /// consumed by this call.
    Granted {
        approval_id: String,
        scope: Scope,
        actor: String,
    },
    /// The user denied this request (now or earlier in the same run).
    Denied { approval_id: String, reason: String },
    /// Nobody answered in time.
    Expired { approval_id: String },
    /// The once-grant was used by another execution of the same request.
    Used { approval_id: String },
    /// Ask the user: stream `approval_required` with this request, then
    /// [`Approvals::wait`].
    Ask(Box<ApprovalRecord>),
}

impl Gate {
    /// The layer that decided.
    pub fn layer(&self) -> Layer {
        match self {
            Gate::Allowed | Gate::PolicyDenied { .. } => Layer::Policy,
            Gate::Granted { .. } | Gate::Denied { .. } | Gate::Used { .. } | Gate::Ask(_) => {
                Layer::User
            }
            Gate::Expired { .. } => Layer::Daemon,
        }
    }

    /// Whether the call may run now.
    pub fn may_run(&self) -> bool {
        matches!(self, Gate::Allowed | Gate::Granted { .. })
    }

    /// The refusal text for `ExitEvent.refusal` ("denied ...", "approval
    /// required ...", "approval expired ..."); `None` when it may run.
    pub fn refusal(&self) -> Option<String> {
        match self {
            Gate::Allowed | Gate::Granted { .. } => None,
            Gate::PolicyDenied { reason } => Some(format!("denied by policy: {reason}")),
            Gate::Denied {
                approval_id,
                reason,
            } => Some(if reason.is_empty() {
                format!("denied by user (request {approval_id})")
            } else {
                format!("denied by user (request {approval_id}): {reason}")
            }),
            Gate::Expired { approval_id } => {
                Some(format!("approval expired (request {approval_id})"))
            }
            Gate::Used { approval_id } => Some(format!(
                "approval required: request {approval_id} was already used by another execution"
            )),
            Gate::Ask(r) => Some(format!("approval required (request {})", r.id)),
        }
    }

    /// The approval request id involved, if any.
    pub fn approval_id(&self) -> Option<&str> {
        match self {
            Gate::Allowed | Gate::PolicyDenied { .. } => None,
            Gate::Granted { approval_id, .. }
            | Gate::Denied { approval_id, .. }
            | Gate::Expired { approval_id }
            | Gate::Used { approval_id } => Some(approval_id),
            Gate::Ask(r) => Some(&r.id),
        }
    }
}

/// An answer to a request (proto `ApproveRequest`).
#[derive(Debug, Clone)]
pub struct Answer {
    pub request_id: String,
    /// `true` grants, `false` denies.
    pub grant: bool,
    /// Required when granting.
    pub scope: Scope,
    /// Session scope: the prefix; empty means [`scope::suggest_prefix`].
    pub prefix: Vec<String>,
    pub reason: String,
}

/// Settings of [`Approvals`].
#[derive(Debug, Clone)]
pub struct ApprovalConfig {
    /// How long a request waits for an answer and a once-grant for its
    /// execution. Default [`DEFAULT_EXPIRY`].
    pub expiry: Duration,
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        ApprovalConfig {
            expiry: DEFAULT_EXPIRY,
        }
    }
}

type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Approval requests and grants of every session. Cheap to clone.
#[derive(Clone)]
pub struct Approvals {
    db: Db,
    audit: AuditLog,
    config: ApprovalConfig,
    clock: Clock,
    /// Bumped on every resolution; waiters re-read the database.
    changed: Arc<tokio::sync::watch::Sender<u64>>,
}

impl fmt::Debug for Approvals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Approvals")
            .field("config", &self.config)
            .finish()
    }
}

/// The approvals table (part of [`super::APPROVAL_MIGRATIONS`]).
pub(super) const APPROVALS_SCHEMA_V1: &str = r#"
CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    step_id TEXT NOT NULL,
    tool_call_id TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    tier TEXT NOT NULL,
    preview_json TEXT NOT NULL,
    state TEXT NOT NULL,
    scope TEXT NOT NULL DEFAULT '',
    prefix_json TEXT NOT NULL DEFAULT '[]',
    reason TEXT NOT NULL DEFAULT '',
    actor TEXT NOT NULL DEFAULT '',
    requested_by TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    resolved_at_ms INTEGER NOT NULL DEFAULT 0,
    consumed_at_ms INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX approvals_lookup ON approvals(session_id, request_hash, state);
CREATE INDEX approvals_state ON approvals(state, expires_at_ms);
"#;

const COLUMNS: &str = "id, session_id, run_id, step_id, tool_call_id, preview_json, state, created_at_ms, expires_at_ms, resolved_at_ms, scope, prefix_json, reason, actor, requested_by";

fn row_to_record(r: &rusqlite::Row<'_>) -> rusqlite::Result<ApprovalRecord> {
    let bad = |i: usize, e: String| {
        rusqlite::Error::FromSqlConversionFailure(
            i,
            rusqlite::types::Type::Text,
            Box::<dyn std::error::Error + Send + Sync>::from(e),
        )
    };
    let preview_json: String = r.get(5)?;
    let state: String = r.get(6)?;
    let scope: String = r.get(10)?;
    let prefix_json: String = r.get(11)?;
    Ok(ApprovalRecord {
        id: r.get(0)?,
        session_id: r.get(1)?,
        run_id: r.get(2)?,
        step_id: r.get(3)?,
        tool_call_id: r.get(4)?,
        preview: serde_json::from_str(&preview_json).map_err(|e| bad(5, e.to_string()))?,
        state: state.parse().map_err(|e| bad(6, e))?,
        created_at_ms: r.get(7)?,
        expires_at_ms: r.get(8)?,
        resolved_at_ms: r.get(9)?,
        scope: if scope.is_empty() {
            None
        } else {
            Some(scope.parse().map_err(|e| bad(10, e))?)
        },
        prefix: serde_json::from_str(&prefix_json).map_err(|e| bad(11, e.to_string()))?,
        reason: r.get(12)?,
        actor: r.get(13)?,
        requested_by: r.get(14)?,
    })
}

/// Replaces every string in `v` by its redacted form.
fn redact_strings(v: &mut serde_json::Value, r: &Redactor) {
    match v {
        serde_json::Value::String(s) => {
            let (out, findings) = r.redact(s);
            if !findings.is_empty() {
                *s = out;
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| redact_strings(x, r)),
        serde_json::Value::Object(o) => o.values_mut().for_each(|x| redact_strings(x, r)),
        _ => {}
    }
}

/// Longest reason text kept, bytes.
const MAX_REASON_BYTES: usize = 2048;

fn clip(s: &str) -> String {
    if s.len() <= MAX_REASON_BYTES {
        return s.to_string();
    }
    let mut end = MAX_REASON_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

impl Approvals {
    /// Approvals stored in `db`, recorded in `audit`.
    pub fn new(db: Db, audit: AuditLog, config: ApprovalConfig) -> Approvals {
        Approvals::with_clock(db, audit, config, Arc::new(crate::now_ms))
    }

    /// Like [`Approvals::new`] with a clock (Unix epoch ms) for tests.
    pub fn with_clock(db: Db, audit: AuditLog, config: ApprovalConfig, clock: Clock) -> Approvals {
        Approvals {
            db,
            audit,
            config,
            clock,
            changed: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }

    /// Changes the expiry of requests raised and grants given from now on.
    pub fn set_expiry(&mut self, expiry: Duration) {
        self.config.expiry = expiry;
    }

    /// How long requests wait for an answer and once-grants for their use.
    pub fn expiry(&self) -> Duration {
        self.config.expiry
    }

    /// The audit log these approvals record into.
    pub fn audit(&self) -> &AuditLog {
        &self.audit
    }

    fn now(&self) -> i64 {
        (self.clock)()
    }

    fn expiry_ms(&self) -> i64 {
        self.config.expiry.as_millis().min(i64::MAX as u128) as i64
    }

    fn notify(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn record<'a>(
        ctx: &CallContext<'a>,
        actor: &'a Actor,
        action: &'a str,
        layer: Layer,
        detail: serde_json::Value,
    ) -> NewRecord<'a> {
        let mut detail = detail;
        if let Some(r) = ctx.redactor {
            redact_strings(&mut detail, r);
        }
        NewRecord {
            session_id: ctx.session_id,
            run_id: ctx.run_id,
            step_id: ctx.step_id,
            actor,
            action,
            detail,
            layer,
        }
    }

    /// Records a call refused by the schema layer (`reject`, layer schema):
    /// `message` says which argument was wrong. It never reaches policy.
    pub fn record_rejection(
        &self,
        ctx: &CallContext<'_>,
        tool: &str,
        message: &str,
    ) -> Result<(), ApprovalError> {
        self.audit.append(Self::record(
            ctx,
            ctx.actor,
            actions::REJECT,
            Layer::Schema,
            serde_json::json!({"tool": tool, "error": message}),
        ))?;
        Ok(())
    }

    /// The policy and user layers for one call: records the classification
    /// (`classify`, layer policy), then
    /// - policy deny: [`Gate::PolicyDenied`] (`deny`, layer policy);
    /// - policy allow: [`Gate::Allowed`];
    /// - policy ask: an earlier denial of the same request in the same run
    ///   refuses it ([`Gate::Denied`], `refuse`); else an unused once-grant
    ///   of exactly this request is consumed ([`Gate::Granted`], `consume`);
    ///   else session grants covering every part grant it (`grant_use`);
    ///   else with `auto_approve` (the CLI's `--yes`) a request is raised,
    ///   granted once by `ctx.actor` and consumed; else a pending request
    ///   for the same call is reused or a new one raised ([`Gate::Ask`],
    ///   `request`).
    ///
    /// Errors: [`ApprovalError::Audit`] / [`ApprovalError::Sql`]: nothing may
    /// run then (fail closed).
    pub fn decide(
        &self,
        ctx: &CallContext<'_>,
        preview: &Preview,
        auto_approve: bool,
    ) -> Result<Gate, ApprovalError> {
        let c = &preview.classification;
        // Durable with the call's next durable record (`deny`, `request`,
        // `consume`, `grant_use`, `exec_start`, `file_change`, ...).
        self.audit.append_deferred(Self::record(
            ctx,
            ctx.actor,
            actions::CLASSIFY,
            Layer::Policy,
            serde_json::json!({
                "tool": preview.tool,
                "command": preview.summary,
                "cwd": preview.cwd,
                "tier": c.tier,
                "decision": c.decision,
                "rule": c.rule,
                "reasons": c.reasons,
                "parts": c.parts,
                "writes": c.writes,
                "hosts": c.hosts,
                "policy_hash": preview.policy_hash,
                "request_hash": preview.request_hash,
            }),
        ))?;
        match c.decision {
            Decision::Deny => {
                let reason = c
                    .deciding_reason()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("tier {}", c.tier));
                let reason = match &c.rule {
                    Some(rule) => format!("rule {rule}: {reason}"),
                    None => reason,
                };
                self.audit.append(Self::record(
                    ctx,
                    ctx.actor,
                    actions::DENY,
                    Layer::Policy,
                    serde_json::json!({"request_hash": preview.request_hash, "reason": reason}),
                ))?;
                return Ok(Gate::PolicyDenied { reason });
            }
            Decision::Allow => return Ok(Gate::Allowed),
            Decision::Ask => {}
        }
        if let Some(denial) = self.find_denial(ctx, &preview.request_hash)? {
            self.audit.append(Self::record(
                ctx,
                ctx.actor,
                actions::REFUSE,
                Layer::User,
                serde_json::json!({
                    "request_hash": preview.request_hash,
                    "denied_request": denial.id,
                    "reason": "the same request was denied earlier in this run",
                }),
            ))?;
            return Ok(Gate::Denied {
                approval_id: denial.id,
                reason: denial.reason,
            });
        }
        if let Some(grant) = self.find_once_grant(ctx.session_id, &preview.request_hash)? {
            if self.consume(ctx, &grant.id, &preview.request_hash)? {
                return Ok(Gate::Granted {
                    approval_id: grant.id,
                    scope: Scope::Once,
                    actor: grant.actor,
                });
            }
        }
        let grants = self.session_grants(ctx.session_id)?;
        if let Some(used) = scope::covering(&grants, c) {
            let mut ids: Vec<&str> = used.iter().map(|g| g.approval_id.as_str()).collect();
            ids.dedup();
            self.audit.append(Self::record(
                ctx,
                ctx.actor,
                actions::GRANT_USE,
                Layer::User,
                serde_json::json!({
                    "request_hash": preview.request_hash,
                    "grants": ids,
                    "prefixes": used.iter().map(|g| &g.prefix).collect::<Vec<_>>(),
                }),
            ))?;
            return Ok(Gate::Granted {
                approval_id: used[0].approval_id.clone(),
                scope: Scope::Session,
                actor: String::new(),
            });
        }
        let pending = self.find_pending(ctx, &preview.request_hash)?;
        if auto_approve {
            let req = match pending {
                Some(p) => p,
                None => self.raise(ctx, preview)?,
            };
            self.answer(
                &Answer {
                    request_id: req.id.clone(),
                    grant: true,
                    scope: Scope::Once,
                    prefix: vec![],
                    reason: "approved with the call (--yes)".into(),
                },
                ctx.actor,
            )?;
            if self.consume(ctx, &req.id, &preview.request_hash)? {
                return Ok(Gate::Granted {
                    approval_id: req.id,
                    scope: Scope::Once,
                    actor: ctx.actor.to_string(),
                });
            }
            return Ok(Gate::Used {
                approval_id: req.id,
            });
        }
        if let Some(pending) = pending {
            return Ok(Gate::Ask(Box::new(pending)));
        }
        Ok(Gate::Ask(Box::new(self.raise(ctx, preview)?)))
    }

    /// Raises a new pending request for `preview` (`request`, layer policy:
    /// the policy asked).
    fn raise(
        &self,
        ctx: &CallContext<'_>,
        preview: &Preview,
    ) -> Result<ApprovalRecord, ApprovalError> {
        let now = self.now();
        let rec = ApprovalRecord {
            id: crate::new_id(),
            session_id: ctx.session_id.to_string(),
            run_id: ctx.run_id.to_string(),
            step_id: ctx.step_id.to_string(),
            tool_call_id: ctx.tool_call_id.to_string(),
            preview: preview.clone(),
            state: ApprovalState::Pending,
            created_at_ms: now,
            expires_at_ms: now.saturating_add(self.expiry_ms()),
            resolved_at_ms: 0,
            scope: None,
            prefix: vec![],
            reason: String::new(),
            actor: String::new(),
            requested_by: ctx.actor.to_string(),
        };
        let preview_json = serde_json::to_string(&rec.preview).expect("preview serializes");
        self.audit.append_with(
            Self::record(
                ctx,
                ctx.actor,
                actions::REQUEST,
                Layer::Policy,
                serde_json::json!({
                    "approval_id": rec.id,
                    "tool": preview.tool,
                    "command": preview.summary,
                    "tier": preview.classification.tier,
                    "request_hash": preview.request_hash,
                    "expires_at_ms": rec.expires_at_ms,
                }),
            ),
            |tx| {
                tx.execute(
                    "INSERT INTO approvals (id, session_id, run_id, step_id, tool_call_id, request_hash, tier, preview_json, state, requested_by, created_at_ms, expires_at_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'pending', ?9, ?10, ?11)",
                    params![
                        rec.id,
                        rec.session_id,
                        rec.run_id,
                        rec.step_id,
                        rec.tool_call_id,
                        preview.request_hash,
                        preview.classification.tier.as_str(),
                        preview_json,
                        rec.requested_by,
                        rec.created_at_ms,
                        rec.expires_at_ms
                    ],
                )
                .map_err(ApprovalError::from)
            },
        )?;
        Ok(rec)
    }

    /// Answers a pending request: grants it (`once`, or `session` with a
    /// validated prefix) or denies it. `actor` is who answered.
    ///
    /// Errors: [`ApprovalError::NotFound`]; [`ApprovalError::Expired`] when
    /// its time ran out (it is then marked expired); [`ApprovalError::AlreadyResolved`]
    /// when it was answered before; [`ApprovalError::Prefix`] for a session
    /// prefix that is a shell or bare interpreter, or that does not cover
    /// any part of the request; [`ApprovalError::NoPrefix`] when session
    /// scope names no prefix and none can be derived (compound command).
    pub fn answer(&self, a: &Answer, actor: &Actor) -> Result<ApprovalRecord, ApprovalError> {
        let req = self.get(&a.request_id)?;
        let now = self.now();
        if req.state == ApprovalState::Pending && now >= req.expires_at_ms {
            self.expire(&req, "no answer before the expiry")?;
            return Err(ApprovalError::Expired { id: req.id });
        }
        if req.state != ApprovalState::Pending {
            return Err(if req.state == ApprovalState::Expired {
                ApprovalError::Expired { id: req.id }
            } else {
                ApprovalError::AlreadyResolved {
                    id: req.id,
                    state: req.state,
                }
            });
        }
        let ctx = CallContext {
            session_id: &req.session_id,
            run_id: &req.run_id,
            step_id: &req.step_id,
            tool_call_id: &req.tool_call_id,
            actor,
            redactor: None,
        };
        let reason = clip(&a.reason);
        let (state, scope, prefix, expires, action) = if !a.grant {
            (
                ApprovalState::Denied,
                None,
                vec![],
                req.expires_at_ms,
                actions::DENY,
            )
        } else {
            match a.scope {
                Scope::Once => (
                    ApprovalState::Granted,
                    Some(Scope::Once),
                    vec![],
                    now.saturating_add(self.expiry_ms()),
                    actions::GRANT,
                ),
                Scope::Session => {
                    let prefix = if a.prefix.is_empty() {
                        scope::suggest_prefix(&req.preview.classification)
                            .ok_or_else(|| ApprovalError::NoPrefix { id: req.id.clone() })?
                    } else {
                        a.prefix.clone()
                    };
                    scope::validate_prefix(&prefix)?;
                    let probe = SessionGrant {
                        approval_id: req.id.clone(),
                        prefix: prefix.clone(),
                        max_tier: req.preview.classification.tier,
                    };
                    if !req
                        .preview
                        .classification
                        .parts
                        .iter()
                        .any(|p| probe.covers_part(p))
                    {
                        return Err(scope::PrefixError {
                            prefix,
                            reason: "covers no part of the request it answers".into(),
                        }
                        .into());
                    }
                    (
                        ApprovalState::Granted,
                        Some(Scope::Session),
                        prefix,
                        req.expires_at_ms,
                        actions::GRANT,
                    )
                }
            }
        };
        let prefix_json = serde_json::to_string(&prefix).expect("prefix serializes");
        let actor_s = actor.to_string();
        self.audit.append_with(
            Self::record(
                &ctx,
                actor,
                action,
                Layer::User,
                serde_json::json!({
                    "approval_id": req.id,
                    "request_hash": req.preview.request_hash,
                    "scope": scope.map(Scope::as_str),
                    "prefix": prefix,
                    "max_tier": req.preview.classification.tier,
                    "reason": reason,
                }),
            ),
            |tx| {
                let n = tx.execute(
                    "UPDATE approvals SET state = ?2, scope = ?3, prefix_json = ?4, reason = ?5, actor = ?6, resolved_at_ms = ?7, expires_at_ms = ?8
                     WHERE id = ?1 AND state = 'pending' AND expires_at_ms > ?7",
                    params![
                        req.id,
                        state.as_str(),
                        scope.map(Scope::as_str).unwrap_or(""),
                        prefix_json,
                        reason,
                        actor_s,
                        now,
                        expires
                    ],
                )?;
                if n == 1 {
                    Ok(())
                } else {
                    Err(ApprovalError::AlreadyResolved {
                        id: req.id.clone(),
                        state: req.state,
                    })
                }
            },
        )?;
        self.notify();
        self.get(&req.id)
    }

    /// Marks a pending request (or an unused once-grant) expired, recording
    /// `expire` (layer daemon). No-op when it was resolved meanwhile.
    fn expire(&self, req: &ApprovalRecord, why: &str) -> Result<bool, ApprovalError> {
        let ctx = CallContext {
            session_id: &req.session_id,
            run_id: &req.run_id,
            step_id: &req.step_id,
            tool_call_id: &req.tool_call_id,
            actor: &Actor::Daemon,
            redactor: None,
        };
        let from = req.state;
        let res = self.audit.append_with(
            Self::record(
                &ctx,
                &Actor::Daemon,
                actions::EXPIRE,
                Layer::Daemon,
                serde_json::json!({
                    "approval_id": req.id,
                    "request_hash": req.preview.request_hash,
                    "from": from.as_str(),
                    "scope": req.scope.map(Scope::as_str),
                    "reason": why,
                }),
            ),
            |tx| {
                let n = tx.execute(
                    "UPDATE approvals SET state = 'expired', resolved_at_ms = CASE WHEN resolved_at_ms = 0 THEN ?3 ELSE resolved_at_ms END
                     WHERE id = ?1 AND state = ?2",
                    params![req.id, from.as_str(), self.now()],
                )?;
                if n == 1 {
                    Ok(())
                } else {
                    Err(ApprovalError::AlreadyResolved {
                        id: req.id.clone(),
                        state: from,
                    })
                }
            },
        );
        match res {
            Ok(_) => {
                self.notify();
                Ok(true)
            }
            Err(ApprovalError::AlreadyResolved { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Uses the once-grant `id` for this call (`consume`, layer user): it
    /// must be granted, scope once, for exactly `request_hash`, not expired.
    /// Returns `false` when it is not usable (used by another call).
    fn consume(
        &self,
        ctx: &CallContext<'_>,
        id: &str,
        request_hash: &str,
    ) -> Result<bool, ApprovalError> {
        let now = self.now();
        let res = self.audit.append_with(
            Self::record(
                ctx,
                ctx.actor,
                actions::CONSUME,
                Layer::User,
                serde_json::json!({"approval_id": id, "request_hash": request_hash}),
            ),
            |tx| {
                let n = tx.execute(
                    "UPDATE approvals SET state = 'consumed', consumed_at_ms = ?3
                     WHERE id = ?1 AND state = 'granted' AND scope = 'once' AND request_hash = ?2 AND expires_at_ms > ?3",
                    params![id, request_hash, now],
                )?;
                if n == 1 {
                    Ok(())
                } else {
                    Err(ApprovalError::NotGranted {
                        id: id.to_string(),
                        state: ApprovalState::Consumed,
                    })
                }
            },
        );
        match res {
            Ok(_) => {
                self.notify();
                Ok(true)
            }
            Err(ApprovalError::NotGranted { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits up to `max_wait` (and never past the request's expiry) for the
    /// request `id` raised by [`Approvals::decide`] to be answered, then
    /// decides the call: granted once (consumed now) or session, denied, or
    /// expired (recorded). Dropping the future abandons the wait without
    /// changing the request (it stays pending for `warden approve`).
    pub async fn wait(
        &self,
        ctx: &CallContext<'_>,
        id: &str,
        max_wait: Duration,
    ) -> Result<Gate, ApprovalError> {
        let mut rx = self.changed.subscribe();
        let started = tokio::time::Instant::now();
        loop {
            let req = self.get(id)?;
            match req.state {
                ApprovalState::Pending => {}
                ApprovalState::Granted => {
                    return Ok(match req.scope {
                        Some(Scope::Session) => Gate::Granted {
                            approval_id: req.id,
                            scope: Scope::Session,
                            actor: req.actor,
                        },
                        _ => {
                            if self.consume(ctx, &req.id, &req.preview.request_hash)? {
                                Gate::Granted {
                                    approval_id: req.id,
                                    scope: Scope::Once,
                                    actor: req.actor,
                                }
                            } else {
                                Gate::Used {
                                    approval_id: req.id,
                                }
                            }
                        }
                    })
                }
                ApprovalState::Denied => {
                    return Ok(Gate::Denied {
                        approval_id: req.id,
                        reason: req.reason,
                    })
                }
                ApprovalState::Expired => {
                    return Ok(Gate::Expired {
                        approval_id: req.id,
                    })
                }
                ApprovalState::Consumed => {
                    return Ok(Gate::Used {
                        approval_id: req.id,
                    })
                }
            }
            let now = self.now();
            let to_expiry =
                Duration::from_millis(req.expires_at_ms.saturating_sub(now).max(0) as u64);
            let left = max_wait.saturating_sub(started.elapsed()).min(to_expiry);
            if left.is_zero() {
                if now >= req.expires_at_ms {
                    self.expire(&req, "no answer before the expiry")?;
                }
                // Re-read: it may have been answered just now.
                let req = self.get(id)?;
                if req.state != ApprovalState::Pending {
                    continue;
                }
                return Ok(Gate::Expired {
                    approval_id: req.id,
                });
            }
            tokio::select! {
                _ = rx.changed() => {}
                _ = tokio::time::sleep(left) => {}
            }
        }
    }

    /// One request by id. Errors: [`ApprovalError::NotFound`].
    pub fn get(&self, id: &str) -> Result<ApprovalRecord, ApprovalError> {
        self.db
            .lock()
            .query_row(
                &format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"),
                [id],
                row_to_record,
            )
            .optional()?
            .ok_or_else(|| ApprovalError::NotFound(id.to_string()))
    }

    /// Requests of a session (all sessions when `None`), oldest first;
    /// only pending ones with `pending_only`. Expires what is due first.
    pub fn list(
        &self,
        session_id: Option<&str>,
        pending_only: bool,
    ) -> Result<Vec<ApprovalRecord>, ApprovalError> {
        self.expire_due()?;
        let conn = self.db.lock();
        let mut st = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM approvals WHERE (?1 IS NULL OR session_id = ?1) AND (?2 = 0 OR state = 'pending') ORDER BY created_at_ms, id"
        ))?;
        let rows = st.query_map(params![session_id, pending_only as i64], row_to_record)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Expires every pending request and unused once-grant past its expiry
    /// (each an `expire` record). Returns how many.
    pub fn expire_due(&self) -> Result<usize, ApprovalError> {
        let due: Vec<ApprovalRecord> = {
            let conn = self.db.lock();
            let mut st = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM approvals WHERE expires_at_ms <= ?1 AND (state = 'pending' OR (state = 'granted' AND scope = 'once'))"
            ))?;
            let rows = st.query_map([self.now()], row_to_record)?;
            rows.collect::<Result<_, _>>()?
        };
        let mut n = 0;
        for r in &due {
            let why = if r.state == ApprovalState::Pending {
                "no answer before the expiry"
            } else {
                "once-grant not used before the expiry"
            };
            n += self.expire(r, why)? as usize;
        }
        Ok(n)
    }

    /// Ends a session's approvals when it closes: pending requests and every
    /// grant (once and session) expire. Nothing outlives the session except
    /// what a policy file says.
    pub fn end_session(&self, session_id: &str) -> Result<usize, ApprovalError> {
        let open: Vec<ApprovalRecord> = {
            let conn = self.db.lock();
            let mut st = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM approvals WHERE session_id = ?1 AND state IN ('pending', 'granted')"
            ))?;
            let rows = st.query_map([session_id], row_to_record)?;
            rows.collect::<Result<_, _>>()?
        };
        let mut n = 0;
        for r in &open {
            n += self.expire(r, "session closed")? as usize;
        }
        Ok(n)
    }

    /// The session grants in force in a session.
    pub fn session_grants(&self, session_id: &str) -> Result<Vec<SessionGrant>, ApprovalError> {
        let conn = self.db.lock();
        let mut st = conn.prepare_cached(
            "SELECT id, prefix_json, tier FROM approvals WHERE session_id = ?1 AND state = 'granted' AND scope = 'session' ORDER BY created_at_ms",
        )?;
        let rows = st.query_map([session_id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (id, prefix_json, tier) = row?;
            // A row that does not parse grants nothing (fail closed).
            let (Ok(prefix), Ok(max_tier)) = (
                serde_json::from_str::<Vec<String>>(&prefix_json),
                tier.parse::<Tier>(),
            ) else {
                tracing::warn!(approval_id = %id, "ignoring unparsable session grant");
                continue;
            };
            if scope::validate_prefix(&prefix).is_err() {
                continue;
            }
            out.push(SessionGrant {
                approval_id: id,
                prefix,
                max_tier,
            });
        }
        Ok(out)
    }

    fn find_one(
        &self,
        sql: &str,
        p: impl rusqlite::Params,
    ) -> Result<Option<ApprovalRecord>, ApprovalError> {
        Ok(self
            .db
            .lock()
            .query_row(
                &format!("SELECT {COLUMNS} FROM approvals WHERE {sql}"),
                p,
                row_to_record,
            )
            .optional()?)
    }

    fn find_denial(
        &self,
        ctx: &CallContext<'_>,
        hash: &str,
    ) -> Result<Option<ApprovalRecord>, ApprovalError> {
        self.find_one(
            "session_id = ?1 AND run_id = ?2 AND request_hash = ?3 AND state = 'denied' ORDER BY resolved_at_ms DESC LIMIT 1",
            params![ctx.session_id, ctx.run_id, hash],
        )
    }

    fn find_once_grant(
        &self,
        session_id: &str,
        hash: &str,
    ) -> Result<Option<ApprovalRecord>, ApprovalError> {
        self.find_one(
            "session_id = ?1 AND request_hash = ?2 AND state = 'granted' AND scope = 'once' AND expires_at_ms > ?3 ORDER BY resolved_at_ms LIMIT 1",
            params![session_id, hash, self.now()],
        )
    }

    fn find_pending(
        &self,
        ctx: &CallContext<'_>,
        hash: &str,
    ) -> Result<Option<ApprovalRecord>, ApprovalError> {
        self.find_one(
            "session_id = ?1 AND run_id = ?2 AND request_hash = ?3 AND state = 'pending' AND expires_at_ms > ?4 ORDER BY created_at_ms DESC LIMIT 1",
            params![ctx.session_id, ctx.run_id, hash, self.now()],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::audit::HEAD_FILE;
    use crate::approval::preview::tests::classification;
    use std::sync::atomic::{AtomicI64, Ordering};

    struct Fixture {
        dir: tempfile::TempDir,
        time: Arc<AtomicI64>,
        approvals: Approvals,
    }

    fn open_at(dir: &std::path::Path, time: Arc<AtomicI64>) -> Approvals {
        let db = Db::open(dir).unwrap();
        let audit = AuditLog::open(db.clone(), dir.join(HEAD_FILE)).unwrap();
        let t = time.clone();
        Approvals::with_clock(
            db,
            audit,
            ApprovalConfig::default(),
            Arc::new(move || t.load(Ordering::SeqCst)),
        )
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let time = Arc::new(AtomicI64::new(1_000_000));
        let approvals = open_at(dir.path(), time.clone());
        Fixture {
            dir,
            time,
            approvals,
        }
    }

    const USER: Actor = Actor::Peer(1000);

    fn ctx<'a>(run: &'a str) -> CallContext<'a> {
        CallContext {
            session_id: "s1",
            run_id: run,
            step_id: "",
            tool_call_id: "",
            actor: &USER,
            redactor: None,
        }
    }

    fn preview(cmd: &str, tier: Tier, decision: Decision) -> Preview {
        Preview::exec(classification(cmd, tier, decision), "", "policy-v1")
    }

    fn ask(cmd: &str) -> Preview {
        preview(cmd, Tier::Write, Decision::Ask)
    }

    fn answer(
        a: &Approvals,
        id: &str,
        grant: bool,
        scope: Scope,
        prefix: &[&str],
    ) -> Result<ApprovalRecord, ApprovalError> {
        a.answer(
            &Answer {
                request_id: id.to_string(),
                grant,
                scope,
                prefix: prefix.iter().map(|s| s.to_string()).collect(),
                reason: String::new(),
            },
            &Actor::Peer(1001),
        )
    }

    #[track_caller]
    fn assert_asks(a: &Approvals, c: &CallContext<'_>, p: &Preview) {
        let g = a.decide(c, p, false).unwrap();
        assert!(matches!(g, Gate::Ask(_)), "{}: {g:?}", p.summary);
    }

    fn asked(g: Gate) -> ApprovalRecord {
        match g {
            Gate::Ask(r) => *r,
            other => panic!("expected Ask, got {other:?}"),
        }
    }

    fn actions_of(a: &Approvals) -> Vec<(String, String)> {
        a.audit()
            .list(None, 0, 1000)
            .unwrap()
            .into_iter()
            .map(|r| (r.action, r.layer))
            .collect()
    }

    #[test]
    fn policy_allow_and_deny_need_no_user_and_deny_is_never_overridden() {
        let f = fixture();
        let a = &f.approvals;
        let g = a
            .decide(
                &ctx(""),
                &preview("ls", Tier::SafeRead, Decision::Allow),
                false,
            )
            .unwrap();
        assert_eq!((g.clone(), g.layer()), (Gate::Allowed, Layer::Policy));
        let deny = preview("rm -rf x", Tier::Destructive, Decision::Deny);
        // Even --yes never overrides a policy deny.
        let g = a.decide(&ctx(""), &deny, true).unwrap();
        assert!(matches!(g, Gate::PolicyDenied { .. }), "{g:?}");
        assert_eq!(g.layer(), Layer::Policy);
        assert!(g.refusal().unwrap().starts_with("denied"));
        let acts = actions_of(a);
        assert!(acts.contains(&("deny".into(), "policy".into())), "{acts:?}");
        assert_eq!(acts.iter().filter(|(x, _)| x == "classify").count(), 2);
        assert!(a.list(None, false).unwrap().is_empty(), "no request raised");
    }

    #[test]
    fn once_grant_is_used_once_and_only_for_the_same_request() {
        let f = fixture();
        let a = &f.approvals;
        let req = asked(a.decide(&ctx(""), &ask("touch a"), false).unwrap());
        assert_eq!(req.state, ApprovalState::Pending);
        // The same call while pending reuses the request (no second prompt).
        assert_eq!(
            asked(a.decide(&ctx(""), &ask("touch a"), false).unwrap()).id,
            req.id
        );
        let granted = answer(a, &req.id, true, Scope::Once, &[]).unwrap();
        assert_eq!(
            (granted.state, granted.scope),
            (ApprovalState::Granted, Some(Scope::Once))
        );
        // A different command, cwd or policy version does not use it.
        for (cmd, cwd, policy) in [
            ("touch b", "", "policy-v1"),
            ("touch a", "sub", "policy-v1"),
            ("touch a", "", "policy-v2"),
        ] {
            let p = Preview::exec(classification(cmd, Tier::Write, Decision::Ask), cwd, policy);
            let g = a.decide(&ctx(""), &p, false).unwrap();
            assert!(
                matches!(g, Gate::Ask(_)),
                "{cmd} in {cwd:?} under {policy}: {g:?}"
            );
        }
        // The exact request runs once...
        let g = a.decide(&ctx(""), &ask("touch a"), false).unwrap();
        assert_eq!(
            g,
            Gate::Granted {
                approval_id: req.id.clone(),
                scope: Scope::Once,
                actor: "uid:1001".into()
            }
        );
        assert_eq!(a.get(&req.id).unwrap().state, ApprovalState::Consumed);
        // ...and a replay asks again with a new request.
        let again = asked(a.decide(&ctx(""), &ask("touch a"), false).unwrap());
        assert_ne!(again.id, req.id);
        // A consumed grant cannot be answered again.
        assert!(matches!(
            answer(a, &req.id, true, Scope::Once, &[]),
            Err(ApprovalError::AlreadyResolved { .. })
        ));
        let acts = actions_of(a);
        assert!(acts.contains(&("grant".into(), "user".into())));
        assert!(acts.contains(&("consume".into(), "user".into())));
        assert!(acts.contains(&("request".into(), "policy".into())));
        assert!(a.audit().verify().unwrap().ok);
    }

    #[test]
    fn auto_approve_grants_once_per_call() {
        let f = fixture();
        let a = &f.approvals;
        let g1 = a.decide(&ctx(""), &ask("touch a"), true).unwrap();
        let Gate::Granted {
            approval_id: id1,
            scope: Scope::Once,
            ..
        } = g1
        else {
            panic!("{g1:?}")
        };
        assert_eq!(a.get(&id1).unwrap().state, ApprovalState::Consumed);
        let g2 = a.decide(&ctx(""), &ask("touch a"), true).unwrap();
        let Gate::Granted {
            approval_id: id2, ..
        } = g2
        else {
            panic!("{g2:?}")
        };
        assert_ne!(id1, id2);
        // Without --yes the next call asks.
        assert_asks(a, &ctx(""), &ask("touch a"));
    }

    #[test]
    fn a_denial_refuses_the_same_request_in_the_same_run_after_restart() {
        let f = fixture();
        let req = asked(
            f.approvals
                .decide(&ctx("run1"), &ask("curl x"), false)
                .unwrap(),
        );
        let denied = answer(&f.approvals, &req.id, false, Scope::Once, &[]).unwrap();
        assert_eq!(denied.state, ApprovalState::Denied);
        drop(f.approvals);
        // "Restart": reopen the database, audit log and approvals.
        let a = open_at(f.dir.path(), f.time.clone());
        assert!(a.audit().startup_report().ok);
        let g = a.decide(&ctx("run1"), &ask("curl x"), true).unwrap();
        assert_eq!(
            g,
            Gate::Denied {
                approval_id: req.id.clone(),
                reason: String::new()
            }
        );
        assert_eq!(g.layer(), Layer::User);
        let recs = a.audit().list(None, 0, 1000).unwrap();
        let refuse = recs
            .iter()
            .find(|r| r.action == "refuse")
            .expect("refusal recorded");
        assert_eq!(refuse.layer, "user");
        assert!(refuse.detail_json.contains(&req.id));
        // Only one request was ever raised in run1.
        assert_eq!(a.list(Some("s1"), false).unwrap().len(), 1);
        // Another run asks afresh.
        assert_asks(&a, &ctx("run2"), &ask("curl x"));
    }

    #[test]
    fn an_expired_request_cannot_be_granted() {
        let f = fixture();
        let a = &f.approvals;
        let req = asked(a.decide(&ctx(""), &ask("touch a"), false).unwrap());
        f.time
            .fetch_add(DEFAULT_EXPIRY.as_millis() as i64, Ordering::SeqCst);
        assert!(matches!(
            answer(a, &req.id, true, Scope::Once, &[]),
            Err(ApprovalError::Expired { .. })
        ));
        assert_eq!(a.get(&req.id).unwrap().state, ApprovalState::Expired);
        assert!(matches!(
            answer(a, &req.id, true, Scope::Once, &[]),
            Err(ApprovalError::Expired { .. })
        ));
        let acts = actions_of(a);
        assert!(
            acts.contains(&("expire".into(), "daemon".into())),
            "{acts:?}"
        );
        assert!(!acts.iter().any(|(x, _)| x == "grant"));
        // The call asks again with a new request.
        assert_ne!(
            asked(a.decide(&ctx(""), &ask("touch a"), false).unwrap()).id,
            req.id
        );
    }

    #[test]
    fn an_unused_once_grant_expires() {
        let f = fixture();
        let a = &f.approvals;
        let req = asked(a.decide(&ctx(""), &ask("touch a"), false).unwrap());
        answer(a, &req.id, true, Scope::Once, &[]).unwrap();
        f.time
            .fetch_add(DEFAULT_EXPIRY.as_millis() as i64 + 1, Ordering::SeqCst);
        assert_asks(a, &ctx(""), &ask("touch a"));
        assert_eq!(
            a.expire_due().unwrap(),
            1,
            "the unused grant (the new request is not due)"
        );
        assert_eq!(a.get(&req.id).unwrap().state, ApprovalState::Expired);
    }

    #[test]
    fn session_grants_are_prefixes_that_cover_every_part_and_end_with_the_session() {
        let f = fixture();
        let a = &f.approvals;
        let req = asked(a.decide(&ctx(""), &ask("git status"), false).unwrap());
        for bad in [
            &["bash"][..],
            &["sh", "-c"],
            &["env"],
            &["xargs", "git"],
            &["python"],
        ] {
            let e = answer(a, &req.id, true, Scope::Session, bad).unwrap_err();
            assert!(matches!(e, ApprovalError::Prefix(_)), "{bad:?}: {e:?}");
        }
        let e = answer(a, &req.id, true, Scope::Session, &["cargo", "build"]).unwrap_err();
        assert!(
            matches!(e, ApprovalError::Prefix(_)),
            "unrelated prefix: {e:?}"
        );
        let g = answer(a, &req.id, true, Scope::Session, &[]).unwrap();
        assert_eq!(
            (g.scope, g.prefix.clone()),
            (
                Some(Scope::Session),
                vec!["git".to_string(), "status".to_string()]
            )
        );
        assert!(matches!(
            a.decide(&ctx(""), &ask("git status --short"), false)
                .unwrap(),
            Gate::Granted {
                scope: Scope::Session,
                ..
            }
        ));
        for not_covered in [
            "git status && rm -rf x",
            "bash -c git status",
            "sh -c git",
            "git push",
        ] {
            let g = a.decide(&ctx(""), &ask(not_covered), false).unwrap();
            assert!(matches!(g, Gate::Ask(_)), "{not_covered}: {g:?}");
        }
        // Above the granted tier: asks.
        let net = preview("git status", Tier::Network, Decision::Ask);
        assert_asks(a, &ctx(""), &net);
        // Another session: nothing.
        let other = CallContext {
            session_id: "s2",
            ..ctx("")
        };
        assert_asks(a, &other, &ask("git status"));
        // Closing the session ends the grant.
        assert!(a.end_session("s1").unwrap() >= 1);
        assert!(a.session_grants("s1").unwrap().is_empty());
        assert_asks(a, &ctx(""), &ask("git status"));
    }

    #[test]
    fn compound_requests_need_an_explicit_prefix() {
        let f = fixture();
        let a = &f.approvals;
        let req = asked(
            a.decide(&ctx(""), &ask("git status && touch x"), false)
                .unwrap(),
        );
        assert!(matches!(
            answer(a, &req.id, true, Scope::Session, &[]),
            Err(ApprovalError::NoPrefix { .. })
        ));
        answer(a, &req.id, true, Scope::Session, &["git", "status"]).unwrap();
        // The grant covers one part only: the compound asks again.
        assert_asks(a, &ctx(""), &ask("git status && touch x"));
    }

    #[tokio::test]
    async fn wait_returns_the_answer_and_consumes_a_once_grant() {
        let f = fixture();
        let a = f.approvals.clone();
        // Each case: a waiter on a fresh request, answered from elsewhere.
        for (cmd, grant) in [("touch a", true), ("touch b", false)] {
            let req = asked(a.decide(&ctx(""), &ask(cmd), false).unwrap());
            let waiter = {
                let a = a.clone();
                let id = req.id.clone();
                tokio::spawn(async move { a.wait(&ctx(""), &id, Duration::from_secs(30)).await })
            };
            tokio::time::sleep(Duration::from_millis(20)).await;
            answer(&a, &req.id, grant, Scope::Once, &[]).unwrap();
            let g = waiter.await.unwrap().unwrap();
            let state = a.get(&req.id).unwrap().state;
            if grant {
                assert!(
                    matches!(
                        g,
                        Gate::Granted {
                            scope: Scope::Once,
                            ..
                        }
                    ),
                    "{g:?}"
                );
                assert_eq!(state, ApprovalState::Consumed);
            } else {
                assert!(matches!(g, Gate::Denied { .. }), "{g:?}");
                assert_eq!(state, ApprovalState::Denied);
            }
        }
    }

    #[tokio::test]
    async fn wait_expires_at_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let audit = AuditLog::open(db.clone(), dir.path().join(HEAD_FILE)).unwrap();
        let a = Approvals::new(
            db,
            audit,
            ApprovalConfig {
                expiry: Duration::from_millis(50),
            },
        );
        let req = asked(a.decide(&ctx(""), &ask("touch a"), false).unwrap());
        let g = a
            .wait(&ctx(""), &req.id, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(
            g,
            Gate::Expired {
                approval_id: req.id.clone()
            }
        );
        assert_eq!(a.get(&req.id).unwrap().state, ApprovalState::Expired);
        assert!(matches!(
            answer(&a, &req.id, true, Scope::Once, &[]),
            Err(ApprovalError::Expired { .. })
        ));
        // A shorter bound leaves the request pending (the client gave up).
        let req = asked(a.decide(&ctx(""), &ask("touch b"), false).unwrap());
        let g = a
            .wait(&ctx(""), &req.id, Duration::from_millis(1))
            .await
            .unwrap();
        assert!(matches!(g, Gate::Expired { .. }));
        assert_eq!(a.get(&req.id).unwrap().state, ApprovalState::Pending);
    }
}
