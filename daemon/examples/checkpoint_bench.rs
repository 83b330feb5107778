//! Checkpoint benchmark (issue 6): on a generated tree of N files (default
//! 50,000), side by side with git on the same tree, printing ratios.
//!
//! ```text
//! cargo build --release -p warden-daemon -p warden-client --bins --example checkpoint_bench
//! target/release/examples/checkpoint_bench [--files N] [--runs R] [--no-exec]
//! ```
//!
//! Measured (median of R runs, wall clock):
//! - `git add -A && git write-tree` on a fresh repository vs warden's first
//!   full snapshot recorded as a checkpoint (every blob stored, one syncfs);
//! - `git status --porcelain` (clean, after a commit) vs an unchanged
//!   re-snapshot, in the same process (stat cache in memory) and in a fresh
//!   store (stat cache read from its file, as a restarted daemon would);
//! - vs an unchanged pre+post checkpoint pair (what a step adds);
//! - unless `--no-exec`: a write-tier `warden exec -- touch x` through a real
//!   `wardend` (policy ci; binaries next to this example's directory) vs git
//!   status, and the same exec on an empty workspace (the fixed cost).
//!
//! Targets (issue 6): re-snapshot <= git status; first snapshot <= git add
//! -A; write-tier exec <= 2.5x git status. This is a benchmark, not a test:
//! it prints, it asserts nothing.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use warden_daemon::checkpoint::{CheckpointMeta, CheckpointSettings, CheckpointStore};
use warden_daemon::state::Db;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let t = Instant::now();
    let r = f();
    (t.elapsed(), r)
}

fn sh(dir: &Path, script: &str) {
    let st = Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("bash");
    assert!(st.success(), "{script} failed");
}

/// A deterministic tree: 500 directories (two levels) of `n / 500` text
/// files of 200..2200 bytes.
fn generate(root: &Path, n: usize) -> u64 {
    let mut bytes = 0u64;
    let per_dir = (n / 500).max(1);
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut made = 0;
    'outer: for a in 0..25 {
        for b in 0..20 {
            let dir = root.join(format!("src{a}/mod{b}"));
            std::fs::create_dir_all(&dir).unwrap();
            for f in 0..per_dir {
                if made == n {
                    break 'outer;
                }
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let len = 200 + (x % 2000) as usize;
                let line = format!("fn item_{a}_{b}_{f}() -> u64 {{ {x} }}\n");
                let content = line.repeat(len / line.len() + 1);
                bytes += content.len() as u64;
                std::fs::write(dir.join(format!("file{f}.rs")), content).unwrap();
                made += 1;
            }
        }
    }
    bytes
}

