//! Warden client library: a typed gRPC client over the daemon's Unix socket,
//! daemon discovery, and auto-start of an embedded daemon.
//!
//! ```no_run
//! # async fn f() -> Result<(), warden_client::ClientError> {
//! let client = warden_client::Client::connect_or_start(&warden_client::Options::default()).await?;
//! let session = client.create_session(std::path::Path::new("/path/to/repo"), None).await?;
//! # Ok(()) }
//! ```

pub mod agent;
pub mod cli;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

pub use warden_proto::v1 as pb;
use warden_proto::v1::*;

/// How long a refused connection is retried before an embedded daemon is
/// started (a daemon may be restarting), ms.
pub const CONNECT_RETRY_MS: u64 = 5_000;
/// How long an embedded daemon may take to answer, ms.
pub const EMBEDDED_START_MS: u64 = 15_000;

/// Errors of the client library.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach wardend at {socket}: {message}")]
    Connect { socket: PathBuf, message: String },
    #[error("could not start an embedded wardend: {0}")]
    Embedded(String),
    #[error("{}", .0.message())]
    Status(#[from] tonic::Status),
    #[error("policy: {0}")]
    Policy(#[from] warden_daemon::policy::PolicyError),
    #[error("{0}")]
    Usage(String),
}

/// Where to find (or start) the daemon.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Socket path; default `WARDEN_SOCKET` or the XDG / root default.
    pub socket: Option<PathBuf>,
    /// State dir for an embedded daemon; default `WARDEN_STATE_DIR` or the
    /// XDG / root default.
    pub state_dir: Option<PathBuf>,
    /// Never start an embedded daemon.
    pub no_autostart: bool,
}

impl Options {
    /// The socket path in effect.
    pub fn socket(&self) -> PathBuf {
        self.socket
            .clone()
            .unwrap_or_else(warden_daemon::config::default_socket)
    }
}

/// Largest response message a service client accepts, bytes. tonic's
/// default (4 MiB) is smaller than one checkpoint of a large rollback or a
/// long audit page; the daemon bounds what it sends by its own limits.
pub const MAX_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// A connected client. Cheap to clone (one HTTP/2 channel).
#[derive(Clone)]
pub struct Client {
    channel: Channel,
    _embedded: Option<std::sync::Arc<EmbeddedDaemon>>,
}

/// An embedded `wardend` child started by this process; terminated
/// (SIGTERM, then waited for) when dropped.
pub struct EmbeddedDaemon {
    child: std::sync::Mutex<std::process::Child>,
}

impl Drop for EmbeddedDaemon {
    fn drop(&mut self) {
        let mut c = self.child.lock().unwrap_or_else(|p| p.into_inner());
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

async fn dial(socket: &Path) -> Result<Channel, std::io::Error> {
    // Connect once eagerly so errors (ENOENT, ECONNREFUSED) surface here.
    let stream = tokio::net::UnixStream::connect(socket).await?;
    let first = std::sync::Mutex::new(Some(stream));
    let path = socket.to_path_buf();
    let endpoint = Endpoint::try_from("http://wardend.local").expect("static uri");
    endpoint
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let reuse = first.lock().unwrap_or_else(|p| p.into_inner()).take();
            let path = path.clone();
            async move {
                let s = match reuse {
                    Some(s) => s,
                    None => tokio::net::UnixStream::connect(&path).await?,
                };
                Ok::<_, std::io::Error>(TokioIo::new(s))
            }
        }))
        .await
        .map_err(std::io::Error::other)
}

