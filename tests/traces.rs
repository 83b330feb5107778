//! Traces end to end: a scripted `warden run` against a real daemon produces
//! exactly the expected span tree, with the required attributes, in the
//! run's local trace file, in `--artifacts`, through `warden trace`, and at
//! an in-process OTLP/gRPC collector on loopback; a resumed run's trace says
//! where it resumed; an OTLP collector that never answers neither slows nor
//! fails tool calls (the bounded queue drops and counts).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::{
    trace_service_server::{TraceService, TraceServiceServer},
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as OtlpValue;
use warden_daemon::telemetry::names as n;
use warden_daemon::telemetry::span::trace_id_for_run;
use warden_daemon::telemetry::{AttrValue, SpanRecord, SpanStatus};
use warden_tests::{pb, Daemon};

// ---------------------------------------------------------------------------
// helpers

/// Starts `wardend` with extra environment variables (OTEL_*), on its own
/// socket and state dir.
fn daemon_with_env(env: &[(&str, String)]) -> Daemon {
    let dir = tempfile::Builder::new()
        .prefix("wd-")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let mut d = Daemon {
        socket: dir.path().join("run/wardend.sock"),
        state_dir: dir.path().join("state"),
        child: None,
        extra_args: vec![],
        log: dir.path().join("wardend.log"),
        dir,
    };
    let log = std::fs::File::create(&d.log).expect("log");
    let mut c = d.command();
    for k in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "WARDEN_TRACE_CONTENT",
    ] {
        c.env_remove(k);
    }
    c.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    d.child = Some(
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn wardend"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(&d.socket).is_err() {
        assert!(
            Instant::now() < deadline,
            "wardend did not come up: {}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    d
}

/// An OTLP/gRPC trace collector on loopback that keeps what it receives.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<(String, opentelemetry_proto::tonic::trace::v1::Span)>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut g = self.spans.lock().unwrap();
        for rs in req.into_inner().resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| r.attributes.iter())
                .find(|a| a.key == "service.name")
                .and_then(|a| a.value.as_ref())
                .and_then(|v| match &v.value {
                    Some(OtlpValue::StringValue(s)) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    g.push((service.clone(), s));
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

async fn start_collector() -> (Collector, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let c = Collector::default();
    let svc = TraceServiceServer::new(c.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    (c, addr)
}

/// An OTLP span as a [`SpanRecord`] (ids hex, attributes typed).
fn from_otlp(s: &opentelemetry_proto::tonic::trace::v1::Span) -> SpanRecord {
    let mut attributes = BTreeMap::new();
    for a in &s.attributes {
        let v = match a.value.as_ref().and_then(|v| v.value.clone()) {
            Some(OtlpValue::StringValue(x)) => AttrValue::Str(x),
            Some(OtlpValue::IntValue(x)) => AttrValue::Int(x),
            Some(OtlpValue::BoolValue(x)) => AttrValue::Bool(x),
            Some(OtlpValue::DoubleValue(x)) => AttrValue::F64(x),
            Some(OtlpValue::ArrayValue(x)) => AttrValue::StrArray(
                x.values
                    .iter()
                    .filter_map(|v| match &v.value {
                        Some(OtlpValue::StringValue(s)) => Some(s.clone()),
                        _ => None,
                    })
                    .collect(),
            ),
            other => panic!("unexpected attribute value {other:?}"),
        };
        attributes.insert(a.key.clone(), v);
    }
    SpanRecord {
        trace_id: hex(&s.trace_id),
        span_id: hex(&s.span_id),
        parent_span_id: hex(&s.parent_span_id),
        name: s.name.clone(),
        kind: match s.kind {
            2 => warden_daemon::telemetry::SpanKind::Server,
            3 => warden_daemon::telemetry::SpanKind::Client,
            _ => warden_daemon::telemetry::SpanKind::Internal,
        },
        start_unix_nano: s.start_time_unix_nano,
        end_unix_nano: s.end_time_unix_nano,
        attributes,
        status: match s.status.as_ref().map(|st| st.code) {
            Some(1) => SpanStatus::Ok,
            Some(2) => SpanStatus::Error(s.status.as_ref().unwrap().message.clone()),
            _ => SpanStatus::Unset,
        },
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The run's local trace file, parsed line by line.
fn local_trace(d: &Daemon, run_id: &str) -> Vec<SpanRecord> {
    let text = std::fs::read_to_string(d.state_dir.join(format!("traces/{run_id}.jsonl")))
        .expect("the run's trace file");
    text.lines()
        .map(|l| {
            SpanRecord::from_otlp_json(&serde_json::from_str(l).expect("a JSON line"))
                .expect("an OTLP/JSON span")
        })
        .collect()
}

/// The tree as `name` lines indented by depth, children in start order, so
/// a whole tree compares as one string.
fn shape(spans: &[SpanRecord]) -> String {
    let mut kids: HashMap<&str, Vec<&SpanRecord>> = HashMap::new();
    let mut roots = vec![];
    for s in spans {
        if s.parent_span_id.is_empty() {
            roots.push(s);
        } else {
            kids.entry(s.parent_span_id.as_str()).or_default().push(s);
        }
    }
    fn walk(
        s: &SpanRecord,
        depth: usize,
        kids: &HashMap<&str, Vec<&SpanRecord>>,
        out: &mut String,
    ) {
        let call = s
            .get_str(n::GEN_AI_TOOL_CALL_ID)
            .map(|c| format!(" [{c}]"))
            .unwrap_or_default();
        out.push_str(&format!("{}{}{call}\n", "  ".repeat(depth), s.name));
        let mut v = kids.get(s.span_id.as_str()).cloned().unwrap_or_default();
        v.sort_by_key(|s| s.start_unix_nano);
        for c in v {
            walk(c, depth + 1, kids, out);
        }
    }
    let mut out = String::new();
    roots.sort_by_key(|s| s.start_unix_nano);
    for r in roots {
        walk(r, 0, &kids, &mut out);
    }
    out
}

fn attr(s: &SpanRecord, k: &str) -> String {
    s.get_str(k)
        .unwrap_or_else(|| panic!("span {:?} lacks {k}: {:?}", s.name, s.attributes))
}

fn find<'a>(spans: &'a [SpanRecord], name: &str, call: &str) -> Vec<&'a SpanRecord> {
    spans
        .iter()
        .filter(|s| {
            s.name == name
                && (call.is_empty() || s.get_str(n::GEN_AI_TOOL_CALL_ID).as_deref() == Some(call))
        })
        .collect()
}

fn write_plan(dir: &Path, lines: &[serde_json::Value]) -> std::path::PathBuf {
    let p = dir.join("plan.jsonl");
    let text: String = lines.iter().map(|l| l.to_string() + "\n").collect();
    std::fs::write(&p, text).unwrap();
    p
}

fn run_id_of(stdout: &[u8]) -> String {
    let first = String::from_utf8_lossy(stdout)
        .lines()
        .next()
        .map(str::to_string)
        .expect("a --json event line");
    let v: serde_json::Value = serde_json::from_str(&first).unwrap();
    v["run_id"].as_str().expect("run_id").to_string()
}

// ---------------------------------------------------------------------------
// tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_run_has_the_expected_tree_locally_and_at_an_otlp_collector() {
    let (collector, addr) = start_collector().await;
    let d = daemon_with_env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}")),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".into()),
        ("OTEL_BSP_SCHEDULE_DELAY", "20".into()),
        ("OTEL_SERVICE_NAME", "wardend-under-test".into()),
    ]);
    let ws = warden_tests::workspace();
    std::fs::write(ws.path().join("a.txt"), "alpha\n").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let plan = write_plan(
        tmp.path(),
        &[
            serde_json::json!({"content": "look", "tool_calls": [
                {"id": "c1", "name": "shell", "arguments": {"command": "cat a.txt"}},
                {"id": "c2", "name": "read_file", "arguments": {"path": "a.txt"}}]}),
            serde_json::json!({"content": null, "tool_calls": [
                {"id": "c3", "name": "write_file", "arguments": {"path": "b.txt", "content": "beta\n"}},
                {"id": "c4", "name": "shell", "arguments": {"command": "rm -rf ."}}]}),
            serde_json::json!({"content": "done"}),
        ],
    );
    let artifacts = tmp.path().join("artifacts");
    let out = d
        .warden()
        .args(["run", "--json", "--approve", "yes", "--model"])
        .arg(format!("script:{}", plan.display()))
        .arg("--workspace")
        .arg(ws.path())
        .arg("--artifacts")
        .arg(&artifacts)
        .arg("fix things")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "warden run failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        d.log()
    );
    let run_id = run_id_of(&out.stdout);
    let spans = local_trace(&d, &run_id);

    // Exactly this tree: three steps, each with its model call and the
    // daemon's tool spans under the client's step (via traceparent). The
    // write is asked (policy: write tier asks), refused once without a
    // grant, then granted by the approver and re-sent.
    let expected = "\
invoke_agent
  step
    chat MODEL
    execute_tool shell [c1]
      checkpoint_write
    execute_tool read_file [c2]
  step
    chat MODEL
    execute_tool write_file [c3]
    execute_tool write_file [c3]
    execute_tool shell [c4]
  step
    chat MODEL
