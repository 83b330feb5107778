//! `warden.v1.Files`: the confined file tools ([`crate::workspace`]) over
//! gRPC. Reads and grep results are redacted before they leave; writes and
//! patches are write-tier calls decided by the session's policy and the
//! user's approvals like exec (`SessionManager::gate_file_tool`: the preview
//! carries the diff; ask without `approve` raises a request and refuses).

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::{peer, status};
use crate::proto::v1::{self as pb, files_server::Files};
use crate::redact::Redactor;
use crate::session::journal::{declare_file_tool, CallKey, InFlight};
use crate::session::{FileToolCall, Session, SessionManager};
use crate::workspace::{FileChange, Limits, Workspace, WorkspaceError};

/// Largest Files request accepted, bytes: a whole file up to the file
/// tools' cap (`workspace::Limits::file_bytes`, 16 MiB) plus the envelope.
pub const MAX_REQUEST_BYTES: usize = (16 << 20) + (64 << 10);

pub struct FilesService {
    mgr: Arc<SessionManager>,
}

impl FilesService {
    pub fn new(mgr: Arc<SessionManager>) -> Self {
        FilesService { mgr }
    }
}

/// Bytes of context scanned on each side of a read window.
const REDACT_MARGIN: u64 = 4096;

/// Redacts `window` as it appears between `before` and `after`: every
/// finding of the whole text that overlaps the window is replaced whole by
/// its marker (even the part outside the window); a scanner failure
/// withholds the window.
fn redact_window(r: &Redactor, before: &[u8], window: &[u8], after: &[u8]) -> (String, u32) {
    let mut text = Vec::with_capacity(before.len() + window.len() + after.len());
    text.extend_from_slice(before);
    text.extend_from_slice(window);
    text.extend_from_slice(after);
    let (ws, we) = (before.len(), before.len() + window.len());
    let Ok(mut findings) = r.find(&text) else {
        let (c, f) = r.redact_bytes(window);
        return (String::from_utf8_lossy(&c).into_owned(), f.len() as u32);
    };
    findings.sort_by_key(|f| (f.start, f.end));
    let (mut out, mut pos, mut n) = (Vec::with_capacity(window.len()), ws, 0u32);
    for f in findings {
        if f.end <= ws || f.start >= we || f.end <= pos {
            continue;
        }
        if f.start > pos {
            out.extend_from_slice(&text[pos..f.start]);
        }
        out.extend_from_slice(r.marker(&f.rule, &text[f.start..f.end]).as_bytes());
        n += 1;
        pos = f.end;
    }
    if pos < we {
        out.extend_from_slice(&text[pos..we]);
    }
    (String::from_utf8_lossy(&out).into_owned(), n)
}

/// A secret file the policy refuses to show -> PERMISSION_DENIED.
fn redact_status(e: crate::redact::RedactError) -> Status {
    super::redacted(
        match e {
            crate::redact::RedactError::SecretFile { .. } => {
                Status::permission_denied(e.to_string())
            }
            e => Status::internal(e.to_string()),
        },
        None,
    )
}

/// Workspace error -> gRPC status (never UNKNOWN). FailedPrecondition keeps
/// the current hash in its message.
pub(crate) fn ws_status(e: WorkspaceError) -> Status {
    let msg = e.to_string();
    let st = match e {
        WorkspaceError::NotFound(_) => Status::not_found(msg),
        WorkspaceError::PermissionDenied { .. } => Status::permission_denied(msg),
        WorkspaceError::InvalidArgument(_) => Status::invalid_argument(msg),
        WorkspaceError::FailedPrecondition { .. } => Status::failed_precondition(msg),
        WorkspaceError::TooLarge(_) => Status::resource_exhausted(msg),
        WorkspaceError::Io { .. } => Status::internal(msg),
    };
    super::redacted(st, None)
}

fn change_to_proto(c: &FileChange) -> pb::FileChange {
    pb::FileChange {
        path: c.path.clone(),
        kind: c.kind.as_str().into(),
        old_hash: c.old_hash.clone(),
        new_hash: c.new_hash.clone(),
        from_path: c.from_path.clone().unwrap_or_default(),
        old_mode: c.old_mode.unwrap_or(0),
        new_mode: c.new_mode.unwrap_or(0),
        ..Default::default()
    }
}

