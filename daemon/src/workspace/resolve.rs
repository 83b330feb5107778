//! Path rules and confined resolution of a workspace-relative path.
//!
//! Every component is looked up with one `openat`-style call relative to a
//! directory handle we already hold (cap-std, which uses `openat2(2)` with
//! `RESOLVE_BENEATH` on Linux), and directories are opened with `O_NOFOLLOW`
//! (`open_dir_nofollow`). Symlinks are never followed by the kernel: we read
//! them through the handle (`readlinkat(2)`) and splice their target into the
//! remaining components, so a symlink that leaves the root is seen, and named,
//! before anything is opened. A directory swapped for a symlink between our
//! look-up and our open makes the `O_NOFOLLOW` open fail (the swap cannot
//! redirect it); we then look the component up again, a bounded number of
//! times.

use cap_fs_ext::DirExt;
use cap_std::fs::Dir;
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::io;
use std::path::{Component, Path};

use super::WorkspaceError;

/// Longest accepted path, bytes (Linux `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest accepted component, bytes (Linux `NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;
/// Most components accepted in one path (after symlink expansion).
pub const MAX_COMPONENTS: usize = 256;
/// Most symlinks followed in one resolution (Linux `MAXSYMLINKS`, path_resolution(7)).
pub const MAX_SYMLINK_HOPS: usize = 40;

/// A path resolved beneath the root.
#[derive(Debug)]
pub(crate) struct Resolved {
    /// Handle on the deepest existing directory on the way (the parent of
    /// `name` when `missing` is empty).
    pub parent: Dir,
    /// Directories that do not exist yet between `parent` and `name`.
    pub missing: Vec<String>,
    /// The final component; `None` when the path is the root itself.
    pub name: Option<String>,
    /// Canonical path relative to the root, `/`-separated, no symlinks, no
    /// `.`/`..`; empty for the root.
    pub rel: String,
}

impl Resolved {
    /// Whether the final entry may exist (all directories on the way exist).
    pub fn dirs_exist(&self) -> bool {
        self.missing.is_empty()
    }

    /// Creates the missing directories (mode 0755 minus umask), each with
    /// `mkdirat` + `O_NOFOLLOW` open through the handle; returns the
    /// canonical paths of the directories created, outermost first.
    pub fn create_missing(&mut self, rel_parent: &str) -> Result<Vec<String>, WorkspaceError> {
        let mut created = Vec::new();
        let mut rel = rel_parent.to_string();
        for name in std::mem::take(&mut self.missing) {
            rel = join_rel(&rel, &name);
            match self.parent.create_dir(&name) {
                Ok(()) => created.push(rel.clone()),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(WorkspaceError::io(&rel, e)),
            }
            let next = self.parent.open_dir_nofollow(&name).map_err(|e| {
                if is_symlink_error(&e) {
                    WorkspaceError::denied(&rel, &name, "replaced by a symlink while in use")
                } else {
                    WorkspaceError::io(&rel, e)
                }
            })?;
            self.parent = next;
        }
        Ok(created)
    }
}

/// `a` + `/` + `b`, or `b` when `a` is empty.
pub(crate) fn join_rel(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_string()
    } else {
        format!("{a}/{b}")
    }
}

/// Parent part of a canonical relative path ("" for a top-level name).
pub(crate) fn rel_parent(rel: &str) -> &str {
    rel.rsplit_once('/').map(|(p, _)| p).unwrap_or("")
}

