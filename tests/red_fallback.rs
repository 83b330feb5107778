//! Red-team reproducer for the plain-words fast path (commit 0b7ddcd): a
//! command run without bash must run what `bash -c` would run. On 0b7ddcd
//! `exec_candidates` (daemon/src/sandbox/child.rs) moves on to the next
//! `PATH` match after any execve error but ENOEXEC, so when the first match
//! exists but cannot start (its `#!` interpreter is missing: ENOENT; or
//! EACCES, ETXTBSY), a later program of the same name runs; bash stops at
//! the first match and reports the error.

mod sandbox_common;

use sandbox_common::{main_with, H};
use std::time::Duration;
use warden_daemon::sandbox::{Fallback, Profile};

fn direct_path_runs_only_what_bash_would(h: &H) {
    use std::os::unix::fs::PermissionsExt;
    let ws = h.workspace();
    let p = ws.path();
    for (dir, body) in [
        ("b1", "#!/nonexistent/interpreter\necho from-b1\n"),
        ("b2", "#!/bin/sh\necho from-b2\n"),
    ] {
        std::fs::create_dir(p.join(dir)).unwrap();
        let f = p.join(dir).join("wtool");
        std::fs::write(&f, body).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!(
        "{}:{}:/usr/bin:/bin",
        p.join("b1").display(),
        p.join("b2").display()
    );
    let mut shell = h.request(p, Profile::Write, &["bash", "-c", "--", "wtool"]);
    shell.env.retain(|(k, _)| k != "PATH");
    shell.env.push(("PATH".into(), path));
    let by_bash = h.run_req(shell.clone(), Duration::from_secs(30)).unwrap();
    assert!(!by_bash.stdout.contains("from-b2"), "{}", by_bash.stdout);
    // What the daemon sends for `wtool`: the program, bash as fallback.
    let mut direct = shell.clone();
    direct.argv = vec!["wtool".into()];
    direct.fallback = Some(Fallback {
        argv: shell.argv.clone(),
        env: shell.env.clone(),
    });
    let o = h.run_req(direct, Duration::from_secs(30)).unwrap();
    assert_eq!(
        (o.stdout.trim(), o.exit.code),
        (by_bash.stdout.trim(), by_bash.exit.code),
        "direct: {} {} / bash: {}",
        o.stdout,
        o.stderr,
        by_bash.stderr
    );
}

fn main() {
    main_with(&[(
        "direct_path_runs_only_what_bash_would",
        direct_path_runs_only_what_bash_would,
    )]);
}
