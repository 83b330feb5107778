//! `warden trace show RUN_ID` (the span tree: durations, tiers, decisions,
//! exit codes), `warden trace list [--json]`, `warden trace export RUN_ID
//! [--output FILE]` (an OTLP/JSON `ExportTraceServiceRequest`, as any OTLP
//! HTTP/JSON receiver accepts).
//!
//! Exit codes: 0 ok, 1 no such trace (no spans), 125 the daemon cannot be
//! reached or refuses (unknown run, another user's run).

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

use warden_daemon::telemetry::names as n;
use warden_daemon::telemetry::{AttrValue, SpanRecord, SpanStatus};

use super::{connect, say, GlobalArgs, EXIT_WARDEN};
use crate::pb;

#[derive(Debug, Clone, clap::Args)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub command: TraceCommand,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum TraceCommand {
    /// Print a run's span tree with durations, tiers, decisions and exit codes.
    Show {
        run_id: String,
        /// Also print every attribute of every span.
        #[arg(long)]
        attributes: bool,
    },
    /// List the runs that have a trace, newest first.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// At most this many runs.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Write a run's trace as OTLP JSON (ExportTraceServiceRequest).
    Export {
        run_id: String,
        /// Write here instead of standard output.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

/// Fetches a run's spans from the daemon.
/// Errors: the daemon's status (NotFound, PermissionDenied, InvalidArgument).
pub async fn fetch(client: &crate::Client, run_id: &str) -> Result<Vec<SpanRecord>, tonic::Status> {
    let r = client
        .traces()
        .get_trace(pb::GetTraceRequest {
            run_id: run_id.to_string(),
        })
        .await?
        .into_inner();
    Ok(r.spans
        .iter()
        .filter_map(|s| SpanRecord::from_proto(s).ok())
        .collect())
}

/// Spans as JSON lines, one OTLP/JSON span object each (the local trace
/// file's format).
pub fn jsonl(spans: &[SpanRecord]) -> String {
    spans
        .iter()
        .map(|s| s.to_otlp_json().to_string() + "\n")
        .collect()
}

fn human_ns(ns: u64) -> String {
    let ms = ns as f64 / 1e6;
    if ms < 1.0 {
        format!("{:.2} ms", ms)
    } else if ms < 1000.0 {
        format!("{:.0} ms", ms)
    } else {
        format!("{:.2} s", ms / 1000.0)
    }
}

fn attr(s: &SpanRecord, k: &str) -> Option<String> {
    s.get_str(k).filter(|v| !v.is_empty())
}

/// The last `n` characters of an id (UUIDv7 ids share their time prefix).
fn tail(v: &str, n: usize) -> String {
    let c: Vec<char> = v.chars().collect();
    if c.len() <= n {
        v.to_string()
    } else {
        format!("…{}", c[c.len() - n..].iter().collect::<String>())
    }
}

fn short(v: &str, max: usize) -> String {
    let v = v.replace('\n', " ");
    if v.chars().count() <= max {
        v
    } else {
        format!(
            "{}...",
            v.chars().take(max.saturating_sub(3)).collect::<String>()
        )
    }
}

/// The facts of one span that matter at a glance.
fn facts(s: &SpanRecord) -> Vec<String> {
    let mut f: Vec<String> = Vec::new();
    fn add(f: &mut Vec<String>, s: &SpanRecord, label: &str, k: &str) {
        if let Some(v) = attr(s, k) {
            f.push(if label.is_empty() {
                v
            } else {
                format!("{label}{v}")
            });
        }
    }
    let name = s.name.as_str();
    if name == n::SPAN_INVOKE_AGENT {
        add(&mut f, s, "model=", n::GEN_AI_REQUEST_MODEL);
        add(&mut f, s, "policy=", n::RUN_POLICY);
        add(&mut f, s, "outcome=", n::RUN_OUTCOME);
        add(&mut f, s, "resumed_from=", n::RUN_RESUMED_FROM_STEP);
        if let (Some(i), Some(o)) = (
            attr(s, n::GEN_AI_USAGE_INPUT_TOKENS),
            attr(s, n::GEN_AI_USAGE_OUTPUT_TOKENS),
        ) {
            f.push(format!("tokens={i}/{o}"));
        }
    } else if name == n::SPAN_STEP {
        add(&mut f, s, "#", n::STEP_NUMBER);
        if let (Some(a), Some(b)) = (attr(s, n::CHECKPOINT_PRE), attr(s, n::CHECKPOINT_POST)) {
            f.push(format!("checkpoints {} -> {}", tail(&a, 8), tail(&b, 8)));
        }
    } else if name.starts_with(n::SPAN_CHAT_PREFIX) {
        if let (Some(i), Some(o)) = (
            attr(s, n::GEN_AI_USAGE_INPUT_TOKENS),
            attr(s, n::GEN_AI_USAGE_OUTPUT_TOKENS),
        ) {
            f.push(format!("tokens={i}/{o}"));
        }
        add(&mut f, s, "finish=", n::GEN_AI_RESPONSE_FINISH_REASONS);
        add(&mut f, s, "tool_calls=", n::MODEL_TOOL_CALLS);
        if s.get(n::CONTEXT_DEGRADED) == Some(&AttrValue::Bool(true)) {
            add(&mut f, s, "degraded=", n::CONTEXT_DEGRADED_KIND);
        }
    } else if name.starts_with(n::SPAN_EXECUTE_TOOL_PREFIX) {
        add(&mut f, s, "", n::TIER);
        match (attr(s, n::DECISION), attr(s, n::APPROVAL_OUTCOME)) {
            (Some(d), Some(a)) => f.push(format!("{d}->{a}")),
            (Some(d), None) => f.push(d),
            _ => {}
        }
        add(&mut f, s, "rule=", n::RULE);
        if s.get(n::REFUSED) == Some(&AttrValue::Bool(true)) {
            f.push("REFUSED".into());
        }
        if s.get(n::EXIT_TIMED_OUT) == Some(&AttrValue::Bool(true)) {
            f.push("TIMED OUT".into());
        }
        add(&mut f, s, "exit=", n::EXIT_CODE);
        add(&mut f, s, "signal=", n::EXIT_SIGNAL);
        add(&mut f, s, "landlock=", n::SANDBOX_LANDLOCK);
        if let Some(c) = attr(s, n::FILES_CHANGED).filter(|c| c != "0") {
            f.push(format!("files={c}"));
        }
        if let Some(r) = attr(s, n::REDACTIONS).filter(|c| c != "0") {
            f.push(format!("redactions={r}"));
        }
        if s.get(n::OUTPUT_TRUNCATED) == Some(&AttrValue::Bool(true)) {
            f.push("output truncated".into());
        }
        if let Some(c) = attr(s, n::COMMAND).or_else(|| attr(s, n::PATH)) {
            f.push(format!("`{}`", short(&c, 60)));
        }
    } else if name == n::SPAN_APPROVAL_WAIT {
        add(&mut f, s, "", n::APPROVAL_OUTCOME);
    } else if name == n::SPAN_CHECKPOINT_WRITE {
        add(&mut f, s, "", n::CHECKPOINT_KIND);
        if let Some(id) = attr(s, n::CHECKPOINT_ID) {
            f.push(tail(&id, 8));
        }
    } else if name == n::SPAN_RESUME {
        add(&mut f, s, "from=", n::RUN_RESUMED_FROM_STEP);
    }
    // An approval wait's outcome already says why it failed.
    if let (SpanStatus::Error(m), false) = (&s.status, name == n::SPAN_APPROVAL_WAIT) {
        let kind = attr(s, n::ERROR_TYPE).unwrap_or_else(|| "error".into());
        if !f.iter().any(|x| x == "REFUSED") || kind != n::ERROR_REFUSED {
            f.push(format!("ERROR {kind}: {}", short(m, 60)));
        }
    }
    f
}

/// The span tree as text: one line per span, children indented under their
/// parent in start order, each with its duration and key facts. Spans whose
/// parent is not in the trace are shown at the top level.
pub fn render_tree(spans: &[SpanRecord], attributes: bool) -> String {
    let ids: std::collections::HashSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let mut children: HashMap<&str, Vec<&SpanRecord>> = HashMap::new();
    let mut roots = Vec::new();
    for s in spans {
        if s.parent_span_id.is_empty() || !ids.contains(s.parent_span_id.as_str()) {
            roots.push(s);
        } else {
            children
                .entry(s.parent_span_id.as_str())
                .or_default()
                .push(s);
        }
    }
    let by_start =
        |v: &mut Vec<&SpanRecord>| v.sort_by_key(|s| (s.start_unix_nano, s.end_unix_nano));
    by_start(&mut roots);
    for v in children.values_mut() {
        by_start(v);
    }
    let mut lines: Vec<(String, String)> = Vec::new();
    fn walk<'a>(
        s: &'a SpanRecord,
        prefix: &str,
        last: bool,
        top: bool,
        children: &HashMap<&str, Vec<&'a SpanRecord>>,
        attributes: bool,
        lines: &mut Vec<(String, String)>,
    ) {
        let branch = if top {
            ""
        } else if last {
            "└─ "
        } else {
            "├─ "
        };
        let mut label = format!("{prefix}{branch}{}", s.name);
        let f = facts(s);
        if !f.is_empty() {
            label.push_str("  ");
            label.push_str(&f.join("  "));
        }
        lines.push((
            label,
            human_ns(s.end_unix_nano.saturating_sub(s.start_unix_nano)),
        ));
        let child_prefix = if top {
            String::new()
        } else {
            format!("{prefix}{}", if last { "   " } else { "│  " })
        };
        if attributes {
            let pad = format!(
                "{child_prefix}{}",
                if children.contains_key(s.span_id.as_str()) {
                    "│    "
                } else {
                    "     "
                }
            );
            for (k, v) in &s.attributes {
                lines.push((format!("{pad}{k} = {}", v.to_json()), String::new()));
            }
        }
        if let Some(kids) = children.get(s.span_id.as_str()) {
            for (i, c) in kids.iter().enumerate() {
                walk(
                    c,
                    &child_prefix,
                    i + 1 == kids.len(),
                    false,
                    children,
                    attributes,
                    lines,
                );
            }
        }
    }
    for r in &roots {
        walk(r, "", true, true, &children, attributes, &mut lines);
    }
    let width = lines
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0)
        .min(110);
    let mut out = String::new();
    for (l, d) in lines {
        let pad = width.saturating_sub(l.chars().count());
        out.push_str(&format!("{l}{}  {d:>9}\n", " ".repeat(pad)));
    }
    out
}

