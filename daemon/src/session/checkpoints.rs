//! The checkpoint steps of the tool-call pipeline (pre before a tool runs,
//! post after it exits) and the checkpoint queries, with ownership checks:
//! a peer sees the checkpoints of its own sessions (closed ones included);
//! root sees all. The store itself is [`crate::checkpoint::CheckpointStore`].

use std::collections::HashMap;

use crate::checkpoint::{
    Checkpoint, CheckpointError, CheckpointFilter, CheckpointMeta, CheckpointStore, Diff, GcReport,
    RollbackOptions, RollbackReport, SideEffects,
};
use crate::policy::Tier;

use super::resume::CheckpointView;
use super::{check_owner, Peer, Session, SessionError, SessionManager};

impl From<CheckpointError> for SessionError {
    fn from(e: CheckpointError) -> Self {
        match e {
            CheckpointError::NotFound(id) => {
                SessionError::NotFound(format!("unknown checkpoint {id:?}"))
            }
            e @ CheckpointError::Drift { .. } => SessionError::FailedPrecondition(e.to_string()),
            e @ (CheckpointError::Invalid(_) | CheckpointError::Exclude { .. }) => {
                SessionError::InvalidArgument(e.to_string())
            }
            e if e.is_disk_full() => {
                SessionError::Unavailable(format!("checkpoint store full: {e}"))
            }
            e => SessionError::Internal(format!("checkpoint: {e}")),
        }
    }
}

/// Side effects of a step: tiers that reach outside are `external`; any
/// workspace change is `workspace`; otherwise `none`.
pub fn side_effects_of(tier: Tier, changed_workspace: bool) -> SideEffects {
    match tier {
        Tier::Network | Tier::Install => SideEffects::External,
        _ if changed_workspace => SideEffects::Workspace,
        _ => SideEffects::None,
    }
}

impl SessionManager {
    /// The checkpoint store (over the daemon's state dir and database).
    pub fn checkpoints(&self) -> &CheckpointStore {
        &self.checkpoints
    }

    /// Records the pre-checkpoint of a step in `session`'s workspace
    /// (blocking: call from `spawn_blocking`). `None` when the session's
    /// policy disables checkpoints. A step whose pre-checkpoint fails must
    /// not run (fail closed). Errors: Unavailable (disk full), Internal.
    pub fn checkpoint_pre(
        &self,
        session: &Session,
        meta: &CheckpointMeta,
    ) -> Result<Option<Checkpoint>, SessionError> {
        let settings = &session.policy.file.checkpoint;
        if !settings.enabled {
            return Ok(None);
        }
        let meta = &self.with_audit_head(meta);
        Ok(Some(self.checkpoints.pre_step(
            &session.workspace,
            settings,
            meta,
        )?))
    }

    /// Records the post-checkpoint of a step (blocking) with its change set
    /// against `pre_id`. Errors as [`Self::checkpoint_pre`].
    pub fn checkpoint_post(
        &self,
        session: &Session,
        pre_id: &str,
        meta: &CheckpointMeta,
    ) -> Result<Option<Checkpoint>, SessionError> {
        let settings = &session.policy.file.checkpoint;
        if !settings.enabled {
            return Ok(None);
        }
        let meta = &self.with_audit_head(meta);
        Ok(Some(self.checkpoints.post_step(
            &session.workspace,
            settings,
            pre_id,
            meta,
        )?))
    }

    fn owned_checkpoint(&self, peer: Peer, id: &str) -> Result<Checkpoint, SessionError> {
        if id.is_empty() {
            return Err(SessionError::InvalidArgument(
                "checkpoint_id is required".into(),
            ));
        }
        let cp = self.checkpoints.get(id)?;
        let s = self.get_session(&cp.session_id)?;
        check_owner(&s, peer)?;
        Ok(cp)
    }

    /// Complete checkpoints visible to `peer`, newest first; empty
    /// `session_id` / `run_id` match all (closed sessions included);
    /// `limit` 0 means 1000. Errors: NotFound / PermissionDenied for a
    /// session that is unknown or not the peer's.
    pub fn list_checkpoints(
        &self,
        peer: Peer,
        session_id: &str,
        run_id: &str,
        limit: u32,
    ) -> Result<Vec<Checkpoint>, SessionError> {
        if !session_id.is_empty() {
            let s = self.get_session(session_id)?;
            check_owner(&s, peer)?;
        }
        let all = self.checkpoints.list(&CheckpointFilter {
            session_id: session_id.to_string(),
            run_id: run_id.to_string(),
            limit,
        })?;
        let mut owners: HashMap<String, bool> = HashMap::new();
        Ok(all
            .into_iter()
            .filter(|c| {
                *owners.entry(c.session_id.clone()).or_insert_with(|| {
                    self.get_session(&c.session_id)
                        .is_ok_and(|s| check_owner(&s, peer).is_ok())
                })
            })
            .collect())
    }

