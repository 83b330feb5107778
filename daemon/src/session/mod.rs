//! Sessions, runs, steps, run state, resume planning, and the tool-call
//! pipeline ([`exec`]).
//!
//! A session binds a canonical workspace root, a policy (its TOML content and
//! hash) and the peer uid that opened it. Sessions live in the state database
//! (`sessions` table, see [`crate::state::SESSION_MIGRATIONS`]).

mod approve;
mod checkpoints;
pub mod exec;
pub mod journal;
pub mod nested_git;
pub(crate) mod phases;
pub mod resume;

pub use approve::{FileGateRefusal, FileToolCall};
pub use checkpoints::side_effects_of;
pub mod runs;

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{params, OptionalExtension};

use crate::policy::{Policy, PolicyError};
use crate::sandbox::{KillHandle, Spawner};
use crate::state::{Db, StateError};

/// Errors of session management and the tool-call pipeline.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Malformed request (empty command, NUL byte, absurd timeout, ...).
    #[error("{0}")]
    InvalidArgument(String),
    /// Unknown session or run id.
    #[error("{0}")]
    NotFound(String),
    /// The peer may not do this (workspace it cannot write, state dir inside).
    #[error("{0}")]
    PermissionDenied(String),
    /// State conflict (closed session).
    #[error("{0}")]
    FailedPrecondition(String),
    /// Daemon shutting down.
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<rusqlite::Error> for SessionError {
    fn from(e: rusqlite::Error) -> Self {
        SessionError::State(StateError::Sql(e))
    }
}

/// One session as stored.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: String,
    /// Canonical absolute workspace root.
    pub workspace: PathBuf,
    pub policy: Arc<Policy>,
    /// `open` or `closed`.
    pub state: String,
    pub peer_uid: u32,
    pub labels: HashMap<String, String>,
    pub created_at_ms: i64,
    pub closed_at_ms: i64,
}

impl Session {
    /// Whether the session is still open.
    pub fn is_open(&self) -> bool {
        self.state == "open"
    }
}

/// Who is calling: the peer's credentials (SO_PEERCRED on the Unix socket;
/// for TCP peers authenticated by token, the daemon's own uid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
}

impl Peer {
    /// An actor string for audit records: `uid:N`.
    pub fn actor(&self) -> String {
        format!("uid:{}", self.uid)
    }
}

/// Owns sessions and the running commands; the entry point of every tool
/// call below the gRPC layer.
pub struct SessionManager {
    db: Db,
    state_dir: PathBuf,
    spawner: Spawner,
    default_policy: Mutex<Arc<Policy>>,
    running: Mutex<HashMap<u64, KillHandle>>,
    next_exec: std::sync::atomic::AtomicU64,
    shutting_down: std::sync::atomic::AtomicBool,
    /// Policy cache by hash, so sessions share parsed policies.
    policies: Mutex<HashMap<String, Arc<Policy>>>,
    /// Approval requests, grants and the audit log.
    approvals: crate::approval::Approvals,
    /// Workspace snapshots, checkpoints and rollback.
    checkpoints: crate::checkpoint::CheckpointStore,
    /// Journaled tool calls (run id, tool call id) this daemon is executing
    /// now: a call still in flight (its client gone) is never planned again.
    in_flight: Mutex<std::collections::HashSet<(String, String)>>,
    /// Notified whenever a call leaves `in_flight`.
    in_flight_changed: std::sync::Condvar,
}

impl std::fmt::Debug for SessionManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionManager")
            .field("state_dir", &self.state_dir)
            .finish()
    }
}

impl SessionManager {
    /// A manager over `db`, spawning through `spawner`. `state_dir` must be
    /// canonical (workspaces containing it are refused). Opens the audit log
    /// (`state_dir/audit.head`) and verifies it; a broken chain is reported,
    /// not fatal.
    ///
    /// Errors: Internal when the audit log cannot be opened.
    pub fn new(
        db: Db,
        state_dir: PathBuf,
        spawner: Spawner,
        default_policy: Policy,
    ) -> Result<SessionManager, SessionError> {
        let approvals = approve::open_approvals(&db, &state_dir)?;
        let checkpoints = crate::checkpoint::CheckpointStore::open(&state_dir, db.clone())
            .map_err(|e| SessionError::Internal(format!("checkpoint store: {e}")))?;
        Ok(SessionManager {
            checkpoints,
            approvals,
            db,
            state_dir,
            spawner,
            default_policy: Mutex::new(Arc::new(default_policy)),
            running: Mutex::new(HashMap::new()),
            next_exec: std::sync::atomic::AtomicU64::new(1),
            shutting_down: std::sync::atomic::AtomicBool::new(false),
            policies: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(Default::default()),
            in_flight_changed: std::sync::Condvar::new(),
        })
    }

