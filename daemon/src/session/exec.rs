//! The pipeline of one shell command (DESIGN.md, "The pipeline of one tool
//! call"): validate -> classify -> decide -> checkpoint (pre) -> spawn in the
//! sandbox -> stream redacted output -> checkpoint (post) -> exit.
//!
//! Events are sent in order on an mpsc channel; the gRPC layer converts them.
//! When the receiver goes away (client disconnected) the command is killed.

use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use super::journal::{self, CallKey};
use super::{Peer, Session, SessionError, SessionManager};
use crate::policy::{Classification, ClassifyContext};
use crate::redact::StreamRedactor;
use crate::sandbox::{Child, Enforcement, Fallback, Profile, SandboxError, SpawnRequest};

/// Longest accepted command, bytes.
pub const MAX_COMMAND_BYTES: usize = 256 * 1024;
/// Longest accepted timeout, ms (24 h).
pub const MAX_TIMEOUT_MS: u64 = 86_400_000;
/// Largest accepted per-stream output cap, bytes (256 MiB).
pub const MAX_OUTPUT_LIMIT_BYTES: u64 = 256 << 20;
/// How long output readers may keep draining after the command's init
/// process ended, ms.
const DRAIN_GRACE_MS: u64 = 2_000;
/// After this long without output, held-back output is flushed through the
/// redactor, ms.
const IDLE_FLUSH_MS: u64 = 150;
/// Size of one read from a command's pipe, bytes.
const CHUNK_BYTES: usize = 32 * 1024;

/// One Exec call, as validated by the server layer.
#[derive(Debug, Clone, Default)]
pub struct ExecParams {
    pub session_id: String,
    pub command: String,
    /// 0 means the policy default.
    pub timeout_ms: u64,
    /// Relative to the workspace root; empty is the root.
    pub cwd: String,
    /// Grant once if the policy asks (`--yes`).
    pub approve: bool,
    pub run_id: String,
    pub step_id: String,
    pub tool_call_id: String,
    /// 0 means the policy default.
    pub output_limit_bytes: u64,
}

/// How the command ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExitSummary {
    /// Exit status; `None` when killed by a signal or never run.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub duration_ms: u64,
    pub timed_out: bool,
    /// The client went away while the command ran, so it was killed: the
    /// call was cut off, not completed, and its journal entry stays
    /// `started` (resume re-runs it only when idempotent).
    pub client_gone: bool,
    /// Set when policy or approval refused the call: the reason, starting
    /// `denied` or `approval required`.
    pub refusal: Option<String>,
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
    pub redactions: u32,
    pub pre_checkpoint_id: Option<String>,
    pub post_checkpoint_id: Option<String>,
    pub approval_request_id: Option<String>,
    /// Landlock enforcement of this execution (`None`: it never ran).
    pub landlock: Option<Enforcement>,
    /// Processes the OOM killer took for the policy's cgroup memory limit.
    pub cgroup_oom_kills: u64,
    /// Forks the policy's cgroup pids limit refused.
    pub cgroup_pids_max_hits: u64,
    /// The first [`JOURNAL_OUTPUT_BYTES`] of each stream as sent (redacted),
    /// for the step journal; not part of the Exit event.
    pub stdout_head: Vec<u8>,
    pub stderr_head: Vec<u8>,
}

/// Events of one Exec call, in stream order.
#[derive(Debug, Clone)]
pub enum ExecEvent {
    Decision {
        classification: Classification,
        profile: Option<Profile>,
    },
    /// The policy asks: a user must answer this request (the call waits).
    ApprovalRequired(Box<crate::approval::ApprovalRecord>),
    /// The request was answered (or expired).
    ApprovalResolved {
        request_id: String,
        state: crate::approval::ApprovalState,
        scope: Option<crate::approval::Scope>,
    },
    Started {
        pid: u32,
        started_at_ms: i64,
        landlock: Enforcement,
        profile: Profile,
    },
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Checkpoint {
        id: String,
        kind: String,
        root_hash: String,
    },
    Exit(ExitSummary),
}

/// Validates an Exec request before anything is classified (schema layer).
///
/// Errors (InvalidArgument): empty or whitespace-only command, NUL byte,
/// longer than [`MAX_COMMAND_BYTES`], timeout over [`MAX_TIMEOUT_MS`], output
/// cap over [`MAX_OUTPUT_LIMIT_BYTES`], a cwd that is absolute or leaves the
/// workspace.
pub fn validate(p: &ExecParams) -> Result<(), SessionError> {
    if p.command.contains('\0') {
        return Err(SessionError::InvalidArgument(
            "command contains a NUL byte".into(),
        ));
    }
    if p.command.trim().is_empty() {
        return Err(SessionError::InvalidArgument("command is empty".into()));
    }
    if p.command.len() > MAX_COMMAND_BYTES {
        return Err(SessionError::InvalidArgument(format!(
            "command is {} bytes, over the {MAX_COMMAND_BYTES}-byte limit",
            p.command.len()
        )));
    }
    if p.timeout_ms > MAX_TIMEOUT_MS {
        return Err(SessionError::InvalidArgument(format!(
            "timeout_ms {} is over the maximum {MAX_TIMEOUT_MS} (24 h)",
            p.timeout_ms
        )));
    }
    if p.output_limit_bytes > MAX_OUTPUT_LIMIT_BYTES {
        return Err(SessionError::InvalidArgument(format!(
            "output_limit_bytes {} is over the maximum {MAX_OUTPUT_LIMIT_BYTES}",
            p.output_limit_bytes
        )));
    }
    relative_cwd(&p.cwd)?;
    Ok(())
}