fn meta() -> CheckpointMeta {
    CheckpointMeta {
        session_id: "bench".into(),
        tool: "exec".into(),
        ..Default::default()
    }
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let get = |flag: &str, default: usize| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let files = get("--files", 50_000);
    let runs = get("--runs", 5).max(1);
    let with_exec = !args.iter().any(|a| a == "--no-exec");

    let tmp = tempfile::Builder::new()
        .prefix("cpbench-")
        .tempdir_in("/tmp")
        .unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let (gen_t, bytes) = time(|| generate(&ws, files));
    println!("tree: {files} files, {bytes} bytes, generated in {gen_t:?}");
    let settings = CheckpointSettings::default();

    // git add -A && git write-tree, each run on a fresh repository.
    let mut git_add = Vec::new();
    for i in 0..runs {
        let _ = std::fs::remove_dir_all(ws.join(".git"));
        sh(
            &ws,
            "git init -q && git config user.email b@x && git config user.name b && git config gc.auto 0",
        );
        let (t, _) = time(|| sh(&ws, "git add -A && git write-tree"));
        git_add.push(t);
        if i + 1 == runs {
            // Pack the objects, as in a real repository (50k loose objects
            // would double the files a snapshot of `.git/` sees).
            sh(&ws, "git -c gc.auto=0 commit -qm base && git gc -q");
        }
    }
    // The .git dir is now part of the tree both tools see.
    let mut git_status = Vec::new();
    sh(&ws, "git status --porcelain"); // warm: refresh the index stat data
    for _ in 0..runs {
        git_status.push(time(|| sh(&ws, "git status --porcelain")).0);
    }

    // Warden: first full snapshot recorded (fresh state dir each run).
    let mut first = Vec::new();
    let state = tmp.path().join("state");
    for _ in 0..runs {
        let _ = std::fs::remove_dir_all(&state);
        std::fs::create_dir(&state).unwrap();
        let store = CheckpointStore::open(&state, Db::open(&state).unwrap()).unwrap();
        let (t, r) = time(|| store.pre_step(&ws, &settings, &meta()).unwrap());
        assert!(r.entry_count as usize >= files);
        first.push(t);
    }
    let store = CheckpointStore::open(&state, Db::open(&state).unwrap()).unwrap();
    std::thread::sleep(Duration::from_millis(100)); // past the racy-git margin
    store.snapshot(&ws, &settings).unwrap();
    let mut resnap = Vec::new();
    for _ in 0..runs {
        let (t, s) = time(|| store.snapshot(&ws, &settings).unwrap());
        assert_eq!(s.hashed_files, 0, "an unchanged re-snapshot hashed files");
        resnap.push(t);
    }
    store.wait_for_stat_cache_writes();
    let mut resnap_cold = Vec::new();
    for _ in 0..runs {
        let (t, s) = time(|| {
            let fresh = CheckpointStore::open(&state, Db::open(&state).unwrap()).unwrap();
            fresh.snapshot(&ws, &settings).unwrap()
        });
        assert_eq!(s.hashed_files, 0);
        resnap_cold.push(t);
    }
    let mut step = Vec::new();
    for _ in 0..runs {
        let (t, _) = time(|| {
            let pre = store.pre_step(&ws, &settings, &meta()).unwrap();
            store.post_step(&ws, &settings, &pre.id, &meta()).unwrap()
        });
        step.push(t);
    }

    let (ga, gs) = (median(git_add), median(git_status));
    let (f, r, rc, st) = (
        median(first),
        median(resnap),
        median(resnap_cold),
        median(step),
    );
    println!("git add -A && git write-tree        {ga:>12.2?}");
    println!("git status --porcelain              {gs:>12.2?}");
    println!(
        "warden first full snapshot          {f:>12.2?}   ratio to git add -A: {:.2} (target <= 1)",
        ratio(f, ga)
    );
    println!(
        "warden unchanged re-snapshot        {r:>12.2?}   ratio to git status: {:.2} (target <= 1)",
        ratio(r, gs)
    );
    println!(
        "  same, fresh store (cache file)    {rc:>12.2?}   ratio to git status: {:.2}",
        ratio(rc, gs)
    );
    println!(
        "warden unchanged pre+post pair      {st:>12.2?}   ratio to git status: {:.2}",
        ratio(st, gs)
    );

    if with_exec {
        exec_bench(&ws, gs, runs);
    }
}

fn exec_bench(ws: &Path, git_status: Duration, runs: usize) {
    let exe = std::env::current_exe().unwrap();
    let bins = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let (wardend, warden) = (bins.join("wardend"), bins.join("warden"));
    if !wardend.exists() || !warden.exists() {
        println!(
            "exec: skipped ({} / {} not built)",
            wardend.display(),
            warden.display()
        );
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("cpbench-d-")
        .tempdir_in("/tmp")
        .unwrap();
    let sock = dir.path().join("s.sock");
    let state = dir.path().join("state");
    let mut d = Command::new(&wardend)
        .args(["--policy", "ci", "--socket"])
        .arg(&sock)
        .arg("--state-dir")
        .arg(&state)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let exec = |w: &Path| {
        let st = Command::new(&warden)
            .env("WARDEN_SOCKET", &sock)
            .args(["--no-autostart", "exec", "--workspace"])
            .arg(w)
            .args(["--", "touch x"])
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
    };
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    exec(ws); // the first checkpoint of this state dir stores every blob
    exec(&empty);
    std::thread::sleep(Duration::from_millis(100));
    let tree: Vec<Duration> = (0..runs).map(|_| time(|| exec(ws)).0).collect();
    let bare: Vec<Duration> = (0..runs).map(|_| time(|| exec(&empty)).0).collect();
    let (t, b) = (median(tree), median(bare));
    println!("warden exec (write tier) on tree    {t:>12.2?}   ratio to git status: {:.2} (target <= 2.5)", ratio(t, git_status));
    println!(
        "warden exec on an empty workspace   {b:>12.2?}   (fixed cost: CLI, session, sandbox)"
    );
    let _ = d.kill();
    let _ = d.wait();
}
