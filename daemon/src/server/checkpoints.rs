//! `warden.v1.Checkpoints`: list, get, diff, rollback, gc. Proto <-> domain
//! only; the work is in [`crate::session`] (ownership) and
//! [`crate::checkpoint`] (store). Every call does blocking file I/O and runs
//! on `spawn_blocking`.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::{peer, status};
use crate::checkpoint::{Checkpoint, FileChange, RollbackOptions};
use crate::proto::v1::{self as pb, checkpoints_server::Checkpoints};
use crate::session::{SessionError, SessionManager};

pub struct CheckpointsService {
    mgr: Arc<SessionManager>,
}

impl CheckpointsService {
    pub fn new(mgr: Arc<SessionManager>) -> Self {
        CheckpointsService { mgr }
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T, Status>
    where
        T: Send + 'static,
        F: FnOnce(&SessionManager) -> Result<T, SessionError> + Send + 'static,
    {
        let mgr = self.mgr.clone();
        tokio::task::spawn_blocking(move || f(&mgr).map_err(status))
            .await
            .map_err(|e| Status::internal(format!("checkpoint task failed: {e}")))?
    }
}

/// A change-set entry as the proto carries it.
pub(crate) fn change_to_proto(c: &FileChange) -> pb::FileChange {
    pb::FileChange {
        path: c.path.clone(),
        kind: c.kind.as_str().into(),
        old_hash: c.old_hash.clone().unwrap_or_default(),
        new_hash: c.new_hash.clone().unwrap_or_default(),
        from_path: c.from_path.clone().unwrap_or_default(),
        old_mode: c.old_mode.unwrap_or(0),
        new_mode: c.new_mode.unwrap_or(0),
        entry_kind: c.entry_kind.as_str().into(),
        patch: c.patch.clone().unwrap_or_default(),
    }
}

/// A checkpoint record as the proto carries it (patches left out of the
/// changes: `DiffCheckpoints` returns them redacted).
pub(crate) fn checkpoint_to_proto(c: Checkpoint) -> pb::Checkpoint {
    pb::Checkpoint {
        id: c.id,
        kind: c.kind.as_str().into(),
        session_id: c.session_id,
        run_id: c.run_id,
        step_id: c.step_id,
        root_hash: c.root_hash,
        created_at_ms: c.created_at,
        tool: c.tool,
        arguments_json: c.arguments_json,
        tier: c.tier.map(|t| t.to_proto()).unwrap_or(0),
        decision: c.decision.map(|d| d.to_proto()).unwrap_or(0),
        side_effects: c.side_effects.as_str().into(),
        changes: c
            .changes
            .iter()
            .map(|ch| pb::FileChange {
                patch: String::new(),
                ..change_to_proto(ch)
            })
            .collect(),
        complete: c.complete,
        run_state_json: c.run_state_json.unwrap_or_default(),
        approval_ids: c.approval_ids.unwrap_or_default(),
        input_tokens: c.input_tokens.unwrap_or(0),
        output_tokens: c.output_tokens.unwrap_or(0),
        audit_seq: c.audit_seq.unwrap_or(0),
        audit_head: c.audit_head.unwrap_or_default(),
        workspace: c.workspace.to_string_lossy().into_owned(),
        base_id: c.base_id.unwrap_or_default(),
        rollback_of: c.rollback_of.unwrap_or_default(),
        rollback_json: c.rollback_json.unwrap_or_default(),
        not_stored: c.not_stored,
        compensation: c.compensation.unwrap_or_default(),
        result_json: c.result_json.unwrap_or_default(),
        entry_count: c.entry_count,
        total_bytes: c.total_bytes,
        new_blob_bytes: c.new_blob_bytes,
        change_count: c.changes.len() as u64,
    }
}

#[tonic::async_trait]
impl Checkpoints for CheckpointsService {
    async fn list_checkpoints(
        &self,
        req: Request<pb::ListCheckpointsRequest>,
    ) -> Result<Response<pb::ListCheckpointsResponse>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        let cps = self
            .blocking(move |m| m.list_checkpoints(peer, &r.session_id, &r.run_id, r.limit))
            .await?;
        Ok(Response::new(pb::ListCheckpointsResponse {
            // Without change sets: one large rollback would otherwise push
            // the list past any message limit (`change_count` says how many).
            checkpoints: cps
                .into_iter()
                .map(|c| pb::Checkpoint {
                    changes: Vec::new(),
                    ..checkpoint_to_proto(c)
                })
                .collect(),
        }))
    }

    async fn get_checkpoint(
        &self,
        req: Request<pb::GetCheckpointRequest>,
    ) -> Result<Response<pb::Checkpoint>, Status> {
        let peer = peer(&req)?;
        let id = req.into_inner().checkpoint_id;
        let cp = self.blocking(move |m| m.get_checkpoint(peer, &id)).await?;
        Ok(Response::new(checkpoint_to_proto(cp)))
    }

    async fn diff_checkpoints(
        &self,
        req: Request<pb::DiffCheckpointsRequest>,
    ) -> Result<Response<pb::DiffCheckpointsResponse>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        let d = self
            .blocking(move |m| m.diff_checkpoints(peer, &r.from_checkpoint_id, &r.to_checkpoint_id))
            .await?;
        Ok(Response::new(pb::DiffCheckpointsResponse {
            changes: d.changes.iter().map(change_to_proto).collect(),
            patch: d.patch,
        }))
    }

    async fn rollback(
        &self,
        req: Request<pb::RollbackRequest>,
    ) -> Result<Response<pb::RollbackResponse>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        let opts = RollbackOptions {
            files: r.files,
            conversation: r.conversation,
            include_git: r.include_git,
            force: r.force,
        };
        let rep = self
            .blocking(move |m| m.rollback_checkpoint(peer, &r.checkpoint_id, &opts))
            .await?;
        Ok(Response::new(pb::RollbackResponse {
            checkpoint_id: rep.checkpoint_id,
            restored: rep.restored.iter().map(change_to_proto).collect(),
            not_restored: rep.not_restored,
            external_effects: rep
                .external_effects
                .into_iter()
                .map(|e| pb::ExternalEffect {
                    step_id: e.step_id,
                    tool: e.tool,
                    summary: e.summary,
                    compensation: e.compensation,
                    checkpoint_id: e.checkpoint_id,
                })
                .collect(),
            archived_branch_id: rep.archived_branch_id.unwrap_or_default(),
            drifted: rep.drifted,
            drift_checkpoint_id: rep.drift_checkpoint_id.unwrap_or_default(),
        }))
    }

    async fn gc(&self, req: Request<pb::GcRequest>) -> Result<Response<pb::GcResponse>, Status> {
        let peer = peer(&req)?;
        let g = self.blocking(move |m| m.gc_checkpoints(peer)).await?;
        Ok(Response::new(pb::GcResponse {
            checkpoints_deleted: g.checkpoints_deleted,
            checkpoints_kept: g.checkpoints_kept,
            blobs_deleted: g.blobs_deleted,
            bytes_freed: g.bytes_freed,
            bytes_kept: g.bytes_kept,
        }))
    }
}
