//! Confined file tools (read, write, apply_patch, list, grep) through a
//! cap-std capability on the workspace root, and the path rules (issue #5).
//!
//! Nothing here hands a requested path to the file system: a [`Workspace`]
//! holds a `cap_std::fs::Dir` on the root and resolves every path one
//! component at a time beneath it (see `resolve`): `openat2(2)` with
//! `RESOLVE_BENEATH` through cap-std, directories opened `O_NOFOLLOW`,
//! symlinks read and checked by us. Files are opened `O_NOFOLLOW |
//! O_NONBLOCK | O_NOCTTY` and checked with `fstat(2)` to be regular, so a
//! FIFO or device never blocks or is read. Writes are atomic (temp file in
//! the same directory, `fsync`, `renameat(2)`, `fsync` of the directory),
//! so a hard link to a file outside is replaced, never written through.
//!
//! Paths: relative to the root, `/`-separated. Refused with
//! [`WorkspaceError::PermissionDenied`] naming the component: absolute paths,
//! `..` above the root, NUL bytes and control characters, symlinks (final or
//! intermediate, existing or dangling) whose target leaves the root, and
//! writes to protected paths ([`DEFAULT_PROTECTED`] plus the policy's list,
//! plus the directory the repository's `core.hooksPath` names) and to any
//! path with a `.git` component ([`is_git_dir_name`]).
//! Symlinks that stay inside are followed; an absolute symlink whose target
//! lies under the root's canonical path counts as inside.
//!
//! Hashes are BLAKE3 hex of the content; [`ABSENT`] is the hash of a file
//! that does not exist. Every change returns a [`FileChange`] record for the
//! checkpoint module.

mod hooks_path;
mod patch;
mod resolve;
mod walk;

pub use hooks_path::{hooks_path_protected, HOOK_NAMES};
pub use patch::{parse as parse_patch, FilePatch, Hunk, HunkLine, HunkMismatch, MAX_PATCH_BYTES};
pub use walk::{DirEntryInfo, EntryKind, GrepMatch, GrepResult, ListResult, MAX_RESULT_BYTES};

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, File, Metadata, MetadataExt, OpenOptions, OpenOptionsExt};
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use resolve::{rel_parent, Resolved};

/// The base hash of a file that does not exist.
pub const ABSENT: &str = "absent";

/// Paths that are read-only for the file tools whatever the policy says
/// (each protects itself and everything beneath it). `.git` itself is also
/// protected as an entry (a `.git` *file* could point git at other hooks),
/// but not what is beneath it beyond this list.
pub const DEFAULT_PROTECTED: &[&str] = &[
    ".git/hooks",
    ".git/config",
    // Files that redirect git to another config and hooks directory
    // (gitrepository-layout(5)): as dangerous as .git/config itself.
    ".git/commondir",
    ".git/config.worktree",
    ".git/worktrees",
    ".git/modules",
    ".envrc",
    ".vscode",
    ".husky",
];

/// Whether a path component names a git directory or gitfile: `.git` in
/// any ASCII case (git itself treats `.GIT` as `.git` on case-insensitive
/// file systems, and the workspace may be shared with one). The file tools
/// refuse every write whose path has such a component, at any depth
/// (a nested repository's `config`/`hooks`, a gitfile): nothing a coding
/// agent legitimately does needs it, and git runs code from there.
pub fn is_git_dir_name(component: &str) -> bool {
    component.eq_ignore_ascii_case(".git")
}

/// Errors of the file tools. Messages name the path (and component) at fault.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The file or a directory on the way does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The path escapes the root, names a protected path, or is otherwise
    /// refused by the path rules.
    #[error("permission denied: {path}: {component:?}: {reason}")]
    PermissionDenied {
        /// The path as requested.
        path: String,
        /// The offending component (or canonical path of a symlink).
        component: String,
        reason: String,
    },
    /// Malformed request: a directory or non-regular file where a file is
    /// needed, a bad pattern or patch, an over-long path.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The file is not in the expected state: base hash mismatch, a hunk
    /// that does not apply, a file that already exists. `current_hash` is
    /// the file's hash now ([`ABSENT`] when missing).
    #[error("failed precondition: {path}: {message} (current hash: {current_hash})")]
    FailedPrecondition {
        path: String,
        current_hash: String,
        message: String,
    },
    /// Over a size or count cap.
    #[error("too large: {0}")]
    TooLarge(String),
    #[error("i/o error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

