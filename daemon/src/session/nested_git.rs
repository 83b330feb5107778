//! Nested git repositories planted by a command.
//!
//! The sandbox keeps the workspace's own `.git/hooks`, `.git/config` (and
//! the files that redirect git) read-only, but a write-tier command can
//! create or change a *nested* repository — `sub/.git/hooks/pre-commit`,
//! `sub/.git/config` with `core.fsmonitor = evil`, a gitfile `sub/.git`
//! pointing at a directory of its own — and the user's next `git status` in
//! `sub/` runs that code outside every sandbox (the class of git's own
//! CVE-2024-32002 and of "malicious repository" hook attacks).
//!
//! Treatment (fail closed, nothing deleted): the daemon fingerprints every
//! *git control path* of nested repositories before the command
//! ([`scan`]) and again after it; each control path the command created or
//! changed is **quarantined** — renamed to `NAME.warden-blocked`, which git
//! never reads — unless it is provably inert:
//! - `hooks/*.sample` and `hooks/*.warden-blocked` files (git runs hooks by
//!   exact name only);
//! - a `config` whose every line is a key of [`SAFE_CONFIG_KEYS`] (what
//!   `git init`, `git clone`, `git remote add`, `git config user.*` write).
//!
//! Control paths of a nested git dir `D` (any entry named `.git` below the
//! workspace root, the root's own `.git` excluded): `D` itself when it is a
//! file (gitfile) or a symlink; else `D/config`, `D/config.worktree`,
//! `D/commondir`, `D/hooks` when it is not a real directory, and every entry
//! of `D/hooks`. Fingerprints are (device, inode, size, mtime, ctime): a
//! command cannot write a file and restore its ctime.
//!
//! A directory laid out as a bare repository (`HEAD` with `objects/` and
//! `refs/` or a `commondir`; git's `is_git_directory`), the workspace root
//! included, is a git dir of
//! its own, `.git` or not: git discovers it when run inside (unless
//! `safe.bareRepository=explicit`), so its `config`, `config.worktree`,
//! `commondir` and `hooks` are control paths too.

use std::path::{Path, PathBuf};

/// Most directory entries one scan visits; past it the scan stops and says
/// so (the caller reports it).
pub const MAX_SCAN_ENTRIES: usize = crate::checkpoint::NESTED_GIT_MAX_ENTRIES as usize;

/// Suffix given to a quarantined control path.
pub const QUARANTINE_SUFFIX: &str = ".warden-blocked";

/// `section.key` pairs (lowercase; `*` is any subsection) a nested
/// repository's `config` may hold and stay in place. None of them makes git
/// run a program.
pub const SAFE_CONFIG_KEYS: &[&str] = &[
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "core.autocrlf",
    "core.eol",
    "extensions.objectformat",
    "extensions.refstorage",
    "init.defaultbranch",
    "user.name",
    "user.email",
    "remote.*.url",
    "remote.*.pushurl",
    "remote.*.fetch",
    "remote.*.tagopt",
    "remote.*.prune",
    "remote.*.mirror",
    "branch.*.remote",
    "branch.*.merge",
    "branch.*.rebase",
    "branch.*.pushremote",
    "pull.rebase",
    "pull.ff",
    "push.default",
    "fetch.prune",
    "submodule.*.url",
    "submodule.*.active",
];

/// Git control paths of nested repositories, relative to the workspace root,
/// with their (device, inode, size, mtime ns, ctime ns) fingerprints. The
/// walk that collects them is the checkpoint walk's
/// ([`crate::checkpoint::NestedGitScan`]): a write-tier step gets them from
/// its pre and post checkpoints, without a walk of its own.
pub type Scan = crate::checkpoint::NestedGitScan;

/// Walks `root` (never following symlinks, not entering the root's own
/// `.git` nor any nested git dir beyond its control paths, entering the
/// directories checkpoints exclude) and fingerprints every nested git
/// control path. A root that cannot be opened gives an empty scan.
pub fn scan(root: &Path) -> Scan {
    match cap_std::fs::Dir::open_ambient_dir(root, cap_std::ambient_authority()) {
        Ok(d) => crate::checkpoint::scan_nested_git(&d),
        Err(_) => Scan {
            incomplete: true,
            ..Default::default()
        },
    }
}

