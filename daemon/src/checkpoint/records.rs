//! Checkpoint records in the state database (table `checkpoints`, see
//! [`super::MIGRATIONS`]).

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

use super::changes::FileChange;
use super::{CheckpointError, Result};
use crate::policy::{Decision, Tier};

/// pre (before a step), post (after it), rollback (a rollback's result).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointKind {
    Pre,
    Post,
    Rollback,
}

impl CheckpointKind {
    /// `pre`, `post`, `rollback`.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointKind::Pre => "pre",
            CheckpointKind::Post => "post",
            CheckpointKind::Rollback => "rollback",
        }
    }
    fn parse(s: &str) -> CheckpointKind {
        match s {
            "pre" => CheckpointKind::Pre,
            "post" => CheckpointKind::Post,
            _ => CheckpointKind::Rollback,
        }
    }
}

/// Whether a step had side effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SideEffects {
    #[default]
    None,
    /// Changed the workspace only (undoable by a files rollback).
    Workspace,
    /// Reached outside (network, installs, MCP tools): never undone.
    External,
}

impl SideEffects {
    /// `none`, `workspace`, `external`.
    pub fn as_str(self) -> &'static str {
        match self {
            SideEffects::None => "none",
            SideEffects::Workspace => "workspace",
            SideEffects::External => "external",
        }
    }
    fn parse(s: &str) -> SideEffects {
        match s {
            "workspace" => SideEffects::Workspace,
            "external" => SideEffects::External,
            _ => SideEffects::None,
        }
    }
}

/// What the caller knows about a step when it checkpoints. Every optional
/// field is stored as NULL when `None` (filled by later issues: history,
/// plan, approvals, tokens, run state, audit head).
#[derive(Debug, Clone, Default)]
pub struct CheckpointMeta {
    pub session_id: String,
    pub run_id: String,
    pub step_id: String,
    pub tool_call_id: String,
    /// The tool: `exec`, `write_file`, `apply_patch`, ...
    pub tool: String,
    /// JSON of the tool call's arguments (redacted by the caller).
    pub arguments_json: String,
    pub tier: Option<Tier>,
    pub decision: Option<Decision>,
    pub side_effects: SideEffects,
    /// What undoes an external effect, as the tool declared it.
    pub compensation: Option<String>,
    /// JSON of the tool result summary (exit code, ...), post only.
    pub result_json: Option<String>,
    /// Reference the message history can be rebuilt from.
    pub history_ref: Option<String>,
    pub plan_json: Option<String>,
    pub approval_ids: Vec<String>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cost_micros: Option<u64>,
    /// Run state at this checkpoint; when `None` and `run_id` is set, the
    /// store copies `runs.state_json` of that run.
    pub run_state_json: Option<String>,
    pub audit_seq: Option<u64>,
    pub audit_head: Option<String>,
}

/// A step with external effects that a rollback did not (cannot) undo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalEffect {
    pub checkpoint_id: String,
    pub step_id: String,
    pub tool: String,
    /// The call's arguments (JSON, cut to 200 chars).
    pub summary: String,
    /// The compensation the tool declared, empty if none.
    pub compensation: String,
}

/// A complete checkpoint record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checkpoint {
    pub id: String,
    pub kind: CheckpointKind,
    pub session_id: String,
    pub run_id: String,
    pub step_id: String,
    pub root_hash: String,
    /// Unix epoch ms.
    pub created_at: i64,
    /// Order of writing (monotonic across the store).
    pub seq: i64,
    pub workspace: PathBuf,
    pub tool_call_id: String,
    pub tool: String,
    pub arguments_json: String,
    pub tier: Option<Tier>,
    pub decision: Option<Decision>,
    pub side_effects: SideEffects,
    pub compensation: Option<String>,
    pub result_json: Option<String>,
    /// The checkpoint the change set is relative to (`None` for the first).
    pub base_id: Option<String>,
    pub changes: Vec<FileChange>,
    pub entry_count: u64,
    /// Sum of file sizes, bytes.
    pub total_bytes: u64,
    /// Bytes of blobs this checkpoint added to the store.
    pub new_blob_bytes: u64,
    /// Files over the size cap (hashed, content not stored).
    pub not_stored: Vec<String>,
    pub history_ref: Option<String>,
    pub plan_json: Option<String>,
    pub approval_ids: Option<Vec<String>>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cost_micros: Option<u64>,
    pub run_state_json: Option<String>,
    pub audit_seq: Option<u64>,
    pub audit_head: Option<String>,
    /// For a rollback: the checkpoint rolled back to.
    pub rollback_of: Option<String>,
    /// For a rollback: the report JSON (not restored, external effects).
    pub rollback_json: Option<String>,
    /// The git-based variant, when recorded: `<commit id> <ref name>`.
    pub git_ref: Option<String>,
    pub complete: bool,
}

