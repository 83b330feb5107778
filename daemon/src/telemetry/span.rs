//! One finished span ([`SpanRecord`]), its ids, W3C `traceparent`, and its
//! encodings: OTLP/JSON (the local trace file and `warden trace export`,
//! following the OTLP specification's JSON encoding: hex ids, 64-bit
//! integers as decimal strings, enums as numbers) and the `warden.v1.Span`
//! message.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::TelemetryError;
use crate::proto::v1 as pb;

/// Longest attribute value kept, bytes (longer values are clipped with a
/// marker when Warden records them, refused when a client sends them).
pub const MAX_ATTR_VALUE_BYTES: usize = 4096;
/// Most attributes on one span.
pub const MAX_ATTRS: usize = 128;
/// Longest span name or attribute key, bytes.
pub const MAX_NAME_BYTES: usize = 256;

/// An attribute value (the OTLP `AnyValue` kinds Warden uses).
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(String),
    Int(i64),
    F64(f64),
    Bool(bool),
    StrArray(Vec<String>),
}

impl From<&str> for AttrValue {
    fn from(v: &str) -> Self {
        AttrValue::Str(v.to_string())
    }
}
impl From<String> for AttrValue {
    fn from(v: String) -> Self {
        AttrValue::Str(v)
    }
}
impl From<&String> for AttrValue {
    fn from(v: &String) -> Self {
        AttrValue::Str(v.clone())
    }
}
impl From<bool> for AttrValue {
    fn from(v: bool) -> Self {
        AttrValue::Bool(v)
    }
}
impl From<i64> for AttrValue {
    fn from(v: i64) -> Self {
        AttrValue::Int(v)
    }
}
impl From<i32> for AttrValue {
    fn from(v: i32) -> Self {
        AttrValue::Int(v.into())
    }
}
impl From<u32> for AttrValue {
    fn from(v: u32) -> Self {
        AttrValue::Int(v.into())
    }
}
impl From<u64> for AttrValue {
    fn from(v: u64) -> Self {
        AttrValue::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<usize> for AttrValue {
    fn from(v: usize) -> Self {
        AttrValue::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<f64> for AttrValue {
    fn from(v: f64) -> Self {
        AttrValue::F64(v)
    }
}
impl From<Vec<String>> for AttrValue {
    fn from(v: Vec<String>) -> Self {
        AttrValue::StrArray(v)
    }
}

impl AttrValue {
    /// The value as JSON (string, number, bool, array of strings).
    pub fn to_json(&self) -> Value {
        match self {
            AttrValue::Str(s) => json!(s),
            AttrValue::Int(i) => json!(i),
            AttrValue::F64(f) => json!(f),
            AttrValue::Bool(b) => json!(b),
            AttrValue::StrArray(a) => json!(a),
        }
    }

    /// Parses a JSON value (as [`AttrValue::to_json`] writes it).
    /// Errors: objects, nulls, nested or mixed arrays.
    pub fn from_json(v: &Value) -> Result<AttrValue, String> {
        Ok(match v {
            Value::String(s) => AttrValue::Str(s.clone()),
            Value::Bool(b) => AttrValue::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => AttrValue::Int(i),
                None => AttrValue::F64(n.as_f64().ok_or("number out of range")?),
            },
            Value::Array(a) => AttrValue::StrArray(
                a.iter()
                    .map(|x| x.as_str().map(str::to_string))
                    .collect::<Option<_>>()
                    .ok_or("arrays must hold strings only")?,
            ),
            _ => return Err("expected a string, number, boolean or array of strings".into()),
        })
    }

    /// The OTLP/JSON `AnyValue`.
    pub fn to_otlp(&self) -> Value {
        match self {
            AttrValue::Str(s) => json!({"stringValue": s}),
            AttrValue::Int(i) => json!({"intValue": i.to_string()}),
            AttrValue::F64(f) => json!({"doubleValue": f}),
            AttrValue::Bool(b) => json!({"boolValue": b}),
            AttrValue::StrArray(a) => {
                json!({"arrayValue": {"values": a.iter().map(|s| json!({"stringValue": s})).collect::<Vec<_>>()}})
            }
        }
    }

    /// Parses an OTLP/JSON `AnyValue` of the kinds above.
    pub fn from_otlp(v: &Value) -> Result<AttrValue, String> {
        if let Some(s) = v.get("stringValue").and_then(Value::as_str) {
            return Ok(AttrValue::Str(s.to_string()));
        }
        if let Some(i) = v.get("intValue") {
            let n = match i {
                Value::String(s) => s.parse::<i64>().map_err(|e| e.to_string())?,
                Value::Number(n) => n.as_i64().ok_or("intValue out of range")?,
                _ => return Err("intValue must be a string or number".into()),
            };
            return Ok(AttrValue::Int(n));
        }
        if let Some(f) = v.get("doubleValue").and_then(Value::as_f64) {
            return Ok(AttrValue::F64(f));
        }
        if let Some(b) = v.get("boolValue").and_then(Value::as_bool) {
            return Ok(AttrValue::Bool(b));
        }
        if let Some(a) = v.pointer("/arrayValue/values").and_then(Value::as_array) {
            return Ok(AttrValue::StrArray(
                a.iter()
                    .map(|x| {
                        x.get("stringValue")
                            .and_then(Value::as_str)
                            .map(str::to_string)
                    })
                    .collect::<Option<_>>()
                    .ok_or("arrays must hold strings only")?,
            ));
        }
        Err(format!("unsupported attribute value {v}"))
    }

    /// The value as a short text for people (strings unquoted).
    pub fn display(&self) -> String {
        match self {
            AttrValue::Str(s) => s.clone(),
            AttrValue::StrArray(a) => a.join(","),
            other => other.to_json().to_string(),
        }
    }
}

/// Span kind (OTLP `SpanKind` numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpanKind {
    #[default]
    Internal = 1,
    Server = 2,
    Client = 3,
}

impl SpanKind {
    fn from_i64(v: i64) -> SpanKind {
        match v {
            2 => SpanKind::Server,
            3 => SpanKind::Client,
            _ => SpanKind::Internal,
        }
    }
}

/// Span status (OTLP `Status`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SpanStatus {
    #[default]
    Unset,
    Ok,
    Error(String),
}

/// One span: what one operation did, when, under which parent.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SpanRecord {
    /// 32 lowercase hex characters.
    pub trace_id: String,
    /// 16 lowercase hex characters.
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    pub kind: SpanKind,
    /// Unix epoch nanoseconds.
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    pub attributes: BTreeMap<String, AttrValue>,
    pub status: SpanStatus,
}

