//! The sandbox's policy-driven guarantees, end to end through a real
//! `wardend` and the `warden` CLI (issue #3): credential files stay masked in
//! every bound tree, a full-Landlock requirement refuses rather than runs
//! weaker (and every execution records its enforcement), nested git
//! repositories a command plants are defused, cgroup limits are applied or
//! clearly refused, and install-tier package caches are per session.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use warden_tests::{exec_ends, require_sandbox, workspace, Daemon};

/// Starts `wardend` with extra environment variables and arguments, on its
/// own socket and state dir; panics with its log if it does not come up.
fn daemon(env: &[(&str, &str)], args: &[&str]) -> Daemon {
    let mut d = daemon_unstarted(args);
    let log = std::fs::File::create(&d.log).expect("log");
    let mut c = d.command();
    c.envs(env.iter().copied());
    d.child = Some(
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn wardend"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(&d.socket).is_err() {
        if let Some(st) = d.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            panic!("wardend exited early ({st}): {}", d.log());
        }
        assert!(
            Instant::now() < deadline,
            "wardend did not come up: {}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    d
}

fn daemon_unstarted(args: &[&str]) -> Daemon {
    let dir = tempfile::Builder::new()
        .prefix("wd-")
        .tempdir_in("/tmp")
        .expect("tempdir");
    Daemon {
        socket: dir.path().join("run/wardend.sock"),
        state_dir: dir.path().join("state"),
        child: None,
        extra_args: args.iter().map(|s| s.to_string()).collect(),
        log: dir.path().join("wardend.log"),
        dir,
    }
}

/// A policy file that allows every tier but destructive, plus `extra` TOML.
fn policy(dir: &Path, extra: &str) -> PathBuf {
    let p = dir.join(format!("policy-{}.toml", blake3::hash(extra.as_bytes())));
    std::fs::write(
        &p,
        format!(
            "description = \"sandbox policy test\"\n[tiers]\nsafe-read = \"allow\"\nwrite = \"allow\"\nnetwork = \"allow\"\ninstall = \"allow\"\ndestructive = \"deny\"\n{extra}"
        ),
    )
    .unwrap();
    p
}

/// `warden exec --json --workspace WS --policy FILE -- CMD`.
fn exec(d: &Daemon, ws: &Path, policy: &Path, cmd: &str) -> Output {
    d.warden()
        .args(["exec", "--json", "--workspace"])
        .arg(ws)
        .arg("--policy")
        .arg(policy)
        .args(["--", cmd])
        .output()
        .expect("run warden exec")
}

/// The JSON events of a `--json` exec.
fn events(o: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn event<'a>(evs: &'a [serde_json::Value], kind: &str) -> Option<&'a serde_json::Value> {
    evs.iter().find(|e| e["event"] == kind)
}

/// The command's standard output, concatenated from the stdout events.
fn stdout_of(evs: &[serde_json::Value]) -> String {
    evs.iter()
        .filter(|e| e["event"] == "stdout")
        .filter_map(|e| e["data"].as_str())
        .collect()
}

fn stderr_of(evs: &[serde_json::Value]) -> String {
    evs.iter()
        .filter(|e| e["event"] == "stderr")
        .filter_map(|e| e["data"].as_str())
        .collect()
}

/// The `exec_end` audit records, oldest first.
fn write(p: &Path, content: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
    use std::os::unix::fs::PermissionsExt;
    // World-readable: only the mask, never permissions, may hide it.
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
}