/// Whether a created or changed control path may stay: a hook sample, or a
/// config holding only [`SAFE_CONFIG_KEYS`].
fn inert(root: &Path, rel: &Path) -> bool {
    let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let parent = rel
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str());
    let Ok(m) = std::fs::symlink_metadata(root.join(rel)) else {
        return true; // gone again
    };
    if !m.is_file() {
        return false;
    }
    if parent == Some("hooks") {
        // Git runs hooks by exact name only.
        return name.ends_with(".sample") || name.ends_with(QUARANTINE_SUFFIX);
    }
    // (Only a git dir's `config` is a control path: a `.git` dir's or a
    // bare repository's.)
    if name == "config" {
        return std::fs::read(root.join(rel))
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .is_some_and(|s| config_is_safe(&s));
    }
    false
}

/// True when every line of a git config is blank, a comment, a plain
/// section header, or a `key = value` whose `section.key` is in
/// [`SAFE_CONFIG_KEYS`]. Anything else (includes, continuation lines,
/// unknown keys, odd syntax) is unsafe: the parser only needs to be right
/// about what it accepts.
pub fn config_is_safe(text: &str) -> bool {
    let mut section: Option<(String, bool)> = None; // (name, has subsection)
    for line in text.lines() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') || l.starts_with(';') {
            continue;
        }
        if l.ends_with('\\') {
            return false;
        }
        if let Some(h) = l.strip_prefix('[') {
            let Some(h) = h.strip_suffix(']') else {
                return false;
            };
            let (name, sub) = match h.split_once(' ') {
                Some((n, s)) => {
                    let s = s.trim();
                    if !(s.len() >= 2 && s.starts_with('"') && s.ends_with('"')) {
                        return false;
                    }
                    (n, true)
                }
                None => (h, false),
            };
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                return false;
            }
            section = Some((name.to_ascii_lowercase(), sub));
            continue;
        }
        let Some((sec, sub)) = &section else {
            return false;
        };
        let key = l.split_once('=').map(|(k, _)| k).unwrap_or(l).trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return false;
        }
        let full = format!(
            "{sec}.{}{}",
            if *sub { "*." } else { "" },
            key.to_ascii_lowercase()
        );
        if !SAFE_CONFIG_KEYS.contains(&full.as_str()) {
            return false;
        }
    }
    true
}

/// Quarantines every control path that is in `after` but not in `before`
/// or whose fingerprint changed, unless it is inert. Renames go through a
/// capability on the workspace root (never following a symlink out of it).
/// Returns the quarantined paths (relative) and the ones that could not be
/// quarantined, with the reason.
pub fn quarantine(
    root: &Path,
    before: &Scan,
    after: &Scan,
) -> (Vec<String>, Vec<(String, String)>) {
    let mut done = Vec::new();
    let mut failed = Vec::new();
    let changed: Vec<&PathBuf> = after
        .paths
        .iter()
        .filter(|(p, fp)| before.paths.get(*p) != Some(*fp))
        .map(|(p, _)| p)
        .filter(|p| !inert(root, p))
        .collect();
    if changed.is_empty() {
        return (done, failed);
    }
    let dir = match cap_std::fs::Dir::open_ambient_dir(root, cap_std::ambient_authority()) {
        Ok(d) => d,
        Err(e) => {
            for p in changed {
                failed.push((p.display().to_string(), e.to_string()));
            }
            return (done, failed);
        }
    };
    for p in changed {
        let mut to = p.as_os_str().to_owned();
        to.push(QUARANTINE_SUFFIX);
        let to = PathBuf::from(to);
        if dir.symlink_metadata(&to).is_ok() {
            let _ = if dir.symlink_metadata(&to).is_ok_and(|m| m.is_dir()) {
                dir.remove_dir_all(&to)
            } else {
                dir.remove_file(&to)
            };
        }
        match dir.rename(p, &dir, &to) {
            Ok(()) => done.push(p.display().to_string()),
            Err(e) => failed.push((p.display().to_string(), e.to_string())),
        }
    }
    (done, failed)
}

/// What one check after a writer (a command, an MCP call) found and did.
#[derive(Debug, Default)]
pub struct Checked {
    /// The scan after the writer (the next baseline).
    pub after: Scan,
    /// Control paths quarantined (relative).
    pub done: Vec<String>,
    /// Control paths that could not be quarantined, with the reason.
    pub failed: Vec<(String, String)>,
    /// A scan stopped at [`MAX_SCAN_ENTRIES`].
    pub incomplete: bool,
}