/// Current time as Unix epoch nanoseconds.
pub fn now_unix_nano() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A new random span id (16 hex characters, never all zero): the random
/// bits of a UUIDv7.
pub fn new_span_id() -> String {
    loop {
        let b = uuid::Uuid::now_v7().into_bytes();
        if b[8..].iter().any(|&x| x != 0) {
            return hex::encode(&b[8..]);
        }
    }
}

/// The trace id of a run (32 hex characters): derived from the run id so a
/// resumed run continues the same trace.
pub fn trace_id_for_run(run_id: &str) -> String {
    let h = blake3::hash(format!("warden-trace:{run_id}").as_bytes());
    hex::encode(&h.as_bytes()[..16])
}

fn is_hex_id(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && s.bytes().any(|b| b != b'0')
}

/// A span's place in a trace: what a child needs from its parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanContext {
    pub trace_id: String,
    pub span_id: String,
}

impl SpanContext {
    /// The W3C Trace Context `traceparent` header value
    /// (`00-{trace_id}-{span_id}-01`, sampled).
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace_id, self.span_id)
    }

    /// Parses a `traceparent` value (W3C Trace Context level 1, section
    /// 3.2): version `00` (or a later version with the same prefix, never
    /// `ff`), a non-zero 32-hex trace id and 16-hex parent id, 2-hex flags.
    /// Anything else is `None` (the spec says: ignore it).
    pub fn from_traceparent(v: &str) -> Option<SpanContext> {
        let v = v.trim();
        let mut it = v.split('-');
        let (ver, trace, span, flags) = (it.next()?, it.next()?, it.next()?, it.next()?);
        if ver.len() != 2 || !ver.bytes().all(|b| b.is_ascii_hexdigit()) || ver == "ff" {
            return None;
        }
        if ver == "00" && it.next().is_some() {
            return None;
        }
        if flags.len() != 2 || !flags.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        if !is_hex_id(trace, 32) || !is_hex_id(span, 16) {
            return None;
        }
        Some(SpanContext {
            trace_id: trace.to_string(),
            span_id: span.to_string(),
        })
    }
}

/// The W3C metadata key carrying the parent span across gRPC calls.
pub const TRACEPARENT: &str = "traceparent";

