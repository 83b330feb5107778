//! Workspace snapshots (content hashes), the blob store, checkpoints and
//! rollback (DESIGN.md, "The pipeline of one tool call", steps 3 and 5).
//!
//! # Model
//! - A [`Snapshot`] is a Merkle tree of the workspace: every regular file
//!   (BLAKE3 of its bytes), symlink (BLAKE3 of its target bytes, never
//!   followed), directory (BLAKE3 of its serialized listing) and mode, taken
//!   by a parallel walk through a `cap_std::fs::Dir` handle. Directories are
//!   opened with `O_NOFOLLOW`, regular files with `O_NOFOLLOW|O_NONBLOCK`
//!   (a FIFO swapped in never blocks the walk; the opened fd is `fstat`ed and
//!   anything but a regular file is recorded as kind `other`, never read).
//!   A stat cache (size, mtime, ctime, inode, mode; like git's index, see
//!   git's `Documentation/technical/racy-git.txt`) under
//!   `<state>/statcache/` avoids rehashing unchanged files. Paths matching
//!   [`CheckpointSettings::exclude`] (gitignore syntax) are not recorded;
//!   files over [`CheckpointSettings::max_file_bytes`] are hashed but their
//!   content is not stored (a rollback reports them as not restorable).
//! - Blobs (file contents, symlink targets, directory listings) live in a
//!   content-addressed store `<state>/blobs/ab/cdef…` (hex BLAKE3), written
//!   to a temp file and renamed into place; one `syncfs(2)` per checkpoint
//!   makes them durable, and only then is the checkpoint row inserted into
//!   SQLite with `complete = 1` (one transaction). A crash at any instant
//!   leaves the previous complete checkpoint, or the new one, never a half
//!   one: rows are only ever written complete, and every blob read is
//!   verified against its hash.
//! - A [`Checkpoint`] is the record of one step: ids, kind (pre / post /
//!   rollback), tool call, side effects, change set against its base
//!   checkpoint (with patches for text files), root hash, and fields later
//!   issues fill (history, plan, approvals, tokens, run state, audit head).
//!
//! # API
//! [`CheckpointStore::open`]`(state_dir, db)`; per step
//! [`CheckpointStore::pre_step`] before the tool runs and
//! [`CheckpointStore::post_step`] after it exits (a step whose pre-checkpoint
//! fails must not run: fail closed, e.g. on a full disk);
//! [`CheckpointStore::list`], [`CheckpointStore::get`],
//! [`CheckpointStore::diff`], [`CheckpointStore::rollback`],
//! [`CheckpointStore::gc`]. Every call is blocking file I/O: call it from
//! `tokio::task::spawn_blocking`. One writer per workspace: an in-process
//! mutex plus an `flock(2)` on `<state>/locks/<workspace hash>.lock`.

mod blobs;
mod changes;
mod gitref;
mod records;
mod restore;
mod snapshot;
mod statcache;
mod store;

pub use changes::{ChangeKind, FileChange};
pub use records::{
    Checkpoint, CheckpointFilter, CheckpointKind, CheckpointMeta, ExternalEffect, SideEffects,
};
pub use snapshot::{
    scan_nested_git, Entry, EntryKind, GitFingerprint, NestedGitScan, Snapshot,
    NESTED_GIT_MAX_ENTRIES,
};
pub use store::{CheckpointStore, Diff, GcReport, RollbackOptions, RollbackReport};

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

use crate::state::Migrations;

