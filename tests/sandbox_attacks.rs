//! Escape attempts against the sandbox (issue #3, "Attack suite"). Each case
//! asserts that the attack failed and that a host marker is untouched, and
//! names the real-world escape it stands for. Driven through the daemon
//! library's `Spawner` (see `sandbox_common`).

mod sandbox_common;

use sandbox_common::{assert_marker, main_with, H};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use warden_daemon::sandbox::{Profile, SandboxSettings, SpawnRequest};

/// A request whose policy binds the host marker dir read-only, so the
/// attacks below target a host file the command can actually see.
fn with_ro_host(h: &H, ws: &Path, profile: Profile, script: &str) -> SpawnRequest {
    let mut req = h.request(ws, profile, &["bash", "-c", script]);
    req.settings = SandboxSettings {
        read_only_paths: vec![h.host.path().to_path_buf()],
        ..SandboxSettings::default()
    };
    req
}

fn run(h: &H, req: SpawnRequest) -> sandbox_common::Out {
    h.run_req(req, Duration::from_secs(60)).expect("spawn")
}

/// Host files outside the workspace cannot be written, truncated, appended
/// to, renamed or hard-linked (and then written) — the classic "agent edits
/// ~/.bashrc" persistence, and hard-link tricks as in CVE-2021-30465-style
/// mount races.
fn write_truncate_append_rename_link_outside(h: &H) {
    let m = h.marker("marker", "host");
    let ws = h.workspace();
    let mp = m.display();
    let script = format!(
        "fails=0
         echo x > {mp} 2>/dev/null || fails=$((fails+1))
         : > {mp} 2>/dev/null || fails=$((fails+1))
         truncate -s 0 {mp} 2>/dev/null || fails=$((fails+1))
         echo x >> {mp} 2>/dev/null || fails=$((fails+1))
         mv {mp} {mp}.moved 2>/dev/null || fails=$((fails+1))
         mv {mp} ./stolen 2>/dev/null || fails=$((fails+1))
         ln {mp} ./hard 2>/dev/null || fails=$((fails+1))
         rm -f {mp} 2>/dev/null; test -e {mp} && fails=$((fails+1))
         echo fails=$fails"
    );
    let o = run(h, with_ro_host(h, ws.path(), Profile::Write, &script));
    assert_eq!(o.stdout.trim(), "fails=8", "{} {}", o.stdout, o.stderr);
    assert_marker(&m, "host");
    // And the host dir is simply invisible without the policy path.
    let o = h.sh(
        ws.path(),
        Profile::Write,
        &format!("cat {mp} || echo x > {mp}; echo done"),
    );
    assert!(!o.stdout.contains("host"));
    assert_marker(&m, "host");
}

/// Secrets in the daemon user's home (SSH keys, cloud credentials: the
/// target of every "exfiltrate ~/.aws" prompt injection) are not readable.
fn read_host_home_file(h: &H) {
    let home = PathBuf::from(std::env::var("HOME").unwrap());
    let secret = home.join(format!(".warden-attack-secret-{}", std::process::id()));
    std::fs::write(&secret, "s3cr3t").unwrap();
    let ws = h.workspace();
    let o = h.sh(
        ws.path(),
        Profile::Network,
        &format!("cat {} ; ls -a $HOME", secret.display()),
    );
    let _ = std::fs::remove_file(&secret);
    assert!(!o.stdout.contains("s3cr3t"), "{}", o.stdout);
    assert!(!o.stdout.contains(".warden-attack-secret"), "{}", o.stdout);
}

