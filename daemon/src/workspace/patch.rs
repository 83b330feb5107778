//! Unified diff parsing (GNU diffutils "Unified Format", and git's extended
//! headers from git-diff(1) "GENERATING PATCH TEXT WITH -P") and exact hunk
//! application. Pure: no file system access.

use super::WorkspaceError;

/// Largest accepted patch text, bytes.
pub const MAX_PATCH_BYTES: usize = 8 << 20;
/// Most file sections in one patch.
pub const MAX_PATCH_FILES: usize = 1000;
/// How far (lines) a hunk may have moved from the line its header names.
pub const MAX_HUNK_OFFSET: usize = 1000;

/// One line of a hunk body, with its line terminator as it will be written
/// (`"\n"`, or none after `\ No newline at end of file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HunkLine {
    Context(String),
    Remove(String),
    Add(String),
}

/// One `@@ -a,b +c,d @@` hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    pub old_start: usize,
    pub old_len: usize,
    pub new_start: usize,
    pub new_len: usize,
    /// The `@@ ... @@` header line as written.
    pub header: String,
    pub lines: Vec<HunkLine>,
}

/// One file section of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePatch {
    /// Path before (`None` for a created file), prefix (`a/`) stripped.
    pub old_path: Option<String>,
    /// Path after (`None` for a deleted file), prefix (`b/`) stripped.
    pub new_path: Option<String>,
    /// git `old mode` / `deleted file mode`.
    pub old_mode: Option<u32>,
    /// git `new mode` / `new file mode`.
    pub new_mode: Option<u32>,
    /// git `rename from` / `rename to` present.
    pub rename: bool,
    pub hunks: Vec<Hunk>,
    /// The section's text as it appeared in the patch.
    pub text: String,
}

impl FilePatch {
    /// The path a message should name.
    pub fn display_path(&self) -> &str {
        self.new_path
            .as_deref()
            .or(self.old_path.as_deref())
            .unwrap_or("?")
    }
}

fn bad(msg: String) -> WorkspaceError {
    WorkspaceError::InvalidArgument(msg)
}

/// Parses a unified diff into file sections.
///
/// Accepts git-style (`diff --git`, extended headers, quoted names) and plain
/// `---`/`+++` diffs; text before, between and after sections (mail headers,
/// commit messages, signatures) is ignored. Errors (InvalidArgument, naming
/// the patch line): no file section, binary patches, copies, a malformed
/// hunk header, a hunk whose body does not match its line counts, an
/// unsupported file mode (symlinks, submodules).
pub fn parse(patch: &str) -> Result<Vec<FilePatch>, WorkspaceError> {
    if patch.len() > MAX_PATCH_BYTES {
        return Err(WorkspaceError::TooLarge(format!(
            "patch is {} bytes; at most {MAX_PATCH_BYTES}",
            patch.len()
        )));
    }
    if patch.contains('\0') {
        return Err(bad("patch contains a NUL byte".into()));
    }
    let lines: Vec<&str> = patch.split_inclusive('\n').collect();
    let mut files = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.starts_with("diff --git ") {
            let (fp, next) = parse_git_section(&lines, i)?;
            files.push(fp);
            i = next;
        } else if line.starts_with("--- ")
            && lines.get(i + 1).is_some_and(|l| l.starts_with("+++ "))
        {
            let old = parse_header_path(strip_eol(&line[4..]), i + 1)?;
            let new = parse_header_path(strip_eol(&lines[i + 1][4..]), i + 2)?;
            let (old, new) = strip_plain_prefixes(old, new);
            let (hunks, next) = parse_hunks(&lines, i + 2, new.as_deref().or(old.as_deref()))?;
            files.push(FilePatch {
                old_path: old,
                new_path: new,
                old_mode: None,
                new_mode: None,
                rename: false,
                hunks,
                text: lines[i..next].concat(),
            });
            i = next;
        } else if line.starts_with("@@ ") {
            return Err(bad(format!(
                "patch line {}: hunk without a file header (---/+++)",
                i + 1
            )));
        } else {
            i += 1;
        }
        if files.len() > MAX_PATCH_FILES {
            return Err(WorkspaceError::TooLarge(format!(
                "patch touches more than {MAX_PATCH_FILES} files"
            )));
        }
    }
    if files.is_empty() {
        return Err(bad(
            "no file changes found in patch (expected a unified diff with ---/+++ headers)".into(),
        ));
    }
    Ok(files)
}