/// The policy file's `[checkpoint]` section. Every field has a default, so
/// a policy without the section (or with only some fields) parses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSettings {
    /// Take checkpoints at all. Default true.
    #[serde(default = "CheckpointSettings::default_enabled")]
    pub enabled: bool,
    /// Paths not recorded, gitignore syntax relative to the workspace root
    /// (`target/` matches a directory named `target` at any depth, `/build`
    /// only at the root). Default: `target/`, `node_modules/`, `.venv/`,
    /// `__pycache__/`.
    #[serde(default = "CheckpointSettings::default_exclude")]
    pub exclude: Vec<String>,
    /// Files larger than this (bytes) are hashed but their content is not
    /// stored, so they cannot be restored. Default 16 MiB.
    #[serde(default = "CheckpointSettings::default_max_file_bytes")]
    pub max_file_bytes: u64,
    /// A workspace with more entries than this fails the snapshot (and so
    /// the step, closed). Default 1,000,000.
    #[serde(default = "CheckpointSettings::default_max_entries")]
    pub max_entries: u64,
    /// Retention: checkpoints of the last N runs per workspace are kept by
    /// `warden gc` (a one-shot exec session counts as one run). Default 50.
    #[serde(default = "CheckpointSettings::default_keep_runs")]
    pub keep_runs: u32,
    /// Retention: `warden gc` drops the oldest runs' checkpoints until the
    /// blob store is at most this many bytes (the latest checkpoint of each
    /// workspace is always kept). Default 10 GiB.
    #[serde(default = "CheckpointSettings::default_max_store_bytes")]
    pub max_store_bytes: u64,
    /// Also record each post/rollback checkpoint as a commit under
    /// `refs/warden/<session>/<checkpoint>` in the workspace's git
    /// repository (never moving HEAD, the index or a branch). Default false.
    #[serde(default)]
    pub git_refs: bool,
}

impl CheckpointSettings {
    fn default_enabled() -> bool {
        true
    }
    fn default_exclude() -> Vec<String> {
        ["target/", "node_modules/", ".venv/", "__pycache__/"]
            .into_iter()
            .map(String::from)
            .collect()
    }
    fn default_max_file_bytes() -> u64 {
        16 << 20
    }
    fn default_max_entries() -> u64 {
        1_000_000
    }
    fn default_keep_runs() -> u32 {
        50
    }
    fn default_max_store_bytes() -> u64 {
        10 << 30
    }
}

impl Default for CheckpointSettings {
    fn default() -> Self {
        CheckpointSettings {
            enabled: Self::default_enabled(),
            exclude: Self::default_exclude(),
            max_file_bytes: Self::default_max_file_bytes(),
            max_entries: Self::default_max_entries(),
            keep_runs: Self::default_keep_runs(),
            max_store_bytes: Self::default_max_store_bytes(),
            git_refs: false,
        }
    }
}

