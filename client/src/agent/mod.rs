//! The agent loop: talks to a model ([`provider::Provider`]), turns its tool
//! calls into daemon calls ([`tools::Dispatcher`]), handles approvals
//! ([`approver::Approver`]), manages the context window, and records the run
//! state with the daemon after every step.
//!
//! Stop conditions: the model finishes (a reply without tool calls), max
//! steps, max tokens, max cost, wall clock, or a user interrupt (Ctrl-C),
//! which records the state and ends the run as `interrupted`.

pub mod anthropic;
pub mod approver;
pub mod context;
pub mod openai;
pub mod provider;
pub mod resume;
pub mod script;
pub mod tools;
pub mod trace;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use crate::pb;
use crate::Client;
use approver::Approver;
use provider::{Message, Provider, ProviderError, Role};

/// The system prompt every run starts with.
pub const SYSTEM_PROMPT: &str = "You are a coding agent working in a repository through Warden, a sandbox. \
Use the tools to inspect and change the workspace: shell runs bash commands (classified into tiers and decided by policy), \
read_file/write_file/apply_patch/list_dir/grep work on files relative to the workspace root. \
A refused call is answered with the reason: take another way. When the task is done, reply without tool calls.";

/// Limits and presentation of one run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub task: String,
    pub max_steps: u32,
    /// Total tokens (input + output); 0 means no limit.
    pub max_tokens: u64,
    /// Micro-dollars; 0 means no limit.
    pub max_cost_micros: u64,
    /// Wall clock for the whole run.
    pub max_wall: Duration,
    /// Most bytes of one tool result given to the model.
    pub tool_budget_bytes: usize,
    /// Context window in tokens; `None` uses the provider's.
    pub context_window: Option<usize>,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            task: String::new(),
            max_steps: 50,
            max_tokens: 0,
            max_cost_micros: 0,
            max_wall: Duration::from_secs(3600),
            tool_budget_bytes: 16 * 1024,
            context_window: None,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", content = "reason", rename_all = "lowercase")]
pub enum RunOutcome {
    /// The model finished.
    Done,
    /// A model or daemon error ended it.
    Failed(String),
    /// A limit stopped it (steps, tokens, cost, wall clock).
    Stopped(String),
    /// The user interrupted it (Ctrl-C).
    Interrupted,
}

impl RunOutcome {
    /// The run status stored with the daemon.
    pub fn status(&self) -> &'static str {
        match self {
            RunOutcome::Done => "done",
            RunOutcome::Failed(_) => "failed",
            RunOutcome::Stopped(_) => "stopped",
            RunOutcome::Interrupted => "interrupted",
        }
    }

    /// CLI exit code: 0 done, 1 failed, 3 stopped by a limit, 130 interrupted.
    pub fn exit_code(&self) -> i32 {
        match self {
            RunOutcome::Done => 0,
            RunOutcome::Failed(_) => 1,
            RunOutcome::Stopped(_) => 3,
            RunOutcome::Interrupted => 130,
        }
    }
}

/// One executed tool call, for the summary and the demo.
#[derive(Debug, Clone, Serialize)]
pub struct StepRecord {
    pub step: u32,
    pub step_id: String,
    pub tool: String,
    pub call_id: String,
    pub summary: String,
    pub tier: Option<String>,
    pub decision: Option<String>,
    pub refused: bool,
    /// Why the call failed (malformed arguments, unknown tool, an error
    /// from the daemon or the MCP server): the first line of the result the
    /// model got. Absent when the call worked (a non-zero exit code is the
    /// command's result, not an error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub files_changed: Vec<String>,
    pub pre_checkpoint: Option<String>,
    pub post_checkpoint: Option<String>,
}

/// What a run did.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub run_id: String,
    pub session_id: String,
    #[serde(flatten)]
    pub outcome: RunOutcome,
    pub steps: u32,
    pub tool_calls: Vec<StepRecord>,
    pub files_changed: BTreeSet<String>,
    pub refused: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_micros: u64,
    pub degraded: Vec<context::Degradation>,
    /// Warnings about the MCP tools offered to the model (possible tool
    /// poisoning, changed definitions), `<tool>: <warning>`.
    pub tool_warnings: Vec<String>,
    #[serde(skip)]
    pub history: Vec<Message>,
}