    /// One checkpoint. Errors: InvalidArgument (empty id), NotFound,
    /// PermissionDenied.
    pub fn get_checkpoint(&self, peer: Peer, id: &str) -> Result<Checkpoint, SessionError> {
        self.owned_checkpoint(peer, id)
    }

    /// Changes from checkpoint `from` to `to` (empty: the current
    /// workspace), with the patch text redacted by the session's policy.
    pub fn diff_checkpoints(&self, peer: Peer, from: &str, to: &str) -> Result<Diff, SessionError> {
        let a = self.owned_checkpoint(peer, from)?;
        if !to.is_empty() {
            self.owned_checkpoint(peer, to)?;
        }
        let mut d = self
            .checkpoints
            .diff(&a.id, (!to.is_empty()).then_some(to))?;
        let s = self.get_session(&a.session_id)?;
        let redactor = self.redactor(&s);
        d.patch = redactor.redact(&d.patch).0;
        for c in &mut d.changes {
            if let Some(p) = &c.patch {
                c.patch = Some(redactor.redact(p).0);
            }
        }
        Ok(d)
    }

    /// Rolls back to checkpoint `id` (see
    /// [`CheckpointStore::rollback`]); works after the session closed.
    /// Errors: NotFound, PermissionDenied, FailedPrecondition (drift, with
    /// the drifted paths).
    pub fn rollback_checkpoint(
        &self,
        peer: Peer,
        id: &str,
        opts: &RollbackOptions,
    ) -> Result<RollbackReport, SessionError> {
        let cp = self.owned_checkpoint(peer, id)?;
        let ws = cp.workspace.clone();
        // One writer per workspace (see SessionManager::exec).
        let step_lock = self.checkpoints.step_lock(&ws);
        let _one_writer = step_lock.blocking_lock();
        // A rollback writes files like any other writer: nested git hooks
        // and config it brings back (a checkpoint taken after a command
        // planted them, before their quarantine) are quarantined again.
        let before = super::nested_git::scan(&ws);
        let mut report = self.checkpoints.rollback(&cp.id, opts)?;
        let checked = super::nested_git::check(&ws, &before);
        for p in &checked.done {
            report.not_restored.push(format!(
                "{p}: quarantined (renamed *{}): a nested repository's git hook/config would run code on your next git command",
                super::nested_git::QUARANTINE_SUFFIX
            ));
        }
        for (p, e) in &checked.failed {
            report
                .not_restored
                .push(format!("{p}: WARNING: a nested git hook/config could not be quarantined ({e}); inspect it before running git there"));
        }
        self.audit_rollback(peer, &cp, opts, &report)?;
        Ok(report)
    }

    /// Retention over every workspace, with the default policy's
    /// `[checkpoint]` limits. Only root or the daemon's own uid may run it.
    pub fn gc_checkpoints(&self, peer: Peer) -> Result<GcReport, SessionError> {
        let me = nix::unistd::geteuid().as_raw();
        if peer.uid != 0 && peer.uid != me {
            return Err(SessionError::PermissionDenied(
                "gc is for root or the daemon's own user".into(),
            ));
        }
        let p = self.default_policy();
        let s = &p.file.checkpoint;
        Ok(self.checkpoints.gc(s.keep_runs, s.max_store_bytes)?)
    }

    /// What the checkpoint store tells the resume planner.
    pub fn store_checkpoint_view(&self) -> Box<dyn CheckpointView + '_> {
        Box::new(StoreView(self))
    }
}

struct StoreView<'a>(&'a SessionManager);

