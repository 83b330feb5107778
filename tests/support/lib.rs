//! Shared helpers for the end-to-end suites: start a real `wardend` on its
//! own socket and state dir, talk to it with the typed client or the real
//! `warden` CLI, kill it with SIGKILL and restart it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use warden_client::{pb, Client};

/// A binary of this package, next to the test executable's `deps/` dir
/// (cargo builds a package's bins before its integration tests).
fn bin(name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(format!("CARGO_BIN_EXE_{name}")) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(|d| {
            if d.ends_with("deps") {
                d.parent()
            } else {
                Some(d)
            }
        })
        .expect("target dir");
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} is missing: run the tests with `cargo test` so it is built",
        p.display()
    );
    p
}

/// The `warden` CLI binary under test.
pub fn warden_bin() -> PathBuf {
    bin("warden-under-test")
}

/// The `wardend` binary under test.
pub fn wardend_bin() -> PathBuf {
    bin("wardend-under-test")
}

/// True when CI demands every sandbox mechanism (`WARDEN_REQUIRE_SANDBOX=1`):
/// a test needing a missing kernel feature must then fail, not skip.
pub fn require_sandbox() -> bool {
    std::env::var("WARDEN_REQUIRE_SANDBOX")
        .map(|v| v == "1")
        .unwrap_or(false)
}

/// The repository root (for `shared/` data next to it and `examples/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// A running daemon with its own temp socket and state dir.
pub struct Daemon {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    pub child: Option<Child>,
    pub extra_args: Vec<String>,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts `wardend` and waits until it answers.
    pub fn start() -> Daemon {
        Daemon::start_with(&[])
    }

    /// Starts `wardend` with extra arguments.
    pub fn start_with(args: &[&str]) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("wd-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let socket = dir.path().join("run/wardend.sock");
        let state_dir = dir.path().join("state");
        let log = dir.path().join("wardend.log");
        let mut d = Daemon {
            socket,
            state_dir,
            child: None,
            extra_args: args.iter().map(|s| s.to_string()).collect(),
            log,
            dir,
        };
        d.spawn();
        d
    }

