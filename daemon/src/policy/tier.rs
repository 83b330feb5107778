//! Tiers and decisions: the two small vocabularies every module shares.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The privilege class of a command or tool call (DESIGN.md, "Tiers"),
/// ordered from least to most privileged: the tier of a compound command is
/// the maximum of its parts. Serialized as `safe-read`, `write`, `network`,
/// `install`, `destructive`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tier {
    SafeRead,
    Write,
    Network,
    Install,
    Destructive,
}

impl Tier {
    /// All tiers, least privileged first.
    pub const ALL: [Tier; 5] = [
        Tier::SafeRead,
        Tier::Write,
        Tier::Network,
        Tier::Install,
        Tier::Destructive,
    ];

    /// The tier's standard name (`safe-read`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::SafeRead => "safe-read",
            Tier::Write => "write",
            Tier::Network => "network",
            Tier::Install => "install",
            Tier::Destructive => "destructive",
        }
    }

    /// The proto enum value.
    pub fn to_proto(self) -> i32 {
        use crate::proto::v1::Tier as P;
        (match self {
            Tier::SafeRead => P::SafeRead,
            Tier::Write => P::Write,
            Tier::Network => P::Network,
            Tier::Install => P::Install,
            Tier::Destructive => P::Destructive,
        }) as i32
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Tier {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Tier::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown tier {s:?} (expected safe-read, write, network, install, destructive)"
                )
            })
    }
}

/// What the policy says about a call. Ordered allow < ask < deny, so the
/// strictest of several decisions is their maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    Allow,
    Ask,
    Deny,
}

impl Decision {
    /// `allow`, `ask` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }

    /// The proto enum value.
    pub fn to_proto(self) -> i32 {
        use crate::proto::v1::Decision as P;
        (match self {
            Decision::Allow => P::Allow,
            Decision::Ask => P::Ask,
            Decision::Deny => P::Deny,
        }) as i32
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Decision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "allow" => Ok(Decision::Allow),
            "ask" => Ok(Decision::Ask),
            "deny" => Ok(Decision::Deny),
            _ => Err(format!(
                "unknown decision {s:?} (expected allow, ask, deny)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_order_by_privilege_and_round_trip() {
        assert!(Tier::SafeRead < Tier::Write && Tier::Install < Tier::Destructive);
        for t in Tier::ALL {
            assert_eq!(t.as_str().parse::<Tier>().unwrap(), t);
        }
        assert!("rm".parse::<Tier>().is_err());
        assert_eq!(Decision::Allow.max(Decision::Deny), Decision::Deny);
    }
}
