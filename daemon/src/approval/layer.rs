//! The three layers that can decide a tool call, who acts, and the first
//! layer: schema validation of a call's arguments.
//!
//! A call passes, in order: **schema** (are the arguments well-formed? a
//! malformed call is `InvalidArgument` and never reaches policy), **policy**
//! (allow / ask / deny by tier and rules), **user** (an approval request
//! answered by a person, or a grant they gave earlier). The **daemon** layer
//! is for records the daemon makes on its own (expiry, startup checks). A
//! schema error is not a denial, and a policy allow is not a user's approval:
//! every audit record names its layer.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Which layer decided (or recorded) something. Serialized `schema`,
/// `policy`, `user`, `daemon`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layer {
    /// Argument validation: the call was malformed.
    Schema,
    /// The session's policy (tier matrix and rules).
    Policy,
    /// A person's answer to an approval request, or a grant they gave.
    User,
    /// The daemon itself (expiry, startup checks, bookkeeping).
    Daemon,
}

impl Layer {
    /// `schema`, `policy`, `user` or `daemon`.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Schema => "schema",
            Layer::Policy => "policy",
            Layer::User => "user",
            Layer::Daemon => "daemon",
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Layer {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "schema" => Ok(Layer::Schema),
            "policy" => Ok(Layer::Policy),
            "user" => Ok(Layer::User),
            "daemon" => Ok(Layer::Daemon),
            _ => Err(format!(
                "unknown layer {s:?} (expected schema, policy, user, daemon)"
            )),
        }
    }
}

/// Who did something: a connected peer (by uid, from `SO_PEERCRED`, see
/// unix(7)), a named user or client convention (`auto:--yes`), or the
/// daemon. Rendered `uid:1000`, `user:NAME`, `daemon`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Actor {
    Peer(u32),
    User(String),
    Daemon,
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::Peer(uid) => write!(f, "uid:{uid}"),
            Actor::User(name) => write!(f, "user:{name}"),
            Actor::Daemon => f.write_str("daemon"),
        }
    }
}

/// A malformed tool call, found before policy sees it (the gRPC layer maps
/// it to `INVALID_ARGUMENT`). `field` names the argument, `message` what is
/// wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid argument {field}: {message}")]
pub struct SchemaError {
    pub field: &'static str,
    pub message: String,
}

impl SchemaError {
    fn new(field: &'static str, message: impl Into<String>) -> Self {
        SchemaError {
            field,
            message: message.into(),
        }
    }
}

/// Longest command accepted by [`validate_exec`], bytes (Linux's
/// `MAX_ARG_STRLEN`, 32 pages: a longer `bash -c` argument cannot be execed,
/// see execve(2)).
pub const MAX_COMMAND_BYTES: usize = 128 * 1024;
/// Largest timeout accepted by [`validate_exec`], ms (24 h).
pub const MAX_TIMEOUT_MS: u64 = 86_400_000;
/// Longest id (session, run, step, tool call) accepted, bytes.
pub const MAX_ID_BYTES: usize = 128;

/// The arguments of one Exec call, as [`validate_exec`] checks them.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExecArgs<'a> {
    pub command: &'a str,
    pub cwd: &'a str,
    /// 0 means the policy default.
    pub timeout_ms: u64,
    pub run_id: &'a str,
    pub step_id: &'a str,
    pub tool_call_id: &'a str,
}

