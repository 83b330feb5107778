//! "Ordinary work still runs" inside the sandbox (issue #3): the other side of
//! the attack suite. Driven through the daemon library's `Spawner` directly;
//! see `sandbox_common` for how the spawn helper is started.

mod sandbox_common;

use sandbox_common::{main_with, H};
use std::time::Duration;
use warden_daemon::sandbox::{Enforcement, Profile};

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

fn main() {
    main_with(&[
        ("basics", basics),
        ("identity_and_view", identity_and_view),
        ("workspace_write_and_owner", workspace_write_and_owner),
        ("scratch_dirs_and_home", scratch_dirs_and_home),
        ("loopback_server", loopback_server),
        ("python_unittest", python_unittest),
        ("cargo_test_offline", cargo_test_offline),
    ]);
}
