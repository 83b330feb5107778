//! `warden fs read|write|patch|ls|grep`: the daemon's confined file tools.
//!
//! ```text
//! warden fs read  [--workspace DIR] [--offset N] [--limit N] PATH
//! warden fs write [--workspace DIR] [--yes] [--base-hash H] [--mode OCTAL] PATH < CONTENT
//! warden fs patch [--workspace DIR] [--yes] FILE|-
//! warden fs ls    [--workspace DIR] [--depth N] [--limit N] [PATH]
//! warden fs grep  [--workspace DIR] [-i] [--limit N] PATTERN [PATH]
//! ```
//!
//! Paths are relative to the workspace root. Results go to standard output
//! (read: the redacted content; ls: one path per line, `/` after
//! directories, `@` after symlinks; grep: `path:line:text`; write and patch:
//! one `kind path hash` line per changed file); Warden messages go to
//! standard error. Exit codes: 0 done; 1 failed (the reason on
//! standard error: path rules, missing file, a patch that does not apply,
//! too large) and, for grep, no match; 126 when refused (`PERMISSION_DENIED`:
//! a protected path such as `.git/hooks/*` or `.git/config`, a secret file,
//! or policy: `warden: denied` / `warden: approval required` / `warden:
//! approval expired`; `--yes` grants an ask once, `warden approve ID` grants
//! the request the refusal names for a retry of the same call); 125 for Warden's own failures (daemon unreachable).

use std::io::{Read, Write};
use std::path::PathBuf;

use super::{connect, say, GlobalArgs, EXIT_WARDEN};
use crate::pb;

/// Exit code of a refused or failed file operation.
pub const EXIT_FAILED: i32 = 1;
/// Largest content `fs write` / `fs patch` read from a file or stdin, bytes.
pub const MAX_INPUT_BYTES: u64 = 16 << 20;

#[derive(Debug, Clone, clap::Args)]
pub struct FsArgs {
    #[command(subcommand)]
    pub command: FsCommand,
}

/// Where the call runs: a one-shot session on a workspace, or an existing
/// session.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// Workspace root [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Policy: a built-in name, a name in the config dir, or a TOML file
    /// [default: the daemon's].
    #[arg(long, value_name = "NAME|FILE")]
    pub policy: Option<String>,
    /// Use an existing session instead of a one-shot session.
    #[arg(long, value_name = "ID", conflicts_with_all = ["workspace", "policy"])]
    pub session: Option<String>,
    /// Print the daemon's answer as JSON on standard output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum FsCommand {
    /// Print a file (redacted).
    Read {
        #[command(flatten)]
        target: Target,
        /// Start this many bytes into the file.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Print at most this many bytes [default: up to the cap, 1 MiB].
        #[arg(long)]
        limit: Option<u64>,
        path: String,
    },
    /// Replace (or create) a file with standard input, atomically.
    Write {
        #[command(flatten)]
        target: Target,
        /// Grant once if the policy asks for approval.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Refuse unless the file's current BLAKE3 hash is this (`absent`:
        /// the file must not exist).
        #[arg(long, value_name = "HASH")]
        base_hash: Option<String>,
        /// Mode of a new file, octal [default: 644]; an existing file keeps its mode.
        #[arg(long, value_name = "OCTAL")]
        mode: Option<String>,
        path: String,
    },
    /// Apply a unified diff (git-style, multi-file) atomically: all files or none.
    Patch {
        #[command(flatten)]
        target: Target,
        /// Grant once if the policy asks for approval.
        #[arg(long, short = 'y')]
        yes: bool,
        /// The patch file, or `-` for standard input.
        file: String,
    },
    /// List a directory.
    Ls {
        #[command(flatten)]
        target: Target,
        /// Levels to descend (1: the directory itself).
        #[arg(long, default_value_t = 1)]
        depth: u32,
        /// At most this many entries [default: 1000].
        #[arg(long, default_value_t = 0)]
        limit: u32,
        path: Option<String>,
    },
    /// Search files for a regular expression (Rust regex syntax).
    Grep {
        #[command(flatten)]
        target: Target,
        /// Case-insensitive.
        #[arg(long, short = 'i')]
        ignore_case: bool,
        /// At most this many matches [default: 500].
        #[arg(long, default_value_t = 0)]
        limit: u32,
        pattern: String,
        path: Option<String>,
    },
}