"
    .replace("MODEL", &plan.display().to_string());
    assert_eq!(shape(&spans), expected, "actual tree:\n{}", shape(&spans));
    let trace_id = trace_id_for_run(&run_id);
    assert!(spans.iter().all(|s| s.trace_id == trace_id));
    let ids: std::collections::HashSet<_> = spans.iter().map(|s| &s.span_id).collect();
    assert_eq!(ids.len(), spans.len(), "span ids are unique");

    // The run.
    let run = find(&spans, n::SPAN_INVOKE_AGENT, "")[0];
    assert_eq!(attr(run, n::RUN_ID), run_id);
    assert_eq!(attr(run, n::RUN_OUTCOME), "done");
    assert_eq!(attr(run, n::RUN_POLICY), "default");
    assert_eq!(attr(run, n::GEN_AI_PROVIDER_NAME), "script");
    assert_eq!(attr(run, n::RUN_STEPS), "3");
    assert_eq!(attr(run, n::RUN_TASK), "fix things");
    assert!(!attr(run, n::SESSION_ID).is_empty());
    assert!(
        attr(run, n::GEN_AI_USAGE_INPUT_TOKENS)
            .parse::<u64>()
            .unwrap()
            > 0
    );
    assert!(run.get(n::RUN_RESUMED_FROM_STEP).is_none());
    assert_eq!(run.status, SpanStatus::Ok);

    // The steps and model calls.
    let steps = find(&spans, n::SPAN_STEP, "");
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(attr(s, n::STEP_ID), format!("{run_id}-{}", i + 1));
    }
    let chats = find(&spans, &format!("chat {}", plan.display()), "");
    assert_eq!(chats.len(), 3);
    for (i, c) in chats.iter().enumerate() {
        assert_eq!(attr(c, n::GEN_AI_OPERATION_NAME), "chat");
        assert_eq!(attr(c, n::GEN_AI_PROVIDER_NAME), "script");
        assert_eq!(attr(c, n::GEN_AI_REQUEST_MODEL), plan.display().to_string());
        assert_eq!(
            attr(c, n::GEN_AI_RESPONSE_MODEL),
            plan.display().to_string()
        );
        assert_eq!(
            attr(c, n::GEN_AI_RESPONSE_ID),
            format!("script-turn-{}", i + 1)
        );
        assert!(
            attr(c, n::GEN_AI_USAGE_OUTPUT_TOKENS)
                .parse::<u64>()
                .unwrap()
                > 0
        );
        assert_eq!(attr(c, n::CONTEXT_DEGRADED), "false");
        assert!(
            c.get(n::GEN_AI_OUTPUT_MESSAGES).is_none(),
            "contents are opt-in"
        );
        assert_eq!(c.kind, warden_daemon::telemetry::SpanKind::Client);
    }
    assert_eq!(attr(chats[0], n::MODEL_TOOL_CALLS), "2");
    assert_eq!(
        attr(chats[0], n::GEN_AI_RESPONSE_FINISH_REASONS),
        "tool_calls"
    );
    assert_eq!(attr(chats[2], n::MODEL_TOOL_CALLS), "0");
    assert_eq!(attr(chats[2], n::GEN_AI_RESPONSE_FINISH_REASONS), "stop");

    // The tool calls, as the daemon recorded them.
    let c1 = find(&spans, "execute_tool shell", "c1")[0];
    for (k, v) in [
        (n::GEN_AI_TOOL_NAME, "shell"),
        (n::TIER, "safe-read"),
        (n::DECISION, "allow"),
        (n::SANDBOX_PROFILE, "safe-read"),
        (n::EXIT_CODE, "0"),
        (n::OUTPUT_BYTES, "6"),
        (n::OUTPUT_TRUNCATED, "false"),
        (n::REDACTIONS, "0"),
        (n::TOOL_IDEMPOTENT, "true"),
        (n::TOOL_SIDE_EFFECTS, "none"),
        (n::COMMAND, "cat a.txt"),
        (n::RUN_ID, run_id.as_str()),
    ] {
        assert_eq!(attr(c1, k), v, "{k}");
    }
    assert_eq!(attr(c1, n::STEP_ID), format!("{run_id}-1"));
    assert!(["full", "partial", "none"].contains(&attr(c1, n::SANDBOX_LANDLOCK).as_str()));
    assert!(c1.get(n::OUTPUT_STDOUT).is_none(), "output is opt-in");
    let ck = find(&spans, n::SPAN_CHECKPOINT_WRITE, "")[0];
    assert_eq!(ck.parent_span_id, c1.span_id);
    assert_eq!(attr(ck, n::CHECKPOINT_KIND), "pre");
    assert_eq!(attr(c1, n::CHECKPOINT_PRE), attr(ck, n::CHECKPOINT_ID));
    assert_eq!(c1.status, SpanStatus::Ok);
    let c2 = find(&spans, "execute_tool read_file", "c2")[0];
    assert_eq!(attr(c2, n::OUTPUT_BYTES), "6");
    assert_eq!(attr(c2, n::TIER), "safe-read");
    let writes = find(&spans, "execute_tool write_file", "c3");
    assert_eq!(attr(writes[0], n::DECISION), "ask");
    assert_eq!(attr(writes[0], n::REFUSED), "true");
    assert!(matches!(writes[0].status, SpanStatus::Error(_)));
    assert_eq!(attr(writes[1], n::FILES_CHANGED), "1");
    assert_eq!(attr(writes[1], n::FILES_CHANGED_PATHS), "b.txt");
    assert_eq!(attr(writes[1], n::TOOL_SIDE_EFFECTS), "workspace");
    assert_eq!(writes[1].status, SpanStatus::Ok);
    let c4 = find(&spans, "execute_tool shell", "c4")[0];
    assert_eq!(attr(c4, n::TIER), "destructive");
    assert_eq!(attr(c4, n::DECISION), "deny");
    assert_eq!(attr(c4, n::REFUSED), "true");
    assert_eq!(attr(c4, n::ERROR_TYPE), "refused");
    assert!(c4.get(n::EXIT_CODE).is_none(), "a denied command never ran");
    // Children end within their parents.
    let by_id: HashMap<_, _> = spans.iter().map(|s| (s.span_id.clone(), s)).collect();
    for s in &spans {
        if let Some(p) = by_id.get(&s.parent_span_id) {
            assert!(
                s.start_unix_nano >= p.start_unix_nano,
                "{} starts before {}",
                s.name,
                p.name
            );
            assert!(
                s.end_unix_nano <= p.end_unix_nano,
                "{} ends after {}",
                s.name,
                p.name
            );
        }
    }

    // The same spans reached the OTLP collector.
    let deadline = Instant::now() + Duration::from_secs(20);
    let got = loop {
        let got: Vec<(String, SpanRecord)> = collector
            .spans
            .lock()
            .unwrap()
            .iter()
            .map(|(svc, s)| (svc.clone(), from_otlp(s)))
            .collect();
        if got.len() >= spans.len() || Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(got.iter().all(|(svc, _)| svc == "wardend-under-test"));
    let mut otlp: Vec<SpanRecord> = got.into_iter().map(|(_, s)| s).collect();
    let mut local = spans.clone();
    otlp.sort_by(|a, b| a.span_id.cmp(&b.span_id));
    local.sort_by(|a, b| a.span_id.cmp(&b.span_id));
    assert_eq!(
        otlp, local,
        "the collector received exactly the local spans"
    );

    // The artifacts hold the trace, and the CLI shows, lists and exports it.
    let lines = std::fs::read_to_string(artifacts.join("trace.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), spans.len());
    let tree = std::fs::read_to_string(artifacts.join("trace.txt")).unwrap();
    assert!(
        tree.contains("execute_tool shell  destructive  deny  REFUSED"),
        "{tree}"
    );
    let show = d.run(&["trace", "show", &run_id]);
    assert!(show.status.success());
    let show = String::from_utf8_lossy(&show.stdout).to_string();
    assert!(
        show.contains("execute_tool shell  safe-read  allow  exit=0"),
        "{show}"
    );
    assert!(show.contains("invoke_agent  model="), "{show}");
    let list = d.run(&["trace", "list", "--json"]);
    let list = String::from_utf8_lossy(&list.stdout).to_string();
    let v: serde_json::Value = serde_json::from_str(list.lines().next().unwrap()).unwrap();
    assert_eq!(v["run_id"], run_id.as_str());
    assert_eq!(v["spans"], spans.len());
    assert_eq!(v["trace_id"], trace_id.as_str());
    let export = d.run(&["trace", "export", &run_id]);
    let doc: serde_json::Value = serde_json::from_slice(&export.stdout).unwrap();
    assert_eq!(
        doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
            .as_array()
            .unwrap()
            .len(),
        spans.len()
    );
    let missing = d.run(&["trace", "show", "no-such-run"]);
    assert_eq!(missing.status.code(), Some(125));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumed_run_says_where_it_resumed() {
    // The agent loop given a restored history (one completed step) without
    // Runs.Resume (an embedding agent's own resume): the run span still says
    // where it resumed. `warden_run_resume_...` covers the CLI.
    use warden_client::agent::{self, provider::Message, script::Script, Agent, RunConfig};
    let d = daemon_with_env(&[]);
    let ws = warden_tests::workspace();
    let client = d.client().await;
    let session = warden_tests::session(&client, ws.path(), "default").await;
    let run = client
        .runs()
        .create_run(pb::CreateRunRequest {
            session_id: session.clone(),
            task: "t".into(),
            model: "script:plan".into(),
            run_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let script = Script::parse(
        "plan",
        "{\"tool_calls\": [{\"id\": \"c1\", \"name\": \"shell\", \"arguments\": {\"command\": \"true\"}}]}\n{\"content\": \"done\"}\n",
    )
    .unwrap();
    let call = warden_client::agent::provider::ToolCall {
        id: "c1".into(),
        name: "shell".into(),
        arguments: serde_json::json!({"command": "true"}),
        malformed: false,
    };
    let mut assistant = Message::user("");
    assistant.role = warden_client::agent::provider::Role::Assistant;
    assistant.content = None;
    assistant.tool_calls = vec![call];
    let history = vec![
        Message::system(agent::SYSTEM_PROMPT),
        Message::user("t"),
        assistant,
        Message::tool_result("c1", "exit code 0\n"),
    ];
    struct Quiet;
    impl agent::Observer for Quiet {
        fn event(&mut self, _: &str, _: &agent::AgentEvent) {}
    }
    let a = Agent {
        client: &client,
        provider: &script,
        approver: &agent::approver::No,
        session_id: session,
        run_id: run.id.clone(),
        config: RunConfig {
            task: "t".into(),
            ..Default::default()
        },
    };
    let report = a.run(history, &mut Quiet).await;
    assert_eq!(report.outcome, agent::RunOutcome::Done);
    let spans = local_trace(&d, &run.id);
    assert_eq!(shape(&spans), "invoke_agent\n  step\n    chat plan\n");
    let root = find(&spans, n::SPAN_INVOKE_AGENT, "")[0];
    let from = format!("{}-1", run.id);
    assert_eq!(attr(root, n::RUN_RESUMED_FROM_STEP), from);
    assert_eq!(
        attr(find(&spans, n::SPAN_STEP, "")[0], n::STEP_ID),
        format!("{}-2", run.id)
    );
    let show = d.run(&["trace", "show", &run.id]);
    assert!(String::from_utf8_lossy(&show.stdout).contains(&format!("resumed_from={from}")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_neither_slows_nor_fails_tool_calls() {
    // Accepts connections and never answers: every export waits for its
    // 60 s timeout, so any tool call that waited on the exporter would take
    // at least that long.
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = blackhole.local_addr().unwrap();
    let held = Arc::new(Mutex::new(Vec::new()));
    let h = held.clone();
    std::thread::spawn(move || {
        for c in blackhole.incoming().flatten() {
            h.lock().unwrap().push(c);
        }
    });
    let d = daemon_with_env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}")),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".into()),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "60000".into()),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "4".into()),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2".into()),
        ("OTEL_BSP_SCHEDULE_DELAY", "10".into()),
    ]);
    let ws = warden_tests::workspace();
    let client = d.client().await;
    let session = warden_tests::session(&client, ws.path(), "default").await;
    let run = client
        .runs()
        .create_run(pb::CreateRunRequest {
            session_id: session.clone(),
            task: "t".into(),
            model: "m".into(),
            run_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    const CALLS: usize = 24;
    let started = Instant::now();
    for i in 0..CALLS {
        let r = warden_tests::exec(
            &client,
            pb::ExecRequest {
                session_id: session.clone(),
                command: "true".into(),
                run_id: run.id.clone(),
                tool_call_id: format!("c{i}"),
                ..Default::default()
            },
        )
        .await
        .expect("the tool call succeeds");
        assert_eq!(r.exit().code, 0);
        assert!(!r.exit().refused);
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(45),
        "{CALLS} tool calls took {elapsed:?} with the collector down"
    );
    // Every span is kept locally; the exporter dropped and counted the
    // ones its bounded queue could not hold.
    let spans = local_trace(&d, &run.id);
    assert_eq!(find(&spans, "execute_tool shell", "").len(), CALLS);
    let l = client
        .traces()
        .list_traces(pb::ListTracesRequest { limit: 10 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(l.otlp_endpoint, format!("http://{addr}"));
    assert!(
        l.otlp_dropped_spans >= (CALLS - 4 - 2) as u64,
        "dropped {} of {CALLS}",
        l.otlp_dropped_spans
    );
    assert_eq!(l.otlp_exported_spans, 0);
    let list = d.run(&["trace", "list"]);
    let text = String::from_utf8_lossy(&list.stdout).to_string();
    assert!(
        text.contains("spans exported") && text.contains(" dropped"),
        "{text}"
    );
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_spans_checks_the_run_and_the_spans() {
    let d = daemon_with_env(&[]);
    let ws = warden_tests::workspace();
    let client = d.client().await;
    let session = warden_tests::session(&client, ws.path(), "default").await;
    let run = client
        .runs()
        .create_run(pb::CreateRunRequest {
            session_id: session,
            task: "t".into(),
            model: "m".into(),
            run_id: "trace-run".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut good = SpanRecord::start("invoke_agent", &trace_id_for_run(&run.id), None);
    good.end();
    let export = |run_id: &str, spans: Vec<pb::Span>| {
        let mut c = client.traces();
        let run_id = run_id.to_string();
        async move {
            c.export_spans(pb::ExportSpansRequest { run_id, spans })
                .await
        }
    };
    let st = export("no-such-run", vec![good.to_proto()])
        .await
        .unwrap_err();
    assert_eq!(st.code(), tonic::Code::NotFound);
    let st = export("../../etc", vec![good.to_proto()])
        .await
        .unwrap_err();
    assert!(matches!(
        st.code(),
        tonic::Code::NotFound | tonic::Code::InvalidArgument
    ));
    let mut bad = good.to_proto();
    bad.span_id = "zz".into();
    let st = export(&run.id, vec![bad]).await.unwrap_err();
    assert_eq!(st.code(), tonic::Code::InvalidArgument);
    assert!(st.message().contains("span_id"), "{}", st.message());
    let mut big = good.to_proto();
    big.attributes
        .insert("k".into(), serde_json::json!("x".repeat(5000)).to_string());
    let st = export(&run.id, vec![big]).await.unwrap_err();
    assert_eq!(st.code(), tonic::Code::InvalidArgument);
    // Nothing of a refused batch is kept; a good one is, redacted.
    assert!(!d.state_dir.join("traces/trace-run.jsonl").exists());
    let secret = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";
    good.set(n::RUN_TASK, format!("use token {secret}"));
    let r = export(&run.id, vec![good.to_proto()])
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.accepted, 1);
    let kept = local_trace(&d, &run.id);
    assert_eq!(kept.len(), 1);
    let task = attr(&kept[0], n::RUN_TASK);
    assert!(
        !task.contains(secret) && task.starts_with("use token"),
        "{task}"
    );
}

#[test]
fn warden_run_resume_trace_says_where_it_resumed() {
    use std::io::BufRead;
    let d = daemon_with_env(&[]);
    let ws = warden_tests::workspace();
    let tmp = tempfile::tempdir().unwrap();
    let plan = write_plan(
        tmp.path(),
        &[
            serde_json::json!({"content": null, "tool_calls": [
                {"id": "c1", "name": "shell", "arguments": {"command": "echo one > one.txt"}}]}),
            serde_json::json!({"content": null, "tool_calls": [
                {"id": "c2", "name": "shell", "arguments": {"command": "sleep 30; touch two.txt"}}]}),
            serde_json::json!({"content": "done"}),
        ],
    );
    let mut child = d
        .warden()
        .args(["run", "--json", "--approve", "yes", "--model"])
        .arg(format!("script:{}", plan.display()))
        .arg("--workspace")
        .arg(ws.path())
        .arg("two steps")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Interrupt (Ctrl-C) while the second step's command runs.
    let mut run_id = String::new();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        run_id = v["run_id"].as_str().unwrap().to_string();
        if v["event"] == "tool_started" && v["step"] == 2 {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(130), "interrupted");
    let out = d.run(&["run", "--resume", &run_id, "--approve", "yes", "--json"]);
    assert!(
        out.status.success(),
        "resume failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = local_trace(&d, &run_id);
    let runs = find(&spans, n::SPAN_INVOKE_AGENT, "");
    assert_eq!(runs.len(), 2, "{}", shape(&spans));
    let (first, second) = if runs[0].start_unix_nano < runs[1].start_unix_nano {
        (runs[0], runs[1])
    } else {
        (runs[1], runs[0])
    };
    assert_eq!(attr(first, n::RUN_OUTCOME), "interrupted");
    assert!(first.get(n::RUN_RESUMED_FROM_STEP).is_none());
    assert_eq!(attr(second, n::RUN_OUTCOME), "done");
    let from = attr(second, n::RUN_RESUMED_FROM_STEP);
    assert!(!from.is_empty());
    // The daemon's resume span (Runs.Resume) says the same, once.
    let resume = find(&spans, n::SPAN_RESUME, "");
    assert_eq!(resume.len(), 1, "{}", shape(&spans));
    if let Some(d) = resume[0].get_str(n::RUN_RESUMED_FROM_STEP) {
        assert_eq!(d, from);
    }
    assert!(resume[0].start_unix_nano > first.end_unix_nano);
    let show = d.run(&["trace", "show", &run_id]);
    let text = String::from_utf8_lossy(&show.stdout).to_string();
    assert!(text.contains(&format!("resumed_from={from}")), "{text}");
    assert!(text.contains("\nresume"), "{text}");
}
