//! The policy's `[mcp]` section: which MCP servers a session may use, how
//! much each is trusted, and per-tool decisions.
//!
//! ```toml
//! [[mcp.servers]]
//! name = "docs"                       # [a-z0-9_-], 1..=32 characters, unique
//! command = "/opt/mcp/docs-server"    # stdio server: program (absolute or on PATH)
//! args = ["--stdio"]
//! env = { DOCS_INDEX = "index.db" }   # added to the clean environment
//! trust = "untrusted"                 # trusted | verified | untrusted (default)
//! network = false                     # egress; only for trusted servers (default false)
//! tools = { search = "allow", purge = "deny" }   # per-tool decisions
//! startup_timeout_ms = 10000
//! call_timeout_ms = 60000
//! max_result_bytes = 1048576
//! ```
//!
//! `url = "https://..."` (streamable HTTP) is accepted by the schema but
//! refused when used: such a server would run outside the sandbox.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::policy::Decision;

/// Longest accepted server startup timeout, ms.
pub const MAX_STARTUP_TIMEOUT_MS: u64 = 120_000;
/// Longest accepted per-call timeout, ms (1 h).
pub const MAX_CALL_TIMEOUT_MS: u64 = 3_600_000;
/// Largest accepted result cap, bytes (16 MiB: rmcp's line limit).
pub const MAX_RESULT_BYTES: u64 = 16 << 20;
/// Most servers one policy may list.
pub const MAX_SERVERS: usize = 32;

/// How far a server's claims are believed (MCP specification, "Tool
/// annotations": clients must treat annotations as untrusted unless they
/// come from trusted servers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trust {
    /// Maintained by the user's organisation: annotations may lower the
    /// decision; the server may write the workspace.
    Trusted,
    /// A known third party: every call asks unless a rule names the tool;
    /// read-only workspace.
    Verified,
    /// Anything else (the default): as verified, and its descriptions are
    /// shown as the server's words with a tool-poisoning scan.
    #[default]
    Untrusted,
}

impl Trust {
    /// `trusted`, `verified`, `untrusted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Trust::Trusted => "trusted",
            Trust::Verified => "verified",
            Trust::Untrusted => "untrusted",
        }
    }
}

/// `[mcp]`: the MCP servers sessions under this policy may use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSettings {
    #[serde(default)]
    pub servers: Vec<ServerConfig>,
}

/// One `[[mcp.servers]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Name used in tool ids (`mcp:<name>/<tool>`), `[a-z0-9_-]{1,32}`.
    pub name: String,
    /// Program of a stdio server (absolute, or resolved through `PATH`
    /// inside the sandbox).
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment of a stdio server (over the clean base environment).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Streamable HTTP endpoint: refused when used (not hosted in the sandbox).
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub trust: Trust,
    /// Whether the server may reach the network (trusted servers only).
    #[serde(default)]
    pub network: bool,
    /// Per-tool decisions by tool name; they win over annotations and trust.
    #[serde(default)]
    pub tools: BTreeMap<String, Decision>,
    /// How long start-up and the MCP `initialize` handshake may take, ms.
    #[serde(default = "ServerConfig::default_startup_timeout_ms")]
    pub startup_timeout_ms: u64,
    /// How long one `tools/call` (or `tools/list`) may take, ms; past it the
    /// server is killed (restarted on next use).
    #[serde(default = "ServerConfig::default_call_timeout_ms")]
    pub call_timeout_ms: u64,
    /// Most bytes of one tool result returned (longer text is cut with a
    /// marker).
    #[serde(default = "ServerConfig::default_max_result_bytes")]
    pub max_result_bytes: u64,
}

impl ServerConfig {
    fn default_startup_timeout_ms() -> u64 {
        10_000
    }
    fn default_call_timeout_ms() -> u64 {
        60_000
    }
    fn default_max_result_bytes() -> u64 {
        1 << 20
    }

