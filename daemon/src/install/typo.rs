//! Typosquat check: registry package names against shipped lists of popular
//! names per ecosystem (`popular/*.txt`, one name a line, `#` comments).
//!
//! A name is a *lookalike* when it is not itself on the list and, after
//! normalisation (lowercase; for PyPI, PEP 503 `[-_.]+` -> `-`):
//! - its Damerau-Levenshtein distance (optimal string alignment: insertions,
//!   deletions, substitutions and adjacent transpositions) to a popular name
//!   is at most 1 for names of 4-11 characters and at most 2 for longer ones;
//! - or it equals a popular name once the separators `-`, `_`, `.` are
//!   removed (`python-dateutil` vs `pythondateutil`);
//! - or it is a popular name with a common prefix or suffix added
//!   (`py`, `python-`, `-js`, `node-`, `-dev`, `-lib`, ...).
//!
//! Otherwise a name absent from the list is *unknown*. Both produce warnings
//! for the approval preview; neither decides anything.

use super::InstallIntent;
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

/// The outcome of checking one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameCheck {
    /// On the popular list, or (npm) in the scope of a popular scoped
    /// package: npm scopes belong to their owner, so no one else can
    /// publish a lookalike inside one.
    Popular,
    /// Close to the popular name it names.
    Lookalike(String),
    /// Neither popular nor close to a popular name.
    Unknown,
    /// No list for that ecosystem.
    Unchecked,
}

struct List {
    names: HashSet<String>,
    sorted: Vec<String>,
    /// Separator-stripped form -> popular name.
    stripped: HashMap<String, String>,
    /// npm scopes (`@types`) of the scoped names on the list.
    scopes: HashSet<String>,
}

fn parse_list(text: &str, eco: &str) -> List {
    let sorted: Vec<String> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(|l| normalize(eco, l))
        .collect();
    let mut stripped = HashMap::new();
    for n in sorted.iter().filter(|n| n.len() >= 4) {
        stripped.entry(strip_seps(n)).or_insert_with(|| n.clone());
    }
    let scopes = sorted
        .iter()
        .filter(|n| n.starts_with('@'))
        .filter_map(|n| n.split_once('/').map(|(sc, _)| sc.to_string()))
        .collect();
    List {
        names: sorted.iter().cloned().collect(),
        sorted,
        stripped,
        scopes,
    }
}

fn list(eco: &str) -> Option<&'static List> {
    macro_rules! lazy {
        ($file:literal, $eco:literal) => {{
            static L: OnceLock<List> = OnceLock::new();
            Some(L.get_or_init(|| parse_list(include_str!($file), $eco)))
        }};
    }
    match eco {
        "npm" => lazy!("popular/npm.txt", "npm"),
        "pypi" => lazy!("popular/pypi.txt", "pypi"),
        "crates" => lazy!("popular/crates.txt", "crates"),
        "go" => lazy!("popular/go.txt", "go"),
        "rubygems" => lazy!("popular/rubygems.txt", "rubygems"),
        "debian" | "rpm" | "alpine" | "homebrew" => lazy!("popular/system.txt", "system"),
        "conda" => lazy!("popular/conda.txt", "conda"),
        _ => None,
    }
}

/// Normalises a name for comparison within an ecosystem.
fn normalize(eco: &str, name: &str) -> String {
    let l = name.trim().to_ascii_lowercase();
    match eco {
        "pypi" | "conda" => {
            let mut out = String::with_capacity(l.len());
            let mut sep = false;
            for c in l.chars() {
                if matches!(c, '-' | '_' | '.') {
                    sep = true;
                } else {
                    if sep && !out.is_empty() {
                        out.push('-');
                    }
                    sep = false;
                    out.push(c);
                }
            }
            out
        }
        "crates" => l.replace('_', "-"),
        _ => l,
    }
}

/// Optimal string alignment distance, stopping early above `max` (any
/// result above `max` is `max + 1`).
pub(crate) fn osa_distance(a: &str, b: &str, max: usize) -> usize {
    if a.is_ascii() && b.is_ascii() {
        osa(a.as_bytes(), b.as_bytes(), max)
    } else {
        let a: Vec<char> = a.chars().collect();
        let b: Vec<char> = b.chars().collect();
        osa(&a, &b, max)
    }
}