fn strip_eol(s: &str) -> &str {
    let s = s.strip_suffix('\n').unwrap_or(s);
    s.strip_suffix('\r').unwrap_or(s)
}

/// Plain diffs: strip `a/` and `b/` when both sides carry them (git's and
/// most tools' convention, `patch -p1`).
fn strip_plain_prefixes(
    old: Option<String>,
    new: Option<String>,
) -> (Option<String>, Option<String>) {
    let has = |p: &Option<String>, pre: &str| p.as_deref().is_none_or(|s| s.starts_with(pre));
    if has(&old, "a/") && has(&new, "b/") && (old.is_some() || new.is_some()) {
        (
            old.map(|s| s[2..].to_string()),
            new.map(|s| s[2..].to_string()),
        )
    } else {
        (old, new)
    }
}

/// A `---`/`+++` path: `/dev/null` is `None`; a quoted name is C-unquoted;
/// otherwise the name ends at a tab (a timestamp follows).
fn parse_header_path(s: &str, lineno: usize) -> Result<Option<String>, WorkspaceError> {
    let name = if s.starts_with('"') {
        let (name, _) = unquote(s, lineno)?;
        name
    } else {
        s.split('\t').next().unwrap_or("").to_string()
    };
    if name.is_empty() {
        return Err(bad(format!("patch line {lineno}: empty file name")));
    }
    if name == "/dev/null" {
        return Ok(None);
    }
    Ok(Some(name))
}