/// Progress events (`--json` prints each as a JSON line with the run id).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AgentEvent {
    RunStarted {
        task: String,
        model: String,
        session_id: String,
    },
    ModelCall {
        step: u32,
        input_tokens: u64,
        output_tokens: u64,
        finish_reason: String,
        tool_calls: usize,
        latency_ms: u64,
    },
    ToolStarted {
        step: u32,
        tool: String,
        summary: String,
    },
    ToolFinished(StepRecord),
    Degraded(context::Degradation),
    /// A warning about an MCP tool offered to the model.
    ToolWarning {
        tool: String,
        warning: String,
    },
    Message {
        step: u32,
        text: String,
    },
    RunFinished {
        #[serde(flatten)]
        outcome: RunOutcome,
        steps: u32,
        input_tokens: u64,
        output_tokens: u64,
    },
}

/// Receives progress events.
pub trait Observer: Send {
    fn event(&mut self, run_id: &str, ev: &AgentEvent);
}

/// Everything a run needs.
pub struct Agent<'a> {
    pub client: &'a Client,
    pub provider: &'a dyn Provider,
    pub approver: &'a dyn Approver,
    pub session_id: String,
    pub run_id: String,
    pub config: RunConfig,
}

fn call_summary(c: &provider::ToolCall) -> String {
    let a = &c.arguments;
    let s = match c.name.as_str() {
        "shell" => a["command"].as_str().unwrap_or_default().to_string(),
        "read_file" | "write_file" | "list_dir" => {
            a["path"].as_str().unwrap_or_default().to_string()
        }
        "grep" => format!(
            "{} {}",
            a["pattern"].as_str().unwrap_or_default(),
            a["path"].as_str().unwrap_or_default()
        ),
        "apply_patch" => {
            let files: Vec<&str> = a["patch"]
                .as_str()
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.strip_prefix("+++ "))
                .map(|p| p.strip_prefix("b/").unwrap_or(p))
                .collect();
            files.join(" ")
        }
        _ => a.to_string(),
    };
    let s = s.replace('\n', " ");
    if s.len() > 120 {
        let mut end = 117;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    } else {
        s
    }
}