impl FsCommand {
    fn target(&self) -> &Target {
        match self {
            FsCommand::Read { target, .. }
            | FsCommand::Write { target, .. }
            | FsCommand::Patch { target, .. }
            | FsCommand::Ls { target, .. }
            | FsCommand::Grep { target, .. } => target,
        }
    }
}

/// Exit code and message for a failed call: 126 for a refusal
/// (`PERMISSION_DENIED`: policy deny, approval required or expired, a
/// protected path such as `.git/hooks/*`), 125 when the daemon could not be
/// reached or failed, 1 for every other error from the file tools.
pub fn status_code(s: &tonic::Status) -> i32 {
    super::status_exit(s, EXIT_FAILED)
}

/// [`status_code`], plus for a one-shot session whose call is awaiting an
/// approval the note that the request expires with the session.
fn status_code_in(s: &tonic::Status, one_shot: bool) -> i32 {
    let code = status_code(s);
    if one_shot && s.message().starts_with("approval required") {
        say(super::approve::ONE_SHOT_HINT);
    }
    code
}

fn read_input(file: &str) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    let res = if file == "-" {
        std::io::stdin()
            .lock()
            .take(MAX_INPUT_BYTES + 1)
            .read_to_end(&mut buf)
    } else {
        std::fs::File::open(file).and_then(|f| f.take(MAX_INPUT_BYTES + 1).read_to_end(&mut buf))
    };
    res.map_err(|e| format!("{file}: {e}"))?;
    if buf.len() as u64 > MAX_INPUT_BYTES {
        return Err(format!(
            "{}: input over {MAX_INPUT_BYTES} bytes",
            if file == "-" { "standard input" } else { file }
        ));
    }
    Ok(buf)
}

/// Runs `warden fs ...`; returns the exit code.
pub async fn run(args: FsArgs, global: &GlobalArgs) -> i32 {
    // Local input first: nothing is sent when it cannot be read.
    let input = match &args.command {
        FsCommand::Write { .. } => Some(read_input("-")),
        FsCommand::Patch { file, .. } => Some(read_input(file)),
        _ => None,
    };
    let input = match input.transpose() {
        Ok(i) => i.unwrap_or_default(),
        Err(e) => {
            say(e);
            return EXIT_FAILED;
        }
    };
    let target = args.command.target().clone();
    let client = match connect(global).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let (session_id, one_shot) = match &target.session {
        Some(id) => (id.clone(), false),
        None => {
            let ws = target
                .workspace
                .clone()
                .unwrap_or_else(|| PathBuf::from("."));
            match client.create_session(&ws, target.policy.as_deref()).await {
                Ok(s) => (s.id, true),
                Err(e) => {
                    say(e);
                    return EXIT_WARDEN;
                }
            }
        }
    };
    let code = call(
        &client,
        session_id.clone(),
        args.command,
        input,
        target.json,
        one_shot,
    )
    .await;
    if one_shot {
        let _ = client.close_session(&session_id).await;
    }
    code
}

