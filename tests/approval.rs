//! End-to-end tests of approvals and the audit log (issue 7) against a real
//! `wardend`: once-grants are single-use and bound to the exact request,
//! denials survive a restart, expired requests cannot be granted, session
//! grants never cover shells or longer compounds, every step of a run is in
//! the audit log, and `warden audit verify` catches a record edited,
//! deleted, reordered or cut off directly in the database.

use std::path::Path;
use std::time::Duration;

use tokio_stream::StreamExt;
use warden_tests::{all_ask_policy, pb, session, workspace, Client, Daemon};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `warden exec --session SID -- WORDS` without a terminal and without --yes.
fn cli_exec(d: &Daemon, sid: &str, words: &[&str]) -> std::process::Output {
    let mut args = vec!["exec", "--session", sid, "--"];
    args.extend_from_slice(words);
    d.run(&args)
}

/// The request id from `warden: approval required (request ID): ...`.
fn request_id(out: &std::process::Output) -> String {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(126), "{err}");
    assert!(err.starts_with("warden: approval required"), "{err}");
    warden_tests::request_id_in(&err)
}

/// Starts an Exec through the typed client and reads events up to the
/// first `approval_required` (returned with the open stream) or the end.
async fn exec_until_asked(
    c: &Client,
    req: pb::ExecRequest,
) -> (
    Option<pb::ApprovalRequest>,
    tonic::Streaming<pb::ExecEvent>,
    Vec<pb::exec_event::Event>,
) {
    let mut stream = c.exec_client().exec(req).await.unwrap().into_inner();
    let mut seen = Vec::new();
    while let Some(ev) = stream.next().await {
        let ev = ev.unwrap().event.unwrap();
        if let pb::exec_event::Event::ApprovalRequired(a) = &ev {
            return (Some(a.clone()), stream, seen);
        }
        seen.push(ev);
    }
    (None, stream, seen)
}

/// The exit event among events already read.
fn exit_in(seen: &[pb::exec_event::Event]) -> pb::ExitEvent {
    seen.iter()
        .find_map(|e| match e {
            pb::exec_event::Event::Exit(x) => Some(x.clone()),
            _ => None,
        })
        .expect("an exit event")
}

/// Reads the rest of a stream and returns its exit event.
async fn finish(mut stream: tonic::Streaming<pb::ExecEvent>) -> pb::ExitEvent {
    let mut exit = None;
    while let Some(ev) = stream.next().await {
        if let Some(pb::exec_event::Event::Exit(e)) = ev.unwrap().event {
            exit = Some(e);
        }
    }
    exit.expect("an exit event")
}

fn exec_req(sid: &str, command: &str, run: &str) -> pb::ExecRequest {
    pb::ExecRequest {
        session_id: sid.into(),
        command: command.into(),
        run_id: run.into(),
        ..Default::default()
    }
}

async fn answer(
    c: &Client,
    id: &str,
    decision: pb::Decision,
    scope: pb::GrantScope,
    prefix: &[&str],
) -> Result<pb::ApprovalRequest, tonic::Status> {
    c.approvals()
        .approve(pb::ApproveRequest {
            request_id: id.into(),
            decision: decision as i32,
            scope: scope as i32,
            prefix: prefix.iter().map(|s| s.to_string()).collect(),
            reason: String::new(),
        })
        .await
        .map(|r| r.into_inner())
}

async fn get(c: &Client, id: &str) -> pb::ApprovalRequest {
    c.approvals()
        .get_approval(pb::GetApprovalRequest {
            request_id: id.into(),
        })
        .await
        .unwrap()
        .into_inner()
}

async fn grant_once(c: &Client, id: &str) -> Result<pb::ApprovalRequest, tonic::Status> {
    answer(c, id, pb::Decision::Allow, pb::GrantScope::Once, &[]).await
}

async fn deny(c: &Client, id: &str) -> Result<pb::ApprovalRequest, tonic::Status> {
    answer(c, id, pb::Decision::Deny, pb::GrantScope::Unspecified, &[]).await
}

