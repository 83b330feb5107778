//! The daemon's places on disk: state dir (0700, flock'd so two daemons never
//! share it), the Unix socket (0600 in a 0700 dir, stale sockets replaced,
//! removed on shutdown) and the shutdown signals.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{io_err, ServerError};
use crate::session::SessionManager;

/// Creates the state dir (mode 0700) if needed and returns its canonical path.
pub fn prepare_state_dir(dir: &Path) -> Result<PathBuf, ServerError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err(format!("creating state dir {}", dir.display())))?;
    let dir = fs::canonicalize(dir).map_err(io_err(format!("state dir {}", dir.display())))?;
    Ok(dir)
}

/// An exclusive `flock(2)` held for the daemon's lifetime.
#[derive(Debug)]
pub struct DirLock {
    _lock: nix::fcntl::Flock<File>,
}

/// Locks `dir/lock` (LOCK_EX|LOCK_NB). Errors: StateDirLocked when another
/// daemon holds it.
pub fn lock_dir(dir: &Path) -> Result<DirLock, ServerError> {
    lock_file(&dir.join("lock")).map_err(|e| match e {
        LockError::Held => ServerError::StateDirLocked {
            path: dir.to_path_buf(),
        },
        LockError::Io(source) => ServerError::Io {
            context: format!("locking {}", dir.display()),
            source,
        },
    })
}

/// Takes `dir/sandboxes.lock` (exclusive), waiting up to `timeout` while
/// the sandboxes of a previous daemon on this state dir still hold it (a
/// daemon killed with SIGKILL: its helper kills them, and the lock is free
/// once the last one is gone; see [`crate::sandbox::Spawner::hold`]).
/// Returns the lock, whose [`DirLock::share`] goes to the spawn helper.
///
/// Errors: Config when the lock is still held after `timeout`; Io.
pub fn wait_for_old_sandboxes(
    dir: &Path,
    timeout: std::time::Duration,
) -> Result<DirLock, ServerError> {
    let path = dir.join("sandboxes.lock");
    let deadline = std::time::Instant::now() + timeout;
    let mut said = false;
    loop {
        match lock_file(&path) {
            Ok(l) => return Ok(l),
            Err(LockError::Held) if std::time::Instant::now() < deadline => {
                if !said {
                    tracing::warn!(lock = %path.display(), "waiting for the sandboxes of a previous daemon to end");
                    said = true;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(LockError::Held) => {
                return Err(ServerError::Config(format!(
                    "sandboxes of a previous daemon on this state dir are still running after {} s ({} is held)",
                    timeout.as_secs(),
                    path.display()
                )))
            }
            Err(LockError::Io(source)) => {
                return Err(ServerError::Io {
                    context: format!("locking {}", path.display()),
                    source,
                })
            }
        }
    }
}

impl DirLock {
    /// Another fd of the lock's open file description: the lock stays held
    /// while any fd of it is open (flock(2)).
    ///
    /// Errors: the dup(2) failed.
    pub fn share(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        self._lock.as_fd().try_clone_to_owned()
    }
}

enum LockError {
    Held,
    Io(std::io::Error),
}

fn lock_file(path: &Path) -> Result<DirLock, LockError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(LockError::Io)?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(DirLock { _lock: lock }),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(LockError::Held),
        Err((_, e)) => Err(LockError::Io(e.into())),
    }
}

/// Removes the socket file when dropped (shutdown).
#[derive(Debug)]
pub struct SocketGuard {
    path: PathBuf,
    _lock: DirLock,
}

impl Drop for SocketGuard {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Binds the Unix socket: its directory is created 0700 (an existing one
/// must be a directory), a lock file next to the socket keeps a second
/// daemon off the same path, a stale socket left by a dead daemon is
/// replaced, and the socket is made 0600.
pub fn bind_socket(path: &Path) -> Result<(tokio::net::UnixListener, SocketGuard), ServerError> {
    let dir = path.parent().ok_or_else(|| {
        ServerError::Config(format!("socket path {} has no directory", path.display()))
    })?;
    if !dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io_err(format!("creating socket dir {}", dir.display())))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(io_err(format!("chmod {}", dir.display())))?;
    }
    let lock_path = PathBuf::from(format!("{}.lock", path.display()));
    let lock = lock_file(&lock_path).map_err(|e| match e {
        LockError::Held => ServerError::SocketInUse {
            path: path.to_path_buf(),
        },
        LockError::Io(source) => ServerError::Io {
            context: format!("locking {}", lock_path.display()),
            source,
        },
    })?;
    if path.exists() || fs::symlink_metadata(path).is_ok() {
        // We hold the lock, so whatever answers here is not a live wardend of
        // ours; still refuse to remove a socket someone answers on.
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(ServerError::SocketInUse {
                path: path.to_path_buf(),
            });
        }
        let meta =
            fs::symlink_metadata(path).map_err(io_err(format!("stat {}", path.display())))?;
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(ServerError::Config(format!(
                "{} exists and is not a socket; refusing to replace it",
                path.display()
            )));
        }
        fs::remove_file(path)
            .map_err(io_err(format!("removing stale socket {}", path.display())))?;
        tracing::info!(socket = %path.display(), "replaced a stale socket");
    }
    // Bind with a umask that makes the socket 0600 from the start.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = std::os::unix::net::UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let std_listener = bound.map_err(io_err(format!("binding {}", path.display())))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .map_err(io_err(format!("chmod {}", path.display())))?;
    std_listener
        .set_nonblocking(true)
        .map_err(io_err("set_nonblocking"))?;
    let listener = tokio::net::UnixListener::from_std(std_listener)
        .map_err(io_err("registering the socket"))?;
    Ok((
        listener,
        SocketGuard {
            path: path.to_path_buf(),
            _lock: lock,
        },
    ))
}

/// Resolves on SIGTERM or SIGINT, after killing running commands. SIGHUP
/// reloads the default policy (see `policy` service) and keeps serving.
pub async fn shutdown_signal(mgr: Arc<SessionManager>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
    mgr.shutdown();
}