/// A symlink planted in the workspace pointing outside (CVE-2021-30465 in
/// runc, "symlink-exchange" attacks on tools that write through links).
fn write_through_symlink(h: &H) {
    let m = h.marker("linked", "host");
    let ws = h.workspace();
    std::os::unix::fs::symlink(&m, ws.path().join("link")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", ws.path().join("pw")).unwrap();
    let o = run(
        h,
        with_ro_host(
            h,
            ws.path(),
            Profile::Write,
            "echo pwned > link; echo pwned >> pw; cat link",
        ),
    );
    assert!(!o.stdout.contains("pwned"), "{}", o.stdout);
    assert_marker(&m, "host");
    // Without the policy path, the target is not even there: the write
    // lands nowhere on the host.
    h.sh(ws.path(), Profile::Write, "echo pwned > link");
    assert_marker(&m, "host");
}

/// `/proc/self/root`, `/proc/1/root` and the daemon's `/proc/<pid>/` (the
/// "procfs magic link" family: CVE-2019-5736 overwrote runc via
/// /proc/self/exe; /proc/1/root escapes from shared pid namespaces).
fn proc_magic_links(h: &H) {
    let m = h.marker("procmarker", "host");
    let ws = h.workspace();
    let me = std::process::id();
    let mp = m.display();
    let script = format!(
        "cat /proc/self/root{mp} 2>/dev/null && echo LEAK1
         cat /proc/1/root{mp} 2>/dev/null && echo LEAK2
         ls /proc/1/root/ 2>/dev/null && echo LEAK3
         cat /proc/{me}/environ 2>/dev/null && echo LEAK4
         ls /proc/{me}/root/ 2>/dev/null && echo LEAK5
         echo x > /proc/1/root/tmp/x 2>/dev/null && echo LEAK6
         cat /proc/1/environ 2>/dev/null && echo LEAK7
         tr '\\0' ' ' < /proc/1/cmdline | grep -q -e '--socket' -e '--state-dir' -e sandbox_attacks && echo LEAK8
         ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '"
    );
    let o = h.sh(ws.path(), Profile::Write, &script);
    assert!(!o.stdout.contains("LEAK"), "{}", o.stdout);
    // Only the namespace's own processes are visible: init (1), the shell, ls.
    let pids: Vec<u32> = o
        .stdout
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert!(pids.iter().all(|p| *p < 100), "host pids visible: {pids:?}");
    assert!(!pids.contains(&me));
    assert_marker(&m, "host");
}

/// `cwd` through `/proc/self/fd/N` (runc CVE-2024-21626 "Leaky Vessels": a
/// leaked fd of a host directory became the container's cwd).
fn cwd_through_proc_fd(h: &H) {
    let m = h.marker("fdmarker", "host");
    // A host directory fd, deliberately without O_CLOEXEC.
    let dir = nix::fcntl::open(
        h.host.path(),
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY,
        nix::sys::stat::Mode::empty(),
    )
    .unwrap();
    let ws = h.workspace();
    let script = "for f in /proc/self/fd/*; do (cd $f 2>/dev/null && ls fdmarker 2>/dev/null && echo LEAK $f); (cd $f/.. 2>/dev/null && ls 2>/dev/null | grep -q fdmarker && echo LEAK2 $f); done; ls /proc/self/fd | tr '\\n' ' '";
    let o = h.sh(ws.path(), Profile::Write, script);
    drop(dir);
    assert!(!o.stdout.contains("LEAK"), "{}", o.stdout);
    assert_marker(&m, "host");
}

/// Host Unix sockets: a pathname socket (docker.sock, ssh-agent, the
/// daemon's own socket: "docker.sock mounted in a container" escapes) and an
/// abstract one (shared-netns abstract sockets, e.g. X11 / containerd-shim
/// CVE-2020-15257).
fn host_unix_sockets(h: &H) {
    use std::os::linux::net::SocketAddrExt;
    let path = h.host.path().join("host.sock");
    let _l = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let name = format!("warden-attack-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _a = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let ws = h.workspace();
    let code = format!(
        r#"
import socket
for label, target in (("path", "{}"), ("abstract", "\0{name}")):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(target); print("LEAK", label)
    except OSError as e:
        print("blocked", label, e.errno)
"#,
        path.display()
    );
    for profile in [Profile::Write, Profile::Network] {
        let o = h.py(ws.path(), profile, &code);
        assert!(
            !o.stdout.contains("LEAK"),
            "{profile:?}: {} {}",
            o.stdout,
            o.stderr
        );
        assert_eq!(o.stdout.matches("blocked").count(), 2, "{}", o.stderr);
    }
}

/// TCP and MPTCP to a host loopback listener from a no-network tier
/// (SSRF against local admin APIs, databases, the cloud metadata proxy).
fn loopback_from_no_network_tier(h: &H) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let ws = h.workspace();
    let code = format!(
        r#"
import socket
s = socket.socket()
try:
    s.settimeout(3); s.connect(("127.0.0.1", {port})); print("LEAK tcp")
except OSError as e:
    print("blocked tcp", e.errno)
try:
    m = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)
    m.settimeout(3); m.connect(("127.0.0.1", {port})); print("LEAK mptcp")
except OSError as e:
    print("blocked mptcp", e.errno)
"#
    );
    for profile in [Profile::SafeRead, Profile::Write] {
        let o = h.py(ws.path(), profile, &code);
        assert!(!o.stdout.contains("LEAK"), "{} {}", o.stdout, o.stderr);
        assert!(
            o.stdout.contains("blocked tcp") && o.stdout.contains("blocked mptcp"),
            "{}",
            o.stderr
        );
    }
    l.set_nonblocking(true).unwrap();
    assert!(
        l.accept().is_err(),
        "a connection reached the host listener"
    );
}