/// Bash builtins and reserved words (bash(1), "SHELL BUILTIN COMMANDS",
/// "RESERVED WORDS") other than `true` and `false`: a command naming one
/// keeps running through bash, where it means the builtin.
const SHELL_WORDS: &[&str] = &[
    ".",
    ":",
    "[",
    "alias",
    "bg",
    "bind",
    "break",
    "builtin",
    "caller",
    "cd",
    "command",
    "compgen",
    "complete",
    "compopt",
    "continue",
    "declare",
    "dirs",
    "disown",
    "echo",
    "enable",
    "eval",
    "exec",
    "exit",
    "export",
    "fc",
    "fg",
    "getopts",
    "hash",
    "help",
    "history",
    "jobs",
    "kill",
    "let",
    "local",
    "logout",
    "mapfile",
    "popd",
    "printf",
    "pushd",
    "pwd",
    "read",
    "readarray",
    "readonly",
    "return",
    "set",
    "shift",
    "shopt",
    "source",
    "suspend",
    "test",
    "times",
    "trap",
    "type",
    "typeset",
    "ulimit",
    "umask",
    "unalias",
    "unset",
    "wait",
    "if",
    "then",
    "else",
    "elif",
    "fi",
    "case",
    "esac",
    "for",
    "select",
    "while",
    "until",
    "do",
    "done",
    "in",
    "function",
    "time",
    "coproc",
];

/// The argv and environment to run `command` without a shell, when it is a
/// lone simple command of plain words: only ASCII letters, digits and
/// `_ . / , : = + @ % -`, separated by spaces or tabs (nothing bash would
/// expand, quote, redirect or split differently), a first word that is not
/// an assignment, builtin or reserved word, and a program found as an
/// executable regular file on the `PATH` of `env` (or given as a path).
/// The environment gets what `bash -c` would add for such a command:
/// `PWD`, `SHLVL=0` and `_` (the program's path).
pub(crate) fn direct_command(
    command: &str,
    env: &[(String, String)],
    cwd: &Path,
) -> Option<(Vec<String>, Vec<(String, String)>)> {
    fn plain(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b"_./,:=+@%-".contains(&b)
    }
    if !command.bytes().all(|b| plain(b) || b == b' ' || b == b'\t') {
        return None;
    }
    let argv: Vec<String> = command
        .split([' ', '\t'])
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect();
    let a0 = argv.first()?;
    if a0.contains('=') || SHELL_WORDS.contains(&a0.as_str()) {
        return None;
    }
    let executable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    let program = if a0.contains('/') {
        let p = cwd.join(a0);
        executable(&p).then_some(p)?
    } else {
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str())?;
        path.split(':')
            .filter(|d| d.starts_with('/'))
            .map(|d| Path::new(d).join(a0))
            .find(|p| executable(p))?
    };
    let mut env: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| k != "PWD" && k != "SHLVL" && k != "_")
        .cloned()
        .collect();
    env.push(("PWD".into(), cwd.to_string_lossy().into_owned()));
    env.push(("SHLVL".into(), "0".into()));
    env.push(("_".into(), program.to_string_lossy().into_owned()));
    Some((argv, env))
}

/// A command set up in its sandbox, waiting at its gate, with the read
/// ends of its stdout and stderr pipes; `child` is the sandbox's refusal
/// instead when it cannot give what the policy asks.
struct Spawned {
    child: Result<Child, String>,
    out_r: OwnedFd,
    err_r: OwnedFd,
}

/// Why a step's preparation (pre-checkpoint, `exec_start`, journal) ended
/// it before the command ran.
enum Prepared {
    /// The pre-checkpoint failed: the step is refused.
    PreCheckpoint(SessionError),
    Failed(SessionError),
}

fn relative_cwd(cwd: &str) -> Result<PathBuf, SessionError> {
    if cwd.contains('\0') {
        return Err(SessionError::InvalidArgument(
            "cwd contains a NUL byte".into(),
        ));
    }
    let p = Path::new(cwd);
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => {
                return Err(SessionError::InvalidArgument(format!(
                    "cwd {cwd:?} must be relative to the workspace and stay inside it"
                )))
            }
        }
    }
    Ok(out)
}

/// The clean environment every command starts from: nothing of the daemon's
/// own environment leaks but `PATH` and `HOME` (DESIGN.md; issue 2).
pub fn base_env() -> Vec<(String, String)> {
    let path = std::env::var("PATH")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    let home = std::env::var("HOME")
        .ok()
        .filter(|h| h.starts_with('/'))
        .unwrap_or_else(|| "/".into());
    vec![
        ("PATH".into(), path),
        ("HOME".into(), home),
        ("LANG".into(), "C.UTF-8".into()),
        ("TERM".into(), "dumb".into()),
        ("PAGER".into(), "cat".into()),
        ("GIT_PAGER".into(), "cat".into()),
    ]
}

