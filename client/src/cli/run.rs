//! `warden run [--workspace DIR] [--model PROVIDER:NAME] [--policy NAME] [--max-steps N]
//! [--approve prompt|yes|no] [--json] [--artifacts DIR] "TASK"`: the agent loop.
//!
//! Exit codes: 0 done, 1 failed, 2 usage, 3 stopped by a limit, 130
//! interrupted (Ctrl-C; the run can be resumed).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{connect, say, GlobalArgs};
use crate::agent::approver::{self, Approver};
use crate::agent::provider::Message;
use crate::agent::resume::{complete_dangling_calls, history_from_state, Choice};
use crate::agent::{self, Agent, AgentEvent, Observer, RunConfig, RunReport};
use crate::pb;

/// Exit code for usage errors.
pub const EXIT_USAGE: i32 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApproveMode {
    /// Show the preview and ask on the terminal (default on a terminal).
    Prompt,
    /// Grant every ask once (a deny stays a deny).
    Yes,
    /// Refuse every ask (default without a terminal).
    No,
}

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Workspace root [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Model: openai:NAME (OPENAI_BASE_URL, OPENAI_API_KEY), anthropic:NAME
    /// (ANTHROPIC_API_KEY), or script:FILE (a JSON Lines plan).
    #[arg(long, value_name = "PROVIDER:NAME")]
    pub model: Option<String>,
    /// Policy name or file [default: the daemon's].
    #[arg(long, value_name = "NAME|FILE")]
    pub policy: Option<String>,
    /// Most model calls.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_steps: u32,
    /// Most tokens (input + output) over the run; 0 = no limit.
    #[arg(long, default_value_t = 0)]
    pub max_tokens: u64,
    /// Most cost in US dollars; 0 = no limit.
    #[arg(long, default_value_t = 0.0)]
    pub max_cost: f64,
    /// Wall clock for the whole run, seconds.
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub max_time: u64,
    /// The model's context window in tokens [default: the provider's]; the
    /// history is degraded (old tool outputs shortened, then summarised)
    /// past 75% of it.
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u64).range(1000..=10_000_000))]
    pub context_window: Option<u64>,
    /// How approval requests are answered [default: prompt on a terminal, else no].
    #[arg(long, value_enum)]
    pub approve: Option<ApproveMode>,
    /// Print events as JSON lines (each with the run_id) on standard output.
    #[arg(long)]
    pub json: bool,
    /// Write the audit log, the final diff, the trace and a summary here.
    #[arg(long, value_name = "DIR")]
    pub artifacts: Option<PathBuf>,
    /// Resume an interrupted run: its workspace, policy, model and task come
    /// from the run record (--model may override the model).
    #[arg(long, value_name = "RUN_ID", conflicts_with_all = ["workspace", "policy", "task"])]
    pub resume: Option<String>,
    /// The task for the agent.
    #[arg(value_name = "TASK")]
    pub task: Option<String>,
}

/// Progress view on standard error (a line per step, a spinner for long
/// tool calls on a terminal) or JSON lines on standard output.
pub struct Progress {
    json: bool,
    tty: bool,
    spinner: Arc<Mutex<Option<(String, Instant)>>>,
}

impl Progress {
    pub fn new(json: bool) -> Progress {
        let tty = std::io::stderr().is_terminal() && !json;
        let spinner: Arc<Mutex<Option<(String, Instant)>>> = Arc::new(Mutex::new(None));
        if tty {
            let s = spinner.clone();
            std::thread::spawn(move || {
                let frames = ['|', '/', '-', '\\'];
                let mut i = 0;
                loop {
                    std::thread::sleep(Duration::from_millis(120));
                    let g = s.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some((label, t)) = g.as_ref() {
                        if t.elapsed() > Duration::from_millis(700) {
                            eprint!(
                                "\r  {} {label} ({:.1} s)\x1b[K",
                                frames[i % 4],
                                t.elapsed().as_secs_f64()
                            );
                            i += 1;
                        }
                    }
                }
            });
        }
        Progress { json, tty, spinner }
    }

    fn stop_spinner(&self) {
        if self
            .spinner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .is_some()
            && self.tty
        {
            eprint!("\r\x1b[K");
        }
    }
}

