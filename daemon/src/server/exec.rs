//! `warden.v1.Exec`: the server-streaming Exec call.

use std::pin::Pin;
use std::sync::Arc;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::{peer, status};
use crate::policy::Classification;
use crate::proto::v1::{self as pb, exec_event::Event, exec_server::Exec};
use crate::session::exec::{ExecEvent, ExecParams, ExitSummary};
use crate::session::SessionManager;

pub struct ExecService {
    mgr: Arc<SessionManager>,
}

impl ExecService {
    pub fn new(mgr: Arc<SessionManager>) -> Self {
        ExecService { mgr }
    }
}

/// Domain classification -> proto.
pub(crate) fn classification_to_proto(c: &Classification) -> pb::Classification {
    pb::Classification {
        command: c.command.clone(),
        tier: c.tier.to_proto(),
        decision: c.decision.to_proto(),
        rule: c.rule.clone().unwrap_or_default(),
        reasons: c.reasons.clone(),
        parts: c
            .parts
            .iter()
            .map(|p| pb::CommandPart {
                argv: p.argv.clone(),
                tier: p.tier.to_proto(),
                reasons: p.reasons.clone(),
            })
            .collect(),
        writes: c.writes.clone(),
        hosts: c.hosts.clone(),
        install: c.install.as_ref().map(|i| pb::InstallIntent {
            manager: i.manager.clone(),
            operation: i.operation.clone(),
            packages: i
                .packages
                .iter()
                .map(|p| pb::PackageRef {
                    name: p.name.clone(),
                    version: p.version.clone().unwrap_or_default(),
                })
                .collect(),
            source: i.source.clone(),
            scope: i.scope.clone(),
            flags: i.flags.clone(),
            warnings: i.warnings.clone(),
            scripts_enabled: i.scripts_enabled,
        }),
        justification: c.justification.clone().unwrap_or_default(),
    }
}

fn exit_to_proto(s: ExitSummary) -> pb::ExitEvent {
    pb::ExitEvent {
        code: s.code.unwrap_or(-1),
        signal: s.signal.unwrap_or(0),
        duration_ms: s.duration_ms,
        timed_out: s.timed_out,
        refused: s.refusal.is_some(),
        refusal: s.refusal.unwrap_or_default(),
        stdout_dropped_bytes: s.stdout_dropped,
        stderr_dropped_bytes: s.stderr_dropped,
        redactions: s.redactions,
        pre_checkpoint_id: s.pre_checkpoint_id.unwrap_or_default(),
        post_checkpoint_id: s.post_checkpoint_id.unwrap_or_default(),
        approval_request_id: s.approval_request_id.unwrap_or_default(),
    }
}

