//! The audit log: an append-only, hash-chained table of what was decided and
//! done, with its head (latest seq and hash) also kept in a file outside the
//! database so a cut-off tail is detected.
//!
//! Each record's hash is BLAKE3 over a length-prefixed encoding of every
//! field (seq, time, session, run, step, actor, action, detail, layer) and
//! the previous record's hash; the first record's previous hash is
//! [`GENESIS_HASH`]. [`AuditLog::verify`] recomputes the chain and names the
//! first broken record: an edited record fails its own hash, a deleted one
//! leaves a gap in `seq`, a reordered one fails its hash (seq is hashed) or
//! its link, and a cut-off tail is shorter than the head file says.
//!
//! Durability: every append commits its SQLite transaction (WAL,
//! `synchronous=FULL`) and then writes the head into one of the head file's
//! two checksummed slots with one `fdatasync` (a torn write leaves the other
//! slot, the previous head, intact; see pwrite(2), fdatasync(2)).
//! When [`AuditLog::append`] returns `Ok`, the record is on disk: callers
//! append `exec_start` before they start a command and refuse to start it
//! when the append fails.

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::layer::{Actor, Layer};
use crate::state::Db;

/// `prev_hash` of the first record: 64 zeros.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// File name of the head file inside the state dir.
pub const HEAD_FILE: &str = "audit.head";

/// Well-known values of [`AuditRecord::action`].
pub mod actions {
    /// A command was classified and decided by policy.
    pub const CLASSIFY: &str = "classify";
    /// A call was refused by the schema layer (malformed arguments).
    pub const REJECT: &str = "reject";
    /// An approval request was raised.
    pub const REQUEST: &str = "request";
    /// A request was granted (scope once or session).
    pub const GRANT: &str = "grant";
    /// A request was denied, or policy denied a call.
    pub const DENY: &str = "deny";
    /// A pending request (or an unused grant) expired.
    pub const EXPIRE: &str = "expire";
    /// A once-grant was used by its execution.
    pub const CONSUME: &str = "consume";
    /// A session grant covered a call.
    pub const GRANT_USE: &str = "grant_use";
    /// A call was refused because the same request was denied before.
    pub const REFUSE: &str = "refuse";
    /// A command started (durable before it starts).
    pub const EXEC_START: &str = "exec_start";
    /// A command ended (exit code, signal, duration).
    pub const EXEC_END: &str = "exec_end";
    /// A file tool changed files (paths, kinds, hashes before and after).
    pub const FILE_CHANGE: &str = "file_change";
    /// Files or conversation were rolled back to a checkpoint.
    pub const ROLLBACK: &str = "rollback";
    /// The daemon's policy was reloaded.
    pub const POLICY_RELOAD: &str = "policy_reload";
    /// A run was resumed.
    pub const RESUME: &str = "resume";
    /// A run was found cut off (its client or the daemon killed), recorded
    /// when it is resumed.
    pub const CRASH: &str = "crash";
    /// The daemon found the chain broken at startup (detail: the report).
    pub const AUDIT_BROKEN: &str = "audit_broken";
}

/// Errors of the audit log.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("audit log database: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("audit head file {path}: {source}")]
    HeadFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("audit head file {path}: cannot parse {content:?}")]
    HeadParse { path: PathBuf, content: String },
    #[error("audit record field {field}: {message}")]
    Field {
        field: &'static str,
        message: String,
    },
}

/// One stored audit record. JSON field names are an interface (`warden audit
/// --json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub seq: u64,
    /// Unix epoch ms.
    pub time_ms: i64,
    pub session_id: String,
    pub run_id: String,
    pub step_id: String,
    /// `uid:1000`, `user:NAME`, `daemon`.
    pub actor: String,
    /// One of [`actions`] (or another lowercase word).
    pub action: String,
    /// JSON object with the details.
    pub detail_json: String,
    /// `schema`, `policy`, `user`, `daemon`.
    pub layer: String,
    /// 64 hex.
    pub prev_hash: String,
    /// 64 hex.
    pub hash: String,
}

impl AuditRecord {
    /// The hash this record should carry: BLAKE3 of a domain tag and every
    /// field except `hash`, each length-prefixed (u64 little endian).
    pub fn compute_hash(&self) -> String {
        super::hash_fields(
            b"warden-audit-v1\0",
            &[&self.seq.to_le_bytes(), &self.time_ms.to_le_bytes()],
            &[
                &self.session_id,
                &self.run_id,
                &self.step_id,
                &self.actor,
                &self.action,
                &self.detail_json,
                &self.layer,
                &self.prev_hash,
            ],
        )
    }
}

/// What to append: the caller's part of a record (seq, time and hashes are
/// the log's).
#[derive(Debug, Clone)]
pub struct NewRecord<'a> {
    pub session_id: &'a str,
    pub run_id: &'a str,
    pub step_id: &'a str,
    pub actor: &'a Actor,
    /// One of [`actions`]: lowercase ASCII letters, digits, `_`, `.`, `:`.
    pub action: &'a str,
    /// Must be a JSON object.
    pub detail: serde_json::Value,
    pub layer: Layer,
}

/// The chain's head: the latest seq (0 when empty) and its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub seq: u64,
    pub hash: String,
}

impl Head {
    fn genesis() -> Head {
        Head {
            seq: 0,
            hash: GENESIS_HASH.to_string(),
        }
    }
}

