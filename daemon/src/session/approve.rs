//! The approval and audit side of the session manager: the policy and user
//! layers of a tool call (`crate::approval`), the audit records of its start
//! and end, answering approval requests, reading and verifying the audit log.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::exec::{ExecEvent, ExecParams, ExitSummary};
use super::{check_owner, Peer, Session, SessionError, SessionManager};
use crate::approval::{
    actions, Actor, Answer, ApprovalConfig, ApprovalError, ApprovalRecord, Approvals, AuditLog,
    AuditRecord, CallContext, Gate, Layer, NewRecord, Preview, VerifyReport, HEAD_FILE,
};
use crate::policy::{Classification, Policy};
use crate::redact::Redactor;

/// How often pending requests and unused grants past their expiry are
/// expired (and recorded) when nobody looks at them, ms.
const EXPIRY_SWEEP_MS: u64 = 5_000;

impl From<ApprovalError> for SessionError {
    fn from(e: ApprovalError) -> Self {
        match e {
            ApprovalError::NotFound(_) => SessionError::NotFound(e.to_string()),
            ApprovalError::Expired { .. }
            | ApprovalError::AlreadyResolved { .. }
            | ApprovalError::NotGranted { .. } => SessionError::FailedPrecondition(e.to_string()),
            ApprovalError::Prefix(_) | ApprovalError::NoPrefix { .. } => {
                SessionError::InvalidArgument(e.to_string())
            }
            ApprovalError::Audit(_) | ApprovalError::Sql(_) => {
                SessionError::Internal(e.to_string())
            }
        }
    }
}

/// Opens the audit log (head file `state_dir/audit.head`) and the approvals
/// of `db`, with the default expiry (10 min; see
/// [`SessionManager::set_approval_expiry`]). A broken chain is logged and
/// recorded, not fatal.
pub(super) fn open_approvals(
    db: &crate::state::Db,
    state_dir: &std::path::Path,
) -> Result<Approvals, SessionError> {
    let audit = AuditLog::open(db.clone(), state_dir.join(HEAD_FILE))
        .map_err(|e| SessionError::Internal(format!("audit log: {e}")))?;
    Ok(Approvals::new(db.clone(), audit, ApprovalConfig::default()))
}

/// What the approval step decided for one Exec call.
pub(super) enum ExecGate {
    /// Run it; the approval request involved, if any.
    Run { approval_id: Option<String> },
    /// Do not run it: the exit to send.
    Refuse(ExitSummary),
    /// Not decided: the approval request got no answer because the caller
    /// went away while it waited. Nothing ran; the exit to send.
    Unanswered(ExitSummary),
}

fn call_ctx<'a>(p: &'a ExecParams, actor: &'a Actor, redactor: &'a Redactor) -> CallContext<'a> {
    CallContext {
        session_id: &p.session_id,
        run_id: &p.run_id,
        step_id: &p.step_id,
        tool_call_id: &p.tool_call_id,
        actor,
        redactor: Some(redactor),
    }
}

impl SessionManager {
    /// Approval requests, grants and the audit log.
    pub fn approvals(&self) -> &Approvals {
        &self.approvals
    }

    /// Sets how long requests wait for an answer and once-grants for their
    /// execution (`wardend --approval-expiry-ms`).
    pub fn set_approval_expiry(&mut self, expiry: Duration) {
        self.approvals.set_expiry(expiry);
    }

    /// The audit log.
    pub fn audit(&self) -> &AuditLog {
        self.approvals.audit()
    }

