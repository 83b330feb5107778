//! Package-install intent parsing and the install guard (issue 12).
//!
//! Every dependency install runs someone else's code (npm lifecycle scripts,
//! `build.rs`, `setup.py`, Debian maintainer scripts), and hallucinated
//! package names get registered by attackers. This module turns an install
//! command's argv into an [`InstallIntent`] (manager, operation, packages with
//! versions, source, scope, flags, warnings) that classification, the policy
//! and the approval preview use, and hardens an approved install
//! ([`harden`]) where the manager can run without scripts.
//!
//! Entry points:
//! - [`parse_intent`]: argv only; `None` when the argv is not a package
//!   manager's install / fetch / fetch-and-run form at all.
//! - [`parse_intent_in`]: the same, then reads the requirements, manifest and
//!   lock files the command refers to from the workspace (regular files inside
//!   the root only, size-capped) and lists what they would install in
//!   [`InstallIntent::requirements`].
//! - [`guard`]: the classifier's one call: parse (reading the workspace when
//!   known) and fill [`InstallIntent::hardening`] with the preview of
//!   [`harden`].
//! - [`InstallIntent::always_asks`] and
//!   [`InstallSettings::allows_without_asking`]: the policy inputs (only a
//!   plain lockfile install in the project may skip asking, and only where
//!   `[install] allow_lockfile_installs = true`).
//! - [`harden`]: the argv to run once approved, and what was changed.
//! - [`lockfile_hashes`]: BLAKE3 of the lock files the install may rewrite,
//!   for the record before and after.
//!
//! ## Lockfile installs
//!
//! A *lockfile install* ([`InstallIntent::is_lockfile_install`], `source =
//! "lockfile"`) is a form whose manager refuses to resolve anything new: it
//! installs exactly what a committed lock file pins, and fails when the
//! manifest and the lock disagree. Only argv forms that guarantee this count:
//! `npm ci` (and `clean-install`, `install-ci-test`), `pnpm install
//! --frozen-lockfile`, `yarn install --frozen-lockfile` / `--immutable`,
//! `bun install --frozen-lockfile` / `bun ci`, `cargo build|test|check|run|
//! fetch|vendor --locked|--frozen`, `pip install --require-hashes -r FILE`
//! (also `uv pip install|sync`), `uv sync --locked|--frozen`, `bundle install
//! --frozen|--deployment`, `go mod download` (minimal version selection takes
//! exactly the versions `go.mod` names, verified against `go.sum`).
//!
//! `npm install` is **not** a lockfile install even when `package-lock.json`
//! is present in the workspace: npm install re-resolves whatever
//! `package.json` asks for that the lock does not satisfy and rewrites the
//! lock (npm-install(1), npm-ci(1): "If dependencies in the package lock do
//! not match those in package.json, npm ci will exit with an error, instead
//! of updating the package lock"). The presence of a lock is therefore not a
//! guarantee, and the decision depends on argv alone; the same holds for
//! `uv sync` without `--locked`, `bundle install`, and `poetry install`
//! (without a `poetry.lock` it resolves afresh and writes one).
//!
//! ## Typosquat warnings
//!
//! Registry package names are checked against shipped lists of popular names
//! per ecosystem (`popular/*.txt`). A name within a small edit distance
//! (Damerau-Levenshtein, optimal string alignment) of a popular name, or
//! equal to one after removing separators, gets a *lookalike* warning; a name
//! absent from the list gets an *unknown* warning. Both are shown in the
//! approval preview; neither allows or denies anything by itself.

mod files;
mod harden;
mod parse;
mod spec;
mod typo;

#[cfg(test)]
mod tests;

pub use harden::{harden, Hardening};
pub use typo::{check_name, NameCheck};

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Errors of the install guard's file reading. Parsing never fails: what
/// cannot be parsed becomes an intent with operation `unknown` or a warning.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The referenced file resolves outside the workspace root.
    #[error("{path}: outside the workspace")]
    OutsideWorkspace { path: String },
    /// The referenced file is not a regular file (directory, device, fifo).
    #[error("{path}: not a regular file")]
    NotRegular { path: String },
    /// The file is larger than the cap.
    #[error("{path}: {size} bytes is over the {cap}-byte limit")]
    TooLarge { path: String, size: u64, cap: u64 },
    /// Reading failed.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The file's content could not be parsed.
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
}

