//! `warden.v1.Audit`: stream and verify the audit log.

use std::pin::Pin;
use std::sync::Arc;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::{peer, status};
use crate::approval::AuditRecord;
use crate::proto::v1::{self as pb, audit_server::Audit};
use crate::session::SessionManager;

/// Records read from the database per batch while streaming.
const BATCH: usize = 500;

pub struct AuditService {
    mgr: Arc<SessionManager>,
}

impl AuditService {
    pub fn new(mgr: Arc<SessionManager>) -> Self {
        AuditService { mgr }
    }
}

fn record_to_proto(r: AuditRecord) -> pb::AuditRecord {
    pb::AuditRecord {
        seq: r.seq,
        time_ms: r.time_ms,
        session_id: r.session_id,
        run_id: r.run_id,
        step_id: r.step_id,
        actor: r.actor,
        action: r.action,
        detail_json: r.detail_json,
        layer: r.layer,
        prev_hash: r.prev_hash,
        hash: r.hash,
    }
}

type AuditStream = Pin<Box<dyn Stream<Item = Result<pb::AuditRecord, Status>> + Send>>;

#[tonic::async_trait]
impl Audit for AuditService {
    type ListAuditStream = AuditStream;

    async fn list_audit(
        &self,
        req: Request<pb::ListAuditRequest>,
    ) -> Result<Response<Self::ListAuditStream>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        // Authorization and the first batch before the stream starts.
        let first = self
            .mgr
            .audit_records(peer, &r.session_id, r.after_seq, BATCH)
            .map_err(status)?;
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let mgr = self.mgr.clone();
        tokio::spawn(async move {
            let mut batch = first;
            loop {
                let full = batch.len() == BATCH;
                let last = batch.last().map(|r| r.seq);
                for rec in batch {
                    if tx.send(Ok(record_to_proto(rec))).await.is_err() {
                        return;
                    }
                }
                let (true, Some(after)) = (full, last) else {
                    return;
                };
                batch = match mgr.audit_records(peer, &r.session_id, after, BATCH) {
                    Ok(b) => b,
                    Err(e) => {
                        let _ = tx.send(Err(status(e))).await;
                        return;
                    }
                };
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn verify_audit(
        &self,
        req: Request<pb::VerifyAuditRequest>,
    ) -> Result<Response<pb::VerifyAuditResponse>, Status> {
        let peer = peer(&req)?;
        let report = self.mgr.verify_audit(peer).map_err(status)?;
        let head = self.mgr.audit().head();
        let kind = report
            .kind
            .and_then(|k| serde_json::to_value(k).ok())
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        Ok(Response::new(pb::VerifyAuditResponse {
            ok: report.ok,
            records: report.records,
            first_broken_seq: report.first_broken_seq,
            error: report.error,
            kind,
            unanchored: report.unanchored,
            head_seq: head.seq,
            head_hash: head.hash,
        }))
    }
}
