//! `warden doctor` end to end: the capability report and the escape battery
//! run inside the live sandbox by the real CLI binary.

use std::process::Command;

fn doctor(args: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_warden-under-test"))
        .arg("doctor")
        .args(args)
        .arg("--json")
        .output()
        .expect("run warden doctor");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

fn require() -> bool {
    std::env::var("WARDEN_REQUIRE_SANDBOX").as_deref() == Ok("1")
}

fn check<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["report"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("check {name} missing: {v}"))
}

#[test]
fn doctor_reports_every_mechanism_and_exit_code_follows_requirements() {
    let (code, v) = doctor(&[]);
    for name in [
        "user_namespaces",
        "namespaces",
        "seccomp",
        "landlock",
        "idmapped_mounts",
        "cgroup_v2_delegation",
        "overlayfs_in_userns",
        "sandbox_spawn",
    ] {
        let c = check(&v, name);
        assert!(c["ok"].is_boolean() && c["detail"].is_string(), "{c}");
    }
    let missing: Vec<_> = v["report"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["required"] == true && c["ok"] == false)
        .collect();
    assert_eq!(
        code == 0,
        missing.is_empty(),
        "exit {code} vs missing {missing:?}"
    );
    if require() {
        assert_eq!(
            code, 0,
            "WARDEN_REQUIRE_SANDBOX=1 and doctor found gaps: {missing:?}"
        );
    }
    assert!(v["report"]["landlock_pinned_abi"].as_i64().unwrap() >= 6);
}

#[test]
fn doctor_attack_battery_is_blocked_in_the_live_sandbox() {
    let (code, v) = doctor(&["--attacks"]);
    if check(&v, "sandbox_spawn")["ok"] != true {
        assert!(!require(), "sandbox unavailable: {v}");
        eprintln!("skipped: no sandbox here");
        return;
    }
    let attacks = v["attacks"].as_array().unwrap();
    assert!(attacks.len() >= 15, "{v}");
    for a in attacks {
        assert_eq!(a["blocked"], true, "attack not blocked: {a}");
        assert!(a["detail"].as_str().unwrap().starts_with("blocked:"), "{a}");
    }
    assert_eq!(code, 0);
}

#[test]
fn doctor_refuses_an_unknown_policy() {
    let out = Command::new(env!("CARGO_BIN_EXE_warden-under-test"))
        .args(["doctor", "--policy", "no-such-policy"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-policy"));
}