/// How the chain is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakKind {
    /// A record's fields do not match its hash (edited, or moved to another seq).
    Edited,
    /// A seq is missing (deleted record).
    Missing,
    /// A record does not link to its predecessor (reordered or replaced).
    Unlinked,
    /// The database ends before the head file's seq (tail cut off).
    Truncated,
    /// The last record is not the one the head file names (tail replaced).
    HeadMismatch,
    /// The head file is missing or unreadable while records exist.
    HeadMissing,
    /// A head kept elsewhere (a checkpoint) names a record the chain does
    /// not have (the chain was rewritten).
    AnchorMismatch,
}

/// The result of [`AuditLog::verify`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    pub ok: bool,
    /// Records in the database.
    pub records: u64,
    /// Seq of the first broken record; 0 when ok.
    pub first_broken_seq: u64,
    pub kind: Option<BreakKind>,
    /// Human-readable description naming the first broken record; empty when ok.
    pub error: String,
    /// Records after the head file's seq that still chain correctly (a crash
    /// between commit and head-file update leaves at most one).
    pub unanchored: u64,
}

struct Inner {
    db: Db,
    head_path: PathBuf,
    /// The head the next append chains onto. Kept in memory so a tail cut
    /// off while the daemon runs still leaves a gap.
    head: Mutex<Head>,
    /// The seq of the newest head written to the head file (updated under
    /// the `head` lock), so a late [`AuditLog::sync`] never writes an older
    /// head over a newer one.
    file_seq: std::sync::atomic::AtomicU64,
    startup: VerifyReport,
}

/// The audit log. Cheap to clone.
#[derive(Clone)]
pub struct AuditLog {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("head_path", &self.inner.head_path)
            .finish()
    }
}

/// Migrations of the `approval` module's audit table (registered in
/// [`crate::state::ALL_MIGRATIONS`] through [`super::APPROVAL_MIGRATIONS`]).
pub(super) const AUDIT_SCHEMA_V1: &str = r#"
CREATE TABLE audit_log (
    seq INTEGER PRIMARY KEY,
    time_ms INTEGER NOT NULL,
    session_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    step_id TEXT NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    detail_json TEXT NOT NULL,
    layer TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE INDEX audit_log_session ON audit_log(session_id, seq);
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
"#;

/// The `audit_log` columns in the order [`AuditRecord::from_row`] reads
/// them (`SELECT {AUDIT_COLUMNS} FROM audit_log`), for offline tools.
pub const AUDIT_COLUMNS: &str =
    "seq, time_ms, session_id, run_id, step_id, actor, action, detail_json, layer, prev_hash, hash";
const COLUMNS: &str = AUDIT_COLUMNS;

impl AuditRecord {
    /// Reads a row selected with [`AUDIT_COLUMNS`].
    pub fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AuditRecord> {
        row_to_record(r)
    }
}

fn row_to_record(r: &rusqlite::Row<'_>) -> rusqlite::Result<AuditRecord> {
    Ok(AuditRecord {
        seq: r.get::<_, i64>(0)? as u64,
        time_ms: r.get(1)?,
        session_id: r.get(2)?,
        run_id: r.get(3)?,
        step_id: r.get(4)?,
        actor: r.get(5)?,
        action: r.get(6)?,
        detail_json: r.get(7)?,
        layer: r.get(8)?,
        prev_hash: r.get(9)?,
        hash: r.get(10)?,
    })
}

/// Bytes of one head slot in the head file.
const HEAD_SLOT: usize = 128;

/// One head slot: `warden-audit-head v1 SEQ HASH CHECK`, padded with spaces
/// to [`HEAD_SLOT`] bytes ending in a newline; CHECK is 16 hex of BLAKE3 of
/// the text before it, so a torn write is recognised.
fn encode_slot(head: &Head) -> [u8; HEAD_SLOT] {
    let body = format!("warden-audit-head v1 {} {}", head.seq, head.hash);
    let check = blake3::hash(body.as_bytes()).to_hex();
    let line = format!("{body} {}", &check[..16]);
    let mut slot = [b' '; HEAD_SLOT];
    slot[..line.len()].copy_from_slice(line.as_bytes());
    slot[HEAD_SLOT - 1] = b'\n';
    slot
}

fn decode_slot(slot: &[u8]) -> Option<Head> {
    let text = std::str::from_utf8(slot).ok()?.trim_end();
    let (body, check) = text.rsplit_once(' ')?;
    if blake3::hash(body.as_bytes()).to_hex()[..16] != *check {
        return None;
    }
    let rest = body.strip_prefix("warden-audit-head v1 ")?;
    let (seq, hash) = rest.split_once(' ')?;
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(Head {
        seq: seq.parse().ok()?,
        hash: hash.to_string(),
    })
}

/// Reads the head file: `None` when it does not exist; the valid slot with
/// the highest seq otherwise.
///
/// Errors: [`AuditError::HeadFile`] when it cannot be read,
/// [`AuditError::HeadParse`] when no slot is valid.
fn read_head(path: &Path) -> Result<Option<Head>, AuditError> {
    let bytes = match std::fs::read(path) {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(AuditError::HeadFile {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    bytes
        .chunks(HEAD_SLOT)
        .take(2)
        .filter_map(decode_slot)
        .max_by_key(|h| h.seq)
        .map(Some)
        .ok_or_else(|| AuditError::HeadParse {
            path: path.to_path_buf(),
            content: String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned(),
        })
}

/// Records `head` in the head file durably with one data sync: the file
/// has two slots and seq N goes to slot N % 2, so a write torn by a crash
/// leaves the other slot (the previous head) intact (pwrite(2),
/// fdatasync(2)). A new file's directory entry is synced too.
/// How far an append waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sync {
    /// Commit fsynced, head file written and synced.
    Full,
    /// Commit fsynced, head file written (synced later).
    Commit,
    /// Neither: durable with the next sync.
    Deferred,
}

/// The error of a deferred append: the caller's own, or SQLite's.
enum Deferred<E> {
    Inner(E),
    Sql(rusqlite::Error),
}

impl<E> From<rusqlite::Error> for Deferred<E> {
    fn from(e: rusqlite::Error) -> Self {
        Deferred::Sql(e)
    }
}

fn write_head(path: &Path, head: &Head, sync: bool) -> Result<(), AuditError> {
    use std::os::unix::fs::FileExt;
    let err = |source| AuditError::HeadFile {
        path: path.to_path_buf(),
        source,
    };
    let existed = path.exists();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(err)?;
    f.write_all_at(&encode_slot(head), (head.seq % 2) * HEAD_SLOT as u64)
        .map_err(err)?;
    if sync || !existed {
        f.sync_data().map_err(err)?;
    }
    if !existed {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(err)?;
    }
    Ok(())
}

fn valid_action(a: &str) -> bool {
    !a.is_empty()
        && a.len() <= 64
        && a.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b':')
        })
}