impl WorkspaceError {
    pub(crate) fn denied(path: &str, component: &str, reason: &str) -> WorkspaceError {
        WorkspaceError::PermissionDenied {
            path: path.to_string(),
            component: component.to_string(),
            reason: reason.to_string(),
        }
    }

    pub(crate) fn io(path: &str, source: io::Error) -> WorkspaceError {
        match source.kind() {
            io::ErrorKind::NotFound => WorkspaceError::NotFound(path.to_string()),
            _ if source.raw_os_error() == Some(libc::ENAMETOOLONG) => {
                WorkspaceError::InvalidArgument(format!("{path}: name too long"))
            }
            // cap-std's own refusal of an escaping path (no errno).
            io::ErrorKind::PermissionDenied if source.raw_os_error().is_none() => {
                WorkspaceError::denied(path, path, &source.to_string())
            }
            _ => WorkspaceError::Io {
                path: path.to_string(),
                source,
            },
        }
    }

    fn precondition(path: &str, current_hash: &str, message: impl Into<String>) -> Self {
        WorkspaceError::FailedPrecondition {
            path: path.to_string(),
            current_hash: current_hash.to_string(),
            message: message.into(),
        }
    }
}

/// Size and count caps of the file tools.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most bytes `read_file` returns; a whole-file read of a larger file is
    /// TooLarge. Default 1 MiB.
    pub read_bytes: u64,
    /// Largest file `write_file` writes or `apply_patch` reads or produces,
    /// and largest file hashed. Default 16 MiB.
    pub file_bytes: u64,
    /// Largest file `grep` searches (larger ones are skipped). Default 4 MiB.
    pub grep_file_bytes: u64,
    /// Most directory entries one `list_dir`/`grep` walk visits. Default 100000.
    pub walk_entries: usize,
    /// Deepest `list_dir` depth accepted. Default 64.
    pub max_depth: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            read_bytes: 1 << 20,
            file_bytes: 16 << 20,
            grep_file_bytes: 4 << 20,
            walk_entries: 100_000,
            max_depth: 64,
        }
    }
}

/// What a change did to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
    Renamed,
    /// Only the mode changed.
    Mode,
}

impl ChangeKind {
    /// `added`, `modified`, `deleted`, `renamed`, `mode` (proto `FileChange.kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
            ChangeKind::Renamed => "renamed",
            ChangeKind::Mode => "mode",
        }
    }
}

/// The record of one file changed by `write_file` or `apply_patch`, for the
/// checkpoint module (pre/post recording).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileChange {
    /// Canonical path relative to the root (after following inside symlinks).
    pub path: String,
    pub kind: ChangeKind,
    /// For renames: the canonical old path.
    pub from_path: Option<String>,
    /// BLAKE3 hex before, [`ABSENT`] for a created file.
    pub old_hash: String,
    /// BLAKE3 hex after, [`ABSENT`] for a deleted file.
    pub new_hash: String,
    /// Permission bits (`st_mode & 0o7777`) before/after; `None` when absent.
    pub old_mode: Option<u32>,
    pub new_mode: Option<u32>,
    /// Unified diff of this file (empty when either side is not UTF-8 text).
    pub patch: String,
}

/// The answer of [`Workspace::read_file`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    /// Canonical path relative to the root.
    pub path: String,
    /// The requested window as UTF-8 text; empty when `binary`.
    pub content: String,
    /// The file looks binary (a NUL byte in its first 8000 bytes, git's
    /// heuristic) or the window is not UTF-8.
    pub binary: bool,
    /// Size of the whole file, bytes.
    pub size: u64,
    /// BLAKE3 hex of the whole file.
    pub hash: String,
    /// The content returned is not the whole file (offset, limit or cap).
    pub truncated: bool,
    /// File offset of the first byte of `content`, bytes (the requested
    /// offset, plus the bytes of a character it cut).
    pub offset: u64,
    /// Permission bits of the file.
    pub mode: u32,
}

/// The answer of [`Workspace::read_file_with_context`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowRead {
    pub result: ReadResult,
    /// Up to `margin` bytes of the file just before `result.content`.
    pub before: Vec<u8>,
    /// Up to `margin` bytes of the file just after `result.content`.
    pub after: Vec<u8>,
}

