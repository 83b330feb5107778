//! OTLP export of finished spans (gRPC through tonic, or HTTP protobuf /
//! JSON) with `opentelemetry-otlp`, configured by the standard environment
//! variables of the OpenTelemetry specification ("OTLP Exporter
//! Configuration", "Batch Span Processor"):
//!
//! - on when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` is set, unless `OTEL_SDK_DISABLED=true`
//!   or `OTEL_TRACES_EXPORTER=none`;
//! - `OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL`: `grpc`, `http/protobuf`
//!   (the default) or `http/json`; headers, timeout and compression from
//!   `OTEL_EXPORTER_OTLP[_TRACES]_{HEADERS,TIMEOUT,COMPRESSION}` (read by
//!   the exporter);
//! - `OTEL_SERVICE_NAME` (default `warden`), `OTEL_RESOURCE_ATTRIBUTES`;
//! - `OTEL_BSP_MAX_QUEUE_SIZE` (default 2048 spans),
//!   `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (512), `OTEL_BSP_SCHEDULE_DELAY`
//!   (1000 ms here).
//!
//! Spans are offered to a bounded queue with `try_send`: a full queue (the
//! collector is down or slow) drops the span and counts it; nothing on a
//! tool call's path ever waits for the exporter.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind as OtelKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use tokio::sync::mpsc;

use super::span::{AttrValue, SpanKind, SpanRecord, SpanStatus};
use super::TelemetryError;

/// Export counters.
#[derive(Debug, Default)]
pub struct OtlpStats {
    /// Spans the collector accepted.
    pub exported: AtomicU64,
    /// Spans dropped: queue full, or the export failed or timed out.
    pub dropped: AtomicU64,
}

/// The exporter's queue handle.
#[derive(Debug)]
pub struct OtlpExport {
    tx: mpsc::Sender<SpanRecord>,
    endpoint: String,
    stats: Arc<OtlpStats>,
}

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.trim().is_empty())
}

