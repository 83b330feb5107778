//! `warden`: the Warden CLI.

use clap::{Parser, Subcommand};
use warden_client::cli;

#[derive(Parser)]
#[command(
    name = "warden",
    version,
    about = "Warden: sandboxed tool execution for AI coding agents",
    propagate_version = true
)]
struct Cli {
    #[command(flatten)]
    global: cli::GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a shell command in the sandbox, under policy.
    Exec(cli::exec::ExecArgs),
    /// Confined file tools: read, write, patch, ls, grep.
    Fs(cli::fs::FsArgs),
    /// Answer an approval request (grant once / for the session, or deny).
    Approve(cli::approve::ApproveArgs),
    /// Export the audit log, or `audit verify` its hash chain.
    Audit(cli::audit::AuditArgs),
    /// List, show and diff checkpoints.
    Checkpoint(cli::checkpoint::CheckpointArgs),
    /// Roll files and/or conversation back to a checkpoint.
    Rollback(cli::rollback::RollbackArgs),
    /// Checkpoint retention: drop old checkpoints, delete unreferenced blobs.
    Gc(cli::gc::GcArgs),
    /// Run the daemon in the foreground (same as `wardend`).
    Daemon(cli::daemon::DaemonArgs),
    /// Run the agent loop on a task with a model.
    Run(cli::run::RunArgs),
    /// Run the scripted demo: fix a bug in a sample repository, in the sandbox.
    Demo(cli::demo::DemoArgs),
    /// Report which sandbox mechanisms work here; `--attacks` runs an escape battery.
    Doctor(cli::doctor::DoctorArgs),
    /// Redact secrets from standard input to standard output (no daemon needed).
    Redact(cli::redact::RedactArgs),
    /// Classify a shell command into a tier and decide it under a policy (no daemon needed).
    Classify(cli::classify::ClassifyArgs),
    /// Validate a policy file and run its rule examples (`policy check FILE`).
    Policy(cli::policy::PolicyArgs),
    /// Show, list or export run traces (OpenTelemetry spans).
    Trace(cli::trace::TraceArgs),
    /// Serve Warden's tools over MCP on stdio (standard output carries only JSON-RPC).
    McpServe(cli::mcp_serve::McpServeArgs),
    /// List and call the tools of the MCP servers the policy hosts (in the sandbox).
    Mcp(cli::mcp::McpArgs),
    /// Open, list and close sessions (for `--session ID` and `warden approve` from another terminal).
    Session(cli::session::SessionArgs),
}

/// The subcommand word on the command line (the first word that is not an
/// option or the value of `--socket`).
fn subcommand_word() -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--socket" {
            args.next();
        } else if !a.starts_with('-') {
            return Some(a);
        }
    }
    None
}

/// A failed write to standard output or error because its reader went away
/// (`println!` panics with EPIPE, os error 32) ends the process with 141,
/// the shell's code for SIGPIPE; every other panic keeps the default report.
fn quiet_on_broken_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to std") && msg.contains("os error 32") {
            std::process::exit(141);
        }
        default(info);
    }));
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // `--help` and `--version` exit 0. A usage error is clap's 2,
            // except for `warden exec`, whose contract keeps the command's
            // own codes apart: a bad request is 125 (as env(1), timeout(1)).
            let code = match e.exit_code() {
                0 => 0,
                // `warden classify` too: its 2 means "deny".
                _ if matches!(subcommand_word().as_deref(), Some("exec" | "classify")) => {
                    cli::EXIT_WARDEN
                }
                c => c,
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    // Commands that need no runtime (and the daemon, which must fork its
    // spawn helper before any thread exists) run here.
    let code = match cli.command {
        Command::Daemon(args) => cli::daemon::run(args),
        Command::Doctor(args) => cli::doctor::run(args),
        Command::Redact(args) => cli::redact::run(args),
        Command::Classify(args) => cli::classify::run(args),
        Command::Policy(args) => cli::policy::run(args),
        command => {
            // Like other Unix tools, end quietly when the reader of our
            // output goes away (`warden checkpoint list | head`) instead of
            // panicking on EPIPE: exit 141 as if killed by SIGPIPE. SIGPIPE
            // itself stays ignored (Rust's default), so a daemon connection
            // closed under us is an error the client handles, never a death
            // after the work is done.
            quiet_on_broken_stdout();
            // `warden exec` is one streaming call: a runtime on this thread
            // does it without starting worker threads (measured: less CPU
            // per exec, fewer context switches); the others keep two workers.
            let mut builder = match command {
                Command::Exec(_) => tokio::runtime::Builder::new_current_thread(),
                _ => {
                    let mut b = tokio::runtime::Builder::new_multi_thread();
                    b.worker_threads(2);
                    b
                }
            };
            let rt = match builder.enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    cli::say(format!("cannot start the runtime: {e}"));
                    std::process::exit(cli::EXIT_WARDEN);
                }
            };
            rt.block_on(async_main(command, cli.global))
        }
    };
    std::process::exit(code);
}

async fn async_main(command: Command, global: cli::GlobalArgs) -> i32 {
    match command {
        Command::Exec(args) => cli::exec::run(args, &global).await,
        Command::Approve(args) => cli::approve::run(args, &global).await,
        Command::Audit(args) => cli::audit::run(args, &global).await,
        Command::Run(args) => cli::run::run(args, &global).await,
        Command::Demo(args) => cli::demo::run(args, &global).await,
        Command::Fs(args) => cli::fs::run(args, &global).await,
        Command::Trace(args) => cli::trace::run(args, &global).await,
        Command::Checkpoint(args) => cli::checkpoint::run(args, &global).await,
        Command::Rollback(args) => cli::rollback::run(args, &global).await,
        Command::Gc(args) => cli::gc::run(args, &global).await,
        Command::McpServe(args) => cli::mcp_serve::run(args, &global).await,
        Command::Mcp(args) => cli::mcp::run(args, &global).await,
        Command::Session(args) => cli::session::run(args, &global).await,
        Command::Daemon(_)
        | Command::Doctor(_)
        | Command::Redact(_)
        | Command::Classify(_)
        | Command::Policy(_) => {
            unreachable!("handled before the runtime starts")
        }
    }
}