async fn audit(c: &Client, sid: &str) -> Vec<pb::AuditRecord> {
    let mut s = c
        .audit()
        .list_audit(pb::ListAuditRequest {
            session_id: sid.into(),
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let mut out = Vec::new();
    while let Some(r) = s.next().await {
        out.push(r.unwrap());
    }
    out
}

#[test]
fn a_once_grant_runs_exactly_that_command_exactly_once() {
    let d = Daemon::start();
    let ws = workspace();
    let rt = rt();
    let sid = rt.block_on(async { session(&d.client().await, ws.path(), "default").await });

    let id = request_id(&cli_exec(&d, &sid, &["touch", "a"]));
    assert!(!ws.path().join("a").exists());
    let out = d.run(&["approve", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("granted once"));

    // Another command does not use the grant: it asks with a new request.
    let other = request_id(&cli_exec(&d, &sid, &["touch", "b"]));
    assert_ne!(other, id);
    assert!(!ws.path().join("b").exists());

    // The granted command runs once...
    let out = cli_exec(&d, &sid, &["touch", "a"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(ws.path().join("a").exists());
    std::fs::remove_file(ws.path().join("a")).unwrap();
    // ...and its replay asks again.
    let replay = request_id(&cli_exec(&d, &sid, &["touch", "a"]));
    assert_ne!(replay, id);
    assert!(!ws.path().join("a").exists());

    // A used grant cannot be answered again.
    let out = d.run(&["approve", &id]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("consumed"), "{}", stderr(&out));

    rt.block_on(async {
        let c = d.client().await;
        let got = get(&c, &id).await;
        assert_eq!(got.state, pb::ApprovalState::Consumed as i32);
        let recs = audit(&c, &sid).await;
        let actions: Vec<&str> = recs.iter().map(|r| r.action.as_str()).collect();
        for want in [
            "classify",
            "request",
            "grant",
            "consume",
            "exec_start",
            "exec_end",
        ] {
            assert!(actions.contains(&want), "{want} missing from {actions:?}");
        }
        let grant = recs.iter().find(|r| r.action == "grant").unwrap();
        assert_eq!(grant.layer, "user");
        assert!(grant.actor.starts_with("uid:"));
    });
}

#[test]
fn an_answer_from_another_client_releases_a_waiting_exec() {
    let d = Daemon::start();
    let ws = workspace();
    rt().block_on(async {
        let c = d.client().await;
        let sid = session(&c, ws.path(), "default").await;
        let (asked, stream, seen) = exec_until_asked(&c, exec_req(&sid, "echo hi > out", "")).await;
        let asked = asked.expect("approval_required");
        assert!(matches!(seen[0], pb::exec_event::Event::Decision(_)));
        let preview = asked.preview.clone().unwrap();
        assert_eq!(preview.summary, "echo hi > out");
        assert_eq!(preview.request_hash.len(), 64);
        // Any client of the session may answer.
        let other = d.client().await;
        grant_once(&other, &asked.id).await.unwrap();
        let exit = finish(stream).await;
        assert!(!exit.refused, "{}", exit.refusal);
        assert_eq!(exit.approval_request_id, asked.id);
        assert_eq!(
            std::fs::read_to_string(ws.path().join("out")).unwrap(),
            "hi\n"
        );
    });
}

#[test]
fn a_denial_survives_a_daemon_restart() {
    let mut d = Daemon::start();
    let ws = workspace();
    let rt = rt();
    let (sid, denied_id) = rt.block_on(async {
        let c = d.client().await;
        let sid = session(&c, ws.path(), "default").await;
        let (asked, stream, _) = exec_until_asked(&c, exec_req(&sid, "touch x", "run1")).await;
        let asked = asked.expect("approval_required");
        deny(&c, &asked.id).await.unwrap();
        let exit = finish(stream).await;
        assert!(
            exit.refused && exit.refusal.starts_with("denied"),
            "{exit:?}"
        );
        (sid, asked.id)
    });
    d.restart();
    rt.block_on(async {
        let c = d.client().await;
        // The same request in the same run is refused without asking, even
        // with --yes.
        let mut req = exec_req(&sid, "touch x", "run1");
        req.approve = true;
        let (asked, _, seen) = exec_until_asked(&c, req).await;
        assert!(asked.is_none(), "asked again after a denial");
        let exit = exit_in(&seen);
        assert!(exit.refused, "{exit:?}");
        assert!(exit.refusal.starts_with("denied"), "{}", exit.refusal);
        assert_eq!(exit.approval_request_id, denied_id);
        assert!(!ws.path().join("x").exists());
        // Recorded, by the user layer.
        let recs = audit(&c, &sid).await;
        let refuse = recs
            .iter()
            .find(|r| r.action == "refuse")
            .expect("refusal recorded");
        assert_eq!(
            (refuse.layer.as_str(), refuse.run_id.as_str()),
            ("user", "run1")
        );
        assert!(refuse.detail_json.contains(&denied_id));
        // Another run may ask (and here, run) again.
        let mut req = exec_req(&sid, "touch x", "run2");
        req.approve = true;
        let exit = finish(c.exec_client().exec(req).await.unwrap().into_inner()).await;
        assert!(!exit.refused, "{exit:?}");
        assert!(ws.path().join("x").exists());
    });
}

#[test]
fn an_expired_request_cannot_be_granted() {
    let d = Daemon::start_with(&["--approval-expiry-ms", "1000"]);
    let ws = workspace();
    let rt = rt();
    let sid = rt.block_on(async { session(&d.client().await, ws.path(), "default").await });
    // Raised from the CLI, left unanswered past its expiry.
    let id = request_id(&cli_exec(&d, &sid, &["touch", "late"]));
    std::thread::sleep(Duration::from_millis(1500));
    let out = d.run(&["approve", &id]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("expired"), "{}", stderr(&out));
    let out = cli_exec(&d, &sid, &["touch", "late"]);
    assert_ne!(request_id(&out), id, "a new request, not the expired one");
    assert!(!ws.path().join("late").exists());
    rt.block_on(async {
        let c = d.client().await;
        // A waiting Exec ends refused at the expiry.
        let (asked, stream, _) = exec_until_asked(&c, exec_req(&sid, "touch waited", "")).await;
        let asked = asked.unwrap();
        let exit = finish(stream).await;
        assert!(exit.refusal.starts_with("approval expired"), "{exit:?}");
        let st = grant_once(&c, &asked.id).await.unwrap_err();
        assert_eq!(st.code(), tonic::Code::FailedPrecondition);
        assert!(!ws.path().join("waited").exists());
        let recs = audit(&c, &sid).await;
        let expired: Vec<_> = recs.iter().filter(|r| r.action == "expire").collect();
        assert!(expired.iter().any(|r| r.detail_json.contains(&id)));
        assert!(expired.iter().any(|r| r.detail_json.contains(&asked.id)));
        assert!(expired.iter().all(|r| r.layer == "daemon"));
    });
}

#[test]
fn a_session_grant_never_covers_a_shell_or_a_longer_compound() {
    let d = Daemon::start();
    let ws = workspace();
    let pol = all_ask_policy(ws.path().parent().unwrap());
    std::fs::create_dir(ws.path().join("x")).unwrap();
    rt().block_on(async {
        let c = d.client().await;
        let sid = session(&c, ws.path(), &pol).await;
        let (asked, stream, _) = exec_until_asked(&c, exec_req(&sid, "git status", "")).await;
        let asked = asked.expect("all-ask policy asks");
        assert_eq!(asked.suggested_prefix, ["git", "status"]);
        // Shells, runners and bare interpreters are refused as prefixes.
        for bad in [
            &["bash"][..],
            &["sh", "-c"],
            &["env"],
            &["xargs"],
            &["python3"],
        ] {
            let st = answer(
                &c,
                &asked.id,
                pb::Decision::Allow,
                pb::GrantScope::Session,
                bad,
            )
            .await
            .unwrap_err();
            assert_eq!(st.code(), tonic::Code::InvalidArgument, "{bad:?}");
        }
        let g = answer(
            &c,
            &asked.id,
            pb::Decision::Allow,
            pb::GrantScope::Session,
            &[],
        )
        .await
        .unwrap();
        assert_eq!(g.prefix, ["git", "status"]);
        let exit = finish(stream).await;
        assert!(!exit.refused, "{exit:?}");
        // Covered: the same prefix, nothing else.
        let (asked, _, seen) = exec_until_asked(&c, exec_req(&sid, "git status --short", "")).await;
        assert!(asked.is_none(), "covered by the session grant");
        assert!(!exit_in(&seen).refused);
        // Never covered: a shell running it, or a compound with more parts.
        for cmd in [
            "bash -c 'git status'",
            "sh -c 'git status'",
            "git status && rm -rf x",
            "git status; rm -rf x",
            "git status | sh",
        ] {
            let (asked, stream, _) = exec_until_asked(&c, exec_req(&sid, cmd, "")).await;
            let asked = asked.unwrap_or_else(|| panic!("{cmd} ran under the git status grant"));
            deny(&c, &asked.id).await.unwrap();
            assert!(finish(stream).await.refused, "{cmd}");
        }
        assert!(ws.path().join("x").is_dir(), "rm -rf x never ran");
        // Closing the session ends the grant.
        c.close_session(&sid).await.unwrap();
        let recs = audit(&c, &sid).await;
        assert!(recs
            .iter()
            .any(|r| r.action == "expire" && r.detail_json.contains("session closed")));
    });
}

#[test]
fn every_step_of_a_run_is_in_the_audit_log() {
    let d = Daemon::start();
    let ws = workspace();
    let sid = rt().block_on(async {
        let c = d.client().await;
        let sid = session(&c, ws.path(), "default").await;
        for (step, cmd) in [("s1", "echo one"), ("s2", "touch two"), ("s3", "exit 3")] {
            let req = pb::ExecRequest {
                session_id: sid.clone(),
                command: cmd.into(),
                run_id: "run-audit".into(),
                step_id: step.into(),
                approve: true,
                ..Default::default()
            };
            finish(c.exec_client().exec(req).await.unwrap().into_inner()).await;
        }
        sid
    });
    let out = d.run(&["audit", "--session", &sid, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    for step in ["s1", "s2", "s3"] {
        let of_step: Vec<&str> = recs
            .iter()
            .filter(|r| r["run_id"] == "run-audit" && r["step_id"] == step)
            .map(|r| r["action"].as_str().unwrap())
            .collect();
        for want in ["classify", "exec_start", "exec_end"] {
            assert!(
                of_step.contains(&want),
                "{step}: {want} missing in {of_step:?}"
            );
        }
    }
    let end = recs
        .iter()
        .find(|r| r["step_id"] == "s3" && r["action"] == "exec_end")
        .unwrap();
    assert_eq!(end["detail"]["code"], 3);
    // Sequence numbers increase and each record links to the one before.
    let seqs: Vec<u64> = recs.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    let out = d.run(&["audit", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// Copies the state files (database, WAL, head file) of a stopped daemon.
fn snapshot(state: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(state).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("warden.db") || name == "audit.head" {
            std::fs::copy(e.path(), to.join(&name)).unwrap();
        }
    }
}

fn restore(from: &Path, state: &Path) {
    for e in std::fs::read_dir(state).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("warden.db") {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    snapshot(from, state);
}

/// Tampers with the audit table as an attacker would: straight SQL, with
/// the append-only triggers dropped first.
fn tamper(state: &Path, sql: &str) {
    let conn = rusqlite::Connection::open(state.join("warden.db")).unwrap();
    conn.execute_batch(
        "DROP TRIGGER IF EXISTS audit_log_no_update; DROP TRIGGER IF EXISTS audit_log_no_delete;",
    )
    .unwrap();
    conn.execute_batch(sql).unwrap();
}

#[test]
fn audit_verify_detects_edits_deletions_reordering_and_a_cut_tail() {
    let mut d = Daemon::start();
    let ws = workspace();
    rt().block_on(async {
        let c = d.client().await;
        let sid = session(&c, ws.path(), "default").await;
        for i in 0..3 {
            let mut req = exec_req(&sid, &format!("echo {i}"), "");
            req.approve = true;
            finish(c.exec_client().exec(req).await.unwrap().into_inner()).await;
        }
    });
    assert_eq!(d.run(&["audit", "verify"]).status.code(), Some(0));
    d.terminate();
    let pristine = d.dir.path().join("pristine");
    snapshot(&d.state_dir, &pristine);
    let n: u64 = rusqlite::Connection::open(pristine.join("warden.db"))
        .unwrap()
        .query_row("SELECT MAX(seq) FROM audit_log", [], |r| r.get::<_, i64>(0))
        .unwrap() as u64;
    assert!(n >= 9, "3 execs make at least 9 records, got {n}");
    let cases: &[(&str, String, u64)] = &[
        (
            "edited",
            "UPDATE audit_log SET detail_json = '{\"command\":\"nothing\"}' WHERE seq = 4".into(),
            4,
        ),
        ("deleted", "DELETE FROM audit_log WHERE seq = 5".into(), 5),
        (
            "reordered",
            "UPDATE audit_log SET seq = -1 WHERE seq = 2; UPDATE audit_log SET seq = 2 WHERE seq = 3; UPDATE audit_log SET seq = 3 WHERE seq = -1;".into(),
            2,
        ),
        (
            "cut off",
            format!("DELETE FROM audit_log WHERE seq > {}", n - 2),
            n - 1,
        ),
    ];
    for (what, sql, first_broken) in cases {
        restore(&pristine, &d.state_dir);
        tamper(&d.state_dir, sql);
        // The daemon still starts and serves with a broken chain.
        d.restart();
        let out = d.run(&["audit", "verify", "--json"]);
        assert_eq!(out.status.code(), Some(1), "{what}: {}", stderr(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
        assert_eq!(report["ok"], false, "{what}");
        assert_eq!(
            report["first_broken_seq"], *first_broken,
            "{what}: {report}"
        );
        let msg = stderr(&out);
        assert!(
            msg.contains(&format!("broken at record {first_broken}")),
            "{what}: {msg}"
        );
        // It reported the break at startup, in the log itself.
        let out = d.run(&["audit", "--json"]);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("\"action\":\"audit_broken\""),
            "{what}"
        );
        d.terminate();
    }
}

/// The request id from a `approval required (request ID)` status message.
fn id_in(msg: &str) -> String {
    let start = msg.find("(request ").expect("request id in the message") + "(request ".len();
    let end = msg[start..].find(')').unwrap() + start;
    msg[start..end].to_string()
}

#[test]
fn file_tools_ask_with_the_diff_and_a_grant_covers_exactly_those_bytes() {
    let d = Daemon::start();
    let ws = workspace();
    std::fs::write(ws.path().join("f.txt"), "old line\n").unwrap();
    rt().block_on(async {
        let c = d.client().await;
        let sid = session(&c, ws.path(), "default").await;
        let write = |content: &str| pb::WriteFileRequest {
            session_id: sid.clone(),
            path: "f.txt".into(),
            content: content.as_bytes().to_vec(),
            ..Default::default()
        };
        let st = c.files().write_file(write("new line\n")).await.unwrap_err();
        assert_eq!(st.code(), tonic::Code::PermissionDenied);
        assert!(
            st.message().starts_with("approval required"),
            "{}",
            st.message()
        );
        let id = id_in(st.message());
        let req = get(&c, &id).await;
        let preview = req.preview.unwrap();
        assert_eq!(preview.tool, "write_file");
        assert!(
            preview.diff.contains("-old line") && preview.diff.contains("+new line"),
            "{}",
            preview.diff
        );
        assert_eq!(preview.classification.unwrap().writes, ["f.txt"]);
        assert_eq!(
            std::fs::read_to_string(ws.path().join("f.txt")).unwrap(),
            "old line\n"
        );
        grant_once(&c, &id).await.unwrap();
        // Other bytes to the same path: not covered.
        let st = c.files().write_file(write("other\n")).await.unwrap_err();
        assert!(
            st.message().starts_with("approval required"),
            "{}",
            st.message()
        );
        // Exactly the approved bytes: written, once.
        c.files().write_file(write("new line\n")).await.unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.path().join("f.txt")).unwrap(),
            "new line\n"
        );
        let st = c.files().write_file(write("new line\n")).await.unwrap_err();
        assert!(
            st.message().starts_with("approval required"),
            "replayed: {}",
            st.message()
        );
        // A malformed patch is a schema error, never a policy question.
        let st = c
            .files()
            .apply_patch(pb::ApplyPatchRequest {
                session_id: sid.clone(),
                patch: "this is not a diff".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(st.code(), tonic::Code::InvalidArgument);
        let recs = audit(&c, &sid).await;
        let change = recs
            .iter()
            .find(|r| r.action == "file_change")
            .expect("the write recorded");
        assert!(
            change.detail_json.contains("\"path\":\"f.txt\""),
            "{}",
            change.detail_json
        );
        let reject = recs
            .iter()
            .find(|r| r.action == "reject")
            .expect("rejection recorded");
        assert_eq!(reject.layer, "schema");
        assert!(!recs
            .iter()
            .any(|r| r.action == "classify" && r.detail_json.contains("apply_patch")));
    });
}

/// Runs `warden ARGS` on a pseudo-terminal (util-linux script(1)) with
/// `input` typed in; returns the exit code and everything the terminal
/// showed.
fn on_terminal(d: &Daemon, args: &str, input: &str) -> (Option<i32>, String) {
    use std::io::Write;
    let cmd = format!(
        "{} --no-autostart {args}",
        warden_tests::warden_bin().display()
    );
    let mut child = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("WARDEN_SOCKET", &d.socket)
        .env("WARDEN_STATE_DIR", &d.state_dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("script(1) from util-linux");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn on_a_terminal_exec_shows_the_preview_and_asks() {
    let d = Daemon::start();
    let ws = workspace();
    let sid = rt().block_on(async { session(&d.client().await, ws.path(), "default").await });
    let (code, shown) = on_terminal(
        &d,
        &format!("exec --session {sid} -- touch yes-file"),
        "y\n",
    );
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.contains("approval required (request "), "{shown}");
    assert!(
        shown.contains("exec: touch yes-file"),
        "the preview: {shown}"
    );
    assert!(shown.contains("allow?"), "{shown}");
    assert!(ws.path().join("yes-file").exists());
    let (code, shown) = on_terminal(&d, &format!("exec --session {sid} -- touch no-file"), "n\n");
    assert_eq!(code, Some(126), "{shown}");
    assert!(shown.contains("denied by user"), "{shown}");
    assert!(!ws.path().join("no-file").exists());
}

#[test]
fn every_tool_step_of_an_agent_run_is_in_the_audit_log() {
    let d = Daemon::start();
    let ws = workspace();
    let plan = ws.path().parent().unwrap().join(format!(
        "plan-audit-{}.jsonl",
        ws.path().file_name().unwrap().to_string_lossy()
    ));
    let turns = [
        serde_json::json!({"content": null, "tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": "echo one"}}]}),
        serde_json::json!({"content": null, "tool_calls": [{"id": "c2", "name": "write_file", "arguments": {"path": "f.txt", "content": "hi\n"}}]}),
        serde_json::json!({"content": null, "tool_calls": [{"id": "c3", "name": "shell", "arguments": {"command": "rm -rf ."}}]}),
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
        .args(["--approve", "yes", "--json", "--model"])
        .arg(format!("script:{}", plan.display()))
        .arg("audit me")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&plan);
    assert!(out.status.success(), "{}", stderr(&out));
    let first: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    let run_id = first["run_id"].as_str().unwrap().to_string();
    let out = d.run(&["audit", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &serde_json::Value| r["run_id"] == run_id.as_str())
        .collect();
    let of_call = |needle: &str| -> Vec<String> {
        // The step whose classify record names the call, then its actions.
        let step = recs
            .iter()
            .find(|r| {
                r["action"] == "classify" && r["detail_json"].as_str().unwrap().contains(needle)
            })
            .unwrap_or_else(|| panic!("no classify record for {needle}: {recs:?}"))["step_id"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(!step.is_empty());
        recs.iter()
            .filter(|r| r["step_id"] == step.as_str())
            .map(|r| r["action"].as_str().unwrap().to_string())
            .collect()
    };
    let echo = of_call("echo one");
    assert!(
        echo.contains(&"exec_start".into()) && echo.contains(&"exec_end".into()),
        "{echo:?}"
    );
    let write = of_call("write_file f.txt");
    assert!(
        write.contains(&"consume".into()) && write.contains(&"file_change".into()),
        "{write:?}"
    );
    let rm = of_call("rm -rf .");
    assert!(
        rm.contains(&"deny".into()) && !rm.contains(&"exec_start".into()),
        "{rm:?}"
    );
    assert_eq!(d.run(&["audit", "verify"]).status.code(), Some(0));
}

#[test]
fn checkpoints_anchor_the_chain_and_rollbacks_are_recorded() {
    let mut d = Daemon::start();
    let ws = workspace();
    let rt = rt();
    let (sid, anchored) = rt.block_on(async {
        let c = d.client().await;
        let sid = session(&c, ws.path(), "default").await;
        for cmd in ["echo one > a.txt", "echo two > a.txt"] {
            let mut req = exec_req(&sid, cmd, "");
            req.approve = true;
            assert!(
                !finish(c.exec_client().exec(req).await.unwrap().into_inner())
                    .await
                    .refused
            );
        }
        let cps = c
            .checkpoints()
            .list_checkpoints(pb::ListCheckpointsRequest {
                session_id: sid.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .checkpoints;
        assert!(cps.len() >= 2, "{cps:?}");
        assert!(
            cps.iter()
                .all(|cp| cp.audit_seq > 0 && cp.audit_head.len() == 64),
            "{cps:?}"
        );
        // Roll back to the first exec's post-checkpoint: recorded.
        let first_post = cps
            .iter()
            .filter(|cp| cp.kind == "post")
            .min_by_key(|cp| cp.created_at_ms)
            .unwrap();
        c.checkpoints()
            .rollback(pb::RollbackRequest {
                checkpoint_id: first_post.id.clone(),
                files: true,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
            "one\n"
        );
        let recs = audit(&c, &sid).await;
        let rb = recs
            .iter()
            .find(|r| r.action == "rollback")
            .expect("rollback recorded");
        assert!(
            rb.detail_json.contains(&first_post.id),
            "{}",
            rb.detail_json
        );
        (sid, cps.iter().map(|cp| cp.audit_seq).max().unwrap())
    });
    let _ = sid;
    d.terminate();
    // Rewrite a record below the newest anchor, re-chain every later record
    // so the chain is self-consistent, and remove the head file: only the
    // checkpoints still know the old chain.
    let db = rusqlite::Connection::open(d.state_dir.join("warden.db")).unwrap();
    db.execute_batch("DROP TRIGGER audit_log_no_update; DROP TRIGGER audit_log_no_delete;")
        .unwrap();
    let mut recs: Vec<warden_daemon::approval::AuditRecord> = {
        let mut st = db
            .prepare(&format!(
                "SELECT {} FROM audit_log ORDER BY seq",
                warden_daemon::approval::AUDIT_COLUMNS
            ))
            .unwrap();
        st.query_map([], warden_daemon::approval::AuditRecord::from_row)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let victim = (anchored as usize).saturating_sub(3).max(1);
    recs[victim - 1].detail_json = r#"{"command":"nothing happened"}"#.into();
    for i in victim - 1..recs.len() {
        if i > 0 {
            recs[i].prev_hash = recs[i - 1].hash.clone();
        }
        recs[i].hash = recs[i].compute_hash();
        db.execute(
            "UPDATE audit_log SET detail_json = ?1, prev_hash = ?2, hash = ?3 WHERE seq = ?4",
            rusqlite::params![
                recs[i].detail_json,
                recs[i].prev_hash,
                recs[i].hash,
                recs[i].seq as i64
            ],
        )
        .unwrap();
    }
    drop(db);
    std::fs::remove_file(d.state_dir.join("audit.head")).unwrap();
    d.restart();
    let out = d.run(&["audit", "verify", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["kind"], "anchor_mismatch", "{report}");
    assert!(
        report["first_broken_seq"].as_u64().unwrap() >= victim as u64,
        "{report}"
    );
}
