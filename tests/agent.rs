//! End-to-end tests of the agent loop (issue 9): `warden run` against a real
//! daemon with the scripted provider and with mock OpenAI-compatible and
//! Anthropic servers on loopback that speak each API's wire format.

use std::path::Path;
use std::process::Output;

use serde_json::{json, Value};
use warden_tests::{workspace, Daemon, MockHttp};

fn run(d: &Daemon, ws: &Path, envs: &[(&str, String)], args: &[&str]) -> Output {
    let mut cmd = d.warden();
    cmd.arg("run")
        .arg("--workspace")
        .arg(ws)
        .args(["--approve", "yes", "--json"])
        .args(args);
    cmd.env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_BASE_URL");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn events(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn openai_call(id: &str, name: &str, args: Value) -> String {
    json!({"id": format!("chatcmpl-{id}"), "object": "chat.completion", "model": "mock-model",
           "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
              "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": if args.is_string() { args.as_str().unwrap().to_string() } else { args.to_string() }}}]}}],
           "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}})
    .to_string()
}

fn openai_text(text: &str) -> String {
    json!({"id": "chatcmpl-end", "object": "chat.completion", "model": "mock-model",
           "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
           "usage": {"prompt_tokens": 120, "completion_tokens": 5, "total_tokens": 125}})
    .to_string()
}

#[test]
fn a_scripted_run_edits_files_and_reports_every_step() {
    let d = Daemon::start();
    let ws = workspace();
    std::fs::write(ws.path().join("in.txt"), "hello\n").unwrap();
    let plan = ws.path().join("../plan-scripted.jsonl");
    let turns = [
        json!({"content": "reading", "tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "in.txt"}}]}),
        json!({"content": null, "tool_calls": [
            {"id": "c2", "name": "write_file", "arguments": {"path": "out.txt", "content": "written by the agent\n"}},
            {"id": "c3", "name": "shell", "arguments": {"command": "cat in.txt out.txt > both.txt && wc -l both.txt"}}]}),
        json!({"content": "done", "tool_calls": []}),
    ];
    std::fs::write(
        &plan,
        turns
            .iter()
            .map(|t| t.to_string() + "\n")
            .collect::<String>(),
    )
    .unwrap();
    let out = run(
        &d,
        ws.path(),
        &[],
        &[
            "--model",
            &format!("script:{}", plan.display()),
            "copy the file",
        ],
    );
    ok(&out);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "written by the agent\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("both.txt")).unwrap(),
        "hello\nwritten by the agent\n"
    );
    let evs = events(&out);
    assert_eq!(
        evs[0]["event"], "run_started",
        "the first line comes before the first model call"
    );
    let run_id = evs[0]["run_id"].as_str().unwrap().to_string();
    assert!(
        evs.iter().all(|e| e["run_id"] == run_id.as_str()),
        "every event carries the run id"
    );
    let tools: Vec<&Value> = evs
        .iter()
        .filter(|e| e["event"] == "tool_finished")
        .collect();
    assert_eq!(tools.len(), 3);
    assert_eq!(tools[0]["tier"], "safe-read");
    assert_eq!(tools[2]["exit_code"], 0);
    assert_eq!(evs.last().unwrap()["event"], "run_finished");
    assert_eq!(evs.last().unwrap()["outcome"], "done");
    let _ = std::fs::remove_file(plan);
}

#[test]
fn openai_compatible_provider_retries_429_and_answers_malformed_calls_with_errors() {
    let d = Daemon::start();
    let ws = workspace();
    let mock = MockHttp::start(vec![
        (
            429,
            vec![("retry-after".into(), "0".into())],
            json!({"error": {"message": "slow down"}}).to_string(),
        ),
        (
            200,
            vec![],
            openai_call(
                "call_1",
                "write_file",
                json!({"path": "hello.txt", "content": "hi from the model\n"}),
            ),
        ),
        (
            200,
            vec![],
            openai_call("call_2", "shell", json!("{\"command\": \"ls\"")),
        ), // malformed JSON
        (
            200,
            vec![],
            openai_call("call_3", "shell", json!({"command": "cat hello.txt"})),
        ),
        (200, vec![], openai_text("All done.")),
    ]);
    let base = format!("http://{}/v1", mock.addr);
    let out = run(
        &d,
        ws.path(),
        &[
            ("OPENAI_BASE_URL", base),
            ("OPENAI_API_KEY", "sk-test-key".into()),
        ],
        &["--model", "openai:mock-model", "write hello.txt"],
    );
    ok(&out);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("hello.txt")).unwrap(),
        "hi from the model\n"
    );
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 5, "429 retried once, then four turns");
    assert!(reqs
        .iter()
        .all(|r| r.method == "POST" && r.path == "/v1/chat/completions"));
    assert_eq!(reqs[0].header("authorization"), Some("Bearer sk-test-key"));
    let first = reqs[0].json();
    assert_eq!(first["model"], "mock-model");
    assert!(first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["function"]["name"] == "apply_patch"));
    // The malformed call got an error result, in the history sent next.
    let msgs = reqs[3].json()["messages"].as_array().unwrap().clone();
    let bad = msgs
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "call_2")
        .expect("a result for the malformed call");
    assert!(
        bad["content"].as_str().unwrap().contains("malformed"),
        "{bad}"
    );
    // Tool results go back as tool messages with the redacted output.
    let last = reqs[4].json()["messages"].as_array().unwrap().clone();
    let cat = last.iter().find(|m| m["tool_call_id"] == "call_3").unwrap();
    assert!(cat["content"]
        .as_str()
        .unwrap()
        .contains("hi from the model"));
}