/// Errors of snapshots, the blob store, checkpoint records and rollback.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The workspace root cannot be opened or walked.
    #[error("workspace {path}: {source}")]
    Workspace {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An entry of the workspace could not be read (path relative to the root).
    #[error("workspace entry {path}: {source}")]
    Entry {
        path: String,
        source: std::io::Error,
    },
    /// Writing or reading the blob store / stat cache failed (e.g. a full
    /// disk: the step must fail closed).
    #[error("checkpoint store {path}: {source}")]
    Store {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A blob is missing or its content does not match its hash.
    #[error("blob {hash} is missing or corrupt")]
    BlobCorrupt { hash: String },
    #[error("state database: {0}")]
    Db(#[from] rusqlite::Error),
    /// No complete checkpoint has that id.
    #[error("unknown checkpoint {0:?}")]
    NotFound(String),
    /// The workspace no longer matches the latest checkpoint (rollback
    /// without force).
    #[error("workspace drifted since checkpoint {latest}: {} path(s) changed: {}", paths.len(), first_paths(paths))]
    Drift { latest: String, paths: Vec<String> },
    /// An exclude pattern of the policy is not valid gitignore syntax.
    #[error("invalid checkpoint exclude pattern {pattern:?}: {message}")]
    Exclude { pattern: String, message: String },
    /// More entries than `max_entries`.
    #[error("workspace has more than {limit} entries (checkpoint.max_entries)")]
    TooManyEntries { limit: u64 },
    /// A request that makes no sense (e.g. diff across workspaces).
    #[error("invalid checkpoint request: {0}")]
    Invalid(String),
    /// The git-ref variant failed.
    #[error("git: {0}")]
    Git(String),
}

impl CheckpointError {
    /// True when the cause is a full disk or quota (`ENOSPC`, `EDQUOT`).
    pub fn is_disk_full(&self) -> bool {
        let io = match self {
            CheckpointError::Store { source, .. }
            | CheckpointError::Entry { source, .. }
            | CheckpointError::Workspace { source, .. } => source,
            _ => return false,
        };
        matches!(io.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
    }
}

/// Maps an I/O error on a store path to [`CheckpointError::Store`].
pub(crate) fn store_err(
    path: &std::path::Path,
) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Store {
        path: path.to_path_buf(),
        source,
    }
}

/// Result alias of this module.
pub type Result<T, E = CheckpointError> = std::result::Result<T, E>;

/// Schema of the `checkpoint` module: checkpoint records and the archive of
/// conversation state discarded by a rollback.
pub const MIGRATIONS: Migrations = Migrations {
    module: "checkpoint",
    steps: &[r#"
CREATE TABLE checkpoints (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    workspace TEXT NOT NULL,
    session_id TEXT NOT NULL DEFAULT '',
    run_id TEXT NOT NULL DEFAULT '',
    step_id TEXT NOT NULL DEFAULT '',
    tool_call_id TEXT NOT NULL DEFAULT '',
    kind TEXT NOT NULL CHECK (kind IN ('pre', 'post', 'rollback')),
    tool TEXT NOT NULL DEFAULT '',
    arguments_json TEXT NOT NULL DEFAULT '{}',
    tier TEXT,
    decision TEXT,
    side_effects TEXT NOT NULL DEFAULT 'none' CHECK (side_effects IN ('none', 'workspace', 'external')),
    compensation TEXT,
    result_json TEXT,
    base_id TEXT,
    changes_json TEXT NOT NULL DEFAULT '[]',
    root_hash TEXT NOT NULL,
    entry_count INTEGER NOT NULL DEFAULT 0,
    total_bytes INTEGER NOT NULL DEFAULT 0,
    new_blob_bytes INTEGER NOT NULL DEFAULT 0,
    not_stored_json TEXT NOT NULL DEFAULT '[]',
    settings_json TEXT NOT NULL DEFAULT '{}',
    history_ref TEXT,
    plan_json TEXT,
    approval_ids_json TEXT,
    input_tokens INTEGER,
    output_tokens INTEGER,
    cost_micros INTEGER,
    run_state_json TEXT,
    audit_seq INTEGER,
    audit_head TEXT,
    rollback_of TEXT,
    rollback_json TEXT,
    git_ref TEXT,
    complete INTEGER NOT NULL DEFAULT 0,
    created_at_ms INTEGER NOT NULL
);
CREATE INDEX checkpoints_session ON checkpoints(session_id, seq);
CREATE INDEX checkpoints_workspace ON checkpoints(workspace, seq);
CREATE TABLE run_state_archive (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    rollback_checkpoint_id TEXT NOT NULL DEFAULT '',
    state_json TEXT NOT NULL,
    archived_at_ms INTEGER NOT NULL
);
CREATE INDEX run_state_archive_run ON run_state_archive(run_id);
"#],
};

#[cfg(test)]
mod tests;

/// The first paths of a list for a message, with how many were left out: a
/// gRPC status message travels in HTTP/2 trailers, which peers cap at a few
/// KiB (hyper: 16 KiB of headers), so tens of thousands of drifted paths
/// must not go there in full (`checkpoint diff` lists them all).
fn first_paths(paths: &[String]) -> String {
    const SHOWN: usize = 20;
    let mut s = paths
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if paths.len() > SHOWN {
        s.push_str(&format!(
            " and {} more (see `warden checkpoint diff`)",
            paths.len() - SHOWN
        ));
    }
    s
}