impl Checked {
    /// The note for the writer's caller (a command's stderr, an MCP
    /// result's warnings), `None` when there is nothing to say. `who` names
    /// the writer ("the command", "the MCP server").
    pub fn note(&self, who: &str) -> Option<String> {
        let mut note = String::new();
        if !self.done.is_empty() {
            note.push_str(&format!(
                "quarantined {} (renamed *{QUARANTINE_SUFFIX}): git hooks/config of nested repositories that {who} created or changed would run code on your next git command\n",
                self.done.join(", "),
            ));
        }
        for (p, e) in &self.failed {
            note.push_str(&format!(
                "WARNING: could not quarantine {p} ({e}); inspect it before running git there\n"
            ));
        }
        if self.incomplete {
            note.push_str(&format!(
                "WARNING: nested git repositories were not fully checked (the workspace has over {MAX_SCAN_ENTRIES} entries, or could not be walked)\n"
            ));
        }
        (!note.is_empty()).then_some(note)
    }
}

/// [`scan`] on a blocking thread: the baseline before a writer. A scan that
/// cannot finish (its task panicked) gives an empty baseline, so every
/// non-inert control path found after the writer counts as new and is
/// quarantined (fail closed).
pub async fn baseline(root: PathBuf) -> Scan {
    match tokio::task::spawn_blocking(move || scan(&root)).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("nested-git baseline scan failed ({e}): every nested git control path found after the writer is treated as new");
            Scan::default()
        }
    }
}

/// [`check`] on a blocking thread. A check that cannot finish is reported
/// as a failure (a warning to the caller), never as "nothing found".
pub async fn check_after(root: PathBuf, before: Scan) -> Checked {
    check_after_with(root, before, None).await
}

/// [`check_after`] with the scan after the writer already taken (`Some`: by
/// the post-checkpoint's walk), else scanning again.
pub async fn check_after_with(root: PathBuf, before: Scan, after: Option<Scan>) -> Checked {
    let fallback = before.clone();
    match tokio::task::spawn_blocking(move || {
        let after = after.unwrap_or_else(|| scan(&root));
        judge(&root, &before, after)
    })
    .await
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("nested-git check failed: {e}");
            Checked {
                after: fallback,
                failed: vec![(
                    "nested git repositories".into(),
                    format!("the check after the writer failed: {e}"),
                )],
                ..Default::default()
            }
        }
    }
}

/// Scans `root` again after a writer ran and quarantines what it created or
/// changed since `before` ([`quarantine`]); logs what it did. Blocking (a
/// walk of the workspace): call it on a blocking thread.
pub fn check(root: &Path, before: &Scan) -> Checked {
    judge(root, before, scan(root))
}

