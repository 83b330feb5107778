//! `warden.v1.Runs`: agent runs and their state.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::{peer, status};
use crate::proto::v1::{self as pb, runs_server::Runs};
use crate::session::runs::Run;
use crate::session::SessionManager;

pub struct RunsService {
    mgr: Arc<SessionManager>,
}

impl RunsService {
    pub fn new(mgr: Arc<SessionManager>) -> Self {
        RunsService { mgr }
    }
}

pub(crate) fn run_to_proto(r: Run) -> pb::Run {
    pb::Run {
        id: r.id,
        session_id: r.session_id,
        task: r.task,
        workspace: r.workspace,
        policy_name: r.policy_name,
        model: r.model,
        status: r.status,
        created_at_ms: r.created_at_ms,
        updated_at_ms: r.updated_at_ms,
        state_json: r.state_json,
        steps: r.steps,
        input_tokens: r.input_tokens,
        output_tokens: r.output_tokens,
        cost_micros: r.cost_micros,
        resumed_from_step: r.resumed_from_step,
    }
}

#[tonic::async_trait]
impl Runs for RunsService {
    async fn create_run(
        &self,
        req: Request<pb::CreateRunRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        let peer = peer(&req)?;
        let r = req.get_ref();
        let run = self
            .mgr
            .create_run(peer, &r.session_id, &r.task, &r.model, &r.run_id)
            .map_err(status)?;
        Ok(Response::new(run_to_proto(run)))
    }

    async fn get_run(&self, req: Request<pb::GetRunRequest>) -> Result<Response<pb::Run>, Status> {
        let peer = peer(&req)?;
        Ok(Response::new(run_to_proto(
            self.mgr
                .get_run(peer, &req.get_ref().run_id)
                .map_err(status)?,
        )))
    }

    async fn list_runs(
        &self,
        req: Request<pb::ListRunsRequest>,
    ) -> Result<Response<pb::ListRunsResponse>, Status> {
        let peer = peer(&req)?;
        let r = req.get_ref();
        let runs = self
            .mgr
            .list_runs(peer, &r.session_id, r.limit)
            .map_err(status)?;
        Ok(Response::new(pb::ListRunsResponse {
            runs: runs.into_iter().map(run_to_proto).collect(),
        }))
    }

    async fn record_run_state(
        &self,
        req: Request<pb::RecordRunStateRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        let mgr = self.mgr.clone();
        let run = tokio::task::spawn_blocking(move || {
            mgr.record_run_state(
                peer,
                &r.run_id,
                &r.state_json,
                (r.input_tokens, r.output_tokens),
                r.cost_micros,
            )
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(status)?;
        Ok(Response::new(run_to_proto(run)))
    }

    async fn finish_run(
        &self,
        req: Request<pb::FinishRunRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        let peer = peer(&req)?;
        let r = req.get_ref();
        if r.status == "running" {
            return Err(Status::invalid_argument(
                "finish_run takes done, failed, stopped or interrupted",
            ));
        }
        Ok(Response::new(run_to_proto(
            self.mgr
                .set_run_status(peer, &r.run_id, &r.status)
                .map_err(status)?,
        )))
    }

    async fn resume(
        &self,
        req: Request<pb::ResumeRequest>,
    ) -> Result<Response<pb::ResumePlan>, Status> {
        let peer = peer(&req)?;
        let parent = crate::telemetry::parent_from_metadata(req.metadata());
        let started = crate::telemetry::span::now_unix_nano();
        let run_id = req.into_inner().run_id;
        let mgr = self.mgr.clone();
        let plan = tokio::task::spawn_blocking(move || {
            let view = mgr.checkpoint_view();
            mgr.resume(peer, &run_id, view.as_ref())
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(status)?;
        super::traces::record_resume(&self.mgr, parent, started, &plan);
        Ok(Response::new(pb::ResumePlan {
            run_id: plan.run_id,
            checkpoint_id: plan.checkpoint_id,
            drifted: plan.drifted,
            steps: plan
                .steps
                .into_iter()
                .map(|s| pb::StepStatus {
                    step_id: s.step_id,
                    tool_call_id: s.tool_call_id,
                    tool: s.tool,
                    journal: s.journal,
                    idempotent: s.idempotent,
                    side_effects: s.side_effects,
                    action: s.action,
                    effects: s.effects,
                    result_json: s.result_json,
                })
                .collect(),
            note: plan.note,
            state_json: plan.state_json,
            resume_from_step: plan.resume_from_step,
        }))
    }
}