impl AuditLog {
    /// Opens the audit log of `db`, with its head file at `head_path`
    /// (normally `STATE_DIR/audit.head`), and verifies the chain.
    ///
    /// A broken chain does not stop the daemon: the log opens, the report is
    /// kept ([`AuditLog::startup_report`]) and recorded as an `audit_broken`
    /// record, and appends continue after the highest seq known (the head
    /// file's when it is ahead, so a cut-off tail stays a visible gap). When
    /// the head file is behind an intact chain (a crash between commit and
    /// head update), it is brought up to date.
    ///
    /// Errors: [`AuditError::Sql`] when the table cannot be read,
    /// [`AuditError::HeadFile`] when the head file cannot be written.
    pub fn open(db: Db, head_path: impl Into<PathBuf>) -> Result<AuditLog, AuditError> {
        let head_path = head_path.into();
        let report = verify_chain(&db, &head_path)?;
        let db_last = last_record(&db)?;
        let file_head = read_head(&head_path).ok().flatten();
        let db_head = db_last
            .as_ref()
            .map(|r| Head {
                seq: r.seq,
                hash: r.hash.clone(),
            })
            .unwrap_or_else(Head::genesis);
        let head = match file_head {
            Some(f) if f.seq > db_head.seq => f,
            _ => db_head,
        };
        if report.ok && report.unanchored > 0 {
            tracing::warn!(
                unanchored = report.unanchored,
                "audit head file was behind the database; updating it"
            );
            write_head(&head_path, &head, true)?;
        }
        let log = AuditLog {
            inner: Arc::new(Inner {
                db,
                head_path,
                head: Mutex::new(head),
                file_seq: std::sync::atomic::AtomicU64::new(0),
                startup: report.clone(),
            }),
        };
        if !report.ok {
            tracing::error!(
                first_broken_seq = report.first_broken_seq,
                error = %report.error,
                "audit chain is broken"
            );
            log.append(NewRecord {
                session_id: "",
                run_id: "",
                step_id: "",
                actor: &Actor::Daemon,
                action: actions::AUDIT_BROKEN,
                detail: serde_json::to_value(&report).expect("report serializes"),
                layer: Layer::Daemon,
            })?;
        }
        Ok(log)
    }

    /// The verification done when the log was opened.
    pub fn startup_report(&self) -> &VerifyReport {
        &self.inner.startup
    }

