//! Crash and resume (issue 10): kill -9 of the client and of the daemon at
//! many points of a scripted run that mixes a read, a write, a patch, a
//! non-idempotent external step (an approved network-tier POST to a local
//! HTTP server that counts what it receives) and a non-idempotent append;
//! then `warden run --resume`. After each resume: the POST was never made
//! twice, the append never repeated, every file step applied exactly once,
//! the history has no tool call without a result, the resume reported the
//! workspace's drift from the latest checkpoint as it was, and the audit log
//! records the crash and the resume.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_tests::{pb, workspace, Daemon};

/// Counts POST requests on loopback.
fn counting_server() -> (u16, Arc<AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let n = Arc::new(AtomicUsize::new(0));
    let n2 = n.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let mut buf = [0u8; 4096];
            let got = s.read(&mut buf).unwrap_or(0);
            if buf[..got].starts_with(b"POST") {
                n2.fetch_add(1, Ordering::SeqCst);
            }
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n",
            );
        }
    });
    (port, n)
}

fn plan(port: u16) -> String {
    let patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-alpha\n+ALPHA\n";
    let turns = [
        json!({"content": null, "tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "a.txt"}}]}),
        json!({"content": null, "tool_calls": [{"id": "c2", "name": "write_file", "arguments": {"path": "b.txt", "content": "bravo\n"}}]}),
        json!({"content": null, "tool_calls": [{"id": "c3", "name": "apply_patch", "arguments": {"patch": patch}}]}),
        json!({"content": null, "tool_calls": [{"id": "c4", "name": "shell", "arguments": {"command": format!("sleep 1; curl -s -X POST -d ping http://127.0.0.1:{port}/count")}}]}),
        json!({"content": null, "tool_calls": [{"id": "c5", "name": "shell", "arguments": {"command": "sleep 1; echo once >> appended.txt"}}]}),
        json!({"content": "finished", "tool_calls": []}),
    ];
    turns.iter().map(|t| t.to_string() + "\n").collect()
}

fn start_run(d: &Daemon, ws: &std::path::Path, plan: &std::path::Path) -> (Child, String) {
    let mut child = d
        .warden()
        .arg("run")
        .arg("--workspace")
        .arg(ws)
        .args(["--approve", "yes", "--json", "--model"])
        .arg(format!("script:{}", plan.display()))
        .arg("the crash test task")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    let v: Value = serde_json::from_str(&first).unwrap_or_else(|e| panic!("{e}: {first:?}"));
    (child, v["run_id"].as_str().unwrap().to_string())
}

fn history_has_no_orphan_call(state_json: &str) {
    let v: Value = serde_json::from_str(state_json).unwrap();
    let h = v["history"].as_array().unwrap();
    for (i, m) in h.iter().enumerate() {
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            let id = c["id"].as_str().unwrap();
            assert!(
                h[i + 1..]
                    .iter()
                    .any(|r| r["role"] == "tool" && r["tool_call_id"] == id),
                "tool call {id} has no result in the history"
            );
        }
    }
}

/// The latest complete checkpoint of a run (empty when none) and the
/// paths that differ from it in the workspace now, sorted.
fn latest_checkpoint_drift(d: &Daemon, run_id: &str) -> (String, Vec<String>) {
    rt().block_on(async {
        let c = d.client().await;
        let cps = c
            .checkpoints()
            .list_checkpoints(pb::ListCheckpointsRequest {
                session_id: String::new(),
                run_id: run_id.to_string(),
                limit: 1,
            })
            .await
            .unwrap()
            .into_inner()
            .checkpoints;
        let Some(cp) = cps.into_iter().next() else {
            return (String::new(), vec![]);
        };
        let mut drift: Vec<String> = c
            .checkpoints()
            .diff_checkpoints(pb::DiffCheckpointsRequest {
                from_checkpoint_id: cp.id.clone(),
                to_checkpoint_id: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .changes
            .into_iter()
            .map(|c| c.path)
            .collect();
        drift.sort();
        (cp.id, drift)
    })
}

/// A session on `ws` under the default policy and a run in it.
async fn new_run(c: &warden_tests::Client, ws: &std::path::Path) -> (String, pb::Run) {
    let sid = warden_tests::session(c, ws, "default").await;
    let run = c
        .runs()
        .create_run(pb::CreateRunRequest {
            session_id: sid.clone(),
            task: "t".into(),
            model: "script:x".into(),
            run_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    (sid, run)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn killed_clients_and_daemons_resume_without_repeating_side_effects() {
    let mut d = Daemon::start();
    let mut resumed = 0;
    // (kill the daemon too?, delay before the kill in ms)
    let points: Vec<(bool, u64)> = [50u64, 250, 500, 800, 1100, 1500, 2000]
        .iter()
        .flat_map(|ms| [(false, *ms), (true, *ms)])
        .collect();
    for (kill_daemon, delay) in points {
        let ws = workspace();
        std::fs::write(ws.path().join("a.txt"), "alpha\n").unwrap();
        let (port, posts) = counting_server();
        let plan_path = ws.path().with_extension("plan.jsonl");
        std::fs::write(&plan_path, plan(port)).unwrap();
        let (mut child, run_id) = start_run(&d, ws.path(), &plan_path);
        std::thread::sleep(Duration::from_millis(delay));
        let _ = child.kill();
        let _ = child.wait();
        if kill_daemon {
            d.kill9();
            d.restart();
        }
        // What the resume must report: the latest complete checkpoint and
        // the paths that differ from it now. Only when the daemon was
        // killed: after a client kill the daemon may still be finishing the
        // call in flight (the resume waits for it).
        let expected = kill_daemon.then(|| latest_checkpoint_drift(&d, &run_id));
        let t = Instant::now();
        let out = d
            .warden()
            .args(["run", "--resume", &run_id, "--approve", "yes", "--json"])
            .output()
            .unwrap();
        let what = format!(
            "kill {} after {delay} ms",
            if kill_daemon {
                "client+daemon"
            } else {
                "client"
            }
        );
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.code() == Some(1) && stderr.contains("nothing to resume") {
            // The run had already finished before the kill landed.
        } else {
            assert_eq!(
                out.status.code(),
                Some(0),
                "{what}: resume failed\n{stdout}\n{stderr}"
            );
            resumed += 1;
        }
        assert!(t.elapsed() < Duration::from_secs(60));
        // The external POST happened at most once, the append at most once.
        assert!(
            posts.load(Ordering::SeqCst) <= 1,
            "{what}: the POST was made {} times",
            posts.load(Ordering::SeqCst)
        );
        let appended = std::fs::read_to_string(ws.path().join("appended.txt")).unwrap_or_default();
        assert!(
            appended.lines().count() <= 1,
            "{what}: the append ran {} times",
            appended.lines().count()
        );
        // Completed file steps are in place exactly once.
        assert_eq!(
            std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
            "ALPHA\n",
            "{what}"
        );
        assert_eq!(
            std::fs::read_to_string(ws.path().join("b.txt")).unwrap(),
            "bravo\n",
            "{what}"
        );
        rt().block_on(async {
            let c = d.client().await;
            let run = c
                .runs()
                .get_run(pb::GetRunRequest {
                    run_id: run_id.clone(),
                })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(run.status, "done", "{what}");
            history_has_no_orphan_call(&run.state_json);
            // The audit log records the resume (when one happened).
            use tokio_stream::StreamExt;
            let mut s = c
                .audit()
                .list_audit(pb::ListAuditRequest {
                    session_id: run.session_id.clone(),
                    after_seq: 0,
                })
                .await
                .unwrap()
                .into_inner();
            let mut records = vec![];
            while let Some(Ok(r)) = s.next().await {
                if r.run_id == run_id {
                    records.push(r);
                }
            }
            let actions: Vec<&str> = records.iter().map(|r| r.action.as_str()).collect();
            // Completed file steps were not repeated: each file changed once.
            for f in ["a.txt", "b.txt"] {
                let changes = records
                    .iter()
                    .filter(|r| r.action == "file_change" && r.detail_json.contains(f))
                    .count();
                assert!(changes <= 1, "{what}: {f} was changed {changes} times");
            }
            if stdout.contains("run_started") {
                // The crash (nobody ended the run) is recorded, then the
                // resume.
                let crash = actions.iter().position(|a| *a == "crash");
                let resume = actions.iter().position(|a| *a == "resume");
                assert!(
                    crash.is_some() && resume.is_some() && crash < resume,
                    "{what}: no crash record before the resume record in {actions:?}"
                );
                let rec = &records[resume.unwrap()];
                let detail: Value = serde_json::from_str(&rec.detail_json).unwrap();
                if let Some((cp, drift)) = &expected {
                    // The workspace matched the latest complete checkpoint,
                    // or every difference was reported.
                    assert_eq!(detail["checkpoint_id"].as_str().unwrap_or(""), cp, "{what}");
                    let mut reported: Vec<String> = detail["drifted"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|p| p.as_str().unwrap().to_string())
                        .collect();
                    reported.sort();
                    assert_eq!(&reported, drift, "{what}: drift not reported as it is");
                }
            }
        });
        let _ = std::fs::remove_file(&plan_path);
    }
    assert!(
        resumed >= 7,
        "only {resumed} of the kill points left something to resume"
    );
}

#[test]
fn resume_reports_drift_and_never_overwrites_it() {
    let d = Daemon::start();
    let ws = workspace();
    rt().block_on(async {
        let c = d.client().await;
        let (sid, run) = new_run(&c, ws.path()).await;
        let r = warden_tests::exec(
            &c,
            pb::ExecRequest {
                session_id: sid.clone(),
                command: "echo v1 > tracked.txt".into(),
                approve: true,
                run_id: run.id.clone(),
                step_id: format!("{}-1", run.id),
                tool_call_id: "c1".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(r.exit().code, 0);
        assert!(
            !r.exit().post_checkpoint_id.is_empty(),
            "the step was not checkpointed"
        );
        // The same tool call id is never executed twice.
        let again = warden_tests::exec(
            &c,
            pb::ExecRequest {
                session_id: sid.clone(),
                command: "echo v2 >> tracked.txt".into(),
                approve: true,
                run_id: run.id.clone(),
                tool_call_id: "c1".into(),
                ..Default::default()
            },
        )
        .await;
        assert_eq!(
            again.err().map(|s| s.code()),
            Some(tonic::Code::FailedPrecondition)
        );
        // Someone edits the workspace while the run is down.
        std::fs::write(ws.path().join("tracked.txt"), "edited by hand\n").unwrap();
        let plan = c
            .runs()
            .resume(pb::ResumeRequest {
                run_id: run.id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(!plan.checkpoint_id.is_empty());
        assert!(
            plan.drifted.iter().any(|p| p.contains("tracked.txt")),
            "{:?}",
            plan.drifted
        );
        assert!(plan.note.contains("tracked.txt"));
        assert_eq!(
            std::fs::read_to_string(ws.path().join("tracked.txt")).unwrap(),
            "edited by hand\n"
        );
        let step = plan.steps.iter().find(|s| s.tool_call_id == "c1").unwrap();
        assert_eq!(
            (step.journal.as_str(), step.action.as_str()),
            ("completed", "done")
        );
    });
}

/// A call refused only because its approval request got no answer (the
/// client went away between the refusal and its approved retry) never ran
/// and was never decided: the resume plan runs it (asking again), instead of
/// replaying the refusal as its result.
#[test]
fn an_unanswered_approval_is_asked_again_after_resume() {
    let d = Daemon::start();
    let ws = workspace();
    rt().block_on(async {
        let c = d.client().await;
        let (sid, run) = new_run(&c, ws.path()).await;
        let write = |approve: bool, id: &str| pb::WriteFileRequest {
            session_id: sid.clone(),
            path: "b.txt".into(),
            content: b"bravo\n".to_vec(),
            approve,
            run_id: run.id.clone(),
            step_id: format!("{}-1", run.id),
            tool_call_id: id.into(),
            ..Default::default()
        };
        let asked = c.files().write_file(write(false, "c1")).await.unwrap_err();
        assert_eq!(asked.code(), tonic::Code::PermissionDenied);
        assert!(
            asked.message().starts_with("approval required"),
            "{}",
            asked.message()
        );
        let plan = c
            .runs()
            .resume(pb::ResumeRequest {
                run_id: run.id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        let step = plan.steps.iter().find(|s| s.tool_call_id == "c1").unwrap();
        assert_eq!(
            (step.journal.as_str(), step.action.as_str()),
            ("planned", "rerun"),
            "{step:?}"
        );
        assert!(
            step.effects.iter().any(|e| e.contains("asks again")),
            "{step:?}"
        );
        assert_eq!(plan.resume_from_step, format!("{}-1", run.id));
        assert!(!ws.path().join("b.txt").exists());
        // Its first execution, under the same tool call id, after approval.
        c.files().write_file(write(true, "c1")).await.unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.path().join("b.txt")).unwrap(),
            "bravo\n"
        );
        // And now it is done: never executed twice.
        let again = c.files().write_file(write(true, "c1")).await.unwrap_err();
        assert_eq!(again.code(), tonic::Code::FailedPrecondition);
    });
}

/// A client that goes away while its command runs cuts the call off: the
/// daemon kills the command and the journal entry stays `started` (it never
/// completed), so resume re-runs an idempotent read and asks about a write,
/// instead of replaying "killed by signal 9" as the call's result.
#[test]
fn a_command_cut_off_by_its_client_is_started_not_completed() {
    let d = Daemon::start();
    let ws = workspace();
    rt().block_on(async {
        let c = d.client().await;
        let (sid, run) = new_run(&c, ws.path()).await;
        for (id, command) in [
            ("r1", "cat /dev/null; sleep 30"),
            ("w1", "echo x > w.txt; sleep 30"),
        ] {
            let req = pb::ExecRequest {
                session_id: sid.clone(),
                command: command.into(),
                approve: true,
                run_id: run.id.clone(),
                step_id: format!("{}-{id}", run.id),
                tool_call_id: id.into(),
                ..Default::default()
            };
            let mut stream = c.exec_client().exec(req).await.unwrap().into_inner();
            // Wait until the command runs, then go away mid-command.
            loop {
                let ev = stream.message().await.unwrap().expect("stream ended early");
                if matches!(ev.event, Some(pb::exec_event::Event::Started(_))) {
                    break;
                }
            }
            drop(stream);
        }
        // Resume waits for calls still in flight in the daemon, so the plan
        // sees both cut off.
        let plan = c
            .runs()
            .resume(pb::ResumeRequest {
                run_id: run.id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        let action = |id: &str| {
            let s = plan.steps.iter().find(|s| s.tool_call_id == id).unwrap();
            (s.journal.clone(), s.action.clone())
        };
        assert_eq!(action("r1"), ("started".into(), "rerun".into()), "{plan:?}");
        assert_eq!(
            action("w1"),
            ("started".into(), "needs_decision".into()),
            "{plan:?}"
        );
    });
}