/// [`check`] with the scan after the writer already taken.
pub fn judge(root: &Path, before: &Scan, after: Scan) -> Checked {
    let (done, failed) = quarantine(root, before, &after);
    let incomplete = before.incomplete || after.incomplete;
    if !done.is_empty() {
        tracing::warn!(root = %root.display(), ?done, "quarantined nested git hooks/config a writer created or changed");
    }
    for (p, e) in &failed {
        tracing::error!(root = %root.display(), path = %p, "could not quarantine a nested git control path: {e}");
    }
    if incomplete {
        tracing::warn!(root = %root.display(), "workspace too large to scan for nested git repositories");
    }
    Checked {
        after,
        done,
        failed,
        incomplete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_allowlist() {
        let init = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n";
        assert!(config_is_safe(init));
        let clone = format!(
            "{init}[remote \"origin\"]\n\turl = https://example.com/x.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n[user]\n\temail = a@b\n"
        );
        assert!(config_is_safe(&clone));
        for bad in [
            "[core]\n\tfsmonitor = touch /tmp/pwned\n",
            "[core]\n\thooksPath = ../evil\n",
            "[core]\n\tsshCommand = sh -c evil\n",
            "[include]\n\tpath = ../evil.cfg\n",
            "[includeIf \"gitdir:/\"]\n\tpath = x\n",
            "[filter \"lfs\"]\n\tclean = evil\n",
            "[alias]\n\tst = !evil\n",
            "[remote \"o\"]\n\tuploadpack = evil\n",
            "[submodule \"s\"]\n\tupdate = !evil\n",
            "[core]\n\tfilemode = true \\\n\tfsmonitor = evil\n",
            "fsmonitor = evil\n",
            "[core.x]\nbare = false\n",
            "[core] fsmonitor = evil\n",
        ] {
            assert!(!config_is_safe(bad), "{bad:?} accepted");
        }
    }

    /// Lays out `dir` (under `root`) as git's `is_git_directory` wants a git
    /// dir: `HEAD`, `objects/`, `refs/`.
    fn git_layout(root: &Path, dir: &str) {
        write(root, &format!("{dir}/HEAD"), "ref: refs/heads/main\n");
        write(root, &format!("{dir}/objects/info/packs"), "");
        write(root, &format!("{dir}/refs/heads/.keep"), "");
    }

    /// Writes `rel` under `root` with `content`, creating its parents.
    fn write(root: &Path, rel: &str, content: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    #[test]
    fn created_and_changed_control_paths_are_quarantined() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let w = |p: &str, c: &str| write(root, p, c);
        w(".git/hooks/pre-commit", "top-level: not ours");
        w("old/.git/config", "[core]\n\tfsmonitor = users-own\n");
        w("old/.git/hooks/pre-push", "users own hook");
        w("keep/.git/config", "[core]\n\tbare = false\n");
        let before = scan(root);
        assert!(!before.incomplete);
        // The command plants things.
        w("new/.git/hooks/post-checkout", "evil");
        w("new/.git/hooks/pre-commit.sample", "inert");
        w("new/.git/config", "[core]\n\tbare = false\n");
        w("new2/deep/.git/config", "[core]\n\tfsmonitor = evil\n");
        w("link/.git", "gitdir: ../evilgitdir\n");
        w("old/.git/hooks/pre-commit", "evil");
        w(
            "keep/.git/config",
            "[core]\n\tbare = false\n[user]\n\tname = agent\n",
        );
        w(".git/hooks/post-merge", "top-level: the sandbox's job");
        let after = scan(root);
        let (mut done, failed) = quarantine(root, &before, &after);
        done.sort();
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(
            done,
            [
                "link/.git",
                "new/.git/hooks/post-checkout",
                "new2/deep/.git/config",
                "old/.git/hooks/pre-commit",
            ]
        );
        assert!(root
            .join("new/.git/hooks/post-checkout.warden-blocked")
            .exists());
        assert!(!root.join("new/.git/hooks/post-checkout").exists());
        // Untouched pre-existing paths and inert ones stay.
        assert!(root.join("old/.git/config").exists());
        assert!(root.join("old/.git/hooks/pre-push").exists());
        assert!(root.join("new/.git/config").exists());
        assert!(root.join("new/.git/hooks/pre-commit.sample").exists());
        assert!(root.join("keep/.git/config").exists());
        assert!(root.join(".git/hooks/post-merge").exists());
        // A second scan finds nothing new to do.
        let again = scan(root);
        assert!(quarantine(root, &after, &again).0.is_empty());
    }

    /// (Red-team case.) A git dir needs `objects/` and `refs/` only in its
    /// *common* dir (git's `is_git_directory` reads `commondir` first). A
    /// directory with just `HEAD` and `commondir` (-> `../common`, which has
    /// `objects/`, `refs/`, `config`, `hooks/` but no `HEAD`) is a repository
    /// to git (`git branch` there runs `core.pager` from `common/config`),
    /// yet neither directory has all three marks. Something must be
    /// quarantined (at least `evil/commondir`).
    #[test]
    fn commondir_layout_is_quarantined() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let before = scan(root);
        let w = |p: &str, c: &str| write(root, p, c);
        w("evil/HEAD", "ref: refs/heads/main\n");
        w("evil/commondir", "../common\n");
        w("common/objects/info/packs", "");
        w("common/refs/heads/.keep", "");
        w("common/config", "[core]\n\tpager = evil\n");
        w("common/hooks/pre-auto-gc", "evil");
        let after = scan(root);
        let (done, failed) = quarantine(root, &before, &after);
        assert!(failed.is_empty(), "{failed:?}");
        assert!(
            done.iter()
                .any(|p| p == "evil/commondir" || p == "common/config"),
            "nothing quarantined: {done:?}"
        );
    }

    /// (Red-team case.) A nested repository's submodule git dirs
    /// (`sub/.git/modules/NAME/`, used through the existing gitfile
    /// `sub/NAME/.git`) have their own `config` and `hooks/`, which git reads
    /// and runs in `sub/NAME/`; the scan never enters `sub/.git` beyond its
    /// top-level control paths.
    #[test]
    fn nested_submodule_gitdir_is_quarantined() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let w = |p: &str, c: &str| write(root, p, c);
        git_layout(root, "vendor/lib/.git");
        w("vendor/lib/.git/config", "[core]\n\tbare = false\n");
        git_layout(root, "vendor/lib/.git/modules/dep");
        w(
            "vendor/lib/.git/modules/dep/config",
            "[core]\n\tbare = false\n",
        );
        w("vendor/lib/dep/.git", "gitdir: ../.git/modules/dep\n");
        let before = scan(root);
        w(
            "vendor/lib/.git/modules/dep/config",
            "[core]\n\tfsmonitor = evil\n",
        );
        w("vendor/lib/.git/modules/dep/hooks/post-checkout", "evil");
        let after = scan(root);
        let (done, failed) = quarantine(root, &before, &after);
        assert!(failed.is_empty(), "{failed:?}");
        assert!(
            done.iter().any(|p| p.ends_with("modules/dep/config")),
            "modules/dep/config not quarantined: {done:?}"
        );
        assert!(
            done.iter()
                .any(|p| p.ends_with("modules/dep/hooks/post-checkout")),
            "modules/dep/hooks/post-checkout not quarantined: {done:?}"
        );
    }

    /// A bare repository planted without any `.git` (in a subdirectory or
    /// as the workspace root itself): git would read its config and run its
    /// hooks when run there, so they are quarantined like a `.git` dir's.
    #[test]
    fn planted_bare_repositories_are_quarantined() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let w = |p: &str, c: &str| write(root, p, c);
        // The workspace's own submodule git dir (its gitfile `dep/.git`).
        w(".git/HEAD", "ref: refs/heads/main\n");
        git_layout(root, ".git/modules/dep");
        w("dep/.git", "gitdir: ../.git/modules/dep\n");
        // A bare repository the user had: left alone.
        git_layout(root, "mine.git");
        w("mine.git/config", "[core]\n\tfsmonitor = users-own\n");
        let before = scan(root);
        for base in ["planted/", ""] {
            w(&format!("{base}HEAD"), "ref: refs/heads/main\n");
            w(&format!("{base}objects/info/packs"), "");
            w(&format!("{base}refs/heads/.keep"), "");
            w(&format!("{base}config"), "[core]\n\tfsmonitor = evil\n");
            w(&format!("{base}hooks/post-checkout"), "evil");
        }
        w(".git/modules/dep/hooks/post-checkout", "evil");
        // What `git init --bare` writes stays.
        git_layout(root, "clean.git");
        w(
            "clean.git/config",
            "[core]\n\trepositoryformatversion = 0\n\tbare = true\n",
        );
        w("clean.git/hooks/pre-commit.sample", "inert");
        // A gitdir without objects of its own, pointing at a common dir.
        w("wt/HEAD", "ref: refs/heads/main\n");
        w("wt/commondir", "../clean.git\n");
        w("wt/config.worktree", "[core]\n\tfsmonitor = evil\n");
        // Not a repository (no `objects`): an ordinary `config` file.
        w("app/HEAD", "x");
        w("app/refs/x", "x");
        w("app/config", "anything");
        let after = scan(root);
        let (mut done, failed) = quarantine(root, &before, &after);
        done.sort();
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(
            done,
            [
                ".git/modules/dep/hooks/post-checkout",
                "config",
                "hooks/post-checkout",
                "planted/config",
                "planted/hooks/post-checkout",
                "wt/commondir",
                "wt/config.worktree",
            ]
        );
        assert!(root.join("planted/config.warden-blocked").exists());
        assert!(root.join("mine.git/config").exists());
        assert!(root.join("clean.git/config").exists());
        assert!(root.join("app/config").exists());
    }

    /// A workspace whose root cannot be opened scans empty and says it is
    /// incomplete (never "complete, nothing there"); a FIFO named like a
    /// control path is fingerprinted, never opened (no hang).
    #[test]
    fn missing_root_scans_empty_and_fifos_never_block() {
        let missing = scan(Path::new("/nonexistent/warden"));
        assert!(missing.paths.is_empty());
        assert!(
            missing.incomplete,
            "a scan that could not walk is incomplete"
        );
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("s/.git/hooks")).unwrap();
        nix::unistd::mkfifo(
            &t.path().join("s/.git/hooks/pre-commit"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        nix::unistd::mkfifo(
            &t.path().join("s/.git/config"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let s = scan(t.path());
        assert_eq!(s.paths.len(), 2, "{s:?}");
    }

    #[test]
    fn symlinked_hooks_dir_is_quarantined_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join("evil")).unwrap();
        std::fs::write(root.join("evil/pre-commit"), "x").unwrap();
        std::fs::create_dir_all(root.join("sub/.git")).unwrap();
        let before = scan(root);
        std::os::unix::fs::symlink("../../evil", root.join("sub/.git/hooks")).unwrap();
        let after = scan(root);
        let (done, _) = quarantine(root, &before, &after);
        assert_eq!(done, ["sub/.git/hooks"]);
        assert!(root.join("evil/pre-commit").exists());
    }
}
