//! Session grants: an explicit argv prefix, up to a tier, for the rest of a
//! session. Never a bare shell, interpreter or command runner (they would
//! grant everything), and a compound command is covered only when every one
//! of its parts is.

use crate::policy::{Classification, Part, Tier};

/// Programs that run a command line given as arguments or text: as a
/// session prefix they would grant every command. Refused in any position 0.
const RUNNERS: &[&str] = &[
    // shells
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "ash",
    "fish",
    "csh",
    "tcsh",
    "yash",
    "busybox",
    "toybox", // command runners and wrappers
    "env",
    "xargs",
    "exec",
    "eval",
    "command",
    "builtin",
    "nohup",
    "nice",
    "ionice",
    "timeout",
    "stdbuf",
    "setsid",
    "time",
    "sudo",
    "doas",
    "su",
    "runuser",
    "pkexec",
    "chroot",
    "unshare",
    "nsenter",
    "flock",
    "watch",
    "strace",
    "ltrace",
    "gdb",
    "taskset",
    "chrt",
    "script",
    "parallel",
    "setpriv",
    "capsh",
    "systemd-run",
    "firejail",
    "bwrap",
    "fakeroot",
    "proot",
    "npx",
    "pnpx",
    "bunx",
    "uvx",
    "pipx",
    "dotnet",
];

/// Interpreters: allowed only with a script path as the second word
/// (`python tools/gen.py`), never bare or with an option (`python -c`).
const INTERPRETERS: &[&str] = &[
    "python",
    "pypy",
    "node",
    "nodejs",
    "deno",
    "bun",
    "perl",
    "ruby",
    "php",
    "lua",
    "luajit",
    "tclsh",
    "wish",
    "rscript",
    "r",
    "julia",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "pwsh",
    "powershell",
    "osascript",
    "java",
    "jshell",
    "groovy",
    "scala",
    "kotlin",
    "guile",
    "racket",
    "sbcl",
    "ghci",
    "runghc",
    "irb",
    "expect",
    "swift",
    "elixir",
    "erl",
    "escript",
];

/// Why a prefix cannot be a session grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("session prefix {prefix:?}: {reason}")]
pub struct PrefixError {
    pub prefix: Vec<String>,
    pub reason: String,
}

/// The program name used for the shell/interpreter checks: the basename,
/// lowercased, with a version suffix dropped (`/usr/bin/python3.12` ->
/// `python`).
fn program_name(argv0: &str) -> String {
    let base = argv0
        .rsplit('/')
        .next()
        .unwrap_or(argv0)
        .to_ascii_lowercase();
    let trimmed = base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.' || c == '-');
    if trimmed.is_empty() {
        base
    } else {
        trimmed.to_string()
    }
}

