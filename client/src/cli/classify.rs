//! `warden classify`: classify shell commands into tiers and decide them
//! under a policy, in process (no daemon needed). Reference:
//! `policies/README.md`.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use warden_daemon::policy::{Classification, ClassifyContext, Decision, Policy};

use super::{say, EXIT_WARDEN};

/// `warden classify [--policy NAME|FILE] [--json] -- WORDS...` or
/// `warden classify --batch FILE|- [--json]`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: one command: 0 allow, 1 ask, 2 deny; --batch: 0 \
                        whatever the decisions; 125 on a bad policy, unreadable input or a \
                        usage error."
)]
pub struct ClassifyArgs {
    /// Policy: a built-in name (default, ci, strict), a NAME.toml in the
    /// config dirs, or a TOML file path.
    #[arg(long, value_name = "NAME|FILE", default_value = "default")]
    pub policy: String,
    /// Print JSON: command, tier, decision, rule, reasons, commands (each with argv and tier).
    #[arg(long)]
    pub json: bool,
    /// Classify every line of FILE (`-` = standard input), one result per line, in order.
    #[arg(long, value_name = "FILE|-", conflicts_with = "words")]
    pub batch: Option<String>,
    /// Workspace root (absolute): absolute paths under it count as in the workspace.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// The command; the words are joined with single spaces into one
    /// command string. Options of `warden classify` come first; a mistyped
    /// one is a usage error (125), not part of the command (put `--` before
    /// a command starting with `-`).
    #[arg(trailing_var_arg = true, value_name = "WORDS")]
    pub words: Vec<String>,
}

/// Exit code for one classified command: 0 allow, 1 ask, 2 deny.
fn decision_code(d: Decision) -> i32 {
    match d {
        Decision::Allow => 0,
        Decision::Ask => 1,
        Decision::Deny => 2,
    }
}

fn human(c: &Classification, policy: &Policy) -> String {
    let mut out = format!("command:  {}\n", c.command);
    out += &format!("tier:     {}\n", c.tier);
    out += &format!(
        "decision: {} ({})\n",
        c.decision,
        c.rule
            .as_ref()
            .map(|r| format!("rule {r}"))
            .unwrap_or_else(|| format!("policy {} tier matrix", policy.name))
    );
    if let Some(j) = &c.justification {
        out += &format!("why:      {j}\n");
    }
    out += "reasons:\n";
    for r in &c.reasons {
        out += &format!("  - {r}\n");
    }
    if !c.writes.is_empty() {
        out += &format!("writes:   {}\n", c.writes.join(" "));
    }
    if !c.hosts.is_empty() {
        out += &format!("hosts:    {}\n", c.hosts.join(" "));
    }
    out += "commands:\n";
    for p in &c.parts {
        out += &format!("  {:<12} {}\n", p.tier.as_str(), p.argv.join(" "));
    }
    out
}

fn json_line(c: &Classification) -> String {
    serde_json::to_string(c).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// Runs `warden classify`; returns the exit code.
pub fn run(args: ClassifyArgs) -> i32 {
    let policy = match warden_daemon::config::resolve_policy(&args.policy) {
        Ok(p) => p,
        Err(e) => {
            say(e);
            return EXIT_WARDEN;
        }
    };
    if let Some(ws) = &args.workspace {
        if !ws.is_absolute() {
            say(format!(
                "--workspace {} is not an absolute path",
                ws.display()
            ));
            return EXIT_WARDEN;
        }
    }
    let ctx = ClassifyContext {
        workspace: args.workspace.clone(),
        ..ClassifyContext::default()
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if let Some(src) = &args.batch {
        let reader: Box<dyn BufRead> = if src == "-" {
            Box::new(std::io::stdin().lock())
        } else {
            match std::fs::File::open(src) {
                Ok(f) => Box::new(std::io::BufReader::new(f)),
                Err(e) => {
                    say(format!("cannot read --batch {src}: {e}"));
                    return EXIT_WARDEN;
                }
            }
        };
        for (n, line) in reader.split(b'\n').enumerate() {
            let line = match line {
                Ok(l) => l,
                Err(e) => {
                    say(format!("reading --batch {src} line {}: {e}", n + 1));
                    return EXIT_WARDEN;
                }
            };
            let line = String::from_utf8_lossy(&line);
            let line = line.strip_suffix('\r').unwrap_or(&line);
            let c = policy.classify(line, &ctx);
            let text = if args.json {
                json_line(&c)
            } else {
                format!(
                    "{:<12} {:<5} {}",
                    c.tier.as_str(),
                    c.decision.as_str(),
                    c.command
                )
            };
            if writeln!(out, "{text}").is_err() {
                return EXIT_WARDEN;
            }
        }
        return 0;
    }
    if args.words.is_empty() {
        say("nothing to classify: give the command after `--`, or --batch FILE|-");
        return EXIT_WARDEN;
    }
    let command = args.words.join(" ");
    let c = policy.classify(&command, &ctx);
    let text = if args.json {
        json_line(&c) + "\n"
    } else {
        human(&c, &policy)
    };
    if out.write_all(text.as_bytes()).is_err() {
        return EXIT_WARDEN;
    }
    decision_code(c.decision)
}
