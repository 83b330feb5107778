//! "Ordinary work still runs" inside the sandbox (issue #3): the other side of
//! the attack suite. Driven through the daemon library's `Spawner` directly;
//! see `sandbox_common` for how the spawn helper is started.

mod sandbox_common;

use sandbox_common::pipe;
use sandbox_common::{main_with, H};
use std::time::Duration;
use warden_daemon::sandbox::{Enforcement, Fallback, Profile, SandboxError};

fn basics(h: &H) {
    let ws = h.workspace();
    let o = h.sh(ws.path(), Profile::Write, "echo out; echo err >&2; exit 3");
    assert_eq!(o.exit.code, Some(3));
    assert_eq!(o.stdout, "out\n");
    assert_eq!(o.stderr, "err\n");
    assert_eq!(o.landlock, Enforcement::Full);
}

fn identity_and_view(h: &H) {
    let ws = h.workspace();
    let o = h.sh(
        ws.path(),
        Profile::Write,
        "id -u; id -un; pwd; hostname; test -t 0 && echo tty; echo pid=$$; ls /dev | tr '\\n' ' '",
    );
    o.assert_ok("id");
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines[0], "1000");
    assert_eq!(lines[1], "warden");
    assert_eq!(lines[2], ws.path().to_str().unwrap());
    assert_eq!(lines[3], "warden");
    assert!(!o.stdout.contains("tty\n"));
    assert!(lines.iter().any(|l| l.starts_with("pid=")));
    assert!(!o.stdout.contains("pts"), "{}", o.stdout);
}

fn common_shell_idioms(h: &H) {
    let ws = h.workspace();
    let o = h.sh(
        ws.path(),
        Profile::Write,
        "echo out > /dev/stdout && echo err > /dev/stderr && ls / >/dev/null && echo listed && cat < /dev/null && head -c 4 /dev/urandom | wc -c",
    );
    o.assert_ok("shell idioms");
    assert_eq!(o.stdout, "out\nlisted\n4\n");
    assert_eq!(o.stderr, "err\n");
}

fn workspace_write_and_owner(h: &H) {
    use std::os::unix::fs::MetadataExt;
    let ws = h.workspace();
    let o = h.sh(
        ws.path(),
        Profile::Write,
        "echo hi > new.txt && mkdir d && echo x > d/y && cat new.txt",
    );
    o.assert_ok("write");
    let m = std::fs::metadata(ws.path().join("new.txt")).unwrap();
    let owner = std::fs::metadata(ws.path()).unwrap().uid();
    assert_eq!(
        m.uid(),
        owner,
        "new files belong to the workspace owner on disk"
    );
}

fn scratch_dirs_and_home(h: &H) {
    let ws = h.workspace();
    let o = h.sh(
        ws.path(),
        Profile::Write,
        "echo a > /tmp/a && echo b > /var/tmp/b && echo c > /dev/shm/c && echo d > \"$HOME/d\" && cat /tmp/a /var/tmp/b /dev/shm/c \"$HOME/d\"",
    );
    o.assert_ok("scratch");
    assert_eq!(o.stdout, "a\nb\nc\nd\n");
}

fn loopback_server(h: &H) {
    let ws = h.workspace();
    let code = r#"
import socket, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
port = s.getsockname()[1]
def serve():
    c, _ = s.accept(); c.sendall(b"pong"); c.close()
t = threading.Thread(target=serve); t.start()
c = socket.create_connection(("127.0.0.1", port)); print(c.recv(10).decode()); t.join()
"#;
    let o = h.py(ws.path(), Profile::Write, code);
    o.assert_ok("loopback");
    assert_eq!(o.stdout.trim(), "pong");
}

