//! Approval requests, grants (scope, expiry, single use) and the audit log.
