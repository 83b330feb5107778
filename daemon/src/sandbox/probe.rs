//! Capability probe for `warden doctor`: which kernel mechanisms work here.
