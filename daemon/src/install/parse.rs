//! argv -> [`InstallIntent`], one function per package manager.
//!
//! Sources for the command forms: npm-install(1), npm-ci(1), npm-exec(1),
//! pnpm CLI docs, yarn classic and berry CLI docs, bun docs, pip's user guide
//! and `pip install --help`, uv's CLI reference, pipx and poetry docs,
//! cargo(1) subcommand pages, `go help get|install|run|mod`, gem(1),
//! bundle-install(1), apt-get(8), dnf(8), apk(8), brew(1), conda CLI docs.

use super::spec::{self, source_rank, Spec};
use super::{scope, source, InstallIntent, PackageRef};

/// Options of one command line, split from positionals.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// `(name, value)` in order; `--x=v` and `--x v` (for valued `--x`) both
    /// give `("--x", Some("v"))`.
    opts: Vec<(String, Option<String>)>,
    /// Positionals (all of them, or only the first with `stop`).
    pos: Vec<String>,
    /// With `stop`: every word after the first positional, raw.
    rest: Vec<String>,
}

impl Scan {
    fn has(&self, names: &[&str]) -> bool {
        self.opts.iter().any(|(n, _)| names.contains(&n.as_str()))
    }
    /// The last value of an option: `--ignore-scripts=false` is `Some("false")`.
    fn value(&self, names: &[&str]) -> Option<&str> {
        self.values(names).into_iter().last()
    }
    fn values(&self, names: &[&str]) -> Vec<&str> {
        self.opts
            .iter()
            .filter(|(n, _)| names.contains(&n.as_str()))
            .filter_map(|(_, v)| v.as_deref())
            .collect()
    }
    /// A boolean option given and not set to false (`--x`, `--x=true`).
    fn on(&self, names: &[&str]) -> bool {
        self.opts
            .iter()
            .filter(|(n, _)| names.contains(&n.as_str()))
            .last()
            .is_some_and(|(_, v)| v.as_deref().is_none_or(|v| v != "false" && v != "0"))
    }
    fn rendered(&self) -> Vec<String> {
        self.opts
            .iter()
            .map(|(n, v)| match v {
                Some(v) => format!("{n}={v}"),
                None => n.clone(),
            })
            .collect()
    }
}

/// Splits `args` into options and positionals. `valued` lists the options
/// that take a value (long `--x` and short `-x`); `clusters` lets `-abc` be
/// `-a -b -c` (false for Go's single-dash long options); with `stop`, the
/// first positional ends option parsing (the rest is a command's own argv).
pub(crate) fn scan(args: &[String], valued: &[&str], clusters: bool, stop: bool) -> Scan {
    let mut s = Scan::default();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            if stop {
                if let Some(first) = args.get(i) {
                    s.pos.push(first.clone());
                    s.rest = args[i + 1..].to_vec();
                }
            } else {
                s.pos.extend(args[i..].iter().cloned());
            }
            return s;
        }
        if a.len() < 2 || !a.starts_with('-') {
            s.pos.push(a.clone());
            if stop {
                s.rest = args[i..].to_vec();
                return s;
            }
            continue;
        }
        let long = a.starts_with("--") || !clusters;
        if long {
            if let Some((n, v)) = a.split_once('=') {
                s.opts.push((n.to_string(), Some(v.to_string())));
            } else if valued.contains(&a.as_str()) && i < args.len() {
                s.opts.push((a.clone(), Some(args[i].clone())));
                i += 1;
            } else {
                s.opts.push((a.clone(), None));
            }
            continue;
        }
        // Short cluster: -abc, -rfile, -r file.
        let chars: Vec<char> = a[1..].chars().collect();
        for (k, c) in chars.iter().enumerate() {
            let name = format!("-{c}");
            if valued.contains(&name.as_str()) {
                let tail: String = chars[k + 1..].iter().collect();
                let tail = tail.strip_prefix('=').unwrap_or(&tail).to_string();
                if !tail.is_empty() {
                    s.opts.push((name, Some(tail)));
                } else if i < args.len() {
                    s.opts.push((name, Some(args[i].clone())));
                    i += 1;
                } else {
                    s.opts.push((name, None));
                }
                break;
            }
            s.opts.push((name, None));
        }
    }
    s
}

/// The intent under construction.
struct Out(InstallIntent);

impl Out {
    fn new(manager: &str, ecosystem: &str, operation: &str) -> Out {
        Out(InstallIntent {
            manager: manager.into(),
            operation: operation.into(),
            ecosystem: ecosystem.into(),
            packages: vec![],
            source: source::REGISTRY.into(),
            scope: scope::PROJECT.into(),
            flags: vec![],
            warnings: vec![],
            scripts_enabled: true,
            fetch_and_run: false,
            lockfile: None,
            files: vec![],
            requirements: vec![],
            argv: vec![],
            hardening: None,
        })
    }
    /// A form of a known manager that the parser does not know: it asks.
    fn unknown(manager: &str, ecosystem: &str, sub: &str, head: &Scan) -> Out {
        let mut o = Out::with(manager, ecosystem, "unknown", &[head]);
        o.warn(format!(
            "{manager} {sub}: not a form the install guard knows; it must be approved as is"
        ));
        o
    }
    /// [`Out::new`] with the options of `scans` as flags.
    fn with(manager: &str, ecosystem: &str, operation: &str, scans: &[&Scan]) -> Out {
        let mut o = Out::new(manager, ecosystem, operation);
        for x in scans {
            o.flags(x);
        }
        o
    }
    fn raise_source(&mut self, s: &str) {
        if source_rank(s) > source_rank(&self.0.source) {
            self.0.source = s.to_string();
        }
    }
    fn spec(&mut self, sp: Spec) {
        self.raise_source(sp.source);
        if let Some(w) = sp.warning {
            self.warn(w);
        }
        self.0.packages.push(sp.pkg);
    }
    fn specs<'a>(&mut self, words: impl IntoIterator<Item = &'a String>, f: fn(&str) -> Spec) {
        for w in words {
            self.spec(f(w));
        }
    }
    fn warn(&mut self, w: String) {
        if !self.0.warnings.contains(&w) {
            self.0.warnings.push(w);
        }
    }
    fn flags(&mut self, s: &Scan) {
        self.0.flags.extend(s.rendered());
    }
    fn file(&mut self, f: &str) {
        if !self.0.files.iter().any(|x| x == f) {
            self.0.files.push(f.to_string());
        }
    }
    fn requirements(&mut self, f: &str) {
        self.file(f);
        let src = if f.contains("://") {
            source::URL
        } else {
            source::REQUIREMENTS
        };
        self.raise_source(src);
    }
    /// Marks a lockfile install; only valid when no package was named.
    fn lockfile(&mut self, f: &str) {
        if self.0.packages.is_empty() {
            self.0.source = source::LOCKFILE.into();
            self.0.lockfile = Some(f.to_string());
            self.file(f);
        }
    }
    /// A lockfile install on `lock` when one of `flags` is on in `scans`,
    /// else an install that reads `manifest`.
    fn locked_by(&mut self, scans: &[&Scan], flags: &[&str], lock: &str, manifest: &str) {
        if scans.iter().any(|x| x.on(flags)) {
            self.lockfile(lock);
        } else {
            self.file(manifest);
        }
    }
    fn global(&mut self) {
        if self.0.scope == scope::PROJECT {
            self.0.scope = scope::GLOBAL.into();
        }
    }
    fn system(&mut self) {
        self.0.scope = scope::SYSTEM.into();
    }
    fn scripts(&mut self, on: bool) {
        self.0.scripts_enabled = on;
    }
    fn fetch_and_run(&mut self) {
        self.0.fetch_and_run = true;
    }
    fn custom_index(&mut self, s: &Scan, names: &[&str], what: &str) {
        for v in s.values(names) {
            self.warn(format!(
                "{what} {v}: packages may come from a non-default index (dependency confusion)"
            ));
        }
    }
    fn done(self) -> Option<InstallIntent> {
        Some(self.0)
    }
}

/// Specs of `pos`; a separate version option (`--version 1.2`) applies
/// when exactly one package is named without a version of its own.
fn versioned(pos: &[String], f: fn(&str) -> Spec, version: Option<&str>) -> Vec<Spec> {
    let mut specs: Vec<Spec> = pos.iter().map(|p| f(p)).collect();
    if let [only] = specs.as_mut_slice() {
        if only.pkg.version.is_none() {
            only.pkg.version = version.map(String::from);
        }
    }
    specs
}

fn basename(w: &str) -> &str {
    w.rsplit('/').next().unwrap_or(w)
}