/// The protected paths of a session (the sandbox's list: defaults, the
/// `[sandbox]` section's `protected_paths`, the repository's
/// `core.hooksPath`; workspace-relative).
fn protected_of(session: &Session) -> Vec<String> {
    session
        .policy
        .file
        .sandbox
        .protected_in(&session.workspace)
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

impl FilesService {
    /// Loads the caller's open session and runs `f` on its workspace on a
    /// blocking thread.
    async fn with_ws<T, F>(
        &self,
        session_id: String,
        peer: crate::session::Peer,
        f: F,
    ) -> Result<T, Status>
    where
        T: Send + 'static,
        F: FnOnce(&Session, &Workspace) -> Result<T, Status> + Send + 'static,
    {
        let mgr = self.mgr.clone();
        tokio::task::spawn_blocking(move || {
            let session = mgr.open_session_for(&session_id, peer).map_err(status)?;
            let ws = Workspace::open_with(
                &session.workspace,
                &protected_of(&session),
                Limits::default(),
            )
            .map_err(ws_status)?;
            // The session's root is canonical; if its path now resolves
            // elsewhere (a component replaced by a symlink), refuse.
            if ws.root_path() != session.workspace {
                return Err(Status::failed_precondition(format!(
                    "workspace {} now resolves to {}: refusing to follow it",
                    session.workspace.display(),
                    ws.root_path().display()
                )));
            }
            f(&session, &ws)
        })
        .await
        .map_err(|e| Status::internal(format!("file tool task failed: {e}")))?
    }
}

#[tonic::async_trait]
impl Files for FilesService {
    async fn read_file(
        &self,
        req: Request<pb::ReadFileRequest>,
    ) -> Result<Response<pb::ReadFileResponse>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        let mgr = self.mgr.clone();
        let resp = self
            .with_ws(r.session_id.clone(), peer, move |s, ws| {
                let limit = (r.limit > 0).then_some(r.limit);
                let w = ws
                    .read_file_with_context(&r.path, r.offset, limit, REDACT_MARGIN)
                    .map_err(ws_status)?;
                let out = w.result;
                let redactor = mgr.redactor(s);
                let path = std::path::Path::new(&out.path);
                // Secret files (by path, after following inside symlinks) are
                // refused or shown as one marker, as the policy says; a
                // window is scanned with its context so a secret its edges
                // cut is still replaced whole.
                let (content, redactions) =
                    if out.binary || !out.truncated || redactor.secret_file(path).is_some() {
                        let (c, f) = redactor
                            .redact_file(path, out.content.as_bytes())
                            .map_err(redact_status)?;
                        (String::from_utf8_lossy(&c).into_owned(), f.len() as u32)
                    } else {
                        redact_window(&redactor, &w.before, out.content.as_bytes(), &w.after)
                    };
                Ok(pb::ReadFileResponse {
                    content,
                    binary: out.binary,
                    size_bytes: out.size,
                    hash: out.hash,
                    truncated: out.truncated,
                    redactions,
                })
            })
            .await?;
        Ok(Response::new(resp))
    }

    async fn write_file(
        &self,
        req: Request<pb::WriteFileRequest>,
    ) -> Result<Response<pb::WriteFileResponse>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        let mgr = self.mgr.clone();
        let resp = self
            .with_ws(r.session_id.clone(), peer, move |s, ws| {
                let mut r = r;
                // Content the model built from redacted output may carry
                // this session's markers: write the original values back,
                // never a marker over a secret (refused when a marker is not
                // this session's).
                r.content = restore(&mgr, s, &r.content)?;
                // Preview: the diff against the current content (empty for
                // binary files or when the write will fail anyway).
                let diff = ws.diff_for_write(&r.path, &r.content);
                let call = FileToolCall {
                    tool: "write_file",
                    session_id: &s.id,
                    paths: vec![r.path.clone()],
                    content_hash: crate::workspace::hash_bytes(&r.content),
                    diff,
                    approve: r.approve,
                    run_id: &r.run_id,
                    step_id: &r.step_id,
                    tool_call_id: &r.tool_call_id,
                };
                let key = CallKey::of(&r.run_id, &r.tool_call_id);
                let args = serde_json::json!({"path": r.path, "content_hash": call.content_hash, "base_hash": r.base_hash});
                let _in_flight = journal_plan(&mgr, &key, s, &r.step_id, "write_file", &args)?;
                gate(&mgr, &key, peer, s, &call)?;
                let base = (!r.base_hash.is_empty()).then_some(r.base_hash.as_str());
                let mode = (r.mode != 0).then_some(r.mode);
                let meta = mgr.file_tool_meta(s, &call, &args);
                // One writer per workspace (see SessionManager::exec).
                let step_lock = mgr.checkpoints().step_lock(&s.workspace);
                let _one_writer = step_lock.blocking_lock();
                let pre = checkpoint_pre(&mgr, &key, s, &meta)?;
                journal_begin(&mgr, &key, pre.as_ref())?;
                let c = ws.write_file(&r.path, &r.content, base, mode);
                let post = mgr.file_tool_post(s, pre.as_ref(), &meta);
                let c = journal_outcome(&mgr, &key, c.as_ref().map(std::slice::from_ref), post.as_ref())
                    .and(c.map_err(ws_status))?;
                tracing::info!(session = %s.id, path = %c.path, kind = c.kind.as_str(), old = %c.old_hash, new = %c.new_hash, "write_file");
                mgr.audit_file_change(peer, &call, std::slice::from_ref(&c))
                    .map_err(status)?;
                Ok(pb::WriteFileResponse {
                    hash: c.new_hash.clone(),
                    size_bytes: r.content.len() as u64,
                    created: c.kind == crate::workspace::ChangeKind::Added,
                    pre_checkpoint_id: pre.map(|c| c.id).unwrap_or_default(),
                    post_checkpoint_id: post.map(|c| c.id).unwrap_or_default(),
                    change: Some(change_to_proto(&c)),
                })
            })
            .await?;
        Ok(Response::new(resp))
    }

    async fn apply_patch(
        &self,
        req: Request<pb::ApplyPatchRequest>,
    ) -> Result<Response<pb::ApplyPatchResponse>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        let mgr = self.mgr.clone();
        let resp = self
            .with_ws(r.session_id.clone(), peer, move |s, ws| {
                let mut r = r;
                r.patch = String::from_utf8(restore(&mgr, s, r.patch.as_bytes())?)
                    .map_err(|_| Status::invalid_argument("the patch is not UTF-8"))?;
                // Schema layer: a patch that does not parse never reaches policy.
                let sections = crate::workspace::parse_patch(&r.patch).map_err(|e| {
                    let msg = e.to_string();
                    mgr.record_rejection(peer, &s.id, &r.run_id, &r.step_id, "apply_patch", &msg);
                    ws_status(e)
                })?;
                let mut paths: Vec<String> = Vec::new();
                for f in &sections {
                    for p in [&f.old_path, &f.new_path].into_iter().flatten() {
                        if !paths.contains(p) {
                            paths.push(p.clone());
                        }
                    }
                }
                let call = FileToolCall {
                    tool: "apply_patch",
                    session_id: &s.id,
                    paths,
                    content_hash: crate::workspace::hash_bytes(r.patch.as_bytes()),
                    diff: r.patch.clone(),
                    approve: r.approve,
                    run_id: &r.run_id,
                    step_id: &r.step_id,
                    tool_call_id: &r.tool_call_id,
                };
                let key = CallKey::of(&r.run_id, &r.tool_call_id);
                let args = serde_json::json!({"patch_hash": call.content_hash, "paths": call.paths});
                let _in_flight = journal_plan(&mgr, &key, s, &r.step_id, "apply_patch", &args)?;
                gate(&mgr, &key, peer, s, &call)?;
                let meta = mgr.file_tool_meta(s, &call, &args);
                // One writer per workspace (see SessionManager::exec).
                let step_lock = mgr.checkpoints().step_lock(&s.workspace);
                let _one_writer = step_lock.blocking_lock();
                let pre = checkpoint_pre(&mgr, &key, s, &meta)?;
                journal_begin(&mgr, &key, pre.as_ref())?;
                let changes = ws.apply_patch(&r.patch);
                let post = mgr.file_tool_post(s, pre.as_ref(), &meta);
                let changes = journal_outcome(&mgr, &key, changes.as_deref(), post.as_ref())
                    .and(changes.map_err(ws_status))?;
                for c in &changes {
                    tracing::info!(session = %s.id, path = %c.path, kind = c.kind.as_str(), old = %c.old_hash, new = %c.new_hash, "apply_patch");
                }
                mgr.audit_file_change(peer, &call, &changes).map_err(status)?;
                Ok(pb::ApplyPatchResponse {
                    changes: changes.iter().map(change_to_proto).collect(),
                    pre_checkpoint_id: pre.map(|c| c.id).unwrap_or_default(),
                    post_checkpoint_id: post.map(|c| c.id).unwrap_or_default(),
                })
            })
            .await?;
        Ok(Response::new(resp))
    }

    async fn list_dir(
        &self,
        req: Request<pb::ListDirRequest>,
    ) -> Result<Response<pb::ListDirResponse>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        let resp = self
            .with_ws(r.session_id.clone(), peer, move |_, ws| {
                let l = ws
                    .list_dir(&r.path, r.depth, r.limit as usize)
                    .map_err(ws_status)?;
                Ok(pb::ListDirResponse {
                    entries: l
                        .entries
                        .into_iter()
                        .map(|e| pb::DirEntry {
                            path: e.path,
                            kind: e.kind.as_str().into(),
                            size_bytes: e.size,
                            mode: e.mode,
                        })
                        .collect(),
                    truncated: l.truncated,
                })
            })
            .await?;
        Ok(Response::new(resp))
    }

    async fn grep(
        &self,
        req: Request<pb::GrepRequest>,
    ) -> Result<Response<pb::GrepResponse>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        let mgr = self.mgr.clone();
        let resp = self
            .with_ws(r.session_id.clone(), peer, move |s, ws| {
                let redactor = mgr.redactor(s);
                // Secret files the policy denies are skipped; others are
                // matched as redacted.
                let filter = |path: &str, text: &str| {
                    let (out, findings) = redactor
                        .redact_file(std::path::Path::new(path), text.as_bytes())
                        .ok()?;
                    Some((
                        String::from_utf8_lossy(&out).into_owned(),
                        findings.len() as u32,
                    ))
                };
                let g = ws
                    .grep(
                        &r.pattern,
                        &r.path,
                        r.case_insensitive,
                        r.limit as usize,
                        &filter,
                    )
                    .map_err(ws_status)?;
                Ok(pb::GrepResponse {
                    matches: g
                        .matches
                        .into_iter()
                        .map(|m| pb::GrepMatch {
                            path: m.path,
                            line: m.line,
                            text: m.text,
                        })
                        .collect(),
                    truncated: g.truncated,
                    redactions: g.redactions,
                })
            })
            .await?;
        Ok(Response::new(resp))
    }
}

