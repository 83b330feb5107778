//! Services whose modules have not landed yet answer UNIMPLEMENTED with the
//! name of what is missing. Each is replaced by its own file when it lands.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::proto::v1::{self as pb, *};
use crate::session::SessionManager;

fn todo(what: &str) -> Status {
    Status::unimplemented(format!(
        "{what} is not implemented in this build of wardend"
    ))
}

pub(super) fn add(
    routes: tonic::service::Routes,
    mgr: Arc<SessionManager>,
) -> tonic::service::Routes {
    let _ = &mgr;
    routes.add_service(traces_server::TracesServer::new(Traces))
}

pub struct Traces;
#[tonic::async_trait]
impl traces_server::Traces for Traces {
    async fn export_spans(
        &self,
        _: Request<pb::ExportSpansRequest>,
    ) -> Result<Response<pb::ExportSpansResponse>, Status> {
        Err(todo("Traces.ExportSpans"))
    }
    async fn list_traces(
        &self,
        _: Request<pb::ListTracesRequest>,
    ) -> Result<Response<pb::ListTracesResponse>, Status> {
        Err(todo("Traces.ListTraces"))
    }
    async fn get_trace(
        &self,
        _: Request<pb::GetTraceRequest>,
    ) -> Result<Response<pb::GetTraceResponse>, Status> {
        Err(todo("Traces.GetTrace"))
    }
}