    /// The session's redactor: the policy's rules (compiled once per
    /// settings), a marker key derived from the session id, and the
    /// session's marker memory, so markers are stable across its calls and
    /// a write carrying them can be restored. Secret values the policy
    /// gives its MCP servers in `env` are known secrets of the session.
    pub fn redactor(&self, session: &Session) -> crate::redact::Redactor {
        crate::redact::Redactor::for_session_id(&session.policy.file.redact, &session.id)
            .with_env_secrets(
                session
                    .policy
                    .file
                    .mcp
                    .servers
                    .iter()
                    .flat_map(|s| s.env.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
            )
    }

    /// The state database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The daemon's state directory.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The spawn helper handle.
    pub fn spawner(&self) -> &Spawner {
        &self.spawner
    }

    /// The daemon's default policy (used when a session sends none).
    pub fn default_policy(&self) -> Arc<Policy> {
        self.default_policy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the default policy (reload). Existing sessions keep theirs.
    pub fn set_default_policy(&self, policy: Policy) {
        *self
            .default_policy
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Arc::new(policy);
    }

    fn intern_policy(&self, name: &str, toml: &str) -> Result<Arc<Policy>, SessionError> {
        let hash = blake3::hash(toml.as_bytes()).to_hex().to_string();
        let key = format!("{name}\0{hash}");
        if let Some(p) = self
            .policies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(p.clone());
        }
        let p = Arc::new(Policy::from_toml(name, toml)?);
        self.policies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, p.clone());
        Ok(p)
    }

    /// Opens a session on `workspace` for `peer`.
    ///
    /// Errors: InvalidArgument (relative, missing, not a directory, bad
    /// policy), PermissionDenied (the peer could not write it itself; it
    /// contains the state dir or lies inside it), Unavailable (shutting down).
    pub fn create_session(
        &self,
        workspace: &str,
        policy_name: &str,
        policy_toml: &str,
        labels: HashMap<String, String>,
        peer: Peer,
    ) -> Result<Session, SessionError> {
        self.check_running()?;
        let root = validate_workspace(workspace, &self.state_dir, peer)?;
        // Refused here, before any checkpoint copies it: every command in it
        // would be refused by the sandbox anyway.
        if let Some(h) = self.spawner().hidden_overlap(&root) {
            return Err(SessionError::PermissionDenied(format!(
                "workspace {} overlaps {}, which no sandboxed command may see (daemon state or runtime files): use a project directory",
                root.display(),
                h.display()
            )));
        }
        let policy = if policy_toml.is_empty() {
            self.default_policy()
        } else {
            let name = if policy_name.is_empty() {
                "custom"
            } else {
                policy_name
            };
            self.intern_policy(name, policy_toml)?
        };
        let session = Session {
            id: crate::new_id(),
            workspace: root,
            policy,
            state: "open".into(),
            peer_uid: peer.uid,
            labels,
            created_at_ms: crate::now_ms(),
            closed_at_ms: 0,
        };
        let labels_json = serde_json::to_string(&session.labels).unwrap_or_else(|_| "{}".into());
        // Durable with the session's first durable record (nothing of it
        // needs the disk before then: a session lost to a power loss had
        // no effect yet).
        crate::state::write_deferred(&mut self.db.lock(), |tx| {
            tx.prepare_cached(
                "INSERT INTO sessions (id, workspace, policy_name, policy_hash, policy_toml, state, peer_uid, labels_json, created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, 'open', ?6, ?7, ?8)",
            )?
            .execute(params![
                    session.id,
                    session.workspace.to_string_lossy(),
                    session.policy.name,
                    session.policy.hash,
                    session.policy.source,
                    session.peer_uid,
                    labels_json,
                    session.created_at_ms
                ])
        })?;
        tracing::info!(session = %session.id, workspace = %session.workspace.display(), policy = %session.policy.name, "session created");
        Ok(session)
    }

