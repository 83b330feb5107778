//! Tool declarations and the step journal (issue 10).
//!
//! Every tool declares whether repeating it causes no extra side effect
//! (`idempotent`), what it may affect (`side_effects`: none / workspace /
//! external) and how an external effect could be undone (`compensation`).
//!
//! For each tool call of a run (identified by run id and the model's tool
//! call id) the journal records `planned` before anything runs, `started`
//! durably before the process is spawned or the file is written, and
//! `completed` (with the result) or `failed` after. The same (run id, tool
//! call id) is never executed twice: a second attempt is refused with
//! FailedPrecondition. This answers "did the last tool call finish?" after a
//! crash.

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::{SessionError, SessionManager};
use crate::policy::Tier;
use crate::state::Migrations;

/// The journal's table.
pub const JOURNAL_MIGRATIONS: Migrations = Migrations {
    module: "journal",
    steps: &[r#"
CREATE TABLE step_journal (
    run_id TEXT NOT NULL,
    tool_call_id TEXT NOT NULL,
    step_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    arguments_json TEXT NOT NULL,
    state TEXT NOT NULL,                -- planned | started | completed | failed
    idempotent INTEGER NOT NULL,
    side_effects TEXT NOT NULL,         -- none | workspace | external
    compensation TEXT NOT NULL DEFAULT '',
    tier TEXT NOT NULL DEFAULT '',
    result_json TEXT NOT NULL DEFAULT '',
    pre_checkpoint_id TEXT NOT NULL DEFAULT '',
    post_checkpoint_id TEXT NOT NULL DEFAULT '',
    planned_at_ms INTEGER NOT NULL,
    started_at_ms INTEGER NOT NULL DEFAULT 0,
    finished_at_ms INTEGER NOT NULL DEFAULT 0,
    seq INTEGER NOT NULL,
    PRIMARY KEY (run_id, tool_call_id)
);
CREATE INDEX step_journal_run ON step_journal(run_id, seq);
"#],
};

/// What a tool may affect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SideEffects {
    None,
    Workspace,
    External,
}

impl SideEffects {
    pub fn as_str(self) -> &'static str {
        match self {
            SideEffects::None => "none",
            SideEffects::Workspace => "workspace",
            SideEffects::External => "external",
        }
    }

    fn parse(s: &str) -> SideEffects {
        match s {
            "none" => SideEffects::None,
            "workspace" => SideEffects::Workspace,
            _ => SideEffects::External,
        }
    }
}

/// A tool's declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolDecl {
    pub idempotent: bool,
    pub side_effects: SideEffects,
    /// How to undo an external effect, where one exists.
    pub compensation: Option<String>,
}

/// The declaration of a shell command, derived from its tier: safe-read is
/// idempotent with no side effects; write changes the workspace (not
/// idempotent: `echo >> f` twice differs); network and install are external
/// and not idempotent unless a policy rule declares the command idempotent
/// (`idempotent = true`, e.g. `git fetch`).
pub fn declare_exec(tier: Tier, rule_says_idempotent: bool) -> ToolDecl {
    match tier {
        Tier::SafeRead => ToolDecl {
            idempotent: true,
            side_effects: SideEffects::None,
            compensation: None,
        },
        Tier::Write | Tier::Destructive => ToolDecl {
            idempotent: rule_says_idempotent,
            side_effects: SideEffects::Workspace,
            compensation: Some("roll the workspace back to the step's pre-checkpoint".into()),
        },
        Tier::Network | Tier::Install => ToolDecl {
            idempotent: rule_says_idempotent,
            side_effects: SideEffects::External,
            compensation: None,
        },
    }
}

/// The declaration of a built-in file tool: reads and searches are
/// idempotent without side effects; `write_file` replaces content with fixed
/// content (idempotent); `apply_patch` is idempotent only against the same
/// base hashes, which a re-application checks (a patch applied twice does
/// not apply), so it is declared not idempotent.
pub fn declare_file_tool(tool: &str) -> ToolDecl {
    match tool {
        "read_file" | "list_dir" | "grep" => ToolDecl {
            idempotent: true,
            side_effects: SideEffects::None,
            compensation: None,
        },
        "write_file" => ToolDecl {
            idempotent: true,
            side_effects: SideEffects::Workspace,
            compensation: Some("roll the workspace back to the step's pre-checkpoint".into()),
        },
        _ => ToolDecl {
            idempotent: false,
            side_effects: SideEffects::Workspace,
            compensation: Some("roll the workspace back to the step's pre-checkpoint".into()),
        },
    }
}

/// One journal entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JournalEntry {
    pub run_id: String,
    pub tool_call_id: String,
    pub step_id: String,
    pub session_id: String,
    pub tool: String,
    pub arguments_json: String,
    /// planned | started | completed | failed
    pub state: String,
    pub decl: ToolDecl,
    pub tier: String,
    pub result_json: String,
    pub pre_checkpoint_id: String,
    pub post_checkpoint_id: String,
    pub planned_at_ms: i64,
    pub started_at_ms: i64,
    pub finished_at_ms: i64,
}

