//! Per-program classification of one simple command (argv after quote
//! removal) into a tier, with the reasons, written paths and hosts.
//!
//! Sources for the option semantics: the GNU coreutils, findutils, sed, gawk
//! and tar manuals, git(1) and its subcommand pages, ripgrep's `rg --help`,
//! curl(1), wget(1), bash(1) ("SHELL BUILTIN COMMANDS"), and the package
//! managers' command references. Unknown programs are `write`.

use std::path::{Component, Path, PathBuf};

use super::awk::awk_program_risk;
use super::opts::{first_operand, long_is, scan, Opt, Spec};
use super::shell::{env_var_risk, Analyzer, Word, MAX_DEPTH};
use super::{ClassifyContext, Tier};

/// The classification of one simple command being built.
#[derive(Debug)]
pub struct Verdict {
    pub tier: Tier,
    pub reasons: Vec<String>,
    pub writes: Vec<String>,
    pub hosts: Vec<String>,
    /// The argv at each wrapper level, outermost first (`timeout 5 git push`, `git push`).
    pub chain: Vec<Vec<String>>,
    /// `registry`, `lockfile`, `requirements`, ... for install commands.
    pub install_source: Option<&'static str>,
    /// Could not be classified: decision at least `ask`.
    pub unclassifiable: bool,
}

impl Default for Verdict {
    fn default() -> Self {
        Verdict {
            tier: Tier::SafeRead,
            reasons: Vec::new(),
            writes: Vec::new(),
            hosts: Vec::new(),
            chain: Vec::new(),
            install_source: None,
            unclassifiable: false,
        }
    }
}

impl Verdict {
    /// Raises the tier to at least `tier`, with `reason`.
    pub fn raise(&mut self, tier: Tier, reason: impl Into<String>) {
        if tier > self.tier {
            self.tier = tier;
        }
        self.reasons.push(reason.into());
    }

    /// Marks the command as not classifiable: `write`, decision at least `ask`.
    pub fn fail(&mut self, reason: impl Into<String>) {
        self.unclassifiable = true;
        self.raise(Tier::Write, reason);
    }

    pub fn note(&mut self, reason: impl Into<String>) {
        self.reasons.push(reason.into());
    }

    fn host(&mut self, h: String) {
        if !h.is_empty() && !self.hosts.contains(&h) {
            self.hosts.push(h);
        }
    }
}

/// Where a path lies, for writes.
#[derive(Debug, PartialEq, Eq)]
pub enum PathKind {
    /// `/dev/null`, `/dev/stdout`, `/dev/stderr`, `/dev/fd/N`, `-`: not a file write.
    NotAFile,
    /// In the workspace or the sandbox's private `/tmp` (normalized path).
    Inside(String),
    /// Anywhere else (other absolute paths, `..` out of the workspace, `~`, devices).
    Outside(String),
    /// Only known at run time.
    Unknown(String),
}

fn normalize(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() || out.as_os_str().is_empty() {
                    return None;
                }
            }
            Component::Normal(n) => out.push(n),
            Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// The working directory after a `cd` whose target is only known at run time.
pub const UNKNOWN_CWD: &str = "/\u{1}unknown-cwd";

/// Follows `cd`/`pushd`/`popd` so later relative writes are judged from the
/// new directory: inside the workspace it stays relative; elsewhere it
/// becomes absolute (outside, or `/tmp`); unknown targets (`cd "$D"`, `cd -`,
/// `popd`) make later relative writes `write` with a reason.
fn change_dir(an: &mut Analyzer, name: &str, args: &[Word]) {
    let base = an.cd_ctx.clone().unwrap_or_else(|| an.ctx.clone());
    let target = args
        .iter()
        .find(|a| !a.text.starts_with('-') || a.text == "-");
    let new_cwd = match (name, target) {
        ("popd", _) | (_, None) if name == "popd" => PathBuf::from(UNKNOWN_CWD),
        (_, None) => PathBuf::from("/home"),
        (_, Some(t)) if t.text == "-" => PathBuf::from(UNKNOWN_CWD),
        (_, Some(t)) => match path_kind(&base, t) {
            PathKind::Inside(p) if p.starts_with('/') => PathBuf::from(p),
            PathKind::Inside(p) => PathBuf::from(p),
            PathKind::Outside(p) if p.starts_with('/') => PathBuf::from(p),
            PathKind::Outside(_) => PathBuf::from("/home"),
            PathKind::NotAFile | PathKind::Unknown(_) => PathBuf::from(UNKNOWN_CWD),
        },
    };
    an.cd_ctx = Some(ClassifyContext {
        cwd: Some(new_cwd),
        ..base
    });
}

/// Classifies a path that a command writes.
pub fn path_kind(ctx: &ClassifyContext, w: &Word) -> PathKind {
    let t = w.text.as_str();
    if w.dynamic || w.brace {
        return PathKind::Unknown(t.to_string());
    }
    if w.tilde {
        return PathKind::Outside(t.to_string());
    }
    if t == "-"
        || matches!(t, "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty")
        || t.strip_prefix("/dev/fd/")
            .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
    {
        return PathKind::NotAFile;
    }
    if t.is_empty() {
        return PathKind::Unknown(t.to_string());
    }
    if t.starts_with('/') {
        let Some(n) = normalize(Path::new(t)) else {
            return PathKind::Outside(t.to_string());
        };
        if n.starts_with("/tmp") || n.starts_with("/var/tmp") {
            return PathKind::Inside(n.display().to_string());
        }
        if let Some(ws) = &ctx.workspace {
            if let Ok(rel) = n.strip_prefix(ws) {
                let r = rel.display().to_string();
                return PathKind::Inside(if r.is_empty() { ".".into() } else { r });
            }
        }
        return PathKind::Outside(n.display().to_string());
    }
    // Relative to the working directory, itself relative to the workspace
    // (absolute after a `cd` out of it).
    if let Some(cwd) = ctx.cwd.as_ref().filter(|c| c.is_absolute()) {
        if cwd.as_os_str() == UNKNOWN_CWD {
            return PathKind::Unknown(format!("{t} (after a cd only known at run time)"));
        }
        let mut abs = cwd.join(t).display().to_string();
        if !abs.starts_with('/') {
            abs.insert(0, '/');
        }
        return path_kind(
            &ClassifyContext {
                cwd: None,
                ..ctx.clone()
            },
            &Word::lit(&abs),
        );
    }
    let base = ctx.cwd.clone().unwrap_or_default();
    let mut joined = PathBuf::from("/");
    joined.push(base);
    joined.push(t);
    match normalize(&joined) {
        Some(n) => {
            let r = n.strip_prefix("/").unwrap_or(&n).display().to_string();
            PathKind::Inside(if r.is_empty() { ".".into() } else { r })
        }
        None => PathKind::Outside(t.to_string()),
    }
}

/// Records a write of `w` by `what` (`>`, `tee`, `sed -i`...): `write` in
/// the workspace or `/tmp`, `destructive` elsewhere.
pub fn write_target(ctx: &ClassifyContext, v: &mut Verdict, w: &Word, what: &str) {
    match path_kind(ctx, w) {
        PathKind::NotAFile => {}
        PathKind::Inside(p) => {
            v.raise(Tier::Write, format!("{what} writes {p}"));
            v.writes.push(p);
        }
        PathKind::Outside(p) => {
            v.raise(
                Tier::Destructive,
                format!("{what} writes {p}, outside the workspace"),
            );
            v.writes.push(p);
        }
        PathKind::Unknown(p) => {
            v.raise(
                Tier::Write,
                format!("{what} writes a path only known at run time ({p})"),
            );
            v.writes.push(p);
        }
    }
}

/// True when `args` (before `--`) hold a short option among `shorts` (also
/// inside a cluster) or a long option abbreviating one of `longs`.
fn has_opt(args: &[Word], shorts: &str, longs: &[&str]) -> bool {
    args.iter()
        .take_while(|a| a.text != "--")
        .any(|a| match a.text.strip_prefix("--") {
            Some(l) => {
                let n = l.split('=').next().unwrap_or(l);
                longs.iter().any(|f| long_is(n, f))
            }
            None => {
                a.text.len() > 1
                    && a.text.starts_with('-')
                    && a.text[1..].chars().any(|c| shorts.contains(c))
            }
        })
}

/// `write` with `risky` when `cond`, else a note that the command only reads.
fn gate(v: &mut Verdict, cond: bool, risky: &str, safe: &str) {
    if cond {
        v.raise(Tier::Write, risky);
    } else {
        v.note(safe);
    }
}

/// Scans `args` and records a write for every option among `out_short` /
/// `out_long` (`-o FILE`, `--output=FILE`); returns the scanned options.
fn write_opts<'a>(
    ctx: &ClassifyContext,
    v: &mut Verdict,
    args: &'a [Word],
    spec: &Spec,
    out_short: &str,
    out_long: &[&str],
    what: &str,
) -> Vec<Opt<'a>> {
    let opts = scan(args, spec);
    for o in &opts {
        let target = match o {
            Opt::Short(c, f) if out_short.contains(*c) => Some(f),
            Opt::Long(n, f) if n.len() >= 2 && out_long.iter().any(|l| long_is(n, l)) => Some(f),
            _ => None,
        };
        if let Some(f) = target {
            write_target(ctx, v, &Word::lit(f.unwrap_or("")), what);
        }
    }
    opts
}

fn texts(args: &[Word]) -> Vec<String> {
    args.iter().map(|w| w.text.clone()).collect()
}

#[rustfmt::skip]
const SYSTEM_BIN_DIRS: &[&str] = &[
    "/bin/", "/usr/bin/", "/usr/local/bin/", "/sbin/", "/usr/sbin/", "/usr/local/sbin/",
];

/// Shell builtins and trivial programs: safe-read whatever their arguments.
#[rustfmt::skip]
const TRIVIAL: &[&str] = &[
    "true", "false", ":", "exit", "logout", "return", "sleep", "echo", "printf", "test", "[", "cd",
    "pushd", "popd", "dirs", "pwd", "wait", "jobs", "shift", "read", "getopts", "break", "continue",
    "umask", "unalias", "type", "times", "caller", "fg", "bg", "disown", "mapfile", "readarray",
    "let", "set", "unset", "help", "local", "declare", "typeset", "export", "readonly", "ulimit",
    "suspend",
];

/// Whether a variable-assigning builtin may assign a variable that changes
/// what runs: a nameref (`declare -n`), a name that is dynamic, or one of
/// [`super::shell::env_var_changes_exec`] anywhere among its words (option
/// arguments included: `read -a PATH`, `printf -v PATH`).
fn assigns_exec_var(name: &str, args: &[Word]) -> bool {
    let nameref = matches!(name, "declare" | "typeset" | "local")
        && args
            .iter()
            .any(|a| a.text.starts_with('-') && a.text.contains('n'));
    nameref
        || args.iter().any(|a| {
            let n = a.text.split(['=', '[', '+']).next().unwrap_or_default();
            a.dynamic && !matches!(name, "printf" | "let") || super::shell::env_var_changes_exec(n)
        })
}

/// Programs that only read, whatever their options (coreutils and friends
/// with no option that writes or runs anything).
#[rustfmt::skip]
const READERS: &[&str] = &[
    "ls", "dir", "vdir", "cat", "head", "tail", "wc", "du", "df", "stat", "which",
    "whereis", "basename", "dirname", "realpath", "readlink", "whoami", "id", "groups", "uname",
    "nproc", "printenv", "nl", "tac", "rev", "cut", "tr", "paste", "column", "fold", "fmt",
    "expand", "unexpand", "comm", "join", "cmp", "diff", "diff3", "md5sum", "sha1sum",
    "sha224sum", "sha256sum", "sha384sum", "sha512sum", "b2sum", "cksum", "sum", "shasum", "od",
    "hexdump", "strings", "more", "numfmt", "seq", "yes", "grep", "egrep", "fgrep", "zgrep",
    "zcat", "bzcat", "xzcat", "zstdcat", "jq", "ps", "pgrep", "free", "uptime", "locale", "tty",
    "cal", "arch", "lscpu", "lsblk", "getconf", "logname", "users", "who", "w", "expr", "factor",
    "pr", "tsort", "look", "pathchk", "shellcheck", "whatis", "apropos", "lsof", "top",
    "htop", "vmstat", "iostat", "nl", "wdiff", "colordiff", "envsubst",
    "dos2unix-info", "tokei", "lsattr", "getfacl", "namei", "findmnt",
    "mountpoint", "sha3sum", "unzip-info", "zipinfo", "readelf",
    "size", "c++filt", "addr2line", "tput", "dircolors", "stty", "cmp", "fc-list", "lsusb", "lspci",
    "ss", "netstat", "ifconfig-info",
];

