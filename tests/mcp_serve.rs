//! End-to-end test of `warden mcp-serve` (issue 13) against a real `wardend`:
//! rmcp's own MCP client talks to the CLI over its stdio, lists the six
//! tools with their input schemas, runs a shell command, gets a refusal (a
//! tool error, nothing removed) for a destructive one, and reads a file.

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use warden_tests::{warden_bin, workspace, Daemon};

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn args(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    v.as_object().cloned().expect("an object")
}

/// `warden mcp-serve --workspace ws` against daemon `d`, as an MCP stdio
/// transport (its standard error inherited).
fn mcp_serve(d: &Daemon, ws: &std::path::Path) -> TokioChildProcess {
    let mut cmd = tokio::process::Command::new(warden_bin());
    cmd.env("WARDEN_SOCKET", &d.socket)
        .env("WARDEN_STATE_DIR", &d.state_dir)
        .arg("--no-autostart")
        .arg("mcp-serve")
        .arg("--workspace")
        .arg(ws);
    TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("spawn warden mcp-serve")
        .0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_lists_tools_runs_shell_and_is_refused_a_destructive_command() {
    let d = Daemon::start();
    let ws = workspace();
    std::fs::write(ws.path().join("notes.txt"), "kept by warden\n").unwrap();

    let transport = mcp_serve(&d, ws.path());
    let client = ().serve(transport).await.expect("MCP initialisation");

    let info = client.peer_info().expect("server info");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("warden")
    );

    let tools = client.list_all_tools().await.expect("tools/list");
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "apply_patch",
            "grep",
            "list_dir",
            "read_file",
            "shell",
            "write_file"
        ]
    );
    for t in &tools {
        assert_eq!(
            t.input_schema.get("type"),
            Some(&serde_json::json!("object")),
            "{}",
            t.name
        );
        assert!(
            t.input_schema
                .get("properties")
                .is_some_and(|p| p.is_object()),
            "{}",
            t.name
        );
    }
    let shell = tools.iter().find(|t| t.name == "shell").unwrap();
    assert_eq!(
        shell.input_schema["required"],
        serde_json::json!(["command"])
    );

    // A safe command runs in the workspace.
    let r = client
        .call_tool(
            CallToolRequestParams::new("shell")
                .with_arguments(args(serde_json::json!({"command": "echo hello && ls"}))),
        )
        .await
        .expect("tools/call shell");
    let out = text(&r);
    assert_ne!(r.is_error, Some(true), "{out}");
    assert!(out.contains("hello"), "{out}");
    assert!(out.contains("notes.txt"), "ran in the workspace: {out}");

    // A destructive command is refused (denied, or asked and refused: no
    // elicitation, no --approve yes), as a tool error with the reason.
    let r = client
        .call_tool(
            CallToolRequestParams::new("shell")
                .with_arguments(args(serde_json::json!({"command": "rm -rf ."}))),
        )
        .await
        .expect("tools/call shell rm");
    let out = text(&r);
    assert_eq!(r.is_error, Some(true), "{out}");
    assert!(out.contains("refused"), "{out}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("notes.txt")).unwrap(),
        "kept by warden\n",
        "the workspace is intact"
    );

    // The file tools go through the daemon too.
    let r = client
        .call_tool(
            CallToolRequestParams::new("read_file")
                .with_arguments(args(serde_json::json!({"path": "notes.txt"}))),
        )
        .await
        .expect("tools/call read_file");
    let out = text(&r);
    assert_ne!(r.is_error, Some(true), "{out}");
    assert!(out.contains("kept by warden"), "{out}");

    // Bad arguments are a tool error naming what was wrong; nothing runs.
    let r = client
        .call_tool(
            CallToolRequestParams::new("read_file")
                .with_arguments(args(serde_json::json!({"file": "notes.txt"}))),
        )
        .await
        .expect("tools/call read_file malformed");
    let out = text(&r);
    assert_eq!(r.is_error, Some(true), "{out}");
    assert!(out.contains("\"path\""), "{out}");

    // An unknown tool is a protocol error.
    assert!(client
        .call_tool(CallToolRequestParams::new("format_disk"))
        .await
        .is_err());

    client.cancel().await.expect("close the connection");
}

/// Standard output carries only JSON-RPC: a raw session (initialize, a
/// shell call that writes to its own stdout and stderr, end of input) gives
/// only JSON-RPC 2.0 lines, and the process exits 0 when input closes.
#[test]
fn standard_output_carries_only_json_rpc() {
    use std::io::Write;
    let d = Daemon::start();
    let ws = workspace();
    let mut child = std::process::Command::new(warden_bin())
        .env("WARDEN_SOCKET", &d.socket)
        .env("WARDEN_STATE_DIR", &d.state_dir)
        .args(["--no-autostart", "mcp-serve", "--workspace"])
        .arg(ws.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn warden mcp-serve");
    let mut stdin = child.stdin.take().unwrap();
    let msgs = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"shell","arguments":{"command":"echo out-line; echo err-line >&2"}}}"#,
    ];
    for m in &msgs[..2] {
        writeln!(stdin, "{m}").unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    writeln!(stdin, "{}", msgs[2]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(3000));
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 2, "stdout: {stdout}\nstderr: {stderr}");
    for l in &lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert_eq!(v["jsonrpc"], "2.0", "{l}");
    }
    assert!(
        stdout.contains("out-line"),
        "the call's result is on stdout: {stdout}"
    );
    assert!(stderr.contains("mcp-serve"), "logs go to stderr: {stderr}");
}

