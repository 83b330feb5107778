//! The daemon's tool-call spans: `execute_tool {tool}` with its
//! `approval_wait` and `checkpoint_write` children, built from what the
//! pipeline reports ([`ExecEvent`]s for exec; the result for file tools), so
//! the pipeline itself carries no tracing code.
//!
//! `checkpoint_write` spans run from the pipeline event before the
//! checkpoint (the decision or approval for `pre`, the command's end for
//! `post`) to the checkpoint event: the pipeline writes the checkpoint
//! between the two.

use super::names as n;
use super::span::{clip, now_unix_nano, SpanContext, SpanKind, SpanRecord, SpanStatus};
use crate::policy::Tier;
use crate::session::exec::ExecEvent;

/// Most output bytes kept per stream when output recording is on.
pub const MAX_RECORDED_OUTPUT_BYTES: usize = 2048;

/// Which call a tool span belongs to.
#[derive(Debug, Clone, Default)]
pub struct ToolCallInfo {
    pub session_id: String,
    pub run_id: String,
    pub step_id: String,
    pub tool_call_id: String,
}

/// Idempotency and side-effect class of a call by tier: safe-read is
/// idempotent with no side effect; write changes the workspace; network,
/// install and destructive reach outside it and are never repeated
/// automatically.
pub fn effects_of_tier(tier: Tier) -> (bool, &'static str) {
    match tier {
        Tier::SafeRead => (true, "none"),
        Tier::Write => (false, "workspace"),
        _ => (false, "external"),
    }
}

/// Idempotency and side-effect class of a file tool: reads and searches
/// have none; a write or patch changes the workspace and is idempotent
/// against the same base (a repeat finds its change already made or is
/// refused on a hash mismatch).
pub fn effects_of_file_tool(tool: &str) -> (bool, &'static str) {
    match tool {
        "read_file" | "list_dir" | "grep" => (true, "none"),
        _ => (true, "workspace"),
    }
}