impl SessionManager {
    /// Runs one Exec call to completion, sending its events on `tx`. The call
    /// always ends with an [`ExecEvent::Exit`] unless it fails before
    /// classification (then the error is returned and nothing was sent) or
    /// the receiver went away.
    pub async fn exec(
        self: &Arc<Self>,
        peer: Peer,
        p: ExecParams,
        tx: mpsc::Sender<ExecEvent>,
    ) -> Result<(), SessionError> {
        let mut ph = super::phases::Phases::start();
        validate(&p)?;
        let session = self.open_session_for(&p.session_id, peer)?;
        let cwd_rel = relative_cwd(&p.cwd)?;
        let cwd = resolve_cwd(&session.workspace, &cwd_rel)?;
        let settings = &session.policy.file.exec;
        let timeout_ms = if p.timeout_ms == 0 {
            settings.timeout_ms
        } else {
            p.timeout_ms
        };
        let limit = if p.output_limit_bytes == 0 {
            settings.output_limit_bytes
        } else {
            p.output_limit_bytes
        };

        // 1. Classify and decide (policy).
        let ctx = ClassifyContext {
            workspace: Some(session.workspace.clone()),
            cwd: Some(cwd_rel.clone()),
        };
        let classification = session.policy.classify(&p.command, &ctx);
        let profile = Profile::for_tier(classification.tier).unwrap_or(Profile::Write);
        ph.mark("classify");
        // The step journal: `planned` before anything runs; a tool call id
        // already journaled in this run is refused (never executed twice).
        // The guard keeps the call in flight until this function returns
        // (after its final journal state is written).
        let call = CallKey::of(&p.run_id, &p.tool_call_id);
        let _in_flight = match &call {
            Some(k) => {
                let decl = journal::declare_exec(
                    classification.tier,
                    session.policy.is_idempotent(&p.command, &ctx),
                );
                let args = serde_json::json!({"command": p.command, "cwd": p.cwd, "timeout_ms": p.timeout_ms});
                Some(self.journal_plan(
                    k,
                    &session.id,
                    &p.step_id,
                    "shell",
                    &args.to_string(),
                    classification.tier.as_str(),
                    &decl,
                )?)
            }
            None => None,
        };
        ph.mark("journal_plan");
        let _ = tx
            .send(ExecEvent::Decision {
                classification: classification.clone(),
                profile: Some(profile),
            })
            .await;

        // 2. Approval (policy + user layers; recorded in the audit log).
        let approval_id = match self
            .gate_exec(
                peer,
                &session,
                &p,
                &cwd_rel.to_string_lossy(),
                &classification,
                &tx,
            )
            .await?
        {
            super::approve::ExecGate::Run { approval_id } => approval_id,
            super::approve::ExecGate::Refuse(exit) => {
                return self.end_refused(call.as_ref(), exit, false, &tx).await;
            }
            super::approve::ExecGate::Unanswered(exit) => {
                // Nobody answered before the caller went away: nothing ran
                // and nothing was decided, so the call stays planned.
                return self.end_refused(call.as_ref(), exit, true, &tx).await;
            }
        };

        ph.mark("gate");
        // One writer per workspace from the pre-checkpoint until the
        // nested-git quarantine: two commands at once could otherwise hide
        // a planted hook from each other's before/after scans, and each
        // one's checkpoints would carry the other's changes. (A safe-read
        // command cannot change the workspace.)
        let writes = profile != Profile::SafeRead;
        let step_lock = writes.then(|| self.checkpoints().step_lock(&session.workspace));
        let _one_writer = match &step_lock {
            Some(l) => Some(l.lock().await),
            None => None,
        };
        let args_json = serde_json::json!({"command": p.command, "cwd": p.cwd}).to_string();
        let meta = crate::checkpoint::CheckpointMeta {
            session_id: session.id.clone(),
            run_id: p.run_id.clone(),
            step_id: p.step_id.clone(),
            tool_call_id: p.tool_call_id.clone(),
            tool: "exec".into(),
            arguments_json: self.redactor(&session).redact(&args_json).0,
            tier: Some(classification.tier),
            decision: Some(classification.decision),
            side_effects: super::side_effects_of(classification.tier, false),
            approval_ids: approval_id.iter().cloned().collect(),
            ..Default::default()
        };
        // 3. The sandbox is set up while the step is prepared: the command
        // waits, confined, at its gate (before execve) until its
        // pre-checkpoint is taken and `exec_start` is on disk.
        let spawn = self.start_confined(&session, &p.command, cwd, profile);
        let prepare = async {
            // Nested git repositories' hooks and config are fingerprinted
            // before the command (by the pre-checkpoint's walk) so that what
            // it plants there is quarantined after it.
            // Checkpoint (pre) of the workspace. A step whose pre-checkpoint
            // fails never runs (fail closed: full disk, unreadable
            // workspace).
            let (pre, pre_scan) = self
                .checkpoint_step_scanning(&session, None, &meta, writes)
                .await
                .map_err(Prepared::PreCheckpoint)?;
            ph.mark("pre_checkpoint");
            if let Some(cp) = &pre {
                let _ = tx
                    .send(ExecEvent::Checkpoint {
                        id: cp.id.clone(),
                        kind: "pre".into(),
                        root_hash: cp.root_hash.clone(),
                    })
                    .await;
            }
            // 4. `exec_start`, durable before the command runs.
            self.audit_exec(
                peer,
                &session,
                &p,
                crate::approval::actions::EXEC_START,
                serde_json::json!({
                    "command": p.command,
                    "cwd": cwd_rel.to_string_lossy(),
                    "tier": classification.tier,
                    "profile": profile.as_str(),
                    "approval_id": approval_id,
                    "timeout_ms": timeout_ms,
                }),
            )
            .map_err(Prepared::Failed)?;
            if let Some(k) = &call {
                self.journal_start(k, pre.as_ref().map(|c| c.id.as_str()))
                    .map_err(Prepared::Failed)?;
            }
            // Protected paths that do not exist stay absent: what the
            // command creates there is removed after it (the sandbox can
            // only make existing paths read-only without creating them in
            // the repository).
            let absent = if writes {
                absent_protected(
                    &session.workspace,
                    &session.policy.file.sandbox.protected_in(&session.workspace),
                )
            } else {
                Vec::new()
            };
            let nested_before = match (writes, pre_scan) {
                (false, _) => None,
                (true, Some(s)) => Some(s),
                // Checkpoints disabled: a scan of its own.
                (true, None) => Some(super::nested_git::baseline(session.workspace.clone()).await),
            };
            ph.mark("exec_start");
            Ok((pre, absent, nested_before))
        };
        let (spawned, prepared) = tokio::join!(spawn, prepare);
        // A command that is not let through its gate ends unexecuted when
        // `spawned` is dropped.
        let (pre, absent, nested_before) = match prepared {
            Ok(p) => p,
            Err(Prepared::PreCheckpoint(e)) => {
                drop(spawned);
                let exit = ExitSummary {
                    refusal: Some(format!(
                        "refused: the pre-checkpoint failed, so the command did not run: {e}"
                    )),
                    approval_request_id: approval_id,
                    ..Default::default()
                };
                return self.end_refused(call.as_ref(), exit, false, &tx).await;
            }
            Err(Prepared::Failed(e)) => {
                drop(spawned);
                return Err(e);
            }
        };
        ph.mark("sandbox");
        let result = self
            .run_confined(&session, spawned, profile, timeout_ms, limit, &tx)
            .await;
        ph.mark("run");
        // 5. Checkpoint (post): the step's change set. A safe-read command ran
        // on a read-only workspace and needs none.
        let (post, post_scan) = match &pre {
            Some(pre) if writes => {
                let mut m = meta.clone();
                m.result_json = result.as_ref().ok().map(|s| journal_result(s).to_string());
                match self
                    .checkpoint_step_scanning(&session, Some(&pre.id), &m, true)
                    .await
                {
                    Ok(cp) => cp,
                    Err(e) => {
                        tracing::error!(session = %session.id, error = %e, "post-checkpoint failed");
                        (None, None)
                    }
                }
            }
            _ => (None, None),
        };
        let (quarantined, nested_note) = match nested_before {
            Some(before) => {
                self.quarantine_nested_git(&session, before, post_scan)
                    .await
            }
            None => (Vec::new(), None),
        };
        let end = match &result {
            Ok(s) => serde_json::json!({
                "code": s.code,
                "signal": s.signal,
                "duration_ms": s.duration_ms,
                "timed_out": s.timed_out,
                "client_gone": s.client_gone,
                "stdout_dropped_bytes": s.stdout_dropped,
                "stderr_dropped_bytes": s.stderr_dropped,
                "redactions": s.redactions,
                "landlock": s.landlock.map(|l| l.as_str()),
                "cgroup_oom_kills": s.cgroup_oom_kills,
                "cgroup_pids_max_hits": s.cgroup_pids_max_hits,
                "refusal": s.refusal,
                "nested_git_quarantined": quarantined,
            }),
            Err(e) => serde_json::json!({"error": e.to_string()}),
        };
        ph.mark("post");
        let end = self.audit_exec(peer, &session, &p, crate::approval::actions::EXEC_END, end);
        ph.mark("exec_end");
        let removed = remove_created(&session.workspace, &absent);
        if !removed.is_empty() {
            tracing::warn!(session = %session.id, ?removed, "removed protected paths the command created");
            let _ = tx
                .send(ExecEvent::Stderr(
                    format!(
                        "\n[warden: removed {} that the command created: protected paths stay absent]\n",
                        removed.join(", ")
                    )
                    .into_bytes(),
                ))
                .await;
        }
        if let Some(note) = nested_note {
            let _ = tx.send(ExecEvent::Stderr(note.into_bytes())).await;
        }
        match (&call, &result) {
            // Cut off by the client's departure: it never completed, so the
            // entry stays `started` and a resume decides (re-run only when
            // idempotent), instead of replaying "killed by signal 9".
            (Some(_), Ok(s)) if s.client_gone => {}
            (Some(k), _) => {
                let (ok, result) = match &result {
                    Ok(s) => (true, journal_result(s)),
                    Err(e) => (false, serde_json::json!({"error": e.to_string()})),
                };
                self.journal_finish(k, ok, &result, post.as_ref().map(|c| c.id.as_str()))?;
            }
            (None, _) => {}
        }
        let mut summary = match result.and_then(|s| end.map(|_| s)) {
            Ok(s) => s,
            Err(e) => {
                // No answer to send: `exec_end` is made durable now.
                self.sync_audit_later();
                return Err(e);
            }
        };
        summary.approval_request_id = approval_id;
        if let Some(cp) = &post {
            let _ = tx
                .send(ExecEvent::Checkpoint {
                    id: cp.id.clone(),
                    kind: "post".into(),
                    root_hash: cp.root_hash.clone(),
                })
                .await;
        }
        summary.pre_checkpoint_id = pre.map(|c| c.id);
        summary.post_checkpoint_id = post.map(|c| c.id);
        let _ = tx.send(ExecEvent::Exit(summary)).await;
        // The answer is on its way: now make `exec_end` (and whatever else
        // this call committed without waiting) durable, off the caller's
        // path.
        self.sync_audit_later();
        Ok(())
    }