/// A header line and the tree of `spans`.
pub fn render(run_id: &str, spans: &[SpanRecord], attributes: bool) -> String {
    let start = spans.iter().map(|s| s.start_unix_nano).min().unwrap_or(0);
    let end = spans.iter().map(|s| s.end_unix_nano).max().unwrap_or(0);
    let errors = spans
        .iter()
        .filter(|s| matches!(s.status, SpanStatus::Error(_)))
        .count();
    let trace = spans
        .iter()
        .find(|s| s.parent_span_id.is_empty())
        .or(spans.first())
        .map(|s| s.trace_id.clone())
        .unwrap_or_default();
    format!(
        "run {run_id} · trace {trace} · {} spans · {errors} with errors · {}\n{}",
        spans.len(),
        human_ns(end.saturating_sub(start)),
        render_tree(spans, attributes)
    )
}

/// Prints a run's trace tree on standard error (for `warden demo`).
pub async fn print_run_trace(client: &crate::Client, run_id: &str) {
    match fetch(client, run_id).await {
        Ok(spans) if !spans.is_empty() => eprint!("{}", render(run_id, &spans, false)),
        Ok(_) => eprintln!("    (no spans recorded for run {run_id})"),
        Err(s) => eprintln!("    trace unavailable: {}", s.message()),
    }
}