impl Agent<'_> {
    async fn record(
        &self,
        history: &[Message],
        step: u32,
        report: &RunReport,
        usage: provider::Usage,
        cost: u64,
    ) {
        let state = json!({
            "version": 1,
            "history": history,
            "step": step,
            "plan": null,
            "stop": {
                "max_steps": self.config.max_steps,
                "max_tokens": self.config.max_tokens,
                "max_cost_micros": self.config.max_cost_micros,
                "steps": report.steps,
                "tokens": report.input_tokens + report.output_tokens,
            },
            "degraded": report.degraded,
        });
        let req = pb::RecordRunStateRequest {
            run_id: self.run_id.clone(),
            step_id: format!("{}-{step}", self.run_id),
            state_json: state.to_string(),
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cost_micros: cost,
        };
        if let Err(s) = self.client.runs().record_run_state(req).await {
            tracing::warn!("recording run state: {}", s.message());
        }
    }

    /// Runs the loop from `history` (the system prompt and task for a new
    /// run; the restored history for a resumed one) until a stop condition.
    pub async fn run(&self, mut history: Vec<Message>, obs: &mut dyn Observer) -> RunReport {
        let started = Instant::now();
        let mut report = RunReport {
            run_id: self.run_id.clone(),
            session_id: self.session_id.clone(),
            outcome: RunOutcome::Done,
            steps: 0,
            tool_calls: vec![],
            files_changed: BTreeSet::new(),
            refused: 0,
            input_tokens: 0,
            output_tokens: 0,
            cost_micros: 0,
            degraded: vec![],
            tool_warnings: vec![],
            history: vec![],
        };
        let first_step = history.iter().filter(|m| m.role == Role::Assistant).count() as u32;
        let trace = trace::RunTrace::start(
            self.client,
            &self.run_id,
            &self.session_id,
            self.provider,
            &self.config.task,
            first_step,
        )
        .await;
        let dispatcher = tools::Dispatcher {
            trace: Some(&trace),
            client: self.client,
            session_id: self.session_id.clone(),
            run_id: self.run_id.clone(),
            approver: self.approver,
            budget_bytes: self.config.tool_budget_bytes,
        };
        let mut specs = tools::specs();
        let (mcp, warnings) = tools::mcp_specs(self.client, &self.session_id).await;
        specs.extend(mcp);
        for (tool, warning) in warnings {
            obs.event(
                &self.run_id,
                &AgentEvent::ToolWarning {
                    tool: tool.clone(),
                    warning: warning.clone(),
                },
            );
            report.tool_warnings.push(format!("{tool}: {warning}"));
        }
        let mut step = history.iter().filter(|m| m.role == Role::Assistant).count() as u32;
        let interrupted = tokio::signal::ctrl_c();
        tokio::pin!(interrupted);
        let outcome = loop {
            // Limits are checked before every model call.
            if report.steps >= self.config.max_steps {
                break RunOutcome::Stopped(format!(
                    "max steps ({}) reached",
                    self.config.max_steps
                ));
            }
            if self.config.max_tokens > 0
                && report.input_tokens + report.output_tokens >= self.config.max_tokens
            {
                break RunOutcome::Stopped(format!(
                    "max tokens ({}) reached",
                    self.config.max_tokens
                ));
            }
            if self.config.max_cost_micros > 0 && report.cost_micros >= self.config.max_cost_micros
            {
                break RunOutcome::Stopped("max cost reached".into());
            }
            let Some(left) = self.config.max_wall.checked_sub(started.elapsed()) else {
                break RunOutcome::Stopped(format!(
                    "wall clock ({} s) reached",
                    self.config.max_wall.as_secs()
                ));
            };
            for d in context::fit(
                &mut history,
                self.config
                    .context_window
                    .unwrap_or_else(|| self.provider.context_window()),
            ) {
                obs.event(&self.run_id, &AgentEvent::Degraded(d.clone()));
                report.degraded.push(d);
            }
            step += 1;
            trace.chat_start(step, &report.degraded);
            let t = Instant::now();
            let resp = tokio::select! {
                r = self.provider.complete(&history, &specs) => r,
                _ = &mut interrupted => break RunOutcome::Interrupted,
                _ = tokio::time::sleep(left) => break RunOutcome::Stopped(format!("wall clock ({} s) reached", self.config.max_wall.as_secs())),
            };
            trace.chat_end(&resp);
            let resp = match resp {
                Ok(r) => r,
                Err(e) => break RunOutcome::Failed(model_error(&e)),
            };
            report.steps += 1;
            report.input_tokens += resp.usage.input_tokens;
            report.output_tokens += resp.usage.output_tokens;
            let cost = self.provider.cost_micros(resp.usage);
            report.cost_micros += cost;
            obs.event(
                &self.run_id,
                &AgentEvent::ModelCall {
                    step,
                    input_tokens: resp.usage.input_tokens,
                    output_tokens: resp.usage.output_tokens,
                    finish_reason: resp.finish_reason.clone(),
                    tool_calls: resp.message.tool_calls.len(),
                    latency_ms: t.elapsed().as_millis() as u64,
                },
            );
            if let Some(text) = resp
                .message
                .content
                .as_ref()
                .filter(|t| !t.trim().is_empty())
            {
                obs.event(
                    &self.run_id,
                    &AgentEvent::Message {
                        step,
                        text: text.clone(),
                    },
                );
            }
            let calls = resp.message.tool_calls.clone();
            history.push(resp.message);
            if calls.is_empty() {
                self.record(&history, step, &report, resp.usage, cost).await;
                break RunOutcome::Done;
            }
            // Record the assistant turn before any tool runs, so a crash
            // during the tools leaves a history that `--resume` completes
            // from the step journal (no tool call without a result).
            self.record(&history, step, &report, resp.usage, cost).await;
            let step_id = format!("{}-{step}", self.run_id);
            let mut interrupted_now = false;
            for (i, call) in calls.iter().enumerate() {
                if interrupted_now {
                    history.push(Message::tool_result(
                        &call.id,
                        "interrupted: the run was interrupted before this call ran",
                    ));
                    continue;
                }
                let summary = call_summary(call);
                obs.event(
                    &self.run_id,
                    &AgentEvent::ToolStarted {
                        step,
                        tool: call.name.clone(),
                        summary: summary.clone(),
                    },
                );
                let outcome = tokio::select! {
                    o = dispatcher.dispatch(&step_id, call) => Some(o),
                    _ = &mut interrupted => None,
                };
                let Some(o) = outcome else {
                    interrupted_now = true;
                    history.push(Message::tool_result(&call.id, "interrupted: the run was interrupted while this call ran; its effects are unknown"));
                    for rest in &calls[i + 1..] {
                        history.push(Message::tool_result(
                            &rest.id,
                            "interrupted: the run was interrupted before this call ran",
                        ));
                    }
                    break;
                };
                if o.refused {
                    report.refused += 1;
                }
                report.files_changed.extend(o.files_changed.iter().cloned());
                let rec = StepRecord {
                    step,
                    step_id: step_id.clone(),
                    tool: call.name.clone(),
                    call_id: call.id.clone(),
                    summary,
                    tier: o.tier.clone(),
                    decision: o.decision.clone(),
                    refused: o.refused,
                    error: o.error.clone(),
                    exit_code: o.exit_code,
                    duration_ms: o.duration_ms,
                    files_changed: o.files_changed.clone(),
                    pre_checkpoint: o.pre_checkpoint.clone(),
                    post_checkpoint: o.post_checkpoint.clone(),
                };
                obs.event(&self.run_id, &AgentEvent::ToolFinished(rec.clone()));
                report.tool_calls.push(rec);
                history.push(Message::tool_result(&call.id, o.text));
            }
            self.record(&history, step, &report, provider::Usage::default(), 0)
                .await;
            trace.end_step(self.client, &report).await;
            if interrupted_now {
                break RunOutcome::Interrupted;
            }
        };
        if outcome == RunOutcome::Interrupted {
            // Record what we have so `--resume` continues from here.
            self.record(&history, step, &report, provider::Usage::default(), 0)
                .await;
        }
        let _ = self
            .client
            .runs()
            .finish_run(pb::FinishRunRequest {
                run_id: self.run_id.clone(),
                status: outcome.status().into(),
                reason: match &outcome {
                    RunOutcome::Failed(r) | RunOutcome::Stopped(r) => r.clone(),
                    _ => String::new(),
                },
            })
            .await;
        trace.finish(self.client, &outcome, &report).await;
        obs.event(
            &self.run_id,
            &AgentEvent::RunFinished {
                outcome: outcome.clone(),
                steps: report.steps,
                input_tokens: report.input_tokens,
                output_tokens: report.output_tokens,
            },
        );
        report.outcome = outcome;
        report.history = history;
        report
    }
}

fn model_error(e: &ProviderError) -> String {
    format!("model call failed: {e}")
}

/// Builds the provider named by `--model PROVIDER:NAME`.
pub fn provider_from_spec(spec: &str) -> Result<Box<dyn Provider>, ProviderError> {
    let (kind, name) = spec
        .split_once(':')
        .ok_or_else(|| ProviderError::Config(format!("--model {spec:?}: expected PROVIDER:NAME (openai:gpt-4o, anthropic:claude-..., script:FILE)")))?;
    if name.is_empty() {
        return Err(ProviderError::Config(format!(
            "--model {spec:?}: the model name is empty"
        )));
    }
    Ok(match kind {
        "openai" => Box::new(openai::OpenAi::from_env(name)?),
        "anthropic" => Box::new(anthropic::Anthropic::from_env(name)?),
        "script" => Box::new(script::Script::load(std::path::Path::new(name))?),
        other => {
            return Err(ProviderError::Config(format!(
                "unknown provider {other:?} (openai, anthropic, script)"
            )))
        }
    })
}