/// Which checkpoints [`super::CheckpointStore::list`] returns: empty
/// strings match everything; newest first; `limit` 0 means 1000.
#[derive(Debug, Clone, Default)]
pub struct CheckpointFilter {
    pub session_id: String,
    pub run_id: String,
    pub limit: u32,
}

pub(crate) const COLUMNS: &str = "seq, id, workspace, session_id, run_id, step_id, tool_call_id, kind, tool, arguments_json, tier, decision, side_effects, compensation, result_json, base_id, changes_json, root_hash, entry_count, total_bytes, new_blob_bytes, not_stored_json, history_ref, plan_json, approval_ids_json, input_tokens, output_tokens, cost_micros, run_state_json, audit_seq, audit_head, rollback_of, rollback_json, git_ref, complete, created_at_ms, settings_json";

fn opt_u64(v: Option<i64>) -> Option<u64> {
    v.map(|x| x as u64)
}

pub(crate) fn from_row(r: &Row) -> rusqlite::Result<(Checkpoint, String)> {
    let json_err = |i: usize, e: serde_json::Error| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
    };
    let changes: String = r.get(16)?;
    let not_stored: String = r.get(21)?;
    let approvals: Option<String> = r.get(24)?;
    let tier: Option<String> = r.get(10)?;
    let decision: Option<String> = r.get(11)?;
    let cp = Checkpoint {
        seq: r.get(0)?,
        id: r.get(1)?,
        workspace: PathBuf::from(r.get::<_, String>(2)?),
        session_id: r.get(3)?,
        run_id: r.get(4)?,
        step_id: r.get(5)?,
        tool_call_id: r.get(6)?,
        kind: CheckpointKind::parse(&r.get::<_, String>(7)?),
        tool: r.get(8)?,
        arguments_json: r.get(9)?,
        tier: tier.and_then(|t| t.parse().ok()),
        decision: decision.and_then(|d| d.parse().ok()),
        side_effects: SideEffects::parse(&r.get::<_, String>(12)?),
        compensation: r.get(13)?,
        result_json: r.get(14)?,
        base_id: r.get(15)?,
        changes: serde_json::from_str(&changes).map_err(|e| json_err(16, e))?,
        root_hash: r.get(17)?,
        entry_count: r.get::<_, i64>(18)? as u64,
        total_bytes: r.get::<_, i64>(19)? as u64,
        new_blob_bytes: r.get::<_, i64>(20)? as u64,
        not_stored: serde_json::from_str(&not_stored).map_err(|e| json_err(21, e))?,
        history_ref: r.get(22)?,
        plan_json: r.get(23)?,
        approval_ids: approvals
            .map(|a| serde_json::from_str(&a))
            .transpose()
            .map_err(|e| json_err(24, e))?,
        input_tokens: opt_u64(r.get(25)?),
        output_tokens: opt_u64(r.get(26)?),
        cost_micros: opt_u64(r.get(27)?),
        run_state_json: r.get(28)?,
        audit_seq: opt_u64(r.get(29)?),
        audit_head: r.get(30)?,
        rollback_of: r.get(31)?,
        rollback_json: r.get(32)?,
        git_ref: r.get(33)?,
        complete: r.get::<_, i64>(34)? != 0,
        created_at: r.get(35)?,
    };
    Ok((cp, r.get(36)?))
}

/// Everything [`insert`] writes beyond the meta.
pub(crate) struct NewRecord<'a> {
    pub id: &'a str,
    pub workspace: &'a str,
    pub kind: CheckpointKind,
    pub meta: &'a CheckpointMeta,
    pub base_id: Option<&'a str>,
    pub changes: &'a [FileChange],
    pub root_hash: &'a str,
    pub entry_count: u64,
    pub total_bytes: u64,
    pub new_blob_bytes: u64,
    pub not_stored: &'a [String],
    pub settings_json: &'a str,
    pub rollback_of: Option<&'a str>,
    pub rollback_json: Option<&'a str>,
}

