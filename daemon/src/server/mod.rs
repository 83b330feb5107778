//! gRPC services: proto <-> domain types and authentication of the peer. No
//! business logic lives here.
//!
//! [`main`] is the daemon's entry point (`wardend` and `warden daemon`): it
//! starts the spawn helper before any thread exists, then the tokio runtime,
//! locks the state dir, opens the database and serves on the Unix socket (and
//! optionally TCP with a bearer token).

mod approvals;
mod audit;
mod auth;
mod checkpoints;
mod exec;
mod files;
mod listen;
mod mcp;
mod policy;
mod runs;
mod sessions;
mod traces;

use std::path::PathBuf;
use std::sync::Arc;

use tonic::Status;

use crate::policy::Policy;
use crate::sandbox::Spawner;
use crate::session::{Peer, SessionError, SessionManager};
use crate::state::Db;

pub use auth::AuthConfig;

/// `wardend` / `warden daemon` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct DaemonArgs {
    /// Unix socket to serve on [default: $XDG_RUNTIME_DIR/warden/wardend.sock,
    /// root: /run/warden/wardend.sock].
    #[arg(long, env = "WARDEN_SOCKET")]
    pub socket: Option<PathBuf>,
    /// State directory (database, blobs, traces) [default:
    /// $XDG_STATE_HOME/warden, root: /var/lib/warden].
    #[arg(long, env = "WARDEN_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Default policy for sessions that send none: a built-in name, a name in
    /// the config dir, or a TOML file.
    #[arg(long, default_value = "default")]
    pub policy: String,
    /// Also accept connections from this uid (repeatable). The daemon's own
    /// uid is always accepted.
    #[arg(long = "allow-uid", value_name = "UID")]
    pub allow_uids: Vec<u32>,
    /// Also listen on TCP (e.g. 127.0.0.1:7443); requires --token-file.
    #[arg(long, value_name = "ADDR")]
    pub listen_tcp: Option<std::net::SocketAddr>,
    /// File holding the bearer token TCP clients must send
    /// (`authorization: Bearer <token>`).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// How long an approval request waits for an answer, and a once-grant
    /// for its execution, in ms (1..=86400000).
    #[arg(long, env = "WARDEN_APPROVAL_EXPIRY_MS", value_name = "MS", default_value_t = 600_000,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub approval_expiry_ms: u64,
    /// Log filter (tracing EnvFilter syntax), e.g. `info`, `warden_daemon=debug`.
    #[arg(long, env = "WARDEN_LOG", default_value = "info")]
    pub log: String,
}

/// Errors that stop the daemon from starting or serving.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{0}")]
    Config(String),
    #[error("state directory {path} is in use by another wardend (lock held)")]
    StateDirLocked { path: PathBuf },
    #[error("socket {path} is in use by a running daemon")]
    SocketInUse { path: PathBuf },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxError),
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
    #[error("serving: {0}")]
    Transport(#[from] tonic::transport::Error),
}

pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServerError {
    let context = context.into();
    move |source| ServerError::Io { context, source }
}

/// How long a starting daemon waits for the sandboxes of a previous daemon
/// on its state dir to end before it refuses to start.
const OLD_SANDBOXES_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs the daemon until SIGTERM/SIGINT. Must be called from a
/// single-threaded process (before any runtime exists): it forks the spawn
/// helper first. Returns the process exit code (0 on a clean shutdown, 1 when
/// it could not start, with the reason on standard error).
pub fn main(args: DaemonArgs) -> i32 {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
    // Configuration errors first, before anything is forked or bound.
    let policy = match crate::config::resolve_policy(&args.policy) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("wardend: {e}");
            return 1;
        }
    };
    let spawner = match Spawner::start() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wardend: cannot start the spawn helper: {e}");
            return 1;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("wardend: cannot start the runtime: {e}");
            return 1;
        }
    };
    match rt.block_on(serve(args, policy, spawner)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("wardend: {e}");
            1
        }
    }
}

