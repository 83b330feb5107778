//! The conservative resume flow of an interrupted run (issue 10):
//!
//! 1. find the latest complete checkpoint of the run;
//! 2. verify the workspace against it (drifted paths are listed; nothing is
//!    overwritten);
//! 3. restore the message history and run state (the run's latest state);
//! 4. from the step journal, determine whether each tool call completed, and
//!    for one that started but never completed, what is known of its effects
//!    (the workspace diff since its pre-checkpoint, when there is one);
//! 5. never replay a non-idempotent call automatically: it is
//!    `needs_decision`; an idempotent one may be re-run; one that was only
//!    planned never ran and may run;
//! 6. write a resume note for the model;
//! 7. mark the run running again and record `resume` in the audit log.
//!
//! Approvals do not carry over: the session's pending requests expire and
//! its session grants end (a denial stays a denial; an unconsumed once-grant
//! is not reused after the restart).

use std::collections::BTreeSet;

use serde::Serialize;

use super::journal::JournalEntry;
use super::{Peer, SessionError, SessionManager};
use crate::approval::{actions, Actor, Layer, NewRecord};

/// What to do with one journaled tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepPlan {
    pub step_id: String,
    pub tool_call_id: String,
    pub tool: String,
    /// planned | started | completed | failed
    pub journal: String,
    pub idempotent: bool,
    pub side_effects: String,
    /// done | rerun | needs_decision
    pub action: String,
    /// What is known of its effects.
    pub effects: Vec<String>,
    /// The recorded result (JSON), for completed and failed calls.
    pub result_json: String,
}

/// The resume plan of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResumePlan {
    pub run_id: String,
    /// Latest complete checkpoint of the run, when there is one.
    pub checkpoint_id: String,
    /// Paths that differ from that checkpoint now.
    pub drifted: Vec<String>,
    pub steps: Vec<StepPlan>,
    pub note: String,
    pub state_json: String,
    /// First step that is not done (or empty when every journaled call is).
    pub resume_from_step: String,
}

/// What the checkpoint store can tell the planner (kept behind a trait so
/// the planner is testable without a workspace).
pub trait CheckpointView {
    /// Latest complete checkpoint of the run and the paths that drifted
    /// from it.
    fn latest(&self, run_id: &str) -> Option<(String, Vec<String>)>;
    /// Paths changed since a checkpoint (a started call's possible effects).
    fn changed_since(&self, checkpoint_id: &str) -> Option<Vec<String>>;
}

/// No checkpoints available.
pub struct NoCheckpoints;
impl CheckpointView for NoCheckpoints {
    fn latest(&self, _: &str) -> Option<(String, Vec<String>)> {
        None
    }
    fn changed_since(&self, _: &str) -> Option<Vec<String>> {
        None
    }
}

/// How long a resume waits for the run's calls still in flight in this
/// daemon (their client went away mid-call) to end before it plans, ms. A
/// call still running after that is reported, never re-run.
pub const IN_FLIGHT_WAIT_MS: u64 = 30_000;

/// Paths an `apply_patch` journal entry writes (its `paths` argument).
fn patch_paths(e: &JournalEntry) -> Vec<String> {
    serde_json::from_str::<serde_json::Value>(&e.arguments_json)
        .ok()
        .and_then(|v| v.get("paths").cloned())
        .and_then(|p| serde_json::from_value(p).ok())
        .unwrap_or_default()
}

/// Tool call ids that have a result in a run state's message history
/// (`{"history": [{"role": "tool", "tool_call_id": ...}, ...]}`, as the
/// agent loop records it); empty when the state has no such history.
pub fn answered_calls(state_json: &str) -> BTreeSet<String> {
    let v: serde_json::Value = serde_json::from_str(state_json).unwrap_or_default();
    v.get("history")
        .and_then(|h| h.as_array())
        .into_iter()
        .flatten()
        .filter(|m| m.get("role").and_then(|r| r.as_str()) == Some("tool"))
        .filter_map(|m| m.get("tool_call_id").and_then(|id| id.as_str()))
        .map(str::to_string)
        .collect()
}