/// A package as typed, with its version or range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageRef {
    /// Name as the manager knows it (`lodash`, `@types/node`, `requests`,
    /// `github.com/pkg/errors`), or the URL / path for git, URL and path
    /// sources.
    pub name: String,
    /// Version, range or tag as typed (`4`, `==2.32.3`, `^1.0`, `v0.9.1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl PackageRef {
    /// A package with an optional version; an empty version is `None`.
    pub fn new(name: impl Into<String>, version: Option<&str>) -> PackageRef {
        PackageRef {
            name: name.into(),
            version: version
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(String::from),
        }
    }
}

/// Where the packages of an install come from (`InstallIntent::source`).
pub mod source {
    /// A package registry (npm, PyPI, crates.io, a distro repository).
    pub const REGISTRY: &str = "registry";
    /// Exactly what a committed lock file pins; see the module docs.
    pub const LOCKFILE: &str = "lockfile";
    /// A requirements / manifest file (`-r requirements.txt`, `--file`).
    pub const REQUIREMENTS: &str = "requirements";
    /// A git (or other VCS) repository.
    pub const GIT: &str = "git";
    /// A local path (directory, tarball, wheel, .deb).
    pub const PATH: &str = "path";
    /// A URL (tarball, wheel, formula).
    pub const URL: &str = "url";
}

/// Where an install writes (`InstallIntent::scope`).
pub mod scope {
    /// The project: `node_modules`, the project's virtualenv, its manifest.
    pub const PROJECT: &str = "project";
    /// Per-user or manager-wide locations outside the project (`npm -g`,
    /// `pip --user`, `cargo install`, `go install`, `pipx`, `brew`).
    pub const GLOBAL: &str = "global";
    /// The operating system (apt, dnf, apk, `sudo`, `--break-system-packages`).
    pub const SYSTEM: &str = "system";
}

/// What an install command would install, parsed from its argv.
///
/// JSON field names are an interface (`warden classify --json`, `install`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstallIntent {
    /// The tool that runs: `npm`, `npx`, `pnpm`, `yarn`, `bun`, `pip`, `uv`,
    /// `pipx`, `poetry`, `cargo`, `go`, `gem`, `bundle`, `apt-get`, `apt`,
    /// `dnf`, `yum`, `microdnf`, `apk`, `brew`, `conda`, `mamba`,
    /// `micromamba`, `pip-sync`. `pip3` and `python -m pip` are `pip`; `bunx`
    /// is `bun`; `pnpx` is `pnpm`; `uvx` is `uv`; `cargo-binstall` is `cargo`.
    pub manager: String,
    /// The manager's operation, normalised to its canonical name (`install`,
    /// `ci`, `add`, `exec`, `dlx`, `tool run`, `sync`, `build`, `get`,
    /// `remove`, `update`, ...), or `unknown` for a form of a known manager
    /// that this parser does not know (it must ask).
    pub operation: String,
    /// The package namespace the names live in: `npm`, `pypi`, `crates`,
    /// `go`, `rubygems`, `debian`, `rpm`, `alpine`, `homebrew`, `conda`.
    #[serde(default)]
    pub ecosystem: String,
    /// Packages named on the command line, as typed.
    pub packages: Vec<PackageRef>,
    /// registry | lockfile | requirements | git | path | url (see [`source`]);
    /// with mixed sources, the riskiest (url > git > path > requirements >
    /// registry > lockfile).
    pub source: String,
    /// project | global | system (see [`scope`]).
    pub scope: String,
    /// Options as given (`--save-dev`, `--registry=URL`), in order.
    pub flags: Vec<String>,
    /// Human-readable warnings for the approval preview (lookalike names,
    /// unknown names, custom indexes, unverified sources, unread files).
    pub warnings: Vec<String>,
    /// Whether the install can run package code at install time (lifecycle
    /// scripts, build scripts, sdist builds, maintainer scripts).
    pub scripts_enabled: bool,
    /// Whether the command downloads a package and runs it (`npx`, `pnpm
    /// dlx`, `bunx`, `uvx`, `pipx run`, `go run pkg@v`, `npm init <pkg>`).
    #[serde(default)]
    pub fetch_and_run: bool,
    /// The lock file a lockfile install is pinned to (`package-lock.json`,
    /// `Cargo.lock`, `requirements.txt` for `--require-hashes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lockfile: Option<String>,
    /// Requirements / manifest / lock files the command refers to, as typed
    /// (`-r requirements.txt`) or implied (`package.json` for `npm install`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// What those files would install, read from the workspace by
    /// [`parse_intent_in`] (empty from [`parse_intent`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<PackageRef>,
    /// The raw argv.
    pub argv: Vec<String>,
    /// What an approval (without scripts) will run instead of `argv`, and
    /// what was changed; filled by [`guard`], for the approval preview.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardening: Option<Hardening>,
}

