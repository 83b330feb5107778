//! Package specifiers as typed on the command line, per ecosystem.

use super::{source, PackageRef};

/// A parsed specifier: the package, where it comes from, and a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Spec {
    pub pkg: PackageRef,
    /// One of [`source`]'s constants.
    pub source: &'static str,
    pub warning: Option<String>,
}

impl Spec {
    fn registry(name: &str, version: Option<&str>) -> Spec {
        Spec {
            pkg: PackageRef::new(name, version),
            source: source::REGISTRY,
            warning: None,
        }
    }
    fn other(raw: &str, source: &'static str) -> Spec {
        Spec {
            pkg: PackageRef::new(raw, None),
            source,
            warning: None,
        }
    }
}

/// Whether `name` (a [`PackageRef::name`]) names a registry package of
/// `eco`, rather than a URL, VCS location or path.
pub(crate) fn is_registry_name(eco: &str, name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    if is_vcs(&l)
        || is_url(&l)
        || is_pathlike(&l)
        || [
            "github:",
            "gitlab:",
            "bitbucket:",
            "gist:",
            "link:",
            "workspace:",
            "portal:",
        ]
        .iter()
        .any(|p| l.starts_with(p))
    {
        return false;
    }
    match eco {
        "npm" => l.starts_with('@') || !l.contains('/'),
        "homebrew" => l.matches('/').count() != 2,
        "go" => true,
        _ => !l.contains('/'),
    }
}

/// Risk order of sources, for the intent's single `source`.
pub(crate) fn source_rank(s: &str) -> u8 {
    match s {
        source::LOCKFILE => 0,
        source::REGISTRY => 1,
        source::REQUIREMENTS => 2,
        source::PATH => 3,
        source::GIT => 4,
        source::URL => 5,
        _ => 6,
    }
}

fn is_url(s: &str) -> bool {
    let l = s.to_ascii_lowercase();
    l.starts_with("http://") || l.starts_with("https://") || l.starts_with("ftp://")
}

fn is_vcs(s: &str) -> bool {
    let l = s.to_ascii_lowercase();
    ["git+", "git://", "git@", "hg+", "svn+", "bzr+", "ssh://"]
        .iter()
        .any(|p| l.starts_with(p))
        || (is_url(&l) && l.split(['#', '?']).next().unwrap_or("").ends_with(".git"))
}

fn is_pathlike(s: &str) -> bool {
    s == "."
        || s == ".."
        || s.starts_with("./")
        || s.starts_with("../")
        || s.starts_with('/')
        || s.starts_with("~/")
        || s.starts_with("file:")
}

fn has_archive_ext(s: &str, exts: &[&str]) -> bool {
    let l = s.to_ascii_lowercase();
    exts.iter().any(|e| l.ends_with(e))
}

/// Classifies URL / VCS / path forms shared by most ecosystems.
fn non_registry(s: &str, archive_exts: &[&str]) -> Option<Spec> {
    if is_vcs(s) {
        return Some(Spec::other(s, source::GIT));
    }
    if is_url(s) {
        return Some(Spec::other(s, source::URL));
    }
    if is_pathlike(s) || has_archive_ext(s, archive_exts) {
        return Some(Spec::other(s, source::PATH));
    }
    None
}

/// npm / pnpm / yarn / bun specifiers (npm-package-arg): `name`,
/// `name@range`, `@scope/name@tag`, `alias@npm:real@1`, `user/repo`,
/// `github:u/r`, `git+https://...`, `https://.../x.tgz`, `file:../x`, `./x.tgz`.
pub(crate) fn npm(s: &str) -> Spec {
    let l = s.to_ascii_lowercase();
    if ["github:", "gitlab:", "bitbucket:", "gist:"]
        .iter()
        .any(|p| l.starts_with(p))
    {
        return Spec::other(s, source::GIT);
    }
    if l.starts_with("link:") || l.starts_with("workspace:") || l.starts_with("portal:") {
        return Spec::other(s, source::PATH);
    }
    if let Some(sp) = non_registry(s, &[".tgz", ".tar.gz", ".tar"]) {
        return sp;
    }
    let (name, version) = split_at_version(s, '@');
    if !s.starts_with('@') && name.contains('/') {
        // `user/repo[#ref]`: GitHub shorthand.
        return Spec::other(s, source::GIT);
    }
    if let Some(real) = version.and_then(|v| v.strip_prefix("npm:")) {
        let mut sp = npm(real);
        sp.warning = Some(format!(
            "{s}: alias: installs the package {} under the name {name}",
            sp.pkg.name
        ));
        return sp;
    }
    Spec::registry(name, version)
}