/// C-style unquoting of a git quoted name (`"a/x\ty"`, octal escapes for
/// bytes). Returns the name and the rest after the closing quote.
fn unquote(s: &str, lineno: usize) -> Result<(String, &str), WorkspaceError> {
    let b = s.as_bytes();
    let mut out: Vec<u8> = Vec::new();
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let name = String::from_utf8(out).map_err(|_| {
                    bad(format!(
                        "patch line {lineno}: quoted file name is not UTF-8"
                    ))
                })?;
                return Ok((name, &s[i + 1..]));
            }
            b'\\' => {
                i += 1;
                let c = *b
                    .get(i)
                    .ok_or_else(|| bad(format!("patch line {lineno}: unterminated quoted name")))?;
                match c {
                    b'n' => out.push(b'\n'),
                    b't' => out.push(b'\t'),
                    b'r' => out.push(b'\r'),
                    b'a' => out.push(7),
                    b'b' => out.push(8),
                    b'f' => out.push(12),
                    b'v' => out.push(11),
                    b'"' | b'\\' => out.push(c),
                    b'0'..=b'3' => {
                        let oct = s
                            .get(i..i + 3)
                            .ok_or_else(|| bad(format!("patch line {lineno}: bad octal escape")))?;
                        let v = u8::from_str_radix(oct, 8).map_err(|_| {
                            bad(format!("patch line {lineno}: bad octal escape \\{oct}"))
                        })?;
                        out.push(v);
                        i += 2;
                    }
                    _ => {
                        return Err(bad(format!(
                            "patch line {lineno}: unknown escape \\{} in quoted name",
                            c as char
                        )))
                    }
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    Err(bad(format!(
        "patch line {lineno}: unterminated quoted name"
    )))
}

fn parse_mode(s: &str, lineno: usize) -> Result<u32, WorkspaceError> {
    let m = u32::from_str_radix(strip_eol(s).trim(), 8).map_err(|_| {
        bad(format!(
            "patch line {lineno}: bad file mode {:?}",
            strip_eol(s)
        ))
    })?;
    match m & 0o170000 {
        0o100000 => Ok(m),
        0o120000 => Err(WorkspaceError::PermissionDenied {
            path: String::new(),
            component: format!("mode {m:o}"),
            reason: format!("patch line {lineno}: patches may not create or change symlinks"),
        }),
        _ => Err(bad(format!(
            "patch line {lineno}: unsupported file mode {m:o} (only regular files)"
        ))),
    }
}

/// `a/X b/Y` of a `diff --git` line, used when no `---`/`+++` follow (mode
/// change, pure rename, empty file).
fn parse_git_line_paths(rest: &str, lineno: usize) -> Result<(String, String), WorkspaceError> {
    let rest = strip_eol(rest);
    let (a, b) = if rest.starts_with('"') {
        let (a, tail) = unquote(rest, lineno)?;
        let tail = tail.strip_prefix(' ').unwrap_or(tail);
        let b = if tail.starts_with('"') {
            unquote(tail, lineno)?.0
        } else {
            tail.to_string()
        };
        (a, b)
    } else if let Some(pos) = rest.find(" \"") {
        (
            rest[..pos].to_string(),
            unquote(&rest[pos + 1..], lineno)?.0,
        )
    } else {
        // Same name on both sides: split in the middle; else at the one " b/".
        let half = rest.len().saturating_sub(1) / 2;
        if rest.len() >= 5
            && (rest.len() - 1) % 2 == 0
            && rest.is_char_boundary(half)
            && rest.as_bytes()[half] == b' '
            && rest[..half].strip_prefix("a/") == rest[half + 1..].strip_prefix("b/")
        {
            (rest[..half].to_string(), rest[half + 1..].to_string())
        } else if rest.matches(" b/").count() == 1 {
            let (a, b) = rest.split_once(" b/").expect("one match");
            (a.to_string(), format!("b/{b}"))
        } else {
            return Err(bad(format!(
                "patch line {lineno}: cannot parse the names of diff --git"
            )));
        }
    };
    let strip = |s: String, pre: &str| s.strip_prefix(pre).map(str::to_string).unwrap_or(s);
    Ok((strip(a, "a/"), strip(b, "b/")))
}

fn parse_git_section(lines: &[&str], start: usize) -> Result<(FilePatch, usize), WorkspaceError> {
    let line_names = parse_git_line_paths(&lines[start]["diff --git ".len()..], start + 1);
    let (mut old, mut new) = match &line_names {
        Ok((a, b)) => (Some(a.clone()), Some(b.clone())),
        Err(_) => (None, None),
    };
    let mut fp = FilePatch {
        old_path: None,
        new_path: None,
        old_mode: None,
        new_mode: None,
        rename: false,
        hunks: vec![],
        text: String::new(),
    };
    let mut created = false;
    let mut deleted = false;
    let mut i = start + 1;
    let mut saw_headers = false;
    while i < lines.len() {
        let l = lines[i];
        let lineno = i + 1;
        if l.starts_with("diff --git ") || l.starts_with("@@ ") {
            break;
        }
        if let Some(r) = l.strip_prefix("--- ") {
            let plus = lines
                .get(i + 1)
                .filter(|n| n.starts_with("+++ "))
                .ok_or_else(|| bad(format!("patch line {}: --- without +++", lineno)))?;
            let o = parse_header_path(strip_eol(r), lineno)?;
            let n = parse_header_path(strip_eol(&plus[4..]), lineno + 1)?;
            old = o.map(|s| s.strip_prefix("a/").map(str::to_string).unwrap_or(s));
            new = n.map(|s| s.strip_prefix("b/").map(str::to_string).unwrap_or(s));
            saw_headers = true;
            i += 2;
            break;
        }
        if let Some(m) = l.strip_prefix("old mode ") {
            fp.old_mode = Some(parse_mode(m, lineno)?);
        } else if let Some(m) = l.strip_prefix("new mode ") {
            fp.new_mode = Some(parse_mode(m, lineno)?);
        } else if let Some(m) = l.strip_prefix("new file mode ") {
            fp.new_mode = Some(parse_mode(m, lineno)?);
            created = true;
        } else if let Some(m) = l.strip_prefix("deleted file mode ") {
            fp.old_mode = Some(parse_mode(m, lineno)?);
            deleted = true;
        } else if let Some(p) = l.strip_prefix("rename from ") {
            old = Some(git_name(p, lineno)?);
            fp.rename = true;
        } else if let Some(p) = l.strip_prefix("rename to ") {
            new = Some(git_name(p, lineno)?);
            fp.rename = true;
        } else if l.starts_with("copy from ") || l.starts_with("copy to ") {
            return Err(bad(format!(
                "patch line {lineno}: copies are not supported"
            )));
        } else if l.starts_with("GIT binary patch") || l.starts_with("Binary files ") {
            return Err(bad(format!(
                "patch line {lineno}: binary patches are not supported"
            )));
        } else if l.starts_with("index ")
            || l.starts_with("similarity index ")
            || l.starts_with("dissimilarity index ")
        {
        } else {
            // End of the extended headers (next section's preamble, etc.).
            break;
        }
        i += 1;
    }
    if !saw_headers && !fp.rename {
        // Only the diff --git line names the file (mode change, empty file).
        line_names?;
    }
    if fp.rename && (old.is_none() || new.is_none()) {
        return Err(bad(format!(
            "patch line {}: rename without both 'rename from' and 'rename to'",
            start + 1
        )));
    }
    if created {
        old = None;
    }
    if deleted {
        new = None;
    }
    let (hunks, next) = if saw_headers {
        parse_hunks(lines, i, new.as_deref().or(old.as_deref()))?
    } else {
        (vec![], i)
    };
    fp.old_path = old;
    fp.new_path = new;
    fp.hunks = hunks;
    fp.text = lines[start..next].concat();
    Ok((fp, next))
}

fn git_name(s: &str, lineno: usize) -> Result<String, WorkspaceError> {
    let s = strip_eol(s);
    if s.starts_with('"') {
        Ok(unquote(s, lineno)?.0)
    } else {
        Ok(s.to_string())
    }
}

/// `@@ -a[,b] +c[,d] @@ ...`
fn parse_hunk_header(
    l: &str,
    lineno: usize,
) -> Result<(usize, usize, usize, usize), WorkspaceError> {
    let err = || {
        bad(format!(
            "patch line {lineno}: malformed hunk header {:?}",
            strip_eol(l)
        ))
    };
    let body = l.strip_prefix("@@ -").ok_or_else(err)?;
    let end = body.find(" @@").ok_or_else(err)?;
    let (o, n) = body[..end].split_once(" +").ok_or_else(err)?;
    let range = |s: &str| -> Result<(usize, usize), WorkspaceError> {
        let (a, b) = match s.split_once(',') {
            Some((a, b)) => (a, Some(b)),
            None => (s, None),
        };
        let a: usize = a.parse().map_err(|_| err())?;
        let b: usize = match b {
            Some(b) => b.parse().map_err(|_| err())?,
            None => 1,
        };
        Ok((a, b))
    };
    let (a, b) = range(o)?;
    let (c, d) = range(n)?;
    Ok((a, b, c, d))
}

fn parse_hunks(
    lines: &[&str],
    mut i: usize,
    file: Option<&str>,
) -> Result<(Vec<Hunk>, usize), WorkspaceError> {
    let file = file.unwrap_or("?");
    let mut hunks = Vec::new();
    while i < lines.len() && lines[i].starts_with("@@ ") {
        let header_no = i + 1;
        let (old_start, old_len, new_start, new_len) = parse_hunk_header(lines[i], header_no)?;
        let mut h = Hunk {
            old_start,
            old_len,
            new_start,
            new_len,
            header: strip_eol(lines[i]).to_string(),
            lines: vec![],
        };
        i += 1;
        let (mut o, mut n) = (0usize, 0usize);
        while o < old_len || n < new_len {
            let Some(l) = lines.get(i) else {
                return Err(bad(format!(
                    "{file}: hunk {} ({}): patch ends after {o} of {old_len} old and {n} of {new_len} new lines",
                    hunks.len() + 1,
                    h.header
                )));
            };
            let text = l.get(1..).unwrap_or("").to_string();
            match l.as_bytes().first() {
                Some(b' ') => {
                    o += 1;
                    n += 1;
                    h.lines.push(HunkLine::Context(text));
                }
                // An empty line: context whose leading space was stripped.
                Some(b'\n') | Some(b'\r') => {
                    o += 1;
                    n += 1;
                    h.lines.push(HunkLine::Context(l.to_string()));
                }
                Some(b'-') => {
                    o += 1;
                    h.lines.push(HunkLine::Remove(text));
                }
                Some(b'+') => {
                    n += 1;
                    h.lines.push(HunkLine::Add(text));
                }
                Some(b'\\') => no_newline(&mut h, i + 1, file)?,
                _ => {
                    return Err(bad(format!(
                        "{file}: hunk {} ({}): patch line {}: expected a line starting with ' ', '-' or '+', found {:?} ({o} of {old_len} old, {n} of {new_len} new lines read)",
                        hunks.len() + 1,
                        h.header,
                        i + 1,
                        strip_eol(l)
                    )))
                }
            }
            i += 1;
        }
        // A trailing "\ No newline at end of file" after the last counted line.
        if lines.get(i).is_some_and(|l| l.starts_with('\\')) {
            no_newline(&mut h, i + 1, file)?;
            i += 1;
        }
        if let Some(l) = lines.get(i) {
            if matches!(l.as_bytes().first(), Some(b' ') | Some(b'-') | Some(b'+'))
                && !l.starts_with("--- ")
                && !l.starts_with("+++ ")
            {
                return Err(bad(format!(
                    "{file}: hunk {} ({}): more lines than its header counts (patch line {})",
                    hunks.len() + 1,
                    h.header,
                    i + 1
                )));
            }
        }
        hunks.push(h);
    }
    Ok((hunks, i))
}

fn no_newline(h: &mut Hunk, lineno: usize, file: &str) -> Result<(), WorkspaceError> {
    let last = h.lines.last_mut().ok_or_else(|| {
        bad(format!(
            "{file}: patch line {lineno}: '\\ No newline at end of file' without a preceding line"
        ))
    })?;
    let s = match last {
        HunkLine::Context(s) | HunkLine::Remove(s) | HunkLine::Add(s) => s,
    };
    if let Some(t) = s.strip_suffix('\n') {
        *s = t.to_string();
    }
    Ok(())
}

/// A hunk that does not apply: which one, where, and what differed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HunkMismatch {
    /// 1-based hunk number within the file section.
    pub hunk: usize,
    pub header: String,
    /// 1-based line in the current file where the hunk was expected.
    pub line: usize,
    pub expected: Vec<String>,
    pub found: Vec<String>,
}

