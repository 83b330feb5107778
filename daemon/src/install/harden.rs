//! Hardening of an approved install: scripts off where the manager supports
//! it, binary-only pip when the policy says so.

use super::{InstallIntent, InstallSettings};
use serde::{Deserialize, Serialize};

/// The argv to run for an approved install, and what was changed (for the
/// approval preview and the audit record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hardening {
    /// The argv to spawn (the intent's argv with options added).
    pub argv: Vec<String>,
    /// One line per change or per thing that could not be changed.
    pub changes: Vec<String>,
    /// Whether install scripts can still run after hardening.
    pub scripts_enabled: bool,
}

/// Returns the argv to run for `intent` under `settings`.
///
/// With `settings.disable_scripts` and unless `scripts_approved` (the user
/// approved scripts for this request):
/// - npm, pnpm, yarn, bun installs get `--ignore-scripts` (npm-install(1)
///   `ignore-scripts`; pnpm, yarn classic and bun accept the same flag; yarn
///   berry rejects it, so such a run fails rather than running scripts);
/// - apk gets `--no-scripts` (apk(8)).
///
/// With `settings.pip_binary_only`, pip and `uv pip` installs get
/// `--only-binary :all:` (wheels only: no `setup.py` runs) and uv project
/// commands `--no-build`; explicit path, VCS and URL sources still build, and
/// the change list says so.
///
/// Managers without such a switch (cargo build scripts, gem extensions,
/// apt/dnf maintainer scripts, brew, conda, fetch-and-run) are left as they
/// are and named in `changes`. The options are inserted before a `--`
/// separator when there is one, else appended.
pub fn harden(
    intent: &InstallIntent,
    settings: &InstallSettings,
    scripts_approved: bool,
) -> Hardening {
    let mut argv = intent.argv.clone();
    let mut changes = vec![];
    let mut scripts = intent.scripts_enabled;
    let m = intent.manager.as_str();
    let op = intent.operation.as_str();
    let removal = matches!(op, "remove" | "prune");

    if scripts && settings.disable_scripts && !removal {
        if scripts_approved {
            changes.push("install scripts left on: approved with scripts".into());
        } else if intent.fetch_and_run {
            changes.push(format!(
                "{m} {op} runs the fetched package itself: scripts cannot be turned off"
            ));
        } else {
            let flag = match m {
                "npm" | "pnpm" | "yarn" | "bun" => Some("--ignore-scripts"),
                "apk" => Some("--no-scripts"),
                _ => None,
            };
            match flag {
                Some(f) => {
                    insert(&mut argv, &[f]);
                    scripts = false;
                    changes.push(format!(
                        "added {f}: {m} will not run the packages' install scripts"
                    ));
                }
                None => changes.push(format!(
                    "{m} has no switch to skip install-time code (build scripts, \
                     extensions, maintainer scripts): left on"
                )),
            }
        }
    }

    let pip_like = m == "pip" || (m == "uv" && op.starts_with("pip "));
    let builds = matches!(
        op,
        "install" | "download" | "wheel" | "pip install" | "pip sync"
    );
    if settings.pip_binary_only && intent.ecosystem == "pypi" && !removal {
        let already = argv
            .windows(2)
            .any(|w| w[0] == "--only-binary" && w[1] == ":all:")
            || argv
                .iter()
                .any(|a| a == "--only-binary=:all:" || a == "--no-build");
        if !already && pip_like && builds {
            insert(&mut argv, &["--only-binary", ":all:"]);
            changes.push("added --only-binary :all:: wheels only, no setup.py builds".into());
        } else if !already && m == "uv" && matches!(op, "add" | "sync" | "tool install") {
            insert(&mut argv, &["--no-build"]);
            changes.push("added --no-build: wheels only, no source builds".into());
        } else if !already && m == "uv" && matches!(op, "run" | "tool run") {
            // Options of a run form go before the command it runs.
            let at = argv
                .iter()
                .position(|a| a == "run" || a.rsplit('/').next() == Some("uvx"))
                .map_or(argv.len(), |i| i + 1);
            argv.insert(at, "--no-build".into());
            changes.push("added --no-build: wheels only, no source builds".into());
        }
        if !matches!(
            intent.source.as_str(),
            "registry" | "lockfile" | "requirements"
        ) {
            changes.push(format!(
                "{} source: builds from source regardless of binary-only",
                intent.source
            ));
        } else if pip_like || m == "uv" {
            scripts = false;
        }
    }

    Hardening {
        argv,
        changes,
        scripts_enabled: scripts,
    }
}

/// Inserts `opts` before the first `--`, else at the end.
fn insert(argv: &mut Vec<String>, opts: &[&str]) {
    let at = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    for (k, o) in opts.iter().enumerate() {
        argv.insert(at + k, o.to_string());
    }
}
