//! `warden checkpoint list [--session ID] [--run ID] [--json]`,
//! `warden checkpoint show ID [--json]`, `warden checkpoint diff ID [ID2] [--json]`.
//!
//! `list` prints every complete checkpoint visible to the caller, newest
//! first (closed sessions included); with `--json` one JSON object per line
//! with `id`, `kind` (pre/post/rollback), `session_id`, `run_id`, `step_id`,
//! `root_hash`, `created_at` (Unix epoch ms), `tool`, `side_effects`,
//! `changes` (count). `show` prints one record with its change set. `diff`
//! prints the unified diff (redacted) from ID to ID2, or to the current
//! workspace without ID2; `--json` gives the change set as JSON. Exit codes:
//! 0; 125 when the daemon cannot be reached or refuses (unknown id: NOT_FOUND).

use super::{connect, say, GlobalArgs, EXIT_WARDEN};
use crate::pb;

#[derive(Debug, Clone, clap::Args)]
pub struct CheckpointArgs {
    #[command(subcommand)]
    pub command: CheckpointCommand,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum CheckpointCommand {
    /// List checkpoints, newest first.
    List {
        /// Only this session's checkpoints.
        #[arg(long, value_name = "ID", default_value = "")]
        session: String,
        /// Only this run's checkpoints.
        #[arg(long, value_name = "ID", default_value = "")]
        run: String,
        /// At most this many (0: 1000).
        #[arg(long, default_value_t = 0)]
        limit: u32,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Show one checkpoint and its change set.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Diff from checkpoint ID to ID2 (default: the current workspace).
    Diff {
        id: String,
        id2: Option<String>,
        /// The change set as JSON instead of the patch.
        #[arg(long)]
        json: bool,
    },
}

/// A change-set entry as JSON.
pub fn change_json(c: &pb::FileChange) -> serde_json::Value {
    let mut v = serde_json::json!({
        "path": c.path, "kind": c.kind, "entry_kind": c.entry_kind,
        "old_hash": c.old_hash, "new_hash": c.new_hash,
        "old_mode": c.old_mode, "new_mode": c.new_mode,
    });
    if !c.from_path.is_empty() {
        v["from_path"] = c.from_path.clone().into();
    }
    v
}

/// A one-line summary of a change: `M path`, `R from -> to`, ...
pub fn change_line(c: &pb::FileChange) -> String {
    let tag = match c.kind.as_str() {
        "added" => "A",
        "modified" => "M",
        "deleted" => "D",
        "renamed" => "R",
        "mode" => "T",
        _ => "?",
    };
    let dir = if c.entry_kind == "dir" { "/" } else { "" };
    let mode = if c.old_mode != c.new_mode && c.old_mode != 0 && c.new_mode != 0 {
        format!(" ({:o} -> {:o})", c.old_mode, c.new_mode)
    } else {
        String::new()
    };
    if c.kind == "renamed" {
        format!(
            "{tag} {} -> {}{dir}{mode}",
            printable(&c.from_path),
            printable(&c.path)
        )
    } else {
        format!("{tag} {}{dir}{mode}", printable(&c.path))
    }
}

/// A path as one terminal-safe line: control characters (newline, escape,
/// carriage return, ...) and backslashes escaped as Rust does (`\n`,
/// `\u{1b}`), so a file name can neither forge a line of the listing nor
/// drive the terminal. The JSON output keeps the exact path.
pub fn printable(p: &str) -> String {
    if !p.chars().any(|c| c.is_control() || c == '\\') {
        return p.to_string();
    }
    p.chars()
        .map(|c| {
            if c.is_control() || c == '\\' {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A checkpoint as JSON (the `list --json` fields, plus details for `show`).
pub fn checkpoint_json(c: &pb::Checkpoint, full: bool) -> serde_json::Value {
    let mut v = serde_json::json!({
        "id": c.id, "kind": c.kind, "session_id": c.session_id, "run_id": c.run_id,
        "step_id": c.step_id, "root_hash": c.root_hash, "created_at": c.created_at_ms,
        "tool": c.tool, "side_effects": c.side_effects, "changes": c.change_count,
    });
    if full {
        v["changes"] = c.changes.iter().map(change_json).collect();
        for (k, s) in [
            ("workspace", &c.workspace),
            ("arguments_json", &c.arguments_json),
            ("base_id", &c.base_id),
            ("rollback_of", &c.rollback_of),
            ("rollback_json", &c.rollback_json),
            ("result_json", &c.result_json),
            ("compensation", &c.compensation),
        ] {
            v[k] = s.clone().into();
        }
        v["not_stored"] = c.not_stored.clone().into();
        v["entry_count"] = c.entry_count.into();
        v["total_bytes"] = c.total_bytes.into();
        v["new_blob_bytes"] = c.new_blob_bytes.into();
    }
    v
}

/// Runs `warden checkpoint`; returns the exit code.
pub async fn run(args: CheckpointArgs, global: &GlobalArgs) -> i32 {
    let client = match connect(global).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let mut cps = client.checkpoints();
    match args.command {
        CheckpointCommand::List {
            session,
            run,
            limit,
            json,
        } => {
            let req = pb::ListCheckpointsRequest {
                session_id: session,
                run_id: run,
                limit,
            };
            let list = match cps.list_checkpoints(req).await {
                Ok(r) => r.into_inner().checkpoints,
                Err(s) => {
                    say(s.message());
                    return EXIT_WARDEN;
                }
            };
            for c in &list {
                if json {
                    println!("{}", checkpoint_json(c, false));
                } else {
                    println!(
                        "{}  {:<8} {}  session={} run={} step={} {} changes={}",
                        c.id,
                        c.kind,
                        c.created_at_ms,
                        c.session_id,
                        c.run_id,
                        c.step_id,
                        c.tool,
                        c.change_count
                    );
                }
            }
            0
        }
        CheckpointCommand::Show { id, json } => {
            let c = match cps
                .get_checkpoint(pb::GetCheckpointRequest { checkpoint_id: id })
                .await
            {
                Ok(r) => r.into_inner(),
                Err(s) => {
                    say(s.message());
                    return EXIT_WARDEN;
                }
            };
            if json {
                println!("{}", checkpoint_json(&c, true));
                return 0;
            }
            println!("checkpoint {} ({})", c.id, c.kind);
            println!("created_at  {}", c.created_at_ms);
            println!("session     {}", c.session_id);
            for (k, v) in [
                ("run", &c.run_id),
                ("step", &c.step_id),
                ("base", &c.base_id),
                ("rollback_of", &c.rollback_of),
            ] {
                if !v.is_empty() {
                    println!("{k:<11} {v}");
                }
            }
            println!("workspace   {}", c.workspace);
            println!("root_hash   {}", c.root_hash);
            println!("tool        {} {}", c.tool, c.arguments_json);
            println!("effects     {}", c.side_effects);
            println!("entries     {} ({} bytes)", c.entry_count, c.total_bytes);
            for n in &c.not_stored {
                println!("not stored  {n} (over the size cap)");
            }
            println!("changes     {}", c.changes.len());
            for ch in &c.changes {
                println!("  {}", change_line(ch));
            }
            0
        }
        CheckpointCommand::Diff { id, id2, json } => {
            let req = pb::DiffCheckpointsRequest {
                from_checkpoint_id: id,
                to_checkpoint_id: id2.unwrap_or_default(),
            };
            let d = match cps.diff_checkpoints(req).await {
                Ok(r) => r.into_inner(),
                Err(s) => {
                    say(s.message());
                    return EXIT_WARDEN;
                }
            };
            if json {
                let changes: Vec<_> = d.changes.iter().map(change_json).collect();
                println!(
                    "{}",
                    serde_json::json!({"changes": changes, "patch": d.patch})
                );
            } else {
                for ch in &d.changes {
                    eprintln!("{}", change_line(ch));
                }
                print!("{}", d.patch);
            }
            0
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn paths_print_on_one_safe_line() {
        assert_eq!(super::printable("src/main.rs"), "src/main.rs");
        assert_eq!(super::printable("nl\nM fake.txt"), "nl\\nM fake.txt");
        assert_eq!(super::printable("\x1b[2K\rx"), "\\u{1b}[2K\\rx");
        assert_eq!(super::printable("a\\n"), "a\\\\n");
    }
}
