//! Policy files: loading, rule validation, examples, precedence, and the
//! worked examples of `policies/README.md` (read from the file itself).

use super::*;

fn ctx() -> ClassifyContext {
    ClassifyContext::default()
}

const MATRIX_DEFAULT: &str = "[tiers]\nsafe-read = \"allow\"\nwrite = \"ask\"\nnetwork = \"ask\"\ninstall = \"ask\"\ndestructive = \"deny\"\n";

fn with_rules(rules: &str) -> Result<Policy, PolicyError> {
    Policy::from_toml("test", &format!("{MATRIX_DEFAULT}\n{rules}"))
}

fn decide(p: &Policy, cmd: &str) -> (Tier, Decision, Option<String>) {
    let c = p.classify(cmd, &ctx());
    (c.tier, c.decision, c.rule)
}

#[test]
fn builtin_policies_load_with_their_examples() {
    for (name, _) in BUILTIN {
        let p = Policy::builtin(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(p.hash.len(), 64);
    }
    assert!(Policy::builtin("default").unwrap().example_count() > 0);
    assert!(Policy::builtin("ci").unwrap().example_count() > 0);
    assert!(Policy::builtin("nope").is_none());
}

#[test]
fn failing_examples_refuse_the_policy() {
    let err = with_rules(
        "[[rule]]\nid = \"r\"\nargv = [\"git\", \"push\"]\ndecision = \"ask\"\nexamples = { match = [\"git pull\"] }\n",
    )
    .unwrap_err();
    assert!(
        matches!(&err, PolicyError::Example { rule, .. } if rule == "r"),
        "{err}"
    );
    assert!(err.to_string().contains("git pull"), "{err}");
    let err = with_rules(
        "[[rule]]\nid = \"r\"\nprogram = \"git\"\ndecision = \"ask\"\nexamples = { no_match = [\"timeout 5 git status\"] }\n",
    )
    .unwrap_err();
    assert!(err.to_string().contains("should not match"), "{err}");
}

#[test]
fn invalid_rules_are_refused_with_the_reason() {
    let cases = [
        ("[[rule]]\nid = \"a\"\ndecision = \"allow\"\n", "matches nothing"),
        ("[[rule]]\nid = \"a\"\nprogram = \"x\"\ndecision = \"allow\"\n[[rule]]\nid = \"a\"\nprogram = \"y\"\ndecision = \"deny\"\n", "duplicate rule id"),
        ("[[rule]]\nid = \"a\"\npattern = \"(\"\ndecision = \"allow\"\n", "bad pattern"),
        ("[[rule]]\nid = \"a\"\npaths = [\"[\"]\ndecision = \"allow\"\n", "bad glob"),
        ("[[rule]]\nid = \"a\"\nprogram = \"x\"\ndecision = \"maybe\"\n", "decision"),
        ("[[rule]]\nid = \"a\"\nprogramme = \"x\"\ndecision = \"allow\"\n", "programme"),
        ("[[rule]]\nid = \"a\"\ntier = \"writes\"\ndecision = \"allow\"\n", "tier"),
    ];
    for (rules, want) in cases {
        let err = with_rules(rules).unwrap_err();
        assert!(matches!(err, PolicyError::Parse { .. }), "{rules}: {err}");
        assert!(
            err.to_string().contains(want),
            "{rules}: {err} (want {want:?})"
        );
    }
    assert!(Policy::from_toml("t", "[tiers]\nsafe-read = \"allow\"\n").is_err());
}

#[test]
fn deny_beats_ask_beats_allow_and_rule_is_reported() {
    let p = with_rules(
        r#"
[[rule]]
id = "allow-git"
program = "git"
decision = "allow"
[[rule]]
id = "ask-push"
argv = ["git", "push"]
decision = "ask"
[[rule]]
id = "deny-push-main"
pattern = '^git push \S+ main$'
decision = "deny"
justification = "main is protected"
"#,
    )
    .unwrap();
    assert_eq!(
        decide(&p, "git status"),
        (Tier::SafeRead, Decision::Allow, Some("allow-git".into()))
    );
    assert_eq!(
        decide(&p, "git commit -m x"),
        (Tier::Write, Decision::Allow, Some("allow-git".into()))
    );
    assert_eq!(
        decide(&p, "git push origin x"),
        (Tier::Network, Decision::Ask, Some("ask-push".into()))
    );
    let c = p.classify("git push origin main", &ctx());
    assert_eq!(
        (c.decision, c.rule.as_deref()),
        (Decision::Deny, Some("deny-push-main"))
    );
    assert_eq!(c.justification.as_deref(), Some("main is protected"));
    // The matrix decides parts no rule matches; the strictest part wins.
    assert_eq!(decide(&p, "git status && ls").1, Decision::Allow);
    assert_eq!(
        decide(&p, "git status && touch x"),
        (Tier::Write, Decision::Ask, None)
    );
    assert_eq!(
        decide(&p, "git status; rm x"),
        (Tier::Destructive, Decision::Deny, None)
    );
}

#[test]
fn rules_relax_destructive_parts_only_when_they_name_the_tier() {
    let p =
        with_rules("[[rule]]\nid = \"ask-push\"\nargv = [\"git\", \"push\"]\ndecision = \"ask\"\n")
            .unwrap();
    assert_eq!(decide(&p, "git push --force origin main").1, Decision::Deny);
    let p = with_rules(
        "[[rule]]\nid = \"rm-build\"\nargv = [\"rm\", \"-rf\", \"build\"]\ntier = \"destructive\"\ndecision = \"ask\"\n",
    )
    .unwrap();
    assert_eq!(
        decide(&p, "rm -rf build"),
        (Tier::Destructive, Decision::Ask, Some("rm-build".into()))
    );
    assert_eq!(decide(&p, "rm -rf src").1, Decision::Deny);
}

#[test]
fn unclassifiable_parts_are_never_allowed_by_a_rule() {
    let p = with_rules(
        "[[rule]]\nid = \"all\"\ntier = [\"safe-read\", \"write\"]\ndecision = \"allow\"\n",
    )
    .unwrap();
    assert_eq!(decide(&p, "touch x").1, Decision::Allow);
    for cmd in ["$c -rf x", "bash -c \"$S\"", "ls &&", "git log $OPTS"] {
        let c = p.classify(cmd, &ctx());
        assert_eq!(
            (c.tier, c.decision),
            (Tier::Write, Decision::Ask),
            "{cmd}: {:?}",
            c.reasons
        );
    }
}

#[test]
fn paths_and_hosts_need_all_for_allow_and_any_for_deny() {
    let p = with_rules(
        r#"
[[rule]]
id = "allow-docs"
paths = ["docs/**"]
decision = "allow"
[[rule]]
id = "allow-gh"
hosts = "*.github.com"
decision = "allow"
"#,
    )
    .unwrap();
    assert_eq!(decide(&p, "echo x > docs/a.md").1, Decision::Allow);
    assert_eq!(
        decide(&p, "cat a | tee docs/a.md src/b.rs").1,
        Decision::Ask
    );
    assert_eq!(
        decide(&p, "curl https://API.GitHub.com/x").1,
        Decision::Allow
    );
    assert_eq!(
        decide(&p, "curl https://api.github.com/x https://evil.example/y").1,
        Decision::Ask
    );
    assert_eq!(decide(&p, "git push origin main").1, Decision::Ask);
}

#[test]
fn workspace_context_makes_absolute_paths_inside() {
    let p = Policy::builtin("default").unwrap();
    let ctx = ClassifyContext {
        workspace: Some("/home/u/proj".into()),
        cwd: Some("sub".into()),
    };
    let c = p.classify("echo x > /home/u/proj/out.txt && touch ../top.txt", &ctx);
    assert_eq!(
        (c.tier, c.decision),
        (Tier::Write, Decision::Ask),
        "{:?}",
        c.reasons
    );
    assert_eq!(c.writes, vec!["out.txt".to_string(), "top.txt".to_string()]);
    let c = p.classify("touch ../../escape.txt", &ctx);
    assert_eq!(c.tier, Tier::Destructive, "{:?}", c.reasons);
    let c = p.classify("echo x > /home/u/other.txt", &ctx);
    assert_eq!(c.tier, Tier::Destructive);
}

#[test]
fn ci_policy_allows_lockfile_installs_and_known_hosts_only() {
    let ci = Policy::builtin("ci").unwrap();
    assert_eq!(decide(&ci, "npm ci").1, Decision::Allow);
    assert_eq!(decide(&ci, "cargo test && npm ci").1, Decision::Allow);
    assert_eq!(decide(&ci, "npm install lodash").1, Decision::Deny);
    assert_eq!(
        decide(
            &ci,
            "curl -fsSL https://github.com/o/r/archive/v1.tgz -o r.tgz"
        )
        .1,
        Decision::Allow
    );
    assert_eq!(
        decide(&ci, "curl https://evil.example.com").1,
        Decision::Deny
    );
    assert_eq!(decide(&ci, "git push origin main").1, Decision::Deny);
    assert_eq!(decide(&ci, "rm -rf target").1, Decision::Deny);
    assert_eq!(decide(&ci, "sed -i s/a/b/ src/lib.rs").1, Decision::Allow);
    let strict = Policy::builtin("strict").unwrap();
    assert_eq!(decide(&strict, "ls -la").1, Decision::Allow);
    assert_eq!(decide(&strict, "touch x").1, Decision::Deny);
}

#[test]
fn idempotent_rules_cover_every_part() {
    let p = Policy::builtin("default").unwrap();
    assert!(p.is_idempotent("cargo test --all", &ctx()));
    assert!(p.is_idempotent("timeout 600 cargo build && cargo test", &ctx()));
    assert!(!p.is_idempotent("cargo test && touch x", &ctx()));
    assert!(!p.is_idempotent("npm install", &ctx()));
    assert!(p
        .rule("idempotent-builds-and-tests")
        .is_some_and(|r| r.idempotent));
}

#[test]
fn default_denies_writes_into_dot_git() {
    let p = Policy::builtin("default").unwrap();
    let c = p.classify("echo id > .git/hooks/pre-commit", &ctx());
    assert_eq!(
        (c.decision, c.rule.as_deref()),
        (Decision::Deny, Some("deny-writes-into-dot-git"))
    );
}

/// Every ```toml block of policies/README.md with a `[tiers]` table (but
/// the field reference, which combines every criterion) is a complete policy: it must load (its examples run), and the worked examples
/// behave as the README says.
#[test]
fn readme_worked_examples_load_and_behave() {
    let readme = include_str!("../../../policies/README.md");
    let mut blocks = Vec::new();
    let mut rest = readme;
    while let Some(start) = rest.find("```toml\n") {
        let body = &rest[start + 8..];
        let end = body.find("```").expect("unterminated toml block");
        blocks.push(&body[..end]);
        rest = &body[end + 3..];
    }
    let policies: Vec<Policy> = blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| b.contains("[tiers]") && !b.contains("# required"))
        .map(|(i, b)| {
            Policy::from_toml(&format!("readme-{i}"), b)
                .unwrap_or_else(|e| panic!("README block {i}: {e}\n{b}"))
        })
        .collect();
    assert!(
        policies.len() >= 4,
        "found {} policies in README",
        policies.len()
    );
    let by_rule = |id: &str| {
        policies
            .iter()
            .find(|p| p.rule(id).is_some())
            .unwrap_or_else(|| panic!("no README policy with rule {id}"))
    };
    let p = by_rule("allow-cargo-test");
    assert_eq!(decide(p, "cargo test --all").1, Decision::Allow);
    assert_eq!(decide(p, "cargo test && cargo publish").1, Decision::Ask);
    assert_eq!(decide(p, "cargo test && rm -rf /").1, Decision::Deny);
    let p = by_rule("ask-git-push");
    assert_eq!(decide(p, "git push origin x").1, Decision::Ask);
    assert_eq!(decide(p, "git push --force origin x").1, Decision::Deny);
    assert_eq!(decide(p, "git fetch").1, Decision::Deny);
    let p = by_rule("deny-infra-writes");
    assert_eq!(decide(p, "echo x > infra/main.tf").1, Decision::Deny);
    assert_eq!(decide(p, "mv infra/a.tf infra/b.tf").1, Decision::Deny);
    assert_eq!(decide(p, "cat infra/main.tf").1, Decision::Allow);
    assert_eq!(decide(p, "echo x > src/main.rs").1, Decision::Ask);
    assert_eq!(decide(p, "echo x > \"$F\"").1, Decision::Ask);
    let p = by_rule("allow-github");
    assert_eq!(
        decide(p, "curl -O https://github.com/o/r/archive/v1.tgz").1,
        Decision::Allow
    );
    assert_eq!(decide(p, "wget https://example.com/x").1, Decision::Deny);
}