impl InstallIntent {
    /// True for a lockfile install (see the module docs): the policy may
    /// allow these where it allows nothing else of the install tier.
    pub fn is_lockfile_install(&self) -> bool {
        self.source == source::LOCKFILE
    }

    /// True when the parser did not recognise this form of a known manager:
    /// it must ask, never be allowed by a lockfile rule.
    pub fn is_unknown(&self) -> bool {
        self.operation == "unknown"
    }

    /// True when the install writes outside the project (global or system).
    pub fn is_global(&self) -> bool {
        self.scope != scope::PROJECT
    }

    /// Why this install can never go without a person's approval, or `None`:
    /// the issue's "new packages, global or system installs, git/URL sources
    /// and fetch-and-run always ask", plus unknown forms and lookalike names.
    pub fn always_asks(&self) -> Option<&'static str> {
        if self.is_unknown() {
            Some("an install form the guard does not know")
        } else if self.fetch_and_run {
            Some("fetch-and-run: downloads a package and runs it")
        } else if self.scope != scope::PROJECT {
            Some("a global or system install")
        } else if matches!(
            self.source.as_str(),
            source::GIT | source::URL | source::PATH
        ) {
            Some("a git, URL or local-path source")
        } else if !self.packages.is_empty() {
            Some("names new packages")
        } else if self.warnings.iter().any(|w| w.starts_with("lookalike:")) {
            Some("a name close to a popular package")
        } else {
            None
        }
    }

    /// One line for an approval preview: `npm install lodash@4 (registry,
    /// project, scripts on)`, `pip install requests==2.32.3 (...)`.
    pub fn summary(&self) -> String {
        let mut s = format!("{} {}", self.manager, self.operation);
        let pep440 = matches!(self.ecosystem.as_str(), "pypi" | "conda");
        for p in &self.packages {
            s.push(' ');
            s.push_str(&p.name);
            if let Some(v) = &p.version {
                // `requests==2.32.3` reads as typed; `lodash@4` is npm's form.
                if !(pep440 && v.starts_with(['=', '<', '>', '!', '~'])) {
                    s.push('@');
                }
                s.push_str(v);
            }
        }
        s.push_str(&format!(
            " ({}, {}, scripts {}{})",
            self.source,
            self.scope,
            if self.scripts_enabled { "on" } else { "off" },
            if self.fetch_and_run {
                ", fetch-and-run"
            } else {
                ""
            }
        ));
        s
    }
}

/// A lock or manifest file's content hash, for the audit record and the
/// tool span before and after an install ([`lockfile_hashes`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockfileHash {
    /// Path relative to the command's working directory, as the manager
    /// names it (`package-lock.json`) or as the command typed it.
    pub path: String,
    /// BLAKE3 hex of the content; `None` when the file is absent or could
    /// not be read confined to the workspace.
    pub blake3: Option<String>,
}

/// Hashes the lock and manifest files `intent`'s manager reads or rewrites
/// (`package-lock.json`, `pnpm-lock.yaml`, `yarn.lock`, `Cargo.lock`,
/// `uv.lock`, `poetry.lock`, `go.sum`, `Gemfile.lock`, the requirement files
/// the command names, ...) in the workspace `root` joined with `cwd`
/// (relative). Same confinement as [`parse_intent_in`]; files over 64 MiB
/// hash as `None`. Call before and after the install to record what changed.
pub fn lockfile_hashes(intent: &InstallIntent, root: &Path, cwd: &Path) -> Vec<LockfileHash> {
    files::lockfile_hashes(intent, root, cwd)
}