impl Observer for Progress {
    fn event(&mut self, run_id: &str, ev: &AgentEvent) {
        if self.json {
            let mut v = serde_json::to_value(ev).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.insert("run_id".into(), run_id.into());
            }
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{v}");
            let _ = out.flush();
            return;
        }
        match ev {
            AgentEvent::RunStarted { .. } => {}
            AgentEvent::Message { step, text } => {
                let first = text.lines().next().unwrap_or_default();
                eprintln!("  step {step:<3} model     {first}");
            }
            AgentEvent::ToolStarted {
                step,
                tool,
                summary,
            } => {
                *self.spinner.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((format!("step {step} {tool} {summary}"), Instant::now()));
            }
            AgentEvent::ToolFinished(r) => {
                self.stop_spinner();
                let verdict = match (&r.decision, r.refused) {
                    (Some(d), true) => format!("{d}: refused"),
                    (Some(d), false) => d.clone(),
                    (None, true) => "refused".into(),
                    (None, false) => "-".into(),
                };
                let result = match r.exit_code {
                    Some(c) => format!("exit {c}"),
                    None if r.refused => String::new(),
                    None if r.error.is_some() => "error".into(),
                    None => "ok".into(),
                };
                eprintln!(
                    "  step {:<3} {:<11} {:<12} {:<16} {:<8} {:>7}  {}",
                    r.step,
                    r.tool,
                    r.tier.as_deref().unwrap_or("-"),
                    verdict,
                    result,
                    human_ms(r.duration_ms),
                    r.summary
                );
            }
            AgentEvent::Degraded(d) => eprintln!(
                "  context   {} ({} messages, ~{} -> ~{} tokens)",
                d.kind, d.messages, d.tokens_before, d.tokens_after
            ),
            AgentEvent::ToolWarning { tool, warning } => {
                eprintln!("  warning   {tool}: {warning}")
            }
            AgentEvent::ModelCall { .. } => {}
            AgentEvent::RunFinished { .. } => self.stop_spinner(),
        }
    }
}

fn human_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// The end-of-run summary for a person.
pub fn print_summary(r: &RunReport) {
    eprintln!();
    let outcome = match &r.outcome {
        agent::RunOutcome::Done => "done".to_string(),
        agent::RunOutcome::Failed(why) => format!("failed: {why}"),
        agent::RunOutcome::Stopped(why) => format!("stopped: {why}"),
        agent::RunOutcome::Interrupted => {
            format!(
                "interrupted (resume with: warden run --resume {})",
                r.run_id
            )
        }
    };
    eprintln!("run {}: {outcome}", r.run_id);
    eprintln!(
        "  {} model calls, {} tool calls, {} refused, {} failed, {} files changed{}",
        r.steps,
        r.tool_calls.len(),
        r.refused,
        r.tool_calls.iter().filter(|t| t.error.is_some()).count(),
        r.files_changed.len(),
        if r.files_changed.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                r.files_changed
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    eprintln!(
        "  tokens: {} in, {} out; cost: ${:.4}",
        r.input_tokens,
        r.output_tokens,
        r.cost_micros as f64 / 1e6
    );
    if !r.degraded.is_empty() {
        eprintln!("  context degraded {} times", r.degraded.len());
    }
    eprintln!(
        "  checkpoints: warden checkpoint list --session {}",
        r.session_id
    );
}

/// Picks the approver for `--approve` (default: prompt on a terminal, no otherwise).
pub fn approver_for(mode: Option<ApproveMode>) -> Box<dyn Approver> {
    let mode = mode.unwrap_or(if std::io::stdin().is_terminal() {
        ApproveMode::Prompt
    } else {
        ApproveMode::No
    });
    match mode {
        ApproveMode::Prompt => Box::new(approver::Prompt),
        ApproveMode::Yes => Box::new(approver::Yes),
        ApproveMode::No => Box::new(approver::No),
    }
}

/// Writes `--artifacts`: summary.json, audit.jsonl, final.diff, trace.jsonl
/// (OTLP/JSON spans, one a line), trace.txt (the span tree).
/// What the daemon cannot provide is written as a one-line note instead.
pub async fn write_artifacts(
    client: &crate::Client,
    dir: &Path,
    r: &RunReport,
) -> std::io::Result<()> {
    use tokio_stream::StreamExt;
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(r).unwrap_or_default(),
    )?;
    let audit = match client
        .audit()
        .list_audit(pb::ListAuditRequest {
            session_id: r.session_id.clone(),
            after_seq: 0,
        })
        .await
    {
        Ok(s) => {
            let mut s = s.into_inner();
            let mut out = String::new();
            while let Some(Ok(rec)) = s.next().await {
                out.push_str(&crate::cli::audit::record_json(&rec).to_string());
                out.push('\n');
            }
            out
        }
        Err(s) => format!("# audit log unavailable: {}\n", s.message()),
    };
    std::fs::write(dir.join("audit.jsonl"), audit)?;
    let first_pre = r.tool_calls.iter().find_map(|t| t.pre_checkpoint.clone());
    let diff = match first_pre {
        Some(id) => match client
            .checkpoints()
            .diff_checkpoints(pb::DiffCheckpointsRequest {
                from_checkpoint_id: id,
                to_checkpoint_id: String::new(),
            })
            .await
        {
            Ok(d) => d.into_inner().patch,
            Err(s) => format!("# diff unavailable: {}\n", s.message()),
        },
        None => "# no checkpoints were taken in this run\n".to_string(),
    };
    std::fs::write(dir.join("final.diff"), diff)?;
    // The run's spans as OTLP/JSON lines, and the tree a person reads.
    let (trace, tree) = match crate::cli::trace::fetch(client, &r.run_id).await {
        Ok(spans) => (
            crate::cli::trace::jsonl(&spans),
            crate::cli::trace::render(&r.run_id, &spans, false),
        ),
        Err(s) => {
            let note = format!("# trace unavailable: {}\n", s.message());
            (note.clone(), note)
        }
    };
    std::fs::write(dir.join("trace.txt"), tree)?;
    std::fs::write(dir.join("trace.jsonl"), trace)?;
    Ok(())
}

