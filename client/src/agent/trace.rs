//! The agent's spans: `invoke_agent` (the run), `step` (one model call and
//! its tool calls) and `chat {model}` (the model call), with the names of
//! [`warden_daemon::telemetry::names`]. The current step's context goes to
//! the daemon in `traceparent` metadata on every tool call
//! ([`RunTrace::traced`]), so the daemon's `execute_tool` spans are its
//! children; finished spans are shipped to the daemon (Traces.ExportSpans)
//! after every step and at the end, and kept there with the run.
//!
//! Message contents are recorded only with `WARDEN_TRACE_CONTENT=1`.

use std::sync::Mutex;

use warden_daemon::telemetry::names as n;
use warden_daemon::telemetry::span::{clip, trace_id_for_run, MAX_ATTR_VALUE_BYTES};
use warden_daemon::telemetry::{SpanKind, SpanRecord, SpanStatus, TRACEPARENT};

use super::context::Degradation;
use super::provider::{ModelResponse, Provider, ProviderError};
use super::{RunOutcome, RunReport};
use crate::pb;
use crate::Client;

#[derive(Debug, Default)]
struct State {
    run: SpanRecord,
    step: Option<SpanRecord>,
    chat: Option<SpanRecord>,
    /// Finished spans not yet shipped.
    done: Vec<SpanRecord>,
    /// Degradations already attributed to a model call.
    degradations_seen: usize,
}

/// The spans of one run as the agent loop makes them.
#[derive(Debug)]
pub struct RunTrace {
    run_id: String,
    provider: String,
    model: String,
    content: bool,
    state: Mutex<State>,
}