#[rustfmt::skip]
const NETWORK: &[&str] = &[
    "ping", "ping6", "nc", "ncat", "netcat", "socat", "telnet", "ftp", "lftp", "dig", "nslookup",
    "host", "nmap", "traceroute", "tracepath", "mtr", "whois", "http", "https", "xh", "aria2c",
    "gh", "hub", "ssh-keyscan", "mosh", "kubectl", "helm", "aws", "gcloud", "az", "doctl", "flyctl",
    "heroku", "vercel", "netlify", "wrangler", "ansible", "ansible-playbook", "terraform", "tofu",
    "pulumi", "sftp", "ssh-copy-id", "websocat", "grpcurl", "httpie", "lynx", "w3m", "links",
    "elinks", "ntpdate",
];

#[rustfmt::skip]
const DESTRUCTIVE: &[&str] = &[
    "rm", "shred", "unlink", "truncate", "mkswap", "wipefs", "fdisk", "sfdisk", "gdisk", "cfdisk",
    "parted", "shutdown", "reboot", "halt", "poweroff", "telinit", "userdel", "groupdel", "deluser",
    "delgroup", "srm", "blkdiscard", "mke2fs", "swapoff",
];

/// Interpreters and build or test tools: they run code from the workspace,
/// so they are at least `write`.
#[rustfmt::skip]
const RUNS_CODE: &[&str] = &[
    "node", "nodejs", "deno", "ruby", "perl", "php", "lua", "luajit", "Rscript", "R", "julia",
    "java", "javac", "kotlin", "kotlinc", "scala", "groovy", "swift", "swiftc", "tclsh", "wish",
    "pwsh", "irb", "ghc", "ghci", "runghc", "runhaskell", "stack", "cabal", "elixir", "mix", "erl",
    "iex", "guile", "racket", "sbcl", "clojure", "clj", "lein", "make", "gmake", "bmake", "cmake",
    "ctest", "ninja", "meson", "bazel", "bazelisk", "buck", "buck2", "gradle", "gradlew", "mvn",
    "mvnw", "ant", "sbt", "rustc", "rustdoc", "gcc", "g++", "cc", "c++", "clang", "clang++", "ld",
    "as", "tsc", "esbuild", "webpack", "vite", "rollup", "parcel", "jest", "mocha", "vitest",
    "pytest", "py.test", "tox", "nox", "ruff", "black", "isort", "prettier", "eslint", "rustfmt",
    "gofmt", "mypy", "pyright", "flake8", "pylint", "bandit", "vim", "vi", "nvim", "nano", "emacs",
    "ed", "ex", "code", "patch", "just", "task", "invoke", "rake", "phpunit", "rspec", "dotnet",
    "zig", "nim", "crystal", "dart", "flutter", "ocaml", "dune", "opam", "hugo", "jekyll",
    "sphinx-build", "mkdocs", "pre-commit", "direnv", "docker", "podman", "nix-build", "scons",
    "waf", "autoreconf", "configure", "libtool", "pkg-config", "protoc", "buf", "sqlite3", "psql",
    "mysql", "redis-cli", "mongo", "mongosh", "openssl", "gpg", "ssh-keygen", "tmux", "screen",
    "crontab", "systemctl", "service", "journalctl", "mount", "umount", "kill", "pkill", "killall",
    "chattr", "setfacl", "passwd", "useradd", "usermod", "groupadd", "iptables", "nft", "ip",
    "ifconfig", "route", "sysctl", "modprobe", "insmod", "rmmod", "chroot", "unshare", "nsenter",
    "bwrap", "firejail", "strace", "ltrace", "gdb", "lldb", "valgrind", "perf", "hyperfine",
    "parallel", "entr", "inotifywait", "xdg-open", "open", "mail", "sendmail", "at", "batch",
    // ldd(1): may run the program ("never employ ldd on an untrusted executable")
    "ldd",
    "source", ".", "alias", "enable", "hash", "bind", "complete", "fc", "history", "coproc",
];

/// Programs that create or change files named by their operands.
#[rustfmt::skip]
const WRITERS: &[&str] = &[
    "touch", "mkdir", "rmdir", "mktemp", "split", "csplit", "gzip", "gunzip", "bzip2", "bunzip2",
    "xz", "unxz", "zstd", "unzstd", "lz4", "zip", "unzip", "7z", "7za", "rar", "unrar", "dos2unix",
    "unix2dos", "sponge", "mkfifo", "mknod", "ar", "ranlib", "strip", "objcopy", "convert",
    "magick", "ffmpeg", "pandoc", "wget2",
];

/// Classifies `argv` (argv[0] is the program) into `v`. Wrappers recurse.
pub fn classify(an: &mut Analyzer, v: &mut Verdict, argv: &[Word], depth: usize) {
    if argv.is_empty() {
        return;
    }
    v.chain.push(texts(argv));
    if depth > MAX_DEPTH {
        return v.fail(format!("nesting deeper than {MAX_DEPTH}: not classified"));
    }
    let w0 = &argv[0];
    if w0.dynamic || w0.glob || w0.brace {
        return v.fail(format!(
            "`{}` in command position is only known at run time: not classified",
            w0.text
        ));
    }
    let mut name = w0.text.as_str();
    if name.contains('/') || w0.tilde {
        match SYSTEM_BIN_DIRS.iter().find(|d| name.starts_with(**d)) {
            Some(d) if !name[d.len()..].contains('/') && !name.contains("/../") => {
                v.raise(
                    Tier::Write,
                    format!("{name}: program given by path: not safe-read"),
                );
                name = &name[d.len()..];
            }
            _ => {
                return v.raise(
                    Tier::Write,
                    format!("{name}: runs a program from a path (workspace, /tmp or elsewhere): at least write"),
                );
            }
        }
    }
    let args = &argv[1..];
    if program(an, v, name, args, depth) {
        return;
    }
    v.raise(
        Tier::Write,
        format!("{name}: unknown program: treated as write"),
    );
}

