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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_lists_tools_runs_shell_and_is_refused_a_destructive_command() {
    let d = Daemon::start();
    let ws = workspace();
    std::fs::write(ws.path().join("notes.txt"), "kept by warden\n").unwrap();

    let mut cmd = tokio::process::Command::new(warden_bin());
    cmd.env("WARDEN_SOCKET", &d.socket)
        .env("WARDEN_STATE_DIR", &d.state_dir)
        .arg("--no-autostart")
        .arg("mcp-serve")
        .arg("--workspace")
        .arg(ws.path());
    let transport = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("spawn warden mcp-serve")
        .0;
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