fn osa<T: PartialEq>(a: &[T], b: &[T], max: usize) -> usize {
    if a.len().abs_diff(b.len()) > max {
        return max + 1;
    }
    // Three rolling rows: i-2, i-1, i.
    let w = b.len() + 1;
    let mut rows = vec![0usize; 3 * w];
    for (j, cell) in rows[w..2 * w].iter_mut().enumerate() {
        *cell = j; // row 0 lives in the "previous" slot
    }
    let (mut pp, mut p, mut c) = (0, w, 2 * w);
    for i in 1..=a.len() {
        rows[c] = i;
        let mut row_min = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (rows[p + j] + 1)
                .min(rows[c + j - 1] + 1)
                .min(rows[p + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(rows[pp + j - 2] + 1);
            }
            rows[c + j] = v;
            row_min = row_min.min(v);
        }
        if row_min > max {
            return max + 1;
        }
        (pp, p, c) = (p, c, pp);
    }
    rows[p + b.len()].min(max + 1)
}

fn strip_seps(s: &str) -> String {
    s.chars()
        .filter(|c| !matches!(c, '-' | '_' | '.'))
        .collect()
}

const AFFIXES: &[&str] = &[
    "py",
    "python-",
    "python3-",
    "py-",
    "-py",
    "-python",
    "node-",
    "-js",
    ".js",
    "js-",
    "-node",
    "-dev",
    "-lib",
    "lib",
    "-cli",
    "-utils",
    "-util",
    "-core",
    "-rs",
    "rs-",
    "-sdk",
    "-api",
    "-official",
    "-secure",
    "-fixed",
    "-latest",
    "-2",
    "2",
    "3",
    "-new",
];

/// At most this many distinct names are checked per intent.
const MAX_CHECKED: usize = 2_000;

/// How far apart a name may be from a popular name to be a lookalike.
fn max_distance(len: usize) -> usize {
    match len {
        0..=3 => 0,
        4..=11 => 1,
        _ => 2,
    }
}

/// Checks `name` in `ecosystem` (`npm`, `pypi`, `crates`, `go`,
/// `rubygems`, `debian`, `rpm`, `alpine`, `homebrew`, `conda`).
pub fn check_name(ecosystem: &str, name: &str) -> NameCheck {
    let Some(l) = list(ecosystem) else {
        return NameCheck::Unchecked;
    };
    let n = normalize(ecosystem, name);
    if l.names.contains(&n) {
        return NameCheck::Popular;
    }
    if ecosystem == "go" {
        // A package inside a popular module (golang.org/x/tools/gopls).
        if l.sorted
            .iter()
            .any(|m| n.starts_with(m.as_str()) && n[m.len()..].starts_with('/'))
        {
            return NameCheck::Popular;
        }
    }
    if ecosystem == "npm" && n.starts_with('@') {
        let scope = n.split_once('/').map_or(n.as_str(), |(sc, _)| sc);
        if l.scopes.contains(scope) {
            return NameCheck::Popular;
        }
        // A lookalike of an owned scope (`@angualr/core`); scopes of 4
        // letters or fewer (`@mdi`, `@mui`) are too dense to compare.
        if scope.len() > 5 {
            if let Some(sc) = l.scopes.iter().find(|sc| osa_distance(scope, sc, 1) <= 1) {
                return NameCheck::Lookalike(format!("{sc}/*"));
            }
        }
        return NameCheck::Unknown;
    }
    if let Some(p) = l.stripped.get(&strip_seps(&n)) {
        return NameCheck::Lookalike(p.clone());
    }
    for a in AFFIXES {
        let bare = a.starts_with(|c: char| c.is_ascii_alphanumeric()) && !a.ends_with('-');
        let core = if a.ends_with('-') {
            n.strip_prefix(a)
        } else if bare {
            n.strip_prefix(a).or_else(|| n.strip_suffix(a))
        } else {
            n.strip_suffix(a)
        };
        if let Some(core) = core.filter(|c| c.len() >= 4) {
            if l.names.contains(core) {
                return NameCheck::Lookalike(core.to_string());
            }
        }
    }
    let len = n.chars().count();
    let max = max_distance(len);
    if max > 0 {
        let mut best: Option<(usize, &String)> = None;
        for p in &l.sorted {
            if p.len().abs_diff(n.len()) > max {
                continue;
            }
            let d = osa_distance(&n, p, max);
            if d <= max && best.is_none_or(|(bd, _)| d < bd) {
                best = Some((d, p));
            }
        }
        if let Some((_, p)) = best {
            return NameCheck::Lookalike(p.clone());
        }
    }
    NameCheck::Unknown
}

