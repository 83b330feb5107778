//! `apply_patch`: plan every file of a patch (confined resolution, protected
//! paths, hunks applied in memory), then stage every new content as a temp
//! file, then commit with renames; a failure while committing restores what
//! was already changed, so the patch applies to all files or to none.

use cap_std::fs::Dir;
use std::collections::HashSet;
use std::io;

use super::patch::{self, FilePatch};
use super::resolve::{rel_parent, Resolved};
use super::{
    dir_owner, hash_bytes, remove_created_dirs, stage_temp, sync_dir, ChangeKind, Current,
    FileChange, Workspace, WorkspaceError, ABSENT,
};

/// One side (old or new path) of a file operation.
struct Side {
    r: Resolved,
    name: String,
}

impl Side {
    fn rel(&self) -> &str {
        &self.r.rel
    }
}

struct Op {
    kind: ChangeKind,
    /// The existing file (modify, delete, rename source).
    src: Option<Side>,
    /// Where new content goes when not in place (create, rename target).
    dst: Option<Side>,
    old: Current,
    /// `None` for a delete.
    new_content: Option<Vec<u8>>,
    new_mode: u32,
    text: String,
    /// Temp file staged for the new content (in the target's directory).
    tmp: Option<String>,
    created_dirs: Vec<String>,
}

impl Op {
    /// The side new content is written to.
    fn target(&self) -> &Side {
        self.dst
            .as_ref()
            .or(self.src.as_ref())
            .expect("an op has a side")
    }
}

/// What the commit did so far, for restoring on failure.
enum Done {
    /// Op i's target was replaced in place (old content restorable).
    Replaced(usize),
    /// Op i's target was created (remove it).
    Created(usize),
    /// Op i's source was removed (old content restorable).
    Removed(usize),
}

fn mismatch(rel: &str, hash: &str, fp: &FilePatch, e: patch::HunkMismatch) -> WorkspaceError {
    WorkspaceError::FailedPrecondition {
        path: rel.to_string(),
        current_hash: hash.to_string(),
        message: format!("{} ({})", e, fp.display_path()),
    }
}

fn text_of<'a>(cur: &'a Current, rel: &str) -> Result<&'a str, WorkspaceError> {
    if super::looks_binary(&cur.content) {
        return Err(WorkspaceError::InvalidArgument(format!(
            "{rel}: binary file; patches apply to text files only"
        )));
    }
    std::str::from_utf8(&cur.content).map_err(|_| {
        WorkspaceError::InvalidArgument(format!("{rel}: not UTF-8 text; cannot patch it"))
    })
}

impl Workspace {
    fn side(&self, path: &str, must_exist: bool) -> Result<Side, WorkspaceError> {
        let r = self.resolve(path, !must_exist)?;
        let name = match &r.name {
            Some(n) => n.clone(),
            None => {
                return Err(WorkspaceError::InvalidArgument(format!(
                    "{path:?}: is the workspace root, not a file"
                )))
            }
        };
        if must_exist && !r.dirs_exist() {
            return Err(WorkspaceError::NotFound(r.rel.clone()));
        }
        Ok(Side { r, name })
    }

    fn current_of(&self, s: &Side) -> Result<Current, WorkspaceError> {
        if !s.r.dirs_exist() {
            return Ok(Current::absent());
        }
        self.current(&s.r.parent, &s.name, s.rel())
    }