    /// The current head (latest seq and hash), for checkpoints to carry.
    pub fn head(&self) -> Head {
        self.inner
            .head
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Appends one record and makes it durable (database commit, then the
    /// head file). Returns the stored record.
    ///
    /// Errors: [`AuditError::Field`] for an action that is not a lowercase
    /// word or a detail that is not a JSON object; [`AuditError::Sql`] when
    /// the insert fails (the seq already exists: someone wrote the table
    /// behind the daemon's back); [`AuditError::HeadFile`] when the head file
    /// cannot be replaced. On error nothing may be assumed recorded: callers
    /// must not start the action the record is about.
    pub fn append(&self, rec: NewRecord<'_>) -> Result<AuditRecord, AuditError> {
        self.append_with(rec, |_| Ok::<(), AuditError>(()))
            .map(|(_, r)| r)
    }

    /// Like [`AuditLog::append`], but runs `change` in the same SQLite
    /// transaction as the insert: the state change and its audit record are
    /// committed together or not at all. When `change` fails, nothing is
    /// written and its error is returned.
    ///
    /// `change` gets the open transaction; it must not lock the [`Db`]
    /// itself (the connection is already locked).
    pub fn append_with<T, E>(
        &self,
        rec: NewRecord<'_>,
        change: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, E>,
    ) -> Result<(T, AuditRecord), E>
    where
        E: From<AuditError>,
    {
        self.append_inner(rec, change, Sync::Full)
    }

    /// Appends one record whose durability point is a later durable append
    /// of the same call (a `classify` before the call's `exec_start`,
    /// `deny`, `request`, ...): committed without an fsync
    /// ([`crate::state::write_deferred`]) and without writing the head file.
    /// It survives a crash of the daemon; after a power loss before the next
    /// durable append it may be missing, never half-written, and the chain
    /// stays intact (the head file names an earlier record: `verify` counts
    /// the records after it as unanchored, not as a break).
    pub fn append_deferred(&self, rec: NewRecord<'_>) -> Result<AuditRecord, AuditError> {
        self.append_inner(rec, |_| Ok::<(), AuditError>(()), Sync::Deferred)
            .map(|(_, r)| r)
    }

    /// Appends a record that must be on disk before an effect begins
    /// (`exec_start`): the database commit is fsynced like
    /// [`AuditLog::append`]'s; the head file is written but synced by the
    /// call's closing [`AuditLog::sync`] (until then a power loss can leave
    /// it naming an earlier record, which `verify` reports as unanchored
    /// records, not a break).
    pub fn append_before_effect(&self, rec: NewRecord<'_>) -> Result<AuditRecord, AuditError> {
        self.append_inner(rec, |_| Ok::<(), AuditError>(()), Sync::Commit)
            .map(|(_, r)| r)
    }

    /// Makes every record appended so far durable, head file included: one
    /// fdatasync of the database's WAL (which holds every commit since the
    /// last WAL checkpoint, and a checkpoint syncs what it copies; SQLite,
    /// "Write-Ahead Logging"), then the head. For the end of a call whose
    /// closing record was [`AuditLog::append_deferred`], once its answer is
    /// on its way.
    ///
    /// Errors: [`AuditError::HeadFile`] when either cannot be synced.
    pub fn sync(&self) -> Result<(), AuditError> {
        use std::sync::atomic::Ordering;
        // Only a head whose record is durable may reach the head file (one
        // ahead of the database would read as a cut-off tail after a power
        // loss): capture it, sync, then write it unless a newer one is there.
        let target = self
            .inner
            .head
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        self.inner
            .db
            .sync_wal()
            .map_err(|source| AuditError::HeadFile {
                path: self.inner.db.path().to_path_buf(),
                source,
            })?;
        let _g = self.inner.head.lock().unwrap_or_else(|p| p.into_inner());
        if self.inner.file_seq.load(Ordering::SeqCst) < target.seq {
            write_head(&self.inner.head_path, &target, true)?;
            self.inner.file_seq.store(target.seq, Ordering::SeqCst);
        }
        Ok(())
    }

    fn append_inner<T, E>(
        &self,
        rec: NewRecord<'_>,
        change: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, E>,
        mode: Sync,
    ) -> Result<(T, AuditRecord), E>
    where
        E: From<AuditError>,
    {
        if !valid_action(rec.action) {
            return Err(AuditError::Field {
                field: "action",
                message: format!("{:?} is not a lowercase word", rec.action),
            }
            .into());
        }
        if !rec.detail.is_object() {
            return Err(AuditError::Field {
                field: "detail",
                message: "must be a JSON object".into(),
            }
            .into());
        }
        let mut head = self.inner.head.lock().unwrap_or_else(|p| p.into_inner());
        let mut record = AuditRecord {
            seq: head.seq + 1,
            time_ms: crate::now_ms(),
            session_id: rec.session_id.to_string(),
            run_id: rec.run_id.to_string(),
            step_id: rec.step_id.to_string(),
            actor: rec.actor.to_string(),
            action: rec.action.to_string(),
            detail_json: rec.detail.to_string(),
            layer: rec.layer.as_str().to_string(),
            prev_hash: head.hash.clone(),
            hash: String::new(),
        };
        record.hash = record.compute_hash();
        let insert = |tx: &rusqlite::Transaction<'_>| -> Result<T, E> {
            let out = change(tx)?;
            tx.prepare_cached(
                &format!("INSERT INTO audit_log ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"),
            )
            .map_err(AuditError::from)?
            .execute(params![
                    record.seq as i64,
                    record.time_ms,
                    record.session_id,
                    record.run_id,
                    record.step_id,
                    record.actor,
                    record.action,
                    record.detail_json,
                    record.layer,
                    record.prev_hash,
                    record.hash
                ],
            )
            .map_err(AuditError::from)?;
            Ok(out)
        };
        let out = {
            let mut conn = self.inner.db.lock();
            if mode != Sync::Deferred {
                let tx = conn.transaction().map_err(AuditError::from)?;
                let out = insert(&tx)?;
                tx.commit().map_err(AuditError::from)?;
                out
            } else {
                crate::state::write_deferred(&mut conn, |tx| insert(tx).map_err(Deferred::Inner))
                    .map_err(|e| match e {
                        Deferred::Inner(e) => e,
                        Deferred::Sql(e) => AuditError::from(e).into(),
                    })?
            }
        };
        let new_head = Head {
            seq: record.seq,
            hash: record.hash.clone(),
        };
        // The record is committed: advance the in-memory head even if the
        // head file cannot be written (the next append repairs the file;
        // verify reports it behind meanwhile).
        *head = new_head.clone();
        if mode != Sync::Deferred {
            write_head(&self.inner.head_path, &new_head, mode == Sync::Full)?;
            self.inner
                .file_seq
                .store(new_head.seq, std::sync::atomic::Ordering::SeqCst);
        }
        Ok((out, record))
    }

    /// Records in seq order: those of `session_id` (all when `None`) with
    /// seq greater than `after_seq`, at most `limit`.
    pub fn list(
        &self,
        session_id: Option<&str>,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, AuditError> {
        let conn = self.inner.db.lock();
        let limit = limit.min(i64::MAX as usize) as i64;
        let mut out = Vec::new();
        match session_id {
            Some(s) => {
                let mut st = conn.prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM audit_log WHERE session_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"
                ))?;
                for r in st.query_map(params![s, after_seq as i64, limit], row_to_record)? {
                    out.push(r?);
                }
            }
            None => {
                let mut st = conn.prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM audit_log WHERE seq > ?1 ORDER BY seq LIMIT ?2"
                ))?;
                for r in st.query_map(params![after_seq as i64, limit], row_to_record)? {
                    out.push(r?);
                }
            }
        }
        Ok(out)
    }

    /// Recomputes the whole chain and compares its end with the head file.
    /// Names the first broken record; see [`VerifyReport`].
    pub fn verify(&self) -> Result<VerifyReport, AuditError> {
        self.verify_with_anchors(&[])
    }

    /// Like [`AuditLog::verify`], then checks `anchors`: heads recorded
    /// elsewhere (each checkpoint keeps the head of its time). Every anchor
    /// must name a record of the chain with that hash; one past the end
    /// means a cut-off tail, one with another hash a rewritten chain
    /// ([`BreakKind::AnchorMismatch`]), even when the head file was
    /// rewritten too. Anchors with seq 0 are ignored.
    pub fn verify_with_anchors(&self, anchors: &[Head]) -> Result<VerifyReport, AuditError> {
        // Hold the head lock so no append lands between the table scan and
        // the head-file read.
        let _g = self.inner.head.lock().unwrap_or_else(|p| p.into_inner());
        let report = verify_chain(&self.inner.db, &self.inner.head_path)?;
        if !report.ok {
            return Ok(report);
        }
        let conn = self.inner.db.lock();
        let last: i64 = conn.query_row("SELECT COALESCE(MAX(seq), 0) FROM audit_log", [], |r| {
            r.get(0)
        })?;
        let mut sorted: Vec<&Head> = anchors.iter().filter(|a| a.seq > 0).collect();
        sorted.sort_by_key(|a| a.seq);
        for a in sorted {
            if a.seq > last as u64 {
                return Ok(broken(
                    report.records,
                    last as u64 + 1,
                    BreakKind::Truncated,
                    format!(
                        "the log ends at record {last} but a checkpoint names record {}: records {}..={} were cut off",
                        a.seq,
                        last + 1,
                        a.seq
                    ),
                ));
            }
            let hash: Option<String> = conn
                .query_row(
                    "SELECT hash FROM audit_log WHERE seq = ?1",
                    [a.seq as i64],
                    |r| r.get(0),
                )
                .optional()?;
            if hash.as_deref() != Some(a.hash.as_str()) {
                return Ok(broken(
                    report.records,
                    a.seq,
                    BreakKind::AnchorMismatch,
                    format!(
                        "record {} is not the record a checkpoint names (chain rewritten)",
                        a.seq
                    ),
                ));
            }
        }
        Ok(report)
    }
}

