//! `warden doctor`: which sandbox mechanisms work on this machine, and
//! (`--attacks`) whether a built-in escape battery is blocked by the live
//! sandbox. Needs no daemon: it links the daemon library and starts its own
//! spawn helper, so it must run before any runtime thread exists.

use warden_daemon::sandbox::probe::{self, Report};
use warden_daemon::sandbox::Spawner;

use super::{say, EXIT_WARDEN};

/// `warden doctor [--json] [--attacks] [--policy NAME|FILE]`.
#[derive(Debug, Clone, clap::Args)]
pub struct DoctorArgs {
    /// Print the report as JSON on standard output.
    #[arg(long)]
    pub json: bool,
    /// Also run the built-in escape battery inside the live sandbox.
    #[arg(long)]
    pub attacks: bool,
    /// Policy whose `[sandbox]` section decides what is required.
    #[arg(long, default_value = "default", value_name = "NAME|FILE")]
    pub policy: String,
    /// Internal: run one attack probe (used inside the sandbox by --attacks).
    #[arg(long, hide = true)]
    pub probe: Option<String>,
    /// Internal: argument of --probe.
    #[arg(long, hide = true, default_value = "")]
    pub arg: String,
}

/// Runs the doctor; returns the exit code: 0 when everything the policy
/// requires works (and, with `--attacks`, every attack was blocked), 1
/// otherwise, 125 when the doctor itself could not run. Must be called
/// before any other thread exists (it forks the spawn helper).
pub fn run(args: DoctorArgs) -> i32 {
    if let Some(name) = &args.probe {
        return probe::attack_probe(name, &args.arg);
    }
    let policy = match warden_daemon::config::resolve_policy(&args.policy) {
        Ok(p) => p,
        Err(e) => {
            say(e);
            return EXIT_WARDEN;
        }
    };
    let settings = policy.file.sandbox.clone();
    // Kernel probes first (forks with raw syscalls only), then the helper.
    let mut report = probe::probe_kernel(&settings);
    let spawner = Spawner::start();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            say(format!("cannot start the runtime: {e}"));
            return EXIT_WARDEN;
        }
    };
    let mut attacks = Vec::new();
    match &spawner {
        Ok(s) => {
            report
                .checks
                .push(rt.block_on(probe::probe_spawn(s, &settings)));
            if args.attacks {
                match std::env::current_exe() {
                    Ok(exe) => attacks = rt.block_on(probe::run_attacks(s, &exe)),
                    Err(e) => say(format!("cannot locate the warden binary: {e}")),
                }
            }
        }
        Err(e) => report.checks.push(probe::Check {
            name: "sandbox_spawn".into(),
            ok: false,
            required: true,
            detail: format!("spawn helper: {e}"),
        }),
    }
    let missing = report.missing().len();
    let escaped = attacks.iter().filter(|a| !a.blocked).count();
    if args.json {
        let v = serde_json::json!({
            "policy": policy.name,
            "ok": missing == 0 && escaped == 0,
            "report": report,
            "attacks": attacks,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print_report(&report);
        if args.attacks {
            println!("\nescape battery (inside the live sandbox):");
            for a in &attacks {
                println!(
                    "  {:<8} {:<16} {} — {}",
                    if a.blocked { "blocked" } else { "ESCAPED" },
                    a.name,
                    a.about,
                    a.detail
                );
            }
        }
        if missing > 0 {
            let names: Vec<&str> = report.missing().iter().map(|c| c.name.as_str()).collect();
            println!(
                "\nmissing what policy {:?} requires: {}",
                policy.name,
                names.join(", ")
            );
        }
        if escaped > 0 {
            println!("\n{escaped} attack(s) were NOT blocked: do not trust this machine's sandbox");
        }
    }
    if missing == 0 && escaped == 0 {
        0
    } else {
        1
    }
}

fn print_report(r: &Report) {
    println!(
        "sandbox mechanisms ({}):",
        if r.root {
            "running as root"
        } else {
            "running unprivileged"
        }
    );
    for c in &r.checks {
        let state = match (c.ok, c.required) {
            (true, _) => "ok",
            (false, true) => "MISSING",
            (false, false) => "absent",
        };
        println!("  {:<8} {:<22} {}", state, c.name, c.detail);
    }
}