// The step journal around file-tool writes (issue 10): `planned` before the
// gate, `started` before the write, `completed`/`failed` after. Calls without
// run and tool call ids are not journaled.

/// Plans the call; the guard keeps it in flight until the caller returns.
fn journal_plan<'a>(
    mgr: &'a SessionManager,
    key: &Option<CallKey>,
    s: &Session,
    step_id: &str,
    tool: &str,
    args: &serde_json::Value,
) -> Result<Option<InFlight<'a>>, Status> {
    match key {
        Some(k) => mgr
            .journal_plan(
                k,
                &s.id,
                step_id,
                tool,
                &args.to_string(),
                "write",
                &declare_file_tool(tool),
            )
            .map(Some)
            .map_err(status),
        None => Ok(None),
    }
}

/// The approval step of a file tool call. A refusal is journaled: a
/// request that awaits an answer leaves the call planned (nothing was
/// decided: calling again, or resuming the run, asks again); a denial is
/// its final result.
fn gate(
    mgr: &SessionManager,
    key: &Option<CallKey>,
    peer: crate::session::Peer,
    s: &Session,
    call: &FileToolCall<'_>,
) -> Result<(), Status> {
    let Err(refusal) = mgr.gate_file_tool(peer, s, call) else {
        return Ok(());
    };
    let result = serde_json::json!({"refused": refusal.error.to_string()});
    match key {
        Some(k) if refusal.awaiting_answer => mgr.journal_unanswered(k, &result).map_err(status)?,
        _ => journal_end(mgr, key, false, result)?,
    }
    Err(status(refusal.error))
}

