//! Package managers: which subcommands install (tier `install`), which only
//! read, which run project code (`write`) or reach a registry (`network`).
//! Sources: the managers' command references (npm-install(1), pip(1),
//! cargo(1), go help, apt-get(8), ...). The install guard refines this
//! (`crate::install`).

use super::commands::{classify as classify_cmd, Verdict};
use super::shell::{Analyzer, Word};
use super::Tier;

/// How one manager's subcommands map to tiers.
struct Manager {
    names: &'static [&'static str],
    install: &'static [&'static str],
    read: &'static [&'static str],
    network: &'static [&'static str],
    /// The subcommand used when none is given (`yarn` = `yarn install`).
    bare: Option<&'static str>,
    /// Global options that take a value (skipped when finding the subcommand).
    value_opts: &'static [&'static str],
}

#[rustfmt::skip]
const MANAGERS: &[Manager] = &[
    Manager {
        names: &["npm"],
        install: &["install", "i", "in", "ins", "inst", "insta", "instal", "isnt", "isnta", "isntal", "isntall", "add", "ci", "clean-install", "ic", "install-clean", "isntall-clean", "install-ci-test", "cit", "install-test", "it", "update", "up", "upgrade", "udpate", "uninstall", "un", "unlink", "remove", "rm", "r", "dedupe", "ddp", "link", "ln", "exec", "x", "create"],
        read: &["ls", "list", "ll", "la", "explain", "why", "prefix", "root", "bin", "help", "config", "get", "help-search"],
        network: &["view", "v", "info", "show", "search", "s", "se", "find", "outdated", "publish", "unpublish", "login", "logout", "adduser", "whoami", "ping", "token", "owner", "deprecate", "dist-tag", "access", "team", "org", "star", "unstar", "stars", "doctor", "audit", "fund", "repo", "docs", "bugs", "home"],
        bare: None,
        value_opts: &["--prefix", "-w", "--workspace", "--registry", "--cache", "--userconfig", "--loglevel", "-C"],
    },
    Manager {
        names: &["pnpm"],
        install: &["add", "install", "i", "update", "up", "upgrade", "remove", "rm", "un", "uninstall", "link", "ln", "unlink", "import", "fetch", "dlx", "create", "dedupe", "patch-commit"],
        read: &["list", "ls", "ll", "why", "root", "bin", "help", "config", "store-path"],
        network: &["outdated", "audit", "publish", "view", "info", "search"],
        bare: None,
        value_opts: &["-C", "--dir", "--filter", "-F", "--registry"],
    },
    Manager {
        names: &["yarn"],
        install: &["add", "install", "upgrade", "up", "remove", "dlx", "create", "global", "link", "unlink", "import", "dedupe", "upgrade-interactive", "autoclean"],
        read: &["list", "why", "help", "config", "bin", "licenses"],
        network: &[
            "info", "npm", "publish", "outdated", "audit", "login", "logout", "owner", "tag",
            "team",
        ],
        bare: Some("install"),
        value_opts: &["--cwd", "--registry"],
    },
    Manager {
        names: &["bun"],
        install: &[
            "install", "i", "add", "a", "remove", "rm", "update", "x", "create", "link", "unlink",
            "pm", "patch",
        ],
        read: &["help"],
        network: &["publish", "outdated", "info"],
        bare: None,
        value_opts: &["--cwd"],
    },
    Manager {
        names: &["pip", "pip3"],
        install: &["install", "uninstall", "download", "wheel"],
        read: &[
            "list", "show", "freeze", "check", "help", "debug", "inspect", "config", "hash",
        ],
        network: &["search", "index"],
        bare: None,
        value_opts: &["--python", "--log", "--proxy", "--retries", "--timeout", "--exists-action", "--trusted-host", "--cert", "--client-cert", "--cache-dir"],
    },
    Manager {
        names: &["uv"],
        install: &[
            "add", "remove", "sync", "lock", "tool", "pip", "python", "run", "export", "tree",
        ],
        read: &["help", "version", "--version"],
        network: &["publish"],
        bare: None,
        value_opts: &["--directory", "--project", "--python", "-p", "--cache-dir", "--config-file"],
    },
    Manager {
        names: &["poetry"],
        install: &["add", "remove", "install", "update", "lock", "self", "sync"],
        read: &["show", "check", "help", "list", "version", "env", "config"],
        network: &["publish", "search"],
        bare: None,
        value_opts: &["-C", "--directory", "-P", "--project"],
    },
    Manager {
        names: &["pipx"],
        install: &["install", "inject", "upgrade", "upgrade-all", "reinstall", "reinstall-all", "run", "uninstall", "uninstall-all", "install-all"],
        read: &["list", "environment", "completions"],
        network: &[],
        bare: None,
        value_opts: &[],
    },
    Manager {
        names: &["conda", "mamba", "micromamba"],
        install: &["install", "create", "update", "upgrade", "remove", "uninstall", "env"],
        read: &["list", "info", "config"],
        network: &["search"],
        bare: None,
        value_opts: &[],
    },
    Manager {
        names: &["cargo"],
        install: &["add", "install", "uninstall", "update", "fetch", "generate-lockfile", "remove", "rm", "binstall", "vendor"],
        read: &["version", "help", "locate-project", "pkgid", "verify-project", "--list"],
        network: &[
            "search", "publish", "login", "logout", "owner", "yank", "info",
        ],
        bare: None,
        value_opts: &["--manifest-path", "-Z", "--config", "--color", "-C"],
    },
    Manager {
        names: &["go"],
        install: &["get", "install"],
        read: &["version", "env", "help", "doc"],
        network: &[],
        bare: None,
        value_opts: &["-C"],
    },
    Manager {
        names: &["gem"],
        install: &["install", "i", "update", "uninstall", "fetch"],
        read: &["list", "info", "environment", "env", "which", "specification", "spec", "contents", "help", "dependency"],
        network: &["search", "push", "owner", "yank", "query"],
        bare: None,
        value_opts: &[],
    },
    Manager {
        names: &["bundle", "bundler"],
        install: &[
            "install", "update", "add", "remove", "lock", "binstubs", "cache", "package",
        ],
        read: &[
            "list", "show", "check", "info", "help", "platform", "config", "version",
        ],
        network: &["outdated"],
        bare: Some("install"),
        value_opts: &[],
    },
    Manager {
        names: &["composer"],
        install: &["install", "i", "require", "update", "u", "upgrade", "remove", "rm", "create-project", "global", "reinstall"],
        read: &["show", "info", "why", "depends", "why-not", "prohibits", "validate", "help", "list", "licenses", "config"],
        network: &["search", "outdated", "audit"],
        bare: None,
        value_opts: &["-d", "--working-dir"],
    },
    Manager {
        names: &["apt", "apt-get", "aptitude"],
        install: &["install", "reinstall", "remove", "purge", "upgrade", "full-upgrade", "dist-upgrade", "autoremove", "autopurge", "update", "build-dep", "source", "download", "satisfy", "markauto", "clean", "autoclean"],
        read: &["list", "show", "search", "policy", "depends", "rdepends", "changelog", "showsrc", "help", "check"],
        network: &[],
        bare: None,
        value_opts: &["-o", "-c", "-t", "--target-release"],
    },
    Manager {
        names: &["dnf", "yum", "microdnf", "zypper", "tdnf"],
        install: &["install", "in", "remove", "rm", "erase", "update", "upgrade", "up", "reinstall", "downgrade", "autoremove", "groupinstall", "localinstall", "makecache", "refresh", "distro-sync", "dup", "swap"],
        read: &["list", "info", "search", "provides", "repolist", "help", "deplist", "repoquery", "check-update", "se", "if"],
        network: &[],
        bare: None,
        value_opts: &["--repo", "--enablerepo", "--disablerepo", "--installroot", "--releasever"],
    },
    Manager {
        names: &["apk"],
        install: &["add", "del", "upgrade", "update", "fix", "fetch", "cache"],
        read: &[
            "info", "search", "list", "policy", "dot", "stats", "audit", "version", "verify",
        ],
        network: &[],
        bare: None,
        value_opts: &["-X", "--repository", "-p", "--root"],
    },
    Manager {
        names: &["brew"],
        install: &["install", "reinstall", "upgrade", "uninstall", "remove", "rm", "tap", "untap", "update", "bundle", "link", "unlink", "pin", "cleanup", "autoremove"],
        read: &["list", "ls", "info", "search", "doctor", "config", "--prefix", "--cellar", "--repository", "deps", "uses", "leaves", "outdated", "home", "help", "desc", "shellenv"],
        network: &[],
        bare: None,
        value_opts: &[],
    },
    Manager {
        names: &["snap", "flatpak"],
        install: &["install", "remove", "uninstall", "refresh", "update", "revert", "enable", "disable"],
        read: &["list", "info", "find", "search", "help", "version"],
        network: &[],
        bare: None,
        value_opts: &[],
    },
    Manager {
        names: &["rustup"],
        install: &["install", "update", "toolchain", "component", "target", "default", "self", "uninstall", "override", "set"],
        read: &["show", "which", "help", "doc", "check"],
        network: &[],
        bare: None,
        value_opts: &[],
    },
    Manager {
        names: &["deno"],
        install: &["install", "add", "cache", "upgrade", "remove", "outdated"],
        read: &["info", "help", "doc", "types", "lint", "check"],
        network: &["publish"],
        bare: None,
        value_opts: &[],
    },
    Manager {
        names: &["luarocks", "cpan", "cpanm", "opam", "asdf", "mise", "rtx", "sdk", "nvm", "pyenv", "rbenv", "volta", "corepack", "nix-env", "guix", "port", "choco", "scoop", "winget", "helm-plugin"],
        install: &["install", "i", "add", "update", "upgrade", "remove", "uninstall", "-i", "-e", "-u", "enable", "use", "prepare"],
        read: &[
            "list", "ls", "info", "help", "current", "which", "where", "version", "versions",
            "show", "search", "-q",
        ],
        network: &[],
        bare: None,
        value_opts: &[],
    },
];

