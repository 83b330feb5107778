//! Redaction throughput on a generated, realistic build log, against a peer
//! measured in the same run.
//!
//!     cargo run -p warden-daemon --release --example redact_bench [MiB]
//!
//! Prints MB/s of `Redactor::redact_bytes` and of `StreamRedactor` (64 KiB
//! chunks) on one core, and the same for the peer: every rule pattern
//! compiled into one regex alternation and run over the whole input (the
//! scanner one writes without a keyword prefilter). Rates are computed from
//! the thread's CPU time (one core's work, however loaded the machine is),
//! with the wall-clock rate beside them. Target: >= 200 MB/s per core.
//! `REDACT_BENCH_PARTS=1` also times the keyword automaton alone and lists
//! the most frequent keyword hits.

use std::time::{Duration, Instant};

use warden_daemon::redact::{RedactSettings, Redactor, StreamRedactor};

/// Deterministic xorshift.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[(self.next() % xs.len() as u64) as usize]
    }
    fn hex(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| b"0123456789abcdef"[(self.next() % 16) as usize] as char)
            .collect()
    }
    fn b64(&mut self, n: usize) -> String {
        let a = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        (0..n)
            .map(|_| a[(self.next() % 64) as usize] as char)
            .collect()
    }
}

/// A build log mixing cargo, npm, pip, gcc, docker and test-runner output,
/// with a few secrets (about one per 200 KiB).
fn build_log(bytes: usize) -> Vec<u8> {
    let mut g = Rng(0x2545_f491_4f6c_dd1d);
    let crates = [
        "serde",
        "tokio",
        "regex",
        "hyper",
        "tonic",
        "prost",
        "clap",
        "anyhow",
        "rusqlite",
        "blake3",
        "aho-corasick",
        "memchr",
    ];
    let pkgs = [
        "lodash",
        "react",
        "typescript",
        "eslint",
        "webpack",
        "@babel/core",
        "jest",
        "express",
        "axios",
        "chalk",
    ];
    let mut out = String::with_capacity(bytes + 4096);
    let mut n = 0u64;
    while out.len() < bytes {
        n += 1;
        let ts = format!(
            "2026-11-29T09:{:02}:{:02}.{:03}Z",
            (n / 60) % 60,
            n % 60,
            n % 1000
        );
        match g.next() % 14 {
            0 => out.push_str(&format!("   Compiling {} v1.{}.{}\n", g.pick(&crates), n % 40, n % 9)),
            1 => out.push_str(&format!("{ts} [INFO] Downloading https://registry.npmjs.org/{0}/-/{0}-4.{1}.{2}.tgz\n", g.pick(&pkgs), n % 30, n % 7)),
            2 => out.push_str(&format!("      \"integrity\": \"sha512-{}==\",\n", g.b64(86))),
            3 => out.push_str(&format!(
                "warning: unused variable: `config_{n}`\n  --> src/session/mod.rs:{}:{}\n   |\n{} |     let config_{n} = load(&path)?;\n   |         ^^^^^^ help: if this is intentional, prefix it with an underscore\n\n",
                n % 900, n % 80, n % 900
            )),
            4 => out.push_str(&format!("gcc -O2 -g -Wall -fPIC -I/usr/include/openssl -DHAVE_CONFIG_H -c src/crypto/aes_{n}.c -o build/aes_{n}.o\n")),
            5 => out.push_str(&format!("#{} [builder 4/9] RUN cargo build --release --locked\n#{} sha256:{} 12.3MB / 45.6MB 2.1s\n", n % 20, n % 20, g.hex(64))),
            6 => out.push_str(&format!("test redact::tests::case_{n} ... ok\n")),
            7 => out.push_str(&format!("{ts} DEBUG hyper::proto::h1::io: flushed {} bytes\n", n * 7 % 65536)),
            8 => out.push_str(&format!("Collecting requests==2.{}.0\n  Using cached requests-2.{}.0-py3-none-any.whl (64 kB)\n", n % 32, n % 32)),
            9 => out.push_str(&format!("commit {}\nAuthor: Dev <dev@example.com>\nDate:   Sun Nov 29 09:{:02}:00 2026\n\n    Fix flaky test #{}\n\n", g.hex(40), n % 60, n % 5000)),
            10 => out.push_str(&format!("{ts} INFO request_id={}-{}-{}-{}-{} method=GET path=/v1/items status=200 took={}ms\n", g.hex(8), g.hex(4), g.hex(4), g.hex(4), g.hex(12), n % 300)),
            11 => out.push_str(&format!("go: downloading golang.org/x/text v0.{}.0\ngolang.org/x/text v0.{}.0 h1:{}=\n", n % 20, n % 20, g.b64(43))),
            12 => out.push_str(&format!("error[E0308]: mismatched types\n   --> daemon/src/policy/rules.rs:{}:{}\n    |\n    = note: expected `Result<Decision, PolicyError>`, found `Option<Decision>`\n", n % 700, n % 60)),
            _ => out.push_str(&format!("[{:>5}/{:>5}] Linking CXX executable bin/tool_{}\n", n % 99999, 99999, n % 300)),
        }
        if n % 2000 == 0 {
            out.push_str(&format!(
                "export GITHUB_TOKEN=ghp_{}\n",
                g.b64(36).replace(['+', '/'], "x")
            ));
        }
    }
    out.into_bytes()
}

