//! `warden redact [--json] [--policy NAME|FILE] < in > out`: redacts
//! secrets from standard input in-process (no daemon), with the same
//! scanner the daemon applies to everything it returns.
//!
//! Without `--json` the redacted bytes go to standard output, streamed with
//! a bounded window (any size of input, non-UTF-8 included). With `--json`
//! standard output is one JSON object listing the findings, never their
//! values: `{"redactions": N, "findings": [{"rule": "...", "start": B,
//! "end": B}]}`, byte offsets into the input. Exit status 0 whether or not
//! anything was redacted; 125 when the input or output fails or the policy
//! cannot be loaded.

use std::io::{Read, Write};

use warden_daemon::redact::{RedactSettings, Redactor, StreamRedactor};

use super::{say, EXIT_WARDEN};

/// Arguments of `warden redact`.
#[derive(clap::Args, Debug, Clone)]
pub struct RedactArgs {
    /// Print the findings (rule, byte range; never values) as JSON instead
    /// of the redacted text.
    #[arg(long)]
    pub json: bool,
    /// Take the `[redact]` settings from this policy (a name or a .toml
    /// file); default: the built-in defaults.
    #[arg(long, value_name = "NAME|FILE")]
    pub policy: Option<String>,
    /// Do not treat this process's secret-named environment variables as
    /// known secrets.
    #[arg(long)]
    pub no_env: bool,
}

/// Runs `warden redact`; returns the exit status.
pub fn run(args: RedactArgs) -> i32 {
    let mut settings = match &args.policy {
        Some(p) => match warden_daemon::config::resolve_policy(p) {
            Ok(policy) => policy.file.redact.clone(),
            Err(e) => {
                say(format!("redact: {e}"));
                return EXIT_WARDEN;
            }
        },
        None => RedactSettings::default(),
    };
    if args.no_env {
        settings.env_secrets = false;
    }
    let redactor = match Redactor::try_new(&settings) {
        Ok(r) => r,
        Err(e) => {
            say(format!("redact: {e}"));
            return EXIT_WARDEN;
        }
    };
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let result = if args.json {
        findings_json(&redactor, &mut stdin.lock(), &mut stdout.lock())
    } else {
        stream(&redactor, &mut stdin.lock(), &mut stdout.lock())
    };
    match result {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            say(format!("redact: {e}"));
            EXIT_WARDEN
        }
    }
}

/// Copies `input` to `output` through a [`StreamRedactor`].
pub fn stream(
    redactor: &Redactor,
    input: &mut dyn Read,
    output: &mut dyn Write,
) -> std::io::Result<()> {
    let mut s = StreamRedactor::new(redactor.clone());
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        output.write_all(&s.push(&buf[..n]))?;
    }
    output.write_all(&s.finish())?;
    output.flush()
}

/// Reads all of `input` and writes the findings as JSON.
pub fn findings_json(
    redactor: &Redactor,
    input: &mut dyn Read,
    output: &mut dyn Write,
) -> std::io::Result<()> {
    let mut data = Vec::new();
    input.read_to_end(&mut data)?;
    let (_, findings) = redactor.redact_bytes(&data);
    let doc = serde_json::json!({ "redactions": findings.len(), "findings": findings });
    serde_json::to_writer(&mut *output, &doc)?;
    output.write_all(b"\n")?;
    output.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor() -> Redactor {
        Redactor::new(&RedactSettings {
            env_secrets: false,
            ..RedactSettings::default()
        })
    }

    #[test]
    fn streams_redacted_text() {
        let input = b"ok\nGITHUB_TOKEN=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\nbye\n".to_vec();
        let mut out = Vec::new();
        stream(&redactor(), &mut &input[..], &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.starts_with("ok\nGITHUB_TOKEN=[REDACTED:github-token:"),
            "{out}"
        );
        assert!(out.ends_with("]\nbye\n"));
    }

    #[test]
    fn json_lists_findings_without_values() {
        let input = b"password=hunter2!673 and nothing else".to_vec();
        let mut out = Vec::new();
        findings_json(&redactor(), &mut &input[..], &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(!out.contains("hunter2"));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["redactions"], 1);
        assert_eq!(v["findings"][0]["start"], 9);
        assert_eq!(v["findings"][0]["end"], 20);
        assert_eq!(v["findings"][0]["rule"], "password-assignment");
    }
}