impl Client {
    /// Connects to the daemon on `socket`, retrying a refused connection for
    /// up to [`CONNECT_RETRY_MS`].
    pub async fn connect(socket: &Path) -> Result<Client, ClientError> {
        let deadline = Instant::now() + Duration::from_millis(CONNECT_RETRY_MS);
        loop {
            match dial(socket).await {
                Ok(channel) => {
                    return Ok(Client {
                        channel,
                        _embedded: None,
                    })
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::ConnectionRefused
                        && Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => {
                    return Err(ClientError::Connect {
                        socket: socket.to_path_buf(),
                        message: e.to_string(),
                    })
                }
            }
        }
    }

    /// Connects to a running daemon, or starts an embedded one (a child
    /// `warden daemon` honouring `WARDEN_SOCKET` / `WARDEN_STATE_DIR`) when
    /// none answers.
    pub async fn connect_or_start(opts: &Options) -> Result<Client, ClientError> {
        let socket = opts.socket();
        match Client::connect(&socket).await {
            Ok(c) => Ok(c),
            Err(e) if opts.no_autostart => Err(e),
            Err(_) => Client::start_embedded(opts).await,
        }
    }

    async fn start_embedded(opts: &Options) -> Result<Client, ClientError> {
        let socket = opts.socket();
        let state_dir = opts
            .state_dir
            .clone()
            .unwrap_or_else(warden_daemon::config::default_state_dir);
        let exe = std::env::current_exe()
            .map_err(|e| ClientError::Embedded(format!("current_exe: {e}")))?;
        std::fs::create_dir_all(&state_dir)
            .map_err(|e| ClientError::Embedded(format!("{}: {e}", state_dir.display())))?;
        let log_path = state_dir.join("wardend.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| ClientError::Embedded(format!("{}: {e}", log_path.display())))?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("daemon")
            .arg("--socket")
            .arg(&socket)
            .arg("--state-dir")
            .arg(&state_dir);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                // The embedded daemon ends with this process.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| ClientError::Embedded(e.to_string()))?;
        let embedded = std::sync::Arc::new(EmbeddedDaemon {
            child: std::sync::Mutex::new(child),
        });
        let deadline = Instant::now() + Duration::from_millis(EMBEDDED_START_MS);
        loop {
            if let Ok(channel) = dial(&socket).await {
                return Ok(Client {
                    channel,
                    _embedded: Some(embedded),
                });
            }
            let exited = embedded
                .child
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .try_wait()
                .ok()
                .flatten();
            if exited.is_some() || Instant::now() > deadline {
                let tail = std::fs::read_to_string(&log_path)
                    .map(|s| {
                        s.lines()
                            .rev()
                            .take(3)
                            .collect::<Vec<_>>()
                            .into_iter()
                            .rev()
                            .collect::<Vec<_>>()
                            .join("\n")
                    })
                    .unwrap_or_default();
                return Err(ClientError::Embedded(format!(
                    "it did not come up on {} ({})",
                    socket.display(),
                    tail.trim()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Ends this client: drops its connection and, when it started an
    /// embedded daemon (and holds the last reference to it), stops that
    /// daemon (SIGTERM, waited for up to 5 s) on a blocking thread while the
    /// runtime keeps closing the connection, which the daemon's graceful
    /// shutdown waits for. Dropping the client does the same, but blocks the
    /// runtime it is dropped on: on a current-thread runtime the connection
    /// then stays open and the daemon is killed after 5 s instead.
    pub async fn shutdown(self) {
        let Client { channel, _embedded } = self;
        drop(channel);
        if let Some(embedded) = _embedded {
            let _ = tokio::task::spawn_blocking(move || drop(embedded)).await;
        }
    }

    /// The underlying channel, for services without a helper here.
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    pub fn sessions(&self) -> sessions_client::SessionsClient<Channel> {
        sessions_client::SessionsClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
    }
    pub fn exec_client(&self) -> exec_client::ExecClient<Channel> {
        exec_client::ExecClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
    }
    pub fn files(&self) -> files_client::FilesClient<Channel> {
        files_client::FilesClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
    }
    pub fn approvals(&self) -> approvals_client::ApprovalsClient<Channel> {
        approvals_client::ApprovalsClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
    }
    pub fn checkpoints(&self) -> checkpoints_client::CheckpointsClient<Channel> {
        checkpoints_client::CheckpointsClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
    }
    pub fn runs(&self) -> runs_client::RunsClient<Channel> {
        runs_client::RunsClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
    }
    pub fn audit(&self) -> audit_client::AuditClient<Channel> {
        audit_client::AuditClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
    }
    pub fn traces(&self) -> traces_client::TracesClient<Channel> {
        traces_client::TracesClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
    }
    pub fn policy(&self) -> policy_client::PolicyClient<Channel> {
        policy_client::PolicyClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    /// Opens a session on `workspace` (made absolute against the current
    /// directory) with `policy` (name or file, resolved here: the daemon
    /// never opens policy files) or the daemon's default.
    pub async fn create_session(
        &self,
        workspace: &Path,
        policy: Option<&str>,
    ) -> Result<pb::Session, ClientError> {
        let t = SessionTarget::resolve(workspace, policy)?;
        let s = self
            .sessions()
            .create_session(pb::CreateSessionRequest {
                workspace: t.workspace,
                policy_name: t.policy_name,
                policy_toml: t.policy_toml,
                labels: Default::default(),
            })
            .await?
            .into_inner();
        Ok(s)
    }

    /// Runs `req` (its `command`, timeout, `approve`, ...) in a one-shot
    /// session on `workspace` with `policy`, resolved as in
    /// [`Client::create_session`]: one Exec call, whose first event is the
    /// session the daemon opened (`exec_event::Event::Session`); the daemon
    /// closes it when the call ends, also when this stream is dropped early.
    /// `req.session_id` must be empty.
    ///
    /// Errors: Usage (current dir unreadable, `session_id` set), Policy (the
    /// policy cannot be resolved), Status (the daemon refused the request:
    /// INVALID_ARGUMENT / PERMISSION_DENIED for a bad workspace, policy or
    /// command, as CreateSession and Exec).
    pub async fn exec_one_shot(
        &self,
        workspace: &Path,
        policy: Option<&str>,
        mut req: pb::ExecRequest,
    ) -> Result<tonic::Streaming<pb::ExecEvent>, ClientError> {
        if !req.session_id.is_empty() {
            return Err(ClientError::Usage(
                "a one-shot exec opens its own session: session_id must be empty".into(),
            ));
        }
        let t = SessionTarget::resolve(workspace, policy)?;
        req.workspace = t.workspace;
        req.policy_name = t.policy_name;
        req.policy_toml = t.policy_toml;
        Ok(self.exec_client().exec(req).await?.into_inner())
    }

    /// Closes a session (idempotent).
    pub async fn close_session(&self, id: &str) -> Result<(), ClientError> {
        self.sessions()
            .close_session(pb::CloseSessionRequest {
                session_id: id.to_string(),
            })
            .await?;
        Ok(())
    }
}

/// Where a session opens: the workspace made absolute against the current
/// directory and the policy resolved on the client side (the daemon never
/// opens policy files).
struct SessionTarget {
    workspace: String,
    policy_name: String,
    policy_toml: String,
}

impl SessionTarget {
    fn resolve(workspace: &Path, policy: Option<&str>) -> Result<SessionTarget, ClientError> {
        let ws = if workspace.is_absolute() {
            workspace.to_path_buf()
        } else {
            std::env::current_dir()
                .map_err(|e| ClientError::Usage(format!("current dir: {e}")))?
                .join(workspace)
        };
        let (policy_name, policy_toml) = match policy {
            Some(p) => {
                let p = warden_daemon::config::resolve_policy(p)?;
                (p.name, p.source)
            }
            None => (String::new(), String::new()),
        };
        Ok(SessionTarget {
            workspace: ws.to_string_lossy().into_owned(),
            policy_name,
            policy_toml,
        })
    }
}