/// An `execute_tool` span being built.
#[derive(Debug)]
pub struct ToolSpan {
    span: SpanRecord,
    children: Vec<SpanRecord>,
    approval: Option<SpanRecord>,
    last_event: u64,
    output_bytes: u64,
    record_output: bool,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl ToolSpan {
    /// Starts the span of `tool` now, under `parent` (the client's span from
    /// `traceparent`) or, without one, at the root of the run's trace.
    pub fn start(
        tool: &str,
        info: &ToolCallInfo,
        parent: Option<SpanContext>,
        record_output: bool,
    ) -> ToolSpan {
        let mut span = match &parent {
            Some(p) => SpanRecord::child_of(n::execute_tool_span_name(tool), p),
            None => {
                let trace = if info.run_id.is_empty() {
                    super::span::new_span_id().repeat(2)
                } else {
                    super::span::trace_id_for_run(&info.run_id)
                };
                SpanRecord::start(n::execute_tool_span_name(tool), &trace, None)
            }
        };
        span.kind = SpanKind::Internal;
        span.set(n::GEN_AI_OPERATION_NAME, n::OP_EXECUTE_TOOL)
            .set(n::GEN_AI_TOOL_NAME, tool)
            .set(n::GEN_AI_TOOL_TYPE, "function");
        for (k, v) in [
            (n::GEN_AI_TOOL_CALL_ID, &info.tool_call_id),
            (n::SESSION_ID, &info.session_id),
            (n::RUN_ID, &info.run_id),
            (n::STEP_ID, &info.step_id),
        ] {
            if !v.is_empty() {
                span.set(k, v.as_str());
            }
        }
        let last_event = span.start_unix_nano;
        ToolSpan {
            span,
            children: vec![],
            approval: None,
            last_event,
            output_bytes: 0,
            record_output,
            stdout: vec![],
            stderr: vec![],
        }
    }

    /// The span, to set more attributes.
    pub fn span_mut(&mut self) -> &mut SpanRecord {
        &mut self.span
    }

    fn child(&self, name: &str, start: u64) -> SpanRecord {
        let mut c = SpanRecord::child_of(name, &self.span.context());
        c.start_unix_nano = start;
        c
    }

    /// Folds one pipeline event into the span.
    pub fn exec_event(&mut self, ev: &ExecEvent) {
        let now = now_unix_nano();
        match ev {
            ExecEvent::Decision {
                classification: c,
                profile,
            } => {
                let (idempotent, effects) = effects_of_tier(c.tier);
                self.span
                    .set(n::TIER, c.tier.as_str())
                    .set(n::DECISION, c.decision.as_str())
                    .set_opt(n::RULE, c.rule.as_deref())
                    .set_opt(n::SANDBOX_PROFILE, profile.map(|p| p.as_str()))
                    .set(n::TOOL_IDEMPOTENT, idempotent)
                    .set(n::TOOL_SIDE_EFFECTS, effects);
            }
            ExecEvent::ApprovalRequired(rec) => {
                let mut a = self.child(n::SPAN_APPROVAL_WAIT, now);
                a.set(n::APPROVAL_REQUEST_ID, rec.id.as_str());
                self.span.set(n::APPROVAL_REQUEST_ID, rec.id.as_str());
                self.approval = Some(a);
            }
            ExecEvent::ApprovalResolved {
                request_id,
                state,
                scope,
            } => {
                let outcome = match state {
                    crate::approval::ApprovalState::Granted
                    | crate::approval::ApprovalState::Consumed => "granted",
                    other => other.as_str(),
                };
                let mut a = self
                    .approval
                    .take()
                    .unwrap_or_else(|| self.child(n::SPAN_APPROVAL_WAIT, self.last_event));
                a.set(n::APPROVAL_REQUEST_ID, request_id.as_str())
                    .set(n::APPROVAL_OUTCOME, outcome)
                    .set_opt(n::APPROVAL_SCOPE, scope.map(|s| s.as_str()));
                a.end_unix_nano = now;
                if outcome != "granted" {
                    a.status = SpanStatus::Error(format!("approval {outcome}"));
                }
                self.children.push(a);
                self.span
                    .set(n::APPROVAL_REQUEST_ID, request_id.as_str())
                    .set(n::APPROVAL_OUTCOME, outcome);
            }
            ExecEvent::Started {
                landlock, profile, ..
            } => {
                self.span
                    .set(n::SANDBOX_PROFILE, profile.as_str())
                    .set(n::SANDBOX_LANDLOCK, landlock.as_str());
            }
            ExecEvent::Stdout(d) => {
                self.output_bytes += d.len() as u64;
                if self.record_output {
                    keep(&mut self.stdout, d);
                }
            }
            ExecEvent::Stderr(d) => {
                self.output_bytes += d.len() as u64;
                if self.record_output {
                    keep(&mut self.stderr, d);
                }
            }
            ExecEvent::Checkpoint {
                id,
                kind,
                root_hash,
            } => {
                let mut c = self.child(n::SPAN_CHECKPOINT_WRITE, self.last_event);
                c.set(n::CHECKPOINT_ID, id.as_str())
                    .set(n::CHECKPOINT_KIND, kind.as_str())
                    .set(n::CHECKPOINT_ROOT_HASH, root_hash.as_str());
                c.end_unix_nano = now;
                self.children.push(c);
                let key = if kind == "pre" {
                    n::CHECKPOINT_PRE
                } else {
                    n::CHECKPOINT_POST
                };
                self.span.set(key, id.as_str());
            }
            ExecEvent::Exit(s) => {
                let sp = &mut self.span;
                sp.set(n::DURATION_MS, s.duration_ms)
                    .set(n::OUTPUT_BYTES, self.output_bytes)
                    .set(
                        n::OUTPUT_TRUNCATED,
                        s.stdout_dropped > 0 || s.stderr_dropped > 0,
                    )
                    .set(n::OUTPUT_DROPPED_BYTES, s.stdout_dropped + s.stderr_dropped)
                    .set(n::REDACTIONS, s.redactions)
                    .set_opt(n::EXIT_CODE, s.code)
                    .set_opt(n::EXIT_SIGNAL, s.signal)
                    .set(n::EXIT_TIMED_OUT, s.timed_out)
                    .set_opt(n::CHECKPOINT_PRE, s.pre_checkpoint_id.as_deref())
                    .set_opt(n::CHECKPOINT_POST, s.post_checkpoint_id.as_deref())
                    .set_opt(n::APPROVAL_REQUEST_ID, s.approval_request_id.as_deref());
                if let Some(why) = &s.refusal {
                    sp.set(n::REFUSED, true).set(n::REFUSAL, why.as_str());
                    sp.fail(n::ERROR_REFUSED, why.clone());
                } else if s.timed_out {
                    sp.fail(n::ERROR_TIMEOUT, "the command timed out");
                } else if let Some(sig) = s.signal {
                    sp.fail("signal", format!("killed by signal {sig}"));
                } else if s.code.is_some_and(|c| c != 0) {
                    // A non-zero exit is the command's answer, not a
                    // failure of the tool call.
                    sp.status = SpanStatus::Unset;
                } else {
                    sp.status = SpanStatus::Ok;
                }
            }
        }
        self.last_event = now;
    }

    /// Marks the call failed with a gRPC status (`error.type` is the code
    /// name, e.g. `PermissionDenied`).
    pub fn fail_status(&mut self, status: &tonic::Status) {
        if status.code() == tonic::Code::PermissionDenied {
            self.span
                .set(n::REFUSED, true)
                .set(n::REFUSAL, status.message());
        }
        self.span
            .fail(&format!("{:?}", status.code()), status.message());
    }

    /// Ends the span (and an approval wait left open: the call was
    /// abandoned) and returns it with its children.
    pub fn finish(mut self) -> Vec<SpanRecord> {
        let now = now_unix_nano();
        if let Some(mut a) = self.approval.take() {
            a.set(n::APPROVAL_OUTCOME, "cancelled");
            a.status = SpanStatus::Error("approval cancelled".into());
            a.end_unix_nano = now;
            self.children.push(a);
        }
        if self.record_output {
            for (k, buf) in [
                (n::OUTPUT_STDOUT, &self.stdout),
                (n::OUTPUT_STDERR, &self.stderr),
            ] {
                if !buf.is_empty() {
                    let text = clip(&String::from_utf8_lossy(buf), MAX_RECORDED_OUTPUT_BYTES);
                    self.span.set(k, text);
                }
            }
        }
        self.span.end_unix_nano = now.max(self.span.start_unix_nano);
        let mut out = self.children;
        out.push(self.span);
        out
    }
}

fn keep(buf: &mut Vec<u8>, d: &[u8]) {
    let room = (MAX_RECORDED_OUTPUT_BYTES + 64).saturating_sub(buf.len());
    buf.extend_from_slice(&d[..d.len().min(room)]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::exec::ExitSummary;

    #[test]
    fn exit_and_refusal_shape_the_span() {
        let info = ToolCallInfo {
            run_id: "r".into(),
            tool_call_id: "c1".into(),
            ..Default::default()
        };
        let parent = SpanContext {
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
            span_id: "00f067aa0ba902b7".into(),
        };
        let mut t = ToolSpan::start("shell", &info, Some(parent.clone()), false);
        t.exec_event(&ExecEvent::Stdout(b"hello".to_vec()));
        t.exec_event(&ExecEvent::Checkpoint {
            id: "ck1".into(),
            kind: "post".into(),
            root_hash: "h".into(),
        });
        t.exec_event(&ExecEvent::Exit(ExitSummary {
            code: Some(0),
            duration_ms: 3,
            ..Default::default()
        }));
        let spans = t.finish();
        assert_eq!(spans.len(), 2);
        let tool = &spans[1];
        assert_eq!(tool.name, "execute_tool shell");
        assert_eq!(tool.parent_span_id, parent.span_id);
        assert_eq!(spans[0].parent_span_id, tool.span_id);
        assert_eq!(tool.get_str(n::OUTPUT_BYTES).as_deref(), Some("5"));
        assert_eq!(tool.get_str(n::CHECKPOINT_POST).as_deref(), Some("ck1"));
        assert_eq!(tool.get(n::OUTPUT_STDOUT), None, "output is opt-in");
        assert_eq!(tool.status, SpanStatus::Ok);

        let mut t = ToolSpan::start("shell", &info, None, true);
        t.exec_event(&ExecEvent::Stdout(b"out".to_vec()));
        t.exec_event(&ExecEvent::Exit(ExitSummary {
            refusal: Some("denied by rule x".into()),
            ..Default::default()
        }));
        let s = t.finish().pop().unwrap();
        assert_eq!(s.trace_id, crate::telemetry::span::trace_id_for_run("r"));
        assert_eq!(s.get_str(n::ERROR_TYPE).as_deref(), Some("refused"));
        assert_eq!(s.get_str(n::OUTPUT_STDOUT).as_deref(), Some("out"));
        assert!(matches!(s.status, SpanStatus::Error(_)));
    }
}
