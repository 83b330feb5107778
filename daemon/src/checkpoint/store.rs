//! [`CheckpointStore`]: the public face of the module (see the module docs).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};

use cap_std::fs::Dir;
use nix::fcntl::{Flock, FlockArg};
use rusqlite::params;
use serde::{Deserialize, Serialize};

use super::blobs::BlobStore;
use super::changes::{self, ChangeKind, FileChange};
use super::records::{
    self, Checkpoint, CheckpointFilter, CheckpointKind, CheckpointMeta, ExternalEffect, NewRecord,
    SideEffects,
};
use super::restore;
use super::snapshot::{self, CacheUpdate, EntryKind, NestedGitScan, Sink, Snapshot, WalkInput};
use super::statcache::StatCache;
use super::{store_err, CheckpointError, CheckpointSettings, Result};
use crate::state::Db;

/// Total patch text kept per checkpoint / diff, bytes.
const PATCH_BUDGET: usize = 1 << 20;

/// The latest complete checkpoint of a workspace, kept in memory.
struct Latest {
    id: String,
    seq: i64,
    snapshot: Arc<Snapshot>,
    /// Blob hashes durable in the store (this snapshot's).
    known: Arc<HashSet<blake3::Hash>>,
}

struct Inner {
    state_dir: PathBuf,
    db: Db,
    blobs: BlobStore,
    gc_lock: RwLock<()>,
    ws_locks: Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>,
    step_locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    caches: Mutex<HashMap<PathBuf, Arc<StatCache>>>,
    /// Stat-cache files being written off the critical path, and the
    /// generation of the newest queued / written cache of each file (an
    /// older write never replaces a newer one; the lock also serializes
    /// writers of one temp file).
    cache_writes: Mutex<Vec<std::thread::JoinHandle<()>>>,
    cache_gen: std::sync::atomic::AtomicU64,
    cache_written: Arc<Mutex<HashMap<PathBuf, u64>>>,
    /// New caches of each workspace kept in memory only since its file was
    /// last written.
    cache_unwritten: Mutex<HashMap<PathBuf, u32>>,
    latest: Mutex<HashMap<PathBuf, Arc<Latest>>>,
}

impl Inner {
    fn wait_for_cache_writes(&self) {
        let pending =
            std::mem::take(&mut *self.cache_writes.lock().unwrap_or_else(|p| p.into_inner()));
        for h in pending {
            let _ = h.join();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.wait_for_cache_writes();
    }
}

/// Checkpoints of every workspace, over one state dir. Cheap to clone.
#[derive(Clone)]
pub struct CheckpointStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CheckpointStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointStore")
            .field("state_dir", &self.inner.state_dir)
            .finish()
    }
}

/// Options of [`CheckpointStore::rollback`]. When neither `files` nor
/// `conversation` is set, both are done.
#[derive(Debug, Clone, Default)]
pub struct RollbackOptions {
    pub files: bool,
    pub conversation: bool,
    /// Also restore paths under `.git/`.
    pub include_git: bool,
    /// Roll back despite drift (the drifted state is checkpointed first, so
    /// the rollback can itself be undone).
    pub force: bool,
}

/// What a rollback did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RollbackReport {
    /// The new checkpoint (kind `rollback`).
    pub checkpoint_id: String,
    /// The checkpoint rolled back to.
    pub target_id: String,
    /// What changed in the workspace.
    pub restored: Vec<FileChange>,
    /// Each `path: reason` that could not be restored.
    pub not_restored: Vec<String>,
    /// Steps after the target with external effects: not undone.
    pub external_effects: Vec<ExternalEffect>,
    /// Archive id of the conversation state that was replaced.
    pub archived_branch_id: Option<String>,
    /// Paths that had drifted (only with force).
    pub drifted: Vec<String>,
    /// The checkpoint recording the drifted state before a forced rollback.
    pub drift_checkpoint_id: Option<String>,
}

/// A change set between two states, with the concatenated text patch.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Diff {
    pub changes: Vec<FileChange>,
    pub patch: String,
}

/// What `gc` removed and kept.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GcReport {
    pub checkpoints_deleted: u64,
    pub checkpoints_kept: u64,
    pub blobs_deleted: u64,
    pub bytes_freed: u64,
    pub bytes_kept: u64,
}

/// Which snapshot a new checkpoint's change set is computed against.
enum Base<'a> {
    Latest,
    Id(&'a str),
}

fn lock_file(path: &Path, arg: FlockArg) -> Result<Flock<fs::File>> {
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(store_err(path))?;
    Flock::lock(f, arg).map_err(|(_, e)| store_err(path)(std::io::Error::from(e)))
}

fn under_git(p: &str) -> bool {
    p == ".git" || p.starts_with(".git/")
}