/// The name to check for a package of `intent`'s ecosystem (npm aliases are
/// already resolved by the parser; Go paths keep their full module path).
fn checked_name(eco: &str, name: &str) -> Option<String> {
    if name.is_empty() || name.contains("://") {
        return None;
    }
    match eco {
        // Groups (`@development-tools`) and virtual names are not packages.
        "rpm" if name.starts_with('@') => None,
        _ => Some(name.to_string()),
    }
}

/// Adds lookalike / unknown warnings for the registry packages of `intent`
/// (command-line packages and those read from files).
pub(crate) fn annotate(intent: &mut InstallIntent, warn_unknown: bool) {
    if intent.is_lockfile_install() && intent.packages.is_empty() {
        // A lock file pins what was reviewed when it was committed.
        return;
    }
    let eco = intent.ecosystem.clone();
    let mut warnings = vec![];
    let names = intent
        .packages
        .iter()
        .map(|p| (p, false))
        .chain(intent.requirements.iter().map(|p| (p, true)));
    let mut seen = HashSet::new();
    for (p, from_file) in names {
        if !seen.insert(p.name.as_str()) || seen.len() > MAX_CHECKED {
            continue;
        }
        if super::spec::is_registry_name(&eco, &p.name) {
            let Some(name) = checked_name(&eco, &p.name) else {
                continue;
            };
            let origin = if from_file {
                " (from a requirements file)"
            } else {
                ""
            };
            match check_name(&eco, &name) {
                NameCheck::Lookalike(pop) => warnings.push(format!(
                    "lookalike: {name}{origin} is close to the popular {eco} package {pop}; \
                     check the name (typosquatting)"
                )),
                NameCheck::Unknown if warn_unknown => warnings.push(format!(
                    "unknown: {name}{origin} is not on Warden's list of popular {eco} packages; \
                     check that it exists and is the one meant"
                )),
                _ => {}
            }
        }
    }
    for w in warnings {
        if !intent.warnings.contains(&w) {
            intent.warnings.push(w);
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn every_list_has_a_few_hundred_names() {
        for eco in ["npm", "pypi", "crates", "go", "rubygems", "debian", "conda"] {
            let n = list(eco).unwrap().names.len();
            assert!(n >= 190, "{eco}: {n} names");
        }
    }

    #[test]
    fn osa_counts_transpositions_as_one() {
        assert_eq!(osa_distance("reqeusts", "requests", 2), 1);
        assert_eq!(osa_distance("lodahs", "lodash", 2), 1);
        assert_eq!(osa_distance("abc", "abc", 2), 0);
        assert_eq!(osa_distance("kitten", "sitting", 5), 3);
        assert_eq!(osa_distance("a", "abcdef", 2), 3);
    }

    #[test]
    fn lookalikes_and_popular_names() {
        assert_eq!(check_name("pypi", "requests"), NameCheck::Popular);
        assert_eq!(check_name("pypi", "Requests"), NameCheck::Popular);
        assert_eq!(
            check_name("pypi", "reqeusts"),
            NameCheck::Lookalike("requests".into())
        );
        assert_eq!(
            check_name("npm", "lodahs"),
            NameCheck::Lookalike("lodash".into())
        );
        assert_eq!(
            check_name("pypi", "python_dateutil"),
            NameCheck::Popular,
            "PEP 503 normalisation"
        );
        assert_eq!(
            check_name("pypi", "pythondateutil"),
            NameCheck::Lookalike("python-dateutil".into())
        );
        assert_eq!(
            check_name("npm", "lodash-js"),
            NameCheck::Lookalike("lodash".into())
        );
        assert_eq!(check_name("crates", "serde_json"), NameCheck::Popular);
        assert_eq!(
            check_name("crates", "sedre"),
            NameCheck::Lookalike("serde".into())
        );
        assert_eq!(
            check_name("go", "golang.org/x/tools/gopls"),
            NameCheck::Popular
        );
        assert_eq!(
            check_name("go", "github.com/pkg/errros"),
            NameCheck::Lookalike("github.com/pkg/errors".into())
        );
        assert_eq!(
            check_name("pypi", "zzqx-internal-thing"),
            NameCheck::Unknown
        );
        assert_eq!(check_name("nope", "x"), NameCheck::Unchecked);
        // npm scopes belong to their owner.
        assert_eq!(
            check_name("npm", "@types/some-rare-lib"),
            NameCheck::Popular
        );
        assert_eq!(
            check_name("npm", "@angualr/core"),
            NameCheck::Lookalike("@angular/*".into())
        );
        assert_eq!(check_name("npm", "@zzqx/thing"), NameCheck::Unknown);
    }
}
