//! Red-team reproducers for the gate before execve (commit 0b7ddcd): a
//! command set up behind its gate must not run once its caller is gone or
//! the daemon is shutting down. Both fail on 0b7ddcd: `run_confined` opens
//! the gate before it registers the command (`register_running`, which is
//! what refuses during shutdown) and without checking that the client is
//! still there; the kill that follows races with the command.
//!
//! The command is a tiny static binary that creates a file as its first
//! instruction, so it wins that race most of the time; each test tries
//! several times. Needs gcc and x86_64.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use warden_tests::{workspace, Daemon};

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

fn exec_ends(d: &Daemon) -> usize {
    let out = d.run(&["audit", "--json"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"action\":\"exec_end\""))
        .count()
}

/// Starts `warden exec --json -- ./mk` and returns once the pre-checkpoint
/// event arrived (the command waits at its gate: `exec_start` is next).
fn exec_until_pre_checkpoint(d: &Daemon, ws: &Path) -> std::process::Child {
    let mut c = d
        .warden()
        .args(["exec", "--workspace", ws.to_str().unwrap(), "--yes", "--json"])
        .args(["--", "./mk"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut r = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "no pre-checkpoint event");
        if line.contains("\"kind\":\"pre\"") {
            return c;
        }
    }
}

#[test]
fn a_command_whose_client_left_before_its_gate_never_runs() {
    let d = Daemon::start();
    let ws = workspace();
    fast_marker_binary(ws.path());
    let marker = ws.path().join("ran-past-gate");
    for attempt in 0..8 {
        let _ = std::fs::remove_file(&marker);
        let before = exec_ends(&d);
        let mut c = exec_until_pre_checkpoint(&d, ws.path());
        // The caller goes away (Ctrl-C) while the step is being prepared.
        c.kill().unwrap();
        c.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while exec_ends(&d) == before {
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
    let ws = workspace();
    fast_marker_binary(ws.path());
    let marker = ws.path().join("ran-past-gate");
    for attempt in 0..8 {
        let _ = std::fs::remove_file(&marker);
        let mut c = exec_until_pre_checkpoint(&d, ws.path());
        // SIGTERM while the step is being prepared: the daemon refuses new
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