fn ask_decision(s: &pb::StepStatus) -> Choice {
    use std::io::BufRead;
    if !std::io::stdin().is_terminal() {
        return Choice::Skip;
    }
    eprint!(
        "warden: tool call {} ({}) started but never completed and is not idempotent.\n  known effects: {}\n  [r]e-run / [s]kip / s[t]op? ",
        s.tool_call_id,
        s.tool,
        s.effects.join("; ")
    );
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    match line.trim() {
        "r" | "rerun" | "re-run" => Choice::Rerun,
        "t" | "stop" => Choice::Stop,
        _ => Choice::Skip,
    }
}

async fn resume(args: RunArgs, run_id: String, global: &GlobalArgs) -> i32 {
    let client = match connect(global).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let run = match client
        .runs()
        .get_run(pb::GetRunRequest {
            run_id: run_id.clone(),
        })
        .await
    {
        Ok(r) => r.into_inner(),
        Err(s) => {
            say(s.message());
            return 1;
        }
    };
    let model = args.model.clone().unwrap_or_else(|| run.model.clone());
    let provider = match agent::provider_from_spec(&model) {
        Ok(p) => p,
        Err(e) => {
            say(e);
            return EXIT_USAGE;
        }
    };
    let plan = match client
        .runs()
        .resume(pb::ResumeRequest {
            run_id: run_id.clone(),
        })
        .await
    {
        Ok(p) => p.into_inner(),
        Err(s) => {
            say(s.message());
            return 1;
        }
    };
    if !args.json {
        eprintln!(
            "warden run --resume {run_id} · model {model} · workspace {}",
            run.workspace
        );
        if !plan.checkpoint_id.is_empty() {
            eprintln!("  latest complete checkpoint: {}", plan.checkpoint_id);
        }
        if !plan.drifted.is_empty() {
            eprintln!(
                "  drifted since then (not overwritten): {}",
                plan.drifted.join(", ")
            );
        }
        for s in plan.steps.iter().filter(|s| s.action != "done") {
            eprintln!(
                "  {} {} ({}): {} — {}",
                s.tool_call_id,
                s.tool,
                s.journal,
                s.action,
                s.effects.join("; ")
            );
        }
    }
    let approver = approver_for(args.approve);
    let dispatcher = crate::agent::tools::Dispatcher {
        trace: None,
        client: &client,
        session_id: run.session_id.clone(),
        run_id: run_id.clone(),
        approver: approver.as_ref(),
        budget_bytes: RunConfig::default().tool_budget_bytes,
    };
    let mut history = history_from_state(&plan.state_json).unwrap_or_else(|| {
        vec![
            Message::system(agent::SYSTEM_PROMPT),
            Message::user(run.task.clone()),
        ]
    });
    if !complete_dangling_calls(&mut history, &plan, &dispatcher, &mut ask_decision).await {
        say("stopped: the run stays interrupted and can be resumed again");
        let _ = client
            .runs()
            .finish_run(pb::FinishRunRequest {
                run_id: run_id.clone(),
                status: "interrupted".into(),
                reason: "stopped at resume".into(),
            })
            .await;
        return 3;
    }
    history.push(Message::user(plan.note.clone()));
    let config = RunConfig {
        task: run.task.clone(),
        max_steps: args.max_steps,
        max_tokens: args.max_tokens,
        max_cost_micros: (args.max_cost.max(0.0) * 1e6) as u64,
        max_wall: Duration::from_secs(args.max_time),
        context_window: args.context_window.map(|w| w as usize),
        ..Default::default()
    };
    let mut progress = Progress::new(args.json);
    progress.event(
        &run_id,
        &AgentEvent::RunStarted {
            task: run.task.clone(),
            model: model.clone(),
            session_id: run.session_id.clone(),
        },
    );
    let agent = Agent {
        client: &client,
        provider: provider.as_ref(),
        approver: approver.as_ref(),
        session_id: run.session_id.clone(),
        run_id: run_id.clone(),
        config,
    };
    let report = agent.run(history, &mut progress).await;
    if !args.json {
        print_summary(&report);
    }
    if let Some(dir) = &args.artifacts {
        if let Err(e) = write_artifacts(&client, dir, &report).await {
            say(format!("writing artifacts to {}: {e}", dir.display()));
        }
    }
    let _ = client.close_session(&run.session_id).await;
    report.outcome.exit_code()
}

