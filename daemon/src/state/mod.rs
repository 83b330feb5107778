//! The daemon's durable state: one SQLite database (WAL) under the state dir,
//! with schema migrations owned by each module.
//!
//! Each module that stores data declares its migrations as a [`Migrations`]
//! value and lists it in [`ALL_MIGRATIONS`]; [`Db::open`] applies the ones
//! not yet applied, each in its own transaction, recording
//! `(module, version)` in `schema_migrations`. Migrations are append-only:
//! never edit a shipped one, add the next version.

use rusqlite::{params, Connection, OptionalExtension};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// Errors of the state store.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state database {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("migration {module} v{version}: {source}")]
    Migration {
        module: &'static str,
        version: u32,
        source: rusqlite::Error,
    },
    #[error("state database: {0}")]
    Sql(#[from] rusqlite::Error),
}

/// The ordered migrations of one module.
pub struct Migrations {
    /// Module name (the key in `schema_migrations`).
    pub module: &'static str,
    /// SQL scripts; index 0 is version 1.
    pub steps: &'static [&'static str],
}

/// Sessions and runs (the `session` module).
pub const SESSION_MIGRATIONS: Migrations = Migrations {
    module: "session",
    steps: &[r#"
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    policy_name TEXT NOT NULL,
    policy_hash TEXT NOT NULL,
    policy_toml TEXT NOT NULL,
    state TEXT NOT NULL,              -- open | closed
    peer_uid INTEGER NOT NULL,
    labels_json TEXT NOT NULL DEFAULT '{}',
    created_at_ms INTEGER NOT NULL,
    closed_at_ms INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    task TEXT NOT NULL,
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    state_json TEXT NOT NULL DEFAULT '',
    steps INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_micros INTEGER NOT NULL DEFAULT 0,
    resumed_from_step TEXT NOT NULL DEFAULT '',
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
);
CREATE INDEX runs_session ON runs(session_id);
"#],
};

/// Every module's migrations, applied in this order.
pub const ALL_MIGRATIONS: &[&Migrations] = &[
    &SESSION_MIGRATIONS,
    &crate::approval::APPROVAL_MIGRATIONS,
    &crate::session::journal::JOURNAL_MIGRATIONS,
    &crate::checkpoint::MIGRATIONS,
    &crate::mcp::MCP_MIGRATIONS,
];

/// A handle on the state database. Cheap to clone; one connection behind a
/// mutex (SQLite serializes writers anyway; reads are short).
#[derive(Clone)]
pub struct Db {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("path", &self.path).finish()
    }
}

impl Db {
    /// Opens (creating if needed) `state_dir/warden.db` in WAL mode with
    /// `synchronous=FULL` and applies pending migrations.
    pub fn open(state_dir: &Path) -> Result<Db, StateError> {
        let path = state_dir.join("warden.db");
        let conn = Connection::open(&path).map_err(|source| StateError::Open {
            path: path.clone(),
            source,
        })?;
        Self::init(conn, path)
    }

    /// An in-memory database with every migration applied (tests).
    pub fn open_in_memory() -> Result<Db, StateError> {
        let conn = Connection::open_in_memory()?;
        Self::init(conn, PathBuf::from(":memory:"))
    }