/// Checks a requested path lexically (path rules of issue #5) and returns its
/// components (`.` and empty ones dropped; `..` kept, resolved later).
///
/// Errors: PermissionDenied for an absolute path, a NUL byte or a control
/// character (newline, escape, ...); InvalidArgument for a path longer than
/// [`MAX_PATH_BYTES`], a component longer than [`MAX_NAME_BYTES`], or more than
/// [`MAX_COMPONENTS`] components.
pub(crate) fn check_path(path: &str) -> Result<Vec<String>, WorkspaceError> {
    if let Some(i) = path.find('\0') {
        let comp = path[..i].rsplit('/').next().unwrap_or("");
        return Err(WorkspaceError::denied(
            path,
            &format!("{comp}\\0"),
            "NUL byte in path",
        ));
    }
    if path.starts_with('/') {
        let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
        return Err(WorkspaceError::denied(
            path,
            &format!("/{first}"),
            "absolute path (paths are relative to the workspace root)",
        ));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(WorkspaceError::InvalidArgument(format!(
            "path is {} bytes long; at most {MAX_PATH_BYTES}",
            path.len()
        )));
    }
    let mut out = Vec::new();
    let mut depth: usize = 0;
    for comp in path.split('/') {
        if comp.is_empty() || comp == "." {
            continue;
        }
        if comp.chars().any(|c| c.is_control()) {
            return Err(WorkspaceError::denied(
                path,
                &comp.escape_debug().to_string(),
                "control character in a file name",
            ));
        }
        if comp.len() > MAX_NAME_BYTES {
            return Err(WorkspaceError::InvalidArgument(format!(
                "path component {:?}... is {} bytes long; at most {MAX_NAME_BYTES}",
                &comp[..comp
                    .char_indices()
                    .nth(16)
                    .map(|(i, _)| i)
                    .unwrap_or(comp.len())],
                comp.len()
            )));
        }
        if comp == ".." {
            if depth == 0 {
                return Err(WorkspaceError::denied(
                    path,
                    "..",
                    "leaves the workspace root",
                ));
            }
            depth -= 1;
        } else {
            depth += 1;
        }
        out.push(comp.to_string());
        if out.len() > MAX_COMPONENTS {
            return Err(WorkspaceError::InvalidArgument(format!(
                "path has more than {MAX_COMPONENTS} components"
            )));
        }
    }
    Ok(out)
}

/// Whether an error is what `O_NOFOLLOW`/`O_DIRECTORY` opens give on a symlink
/// (ELOOP, ENOTDIR) or cap-std's escape refusal.
pub(crate) fn is_symlink_error(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR))
        || e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error().is_none()
}

enum Pending {
    /// A component of the requested path.
    Name(String),
    /// A component that came from a symlink target.
    Target(String),
}

