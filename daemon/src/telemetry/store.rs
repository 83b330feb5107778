//! The local trace store: one file per run, `<state_dir>/traces/<run_id>.jsonl`,
//! one OTLP/JSON span object per line ([`SpanRecord::to_otlp_json`]), so a
//! trace exists with zero set-up. Appends are one `write(2)` per batch on an
//! `O_APPEND` file (mode 0600, directory 0700); a line cut short by a crash
//! is skipped when read.

use std::io::{BufRead, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::span::SpanRecord;
use super::TelemetryError;

/// Summary of one run's trace file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceSummary {
    pub run_id: String,
    pub trace_id: String,
    pub spans: u32,
    /// Earliest span start, Unix epoch ms.
    pub started_at_ms: i64,
    /// Earliest start to latest end, ms.
    pub duration_ms: u64,
    pub errors: u32,
}

/// Trace files under one directory.
#[derive(Debug)]
pub struct TraceStore {
    dir: PathBuf,
    write: Mutex<()>,
}

/// Whether `run_id` is usable as a file name: ASCII letters, digits, `-`,
/// `_`, 1..=128 bytes (the rule `Runs.CreateRun` applies to client ids).
pub fn valid_run_id(run_id: &str) -> bool {
    !run_id.is_empty()
        && run_id.len() <= 128
        && run_id
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
}

impl TraceStore {
    /// A store in `dir` (created on first write).
    pub fn new(dir: PathBuf) -> TraceStore {
        TraceStore {
            dir,
            write: Mutex::new(()),
        }
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, run_id: &str) -> Result<PathBuf, TelemetryError> {
        if !valid_run_id(run_id) {
            return Err(TelemetryError::Invalid(format!(
                "run_id {run_id:?}: use letters, digits, '-' and '_' (at most 128)"
            )));
        }
        Ok(self.dir.join(format!("{run_id}.jsonl")))
    }

    /// Appends `spans` to the run's file.
    /// Errors: Invalid (bad run id), Io.
    pub fn append(&self, run_id: &str, spans: &[SpanRecord]) -> Result<(), TelemetryError> {
        let path = self.path(run_id)?;
        if spans.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::new();
        for s in spans {
            buf.extend_from_slice(s.to_otlp_json().to_string().as_bytes());
            buf.push(b'\n');
        }
        let io = |e: std::io::Error| TelemetryError::Io(format!("{}: {e}", path.display()));
        let _g = self.write.lock().unwrap_or_else(|p| p.into_inner());
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(io)?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io)?;
        f.write_all(&buf).map_err(io)
    }

    /// The run's spans ordered by start time; an absent file is an empty
    /// trace. Unparsable lines (a write cut by a crash) are skipped.
    /// Errors: Invalid (bad run id), Io.
    pub fn read(&self, run_id: &str) -> Result<Vec<SpanRecord>, TelemetryError> {
        let path = self.path(run_id)?;
        let f = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(TelemetryError::Io(format!("{}: {e}", path.display()))),
        };
        let mut out = Vec::new();
        for line in std::io::BufReader::new(f).lines() {
            let Ok(line) = line else { break };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if let Ok(s) = SpanRecord::from_otlp_json(&v) {
                out.push(s);
            }
        }
        out.sort_by(|a, b| {
            (a.start_unix_nano, a.end_unix_nano).cmp(&(b.start_unix_nano, b.end_unix_nano))
        });
        Ok(out)
    }

    /// Summary of the run's trace; `None` when it has no spans.
    /// Errors: Invalid (bad run id), Io.
    pub fn summary(&self, run_id: &str) -> Result<Option<TraceSummary>, TelemetryError> {
        let spans = self.read(run_id)?;
        let Some(first) = spans.first() else {
            return Ok(None);
        };
        let start = first.start_unix_nano;
        let end = spans.iter().map(|s| s.end_unix_nano).max().unwrap_or(start);
        let root = spans
            .iter()
            .find(|s| s.parent_span_id.is_empty())
            .unwrap_or(first);
        Ok(Some(TraceSummary {
            run_id: run_id.to_string(),
            trace_id: root.trace_id.clone(),
            spans: spans.len() as u32,
            started_at_ms: (start / 1_000_000) as i64,
            duration_ms: end.saturating_sub(start) / 1_000_000,
            errors: spans
                .iter()
                .filter(|s| matches!(s.status, super::span::SpanStatus::Error(_)))
                .count() as u32,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::span::trace_id_for_run;

    #[test]
    fn append_read_and_summarise() {
        let dir = tempfile::tempdir().unwrap();
        let store = TraceStore::new(dir.path().join("traces"));
        let t = trace_id_for_run("run-1");
        let mut root = SpanRecord::start("invoke_agent", &t, None);
        let mut child = SpanRecord::child_of("execute_tool shell", &root.context());
        child.fail("refused", "denied");
        child.end();
        root.end();
        store.append("run-1", &[child.clone()]).unwrap();
        store.append("run-1", &[root.clone()]).unwrap();
        // A torn last line is skipped.
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("traces/run-1.jsonl"))
            .unwrap()
            .write_all(b"{\"traceId\":\"ab")
            .unwrap();
        let spans = store.read("run-1").unwrap();
        assert_eq!(spans, vec![root.clone(), child]);
        let s = store.summary("run-1").unwrap().unwrap();
        assert_eq!((s.spans, s.errors, s.trace_id.as_str()), (2, 1, t.as_str()));
        assert!(store.read("absent").unwrap().is_empty());
        for bad in ["../x", "", "a/b", "a b"] {
            assert!(store.append(bad, &[root.clone()]).is_err(), "{bad}");
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("traces/run-1.jsonl"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