/// Runs `warden run`; returns the exit code.
pub async fn run(args: RunArgs, global: &GlobalArgs) -> i32 {
    if let Some(id) = args.resume.clone() {
        return resume(args, id, global).await;
    }
    let Some(task) = args.task.clone().filter(|t| !t.trim().is_empty()) else {
        say("a TASK is required: warden run [OPTIONS] \"TASK\"");
        return EXIT_USAGE;
    };
    let Some(model) = args.model.clone() else {
        say("choose a model with --model PROVIDER:NAME (openai:NAME, anthropic:NAME, script:FILE)");
        return EXIT_USAGE;
    };
    let provider = match agent::provider_from_spec(&model) {
        Ok(p) => p,
        Err(e) => {
            say(e);
            return EXIT_USAGE;
        }
    };
    let client = match connect(global).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let ws = args.workspace.clone().unwrap_or_else(|| PathBuf::from("."));
    let session = match client.create_session(&ws, args.policy.as_deref()).await {
        Ok(s) => s,
        Err(e) => {
            say(e);
            return 1;
        }
    };
    let run = match client
        .runs()
        .create_run(pb::CreateRunRequest {
            session_id: session.id.clone(),
            task: task.clone(),
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
    let approver = approver_for(args.approve);
    let config = RunConfig {
        task: task.clone(),
        max_steps: args.max_steps,
        max_tokens: args.max_tokens,
        max_cost_micros: (args.max_cost.max(0.0) * 1e6) as u64,
        max_wall: Duration::from_secs(args.max_time),
        context_window: args.context_window.map(|w| w as usize),
        ..Default::default()
    };
    let mut progress = Progress::new(args.json);
    progress.event(
        &run.id,
        &AgentEvent::RunStarted {
            task: task.clone(),
            model: model.clone(),
            session_id: session.id.clone(),
        },
    );
    if !args.json {
        eprintln!(
            "warden run {} · model {model} · policy {} · workspace {}",
            run.id, session.policy_name, session.workspace
        );
    }
    let agent = Agent {
        client: &client,
        provider: provider.as_ref(),
        approver: approver.as_ref(),
        session_id: session.id.clone(),
        run_id: run.id.clone(),
        config,
    };
    let history = vec![Message::system(agent::SYSTEM_PROMPT), Message::user(task)];
    let report = agent.run(history, &mut progress).await;
    if !args.json {
        print_summary(&report);
    }
    if let Some(dir) = &args.artifacts {
        if let Err(e) = write_artifacts(&client, dir, &report).await {
            say(format!("writing artifacts to {}: {e}", dir.display()));
        }
    }
    let _ = client.close_session(&session.id).await;
    report.outcome.exit_code()
}