/// An MCP client that declares form elicitation and answers every
/// elicitation with `answer` (`Some(b)`: accept with `{"approve": b}`;
/// `None`: decline), recording the messages it was shown.
#[derive(Clone)]
struct Elicited {
    answer: Option<bool>,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl rmcp::ClientHandler for Elicited {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::builder()
                .enable_elicitation()
                .build(),
            rmcp::model::Implementation::new("elicitation-test", "0"),
        )
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        let schema = serde_json::to_value(&requested_schema).unwrap();
        assert_eq!(schema["properties"]["approve"]["type"], "boolean");
        assert_eq!(schema["required"], serde_json::json!(["approve"]));
        self.seen.lock().unwrap().push(message);
        Ok(match self.answer {
            Some(b) => ElicitResult::new(ElicitationAction::Accept)
                .with_content(serde_json::json!({ "approve": b })),
            None => ElicitResult::new(ElicitationAction::Decline),
        })
    }
}

/// Runs `warden mcp-serve` on `ws` for a client that answers elicitations
/// with `answer`.
async fn serve_eliciting(
    d: &Daemon,
    ws: &std::path::Path,
    answer: Option<bool>,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, Elicited>,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    let transport = mcp_serve(d, ws);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let handler = Elicited {
        answer,
        seen: seen.clone(),
    };
    let client = handler.serve(transport).await.expect("MCP initialisation");
    (client, seen)
}

async fn shell(
    client: &rmcp::service::RunningService<rmcp::RoleClient, Elicited>,
    command: &str,
) -> (bool, String) {
    let r = client
        .call_tool(
            CallToolRequestParams::new("shell")
                .with_arguments(args(serde_json::json!({ "command": command }))),
        )
        .await
        .expect("tools/call shell");
    (r.is_error == Some(true), text(&r))
}

/// A write-tier command (asked by the default policy) is put to the client
/// as an elicitation showing the preview; accepting with approve=true runs
/// it once; a safe read is not asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_elicitation_approves_a_write() {
    let d = Daemon::start();
    let ws = workspace();
    let (client, seen) = serve_eliciting(&d, ws.path(), Some(true)).await;

    let (err, out) = shell(&client, "echo read-only").await;
    assert!(!err, "{out}");
    assert!(seen.lock().unwrap().is_empty(), "a safe read is not asked");

    let (err, out) = shell(&client, "touch made-by-approval.txt").await;
    assert!(!err, "{out}");
    assert!(
        ws.path().join("made-by-approval.txt").exists(),
        "the approved write ran: {out}"
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].contains("touch made-by-approval.txt"),
        "{}",
        seen[0]
    );
    assert!(seen[0].contains("tier:    write"), "{}", seen[0]);
    client.cancel().await.expect("close the connection");
}

/// Declining the elicitation, or accepting with approve=false, refuses the
/// call (a tool error naming the refusal) and nothing is written; a
/// destructive command is denied without any elicitation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_elicitation_refuses_and_a_deny_is_never_asked() {
    let d = Daemon::start();
    let ws = workspace();
    std::fs::write(ws.path().join("notes.txt"), "kept\n").unwrap();

    let (client, seen) = serve_eliciting(&d, ws.path(), None).await;
    let (err, out) = shell(&client, "touch declined.txt").await;
    assert!(err, "{out}");
    assert!(out.contains("refused"), "{out}");
    assert!(out.contains("declined"), "{out}");
    assert!(!ws.path().join("declined.txt").exists());
    assert_eq!(seen.lock().unwrap().len(), 1);

    let (err, out) = shell(&client, "rm -rf .").await;
    assert!(err, "{out}");
    assert!(out.contains("refused"), "{out}");
    assert_eq!(seen.lock().unwrap().len(), 1, "a deny is not asked");
    assert!(ws.path().join("notes.txt").exists());
    client.cancel().await.expect("close the connection");

    let (client, seen) = serve_eliciting(&d, ws.path(), Some(false)).await;
    let (err, out) = shell(&client, "touch not-approved.txt").await;
    assert!(err, "{out}");
    assert!(out.contains("did not approve"), "{out}");
    assert!(!ws.path().join("not-approved.txt").exists());
    assert_eq!(seen.lock().unwrap().len(), 1);
    client.cancel().await.expect("close the connection");
}

/// A client without the elicitation capability is never asked: an asked
/// call is refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_elicitation_an_ask_is_refused_with_the_reason() {
    let d = Daemon::start();
    let ws = workspace();
    let transport = mcp_serve(&d, ws.path());
    let client = ().serve(transport).await.expect("MCP initialisation");
    let r = client
        .call_tool(
            CallToolRequestParams::new("shell")
                .with_arguments(args(serde_json::json!({"command": "touch unasked.txt"}))),
        )
        .await
        .expect("tools/call shell");
    let out = text(&r);
    assert_eq!(r.is_error, Some(true), "{out}");
    assert!(out.contains("no elicitation capability"), "{out}");
    assert!(!ws.path().join("unasked.txt").exists());
    client.cancel().await.expect("close the connection");
}
