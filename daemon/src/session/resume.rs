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

/// Decides the action of each journal entry (steps 4 and 5).
pub fn plan_steps(journal: &[JournalEntry], cps: &dyn CheckpointView) -> Vec<StepPlan> {
    journal
        .iter()
        .map(|e| {
            let (action, effects) = match e.state.as_str() {
                "completed" | "failed" => ("done", vec![]),
                "planned" => ("rerun", vec!["never started: nothing ran".to_string()]),
                _ => {
                    let effects = match (!e.pre_checkpoint_id.is_empty()).then(|| cps.changed_since(&e.pre_checkpoint_id)).flatten() {
                        Some(paths) if paths.is_empty() => vec!["no workspace change since its pre-checkpoint".into()],
                        Some(paths) => paths.into_iter().map(|p| format!("changed: {p}")).collect(),
                        None => vec!["unknown: started, never completed, no pre-checkpoint to compare with".into()],
                    };
                    let mut effects = effects;
                    if e.decl.side_effects == super::journal::SideEffects::External {
                        effects.push("may have had external effects (network or installs) that cannot be seen from here".into());
                    }
                    (if e.decl.idempotent { "rerun" } else { "needs_decision" }, effects)
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
        let journal = self.journal_for_run(run_id)?;
        let (checkpoint_id, drifted) = cps.latest(run_id).unwrap_or_default();
        let steps = plan_steps(&journal, cps);
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
        let p = plan_steps(&j, &Fake);
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
}
