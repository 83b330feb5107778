//! End-to-end tests of what the README promises a new user of the CLI:
//! exit codes (exec usage errors are 125, file-tool refusals 126), approval
//! hints that name a workflow that works (`warden session open`, `--session`,
//! `warden approve`, repeat), `warden run` failing up front without an API
//! key, failed tool calls reported as errors, the real run id in the Ctrl-C
//! message, and `warden mcp list` saying that no servers are configured.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_tests::{all_ask_policy, request_id_in, workspace, Daemon};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn write_plan(path: &Path, turns: &[Value]) {
    std::fs::write(
        path,
        turns
            .iter()
            .map(|t| t.to_string() + "\n")
            .collect::<String>(),
    )
    .unwrap();
}

#[test]
fn exec_usage_errors_exit_125_and_help_exits_0() {
    let d = Daemon::start();
    let out = d.run(&["exec"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let out = d.run(&["exec", "--timeout", "0", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("--timeout"), "{}", stderr(&out));
    // A mistyped option is a usage error, never part of the command.
    let out = d.run(&["exec", "--timout", "5", "--", "echo", "hi"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("--timout"), "{}", stderr(&out));
    // Hidden paths (daemon state, runtime dirs such as /run) cannot be a
    // workspace: refused when the session opens, before any checkpoint
    // copies the tree.
    let run_ws = tempfile::Builder::new()
        .prefix("warden-ws-")
        .tempdir_in("/run")
        .unwrap();
    let out = d.run(&[
        "exec",
        "--workspace",
        run_ws.path().to_str().unwrap(),
        "--",
        "true",
    ]);
    // A one-shot session that cannot open is Warden's failure: 125.
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("overlaps"), "{}", stderr(&out));
    assert!(
        d.run(&["checkpoint", "list", "--json"]).stdout.is_empty(),
        "no checkpoint of the refused workspace"
    );
    let out = d.run(&["exec", "--help"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = d.run(&["--version"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Other subcommands keep clap's usage code.
    let out = d.run(&["approve"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn file_tool_refusals_exit_126() {
    let d = Daemon::start();
    let ws = workspace();
    std::fs::create_dir_all(ws.path().join(".git/hooks")).unwrap();
    std::fs::write(ws.path().join(".git/config"), "[core]\n").unwrap();
    let wsp = ws.path().to_str().unwrap();
    let mut c = d.warden();
    c.args([
        "fs",
        "write",
        "--workspace",
        wsp,
        "--yes",
        ".git/hooks/pre-commit",
    ]);
    let out = c.stdin(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert!(!ws.path().join(".git/hooks/pre-commit").exists());
    let patch = ws.path().join("../cliux-git-config.patch");
    std::fs::write(
        &patch,
        "--- a/.git/config\n+++ b/.git/config\n@@ -1 +1,2 @@\n [core]\n+\thooksPath = /tmp\n",
    )
    .unwrap();
    let out = d.run(&[
        "fs",
        "patch",
        "--workspace",
        wsp,
        "--yes",
        patch.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(ws.path().join(".git/config")).unwrap(),
        "[core]\n"
    );
    let _ = std::fs::remove_file(patch);
    // A missing file is a failure, not a refusal.
    let out = d.run(&["fs", "read", "--workspace", wsp, "no-such-file"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

#[test]
fn a_session_opened_on_the_cli_lets_another_terminal_approve() {
    let d = Daemon::start();
    let ws = workspace();
    let policy = all_ask_policy(ws.path().parent().unwrap());
    let wsp = ws.path().to_str().unwrap();

    // One-shot: the hint says what works instead of `warden approve`.
    let out = d.run(&["exec", "--workspace", wsp, "--", "touch", "x"]);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warden session open"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("--yes"), "{}", stderr(&out));

    let out = d.run(&["session", "open", "--workspace", wsp, "--policy", &policy]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sid = stdout(&out).trim().to_string();
    assert!(!sid.is_empty() && !sid.contains(' '), "{sid:?}");
    let out = d.run(&["session", "list"]);
    assert!(stdout(&out).contains(&sid), "{}", stdout(&out));

    // Asked: the hint names the request and the session to repeat in.
    let out = d.run(&["exec", "--session", &sid, "--", "touch", "x"]);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    let err = stderr(&out);
    let id = request_id_in(&err);
    assert!(err.contains(&format!("warden approve {id}")), "{err}");
    assert!(err.contains(&format!("--session {sid}")), "{err}");
    assert!(!ws.path().join("x").exists());
    // Another terminal answers; the same call in the same session runs.
    let out = d.run(&["approve", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = d.run(&["exec", "--session", &sid, "--", "touch", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(ws.path().join("x").exists());

    // The file tools: the same workflow.
    let mut c = d.warden();
    c.args(["fs", "write", "--session", &sid, "f.txt"]);
    let out = c.stdin(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    let err = stderr(&out);
    let id = request_id_in(&err);
    assert!(err.contains("same session"), "{err}");
    assert!(!err.contains("pass approve ("), "{err}");
    let out = d.run(&["approve", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut c = d.warden();
    c.args(["fs", "write", "--session", &sid, "f.txt"]);
    let out = c.stdin(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(ws.path().join("f.txt").exists());

    let out = d.run(&["session", "close", &sid]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = d.run(&["session", "list"]);
    assert!(!stdout(&out).contains(&sid), "{}", stdout(&out));
    let out = d.run(&["session", "list", "--all", "--json"]);
    let closed = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["id"] == sid.as_str())
        .expect("the closed session with --all");
    assert_eq!(closed["state"], "closed");
}

#[test]
fn run_without_an_api_key_fails_up_front_naming_the_variable() {
    let d = Daemon::start();
    let ws = workspace();
    for (model, var) in [
        ("openai:gpt-4o", "OPENAI_API_KEY"),
        ("anthropic:claude-sonnet-4", "ANTHROPIC_API_KEY"),
    ] {
        let out = d
            .warden()
            .args(["run", "--workspace", ws.path().to_str().unwrap()])
            .args(["--model", model, "do it"])
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{model}: {}", stderr(&out));
        assert!(stderr(&out).contains(var), "{model}: {}", stderr(&out));
    }
}

#[test]
fn failed_tool_calls_are_reported_as_errors() {
    let d = Daemon::start();
    let ws = workspace();
    std::fs::write(ws.path().join("in.txt"), "hello\n").unwrap();
    let plan = ws.path().join("../plan-cliux-errors.jsonl");
    write_plan(
        &plan,
        &[
            json!({"content": null, "tool_calls": [
                {"id": "c1", "name": "read_file", "arguments": {"path": "missing.txt"}},
                {"id": "c2", "name": "no_such_tool", "arguments": {}},
                {"id": "c3", "name": "read_file", "arguments": {"path": "in.txt"}}]}),
            json!({"content": "done", "tool_calls": []}),
        ],
    );
    let artifacts = tempfile::tempdir().unwrap();
    let base = [
        "run",
        "--workspace",
        ws.path().to_str().unwrap(),
        "--approve",
        "yes",
        "--model",
    ];
    let model = format!("script:{}", plan.display());
    let out = d
        .warden()
        .args(base)
        .arg(&model)
        .args(["--json", "--artifacts"])
        .arg(artifacts.path())
        .arg("read")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let tools: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "tool_finished")
        .collect();
    assert_eq!(tools.len(), 3);
    assert!(tools[0]["error"].as_str().unwrap().starts_with("error"));
    assert!(tools[1]["error"].as_str().unwrap().contains("no_such_tool"));
    assert!(tools[2].get("error").is_none(), "{}", tools[2]);
    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(artifacts.path().join("summary.json")).unwrap(),
    )
    .unwrap();
    let calls = summary["tool_calls"].as_array().unwrap();
    assert!(calls[0]["error"].is_string() && calls[1]["error"].is_string());
    assert!(calls[2].get("error").is_none());
    // The progress view says error, not ok.
    let out = d
        .warden()
        .args(base)
        .arg(&model)
        .arg("read")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("read_file")).collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].contains(" error "), "{err}");
    assert!(lines[1].contains(" ok "), "{err}");
    assert!(err.contains("2 failed"), "{err}");
    let _ = std::fs::remove_file(plan);
}

#[test]
fn ctrl_c_names_the_run_to_resume() {
    let d = Daemon::start();
    let ws = workspace();
    let plan = ws.path().join("../plan-cliux-ctrlc.jsonl");
    write_plan(
        &plan,
        &[
            json!({"content": null, "tool_calls": [
                {"id": "c1", "name": "shell", "arguments": {"command": "touch started && sleep 60"}}]}),
            json!({"content": "done", "tool_calls": []}),
        ],
    );
    let mut child = d
        .warden()
        .args(["run", "--workspace", ws.path().to_str().unwrap()])
        .args(["--approve", "yes", "--model"])
        .arg(format!("script:{}", plan.display()))
        .arg("wait")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut header = String::new();
    err.read_line(&mut header).unwrap();
    let run_id = header
        .strip_prefix("warden run ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("header: {header:?}"))
        .to_string();
    // The tool call is running once the sandboxed command touched the file.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ws.path().join("started").exists() {
        assert!(Instant::now() < deadline, "the shell call never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(
        rest.contains(&format!("resume with: warden run --resume {run_id})")),
        "{rest}"
    );
    assert!(!rest.contains("RUN_ID"), "{rest}");
    let _ = std::fs::remove_file(plan);
}

#[test]
fn mcp_list_without_servers_says_so() {
    let d = Daemon::start();
    let ws = workspace();
    let out = d.run(&["mcp", "list", "--workspace", ws.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no MCP servers are configured"),
        "{}",
        stderr(&out)
    );
}