fn cargo_test_offline(h: &H) {
    let ws = h.workspace();
    let p = ws.path();
    std::fs::write(
        p.join("Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::create_dir(p.join("src")).unwrap();
    std::fs::write(
        p.join("src/lib.rs"),
        "pub fn add(a: i32, b: i32) -> i32 { a + b }\n#[cfg(test)]\nmod t { #[test] fn adds() { assert_eq!(super::add(2, 2), 4); } }\n",
    )
    .unwrap();
    let req = h.request(
        p,
        Profile::Write,
        &["bash", "-c", "cargo test --offline 2>&1"],
    );
    let o = h.run_req(req, Duration::from_secs(300)).unwrap();
    o.assert_ok("cargo test --offline");
    assert!(o.stdout.contains("test t::adds ... ok"), "{}", o.stdout);
}

fn python_unittest(h: &H) {
    let ws = h.workspace();
    std::fs::write(
        ws.path().join("test_m.py"),
        "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(1 + 1, 2)\n",
    )
    .unwrap();
    let o = h.sh(ws.path(), Profile::Write, "python3 -m unittest -v 2>&1");
    o.assert_ok("python3 -m unittest");
    assert!(o.stdout.contains("OK"), "{}", o.stdout);
}

fn asyncio_threads_and_unix_sockets(h: &H) {
    let ws = h.workspace();
    let code = r#"
import asyncio, os, socket, threading, struct
# asyncio (uses socketpair + epoll internally)
async def main():
    async def handle(r, w):
        w.write(await r.read(2)); await w.drain(); w.close()
    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"42"); await w.drain()
    data = await r.read(2); srv.close()
    return int(data)
print("asyncio", asyncio.run(main()))
# threads
out = []
ts = [threading.Thread(target=lambda i=i: out.append(i)) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
print("threads", len(out))
# a Unix socket in the workspace
srv = socket.socket(socket.AF_UNIX); srv.bind("ws.sock"); srv.listen(1)
c = socket.socket(socket.AF_UNIX); c.connect("ws.sock"); a, _ = srv.accept()
c.sendall(b"hi"); print("unix", a.recv(2).decode())
# socketpair with SO_PASSCRED
p1, p2 = socket.socketpair()
p2.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
p1.sendall(b"x")
msg, anc, _, _ = p2.recvmsg(1, socket.CMSG_SPACE(12))
pid, uid, gid = struct.unpack("iII", anc[0][2])
print("passcred", uid, gid, pid > 0)
"#;
    let o = h.py(ws.path(), Profile::Write, code);
    o.assert_ok("asyncio/threads/unix");
    assert!(o.stdout.contains("asyncio 42"), "{}", o.stdout);
    assert!(o.stdout.contains("threads 8"));
    assert!(o.stdout.contains("unix hi"));
    assert!(o.stdout.contains("passcred 1000 1000 True"), "{}", o.stdout);
}

fn mmap_two_gib(h: &H) {
    let ws = h.workspace();
    let code = "import mmap; m = mmap.mmap(-1, 2 << 30); m[0] = 1; m[(2 << 30) - 1] = 2; print('mapped', len(m))";
    let o = h.py(ws.path(), Profile::Write, code);
    o.assert_ok("2 GiB mmap");
    assert!(o.stdout.contains("mapped 2147483648"));
}

fn git_commit(h: &H) {
    let ws = h.workspace();
    let o = h.sh(
        ws.path(),
        Profile::Write,
        "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b
         git init -q . && echo hi > f && git add f && git commit -qm first && git log --oneline | wc -l",
    );
    o.assert_ok("git init + commit");
    assert_eq!(o.stdout.trim(), "1");
    // A second run: .git/hooks and .git/config now exist and are protected,
    // and committing still works.
    let o = h.sh(
        ws.path(),
        Profile::Write,
        "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b
         echo more >> f && git commit -qam second && git log --oneline | wc -l && git status --short | wc -l",
    );
    o.assert_ok("git commit with protected paths");
    assert_eq!(o.stdout.split_whitespace().collect::<Vec<_>>(), ["2", "0"]);
}

fn network_profile_reaches_host_loopback(h: &H) {
    // The documented behaviour of the network tier (host network for now).
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let ws = h.workspace();
    let o = h.py(
        ws.path(),
        Profile::Network,
        &format!(
            "import socket; socket.create_connection(('127.0.0.1', {port}), 3); print('connected')"
        ),
    );
    o.assert_ok("network tier");
    assert!(o.stdout.contains("connected"));
}

fn worktree_style_git_file(h: &H) {
    let ws = h.workspace();
    std::fs::write(
        ws.path().join(".git"),
        "gitdir: /nonexistent/.git/worktrees/x\n",
    )
    .unwrap();
    let o = h.sh(ws.path(), Profile::Write, "echo ok > f && cat f");
    o.assert_ok(".git file");
}

fn bad_requests_are_refused(h: &H) {
    use warden_daemon::sandbox::SandboxError;
    let ws = h.workspace();
    let cases: Vec<(&str, Box<dyn Fn(&mut warden_daemon::sandbox::SpawnRequest)>)> = vec![
        ("empty argv", Box::new(|r| r.argv.clear())),
        ("NUL in argv", Box::new(|r| r.argv[0] = "tr\0ue".into())),
        (
            "relative workspace",
            Box::new(|r| r.workspace = "rel".into()),
        ),
        (
            "missing workspace",
            Box::new(|r| r.workspace = "/nonexistent/ws".into()),
        ),
        ("cwd outside", Box::new(|r| r.cwd = "/etc".into())),
        (
            "workspace /",
            Box::new(|r| {
                r.workspace = "/".into();
                r.cwd = "/".into();
            }),
        ),
        (
            "NUL in env",
            Box::new(|r| r.env.push(("A".into(), "b\0c".into()))),
        ),
        ("bad limit", Box::new(|r| r.settings.limits.nproc = 0)),
    ];
    for (name, edit) in cases {
        let mut req = h.request(ws.path(), Profile::Write, &["true"]);
        edit(&mut req);
        match h.run_req(req, Duration::from_secs(10)) {
            Err(SandboxError::Refused(m)) => assert!(!m.is_empty(), "{name}"),
            Err(e) => panic!("{name}: expected Refused, got {e}"),
            Ok(o) => panic!("{name}: ran ({:?})", o.exit),
        }
    }
    // A command that does not exist is a set-up error naming execve.
    let req = h.request(ws.path(), Profile::Write, &["no-such-command-xyz"]);
    match h.run_req(req, Duration::from_secs(10)) {
        Err(SandboxError::Setup { stage, message }) => {
            assert_eq!(stage, "execve");
            assert!(message.contains("not found"), "{message}");
        }
        other => panic!("expected an execve error, got {:?}", other.map(|o| o.exit)),
    }
}

/// From a multithreaded process the helper is a re-executed `wardend`
/// (`Spawner::start_exec`); it confines exactly like the forked one.
fn reexec_helper_from_multithreaded_process(h: &H) {
    assert!(std::fs::read_dir("/proc/self/task").unwrap().count() > 1);
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_wardend-under-test"));
    let sp = warden_daemon::sandbox::Spawner::start_exec(exe).expect("re-exec helper");
    let ws = h.workspace();
    let o = h.rt.block_on(async {
        let (r, w) = nix::unistd::pipe().unwrap();
        let (_r2, w2) = nix::unistd::pipe().unwrap();
        let mut c = sp
            .spawn(
                h.request(ws.path(), Profile::Write, &["bash", "-c", "id -u; echo $$"]),
                w,
                w2,
            )
            .await
            .expect("spawn through the re-executed helper");
        let e = c.wait().await.unwrap();
        let mut out = String::new();
        use std::io::Read;
        std::fs::File::from(r).read_to_string(&mut out).unwrap();
        (e, out, c.landlock)
    });
    assert_eq!(o.0.code, Some(0));
    assert_eq!(
        o.1.split_whitespace().collect::<Vec<_>>(),
        ["1000", "2"],
        "uid 1000, pid 2 in its namespace"
    );
    assert_eq!(o.2, Enforcement::Full);
    assert_ne!(sp.helper_pid(), h.spawner.helper_pid());
}

/// `spawn_with_stdin`: a long-lived command reads requests from a pipe the
/// caller writes and answers each on stdout (the MCP stdio transport's
/// shape); it ends at end of input.
fn piped_stdin(h: &H) {
    use std::io::{BufRead, Write};
    let ws = h.workspace();
    let (in_r, in_w) = nix::unistd::pipe().unwrap();
    let (out_r, out_w) = nix::unistd::pipe().unwrap();
    let (_err_r, err_w) = nix::unistd::pipe().unwrap();
    let req = h.request(
        ws.path(),
        Profile::SafeRead,
        &[
            "bash",
            "-c",
            "while read -r l; do echo \"got $l\"; done; echo bye",
        ],
    );
    let (exit, lines) = h.rt.block_on(async {
        let mut c = h
            .spawner
            .spawn_with_stdin(req, in_r, out_w, err_w)
            .await
            .expect("spawn with stdin");
        let mut input = std::fs::File::from(in_w);
        let mut output = std::io::BufReader::new(std::fs::File::from(out_r));
        let mut lines = Vec::new();
        for word in ["one", "two"] {
            writeln!(input, "{word}").unwrap();
            let mut l = String::new();
            output.read_line(&mut l).unwrap();
            lines.push(l.trim_end().to_string());
        }
        drop(input);
        let mut l = String::new();
        output.read_line(&mut l).unwrap();
        lines.push(l.trim_end().to_string());
        (c.wait().await.unwrap(), lines)
    });
    assert_eq!(lines, ["got one", "got two", "bye"]);
    assert_eq!(exit.code, Some(0));
}

/// As root, the workspace must be idmappable; sysfs is not: clear refusal.
fn non_idmappable_workspace_is_refused(h: &H) {
    use warden_daemon::sandbox::SandboxError;
    if !nix::unistd::geteuid().is_root() {
        println!("  (not root: workspaces are plain bind mounts)");
        return;
    }
    let ws = std::path::Path::new("/sys/kernel");
    let req = h.request(ws, Profile::SafeRead, &["true"]);
    match h.run_req(req, Duration::from_secs(10)) {
        Err(SandboxError::Refused(m)) => assert!(m.contains("cannot be idmapped"), "{m}"),
        Err(e) => panic!("expected a refusal, got {e}"),
        Ok(o) => panic!("ran in a non-idmappable workspace: {:?}", o.exit),
    }
}

/// Network tiers can read the resolver configuration, also when
/// /etc/resolv.conf links into /run (systemd-resolved).
fn network_profile_sees_resolver(h: &H) {
    let ws = h.workspace();
    let host = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let o = h.sh(ws.path(), Profile::Network, "cat /etc/resolv.conf");
    o.assert_ok("resolv.conf");
    assert_eq!(o.stdout, host);
    // Nothing else of /run comes with it.
    let o = h.sh(
        ws.path(),
        Profile::Network,
        "ls /run 2>/dev/null | grep -v '^systemd$' | wc -l",
    );
    assert_eq!(o.stdout.trim(), "0", "{}", o.stdout);
}

/// Two executables named `wtool` in `p/b1` (body `first`) and `p/b2` (a
/// working script printing `from-b2`); returns a `PATH` with b1 first.
fn two_wtools(p: &std::path::Path, first: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    for (dir, body) in [("b1", first), ("b2", "#!/bin/sh\necho from-b2\n")] {
        std::fs::create_dir(p.join(dir)).unwrap();
        let f = p.join(dir).join("wtool");
        std::fs::write(&f, body).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    format!(
        "{}:{}:/usr/bin:/bin",
        p.join("b1").display(),
        p.join("b2").display()
    )
}

/// `argv[0]` resolves through PATH as a shell would: the first match is
/// the program. A first match that is not an executable format (a script
/// without `#!`) ends the search with an `execve` error, never falling
/// through to a later match of the same name; with a fallback (the daemon
/// gives `bash -c CMD` behind a command it runs without a shell), the
/// fallback runs instead, and bash runs the script.
fn path_search_stops_at_the_first_match(h: &H) {
    let ws = h.workspace();
    let p = ws.path();
    let path = two_wtools(p, "echo from-b1\n");
    let mut req = h.request(p, Profile::Write, &["wtool"]);
    req.env.retain(|(k, _)| k != "PATH");
    req.env.push(("PATH".into(), path.clone()));
    match h.run_req(req, Duration::from_secs(30)) {
        Err(SandboxError::Setup { stage, .. }) => assert_eq!(stage, "execve"),
        Ok(o) => panic!("ran a later match: {} {}", o.stdout, o.stderr),
        Err(e) => panic!("{e}"),
    }
    // Through a shell, the first match runs as a script.
    let mut req = h.request(p, Profile::Write, &["bash", "-c", "wtool"]);
    req.env.retain(|(k, _)| k != "PATH");
    req.env.push(("PATH".into(), path.clone()));
    let shell = req.clone();
    let o = h.run_req(req, Duration::from_secs(30)).unwrap();
    assert_eq!(o.stdout.trim(), "from-b1", "{}", o.stderr);
    // The same through the fallback of a direct request.
    let mut req = shell.clone();
    req.argv = vec!["wtool".into()];
    req.fallback = Some(Fallback {
        argv: shell.argv.clone(),
        env: shell.env.clone(),
    });
    let o = h.run_req(req, Duration::from_secs(30)).unwrap();
    assert_eq!(o.stdout.trim(), "from-b1", "{}", o.stderr);
    // A program the sandbox cannot find: bash, the fallback, says so.
    let mut req = shell.clone();
    req.argv = vec!["warden-no-such-program".into()];
    req.fallback = Some(Fallback {
        argv: vec!["bash".into(), "-c".into(), "warden-no-such-program".into()],
        env: shell.env,
    });
    let o = h.run_req(req, Duration::from_secs(30)).unwrap();
    assert_eq!(o.exit.code, Some(127), "{}", o.stderr);
    assert!(o.stderr.contains("command not found"), "{}", o.stderr);
}

/// A command run without bash runs what `bash -c` would run: when the
/// first `PATH` match exists but cannot start (its `#!` interpreter is
/// missing: ENOENT; or EACCES, ETXTBSY), bash stops there and reports the
/// error, so the direct path must not run a later program of the same name.
fn direct_path_runs_only_what_bash_would(h: &H) {
    let ws = h.workspace();
    let p = ws.path();
    let path = two_wtools(p, "#!/nonexistent/interpreter\necho from-b1\n");
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

/// [`Spawner::spawn_gated`]: the command is set up, confined, and waits
/// before execve; nothing of it runs until its gate opens (the daemon takes
/// the pre-checkpoint and writes `exec_start` meanwhile). Past the gate, a
/// program that cannot be executed is reported on the command's stderr
/// with a shell's status. Run twice: the second time on a warm sandbox.
fn gated_spawn_runs_only_through_its_gate(h: &H) {
    let ws = h.workspace();
    let p = ws.path();
    // Spawns `argv` gated, runs `at_gate` on it, then waits: its exit, and
    // its stderr.
    let gated = |argv: &[&str], at_gate: &dyn Fn(&mut warden_daemon::sandbox::Child)| {
        let req = h.request(p, Profile::Write, argv);
        h.rt.block_on(async {
            let (_or, ow) = pipe();
            let (er, ew) = pipe();
            let mut c = h
                .spawner
                .spawn_gated(req, ow, ew)
                .await
                .expect("gated spawn");
            at_gate(&mut c);
            let exit = c.wait().await.unwrap();
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::fs::File::from(er), &mut s).unwrap();
            (exit, s)
        })
    };
    for round in 0..2 {
        let marker = p.join(format!("ran-{round}"));
        let (exit, _) = gated(&["touch", marker.to_str().unwrap()], &|c| {
            // A command that ignored its gate would have run by now (it
            // takes a few ms); this one waits for as long as it is held.
            std::thread::sleep(Duration::from_millis(300));
            assert!(
                !marker.exists(),
                "round {round}: the command ran before its gate opened"
            );
            c.open_gate().expect("open the gate");
        });
        assert_eq!(exit.code, Some(0), "round {round}");
        assert!(marker.exists(), "round {round}: the command did not run");
    }
    // Killed at the gate: it never runs.
    let marker = p.join("never");
    let (exit, _) = gated(&["touch", marker.to_str().unwrap()], &|c| c.kill());
    assert_eq!(exit.signal, Some(libc::SIGKILL));
    assert!(!marker.exists());
    // Not found, past the gate.
    let (exit, stderr) = gated(&["warden-no-such-program"], &|c| c.open_gate().unwrap());
    assert_eq!(exit.code, Some(127), "{stderr}");
    assert_eq!(
        stderr,
        "warden: warden-no-such-program: command not found\n"
    );
}

fn main() {
    main_with(&[
        (
            "direct_path_runs_only_what_bash_would",
            direct_path_runs_only_what_bash_would,
        ),
        (
            "gated_spawn_runs_only_through_its_gate",
            gated_spawn_runs_only_through_its_gate,
        ),
        (
            "path_search_stops_at_the_first_match",
            path_search_stops_at_the_first_match,
        ),
        ("basics", basics),
        ("identity_and_view", identity_and_view),
        ("common_shell_idioms", common_shell_idioms),
        ("workspace_write_and_owner", workspace_write_and_owner),
        ("scratch_dirs_and_home", scratch_dirs_and_home),
        ("loopback_server", loopback_server),
        ("python_unittest", python_unittest),
        (
            "asyncio_threads_and_unix_sockets",
            asyncio_threads_and_unix_sockets,
        ),
        ("mmap_two_gib", mmap_two_gib),
        ("git_commit", git_commit),
        (
            "network_profile_reaches_host_loopback",
            network_profile_reaches_host_loopback,
        ),
        (
            "network_profile_sees_resolver",
            network_profile_sees_resolver,
        ),
        ("worktree_style_git_file", worktree_style_git_file),
        ("bad_requests_are_refused", bad_requests_are_refused),
        (
            "reexec_helper_from_multithreaded_process",
            reexec_helper_from_multithreaded_process,
        ),
        (
            "non_idmappable_workspace_is_refused",
            non_idmappable_workspace_is_refused,
        ),
        ("cargo_test_offline", cargo_test_offline),
        ("piped_stdin", piped_stdin),
    ]);
}
