//! Workspace snapshots (content hashes), the blob store, checkpoints and
//! rollback.

use serde::{Deserialize, Serialize};

/// The policy file's `[checkpoint]` section.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSettings {}
