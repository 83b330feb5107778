//! Peer authentication: Unix-socket peers by uid (SO_PEERCRED, unix(7)),
//! TCP peers by bearer token (RFC 6750 `authorization: Bearer <token>`).

use std::sync::Arc;

use tonic::transport::server::{TcpConnectInfo, UdsConnectInfo};
use tonic::{Request, Status};

use crate::session::Peer;

/// Who may talk to the daemon.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// uids accepted on the Unix socket (the daemon's own is always in).
    pub allowed_uids: Vec<u32>,
    /// Bearer token required on TCP; `None` means TCP is not served.
    pub token: Option<String>,
}

/// A tonic interceptor that authenticates every call and attaches the
/// [`Peer`] to the request's extensions.
#[derive(Debug, Clone)]
pub struct Authenticator {
    cfg: Arc<AuthConfig>,
}

impl Authenticator {
    pub fn new(cfg: AuthConfig) -> Self {
        Authenticator { cfg: Arc::new(cfg) }
    }
}

impl tonic::service::Interceptor for Authenticator {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let peer = if let Some(info) = req.extensions().get::<UdsConnectInfo>() {
            let cred = info
                .peer_cred
                .ok_or_else(|| Status::unauthenticated("peer credentials unavailable"))?;
            let uid = cred.uid();
            if !self.cfg.allowed_uids.contains(&uid) {
                tracing::warn!(uid, "refused peer");
                return Err(Status::permission_denied(format!(
                    "peer uid {uid} is not allowed by this daemon (allowed: {:?})",
                    self.cfg.allowed_uids
                )));
            }
            Peer {
                uid,
                gid: cred.gid(),
                pid: cred.pid(),
            }
        } else if req.extensions().get::<TcpConnectInfo>().is_some() {
            let Some(token) = &self.cfg.token else {
                return Err(Status::unauthenticated("TCP is not enabled"));
            };
            let given = req
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("");
            if !constant_time_eq(given.as_bytes(), token.as_bytes()) {
                return Err(Status::unauthenticated("missing or wrong bearer token"));
            }
            let uid = nix::unistd::geteuid().as_raw();
            Peer {
                uid,
                gid: nix::unistd::getegid().as_raw(),
                pid: None,
            }
        } else {
            return Err(Status::unauthenticated("unknown transport"));
        };
        req.extensions_mut().insert(peer);
        Ok(req)
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