/// The pre-checkpoint of a file tool call; when it fails the call is
/// refused (journaled as such) and nothing is written.
fn checkpoint_pre(
    mgr: &SessionManager,
    key: &Option<CallKey>,
    s: &Session,
    meta: &crate::checkpoint::CheckpointMeta,
) -> Result<Option<crate::checkpoint::Checkpoint>, Status> {
    let pre = mgr.checkpoint_pre(s, meta).or_else(|e| {
        let msg = format!("refused: the pre-checkpoint failed, nothing was written: {e}");
        journal_end(mgr, key, false, serde_json::json!({"refused": msg}))?;
        Err(Status::unavailable(msg))
    })?;
    // The call's classification and pre-checkpoint were committed without
    // waiting for the disk: they are on it before the workspace changes.
    mgr.audit().sync().or_else(|e| {
        let msg = format!("refused: the audit log could not be synced, nothing was written: {e}");
        journal_end(mgr, key, false, serde_json::json!({"refused": msg}))?;
        Err(Status::unavailable(msg))
    })?;
    Ok(pre)
}

fn journal_begin(
    mgr: &SessionManager,
    key: &Option<CallKey>,
    pre: Option<&crate::checkpoint::Checkpoint>,
) -> Result<(), Status> {
    match key {
        Some(k) => mgr
            .journal_start(k, pre.map(|c| c.id.as_str()))
            .map_err(status),
        None => Ok(()),
    }
}