async fn serve(args: DaemonArgs, policy: Policy, spawner: Spawner) -> Result<(), ServerError> {
    let socket = args
        .socket
        .clone()
        .unwrap_or_else(crate::config::default_socket);
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(crate::config::default_state_dir);
    if !socket.is_absolute() || !state_dir.is_absolute() {
        return Err(ServerError::Config(
            "--socket and --state-dir must be absolute paths".into(),
        ));
    }
    let token = match (&args.listen_tcp, &args.token_file) {
        (Some(_), None) => {
            return Err(ServerError::Config(
                "--listen-tcp requires --token-file".into(),
            ))
        }
        (_, Some(f)) => {
            let t = std::fs::read_to_string(f)
                .map_err(io_err(format!("reading token file {}", f.display())))?;
            let t = t.trim().to_string();
            if t.len() < 16 {
                return Err(ServerError::Config(
                    "the bearer token must be at least 16 characters".into(),
                ));
            }
            Some(t)
        }
        _ => None,
    };

    let state_dir = listen::prepare_state_dir(&state_dir)?;
    let _state_lock = listen::lock_dir(&state_dir)?;
    // A previous daemon on this state dir that was killed may still have
    // sandboxes on their way out: nothing starts until they are gone, and
    // our own sandboxes hold the same lock for the next daemon.
    let sandboxes_lock = listen::wait_for_old_sandboxes(&state_dir, OLD_SANDBOXES_WAIT)?;
    spawner
        .hold(
            sandboxes_lock
                .share()
                .map_err(io_err("sharing the sandboxes lock".to_string()))?,
        )
        .map_err(|e| ServerError::Config(format!("the spawn helper: {e}")))?;
    // No sandboxed command ever sees the daemon's state.
    spawner.hide(state_dir.clone());
    // Refuse to start when a mechanism the policy needs is missing: one real
    // confined spawn under the policy's sandbox settings.
    match spawner.self_test(&policy.file.sandbox).await {
        Ok(enforcement) => {
            tracing::info!(landlock = enforcement.as_str(), "sandbox self-test passed")
        }
        Err(e) => {
            return Err(ServerError::Config(format!(
                "the sandbox does not work here ({e}); see `warden doctor`"
            )))
        }
    }
    let db = Db::open(&state_dir)?;
    let mut mgr = SessionManager::new(db, state_dir.clone(), spawner, policy)
        .map_err(|e| ServerError::Config(format!("opening the audit log: {e}")))?;
    mgr.set_approval_expiry(std::time::Duration::from_millis(args.approval_expiry_ms));
    let mgr = Arc::new(mgr);
    mgr.spawn_approval_expiry();

    let (uds, _socket_guard) = listen::bind_socket(&socket)?;
    let mut allowed = args.allow_uids.clone();
    allowed.push(nix::unistd::geteuid().as_raw());
    let auth = AuthConfig {
        allowed_uids: allowed,
        token,
    };

    let (health_reporter, health) = tonic_health::server::health_reporter();
    let router_services = services(mgr.clone(), health)?;
    health_reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    for name in SERVICE_NAMES {
        health_reporter
            .set_service_status(*name, tonic_health::ServingStatus::Serving)
            .await;
    }

    tokio::spawn(policy::reload_on_sighup(mgr.clone(), args.policy.clone()));
    let shutdown = listen::shutdown_signal(mgr.clone());
    tracing::info!(socket = %socket.display(), state_dir = %state_dir.display(), "wardend serving");
    let layer = tonic::service::InterceptorLayer::new(auth::Authenticator::new(auth));
    let uds_incoming = tokio_stream::wrappers::UnixListenerStream::new(uds);
    match args.listen_tcp {
        None => {
            tonic::transport::Server::builder()
                .layer(layer)
                .add_routes(router_services)
                .serve_with_incoming_shutdown(uds_incoming, shutdown)
                .await?;
        }
        Some(addr) => {
            let tcp = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(io_err(format!("binding {addr}")))?;
            tracing::info!(%addr, "also serving on TCP (bearer token required)");
            let (tx, rx) = tokio::sync::watch::channel(false);
            let mut rx2 = rx.clone();
            let tcp_routes = router_services.clone();
            let tcp_layer = layer.clone();
            let tcp_task = tokio::spawn(async move {
                tonic::transport::Server::builder()
                    .layer(tcp_layer)
                    .add_routes(tcp_routes)
                    .serve_with_incoming_shutdown(
                        tokio_stream::wrappers::TcpListenerStream::new(tcp),
                        async move {
                            let _ = rx2.changed().await;
                        },
                    )
                    .await
            });
            let r = tonic::transport::Server::builder()
                .layer(layer)
                .add_routes(router_services)
                .serve_with_incoming_shutdown(uds_incoming, shutdown)
                .await;
            let _ = tx.send(true);
            let _ = tcp_task.await;
            drop(rx);
            r?;
        }
    }
    mgr.shutdown();
    tracing::info!("wardend stopped");
    Ok(())
}

