//! `warden.v1.Traces`: clients ship their spans to be kept with the run
//! (ExportSpans), and read a run's trace back (ListTraces, GetTrace). Every
//! call checks that the run exists and belongs to the peer.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::{peer, status};
use crate::proto::v1::{self as pb, traces_server::Traces};
use crate::session::SessionManager;
use crate::telemetry::{self, SpanRecord, Telemetry, TelemetryError};

/// Most spans accepted in one ExportSpans call.
pub const MAX_EXPORT_SPANS: usize = 10_000;

pub struct TracesService {
    mgr: Arc<SessionManager>,
    tel: Arc<Telemetry>,
}

impl TracesService {
    pub fn new(mgr: Arc<SessionManager>) -> Self {
        let tel = telemetry::for_state_dir(mgr.state_dir());
        TracesService { mgr, tel }
    }
}

fn tel_status(e: TelemetryError) -> Status {
    match e {
        TelemetryError::Invalid(m) => Status::invalid_argument(m),
        other => Status::internal(other.to_string()),
    }
}

#[tonic::async_trait]
impl Traces for TracesService {
    async fn export_spans(
        &self,
        req: Request<pb::ExportSpansRequest>,
    ) -> Result<Response<pb::ExportSpansResponse>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        if r.spans.len() > MAX_EXPORT_SPANS {
            return Err(Status::invalid_argument(format!(
                "{} spans in one call, over the {MAX_EXPORT_SPANS} limit",
                r.spans.len()
            )));
        }
        self.mgr.get_run(peer, &r.run_id).map_err(status)?;
        let spans = r
            .spans
            .iter()
            .map(SpanRecord::from_proto)
            .collect::<Result<Vec<_>, _>>()
            .map_err(tel_status)?;
        let n = spans.len() as u32;
        let tel = self.tel.clone();
        tokio::task::spawn_blocking(move || tel.record(&r.run_id, spans))
            .await
            .map_err(|e| Status::internal(format!("recording spans: {e}")))?;
        Ok(Response::new(pb::ExportSpansResponse { accepted: n }))
    }

    async fn list_traces(
        &self,
        req: Request<pb::ListTracesRequest>,
    ) -> Result<Response<pb::ListTracesResponse>, Status> {
        let peer = peer(&req)?;
        let limit = req.get_ref().limit;
        let runs = self.mgr.list_runs(peer, "", limit).map_err(status)?;
        let tel = self.tel.clone();
        let traces = tokio::task::spawn_blocking(move || {
            runs.iter()
                .filter_map(|run| tel.store().summary(&run.id).ok().flatten())
                .map(|s| pb::TraceSummary {
                    run_id: s.run_id,
                    trace_id: s.trace_id,
                    spans: s.spans,
                    started_at_ms: s.started_at_ms,
                    duration_ms: s.duration_ms,
                    errors: s.errors,
                })
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| Status::internal(format!("listing traces: {e}")))?;
        let (endpoint, exported, dropped) = match self.tel.otlp() {
            Some(o) => (
                o.endpoint().to_string(),
                o.stats()
                    .exported
                    .load(std::sync::atomic::Ordering::Relaxed),
                o.stats().dropped.load(std::sync::atomic::Ordering::Relaxed),
            ),
            None => (String::new(), 0, 0),
        };
        Ok(Response::new(pb::ListTracesResponse {
            traces,
            otlp_endpoint: endpoint,
            otlp_exported_spans: exported,
            otlp_dropped_spans: dropped,
        }))
    }

    async fn get_trace(
        &self,
        req: Request<pb::GetTraceRequest>,
    ) -> Result<Response<pb::GetTraceResponse>, Status> {
        let peer = peer(&req)?;
        let run_id = req.into_inner().run_id;
        self.mgr.get_run(peer, &run_id).map_err(status)?;
        let tel = self.tel.clone();
        let spans = tokio::task::spawn_blocking(move || tel.store().read(&run_id))
            .await
            .map_err(|e| Status::internal(format!("reading the trace: {e}")))?
            .map_err(tel_status)?;
        Ok(Response::new(pb::GetTraceResponse {
            spans: spans.iter().map(SpanRecord::to_proto).collect(),
        }))
    }
}

/// An `execute_tool` span of one gRPC tool call, recorded when finished
/// (into the run's trace when the run belongs to the caller's session).
pub(crate) struct TracedTool {
    span: telemetry::ToolSpan,
    tel: Arc<Telemetry>,
    run_id: String,
}

/// Starts the span of one tool call. The run's trace file receives it only
/// when `run_id` names a run of `session_id` owned by `peer` (a caller
/// cannot write into another's trace).
#[allow(clippy::too_many_arguments)]
pub(crate) fn tool_span(
    mgr: &SessionManager,
    peer: crate::session::Peer,
    tool: &str,
    session_id: &str,
    run_id: &str,
    step_id: &str,
    tool_call_id: &str,
    parent: Option<telemetry::SpanContext>,
) -> TracedTool {
    let owned = !run_id.is_empty()
        && mgr
            .get_run(peer, run_id)
            .is_ok_and(|r| r.session_id == session_id);
    let run_id = if owned { run_id } else { "" };
    let info = telemetry::ToolCallInfo {
        session_id: session_id.to_string(),
        run_id: run_id.to_string(),
        step_id: step_id.to_string(),
        tool_call_id: tool_call_id.to_string(),
    };
    TracedTool {
        span: telemetry::ToolSpan::start(tool, &info, parent, telemetry::record_content()),
        tel: telemetry::for_state_dir(mgr.state_dir()),
        run_id: run_id.to_string(),
    }
}