#[test]
fn anthropic_messages_provider_runs_tools() {
    let d = Daemon::start();
    let ws = workspace();
    let tool_use = |id: &str, name: &str, input: Value| {
        json!({"id": format!("msg_{id}"), "type": "message", "role": "assistant", "model": "claude-mock",
               "content": [{"type": "text", "text": "working"}, {"type": "tool_use", "id": id, "name": name, "input": input}],
               "stop_reason": "tool_use", "usage": {"input_tokens": 50, "output_tokens": 7}})
        .to_string()
    };
    let mock = MockHttp::start(vec![
        (503, vec![], json!({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}).to_string()),
        (200, vec![], tool_use("toolu_1", "shell", json!({"command": "echo made > made.txt"}))),
        (200, vec![], tool_use("toolu_2", "read_file", json!({"path": "made.txt"}))),
        (200, vec![], json!({"id": "msg_end", "type": "message", "role": "assistant", "model": "claude-mock",
            "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {"input_tokens": 60, "output_tokens": 2}}).to_string()),
    ]);
    let out = run(
        &d,
        ws.path(),
        &[
            ("ANTHROPIC_BASE_URL", format!("http://{}", mock.addr)),
            ("ANTHROPIC_API_KEY", "test-anthropic-key".into()),
        ],
        &["--model", "anthropic:claude-mock", "make a file"],
    );
    ok(&out);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("made.txt")).unwrap(),
        "made\n"
    );
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 4);
    assert!(reqs.iter().all(|r| r.path == "/v1/messages"));
    assert_eq!(reqs[1].header("x-api-key"), Some("test-anthropic-key"));
    assert_eq!(reqs[1].header("anthropic-version"), Some("2023-06-01"));
    let body = reqs[3].json();
    assert!(body["system"].as_str().unwrap().contains("Warden"));
    assert!(body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "shell" && t["input_schema"]["type"] == "object"));
    // Tool results travel as tool_result blocks in a user message.
    let msgs = body["messages"].as_array().unwrap();
    let results: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["role"] == "user" && m["content"].is_array())
        .flat_map(|m| m["content"].as_array().unwrap())
        .filter(|b| b["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2);
    assert!(results[1]["content"].as_str().unwrap().contains("made"));
}

#[test]
fn a_bad_key_and_an_unknown_provider_fail_clearly() {
    let d = Daemon::start();
    let ws = workspace();
    let mock = MockHttp::start(vec![(
        401,
        vec![],
        json!({"error": {"message": "Incorrect API key provided"}}).to_string(),
    )]);
    let out = run(
        &d,
        ws.path(),
        &[
            ("OPENAI_BASE_URL", format!("http://{}/v1", mock.addr)),
            ("OPENAI_API_KEY", "bad".into()),
        ],
        &["--model", "openai:x", "t"],
    );
    assert_eq!(out.status.code(), Some(1));
    let evs = events(&out);
    let end = evs.last().unwrap();
    assert_eq!(end["outcome"], "failed");
    assert!(
        end["reason"]
            .as_str()
            .unwrap()
            .contains("authentication failed"),
        "{end}"
    );
    let out = run(&d, ws.path(), &[], &["--model", "nosuch:model", "t"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown provider"));
    let out = run(&d, ws.path(), &[], &["t"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_context_limit_forces_deterministic_degradation() {
    let d = Daemon::start();
    let ws = workspace();
    // Each turn dumps ~40 KB (~10k tokens); the window is 20k tokens.
    let big = json!({"command": "head -c 40000 /dev/zero | tr '\\0' x"});
    let mut script = vec![];
    for i in 0..4 {
        script.push((
            200,
            vec![],
            openai_call(&format!("call_{i}"), "shell", big.clone()),
        ));
    }
    script.push((200, vec![], openai_text("done")));
    let mock = MockHttp::start(script);
    let out = run(
        &d,
        ws.path(),
        &[("OPENAI_BASE_URL", format!("http://{}/v1", mock.addr))],
        &[
            "--model",
            "openai:m",
            "--context-window",
            "20000",
            "dump things",
        ],
    );
    ok(&out);
    let evs = events(&out);
    let degraded: Vec<&Value> = evs.iter().filter(|e| e["event"] == "degraded").collect();
    assert!(!degraded.is_empty(), "no degradation recorded");
    assert!(degraded
        .iter()
        .all(|e| e["tokens_after"].as_u64() < e["tokens_before"].as_u64()));
    // What the model saw last fits the window and says what was dropped.
    let last = mock.requests().last().unwrap().json();
    let text = last["messages"].to_string();
    assert!(
        text.len() / 4 < 20_000,
        "history of ~{} tokens sent",
        text.len() / 4
    );
    assert!(
        text.contains("dropped to fit the context") || text.contains("summarised"),
        "no marker in what was sent"
    );
    // The task survived.
    assert!(last["messages"][1]["content"]
        .as_str()
        .unwrap()
        .contains("dump things"));
}

#[test]
fn limits_stop_the_run_with_exit_3() {
    let d = Daemon::start();
    let ws = workspace();
    let plan = ws.path().join("../plan-limit.jsonl");
    let turn = json!({"content": null, "tool_calls": [{"id": "c", "name": "shell", "arguments": {"command": "true"}}]});
    std::fs::write(
        &plan,
        (0..10).map(|_| turn.to_string() + "\n").collect::<String>(),
    )
    .unwrap();
    let out = run(
        &d,
        ws.path(),
        &[],
        &[
            "--model",
            &format!("script:{}", plan.display()),
            "--max-steps",
            "3",
            "loop",
        ],
    );
    assert_eq!(out.status.code(), Some(3));
    let end = events(&out).last().unwrap().clone();
    assert_eq!(end["outcome"], "stopped");
    assert_eq!(end["steps"], 3);
    let _ = std::fs::remove_file(plan);
}

#[test]
fn warden_demo_behaves_as_documented_without_a_terminal() {
    let dir = tempfile::Builder::new()
        .prefix("wd-demo-")
        .tempdir_in("/tmp")
        .unwrap();
    let out = std::process::Command::new(warden_tests::warden_bin())
        .args(["demo", "--dir"])
        .arg(dir.path().join("demo"))
        .env_remove("WARDEN_SOCKET")
        .env_remove("WARDEN_STATE_DIR")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("every step behaved as expected"), "{err}");
    // The fix is in place and the outside file was never read into the run.
    let calc = std::fs::read_to_string(dir.path().join("demo/workspace/calc.py")).unwrap();
    assert!(calc.contains("return sum(values) / len(values)"));
    assert!(!err.contains("host-only data"));
}

#[test]
fn each_tool_step_of_a_run_has_pre_and_post_checkpoints() {
    let d = Daemon::start();
    let ws = workspace();
    let plan = ws.path().with_extension("cp-plan.jsonl");
    let turns = [
        json!({"content": null, "tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": "echo one > one.txt && chmod 600 one.txt"}}]}),
        json!({"content": null, "tool_calls": [{"id": "c2", "name": "write_file", "arguments": {"path": "two.txt", "content": "two\n"}}]}),
        json!({"content": "done", "tool_calls": []}),
    ];
    std::fs::write(
        &plan,
        turns
            .iter()
            .map(|t| t.to_string() + "\n")
            .collect::<String>(),
    )
    .unwrap();
    let out = run(
        &d,
        ws.path(),
        &[],
        &[
            "--model",
            &format!("script:{}", plan.display()),
            "make files",
        ],
    );
    ok(&out);
    let evs = events(&out);
    let session = evs[0]["session_id"].as_str().unwrap().to_string();
    let tools: Vec<&Value> = evs
        .iter()
        .filter(|e| e["event"] == "tool_finished")
        .collect();
    for t in &tools {
        assert!(
            t["pre_checkpoint"].is_string() && t["post_checkpoint"].is_string(),
            "{t}"
        );
    }
    let list = d.run(&["checkpoint", "list", "--session", &session, "--json"]);
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let text = String::from_utf8_lossy(&list.stdout);
    let kinds: Vec<String> = text
        .lines()
        .flat_map(|l| match serde_json::from_str::<Value>(l) {
            Ok(Value::Array(a)) => a,
            Ok(v) => vec![v],
            Err(_) => vec![],
        })
        .map(|v| v["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        kinds.iter().filter(|k| *k == "pre").count() >= 2
            && kinds.iter().filter(|k| *k == "post").count() >= 2,
        "{text}"
    );
    let _ = std::fs::remove_file(plan);
}