fn is_assignment(w: &str) -> bool {
    match w.split_once('=') {
        Some((n, _)) => {
            !n.is_empty()
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !n.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// Environment variables that change where a manager fetches from or
/// whether it runs scripts.
fn config_env(name: &str) -> bool {
    let u = name.to_ascii_uppercase();
    [
        "NPM_CONFIG_",
        "YARN_",
        "PNPM_",
        "BUN_",
        "PIP_",
        "UV_",
        "POETRY_",
        "CARGO_",
        "GOPROXY",
        "GONOSUMDB",
        "GONOSUMCHECK",
        "GOINSECURE",
        "GOPRIVATE",
        "GOFLAGS",
        "GOSUMDB",
        "BUNDLE_",
        "GEM_",
        "CONDA_",
        "HOMEBREW_",
        "DEBIAN_",
        "PYTHONPATH",
        "NODE_OPTIONS",
    ]
    .iter()
    .any(|p| u.starts_with(p))
}

/// Entry: strips assignments and `sudo`/`doas`/`env`, then dispatches.
pub(crate) fn parse(argv: &[String]) -> Option<InstallIntent> {
    let mut i = 0;
    let mut env: Vec<&str> = vec![];
    let mut sudo = false;
    while i < argv.len() {
        let w = argv[i].as_str();
        if is_assignment(w) {
            env.push(w);
            i += 1;
            continue;
        }
        match basename(w) {
            "sudo" | "doas" => {
                sudo = true;
                i += 1;
                while i < argv.len() && argv[i].starts_with('-') {
                    let o = argv[i].as_str();
                    i += 1;
                    if o == "--" {
                        break;
                    }
                    if matches!(
                        o,
                        "-u" | "-g" | "-C" | "-D" | "-h" | "-p" | "-r" | "-t" | "-U"
                    ) {
                        i += 1;
                    }
                }
            }
            "env" => {
                i += 1;
                while i < argv.len() && argv[i].starts_with('-') {
                    let o = argv[i].as_str();
                    i += 1;
                    if matches!(o, "-u" | "-C" | "--unset" | "--chdir") {
                        i += 1;
                    }
                }
            }
            _ => break,
        }
    }
    let prog = basename(argv.get(i)?);
    let args = &argv[i + 1..];
    let mut intent = dispatch(prog, args)?;
    intent.argv = argv.to_vec();
    if sudo {
        intent.scope = scope::SYSTEM.into();
        intent.flags.insert(0, "sudo".into());
    }
    for (k, e) in env.iter().enumerate() {
        intent.flags.insert(k, format!("env:{e}"));
        let name = e.split('=').next().unwrap_or("");
        if config_env(name) {
            intent.warnings.push(format!(
                "{name}: environment setting changes the package manager's configuration"
            ));
        }
    }
    Some(intent)
}

fn is_python(prog: &str) -> bool {
    let rest = prog
        .strip_prefix("python")
        .or_else(|| prog.strip_prefix("pypy"))
        .or_else(|| prog.strip_prefix("py"));
    rest.is_some_and(|r| r.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

fn is_pip(prog: &str) -> bool {
    prog.strip_prefix("pip")
        .is_some_and(|r| r.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

fn dispatch(prog: &str, args: &[String]) -> Option<InstallIntent> {
    match prog {
        "npm" => npm(args),
        "npx" => npm_exec("npx", "exec", args),
        "pnpm" => pnpm(args),
        "pnpx" => npm_exec("pnpm", "dlx", args),
        "yarn" | "yarnpkg" => yarn(args),
        "bun" => bun(args),
        "bunx" => npm_exec("bun", "x", args),
        "uv" => uv(args),
        "uvx" => uv_tool_run(args),
        "pipx" => pipx(args),
        "poetry" => poetry(args),
        "cargo" => cargo(args),
        "cargo-binstall" => cargo_binstall(args),
        "go" => go(args),
        "gem" => gem(args),
        "bundle" | "bundler" => bundle(args),
        "apt" | "apt-get" | "aptitude" => apt(prog, args),
        "dnf" | "yum" | "microdnf" | "dnf5" | "tdnf" => dnf(prog, args),
        "apk" => apk(args),
        "brew" => brew(args),
        "conda" | "mamba" | "micromamba" => conda(prog, args),
        "pip-sync" => pip_sync(args),
        p if is_pip(p) => pip("pip", "", args),
        p if is_python(p) => python_m(args),
        _ => None,
    }
}

/// `python [-I -X opt ...] -m pip|pipx|uv ...`.
fn python_m(args: &[String]) -> Option<InstallIntent> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "-m" {
            let module = args.get(i + 1)?.as_str();
            let rest = &args[i + 2..];
            return match module {
                "pip" | "pip3" => pip("pip", "", rest),
                "pipx" => pipx(rest),
                "uv" => uv(rest),
                "poetry" => poetry(rest),
                "conda" => conda("conda", rest),
                _ => None,
            };
        }
        if let Some(m) = a.strip_prefix("-m") {
            if !m.is_empty() && !a.starts_with("--") {
                return dispatch_module(m, &args[i + 1..]);
            }
        }
        if !a.starts_with('-') || a == "-c" || a == "-" {
            return None; // a script, `-c code` or stdin: not an install form
        }
        i += if matches!(a, "-X" | "-W" | "-Q") {
            2
        } else {
            1
        };
    }
    None
}

fn dispatch_module(m: &str, rest: &[String]) -> Option<InstallIntent> {
    match m {
        "pip" | "pip3" => pip("pip", "", rest),
        "pipx" => pipx(rest),
        "uv" => uv(rest),
        _ => None,
    }
}

// ---------------------------------------------------------------- npm family

const NPM_VALUED: &[&str] = &[
    "--registry",
    "--prefix",
    "--workspace",
    "-w",
    "--tag",
    "--omit",
    "--include",
    "--install-strategy",
    "--cache",
    "--userconfig",
    "--globalconfig",
    "--loglevel",
    "--scope",
    "--otp",
    "--before",
    "--location",
    "--save-prefix",
    "--script-shell",
    "--package",
    "-p",
    "--call",
    "-c",
    "--init-module",
    "--cpu",
    "--os",
    "--libc",
    "--audit-level",
];

const NPM_NOT_INSTALL: &[&str] = &[
    "test",
    "t",
    "tst",
    "run",
    "run-script",
    "rum",
    "urn",
    "start",
    "stop",
    "restart",
    "ls",
    "list",
    "la",
    "ll",
    "outdated",
    "view",
    "v",
    "info",
    "show",
    "search",
    "find",
    "s",
    "se",
    "help",
    "help-search",
    "version",
    "config",
    "c",
    "get",
    "set",
    "whoami",
    "pack",
    "publish",
    "unpublish",
    "explain",
    "why",
    "doctor",
    "prefix",
    "root",
    "bin",
    "fund",
    "docs",
    "home",
    "repo",
    "bugs",
    "query",
    "sbom",
    "ping",
    "login",
    "logout",
    "adduser",
    "token",
    "owner",
    "access",
    "dist-tag",
    "deprecate",
    "org",
    "team",
    "star",
    "stars",
    "unstar",
    "diff",
    "pkg",
    "completion",
    "shrinkwrap",
    "hook",
    "profile",
];

/// npm: `npm i lodash@4`, `npm ci`, `npm install -g x`, `npm exec`, ...
fn npm(args: &[String]) -> Option<InstallIntent> {
    let head = scan(args, NPM_VALUED, true, true);
    let sub = head.pos.first()?.as_str();
    let rest = &head.rest;
    let op = match sub {
        "install" | "i" | "in" | "ins" | "inst" | "insta" | "instal" | "isnt" | "isnta"
        | "isntal" | "isntall" | "add" => "install",
        "ci" | "clean-install" | "ic" | "install-clean" | "isntall-clean" => "ci",
        "install-ci-test" | "cit" => "install-ci-test",
        "install-test" | "it" => "install-test",
        "update" | "up" | "upgrade" | "udpate" => "update",
        "uninstall" | "un" | "unlink" | "remove" | "rm" | "r" => "remove",
        "dedupe" | "ddp" => "dedupe",
        "prune" => "prune",
        "rebuild" | "rb" => "rebuild",
        "link" | "ln" => "link",
        "exec" | "x" => return npm_exec_after("npm", "exec", &head, rest),
        "init" | "create" | "innit" => {
            let s = scan(rest, NPM_VALUED, true, true);
            let init = s.pos.first()?;
            if init.starts_with('-') {
                return None;
            }
            // npm init <initializer> runs `npm exec create-<initializer>`.
            let sp = spec::npm(init);
            let pkg = if sp.source != source::REGISTRY {
                sp
            } else if let Some(scope) = sp.pkg.name.strip_prefix('@') {
                let (sc, name) = scope.split_once('/').unwrap_or((scope, ""));
                let name = if name.is_empty() {
                    "create".to_string()
                } else {
                    format!("create-{name}")
                };
                Spec {
                    pkg: PackageRef::new(format!("@{sc}/{name}"), sp.pkg.version.as_deref()),
                    ..sp
                }
            } else {
                Spec {
                    pkg: PackageRef::new(
                        format!("create-{}", sp.pkg.name),
                        sp.pkg.version.as_deref(),
                    ),
                    ..sp
                }
            };
            let mut o = Out::with("npm", "npm", "init", &[&head, &s]);
            o.spec(pkg);
            o.fetch_and_run();
            return o.done();
        }
        "audit" => {
            let s = scan(rest, NPM_VALUED, true, false);
            if s.pos.first().map(String::as_str) != Some("fix") {
                return None;
            }
            "audit fix"
        }
        "cache" => {
            let s = scan(rest, NPM_VALUED, true, false);
            if s.pos.first().map(String::as_str) != Some("add") {
                return None;
            }
            let mut o = Out::with("npm", "npm", "cache add", &[&head, &s]);
            o.specs(&s.pos[1..], spec::npm);
            o.scripts(false);
            return o.done();
        }
        s if NPM_NOT_INSTALL.contains(&s) => return None,
        s => return Out::unknown("npm", "npm", s, &head).done(),
    };
    let s = scan(rest, NPM_VALUED, true, false);
    let mut o = Out::with("npm", "npm", op, &[&head, &s]);
    let pkgs: &[String] = if op == "audit fix" {
        &s.pos[1..]
    } else {
        &s.pos
    };
    o.specs(pkgs, spec::npm);
    let all = [&head, &s];
    if all.iter().any(|x| x.on(&["-g", "--global"]))
        || all
            .iter()
            .any(|x| x.value(&["--location"]) == Some("global"))
    {
        o.global();
    }
    if op == "link" && pkgs.is_empty() {
        o.global(); // `npm link` in a package links it into the global prefix
        o.raise_source(source::PATH);
    }
    for x in all {
        o.custom_index(x, &["--registry"], "registry");
        if x.has(&["--ignore-scripts"]) {
            o.scripts(!x.on(&["--ignore-scripts"]));
        }
        if x.on(&["--package-lock-only", "--dry-run"]) {
            o.scripts(false);
        }
    }
    match op {
        "ci" | "install-ci-test" => {
            o.lockfile("package-lock.json");
        }
        "install" | "install-test" if pkgs.is_empty() => o.file("package.json"),
        _ => {}
    }
    o.done()
}

const NPX_VALUED: &[&str] = &[
    "--package",
    "-p",
    "--call",
    "-c",
    "--registry",
    "--prefix",
    "--workspace",
    "-w",
    "--cache",
    "--userconfig",
    "--loglevel",
    "--shell",
    "--cwd",
];

/// npx / npm exec / pnpm dlx / bunx / yarn dlx: options, then the command
/// (a package name) and its own arguments.
fn npm_exec(manager: &str, op: &str, args: &[String]) -> Option<InstallIntent> {
    let head = Scan::default();
    npm_exec_after(manager, op, &head, args)
}

fn npm_exec_after(manager: &str, op: &str, head: &Scan, args: &[String]) -> Option<InstallIntent> {
    let s = scan(args, NPX_VALUED, true, true);
    if s.on(&["--no", "--no-install", "--offline"]) || s.value(&["--yes"]) == Some("false") {
        return None; // runs only what is installed locally
    }
    let mut o = Out::with(manager, "npm", op, &[head, &s]);
    let pkgs = s.values(&["--package", "-p"]);
    for p in &pkgs {
        o.spec(spec::npm(p));
    }
    match s.pos.first() {
        Some(cmd) if pkgs.is_empty() => o.spec(spec::npm(cmd)),
        Some(_) => {}
        None if pkgs.is_empty() && s.value(&["--call", "-c"]).is_none() => return None,
        None => {}
    }
    o.custom_index(&s, &["--registry"], "registry");
    o.fetch_and_run();
    o.done()
}

const PNPM_VALUED: &[&str] = &[
    "--filter",
    "-F",
    "--dir",
    "-C",
    "--registry",
    "--store-dir",
    "--virtual-store-dir",
    "--reporter",
    "--loglevel",
    "--save-prefix",
    "--node-linker",
    "--package-import-method",
    "--modules-dir",
    "--lockfile-dir",
    "--global-dir",
    "--package",
    "--workspace-concurrency",
    "--network-concurrency",
    "--child-concurrency",
    "--resolution-mode",
    "--allow-build",
];

const PNPM_NOT_INSTALL: &[&str] = &[
    "run",
    "exec",
    "test",
    "t",
    "tst",
    "start",
    "stop",
    "restart",
    "ls",
    "list",
    "ll",
    "la",
    "outdated",
    "why",
    "store",
    "config",
    "c",
    "get",
    "set",
    "publish",
    "pack",
    "root",
    "bin",
    "licenses",
    "doctor",
    "help",
    "init",
    "server",
    "patch",
    "patch-commit",
    "patch-remove",
    "cat-file",
    "cat-index",
    "find-hash",
    "view",
    "info",
    "show",
    "search",
    "whoami",
    "login",
    "logout",
    "version",
    "completion",
    "docs",
    "home",
    "repo",
    "owner",
    "dist-tag",
    "deprecate",
    "unpublish",
    "ping",
    "sbom",
    "catalog",
];

const PNPM_KNOWN: &[&str] = &["env", "self-update", "setup", "approve-builds", "deploy"];

/// pnpm: add, install (--frozen-lockfile), update, remove, dlx, create, fetch.
fn pnpm(args: &[String]) -> Option<InstallIntent> {
    let head = scan(args, PNPM_VALUED, true, true);
    let Some(sub) = head.pos.first().map(String::as_str) else {
        return None;
    };
    let rest = &head.rest;
    let op = match sub {
        "add" => "add",
        "install" | "i" => "install",
        "update" | "up" | "upgrade" => "update",
        "remove" | "rm" | "uninstall" | "un" | "uni" => "remove",
        "fetch" => "fetch",
        "import" => "import",
        "rebuild" | "rb" => "rebuild",
        "link" | "ln" => "link",
        "dedupe" => "dedupe",
        "prune" => "prune",
        "dlx" => return npm_exec_after("pnpm", "dlx", &head, rest),
        "create" => return create("pnpm", "create", &head, rest),
        "audit" => {
            if !scan(rest, PNPM_VALUED, true, false).has(&["--fix"]) {
                return None;
            }
            "audit fix"
        }
        s if PNPM_NOT_INSTALL.contains(&s) => return None,
        s if PNPM_KNOWN.contains(&s) => {
            return Out::unknown("pnpm", "npm", s, &head).done();
        }
        _ => return None, // `pnpm <script>` runs a package.json script
    };
    let s = scan(rest, PNPM_VALUED, true, false);
    let mut o = Out::with("pnpm", "npm", op, &[&head, &s]);
    o.specs(&s.pos, spec::npm);
    node_common(&mut o, &[&head, &s]);
    if op == "fetch" {
        o.scripts(false);
        o.lockfile("pnpm-lock.yaml");
    } else if op == "install" {
        if [&head, &s].iter().any(|x| x.on(&["--frozen-lockfile"])) {
            o.lockfile("pnpm-lock.yaml");
        } else if s.pos.is_empty() {
            o.file("package.json");
        }
    }
    o.done()
}

/// Global scope, registry and `--ignore-scripts` handling shared by the
/// npm-family managers.
fn node_common(o: &mut Out, scans: &[&Scan]) {
    for x in scans {
        if x.on(&["-g", "--global"]) {
            o.global();
        }
        o.custom_index(x, &["--registry"], "registry");
        if x.has(&["--ignore-scripts"]) {
            o.scripts(!x.on(&["--ignore-scripts"]));
        }
        if x.on(&["--lockfile-only", "--dry-run"]) {
            o.scripts(false);
        }
        if matches!(x.value(&["--mode"]), Some("skip-build" | "update-lockfile")) {
            o.scripts(false);
        }
    }
}

/// `pnpm create x` / `yarn create x` / `bun create x`: runs the package
/// `create-x` (or `@scope/create`), fetched from the registry.
fn create(manager: &str, op: &str, head: &Scan, args: &[String]) -> Option<InstallIntent> {
    let s = scan(args, NPX_VALUED, true, true);
    let first = s.pos.first()?;
    let sp = spec::npm(first);
    let name = if sp.source != source::REGISTRY {
        sp.pkg.name.clone()
    } else if sp.pkg.name.starts_with('@') {
        match sp.pkg.name.split_once('/') {
            Some((sc, n)) => format!("{sc}/create-{n}"),
            None => format!("{}/create", sp.pkg.name),
        }
    } else if sp.pkg.name.starts_with("create-") {
        sp.pkg.name.clone()
    } else {
        format!("create-{}", sp.pkg.name)
    };
    let mut o = Out::with(manager, "npm", op, &[head, &s]);
    o.spec(Spec {
        pkg: PackageRef::new(name, sp.pkg.version.as_deref()),
        ..sp
    });
    o.fetch_and_run();
    o.done()
}

const YARN_VALUED: &[&str] = &[
    "--cwd",
    "--registry",
    "--modules-folder",
    "--cache-folder",
    "--network-timeout",
    "--mutex",
    "--mode",
    "--link-folder",
    "--global-folder",
    "--use-yarnrc",
    "--network-concurrency",
    "--otp",
    "--package",
    "-p",
];

const YARN_NOT_INSTALL: &[&str] = &[
    "run",
    "test",
    "start",
    "bin",
    "cache",
    "check",
    "config",
    "help",
    "info",
    "init",
    "licenses",
    "list",
    "login",
    "logout",
    "outdated",
    "owner",
    "pack",
    "publish",
    "tag",
    "team",
    "version",
    "versions",
    "why",
    "node",
    "exec",
    "explain",
    "constraints",
    "npm",
    "stage",
    "patch",
    "patch-commit",
    "sdks",
    "audit",
    "autoclean",
    "generate-lock-entry",
    "access",
    "search",
];

const YARN_KNOWN: &[&str] = &["set", "plugin", "policies", "workspaces"];

/// yarn classic and berry: bare `yarn`, install, add, remove, upgrade/up,
/// global add, dlx, create, workspace <name> <cmd>.
fn yarn(args: &[String]) -> Option<InstallIntent> {
    let head = scan(args, YARN_VALUED, true, true);
    let sub = head.pos.first().map_or("install", String::as_str);
    let rest = &head.rest;
    let mut scope_global = false;
    let op = match sub {
        "install" => "install",
        "add" => "add",
        "remove" => "remove",
        "upgrade" | "up" | "upgrade-interactive" => "upgrade",
        "import" => "import",
        "link" | "unlink" => "link",
        "rebuild" => "rebuild",
        "dedupe" => "dedupe",
        "unplug" => "unplug",
        "global" => {
            let s = scan(rest, YARN_VALUED, true, true);
            scope_global = true;
            match s.pos.first().map(String::as_str) {
                Some("add") => "add",
                Some("upgrade") => "upgrade",
                Some("remove") => "remove",
                _ => return None, // global list / bin / dir
            }
        }
        "workspace" => {
            // yarn workspace <name> <command...>: the command of that workspace.
            let s = scan(rest, YARN_VALUED, true, true);
            s.pos.first()?;
            let mut inner = yarn(&s.rest)?;
            inner.flags.insert(0, format!("workspace={}", s.pos[0]));
            return Some(inner);
        }
        "dlx" => return npm_exec_after("yarn", "dlx", &head, rest),
        "create" => return create("yarn", "create", &head, rest),
        s if YARN_NOT_INSTALL.contains(&s) => return None,
        s if YARN_KNOWN.contains(&s) => {
            let s2 = scan(rest, YARN_VALUED, true, false);
            if s == "workspaces"
                && matches!(s2.pos.first().map(String::as_str), Some("list" | "info"))
            {
                return None;
            }
            return Out::unknown("yarn", "npm", s, &head).done();
        }
        _ => return None, // `yarn <script>` runs a package.json script or a binary
    };
    let s = scan(rest, YARN_VALUED, true, false);
    let pkgs: &[String] = if scope_global { &s.pos[1..] } else { &s.pos };
    let mut o = Out::with("yarn", "npm", op, &[&head, &s]);
    o.specs(pkgs, spec::npm);
    if scope_global {
        o.global();
    }
    node_common(&mut o, &[&head, &s]);
    if op == "install" {
        let flags = ["--frozen-lockfile", "--immutable"];
        o.locked_by(&[&head, &s], &flags, "yarn.lock", "package.json");
    }
    o.done()
}

const BUN_VALUED: &[&str] = &[
    "--cwd",
    "--registry",
    "--cache-dir",
    "--backend",
    "--cafile",
    "--ca",
    "--config",
    "-c",
    "--filter",
    "-F",
    "--network-concurrency",
    "--concurrent-scripts",
    "--omit",
    "--linker",
    "--package",
    "-p",
];

const BUN_NOT_INSTALL: &[&str] = &[
    "run",
    "test",
    "build",
    "repl",
    "outdated",
    "info",
    "audit",
    "publish",
    "patch",
    "exec",
    "pack",
    "why",
    "help",
    "completions",
    "discord",
];

/// bun: install/i, add/a, remove/rm, update, ci, x (bunx), create, pm trust.
fn bun(args: &[String]) -> Option<InstallIntent> {
    let head = scan(args, BUN_VALUED, true, true);
    let sub = head.pos.first()?.as_str();
    let rest = &head.rest;
    let op = match sub {
        "install" | "i" => "install",
        "add" | "a" => "add",
        "remove" | "rm" => "remove",
        "update" => "update",
        "ci" => "ci",
        "link" => "link",
        "init" => "init",
        "upgrade" => "upgrade",
        "x" => return npm_exec_after("bun", "x", &head, rest),
        "create" | "c" => return create("bun", "create", &head, rest),
        "pm" => {
            let s = scan(rest, BUN_VALUED, true, false);
            match s.pos.first().map(String::as_str) {
                Some("trust") => {
                    let mut o = Out::with("bun", "npm", "pm trust", &[&s]);
                    o.specs(&s.pos[1..], spec::npm);
                    o.warn("bun pm trust: lets these packages run their install scripts".into());
                    return o.done();
                }
                _ => return None,
            }
        }
        s if BUN_NOT_INSTALL.contains(&s) => return None,
        _ => return None, // `bun <file|script>` runs it
    };
    let s = scan(rest, BUN_VALUED, true, false);
    let mut o = Out::with("bun", "npm", op, &[&head, &s]);
    o.specs(&s.pos, spec::npm);
    node_common(&mut o, &[&head, &s]);
    if s.on(&["--trust"]) {
        o.warn("--trust: lets the added packages run their install scripts".into());
    }
    if op == "upgrade" {
        o.global(); // upgrades bun itself
    }
    let frozen = [&head, &s].iter().any(|x| x.on(&["--frozen-lockfile"]));
    if op == "ci" || (op == "install" && frozen) {
        o.lockfile("bun.lock");
    } else if op == "install" && s.pos.is_empty() {
        o.file("package.json");
    }
    o.done()
}

// ------------------------------------------------------------ Python family

const PIP_VALUED: &[&str] = &[
    "-r",
    "--requirement",
    "-c",
    "--constraint",
    "-e",
    "--editable",
    "-i",
    "--index-url",
    "--extra-index-url",
    "--index",
    "--default-index",
    "-f",
    "--find-links",
    "--trusted-host",
    "-t",
    "--target",
    "--prefix",
    "--root",
    "--src",
    "--upgrade-strategy",
    "--python-version",
    "--platform",
    "--implementation",
    "--abi",
    "--progress-bar",
    "--log",
    "--log-file",
    "--cache-dir",
    "--proxy",
    "--retries",
    "--timeout",
    "--exists-action",
    "--cert",
    "--client-cert",
    "-C",
    "--config-settings",
    "--config-setting",
    "--global-option",
    "--install-option",
    "--report",
    "--root-user-action",
    "--python",
    "-p",
    "-d",
    "--dest",
    "-w",
    "--wheel-dir",
    "--no-binary",
    "--only-binary",
    "--keyring-provider",
    "--use-feature",
    "--use-deprecated",
    "--group",
    "--format",
    "--path",
    "--index-strategy",
    "--resolution",
    "--prerelease",
    "--exclude-newer",
    "--link-mode",
    "--python-platform",
    "--refresh-package",
    "--reinstall-package",
    "--upgrade-package",
    "-P",
    "--extra",
    "--directory",
    "--project",
    "--config-file",
    "--color",
    "--torch-backend",
    "-o",
    "--output-file",
];

const PIP_NOT_INSTALL: &[&str] = &[
    "list",
    "show",
    "freeze",
    "check",
    "config",
    "cache",
    "index",
    "inspect",
    "debug",
    "hash",
    "help",
    "search",
    "completion",
    "tree",
];

/// pip and `uv pip`: install, download, wheel, uninstall, sync (uv), compile
/// (uv), lock (pip >= 25.1). `op_prefix` is `"pip "` for uv.
fn pip(manager: &str, op_prefix: &str, args: &[String]) -> Option<InstallIntent> {
    let head = scan(args, PIP_VALUED, true, true);
    let sub = head.pos.first()?.as_str();
    let rest = &head.rest;
    let op = match sub {
        "install" => "install",
        "download" => "download",
        "wheel" => "wheel",
        "uninstall" => "remove",
        "lock" => "lock",
        "sync" if !op_prefix.is_empty() => "sync",
        "compile" if !op_prefix.is_empty() => "compile",
        s if PIP_NOT_INSTALL.contains(&s) => return None,
        s => return Out::unknown(manager, "pypi", &format!("{op_prefix}{s}"), &head).done(),
    };
    let s = scan(rest, PIP_VALUED, true, false);
    let mut o = Out::with(manager, "pypi", &format!("{op_prefix}{op}"), &[&head, &s]);
    let all = [&head, &s];
    if matches!(op, "sync" | "compile") {
        // uv pip sync|compile FILE...: positionals are requirement files.
        for f in &s.pos {
            o.requirements(f);
        }
    } else if op == "remove" {
        o.specs(&s.pos, spec::python);
        o.scripts(false);
    } else {
        o.specs(&s.pos, spec::python);
    }
    for x in all {
        for e in x.values(&["-e", "--editable"]) {
            o.spec(spec::editable(e));
        }
        for r in x.values(&["-r", "--requirement"]) {
            o.requirements(r);
        }
        for c in x.values(&["-c", "--constraint"]) {
            o.file(c);
        }
    }
    python_common(&mut o, &all);
    let hashes = all.iter().any(|x| x.on(&["--require-hashes"]));
    if hashes && o.0.packages.is_empty() && o.0.source == source::REQUIREMENTS {
        let first = o.0.files.first().cloned().unwrap_or_default();
        o.0.source = source::LOCKFILE.into();
        o.0.lockfile = Some(first);
    }
    if op == "compile" || op == "lock" {
        o.0.source = if o.0.source == source::LOCKFILE {
            source::REQUIREMENTS.into()
        } else {
            o.0.source.clone()
        };
    }
    o.done()
}

/// pip-tools' `pip-sync [FILE...]`: installs exactly the given requirement
/// files (default `requirements.txt`) and uninstalls everything else.
fn pip_sync(args: &[String]) -> Option<InstallIntent> {
    let s = scan(args, PIP_VALUED, true, false);
    let mut o = Out::with("pip-sync", "pypi", "sync", &[&s]);
    if s.pos.is_empty() {
        o.requirements("requirements.txt");
    }
    for f in &s.pos {
        o.requirements(f);
    }
    python_common(&mut o, &[&s]);
    o.done()
}

/// Index, scope and binary-only handling shared by pip, uv, pipx, poetry.
fn python_common(o: &mut Out, scans: &[&Scan]) {
    for x in scans {
        o.custom_index(
            x,
            &[
                "-i",
                "--index-url",
                "--extra-index-url",
                "--index",
                "--default-index",
                "--pip-args",
            ],
            "index",
        );
        for f in x.values(&["-f", "--find-links"]) {
            o.warn(format!(
                "find-links {f}: packages may come from outside the index"
            ));
        }
        for h in x.values(&["--trusted-host"]) {
            o.warn(format!(
                "trusted-host {h}: TLS verification is off for this host"
            ));
        }
        if x.on(&["--user"]) {
            o.global();
        }
        if let Some(p) = x.value(&["--prefix", "--root"]) {
            if p.starts_with('/') || p.starts_with('~') {
                o.global();
            }
        }
        if x.on(&["--break-system-packages", "--system"]) {
            o.system();
            o.warn("installs into the system Python (--break-system-packages / --system)".into());
        }
        if x.value(&["--only-binary"]) == Some(":all:") || x.on(&["--no-build"]) {
            o.scripts(false);
        }
        if x.on(&["--dry-run"]) {
            o.scripts(false);
        }
    }
    // Editable / path / VCS installs always build.
    if matches!(o.0.source.as_str(), "path" | "git" | "url") {
        o.scripts(true);
    }
}

const UV_VALUED: &[&str] = &[
    "--with",
    "--with-editable",
    "--with-requirements",
    "--from",
    "--package",
    "--env-file",
    "--rev",
    "--tag",
    "--branch",
    "--marker",
    "--bounds",
    "--optional",
    "--requirements",
    "--no-binary-package",
    "--no-build-package",
    "--python",
    "-p",
    "--index",
    "--default-index",
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "--directory",
    "--project",
    "--config-file",
    "--cache-dir",
    "--color",
    "-r",
    "--requirement",
    "-c",
    "--constraint",
    "--constraints",
    "--group",
    "--extra",
    "--only-group",
    "--no-group",
    "--index-strategy",
    "--keyring-provider",
    "--resolution",
    "--prerelease",
    "--exclude-newer",
    "--link-mode",
    "--python-platform",
    "--refresh-package",
    "--reinstall-package",
    "--upgrade-package",
    "-P",
    "--config-setting",
    "-C",
];

const UV_NOT_INSTALL: &[&str] = &[
    "venv",
    "init",
    "export",
    "tree",
    "version",
    "help",
    "cache",
    "publish",
    "generate-shell-completion",
];

/// uv: add, remove, sync, lock, run, tool install|run|upgrade, pip ...,
/// python install, build.
fn uv(args: &[String]) -> Option<InstallIntent> {
    let head = scan(args, UV_VALUED, true, true);
    let sub = head.pos.first()?.as_str();
    let rest = &head.rest;
    let op = match sub {
        "add" => "add",
        "remove" => "remove",
        "sync" => "sync",
        "lock" => "lock",
        "build" => "build",
        "run" => return uv_run(&head, rest),
        "pip" => {
            let mut i = pip("uv", "pip ", rest)?;
            i.flags.splice(0..0, head.rendered());
            return Some(i);
        }
        "tool" => {
            let s = scan(rest, UV_VALUED, true, true);
            return match s.pos.first().map(String::as_str) {
                Some("run") => uv_tool_run(&s.rest),
                Some("install") | Some("upgrade") => {
                    let op = format!("tool {}", s.pos[0]);
                    let t = scan(&s.rest, UV_VALUED, true, false);
                    let mut o = Out::with("uv", "pypi", &op, &[&head, &s, &t]);
                    o.specs(&t.pos, spec::python);
                    for w in t.values(&["--with"]) {
                        o.spec(spec::python(w));
                    }
                    python_common(&mut o, &[&head, &s, &t]);
                    o.global();
                    o.done()
                }
                Some("uninstall") => {
                    let t = scan(&s.rest, UV_VALUED, true, false);
                    let mut o = Out::with("uv", "pypi", "tool uninstall", &[&t]);
                    o.specs(&t.pos, spec::python);
                    o.global();
                    o.scripts(false);
                    o.done()
                }
                Some("list" | "dir" | "update-shell") | None => None,
                Some(x) => Out::unknown("uv", "pypi", &format!("tool {x}"), &s).done(),
            };
        }
        "python" => {
            let s = scan(rest, UV_VALUED, true, false);
            return match s.pos.first().map(String::as_str) {
                Some("install") | Some("upgrade") => {
                    let mut o = Out::with("uv", "python", &format!("python {}", s.pos[0]), &[&s]);
                    o.specs(&s.pos[1..], spec::at_version);
                    o.global();
                    o.scripts(false);
                    o.done()
                }
                _ => None,
            };
        }
        "self" => {
            let mut o = Out::with("uv", "pypi", "self update", &[&head]);
            o.global();
            return o.done();
        }
        s if UV_NOT_INSTALL.contains(&s) => return None,
        s => return Out::unknown("uv", "pypi", s, &head).done(),
    };
    let s = scan(rest, UV_VALUED, true, false);
    let mut o = Out::with("uv", "pypi", op, &[&head, &s]);
    let all = [&head, &s];
    o.specs(&s.pos, spec::python);
    for x in all {
        for r in x.values(&["-r", "--requirements", "--requirement"]) {
            o.requirements(r);
        }
    }
    python_common(&mut o, &all);
    if op == "remove" {
        o.scripts(false);
    }
    if op == "sync" {
        o.locked_by(&all, &["--locked", "--frozen"], "uv.lock", "pyproject.toml");
    }
    o.done()
}

/// uv run [--with pkg] cmd ...: syncs the project environment, then runs.
fn uv_run(head: &Scan, args: &[String]) -> Option<InstallIntent> {
    let s = scan(args, UV_VALUED, true, true);
    let with = s.values(&["--with", "--with-editable"]);
    let reqs = s.values(&["--with-requirements"]);
    if s.on(&["--no-sync"]) && with.is_empty() && reqs.is_empty() {
        return None;
    }
    let mut o = Out::with("uv", "pypi", "run", &[head, &s]);
    for w in &with {
        o.spec(spec::python(w));
    }
    for r in &reqs {
        o.requirements(r);
    }
    if !with.is_empty() || !reqs.is_empty() {
        o.fetch_and_run();
    }
    python_common(&mut o, &[head, &s]);
    if [head, &s].iter().any(|x| x.on(&["--locked", "--frozen"])) {
        o.lockfile("uv.lock");
    } else if o.0.packages.is_empty() {
        o.file("pyproject.toml");
    }
    o.done()
}

/// uvx / uv tool run [--from spec] [--with pkg] cmd ...
fn uv_tool_run(args: &[String]) -> Option<InstallIntent> {
    let s = scan(args, UV_VALUED, true, true);
    let mut o = Out::with("uv", "pypi", "tool run", &[&s]);
    match s.value(&["--from"]) {
        Some(from) => o.spec(spec::python(from)),
        None => o.spec(spec::python(s.pos.first()?)),
    }
    for w in s.values(&["--with"]) {
        o.spec(spec::python(w));
    }
    python_common(&mut o, &[&s]);
    o.fetch_and_run();
    o.global();
    o.done()
}

const PIPX_VALUED: &[&str] = &[
    "--spec",
    "--python",
    "--pip-args",
    "--index-url",
    "-i",
    "--suffix",
    "--preinstall",
    "--backend",
    "--fetch-python",
];

/// pipx: install, run, inject, upgrade, reinstall, uninstall.
fn pipx(args: &[String]) -> Option<InstallIntent> {
    let head = scan(args, PIPX_VALUED, true, true);
    let sub = head.pos.first()?.as_str();
    let rest = &head.rest;
    let op = match sub {
        "install" | "install-all" => "install",
        "inject" => "inject",
        "upgrade" | "upgrade-all" | "reinstall" | "reinstall-all" | "upgrade-shared" => "upgrade",
        "uninstall" | "uninstall-all" | "uninject" => "remove",
        "run" => {
            let s = scan(rest, PIPX_VALUED, true, true);
            let mut o = Out::with("pipx", "pypi", "run", &[&head, &s]);
            match s.value(&["--spec"]) {
                Some(sp) => o.spec(spec::python(sp)),
                None => o.spec(spec::python(s.pos.first()?)),
            }
            python_common(&mut o, &[&s]);
            o.fetch_and_run();
            o.global();
            return o.done();
        }
        "list" | "ensurepath" | "environment" | "completions" | "interpreter" => return None,
        s => return Out::unknown("pipx", "pypi", s, &head).done(),
    };
    let s = scan(rest, PIPX_VALUED, true, false);
    let mut o = Out::with("pipx", "pypi", op, &[&head, &s]);
    // inject VENV PKG...: the first positional is the target venv.
    let pkgs: &[String] = if op == "inject" && !s.pos.is_empty() {
        &s.pos[1..]
    } else {
        &s.pos
    };
    o.specs(pkgs, spec::python);
    if let Some(sp) = s.value(&["--spec"]) {
        o.spec(spec::python(sp));
    }
    python_common(&mut o, &[&head, &s]);
    if op == "remove" {
        o.scripts(false);
    }
    o.global();
    o.done()
}

const POETRY_VALUED: &[&str] = &[
    "--group",
    "-G",
    "--source",
    "--extras",
    "-E",
    "--python",
    "--platform",
    "--markers",
    "--only",
    "--with",
    "--without",
    "--directory",
    "-C",
    "--project",
    "-P",
];

/// `name@^1.0` in poetry means a version constraint, not a URL.
fn poetry_spec(s: &str) -> Spec {
    if let Some((n, v)) = s.split_once('@') {
        let v = v.trim();
        if !n.is_empty() && !v.contains("://") && !v.starts_with('.') && !v.starts_with('/') {
            return spec::python(&format!("{n}{}", v_prefix(v)));
        }
    }
    spec::python(s)
}

fn v_prefix(v: &str) -> String {
    if v.starts_with(|c: char| c.is_ascii_digit()) {
        format!("=={v}")
    } else {
        v.to_string()
    }
}

/// poetry: add, install, sync, update, lock, remove, self add.
fn poetry(args: &[String]) -> Option<InstallIntent> {
    let head = scan(args, POETRY_VALUED, true, true);
    let sub = head.pos.first()?.as_str();
    let rest = &head.rest;
    let mut global = false;
    let op = match sub {
        "add" => "add",
        "install" => "install",
        "sync" => "sync",
        "update" => "update",
        "lock" => "lock",
        "remove" => "remove",
        "self" => {
            let s = scan(rest, POETRY_VALUED, true, true);
            global = true;
            match s.pos.first().map(String::as_str) {
                Some("add") => "self add",
                Some("install" | "update" | "sync") => "self update",
                Some("remove") => "self remove",
                _ => return None,
            }
        }
        "source" => {
            let s = scan(rest, POETRY_VALUED, true, false);
            if s.pos.first().map(String::as_str) != Some("add") {
                return None;
            }
            let mut o = Out::with("poetry", "pypi", "source add", &[&s]);
            if let Some(url) = s.pos.get(2) {
                o.warn(format!(
                    "source {url}: packages may come from a non-default index (dependency confusion)"
                ));
            }
            o.scripts(false);
            return o.done();
        }
        "run" | "shell" | "build" | "publish" | "check" | "show" | "config" | "env" | "version"
        | "new" | "init" | "search" | "export" | "about" | "list" | "debug" | "cache" | "help" => {
            return None
        }
        s => return Out::unknown("poetry", "pypi", s, &head).done(),
    };
    let s = scan(rest, POETRY_VALUED, true, false);
    let mut o = Out::with("poetry", "pypi", op, &[&head, &s]);
    let pkgs: &[String] = if global && !s.pos.is_empty() {
        &s.pos[1..]
    } else {
        &s.pos
    };
    o.specs(pkgs, poetry_spec);
    for src in s.values(&["--source"]) {
        o.warn(format!("source {src}: a non-default package source"));
    }
    python_common(&mut o, &[&head, &s]);
    if global {
        o.global();
    }
    match op {
        "remove" => o.scripts(false),
        "lock" => o.scripts(true),
        "install" | "sync" => {
            o.file("poetry.lock");
            o.file("pyproject.toml");
        }
        _ => {}
    }
    o.done()
}

// --------------------------------------------------------------------- cargo

const CARGO_VALUED: &[&str] = &[
    "-Z",
    "--config",
    "-C",
    "--color",
    "--manifest-path",
    "--lockfile-path",
    "--git",
    "--branch",
    "--tag",
    "--rev",
    "--path",
    "--base",
    "--registry",
    "--index",
    "-F",
    "--features",
    "--rename",
    "-p",
    "--package",
    "--target",
    "--target-dir",
    "--version",
    "--vers",
    "--root",
    "-j",
    "--jobs",
    "--profile",
    "--bin",
    "--example",
    "--test",
    "--bench",
    "--message-format",
    "--exclude",
    "--artifact-dir",
    "--timings",
    "--precise",
];

const CARGO_BUILDS: &[&str] = &[
    "build",
    "b",
    "check",
    "c",
    "test",
    "t",
    "run",
    "r",
    "bench",
    "doc",
    "d",
    "clippy",
    "fetch",
    "vendor",
    "fix",
    "rustc",
    "rustdoc",
    "nextest",
    "llvm-cov",
    "miri",
    "tarpaulin",
];

const CARGO_NOT_INSTALL: &[&str] = &[
    "fmt",
    "tree",
    "metadata",
    "search",
    "new",
    "init",
    "publish",
    "package",
    "login",
    "logout",
    "owner",
    "yank",
    "clean",
    "pkgid",
    "locate-project",
    "verify-project",
    "read-manifest",
    "help",
    "version",
    "report",
    "info",
    "config",
    "audit",
    "deny",
    "udeps",
    "expand",
    "watch",
    "insta",
    "machete",
    "outdated",
    "semver-checks",
    "hack",
    "fuzz",
    "criterion",
    "make",
    "xtask",
];

/// cargo: add, install, remove, update, binstall, and build-like commands
/// with `--locked` / `--frozen` (lockfile installs of the project's deps).
fn cargo(args: &[String]) -> Option<InstallIntent> {
    let args = match args.first() {
        Some(t) if t.starts_with('+') => &args[1..],
        _ => args,
    };
    let head = scan(args, CARGO_VALUED, true, true);
    let sub = head.pos.first()?.as_str();
    let rest = &head.rest;
    let op = match sub {
        "add" => "add",
        "install" => "install",
        "remove" | "rm" => "remove",
        "update" | "upgrade" => "update",
        "generate-lockfile" => "generate-lockfile",
        "binstall" => return cargo_binstall(rest),
        s if CARGO_BUILDS.contains(&s) => {
            let s2 = scan(rest, CARGO_VALUED, true, false);
            let locked = [&head, &s2].iter().any(|x| x.on(&["--locked", "--frozen"]));
            let op = match s {
                "b" => "build",
                "c" => "check",
                "t" => "test",
                "r" => "run",
                "d" => "doc",
                o => o,
            };
            if !locked {
                // fetch and vendor download crates even without --locked.
                if !matches!(op, "fetch" | "vendor") {
                    return None;
                }
            }
            let mut o = Out::with("cargo", "crates", op, &[&head, &s2]);
            if locked {
                o.lockfile("Cargo.lock");
            } else {
                o.file("Cargo.toml");
            }
            o.scripts(!matches!(op, "fetch" | "vendor"));
            return o.done();
        }
        s if CARGO_NOT_INSTALL.contains(&s) => return None,
        s => return Out::unknown("cargo", "crates", s, &head).done(),
    };
    let s = scan(rest, CARGO_VALUED, true, false);
    let mut o = Out::with("cargo", "crates", op, &[&head, &s]);
    for mut sp in versioned(&s.pos, spec::at_version, s.value(&["--version", "--vers"])) {
        if let Some(git) = s.value(&["--git"]) {
            sp.source = source::GIT;
            sp.pkg.version = Some(git.to_string());
        } else if let Some(path) = s.value(&["--path"]) {
            sp.source = source::PATH;
            sp.pkg.version = Some(path.to_string());
        }
        o.spec(sp);
    }
    if s.pos.is_empty() {
        if let Some(git) = s.value(&["--git"]) {
            o.spec(Spec {
                pkg: PackageRef::new(git, None),
                source: source::GIT,
                warning: None,
            });
        } else if let Some(path) = s.value(&["--path"]) {
            o.spec(Spec {
                pkg: PackageRef::new(path, None),
                source: source::PATH,
                warning: None,
            });
        }
    }
    for x in [&head, &s] {
        o.custom_index(x, &["--registry", "--index"], "registry");
    }
    match op {
        "install" => o.global(),
        // add / remove / update only edit the manifest and the lock: nothing builds.
        _ => o.scripts(false),
    }
    o.done()
}

/// cargo binstall: downloads prebuilt binaries named by crate metadata from
/// wherever the crate points (usually GitHub releases).
fn cargo_binstall(args: &[String]) -> Option<InstallIntent> {
    let s = scan(args, CARGO_VALUED, true, false);
    let mut o = Out::with("cargo", "crates", "binstall", &[&s]);
    o.specs(&s.pos, spec::at_version);
    o.raise_source(source::URL);
    o.warn("cargo binstall: downloads prebuilt binaries from outside crates.io".into());
    o.global();
    o.done()
}

// ------------------------------------------------------------------------ go

const GO_VALUED: &[&str] = &[
    "-tags",
    "-ldflags",
    "-gcflags",
    "-asmflags",
    "-o",
    "-mod",
    "-modfile",
    "-C",
    "-p",
    "-pkgdir",
    "-overlay",
    "-exec",
    "-toolexec",
    "-buildmode",
    "-compiler",
    "-gccgoflags",
    "-installsuffix",
    "-pgo",
    "--tags",
    "--ldflags",
    "--mod",
];

const GO_NOT_INSTALL: &[&str] = &[
    "build",
    "test",
    "vet",
    "fmt",
    "env",
    "version",
    "list",
    "doc",
    "generate",
    "clean",
    "tool",
    "fix",
    "help",
    "bug",
    "telemetry",
    "work",
];

/// go: get, install pkg@v, run pkg@v, mod download|tidy|vendor.
fn go(args: &[String]) -> Option<InstallIntent> {
    let head = scan(args, GO_VALUED, false, true);
    let sub = head.pos.first()?.as_str();
    let rest = &head.rest;
    match sub {
        "get" => {
            let s = scan(rest, GO_VALUED, false, false);
            let mut o = Out::with("go", "go", "get", &[&s]);
            o.specs(&s.pos, spec::go);
            o.scripts(false);
            o.file("go.mod");
            o.done()
        }
        "install" => {
            let s = scan(rest, GO_VALUED, false, false);
            let mut o = Out::with("go", "go", "install", &[&s]);
            o.specs(&s.pos, spec::go);
            if s.pos.is_empty() {
                o.raise_source(source::PATH);
            } else if o.0.packages.iter().any(|p| p.version.is_none()) {
                // Without @version, go install builds within the current module.
                o.raise_source(source::PATH);
            }
            o.scripts(false);
            o.global();
            o.done()
        }
        "run" => {
            let s = scan(rest, GO_VALUED, false, true);
            let target = s.pos.first()?;
            if !target.contains('@') {
                return None; // go run . / main.go: local code
            }
            let mut o = Out::with("go", "go", "run", &[&s]);
            o.spec(spec::go(target));
            o.fetch_and_run();
            o.scripts(false);
            o.done()
        }
        "mod" => {
            let s = scan(rest, GO_VALUED, false, false);
            let op = match s.pos.first().map(String::as_str) {
                Some("download") => "mod download",
                Some("tidy") => "mod tidy",
                Some("vendor") => "mod vendor",
                _ => return None,
            };
            let mut o = Out::with("go", "go", op, &[&s]);
            o.specs(&s.pos[1..], spec::go);
            o.scripts(false);
            if op == "mod download" {
                // Minimal version selection takes exactly the versions go.mod
                // names, verified against go.sum (go help modules).
                o.lockfile("go.sum");
            }
            o.file("go.mod");
            o.done()
        }
        s if GO_NOT_INSTALL.contains(&s) => None,
        s => Out::unknown("go", "go", s, &head).done(),
    }
}

// ---------------------------------------------------------------------- ruby

const GEM_VALUED: &[&str] = &[
    "-v",
    "--version",
    "-i",
    "--install-dir",
    "-n",
    "--bindir",
    "-s",
    "--source",
    "--platform",
    "-g",
    "--file",
    "-P",
    "--trust-policy",
    "--build-root",
];

const GEM_NOT_INSTALL: &[&str] = &[
    "build",
    "list",
    "search",
    "info",
    "query",
    "specification",
    "contents",
    "which",
    "environment",
    "env",
    "help",
    "dependency",
    "owner",
    "push",
    "yank",
    "signin",
    "signout",
    "cert",
    "check",
    "cleanup",
    "lock",
    "mirror",
    "open",
    "outdated",
    "rdoc",
    "server",
    "stale",
    "unpack",
];

/// gem: install, update, uninstall, fetch, sources --add.
fn gem(args: &[String]) -> Option<InstallIntent> {
    let head = scan(args, GEM_VALUED, true, true);
    let sub = head.pos.first()?.as_str();
    let rest = &head.rest;
    let op = match sub {
        "install" | "i" => "install",
        "update" => "update",
        "uninstall" => "remove",
        "fetch" => "fetch",
        "pristine" => "pristine",
        "sources" => {
            let s = scan(rest, GEM_VALUED, true, false);
            let added = s.values(&["-a", "--add"]);
            if added.is_empty() && !s.has(&["-a", "--add"]) {
                return None;
            }
            let mut o = Out::with("gem", "rubygems", "sources add", &[&s]);
            for p in s
                .values(&["-s", "--source"])
                .into_iter()
                .chain(s.pos.iter().map(String::as_str))
            {
                o.warn(format!("source {p}: a non-default gem source"));
            }
            o.scripts(false);
            o.global();
            return o.done();
        }
        s if GEM_NOT_INSTALL.contains(&s) => return None,
        s => return Out::unknown("gem", "rubygems", s, &head).done(),
    };
    let s = scan(rest, GEM_VALUED, true, false);
    let mut o = Out::with("gem", "rubygems", op, &[&head, &s]);
    for sp in versioned(&s.pos, spec::gem, s.value(&["-v", "--version"])) {
        o.spec(sp);
    }
    if let Some(f) = s.value(&["-g", "--file"]) {
        o.requirements(f);
    }
    o.custom_index(&s, &["-s", "--source"], "source");
    match s.value(&["-i", "--install-dir"]) {
        Some(d) if !d.starts_with('/') && !d.starts_with('~') => {}
        _ => o.global(),
    }
    if matches!(op, "remove" | "fetch") {
        o.scripts(false);
    }
    o.done()
}

const BUNDLE_VALUED: &[&str] = &[
    "--path",
    "--gemfile",
    "--jobs",
    "-j",
    "--retry",
    "--without",
    "--with",
    "--binstubs",
    "--version",
    "-v",
    "--git",
    "--github",
    "--branch",
    "--ref",
    "--source",
    "--group",
    "-g",
    "--require",
    "--shebang",
    "--trust-policy",
    "--target-rbconfig",
    "--glob",
];

/// bundle: install (--frozen/--deployment), add, update, lock, remove, cache.
fn bundle(args: &[String]) -> Option<InstallIntent> {
    let head = scan(args, BUNDLE_VALUED, true, true);
    let sub = head.pos.first().map_or("install", String::as_str);
    let rest = &head.rest;
    let op = match sub {
        "install" | "i" => "install",
        "add" => "add",
        "update" => "update",
        "lock" => "lock",
        "remove" => "remove",
        "cache" | "package" | "pack" => "cache",
        "exec" | "check" | "list" | "info" | "show" | "outdated" | "config" | "init"
        | "version" | "help" | "doctor" | "platform" | "viz" | "binstubs" | "open" | "console"
        | "gem" | "clean" | "pristine" | "licenses" => return None,
        s => return Out::unknown("bundle", "rubygems", s, &head).done(),
    };
    let s = scan(rest, BUNDLE_VALUED, true, false);
    let mut o = Out::with("bundle", "rubygems", op, &[&head, &s]);
    if op == "add" {
        for mut sp in versioned(&s.pos, spec::gem, s.value(&["--version", "-v"])) {
            if s.value(&["--git", "--github"]).is_some() {
                sp.source = source::GIT;
            } else if s.value(&["--path"]).is_some() {
                sp.source = source::PATH;
            }
            o.spec(sp);
        }
    } else {
        o.specs(&s.pos, spec::gem);
    }
    o.custom_index(&s, &["--source"], "source");
    if matches!(op, "remove" | "lock" | "cache") {
        o.scripts(false);
    }
    if op == "install" {
        let flags = ["--frozen", "--deployment"];
        o.locked_by(&[&head, &s], &flags, "Gemfile.lock", "Gemfile");
    }
    o.done()
}

// -------------------------------------------------------------------- system

const APT_VALUED: &[&str] = &[
    "-o",
    "-c",
    "-t",
    "--target-release",
    "--default-release",
    "--option",
    "--config-file",
];

/// apt / apt-get / aptitude (apt-get(8)).
fn apt(prog: &str, args: &[String]) -> Option<InstallIntent> {
    let head = scan(args, APT_VALUED, true, true);
    let sub = head.pos.first()?.as_str();
    let rest = &head.rest;
    let op = match sub {
        "install" | "reinstall" | "satisfy" => "install",
        "remove" | "purge" | "autoremove" | "autopurge" => "remove",
        "upgrade" | "full-upgrade" | "dist-upgrade" | "safe-upgrade" => "upgrade",
        "update" => "update",
        "build-dep" => "build-dep",
        "source" => "source",
        "download" => "download",
        "search" | "show" | "list" | "policy" | "depends" | "rdepends" | "showsrc"
        | "changelog" | "moo" | "check" | "clean" | "autoclean" | "help" | "why" | "why-not" => {
            return None
        }
        s => {
            let mut o = Out::unknown(prog, "debian", s, &head);
            o.system();
            return o.done();
        }
    };
    let s = scan(rest, APT_VALUED, true, false);
    let mut o = Out::with(prog, "debian", op, &[&head, &s]);
    if op != "satisfy" {
        o.specs(&s.pos, spec::debian);
    }
    for x in [&head, &s] {
        if x.on(&["--allow-unauthenticated", "--allow-insecure-repositories"])
            || x.values(&["-o", "--option"])
                .iter()
                .any(|v| v.to_ascii_lowercase().contains("allowunauthenticated"))
        {
            o.warn("installs packages without signature verification".into());
        }
    }
    if matches!(op, "download" | "source" | "update") {
        o.scripts(false);
    }
    o.system();
    o.done()
}

const DNF_VALUED: &[&str] = &[
    "--repo",
    "--repoid",
    "--enablerepo",
    "--disablerepo",
    "--setopt",
    "--installroot",
    "--releasever",
    "-c",
    "--config",
    "-x",
    "--exclude",
    "--repofrompath",
    "--forcearch",
    "--color",
    "-d",
    "--debuglevel",
    "-e",
    "--errorlevel",
    "--downloaddir",
    "--destdir",
];

/// dnf / yum / microdnf (dnf(8)).
fn dnf(prog: &str, args: &[String]) -> Option<InstallIntent> {
    let head = scan(args, DNF_VALUED, true, true);
    let sub = head.pos.first()?.as_str();
    let rest = &head.rest;
    let mut pkgs_from = 0;
    let op = match sub {
        "install" | "in" | "localinstall" | "reinstall" => "install",
        "remove" | "erase" | "rm" | "autoremove" => "remove",
        "update" | "upgrade" | "up" | "upgrade-minimal" | "distro-sync" | "downgrade" => "upgrade",
        "groupinstall" => "group install",
        "group" | "groups" => {
            let s = scan(rest, DNF_VALUED, true, false);
            if s.pos.first().map(String::as_str) != Some("install") {
                return None;
            }
            pkgs_from = 1;
            "group install"
        }
        "makecache" => "makecache",
        "builddep" => "builddep",
        "download" => "download",
        "module" => {
            let s = scan(rest, DNF_VALUED, true, false);
            match s.pos.first().map(String::as_str) {
                Some("install" | "enable" | "switch-to") => {
                    pkgs_from = 1;
                    "module install"
                }
                _ => return None,
            }
        }
        "copr" | "config-manager" => {
            let mut o = Out::unknown(prog, "rpm", sub, &head);
            o.warn(format!("{prog} {sub}: adds a package repository"));
            o.system();
            return o.done();
        }
        "search" | "info" | "list" | "provides" | "whatprovides" | "repolist" | "repoquery"
        | "check-update" | "clean" | "help" | "deplist" | "alias" | "repoinfo" | "check" => {
            return None
        }
        s => {
            let mut o = Out::unknown(prog, "rpm", s, &head);
            o.system();
            return o.done();
        }
    };
    let s = scan(rest, DNF_VALUED, true, false);
    let mut o = Out::with(prog, "rpm", op, &[&head, &s]);
    let pkgs = s.pos.get(pkgs_from..).unwrap_or(&[]);
    o.specs(pkgs, spec::rpm);
    for x in [&head, &s] {
        if x.on(&["--nogpgcheck", "--no-gpgchecks"]) {
            o.warn("installs packages without signature verification (--nogpgcheck)".into());
        }
        for r in x.values(&["--repofrompath"]) {
            o.warn(format!(
                "repofrompath {r}: a package repository given on the command line"
            ));
        }
    }
    if matches!(op, "download" | "makecache") {
        o.scripts(false);
    }
    o.system();
    o.done()
}

const APK_VALUED: &[&str] = &[
    "-X",
    "--repository",
    "-t",
    "--virtual",
    "-p",
    "--root",
    "--arch",
    "--keys-dir",
    "--repositories-file",
    "--cache-dir",
    "--cache-max-age",
    "--timeout",
    "--progress-fd",
    "--wait",
];

/// apk (apk(8)): add, del, upgrade, update, fix, fetch.
fn apk(args: &[String]) -> Option<InstallIntent> {
    let head = scan(args, APK_VALUED, true, true);
    let sub = head.pos.first()?.as_str();
    let rest = &head.rest;
    let op = match sub {
        "add" => "add",
        "del" => "remove",
        "upgrade" => "upgrade",
        "update" => "update",
        "fix" => "fix",
        "fetch" => "fetch",
        "info" | "search" | "list" | "policy" | "stats" | "version" | "verify" | "dot"
        | "audit" | "query" | "help" => return None,
        s => {
            let mut o = Out::unknown("apk", "alpine", s, &head);
            o.system();
            return o.done();
        }
    };
    let s = scan(rest, APK_VALUED, true, false);
    let mut o = Out::with("apk", "alpine", op, &[&head, &s]);
    o.specs(&s.pos, spec::alpine);
    for x in [&head, &s] {
        if x.on(&["--allow-untrusted"]) {
            o.warn("installs packages without signature verification (--allow-untrusted)".into());
        }
        for r in x.values(&["-X", "--repository"]) {
            o.warn(format!(
                "repository {r}: a package repository given on the command line"
            ));
        }
        if x.on(&["--no-scripts"]) {
            o.scripts(false);
        }
    }
    if matches!(op, "fetch" | "update" | "remove") {
        o.scripts(false);
    }
    o.system();
    o.done()
}

/// brew (brew(1)): install, reinstall, uninstall, upgrade, update, tap,
/// bundle, fetch.
fn brew(args: &[String]) -> Option<InstallIntent> {
    let head = scan(args, &[], true, true);
    let sub = head.pos.first()?.as_str();
    let rest = &head.rest;
    let op = match sub {
        "install" | "reinstall" => "install",
        "uninstall" | "remove" | "rm" | "autoremove" => "remove",
        "upgrade" => "upgrade",
        "update" => "update",
        "fetch" => "fetch",
        "tap" => {
            let s = scan(rest, &[], true, false);
            let Some(tap) = s.pos.first() else {
                return None; // lists taps
            };
            let mut o = Out::with("brew", "homebrew", "tap", &[&s]);
            o.spec(Spec {
                pkg: PackageRef::new(tap.clone(), s.pos.get(1).map(String::as_str)),
                source: source::GIT,
                warning: Some(format!("tap {tap}: adds a third-party formula repository")),
            });
            o.scripts(false);
            o.global();
            return o.done();
        }
        "bundle" => {
            let s = scan(rest, &["--file"], true, false);
            match s.pos.first().map(String::as_str) {
                None | Some("install") => {}
                _ => return None, // dump, check, list, cleanup, exec
            }
            let mut o = Out::with("brew", "homebrew", "bundle", &[&s]);
            o.requirements(s.value(&["--file"]).unwrap_or("Brewfile"));
            o.global();
            return o.done();
        }
        "list" | "ls" | "info" | "abv" | "search" | "doctor" | "dr" | "config" | "home"
        | "deps" | "uses" | "leaves" | "outdated" | "desc" | "cat" | "help" | "commands"
        | "log" | "cleanup" | "link" | "ln" | "unlink" | "pin" | "unpin" | "untap" | "shellenv"
        | "--prefix" | "--cellar" | "--repository" | "--cache" | "--env" | "--config" => {
            return None
        }
        s => {
            let mut o = Out::unknown("brew", "homebrew", s, &head);
            o.global();
            return o.done();
        }
    };
    let s = scan(rest, &[], true, false);
    let mut o = Out::with("brew", "homebrew", op, &[&head, &s]);
    o.specs(&s.pos, spec::brew);
    if s.on(&["--HEAD"]) {
        o.warn("--HEAD: builds from the formula's development branch".into());
    }
    if matches!(op, "remove" | "update" | "fetch") {
        o.scripts(false);
    }
    o.global();
    o.done()
}

const CONDA_VALUED: &[&str] = &[
    "-n",
    "--name",
    "-p",
    "--prefix",
    "-c",
    "--channel",
    "-f",
    "--file",
    "--solver",
    "--repodata-fn",
    "--platform",
    "--subdir",
    "--revision",
    "--clone",
    "--channel-priority",
    "-r",
    "--root-prefix",
];

/// conda / mamba / micromamba: install, create, update, remove, env
/// create|update.
fn conda(prog: &str, args: &[String]) -> Option<InstallIntent> {
    let head = scan(args, CONDA_VALUED, true, true);
    let sub = head.pos.first()?.as_str();
    let rest = &head.rest;
    let mut pkgs_from = 0;
    let op = match sub {
        "install" => "install",
        "create" => "create",
        "update" | "upgrade" => "update",
        "remove" | "uninstall" => "remove",
        "env" => {
            let s = scan(rest, CONDA_VALUED, true, false);
            match s.pos.first().map(String::as_str) {
                Some("create") => {
                    pkgs_from = 1;
                    "env create"
                }
                Some("update") => {
                    pkgs_from = 1;
                    "env update"
                }
                _ => return None,
            }
        }
        "run" | "list" | "info" | "search" | "config" | "activate" | "deactivate" | "clean"
        | "init" | "doctor" | "compare" | "package" | "notices" | "rename" | "shell" | "help" => {
            return None
        }
        s => {
            let mut o = Out::unknown(prog, "conda", s, &head);
            o.global();
            return o.done();
        }
    };
    let s = scan(rest, CONDA_VALUED, true, false);
    let mut o = Out::with(prog, "conda", op, &[&head, &s]);
    o.specs(s.pos.get(pkgs_from..).unwrap_or(&[]), spec::conda);
    let files = s.values(&["-f", "--file"]);
    for f in &files {
        o.requirements(f);
    }
    if op == "env create" && files.is_empty() {
        o.requirements("environment.yml");
    }
    for c in s.values(&["-c", "--channel"]) {
        if !matches!(
            c,
            "conda-forge" | "defaults" | "bioconda" | "pytorch" | "nvidia"
        ) {
            o.warn(format!("channel {c}: a non-default conda channel"));
        }
    }
    match s.value(&["-p", "--prefix"]) {
        Some(p) if !p.starts_with('/') && !p.starts_with('~') => {}
        _ => o.global(),
    }
    if op == "remove" {
        o.scripts(false);
    }
    o.done()
}