fn env_num(k: &str, default: u64) -> u64 {
    env(k)
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

impl OtlpExport {
    /// Starts the exporter from the environment when an endpoint is set
    /// (`Ok(None)` otherwise). Must run inside a tokio runtime (the worker
    /// is a task of it).
    ///
    /// Errors: Config (unknown protocol, exporter build failure).
    pub fn from_env() -> Result<Option<OtlpExport>, TelemetryError> {
        let endpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"));
        let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
        let Some(endpoint) = endpoint.filter(|_| !disabled) else {
            return Ok(None);
        };
        let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .unwrap_or_else(|| "http/protobuf".into());
        let b = SpanExporter::builder();
        let built = match protocol.trim() {
            "grpc" => b.with_tonic().with_protocol(Protocol::Grpc).build(),
            "http/protobuf" => b.with_http().with_protocol(Protocol::HttpBinary).build(),
            "http/json" => b.with_http().with_protocol(Protocol::HttpJson).build(),
            other => {
                return Err(TelemetryError::Config(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL {other:?}: expected grpc, http/protobuf or http/json"
            )))
            }
        };
        let mut exporter =
            built.map_err(|e| TelemetryError::Config(format!("OTLP exporter: {e}")))?;
        let mut resource = opentelemetry_sdk::Resource::builder();
        if env("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("warden");
        }
        exporter.set_resource(&resource.build());
        let queue = env_num("OTEL_BSP_MAX_QUEUE_SIZE", 2048).min(1 << 20) as usize;
        let batch = env_num("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512).min(queue as u64) as usize;
        let delay = Duration::from_millis(env_num("OTEL_BSP_SCHEDULE_DELAY", 1000).min(60_000));
        let timeout = Duration::from_millis(
            env_num(
                "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                env_num("OTEL_EXPORTER_OTLP_TIMEOUT", 10_000),
            )
            .min(600_000),
        );
        let (tx, rx) = mpsc::channel(queue);
        let stats = Arc::new(OtlpStats::default());
        tokio::spawn(worker(exporter, rx, stats.clone(), batch, delay, timeout));
        tracing::info!(%endpoint, %protocol, queue, "exporting traces over OTLP");
        Ok(Some(OtlpExport {
            tx,
            endpoint,
            stats,
        }))
    }

    /// Queues `spans` for export without waiting: when the queue is full the
    /// span is dropped and counted.
    pub fn offer(&self, spans: &[SpanRecord]) {
        for s in spans {
            if self.tx.try_send(s.clone()).is_err() {
                let n = self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                if n.is_power_of_two() {
                    tracing::warn!(dropped = n + 1, "OTLP export queue full: dropping spans");
                }
            }
        }
    }

    /// The configured endpoint.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Export counters.
    pub fn stats(&self) -> &OtlpStats {
        &self.stats
    }
}

async fn worker(
    exporter: SpanExporter,
    mut rx: mpsc::Receiver<SpanRecord>,
    stats: Arc<OtlpStats>,
    batch: usize,
    delay: Duration,
    timeout: Duration,
) {
    let mut failures: u64 = 0;
    while let Some(first) = rx.recv().await {
        let mut spans = vec![first];
        let deadline = tokio::time::Instant::now() + delay;
        while spans.len() < batch {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(s)) => spans.push(s),
                Ok(None) | Err(_) => break,
            }
        }
        let n = spans.len() as u64;
        let data: Vec<SpanData> = spans.iter().map(to_span_data).collect();
        match tokio::time::timeout(timeout, exporter.export(data)).await {
            Ok(Ok(())) => {
                stats.exported.fetch_add(n, Ordering::Relaxed);
            }
            r => {
                stats.dropped.fetch_add(n, Ordering::Relaxed);
                failures += 1;
                if failures.is_power_of_two() {
                    let why = match r {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("timed out after {} ms", timeout.as_millis()),
                    };
                    tracing::warn!(failures, spans = n, "OTLP export failed: {why}");
                }
            }
        }
    }
}

fn time(nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(nanos)
}

fn otel_value(v: &AttrValue) -> Value {
    match v {
        AttrValue::Str(s) => Value::String(s.clone().into()),
        AttrValue::Int(i) => Value::I64(*i),
        AttrValue::F64(f) => Value::F64(*f),
        AttrValue::Bool(b) => Value::Bool(*b),
        AttrValue::StrArray(a) => Value::Array(opentelemetry::Array::String(
            a.iter().map(|s| StringValue::from(s.clone())).collect(),
        )),
    }
}

/// A [`SpanRecord`] as the SDK's exportable span.
pub fn to_span_data(s: &SpanRecord) -> SpanData {
    let trace_id = TraceId::from_hex(&s.trace_id).unwrap_or(TraceId::INVALID);
    let span_id = SpanId::from_hex(&s.span_id).unwrap_or(SpanId::INVALID);
    let parent = if s.parent_span_id.is_empty() {
        SpanId::INVALID
    } else {
        SpanId::from_hex(&s.parent_span_id).unwrap_or(SpanId::INVALID)
    };
    SpanData {
        span_context: SpanContext::new(
            trace_id,
            span_id,
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: parent,
        parent_span_is_remote: false,
        span_kind: match s.kind {
            SpanKind::Internal => OtelKind::Internal,
            SpanKind::Server => OtelKind::Server,
            SpanKind::Client => OtelKind::Client,
        },
        name: Cow::Owned(s.name.clone()),
        start_time: time(s.start_unix_nano),
        end_time: time(s.end_unix_nano),
        attributes: s
            .attributes
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), otel_value(v)))
            .collect(),
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: match &s.status {
            SpanStatus::Unset => Status::Unset,
            SpanStatus::Ok => Status::Ok,
            SpanStatus::Error(m) => Status::error(m.clone()),
        },
        instrumentation_scope: InstrumentationScope::builder("warden")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    }
}
