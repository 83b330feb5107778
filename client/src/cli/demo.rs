//! `warden demo`: the whole product on a real repository, with no API key.
//!
//! Copies `examples/demo-repo` (built into the binary) to a temporary
//! workspace, starts an embedded daemon on a private socket and state dir,
//! and runs the scripted plan `examples/demo-plan.jsonl` with an approver
//! that never prompts (grants workspace writes, refuses the network): read
//! the code, run the tests (fail), apply a patch, run the tests (pass), try a
//! network command (refused), a destructive one (denied), and a read through
//! a symlink that leaves the workspace (blocked). Then it rolls back the
//! patch step, shows the tests failing again, re-applies it, and prints the
//! summary and where the checkpoints are. Exit 0 when every step behaved as
//! expected, 1 otherwise (naming what did not).

use std::path::{Path, PathBuf};

use tokio_stream::StreamExt;

use super::run::{print_summary, Progress};
use super::{say, GlobalArgs};
use crate::agent::approver::WritesOnly;
use crate::agent::provider::Message;
use crate::agent::script::Script;
use crate::agent::{self, Agent, AgentEvent, Observer, RunConfig, RunReport};
use crate::pb;

const DEMO_FILES: &[(&str, &str)] = &[
    (
        "README.md",
        include_str!("../../../examples/demo-repo/README.md"),
    ),
    (
        "calc.py",
        include_str!("../../../examples/demo-repo/calc.py"),
    ),
    (
        "test_calc.py",
        include_str!("../../../examples/demo-repo/test_calc.py"),
    ),
];
const DEMO_PLAN: &str = include_str!("../../../examples/demo-plan.jsonl");
const DEMO_TASK: &str = "The tests of this project fail. Find the bug and fix it.";

#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Keep the demo directory here instead of a new temp dir.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Print events as JSON lines.
    #[arg(long)]
    pub json: bool,
}

fn setup(root: &Path) -> std::io::Result<PathBuf> {
    let ws = root.join("workspace");
    std::fs::create_dir_all(&ws)?;
    for (name, content) in DEMO_FILES {
        std::fs::write(ws.join(name), content)?;
    }
    // A file outside the workspace, and a link to it inside: the agent's
    // read through it must be blocked.
    std::fs::write(
        root.join("outside-secret.txt"),
        "host-only data: the demo agent must never read this\n",
    )?;
    std::os::unix::fs::symlink(root.join("outside-secret.txt"), ws.join("notes.txt"))?;
    // A git repository, so the destructive step has something to destroy.
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(&ws)
            .output()
    };
    if git(&["init", "-q"])
        .map(|o| o.status.success())
        .unwrap_or(false)
    {
        let _ = git(&["add", "-A"]);
        let _ = git(&[
            "-c",
            "user.name=demo",
            "-c",
            "user.email=demo@example.invalid",
            "commit",
            "-qm",
            "demo repo",
        ]);
    }
    Ok(ws)
}

async fn run_tests(client: &crate::Client, session: &str) -> Option<i32> {
    let req = pb::ExecRequest {
        session_id: session.into(),
        command: "python3 -m unittest -q 2>&1 | tail -n 1".into(),
        approve: true,
        ..Default::default()
    };
    let mut s = client.exec_client().exec(req).await.ok()?.into_inner();
    let mut out = Vec::new();
    let mut code = None;
    while let Some(Ok(ev)) = s.next().await {
        match ev.event {
            Some(pb::exec_event::Event::Stdout(c)) => out.extend_from_slice(&c.data),
            Some(pb::exec_event::Event::Exit(e)) if !e.refused => code = Some(e.code),
            _ => {}
        }
    }
    let text = String::from_utf8_lossy(&out);
    eprintln!("    tests: {}", text.trim());
    // `tail` hides unittest's status: read it from the last line.
    code.map(|_| if text.contains("OK") { 0 } else { 1 })
}

struct Check {
    failures: Vec<String>,
}

impl Check {
    fn expect(&mut self, ok: bool, what: &str) {
        eprintln!("  [{}] {what}", if ok { "ok" } else { "FAILED" });
        if !ok {
            self.failures.push(what.to_string());
        }
    }
}

fn step<'a>(r: &'a RunReport, call_id: &str) -> Option<&'a agent::StepRecord> {
    r.tool_calls.iter().find(|t| t.call_id == call_id)
}

struct Quiet(Progress);
impl Observer for Quiet {
    fn event(&mut self, run_id: &str, ev: &AgentEvent) {
        self.0.event(run_id, ev)
    }
}