fn journal_end(
    mgr: &SessionManager,
    key: &Option<CallKey>,
    ok: bool,
    result: serde_json::Value,
) -> Result<(), Status> {
    journal_finish(mgr, key, ok, result, None)
}

fn journal_finish(
    mgr: &SessionManager,
    key: &Option<CallKey>,
    ok: bool,
    result: serde_json::Value,
    post: Option<&crate::checkpoint::Checkpoint>,
) -> Result<(), Status> {
    match key {
        Some(k) => mgr
            .journal_finish(k, ok, &result, post.map(|c| c.id.as_str()))
            .map_err(status),
        None => Ok(()),
    }
}

/// Journals how the write went, with its post-checkpoint.
fn journal_outcome(
    mgr: &SessionManager,
    key: &Option<CallKey>,
    r: Result<&[FileChange], &WorkspaceError>,
    post: Option<&crate::checkpoint::Checkpoint>,
) -> Result<(), Status> {
    let (ok, v) = match r {
        Ok(changes) => (
            true,
            serde_json::json!({"changes": changes.iter().map(|c| serde_json::json!({
                "path": c.path, "kind": c.kind.as_str(), "old_hash": c.old_hash, "new_hash": c.new_hash,
            })).collect::<Vec<_>>()}),
        ),
        Err(e) => (false, serde_json::json!({"error": e.to_string()})),
    };
    journal_finish(mgr, key, ok, v, post)
}

/// Puts this session's redaction markers back to the original values before
/// a write (the redactor's marker memory); a marker the session never issued
/// is refused, so a marker is never written over a secret.
fn restore(mgr: &SessionManager, s: &Session, data: &[u8]) -> Result<Vec<u8>, Status> {
    let redactor = mgr.redactor(s);
    if !redactor.contains_markers(&String::from_utf8_lossy(data)) {
        return Ok(data.to_vec());
    }
    redactor.restore_markers_bytes(data).map_err(|e| {
        Status::failed_precondition(format!(
            "the content carries redaction markers that cannot be restored ({e}); write the real value or leave that part unchanged"
        ))
    })
}
