//! Warden daemon library: every security decision of Warden lives here.
//!
//! Data flows one way (see DESIGN.md): [`server`] -> [`session`] ->
//! ([`policy`] -> [`approval`]) -> [`checkpoint`] (pre) -> [`sandbox`] |
//! [`workspace`] | [`mcp`] -> [`checkpoint`] (post) -> [`redact`] -> [`server`].
//! The domain modules never import [`server`].

pub use warden_proto as proto;

pub mod approval;
pub mod checkpoint;
pub mod config;
pub mod install;
pub mod mcp;
pub mod policy;
pub mod redact;
pub mod sandbox;
pub mod server;
pub mod session;
pub mod state;
pub mod telemetry;
pub mod workspace;

/// Current time as Unix epoch milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A new time-ordered id (UUIDv7, lowercase hyphenated).
pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}
