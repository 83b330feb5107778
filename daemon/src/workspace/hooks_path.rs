//! The hooks directory that the workspace repository's `core.hooksPath`
//! names (git-config(1), githooks(5)), when it lies inside the workspace.
//!
//! A repository configured with `core.hooksPath = .githooks` runs
//! `.githooks/pre-commit` on the user's next `git commit`; that directory is
//! as dangerous as `.git/hooks` and gets the same protection (read-only in
//! the sandbox, refused by the file tools). Read from the repository's
//! `config` and `config.worktree`, the user's global configs and
//! `/etc/gitconfig`, following `include.path` / `includeIf.*.path`
//! (every include counts, whatever its condition: protecting more is the
//! safe side). Values of every file count, not only the last one.
//!
//! Fail closed within reason: a config that cannot be read (other than not
//! existing) is logged and adds nothing; the paths the sandbox protects
//! by default already cover `.git/hooks` and `.git/config`.

use std::path::{Component, Path, PathBuf};

/// Git hook names (githooks(5)); protected one by one when `core.hooksPath`
/// names the workspace root itself.
pub const HOOK_NAMES: &[&str] = &[
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
];

/// Most config files read (includes included); past it the rest is ignored
/// and logged.
const MAX_FILES: usize = 32;

/// Workspace-relative paths to protect because a git config names them as
/// `core.hooksPath`: the directory itself, or each hook name of
/// [`HOOK_NAMES`] when the directory is the workspace root. `root` should be
/// canonical. Paths outside the workspace are not returned (not ours to
/// protect: the sandbox does not expose them writable).
pub fn hooks_path_protected(root: &Path) -> Vec<PathBuf> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute());
    let mut queue: Vec<PathBuf> = Vec::new();
    let dotgit = root.join(".git");
    let gitdir = match std::fs::symlink_metadata(&dotgit) {
        Ok(m) if m.is_dir() => Some(dotgit),
        Ok(m) if m.is_file() => std::fs::read_to_string(&dotgit).ok().and_then(|s| {
            let g = s.trim().strip_prefix("gitdir:")?.trim().to_string();
            Some(root.join(g))
        }),
        _ => None,
    };
    if let Some(g) = &gitdir {
        queue.push(g.join("config"));
        queue.push(g.join("config.worktree"));
        if let Ok(c) = std::fs::read_to_string(g.join("commondir")) {
            queue.push(g.join(c.trim()).join("config"));
        }
    }
    match std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from) {
        Some(x) if x.is_absolute() => queue.push(x.join("git/config")),
        _ => {
            if let Some(h) = &home {
                queue.push(h.join(".config/git/config"));
            }
        }
    }
    if let Some(h) = &home {
        queue.push(h.join(".gitconfig"));
    }
    queue.push(PathBuf::from("/etc/gitconfig"));

    let mut values: Vec<String> = Vec::new();
    let mut read = 0usize;
    let mut i = 0;
    while i < queue.len() {
        let file = queue[i].clone();
        i += 1;
        if read >= MAX_FILES {
            tracing::warn!(file = %file.display(), "too many git config includes; not read for core.hooksPath");
            continue;
        }
        let text = match std::fs::read(&file) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                tracing::warn!(file = %file.display(), "cannot read git config for core.hooksPath: {e}");
                continue;
            }
        };
        read += 1;
        let (hooks, includes) = parse(&text);
        values.extend(hooks);
        let base = file.parent().unwrap_or(Path::new("/"));
        for inc in includes {
            let p = expand(&inc, home.as_deref(), base);
            if !queue.contains(&p) {
                queue.push(p);
            }
        }
    }

    let mut out: Vec<PathBuf> = Vec::new();
    for v in values {
        let abs = expand(&v, home.as_deref(), root);
        let mut rels = Vec::new();
        if let Some(r) = beneath(root, &normalize(&abs)) {
            rels.push(r);
        }
        if let Ok(c) = std::fs::canonicalize(&abs) {
            if let Some(r) = beneath(root, &c) {
                rels.push(r);
            }
        }
        for r in rels {
            let add: Vec<PathBuf> = if r.as_os_str().is_empty() {
                HOOK_NAMES.iter().map(PathBuf::from).collect()
            } else {
                vec![r]
            };
            for a in add {
                if !out.contains(&a) {
                    out.push(a);
                }
            }
        }
    }
    out
}