/// BLAKE3 hex of `data`.
pub fn hash_bytes(data: &[u8]) -> String {
    blake3::hash(data).to_hex().to_string()
}

/// git's binary heuristic: a NUL byte in the first 8000 bytes.
pub fn looks_binary(data: &[u8]) -> bool {
    data[..data.len().min(8000)].contains(&0)
}

/// A workspace root held as a capability.
#[derive(Debug)]
pub struct Workspace {
    root: Dir,
    root_path: PathBuf,
    protected: Vec<String>,
    limits: Limits,
}

/// The state of one file as read for a change.
struct Current {
    exists: bool,
    content: Vec<u8>,
    hash: String,
    mode: u32,
    uid: u32,
    gid: u32,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
}

impl Current {
    fn absent() -> Current {
        Current {
            exists: false,
            content: vec![],
            hash: ABSENT.into(),
            mode: 0,
            uid: 0,
            gid: 0,
            ino: 0,
            size: 0,
            mtime: (0, 0),
        }
    }
}

fn stamp(md: &Metadata) -> (u64, u64, (i64, i64)) {
    (md.ino(), md.size(), (md.mtime(), md.mtime_nsec()))
}

impl Workspace {
    /// Opens `root` (an existing directory; canonicalized) with the default
    /// protected paths and limits.
    ///
    /// Errors: NotFound, InvalidArgument when it is not a directory, Io.
    pub fn open(root: &Path) -> Result<Workspace, WorkspaceError> {
        Self::open_with(root, &[], Limits::default())
    }

    /// Like [`Workspace::open`] with extra protected paths (the policy's
    /// `[sandbox]` list, workspace-relative) and limits.
    pub fn open_with(
        root: &Path,
        protected: &[String],
        limits: Limits,
    ) -> Result<Workspace, WorkspaceError> {
        let shown = root.display().to_string();
        let root_path = std::fs::canonicalize(root).map_err(|e| WorkspaceError::io(&shown, e))?;
        if !root_path.is_dir() {
            return Err(WorkspaceError::InvalidArgument(format!(
                "{shown}: workspace root is not a directory"
            )));
        }
        let dir = Dir::open_ambient_dir(&root_path, cap_std::ambient_authority())
            .map_err(|e| WorkspaceError::io(&shown, e))?;
        let mut list: Vec<String> = DEFAULT_PROTECTED.iter().map(|s| s.to_string()).collect();
        for p in protected {
            let norm = p
                .split('/')
                .filter(|c| !c.is_empty() && *c != ".")
                .collect::<Vec<_>>()
                .join("/");
            if !norm.is_empty() && !list.contains(&norm) {
                list.push(norm);
            }
        }
        Ok(Workspace {
            root: dir,
            root_path,
            protected: list,
            limits,
        })
    }

