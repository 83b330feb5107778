//! Table-driven corpus tests: the shared labelled corpus
//! (`<repo>/../shared/corpus/commands.tsv`, read at test time), Warden's own
//! table (`corpus.tsv` beside this file), the Codex peer measurement
//! (`<repo>/../shared/peer/codex-command-safety.tsv`), fail-closed
//! invariants and a seeded random-input property test.

use std::path::PathBuf;

use super::*;

fn shared(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the shared test data {} ({e}): the `shared/` directory must sit beside \
             the repository checkout (<repo>/../shared), as it does on developer machines and in CI",
            path.display()
        )
    })
}

/// Decodes the corpus escapes `\n`, `\t`, `\r`, `\\` and `\uXXXX`.
fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.peek().copied() {
            Some('n') => {
                it.next();
                out.push('\n')
            }
            Some('t') => {
                it.next();
                out.push('\t')
            }
            Some('r') => {
                it.next();
                out.push('\r')
            }
            Some('\\') => {
                it.next();
                out.push('\\')
            }
            Some('u') => {
                it.next();
                let hex: String = (0..4).filter_map(|_| it.next()).collect();
                out.push(char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap());
            }
            _ => out.push('\\'),
        }
    }
    out
}

struct Row {
    expect: Vec<Tier>,
    command: String,
}

fn rows(text: &str, escapes: bool) -> Vec<Row> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (e, c) = l
                .split_once('\t')
                .unwrap_or_else(|| panic!("bad row {l:?}"));
            Row {
                expect: e
                    .split(',')
                    .map(|t| t.parse().unwrap_or_else(|m| panic!("{m} in row {l:?}")))
                    .collect(),
                command: if escapes { unescape(c) } else { c.to_string() },
            }
        })
        .collect()
}

/// Checks one table; returns the failures.
fn check(rows: &[Row], policy: &Policy) -> Vec<String> {
    let ctx = ClassifyContext::default();
    let mut bad = Vec::new();
    for r in rows {
        let c = policy.classify(&r.command, &ctx);
        let why = || {
            format!(
                "{:?} -> {} {} ({})",
                r.command,
                c.tier,
                c.decision,
                c.reasons.join("; ")
            )
        };
        if !r.expect.contains(&c.tier) {
            bad.push(format!("expected {:?}: {}", r.expect, why()));
        }
        if !r.expect.contains(&Tier::SafeRead)
            && (c.tier == Tier::SafeRead || c.decision == Decision::Allow)
        {
            bad.push(format!(
                "UNDER-CLASSIFIED (must not be safe-read/allowed): {}",
                why()
            ));
        }
        if r.expect == [Tier::Destructive] && c.decision != Decision::Deny {
            bad.push(format!("destructive must be denied: {}", why()));
        }
    }
    bad
}

fn own_table() -> Vec<Row> {
    rows(include_str!("corpus.tsv"), true)
}

#[test]
fn shared_corpus_every_row() {
    let rows = rows(&shared("corpus/commands.tsv"), false);
    assert!(
        rows.len() >= 100,
        "shared corpus has only {} rows",
        rows.len()
    );
    let bad = check(&rows, &Policy::builtin("default").unwrap());
    assert!(
        bad.is_empty(),
        "{} of {} shared rows fail:\n{}",
        bad.len(),
        rows.len(),
        bad.join("\n")
    );
}

#[test]
fn own_corpus_every_row() {
    let own = own_table();
    let shared_rows = rows(&shared("corpus/commands.tsv"), false).len();
    assert!(
        own.len() + shared_rows >= 300,
        "corpus has {} rows, want >= 300",
        own.len() + shared_rows
    );
    let bad = check(&own, &Policy::builtin("default").unwrap());
    assert!(
        bad.is_empty(),
        "{} of {} rows fail:\n{}",
        bad.len(),
        own.len(),
        bad.join("\n")
    );
}