    /// A stdio server `name` running `command args` with defaults.
    pub fn stdio(name: &str, command: &str, args: &[&str]) -> ServerConfig {
        ServerConfig {
            name: name.into(),
            command: Some(command.into()),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: BTreeMap::new(),
            url: None,
            trust: Trust::Untrusted,
            network: false,
            tools: BTreeMap::new(),
            startup_timeout_ms: Self::default_startup_timeout_ms(),
            call_timeout_ms: Self::default_call_timeout_ms(),
            max_result_bytes: Self::default_max_result_bytes(),
        }
    }

    /// BLAKE3 hex identifying the server process (name, command, args, env,
    /// url): tool pins are per server identity.
    pub fn identity(&self) -> String {
        let v = serde_json::json!({
            "name": self.name,
            "command": self.command,
            "args": self.args,
            "env": self.env,
            "url": self.url,
        });
        blake3::hash(v.to_string().as_bytes()).to_hex().to_string()
    }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

fn valid_env_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 128
        && !k.as_bytes()[0].is_ascii_digit()
        && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl McpSettings {
    /// The server named `name`.
    pub fn server(&self, name: &str) -> Option<&ServerConfig> {
        self.servers.iter().find(|s| s.name == name)
    }

    /// Checks every server entry. Errors (a message naming the server and
    /// the field): a bad or duplicate name, neither or both of `command`
    /// and `url`, NUL bytes, a bad `env` key or an `env` entry for `PATH`
    /// or `HOME` (the sandbox sets them), `network = true` on a server that
    /// is not trusted (a read-only workspace with egress is no sandbox
    /// profile), timeouts or caps of 0 or over their maximum.
    pub fn validate(&self) -> Result<(), String> {
        if self.servers.len() > MAX_SERVERS {
            return Err(format!(
                "mcp: {} servers, at most {MAX_SERVERS}",
                self.servers.len()
            ));
        }
        for (i, s) in self.servers.iter().enumerate() {
            let e = |m: String| format!("mcp server {:?}: {m}", s.name);
            if !valid_name(&s.name) || s.name.contains("__") {
                return Err(e(
                    "name must be 1-32 characters of a-z, 0-9, - and _, without `__`".into(),
                ));
            }
            if self.servers[..i].iter().any(|o| o.name == s.name) {
                return Err(e("duplicate name".into()));
            }
            match (&s.command, &s.url) {
                (None, None) => return Err(e("needs `command` (stdio) or `url`".into())),
                (Some(_), Some(_)) => return Err(e("has both `command` and `url`".into())),
                (Some(c), None) if c.trim().is_empty() => {
                    return Err(e("`command` is empty".into()))
                }
                (None, Some(u)) if !(u.starts_with("https://") || u.starts_with("http://")) => {
                    return Err(e(format!("url {u:?} is not http(s)")))
                }
                _ => {}
            }
            let strings = s
                .command
                .iter()
                .chain(s.url.iter())
                .chain(s.args.iter())
                .chain(s.env.keys())
                .chain(s.env.values())
                .chain(s.tools.keys());
            for v in strings {
                if v.contains('\0') {
                    return Err(e(format!("{v:?} contains a NUL byte")));
                }
            }
            for k in s.env.keys() {
                if !valid_env_key(k) {
                    return Err(e(format!("env key {k:?} is not a variable name")));
                }
                if k == "PATH" || k == "HOME" {
                    return Err(e(format!("env may not set {k} (the sandbox sets it)")));
                }
            }
            if s.network && s.trust != Trust::Trusted {
                return Err(e(format!(
                    "network = true needs trust = \"trusted\" (a {} server sees the workspace read-only, and the sandbox has no read-only profile with egress)",
                    s.trust.as_str()
                )));
            }
            for (field, v, max) in [
                (
                    "startup_timeout_ms",
                    s.startup_timeout_ms,
                    MAX_STARTUP_TIMEOUT_MS,
                ),
                ("call_timeout_ms", s.call_timeout_ms, MAX_CALL_TIMEOUT_MS),
                ("max_result_bytes", s.max_result_bytes, MAX_RESULT_BYTES),
            ] {
                if v == 0 || v > max {
                    return Err(e(format!("{field} = {v} is outside 1..={max}")));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_src: &str) -> Result<McpSettings, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct W {
            mcp: McpSettings,
        }
        let w: W = toml::from_str(toml_src).map_err(|e| e.to_string())?;
        w.mcp.validate()?;
        Ok(w.mcp)
    }

    #[test]
    fn a_stdio_server_defaults_to_untrusted_without_network() {
        let m = parse("[[mcp.servers]]\nname = \"docs\"\ncommand = \"docs-server\"\n").unwrap();
        let s = &m.servers[0];
        assert_eq!(s.trust, Trust::Untrusted);
        assert!(!s.network);
        assert_eq!(s.call_timeout_ms, 60_000);
        assert_eq!(m.server("docs").unwrap().name, "docs");
        assert!(m.server("other").is_none());
    }

    #[test]
    fn tool_rules_and_trust_parse() {
        let m = parse(
            "[[mcp.servers]]\nname = \"a\"\ncommand = \"x\"\ntrust = \"trusted\"\nnetwork = true\ntools = { search = \"allow\", purge = \"deny\" }\n",
        )
        .unwrap();
        let s = &m.servers[0];
        assert_eq!(s.trust, Trust::Trusted);
        assert_eq!(s.tools["search"], Decision::Allow);
        assert_eq!(s.tools["purge"], Decision::Deny);
    }

    #[test]
    fn bad_entries_are_refused_with_the_reason() {
        for (src, needle) in [
            ("name = \"a\"\ncommand = \"x\"\nbogus = 1\n", "bogus"),
            (
                "name = \"a\"\ncommand = \"x\"\ntrust = \"maybe\"\n",
                "maybe",
            ),
            ("name = \"A B\"\ncommand = \"x\"\n", "name must be"),
            ("name = \"a__b\"\ncommand = \"x\"\n", "without `__`"),
            ("name = \"a\"\n", "needs `command`"),
            (
                "name = \"a\"\ncommand = \"x\"\nurl = \"https://e\"\n",
                "both",
            ),
            ("name = \"a\"\nurl = \"ftp://e\"\n", "not http"),
            ("name = \"a\"\ncommand = \"x\"\nnetwork = true\n", "trusted"),
            (
                "name = \"a\"\ncommand = \"x\"\ntrust = \"verified\"\nnetwork = true\n",
                "trusted",
            ),
            (
                "name = \"a\"\ncommand = \"x\"\nenv = { PATH = \"/x\" }\n",
                "PATH",
            ),
            (
                "name = \"a\"\ncommand = \"x\"\nenv = { \"1A\" = \"v\" }\n",
                "env key",
            ),
            (
                "name = \"a\"\ncommand = \"x\"\ncall_timeout_ms = 0\n",
                "call_timeout_ms",
            ),
            (
                "name = \"a\"\ncommand = \"x\"\nmax_result_bytes = 999999999\n",
                "max_result_bytes",
            ),
            (
                "name = \"a\"\ncommand = \"x\"\ntools = { t = \"maybe\" }\n",
                "maybe",
            ),
        ] {
            let err = parse(&format!("[[mcp.servers]]\n{src}")).unwrap_err();
            assert!(err.contains(needle), "{src}: {err}");
        }
        let dup = "[[mcp.servers]]\nname = \"a\"\ncommand = \"x\"\n[[mcp.servers]]\nname = \"a\"\ncommand = \"y\"\n";
        assert!(parse(dup).unwrap_err().contains("duplicate"));
        assert!(parse("[mcp]\nunknown = 1\n")
            .unwrap_err()
            .contains("unknown"));
    }

    #[test]
    fn identity_covers_the_process_not_the_trust() {
        let a = ServerConfig::stdio("a", "x", &["1"]);
        let mut b = a.clone();
        b.trust = Trust::Trusted;
        assert_eq!(a.identity(), b.identity());
        let mut c = a.clone();
        c.args.push("2".into());
        assert_ne!(a.identity(), c.identity());
    }
}
