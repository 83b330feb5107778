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
            // Re-read the daemon's own policy (file or name), as SIGHUP does.
            match POLICY_SOURCE.get() {
                Some(arg) => crate::config::resolve_policy(arg),
                None => Policy::from_toml(&current.name, &current.source),
            }
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

/// The daemon's `--policy` argument (a name or a file), re-read on SIGHUP
/// and by a `ReloadPolicy` call without TOML.
static POLICY_SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Reloads the default policy from `source` (the daemon's `--policy`
/// argument) on every SIGHUP, atomically: the new file is parsed and its
/// rule examples run before it replaces the old policy; a file that is
/// refused is logged and the old policy stays in force. The reload is an
/// audit record (`policy_reload`). Runs until the runtime stops.
pub async fn reload_on_sighup(mgr: Arc<SessionManager>, source: String) {
    use tokio::signal::unix::{signal, SignalKind};
    // A relative policy path keeps meaning what it meant at start.
    let is_path = source.contains('/') || source.ends_with(".toml");
    let source = match std::env::current_dir() {
        Ok(cwd) if is_path && !source.starts_with('/') => cwd.join(&source).display().to_string(),
        _ => source,
    };
    let _ = POLICY_SOURCE.set(source.clone());
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGHUP: policy reload by signal disabled");
            return;
        }
    };
    while hup.recv().await.is_some() {
        let me = crate::session::Peer {
            uid: nix::unistd::getuid().as_raw(),
            gid: nix::unistd::getgid().as_raw(),
            pid: Some(std::process::id() as i32),
        };
        match crate::config::resolve_policy(&source) {
            Ok(p) => {
                let (name, hash) = (p.name.clone(), p.hash.clone());
                match mgr.reload_default_policy(p, me) {
                    Ok(()) => {
                        tracing::info!(policy = %name, hash = %hash, "SIGHUP: policy reloaded")
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "SIGHUP: policy reload failed, the old policy stays in force")
                    }
                }
            }
            Err(e) => tracing::warn!(
                error = %e,
                "SIGHUP: policy refused, the old policy stays in force"
            ),
        }
    }
}