impl TracedTool {
    /// Sets an attribute on the tool span.
    pub(crate) fn set(&mut self, key: &str, v: impl Into<telemetry::AttrValue>) -> &mut Self {
        self.span.span_mut().set(key, v);
        self
    }

    /// Folds an exec pipeline event into the span.
    pub(crate) fn exec_event(&mut self, ev: &crate::session::exec::ExecEvent) {
        self.span.exec_event(ev);
    }

    /// Marks the call failed with `st` and hands `st` back.
    pub(crate) fn fail(&mut self, st: Status) -> Status {
        self.span.fail_status(&st);
        st
    }

    /// Marks a call the policy or the sandbox refused: an `approval
    /// required` answer is an ask, not an error (the same call comes back
    /// approved); any other refusal fails the span with error type
    /// `refused`.
    pub(crate) fn refused(&mut self, reason: &str) {
        use telemetry::names as n;
        self.span
            .span_mut()
            .set(n::REFUSED, true)
            .set(n::REFUSAL, reason);
        if reason.starts_with("approval required") {
            self.ok();
        } else {
            self.error(n::ERROR_REFUSED, reason);
        }
    }

    /// Fails the span with error type `kind` (OTel `error.type`).
    pub(crate) fn error(&mut self, kind: &str, message: &str) {
        self.span.span_mut().fail(kind, message);
    }

    /// Marks the call successful.
    pub(crate) fn ok(&mut self) {
        self.span.span_mut().status = telemetry::SpanStatus::Ok;
    }

    /// Records the span (never fails, never waits on the exporter).
    pub(crate) fn finish(self) {
        self.tel.record(&self.run_id, self.span.finish());
    }

    /// Records a whole call's result: status, then the span.
    pub(crate) fn done<T>(mut self, r: Result<T, Status>) -> Result<T, Status> {
        let r = match r {
            Ok(v) => {
                self.ok();
                Ok(v)
            }
            Err(st) => Err(self.fail(st)),
        };
        self.finish();
        r
    }
}

/// The Files service with an `execute_tool {tool}` span around every call
/// (the inner service stays free of tracing code).
pub(crate) struct TracedFiles<F> {
    inner: F,
    mgr: Arc<SessionManager>,
}

impl<F> TracedFiles<F> {
    pub(crate) fn new(inner: F, mgr: Arc<SessionManager>) -> Self {
        TracedFiles { inner, mgr }
    }

    /// The span of a file tool call, with its tier, decision and effects.
    #[allow(clippy::too_many_arguments)]
    fn start<T>(
        &self,
        req: &Request<T>,
        tool: &str,
        session_id: &str,
        run_id: &str,
        step_id: &str,
        tool_call_id: &str,
        path: &str,
    ) -> TracedTool {
        use crate::policy::{Decision, Tier};
        use telemetry::names as n;
        let parent = telemetry::parent_from_metadata(req.metadata());
        let p = peer(req).unwrap_or(crate::session::Peer {
            uid: u32::MAX,
            gid: u32::MAX,
            pid: None,
        });
        let mut t = tool_span(
            &self.mgr,
            p,
            tool,
            session_id,
            run_id,
            step_id,
            tool_call_id,
            parent,
        );
        let (idempotent, effects) = telemetry::tool::effects_of_file_tool(tool);
        let (tier, decision) = if effects == "none" {
            (Tier::SafeRead, Some(Decision::Allow))
        } else {
            let d = self
                .mgr
                .open_session_for(session_id, p)
                .ok()
                .map(|s| s.policy.file.tiers.decide(Tier::Write));
            (Tier::Write, d)
        };
        t.set(n::TIER, tier.as_str())
            .set(n::TOOL_IDEMPOTENT, idempotent)
            .set(n::TOOL_SIDE_EFFECTS, effects);
        if let Some(d) = decision {
            t.set(n::DECISION, d.as_str());
        }
        if !path.is_empty() {
            t.set(n::PATH, path);
        }
        t
    }
}

fn changed(t: &mut TracedTool, paths: Vec<String>) {
    use telemetry::names as n;
    t.set(n::FILES_CHANGED, paths.len())
        .set(n::FILES_CHANGED_PATHS, paths);
}

