//! gRPC services: proto <-> domain types, auth of the peer. No business logic.
