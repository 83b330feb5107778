//! `warden daemon`: runs the daemon in the foreground (same as `wardend`).

pub use warden_daemon::server::DaemonArgs;

/// Runs the daemon; must be called before any runtime or thread exists.
pub fn run(args: DaemonArgs) -> i32 {
    warden_daemon::server::main(args)
}