    /// Syncs the audit log (WAL and head file) on a blocking thread; a
    /// failure is logged (the records are committed; only their durability
    /// against a power loss is in question).
    fn sync_audit_later(&self) {
        let audit = self.audit().clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = audit.sync() {
                tracing::error!(error = %e, "syncing the audit log");
            }
        });
    }

    /// Ends a call refused before anything ran: the journal records it
    /// `failed` (or leaves it `planned` when only an approval went
    /// unanswered), then the Exit event goes out.
    async fn end_refused(
        &self,
        call: Option<&CallKey>,
        exit: ExitSummary,
        unanswered: bool,
        tx: &mpsc::Sender<ExecEvent>,
    ) -> Result<(), SessionError> {
        if let Some(k) = call {
            let result = serde_json::json!({"refused": exit.refusal});
            if unanswered {
                self.journal_unanswered(k, &result)?;
            } else {
                self.journal_finish(k, false, &result, None)?;
            }
        }
        let _ = tx.send(ExecEvent::Exit(exit)).await;
        Ok(())
    }

    /// Sets `command` up in its sandbox, stopped at its gate
    /// ([`crate::sandbox::Spawner::spawn_gated`]). A lone simple command of
    /// plain words ([`direct_command`]) is executed without a shell, with
    /// `bash -c` as its fallback when it cannot be executed that way (bash
    /// then reports or runs it, as it would have).
    async fn start_confined(
        &self,
        session: &Session,
        command: &str,
        cwd: PathBuf,
        profile: Profile,
    ) -> Result<Spawned, SessionError> {
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        // Install-tier commands write package caches into the session's own
        // cache dir (kept across its commands, removed when it closes).
        let cache_dir = if profile == Profile::Install {
            Some(session_cache_dir(&session.id).map_err(|e| {
                SessionError::Internal(format!("the session's package-cache dir: {e}"))
            })?)
        } else {
            None
        };
        let mut req = SpawnRequest {
            // `--`: a command starting with `-` is a command, not an option.
            argv: vec!["bash".into(), "-c".into(), "--".into(), command.to_string()],
            env: base_env(),
            workspace: session.workspace.clone(),
            cwd,
            profile,
            settings: session.policy.file.sandbox.clone(),
            cache_dir,
            fallback: None,
        };
        if let Some((argv, env)) = direct_command(command, &req.env, &req.cwd) {
            req.fallback = Some(Fallback {
                argv: std::mem::replace(&mut req.argv, argv),
                env: std::mem::replace(&mut req.env, env),
            });
        }
        let child = match self.spawner().spawn_gated(req, out_w, err_w).await {
            Ok(c) => Ok(c),
            // The sandbox cannot give what the policy asks (full Landlock,
            // cgroup limits, an idmappable workspace): refused, never run
            // weaker.
            Err(SandboxError::Refused(m)) => Err(format!("refused by the sandbox: {m}")),
            Err(e) => {
                return Err(SessionError::Internal(format!(
                    "could not start the command: {e}"
                )))
            }
        };
        Ok(Spawned {
            child,
            out_r,
            err_r,
        })
    }

    /// Lets the command of `spawned` run and follows it to its end: output
    /// streamed (redacted, capped at `limit` bytes per stream), killed at
    /// `timeout_ms` or when the caller goes away.
    async fn run_confined(
        self: &Arc<Self>,
        session: &Session,
        spawned: Result<Spawned, SessionError>,
        profile: Profile,
        timeout_ms: u64,
        limit: u64,
        tx: &mpsc::Sender<ExecEvent>,
    ) -> Result<ExitSummary, SessionError> {
        let Spawned {
            child,
            out_r,
            err_r,
        } = spawned?;
        let mut child = match child {
            Ok(c) => c,
            Err(refusal) => {
                return Ok(ExitSummary {
                    refusal: Some(refusal),
                    ..Default::default()
                })
            }
        };
        // Registered (so shutdown refuses or kills it) and its caller still
        // there before the gate opens: otherwise it never executes.
        let key = match self.register_running(child.kill_handle()) {
            Ok(k) => k,
            Err(e) => {
                child.kill();
                return Err(e);
            }
        };
        if tx.is_closed() {
            self.unregister_running(key);
            child.kill();
            return Ok(ExitSummary {
                client_gone: true,
                refusal: Some("the client went away before the command started".into()),
                ..Default::default()
            });
        }
        let started = Instant::now();
        if let Err(e) = child.open_gate() {
            self.unregister_running(key);
            return Err(SessionError::Internal(format!(
                "could not start the command: {e}"
            )));
        }
        let _ = tx
            .send(ExecEvent::Started {
                pid: child.pid,
                started_at_ms: crate::now_ms(),
                landlock: child.landlock,
                profile,
            })
            .await;

        let redactor = self.redactor(session);
        let out_task = tokio::spawn(pump(
            out_r,
            limit,
            StreamRedactor::new(redactor.clone()),
            tx.clone(),
            ExecEvent::Stdout,
        ));
        let err_task = tokio::spawn(pump(
            err_r,
            limit,
            StreamRedactor::new(redactor),
            tx.clone(),
            ExecEvent::Stderr,
        ));

        let mut timed_out = false;
        let mut client_gone = false;
        let exit = tokio::select! {
            r = child.wait() => r,
            _ = tokio::time::sleep(Duration::from_millis(timeout_ms)) => {
                timed_out = true;
                child.kill();
                child.wait().await
            }
            _ = tx.closed() => {
                client_gone = true;
                child.kill();
                child.wait().await
            }
        };
        self.unregister_running(key);
        let exit =
            exit.map_err(|e| SessionError::Internal(format!("waiting for the command: {e}")))?;
        // Every process of the command is gone with its pid namespace; the
        // readers see EOF. Bound the wait anyway so nothing can hang the call.
        let (out, err) = drain(out_task, err_task).await;
        let limits = &session.policy.file.sandbox.limits;
        if !timed_out
            && !client_gone
            && exit.signal == Some(libc::SIGKILL)
            && self.shutting_down.load(std::sync::atomic::Ordering::SeqCst)
        {
            // Killed by the daemon's shutdown, not by itself or the OOM
            // killer: say so (an embedded daemon stops with the command
            // that started it).
            let _ = tx
                .send(ExecEvent::Stderr(
                    b"\n[warden: the daemon shut down (SIGTERM, or the command that started this embedded daemon ended) and killed the command]\n".to_vec(),
                ))
                .await;
        }
        if exit.cgroup_oom_kills > 0 {
            let _ = tx
                .send(ExecEvent::Stderr(
                    format!(
                        "\n[warden: the cgroup memory limit ({} bytes) was reached: the out-of-memory killer ended {} process(es) of the command]\n",
                        limits.cgroup_memory_max_bytes, exit.cgroup_oom_kills
                    )
                    .into_bytes(),
                ))
                .await;
        }
        if exit.cgroup_pids_max_hits > 0 {
            let _ = tx
                .send(ExecEvent::Stderr(
                    format!(
                        "\n[warden: the cgroup process limit ({}) refused {} fork(s)]\n",
                        limits.cgroup_pids_max, exit.cgroup_pids_max_hits
                    )
                    .into_bytes(),
                ))
                .await;
        }
        Ok(ExitSummary {
            code: exit.code,
            signal: exit.signal,
            duration_ms: started.elapsed().as_millis() as u64,
            timed_out,
            client_gone,
            stdout_dropped: out.dropped,
            stderr_dropped: err.dropped,
            redactions: out.redactions + err.redactions,
            stdout_head: out.head,
            stderr_head: err.head,
            landlock: Some(child.landlock),
            cgroup_oom_kills: exit.cgroup_oom_kills,
            cgroup_pids_max_hits: exit.cgroup_pids_max_hits,
            ..Default::default()
        })
    }
}