/// Runs the rules for `name`. False when the program is unknown.
fn program(an: &mut Analyzer, v: &mut Verdict, name: &str, args: &[Word], depth: usize) -> bool {
    let cd_ctx = an.cd_ctx.clone();
    let ctx = cd_ctx.as_ref().unwrap_or(an.ctx);
    match name {
        // Wrappers.
        "env" => env_cmd(an, v, args, depth),
        "timeout" => wrapper(an, v, name, args, depth, "sk", &["signal", "kill-after"], 1),
        "nice" => wrapper(an, v, name, args, depth, "n", &["adjustment"], 0),
        "nohup" | "builtin" => wrapper(an, v, name, args, depth, "", &[], 0),
        "stdbuf" => wrapper(
            an,
            v,
            name,
            args,
            depth,
            "ioe",
            &["input", "output", "error"],
            0,
        ),
        "setsid" => wrapper(an, v, name, args, depth, "", &[], 0),
        "ionice" => wrapper(
            an,
            v,
            name,
            args,
            depth,
            "cnpPu",
            &["class", "classdata", "pid", "pgid", "uid"],
            0,
        ),
        "time" => {
            let spec = Spec::new("of", &["output", "format"]).posix();
            write_opts(ctx, v, args, &spec, "o", &["output"], "time -o");
            wrapper(an, v, name, args, depth, "of", &["output", "format"], 0)
        }
        "command" => {
            if args
                .iter()
                .take_while(|a| a.text.starts_with('-'))
                .any(|a| a.text.contains('v') || a.text.contains('V'))
            {
                v.note("command -v: looks a name up");
            } else {
                wrapper(an, v, name, args, depth, "", &[], 0)
            }
        }
        "exec" => wrapper(an, v, name, args, depth, "a", &[], 0),
        "xargs" => xargs(an, v, args, depth),
        // Run a command with other privileges, limits or I/O; their options
        // are not modelled: at least write, and the command they run (after
        // `--`, or the first operand that is not a number) is classified too
        // so that `fakeroot rm -rf /` is still destructive.
        "chrt" | "prlimit" | "setpriv" | "runuser" | "fakeroot" | "unbuffer" | "eatmydata"
        | "systemd-run" | "numactl" | "catchsegv" | "pkexec" | "run0" | "su" | "cpulimit"
        | "proot" => {
            v.raise(
                Tier::Write,
                format!("{name}: runs a command with other privileges or limits: at least write"),
            );
            if args.iter().any(|a| a.opaque()) {
                v.fail(format!(
                    "{name}: argument only known at run time: not classified"
                ));
                return true;
            }
            let c = args
                .iter()
                .position(|a| a.text == "-c" || a.text == "--command");
            if let (Some(i), true) = (c, matches!(name, "su" | "runuser")) {
                if let Some(cmd) = args.get(i + 1) {
                    an.analyze(&cmd.text.clone(), depth + 1);
                }
            } else {
                let start = match args.iter().position(|a| a.text == "--") {
                    Some(i) => Some(i + 1),
                    None => args.iter().position(|a| {
                        !a.text.starts_with('-')
                            && !a.text.contains('=')
                            && !a.text.chars().all(|c| c.is_ascii_digit() || c == '.')
                    }),
                };
                if let Some(st) = start.filter(|&st| st < args.len()) {
                    classify(an, v, &args[st..], depth + 1);
                }
            }
        }
        "flock" => flock(an, v, args, depth),
        "sudo" | "doas" => sudo(an, v, name, args, depth),
        "sh" | "bash" | "zsh" | "dash" | "ksh" | "mksh" | "ash" | "yash" | "posh" | "fish" => {
            shell_cmd(an, v, name, args, depth)
        }
        "busybox" => {
            if args.is_empty() {
                v.note("busybox: lists applets");
            } else {
                classify(an, v, args, depth + 1)
            }
        }
        "eval" => {
            if args.iter().any(|a| !a.is_static() && a.opaque()) {
                v.fail("eval of a string only known at run time: not classified");
            } else {
                let s = texts(args).join(" ");
                v.note("eval: classified the evaluated string");
                an.analyze(&s, depth + 1);
            }
        }
        "trap" => {
            let first = args.first().map(|w| w.text.as_str()).unwrap_or("");
            if args.is_empty() || first.starts_with('-') || args.len() == 1 {
                v.note("trap: lists or resets traps");
            } else if args[0].opaque() {
                v.fail("trap with a command only known at run time: not classified");
            } else {
                v.note("trap: classified the trap command");
                an.analyze(&args[0].text, depth + 1);
            }
        }
        "script" => {
            v.raise(Tier::Write, "script: writes a typescript file");
            let opts = scan(
                args,
                &Spec::new(
                    "cEmoTIOB",
                    &[
                        "command",
                        "echo",
                        "logging-format",
                        "output-limit",
                        "log-timing",
                        "log-in",
                        "log-out",
                        "log-io",
                    ],
                ),
            );
            let mut cmd = None;
            for o in &opts {
                match o {
                    Opt::Short('c', c) | Opt::Long("command", c) => cmd = Some(c.unwrap_or("")),
                    Opt::Opaque(_) => {
                        v.fail("script: argument only known at run time: not classified");
                        return true;
                    }
                    _ => {}
                }
            }
            match cmd {
                Some(c) => an.analyze(c, depth + 1),
                None => v.raise(Tier::Write, "script: runs an interactive shell"),
            }
        }
        "watch" => {
            let mut i = 0;
            let mut exec_direct = false;
            while i < args.len() && args[i].text.starts_with('-') {
                let t = args[i].text.as_str();
                if t == "-x" || t == "--exec" {
                    exec_direct = true;
                }
                if t == "-n" || t == "--interval" || t == "-q" || t == "--equexit" {
                    i += 1;
                }
                i += 1;
            }
            let rest = &args[i.min(args.len())..];
            if rest.iter().any(|a| a.opaque()) {
                v.fail("watch: command only known at run time: not classified");
                return true;
            }
            if exec_direct {
                classify(an, v, rest, depth + 1)
            } else {
                an.analyze(&texts(rest).join(" "), depth + 1)
            }
        }
        "taskset" => {
            if args.iter().any(|a| a.text == "-p" || a.text == "--pid") {
                v.raise(Tier::Write, "taskset -p: changes another process");
            } else {
                wrapper(an, v, name, args, depth, "", &[], 1)
            }
        }
        "nsenter" | "unshare" | "chroot" | "bwrap" | "firejail" => {
            v.raise(
                Tier::Write,
                format!("{name}: changes namespaces or root: at least write"),
            );
        }
        "source" | "." => v.raise(Tier::Write, format!("{name}: runs a script file")),
        "alias" => {
            if args.iter().any(|a| a.text.contains('=')) {
                v.raise(
                    Tier::Write,
                    "alias: defines an alias that may change what runs",
                )
            } else {
                v.note("alias: lists aliases")
            }
        }
        "shopt" => {
            if args
                .iter()
                .any(|a| a.text == "expand_aliases" || a.opaque())
            {
                v.raise(
                    Tier::Write,
                    "shopt expand_aliases: aliases may change what runs",
                )
            } else {
                v.note("shopt: shell options")
            }
        }
        "hash" => {
            if args.iter().any(|a| a.text.starts_with("-p") || a.opaque()) {
                v.raise(Tier::Write, "hash -p: changes what a name runs")
            } else {
                v.note("hash: lists remembered programs")
            }
        }
        "cd" | "pushd" | "popd" => {
            change_dir(an, name, args);
            v.note(format!("{name}: shell builtin"));
        }
        // Builtins that assign variables by name (`read PATH`, `printf -v
        // PATH`, `mapfile PATH`, namerefs): assigning one that changes what
        // later commands run makes the command at least write, as `PATH=x`
        // does. A name only known at run time is not classified.
        "read" | "mapfile" | "readarray" | "printf" | "declare" | "typeset" | "local" | "let"
        | "unset"
            if assigns_exec_var(name, args) =>
        {
            v.raise(
                Tier::Write,
                format!("{name}: assigns a variable that changes what runs"),
            )
        }
        _ if TRIVIAL.contains(&name) => v.note(format!("{name}: shell builtin or trivial program")),
        // Readers with special cases.
        "date" => gate(
            v,
            has_opt(args, "s", &["set"]),
            "date -s: sets the clock",
            "date: reads the clock",
        ),
        "hostname" => {
            if args
                .iter()
                .any(|a| !a.text.starts_with('-') || a.text == "-F" || a.text.starts_with("--file"))
            {
                v.raise(Tier::Write, "hostname NAME: sets the host name");
            } else {
                v.note("hostname: reads the host name");
            }
        }
        "base64" | "base32" | "basenc" => {
            let spec = Spec::new("ow", &["output", "wrap"]);
            write_opts(ctx, v, args, &spec, "o", &["output"], name);
            if v.tier == Tier::SafeRead {
                v.note(format!("{name}: reads"));
            }
        }
        "tree" => {
            let spec = Spec::new(
                "oLPIH",
                &["filelimit", "timefmt", "sort", "charset", "fromfile"],
            );
            write_opts(ctx, v, args, &spec, "o", &[], "tree -o");
            if v.tier == Tier::SafeRead {
                v.note("tree: reads");
            }
        }
        "man" => gate(
            v,
            has_opt(args, "PH", &["pager", "html"]),
            "man -P/-H: runs a pager or browser",
            "man: reads manual pages",
        ),
        "yq" => gate(
            v,
            has_opt(args, "i", &["inplace"]),
            "yq -i: edits files in place",
            "yq: reads",
        ),
        "xxd" => {
            let ops: Vec<&Word> = args.iter().filter(|a| !a.text.starts_with('-')).collect();
            if ops.len() >= 2 {
                write_target(ctx, v, ops[1], "xxd");
            } else {
                v.note("xxd: reads");
            }
        }
        // Readers with options that write, run a pager or run commands.
        "less" => {
            let risky = args.iter().any(|a| {
                let t = a.text.as_str();
                let long = t
                    .strip_prefix("--")
                    .map(|l| l.split('=').next().unwrap_or(l));
                a.opaque()
                    || t.starts_with('+')
                    || long.is_some_and(|l| {
                        l.len() >= 3 && ("log-file".starts_with(l) || "LOG-FILE".starts_with(l))
                    })
                    || (long.is_none() && t.starts_with('-') && t.contains(['o', 'O']))
            });
            gate(
                v,
                risky,
                "less -o/--log-file/+COMMANDS: writes a log file or runs commands",
                "less: reads only",
            )
        }
        "bat" | "batcat" => {
            let risky = args.iter().any(|a| {
                let t = a.text.as_str();
                a.opaque()
                    || t.starts_with("--pager")
                    || t.starts_with("--generate-config")
                    || t.starts_with("--config-file")
                    || t == "--paging=always"
            }) || args.first().is_some_and(|a| a.text == "cache")
                || args
                    .windows(2)
                    .any(|w| w[0].text == "--paging" && w[1].text == "always");
            gate(
                v,
                risky,
                "bat --pager/--paging=always/cache: runs a pager or writes its cache",
                "bat: reads only",
            )
        }
        "file" => gate(
            v,
            args.iter().any(|a| {
                a.opaque()
                    || a.text == "--compile"
                    || (a.text.starts_with('-')
                        && !a.text.starts_with("--")
                        && a.text.contains('C'))
            }),
            "file -C: compiles a magic file (writes it)",
            "file: reads only",
        ),
        "sloccount" => v.raise(Tier::Write, "sloccount: stores its data in ~/.slocdata"),
        "tldr" => {
            if args.iter().any(|a| {
                a.opaque() || matches!(a.text.as_str(), "-u" | "--update" | "--clear-cache" | "-c")
            }) {
                v.raise(Tier::Network, "tldr --update: downloads pages");
            } else {
                v.note("tldr: reads its page cache");
            }
        }
        _ if READERS.contains(&name) => v.note(format!("{name}: reads only")),
        "tee" => {
            let mut any = false;
            for o in scan(args, &Spec::new("", &["output-error"])) {
                match o {
                    Opt::Operand(i) | Opt::Opaque(i) => {
                        any = true;
                        write_target(ctx, v, &args[i], "tee");
                    }
                    _ => {}
                }
            }
            if !any {
                v.note("tee: copies to standard output only");
            }
        }
        "sort" => sort(ctx, v, args),
        "uniq" => {
            let ops: Vec<usize> = scan(
                args,
                &Spec::new(
                    "fsw",
                    &[
                        "skip-fields",
                        "skip-chars",
                        "check-chars",
                        "all-repeated",
                        "group",
                    ],
                ),
            )
            .into_iter()
            .filter_map(|o| match o {
                Opt::Operand(i) | Opt::Opaque(i) => Some(i),
                _ => None,
            })
            .collect();
            if ops.len() >= 2 {
                write_target(ctx, v, &args[ops[1]], "uniq IN OUT");
            } else {
                v.note("uniq: reads");
            }
        }
        "sed" => sed(ctx, v, args),
        "awk" | "gawk" | "mawk" | "nawk" | "busybox-awk" => awk(ctx, v, name, args),
        "find" => find(an, v, args, depth),
        "fd" | "fdfind" => fd(an, v, name, args, depth),
        "rg" => rg(v, args),
        "git" => git(ctx, v, args),
        "tar" | "bsdtar" | "gtar" => tar(ctx, v, args),
        "dd" => {
            let mut of = false;
            for a in args {
                if let Some(t) = a.text.strip_prefix("of=") {
                    of = true;
                    let mut w = a.clone();
                    w.text = t.to_string();
                    write_target(ctx, v, &w, "dd of=");
                } else if a.opaque() {
                    v.fail("dd: operand only known at run time: not classified");
                }
            }
            if !of {
                v.note("dd: copies to standard output");
            }
        }
        "cp" | "ln" | "install" | "rsync-local" => copy_like(ctx, v, name, args),
        "mv" => {
            for o in scan(
                args,
                &Spec::new("tS", &["target-directory", "suffix", "backup"]),
            ) {
                match o {
                    Opt::Operand(i) | Opt::Opaque(i) => write_target(ctx, v, &args[i], "mv"),
                    Opt::Short('t', Some(d)) => write_target(ctx, v, &Word::lit(d), "mv -t"),
                    Opt::Long(n, Some(d)) if long_is(n, "target-directory") => {
                        write_target(ctx, v, &Word::lit(d), "mv -t")
                    }
                    _ => {}
                }
            }
            v.raise(Tier::Write, "mv: moves files");
        }
        "chmod" | "chown" | "chgrp" => {
            let ops: Vec<usize> = scan(args, &Spec::new("", &["reference", "from"]))
                .into_iter()
                .filter_map(|o| match o {
                    Opt::Operand(i) | Opt::Opaque(i) => Some(i),
                    _ => None,
                })
                .collect();
            let has_ref = args.iter().any(|a| a.text.starts_with("--reference"));
            // chmod's mode may look like an option (`chmod -w f`): find the first operand-like word.
            let skip = if has_ref { 0 } else { 1 };
            if name == "chmod" && ops.is_empty() {
                // `chmod -x file`: the mode was scanned as options.
                for a in args.iter().skip(1) {
                    write_target(ctx, v, a, name);
                }
            }
            for &i in ops.iter().skip(skip) {
                write_target(ctx, v, &args[i], name);
            }
            v.raise(Tier::Write, format!("{name}: changes file metadata"));
        }
        "mkfs" => v.raise(Tier::Destructive, "mkfs: formats a device"),
        _ if name.starts_with("mkfs.") => {
            v.raise(Tier::Destructive, format!("{name}: formats a device"))
        }
        _ if DESTRUCTIVE.contains(&name) => {
            for a in args.iter().filter(|a| !a.text.starts_with('-')) {
                if let PathKind::Inside(p) | PathKind::Outside(p) | PathKind::Unknown(p) =
                    path_kind(ctx, a)
                {
                    v.writes.push(p);
                }
            }
            v.raise(
                Tier::Destructive,
                format!("{name}: deletes or overwrites data"),
            );
        }
        _ if WRITERS.contains(&name) => {
            for o in scan(
                args,
                &Spec::new("mdrtZ", &["mode", "date", "reference", "suffix", "tmpdir"]),
            ) {
                if let Opt::Operand(i) | Opt::Opaque(i) = o {
                    write_target(ctx, v, &args[i], name);
                }
            }
            v.raise(Tier::Write, format!("{name}: creates or changes files"));
        }
        "curl" => curl(ctx, v, args),
        "wget" => {
            v.raise(Tier::Network, "wget: downloads over the network");
            let spec = Spec::new(
                "OoaPieUTtwQlAIRXDBYe",
                &[
                    "output-document",
                    "output-file",
                    "append-output",
                    "directory-prefix",
                    "input-file",
                ],
            );
            let out = &["output-document", "output-file", "append-output"];
            let opts = write_opts(ctx, v, args, &spec, "Ooa", out, "wget -O");
            for o in &opts {
                if let Opt::Operand(i) = o {
                    v.host(url_host(&args[*i].text));
                }
            }
            if !opts.iter().any(|o| {
                matches!(o, Opt::Short('O', _))
                    || matches!(o, Opt::Long(n, _) if long_is(n, "output-document"))
            }) {
                v.writes.push(".".into());
            }
        }
        "ssh" | "scp" | "sftp" | "rsync" | "mosh" | "rcp" | "rsh" => remote(ctx, v, name, args),
        _ if NETWORK.contains(&name) => {
            for a in args.iter().filter(|a| !a.text.starts_with('-')) {
                if a.text.contains("://") {
                    v.host(url_host(&a.text));
                }
            }
            v.raise(Tier::Network, format!("{name}: reaches the network"));
        }
        _ => {
            if let Some(done) = super::packages::classify(an, v, name, args, depth) {
                return done;
            }
            if RUNS_CODE.contains(&name) {
                if args.len() == 1
                    && matches!(
                        args[0].text.as_str(),
                        "--version" | "-V" | "--help" | "-v" | "version"
                    )
                    && !matches!(
                        name,
                        "make"
                            | "source"
                            | "."
                            | "kill"
                            | "patch"
                            | "vi"
                            | "vim"
                            | "nvim"
                            | "emacs"
                            | "nano"
                    )
                {
                    v.note(format!("{name} {}: prints version or help", args[0].text));
                } else {
                    v.raise(
                        Tier::Write,
                        format!("{name}: runs code or changes files: at least write"),
                    );
                }
                return true;
            }
            return false;
        }
    }
    true
}