    /// The command line that starts this daemon (for a second daemon on the
    /// same paths).
    pub fn command(&self) -> Command {
        let mut c = Command::new(wardend_bin());
        c.arg("--socket")
            .arg(&self.socket)
            .arg("--state-dir")
            .arg(&self.state_dir)
            .args(&self.extra_args);
        c.env_remove("WARDEN_SOCKET").env_remove("WARDEN_STATE_DIR");
        c
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log");
        let child = self
            .command()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn wardend");
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "wardend exited early ({st}): {}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "wardend did not come up: {}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGKILL, no cleanup (the socket file stays behind, stale).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait; returns the exit status.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(st)) = c.try_wait() {
                return Some(st);
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                return c.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts it again on the same socket and state dir.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// A typed client connected to this daemon.
    pub async fn client(&self) -> Client {
        Client::connect(&self.socket).await.expect("connect")
    }

    /// The `warden` CLI pointed at this daemon (never auto-starting another).
    pub fn warden(&self) -> Command {
        let mut c = Command::new(warden_bin());
        c.env("WARDEN_SOCKET", &self.socket)
            .env("WARDEN_STATE_DIR", &self.state_dir)
            .arg("--no-autostart");
        c.stdin(Stdio::null());
        c
    }

    /// Runs the CLI with `args` and returns its output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.warden().args(args).output().expect("run warden")
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// A fresh workspace directory (outside every daemon's state dir).
pub fn workspace() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ws-")
        .tempdir_in("/tmp")
        .expect("workspace")
}

/// Collected result of one Exec call through the typed client.
#[derive(Debug, Default)]
pub struct ExecResult {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit: Option<pb::ExitEvent>,
    pub events: Vec<pb::exec_event::Event>,
}

impl ExecResult {
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
    pub fn exit(&self) -> &pb::ExitEvent {
        self.exit.as_ref().expect("an exit event")
    }
}

/// Runs one command through the typed client and collects its events.
pub async fn exec(client: &Client, req: pb::ExecRequest) -> Result<ExecResult, tonic::Status> {
    use tokio_stream::StreamExt;
    let mut stream = client.exec_client().exec(req).await?.into_inner();
    let mut r = ExecResult::default();
    while let Some(ev) = stream.next().await {
        let ev = ev?.event.expect("event set");
        match &ev {
            pb::exec_event::Event::Stdout(c) => r.stdout.extend_from_slice(&c.data),
            pb::exec_event::Event::Stderr(c) => r.stderr.extend_from_slice(&c.data),
            pb::exec_event::Event::Exit(e) => r.exit = Some(e.clone()),
            _ => {}
        }
        r.events.push(ev);
    }
    Ok(r)
}

/// Opens a session on `ws` with the built-in policy `policy`.
pub async fn session(client: &Client, ws: &Path, policy: &str) -> String {
    client
        .create_session(ws, Some(policy))
        .await
        .expect("create session")
        .id
}

/// One request seen by [`MockHttp`].
#[derive(Debug, Clone)]
pub struct SeenRequest {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl SeenRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// A scripted HTTP/1.1 server on loopback: answers each request with the
/// next (status, extra headers, body) and records what it saw. After the
/// script runs out it answers 500.
pub struct MockHttp {
    pub addr: std::net::SocketAddr,
    pub seen: std::sync::Arc<std::sync::Mutex<Vec<SeenRequest>>>,
}

impl MockHttp {
    pub fn start(script: Vec<(u16, Vec<(String, String)>, String)>) -> MockHttp {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        std::thread::spawn(move || {
            let mut script = script.into_iter();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    continue;
                }
                let mut parts = line.split_whitespace();
                let method = parts.next().unwrap_or_default().to_string();
                let path = parts.next().unwrap_or_default().to_string();
                let mut headers = vec![];
                let mut len = 0usize;
                loop {
                    let mut h = String::new();
                    reader.read_line(&mut h).unwrap();
                    let h = h.trim_end();
                    if h.is_empty() {
                        break;
                    }
                    if let Some((k, v)) = h.split_once(':') {
                        if k.eq_ignore_ascii_case("content-length") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                        headers.push((k.trim().to_string(), v.trim().to_string()));
                    }
                }
                let mut body = vec![0; len];
                reader.read_exact(&mut body).unwrap();
                seen2.lock().unwrap().push(SeenRequest {
                    method,
                    path,
                    headers,
                    body: String::from_utf8_lossy(&body).into_owned(),
                });
                let (status, extra, body) = script.next().unwrap_or((
                    500,
                    vec![],
                    "{\"error\": \"script exhausted\"}".into(),
                ));
                let mut resp = format!("HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n", body.len());
                for (k, v) in extra {
                    resp.push_str(&format!("{k}: {v}\r\n"));
                }
                resp.push_str("\r\n");
                resp.push_str(&body);
                let _ = stream.write_all(resp.as_bytes());
            }
        });
        MockHttp { addr, seen }
    }

    pub fn requests(&self) -> Vec<SeenRequest> {
        self.seen.lock().unwrap().clone()
    }
}

/// The `exec_end` records of `d`'s audit log (`warden audit --json`), in
/// order.
pub fn exec_ends(d: &Daemon) -> Vec<serde_json::Value> {
    let o = d.warden().args(["audit", "--json"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["action"] == "exec_end")
        .collect()
}

/// The request id from a CLI message `... (request ID) ...`.
pub fn request_id_in(msg: &str) -> String {
    let start = msg.find("(request ").expect("request id in the message") + "(request ".len();
    let end = msg[start..].find(')').unwrap() + start;
    msg[start..end].to_string()
}

/// Writes `dir/all-ask.toml`, a policy that asks for every tier (only a
/// user's grant lets anything run), and returns its path.
pub fn all_ask_policy(dir: &std::path::Path) -> String {
    let p = dir.join("all-ask.toml");
    std::fs::write(
        &p,
        "[tiers]\nsafe-read = \"ask\"\nwrite = \"ask\"\nnetwork = \"ask\"\ninstall = \"ask\"\ndestructive = \"ask\"\n",
    )
    .unwrap();
    p.to_string_lossy().into_owned()
}