impl SpanRecord {
    /// A span starting now under `parent` (a new root of `trace_id` when
    /// `parent` is `None`).
    pub fn start(name: impl Into<String>, trace_id: &str, parent: Option<&str>) -> SpanRecord {
        SpanRecord {
            trace_id: trace_id.to_string(),
            span_id: new_span_id(),
            parent_span_id: parent.unwrap_or_default().to_string(),
            name: name.into(),
            start_unix_nano: now_unix_nano(),
            ..Default::default()
        }
    }

    /// A span starting now as a child of `parent`.
    pub fn child_of(name: impl Into<String>, parent: &SpanContext) -> SpanRecord {
        SpanRecord::start(name, &parent.trace_id, Some(&parent.span_id))
    }

    /// This span as a parent.
    pub fn context(&self) -> SpanContext {
        SpanContext {
            trace_id: self.trace_id.clone(),
            span_id: self.span_id.clone(),
        }
    }

    /// Sets an attribute.
    pub fn set(&mut self, key: &str, v: impl Into<AttrValue>) -> &mut Self {
        self.attributes.insert(key.to_string(), v.into());
        self
    }

    /// Sets an attribute when `v` is `Some`.
    pub fn set_opt<V: Into<AttrValue>>(&mut self, key: &str, v: Option<V>) -> &mut Self {
        if let Some(v) = v {
            self.set(key, v);
        }
        self
    }

    /// An attribute's value.
    pub fn get(&self, key: &str) -> Option<&AttrValue> {
        self.attributes.get(key)
    }

    /// An attribute as text (see [`AttrValue::display`]).
    pub fn get_str(&self, key: &str) -> Option<String> {
        self.get(key).map(AttrValue::display)
    }

    /// Marks the span failed with `error.type` = `kind`.
    pub fn fail(&mut self, kind: &str, message: impl Into<String>) -> &mut Self {
        self.set(super::names::ERROR_TYPE, kind);
        self.status = SpanStatus::Error(message.into());
        self
    }

    /// Ends the span now.
    pub fn end(&mut self) -> &mut Self {
        self.end_unix_nano = now_unix_nano().max(self.start_unix_nano);
        self
    }

    /// Duration in ms (0 while not ended).
    pub fn duration_ms(&self) -> u64 {
        self.end_unix_nano.saturating_sub(self.start_unix_nano) / 1_000_000
    }

    /// The OTLP/JSON `Span` object (one line of a local trace file).
    pub fn to_otlp_json(&self) -> Value {
        let mut o = json!({
            "traceId": self.trace_id,
            "spanId": self.span_id,
            "name": self.name,
            "kind": self.kind as i64,
            "startTimeUnixNano": self.start_unix_nano.to_string(),
            "endTimeUnixNano": self.end_unix_nano.to_string(),
            "attributes": self.attributes.iter().map(|(k, v)| json!({"key": k, "value": v.to_otlp()})).collect::<Vec<_>>(),
            "status": match &self.status {
                SpanStatus::Unset => json!({}),
                SpanStatus::Ok => json!({"code": 1}),
                SpanStatus::Error(m) => json!({"code": 2, "message": m}),
            },
        });
        if !self.parent_span_id.is_empty() {
            o["parentSpanId"] = json!(self.parent_span_id);
        }
        o
    }