impl SessionManager {
    /// Quarantines the nested git control paths a command created or
    /// changed ([`super::nested_git`]), comparing `before` with `after` (the
    /// post-checkpoint's walk; `None`: scanned again here).
    /// Returns what was quarantined and the note for the command's stderr.
    async fn quarantine_nested_git(
        &self,
        session: &Session,
        before: super::nested_git::Scan,
        after: Option<super::nested_git::Scan>,
    ) -> (Vec<String>, Option<String>) {
        let c = super::nested_git::check_after_with(session.workspace.clone(), before, after).await;
        let note = c.note("the command").map(|n| {
            n.lines()
                .map(|l| format!("\n[warden: {l}]\n"))
                .collect::<String>()
        });
        (c.done, note)
    }
}

/// Where the per-session package-cache dirs live: `$XDG_CACHE_HOME/warden/
/// sessions`, else `$HOME/.cache/warden/sessions`, else
/// `$TMPDIR/warden-cache-<uid>/sessions`. Outside the state dir, which no
/// sandbox may see.
pub fn session_caches_root() -> PathBuf {
    let abs = |k: &str| {
        std::env::var_os(k)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute() && p != Path::new("/"))
    };
    if let Some(x) = abs("XDG_CACHE_HOME") {
        return x.join("warden/sessions");
    }
    if let Some(h) = abs("HOME") {
        return h.join(".cache/warden/sessions");
    }
    std::env::temp_dir()
        .join(format!("warden-cache-{}", nix::unistd::geteuid()))
        .join("sessions")
}