/// `[install]` policy section: how the install guard treats installs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstallSettings {
    /// Lockfile installs (see the module docs) take this decision's place of
    /// the install tier's: `true` lets a policy (ci.toml) allow them. Default
    /// `false`.
    #[serde(default)]
    pub allow_lockfile_installs: bool,
    /// Disable install scripts of approved installs where the manager
    /// supports it ([`harden`]), unless the approval enabled them. Default
    /// `true`.
    #[serde(default = "yes")]
    pub disable_scripts: bool,
    /// Add `--only-binary :all:` to pip installs (wheels only, no `setup.py`)
    /// and `--no-build` to uv. Default `false`.
    #[serde(default)]
    pub pip_binary_only: bool,
    /// Warn on names absent from the popular-name lists (lookalikes are
    /// always warned). Default `true`.
    #[serde(default = "yes")]
    pub warn_unknown_names: bool,
    /// Cap on one requirements / manifest / lock file read from the
    /// workspace, bytes. Default 4 MiB.
    #[serde(default = "InstallSettings::default_max_file_bytes")]
    pub max_file_bytes: u64,
}

impl InstallSettings {
    /// Whether the policy lets `intent` run without asking under this
    /// section: only a lockfile install (module docs) that nothing in
    /// [`InstallIntent::always_asks`] holds back, with
    /// `allow_lockfile_installs = true`.
    pub fn allows_without_asking(&self, intent: &InstallIntent) -> bool {
        self.allow_lockfile_installs
            && intent.is_lockfile_install()
            && intent.always_asks().is_none()
    }
}

fn yes() -> bool {
    true
}

impl InstallSettings {
    fn default_max_file_bytes() -> u64 {
        4 << 20
    }
}

impl Default for InstallSettings {
    fn default() -> Self {
        InstallSettings {
            allow_lockfile_installs: false,
            disable_scripts: true,
            pip_binary_only: false,
            warn_unknown_names: true,
            max_file_bytes: Self::default_max_file_bytes(),
        }
    }
}

/// Parses `argv` (after quote removal; a leading `sudo`/`doas` and `NAME=value`
/// assignments are accounted for) into an install intent.
///
/// Returns `None` when the argv is not a package manager's install, fetch or
/// fetch-and-run form at all (`ls`, `npm test`, `cargo build` without
/// `--locked`, `pip list`); `Some` with operation `unknown` for a form of a
/// known manager that is not understood (the caller must ask).
pub fn parse_intent(argv: &[String]) -> Option<InstallIntent> {
    let mut intent = parse::parse(argv)?;
    typo::annotate(&mut intent, true);
    Some(intent)
}

/// [`parse_intent`], then reads the files the command refers to from the
/// workspace `root` (the command's working directory) and fills
/// [`InstallIntent::requirements`]. Files are read only when they are regular
/// files inside `root` after resolving symlinks, at most
/// [`InstallSettings::max_file_bytes`] each (default settings); a file that
/// cannot be read adds a warning naming it and why.
pub fn parse_intent_in(argv: &[String], root: &Path) -> Option<InstallIntent> {
    parse_intent_with(argv, root, Path::new(""), &InstallSettings::default())
}

/// The one call for classification: [`parse_intent`], or
/// [`parse_intent_with`] when the workspace `root` and the relative `cwd`
/// are known, then [`InstallIntent::hardening`] filled with what
/// [`harden`] would change for an approval without scripts under
/// `settings` (the policy's `[install]` section); each change is also a
/// warning starting `hardening: `, so previews that show only warnings
/// (the proto `InstallIntent`) say what was changed.
pub fn guard(
    argv: &[String],
    workspace: Option<(&Path, &Path)>,
    settings: &InstallSettings,
) -> Option<InstallIntent> {
    let mut intent = match workspace {
        Some((root, cwd)) => parse_intent_with(argv, root, cwd, settings)?,
        None => {
            let mut i = parse::parse(argv)?;
            typo::annotate(&mut i, settings.warn_unknown_names);
            i
        }
    };
    let h = harden(&intent, settings, false);
    if h.argv != intent.argv || !h.changes.is_empty() {
        // The preview's warnings travel everywhere (proto, CLI, audit).
        for c in &h.changes {
            intent.warnings.push(format!("hardening: {c}"));
        }
        intent.hardening = Some(h);
    }
    Some(intent)
}

/// [`parse_intent_in`] with the working directory `cwd` relative to `root`
/// and explicit settings (file size cap, unknown-name warnings).
pub fn parse_intent_with(
    argv: &[String],
    root: &Path,
    cwd: &Path,
    settings: &InstallSettings,
) -> Option<InstallIntent> {
    let mut intent = parse::parse(argv)?;
    files::read_requirements(&mut intent, root, cwd, settings.max_file_bytes);
    typo::annotate(&mut intent, settings.warn_unknown_names);
    Some(intent)
}