/// Registry tokens and other credentials inside trees the sandbox binds
/// read-only (toolchains under the daemon's home, a whole cargo home or
/// `~/.config` listed in `read_only_paths`, an SDK tree, a cargo home
/// elsewhere) are never readable by a command — the "exfiltrate
/// ~/.cargo/credentials.toml / ~/.npmrc" step of registry-token theft (as in
/// the 2022 PyPI/npm token-stealing packages). The trees themselves stay
/// readable, so the test fails if the binds were simply missing.
#[test]
fn credential_files_in_bound_trees_are_never_visible() {
    let t = tempfile::Builder::new()
        .prefix("wd-cred-")
        .tempdir_in("/tmp")
        .unwrap();
    let t = t.path();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(t, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = t.join("home");
    let secrets = [
        // Under toolchain dirs the sandbox binds by default.
        "home/.cargo/bin/credentials.toml",
        "home/.pyenv/.netrc",
        "home/.pyenv/.pypirc",
        // Under a whole cargo home / ~/.config bound by the policy.
        "home/.cargo/credentials",
        "home/.cargo/credentials.toml",
        "home/.config/gh/hosts.yml",
        // An SDK tree with dotfiles, bound by the policy.
        "sdk/.npmrc",
        "sdk/.netrc",
        "sdk/.git-credentials",
        "sdk/.docker/config.json",
        "sdk/.pypirc",
        // A cargo home elsewhere (the daemon's CARGO_HOME).
        "cargo-home/credentials.toml",
        // In the home itself (never bound: the home is a private tmpfs).
        "home/.npmrc",
        "home/.git-credentials",
    ];
    for s in secrets {
        write(&t.join(s), &format!("cred-marker {s}\n"));
    }
    write(&t.join("home/.cargo/bin/tool"), "visible-tool\n");
    write(&t.join("home/.cargo/config.toml"), "visible-config\n");
    write(&t.join("home/.pyenv/version"), "visible-pyenv\n");
    write(&t.join("home/.config/gh/config.yml"), "gh-config\n");
    write(&t.join("sdk/README"), "visible-sdk\n");
    write(&t.join("cargo-home/bin/cargo-x"), "visible-cargo-home\n");
    for d in [
        "home",
        "home/.cargo",
        "home/.config",
        "home/.config/gh",
        "home/.docker",
    ] {
        let _ = std::fs::create_dir_all(t.join(d));
        std::fs::set_permissions(t.join(d), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let cargo_home = t.join("cargo-home");
    let d = daemon(
        &[
            ("HOME", home.to_str().unwrap()),
            ("CARGO_HOME", cargo_home.to_str().unwrap()),
        ],
        &[],
    );
    let pol = policy(
        d.dir.path(),
        &format!(
            "[sandbox]\nread_only_paths = [{:?}, {:?}, {:?}, {:?}]\n",
            t.join("home/.cargo").display().to_string(),
            t.join("home/.config").display().to_string(),
            t.join("sdk").display().to_string(),
            cargo_home.display().to_string(),
        ),
    );
    let ws = workspace();
    let mut script = String::new();
    for s in secrets {
        script.push_str(&format!("cat {} 2>/dev/null; ", t.join(s).display()));
    }
    for v in [
        "home/.cargo/bin/tool",
        "home/.cargo/config.toml",
        "home/.pyenv/version",
        "sdk/README",
        "cargo-home/bin/cargo-x",
    ] {
        script.push_str(&format!("cat {}; ", t.join(v).display()));
    }
    script.push_str(&format!(
        "ls -A {} {} 2>&1; true",
        t.join("home/.config/gh").display(),
        t.join("sdk/.docker").display()
    ));
    let o = exec(&d, ws.path(), &pol, &script);
    let evs = events(&o);
    let out = stdout_of(&evs);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", stderr_of(&evs));
    assert!(!out.contains("cred-marker"), "a credential leaked:\n{out}");
    assert!(
        !out.contains("hosts.yml"),
        "gh's token dir is listed:\n{out}"
    );
    for v in [
        "visible-tool",
        "visible-config",
        "visible-pyenv",
        "visible-sdk",
        "visible-cargo-home",
    ] {
        assert!(
            out.contains(v),
            "{v} not readable: the bind is missing\n{out}"
        );
    }
}

/// A policy that requires full Landlock enforcement refuses to run a
/// command (exit 126, a message naming Landlock, nothing written) when only
/// partial enforcement is possible — here a kernel limited to Landlock ABI 3
/// by `WARDEN_LANDLOCK_ABI_CAP`, under which the ruleset really handles only
/// ABI-3 rights. Without the requirement the command runs and is recorded
/// `partial`; on the real kernel it is `full`. Each execution's enforcement
/// is in its started event and its `exec_end` audit record. A daemon whose
/// own policy requires full enforcement does not start on such a kernel.
#[test]
fn full_landlock_requirement_refuses_rather_than_running_weaker() {
    let kernel_abi = warden_daemon::sandbox::landlock_kernel_abi();
    let pinned = warden_daemon::sandbox::LANDLOCK_ABI as i64;
    if kernel_abi < pinned {
        assert!(
            !require_sandbox(),
            "WARDEN_REQUIRE_SANDBOX=1 but the kernel's Landlock ABI is {kernel_abi} < {pinned}"
        );
        eprintln!("skipped: Landlock ABI {kernel_abi} < {pinned}");
        return;
    }
    let ws = workspace();
    // The real kernel: full.
    let d = daemon(&[], &[]);
    let strict = policy(d.dir.path(), "[sandbox]\nrequire_full_landlock = true\n");
    let o = exec(&d, ws.path(), &strict, "echo ran > full.txt");
    let evs = events(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(event(&evs, "started").unwrap()["landlock"], "full");
    assert!(ws.path().join("full.txt").exists());
    assert_eq!(exec_ends(&d).last().unwrap()["detail"]["landlock"], "full");
    drop(d);

    // A kernel that only knows ABI 3.
    let d = daemon(&[("WARDEN_LANDLOCK_ABI_CAP", "3")], &[]);
    let strict = policy(d.dir.path(), "[sandbox]\nrequire_full_landlock = true\n");
    let lax = policy(d.dir.path(), "[sandbox]\nrequire_full_landlock = false\n");
    let o = exec(&d, ws.path(), &strict, "echo ran > weak.txt");
    let evs = events(&o);
    assert_eq!(o.status.code(), Some(126), "{evs:?}");
    let exit = event(&evs, "exit").unwrap();
    assert_eq!(exit["refused"], true);
    let why = exit["refusal"].as_str().unwrap();
    assert!(
        why.contains("full Landlock") && why.contains("partial"),
        "{why}"
    );
    assert!(event(&evs, "started").is_none(), "{evs:?}");
    assert!(!ws.path().join("weak.txt").exists(), "the command ran");
    let end = exec_ends(&d);
    let end = &end.last().unwrap()["detail"];
    assert!(end["landlock"].is_null(), "{end}");
    assert!(end["refusal"].as_str().unwrap().contains("full Landlock"));

    let o = exec(&d, ws.path(), &lax, "echo ran > weak.txt");
    let evs = events(&o);
    assert_eq!(o.status.code(), Some(0), "{evs:?}");
    assert_eq!(event(&evs, "started").unwrap()["landlock"], "partial");
    assert!(ws.path().join("weak.txt").exists());
    assert_eq!(
        exec_ends(&d).last().unwrap()["detail"]["landlock"],
        "partial"
    );
    // ABI 0: as without Landlock.
    drop(d);
    let d = daemon(&[("WARDEN_LANDLOCK_ABI_CAP", "0")], &[]);
    let lax = policy(d.dir.path(), "");
    let o = exec(&d, ws.path(), &lax, "true");
    assert_eq!(event(&events(&o), "started").unwrap()["landlock"], "none");
    drop(d);

    // The daemon's own policy requires it: refuse to start, with the reason.
    let mut d = daemon_unstarted(&[]);
    let strict = policy(d.dir.path(), "[sandbox]\nrequire_full_landlock = true\n");
    d.extra_args = vec!["--policy".into(), strict.display().to_string()];
    let o = d
        .command()
        .env("WARDEN_LANDLOCK_ABI_CAP", "3")
        .stdin(Stdio::null())
        .output()
        .expect("run wardend");
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "wardend started: {log}");
    assert!(log.contains("full Landlock"), "{log}");
}

/// A write-tier command plants a nested repository whose hooks and config
/// run code on the user's next `git` there (core.fsmonitor, a pre-commit
/// hook, a gitfile pointing at an attacker-made git dir — the "malicious
/// nested repository" class of CVE-2024-32002). The daemon quarantines
/// each planted control path after the command (renamed `*.warden-blocked`,
/// reported on stderr and in the `exec_end` audit record), so the user's
/// own `git status` / `git commit` there runs nothing; a nested repository
/// made the ordinary way (`git init`, `git config user.name`) is untouched.
/// A checkpoint is taken after a command and before its quarantine, so it
/// holds the planted hook: rolling back to it must not bring the hook back
/// live (the rollback is a writer like any other; red-team finding).
#[test]
fn rollback_does_not_restore_a_quarantined_nested_hook() {
    let d = daemon(&[], &[]);
    let pol = policy(d.dir.path(), "");
    let ws = workspace();
    let w = ws.path();
    let host = tempfile::Builder::new()
        .prefix("wd-rb-")
        .tempdir_in("/tmp")
        .unwrap();
    let pwned = host.path().join("pwned");
    let o = exec(&d, w, &pol, "git init -q sub && echo ok");
    assert_eq!(o.status.code(), Some(0), "{:?}", events(&o));
    let plant = format!(
        "printf '#!/bin/sh\\ntouch {}\\n' > sub/.git/hooks/post-checkout && chmod 755 sub/.git/hooks/post-checkout && echo planted",
        pwned.display()
    );
    let o = exec(&d, w, &pol, &plant);
    let evs = events(&o);
    assert!(stderr_of(&evs).contains("quarantined"), "{evs:?}");
    let post = evs
        .iter()
        .find(|e| e["event"] == "checkpoint" && e["kind"] == "post")
        .and_then(|e| e["id"].as_str())
        .expect("post checkpoint")
        .to_string();
    // Writing the path again (quarantined again) puts it into a later
    // change set, which is what a rollback restores.
    let o = exec(&d, w, &pol, "echo harmless > sub/.git/hooks/post-checkout");
    assert!(stderr_of(&events(&o)).contains("quarantined"));
    let o = exec(&d, w, &pol, "echo step > notes.txt");
    assert_eq!(o.status.code(), Some(0), "{:?}", events(&o));
    let rb = d
        .warden()
        .args(["rollback", &post, "--json"])
        .output()
        .unwrap();
    let out =
        String::from_utf8_lossy(&rb.stdout).to_string() + &String::from_utf8_lossy(&rb.stderr);
    assert!(rb.status.success(), "{out}");
    assert!(out.contains("quarantined"), "{out}");
    assert!(!w.join("sub/.git/hooks/post-checkout").exists(), "{out}");
    assert!(
        w.join("notes.txt").exists() == false,
        "the rollback itself happened: {out}"
    );
    let g = std::process::Command::new("git")
        .arg("-C")
        .arg(w.join("sub"))
        .args(["-c", "safe.directory=*", "checkout", "-q", "-b", "x"])
        .output()
        .unwrap();
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    assert!(!pwned.exists(), "the planted hook ran on the host");
}

#[test]
fn nested_git_hooks_and_config_planted_by_a_command_are_quarantined() {
    let d = daemon(&[], &[]);
    let pol = policy(d.dir.path(), "");
    let ws = workspace();
    let host = tempfile::Builder::new()
        .prefix("wd-nested-")
        .tempdir_in("/tmp")
        .unwrap();
    let pwned = host.path().join("pwned");
    let script = format!(
        r#"set -e
        git init -q evil && git init -q clean && git init -q other
        printf '#!/bin/sh\ntouch {p}.hook\n' > evil/.git/hooks/pre-commit
        chmod +x evil/.git/hooks/pre-commit
        git -C evil config core.fsmonitor 'touch {p}.fsmonitor; false'
        git -C clean config user.name agent
        git -C clean config user.email agent@example.com
        mkdir -p gitfile evilgit/hooks
        cp -r other/.git/. evilgit/
        printf '#!/bin/sh\ntouch {p}.gitfile\n' > evilgit/hooks/pre-commit
        chmod +x evilgit/hooks/pre-commit
        echo 'gitdir: ../evilgit' > gitfile/.git
        echo planted"#,
        p = pwned.display()
    );
    let o = exec(&d, ws.path(), &pol, &script);
    let evs = events(&o);
    assert_eq!(o.status.code(), Some(0), "{evs:?}");
    assert!(stdout_of(&evs).contains("planted"));
    let err = stderr_of(&evs);
    assert!(err.contains("quarantined"), "{err}");
    let w = ws.path();
    assert!(!w.join("evil/.git/hooks/pre-commit").exists());
    assert!(w.join("evil/.git/hooks/pre-commit.warden-blocked").exists());
    assert!(!w.join("evil/.git/config").exists());
    assert!(!w.join("gitfile/.git").exists());
    // The ordinary nested repositories keep their config and samples.
    assert!(w.join("clean/.git/config").exists());
    assert!(w.join("clean/.git/hooks/pre-commit.sample").exists());
    let end = exec_ends(&d);
    let q = end.last().unwrap()["detail"]["nested_git_quarantined"].clone();
    let mut q: Vec<String> = serde_json::from_value(q).unwrap();
    q.sort();
    // `evilgit/` is a git dir of its own (HEAD, objects, refs): git run
    // inside it would run its hook, so that is quarantined too; its
    // config (copied from `git init`) is inert and stays.
    assert_eq!(
        q,
        [
            "evil/.git/config",
            "evil/.git/hooks/pre-commit",
            "evilgit/hooks/pre-commit",
            "gitfile/.git"
        ]
    );
    // The user's own git in those directories runs nothing planted.
    for dir in ["evil", "gitfile", "clean"] {
        let dir = w.join(dir);
        std::fs::write(dir.join("f"), "x").unwrap();
        let g = |args: &[&str]| {
            std::process::Command::new("git")
                .arg("-C")
                .arg(&dir)
                .args(["-c", "user.name=u", "-c", "user.email=u@e"])
                .args(args)
                .output()
                .unwrap()
        };
        g(&["status"]);
        g(&["add", "f"]);
        g(&["commit", "-qm", "x"]);
    }
    for what in ["hook", "fsmonitor", "gitfile"] {
        let m = PathBuf::from(format!("{}.{what}", pwned.display()));
        assert!(!m.exists(), "planted {what} ran on the host");
    }
}

/// The workspace repository's `core.hooksPath` names a directory inside
/// the workspace (`.githooks`): it is protected like `.git/hooks`. A
/// command cannot change an existing hook there nor add one (read-only in
/// the sandbox), and one it creates while the directory is absent is
/// removed after it; the user's own `git commit` then runs no payload.
#[test]
fn hooks_path_directory_of_the_workspace_repository_is_protected() {
    let d = daemon(&[], &[]);
    let pol = policy(d.dir.path(), "");
    let ws = workspace();
    let w = ws.path();
    let host = tempfile::Builder::new()
        .prefix("wd-hookspath-")
        .tempdir_in("/tmp")
        .unwrap();
    let pwned = host.path().join("pwned");
    let user_git = |args: &[&str]| {
        let o = std::process::Command::new("git")
            .arg("-C")
            .arg(w)
            .args(["-c", "user.name=u", "-c", "user.email=u@e"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    user_git(&["init", "-q"]);
    user_git(&["config", "core.hooksPath", ".githooks"]);
    write(&w.join(".githooks/pre-commit"), "#!/bin/sh\nexit 0\n");
    let plant = format!(
        "mkdir -p .githooks && printf '#!/bin/sh\\ntouch {p}\\n' > .githooks/pre-commit; \
         printf '#!/bin/sh\\ntouch {p}\\n' > .githooks/commit-msg; \
         chmod +x .githooks/*; cat .githooks/pre-commit; echo ran",
        p = pwned.display()
    );
    // Existing directory: read-only, nothing changes.
    let o = exec(&d, w, &pol, &plant);
    let evs = events(&o);
    assert!(stdout_of(&evs).contains("ran"), "{evs:?}");
    assert_eq!(
        std::fs::read_to_string(w.join(".githooks/pre-commit")).unwrap(),
        "#!/bin/sh\nexit 0\n"
    );
    assert!(!w.join(".githooks/commit-msg").exists());
    // Absent directory: what the command creates there is removed.
    std::fs::remove_dir_all(w.join(".githooks")).unwrap();
    let o = exec(&d, w, &pol, &plant);
    let evs = events(&o);
    assert!(stdout_of(&evs).contains("ran"), "{evs:?}");
    assert!(stderr_of(&evs).contains(".githooks"), "{evs:?}");
    assert!(!w.join(".githooks").exists());
    // The user's own commit runs nothing planted.
    std::fs::write(w.join("f"), "x").unwrap();
    user_git(&["add", "f"]);
    user_git(&["commit", "-qm", "x"]);
    assert!(!pwned.exists(), "a planted hook ran on the host");
}

/// `warden doctor --json --policy FILE`: (exit code, the
/// `cgroup_v2_delegation` check).
fn doctor_cgroup(pol: &Path) -> (i32, serde_json::Value) {
    let o = std::process::Command::new(warden_tests::warden_bin())
        .args(["doctor", "--json", "--policy"])
        .arg(pol)
        .stdin(Stdio::null())
        .output()
        .expect("run warden doctor");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor printed no JSON ({e}): {}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    let c = v["report"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "cgroup_v2_delegation")
        .expect("a cgroup_v2_delegation check")
        .clone();
    (o.status.code().unwrap_or(-1), c)
}

/// cgroup v2 limits from the policy (`cgroup_memory_max_bytes`,
/// `cgroup_pids_max`). Where `warden doctor` reports a delegated cgroup, a
/// memory bomb is OOM-killed by `memory.max` (far below its `RLIMIT_DATA`)
/// and reported, and a fork bomb is stopped by `pids.max` (far below its
/// `RLIMIT_NPROC`) and reported. Where there is none (this CI host's cgroups
/// are hybrid: memory and pids belong to cgroup v1), doctor marks the check
/// required and failed, and a command under that policy is refused with the
/// reason — never run without the limits. No shipped policy sets them, so a
/// host without delegation is not a failure even under
/// `WARDEN_REQUIRE_SANDBOX=1`; a host that claims delegation and does not
/// enforce it is.
#[test]
fn cgroup_limits_are_enforced_or_clearly_refused() {
    let d = daemon(&[], &[]);
    let pol = policy(
        d.dir.path(),
        &format!(
            "[sandbox.limits]\ncgroup_memory_max_bytes = {}\ncgroup_pids_max = 32\n",
            64u64 << 20
        ),
    );
    let (code, check) = doctor_cgroup(&pol);
    assert_eq!(check["required"], true, "{check}");
    let ws = workspace();
    if check["ok"] != true {
        assert_ne!(
            code, 0,
            "doctor must fail a policy it cannot honour: {check}"
        );
        let o = exec(&d, ws.path(), &pol, "echo ran > ran.txt");
        let evs = events(&o);
        assert_eq!(o.status.code(), Some(126), "{evs:?}");
        let exit = event(&evs, "exit").unwrap();
        let why = exit["refusal"].as_str().unwrap();
        assert!(
            why.contains("cgroup limits") && why.contains("no delegated cgroup v2"),
            "{why}"
        );
        assert!(!ws.path().join("ran.txt").exists(), "the command ran");
        eprintln!(
            "no cgroup delegation here ({}): refusal checked",
            check["detail"]
        );
        return;
    }
    // Delegated: 256 MiB in one process is far below RLIMIT_DATA (8 GiB)
    // but four times memory.max.
    let o = exec(
        &d,
        ws.path(),
        &pol,
        "python3 -c 'b = bytearray(256 << 20); b[::4096] = b\"x\" * len(b[::4096]); print(\"survived\")'",
    );
    let evs = events(&o);
    assert!(!stdout_of(&evs).contains("survived"), "{evs:?}");
    assert_eq!(o.status.code(), Some(128 + 9), "{evs:?}");
    assert!(
        stderr_of(&evs).contains("cgroup memory limit"),
        "{}",
        stderr_of(&evs)
    );
    let end = exec_ends(&d);
    assert!(
        end.last().unwrap()["detail"]["cgroup_oom_kills"]
            .as_u64()
            .unwrap()
            >= 1
    );
    // 200 sleeping children wanted, RLIMIT_NPROC is 1024, pids.max is 32.
    let o = exec(
        &d,
        ws.path(),
        &pol,
        "python3 -c '
import os, time
n = 0
try:
    while n < 200:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as e:
    print(\"stopped at\", n, e)
'",
    );
    let evs = events(&o);
    let out = stdout_of(&evs);
    let n: u64 = out
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the fork bomb was not stopped: {out}"));
    assert!(n < 32, "{out}");
    assert!(
        stderr_of(&evs).contains("cgroup process limit"),
        "{}",
        stderr_of(&evs)
    );
    let end = exec_ends(&d);
    assert!(
        end.last().unwrap()["detail"]["cgroup_pids_max_hits"]
            .as_u64()
            .unwrap()
            >= 1
    );
}

/// Install-tier commands get a per-session package cache: pip's (and npm's,
/// Go's, XDG's) cache dir points into the session's own directory, outside
/// the workspace and the daemon's state, writable by the command and kept
/// across the session's commands; another session sees none of it, the
/// host's own pip cache is neither used nor visible, and the directory is
/// removed when the session closes. Other tiers get no cache dir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_tier_gets_a_per_session_package_cache() {
    let d = daemon(&[], &[]);
    let pol = policy(d.dir.path(), "");
    let ws = workspace();
    let host_cache = std::env::var("HOME")
        .map(PathBuf::from)
        .unwrap()
        .join(".cache/pip");
    {
        let c = d.client().await;
        let s1 = warden_tests::session(&c, ws.path(), pol.to_str().unwrap()).await;
        let s2 = warden_tests::session(&c, ws.path(), pol.to_str().unwrap()).await;
        let run = |sid: &str, cmd: &str| {
            let req = warden_tests::pb::ExecRequest {
                session_id: sid.into(),
                command: cmd.into(),
                ..Default::default()
            };
            let c = &c;
            async move { warden_tests::exec(c, req).await.expect("exec") }
        };
        // `pip install --help` makes the command install tier.
        let probe = format!(
            "pip install --help >/dev/null 2>&1; python3 -m pip cache dir 2>/dev/null || echo \"$PIP_CACHE_DIR\"; \
             cat \"$PIP_CACHE_DIR/planted\" 2>/dev/null; mkdir -p \"$PIP_CACHE_DIR\" && echo \"s=$1\" > \"$PIP_CACHE_DIR/planted\" \
             && echo wrote; ls {} >/dev/null 2>&1 && echo HOSTCACHE; echo \"npm=$npm_config_cache\"",
            host_cache.display()
        );
        let r = run(&s1, &format!("set -- one; {probe}")).await;
        let out = r.stdout_str();
        assert_eq!(r.exit().code, 0, "{out}\n{}", r.stderr_str());
        let dir = out.lines().next().unwrap_or_default().trim().to_string();
        let expect = warden_daemon::session::exec::session_caches_root().join(&s1);
        assert!(
            dir.starts_with(&expect.display().to_string()),
            "pip's cache dir {dir:?} is not the session's {}",
            expect.display()
        );
        assert!(!dir.starts_with(&host_cache.display().to_string()));
        assert!(out.contains("wrote"), "{out}\n{}", r.stderr_str());
        assert!(
            !out.contains("HOSTCACHE"),
            "the host's pip cache is visible"
        );
        assert!(
            out.contains(&format!("npm={}/npm", expect.display())),
            "{out}"
        );
        assert!(expect.join("pip/planted").exists());
        // Kept across the session's commands; invisible to another session.
        let r = run(&s1, &format!("set -- again; {probe}")).await;
        assert!(r.stdout_str().contains("s=one"), "{}", r.stdout_str());
        let r = run(&s2, &format!("set -- two; {probe}")).await;
        assert!(!r.stdout_str().contains("s=one"), "{}", r.stdout_str());
        // A write-tier command has no cache dir of the session.
        let r = run(
            &s1,
            "echo \"pip=$PIP_CACHE_DIR\"; ls -d $HOME/.cache/warden 2>&1 || true",
        )
        .await;
        assert!(r.stdout_str().contains("pip=\n"), "{}", r.stdout_str());
        c.close_session(&s1).await.unwrap();
        assert!(!expect.exists(), "the session's cache outlived it");
        c.close_session(&s2).await.unwrap();
    }
}