/// Re-enters classification for the command a wrapper runs: `skip_operands`
/// leading operands (timeout's DURATION) are the wrapper's own.
#[allow(clippy::too_many_arguments)]
fn wrapper(
    an: &mut Analyzer,
    v: &mut Verdict,
    name: &str,
    args: &[Word],
    depth: usize,
    short_val: &'static str,
    long_val: &'static [&'static str],
    skip_operands: usize,
) {
    let spec = Spec::new(short_val, long_val).posix();
    match first_operand(args, &spec) {
        Err(_) => v.fail(format!(
            "{name}: argument only known at run time: not classified"
        )),
        Ok(None) => v.note(format!("{name}: runs nothing")),
        Ok(Some(i)) => {
            let start = i + skip_operands;
            if start >= args.len() {
                v.note(format!("{name}: runs nothing"));
            } else {
                v.note(format!("{name}: wrapper, classified the command it runs"));
                classify(an, v, &args[start..], depth + 1);
            }
        }
    }
}

fn env_cmd(an: &mut Analyzer, v: &mut Verdict, args: &[Word], depth: usize) {
    let mut i = 0;
    let mut spliced: Vec<Word> = Vec::new();
    while i < args.len() {
        let a = &args[i];
        let t = a.text.as_str();
        if a.opaque() {
            return v.fail("env: argument only known at run time: not classified");
        }
        if t == "--" {
            i += 1;
            break;
        }
        let split = if t == "-S" || t == "--split-string" {
            i += 1;
            args.get(i).map(|w| w.text.clone())
        } else if let Some(s) = t.strip_prefix("--split-string=") {
            Some(s.to_string())
        } else if t.starts_with("-S") && !t.starts_with("--") {
            Some(t[2..].to_string())
        } else {
            None
        };
        if let Some(s) = split {
            match split_env_s(&s) {
                Some(ws) => {
                    spliced = ws;
                    i += 1;
                    break;
                }
                None => return v.fail("env -S: string with expansions or escapes: not classified"),
            }
        }
        if matches!(t, "--unset" | "--chdir") {
            i += 2;
            continue;
        }
        // short clusters: `-iu NAME`, `-uNAME`, `-vC DIR` (a value-taking
        // `u`/`C` takes the rest of the word, or the next word)
        if !t.starts_with("--") && t.len() > 1 && t.starts_with('-') {
            if let Some(pos) = t[1..].find(['u', 'C']) {
                if pos + 2 == t.len() {
                    i += 1;
                }
            }
        }
        if t.starts_with('-') && t.len() > 1 {
            i += 1;
            continue;
        }
        if t == "-" {
            i += 1;
            continue;
        }
        break;
    }
    let mut rest: Vec<Word> = spliced;
    rest.extend(args[i.min(args.len())..].iter().cloned());
    let mut j = 0;
    while j < rest.len() {
        let t = &rest[j].text;
        match t.split_once('=') {
            Some((n, _))
                if !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                if let Some(reason) = env_var_risk(n) {
                    v.raise(Tier::Write, format!("env {n}= {reason}"));
                }
                j += 1;
            }
            _ => break,
        }
    }
    if j >= rest.len() {
        v.note("env: prints the environment");
        return;
    }
    v.note("env: wrapper, classified the command it runs");
    classify(an, v, &rest[j..], depth + 1);
}

/// Splits `env -S` strings: whitespace, single and double quotes; `None`
/// for `$`, backslash escapes and unbalanced quotes.
fn split_env_s(s: &str) -> Option<Vec<Word>> {
    if s.contains('$') || s.contains('\\') {
        return None;
    }
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut has = false;
    let mut q: Option<char> = None;
    for c in s.chars() {
        match (q, c) {
            (None, '\'' | '"') => {
                q = Some(c);
                has = true;
            }
            (Some(qc), _) if qc == c => q = None,
            (None, c) if c.is_whitespace() => {
                if has {
                    out.push(Word::lit(&cur));
                    cur.clear();
                    has = false;
                }
            }
            _ => {
                cur.push(c);
                has = true;
            }
        }
    }
    if q.is_some() {
        return None;
    }
    if has {
        out.push(Word::lit(&cur));
    }
    Some(out)
}

fn xargs(an: &mut Analyzer, v: &mut Verdict, args: &[Word], depth: usize) {
    let spec = Spec::new(
        "adEILnPs",
        // `--eof[=E]`, `--replace[=R]`, `--max-lines[=N]` take a value only with `=`
        &[
            "arg-file",
            "delimiter",
            "max-args",
            "max-procs",
            "max-chars",
            "process-slot-var",
        ],
    )
    .posix();
    match first_operand(args, &spec) {
        Err(_) => v.fail("xargs: argument only known at run time: not classified"),
        Ok(None) => v.note("xargs: runs echo"),
        Ok(Some(i)) => {
            v.note("xargs: runs the command with arguments read from input");
            // `-I R` / `-i[R]` / `--replace[=R]`: every argument holding R
            // gets input text spliced in (`sh -c 'echo {}'` runs the input)
            let mut replace: Option<&str> = None;
            for o in scan(&args[..i], &spec) {
                match o {
                    Opt::Short('I', r) => replace = r,
                    Opt::Short('i', _) => {
                        // `-i[R]`: R is the rest of its cluster
                        let t = args[..i]
                            .iter()
                            .filter(|w| !w.text.starts_with("--"))
                            .find_map(|w| w.text.split_once('i').map(|(_, r)| r))
                            .unwrap_or("");
                        replace = Some(if t.is_empty() { "{}" } else { t });
                    }
                    Opt::Long(n, r) if long_is(n, "replace") && n.len() >= 2 => {
                        replace = Some(r.unwrap_or("{}"))
                    }
                    _ => {}
                }
            }
            let mut inner: Vec<Word> = match replace.filter(|r| !r.is_empty()) {
                Some(r) => spliced(&args[i..], &[r], |_| true),
                None => args[i..].to_vec(),
            };
            inner.push(Word {
                text: "<arguments from input>".into(),
                dynamic: true,
                ..Word::default()
            });
            classify(an, v, &inner, depth + 1);
        }
    }
}

fn flock(an: &mut Analyzer, v: &mut Verdict, args: &[Word], depth: usize) {
    let spec = Spec::new("wEc", &["timeout", "wait", "conflict-exit-code", "command"]).posix();
    let opts = scan(args, &spec);
    let mut lock_idx = None;
    for o in &opts {
        match o {
            Opt::Short('c', Some(c)) | Opt::Long("command", Some(c)) => {
                an.analyze(c, depth + 1);
            }
            Opt::Opaque(_) => {
                return v.fail("flock: argument only known at run time: not classified")
            }
            Opt::Operand(i) if lock_idx.is_none() => lock_idx = Some(*i),
            _ => {}
        }
    }
    if let Some(i) = lock_idx {
        if !args[i].text.chars().all(|c| c.is_ascii_digit()) {
            let cd_ctx = an.cd_ctx.clone();
            write_target(
                cd_ctx.as_ref().unwrap_or(an.ctx),
                v,
                &args[i],
                "flock (lock file)",
            );
        }
        let rest = &args[i + 1..];
        // `flock FILE -c CMD` after the file.
        if let Some(pos) = rest
            .iter()
            .position(|w| w.text == "-c" || w.text == "--command")
        {
            if let Some(c) = rest.get(pos + 1) {
                if c.opaque() {
                    return v.fail("flock -c: command only known at run time: not classified");
                }
                an.analyze(&c.text.clone(), depth + 1);
            }
        } else if !rest.is_empty() {
            classify(an, v, rest, depth + 1);
        }
    }
    v.raise(Tier::Write, "flock: creates the lock file");
}

fn sudo(an: &mut Analyzer, v: &mut Verdict, name: &str, args: &[Word], depth: usize) {
    let short_val = if name == "sudo" { "ugCDprtTUR" } else { "uC" };
    let spec = Spec::new(
        short_val,
        &[
            "user",
            "group",
            "close-from",
            "chdir",
            "prompt",
            "role",
            "type",
            "command-timeout",
            "other-user",
            "chroot",
            "host",
        ],
    )
    .posix();
    let opts = scan(args, &spec);
    v.raise(
        Tier::Write,
        format!("{name}: runs as another user: at least write"),
    );
    let mut shell = false;
    for o in &opts {
        match o {
            Opt::Short('e', _) | Opt::Long("edit", _) => {
                v.raise(Tier::Write, format!("{name} -e: edits files"))
            }
            Opt::Short('s' | 'i', _) | Opt::Long("shell" | "login", _) => shell = true,
            Opt::Opaque(_) => {
                return v.fail(format!(
                    "{name}: argument only known at run time: not classified"
                ))
            }
            Opt::Operand(i) => {
                return classify(an, v, &args[*i..], depth + 1);
            }
            _ => {}
        }
    }
    if shell {
        v.raise(
            Tier::Write,
            format!("{name} -s/-i: runs an interactive shell"),
        );
    }
}

const SHELLS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "posh",
];

/// True for a shell that reads its script from standard input: no `-c`, no
/// script operand (`bash`, `bash -s`, `sh -euo pipefail`).
pub fn shell_reads_stdin(argv: &[Word]) -> bool {
    let Some(name) = argv
        .first()
        .map(|w| w.text.rsplit('/').next().unwrap_or(&w.text))
    else {
        return false;
    };
    if !SHELLS.contains(&name) {
        return false;
    }
    let mut i = 1;
    while i < argv.len() {
        let t = argv[i].text.as_str();
        if t == "--" || t == "-" {
            return i + 1 >= argv.len() || t == "-";
        }
        if (t.starts_with('-') || t.starts_with('+')) && t.len() > 1 {
            let body = &t[1..];
            if !t.starts_with("--") && body.contains('c') {
                return false;
            }
            if !t.starts_with("--") && body.contains('s') {
                return true;
            }
            if !t.starts_with("--") && (body.contains('o') || body.contains('O')) {
                i += 1;
            }
            i += 1;
            continue;
        }
        return false;
    }
    true
}

fn shell_cmd(an: &mut Analyzer, v: &mut Verdict, name: &str, args: &[Word], depth: usize) {
    let mut i = 0;
    let mut has_c = false;
    let mut stdin = false;
    while i < args.len() {
        let a = &args[i];
        let t = a.text.as_str();
        if a.opaque() {
            return v.fail(format!(
                "{name}: argument only known at run time: not classified"
            ));
        }
        if t == "--" || t == "-" {
            i += 1;
            break;
        }
        if matches!(t, "--version" | "--help") && args.len() == 1 {
            return v.note(format!("{name} {t}: prints version or help"));
        }
        if let Some(long) = t.strip_prefix("--") {
            if matches!(long, "rcfile" | "init-file") {
                i += 1;
            }
            i += 1;
            continue;
        }
        if (t.starts_with('-') || t.starts_with('+')) && t.len() > 1 {
            let body = &t[1..];
            if body.contains('c') {
                has_c = true;
            }
            if body.contains('s') {
                stdin = true;
            }
            if body.contains('o') || body.contains('O') {
                i += 1; // option name
            }
            i += 1;
            continue;
        }
        break;
    }
    let rest = &args[i.min(args.len())..];
    if has_c {
        match rest.first() {
            None => v.fail(format!("{name} -c without a command: not classified")),
            Some(s) if !s.is_static() => v.fail(format!(
                "{name} -c with a command only known at run time: not classified"
            )),
            Some(s) => {
                v.note(format!("{name} -c: classified the command string"));
                let s = s.text.clone();
                an.analyze(&s, depth + 1);
            }
        }
    } else if stdin || rest.is_empty() {
        v.raise(
            Tier::Write,
            format!("{name}: runs commands read from standard input: at least write"),
        );
    } else {
        v.raise(
            Tier::Write,
            format!(
                "{name} {}: runs a script file: at least write",
                rest[0].text
            ),
        );
    }
}