    fn init(conn: Connection, path: PathBuf) -> Result<Db, StateError> {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        // Hot-path statements (audit, checkpoint, session, journal rows)
        // are prepared once: parsing costs tens of µs per call.
        conn.set_prepared_statement_cache_capacity(64);
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS schema_migrations (module TEXT NOT NULL, version INTEGER NOT NULL, applied_at_ms INTEGER NOT NULL, PRIMARY KEY (module, version));",
        )?;
        let db = Db {
            conn: Arc::new(Mutex::new(conn)),
            path,
        };
        for m in ALL_MIGRATIONS {
            db.migrate(m)?;
        }
        Ok(db)
    }

    fn migrate(&self, m: &Migrations) -> Result<(), StateError> {
        let mut conn = self.lock();
        let current: u32 = conn
            .query_row(
                "SELECT MAX(version) FROM schema_migrations WHERE module = ?1",
                [m.module],
                |r| r.get::<_, Option<u32>>(0),
            )
            .optional()?
            .flatten()
            .unwrap_or(0);
        for (i, sql) in m.steps.iter().enumerate() {
            let version = i as u32 + 1;
            if version <= current {
                continue;
            }
            let tx = conn.transaction()?;
            tx.execute_batch(sql)
                .map_err(|source| StateError::Migration {
                    module: m.module,
                    version,
                    source,
                })?;
            tx.execute(
                "INSERT INTO schema_migrations (module, version, applied_at_ms) VALUES (?1, ?2, ?3)",
                params![m.module, version, crate::now_ms()],
            )?;
            tx.commit()?;
        }
        Ok(())
    }

    /// Locks the connection. Keep the guard short; never hold it across an
    /// `.await`.
    pub fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes every commit so far durable, whatever `synchronous` it was made
    /// with: fdatasync(2) of the write-ahead log (`<db>-wal`), which holds
    /// every commit since the last WAL checkpoint (a checkpoint syncs the
    /// WAL before copying it into the database file and the database file
    /// after; SQLite, "Write-Ahead Logging"). Does not lock the connection.
    /// An in-memory database has nothing to sync.
    ///
    /// Errors: the WAL file cannot be opened or synced.
    pub fn sync_wal(&self) -> std::io::Result<()> {
        if self.path == Path::new(":memory:") {
            return Ok(());
        }
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        match std::fs::File::open(&wal) {
            Ok(f) => f.sync_data(),
            // No WAL yet (or checkpointed away at close): nothing pending.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Runs `f` in one transaction on `conn` and commits it without waiting for
/// the disk: `synchronous=NORMAL` for this commit only, `FULL` again after
/// (SQLite, "PRAGMA synchronous": in WAL mode, NORMAL commits are not
/// fsynced). Such a commit survives a crash of the daemon (it is in the WAL
/// in the page cache) and becomes durable against power loss with the next
/// `FULL` commit, which fsyncs the WAL and with it every earlier frame (or a
/// WAL checkpoint, which syncs before copying).
///
/// For writes whose durability point is a later commit of the same call (a
/// classification before `exec_start`, a pre-checkpoint before the command
/// starts) or that need none (closing a session). Everything that must be on
/// disk before an effect begins commits with `FULL` (the default).
///
/// Errors: whatever `f` or the commit returns; nothing is committed then.
pub fn write_deferred<T, E>(
    conn: &mut Connection,
    f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<rusqlite::Error>,
{
    // Cached statements: this runs on every exec's path.
    let set_sync = |conn: &Connection, sql: &str| -> rusqlite::Result<()> {
        conn.prepare_cached(sql)?.execute([]).map(|_| ())
    };
    set_sync(conn, "PRAGMA synchronous = NORMAL")?;
    let out = (|| {
        let tx = conn.transaction()?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    })();
    // Every other commit stays FULL. Failing to restore it would make later
    // durable commits silently weaker: retry once, then refuse the write.
    if let Err(e) = set_sync(conn, "PRAGMA synchronous = FULL")
        .or_else(|_| conn.pragma_update(None, "synchronous", "FULL"))
    {
        tracing::error!(error = %e, "could not restore synchronous=FULL");
        return Err(e.into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deferred_writes_commit_and_leave_full_sync() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let mut conn = db.lock();
        write_deferred(&mut conn, |tx| {
            tx.execute(
                "INSERT INTO schema_migrations (module, version, applied_at_ms) VALUES ('t', 1, 0)",
                [],
            )
        })
        .unwrap();
        // A failing write commits nothing.
        let r: Result<(), rusqlite::Error> = write_deferred(&mut conn, |tx| {
            tx.execute(
                "INSERT INTO schema_migrations (module, version, applied_at_ms) VALUES ('t', 2, 0)",
                [],
            )?;
            tx.execute("INSERT INTO no_such_table VALUES (1)", [])?;
            Ok(())
        });
        assert!(r.is_err());
        let n: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM schema_migrations WHERE module = 't'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 1);
        // 2 = FULL: later commits are durable again.
        let sync: i64 = conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sync, 2);
    }

    #[test]
    fn migrations_apply_once() {
        let dir = tempfile::tempdir().unwrap();
        Db::open(dir.path()).unwrap();
        let db = Db::open(dir.path()).unwrap();
        let n: i64 = db
            .lock()
            .query_row("SELECT COUNT(*) FROM schema_migrations", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            n as usize,
            ALL_MIGRATIONS.iter().map(|m| m.steps.len()).sum::<usize>()
        );
    }
}