impl CheckpointStore {
    /// Opens the store under `state_dir` (blobs in `blobs/`, stat caches in
    /// `statcache/`, locks in `locks/`), using `db` for the records (its
    /// migrations must include [`super::MIGRATIONS`]). Errors:
    /// [`CheckpointError::Store`] when the directories cannot be created.
    pub fn open(state_dir: &Path, db: Db) -> Result<CheckpointStore> {
        let blobs = BlobStore::open(state_dir)?;
        for d in ["statcache", "locks"] {
            let p = state_dir.join(d);
            fs::create_dir_all(&p).map_err(store_err(&p))?;
        }
        Ok(CheckpointStore {
            inner: Arc::new(Inner {
                state_dir: state_dir.to_path_buf(),
                db,
                blobs,
                gc_lock: RwLock::new(()),
                ws_locks: Mutex::new(HashMap::new()),
                step_locks: Mutex::new(HashMap::new()),
                caches: Mutex::new(HashMap::new()),
                cache_writes: Mutex::new(Vec::new()),
                cache_gen: std::sync::atomic::AtomicU64::new(0),
                cache_written: Arc::new(Mutex::new(HashMap::new())),
                cache_unwritten: Mutex::new(HashMap::new()),
                latest: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The state database.
    pub fn db(&self) -> &Db {
        &self.inner.db
    }

    /// An async mutex per workspace, for callers that must keep one step's
    /// pre-checkpoint, run and post-checkpoint together (one writer per
    /// workspace). The store's own methods lock internally as well.
    pub fn step_lock(&self, workspace: &Path) -> Arc<tokio::sync::Mutex<()>> {
        let ws = canonical(workspace).unwrap_or_else(|_| workspace.to_path_buf());
        let mut m = self
            .inner
            .step_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        m.entry(ws).or_default().clone()
    }

    fn with_ws_lock<T>(&self, ws: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let m = {
            let mut locks = self
                .inner
                .ws_locks
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            locks.entry(ws.to_path_buf()).or_default().clone()
        };
        let _g = m.lock().unwrap_or_else(|p| p.into_inner());
        let h = blake3::hash(ws.as_os_str().as_encoded_bytes());
        let lock_path = self
            .inner
            .state_dir
            .join("locks")
            .join(format!("{}.lock", &h.to_hex()[..16]));
        let _f = lock_file(&lock_path, FlockArg::LockExclusive)?;
        let _gc = self.inner.gc_lock.read().unwrap_or_else(|p| p.into_inner());
        let gc_path = self.inner.blobs.root().join(".lock");
        let _gcf = lock_file(&gc_path, FlockArg::LockShared)?;
        f()
    }

    fn stat_cache(&self, ws: &Path) -> Arc<StatCache> {
        let mut m = self.inner.caches.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(ws.to_path_buf())
            .or_insert_with(|| {
                Arc::new(StatCache::load(&StatCache::file_for(
                    &self.inner.state_dir,
                    ws,
                )))
            })
            .clone()
    }

    fn walk(
        &self,
        ws: &Path,
        root: &Dir,
        settings: &CheckpointSettings,
        sink: Option<&Sink>,
        nested_git: Option<&mut Option<NestedGitScan>>,
    ) -> Result<Snapshot> {
        let cache = self.stat_cache(ws);
        let out = snapshot::take(
            root,
            &WalkInput {
                settings,
                cache: &cache,
                sink,
                nested_git: nested_git.is_some(),
            },
        )?;
        if let Some(n) = nested_git {
            *n = out.nested_git;
        }
        drop(cache);
        let new = match out.cache {
            None => None,
            Some(CacheUpdate::Replace(c)) => {
                let c = Arc::new(c);
                let mut m = self.inner.caches.lock().unwrap_or_else(|p| p.into_inner());
                m.insert(ws.to_path_buf(), c.clone());
                Some(c)
            }
            Some(CacheUpdate::Add(files, listings)) => {
                let mut m = self.inner.caches.lock().unwrap_or_else(|p| p.into_inner());
                // In place when nobody else holds this cache (another walk
                // or a file write); else left out, which only costs
                // rehashing those files.
                let c = m.get_mut(ws);
                if let Some(c) = c.and_then(Arc::get_mut) {
                    for (p, e) in files {
                        c.insert(&p, e);
                    }
                    c.listings.extend(listings);
                }
                m.get(ws).cloned()
            }
        };
        if let Some(new) = new {
            // Caches kept in memory only are written at the 16th in a row,
            // so a restarted daemon rehashes a bounded number of files.
            let mut u = self
                .inner
                .cache_unwritten
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let n = u.entry(ws.to_path_buf()).or_default();
            *n += 1;
            if out.persist_cache || *n >= 16 {
                *n = 0;
                drop(u);
                self.write_stat_cache(StatCache::file_for(&self.inner.state_dir, ws), new);
            }
        }
        Ok(out.snapshot)
    }

    /// Writes a stat cache file on a thread of its own: the file is a
    /// checksummed hint (a torn, lost or older one only costs rehashing,
    /// never a wrong hash: a hit needs the exact stat key), so the step does
    /// not wait for it.
    fn write_stat_cache(&self, path: PathBuf, cache: Arc<StatCache>) {
        use std::sync::atomic::Ordering;
        let gen = self.inner.cache_gen.fetch_add(1, Ordering::Relaxed) + 1;
        let written = self.inner.cache_written.clone();
        let h = std::thread::spawn(move || {
            let mut w = written.lock().unwrap_or_else(|p| p.into_inner());
            if w.get(&path).is_some_and(|&g| g > gen) {
                return;
            }
            // A lost cache write only costs rehashing: ignore errors.
            let _ = cache.save(&path);
            w.insert(path, gen);
        });
        let mut pending = self
            .inner
            .cache_writes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        pending.retain(|h| !h.is_finished());
        pending.push(h);
    }

    /// Waits until every stat-cache file this store queued is written (a
    /// benchmark or test that opens a second store on the same state dir;
    /// dropping the last handle of a store waits as well).
    pub fn wait_for_stat_cache_writes(&self) {
        self.inner.wait_for_cache_writes();
    }

    /// Snapshots `workspace` without recording anything (no blobs stored).
    /// Errors: [`CheckpointError::Workspace`] (root not openable),
    /// [`CheckpointError::Entry`], [`CheckpointError::TooManyEntries`],
    /// [`CheckpointError::Exclude`].
    pub fn snapshot(&self, workspace: &Path, settings: &CheckpointSettings) -> Result<Snapshot> {
        let ws = canonical(workspace)?;
        let root = open_root(&ws)?;
        self.walk(&ws, &root, settings, None, None)
    }

    fn latest(&self, ws: &Path) -> Result<Option<Arc<Latest>>> {
        let ws_str = ws.to_string_lossy();
        let row = {
            let conn = self.inner.db.lock();
            conn.prepare_cached(
                "SELECT seq, id, root_hash FROM checkpoints WHERE workspace = ?1 AND complete = 1 ORDER BY seq DESC LIMIT 1",
            )
            .and_then(|mut st| {
                st.query_row([ws_str.as_ref()], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
                })
            })
            .ok()
        };
        let Some((seq, id, root_hex)) = row else {
            return Ok(None);
        };
        if let Some(l) = self
            .inner
            .latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(ws)
        {
            if l.seq == seq {
                return Ok(Some(l.clone()));
            }
        }
        let root = parse_hash(&root_hex)?;
        let snap = snapshot::load(&self.inner.blobs, root)?;
        let latest = Arc::new(Latest {
            id,
            seq,
            known: Arc::new(snap.blob_hashes()),
            snapshot: Arc::new(snap),
        });
        self.inner
            .latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(ws.to_path_buf(), latest.clone());
        Ok(Some(latest))
    }

    /// Loads the snapshot a checkpoint recorded.
    pub fn load_snapshot(&self, id: &str) -> Result<Snapshot> {
        let (cp, _) = records::get(&self.inner.db.lock(), id)?;
        snapshot::load(&self.inner.blobs, parse_hash(&cp.root_hash)?)
    }

    /// Records a checkpoint of kind `pre` (before a step runs), with the
    /// change set since the workspace's previous checkpoint (changes made
    /// outside warden between steps). A caller must not run the step when
    /// this fails (fail closed: a full disk, an unreadable workspace).
    pub fn pre_step(
        &self,
        workspace: &Path,
        settings: &CheckpointSettings,
        meta: &CheckpointMeta,
    ) -> Result<Checkpoint> {
        self.record(workspace, settings, CheckpointKind::Pre, meta, None)
    }

    /// Records a checkpoint of kind `post` after a step ran, with the change
    /// set against `pre_id` (the step's file changes).
    pub fn post_step(
        &self,
        workspace: &Path,
        settings: &CheckpointSettings,
        pre_id: &str,
        meta: &CheckpointMeta,
    ) -> Result<Checkpoint> {
        self.record(
            workspace,
            settings,
            CheckpointKind::Post,
            meta,
            Some(pre_id),
        )
    }

    /// Snapshots `workspace`, stores every blob needed to restore it, makes
    /// them durable (one `syncfs`), then inserts the complete record. The
    /// change set is against `base_id`, else the workspace's latest
    /// checkpoint (empty for the very first one).
    pub fn record(
        &self,
        workspace: &Path,
        settings: &CheckpointSettings,
        kind: CheckpointKind,
        meta: &CheckpointMeta,
        base_id: Option<&str>,
    ) -> Result<Checkpoint> {
        let ws = canonical(workspace)?;
        let root = open_root(&ws)?;
        self.with_ws_lock(&ws, || {
            let base = base_id.map(Base::Id).unwrap_or(Base::Latest);
            let (cp, _) =
                self.record_locked(&ws, &root, settings, kind, meta, base, None, None, None)?;
            Ok(cp)
        })
    }

    /// [`Self::pre_step`] (no `pre_id`) or [`Self::post_step`] that also
    /// collects the control paths of nested git repositories in the same
    /// walk ([`NestedGitScan`]; `crate::session::nested_git` uses them), so
    /// a write-tier step walks the workspace twice, not four times.
    pub fn step_with_nested_git(
        &self,
        workspace: &Path,
        settings: &CheckpointSettings,
        pre_id: Option<&str>,
        meta: &CheckpointMeta,
    ) -> Result<(Checkpoint, NestedGitScan)> {
        let ws = canonical(workspace)?;
        let root = open_root(&ws)?;
        let (kind, base) = match pre_id {
            None => (CheckpointKind::Pre, Base::Latest),
            Some(id) => (CheckpointKind::Post, Base::Id(id)),
        };
        self.with_ws_lock(&ws, || {
            let mut scan = None;
            let (cp, _) = self.record_locked(
                &ws,
                &root,
                settings,
                kind,
                meta,
                base,
                None,
                None,
                Some(&mut scan),
            )?;
            Ok((cp, scan.unwrap_or_default()))
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn record_locked(
        &self,
        ws: &Path,
        root: &Dir,
        settings: &CheckpointSettings,
        kind: CheckpointKind,
        meta: &CheckpointMeta,
        base: Base,
        rollback: Option<(&str, &str, &str)>,
        given: Option<Snapshot>,
        nested_git: Option<&mut Option<NestedGitScan>>,
    ) -> Result<(Checkpoint, Arc<Snapshot>)> {
        let latest = self.latest(ws)?;
        let empty = HashSet::new();
        let known = latest.as_ref().map(|l| &*l.known).unwrap_or(&empty);
        let snap = match given {
            Some(s) => s,
            None => {
                let sink = Sink {
                    blobs: &self.inner.blobs,
                    known,
                    written: AtomicU64::new(0),
                };
                self.walk(ws, root, settings, Some(&sink), nested_git)?
            }
        };
        let mut new_bytes = snap.new_blob_bytes;
        // The same tree as the latest checkpoint: every blob it references
        // is durable already (nothing to write, nothing to sync).
        let same_as_latest = latest.as_ref().filter(|l| l.snapshot.root == snap.root);
        if same_as_latest.is_none() {
            for (h, bytes) in &snap.trees {
                if !known.contains(h) {
                    new_bytes += self.inner.blobs.put(h, bytes)?;
                }
            }
            // Every referenced blob the latest checkpoint did not hold: the
            // ones just written, and ones already intact in the store (seen
            // by an older or an unfinished checkpoint) that may not be
            // durable yet.
            let fresh: Vec<blake3::Hash> = snap
                .trees
                .iter()
                .map(|t| t.0)
                .chain(
                    snap.entries
                        .values()
                        .filter(|e| e.stored && e.kind != EntryKind::Other)
                        .map(|e| e.hash),
                )
                .filter(|h| !known.contains(h))
                .collect::<HashSet<_>>()
                .into_iter()
                .collect();
            self.inner.blobs.sync_blobs(&fresh)?;
        }
        let base_snap: Option<(String, Arc<Snapshot>)> = match base {
            Base::Latest => latest.as_ref().map(|l| (l.id.clone(), l.snapshot.clone())),
            Base::Id(id) => match &latest {
                Some(l) if l.id == id => Some((l.id.clone(), l.snapshot.clone())),
                _ => Some((id.to_string(), Arc::new(self.load_snapshot(id)?))),
            },
        };
        let mut changes = match &base_snap {
            Some((_, b)) if b.root != snap.root => changes::diff(&b.entries, &snap.entries),
            _ => Vec::new(),
        };
        if let Some((_, b)) = &base_snap {
            self.add_patches(&mut changes, &Side::Store(b), &Side::Store(&snap));
        }
        let mut meta = meta.clone();
        if kind == CheckpointKind::Post
            && meta.side_effects == SideEffects::None
            && !changes.is_empty()
        {
            meta.side_effects = SideEffects::Workspace;
        }
        let meta = &meta;
        let id = rollback
            .map(|r| r.0.to_string())
            .unwrap_or_else(crate::new_id);
        let ws_str = ws.to_string_lossy().to_string();
        let settings_json = serde_json::to_string(settings).unwrap_or_else(|_| "{}".into());
        let root_hex = snap.root_hex();
        let not_stored = snap.not_stored();
        let n = NewRecord {
            id: &id,
            workspace: &ws_str,
            kind,
            meta,
            base_id: base_snap.as_ref().map(|b| b.0.as_str()),
            changes: &changes,
            root_hash: &root_hex,
            entry_count: snap.entries.len() as u64,
            total_bytes: snap.total_bytes(),
            new_blob_bytes: new_bytes,
            not_stored: &not_stored,
            settings_json: &settings_json,
            rollback_of: rollback.map(|r| r.1),
            rollback_json: rollback.map(|r| r.2),
        };
        let seq = records::insert(&mut self.inner.db.lock(), &n)?;
        if settings.git_refs && super::gitref::has_repo(ws) {
            self.record_git_ref(ws, &id, &meta.session_id, kind, &snap, latest.as_deref());
        }
        let (snap, known) = match same_as_latest {
            // Equal roots, equal trees: share the latest's snapshot and set.
            Some(l) => (l.snapshot.clone(), l.known.clone()),
            None => {
                let known = Arc::new(snap.blob_hashes());
                (Arc::new(snap), known)
            }
        };
        self.inner
            .latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                ws.to_path_buf(),
                Arc::new(Latest {
                    id: id.clone(),
                    seq,
                    known,
                    snapshot: snap.clone(),
                }),
            );
        let (cp, _) = records::get(&self.inner.db.lock(), &id)?;
        Ok((cp, snap))
    }

    /// The git-based variant: records `snap` as a commit under
    /// `refs/warden/<session>/<id>`, chained from the previous checkpoint's
    /// commit. A failure is logged and leaves `git_ref` NULL: the checkpoint
    /// itself is already complete.
    fn record_git_ref(
        &self,
        ws: &Path,
        id: &str,
        session_id: &str,
        kind: CheckpointKind,
        snap: &Snapshot,
        latest: Option<&Latest>,
    ) {
        let session = if !session_id.is_empty()
            && session_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            session_id
        } else {
            "no-session"
        };
        let ref_name = format!("refs/warden/{session}/{id}");
        let prev_commit: Option<String> = latest.and_then(|l| {
            self.inner
                .db
                .lock()
                .query_row(
                    "SELECT git_ref FROM checkpoints WHERE id = ?1",
                    [&l.id],
                    |r| r.get::<_, Option<String>>(0),
                )
                .ok()
                .flatten()
                .and_then(|g| g.rsplit_once(' ').map(|(c, _)| c.to_string()))
        });
        let prev = match (&prev_commit, latest) {
            (Some(c), Some(l)) => Some((c.as_str(), &*l.snapshot)),
            _ => None,
        };
        let msg = format!("warden {} checkpoint {id}", kind.as_str());
        match super::gitref::record(ws, &self.inner.blobs, snap, prev, &ref_name, &msg) {
            Ok(commit) => {
                let _ = self.inner.db.lock().execute(
                    "UPDATE checkpoints SET git_ref = ?1 WHERE id = ?2",
                    params![format!("{commit} {ref_name}"), id],
                );
            }
            Err(e) => tracing::warn!(checkpoint = id, error = %e, "git ref not recorded"),
        }
    }

    /// Fills `patch` of text-file changes, within [`PATCH_BUDGET`].
    fn add_patches(&self, changes: &mut [FileChange], old: &Side, new: &Side) {
        let mut budget = PATCH_BUDGET;
        for c in changes.iter_mut() {
            if c.entry_kind != EntryKind::File || budget == 0 {
                continue;
            }
            if c.kind == ChangeKind::Mode
                || (c.kind == ChangeKind::Renamed && c.old_hash == c.new_hash)
            {
                continue;
            }
            let old_path = match c.kind {
                ChangeKind::Added => None,
                ChangeKind::Renamed => c.from_path.as_deref(),
                _ => Some(c.path.as_str()),
            };
            let new_path = (c.kind != ChangeKind::Deleted).then_some(c.path.as_str());
            let old_bytes = match old_path {
                None => Some(Vec::new()),
                Some(p) => self.content(old, p),
            };
            let new_bytes = match new_path {
                None => Some(Vec::new()),
                Some(p) => self.content(new, p),
            };
            if let (Some(o), Some(n)) = (old_bytes, new_bytes) {
                if let Some(p) = changes::text_patch(old_path, &o, new_path, &n) {
                    budget = budget.saturating_sub(p.len());
                    c.patch = Some(p);
                }
            }
        }
    }

    fn content(&self, side: &Side, path: &str) -> Option<Vec<u8>> {
        match side {
            Side::Store(s) => {
                let e = s.entries.get(path)?;
                if e.kind != EntryKind::File
                    || !e.stored
                    || e.size as usize > changes::PATCH_MAX_FILE
                {
                    return None;
                }
                self.inner.blobs.get(&e.hash).ok()
            }
            Side::Workspace(root) => restore::read_file(root, path, changes::PATCH_MAX_FILE),
        }
    }

    /// Checks that a checkpoint is whole: its snapshot's listings load and
    /// every stored blob it references is present and matches its hash.
    /// Returns the number of blobs checked. Errors:
    /// [`CheckpointError::NotFound`], [`CheckpointError::BlobCorrupt`].
    pub fn verify(&self, id: &str) -> Result<u64> {
        let snap = self.load_snapshot(id)?;
        let mut n = 0;
        for h in snap.blob_hashes() {
            self.inner.blobs.get(&h)?;
            n += 1;
        }
        Ok(n)
    }

    /// Complete checkpoints, newest first.
    pub fn list(&self, filter: &CheckpointFilter) -> Result<Vec<Checkpoint>> {
        records::list(&self.inner.db.lock(), filter)
    }

    /// One complete checkpoint. Errors: [`CheckpointError::NotFound`].
    pub fn get(&self, id: &str) -> Result<Checkpoint> {
        Ok(records::get(&self.inner.db.lock(), id)?.0)
    }

    /// Changes from checkpoint `from` to checkpoint `to`, or to the current
    /// workspace when `to` is `None` (snapshotted with `from`'s settings).
    /// Errors: [`CheckpointError::NotFound`], [`CheckpointError::Invalid`]
    /// for two checkpoints of different workspaces.
    pub fn diff(&self, from: &str, to: Option<&str>) -> Result<Diff> {
        let (a, settings_json) = records::get(&self.inner.db.lock(), from)?;
        let old = snapshot::load(&self.inner.blobs, parse_hash(&a.root_hash)?)?;
        let mut changes;
        match to {
            Some(to) => {
                let b = self.get(to)?;
                if b.workspace != a.workspace {
                    return Err(CheckpointError::Invalid(format!(
                        "checkpoints {from} and {to} are of different workspaces"
                    )));
                }
                let new = snapshot::load(&self.inner.blobs, parse_hash(&b.root_hash)?)?;
                changes = changes::diff(&old.entries, &new.entries);
                self.add_patches(&mut changes, &Side::Store(&old), &Side::Store(&new));
            }
            None => {
                let settings: CheckpointSettings =
                    serde_json::from_str(&settings_json).unwrap_or_default();
                let root = open_root(&a.workspace)?;
                let new = self.walk(&a.workspace, &root, &settings, None, None)?;
                changes = changes::diff(&old.entries, &new.entries);
                self.add_patches(&mut changes, &Side::Store(&old), &Side::Workspace(&root));
            }
        }
        let patch = changes.iter().filter_map(|c| c.patch.as_deref()).collect();
        Ok(Diff { changes, patch })
    }

    /// Rolls back to checkpoint `id` (see [`RollbackOptions`]):
    /// - files: the workspace must match its latest checkpoint (else
    ///   [`CheckpointError::Drift`] listing the drifted paths, unless
    ///   `force`); then every path that a step after `id` changed (per the
    ///   post/rollback change sets) is restored to its state at `id`,
    ///   through the workspace's cap-std handle. Paths no step changed are
    ///   never touched; `.git/` only with `include_git`.
    /// - conversation: `runs.state_json` of the checkpoint's run returns to
    ///   the state recorded at `id`; the replaced state is archived in
    ///   `run_state_archive` (its id is `archived_branch_id`).
    /// - external effects are listed, never undone.
    ///
    /// The result is a new checkpoint of kind `rollback`, so a rollback can
    /// itself be rolled back.
    pub fn rollback(&self, id: &str, opts: &RollbackOptions) -> Result<RollbackReport> {
        let (target, target_settings) = records::get(&self.inner.db.lock(), id)?;
        let (do_files, do_conv) = if !opts.files && !opts.conversation {
            (true, true)
        } else {
            (opts.files, opts.conversation)
        };
        let ws = target.workspace.clone();
        let root = open_root(&ws)?;
        self.with_ws_lock(&ws, || {
            let latest = self
                .latest(&ws)?
                .ok_or_else(|| CheckpointError::NotFound(id.to_string()))?;
            let settings: CheckpointSettings = {
                let conn = self.inner.db.lock();
                records::get(&conn, &latest.id)
                    .map(|x| x.1)
                    .ok()
                    .or(Some(target_settings.clone()))
                    .and_then(|s| serde_json::from_str(&s).ok())
                    .unwrap_or_default()
            };
            let mut report = RollbackReport {
                checkpoint_id: crate::new_id(),
                target_id: target.id.clone(),
                ..Default::default()
            };
            let later = records::after(&self.inner.db.lock(), &ws.to_string_lossy(), target.seq)?;
            // A write step whose pre-checkpoint is the latest never got its
            // post-checkpoint: it was cut off (a safe-read step has no post
            // and cannot write; a drift record is followed by its rollback).
            let step_cut_off = {
                let (l, _) = records::get(&self.inner.db.lock(), &latest.id)?;
                l.kind == CheckpointKind::Pre
                    && l.tool != "rollback"
                    && l.tier != Some(crate::policy::Tier::SafeRead)
            };
            report.external_effects = later
                .iter()
                .filter(|c| {
                    c.kind == CheckpointKind::Post && c.side_effects == SideEffects::External
                })
                .map(|c| ExternalEffect {
                    checkpoint_id: c.id.clone(),
                    step_id: c.step_id.clone(),
                    tool: c.tool.clone(),
                    summary: c.arguments_json.chars().take(200).collect(),
                    compensation: c.compensation.clone().unwrap_or_default(),
                })
                .collect();

            // The workspace now (its blobs stored, so a forced rollback can be undone).
            let sink = Sink {
                blobs: &self.inner.blobs,
                known: &latest.known,
                written: AtomicU64::new(0),
            };
            let current = self.walk(&ws, &root, &settings, Some(&sink), None)?;
            let mut base_id = latest.id.clone();
            let mut touched: BTreeSet<String> = BTreeSet::new();
            let mut current_arc = Arc::new(current);
            if do_files {
                if current_arc.root != latest.snapshot.root {
                    // Both ends of a rename drifted: the source must come
                    // back as well as the destination go.
                    let drift: Vec<String> =
                        changes::diff(&latest.snapshot.entries, &current_arc.entries)
                            .into_iter()
                            .flat_map(|c| std::iter::once(c.path).chain(c.from_path))
                            .collect::<BTreeSet<String>>()
                            .into_iter()
                            .collect();
                    // `.git/` is restored only with include_git, so its drift
                    // (git itself rewrites .git/index on `git status`) only
                    // blocks a rollback that would write there.
                    let blocking: Vec<String> = drift
                        .iter()
                        .filter(|p| opts.include_git || !under_git(p))
                        .cloned()
                        .collect();
                    if !opts.force && !blocking.is_empty() {
                        return Err(CheckpointError::Drift {
                            latest: latest.id.clone(),
                            paths: blocking,
                        });
                    }
                    let meta = CheckpointMeta {
                        session_id: target.session_id.clone(),
                        tool: "rollback".into(),
                        arguments_json: serde_json::json!({"drift_before_rollback_to": id})
                            .to_string(),
                        ..Default::default()
                    };
                    let snap = Arc::try_unwrap(current_arc).unwrap_or_else(|a| (*a).clone());
                    let (pre, snap) = self.record_locked(
                        &ws,
                        &root,
                        &settings,
                        CheckpointKind::Pre,
                        &meta,
                        Base::Latest,
                        None,
                        Some(snap),
                        None,
                    )?;
                    current_arc = snap;
                    // Drift is the user's own work, which a rollback never
                    // touches unless a step also changed the path; except
                    // when the latest checkpoint opens a step that never
                    // completed (the daemon died mid-command): then the
                    // drift is that step's effect and is rolled back.
                    if step_cut_off {
                        touched.extend(drift.iter().cloned());
                    }
                    report.drifted = drift;
                    report.drift_checkpoint_id = Some(pre.id.clone());
                    base_id = pre.id;
                }
                for c in later.iter().filter(|c| c.kind != CheckpointKind::Pre) {
                    for ch in &c.changes {
                        touched.insert(ch.path.clone());
                        if let Some(f) = &ch.from_path {
                            touched.insert(f.clone());
                        }
                    }
                }
                let target_snap =
                    snapshot::load(&self.inner.blobs, parse_hash(&target.root_hash)?)?;
                let allowed = |p: &str| touched.contains(p) && (opts.include_git || !under_git(p));
                report.not_restored = restore::restore(
                    &root,
                    &self.inner.blobs,
                    &current_arc,
                    &target_snap,
                    &allowed,
                );
            }
            // Implicit conversation rollback (neither flag) of a step outside
            // any run has nothing to do and nothing to report.
            if do_conv && (opts.conversation || !target.run_id.is_empty()) {
                let rid = report.checkpoint_id.clone();
                self.rollback_conversation(&target, &rid, &mut report)?;
            }
            // The result, recorded as a rollback checkpoint.
            let rollback_json = serde_json::json!({
                "target_id": target.id,
                "files": do_files,
                "conversation": do_conv,
                "include_git": opts.include_git,
                "force": opts.force,
                "not_restored": report.not_restored,
                "external_effects": report.external_effects,
                "external_effects_undone": false,
                "archived_branch_id": report.archived_branch_id,
                "drifted": report.drifted,
            })
            .to_string();
            let meta = CheckpointMeta {
                session_id: target.session_id.clone(),
                run_id: target.run_id.clone(),
                tool: "rollback".into(),
                arguments_json: serde_json::json!({
                    "checkpoint_id": id, "files": do_files, "conversation": do_conv,
                    "include_git": opts.include_git, "force": opts.force,
                })
                .to_string(),
                side_effects: if do_files {
                    SideEffects::Workspace
                } else {
                    SideEffects::None
                },
                ..Default::default()
            };
            let rid = report.checkpoint_id.clone();
            let (cp, _) = self.record_locked(
                &ws,
                &root,
                &settings,
                CheckpointKind::Rollback,
                &meta,
                Base::Id(&base_id),
                Some((&rid, &target.id, &rollback_json)),
                None,
                None,
            )?;
            // Without a files rollback nothing was restored: the record's
            // change set is then only drift since the latest checkpoint.
            if do_files {
                report.restored = cp.changes;
            }
            Ok(report)
        })
    }

    fn rollback_conversation(
        &self,
        target: &Checkpoint,
        rollback_id: &str,
        report: &mut RollbackReport,
    ) -> Result<()> {
        if target.run_id.is_empty() {
            report
                .not_restored
                .push("conversation: the checkpoint belongs to no run".into());
            return Ok(());
        }
        let Some(state) = &target.run_state_json else {
            report.not_restored.push(format!(
                "conversation: no run state was recorded at checkpoint {}",
                target.id
            ));
            return Ok(());
        };
        let mut conn = self.inner.db.lock();
        let tx = conn.transaction()?;
        let current: Option<String> = tx
            .query_row(
                "SELECT state_json FROM runs WHERE id = ?1",
                [&target.run_id],
                |r| r.get(0),
            )
            .ok();
        let Some(current) = current else {
            report
                .not_restored
                .push(format!("conversation: run {} not found", target.run_id));
            return Ok(());
        };
        let archive_id = crate::new_id();
        tx.execute(
            "INSERT INTO run_state_archive (id, run_id, checkpoint_id, rollback_checkpoint_id, state_json, archived_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![archive_id, target.run_id, target.id, rollback_id, current, crate::now_ms()],
        )?;
        tx.execute(
            "UPDATE runs SET state_json = ?1, updated_at_ms = ?2 WHERE id = ?3",
            params![state, crate::now_ms(), target.run_id],
        )?;
        tx.commit()?;
        report.archived_branch_id = Some(archive_id);
        Ok(())
    }

    /// Retention: keeps the checkpoints of the last `keep_runs` runs of each
    /// workspace (a run is a run id, or the session for checkpoints outside
    /// any run), then drops the oldest runs until the referenced blobs fit in
    /// `max_store_bytes`; the latest checkpoint of each workspace is always
    /// kept. Deletes unreferenced blobs and temp files. Takes the store lock
    /// exclusively (writers wait).
    pub fn gc(&self, keep_runs: u32, max_store_bytes: u64) -> Result<GcReport> {
        let _g = self
            .inner
            .gc_lock
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let _f = lock_file(
            &self.inner.blobs.root().join(".lock"),
            FlockArg::LockExclusive,
        )?;
        let mut report = GcReport::default();
        // (seq, workspace, run key, root)
        let rows: Vec<(i64, String, String, String)> = {
            let conn = self.inner.db.lock();
            conn.execute("DELETE FROM checkpoints WHERE complete = 0", [])?;
            let mut st = conn.prepare(
                "SELECT seq, workspace, CASE WHEN run_id != '' THEN run_id ELSE 'session:' || session_id END, root_hash FROM checkpoints ORDER BY seq",
            )?;
            let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        // Runs per workspace, newest first (by their latest seq).
        let mut runs: HashMap<&str, Vec<(i64, &str)>> = HashMap::new();
        let mut latest_of: HashMap<&str, i64> = HashMap::new();
        {
            let mut last: HashMap<(&str, &str), i64> = HashMap::new();
            for (seq, ws, key, _) in &rows {
                last.insert((ws.as_str(), key.as_str()), *seq);
                latest_of.insert(ws.as_str(), *seq);
            }
            for ((ws, key), seq) in last {
                runs.entry(ws).or_default().push((seq, key));
            }
            for v in runs.values_mut() {
                v.sort_unstable_by_key(|a| std::cmp::Reverse(a.0));
            }
        }
        let mut kept_runs: HashSet<(&str, &str)> = HashSet::new();
        let mut droppable: Vec<(i64, &str, &str)> = Vec::new();
        for (ws, v) in &runs {
            for (i, (seq, key)) in v.iter().enumerate() {
                if i < keep_runs.max(1) as usize {
                    kept_runs.insert((ws, key));
                    droppable.push((*seq, ws, key));
                }
            }
        }
        droppable.sort_unstable();
        let mut drop_iter = droppable.into_iter();
        let (keep, reachable) = loop {
            let keep: Vec<&(i64, String, String, String)> = rows
                .iter()
                .filter(|(seq, ws, key, _)| {
                    kept_runs.contains(&(ws.as_str(), key.as_str()))
                        || latest_of.get(ws.as_str()) == Some(seq)
                })
                .collect();
            let reachable = self.mark(keep.iter().map(|r| r.3.as_str()))?;
            let bytes: u64 = reachable.values().sum();
            if bytes <= max_store_bytes {
                break (keep, reachable);
            }
            match drop_iter.next() {
                Some((_, ws, key)) => {
                    kept_runs.remove(&(ws, key));
                }
                None => break (keep, reachable),
            }
        };
        let keep_seqs: HashSet<i64> = keep.iter().map(|r| r.0).collect();
        {
            let mut conn = self.inner.db.lock();
            let tx = conn.transaction()?;
            for (seq, ..) in &rows {
                if !keep_seqs.contains(seq) {
                    tx.execute("DELETE FROM checkpoints WHERE seq = ?1", [seq])?;
                    report.checkpoints_deleted += 1;
                }
            }
            tx.commit()?;
        }
        report.checkpoints_kept = keep_seqs.len() as u64;
        let keep_hashes: HashSet<blake3::Hash> = reachable.into_keys().collect();
        let (n, freed, kept) = self.inner.blobs.sweep(&keep_hashes)?;
        self.inner.blobs.clean_tmp()?;
        report.blobs_deleted = n;
        report.bytes_freed = freed;
        report.bytes_kept = kept;
        Ok(report)
    }

    /// Every blob reachable from these roots, with its size in bytes.
    fn mark<'a>(&self, roots: impl Iterator<Item = &'a str>) -> Result<HashMap<blake3::Hash, u64>> {
        let mut reach: HashMap<blake3::Hash, u64> = HashMap::new();
        for r in roots {
            let root = parse_hash(r)?;
            if reach.contains_key(&root) {
                continue;
            }
            // Load only subtrees not seen yet.
            let mut stack = vec![root];
            while let Some(h) = stack.pop() {
                if reach.contains_key(&h) {
                    continue;
                }
                let bytes = self.inner.blobs.get(&h)?;
                reach.insert(h, bytes.len() as u64);
                let snap_kids =
                    snapshot::decode_tree(&bytes).ok_or_else(|| CheckpointError::BlobCorrupt {
                        hash: h.to_hex().to_string(),
                    })?;
                for (_, e) in snap_kids {
                    match e.kind {
                        EntryKind::Dir => stack.push(e.hash),
                        EntryKind::Other => {}
                        _ if e.stored => {
                            reach.insert(e.hash, e.size);
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(reach)
    }
}

enum Side<'a> {
    Store(&'a Snapshot),
    Workspace(&'a Dir),
}

fn parse_hash(hex: &str) -> Result<blake3::Hash> {
    blake3::Hash::from_hex(hex).map_err(|_| CheckpointError::BlobCorrupt {
        hash: hex.to_string(),
    })
}

fn canonical(ws: &Path) -> Result<PathBuf> {
    fs::canonicalize(ws).map_err(|source| CheckpointError::Workspace {
        path: ws.to_path_buf(),
        source,
    })
}

fn open_root(ws: &Path) -> Result<Dir> {
    Dir::open_ambient_dir(ws, cap_std::ambient_authority()).map_err(|source| {
        CheckpointError::Workspace {
            path: ws.to_path_buf(),
            source,
        }
    })
}

#[cfg(test)]
impl CheckpointStore {
    pub(crate) fn inner_blobs_put_for_test(&self, h: &blake3::Hash, bytes: &[u8]) {
        self.inner.blobs.put(h, bytes).unwrap();
    }
    pub(crate) fn restore_for_test(
        &self,
        root: &Dir,
        current: &Snapshot,
        target: &Snapshot,
    ) -> Vec<String> {
        restore::restore(root, &self.inner.blobs, current, target, &|_| true)
    }
}
