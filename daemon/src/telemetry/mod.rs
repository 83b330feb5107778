//! Traces: what the system did, as OpenTelemetry spans.
//!
//! One trace per run: the client's agent spans (`invoke_agent`, `step`,
//! `chat {model}`) and the daemon's tool spans (`execute_tool {tool}`,
//! `approval_wait`, `checkpoint_write`, `rollback`, `resume`) form one tree;
//! the parent crosses gRPC in W3C `traceparent` metadata
//! ([`parent_from_metadata`]). Names and attribute keys are in [`names`].
//!
//! Every span is kept in the run's local trace file ([`store`]) and, when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, exported over OTLP ([`otlp`]) through
//! a bounded queue that drops (and counts) rather than wait. String
//! attribute values pass the redactor before they are kept or exported.
//! Message contents and command output are recorded only when
//! `WARDEN_TRACE_CONTENT=1` (see [`record_content`]).

pub mod names;
pub mod otlp;
pub mod span;
pub mod store;
pub mod tool;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

pub use span::{AttrValue, SpanContext, SpanKind, SpanRecord, SpanStatus, TRACEPARENT};
pub use store::{TraceStore, TraceSummary};
pub use tool::{ToolCallInfo, ToolSpan};

use crate::redact::Redactor;

/// Errors of the telemetry module.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A span or run id that is malformed or over a limit.
    #[error("{0}")]
    Invalid(String),
    /// Bad OTLP configuration (environment).
    #[error("{0}")]
    Config(String),
    #[error("trace store: {0}")]
    Io(String),
}

/// Whether message contents and command output go into spans
/// (`WARDEN_TRACE_CONTENT=1`; off by default).
pub fn record_content() -> bool {
    std::env::var("WARDEN_TRACE_CONTENT").is_ok_and(|v| v == "1" || v == "true")
}

/// The parent span carried by a request's `traceparent` metadata, if valid.
pub fn parent_from_metadata(md: &tonic::metadata::MetadataMap) -> Option<SpanContext> {
    md.get(TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(SpanContext::from_traceparent)
}

/// The daemon's trace sink: the local store, the OTLP exporter, and the
/// redactor every attribute passes.
#[derive(Debug)]
pub struct Telemetry {
    store: TraceStore,
    otlp: Option<otlp::OtlpExport>,
    redactor: Redactor,
}

impl Telemetry {
    /// A sink writing under `<state_dir>/traces`, exporting over OTLP when
    /// the environment asks (needs a tokio runtime then; an OTLP
    /// configuration error is logged and export stays off).
    pub fn open(state_dir: &Path) -> Telemetry {
        let otlp = if tokio::runtime::Handle::try_current().is_ok() {
            otlp::OtlpExport::from_env().unwrap_or_else(|e| {
                tracing::error!("OTLP export is off: {e}");
                None
            })
        } else {
            None
        };
        Telemetry {
            store: TraceStore::new(state_dir.join("traces")),
            otlp,
            redactor: Redactor::default(),
        }
    }

    /// The local store.
    pub fn store(&self) -> &TraceStore {
        &self.store
    }

    /// The OTLP exporter, when on.
    pub fn otlp(&self) -> Option<&otlp::OtlpExport> {
        self.otlp.as_ref()
    }

    /// Redacts and clips every string attribute (Warden's own spans).
    fn sanitize(&self, s: &mut SpanRecord) {
        for v in s.attributes.values_mut() {
            match v {
                AttrValue::Str(x) => {
                    *x = span::clip(&self.redactor.redact(x).0, span::MAX_ATTR_VALUE_BYTES)
                }
                AttrValue::StrArray(a) => {
                    for x in a.iter_mut() {
                        *x = self.redactor.redact(x).0;
                    }
                }
                _ => {}
            }
        }
        if let SpanStatus::Error(m) = &mut s.status {
            *m = span::clip(&self.redactor.redact(m).0, span::MAX_ATTR_VALUE_BYTES);
        }
    }

    /// Records finished spans: redacted, appended to the run's trace file
    /// (when `run_id` is set) and offered to the exporter. Never fails and
    /// never waits on the exporter: a store error is logged.
    pub fn record(&self, run_id: &str, mut spans: Vec<SpanRecord>) {
        for s in &mut spans {
            self.sanitize(s);
        }
        if !run_id.is_empty() {
            if let Err(e) = self.store.append(run_id, &spans) {
                tracing::warn!(run_id, "cannot keep spans: {e}");
            }
        }
        if let Some(o) = &self.otlp {
            o.offer(&spans);
        }
    }
}

/// The process's sink for `state_dir` (one per state dir, created on first
/// use; the OTLP exporter starts then).
pub fn for_state_dir(state_dir: &Path) -> Arc<Telemetry> {
    static SINKS: OnceLock<Mutex<HashMap<PathBuf, Arc<Telemetry>>>> = OnceLock::new();
    let mut m = SINKS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    m.entry(state_dir.to_path_buf())
        .or_insert_with(|| Arc::new(Telemetry::open(state_dir)))
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_attributes_are_redacted() {
        let dir = tempfile::tempdir().unwrap();
        let t = Telemetry::open(dir.path());
        let secret = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";
        let mut s = SpanRecord::start("execute_tool shell", &span::trace_id_for_run("r"), None);
        s.set(
            names::COMMAND,
            format!("curl -H 'Authorization: token {secret}' x"),
        );
        s.end();
        t.record("r", vec![s]);
        let back = t.store().read("r").unwrap();
        let cmd = back[0].get_str(names::COMMAND).unwrap();
        assert!(!cmd.contains(secret), "{cmd}");
        assert!(cmd.starts_with("curl"), "{cmd}");
    }
}