/// Inserts a complete record in one transaction (call only once its blobs
/// are durable). Returns its seq.
pub(crate) fn insert(conn: &mut Connection, n: &NewRecord) -> Result<i64> {
    let m = n.meta;
    let run_state: Option<String> = match &m.run_state_json {
        Some(s) => Some(s.clone()),
        None if !m.run_id.is_empty() => conn
            .prepare_cached("SELECT state_json FROM runs WHERE id = ?1")?
            .query_row([&m.run_id], |r| r.get::<_, String>(0))
            .optional()?
            .filter(|s| !s.is_empty()),
        None => None,
    };
    let write = |tx: &rusqlite::Transaction<'_>| -> Result<i64> {
        tx.prepare_cached(
        "INSERT INTO checkpoints (id, workspace, session_id, run_id, step_id, tool_call_id, kind, tool, arguments_json, tier, decision, side_effects, compensation, result_json, base_id, changes_json, root_hash, entry_count, total_bytes, new_blob_bytes, not_stored_json, settings_json, history_ref, plan_json, approval_ids_json, input_tokens, output_tokens, cost_micros, run_state_json, audit_seq, audit_head, rollback_of, rollback_json, complete, created_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, 1, ?34)",
        )?
        .execute(params![
            n.id,
            n.workspace,
            m.session_id,
            m.run_id,
            m.step_id,
            m.tool_call_id,
            n.kind.as_str(),
            m.tool,
            if m.arguments_json.is_empty() { "{}" } else { &m.arguments_json },
            m.tier.map(|t| t.as_str()),
            m.decision.map(|d| d.as_str()),
            m.side_effects.as_str(),
            m.compensation,
            m.result_json,
            n.base_id,
            to_json(n.changes),
            n.root_hash,
            n.entry_count as i64,
            n.total_bytes as i64,
            n.new_blob_bytes as i64,
            to_json(n.not_stored),
            n.settings_json,
            m.history_ref,
            m.plan_json,
            (!m.approval_ids.is_empty()).then(|| to_json(&m.approval_ids)),
            m.input_tokens.map(|v| v as i64),
            m.output_tokens.map(|v| v as i64),
            m.cost_micros.map(|v| v as i64),
            run_state,
            m.audit_seq.map(|v| v as i64),
            m.audit_head,
            n.rollback_of,
            n.rollback_json,
            crate::now_ms(),
        ],
    )?;
        Ok(tx.last_insert_rowid())
    };
    // A step's pre/post checkpoint becomes durable with the step's next
    // durable record (`exec_start` before the command, `exec_end`,
    // `file_change`, `mcp_call_*` after it): its blobs are synced already,
    // and losing the record to a power loss before then leaves the previous
    // complete checkpoint, never a half one. A rollback's record is the end
    // of its call: durable at once.
    if n.kind == CheckpointKind::Rollback {
        let tx = conn.transaction()?;
        let seq = write(&tx)?;
        tx.commit()?;
        Ok(seq)
    } else {
        crate::state::write_deferred(conn, write)
    }
}

/// JSON text of plain data (cannot fail for these types; "null" otherwise).
fn to_json<T: Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

/// A complete checkpoint by id, with its settings JSON.
pub(crate) fn get(conn: &Connection, id: &str) -> Result<(Checkpoint, String)> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM checkpoints WHERE id = ?1 AND complete = 1"
    ))?
    .query_row([id], from_row)
    .optional()?
    .ok_or_else(|| CheckpointError::NotFound(id.to_string()))
}

/// Complete checkpoints of a workspace after `seq`, oldest first.
pub(crate) fn after(conn: &Connection, workspace: &str, seq: i64) -> Result<Vec<Checkpoint>> {
    let mut st = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM checkpoints WHERE workspace = ?1 AND seq > ?2 AND complete = 1 ORDER BY seq"
    ))?;
    let rows = st.query_map(params![workspace, seq], |r| from_row(r).map(|x| x.0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(crate) fn list(conn: &Connection, f: &CheckpointFilter) -> Result<Vec<Checkpoint>> {
    let limit = if f.limit == 0 {
        1000
    } else {
        f.limit.min(100_000)
    };
    let mut st = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM checkpoints WHERE complete = 1 AND (?1 = '' OR session_id = ?1) AND (?2 = '' OR run_id = ?2) ORDER BY seq DESC LIMIT ?3"
    ))?;
    let rows = st.query_map(params![f.session_id, f.run_id, limit], |r| {
        from_row(r).map(|x| x.0)
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