fn last_record(db: &Db) -> Result<Option<AuditRecord>, AuditError> {
    Ok(db
        .lock()
        .query_row(
            &format!("SELECT {COLUMNS} FROM audit_log ORDER BY seq DESC LIMIT 1"),
            [],
            row_to_record,
        )
        .optional()?)
}

fn broken(records: u64, seq: u64, kind: BreakKind, error: String) -> VerifyReport {
    VerifyReport {
        ok: false,
        records,
        first_broken_seq: seq,
        kind: Some(kind),
        error,
        unanchored: 0,
    }
}

/// Verifies the chain in `db` against the head file at `head_path` without
/// an open [`AuditLog`] (offline checks, tests). Same report as
/// [`AuditLog::verify`].
pub fn verify_chain(db: &Db, head_path: &Path) -> Result<VerifyReport, AuditError> {
    let conn = db.lock();
    let records: u64 =
        conn.query_row("SELECT COUNT(*) FROM audit_log", [], |r| r.get::<_, i64>(0))? as u64;
    let mut st = conn.prepare(&format!("SELECT {COLUMNS} FROM audit_log ORDER BY seq"))?;
    let mut rows = st.query([])?;
    let mut prev = Head::genesis();
    let mut first_error: Option<VerifyReport> = None;
    while let Some(row) = rows.next()? {
        let rec = row_to_record(row)?;
        let expected = prev.seq + 1;
        if rec.seq != expected {
            let e = if rec.seq > expected {
                let last_missing = rec.seq - 1;
                let what = if last_missing == expected {
                    format!("record {expected} is missing")
                } else {
                    format!("records {expected}..={last_missing} are missing")
                };
                broken(
                    records,
                    expected,
                    BreakKind::Missing,
                    format!("{what} (deleted): record {} follows {}", rec.seq, prev.seq),
                )
            } else {
                broken(
                    records,
                    rec.seq,
                    BreakKind::Unlinked,
                    format!("record {} is out of order", rec.seq),
                )
            };
            first_error = Some(e);
            break;
        }
        if rec.compute_hash() != rec.hash {
            first_error = Some(broken(
                records,
                rec.seq,
                BreakKind::Edited,
                format!(
                    "record {} does not match its hash (edited or moved from another position)",
                    rec.seq
                ),
            ));
            break;
        }
        if rec.prev_hash != prev.hash {
            first_error = Some(broken(
                records,
                rec.seq,
                BreakKind::Unlinked,
                format!(
                    "record {} does not link to record {} (reordered or replaced)",
                    rec.seq, prev.seq
                ),
            ));
            break;
        }
        prev = Head {
            seq: rec.seq,
            hash: rec.hash,
        };
    }
    if let Some(e) = first_error {
        return Ok(e);
    }
    let file_head = match read_head(head_path) {
        Ok(h) => h,
        Err(e) => {
            return Ok(broken(
                records,
                prev.seq.max(1),
                BreakKind::HeadMissing,
                format!("cannot read the audit head file: {e}"),
            ))
        }
    };
    let Some(file_head) = file_head else {
        if prev.seq == 0 {
            // A fresh log: nothing written yet.
            return Ok(VerifyReport {
                ok: true,
                records,
                first_broken_seq: 0,
                kind: None,
                error: String::new(),
                unanchored: 0,
            });
        }
        return Ok(broken(
            records,
            prev.seq,
            BreakKind::HeadMissing,
            format!(
                "the audit head file {} is missing while {} records exist",
                head_path.display(),
                prev.seq
            ),
        ));
    };
    if file_head.seq > prev.seq {
        let first = prev.seq + 1;
        return Ok(broken(
            records,
            first,
            BreakKind::Truncated,
            format!(
                "the log ends at record {} but the head file names record {}: records {first}..={} were cut off",
                prev.seq, file_head.seq, file_head.seq
            ),
        ));
    }
    let mut unanchored = 0;
    if file_head.seq == prev.seq {
        if file_head.hash != prev.hash {
            return Ok(broken(
                records,
                prev.seq,
                BreakKind::HeadMismatch,
                format!(
                    "record {} is not the record the head file names (tail replaced)",
                    prev.seq
                ),
            ));
        }
    } else {
        // The head file is behind: check that it names a record of the chain.
        let anchored: Option<String> = conn
            .query_row(
                "SELECT hash FROM audit_log WHERE seq = ?1",
                [file_head.seq as i64],
                |r| r.get(0),
            )
            .optional()?;
        let matches = if file_head.seq == 0 {
            file_head.hash == GENESIS_HASH
        } else {
            anchored.as_deref() == Some(file_head.hash.as_str())
        };
        if !matches {
            return Ok(broken(
                records,
                file_head.seq.max(1),
                BreakKind::HeadMismatch,
                format!(
                    "record {} is not the record the head file names",
                    file_head.seq
                ),
            ));
        }
        unanchored = prev.seq - file_head.seq;
    }
    Ok(VerifyReport {
        ok: true,
        records,
        first_broken_seq: 0,
        kind: None,
        error: String::new(),
        unanchored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, Db, AuditLog) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let log = AuditLog::open(db.clone(), dir.path().join(HEAD_FILE)).unwrap();
        (dir, db, log)
    }

    #[test]
    fn deferred_records_are_unanchored_until_synced() {
        let (dir, _db, log) = setup();
        add(&log, 2);
        let rec = |step: &'static str| NewRecord {
            session_id: "s1",
            run_id: "r1",
            step_id: step,
            actor: &Actor::Peer(1000),
            action: actions::CLASSIFY,
            detail: serde_json::json!({}),
            layer: Layer::Policy,
        };
        log.append_deferred(rec("a")).unwrap();
        log.append_before_effect(rec("b")).unwrap();
        log.append_deferred(rec("c")).unwrap();
        // The chain is whole; the head file names record 4 (the
        // before-effect one), so one record is not anchored yet.
        let r = log.verify().unwrap();
        assert!(r.ok, "{r:?}");
        assert_eq!((r.records, r.unanchored), (5, 1));
        log.sync().unwrap();
        let r = log.verify().unwrap();
        assert_eq!((r.ok, r.unanchored), (true, 0));
        // A reopened log reads the synced head.
        let db = Db::open(dir.path()).unwrap();
        let again = AuditLog::open(db, dir.path().join(HEAD_FILE)).unwrap();
        assert_eq!(again.verify().unwrap().unanchored, 0);
    }

    fn add(log: &AuditLog, n: usize) {
        for i in 0..n {
            log.append(NewRecord {
                session_id: "s1",
                run_id: "r1",
                step_id: &format!("step{i}"),
                actor: &Actor::Peer(1000),
                action: actions::EXEC_START,
                detail: serde_json::json!({"command": format!("echo {i}")}),
                layer: Layer::Policy,
            })
            .unwrap();
        }
    }

    /// Runs SQL as a tamperer would: drops the append-only triggers first.
    fn tamper(db: &Db, sql: &str) {
        let conn = db.lock();
        conn.execute_batch(
            "DROP TRIGGER IF EXISTS audit_log_no_update; DROP TRIGGER IF EXISTS audit_log_no_delete;",
        )
        .unwrap();
        conn.execute_batch(sql).unwrap();
    }

    #[test]
    fn intact_chain_verifies_and_survives_reopen() {
        let (dir, db, log) = setup();
        assert!(log.verify().unwrap().ok, "empty log");
        add(&log, 5);
        let r = log.verify().unwrap();
        assert!(r.ok, "{r:?}");
        assert_eq!(r.records, 5);
        assert_eq!(log.head().seq, 5);
        drop(log);
        let log = AuditLog::open(db, dir.path().join(HEAD_FILE)).unwrap();
        assert!(log.startup_report().ok);
        add(&log, 1);
        let recs = log.list(None, 0, 100).unwrap();
        assert_eq!(recs.len(), 6);
        assert_eq!(recs[5].prev_hash, recs[4].hash);
        assert_eq!(recs[0].prev_hash, GENESIS_HASH);
        assert_eq!(log.list(Some("s1"), 4, 100).unwrap().len(), 2);
        assert_eq!(log.list(Some("other"), 0, 100).unwrap().len(), 0);
    }

    #[test]
    fn triggers_refuse_update_and_delete() {
        let (_dir, db, log) = setup();
        add(&log, 2);
        let conn = db.lock();
        assert!(conn
            .execute("UPDATE audit_log SET action = 'x' WHERE seq = 1", [])
            .is_err());
        assert!(conn
            .execute("DELETE FROM audit_log WHERE seq = 2", [])
            .is_err());
    }

    #[test]
    fn every_field_is_covered_by_the_hash() {
        let (_dir, db, log) = setup();
        add(&log, 3);
        for (col, val) in [
            ("time_ms", "time_ms + 1"),
            ("session_id", "'s2'"),
            ("run_id", "'r2'"),
            ("step_id", "'x'"),
            ("actor", "'daemon'"),
            ("action", "'grant'"),
            ("detail_json", "'{}'"),
            ("layer", "'user'"),
            ("prev_hash", "hash"),
        ] {
            let before: String = db
                .lock()
                .query_row(
                    &format!("SELECT CAST({col} AS TEXT) FROM audit_log WHERE seq = 2"),
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            tamper(
                &db,
                &format!("UPDATE audit_log SET {col} = {val} WHERE seq = 2"),
            );
            let r = log.verify().unwrap();
            assert!(!r.ok, "edit of {col} not detected");
            assert_eq!(r.first_broken_seq, 2, "{col}: {r:?}");
            assert_eq!(r.kind, Some(BreakKind::Edited), "{col}");
            let conn = db.lock();
            conn.execute(
                &format!("UPDATE audit_log SET {col} = ?1 WHERE seq = 2"),
                [before],
            )
            .unwrap();
            drop(conn);
            assert!(log.verify().unwrap().ok, "restoring {col}");
        }
    }

    #[test]
    fn deletion_in_the_middle_is_detected() {
        let (_dir, db, log) = setup();
        add(&log, 5);
        tamper(&db, "DELETE FROM audit_log WHERE seq = 3");
        let r = log.verify().unwrap();
        assert_eq!(
            (r.ok, r.first_broken_seq, r.kind),
            (false, 3, Some(BreakKind::Missing))
        );
        assert!(r.error.contains("record 3"), "{}", r.error);
    }

    #[test]
    fn deletion_of_the_first_record_is_detected() {
        let (_dir, db, log) = setup();
        add(&log, 3);
        tamper(&db, "DELETE FROM audit_log WHERE seq = 1");
        let r = log.verify().unwrap();
        assert_eq!((r.ok, r.first_broken_seq), (false, 1));
    }

    #[test]
    fn reordering_is_detected() {
        let (_dir, db, log) = setup();
        add(&log, 5);
        // Swap records 2 and 3 by exchanging their seq.
        tamper(
            &db,
            "UPDATE audit_log SET seq = -2 WHERE seq = 2;
             UPDATE audit_log SET seq = 2 WHERE seq = 3;
             UPDATE audit_log SET seq = 3 WHERE seq = -2;",
        );
        let r = log.verify().unwrap();
        assert_eq!((r.ok, r.first_broken_seq), (false, 2), "{r:?}");
        // Swapping every column but seq (contents moved, hashes kept).
        let (_dir, db, log) = setup();
        add(&log, 5);
        tamper(
            &db,
            "CREATE TEMP TABLE t AS SELECT * FROM audit_log WHERE seq IN (2, 3);
             UPDATE audit_log SET (time_ms, session_id, run_id, step_id, actor, action, detail_json, layer, prev_hash, hash) =
               (SELECT time_ms, session_id, run_id, step_id, actor, action, detail_json, layer, prev_hash, hash FROM t WHERE t.seq = 5 - audit_log.seq)
               WHERE seq IN (2, 3);",
        );
        let r = log.verify().unwrap();
        assert_eq!((r.ok, r.first_broken_seq), (false, 2), "{r:?}");
    }

    #[test]
    fn cut_off_tail_is_detected_and_stays_a_gap_after_restart() {
        let (dir, db, log) = setup();
        add(&log, 5);
        drop(log);
        tamper(&db, "DELETE FROM audit_log WHERE seq >= 4");
        let log = AuditLog::open(db.clone(), dir.path().join(HEAD_FILE)).unwrap();
        let r = log.startup_report().clone();
        assert_eq!(
            (r.ok, r.first_broken_seq, r.kind),
            (false, 4, Some(BreakKind::Truncated))
        );
        // The daemon recorded the break and goes on after seq 5: the gap stays.
        assert_eq!(log.head().seq, 6);
        let r = log.verify().unwrap();
        assert_eq!(
            (r.ok, r.first_broken_seq, r.kind),
            (false, 4, Some(BreakKind::Missing))
        );
        let last = log.list(None, 5, 10).unwrap();
        assert_eq!(last[0].action, actions::AUDIT_BROKEN);
    }

    #[test]
    fn tail_cut_while_running_leaves_a_gap() {
        let (_dir, db, log) = setup();
        add(&log, 4);
        tamper(&db, "DELETE FROM audit_log WHERE seq = 4");
        assert_eq!(log.verify().unwrap().kind, Some(BreakKind::Truncated));
        add(&log, 1);
        let r = log.verify().unwrap();
        assert_eq!((r.ok, r.first_broken_seq), (false, 4));
    }

    #[test]
    fn rechained_tail_is_caught_by_the_head_file() {
        let (_dir, db, log) = setup();
        add(&log, 3);
        // Edit the last record and recompute its hash: the chain is
        // self-consistent, but the head file still names the old record.
        let mut last = log.list(None, 2, 1).unwrap().remove(0);
        last.detail_json = r#"{"command":"nothing to see"}"#.into();
        last.hash = last.compute_hash();
        tamper(
            &db,
            &format!(
                "UPDATE audit_log SET detail_json = '{}', hash = '{}' WHERE seq = 3",
                last.detail_json, last.hash
            ),
        );
        let r = log.verify().unwrap();
        assert_eq!(
            (r.ok, r.first_broken_seq, r.kind),
            (false, 3, Some(BreakKind::HeadMismatch))
        );
    }

    #[test]
    fn a_rewritten_chain_is_caught_by_a_checkpoint_anchor() {
        let (dir, db, log) = setup();
        add(&log, 4);
        let anchor = log.head();
        assert!(log.verify_with_anchors(&[anchor.clone()]).unwrap().ok);
        // Rewrite record 3 and re-chain 3..4, then rewrite the head file:
        // only the anchor still knows the old record 4.
        let mut recs = log.list(None, 0, 10).unwrap();
        recs[2].detail_json = r#"{"command":"nothing to see"}"#.into();
        for i in 2..4 {
            recs[i].prev_hash = recs[i - 1].hash.clone();
            recs[i].hash = recs[i].compute_hash();
            tamper(
                &db,
                &format!(
                    "UPDATE audit_log SET detail_json = '{}', prev_hash = '{}', hash = '{}' WHERE seq = {}",
                    recs[i].detail_json, recs[i].prev_hash, recs[i].hash, recs[i].seq
                ),
            );
        }
        write_head(
            &dir.path().join(HEAD_FILE),
            &Head {
                seq: 4,
                hash: recs[3].hash.clone(),
            },
            true,
        )
        .unwrap();
        assert!(log.verify().unwrap().ok, "self-consistent without anchors");
        let r = log.verify_with_anchors(&[anchor.clone()]).unwrap();
        assert_eq!(
            (r.ok, r.first_broken_seq, r.kind),
            (false, 4, Some(BreakKind::AnchorMismatch))
        );
        // An anchor past the end: a cut-off tail.
        let r = log
            .verify_with_anchors(&[Head {
                seq: 9,
                hash: anchor.hash,
            }])
            .unwrap();
        assert_eq!(
            (r.first_broken_seq, r.kind),
            (5, Some(BreakKind::Truncated))
        );
    }

    #[test]
    fn missing_head_file_is_reported_and_head_behind_is_repaired() {
        let (dir, db, log) = setup();
        add(&log, 2);
        let head = dir.path().join(HEAD_FILE);
        let saved = std::fs::read(&head).unwrap();
        add(&log, 1);
        drop(log);
        // Head behind by one (crash between commit and head update): repaired.
        std::fs::write(&head, &saved).unwrap();
        let log = AuditLog::open(db.clone(), &head).unwrap();
        assert!(log.startup_report().ok);
        assert_eq!(log.startup_report().unanchored, 1);
        assert_eq!(read_head(&head).unwrap().unwrap().seq, 3);
        drop(log);
        std::fs::remove_file(&head).unwrap();
        let r = verify_chain(&db, &head).unwrap();
        assert_eq!((r.ok, r.kind), (false, Some(BreakKind::HeadMissing)));
    }

    #[test]
    fn head_slots_survive_a_torn_write() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(HEAD_FILE);
        let h = |seq| Head {
            seq,
            hash: blake3::hash(&[seq as u8]).to_hex().to_string(),
        };
        write_head(&p, &h(1), true).unwrap();
        assert_eq!(read_head(&p).unwrap(), Some(h(1)));
        write_head(&p, &h(2), true).unwrap();
        write_head(&p, &h(3), true).unwrap();
        assert_eq!(read_head(&p).unwrap(), Some(h(3)));
        // Tear the slot of seq 3: the previous head is what remains.
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[HEAD_SLOT + 30] ^= 0x01;
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(read_head(&p).unwrap(), Some(h(2)));
        std::fs::write(&p, b"garbage").unwrap();
        assert!(matches!(read_head(&p), Err(AuditError::HeadParse { .. })));
    }

    #[test]
    fn append_refuses_bad_fields() {
        let (_dir, _db, log) = setup();
        let bad = |action: &str, detail: serde_json::Value| {
            log.append(NewRecord {
                session_id: "",
                run_id: "",
                step_id: "",
                actor: &Actor::Daemon,
                action,
                detail,
                layer: Layer::Daemon,
            })
            .is_err()
        };
        assert!(bad("Exec Start", serde_json::json!({})));
        assert!(bad("exec_start", serde_json::json!([1])));
        assert!(!bad("exec_start", serde_json::json!({})));
    }
}