/// Splits `name@version`, keeping a leading `@` (npm scopes) in the name.
pub(crate) fn split_at_version(s: &str, sep: char) -> (&str, Option<&str>) {
    let start = usize::from(s.starts_with('@'));
    match s[start..].find(sep) {
        Some(i) => (&s[..start + i], Some(&s[start + i + 1..])),
        None => (s, None),
    }
}

/// Python requirement specifiers (PEP 508 / pip): `requests`,
/// `requests[socks]>=2,<3; python_version>"3.8"`, `name @ https://...`,
/// `git+https://...#egg=x`, `./dir`, `x.whl`, `x.tar.gz`.
pub(crate) fn python(s: &str) -> Spec {
    let s = s.trim();
    if is_vcs(s) || is_url(s) || is_pathlike(s) {
        return non_registry(s, &[]).expect("a URL, VCS or path form");
    }
    if !s.contains('@') {
        if let Some(sp) = non_registry(s, &[".whl", ".tar.gz", ".zip", ".tar.bz2", ".tgz"]) {
            return sp;
        }
    }
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .unwrap_or(s.len());
    let name = &s[..end];
    let mut rest = s[end..].trim_start();
    if rest.starts_with('[') {
        rest = rest.find(']').map_or("", |i| rest[i + 1..].trim_start());
    }
    let rest = rest.split(';').next().unwrap_or("").trim();
    if let Some(url) = rest.strip_prefix('@') {
        let url = url.trim();
        let src = if is_vcs(url) {
            source::GIT
        } else if is_pathlike(url) {
            source::PATH
        } else {
            source::URL
        };
        return Spec {
            pkg: PackageRef::new(name, Some(url)),
            source: src,
            warning: None,
        };
    }
    if name.is_empty() {
        return Spec {
            pkg: PackageRef::new(s, None),
            source: source::REGISTRY,
            warning: Some(format!("{s}: not a requirement specifier")),
        };
    }
    Spec::registry(name, Some(rest))
}

/// pip's `-e` / `--editable` value: always a local path or a VCS URL.
pub(crate) fn editable(s: &str) -> Spec {
    let src = if is_vcs(s) {
        source::GIT
    } else if is_url(s) {
        source::URL
    } else {
        source::PATH
    };
    Spec::other(s, src)
}

/// `name@version` specifiers (cargo, go, npm-less cases).
pub(crate) fn at_version(s: &str) -> Spec {
    if let Some(sp) = non_registry(s, &[".crate"]) {
        return sp;
    }
    let (name, version) = split_at_version(s, '@');
    Spec::registry(name, version)
}

/// Go package paths with `@version`: local `./...` paths are path sources.
pub(crate) fn go(s: &str) -> Spec {
    if is_pathlike(s) || s.ends_with(".go") {
        return Spec::other(s, source::PATH);
    }
    let (name, version) = s.split_once('@').map_or((s, None), |(n, v)| (n, Some(v)));
    Spec::registry(name, version)
}

/// RubyGems: `rails`, `rails:7.1.0`, `./x.gem`.
pub(crate) fn gem(s: &str) -> Spec {
    if let Some(sp) = non_registry(s, &[".gem"]) {
        return sp;
    }
    let (name, version) = s.split_once(':').map_or((s, None), |(n, v)| (n, Some(v)));
    Spec::registry(name, version)
}

/// Debian: `jq`, `curl=7.88.1-10`, `nginx/bookworm-backports`, `./x.deb`.
pub(crate) fn debian(s: &str) -> Spec {
    if let Some(sp) = non_registry(s, &[".deb"]) {
        return sp;
    }
    if let Some((n, v)) = s.split_once('=') {
        return Spec::registry(n, Some(v));
    }
    if let Some((n, rel)) = s.split_once('/') {
        return Spec::registry(n, Some(&format!("/{rel}")));
    }
    Spec::registry(s, None)
}