    /// Parses an OTLP/JSON `Span` object.
    /// Errors: [`TelemetryError::Invalid`] naming what is wrong.
    pub fn from_otlp_json(v: &Value) -> Result<SpanRecord, TelemetryError> {
        let bad = |m: String| TelemetryError::Invalid(m);
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default();
        let nanos = |k: &str| -> Result<u64, TelemetryError> {
            match v.get(k) {
                Some(Value::String(s)) => s.parse().map_err(|_| bad(format!("{k}: not a number"))),
                Some(Value::Number(n)) => {
                    n.as_u64().ok_or_else(|| bad(format!("{k}: out of range")))
                }
                None => Ok(0),
                _ => Err(bad(format!("{k}: not a number"))),
            }
        };
        let mut attributes = BTreeMap::new();
        for a in v
            .get("attributes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = a.get("key").and_then(Value::as_str).unwrap_or_default();
            let val = AttrValue::from_otlp(a.get("value").unwrap_or(&Value::Null))
                .map_err(|e| bad(format!("attribute {key:?}: {e}")))?;
            attributes.insert(key.to_string(), val);
        }
        let status = match v.pointer("/status/code").and_then(Value::as_i64) {
            Some(1) => SpanStatus::Ok,
            Some(2) => SpanStatus::Error(
                v.pointer("/status/message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            ),
            _ => SpanStatus::Unset,
        };
        let rec = SpanRecord {
            trace_id: s("traceId").to_string(),
            span_id: s("spanId").to_string(),
            parent_span_id: s("parentSpanId").to_string(),
            name: s("name").to_string(),
            kind: SpanKind::from_i64(v.get("kind").and_then(Value::as_i64).unwrap_or(1)),
            start_unix_nano: nanos("startTimeUnixNano")?,
            end_unix_nano: nanos("endTimeUnixNano")?,
            attributes,
            status,
        };
        rec.validate()?;
        Ok(rec)
    }

    /// Checks ids, name, times and attribute bounds.
    /// Errors: [`TelemetryError::Invalid`] naming the span and what is wrong.
    pub fn validate(&self) -> Result<(), TelemetryError> {
        let bad = |m: String| {
            Err(TelemetryError::Invalid(format!(
                "span {:?}: {m}",
                self.name
            )))
        };
        if !is_hex_id(&self.trace_id, 32) {
            return bad(format!(
                "trace_id {:?} is not 32 lowercase hex characters",
                self.trace_id
            ));
        }
        if !is_hex_id(&self.span_id, 16) {
            return bad(format!(
                "span_id {:?} is not 16 lowercase hex characters",
                self.span_id
            ));
        }
        if !self.parent_span_id.is_empty() && !is_hex_id(&self.parent_span_id, 16) {
            return bad(format!(
                "parent_span_id {:?} is not 16 lowercase hex characters",
                self.parent_span_id
            ));
        }
        if self.name.is_empty() || self.name.len() > MAX_NAME_BYTES || self.name.contains('\0') {
            return bad(format!(
                "the name must be 1..={MAX_NAME_BYTES} bytes without NUL"
            ));
        }
        if self.end_unix_nano < self.start_unix_nano {
            return bad("ends before it starts".into());
        }
        if self.attributes.len() > MAX_ATTRS {
            return bad(format!(
                "{} attributes, over the {MAX_ATTRS} limit",
                self.attributes.len()
            ));
        }
        for (k, v) in &self.attributes {
            if k.is_empty() || k.len() > MAX_NAME_BYTES {
                return bad(format!(
                    "attribute key {k:?} must be 1..={MAX_NAME_BYTES} bytes"
                ));
            }
            let len = match v {
                AttrValue::Str(s) => s.len(),
                AttrValue::StrArray(a) => a.iter().map(|s| s.len() + 1).sum(),
                _ => 0,
            };
            if len > MAX_ATTR_VALUE_BYTES {
                return bad(format!(
                    "attribute {k:?} is {len} bytes, over the {MAX_ATTR_VALUE_BYTES}-byte limit"
                ));
            }
        }
        Ok(())
    }

    /// The `warden.v1.Span` message.
    pub fn to_proto(&self) -> pb::Span {
        pb::Span {
            trace_id: self.trace_id.clone(),
            span_id: self.span_id.clone(),
            parent_span_id: self.parent_span_id.clone(),
            name: self.name.clone(),
            start_time_unix_nano: self.start_unix_nano as i64,
            end_time_unix_nano: self.end_unix_nano as i64,
            attributes: self
                .attributes
                .iter()
                .map(|(k, v)| (k.clone(), v.to_json().to_string()))
                .collect(),
            status: match self.status {
                SpanStatus::Unset => "unset",
                SpanStatus::Ok => "ok",
                SpanStatus::Error(_) => "error",
            }
            .into(),
            kind: self.kind as i32,
            status_message: match &self.status {
                SpanStatus::Error(m) => m.clone(),
                _ => String::new(),
            },
        }
    }

    /// Parses a `warden.v1.Span` message and validates it.
    /// Errors: [`TelemetryError::Invalid`] naming the span and what is wrong.
    pub fn from_proto(p: &pb::Span) -> Result<SpanRecord, TelemetryError> {
        let mut attributes = BTreeMap::new();
        for (k, v) in &p.attributes {
            let j: Value = serde_json::from_str(v).map_err(|_| {
                TelemetryError::Invalid(format!(
                    "span {:?}: attribute {k:?} is not JSON text",
                    p.name
                ))
            })?;
            let a = AttrValue::from_json(&j).map_err(|e| {
                TelemetryError::Invalid(format!("span {:?}: attribute {k:?}: {e}", p.name))
            })?;
            attributes.insert(k.clone(), a);
        }
        if p.start_time_unix_nano < 0 || p.end_time_unix_nano < 0 {
            return Err(TelemetryError::Invalid(format!(
                "span {:?}: negative time",
                p.name
            )));
        }
        let status = match p.status.as_str() {
            "" | "unset" => SpanStatus::Unset,
            "ok" => SpanStatus::Ok,
            "error" => SpanStatus::Error(p.status_message.clone()),
            other => {
                return Err(TelemetryError::Invalid(format!(
                    "span {:?}: unknown status {other:?} (ok, error, unset)",
                    p.name
                )))
            }
        };
        let rec = SpanRecord {
            trace_id: p.trace_id.clone(),
            span_id: p.span_id.clone(),
            parent_span_id: p.parent_span_id.clone(),
            name: p.name.clone(),
            kind: SpanKind::from_i64(p.kind.into()),
            start_unix_nano: p.start_time_unix_nano as u64,
            end_unix_nano: p.end_time_unix_nano as u64,
            attributes,
            status,
        };
        rec.validate()?;
        Ok(rec)
    }
}

/// An OTLP/JSON `ExportTraceServiceRequest` holding `spans` under one
/// resource (`service.name`) and the `warden` instrumentation scope: what
/// `warden trace export` writes and any OTLP/HTTP JSON receiver accepts.
pub fn otlp_json_request(service_name: &str, spans: &[SpanRecord]) -> Value {
    json!({
        "resourceSpans": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service_name}}]},
            "scopeSpans": [{
                "scope": {"name": "warden", "version": env!("CARGO_PKG_VERSION")},
                "spans": spans.iter().map(SpanRecord::to_otlp_json).collect::<Vec<_>>(),
            }],
        }],
    })
}

