//! The `warden` subcommands, one file each. Each exposes a `clap::Args`
//! struct and a `run` function returning the process exit code.

pub mod approve;
pub mod audit;
pub mod checkpoint;
pub mod classify;
pub mod daemon;
pub mod demo;
pub mod doctor;
pub mod exec;
pub mod fs;
pub mod gc;
pub mod mcp;
pub mod mcp_serve;
pub mod policy;
pub mod redact;
pub mod rollback;
pub mod run;
pub mod session;
pub mod trace;

/// Exit code: the command timed out (as timeout(1)).
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit code: Warden itself failed (cannot reach the daemon, bad request).
pub const EXIT_WARDEN: i32 = 125;
/// Exit code: policy or approval refused the call.
pub const EXIT_REFUSED: i32 = 126;

/// Exit code for a failed daemon call, saying its message on standard error:
/// a refusal (`PERMISSION_DENIED`: policy deny, approval required or
/// expired, a protected path) is [`EXIT_REFUSED`]; the daemon unreachable
/// or failing (`UNAVAILABLE`, `UNIMPLEMENTED`, `INTERNAL`) is
/// [`EXIT_WARDEN`]; anything else is `other`.
pub fn status_exit(s: &tonic::Status, other: i32) -> i32 {
    say(s.message());
    match s.code() {
        tonic::Code::PermissionDenied => EXIT_REFUSED,
        tonic::Code::Unavailable | tonic::Code::Unimplemented | tonic::Code::Internal => {
            EXIT_WARDEN
        }
        _ => other,
    }
}

/// Prints a Warden message on standard error (`warden: ...`).
pub fn say(msg: impl std::fmt::Display) {
    eprintln!("warden: {msg}");
}

/// Global options shared by every subcommand that talks to the daemon.
#[derive(Debug, Clone, clap::Args)]
pub struct GlobalArgs {
    /// Daemon socket [default: $WARDEN_SOCKET, else $XDG_RUNTIME_DIR/warden/wardend.sock,
    /// root: /run/warden/wardend.sock].
    #[arg(long, global = true, env = "WARDEN_SOCKET", value_name = "PATH")]
    pub socket: Option<std::path::PathBuf>,
    /// Never start an embedded daemon when none answers.
    #[arg(long, global = true)]
    pub no_autostart: bool,
}

impl GlobalArgs {
    /// Client options from the global flags (`WARDEN_STATE_DIR` is honoured
    /// for an embedded daemon).
    pub fn options(&self) -> crate::Options {
        crate::Options {
            socket: self.socket.clone(),
            state_dir: std::env::var_os("WARDEN_STATE_DIR")
                .filter(|v| !v.is_empty())
                .map(Into::into),
            no_autostart: self.no_autostart,
        }
    }
}

/// Connects (or starts an embedded daemon), printing the reason on failure.
pub async fn connect(global: &GlobalArgs) -> Result<crate::Client, i32> {
    crate::Client::connect_or_start(&global.options())
        .await
        .map_err(|e| {
            say(e);
            EXIT_WARDEN
        })
}