/// Decides the action of each journal entry (steps 4 and 5). `in_flight`
/// holds the tool call ids this daemon is still executing; `answered` those
/// with a result in the restored history.
///
/// - completed / failed: `done` (the recorded result stands; a denial stays
///   a denial);
/// - planned and answered in the history (the agent's approver refused it,
///   or the user interrupted it before it ran): `done`;
/// - planned otherwise: `rerun` — it never started, so this is its first
///   execution (a call whose approval request got no answer asks again);
/// - started and still in flight: `needs_decision` (never run twice);
/// - started, never completed: `rerun` when idempotent, or when it is an
///   `apply_patch` whose files are unchanged since its pre-checkpoint (it
///   did not apply, and a patch against the same base is idempotent);
///   otherwise `needs_decision`.
pub fn plan_steps(
    journal: &[JournalEntry],
    cps: &dyn CheckpointView,
    in_flight: &BTreeSet<String>,
    answered: &BTreeSet<String>,
) -> Vec<StepPlan> {
    journal
        .iter()
        .map(|e| {
            let (action, effects) = if in_flight.contains(&e.tool_call_id) {
                (
                    "needs_decision",
                    vec!["still running in the daemon (its client went away): it is not repeated; its result will be in the run's journal".to_string()],
                )
            } else {
                match e.state.as_str() {
                    "completed" | "failed" => ("done", vec![]),
                    "planned" if answered.contains(&e.tool_call_id) => (
                        "done",
                        vec!["never started; the run's history already answers it".to_string()],
                    ),
                    "planned" => {
                        let mut effects = vec!["never started: nothing ran".to_string()];
                        if !e.result_json.is_empty() {
                            effects.push("its approval request got no answer before the interruption; it asks again".into());
                        }
                        ("rerun", effects)
                    }
                    _ => started_action(e, cps),
                }
            };
            StepPlan {
                step_id: e.step_id.clone(),
                tool_call_id: e.tool_call_id.clone(),
                tool: e.tool.clone(),
                journal: e.state.clone(),
                idempotent: e.decl.idempotent,
                side_effects: e.decl.side_effects.as_str().into(),
                action: action.into(),
                effects,
                result_json: e.result_json.clone(),
            }
        })
        .collect()
}

/// The action of a call that started and never completed, and what is
/// known of its effects.
fn started_action(e: &JournalEntry, cps: &dyn CheckpointView) -> (&'static str, Vec<String>) {
    let changed = (!e.pre_checkpoint_id.is_empty())
        .then(|| cps.changed_since(&e.pre_checkpoint_id))
        .flatten();
    let mut effects = match &changed {
        Some(paths) if paths.is_empty() => {
            vec!["no workspace change since its pre-checkpoint".to_string()]
        }
        Some(paths) => paths.iter().map(|p| format!("changed: {p}")).collect(),
        None => {
            vec!["unknown: started, never completed, no pre-checkpoint to compare with".to_string()]
        }
    };
    if e.decl.side_effects == super::journal::SideEffects::External {
        effects.push(
            "may have had external effects (network or installs) that cannot be seen from here"
                .into(),
        );
    }
    if e.decl.idempotent {
        return ("rerun", effects);
    }
    let paths = patch_paths(e);
    let same_base = e.tool == "apply_patch"
        && !paths.is_empty()
        && changed
            .as_ref()
            .is_some_and(|c| !c.iter().any(|p| paths.contains(p)));
    if same_base {
        effects.push(format!(
            "its files ({}) are unchanged since its pre-checkpoint: the patch did not apply, and applying it to the same base is idempotent",
            paths.join(", ")
        ));
        return ("rerun", effects);
    }
    ("needs_decision", effects)
}

