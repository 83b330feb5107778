//! `warden.v1.Policy`: get, reload, classify.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::exec::classification_to_proto;
use super::{peer, status};
use crate::policy::{ClassifyContext, Policy};
use crate::proto::v1::{self as pb, policy_server::Policy as PolicyRpc};
use crate::session::SessionManager;

pub struct PolicyService {
    mgr: Arc<SessionManager>,
}

impl PolicyService {
    pub fn new(mgr: Arc<SessionManager>) -> Self {
        PolicyService { mgr }
    }

    fn policy_for(
        &self,
        session_id: &str,
        peer: crate::session::Peer,
    ) -> Result<(Arc<Policy>, ClassifyContext), Status> {
        if session_id.is_empty() {
            return Ok((self.mgr.default_policy(), ClassifyContext::default()));
        }
        let s = self
            .mgr
            .open_session_for(session_id, peer)
            .map_err(status)?;
        Ok((
            s.policy.clone(),
            ClassifyContext {
                workspace: Some(s.workspace.clone()),
                cwd: None,
            },
        ))
    }
}

fn info(p: &Policy) -> pb::PolicyInfo {
    pb::PolicyInfo {
        name: p.name.clone(),
        hash: p.hash.clone(),
        toml: p.source.clone(),
        loaded_at_ms: 0,
    }
}

#[tonic::async_trait]
impl PolicyRpc for PolicyService {
    async fn get_policy(
        &self,
        req: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::PolicyInfo>, Status> {
        let peer = peer(&req)?;
        let (p, _) = self.policy_for(&req.get_ref().session_id, peer)?;
        Ok(Response::new(info(&p)))
    }

    async fn reload_policy(
        &self,
        req: Request<pb::ReloadPolicyRequest>,
    ) -> Result<Response<pb::PolicyInfo>, Status> {
        let peer = peer(&req)?;
        let src = &req.get_ref().policy_toml;
        let current = self.mgr.default_policy();
        let new = if src.is_empty() {
            Policy::from_toml(&current.name, &current.source)
        } else {
            Policy::from_toml(&current.name, src)
        }
        .map_err(|e| {
            Status::invalid_argument(format!("policy refused, the old one stays in force: {e}"))
        })?;
        let out = info(&new);
        self.mgr.reload_default_policy(new, peer).map_err(status)?;
        Ok(Response::new(out))
    }

    async fn classify(
        &self,
        req: Request<pb::ClassifyRequest>,
    ) -> Result<Response<pb::Classification>, Status> {
        let peer = peer(&req)?;
        let r = req.get_ref();
        if r.command.contains('\0') {
            return Err(Status::invalid_argument("command contains a NUL byte"));
        }
        let (p, ctx) = self.policy_for(&r.session_id, peer)?;
        Ok(Response::new(classification_to_proto(
            &p.classify(&r.command, &ctx),
        )))
    }
}