/// Fully-qualified names of Warden's services (health reports each).
pub const SERVICE_NAMES: &[&str] = &[
    "warden.v1.Sessions",
    "warden.v1.Exec",
    "warden.v1.Approvals",
    "warden.v1.Files",
    "warden.v1.Checkpoints",
    "warden.v1.Runs",
    "warden.v1.Audit",
    "warden.v1.Traces",
    "warden.v1.Policy",
    "warden.v1.Mcp",
];

fn services(
    mgr: Arc<SessionManager>,
    health: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
) -> Result<tonic::service::Routes, ServerError> {
    use crate::proto::v1::*;
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| ServerError::Config(format!("reflection: {e}")))?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|e| ServerError::Config(format!("reflection: {e}")))?;
    let mut routes = tonic::service::Routes::new(health);
    // One line per service, so modules landing in parallel never conflict.
    routes = routes.add_service(reflection_v1);
    routes = routes.add_service(reflection_v1alpha);
    routes = routes.add_service(sessions_server::SessionsServer::new(
        sessions::SessionsService::new(mgr.clone()),
    ));
    routes = routes.add_service(exec_server::ExecServer::new(exec::ExecService::new(
        mgr.clone(),
    )));
    routes = routes.add_service(policy_server::PolicyServer::new(
        policy::PolicyService::new(mgr.clone()),
    ));
    routes = routes.add_service(runs_server::RunsServer::new(runs::RunsService::new(
        mgr.clone(),
    )));
    routes = routes.add_service(
        files_server::FilesServer::new(traces::TracedFiles::new(
            files::FilesService::new(mgr.clone()),
            mgr.clone(),
        ))
        .max_decoding_message_size(files::MAX_REQUEST_BYTES),
    );
    routes = routes.add_service(approvals_server::ApprovalsServer::new(
        approvals::ApprovalsService::new(mgr.clone()),
    ));
    routes = routes.add_service(audit_server::AuditServer::new(audit::AuditService::new(
        mgr.clone(),
    )));
    routes = routes.add_service(checkpoints_server::CheckpointsServer::new(
        checkpoints::CheckpointsService::new(mgr.clone()),
    ));
    routes = routes.add_service(traces_server::TracesServer::new(
        traces::TracesService::new(mgr.clone()),
    ));
    routes = routes.add_service(mcp_server::McpServer::new(mcp::McpService::new(
        mgr.clone(),
    )));
    Ok(routes)
}

/// The authenticated peer of a request (set by the authenticator).
pub(crate) fn peer<T>(req: &tonic::Request<T>) -> Result<Peer, Status> {
    req.extensions()
        .get::<Peer>()
        .copied()
        .ok_or_else(|| Status::unauthenticated("no authenticated peer"))
}

/// Maps a domain error to its gRPC status (never UNKNOWN). The message is
/// redacted with the built-in rules and the daemon's secret environment
/// ([`redacted`]): an error can carry a command's or an MCP server's output.
pub(crate) fn status(e: SessionError) -> Status {
    redacted(status_raw(e), None)
}

/// `st` with its message redacted by `session`'s redactor when given, and
/// always by the built-in rules with the daemon's secret environment (so a
/// status built without a session is covered too).
pub(crate) fn redacted(st: Status, session: Option<&crate::redact::Redactor>) -> Status {
    let mut msg = st.message().to_string();
    if let Some(r) = session {
        msg = r.redact(&msg).0;
    }
    let base = crate::redact::Redactor::new(&crate::redact::RedactSettings::default());
    let msg = base.redact(&msg).0;
    if msg == st.message() {
        return st;
    }
    Status::new(st.code(), msg)
}

fn status_raw(e: SessionError) -> Status {
    match e {
        SessionError::InvalidArgument(m) => Status::invalid_argument(m),
        SessionError::NotFound(m) => Status::not_found(m),
        SessionError::PermissionDenied(m) => Status::permission_denied(m),
        SessionError::FailedPrecondition(m) => Status::failed_precondition(m),
        SessionError::Unavailable(m) => Status::unavailable(m),
        SessionError::Policy(e) => Status::invalid_argument(e.to_string()),
        SessionError::State(e) => Status::internal(e.to_string()),
        SessionError::Internal(m) => Status::internal(m),
    }
}
