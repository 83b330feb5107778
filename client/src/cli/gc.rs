//! `warden gc [--json]`: checkpoint retention (the daemon's default policy
//! `[checkpoint]` keep_runs / max_store_bytes) and deletion of unreferenced
//! blobs. Exit codes: 0; 125 when the daemon cannot be reached or refuses
//! (only root or the daemon's own user may run it).

use super::{connect, say, GlobalArgs, EXIT_WARDEN};
use crate::pb;

#[derive(Debug, Clone, clap::Args)]
pub struct GcArgs {
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Runs `warden gc`; returns the exit code.
pub async fn run(args: GcArgs, global: &GlobalArgs) -> i32 {
    let client = match connect(global).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let r = match client.checkpoints().gc(pb::GcRequest {}).await {
        Ok(r) => r.into_inner(),
        Err(s) => {
            say(s.message());
            return EXIT_WARDEN;
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "checkpoints_deleted": r.checkpoints_deleted, "checkpoints_kept": r.checkpoints_kept,
                "blobs_deleted": r.blobs_deleted, "bytes_freed": r.bytes_freed, "bytes_kept": r.bytes_kept,
            })
        );
    } else {
        println!(
            "deleted {} checkpoints and {} blobs ({} bytes); kept {} checkpoints ({} bytes of blobs)",
            r.checkpoints_deleted, r.blobs_deleted, r.bytes_freed, r.checkpoints_kept, r.bytes_kept
        );
    }
    0
}