fn clean_session_id(id: &str) -> std::io::Result<&str> {
    if id.is_empty()
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("session id {id:?} is not a plain name"),
        ));
    }
    Ok(id)
}

/// The package-cache dir of session `id` (created, mode 0700, when absent).
/// Errors: I/O, or an id that is not a plain name.
pub fn session_cache_dir(id: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let root = session_caches_root();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&root)?;
    let d = root.join(clean_session_id(id)?);
    match std::fs::DirBuilder::new().mode(0o700).create(&d) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    if !std::fs::symlink_metadata(&d)?.is_dir() {
        return Err(std::io::Error::other(format!(
            "{} is not a directory",
            d.display()
        )));
    }
    Ok(d)
}

/// Removes the package-cache dir of session `id`, if any (session close).
pub fn remove_session_cache(id: &str) {
    if let Ok(id) = clean_session_id(id) {
        let d = session_caches_root().join(id);
        if let Err(e) = std::fs::remove_dir_all(&d) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %d.display(), "could not remove a session's package cache: {e}");
            }
        }
    }
}

/// The protected paths (relative) that do not exist in the workspace now.
pub(crate) fn absent_protected(root: &Path, protected: &[PathBuf]) -> Vec<PathBuf> {
    let Ok(dir) = cap_std::fs::Dir::open_ambient_dir(root, cap_std::ambient_authority()) else {
        return Vec::new();
    };
    protected
        .iter()
        .filter(|p| matches!(dir.symlink_metadata(p), Err(e) if e.kind() == std::io::ErrorKind::NotFound))
        .cloned()
        .collect()
}