/// `core.hooksPath` values and include paths of one config file. Lenient:
/// lines it does not understand are skipped.
fn parse(text: &str) -> (Vec<String>, Vec<String>) {
    let mut hooks = Vec::new();
    let mut includes = Vec::new();
    let mut section = String::new();
    for line in text.lines() {
        let mut l = line.trim();
        if let Some(h) = l.strip_prefix('[') {
            let Some(end) = h.find(']') else { continue };
            let head = &h[..end];
            let name = head.split(['"', ' ', '\t']).next().unwrap_or("");
            // `[core.x]` style subsections: the section is the first part.
            section = name.split('.').next().unwrap_or("").to_ascii_lowercase();
            l = h[end + 1..].trim();
            if l.is_empty() {
                continue;
            }
        }
        if l.starts_with('#') || l.starts_with(';') {
            continue;
        }
        let Some((k, v)) = l.split_once('=') else {
            continue;
        };
        let key = k.trim().to_ascii_lowercase();
        let v = value(v);
        if section == "core" && key == "hookspath" {
            hooks.push(v);
        } else if (section == "include" || section == "includeif") && key == "path" {
            includes.push(v);
        }
    }
    (hooks, includes)
}

/// A config value: surrounding quotes removed, an unquoted trailing
/// comment cut.
fn value(v: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut esc = false;
    for c in v.trim().chars() {
        if esc {
            out.push(match c {
                'n' => '\n',
                't' => '\t',
                c => c,
            });
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if (c == '#' || c == ';') && !quoted {
            break;
        } else {
            out.push(c);
        }
    }
    out.trim().to_string()
}

/// `~/x` under `home`, absolute as is, relative under `base`.
fn expand(v: &str, home: Option<&Path>, base: &Path) -> PathBuf {
    if let (Some(rest), Some(h)) = (v.strip_prefix("~/"), home) {
        return h.join(rest);
    }
    base.join(v)
}

/// Lexical normalization of `.` and `..`.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// `p` relative to `root` when it lies at or below it.
fn beneath(root: &Path, p: &Path) -> Option<PathBuf> {
    p.strip_prefix(root).ok().map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_path_inside_the_workspace_is_found() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(
            root.join(".git/config"),
            "[core]\n\tbare = false\n\thooksPath = \".githooks\" # team hooks\n[include]\n\tpath = extra.cfg\n",
        )
        .unwrap();
        std::fs::write(
            root.join(".git/extra.cfg"),
            "[core]\nhookspath = tools/../ci/hooks\n[core]\n\thooksPath = /nonexistent-outside\n",
        )
        .unwrap();
        let got = hooks_path_protected(&root);
        assert!(got.contains(&PathBuf::from(".githooks")), "{got:?}");
        assert!(got.contains(&PathBuf::from("ci/hooks")), "{got:?}");
        assert!(!got
            .iter()
            .any(|p| p.to_string_lossy().contains("nonexistent")));
        // The root itself: each hook name.
        std::fs::write(root.join(".git/config"), "[core]\nhooksPath = .\n").unwrap();
        let got = hooks_path_protected(&root);
        assert!(got.contains(&PathBuf::from("pre-commit")), "{got:?}");
        // No repository: nothing from the workspace.
        std::fs::remove_dir_all(root.join(".git")).unwrap();
        assert!(!hooks_path_protected(&root).contains(&PathBuf::from("pre-commit")));
    }
}
