//! Hosting stdio MCP servers inside the sandbox: one process per (session,
//! server), started on first use through the spawn helper
//! ([`crate::sandbox::Spawner::spawn_with_stdin`]) with the session's
//! workspace and sandbox settings, spoken to with rmcp's client over the
//! process's stdin/stdout pipes (MCP specification, "Transports: stdio").
//!
//! Profile by trust ([`profile_for`]): untrusted and verified servers see
//! the workspace read-only with no network, so they cannot change it
//! between calls unseen; trusted servers may write it (and reach the network
//! when the policy says `network = true`).
//!
//! Servers end when their session is closed or they sat idle for
//! [`IDLE_KILL_MS`], on daemon shutdown (registered as running commands),
//! and with the daemon (the spawn helper kills every sandbox it started).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use tokio::io::AsyncReadExt;

use super::config::{ServerConfig, Trust};
use super::McpError;
use crate::sandbox::{Enforcement, KillHandle, Profile, SpawnRequest};
use crate::session::{Session, SessionManager};

/// A server unused this long is stopped (started again on next use), ms.
pub const IDLE_KILL_MS: i64 = 15 * 60 * 1000;
/// How often servers of closed sessions and idle servers are stopped, ms.
const SWEEP_MS: u64 = 2_000;
/// Bytes of a server's standard error kept for error messages.
const STDERR_TAIL_BYTES: usize = 4096;

/// The sandbox profile of a server: `write` (or `network` with
/// `network = true`) for trusted servers, `safe-read` otherwise.
pub fn profile_for(cfg: &ServerConfig) -> Profile {
    match (cfg.trust, cfg.network) {
        (Trust::Trusted, true) => Profile::Network,
        (Trust::Trusted, false) => Profile::Write,
        _ => Profile::SafeRead,
    }
}

/// One running server.
pub struct Running {
    service: RunningService<RoleClient, ()>,
    kill: KillHandle,
    exited: Arc<AtomicBool>,
    stderr: Arc<Mutex<Vec<u8>>>,
    last_used_ms: AtomicI64,
    /// The config it was started with (a session's policy never changes).
    pub config: ServerConfig,
    pub profile: Profile,
    pub landlock: Enforcement,
    /// Pid of the sandbox's init, in the daemon's pid namespace.
    pub pid: u32,
    /// Protected paths (workspace-relative) that did not exist when a
    /// server that may write the workspace started: the sandbox cannot make
    /// them read-only, so what it creates there is removed after each call.
    pub absent_protected: Vec<std::path::PathBuf>,
    /// Nested git control paths as last checked (before the server started,
    /// then after each call): what a server that may write the workspace
    /// creates or changes there, during a call or between calls, is
    /// quarantined after the next call ([`crate::session::nested_git`]).
    /// `None` for a read-only server.
    pub nested_git: Mutex<Option<crate::session::nested_git::Scan>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill.kill();
    }
}

