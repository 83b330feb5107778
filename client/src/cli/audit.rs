//! `warden audit [--session ID] [--after SEQ] [--json]` and `warden audit verify`
//!
//! Exports the daemon's audit log in sequence order: a line per record, or
//! with `--json` one JSON object per line (fields of `AuditRecord`, with
//! `detail` parsed and `detail_json` as stored, so the hash chain can be
//! recomputed from the export). `verify` checks the hash chain and the head
//! file: exit 0 when intact, 1 naming the first broken record, 125 when the
//! daemon cannot be reached or refuses.

use std::io::Write;

use tokio_stream::StreamExt;

use super::{connect, say, GlobalArgs, EXIT_WARDEN};
use crate::pb;

#[derive(Debug, Clone, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub command: Option<AuditCommand>,
    /// Only the records of this session.
    #[arg(long, value_name = "ID", default_value = "")]
    pub session: String,
    /// Only records after this sequence number.
    #[arg(long, value_name = "SEQ", default_value_t = 0)]
    pub after: u64,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum AuditCommand {
    /// Verify the hash chain; exit 1 naming the first broken record.
    Verify {
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// One record as a JSON object (`--json`).
pub fn record_json(r: &pb::AuditRecord) -> serde_json::Value {
    let detail: serde_json::Value =
        serde_json::from_str(&r.detail_json).unwrap_or(serde_json::Value::Null);
    serde_json::json!({
        "seq": r.seq,
        "time_ms": r.time_ms,
        "session_id": r.session_id,
        "run_id": r.run_id,
        "step_id": r.step_id,
        "actor": r.actor,
        "action": r.action,
        "layer": r.layer,
        "detail": detail,
        "detail_json": r.detail_json,
        "prev_hash": r.prev_hash,
        "hash": r.hash,
    })
}

fn record_line(r: &pb::AuditRecord) -> String {
    let mut ids = String::new();
    for (k, v) in [
        ("session", &r.session_id),
        ("run", &r.run_id),
        ("step", &r.step_id),
    ] {
        if !v.is_empty() {
            ids.push_str(&format!(" {k}={v}"));
        }
    }
    format!(
        "{:>6} {} {:<6} {:<10} {:<12}{ids} {}",
        r.seq, r.time_ms, r.layer, r.actor, r.action, r.detail_json
    )
}

/// Runs `warden audit`; returns the exit code.
pub async fn run(args: AuditArgs, global: &GlobalArgs) -> i32 {
    let client = match connect(global).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Some(AuditCommand::Verify { json }) = args.command {
        return verify(&client, json).await;
    }
    let req = pb::ListAuditRequest {
        session_id: args.session.clone(),
        after_seq: args.after,
    };
    let mut stream = match client.audit().list_audit(req).await {
        Ok(r) => r.into_inner(),
        Err(s) => {
            say(s.message());
            return EXIT_WARDEN;
        }
    };
    let mut out = std::io::stdout().lock();
    while let Some(r) = stream.next().await {
        let r = match r {
            Ok(r) => r,
            Err(s) => {
                say(s.message());
                return EXIT_WARDEN;
            }
        };
        let line = if args.json {
            record_json(&r).to_string()
        } else {
            record_line(&r)
        };
        if writeln!(out, "{line}").is_err() {
            // Reader went away (`| head`): not an error of ours.
            return 0;
        }
    }
    0
}

async fn verify(client: &crate::Client, json: bool) -> i32 {
    let r = match client.audit().verify_audit(pb::VerifyAuditRequest {}).await {
        Ok(r) => r.into_inner(),
        Err(s) => {
            say(s.message());
            return EXIT_WARDEN;
        }
    };
    if json {
        println!(
            "{}",
            serde_json::json!({
                "ok": r.ok, "records": r.records, "first_broken_seq": r.first_broken_seq,
                "kind": r.kind, "error": r.error, "unanchored": r.unanchored,
                "head_seq": r.head_seq, "head_hash": r.head_hash,
            })
        );
    }
    if r.ok {
        if !json {
            println!(
                "audit log intact: {} records, head {} {}",
                r.records, r.head_seq, r.head_hash
            );
        }
        0
    } else {
        say(format!(
            "audit log broken at record {} ({}): {}",
            r.first_broken_seq, r.kind, r.error
        ));
        1
    }
}