/// Domain exec event -> proto.
pub(crate) fn event_to_proto(e: ExecEvent) -> pb::ExecEvent {
    let event = match e {
        ExecEvent::Decision {
            classification,
            profile,
        } => Event::Decision(pb::DecisionEvent {
            classification: Some(classification_to_proto(&classification)),
            profile: profile.map(|p| p.as_str().to_string()).unwrap_or_default(),
        }),
        ExecEvent::Started {
            pid,
            started_at_ms,
            landlock,
            profile,
        } => Event::Started(pb::StartedEvent {
            pid,
            started_at_ms,
            landlock: landlock.as_str().into(),
            profile: profile.as_str().into(),
        }),
        ExecEvent::ApprovalRequired(rec) => {
            Event::ApprovalRequired(super::approvals::approval_to_proto(&rec))
        }
        ExecEvent::ApprovalResolved {
            request_id,
            state,
            scope,
        } => Event::ApprovalResolved(pb::ApprovalResolved {
            request_id,
            state: super::approvals::state_to_proto(state),
            scope: super::approvals::scope_to_proto(scope),
        }),
        ExecEvent::Stdout(data) => Event::Stdout(pb::OutputChunk { data }),
        ExecEvent::Stderr(data) => Event::Stderr(pb::OutputChunk { data }),
        ExecEvent::Checkpoint {
            id,
            kind,
            root_hash,
        } => Event::Checkpoint(pb::CheckpointEvent {
            checkpoint_id: id,
            kind,
            root_hash,
        }),
        ExecEvent::Exit(s) => Event::Exit(exit_to_proto(s)),
    };
    pb::ExecEvent { event: Some(event) }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::ExecEvent, Status>> + Send>>;

/// The one-shot fields of an Exec request, checked against `session_id`:
/// `Some((workspace, policy_name, policy_toml))` for a one-shot call, `None`
/// for a call in an existing session.
fn one_shot_fields(r: &pb::ExecRequest) -> Result<Option<(String, String, String)>, Status> {
    let one_shot_set =
        !r.workspace.is_empty() || !r.policy_name.is_empty() || !r.policy_toml.is_empty();
    match (r.session_id.is_empty(), one_shot_set) {
        (false, false) => Ok(None),
        (false, true) => Err(Status::invalid_argument(
            "workspace, policy_name and policy_toml open a one-shot session: leave them empty with session_id",
        )),
        (true, _) if r.workspace.is_empty() => Err(Status::invalid_argument(
            "session_id is required (or workspace, for a one-shot session)",
        )),
        (true, _) => Ok(Some((
            r.workspace.clone(),
            r.policy_name.clone(),
            r.policy_toml.clone(),
        ))),
    }
}

#[tonic::async_trait]
impl Exec for ExecService {
    type ExecStream = EventStream;

    async fn exec(
        &self,
        req: Request<pb::ExecRequest>,
    ) -> Result<Response<Self::ExecStream>, Status> {
        let peer = peer(&req)?;
        let parent = crate::telemetry::parent_from_metadata(req.metadata());
        let r = req.into_inner();
        let one_shot = one_shot_fields(&r);
        let mut params = ExecParams {
            session_id: r.session_id,
            command: r.command,
            timeout_ms: r.timeout_ms,
            cwd: r.cwd,
            approve: r.approve,
            run_id: r.run_id,
            step_id: r.step_id,
            tool_call_id: r.tool_call_id,
            output_limit_bytes: r.output_limit_bytes,
        };
        // Schema errors (the request's own fields) are statuses, before any
        // session is opened for a one-shot call.
        let checked = one_shot.and_then(|o| {
            self.mgr
                .validate_exec(peer, &params)
                .map(|_| o)
                .map_err(status)
        });
        // A one-shot call's session: the same checks as CreateSession (a bad
        // workspace or policy is a status), closed when the call ends.
        let t0 = std::time::Instant::now();
        let one_shot = match checked {
            Ok(Some((ws, name, toml))) => {
                let mgr = self.mgr.clone();
                tokio::task::spawn_blocking(move || mgr.open_one_shot(&ws, &name, &toml, peer))
                    .await
                    .map_err(|e| Status::internal(e.to_string()))
                    .and_then(|r| r.map_err(status))
                    .map(Some)
            }
            Ok(None) => Ok(None),
            Err(st) => Err(st),
        };
        if let Ok(Some(o)) = &one_shot {
            params.session_id = o.session().id.clone();
            if crate::session::phases::enabled() {
                eprintln!("exec-trace one-shot open {} us", t0.elapsed().as_micros());
            }
        }
        let mut span = super::traces::tool_span(
            &self.mgr,
            peer,
            "shell",
            &params.session_id,
            &params.run_id,
            &params.step_id,
            &params.tool_call_id,
            parent,
        );
        span.set(crate::telemetry::names::COMMAND, params.command.as_str());
        let one_shot = match one_shot {
            Ok(o) => o,
            Err(st) => return span.done(Err(st)),
        };
        // Unknown, foreign or closed sessions are statuses, before the stream.
        if one_shot.is_none() {
            if let Err(e) = self.mgr.open_session_for(&params.session_id, peer) {
                return span.done(Err(status(e)));
            }
        }
        let (tx, mut rx) = tokio::sync::mpsc::channel::<ExecEvent>(64);
        let (out_tx, out_rx) = tokio::sync::mpsc::channel::<Result<pb::ExecEvent, Status>>(64);
        if let Some(o) = &one_shot {
            // The first event of a one-shot call: its session (the channel
            // is empty, so this cannot fail or wait).
            let first = pb::ExecEvent {
                event: Some(Event::Session(super::sessions::to_proto(o.session()))),
            };
            let _ = out_tx.try_send(Ok(first));
        }
        let mgr = self.mgr.clone();
        tokio::spawn(async move {
            let run = mgr.exec(peer, params, tx);
            tokio::pin!(run);
            let mut done = false;
            loop {
                tokio::select! {
                    r = &mut run, if !done => {
                        done = true;
                        if let Err(e) = r {
                            let _ = out_tx.send(Err(span.fail(status(e)))).await;
                        }
                    }
                    // The client went away while nothing was being sent
                    // (waiting for an approval): stop, so a later answer
                    // cannot start the command for nobody.
                    _ = out_tx.closed() => break,
                    ev = rx.recv() => match ev {
                        Some(ev) => {
                            span.exec_event(&ev);
                            if out_tx.send(Ok(event_to_proto(ev))).await.is_err() {
                                // The client went away: dropping rx makes the
                                // pipeline see tx.closed() and kill the command.
                                break;
                            }
                        }
                        None => break,
                    }
                }
            }
            // Finish the pipeline (it kills the command if rx was dropped).
            drop(rx);
            if !done {
                let _ = run.await;
            }
            // A one-shot session closes before the stream ends, so a client
            // that saw the end finds it closed.
            if let Some(o) = one_shot {
                if let Err(e) = o.close() {
                    tracing::error!(error = %e, "closing a one-shot session failed");
                }
            }
            span.finish();
            drop(out_tx);
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(out_rx),
        )))
    }
}