    /// Loads a session. Errors: InvalidArgument (empty id), NotFound.
    pub fn get_session(&self, id: &str) -> Result<Session, SessionError> {
        if id.is_empty() {
            return Err(SessionError::InvalidArgument(
                "session_id is required".into(),
            ));
        }
        let row = self
            .db
            .lock()
            .prepare_cached(
                "SELECT id, workspace, policy_name, policy_toml, state, peer_uid, labels_json, created_at_ms, closed_at_ms FROM sessions WHERE id = ?1",
            )?
            .query_row(
                [id],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, u32>(5)?,
                        r.get::<_, String>(6)?,
                        r.get::<_, i64>(7)?,
                        r.get::<_, i64>(8)?,
                    ))
                },
            )
            .optional()?;
        let Some((id, ws, pname, ptoml, state, uid, labels, created, closed)) = row else {
            return Err(SessionError::NotFound(format!("unknown session {id:?}")));
        };
        Ok(Session {
            id,
            workspace: PathBuf::from(ws),
            policy: self.intern_policy(&pname, &ptoml)?,
            state,
            peer_uid: uid,
            labels: serde_json::from_str(&labels).unwrap_or_default(),
            created_at_ms: created,
            closed_at_ms: closed,
        })
    }

    /// Loads a session that must be open and belong to `peer` (root may use
    /// any). Errors: NotFound, PermissionDenied, FailedPrecondition (closed).
    pub fn open_session_for(&self, id: &str, peer: Peer) -> Result<Session, SessionError> {
        let s = self.get_session(id)?;
        check_owner(&s, peer)?;
        if !s.is_open() {
            return Err(SessionError::FailedPrecondition(format!(
                "session {id} is closed"
            )));
        }
        Ok(s)
    }

    /// Sessions visible to `peer`, newest first.
    pub fn list_sessions(
        &self,
        peer: Peer,
        include_closed: bool,
        limit: u32,
    ) -> Result<Vec<Session>, SessionError> {
        let limit = if limit == 0 { 100 } else { limit.min(10_000) };
        let ids: Vec<String> = {
            let conn = self.db.lock();
            let mut st = conn.prepare(
                "SELECT id FROM sessions WHERE (?1 OR state = 'open') AND (?2 OR peer_uid = ?3) ORDER BY created_at_ms DESC, id DESC LIMIT ?4",
            )?;
            let rows = st.query_map(
                params![include_closed, peer.uid == 0, peer.uid, limit],
                |r| r.get(0),
            )?;
            rows.collect::<Result<_, _>>()?
        };
        ids.iter().map(|id| self.get_session(id)).collect()
    }

    /// Closes a session (idempotent). Errors: NotFound, PermissionDenied.
    pub fn close_session(&self, id: &str, peer: Peer) -> Result<Session, SessionError> {
        let s = self.get_session(id)?;
        check_owner(&s, peer)?;
        if s.is_open() {
            // Not fsynced: a close lost to a power loss leaves the session
            // open (its grants and pending requests end below regardless,
            // and a later close is idempotent).
            crate::state::write_deferred(&mut self.db.lock(), |tx| {
                tx.prepare_cached(
                    "UPDATE sessions SET state = 'closed', closed_at_ms = ?2 WHERE id = ?1 AND state = 'open'",
                )?
                .execute(params![id, crate::now_ms()])
            })?;
        }
        // Pending requests expire and grants end with the session.
        self.approvals.end_session(id)?;
        exec::remove_session_cache(id);
        self.get_session(id)
    }

    /// Opens a session for one call (a one-shot `Exec`): created exactly as
    /// [`SessionManager::create_session`] (same checks, the caller's
    /// credentials, no labels), closed by [`OneShotSession::close`] or, if
    /// the call is abandoned first (client gone, task dropped), when the
    /// guard is dropped, so it never stays open behind its call.
    ///
    /// Errors: those of `create_session`.
    pub fn open_one_shot(
        self: &Arc<Self>,
        workspace: &str,
        policy_name: &str,
        policy_toml: &str,
        peer: Peer,
    ) -> Result<OneShotSession, SessionError> {
        let session =
            self.create_session(workspace, policy_name, policy_toml, HashMap::new(), peer)?;
        Ok(OneShotSession {
            mgr: self.clone(),
            session: Some(session),
            peer,
        })
    }

    fn check_running(&self) -> Result<(), SessionError> {
        if self.shutting_down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(SessionError::Unavailable("daemon is shutting down".into()));
        }
        Ok(())
    }

    /// Registers a running command so shutdown can kill it; returns its key.
    pub(crate) fn register_running(&self, kill: KillHandle) -> Result<u64, SessionError> {
        self.check_running()?;
        let key = self
            .next_exec
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, kill);
        Ok(key)
    }

    pub(crate) fn unregister_running(&self, key: u64) {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
    }

    /// Refuses new work and kills every running command (graceful shutdown).
    pub fn shutdown(&self) {
        self.shutting_down
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let running: Vec<KillHandle> = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, k)| k)
            .collect();
        for k in &running {
            k.kill();
        }
        tracing::info!(killed = running.len(), "shutdown: running commands killed");
    }
}