fn copy_like(ctx: &ClassifyContext, v: &mut Verdict, name: &str, args: &[Word]) {
    let spec = Spec::new(
        "tSmogb",
        &[
            "target-directory",
            "suffix",
            "mode",
            "owner",
            "group",
            "backup",
            "sparse",
            "reflink",
            "preserve",
            "no-preserve",
        ],
    );
    let mut target = None;
    let mut ops = Vec::new();
    for o in scan(args, &spec) {
        match o {
            Opt::Short('t', Some(d)) => target = Some(Word::lit(d)),
            Opt::Long(n, Some(d)) if long_is(n, "target-directory") => target = Some(Word::lit(d)),
            Opt::Operand(i) => ops.push(i),
            Opt::Opaque(i) => {
                ops.push(i);
                if name == "cp" {
                    v.raise(
                        Tier::Write,
                        format!("{name}: argument only known at run time"),
                    );
                }
            }
            _ => {}
        }
    }
    match (target, ops.last()) {
        (Some(t), _) => write_target(ctx, v, &t, name),
        (None, Some(&i)) if ops.len() >= 2 || name == "ln" => write_target(ctx, v, &args[i], name),
        _ => {}
    }
    v.raise(Tier::Write, format!("{name}: creates files"));
}

fn sort(ctx: &ClassifyContext, v: &mut Verdict, args: &[Word]) {
    let spec = Spec::new(
        "ktoST",
        &[
            "key",
            "field-separator",
            "output",
            "buffer-size",
            "temporary-directory",
            "compress-program",
            "parallel",
            "files0-from",
            "batch-size",
            "sort",
            "random-source",
        ],
    );
    for o in write_opts(ctx, v, args, &spec, "o", &["output"], "sort -o") {
        match o {
            Opt::Long(n, _) if long_is(n, "compress-program") && n.len() >= 2 => {
                v.raise(Tier::Write, "sort --compress-program: runs a program")
            }
            Opt::Opaque(_) => v.fail("sort: argument only known at run time: not classified"),
            _ => {}
        }
    }
    if v.tier == Tier::SafeRead {
        v.note("sort: reads");
    }
}

