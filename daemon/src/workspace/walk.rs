//! `list_dir` and `grep`: directory walks through the cap-std handle.
//!
//! Every directory is opened with `O_NOFOLLOW` relative to its parent's
//! handle; symlinks are listed but never followed by a walk; files are opened
//! with [`super::open_regular`] (regular files only, never blocking). The
//! `ignore` crate is used only to match `.gitignore` lines we read through the
//! handle, and `regex` only to match lines.

use cap_fs_ext::DirExt;
use cap_std::fs::{Dir, MetadataExt};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;
use std::io::Read;

use super::resolve::join_rel;
use super::{open_regular, Workspace, WorkspaceError};

/// Default and maximum entries of one `list_dir`.
pub const LIST_DEFAULT: usize = 1000;
pub const LIST_MAX: usize = 10_000;
/// Default and maximum matches of one `grep`.
pub const GREP_DEFAULT: usize = 500;
pub const GREP_MAX: usize = 10_000;
/// Longest pattern accepted, bytes.
pub const MAX_PATTERN_BYTES: usize = 4096;
/// Longest line text returned by grep, bytes (longer lines are cut).
pub const MAX_LINE_BYTES: usize = 1000;
/// Most bytes of paths and text one listing or search returns (it is then
/// truncated), so an answer always fits a 4 MiB gRPC message.
pub const MAX_RESULT_BYTES: usize = 2 << 20;

/// Kind of a listed entry (not following symlinks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    /// FIFO, socket, device.
    Other,
}

impl EntryKind {
    /// `file`, `dir`, `symlink`, `other` (proto `DirEntry.kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Dir => "dir",
            EntryKind::Symlink => "symlink",
            EntryKind::Other => "other",
        }
    }
}

/// One listed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntryInfo {
    /// Path relative to the root. Names that are not UTF-8 or hold control
    /// characters are shown escaped (`\n`, `\xff`) and cannot be used as paths.
    pub path: String,
    pub kind: EntryKind,
    /// `st_size` (bytes; for a symlink the target's length).
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
}

/// The answer of [`Workspace::list_dir`].
#[derive(Debug, Clone, Default)]
pub struct ListResult {
    /// Depth-first, sorted by name within each directory.
    pub entries: Vec<DirEntryInfo>,
    /// The entry limit, the walk cap or [`MAX_RESULT_BYTES`] cut the listing.
    pub truncated: bool,
    /// Bytes of paths returned (approximate, for the size cap).
    bytes: usize,
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepMatch {
    pub path: String,
    /// 1-based line number.
    pub line: u64,
    /// The line as filtered (redacted), cut at [`MAX_LINE_BYTES`].
    pub text: String,
}

/// The answer of [`Workspace::grep`].
#[derive(Debug, Clone, Default)]
pub struct GrepResult {
    pub matches: Vec<GrepMatch>,
    /// The match limit or the walk cap cut the search.
    pub truncated: bool,
    /// Returned lines the filter changed (something was redacted in them).
    pub redactions: u32,
    /// Files searched.
    pub files: u64,
    /// Files skipped: binary, over the size cap, unreadable.
    pub skipped: u64,
}

/// A name for display: itself when UTF-8 without control characters, else
/// escaped.
fn display_name(name: &std::ffi::OsStr) -> (String, bool) {
    use std::os::unix::ffi::OsStrExt;
    match name.to_str() {
        Some(s) if !s.chars().any(char::is_control) => (s.to_string(), true),
        _ => (name.as_bytes().escape_ascii().to_string(), false),
    }
}

struct Ignores {
    stack: Vec<(String, Gitignore)>,
}

impl Ignores {
    fn push(&mut self, dir: &Dir, rel: &str) -> bool {
        let Ok((mut f, md)) = open_regular(dir, ".gitignore", &join_rel(rel, ".gitignore")) else {
            return false;
        };
        if md.size() > 1 << 20 {
            return false;
        }
        let mut text = String::new();
        if f.read_to_string(&mut text).is_err() {
            return false;
        }
        let mut b = GitignoreBuilder::new("");
        for line in text.lines() {
            let _ = b.add_line(None, line);
        }
        match b.build() {
            Ok(gi) => {
                self.stack.push((rel.to_string(), gi));
                true
            }
            Err(_) => false,
        }
    }