/// A session opened for a single call by [`SessionManager::open_one_shot`];
/// closed (pending approval requests expire, grants end) by
/// [`OneShotSession::close`] or on drop.
pub struct OneShotSession {
    mgr: Arc<SessionManager>,
    /// `None` once closed.
    session: Option<Session>,
    peer: Peer,
}

impl OneShotSession {
    /// The session as created (state open).
    pub fn session(&self) -> &Session {
        self.session.as_ref().expect("open until closed")
    }

    /// Closes the session and returns it as stored (state closed).
    ///
    /// Errors: those of [`SessionManager::close_session`] (state database).
    pub fn close(mut self) -> Result<Session, SessionError> {
        let s = self.session.take().expect("open until closed");
        self.mgr.close_session(&s.id, self.peer)
    }
}

impl Drop for OneShotSession {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            if let Err(e) = self.mgr.close_session(&s.id, self.peer) {
                tracing::error!(session = %s.id, error = %e, "closing a one-shot session failed");
            }
        }
    }
}

fn check_owner(s: &Session, peer: Peer) -> Result<(), SessionError> {
    if peer.uid != 0 && peer.uid != s.peer_uid {
        return Err(SessionError::PermissionDenied(format!(
            "session {} belongs to uid {}, not to the calling uid {}",
            s.id, s.peer_uid, peer.uid
        )));
    }
    Ok(())
}

/// Validates a workspace root for `peer` and returns its canonical path.
///
/// Refuses: an empty or relative path, NUL bytes, a path that does not exist
/// or is not a directory (InvalidArgument); a directory the peer could not
/// write itself by its mode bits (owner, primary group, supplementary groups
/// of the peer's user, other), one that contains the daemon's state dir or
/// lies inside it (PermissionDenied).
pub fn validate_workspace(
    workspace: &str,
    state_dir: &Path,
    peer: Peer,
) -> Result<PathBuf, SessionError> {
    if workspace.is_empty() {
        return Err(SessionError::InvalidArgument(
            "workspace is required".into(),
        ));
    }
    if workspace.contains('\0') {
        return Err(SessionError::InvalidArgument(
            "workspace path contains a NUL byte".into(),
        ));
    }
    let p = Path::new(workspace);
    if !p.is_absolute() {
        return Err(SessionError::InvalidArgument(format!(
            "workspace {workspace:?} is not an absolute path"
        )));
    }
    let root = std::fs::canonicalize(p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            SessionError::InvalidArgument(format!("workspace {workspace:?} does not exist"))
        }
        _ => SessionError::InvalidArgument(format!("workspace {workspace:?}: {e}")),
    })?;
    let meta = std::fs::metadata(&root)
        .map_err(|e| SessionError::InvalidArgument(format!("workspace {workspace:?}: {e}")))?;
    if !meta.is_dir() {
        return Err(SessionError::InvalidArgument(format!(
            "workspace {workspace:?} is not a directory"
        )));
    }
    if root == Path::new("/") {
        return Err(SessionError::PermissionDenied(
            "the filesystem root cannot be a workspace".into(),
        ));
    }
    let state = std::fs::canonicalize(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
    if state.starts_with(&root) || root.starts_with(&state) {
        return Err(SessionError::PermissionDenied(format!(
            "workspace {} contains or lies inside the daemon's state directory",
            root.display()
        )));
    }
    if !peer_can_write(&meta, peer) {
        return Err(SessionError::PermissionDenied(format!(
            "uid {} cannot write workspace {} itself (owner uid {}, mode {:o})",
            peer.uid,
            root.display(),
            meta.uid(),
            meta.mode() & 0o7777
        )));
    }
    Ok(root)
}

fn peer_can_write(meta: &std::fs::Metadata, peer: Peer) -> bool {
    if peer.uid == 0 {
        return true;
    }
    let mode = meta.mode();
    if meta.uid() == peer.uid {
        return mode & 0o300 == 0o300;
    }
    if peer_in_group(peer, meta.gid()) {
        return mode & 0o030 == 0o030;
    }
    mode & 0o003 == 0o003
}

fn peer_in_group(peer: Peer, gid: u32) -> bool {
    if peer.gid == gid {
        return true;
    }
    let Ok(Some(user)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(peer.uid)) else {
        return false;
    };
    let Ok(name) = std::ffi::CString::new(user.name) else {
        return false;
    };
    nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(peer.gid))
        .map(|gs| gs.iter().any(|g| g.as_raw() == gid))
        .unwrap_or(false)
}
