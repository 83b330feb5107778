//! Package-install intent parsing and the install guard.

use serde::{Deserialize, Serialize};

/// A package as typed, with its version or range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageRef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// What an install command would install, parsed from its argv.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstallIntent {
    pub manager: String,
    pub operation: String,
    pub packages: Vec<PackageRef>,
    /// registry | lockfile | requirements | git | path | url
    pub source: String,
    /// project | global | system
    pub scope: String,
    pub flags: Vec<String>,
    pub warnings: Vec<String>,
    pub scripts_enabled: bool,
    pub argv: Vec<String>,
}