/// `kill` / `ptrace` of a host process (escaping by hijacking the agent's
/// own processes; ptrace injection into a neighbour).
fn kill_and_ptrace_host_pid(h: &H) {
    let mut victim = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    let vp = victim.id();
    let ws = h.workspace();
    let code = format!(
        r#"
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
for pid in ({vp}, 1):
    try:
        os.kill(pid, signal.SIGKILL); print("LEAK kill", pid)
    except OSError as e:
        print("blocked kill", pid, e.errno)
r = libc.ptrace(16, {vp}, 0, 0)  # PTRACE_ATTACH
print("ptrace", r, ctypes.get_errno())
r = libc.ptrace(16, 1, 0, 0)
print("ptrace1", r, ctypes.get_errno())
"#
    );
    let o = h.py(ws.path(), Profile::Write, &code);
    assert!(!o.stdout.contains("LEAK"), "{}", o.stdout);
    assert!(
        o.stdout.contains("ptrace -1 1\n"),
        "ptrace must be EPERM: {} {}",
        o.stdout,
        o.stderr
    );
    assert!(o.stdout.contains("ptrace1 -1 1\n"), "{}", o.stdout);
    assert!(
        victim.try_wait().unwrap().is_none(),
        "host process was killed"
    );
    victim.kill().unwrap();
    victim.wait().unwrap();
}