/// Why a sed script is not read-only (`w`, `W`, `e`, `s///e`, `s///w`), or
/// `None`. Unknown syntax is reported as a risk (GNU sed manual, "sed scripts").
pub fn sed_script_risk(s: &str) -> Option<&'static str> {
    let b = s.as_bytes();
    let mut i = 0;
    let n = b.len();
    let skip_ws = |i: &mut usize| {
        while *i < n && (b[*i] == b' ' || b[*i] == b'\t') {
            *i += 1;
        }
    };
    // Reads a delimited part ending at an unescaped `d`; returns false at end.
    let delimited = |i: &mut usize, d: u8| -> bool {
        while *i < n {
            if b[*i] == b'\\' {
                *i += 2;
                continue;
            }
            if b[*i] == d {
                *i += 1;
                return true;
            }
            if b[*i] == b'\n' && d != b'\n' {
                return false;
            }
            *i += 1;
        }
        false
    };
    // A regex part: like `delimited`, but a bracket expression is read
    // whole (GNU sed reads `s/[/]/x/` as the regex `[/]`). A delimiter inside
    // brackets is read differently by other seds: `Err`, as is a regex that
    // does not end.
    let regex = |i: &mut usize, d: u8| -> Result<(), &'static str> {
        while *i < n {
            match b[*i] {
                b'\\' => *i += 2,
                c if c == d => {
                    *i += 1;
                    return Ok(());
                }
                b'\n' => return Err("unterminated sed regex"),
                b'[' => {
                    let mut j = *i + 1;
                    if j < n && b[j] == b'^' {
                        j += 1;
                    }
                    if j < n && b[j] == b']' {
                        j += 1;
                    }
                    while j < n && b[j] != b']' {
                        if b[j] == b'[' && j + 1 < n && matches!(b[j + 1], b':' | b'.' | b'=') {
                            let close = b[j + 1];
                            j += 2;
                            while j + 1 < n && !(b[j] == close && b[j + 1] == b']') {
                                j += 1;
                            }
                            j += 2;
                            continue;
                        }
                        if b[j] == d || b[j] == b'\n' {
                            return Err("sed regex with its delimiter inside brackets (read differently by sed implementations)");
                        }
                        j += 1;
                    }
                    if j >= n {
                        return Err("unterminated sed bracket expression");
                    }
                    *i = j + 1;
                }
                _ => *i += 1,
            }
        }
        Err("unterminated sed regex")
    };
    let address = |i: &mut usize| -> Result<(), &'static str> {
        if *i >= n {
            return Ok(());
        }
        match b[*i] {
            b'0'..=b'9' => {
                while *i < n && (b[*i].is_ascii_digit() || b[*i] == b'~') {
                    *i += 1;
                }
            }
            b'$' => *i += 1,
            b'/' => {
                *i += 1;
                regex(i, b'/')?;
                while *i < n && (b[*i] == b'I' || b[*i] == b'M') {
                    *i += 1;
                }
            }
            b'\\' => {
                if *i + 1 >= n {
                    return Err("unparsable sed address");
                }
                let d = b[*i + 1];
                *i += 2;
                regex(i, d)?;
                while *i < n && (b[*i] == b'I' || b[*i] == b'M') {
                    *i += 1;
                }
            }
            _ => {}
        }
        Ok(())
    };
    loop {
        while i < n && matches!(b[i], b' ' | b'\t' | b'\n' | b';') {
            i += 1;
        }
        if i >= n {
            return None;
        }
        if b[i] == b'#' {
            while i < n && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if b[i] == b'}' {
            i += 1;
            continue;
        }
        if let Err(r) = address(&mut i) {
            return Some(r);
        }
        skip_ws(&mut i);
        if i < n && b[i] == b',' {
            i += 1;
            skip_ws(&mut i);
            if i < n && (b[i] == b'+' || b[i] == b'~') {
                i += 1;
            }
            if let Err(r) = address(&mut i) {
                return Some(r);
            }
            skip_ws(&mut i);
        }
        while i < n && (b[i] == b'!' || b[i] == b' ') {
            i += 1;
        }
        if i >= n {
            return Some("sed address without a command");
        }
        let c = b[i];
        i += 1;
        match c {
            b'{' => continue,
            b'=' | b'd' | b'D' | b'g' | b'G' | b'h' | b'H' | b'n' | b'N' | b'p' | b'P' | b'x'
            | b'z' | b'F' => {}
            b'l' | b'q' | b'Q' | b'L' => {
                skip_ws(&mut i);
                while i < n && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
            b':' | b'b' | b't' | b'T' | b'v' => {
                while i < n && b[i] != b'\n' && b[i] != b';' {
                    i += 1;
                }
            }
            b'a' | b'i' | b'c' | b'r' | b'R' => {
                // Text or a file name to the end of the line (reading is fine).
                while i < n && b[i] != b'\n' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'w' | b'W' => return Some("sed `w` command writes a file"),
            b'e' => return Some("sed `e` command runs a shell command"),
            b's' | b'y' => {
                if i >= n || b[i] == b'\n' || b[i] == b'\\' {
                    return Some("unparsable sed `s` command");
                }
                let d = b[i];
                i += 1;
                if c == b's' {
                    if let Err(r) = regex(&mut i, d) {
                        return Some(r);
                    }
                } else if !delimited(&mut i, d) {
                    return Some("unparsable sed `y` command");
                }
                if !delimited(&mut i, d) {
                    return Some("unparsable sed `s` command");
                }
                if c == b's' {
                    while i < n && !matches!(b[i], b';' | b'\n' | b'}' | b' ' | b'\t' | b'#') {
                        match b[i] {
                            b'e' => return Some("sed `s///e` runs a shell command"),
                            b'w' => return Some("sed `s///w` writes a file"),
                            b'g' | b'p' | b'i' | b'I' | b'm' | b'M' | b'0'..=b'9' => {}
                            _ => return Some("unknown sed `s` flag"),
                        }
                        i += 1;
                    }
                }
            }
            _ => return Some("unknown sed command"),
        }
        skip_ws(&mut i);
        if i < n && !matches!(b[i], b';' | b'\n' | b'}' | b'#') {
            return Some("unparsable sed script");
        }
    }
}

fn sed(ctx: &ClassifyContext, v: &mut Verdict, args: &[Word]) {
    let mut scripts: Vec<String> = Vec::new();
    let mut script_file = false;
    let mut in_place = false;
    let mut sandbox = false;
    let mut ops: Vec<usize> = Vec::new();
    let mut i = 0;
    let mut only_ops = false;
    while i < args.len() {
        let a = &args[i];
        let t = a.text.as_str();
        if only_ops || t == "-" || !t.starts_with('-') {
            ops.push(i);
            i += 1;
            continue;
        }
        if a.opaque() {
            return v.fail("sed: argument only known at run time: not classified");
        }
        if t == "--" {
            only_ops = true;
            i += 1;
            continue;
        }
        if let Some(long) = t.strip_prefix("--") {
            let (n, val) = match long.split_once('=') {
                Some((n, val)) => (n, Some(val.to_string())),
                None => (long, None),
            };
            if long_is(n, "expression") && n.len() >= 2 {
                let val = val.or_else(|| {
                    i += 1;
                    args.get(i).map(|w| w.text.clone())
                });
                scripts.push(val.unwrap_or_default());
            } else if long_is(n, "file") && n.len() >= 2 {
                script_file = true;
                if val.is_none() {
                    i += 1;
                }
            } else if long_is(n, "in-place") && n.len() >= 2 {
                in_place = true;
            } else if n == "sandbox" {
                sandbox = true;
            } else if long_is(n, "line-length") && val.is_none() {
                i += 1;
            }
            i += 1;
            continue;
        }
        let body = &t[1..];
        for (pos, c) in body.char_indices() {
            let rest = &body[pos + 1..];
            match c {
                'e' | 'f' | 'l' => {
                    let val = if rest.is_empty() {
                        i += 1;
                        args.get(i).map(|w| {
                            if w.opaque() {
                                "\u{0}opaque".to_string()
                            } else {
                                w.text.clone()
                            }
                        })
                    } else {
                        Some(rest.to_string())
                    };
                    match c {
                        'e' => scripts.push(val.unwrap_or_default()),
                        'f' => script_file = true,
                        _ => {}
                    }
                    break;
                }
                'i' => {
                    in_place = true;
                    break;
                }
                _ => {}
            }
        }
        i += 1;
    }
    if scripts.is_empty() && !script_file {
        match ops.first() {
            Some(&first) => {
                if args[first].opaque() || args[first].dynamic {
                    return v.fail("sed: script only known at run time: not classified");
                }
                scripts.push(args[first].text.clone());
                ops.remove(0);
            }
            None => return v.note("sed: no script"),
        }
    }
    if scripts.iter().any(|s| s.contains('\u{0}')) {
        return v.fail("sed: script only known at run time: not classified");
    }
    if script_file {
        v.raise(
            Tier::Write,
            "sed -f: runs a script file that may write files or run commands",
        );
    }
    if !sandbox {
        for s in &scripts {
            if let Some(risk) = sed_script_risk(s) {
                v.raise(Tier::Write, format!("{risk}: at least write"));
            }
        }
    }
    if in_place {
        for &i in &ops {
            write_target(ctx, v, &args[i], "sed -i");
        }
        v.raise(Tier::Write, "sed -i: edits files in place");
    }
    if v.tier == Tier::SafeRead {
        v.note("sed: prints only");
    }
}

/// awk, gawk, mawk, nawk, busybox awk (options: the GNU Awk manual,
/// "Command-Line Options"; mawk(1)). Read-only only when every option is
/// known and every program text is proven side-effect free
/// ([`awk_program_risk`]); anything else is at least write.
fn awk(_ctx: &ClassifyContext, v: &mut Verdict, name: &str, args: &[Word]) {
    let mut program: Vec<String> = Vec::new();
    let mut file_prog = false;
    let mut sandbox = false;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        let t = a.text.as_str();
        if a.opaque() {
            return v.fail(format!(
                "{name}: argument only known at run time: not classified"
            ));
        }
        if t == "--" {
            i += 1;
            break;
        }
        if !t.starts_with('-') || t == "-" {
            break;
        }
        let (opt, attached) = if t.starts_with("--") {
            match t.split_once('=') {
                Some((o, val)) => (o, Some(val)),
                None => (t, None),
            }
        } else if t.len() > 2 {
            (&t[..2], Some(&t[2..]))
        } else {
            (t, None)
        };
        let takes = matches!(
            opt,
            "-F" | "-v"
                | "-f"
                | "-E"
                | "-i"
                | "-l"
                | "-e"
                | "-W"
                | "--field-separator"
                | "--assign"
                | "--file"
                | "--exec"
                | "--include"
                | "--load"
                | "--source"
        );
        let val = if takes && attached.is_none() {
            i += 1;
            match args.get(i) {
                Some(w) if w.opaque() => {
                    return v.fail(format!(
                        "{name} {opt}: value only known at run time: not classified"
                    ))
                }
                Some(w) => Some(w.text.as_str()),
                None => None,
            }
        } else {
            attached
        };
        match opt {
            "-F" | "-v" | "--field-separator" | "--assign" => {}
            "-f" | "--file" | "-E" | "--exec" => file_prog = true,
            "-i" | "--include" | "-l" | "--load" => {
                v.raise(Tier::Write, format!("{name} {opt}: loads code"));
            }
            "-e" | "--source" => program.push(val.unwrap_or("").to_string()),
            "-S" | "--sandbox" => sandbox = true,
            "-W" if matches!(val, Some("version" | "v" | "usage" | "help")) => {
                return v.note(format!("{name} -W {}: prints version or help", val.unwrap_or("")));
            }
            "-W" => v.raise(
                Tier::Write,
                format!("{name} -W {}: implementation-specific option (mawk `-W exec` runs a program file): at least write", val.unwrap_or("")),
            ),
            "-o" | "-p" | "-d" | "-D" | "--pretty-print" | "--profile" | "--dump-variables"
            | "--debug" => {
                v.raise(
                    Tier::Write,
                    format!("{name} {opt}: writes a file or starts the debugger"),
                );
            }
            "--version" | "-V" | "--help" | "-h" | "--usage" | "--copyright" | "-C" => {
                if args.len() == 1 {
                    return v.note(format!("{name} {opt}: prints version or help"));
                }
            }
            // flags that change only how the program is read or run
            "-b" | "-c" | "-g" | "-M" | "-N" | "-n" | "-O" | "-P" | "-r" | "-s" | "-t"
            | "-L" | "--characters-as-bytes" | "--traditional" | "--gen-pot"
            | "--bignum" | "--use-lc-numeric" | "--non-decimal-data" | "--optimize"
            | "--no-optimize" | "--posix" | "--re-interval" | "--lint" | "--lint-old"
            | "--csv" | "-k" => {}
            _ => v.raise(
                Tier::Write,
                format!("{name} {t}: unknown option: at least write"),
            ),
        }
        i += 1;
    }
    if program.is_empty() && !file_prog {
        match args.get(i) {
            Some(w) if w.opaque() || w.dynamic => {
                return v.fail(format!(
                    "{name}: program only known at run time: not classified"
                ))
            }
            Some(w) => {
                program.push(w.text.clone());
                i += 1;
            }
            None => return v.note(format!("{name}: no program")),
        }
    }
    for w in &args[i.min(args.len())..] {
        if w.text.starts_with("/inet") {
            v.raise(
                Tier::Network,
                format!(
                    "{name} {}: gawk special file opens a network connection",
                    w.text
                ),
            );
        }
    }
    if file_prog {
        v.raise(
            Tier::Write,
            format!("{name} -f: runs a program file that may run commands"),
        );
    }
    if !sandbox {
        for p in &program {
            if let Some(r) = awk_program_risk(p) {
                v.raise(Tier::Write, format!("{r}: at least write"));
            }
        }
    }
    if v.tier == Tier::SafeRead {
        v.note(format!("{name}: prints only"));
    }
}

fn find(an: &mut Analyzer, v: &mut Verdict, args: &[Word], depth: usize) {
    let cd_ctx = an.cd_ctx.clone();
    let ctx = cd_ctx.as_ref().unwrap_or(an.ctx);
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a.opaque() {
            return v.fail("find: argument only known at run time: not classified");
        }
        match a.text.as_str() {
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                let what = a.text.clone();
                let start = i + 1;
                let mut j = start;
                while j < args.len()
                    && !(args[j].text == ";"
                        || (args[j].text == "+" && j > start && args[j - 1].text == "{}"))
                {
                    j += 1;
                }
                if j >= args.len() {
                    return v.fail(format!("find {what} without `;` or `+`: not classified"));
                }
                if j == start {
                    return v.fail(format!("find {what} without a command: not classified"));
                }
                v.note(format!("find {what}: classified the command it runs"));
                // a `{}` inside a longer argument splices a file name into
                // it (`sh -c 'cat {}'` runs file names as code); a whole `{}`
                // is one path that starts with the starting point
                let inner = spliced(&args[start..j], &["{}"], |t| t != "{}");
                classify(an, v, &inner, depth + 1);
                i = j + 1;
                continue;
            }
            "-delete" => v.raise(Tier::Destructive, "find -delete: deletes files"),
            "-fprint" | "-fprint0" | "-fls" | "-fprintf" => {
                let what = a.text.clone();
                match args.get(i + 1) {
                    Some(f) => write_target(ctx, v, f, &format!("find {what}")),
                    None => v.fail(format!("find {what} without a file: not classified")),
                }
                i += if what == "-fprintf" { 3 } else { 2 };
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    if v.tier == Tier::SafeRead {
        v.note("find: reads");
    }
}

/// `words` with each word that holds one of `marks` (and passes `which`)
/// marked as only known at run time: the command that runs them (find
/// -exec, fd -x, xargs -I) splices input text in.
fn spliced(words: &[Word], marks: &[&str], which: impl Fn(&str) -> bool) -> Vec<Word> {
    words
        .iter()
        .map(|w| {
            let mut w = w.clone();
            if marks.iter().any(|m| w.text.contains(m)) && which(&w.text) {
                w.dynamic = true;
            }
            w
        })
        .collect()
}

fn fd(an: &mut Analyzer, v: &mut Verdict, name: &str, args: &[Word], depth: usize) {
    for (i, a) in args.iter().enumerate() {
        if a.opaque() {
            return v.fail(format!(
                "{name}: argument only known at run time: not classified"
            ));
        }
        if matches!(a.text.as_str(), "-x" | "--exec" | "-X" | "--exec-batch") {
            let rest = &args[i + 1..];
            let end = rest
                .iter()
                .position(|w| w.text == ";")
                .unwrap_or(rest.len());
            if end == 0 {
                return v.fail(format!(
                    "{name} {}: without a command: not classified",
                    a.text
                ));
            }
            v.note(format!("{name} {}: classified the command it runs", a.text));
            // fd hands paths over without a `./` prefix (a file named
            // `--output=x` would be an option): every placeholder, or the
            // appended path, is only known at run time
            let marks = ["{}", "{/}", "{//}", "{.}", "{/.}"];
            let mut inner = spliced(&rest[..end], &marks, |_| true);
            if !rest[..end]
                .iter()
                .any(|w| marks.iter().any(|m| w.text.contains(m)))
            {
                inner.push(Word {
                    text: "<path found>".into(),
                    dynamic: true,
                    ..Word::default()
                });
            }
            return classify(an, v, &inner, depth + 1);
        }
        if a.text.starts_with("--exec") {
            return v.fail(format!("{name}: {}: not classified", a.text));
        }
    }
    v.note(format!("{name}: reads"));
}

fn rg(v: &mut Verdict, args: &[Word]) {
    let spec = Spec::new(
        "ABCdEefgjMmrTt",
        &[
            "after-context",
            "before-context",
            "context",
            "max-depth",
            "encoding",
            "regexp",
            "file",
            "glob",
            "iglob",
            "threads",
            "max-columns",
            "max-count",
            "replace",
            "type-not",
            "type",
            "pre",
            "pre-glob",
            "hostname-bin",
            "colors",
            "color",
            "sort",
            "sortr",
            "type-add",
            "type-clear",
            "ignore-file",
            "path-separator",
            "field-context-separator",
            "field-match-separator",
            "context-separator",
            "engine",
            "dfa-size-limit",
            "regex-size-limit",
            "max-filesize",
            "hyperlink-format",
            "generate",
        ],
    );
    for o in scan(args, &spec) {
        match o {
            Opt::Long("pre", _) => v.raise(Tier::Write, "rg --pre: runs a preprocessor program"),
            Opt::Long("hostname-bin", _) => {
                v.raise(Tier::Write, "rg --hostname-bin: runs a program")
            }
            Opt::Long("search-zip", _) | Opt::Short('z', _) => {
                v.raise(Tier::Write, "rg -z: runs decompression programs")
            }
            Opt::Opaque(_) => return v.fail("rg: argument only known at run time: not classified"),
            _ => {}
        }
    }
    if v.tier == Tier::SafeRead {
        v.note("rg: reads");
    }
}

fn tar(ctx: &ClassifyContext, v: &mut Verdict, args: &[Word]) {
    // Old style: a first word without a dash is a cluster (`tar czf x src`).
    let mut owned: Vec<Word> = args.to_vec();
    if let Some(first) = owned.first_mut() {
        if !first.text.starts_with('-')
            && !first.text.is_empty()
            && first.text.chars().all(|c| c.is_ascii_alphabetic())
        {
            first.text = format!("-{}", first.text);
        }
    }
    let spec = Spec::new(
        "bCfFgHIKLNTVX",
        &[
            "file",
            "directory",
            "to-command",
            "checkpoint-action",
            "use-compress-program",
            "rsh-command",
            "info-script",
            "new-volume-script",
            "files-from",
            "exclude-from",
            "index-file",
            "blocking-factor",
            "format",
            "owner",
            "group",
            "mode",
            "mtime",
            "transform",
            "xform",
            "exclude",
            "label",
            "newer",
            "after-date",
            "volno-file",
            "record-size",
            "tape-length",
        ],
    );
    let mut mode: Option<&str> = None;
    let mut archive: Option<String> = None;
    let mut dir: Option<String> = None;
    let mut to_stdout = false;
    let mut absolute = false;
    let mut ops = Vec::new();
    for o in scan(&owned, &spec) {
        match o {
            Opt::Short('c', _) => mode = Some("create"),
            Opt::Short('r' | 'u' | 'A', _) => mode = Some("append"),
            Opt::Short('x', _) => mode = Some("extract"),
            Opt::Short('t' | 'd', _) => mode = mode.or(Some("list")),
            Opt::Short('f', f) => archive = f.map(String::from),
            Opt::Short('C', d) => dir = d.map(String::from),
            Opt::Short('O', _) => to_stdout = true,
            Opt::Short('P', _) => absolute = true,
            Opt::Short('I' | 'F', _) => v.raise(Tier::Write, "tar -I/-F: runs a program"),
            Opt::Long(n, val) => {
                let l = n;
                if long_is(l, "create") && l.len() >= 2 {
                    mode = Some("create");
                } else if long_is(l, "extract") && l.len() >= 2 || l == "get" {
                    mode = Some("extract");
                } else if (long_is(l, "list") && l.len() >= 2)
                    || long_is(l, "diff")
                    || long_is(l, "compare")
                {
                    mode = mode.or(Some("list"));
                } else if long_is(l, "append")
                    || long_is(l, "update")
                    || long_is(l, "catenate")
                    || long_is(l, "concatenate")
                {
                    mode = Some("append");
                } else if l == "delete" {
                    mode = Some("delete");
                } else if long_is(l, "file") && l.len() >= 2 {
                    archive = val.map(String::from);
                } else if long_is(l, "directory") && l.len() >= 2 {
                    dir = val.map(String::from);
                } else if long_is(l, "to-stdout") && l.len() >= 4 {
                    to_stdout = true;
                } else if long_is(l, "absolute-names") {
                    absolute = true;
                } else if [
                    "to-command",
                    "checkpoint-action",
                    "use-compress-program",
                    "rsh-command",
                    "info-script",
                    "new-volume-script",
                ]
                .iter()
                .any(|f| long_is(l, f) && l.len() >= 3)
                {
                    v.raise(Tier::Write, format!("tar --{l}: runs a program"));
                } else if long_is(l, "index-file") && l.len() >= 3 {
                    write_target(ctx, v, &Word::lit(val.unwrap_or("")), "tar --index-file");
                }
            }
            Opt::Operand(i) => ops.push(i),
            Opt::Opaque(_) => {
                return v.fail("tar: argument only known at run time: not classified")
            }
            _ => {}
        }
    }
    if let Some(a) = &archive {
        if let Some((host, _)) = a.split_once(':') {
            if !host.contains('/') && !args.iter().any(|w| w.text == "--force-local") {
                v.raise(
                    Tier::Network,
                    format!("tar -f {a}: remote archive over rsh"),
                );
                v.host(host.rsplit('@').next().unwrap_or(host).to_string());
            }
        }
    }
    match mode {
        Some("create") | Some("append") | Some("delete") => match &archive {
            Some(a) => write_target(ctx, v, &Word::lit(a), "tar"),
            None => v.raise(Tier::Write, "tar: writes an archive"),
        },
        Some("extract") => {
            if to_stdout {
                v.note("tar -xO: extracts to standard output");
            } else {
                if absolute {
                    v.raise(
                        Tier::Destructive,
                        "tar -P: extracts with absolute names, outside the workspace",
                    );
                }
                write_target(ctx, v, &Word::lit(dir.as_deref().unwrap_or(".")), "tar -x");
            }
        }
        Some(_) => v.note("tar -t: lists an archive"),
        None => v.raise(Tier::Write, "tar: mode not recognized: treated as write"),
    }
}

/// Host of a URL (`scheme://user@host:port/path`), lowercase; `host` for a
/// bare `host/path`.
pub fn url_host(u: &str) -> String {
    let rest = match u.split_once("://") {
        Some((_, r)) => r,
        None => u,
    };
    let hostport = rest.split(['/', '?', '#']).next().unwrap_or("");
    let hostport = hostport.rsplit('@').next().unwrap_or(hostport);
    let host = if let Some(h) = hostport.strip_prefix('[') {
        h.split(']').next().unwrap_or(h)
    } else {
        hostport.split(':').next().unwrap_or(hostport)
    };
    host.to_ascii_lowercase()
}

fn curl(ctx: &ClassifyContext, v: &mut Verdict, args: &[Word]) {
    v.raise(Tier::Network, "curl: transfers over the network");
    let spec = Spec::new(
        "AbcCdDeEFHKmoPQrTtuUwxXyYz",
        &[
            "user-agent",
            "cookie",
            "cookie-jar",
            "continue-at",
            "data",
            "data-binary",
            "data-raw",
            "data-ascii",
            "data-urlencode",
            "dump-header",
            "referer",
            "cert",
            "form",
            "form-string",
            "header",
            "config",
            "max-time",
            "output",
            "ftp-port",
            "quote",
            "range",
            "upload-file",
            "telnet-option",
            "user",
            "proxy-user",
            "write-out",
            "proxy",
            "request",
            "speed-limit",
            "speed-time",
            "time-cond",
            "url",
            "connect-timeout",
            "retry",
            "output-dir",
            "trace",
            "trace-ascii",
            "stderr",
            "libcurl",
            "json",
            "resolve",
            "connect-to",
            "cacert",
            "key",
            "etag-save",
            "etag-compare",
            "hsts",
            "alt-svc",
            "unix-socket",
            "interface",
            "max-filesize",
            "limit-rate",
            "retry-delay",
            "retry-max-time",
            "variable",
            "expand-url",
            "aws-sigv4",
            "oauth2-bearer",
            "pass",
            "dns-servers",
            "noproxy",
            "create-file-mode",
            "parallel-max",
            "ciphers",
            "local-port",
            "keepalive-time",
            "ftp-method",
            "mail-from",
            "mail-rcpt",
            "request-target",
            "socks5",
            "socks5-hostname",
            "preproxy",
        ],
    );
    let out = &[
        "output",
        "dump-header",
        "cookie-jar",
        "trace",
        "trace-ascii",
        "stderr",
        "libcurl",
        "etag-save",
    ];
    for o in write_opts(ctx, v, args, &spec, "oDc", out, "curl -o") {
        match o {
            Opt::Short('O', _) | Opt::Long("remote-name" | "remote-name-all", _) => {
                v.raise(Tier::Network, "curl -O: saves into the working directory");
                v.writes.push(".".into());
            }
            Opt::Long("url", Some(u)) => v.host(url_host(u)),
            Opt::Short('K', _) | Opt::Long("config", _) => v.note("curl -K: options from a file"),
            Opt::Operand(i) => v.host(url_host(&args[i].text)),
            _ => {}
        }
    }
}

fn remote(ctx: &ClassifyContext, v: &mut Verdict, name: &str, args: &[Word]) {
    let short_val = match name {
        "ssh" => "bcDEeFIiJLlmOopQRSWwB",
        "scp" => "cDFiJlooPS",
        "sftp" => "BbcDFiJloPRS",
        "rsync" => "efBTM",
        _ => "",
    };
    let spec = Spec {
        short_val,
        long_val: &[
            "rsh",
            "rsync-path",
            "filter",
            "exclude",
            "exclude-from",
            "include",
            "include-from",
            "files-from",
            "temp-dir",
            "compare-dest",
            "copy-dest",
            "link-dest",
            "log-file",
            "password-file",
            "port",
            "timeout",
            "chmod",
            "partial-dir",
            "backup-dir",
            "suffix",
            "chown",
            "usermap",
            "groupmap",
            "block-size",
            "max-size",
            "min-size",
            "bwlimit",
            "out-format",
            "info",
            "debug",
            "compress-choice",
            "checksum-choice",
        ],
        stop_at_operand: name == "ssh",
    };
    let mut ops = Vec::new();
    for o in scan(args, &spec) {
        match o {
            Opt::Operand(i) | Opt::Opaque(i) => ops.push(i),
            Opt::Short('e', _) | Opt::Long("rsh", _) if name == "rsync" => {
                v.note("rsync -e: remote shell program")
            }
            _ => {}
        }
    }
    match name {
        "ssh" | "mosh" | "rsh" => {
            if let Some(&h) = ops.first() {
                let t = &args[h].text;
                v.host(t.rsplit('@').next().unwrap_or(t).to_ascii_lowercase());
            }
            v.raise(Tier::Network, format!("{name}: connects to another host"));
        }
        _ => {
            let mut remote = false;
            for &i in &ops {
                let t = &args[i].text;
                if let Some((h, _)) = t.split_once(':') {
                    if !h.contains('/') && !h.is_empty() {
                        remote = true;
                        let h = h.strip_prefix("rsync").unwrap_or(h);
                        v.host(
                            h.rsplit('@')
                                .next()
                                .unwrap_or(h)
                                .trim_start_matches('/')
                                .to_ascii_lowercase(),
                        );
                    }
                }
            }
            if remote || name == "sftp" {
                v.raise(
                    Tier::Network,
                    format!("{name}: copies to or from another host"),
                );
            } else {
                if let Some(&last) = ops.last() {
                    if ops.len() >= 2 {
                        write_target(ctx, v, &args[last], name);
                    }
                }
                if args.iter().any(|a| {
                    a.text.starts_with("--delete") || a.text.starts_with("--remove-source")
                }) {
                    v.raise(Tier::Destructive, format!("{name} --delete: deletes files"));
                }
                v.raise(Tier::Write, format!("{name}: copies files"));
            }
        }
    }
}

// ---- git ---------------------------------------------------------------

#[rustfmt::skip]
const GIT_READ: &[&str] = &[
    "status", "log", "diff", "show", "rev-parse", "describe", "ls-files", "ls-tree", "cat-file",
    "blame", "annotate", "shortlog", "grep", "whatchanged", "name-rev", "merge-base",
    "count-objects", "rev-list", "for-each-ref", "show-ref", "var", "version", "help",
    "check-ignore", "check-attr", "check-ref-format", "diff-tree", "diff-files", "diff-index",
    "cherry", "range-diff", "show-branch", "verify-commit", "verify-tag", "get-tar-commit-id",
    "help", "check-mailmap", "fsck-objects", "show-index",
];

#[rustfmt::skip]
const GIT_WRITE: &[&str] = &[
    "add", "commit", "merge", "rebase", "cherry-pick", "revert", "am", "apply", "rm", "mv", "init",
    "bisect", "gc", "prune", "repack", "pack-refs", "replace", "fast-import", "commit-tree",
    "hash-object", "update-index", "read-tree", "write-tree", "merge-file", "mergetool", "difftool",
    "format-patch", "bundle", "sparse-checkout", "maintenance", "update-ref", "fsck", "stage",
    "citool", "gui", "archive", "notes", "rerere", "mktag", "mktree", "checkout-index",
    "unpack-objects", "index-pack", "pack-objects", "prune-packed", "multi-pack-index",
    "commit-graph", "credential", "instaweb", "worktree", "lfs",
];

#[rustfmt::skip]
const GIT_NETWORK: &[&str] = &[
    "fetch", "pull", "clone", "ls-remote", "send-email", "request-pull", "fetch-pack", "send-pack",
    "svn", "p4", "remote-ext",
];

fn git(ctx: &ClassifyContext, v: &mut Verdict, args: &[Word]) {
    let mut i = 0;
    let mut overrides: Vec<String> = Vec::new();
    while i < args.len() {
        let a = &args[i];
        let t = a.text.as_str();
        if a.opaque() {
            return v.fail("git: argument only known at run time: not classified");
        }
        if !t.starts_with('-') {
            break;
        }
        match t {
            "-C" => i += 1,
            "-c" | "--config-env" | "--git-dir" | "--work-tree" | "--namespace" | "--exec-path"
            | "--super-prefix" | "--list-cmds" => {
                overrides.push(t.to_string());
                if t != "--exec-path" {
                    i += 1;
                }
            }
            "-p" | "--paginate" => overrides.push(t.to_string()),
            "-P"
            | "--no-pager"
            | "--bare"
            | "--no-replace-objects"
            | "--literal-pathspecs"
            | "--glob-pathspecs"
            | "--noglob-pathspecs"
            | "--icase-pathspecs"
            | "--no-optional-locks"
            | "--no-advice"
            | "--html-path"
            | "--man-path"
            | "--info-path"
            | "--no-lazy-fetch" => {}
            "--version" | "-v" | "--help" | "-h" => {
                return v.note("git --version/--help");
            }
            _ if t.starts_with("-c") => overrides.push("-c".into()),
            _ if t.starts_with("-C") => {}
            _ if t.starts_with("--config-env=")
                || t.starts_with("--git-dir=")
                || t.starts_with("--work-tree=")
                || t.starts_with("--namespace=")
                || t.starts_with("--exec-path=")
                || t.starts_with("--super-prefix=") =>
            {
                overrides.push(t.split('=').next().unwrap_or(t).to_string())
            }
            _ if t.starts_with("--list-cmds=") => {}
            _ => {
                return v.raise(
                    Tier::Write,
                    format!("git {t}: unknown global option: treated as write"),
                )
            }
        }
        i += 1;
    }
    if !overrides.is_empty() {
        v.raise(
            Tier::Write,
            format!(
                "git {}: changes configuration, repository or pager: not read-only",
                overrides.join(" ")
            ),
        );
    }
    let Some(sub) = args.get(i) else {
        return v.note("git: prints usage");
    };
    let sub = sub.text.as_str();
    let rest = &args[i + 1..];
    if rest.iter().any(|w| w.opaque())
        && !rest
            .iter()
            .take_while(|w| w.text != "--")
            .any(|w| w.opaque())
    {
        // Opaque words only after `--` are paths.
    } else if rest
        .iter()
        .take_while(|w| w.text != "--")
        .any(|w| w.opaque())
    {
        return v.fail(format!(
            "git {sub}: argument only known at run time: not classified"
        ));
    }
    let flags: Vec<&str> = rest
        .iter()
        .take_while(|w| w.text != "--")
        .map(|w| w.text.as_str())
        .filter(|t| t.starts_with('-') && t.len() > 1)
        .collect();
    let operands: Vec<&str> = {
        let mut out = Vec::new();
        let mut after = false;
        for w in rest {
            if after {
                out.push(w.text.as_str());
            } else if w.text == "--" {
                after = true;
            } else if !w.text.starts_with('-') || w.text == "-" {
                out.push(w.text.as_str());
            }
        }
        out
    };
    let has_dd = rest.iter().any(|w| w.text == "--");
    let short = |c: char| {
        flags
            .iter()
            .any(|f| !f.starts_with("--") && f[1..].contains(c))
    };
    let long = |full: &str| {
        flags.iter().any(|f| {
            f.strip_prefix("--")
                .is_some_and(|n| long_is(n.split('=').next().unwrap_or(n), full))
        })
    };
    let long_exact = |full: &str| {
        flags.iter().any(|f| {
            f.strip_prefix("--")
                .is_some_and(|n| n.split('=').next() == Some(full))
        })
    };
    let is_read = GIT_READ.contains(&sub);
    match sub {
        // `git help TOPIC` runs man (man.<tool>.cmd), info or a browser
        // (browser.<tool>.cmd): commands the repository's config may name
        "help"
            if !operands.is_empty()
                || short('w')
                || short('i')
                || short('m')
                || long("web")
                || long("info")
                || long("man") =>
        {
            v.raise(
                Tier::Write,
                "git help TOPIC: runs man, info or a browser (configurable commands)",
            )
        }
        _ if is_read => {
            let mut risky = Vec::new();
            for f in &flags {
                let Some(n) = f.strip_prefix("--") else {
                    continue;
                };
                let n = n.split('=').next().unwrap_or(n);
                for bad in [
                    "output",
                    "ext-diff",
                    "textconv",
                    "open-files-in-pager",
                    "filters",
                    "exec",
                ] {
                    if long_is(n, bad) && n.len() >= 2 {
                        risky.push(format!("--{bad}"));
                    }
                }
            }
            if sub == "grep"
                && flags
                    .iter()
                    .any(|f| f.starts_with("-O") || (!f.starts_with("--") && f.contains('O')))
            {
                risky.push("-O".into());
            }
            if !risky.is_empty() {
                v.raise(
                    Tier::Write,
                    format!(
                        "git {sub} {}: writes a file or runs a program: not read-only",
                        risky.join(" ")
                    ),
                );
                for f in &flags {
                    if let Some(p) = f.strip_prefix("--output=") {
                        write_target(ctx, v, &Word::lit(p), "git --output");
                    }
                }
            } else {
                v.note(format!("git {sub}: reads the repository"));
            }
        }
        "branch" => {
            let list_flags = long("list")
                || short('l')
                || long("show-current")
                || long("contains")
                || long("no-contains")
                || long("merged")
                || long("no-merged")
                || long("points-at");
            if (short('D')) || ((short('d') || long("delete")) && (short('f') || long("force"))) {
                v.raise(
                    Tier::Destructive,
                    "git branch -D: deletes an unmerged branch",
                );
            } else if short('d')
                || long("delete")
                || short('m')
                || short('M')
                || short('c')
                || short('C')
                || long("move")
                || long("copy")
                || long("set-upstream-to")
                || short('u')
                || long("unset-upstream")
                || long("edit-description")
            {
                v.raise(Tier::Write, "git branch -d/-m/-c/-u: changes branches");
            } else if short('f') || long("force") {
                v.raise(
                    Tier::Destructive,
                    "git branch -f: resets an existing branch",
                );
            } else if operands.is_empty() || list_flags {
                v.note("git branch: lists branches");
            } else {
                v.raise(Tier::Write, "git branch NAME: creates a branch");
            }
        }
        "tag" => {
            if short('d') || long("delete") {
                v.raise(Tier::Write, "git tag -d: deletes a tag");
            } else if operands.is_empty()
                || short('l')
                || long("list")
                || short('v')
                || long("verify")
                || long("contains")
                || long("points-at")
            {
                v.note("git tag: lists tags");
            } else {
                v.raise(Tier::Write, "git tag NAME: creates a tag");
            }
        }
        "remote" => match operands.first().copied() {
            None => v.note("git remote: lists remotes"),
            Some("show") if short('n') => v.note("git remote show -n: reads configuration"),
            Some("get-url") => v.note("git remote get-url: reads configuration"),
            Some("show") | Some("update") | Some("prune") => v.raise(
                Tier::Network,
                format!("git remote {}: contacts the remote", operands[0]),
            ),
            Some(op) => v.raise(
                Tier::Write,
                format!("git remote {op}: changes configuration"),
            ),
        },
        "config" => {
            let get = long("get")
                || long("get-all")
                || long("get-regexp")
                || long("get-urlmatch")
                || long("list")
                || short('l')
                || matches!(operands.first().copied(), Some("get" | "list"));
            // git >= 2.46 subcommands: only `get` and `list` read
            let sub = operands.first().copied();
            if long("edit") || short('e') || sub == Some("edit") {
                v.raise(Tier::Write, "git config --edit: runs an editor");
            } else if matches!(
                sub,
                Some("set" | "unset" | "rename-section" | "remove-section")
            ) {
                v.raise(Tier::Write, "git config: changes configuration");
            } else if get
                || (operands.len() == 1
                    && !long("unset")
                    && !long("unset-all")
                    && !long("add")
                    && !long("replace-all")
                    && !long("rename-section")
                    && !long("remove-section"))
            {
                v.note("git config: reads configuration");
            } else {
                v.raise(Tier::Write, "git config: changes configuration");
            }
        }
        "stash" => match operands.first().copied() {
            Some("list") | Some("show") => v.note("git stash list/show: reads"),
            Some("drop") | Some("clear") => v.raise(
                Tier::Destructive,
                format!("git stash {}: discards stashed changes", operands[0]),
            ),
            _ => v.raise(Tier::Write, "git stash: changes the working tree"),
        },
        "reflog" => match operands.first().copied() {
            Some("expire") | Some("delete") => v.raise(
                Tier::Destructive,
                "git reflog expire/delete: discards history",
            ),
            None | Some("show") | Some("exists") => v.note("git reflog: reads"),
            _ => v.note("git reflog: reads"),
        },
        "notes" => match operands.first().copied() {
            None | Some("list") | Some("show") => v.note("git notes list/show: reads"),
            _ => v.raise(Tier::Write, "git notes: changes notes"),
        },
        "submodule" => match operands.first().copied() {
            None | Some("status") | Some("summary") => v.note("git submodule status: reads"),
            Some("update") | Some("add") | Some("sync") => {
                v.raise(Tier::Network, "git submodule update/add: fetches")
            }
            Some("foreach") => v.raise(Tier::Write, "git submodule foreach: runs a command"),
            _ => v.raise(Tier::Write, "git submodule: changes submodules"),
        },
        "symbolic-ref" => {
            if operands.len() >= 2 || short('d') || long("delete") {
                v.raise(Tier::Write, "git symbolic-ref: changes a ref");
            } else {
                v.note("git symbolic-ref: reads a ref");
            }
        }
        "reset" => {
            if long_exact("hard") || long("hard") && flags.iter().any(|f| f.starts_with("--h")) {
                v.raise(Tier::Destructive, "git reset --hard: discards changes");
            } else if long("merge") || long("keep") {
                v.raise(
                    Tier::Write,
                    "git reset --merge/--keep: changes the working tree",
                );
            } else {
                v.raise(Tier::Write, "git reset: changes the index and HEAD");
            }
        }
        "clean" => {
            if short('n') || long("dry-run") {
                v.note("git clean -n: lists files");
            } else {
                v.raise(Tier::Destructive, "git clean: deletes untracked files");
            }
        }
        "checkout" => {
            if has_dd
                || short('f')
                || long("force")
                || operands.contains(&".")
                || long("pathspec-from-file")
            {
                v.raise(
                    Tier::Destructive,
                    "git checkout -- PATHS/-f/.: discards changes",
                );
            } else {
                v.raise(
                    Tier::Write,
                    "git checkout: changes the working tree and runs hooks",
                );
            }
        }
        "switch" => {
            if short('f') || long("force") || long("discard-changes") {
                v.raise(Tier::Destructive, "git switch -f: discards changes");
            } else {
                v.raise(
                    Tier::Write,
                    "git switch: changes the working tree and runs hooks",
                );
            }
        }
        "restore" => {
            if (short('S') || long("staged")) && !(short('W') || long("worktree")) {
                v.raise(Tier::Write, "git restore --staged: changes the index");
            } else {
                v.raise(
                    Tier::Destructive,
                    "git restore: discards working-tree changes",
                );
            }
        }
        "push" => {
            v.raise(Tier::Network, "git push: sends to a remote");
            let force = short('f')
                || short('d')
                || flags.iter().any(|f| {
                    f.strip_prefix("--").is_some_and(|n| {
                        let n = n.split('=').next().unwrap_or(n);
                        (long_is(n, "force") && n.len() >= 2)
                            || n.starts_with("force-")
                            || (long_is(n, "mirror") && n.len() >= 2)
                            || (long_is(n, "delete") && n.len() >= 2)
                            || (long_is(n, "prune") && n.len() >= 2)
                    })
                })
                || operands
                    .iter()
                    .skip(1)
                    .any(|r| r.starts_with('+') || r.starts_with(':'));
            if force {
                v.raise(
                    Tier::Destructive,
                    "git push --force/--delete/+ref: overwrites or deletes remote history",
                );
            }
            if let Some(r) = operands.first() {
                if r.contains("://") || r.contains('@') {
                    v.host(url_host(&r.replace(':', "/")));
                }
            }
        }
        "clone" => {
            v.raise(Tier::Network, "git clone: downloads a repository");
            if let Some(u) = operands.first() {
                v.host(git_url_host(u));
            }
            if let Some(d) = operands.get(1) {
                write_target(ctx, v, &Word::lit(d), "git clone");
            }
        }
        _ if GIT_NETWORK.contains(&sub) => {
            v.raise(Tier::Network, format!("git {sub}: contacts a remote"));
            if let Some(u) = operands.first() {
                if u.contains("://") || u.contains('@') {
                    v.host(git_url_host(u));
                }
            }
        }
        _ if GIT_WRITE.contains(&sub) => {
            if sub == "filter-branch" {
                v.raise(Tier::Destructive, "git filter-branch: rewrites history");
            }
            v.raise(
                Tier::Write,
                format!("git {sub}: changes the repository or working tree"),
            );
        }
        "filter-branch" | "filter-repo" => {
            v.raise(Tier::Destructive, format!("git {sub}: rewrites history"))
        }
        _ => v.raise(
            Tier::Write,
            format!("git {sub}: unknown subcommand (may be an alias): treated as write"),
        ),
    }
}

/// Host of a git URL: `scheme://host/...` or scp-like `user@host:path`.
fn git_url_host(u: &str) -> String {
    if u.contains("://") {
        return url_host(u);
    }
    match u.split_once(':') {
        Some((h, _)) if !h.contains('/') => h.rsplit('@').next().unwrap_or(h).to_ascii_lowercase(),
        _ => String::new(),
    }
}