    /// Expires due requests and grants every few seconds, so an expiry is
    /// recorded even when nobody asks about it. Stops with the manager.
    pub fn spawn_approval_expiry(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(EXPIRY_SWEEP_MS));
            loop {
                tick.tick().await;
                let Some(mgr) = weak.upgrade() else { return };
                if let Err(e) = mgr.approvals.expire_due() {
                    tracing::warn!(error = %e, "expiring approvals");
                }
            }
        });
    }

    /// The schema layer of Exec: [`super::exec::validate`], and a refused
    /// call recorded as `reject` (layer schema). Errors: InvalidArgument.
    pub fn validate_exec(&self, peer: Peer, p: &ExecParams) -> Result<(), SessionError> {
        let Err(e) = super::exec::validate(p) else {
            return Ok(());
        };
        self.record_rejection(
            peer,
            &p.session_id,
            &p.run_id,
            &p.step_id,
            "exec",
            &e.to_string(),
        );
        Err(e)
    }

    /// Records a call the schema layer refused (`reject`, layer schema): it
    /// never reached policy. Ids that are not sane (over 128 bytes, not
    /// printable ASCII) are recorded empty. Failing to record is logged.
    pub fn record_rejection(
        &self,
        peer: Peer,
        session_id: &str,
        run_id: &str,
        step_id: &str,
        tool: &str,
        message: &str,
    ) {
        let actor = Actor::Peer(peer.uid);
        let id = |s: &str| -> String {
            if s.len() <= 128 && s.bytes().all(|b| b.is_ascii_graphic()) {
                s.to_string()
            } else {
                String::new()
            }
        };
        let (sid, rid, stid) = (id(session_id), id(run_id), id(step_id));
        let ctx = CallContext {
            session_id: &sid,
            run_id: &rid,
            step_id: &stid,
            tool_call_id: "",
            actor: &actor,
            redactor: None,
        };
        if let Err(ae) = self.approvals.record_rejection(&ctx, tool, message) {
            tracing::warn!(error = %ae, "recording a schema rejection");
        }
    }

    /// The policy and user layers of one Exec call: records the decision;
    /// on ask streams `approval_required` and waits (up to the approval
    /// expiry) for an answer from any client of the session, or until the
    /// caller goes away (the request then stays pending for `warden
    /// approve`).
    pub(super) async fn gate_exec(
        &self,
        peer: Peer,
        session: &Session,
        p: &ExecParams,
        cwd_rel: &str,
        classification: &Classification,
        tx: &mpsc::Sender<ExecEvent>,
    ) -> Result<ExecGate, SessionError> {
        let actor = Actor::Peer(peer.uid);
        let redactor = self.redactor(session);
        let ctx = call_ctx(p, &actor, &redactor);
        let mut preview = Preview::exec(classification.clone(), cwd_rel, &session.policy.hash);
        // What is shown and stored passes the redactor; the request hash
        // (computed above from the exact command) is unchanged.
        preview.summary = redactor.redact(&preview.summary).0;
        preview.classification.command = redactor.redact(&preview.classification.command).0;
        for part in &mut preview.classification.parts {
            for a in &mut part.argv {
                *a = redactor.redact(a).0;
            }
        }
        let mut gate = self.approvals.decide(&ctx, &preview, p.approve)?;
        if let Gate::Ask(req) = &gate {
            let id = req.id.clone();
            if tx
                .send(ExecEvent::ApprovalRequired(req.clone()))
                .await
                .is_err()
            {
                return Ok(ExecGate::Unanswered(refused(&gate)));
            }
            let max_wait = self.approvals.expiry();
            gate = tokio::select! {
                g = self.approvals.wait(&ctx, &id, max_wait) => g?,
                _ = tx.closed() => return Ok(ExecGate::Unanswered(refused(&gate))),
            };
            let rec = self.approvals.get(&id)?;
            let _ = tx
                .send(ExecEvent::ApprovalResolved {
                    request_id: id,
                    state: rec.state,
                    scope: rec.scope,
                })
                .await;
        }
        if gate.may_run() {
            Ok(ExecGate::Run {
                approval_id: gate.approval_id().map(str::to_string),
            })
        } else {
            Ok(ExecGate::Refuse(refused(&gate)))
        }
    }

    /// Records `exec_start` (durably: the command must not start when this
    /// fails) or `exec_end` (exit code, signal, duration, or the error;
    /// durable with the call's closing sync).
    pub(super) fn audit_exec(
        &self,
        peer: Peer,
        session: &Session,
        p: &ExecParams,
        action: &str,
        mut detail: serde_json::Value,
    ) -> Result<AuditRecord, SessionError> {
        let actor = Actor::Peer(peer.uid);
        let redactor = self.redactor(session);
        if let Some(cmd) = detail.get_mut("command") {
            if let Some(s) = cmd.as_str() {
                *cmd = serde_json::Value::String(redactor.redact(s).0);
            }
        }
        let rec = NewRecord {
            session_id: &p.session_id,
            run_id: &p.run_id,
            step_id: &p.step_id,
            actor: &actor,
            action,
            detail,
            layer: Layer::Daemon,
        };
        // `exec_start` is on disk before the command starts; `exec_end` is
        // committed before the Exit event and synced right after it
        // ([`SessionManager::exec`] calls `AuditLog::sync`).
        if action == crate::approval::actions::EXEC_END {
            self.audit().append_deferred(rec)
        } else {
            self.audit().append_before_effect(rec)
        }
        .map_err(|e| SessionError::Internal(format!("audit log: {e}")))
    }

    /// Replaces the default policy and records `policy_reload`.
    pub fn reload_default_policy(&self, policy: Policy, peer: Peer) -> Result<(), SessionError> {
        let old = self.default_policy();
        self.audit()
            .append(NewRecord {
                session_id: "",
                run_id: "",
                step_id: "",
                actor: &Actor::Peer(peer.uid),
                action: actions::POLICY_RELOAD,
                detail: serde_json::json!({
                    "name": policy.name,
                    "old_hash": old.hash,
                    "new_hash": policy.hash,
                }),
                layer: Layer::Policy,
            })
            .map_err(|e| SessionError::Internal(format!("audit log: {e}")))?;
        self.set_default_policy(policy);
        Ok(())
    }

    /// Answers an approval request of a session the peer owns (root may
    /// answer any). Errors: NotFound, PermissionDenied, FailedPrecondition
    /// (expired, already answered), InvalidArgument (bad session prefix).
    pub fn answer_approval(&self, peer: Peer, a: &Answer) -> Result<ApprovalRecord, SessionError> {
        let req = self.get_approval(peer, &a.request_id)?;
        let rec = self.approvals.answer(a, &Actor::Peer(peer.uid))?;
        tracing::info!(approval = %req.id, state = %rec.state, uid = peer.uid, "approval answered");
        Ok(rec)
    }

    /// One approval request of a session the peer owns.
    pub fn get_approval(&self, peer: Peer, id: &str) -> Result<ApprovalRecord, SessionError> {
        if id.is_empty() {
            return Err(SessionError::InvalidArgument(
                "request_id is required".into(),
            ));
        }
        let rec = self.approvals.get(id)?;
        check_owner(&self.get_session(&rec.session_id)?, peer)?;
        Ok(rec)
    }

    /// Approval requests of a session the peer owns.
    pub fn list_approvals(
        &self,
        peer: Peer,
        session_id: &str,
        pending_only: bool,
    ) -> Result<Vec<ApprovalRecord>, SessionError> {
        check_owner(&self.get_session(session_id)?, peer)?;
        Ok(self.approvals.list(Some(session_id), pending_only)?)
    }

    /// Audit records after `after_seq`: of one session the peer owns, or
    /// (no session) every record, for root and the daemon's own uid only.
    pub fn audit_records(
        &self,
        peer: Peer,
        session_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, SessionError> {
        let filter = if session_id.is_empty() {
            self.check_audit_reader(peer)?;
            None
        } else {
            check_owner(&self.get_session(session_id)?, peer)?;
            Some(session_id)
        };
        self.audit()
            .list(filter, after_seq, limit)
            .map_err(|e| SessionError::Internal(format!("audit log: {e}")))
    }

    /// Verifies the whole chain (root and the daemon's own uid only),
    /// with the audit heads kept in checkpoints as anchors: a chain
    /// rewritten or cut below a checkpoint's head is caught even when the
    /// head file was rewritten too.
    pub fn verify_audit(&self, peer: Peer) -> Result<VerifyReport, SessionError> {
        self.check_audit_reader(peer)?;
        let anchors: Vec<crate::approval::Head> = self
            .checkpoints
            .list(&crate::checkpoint::CheckpointFilter {
                limit: 100_000,
                ..Default::default()
            })?
            .into_iter()
            .filter_map(|c| match (c.audit_seq, c.audit_head) {
                (Some(seq), Some(hash)) if seq > 0 => Some(crate::approval::Head { seq, hash }),
                _ => None,
            })
            .collect();
        self.audit()
            .verify_with_anchors(&anchors)
            .map_err(|e| SessionError::Internal(format!("audit log: {e}")))
    }

    /// `meta` with the audit chain's current head, which each checkpoint
    /// keeps (so a cut-off tail is caught even without the head file).
    pub(super) fn with_audit_head(
        &self,
        meta: &crate::checkpoint::CheckpointMeta,
    ) -> crate::checkpoint::CheckpointMeta {
        let head = self.audit().head();
        let mut m = meta.clone();
        m.audit_seq = Some(head.seq);
        m.audit_head = Some(head.hash);
        m
    }

    /// Records a rollback (`rollback`): the checkpoint rolled back to, the
    /// new one, what was restored and what could not be, external effects
    /// left in place. Errors: Internal when the audit log cannot be written
    /// (the rollback is done; the caller reports the failure).
    pub(super) fn audit_rollback(
        &self,
        peer: Peer,
        target: &crate::checkpoint::Checkpoint,
        opts: &crate::checkpoint::RollbackOptions,
        report: &crate::checkpoint::RollbackReport,
    ) -> Result<(), SessionError> {
        self.audit()
            .append(NewRecord {
                session_id: &target.session_id,
                run_id: &target.run_id,
                step_id: &target.step_id,
                actor: &Actor::Peer(peer.uid),
                action: actions::ROLLBACK,
                detail: serde_json::json!({
                    "target_checkpoint": report.target_id,
                    "checkpoint_id": report.checkpoint_id,
                    "files": opts.files,
                    "conversation": opts.conversation,
                    "include_git": opts.include_git,
                    "force": opts.force,
                    "restored": report.restored.iter().map(|c| serde_json::json!({
                        "path": c.path, "kind": c.kind.as_str(), "old_hash": c.old_hash, "new_hash": c.new_hash,
                    })).collect::<Vec<_>>(),
                    "not_restored": report.not_restored,
                    "external_effects": report.external_effects.iter().map(|e| &e.step_id).collect::<Vec<_>>(),
                    "archived_branch_id": report.archived_branch_id,
                }),
                layer: Layer::Daemon,
            })
            .map(|_| ())
            .map_err(|e| SessionError::Internal(format!("audit log: {e}")))
    }

    fn check_audit_reader(&self, peer: Peer) -> Result<(), SessionError> {
        let me = nix::unistd::geteuid().as_raw();
        if peer.uid == 0 || peer.uid == me {
            return Ok(());
        }
        Err(SessionError::PermissionDenied(format!(
            "uid {} may read the audit log of its own sessions only (give a session id)",
            peer.uid
        )))
    }
}

