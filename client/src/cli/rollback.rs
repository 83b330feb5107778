//! `warden rollback ID [--files] [--conversation] [--include-git] [--force] [--json]`
//!
//! Rolls back to checkpoint ID: files (the workspace, through the daemon's
//! confined handle; `.git/` only with `--include-git`) and/or conversation
//! (the run state); both when neither flag is given. Works after the session
//! closed. Steps after ID with external effects are listed: they are not
//! undone. The rollback is itself a checkpoint, so it can be rolled back.
//! Exit codes: 0 done; 1 refused because the workspace drifted from its
//! latest checkpoint (the drifted paths are named; `--force` overrides);
//! 125 when the daemon cannot be reached or refuses otherwise.

use super::checkpoint::{change_json, change_line};
use super::{connect, say, GlobalArgs, EXIT_WARDEN};
use crate::pb;

#[derive(Debug, Clone, clap::Args)]
pub struct RollbackArgs {
    /// The checkpoint to return to.
    pub id: String,
    /// Restore files.
    #[arg(long)]
    pub files: bool,
    /// Restore the run state (message history, plan).
    #[arg(long)]
    pub conversation: bool,
    /// Also restore `.git/`.
    #[arg(long)]
    pub include_git: bool,
    /// Roll back even though the workspace drifted (the drifted state is
    /// checkpointed first).
    #[arg(long)]
    pub force: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Runs `warden rollback`; returns the exit code.
pub async fn run(args: RollbackArgs, global: &GlobalArgs) -> i32 {
    let client = match connect(global).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let req = pb::RollbackRequest {
        checkpoint_id: args.id.clone(),
        files: args.files,
        conversation: args.conversation,
        include_git: args.include_git,
        force: args.force,
    };
    let r = match client.checkpoints().rollback(req).await {
        Ok(r) => r.into_inner(),
        Err(s) if s.code() == tonic::Code::FailedPrecondition => {
            say(format!("{} (use --force to roll back anyway)", s.message()));
            return 1;
        }
        Err(s) => {
            say(s.message());
            return EXIT_WARDEN;
        }
    };
    if args.json {
        let effects: Vec<_> = r
            .external_effects
            .iter()
            .map(|e| {
                serde_json::json!({
                    "checkpoint_id": e.checkpoint_id, "step_id": e.step_id, "tool": e.tool,
                    "summary": e.summary, "compensation": e.compensation, "undone": false,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "checkpoint_id": r.checkpoint_id,
                "restored": r.restored.iter().map(change_json).collect::<Vec<_>>(),
                "not_restored": r.not_restored,
                "external_effects": effects,
                "archived_branch_id": r.archived_branch_id,
                "drifted": r.drifted,
                "drift_checkpoint_id": r.drift_checkpoint_id,
            })
        );
        return 0;
    }
    println!(
        "rolled back to {}; recorded as checkpoint {}",
        args.id, r.checkpoint_id
    );
    if !r.drift_checkpoint_id.is_empty() {
        println!(
            "the drifted state was saved first as checkpoint {}",
            r.drift_checkpoint_id
        );
    }
    for c in &r.restored {
        println!("  {}", change_line(c));
    }
    for n in &r.not_restored {
        println!("not restored: {}", super::checkpoint::printable(n));
    }
    if !r.archived_branch_id.is_empty() {
        println!(
            "conversation restored; the replaced state is archived as {}",
            r.archived_branch_id
        );
    }
    for e in &r.external_effects {
        let comp = if e.compensation.is_empty() {
            "none declared"
        } else {
            &e.compensation
        };
        println!(
            "NOT undone (external effect): step {} {} {}; compensation: {comp}",
            e.step_id, e.tool, e.summary
        );
    }
    0
}