/// Runs `warden demo`; returns the exit code.
pub async fn run(args: DemoArgs, _global: &GlobalArgs) -> i32 {
    let root = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("warden-demo-{}", uuid::Uuid::now_v7().simple())),
    };
    let ws = match setup(&root) {
        Ok(ws) => ws,
        Err(e) => {
            say(format!("setting up the demo in {}: {e}", root.display()));
            return 1;
        }
    };
    let socket = root.join("wardend.sock");
    let state_dir = root.join("state");
    let opts = crate::Options {
        socket: Some(socket.clone()),
        state_dir: Some(state_dir.clone()),
        no_autostart: false,
    };
    eprintln!(
        "warden demo: workspace {} (a copy of examples/demo-repo)",
        ws.display()
    );
    let client = match crate::Client::connect_or_start(&opts).await {
        Ok(c) => c,
        Err(e) => {
            say(e);
            return 1;
        }
    };
    let session = match client.create_session(&ws, Some("default")).await {
        Ok(s) => s,
        Err(e) => {
            say(e);
            return 1;
        }
    };
    let script = match Script::parse("examples/demo-plan.jsonl", DEMO_PLAN) {
        Ok(s) => s,
        Err(e) => {
            say(e);
            return 1;
        }
    };
    let model = "script:examples/demo-plan.jsonl".to_string();
    let run = match client
        .runs()
        .create_run(pb::CreateRunRequest {
            session_id: session.id.clone(),
            task: DEMO_TASK.into(),
            model: model.clone(),
            run_id: String::new(),
        })
        .await
    {
        Ok(r) => r.into_inner(),
        Err(s) => {
            say(s.message());
            return 1;
        }
    };
    eprintln!("warden demo: run {} · model {model} · policy default · approver: grants writes, refuses the network\n", run.id);
    let approver = WritesOnly;
    let agent = Agent {
        client: &client,
        provider: &script,
        approver: &approver,
        session_id: session.id.clone(),
        run_id: run.id.clone(),
        config: RunConfig {
            task: DEMO_TASK.into(),
            max_steps: 20,
            ..Default::default()
        },
    };
    let mut obs = Quiet(Progress::new(args.json));
    obs.event(
        &run.id,
        &AgentEvent::RunStarted {
            task: DEMO_TASK.into(),
            model,
            session_id: session.id.clone(),
        },
    );
    let report = agent
        .run(
            vec![
                Message::system(agent::SYSTEM_PROMPT),
                Message::user(DEMO_TASK),
            ],
            &mut obs,
        )
        .await;
    print_summary(&report);

    eprintln!("\nwhat happened:");
    let mut check = Check { failures: vec![] };
    check.expect(
        report.outcome == agent::RunOutcome::Done,
        "the run finished",
    );
    check.expect(
        step(&report, "c3")
            .and_then(|s| s.exit_code)
            .is_some_and(|c| c != 0),
        "the tests failed before the fix",
    );
    check.expect(
        step(&report, "c4")
            .is_some_and(|s| !s.refused && s.files_changed.iter().any(|f| f == "calc.py")),
        "the patch was applied",
    );
    check.expect(
        step(&report, "c5").and_then(|s| s.exit_code) == Some(0),
        "the tests passed after the fix",
    );
    check.expect(
        step(&report, "c6").is_some_and(|s| s.refused),
        "the network command was refused",
    );
    check.expect(
        step(&report, "c7").is_some_and(|s| s.refused && s.decision.as_deref() == Some("deny")),
        "the destructive command was denied",
    );
    check.expect(ws.join(".git").is_dir(), "the repository history is intact");
    let escape = report
        .history
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some("c8"))
        .and_then(|m| m.content.clone())
        .unwrap_or_default();
    check.expect(
        !escape.contains("host-only data") && escape.starts_with("error"),
        "the read through a symlink leaving the workspace was blocked",
    );

    // Roll the patch step back, then forward again.
    eprintln!("\nrollback:");
    let patch = step(&report, "c4").cloned();
    match patch
        .as_ref()
        .and_then(|p| Some((p.pre_checkpoint.clone()?, p.post_checkpoint.clone()?)))
    {
        Some((pre, post)) => {
            match client
                .checkpoints()
                .rollback(pb::RollbackRequest {
                    checkpoint_id: pre.clone(),
                    files: true,
                    force: true,
                    ..Default::default()
                })
                .await
            {
                Ok(r) => {
                    let r = r.into_inner();
                    eprintln!(
                        "    rolled back to {pre} (before the patch): new checkpoint {}",
                        r.checkpoint_id
                    );
                    check.expect(
                        run_tests(&client, &session.id).await == Some(1),
                        "after rolling back the patch the tests fail again",
                    );
                    match client
                        .checkpoints()
                        .rollback(pb::RollbackRequest {
                            checkpoint_id: post.clone(),
                            files: true,
                            force: true,
                            ..Default::default()
                        })
                        .await
                    {
                        Ok(r2) => {
                            eprintln!(
                                "    re-applied: rolled forward to {post}: new checkpoint {}",
                                r2.into_inner().checkpoint_id
                            );
                            check.expect(
                                run_tests(&client, &session.id).await == Some(0),
                                "after re-applying it the tests pass",
                            );
                        }
                        Err(s) => {
                            check.expect(false, &format!("re-applying the patch: {}", s.message()))
                        }
                    }
                }
                Err(s) => check.expect(
                    false,
                    &format!("rolling back the patch step: {}", s.message()),
                ),
            }
        }
        None => check.expect(false, "the patch step has pre and post checkpoints"),
    }
    let _ = client.close_session(&session.id).await;

    eprintln!("\ntrace (warden trace show {}):", run.id);
    crate::cli::trace::print_run_trace(&client, &run.id).await;

    eprintln!(
        "\ncheckpoints and audit are kept in {}:",
        state_dir.display()
    );
    eprintln!(
        "    export WARDEN_SOCKET={} WARDEN_STATE_DIR={}",
        socket.display(),
        state_dir.display()
    );
    eprintln!("    warden checkpoint list --session {}", session.id);
    eprintln!("    warden audit --session {}", session.id);
    eprintln!("    warden trace show {}", run.id);
    if check.failures.is_empty() {
        eprintln!("\nwarden demo: every step behaved as expected.");
        0
    } else {
        eprintln!(
            "\nwarden demo: {} step(s) did not behave as expected: {}",
            check.failures.len(),
            check.failures.join("; ")
        );
        1
    }
}
