//! Agent runs: the run record (task, model, status), its latest run state
//! (message history, plan, counters as JSON chosen by the client) and token
//! and cost counters. Stored in the `runs` table.

use rusqlite::{params, OptionalExtension};

use super::{Peer, SessionError, SessionManager};

/// Run statuses a client may finish a run with.
pub const FINISH_STATUSES: &[&str] = &["done", "failed", "stopped", "interrupted"];
/// Largest run state accepted in one call, bytes.
pub const MAX_STATE_BYTES: usize = 64 << 20;

/// One agent run as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Run {
    pub id: String,
    pub session_id: String,
    pub task: String,
    /// Workspace root of the run's session.
    pub workspace: String,
    pub policy_name: String,
    pub model: String,
    /// running | done | failed | stopped | interrupted
    pub status: String,
    pub state_json: String,
    pub steps: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Cost in micro-dollars.
    pub cost_micros: u64,
    pub resumed_from_step: String,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

fn valid_client_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl SessionManager {
    /// Starts a run in an open session. `run_id` may be chosen by the client
    /// (ASCII letters, digits, `-`, `_`; at most 128), else the daemon picks.
    /// Errors: NotFound, PermissionDenied, FailedPrecondition (closed
    /// session, run id taken), InvalidArgument.
    pub fn create_run(
        &self,
        peer: Peer,
        session_id: &str,
        task: &str,
        model: &str,
        run_id: &str,
    ) -> Result<Run, SessionError> {
        let s = self.open_session_for(session_id, peer)?;
        if task.contains('\0') || model.contains('\0') {
            return Err(SessionError::InvalidArgument(
                "task and model must not contain NUL bytes".into(),
            ));
        }
        let id = if run_id.is_empty() {
            crate::new_id()
        } else if valid_client_id(run_id) {
            run_id.to_string()
        } else {
            return Err(SessionError::InvalidArgument(format!(
                "run_id {run_id:?}: use letters, digits, '-' and '_' (at most 128)"
            )));
        };
        let now = crate::now_ms();
        let n = self.db().lock().execute(
            "INSERT OR IGNORE INTO runs (id, session_id, task, model, status, created_at_ms, updated_at_ms) VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?5)",
            params![id, s.id, task, model, now],
        )?;
        if n == 0 {
            return Err(SessionError::FailedPrecondition(format!(
                "run {id} already exists"
            )));
        }
        self.get_run(peer, &id)
    }

    /// Loads a run. Errors: NotFound, PermissionDenied (another uid's).
    pub fn get_run(&self, peer: Peer, run_id: &str) -> Result<Run, SessionError> {
        if run_id.is_empty() {
            return Err(SessionError::InvalidArgument("run_id is required".into()));
        }
        let row = self
            .db()
            .lock()
            .query_row(
                "SELECT r.id, r.session_id, r.task, s.workspace, s.policy_name, r.model, r.status, r.state_json, r.steps,
                        r.input_tokens, r.output_tokens, r.cost_micros, r.resumed_from_step, r.created_at_ms, r.updated_at_ms, s.peer_uid
                 FROM runs r JOIN sessions s ON s.id = r.session_id WHERE r.id = ?1",
                [run_id],
                |r| {
                    Ok((
                        Run {
                            id: r.get(0)?,
                            session_id: r.get(1)?,
                            task: r.get(2)?,
                            workspace: r.get(3)?,
                            policy_name: r.get(4)?,
                            model: r.get(5)?,
                            status: r.get(6)?,
                            state_json: r.get(7)?,
                            steps: r.get::<_, i64>(8)? as u64,
                            input_tokens: r.get::<_, i64>(9)? as u64,
                            output_tokens: r.get::<_, i64>(10)? as u64,
                            cost_micros: r.get::<_, i64>(11)? as u64,
                            resumed_from_step: r.get(12)?,
                            created_at_ms: r.get(13)?,
                            updated_at_ms: r.get(14)?,
                        },
                        r.get::<_, u32>(15)?,
                    ))
                },
            )
            .optional()?;
        let Some((run, owner)) = row else {
            return Err(SessionError::NotFound(format!("unknown run {run_id:?}")));
        };
        if peer.uid != 0 && peer.uid != owner {
            return Err(SessionError::PermissionDenied(format!(
                "run {run_id} belongs to uid {owner}"
            )));
        }
        Ok(run)
    }

    /// Runs of a session (or of every session the peer owns), newest first.
    pub fn list_runs(
        &self,
        peer: Peer,
        session_id: &str,
        limit: u32,
    ) -> Result<Vec<Run>, SessionError> {
        let limit = if limit == 0 { 100 } else { limit.min(10_000) };
        let ids: Vec<String> = {
            let conn = self.db().lock();
            let mut st = conn.prepare(
                "SELECT r.id FROM runs r JOIN sessions s ON s.id = r.session_id
                 WHERE (?1 = '' OR r.session_id = ?1) AND (?2 OR s.peer_uid = ?3)
                 ORDER BY r.created_at_ms DESC, r.id DESC LIMIT ?4",
            )?;
            let rows = st.query_map(params![session_id, peer.uid == 0, peer.uid, limit], |r| {
                r.get(0)
            })?;
            rows.collect::<Result<_, _>>()?
        };
        ids.iter().map(|id| self.get_run(peer, id)).collect()
    }

    /// Stores the run state after a step and adds to the counters.
    /// Errors: NotFound, PermissionDenied, InvalidArgument (state not JSON or
    /// over [`MAX_STATE_BYTES`]), FailedPrecondition (run already finished).
    pub fn record_run_state(
        &self,
        peer: Peer,
        run_id: &str,
        state_json: &str,
        tokens: (u64, u64),
        cost_micros: u64,
    ) -> Result<Run, SessionError> {
        let run = self.get_run(peer, run_id)?;
        if state_json.len() > MAX_STATE_BYTES {
            return Err(SessionError::InvalidArgument(format!(
                "run state is over {MAX_STATE_BYTES} bytes"
            )));
        }
        if !state_json.is_empty() && serde_json::from_str::<serde_json::Value>(state_json).is_err()
        {
            return Err(SessionError::InvalidArgument(
                "state_json is not valid JSON".into(),
            ));
        }
        if run.status != "running" {
            return Err(SessionError::FailedPrecondition(format!(
                "run {run_id} is {}",
                run.status
            )));
        }
        self.db().lock().execute(
            "UPDATE runs SET state_json = CASE WHEN ?2 = '' THEN state_json ELSE ?2 END, steps = steps + 1,
                 input_tokens = input_tokens + ?3, output_tokens = output_tokens + ?4, cost_micros = cost_micros + ?5,
                 updated_at_ms = ?6 WHERE id = ?1",
            params![run_id, state_json, tokens.0 as i64, tokens.1 as i64, cost_micros as i64, crate::now_ms()],
        )?;
        self.get_run(peer, run_id)
    }

    /// Sets a run's status (`done`, `failed`, `stopped`, `interrupted`, or
    /// `running` again when resumed). Errors: NotFound, PermissionDenied,
    /// InvalidArgument (unknown status).
    pub fn set_run_status(
        &self,
        peer: Peer,
        run_id: &str,
        status: &str,
    ) -> Result<Run, SessionError> {
        if !FINISH_STATUSES.contains(&status) && status != "running" {
            return Err(SessionError::InvalidArgument(format!(
                "unknown run status {status:?} (expected one of {FINISH_STATUSES:?})"
            )));
        }
        self.get_run(peer, run_id)?;
        self.db().lock().execute(
            "UPDATE runs SET status = ?2, updated_at_ms = ?3 WHERE id = ?1",
            params![run_id, status, crate::now_ms()],
        )?;
        self.get_run(peer, run_id)
    }
}
