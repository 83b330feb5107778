//! The git-based variant: each checkpoint also recorded as a commit under
//! `refs/warden/<session>/<checkpoint>` of the workspace's repository, for
//! people who inspect checkpoints with git tools.
//!
//! Written with `git fast-import` (git-fast-import(1)): the content comes
//! from the blob store (never from paths in the workspace, so no symlink is
//! followed), fast-import runs no hooks, filters or fsmonitor, and it only
//! creates the one ref named in the stream: HEAD, the index and branches are
//! never touched. Each commit chains from the workspace's previous warden
//! commit and carries only the changed paths. `.git/` itself is left out.
//! Config that could run programs or refuse the repository is overridden on
//! the command line; the user's global and system config are not read.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use super::blobs::BlobStore;
use super::snapshot::{Entry, EntryKind, Snapshot};
use super::{CheckpointError, Result};

fn git(ws: &Path) -> Command {
    let mut c = Command::new("git");
    c.arg("-C")
        .arg(ws)
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "commit.gpgSign=false",
            "-c",
            "safe.directory=*",
        ])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

fn git_err(what: &str) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |e| CheckpointError::Git(format!("{what}: {e}"))
}

/// True when `ws` holds its own `.git` directory (not a file, not a link).
pub(crate) fn has_repo(ws: &Path) -> bool {
    std::fs::symlink_metadata(ws.join(".git")).is_ok_and(|m| m.is_dir())
}

fn git_mode(e: &Entry) -> Option<&'static str> {
    match e.kind {
        EntryKind::File if e.mode & 0o111 != 0 => Some("100755"),
        EntryKind::File => Some("100644"),
        EntryKind::Symlink => Some("120000"),
        _ => None,
    }
}

fn plain(p: &str) -> bool {
    !(p.starts_with('"') || p.contains('\n') || p == ".git" || p.starts_with(".git/"))
}

/// Records `snap` as the commit of `ref_name`, from `prev` (the previous
/// warden commit and its snapshot) when given. Returns the commit id.
pub(crate) fn record(
    ws: &Path,
    blobs: &BlobStore,
    snap: &Snapshot,
    prev: Option<(&str, &Snapshot)>,
    ref_name: &str,
    message: &str,
) -> Result<String> {
    let now = crate::now_ms() / 1000;
    let mut s: Vec<u8> = Vec::new();
    s.extend_from_slice(
        format!("commit {ref_name}\ncommitter Warden <warden@localhost> {now} +0000\n").as_bytes(),
    );
    s.extend_from_slice(format!("data {}\n{message}\n", message.len()).as_bytes());
    if let Some((commit, _)) = prev {
        s.extend_from_slice(format!("from {commit}\n").as_bytes());
    }
    let old = prev.map(|p| p.1);
    // Deletions first: a path that turned from a file into a directory must
    // go before the directory's files are added.
    if let Some(o) = old {
        for (p, e) in &o.entries {
            let gone = !snap
                .entries
                .get(p)
                .is_some_and(|n| git_mode(n).is_some() && n.stored);
            if git_mode(e).is_some() && plain(p) && gone {
                s.extend_from_slice(format!("D {p}\n").as_bytes());
            }
        }
    }
    for (p, e) in &snap.entries {
        if old.is_some_and(|o| o.entries.get(p).is_some_and(|x| x.same(e))) {
            continue;
        }
        let (Some(mode), true) = (git_mode(e), e.stored && plain(p)) else {
            continue;
        };
        let bytes = blobs.get(&e.hash)?;
        s.extend_from_slice(format!("M {mode} inline {p}\ndata {}\n", bytes.len()).as_bytes());
        s.extend_from_slice(&bytes);
        s.push(b'\n');
    }
    s.extend_from_slice(b"\n");
    let mut child = git(ws)
        .args(["fast-import", "--quiet", "--force"])
        .stdin(Stdio::piped())
        .spawn()
        .map_err(git_err("starting git fast-import"))?;
    let mut stdin = child.stdin.take().expect("piped");
    let w = stdin.write_all(&s);
    drop(stdin);
    let out = child
        .wait_with_output()
        .map_err(git_err("git fast-import"))?;
    w.map_err(git_err("writing to git fast-import"))?;
    if !out.status.success() {
        return Err(CheckpointError::Git(format!(
            "git fast-import failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let out = git(ws)
        .args(["rev-parse", "--verify", ref_name])
        .stdout(Stdio::piped())
        .output()
        .map_err(git_err("git rev-parse"))?;
    if !out.status.success() {
        return Err(CheckpointError::Git(format!("{ref_name} was not created")));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
