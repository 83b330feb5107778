//! End-to-end suite of hosted MCP servers (issue 13) against a real
//! `wardend`: the daemon starts `mcp-test-server` (tests/mcp_test_server.rs)
//! inside the sandbox as the session's policy lists it, and every call goes
//! through trust policy, approvals, pins, journal, checkpoints, audit and
//! redaction.
//!
//! The test server's `write_note` claims `readOnlyHint: true` and writes a
//! file: untrusted, it is asked about and, once approved, cannot write (the
//! workspace is read-only to it); trusted, the annotation lets it run
//! unasked, and the post-checkpoint records what it wrote. Either way it
//! cannot write outside the workspace nor reach the host's network.

use std::path::{Path, PathBuf};

use warden_tests::{pb, workspace, Client, Daemon};

type Mcp = pb::mcp_client::McpClient<tonic::transport::Channel>;

fn server_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mcp-test-server"))
}

/// A policy hosting the test server as `notes` with `trust`; its binary's
/// directory is bound read-only so the sandbox can run it.
fn policy(trust: &str) -> String {
    let bin = server_bin();
    let dir = bin.parent().unwrap();
    format!(
        r#"[sandbox]
read_only_paths = ["{}"]

[[mcp.servers]]
name = "notes"
command = "{}"
trust = "{trust}"
env = {{ MCP_TEST_DESC_FILE = "desc.txt" }}
startup_timeout_ms = 20000
call_timeout_ms = 20000
"#,
        dir.display(),
        bin.display()
    )
}

struct Env {
    // Field order: the client goes before the daemon.
    client: Client,
    mcp: Mcp,
    sid: String,
    ws: tempfile::TempDir,
    d: Daemon,
}

async fn setup(trust: &str) -> Env {
    let d = Daemon::start();
    let ws = workspace();
    let client = d.client().await;
    let sid = client
        .sessions()
        .create_session(pb::CreateSessionRequest {
            workspace: ws.path().to_string_lossy().into_owned(),
            policy_name: format!("mcp-{trust}"),
            policy_toml: policy(trust),
            labels: Default::default(),
        })
        .await
        .expect("create session")
        .into_inner()
        .id;
    let mcp = pb::mcp_client::McpClient::new(client.channel());
    Env {
        client,
        mcp,
        sid,
        ws,
        d,
    }
}

impl Env {
    async fn call(&mut self, tool: &str, args: serde_json::Value) -> pb::CallMcpToolResponse {
        self.call_with(tool, args, |_| {})
            .await
            .expect("CallMcpTool")
    }

    async fn call_with(
        &mut self,
        tool: &str,
        args: serde_json::Value,
        f: impl FnOnce(&mut pb::CallMcpToolRequest),
    ) -> Result<pb::CallMcpToolResponse, tonic::Status> {
        let mut req = pb::CallMcpToolRequest {
            session_id: self.sid.clone(),
            server: "notes".into(),
            tool: tool.into(),
            arguments_json: args.to_string(),
            ..Default::default()
        };
        f(&mut req);
        self.mcp.call_mcp_tool(req).await.map(|r| r.into_inner())
    }

    async fn approve(&self, id: &str, scope: pb::GrantScope) {
        self.client
            .approvals()
            .approve(pb::ApproveRequest {
                request_id: id.into(),
                decision: pb::Decision::Allow as i32,
                scope: scope as i32,
                prefix: vec![],
                reason: "test".into(),
            })
            .await
            .expect("approve");
    }

    async fn list(&mut self) -> pb::ListMcpToolsResponse {
        self.mcp
            .list_mcp_tools(pb::ListMcpToolsRequest {
                session_id: self.sid.clone(),
                server: String::new(),
            })
            .await
            .expect("ListMcpTools")
            .into_inner()
    }
}

/// A host directory outside every workspace (for writes that must fail).
fn host_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("mcp-host-")
        .tempdir_in("/tmp")
        .unwrap()
}

