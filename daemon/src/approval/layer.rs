//! The three layers that can decide a tool call, and who acts.
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

#[cfg(test)]
mod tests {
    use super::*;

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
