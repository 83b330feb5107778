//! The gate before execve (issue 3; docs/sandbox.md, "Order of set-up"): a
//! command set up behind its gate while its step is prepared must not run
//! once its caller is gone or the daemon is shutting down. (Both failed
//! when `run_confined` opened the gate before it registered the command
//! with `register_running`, which is what refuses during shutdown, and
//! without checking that the client was still there: the kill that
//! followed raced with the command.)
//!
//! The command is a tiny static binary that creates a file as its first
//! instruction, so it wins that race most of the time; each test tries
//! several times. Needs gcc and x86_64.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use warden_tests::{exec_ends, workspace, Daemon};

/// Compiles `ws/mk`: creates `ran-past-gate` in its cwd, then exits.
fn fast_marker_binary(ws: &Path) {
    let src = ws.join("mk.c");
    std::fs::write(
        &src,
        r#"
static long sys3(long n, long a, long b, long c) {
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return r;
}
void _start(void) {
    sys3(2 /* open */, (long)"ran-past-gate", 0101 /* O_WRONLY|O_CREAT */, 0644);
    sys3(231 /* exit_group */, 0, 0, 0);
    for (;;) {}
}
"#,
    )
    .unwrap();
    let st = std::process::Command::new("gcc")
        .args(["-nostdlib", "-static", "-O1", "-o"])
        .arg(ws.join("mk"))
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(st.success());
    std::fs::remove_file(&src).unwrap();
}

/// Fills `ws` with enough files that its pre-checkpoint takes a while
/// (hundreds of ms in a debug build), and takes a first checkpoint of them.
fn slow_workspace(d: &Daemon, ws: &Path) {
    for i in 0..20_000 {
        let dir = ws.join(format!("d{}", i % 200));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i}")), format!("{i}\n")).unwrap();
    }
    let out = d.run(&[
        "exec",
        "--workspace",
        ws.to_str().unwrap(),
        "--yes",
        "--",
        "true;",
    ]);
    assert!(out.status.success(), "{out:?}");
}

/// A slow workspace with the marker binary: the workspace and the marker
/// path `./mk` creates.
fn gated_workspace(d: &Daemon) -> (tempfile::TempDir, std::path::PathBuf) {
    let ws = workspace();
    fast_marker_binary(ws.path());
    slow_workspace(d, ws.path());
    let marker = ws.path().join("ran-past-gate");
    (ws, marker)
}

/// Starts `warden exec --json -- ./mk` and returns once the decision event
/// arrived: the step's pre-checkpoint is being taken (the command is set
/// up meanwhile and waits at its gate).
fn exec_until_decided(d: &Daemon, ws: &Path) -> std::process::Child {
    let mut c = d
        .warden()
        .args([
            "exec",
            "--workspace",
            ws.to_str().unwrap(),
            "--yes",
            "--json",
        ])
        .args(["--", "./mk"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut r = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "no decision event");
        if line.contains("\"event\":\"decision\"") {
            return c;
        }
    }
}

#[test]
fn a_command_whose_client_left_before_its_gate_never_runs() {
    let d = Daemon::start();
    let (ws, marker) = gated_workspace(&d);
    for attempt in 0..8 {
        let _ = std::fs::remove_file(&marker);
        let before = exec_ends(&d).len();
        let mut c = exec_until_decided(&d, ws.path());
        // The caller goes away (Ctrl-C) during the pre-checkpoint.
        c.kill().unwrap();
        c.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while exec_ends(&d).len() == before {
            assert!(Instant::now() < deadline, "no exec_end");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            !marker.exists(),
            "attempt {attempt}: the command ran after its client had gone"
        );
    }
}

#[test]
fn a_command_gated_when_shutdown_begins_never_runs() {
    let mut d = Daemon::start();
    let (ws, marker) = gated_workspace(&d);
    for attempt in 0..8 {
        let _ = std::fs::remove_file(&marker);
        let mut c = exec_until_decided(&d, ws.path());
        // SIGTERM during the pre-checkpoint: the daemon refuses new
        // work and kills what runs; the client is told it is shutting down.
        d.terminate();
        let _ = c.wait();
        assert!(
            !marker.exists(),
            "attempt {attempt}: the command ran although the daemon was shutting down"
        );
        d.restart();
    }
}