    /// Canonical absolute path of the root.
    pub fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// The protected paths in force (defaults first).
    pub fn protected(&self) -> &[String] {
        &self.protected
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn resolve(&self, path: &str, allow_missing: bool) -> Result<Resolved, WorkspaceError> {
        resolve::resolve(&self.root, &self.root_path, path, true, allow_missing)
    }

    /// Which protected entry covers canonical `rel`, if any.
    pub fn protected_match(&self, rel: &str) -> Option<&str> {
        if rel == ".git" {
            return Some(".git");
        }
        self.protected
            .iter()
            .find(|p| rel == p.as_str() || rel.starts_with(&format!("{p}/")))
            .map(String::as_str)
    }

    /// Refuses a write to `rel` (canonical) or `requested` (lexically
    /// normalized) when protected.
    fn check_writable(&self, requested: &str, rel: &str) -> Result<(), WorkspaceError> {
        let mut lex: Vec<String> = Vec::new();
        for c in resolve::check_path(requested)? {
            if c == ".." {
                lex.pop();
            } else {
                lex.push(c);
            }
        }
        let lexical = lex.join("/");
        for cand in [rel, lexical.as_str()] {
            if let Some(c) = cand.split('/').find(|c| is_git_dir_name(c)) {
                return Err(WorkspaceError::denied(
                    requested,
                    c,
                    &format!(
                        "git control path (file tools never write inside or replace a .git, at any depth: its hooks and config run code on your next git command): {cand}"
                    ),
                ));
            }
            if let Some(p) = self.protected_match(cand) {
                return Err(WorkspaceError::denied(
                    requested,
                    p,
                    &format!("protected path (read-only for file tools): {cand}"),
                ));
            }
            if let Some(d) = self.git_dir_entry(cand) {
                return Err(WorkspaceError::denied(
                    requested,
                    if d.is_empty() { "." } else { d },
                    &format!(
                        "git control path (the directory is, or with this write would be, a git directory: HEAD with objects and refs, or with commondir; git reads its config and runs its hooks): {cand}"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The directory (relative, `""` for the root) of `rel` that git would
    /// take for a git dir once `rel` is written, when `rel` is one of its
    /// entries git reads (`HEAD`, `commondir`, `objects`, `refs`, `config`,
    /// `config.worktree`, `hooks`, or anything below them); `None`
    /// otherwise. A git dir has `HEAD` and either `objects` and `refs` or
    /// `commondir` (git's `is_git_directory`, setup.c), whatever their type.
    fn git_dir_entry<'a>(&self, rel: &'a str) -> Option<&'a str> {
        const ENTRIES: &[&str] = &[
            "HEAD",
            "commondir",
            "objects",
            "refs",
            "config",
            "config.worktree",
            "hooks",
        ];
        let parts: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
        for i in 0..parts.len() {
            if !ENTRIES.contains(&parts[i]) {
                continue;
            }
            let dir = &rel[..parts[..i].iter().map(|c| c.len() + 1).sum::<usize>()];
            let dir = dir.trim_end_matches('/');
            let has = |name: &str| {
                parts[i] == name || {
                    let p = if dir.is_empty() {
                        name.to_string()
                    } else {
                        format!("{dir}/{name}")
                    };
                    // Unknown (an error other than absence) counts as
                    // present: refuse rather than guess.
                    match self.root.symlink_metadata(&p) {
                        Ok(_) => true,
                        Err(e) => !matches!(
                            e.kind(),
                            std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                        ),
                    }
                }
            };
            if has("HEAD") && (has("commondir") || (has("objects") && has("refs"))) {
                return Some(dir);
            }
        }
        None
    }

    /// Reads a file: `offset` bytes in, at most `limit` bytes (capped at
    /// `Limits::read_bytes`). Without offset and limit a file larger than the
    /// cap is TooLarge.
    ///
    /// Errors: NotFound; PermissionDenied (path rules); InvalidArgument for a
    /// directory, FIFO, device or socket; TooLarge.
    pub fn read_file(
        &self,
        path: &str,
        offset: u64,
        limit: Option<u64>,
    ) -> Result<ReadResult, WorkspaceError> {
        self.read_file_with_context(path, offset, limit, 0)
            .map(|w| w.result)
    }

    /// Like [`Workspace::read_file`], also returning up to `margin` bytes
    /// of the file on each side of the content (not capped by the read cap),
    /// so a caller can see a secret that the window's edges cut (the
    /// redactor); the context is never meant for the client.
    pub fn read_file_with_context(
        &self,
        path: &str,
        offset: u64,
        limit: Option<u64>,
        margin: u64,
    ) -> Result<WindowRead, WorkspaceError> {
        let margin = margin.min(1 << 20);
        let r = self.resolve(path, false)?;
        let name = self.need_name(&r, path)?;
        let (file, md) = open_regular(&r.parent, name, &r.rel)?;
        let size = md.size();
        if limit.is_none() && offset == 0 && size > self.limits.read_bytes {
            return Err(WorkspaceError::TooLarge(format!(
                "{}: {size} bytes; the read cap is {} bytes (give an offset/limit)",
                r.rel, self.limits.read_bytes
            )));
        }
        if size > self.limits.file_bytes.max(256 << 20) {
            return Err(WorkspaceError::TooLarge(format!(
                "{}: {size} bytes; files over {} bytes are not read",
                r.rel,
                self.limits.file_bytes.max(256 << 20)
            )));
        }
        let want = limit
            .unwrap_or(self.limits.read_bytes)
            .min(self.limits.read_bytes);
        // Stream the whole file once: hash it and keep the window.
        let mut hasher = blake3::Hasher::new();
        let mut window = Vec::new();
        let mut slab = Vec::new();
        let slab_start = offset.saturating_sub(margin);
        let slab_end = offset.saturating_add(want).saturating_add(margin);
        let mut head = Vec::new();
        let mut pos: u64 = 0;
        let mut buf = vec![0u8; 64 * 1024];
        let mut f = file;
        loop {
            let n = f
                .read(&mut buf)
                .map_err(|e| WorkspaceError::io(&r.rel, e))?;
            if n == 0 {
                break;
            }
            let chunk = &buf[..n];
            hasher.update(chunk);
            if head.len() < 8000 {
                head.extend_from_slice(&chunk[..chunk.len().min(8000 - head.len())]);
            }
            let (cs, ce) = (pos, pos + n as u64);
            let (ws, we) = (offset, offset.saturating_add(want));
            if ce > ws && cs < we {
                let a = (ws.max(cs) - cs) as usize;
                let b = (we.min(ce) - cs) as usize;
                window.extend_from_slice(&chunk[a..b]);
            }
            if margin > 0 && ce > slab_start && cs < slab_end {
                let a = (slab_start.max(cs) - cs) as usize;
                let b = (slab_end.min(ce) - cs) as usize;
                slab.extend_from_slice(&chunk[a..b]);
            }
            pos = ce;
            if pos > size.saturating_add(1 << 20) {
                return Err(WorkspaceError::InvalidArgument(format!(
                    "{}: file grew while being read",
                    r.rel
                )));
            }
        }
        let truncated = offset > 0 || (window.len() as u64) < pos;
        let mut binary = looks_binary(&head);
        let mut content = String::new();
        let mut skipped = 0usize;
        if !binary {
            match utf8_window(&window, offset > 0, truncated) {
                Some((s, k)) => {
                    content = s;
                    skipped = k;
                }
                None => binary = true,
            }
        }
        let start = offset + skipped as u64;
        let end = start + content.len() as u64;
        let (mut before, mut after) = (Vec::new(), Vec::new());
        if margin > 0 && !binary {
            let at = |o: u64| ((o.max(slab_start) - slab_start) as usize).min(slab.len());
            before = slab[at(start.saturating_sub(margin))..at(start)].to_vec();
            after = slab[at(end)..at(end + margin)].to_vec();
        }
        Ok(WindowRead {
            result: ReadResult {
                path: r.rel,
                content,
                binary,
                size: pos,
                hash: hasher.finalize().to_hex().to_string(),
                truncated,
                offset: start,
                mode: md.mode() & 0o7777,
            },
            before,
            after,
        })
    }

    fn need_name<'a>(&self, r: &'a Resolved, path: &str) -> Result<&'a str, WorkspaceError> {
        match &r.name {
            Some(n) if r.dirs_exist() => Ok(n),
            Some(_) => Err(WorkspaceError::NotFound(r.rel.clone())),
            None => Err(WorkspaceError::InvalidArgument(format!(
                "{path:?}: is the workspace root (a directory), not a file"
            ))),
        }
    }

    /// Reads the current state of `name` in `dir` for a change (absent is
    /// fine). Errors: InvalidArgument for a directory or non-regular file,
    /// TooLarge over `Limits::file_bytes`.
    fn current(&self, dir: &Dir, name: &str, rel: &str) -> Result<Current, WorkspaceError> {
        let md = match dir.symlink_metadata(name) {
            Ok(md) => md,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Current::absent()),
            Err(e) => return Err(WorkspaceError::io(rel, e)),
        };
        if md.size() > self.limits.file_bytes && md.is_file() {
            return Err(WorkspaceError::TooLarge(format!(
                "{rel}: {} bytes; the file tools change files up to {} bytes",
                md.size(),
                self.limits.file_bytes
            )));
        }
        let (mut f, md) = open_regular(dir, name, rel)?;
        let mut content = Vec::with_capacity(md.size() as usize);
        (&mut f)
            .take(self.limits.file_bytes + 1)
            .read_to_end(&mut content)
            .map_err(|e| WorkspaceError::io(rel, e))?;
        if content.len() as u64 > self.limits.file_bytes {
            return Err(WorkspaceError::TooLarge(format!(
                "{rel}: over {} bytes",
                self.limits.file_bytes
            )));
        }
        let (ino, size, mtime) = stamp(&md);
        Ok(Current {
            exists: true,
            hash: hash_bytes(&content),
            content,
            mode: md.mode() & 0o7777,
            uid: md.uid(),
            gid: md.gid(),
            ino,
            size,
            mtime,
        })
    }

    /// Fails when `name` changed since `cur` was read (optimistic check just
    /// before the rename).
    fn unchanged_since(
        &self,
        dir: &Dir,
        name: &str,
        rel: &str,
        cur: &Current,
    ) -> Result<(), WorkspaceError> {
        let now = match dir.symlink_metadata(name) {
            Ok(md) if md.is_file() => Some(stamp(&md)),
            Ok(_) => {
                return Err(WorkspaceError::precondition(
                    rel,
                    "?",
                    "replaced by a non-regular file while being changed",
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(WorkspaceError::io(rel, e)),
        };
        let before = cur.exists.then_some((cur.ino, cur.size, cur.mtime));
        if now != before {
            let hash = self
                .current(dir, name, rel)
                .map(|c| c.hash)
                .unwrap_or_else(|_| "?".into());
            return Err(WorkspaceError::precondition(
                rel,
                &hash,
                "changed by someone else while being written",
            ));
        }
        Ok(())
    }

    /// The unified diff `write_file(path, content)` would make now, for an
    /// approval preview; empty when it cannot be computed (the write itself
    /// then reports why) or either side is binary.
    pub fn diff_for_write(&self, path: &str, content: &[u8]) -> String {
        let Ok(r) = self.resolve(path, true) else {
            return String::new();
        };
        let Some(name) = r.name.as_deref() else {
            return String::new();
        };
        let old = if r.dirs_exist() {
            match self.current(&r.parent, name, &r.rel) {
                Ok(c) => c,
                Err(_) => return String::new(),
            }
        } else {
            Current::absent()
        };
        unified_diff(
            old.exists.then_some(r.rel.as_str()),
            Some(r.rel.as_str()),
            &old.content,
            content,
        )
    }

    /// Puts the staged temp file `tmp` in place of `name` (both in `dir`),
    /// only if `name` is still what `cur` describes: a missing file is
    /// created with `linkat(2)` (fails if one appeared), an existing one is
    /// swapped with `renameat2(RENAME_EXCHANGE)` and the inode that came out
    /// is checked to be the one read (else swapped back). On file systems
    /// without those, a check just before `renameat(2)`. On success `tmp` no
    /// longer exists. Errors: FailedPrecondition with the current hash.
    fn install(
        &self,
        dir: &Dir,
        tmp: &str,
        name: &str,
        rel: &str,
        cur: &Current,
    ) -> Result<(), WorkspaceError> {
        let changed = |this: &Self| {
            let hash = this
                .current(dir, name, rel)
                .map(|c| c.hash)
                .unwrap_or_else(|_| "?".into());
            WorkspaceError::precondition(rel, &hash, "changed by someone else while being written")
        };
        if !cur.exists {
            match dir.hard_link(tmp, dir, name) {
                Ok(()) => {
                    let _ = dir.remove_file(tmp);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(changed(self)),
                Err(_) => {}
            }
        } else {
            match exchange(dir, tmp, name) {
                Ok(()) => {
                    let out = dir.symlink_metadata(tmp).ok();
                    if out.as_ref().map(|m| (m.ino(), m.is_file())) == Some((cur.ino, true)) {
                        let _ = dir.remove_file(tmp);
                        return Ok(());
                    }
                    // Not what we read: put it back.
                    exchange(dir, tmp, name).map_err(|e| WorkspaceError::io(rel, e))?;
                    return Err(changed(self));
                }
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP)
                    ) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(changed(self)),
                Err(e) => return Err(WorkspaceError::io(rel, e)),
            }
        }
        self.unchanged_since(dir, name, rel, cur)?;
        dir.rename(tmp, dir, name)
            .map_err(|e| WorkspaceError::io(rel, e))
    }

    /// Writes `content` to `path` atomically (temp file in the same
    /// directory, fsync, rename, fsync of the directory), creating missing
    /// parent directories. An existing file keeps its permission bits
    /// (setuid/setgid dropped) and, when the daemon is root, its owner; a new
    /// file gets `mode` (default 0o644) and, when root, the parent directory's
    /// owner. With `base_hash`, the file's current hash (or [`ABSENT`]) must
    /// equal it.
    ///
    /// Errors: PermissionDenied (path rules, protected path); InvalidArgument
    /// (a directory, a non-regular file); FailedPrecondition with the current
    /// hash; TooLarge over `Limits::file_bytes`; Io.
    pub fn write_file(
        &self,
        path: &str,
        content: &[u8],
        base_hash: Option<&str>,
        mode: Option<u32>,
    ) -> Result<FileChange, WorkspaceError> {
        if content.len() as u64 > self.limits.file_bytes {
            return Err(WorkspaceError::TooLarge(format!(
                "content is {} bytes; the file tools write files up to {} bytes",
                content.len(),
                self.limits.file_bytes
            )));
        }
        let mut r = self.resolve(path, true)?;
        let Some(name) = r.name.clone() else {
            return Err(WorkspaceError::InvalidArgument(format!(
                "{path:?}: is the workspace root (a directory), not a file"
            )));
        };
        self.check_writable(path, &r.rel)?;
        let cur = if r.dirs_exist() {
            self.current(&r.parent, &name, &r.rel)?
        } else {
            Current::absent()
        };
        if let Some(b) = base_hash.filter(|b| !b.is_empty()) {
            if b != cur.hash {
                return Err(WorkspaceError::precondition(
                    &r.rel,
                    &cur.hash,
                    format!("base hash {b} does not match"),
                ));
            }
        }
        let rel = r.rel.clone();
        let created_dirs = r.create_missing(rel_parent(&rel))?;
        let new_mode = if cur.exists {
            cur.mode & !0o6000
        } else {
            mode.filter(|m| *m != 0).unwrap_or(0o644) & 0o1777
        };
        let owner = if cur.exists {
            Some((cur.uid, cur.gid))
        } else {
            dir_owner(&r.parent)
        };
        let result = (|| {
            let tmp = stage_temp(&r.parent, content, new_mode, owner, &rel)?;
            if let Err(e) = self.install(&r.parent, &tmp, &name, &rel, &cur) {
                let _ = r.parent.remove_file(&tmp);
                return Err(e);
            }
            sync_dir(&r.parent);
            Ok(())
        })();
        if let Err(e) = result {
            remove_created_dirs(&self.root, &created_dirs);
            return Err(e);
        }
        Ok(FileChange {
            path: rel.clone(),
            kind: if cur.exists {
                ChangeKind::Modified
            } else {
                ChangeKind::Added
            },
            from_path: None,
            old_hash: cur.hash.clone(),
            new_hash: hash_bytes(content),
            old_mode: cur.exists.then_some(cur.mode),
            new_mode: Some(new_mode),
            patch: unified_diff(
                cur.exists.then_some(rel.as_str()),
                Some(rel.as_str()),
                &cur.content,
                content,
            ),
        })
    }
}

/// Opens `name` in `dir` for reading: `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`,
/// after an `lstat` that must say regular file, and an `fstat` of the open
/// file that must agree (so a FIFO or device never blocks, and a swap to a
/// symlink fails the open).
pub(crate) fn open_regular(
    dir: &Dir,
    name: &str,
    rel: &str,
) -> Result<(File, Metadata), WorkspaceError> {
    let md = dir
        .symlink_metadata(name)
        .map_err(|e| WorkspaceError::io(rel, e))?;
    check_regular(&md, rel)?;
    let mut opts = OpenOptions::new();
    opts.read(true)
        .follow(FollowSymlinks::No)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    let f = dir.open_with(name, &opts).map_err(|e| {
        if resolve::is_symlink_error(&e) {
            WorkspaceError::denied(rel, rel, "replaced by a symlink while being opened")
        } else {
            WorkspaceError::io(rel, e)
        }
    })?;
    let md = f.metadata().map_err(|e| WorkspaceError::io(rel, e))?;
    check_regular(&md, rel)?;
    Ok((f, md))
}

fn check_regular(md: &Metadata, rel: &str) -> Result<(), WorkspaceError> {
    let ft = md.file_type();
    if ft.is_file() {
        return Ok(());
    }
    let what = if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symlink"
    } else {
        use cap_std::fs::FileTypeExt;
        if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_char_device() || ft.is_block_device() {
            "a device"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        }
    };
    Err(WorkspaceError::InvalidArgument(format!(
        "{rel}: is {what}; the file tools read and write regular files only"
    )))
}

/// `renameat2(RENAME_EXCHANGE)` of two names in `dir` (single components,
/// never traversed: rename(2)).
fn exchange(dir: &Dir, a: &str, b: &str) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let ca = std::ffi::CString::new(a).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let cb = std::ffi::CString::new(b).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    if a.contains('/') || b.contains('/') {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let fd = dir.as_raw_fd();
    // SAFETY: two NUL-terminated names and a directory fd we hold.
    let r = unsafe { libc::renameat2(fd, ca.as_ptr(), fd, cb.as_ptr(), libc::RENAME_EXCHANGE) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// uid/gid of `dir` when the daemon runs as root (new files then belong to
/// the directory's owner, not to root); `None` otherwise.
fn dir_owner(dir: &Dir) -> Option<(u32, u32)> {
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    dir.dir_metadata().ok().map(|m| (m.uid(), m.gid()))
}

/// Creates a temp file in `dir` holding `content` with `mode` (and owner),
/// fsynced; returns its name.
fn stage_temp(
    dir: &Dir,
    content: &[u8],
    mode: u32,
    owner: Option<(u32, u32)>,
    rel: &str,
) -> Result<String, WorkspaceError> {
    let name = format!(".warden-tmp-{}", uuid::Uuid::now_v7().simple());
    let mut opts = OpenOptions::new();
    opts.write(true)
        .create_new(true)
        .follow(FollowSymlinks::No)
        .mode(0o600);
    let f = dir
        .open_with(&name, &opts)
        .map_err(|e| WorkspaceError::io(rel, e))?;
    let res = (|| -> io::Result<()> {
        let mut f = f.into_std();
        f.write_all(content)?;
        if let Some((uid, gid)) = owner {
            if unsafe { libc::geteuid() } == 0 {
                std::os::unix::fs::fchown(&f, Some(uid), Some(gid))?;
            }
        }
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.sync_all()
    })();
    if let Err(e) = res {
        let _ = dir.remove_file(&name);
        return Err(WorkspaceError::io(rel, e));
    }
    Ok(name)
}

fn sync_dir(dir: &Dir) {
    use std::os::fd::{AsFd, AsRawFd, FromRawFd};
    // The handle may be `O_PATH`, which fsync(2) refuses with EBADF: sync a
    // read-only descriptor of the same directory.
    // SAFETY: openat of "." relative to a valid directory fd; a fresh fd or -1.
    let fd = unsafe {
        libc::openat(
            dir.as_fd().as_raw_fd(),
            c".".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd >= 0 {
        // SAFETY: fresh fd, owned by the File.
        let _ = unsafe { std::fs::File::from_raw_fd(fd) }.sync_all();
    }
}

/// Removes directories created for a change that was then abandoned,
/// innermost first (only when empty).
fn remove_created_dirs(root: &Dir, created: &[String]) {
    for d in created.iter().rev() {
        let _ = root.remove_dir(d);
    }
}

/// Unified diff (3 lines of context) between two versions of a file; empty
/// when either side is not UTF-8 or looks binary.
pub fn unified_diff(
    old_path: Option<&str>,
    new_path: Option<&str>,
    old: &[u8],
    new: &[u8],
) -> String {
    if looks_binary(old) || looks_binary(new) {
        return String::new();
    }
    let (Ok(o), Ok(n)) = (std::str::from_utf8(old), std::str::from_utf8(new)) else {
        return String::new();
    };
    if o == n {
        return String::new();
    }
    let a = old_path
        .map(|p| format!("a/{p}"))
        .unwrap_or_else(|| "/dev/null".into());
    let b = new_path
        .map(|p| format!("b/{p}"))
        .unwrap_or_else(|| "/dev/null".into());
    similar::TextDiff::from_lines(o, n)
        .unified_diff()
        .context_radius(3)
        .header(&a, &b)
        .to_string()
}

/// The window as text and the leading bytes dropped: `None` when it is not UTF-8, except for a character
/// cut at the window's edges (dropped).
fn utf8_window(w: &[u8], cut_start: bool, cut_end: bool) -> Option<(String, usize)> {
    let mut a = 0;
    if cut_start {
        while a < w.len() && a < 3 && (w[a] & 0xC0) == 0x80 {
            a += 1;
        }
    }
    let w = &w[a..];
    match std::str::from_utf8(w) {
        Ok(s) => Some((s.to_string(), a)),
        Err(e) if cut_end && e.error_len().is_none() => Some((
            std::str::from_utf8(&w[..e.valid_up_to()]).ok()?.to_string(),
            a,
        )),
        Err(_) => None,
    }
}

mod apply;

#[cfg(test)]
mod tests;