/// Syscall-level escapes, each answered by seccomp: `unshare(CLONE_NEWUSER)`
/// (regaining capabilities: the first step of CVE-2022-0185 and most
/// user-namespace kernel exploits), `mount` (undoing a read-only bind),
/// `io_uring_setup` (CVE-2022-29582 / CVE-2023-2598 and seccomp bypass),
/// an x32 syscall (filter bypass through the second ABI), clone with
/// CLONE_NEWUSER, and TIOCSTI (typing into the user's terminal,
/// CVE-2016-7545 / CVE-2017-5226 in bubblewrap), with the ioctl number's
/// upper 32 bits set to dodge a 64-bit comparison.
fn syscall_escapes(h: &H) {
    let ws = h.workspace();
    let code = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(*[ctypes.c_long(a) for a in args])
    print(name, r, ctypes.get_errno())
call("unshare_user", 272, 0x10000000)
call("unshare_ns", 272, 0x00020000)
call("setns", 308, 0, 0)
call("clone_newuser", 56, 0x10000000 | 17, 0, 0, 0, 0)
call("mount", 165, 0, 0, 0, 0, 0)
call("umount2", 166, 0, 0)
call("io_uring_setup", 425, 1, 0)
call("x32_getpid", 0x40000000 | 39)
call("bpf", 321, 0, 0, 0)
call("keyctl", 250, 0, 0)
call("open_by_handle_at", 304, 0, 0, 0)
call("userfaultfd", 323, 0)
call("clone3", 435, 0, 0)
fd = os.open("/dev/null", os.O_RDONLY)
c = ctypes.c_char(b"x")
call("tiocsti", 16, fd, 0x5412, ctypes.addressof(c))
call("tiocsti_hi", 16, fd, 0x100005412, ctypes.addressof(c))
call("tioclinux", 16, fd, 0x541C, ctypes.addressof(c))
"#;
    let o = h.py(ws.path(), Profile::Write, code);
    let expect = [
        ("unshare_user", "1"),
        ("unshare_ns", "1"),
        ("setns", "1"),
        ("clone_newuser", "1"),
        ("mount", "1"),
        ("umount2", "1"),
        ("io_uring_setup", "38"),
        ("x32_getpid", "1"),
        ("bpf", "1"),
        ("keyctl", "1"),
        ("open_by_handle_at", "1"),
        ("userfaultfd", "1"),
        ("clone3", "38"),
        ("tiocsti", "1"),
        ("tiocsti_hi", "1"),
        ("tioclinux", "1"),
    ];
    for (name, errno) in expect {
        let line = o
            .stdout
            .lines()
            .find(|l| l.split(' ').next() == Some(name))
            .unwrap_or_else(|| panic!("{name} missing: {} {}", o.stdout, o.stderr));
        assert_eq!(line, format!("{name} -1 {errno}"), "{name}: {}", o.stdout);
    }
    // The tools too.
    let o = h.sh(ws.path(), Profile::Write, "unshare -U true && echo LEAK1; unshare -r true && echo LEAK2; mount -t tmpfs none /tmp && echo LEAK3; echo done");
    assert!(!o.stdout.contains("LEAK"), "{}", o.stdout);
}

/// Socket families outside the allow list (netlink: CVE-2022-1015
/// nf_tables; packet sockets: CVE-2020-14386; raw sockets; SCTP).
fn socket_families(h: &H) {
    let ws = h.workspace();
    let code = r#"
import socket
for label, args in (("netlink", (16, socket.SOCK_RAW, 0)), ("packet", (17, socket.SOCK_RAW, 0)),
                    ("raw", (socket.AF_INET, socket.SOCK_RAW, 1)), ("sctp", (socket.AF_INET, socket.SOCK_STREAM, 132)),
                    ("vsock", (40, socket.SOCK_STREAM, 0)), ("mptcp6", (socket.AF_INET6, socket.SOCK_STREAM, 262))):
    try:
        socket.socket(*args); print("LEAK", label)
    except OSError as e:
        print("blocked", label, e.errno)
socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); print("allowed ok")
"#;
    for profile in [Profile::Write, Profile::Network] {
        let o = h.py(ws.path(), profile, code);
        assert!(!o.stdout.contains("LEAK"), "{}", o.stdout);
        assert_eq!(
            o.stdout.matches("blocked").count(),
            6,
            "{} {}",
            o.stdout,
            o.stderr
        );
        assert!(o.stdout.contains("allowed ok"));
    }
}