impl Running {
    /// The last bytes the server wrote on its standard error (lossy UTF-8).
    pub fn stderr_tail(&self) -> String {
        let b = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&b).trim().to_string()
    }

    fn alive(&self) -> bool {
        !self.exited.load(Ordering::SeqCst) && !self.service.is_transport_closed()
    }

    fn touch(&self) {
        self.last_used_ms.store(crate::now_ms(), Ordering::Relaxed);
    }

    fn failure(&self, what: &str, e: impl std::fmt::Display) -> McpError {
        let tail = self.stderr_tail();
        McpError::Server {
            server: self.config.name.clone(),
            message: if tail.is_empty() {
                format!("{what}: {e}")
            } else {
                format!("{what}: {e}; its stderr ends: {tail}")
            },
        }
    }

    /// `tools/list` (every page), bounded by the call timeout; a server
    /// past it is killed.
    ///
    /// Errors: [`McpError::Server`] (transport closed, protocol error),
    /// [`McpError::Timeout`].
    pub async fn list_tools(&self) -> Result<Vec<Tool>, McpError> {
        self.bounded("tools/list".into(), self.service.list_all_tools())
            .await
    }

    /// Runs one request under the call timeout; a server past it is killed
    /// (started again on next use).
    async fn bounded<T>(
        &self,
        what: String,
        fut: impl std::future::Future<Output = Result<T, rmcp::ServiceError>>,
    ) -> Result<T, McpError> {
        self.touch();
        let t = Duration::from_millis(self.config.call_timeout_ms);
        let r = tokio::time::timeout(t, fut).await;
        self.touch();
        match r {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.failure(&what, e)),
            Err(_) => {
                self.kill.kill();
                Err(McpError::Timeout {
                    server: self.config.name.clone(),
                    what,
                    ms: self.config.call_timeout_ms,
                })
            }
        }
    }

    /// `tools/call`, bounded by the call timeout; a server past it is
    /// killed (and started again on next use).
    ///
    /// Errors: as [`Running::list_tools`].
    pub async fn call_tool(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<CallToolResult, McpError> {
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        self.bounded(format!("tools/call {tool}"), self.service.call_tool(params))
            .await
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<Arc<Running>>>>;

/// The servers of every session. Cheap to share (`Arc`).
pub struct McpHost {
    mgr: Weak<SessionManager>,
    slots: Mutex<HashMap<(String, String), Slot>>,
}

impl McpHost {
    /// A host spawning through `mgr`'s spawner; starts the sweeper that
    /// stops servers of closed sessions and idle ones (it ends with the
    /// host). Call from within a tokio runtime.
    pub fn new(mgr: &Arc<SessionManager>) -> Arc<McpHost> {
        let host = Arc::new(McpHost {
            mgr: Arc::downgrade(mgr),
            slots: Mutex::new(HashMap::new()),
        });
        let weak = Arc::downgrade(&host);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(SWEEP_MS));
            loop {
                tick.tick().await;
                let Some(h) = weak.upgrade() else { return };
                h.sweep();
            }
        });
        host
    }

    fn mgr(&self) -> Result<Arc<SessionManager>, McpError> {
        self.mgr
            .upgrade()
            .ok_or_else(|| McpError::Unavailable("the daemon is shutting down".into()))
    }

    /// Stops servers whose session is closed (or gone), that exited, or
    /// that sat idle past [`IDLE_KILL_MS`].
    pub fn sweep(&self) {
        let Some(mgr) = self.mgr.upgrade() else {
            return;
        };
        let now = crate::now_ms();
        let entries: Vec<((String, String), Slot)> = self
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (key, slot) in entries {
            let session_open = mgr.get_session(&key.0).is_ok_and(|s| s.is_open());
            let Ok(mut g) = slot.try_lock() else {
                continue; // starting or in use right now
            };
            let stop = match g.as_ref() {
                None => !session_open,
                Some(r) => {
                    !session_open
                        || !r.alive()
                        || now - r.last_used_ms.load(Ordering::Relaxed) > IDLE_KILL_MS
                }
            };
            if stop {
                if let Some(r) = g.take() {
                    tracing::info!(session = %key.0, server = %key.1, "stopping MCP server");
                    r.kill.kill();
                }
                if !session_open {
                    drop(g);
                    self.slots
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&key);
                }
            }
        }
    }

    /// Stops every server of `session_id` now.
    pub fn stop_session(&self, session_id: &str) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.retain(|(sid, _), slot| {
            if sid != session_id {
                return true;
            }
            if let Ok(mut g) = slot.try_lock() {
                g.take();
            }
            false
        });
    }

    /// The running server `cfg` of `session`, started (sandboxed, MCP
    /// handshake done within `startup_timeout_ms`) if it is not running.
    ///
    /// Errors: [`McpError::Unsupported`] for a `url` server;
    /// [`McpError::Start`] when the sandbox refuses or the process cannot
    /// start (with its stderr); [`McpError::Timeout`] when the handshake
    /// takes too long; [`McpError::Unavailable`] on shutdown.
    pub async fn get(
        &self,
        session: &Session,
        cfg: &ServerConfig,
    ) -> Result<Arc<Running>, McpError> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            slots
                .entry((session.id.clone(), cfg.name.clone()))
                .or_default()
                .clone()
        };
        let mut g = slot.lock().await;
        if let Some(r) = g.as_ref() {
            if r.alive() {
                r.touch();
                return Ok(r.clone());
            }
            tracing::info!(session = %session.id, server = %cfg.name, stderr = %r.stderr_tail(), "MCP server exited; starting it again");
        }
        *g = None;
        let r = Arc::new(self.start(session, cfg).await?);
        *g = Some(r.clone());
        Ok(r)
    }

    async fn start(&self, session: &Session, cfg: &ServerConfig) -> Result<Running, McpError> {
        let Some(command) = &cfg.command else {
            return Err(McpError::Unsupported(format!(
                "MCP server {:?} is a streamable HTTP server ({}): only stdio servers are hosted (they run in the sandbox); refused",
                cfg.name,
                cfg.url.as_deref().unwrap_or("")
            )));
        };
        let mgr = self.mgr()?;
        let start_err = |m: String| McpError::Start {
            server: cfg.name.clone(),
            message: m,
        };
        let pipe = || {
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| start_err(format!("pipe2: {e}")))
        };
        let (in_r, in_w) = pipe()?;
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let mut env = crate::session::exec::base_env();
        for (k, v) in &cfg.env {
            env.retain(|(ek, _)| ek != k);
            env.push((k.clone(), v.clone()));
        }
        let profile = profile_for(cfg);
        let absent_protected = if profile == Profile::SafeRead {
            Vec::new()
        } else {
            crate::session::exec::absent_protected(
                &session.workspace,
                &session.policy.file.sandbox.protected_in(&session.workspace),
            )
        };
        let nested_git = if profile == Profile::SafeRead {
            None
        } else {
            Some(crate::session::nested_git::baseline(session.workspace.clone()).await)
        };
        let mut argv = vec![command.clone()];
        argv.extend(cfg.args.iter().cloned());
        let req = SpawnRequest {
            argv,
            env,
            workspace: session.workspace.clone(),
            cwd: session.workspace.clone(),
            profile,
            settings: session.policy.file.sandbox.clone(),
            cache_dir: None,
            fallback: None,
        };
        let mut child = mgr
            .spawner()
            .spawn_with_stdin(req, in_r, out_w, err_w)
            .await
            .map_err(|e| start_err(format!("could not start {command:?} in the sandbox: {e}")))?;
        let kill = child.kill_handle();
        let reg = match mgr.register_running(kill.clone()) {
            Ok(k) => k,
            Err(e) => {
                child.kill();
                return Err(McpError::Unavailable(e.to_string()));
            }
        };
        let (pid, landlock) = (child.pid, child.landlock);
        let exited = Arc::new(AtomicBool::new(false));
        {
            let exited = exited.clone();
            let weak = Arc::downgrade(&mgr);
            tokio::spawn(async move {
                let _ = child.wait().await;
                exited.store(true, Ordering::SeqCst);
                if let Some(m) = weak.upgrade() {
                    m.unregister_running(reg);
                }
            });
        }
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut tail_task = Some(tokio::spawn(keep_tail(err_r, stderr.clone())));
        let io = (|| -> std::io::Result<_> {
            Ok((
                tokio::net::unix::pipe::Receiver::from_owned_fd(out_r)?,
                tokio::net::unix::pipe::Sender::from_owned_fd(in_w)?,
            ))
        })();
        let (rx, tx) = match io {
            Ok(p) => p,
            Err(e) => {
                kill.kill();
                return Err(start_err(format!("pipes: {e}")));
            }
        };
        let t = Duration::from_millis(cfg.startup_timeout_ms);
        let service = match tokio::time::timeout(t, ().serve((rx, tx))).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                kill.kill();
                // The sandbox is gone: its stderr reaches end of file once
                // the reader took what the process said (bounded wait).
                if let Some(t) = tail_task.take() {
                    let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
                }
                let tail =
                    String::from_utf8_lossy(&stderr.lock().unwrap_or_else(|p| p.into_inner()))
                        .trim()
                        .to_string();
                return Err(start_err(format!(
                    "MCP initialisation failed: {e}{}",
                    if tail.is_empty() {
                        String::new()
                    } else {
                        format!("; its stderr ends: {tail}")
                    }
                )));
            }
            Err(_) => {
                kill.kill();
                return Err(McpError::Timeout {
                    server: cfg.name.clone(),
                    what: "start-up and initialize".into(),
                    ms: cfg.startup_timeout_ms,
                });
            }
        };
        tracing::info!(session = %session.id, server = %cfg.name, trust = cfg.trust.as_str(), profile = profile.as_str(), pid, "MCP server started");
        Ok(Running {
            service,
            kill,
            exited,
            stderr,
            last_used_ms: AtomicI64::new(crate::now_ms()),
            config: cfg.clone(),
            profile,
            landlock,
            pid,
            absent_protected,
            nested_git: Mutex::new(nested_git),
        })
    }
}

/// Reads a server's stderr to the end, keeping the last
/// [`STDERR_TAIL_BYTES`].
async fn keep_tail(fd: OwnedFd, tail: Arc<Mutex<Vec<u8>>>) {
    let Ok(mut rx) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) else {
        return;
    };
    let mut buf = vec![0u8; 4096];
    loop {
        match rx.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                t.extend_from_slice(&buf[..n]);
                if t.len() > STDERR_TAIL_BYTES {
                    let cut = t.len() - STDERR_TAIL_BYTES;
                    t.drain(..cut);
                }
            }
        }
    }
}