/// Checks that `prefix` may be granted for a session: non-empty words
/// without NUL or newline, and not a shell, command runner or wrapper
/// ([`RUNNERS`]: `bash`, `sh -c`, `env`, `xargs`, `sudo`, ...) nor a bare
/// interpreter ([`INTERPRETERS`]: `python`, `node -e`, ...; allowed only as
/// `python SCRIPT`).
pub fn validate_prefix(prefix: &[String]) -> Result<(), PrefixError> {
    let err = |reason: String| PrefixError {
        prefix: prefix.to_vec(),
        reason,
    };
    let Some(argv0) = prefix.first() else {
        return Err(err("empty prefix".into()));
    };
    if prefix.len() > 16 {
        return Err(err("more than 16 words".into()));
    }
    for w in prefix {
        if w.is_empty() || w.contains(['\0', '\n']) || w.len() > 4096 {
            return Err(err(format!(
                "word {w:?} is empty, too long, or has NUL or newline"
            )));
        }
    }
    let name = program_name(argv0);
    if RUNNERS.contains(&name.as_str()) {
        return Err(err(format!(
            "{argv0} runs other commands: a session grant for it would cover anything"
        )));
    }
    if INTERPRETERS.contains(&name.as_str()) {
        match prefix.get(1) {
            None => {
                return Err(err(format!(
                    "bare interpreter {argv0}: name the script too ({argv0} path/to/script)"
                )))
            }
            Some(a) if a.starts_with('-') => {
                return Err(err(format!(
                    "{argv0} {a} runs code given on the command line; name a script instead"
                )))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Whether a word looks like a subcommand (`status`, `build`, `run-tests`)
/// rather than a path, option or value.
fn looks_like_subcommand(w: &str) -> bool {
    let mut chars = w.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
        && w.len() <= 32
        && w.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// The prefix offered for "always for this session" (and used when an
/// Approve with session scope names none): the argv of the request's single
/// part, up to its first word that looks like a path, option or value
/// (`cargo build --release` -> `cargo build`). `None` for a compound command
/// (several parts: name one explicitly) or when the result is not a valid
/// prefix ([`validate_prefix`]).
pub fn suggest_prefix(c: &Classification) -> Option<Vec<String>> {
    let [part] = c.parts.as_slice() else {
        return None;
    };
    let (argv0, rest) = part.argv.split_first()?;
    let mut prefix = vec![argv0.clone()];
    prefix.extend(
        rest.iter()
            .take_while(|w| looks_like_subcommand(w))
            .take(2)
            .cloned(),
    );
    validate_prefix(&prefix).ok().map(|_| prefix)
}

/// A session grant: `prefix` covers a part whose argv starts with it,
/// word for word, and whose tier is at most `max_tier` (the tier of the
/// request it was granted on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionGrant {
    /// Id of the approval request that created it.
    pub approval_id: String,
    pub prefix: Vec<String>,
    pub max_tier: Tier,
}

impl SessionGrant {
    /// Whether this grant covers `part`.
    pub fn covers_part(&self, part: &Part) -> bool {
        !part.argv.is_empty() && part.tier <= self.max_tier && part.argv.starts_with(&self.prefix)
    }
}

/// The grants that together cover every part of `c`, one per part, or
/// `None` when some part is uncovered, when `c` has no parts (unparsed), or
/// when the whole command's tier is above every grant's ceiling. A grant for
/// `git status` never covers `git status && rm -rf x`: the `rm` part is
/// uncovered.
pub fn covering<'a>(
    grants: &'a [SessionGrant],
    c: &Classification,
) -> Option<Vec<&'a SessionGrant>> {
    if c.parts.is_empty() {
        return None;
    }
    let mut used = Vec::with_capacity(c.parts.len());
    for part in &c.parts {
        let g = grants.iter().find(|g| g.covers_part(part))?;
        used.push(g);
    }
    if !used.iter().any(|g| g.max_tier >= c.tier) {
        return None;
    }
    Some(used)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::preview::tests::classification;
    use crate::policy::Decision;

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn shells_runners_and_bare_interpreters_are_refused() {
        for bad in [
            "bash",
            "sh -c",
            "bash -c",
            "/bin/sh",
            "zsh -c",
            "env",
            "env FOO=1",
            "xargs",
            "xargs rm",
            "sudo",
            "sudo apt-get",
            "python",
            "python3",
            "python3.12 -c",
            "/usr/bin/python3",
            "node",
            "node -e",
            "perl -e",
            "ruby",
            "npx",
            "timeout 10",
            "nohup",
            "busybox sh",
            "awk",
            "eval",
        ] {
            assert!(validate_prefix(&v(bad)).is_err(), "{bad} accepted");
        }
        assert!(validate_prefix(&[]).is_err());
        assert!(validate_prefix(&["".to_string()]).is_err());
        for good in [
            "git status",
            "cargo build",
            "touch",
            "python tools/gen.py",
            "make test",
            "npm test",
        ] {
            assert!(validate_prefix(&v(good)).is_ok(), "{good} refused");
        }
    }

    #[test]
    fn suggested_prefix_stops_at_paths_and_options() {
        let c = |s: &str| classification(s, Tier::Write, Decision::Ask);
        assert_eq!(
            suggest_prefix(&c("cargo build --release")),
            Some(v("cargo build"))
        );
        assert_eq!(suggest_prefix(&c("git status")), Some(v("git status")));
        assert_eq!(suggest_prefix(&c("touch foo.txt")), Some(v("touch")));
        assert_eq!(suggest_prefix(&c("sed -i s/a/b/ f")), Some(v("sed")));
        assert_eq!(suggest_prefix(&c("bash -c ls")), None);
        assert_eq!(suggest_prefix(&c("python x.py")), None);
        assert_eq!(suggest_prefix(&c("git status && rm -rf x")), None);
    }

    #[test]
    fn a_grant_covers_only_every_part_within_its_tier() {
        let grants = vec![SessionGrant {
            approval_id: "a1".into(),
            prefix: v("git status"),
            max_tier: Tier::Write,
        }];
        let c = |s: &str, t| classification(s, t, Decision::Ask);
        assert!(covering(&grants, &c("git status", Tier::Write)).is_some());
        assert!(covering(&grants, &c("git status --short", Tier::SafeRead)).is_some());
        assert!(covering(&grants, &c("git status && rm -rf x", Tier::Write)).is_none());
        assert!(covering(&grants, &c("git stash", Tier::Write)).is_none());
        assert!(covering(&grants, &c("git status", Tier::Network)).is_none());
        assert!(covering(&grants, &c("bash -c git status", Tier::Write)).is_none());
        // A compound whose parts carry their own tiers: rm is destructive.
        let mut mixed = c("git status && rm -rf x", Tier::Destructive);
        mixed.parts[0].tier = Tier::SafeRead;
        let grants2 = vec![
            grants[0].clone(),
            SessionGrant {
                approval_id: "a2".into(),
                prefix: v("rm"),
                max_tier: Tier::Write,
            },
        ];
        assert!(
            covering(&grants2, &mixed).is_none(),
            "rm -rf is above the rm grant's tier"
        );
        // Unparsed (no parts): never covered.
        let mut none = c("git status", Tier::Write);
        none.parts.clear();
        assert!(covering(&grants, &none).is_none());
    }
}