#[tonic::async_trait]
impl<F: pb::files_server::Files> pb::files_server::Files for TracedFiles<F> {
    async fn read_file(
        &self,
        req: Request<pb::ReadFileRequest>,
    ) -> Result<Response<pb::ReadFileResponse>, Status> {
        use telemetry::names as n;
        let r = req.get_ref();
        let mut t = self.start(
            &req,
            "read_file",
            &r.session_id,
            &r.run_id,
            "",
            &r.tool_call_id,
            &r.path,
        );
        let res = self.inner.read_file(req).await;
        if let Ok(resp) = &res {
            let o = resp.get_ref();
            t.set(n::OUTPUT_BYTES, o.content.len())
                .set(n::OUTPUT_TRUNCATED, o.truncated)
                .set(n::REDACTIONS, o.redactions);
        }
        t.done(res)
    }

    async fn write_file(
        &self,
        req: Request<pb::WriteFileRequest>,
    ) -> Result<Response<pb::WriteFileResponse>, Status> {
        let r = req.get_ref();
        let mut t = self.start(
            &req,
            "write_file",
            &r.session_id,
            &r.run_id,
            &r.step_id,
            &r.tool_call_id,
            &r.path,
        );
        let path = r.path.clone();
        let res = self.inner.write_file(req).await;
        if let Ok(resp) = &res {
            let o = resp.get_ref();
            let p = o.change.as_ref().map(|c| c.path.clone()).unwrap_or(path);
            changed(&mut t, vec![p]);
            checkpoints(&mut t, &o.pre_checkpoint_id, &o.post_checkpoint_id);
        }
        t.done(res)
    }

    async fn apply_patch(
        &self,
        req: Request<pb::ApplyPatchRequest>,
    ) -> Result<Response<pb::ApplyPatchResponse>, Status> {
        let r = req.get_ref();
        let mut t = self.start(
            &req,
            "apply_patch",
            &r.session_id,
            &r.run_id,
            &r.step_id,
            &r.tool_call_id,
            "",
        );
        let res = self.inner.apply_patch(req).await;
        if let Ok(resp) = &res {
            let o = resp.get_ref();
            changed(&mut t, o.changes.iter().map(|c| c.path.clone()).collect());
            checkpoints(&mut t, &o.pre_checkpoint_id, &o.post_checkpoint_id);
        }
        t.done(res)
    }

    async fn list_dir(
        &self,
        req: Request<pb::ListDirRequest>,
    ) -> Result<Response<pb::ListDirResponse>, Status> {
        use telemetry::names as n;
        let r = req.get_ref();
        let mut t = self.start(
            &req,
            "list_dir",
            &r.session_id,
            &r.run_id,
            &r.step_id,
            &r.tool_call_id,
            &r.path,
        );
        let res = self.inner.list_dir(req).await;
        if let Ok(resp) = &res {
            t.set(n::OUTPUT_TRUNCATED, resp.get_ref().truncated);
        }
        t.done(res)
    }

    async fn grep(
        &self,
        req: Request<pb::GrepRequest>,
    ) -> Result<Response<pb::GrepResponse>, Status> {
        use telemetry::names as n;
        let r = req.get_ref();
        let mut t = self.start(
            &req,
            "grep",
            &r.session_id,
            &r.run_id,
            &r.step_id,
            &r.tool_call_id,
            &r.path,
        );
        let res = self.inner.grep(req).await;
        if let Ok(resp) = &res {
            let o = resp.get_ref();
            t.set(n::OUTPUT_TRUNCATED, o.truncated)
                .set(n::REDACTIONS, o.redactions);
        }
        t.done(res)
    }
}

fn checkpoints(t: &mut TracedTool, pre: &str, post: &str) {
    use telemetry::names as n;
    if !pre.is_empty() {
        t.set(n::CHECKPOINT_PRE, pre);
    }
    if !post.is_empty() {
        t.set(n::CHECKPOINT_POST, post);
    }
}

/// Records the `resume` span of a Runs.Resume call (started at `start`,
/// Unix ns) in the run's trace: from which step the run continues, the
/// checkpoint it was checked against, drifted paths and steps that need a
/// decision.
pub(crate) fn record_resume(
    mgr: &SessionManager,
    parent: Option<telemetry::SpanContext>,
    start: u64,
    plan: &crate::session::resume::ResumePlan,
) {
    use telemetry::names as n;
    let mut s = match &parent {
        Some(p) => SpanRecord::child_of(n::SPAN_RESUME, p),
        None => SpanRecord::start(
            n::SPAN_RESUME,
            &telemetry::span::trace_id_for_run(&plan.run_id),
            None,
        ),
    };
    s.start_unix_nano = start;
    let decide = plan
        .steps
        .iter()
        .filter(|st| st.action == "needs_decision")
        .count();
    if !plan.resume_from_step.is_empty() {
        s.set(n::RUN_RESUMED_FROM_STEP, plan.resume_from_step.as_str());
    }
    if !plan.checkpoint_id.is_empty() {
        s.set(n::CHECKPOINT_ID, plan.checkpoint_id.as_str());
    }
    s.set(n::RUN_ID, plan.run_id.as_str())
        .set("warden.resume.drifted", plan.drifted.len())
        .set("warden.resume.needs_decision", decide);
    s.status = telemetry::SpanStatus::Ok;
    s.end();
    telemetry::for_state_dir(mgr.state_dir()).record(&plan.run_id, vec![s]);
}