/// Runs `warden trace`; returns the exit code.
pub async fn run(args: TraceArgs, global: &GlobalArgs) -> i32 {
    let client = match connect(global).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    match args.command {
        TraceCommand::Show { run_id, attributes } => match fetch(&client, &run_id).await {
            Ok(spans) if spans.is_empty() => {
                say(format!("run {run_id} has no trace"));
                1
            }
            Ok(spans) => {
                print!("{}", render(&run_id, &spans, attributes));
                0
            }
            Err(s) => {
                say(s.message());
                EXIT_WARDEN
            }
        },
        TraceCommand::Export { run_id, output } => match fetch(&client, &run_id).await {
            Ok(spans) if spans.is_empty() => {
                say(format!("run {run_id} has no trace"));
                1
            }
            Ok(spans) => {
                let doc = warden_daemon::telemetry::span::otlp_json_request("warden", &spans);
                let text = serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n";
                let r = match &output {
                    Some(p) => std::fs::write(p, text),
                    None => std::io::stdout().lock().write_all(text.as_bytes()),
                };
                match r {
                    Ok(()) => 0,
                    Err(e) => {
                        say(format!("writing the trace: {e}"));
                        EXIT_WARDEN
                    }
                }
            }
            Err(s) => {
                say(s.message());
                EXIT_WARDEN
            }
        },
        TraceCommand::List { json, limit } => {
            let r = match client
                .traces()
                .list_traces(pb::ListTracesRequest { limit })
                .await
            {
                Ok(r) => r.into_inner(),
                Err(s) => {
                    say(s.message());
                    return EXIT_WARDEN;
                }
            };
            let mut out = std::io::stdout().lock();
            for t in &r.traces {
                if json {
                    let v = serde_json::json!({"run_id": t.run_id, "trace_id": t.trace_id, "spans": t.spans,
                        "started_at_ms": t.started_at_ms, "duration_ms": t.duration_ms, "errors": t.errors});
                    let _ = writeln!(out, "{v}");
                } else {
                    let _ = writeln!(
                        out,
                        "{:<38} {:>5} spans {:>3} errors {:>10}  {}",
                        t.run_id,
                        t.spans,
                        t.errors,
                        human_ns(t.duration_ms * 1_000_000),
                        t.trace_id
                    );
                }
            }
            if !json {
                if r.otlp_endpoint.is_empty() {
                    let _ = writeln!(
                        out,
                        "OTLP export: off (set OTEL_EXPORTER_OTLP_ENDPOINT for wardend)"
                    );
                } else {
                    let _ = writeln!(
                        out,
                        "OTLP export: {} · {} spans exported · {} dropped",
                        r.otlp_endpoint, r.otlp_exported_spans, r.otlp_dropped_spans
                    );
                }
            }
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_nests_children_and_shows_facts() {
        let t = warden_daemon::telemetry::span::trace_id_for_run("r");
        let mut root = SpanRecord::start(n::SPAN_INVOKE_AGENT, &t, None);
        root.set(n::RUN_OUTCOME, "done");
        let mut step = SpanRecord::child_of(n::SPAN_STEP, &root.context());
        step.set(n::STEP_NUMBER, 1u32);
        let mut chat = SpanRecord::child_of("chat m", &step.context());
        chat.set(n::GEN_AI_USAGE_INPUT_TOKENS, 10u32)
            .set(n::GEN_AI_USAGE_OUTPUT_TOKENS, 2u32);
        let mut tool = SpanRecord::child_of("execute_tool shell", &step.context());
        tool.set(n::TIER, "network")
            .set(n::DECISION, "ask")
            .set(n::APPROVAL_OUTCOME, "denied")
            .set(n::REFUSED, true)
            .set(n::COMMAND, "curl http://example.com");
        tool.fail("refused", "approval denied");
        for s in [&mut chat, &mut tool, &mut step, &mut root] {
            s.end();
        }
        let text = render_tree(&[tool, root, chat, step], false);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("invoke_agent  outcome=done"), "{text}");
        assert!(lines[1].starts_with("└─ step  #1"), "{text}");
        assert!(lines[2].starts_with("   ├─ chat m  tokens=10/2"), "{text}");
        assert!(
            lines[3].starts_with("   └─ execute_tool shell  network  ask->denied  REFUSED"),
            "{text}"
        );
    }
}