/// The exit of a call the gate refused.
fn refused(gate: &Gate) -> ExitSummary {
    ExitSummary {
        refusal: gate.refusal(),
        approval_request_id: gate.approval_id().map(str::to_string),
        ..Default::default()
    }
}

/// Why a write-tier file tool call may not run.
#[derive(Debug)]
pub struct FileGateRefusal {
    pub error: SessionError,
    /// The call raised an approval request that awaits an answer: nothing
    /// was decided yet (the step journal keeps the call `planned`).
    pub awaiting_answer: bool,
}

/// One write-tier file tool call as the approval step sees it.
#[derive(Debug, Clone)]
pub struct FileToolCall<'a> {
    /// `write_file` or `apply_patch`.
    pub tool: &'a str,
    pub session_id: &'a str,
    /// Workspace-relative paths it writes.
    pub paths: Vec<String>,
    /// BLAKE3 hex of the content written (write_file) or of the patch: the
    /// request hash covers it, so a grant is for exactly these bytes.
    pub content_hash: String,
    /// Unified diff of the change (redacted before it is shown or stored).
    pub diff: String,
    /// Grant once if the policy asks (`--yes`).
    pub approve: bool,
    pub run_id: &'a str,
    pub step_id: &'a str,
    pub tool_call_id: &'a str,
}

