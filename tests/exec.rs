//! End-to-end tests of the foundation (issue 2): a real `wardend` on its own
//! socket and state dir, driven by the typed client and by the real `warden`
//! CLI. Exit codes, stream separation, streaming, timeouts killing a process
//! tree, the output cap, environment and fd hygiene, peer authentication,
//! restart after SIGKILL, and every bad input.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use warden_tests::{exec, pb, session, workspace, Daemon};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn req(session_id: &str, command: &str) -> pb::ExecRequest {
    pb::ExecRequest {
        session_id: session_id.into(),
        command: command.into(),
        approve: true,
        ..Default::default()
    }
}

fn cli_exec(d: &Daemon, ws: &Path, args: &[&str]) -> std::process::Output {
    let mut full = vec!["exec", "--workspace", ws.to_str().unwrap()];
    full.extend_from_slice(args);
    d.run(&full)
}

#[test]
fn cli_exit_codes_follow_the_command() {
    let d = Daemon::start();
    let ws = workspace();
    let cases: &[(&[&str], i32)] = &[
        (&["--yes", "--", "true"], 0),
        (&["--yes", "--", "exit 3"], 3),
        // Words are joined with spaces into one bash script, as ssh does.
        (&["--yes", "--", "exit", "7"], 7),
        (&["--yes", "--", "kill -9 $$"], 128 + 9),
        (&["--yes", "--", "kill -TERM $$"], 128 + 15),
        (&["--yes", "--timeout", "1", "--", "sleep 30"], 124),
    ];
    for (args, want) in cases {
        let out = cli_exec(&d, ws.path(), args);
        assert_eq!(
            out.status.code(),
            Some(*want),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A lone command of plain words runs without bash in between; when it
/// cannot be executed that way, bash (its fallback, in the same sandbox)
/// runs or reports it exactly as `bash -c` would have.
#[test]
fn plain_commands_fall_back_to_bash_when_they_cannot_be_executed() {
    let d = Daemon::start();
    let ws = workspace();
    let script = ws.path().join("noshebang");
    std::fs::write(&script, "echo run-by-bash $((6 * 7))\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = cli_exec(&d, ws.path(), &["--yes", "--", "./noshebang"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "run-by-bash 42\n");
    let out = cli_exec(
        &d,
        ws.path(),
        &["--yes", "--", "warden-no-such-program", "x"],
    );
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warden-no-such-program: command not found"),
        "{err}"
    );
    // Run directly: the program's parent is the sandbox's init, not bash.
    let out = cli_exec(&d, ws.path(), &["--yes", "--", "cat", "/proc/self/stat"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stat = String::from_utf8_lossy(&out.stdout).into_owned();
    let ppid = stat.rsplit(')').next().unwrap().split_whitespace().nth(1);
    assert_eq!(ppid, Some("1"), "{stat}");
}

#[test]
fn cli_refusals_exit_126_with_the_reason() {
    let d = Daemon::start();
    let ws = workspace();
    // The default policy asks for writes: without --yes and without a
    // terminal the CLI refuses.
    let out = cli_exec(&d, ws.path(), &["--", "touch", "made-by-ask"]);
    assert_eq!(out.status.code(), Some(126));
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("warden: approval required"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!ws.path().join("made-by-ask").exists());
    // strict denies writes, and --yes never overrides a deny.
    let out = cli_exec(
        &d,
        ws.path(),
        &["--policy", "strict", "--yes", "--", "touch", "made-by-deny"],
    );
    assert_eq!(out.status.code(), Some(126));
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("warden: denied"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!ws.path().join("made-by-deny").exists());
    assert!(out.stdout.is_empty());
}

#[test]
fn cli_stdout_carries_only_the_commands_stdout() {
    let d = Daemon::start();
    let ws = workspace();
    let out = cli_exec(
        &d,
        ws.path(),
        &["--yes", "--", "echo out; echo err >&2; echo out2"],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\nout2\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
}

#[test]
fn output_streams_before_the_command_ends() {
    let d = Daemon::start();
    let ws = workspace();
    rt().block_on(async {
        use tokio_stream::StreamExt;
        let c = d.client().await;
        let sid = session(&c, ws.path(), "default").await;
        let start = Instant::now();
        let mut s = c
            .exec_client()
            .exec(req(&sid, "echo first; sleep 2; echo second"))
            .await
            .unwrap()
            .into_inner();
        let mut first_at = None;
        let mut exit_at = None;
        while let Some(ev) = s.next().await {
            match ev.unwrap().event.unwrap() {
                pb::exec_event::Event::Stdout(ch) if first_at.is_none() => {
                    assert!(String::from_utf8_lossy(&ch.data).starts_with("first"));
                    first_at = Some(start.elapsed());
                }
                pb::exec_event::Event::Exit(_) => exit_at = Some(start.elapsed()),
                _ => {}
            }
        }
        let (first, exit) = (first_at.expect("a stdout chunk"), exit_at.expect("an exit"));
        assert!(exit >= Duration::from_secs(2));
        assert!(
            exit - first >= Duration::from_millis(1500),
            "first chunk at {first:?}, exit at {exit:?}: not streamed"
        );
    });
}

#[test]
fn timeout_kills_the_whole_process_tree_including_a_setsid_grandchild() {
    let d = Daemon::start();
    let ws = workspace();
    // The grandchild leaves the command's session and process group; only a
    // pid namespace (or cgroup) kill reaches it. If it survives, it writes
    // the marker after 2 s.
    let script =
        "setsid bash -c 'sleep 2; echo alive > escaped' </dev/null >/dev/null 2>&1 & sleep 60";
    let t = Instant::now();
    let out = cli_exec(&d, ws.path(), &["--yes", "--timeout", "1", "--", script]);
    assert_eq!(
        out.status.code(),
        Some(124),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(t.elapsed() < Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !ws.path().join("escaped").exists(),
        "a setsid grandchild outlived the timeout"
    );
}

#[test]
fn output_is_capped_with_a_marker_and_a_count() {
    let d = Daemon::start();
    let ws = workspace();
    rt().block_on(async {
        let c = d.client().await;
        let sid = session(&c, ws.path(), "default").await;
        let r = exec(&c, req(&sid, "head -c 3000000 /dev/zero; echo done >&2"))
            .await
            .unwrap();
        let cap = 1usize << 20;
        assert_eq!(r.exit().stdout_dropped_bytes, 3_000_000 - cap as u64);
        assert!(r.stdout[..cap].iter().all(|b| *b == 0));
        let tail = String::from_utf8_lossy(&r.stdout[cap..]);
        assert!(
            tail.contains("truncated") && tail.contains(&(3_000_000 - cap).to_string()),
            "{tail}"
        );
        assert_eq!(r.stderr_str(), "done\n");
        assert_eq!(r.exit().code, 0);
        // A per-call cap below the default.
        let r = exec(
            &c,
            pb::ExecRequest {
                output_limit_bytes: 10,
                ..req(&sid, "echo 0123456789abcdef")
            },
        )
        .await
        .unwrap();
        assert!(r
            .stdout
            .starts_with(b"0123456789\n[warden: output truncated"));
        assert_eq!(r.exit().stdout_dropped_bytes, 7);
    });
}

#[test]
fn the_daemons_environment_does_not_leak() {
    let mut d = Daemon::start_with(&[]);
    d.kill9();
    // Restart with canaries in the daemon's own environment.
    let log = std::fs::File::create(d.dir.path().join("canary.log")).unwrap();
    let child = d
        .command()
        .env("WARDEN_CANARY", "canary-4242")
        .env("AWS_SECRET_ACCESS_KEY", "canary-aws")
        .env("LD_PRELOAD", "/nonexistent/canary.so")
        .stderr(log)
        .spawn()
        .unwrap();
    d.child = Some(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&d.socket).is_err() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    let ws = workspace();
    let out = cli_exec(&d, ws.path(), &["--yes", "--", "env"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let env = String::from_utf8_lossy(&out.stdout);
    assert!(
        !env.contains("canary"),
        "daemon env leaked into the command:\n{env}"
    );
    for want in [
        "PATH=",
        "HOME=",
        "LANG=",
        "TERM=dumb",
        "PAGER=cat",
        "GIT_PAGER=cat",
    ] {
        assert!(
            env.lines().any(|l| l.starts_with(want)),
            "{want} missing:\n{env}"
        );
    }
}

#[test]
fn only_fds_0_to_2_reach_the_command_and_stdin_is_dev_null() {
    let mut d = Daemon::start();
    d.kill9();
    // Give the daemon an inherited, non-CLOEXEC fd 7; the command must not see it.
    let log = std::fs::File::create(d.dir.path().join("fd.log")).unwrap();
    let leak = std::fs::File::create(d.dir.path().join("leaky")).unwrap();
    let leak_fd = std::os::fd::AsRawFd::as_raw_fd(&leak);
    let mut cmd = d.command();
    cmd.stderr(log);
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(leak_fd, 7) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    d.child = Some(cmd.spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&d.socket).is_err() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    let ws = workspace();
    let out = cli_exec(
        &d,
        ws.path(),
        &[
            "--yes",
            "--",
            "cd /proc/self/fd && echo * && readlink /proc/$$/fd/0",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout);
    let mut lines = s.lines();
    // `echo` is a builtin: the fds listed are bash's own (0, 1, 2 and the
    // directory fd of the glob, which bash closes before printing: 3 at most).
    let fds: Vec<u32> = lines
        .next()
        .unwrap()
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    assert!(fds.iter().all(|f| *f <= 3), "unexpected fds {fds:?}");
    assert!(!fds.contains(&7), "inherited fd 7 leaked: {fds:?}");
    assert_eq!(
        lines.next(),
        Some("/dev/null"),
        "stdin is not /dev/null: {s}"
    );
}

/// Copies the CLI where an unprivileged uid can run it, and opens the
/// daemon's socket to everyone so the daemon's own check is what refuses.
fn as_nobody(d: &Daemon) -> Option<std::path::PathBuf> {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            !warden_tests::require_sandbox(),
            "WARDEN_REQUIRE_SANDBOX=1 but the peer-uid test needs root"
        );
        eprintln!("skipped: not root");
        return None;
    }
    let bin = d.dir.path().join("warden-nobody");
    std::fs::copy(warden_tests::warden_bin(), &bin).unwrap();
    for (p, m) in [
        (d.dir.path(), 0o755),
        (d.socket.parent().unwrap(), 0o755),
        (d.socket.as_path(), 0o666),
        (bin.as_path(), 0o755),
    ] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }
    Some(bin)
}

fn run_as(uid: u32, bin: &Path, d: &Daemon, args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(bin);
    cmd.env_clear()
        .env("WARDEN_SOCKET", &d.socket)
        .env("HOME", "/")
        .arg("--no-autostart")
        .args(args)
        .current_dir("/");
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(uid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().unwrap()
}

#[test]
fn a_peer_with_the_wrong_uid_is_refused() {
    let d = Daemon::start();
    let Some(bin) = as_nobody(&d) else { return };
    let ws = workspace();
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = run_as(
        65534,
        &bin,
        &d,
        &[
            "exec",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--yes",
            "--",
            "touch",
            "x",
        ],
    );
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("uid 65534 is not allowed"), "{err}");
    assert!(!ws.path().join("x").exists());
}

#[test]
fn an_allowed_peer_may_only_open_workspaces_it_could_write() {
    let d = Daemon::start_with(&["--allow-uid", "65534"]);
    let Some(bin) = as_nobody(&d) else { return };
    let ws = workspace(); // root-owned 0700: nobody cannot write it
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = run_as(
        65534,
        &bin,
        &d,
        &[
            "exec",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--yes",
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot write workspace"), "{err}");
    // A directory nobody may write is fine.
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = run_as(
        65534,
        &bin,
        &d,
        &[
            "exec",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--yes",
            "--",
            "echo ok",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ok\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_daemon_killed_with_sigkill_restarts_on_the_same_socket() {
    let mut d = Daemon::start();
    let ws = workspace();
    assert_eq!(
        cli_exec(&d, ws.path(), &["--yes", "--", "true"])
            .status
            .code(),
        Some(0)
    );
    d.kill9();
    assert!(
        d.socket.exists(),
        "a killed daemon leaves its socket behind"
    );
    d.restart();
    let out = cli_exec(&d, ws.path(), &["--yes", "--", "echo back"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "back\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And a clean shutdown removes the socket.
    let st = d.terminate().unwrap();
    assert!(st.success(), "{st}");
    assert!(!d.socket.exists());
}

#[test]
fn a_second_daemon_on_a_busy_socket_or_state_dir_is_refused() {
    let d = Daemon::start();
    let out = d.command().output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use"), "{err}");
    // Same state dir, another socket.
    let other = d.dir.path().join("other.sock");
    let out = std::process::Command::new(warden_tests::wardend_bin())
        .arg("--socket")
        .arg(&other)
        .arg("--state-dir")
        .arg(&d.state_dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("in use by another wardend"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The first daemon still serves.
    let ws = workspace();
    assert_eq!(
        cli_exec(&d, ws.path(), &["--yes", "--", "true"])
            .status
            .code(),
        Some(0)
    );
}

#[test]
fn bad_requests_get_clear_statuses() {
    let d = Daemon::start();
    let ws = workspace();
    rt().block_on(async {
        let c = d.client().await;
        let code_of = |r: Result<warden_tests::ExecResult, tonic::Status>| {
            r.map(|_| tonic::Code::Ok).unwrap_or_else(|s| s.code())
        };
        // Unknown session.
        let r = exec(&c, req("no-such-session", "true")).await;
        assert_eq!(code_of(r), tonic::Code::NotFound);
        let sid = session(&c, ws.path(), "default").await;
        for (cmd, what) in [("", "empty"), ("  \t\n", "empty"), ("echo a\0b", "NUL")] {
            let e = exec(&c, req(&sid, cmd)).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{cmd:?}");
            assert!(e.message().contains(what), "{}", e.message());
        }
        let e = exec(
            &c,
            pb::ExecRequest {
                timeout_ms: 400 * 86_400_000,
                ..req(&sid, "true")
            },
        )
        .await
        .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("timeout"));
        let e = exec(
            &c,
            pb::ExecRequest {
                cwd: "../..".into(),
                ..req(&sid, "true")
            },
        )
        .await
        .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        // Workspaces.
        let mk = |w: String| pb::CreateSessionRequest {
            workspace: w,
            ..Default::default()
        };
        let mut s = c.sessions();
        let missing = ws.path().join("missing").to_string_lossy().into_owned();
        let e = s.create_session(mk(missing)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("does not exist"), "{}", e.message());
        std::fs::write(ws.path().join("file"), "x").unwrap();
        let e = s
            .create_session(mk(ws.path().join("file").to_string_lossy().into_owned()))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("not a directory"));
        let e = s
            .create_session(mk("relative/dir".into()))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        // A workspace that contains the daemon's state dir.
        let e = s
            .create_session(mk(d.dir.path().to_string_lossy().into_owned()))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{}", e.message());
        // A policy that does not parse.
        let e = s
            .create_session(pb::CreateSessionRequest {
                workspace: ws.path().to_string_lossy().into_owned(),
                policy_name: "broken".into(),
                policy_toml: "[tiers]\nwrite = \"sometimes\"\n".into(),
                labels: Default::default(),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        // A closed session.
        c.close_session(&sid).await.unwrap();
        let e = exec(&c, req(&sid, "true")).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    });
    // The CLI's own checks.
    let out = d.run(&["exec", "--timeout", "0", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--timeout"));
    let out = d.run(&[
        "exec",
        "--yes",
        "--workspace",
        "/nonexistent/ws",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    let out = d.run(&["exec", "--yes", "--policy", "no-such-policy", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown policy"));
    // The daemon survived all of it.
    assert_eq!(
        cli_exec(&d, ws.path(), &["--yes", "--", "true"])
            .status
            .code(),
        Some(0)
    );
}

#[test]
fn the_cli_starts_an_embedded_daemon_when_none_answers() {
    let dir = tempfile::Builder::new()
        .prefix("wd-emb-")
        .tempdir_in("/tmp")
        .unwrap();
    let ws = workspace();
    let out = std::process::Command::new(warden_tests::warden_bin())
        .env("WARDEN_SOCKET", dir.path().join("s/wardend.sock"))
        .env("WARDEN_STATE_DIR", dir.path().join("state"))
        .args([
            "exec",
            "--yes",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--",
            "echo embedded",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "embedded\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join("state/warden.db").exists());
    // The embedded daemon ended with the CLI and removed its socket.
    std::thread::sleep(Duration::from_millis(500));
    assert!(!dir.path().join("s/wardend.sock").exists());
}

#[test]
fn sessions_are_listed_and_closed() {
    let d = Daemon::start();
    let ws = workspace();
    rt().block_on(async {
        let c = d.client().await;
        let sid = session(&c, ws.path(), "ci").await;
        let got = c
            .sessions()
            .get_session(pb::GetSessionRequest {
                session_id: sid.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(got.policy_name, "ci");
        assert_eq!(
            got.workspace,
            std::fs::canonicalize(ws.path()).unwrap().to_string_lossy()
        );
        assert_eq!(got.state, pb::SessionState::Open as i32);
        let list = c
            .sessions()
            .list_sessions(pb::ListSessionsRequest::default())
            .await
            .unwrap()
            .into_inner();
        assert!(list.sessions.iter().any(|s| s.id == sid));
        c.close_session(&sid).await.unwrap();
        c.close_session(&sid).await.unwrap();
        let list = c
            .sessions()
            .list_sessions(pb::ListSessionsRequest::default())
            .await
            .unwrap()
            .into_inner();
        assert!(!list.sessions.iter().any(|s| s.id == sid));
        let list = c
            .sessions()
            .list_sessions(pb::ListSessionsRequest {
                include_closed: true,
                limit: 0,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(list
            .sessions
            .iter()
            .any(|s| s.id == sid && s.state == pb::SessionState::Closed as i32));
    });
}

#[test]
fn redaction_markers_are_stable_and_restored_on_write() {
    let d = Daemon::start();
    let ws = workspace();
    let token = "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";
    std::fs::write(
        ws.path().join("settings.txt"),
        format!("name = demo\ntoken = {token}\n"),
    )
    .unwrap();
    rt().block_on(async {
        let c = d.client().await;
        let sid = session(&c, ws.path(), "default").await;
        let read = |c: &warden_tests::Client| {
            let sid = sid.clone();
            let c = c.clone();
            async move {
                c.files()
                    .read_file(pb::ReadFileRequest {
                        session_id: sid,
                        path: "settings.txt".into(),
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner()
            }
        };
        let r1 = read(&c).await;
        assert!(!r1.content.contains(token), "the token reached the client");
        assert!(r1.content.contains("[REDACTED:"), "{}", r1.content);
        // Stable within the session: the same marker twice.
        assert_eq!(read(&c).await.content, r1.content);
        // The shell sees the same marker for the same secret.
        let e = exec(&c, req(&sid, "cat settings.txt")).await.unwrap();
        assert_eq!(e.stdout_str(), r1.content);
        // A write of redacted content puts the secret back, never the marker.
        let edited = r1.content.replace("name = demo", "name = edited");
        c.files()
            .write_file(pb::WriteFileRequest {
                session_id: sid.clone(),
                path: "settings.txt".into(),
                content: edited.into_bytes(),
                approve: true,
                ..Default::default()
            })
            .await
            .unwrap();
        let disk = std::fs::read_to_string(ws.path().join("settings.txt")).unwrap();
        assert_eq!(disk, format!("name = edited\ntoken = {token}\n"));
        // A marker this session never issued is refused, and nothing is written.
        let forged = "token = [REDACTED:github-pat:0123456789ab]\n";
        let err = c
            .files()
            .write_file(pb::WriteFileRequest {
                session_id: sid.clone(),
                path: "other.txt".into(),
                content: forged.into(),
                approve: true,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            tonic::Code::FailedPrecondition,
            "{}",
            err.message()
        );
        assert!(!ws.path().join("other.txt").exists());
    });
}

/// The `.git/commondir` escape: a write-tier command plants a file that makes
/// the user's next host `git` read another config and hooks directory (code
/// execution as the user). Protected paths that do not exist stay absent.
#[test]
fn created_protected_paths_are_removed_after_the_command() {
    let d = Daemon::start();
    let ws = workspace();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(ws.path())
        .status()
        .unwrap();
    assert!(git.success());
    // Hidden in a script, so only the sandbox (not the classifier) stands
    // between the command and the paths.
    let script = "python3 -c \"import os; os.makedirs('evil/hooks'); open('.git/commondir','w').write('../evil'); \
                  open('.git/config.worktree','w').write('x'); os.makedirs('.vscode'); open('.vscode/tasks.json','w').write('{}'); \
                  open('.envrc','w').write('echo pwned'); print('ok')\"";
    let out = cli_exec(&d, ws.path(), &["--yes", "--", script]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("protected paths stay absent"));
    for p in [
        ".git/commondir",
        ".git/config.worktree",
        ".vscode",
        ".envrc",
    ] {
        assert!(
            std::fs::symlink_metadata(ws.path().join(p)).is_err(),
            "{p} survived"
        );
    }
    // Ordinary work in the same command stays.
    assert!(ws.path().join("evil/hooks").is_dir());
    // The file tools refuse them too.
    let out = d
        .warden()
        .args([
            "fs",
            "write",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--yes",
            ".git/commondir",
        ])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(!ws.path().join(".git/commondir").exists());
}

/// Pids of processes whose command line is exactly `argv`.
fn pids_running(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

/// Starts `warden exec -- 'touch started && exec sleep SECS'` in `ws`
/// (SECS unique per run and `line`, so parallel suites cannot match each
/// other's) and waits until the sleep runs: the CLI, SECS and its pid.
fn long_sleep(d: &Daemon, ws: &Path, line: u32) -> (std::process::Child, String, u32) {
    let secs = format!("{}.{}", 3000 + std::process::id() % 1000, line);
    let script = format!("touch started && exec sleep {secs}");
    let mut cli = d
        .warden()
        .args([
            "exec",
            "--workspace",
            ws.to_str().unwrap(),
            "--yes",
            "--",
            &script,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(p) = pids_running(&["sleep", &secs]).first() {
            return (cli, secs, *p);
        }
        assert!(Instant::now() < deadline, "the command never started");
        assert!(cli.try_wait().unwrap().is_none(), "the CLI ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A command killed by the daemon's shutdown says so on its stderr (else
/// a SIGKILL from an embedded daemon's end reads like the OOM killer).
#[test]
fn a_command_killed_by_shutdown_says_so() {
    let mut d = Daemon::start();
    let ws = workspace();
    let mut cli = d
        .warden()
        .args([
            "exec",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--yes",
            "--",
        ])
        .arg("touch started && exec sleep 300")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ws.path().join("started").exists() {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    d.terminate();
    let out = cli.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 9), "{err}");
    assert!(err.contains("the daemon shut down"), "{err}");
}

/// A command running when the daemon is SIGKILLed dies with it (the
/// helper's and the namespace init's parent-death signal; the init's
/// survived its own setresuid as root, issue 6's crash flake), so a
/// restarted daemon never races a command of the old one.
#[test]
fn a_running_command_dies_with_a_killed_daemon() {
    let mut d = Daemon::start();
    let ws = workspace();
    let (mut cli, secs, _) = long_sleep(&d, ws.path(), line!());
    assert!(ws.path().join("started").exists());
    d.kill9();
    let _ = cli.wait();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = pids_running(&["sleep", &secs]);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the command (pids {left:?}) outlived the killed daemon by 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A daemon restarted after a SIGKILL starts serving only once every
/// sandbox of the old one is gone: each sandbox's init holds the state
/// dir's sandboxes lock (never the command itself, past its execve), and a
/// starting daemon waits for that lock. Here the test holds the lock as an
/// old sandbox would, then checks that a running sandbox holds it.
#[test]
fn a_restarted_daemon_waits_for_the_old_daemons_sandboxes() {
    use std::os::unix::fs::MetadataExt;
    let mut d = Daemon::start();
    let lock_path = d.state_dir.join("sandboxes.lock");
    // Held as an old daemon's sandbox would hold it.
    let held = std::fs::OpenOptions::new()
        .append(true)
        .open(&lock_path)
        .unwrap();
    d.kill9();
    // Free once the killed daemon's helper and sandboxes (a warm one at
    // least) are gone, a few ms later.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut file = held;
    let held = loop {
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(l) => break l,
            Err((f, e)) => {
                assert!(
                    Instant::now() < deadline,
                    "the killed daemon's sandboxes still hold the lock after 10 s: {e}"
                );
                file = f;
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    };
    // Killed however the test ends (a leaked daemon would keep the test
    // harness's output pipe open).
    struct Reaped(std::process::Child);
    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut second = Reaped(d.command().spawn().unwrap());
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        assert!(
            std::os::unix::net::UnixStream::connect(&d.socket).is_err(),
            "the new daemon served while an old sandbox held the lock"
        );
        assert!(
            second.0.try_wait().unwrap().is_none(),
            "the new daemon exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(&d.socket).is_err() {
        assert!(
            Instant::now() < deadline && second.0.try_wait().unwrap().is_none(),
            "the new daemon did not serve once the lock was free"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // A running command: its sandbox's init holds the lock, the command
    // does not.
    let ws = workspace();
    let (mut cli, _, cmd) = long_sleep(&d, ws.path(), line!());
    let ino = std::fs::metadata(&lock_path).unwrap().ino();
    let holds = |pid: u32| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.filter_map(|e| std::fs::metadata(e.ok()?.path()).ok())
                    .any(|m| m.ino() == ino)
            })
            .unwrap_or(false)
    };
    let stat = std::fs::read_to_string(format!("/proc/{cmd}/stat")).unwrap();
    let init: u32 = stat
        .rsplit(") ")
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let (init_holds, cmd_holds) = (holds(init), holds(cmd));
    drop(second);
    let _ = cli.wait();
    assert!(
        init_holds,
        "the sandbox's init does not hold the sandboxes lock"
    );
    assert!(!cmd_holds, "the command holds the sandboxes lock");
}

/// Red-team leak: a token written in two halves with a pause between them
/// (longer than the idle flush) came out whole and unredacted, because the
/// idle flush let the first half out before the second arrived.
#[test]
fn a_token_split_by_a_pause_is_still_redacted() {
    let d = Daemon::start();
    let ws = workspace();
    for (a, b) in [
        ("ghp_R4nd0mT0k3nV4", "lu3Xq9Zk2Lm8Np5Wr7Ty1Ub3"),
        ("AKIAQWERTY", "UIOPASDFGH"),
    ] {
        let script = format!("printf 'before\\n{a}'; sleep 0.3; printf '{b}\\nafter\\n'");
        let out = cli_exec(&d, ws.path(), &["--yes", "--", &script]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!stdout.contains(&format!("{a}{b}")), "{stdout}");
        assert!(!stdout.contains(a) && !stdout.contains(b), "{stdout}");
        assert!(
            stdout.starts_with("before\n[REDACTED:") && stdout.ends_with("]\nafter\n"),
            "{stdout}"
        );
    }
}

/// The `--json` lines of a CLI run.
fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// `warden exec` without `--session` is one Exec call in a one-shot session
/// the daemon opens (first event) and closes before the stream ends: the
/// session is listed closed, its checkpoints are listed, and rollback to its
/// pre-checkpoint undoes the command.
#[test]
fn one_shot_exec_leaves_a_closed_session_that_rolls_back() {
    let d = Daemon::start();
    let ws = workspace();
    let wsp = ws.path().to_str().unwrap();
    let out = d.run(&[
        "exec",
        "--json",
        "--yes",
        "--workspace",
        wsp,
        "--",
        "echo hi > made.txt",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("made.txt")).unwrap(),
        "hi\n"
    );
    let evs = json_lines(&out);
    assert_eq!(evs[0]["event"], "session", "{evs:?}");
    let sid = evs[0]["id"].as_str().unwrap().to_string();
    assert_eq!(
        evs[0]["workspace"],
        std::fs::canonicalize(ws.path()).unwrap().to_str().unwrap()
    );
    let exit = evs.iter().find(|e| e["event"] == "exit").expect("exit");
    let pre = exit["pre_checkpoint_id"].as_str().unwrap().to_string();
    assert!(!pre.is_empty(), "{exit}");

    // Closed by the time the CLI exited: not among the open sessions, listed
    // closed with --all.
    let open = d.run(&["session", "list"]);
    assert!(!String::from_utf8_lossy(&open.stdout).contains(&sid));
    let all = d.run(&["session", "list", "--all", "--json"]);
    let row = json_lines(&all)
        .into_iter()
        .find(|v| v["id"] == sid.as_str())
        .expect("the one-shot session with --all");
    assert_eq!(row["state"], "closed", "{row}");

    // Its checkpoints are listed without --session, and rollback works.
    let list = d.run(&["checkpoint", "list", "--json"]);
    let kinds: Vec<String> = json_lines(&list)
        .iter()
        .filter(|c| c["session_id"] == sid.as_str())
        .map(|c| c["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        ["post", "pre"],
        "{}",
        String::from_utf8_lossy(&list.stdout)
    );
    let out = d.run(&["rollback", &pre, "--files"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!ws.path().join("made.txt").exists());
}

/// A one-shot Exec refuses bad input with the status CreateSession gives
/// (INVALID_ARGUMENT naming the field), before any session exists.
#[test]
fn one_shot_exec_rejects_bad_input_without_opening_a_session() {
    let d = Daemon::start();
    let ws = workspace();
    let file = ws.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let wsp = ws.path().to_str().unwrap().to_string();
    rt().block_on(async {
        let c = d.client().await;
        let bad =
            |session_id: &str, workspace: &str, policy_name: &str, command: &str| pb::ExecRequest {
                session_id: session_id.into(),
                workspace: workspace.into(),
                policy_name: policy_name.into(),
                policy_toml: if policy_name.is_empty() {
                    String::new()
                } else {
                    "[tiers]\nwrite = \"allow\"\n".into()
                },
                command: command.into(),
                approve: true,
                ..Default::default()
            };
        let cases = [
            (bad("", "relative/dir", "", "true"), "not an absolute path"),
            (bad("", "/no/such/warden/dir", "", "true"), "does not exist"),
            (
                bad("", file.to_str().unwrap(), "", "true"),
                "not a directory",
            ),
            (bad("", "", "", "true"), "session_id is required"),
            (bad("", &wsp, "", "   "), "command is empty"),
            (bad("some-session", &wsp, "", "true"), "leave them empty"),
            (bad("some-session", "", "p", "true"), "leave them empty"),
        ];
        for (req, want) in cases {
            let what = format!("{:?} {:?}", req.workspace, req.command);
            let st = c.exec_client().exec(req).await.expect_err(&what);
            assert_eq!(st.code(), tonic::Code::InvalidArgument, "{what}: {st:?}");
            assert!(st.message().contains(want), "{what}: {}", st.message());
        }
        // A bad policy is refused as by CreateSession.
        let mut broken = bad("", &wsp, "broken", "true");
        broken.policy_toml = "[tiers\n".into();
        let st = c.exec_client().exec(broken).await.expect_err("bad policy");
        assert_eq!(st.code(), tonic::Code::InvalidArgument, "{st:?}");
        // The client library refuses a one-shot request naming a session.
        let err = c
            .exec_one_shot(ws.path(), None, req("s", "true"))
            .await
            .expect_err("session_id set");
        assert!(err.to_string().contains("session_id"), "{err}");
        // None of these opened a session.
        let all = c
            .sessions()
            .list_sessions(pb::ListSessionsRequest {
                include_closed: true,
                limit: 0,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(all.sessions.is_empty(), "{:?}", all.sessions);
    });
}

/// A one-shot call whose client goes away while it waits for an approval:
/// the daemon closes the session (the request expires with it) and runs
/// nothing.
#[test]
fn one_shot_session_closes_when_the_client_goes_away() {
    use tokio_stream::StreamExt;
    let d = Daemon::start();
    let ws = workspace();
    rt().block_on(async {
        let c = d.client().await;
        let mut r = req("", "touch late.txt");
        r.approve = false;
        let mut events = c
            .exec_one_shot(ws.path(), Some("default"), r)
            .await
            .expect("one-shot exec");
        let mut sid = None;
        let mut request = None;
        while let Some(ev) = events.next().await {
            match ev.unwrap().event {
                Some(pb::exec_event::Event::Session(s)) => {
                    assert_eq!(s.state, pb::SessionState::Open as i32);
                    sid = Some(s.id);
                }
                Some(pb::exec_event::Event::ApprovalRequired(a)) => {
                    request = Some(a.id);
                    break;
                }
                _ => {}
            }
        }
        let sid = sid.expect("the session came first");
        let request = request.expect("write asks under the default policy");
        drop(events);
        // The daemon sees the stream gone and closes the session; wait for
        // that state (bounded), then check the request expired with it.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = c
                .sessions()
                .get_session(pb::GetSessionRequest {
                    session_id: sid.clone(),
                })
                .await
                .unwrap()
                .into_inner();
            if s.state == pb::SessionState::Closed as i32 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the one-shot session stayed open"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let a = c
            .approvals()
            .get_approval(pb::GetApprovalRequest {
                request_id: request,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(a.state, pb::ApprovalState::Expired as i32, "{a:?}");
        assert!(!ws.path().join("late.txt").exists());
    });
}