/// Identifies one journaled call; `None` when the call carries no run or
/// tool call id (a plain CLI exec), which is then not journaled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallKey {
    pub run_id: String,
    pub tool_call_id: String,
}

impl CallKey {
    /// The key of a call, when it has both ids.
    pub fn of(run_id: &str, tool_call_id: &str) -> Option<CallKey> {
        (!run_id.is_empty() && !tool_call_id.is_empty()).then(|| CallKey {
            run_id: run_id.into(),
            tool_call_id: tool_call_id.into(),
        })
    }
}

/// A journaled call this daemon is executing now. While it lives, the same
/// (run id, tool call id) cannot be planned again and the resume planner
/// waits for it (or reports it as still running, never re-running it).
/// Dropping it (the call ended, returned early or its task was cancelled)
/// wakes [`SessionManager::wait_in_flight`]; drop it only after the call's
/// final journal state is written.
#[must_use = "the call is in flight while this guard lives"]
pub struct InFlight<'a> {
    mgr: &'a SessionManager,
    key: (String, String),
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut set = self.mgr.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        set.remove(&self.key);
        drop(set);
        self.mgr.in_flight_changed.notify_all();
    }
}

impl SessionManager {
    /// Records `planned` for a call and marks it in flight until the
    /// returned guard is dropped. Errors: FailedPrecondition when this
    /// (run id, tool call id) is in flight or was started before (it never
    /// runs twice), NotFound when the run does not exist or belongs to
    /// another session.
    #[allow(clippy::too_many_arguments)]
    pub fn journal_plan(
        &self,
        key: &CallKey,
        session_id: &str,
        step_id: &str,
        tool: &str,
        arguments_json: &str,
        tier: &str,
        decl: &ToolDecl,
    ) -> Result<InFlight<'_>, SessionError> {
        let flight = (key.run_id.clone(), key.tool_call_id.clone());
        if !self
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(flight.clone())
        {
            return Err(SessionError::FailedPrecondition(format!(
                "tool call {} of run {} is still running (its earlier request is in flight): it is never executed twice",
                key.tool_call_id, key.run_id
            )));
        }
        let guard = InFlight {
            mgr: self,
            key: flight,
        };
        self.journal_plan_row(key, session_id, step_id, tool, arguments_json, tier, decl)?;
        Ok(guard)
    }

    /// Tool call ids of `run_id` in flight in this daemon after waiting up
    /// to `max_wait` for them to end (empty when none is left). Calls of a
    /// killed daemon are never in flight in its successor.
    pub fn wait_in_flight(
        &self,
        run_id: &str,
        max_wait: std::time::Duration,
    ) -> std::collections::BTreeSet<String> {
        let of_run = |set: &std::collections::HashSet<(String, String)>| {
            set.iter()
                .filter(|(r, _)| r == run_id)
                .map(|(_, c)| c.clone())
                .collect::<std::collections::BTreeSet<String>>()
        };
        let set = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let (set, _) = self
            .in_flight_changed
            .wait_timeout_while(set, max_wait, |set| !of_run(set).is_empty())
            .unwrap_or_else(|p| p.into_inner());
        of_run(&set)
    }

    #[allow(clippy::too_many_arguments)]
    fn journal_plan_row(
        &self,
        key: &CallKey,
        session_id: &str,
        step_id: &str,
        tool: &str,
        arguments_json: &str,
        tier: &str,
        decl: &ToolDecl,
    ) -> Result<(), SessionError> {
        let conn = self.db().lock();
        let run_session: Option<String> = conn
            .query_row(
                "SELECT session_id FROM runs WHERE id = ?1",
                [&key.run_id],
                |r| r.get(0),
            )
            .optional()?;
        match run_session {
            None => {
                return Err(SessionError::NotFound(format!(
                    "unknown run {:?}",
                    key.run_id
                )))
            }
            Some(s) if s != session_id => {
                return Err(SessionError::FailedPrecondition(format!(
                    "run {} belongs to another session",
                    key.run_id
                )))
            }
            _ => {}
        }
        let existing: Option<(String, i64)> = conn
            .query_row(
                "SELECT state, started_at_ms FROM step_journal WHERE run_id = ?1 AND tool_call_id = ?2",
                params![key.run_id, key.tool_call_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        match existing {
            // Planned or refused but never started: nothing ran, so the call
            // may be planned again (e.g. after the user approved it).
            Some((_, 0)) => {
                conn.execute(
                    "UPDATE step_journal SET state = 'planned', step_id = ?3, arguments_json = ?4, result_json = '', finished_at_ms = 0
                     WHERE run_id = ?1 AND tool_call_id = ?2",
                    params![key.run_id, key.tool_call_id, step_id, arguments_json],
                )?;
                return Ok(());
            }
            Some((state, _)) => {
                return Err(SessionError::FailedPrecondition(format!(
                    "tool call {} of run {} is already {state}: a tool call is never executed twice (see the run's resume plan)",
                    key.tool_call_id, key.run_id
                )))
            }
            None => {}
        }
        let seq: i64 = conn.query_row(
            "SELECT COALESCE(MAX(seq), 0) + 1 FROM step_journal WHERE run_id = ?1",
            [&key.run_id],
            |r| r.get(0),
        )?;
        conn.execute(
            "INSERT INTO step_journal (run_id, tool_call_id, step_id, session_id, tool, arguments_json, state, idempotent, side_effects,
                 compensation, tier, planned_at_ms, seq) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'planned', ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                key.run_id,
                key.tool_call_id,
                step_id,
                session_id,
                tool,
                arguments_json,
                decl.idempotent,
                decl.side_effects.as_str(),
                decl.compensation.clone().unwrap_or_default(),
                tier,
                crate::now_ms(),
                seq
            ],
        )?;
        Ok(())
    }

    /// Records `started` (durable: the database is in WAL mode with
    /// synchronous=FULL) before the tool's effect begins.
    pub fn journal_start(
        &self,
        key: &CallKey,
        pre_checkpoint_id: Option<&str>,
    ) -> Result<(), SessionError> {
        self.db().lock().execute(
            "UPDATE step_journal SET state = 'started', started_at_ms = ?3, pre_checkpoint_id = ?4 WHERE run_id = ?1 AND tool_call_id = ?2",
            params![key.run_id, key.tool_call_id, crate::now_ms(), pre_checkpoint_id.unwrap_or_default()],
        )?;
        Ok(())
    }

    /// Records that a call was not decided because its approval request
    /// got no answer (its caller went away while it waited, or a unary file
    /// tool raised the request and returned): nothing ran, so the call stays
    /// `planned` (the same id may be planned again, and a resume dispatches
    /// it again, asking again), with `result` (the refusal) kept for the
    /// resume plan. A definitive refusal (denied, expired) is
    /// [`Self::journal_finish`] with `completed = false` instead.
    pub fn journal_unanswered(
        &self,
        key: &CallKey,
        result: &serde_json::Value,
    ) -> Result<(), SessionError> {
        self.db().lock().execute(
            "UPDATE step_journal SET state = 'planned', result_json = ?3, finished_at_ms = 0
             WHERE run_id = ?1 AND tool_call_id = ?2 AND started_at_ms = 0",
            params![key.run_id, key.tool_call_id, result.to_string()],
        )?;
        Ok(())
    }

    /// Records `completed` or `failed` with the result.
    pub fn journal_finish(
        &self,
        key: &CallKey,
        completed: bool,
        result: &serde_json::Value,
        post_checkpoint_id: Option<&str>,
    ) -> Result<(), SessionError> {
        self.db().lock().execute(
            "UPDATE step_journal SET state = ?3, result_json = ?4, finished_at_ms = ?5,
                 post_checkpoint_id = CASE WHEN ?6 = '' THEN post_checkpoint_id ELSE ?6 END
             WHERE run_id = ?1 AND tool_call_id = ?2",
            params![
                key.run_id,
                key.tool_call_id,
                if completed { "completed" } else { "failed" },
                result.to_string(),
                crate::now_ms(),
                post_checkpoint_id.unwrap_or_default()
            ],
        )?;
        Ok(())
    }

    /// The journal of a run, in the order calls were planned.
    pub fn journal_for_run(&self, run_id: &str) -> Result<Vec<JournalEntry>, SessionError> {
        let conn = self.db().lock();
        let mut st = conn.prepare(
            "SELECT run_id, tool_call_id, step_id, session_id, tool, arguments_json, state, idempotent, side_effects, compensation, tier,
                    result_json, pre_checkpoint_id, post_checkpoint_id, planned_at_ms, started_at_ms, finished_at_ms
             FROM step_journal WHERE run_id = ?1 ORDER BY seq",
        )?;
        let rows = st.query_map([run_id], |r| {
            let comp: String = r.get(9)?;
            Ok(JournalEntry {
                run_id: r.get(0)?,
                tool_call_id: r.get(1)?,
                step_id: r.get(2)?,
                session_id: r.get(3)?,
                tool: r.get(4)?,
                arguments_json: r.get(5)?,
                state: r.get(6)?,
                decl: ToolDecl {
                    idempotent: r.get(7)?,
                    side_effects: SideEffects::parse(&r.get::<_, String>(8)?),
                    compensation: (!comp.is_empty()).then_some(comp),
                },
                tier: r.get(10)?,
                result_json: r.get(11)?,
                pre_checkpoint_id: r.get(12)?,
                post_checkpoint_id: r.get(13)?,
                planned_at_ms: r.get(14)?,
                started_at_ms: r.get(15)?,
                finished_at_ms: r.get(16)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_follow_the_tier() {
        assert!(declare_exec(Tier::SafeRead, false).idempotent);
        assert_eq!(
            declare_exec(Tier::Write, false).side_effects,
            SideEffects::Workspace
        );
        let net = declare_exec(Tier::Network, false);
        assert!(!net.idempotent && net.side_effects == SideEffects::External);
        assert!(declare_exec(Tier::Network, true).idempotent);
        assert!(declare_file_tool("read_file").idempotent);
        assert!(!declare_file_tool("apply_patch").idempotent);
    }
}