async fn call(
    client: &crate::Client,
    session_id: String,
    cmd: FsCommand,
    input: Vec<u8>,
    json: bool,
    one_shot: bool,
) -> i32 {
    let mut files = client.files();
    let mut out = std::io::stdout().lock();
    match cmd {
        FsCommand::Read {
            offset,
            limit,
            path,
            ..
        } => {
            let r = match files
                .read_file(pb::ReadFileRequest {
                    session_id,
                    path: path.clone(),
                    offset,
                    limit: limit.unwrap_or(0),
                    ..Default::default()
                })
                .await
            {
                Ok(r) => r.into_inner(),
                Err(s) => return status_code_in(&s, one_shot),
            };
            if json {
                let v = serde_json::json!({"path": path, "content": r.content, "binary": r.binary,
                    "size_bytes": r.size_bytes, "hash": r.hash, "truncated": r.truncated, "redactions": r.redactions});
                let _ = writeln!(out, "{v}");
                return 0;
            }
            if r.binary {
                say(format!(
                    "{path}: binary file ({} bytes, hash {}); not shown",
                    r.size_bytes, r.hash
                ));
                return 0;
            }
            let _ = out.write_all(r.content.as_bytes());
            let _ = out.flush();
            if r.truncated {
                say(format!(
                    "{path}: showing {} bytes from offset {offset} of {} (use --offset/--limit for more)",
                    r.content.len(),
                    r.size_bytes
                ));
            }
            0
        }
        FsCommand::Write {
            yes,
            base_hash,
            mode,
            path,
            ..
        } => {
            let mode = match mode.as_deref().map(|m| u32::from_str_radix(m, 8)) {
                None => 0,
                Some(Ok(m)) if m > 0 && m <= 0o777 => m,
                Some(_) => {
                    say("--mode must be octal permission bits between 1 and 777");
                    return EXIT_FAILED;
                }
            };
            let r = match files
                .write_file(pb::WriteFileRequest {
                    session_id,
                    path,
                    content: input,
                    base_hash: base_hash.unwrap_or_default(),
                    approve: yes,
                    mode,
                    ..Default::default()
                })
                .await
            {
                Ok(r) => r.into_inner(),
                Err(s) => return status_code_in(&s, one_shot),
            };
            let c = r.change.unwrap_or_default();
            print_changes(&mut out, &[c], json);
            0
        }
        FsCommand::Patch { yes, .. } => {
            let Ok(patch) = String::from_utf8(input) else {
                say("the patch is not UTF-8 text");
                return EXIT_FAILED;
            };
            let r = match files
                .apply_patch(pb::ApplyPatchRequest {
                    session_id,
                    patch,
                    approve: yes,
                    ..Default::default()
                })
                .await
            {
                Ok(r) => r.into_inner(),
                Err(s) => return status_code_in(&s, one_shot),
            };
            print_changes(&mut out, &r.changes, json);
            0
        }
        FsCommand::Ls {
            depth, limit, path, ..
        } => {
            let r = match files
                .list_dir(pb::ListDirRequest {
                    session_id,
                    path: path.unwrap_or_default(),
                    depth,
                    limit,
                    ..Default::default()
                })
                .await
            {
                Ok(r) => r.into_inner(),
                Err(s) => return status_code_in(&s, one_shot),
            };
            for e in &r.entries {
                if json {
                    let v = serde_json::json!({"path": e.path, "kind": e.kind, "size_bytes": e.size_bytes, "mode": e.mode});
                    let _ = writeln!(out, "{v}");
                } else {
                    let suffix = match e.kind.as_str() {
                        "dir" => "/",
                        "symlink" => "@",
                        _ => "",
                    };
                    let _ = writeln!(out, "{}{suffix}", e.path);
                }
            }
            if r.truncated {
                say(format!(
                    "listing truncated after {} entries",
                    r.entries.len()
                ));
            }
            0
        }
        FsCommand::Grep {
            ignore_case,
            limit,
            pattern,
            path,
            ..
        } => {
            let r = match files
                .grep(pb::GrepRequest {
                    session_id,
                    pattern,
                    path: path.unwrap_or_default(),
                    case_insensitive: ignore_case,
                    limit,
                    ..Default::default()
                })
                .await
            {
                Ok(r) => r.into_inner(),
                Err(s) => return status_code_in(&s, one_shot),
            };
            for m in &r.matches {
                if json {
                    let v = serde_json::json!({"path": m.path, "line": m.line, "text": m.text});
                    let _ = writeln!(out, "{v}");
                } else {
                    let _ = writeln!(out, "{}:{}:{}", m.path, m.line, m.text);
                }
            }
            if r.truncated {
                say(format!(
                    "search truncated after {} matches",
                    r.matches.len()
                ));
            }
            if r.matches.is_empty() {
                EXIT_FAILED
            } else {
                0
            }
        }
    }
}

fn print_changes(out: &mut impl Write, changes: &[pb::FileChange], json: bool) {
    for c in changes {
        if json {
            let v = serde_json::json!({"path": c.path, "kind": c.kind, "from_path": c.from_path,
                "old_hash": c.old_hash, "new_hash": c.new_hash, "old_mode": c.old_mode, "new_mode": c.new_mode});
            let _ = writeln!(out, "{v}");
        } else if c.kind == "renamed" {
            let _ = writeln!(out, "renamed {} -> {} {}", c.from_path, c.path, c.new_hash);
        } else {
            let _ = writeln!(out, "{} {} {}", c.kind, c.path, c.new_hash);
        }
    }
}