fn rate(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e6
}

/// CPU time of the calling thread (clock_gettime(2), CLOCK_THREAD_CPUTIME_ID):
/// the time this core spent on the work, whatever else the machine runs.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Best of `runs`: (thread CPU time, wall time, result).
fn best_of<F: FnMut() -> usize>(runs: usize, mut f: F) -> (Duration, Duration, usize) {
    let (mut cpu, mut wall) = (Duration::MAX, Duration::MAX);
    let mut found = 0;
    for _ in 0..runs {
        let (c, t) = (thread_cpu(), Instant::now());
        found = f();
        wall = wall.min(t.elapsed());
        cpu = cpu.min(thread_cpu() - c);
    }
    (cpu, wall, found)
}

fn report(name: &str, bytes: usize, cpu: Duration, wall: Duration, what: &str) -> f64 {
    let r = rate(bytes, cpu);
    println!(
        "{name:<32} {r:8.1} MB/s per core (CPU time; wall {:7.1} MB/s)  {what}",
        rate(bytes, wall)
    );
    r
}

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(64);
    let log = build_log(mib << 20);
    let r = Redactor::new(&RedactSettings {
        env_secrets: false,
        ..RedactSettings::default()
    });
    println!(
        "input: generated build log, {:.1} MB",
        log.len() as f64 / 1e6
    );

    let (c, w, found) = best_of(3, || r.redact_bytes(&log).1.len());
    let ours = report(
        "warden redact_bytes:",
        log.len(),
        c,
        w,
        &format!("({found} findings)"),
    );

    let (c, w, found) = best_of(3, || {
        let mut s = StreamRedactor::new(r.clone());
        let mut out = 0;
        for c in log.chunks(64 * 1024) {
            out += s.push(c).len();
        }
        out += s.finish().len();
        std::hint::black_box(out);
        s.redactions() as usize
    });
    report(
        "warden StreamRedactor (64K):",
        log.len(),
        c,
        w,
        &format!("({found} redactions)"),
    );

    if std::env::var_os("REDACT_BENCH_PARTS").is_some() {
        let kws = warden_daemon::redact::prefilter_keywords();
        for (name, kind) in [
            ("dfa", Some(aho_corasick::AhoCorasickKind::DFA)),
            ("auto", None),
        ] {
            let ac = aho_corasick::AhoCorasickBuilder::new()
                .ascii_case_insensitive(true)
                .kind(kind)
                .build(&kws)
                .unwrap();
            let (c, w, n) = best_of(3, || ac.find_overlapping_iter(&log).count());
            report(
                &format!("part: keywords ({name}, {}):", kws.len()),
                log.len(),
                c,
                w,
                &format!("({n} hits)"),
            );
        }
        let mut counts = std::collections::BTreeMap::new();
        let ac = aho_corasick::AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .build(&kws)
            .unwrap();
        for m in ac.find_overlapping_iter(&log) {
            *counts
                .entry(kws[m.pattern().as_usize()].clone())
                .or_insert(0usize) += 1;
        }
        let mut v: Vec<_> = counts.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1));
        println!("part: most frequent keywords: {:?}", &v[..v.len().min(12)]);
    }

    let alternation = warden_daemon::redact::rule_patterns()
        .iter()
        .map(|p| format!("(?:{p})"))
        .collect::<Vec<_>>()
        .join("|");
    let peer_re = regex::bytes::RegexBuilder::new(&alternation)
        .unicode(false)
        .size_limit(1 << 30)
        .dfa_size_limit(1 << 30)
        .build()
        .expect("peer alternation compiles");
    let (c, w, found) = best_of(1, || peer_re.find_iter(&log).count());
    let peer = report(
        "peer: one regex alternation:",
        log.len(),
        c,
        w,
        &format!("({found} matches)"),
    );
    println!(
        "ratio warden/peer: {:.1}x; target 200 MB/s: {}",
        ours / peer,
        if ours >= 200.0 { "met" } else { "NOT met" }
    );
}