/// Resolves `path` beneath `root` (see the module doc). With `follow_final`,
/// a final symlink is followed (staying inside); otherwise the final
/// component is returned as is.
///
/// Errors: PermissionDenied naming the component (`..` above the root, a
/// symlink whose target is absolute outside `root_path` or climbs above the
/// root); NotFound for a missing directory on the way (unless
/// `allow_missing`); InvalidArgument for a non-directory on the way or too
/// many symlinks.
pub(crate) fn resolve(
    root: &Dir,
    root_path: &Path,
    path: &str,
    follow_final: bool,
    allow_missing: bool,
) -> Result<Resolved, WorkspaceError> {
    let comps = check_path(path)?;
    let mut pending: VecDeque<Pending> = comps.into_iter().map(Pending::Name).collect();
    // Directory handles below the root and their names (canonical path).
    let mut stack: Vec<(Dir, String)> = Vec::new();
    let mut missing: Vec<String> = Vec::new();
    let mut hops = 0usize;
    let mut retries = 0usize;

    let canon = |stack: &Vec<(Dir, String)>, missing: &Vec<String>| -> String {
        stack
            .iter()
            .map(|(_, n)| n.as_str())
            .chain(missing.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("/")
    };

    while let Some(p) = pending.pop_front() {
        let (comp, from_target) = match p {
            Pending::Name(c) => (c, false),
            Pending::Target(c) => (c, true),
        };
        if comp == ".." {
            if missing.pop().is_some() {
                continue;
            }
            if stack.pop().is_none() {
                let reason = if from_target {
                    "a symlink target leaves the workspace root"
                } else {
                    "leaves the workspace root"
                };
                return Err(WorkspaceError::denied(path, "..", reason));
            }
            continue;
        }
        let is_last = pending.is_empty();
        let here = join_rel(&canon(&stack, &missing), &comp);
        if !missing.is_empty() {
            // Below a directory that does not exist: nothing to look up.
            if is_last {
                return Ok(finish(root, stack, missing, Some(comp), here)?);
            }
            missing.push(comp);
            continue;
        }
        let cur = stack.last().map(|(d, _)| d).unwrap_or(root);
        if is_last && !follow_final {
            return finish(root, stack, missing, Some(comp), here);
        }
        let md = match cur.symlink_metadata(&comp) {
            Ok(md) => md,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if is_last {
                    return finish(root, stack, missing, Some(comp), here);
                }
                if !allow_missing {
                    return Err(WorkspaceError::NotFound(here));
                }
                missing.push(comp);
                continue;
            }
            Err(e) => return Err(WorkspaceError::io(&here, e)),
        };
        if md.file_type().is_symlink() {
            hops += 1;
            if hops > MAX_SYMLINK_HOPS {
                return Err(WorkspaceError::InvalidArgument(format!(
                    "{path}: more than {MAX_SYMLINK_HOPS} symlinks on the way (at {here})"
                )));
            }
            let target = cur
                .read_link_contents(&comp)
                .map_err(|e| WorkspaceError::io(&here, e))?;
            let tpath = target.as_path();
            let mut tcomps: Vec<String> = Vec::new();
            let rest: &Path = if tpath.is_absolute() {
                match tpath.strip_prefix(root_path) {
                    Ok(rest) => {
                        stack.clear();
                        rest
                    }
                    Err(_) => {
                        return Err(WorkspaceError::denied(
                            path,
                            &here,
                            &format!("symlink to {} leaves the workspace root", tpath.display()),
                        ))
                    }
                }
            } else {
                tpath
            };
            // Check the target climbs no higher than the root, naming the link.
            let mut depth = stack.len();
            for c in rest.components() {
                match c {
                    Component::Normal(n) => {
                        let n = os_to_string(n).ok_or_else(|| {
                            WorkspaceError::InvalidArgument(format!(
                                "{here}: symlink target is not UTF-8"
                            ))
                        })?;
                        depth += 1;
                        tcomps.push(n);
                    }
                    Component::ParentDir => {
                        if depth == 0 {
                            return Err(WorkspaceError::denied(
                                path,
                                &here,
                                &format!(
                                    "symlink to {} leaves the workspace root",
                                    tpath.display()
                                ),
                            ));
                        }
                        depth -= 1;
                        tcomps.push("..".into());
                    }
                    Component::CurDir => {}
                    Component::RootDir | Component::Prefix(_) => {}
                }
            }
            if stack.len() + tcomps.len() + pending.len() > MAX_COMPONENTS * 2 {
                return Err(WorkspaceError::InvalidArgument(format!(
                    "{path}: path too deep after following symlinks"
                )));
            }
            for c in tcomps.into_iter().rev() {
                pending.push_front(Pending::Target(c));
            }
            continue;
        }
        if is_last {
            return finish(root, stack, missing, Some(comp), here);
        }
        if !md.is_dir() {
            return Err(WorkspaceError::InvalidArgument(format!(
                "{here}: not a directory (in {path})"
            )));
        }
        match cur.open_dir_nofollow(&comp) {
            Ok(d) => stack.push((d, comp)),
            Err(e) if is_symlink_error(&e) || e.kind() == io::ErrorKind::NotFound => {
                // Swapped between lstat and open: look again (bounded).
                retries += 1;
                if retries > MAX_SYMLINK_HOPS {
                    return Err(WorkspaceError::denied(
                        path,
                        &here,
                        "keeps changing while being resolved",
                    ));
                }
                pending.push_front(if from_target {
                    Pending::Target(comp)
                } else {
                    Pending::Name(comp)
                });
            }
            Err(e) => return Err(WorkspaceError::io(&here, e)),
        }
    }
    // The path was the root itself (or resolved to it).
    let rel = canon(&stack, &missing);
    if rel.is_empty() {
        return Ok(Resolved {
            parent: root.try_clone().map_err(|e| WorkspaceError::io("", e))?,
            missing,
            name: None,
            rel,
        });
    }
    // Ended on a directory reached through `..` or a symlink: express it as
    // (parent, name) like every other result.
    let (_, last) = stack.pop().expect("non-empty canonical path");
    finish(root, stack, missing, Some(last), rel)
}

fn finish(
    root: &Dir,
    mut stack: Vec<(Dir, String)>,
    missing: Vec<String>,
    name: Option<String>,
    rel: String,
) -> Result<Resolved, WorkspaceError> {
    let parent = match stack.pop() {
        Some((d, _)) => d,
        None => root.try_clone().map_err(|e| WorkspaceError::io(&rel, e))?,
    };
    Ok(Resolved {
        parent,
        missing,
        name,
        rel,
    })
}

pub(crate) fn os_to_string(s: &OsStr) -> Option<String> {
    s.to_str().map(str::to_string)
}