impl RunTrace {
    /// Starts the run span. `first_step` is the number of model turns the
    /// history already holds (non-zero: a resumed run; the span then says
    /// from which step). Reads the run record for its policy and
    /// `resumed_from_step`.
    pub async fn start(
        client: &Client,
        run_id: &str,
        session_id: &str,
        provider: &dyn Provider,
        task: &str,
        first_step: u32,
    ) -> RunTrace {
        let mut run = SpanRecord::start(n::SPAN_INVOKE_AGENT, &trace_id_for_run(run_id), None);
        run.set(n::GEN_AI_OPERATION_NAME, n::OP_INVOKE_AGENT)
            .set(n::GEN_AI_PROVIDER_NAME, provider.name())
            .set(n::GEN_AI_REQUEST_MODEL, provider.model())
            .set(n::GEN_AI_CONVERSATION_ID, run_id)
            .set(n::RUN_ID, run_id)
            .set(n::SESSION_ID, session_id)
            .set(n::RUN_TASK, clip(task, 512));
        let record = client
            .runs()
            .get_run(pb::GetRunRequest {
                run_id: run_id.to_string(),
            })
            .await
            .ok()
            .map(|r| r.into_inner());
        if let Some(r) = &record {
            if !r.policy_name.is_empty() {
                run.set(n::RUN_POLICY, r.policy_name.as_str());
            }
        }
        // Where a resumed run continues: the run record's step (set by
        // Runs.Resume, which records the `resume` span in the daemon), else
        // the last step of the restored history.
        let resumed_from = record
            .as_ref()
            .map(|r| r.resumed_from_step.clone())
            .filter(|s| !s.is_empty())
            .or_else(|| (first_step > 0).then(|| format!("{run_id}-{first_step}")));
        if let Some(from) = resumed_from {
            run.set(n::RUN_RESUMED_FROM_STEP, from.as_str());
        }
        let done = vec![];
        RunTrace {
            run_id: run_id.to_string(),
            provider: provider.name().to_string(),
            model: provider.model().to_string(),
            content: warden_daemon::telemetry::record_content(),
            state: Mutex::new(State {
                run,
                done,
                ..Default::default()
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts step `step` (if not started) and its model call; the context
    /// degradations made since the last call (`all` is the run's list) are
    /// attributed to this call.
    pub fn chat_start(&self, step: u32, all: &[Degradation]) {
        let mut st = self.lock();
        if st.step.is_none() {
            let mut s = SpanRecord::child_of(n::SPAN_STEP, &st.run.context());
            s.set(n::STEP_ID, format!("{}-{step}", self.run_id))
                .set(n::STEP_NUMBER, step);
            st.step = Some(s);
        }
        let parent = st
            .step
            .as_ref()
            .map(SpanRecord::context)
            .unwrap_or_else(|| st.run.context());
        let mut c = SpanRecord::child_of(n::chat_span_name(&self.model), &parent);
        c.kind = SpanKind::Client;
        c.set(n::GEN_AI_OPERATION_NAME, n::OP_CHAT)
            .set(n::GEN_AI_PROVIDER_NAME, self.provider.as_str())
            .set(n::GEN_AI_REQUEST_MODEL, self.model.as_str());
        let new = &all[st.degradations_seen.min(all.len())..];
        c.set(n::CONTEXT_DEGRADED, !new.is_empty());
        if let (Some(first), Some(last)) = (new.first(), new.last()) {
            c.set(
                n::CONTEXT_DEGRADED_KIND,
                new.iter().map(|d| d.kind.to_string()).collect::<Vec<_>>(),
            )
            .set(
                n::CONTEXT_DEGRADED_MESSAGES,
                new.iter().map(|d| d.messages as u64).sum::<u64>(),
            )
            .set(n::CONTEXT_TOKENS_BEFORE, first.tokens_before as u64)
            .set(n::CONTEXT_TOKENS_AFTER, last.tokens_after as u64);
        }
        st.degradations_seen = all.len();
        st.chat = Some(c);
    }

    /// Ends the model call with its response or error.
    pub fn chat_end(&self, resp: &Result<ModelResponse, ProviderError>) {
        let mut st = self.lock();
        let Some(mut c) = st.chat.take() else { return };
        c.end();
        c.set(n::MODEL_LATENCY_MS, c.duration_ms());
        match resp {
            Ok(r) => {
                c.set(n::GEN_AI_RESPONSE_MODEL, r.model.as_str())
                    .set(n::GEN_AI_USAGE_INPUT_TOKENS, r.usage.input_tokens)
                    .set(n::GEN_AI_USAGE_OUTPUT_TOKENS, r.usage.output_tokens)
                    .set(
                        n::GEN_AI_RESPONSE_FINISH_REASONS,
                        vec![r.finish_reason.clone()],
                    )
                    .set(n::MODEL_TOOL_CALLS, r.message.tool_calls.len())
                    .set_opt(n::GEN_AI_RESPONSE_ID, r.response_id.as_deref());
                if self.content {
                    if let Some(text) = &r.message.content {
                        c.set(n::GEN_AI_OUTPUT_MESSAGES, clip(text, MAX_ATTR_VALUE_BYTES));
                    }
                }
                c.status = SpanStatus::Ok;
            }
            Err(e) => {
                let kind = match e {
                    ProviderError::Auth { .. } => "auth",
                    ProviderError::UnknownModel { .. } => "unknown_model",
                    ProviderError::Exhausted { .. } => "exhausted",
                    ProviderError::BadResponse(_) => "bad_response",
                    ProviderError::Http(_) => "http",
                    ProviderError::Config(_) => "config",
                };
                c.fail(kind, clip(&e.to_string(), MAX_ATTR_VALUE_BYTES));
            }
        }
        st.done.push(c);
    }

    /// `traceparent` of the current span (the step, else the run).
    pub fn traceparent(&self) -> String {
        let st = self.lock();
        st.step.as_ref().unwrap_or(&st.run).context().traceparent()
    }

    /// `msg` as a request carrying the current `traceparent`.
    pub fn traced<T>(&self, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        if let Ok(v) = self.traceparent().parse() {
            r.metadata_mut().insert(TRACEPARENT, v);
        }
        r
    }

    fn close_step(&self, st: &mut State, report: &RunReport) {
        let Some(mut s) = st.step.take() else { return };
        let id = s.get_str(n::STEP_ID).unwrap_or_default();
        let calls: Vec<_> = report
            .tool_calls
            .iter()
            .filter(|c| c.step_id == id)
            .collect();
        s.set_opt(
            n::CHECKPOINT_PRE,
            calls.iter().find_map(|c| c.pre_checkpoint.clone()),
        )
        .set_opt(
            n::CHECKPOINT_POST,
            calls.iter().rev().find_map(|c| c.post_checkpoint.clone()),
        )
        .set("warden.step.tool_calls", calls.len());
        s.end();
        st.done.push(s);
    }

    /// Ends the current step and ships the finished spans.
    pub async fn end_step(&self, client: &Client, report: &RunReport) {
        {
            let mut st = self.lock();
            self.close_step(&mut st, report);
        }
        self.flush(client).await;
    }

    /// Ends every open span and the run span with the outcome and totals,
    /// and ships them.
    pub async fn finish(&self, client: &Client, outcome: &RunOutcome, report: &RunReport) {
        {
            let mut st = self.lock();
            if let Some(mut c) = st.chat.take() {
                c.fail("interrupted", "the model call did not complete");
                c.end();
                st.done.push(c);
            }
            self.close_step(&mut st, report);
            let mut run = std::mem::take(&mut st.run);
            run.set(n::RUN_OUTCOME, outcome.status())
                .set(n::RUN_STEPS, report.steps)
                .set(n::GEN_AI_USAGE_INPUT_TOKENS, report.input_tokens)
                .set(n::GEN_AI_USAGE_OUTPUT_TOKENS, report.output_tokens)
                .set(
                    n::USAGE_TOTAL_TOKENS,
                    report.input_tokens + report.output_tokens,
                )
                .set(n::USAGE_COST_MICROS, report.cost_micros);
            match outcome {
                RunOutcome::Done => run.status = SpanStatus::Ok,
                RunOutcome::Failed(why) | RunOutcome::Stopped(why) => {
                    run.set(n::RUN_OUTCOME_REASON, clip(why, 1024));
                    run.fail(outcome.status(), clip(why, 1024));
                }
                RunOutcome::Interrupted => {
                    run.fail("interrupted", "the user interrupted the run");
                }
            }
            run.end();
            st.done.push(run);
        }
        self.flush(client).await;
    }

    /// Ships the finished spans to the daemon (kept if it cannot be reached
    /// now, for the next flush).
    pub async fn flush(&self, client: &Client) {
        let spans = std::mem::take(&mut self.lock().done);
        if spans.is_empty() {
            return;
        }
        let req = pb::ExportSpansRequest {
            run_id: self.run_id.clone(),
            spans: spans.iter().map(SpanRecord::to_proto).collect(),
        };
        if let Err(s) = client.traces().export_spans(req).await {
            tracing::warn!("shipping spans to the daemon: {}", s.message());
            if s.code() != tonic::Code::InvalidArgument {
                self.lock().done.extend(spans);
            }
        }
    }
}