impl SessionManager {
    /// Records what a file tool call changed (`file_change`, layer daemon):
    /// path, kind and content hashes before and after, per file.
    ///
    /// Errors: Internal when the audit log cannot be written (the change
    /// is made; the caller reports the failure).
    pub fn audit_file_change(
        &self,
        peer: Peer,
        call: &FileToolCall<'_>,
        changes: &[crate::workspace::FileChange],
    ) -> Result<(), SessionError> {
        let changes: Vec<serde_json::Value> = changes
            .iter()
            .map(|c| {
                serde_json::json!({
                    "path": c.path,
                    "kind": c.kind.as_str(),
                    "old_hash": c.old_hash,
                    "new_hash": c.new_hash,
                    "from_path": c.from_path,
                })
            })
            .collect();
        self.audit()
            .append(NewRecord {
                session_id: call.session_id,
                run_id: call.run_id,
                step_id: call.step_id,
                actor: &Actor::Peer(peer.uid),
                action: actions::FILE_CHANGE,
                detail: serde_json::json!({"tool": call.tool, "changes": changes}),
                layer: Layer::Daemon,
            })
            .map(|_| ())
            .map_err(|e| SessionError::Internal(format!("audit log: {e}")))
    }

    /// The policy and user layers of a write-tier file tool call. Unary
    /// calls cannot wait for an answer: on ask the request is raised (with
    /// the diff as its preview) and the call fails with PermissionDenied
    /// `approval required (request ID)`; after `warden approve ID` the same
    /// call (same paths and bytes) uses the grant.
    ///
    /// Returns the approval request id used, if any. Errors (in
    /// [`FileGateRefusal::error`]): PermissionDenied starting `denied`
    /// (policy or user) or `approval required` (then `awaiting_answer` is
    /// set when the request was just raised); Internal when the audit log
    /// cannot be written.
    pub fn gate_file_tool(
        &self,
        peer: Peer,
        session: &Session,
        call: &FileToolCall<'_>,
    ) -> Result<Option<String>, FileGateRefusal> {
        use crate::policy::{Part, Tier};
        let tier = Tier::Write;
        let classification = Classification {
            command: format!("{} {}", call.tool, call.paths.join(" ")),
            tier,
            decision: session.policy.file.tiers.decide(tier),
            rule: None,
            reasons: vec![format!("{}: writes the workspace", call.tool)],
            parts: call
                .paths
                .iter()
                .map(|p| Part {
                    argv: vec![call.tool.to_string(), p.clone()],
                    tier,
                    reasons: vec![format!("writes {p}")],
                })
                .collect(),
            writes: call.paths.clone(),
            hosts: vec![],
            install: None,
            justification: None,
        };
        let redactor = self.redactor(session);
        let key = crate::approval::RequestKey {
            tool: call.tool.to_string(),
            command: format!(
                "{} {} blake3:{}",
                call.tool,
                call.paths.join(" "),
                call.content_hash
            ),
            cwd: String::new(),
            tier,
            policy_hash: session.policy.hash.clone(),
        };
        let preview = Preview::new(key, classification, redactor.redact(&call.diff).0);
        let actor = Actor::Peer(peer.uid);
        let ctx = CallContext {
            session_id: call.session_id,
            run_id: call.run_id,
            step_id: call.step_id,
            tool_call_id: call.tool_call_id,
            actor: &actor,
            redactor: Some(&redactor),
        };
        let gate = self
            .approvals
            .decide(&ctx, &preview, call.approve)
            .map_err(|e| FileGateRefusal {
                error: e.into(),
                awaiting_answer: false,
            })?;
        match gate.refusal() {
            None => Ok(gate.approval_id().map(str::to_string)),
            Some(r) => Err(FileGateRefusal {
                awaiting_answer: matches!(gate, Gate::Ask(_)),
                error: SessionError::PermissionDenied(match &gate {
                    Gate::Ask(req) => format!(
                        "{r}: {}; grant it with `warden approve {}`, then repeat the same call in the same session (or set approve, `--yes`, to grant once)",
                        preview.summary, req.id
                    ),
                    _ => r,
                }),
            }),
        }
    }
}
