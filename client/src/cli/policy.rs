//! `warden policy check FILE`: validate a policy file and run its rules'
//! examples, in process. Reference: `policies/README.md`.

use warden_daemon::policy::Policy;

use super::say;

/// `warden policy ...`.
#[derive(Debug, clap::Args)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub command: PolicyCommand,
}

/// Policy subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// Validate a policy (schema, rules, globs, regexes) and run every rule's
    /// examples. Exit 0 when valid, 1 when refused (the reason names the rule
    /// and the example), 125 when it cannot be read.
    Check {
        /// A TOML file, or a policy name (built-in or in the config dirs).
        #[arg(value_name = "FILE|NAME")]
        file: String,
    },
    /// Print a policy's TOML (built-in or resolved by name) and its hash.
    Show {
        #[arg(value_name = "FILE|NAME", default_value = "default")]
        file: String,
    },
}

fn summary(p: &Policy) -> String {
    format!(
        "policy {} ({}): valid: {} rules, {} examples passed; tiers: safe-read={} write={} network={} install={} destructive={}",
        p.name,
        &p.hash[..16],
        p.file.rules.len(),
        p.example_count(),
        p.file.tiers.safe_read,
        p.file.tiers.write,
        p.file.tiers.network,
        p.file.tiers.install,
        p.file.tiers.destructive,
    )
}

/// Runs `warden policy`; returns the exit code.
pub fn run(args: PolicyArgs) -> i32 {
    match args.command {
        PolicyCommand::Check { file } => match warden_daemon::config::resolve_policy(&file) {
            Ok(p) => {
                println!("{}", summary(&p));
                0
            }
            Err(e @ warden_daemon::policy::PolicyError::Unknown(_)) => {
                say(e);
                super::EXIT_WARDEN
            }
            Err(e) if e.to_string().contains("cannot read") => {
                say(e);
                super::EXIT_WARDEN
            }
            Err(e) => {
                say(format!("policy refused: {e}"));
                1
            }
        },
        PolicyCommand::Show { file } => match warden_daemon::config::resolve_policy(&file) {
            Ok(p) => {
                println!("# policy {} blake3 {}\n{}", p.name, p.hash, p.source);
                0
            }
            Err(e) => {
                say(e);
                super::EXIT_WARDEN
            }
        },
    }
}