#[test]
fn json_has_the_interface_fields() {
    let p = Policy::builtin("default").unwrap();
    let c = p.classify("ls && rm -rf build", &ctx());
    let v: serde_json::Value = serde_json::to_value(&c).unwrap();
    for k in ["command", "tier", "decision", "rule", "reasons", "commands"] {
        assert!(v.get(k).is_some(), "missing {k} in {v}");
    }
    assert_eq!(v["tier"], "destructive");
    assert_eq!(v["decision"], "deny");
    assert!(v["rule"].is_null());
    assert_eq!(
        v["commands"][1]["argv"],
        serde_json::json!(["rm", "-rf", "build"])
    );
    assert_eq!(v["commands"][0]["tier"], "safe-read");
}

#[test]
fn install_guard_fills_intent_and_holds_back_risky_installs() {
    let p = Policy::builtin("default").unwrap();
    let c = p.classify("timeout 60 npm i lodash@4", &ctx());
    let intent = c.install.expect("install intent");
    assert_eq!(intent.manager, "npm");
    assert!(intent.packages.iter().any(|p| p.name == "lodash"));
    assert!(p.classify("ls -la", &ctx()).install.is_none());
    // A policy allowing the install tier still asks for what the guard always asks.
    let open = Policy::from_toml(
        "open",
        "[tiers]\nsafe-read = \"allow\"\nwrite = \"allow\"\nnetwork = \"allow\"\ninstall = \"allow\"\ndestructive = \"deny\"\n",
    )
    .unwrap();
    let c = open.classify("npx cowsay hi", &ctx());
    assert_eq!(
        (c.tier, c.decision),
        (Tier::Install, Decision::Ask),
        "{:?}",
        c.reasons
    );
    assert!(
        c.reasons.iter().any(|r| r.starts_with("install guard")),
        "{:?}",
        c.reasons
    );
    // [install] allow_lockfile_installs lets lockfile installs through a denying matrix.
    let locked = Policy::from_toml(
        "locked",
        "[tiers]\nsafe-read = \"allow\"\nwrite = \"allow\"\nnetwork = \"deny\"\ninstall = \"deny\"\ndestructive = \"deny\"\n[install]\nallow_lockfile_installs = true\n",
    )
    .unwrap();
    assert_eq!(locked.classify("npm ci", &ctx()).decision, Decision::Allow);
    assert_eq!(
        locked.classify("npm install left-pad", &ctx()).decision,
        Decision::Deny
    );
}

/// The reason shown for a decision is the deciding part's, not the first
/// part's: `touch q; rm -rf /` is denied for the `rm`, not the `touch`.
#[test]
fn the_deciding_part_gives_the_reason() {
    let p = with_rules("").unwrap();
    let c = p.classify("touch q; rm -rf /", &ctx());
    assert_eq!(c.decision, Decision::Deny);
    let r = c.deciding_reason().unwrap();
    assert!(r.contains("rm"), "{r}");
    let c = p.classify("mkdir d; curl https://example.com", &ctx());
    assert_eq!(c.tier, Tier::Network);
    assert!(
        c.deciding_reason().unwrap().contains("curl"),
        "{:?}",
        c.reasons
    );
}