impl CheckpointView for StoreView<'_> {
    fn latest(&self, run_id: &str) -> Option<(String, Vec<String>)> {
        let cps = self
            .0
            .checkpoints
            .list(&CheckpointFilter {
                run_id: run_id.to_string(),
                limit: 1,
                ..Default::default()
            })
            .ok()?;
        let cp = cps.into_iter().next()?;
        let drifted = self
            .0
            .checkpoints
            .diff(&cp.id, None)
            .map(|d| d.changes.into_iter().map(|c| c.path).collect())
            .unwrap_or_default();
        Some((cp.id, drifted))
    }

    fn changed_since(&self, checkpoint_id: &str) -> Option<Vec<String>> {
        self.0
            .checkpoints
            .diff(checkpoint_id, None)
            .ok()
            .map(|d| d.changes.into_iter().map(|c| c.path).collect())
    }
}

impl SessionManager {
    /// The pre (no `pre_id`) or post checkpoint of a step, off the async
    /// runtime's threads.
    pub async fn checkpoint_step(
        self: &std::sync::Arc<Self>,
        session: &Session,
        pre_id: Option<&str>,
        meta: &CheckpointMeta,
    ) -> Result<Option<Checkpoint>, SessionError> {
        Ok(self
            .checkpoint_step_scanning(session, pre_id, meta, false)
            .await?
            .0)
    }

    /// [`Self::checkpoint_step`]; with `nested_git`, the same walk also
    /// collects the control paths of nested git repositories
    /// ([`super::nested_git::Scan`], `Some` whenever a checkpoint was taken;
    /// `None` when the policy disables checkpoints: then the caller scans
    /// on its own).
    pub async fn checkpoint_step_scanning(
        self: &std::sync::Arc<Self>,
        session: &Session,
        pre_id: Option<&str>,
        meta: &CheckpointMeta,
        nested_git: bool,
    ) -> Result<(Option<Checkpoint>, Option<super::nested_git::Scan>), SessionError> {
        let (mgr, s, m) = (self.clone(), session.clone(), meta.clone());
        let pre_id = pre_id.map(str::to_string);
        tokio::task::spawn_blocking(move || match (pre_id, nested_git) {
            (id, true) => mgr.checkpoint_with_nested_git(&s, id.as_deref(), &m),
            (None, false) => Ok((mgr.checkpoint_pre(&s, &m)?, None)),
            (Some(id), false) => Ok((mgr.checkpoint_post(&s, &id, &m)?, None)),
        })
        .await
        .map_err(|e| SessionError::Internal(format!("checkpoint task: {e}")))?
    }

    /// The pre (no `pre_id`) or post checkpoint of a step and the nested
    /// git scan of the same walk (blocking). `(None, None)` when the
    /// session's policy disables checkpoints. Errors as
    /// [`Self::checkpoint_pre`].
    fn checkpoint_with_nested_git(
        &self,
        session: &Session,
        pre_id: Option<&str>,
        meta: &CheckpointMeta,
    ) -> Result<(Option<Checkpoint>, Option<super::nested_git::Scan>), SessionError> {
        let settings = &session.policy.file.checkpoint;
        if !settings.enabled {
            return Ok((None, None));
        }
        let meta = &self.with_audit_head(meta);
        let (cp, scan) =
            self.checkpoints
                .step_with_nested_git(&session.workspace, settings, pre_id, meta)?;
        Ok((Some(cp), Some(scan)))
    }
}

impl SessionManager {
    /// The checkpoint meta of a write-tier file tool call (arguments JSON
    /// redacted by the session's policy).
    pub fn file_tool_meta(
        &self,
        session: &Session,
        call: &super::FileToolCall<'_>,
        args: &serde_json::Value,
    ) -> CheckpointMeta {
        CheckpointMeta {
            session_id: session.id.clone(),
            run_id: call.run_id.to_string(),
            step_id: call.step_id.to_string(),
            tool_call_id: call.tool_call_id.to_string(),
            tool: call.tool.to_string(),
            arguments_json: self.redactor(session).redact(&args.to_string()).0,
            tier: Some(Tier::Write),
            decision: Some(session.policy.file.tiers.decide(Tier::Write)),
            side_effects: SideEffects::None,
            ..Default::default()
        }
    }

    /// The post-checkpoint of a file tool call (blocking); a failure is
    /// logged (the write already happened) and yields `None`.
    pub fn file_tool_post(
        &self,
        session: &Session,
        pre: Option<&Checkpoint>,
        meta: &CheckpointMeta,
    ) -> Option<Checkpoint> {
        let pre = pre?;
        match self.checkpoint_post(session, &pre.id, meta) {
            Ok(cp) => cp,
            Err(e) => {
                tracing::error!(session = %session.id, error = %e, "post-checkpoint failed");
                None
            }
        }
    }
}
