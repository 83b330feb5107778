//! Policy rules (`[[rule]]` in `policies/*.toml`): what a rule matches, how
//! it is compiled and checked on load. Reference: `policies/README.md`.

use globset::{Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use regex::Regex;
use serde::{Deserialize, Deserializer, Serialize};

use super::{Decision, Part, PartDetail, Tier};

/// A string or a list of strings in TOML (`program = "cargo"` or
/// `program = ["cargo", "npm"]`).
fn one_or_many<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany<T> {
        One(T),
        Many(Vec<T>),
    }
    Ok(match OneOrMany::<T>::deserialize(d)? {
        OneOrMany::One(t) => vec![t],
        OneOrMany::Many(v) => v,
    })
}

/// Commands a rule must and must not match; checked when the policy loads.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Examples {
    /// Each command must have at least one part this rule matches.
    #[serde(default, rename = "match")]
    pub matches: Vec<String>,
    /// No part of these commands may match this rule.
    #[serde(default)]
    pub no_match: Vec<String>,
}

/// One `[[rule]]`. Every criterion given must hold for a part (a simple
/// command, or a redirection) to match; a rule needs at least one.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Unique id, reported as `rule` in classifications and audit records.
    pub id: String,
    /// What a match decides: `allow`, `ask` or `deny`.
    pub decision: Decision,
    /// Why the rule exists; shown with the decision and in approval previews.
    #[serde(default)]
    pub justification: Option<String>,
    /// Program names (basename of argv[0], after wrappers like `timeout` or `sudo`).
    #[serde(default, deserialize_with = "one_or_many")]
    pub program: Vec<String>,
    /// An argv prefix; each element is a glob over one word (`["npm", "run", "*"]`).
    #[serde(default)]
    pub argv: Vec<String>,
    /// A regular expression (Rust `regex` syntax) searched in the words joined with single spaces.
    #[serde(default)]
    pub pattern: Option<String>,
    /// Globs over written paths, relative to the workspace (`infra/**`);
    /// absolute globs for paths outside it. `allow` rules need every written
    /// path to match, `ask`/`deny` rules any one.
    #[serde(default, deserialize_with = "one_or_many")]
    pub paths: Vec<String>,
    /// Globs over hosts (`*.github.com`); same all/any semantics as `paths`.
    #[serde(default, deserialize_with = "one_or_many")]
    pub hosts: Vec<String>,
    /// Tiers the part must have (`tier = "network"`).
    #[serde(default, deserialize_with = "one_or_many", rename = "tier")]
    pub tiers: Vec<Tier>,
    /// Install sources the part must have (`lockfile`, `registry`, `requirements`, `project`).
    #[serde(default, deserialize_with = "one_or_many")]
    pub install: Vec<String>,
    /// The matched command may be re-run safely (used by resume).
    #[serde(default)]
    pub idempotent: bool,
    /// Commands that must / must not match, checked on load.
    #[serde(default)]
    pub examples: Examples,
}

/// A rule with its globs and regex compiled.
#[derive(Debug, Clone)]
pub struct CompiledRule {
    pub rule: Rule,
    argv: Vec<GlobMatcher>,
    pattern: Option<Regex>,
    paths: Option<GlobSet>,
    hosts: Option<GlobSet>,
}

fn word_glob(s: &str) -> Result<GlobMatcher, String> {
    GlobBuilder::new(s)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("bad glob {s:?}: {e}"))
}

fn glob_set(list: &[String], literal_sep: bool) -> Result<Option<GlobSet>, String> {
    if list.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for s in list {
        let g: Glob = GlobBuilder::new(s.trim_start_matches("./"))
            .literal_separator(literal_sep)
            .case_insensitive(!literal_sep)
            .build()
            .map_err(|e| format!("bad glob {s:?}: {e}"))?;
        b.add(g);
    }
    b.build().map(Some).map_err(|e| e.to_string())
}

impl CompiledRule {
    /// Validates and compiles `rule`. Errors name the problem.
    pub fn new(rule: Rule) -> Result<CompiledRule, String> {
        if rule.id.trim().is_empty() {
            return Err("rule without an id".into());
        }
        if rule.program.is_empty()
            && rule.argv.is_empty()
            && rule.pattern.is_none()
            && rule.paths.is_empty()
            && rule.hosts.is_empty()
            && rule.tiers.is_empty()
            && rule.install.is_empty()
        {
            return Err(
                "rule matches nothing: give program, argv, pattern, paths, hosts, tier or install"
                    .into(),
            );
        }
        let argv = rule
            .argv
            .iter()
            .map(|s| word_glob(s))
            .collect::<Result<Vec<_>, _>>()?;
        let pattern = match &rule.pattern {
            Some(p) => Some(Regex::new(p).map_err(|e| format!("bad pattern {p:?}: {e}"))?),
            None => None,
        };
        let paths = glob_set(&rule.paths, true)?;
        let hosts = glob_set(&rule.hosts, false)?;
        Ok(CompiledRule {
            rule,
            argv,
            pattern,
            paths,
            hosts,
        })
    }

    fn path_matches(set: &GlobSet, p: &str) -> bool {
        let p = p.trim_start_matches("./");
        set.is_match(p) || set.is_match(format!("{}/-", p.trim_end_matches('/')))
    }

    /// True when `part` (with what the analysis knows about it) matches.
    pub(crate) fn matches(&self, part: &Part, detail: &PartDetail) -> bool {
        let install_source = detail.install_source.as_deref();
        let r = &self.rule;
        let all = r.decision == Decision::Allow;
        if !r.tiers.is_empty() && !r.tiers.contains(&part.tier) {
            return false;
        }
        if !r.install.is_empty()
            && !install_source.is_some_and(|s| r.install.iter().any(|i| i == s))
        {
            return false;
        }
        let levels = || {
            std::iter::once(part.argv.as_slice())
                .chain(detail.chain.iter().map(|c| c.as_slice()))
                .filter(|a| !a.is_empty())
        };
        if !r.program.is_empty()
            && !levels().any(|a| {
                let base = a[0].rsplit('/').next().unwrap_or(&a[0]);
                r.program.iter().any(|p| p == base || p == &a[0])
            })
        {
            return false;
        }
        if !self.argv.is_empty()
            && !levels().any(|a| {
                a.len() >= self.argv.len() && self.argv.iter().zip(a).all(|(g, w)| g.is_match(w))
            })
        {
            return false;
        }
        if let Some(re) = &self.pattern {
            if !levels().any(|a| re.is_match(&a.join(" "))) {
                return false;
            }
        }
        if let Some(set) = &self.paths {
            if detail.writes.is_empty() {
                return false;
            }
            let ok = if all {
                detail.writes.iter().all(|p| Self::path_matches(set, p))
            } else {
                detail.writes.iter().any(|p| Self::path_matches(set, p))
            };
            if !ok {
                return false;
            }
        }
        if let Some(set) = &self.hosts {
            if detail.hosts.is_empty() {
                return false;
            }
            let ok = if all {
                detail.hosts.iter().all(|h| set.is_match(h))
            } else {
                detail.hosts.iter().any(|h| set.is_match(h))
            };
            if !ok {
                return false;
            }
        }
        true
    }
}
