//! `warden.v1.Sessions`.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::{peer, status};
use crate::proto::v1::{self as pb, sessions_server::Sessions};
use crate::session::{Session, SessionManager};

pub struct SessionsService {
    mgr: Arc<SessionManager>,
}

impl SessionsService {
    pub fn new(mgr: Arc<SessionManager>) -> Self {
        SessionsService { mgr }
    }
}

/// Domain session -> proto.
pub(crate) fn to_proto(s: &Session) -> pb::Session {
    pb::Session {
        id: s.id.clone(),
        workspace: s.workspace.to_string_lossy().into_owned(),
        policy_name: s.policy.name.clone(),
        policy_hash: s.policy.hash.clone(),
        state: if s.is_open() {
            pb::SessionState::Open
        } else {
            pb::SessionState::Closed
        } as i32,
        created_at_ms: s.created_at_ms,
        closed_at_ms: s.closed_at_ms,
        peer_uid: s.peer_uid,
        labels: s.labels.clone(),
    }
}

#[tonic::async_trait]
impl Sessions for SessionsService {
    async fn create_session(
        &self,
        req: Request<pb::CreateSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        let mgr = self.mgr.clone();
        let s = tokio::task::spawn_blocking(move || {
            mgr.create_session(&r.workspace, &r.policy_name, &r.policy_toml, r.labels, peer)
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(status)?;
        Ok(Response::new(to_proto(&s)))
    }

    async fn get_session(
        &self,
        req: Request<pb::GetSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let peer = peer(&req)?;
        let s = self
            .mgr
            .get_session(&req.get_ref().session_id)
            .map_err(status)?;
        if peer.uid != 0 && peer.uid != s.peer_uid {
            return Err(Status::permission_denied(format!(
                "session {} belongs to another uid",
                s.id
            )));
        }
        Ok(Response::new(to_proto(&s)))
    }

    async fn list_sessions(
        &self,
        req: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let peer = peer(&req)?;
        let r = req.get_ref();
        let list = self
            .mgr
            .list_sessions(peer, r.include_closed, r.limit)
            .map_err(status)?;
        Ok(Response::new(pb::ListSessionsResponse {
            sessions: list.iter().map(to_proto).collect(),
        }))
    }

    async fn close_session(
        &self,
        req: Request<pb::CloseSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let peer = peer(&req)?;
        let s = self
            .mgr
            .close_session(&req.get_ref().session_id, peer)
            .map_err(status)?;
        Ok(Response::new(to_proto(&s)))
    }
}