    fn plan(&self, fp: &FilePatch) -> Result<Op, WorkspaceError> {
        let mode_of = |m: Option<u32>| m.map(|m| m & 0o777);
        match (&fp.old_path, &fp.new_path) {
            (None, None) => Err(WorkspaceError::InvalidArgument(
                "patch section with /dev/null on both sides".into(),
            )),
            (None, Some(new)) => {
                let dst = self.side(new, false)?;
                self.check_writable(new, dst.rel())?;
                let cur = self.current_of(&dst)?;
                if cur.exists {
                    return Err(WorkspaceError::FailedPrecondition {
                        path: dst.rel().to_string(),
                        current_hash: cur.hash,
                        message: "the patch creates this file but it already exists".into(),
                    });
                }
                let content = patch::apply_hunks("", &fp.hunks)
                    .map_err(|e| mismatch(dst.rel(), ABSENT, fp, e))?;
                Ok(Op {
                    kind: ChangeKind::Added,
                    src: None,
                    dst: Some(dst),
                    old: cur,
                    new_content: Some(content.into_bytes()),
                    new_mode: mode_of(fp.new_mode).unwrap_or(0o644),
                    text: fp.text.clone(),
                    tmp: None,
                    created_dirs: vec![],
                })
            }
            (Some(old), Some(new)) if old != new && !fp.rename => {
                // A plain diff between two names (`diff -u f.orig f`): patch
                // the one that exists in place; never rename without git's
                // rename headers.
                let exists = |p: &str| -> Result<bool, WorkspaceError> {
                    let side = self.side(p, false)?;
                    Ok(self.current_of(&side)?.exists)
                };
                let target = match (exists(old)?, exists(new)?) {
                    (true, false) => old,
                    (false, true) => new,
                    (true, true) => {
                        return Err(WorkspaceError::InvalidArgument(format!(
                            "patch names {old} and {new}, both exist and there are no rename headers: which one to patch is ambiguous"
                        )))
                    }
                    (false, false) => return Err(WorkspaceError::NotFound(new.clone())),
                };
                let mut one = fp.clone();
                one.old_path = Some(target.clone());
                one.new_path = Some(target.clone());
                self.plan(&one)
            }
            (Some(old), new) => {
                let src = self.side(old, true)?;
                self.check_writable(old, src.rel())?;
                let cur = self.current_of(&src)?;
                if !cur.exists {
                    return Err(WorkspaceError::NotFound(src.rel().to_string()));
                }
                let text = text_of(&cur, src.rel())?;
                let after = patch::apply_hunks(text, &fp.hunks)
                    .map_err(|e| mismatch(src.rel(), &cur.hash, fp, e))?;
                let Some(new) = new else {
                    if !after.is_empty() {
                        return Err(WorkspaceError::FailedPrecondition {
                            path: src.rel().to_string(),
                            current_hash: cur.hash.clone(),
                            message:
                                "the patch deletes this file but does not remove all of its content"
                                    .into(),
                        });
                    }
                    return Ok(Op {
                        kind: ChangeKind::Deleted,
                        src: Some(src),
                        dst: None,
                        new_mode: cur.mode,
                        old: cur,
                        new_content: None,
                        text: fp.text.clone(),
                        tmp: None,
                        created_dirs: vec![],
                    });
                };
                let mut dst = None;
                if new != old || fp.rename {
                    let d = self.side(new, false)?;
                    if d.rel() != src.rel() {
                        self.check_writable(new, d.rel())?;
                        let dc = self.current_of(&d)?;
                        if dc.exists {
                            return Err(WorkspaceError::FailedPrecondition {
                                path: d.rel().to_string(),
                                current_hash: dc.hash,
                                message: format!(
                                    "the patch renames {} onto this path but it already exists",
                                    src.rel()
                                ),
                            });
                        }
                        dst = Some(d);
                    }
                }
                let new_mode = mode_of(fp.new_mode).unwrap_or(cur.mode & !0o6000);
                let after = after.into_bytes();
                let kind = if dst.is_some() {
                    ChangeKind::Renamed
                } else if after != cur.content || new_mode == cur.mode {
                    ChangeKind::Modified
                } else {
                    ChangeKind::Mode
                };
                Ok(Op {
                    kind,
                    src: Some(src),
                    dst,
                    old: cur,
                    new_content: Some(after),
                    new_mode,
                    text: fp.text.clone(),
                    tmp: None,
                    created_dirs: vec![],
                })
            }
        }
    }

    /// Applies a unified diff (git-style, multi-file, create / delete /
    /// rename / mode change) to all its files or to none, and returns one
    /// [`FileChange`] per file section.
    ///
    /// Every path (old and new side) goes through the path rules; protected
    /// paths are refused; symlink and submodule modes and binary patches are
    /// refused. Errors: InvalidArgument (malformed patch, naming the patch
    /// line), PermissionDenied, NotFound (a patched file is missing),
    /// FailedPrecondition (a hunk does not apply: file, hunk, line, expected
    /// and found lines, current hash; a created file exists), TooLarge, Io.
    pub fn apply_patch(&self, patch_text: &str) -> Result<Vec<FileChange>, WorkspaceError> {
        let files = patch::parse(patch_text)?;
        let mut ops = Vec::with_capacity(files.len());
        let mut seen = HashSet::new();
        for fp in &files {
            let op = self.plan(fp)?;
            for s in [op.src.as_ref(), op.dst.as_ref()].into_iter().flatten() {
                if !seen.insert(s.rel().to_string()) {
                    return Err(WorkspaceError::InvalidArgument(format!(
                        "{}: touched by more than one section of the patch",
                        s.rel()
                    )));
                }
            }
            ops.push(op);
        }
        if let Err(e) = self.stage(&mut ops) {
            cleanup(&self.root, &mut ops);
            return Err(e);
        }
        let mut done = Vec::new();
        if let Err(e) = self.commit(&mut ops, &mut done) {
            let restore_errors = self.restore(&ops, &done);
            cleanup(&self.root, &mut ops);
            if !restore_errors.is_empty() {
                return Err(WorkspaceError::Io {
                    path: restore_errors.join(", "),
                    source: io::Error::other(format!(
                        "patch failed ({e}) and these files could not be restored"
                    )),
                });
            }
            return Err(e);
        }
        for op in &ops {
            sync_dir(&op.target().r.parent);
            if let Some(s) = &op.src {
                sync_dir(&s.r.parent);
            }
        }
        Ok(ops
            .iter()
            .map(|op| {
                let new_hash = op
                    .new_content
                    .as_deref()
                    .map(hash_bytes)
                    .unwrap_or_else(|| ABSENT.into());
                FileChange {
                    path: op.target().rel().to_string(),
                    kind: op.kind,
                    from_path: op
                        .dst
                        .as_ref()
                        .and(op.src.as_ref())
                        .map(|s| s.rel().to_string()),
                    old_hash: op.old.hash.clone(),
                    new_hash,
                    old_mode: op.old.exists.then_some(op.old.mode),
                    new_mode: op.new_content.is_some().then_some(op.new_mode),
                    patch: op.text.clone(),
                }
            })
            .collect())
    }

