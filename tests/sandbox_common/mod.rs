//! Shared driver of the sandbox suites (`sandbox_attacks`, `sandbox_work`).
//!
//! These suites are `harness = false` binaries: `main` calls
//! [`Spawner::start`] while the process still has a single thread (the spawn
//! helper forks from there), then runs every case in order and exits
//! non-zero when one failed. `cargo test -p warden-tests --test NAME -- FILTER`
//! runs the cases whose name contains FILTER.
//!
//! When the kernel cannot build the sandbox (no user namespaces, ...), the
//! suite fails if `WARDEN_REQUIRE_SANDBOX=1`, and otherwise reports every case
//! as skipped.
#![allow(dead_code)]

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use warden_daemon::sandbox::{
    Enforcement, ExitInfo, Profile, SandboxError, SandboxSettings, SpawnRequest, Spawner,
};

pub struct Out {
    pub exit: ExitInfo,
    pub stdout: String,
    pub stderr: String,
    pub landlock: Enforcement,
}

impl Out {
    pub fn ok(&self) -> bool {
        self.exit.code == Some(0)
    }
    /// Panics with the full output unless the command exited 0.
    pub fn assert_ok(&self, what: &str) {
        assert!(
            self.ok(),
            "{what}: {:?}\nstdout: {}\nstderr: {}",
            self.exit,
            self.stdout,
            self.stderr
        );
    }
}

pub struct H {
    pub spawner: Spawner,
    pub rt: tokio::runtime::Runtime,
    /// A scratch dir outside every workspace, for host markers.
    pub host: tempfile::TempDir,
}

pub fn pipe() -> (OwnedFd, OwnedFd) {
    let (r, w) = nix::unistd::pipe().expect("pipe");
    (r, w)
}

impl H {
    /// A fresh workspace directory (under /tmp, owned by us).
    pub fn workspace(&self) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("warden-ws-")
            .tempdir()
            .expect("tempdir")
    }

    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            (
                "PATH".to_string(),
                std::env::var("PATH").unwrap_or_default(),
            ),
            ("LANG".to_string(), "C.UTF-8".to_string()),
            ("TERM".to_string(), "dumb".to_string()),
        ];
        if let Ok(h) = std::env::var("HOME") {
            env.push(("HOME".into(), h));
        }
        env
    }

    pub fn request(&self, ws: &Path, profile: Profile, argv: &[&str]) -> SpawnRequest {
        SpawnRequest {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: self.env(),
            workspace: ws.to_path_buf(),
            cwd: ws.to_path_buf(),
            profile,
            settings: SandboxSettings::default(),
            cache_dir: None,
            fallback: None,
        }
    }

    /// Runs `req`, collecting output, with a wall-clock timeout that kills
    /// the whole command.
    pub fn run_req(&self, req: SpawnRequest, timeout: Duration) -> Result<Out, SandboxError> {
        self.rt.block_on(async {
            let (or, ow) = pipe();
            let (er, ew) = pipe();
            let mut child = self.spawner.spawn(req, ow, ew).await?;
            let read = |fd: OwnedFd| {
                tokio::task::spawn_blocking(move || {
                    use std::io::Read;
                    let mut f = std::fs::File::from(fd);
                    let mut v = Vec::new();
                    let mut buf = [0u8; 65536];
                    loop {
                        match f.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                // Keep at most 4 MiB: floods are drained, not kept.
                                if v.len() < 4 << 20 {
                                    v.extend_from_slice(&buf[..n]);
                                }
                            }
                        }
                    }
                    String::from_utf8_lossy(&v).into_owned()
                })
            };
            let so = read(or);
            let se = read(er);
            let kh = child.kill_handle();
            let exit = match tokio::time::timeout(timeout, child.wait()).await {
                Ok(r) => r?,
                Err(_) => {
                    kh.kill();
                    child.wait().await?
                }
            };
            Ok(Out {
                exit,
                stdout: so.await.unwrap_or_default(),
                stderr: se.await.unwrap_or_default(),
                landlock: child.landlock,
            })
        })
    }

    /// `bash -c script` in `ws` under `profile`.
    pub fn sh(&self, ws: &Path, profile: Profile, script: &str) -> Out {
        let req = self.request(ws, profile, &["bash", "-c", script]);
        self.run_req(req, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("spawn failed: {e}"))
    }

    /// `python3 -c code` in `ws` under `profile`.
    pub fn py(&self, ws: &Path, profile: Profile, code: &str) -> Out {
        let req = self.request(ws, profile, &["python3", "-c", code]);
        self.run_req(req, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("spawn failed: {e}"))
    }

    /// A marker file on the host, outside every workspace.
    pub fn marker(&self, name: &str, content: &str) -> PathBuf {
        let p = self.host.path().join(name);
        std::fs::write(&p, content).unwrap();
        p
    }
}

pub fn assert_marker(p: &Path, content: &str) {
    let got = std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("host marker {} gone: {e}", p.display()));
    assert_eq!(got, content, "host marker {} changed", p.display());
}

pub type Case = (&'static str, fn(&H));

/// Starts the spawner (must be the first thing in `main`) and runs `cases`.
pub fn main_with(cases: &[Case]) {
    let spawner = Spawner::start();
    let require = std::env::var("WARDEN_REQUIRE_SANDBOX").as_deref() == Ok("1");
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let spawner = match spawner {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sandbox unavailable: {e}");
            std::process::exit(if require { 1 } else { 0 });
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let host = tempfile::Builder::new()
        .prefix("warden-host-")
        .tempdir()
        .unwrap();
    let h = H { spawner, rt, host };
    // Is the sandbox usable at all here?
    let ws = h.workspace();
    let probe = h.run_req(
        h.request(ws.path(), Profile::Write, &["true"]),
        Duration::from_secs(30),
    );
    if let Err(e) = &probe {
        eprintln!("sandbox cannot start a command here: {e}");
        if require {
            eprintln!("WARDEN_REQUIRE_SANDBOX=1: failing");
            std::process::exit(1);
        }
        for (name, _) in cases {
            println!("test {name} ... skipped (no sandbox)");
        }
        return;
    }
    let mut failed = Vec::new();
    let mut ran = 0;
    for (name, f) in cases {
        if !filter.is_empty() && !filter.iter().any(|x| name.contains(x.as_str())) {
            continue;
        }
        ran += 1;
        let t = Instant::now();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&h)));
        match r {
            Ok(()) => println!("test {name} ... ok ({} ms)", t.elapsed().as_millis()),
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                println!("test {name} ... FAILED\n{msg}\n");
                failed.push(*name);
            }
        }
    }
    println!("\n{} passed, {} failed", ran - failed.len(), failed.len());
    if !failed.is_empty() {
        println!("failed: {failed:?}");
        std::process::exit(1);
    }
}
