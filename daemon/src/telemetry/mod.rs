//! Tracing subscriber, OTLP export and local trace files.