    /// Creates missing directories and writes every new content to a temp
    /// file next to its target.
    fn stage(&self, ops: &mut [Op]) -> Result<(), WorkspaceError> {
        for op in ops.iter_mut() {
            let Some(content) = op.new_content.as_deref() else {
                continue;
            };
            let owner = if op.old.exists {
                Some((op.old.uid, op.old.gid))
            } else {
                None
            };
            let mode = op.new_mode;
            let side = op.dst.as_mut().or(op.src.as_mut()).expect("side");
            let rel = side.r.rel.clone();
            op.created_dirs = side.r.create_missing(rel_parent(&rel))?;
            let owner = owner.or_else(|| dir_owner(&side.r.parent));
            op.tmp = Some(stage_temp(&side.r.parent, content, mode, owner, &rel)?);
        }
        // Nothing changed since planning.
        for op in ops.iter() {
            if let Some(s) = &op.src {
                self.unchanged_since(&s.r.parent, &s.name, s.rel(), &op.old)?;
            }
            if let Some(d) = &op.dst {
                if d.r.parent.symlink_metadata(&d.name).is_ok() {
                    return Err(WorkspaceError::FailedPrecondition {
                        path: d.rel().to_string(),
                        current_hash: "?".into(),
                        message: "appeared while the patch was being applied".into(),
                    });
                }
            }
        }
        Ok(())
    }

    fn commit(&self, ops: &mut [Op], done: &mut Vec<Done>) -> Result<(), WorkspaceError> {
        for i in 0..ops.len() {
            let op = &ops[i];
            match (&op.src, &op.dst, op.tmp.clone()) {
                // Modify / mode change in place.
                (Some(s), None, Some(tmp)) => {
                    self.install(&s.r.parent, &tmp, &s.name, s.rel(), &op.old)?;
                    done.push(Done::Replaced(i));
                }
                // Create, or rename target: never replace what is there.
                (src, Some(d), Some(tmp)) => {
                    let r = link_noreplace(&d.r.parent, &tmp, &d.name);
                    let _ = d.r.parent.remove_file(&tmp);
                    r.map_err(|e| WorkspaceError::io(d.rel(), e))?;
                    done.push(Done::Created(i));
                    if let Some(s) = src {
                        s.r.parent
                            .remove_file(&s.name)
                            .map_err(|e| WorkspaceError::io(s.rel(), e))?;
                        done.push(Done::Removed(i));
                    }
                }
                // Delete.
                (Some(s), None, None) => {
                    s.r.parent
                        .remove_file(&s.name)
                        .map_err(|e| WorkspaceError::io(s.rel(), e))?;
                    done.push(Done::Removed(i));
                }
                _ => {
                    return Err(WorkspaceError::InvalidArgument(
                        "internal: inconsistent patch operation".into(),
                    ))
                }
            }
            ops[i].tmp = None;
        }
        Ok(())
    }

    /// Undoes `done` in reverse; returns the paths that could not be restored.
    fn restore(&self, ops: &[Op], done: &[Done]) -> Vec<String> {
        let mut failed = Vec::new();
        for d in done.iter().rev() {
            let res = match *d {
                Done::Replaced(i) | Done::Removed(i) => {
                    let op = &ops[i];
                    let s = op.src.as_ref().expect("source side");
                    stage_temp(
                        &s.r.parent,
                        &op.old.content,
                        op.old.mode,
                        Some((op.old.uid, op.old.gid)),
                        s.rel(),
                    )
                    .and_then(|tmp| {
                        s.r.parent
                            .rename(&tmp, &s.r.parent, &s.name)
                            .map_err(|e| WorkspaceError::io(s.rel(), e))
                    })
                    .map_err(|_| s.rel().to_string())
                }
                Done::Created(i) => {
                    let t = ops[i].target();
                    t.r.parent
                        .remove_file(&t.name)
                        .map_err(|_| t.rel().to_string())
                }
            };
            if let Err(p) = res {
                failed.push(p);
            }
        }
        failed
    }
}

/// `linkat(2)` of `tmp` to `name` in the same directory: fails with EEXIST
/// instead of replacing an entry that appeared meanwhile.
fn link_noreplace(dir: &Dir, tmp: &str, name: &str) -> io::Result<()> {
    dir.hard_link(tmp, dir, name)
}

/// Removes staged temp files and directories created for the patch.
fn cleanup(root: &Dir, ops: &mut [Op]) {
    for op in ops.iter_mut() {
        if let Some(tmp) = op.tmp.take() {
            let _ = op.target().r.parent.remove_file(&tmp);
        }
    }
    for op in ops.iter().rev() {
        remove_created_dirs(root, &op.created_dirs);
    }
}