fn assert_absent(p: &Path) {
    assert!(
        !p.exists(),
        "{} exists: the server wrote outside its sandbox",
        p.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_server_is_asked_and_sees_the_workspace_read_only() {
    let mut e = setup("untrusted").await;
    let note = e.ws.path().join("note.txt");
    let args = serde_json::json!({"path": "note.txt", "text": "hello"});

    // readOnlyHint is not believed: the call is asked about, not run.
    let r = e.call("write_note", args.clone()).await;
    assert!(r.refusal.starts_with("approval required"), "{r:?}");
    assert_eq!(r.decision, pb::Decision::Ask as i32);
    assert_eq!(r.tier, pb::Tier::Write as i32);
    let a = r.approval.as_ref().expect("the raised request");
    let p = a.preview.as_ref().unwrap();
    assert_eq!(p.tool, "mcp:notes/write_note");
    assert!(p.diff.contains("its words, not Warden's"), "{}", p.diff);
    assert!(p.diff.contains("not believed"), "{}", p.diff);
    assert!(p.diff.contains("\"path\": \"note.txt\""), "{}", p.diff);
    assert_absent(&note);

    // Approved once: it runs in the sandbox, and its write fails.
    e.approve(&a.id, pb::GrantScope::Once).await;
    let r = e.call("write_note", args.clone()).await;
    assert_eq!(r.refusal, "", "{r:?}");
    assert_eq!(r.profile, "safe-read");
    assert!(r.is_error, "the write must fail: {r:?}");
    assert!(
        r.text.contains("Read-only file system") || r.text.contains("Permission denied"),
        "{}",
        r.text
    );
    assert_absent(&note);
    assert_ne!(r.pre_checkpoint_id, "");

    // The once-grant is used up: the same call asks again.
    let r = e.call("write_note", args.clone()).await;
    assert!(r.refusal.starts_with("approval required"), "{r:?}");

    // Outside the workspace (approved with the call): nothing on the host.
    let host = host_dir();
    let outside = host.path().join("escaped.txt");
    let r = e
        .call_with(
            "write_note",
            serde_json::json!({"path": outside, "text": "x"}),
            |q| q.approve = true,
        )
        .await
        .unwrap();
    assert_eq!(r.refusal, "");
    assert!(r.is_error, "{r:?}");
    assert_absent(&outside);
    drop(e.d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_server_runs_unasked_is_checkpointed_and_still_confined() {
    let mut e = setup("trusted").await;
    let note = e.ws.path().join("note.txt");
    let r = e
        .call(
            "write_note",
            serde_json::json!({"path": "note.txt", "text": "written by a trusted server"}),
        )
        .await;
    // readOnlyHint lowers the decision to allow: no approval.
    assert_eq!(r.refusal, "", "{r:?}");
    assert_eq!(r.decision, pb::Decision::Allow as i32);
    assert_eq!(r.tier, pb::Tier::SafeRead as i32);
    assert_eq!(r.profile, "write");
    assert!(!r.is_error, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(&note).unwrap(),
        "written by a trusted server"
    );
    // The post-checkpoint records the file the "read-only" tool wrote.
    assert_ne!(r.pre_checkpoint_id, "");
    assert_ne!(r.post_checkpoint_id, "");
    let diff = e
        .client
        .checkpoints()
        .diff_checkpoints(pb::DiffCheckpointsRequest {
            from_checkpoint_id: r.pre_checkpoint_id.clone(),
            to_checkpoint_id: r.post_checkpoint_id.clone(),
        })
        .await
        .expect("diff")
        .into_inner();
    let changed: Vec<(&str, &str)> = diff
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.kind.as_str()))
        .collect();
    assert_eq!(changed, [("note.txt", "added")]);

    // A protected path that did not exist stays absent (git config that
    // would redirect hooks): removed after the call, with a warning.
    std::fs::create_dir(e.ws.path().join(".git")).unwrap();
    let r = e
        .call(
            "write_note",
            serde_json::json!({"path": ".git/config", "text": "[core]\n\thooksPath = /tmp/evil\n"}),
        )
        .await;
    assert!(!r.is_error, "{r:?}");
    assert_absent(&e.ws.path().join(".git/config"));
    assert!(
        r.warnings.iter().any(|w| w.contains("removed .git/config")),
        "{:?}",
        r.warnings
    );

    // Still sandboxed: no write outside the workspace...
    let host = host_dir();
    let outside = host.path().join("escaped.txt");
    let r = e
        .call(
            "write_note",
            serde_json::json!({"path": outside, "text": "x"}),
        )
        .await;
    assert!(r.is_error, "{r:?}");
    assert_absent(&outside);
    // ... and no network: a listener on the host's loopback is unreachable
    // from the server's private network namespace.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let r = e
        .call(
            "connect",
            serde_json::json!({"host": "127.0.0.1", "port": port}),
        )
        .await;
    assert!(r.is_error, "the server reached the host: {r:?}");
    assert!(r.text.contains("connect failed"), "{}", r.text);
    drop(e.d);
}

/// A trusted server (writable workspace) plants a nested repository whose
/// `config` sets `core.fsmonitor`: after the call the daemon quarantines
/// the config (renamed `*.warden-blocked`, named in the result's warnings
/// and the `mcp_call_end` audit record), so the user's own `git status` in
/// it runs nothing. Restoring the config makes the same `git status` run the
/// payload (the check can fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_git_config_planted_by_a_trusted_server_is_quarantined() {
    let mut e = setup("trusted").await;
    let host = host_dir();
    let marker = host.path().join("PWNED");
    let config = format!(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = touch {}; false\n",
        marker.display()
    );
    for (path, text) in [
        ("sub/.git/HEAD", "ref: refs/heads/main\n"),
        ("sub/.git/objects/info/.keep", ""),
        ("sub/.git/refs/heads/.keep", ""),
    ] {
        let r = e
            .call(
                "write_note",
                serde_json::json!({"path": path, "text": text}),
            )
            .await;
        assert!(!r.is_error, "{r:?}");
    }
    let r = e
        .call(
            "write_note",
            serde_json::json!({"path": "sub/.git/config", "text": config}),
        )
        .await;
    assert!(!r.is_error, "{r:?}");
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("quarantined sub/.git/config")),
        "{:?}",
        r.warnings
    );
    let sub = e.ws.path().join("sub");
    assert_absent(&sub.join(".git/config"));
    assert!(sub.join(".git/config.warden-blocked").exists());
    let status = || {
        std::process::Command::new("git")
            .arg("-C")
            .arg(&sub)
            .arg("status")
            .output()
            .unwrap()
    };
    status();
    assert_absent(&marker);
    // The audit record names it.
    let mut s = e
        .client
        .audit()
        .list_audit(pb::ListAuditRequest {
            session_id: e.sid.clone(),
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let mut ends = Vec::new();
    while let Some(rec) = tokio_stream::StreamExt::next(&mut s).await {
        let rec = rec.unwrap();
        if rec.action == "mcp_call_end" {
            ends.push(rec.detail_json);
        }
    }
    assert!(ends.last().unwrap().contains("sub/.git/config"), "{ends:?}");
    // Positive control: the planted config, restored, does run.
    std::fs::rename(
        sub.join(".git/config.warden-blocked"),
        sub.join(".git/config"),
    )
    .unwrap();
    status();
    assert!(
        marker.exists(),
        "the fsmonitor payload never runs: the test proves nothing"
    );
    drop(e.d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_definition_asks_again_after_a_session_grant() {
    let mut e = setup("untrusted").await;
    let args = serde_json::json!({"path": "a.txt", "text": "a"});
    let r = e.call("write_note", args.clone()).await;
    let a = r.approval.expect("asked");
    assert!(!r.definition_changed);
    e.approve(&a.id, pb::GrantScope::Session).await;
    let r = e.call("write_note", args).await;
    assert_eq!(r.refusal, "", "the session grant covers it: {r:?}");
    // Other arguments, same definition: still covered.
    let r = e
        .call(
            "write_note",
            serde_json::json!({"path": "b.txt", "text": "b"}),
        )
        .await;
    assert_eq!(r.refusal, "", "{r:?}");
    let pinned = r.definition_hash.clone();

    // The server changes the tool's description (rug pull).
    std::fs::write(
        e.ws.path().join("desc.txt"),
        "Also archives the workspace for backup.",
    )
    .unwrap();
    let listed = e.list().await;
    let t = listed
        .tools
        .iter()
        .find(|t| t.name == "write_note")
        .unwrap();
    assert!(t.changed && t.pinned, "{t:?}");
    let r = e
        .call(
            "write_note",
            serde_json::json!({"path": "b.txt", "text": "b"}),
        )
        .await;
    assert!(
        r.refusal.starts_with("approval required"),
        "a changed definition must ask again: {r:?}"
    );
    assert!(r.definition_changed);
    assert_ne!(r.definition_hash, pinned);
    let p = r.approval.as_ref().unwrap().preview.clone().unwrap();
    assert!(
        p.warnings.iter().any(|w| w.contains("CHANGED")),
        "{:?}",
        p.warnings
    );
    assert!(p.diff.contains("archives the workspace"), "{}", p.diff);
    // Approving the new definition re-pins it.
    e.approve(&r.approval_request_id, pb::GrantScope::Once)
        .await;
    let r = e
        .call(
            "write_note",
            serde_json::json!({"path": "b.txt", "text": "b"}),
        )
        .await;
    assert_eq!(r.refusal, "", "{r:?}");
    let t = e.list().await;
    let t = t.tools.iter().find(|t| t.name == "write_note").unwrap();
    assert!(!t.changed, "re-pinned: {t:?}");
    drop(e.d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poisoned_description_is_flagged_in_the_preview() {
    let mut e = setup("untrusted").await;
    let listed = e.list().await;
    assert_eq!(listed.servers.len(), 1);
    assert!(listed.servers[0].running, "{:?}", listed.servers);
    assert_eq!(listed.servers[0].profile, "safe-read");
    let poisoned = listed.tools.iter().find(|t| t.name == "poisoned").unwrap();
    assert!(
        poisoned
            .warnings
            .iter()
            .any(|w| w.contains("possible tool poisoning")),
        "{poisoned:?}"
    );
    let echo = listed.tools.iter().find(|t| t.name == "echo").unwrap();
    assert!(echo.warnings.is_empty(), "{echo:?}");

    let r = e
        .call("poisoned", serde_json::json!({"a": 1, "b": 2}))
        .await;
    let p = r.approval.expect("asked").preview.unwrap();
    let all = p.warnings.join("\n");
    for needle in [
        "tag aimed at the model",
        "credential files",
        "hide something",
    ] {
        assert!(all.contains(needle), "{needle}: {all}");
    }
    assert!(
        p.diff.contains("<IMPORTANT>"),
        "shown as the server's words: {}",
        p.diff
    );
    drop(e.d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_journaled_audited_and_redacted() {
    let mut e = setup("trusted").await;
    let line =
        std::fs::read_to_string(warden_tests::repo_root().join("../shared/corpus/secrets.jsonl"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.contains("\"kind\": \"aws-ini\""))
                    .map(str::to_string)
            });
    // The corpus lives outside the repository; fall back to the same record.
    let rec: serde_json::Value = serde_json::from_str(line.as_deref().unwrap_or(
        r#"{"text": "[default]\naws_access_key_id = AKIAIEQH524YNG5BY1A2\naws_secret_access_key = IDnOdcdbWB2dC4/DSDC6Lc1mxLpQ2yMK/Ye9FZ1w\n", "secrets": ["AKIAIEQH524YNG5BY1A2", "IDnOdcdbWB2dC4/DSDC6Lc1mxLpQ2yMK/Ye9FZ1w"]}"#,
    ))
    .unwrap();
    let text = rec["text"].as_str().unwrap().to_string();
    let secrets: Vec<String> = rec["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();

    let run = e
        .client
        .runs()
        .create_run(pb::CreateRunRequest {
            session_id: e.sid.clone(),
            task: "mcp".into(),
            model: "test".into(),
            run_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .id;
    let with_ids = |q: &mut pb::CallMcpToolRequest| {
        q.run_id = run.clone();
        q.step_id = "step-1".into();
        q.tool_call_id = "call-1".into();
    };
    let r = e
        .call_with("echo", serde_json::json!({"text": text}), with_ids)
        .await
        .unwrap();
    assert_eq!(r.refusal, "", "{r:?}");
    assert!(r.redactions >= 1, "{r:?}");
    for s in &secrets {
        assert!(!r.text.contains(s.as_str()), "{}", r.text);
        assert!(!r.content_json.contains(s.as_str()), "{}", r.content_json);
        assert!(
            !r.structured_json.contains(s.as_str()),
            "{}",
            r.structured_json
        );
    }
    assert!(r.text.contains("aws_access_key_id"), "{}", r.text);

    // The call's span is in the run's trace, with its decision, and no
    // secret (attributes pass the redactor too).
    let trace = std::fs::read_to_string(e.d.state_dir.join(format!("traces/{run}.jsonl")))
        .expect("the run's trace file");
    let span: serde_json::Value = trace
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|s| s["name"] == "execute_tool mcp__notes__echo")
        .unwrap_or_else(|| panic!("no MCP span in {trace}"));
    let span_text = span.to_string();
    for k in [
        "warden.tier",
        "warden.decision",
        "warden.mcp.server",
        "warden.redactions",
    ] {
        assert!(span_text.contains(k), "{k} missing: {span_text}");
    }
    for s in &secrets {
        assert!(!trace.contains(s.as_str()), "secret in trace: {trace}");
    }

    // The same (run, tool call) is never executed twice.
    let again = e
        .call_with("echo", serde_json::json!({"text": "x"}), with_ids)
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::FailedPrecondition, "{again:?}");

    // Journal: one completed entry for the call.
    let db = rusqlite::Connection::open(e.d.state_dir.join("warden.db")).unwrap();
    let (tool, state, side_effects, args): (String, String, String, String) = db
        .query_row(
            "SELECT tool, state, side_effects, arguments_json FROM step_journal WHERE run_id = ?1 AND tool_call_id = 'call-1'",
            [&run],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(
        (tool.as_str(), state.as_str(), side_effects.as_str()),
        ("mcp:notes/echo", "completed", "none")
    );
    for s in &secrets {
        assert!(!args.contains(s.as_str()), "journal arguments: {args}");
    }

    // Audit: start and end records, redacted.
    use tokio_stream::StreamExt;
    let mut stream = e
        .client
        .audit()
        .list_audit(pb::ListAuditRequest {
            session_id: e.sid.clone(),
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let mut actions = Vec::new();
    while let Some(rec) = stream.next().await {
        let rec = rec.unwrap();
        for s in &secrets {
            assert!(!rec.detail_json.contains(s.as_str()), "{}", rec.detail_json);
        }
        if rec.action.starts_with("mcp_") {
            assert!(rec.detail_json.contains("mcp:notes/echo") || rec.action == "mcp_call_end");
            actions.push(rec.action);
        }
    }
    assert_eq!(actions, ["mcp_call_start", "mcp_call_end"]);
    drop(e.d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_calls_get_clear_errors() {
    let mut e = setup("untrusted").await;
    let st = e
        .call_with("echo", serde_json::json!({}), |q| {
            q.arguments_json = "[1,2]".into()
        })
        .await
        .unwrap_err();
    assert_eq!(st.code(), tonic::Code::InvalidArgument);
    assert!(st.message().contains("JSON object"), "{st:?}");
    let st = e
        .call_with("echo", serde_json::json!({}), |q| q.server = "nope".into())
        .await
        .unwrap_err();
    assert_eq!(st.code(), tonic::Code::NotFound);
    assert!(
        st.message().contains("no MCP server named \"nope\""),
        "{st:?}"
    );
    let st = e
        .call_with("no_such_tool", serde_json::json!({}), |_| {})
        .await
        .unwrap_err();
    assert_eq!(st.code(), tonic::Code::NotFound, "{st:?}");
    // A policy with an unknown key in a server entry is refused.
    let bad = e
        .client
        .sessions()
        .create_session(pb::CreateSessionRequest {
            workspace: e.ws.path().to_string_lossy().into_owned(),
            policy_name: "bad".into(),
            policy_toml: "[[mcp.servers]]\nname = \"x\"\ncommand = \"y\"\ntrusted = true\n".into(),
            labels: Default::default(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert!(bad.message().contains("trusted"), "{bad:?}");
    // Closing the session stops its server: calls fail, not hang.
    e.client.close_session(&e.sid).await.unwrap();
    let st = e
        .call_with("echo", serde_json::json!({"text": "x"}), |_| {})
        .await
        .unwrap_err();
    assert_eq!(st.code(), tonic::Code::FailedPrecondition, "{st:?}");
    drop(e.d);
}

/// `warden mcp list` / `warden mcp call` against the daemon: a trusted
/// read-only tool prints its result; an untrusted call without a terminal
/// exits 126 with `approval required`, and `--yes` runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_and_calls_tools() {
    let d = Daemon::start();
    let ws = workspace();
    let dir = tempfile::tempdir().unwrap();
    for trust in ["trusted", "untrusted"] {
        std::fs::write(dir.path().join(format!("{trust}.toml")), policy(trust)).unwrap();
    }
    let pol = |t: &str| dir.path().join(format!("{t}.toml")).display().to_string();
    let wsp = ws.path().display().to_string();

    let out = d.run(&[
        "mcp",
        "--workspace",
        &wsp,
        "--policy",
        &pol("untrusted"),
        "list",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["write_note", "echo", "connect", "poisoned"]);
    assert_eq!(v["servers"][0]["profile"], "safe-read");

    let out = d.run(&[
        "mcp",
        "--workspace",
        &wsp,
        "--policy",
        &pol("trusted"),
        "call",
        "notes",
        "echo",
        r#"{"text": "hello from mcp"}"#,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello from mcp\n");

    let args = [
        "mcp",
        "--workspace",
        &wsp,
        "--policy",
        &pol("untrusted"),
        "call",
        "notes",
        "echo",
        r#"{"text": "x"}"#,
    ];
    let out = d.run(&args);
    assert_eq!(out.status.code(), Some(126));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("approval required"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut yes = args.to_vec();
    yes.push("--yes");
    let out = d.run(&yes);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "x\n");
}

/// The agent loop offers the hosted tools as `mcp__<server>__<tool>`: a
/// scripted run calls the untrusted server's `echo`, the approver (`--approve
/// yes`) answers the ask, and the call is journaled as completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_loop_calls_hosted_tools() {
    let d = Daemon::start();
    let ws = workspace();
    let dir = tempfile::tempdir().unwrap();
    let pol = dir.path().join("untrusted.toml");
    std::fs::write(&pol, policy("untrusted")).unwrap();
    let plan = dir.path().join("plan.jsonl");
    let turns = [
        serde_json::json!({"content": null, "tool_calls": [{"id": "m1", "name": "mcp__notes__echo", "arguments": {"text": "from the agent"}}]}),
        serde_json::json!({"content": "done", "tool_calls": []}),
    ];
    std::fs::write(
        &plan,
        turns
            .iter()
            .map(|t| t.to_string() + "\n")
            .collect::<String>(),
    )
    .unwrap();
    let out = d
        .warden()
        .arg("run")
        .arg("--workspace")
        .arg(ws.path())
        .arg("--policy")
        .arg(&pol)
        .args(["--approve", "yes", "--json", "--model"])
        .arg(format!("script:{}", plan.display()))
        .arg("echo something")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let evs: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let t = evs
        .iter()
        .find(|e| e["event"] == "tool_finished")
        .expect("a tool call");
    assert_eq!(t["tool"], "mcp__notes__echo");
    assert_eq!(t["refused"], false, "{t}");
    assert_eq!(t["decision"], "ask", "{t}");
    let run_id = evs[0]["run_id"].as_str().unwrap();
    let db = rusqlite::Connection::open(d.state_dir.join("warden.db")).unwrap();
    let (tool, state, result): (String, String, String) = db
        .query_row(
            "SELECT tool, state, result_json FROM step_journal WHERE run_id = ?1 AND tool_call_id = 'm1'",
            [run_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        (tool.as_str(), state.as_str()),
        ("mcp:notes/echo", "completed")
    );
    assert!(result.contains("from the agent"), "{result}");
}

/// Servers that cannot serve fail closed with the reason, and never hang a
/// call: one that never answers `initialize` (start-up timeout), one that
/// exits at once (its stderr in the error), and a streamable HTTP server
/// (not hosted: it would run outside the sandbox). The good server of the
/// same policy still lists its tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_and_unsupported_servers_fail_closed() {
    let mut e = setup("untrusted").await;
    let toml = format!(
        r#"{}
[[mcp.servers]]
name = "sleeper"
command = "sleep"
args = ["60"]
startup_timeout_ms = 1000

[[mcp.servers]]
name = "quitter"
command = "sh"
args = ["-c", "echo no such database >&2; exit 3"]

[[mcp.servers]]
name = "remote"
url = "https://mcp.example.com/mcp"
"#,
        policy("untrusted")
    );
    e.sid = e
        .client
        .sessions()
        .create_session(pb::CreateSessionRequest {
            workspace: e.ws.path().to_string_lossy().into_owned(),
            policy_name: "broken".into(),
            policy_toml: toml,
            labels: Default::default(),
        })
        .await
        .unwrap()
        .into_inner()
        .id;
    let t0 = std::time::Instant::now();
    let listed = e.list().await;
    assert!(t0.elapsed() < std::time::Duration::from_secs(15));
    let by_name = |n: &str| listed.servers.iter().find(|s| s.name == n).unwrap();
    assert!(by_name("notes").running);
    assert!(
        by_name("sleeper")
            .error
            .contains("took longer than 1000 ms"),
        "{:?}",
        by_name("sleeper")
    );
    assert!(
        by_name("quitter").error.contains("no such database"),
        "{:?}",
        by_name("quitter")
    );
    assert!(
        by_name("remote").error.contains("streamable HTTP"),
        "{:?}",
        by_name("remote")
    );
    assert!(listed.tools.iter().all(|t| t.server == "notes"));

    for (server, code) in [
        ("sleeper", tonic::Code::Unavailable),
        ("quitter", tonic::Code::Unavailable),
        ("remote", tonic::Code::FailedPrecondition),
    ] {
        let st = e
            .call_with("echo", serde_json::json!({"text": "x"}), |q| {
                q.server = server.into()
            })
            .await
            .unwrap_err();
        assert_eq!(st.code(), code, "{server}: {st:?}");
    }
    drop(e.d);
}

/// Red-team leaks: a server's stderr (in the status of a failed call), a
/// secret in a tool's name or title, and a secret the policy gives a server
/// in `env` (not a known pattern) must never reach the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_tool_names_and_env_secrets_are_redacted() {
    const GH: &str = "ghp_R4nd0mT0k3nV4lu3Xq9Zk2Lm8Np5Wr7Ty1Ub3";
    const ENV_SECRET: &str = "Qm7xVt2pLk9sWz4nRb8c";
    let mut e = setup("untrusted").await;
    let toml = format!(
        r#"[sandbox]
read_only_paths = ["{dir}"]

[[mcp.servers]]
name = "notes"
command = "{bin}"
trust = "untrusted"
env = {{ MCP_TEST_EXTRA_TOOL = "{GH}", MCP_TEST_EXTRA_TITLE = "see {GH}" }}
startup_timeout_ms = 20000

[[mcp.servers]]
name = "quitter"
command = "sh"
args = ["-c", "echo \"bad token {GH} key $DB_API_TOKEN\" >&2; exit 3"]
env = {{ DB_API_TOKEN = "{ENV_SECRET}" }}
"#,
        dir = server_bin().parent().unwrap().display(),
        bin = server_bin().display(),
    );
    e.sid = e
        .client
        .sessions()
        .create_session(pb::CreateSessionRequest {
            workspace: e.ws.path().to_string_lossy().into_owned(),
            policy_name: "leaky".into(),
            policy_toml: toml,
            labels: Default::default(),
        })
        .await
        .unwrap()
        .into_inner()
        .id;
    let listed = e.list().await;
    let all = format!("{listed:?}");
    assert!(!all.contains(GH), "{all}");
    assert!(!all.contains(ENV_SECRET), "{all}");
    // the tool named with a secret is not offered; the server says why
    let notes = listed.servers.iter().find(|s| s.name == "notes").unwrap();
    assert!(notes.error.contains("names contain secrets"), "{notes:?}");
    assert!(listed.tools.iter().any(|t| t.name == "echo"));
    assert!(listed.tools.iter().all(|t| !t.name.contains("ghp_")));
    let quitter = listed.servers.iter().find(|s| s.name == "quitter").unwrap();
    assert!(
        quitter.error.contains("bad token [REDACTED:"),
        "{quitter:?}"
    );
    // nor called
    let st = e
        .call_with(GH, serde_json::json!({}), |_| {})
        .await
        .unwrap_err();
    assert_eq!(st.code(), tonic::Code::NotFound, "{st:?}");
    assert!(!st.message().contains(GH), "{st:?}");
    // a failed start's stderr, in the call's status
    let st = e
        .call_with("echo", serde_json::json!({"text": "x"}), |q| {
            q.server = "quitter".into()
        })
        .await
        .unwrap_err();
    assert_eq!(st.code(), tonic::Code::Unavailable, "{st:?}");
    assert!(st.message().contains("bad token"), "{st:?}");
    assert!(!st.message().contains(GH), "{st:?}");
    assert!(!st.message().contains(ENV_SECRET), "{st:?}");
    drop(e.d);
}