/// Runners that download and run a package.
const RUNNERS: &[&str] = &["npx", "pnpx", "bunx", "uvx", "pipx-run"];

fn is_pip(name: &str) -> bool {
    name.strip_prefix("pip")
        .is_some_and(|r| r.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

fn is_python(name: &str) -> bool {
    name == "python"
        || name
            .strip_prefix("python")
            .is_some_and(|r| r.chars().all(|c| c.is_ascii_digit() || c == '.'))
        || name == "pypy"
        || name == "pypy3"
}

/// The source of an install (what the install guard calls it): `lockfile`
/// when the command installs exactly what a lockfile pins.
fn install_source(manager: &str, sub: &str, args: &[Word]) -> &'static str {
    let has = |f: &str| {
        args.iter()
            .any(|w| w.text == f || w.text.starts_with(&format!("{f}=")))
    };
    let operands = args.iter().filter(|w| !w.text.starts_with('-')).count();
    match (manager, sub) {
        (
            "npm",
            "ci" | "clean-install" | "ic" | "install-clean" | "isntall-clean" | "install-ci-test"
            | "cit",
        ) => "lockfile",
        ("pnpm" | "yarn" | "bun", "install" | "i")
            if has("--frozen-lockfile") || has("--immutable") =>
        {
            "lockfile"
        }
        ("uv", "sync") if has("--locked") || has("--frozen") => "lockfile",
        ("poetry", "install" | "sync") => "lockfile",
        ("bundle" | "bundler", "install") if has("--frozen") || has("--deployment") => "lockfile",
        ("composer", "install" | "i") => "lockfile",
        ("cargo", "fetch") if has("--locked") || has("--frozen") => "lockfile",
        ("pip" | "pip3", "install") if has("--require-hashes") => "lockfile",
        ("pip" | "pip3", "install") if has("-r") || has("--requirement") => "requirements",
        ("go", _) => "registry",
        (_, _) if operands == 0 => "project",
        _ => "registry",
    }
}

/// Classifies package managers, interpreters that run them (`python -m
/// pip`) and package runners (`npx`). `None` when `name` is none of them.
pub fn classify(
    an: &mut Analyzer,
    v: &mut Verdict,
    name: &str,
    args: &[Word],
    depth: usize,
) -> Option<bool> {
    if RUNNERS.contains(&name) {
        v.raise(
            Tier::Install,
            format!("{name}: downloads and runs a package"),
        );
        v.install_source = Some("registry");
        return Some(true);
    }
    if is_python(name) {
        python(an, v, name, args, depth);
        return Some(true);
    }
    let mname = if is_pip(name) { "pip" } else { name };
    let m = MANAGERS.iter().find(|m| m.names.contains(&mname))?;
    if args.len() == 1
        && matches!(
            args[0].text.as_str(),
            "--version" | "-V" | "-v" | "--help" | "-h" | "version"
        )
    {
        v.note(format!("{name} {}: prints version or help", args[0].text));
        return Some(true);
    }
    // Find the subcommand: the first operand after global options.
    let mut i = 0;
    while i < args.len() {
        let t = args[i].text.as_str();
        if args[i].opaque() {
            v.fail(format!(
                "{name}: argument only known at run time: not classified"
            ));
            return Some(true);
        }
        if t.starts_with('+') && mname == "cargo" {
            i += 1;
            continue;
        }
        if !t.starts_with('-') || m.install.contains(&t) || m.read.contains(&t) {
            break;
        }
        if m.value_opts.contains(&t) {
            i += 1;
        }
        i += 1;
    }
    let sub = match args.get(i) {
        Some(w) => w.text.as_str(),
        None => match m.bare {
            Some(b) => b,
            None => {
                v.note(format!("{name}: prints usage"));
                return Some(true);
            }
        },
    };
    let rest = if i < args.len() {
        &args[i + 1..]
    } else {
        &args[0..0]
    };
    // Sub-subcommands that only read.
    let second = rest
        .iter()
        .find(|w| !w.text.starts_with('-'))
        .map(|w| w.text.as_str());
    let read_only_second = match (mname, sub, second) {
        ("uv", "pip", Some("list" | "show" | "freeze" | "check" | "tree")) => true,
        ("uv", "tool", Some("list" | "dir")) | ("uv", "python", Some("list" | "find" | "dir")) => {
            true
        }
        ("rustup", "toolchain" | "component" | "target", Some("list")) => true,
        ("conda" | "mamba" | "micromamba", "env", Some("list" | "export")) => true,
        ("npm", "audit", Some("fix")) => false,
        ("npm" | "pnpm", "config" | "get", Some("set" | "delete" | "edit")) => {
            v.raise(
                Tier::Write,
                format!("{name} config set: changes configuration"),
            );
            return Some(true);
        }
        ("go", "mod", Some("download" | "tidy")) => {
            v.raise(
                Tier::Install,
                format!("go mod {}: downloads modules", second.unwrap_or("")),
            );
            v.install_source = Some(if second == Some("download") {
                "lockfile"
            } else {
                "registry"
            });
            return Some(true);
        }
        _ => false,
    };
    if mname == "npm" && sub == "audit" && second == Some("fix") {
        v.raise(Tier::Install, "npm audit fix: installs packages");
        v.install_source = Some("registry");
        return Some(true);
    }
    if mname == "npm" && sub == "init" && second.is_some() {
        v.raise(
            Tier::Install,
            "npm init PKG: downloads and runs an initializer",
        );
        v.install_source = Some("registry");
        return Some(true);
    }
    if mname == "uv"
        && sub == "run"
        && rest
            .iter()
            .any(|w| w.text == "--no-sync" || w.text == "--frozen" || w.text == "--offline")
    {
        v.raise(Tier::Write, "uv run --no-sync: runs project code");
        return Some(true);
    }
    if mname == "pip" && sub == "install" && rest.iter().any(|w| w.text.starts_with("--dry-run")) {
        v.raise(
            Tier::Network,
            "pip install --dry-run: resolves against the registry",
        );
        return Some(true);
    }
    if read_only_second || m.read.contains(&sub) {
        v.note(format!("{name} {sub}: reads"));
    } else if m.install.contains(&sub) {
        v.raise(
            Tier::Install,
            format!("{name} {sub}: installs or removes packages"),
        );
        v.install_source = Some(install_source(mname, sub, rest));
    } else if m.network.contains(&sub) {
        v.raise(
            Tier::Network,
            format!("{name} {sub}: contacts the registry"),
        );
    } else if sub == "exec" && matches!(mname, "bundle" | "bundler" | "pnpm") {
        v.raise(Tier::Write, format!("{name} exec: runs a program"));
        if rest.iter().any(|w| w.opaque()) {
            v.fail(format!(
                "{name} exec: argument only known at run time: not classified"
            ));
        } else if !rest.is_empty() {
            classify_cmd(an, v, rest, depth + 1);
        }
    } else {
        v.raise(
            Tier::Write,
            format!("{name} {sub}: runs project code or changes files: at least write"),
        );
    }
    Some(true)
}

fn python(an: &mut Analyzer, v: &mut Verdict, name: &str, args: &[Word], depth: usize) {
    if args.len() == 1
        && matches!(
            args[0].text.as_str(),
            "--version" | "-V" | "-VV" | "--help" | "-h"
        )
    {
        return v.note(format!("{name} {}: prints version or help", args[0].text));
    }
    let mut i = 0;
    while i < args.len() {
        let t = args[i].text.as_str();
        if args[i].opaque() {
            return v.fail(format!(
                "{name}: argument only known at run time: not classified"
            ));
        }
        if t == "-m" || (t.starts_with("-m") && !t.starts_with("--")) {
            let (module, next) = if t == "-m" {
                (
                    args.get(i + 1).map(|w| w.text.as_str()).unwrap_or(""),
                    i + 2,
                )
            } else {
                (&t[2..], i + 1)
            };
            let rest = &args[next.min(args.len())..];
            match module {
                "pip" | "pip3" | "uv" | "poetry" | "pipx" | "conda" => {
                    let mut inner = vec![Word::lit(module)];
                    inner.extend(rest.iter().cloned());
                    classify_cmd(an, v, &inner, depth + 1);
                }
                "ensurepip" => {
                    v.raise(Tier::Install, format!("{name} -m ensurepip: installs pip"));
                    v.install_source = Some("registry");
                }
                "http.server" | "smtpd" => {
                    v.raise(Tier::Write, format!("{name} -m {module}: runs a server"))
                }
                _ => v.raise(
                    Tier::Write,
                    format!("{name} -m {module}: runs a module: at least write"),
                ),
            }
            return;
        }
        if t == "-c" || (t.starts_with("-c") && !t.starts_with("--")) {
            return v.raise(Tier::Write, format!("{name} -c: runs code: at least write"));
        }
        if !t.starts_with('-') || t == "-" {
            return v.raise(
                Tier::Write,
                format!("{name} {t}: runs a script: at least write"),
            );
        }
        if matches!(t, "-W" | "-X" | "-Q") {
            i += 1;
        }
        i += 1;
    }
    v.raise(
        Tier::Write,
        format!("{name}: runs code read from standard input: at least write"),
    );
}