impl std::fmt::Display for HunkMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "hunk {} ({}) does not apply at line {}: expected {:?}, found {:?}",
            self.hunk, self.header, self.line, self.expected, self.found
        )
    }
}

/// Applies the hunks of one file to `old` exactly (no fuzz). A hunk may have
/// moved by up to [`MAX_HUNK_OFFSET`] lines from the line its header names
/// (like `patch`'s offset); hunks must apply in order without overlap.
pub fn apply_hunks(old: &str, hunks: &[Hunk]) -> Result<String, HunkMismatch> {
    let old_lines: Vec<&str> = old.split_inclusive('\n').collect();
    let mut out = String::with_capacity(old.len());
    let mut pos = 0usize;
    for (k, h) in hunks.iter().enumerate() {
        let expected: Vec<&str> = h
            .lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(s) | HunkLine::Remove(s) => Some(s.as_str()),
                HunkLine::Add(_) => None,
            })
            .collect();
        let len = expected.len();
        // Where the header says the hunk starts (0-based); for a pure
        // insertion (`-a,0`) it goes after line a.
        let want = if h.old_len == 0 {
            h.old_start
        } else {
            h.old_start.saturating_sub(1)
        };
        let fits = |p: usize| {
            p >= pos && p + len <= old_lines.len() && old_lines[p..p + len] == expected[..]
        };
        let mut found_at = None;
        for d in 0..=MAX_HUNK_OFFSET {
            if fits(want + d) {
                found_at = Some(want + d);
                break;
            }
            if d > 0 && d <= want && fits(want - d) {
                found_at = Some(want - d);
                break;
            }
            if want + d > old_lines.len() && (d > want || want - d < pos) {
                break;
            }
        }
        let Some(p) = found_at else {
            let from = want.min(old_lines.len());
            let to = (want + len).min(old_lines.len());
            return Err(HunkMismatch {
                hunk: k + 1,
                header: h.header.clone(),
                line: want + 1,
                expected: expected.iter().map(|s| s.to_string()).collect(),
                found: old_lines[from..to].iter().map(|s| s.to_string()).collect(),
            });
        };
        out.extend(old_lines[pos..p].iter().copied());
        for l in &h.lines {
            match l {
                HunkLine::Context(s) | HunkLine::Add(s) => out.push_str(s),
                HunkLine::Remove(_) => {}
            }
        }
        pos = p + len;
    }
    out.extend(old_lines[pos..].iter().copied());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_git_multi_file_with_create_delete_rename() {
        let p = "\
diff --git a/src/a.rs b/src/a.rs
index 111..222 100644
--- a/src/a.rs
+++ b/src/a.rs
@@ -1,2 +1,2 @@
 fn a() {}
-fn b() {}
+fn c() {}
diff --git a/new.txt b/new.txt
new file mode 100755
--- /dev/null
+++ b/new.txt
@@ -0,0 +1 @@
+hello
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
diff --git a/old name.txt b/new name.txt
similarity index 100%
rename from old name.txt
rename to new name.txt
";
        let f = parse(p).unwrap();
        assert_eq!(f.len(), 4);
        assert_eq!(f[0].old_path.as_deref(), Some("src/a.rs"));
        assert_eq!(f[0].hunks[0].lines.len(), 3);
        assert_eq!(f[1].old_path, None);
        assert_eq!(f[1].new_path.as_deref(), Some("new.txt"));
        assert_eq!(f[1].new_mode, Some(0o100755));
        assert_eq!(f[2].new_path, None);
        assert!(f[3].rename);
        assert_eq!(f[3].old_path.as_deref(), Some("old name.txt"));
        assert_eq!(f[3].new_path.as_deref(), Some("new name.txt"));
        assert!(f[3].hunks.is_empty());
    }

    #[test]
    fn quoted_names_are_unquoted() {
        let p = "--- \"a/x\\ny\"\n+++ \"b/x\\ny\"\n@@ -1 +1 @@\n-a\n+b\n";
        let f = parse(p).unwrap();
        assert_eq!(f[0].new_path.as_deref(), Some("x\ny"));
    }

    #[test]
    fn no_newline_marker() {
        let p = "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n\\ No newline at end of file\n";
        let f = parse(p).unwrap();
        assert_eq!(apply_hunks("a", &f[0].hunks).unwrap(), "b");
        assert!(apply_hunks("a\n", &f[0].hunks).is_err());
    }

    #[test]
    fn hunk_offset_and_mismatch() {
        let p = "--- a/f\n+++ b/f\n@@ -2,2 +2,2 @@\n x\n-y\n+Y\n";
        let f = parse(p).unwrap();
        assert_eq!(
            apply_hunks("0\n1\nx\ny\n", &f[0].hunks).unwrap(),
            "0\n1\nx\nY\n"
        );
        let e = apply_hunks("a\nx\nz\n", &f[0].hunks).unwrap_err();
        assert_eq!(e.hunk, 1);
        assert_eq!(e.line, 2);
        assert_eq!(e.expected, vec!["x\n", "y\n"]);
        assert_eq!(e.found, vec!["x\n", "z\n"]);
    }

    #[test]
    fn malformed_inputs_are_refused() {
        for p in [
            "",
            "hello\n",
            "@@ -1 +1 @@\n-a\n+b\n",
            "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n+b\n",
            "--- a/f\n+++ b/f\n@@ -x +1 @@\n-a\n+b\n",
            "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n+c\n",
            "diff --git a/f b/f\nGIT binary patch\nliteral 1\n",
            "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/etc\n",
        ] {
            assert!(parse(p).is_err(), "accepted {p:?}");
        }
    }
}
