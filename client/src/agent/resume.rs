//! The client half of resuming an interrupted run (issue 10): restore the
//! history from the daemon's resume plan, give every tool call of the last
//! assistant turn a result (the recorded one for completed calls; a re-run
//! where the plan allows it; an "interrupted" answer for a non-idempotent
//! call the user chose to skip), and inject the resume note.

use serde_json::Value;

use super::provider::{Message, Role};
use super::tools::Dispatcher;
use crate::pb;

/// What to do with a `needs_decision` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Rerun,
    Skip,
    Stop,
}

/// Renders a journaled result for the model.
pub fn recorded_result(tool: &str, result_json: &str) -> String {
    let v: Value = serde_json::from_str(result_json).unwrap_or(Value::Null);
    let body = if let Some(r) = v.get("refused").and_then(Value::as_str) {
        format!("refused: {r}")
    } else if let Some(e) = v.get("error").and_then(Value::as_str) {
        format!("error: {e}")
    } else if tool == "shell" {
        let mut s = match (
            v["timed_out"].as_bool(),
            v["signal"].as_i64(),
            v["code"].as_i64(),
        ) {
            (Some(true), _, _) => "timed out (killed)\n".to_string(),
            (_, Some(sig), _) => format!("killed by signal {sig}\n"),
            (_, _, Some(c)) => format!("exit code {c}\n"),
            _ => "finished\n".to_string(),
        };
        if let Some(o) = v["stdout"].as_str().filter(|o| !o.is_empty()) {
            s.push_str("--- stdout ---\n");
            s.push_str(o);
        }
        if let Some(e) = v["stderr"].as_str().filter(|e| !e.is_empty()) {
            s.push_str("\n--- stderr ---\n");
            s.push_str(e);
        }
        s
    } else if let Some(changes) = v["changes"].as_array() {
        format!(
            "applied: {}",
            changes
                .iter()
                .map(|c| format!(
                    "{} {}",
                    c["kind"].as_str().unwrap_or("?"),
                    c["path"].as_str().unwrap_or("?")
                ))
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        v.to_string()
    };
    format!("{body}\n[warden: this result was recorded before the run was interrupted]")
}

/// The history stored in a run state (`{"history": [...]}`).
pub fn history_from_state(state_json: &str) -> Option<Vec<Message>> {
    let v: Value = serde_json::from_str(state_json).ok()?;
    serde_json::from_value(v.get("history")?.clone()).ok()
}

/// Gives every unanswered tool call of the history a result, following the
/// plan; returns false when the user chose to stop.
pub async fn complete_dangling_calls(
    history: &mut Vec<Message>,
    plan: &pb::ResumePlan,
    dispatcher: &Dispatcher<'_>,
    decide: &mut dyn FnMut(&pb::StepStatus) -> Choice,
) -> bool {
    let Some(last) = history.iter().rposition(|m| m.role == Role::Assistant) else {
        return true;
    };
    let answered: Vec<String> = history[last + 1..]
        .iter()
        .filter_map(|m| m.tool_call_id.clone())
        .collect();
    let calls: Vec<_> = history[last]
        .tool_calls
        .iter()
        .filter(|c| !answered.contains(&c.id))
        .cloned()
        .collect();
    let step_id = plan.resume_from_step.clone();
    for call in calls {
        let status = plan.steps.iter().find(|s| s.tool_call_id == call.id);
        let text = match status {
            Some(s) if s.action == "done" => recorded_result(&s.tool, &s.result_json),
            Some(s) if s.action == "needs_decision" => match decide(s) {
                Choice::Rerun => {
                    let mut again = call.clone();
                    again.id = format!("{}~rerun", call.id);
                    dispatcher.dispatch(&step_id, &again).await.text
                }
                Choice::Skip => format!(
                    "interrupted: this call started but had not completed when the run was interrupted, and it was not repeated \
                     automatically ({}). What is known of its effects: {}",
                    if s.idempotent { "it may still be running" } else { "it is not idempotent" },
                    s.effects.join("; ")
                ),
                Choice::Stop => return false,
            },
            Some(s) if s.journal == "started" => {
                // Idempotent and started: run it again under a new id (the
                // journal never executes the same id twice).
                let mut again = call.clone();
                again.id = format!("{}~rerun", call.id);
                dispatcher.dispatch(&step_id, &again).await.text
            }
            // Planned but never started, or never seen by the daemon: it
            // never ran, so this is its first execution.
            _ => dispatcher.dispatch(&step_id, &call).await.text,
        };
        history.push(Message::tool_result(&call.id, text));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_results_read_like_live_ones() {
        let t = recorded_result("shell", r#"{"code": 0, "stdout": "hi\n", "stderr": ""}"#);
        assert!(t.starts_with("exit code 0\n--- stdout ---\nhi"));
        assert!(
            recorded_result("shell", r#"{"refused": "denied: tier destructive"}"#)
                .starts_with("refused: denied")
        );
        assert!(recorded_result(
            "apply_patch",
            r#"{"changes": [{"kind": "modified", "path": "a.py"}]}"#
        )
        .contains("modified a.py"));
    }

    #[test]
    fn history_round_trips_through_the_run_state() {
        let h = vec![Message::system("s"), Message::user("t")];
        let state = serde_json::json!({"history": h}).to_string();
        assert_eq!(history_from_state(&state).unwrap(), h);
        assert!(history_from_state("{}").is_none());
    }
}