#[test]
fn codex_peer_safe_ratio_and_dangerous_denied() {
    let text = shared("peer/codex-command-safety.tsv");
    let policy = Policy::builtin("default").unwrap();
    let ctx = ClassifyContext::default();
    let (mut safe, mut safe_ok, mut unsafe_n, mut unsafe_read) = (0, 0, 0, 0);
    let mut not_safe = Vec::new();
    let mut dangerous_bad = Vec::new();
    let mut dangerous = 0;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut cols = line.split('\t');
        let (Some(verdict), Some(cmd)) = (cols.next(), cols.next()) else {
            continue;
        };
        let cmd = unescape(cmd);
        let c = policy.classify(&cmd, &ctx);
        match verdict {
            "safe" => {
                safe += 1;
                if c.tier == Tier::SafeRead {
                    safe_ok += 1;
                } else {
                    not_safe.push(format!(
                        "  {cmd:?} -> {} ({})",
                        c.tier,
                        c.reasons.join("; ")
                    ));
                }
            }
            "unsafe" => {
                unsafe_n += 1;
                if c.tier == Tier::SafeRead {
                    unsafe_read += 1;
                }
            }
            "dangerous" => {
                dangerous += 1;
                if c.decision != Decision::Deny {
                    dangerous_bad.push(format!("  {cmd:?} -> {} {}", c.tier, c.decision));
                }
            }
            other => panic!("unknown verdict {other:?}"),
        }
    }
    println!(
        "codex peer: safe rows classified safe-read: {safe_ok}/{safe} = {:.3}",
        safe_ok as f64 / safe.max(1) as f64
    );
    println!(
        "codex peer: Codex `safe` rows Warden does not call safe-read:\n{}",
        not_safe.join("\n")
    );
    println!("codex peer: `unsafe` rows that Warden calls safe-read: {unsafe_read}/{unsafe_n}");
    println!(
        "codex peer: dangerous rows denied by default.toml: {}/{dangerous}",
        dangerous - dangerous_bad.len()
    );
    assert!(
        safe > 0 && dangerous > 0,
        "peer file has no safe or no dangerous rows"
    );
    assert!(
        dangerous_bad.is_empty(),
        "Codex dangerous rows not denied:\n{}",
        dangerous_bad.join("\n")
    );
}

/// Unclassifiable input: write, never allowed, even under ci.toml (write = allow).
#[test]
fn fail_closed_even_when_write_is_allowed() {
    let ci = Policy::builtin("ci").unwrap();
    let ctx = ClassifyContext::default();
    let deep = format!("{}ls{}", "(".repeat(200), ")".repeat(200));
    let many = vec!["true"; MAX_COMMANDS + 5].join("; ");
    let long = format!("echo {}", "a".repeat(MAX_INPUT_BYTES));
    let nested_c = (0..60).fold("ls".to_string(), |acc, _| format!("eval {}", acc));
    let cases: Vec<String> = vec![
        "$c -rf x".into(),
        "$'\\x72m' -rf x".into(),
        "touch${IFS}x".into(),
        "{rm,-rf,x}".into(),
        "ls &&".into(),
        "ls | | wc".into(),
        "ls\u{a0}-la".into(),
        "ls\u{2003}x".into(),
        "ls\u{1b}[2J".into(),
        "ls\r".into(),
        "echo 'unterminated".into(),
        "".into(),
        "   ".into(),
        "bash -c \"$S\"".into(),
        "r*m x".into(),
        // backquotes the grammar leaves as text, that bash runs
        "echo \"${x:-`touch y`}\"".into(),
        "echo ${x:-`touch y`}".into(),
        "read -r x < f; echo ${x@P}".into(),
        "cat <<EOF\n`touch y`\nEOF".into(),
        "cat <<-EOF\n\t`touch y`\n\tEOF".into(),
        deep,
        many,
        long,
        nested_c,
    ];
    for cmd in &cases {
        let c = ci.classify(cmd, &ctx);
        let shown: String = cmd.chars().take(60).collect();
        assert!(c.tier >= Tier::Write, "{shown:?} came out {}", c.tier);
        assert!(
            c.decision >= Decision::Ask,
            "{shown:?} was allowed under ci.toml: {:?}",
            c.reasons
        );
        assert!(
            c.reasons.iter().any(|r| r.contains("not classified")),
            "{shown:?}: no fail-closed reason in {:?}",
            c.reasons
        );
    }
}

