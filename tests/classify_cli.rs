//! `warden classify` and `warden policy check` end to end, through the real
//! CLI binary (in process: no daemon).

use std::io::Write;
use std::process::{Command, Stdio};

fn warden(args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden-under-test"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run warden");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn single_command_json_fields_and_exit_codes() {
    let (code, out, err) = warden(
        &["classify", "--json", "--", "ls", "&&", "rm", "-rf", "build"],
        None,
    );
    assert_eq!(code, 2, "deny exits 2: {err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["command"], "ls && rm -rf build");
    assert_eq!(
        (v["tier"].as_str(), v["decision"].as_str()),
        (Some("destructive"), Some("deny"))
    );
    assert!(v["rule"].is_null() && v["reasons"].as_array().is_some_and(|r| !r.is_empty()));
    assert_eq!(v["commands"][0]["argv"], serde_json::json!(["ls"]));
    assert_eq!(v["commands"][1]["tier"], "destructive");
    assert_eq!(warden(&["classify", "--", "git", "status"], None).0, 0);
    assert_eq!(warden(&["classify", "--", "touch", "x"], None).0, 1);
    assert_eq!(
        warden(&["classify", "--policy", "ci", "--", "touch", "x"], None).0,
        0
    );
    assert_eq!(
        warden(
            &["classify", "--policy", "strict", "--", "touch", "x"],
            None
        )
        .0,
        2
    );
    let (code, _, err) = warden(
        &["classify", "--policy", "no-such-policy", "--", "ls"],
        None,
    );
    assert_eq!(code, 125);
    assert!(err.contains("no-such-policy"), "{err}");
    // A mistyped option is a usage error (125), never part of the command
    // (nor a "deny", which is 2).
    let (code, out, err) = warden(&["classify", "--polcy", "ci", "--", "ls"], None);
    assert_eq!(code, 125, "{out}");
    assert!(err.contains("--polcy"), "{err}");
}

#[test]
fn batch_prints_one_json_line_per_input_line_in_order() {
    let input =
        "ls -la\nnpm ci\n\n$c -rf x\nls &&\ncurl https://github.com/a\necho \u{a0}x\nrm -rf /\n";
    let (code, out, err) = warden(
        &["classify", "--policy", "ci", "--batch", "-", "--json"],
        Some(input),
    );
    assert_eq!(code, 0, "batch exits 0 whatever the decisions: {err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let inputs: Vec<&str> = input.lines().collect();
    assert_eq!(lines.len(), inputs.len());
    for (v, i) in lines.iter().zip(&inputs) {
        assert_eq!(v["command"], *i);
    }
    let decisions: Vec<&str> = lines
        .iter()
        .map(|v| v["decision"].as_str().unwrap())
        .collect();
    assert_eq!(
        decisions,
        ["allow", "allow", "ask", "ask", "ask", "allow", "ask", "deny"]
    );
    assert_eq!(lines[1]["rule"], "allow-lockfile-installs");
}

#[test]
fn batch_reads_a_file_and_refuses_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("cmds.txt");
    std::fs::write(&f, "git status\ngit push --force\n").unwrap();
    let (code, out, _) = warden(
        &["classify", "--batch", f.to_str().unwrap(), "--json"],
        None,
    );
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 2);
    let (code, _, err) = warden(&["classify", "--batch", "/no/such/file", "--json"], None);
    assert_eq!(code, 125);
    assert!(err.contains("/no/such/file"), "{err}");
}

#[test]
fn policy_check_validates_and_runs_examples() {
    let (code, out, err) = warden(&["policy", "check", "ci"], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("valid") && out.contains("examples passed"),
        "{out}"
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[tiers]\nsafe-read = \"allow\"\nwrite = \"ask\"\nnetwork = \"ask\"\ninstall = \"ask\"\ndestructive = \"deny\"\n\
         [[rule]]\nid = \"push\"\nargv = [\"git\", \"push\"]\ndecision = \"ask\"\nexamples = { match = [\"git pull\"] }\n",
    )
    .unwrap();
    let (code, _, err) = warden(&["policy", "check", bad.to_str().unwrap()], None);
    assert_eq!(code, 1);
    assert!(
        err.contains("rule push") && err.contains("git pull"),
        "{err}"
    );
    let typo = dir.path().join("typo.toml");
    std::fs::write(&typo, "[tiers]\nsafe-read = \"allow\"\nwrite = \"ask\"\nnetwork = \"ask\"\ninstall = \"ask\"\ndestructive = \"nope\"\n").unwrap();
    let (code, _, err) = warden(&["policy", "check", typo.to_str().unwrap()], None);
    assert_eq!(code, 1);
    assert!(err.contains("nope"), "{err}");
}
