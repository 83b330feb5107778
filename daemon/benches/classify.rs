//! Classification throughput and latency on the corpus (one thread), with
//! the bare tree-sitter-bash parse of the same commands measured in the same
//! run as the peer (the floor any grammar-based classifier pays).
//!
//! Run: `cargo bench -p warden-daemon --bench classify`. Target (issue #4):
//! >= 50,000 commands/s on one core, p99 < 100 us.

use std::time::{Duration, Instant};

use warden_daemon::policy::{ClassifyContext, Policy};

fn corpus() -> Vec<String> {
    let mut out = Vec::new();
    let own = include_str!("../src/policy/corpus.tsv");
    let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared");
    let mut texts = vec![own.to_string()];
    for rel in ["corpus/commands.tsv", "peer/codex-command-safety.tsv"] {
        match std::fs::read_to_string(shared.join(rel)) {
            Ok(t) => texts.push(t),
            Err(e) => eprintln!(
                "note: {} not read ({e}); benchmarking without it",
                shared.join(rel).display()
            ),
        }
    }
    for t in texts {
        for line in t
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        {
            if let Some(cmd) = line.split('\t').nth(1) {
                out.push(cmd.replace("\\n", "\n").replace("\\t", "\t"));
            }
        }
    }
    out
}

struct Stats {
    per_sec: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

impl Stats {
    fn print(&self, label: &str) {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "{label:<45} {:>9.0} commands/s  p50 {:>6.1} us  p99 {:>6.1} us  max {:>7.1} us",
            self.per_sec,
            us(self.p50),
            us(self.p99),
            us(self.max)
        );
    }
}

fn measure(cmds: &[String], rounds: usize, mut f: impl FnMut(&str)) -> Stats {
    for c in cmds {
        f(c); // warm-up: thread-local parser, caches
    }
    let mut lat = Vec::with_capacity(cmds.len() * rounds);
    let start = Instant::now();
    for _ in 0..rounds {
        for c in cmds {
            let t = Instant::now();
            f(c);
            lat.push(t.elapsed());
        }
    }
    let total = start.elapsed();
    lat.sort_unstable();
    let q = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    Stats {
        per_sec: lat.len() as f64 / total.as_secs_f64(),
        p50: q(0.50),
        p99: q(0.99),
        max: *lat.last().unwrap_or(&Duration::ZERO),
    }
}

fn main() {
    let cmds = corpus();
    let rounds = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(30);
    let policy = Policy::builtin("default").expect("default policy");
    let ctx = ClassifyContext::default();
    let mut sink = 0usize;
    let ours = measure(&cmds, rounds, |c| {
        sink += policy.classify(c, &ctx).parts.len();
    });
    let mut parser = tree_sitter::Parser::new();
    parser
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .expect("tree-sitter-bash");
    let peer = measure(&cmds, rounds, |c| {
        sink += parser
            .parse(c, None)
            .map_or(0, |t| t.root_node().child_count() as usize);
    });
    println!(
        "classify corpus: {} commands x {rounds} rounds, one thread",
        cmds.len()
    );
    ours.print("warden classify (parse + classify + decide)");
    peer.print("peer: tree-sitter-bash parse only");
    println!(
        "ratio warden/parse-only throughput: {:.2}; target >= 50000 commands/s: {}; p99 < 100 us: {}",
        ours.per_sec / peer.per_sec,
        if ours.per_sec >= 50_000.0 { "met" } else { "NOT met" },
        if ours.p99 < Duration::from_micros(100) { "met" } else { "NOT met" },
    );
    // The slowest commands (one more timed pass), to see where the tail comes from.
    let mut slow: Vec<(Duration, &String)> = cmds
        .iter()
        .map(|c| {
            let t = Instant::now();
            sink += policy.classify(c, &ctx).parts.len();
            (t.elapsed(), c)
        })
        .collect();
    slow.sort_by(|a, b| b.0.cmp(&a.0));
    for (d, c) in slow.iter().take(5) {
        println!(
            "slowest: {:>7.1} us  {:?}",
            d.as_secs_f64() * 1e6,
            c.chars().take(70).collect::<String>()
        );
    }
    std::hint::black_box(sink);
}