/// Removes those of `absent` that exist now, through a capability on the
/// workspace root (never following a symlink out of it); returns what was
/// removed.
pub(crate) fn remove_created(root: &Path, absent: &[PathBuf]) -> Vec<String> {
    if absent.is_empty() {
        return Vec::new();
    }
    let dir = match cap_std::fs::Dir::open_ambient_dir(root, cap_std::ambient_authority()) {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(root = %root.display(), "cannot check protected paths after the command: {e}");
            return Vec::new();
        }
    };
    let mut removed = Vec::new();
    for p in absent {
        let Ok(meta) = dir.symlink_metadata(p) else {
            continue;
        };
        let r = if meta.is_dir() {
            dir.remove_dir_all(p)
        } else {
            dir.remove_file(p)
        };
        match r {
            Ok(()) => removed.push(p.display().to_string()),
            Err(e) => {
                tracing::error!(path = %p.display(), "could not remove a created protected path: {e}")
            }
        }
    }
    removed
}

/// The result of an exec as kept in the step journal: how it ended and the
/// first [`JOURNAL_OUTPUT_BYTES`] of each (redacted) stream.
pub fn journal_result(s: &ExitSummary) -> serde_json::Value {
    serde_json::json!({
        "code": s.code,
        "signal": s.signal,
        "timed_out": s.timed_out,
        "duration_ms": s.duration_ms,
        "stdout": String::from_utf8_lossy(&s.stdout_head),
        "stderr": String::from_utf8_lossy(&s.stderr_head),
        "stdout_dropped_bytes": s.stdout_dropped,
        "stderr_dropped_bytes": s.stderr_dropped,
    })
}

fn resolve_cwd(root: &Path, rel: &Path) -> Result<PathBuf, SessionError> {
    let joined = root.join(rel);
    let canon = std::fs::canonicalize(&joined)
        .map_err(|e| SessionError::InvalidArgument(format!("cwd {}: {e}", rel.display())))?;
    if !canon.starts_with(root) {
        return Err(SessionError::PermissionDenied(format!(
            "cwd {} leaves the workspace",
            rel.display()
        )));
    }
    if !canon.is_dir() {
        return Err(SessionError::InvalidArgument(format!(
            "cwd {} is not a directory",
            rel.display()
        )));
    }
    Ok(canon)
}

fn pipe() -> Result<(OwnedFd, OwnedFd), SessionError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| SessionError::Internal(format!("pipe2: {e}")))
}

#[derive(Debug, Default, Clone)]
struct PumpResult {
    dropped: u64,
    redactions: u32,
    /// The first [`JOURNAL_OUTPUT_BYTES`] of what was sent (redacted), kept
    /// for the step journal.
    head: Vec<u8>,
}

/// Bytes of each output stream kept in the step journal's result.
pub const JOURNAL_OUTPUT_BYTES: usize = 16 * 1024;

fn keep_head(head: &mut Vec<u8>, bytes: &[u8]) {
    let room = JOURNAL_OUTPUT_BYTES.saturating_sub(head.len());
    head.extend_from_slice(&bytes[..bytes.len().min(room)]);
}