/// Schema layer for Exec (`proto/warden.proto`, `ExecRequest`): the command
/// is non-empty, has no NUL byte and is at most [`MAX_COMMAND_BYTES`]; the
/// cwd is relative, has no NUL and no `..` component; the timeout is at most
/// [`MAX_TIMEOUT_MS`]; ids are at most [`MAX_ID_BYTES`] of printable ASCII.
///
/// Errors: the first [`SchemaError`] found.
pub fn validate_exec(args: &ExecArgs<'_>) -> Result<(), SchemaError> {
    if args.command.trim().is_empty() {
        return Err(SchemaError::new("command", "empty command"));
    }
    if args.command.contains('\0') {
        return Err(SchemaError::new("command", "contains a NUL byte"));
    }
    if args.command.len() > MAX_COMMAND_BYTES {
        return Err(SchemaError::new(
            "command",
            format!(
                "{} bytes, more than the limit of {MAX_COMMAND_BYTES}",
                args.command.len()
            ),
        ));
    }
    validate_cwd(args.cwd)?;
    if args.timeout_ms > MAX_TIMEOUT_MS {
        return Err(SchemaError::new(
            "timeout_ms",
            format!(
                "{} ms, more than the limit of {MAX_TIMEOUT_MS} ms (24 h)",
                args.timeout_ms
            ),
        ));
    }
    for (field, v) in [
        ("run_id", args.run_id),
        ("step_id", args.step_id),
        ("tool_call_id", args.tool_call_id),
    ] {
        validate_id(field, v)?;
    }
    Ok(())
}

/// A working directory relative to the workspace root: empty, or relative
/// without NUL and without `..`.
pub fn validate_cwd(cwd: &str) -> Result<(), SchemaError> {
    if cwd.contains('\0') {
        return Err(SchemaError::new("cwd", "contains a NUL byte"));
    }
    if cwd.starts_with('/') {
        return Err(SchemaError::new(
            "cwd",
            format!("{cwd:?} is absolute; give it relative to the workspace root"),
        ));
    }
    if cwd.split('/').any(|c| c == "..") {
        return Err(SchemaError::new(
            "cwd",
            format!("{cwd:?} has a `..` component"),
        ));
    }
    Ok(())
}

/// An optional client-chosen id: empty, or at most [`MAX_ID_BYTES`] of
/// printable ASCII without spaces.
pub fn validate_id(field: &'static str, v: &str) -> Result<(), SchemaError> {
    if v.len() > MAX_ID_BYTES {
        return Err(SchemaError::new(
            field,
            format!("{} bytes, more than {MAX_ID_BYTES}", v.len()),
        ));
    }
    if !v.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(SchemaError::new(
            field,
            "only printable ASCII without spaces is allowed",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(command: &str) -> ExecArgs<'_> {
        ExecArgs {
            command,
            ..Default::default()
        }
    }

    #[test]
    fn schema_refuses_malformed_exec_calls() {
        assert!(validate_exec(&args("ls -la")).is_ok());
        let cases: &[(ExecArgs, &str)] = &[
            (args(""), "command"),
            (args("   "), "command"),
            (args("ls\0rm"), "command"),
            (
                ExecArgs {
                    cwd: "/etc",
                    ..args("ls")
                },
                "cwd",
            ),
            (
                ExecArgs {
                    cwd: "a/../../x",
                    ..args("ls")
                },
                "cwd",
            ),
            (
                ExecArgs {
                    timeout_ms: MAX_TIMEOUT_MS + 1,
                    ..args("ls")
                },
                "timeout_ms",
            ),
            (
                ExecArgs {
                    run_id: "a b",
                    ..args("ls")
                },
                "run_id",
            ),
        ];
        for (a, field) in cases {
            let e = validate_exec(a).unwrap_err();
            assert_eq!(e.field, *field, "{a:?}");
        }
        let long = "x".repeat(MAX_COMMAND_BYTES + 1);
        assert_eq!(validate_exec(&args(&long)).unwrap_err().field, "command");
    }

    #[test]
    fn layer_and_actor_render() {
        for l in [Layer::Schema, Layer::Policy, Layer::User, Layer::Daemon] {
            assert_eq!(l.as_str().parse::<Layer>().unwrap(), l);
        }
        assert_eq!(Actor::Peer(1000).to_string(), "uid:1000");
        assert_eq!(Actor::Daemon.to_string(), "daemon");
        assert_eq!(
            Actor::User("auto:--yes".into()).to_string(),
            "user:auto:--yes"
        );
    }
}