/// RPM (dnf/yum): versions are part of the name (`vim-enhanced-9.0`), groups
/// start with `@`; URLs and `.rpm` paths.
pub(crate) fn rpm(s: &str) -> Spec {
    non_registry(s, &[".rpm"]).unwrap_or_else(|| Spec::registry(s, None))
}

/// Alpine apk: `curl`, `curl=8.5.0-r0`, `curl~8`, `curl>8`, `curl@edge`.
pub(crate) fn alpine(s: &str) -> Spec {
    if let Some(sp) = non_registry(s, &[".apk"]) {
        return sp;
    }
    match s.find(['=', '~', '<', '>', '@']) {
        Some(i) if i > 0 => {
            let (n, v) = s.split_at(i);
            Spec::registry(n, Some(v.trim_start_matches('=')))
        }
        _ => Spec::registry(s, None),
    }
}

/// Homebrew: `jq`, `python@3.12` (a versioned formula), `user/tap/formula`
/// (a third-party tap: a git source), URLs to formulae.
pub(crate) fn brew(s: &str) -> Spec {
    if let Some(sp) = non_registry(s, &[".rb"]) {
        return sp;
    }
    if s.matches('/').count() == 2 && !s.starts_with("homebrew/") {
        let mut sp = Spec::other(s, source::GIT);
        sp.warning = Some(format!("{s}: formula from a third-party tap"));
        return sp;
    }
    let (name, version) = s.split_once('@').map_or((s, None), |(n, v)| (n, Some(v)));
    Spec::registry(name, version)
}

/// conda MatchSpec: `numpy`, `numpy=1.26`, `numpy>=1.2`, `conda-forge::numpy`.
pub(crate) fn conda(s: &str) -> Spec {
    if let Some(sp) = non_registry(s, &[".tar.bz2", ".conda"]) {
        return sp;
    }
    let (channel, spec) = s.split_once("::").map_or((None, s), |(c, r)| (Some(c), r));
    let end = spec
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .unwrap_or(spec.len());
    let (name, version) = spec.split_at(end);
    let version = version.trim().trim_start_matches('=');
    let mut sp = Spec::registry(name, Some(version));
    if let Some(c) = channel {
        if c != "conda-forge" && c != "defaults" {
            sp.warning = Some(format!("{s}: from the channel {c}"));
        }
    }
    sp
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn npm_specifiers() {
        assert_eq!(npm("lodash@4").pkg, PackageRef::new("lodash", Some("4")));
        assert_eq!(
            npm("@types/node@^20").pkg,
            PackageRef::new("@types/node", Some("^20"))
        );
        assert_eq!(npm("@types/node").pkg.version, None);
        assert_eq!(npm("expressjs/express").source, source::GIT);
        assert_eq!(npm("github:u/r#v1").source, source::GIT);
        assert_eq!(npm("https://x.test/a.tgz").source, source::URL);
        assert_eq!(npm("./pkg.tgz").source, source::PATH);
        let alias = npm("lodash@npm:lodahs@1");
        assert_eq!(alias.pkg, PackageRef::new("lodahs", Some("1")));
        assert!(alias.warning.unwrap().contains("alias"));
    }

    #[test]
    fn python_specifiers() {
        assert_eq!(
            python("requests[socks]>=2,<3; python_version>'3.8'").pkg,
            PackageRef::new("requests", Some(">=2,<3"))
        );
        assert_eq!(python("black").pkg.version, None);
        let u = python("pkg @ https://x.test/p.whl");
        assert_eq!((u.pkg.name.as_str(), u.source), ("pkg", source::URL));
        assert_eq!(python("git+https://x.test/r.git").source, source::GIT);
        assert_eq!(python("dist/x-1.0-py3-none-any.whl").source, source::PATH);
    }

    #[test]
    fn system_specifiers() {
        assert_eq!(
            debian("curl=7.88").pkg,
            PackageRef::new("curl", Some("7.88"))
        );
        assert_eq!(
            alpine("curl=8.5.0-r0").pkg,
            PackageRef::new("curl", Some("8.5.0-r0"))
        );
        assert_eq!(
            conda("conda-forge::numpy=1.26").pkg,
            PackageRef::new("numpy", Some("1.26"))
        );
        assert_eq!(brew("user/tap/thing").source, source::GIT);
        assert_eq!(
            brew("python@3.12").pkg,
            PackageRef::new("python", Some("3.12"))
        );
    }
}