/// Planting a git hook (code that runs on the user's next `git commit`
/// outside the sandbox: the standard persistence of a compromised agent),
/// including by renaming `.git` or `.git/hooks` away and recreating them.
fn git_hooks_protected(h: &H) {
    let ws = h.workspace();
    let p = ws.path();
    std::fs::create_dir_all(p.join(".git/hooks")).unwrap();
    std::fs::write(p.join(".git/hooks/pre-commit.sample"), "sample").unwrap();
    std::fs::write(p.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(p.join(".envrc"), "export A=1\n").unwrap();
    let script = "echo evil > .git/hooks/pre-commit && echo LEAK1
        echo evil >> .git/hooks/pre-commit.sample && echo LEAK2
        echo '[core] hooksPath=/tmp' >> .git/config && echo LEAK3
        mv .git/hooks .git/h2 && echo LEAK4
        mv .git .git2 && echo LEAK5
        rm -rf .git/hooks && echo LEAK6
        echo evil > .envrc && echo LEAK7
        mkdir -p .vscode && echo '{}' > .vscode/tasks.json; echo done";
    let o = h.sh(p, Profile::Write, script);
    assert!(!o.stdout.contains("LEAK"), "{}\n{}", o.stdout, o.stderr);
    assert!(!p.join(".git/hooks/pre-commit").exists());
    assert_marker(&p.join(".git/hooks/pre-commit.sample"), "sample");
    assert_marker(&p.join(".git/config"), "[core]\n");
    assert_marker(&p.join(".envrc"), "export A=1\n");
    assert!(p.join(".git/hooks").is_dir() && !p.join(".git2").exists());
}

/// The helper builds each next sandbox ahead of its command (a warm
/// sandbox), while the host may change in between. A warm sandbox must only
/// serve a command it was built for: the host swapping `.git/hooks` for a
/// new directory (the old one stays protected, the new one would not) or
/// creating `.envrc` after it was built must give a sandbox that protects
/// them, and nothing of an earlier command's private `/tmp` or `/dev/shm`
/// may reach a later one (state leaking between agent steps).
fn warm_sandboxes_follow_host_changes(h: &H) {
    let ws = h.workspace();
    let p = ws.path();
    std::fs::create_dir_all(p.join(".git/hooks")).unwrap();
    // Built for this workspace and profile after this command ends (the
    // pauses only make the warm path likely; the assertions hold either way).
    let o = h.sh(
        p,
        Profile::Write,
        "echo secret > /tmp/x; echo secret > /dev/shm/y; echo ok",
    );
    assert!(o.stdout.contains("ok"), "{} {}", o.stdout, o.stderr);
    std::thread::sleep(Duration::from_millis(300));
    let o = h.sh(p, Profile::Write, "cat /tmp/x /dev/shm/y 2>&1; echo done");
    assert!(!o.stdout.contains("secret"), "{}", o.stdout);
    std::thread::sleep(Duration::from_millis(300));
    std::fs::rename(p.join(".git/hooks"), p.join(".git/hooks.old")).unwrap();
    std::fs::create_dir(p.join(".git/hooks")).unwrap();
    let o = h.sh(
        p,
        Profile::Write,
        "echo evil > .git/hooks/pre-commit && echo LEAK; echo done",
    );
    assert!(!o.stdout.contains("LEAK"), "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("done"), "{}\n{}", o.stdout, o.stderr);
    assert!(!p.join(".git/hooks/pre-commit").exists());
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(p.join(".envrc"), "export A=1\n").unwrap();
    let o = h.sh(
        p,
        Profile::Write,
        "echo evil > .envrc && echo LEAK; echo done",
    );
    assert!(!o.stdout.contains("LEAK"), "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("done"), "{}\n{}", o.stdout, o.stderr);
    assert_marker(&p.join(".envrc"), "export A=1\n");
    // The host replacing a protected file the way git does (write a lock
    // file, rename it over): the old inode is freed, and ext4 hands its
    // number to the next new file, so a later replacement can bring the
    // very inode number the warm sandbox was built with back. Its mount on
    // the old file is gone either way.
    std::fs::write(p.join(".git/config"), "[core]\n").unwrap();
    for i in 0..4 {
        std::thread::sleep(Duration::from_millis(300));
        // Two edits in a row (as one `git config` run often makes).
        let text = format!("[core]\n# host edit {i}\n");
        for _ in 0..2 {
            std::fs::write(p.join(".git/config.lock"), &text).unwrap();
            std::fs::rename(p.join(".git/config.lock"), p.join(".git/config")).unwrap();
        }
        let o = h.sh(
            p,
            Profile::Write,
            "echo '[core] fsmonitor=evil' >> .git/config && echo LEAK; echo done",
        );
        assert!(
            !o.stdout.contains("LEAK"),
            "round {i}: {}\n{}",
            o.stdout,
            o.stderr
        );
        assert!(o.stdout.contains("done"), "{}\n{}", o.stdout, o.stderr);
        assert_marker(&p.join(".git/config"), &text);
    }
}

/// A protected path that crosses a symlink into the workspace fails closed
/// (otherwise `.git -> real-git` would leave `real-git/hooks` writable).
fn protected_path_through_symlink_fails_closed(h: &H) {
    let ws = h.workspace();
    let p = ws.path();
    std::fs::create_dir_all(p.join("real-git/hooks")).unwrap();
    std::os::unix::fs::symlink("real-git", p.join(".git")).unwrap();
    let req = h.request(
        p,
        Profile::Write,
        &["bash", "-c", "echo evil > real-git/hooks/pre-commit"],
    );
    let r = h.run_req(req, Duration::from_secs(30));
    assert!(r.is_err(), "spawn should be refused");
    assert!(!p.join("real-git/hooks/pre-commit").exists());
    // .git pointing outside the workspace (worktrees) still works.
    let ws2 = h.workspace();
    std::os::unix::fs::symlink("/nonexistent/gitdir", ws2.path().join(".git")).unwrap();
    h.sh(ws2.path(), Profile::Write, "echo ok > f")
        .assert_ok("worktree-style .git");
}

/// The safe-read tier cannot write the workspace (a misclassified
/// `sed -i`, `find -exec`, `git` config write).
fn safe_read_workspace_is_read_only(h: &H) {
    let ws = h.workspace();
    let f = ws.path().join("file");
    std::fs::write(&f, "orig").unwrap();
    let o = h.sh(ws.path(), Profile::SafeRead, "echo x > file && echo LEAK1; echo y > new && echo LEAK2; rm -f file && echo LEAK3; mkdir d && echo LEAK4; cat file");
    assert!(!o.stdout.contains("LEAK"), "{}", o.stdout);
    assert!(o.stdout.contains("orig"));
    assert_marker(&f, "orig");
    assert!(!ws.path().join("new").exists());
}

/// Host `/dev/shm` and `/var/tmp` (shared scratch: planting files for the
/// user's other processes, shm-based IPC hijacks).
fn host_dev_shm_and_var_tmp(h: &H) {
    let id = std::process::id();
    let shm = PathBuf::from(format!("/dev/shm/warden-attack-{id}"));
    let vt = PathBuf::from(format!("/var/tmp/warden-attack-{id}"));
    std::fs::write(&shm, "host").unwrap();
    std::fs::write(&vt, "host").unwrap();
    let ws = h.workspace();
    let o = h.sh(
        ws.path(),
        Profile::Write,
        &format!("cat {0} {1}; echo evil > {0}; echo evil > {1}; echo new > /dev/shm/new-{id}; echo done", shm.display(), vt.display()),
    );
    assert!(
        !o.stdout.contains("host"),
        "host files visible: {}",
        o.stdout
    );
    assert_marker(&shm, "host");
    assert_marker(&vt, "host");
    assert!(!Path::new(&format!("/dev/shm/new-{id}")).exists());
    let _ = std::fs::remove_file(&shm);
    let _ = std::fs::remove_file(&vt);
}

/// With the daemon as root, the command still cannot read what only root
/// may read (`/etc/shadow`, host keys): it runs as an unprivileged uid
/// outside its namespace.
fn etc_shadow_as_root(h: &H) {
    if !nix::unistd::geteuid().is_root() {
        println!("  (daemon not root: /etc/shadow is unreadable to us anyway)");
    }
    let ws = h.workspace();
    let o = h.sh(ws.path(), Profile::Write, "cat /etc/shadow && echo LEAK; head -c1 /etc/ssh/ssh_host_*_key 2>/dev/null && echo LEAK2; cat /proc/self/uid_map");
    assert!(!o.stdout.contains("LEAK"), "{}", o.stdout);
    assert!(!o.stdout.contains("root:"), "{}", o.stdout);
    if nix::unistd::geteuid().is_root() {
        assert!(!o.stdout.contains(" 0 "), "uid 0 mapped: {}", o.stdout);
    }
}

/// A fork bomb hits the per-sandbox process limit and dies with the
/// command; the host can still spawn.
fn fork_bomb(h: &H) {
    let ws = h.workspace();
    let mut req = h.request(
        ws.path(),
        Profile::Write,
        &["bash", "-c", "b() { b | b & }; b; sleep 2; echo survived"],
    );
    req.settings.limits.nproc = 64;
    let t = Instant::now();
    let o = h.run_req(req, Duration::from_secs(5)).unwrap();
    assert!(t.elapsed() < Duration::from_secs(20));
    assert!(
        o.stderr.contains("fork") || o.stderr.contains("Resource temporarily unavailable"),
        "the bomb never hit the process limit: {}",
        o.stderr.chars().take(400).collect::<String>()
    );
    // No bomb process outlives the command (as root, sandbox processes
    // have their own host uid, so they can be counted; only those below our
    // own spawn helper: other daemons on the machine use the same uid).
    if nix::unistd::geteuid().is_root() {
        let uid = warden_daemon::sandbox::DEFAULT_ROOT_HOST_UID.to_string();
        let helper = h.spawner.helper_pid().to_string();
        let field = |st: &str, k: &str| -> Option<String> {
            st.lines()
                .find(|l| l.starts_with(k))
                .and_then(|l| l.split_whitespace().nth(1).map(String::from))
        };
        let ours = |st: &str| {
            let mut ppid = field(st, "PPid:");
            for _ in 0..4096 {
                match ppid.as_deref() {
                    None | Some("0") | Some("1") => return false,
                    Some(p) if p == helper => return true,
                    Some(p) => {
                        ppid = std::fs::read_to_string(format!("/proc/{p}/status"))
                            .ok()
                            .and_then(|s| field(&s, "PPid:"))
                    }
                }
            }
            false
        };
        let procs: Vec<(String, String)> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("status")).ok())
            .filter(|st| field(st, "Uid:").as_deref() == Some(uid.as_str()) && ours(st))
            .filter_map(|st| Some((field(&st, "Pid:")?, field(&st, "PPid:")?)))
            .collect();
        // The one warm sandbox the helper may hold for the next command (a
        // childless init right below the helper) is not a leftover.
        let warm = |(pid, ppid): &(String, String)| {
            ppid == &helper && !procs.iter().any(|(_, pp)| pp == pid)
        };
        let idle = procs.iter().filter(|p| warm(p)).count();
        let left = procs.len() - idle.min(1);
        assert_eq!(
            left, 0,
            "{left} sandbox processes outlived the command: {procs:?}"
        );
    }
    // The host and the sandbox still work.
    assert!(std::process::Command::new("true")
        .status()
        .unwrap()
        .success());
    h.sh(ws.path(), Profile::Write, "true")
        .assert_ok("after fork bomb");
}

/// A memory bomb fails at the data limit instead of taking the host down.
fn memory_bomb(h: &H) {
    let ws = h.workspace();
    let mut req = h.request(
        ws.path(),
        Profile::Write,
        &["python3", "-c", "b = bytearray(3 << 30); print('LEAK')"],
    );
    req.settings.limits.data_bytes = 1 << 30;
    let o = h.run_req(req, Duration::from_secs(30)).unwrap();
    assert!(!o.stdout.contains("LEAK"));
    assert!(o.stderr.contains("MemoryError"), "{}", o.stderr);
}

/// A disk-filling write stops at the file size limit, and scratch tmpfs at
/// its size (filling the host disk or RAM).
fn disk_filling_write(h: &H) {
    let ws = h.workspace();
    let mut req = h.request(
        ws.path(),
        Profile::Write,
        &[
            "bash",
            "-c",
            "head -c 64M /dev/zero > big; head -c 64M /dev/zero > /tmp/big; ls -l /tmp/big",
        ],
    );
    req.settings.limits.fsize_bytes = 8 << 20;
    req.settings.limits.tmpfs_bytes = 16 << 20;
    let o = h.run_req(req, Duration::from_secs(30)).unwrap();
    let size = std::fs::metadata(ws.path().join("big"))
        .map(|m| m.len())
        .unwrap_or(0);
    assert!(size <= 8 << 20, "file grew to {size}");
    assert!(size > 0, "nothing was written at all: {}", o.stderr);
    assert!(!o.stdout.contains("67108864"), "{}", o.stdout);
}

/// An output flood is stopped by the wall-clock kill, and the pipes close
/// (no writer survives in the namespace).
fn output_flood(h: &H) {
    let ws = h.workspace();
    let req = h.request(
        ws.path(),
        Profile::Write,
        &["bash", "-c", "yes flood & yes flood >&2 & wait"],
    );
    let t = Instant::now();
    let o = h.run_req(req, Duration::from_secs(2)).unwrap();
    assert_eq!(o.exit.signal, Some(9), "{:?}", o.exit);
    assert!(t.elapsed() < Duration::from_secs(15));
}

/// A process that outlives the command (a daemonized backdoor, `setsid`,
/// double fork, `nohup`) is killed when the command ends.
fn process_outliving_the_command(h: &H) {
    let ws = h.workspace();
    let o = h.sh(ws.path(), Profile::Write, "(sleep 1; echo late > late1) & setsid bash -c 'sleep 1; echo late > late2' & nohup bash -c 'sleep 1; echo late > late3' >/dev/null 2>&1 & exit 0");
    o.assert_ok("outliving");
    std::thread::sleep(Duration::from_millis(2500));
    for f in ["late1", "late2", "late3"] {
        assert!(
            !ws.path().join(f).exists(),
            "{f} written after the command ended"
        );
    }
}

/// Fds of the daemon never reach the command (leaked fds: CVE-2024-21626,
/// and the classic inherited listening socket or log file).
fn inherited_fd(h: &H) {
    let m = h.marker("fdfile", "host");
    let f = std::fs::OpenOptions::new().append(true).open(&m).unwrap();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&f);
    nix::fcntl::fcntl(
        &f,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .unwrap();
    let ws = h.workspace();
    let code = format!(
        r#"
import os
try:
    os.write({raw}, b"evil"); print("LEAK")
except OSError as e:
    print("blocked", e.errno)
open_fds = []
for fd in range(3, 1024):
    try:
        os.fstat(fd); open_fds.append(fd)
    except OSError:
        pass
print("open", open_fds)
"#
    );
    let o = h.py(ws.path(), Profile::Write, &code);
    drop(f);
    assert!(!o.stdout.contains("LEAK"), "{}", o.stdout);
    assert!(
        o.stdout.contains("open []"),
        "fds beyond 0-2 reached the command: {} {}",
        o.stdout,
        o.stderr
    );
    assert_marker(&m, "host");
}

fn main() {
    main_with(&[
        (
            "write_truncate_append_rename_link_outside",
            write_truncate_append_rename_link_outside,
        ),
        ("read_host_home_file", read_host_home_file),
        ("write_through_symlink", write_through_symlink),
        ("proc_magic_links", proc_magic_links),
        ("cwd_through_proc_fd", cwd_through_proc_fd),
        ("host_unix_sockets", host_unix_sockets),
        (
            "loopback_from_no_network_tier",
            loopback_from_no_network_tier,
        ),
        ("kill_and_ptrace_host_pid", kill_and_ptrace_host_pid),
        ("syscall_escapes", syscall_escapes),
        ("socket_families", socket_families),
        ("git_hooks_protected", git_hooks_protected),
        (
            "warm_sandboxes_follow_host_changes",
            warm_sandboxes_follow_host_changes,
        ),
        (
            "protected_path_through_symlink_fails_closed",
            protected_path_through_symlink_fails_closed,
        ),
        (
            "safe_read_workspace_is_read_only",
            safe_read_workspace_is_read_only,
        ),
        ("host_dev_shm_and_var_tmp", host_dev_shm_and_var_tmp),
        ("etc_shadow_as_root", etc_shadow_as_root),
        ("fork_bomb", fork_bomb),
        ("memory_bomb", memory_bomb),
        ("disk_filling_write", disk_filling_write),
        ("output_flood", output_flood),
        (
            "process_outliving_the_command",
            process_outliving_the_command,
        ),
        ("inherited_fd", inherited_fd),
    ]);
}
