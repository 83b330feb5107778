//! `warden.v1.Approvals`: list, get and answer approval requests.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::exec::classification_to_proto;
use super::{peer, status};
use crate::approval::{Answer, ApprovalRecord, ApprovalState, Preview, Scope};
use crate::proto::v1::{self as pb, approvals_server::Approvals};
use crate::session::SessionManager;

pub struct ApprovalsService {
    mgr: Arc<SessionManager>,
}

impl ApprovalsService {
    pub fn new(mgr: Arc<SessionManager>) -> Self {
        ApprovalsService { mgr }
    }
}

/// Domain state -> proto enum value.
pub(crate) fn state_to_proto(s: ApprovalState) -> i32 {
    (match s {
        ApprovalState::Pending => pb::ApprovalState::Pending,
        ApprovalState::Granted => pb::ApprovalState::Granted,
        ApprovalState::Denied => pb::ApprovalState::Denied,
        ApprovalState::Expired => pb::ApprovalState::Expired,
        ApprovalState::Consumed => pb::ApprovalState::Consumed,
    }) as i32
}

/// Domain scope -> proto enum value (unspecified while not granted).
pub(crate) fn scope_to_proto(s: Option<Scope>) -> i32 {
    (match s {
        None => pb::GrantScope::Unspecified,
        Some(Scope::Once) => pb::GrantScope::Once,
        Some(Scope::Session) => pb::GrantScope::Session,
    }) as i32
}

fn preview_to_proto(p: &Preview) -> pb::Preview {
    pb::Preview {
        tool: p.tool.clone(),
        summary: p.summary.clone(),
        classification: Some(classification_to_proto(&p.classification)),
        diff: p.diff.clone(),
        warnings: p.warnings.clone(),
        request_hash: p.request_hash.clone(),
        cwd: p.cwd.clone(),
        policy_hash: p.policy_hash.clone(),
    }
}

/// Domain approval request -> proto.
pub(crate) fn approval_to_proto(r: &ApprovalRecord) -> pb::ApprovalRequest {
    pb::ApprovalRequest {
        id: r.id.clone(),
        session_id: r.session_id.clone(),
        run_id: r.run_id.clone(),
        step_id: r.step_id.clone(),
        preview: Some(preview_to_proto(&r.preview)),
        state: state_to_proto(r.state),
        created_at_ms: r.created_at_ms,
        expires_at_ms: r.expires_at_ms,
        resolved_at_ms: r.resolved_at_ms,
        scope: scope_to_proto(r.scope),
        prefix: r.prefix.clone(),
        reason: r.reason.clone(),
        actor: r.actor.clone(),
        tool_call_id: r.tool_call_id.clone(),
        requested_by: r.requested_by.clone(),
        suggested_prefix: crate::approval::suggest_prefix(&r.preview.classification)
            .unwrap_or_default(),
    }
}

/// Proto `ApproveRequest` -> domain answer (schema layer of Approve).
fn answer_from_proto(r: pb::ApproveRequest) -> Result<Answer, Status> {
    if r.request_id.is_empty() {
        return Err(Status::invalid_argument("request_id is required"));
    }
    let grant = match pb::Decision::try_from(r.decision) {
        Ok(pb::Decision::Allow) => true,
        Ok(pb::Decision::Deny) => false,
        _ => {
            return Err(Status::invalid_argument(
                "decision must be DECISION_ALLOW (grant) or DECISION_DENY",
            ))
        }
    };
    let scope = match pb::GrantScope::try_from(r.scope) {
        Ok(pb::GrantScope::Unspecified) | Ok(pb::GrantScope::Once) => Scope::Once,
        Ok(pb::GrantScope::Session) => Scope::Session,
        Err(_) => {
            return Err(Status::invalid_argument(format!(
                "unknown scope {}",
                r.scope
            )))
        }
    };
    if !r.prefix.is_empty() && (!grant || scope != Scope::Session) {
        return Err(Status::invalid_argument(
            "prefix is only meaningful when granting with session scope",
        ));
    }
    Ok(Answer {
        request_id: r.request_id,
        grant,
        scope,
        prefix: r.prefix,
        reason: r.reason,
    })
}

#[tonic::async_trait]
impl Approvals for ApprovalsService {
    async fn list_approvals(
        &self,
        req: Request<pb::ListApprovalsRequest>,
    ) -> Result<Response<pb::ListApprovalsResponse>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        let list = self
            .mgr
            .list_approvals(peer, &r.session_id, r.pending_only)
            .map_err(status)?;
        Ok(Response::new(pb::ListApprovalsResponse {
            approvals: list.iter().map(approval_to_proto).collect(),
        }))
    }

    async fn get_approval(
        &self,
        req: Request<pb::GetApprovalRequest>,
    ) -> Result<Response<pb::ApprovalRequest>, Status> {
        let peer = peer(&req)?;
        let rec = self
            .mgr
            .get_approval(peer, &req.get_ref().request_id)
            .map_err(status)?;
        Ok(Response::new(approval_to_proto(&rec)))
    }

    async fn approve(
        &self,
        req: Request<pb::ApproveRequest>,
    ) -> Result<Response<pb::ApprovalRequest>, Status> {
        let peer = peer(&req)?;
        let answer = answer_from_proto(req.into_inner())?;
        let rec = self.mgr.answer_approval(peer, &answer).map_err(status)?;
        Ok(Response::new(approval_to_proto(&rec)))
    }
}
