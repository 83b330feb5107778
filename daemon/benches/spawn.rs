//! Spawn latency, side by side in one run (issue #3, "Performance"):
//!
//! 1. plain fork+exec of `/bin/true`;
//! 2. bubblewrap with equivalent confinement (`--ro-bind / / --bind WS WS
//!    --dev /dev --proc /proc --tmpfs /tmp --unshare-all --new-session
//!    --die-with-parent true`);
//! 3. the daemon's confined spawn of `/bin/true` ([`Spawner::spawn`], write
//!    profile: every namespace, the full mount tree, Landlock, seccomp), as
//!    shipped: the helper builds each next sandbox ahead while idle (warm
//!    sandboxes, docs/sandbox.md);
//! 4. the same with warm sandboxes off (`WARDEN_SANDBOX_WARM=0`): every
//!    sandbox built on request;
//! 5. `warden exec -- true` against a running `wardend` (when the `warden`
//!    CLI binary is found: `$WARDEN_BIN`, or next to `wardend`).
//!
//! Rounds interleave the variants so machine noise hits all alike, with a
//! pause before each measurement so work a helper does in the background
//! (building the next sandbox) never overlaps another variant's. Prints
//! median / p10 / p90 in microseconds and the ratios against bubblewrap
//! (targets: confined spawn <= 0.7x, `warden exec` <= 1.5x). A benchmark,
//! not a test: it never fails on the numbers.
//!
//! Run: `cargo bench -p warden-daemon --bench spawn` (rounds:
//! `WARDEN_BENCH_ROUNDS`, default 200).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use warden_daemon::sandbox::{Profile, SandboxSettings, SpawnRequest, Spawner};

fn stats(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    (q(0.5), q(0.1), q(0.9))
}

fn time<F: FnMut()>(mut f: F) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64() * 1e6
}

fn find_cli() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("WARDEN_BIN") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let d = PathBuf::from(env!("CARGO_BIN_EXE_wardend"));
    let c = d.parent()?.join("warden");
    c.is_file().then_some(c)
}

struct Daemon {
    child: std::process::Child,
    socket: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: SIGTERM to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn start_daemon(dir: &Path) -> Option<Daemon> {
    let socket = dir.join("wardend.sock");
    let child = Command::new(env!("CARGO_BIN_EXE_wardend"))
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--log")
        .arg("warn")
        .stdout(Stdio::null())
        .spawn()
        .ok()?;
    let t = Instant::now();
    while !socket.exists() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(Daemon { child, socket })
}

/// `/proc/loadavg`'s 1-minute figure: the ratios count, but the absolute
/// numbers only mean something next to the machine's load.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| "?".into())
}

fn main() {
    let spawner = Spawner::start().expect("spawn helper");
    // A second helper that builds every sandbox on request (the variable is
    // read by the helper at its start).
    std::env::set_var("WARDEN_SANDBOX_WARM", "0");
    let cold_spawner = Spawner::start().expect("spawn helper");
    std::env::remove_var("WARDEN_SANDBOX_WARM");
    let load_before = load();
    let rounds: usize = std::env::var("WARDEN_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let path = std::env::var("PATH").unwrap_or_default();

    let confined = |ws: &Path, spawner: &Spawner| {
        let req = SpawnRequest {
            argv: vec!["/bin/true".into()],
            env: vec![("PATH".into(), path.clone())],
            workspace: ws.to_path_buf(),
            cwd: ws.to_path_buf(),
            profile: Profile::Write,
            settings: SandboxSettings::default(),
            cache_dir: None,
            fallback: None,
        };
        rt.block_on(async {
            let (_r1, w1) = nix::unistd::pipe().unwrap();
            let (_r2, w2) = nix::unistd::pipe().unwrap();
            let mut c = spawner.spawn(req, w1, w2).await.expect("confined spawn");
            let e = c.wait().await.unwrap();
            assert_eq!(e.code, Some(0));
        })
    };
    let bwrap = |ws: &Path| {
        let st = Command::new("bwrap")
            .args(["--ro-bind", "/", "/", "--bind"])
            .arg(ws)
            .arg(ws)
            .args([
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--tmpfs",
                "/tmp",
                "--unshare-all",
                "--new-session",
                "--die-with-parent",
                "true",
            ])
            .status()
            .expect("bwrap");
        assert!(st.success());
    };
    let plain = || {
        assert!(Command::new("/bin/true").status().unwrap().success());
    };
    let cli = find_cli();
    let daemon = cli.as_ref().and_then(|_| start_daemon(tmp.path()));
    let exec = |cli: &Path, d: &Daemon, ws: &Path| {
        let st = Command::new(cli)
            .arg("exec")
            .arg("--socket")
            .arg(&d.socket)
            .arg("--no-autostart")
            .arg("--workspace")
            .arg(ws)
            .args(["--yes", "--", "true"])
            .stdout(Stdio::null())
            .status();
        st.map(|s| s.success()).unwrap_or(false)
    };
    let mut with_cli = match (&cli, &daemon) {
        (Some(c), Some(d)) => exec(c, d, &ws), // warm-up
        _ => false,
    };
    if !with_cli {
        eprintln!(
            "warden exec: skipped (set WARDEN_BIN to the warden CLI, or build it next to wardend)"
        );
    }
    // Warm-up of the others.
    plain();
    bwrap(&ws);
    confined(&ws, &spawner);
    confined(&ws, &cold_spawner);

    // Long enough for a helper to finish building its next sandbox.
    let settle = || std::thread::sleep(std::time::Duration::from_millis(20));
    let mut s: [Vec<f64>; 5] = Default::default();
    for _ in 0..rounds {
        settle();
        s[0].push(time(plain));
        settle();
        s[1].push(time(|| bwrap(&ws)));
        settle();
        s[2].push(time(|| confined(&ws, &spawner)));
        settle();
        s[3].push(time(|| confined(&ws, &cold_spawner)));
        if with_cli {
            settle();
            let (c, d) = (cli.as_ref().unwrap(), daemon.as_ref().unwrap());
            let mut ok = true;
            s[4].push(time(|| ok = exec(c, d, &ws)));
            if !ok {
                eprintln!("warden exec failed; dropping that column");
                with_cli = false;
                s[4].clear();
            }
        }
    }
    let names = [
        "fork+exec /bin/true",
        "bwrap (issue flags)",
        "confined spawn",
        "confined spawn, cold",
        "warden exec -- true",
    ];
    println!(
        "{rounds} rounds, microseconds; load average {load_before} before, {} after",
        load()
    );
    println!(
        "{:<22} {:>10} {:>10} {:>10}",
        "variant", "median", "p10", "p90"
    );
    let mut med = [0.0; 5];
    for (i, v) in s.iter_mut().enumerate() {
        if v.is_empty() {
            continue;
        }
        let (m, lo, hi) = stats(v);
        med[i] = m;
        println!("{:<22} {:>10.0} {:>10.0} {:>10.0}", names[i], m, lo, hi);
    }
    println!();
    println!(
        "confined spawn / bwrap = {:.2}x (target <= 0.70x)",
        med[2] / med[1]
    );
    println!(
        "cold spawn / bwrap     = {:.2}x (warm sandboxes off)",
        med[3] / med[1]
    );
    if med[4] > 0.0 {
        println!(
            "warden exec / bwrap    = {:.2}x (target <= 1.50x)",
            med[4] / med[1]
        );
    }
    println!("confined spawn / fork+exec = {:.2}x", med[2] / med[0]);
}