/// A parse that fails must not hide a destructive part found elsewhere.
#[test]
fn parse_error_keeps_destructive_parts() {
    let p = Policy::builtin("default").unwrap();
    let c = p.classify("rm -rf / && ls &&", &ClassifyContext::default());
    assert_eq!((c.tier, c.decision), (Tier::Destructive, Decision::Deny));
}

/// Seeded random shell-ish inputs: no panic, valid results, fail-closed invariants.
#[test]
fn random_inputs_never_panic_and_fail_closed() {
    const FRAGS: &[&str] = &[
        "ls",
        "rm",
        "-rf",
        "x",
        " ",
        " ",
        " ",
        "|",
        "||",
        "&&",
        ";",
        "&",
        "(",
        ")",
        "{",
        "}",
        "'",
        "\"",
        "\\",
        "$",
        "$(",
        "`",
        "${",
        "}",
        ">",
        ">>",
        "<",
        "<<",
        "EOF",
        "\n",
        "2>&1",
        "=",
        "a=b",
        "git",
        "push",
        "--force",
        "-c",
        "bash",
        "sh",
        "eval",
        "find",
        "-delete",
        "-exec",
        ";",
        "+",
        "{}",
        "*",
        "?",
        "[",
        "]",
        "~",
        "sed",
        "-i",
        "s/a/b/w f",
        "awk",
        "system",
        "echo",
        "$'\\x41'",
        "\u{a0}",
        "\t",
        "#",
        "!",
        "if",
        "then",
        "fi",
        "do",
        "done",
        "for",
        "in",
        "case",
        "esac",
        ")",
        ";;",
        "<(",
        "env",
        "sudo",
        "timeout",
        "5",
        "xargs",
        "curl",
        "http://h/",
        "npm",
        "install",
        "/etc/x",
        "..",
        "/",
        "cat",
        "<<<",
        "-",
        "--",
    ];
    let default = Policy::builtin("default").unwrap();
    let ci = Policy::builtin("ci").unwrap();
    let ctx = ClassifyContext::default();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut parser = tree_sitter::Parser::new();
    parser
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .unwrap();
    for _ in 0..4000 {
        let n = (next() % 14) as usize;
        let mut s = String::new();
        for _ in 0..n {
            s.push_str(FRAGS[(next() % FRAGS.len() as u64) as usize]);
            if next() % 3 == 0 {
                s.push(' ');
            }
        }
        let c = default.classify(&s, &ctx);
        let c2 = default.classify(&s, &ctx);
        assert_eq!(c, c2, "not deterministic for {s:?}");
        let has_error = parser
            .parse(&s, None)
            .is_none_or(|t| t.root_node().has_error());
        if has_error || s.trim().is_empty() {
            assert!(
                c.tier >= Tier::Write && c.decision >= Decision::Ask,
                "{s:?}: parse error let through: {c:?}"
            );
            let cc = ci.classify(&s, &ctx);
            assert!(
                cc.decision >= Decision::Ask,
                "{s:?}: parse error allowed under ci.toml"
            );
        }
        if c.parts.iter().any(|p| p.tier > Tier::SafeRead) {
            assert!(
                c.decision > Decision::Allow,
                "{s:?}: a part above safe-read was allowed"
            );
        }
        assert!(
            c.parts.iter().all(|p| p.tier <= c.tier),
            "{s:?}: whole tier below a part"
        );
        serde_json::to_string(&c).unwrap();
    }
}