/// Reads one output stream, enforcing the cap (counted on raw bytes) and
/// redacting before anything is sent. Past the cap, bytes are read and
/// dropped (so the command never blocks on a full pipe) and counted; a
/// truncation marker with the count ends the stream.
async fn pump(
    fd: OwnedFd,
    limit: u64,
    mut redactor: StreamRedactor,
    tx: mpsc::Sender<ExecEvent>,
    wrap: fn(Vec<u8>) -> ExecEvent,
) -> PumpResult {
    let mut res = PumpResult::default();
    let Ok(mut rx) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) else {
        return res;
    };
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut kept: u64 = 0;
    loop {
        let n = match tokio::time::timeout(Duration::from_millis(IDLE_FLUSH_MS), rx.read(&mut buf))
            .await
        {
            // The command has been quiet: let what the redactor holds back
            // out, so interactive output streams promptly.
            Err(_) => {
                if redactor.pending() > 0 {
                    let out = redactor.flush();
                    keep_head(&mut res.head, &out);
                    if !out.is_empty() && tx.send(wrap(out)).await.is_err() {
                        return res;
                    }
                }
                continue;
            }
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => n,
        };
        let room = limit.saturating_sub(kept) as usize;
        let take = n.min(room);
        kept += take as u64;
        res.dropped += (n - take) as u64;
        if take > 0 {
            let out = redactor.push(&buf[..take]);
            keep_head(&mut res.head, &out);
            if !out.is_empty() && tx.send(wrap(out)).await.is_err() {
                return res;
            }
        }
    }
    let mut tail = redactor.finish();
    if res.dropped > 0 {
        tail.extend_from_slice(
            format!(
                "\n[warden: output truncated at {limit} bytes; {} bytes dropped]\n",
                res.dropped
            )
            .as_bytes(),
        );
    }
    keep_head(&mut res.head, &tail);
    if !tail.is_empty() {
        let _ = tx.send(wrap(tail)).await;
    }
    res.redactions = redactor.redactions();
    res
}

async fn drain(
    out: tokio::task::JoinHandle<PumpResult>,
    err: tokio::task::JoinHandle<PumpResult>,
) -> (PumpResult, PumpResult) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(DRAIN_GRACE_MS);
    let mut results = [PumpResult::default(), PumpResult::default()];
    for (i, mut h) in [out, err].into_iter().enumerate() {
        match tokio::time::timeout_at(deadline, &mut h).await {
            Ok(Ok(r)) => results[i] = r,
            _ => h.abort(),
        }
    }
    let [a, b] = results;
    (a, b)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_plain_simple_commands_run_without_a_shell() {
        let env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
        let cwd = Path::new("/tmp");
        let (argv, env2) = direct_command("ls  -la\t/tmp", &env, cwd).unwrap();
        assert_eq!(argv, ["ls", "-la", "/tmp"]);
        assert!(env2.contains(&("PWD".into(), "/tmp".into())));
        assert!(env2.contains(&("SHLVL".into(), "0".into())));
        assert!(env2.iter().any(|(k, v)| k == "_" && v.ends_with("/ls")));
        assert!(direct_command("true", &env, cwd).is_some());
        for shell in [
            "echo hi",           // builtin
            "cd /",              // builtin
            "ls *",              // glob
            "ls ~",              // tilde
            "ls $HOME",          // expansion
            "ls 'a b'",          // quoting
            "ls a\\ b",          // escape
            "ls > x",            // redirection
            "ls; id",            // list
            "ls | cat",          // pipe
            "ls && id",          // and-list
            "X=1 ls",            // assignment
            "ls {a,b}",          // brace expansion
            "ls #c",             // comment
            "ls\nid",            // newline
            "(ls)",              // subshell
            "time ls",           // reserved word
            "no-such-program-x", // not on PATH: bash reports it
            "ls `id`",           // command substitution
        ] {
            assert!(direct_command(shell, &env, cwd).is_none(), "{shell}");
        }
    }

    use super::*;

    fn params(cmd: &str) -> ExecParams {
        ExecParams {
            session_id: "s".into(),
            command: cmd.into(),
            ..Default::default()
        }
    }

    #[test]
    fn bad_requests_are_invalid_arguments() {
        for (p, needle) in [
            (params(""), "empty"),
            (params("   \n"), "empty"),
            (params("echo a\0b"), "NUL"),
            (
                ExecParams {
                    timeout_ms: MAX_TIMEOUT_MS + 1,
                    ..params("true")
                },
                "timeout",
            ),
            (
                ExecParams {
                    cwd: "../x".into(),
                    ..params("true")
                },
                "cwd",
            ),
            (
                ExecParams {
                    cwd: "/etc".into(),
                    ..params("true")
                },
                "cwd",
            ),
            (params(&"x".repeat(MAX_COMMAND_BYTES + 1)), "limit"),
        ] {
            match validate(&p) {
                Err(SessionError::InvalidArgument(m)) => assert!(m.contains(needle), "{m}"),
                other => panic!("{p:?}: {other:?}"),
            }
        }
        assert!(validate(&ExecParams {
            cwd: "./src/.".into(),
            ..params("true")
        })
        .is_ok());
    }

    #[test]
    fn base_env_is_clean() {
        let keys: Vec<_> = base_env().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["PATH", "HOME", "LANG", "TERM", "PAGER", "GIT_PAGER"]);
    }
}
