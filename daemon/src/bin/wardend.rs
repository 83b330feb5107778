//! `wardend`: the Warden daemon (same as `warden daemon`).

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "wardend",
    version,
    about = "Warden daemon: sandboxed tool execution for AI coding agents over gRPC"
)]
struct Cli {
    #[command(flatten)]
    args: warden_daemon::server::DaemonArgs,
}

fn main() {
    let cli = Cli::parse();
    std::process::exit(warden_daemon::server::main(cli.args));
}