/// Clips `s` to at most `max` bytes on a char boundary, with a marker.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(32);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...[{} bytes clipped]", &s[..end], s.len() - end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SpanRecord {
        let mut s = SpanRecord::start(
            "execute_tool shell",
            &trace_id_for_run("r1"),
            Some("00f067aa0ba902b7"),
        );
        s.kind = SpanKind::Internal;
        s.set("warden.tier", "write")
            .set("warden.exit.code", 1)
            .set("warden.output.truncated", false)
            .set("x.ratio", 0.5)
            .set("gen_ai.response.finish_reasons", vec!["stop".to_string()]);
        s.fail("refused", "denied by rule");
        s.end();
        s
    }

    #[test]
    fn otlp_json_and_proto_round_trip() {
        let s = sample();
        let j = s.to_otlp_json();
        assert_eq!(j["attributes"].as_array().unwrap().len(), 6);
        assert!(j["startTimeUnixNano"].is_string());
        assert_eq!(SpanRecord::from_otlp_json(&j).unwrap(), s);
        assert_eq!(SpanRecord::from_proto(&s.to_proto()).unwrap(), s);
    }

    #[test]
    fn traceparent_follows_w3c() {
        let c = SpanContext::from_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        .unwrap();
        assert_eq!(c.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(SpanContext::from_traceparent(&c.traceparent()), Some(c));
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert_eq!(SpanContext::from_traceparent(bad), None, "{bad}");
        }
    }

    #[test]
    fn bad_spans_are_refused_with_the_reason() {
        let mut s = sample();
        s.span_id = "xyz".into();
        assert!(s.validate().unwrap_err().to_string().contains("span_id"));
        let mut s = sample();
        s.set("k", "v".repeat(MAX_ATTR_VALUE_BYTES + 1));
        assert!(s.validate().unwrap_err().to_string().contains("limit"));
        let mut p = sample().to_proto();
        p.attributes.insert("k".into(), "{not json".into());
        assert!(SpanRecord::from_proto(&p)
            .unwrap_err()
            .to_string()
            .contains("JSON"));
        let mut p = sample().to_proto();
        p.end_time_unix_nano = 1;
        assert!(SpanRecord::from_proto(&p)
            .unwrap_err()
            .to_string()
            .contains("ends before"));
    }

    #[test]
    fn run_trace_ids_are_stable_and_ids_unique() {
        assert_eq!(trace_id_for_run("a"), trace_id_for_run("a"));
        assert_ne!(trace_id_for_run("a"), trace_id_for_run("b"));
        assert_ne!(new_span_id(), new_span_id());
        assert_eq!(clip(&"é".repeat(100), 50).len() <= 50 + 32, true);
    }
}