/// The resume note for the model (step 6).
pub fn note(steps: &[StepPlan], drifted: &[String], checkpoint_id: &str) -> String {
    let mut s = String::from("[warden] This run was interrupted and is being resumed.");
    if !checkpoint_id.is_empty() {
        s.push_str(&format!(
            " The latest complete checkpoint is {checkpoint_id}."
        ));
    }
    if drifted.is_empty() {
        s.push_str(" The workspace matches it.");
    } else {
        s.push_str(&format!(
            " The workspace differs from it in {} path(s): {}. Nothing was overwritten; re-read those files before relying on them.",
            drifted.len(),
            drifted.iter().take(20).cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    let unfinished: Vec<&StepPlan> = steps.iter().filter(|p| p.action != "done").collect();
    if unfinished.is_empty() {
        s.push_str(" Every tool call that was started had completed.");
    }
    for p in unfinished {
        s.push_str(&format!(
            " Tool call {} ({}) was {} but never completed ({}); it was {}.",
            p.tool_call_id,
            p.tool,
            p.journal,
            p.effects.join("; "),
            match p.action.as_str() {
                "rerun" => "safe to run again",
                _ if p.idempotent => "not repeated automatically because it may still be running",
                _ => "not repeated automatically because it is not idempotent",
            }
        ));
    }
    s.push_str(
        " Approvals from before the interruption do not carry over: earlier denials stand, and calls that need approval will ask again.",
    );
    s
}

impl SessionManager {
    /// What the checkpoint store can tell the resume planner.
    pub fn checkpoint_view(&self) -> Box<dyn CheckpointView + '_> {
        self.store_checkpoint_view()
    }

    /// Computes the resume plan of `run_id` and marks the run running again
    /// (its session reopened when closed, its pending approvals expired and
    /// session grants ended), recording `resume` in the audit log.
    /// Errors: NotFound, PermissionDenied, FailedPrecondition (the run
    /// finished as done).
    pub fn resume(
        &self,
        peer: Peer,
        run_id: &str,
        cps: &dyn CheckpointView,
    ) -> Result<ResumePlan, SessionError> {
        let run = self.get_run(peer, run_id)?;
        if run.status == "done" {
            return Err(SessionError::FailedPrecondition(format!(
                "run {run_id} finished (done); there is nothing to resume"
            )));
        }
        // A call its client left running ends first (or is reported as
        // still running): it is never planned to run a second time.
        let in_flight =
            self.wait_in_flight(run_id, std::time::Duration::from_millis(IN_FLIGHT_WAIT_MS));
        let journal = self.journal_for_run(run_id)?;
        let (checkpoint_id, drifted) = cps.latest(run_id).unwrap_or_default();
        let steps = plan_steps(&journal, cps, &in_flight, &answered_calls(&run.state_json));
        let resume_from_step = steps
            .iter()
            .find(|p| p.action != "done")
            .map(|p| p.step_id.clone())
            .unwrap_or_default();
        let plan = ResumePlan {
            run_id: run_id.to_string(),
            note: note(&steps, &drifted, &checkpoint_id),
            checkpoint_id,
            drifted,
            steps,
            state_json: run.state_json.clone(),
            resume_from_step: resume_from_step.clone(),
        };
        // Approvals never carry over a restart.
        self.approvals
            .end_session(&run.session_id)
            .map_err(|e| SessionError::Internal(e.to_string()))?;
        {
            let conn = self.db().lock();
            conn.execute(
                "UPDATE sessions SET state = 'open', closed_at_ms = 0 WHERE id = ?1",
                [&run.session_id],
            )?;
            conn.execute(
                "UPDATE runs SET status = 'running', resumed_from_step = ?2, updated_at_ms = ?3 WHERE id = ?1",
                rusqlite::params![run_id, resume_from_step, crate::now_ms()],
            )?;
        }
        if run.status == "running" {
            // Nobody ended the run: its client (or the daemon) was killed.
            // Calls that started and are neither finished nor in flight here
            // were cut off by a daemon that died.
            let cut_off: Vec<&str> = journal
                .iter()
                .filter(|e| e.state == "started" && !in_flight.contains(&e.tool_call_id))
                .map(|e| e.tool_call_id.as_str())
                .collect();
            self.audit()
                .append(NewRecord {
                    session_id: &run.session_id,
                    run_id,
                    step_id: &resume_from_step,
                    actor: &Actor::Daemon,
                    action: actions::CRASH,
                    detail: serde_json::json!({
                        "cause": "the run was still running and no client had ended it: its client or the daemon was killed",
                        "last_update_ms": run.updated_at_ms,
                        "calls_cut_off": cut_off,
                        "calls_still_running": in_flight,
                    }),
                    layer: Layer::Daemon,
                })
                .map_err(|e| SessionError::Internal(format!("audit log: {e}")))?;
        }
        self.audit()
            .append(NewRecord {
                session_id: &run.session_id,
                run_id,
                step_id: &resume_from_step,
                actor: &Actor::Peer(peer.uid),
                action: actions::RESUME,
                detail: serde_json::json!({
                    "previous_status": run.status,
                    "checkpoint_id": plan.checkpoint_id,
                    "drifted": plan.drifted,
                    "unfinished": plan.steps.iter().filter(|p| p.action != "done")
                        .map(|p| serde_json::json!({"tool_call_id": p.tool_call_id, "journal": p.journal, "action": p.action}))
                        .collect::<Vec<_>>(),
                }),
                layer: Layer::Daemon,
            })
            .map_err(|e| SessionError::Internal(format!("audit log: {e}")))?;
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::journal::{SideEffects, ToolDecl};

    fn entry(id: &str, state: &str, idempotent: bool, fx: SideEffects, pre: &str) -> JournalEntry {
        JournalEntry {
            run_id: "r".into(),
            tool_call_id: id.into(),
            step_id: format!("r-{id}"),
            session_id: "s".into(),
            tool: "shell".into(),
            arguments_json: "{}".into(),
            state: state.into(),
            decl: ToolDecl {
                idempotent,
                side_effects: fx,
                compensation: None,
            },
            tier: "write".into(),
            result_json: String::new(),
            pre_checkpoint_id: pre.into(),
            post_checkpoint_id: String::new(),
            planned_at_ms: 0,
            started_at_ms: 0,
            finished_at_ms: 0,
        }
    }

    struct Fake;
    impl CheckpointView for Fake {
        fn latest(&self, _: &str) -> Option<(String, Vec<String>)> {
            Some(("cp1".into(), vec!["a.txt".into()]))
        }
        fn changed_since(&self, _: &str) -> Option<Vec<String>> {
            Some(vec!["b.txt".into()])
        }
    }

    #[test]
    fn non_idempotent_started_calls_need_a_decision() {
        let j = vec![
            entry("c1", "completed", false, SideEffects::Workspace, ""),
            entry("c2", "started", true, SideEffects::None, ""),
            entry("c3", "started", false, SideEffects::External, "cp0"),
            entry("c4", "planned", false, SideEffects::External, ""),
        ];
        let p = plan_steps(&j, &Fake, &BTreeSet::new(), &BTreeSet::new());
        let actions: Vec<&str> = p.iter().map(|s| s.action.as_str()).collect();
        assert_eq!(actions, ["done", "rerun", "needs_decision", "rerun"]);
        assert!(p[2].effects.iter().any(|e| e.contains("b.txt")));
        assert!(p[2].effects.iter().any(|e| e.contains("external")));
        let n = note(&p, &["a.txt".into()], "cp1");
        assert!(
            n.contains("cp1")
                && n.contains("a.txt")
                && n.contains("c3")
                && n.contains("not idempotent")
        );
    }

    fn patch(id: &str, pre: &str, paths: &[&str]) -> JournalEntry {
        let mut e = entry(id, "started", false, SideEffects::Workspace, pre);
        e.tool = "apply_patch".into();
        e.arguments_json = serde_json::json!({"patch_hash": "h", "paths": paths}).to_string();
        e
    }

    #[test]
    fn a_started_patch_whose_files_are_unchanged_is_rerun() {
        // Fake: b.txt changed since every pre-checkpoint.
        let j = vec![
            patch("p1", "cp0", &["a.txt"]),
            patch("p2", "cp0", &["a.txt", "b.txt"]),
            patch("p3", "", &["a.txt"]),
            patch("p4", "cp0", &[]),
        ];
        let p = plan_steps(&j, &Fake, &BTreeSet::new(), &BTreeSet::new());
        let actions: Vec<&str> = p.iter().map(|s| s.action.as_str()).collect();
        // Unchanged base: rerun. Its file changed, no pre-checkpoint to
        // compare with, or paths unknown: a person decides.
        assert_eq!(
            actions,
            [
                "rerun",
                "needs_decision",
                "needs_decision",
                "needs_decision"
            ]
        );
        assert!(p[0].effects.iter().any(|e| e.contains("same base")));
    }

    #[test]
    fn unanswered_approvals_ask_again_and_calls_in_flight_never_rerun() {
        let mut asked = entry("c1", "planned", false, SideEffects::Workspace, "");
        asked.result_json = r#"{"refused":"approval required (request r1)"}"#.into();
        let mut denied = entry("c2", "failed", false, SideEffects::Workspace, "");
        denied.result_json = r#"{"refused":"denied by user (request r2)"}"#.into();
        let running = entry("c3", "started", true, SideEffects::None, "cp0");
        let mut refused_by_agent = asked.clone();
        refused_by_agent.tool_call_id = "c4".into();
        let in_flight: BTreeSet<String> = ["c3".to_string()].into();
        let state = serde_json::json!({"history": [
            {"role": "assistant", "tool_calls": [{"id": "c4"}]},
            {"role": "tool", "tool_call_id": "c4", "content": "refused: approval required (refused by the approver)"},
        ]})
        .to_string();
        let answered = answered_calls(&state);
        assert_eq!(answered, ["c4".to_string()].into());
        let p = plan_steps(
            &[asked, denied, running, refused_by_agent],
            &Fake,
            &in_flight,
            &answered,
        );
        let actions: Vec<&str> = p.iter().map(|s| s.action.as_str()).collect();
        assert_eq!(actions, ["rerun", "done", "needs_decision", "done"]);
        assert!(p[0].effects.iter().any(|e| e.contains("asks again")));
        assert!(p[2].effects.iter().any(|e| e.contains("still running")));
        let n = note(&p, &[], "");
        assert!(n.contains("may still be running"), "{n}");
    }
}