    fn ignored(&self, rel: &str, is_dir: bool) -> bool {
        for (base, gi) in self.stack.iter().rev() {
            let sub = if base.is_empty() {
                rel
            } else {
                match rel
                    .strip_prefix(base.as_str())
                    .and_then(|r| r.strip_prefix('/'))
                {
                    Some(s) => s,
                    None => continue,
                }
            };
            match gi.matched(sub, is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        false
    }
}

/// Where a walk starts: a directory handle, or one file.
enum Start {
    Dir(Dir, String),
    File(Dir, String, String),
}

impl Workspace {
    fn start(&self, path: &str) -> Result<Start, WorkspaceError> {
        let r = self.resolve(path, false)?;
        let Some(name) = r.name.clone() else {
            return Ok(Start::Dir(r.parent, String::new()));
        };
        if !r.dirs_exist() {
            return Err(WorkspaceError::NotFound(r.rel));
        }
        let md = r
            .parent
            .symlink_metadata(&name)
            .map_err(|e| WorkspaceError::io(&r.rel, e))?;
        if md.is_dir() {
            let d = r.parent.open_dir_nofollow(&name).map_err(|e| {
                if super::resolve::is_symlink_error(&e) {
                    WorkspaceError::denied(path, &r.rel, "replaced by a symlink while being opened")
                } else {
                    WorkspaceError::io(&r.rel, e)
                }
            })?;
            Ok(Start::Dir(d, r.rel))
        } else {
            Ok(Start::File(r.parent, name, r.rel))
        }
    }

    /// Lists `path` (a directory, or one file) down to `depth` levels (0 and
    /// 1 both mean the directory itself), at most `limit` entries (0 means
    /// [`LIST_DEFAULT`], at most [`LIST_MAX`]). All entries are listed;
    /// the walk does not descend into `.git`, into directories ignored by
    /// `.gitignore` files, nor through symlinks.
    ///
    /// Errors: NotFound, PermissionDenied (path rules), InvalidArgument for a
    /// depth over `Limits::max_depth`.
    pub fn list_dir(
        &self,
        path: &str,
        depth: u32,
        limit: usize,
    ) -> Result<ListResult, WorkspaceError> {
        let depth = depth.max(1);
        if depth > self.limits.max_depth {
            return Err(WorkspaceError::InvalidArgument(format!(
                "depth {depth}: at most {}",
                self.limits.max_depth
            )));
        }
        let limit = if limit == 0 {
            LIST_DEFAULT
        } else {
            limit.min(LIST_MAX)
        };
        let mut out = ListResult::default();
        match self.start(path)? {
            Start::File(dir, name, rel) => {
                let md = dir
                    .symlink_metadata(&name)
                    .map_err(|e| WorkspaceError::io(&rel, e))?;
                out.entries.push(info(rel, &md));
            }
            Start::Dir(dir, rel) => {
                let mut ign = Ignores { stack: vec![] };
                if !rel.is_empty() {
                    // .gitignore files of the ancestors apply too.
                    self.load_ancestor_ignores(&rel, &mut ign);
                }
                let mut visited = 0usize;
                self.list_walk(
                    &dir,
                    &rel,
                    1,
                    depth,
                    limit,
                    &mut ign,
                    &mut visited,
                    &mut out,
                );
            }
        }
        Ok(out)
    }

    fn load_ancestor_ignores(&self, rel: &str, ign: &mut Ignores) {
        let mut cur = match self.root.try_clone() {
            Ok(d) => d,
            Err(_) => return,
        };
        let mut at = String::new();
        ign.push(&cur, "");
        let comps: Vec<&str> = rel.split('/').collect();
        for c in &comps[..comps.len().saturating_sub(1)] {
            match cur.open_dir_nofollow(c) {
                Ok(d) => cur = d,
                Err(_) => return,
            }
            at = join_rel(&at, c);
            ign.push(&cur, &at);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn list_walk(
        &self,
        dir: &Dir,
        rel: &str,
        level: u32,
        depth: u32,
        limit: usize,
        ign: &mut Ignores,
        visited: &mut usize,
        out: &mut ListResult,
    ) {
        let pushed = ign.push(dir, rel);
        let entries = sorted_entries(dir);
        for (name, md) in entries {
            *visited += 1;
            if out.entries.len() >= limit
                || *visited > self.limits.walk_entries
                || out.bytes > MAX_RESULT_BYTES
            {
                out.truncated = true;
                break;
            }
            let (shown, usable) = display_name(&name);
            let path = join_rel(rel, &shown);
            let is_dir = md.is_dir();
            out.bytes += path.len() + 32;
            out.entries.push(info(path.clone(), &md));
            if is_dir && usable && level < depth && shown != ".git" && !ign.ignored(&path, true) {
                if let Ok(sub) = dir.open_dir_nofollow(&name) {
                    self.list_walk(&sub, &path, level + 1, depth, limit, ign, visited, out);
                }
            }
            if out.truncated {
                break;
            }
        }
        if pushed {
            ign.stack.pop();
        }
    }

    /// Searches `path` (a file, or a directory walked like `list_dir` but
    /// also skipping ignored files, symlinks and non-regular files) for lines
    /// matching `pattern` (Rust `regex` syntax), at most `limit` matches (0
    /// means [`GREP_DEFAULT`], at most [`GREP_MAX`]).
    ///
    /// `filter(path, text)` (the redactor) is applied to each file's text
    /// *before* matching, so a pattern can neither show nor probe for what
    /// the filter hides; it returns the filtered text and how many things it
    /// replaced, or `None` to skip the file (a secret file the policy denies).
    /// Binary files and files over `Limits::grep_file_bytes` are skipped.
    ///
    /// Errors: InvalidArgument for an empty, over-long or invalid pattern;
    /// NotFound; PermissionDenied (path rules).
    pub fn grep(
        &self,
        pattern: &str,
        path: &str,
        case_insensitive: bool,
        limit: usize,
        filter: &dyn Fn(&str, &str) -> Option<(String, u32)>,
    ) -> Result<GrepResult, WorkspaceError> {
        if pattern.is_empty() {
            return Err(WorkspaceError::InvalidArgument("empty pattern".into()));
        }
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(WorkspaceError::InvalidArgument(format!(
                "pattern is {} bytes; at most {MAX_PATTERN_BYTES}",
                pattern.len()
            )));
        }
        let re = regex::RegexBuilder::new(pattern)
            .case_insensitive(case_insensitive)
            .size_limit(8 << 20)
            .build()
            .map_err(|e| WorkspaceError::InvalidArgument(format!("bad pattern: {e}")))?;
        let limit = if limit == 0 {
            GREP_DEFAULT
        } else {
            limit.min(GREP_MAX)
        };
        let mut g = Grep {
            re,
            limit,
            filter,
            out: GrepResult::default(),
            bytes: 0,
            visited: 0,
        };
        match self.start(path)? {
            Start::File(dir, name, rel) => self.grep_file(&dir, &name, &rel, &mut g),
            Start::Dir(dir, rel) => {
                let mut ign = Ignores { stack: vec![] };
                if !rel.is_empty() {
                    self.load_ancestor_ignores(&rel, &mut ign);
                }
                self.grep_walk(&dir, &rel, &mut ign, &mut g);
            }
        }
        Ok(g.out)
    }

    fn grep_walk(&self, dir: &Dir, rel: &str, ign: &mut Ignores, g: &mut Grep<'_>) {
        let pushed = ign.push(dir, rel);
        for (name, md) in sorted_entries(dir) {
            g.visited += 1;
            if g.visited > self.limits.walk_entries {
                g.out.truncated = true;
            }
            if g.out.truncated {
                break;
            }
            let (shown, usable) = display_name(&name);
            if !usable {
                g.out.skipped += 1;
                continue;
            }
            let path = join_rel(rel, &shown);
            if md.is_dir() {
                if shown != ".git" && !ign.ignored(&path, true) {
                    if let Ok(sub) = dir.open_dir_nofollow(&name) {
                        self.grep_walk(&sub, &path, ign, g);
                    }
                }
            } else if md.is_file() && !ign.ignored(&path, false) {
                self.grep_file(dir, &shown, &path, g);
            }
        }
        if pushed {
            ign.stack.pop();
        }
    }

    fn grep_file(&self, dir: &Dir, name: &str, rel: &str, g: &mut Grep<'_>) {
        let Ok((f, md)) = open_regular(dir, name, rel) else {
            g.out.skipped += 1;
            return;
        };
        if md.size() > self.limits.grep_file_bytes {
            g.out.skipped += 1;
            return;
        }
        let mut data = Vec::with_capacity(md.size() as usize);
        if f.take(self.limits.grep_file_bytes)
            .read_to_end(&mut data)
            .is_err()
            || super::looks_binary(&data)
        {
            g.out.skipped += 1;
            return;
        }
        g.out.files += 1;
        let text = String::from_utf8_lossy(&data);
        let raw: Vec<&str> = text.lines().collect();
        // One filter pass over the whole file: secrets that need context
        // (a key name on the line) are seen; when it changed nothing, the raw
        // lines are what the client may see.
        let Some((whole, n)) = (g.filter)(rel, &text) else {
            g.out.files -= 1;
            g.out.skipped += 1;
            return;
        };
        let filtered: Vec<String> = if n == 0 && whole == *text {
            raw.iter().map(|s| s.to_string()).collect()
        } else {
            let wl: Vec<&str> = whole.lines().collect();
            if wl.len() == raw.len() {
                wl.iter().map(|s| s.to_string()).collect()
            } else {
                // A redaction spanned lines: filter line by line.
                let mut v = Vec::with_capacity(raw.len());
                for l in &raw {
                    match (g.filter)(rel, l) {
                        Some((f, _)) => v.push(f),
                        None => {
                            g.out.skipped += 1;
                            return;
                        }
                    }
                }
                v
            }
        };
        for (i, line) in filtered.iter().enumerate() {
            if g.re.is_match(line) {
                if g.out.matches.len() >= g.limit || g.bytes > MAX_RESULT_BYTES {
                    g.out.truncated = true;
                    return;
                }
                if line.as_str() != raw[i] {
                    g.out.redactions += 1;
                }
                g.bytes += rel.len() + line.len().min(MAX_LINE_BYTES) + 16;
                g.out.matches.push(GrepMatch {
                    path: rel.to_string(),
                    line: i as u64 + 1,
                    text: cut(line, MAX_LINE_BYTES),
                });
            }
        }
    }
}

struct Grep<'a> {
    re: regex::Regex,
    limit: usize,
    filter: &'a dyn Fn(&str, &str) -> Option<(String, u32)>,
    out: GrepResult,
    /// Bytes of paths and text returned so far.
    bytes: usize,
    visited: usize,
}

fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn info(path: String, md: &cap_std::fs::Metadata) -> DirEntryInfo {
    let ft = md.file_type();
    let kind = if ft.is_symlink() {
        EntryKind::Symlink
    } else if ft.is_dir() {
        EntryKind::Dir
    } else if ft.is_file() {
        EntryKind::File
    } else {
        EntryKind::Other
    };
    DirEntryInfo {
        path,
        kind,
        size: md.size(),
        mode: md.mode() & 0o7777,
    }
}

/// The entries of `dir` with their `lstat` metadata, sorted by name.
fn sorted_entries(dir: &Dir) -> Vec<(std::ffi::OsString, cap_std::fs::Metadata)> {
    let Ok(rd) = dir.entries() else {
        return vec![];
    };
    let mut v: Vec<_> = rd
        .take(200_000)
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            dir.symlink_metadata(&name).ok().map(|md| (name, md))
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}
